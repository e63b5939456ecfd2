//! GGUF IQ3_XXS (type 18, 3.06 bits per weight) and IQ3_S (21, 3.44):
//! 256-value super-blocks under one f16 `d`, each 4 values a point of a
//! grid over 8 levels (IQ3_XXS {4, 12, .., 52, 62}, IQ3_S the odd 1 to 15)
//! with a sign each, and a scale per 32 values.
//!
//! - IQ3_XXS: 8-bit grid indices; per 32 values a u32 of four 7-bit
//!   `ksigns` indices and the 4-bit `ls`, the scale `d * (0.5 + ls) / 2`.
//! - IQ3_S: 9-bit grid indices (8 bits, 1 in `qh`), plain sign bits, 4-bit
//!   scales `d * (1 + 2 ls)`.
//!
//! The int8 family reads them as codebook formats (`lattice.rs`); gguf-py
//! dequantizes both and kgen's codec is bit for bit the same.

use crate::format::ggml::kquant::QK_K;
use crate::format::ggml::lattice::{
    codebook_row, dequantize_by_levels, fit, ksigns, u32_at, Choice, Fit, Grid, BIT_BYTES, IQ3S,
    IQ3S_CODEBOOK, IQ3XXS, IQ3XXS_CODEBOOK,
};
use crate::format::ggml::numpy::read_f16;
use crate::format::row::{Format, Levels, ScaleAt, QK};

pub const IQ3_XXS: Format = Format {
    tag: "iq3_xxs",
    name: "IQ3_XXS",
    gguf_type: 18,
    block: QK_K,
    super_block: QK_K,
    block_bytes: 2 + QK_K / 4 + QK_K / 8,
    bits: 3,
    scales: &[ScaleAt::Bytes(0)],
    levels: Levels::Codebook(&IQ3XXS_CODEBOOK),
    dequantize: |b, o| dequantize_by_levels(b, o, &IQ3XXS_CODEBOOK, xxs_levels, xxs_scale, 1),
    quantize: xxs_quantize,
    int8: codebook_row(xxs_levels, xxs_scale, 1, 4),
};

pub const IQ3_S: Format = Format {
    tag: "iq3_s",
    name: "IQ3_S",
    gguf_type: 21,
    block: QK_K,
    super_block: QK_K,
    block_bytes: 2 + QK_K / 4 + QK_K / 32 + QK_K / 8 + QK_K / 64,
    bits: 3,
    scales: &[ScaleAt::Bytes(0)],
    levels: Levels::Codebook(&IQ3S_CODEBOOK),
    dequantize: |b, o| dequantize_by_levels(b, o, &IQ3S_CODEBOOK, s_levels, s_scale, 1),
    quantize: s_quantize,
    int8: codebook_row(s_levels, s_scale, 1, 4),
};

/// IQ3_XXS's sign-and-scale words.
const XXS_AUX: usize = 2 + QK_K / 4;
/// IQ3_S's high index bits, sign bits and scales.
const S_QH: usize = 2 + QK_K / 4;
const S_SIGNS: usize = S_QH + QK_K / 32;
const S_SCALES: usize = S_SIGNS + QK_K / 8;

fn aux(b: &[u8], s: usize) -> u32 {
    u32_at(b, XXS_AUX + 4 * s)
}

/// Point `p`'s 4 codebook indices under the low 4 bits of `signs`, into
/// `out`: the index `level + 8 negative` (see `signed_codebook`), a word
/// at a time.
fn put(out: &mut [u8], grid: &Grid, p: usize, signs: u8) {
    let v = grid.bytes[p] | BIT_BYTES[signs as usize & 15] << 3;
    out.copy_from_slice(&(v as u32).to_le_bytes());
}

fn xxs_levels(b: &[u8], s: usize) -> [u8; QK] {
    let a = aux(b, s);
    let mut out = [0u8; QK];
    for (q, o) in out.chunks_exact_mut(4).enumerate() {
        let signs = ksigns(a >> (7 * (q / 2))) >> (4 * (q % 2));
        put(o, &IQ3XXS, b[2 + 8 * s + q] as usize, signs);
    }
    out
}

/// `d * (0.5 + ls) * 0.5` in gguf-py's order.
fn xxs_scale(b: &[u8], s: usize) -> (f32, f32) {
    (read_f16(b) * (0.5 + (aux(b, s) >> 28) as f32) * 0.5, 0.0)
}

fn s_levels(b: &[u8], s: usize) -> [u8; QK] {
    let mut out = [0u8; QK];
    for (q, o) in out.chunks_exact_mut(4).enumerate() {
        let p = 8 * s + q;
        let idx = b[2 + p] as usize | ((b[S_QH + p / 8] >> (p % 8)) as usize & 1) << 8;
        put(o, &IQ3S, idx, b[S_SIGNS + p / 2] >> (4 * (p % 2)));
    }
    out
}

fn s_scale(b: &[u8], s: usize) -> (f32, f32) {
    let sc = u32::from(b[S_SCALES + s / 2] >> (4 * (s % 2)) & 15);
    (read_f16(b) * (1 + 2 * sc) as f32, 0.0)
}

fn fit3(x: &[f32], grid: &'static Grid, parity: bool, k: f32) -> Choice {
    fit(
        x,
        &Fit {
            grid,
            signed: true,
            parity,
            k,
            ls_max: 15,
            unit: QK,
            delta: None,
        },
    )
}

fn xxs_quantize(x: &[f32], out: &mut Vec<u8>) {
    if IQ3_XXS.encode_non_finite(x, out) {
        return;
    }
    let c = fit3(x, &IQ3XXS, true, 0.5);
    out.extend_from_slice(&c.d.to_bits().to_le_bytes());
    out.extend(c.points.iter().map(|&p| p as u8));
    for s in 0..QK_K / QK {
        let a = (0..4).fold(u32::from(c.ls[s]) << 28, |a, l| {
            a | u32::from(c.sign_byte(4 * s + l) & 127) << (7 * l)
        });
        out.extend_from_slice(&a.to_le_bytes());
    }
}

fn s_quantize(x: &[f32], out: &mut Vec<u8>) {
    if IQ3_S.encode_non_finite(x, out) {
        return;
    }
    let c = fit3(x, &IQ3S, false, 2.0);
    out.extend_from_slice(&c.d.to_bits().to_le_bytes());
    out.extend(c.points.iter().map(|&p| p as u8));
    out.extend(
        (0..QK_K / 32)
            .map(|q| (0..8).fold(0u8, |a, i| a | ((c.points[8 * q + i] >> 8) as u8 & 1) << i)),
    );
    out.extend((0..QK_K / 8).map(|g| c.sign_byte(g)));
    out.extend((0..QK_K / 64).map(|s| c.ls[2 * s] | c.ls[2 * s + 1] << 4));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::lattice::tests::check_fit_error;

    #[test]
    fn sizes_and_round_trip_error() {
        assert_eq!(IQ3_XXS.block_bytes, 98);
        assert_eq!(IQ3_S.block_bytes, 110);
        // Measured 0.178 and 0.130.
        check_fit_error(&IQ3_XXS, 0.21);
        check_fit_error(&IQ3_S, 0.16);
    }
}
