//! What the peer bench programs share: their command line, the timing loop
//! and the output line. `benches/peers.sh` runs them, each in its own
//! process: `kgen_peer` (this crate) and `candle_peer`
//! (`benches/candle-peer`, which includes this file by path so that its
//! native build compiles candle alone, not kgen).
//!
//! Only `std` here. One line per case on stdout, `key=value` after a tag:
//!
//! ```text
//! KGEN format=q4_0 op=gemv shape=4096x4096 m=1 threads=1 gflops=.. gbs=.. median_us=.. min_us=.. reps=.. relerr=.. kernel=..
//! ```
//!
//! llama.cpp's bench (`benches/llamacpp/bench_mul_mat.cpp`) prints the same
//! keys under the tag `LLAMACPP`, with its timing loop: warm-up calls, one
//! call to size the run, then `reps` timed calls (about `--min-time`
//! seconds, at least 10), median.

use std::time::Instant;

/// Warm-up calls before a case is timed.
pub const WARMUP: usize = 3;
/// Fewest and most timed calls per case.
pub const MIN_REPS: usize = 10;
pub const MAX_REPS: usize = 2000;

/// Relative error above which a case is reported as wrong: int8 activations
/// give about 4e-3 against the dequantized weights, a wrong layout about 1.
pub const MAX_RELERR: f64 = 2e-2;

/// Whether a relative error says the result is wrong (NaN included).
pub fn is_wrong(relerr: f64) -> bool {
    relerr.is_nan() || relerr >= MAX_RELERR
}

/// The cases of one run.
#[derive(Clone, Debug)]
pub struct Args {
    pub formats: Vec<String>,
    /// (K, N): `y = x W` with `W` K x N (K is the reduction).
    pub shapes: Vec<(usize, usize)>,
    pub ms: Vec<usize>,
    pub threads: Vec<usize>,
    /// Seconds of timed calls per case.
    pub min_time: f64,
    /// Also the DRAM-resident GEMV (kgen only).
    pub dram: bool,
}

impl Args {
    /// Parses `--formats a,b --shapes KxN,.. --m 1,32 --threads 1,2
    /// --min-time S [--dram]`; prints the usage and exits on a bad argument.
    pub fn parse(prog: &str, args: impl IntoIterator<Item = String>) -> Args {
        let mut a = Args {
            formats: vec!["q4_0".into()],
            shapes: vec![(4096, 4096)],
            ms: vec![1, 32, 128],
            threads: vec![1],
            min_time: 0.5,
            dram: false,
        };
        let usage = |msg: &str| -> ! {
            eprintln!("{prog}: {msg}");
            eprintln!(
                "usage: {prog} [--formats q4_0,q8_0,...] [--shapes KxN,...] [--m 1,32,128] \
                 [--threads 1,2] [--min-time S] [--dram]"
            );
            std::process::exit(2)
        };
        let list = |v: &str| -> Vec<usize> {
            v.split(',')
                .map(|s| {
                    s.trim()
                        .parse()
                        .ok()
                        .filter(|&x| x > 0)
                        .unwrap_or_else(|| usage(&format!("not a positive number: {s}")))
                })
                .collect()
        };
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            if flag == "--dram" {
                a.dram = true;
                continue;
            }
            let Some(v) = it.next() else {
                usage(&format!("missing value for {flag}"))
            };
            match flag.as_str() {
                "--formats" => a.formats = v.split(',').map(|s| s.trim().to_string()).collect(),
                "--shapes" => {
                    a.shapes = v
                        .split(',')
                        .map(|s| {
                            parse_shape(s)
                                .unwrap_or_else(|| usage(&format!("bad shape {s} (want KxN)")))
                        })
                        .collect()
                }
                "--m" => a.ms = list(&v),
                "--threads" => a.threads = list(&v),
                "--min-time" => {
                    a.min_time = v
                        .parse()
                        .unwrap_or_else(|_| usage(&format!("bad --min-time {v}")))
                }
                _ => usage(&format!("unknown argument {flag}")),
            }
        }
        a
    }
}

/// `KxN` with both positive.
fn parse_shape(s: &str) -> Option<(usize, usize)> {
    let (k, n) = s.trim().split_once('x')?;
    let (k, n) = (k.parse().ok()?, n.parse().ok()?);
    (k > 0 && n > 0).then_some((k, n))
}

/// Median and fastest of the timed calls of one case.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub median: f64,
    pub min: f64,
    pub reps: usize,
}

/// Times `f` as llama.cpp's bench does: [`WARMUP`] calls, one call to size
/// the run, then enough calls for `min_time` seconds (within
/// [`MIN_REPS`]..=[`MAX_REPS`]); the median (of the middle two for an even
/// count).
pub fn time(min_time: f64, mut f: impl FnMut()) -> Timing {
    for _ in 0..WARMUP {
        f();
    }
    let s = Instant::now();
    f();
    let est = s.elapsed().as_secs_f64().max(1e-7);
    let reps = ((min_time / est).ceil() as usize).clamp(MIN_REPS, MAX_REPS);
    let t = sorted_samples(reps, f);
    Timing {
        median: median_of_sorted(&t),
        min: t[0],
        reps,
    }
}

