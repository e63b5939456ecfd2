// kgen template: int8-activation family, ISA aarch64 NEON + dotprod + i8mm.
//
// Pair layouts (Q4_0_4_8 / Q4_0_8_8): a 16-byte vector holds 8 bytes of each
// of two columns. GEMM uses smmla, a 2x2 (rows x columns) tile of 8-value
// dot products per instruction, twice the multiply-adds of sdot; GEMV uses
// sdot with the activation's 8 bytes in both halves. smmla and sdot are
// unstable as intrinsics on stable Rust, so they are inline asm here.
use core::arch::aarch64::*;
use core::arch::asm;

/// f32 vector: 4 columns of a row, or a 2x2 tile `[r0c0, r0c1, r1c0, r1c1]`.
pub type F = float32x4_t;
/// 4 i32 lanes, or 16 bytes.
pub type I = int32x4_t;

#[inline(always)]
pub unsafe fn zero_f() -> F {
    vdupq_n_f32(0.0)
}

#[inline(always)]
pub unsafe fn zero_i() -> I {
    vdupq_n_s32(0)
}

#[inline(always)]
pub unsafe fn loadf(p: *const f32) -> F {
    vld1q_f32(p)
}

#[inline(always)]
pub unsafe fn storef(p: *mut f32, v: F) {
    vst1q_f32(p, v)
}

#[inline(always)]
pub unsafe fn splatf(p: *const f32) -> F {
    vld1q_dup_f32(p)
}

#[inline(always)]
pub unsafe fn fmaf(a: F, b: F, c: F) -> F {
    vfmaq_f32(c, a, b)
}

#[inline(always)]
pub unsafe fn mulf(a: F, b: F) -> F {
    vmulq_f32(a, b)
}

/// 16 weight bytes: 8 of each of a column pair.
#[inline(always)]
pub unsafe fn loadb(p: *const u8) -> I {
    vreinterpretq_s32_u8(vld1q_u8(p))
}

/// 16 activation bytes: 8 values of each row of a row pair.
#[inline(always)]
pub unsafe fn loadx(p: *const i8) -> I {
    vreinterpretq_s32_s8(vld1q_s8(p))
}

/// Low signed nibbles as `16 q` (one shift; the 16 is in the activation scale).
#[inline(always)]
pub unsafe fn nib_lo(w: I) -> I {
    vreinterpretq_s32_u8(vshlq_n_u8::<4>(vreinterpretq_u8_s32(w)))
}

/// High signed nibbles as `16 q` (one mask).
#[inline(always)]
pub unsafe fn nib_hi(w: I) -> I {
    vreinterpretq_s32_u8(vandq_u8(vreinterpretq_u8_s32(w), vdupq_n_u8(0xF0)))
}

/// 2-bit layouts: the levels in bits `S..S + 2` of each byte (`S` = 0, 2,
/// 4, 6), as unsigned bytes (a shift by a register: `ushr` has no shift by
/// 0; LLVM folds the constant).
#[inline(always)]
pub unsafe fn crumb<const S: i32>(w: I) -> I {
    let v = vshlq_u8(vreinterpretq_u8_s32(w), vdupq_n_s8(-(S as i8)));
    vreinterpretq_s32_u8(vandq_u8(v, vdupq_n_u8(3)))
}

/// 8 activation bytes in both halves (one ld1r; rows are only byte aligned).
#[inline(always)]
pub unsafe fn bcast8(p: *const i8) -> I {
    vreinterpretq_s32_u64(vdupq_n_u64((p as *const u64).read_unaligned()))
}

/// acc + per-lane sum of 4 signed byte products (sdot).
#[inline(always)]
pub unsafe fn sdot(acc: I, w: I, x: I) -> I {
    let mut acc = acc;
    asm!(
        ".arch_extension dotprod",
        "sdot {acc:v}.4s, {w:v}.16b, {x:v}.16b",
        acc = inout(vreg) acc,
        w = in(vreg) w,
        x = in(vreg) x,
        options(pure, nomem, nostack, preserves_flags),
    );
    acc
}

/// acc (2x2 i32) + a (2x8 i8, rows) times b (2x8 i8, columns) transposed.
#[inline(always)]
pub unsafe fn mmla(acc: I, a: I, b: I) -> I {
    let mut acc = acc;
    asm!(
        ".arch_extension i8mm",
        "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags),
    );
    acc
}

