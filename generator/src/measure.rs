//! The machine's read bandwidth, what a weight-streaming GEMV is measured
//! against, and the clock one busy core runs at. The benches set their
//! GEMVs against the bandwidth (`kgen-benches`), and `kgen tune` stores
//! both in a tuning profile (bandwidth per core from DRAM and from L3, and
//! all cores from DRAM), which `native` plans then use instead of the
//! guesses in [`crate::target`]'s run-time description.
//!
//! Timing lives here and in `kgen tune` only: nothing a build script calls
//! measures anything.

use std::time::Instant;

/// Single-thread read bandwidth over `bytes` (GB/s, median of several passes):
/// the roof a weight-streaming GEMV is measured against.
pub fn read_bandwidth_gbs(bytes: usize) -> f64 {
    read_bandwidth_threads_gbs(bytes, 1)
}

/// Read bandwidth with `threads` threads each summing its own share of
/// `bytes` (GB/s, median of several passes), with 256-bit loads where the
/// CPU has AVX2 (see [`sum_words`]).
pub fn read_bandwidth_threads_gbs(bytes: usize, threads: usize) -> f64 {
    let bufs = ReadBuffers::new(bytes, threads);
    bufs.pass();
    let mut secs: Vec<f64> = (0..7).map(|_| bufs.pass().as_secs_f64()).collect();
    secs.sort_by(f64::total_cmp);
    bufs.bytes() as f64 / secs[secs.len() / 2] / 1e9
}

/// One buffer per thread, together about `bytes`, for timing read passes
/// one at a time: a bench that alternates passes with its own work sets
/// both against the same moment's bandwidth (a VM's moves between runs).
pub struct ReadBuffers {
    bufs: Vec<Vec<u64>>,
}

impl ReadBuffers {
    /// `threads` buffers of `bytes / threads` each (rounded down to 256
    /// bytes), every page written so that no pass faults one in.
    pub fn new(bytes: usize, threads: usize) -> ReadBuffers {
        let threads = threads.max(1);
        let per = bytes / threads / 8 / 32 * 32;
        ReadBuffers {
            bufs: (0..threads)
                .map(|t| (0..per).map(|i| (i + t) as u64).collect())
                .collect(),
        }
    }

    /// The bytes one pass reads.
    pub fn bytes(&self) -> usize {
        self.bufs.iter().map(|b| b.len() * 8).sum()
    }

    /// Reads every buffer once, each on its own thread (one buffer on the
    /// calling thread: spawning one costs tens of microseconds, a tenth of
    /// a pass over an L3-sized buffer); the wall time.
    pub fn pass(&self) -> std::time::Duration {
        let s = Instant::now();
        if let [one] = &self.bufs[..] {
            std::hint::black_box(sum_words(one));
            return s.elapsed();
        }
        std::thread::scope(|sc| {
            for b in &self.bufs {
                sc.spawn(move || std::hint::black_box(sum_words(b)));
            }
        });
        s.elapsed()
    }
}

/// The wrapping sum of `v` in 8 lanes, read with 256-bit loads where the CPU
/// has AVX2. A scalar loop compiled for baseline x86-64 issues 16-byte loads
/// and adds that a core retires slower than DRAM and L3 deliver, so the
/// "bandwidth" it measured was the loop's, below what a GEMV streams (its
/// fraction of it came out above 1); the kernels read with full-width loads,
/// and so must their roof.
/// (256-bit loads are far above any DRAM or L3 rate a core sees, so the
/// AVX-512 kernels' wider loads would not raise it.)
pub fn sum_words(v: &[u64]) -> [u64; 8] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present (checked above).
        return unsafe { sum_words_avx2(v) };
    }
    sum_words_scalar(v)
}

/// [`sum_words`] without vector loads: word `i` into lane `i % 8`.
fn sum_words_scalar(v: &[u64]) -> [u64; 8] {
    let mut acc = [0u64; 8];
    for (i, w) in v.iter().enumerate() {
        acc[i % 8] = acc[i % 8].wrapping_add(*w);
    }
    acc
}

