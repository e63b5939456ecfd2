//! kgen's side of the peer bench (`benches/peers.sh`): for each case
//! (format, shape, m, threads) quantizes random weights with kgen's reference
//! codec, packs them into a [`Matrix`] (the kernels of this default build,
//! chosen at run time: no `target-cpu=native`), times `gemm_on` on a [`Pool`]
//! of that many threads and prints one line (see `kgen_benches::peer`).
//!
//! ```sh
//! cargo run --release -p kgen-benches --bin kgen_peer -- \
//!     --formats q4_0,q8_0 --shapes 4096x4096 --m 1,32 --threads 1,2 [--dram]
//! ```
//!
//! A first `PEAK` line gives one core's int8 dot-product peak, measured
//! ([`kgen_benches::peak`]).
//!
//! `--dram` adds, per format and thread count, a GEMV over enough 4096x11008
//! matrices to hold four times the L3 cache (read from sysfs), called in
//! turn so that every call streams weights that are not in cache, against
//! this machine's read bandwidth with as many threads: rounds of one read
//! pass over as many bytes and one sweep over the matrices, so `fraction`
//! is the median of ratios taken at the same moment.

use kgen::format::ggml::GgmlMatrix;
use kgen_benches::peer::{self, Args};
use kgen_runtime::{Matrix, Pool, WeightFormat};
use std::hint::black_box;

/// The DRAM case's shape (an FFN down projection of a 7B model).
const DRAM_SHAPE: (usize, usize) = (4096, 11008);
/// The DRAM case's weights are at least this many times the L3 cache.
const DRAM_L3_TIMES: usize = 4;
/// The DRAM case times at least this many rounds (a read pass and a sweep).
const DRAM_MIN_ROUNDS: usize = 15;
/// Longer than a pool worker spins after a call before it parks.
const PARK_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

fn fail(msg: String) -> ! {
    eprintln!("kgen_peer: {msg}");
    std::process::exit(1)
}

/// The format's GGUF codec and kgen's matrix for K x N random weights, and
/// the weights dequantized (the reference the results are checked against).
fn build(format: &str, k: usize, n: usize, seed: u64) -> (Matrix, Vec<f32>) {
    let wf = WeightFormat::try_from(format).unwrap_or_else(|e| fail(format!("{format}: {e}")));
    let Some(t) = wf.ggml_type() else {
        fail(format!("{format} is not a GGUF format of the table"))
    };
    let q = GgmlMatrix::quantize(&peer::random_f32(k * n, seed), k, n, t);
    let m = Matrix::from_ggml(&q).unwrap_or_else(|e| fail(format!("{format} {k}x{n}: {e}")));
    (m, q.dequantize())
}

fn main() {
    let a = Args::parse("kgen_peer", std::env::args().skip(1));
    // One core's int8 dot peak, measured before the cases, for the table's
    // GEMM share of it (`n/a` where the probe knows no single dot).
    match kgen_benches::peak::int8_dot_peak() {
        Some(p) => println!("PEAK isa={} gops={:.1}", p.isa, p.gops),
        None => println!("PEAK status=n/a"),
    }
    let mut failed = 0;
    for format in &a.formats {
        for &(k, n) in &a.shapes {
            let (w, wd) = build(format, k, n, (k * 31 + n) as u64);
            eprintln!(
                "# kgen {format} {k}x{n}: {} (repack {:.1} ms, {} weight bytes)",
                w.describe(),
                w.repack_seconds() * 1e3,
                w.weight_bytes()
            );
            for &threads in &a.threads {
                let pool = Pool::new(threads);
                for &m in &a.ms {
                    let x = peer::random_f32(m * k, 99 + m as u64);
                    let mut y = vec![0f32; m * n];
                    let run = |y: &mut [f32]| w.gemm_on(&pool, black_box(&x), m, y).unwrap();
                    run(&mut y);
                    let err = peer::relerr(&x, &wd, &y, m, k, n);
                    if peer::is_wrong(err) {
                        eprintln!("CHECK FAILED kgen {format} {k}x{n} m={m} relerr={err:.3e}");
                        failed += 1;
                    }
                    let before = pool.stats();
                    let t = peer::time(a.min_time, || run(&mut y));
                    let after = pool.stats();
                    let kernel = if m == 1 {
                        w.gemv_kernel().name
                    } else {
                        w.gemm_kernel().name
                    };
                    // What the pool met while `peer::time` ran (its warm-up
                    // and sizing calls included): split calls, no gain (of
                    // those, after waking a parked worker), run reduced,
                    // indices rerun by the caller.
                    println!(
                        "{} pool_calls={} pool_no_gain={} pool_woke={} pool_reduced={} pool_rerun={}",
                        peer::line(
                            "KGEN",
                            format,
                            (k, n),
                            m,
                            threads,
                            &t,
                            w.weight_bytes(),
                            err,
                            kernel
                        ),
                        after.calls - before.calls,
                        after.no_gain - before.no_gain,
                        after.woke - before.woke,
                        after.reduced - before.reduced,
                        after.rerun - before.rerun,
                    );
                }
            }
        }
    }
    if a.dram {
        for format in &a.formats {
            dram(format, &a);
        }
    }
    if failed > 0 {
        fail(format!("{failed} correctness check(s) failed"));
    }
}

