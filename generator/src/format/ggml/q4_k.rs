//! GGUF Q4_K (type 12): super-blocks of 256 values in 8 sub-blocks of 32,
//! 144 bytes: an f16 `d`, an f16 `dmin`, 12 bytes of 6-bit sub-block
//! scales `sc` and mins `m` (packed as ggml's `get_scale_min_k4`,
//! `kquant::scale_min_k4`) and 128 bytes `qs` of 4-bit levels: bytes
//! `32 j .. 32 j + 32` hold sub-block `2 j` in their low nibbles and `2 j +
//! 1` in their high ones, value `i` of the sub-block in byte `i`. The weight
//! is `(d * sc) * q - (dmin * m)`, each product rounded to f32 first.
//!
//! The int8 family runs it per 32-value sub-block on the 4-bit layout with
//! unsigned levels: sub-block `s` has the scale `d * sc_s` and the min
//! `-(dmin * m_s)`, added through the activation sums as Q4_1's. Kernels
//! on ISAs that keep integer sub-scales (AVX2) read the 6-bit scale and
//! min bytes instead, under the super-block's f16 `d` and `dmin`
//! ([`INT_SUB_SCALES`]).
//!
//! gguf-py cannot quantize Q4_K; kgen's quantizer follows llama.cpp's
//! method ([`crate::format::ggml::kquant`]).

use crate::format::ggml::kquant::{
    fit_scale_min, pack_scale_min_k4, quantize_scales, requantize_min, scale_min_k4, Search, QK_K,
};
use crate::format::ggml::numpy::{read_f16, write_f16};
use crate::format::row::{
    Format, Int8Repack, IntSubScales, Levels, NibbleStore, ScaleAt, SubScaleKind, QK,
};

pub const Q4_K: Format = Format {
    tag: "q4_k",
    name: "Q4_K",
    gguf_type: 12,
    block: QK_K,
    super_block: QK_K,
    block_bytes: HEADER + QK_K / 2,
    bits: 4,
    scales: &[ScaleAt::Bytes(0), ScaleAt::Bytes(2)],
    levels: Levels::Offset(0),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 4,
        block_levels: levels,
        sub_scale,
        mins: true,
        scales_per_block: 1,
        act_group: 8,
        group_scale: false,
        int_sub_scales: Some(INT_SUB_SCALES),
        nibbles: Some(NibbleStore::Planes { at: HEADER }),
        fifth: None,
    }),
};

/// Q4_K's and Q5_K's integer sub-scales: sub-block `s`'s 6-bit scale and
/// min as bytes `2s` and `2s + 1`, under the super-block's `d` and `dmin`.
pub(crate) const INT_SUB_SCALES: IntSubScales = IntSubScales {
    at: 4,
    d_at: 0,
    dmin_at: Some(2),
    kind: SubScaleKind::ScaleMin,
};

/// Bytes before the levels: `d`, `dmin` and the packed scales and mins
/// (Q4_K and Q5_K).
pub(crate) const HEADER: usize = 2 + 2 + 12;

/// Sub-blocks per super-block.
const SUBS: usize = QK_K / QK;

/// Sub-block `s`'s `d * sc_s` and `dmin * m_s`, in f32 as gguf-py forms
/// them (Q4_K and Q5_K): its weights are `d * sc_s * q - dmin * m_s`.
pub(crate) fn scale_and_min(block: &[u8], s: usize) -> (f32, f32) {
    let (sc, m) = scale_min_k4(&block[4..HEADER], s);
    (
        read_f16(block) * sc as f32,
        read_f16(&block[2..]) * m as f32,
    )
}

/// The int8 row's scale and min of sub-block `s`: `d * sc_s` and
/// `-(dmin * m_s)`, so that its weights are `scale * q + min` (Q4_K and
/// Q5_K; for finite scales, `a * q + -b` is `a * q - b` bit for bit).
pub(crate) fn sub_scale(block: &[u8], s: usize) -> (f32, f32) {
    let (d, m) = scale_and_min(block, s);
    (d, -m)
}

