// kgen template: int8-activation family, ISA avx2 (+ fma, f16c).
//
// Primitives the int8 kernels are unrolled from. One i32 lane per output
// column: `dot_u` / `dot_s` add 4 byte products into each lane with
// maddubs + madd, so no horizontal reduction is ever needed.
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

/// Stores 32 level bytes: the scratch of levels GEMM kernels unpack once
/// per tile and L1 block (kept only in those kernels).
#[inline(always)]
pub unsafe fn storeb(p: *mut u8, v: I) {
    _mm256_storeu_si256(p as *mut __m256i, v)
}

/// Asks for the cache line at `p` ahead of its use (GEMV weight streams,
/// kept only in those kernels). A prefetch never faults, so `p` may lie
/// past the matrix.
#[inline(always)]
pub unsafe fn prefetch(p: *const u8) {
    _mm_prefetch::<_MM_HINT_T0>(p as *const i8)
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

/// 4 activation bytes in every lane.
#[inline(always)]
pub unsafe fn bcast4(p: *const i8) -> I {
    _mm256_set1_epi32((p as *const i32).read_unaligned())
}

/// 16 activation bytes in both 128-bit lanes, for [`xsel`].
#[inline(always)]
pub unsafe fn xquad(p: *const i8) -> I {
    _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i))
}

/// One dword of each 128-bit lane of an [`xquad`] in every lane (vpshufd
/// with `IMM` = dword x 0x55): a shuffle-port uop instead of a broadcast load.
#[inline(always)]
pub unsafe fn xsel<const IMM: i32>(v: I) -> I {
    _mm256_shuffle_epi32::<IMM>(v)
}

/// acc + per-lane sum of 4 products of unsigned `w` and signed `x` bytes.
/// Pairs of products stay below 2^15 for weights up to 128, so maddubs
/// never saturates here.
#[inline(always)]
pub unsafe fn dot_u(acc: I, w: I, x: I) -> I {
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)))
}

/// Block accumulator += 4-byte products of unsigned 4-bit `w` and signed `x`,
/// kept as i16 pair sums: the 8 maddubs of a 32-block add up to at most
/// 8 * 2 * 15 * 127 = 30480, so nothing saturates or wraps, and one madd per
/// block (`block_sum`) widens them instead of one per chunk. (5-bit levels:
/// the 4 maddubs of a half block, at most 4 * 2 * 31 * 127 = 31496.)
#[inline(always)]
pub unsafe fn pair_acc(acc: I, w: I, x: I) -> I {
    _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x))
}

/// The i32 lane sums of a block accumulator.
#[inline(always)]
pub unsafe fn block_sum(acc: I) -> I {
    _mm256_madd_epi16(acc, _mm256_set1_epi16(1))
}

/// 2-bit layouts: the levels in bits `S..S + 2` of each byte (`S` = 0, 2,
/// 4, 6), as unsigned bytes. The 16-bit shift moves bits across bytes only
/// outside the mask.
#[inline(always)]
pub unsafe fn crumb<const S: i32>(w: I) -> I {
    _mm256_and_si256(_mm256_srli_epi16::<S>(w), _mm256_set1_epi8(3))
}

/// Bit pair 1 of a 2-bit layout's bytes in place, as `4 q` (one mask
/// where `crumb::<2>` takes a shift and a mask): dotted into accumulators
/// of their own, scaled back by [`join_crumbs`]. `4 q` is at most 12, so a
/// maddubs pair sum stays within 2 * 12 * 127 (see the emitter's
/// `I16_CRUMB_BLOCKS`).
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

/// Block pair sums `acc` plus the i16 `4 q` pair sums of [`crumb1_x4`]
/// and [`crumb3_x4`], divided by 4 (an arithmetic shift: exact, as every
/// such sum is a multiple of 4).
#[inline(always)]
pub unsafe fn join_crumbs(acc: I, odd4: I) -> I {
    _mm256_add_epi16(acc, _mm256_srai_epi16::<2>(odd4))
}

