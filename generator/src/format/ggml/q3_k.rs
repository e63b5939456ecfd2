//! GGUF Q3_K (type 11): super-blocks of 256 values in 16 sub-blocks of 16,
//! 110 bytes: 32 bytes `hmask`, 64 bytes `qs` of 2-bit pairs, 12 bytes of
//! 6-bit sub-block scales and, last, an f16 `d`. Value `f` has its low 2
//! bits at bits `2 ((f % 128) / 32)` of `qs[32 (f / 128) + f % 32]` and its
//! third bit at bit `f / 32` of `hmask[f % 32]`; the stored level `q`
//! (0..8) is `low | third << 2` and the weight `(d * (sc - 32)) * (q - 4)`,
//! the product `d * (sc - 32)` rounded to f32 first. (ggml reads a clear
//! third bit as "subtract 4": the same thing.) Scale `j` has its low 4 bits
//! in nibble `j / 8` of byte `j % 8` and its top 2 bits at bits
//! `2 (j / 4)` of byte `8 + j % 4`.
//!
//! The int8 family runs it on the 4-bit nibble layout, as Q4_0 with an
//! offset of 4: unsigned levels 0..8 (`q - 4` as signed nibbles on the
//! ISAs that read those), two scales per 32 values (`d * (sc - 32)` of each
//! 16, rounded to f16), each half of a block folded on its own and its
//! offset removed through its own activation sum. 5 bits per weight
//! repacked against the file's 3.44 (the 8-bit layout it used before took
//! 9). Kernels that keep integer sub-scales (AVX2) read the 6-bit scales
//! as the i8 `sc - 32` ([`SubScaleKind::Packed6`]) under `d`.

use crate::format::ggml::kquant::{
    crumb, fit_scale, nearest_clamped, pack_crumbs, requantize, signed_max, sub_block_crumbs, QK_K,
};
use crate::format::ggml::numpy::{read_f16, write_f16};
use crate::format::row::{
    scale_k3, Format, Int8Repack, IntSubScales, Levels, ScaleAt, SubScaleKind, QK,
};

pub const Q3_K: Format = Format {
    tag: "q3_k",
    name: "Q3_K",
    gguf_type: 11,
    block: QK_K,
    super_block: QK_K,
    block_bytes: D + 2,
    bits: 3,
    scales: &[ScaleAt::Bytes(D)],
    levels: Levels::Offset(4),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 3,
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
            kind: SubScaleKind::Packed6,
        }),
        nibbles: None,
        fifth: None,
    }),
};

/// The stored levels (0..8) of 32-value sub-block `s`.
fn sub_levels(blk: &[u8], s: usize) -> [u8; QK] {
    // Value `32 s + i`'s third bit is bit `s` of hmask byte `i`; its low
    // two as `sub_block_crumbs` reads them. The same shifts for all 32.
    let (low, hmask) = (sub_block_crumbs(&blk[QS..], s), &blk[..QK]);
    std::array::from_fn(|i| low[i] | ((hmask[i] >> s) & 1) << 2)
}

/// The scale of 16-value sub-block `s`: `d * (sc - 32)` in f32, as gguf-py
/// forms it.
fn sub16_scale(blk: &[u8], s: usize) -> (f32, f32) {
    let v = scale_k3(&blk[SC..D], s);
    (read_f16(&blk[D..]) * (v as i32 - 32) as f32, 0.0)
}

/// Values per sub-block.
const SUB: usize = 16;
/// Where `qs`, the scales and `d` start.
const QS: usize = QK_K / 8;
const SC: usize = QS + QK_K / 4;
const D: usize = SC + 12;

/// The 256 stored levels (0..8), in order along K.
fn levels(blk: &[u8]) -> [u8; QK_K] {
    std::array::from_fn(|f| {
        let low = crumb(&blk[QS..], f);
        let third = (blk[f % 32] >> (f / 32)) & 1;
        low | (third << 2)
    })
}

/// The 16 stored 6-bit scales (0..64; the scale is `sc - 32`).
fn scales(blk: &[u8]) -> [u8; QK_K / SUB] {
    std::array::from_fn(|j| scale_k3(&blk[SC..D], j))
}

/// One super-block, as gguf-py's `Q3_K.dequantize_blocks`:
/// `(d * (sc - 32)) * (q - 4)` in f32.
fn dequantize(blk: &[u8], out: &mut [f32]) {
    let d = read_f16(&blk[D..]);
    let q = levels(blk);
    for (s, (o, sc)) in out.chunks_mut(SUB).zip(scales(blk)).enumerate() {
        let ds = d * (sc as i32 - 32) as f32;
        for (i, v) in o.iter_mut().enumerate() {
            *v = ds * (q[SUB * s + i] as i32 - 4) as f32;
        }
    }
}