/// The 32 stored 4-bit levels of sub-block `s`, in order along K (also
/// Q5_K's low 4 bits, from its `qs`).
pub(crate) fn nibbles(qs: &[u8], s: usize) -> [u8; QK] {
    // Sixteen bytes at a time: the repack runs this for every column and
    // sub-block. Bits a shift brings in from the next byte land above the
    // mask.
    const LOW: u128 = u128::from_le_bytes([0x0F; 16]);
    let bytes = &qs[QK * (s / 2)..QK * (s / 2 + 1)];
    let shift = 4 * (s % 2);
    let half = |at: usize| {
        let v = u128::from_le_bytes(bytes[at..at + 16].try_into().expect("16 bytes"));
        ((v >> shift) & LOW).to_le_bytes()
    };
    let mut out = [0u8; QK];
    out[..16].copy_from_slice(&half(0));
    out[16..].copy_from_slice(&half(16));
    out
}

fn levels(block: &[u8], s: usize) -> [u8; QK] {
    nibbles(&block[HEADER..], s)
}

/// One super-block, as gguf-py's `Q4_K.dequantize_blocks`:
/// `(d * sc) * q - (dmin * m)` in f32.
fn dequantize(blk: &[u8], out: &mut [f32]) {
    // `- m`, not `+ (-m)`: the same for finite scales, and NaN signs as
    // numpy's for non-finite ones.
    for s in 0..SUBS {
        let (d, m) = scale_and_min(blk, s);
        for (o, q) in out[QK * s..QK * (s + 1)].iter_mut().zip(levels(blk, s)) {
            *o = d * q as f32 - m;
        }
    }
}

/// The scale search of Q4_K's sub-blocks (llama.cpp's for levels 0..=15).
const SEARCH: Search = Search {
    rmin: -1.0,
    rdelta: 0.1,
    steps: 20,
    abs_error: false,
};

/// One super-block (kgen's quantizer, as llama.cpp's `quantize_row_q4_K`).
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    if Q4_K.encode_non_finite(x, out) {
        return;
    }
    let q = quantize_levels(x, 15, SEARCH, out);
    for j in 0..SUBS / 2 {
        for i in 0..QK {
            out.push(q[QK * 2 * j + i] | (q[QK * (2 * j + 1) + i] << 4));
        }
    }
}

