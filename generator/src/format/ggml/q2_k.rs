//! GGUF Q2_K (type 10): super-blocks of 256 values in 16 sub-blocks of 16,
//! 84 bytes: 16 bytes of 4-bit sub-block scales `sc` (low nibble) and mins
//! `m` (high nibble), 64 bytes `qs` of 2-bit levels and, last, an f16 `d`
//! and an f16 `dmin`. Value `f` has its level `q` (0..4) at bits
//! `2 ((f % 128) / 32)` of `qs[32 (f / 128) + f % 32]`; the weight is
//! `(d * sc) * q - (dmin * m)`, each product rounded to f32 first, with the
//! scale and min of sub-block `f / 16`.
//!
//! The int8 family runs it on the 2-bit layout with unsigned levels (0..4)
//! and two scales and two mins per 32 values (`d * sc` and `-(dmin * m)` of
//! each 16, rounded to f16): each half of a block is folded on its own and
//! its min added through the activations' sum of that half (2 bits of f16
//! scales and mins per value, 4 in all, where the file has 0.625 and
//! 2.625). Kernels on ISAs that keep integer sub-scales (AVX2, AVX-512
//! VNNI) read the
//! file's scale-and-min bytes instead, under the super-block's f16 `d`
//! and `dmin` ([`IntSubScales`]: 1 bit of scales per value, 3 in all).

use crate::format::ggml::kquant::{
    crumb, fit_scale_min, pack_crumbs, quantize_scales, requantize_min, sub_block_crumbs, Search,
    QK_K,
};
use crate::format::ggml::numpy::{read_f16, write_f16};
use crate::format::row::{Format, Int8Repack, IntSubScales, Levels, ScaleAt, SubScaleKind, QK};

pub const Q2_K: Format = Format {
    tag: "q2_k",
    name: "Q2_K",
    gguf_type: 10,
    block: QK_K,
    super_block: QK_K,
    block_bytes: D + 4,
    bits: 2,
    scales: &[ScaleAt::Bytes(D), ScaleAt::Bytes(D + 2)],
    levels: Levels::Offset(0),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 2,
        block_levels: sub_levels,
        sub_scale: sub16_scale,
        mins: true,
        scales_per_block: 2,
        act_group: 8,
        group_scale: false,
        int_sub_scales: Some(IntSubScales {
            at: 0,
            d_at: D,
            dmin_at: Some(D + 2),
            kind: SubScaleKind::Nibbles,
        }),
        nibbles: None,
        fifth: None,
    }),
};

/// The stored levels (0..4) of 32-value sub-block `s`, in order along K.
fn sub_levels(blk: &[u8], s: usize) -> [u8; QK] {
    sub_block_crumbs(&blk[QS..], s)
}

/// The int8 row's scale and min of 16-value sub-block `s`: `d * sc_s` and
/// `-(dmin * m_s)` in f32, so that its weights are `scale * q + min` bit
/// for bit as gguf-py's `(d * sc) * q - (dmin * m)` (for finite scales).
fn sub16_scale(blk: &[u8], s: usize) -> (f32, f32) {
    let (d, dmin) = (read_f16(&blk[D..]), read_f16(&blk[D + 2..]));
    (d * (blk[s] & 0x0F) as f32, -(dmin * (blk[s] >> 4) as f32))
}

/// Values per sub-block.
const SUB: usize = 16;
/// Where `qs` and `d` start (`dmin` follows `d`).
const QS: usize = QK_K / SUB;
const D: usize = QS + QK_K / 4;

/// Stored level (0..4) of value `f`.
fn level(blk: &[u8], f: usize) -> u8 {
    crumb(&blk[QS..], f)
}

/// One super-block, as gguf-py's `Q2_K.dequantize_blocks`:
/// `(d * sc) * q - (dmin * m)` in f32.
fn dequantize(blk: &[u8], out: &mut [f32]) {
    let (d, dmin) = (read_f16(&blk[D..]), read_f16(&blk[D + 2..]));
    for (s, o) in out.chunks_mut(SUB).enumerate() {
        let dl = d * (blk[s] & 0x0F) as f32;
        let ml = dmin * (blk[s] >> 4) as f32;
        for (i, v) in o.iter_mut().enumerate() {
            *v = dl * level(blk, SUB * s + i) as f32 - ml;
        }
    }
}

/// The scale search of Q2_K's sub-blocks (llama.cpp's for levels 0..=3,
/// weighted absolute error).
const SEARCH: Search = Search {
    rmin: -0.5,
    rdelta: 0.1,
    steps: 15,
    abs_error: true,
};

