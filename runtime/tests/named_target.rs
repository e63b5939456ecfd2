//! A build for one named CPU target (`KGEN_TARGETS=<name>,<portable fallback>`)
//! runs that target's own kernels, not the family ones. With
//! `KGEN_EXPECT_TARGET=<name>` set at run time:
//!
//! - every registry entry, f32 and int8, comes from `<name>` or is a
//!   `portable` kernel of the fallback target (`KGEN_EXPECT_FALLBACK`, default
//!   `generic-aarch64-portable` / `generic-x86_64`);
//! - `<name>` contributes SIMD (non-portable) kernels for 2-, 3- and 4-bit
//!   weights and for Q4_0 and Q8_0, and default dispatch picks them on this
//!   CPU (so the CPU, e.g. the qemu model, has the features they need);
//! - each of `<name>`'s kernels is run against the oracle over ragged shapes,
//!   row counts and both block orders, and the runs are counted per format:
//!   a format with none fails (every int8 format of the build, IQ4_NL and
//!   Q5_0 included, counts).
//!
//! Run by `scripts/test-arm-targets.sh` under qemu-user; without the variable
//! the tests only say they were skipped.

mod common;

use common::{check, group_of, I8_SHAPES, ROWS, SHAPES};
use kgen::format::gptq::random_gptq;
use kgen::format::rng::Rng;
use kgen::format::symmetric::quantize_symmetric;
use kgen_runtime::{Family, KernelEntry, Matrix, Op, Pool, Registry, WeightFormat};
use std::collections::BTreeMap;

/// The named target the build is expected to hold (run-time variable).
const EXPECT_ENV: &str = "KGEN_EXPECT_TARGET";
/// The portable fallback target built next to it.
const FALLBACK_ENV: &str = "KGEN_EXPECT_FALLBACK";
/// f32-family weight bits the named target must cover.
const F32_BITS: &[u32] = &[2, 3, 4];
/// int8-family weight bits (Q4_0, Q8_0) it must cover.
const I8_BITS: &[u32] = &[4, 8];

struct Expect {
    target: String,
    fallback: String,
}

fn expect() -> Option<Expect> {
    let target = std::env::var(EXPECT_ENV).ok().filter(|s| !s.is_empty())?;
    let default_fallback = if cfg!(target_arch = "aarch64") {
        "generic-aarch64-portable"
    } else {
        "generic-x86_64"
    };
    let fallback = std::env::var(FALLBACK_ENV)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| default_fallback.to_string());
    // The build must have been made for it (guards against a stale build).
    let built = option_env!("KGEN_TARGETS").unwrap_or("");
    assert!(
        built.split(',').any(|t| t.trim() == target),
        "{EXPECT_ENV}={target}, but the runtime was built with KGEN_TARGETS=`{built}`"
    );
    Some(Expect { target, fallback })
}

/// The named target's GEMM kernel reading `gemv`'s layout (either family).
fn gemm_partner(reg: &Registry, gemv: &KernelEntry) -> KernelEntry {
    let format = gemv.weight_format().unwrap();
    reg.runnable(format, Op::Gemm)
        .into_iter()
        .find(|e| e.target == gemv.target && e.isa == gemv.isa && e.same_layout(gemv))
        .unwrap_or_else(|| {
            panic!(
                "{}: no runnable GEMM kernel of its target and layout",
                gemv.name
            )
        })
}

#[test]
fn registry_holds_only_the_named_target_and_the_fallback() {
    let Some(x) = expect() else {
        eprintln!("{EXPECT_ENV} not set: skipped");
        return;
    };
    let reg = Registry::builtin();
    let from = |target: &str, isa: &str, name: &str| {
        assert!(
            target == x.target || (target == x.fallback && isa == "portable"),
            "{name}: from target `{target}` ({isa}); expected `{}` or the portable kernels of `{}`",
            x.target,
            x.fallback
        );
    };
    for e in reg.all() {
        from(e.target, e.isa, e.name);
    }
    // The named target's own SIMD kernels, for every required format.
    let named = |e: &&KernelEntry| e.target == x.target && e.isa != "portable";
    for &bits in F32_BITS {
        assert!(
            reg.all()
                .iter()
                .filter(named)
                .any(|e| e.family() == Family::F32 && e.bits == bits),
            "no {bits}-bit kernel of `{}` in the build (KGEN_SPECS must list {bits}-bit formats)",
            x.target
        );
    }
    for &bits in I8_BITS {
        assert!(
            reg.all()
                .iter()
                .filter(named)
                .any(|e| e.format == format!("q{bits}_0")),
            "no q{bits}_0 kernel of `{}` in the build",
            x.target
        );
    }
    // Default dispatch picks them on this CPU, for every f32 format of the
    // build and Q4_0 / Q8_0.
    let formats = reg
        .formats()
        .into_iter()
        .filter(|f| f.family() == Family::F32)
        .chain([WeightFormat::Q4_0, WeightFormat::Q8_0]);
    for format in formats {
        let (gemv, gemm) = reg.with_isa(None).select_pair(format).unwrap();
        for k in [gemv, gemm] {
            assert_eq!(
                k.target, x.target,
                "{format}: dispatch picked {} ({}) for this CPU",
                k.name, k.isa
            );
        }
    }
}

