// kgen template: f32 family (QIGen), ISA neon (aarch64 Advanced SIMD).
//
// The primitives every f32-path kernel is unrolled from. The emitter copies
// this module into generated files and calls these functions from a
// `#[target_feature(enable = "neon")]` entry point, so each one inlines to a
// single instruction there. 128-bit vectors: 4 f32 lanes, 32 registers.
use core::arch::aarch64::*;

/// f32 vector.
pub type V = float32x4_t;
/// u32 vector (packed weight words).
pub type W = uint32x4_t;

#[inline(always)]
pub unsafe fn zero() -> V {
    vdupq_n_f32(0.0)
}

/// `ld1` needs only element alignment, which any `*const f32` has.
#[inline(always)]
pub unsafe fn load(p: *const f32) -> V {
    vld1q_f32(p)
}

#[inline(always)]
pub unsafe fn store(p: *mut f32, v: V) {
    vst1q_f32(p, v)
}

#[inline(always)]
pub unsafe fn splat(p: *const f32) -> V {
    vld1q_dup_f32(p)
}

/// `a * b + c`, fused. `vfmaq_f32(c, a, b)` is `c + a * b`: accumulator first.
#[inline(always)]
pub unsafe fn fma(a: V, b: V, c: V) -> V {
    vfmaq_f32(c, a, b)
}

#[inline(always)]
pub unsafe fn add(a: V, b: V) -> V {
    vaddq_f32(a, b)
}

#[inline(always)]
pub unsafe fn loadw(p: *const u32) -> W {
    vld1q_u32(p)
}

#[inline(always)]
pub unsafe fn splatw(v: u32) -> W {
    vdupq_n_u32(v)
}

/// `ushr`: S must be in 1..=32 (the emitter never shifts by 0).
#[inline(always)]
pub unsafe fn srl<const S: i32>(w: W) -> W {
    vshrq_n_u32::<S>(w)
}

/// `shl`: S must be in 0..=31.
#[inline(always)]
pub unsafe fn sll<const S: i32>(w: W) -> W {
    vshlq_n_u32::<S>(w)
}

#[inline(always)]
pub unsafe fn and(a: W, b: W) -> W {
    vandq_u32(a, b)
}

#[inline(always)]
pub unsafe fn or(a: W, b: W) -> W {
    vorrq_u32(a, b)
}

/// Levels, and levels masked in place (`q * 2^shift`, at most 8 significant
/// bits), are exact in f32; the unsigned conversion covers every u32.
#[inline(always)]
pub unsafe fn cvt(w: W) -> V {
    vcvtq_f32_u32(w)
}
