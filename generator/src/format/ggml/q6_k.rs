//! GGUF Q6_K (type 14): super-blocks of 256 values in 16 sub-blocks of 16,
//! 210 bytes: 128 bytes `ql` of low nibbles, 64 bytes `qh` of top 2-bit
//! pairs, 16 `i8` sub-block scales `sc` and, last, an f16 `d`. Value `f`
//! lies in half `h = f / 128` at `r = f % 128`: its low 4 bits are nibble
//! `r / 64` of `ql[64 h + r % 64]`, its top 2 bits are bits `2 (r / 32)`
//! of `qh[32 h + r % 32]`. The stored level `q` is 0..64 and the weight
//! `(d * sc) * (q - 32)`, `d * sc` rounded to f32 first, with the scale of
//! sub-block `f / 16`.
//!
//! The int8 family runs it on the 6-bit layout with the stored levels
//! (0..64, offset 32, removed per half block through the activation sums)
//! and two scales per 32 values (`d * sc` of each 16, rounded to f16),
//! folding each half of a block on its own.

use crate::format::ggml::kquant::{fit_scale, nearest_clamped, requantize, signed_max, QK_K};
use crate::format::ggml::numpy::{read_f16, write_f16};
use crate::format::row::{Format, Int8Repack, IntSubScales, Levels, ScaleAt, SubScaleKind, QK};

pub const Q6_K: Format = Format {
    tag: "q6_k",
    name: "Q6_K",
    gguf_type: 14,
    block: QK_K,
    super_block: QK_K,
    block_bytes: D + 2,
    bits: 6,
    scales: &[ScaleAt::Bytes(D)],
    levels: Levels::Offset(32),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 6,
        block_levels: sub_levels,
        sub_scale: sub16_scale,
        mins: false,
        scales_per_block: 2,
        act_group: 8,
        group_scale: false,
        int_sub_scales: Some(IntSubScales {
            at: SC,
            d_at: D,
            dmin_at: None,
            kind: SubScaleKind::Signed,
        }),
        nibbles: None,
        fifth: None,
    }),
};

/// The stored levels (0..64) of 32-value sub-block `s`.
fn sub_levels(blk: &[u8], s: usize) -> [u8; QK] {
    // Sub-block s lies in half h = s / 4 at r = 32 (s % 4) + i: its low
    // nibbles are nibble r / 64 of ql[64 h + r % 64 ..], its top bits the
    // pair at 2 (s % 4) of qh[32 h + i]. The same shifts for all 32.
    let (h, r0) = (s / 4, QK * (s % 4));
    let ql = &blk[64 * h + r0 % 64..][..QK];
    let qh = &blk[QH + 32 * h..][..QK];
    let (ls, hs) = (4 * (r0 / 64), 2 * (s % 4));
    let mut out = [0u8; QK];
    for i in 0..QK {
        out[i] = ((ql[i] >> ls) & 0x0F) | (((qh[i] >> hs) & 3) << 4);
    }
    out
}

/// The scale of 16-value sub-block `s`: `d * sc` in f32, as gguf-py forms it.
fn sub16_scale(blk: &[u8], s: usize) -> (f32, f32) {
    (read_f16(&blk[D..]) * blk[SC + s] as i8 as f32, 0.0)
}

/// Values per sub-block.
const SUB: usize = 16;
/// Where `qh`, the scales and `d` start.
const QH: usize = QK_K / 2;
const SC: usize = QH + QK_K / 4;
const D: usize = SC + QK_K / SUB;