#[test]
fn named_target_kernels_match_the_oracle() {
    let Some(x) = expect() else {
        eprintln!("{EXPECT_ENV} not set: skipped");
        return;
    };
    let reg = Registry::builtin();
    let pool = Pool::new(1);
    // Oracle runs per format, and the kernels that made them.
    let mut runs: BTreeMap<String, (usize, Vec<&str>)> = BTreeMap::new();
    let gemvs = reg.all().iter().filter(|e| {
        e.family() == Family::F32 && e.target == x.target && !e.gemm && e.isa != "portable"
    });
    for gemv in gemvs {
        assert!(
            (gemv.detect)(),
            "{}: this CPU lacks {:?}",
            gemv.name,
            gemv.features
        );
        let gemm = gemm_partner(reg, gemv);
        let group = group_of(gemv.f32().unwrap().group);
        let entry = runs.entry(gemv.format.to_string()).or_default();
        entry.1.extend([gemv.name, gemm.name]);
        for (si, &(k, n)) in SHAPES.iter().enumerate() {
            let w = random_gptq(
                k,
                n,
                gemv.bits,
                group,
                17 + si as u64 * 31 + gemv.bits as u64,
            );
            let mut qm = Matrix::from_gptq_kernels(&w, *gemv, gemm).unwrap();
            for zcurve in [false, true] {
                qm.set_zcurve(zcurve);
                for &rows in ROWS {
                    let xs = Rng::new(k as u64 * 7 + rows as u64).vec_f32(rows * k);
                    let mut y = vec![f32::NAN; rows * n];
                    qm.gemm_on(&pool, &xs, rows, &mut y).unwrap();
                    let what = format!(
                        "{} / {} {k}x{n} rows {rows} zcurve {zcurve}",
                        gemv.name, gemm.name
                    );
                    check(&w, &xs, rows, &y, &what);
                    entry.0 += 1;
                }
            }
        }
    }
    let gemvs_i8 = reg.all().iter().filter(|e| {
        e.family() == Family::Int8 && e.target == x.target && !e.gemm && e.isa != "portable"
    });
    for gemv in gemvs_i8 {
        assert!(
            (gemv.detect)(),
            "{}: this CPU lacks {:?}",
            gemv.name,
            gemv.features
        );
        let gemm = gemm_partner(reg, gemv);
        let entry = runs.entry(gemv.format.to_string()).or_default();
        entry.1.extend([gemv.name, gemm.name]);
        let bv = kgen::format::by_tag(gemv.format).map_or(32, |f| f.block);
        for (si, &(k, n)) in I8_SHAPES.iter().enumerate() {
            // K-quants: whole 256-value super-blocks.
            let k = k.div_ceil(bv) * bv;
            let wf = Rng::new(40 + si as u64).vec_f32(k * n);
            let w = if matches!(gemv.format, "q4_0" | "q8_0") {
                quantize_symmetric(&wf, k, n, gemv.bits, 32)
            } else {
                let dtype =
                    kgen::format::ggml::GgmlType(kgen::format::by_tag(gemv.format).unwrap());
                kgen::format::ggml::GgmlMatrix::quantize(&wf, k, n, dtype)
            };
            let qm = Matrix::from_ggml_kernels(&w, *gemv, gemm).unwrap();
            for &m in ROWS {
                let xs = Rng::new(k as u64 + m as u64).vec_f32(m * k);
                let mut y = vec![f32::NAN; m * n];
                qm.gemm_on(&pool, &xs, m, &mut y).unwrap();
                let what = format!("{} / {} {k}x{n} rows {m}", gemv.name, gemm.name);
                let int = common::int_scales_of(qm.gemm_kernel());
                common::check_i8_with(&w, &xs, k, m, &y, &what, int);
                entry.0 += 1;
            }
        }
    }
    let required = F32_BITS
        .iter()
        .map(|b| (format!("{b}:"), format!("{b}-bit")))
        .chain(
            I8_BITS
                .iter()
                .map(|b| (format!("q{b}_0"), format!("q{b}_0"))),
        )
        // And every other int8 format the build holds (IQ4_NL, Q5_0, ...).
        .chain(
            reg.all()
                .iter()
                .filter(|e| e.int8().is_some())
                .map(|e| e.format)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .map(|f| (f.to_string(), f.to_string())),
        );
    for (prefix, what) in required {
        let n: usize = runs
            .iter()
            .filter(|(f, _)| f.starts_with(&prefix))
            .map(|(_, (n, _))| n)
            .sum();
        assert!(n > 0, "no oracle run of a {what} kernel of `{}`", x.target);
    }
    let total: usize = runs.values().map(|(n, _)| n).sum();
    for (format, (n, kernels)) in &runs {
        eprintln!(
            "{}: {format}: {n} oracle runs of {}",
            x.target,
            kernels.join(", ")
        );
    }
    eprintln!(
        "{}: {} kernels, {total} oracle runs, all from target `{}`",
        x.target,
        runs.values().map(|(_, k)| k.len()).sum::<usize>(),
        x.target
    );
}
