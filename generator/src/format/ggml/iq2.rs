//! GGUF IQ2_XXS (type 16, 2.06 bits per weight), IQ2_XS (17, 2.31) and
//! IQ2_S (22, 2.56): 256-value super-blocks under one f16 `d`, each 8
//! values a point of a grid over the levels {8, 25, 43} with a sign each,
//! scaled by `d * (0.5 + ls) / 4` per 32 (IQ2_XXS) or 16 values.
//!
//! - IQ2_XXS: per 32 values two u32s, four 8-bit grid indices then four
//!   7-bit `ksigns` indices and the 4-bit `ls`.
//! - IQ2_XS: per 8 values a u16, a 9-bit grid index and a 7-bit `ksigns`
//!   index; 4-bit scales per 16 values after them.
//! - IQ2_S: per 8 values a 10-bit grid index (8 bits, 2 in `qh`) and a
//!   byte of plain signs; 4-bit scales per 16 values.
//!
//! The int8 family reads them as codebook formats (`lattice.rs`);
//! gguf-py dequantizes all three and kgen's codec is bit for bit the same
//! (`runtime/tests/gguf_kgen_bytes.rs`); gguf-py cannot quantize them.

use crate::format::ggml::kquant::QK_K;
use crate::format::ggml::lattice::{
    codebook_row, dequantize_by_levels, fit, ksigns, u16_at, u32_at, Choice, Fit, Grid, BIT_BYTES,
    IQ2S, IQ2XS, IQ2XXS, IQ2_CODEBOOK,
};
use crate::format::ggml::numpy::read_f16;
use crate::format::row::{Format, Levels, ScaleAt, QK};

pub const IQ2_XXS: Format = Format {
    tag: "iq2_xxs",
    name: "IQ2_XXS",
    gguf_type: 16,
    block: QK_K,
    super_block: QK_K,
    block_bytes: 2 + QK_K / 4,
    bits: 2,
    scales: &[ScaleAt::Bytes(0)],
    levels: Levels::Codebook(&IQ2_CODEBOOK),
    dequantize: |b, o| dequantize_by_levels(b, o, &IQ2_CODEBOOK, xxs_levels, xxs_scale, 1),
    quantize: xxs_quantize,
    int8: codebook_row(xxs_levels, xxs_scale, 1, 3),
};

pub const IQ2_XS: Format = Format {
    tag: "iq2_xs",
    name: "IQ2_XS",
    gguf_type: 17,
    block: QK_K,
    super_block: QK_K,
    block_bytes: 2 + QK_K / 4 + QK_K / 32,
    bits: 2,
    scales: &[ScaleAt::Bytes(0)],
    levels: Levels::Codebook(&IQ2_CODEBOOK),
    dequantize: |b, o| {
        dequantize_by_levels(b, o, &IQ2_CODEBOOK, xs_levels, per16_scale::<XS_SCALES>, 2)
    },
    quantize: xs_quantize,
    int8: codebook_row(xs_levels, per16_scale::<XS_SCALES>, 2, 3),
};

pub const IQ2_S: Format = Format {
    tag: "iq2_s",
    name: "IQ2_S",
    gguf_type: 22,
    block: QK_K,
    super_block: QK_K,
    block_bytes: 2 + QK_K / 4 + QK_K / 16,
    bits: 2,
    scales: &[ScaleAt::Bytes(0)],
    levels: Levels::Codebook(&IQ2_CODEBOOK),
    dequantize: |b, o| {
        dequantize_by_levels(b, o, &IQ2_CODEBOOK, s_levels, per16_scale::<S_SCALES>, 2)
    },
    quantize: s_quantize,
    int8: codebook_row(s_levels, per16_scale::<S_SCALES>, 2, 3),
};

/// Where IQ2_XS's and IQ2_S's 4-bit scales start.
const XS_SCALES: usize = 2 + QK_K / 4;
const S_SCALES: usize = 2 + QK_K / 4 + QK_K / 32;
/// IQ2_S's sign bytes and high index bits.
const S_SIGNS: usize = 2 + QK_K / 8;
const S_QH: usize = 2 + QK_K / 4;

/// `d * (0.5 + ls) * 0.25` in gguf-py's order.
fn unit_scale(b: &[u8], ls: u32) -> (f32, f32) {
    (read_f16(b) * (0.5 + ls as f32) * 0.25, 0.0)
}

/// Point `p`'s 8 codebook indices under sign bits `signs`, into `out`:
/// the index `level + 4 negative` (see `signed_codebook`), a word at a time.
fn put(out: &mut [u8], grid: &Grid, p: usize, signs: u8) {
    out.copy_from_slice(&(grid.bytes[p] | BIT_BYTES[signs as usize] << 2).to_le_bytes());
}

