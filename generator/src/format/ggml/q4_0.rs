//! GGUF Q4_0 (type 2): blocks of 32 values, an f16 scale `d` and 16 bytes;
//! byte `b` holds value `b` in its low nibble and `b + 16` in its high one;
//! the weight is `d * (nibble - 8)`.

use crate::format::ggml::numpy::{argmax_abs, np_cast_i64, read_f16, write_f16};
use crate::format::row::{leading_f16_scale, Format, Int8Repack, Levels, NibbleStore, ScaleAt, QK};

pub const Q4_0: Format = Format {
    tag: "q4_0",
    name: "Q4_0",
    gguf_type: 2,
    block: QK,
    super_block: QK,
    block_bytes: 2 + QK / 2,
    bits: 4,
    scales: &[ScaleAt::Bytes(0)],
    levels: Levels::Offset(8),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 4,
        block_levels: nibbles,
        sub_scale: leading_f16_scale,
        mins: false,
        scales_per_block: 1,
        act_group: 1,
        group_scale: false,
        int_sub_scales: None,
        nibbles: Some(NibbleStore::Q4_0Order { at: 2 }),
        fifth: None,
    }),
};

/// The 32 stored 4-bit levels of a block in Q4_0's nibble order (IQ4_NL
/// stores its indices the same way).
pub(crate) fn nibbles(block: &[u8], _sub: usize) -> [u8; QK] {
    q4_0_order(&block[2..])
}

/// The 32 4-bit values of the 16 bytes that start `qs`, in Q4_0's order:
/// byte `i` holds value `i` (low nibble) and value `i + 16` (high). Q4_0,
/// IQ4_NL, Q4_1 and IQ4_XS's sub-blocks store their levels so.
pub(crate) fn q4_0_order(qs: &[u8]) -> [u8; QK] {
    let mut out = [0u8; QK];
    for (i, &b) in qs[..QK / 2].iter().enumerate() {
        out[i] = b & 0x0F;
        out[i + QK / 2] = b >> 4;
    }
    out
}

/// The 16 bytes of 32 4-bit levels in Q4_0's order (the inverse of
/// [`q4_0_order`]): byte `i` holds level `i` low and level `i + 16` high.
pub fn q4_0_pack(q: &[u8]) -> [u8; QK / 2] {
    std::array::from_fn(|i| q[i] | (q[i + QK / 2] << 4))
}

fn dequantize(blk: &[u8], out: &mut [f32]) {
    let d = read_f16(blk);
    for (b, &byte) in blk[2..2 + QK / 2].iter().enumerate() {
        out[b] = d * ((byte & 0x0f) as i8 - 8) as f32;
        out[b + QK / 2] = d * ((byte >> 4) as i8 - 8) as f32;
    }
}

/// One block, as gguf-py's `Q4_0.quantize_blocks`.
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    let max = x[argmax_abs(x)];
    let d = max / -8.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let q = |v: f32| -> u8 { (np_cast_i64((v * id + 8.5).trunc()) as u8).min(15) };
    write_f16(out, d);
    for b in 0..QK / 2 {
        out.push(q(x[b]) | (q(x[b + QK / 2]) << 4));
    }
}
