//! Weight formats: the GPTQ packing, GGML blocks as GGUF stores them, kgen's
//! own symmetric groups, and their reference quantizers and dequantizers.
//!
//! Built without the `codegen` feature: user binaries link this.

pub mod error;
pub mod ggml;
pub mod gptq;
pub mod rng;
pub mod symmetric;

pub use error::FormatError;
pub use gptq::{random_gptq, GptqMatrix};
pub use rng::Rng;
