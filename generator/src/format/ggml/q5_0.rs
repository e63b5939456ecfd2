//! GGUF Q5_0 (type 6): blocks of 32 values, an f16 scale `d`, a
//! little-endian u32 `qh` of fifth bits (bit `i` belongs to value `i`) and
//! 16 bytes `qs` in Q4_0's nibble order (byte `b`: value `b` low, `b + 16`
//! high); the level is `nibble | fifth bit << 4` and the weight
//! `d * (level - 16)`.
//!
//! The int8 family runs it on the generic 5-bit layout
//! ([`crate::layout::int8`]): unsigned levels 0..32, the offset 16 removed
//! once per block through the activation sums.

use crate::format::ggml::numpy::{argmax_abs, np_cast_i64, read_f16, write_f16};
use crate::format::row::{
    leading_f16_scale, FifthBits, Format, Int8Repack, Levels, NibbleStore, ScaleAt, QK,
};

pub const Q5_0: Format = Format {
    tag: "q5_0",
    name: "Q5_0",
    gguf_type: 6,
    block: QK,
    super_block: QK,
    block_bytes: 2 + 4 + QK / 2,
    bits: 5,
    scales: &[ScaleAt::Bytes(0)],
    levels: Levels::Offset(16),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 5,
        block_levels: levels,
        sub_scale: leading_f16_scale,
        mins: false,
        scales_per_block: 1,
        act_group: 1,
        group_scale: false,
        int_sub_scales: None,
        nibbles: Some(NibbleStore::Q4_0Order { at: 6 }),
        fifth: Some(FifthBits::Word { at: 2 }),
    }),
};

/// The 32 stored 5-bit levels of a block, in order along K.
fn levels(block: &[u8], _sub: usize) -> [u8; QK] {
    five_bit_levels(&block[2..2 + 4 + QK / 2])
}

/// 32 5-bit levels from a little-endian u32 of fifth bits (bit `i`: value
/// `i`) followed by 16 bytes of nibbles in Q4_0's order (Q5_0, Q5_1).
pub(crate) fn five_bit_levels(qh_qs: &[u8]) -> [u8; QK] {
    let qh = u32::from_le_bytes([qh_qs[0], qh_qs[1], qh_qs[2], qh_qs[3]]);
    let qs = &qh_qs[4..4 + QK / 2];
    let mut out = [0u8; QK];
    for i in 0..QK / 2 {
        let fifth = |v: usize| (((qh >> v) & 1) as u8) << 4;
        out[i] = (qs[i] & 0x0F) | fifth(i);
        out[i + QK / 2] = (qs[i] >> 4) | fifth(i + QK / 2);
    }
    out
}

/// Appends 32 5-bit levels as [`five_bit_levels`] reads them: the u32 of
/// fifth bits, then the nibbles (bits above the fifth are dropped).
pub(crate) fn push_five_bit_levels(q: &[u8], out: &mut Vec<u8>) {
    let qh = q
        .iter()
        .enumerate()
        .fold(0u32, |h, (i, &l)| h | (u32::from((l >> 4) & 1) << i));
    out.extend_from_slice(&qh.to_le_bytes());
    for b in 0..QK / 2 {
        out.push((q[b] & 0x0F) | (q[b + QK / 2] << 4));
    }
}

/// One block, as gguf-py's `Q5_0.dequantize_blocks`: `d * (level - 16)` in f32.
fn dequantize(blk: &[u8], out: &mut [f32]) {
    let d = read_f16(blk);
    for (o, l) in out.iter_mut().zip(levels(blk, 0)) {
        *o = d * (l as i8 - 16) as f32;
    }
}

