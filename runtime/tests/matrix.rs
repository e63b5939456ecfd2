//! `Matrix`, the one matrix type: every constructor against its scalar
//! oracle, the family and kernel it reports, forced ISAs in both families,
//! and the errors (shapes, formats no kernel runs).
//!
//! Selections here go through `Registry::with_isa`, never `KGEN_FORCE_ISA`
//! (tests of one binary run in parallel); `force_isa_env.rs` covers the
//! variable.

mod common;

use common::{check, check_i8, i8_format_built, write_gguf, write_gptq};
use kgen::format::ggml::{GgmlMatrix, GgmlType};
use kgen::format::gptq::{random_gptq, GptqMatrix};
use kgen::format::rng::Rng;
use kgen::format::symmetric::quantize_symmetric;
use kgen_runtime::{
    Error, Family, GptqLayer, GptqOptions, Group, Matrix, Op, Pool, Registry, WeightFormat,
    ZeroConvention,
};

/// The built-in registry, best ISA whatever `KGEN_FORCE_ISA` says.
fn best() -> Registry {
    Registry::builtin().with_isa(None)
}

/// [`best`] on the f32 family: 4-bit GPTQ runs on the int8 family by
/// default where it has SIMD (tests/int8_formats.rs checks that path).
fn best_f32() -> Registry {
    best().with_family(Some(Family::F32))
}

/// GGUF-block formats this build has kernels for.
fn int8_formats() -> Vec<WeightFormat> {
    [WeightFormat::Q4_0, WeightFormat::Q8_0, WeightFormat::IQ4_NL]
        .into_iter()
        .filter(|f| i8_format_built(&f.to_string()))
        .collect()
}

/// Random f32 weights quantized to a GGUF-block format (`k` a multiple of 32).
fn ggml(format: WeightFormat, k: usize, n: usize, seed: u64) -> GgmlMatrix {
    let w = Rng::new(seed).vec_f32(k * n);
    GgmlMatrix::quantize(&w, k, n, format.ggml_type().expect("a GGUF block format"))
}

/// Runs `m` on 1 and 3 rows and checks an int8-family result against the
/// exact oracle of the GGUF matrix `w` (K padded to `w.k`).
fn check_int8(m: &Matrix, w: &GgmlMatrix, what: &str) {
    let k = m.k();
    for rows in [1, 3] {
        let x = Rng::new(k as u64 + rows as u64).vec_f32(rows * k);
        let mut y = vec![f32::NAN; rows * m.n()];
        m.gemm(&x, rows, &mut y).unwrap();
        let mut xp = vec![0f32; rows * w.k];
        for r in 0..rows {
            xp[r * w.k..r * w.k + k].copy_from_slice(&x[r * k..(r + 1) * k]);
        }
        let int = common::int_scales_of(m.gemm_kernel());
        common::check_i8_with(w, &xp, w.k, rows, &y, &format!("{what} rows {rows}"), int);
    }
}

/// Runs `m` on 1 and 3 rows against the f64 oracle of GPTQ matrix `w`,
/// whose rows are the activations' in `perm` order.
fn check_f32(m: &Matrix, w: &GptqMatrix, perm: Option<&[u32]>, what: &str) {
    let k = m.k();
    for rows in [1, 3] {
        let x = Rng::new(k as u64 * 3 + rows as u64).vec_f32(rows * k);
        let mut y = vec![f32::NAN; rows * m.n()];
        m.gemm(&x, rows, &mut y).unwrap();
        let xp: Vec<f32> = match perm {
            None => x.clone(),
            Some(p) => (0..rows)
                .flat_map(|r| p.iter().map(move |&i| (r, i)))
                .map(|(r, i)| x[r * k + i as usize])
                .collect(),
        };
        check(w, &xp, rows, &y, &format!("{what} rows {rows}"));
    }
}

