//! What both families' back-ends do around a kernel call: check the shapes,
//! cut the column panels into claims the pool's threads take dynamically, and
//! write through a padded output when `n` is not a whole number of tiles.

use crate::error::Error;
use crate::kernel::KernelEntry;
use crate::pool::Pool;
use std::sync::Arc;

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

/// How a call's panels are cut into claims (see [`panels_per_claim`]).
#[derive(Clone, Copy)]
struct Claims {
    panels: usize,
    per_claim: usize,
    count: usize,
}

impl Claims {
    fn new(pool: &Pool, kernel: &KernelEntry, k_pad: usize, panels: usize, m: usize) -> Claims {
        let threads = pool.threads();
        let per_claim = if threads > 1 {
            let macs_per_panel = m.saturating_mul(k_pad).saturating_mul(kernel.t_b);
            panels_per_claim(panels, macs_per_panel, threads)
        } else {
            panels.max(1)
        };
        Claims {
            panels,
            per_claim,
            count: panels.div_ceil(per_claim).max(1),
        }
    }

    /// The panels `p0..p1` of claim `i` (empty past the last panel).
    fn range(self, i: usize) -> (usize, usize) {
        (
            i * self.per_claim,
            ((i + 1) * self.per_claim).min(self.panels),
        )
    }
}

/// Where the kernels write an `m x n_pad` result: the caller's `y` itself
/// when `n` is a whole number of tiles, else a padded copy.
struct Padded {
    pad: Vec<f32>,
    out: *mut f32,
    m: usize,
    n: usize,
    n_pad: usize,
}

impl Padded {
    fn new(y: &mut [f32], m: usize, n: usize, n_pad: usize) -> Padded {
        let mut pad = if n == n_pad {
            Vec::new()
        } else {
            vec![0f32; m * n_pad]
        };
        let out = if n == n_pad {
            y.as_mut_ptr()
        } else {
            pad.as_mut_ptr()
        };
        Padded {
            pad,
            out,
            m,
            n,
            n_pad,
        }
    }

    /// Copies a padded result into `y` (the same `y` as in [`Padded::new`]).
    fn finish(self, y: &mut [f32]) {
        let (m, n, n_pad) = (self.m, self.n, self.n_pad);
        if n != n_pad {
            for r in 0..m {
                y[r * n..(r + 1) * n].copy_from_slice(&self.pad[r * n_pad..r * n_pad + n]);
            }
        }
    }
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
    let ypad = Padded::new(y, m, n, n_pad);
    let yptr = SendPtr(ypad.out);
    let claims = Claims::new(pool, kernel, k_pad, panels, m);
    let claim = |i: usize| {
        let (p0, p1) = claims.range(i);
        if p0 < p1 {
            let y = yptr;
            run(y.0, p0, p1);
        }
    };
    if claims.count == 1 {
        claim(0);
    } else {
        pool.run_chunks(claims.count, &claim);
    }
    ypad.finish(y);
}

/// A kernel run over panels `p0..p1` into an `m x n_pad` output, owning
/// (or sharing through `Arc`s) everything it reads, so that a pool worker
/// may still be running it after the call that started it has returned.
pub(crate) type OwnedPanelRun = dyn Fn(*mut f32, usize, usize) + Send + Sync;

