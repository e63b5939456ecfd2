use kgen::format::rng::Rng;
use kgen_runtime::{Matrix, Pool, Registry};
fn med(mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..31)
        .map(|_| {
            let s = std::time::Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[15]
}
fn main() {
    let reg = Registry::builtin();
    let avx2 = reg.with_isa(Some("avx2"));
    let (k, n) = (4096, 4096);
    let w = Rng::new(1).vec_f32(k * n);
    let g = kgen::format::symmetric::quantize_symmetric(&w, k, n, 4, 32);
    let pool = Pool::new(1);
    let rp = med(|| {
        std::hint::black_box(Matrix::from_ggml_with(&avx2, &g).unwrap());
    });
    println!("repack 4096x4096 q4_0: {:.2} ms", rp * 1e3);
    let lay = kgen::layout::int8::I8Layout::new(kgen::format::GgmlType::Q4_0, 8, 2, 864, 96, k, n);
    for t in [1, 2] {
        let s = med(|| {
            std::hint::black_box(lay.repack_threads(&g, t));
        });
        println!("  layout.repack_threads({t}): {:.2} ms", s * 1e3);
    }
    let v = med(|| g.validate().unwrap());
    println!(
        "  validate: {:.2} ms; pool threads {}",
        v * 1e3,
        kgen_runtime::pool::global().threads()
    );
    for threads in [1usize, 2] {
        let pool = Pool::new(threads);
        let qm = Matrix::from_ggml_with(&avx2, &g).unwrap();
        for m in [1usize, 8] {
            let x = Rng::new(2).vec_f32(m * k);
            let mut y = vec![0f32; m * n];
            let s = med(|| qm.gemm_on(&pool, &x, m, &mut y).unwrap());
            println!(
                "threads={threads} m={m}: {:.3} ms {:.1} GFLOPS",
                s * 1e3,
                2.0 * (m * k * n) as f64 / s / 1e9
            );
        }
    }
    for isa in ["avx2", "portable"] {
        let qm = Matrix::from_ggml_with(&reg.with_isa(Some(isa)), &g).unwrap();
        for m in [1usize, 8, 32] {
            let x = Rng::new(2).vec_f32(m * k);
            let mut y = vec![0f32; m * n];
            let s = med(|| qm.gemm_on(&pool, &x, m, &mut y).unwrap());
            println!(
                "{} m={m}: {:.3} ms {:.1} GB/s {:.1} GFLOPS",
                if m == 1 {
                    qm.gemv_kernel().name
                } else {
                    qm.gemm_kernel().name
                },
                s * 1e3,
                qm.weight_bytes() as f64 / s / 1e9,
                2.0 * (m * k * n) as f64 / s / 1e9
            );
        }
    }
}
#[allow(dead_code)]
fn unused() {}