/// acc + per-lane sum of 4 products of signed bytes: |w| times x with w's sign.
#[inline(always)]
pub unsafe fn dot_s(acc: I, w: I, x: I) -> I {
    dot_u(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
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

// 3-bit layouts (Q3_K, the IQ1 / IQ2 codebook indices): a stored chunk
// holds two 3-bit levels per byte, in bits 0..3 and 4..7, and one bit of
// the fourth chunk's two in bits 3 and 7 (see `kgen::layout::int8`). The
// emitter keeps these only in 3-bit kernels.

/// The levels in bits 0..3 of each byte.
#[inline(always)]
pub unsafe fn lo3(w: I) -> I {
    _mm256_and_si256(w, _mm256_set1_epi8(0x07))
}

/// The levels in bits 4..7 of each byte (the 16-bit shift moves bits
/// across bytes only outside the mask).
#[inline(always)]
pub unsafe fn hi3(w: I) -> I {
    _mm256_and_si256(_mm256_srli_epi16::<4>(w), _mm256_set1_epi8(0x07))
}

/// The fourth chunk from the bits 3 and 7 of stored chunks `a`, `b`, `c`
/// (bit 0, 1, 2 of each level), as a chunk [`lo3`] and [`hi3`] read.
#[inline(always)]
pub unsafe fn spill3(a: I, b: I, c: I) -> I {
    _mm256_or_si256(
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<3>(a), _mm256_set1_epi8(0x11)),
            _mm256_and_si256(_mm256_srli_epi16::<2>(b), _mm256_set1_epi8(0x22)),
        ),
        _mm256_and_si256(_mm256_srli_epi16::<1>(c), _mm256_set1_epi8(0x44)),
    )
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
/// `b` and `y`, for weights below 64: the two maddubs' i16 pair sums add up
/// to at most 2 * 2 * 63 * 127 = 32004, so one madd widens both (a whole
/// block of 5-bit products would not fit [`pair_acc`]'s i16 lanes).
#[inline(always)]
pub unsafe fn dot2_u(acc: I, a: I, x: I, b: I, y: I) -> I {
    let p = _mm256_add_epi16(_mm256_maddubs_epi16(a, x), _mm256_maddubs_epi16(b, y));
    _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)))
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

// Integer sub-scales (GGUF Q2_K, `kgen::format::IntSubScales`): the
// emitter keeps these only in kernels that keep them. A column group's
// entry 0 of a block is 8 u16, one per column: the bytes of its two
// 16-value halves, the scale level in the low nibble, the min level in
// the high one.

/// The column group's 16 sub-scale bytes in both 128-bit lanes.
#[inline(always)]
pub unsafe fn sub_bytes(p: *const u16) -> I {
    _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i))
}

/// [`sub_scale`]'s byte shuffles: for half `H`, column `c`'s byte
/// `2c + H` into both i16 halves of its lane (-1: a zero byte).
pub const SUB_CTL: [[i8; 32]; 2] = [
    [0, -1, 0, -1, 2, -1, 2, -1, 4, -1, 4, -1, 6, -1, 6, -1, 8, -1, 8, -1, 10, -1, 10, -1, 12, -1, 12, -1, 14, -1, 14, -1],
    [1, -1, 1, -1, 3, -1, 3, -1, 5, -1, 5, -1, 7, -1, 7, -1, 9, -1, 9, -1, 11, -1, 11, -1, 13, -1, 13, -1, 15, -1, 15, -1],
];

/// The scale levels of half `H` (column `c`'s byte `2c + H`, low nibble)
/// in both i16 halves of each column's lane, for [`scaled_sum`] (the
/// shuffle's table load is loop-invariant).
#[inline(always)]
pub unsafe fn sub_scale<const H: usize>(e: I) -> I {
    let ctl = _mm256_loadu_si256(SUB_CTL[H].as_ptr() as *const __m256i);
    _mm256_shuffle_epi8(_mm256_and_si256(e, _mm256_set1_epi8(0x0F)), ctl)
}

// 6-bit scales and mins per 32 values (GGUF Q4_K, Q5_K): a column group's
// entry 0 of a block is 8 u16, one per column: the scale byte low, the min
// byte high. Kept only in those kernels.

/// The block's scale levels (column `c`'s byte `2c`, below 64) in both i16
/// halves of each column's lane, for [`scaled_sum`] or [`dot2_sc`].
#[inline(always)]
pub unsafe fn scale_byte(e: I) -> I {
    let ctl = _mm256_loadu_si256(SUB_CTL[0].as_ptr() as *const __m256i);
    _mm256_shuffle_epi8(e, ctl)
}

