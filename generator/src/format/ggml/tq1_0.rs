//! GGUF TQ1_0 (type 34, BitNet b1.58 ternary at 1.69 bits): super-blocks
//! of 256 values, 54 bytes: 48 bytes `qs` and 4 bytes `qh` of base-3 digits
//! and, last, an f16 `d`. A byte holds five levels (four in `qh`) as the
//! fixed-point fraction `ceil(256 v / 243)` of `v = sum q_p 3^(4 - p)`;
//! digit `p` is `((byte * 3^p mod 256) * 3) >> 8`. Byte `i` of `qs[..32]`
//! holds values `32 p + i`, of `qs[32..]` values `160 + 16 p + i`, of `qh`
//! values `240 + 4 p + i`. The level `q` is 0, 1 or 2 and the weight
//! `d * (q - 1)`.
//!
//! The int8 family runs it as TQ2_0: the digits are decoded at repack to
//! unsigned levels on the 2-bit layout with the offset 1 and the scale `d`
//! per 32 values.

use crate::format::ggml::kquant::QK_K;
use crate::format::ggml::numpy::write_f16;
use crate::format::ggml::tq2_0::{scale_at, ternary_dequantize, ternary_levels};
use crate::format::row::{Format, Int8Repack, Levels, ScaleAt, QK};

pub const TQ1_0: Format = Format {
    tag: "tq1_0",
    name: "TQ1_0",
    gguf_type: 34,
    block: QK_K,
    super_block: QK_K,
    block_bytes: D + 2,
    // Ternary levels, repacked as 2-bit ones.
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

/// Where `qh` and `d` start.
const QH: usize = 48;
const D: usize = QH + 4;
const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// Byte and digit of value `f`.
fn place(f: usize) -> (usize, usize) {
    match f {
        0..160 => (f % 32, f / 32),
        160..240 => (32 + (f - 160) % 16, (f - 160) / 16),
        _ => (QH + (f - 240) % 4, (f - 240) / 4),
    }
}

/// Stored level (0..3) of value `f`, as gguf-py extracts it.
fn level(blk: &[u8], f: usize) -> u8 {
    let (byte, p) = place(f);
    let v = blk[byte].wrapping_mul(POW3[p]);
    ((v as u16 * 3) >> 8) as u8
}

fn sub_levels(blk: &[u8], s: usize) -> [u8; QK] {
    std::array::from_fn(|i| level(blk, QK * s + i))
}

fn scale(blk: &[u8], s: usize) -> (f32, f32) {
    scale_at(blk, D, s)
}

/// One super-block, as gguf-py's `TQ1_0.dequantize_blocks`:
/// `d * (q - 1)` in f32.
fn dequantize(blk: &[u8], out: &mut [f32]) {
    ternary_dequantize(blk, D, level, out)
}

/// One super-block, as gguf-py's `TQ1_0.quantize_blocks`: the levels of
/// [`ternary_levels`] packed five (four in `qh`) to a byte.
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    let (d, q) = ternary_levels(x);
    let mut v = [0u16; D];
    for (f, &l) in q.iter().enumerate() {
        let (byte, p) = place(f);
        v[byte] += l as u16 * POW3[4 - p] as u16;
    }
    out.extend(v.iter().map(|&v| (v * 256).div_ceil(243) as u8));
    write_f16(out, d);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::GgmlType;
    use crate::format::rng::Rng;

    #[test]
    fn digits_round_trip_and_int8_row() {
        assert_eq!(GgmlType::from_id(34), Some(GgmlType::TQ1_0));
        assert_eq!(GgmlType::TQ1_0.block_bytes(), 54);
        // Every value's place is distinct and covers the 52 level bytes.
        let mut seen = std::collections::HashSet::new();
        for f in 0..QK_K {
            assert!(seen.insert(place(f)), "value {f}");
        }
        assert_eq!(seen.iter().map(|p| p.0).max(), Some(D - 1));
        let mut rng = Rng::new(11);
        for _ in 0..50 {
            let x: Vec<f32> = (0..QK_K)
                .map(|_| 0.75 * (rng.below(3) as f32 - 1.0))
                .collect();
            let mut out = Vec::new();
            quantize(&x, &mut out);
            assert_eq!(out.len(), 54);
            let mut w = [0f32; QK_K];
            dequantize(&out, &mut w);
            assert_eq!(&w[..], &x[..]);
            let row = TQ1_0.int8.unwrap();
            for (f, wf) in w.iter().enumerate() {
                let q = (row.block_levels)(&out, f / QK)[f % QK];
                let (d, m) = (row.sub_scale)(&out, f / QK);
                let level = TQ1_0.level_value(q) as f32;
                assert_eq!(m, 0.0);
                assert_eq!((d * level).to_bits(), wf.to_bits(), "value {f}");
            }
        }
    }
}