/// [`sum_words`] with four independent 256-bit accumulators (one 128-byte
/// step per iteration, two cache lines), so no add chain limits the loads.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_words_avx2(v: &[u64]) -> [u64; 8] {
    use std::arch::x86_64::*;
    let mut a = [_mm256_setzero_si256(); 4];
    let steps = v.chunks_exact(16);
    let tail = steps.remainder();
    for c in steps {
        let p = c.as_ptr() as *const __m256i;
        for (j, acc) in a.iter_mut().enumerate() {
            // SAFETY: `c` holds 16 words, four 256-bit loads' worth.
            *acc = _mm256_add_epi64(*acc, unsafe { _mm256_loadu_si256(p.add(j)) });
        }
    }
    let mut out = [0u64; 8];
    let mut lanes = [[0u64; 4]; 4];
    for (l, acc) in lanes.iter_mut().zip(a) {
        // SAFETY: `l` is 32 writable bytes; an unaligned store needs no more.
        unsafe { _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, acc) };
    }
    // The lanes hold words 0..16 of every step, and the tail starts at a
    // multiple of 16, so word `i` of the chain goes to lane `i % 8`.
    for (i, w) in lanes.iter().flatten().chain(tail).enumerate() {
        out[i % 8] = out[i % 8].wrapping_add(*w);
    }
    out
}

/// Dependent adds per pass of [`clock_ghz`]'s loop.
const CHAIN: u64 = 16;

/// The clock one busy core runs at, in GHz: a chain of dependent integer
/// adds (one per cycle on every core kgen targets) timed over about 50 ms,
/// the fastest of five runs. `/proc/cpuinfo` gives a VM's nominal clock
/// (2.45 GHz on the Zen 3 VM, whose cores run at about 2.95), and the
/// model's compute side scales with it. `None` on other architectures.
pub fn clock_ghz() -> Option<f64> {
    let passes = 3_000_000u64;
    let once = || -> Option<f64> {
        let s = Instant::now();
        add_chain(passes)?;
        Some((passes * CHAIN) as f64 / s.elapsed().as_secs_f64() / 1e9)
    };
    once()?;
    (0..5).filter_map(|_| once()).reduce(f64::max)
}

/// One add of the chain, and the loop's decrement and backward branch.
#[cfg(target_arch = "x86_64")]
macro_rules! chain_asm {
    (add) => {
        "add {x}, 1\n"
    };
    (next) => {
        "dec {n}\njnz 2b"
    };
}
#[cfg(target_arch = "aarch64")]
macro_rules! chain_asm {
    (add) => {
        "add {x}, {x}, #1\n"
    };
    (next) => {
        "subs {n}, {n}, #1\nb.ne 2b"
    };
}

/// `passes` x [`CHAIN`] dependent adds (the loop's own decrement and branch
/// run beside them).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn add_chain(passes: u64) -> Option<u64> {
    macro_rules! four {
        () => {
            concat!(
                chain_asm!(add),
                chain_asm!(add),
                chain_asm!(add),
                chain_asm!(add)
            )
        };
    }
    let mut x = 0u64;
    // SAFETY: register arithmetic and a backward branch; no memory.
    unsafe {
        std::arch::asm!(
            concat!("2:\n", four!(), four!(), four!(), four!(), chain_asm!(next)),
            x = inout(reg) x,
            n = inout(reg) passes => _,
            options(nomem, nostack),
        );
    }
    Some(x)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn add_chain(_passes: u64) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::{sum_words, sum_words_scalar};

    #[test]
    fn the_wide_read_sums_what_the_scalar_one_does() {
        for len in [0, 7, 16, 33, 1000] {
            let v: Vec<u64> = (0..len as u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect();
            let total = |a: [u64; 8]| a.iter().fold(0u64, |s, w| s.wrapping_add(*w));
            let want = v.iter().fold(0u64, |s, w| s.wrapping_add(*w));
            assert_eq!(total(sum_words_scalar(&v)), want, "scalar, len {len}");
            assert_eq!(total(sum_words(&v)), want, "len {len}");
        }
    }

    /// The add chain's count is exact, and the clock it gives is a plausible
    /// one (the bound is loose: a loaded CI machine runs slower).
    #[test]
    fn the_add_chain_counts_and_clocks() {
        if let Some(x) = super::add_chain(1000) {
            assert_eq!(x, 1000 * super::CHAIN);
            let ghz = super::clock_ghz().unwrap();
            assert!((0.2..10.0).contains(&ghz), "{ghz} GHz");
        }
    }
}
