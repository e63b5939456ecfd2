//! Generates the runtime's built-in kernels into OUT_DIR.
//!
//! Which formats: `KGEN_SPECS` (e.g. `4:32,4:128,3:col`), default below.
//! Which CPUs: `KGEN_TARGETS` (target names), default every ISA family of
//! the architecture being built for. Nothing here times or fetches anything.

use kgen::spec::Group;

const DEFAULT_SPECS: &[(u32, Group)] = &[
    (4, Group::Size(32)),
    (4, Group::Size(128)),
    (3, Group::Size(128)),
    (2, Group::Size(32)),
    (8, Group::Size(128)),
    (4, Group::Column),
];

fn main() {
    let config = kgen::build::Config::from_env(DEFAULT_SPECS)
        .unwrap_or_else(|e| panic!("kgen build configuration: {e}"))
        .runtime_path("crate");
    if let Err(e) = config.generate() {
        panic!("kgen kernel generation failed: {e}");
    }
}
