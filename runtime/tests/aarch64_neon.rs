//! The default aarch64 build carries NEON kernels and the portable fallback,
//! and dispatch prefers NEON (which every aarch64 CPU has). Run under qemu by
//! `scripts/test-aarch64.sh`; empty on other architectures.

#![cfg(target_arch = "aarch64")]

mod common;

use common::sve_vector_bits;
use kgen_runtime::{Family, Matrix, Op, Registry, WeightFormat};

/// A build with `KGEN_TARGETS` set holds whatever it names.
fn default_build() -> bool {
    option_env!("KGEN_TARGETS").is_none()
}

#[test]
fn neon_first_then_portable_for_every_format() {
    if !default_build() {
        eprintln!("KGEN_TARGETS set at build time: skipped");
        return;
    }
    assert!(std::arch::is_aarch64_feature_detected!("neon"));
    let reg = Registry::builtin();
    let formats: Vec<WeightFormat> = reg
        .formats()
        .into_iter()
        .filter(|f| f.family() == Family::F32)
        .collect();
    assert!(!formats.is_empty());
    for format in formats {
        for op in [Op::Gemv, Op::Gemm] {
            // 4-bit GPTQ also runs on the int8 family's kernels, when
            // asked for: the f32 family's own list here.
            let runnable = reg.with_family(Some(Family::F32)).runnable(format, op);
            let isas: Vec<&str> = runnable.iter().map(|e| e.isa).collect();
            assert_eq!(isas, ["neon", "portable"], "{format} {op:?}");
            let neon = &runnable[0];
            assert_eq!(
                (neon.target, neon.features, neon.lanes),
                ("generic-aarch64", &["neon"][..], 4),
                "{}",
                neon.name
            );
            assert!(neon.name.ends_with("__neon"), "{}", neon.name);
            let portable = &runnable[1];
            assert_eq!(portable.target, "generic-aarch64-portable");
            assert!(portable.features.is_empty());
        }
        let f32 = reg.with_isa(None).with_family(Some(Family::F32));
        let (gemv, gemm) = f32.select_pair(format).unwrap();
        assert_eq!((gemv.isa, gemm.isa), ("neon", "neon"));
        // Unasked, 4- and 8-bit GPTQ go to the int8 family where it has
        // SIMD (sdot / smmla) here, every other f32 format stays on NEON.
        let (gemv, _) = reg.with_isa(None).select_pair(format).unwrap();
        let int8_simd =
            format.families().len() > 1 && common::int8_has_simd(&reg.with_isa(None), format);
        if int8_simd {
            assert_eq!(gemv.family(), Family::Int8, "{format}");
        } else {
            assert_eq!(gemv.isa, "neon", "{format}");
        }
    }
}

/// The int8 family on aarch64: smmla kernels exactly when the CPU has
/// i8mm (qemu `-cpu max`), sdot ones when it has dotprod (`neoverse-n1`:
/// no i8mm), the portable ones otherwise (`cortex-a57`), and never an
/// instruction the CPU lacks: forcing a missing ISA is an error.
#[test]
fn int8_kernels_run_exactly_where_their_features_exist() {
    if option_env!("KGEN_TARGETS").is_some() {
        return;
    }
    let reg = kgen_runtime::Registry::builtin();
    let dotprod = std::arch::is_aarch64_feature_detected!("dotprod");
    let i8mm = dotprod && std::arch::is_aarch64_feature_detected!("i8mm");
    for format in kgen::format::int8_formats().map(|f| f.tag) {
        let bits = if format == "q8_0" { 8 } else { 4 };
        if !common::i8_format_built(format) {
            continue;
        }
        let wformat: WeightFormat = format.parse().unwrap();
        let isas: Vec<&str> = reg
            .runnable(wformat, Op::Gemv)
            .iter()
            .map(|e| e.isa)
            .collect();
        let mut want: Vec<&str> = match (i8mm, dotprod) {
            (true, _) => vec!["i8mm", "dotprod", "portable"],
            (false, true) => vec!["dotprod", "portable"],
            _ => vec!["portable"],
        };
        // 256-bit SVE (qemu `-cpu max,sve256=on`) adds sve256 below i8mm
        // for Q4_0, Q8_0 and kgen's `q4_0_g128` only (no sve256 codebook,
        // 5-bit, min or half-block kernels: the others fall back).
        if sve_vector_bits() == Some(256) && matches!(format, "q4_0" | "q8_0" | "q4_0_g128") {
            want.insert(usize::from(i8mm), "sve256");
        }
        // 1-bit levels have no pair layout: no i8mm kernels, dotprod runs
        // them on i8mm CPUs.
        let one_bit = kgen::format::by_tag(format)
            .and_then(|f| f.int8)
            .is_some_and(|r| r.layout_bits == 1);
        if one_bit {
            want.retain(|&i| i != "i8mm");
        }
        assert_eq!(isas, want, "{format}");
        // K = 256: whole super-blocks of the K-quants.
        let wf = kgen::format::rng::Rng::new(1).vec_f32(256 * 8);
        let w = if matches!(format, "q4_0" | "q8_0") {
            kgen::format::symmetric::quantize_symmetric(&wf, 256, 8, bits, 32)
        } else {
            let dtype = kgen::format::ggml::GgmlType(kgen::format::by_tag(format).unwrap());
            kgen::format::ggml::GgmlMatrix::quantize(&wf, 256, 8, dtype)
        };
        let m = Matrix::from_ggml_with(&reg.with_isa(None), &w).unwrap();
        assert_eq!(m.gemv_kernel().isa, want[0]);
        assert_eq!(m.gemm_kernel().isa, want[0]);
        for (isa, has) in [("i8mm", i8mm && !one_bit), ("dotprod", dotprod)] {
            let forced = Matrix::from_ggml_with(&reg.with_isa(Some(isa)), &w);
            assert_eq!(
                forced.is_ok(),
                has,
                "{format}: forcing {isa} must fail exactly when the CPU lacks it (or it has no kernel)"
            );
        }
        if i8mm && !one_bit {
            // The smmla GEMM reads row-paired activations; the GEMV does not.
            let g = reg
                .runnable(wformat, Op::Gemm)
                .into_iter()
                .find(|e| e.isa == "i8mm")
                .unwrap();
            let p = g.int8().unwrap();
            assert!(p.row_pairs && p.group_bytes == 8 && g.name.contains("gemm"));
        }
    }
}