/// Two columns' partial-sum pairs of two column pairs: 4 column sums.
#[inline(always)]
pub unsafe fn pair_sum(a: I, b: I) -> I {
    vpaddq_s32(a, b)
}

#[inline(always)]
pub unsafe fn cvti(a: I) -> F {
    vcvtq_f32_s32(a)
}

/// Rows of two 2x2 tiles (or tiles of two rows): 64-bit zips.
#[inline(always)]
pub unsafe fn zip_lo(a: F, b: F) -> F {
    vreinterpretq_f32_f64(vzip1q_f64(
        vreinterpretq_f64_f32(a),
        vreinterpretq_f64_f32(b),
    ))
}

#[inline(always)]
pub unsafe fn zip_hi(a: F, b: F) -> F {
    vreinterpretq_f32_f64(vzip2q_f64(
        vreinterpretq_f64_f32(a),
        vreinterpretq_f64_f32(b),
    ))
}

/// 4 f16 scales (one per column) to f32 with one fcvtl (base Armv8 FP;
/// the f16 vector intrinsics are unstable, so inline asm).
#[inline(always)]
pub unsafe fn scales(p: *const u16) -> F {
    let h = vld1_u16(p);
    let out: F;
    asm!(
        "fcvtl {o:v}.4s, {h:v}.4h",
        o = out(vreg) out,
        h = in(vreg) h,
        options(pure, nomem, nostack, preserves_flags),
    );
    out
}

/// A column pair's 2 f16 scales as `[s0, s1, s0, s1]` for a 2x2 tile: one
/// 32-bit ld1r and one fcvtl.
#[inline(always)]
pub unsafe fn scales_pair(p: *const u16) -> F {
    let h = vreinterpret_u16_u32(vdup_n_u32((p as *const u32).read_unaligned()));
    let out: F;
    asm!(
        "fcvtl {o:v}.4s, {h:v}.4h",
        o = out(vreg) out,
        h = in(vreg) h,
        options(pure, nomem, nostack, preserves_flags),
    );
    out
}

/// Codebook of the codebook formats (IQ4_NL): the int8 level of each 4-bit
/// index. The emitter replaces it with the format's own table and keeps it
/// and `lut` only in codebook kernels (`idx_lo` / `idx_hi` also in grid ones).
pub const CODEBOOK: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Low-nibble codebook indices (one mask).
#[inline(always)]
pub unsafe fn idx_lo(w: I) -> I {
    vreinterpretq_s32_u8(vandq_u8(vreinterpretq_u8_s32(w), vdupq_n_u8(0x0F)))
}

/// High-nibble codebook indices (one shift).
#[inline(always)]
pub unsafe fn idx_hi(w: I) -> I {
    vreinterpretq_s32_u8(vshrq_n_u8::<4>(vreinterpretq_u8_s32(w)))
}

