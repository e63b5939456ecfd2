//! The int8-activation kernels against the exact oracle (integer dot
//! products of the same quantized activations, scaled in f64), over formats
//! x every ISA this CPU runs x ragged shapes x row counts x threads.

mod common;

use common::{check_i8 as check, I8_SHAPES as SHAPES, ROWS};
use kgen::format::ggml::{GgmlMatrix, GgmlType};
use kgen::format::rng::Rng;
use kgen::format::symmetric::quantize_symmetric;
use kgen_runtime::{Family, Matrix, Op, Pool, Registry, WeightFormat};

/// [`common::i8_format_built`], saying so when a test skips.
fn built(format: &str) -> bool {
    let here = common::i8_format_built(format);
    if !here {
        eprintln!("KGEN_SPECS has no {format}: skipped");
    }
    here
}

/// The GGML type of a format tag of the table.
fn dtype(tag: &str) -> GgmlType {
    GgmlType(kgen::format::by_tag(tag).expect("a format of the table"))
}

/// A K x N matrix of `t` from seed `seed`: random weights quantized (raw
/// random blocks would give MXFP4 scales beyond f16, which loading
/// refuses), raw blocks for the lattice formats (see [`common::LATTICE`]).
fn weights(t: GgmlType, k: usize, n: usize, seed: u64) -> GgmlMatrix {
    if common::LATTICE.contains(&t.tag()) {
        return common::raw_blocks(t, k, n, seed);
    }
    let wf = Rng::new(seed).vec_f32(k * n);
    match t.tag() {
        "q4_0" => quantize_symmetric(&wf, k, n, 4, 32),
        "q8_0" => quantize_symmetric(&wf, k, n, 8, 32),
        _ => GgmlMatrix::quantize(&wf, k, n, t),
    }
}

#[test]
fn every_int8_kernel_matches_the_oracle() {
    let reg = Registry::builtin();
    let pool = Pool::new(1);
    let mut runs = 0;
    let mut per_isa = std::collections::BTreeMap::new();
    for format in kgen::format::int8_formats().map(|f| f.tag) {
        if !matches!(format, "q4_0" | "q8_0") && !built(format) {
            continue;
        }
        let wformat: WeightFormat = format.parse().unwrap();
        let isas: Vec<&str> = reg
            .runnable(wformat, Op::Gemv)
            .iter()
            .map(|e| e.isa)
            .collect();
        assert!(!isas.is_empty(), "{format}: no kernel");
        assert_eq!(*isas.last().unwrap(), "portable");
        if dtype(format).format().codebook().is_some() || format == "q5_0" {
            // No sve256 codebook (IQ4_NL, MXFP4) or 5-bit kernels: SVE CPUs
            // fall back to i8mm / dotprod.
            assert!(!isas.contains(&"sve256"), "{isas:?}");
        }
        let bv = dtype(format).block_values();
        for (si, &(k, n)) in SHAPES.iter().enumerate() {
            // K-quants: whole 256-value super-blocks.
            let k = k.div_ceil(bv) * bv;
            let w = weights(dtype(format), k, n, 40 + si as u64);
            for isa in &isas {
                let qm = Matrix::from_ggml_with(&reg.with_isa(Some(isa)), &w).unwrap();
                assert_eq!(qm.family(), Family::Int8);
                assert_eq!(qm.format(), wformat);
                assert_eq!(qm.gemv_kernel().isa, *isa);
                assert_eq!(qm.gemm_kernel().isa, *isa);
                assert_eq!(qm.gemv_kernel().format, format);
                assert_eq!(qm.gemm_kernel().format, format);
                // The activation quantizer goes with the kernel's ISA.
                let vector = cfg!(target_arch = "x86_64")
                    && qm
                        .gemv_kernel()
                        .features
                        .iter()
                        .any(|f| ["avx2", "avx512f"].contains(f));
                let quantizer = if vector { "avx2" } else { "baseline" };
                assert_eq!(qm.activation_quantizer(1), Some(quantizer), "{isa}");
                assert_eq!(qm.activation_quantizer(7), Some(quantizer), "{isa}");
                for &m in ROWS {
                    let x = Rng::new(k as u64 + m as u64).vec_f32(m * k);
                    let mut y = vec![f32::NAN; m * n];
                    qm.gemm_on(&pool, &x, m, &mut y).unwrap();
                    common::check_kernels(&qm, &w, &x, k, m, &y);
                    runs += 1;
                    *per_isa
                        .entry(format!("{format} {isa} (activations: {quantizer})"))
                        .or_insert(0) += 1;
                }
            }
        }
    }
    eprintln!("{runs} int8 kernel runs checked: {per_isa:?}");
}

