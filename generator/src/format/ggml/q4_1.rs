//! GGUF Q4_1 (type 3): blocks of 32 values, an f16 scale `d`, an f16 min
//! `m` and 16 bytes in Q4_0's nibble order (byte `b`: value `b` low,
//! `b + 16` high); the weight is `d * q + m` with `q` in 0..16.
//!
//! The int8 family runs it on the 4-bit layout with unsigned levels; the min
//! is added once per block as `m * d_x * sum(q_x)` through the activation
//! sums.

use crate::format::ggml::numpy::{np_cast_i64, read_f16, write_f16};
use crate::format::ggml::q4_0::{q4_0_order, q4_0_pack};
use crate::format::row::{Format, Int8Repack, Levels, NibbleStore, ScaleAt, QK};

pub const Q4_1: Format = Format {
    tag: "q4_1",
    name: "Q4_1",
    gguf_type: 3,
    block: QK,
    super_block: QK,
    block_bytes: 4 + QK / 2,
    bits: 4,
    scales: &[ScaleAt::Bytes(0), ScaleAt::Bytes(2)],
    levels: Levels::Offset(0),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 4,
        block_levels: nibbles,
        sub_scale: scale_min,
        mins: true,
        scales_per_block: 1,
        act_group: 1,
        group_scale: false,
        int_sub_scales: None,
        nibbles: Some(NibbleStore::Q4_0Order { at: 4 }),
        fifth: None,
    }),
};

/// The 32 stored 4-bit levels of a block, in order along K.
fn nibbles(block: &[u8], _sub: usize) -> [u8; QK] {
    q4_0_order(&block[4..])
}

/// `d` and `m` as f32.
pub(crate) fn scale_min(block: &[u8], _sub: usize) -> (f32, f32) {
    (read_f16(block), read_f16(&block[2..]))
}

/// One block, as gguf-py's `Q4_1.dequantize_blocks`: `d * q + m` in f32.
fn dequantize(blk: &[u8], out: &mut [f32]) {
    let (d, m) = scale_min(blk, 0);
    for (o, q) in out.iter_mut().zip(nibbles(blk, 0)) {
        *o = d * q as f32 + m;
    }
}

/// One block, as gguf-py's `Q4_1.quantize_blocks`: `d = (max - min) / 15`
/// and `q = min(15, trunc((v - min) / d + 0.5))` in f32 with numpy's cast
/// to uint8; `d` and `min` stored as f16. `max` / `min` propagate NaN.
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    let (max, min) = np_max_min(x);
    let d = (max - min) / 15.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let q: Vec<u8> = x
        .iter()
        .map(|&v| (np_cast_i64(((v - min) * id + 0.5).trunc()) as u8).min(15))
        .collect();
    write_f16(out, d);
    write_f16(out, min);
    out.extend_from_slice(&q4_0_pack(&q));
}

/// numpy's `max` and `min` of a block: NaN if any value is NaN.
pub(crate) fn np_max_min(x: &[f32]) -> (f32, f32) {
    if x.iter().any(|v| v.is_nan()) {
        return (f32::NAN, f32::NAN);
    }
    x.iter()
        .fold((f32::NEG_INFINITY, f32::INFINITY), |(a, b), &v| {
            (a.max(v), b.min(v))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::GgmlType;

    #[test]
    fn row_levels_and_quantizer() {
        assert_eq!(GgmlType::from_id(3), Some(GgmlType::Q4_1));
        assert_eq!(GgmlType::Q4_1.block_bytes(), 20);
        // min -1, max 2: d = 0.2, levels trunc((v + 1) * 5 + 0.5).
        let mut x = [0f32; QK];
        x[0] = -1.0;
        x[1] = 2.0;
        x[17] = 0.5; // 8.0 -> 8
        let mut out = Vec::new();
        quantize(&x, &mut out);
        assert_eq!(out.len(), 20);
        let lv = nibbles(&out, 0);
        assert_eq!((lv[0], lv[1], lv[17], lv[2]), (0, 15, 8, 5));
        let (d, m) = scale_min(&out, 0);
        assert_eq!((d, m), (half::f16::from_f32(0.2).to_f32(), -1.0));
        let mut w = [0f32; QK];
        dequantize(&out, &mut w);
        for i in 0..QK {
            assert_eq!(w[i], d * lv[i] as f32 + m, "value {i}");
        }
        // Constant block: d = 0, every level 0, the value is the min.
        let mut out = Vec::new();
        quantize(&[3.0; QK], &mut out);
        dequantize(&out, &mut w);
        assert!(w.iter().all(|&v| v == 3.0));
        // NaN never panics.
        let mut x = [1f32; QK];
        x[4] = f32::NAN;
        let mut out = Vec::new();
        quantize(&x, &mut out);
        assert_eq!(out.len(), 20);
    }
}
