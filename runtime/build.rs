//! Generates the runtime's built-in kernels into OUT_DIR.
//!
//! Which formats: `KGEN_SPECS` (e.g. `4:32,4:128,3:col,q4_0,q8_0`, or `all`),
//! default below.
//! Which CPUs: `KGEN_TARGETS` (target names), default every ISA family of
//! the architecture being built for. Nothing here times or fetches anything.

use kgen::build::Formats;
use kgen::spec::Group;

/// f32-family formats built by default.
const DEFAULT_F32: &[(u32, Group)] = &[
    (4, Group::Size(32)),
    (4, Group::Size(128)),
    (3, Group::Size(128)),
    (2, Group::Size(32)),
    (8, Group::Size(128)),
    (4, Group::Column),
];

/// Target OSes whose libc has `CLOCK_THREAD_CPUTIME_ID` (the pool's thread
/// CPU clock), named once here as the `thread_cpu_clock` cfg; Apple targets
/// by vendor.
const THREAD_CPU_CLOCK_OS: &[&str] = &[
    "linux",
    "android",
    "freebsd",
    "netbsd",
    "openbsd",
    "dragonfly",
    "illumos",
    "solaris",
];

fn main() {
    println!("cargo:rustc-check-cfg=cfg(thread_cpu_clock)");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let vendor = std::env::var("CARGO_CFG_TARGET_VENDOR").unwrap_or_default();
    if vendor == "apple" || THREAD_CPU_CLOCK_OS.contains(&os.as_str()) {
        println!("cargo:rustc-cfg=thread_cpu_clock");
    }
    // Plus the int8-activation family: every format of the table it runs.
    let defaults = Formats {
        f32: DEFAULT_F32.to_vec(),
        int8: kgen::build::int8_format_tags()
            .into_iter()
            .map(String::from)
            .collect(),
    };
    let config = kgen::build::Config::from_env(&defaults)
        .unwrap_or_else(|e| panic!("kgen build configuration: {e}"))
        .runtime_path("crate");
    if let Err(e) = config.generate() {
        panic!("kgen kernel generation failed: {e}");
    }
}
