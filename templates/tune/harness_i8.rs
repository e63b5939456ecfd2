// kgen template: the `kgen tune --format` timing harness (int8 family).
//
// Copied into a scratch crate next to `kernels.rs` (the candidates, generated
// by kgen), built with `cargo build --release` and run by `kgen tune`. It
// depends on kgen alone: it packs weights with `kgen::layout::int8`,
// quantizes activations with `kgen::layout::act`, and calls each kernel
// module's `run` over the column panels itself, so it does not follow the
// runtime's matrix API. It checks every candidate against the exact oracle
// (`reference_i8`), then times them in interleaved rounds until the budget
// is spent, and prints one line per event for kgen to read:
//   check <i> ok <max_rel_err> | check <i> fail <message>
//   round <r> best <i> <seconds>
//   result <i> <median_seconds> <weight_bytes> <flops>
//
// What is timed is the kernel calls: activations are quantized once per
// matrix before timing (the same work for every candidate). With --threads
// above 1 the panels are split over scoped threads spawned per call.

#[allow(dead_code, clippy::all)]
mod kernels {
    include!("kernels.rs");
}

use kgen::format::ggml::{GgmlMatrix, GgmlType};
use kgen::format::rng::Rng;
use kgen::layout::act::{quantize_activations_as, reference_i8_for, ActFormat, QuantizedActivations};
use kgen::layout::int8::{I8Layout, I8Packed};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// A generated kernel's `run`.
pub type RunFn = unsafe fn(
    *const u8,
    *const u16,
    *const i8,
    *const f32,
    *const i32,
    *mut f32,
    usize,
    usize,
    usize,
    usize,
    usize,
);

/// One candidate: a kernel module's constants and entry point.
#[derive(Clone, Copy)]
pub struct Cand {
    pub name: &'static str,
    /// The format table's tag of the weights it reads.
    pub format: &'static str,
    pub lanes: usize,
    pub t_u: usize,
    pub m_r: usize,
    pub m_b: usize,
    pub t_b: usize,
    /// Bits per level of the layout it reads (a 3-bit format: 3 or 4).
    pub bits: u32,
    pub group_bytes: usize,
    pub signed: bool,
    pub int_scales: bool,
    pub group_scales: bool,
    pub row_pairs: bool,
    pub detect: fn() -> bool,
    pub run: RunFn,
}

// The harness's only calls into kgen's layout API: adapt these when it
// changes (kgen's tune tests build this file).

/// The format table's row of the weights `c` reads.
fn format(c: &Cand) -> &'static kgen::format::Format {
    kgen::format::by_tag(c.format).expect("a format of the table")
}

/// Values per block of `c`'s format (256 for the K-quants and TQ): a
/// matrix's K is a multiple of it.
fn k_block(c: &Cand) -> usize {
    format(c).block
}

/// The packed layout candidate `c` reads, for a `k x n` matrix.
fn layout(c: &Cand, k: usize, n: usize) -> I8Layout {
    I8Layout::new(GgmlType(format(c)), c.lanes, c.t_u, c.m_b, c.t_b, k, n)
        .read_at(c.bits)
        .grouped(c.group_bytes, c.signed)
        .int_sub_scales(c.int_scales)
        .group_scales(c.group_scales)
}

/// Activations as `c`'s kernel reads them (`plain`: row by row, unscaled,
/// as the oracle reads them).
fn act_format(c: &Cand, l: &I8Layout, plain: bool) -> ActFormat {
    ActFormat {
        row_pairs: c.row_pairs && !plain,
        scale: if plain { 1.0 } else { l.x_scale() },
        ..ActFormat::plain(l.format)
    }
}

/// Random `k x n` weights in the layout's source format.
fn weights(l: &I8Layout, k: usize, n: usize, seed: u64) -> GgmlMatrix {
    GgmlMatrix::quantize(&Rng::new(seed).vec_f32(k * n), k, n, l.source_type())
}

fn arg(name: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name).unwrap_or_else(|| panic!("missing {name}"));
    args[i + 1].clone()
}

/// A matrix packed for one candidate, its activations and output.
struct Mat {
    layout: I8Layout,
    packed: I8Packed,
    xa: QuantizedActivations,
    y: Vec<f32>,
}

