//! Weight formats: the format table ([`table`], one [`row::Format`] per
//! format: geometry, levels, reference codec, how the int8 family runs it),
//! the GGML block codecs ([`ggml`]), the GPTQ packing ([`gptq`]), kgen's
//! own symmetric groups ([`symmetric`]) and its own 2- and 1-bit grid
//! formats ([`grid`]).
//!
//! Built without the `codegen` feature: user binaries link this.

pub mod error;
pub mod ggml;
pub mod gptq;
pub mod grid;
pub mod q4_0_g128;
pub mod rng;
pub mod row;
pub mod symmetric;
pub mod table;

pub use error::FormatError;
pub use gptq::{random_gptq, GptqMatrix};
pub use rng::Rng;
pub use row::{Format, GgmlType, Int8Repack, Levels, QK};
pub use table::{by_gguf_type, by_tag, int8_formats, FORMATS};
