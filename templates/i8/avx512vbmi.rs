// kgen template: int8-activation family, ISA avx512vbmi (AVX-512 VNNI plus
// VBMI), over templates/i8/avx512vnni.rs. Only the table-lookup kernels
// (codebook and grid formats) run on it: every other format's kernels
// would be the same instructions as avx512vnni's. So the index splits
// below feed `lut` / `grid_lut` and nothing else, and may leave bits above
// the index for the lookup to ignore.
//
// vpermb looks up 64 bytes by bits 0..6 of each index byte, so with the
// 16-entry table repeated in every 128-bit lane the bits above the nibble
// select a copy of the same table and need no mask: the low nibble's
// indices are the weight bytes as loaded, the high nibble's one 16-bit
// shift (bits shifted in from the next byte land in bits 4..8, which pick
// a copy). Three ops per 64 weights where vpshufb takes a mask, a shift
// and a mask before its two lookups: the IQ4_NL GEMV kernel timed alone on
// Zen 4 went from 72 to 63.5 cycles per 64-column block, and the GEMVs of
// every table-lookup format measured 1.11-1.21x (grids 1.03x).
use core::arch::x86_64::*;

/// Low-nibble codebook indices: the bytes themselves (see the file note).
#[inline(always)]
pub unsafe fn idx_lo(w: I) -> I {
    w
}

/// High-nibble codebook indices in bits 0..4 (one shift, no mask).
#[inline(always)]
pub unsafe fn idx_hi(w: I) -> I {
    _mm512_srli_epi16::<4>(w)
}

/// The lattice codebooks' 3-bit indices in bits 0..3 of each byte: the
/// bytes themselves (bit 3, a bit of the fourth chunk, and above pick a
/// copy of the 8 levels, which the emitted table repeats).
#[inline(always)]
pub unsafe fn lo3(w: I) -> I {
    w
}

/// The 3-bit indices in bits 4..7, shifted down (one shift, no mask).
#[inline(always)]
pub unsafe fn hi3(w: I) -> I {
    _mm512_srli_epi16::<4>(w)
}

/// Codebook levels of 64 indices in bits 0..4: one vpermb of the table in
/// all four 128-bit lanes (a loop-invariant load). Bits 4..6 of an index
/// pick a copy of the table, bits 6..8 are ignored; a 3-bit index's bit 3
/// picks the half that repeats its 8 levels.
#[inline(always)]
pub unsafe fn lut(idx: I) -> I {
    let t = _mm512_broadcast_i32x4(_mm_loadu_si128(CODEBOOK.as_ptr() as *const __m128i));
    _mm512_permutexvar_epi8(idx, t)
}

/// Levels of index field `C` of 64 nibble indices in bits 0..4 (bits above
/// pick a copy of the table or are ignored, as in [`lut`]): one vpermb of
/// the field's table in all four 128-bit lanes.
#[inline(always)]
pub unsafe fn grid_lut<const C: usize>(idx: I) -> I {
    let t = _mm512_broadcast_i32x4(_mm_loadu_si128(GRID[C].as_ptr() as *const __m128i));
    _mm512_permutexvar_epi8(idx, t)
}