/// Appends the header of a Q4_K / Q5_K super-block of the finite values
/// `x` and returns its levels `0..=nmax`, in order: per sub-block of 32,
/// the scale and min of [`fit_scale_min`] with weights `rms(x) + |v|`; the
/// scales and mins quantized to 6 bits against `d = max scale / 63` and
/// `dmin = max min / 63` (stored as f16); the levels rounded again for the
/// stored `d * sc` and `dmin * m`.
pub(crate) fn quantize_levels(
    x: &[f32],
    nmax: i32,
    search: Search,
    out: &mut Vec<u8>,
) -> [u8; QK_K] {
    let rms = (x.iter().map(|v| v * v).sum::<f32>() / QK_K as f32).sqrt();
    let mut scales = [0f32; SUBS];
    let mut mins = [0f32; SUBS];
    let mut q = [0u8; QK_K];
    for s in 0..SUBS {
        let xs = &x[QK * s..QK * (s + 1)];
        let w: Vec<f32> = xs.iter().map(|v| rms + v.abs()).collect();
        (scales[s], mins[s]) = fit_scale_min(xs, &w, nmax, search, &mut q[QK * s..QK * (s + 1)]);
    }
    let (d, sc) = quantize_scales(&scales, 63);
    let (dmin, m) = quantize_scales(&mins, 63);
    write_f16(out, d);
    write_f16(out, dmin);
    out.extend_from_slice(&pack_scale_min_k4(&sc, &m));
    let header = &out[out.len() - HEADER..];
    for s in 0..SUBS {
        let (ds, ms) = scale_and_min(header, s);
        let xs = &x[QK * s..QK * (s + 1)];
        requantize_min(xs, ds, ms, nmax, &mut q[QK * s..QK * (s + 1)]);
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::kquant::{check_scale_times_level_plus_min, gaussian, rms_error};
    use crate::format::ggml::GgmlType;
    use crate::format::rng::Rng;

    /// A super-block from `d`, `dmin`, 6-bit scales and mins and levels.
    fn block(d: f32, dmin: f32, sc: &[u8; 8], m: &[u8; 8], lv: &[u8; QK_K]) -> Vec<u8> {
        let mut b = Vec::new();
        write_f16(&mut b, d);
        write_f16(&mut b, dmin);
        b.extend_from_slice(&pack_scale_min_k4(sc, m));
        for j in 0..4 {
            b.extend((0..QK).map(|i| lv[64 * j + i] | (lv[64 * j + 32 + i] << 4)));
        }
        b
    }

    #[test]
    fn row_and_bit_order() {
        assert_eq!(GgmlType::from_id(12), Some(GgmlType::Q4_K));
        assert_eq!(GgmlType::Q4_K.block_bytes(), 144);
        assert_eq!(GgmlType::Q4_K.tag(), "q4_k");
        let lv: [u8; QK_K] = std::array::from_fn(|i| (i * 7 % 16) as u8);
        let sc: [u8; 8] = [1, 2, 63, 4, 33, 6, 62, 8];
        let m: [u8; 8] = [0, 63, 5, 7, 17, 48, 2, 31];
        let b = block(0.5, 0.25, &sc, &m, &lv);
        assert_eq!(b.len(), 144);
        // Value 32 (sub-block 1, value 0) is the high nibble of byte 16.
        assert_eq!(b[16] >> 4, lv[32]);
        let mut w = [0f32; QK_K];
        dequantize(&b, &mut w);
        for s in 0..8 {
            assert_eq!(levels(&b, s), lv[32 * s..32 * s + 32], "sub-block {s}");
            let (d, mn) = sub_scale(&b, s);
            assert_eq!((d, mn), (0.5 * sc[s] as f32, -0.25 * m[s] as f32));
            for i in 0..QK {
                let v = 32 * s + i;
                assert_eq!(w[v], d * lv[v] as f32 + mn, "value {v}");
            }
        }
    }

    #[test]
    fn scale_times_level_plus_min_is_the_weight() {
        // Random headers and levels, scales across f16's range: the int8
        // row's scale and min give every dequantized value bit for bit, as
        // gguf-py's `(d * sc) * q - (dmin * m)`.
        check_scale_times_level_plus_min(&Q4_K, 12);
    }

    #[test]
    fn quantizer_error_on_gaussian_data() {
        let rel = rms_error(&Q4_K, 4);
        // llama.cpp's quantizer gets 0.071 on 4096 such values: within 10%.
        assert!(rel < 0.078, "relative RMS error {rel}");
    }

    #[test]
    fn edge_blocks() {
        let mut w = [0f32; QK_K];
        // All zero: every scale and level 0, the values +0.
        let mut out = Vec::new();
        quantize(&[0.0; QK_K], &mut out);
        assert!(out.iter().all(|&b| b == 0));
        // Constant positive: the top level of the largest scale, no min;
        // within f16's rounding of d.
        let mut out = Vec::new();
        quantize(&[3.0; QK_K], &mut out);
        assert_eq!(read_f16(&out[2..]), 0.0);
        assert!((0..8).all(|s| levels(&out, s) == [15; QK]));
        dequantize(&out, &mut w);
        assert!(w.iter().all(|&v| (v - 3.0).abs() < 3e-3), "{:?}", &w[..4]);
        // Constant negative: all min, within f16's rounding of dmin.
        let mut out = Vec::new();
        quantize(&[-3.0; QK_K], &mut out);
        dequantize(&out, &mut w);
        assert!(w.iter().all(|&v| (v + 3.0).abs() < 3e-3), "{:?}", &w[..4]);
        // Non-finite values: NaN d and dmin, everything else 0.
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = gaussian(&mut Rng::new(1), QK_K);
            x[100] = bad;
            let mut out = Vec::new();
            quantize(&x, &mut out);
            assert_eq!(out.len(), 144);
            assert!(read_f16(&out).is_nan() && read_f16(&out[2..]).is_nan());
            assert!(out[4..].iter().all(|&b| b == 0));
        }
    }
}
