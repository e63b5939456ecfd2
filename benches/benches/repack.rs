//! Load-time repack throughput: GGUF blocks (as a mapped file holds them)
//! into the int8 family's layout, per format, in bytes of the file per
//! second.
//!
//! `cargo bench -p kgen-benches --bench repack` times
//! [`Matrix::from_ggml`] (validation and repack, on `KGEN_THREADS` threads,
//! default: the physical cores) on a 4096x11008 matrix of random level
//! bytes whose f16 scales are all 1/64, the shape of a model's gate / up
//! projection. The load target is 1 GB/s on 2 threads
//! (`runtime/examples/load_model` times a whole file).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kgen::format::rng::Rng;
use kgen_runtime::{GgmlMatrix, GgmlType, Matrix};
use std::hint::black_box;

const K: usize = 4096;
const N: usize = 11008;

/// Random level bytes with every f16 scale of every block set to 1/64.
fn random_blocks(dtype: GgmlType) -> GgmlMatrix {
    let mut rng = Rng::new(7);
    let len = dtype.row_bytes(K).expect("whole blocks") * N;
    let mut data: Vec<u8> = (0..len.div_ceil(8))
        .flat_map(|_| rng.next_u64().to_le_bytes())
        .take(len)
        .collect();
    let scale = half::f16::from_f32(1.0 / 64.0).to_bits();
    for block in data.chunks_exact_mut(dtype.block_bytes()) {
        for &at in dtype.format().scales {
            at.write(block, scale);
        }
    }
    GgmlMatrix {
        k: K,
        n: N,
        dtype,
        data,
    }
}

fn repack(c: &mut Criterion) {
    let mut g = c.benchmark_group("repack");
    g.sample_size(10);
    for dtype in [
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q4_1,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q3_K,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_S,
    ] {
        let m = random_blocks(dtype);
        g.throughput(Throughput::Bytes(m.data.len() as u64));
        g.bench_with_input(BenchmarkId::new(dtype.name(), "4096x11008"), &m, |b, m| {
            b.iter(|| black_box(Matrix::from_ggml(m).expect("valid blocks")))
        });
    }
    g.finish();
}

criterion_group!(benches, repack);
criterion_main!(benches);
