//! The checks, in process and through the binary.

use kgen_runtime::Family;
use std::process::Command;

// Defines `fn kernels()` (both families) from the build's output.
kgen_runtime::include_kernels!();

const BIN: &str = env!("CARGO_BIN_EXE_kgen-downstream-example");

#[test]
fn every_generated_format_matches_the_reference() {
    let registry = kgen_runtime::Registry::new(kernels());
    let checks = kgen_downstream_example::check_all(&registry).unwrap();
    assert_eq!(checks.len(), 3);
    for c in &checks {
        assert!(c.passed(), "{c}");
    }
    let families: Vec<Family> = checks.iter().map(|c| c.family).collect();
    assert_eq!(families, [Family::F32, Family::F32, Family::Int8]);
}

#[test]
fn the_build_generated_exactly_the_three_formats() {
    let mut formats: Vec<&str> = kernels().iter().map(|e| e.format).collect();
    formats.sort();
    formats.dedup();
    assert_eq!(formats, ["3:col", "4:128", "q4_0"]);
    let registry = kgen_runtime::Registry::new(kernels());
    let families: Vec<Family> = registry.formats().iter().map(|f| f.family()).collect();
    assert_eq!(families, [Family::F32, Family::F32, Family::Int8]);
}

fn run(force_isa: Option<&str>) -> String {
    let mut cmd = Command::new(BIN);
    match force_isa {
        Some(isa) => cmd.env(kgen_runtime::FORCE_ISA_ENV, isa),
        None => cmd.env_remove(kgen_runtime::FORCE_ISA_ENV),
    };
    let out = cmd.output().expect("run the example binary");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn binary_forced_to_portable_runs_portable_kernels_and_passes() {
    let out = run(Some("portable"));
    let kernel_lines: Vec<&str> = out.lines().filter(|l| l.contains("kernel ")).collect();
    assert_eq!(kernel_lines.len(), 6, "{out}");
    for l in kernel_lines {
        assert!(
            l.contains("__portable"),
            "not a portable kernel: {l}\n{out}"
        );
    }
    assert_eq!(out.lines().last(), Some("PASS"), "{out}");
}

#[test]
fn binary_passes_with_the_best_kernels() {
    let out = run(None);
    assert!(out.contains("kernel "), "{out}");
    assert_eq!(out.lines().last(), Some("PASS"), "{out}");
}