/// [`over_panels`] for a kernel run that owns its inputs, on
/// [`Pool::run_detached`]: the caller waits for a worker that lost its core
/// only a bounded time. The caller's claims write the output directly; the
/// workers' claims write into a scratch output (lent by the pool and back
/// there when its last holder, a late worker included, drops it) whose
/// columns the caller then copies: an `m x claim` copy per worker claim,
/// small next to the claim's `m x K x claim` multiply-accumulates. Results are bit-identical to [`over_panels`]: each
/// column is still computed by one whole claim.
#[allow(clippy::too_many_arguments)]
pub(crate) fn over_panels_owned(
    pool: &Pool,
    kernel: &KernelEntry,
    k_pad: usize,
    panels: usize,
    m: usize,
    n: usize,
    n_pad: usize,
    y: &mut [f32],
    run: Arc<OwnedPanelRun>,
) {
    let claims = Claims::new(pool, kernel, k_pad, panels, m);
    if claims.count == 1 {
        return over_panels(pool, kernel, k_pad, panels, m, n, n_pad, y, |y, p0, p1| {
            run(y, p0, p1)
        });
    }
    let ypad = Padded::new(y, m, n, n_pad);
    let out = ypad.out;
    let t_b = kernel.t_b;
    let range = move |i: usize| claims.range(i);

    let mut scratch = pool.take_scratch(m * n_pad);
    // Taken before the lease moves into the job (its heap buffer does not
    // move); the buffer is touched only through `sp` until the lease drops.
    let sp = SendPtr(scratch.as_mut_ptr());
    let work = {
        let (run, keep) = (Arc::clone(&run), scratch);
        move |i: usize| {
            let _alive = &keep;
            let (p0, p1) = range(i);
            if p0 < p1 {
                let sp = sp;
                run(sp.0, p0, p1);
            }
        }
    };
    let mine = |i: usize| {
        let (p0, p1) = range(i);
        if p0 < p1 {
            run(out, p0, p1);
        }
    };
    let adopt = |i: usize| {
        let (p0, p1) = range(i);
        let (c0, c1) = (p0 * t_b, (p1 * t_b).min(n_pad));
        for r in 0..m {
            let at = r * n_pad + c0;
            // SAFETY: the worker that ran claim `i` wrote these columns of
            // the scratch output and published them (see `run_detached`);
            // no other claim writes them, and `out` is this call's output.
            unsafe { std::ptr::copy_nonoverlapping(sp.0.add(at), out.add(at), c1 - c0) };
        }
    };
    pool.run_detached(claims.count, Box::new(work), &mine, &adopt);
    ypad.finish(y);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// `over_panels_owned` with a run that writes a value of the round, row
    /// and column into its columns: every column of a ragged `n` lands in
    /// `y`, with this round's value, whether the caller ran its claim, adopted a
    /// worker's, or ran a stalled worker's claim again (the stalled worker
    /// writes an old round's values late, into its own job's scratch).
    #[test]
    fn owned_panels_adopt_and_rerun_every_column() {
        let w = crate::Matrix::from_f32(&vec![0.5f32; 64 * 16], 64, 16, "q4_0").unwrap();
        let kernel = *w.gemv_kernel();
        let t_b = kernel.t_b;
        // 21 panels: on 2 threads, claims of 2 panels and a short last one.
        let (m, k_pad, panels) = (2, 1 << 16, 21);
        let (n_pad, n) = (panels * t_b, panels * t_b - 5);
        let value =
            |round: usize, r: usize, c: usize| (round * 10_000_000 + r * 100_000 + c) as f32;
        for stall in [false, true] {
            if stall {
                crate::pool::CLAIM_DELAY.with(|d| d.set(Duration::from_millis(60)));
            }
            let pool = Pool::new(if stall { 2 } else { 3 });
            crate::pool::CLAIM_DELAY.with(|d| d.set(Duration::ZERO));
            for round in 0..5 {
                let run: Arc<OwnedPanelRun> = Arc::new(move |y: *mut f32, p0: usize, p1: usize| {
                    std::thread::sleep(Duration::from_millis(2));
                    for r in 0..m {
                        for c in p0 * t_b..(p1 * t_b).min(n_pad) {
                            // SAFETY: `y` is an m x n_pad output (test).
                            unsafe { *y.add(r * n_pad + c) = value(round, r, c) };
                        }
                    }
                });
                let want: Vec<f32> = (0..m * n).map(|j| value(round, j / n, j % n)).collect();
                let mut y = vec![f32::NAN; m * n];
                let start = Instant::now();
                over_panels_owned(&pool, &kernel, k_pad, panels, m, n, n_pad, &mut y, run);
                assert_eq!(y, want, "stall {stall} round {round}");
                if stall {
                    assert!(
                        start.elapsed() < Duration::from_millis(300),
                        "waited for a stalled worker"
                    );
                }
            }
        }
    }

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