#[test]
fn from_ggml_and_from_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let (k, n) = (96, 33);
    let mats: Vec<(WeightFormat, GgmlMatrix)> = int8_formats()
        .into_iter()
        .enumerate()
        .map(|(i, f)| (f, ggml(f, k, n, 10 + i as u64)))
        .collect();
    let f16 = GgmlMatrix::quantize(&Rng::new(3).vec_f32(64 * 2), 64, 2, GgmlType::F16);
    let mut tensors: Vec<(String, &GgmlMatrix)> =
        mats.iter().map(|(f, m)| (format!("w.{f}"), m)).collect();
    tensors.push(("w.f16".into(), &f16));
    let named: Vec<(&str, &GgmlMatrix)> = tensors.iter().map(|(s, m)| (s.as_str(), *m)).collect();
    write_gguf(&path, &named);
    for (format, w) in &mats {
        let a = Matrix::from_ggml(w).unwrap();
        let b = Matrix::from_ggml_with(&best(), w).unwrap();
        let c = Matrix::from_gguf(&path, &format!("w.{format}")).unwrap();
        let d = Matrix::from_gguf_with(&best(), &path, &format!("w.{format}")).unwrap();
        for (m, how) in [
            (&a, "from_ggml"),
            (&b, "from_ggml_with"),
            (&c, "from_gguf"),
            (&d, "from_gguf_with"),
        ] {
            assert_eq!(
                (m.format(), m.family(), m.k(), m.n()),
                (*format, Family::Int8, k, n),
                "{how}"
            );
            check_int8(m, w, &format!("{how} {format}"));
        }
    }
    // F16 tensors: refused, naming file, tensor and type.
    let e = Matrix::from_gguf(&path, "w.f16").unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("m.gguf") && msg.contains("\"w.f16\"") && msg.contains("F16"),
        "{msg}"
    );
    assert!(Matrix::from_ggml(&f16)
        .unwrap_err()
        .to_string()
        .contains("F16 weights have no kernel"));
    let e = Matrix::from_gguf(&path, "w.missing")
        .unwrap_err()
        .to_string();
    assert!(e.contains("w.missing"), "{e}");
    let e = Matrix::from_gguf(dir.path().join("none.gguf"), "w")
        .unwrap_err()
        .to_string();
    assert!(e.contains("none.gguf"), "{e}");
}

#[test]
fn from_gptq_layer_and_file() {
    let (k, n) = (256, 40);
    let w = random_gptq(k, n, 4, Group::Size(128), 3);
    let m = Matrix::from_gptq(&w).unwrap();
    let picked = best().select(m.format(), Op::Gemv).unwrap();
    assert_eq!(
        (m.format().to_string(), m.family(), m.kernel().name),
        ("4:128".into(), picked.family(), picked.name)
    );
    let m = Matrix::from_gptq_with(&best_f32(), &w).unwrap();
    assert_eq!(
        (m.format().to_string(), m.family()),
        ("4:128".into(), Family::F32)
    );
    check_f32(&m, &w, None, "from_gptq_with");
    // Act-order: the packed rows are the original rows in `perm` order.
    let perm: Vec<u32> = (0..k as u32).rev().collect();
    let layer = GptqLayer {
        matrix: w.clone(),
        perm: Some(perm.clone()),
    };
    Matrix::from_gptq_layer(layer.clone()).unwrap();
    let m = Matrix::from_gptq_layer_with(&best_f32(), layer).unwrap();
    check_f32(&m, &w, Some(&perm), "from_gptq_layer_with");

    // A checkpoint with a scrambled g_idx, through the file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let w3 = random_gptq(k, n, 3, Group::Size(128), 4);
    let g_idx: Vec<u32> = (0..k).map(|i| ((i * 5 + 3) % 2) as u32).collect();
    write_gptq(&path, "layers.0.up", &w3, Some(&g_idx));
    let opts = GptqOptions::new(3);
    let loaded = kgen_runtime::load_gptq(&path, "layers.0.up", &opts).unwrap();
    let perm = loaded.perm.clone().expect("act-order");
    for m in [
        Matrix::from_gptq_file(&path, "layers.0.up", &opts).unwrap(),
        Matrix::from_gptq_file_with(&best(), &path, "layers.0.up", &opts).unwrap(),
    ] {
        assert_eq!(m.format().to_string(), "3:128");
        check_f32(&m, &loaded.matrix, Some(&perm), "from_gptq_file");
    }
    let v1 = GptqOptions {
        bits: 3,
        convention: Some(ZeroConvention::V1),
    };
    // V1 reads every zero point one higher: a different, still valid, matrix.
    Matrix::from_gptq_file(&path, "layers.0.up", &v1).unwrap();
    let e = Matrix::from_gptq_file(&path, "layers.9.up", &opts).unwrap_err();
    assert!(
        matches!(e, Error::Load(_)) && e.to_string().contains("layers.9.up"),
        "{e}"
    );
}

