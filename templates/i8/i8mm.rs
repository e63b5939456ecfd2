// kgen template: int8-activation family, ISA aarch64 NEON + dotprod + i8mm.
//
// Pair layouts (Q4_0_4_8 / Q4_0_8_8): a 16-byte vector holds 8 bytes of each
// of two columns. GEMM uses smmla, a 2x2 (rows x columns) tile of 8-value
// dot products per instruction, twice the multiply-adds of sdot; GEMV uses
// sdot with the activation's 8 bytes in both halves. smmla and sdot are
// unstable as intrinsics on stable Rust, so they are inline asm here.
//
// Extends templates/i8/dotprod.rs (`I8Isa::extends`): the kernels get every
// primitive of that template (sdot among them), less those redefined here
// for the pair layouts.
use core::arch::aarch64::*;
use core::arch::asm;

/// f32 vector: 4 columns of a row, or a 2x2 tile `[r0c0, r0c1, r1c0, r1c1]`.
pub type F = float32x4_t;
/// 4 i32 lanes, or 16 bytes.
pub type I = int32x4_t;

#[inline(always)]
pub unsafe fn splatf(p: *const f32) -> F {
    vld1q_dup_f32(p)
}

/// 16 activation bytes: 8 values of each row of a row pair.
#[inline(always)]
pub unsafe fn loadx(p: *const i8) -> I {
    vreinterpretq_s32_s8(vld1q_s8(p))
}

/// 8 activation bytes in both halves (one ld1r; rows are only byte aligned).
#[inline(always)]
pub unsafe fn bcast8(p: *const i8) -> I {
    vreinterpretq_s32_u64(vdupq_n_u64((p as *const u64).read_unaligned()))
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