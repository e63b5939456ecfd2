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

/// The best of five timed runs of the widest dot this CPU has, or `None`
/// where it has none the probe knows (AVX2-only x86: its byte dot is two
/// instructions, maddubs and madd, and a GEMM's count is not one number).
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

#[cfg(target_arch = "x86_64")]
fn pick() -> Option<Probe> {
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

    /// `n` iterations of 8 independent `vpdpbusd zmm` chains.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn zmm(n: u64) {
        // SAFETY: register-only instructions the caller checked the CPU has.
        unsafe {
            asm!(
                "vpxord zmm0, zmm0, zmm0", "vpxord zmm1, zmm1, zmm1",
                "vpxord zmm2, zmm2, zmm2", "vpxord zmm3, zmm3, zmm3",
                "vpxord zmm4, zmm4, zmm4", "vpxord zmm5, zmm5, zmm5",
                "vpxord zmm6, zmm6, zmm6", "vpxord zmm7, zmm7, zmm7",
                "vpternlogd zmm8, zmm8, zmm8, 0xff", "vpternlogd zmm9, zmm9, zmm9, 0xff",
                "2:",
                "vpdpbusd zmm0, zmm8, zmm9", "vpdpbusd zmm1, zmm8, zmm9",
                "vpdpbusd zmm2, zmm8, zmm9", "vpdpbusd zmm3, zmm8, zmm9",
                "vpdpbusd zmm4, zmm8, zmm9", "vpdpbusd zmm5, zmm8, zmm9",
                "vpdpbusd zmm6, zmm8, zmm9", "vpdpbusd zmm7, zmm8, zmm9",
                "dec {n}", "jnz 2b",
                n = inout(reg) n => _,
                out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                out("zmm8") _, out("zmm9") _,
                options(nostack, nomem),
            );
        }
    }

    /// `n` iterations of 8 independent `vpdpbusd ymm` (VEX) chains.
    #[target_feature(enable = "avxvnni")]
    pub unsafe fn ymm(n: u64) {
        // SAFETY: register-only instructions the caller checked the CPU has.
        unsafe {
            asm!(
                "vpxor ymm0, ymm0, ymm0", "vpxor ymm1, ymm1, ymm1",
                "vpxor ymm2, ymm2, ymm2", "vpxor ymm3, ymm3, ymm3",
                "vpxor ymm4, ymm4, ymm4", "vpxor ymm5, ymm5, ymm5",
                "vpxor ymm6, ymm6, ymm6", "vpxor ymm7, ymm7, ymm7",
                "vpcmpeqd ymm8, ymm8, ymm8", "vpcmpeqd ymm9, ymm9, ymm9",
                "2:",
                "{{vex}} vpdpbusd ymm0, ymm8, ymm9", "{{vex}} vpdpbusd ymm1, ymm8, ymm9",
                "{{vex}} vpdpbusd ymm2, ymm8, ymm9", "{{vex}} vpdpbusd ymm3, ymm8, ymm9",
                "{{vex}} vpdpbusd ymm4, ymm8, ymm9", "{{vex}} vpdpbusd ymm5, ymm8, ymm9",
                "{{vex}} vpdpbusd ymm6, ymm8, ymm9", "{{vex}} vpdpbusd ymm7, ymm8, ymm9",
                "dec {n}", "jnz 2b",
                n = inout(reg) n => _,
                out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
                out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
                out("ymm8") _, out("ymm9") _,
                options(nostack, nomem),
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