/// Two blocks' min levels as an i16 pair per column lane (the block at
/// `p0` low), from their entries 0.
#[inline(always)]
pub unsafe fn min_pair(p0: *const u16, p1: *const u16) -> I {
    let a = _mm256_cvtepu8_epi16(_mm_loadu_si128(p0 as *const __m128i));
    let b = _mm256_cvtepu8_epi16(_mm_loadu_si128(p1 as *const __m128i));
    _mm256_blend_epi16::<0b1010_1010>(_mm256_srli_epi32::<16>(a), b)
}

/// Both halves' min levels as an i16 pair per column lane (half 0 low):
/// the bytes zero-extended to i16, shifted down by 4.
#[inline(always)]
pub unsafe fn sub_mins(p: *const u16) -> I {
    _mm256_srli_epi16::<4>(_mm256_cvtepu8_epi16(_mm_loadu_si128(p as *const __m128i)))
}

/// The row's two adjacent activation sums (two i32: a block's two
/// half-block sums, each `2^S` times a sum within 16 * 127 where the
/// activations carry an offset format's offset; or two blocks' sums within
/// 32 * 127, `S` = 0) divided by `2^S`, as an i16 pair in every lane (the
/// first low).
#[inline(always)]
pub unsafe fn sum_pair<const S: i32>(p: *const i32) -> I {
    let v = _mm256_srai_epi32::<S>(_mm256_set1_epi64x((p as *const i64).read_unaligned()));
    _mm256_packs_epi32(v, v)
}

/// acc + per-lane sum of the products of `a`'s and `b`'s i16 pairs: a
/// part's pair sums (at most 31496) times its scale codes (|s| <= 63), or
/// min codes or offset terms (|v| <= 4096) times a pair of activation sums
/// (at most 32 * 127): each call adds less than 2^27, far inside i32.
#[inline(always)]
pub unsafe fn scaled_sum(acc: I, a: I, b: I) -> I {
    _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
}

// Signed integer sub-scales (GGUF Q6_K, and Q3_K's read out as i8): entry 0
// holds each column's two i8 scales (one per 16 values); kept only in
// those kernels.

/// The column group's 16 i8 scales sign-extended: column `c`'s lane holds
/// its two halves' scales as an i16 pair (half 0 low).
#[inline(always)]
pub unsafe fn sub_pair_s(p: *const u16) -> I {
    _mm256_cvtepi8_epi16(_mm_loadu_si128(p as *const __m128i))
}

/// Both halves' offset terms `-2^S sc` (an offset of `2^S`, at most 4096
/// in size) as an i16 pair per column lane, for [`scaled_sum`] against
/// [`sum_pair`].
#[inline(always)]
pub unsafe fn sub_offset_s<const S: i32>(p: *const u16) -> I {
    _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16::<S>(sub_pair_s(p)))
}

/// [`sub_scale_s`]'s word shuffles: half `H`'s i16 scale into both halves
/// of each lane of [`sub_pair_s`]'s result (in-lane, so the same for both
/// 128-bit lanes).
pub const SUB_CTL_S: [[i8; 32]; 2] = [
    [0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13],
    [2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15, 2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15],
];

/// Half `H`'s signed scale in both i16 halves of each column's lane.
#[inline(always)]
pub unsafe fn sub_scale_s<const H: usize>(p: *const u16) -> I {
    let ctl = _mm256_loadu_si256(SUB_CTL_S[H].as_ptr() as *const __m256i);
    _mm256_shuffle_epi8(sub_pair_s(p), ctl)
}

/// acc + per-lane sums of 4 products of unsigned `a` and signed `x` and of
/// `b` and `y` (levels below 64: the i16 pair sums stay below 2^15, as in
/// [`dot2_u`]), each pair sum times the i16 scale `s` of its lane.
#[inline(always)]
pub unsafe fn dot2_sc(acc: I, a: I, x: I, b: I, y: I, s: I) -> I {
    let p = _mm256_add_epi16(_mm256_maddubs_epi16(a, x), _mm256_maddubs_epi16(b, y));
    _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
}
