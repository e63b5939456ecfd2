//! Every generated kernel against the scalar oracle (dequantize, accumulate
//! in f64), on random data, over every format this build holds x every ISA
//! this CPU runs x shapes with ragged edges x row counts x both block orders.

mod common;

use common::{check, ROWS, SHAPES};
use kgen::format::gptq::{random_gptq, GptqMatrix};
use kgen::format::rng::Rng;
use kgen_runtime::pool::Pool;
use kgen_runtime::{Family, GptqLayer, Group, Matrix, Op, Registry, WeightFormat};

/// The f32 family's formats in the build, as (bits, group).
fn formats(reg: &Registry) -> Vec<(u32, Group)> {
    reg.formats()
        .into_iter()
        .filter_map(|f| match f {
            WeightFormat::Gptq { bits, group } => Some((bits, group)),
            _ => None,
        })
        .collect()
}

#[test]
fn every_kernel_matches_the_oracle() {
    // The f32 family's kernels (4-bit GPTQ also runs on the int8 family's
    // kernels when asked for: int8_formats.rs tests those).
    let reg = &Registry::builtin().with_family(Some(Family::F32));
    let pool = Pool::new(1);
    let mut checked = 0;
    for (bits, group) in formats(reg) {
        let format = WeightFormat::gptq(bits, group).unwrap();
        let isas: Vec<&str> = reg
            .runnable(format, Op::Gemv)
            .iter()
            .map(|e| e.isa)
            .collect();
        assert!(!isas.is_empty(), "{format}: no runnable kernel");
        assert_eq!(
            *isas.last().unwrap(),
            "portable",
            "portable fallback must always be there"
        );
        for (si, &(k, n)) in SHAPES.iter().enumerate() {
            let w = random_gptq(k, n, bits, group, 17 + si as u64 * 31 + bits as u64);
            for isa in &isas {
                let forced = reg.with_isa(Some(isa));
                let mut qm = Matrix::from_gptq_with(&forced, &w).unwrap();
                assert_eq!(qm.family(), Family::F32);
                assert_eq!(
                    qm.gemv_kernel().isa,
                    *isa,
                    "forced ISA must be the one that runs"
                );
                assert_eq!(qm.gemm_kernel().isa, *isa);
                for zcurve in [false, true] {
                    qm.set_zcurve(zcurve);
                    for &rows in ROWS {
                        let x = Rng::new(k as u64 * 7 + rows as u64).vec_f32(rows * k);
                        let mut y = vec![f32::NAN; rows * n];
                        qm.gemm_on(&pool, &x, rows, &mut y).unwrap();
                        let what = format!(
                            "{} / {} {k}x{n} rows {rows} zcurve {zcurve}",
                            qm.gemv_kernel().name,
                            qm.gemm_kernel().name
                        );
                        check(&w, &x, rows, &y, &what);
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 0);
    eprintln!("checked {checked} kernel runs");
}

#[test]
fn thread_count_does_not_change_results() {
    let reg = Registry::builtin();
    for (bits, group) in formats(reg) {
        let w = random_gptq(777, 1500, bits, group, 5);
        let qm = Matrix::from_gptq_with(reg, &w).unwrap();
        for rows in [1, 4] {
            let x = Rng::new(9).vec_f32(rows * 777);
            let mut y1 = vec![0f32; rows * 1500];
            qm.gemm_on(&Pool::new(1), &x, rows, &mut y1).unwrap();
            for threads in [2, 3, 5] {
                let mut yt = vec![0f32; rows * 1500];
                qm.gemm_on(&Pool::new(threads), &x, rows, &mut yt).unwrap();
                assert!(
                    y1.iter().zip(&yt).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{bits}-bit g{group} rows {rows}: {threads} threads differ from 1"
                );
            }
        }
    }
}

#[test]
fn act_order_permutation_is_applied_to_activations() {
    // The f32 family (dispatch runs 4-bit GPTQ on the int8 family where it
    // has SIMD; tests/int8_formats.rs checks that path).
    let reg = &Registry::builtin().with_family(Some(Family::F32));
    let (k, n) = (256, 40);
    let w = random_gptq(k, n, 4, Group::Size(128), 3);
    // The packed rows are the original rows in `perm` order.
    let perm: Vec<u32> = (0..k as u32).rev().collect();
    let qm = Matrix::from_gptq_layer_with(
        reg,
        GptqLayer {
            matrix: w.clone(),
            perm: Some(perm.clone()),
        },
    )
    .unwrap();
    let x = Rng::new(1).vec_f32(k);
    let xp: Vec<f32> = perm.iter().map(|&i| x[i as usize]).collect();
    let mut y = vec![0f32; n];
    qm.gemv(&x, &mut y).unwrap();
    check(&w, &xp, 1, &y, "act-order");
}

#[test]
fn bad_shapes_and_data_are_errors() {
    let w = random_gptq(64, 16, 4, Group::Size(32), 1);
    let qm = Matrix::from_gptq(&w).unwrap();
    let mut y = vec![0f32; 16];
    assert!(qm
        .gemv(&[0.0; 63], &mut y)
        .unwrap_err()
        .to_string()
        .contains("shape mismatch"));
    assert!(qm.gemv(&[0.0; 64], &mut [0.0; 15]).is_err());
    assert!(qm.gemm(&[0.0; 128], 3, &mut [0.0; 48]).is_err());
    qm.gemm(&[], 0, &mut []).unwrap();
    assert!(qm.gemm(&[0.0; 64], 0, &mut []).is_err());
    // Buffers that disagree with the shape.
    let mut bad = w.clone();
    bad.qweight.pop();
    assert!(Matrix::from_gptq(&bad)
        .unwrap_err()
        .to_string()
        .contains("qweight"));
    let mut bad = w.clone();
    bad.scales[3] = f32::NAN;
    assert!(Matrix::from_gptq(&bad).is_err());
    assert!(Matrix::from_f32(&[0.0; 10], 3, 3, "4:32").is_err());
    assert!(Matrix::from_f32(&[f32::INFINITY; 9], 3, 3, "4:32").is_err());
    assert!(Matrix::from_f32(&[0.0; 9], 3, 3, "5:32")
        .unwrap_err()
        .to_string()
        .contains("5 weight bits"));
    // Raw buffers: too short, and a zero point outside the levels.
    let raw = |qweight: Vec<u32>, zero: f32| GptqMatrix {
        k: 64,
        n: 16,
        bits: 4,
        group: Group::Size(32),
        qweight,
        scales: vec![1.0; 32],
        zeros: vec![zero; 32],
    };
    assert!(Matrix::from_gptq(&raw(vec![0; 10], 0.0)).is_err());
    let e = Matrix::from_gptq(&raw(vec![0; 128], 99.0)).unwrap_err();
    assert!(e.to_string().contains("zero point"), "{e}");
    Matrix::from_gptq(&raw(vec![0; 128], 16.0)).unwrap();
    let bad_perm = GptqLayer {
        matrix: w.clone(),
        perm: Some(vec![0u32; 64]),
    };
    assert!(Matrix::from_gptq_layer(bad_perm).is_err());
    // A format the build has no kernel for is an error naming the fix.
    let w16 = random_gptq(64, 16, 2, Group::Size(256), 1);
    let f = WeightFormat::gptq(2, Group::Size(256)).unwrap();
    if !Registry::builtin().formats().contains(&f) {
        let e = Matrix::from_gptq(&w16).unwrap_err().to_string();
        assert!(e.contains("KGEN_SPECS") && e.contains("2:256"), "{e}");
    }
}

#[test]
fn constructors_agree() {
    let (k, n) = (300, 50);
    let wf = Rng::new(4).vec_f32(k * n);
    let g = GptqMatrix::quantize_rtn(k, n, 4, Group::Size(32), &wf);
    let x = Rng::new(8).vec_f32(k);
    // Whichever family dispatch picks, and the f32 family, whose product
    // is checked against the oracle.
    let f32 = Registry::builtin().with_family(Some(Family::F32));
    for reg in [Registry::builtin(), &f32] {
        let a = Matrix::from_f32_with(reg, &wf, k, n, "4:32").unwrap();
        let b = Matrix::from_gptq_with(reg, &g).unwrap();
        let c = Matrix::from_f32_with(
            reg,
            &wf,
            k,
            n,
            WeightFormat::gptq(4, Group::Size(32)).unwrap(),
        )
        .unwrap();
        assert_eq!(a.format(), c.format());
        assert_eq!(a.format().to_string(), "4:32");
        assert_eq!((a.family(), b.family()), (c.family(), c.family()));
        let (mut ya, mut yb) = (vec![0f32; n], vec![0f32; n]);
        a.gemv(&x, &mut ya).unwrap();
        b.gemv(&x, &mut yb).unwrap();
        assert_eq!(ya, yb, "{}", a.describe());
        if a.family() == Family::F32 {
            check(&g, &x, 1, &ya, "from_f32");
        }
        // And RTN is close to the f32 product itself: per-weight error is
        // below half a step (~0.07 here), so the sum's error grows like
        // sqrt(k); int8 activations add far less than that.
        for j in 0..n {
            let exact: f64 = (0..k).map(|i| x[i] as f64 * wf[i * n + j] as f64).sum();
            assert!(
                (ya[j] as f64 - exact).abs() < 0.15 * (k as f64).sqrt(),
                "col {j}: {} vs {exact}",
                ya[j]
            );
        }
    }
}
