// kgen template: int8-activation family, ISA avx512vnni (+ avx512f, avx512bw).
//
// Primitives the int8 kernels are unrolled from. One i32 lane per output
// column (16 per vector): vpdpbusd adds 4 byte products into each lane, so no
// horizontal reduction is ever needed.
use core::arch::x86_64::*;

/// f32 vector (16 columns).
pub type F = __m512;
/// Integer vector: 16 i32 lanes, or 64 bytes (4 per column).
pub type I = __m512i;

#[inline(always)]
pub unsafe fn zero_f() -> F {
    _mm512_setzero_ps()
}

#[inline(always)]
pub unsafe fn zero_i() -> I {
    _mm512_setzero_si512()
}

#[inline(always)]
pub unsafe fn loadf(p: *const f32) -> F {
    _mm512_loadu_ps(p)
}

#[inline(always)]
pub unsafe fn storef(p: *mut f32, v: F) {
    _mm512_storeu_ps(p, v)
}

#[inline(always)]
pub unsafe fn splatf(p: *const f32) -> F {
    _mm512_set1_ps(*p)
}

#[inline(always)]
pub unsafe fn fmaf(a: F, b: F, c: F) -> F {
    _mm512_fmadd_ps(a, b, c)
}

#[inline(always)]
pub unsafe fn mulf(a: F, b: F) -> F {
    _mm512_mul_ps(a, b)
}

/// Asks for the cache line at `p` ahead of its use (GEMV weight streams,
/// kept only in those kernels). A prefetch never faults, so `p` may lie
/// past the matrix.
#[inline(always)]
pub unsafe fn prefetch(p: *const u8) {
    _mm_prefetch::<_MM_HINT_T0>(p as *const i8)
}

/// 64 weight bytes: 4 of each of 16 columns.
#[inline(always)]
pub unsafe fn loadb(p: *const u8) -> I {
    _mm512_loadu_si512(p as *const _)
}

#[inline(always)]
pub unsafe fn nib_lo(w: I) -> I {
    _mm512_and_si512(w, _mm512_set1_epi8(0x0F))
}

#[inline(always)]
pub unsafe fn nib_hi(w: I) -> I {
    _mm512_and_si512(_mm512_srli_epi16::<4>(w), _mm512_set1_epi8(0x0F))
}

/// High nibbles in place, as `16 q` (GEMV on u8 dots): one mask where
/// [`nib_hi`] takes a shift and a mask; their own accumulator, scaled back
/// once per block by [`join_hi`].
#[inline(always)]
pub unsafe fn nib_hi16(w: I) -> I {
    _mm512_and_si512(w, _mm512_set1_epi8(0xF0u8 as i8))
}

/// A 3-bit layout's levels in bits 4..7 in place, as `16 q`, for the
/// same accumulators (bit 7 holds a bit of the fourth chunk: masked off).
#[inline(always)]
pub unsafe fn hi3_16(w: I) -> I {
    _mm512_and_si512(w, _mm512_set1_epi8(0x70))
}

/// A block's dot from its low-nibble sum and its `16 q` high-nibble sum
/// (exact: every high-nibble product is a multiple of 16).
#[inline(always)]
pub unsafe fn join_hi(lo: I, hi16: I) -> I {
    _mm512_add_epi32(lo, _mm512_srai_epi32::<4>(hi16))
}

#[inline(always)]
pub unsafe fn bcast4(p: *const i8) -> I {
    _mm512_set1_epi32((p as *const i32).read_unaligned())
}

/// acc + per-lane sum of 4 products of unsigned `w` and signed `x` bytes.
#[inline(always)]
pub unsafe fn dot_u(acc: I, w: I, x: I) -> I {
    _mm512_dpbusd_epi32(acc, w, x)
}

/// Block accumulator += 4-byte products of unsigned `w` and signed `x` (i32).
#[inline(always)]
pub unsafe fn pair_acc(acc: I, w: I, x: I) -> I {
    _mm512_dpbusd_epi32(acc, w, x)
}

