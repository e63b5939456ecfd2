//! Shared helpers for the benches: paired timing and machine read bandwidth;
//! [`peer`] for the peer bench programs (`benches/peers.sh`); [`peak`], the
//! measured int8 dot-product peak a GEMM is set against.

pub mod peak;
pub mod peer;

use std::time::Instant;

/// Median seconds of `f` over `reps` runs after `warm` warm-up runs.
pub fn median_secs(reps: usize, warm: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..warm {
        f();
    }
    peer::sorted_samples(reps, f)[reps / 2]
}

/// Medians of two workloads timed alternately, so drift hits both alike.
/// Each timed call follows two untimed calls of the same workload, so each
/// is measured with its own data as warm as the caches allow (weights that
/// fit in L3 stay resident instead of being evicted by the other workload).
pub fn paired_medians(reps: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> (f64, f64) {
    let timed = |f: &mut dyn FnMut()| {
        f();
        f();
        let s = Instant::now();
        f();
        s.elapsed().as_secs_f64()
    };
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        ta.push(timed(&mut a));
        tb.push(timed(&mut b));
    }
    ta.sort_by(f64::total_cmp);
    tb.sort_by(f64::total_cmp);
    (ta[reps / 2], tb[reps / 2])
}

/// Single-thread read bandwidth over `bytes` (GB/s, median of several passes):
/// the roof a weight-streaming GEMV is measured against.
pub fn read_bandwidth_gbs(bytes: usize) -> f64 {
    let v: Vec<u64> = (0..bytes / 8).map(|i| i as u64).collect();
    let secs = median_secs(9, 2, || {
        let mut acc = [0u64; 8];
        for c in v.chunks_exact(8) {
            for i in 0..8 {
                acc[i] = acc[i].wrapping_add(c[i]);
            }
        }
        std::hint::black_box(acc);
    });
    bytes as f64 / secs / 1e9
}

/// Read bandwidth with `threads` threads each summing its own share of
/// `bytes` (GB/s, median of several passes).
pub fn read_bandwidth_threads_gbs(bytes: usize, threads: usize) -> f64 {
    let per = bytes / threads / 8;
    let bufs: Vec<Vec<u64>> = (0..threads)
        .map(|t| (0..per).map(|i| (i + t) as u64).collect())
        .collect();
    let secs = median_secs(7, 1, || {
        std::thread::scope(|s| {
            for b in &bufs {
                s.spawn(move || {
                    let mut acc = [0u64; 8];
                    for c in b.chunks_exact(8) {
                        for i in 0..8 {
                            acc[i] = acc[i].wrapping_add(c[i]);
                        }
                    }
                    std::hint::black_box(acc);
                });
            }
        });
    });
    (per * 8 * threads) as f64 / secs / 1e9
}
