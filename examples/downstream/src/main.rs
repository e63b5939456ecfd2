//! Runs the kernels this crate's `build.rs` generated, checks them against the
//! f64 reference and exits non-zero if any check fails.

// Defines `fn kernels()` (both kernel families) from the build's output.
kgen_runtime::include_kernels!();

fn main() {
    let registry = kgen_runtime::Registry::new(kernels());
    let runnable = registry.all().iter().filter(|e| (e.detect)()).count();
    println!(
        "kgen-downstream-example: {} kernels compiled in, {runnable} runnable on this CPU{}",
        registry.all().len(),
        match std::env::var(kgen_runtime::FORCE_ISA_ENV) {
            Ok(isa) if !isa.is_empty() => format!(" ({}={isa})", kgen_runtime::FORCE_ISA_ENV),
            _ => String::new(),
        }
    );
    let checks = match kgen_downstream_example::check_all(&registry) {
        Ok(checks) => checks,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    for c in &checks {
        println!("{c}");
    }
    if checks.iter().all(|c| c.passed()) {
        println!("PASS");
    } else {
        println!("FAIL");
        std::process::exit(1);
    }
}
