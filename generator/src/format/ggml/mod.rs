//! GGML weight blocks as GGUF files store them: one codec file per format
//! (its table row, reference quantizer and dequantizer, bit for bit what
//! gguf-py computes), and the matrix type that holds a tensor of blocks.

pub mod float;
pub mod gguf_image;
pub mod iq1;
pub mod iq2;
pub mod iq3;
pub mod iq4_nl;
pub mod iq4_xs;
mod iq_grids;
pub mod kquant;
pub mod lattice;
pub mod matrix;
pub mod mxfp4;
pub mod numpy;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod tq1_0;
pub mod tq2_0;

pub use crate::format::row::{GgmlType, QK};
pub use crate::format::table::{type_name, type_size, GGML_TYPES};
pub use gguf_image::{
    gguf_header, gguf_header_with, gguf_image, gguf_image_raw, gguf_image_raw_with, Meta,
    GGUF_ALIGN,
};
pub use iq4_nl::VALUES as IQ4_NL_VALUES;
pub use matrix::{GgmlMatrix, GgmlView};

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
