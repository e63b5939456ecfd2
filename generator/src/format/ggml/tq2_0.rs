//! GGUF TQ2_0 (type 35, BitNet b1.58 ternary): super-blocks of 256 values,
//! 66 bytes: 64 bytes `qs` of 2-bit levels in Q2_K's order (value `f` at
//! bits `2 ((f % 128) / 32)` of `qs[32 (f / 128) + f % 32]`) and, last, an
//! f16 `d`. The level `q` is 0, 1 or 2 and the weight `d * (q - 1)`.
//!
//! The int8 family runs it on the 2-bit layout: unsigned levels `q` with
//! the offset 1 and the scale `d` per 32 values, so the `- 1` is removed
//! once per block through the activation sums, as Q4_0's `- 8` is (the
//! kernels take `d_w d_x (sum(q q_x) - sum(q_x))`, exact integer math).
//! Activations share a scale per 256 values (llama.cpp's Q8_K), so with
//! `d` one per 256 values too (`group_scale`) the lane kernels sum a whole
//! super-block in integers before they convert and scale.

use crate::format::ggml::kquant::{crumb, pack_crumbs, sub_block_crumbs, QK_K};
use crate::format::ggml::numpy::{np_cast_i64, read_f16, write_f16};
use crate::format::row::{Format, Int8Repack, Levels, ScaleAt, QK};

pub const TQ2_0: Format = Format {
    tag: "tq2_0",
    name: "TQ2_0",
    gguf_type: 35,
    block: QK_K,
    super_block: QK_K,
    block_bytes: D + 2,
    bits: 2,
    scales: &[ScaleAt::Bytes(D)],
    levels: Levels::Offset(1),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 2,
        block_levels: sub_levels,
        sub_scale: scale,
        mins: false,
        scales_per_block: 1,
        act_group: 8,
        group_scale: true,
        int_sub_scales: None,
        nibbles: None,
        fifth: None,
    }),
};

/// Where `d` starts.
const D: usize = QK_K / 4;

/// Stored level (0..3) of value `f`.
fn level(blk: &[u8], f: usize) -> u8 {
    crumb(blk, f)
}

fn sub_levels(blk: &[u8], s: usize) -> [u8; QK] {
    sub_block_crumbs(blk, s)
}

fn scale(blk: &[u8], s: usize) -> (f32, f32) {
    scale_at(blk, D, s)
}

/// The int8 row's scale of a ternary block whose f16 `d` is at byte `at`
/// (TQ1_0 and TQ2_0): `d` for every 32 values, no min.
pub(crate) fn scale_at(blk: &[u8], at: usize, _s: usize) -> (f32, f32) {
    (read_f16(&blk[at..]), 0.0)
}

/// One super-block, as gguf-py's `TQ2_0.dequantize_blocks`:
/// `d * (q - 1)` in f32.
fn dequantize(blk: &[u8], out: &mut [f32]) {
    ternary_dequantize(blk, D, level, out)
}

/// A ternary super-block (TQ1_0 and TQ2_0) whose f16 `d` is at byte `at`
/// and value `f`'s level is `level(blk, f)`: `d * (q - 1)` in f32.
pub(crate) fn ternary_dequantize(
    blk: &[u8],
    at: usize,
    level: fn(&[u8], usize) -> u8,
    out: &mut [f32],
) {
    let d = read_f16(&blk[at..]);
    for (f, o) in out.iter_mut().enumerate() {
        *o = d * (level(blk, f) as i32 - 1) as f32;
    }
}

/// One super-block, as gguf-py's `TQ2_0.quantize_blocks`: `d = max |x|`,
/// levels `round(x / d) + 1` (half away from zero, with `1 / d` formed
/// first), `d` stored as f16 (see [`ternary_levels`]).
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    let (d, q) = ternary_levels(x);
    let start = out.len();
    out.resize(start + D, 0);
    pack_crumbs(q, &mut out[start..]);
    write_f16(out, d);
}

/// gguf-py's ternary quantization of a super-block (TQ1_0 and TQ2_0): the
/// scale `d = max |x|` (NaN if a value is NaN) and the levels
/// `round(x * (1 / d)) + 1`, 1 where `d` is 0. A block with an infinity or
/// a NaN gets levels 1 (zero weights) and an infinite or NaN `d`, as
/// gguf-py's arithmetic makes them, which loading refuses.
pub(crate) fn ternary_levels(x: &[f32]) -> (f32, [u8; QK_K]) {
    let d = x.iter().fold(0f32, |m, v| {
        if m.is_nan() || v.is_nan() {
            f32::NAN
        } else {
            m.max(v.abs())
        }
    });
    let mut q = [1u8; QK_K];
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    for (o, v) in q.iter_mut().zip(x) {
        // np_roundf is f32::round (half away from zero) for every f32; the
        // cast to int8 is numpy's (an infinite or NaN product of a
        // subnormal block's overflowing 1 / d gives 0), then `+ 1` wraps.
        *o = (np_cast_i64((v * id).round()) as i8).wrapping_add(1) as u8;
    }
    (d, q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::GgmlType;
    use crate::format::rng::Rng;
    use half::f16;

    #[test]
    fn row_order_and_int8_row() {
        assert_eq!(GgmlType::from_id(35), Some(GgmlType::TQ2_0));
        assert_eq!(GgmlType::TQ2_0.block_bytes(), 66);
        let lv: [u8; QK_K] = std::array::from_fn(|f| ((f * 7 + f / 50) % 3) as u8);
        let mut b = vec![0u8; 66];
        for f in 0..QK_K {
            b[32 * (f / 128) + f % 32] |= lv[f] << (2 * (f % 128 / 32));
        }
        b[64..].copy_from_slice(&f16::from_f32(0.375).to_bits().to_le_bytes());
        let mut w = [0f32; QK_K];
        dequantize(&b, &mut w);
        let row = TQ2_0.int8.unwrap();
        for f in 0..QK_K {
            assert_eq!(w[f], 0.375 * (lv[f] as f32 - 1.0), "value {f}");
            let q = (row.block_levels)(&b, f / QK)[f % QK];
            let (d, m) = (row.sub_scale)(&b, f / QK);
            assert_eq!((q, m), (lv[f], 0.0));
            assert_eq!(TQ2_0.level_value(q), lv[f] as i32 - 1);
            let level = TQ2_0.level_value(q) as f32;
            assert_eq!((d * level).to_bits(), w[f].to_bits(), "value {f}");
        }
    }

    #[test]
    fn quantizer_round_trips_ternary_values() {
        // Values on the grid {-d, 0, d} come back exactly.
        let mut rng = Rng::new(5);
        let x: Vec<f32> = (0..QK_K)
            .map(|_| 0.5 * (rng.below(3) as f32 - 1.0))
            .collect();
        let mut out = Vec::new();
        quantize(&x, &mut out);
        assert_eq!(out.len(), 66);
        let mut w = [0f32; QK_K];
        dequantize(&out, &mut w);
        assert_eq!(&w[..], &x[..]);
        // All zero: d = 0, levels 1, weights 0.
        let mut out = Vec::new();
        quantize(&[0.0; QK_K], &mut out);
        dequantize(&out, &mut w);
        assert!(w.iter().all(|&v| v == 0.0));
        // Non-finite: levels 1 and a scale validation refuses.
        for bad in [f32::INFINITY, f32::NAN] {
            let mut x = [0.25f32; QK_K];
            x[9] = bad;
            let mut out = Vec::new();
            quantize(&x, &mut out);
            assert!(!read_f16(&out[D..]).is_finite());
            assert!((0..QK_K).all(|f| level(&out, f) == 1));
        }
    }
}