/// `y = x W` for `m` rows: the kernel over all panels, split over `threads`.
fn call(c: &Cand, a: &mut Mat, m: usize, threads: usize) {
    let l = &a.layout;
    let panels = l.panels();
    let tasks = threads.min(panels).max(1);
    let (w, sc) = (a.packed.w.as_bytes().as_ptr() as usize, a.packed.sc.as_ptr() as usize);
    let (xq, xd, xc) = (a.xa.q.as_ptr() as usize, a.xa.d.as_ptr() as usize, a.xa.c.as_ptr() as usize);
    let y = a.y.as_mut_ptr() as usize;
    let (k_pad, n_pad, run) = (l.k_pad, l.n_pad, c.run);
    let go = move |i: usize| {
        let (p0, p1) = (i * panels / tasks, (i + 1) * panels / tasks);
        if p0 < p1 {
            // SAFETY: the CPU has the kernel's features (checked before any
            // call), the buffers have the layout's sizes, and each task
            // writes only the columns of its own panels.
            unsafe {
                run(
                    w as *const u8,
                    sc as *const u16,
                    xq as *const i8,
                    xd as *const f32,
                    xc as *const i32,
                    y as *mut f32,
                    m,
                    k_pad,
                    n_pad,
                    p0,
                    p1,
                )
            }
        }
    };
    if tasks == 1 {
        go(0);
    } else {
        std::thread::scope(|s| {
            for i in 1..tasks {
                s.spawn(move || go(i));
            }
            go(0);
        });
    }
}

fn pack(c: &Cand, w: &GgmlMatrix, x: &[f32], m: usize) -> Mat {
    let layout = layout(c, w.k, w.n);
    let packed = layout.repack(w);
    let xa = quantize_activations_as(x, m, w.k, layout.k_pad, act_format(c, &layout, false));
    let y = vec![0f32; m * layout.n_pad];
    Mat { layout, packed, xa, y }
}

/// Max error of the kernel against the oracle, relative to the largest output.
fn check(c: &Cand, m: usize, seed: u64) -> Result<f64, String> {
    // More than one scratch fill of 32 blocks with a ragged last one (whole
    // format blocks), and a ragged panel.
    let (k, n) = (
        (c.m_b + 96).max(1056).next_multiple_of(k_block(c)),
        c.t_b + c.lanes * c.t_u + 5,
    );
    let probe = layout(c, k, n);
    let w = weights(&probe, k, n, seed);
    let x = Rng::new(3).vec_f32(m * k);
    let mut a = pack(c, &w, &x, m);
    call(c, &mut a, m, 1);
    let plain = quantize_activations_as(&x, m, k, probe.k_pad, act_format(c, &probe, true));
    let r = reference_i8_for(&w, &plain, m, probe.int_scales);
    let scale = r.iter().fold(1e-30f64, |s, v| s.max(v.abs()));
    let mut err = 0f64;
    for row in 0..m {
        for j in 0..n {
            let (want, got) = (r[row * n + j], a.y[row * a.layout.n_pad + j]);
            if !got.is_finite() {
                return Err(format!("output ({row}, {j}) is {got}"));
            }
            err = err.max((want - got as f64).abs() / scale);
        }
    }
    Ok(err)
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

    // Correctness first: a candidate that disagrees with the reference is
    // never timed. GEMMs are checked on a full row group plus a ragged one.
    let mut ok = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        if !(c.detect)() {
            println!("check {i} fail {} needs CPU features this machine lacks", c.name);
            continue;
        }
        let rows = if m == 1 { 1 } else { m.min(c.m_r + 3).max(2) };
        match check(c, rows, 11 + i as u64) {
            Ok(err) if err < 1e-4 => {
                println!("check {i} ok {err:e}");
                ok.push(i);
            }
            Ok(err) => println!("check {i} fail max relative error {err:e}"),
            Err(e) => println!("check {i} fail {e}"),
        }
    }

    // One packed matrix per (candidate, shape); the same data for all.
    let sources: Vec<(GgmlMatrix, Vec<f32>)> = match ok.first() {
        Some(&i) => shapes
            .iter()
            .map(|&(k, n)| {
                let k = k.next_multiple_of(k_block(&cands[i]));
                (weights(&layout(&cands[i], k, n), k, n, 5), Rng::new(7).vec_f32(m * k))
            })
            .collect(),
        None => Vec::new(),
    };
    let mut mats: Vec<(usize, Vec<Mat>)> = ok
        .iter()
        .map(|&i| (i, sources.iter().map(|(w, x)| pack(&cands[i], w, x, m)).collect()))
        .collect();
    let bytes: f64 = mats
        .first()
        .map(|(_, s)| s.iter().map(|a| (a.layout.bytes() + 2 * a.packed.sc.len()) as f64).sum())
        .unwrap_or(0.0);
    let flops: f64 = sources.iter().map(|(w, _)| 2.0 * (m * w.k * w.n) as f64).sum();

    // Interleaved rounds: each round times every candidate once (a few calls
    // each, warm), in an order rotated per round so drift hits all alike.
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); mats.len()];
    let mut round = 0;
    while !mats.is_empty() && (round < 3 || start.elapsed() < budget) && round < 1000 {
        for j in 0..mats.len() {
            let idx = (j + round) % mats.len();
            let (i, per_shape) = &mut mats[idx];
            let c = &cands[*i];
            let mut total = 0.0;
            for a in per_shape.iter_mut() {
                call(c, black_box(a), m, threads);
                let reps = 3;
                let t = Instant::now();
                for _ in 0..reps {
                    call(c, black_box(a), m, threads);
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
