//! What both families' back-ends do around a kernel call: check the shapes,
//! cut the column panels into claims the pool's threads take dynamically, and
//! write through a padded output when `n` is not a whole number of tiles.

use crate::error::Error;
use crate::kernel::KernelEntry;
use crate::pool::Pool;

/// The `m`-row shape check every product starts with (`m = 0` with empty
/// buffers is an empty batch, which the callers return from at once).
pub(crate) fn check_shape(k: usize, n: usize, m: usize, x: usize, y: usize) -> Result<(), Error> {
    let (mk, mn) = (m.checked_mul(k), m.checked_mul(n));
    if mk != Some(x) || mn != Some(y) {
        let show = |v: Option<usize>| v.map_or("too many".to_string(), |v| v.to_string());
        return Err(Error::Shape(format!(
            "a {k}x{n} matrix times {m} row(s) needs x of {} and y of {} values, got {x} and {y}",
            show(mk),
            show(mn)
        )));
    }
    Ok(())
}

/// A raw output pointer shared by the pool's tasks: each writes only its own
/// panels' columns.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: tasks write disjoint column ranges (see `over_panels`).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

/// Claims each thread should get when there is enough work, so that a thread
/// slowed down by another process can hand most of its share to the others
/// (llama.cpp splits into a similar number of chunks per thread).
pub(crate) const CLAIMS_PER_THREAD: usize = 8;

/// Multiply-accumulates below which a claim is not worth a hand-off between
/// threads (a claim is an atomic on a shared line, and a call split further
/// than its work needs also wakes threads for nothing): tiny matrices stay on
/// one claim, so on one thread.
pub(crate) const MIN_CLAIM_MACS: usize = 1 << 18;

/// Panels per claim for a call over `panels` panels of `macs_per_panel`
/// multiply-accumulates each on `threads` threads: about
/// [`CLAIMS_PER_THREAD`] claims per thread, but no claim under
/// [`MIN_CLAIM_MACS`] (only the last, which takes what is left), and at
/// least one panel and at most all of them.
pub(crate) fn panels_per_claim(panels: usize, macs_per_panel: usize, threads: usize) -> usize {
    let by_threads = panels.div_ceil(threads.max(1) * CLAIMS_PER_THREAD);
    let by_size = MIN_CLAIM_MACS.div_ceil(macs_per_panel.max(1));
    by_threads.max(by_size).clamp(1, panels.max(1))
}

/// Runs `kernel` over the `panels` column panels of an `m`-row product with
/// `k_pad` (padded) rows of weights, and copies the result into `y`
/// (`m x n`). `run(y, p0, p1)` computes panels `p0..p1` into `y`, an
/// `m x n_pad` output, and must write only their columns.
///
/// The panels are cut into claims of whole panels (whole `t_b` column
/// blocks, so never a packed column group either) that the pool's threads
/// claim dynamically ([`Pool::run_chunks`]), sized by
/// [`panels_per_claim`]. Each output column is computed by exactly one
/// claim, and a kernel's per-column reduction order does not depend on which
/// panels a call covers, so results are bit-identical whatever the thread
/// count and claim order.
#[allow(clippy::too_many_arguments)]
pub(crate) fn over_panels(
    pool: &Pool,
    kernel: &KernelEntry,
    k_pad: usize,
    panels: usize,
    m: usize,
    n: usize,
    n_pad: usize,
    y: &mut [f32],
    run: impl Fn(*mut f32, usize, usize) + Sync,
) {
    let direct = n == n_pad;
    let mut ypad = if direct {
        Vec::new()
    } else {
        vec![0f32; m * n_pad]
    };
    let yptr = SendPtr(if direct {
        y.as_mut_ptr()
    } else {
        ypad.as_mut_ptr()
    });
    let threads = pool.threads();
    let per_claim = if threads > 1 {
        let macs_per_panel = m.saturating_mul(k_pad).saturating_mul(kernel.t_b);
        panels_per_claim(panels, macs_per_panel, threads)
    } else {
        panels.max(1)
    };
    let claims = panels.div_ceil(per_claim).max(1);
    let claim = |i: usize| {
        let (p0, p1) = (i * per_claim, ((i + 1) * per_claim).min(panels));
        if p0 < p1 {
            let y = yptr;
            run(y.0, p0, p1);
        }
    };
    if claims == 1 {
        claim(0);
    } else {
        pool.run_chunks(claims, &claim);
    }
    if !direct {
        for r in 0..m {
            y[r * n..(r + 1) * n].copy_from_slice(&ypad[r * n_pad..r * n_pad + n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_whole_panels_sized_by_threads_and_work() {
        // Q4_0 4096x4096 GEMV with 64-column panels: 2^18 MACs per panel,
        // so 8 claims per thread of 4 panels each on 2 threads.
        assert_eq!(panels_per_claim(64, 4096 * 64, 2), 4);
        assert_eq!(panels_per_claim(64, 4096 * 64, 4), 2);
        // Enough threads: one panel a claim, never less.
        assert_eq!(panels_per_claim(64, 4096 * 64, 64), 1);
        // Small panels are merged up to the minimum claim.
        assert_eq!(panels_per_claim(64, 1024 * 64, 8), 4);
        assert_eq!(panels_per_claim(10, 1 << 10, 4), 10);
        // A tiny matrix is one claim, so one thread.
        assert_eq!(panels_per_claim(3, 300 * 16, 5), 3);
        assert_eq!(panels_per_claim(1, 0, 3), 1);
        assert_eq!(panels_per_claim(0, 0, 3), 1);
        for panels in 1..80 {
            for macs in [1, 1000, 1 << 16, 1 << 18, 1 << 22] {
                for threads in 1..6 {
                    let per = panels_per_claim(panels, macs, threads);
                    assert!((1..=panels).contains(&per));
                    let claims = panels.div_ceil(per);
                    assert!(claims <= threads * CLAIMS_PER_THREAD);
                    if claims > 1 {
                        assert!(per * macs >= MIN_CLAIM_MACS);
                    }
                }
            }
        }
    }
}