#[test]
fn from_f32_in_every_family() {
    // K not a multiple of 32: the int8 formats pad it (the K-quants and
    // TQ formats to their 256-value super-blocks), the matrix keeps it.
    let (k, n) = (100, 37);
    let wf = Rng::new(5).vec_f32(k * n);
    let reg = best();
    for name in [
        "4:128", "3:col", "2:32", "8:128", "q4_0", "q8_0", "iq4_nl", "q4_0:128", "q4_0:256",
        "q8_0:64", "q4_k", "q5_k", "q6_k", "q2_k", "tq2_0",
    ] {
        let format: WeightFormat = name.parse().unwrap();
        let want = format.kernel_format();
        if !reg.formats().contains(&want) {
            eprintln!("{name}: not in this build, skipped");
            continue;
        }
        // GPTQ on its own (f32) family, which the oracle below checks
        // exactly; the default build picks the int8 family for 4-bit GPTQ
        // where it has SIMD (tests/int8_formats.rs).
        let m = match format {
            WeightFormat::Gptq { .. } => Matrix::from_f32_with(&best_f32(), &wf, k, n, name),
            _ => Matrix::from_f32(&wf, k, n, name),
        }
        .unwrap();
        let own = if format.family() == Family::F32 {
            best_f32()
        } else {
            reg.clone()
        };
        let m2 = Matrix::from_f32_with(&own, &wf, k, n, format).unwrap();
        assert_eq!((m.format(), m2.format()), (format, format));
        assert_eq!(
            (m.k(), m.n(), m.family()),
            (k, n, format.family()),
            "{name}"
        );
        match format {
            WeightFormat::Gptq { bits, group } => {
                let g = GptqMatrix::quantize_rtn(k, n, bits, group, &wf);
                check_f32(&m, &g, None, name);
                check_f32(&m2, &g, None, name);
            }
            _ => {
                let g = match format {
                    WeightFormat::Ggml(t) => {
                        let k_pad = k.next_multiple_of(t.block_values());
                        let mut wp = wf.clone();
                        wp.resize(k_pad * n, 0.0);
                        GgmlMatrix::quantize(&wp, k_pad, n, t)
                    }
                    WeightFormat::Symmetric { bits, group } => {
                        quantize_symmetric(&wf, k, n, bits, group)
                    }
                    f => quantize_symmetric(&wf, k, n, f.bits(), 32),
                };
                check_int8(&m, &g, name);
                check_int8(&m2, &g, name);
            }
        }
    }
}

