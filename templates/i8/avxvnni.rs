// kgen template: int8-activation family, ISA avxvnni (+ avx2, fma, f16c).
//
// Primitives the int8 kernels are unrolled from. One i32 lane per output
// column: `dot_u` / `dot_s` add 4 byte products into each lane with
// vpdpbusd (VEX), so no horizontal reduction is ever needed.
use core::arch::x86_64::*;

/// f32 vector (8 columns).
pub type F = __m256;
/// Integer vector: 8 i32 lanes, or 32 bytes (4 per column).
pub type I = __m256i;

#[inline(always)]
pub unsafe fn zero_f() -> F {
    _mm256_setzero_ps()
}

#[inline(always)]
pub unsafe fn zero_i() -> I {
    _mm256_setzero_si256()
}

#[inline(always)]
pub unsafe fn loadf(p: *const f32) -> F {
    _mm256_loadu_ps(p)
}

#[inline(always)]
pub unsafe fn storef(p: *mut f32, v: F) {
    _mm256_storeu_ps(p, v)
}

#[inline(always)]
pub unsafe fn splatf(p: *const f32) -> F {
    _mm256_broadcast_ss(&*p)
}

#[inline(always)]
pub unsafe fn fmaf(a: F, b: F, c: F) -> F {
    _mm256_fmadd_ps(a, b, c)
}

#[inline(always)]
pub unsafe fn mulf(a: F, b: F) -> F {
    _mm256_mul_ps(a, b)
}

/// 32 weight bytes: 4 of each of 8 columns.
#[inline(always)]
pub unsafe fn loadb(p: *const u8) -> I {
    _mm256_loadu_si256(p as *const __m256i)
}

/// Low nibbles, as unsigned bytes.
#[inline(always)]
pub unsafe fn nib_lo(w: I) -> I {
    _mm256_and_si256(w, _mm256_set1_epi8(0x0F))
}

/// High nibbles, as unsigned bytes.
#[inline(always)]
pub unsafe fn nib_hi(w: I) -> I {
    _mm256_and_si256(_mm256_srli_epi16::<4>(w), _mm256_set1_epi8(0x0F))
}

/// High nibbles in place, as `16 q` (GEMV on u8 dots): one mask where
/// [`nib_hi`] takes a shift and a mask; their own accumulator, scaled back
/// once per block by [`join_hi`].
#[inline(always)]
pub unsafe fn nib_hi16(w: I) -> I {
    _mm256_and_si256(w, _mm256_set1_epi8(0xF0u8 as i8))
}

/// A block's dot from its low-nibble sum and its `16 q` high-nibble sum
/// (exact: every high-nibble product is a multiple of 16).
#[inline(always)]
pub unsafe fn join_hi(lo: I, hi16: I) -> I {
    _mm256_add_epi32(lo, _mm256_srai_epi32::<4>(hi16))
}

