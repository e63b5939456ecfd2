//! The int8-activation kernels against the exact oracle (integer dot
//! products of the same quantized activations, scaled in f64), over formats
//! x every ISA this CPU runs x ragged shapes x row counts x threads.

use kgen::format::Rng;
use kgen::ggml::GgmlMatrix;
use kgen::int8_layout::{quantize_activations, quantize_symmetric, reference_i8};
use kgen_runtime::{Int8Matrix, Pool, Registry};

const SHAPES: &[(usize, usize)] = &[
    (32, 1),
    (64, 7),
    (96, 33),
    (320, 130),
    (1024, 300),
    (4096, 40),
];
const ROWS: &[usize] = &[1, 2, 3, 5, 9];

/// Compares with the oracle; the bound is f32 rounding of the per-block
/// products and their sum, relative to the sum of |terms|.
fn check(w: &GgmlMatrix, x: &[f32], k: usize, m: usize, y: &[f32], what: &str) {
    let k_pad = w.k;
    let xa = quantize_activations(
        x,
        m,
        k,
        k_pad,
        if w.dtype == kgen::ggml::GgmlType::Q4_0 {
            4
        } else {
            8
        },
    );
    let want = reference_i8(w, &xa, m);
    let deq = w.dequantize();
    for r in 0..m {
        for j in 0..w.n {
            let mag: f64 = (0..k_pad)
                .map(|i| {
                    (deq[i * w.n + j] as f64
                        * xa.q[r * k_pad + i] as f64
                        * xa.d[r * (k_pad / 32) + i / 32] as f64)
                        .abs()
                })
                .sum();
            let tol = 8.0 * f32::EPSILON as f64 * ((k_pad / 32) as f64 + 4.0) * mag + 1e-30;
            let got = y[r * w.n + j] as f64;
            let exp = want[r * w.n + j];
            assert!(
                (got - exp).abs() <= tol,
                "{what}: row {r} col {j}: got {got}, want {exp} (tol {tol:e})"
            );
        }
    }
}

#[test]
fn every_int8_kernel_matches_the_oracle() {
    let reg = Registry::builtin();
    let pool = Pool::new(1);
    let mut runs = 0;
    for bits in [4u32, 8] {
        let isas: Vec<&str> = reg.runnable_i8(bits, false).iter().map(|e| e.isa).collect();
        assert!(!isas.is_empty(), "q{bits}_0: no kernel");
        assert_eq!(*isas.last().unwrap(), "portable");
        for (si, &(k, n)) in SHAPES.iter().enumerate() {
            let wf = Rng::new(40 + si as u64).vec_f32(k * n);
            let w = quantize_symmetric(&wf, k, n, bits, 32);
            for isa in &isas {
                let qm = Int8Matrix::from_ggml_isa(reg, &w, Some(isa)).unwrap();
                assert_eq!(qm.gemv_kernel().isa, *isa);
                for &m in ROWS {
                    let x = Rng::new(k as u64 + m as u64).vec_f32(m * k);
                    let mut y = vec![f32::NAN; m * n];
                    qm.gemm_on(&pool, &x, m, &mut y).unwrap();
                    check(
                        &w,
                        &x,
                        k,
                        m,
                        &y,
                        &format!(
                            "{} / {} {k}x{n} rows {m}",
                            qm.gemv_kernel().name,
                            qm.gemm_kernel().name
                        ),
                    );
                    runs += 1;
                }
            }
        }
    }
    eprintln!("{runs} int8 kernel runs checked");
}

#[test]
fn ragged_k_groups_and_threads() {
    for bits in [4, 8] {
        for group in [32, 64, 128, 256] {
            let (k, n) = (300, 70);
            let wf = Rng::new(3).vec_f32(k * n);
            let qm = Int8Matrix::from_f32(&wf, k, n, bits, group).unwrap();
            let w = quantize_symmetric(&wf, k, n, bits, group);
            let x = Rng::new(4).vec_f32(3 * k);
            let mut y1 = vec![0f32; 3 * n];
            qm.gemm_on(&Pool::new(1), &x, 3, &mut y1).unwrap();
            let mut xp = vec![0f32; 3 * w.k];
            for r in 0..3 {
                xp[r * w.k..r * w.k + k].copy_from_slice(&x[r * k..(r + 1) * k]);
            }
            check(&w, &xp, w.k, 3, &y1, &format!("from_f32 q{bits} g{group}"));
            let mut y2 = vec![0f32; 3 * n];
            qm.gemm_on(&Pool::new(3), &x, 3, &mut y2).unwrap();
            assert_eq!(y1, y2, "threads must not change results");
            // Close to the f32 product too (weight and activation rounding).
            let mut worst = 0f64;
            for j in 0..n {
                let exact: f64 = (0..k).map(|i| x[i] as f64 * wf[i * n + j] as f64).sum();
                worst = worst.max((y1[j] as f64 - exact).abs());
            }
            let step = if bits == 4 { 0.3 } else { 0.02 };
            assert!(
                worst < step * (k as f64).sqrt(),
                "q{bits} g{group}: error {worst} vs f32"
            );
        }
    }
}

#[test]
fn bad_inputs_are_errors() {
    let w = quantize_symmetric(&Rng::new(1).vec_f32(64 * 8), 64, 8, 4, 32);
    let qm = Int8Matrix::from_ggml(&w).unwrap();
    assert!(qm.gemv(&[0.0; 63], &mut [0.0; 8]).is_err());
    assert!(qm.gemm(&[0.0; 128], 2, &mut [0.0; 15]).is_err());
    assert!(Int8Matrix::from_f32(&[0.0; 9], 3, 3, 3, 32).is_err());
    assert!(Int8Matrix::from_f32(&[0.0; 9], 3, 3, 4, 48).is_err());
    assert!(Int8Matrix::from_f32(&[f32::NAN; 9], 3, 3, 4, 32).is_err());
    let f = GgmlMatrix::quantize(&[0.0; 64], 32, 2, kgen::ggml::GgmlType::F32);
    assert!(Int8Matrix::from_ggml(&f)
        .unwrap_err()
        .to_string()
        .contains("no int8 kernel"));
    let mut bad = w.clone();
    bad.data.pop();
    assert!(Int8Matrix::from_ggml(&bad).is_err());
    let e = Int8Matrix::from_ggml_isa(Registry::builtin(), &w, Some("sse9")).unwrap_err();
    assert!(e.to_string().contains("sse9"), "{e}");
}