/// Each format of the build runs on the family the format table names, with
/// the best kernel this CPU runs for it, and says so.
#[test]
fn family_and_kernel_are_reported() {
    let reg = best();
    let mut formats = reg.formats();
    formats.push(WeightFormat::symmetric(4, 128).unwrap());
    for format in formats {
        let (k, n) = (256, 24);
        let m = match format.family() {
            Family::F32 => {
                let WeightFormat::Gptq { bits, group } = format else {
                    unreachable!()
                };
                Matrix::from_gptq_with(&reg, &random_gptq(k, n, bits, group, 1)).unwrap()
            }
            Family::Int8 => {
                Matrix::from_f32_with(&reg, &Rng::new(1).vec_f32(k * n), k, n, format).unwrap()
            }
        };
        // Dispatch's family: the format's own, except 4-bit GPTQ, which
        // runs on the int8 family where that has SIMD here.
        let want = &reg.runnable(format, Op::Gemv)[0];
        assert_eq!(m.family(), want.family(), "{format}");
        let int8_simd = format.family() == Family::F32 && common::int8_has_simd(&reg, format);
        assert_eq!(
            m.family(),
            if int8_simd {
                Family::Int8
            } else {
                format.family()
            },
            "{format}"
        );
        let kernel = m.kernel();
        assert_eq!(
            kernel.name, want.name,
            "{format}: the best runnable GEMV kernel"
        );
        assert_eq!(m.gemv_kernel().name, kernel.name);
        assert_eq!(kernel.family(), m.family());
        let (_, kf) = format.families()[usize::from(m.family() != format.family())];
        assert_eq!(kernel.format, kf.to_string());
        assert_eq!(kernel.weight_format().unwrap(), kf);
        assert!((kernel.detect)());
        let gemm = m.gemm_kernel();
        assert_eq!((gemm.isa, gemm.target), (kernel.isa, kernel.target));
        assert!(gemm.same_layout(kernel));
        assert_eq!(reg.select(format, Op::Gemv).unwrap().name, kernel.name);
        assert_eq!(reg.select(format, Op::Gemm).unwrap().name, gemm.name);
        let d = m.describe();
        for part in [
            m.family().name(),
            &format.to_string(),
            kernel.isa,
            kernel.name,
            gemm.name,
            kernel.target,
        ] {
            assert!(d.contains(part), "{d} lacks {part}");
        }
        assert!(m.to_string().contains(&format!("{k}x{n}")) && m.to_string().contains(&d));
        assert!(format!("{m:?}").contains(kernel.name));
        assert!(m.weight_bytes() > 0 && m.repack_seconds() >= 0.0);
        // The right side of the family line: GPTQ has zero points, so f32,
        // but for 4-bit GPTQ on SIMD int8 kernels (zero points as mins).
        match format {
            WeightFormat::Gptq { .. } if !int8_simd => assert_eq!(m.family(), Family::F32),
            _ => assert_eq!(m.family(), Family::Int8),
        }
    }
}

