//! The int8-activation family (Q4_0 weights, activations quantized per call)
//! against candle-core's quantized matmul (Q4_0 and Q4K) in the same process.
//!
//! `cargo bench -p kgen-benches --bench int8` prints one RATIO line per case
//! (paired medians, kgen and candle timed alternately) and runs criterion
//! groups for kgen alone; then a GEMV sweep over weights larger than L3 on
//! 2 threads, against this machine's measured read bandwidth.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kgen::format::rng::Rng;
use kgen::format::symmetric::quantize_symmetric;
use kgen_benches::{median_secs, paired_medians};
use kgen_runtime::{Matrix, Pool};
use std::hint::black_box;

/// (K, N): y = x W with W K x N.
const SHAPES: &[(usize, usize)] = &[(4096, 4096), (11008, 4096), (4096, 11008)];
const ROWS: &[usize] = &[1, 8, 32, 128];

fn threads_list() -> Vec<usize> {
    let max = std::thread::available_parallelism().map_or(1, |n| n.get());
    [1, 2].into_iter().filter(|&t| t <= max).collect()
}

fn ratios(_: &mut Criterion) {
    for &(k, n) in SHAPES {
        let w = Rng::new(1).vec_f32(k * n);
        let q = quantize_symmetric(&w, k, n, 4, 32);
        let qm = Matrix::from_ggml(&q).unwrap();
        eprintln!(
            "{k}x{n}: repack into {} took {:.2} ms",
            qm.gemv_kernel().name,
            qm.repack_seconds() * 1e3
        );
        let mut wt = vec![0f32; n * k];
        for i in 0..k {
            for j in 0..n {
                wt[j * k + i] = w[i * n + j];
            }
        }
        let dev = Device::Cpu;
        let wt = Tensor::from_vec(wt, (n, k), &dev).unwrap();
        let q40 = QMatMul::from_qtensor(QTensor::quantize(&wt, GgmlDType::Q4_0).unwrap()).unwrap();
        let q4k = QMatMul::from_qtensor(QTensor::quantize(&wt, GgmlDType::Q4K).unwrap()).unwrap();
        for threads in threads_list() {
            // candle parallelises with rayon and sizes its work by
            // RAYON_NUM_THREADS: give it the same thread count both ways.
            std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
            let rayon = rayon_pool(threads);
            let pool = Pool::new(threads);
            for &m in ROWS {
                let x = Rng::new(2).vec_f32(m * k);
                let xt = Tensor::from_vec(x.clone(), (m, k), &dev).unwrap();
                let mut y = vec![0f32; m * n];
                let reps = if m >= 32 { 9 } else { 25 };
                let flops = 2.0 * (m * k * n) as f64;
                let mut line = format!(
                    "RATIO op={} shape={k}x{n} m={m} threads={threads}",
                    if m == 1 { "gemv" } else { "gemm" }
                );
                let mut kgen_best = f64::INFINITY;
                for (label, peer) in [("candle_q4_0", &q40), ("candle_q4k", &q4k)] {
                    let (tk, tc) = paired_medians(
                        reps,
                        || qm.gemm_on(&pool, black_box(&x), m, &mut y).unwrap(),
                        || {
                            rayon.install(|| black_box(peer.forward(&xt).unwrap()));
                        },
                    );
                    kgen_best = kgen_best.min(tk);
                    line.push_str(&format!(
                        " {label}_gflops={:.1} ratio_vs_{label}={:.2}",
                        flops / tc / 1e9,
                        tc / tk
                    ));
                }
                let kernel = if m == 1 {
                    qm.gemv_kernel().name
                } else {
                    qm.gemm_kernel().name
                };
                let gbs = if m == 1 {
                    format!(
                        " kgen_gbs={:.1}",
                        qm.weight_bytes() as f64 / kgen_best / 1e9
                    )
                } else {
                    String::new()
                };
                println!(
                    "{line} kgen_gflops={:.1}{gbs} kernel={kernel}",
                    flops / kgen_best / 1e9
                );
            }
        }
    }
}

fn rayon_pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// GEMV over 8 matrices of 11008x4096 (about 200 MB of Q4_0, far beyond L3),
/// 2 threads, against the 2-thread read bandwidth of this machine.
fn beyond_l3(_: &mut Criterion) {
    let threads = *threads_list().last().unwrap();
    let pool = Pool::new(threads);
    let bw = kgen_benches::read_bandwidth_threads_gbs(512 << 20, threads);
    let (k, n) = (4096, 11008);
    let mats: Vec<Matrix> = (0..8)
        .map(|s| {
            Matrix::from_ggml(&quantize_symmetric(
                &Rng::new(s).vec_f32(k * n),
                k,
                n,
                4,
                32,
            ))
            .unwrap()
        })
        .collect();
    let x = Rng::new(9).vec_f32(k);
    let mut y = vec![0f32; n];
    let bytes: usize = mats.iter().map(|m| m.weight_bytes()).sum();
    let secs = median_secs(7, 1, || {
        for m in &mats {
            m.gemm_on(&pool, black_box(&x), 1, &mut y).unwrap();
        }
    });
    let gbs = bytes as f64 / secs / 1e9;
    println!(
        "BANDWIDTH op=gemv weights_mb={:.0} threads={threads} kgen_gbs={gbs:.1} machine_read_gbs={bw:.1} fraction={:.2}",
        bytes as f64 / 1e6,
        gbs / bw
    );
}

fn criterion_groups(c: &mut Criterion) {
    let mut g = c.benchmark_group("int8_q4_0");
    g.sample_size(20);
    for &(k, n) in SHAPES {
        let q = quantize_symmetric(&Rng::new(1).vec_f32(k * n), k, n, 4, 32);
        let qm = Matrix::from_ggml(&q).unwrap();
        for threads in threads_list() {
            let pool = Pool::new(threads);
            for &m in ROWS {
                let x = Rng::new(2).vec_f32(m * k);
                let mut y = vec![0f32; m * n];
                if m == 1 {
                    g.throughput(Throughput::Bytes(qm.weight_bytes() as u64));
                } else {
                    g.throughput(Throughput::Elements((2 * m * k * n) as u64));
                }
                let id = BenchmarkId::new(format!("t{threads}/m{m}"), format!("{k}x{n}"));
                g.bench_function(id, |b| {
                    b.iter(|| qm.gemm_on(&pool, black_box(&x), m, &mut y).unwrap())
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, ratios, beyond_l3, criterion_groups);
criterion_main!(benches);
