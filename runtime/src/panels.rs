//! What both families' back-ends do around a kernel call: check the shapes, split
//! the column panels across the pool, and write through a padded output when
//! `n` is not a whole number of tiles.

use crate::error::Error;
use crate::pool::Pool;

/// The `m`-row shape check every product starts with.
pub(crate) fn check_shape(k: usize, n: usize, m: usize, x: usize, y: usize) -> Result<(), Error> {
    if m == 0 || x != m * k || y != m * n {
        return Err(Error::Shape(format!(
            "a {k}x{n} matrix times {m} row(s) needs x of {} and y of {} values, got {x} and {y}",
            m * k,
            m * n
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

/// Calls `run(y, p0, p1)` for contiguous panel ranges covering `0..panels`,
/// one range per pool thread, where `y` is an `m x n_pad` output; copies the
/// result into `y` (`m x n`).
///
/// `run` must write only the columns of panels `p0..p1`.
pub(crate) fn over_panels(
    pool: &Pool,
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
    let tasks = pool.threads().min(panels).max(1);
    let task = |i: usize| {
        let (p0, p1) = (i * panels / tasks, (i + 1) * panels / tasks);
        if p0 < p1 {
            let y = yptr;
            run(y.0, p0, p1);
        }
    };
    if tasks == 1 {
        task(0);
    } else {
        pool.run(tasks, &task);
    }
    if !direct {
        for r in 0..m {
            y[r * n..(r + 1) * n].copy_from_slice(&ypad[r * n_pad..r * n_pad + n]);
        }
    }
}
