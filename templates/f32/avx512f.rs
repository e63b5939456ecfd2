// kgen template: f32 family (QIGen), ISA avx512f.
//
// The primitives every f32-path kernel is unrolled from. The emitter copies
// this module into generated files and calls these functions from a
// `#[target_feature(enable = "avx512f")]` entry point, so each one inlines to
// a single instruction there.
use core::arch::x86_64::*;

/// f32 vector.
pub type V = __m512;
/// u32 vector (packed weight words).
pub type W = __m512i;

#[inline(always)]
pub unsafe fn zero() -> V {
    _mm512_setzero_ps()
}

#[inline(always)]
pub unsafe fn load(p: *const f32) -> V {
    _mm512_loadu_ps(p)
}

#[inline(always)]
pub unsafe fn store(p: *mut f32, v: V) {
    _mm512_storeu_ps(p, v)
}

#[inline(always)]
pub unsafe fn splat(p: *const f32) -> V {
    _mm512_set1_ps(*p)
}

#[inline(always)]
pub unsafe fn fma(a: V, b: V, c: V) -> V {
    _mm512_fmadd_ps(a, b, c)
}

#[inline(always)]
pub unsafe fn add(a: V, b: V) -> V {
    _mm512_add_ps(a, b)
}

#[inline(always)]
pub unsafe fn loadw(p: *const u32) -> W {
    _mm512_loadu_si512(p as *const _)
}

#[inline(always)]
pub unsafe fn splatw(v: u32) -> W {
    _mm512_set1_epi32(v as i32)
}

#[inline(always)]
pub unsafe fn srl<const S: u32>(w: W) -> W {
    _mm512_srli_epi32::<S>(w)
}

#[inline(always)]
pub unsafe fn sll<const S: u32>(w: W) -> W {
    _mm512_slli_epi32::<S>(w)
}

#[inline(always)]
pub unsafe fn and(a: W, b: W) -> W {
    _mm512_and_si512(a, b)
}

#[inline(always)]
pub unsafe fn or(a: W, b: W) -> W {
    _mm512_or_si512(a, b)
}

/// Levels are below 2^8, so the signed conversion is exact.
#[inline(always)]
pub unsafe fn cvt(w: W) -> V {
    _mm512_cvtepi32_ps(w)
}
