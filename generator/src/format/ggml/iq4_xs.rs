//! GGUF IQ4_XS (type 23): super-blocks of 256 values in 8 sub-blocks of
//! 32, 136 bytes: an f16 `d`, a little-endian u16 `scales_h`, 4 bytes
//! `scales_l` and 128 bytes `qs` of IQ4_NL codebook indices. Sub-block `s`
//! has the 6-bit scale `ls` (low 4 bits in nibble `s % 2` of
//! `scales_l[s / 2]`, top 2 at bits `2 s` of `scales_h`) and its indices
//! in the 16 bytes from `8 + 16 s`, in Q4_0's nibble order. The weight is
//! `(d * (ls - 32)) * VALUES[index]`, the product rounded to f32 once.
//!
//! The int8 family runs it as IQ4_NL with a scale per sub-block: the same
//! codebook lookups, the sub-block's `d * (ls - 32)` rounded to f16 as its
//! block scale.
//!
//! gguf-py cannot quantize IQ4_XS; kgen's quantizer follows ggml's method
//! without an importance matrix (IQ4_NL's scale search per sub-block, then
//! the scales quantized to 6 bits). Its bytes are ggml's on finite input
//! (`tests/ggml_quantizers.rs`) and gguf-py dequantizes them as kgen does;
//! a super-block with a value that is not finite gets a NaN `d`, as kgen's
//! K-quants do, where ggml would quantize it.

use crate::format::ggml::iq4_nl::{fit_scale, nearest, VALUES};
use crate::format::ggml::kquant::{nearest_clamped, signed_max, QK_K};
use crate::format::ggml::numpy::{read_f16, write_f16};
use crate::format::ggml::q4_0::q4_0_order;
use crate::format::row::{Format, Int8Repack, Levels, NibbleStore, ScaleAt, QK};

pub const IQ4_XS: Format = Format {
    tag: "iq4_xs",
    name: "IQ4_XS",
    gguf_type: 23,
    block: QK_K,
    super_block: QK_K,
    block_bytes: QS + QK_K / 2,
    bits: 4,
    scales: &[ScaleAt::Bytes(0)],
    levels: Levels::Codebook(&VALUES),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 4,
        block_levels: levels,
        sub_scale,
        mins: false,
        scales_per_block: 1,
        // Activations as IQ4_NL's, a scale per 32 values: the sub-block
        // scales are f16 per 32 in the layout either way.
        act_group: 1,
        group_scale: false,
        int_sub_scales: None,
        nibbles: Some(NibbleStore::Q4_0Order { at: QS }),
        fifth: None,
    }),
};

/// Where the indices start: after `d`, `scales_h` and `scales_l`.
const QS: usize = 2 + 2 + QK_K / 64;

/// Sub-blocks per super-block.
const SUBS: usize = QK_K / QK;

/// Sub-block `s`'s 6-bit scale code `ls` (the scale is `ls - 32`).
fn scale_code(block: &[u8], s: usize) -> u8 {
    let h = u16::from_le_bytes([block[2], block[3]]);
    ((block[4 + s / 2] >> (4 * (s % 2))) & 0x0F) | (((h >> (2 * s)) & 3) as u8) << 4
}

/// Sub-block `s`'s scale `d * (ls - 32)` in f32 (exact: an f16 times an
/// integer of 6 bits) and no min: its weights are `scale * VALUES[index]`.
fn sub_scale(block: &[u8], s: usize) -> (f32, f32) {
    (
        read_f16(block) * (scale_code(block, s) as i32 - 32) as f32,
        0.0,
    )
}

/// The 32 codebook indices of sub-block `s`, in order along K.
fn levels(block: &[u8], s: usize) -> [u8; QK] {
    q4_0_order(&block[QS + 16 * s..])
}