/// vpdpbusd already accumulates i32 lane sums.
#[inline(always)]
pub unsafe fn block_sum(acc: I) -> I {
    acc
}

/// 2-bit layouts: the levels in bits `S..S + 2` of each byte (`S` = 0, 2,
/// 4, 6), as unsigned bytes.
#[inline(always)]
pub unsafe fn crumb<const S: u32>(w: I) -> I {
    _mm512_and_si512(_mm512_srli_epi16::<S>(w), _mm512_set1_epi8(3))
}

/// Bit pair 1 of a 2-bit layout's bytes in place, as `4 q` (one mask
/// where `crumb::<2>` takes a shift and a mask): dotted into accumulators
/// of their own, scaled back by [`join_crumbs`].
#[inline(always)]
pub unsafe fn crumb1_x4(w: I) -> I {
    _mm512_and_si512(w, _mm512_set1_epi8(0x0C))
}

/// Bit pair 3 likewise, as `4 q`, after the shift by 4 that `crumb::<4>`
/// makes too.
#[inline(always)]
pub unsafe fn crumb3_x4(w: I) -> I {
    _mm512_and_si512(_mm512_srli_epi16::<4>(w), _mm512_set1_epi8(0x0C))
}

/// `acc` plus the `4 q` sums of [`crumb1_x4`] and [`crumb3_x4`] scaled
/// back (exact: each is a multiple of 4).
#[inline(always)]
pub unsafe fn join_crumbs(acc: I, odd4: I) -> I {
    _mm512_add_epi32(acc, _mm512_srai_epi32::<2>(odd4))
}

/// Signed x signed: |w| times x negated where w is negative.
#[inline(always)]
pub unsafe fn dot_s(acc: I, w: I, x: I) -> I {
    let neg = _mm512_movepi8_mask(w);
    let xs = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
    _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(w), xs)
}

/// Signed levels as unsigned `level + 128` (the sign bit flipped) for
/// vpdpbusd: one xor where `dot_s` takes more; the kernels remove
/// `128 * sum(x)` per scale through the activations' sums.
#[inline(always)]
pub unsafe fn flip(w: I) -> I {
    _mm512_xor_si512(w, _mm512_set1_epi8(-128))
}

#[inline(always)]
pub unsafe fn splati(p: *const i32) -> I {
    _mm512_set1_epi32(*p)
}

#[inline(always)]
pub unsafe fn subi(a: I, b: I) -> I {
    _mm512_sub_epi32(a, b)
}

#[inline(always)]
pub unsafe fn cvti(a: I) -> F {
    _mm512_cvtepi32_ps(a)
}

