//! The checks, in process and through the binary.

use std::process::Command;

// Defines `fn kernels()` (and `kernels_i8()`) from the build's output.
kgen_runtime::include_kernels!();

const BIN: &str = env!("CARGO_BIN_EXE_kgen-downstream-example");

#[test]
fn both_generated_formats_match_the_reference() {
    let registry = kgen_runtime::Registry::new(kernels());
    let checks = kgen_downstream_example::check_all(&registry).unwrap();
    assert_eq!(checks.len(), 2);
    for c in &checks {
        assert!(c.passed(), "{c}");
    }
}

#[test]
fn the_build_generated_exactly_the_two_formats() {
    let mut formats: Vec<(u32, usize)> = kernels().iter().map(|e| (e.bits, e.group)).collect();
    formats.sort();
    formats.dedup();
    assert_eq!(formats, vec![(3, 0), (4, 128)]);
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
    assert_eq!(kernel_lines.len(), 4, "{out}");
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
