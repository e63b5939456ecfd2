//! 4- or 8-bit GPTQ on both kernel families: GEMV time (alternating,
//! medians) and the error of each against the f64 product of the
//! dequantized weights.
//!
//!     cargo run --release -p kgen-runtime --example gptq_int8 -- [K N GROUP THREADS BITS]
//!
//! Defaults: 4096 4096 128 1 4. GROUP is a size or `col`.

use kgen::format::gptq::random_gptq;
use kgen::format::rng::Rng;
use kgen_runtime::{Family, Group, Matrix, Pool, Registry};
use std::time::Instant;

fn main() -> Result<(), kgen_runtime::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (k, n) = (arg(0, 4096), arg(1, 4096));
    let group = match args.get(2).map(String::as_str) {
        Some("col") => Group::Column,
        _ => Group::Size(arg(2, 128)),
    };
    let pool = Pool::new(arg(3, 1));
    let bits = arg(4, 4) as u32;
    let w = random_gptq(k, n, bits, group, 1);
    let reg = Registry::builtin();
    let paths: Vec<(Family, Matrix)> = [Family::F32, Family::Int8]
        .into_iter()
        .map(|f| Ok((f, Matrix::from_gptq_with(&reg.with_family(Some(f)), &w)?)))
        .collect::<Result<_, kgen_runtime::Error>>()?;
    let x = Rng::new(2).vec_f32(k);
    let exact = w.reference_gemm(&x, 1);
    // Error: the largest |y - exact| over the columns, relative to the
    // largest |exact| (so a column near zero does not dominate).
    let scale = exact.iter().fold(0f64, |a, v| a.max(v.abs()));
    let mut y = vec![0f32; n];
    for (f, m) in &paths {
        m.gemm_on(&pool, &x, 1, &mut y)?;
        let err = y
            .iter()
            .zip(&exact)
            .fold(0f64, |a, (&g, &e)| a.max((g as f64 - e).abs()));
        println!(
            "{f:>4}: {} -- max |y - y64| / max |y64| = {:.2e}",
            m.gemv_kernel().name,
            err / scale
        );
    }
    let mut times = vec![Vec::new(); paths.len()];
    for _ in 0..3 {
        for (_, m) in &paths {
            m.gemm_on(&pool, &x, 1, &mut y)?;
        }
    }
    // Rounds of 20 calls per path, so each path's weights are as warm in
    // cache as in a run of its own, alternating paths between rounds.
    for _ in 0..10 {
        for (t, (_, m)) in times.iter_mut().zip(&paths) {
            for c in 0..22 {
                let t0 = Instant::now();
                m.gemm_on(&pool, &x, 1, &mut y)?;
                if c >= 2 {
                    t.push(t0.elapsed().as_secs_f64());
                }
            }
        }
    }
    let bytes = (k * n) as f64 * bits as f64 / 8.0; // levels, as the file stores them
    for (t, (f, m)) in times.iter_mut().zip(&paths) {
        t.sort_by(f64::total_cmp);
        let med = t[t.len() / 2];
        println!(
            "{f:>4}: GEMV {k}x{n} g{group:?} {} thread(s): median {:.1} us, {:.1} GB/s of {bits}-bit levels, {:.1} GFLOPS ({} packed bytes)",
            pool.threads(),
            med * 1e6,
            bytes / med / 1e9,
            2.0 * (k * n) as f64 / med / 1e9,
            m.weight_bytes()
        );
    }
    Ok(())
}
