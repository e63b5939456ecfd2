// kgen template: int8-activation family, ISA avxvnni (+ avx2, fma, f16c).
//
// Extends templates/i8/avx2.rs (`I8Isa::extends`): the kernels get every
// primitive of that template, less those redefined here. What differs is
// the dot: vpdpbusd (VEX) adds 4 byte products into each i32 lane without
// maddubs' saturating i16 pairs, so the block accumulators are i32 lanes,
// and the primitives that lean on it (a mask for high nibbles, `level +
// 128` for signed levels) are only here.
use core::arch::x86_64::*;

/// High nibbles in place, as `16 q` (GEMV on u8 dots): one mask where
/// [`nib_hi`] takes a shift and a mask; their own accumulator, scaled back
/// once per block by [`join_hi`].
#[inline(always)]
pub unsafe fn nib_hi16(w: I) -> I {
    _mm256_and_si256(w, _mm256_set1_epi8(0xF0u8 as i8))
}

/// A 3-bit layout's levels in bits 4..7 in place, as `16 q`, for the
/// same accumulators (bit 7 holds a bit of the fourth chunk: masked off).
#[inline(always)]
pub unsafe fn hi3_16(w: I) -> I {
    _mm256_and_si256(w, _mm256_set1_epi8(0x70))
}

/// A block's dot from its low-nibble sum and its `16 q` high-nibble sum
/// (exact: every high-nibble product is a multiple of 16).
#[inline(always)]
pub unsafe fn join_hi(lo: I, hi16: I) -> I {
    _mm256_add_epi32(lo, _mm256_srai_epi32::<4>(hi16))
}

/// acc + per-lane sum of 4 products of unsigned `w` and signed `x` bytes,
/// in one non-saturating instruction.
#[inline(always)]
pub unsafe fn dot_u(acc: I, w: I, x: I) -> I {
    _mm256_dpbusd_avx_epi32(acc, w, x)
}

/// Block accumulator += 4-byte products of unsigned `w` and signed `x` (i32).
#[inline(always)]
pub unsafe fn pair_acc(acc: I, w: I, x: I) -> I {
    _mm256_dpbusd_avx_epi32(acc, w, x)
}

/// vpdpbusd already accumulates i32 lane sums.
#[inline(always)]
pub unsafe fn block_sum(acc: I) -> I {
    acc
}

/// `acc` plus the `4 q` sums of [`crumb1_x4`] and [`crumb3_x4`] scaled
/// back (exact: each is a multiple of 4).
#[inline(always)]
pub unsafe fn join_crumbs(acc: I, odd4: I) -> I {
    _mm256_add_epi32(acc, _mm256_srai_epi32::<2>(odd4))
}

/// Signed levels as unsigned `level + 128` (the sign bit flipped) for
/// vpdpbusd: one xor where `dot_s` takes more; the kernels remove
/// `128 * sum(x)` per scale through the activations' sums.
#[inline(always)]
pub unsafe fn flip(w: I) -> I {
    _mm256_xor_si256(w, _mm256_set1_epi8(-128))
}

/// 5- and 6-bit formats: acc + per-lane sums of 4 products of unsigned `a`
/// and signed `x` and of `b` and `y` (two vpdpbusd).
#[inline(always)]
pub unsafe fn dot2_u(acc: I, a: I, x: I, b: I, y: I) -> I {
    _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, a, x), b, y)
}
