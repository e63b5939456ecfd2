// kgen template: f32 family (QIGen), portable Rust.
//
// The same primitives as the SIMD templates, written on fixed-size arrays so
// that LLVM vectorises them for whatever the build targets (SSE2 on x86_64,
// NEON on aarch64). Runs on any CPU.

/// f32 vector of 8 lanes.
pub type V = [f32; 8];
/// u32 vector of 8 lanes (packed weight words).
pub type W = [u32; 8];

#[inline(always)]
pub unsafe fn zero() -> V {
    [0.0; 8]
}

#[inline(always)]
pub unsafe fn load(p: *const f32) -> V {
    core::ptr::read_unaligned(p as *const V)
}

#[inline(always)]
pub unsafe fn store(p: *mut f32, v: V) {
    core::ptr::write_unaligned(p as *mut V, v)
}

#[inline(always)]
pub unsafe fn splat(p: *const f32) -> V {
    [*p; 8]
}

/// Multiply then add, unfused: the portable path must not depend on an FMA unit.
#[inline(always)]
pub unsafe fn fma(a: V, b: V, c: V) -> V {
    let mut r = c;
    for i in 0..8 {
        r[i] += a[i] * b[i];
    }
    r
}

#[inline(always)]
pub unsafe fn add(a: V, b: V) -> V {
    let mut r = a;
    for i in 0..8 {
        r[i] += b[i];
    }
    r
}

#[inline(always)]
pub unsafe fn loadw(p: *const u32) -> W {
    core::ptr::read_unaligned(p as *const W)
}

#[inline(always)]
pub unsafe fn splatw(v: u32) -> W {
    [v; 8]
}

#[inline(always)]
pub unsafe fn srl<const S: u32>(w: W) -> W {
    w.map(|x| x >> S)
}

#[inline(always)]
pub unsafe fn sll<const S: u32>(w: W) -> W {
    w.map(|x| x << S)
}

#[inline(always)]
pub unsafe fn and(a: W, b: W) -> W {
    let mut r = a;
    for i in 0..8 {
        r[i] &= b[i];
    }
    r
}

#[inline(always)]
pub unsafe fn or(a: W, b: W) -> W {
    let mut r = a;
    for i in 0..8 {
        r[i] |= b[i];
    }
    r
}

#[inline(always)]
pub unsafe fn cvt(w: W) -> V {
    w.map(|x| x as f32)
}
