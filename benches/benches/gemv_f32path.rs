//! GEMV on the f32 (QIGen) path: GB/s of weights for 4-bit group-128 matrices,
//! threads 1 and 2, every ISA this CPU runs; plus candle-core's quantized
//! matmul on the same shapes in the same process, printed as RATIO lines.
//!
//! `cargo bench -p kgen-benches --bench gemv_f32path`

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kgen::format::gptq::GptqMatrix;
use kgen::format::rng::Rng;
use kgen_benches::{paired_medians, read_bandwidth_gbs};
use kgen_runtime::{Group, Matrix, Op, Pool, Registry, WeightFormat};
use std::hint::black_box;

/// (K, N): y = x W with W K x N. 11008x4096 is an MLP down projection,
/// 4096x11008 an up projection.
const SHAPES: &[(usize, usize)] = &[(4096, 4096), (11008, 4096), (4096, 11008)];

fn gemv(c: &mut Criterion) {
    let reg = Registry::builtin();
    let format = WeightFormat::gptq(4, Group::Size(128)).unwrap();
    let isas: Vec<&str> = reg
        .runnable(format, Op::Gemv)
        .iter()
        .map(|e| e.isa)
        .collect();
    let mut g = c.benchmark_group("gemv_q4g128");
    g.sample_size(30);
    for &(k, n) in SHAPES {
        let w = Rng::new(1).vec_f32(k * n);
        let gq = GptqMatrix::quantize_rtn(k, n, 4, Group::Size(128), &w);
        let x = Rng::new(2).vec_f32(k);
        let mut y = vec![0f32; n];
        for isa in &isas {
            let qm = Matrix::from_gptq_with(&reg.with_isa(Some(isa)), &gq).unwrap();
            eprintln!(
                "{}x{}: {} repack {:.2} ms",
                k,
                n,
                qm.gemv_kernel().name,
                qm.repack_seconds() * 1e3
            );
            g.throughput(Throughput::Bytes(qm.weight_bytes() as u64));
            for threads in [1, 2] {
                let pool = Pool::new(threads);
                let id = BenchmarkId::new(format!("{isa}/t{threads}"), format!("{k}x{n}"));
                g.bench_function(id, |b| {
                    b.iter(|| qm.gemm_on(&pool, black_box(&x), 1, &mut y).unwrap())
                });
            }
        }
    }
    g.finish();
}

/// Paired medians against candle's Q4_0 and Q4K matmul, one RATIO line per case.
fn ratios(_: &mut Criterion) {
    // One thread for the peer too (candle parallelises with rayon), set before
    // rayon's pool exists.
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let bw = read_bandwidth_gbs(256 << 20);
    println!("machine single-thread read bandwidth: {bw:.1} GB/s");
    let reg = Registry::builtin();
    for &(k, n) in SHAPES {
        let w = Rng::new(1).vec_f32(k * n);
        let gq = GptqMatrix::quantize_rtn(k, n, 4, Group::Size(128), &w);
        let qm = Matrix::from_gptq_with(reg, &gq).unwrap();
        let x = Rng::new(2).vec_f32(k);
        let mut y = vec![0f32; n];
        // candle holds W as (out = n) x (in = k).
        let mut wt = vec![0f32; n * k];
        for i in 0..k {
            for j in 0..n {
                wt[j * k + i] = w[i * n + j];
            }
        }
        let dev = Device::Cpu;
        let wt = Tensor::from_vec(wt, (n, k), &dev).unwrap();
        let xt = Tensor::from_vec(x.clone(), (1, k), &dev).unwrap();
        let flops = 2.0 * (k * n) as f64;
        // Repack time: median of several packs from the GPTQ form.
        let repack = kgen_benches::median_secs(7, 1, || {
            black_box(Matrix::from_gptq_with(reg, &gq).unwrap());
        });
        println!(
            "REPACK shape={k}x{n} kernel={} median_ms={:.2}",
            qm.gemv_kernel().name,
            repack * 1e3
        );
        for (label, dtype) in [
            ("candle_q4_0", GgmlDType::Q4_0),
            ("candle_q4k", GgmlDType::Q4K),
        ] {
            let qmm = QMatMul::from_qtensor(QTensor::quantize(&wt, dtype).unwrap()).unwrap();
            let pool = Pool::new(1);
            let (tk, tc) = paired_medians(
                40,
                || qm.gemm_on(&pool, black_box(&x), 1, &mut y).unwrap(),
                || {
                    black_box(qmm.forward(&xt).unwrap());
                },
            );
            println!(
                "RATIO op=gemv shape={k}x{n} m=1 threads=1 kernel={} kgen_gflops={:.1} kgen_gbs={:.1} {label}_gflops={:.1} ratio={:.2}",
                qm.gemv_kernel().name,
                flops / tk / 1e9,
                qm.weight_bytes() as f64 / tk / 1e9,
                flops / tc / 1e9,
                tc / tk
            );
        }
    }
}

criterion_group!(benches, ratios, gemv);
criterion_main!(benches);