/// L3 size in bytes from sysfs (the largest level-3 cache of cpu0), or
/// 32 MiB if sysfs does not say.
fn l3_bytes() -> (usize, &'static str) {
    let base = "/sys/devices/system/cpu/cpu0/cache";
    let read = |p: String| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let mut best = None;
    for i in 0..8 {
        if read(format!("{base}/index{i}/level")).as_deref() != Some("3") {
            continue;
        }
        let Some(size) = read(format!("{base}/index{i}/size")) else {
            continue;
        };
        let (num, mult) = match size.strip_suffix('K') {
            Some(v) => (v, 1 << 10),
            None => match size.strip_suffix('M') {
                Some(v) => (v, 1 << 20),
                None => (size.as_str(), 1),
            },
        };
        if let Ok(v) = num.parse::<usize>() {
            best = best.max(Some(v * mult));
        }
    }
    match best {
        Some(b) => (b, "sysfs"),
        None => (32 << 20, "assumed"),
    }
}

/// GEMV over enough matrices to exceed L3 [`DRAM_L3_TIMES`] times, one call
/// per matrix in turn, against the read bandwidth with as many threads.
fn dram(format: &str, a: &Args) {
    let (k, n) = DRAM_SHAPE;
    let (l3, l3_src) = l3_bytes();
    let (first, _) = build(format, k, n, 7);
    let per = first.weight_bytes();
    let count = (DRAM_L3_TIMES * l3).div_ceil(per).max(2);
    // Same values in every matrix: what keeps a call from hitting the cache
    // is where its weights are, not what they are.
    let wf = WeightFormat::try_from(format).unwrap();
    let q = GgmlMatrix::quantize(&peer::random_f32(k * n, 7), k, n, wf.ggml_type().unwrap());
    let mut mats = vec![first];
    mats.extend((1..count).map(|_| Matrix::from_ggml(&q).unwrap()));
    let bytes = per * count;
    let x = peer::random_f32(k, 5);
    let mut y = vec![0f32; n];
    for &threads in &a.threads {
        let pool = Pool::new(threads);
        let reads = kgen_benches::ReadBuffers::new(bytes, threads);
        // Rounds of one read pass and one sweep over every matrix, so each
        // GEMV figure has a bandwidth figure from the same moment; the two
        // sets evict each other from L3, so neither reads from cache.
        let sweep = |y: &mut Vec<f32>| {
            for m in &mats {
                m.gemm_on(&pool, black_box(&x), 1, y).unwrap();
            }
        };
        sweep(&mut y);
        reads.pass();
        let (mut gemv_s, mut read_s, mut fraction) = (Vec::new(), Vec::new(), Vec::new());
        let start = std::time::Instant::now();
        while gemv_s.len() < DRAM_MIN_ROUNDS || start.elapsed().as_secs_f64() < a.min_time.max(0.3)
        {
            // Let the pool's workers finish spinning and park first: a read
            // pass started while they spin shares its cores with them. The
            // caller spins meanwhile rather than sleeping, so its core does
            // not idle into a lower clock before the timed pass.
            let wait = std::time::Instant::now();
            while wait.elapsed() < PARK_WAIT {
                std::hint::spin_loop();
            }
            let r = reads.pass().as_secs_f64() / reads.bytes() as f64;
            let s = std::time::Instant::now();
            sweep(&mut y);
            let g = s.elapsed().as_secs_f64() / count as f64;
            // Per matrix, and seconds per byte for the read.
            fraction.push(r * per as f64 / g);
            gemv_s.push(g);
            read_s.push(r);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            peer::median_of_sorted(v)
        };
        let rounds = gemv_s.len();
        let (g, r, f) = (
            median(&mut gemv_s),
            median(&mut read_s),
            median(&mut fraction),
        );
        let gbs = per as f64 / g / 1e9;
        println!(
            "KGEN_DRAM format={format} op=gemv shape={k}x{n} m=1 threads={threads} mats={count} \
             weights_mb={:.0} l3_mb={:.0} l3_from={l3_src} gflops={:.2} gbs={gbs:.2} \
             read_gbs={:.2} fraction={f:.2} median_us={:.1} rounds={rounds} kernel={}",
            bytes as f64 / 1e6,
            l3 as f64 / (1 << 20) as f64,
            2.0 * (k * n) as f64 / g / 1e9,
            1.0 / r / 1e9,
            g * 1e6,
            mats[0].gemv_kernel().name
        );
    }
}