fn xxs_levels(b: &[u8], s: usize) -> [u8; QK] {
    let at = 2 + 8 * s;
    let signs = u32_at(b, at + 4);
    let mut out = [0u8; QK];
    for (l, o) in out.chunks_exact_mut(8).enumerate() {
        put(o, &IQ2XXS, b[at + l] as usize, ksigns(signs >> (7 * l)));
    }
    out
}

fn xxs_scale(b: &[u8], s: usize) -> (f32, f32) {
    unit_scale(b, u32_at(b, 2 + 8 * s + 4) >> 28)
}

fn xs_levels(b: &[u8], s: usize) -> [u8; QK] {
    let mut out = [0u8; QK];
    for (l, o) in out.chunks_exact_mut(8).enumerate() {
        let q = u16_at(b, 2 + 2 * (4 * s + l));
        put(o, &IQ2XS, (q & 511) as usize, ksigns(q >> 9));
    }
    out
}

/// The scale of 16-value unit `u` from 4-bit scales at `AT`.
fn per16_scale<const AT: usize>(b: &[u8], u: usize) -> (f32, f32) {
    unit_scale(b, u32::from(b[AT + u / 2] >> (4 * (u % 2)) & 15))
}

fn s_levels(b: &[u8], s: usize) -> [u8; QK] {
    let mut out = [0u8; QK];
    for (l, o) in out.chunks_exact_mut(8).enumerate() {
        let g = 4 * s + l;
        let p = b[2 + g] as usize | ((b[S_QH + g / 4] >> (2 * (g % 4))) as usize & 3) << 8;
        put(o, &IQ2S, p, b[S_SIGNS + g]);
    }
    out
}

fn fit_for(
    x: &[f32],
    out: &mut Vec<u8>,
    grid: &'static Grid,
    fmt: &Format,
    parity: bool,
    unit: usize,
) -> Option<Choice> {
    if fmt.encode_non_finite(x, out) {
        return None;
    }
    let c = fit(
        x,
        &Fit {
            grid,
            signed: true,
            parity,
            k: 0.25,
            ls_max: 15,
            unit,
            delta: None,
        },
    );
    out.extend_from_slice(&c.d.to_bits().to_le_bytes());
    Some(c)
}

fn xxs_quantize(x: &[f32], out: &mut Vec<u8>) {
    let Some(c) = fit_for(x, out, &IQ2XXS, &IQ2_XXS, true, 32) else {
        return;
    };
    for s in 0..QK_K / QK {
        let signs = (0..4).fold(u32::from(c.ls[s]) << 28, |a, l| {
            a | u32::from(c.sign_byte(4 * s + l) & 127) << (7 * l)
        });
        out.extend((0..4).map(|l| c.points[4 * s + l] as u8));
        out.extend_from_slice(&signs.to_le_bytes());
    }
}

fn xs_quantize(x: &[f32], out: &mut Vec<u8>) {
    let Some(c) = fit_for(x, out, &IQ2XS, &IQ2_XS, true, 16) else {
        return;
    };
    for g in 0..QK_K / 8 {
        let q = c.points[g] | u16::from(c.sign_byte(g) & 127) << 9;
        out.extend_from_slice(&q.to_le_bytes());
    }
    out.extend((0..QK_K / 32).map(|s| c.ls[2 * s] | c.ls[2 * s + 1] << 4));
}

fn s_quantize(x: &[f32], out: &mut Vec<u8>) {
    let Some(c) = fit_for(x, out, &IQ2S, &IQ2_S, false, 16) else {
        return;
    };
    let groups = QK_K / 8;
    out.extend((0..groups).map(|g| c.points[g] as u8));
    out.extend((0..groups).map(|g| c.sign_byte(g)));
    out.extend((0..groups / 4).map(|q| {
        (0..4).fold(0u8, |a, i| {
            a | ((c.points[4 * q + i] >> 8) as u8 & 3) << (2 * i)
        })
    }));
    out.extend((0..QK_K / 32).map(|s| c.ls[2 * s] | c.ls[2 * s + 1] << 4));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::lattice::tests::check_fit_error;

    #[test]
    fn sizes_and_round_trip_error() {
        assert_eq!(IQ2_XXS.block_bytes, 66);
        assert_eq!(IQ2_XS.block_bytes, 74);
        assert_eq!(IQ2_S.block_bytes, 82);
        // Measured 0.343, 0.292, 0.248.
        check_fit_error(&IQ2_XXS, 0.41);
        check_fit_error(&IQ2_XS, 0.35);
        check_fit_error(&IQ2_S, 0.3);
    }
}
