//! GGUF IQ1_S (type 19, 1.56 bits per weight) and IQ1_M (29, 1.75):
//! 256-value super-blocks, each 8 values a point of a grid over {-1, 0, 1}
//! (11-bit indices: a byte and 3 high bits), shifted by `+-1/8` and scaled
//! by `d * (2 s + 1)` with a 3-bit `s`.
//!
//! - IQ1_S: an f16 `d`, then per 32 values a u16 of the four high index
//!   fields, `s` and the delta's sign (bit 15).
//! - IQ1_M: a scale per 16 values and a delta sign per 8 (bit 3 of each
//!   nibble of `qh`); its f16 `d` is spread over the top nibbles of the four
//!   scale words.
//!
//! The int8 family reads them as codebook formats with the values
//! `8 (g + delta)` over a scale of `d_l / 8` (`lattice.rs`); gguf-py
//! dequantizes both and kgen's codec is bit for bit the same.

use crate::format::ggml::kquant::QK_K;
use crate::format::ggml::lattice::{
    codebook_row, dequantize_by_levels, fit, u16_at, Choice, Fit, IQ1S, IQ1_CODEBOOK,
};
use crate::format::ggml::numpy::read_f16;
use crate::format::row::{Format, Levels, ScaleAt, QK};

pub const IQ1_S: Format = Format {
    tag: "iq1_s",
    name: "IQ1_S",
    gguf_type: 19,
    block: QK_K,
    super_block: QK_K,
    block_bytes: 2 + QK_K / 8 + QK_K / 16,
    bits: 2,
    scales: &[ScaleAt::Bytes(0)],
    levels: Levels::Codebook(&IQ1_CODEBOOK),
    dequantize: |b, o| dequantize_by_levels(b, o, &IQ1_CODEBOOK, s_levels, s_scale, 1),
    quantize: s_quantize,
    int8: codebook_row(s_levels, s_scale, 1, 3),
};

pub const IQ1_M: Format = Format {
    tag: "iq1_m",
    name: "IQ1_M",
    gguf_type: 29,
    block: QK_K,
    super_block: QK_K,
    block_bytes: QK_K / 8 + QK_K / 16 + QK_K / 32,
    bits: 2,
    scales: &[ScaleAt::TopNibbles(M_SCALES)],
    levels: Levels::Codebook(&IQ1_CODEBOOK),
    dequantize: |b, o| dequantize_by_levels(b, o, &IQ1_CODEBOOK, m_levels, m_scale, 2),
    quantize: m_quantize,
    int8: codebook_row(m_levels, m_scale, 2, 3),
};

const S_QH: usize = 2 + QK_K / 8;
const M_QH: usize = QK_K / 8;
const M_SCALES: usize = M_QH + QK_K / 16;

/// `d * (2 s + 1)` as gguf-py forms it, then `/ 8` (exact) for the
/// codebook's `8 (g + delta)`.
fn unit_scale(d: f32, s: u32) -> (f32, f32) {
    (d * (2 * s + 1) as f32 * 0.125, 0.0)
}

/// Point `p`'s 8 codebook indices under a delta of sign `negative`, into
/// `out` (index `level + 4 negative`, see `IQ1_CODEBOOK`), a word at a time.
fn put(out: &mut [u8], p: usize, negative: bool) {
    let delta = if negative { 0x0404_0404_0404_0404 } else { 0 };
    out.copy_from_slice(&(IQ1S.bytes[p] | delta).to_le_bytes());
}

fn s_levels(b: &[u8], s: usize) -> [u8; QK] {
    let qh = u16_at(b, S_QH + 2 * s);
    let mut out = [0u8; QK];
    for (l, o) in out.chunks_exact_mut(8).enumerate() {
        let p = b[2 + 4 * s + l] as usize | ((qh >> (3 * l)) as usize & 7) << 8;
        put(o, p, qh & 0x8000 != 0);
    }
    out
}

fn s_scale(b: &[u8], s: usize) -> (f32, f32) {
    unit_scale(read_f16(b), u16_at(b, S_QH + 2 * s) >> 12 & 7)
}

fn m_levels(b: &[u8], s: usize) -> [u8; QK] {
    let mut out = [0u8; QK];
    for (l, o) in out.chunks_exact_mut(8).enumerate() {
        let g = 4 * s + l;
        let e = b[M_QH + g / 2] >> (4 * (g % 2));
        put(o, b[g] as usize | (e as usize & 7) << 8, e & 8 != 0);
    }
    out
}

fn m_scale(b: &[u8], u: usize) -> (f32, f32) {
    unit_scale(
        IQ1_M.scales[0].get(b),
        u16_at(b, M_SCALES + 2 * (u / 4)) >> (3 * (u % 4)) & 7,
    )
}

fn fit1(x: &[f32], unit: usize, per: usize) -> Choice {
    fit(
        x,
        &Fit {
            grid: &IQ1S,
            signed: false,
            parity: false,
            k: 2.0,
            ls_max: 7,
            unit,
            delta: Some((0.125, per)),
        },
    )
}

fn s_quantize(x: &[f32], out: &mut Vec<u8>) {
    if IQ1_S.encode_non_finite(x, out) {
        return;
    }
    let c = fit1(x, QK, QK);
    out.extend_from_slice(&c.d.to_bits().to_le_bytes());
    out.extend(c.points.iter().map(|&p| p as u8));
    for s in 0..QK_K / QK {
        let qh = (0..4).fold(u16::from(c.ls[s]) << 12, |a, l| {
            a | (c.points[4 * s + l] >> 8 & 7) << (3 * l)
        }) | u16::from(c.negative_delta[s]) << 15;
        out.extend_from_slice(&qh.to_le_bytes());
    }
}

fn m_quantize(x: &[f32], out: &mut Vec<u8>) {
    if IQ1_M.encode_non_finite(x, out) {
        return;
    }
    let c = fit1(x, 16, 8);
    let start = out.len();
    out.extend(c.points.iter().map(|&p| p as u8));
    out.extend((0..QK_K / 16).map(|q| {
        (0..2).fold(0u8, |a, h| {
            let g = 2 * q + h;
            a | ((c.points[g] >> 8) as u8 & 7 | u8::from(c.negative_delta[g]) << 3) << (4 * h)
        })
    }));
    for w in 0..4 {
        let scales = (0..4).fold(0u16, |a, t| a | u16::from(c.ls[4 * w + t]) << (3 * t));
        out.extend_from_slice(&scales.to_le_bytes());
    }
    IQ1_M.scales[0].write(&mut out[start..], c.d.to_bits());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::lattice::tests::check_fit_error;

    #[test]
    fn sizes_and_round_trip_error() {
        assert_eq!(IQ1_S.block_bytes, 50);
        assert_eq!(IQ1_M.block_bytes, 56);
        // Measured 0.507 and 0.444.
        check_fit_error(&IQ1_S, 0.61);
        check_fit_error(&IQ1_M, 0.53);
    }

    /// IQ1_M's `d` is read from where its quantizer spreads it.
    #[test]
    fn iq1_m_d_round_trips() {
        let x: Vec<f32> = (0..QK_K).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut b = Vec::new();
        m_quantize(&x, &mut b);
        assert_eq!(b.len(), IQ1_M.block_bytes);
        let c = fit1(&x, 16, 8);
        assert_eq!(IQ1_M.scales[0].get(&b).to_bits(), c.d.to_f32().to_bits());
        let mut nan = Vec::new();
        m_quantize(&[f32::NAN; QK_K], &mut nan);
        assert!(IQ1_M.scales[0].get(&nan).is_nan());
    }
}
