//! GGUF MXFP4 (type 39, the OCP microscaling FP4 that gpt-oss ships its
//! experts in): blocks of 32 values, one E8M0 exponent byte `e` and 16
//! bytes of 4-bit E2M1 codes in Q4_0's nibble order. The weight is
//! `2^(e - 128) * VALUES[code]`: ggml keeps the E2M1 values doubled (so
//! they are integers, 0 to 12) and halves the scale instead. To the int8
//! family that is a codebook format like IQ4_NL, with the scale read from
//! the exponent byte rather than an f16.
//!
//! gguf-py quantizes and dequantizes MXFP4; kgen's codec is bit for bit
//! the same (`runtime/tests/gguf_codec.rs`).

use crate::format::ggml::numpy::np_cast_i64;
use crate::format::ggml::q4_0::q4_0_order;
use crate::format::row::{Format, Int8Repack, Levels, NibbleStore, QK};

/// E2M1's values doubled (ggml's `kvalues_mxfp4`): code `c`'s level before
/// the block scale. Codes 0 and 8 are both zero (+0 and -0).
pub const VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

pub const MXFP4: Format = Format {
    tag: "mxfp4",
    name: "MXFP4",
    gguf_type: 39,
    block: QK,
    super_block: QK,
    block_bytes: 1 + QK / 2,
    bits: 4,
    // No f16 scale: `GgmlMatrix::check_rows` checks every block's
    // `sub_scale` instead (see there).
    scales: &[],
    levels: Levels::Codebook(&VALUES),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 4,
        block_levels: codes,
        sub_scale: exponent_scale,
        mins: false,
        scales_per_block: 1,
        act_group: 1,
        group_scale: false,
        int_sub_scales: None,
        nibbles: Some(NibbleStore::Q4_0Order { at: 1 }),
        fifth: None,
    }),
};

/// `2^(e - 128)` as an f32, bit for bit ggml's `ggml_e8m0_to_fp32_half`:
/// subnormal for `e` 0 and 1, never infinite or NaN (`e = 255` is 2^127).
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

fn codes(block: &[u8], _sub: usize) -> [u8; QK] {
    q4_0_order(&block[1..])
}

/// The block's scale as the int8 kernels take it: `2^(e - 128)`, or 0 for a
/// block of zero codes only, whose weights are 0 whatever `e` says (gguf-py
/// writes such blocks with exponents far outside f16's range, 2^121 for
/// subnormal inputs, and the kernels' f16 scale would make them inf * 0).
fn exponent_scale(block: &[u8], _sub: usize) -> (f32, f32) {
    let zero = block[1..1 + QK / 2].iter().all(|&b| b & 0x77 == 0);
    (if zero { 0.0 } else { e8m0_half(block[0]) }, 0.0)
}

fn dequantize(blk: &[u8], out: &mut [f32]) {
    let d = e8m0_half(blk[0]);
    for (i, &c) in codes(blk, 0).iter().enumerate() {
        out[i] = d * VALUES[c as usize] as f32;
    }
}

/// One block as gguf-py's `MXFP4.quantize_blocks`: the exponent from the
/// largest magnitude (`floor(log2(amax)) - 2 + 127`, so that amax lands in
/// the top code's range; 0 for an all-zero block), then for each value the
/// code whose `d * level` is nearest, the first of equals (numpy's
/// `argmin`; a NaN value takes code 0).
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    // numpy's max propagates NaN, which then fails `d > 0`.
    let amax = x
        .iter()
        .try_fold(0f32, |a, v| (!v.is_nan()).then(|| a.max(v.abs())))
        .unwrap_or(f32::NAN);
    let e = if amax > 0.0 {
        // f32 log2 as numpy takes it on the f32 block, and numpy's cast to
        // uint8 on x86: the exponent wraps for magnitudes below 2^-125 and
        // is 0 for an infinite one.
        np_cast_i64(amax.log2().floor() - 2.0 + 127.0) as u8
    } else {
        0
    };
    let d = e8m0_half(e);
    let code = |v: f32| -> u8 {
        let err = |c: usize| (d * VALUES[c] as f32 - v).abs();
        let mut best = 0;
        for c in 1..16 {
            if err(c) < err(best) {
                best = c;
            }
        }
        best as u8
    };
    out.push(e);
    for i in 0..QK / 2 {
        out.push(code(x[i]) | (code(x[i + QK / 2]) << 4));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponent_scales_are_ggml_s() {
        // In f64, where every one of them is normal: exact.
        for e in 0..=255u8 {
            assert_eq!(e8m0_half(e) as f64, 2f64.powi(e as i32 - 128), "e = {e}");
        }
    }

    #[test]
    fn a_block_round_trips_its_own_levels() {
        // d = 2^-4 (e = 124): every level times d is exactly representable.
        let x: Vec<f32> = (0..QK).map(|i| VALUES[i % 16] as f32 / 16.0).collect();
        let mut b = Vec::new();
        quantize(&x, &mut b);
        assert_eq!(b.len(), MXFP4.block_bytes);
        // amax = 12/16 = 0.75: floor(log2) = -1, e = -1 - 2 + 127 = 124.
        assert_eq!(b[0], 124);
        let mut y = [0f32; QK];
        dequantize(&b, &mut y);
        assert_eq!(&y[..], &x[..]);
        // Zeros take code 0, never 8 (-0). So does a block with an
        // infinity, as in gguf-py: exponent 0 (numpy's cast of inf), and
        // every |2^-128 level - x| rounds to |x|, the first code wins.
        for x in [[0.0; QK], [1.0; QK]] {
            let mut x = x;
            if x[0] != 0.0 {
                x[5] = f32::NEG_INFINITY;
            }
            let mut z = Vec::new();
            quantize(&x, &mut z);
            assert!(z.iter().all(|&v| v == 0), "{z:?}");
        }
    }
}
