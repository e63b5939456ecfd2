use kgen::format::gptq::GptqMatrix;
use kgen::format::rng::Rng;
use kgen_runtime::{Group, Matrix, Pool, Registry};
fn main() {
    let reg = Registry::builtin();
    for e in reg.all() {
        if e.format == "4:128" {
            println!("{} detect={}", e.name, (e.detect)());
        }
    }
    let (k, n) = (4096, 4096);
    let w = Rng::new(1).vec_f32(k * n);
    let gq = GptqMatrix::quantize_rtn(k, n, 4, Group::Size(128), &w);
    let x = Rng::new(2).vec_f32(k);
    let mut y = vec![0f32; n];
    let pool = Pool::new(1);
    for isa in ["avx512f", "avx2", "portable"] {
        let Ok(qm) = Matrix::from_gptq_with(&reg.with_isa(Some(isa)), &gq) else {
            println!("{isa}: n/a");
            continue;
        };
        let s = kgen_benches_free_median(|| qm.gemm_on(&pool, &x, 1, &mut y).unwrap());
        println!(
            "{}: {:.3} ms  {:.1} GB/s",
            qm.gemv_kernel().name,
            s * 1e3,
            qm.weight_bytes() as f64 / s / 1e9
        );
    }
}
fn kgen_benches_free_median(mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..21)
        .map(|_| {
            let s = std::time::Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[10]
}
