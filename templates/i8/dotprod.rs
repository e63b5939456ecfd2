// kgen template: int8-activation family, ISA aarch64 NEON + dotprod.
//
// One i32 lane per output column (4 per vector): sdot adds 4 byte products
// into each lane, so no horizontal reduction is ever needed. The sdot
// intrinsic is unstable on stable Rust, so it is inline asm here. 4-bit
// weights are signed nibbles (paper 000's Q4_0_4_4 with the fast unpack).
use core::arch::aarch64::*;
use core::arch::asm;

/// f32 vector (4 columns).
pub type F = float32x4_t;
/// 4 i32 lanes, or 16 bytes (4 per column).
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
    vdupq_n_f32(*p)
}

#[inline(always)]
pub unsafe fn fmaf(a: F, b: F, c: F) -> F {
    vfmaq_f32(c, a, b)
}

#[inline(always)]
pub unsafe fn mulf(a: F, b: F) -> F {
    vmulq_f32(a, b)
}

/// 16 weight bytes: 4 of each of 4 columns (8 of each of a column pair in
/// the i8mm template's pair layouts).
#[inline(always)]
pub unsafe fn loadb(p: *const u8) -> I {
    vreinterpretq_s32_u8(vld1q_u8(p))
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

/// 4 activation bytes in every lane.
#[inline(always)]
pub unsafe fn bcast4(p: *const i8) -> I {
    vdupq_n_s32((p as *const i32).read_unaligned())
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

/// Block accumulator += 4-byte products: the weights are signed (`16 q`)
/// and so are the activations, which is exactly sdot.
#[inline(always)]
pub unsafe fn pair_acc(acc: I, w: I, x: I) -> I {
    sdot(acc, w, x)
}

/// sdot already accumulates i32 lane sums.
#[inline(always)]
pub unsafe fn block_sum(acc: I) -> I {
    acc
}

/// Signed x signed.
#[inline(always)]
pub unsafe fn dot_s(acc: I, w: I, x: I) -> I {
    sdot(acc, w, x)
}

#[inline(always)]
pub unsafe fn splati(p: *const i32) -> I {
    vdupq_n_s32(*p)
}

#[inline(always)]
pub unsafe fn subi(a: I, b: I) -> I {
    vsubq_s32(a, b)
}

/// a + b per i32 lane: a group's integer sums (formats with one weight
/// scale per group; kept only in those kernels).
#[inline(always)]
pub unsafe fn addi(a: I, b: I) -> I {
    vaddq_s32(a, b)
}

#[inline(always)]
pub unsafe fn cvti(a: I) -> F {
    vcvtq_f32_s32(a)
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

// 5-bit formats (Q5_0): the emitter keeps these only in 5-bit kernels. A
// weight chunk `w` holds the low 4 bits of 4 values per column as the 4-bit
// layout does, but as unsigned nibbles (never signed: the 5-bit levels are
// 0..32 and the offset is removed per block with the activation sums); `h`
// (the column group's plane) holds their fifth bits: byte `j` bit `G` for
// chunk `G`'s low nibble, bit `4 + G` for its high one (see
// `kgen::layout::int8`). `y = (h >> G) & 0x11` isolates them; one sli / sri
// inserts them next to the nibble: 4 ops per chunk.

/// Unsigned 5-bit levels (0..32) of chunk `G`'s low nibbles: `y << 4`
/// inserted above the low nibble of `w` (sli).
#[inline(always)]
pub unsafe fn hb_lo<const G: i32>(w: I, h: I) -> I {
    let h = vreinterpretq_u8_s32(h);
    let s = match G {
        1 => vshrq_n_u8::<1>(h),
        2 => vshrq_n_u8::<2>(h),
        3 => vshrq_n_u8::<3>(h),
        _ => h,
    };
    let y = vandq_u8(s, vdupq_n_u8(0x11));
    vreinterpretq_s32_u8(vsliq_n_u8::<4>(vreinterpretq_u8_s32(w), y))
}

/// Unsigned 5-bit levels of chunk `G`'s high nibbles: `w >> 4` inserted
/// below bit 4 of `y` (sri).
#[inline(always)]
pub unsafe fn hb_hi<const G: i32>(w: I, h: I) -> I {
    let h = vreinterpretq_u8_s32(h);
    let s = match G {
        1 => vshrq_n_u8::<1>(h),
        2 => vshrq_n_u8::<2>(h),
        3 => vshrq_n_u8::<3>(h),
        _ => h,
    };
    let y = vandq_u8(s, vdupq_n_u8(0x11));
    vreinterpretq_s32_u8(vsriq_n_u8::<4>(y, vreinterpretq_u8_s32(w)))
}

/// acc + per-lane sums of 4 products of `a` and `x` and of `b` and `y`
/// (two sdot: the unsigned 5-bit levels are non-negative int8).
#[inline(always)]
pub unsafe fn dot2_u(acc: I, a: I, x: I, b: I, y: I) -> I {
    sdot(sdot(acc, a, x), b, y)
}

// 3-bit layouts (Q3_K, the IQ1 / IQ2 codebook indices): a stored chunk
// holds two 3-bit levels per byte, in bits 0..3 and 4..7, and one bit of
// the fourth chunk's two in bits 3 and 7 (see `kgen::layout::int8`). The
// levels stay unsigned (never signed nibbles); the offset goes through the
// activation sums as Q5_0's does. The emitter keeps these only in 3-bit
// kernels.

/// The levels in bits 0..3 of each byte.
#[inline(always)]
pub unsafe fn lo3(w: I) -> I {
    vandq_s32(w, vdupq_n_s32(0x0707_0707))
}

/// The levels in bits 4..7 of each byte.
#[inline(always)]
pub unsafe fn hi3(w: I) -> I {
    let v = vshrq_n_u8::<4>(vreinterpretq_u8_s32(w));
    vreinterpretq_s32_u8(vandq_u8(v, vdupq_n_u8(7)))
}

/// The fourth chunk from the bits 3 and 7 of stored chunks `a`, `b`, `c`
/// (bit 0, 1, 2 of each level): byte shifts, a mask and two bit selects
/// (bsl), as a chunk [`lo3`] and [`hi3`] read.
#[inline(always)]
pub unsafe fn spill3(a: I, b: I, c: I) -> I {
    let (a, b, c) = (
        vreinterpretq_u8_s32(a),
        vreinterpretq_u8_s32(b),
        vreinterpretq_u8_s32(c),
    );
    let r = vandq_u8(vshrq_n_u8::<3>(a), vdupq_n_u8(0x11));
    let r = vbslq_u8(vdupq_n_u8(0x22), vshrq_n_u8::<2>(b), r);
    vreinterpretq_s32_u8(vbslq_u8(vdupq_n_u8(0x44), vshrq_n_u8::<1>(c), r))
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