/// One block, as gguf-py's `Q5_0.quantize_blocks`: `d = max / -16` for the
/// first value of largest magnitude (sign kept), `q = min(31, trunc(v / d +
/// 16.5))` in f32 with numpy's cast to uint8, `d` stored as f16.
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    let max = x[argmax_abs(x)];
    let d = max / -16.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let q: Vec<u8> = x
        .iter()
        .map(|&v| (np_cast_i64((v * id + 16.5).trunc()) as u8).min(31))
        .collect();
    write_f16(out, d);
    push_five_bit_levels(&q, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::GgmlType;
    use half::f16;

    /// A block from `d` and 32 levels, encoded by the format's rule.
    fn block(d: f32, lv: &[u8; QK]) -> Vec<u8> {
        let mut b = f16::from_f32(d).to_bits().to_le_bytes().to_vec();
        let qh = (0..QK).fold(0u32, |h, i| h | (u32::from(lv[i] >> 4) << i));
        b.extend_from_slice(&qh.to_le_bytes());
        b.extend((0..QK / 2).map(|i| (lv[i] & 15) | ((lv[i + 16] & 15) << 4)));
        b
    }

    #[test]
    fn row_and_bit_order() {
        assert_eq!(GgmlType::from_id(6), Some(GgmlType::Q5_0));
        assert_eq!(GgmlType::Q5_0.block_bytes(), 22);
        assert_eq!(Q5_0.offset(), 16);
        assert_eq!(Q5_0.level_value(0), -16);
        assert_eq!(Q5_0.level_value(31), 15);
        // Level i * 7 % 32 at value i: every fifth bit and nibble position.
        let lv: [u8; QK] = std::array::from_fn(|i| (i * 7 % 32) as u8);
        let b = block(0.5, &lv);
        assert_eq!(levels(&b, 0), lv);
        let mut w = [0f32; QK];
        dequantize(&b, &mut w);
        for i in 0..QK {
            assert_eq!(w[i], 0.5 * (lv[i] as f32 - 16.0), "value {i}");
        }
        // qh is little-endian: value 8 is bit 0 of byte 3 of the block.
        let mut lv = [0u8; QK];
        lv[8] = 16;
        let b = block(1.0, &lv);
        assert_eq!(b[2..6], [0, 1, 0, 0]);
        assert_eq!(levels(&b, 0)[8], 16);
    }

    #[test]
    fn quantizer_rounding_and_clamp() {
        // max -16 -> d = 1: q = trunc(v + 16.5), clamped to 31.
        let mut x = [0f32; QK];
        x[0] = -16.0;
        x[1] = 0.5; // 17.0 -> 17
        x[2] = -0.5; // 16.0 -> 16 (ties round up)
        x[3] = 15.9; // 32.4 -> 32 -> 31
        x[20] = -15.6; // 0.9 -> 0
        x[31] = 3.0;
        let mut out = Vec::new();
        quantize(&x, &mut out);
        assert_eq!(out.len(), 22);
        assert_eq!(read_f16(&out), 1.0);
        let lv = levels(&out, 0);
        assert_eq!(lv[..4], [0, 17, 16, 31]);
        assert_eq!((lv[20], lv[31], lv[5]), (0, 19, 16));
        // Positive max: d negative, the max maps to level 0.
        let mut x = [0f32; QK];
        x[7] = 4.0;
        x[9] = -4.0; // same magnitude later: the first wins
        let mut out = Vec::new();
        quantize(&x, &mut out);
        assert_eq!(read_f16(&out), -0.25);
        let mut w = [0f32; QK];
        dequantize(&out, &mut w);
        assert_eq!((w[7], w[9], w[0]), (4.0, -3.75, 0.0));
        // All zero: d = -0.0 and every level 16.
        let mut out = Vec::new();
        quantize(&[0.0; QK], &mut out);
        assert_eq!(out[..6], [0x00, 0x80, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert!(out[6..].iter().all(|&b| b == 0));
        // Non-finite inputs never panic; NaN levels are numpy's 0.
        let mut x = [1f32; QK];
        x[4] = f32::NAN;
        let mut out = Vec::new();
        quantize(&x, &mut out);
        assert!(read_f16(&out).is_nan());
        assert_eq!(levels(&out, 0), [0; QK]);
    }
}