/// The 256 stored levels (0..64), in order along K.
fn levels(blk: &[u8]) -> [u8; QK_K] {
    std::array::from_fn(|f| {
        let (h, r) = (f / 128, f % 128);
        let lo = (blk[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
        let hi = (blk[QH + 32 * h + r % 32] >> (2 * (r / 32))) & 3;
        lo | (hi << 4)
    })
}

/// One super-block, as gguf-py's `Q6_K.dequantize_blocks`:
/// `(d * sc) * (q - 32)` in f32.
fn dequantize(blk: &[u8], out: &mut [f32]) {
    let d = read_f16(&blk[D..]);
    let q = levels(blk);
    for (s, o) in out.chunks_mut(SUB).enumerate() {
        let ds = d * blk[SC + s] as i8 as f32;
        for (i, v) in o.iter_mut().enumerate() {
            *v = ds * (q[SUB * s + i] as i32 - 32) as f32;
        }
    }
}

/// One super-block (kgen's quantizer, as llama.cpp's `quantize_row_q6_K`):
/// per sub-block of 16 the signed scale of [`fit_scale`] for levels
/// -32..32; the scales quantized to `i8` against `d`, which maps the
/// largest in magnitude to -128; the levels rounded again for the stored
/// `d * sc`. An all-zero super-block has `d = 0` and levels 32.
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    if Q6_K.encode_non_finite(x, out) {
        return;
    }
    let mut l = [0i8; QK_K];
    let scales: [f32; QK_K / SUB] = std::array::from_fn(|s| {
        fit_scale(
            &x[SUB * s..SUB * (s + 1)],
            32,
            &mut l[SUB * s..SUB * (s + 1)],
        )
    });
    let max = signed_max(&scales);
    let (d, sc) = if max.abs() < 1e-15 {
        (0.0, [0i8; QK_K / SUB])
    } else {
        let iscale = -128.0 / max;
        (
            1.0 / iscale,
            scales.map(|s| nearest_clamped(iscale * s, -128, 127) as i8),
        )
    };
    let mut dbytes = Vec::new();
    write_f16(&mut dbytes, d);
    let d16 = read_f16(&dbytes);
    for s in 0..QK_K / SUB {
        let ds = d16 * sc[s] as f32;
        requantize(
            &x[SUB * s..SUB * (s + 1)],
            ds,
            32,
            &mut l[SUB * s..SUB * (s + 1)],
        );
    }
    let q: [u8; QK_K] = l.map(|v| (v as i32 + 32) as u8);
    let start = out.len();
    out.resize(start + Q6_K.block_bytes, 0);
    let blk = &mut out[start..];
    for (f, &v) in q.iter().enumerate() {
        let (h, r) = (f / 128, f % 128);
        blk[64 * h + r % 64] |= (v & 0x0F) << (4 * (r / 64));
        blk[QH + 32 * h + r % 32] |= (v >> 4) << (2 * (r / 32));
    }
    for (b, s) in blk[SC..D].iter_mut().zip(sc) {
        *b = s as u8;
    }
    blk[D..].copy_from_slice(&dbytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::kquant::rms_error;
    use crate::format::ggml::GgmlType;
    use half::f16;

    #[test]
    fn row_and_bit_order() {
        assert_eq!(GgmlType::from_id(14), Some(GgmlType::Q6_K));
        assert_eq!(GgmlType::Q6_K.block_bytes(), 210);
        assert_eq!(Q6_K.scales, [ScaleAt::Bytes(208)]);
        // Stored levels 0..64 are q - 32.
        assert_eq!(Q6_K.level_value(0), -32);
        assert_eq!(Q6_K.level_value(63), 31);
        // Level of value f: f * 5 % 64; scales -8 + s, d = 0.5.
        let lv: [u8; QK_K] = std::array::from_fn(|f| (f * 5 % 64) as u8);
        let mut b = vec![0u8; 210];
        for (f, &l) in lv.iter().enumerate() {
            let (h, r) = (f / 128, f % 128);
            b[64 * h + r % 64] |= (l & 15) << (4 * (r / 64));
            b[128 + 32 * h + r % 32] |= (l >> 4) << (2 * (r / 32));
        }
        for s in 0..16 {
            b[192 + s] = (s as i8 - 8) as u8;
        }
        b[208..].copy_from_slice(&f16::from_f32(0.5).to_bits().to_le_bytes());
        assert_eq!(levels(&b), lv);
        // The int8 row: each 32 values' levels and each 16's scale
        // give the dequantized weights bit for bit.
        let mut w = [0f32; QK_K];
        dequantize(&b, &mut w);
        for s in 0..8 {
            let sl = sub_levels(&b, s);
            for i in 0..QK {
                let (d, m) = sub16_scale(&b, 2 * s + i / 16);
                assert_eq!(m, 0.0);
                let v = d * Q6_K.level_value(sl[i]) as f32;
                assert_eq!(v.to_bits(), w[QK * s + i].to_bits(), "value {}", QK * s + i);
            }
        }
        // Value 200 (half 1, r 72): high nibble of ql[72], bits 4..6 of
        // qh[32 + 8].
        assert_eq!(b[72] >> 4, lv[200] & 15);
        assert_eq!((b[128 + 40] >> 4) & 3, lv[200] >> 4);
        let mut w = [0f32; QK_K];
        dequantize(&b, &mut w);
        for f in 0..QK_K {
            let want = (0.5 * (f as i32 / 16 - 8) as f32) * (lv[f] as i32 - 32) as f32;
            assert_eq!(w[f].to_bits(), want.to_bits(), "value {f}");
        }
    }

    #[test]
    fn integer_sub_scales_give_the_weights() {
        // The file's i8 scales as they are.
        let pair = |b: &[u8], s: usize| [b[SC + 2 * s], b[SC + 2 * s + 1]];
        crate::format::ggml::kquant::check_signed_int_sub_scales(&Q6_K, D, levels, pair, 23);
    }

    #[test]
    fn quantizer_error_and_edges() {
        let rel = rms_error(&Q6_K, 6);
        let mut w = [0f32; QK_K];
        // llama.cpp's quantizer gets 0.0175 on 4096 such values: within 10%.
        assert!(rel < 0.019, "relative RMS error {rel}");
        // Values on a grid come back exactly: 0.25 * l for l in -32..32,
        // -8 first in every sub-block (the scale maps it to -32).
        let x: Vec<f32> = (0..QK_K)
            .map(|f| 0.25 * ((f * 13 % 64 * usize::from(f % 16 != 0)) as f32 - 32.0))
            .collect();
        let mut out = Vec::new();
        quantize(&x, &mut out);
        dequantize(&out, &mut w[..QK_K]);
        assert_eq!(&w[..QK_K], &x[..]);
        // All zero: d = 0, levels 32, values +0.
        let mut out = Vec::new();
        quantize(&[0.0; QK_K], &mut out);
        assert_eq!(read_f16(&out[D..]), 0.0);
        assert_eq!(levels(&out), [32; QK_K]);
        dequantize(&out, &mut w[..QK_K]);
        assert!(w[..QK_K].iter().all(|v| v.to_bits() == 0));
        // Non-finite: NaN d, everything else 0 (huge and tiny finite
        // values: the format table's quantizers_take_extreme_finite_values).
        let mut x = [1f32; QK_K];
        x[7] = f32::NEG_INFINITY;
        let mut out = Vec::new();
        quantize(&x, &mut out);
        assert!(read_f16(&out[D..]).is_nan() && out[..D].iter().all(|&b| b == 0));
    }
}
