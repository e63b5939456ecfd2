// kgen template: the `kgen tune` timing harness.
//
// Copied into a scratch crate next to `kernels.rs` (the candidates, generated
// by kgen), built with `cargo build --release` and run by `kgen tune`. It
// checks every candidate against the scalar reference, then times them in
// interleaved rounds until the budget is spent, and prints one line per
// event for kgen to read:
//   check <i> ok <max_rel_err> | check <i> fail <message>
//   round <r> best <i> <seconds>
//   result <i> <median_seconds> <weight_bytes> <flops>

#[allow(dead_code, clippy::all)]
mod kernels {
    include!("kernels.rs");
}

use kgen::format::gptq::{random_gptq, GptqMatrix};
use kgen::format::rng::Rng;
use kgen_runtime::{Group, KernelEntry, Matrix, Pool};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn arg(name: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name).unwrap_or_else(|| panic!("missing {name}"));
    args[i + 1].clone()
}

/// A candidate's weight format (the candidates are f32-family kernels).
fn format_of(e: &KernelEntry) -> (u32, Group) {
    let g = e.f32().expect("an f32-family candidate").group;
    (e.bits, if g == 0 { Group::Column } else { Group::Size(g) })
}

/// Max error relative to the largest reference output.
fn rel_err(w: &GptqMatrix, x: &[f32], m: usize, y: &[f32]) -> f64 {
    let r = w.reference_gemm(x, m);
    let scale = r.iter().fold(1e-30f64, |a, v| a.max(v.abs()));
    r.iter().zip(y).map(|(a, b)| if b.is_finite() { (a - *b as f64).abs() / scale } else { f64::INFINITY }).fold(0.0, f64::max)
}

fn main() {
    let shapes: Vec<(usize, usize)> = arg("--shapes")
        .split(',')
        .map(|s| {
            let (k, n) = s.split_once('x').expect("KxN");
            (k.parse().unwrap(), n.parse().unwrap())
        })
        .collect();
    let threads: usize = arg("--threads").parse().unwrap();
    let m: usize = arg("--m").parse().unwrap();
    let budget = Duration::from_secs_f64(arg("--budget").parse::<f64>().unwrap());
    let start = Instant::now();
    let cands = kernels::candidates();
    let pool = Pool::new(threads);

    // Correctness first: a candidate that disagrees with the reference is never timed.
    let mut ok = Vec::new();
    for (i, e) in cands.iter().enumerate() {
        let (bits, group) = format_of(e);
        let (k, n) = (300, 2 * e.lanes * e.t_u + 5);
        let w = random_gptq(k, n, bits, group, 11 + i as u64);
        let rows = m.min(5);
        let x = Rng::new(3).vec_f32(rows * k);
        let mut y = vec![0f32; rows * n];
        let result = Matrix::from_gptq_kernels(&w, *e, *e).and_then(|q| q.gemm_on(&pool, &x, rows, &mut y));
        match result {
            Ok(()) => {
                let err = rel_err(&w, &x, rows, &y);
                if err < 1e-4 {
                    println!("check {i} ok {err:e}");
                    ok.push(i);
                } else {
                    println!("check {i} fail max relative error {err:e}");
                }
            }
            Err(e) => println!("check {i} fail {e}"),
        }
    }

    // One packed matrix per (candidate, shape); the same data for all.
    let mut mats = Vec::new();
    for &i in &ok {
        let e = cands[i];
        let (bits, group) = format_of(&e);
        let per_shape: Vec<(Matrix, Vec<f32>, Vec<f32>)> = shapes
            .iter()
            .map(|&(k, n)| {
                let w = random_gptq(k, n, bits, group, 5);
                let q = Matrix::from_gptq_kernels(&w, e, e).unwrap();
                (q, Rng::new(7).vec_f32(m * k), vec![0f32; m * n])
            })
            .collect();
        mats.push((i, per_shape));
    }
    let bytes: f64 = mats.first().map(|(_, s)| s.iter().map(|(q, _, _)| q.weight_bytes() as f64).sum()).unwrap_or(0.0);
    let flops: f64 = shapes.iter().map(|&(k, n)| 2.0 * (m * k * n) as f64).sum();

    // Interleaved rounds: each round times every candidate once (a few calls
    // each, warm), in an order rotated per round so drift hits all alike.
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); mats.len()];
    let mut round = 0;
    while !mats.is_empty() && (round < 3 || start.elapsed() < budget) && round < 1000 {
        for j in 0..mats.len() {
            let idx = (j + round) % mats.len();
            let (_, per_shape) = &mut mats[idx];
            let mut total = 0.0;
            for (q, x, y) in per_shape.iter_mut() {
                q.gemm_on(&pool, black_box(x), m, y).unwrap();
                let reps = 3;
                let t = Instant::now();
                for _ in 0..reps {
                    q.gemm_on(&pool, black_box(x), m, y).unwrap();
                }
                total += t.elapsed().as_secs_f64() / reps as f64;
            }
            times[idx].push(total);
        }
        let med: Vec<f64> = times.iter().map(|t| median(t)).collect();
        let best = (0..med.len()).min_by(|&a, &b| med[a].total_cmp(&med[b])).unwrap();
        println!("round {round} best {} {:e}", mats[best].0, med[best]);
        round += 1;
    }
    for (j, (i, _)) in mats.iter().enumerate() {
        println!("result {i} {:e} {bytes} {flops}", median(&times[j]));
    }
}

fn median(t: &[f64]) -> f64 {
    let mut v = t.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
