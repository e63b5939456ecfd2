//! The target files kgen ships, and loading targets by name or path: every
//! shipped file loads and validates with the ISA the planner, the runtime
//! build and the docs assume; `native` describes this machine; an unknown
//! name or unreadable path is an error naming the file.

#![cfg(feature = "codegen")]

use kgen::target::{self, Arch, Feature};

/// Targets the planner, the runtime build and the docs rely on.
const REQUIRED: &[&str] = &[
    "neoverse-n1",
    "neoverse-v1",
    "neoverse-v2",
    "cortex-a76",
    "apple-m1",
    "haswell",
    "skylake-avx512",
    "icelake-server",
    "alderlake",
    "zen3",
    "zen4",
    "zen5",
    "x86-64-v3",
    "x86-64-v4",
    "generic-x86_64",
    "generic-aarch64",
];

#[test]
fn every_shipped_target_loads_and_validates() {
    let all = target::load_all().unwrap_or_else(|e| panic!("{e}"));
    assert!(all.len() >= REQUIRED.len());
    let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "load_all is sorted by name");
    for t in &all {
        t.validate().unwrap_or_else(|e| panic!("{}: {e}", t.name));
        assert_eq!(&target::load(&t.name).unwrap_or_else(|e| panic!("{e}")), t);
        assert!(!t.description.is_empty(), "{} has no description", t.name);
        assert!(!t.summary().is_empty());
    }
}

#[test]
fn available_lists_required_targets_and_native() {
    let names = target::available();
    for want in REQUIRED {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
    assert_eq!(names.last().map(String::as_str), Some("native"));
}

#[test]
fn shipped_targets_have_the_agreed_isa() {
    let t = |n: &str| target::load(n).unwrap_or_else(|e| panic!("{e}"));
    let zen5 = t("zen5");
    for f in [
        Feature::Avx2,
        Feature::Fma,
        Feature::Avx512f,
        Feature::Avx512bw,
        Feature::Avx512vl,
        Feature::Avx512vnni,
        Feature::Avx512vbmi,
        Feature::Avx512vpopcntdq,
        Feature::Avx512bf16,
        Feature::Avxvnni,
    ] {
        assert!(zen5.has(f), "zen5 lacks {f:?}");
    }
    assert_eq!(
        (zen5.cache.l1d, zen5.cache.l2, zen5.cache.l3),
        (48 << 10, 1 << 20, 32 << 20)
    );
    assert_eq!((zen5.vector_bits, zen5.vector_registers), (512, 32));

    let zen4 = t("zen4");
    assert!(zen4.has(Feature::Avx512vnni) && zen4.has(Feature::Avx512bf16));
    assert_eq!((zen4.cache.l1d, zen4.vector_bits), (32 << 10, 512));

    let adl = t("alderlake");
    assert!(adl.has(Feature::Avxvnni) && !adl.has(Feature::Avx512f));
    assert_eq!((adl.vector_bits, adl.vector_registers), (256, 16));

    let v1 = t("neoverse-v1");
    assert!(v1.has(Feature::Sve) && v1.has(Feature::I8mm) && v1.has(Feature::Bf16));
    assert_eq!((v1.sve_vector_bits, v1.vector_bits), (Some(256), 256));

    let v2 = t("neoverse-v2");
    assert!(v2.has(Feature::Sve2) && v2.has(Feature::I8mm) && v2.has(Feature::Dotprod));
    assert_eq!(v2.sve_vector_bits, Some(128));

    for n in ["neoverse-n1", "cortex-a76", "apple-m1"] {
        let a = t(n);
        assert!(
            a.has(Feature::Dotprod) && !a.has(Feature::I8mm) && !a.has(Feature::Sve),
            "{n}"
        );
    }
    assert_eq!(t("apple-m1").cache.l1d, 128 << 10);

    let v3 = t("x86-64-v3");
    assert!(v3.has(Feature::Avx2) && v3.has(Feature::Fma) && !v3.has(Feature::Avx512f));
    assert_eq!((v3.vector_registers, v3.cache.l1d), (16, 32 << 10));
    let v4 = t("x86-64-v4");
    assert!(v4.has(Feature::Avx512f) && v4.has(Feature::Avx512bw) && v4.has(Feature::Avx512vl));
    assert_eq!((v4.vector_registers, v4.cache.l1d), (32, 48 << 10));
    let gx = t("generic-x86_64");
    assert_eq!(
        (gx.features.as_slice(), gx.vector_registers),
        ([Feature::Sse42].as_slice(), 16)
    );
    let ga = t("generic-aarch64");
    assert_eq!(
        (ga.features.as_slice(), ga.vector_registers, ga.cache.l1d),
        ([Feature::Neon].as_slice(), 32, 64 << 10)
    );
    for n in REQUIRED {
        let d = t(n);
        let arm = n.contains("neoverse")
            || n.contains("cortex")
            || n.contains("apple")
            || n.contains("aarch64");
        assert_eq!(
            d.arch,
            if arm { Arch::Aarch64 } else { Arch::X86_64 },
            "{n}"
        );
    }
}

#[test]
fn native_loads_and_validates() {
    let t = target::load("native").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.name, "native");
    t.validate().unwrap_or_else(|e| panic!("{e}"));
    assert!(!t.description.is_empty());
    assert_eq!(t.description, kgen::target::native::cpu_model());
    #[cfg(target_arch = "x86_64")]
    assert_eq!(t.arch, Arch::X86_64);
    #[cfg(target_arch = "aarch64")]
    assert_eq!(t.arch, Arch::Aarch64);
}

#[test]
fn unknown_target_name_lists_available_ones() {
    let err = target::load("no-such-cpu").unwrap_err();
    assert!(
        err.message.contains("unknown target `no-such-cpu`"),
        "{err}"
    );
    assert!(
        err.message.contains("zen5") && err.message.contains("native"),
        "{err}"
    );
    assert_eq!(err.file, target::targets_dir().join("no-such-cpu.toml"));
}

#[test]
fn unreadable_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("absent.toml");
    let err = target::load(file.to_str().unwrap()).unwrap_err();
    assert_eq!(err.file, file);
    assert_eq!((err.line, err.key.as_deref()), (None, None));
    assert!(err.message.contains("cannot read"), "{err}");
}
