// kgen template overlay: int8-activation family, ISA avx512vnni, GEMV
// micro kernels. Its items replace the template's of the same name
// (`kgen::emit::extend_template`).
//
// The activation bytes stay in memory until the dot that takes them:
// vpdpbusd broadcasts its memory operand (`{1to16}`), so no
// `vpbroadcastd zmm, m32` is issued per 4 bytes of a row. On Zen 4 that
// broadcast takes a vector-pipe slot, and a GEMV block of 64 columns issues
// 8 of them beside 32 dots: the Q4_0 1x64 kernel timed alone went from 55
// to 53 cycles per block, and kgen_peer measured the GEMVs of Q4_0 5%, Q8_0
// 7-15% and Q6_K 11% faster (4096x4096 in L3, 1 thread). The GEMM tiles
// keep register broadcasts: each is read by the dots of every column group
// of a row there, and with this overlay on every kernel the K-quant GEMMs
// were 2-5% slower.
use core::arch::x86_64::*;

/// 4 activation bytes for every lane, left in memory (a pointer to them):
/// the dot that reads them broadcasts them.
pub type X = *const i8;

#[inline(always)]
pub unsafe fn bcast4(p: *const i8) -> X {
    p
}

/// The 4 bytes at `x` in every lane of a register, for an op that cannot
/// read them from memory.
#[inline(always)]
pub unsafe fn xvec(x: X) -> I {
    _mm512_set1_epi32((x as *const i32).read_unaligned())
}

/// acc + per-lane sum of 4 products of unsigned `w` and the signed bytes
/// at `x`. An `asm!` block: given `_mm512_set1_epi32` of a load, LLVM
/// broadcasts once into a register for all the dots that share it.
#[inline(always)]
pub unsafe fn dot_u(acc: I, w: I, x: X) -> I {
    let mut acc = acc;
    core::arch::asm!(
        "vpdpbusd {acc}, {w}, dword ptr [{x}]{{1to16}}",
        acc = inout(zmm_reg) acc,
        w = in(zmm_reg) w,
        x = in(reg) x,
        options(pure, readonly, nostack, preserves_flags)
    );
    acc
}

/// Block accumulator += 4-byte products of unsigned `w` and signed `x` (i32).
#[inline(always)]
pub unsafe fn pair_acc(acc: I, w: I, x: X) -> I {
    dot_u(acc, w, x)
}

/// Signed x signed: |w| times x negated where w is negative.
#[inline(always)]
pub unsafe fn dot_s(acc: I, w: I, x: X) -> I {
    let x = xvec(x);
    let neg = _mm512_movepi8_mask(w);
    let xs = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
    _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(w), xs)
}

/// acc + per-lane sums of 4 products of unsigned `a` and the signed bytes
/// at `x` and of `b` and those at `y` (two vpdpbusd).
#[inline(always)]
pub unsafe fn dot2_u(acc: I, a: I, x: X, b: I, y: X) -> I {
    dot_u(dot_u(acc, a, x), b, y)
}

/// The i32 at `p` in every lane, broadcast by the load. An `asm!` block:
/// given `0 - set1(*p)` (a row's `-offset * sum(x)`), LLVM negates the
/// scalar and broadcasts it from an xmm register, a vector-pipe op of its
/// own on Zen 4; this way a broadcast load and one vpsubd do it (the Q4_0
/// 1x64 kernel timed alone, weights in L2: 49.0 to 48.0 cycles per block).
#[inline(always)]
pub unsafe fn splati(p: *const i32) -> I {
    let v: I;
    core::arch::asm!(
        "vpbroadcastd {v}, dword ptr [{p}]",
        v = out(zmm_reg) v,
        p = in(reg) p,
        options(pure, readonly, nostack, preserves_flags)
    );
    v
}

/// 16 f16 scales (one per column) to f32, converted as they load. An
/// `asm!` block: LLVM loads them into a ymm register first.
#[inline(always)]
pub unsafe fn scales(p: *const u16) -> F {
    let v: F;
    core::arch::asm!(
        "vcvtph2ps {v}, ymmword ptr [{p}]",
        v = out(zmm_reg) v,
        p = in(reg) p,
        options(pure, readonly, nostack, preserves_flags)
    );
    v
}
