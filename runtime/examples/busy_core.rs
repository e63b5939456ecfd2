//! Threads that survive a busy core: Q4_0 4096x4096 GEMV and GEMM (m = 32)
//! on 1 and 2 threads, quiet and with another process spinning on one core.
//!
//! ```sh
//! cargo run --release -p kgen-runtime --example busy_core [-- --secs S]
//! ```
//!
//! The spinner is this program again (`busy_core --spin SECONDS`), so the
//! busy core is taken by a separate process, as when something else runs on
//! the machine. Each line gives the median GFLOPS of 1- and 2-thread calls,
//! timed in alternation for `--secs` seconds (default 2) per operation, and
//! the 2T/1T ratio of medians and of means (the mean counts the calls a
//! stalled thread held up). With static per-thread shares a 2-thread call runs
//! at the pace of the thread that shares its core; with claimed chunks the
//! other thread takes over most of the work, and a chunk held by a thread
//! that lost its core is run again by the caller instead of waited for.
//! Calls that gained nothing from the worker (it shared the caller's core)
//! make the next few milliseconds of calls run on the caller alone: the
//! last columns count the 2-thread pool's calls, those that gained nothing,
//! those that ran reduced, and claims run again ([`Pool::stats`]).

use kgen::format::rng::Rng;
use kgen::format::symmetric::quantize_symmetric;
use kgen_runtime::{Matrix, Pool};
use std::hint::black_box;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const K: usize = 4096;
const N: usize = 4096;

/// Spins one thread for `seconds`.
fn spin(seconds: f64) {
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut x = 0u64;
    while Instant::now() < end {
        for _ in 0..10_000 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

/// Starts the spinner process; it ends by itself after `seconds`.
fn spinner(seconds: f64) -> Child {
    let exe = std::env::current_exe().expect("own path");
    let child = Command::new(exe)
        .args(["--spin", &seconds.to_string()])
        .spawn()
        .expect("spawn the spinner");
    // Let it get going before timing.
    std::thread::sleep(Duration::from_millis(300));
    child
}

/// Median and mean of call times: the median says how a typical call runs,
/// the mean what a stream of calls gets, stalls included.
#[derive(Clone, Copy)]
struct Times {
    median: f64,
    mean: f64,
}

fn times(v: &mut [f64]) -> Times {
    v.sort_by(f64::total_cmp);
    Times {
        median: v[v.len() / 2],
        mean: v.iter().sum::<f64>() / v.len() as f64,
    }
}

/// Call times of `m`-row products on `p1` and `p2`, alternating calls for
/// `secs` seconds.
fn time_pair(w: &Matrix, m: usize, p1: &Pool, p2: &Pool, secs: f64) -> (Times, Times) {
    let x = Rng::new(2).vec_f32(m * K);
    let mut y = vec![0f32; m * N];
    for pool in [p1, p2] {
        for _ in 0..3 {
            w.gemm_on(pool, &x, m, &mut y).unwrap();
        }
    }
    let (mut t1, mut t2) = (Vec::new(), Vec::new());
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end || t1.len() < 5 {
        for (pool, t) in [(p1, &mut t1), (p2, &mut t2)] {
            let s = Instant::now();
            w.gemm_on(pool, black_box(&x), m, &mut y).unwrap();
            t.push(s.elapsed().as_secs_f64());
        }
    }
    black_box(&y);
    (times(&mut t1), times(&mut t2))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(|v| {
                v.parse::<f64>()
                    .unwrap_or_else(|e| panic!("{name} {v}: {e}"))
            })
    };
    if let Some(seconds) = value("--spin") {
        spin(seconds);
        return;
    }
    let secs = value("--secs").unwrap_or(2.0);

    let w = quantize_symmetric(&Rng::new(1).vec_f32(K * N), K, N, 4, 32);
    let w = Matrix::from_ggml(&w).unwrap();
    let (p1, p2) = (Pool::new(1), Pool::new(2));
    println!(
        "{K}x{N} {}, {} logical CPUs, {:.1} s per operation and case (indicative)",
        w.describe(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        secs
    );
    println!(
        "{:<6} {:<10} {:>10} {:>10} {:>8} {:>11}  2T pool: calls no-gain reduced rerun woke",
        "case", "op", "1T GFLOPS", "2T GFLOPS", "2T/1T", "2T/1T mean"
    );
    for busy in [false, true] {
        // Long enough for both operations; killed when done.
        let mut child = busy.then(|| spinner(4.0 * secs + 10.0));
        for m in [1usize, 32] {
            let before = p2.stats();
            let (s1, s2) = time_pair(&w, m, &p1, &p2, secs);
            let after = p2.stats();
            let gflops = |s: f64| 2.0 * (m * K * N) as f64 / s / 1e9;
            println!(
                "{:<6} {:<10} {:>10.1} {:>10.1} {:>7.2}x {:>10.2}x  {:>14} {:>7} {:>7} {:>5} {:>4}",
                if busy { "busy" } else { "quiet" },
                if m == 1 {
                    "gemv".to_string()
                } else {
                    format!("gemm m={m}")
                },
                gflops(s1.median),
                gflops(s2.median),
                s1.median / s2.median,
                s1.mean / s2.mean,
                after.calls - before.calls,
                after.no_gain - before.no_gain,
                after.reduced - before.reduced,
                after.rerun - before.rerun,
                after.woke - before.woke
            );
        }
        if let Some(c) = child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