/// 16 f16 scales (one per column) to f32 in one instruction.
#[inline(always)]
pub unsafe fn scales(p: *const u16) -> F {
    _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
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

/// Codebook levels of 64 indices (0..16): one vpshufb with the table in all
/// four 128-bit lanes (the table load is loop-invariant).
#[inline(always)]
pub unsafe fn lut(idx: I) -> I {
    let t = _mm512_broadcast_i32x4(_mm_loadu_si128(CODEBOOK.as_ptr() as *const __m128i));
    _mm512_shuffle_epi8(t, idx)
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

/// Levels of index field `C` of 64 nibble indices (0..16): one vpshufb with the table in all four 128-bit lanes
/// (the table load is loop-invariant).
#[inline(always)]
pub unsafe fn grid_lut<const C: usize>(idx: I) -> I {
    let t = _mm512_broadcast_i32x4(_mm_loadu_si128(GRID[C].as_ptr() as *const __m128i));
    _mm512_shuffle_epi8(t, idx)
}

// 5-bit formats (Q5_0): the emitter keeps these only in 5-bit kernels. A
// weight chunk `w` holds the low 4 bits of 4 values per column as the 4-bit
// layout does; `h` (the column group's plane) holds their fifth bits: byte
// `j` bit `G` for chunk `G`'s low nibble, bit `4 + G` for its high one (see
// `kgen::layout::int8`). `y = (h >> G) & 0x11` isolates chunk `G`'s two
// bits (the 32-bit shift moves bits across bytes only outside the mask);
// one vpternlogd then takes the nibble from `w` and bit 4 from `y`.

/// Unsigned 5-bit levels (0..32) of chunk `G`'s low nibbles: bits 0..4 of
/// `w`, bits 4..8 of `y << 4` (the fifth bit, zeros).
#[inline(always)]
pub unsafe fn hb_lo<const G: u32>(w: I, h: I) -> I {
    let y = _mm512_and_si512(_mm512_srli_epi32::<G>(h), _mm512_set1_epi8(0x11));
    // 0xE4: c ? a : b, bit by bit.
    _mm512_ternarylogic_epi32::<0xE4>(w, _mm512_slli_epi32::<4>(y), _mm512_set1_epi8(0x0F))
}

/// Unsigned 5-bit levels of chunk `G`'s high nibbles: bits 0..4 of
/// `w >> 4`, bits 4..8 of `y` (the `y` is shared with [`hb_lo`]).
#[inline(always)]
pub unsafe fn hb_hi<const G: u32>(w: I, h: I) -> I {
    let y = _mm512_and_si512(_mm512_srli_epi32::<G>(h), _mm512_set1_epi8(0x11));
    _mm512_ternarylogic_epi32::<0xE4>(_mm512_srli_epi32::<4>(w), y, _mm512_set1_epi8(0x0F))
}

/// acc + per-lane sums of 4 products of unsigned `a` and signed `x` and of
/// `b` and `y` (two vpdpbusd).
#[inline(always)]
pub unsafe fn dot2_u(acc: I, a: I, x: I, b: I, y: I) -> I {
    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, a, x), b, y)
}

// 3-bit layouts (Q3_K, the IQ1 / IQ2 codebook indices): a stored chunk
// holds two 3-bit levels per byte, in bits 0..3 and 4..7, and one bit of
// the fourth chunk's two in bits 3 and 7 (see `kgen::layout::int8`). The
// emitter keeps these only in 3-bit kernels.

/// The levels in bits 0..3 of each byte.
#[inline(always)]
pub unsafe fn lo3(w: I) -> I {
    _mm512_and_si512(w, _mm512_set1_epi8(0x07))
}

/// The levels in bits 4..7 of each byte.
#[inline(always)]
pub unsafe fn hi3(w: I) -> I {
    _mm512_and_si512(_mm512_srli_epi16::<4>(w), _mm512_set1_epi8(0x07))
}

/// The fourth chunk from the bits 3 and 7 of stored chunks `a`, `b`, `c`
/// (bit 0, 1, 2 of each level): two bit selects (0xE4: c ? a : b) merge
/// the shifted chunks, [`lo3`] and [`hi3`] mask what they bring along (on
/// avx512vbmi, which leaves them unmasked, the lookup table ignores it).
#[inline(always)]
pub unsafe fn spill3(a: I, b: I, c: I) -> I {
    let ab = _mm512_ternarylogic_epi32::<0xE4>(
        _mm512_srli_epi16::<3>(a),
        _mm512_srli_epi16::<2>(b),
        _mm512_set1_epi8(0x11),
    );
    _mm512_ternarylogic_epi32::<0xE4>(ab, _mm512_srli_epi16::<1>(c), _mm512_set1_epi8(0x33))
}

// 6-bit formats (Q6_K): the emitter keeps these only in 6-bit kernels. A
// stored chunk holds 6-bit levels in bits 0..6 of each byte and one bit
// pair of a spill chunk in bits 6..8 (see `kgen::layout::int8`).

/// Unsigned 6-bit levels (0..64) of a stored chunk.
#[inline(always)]
pub unsafe fn lo6(w: I) -> I {
    _mm512_and_si512(w, _mm512_set1_epi8(0x3F))
}

