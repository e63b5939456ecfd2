//! kgen's own 4-bit format with one f16 scale per 128 values (not a GGUF
//! type): how the int8 family holds 4-bit GPTQ groups of a multiple of 128
//! (or one per column). It sits outside `format::ggml` so the table can
//! hold it without a module cycle.

use crate::format::ggml::numpy::{read_f16, write_f16};
use crate::format::ggml::q4_0::{q4_0_order, q4_0_pack};
use crate::format::row::{
    leading_f16_scale, Format, Int8Repack, Levels, NibbleStore, ScaleAt, OWN_TYPE_BASE, QK,
};

/// Values per [`Q4_0_G128`] block: one scale's group.
pub const G128: usize = 128;

/// kgen's own 4-bit groups of 128 (not a GGUF type): an f16 `d`, then the
/// four 32-value sub-blocks' levels, 16 bytes each in Q4_0's nibble order;
/// the weight is `d (q - 8)`. The activations share a scale per 128 values
/// (`act_group` 4), so with the weight scale one per 128 too the lane
/// kernels fold a group in integers and scale it once.
pub const Q4_0_G128: Format = Format {
    tag: "q4_0_g128",
    name: "Q4_0_G128",
    gguf_type: OWN_TYPE_BASE + 4,
    block: G128,
    super_block: G128,
    block_bytes: 2 + G128 / 2,
    bits: 4,
    scales: &[ScaleAt::Bytes(0)],
    levels: Levels::Offset(8),
    dequantize: dequantize_g128,
    quantize: quantize_g128,
    int8: Some(Int8Repack {
        layout_bits: 4,
        block_levels: g128_levels,
        sub_scale: leading_f16_scale,
        mins: false,
        scales_per_block: 1,
        act_group: G128 / QK,
        group_scale: true,
        int_sub_scales: None,
        nibbles: Some(NibbleStore::Q4_0Order { at: 2 }),
        fifth: None,
    }),
};

/// Sub-block `s`'s 32 levels.
fn g128_levels(block: &[u8], s: usize) -> [u8; QK] {
    q4_0_order(&block[2 + 16 * s..])
}

fn dequantize_g128(blk: &[u8], out: &mut [f32]) {
    let d = read_f16(blk);
    for s in 0..G128 / QK {
        for (o, q) in out[s * QK..(s + 1) * QK]
            .iter_mut()
            .zip(g128_levels(blk, s))
        {
            *o = d * (q as i32 - 8) as f32;
        }
    }
}

/// One block, as
/// [`quantize_symmetric`](crate::format::symmetric::quantize_symmetric)
/// quantizes a 4-bit group (Q4_0's
/// convention over the group: the value of largest magnitude maps to -8).
fn quantize_g128(x: &[f32], out: &mut Vec<u8>) {
    let d = q4_scale(x);
    write_f16(out, d);
    let at = out.len();
    out.resize(at + G128 / 2, 0);
    put_q4_levels(x, d, &mut out[at..]);
}

/// The 4-bit scale of a group: its value of largest magnitude maps to -8.
pub(crate) fn q4_scale(vals: &[f32]) -> f32 {
    let (_, max) = vals.iter().fold((0f32, 0f32), |(a, m), &v| {
        if v.abs() > a {
            (v.abs(), v)
        } else {
            (a, m)
        }
    });
    max / -8.0
}

/// The levels of `v` (whole 32-value sub-blocks) at scale `d`, into
/// `out` in Q4_0's nibble order, 16 bytes per sub-block.
pub(crate) fn put_q4_levels(v: &[f32], d: f32, out: &mut [u8]) {
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
    for (v, out) in v.chunks_exact(QK).zip(out.chunks_exact_mut(QK / 2)) {
        let levels: [u8; QK] = std::array::from_fn(|i| q(v[i]));
        out.copy_from_slice(&q4_0_pack(&levels));
    }
}