/// One super-block (kgen's quantizer, as llama.cpp's `quantize_row_q2_K`):
/// per sub-block of 16 the scale and min of [`fit_scale_min`] with weights
/// `|v|`; scales and mins quantized to 4 bits against `d = max scale / 15`
/// and `dmin = max min / 15` (stored as f16); the levels rounded again for
/// the stored `d * sc` and `dmin * m`.
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    if Q2_K.encode_non_finite(x, out) {
        return;
    }
    let mut q = [0u8; QK_K];
    let mut scales = [0f32; QK_K / SUB];
    let mut mins = [0f32; QK_K / SUB];
    for s in 0..QK_K / SUB {
        let xs = &x[SUB * s..SUB * (s + 1)];
        let w: Vec<f32> = xs.iter().map(|v| v.abs()).collect();
        (scales[s], mins[s]) = fit_scale_min(xs, &w, 3, SEARCH, &mut q[SUB * s..SUB * (s + 1)]);
    }
    let (d, sc) = quantize_scales(&scales, 15);
    let (dmin, m) = quantize_scales(&mins, 15);
    let mut dd = Vec::new();
    write_f16(&mut dd, d);
    write_f16(&mut dd, dmin);
    let (d16, dmin16) = (read_f16(&dd), read_f16(&dd[2..]));
    for s in 0..QK_K / SUB {
        let (ds, ms) = (d16 * sc[s] as f32, dmin16 * m[s] as f32);
        requantize_min(
            &x[SUB * s..SUB * (s + 1)],
            ds,
            ms,
            3,
            &mut q[SUB * s..SUB * (s + 1)],
        );
    }
    out.extend((0..QK_K / SUB).map(|s| sc[s] | (m[s] << 4)));
    let start = out.len();
    out.resize(start + QK_K / 4, 0);
    pack_crumbs(q, &mut out[start..]);
    out.extend_from_slice(&dd);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::kquant::rms_error;
    use crate::format::ggml::GgmlType;
    use crate::format::rng::Rng;
    use half::f16;

    #[test]
    fn row_and_bit_order() {
        assert_eq!(GgmlType::from_id(10), Some(GgmlType::Q2_K));
        assert_eq!(GgmlType::Q2_K.block_bytes(), 84);
        assert_eq!(Q2_K.scales, [ScaleAt::Bytes(80), ScaleAt::Bytes(82)]);
        let lv: [u8; QK_K] = std::array::from_fn(|f| ((f * 3 % 4) ^ (f / 64 % 4)) as u8);
        let mut b = vec![0u8; 84];
        for (s, b) in b[..16].iter_mut().enumerate() {
            *b = (s as u8) | ((15 - s as u8) << 4);
        }
        for f in 0..QK_K {
            b[16 + 32 * (f / 128) + f % 32] |= lv[f] << (2 * (f % 128 / 32));
        }
        b[80..82].copy_from_slice(&f16::from_f32(0.125).to_bits().to_le_bytes());
        b[82..].copy_from_slice(&f16::from_f32(0.1).to_bits().to_le_bytes());
        // Value 161 (half 1, r 33): bits 2..4 of qs[32 + 1].
        assert_eq!((b[16 + 33] >> 2) & 3, lv[161]);
        let dmin = f16::from_f32(0.1).to_f32();
        let mut w = [0f32; QK_K];
        dequantize(&b, &mut w);
        for f in 0..QK_K {
            assert_eq!(level(&b, f), lv[f]);
            let s = f / 16;
            let want = (0.125 * s as f32) * lv[f] as f32 - dmin * (15 - s) as f32;
            assert_eq!(w[f].to_bits(), want.to_bits(), "value {f}");
        }
    }

    /// A block of random bytes with `d` and `dmin` across f16's range.
    fn random_block(rng: &mut Rng) -> Vec<u8> {
        let mut b: Vec<u8> = (0..84).map(|_| rng.below(256) as u8).collect();
        for at in [D, D + 2] {
            let v = 2f32.powi(rng.below(40) as i32 - 24) * rng.f32();
            b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
        }
        b
    }

    #[test]
    fn int8_row_gives_the_weights_bit_for_bit() {
        // Random blocks, d and dmin across f16's range: each 32 values'
        // levels and each 16's scale and min give gguf-py's weights.
        let mut rng = Rng::new(21);
        let row = Q2_K.int8.expect("int8 row");
        let mut w = [0f32; QK_K];
        for t in 0..300 {
            let b = random_block(&mut rng);
            dequantize(&b, &mut w);
            for s in 0..QK_K / QK {
                for (i, q) in (row.block_levels)(&b, s).into_iter().enumerate() {
                    let f = QK * s + i;
                    let (d, m) = (row.sub_scale)(&b, f / 16);
                    assert_eq!(q, level(&b, f));
                    assert_eq!(
                        (d * q as f32 + m).to_bits(),
                        w[f].to_bits(),
                        "block {t} value {f}"
                    );
                }
            }
        }
        assert_eq!((row.scale_entries(), row.sums_per_block()), (4, 2));
    }

    #[test]
    fn integer_sub_scales_give_the_weights() {
        // The file's bytes and f16 d / dmin, taken exactly, give gguf-py's
        // weights up to its f32 rounding of `d * sc` and `dmin * m`.
        let mut rng = Rng::new(22);
        let int = Q2_K
            .int8
            .and_then(|r| r.int_sub_scales)
            .expect("int sub-scales");
        let mut w = [0f32; QK_K];
        for t in 0..300 {
            let b = random_block(&mut rng);
            dequantize(&b, &mut w);
            for (f, &want) in w.iter().enumerate() {
                let (d, m) = int.exact(&b, f / 16);
                let q = level(&b, f) as f64;
                let got = d * q + m;
                let tol = 4.0 * f32::EPSILON as f64 * (d.abs() * q + m.abs()) + 1e-45;
                assert!((got - want as f64).abs() <= tol, "block {t} value {f}");
            }
        }
    }

    #[test]
    fn quantizer_error_and_edges() {
        let rel = rms_error(&Q2_K, 8);
        // llama.cpp's quantizer gets 0.296 on 4096 such values: within 10%.
        assert!(rel < 0.326, "relative RMS error {rel}");
        // All zero: every byte 0, values +0.
        let mut out = Vec::new();
        quantize(&[0.0; QK_K], &mut out);
        assert!(out.iter().all(|&b| b == 0));
        // Non-finite: NaN d and dmin, everything else 0; huge and tiny
        // never panic.
        let mut x = [1f32; QK_K];
        x[200] = f32::INFINITY;
        let mut out = Vec::new();
        quantize(&x, &mut out);
        assert!(read_f16(&out[D..]).is_nan() && read_f16(&out[D + 2..]).is_nan());
        assert!(out[..D].iter().all(|&b| b == 0));
    }
}