/// Codebook levels of 16 indices (0..16): one tbl from the table in a
/// register (the table load is loop-invariant).
#[inline(always)]
pub unsafe fn lut(idx: I) -> I {
    let t = vld1q_s8(CODEBOOK.as_ptr());
    vreinterpretq_s32_s8(vqtbl1q_s8(t, vreinterpretq_u8_s32(idx)))
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

/// Levels of index field `C` of 16 nibble indices (0..16): one tbl from the table in a register
/// (the table load is loop-invariant).
#[inline(always)]
pub unsafe fn grid_lut<const C: usize>(idx: I) -> I {
    let t = vld1q_s8(GRID[C].as_ptr());
    vreinterpretq_s32_s8(vqtbl1q_s8(t, vreinterpretq_u8_s32(idx)))
}

// 5-bit formats (Q5_0): the emitter keeps these only in 5-bit kernels. The
// nibble chunks are the 4-bit pair layout's with unsigned nibbles; after
// them each column has a 4-byte word of fifth bits (see
// `kgen::layout::int8`), one 16-byte load per two column pairs. Byte `k`
// bit `2g + s` is the fifth bit of chunk `g`'s low nibble at byte `k + 4s`
// of the column's 8, bit `4 + 2g + s` that of its high nibble. The levels
// stay unsigned (0..32, non-negative int8 for sdot / smmla); `sub_bias`
// removes the offset per block.

/// The fifth bits of column pair `P` (0 or 1) of a 16-byte plane load, as
/// 8 bytes per column: the column's word, then the word shifted right by
/// one per byte (a zip of `h` with `h >> 1`), so chunk `g`'s bits are at
/// `2g` and `4 + 2g` of the byte matching its nibbles.
#[inline(always)]
pub unsafe fn hb_pair<const P: i32>(h: I) -> I {
    let a = vreinterpretq_u32_s32(h);
    let b = vreinterpretq_u32_u8(vshrq_n_u8::<1>(vreinterpretq_u8_s32(h)));
    vreinterpretq_s32_u32(if P == 0 { vzip1q_u32(a, b) } else { vzip2q_u32(a, b) })
}

/// Unsigned 5-bit levels (0..32) of chunk `G`'s low nibbles of a column
/// pair, from `e` = its [`hb_pair`]: `y = (e >> 2G) & 0x11` inserted above
/// the low nibble of `w` (sli).
#[inline(always)]
pub unsafe fn hb_lo<const G: i32>(w: I, e: I) -> I {
    let e = vreinterpretq_u8_s32(e);
    let s = match G {
        1 => vshrq_n_u8::<2>(e),
        _ => e,
    };
    let y = vandq_u8(s, vdupq_n_u8(0x11));
    vreinterpretq_s32_u8(vsliq_n_u8::<4>(vreinterpretq_u8_s32(w), y))
}

/// Unsigned 5-bit levels of chunk `G`'s high nibbles: `w >> 4` inserted
/// below bit 4 of `y` (sri).
#[inline(always)]
pub unsafe fn hb_hi<const G: i32>(w: I, e: I) -> I {
    let e = vreinterpretq_u8_s32(e);
    let s = match G {
        1 => vshrq_n_u8::<2>(e),
        _ => e,
    };
    let y = vandq_u8(s, vdupq_n_u8(0x11));
    vreinterpretq_s32_u8(vsriq_n_u8::<4>(y, vreinterpretq_u8_s32(w)))
}

/// `acc` minus the offset corrections of two activation rows for a 2x2
/// tile, `[c0, c0, c1, c1]` (a GEMV passes its row twice).
#[inline(always)]
pub unsafe fn sub_bias(acc: I, c0: *const i32, c1: *const i32) -> I {
    vsubq_s32(acc, vcombine_s32(vdup_n_s32(*c0), vdup_n_s32(*c1)))
}

/// The level sums of a row pair as `[c0, c0, c1, c1]`, the rows of a 2x2
/// tile, for the min term of formats with mins (Q4_1, Q4_K, ...).
#[inline(always)]
pub unsafe fn splat_pair(c0: *const i32, c1: *const i32) -> I {
    vcombine_s32(vdup_n_s32(*c0), vdup_n_s32(*c1))
}

// 6-bit formats (Q6_K): the emitter keeps these only in 6-bit kernels. A
// stored chunk holds 6-bit levels in bits 0..6 of each byte and one bit
// pair of a spill chunk in bits 6..8 (see `kgen::layout::int8`). The
// levels are non-negative int8 for sdot; the offset comes off per scale
// (Q6_K: per 16 values) through the activation sums.

/// Unsigned 6-bit levels (0..64) of a stored chunk.
#[inline(always)]
pub unsafe fn lo6(w: I) -> I {
    vandq_s32(w, vdupq_n_s32(0x3F3F_3F3F))
}

/// Unsigned 6-bit levels of the spill chunk carried by stored chunks `a`,
/// `b`, `c`: `(a >> 6) | (b >> 6) << 2 | (c >> 6) << 4` per byte, a byte
/// shift and two shift-and-inserts (sli).
#[inline(always)]
pub unsafe fn spill6(a: I, b: I, c: I) -> I {
    let (a, b, c) = (
        vreinterpretq_u8_s32(a),
        vreinterpretq_u8_s32(b),
        vreinterpretq_u8_s32(c),
    );
    let r = vshrq_n_u8::<6>(a);
    let r = vsliq_n_u8::<2>(r, vshrq_n_u8::<6>(b));
    vreinterpretq_s32_u8(vsliq_n_u8::<4>(r, vshrq_n_u8::<6>(c)))
}
