//! The SVE int8 kernels (`sve256`) are written for 256-bit vectors: dispatch
//! must select them exactly where SVE is present with that vector length
//! (qemu `-cpu max,sve256=on`) and never elsewhere (`-cpu max,sve128=on`,
//! plain `max` at its default length, CPUs without SVE), where forcing them
//! is an error rather than a SIGILL or wrong results. Where they run, they
//! must agree bit for bit with the 128-bit sdot kernels (same integer block
//! sums, same f32 fold in the same order). Run under qemu by
//! `scripts/test-sve.sh`; empty on other architectures.

#![cfg(target_arch = "aarch64")]

mod common;

use common::sve_vector_bits;
use kgen::format::rng::Rng;
use kgen::format::symmetric::quantize_symmetric;
use kgen_runtime::{Matrix, Op, Pool, Registry, WeightFormat};

#[test]
fn sve256_is_selected_exactly_at_256_bit_sve() {
    if option_env!("KGEN_TARGETS").is_some() {
        eprintln!("KGEN_TARGETS set at build time: skipped");
        return;
    }
    let vl = sve_vector_bits();
    let here = vl == Some(256);
    let i8mm = std::arch::is_aarch64_feature_detected!("i8mm")
        && std::arch::is_aarch64_feature_detected!("dotprod");
    eprintln!("SVE vector length {vl:?}: sve256 expected {here}");
    let reg = Registry::builtin();
    for bits in [4u32, 8] {
        let format = WeightFormat::symmetric(bits, 32).unwrap();
        for gemm in [false, true] {
            let compiled: Vec<_> = reg
                .all()
                .iter()
                .filter(|e| e.isa == "sve256" && e.format == format.to_string() && e.gemm == gemm)
                .collect();
            assert_eq!(
                compiled.len(),
                1,
                "q{bits}_0 gemm {gemm}: one sve256 kernel"
            );
            let e = compiled[0];
            // The lane layout: 8 columns per 256-bit vector, one i32 lane
            // each, 4-byte groups, signed nibbles.
            let p = e.int8().unwrap();
            assert_eq!(
                (e.lanes, p.group_bytes, p.signed, p.row_pairs),
                (8, 4, bits == 4, false),
                "{}",
                e.name
            );
            assert_eq!(e.target, "generic-aarch64-sve256");
            assert_eq!((e.detect)(), here, "{}", e.name);
            let op = if gemm { Op::Gemm } else { Op::Gemv };
            let runnable = reg.runnable(format, op);
            assert_eq!(
                runnable.iter().any(|e| e.isa == "sve256"),
                here,
                "q{bits}_0 gemm {gemm}"
            );
        }
        let w = quantize_symmetric(&Rng::new(1).vec_f32(64 * 8), 64, 8, bits, 32);
        let forced = Matrix::from_ggml_with(&reg.with_isa(Some("sve256")), &w);
        assert_eq!(
            forced.is_ok(),
            here,
            "forcing sve256 must fail exactly where the vector length is not 256"
        );
        let best = Matrix::from_ggml_with(&reg.with_isa(None), &w).unwrap();
        if here {
            // i8mm ranks above sve256 (see kgen::family::int8::isa::I8_FAMILY).
            let want = if i8mm { "i8mm" } else { "sve256" };
            assert_eq!(best.gemv_kernel().isa, want);
        } else {
            assert_ne!(best.gemv_kernel().isa, "sve256");
            assert_ne!(best.gemm_kernel().isa, "sve256");
        }
    }
}

/// The codebook formats (IQ4_NL, MXFP4, the lattice i-quants) and Q5_0 have
/// no sve256 kernels (the asm emitter has no table lookup and no 5-bit
/// unpack): at any vector length they run on i8mm or
/// dotprod, and forcing sve256 is an error, never a wrong kernel. The
/// kernels they fall back to match the oracle here (at 256-bit SVE too).
#[test]
fn iq4_nl_and_q5_0_fall_back_from_sve256() {
    if option_env!("KGEN_TARGETS").is_some() {
        return;
    }
    let reg = Registry::builtin();
    for format in [
        "iq4_nl", "mxfp4", "q5_0", "iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs",
        "iq3_s",
    ] {
        if !common::i8_format_built(format) {
            continue;
        }
        assert!(!reg
            .all()
            .iter()
            .any(|e| e.format == format && e.isa == "sve256"));
        let dtype = kgen::format::ggml::GgmlType(kgen::format::by_tag(format).unwrap());
        let k = 96usize.next_multiple_of(dtype.block_values());
        let wf = Rng::new(3).vec_f32(k * 40);
        let w = kgen::format::ggml::GgmlMatrix::quantize(&wf, k, 40, dtype);
        let e = Matrix::from_ggml_with(&reg.with_isa(Some("sve256")), &w).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("no sve256 {format} kernel")),
            "{e}"
        );
        let best = Matrix::from_ggml_with(&reg.with_isa(None), &w).unwrap();
        let dotprod = std::arch::is_aarch64_feature_detected!("dotprod");
        let i8mm = dotprod && std::arch::is_aarch64_feature_detected!("i8mm");
        let want = match (i8mm, dotprod) {
            (true, _) => "i8mm",
            (false, true) => "dotprod",
            _ => "portable",
        };
        assert_eq!(best.gemv_kernel().isa, want, "{format}");
        assert_eq!(best.gemm_kernel().isa, want, "{format}");
        for m in [1usize, 2, 5, 9] {
            let x = Rng::new(m as u64).vec_f32(m * k);
            let mut y = vec![f32::NAN; m * 40];
            best.gemm(&x, m, &mut y).unwrap();
            common::check_i8(&w, &x, k, m, &y, &format!("{format} {want} rows {m}"));
        }
    }
}

/// sve256 and dotprod compute the same integer block sums and fold them
/// with the same f32 operations in the same order: identical bits.
#[test]
fn sve256_matches_dotprod_bit_for_bit() {
    if option_env!("KGEN_TARGETS").is_some() || sve_vector_bits() != Some(256) {
        eprintln!("no 256-bit SVE here: skipped");
        return;
    }
    let reg = Registry::builtin();
    let pool = Pool::new(2);
    let mut runs = 0;
    for bits in [4u32, 8] {
        for &(k, n) in &[(32, 9), (96, 40), (544, 77), (2048, 129)] {
            let w = quantize_symmetric(
                &Rng::new(k as u64 + n as u64).vec_f32(k * n),
                k,
                n,
                bits,
                32,
            );
            let sve = Matrix::from_ggml_with(&reg.with_isa(Some("sve256")), &w).unwrap();
            let dot = Matrix::from_ggml_with(&reg.with_isa(Some("dotprod")), &w).unwrap();
            for m in [1usize, 2, 3, 4, 5, 6, 7, 8, 11, 17] {
                let x = Rng::new(7 * m as u64 + k as u64).vec_f32(m * k);
                let (mut ys, mut yd) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
                sve.gemm_on(&pool, &x, m, &mut ys).unwrap();
                dot.gemm_on(&pool, &x, m, &mut yd).unwrap();
                for (i, (a, b)) in ys.iter().zip(&yd).enumerate() {
                    assert!(
                        a.to_bits() == b.to_bits(),
                        "q{bits}_0 {k}x{n} rows {m} ({} / {}): y[{i}] = {a} vs dotprod {b}",
                        sve.gemv_kernel().name,
                        sve.gemm_kernel().name
                    );
                }
                runs += 1;
            }
        }
    }
    eprintln!("{runs} sve256 runs identical to dotprod");
}
