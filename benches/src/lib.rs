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

/// The machine's read bandwidth, measured as `kgen tune` measures it for
/// its profiles (moved to the generator crate so both use one reader).
pub use kgen::measure::{read_bandwidth_gbs, read_bandwidth_threads_gbs, sum_words, ReadBuffers};
