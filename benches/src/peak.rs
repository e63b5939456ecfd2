//! The machine's int8 dot-product peak per core, measured: independent
//! chains of the widest byte-dot instruction the CPU has (vpdpbusd on
//! AVX-512 VNNI or AVX-VNNI, sdot on Arm with dotprod), timed for a fixed
//! count, so a GEMM's GFLOPS can be set against what one core can issue.
//! Eight chains hide the instruction's latency on every core we run on
//! (latency 4-5 cycles, one or two issued per cycle).

use std::time::Instant;

/// One core's measured int8 peak: the instruction and its multiply-adds
/// as operations per second (2 per multiply-add, as GFLOPS count them).
#[derive(Clone, Copy, Debug)]
pub struct DotPeak {
    pub isa: &'static str,
    pub gops: f64,
}

/// A probe: the instruction's name, its multiply-adds per instruction and
/// the loop that runs `n` iterations of 8 of them.
type Probe = (&'static str, f64, fn(u64));

/// Iterations of 8 dots per timed run.
const ITERS: u64 = 4_000_000;

/// The best of five timed runs of the widest dot this CPU has (or the
/// ISA `KGEN_FORCE_ISA` forces the kernels to), or `None` where it has none
/// the probe knows (AVX2-only x86: its byte dot is two instructions,
/// maddubs and madd, and a GEMM's count is not one number).
pub fn int8_dot_peak() -> Option<DotPeak> {
    let (isa, macs_per_op, run) = pick()?;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        run(ITERS);
        best = best.min(t.elapsed().as_secs_f64());
    }
    Some(DotPeak {
        isa,
        gops: 2.0 * macs_per_op * 8.0 * ITERS as f64 / best / 1e9,
    })
}

/// The ISA `KGEN_FORCE_ISA` names, if any: a bench that forces the
/// kernels to a narrower ISA sets them against that ISA's dot.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn forced() -> Option<String> {
    std::env::var(kgen_runtime::FORCE_ISA_ENV).ok()
}

#[cfg(target_arch = "x86_64")]
fn pick() -> Option<Probe> {
    match forced().as_deref() {
        // A forced ISA the CPU lacks runs no kernel (dispatch refuses it),
        // so no peak either.
        Some("avxvnni") if std::arch::is_x86_feature_detected!("avxvnni") => {
            return Some(("avxvnni", 32.0, |n| unsafe { x86::ymm(n) }));
        }
        Some("avxvnni" | "avx2" | "portable") => return None,
        _ => {}
    }
    if std::arch::is_x86_feature_detected!("avx512vnni") {
        // SAFETY (inside): the features were just detected.
        Some(("avx512vnni", 64.0, |n| unsafe { x86::zmm(n) }))
    } else if std::arch::is_x86_feature_detected!("avxvnni") {
        Some(("avxvnni", 32.0, |n| unsafe { x86::ymm(n) }))
    } else {
        None
    }
}

#[cfg(target_arch = "aarch64")]
fn pick() -> Option<Probe> {
    if forced().as_deref() == Some("portable") {
        return None;
    }
    if std::arch::is_aarch64_feature_detected!("dotprod") {
        Some(("dotprod", 16.0, |n| unsafe { arm::sdot(n) }))
    } else {
        None
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn pick() -> Option<Probe> {
    None
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::asm;

    /// `$n` iterations of 8 independent `$dot` chains on registers of
    /// `$class`: zeroed with `$zero`, both sources set to all ones by `$ones`
    /// (a template naming `{w}`). One loop for both vector widths.
    macro_rules! eight_chains {
        ($n:expr, $class:ident, $zero:literal, $ones:literal, $dot:literal) => {
            asm!(
                concat!($zero, " {a0}, {a0}, {a0}"), concat!($zero, " {a1}, {a1}, {a1}"),
                concat!($zero, " {a2}, {a2}, {a2}"), concat!($zero, " {a3}, {a3}, {a3}"),
                concat!($zero, " {a4}, {a4}, {a4}"), concat!($zero, " {a5}, {a5}, {a5}"),
                concat!($zero, " {a6}, {a6}, {a6}"), concat!($zero, " {a7}, {a7}, {a7}"),
                $ones,
                "2:",
                concat!($dot, " {a0}, {w}, {w}"), concat!($dot, " {a1}, {w}, {w}"),
                concat!($dot, " {a2}, {w}, {w}"), concat!($dot, " {a3}, {w}, {w}"),
                concat!($dot, " {a4}, {w}, {w}"), concat!($dot, " {a5}, {w}, {w}"),
                concat!($dot, " {a6}, {w}, {w}"), concat!($dot, " {a7}, {w}, {w}"),
                "dec {n}", "jnz 2b",
                n = inout(reg) $n => _,
                a0 = out($class) _, a1 = out($class) _, a2 = out($class) _,
                a3 = out($class) _, a4 = out($class) _, a5 = out($class) _,
                a6 = out($class) _, a7 = out($class) _, w = out($class) _,
                options(nostack, nomem),
            )
        };
    }

    /// `n` iterations of 8 independent `vpdpbusd zmm` chains.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn zmm(n: u64) {
        // SAFETY: register-only instructions the caller checked the CPU has.
        unsafe {
            eight_chains!(
                n,
                zmm_reg,
                "vpxord",
                "vpternlogd {w}, {w}, {w}, 0xff",
                "vpdpbusd"
            );
        }
    }

    /// `n` iterations of 8 independent `vpdpbusd ymm` (VEX) chains.
    #[target_feature(enable = "avxvnni")]
    pub unsafe fn ymm(n: u64) {
        // SAFETY: register-only instructions the caller checked the CPU has.
        unsafe {
            eight_chains!(
                n,
                ymm_reg,
                "vpxor",
                "vpcmpeqd {w}, {w}, {w}",
                "{{vex}} vpdpbusd"
            );
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::asm;

    /// `n` iterations of 8 independent `sdot` (128-bit) chains.
    #[target_feature(enable = "dotprod")]
    pub unsafe fn sdot(n: u64) {
        // SAFETY: register-only instructions the caller checked the CPU has.
        unsafe {
            asm!(
                "movi v0.4s, #0", "movi v1.4s, #0", "movi v2.4s, #0", "movi v3.4s, #0",
                "movi v4.4s, #0", "movi v5.4s, #0", "movi v6.4s, #0", "movi v7.4s, #0",
                "movi v8.16b, #1", "movi v9.16b, #1",
                "2:",
                "sdot v0.4s, v8.16b, v9.16b", "sdot v1.4s, v8.16b, v9.16b",
                "sdot v2.4s, v8.16b, v9.16b", "sdot v3.4s, v8.16b, v9.16b",
                "sdot v4.4s, v8.16b, v9.16b", "sdot v5.4s, v8.16b, v9.16b",
                "sdot v6.4s, v8.16b, v9.16b", "sdot v7.4s, v8.16b, v9.16b",
                "subs {n}, {n}, #1", "b.ne 2b",
                n = inout(reg) n => _,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _,
                out("v4") _, out("v5") _, out("v6") _, out("v7") _,
                out("v8") _, out("v9") _,
                options(nostack, nomem),
            );
        }
    }
}
