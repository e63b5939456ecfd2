//! GGUF Q5_1 (type 7): blocks of 32 values, an f16 scale `d`, an f16 min
//! `m`, a little-endian u32 `qh` of fifth bits (bit `i` belongs to value
//! `i`) and 16 bytes `qs` in Q4_0's nibble order (byte `b`: value `b` low,
//! `b + 16` high); the level is `nibble | fifth bit << 4` and the weight
//! `d * level + m` with the level in 0..32.
//!
//! The int8 family runs it on the 5-bit layout with unsigned levels; the min
//! is added once per block as `m * d_x * sum(q_x)` through the activation
//! sums, as for Q4_1.

use crate::format::ggml::numpy::{np_cast_i64, write_f16};
use crate::format::ggml::q4_1::{np_max_min, scale_min};
use crate::format::ggml::q5_0::{five_bit_levels, push_five_bit_levels};
use crate::format::row::{FifthBits, Format, Int8Repack, Levels, NibbleStore, ScaleAt, QK};

pub const Q5_1: Format = Format {
    tag: "q5_1",
    name: "Q5_1",
    gguf_type: 7,
    block: QK,
    super_block: QK,
    block_bytes: 2 + 2 + 4 + QK / 2,
    bits: 5,
    scales: &[ScaleAt::Bytes(0), ScaleAt::Bytes(2)],
    levels: Levels::Offset(0),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 5,
        block_levels: levels,
        sub_scale: scale_min,
        mins: true,
        scales_per_block: 1,
        act_group: 1,
        group_scale: false,
        int_sub_scales: None,
        nibbles: Some(NibbleStore::Q4_0Order { at: 8 }),
        fifth: Some(FifthBits::Word { at: 4 }),
    }),
};

/// The 32 stored 5-bit levels of a block, in order along K.
fn levels(block: &[u8], _sub: usize) -> [u8; QK] {
    five_bit_levels(&block[4..4 + 4 + QK / 2])
}

/// One block, as gguf-py's `Q5_1.dequantize_blocks`: `d * level + m` in f32.
fn dequantize(blk: &[u8], out: &mut [f32]) {
    let (d, m) = scale_min(blk, 0);
    for (o, q) in out.iter_mut().zip(levels(blk, 0)) {
        *o = d * q as f32 + m;
    }
}

/// One block, as gguf-py's `Q5_1.quantize_blocks`: `d = (max - min) / 31`
/// and `q = min(31, trunc((v - min) / d + 0.5))` in f32 with numpy's cast
/// to uint8; `d` and `min` stored as f16. `max` / `min` propagate NaN.
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    let (max, min) = np_max_min(x);
    let d = (max - min) / 31.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let q: Vec<u8> = x
        .iter()
        .map(|&v| (np_cast_i64(((v - min) * id + 0.5).trunc()) as u8).min(31))
        .collect();
    write_f16(out, d);
    write_f16(out, min);
    push_five_bit_levels(&q, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::numpy::read_f16;
    use crate::format::ggml::GgmlType;
    use crate::format::rng::Rng;
    use half::f16;

    /// A block from `d`, `m` and 32 levels, encoded by the format's rule.
    fn block(d: f32, m: f32, lv: &[u8; QK]) -> Vec<u8> {
        let mut b = f16::from_f32(d).to_bits().to_le_bytes().to_vec();
        b.extend_from_slice(&f16::from_f32(m).to_bits().to_le_bytes());
        let qh = (0..QK).fold(0u32, |h, i| h | (u32::from(lv[i] >> 4) << i));
        b.extend_from_slice(&qh.to_le_bytes());
        b.extend((0..QK / 2).map(|i| (lv[i] & 15) | ((lv[i + 16] & 15) << 4)));
        b
    }

    #[test]
    fn row_and_bit_order() {
        assert_eq!(GgmlType::from_id(7), Some(GgmlType::Q5_1));
        assert_eq!(GgmlType::Q5_1.block_bytes(), 24);
        assert_eq!(Q5_1.offset(), 0);
        assert_eq!(Q5_1.level_value(31), 31);
        // Level i * 7 % 32 at value i: every fifth bit and nibble position.
        let lv: [u8; QK] = std::array::from_fn(|i| (i * 7 % 32) as u8);
        let b = block(0.5, -3.0, &lv);
        assert_eq!(levels(&b, 0), lv);
        let mut w = [0f32; QK];
        dequantize(&b, &mut w);
        for i in 0..QK {
            assert_eq!(w[i], 0.5 * lv[i] as f32 - 3.0, "value {i}");
        }
        // qh is little-endian after d and m: value 8 is bit 0 of byte 5.
        let mut lv = [0u8; QK];
        lv[8] = 16;
        let b = block(1.0, 0.0, &lv);
        assert_eq!(b[4..8], [0, 1, 0, 0]);
        assert_eq!(levels(&b, 0)[8], 16);
    }

    #[test]
    fn quantizer_rounding_and_edges() {
        // min -1, max 30: d = 1, levels trunc(v + 1 + 0.5).
        let mut x = [0f32; QK];
        x[0] = -1.0;
        x[1] = 30.0;
        x[2] = 0.5; // 2.0 -> 2 (ties round up)
        x[3] = 0.49; // 1.99 -> 1
        x[20] = 14.6; // 16.1 -> 16: a fifth bit in the high nibble half
        let mut out = Vec::new();
        quantize(&x, &mut out);
        assert_eq!(out.len(), 24);
        let (d, m) = scale_min(&out, 0);
        assert_eq!((d, m), (1.0, -1.0));
        let lv = levels(&out, 0);
        assert_eq!(lv[..4], [0, 31, 2, 1]);
        assert_eq!((lv[20], lv[5]), (16, 1));
        let mut w = [0f32; QK];
        dequantize(&out, &mut w);
        for i in 0..QK {
            assert_eq!(w[i], d * lv[i] as f32 + m, "value {i}");
        }
        // Constant block: d = 0, every level 0, the value is the min.
        let mut out = Vec::new();
        quantize(&[-2.5; QK], &mut out);
        assert_eq!(read_f16(&out), 0.0);
        assert!(out[4..].iter().all(|&b| b == 0));
        dequantize(&out, &mut w);
        assert!(w.iter().all(|&v| v == -2.5));
        // NaN: d and m NaN, levels numpy's 0; inf never panics either.
        let mut x = [1f32; QK];
        x[4] = f32::NAN;
        let mut out = Vec::new();
        quantize(&x, &mut out);
        assert!(read_f16(&out).is_nan() && read_f16(&out[2..]).is_nan());
        assert_eq!(levels(&out, 0), [0; QK]);
        x[4] = f32::INFINITY;
        quantize(&x, &mut out);
        assert_eq!(out.len(), 48);
    }

    #[test]
    fn round_trip_within_half_a_step() {
        let mut rng = Rng::new(51);
        for _ in 0..50 {
            let x = rng.vec_f32(QK);
            let mut out = Vec::new();
            quantize(&x, &mut out);
            let (d, m) = scale_min(&out, 0);
            let mut w = [0f32; QK];
            dequantize(&out, &mut w);
            // Half a step, plus f16's rounding of d over 31 steps and of m.
            let tol = d * (0.5 + 31.0 / 2048.0) + m.abs() / 2048.0;
            for (a, b) in x.iter().zip(&w) {
                assert!((a - b).abs() <= tol, "{a} -> {b} (d {d} m {m})");
            }
        }
    }
}