/// One super-block, as gguf-py's `IQ4_XS.dequantize_blocks`:
/// `(d * (ls - 32)) * VALUES[index]` in f32.
fn dequantize(blk: &[u8], out: &mut [f32]) {
    for s in 0..SUBS {
        let (dl, _) = sub_scale(blk, s);
        for (o, l) in out[QK * s..QK * (s + 1)].iter_mut().zip(levels(blk, s)) {
            *o = dl * VALUES[l as usize] as f32;
        }
    }
}

/// One super-block (kgen's quantizer, as ggml's `quantize_row_iq4_xs`
/// without an importance matrix): each sub-block's scale from IQ4_NL's
/// search; `d = -s / 32` for the scale `s` of largest magnitude, stored as
/// f16; each sub-block's code `ls - 32` the nearest integer to its scale
/// over the f32 `d`, clamped to `-32..=31`; the indices the nearest
/// codebook values for the f32 `d * (ls - 32)`. A super-block with a value
/// that is not finite gets a NaN `d` and zeros.
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    if IQ4_XS.encode_non_finite(x, out) {
        return;
    }
    let scales: [f32; SUBS] =
        std::array::from_fn(|s| fit_scale(&x[QK * s..QK * (s + 1)]).unwrap_or(0.0));
    let d = -signed_max(&scales) / 32.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let (mut scales_h, mut scales_l) = (0u16, [0u8; QK_K / 64]);
    let mut qs = [0u8; QK_K / 2];
    for (s, &sc) in scales.iter().enumerate() {
        let l = nearest_clamped(id * sc, -32, 31);
        let dl = d * l as f32;
        let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
        let ls = (l + 32) as u8;
        scales_l[s / 2] |= (ls & 0x0F) << (4 * (s % 2));
        scales_h |= u16::from(ls >> 4) << (2 * s);
        let xs = &x[QK * s..QK * (s + 1)];
        for i in 0..QK / 2 {
            qs[16 * s + i] = nearest(idl * xs[i]) | nearest(idl * xs[i + QK / 2]) << 4;
        }
    }
    write_f16(out, d);
    out.extend_from_slice(&scales_h.to_le_bytes());
    out.extend_from_slice(&scales_l);
    out.extend_from_slice(&qs);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::kquant::{gaussian, rms_error};
    use crate::format::ggml::GgmlType;
    use crate::format::rng::Rng;

    /// A super-block from `d`, the 6-bit scale codes and the indices.
    fn block(d: f32, ls: &[u8; SUBS], idx: &[u8; QK_K]) -> Vec<u8> {
        let mut b = Vec::new();
        write_f16(&mut b, d);
        let h = (0..SUBS).fold(0u16, |h, s| h | u16::from(ls[s] >> 4) << (2 * s));
        b.extend_from_slice(&h.to_le_bytes());
        b.extend((0..4).map(|j| (ls[2 * j] & 0x0F) | (ls[2 * j + 1] & 0x0F) << 4));
        for s in 0..SUBS {
            b.extend((0..16).map(|i| idx[32 * s + i] | idx[32 * s + 16 + i] << 4));
        }
        b
    }

    #[test]
    fn row_and_bit_order() {
        assert_eq!(GgmlType::from_id(23), Some(GgmlType::IQ4_XS));
        assert_eq!(GgmlType::IQ4_XS.block_bytes(), 136);
        assert_eq!(GgmlType::IQ4_XS.tag(), "iq4_xs");
        let idx: [u8; QK_K] = std::array::from_fn(|i| (i * 7 % 16) as u8);
        // Codes at both ends and across the nibble / bit-pair boundary.
        let ls: [u8; SUBS] = [0, 63, 32, 31, 15, 16, 47, 1];
        let b = block(0.5, &ls, &idx);
        assert_eq!(b.len(), 136);
        // Value 48 (sub-block 1, value 16) is the high nibble of byte 8 + 16.
        assert_eq!(b[QS + 16] >> 4, idx[48]);
        let mut w = [0f32; QK_K];
        dequantize(&b, &mut w);
        for s in 0..SUBS {
            assert_eq!(scale_code(&b, s), ls[s], "sub-block {s}");
            assert_eq!(levels(&b, s), idx[32 * s..32 * s + 32], "sub-block {s}");
            let dl = 0.5 * (ls[s] as i32 - 32) as f32;
            assert_eq!(sub_scale(&b, s), (dl, 0.0));
            for i in 0..QK {
                let v = 32 * s + i;
                assert_eq!(w[v], dl * VALUES[idx[v] as usize] as f32, "value {v}");
            }
        }
    }

    #[test]
    fn sub_block_scales_beyond_f16_are_refused() {
        // d = 2048 is finite, but code 0 makes a sub-block scale of
        // -65536, past f16's 65504: the int8 layout could not store it.
        let mut ls = [32u8; SUBS];
        let b = block(2047.0, &ls, &[0; QK_K]);
        let m = |data| crate::format::ggml::GgmlMatrix {
            k: QK_K,
            n: 1,
            dtype: GgmlType::IQ4_XS,
            data,
        };
        m(b).validate().unwrap();
        ls[5] = 0;
        m(block(2047.0, &ls, &[0; QK_K])).validate().unwrap();
        let e = m(block(2048.0, &ls, &[0; QK_K])).validate().unwrap_err();
        assert!(e.to_string().contains("sub-block 5 scale"), "{e}");
    }

    #[test]
    fn quantizer_error_on_gaussian_data() {
        let rel = rms_error(&IQ4_XS, 4);
        // IQ4_NL's quantizer on the same data, for scale: IQ4_XS spends
        // 4.25 bits per value to IQ4_NL's 4.5 and loses a little to its
        // 6-bit scales.
        let nl = rms_error(&crate::format::ggml::iq4_nl::IQ4_NL, 4);
        assert!(rel < nl * 1.15, "relative RMS error {rel}, IQ4_NL {nl}");
        assert!(rel < 0.1, "relative RMS error {rel}");
    }

    #[test]
    fn edge_blocks() {
        let mut w = [0f32; QK_K];
        // All zero: d = 0, every index the codebook's 1 (value 0 * d).
        let mut out = Vec::new();
        quantize(&[0.0; QK_K], &mut out);
        assert_eq!(out.len(), 136);
        assert_eq!(read_f16(&out), 0.0);
        dequantize(&out, &mut w);
        assert!(w.iter().all(|&v| v == 0.0));
        // Constant: within the f16 rounding of d and the 6-bit scale.
        let mut out = Vec::new();
        quantize(&[3.0; QK_K], &mut out);
        dequantize(&out, &mut w);
        assert!(w.iter().all(|&v| (v - 3.0).abs() < 0.05), "{:?}", &w[..4]);
        // One sub-block 100 times the rest: it keeps IQ4_NL-like error;
        // the others round to scale code 32 (scale 0), so their values
        // move by at most their own size.
        let mut x = gaussian(&mut Rng::new(3), QK_K);
        for v in &mut x[..QK] {
            *v *= 100.0;
        }
        let mut out = Vec::new();
        quantize(&x, &mut out);
        dequantize(&out, &mut w);
        let big = x[..QK].iter().fold(0f32, |a, v| a.max(v.abs()));
        for (i, (a, b)) in x.iter().zip(&w).enumerate() {
            let tol = if i < QK { 0.15 * big } else { a.abs() };
            assert!((a - b).abs() <= tol, "value {i}: {a} -> {b}");
        }
        assert!((1..SUBS).all(|s| scale_code(&out, s) == 32));
        // Non-finite values: NaN d, everything else 0.
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = gaussian(&mut Rng::new(1), QK_K);
            x[100] = bad;
            let mut out = Vec::new();
            quantize(&x, &mut out);
            assert_eq!(out.len(), 136);
            assert!(read_f16(&out).is_nan());
            assert!(out[2..].iter().all(|&b| b == 0));
        }
    }
}