/// One super-block (kgen's quantizer, after llama.cpp's
/// `quantize_row_q3_K`): per sub-block of 16 the signed scale of
/// [`fit_scale`] for levels -4..4; the scales quantized to -32..32 against
/// `d`, which maps the largest in magnitude to -32; the levels rounded
/// again for the stored `d * sc`. An all-zero super-block has `d = 0`,
/// scales 0 (stored 32) and levels 4.
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    if Q3_K.encode_non_finite(x, out) {
        return;
    }
    let mut l = [0i8; QK_K];
    let fitted: [f32; QK_K / SUB] = std::array::from_fn(|s| {
        fit_scale(
            &x[SUB * s..SUB * (s + 1)],
            4,
            &mut l[SUB * s..SUB * (s + 1)],
        )
    });
    let max = signed_max(&fitted);
    let (d, sc) = if max.abs() < 1e-15 {
        (0.0, [0i32; QK_K / SUB])
    } else {
        let iscale = -32.0 / max;
        (
            1.0 / iscale,
            fitted.map(|s| nearest_clamped(iscale * s, -32, 31)),
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
            4,
            &mut l[SUB * s..SUB * (s + 1)],
        );
    }
    let start = out.len();
    out.resize(start + Q3_K.block_bytes, 0);
    let blk = &mut out[start..];
    let q = l.map(|v| (v as i32 + 4) as u8);
    pack_crumbs(q, &mut blk[QS..]);
    for (f, &q) in q.iter().enumerate() {
        blk[f % 32] |= (q >> 2) << (f / 32);
    }
    for (j, &s) in sc.iter().enumerate() {
        let s = (s + 32) as u8;
        blk[SC + j % 8] |= (s & 0x0F) << (4 * (j / 8));
        blk[SC + 8 + j % 4] |= (s >> 4) << (2 * (j / 4));
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
        assert_eq!(GgmlType::from_id(11), Some(GgmlType::Q3_K));
        assert_eq!(GgmlType::Q3_K.block_bytes(), 110);
        assert_eq!(Q3_K.scales, [ScaleAt::Bytes(108)]);
        // The int8 family stores q (0..8), the value q - 4.
        assert_eq!((Q3_K.level_value(0), Q3_K.level_value(7)), (-4, 3));
        let lv: [u8; QK_K] = std::array::from_fn(|f| (f * 5 % 8) as u8);
        let sc: [u8; 16] = std::array::from_fn(|j| (j * 23 % 64) as u8);
        let mut b = vec![0u8; 110];
        for f in 0..QK_K {
            b[32 + 32 * (f / 128) + f % 32] |= (lv[f] & 3) << (2 * (f % 128 / 32));
            b[f % 32] |= (lv[f] >> 2) << (f / 32);
        }
        for j in 0..16 {
            b[96 + j % 8] |= (sc[j] & 15) << (4 * (j / 8));
            b[96 + 8 + j % 4] |= (sc[j] >> 4) << (2 * (j / 4));
        }
        b[108..].copy_from_slice(&f16::from_f32(-0.75).to_bits().to_le_bytes());
        assert_eq!(levels(&b), lv);
        assert_eq!(scales(&b), sc);
        // gguf-py's documented scale packing: byte 8 is MMIIEEAA (scales
        // 0, 4, 8, 12 top bits from the bottom).
        let top = |j: usize| (sc[j] >> 4) as u32;
        assert_eq!(
            b[104] as u32,
            top(0) | top(4) << 2 | top(8) << 4 | top(12) << 6
        );
        let mut w = [0f32; QK_K];
        dequantize(&b, &mut w);
        for f in 0..QK_K {
            let want = (-0.75 * (sc[f / 16] as i32 - 32) as f32) * (lv[f] as i32 - 4) as f32;
            assert_eq!(w[f].to_bits(), want.to_bits(), "value {f}");
        }
        // The int8 row: each 32 values' levels (offset 4) and each 16's
        // scale give the dequantized weights bit for bit.
        for s in 0..8 {
            let sl = sub_levels(&b, s);
            assert!(sl.iter().all(|&q| q < 8));
            for i in 0..QK {
                let (d, m) = sub16_scale(&b, 2 * s + i / 16);
                assert_eq!(m, 0.0);
                let v = d * Q3_K.level_value(sl[i]) as f32;
                assert_eq!(v.to_bits(), w[QK * s + i].to_bits(), "value {}", QK * s + i);
            }
        }
    }

    #[test]
    fn integer_sub_scales_give_the_weights() {
        // The packed 6-bit scales come out as the i8 `sc - 32`.
        let pair = |b: &[u8], s: usize| [2 * s, 2 * s + 1].map(|j| scales(b)[j].wrapping_sub(32));
        crate::format::ggml::kquant::check_signed_int_sub_scales(&Q3_K, D, levels, pair, 29);
    }

    #[test]
    fn quantizer_error_and_edges() {
        let rel = rms_error(&Q3_K, 7);
        let mut w = [0f32; QK_K];
        // llama.cpp's quantizer gets 0.150 on 4096 such values: within 10%.
        assert!(rel < 0.165, "relative RMS error {rel}");
        // Values on a grid come back exactly: 0.5 * l for l in -4..4, -2
        // first in every sub-block (the scale maps it to -4).
        let x: Vec<f32> = (0..QK_K)
            .map(|f| 0.5 * ((f * 3 % 8 * usize::from(f % 16 != 0)) as f32 - 4.0))
            .collect();
        let mut out = Vec::new();
        quantize(&x, &mut out);
        dequantize(&out, &mut w[..QK_K]);
        assert_eq!(&w[..QK_K], &x[..]);
        // All zero: d = 0, levels 4, values +0.
        let mut out = Vec::new();
        quantize(&[0.0; QK_K], &mut out);
        assert_eq!(read_f16(&out[D..]), 0.0);
        assert_eq!(levels(&out), [4; QK_K]);
        assert_eq!(scales(&out), [32; 16]);
        dequantize(&out, &mut w[..QK_K]);
        assert!(w[..QK_K].iter().all(|v| v.to_bits() == 0));
        // Non-finite: NaN d, everything else 0.
        let mut x = [1f32; QK_K];
        x[7] = f32::NAN;
        let mut out = Vec::new();
        quantize(&x, &mut out);
        assert!(read_f16(&out[D..]).is_nan() && out[..D].iter().all(|&b| b == 0));
    }
}