#[test]
fn ragged_k_groups_and_threads() {
    for bits in [4, 8] {
        for group in [32, 64, 128, 256] {
            let (k, n) = (300, 70);
            let wf = Rng::new(3).vec_f32(k * n);
            let format = WeightFormat::symmetric(bits, group).unwrap();
            let qm = Matrix::from_f32(&wf, k, n, format).unwrap();
            assert_eq!(
                (qm.family(), qm.format(), qm.k()),
                (Family::Int8, format, k)
            );
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
    let qm = Matrix::from_ggml(&w).unwrap();
    assert!(qm.gemv(&[0.0; 63], &mut [0.0; 8]).is_err());
    assert!(qm.gemm(&[0.0; 128], 2, &mut [0.0; 15]).is_err());
    assert!(Matrix::from_f32(&[0.0; 9], 3, 3, "q3_0").is_err());
    assert!(Matrix::from_f32(&[0.0; 9], 3, 3, "q4_0:48").is_err());
    assert!(WeightFormat::symmetric(3, 32).is_err());
    assert!(Matrix::from_f32(&[f32::NAN; 9], 3, 3, "q4_0").is_err());
    let f = GgmlMatrix::quantize(&[0.0; 64], 32, 2, kgen::format::ggml::GgmlType::F32);
    let e = Matrix::from_ggml(&f).unwrap_err().to_string();
    assert!(e.contains("F32 weights have no kernel"), "{e}");
    let mut bad = w.clone();
    bad.data.pop();
    assert!(Matrix::from_ggml(&bad).is_err());
    let reg = Registry::builtin();
    let e = Matrix::from_ggml_with(&reg.with_isa(Some("sse9")), &w).unwrap_err();
    assert!(e.to_string().contains("sse9"), "{e}");
    // Kernels of one format, or family, never read another's matrix.
    let (g, m) = reg.select_pair(WeightFormat::Q4_0).unwrap();
    let gptq = kgen::format::gptq::random_gptq(64, 8, 4, kgen_runtime::Group::Size(32), 1);
    let e = Matrix::from_gptq_kernels(&gptq, g, m).unwrap_err();
    assert!(e.to_string().contains("int8 kernel for q4_0"), "{e}");
    let (fg, fm) = reg
        .with_family(Some(kgen_runtime::Family::F32))
        .select_pair("4:32".parse().unwrap())
        .unwrap();
    let e = Matrix::from_ggml_kernels(&w, fg, fm).unwrap_err();
    assert!(e.to_string().contains("f32 kernel for 4:32"), "{e}");
    if !built("iq4_nl") {
        return;
    }
    let nl = GgmlMatrix::quantize_iq4_nl(&Rng::new(1).vec_f32(64 * 8), 64, 8);
    let e = Matrix::from_ggml_kernels(&nl, g, m).unwrap_err();
    assert!(e.to_string().contains("reads Q4_0"), "{e}");
    let (g, m) = reg.select_pair(WeightFormat::IQ4_NL).unwrap();
    let p = g.int8().unwrap();
    assert!(g.codebook() && !p.signed && g.format == "iq4_nl");
    let e = Matrix::from_ggml_kernels(&w, g, m).unwrap_err();
    assert!(e.to_string().contains("reads IQ4_NL"), "{e}");
    assert!("q8_k".parse::<WeightFormat>().is_err());
}

/// IQ4_NL end to end against f32: the kernels' result is close to `x W`
/// with the dequantized codebook weights (activation rounding only).
#[test]
fn iq4_nl_is_close_to_the_dequantized_product() {
    if !built("iq4_nl") {
        return;
    }
    let (k, n, m) = (512, 72, 3);
    let w = GgmlMatrix::quantize_iq4_nl(&Rng::new(21).vec_f32(k * n), k, n);
    let qm = Matrix::from_ggml(&w).unwrap();
    assert!(qm.gemv_kernel().name.starts_with("iq4_nl_gemv_"));
    let deq = w.dequantize();
    let x = Rng::new(22).vec_f32(m * k);
    let mut y = vec![0f32; m * n];
    qm.gemm(&x, m, &mut y).unwrap();
    for r in 0..m {
        for j in 0..n {
            let exact: f64 = (0..k)
                .map(|i| x[r * k + i] as f64 * deq[i * n + j] as f64)
                .sum();
            let mag: f64 = (0..k)
                .map(|i| (x[r * k + i] as f64 * deq[i * n + j] as f64).abs())
                .sum();
            assert!(
                (y[r * n + j] as f64 - exact).abs() <= 0.02 * mag,
                "row {r} col {j}: {} vs {exact}",
                y[r * n + j]
            );
        }
    }
}

/// Raw Q5_0 blocks: uniformly random nibbles and fifth bits (every level
/// 0..32 in every position), f16 scales of both signs over several orders
/// of magnitude, and one column of each extreme level (0 and 31).
fn random_q5_0(k: usize, n: usize, seed: u64) -> GgmlMatrix {
    let mut rng = Rng::new(seed);
    let mut data: Vec<u8> = (0..n * (k / 32) * 22)
        .map(|_| rng.next_u64() as u8)
        .collect();
    for (b, blk) in data.chunks_exact_mut(22).enumerate() {
        let d = rng.f32() * [1e-3f32, 0.1, 1.0, 7.0][b % 4];
        blk[..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        match b / (k / 32) {
            0 => blk[2..].fill(0),    // level 0 everywhere
            1 => blk[2..].fill(0xFF), // level 31 everywhere
            _ => {}
        }
    }
    let m = GgmlMatrix {
        k,
        n,
        dtype: GgmlType::Q5_0,
        data,
    };
    m.validate().unwrap();
    m
}

/// Q5_0 on every int8 ISA this CPU runs, over K (one block to many, several
/// scratch fills of 32 blocks), N (1..=9 and ragged against every tile width),
/// rows 1..=9 and larger (every micro kernel height and the GEMM's row
/// groups), on raw blocks with every level and on gguf-py-style quantized
/// weights, one and three threads.
#[test]
fn q5_0_every_isa_over_k_n_and_rows() {
    if !built("q5_0") {
        return;
    }
    let reg = Registry::builtin();
    let isas: Vec<&str> = reg
        .runnable(WeightFormat::Ggml(GgmlType::Q5_0), Op::Gemv)
        .iter()
        .map(|e| e.isa)
        .collect();
    let (p1, p3) = (Pool::new(1), Pool::new(3));
    let rows: Vec<usize> = (1..=9).chain([12, 16, 17]).collect();
    let mut runs = std::collections::BTreeMap::new();
    for (ki, &k) in [32usize, 64, 96, 224, 1056].iter().enumerate() {
        for (ni, &n) in [1usize, 2, 3, 5, 7, 8, 9, 15, 16, 17, 33, 64, 65, 130]
            .iter()
            .enumerate()
        {
            let seed = (ki * 100 + ni) as u64;
            let w = if ni % 2 == 0 {
                random_q5_0(k, n, seed)
            } else {
                let wf = Rng::new(seed).vec_f32(k * n);
                GgmlMatrix::quantize(&wf, k, n, GgmlType::Q5_0)
            };
            for isa in &isas {
                let qm = Matrix::from_ggml_with(&reg.with_isa(Some(isa)), &w).unwrap();
                assert_eq!((qm.gemv_kernel().isa, qm.gemm_kernel().isa), (*isa, *isa));
                assert_eq!(qm.gemv_kernel().format, "q5_0");
                assert!(!qm.gemv_kernel().int8().unwrap().signed && qm.gemv_kernel().bits == 5);
                for &m in rows.iter().filter(|&&m| k * n < 20_000 || m % 4 == 1) {
                    let x = Rng::new(seed * 31 + m as u64).vec_f32(m * k);
                    let mut y = vec![f32::NAN; m * n];
                    let pool = if m % 2 == 0 { &p3 } else { &p1 };
                    qm.gemm_on(pool, &x, m, &mut y).unwrap();
                    let what = format!(
                        "{} / {} {k}x{n} rows {m}",
                        qm.gemv_kernel().name,
                        qm.gemm_kernel().name
                    );
                    check(&w, &x, k, m, &y, &what);
                    *runs.entry(*isa).or_insert(0) += 1;
                }
            }
        }
    }
    eprintln!("q5_0 oracle runs per ISA: {runs:?}");
    assert_eq!(runs.len(), isas.len());
}

/// `KGEN_FORCE_ISA` picks each Q5_0 kernel this CPU runs: this test runs
/// itself once per ISA in a child process with the variable set, where
/// `Matrix::from_ggml` must select that ISA and match the oracle.
#[test]
fn q5_0_kgen_force_isa_selects_each_isa() {
    if !built("q5_0") {
        return;
    }
    if let Ok(isa) = std::env::var(kgen_runtime::FORCE_ISA_ENV) {
        // The child: the forced kernel runs.
        let w = random_q5_0(320, 70, 5);
        let qm = Matrix::from_ggml(&w).unwrap();
        assert_eq!(qm.gemv_kernel().isa, isa);
        assert_eq!(qm.gemm_kernel().isa, isa);
        for m in [1, 4, 9] {
            let x = Rng::new(m as u64).vec_f32(m * 320);
            let mut y = vec![f32::NAN; m * 70];
            qm.gemm(&x, m, &mut y).unwrap();
            check(&w, &x, 320, m, &y, &format!("{isa} rows {m}"));
        }
        println!("forced {isa} {}: ok", GgmlType::Q5_0);
        return;
    }
    let isas: Vec<&str> = Registry::builtin()
        .runnable(WeightFormat::Ggml(GgmlType::Q5_0), Op::Gemv)
        .iter()
        .map(|e| e.isa)
        .collect();
    common::assert_each_isa_forced(
        "q5_0_kgen_force_isa_selects_each_isa",
        &[(GgmlType::Q5_0, isas)],
    );
}

/// The formats of this file (32-value blocks without mins: Q4_0, Q8_0,
/// Q5_0, IQ4_NL, MXFP4, and kgen's own) that this build has kernels for.
fn flat_formats() -> Vec<GgmlType> {
    kgen::format::int8_formats()
        .filter(|f| f.int8.is_some_and(|r| !r.mins) && f.block == 32)
        .map(GgmlType)
        .filter(|t| matches!(t.tag(), "q4_0" | "q8_0") || common::i8_format_built(t.tag()))
        .collect()
}

/// `KGEN_FORCE_ISA` picks each kernel this CPU runs for every such format:
/// this test runs itself once per ISA in a child process with the variable
/// set, where `Matrix::from_ggml` must select that ISA and match the oracle.
/// On the qemu CPU models that skip the full sweep (scripts/test-aarch64.sh)
/// this is these formats' oracle check.
#[test]
fn kgen_force_isa_selects_each_isa() {
    let runnable = |t: GgmlType| -> Vec<&'static str> {
        Registry::builtin()
            .runnable(WeightFormat::Ggml(t), Op::Gemv)
            .iter()
            .map(|e| e.isa)
            .collect()
    };
    if let Ok(isa) = std::env::var(kgen_runtime::FORCE_ISA_ENV) {
        for t in flat_formats()
            .into_iter()
            .filter(|&t| runnable(t).contains(&&*isa))
        {
            let w = weights(t, 320, 70, 5);
            let qm = Matrix::from_ggml(&w).unwrap();
            assert_eq!((qm.gemv_kernel().isa, qm.gemm_kernel().isa), (&*isa, &*isa));
            for m in [1, 4, 9] {
                let x = Rng::new(m as u64).vec_f32(m * 320);
                let mut y = vec![f32::NAN; m * 70];
                qm.gemm(&x, m, &mut y).unwrap();
                let int = common::int_scales_of(qm.gemm_kernel());
                common::check_i8_with(&w, &x, 320, m, &y, &format!("{t} {isa} rows {m}"), int);
            }
            println!("forced {isa} {t}: ok");
        }
        return;
    }
    let formats: Vec<_> = flat_formats()
        .into_iter()
        .map(|t| (t, runnable(t)))
        .collect();
    common::assert_each_isa_forced("kgen_force_isa_selects_each_isa", &formats);
}
