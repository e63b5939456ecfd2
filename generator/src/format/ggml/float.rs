//! The unquantized GGUF types F32 (type 0) and F16 (type 1): one value per
//! "block", little-endian; F16 rounds to nearest even as numpy's
//! `astype(np.float16)`.

use crate::format::ggml::numpy::{read_f16, write_f16};
use crate::format::row::{Format, Levels};

pub const F32: Format = Format {
    tag: "f32",
    name: "F32",
    gguf_type: 0,
    block: 1,
    super_block: 1,
    block_bytes: 4,
    bits: 32,
    scales: &[],
    levels: Levels::Float,
    dequantize: |b, out| out[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
    quantize: |x, out| out.extend_from_slice(&x[0].to_le_bytes()),
    int8: None,
};

pub const F16: Format = Format {
    tag: "f16",
    name: "F16",
    gguf_type: 1,
    block: 1,
    super_block: 1,
    block_bytes: 2,
    bits: 16,
    scales: &[],
    levels: Levels::Float,
    dequantize: |b, out| out[0] = read_f16(b),
    quantize: |x, out| write_f16(out, x[0]),
    int8: None,
};