/// Unsigned 6-bit levels of the spill chunk carried by stored chunks `a`,
/// `b`, `c`: `(a >> 6) | (b >> 6) << 2 | (c >> 6) << 4` per byte. The
/// 16-bit shifts bring bits of the byte above only into the bits the next
/// select or the final mask drops; two bit selects (0xE4: c ? a : b) merge.
#[inline(always)]
pub unsafe fn spill6(a: I, b: I, c: I) -> I {
    let ab = _mm512_ternarylogic_epi32::<0xE4>(
        _mm512_srli_epi16::<6>(a),
        _mm512_srli_epi16::<4>(b),
        _mm512_set1_epi8(0x03),
    );
    let abc = _mm512_ternarylogic_epi32::<0xE4>(
        ab,
        _mm512_srli_epi16::<2>(c),
        _mm512_set1_epi8(0x0F),
    );
    _mm512_and_si512(abc, _mm512_set1_epi8(0x3F))
}

// Integer sub-scales (GGUF Q2_K, `kgen::format::IntSubScales`), kept only
// in kernels that keep them. vpdpbusd sums in i32, so a block's two
// 16-value halves sum into accumulators of their own (two dot chains per
// row and column group) and then share each column's lane as an i16 pair:
// half 1's dot (within 16 * 3 * 127) in the high half, half 0's in the low
// one over a bias of 2^14 that keeps it positive (no borrow from the high
// one), and one vpdpwssd scales both. A column group's entry 0 of a block
// is 16 u16, one per column: the bytes of its two halves, the scale level
// in the low nibble, the min level in the high one.

/// Both halves' dots as one i16 pair per lane: `hi` (half 1) in the high
/// i16, `lo` (half 0) plus the bias below it.
#[inline(always)]
pub unsafe fn join_halves(lo: I, hi: I) -> I {
    _mm512_add_epi32(
        _mm512_slli_epi32::<16>(hi),
        _mm512_add_epi32(lo, _mm512_set1_epi32(1 << 14)),
    )
}

/// Both halves' scale levels as the i16 pair a joined lane dots against,
/// half 0's low (the bytes widened to i16, the min nibbles masked off: no
/// rotate, which would take a dot slot on Zen 5).
#[inline(always)]
pub unsafe fn sub_pair(p: *const u16) -> I {
    let e = _mm512_cvtepu8_epi16(_mm256_loadu_si256(p as *const __m256i));
    _mm512_and_si512(e, _mm512_set1_epi32(0x000F_000F))
}

/// Both halves' min levels as an i16 pair per column lane (half 0 low).
#[inline(always)]
pub unsafe fn sub_mins(p: *const u16) -> I {
    _mm512_srli_epi16::<4>(_mm512_cvtepu8_epi16(_mm256_loadu_si256(p as *const __m256i)))
}

/// The row's two half-block activation sums (two i32, each `2^S` times a
/// sum within 16 * 127) divided by `2^S`, as an i16 pair in every lane
/// (half 0 low).
#[inline(always)]
pub unsafe fn sum_pair<const S: u32>(p: *const i32) -> I {
    let v = _mm512_srai_epi32::<S>(_mm512_set1_epi64((p as *const i64).read_unaligned()));
    _mm512_packs_epi32(v, v)
}

/// acc + per-lane sum of the products of `a`'s and `b`'s i16 pairs.
#[inline(always)]
pub unsafe fn scaled_sum(acc: I, a: I, b: I) -> I {
    _mm512_dpwssd_epi32(acc, a, b)
}

#[inline(always)]
pub unsafe fn addi(a: I, b: I) -> I {
    _mm512_add_epi32(a, b)
}

/// What the join's bias added to a group's scaled sums: 2^14 times the
/// sum of half 0's scale levels, the low i16 of `corr` (a sum of the
/// group's [`sub_pair`]s, at most 8 * 15 per half).
#[inline(always)]
pub unsafe fn unbias(corr: I) -> I {
    _mm512_slli_epi32::<14>(_mm512_and_si512(corr, _mm512_set1_epi32(0xFFFF)))
}