/// The median of samples sorted ascending: the middle one, or the mean of
/// the middle two for an even count.
pub fn median_of_sorted(t: &[f64]) -> f64 {
    let h = t.len() / 2;
    if t.len() % 2 == 1 {
        t[h]
    } else {
        0.5 * (t[h - 1] + t[h])
    }
}

/// Seconds each of `reps` calls of `f` took, fastest first.
pub fn sorted_samples(reps: usize, mut f: impl FnMut()) -> Vec<f64> {
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t
}

/// Uniform values in [-1, 1) from a fixed seed (splitmix64), so every run
/// times the same data.
pub fn random_f32(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..len)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Relative error (root of summed squares) of rows 0 and m-1 of `y` (m x n)
/// against `x` (m x k) times `w` (K x N row-major, dequantized weights).
pub fn relerr(x: &[f32], w: &[f32], y: &[f32], m: usize, k: usize, n: usize) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    let rows: &[usize] = if m == 1 { &[0] } else { &[0, m - 1] };
    for &r in rows {
        let mut acc = vec![0f64; n];
        for i in 0..k {
            let xi = x[r * k + i] as f64;
            for (a, &wv) in acc.iter_mut().zip(&w[i * n..(i + 1) * n]) {
                *a += xi * wv as f64;
            }
        }
        for (j, a) in acc.iter().enumerate() {
            let d = y[r * n + j] as f64 - a;
            num += d * d;
            den += a * a;
        }
    }
    (num / den).sqrt()
}

/// One case's result line: `TAG format=.. op=gemv|gemm shape=KxN m=.. threads=..
/// gflops=.. [gbs=.. for m=1] median_us=.. min_us=.. reps=.. relerr=.. kernel=..`.
/// `weight_bytes` are the bytes one GEMV streams (GB/s is given for m = 1).
#[allow(clippy::too_many_arguments)]
pub fn line(
    tag: &str,
    format: &str,
    (k, n): (usize, usize),
    m: usize,
    threads: usize,
    t: &Timing,
    weight_bytes: usize,
    relerr: f64,
    kernel: &str,
) -> String {
    let flops = 2.0 * (m * k * n) as f64;
    let mut s = format!(
        "{tag} format={format} op={} shape={k}x{n} m={m} threads={threads} gflops={:.2}",
        if m == 1 { "gemv" } else { "gemm" },
        flops / t.median / 1e9
    );
    if m == 1 {
        s.push_str(&format!(" gbs={:.2}", weight_bytes as f64 / t.median / 1e9));
    }
    s.push_str(&format!(
        " median_us={:.1} min_us={:.1} reps={} relerr={relerr:.2e} kernel={kernel}",
        t.median * 1e6,
        t.min * 1e6,
        t.reps
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Args {
        Args::parse("test", s.split_whitespace().map(String::from))
    }

    #[test]
    fn parses_the_case_lists() {
        let a = args("--formats q4_0,iq4_nl --shapes 4096x4096,11008x4096 --m 1,32 --threads 1,2 --min-time 0.1 --dram");
        assert_eq!(a.formats, ["q4_0", "iq4_nl"]);
        assert_eq!(a.shapes, [(4096, 4096), (11008, 4096)]);
        assert_eq!((a.ms, a.threads), (vec![1, 32], vec![1, 2]));
        assert_eq!((a.min_time, a.dram), (0.1, true));
        assert_eq!(parse_shape("0x8"), None);
        assert_eq!(parse_shape("8x"), None);
    }

    #[test]
    fn relerr_is_zero_for_the_exact_product_and_flags_a_wrong_one() {
        let (m, k, n) = (2, 3, 2);
        let x = [1.0, 2.0, 3.0, -1.0, 0.5, 2.0];
        let w = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]; // K x N
        let y = [4.0, 5.0, 1.0, 2.5];
        assert_eq!(relerr(&x, &w, &y, m, k, n), 0.0);
        assert!(!is_wrong(0.0));
        assert!(is_wrong(relerr(&x, &w, &[5.0, 4.0, 2.5, 1.0], m, k, n)));
        assert!(is_wrong(f64::NAN));
    }

    #[test]
    fn line_gives_gb_per_s_for_a_gemv_only() {
        let t = Timing {
            median: 1e-3,
            min: 1e-3,
            reps: 10,
        };
        let v = line("KGEN", "q4_0", (1000, 1000), 1, 1, &t, 1_000_000, 0.0, "k");
        assert!(v.starts_with(
            "KGEN format=q4_0 op=gemv shape=1000x1000 m=1 threads=1 gflops=2.00 gbs=1.00 "
        ));
        let g = line("KGEN", "q4_0", (1000, 1000), 4, 2, &t, 1_000_000, 0.0, "k");
        assert!(g.contains("op=gemm") && !g.contains("gbs="));
    }
}
