// kgen template: f32 family (QIGen), ISA avx2 + fma.
//
// The primitives every f32-path kernel is unrolled from. The emitter copies
// this module into generated files and calls these functions from a
// `#[target_feature(enable = "avx2,fma")]` entry point, so each one inlines
// to a single instruction there.
use core::arch::x86_64::*;

/// f32 vector.
pub type V = __m256;
/// u32 vector (packed weight words).
pub type W = __m256i;

#[inline(always)]
pub unsafe fn zero() -> V {
    _mm256_setzero_ps()
}

#[inline(always)]
pub unsafe fn load(p: *const f32) -> V {
    _mm256_loadu_ps(p)
}

#[inline(always)]
pub unsafe fn store(p: *mut f32, v: V) {
    _mm256_storeu_ps(p, v)
}

#[inline(always)]
pub unsafe fn splat(p: *const f32) -> V {
    _mm256_broadcast_ss(&*p)
}

#[inline(always)]
pub unsafe fn fma(a: V, b: V, c: V) -> V {
    _mm256_fmadd_ps(a, b, c)
}

#[inline(always)]
pub unsafe fn add(a: V, b: V) -> V {
    _mm256_add_ps(a, b)
}

#[inline(always)]
pub unsafe fn loadw(p: *const u32) -> W {
    _mm256_loadu_si256(p as *const _)
}

#[inline(always)]
pub unsafe fn splatw(v: u32) -> W {
    _mm256_set1_epi32(v as i32)
}

#[inline(always)]
pub unsafe fn srl<const S: i32>(w: W) -> W {
    _mm256_srli_epi32::<S>(w)
}

#[inline(always)]
pub unsafe fn sll<const S: i32>(w: W) -> W {
    _mm256_slli_epi32::<S>(w)
}

#[inline(always)]
pub unsafe fn and(a: W, b: W) -> W {
    _mm256_and_si256(a, b)
}

#[inline(always)]
pub unsafe fn or(a: W, b: W) -> W {
    _mm256_or_si256(a, b)
}

/// Levels are below 2^8, so the signed conversion is exact.
#[inline(always)]
pub unsafe fn cvt(w: W) -> V {
    _mm256_cvtepi32_ps(w)
}