/// Every ISA this CPU runs for a format, forced per registry: the forced
/// kernel is the one that runs (GEMV and GEMM), in both families, and it
/// matches the oracle; an ISA the build or the CPU lacks is an error naming
/// the ISA, the format and the features.
#[test]
fn forced_isa_runs_in_both_families() {
    let builtin = Registry::builtin();
    let pool = Pool::new(2);
    let (k, n) = (320, 70);
    let gptq = random_gptq(k, n, 4, Group::Size(32), 8);
    let q4 = ggml(WeightFormat::Q4_0, k, n, 9);
    let mut forced_runs = std::collections::BTreeMap::new();
    for format in [
        WeightFormat::gptq(4, Group::Size(32)).unwrap(),
        WeightFormat::Q4_0,
    ] {
        // Each format on its own family (4-bit GPTQ would take the int8
        // family's SIMD kernels; tests/int8_formats.rs forces those).
        let reg = builtin.with_family(Some(format.family()));
        let isas: Vec<&str> = reg
            .runnable(format, Op::Gemv)
            .iter()
            .map(|e| e.isa)
            .collect();
        assert!(isas.contains(&"portable"), "{format}: {isas:?}");
        for isa in &isas {
            let forced = reg.with_isa(Some(isa));
            assert_eq!(forced.forced_isa().as_deref(), Some(*isa));
            let m = match format.family() {
                Family::F32 => Matrix::from_gptq_with(&forced, &gptq).unwrap(),
                Family::Int8 => Matrix::from_ggml_with(&forced, &q4).unwrap(),
            };
            assert_eq!(m.kernel().isa, *isa, "{format}");
            assert_eq!(m.gemv_kernel().isa, *isa);
            assert_eq!(m.gemm_kernel().isa, *isa);
            for rows in [1, 4] {
                let x = Rng::new(rows as u64).vec_f32(rows * k);
                let mut y = vec![f32::NAN; rows * n];
                m.gemm_on(&pool, &x, rows, &mut y).unwrap();
                let what = format!("forced {isa}: {}", m.describe());
                match format.family() {
                    Family::F32 => check(&gptq, &x, rows, &y, &what),
                    Family::Int8 => check_i8(&q4, &x, k, rows, &y, &what),
                }
            }
            *forced_runs.entry(m.family()).or_insert(0) += 1;
        }
        // An ISA no build has.
        let e = match format.family() {
            Family::F32 => Matrix::from_gptq_with(&reg.with_isa(Some("sse9")), &gptq),
            Family::Int8 => Matrix::from_ggml_with(&reg.with_isa(Some("sse9")), &q4),
        }
        .unwrap_err()
        .to_string();
        assert!(e.contains("sse9") && e.contains(&format.to_string()), "{e}");
        // ISAs the build has for the format but this CPU lacks.
        let compiled: Vec<_> = reg
            .all()
            .iter()
            .filter(|e| e.weight_format().ok() == Some(format) && !e.gemm)
            .filter(|e| !isas.contains(&e.isa))
            .collect();
        for c in compiled {
            let e = reg
                .with_isa(Some(c.isa))
                .select_pair(format)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(c.isa)
                    && e.contains(&format.to_string())
                    && e.contains("lacks the features"),
                "{e}"
            );
            for f in c.features {
                assert!(e.contains(f), "{e} lacks {f}");
            }
        }
    }
    assert_eq!(forced_runs.len(), 2, "{forced_runs:?}");
}

#[test]
fn shape_errors_in_both_families() {
    let (k, n) = (64, 16);
    let f32m = Matrix::from_f32(&Rng::new(1).vec_f32(k * n), k, n, "4:32").unwrap();
    let i8m = Matrix::from_f32(&Rng::new(1).vec_f32(k * n), k, n, "q4_0").unwrap();
    for m in [&f32m, &i8m] {
        let shape = |r: Result<(), Error>| matches!(r, Err(Error::Shape(_)));
        assert!(shape(m.gemv(&[0.0; 63], &mut [0.0; 16])), "{m}");
        assert!(shape(m.gemv(&[0.0; 64], &mut [0.0; 17])), "{m}");
        assert!(shape(m.gemm(&[0.0; 128], 3, &mut [0.0; 48])), "{m}");
        assert!(shape(m.gemm(&[0.0; 128], 2, &mut [0.0; 31])), "{m}");
        // An empty batch is a no-op; with values it is a shape error.
        m.gemm(&[], 0, &mut []).unwrap();
        assert!(shape(m.gemm(&[0.0; 64], 0, &mut [])), "{m}");
        let e = m.gemv(&[0.0; 10], &mut [0.0; 16]).unwrap_err().to_string();
        assert!(e.contains("64x16") && e.contains("10"), "{e}");
        m.gemm(&[0.0; 128], 2, &mut [0.0; 32]).unwrap();
    }
    for format in ["4:32", "q4_0", "iq4_nl"] {
        for (len, k, n) in [(10, 3, 3), (0, 0, 3), (0, 3, 0)] {
            let e = Matrix::from_f32(&vec![0.0; len], k, n, format).unwrap_err();
            assert!(matches!(e, Error::Shape(_)), "{format} {len} {k}x{n}: {e}");
        }
    }
}

