//! GGUF Q5_K (type 13): super-blocks of 256 values in 8 sub-blocks of 32,
//! 176 bytes: Q4_K's header (f16 `d`, f16 `dmin`, 12 bytes of 6-bit
//! scales and mins), 32 bytes `qh` of fifth bits (bit `s` of byte `i`:
//! value `i` of sub-block `s`) and 128 bytes `qs` of low nibbles in Q4_K's
//! order. The level is `nibble | fifth bit << 4` (0..32) and the weight
//! `(d * sc) * q - (dmin * m)`, each product rounded to f32 first.
//!
//! The int8 family runs it per 32-value sub-block on the 5-bit layout, with
//! Q4_K's sub-block scales and mins (and its integer sub-scales).

use crate::format::ggml::kquant::{Search, QK_K};
use crate::format::ggml::q4_k::{
    nibbles, quantize_levels, scale_and_min, sub_scale, HEADER, INT_SUB_SCALES,
};
use crate::format::row::{FifthBits, Format, Int8Repack, Levels, NibbleStore, ScaleAt, QK};

pub const Q5_K: Format = Format {
    tag: "q5_k",
    name: "Q5_K",
    gguf_type: 13,
    block: QK_K,
    super_block: QK_K,
    block_bytes: HEADER + QK_K / 8 + QK_K / 2,
    bits: 5,
    scales: &[ScaleAt::Bytes(0), ScaleAt::Bytes(2)],
    levels: Levels::Offset(0),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 5,
        block_levels: levels,
        sub_scale,
        mins: true,
        scales_per_block: 1,
        act_group: 8,
        group_scale: false,
        int_sub_scales: Some(INT_SUB_SCALES),
        nibbles: Some(NibbleStore::Planes { at: QS }),
        fifth: Some(FifthBits::Planes { at: HEADER }),
    }),
};

/// Where `qs` starts, after the header and `qh`.
const QS: usize = HEADER + QK_K / 8;

/// The 32 stored 5-bit levels of sub-block `s`, in order along K.
fn levels(block: &[u8], s: usize) -> [u8; QK] {
    let qh = &block[HEADER..QS];
    let lo = nibbles(&block[QS..], s);
    std::array::from_fn(|i| lo[i] | (((qh[i] >> s) & 1) << 4))
}

/// One super-block, as gguf-py's `Q5_K.dequantize_blocks`:
/// `(d * sc) * q - (dmin * m)` in f32.
fn dequantize(blk: &[u8], out: &mut [f32]) {
    for s in 0..QK_K / QK {
        let (d, m) = scale_and_min(blk, s);
        for (o, q) in out[QK * s..QK * (s + 1)].iter_mut().zip(levels(blk, s)) {
            *o = d * q as f32 - m;
        }
    }
}

/// The scale search of Q5_K's sub-blocks (llama.cpp's for levels 0..=31).
const SEARCH: Search = Search {
    rmin: -0.5,
    rdelta: 0.1,
    steps: 15,
    abs_error: false,
};

/// One super-block (kgen's quantizer, as llama.cpp's `quantize_row_q5_K`):
/// Q4_K's with levels 0..=31.
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    if Q5_K.encode_non_finite(x, out) {
        return;
    }
    let q = quantize_levels(x, 31, SEARCH, out);
    out.extend((0..QK).map(|i| (0..QK_K / QK).fold(0u8, |h, s| h | ((q[QK * s + i] >> 4) << s))));
    for j in 0..QK_K / QK / 2 {
        for i in 0..QK {
            out.push((q[QK * 2 * j + i] & 0x0F) | (q[QK * (2 * j + 1) + i] << 4));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::kquant::{
        check_scale_times_level_plus_min, pack_scale_min_k4, rms_error,
    };
    use crate::format::ggml::numpy::{read_f16, write_f16};
    use crate::format::ggml::GgmlType;

    #[test]
    fn row_and_bit_order() {
        assert_eq!(GgmlType::from_id(13), Some(GgmlType::Q5_K));
        assert_eq!(GgmlType::Q5_K.block_bytes(), 176);
        let lv: [u8; QK_K] = std::array::from_fn(|i| (i * 7 % 32) as u8);
        let sc: [u8; 8] = [1, 2, 63, 4, 33, 6, 62, 8];
        let m: [u8; 8] = [0, 63, 5, 7, 17, 48, 2, 31];
        let mut b = Vec::new();
        write_f16(&mut b, 0.5);
        write_f16(&mut b, 0.25);
        b.extend_from_slice(&pack_scale_min_k4(&sc, &m));
        // qh byte i, bit s: value i of sub-block s.
        b.extend((0..32).map(|i| (0..8).fold(0u8, |h, s| h | ((lv[32 * s + i] >> 4) << s))));
        for j in 0..4 {
            b.extend((0..32).map(|i| (lv[64 * j + i] & 15) | (lv[64 * j + 32 + i] << 4)));
        }
        assert_eq!(b.len(), 176);
        let mut w = [0f32; QK_K];
        dequantize(&b, &mut w);
        for s in 0..8 {
            assert_eq!(levels(&b, s), lv[32 * s..32 * s + 32], "sub-block {s}");
            let (d, mn) = sub_scale(&b, s);
            assert_eq!((d, mn), (0.5 * sc[s] as f32, -0.25 * m[s] as f32));
            for i in 0..QK {
                assert_eq!(w[32 * s + i], d * lv[32 * s + i] as f32 + mn);
            }
        }
        // Value 3 (level 21) has its fifth bit in bit 0 of qh[3], value
        // 35 (level 21) in bit 1; value 2 (level 14) has none.
        assert_eq!((b[16 + 3] & 3, b[16 + 2] & 1), (3, 0));
        // Our own quantizer writes what the reader reads.
        let x: Vec<f32> = (0..QK_K).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut out = Vec::new();
        quantize(&x, &mut out);
        let mut back = [0f32; QK_K];
        dequantize(&out, &mut back);
        for (a, b) in x.iter().zip(&back) {
            assert!((a - b).abs() < 0.05, "{a} -> {b}");
        }
    }

    #[test]
    fn scale_times_level_plus_min_is_the_weight() {
        // Random headers and levels, scales across f16's range: the int8
        // row's scale and min give every dequantized value bit for bit, as
        // gguf-py's `(d * sc) * q - (dmin * m)`.
        check_scale_times_level_plus_min(&Q5_K, 13);
    }

    #[test]
    fn quantizer_error_and_edges() {
        let rel = rms_error(&Q5_K, 5);
        // llama.cpp's quantizer gets 0.0355 on 4096 such values: within 10%.
        assert!(rel < 0.039, "relative RMS error {rel}");
        // All zero.
        let mut out = Vec::new();
        quantize(&[0.0; QK_K], &mut out);
        assert!(out.iter().all(|&b| b == 0));
        // Non-finite: NaN d and dmin.
        let mut x = [1f32; QK_K];
        x[255] = f32::NAN;
        let mut out = Vec::new();
        quantize(&x, &mut out);
        assert_eq!(out.len(), 176);
        assert!(read_f16(&out).is_nan() && read_f16(&out[2..]).is_nan());
    }
}