/// 4 activation bytes in every lane.
#[inline(always)]
pub unsafe fn bcast4(p: *const i8) -> I {
    _mm256_set1_epi32((p as *const i32).read_unaligned())
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

/// 2-bit layouts: the levels in bits `S..S + 2` of each byte (`S` = 0, 2,
/// 4, 6), as unsigned bytes.
#[inline(always)]
pub unsafe fn crumb<const S: i32>(w: I) -> I {
    _mm256_and_si256(_mm256_srli_epi16::<S>(w), _mm256_set1_epi8(3))
}

/// Bit pair 1 of a 2-bit layout's bytes in place, as `4 q` (one mask
/// where `crumb::<2>` takes a shift and a mask): dotted into accumulators
/// of their own, scaled back by [`join_crumbs`].
#[inline(always)]
pub unsafe fn crumb1_x4(w: I) -> I {
    _mm256_and_si256(w, _mm256_set1_epi8(0x0C))
}

/// Bit pair 3 likewise, as `4 q`, after the shift by 4 that `crumb::<4>`
/// makes too.
#[inline(always)]
pub unsafe fn crumb3_x4(w: I) -> I {
    _mm256_and_si256(_mm256_srli_epi16::<4>(w), _mm256_set1_epi8(0x0C))
}

/// `acc` plus the `4 q` sums of [`crumb1_x4`] and [`crumb3_x4`] scaled
/// back (exact: each is a multiple of 4).
#[inline(always)]
pub unsafe fn join_crumbs(acc: I, odd4: I) -> I {
    _mm256_add_epi32(acc, _mm256_srai_epi32::<2>(odd4))
}

/// acc + per-lane sum of 4 products of signed bytes: |w| times x with w's sign.
#[inline(always)]
pub unsafe fn dot_s(acc: I, w: I, x: I) -> I {
    dot_u(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
}

/// Signed levels as unsigned `level + 128` (the sign bit flipped) for
/// vpdpbusd: one xor where `dot_s` takes more; the kernels remove
/// `128 * sum(x)` per scale through the activations' sums.
#[inline(always)]
pub unsafe fn flip(w: I) -> I {
    _mm256_xor_si256(w, _mm256_set1_epi8(-128))
}

#[inline(always)]
pub unsafe fn splati(p: *const i32) -> I {
    _mm256_set1_epi32(*p)
}

#[inline(always)]
pub unsafe fn subi(a: I, b: I) -> I {
    _mm256_sub_epi32(a, b)
}

/// a + b per i32 lane: a group's integer sums (formats with one weight
/// scale per group; kept only in those kernels).
#[inline(always)]
pub unsafe fn addi(a: I, b: I) -> I {
    _mm256_add_epi32(a, b)
}

#[inline(always)]
pub unsafe fn cvti(a: I) -> F {
    _mm256_cvtepi32_ps(a)
}

/// 8 f16 scales (one per column) to f32 in one instruction.
#[inline(always)]
pub unsafe fn scales(p: *const u16) -> F {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// Codebook of the codebook formats (IQ4_NL): the int8 level of each 4-bit
/// index. The emitter replaces it with the format's own table and keeps it
/// and `lut` only in codebook kernels (`idx_lo` / `idx_hi` also in grid ones).
pub const CODEBOOK: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Low-nibble codebook indices (one mask).
#[inline(always)]
pub unsafe fn idx_lo(w: I) -> I {
    nib_lo(w)
}

/// High-nibble codebook indices (shift and mask).
#[inline(always)]
pub unsafe fn idx_hi(w: I) -> I {
    nib_hi(w)
}

/// Codebook levels of 32 indices (0..16): one pshufb with the table in both
/// 128-bit lanes (the table load is loop-invariant).
#[inline(always)]
pub unsafe fn lut(idx: I) -> I {
    let t = _mm256_broadcastsi128_si256(_mm_loadu_si128(CODEBOOK.as_ptr() as *const __m128i));
    _mm256_shuffle_epi8(t, idx)
}

/// Grid formats (kgen's `k2_*` and `k1`, paper 004): `GRID[C][n]` is the
/// unsigned level of index field `C` of nibble `n` (bits `2C..2C + 2` for
/// 2-bit indices, as in this default table; bit `C` for 1-bit ones, four
/// tables), so one shuffle per field turns nibble indices into levels. The
/// emitter replaces the table with the format's and keeps it, `idx_lo` /
/// `idx_hi` and `grid_lut` only in grid kernels.
pub const GRID: [[i8; 16]; 2] = [
    [0, 1, 3, 4, 0, 1, 3, 4, 0, 1, 3, 4, 0, 1, 3, 4],
    [0, 0, 0, 0, 1, 1, 1, 1, 3, 3, 3, 3, 4, 4, 4, 4],
];

/// Levels of index field `C` of 32 nibble indices (0..16): one pshufb with the table in both 128-bit lanes
/// (the table load is loop-invariant).
#[inline(always)]
pub unsafe fn grid_lut<const C: usize>(idx: I) -> I {
    let t = _mm256_broadcastsi128_si256(_mm_loadu_si128(GRID[C].as_ptr() as *const __m128i));
    _mm256_shuffle_epi8(t, idx)
}

// 5-bit formats (Q5_0): the emitter keeps these only in 5-bit kernels. A
// weight chunk `w` holds the low 4 bits of 8 values per column as the 4-bit
// layout does; `h` (the column group's plane) holds their fifth bits: byte
// `j` bit `G` for chunk `G`'s low nibble, bit `4 + G` for its high one (see
// `kgen::layout::int8`). The 32-bit shifts move bits across bytes only
// outside the masks.

/// Unsigned 5-bit levels (0..32) of chunk `G`'s low nibbles:
/// `(w & 0x0F) | ((h >> G) << 4 & 0x10)`.
#[inline(always)]
pub unsafe fn hb_lo<const G: i32>(w: I, h: I) -> I {
    let y = _mm256_srli_epi32::<G>(h);
    _mm256_or_si256(
        _mm256_and_si256(w, _mm256_set1_epi8(0x0F)),
        _mm256_and_si256(_mm256_slli_epi32::<4>(y), _mm256_set1_epi8(0x10)),
    )
}

/// Unsigned 5-bit levels of chunk `G`'s high nibbles:
/// `(w >> 4 & 0x0F) | (h >> G & 0x10)` (the `h >> G` is shared with [`hb_lo`]).
#[inline(always)]
pub unsafe fn hb_hi<const G: i32>(w: I, h: I) -> I {
    let y = _mm256_srli_epi32::<G>(h);
    _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32::<4>(w), _mm256_set1_epi8(0x0F)),
        _mm256_and_si256(y, _mm256_set1_epi8(0x10)),
    )
}

/// acc + per-lane sums of 4 products of unsigned `a` and signed `x` and of
/// `b` and `y` (two vpdpbusd).
#[inline(always)]
pub unsafe fn dot2_u(acc: I, a: I, x: I, b: I, y: I) -> I {
    _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, a, x), b, y)
}

// 6-bit formats (Q6_K): the emitter keeps these only in 6-bit kernels. A
// stored chunk holds 6-bit levels in bits 0..6 of each byte and one bit
// pair of a spill chunk in bits 6..8 (see `kgen::layout::int8`).

/// Unsigned 6-bit levels (0..64) of a stored chunk.
#[inline(always)]
pub unsafe fn lo6(w: I) -> I {
    _mm256_and_si256(w, _mm256_set1_epi8(0x3F))
}

/// Unsigned 6-bit levels of the spill chunk carried by stored chunks `a`,
/// `b`, `c`: `(a >> 6) | (b >> 6) << 2 | (c >> 6) << 4` per byte (16-bit
/// shifts: the masks drop the bits they bring from the byte above).
#[inline(always)]
pub unsafe fn spill6(a: I, b: I, c: I) -> I {
    _mm256_or_si256(
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<6>(a), _mm256_set1_epi8(0x03)),
            _mm256_and_si256(_mm256_srli_epi16::<4>(b), _mm256_set1_epi8(0x0C)),
        ),
        _mm256_and_si256(_mm256_srli_epi16::<2>(c), _mm256_set1_epi8(0x30)),
    )
}