#[test]
fn unsupported_formats_are_errors_naming_the_format() {
    let w = vec![0.5f32; 64 * 4];
    for (name, says) in [
        ("q8_k", "q8_k"),
        ("q4_0:96", "q4_0:96"),
        ("7:32", "7 weight bits"),
        ("3:16", "3-bit with group 16"),
        ("f16", "f16"),
    ] {
        let e = Matrix::from_f32(&w, 64, 4, name).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{name}: {e}");
        let msg = e.to_string();
        assert!(msg.contains(says), "{name}: {msg}");
    }
    for t in [GgmlType::F32, GgmlType::F16] {
        let m = GgmlMatrix::quantize(&w, 64, 4, t);
        let e = Matrix::from_ggml(&m).unwrap_err();
        assert!(
            matches!(e, Error::Unsupported(_)) && e.to_string().contains(t.name()),
            "{e}"
        );
    }
    let mut g5 = random_gptq(64, 4, 4, Group::Size(32), 1);
    g5.bits = 5;
    let e = Matrix::from_gptq(&g5).unwrap_err().to_string();
    assert!(e.contains("5:32") && e.contains("5 weight bits"), "{e}");
    // A format the table has but this build generated no kernel for.
    let reg = Registry::builtin();
    for f in ["2:256", "8:16", "3:64"] {
        let format: WeightFormat = f.parse().unwrap();
        if reg.formats().contains(&format) {
            continue;
        }
        let e = Matrix::from_f32(&w, 64, 4, format).unwrap_err();
        assert!(matches!(e, Error::NoKernel(_)), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(f) && msg.contains("KGEN_SPECS"), "{msg}");
    }
}

/// A registry holding only some kernels (as a downstream build would):
/// formats outside it are errors that list what it has.
#[test]
fn a_registry_with_one_format() {
    let only: Vec<_> = Registry::builtin()
        .all()
        .iter()
        .filter(|e| e.format == "q8_0")
        .copied()
        .collect();
    let reg = Registry::new(only).with_isa(None);
    assert_eq!(reg.formats(), [WeightFormat::Q8_0]);
    let (k, n) = (64, 9);
    let wf = Rng::new(2).vec_f32(k * n);
    let m = Matrix::from_f32_with(&reg, &wf, k, n, "q8_0").unwrap();
    assert_eq!(m.family(), Family::Int8);
    let e = Matrix::from_f32_with(&reg, &wf, k, n, "q4_0")
        .unwrap_err()
        .to_string();
    assert!(e.contains("q4_0") && e.contains("it has: q8_0"), "{e}");
    let e = Matrix::from_f32_with(&reg, &wf, k, n, "4:32")
        .unwrap_err()
        .to_string();
    assert!(e.contains("f32-family kernel for 4:32"), "{e}");
}

/// Non-finite activations reach the output, on GEMV and GEMM: a NaN makes
/// its row NaN in both families. In the int8 family `+inf` at position `i`
/// gives what f32 math gives, `+-inf` where the weight `w[i][j]` is non-zero
/// (its sign) and NaN where it is zero; the f32 family folds the zero point
/// through the activation sum (`s (x q) - s z sum(x)`), where an infinity
/// meets its own negation, so there it may give NaN instead of `+-inf`, never
/// a finite value. The weights are read back through a unit activation
/// (exact in both families).
#[test]
fn non_finite_activations_propagate() {
    let (k, n) = (96, 24);
    let mut formats = vec!["4:32".to_string(), "4:128".to_string()];
    formats.extend(int8_formats().iter().map(|f| f.to_string()));
    for format in &formats {
        let mut w = Rng::new(5).vec_f32(k * n);
        // Zero weights at the infinity's position, so both cases occur.
        let at = 40;
        for j in (0..n).step_by(3) {
            w[at * n + j] = 0.0;
        }
        let m = Matrix::from_f32(&w, k, n, format).unwrap();
        let mut unit = vec![0.0; k];
        unit[at] = 1.0;
        let mut w_at = vec![0.0; n];
        m.gemv(&unit, &mut w_at).unwrap();
        for rows in [1, 3] {
            let mut x = Rng::new(9).vec_f32(rows * k);
            x[at] = f32::INFINITY;
            if rows > 1 {
                x[k + 7] = f32::NAN;
            }
            let mut y = vec![0.0; rows * n];
            m.gemm(&x, rows, &mut y).unwrap();
            for j in 0..n {
                let y0 = y[j];
                if w_at[j] == 0.0 {
                    assert!(y0.is_nan(), "{format} rows={rows} col {j}: {y0}, weight 0");
                } else if m.family() == Family::Int8
                    && !matches!(m.format(), WeightFormat::Gptq { .. })
                {
                    assert_eq!(y0, f32::INFINITY.copysign(w_at[j]), "{format} col {j}");
                } else {
                    // The f32 family, and mins (4-bit GPTQ on the int8
                    // family): the scale and min terms can meet as inf - inf.
                    let inf = f32::INFINITY.copysign(w_at[j]);
                    assert!(y0.is_nan() || y0 == inf, "{format} col {j}: {y0}");
                }
            }
            if rows > 1 {
                assert!(y[n..2 * n].iter().all(|v| v.is_nan()), "{format}");
                assert!(y[2 * n..].iter().all(|v| v.is_finite()), "{format}");
            }
        }
    }
}

/// An empty batch writes nothing and is not an error.
#[test]
fn empty_batch_is_a_no_op() {
    for format in ["4:32", "q4_0"] {
        let m = Matrix::from_f32(&Rng::new(2).vec_f32(64 * 16), 64, 16, format).unwrap();
        let mut y: [f32; 0] = [];
        m.gemm(&[], 0, &mut y).unwrap();
        m.gemm_on(&Pool::new(2), &[], 0, &mut y).unwrap();
    }
}

/// One input quantized once serves every matrix of the same format and K
/// (q / k / v), bit for bit what `gemm` gives; matrices that read
/// activations another way, or another K, refuse it with an error.
#[test]
fn a_quantized_input_is_shared_by_matrices_that_read_it_alike() {
    use kgen::format::rng::Rng;
    let (k, n, m) = (256, 40, 3);
    let mats: Vec<Matrix> = (0..3)
        .map(|s| Matrix::from_f32(&Rng::new(s).vec_f32(k * n), k, n, "q4_0").unwrap())
        .collect();
    let x = Rng::new(9).vec_f32(m * k);
    for rows in [1, m] {
        let input = mats[0].quantize_input(&x[..rows * k], rows).unwrap();
        assert_eq!(input.rows(), rows);
        for w in &mats {
            assert!(w.accepts(&input));
            let (mut a, mut b) = (vec![0f32; rows * n], vec![0f32; rows * n]);
            w.gemm_input(&input, &mut a).unwrap();
            w.gemm(&x[..rows * k], rows, &mut b).unwrap();
            assert_eq!(a, b);
            assert!(w.gemm_input(&input, &mut vec![0f32; rows * n + 1]).is_err());
        }
    }
    let input = mats[0].quantize_input(&x, m).unwrap();
    let w8 = Matrix::from_f32(&Rng::new(4).vec_f32(k * n), k, n, "q8_0").unwrap();
    assert!(!w8.accepts(&input));
    assert!(w8.gemm_input(&input, &mut vec![0f32; m * n]).is_err());
    let wk = Matrix::from_f32(&Rng::new(4).vec_f32(2 * k * n), 2 * k, n, "q4_0").unwrap();
    assert!(!wk.accepts(&input));
    assert!(wk.gemm_input(&input, &mut vec![0f32; m * n]).is_err());
    let g = Matrix::from_f32(&Rng::new(5).vec_f32(k * n), k, n, "4:128").unwrap();
    assert!(!g.accepts(&input));
    let gi = g.quantize_input(&x, m).unwrap();
    let (mut a, mut b) = (vec![0f32; m * n], vec![0f32; m * n]);
    g.gemm_input(&gi, &mut a).unwrap();
    g.gemm(&x, m, &mut b).unwrap();
    assert_eq!(a, b);
    assert!(mats[0].quantize_input(&x[1..], m).is_err());
}
