//! Target descriptions: every shipped file loads, and every kind of bad
//! input is reported with the right file, line and key.

#![cfg(feature = "codegen")]

use kgen::target::{self, Arch, Feature, TargetDesc, TargetError};
use std::path::{Path, PathBuf};

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

// Line numbers below are the real lines of these documents.
const X86: &str = r#"# A valid x86_64 test target; tests replace single lines.
name = "bad"
description = "test target"
arch = "x86_64"
features = ["sse42", "avx", "avx2", "fma"]
vector_bits = 256
vector_registers = 16

[cache]
l1d = 32768
l2 = 1048576
l3 = 33554432
line = 64

[core]
cores = 8
ghz = 3.0
fma_units = 2
dot_units = 2
vector_alu_units = 3
load_units = 2

[memory]
bandwidth_gbs = 60.0
bandwidth_per_core_gbs = 20.0
"#;

const ARM: &str = r#"# A valid aarch64 SVE test target; tests replace single lines.
name = "bad"
description = "test target"
arch = "aarch64"
features = ["neon", "dotprod", "i8mm", "sve", "bf16"]
vector_bits = 256
vector_registers = 32
sve_vector_bits = 256

[cache]
l1d = 65536
l2 = 1048576
l3 = 33554432
line = 64

[core]
cores = 64
ghz = 2.6
fma_units = 2
dot_units = 2
vector_alu_units = 2
load_units = 2

[memory]
bandwidth_gbs = 250.0
bandwidth_per_core_gbs = 30.0
"#;

/// `doc` with its 1-based lines replaced: `(line, text)`; an empty text
/// blanks the line, so every other line keeps its number.
fn edit(doc: &str, changes: &[(usize, &str)]) -> String {
    let mut lines: Vec<String> = doc.lines().map(str::to_string).collect();
    for (n, text) in changes {
        assert!(*n >= 1 && *n <= lines.len(), "no line {n}");
        lines[n - 1] = text.to_string();
    }
    lines.join("\n") + "\n"
}

/// Writes `doc` to `<tempdir>/bad.toml` and loads it through [`target::load`]
/// as a path, returning the error (the document must be rejected).
fn load_err(doc: &str) -> (TargetError, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, doc).expect("write");
    let err = match target::load(file.to_str().expect("utf-8 temp path")) {
        Ok(t) => panic!("accepted a bad target:\n{doc}\n=> {t:#?}"),
        Err(e) => e,
    };
    (err, file, dir)
}

/// Asserts `doc` is rejected at `line` (None: no line to point at) on `key`,
/// with a message containing `needle`.
fn rejects(doc: &str, line: Option<usize>, key: &str, needle: &str) {
    let (err, file, _dir) = load_err(doc);
    assert_eq!(err.file, file, "file of {err}");
    assert_eq!(err.key.as_deref(), Some(key), "key of {err}");
    assert_eq!(err.line, line, "line of {err}");
    assert!(
        err.message.contains(needle),
        "message of `{err}` lacks `{needle}`"
    );
    // The one-line rendering names all three.
    let shown = err.to_string();
    let at = match line {
        Some(l) => format!("{}:{l}: key `{key}`: ", file.display()),
        None => format!("{}: key `{key}`: ", file.display()),
    };
    assert!(
        shown.starts_with(&at),
        "`{shown}` does not start with `{at}`"
    );
    assert!(!shown.contains('\n'), "multi-line error: {shown}");
}

fn parse_ok(doc: &str) -> TargetDesc {
    target::parse(doc, Path::new("bad.toml")).unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------
// Shipped targets.
// ---------------------------------------------------------------------------

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

#[test]
fn test_documents_are_valid() {
    assert_eq!(
        parse_ok(X86).features,
        [Feature::Sse42, Feature::Avx, Feature::Avx2, Feature::Fma]
    );
    assert_eq!(parse_ok(ARM).sve_vector_bits, Some(256));
    // Loading by path works for a good file too.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, X86).unwrap();
    assert_eq!(target::load(file.to_str().unwrap()).unwrap().name, "bad");
}

// ---------------------------------------------------------------------------
// TOML-level errors.
// ---------------------------------------------------------------------------

#[test]
fn syntax_error() {
    rejects(
        &edit(X86, &[(6, "vector_bits = = 256")]),
        Some(6),
        "vector_bits",
        "TOML syntax error",
    );
}

#[test]
fn syntax_error_duplicate_key() {
    rejects(
        &edit(X86, &[(8, "arch = \"x86_64\"")]),
        Some(8),
        "arch",
        "duplicate key",
    );
}

#[test]
fn wrong_type() {
    rejects(
        &edit(X86, &[(6, "vector_bits = \"wide\"")]),
        Some(6),
        "vector_bits",
        "invalid type",
    );
}

#[test]
fn wrong_type_in_a_table() {
    rejects(
        &edit(X86, &[(11, "l2 = \"1M\"")]),
        Some(11),
        "cache.l2",
        "invalid type",
    );
    rejects(
        &edit(X86, &[(17, "ghz = true")]),
        Some(17),
        "core.ghz",
        "invalid type",
    );
    rejects(&edit(X86, &[(11, "l2 = -1")]), Some(11), "cache.l2", "-1");
}

#[test]
fn unknown_key() {
    rejects(
        &edit(X86, &[(8, "turbo = true")]),
        Some(8),
        "turbo",
        "unknown key `turbo`",
    );
}

#[test]
fn unknown_key_in_a_table() {
    rejects(
        &edit(X86, &[(14, "l4 = 1")]),
        Some(14),
        "cache.l4",
        "unknown key `l4`, expected one of `l1d`",
    );
}

#[test]
fn unknown_feature() {
    let doc = edit(
        X86,
        &[(
            5,
            r#"features = ["sse42", "avx", "avx2", "fma", "avx9000"]"#,
        )],
    );
    rejects(
        &doc,
        Some(5),
        "features",
        "unknown feature `avx9000`, expected one of",
    );
}

#[test]
fn unknown_arch() {
    rejects(
        &edit(X86, &[(4, "arch = \"riscv64\"")]),
        Some(4),
        "arch",
        "riscv64",
    );
}

#[test]
fn missing_key() {
    rejects(&edit(X86, &[(6, "")]), None, "vector_bits", "missing");
}

#[test]
fn missing_key_in_a_table() {
    // Points at the `[cache]` header, where the key belongs.
    rejects(&edit(X86, &[(11, "")]), Some(9), "cache.l2", "missing");
    rejects(
        &edit(X86, &[(25, "")]),
        Some(23),
        "memory.bandwidth_per_core_gbs",
        "missing",
    );
}

#[test]
fn missing_table() {
    rejects(
        &edit(X86, &[(23, ""), (24, ""), (25, "")]),
        None,
        "memory",
        "missing",
    );
}

#[test]
fn inline_and_dotted_tables_resolve_keys() {
    let inline = edit(
        X86,
        &[
            (
                9,
                "cache = { l1d = 32768, l2 = 16384, l3 = 33554432, line = 64 }",
            ),
            (10, ""),
            (11, ""),
            (12, ""),
            (13, ""),
        ],
    );
    rejects(&inline, Some(9), "cache.l2", "must be larger than L1d");
    let inline_type = edit(
        X86,
        &[
            (
                9,
                "cache = { l1d = 32768, l2 = \"x\", l3 = 33554432, line = 64 }",
            ),
            (10, ""),
            (11, ""),
            (12, ""),
            (13, ""),
        ],
    );
    rejects(&inline_type, Some(9), "cache.l2", "invalid type");
    // Every table written as dotted keys at the top level.
    let dotted = r#"name = "bad"
description = "dotted"
arch = "x86_64"
features = ["sse42", "avx", "avx2", "fma"]
vector_bits = 256
vector_registers = 16
cache.l1d = 32768
cache.l2 = 1048576
cache.l3 = 33554432
cache.line = 64
core.cores = 8
core.ghz = 0.0
core.fma_units = 2
core.dot_units = 2
core.vector_alu_units = 3
core.load_units = 2
memory.bandwidth_gbs = 60.0
memory.bandwidth_per_core_gbs = 20.0
"#;
    rejects(dotted, Some(12), "core.ghz", "positive");
    rejects(
        &edit(dotted, &[(8, "cache.l2 = \"big\"")]),
        Some(8),
        "cache.l2",
        "invalid type",
    );
    rejects(
        &edit(dotted, &[(18, "")]),
        Some(17),
        "memory.bandwidth_per_core_gbs",
        "missing",
    );
    rejects(
        &edit(dotted, &[(8, "cache.l9 = 1")]),
        Some(8),
        "cache.l9",
        "unknown key `l9`",
    );
}

#[test]
fn syntax_error_in_a_table() {
    // A duplicate is not in the recovered table; the key comes off the text.
    rejects(
        &edit(X86, &[(14, "l2 = 5")]),
        Some(14),
        "cache.l2",
        "duplicate key",
    );
    rejects(
        &edit(X86, &[(18, "fma_units = ")]),
        Some(18),
        "core.fma_units",
        "TOML syntax error",
    );
    rejects(
        &edit(X86, &[(22, "[core]")]),
        Some(22),
        "core",
        "TOML syntax error",
    );
}

// ---------------------------------------------------------------------------
// Semantic rules.
// ---------------------------------------------------------------------------

#[test]
fn name_must_match_file_stem() {
    rejects(
        &edit(X86, &[(2, "name = \"zen5\"")]),
        Some(2),
        "name",
        "does not match the file name `bad.toml`",
    );
    // Without a .toml file name there is nothing to match.
    assert!(target::parse(&edit(X86, &[(2, "name = \"zen5\"")]), Path::new("<memory>")).is_ok());
}

#[test]
fn name_must_be_usable() {
    let err =
        target::parse(&edit(X86, &[(2, "name = \"a b\"")]), Path::new("<memory>")).unwrap_err();
    assert_eq!((err.line, err.key.as_deref()), (Some(2), Some("name")));
}

#[test]
fn x86_feature_on_aarch64() {
    let doc = edit(
        ARM,
        &[(
            5,
            r#"features = ["neon", "dotprod", "i8mm", "sve", "bf16", "avx2"]"#,
        )],
    );
    rejects(
        &doc,
        Some(5),
        "features",
        "avx2 is an x86_64 feature, but arch is aarch64",
    );
}

#[test]
fn aarch64_feature_on_x86() {
    let doc = edit(
        X86,
        &[(
            5,
            r#"features = ["sse42", "avx", "avx2", "fma", "dotprod"]"#,
        )],
    );
    rejects(
        &doc,
        Some(5),
        "features",
        "dotprod is an aarch64 feature, but arch is x86_64",
    );
}

#[test]
fn feature_listed_twice() {
    let doc = edit(
        X86,
        &[(5, r#"features = ["sse42", "avx", "avx2", "fma", "avx2"]"#)],
    );
    rejects(&doc, Some(5), "features", "avx2 is listed twice");
}

#[test]
fn i8mm_requires_neon() {
    let doc = edit(ARM, &[(5, r#"features = ["i8mm"]"#)]);
    rejects(&doc, Some(5), "features", "i8mm requires neon");
}

#[test]
fn dotprod_requires_neon() {
    let doc = edit(
        ARM,
        &[
            (5, r#"features = ["dotprod"]"#),
            (6, "vector_bits = 128"),
            (8, ""),
        ],
    );
    rejects(&doc, Some(5), "features", "dotprod requires neon");
}

#[test]
fn sve_requires_neon() {
    let doc = edit(ARM, &[(5, r#"features = ["sve"]"#)]);
    rejects(&doc, Some(5), "features", "sve requires neon");
}

#[test]
fn bf16_requires_neon() {
    let doc = edit(
        ARM,
        &[
            (5, r#"features = ["bf16"]"#),
            (6, "vector_bits = 128"),
            (8, ""),
        ],
    );
    rejects(&doc, Some(5), "features", "bf16 requires neon");
}

#[test]
fn sve2_requires_sve() {
    let doc = edit(ARM, &[(5, r#"features = ["neon", "sve2"]"#)]);
    rejects(&doc, Some(5), "features", "sve2 requires sve");
}

#[test]
fn sve_vector_bits_without_sve() {
    let doc = edit(
        ARM,
        &[
            (5, r#"features = ["neon", "dotprod"]"#),
            (6, "vector_bits = 128"),
        ],
    );
    rejects(&doc, Some(8), "sve_vector_bits", "does not list sve");
}

#[test]
fn sve_vector_bits_out_of_range() {
    for bad in ["200", "0", "64", "2176", "4096"] {
        let doc = edit(
            ARM,
            &[
                (6, &format!("vector_bits = {bad}")),
                (8, &format!("sve_vector_bits = {bad}")),
            ],
        );
        rejects(&doc, Some(8), "sve_vector_bits", "not an SVE vector length");
    }
    // The extremes are fine.
    for good in ["128", "2048"] {
        let doc = edit(
            ARM,
            &[
                (6, &format!("vector_bits = {good}")),
                (8, &format!("sve_vector_bits = {good}")),
            ],
        );
        parse_ok(&doc);
    }
}

#[test]
fn sve_without_sve_vector_bits() {
    rejects(
        &edit(ARM, &[(8, "")]),
        Some(5),
        "features",
        "sve requires `sve_vector_bits`",
    );
}

#[test]
fn avx2_requires_avx() {
    let doc = edit(X86, &[(5, r#"features = ["sse42", "avx2", "fma"]"#)]);
    rejects(&doc, Some(5), "features", "avx2 requires avx");
}

#[test]
fn avx512_extensions_require_avx512f() {
    for ext in [
        "avx512bw",
        "avx512vl",
        "avx512vnni",
        "avx512vbmi",
        "avx512vpopcntdq",
        "avx512bf16",
    ] {
        let doc = edit(
            X86,
            &[(
                5,
                &format!(r#"features = ["sse42", "avx", "avx2", "fma", "{ext}"]"#),
            )],
        );
        rejects(
            &doc,
            Some(5),
            "features",
            &format!("{ext} requires avx512f"),
        );
    }
}

#[test]
fn avx512f_requires_avx2_and_fma() {
    let doc = edit(
        X86,
        &[
            (5, r#"features = ["sse42", "avx", "avx512f"]"#),
            (6, "vector_bits = 512"),
            (7, "vector_registers = 32"),
        ],
    );
    rejects(&doc, Some(5), "features", "avx512f requires avx2 and fma");
    let doc = edit(
        X86,
        &[
            (5, r#"features = ["sse42", "avx", "avx2", "avx512f"]"#),
            (6, "vector_bits = 512"),
            (7, "vector_registers = 32"),
        ],
    );
    rejects(&doc, Some(5), "features", "avx512f requires fma");
}

#[test]
fn avxvnni_requires_avx2() {
    let doc = edit(X86, &[(5, r#"features = ["sse42", "avx", "avxvnni"]"#)]);
    rejects(&doc, Some(5), "features", "avxvnni requires avx2");
}

#[test]
fn vector_bits_must_match_features() {
    rejects(
        &edit(X86, &[(6, "vector_bits = 512")]),
        Some(6),
        "vector_bits",
        "must be 256",
    );
    let avx512 = edit(
        X86,
        &[
            (
                5,
                r#"features = ["sse42", "avx", "avx2", "fma", "avx512f"]"#,
            ),
            (7, "vector_registers = 32"),
        ],
    );
    rejects(
        &avx512,
        Some(6),
        "vector_bits",
        "avx512f has 512-bit registers",
    );
    let sse = edit(X86, &[(5, r#"features = ["sse42"]"#)]);
    rejects(&sse, Some(6), "vector_bits", "must be 128");
    rejects(
        &edit(ARM, &[(6, "vector_bits = 128")]),
        Some(6),
        "vector_bits",
        "sve_vector_bits is 256",
    );
    let neon = edit(ARM, &[(5, r#"features = ["neon"]"#), (8, "")]);
    rejects(&neon, Some(6), "vector_bits", "must be 128");
}

#[test]
fn vector_registers_must_be_16_or_32() {
    rejects(
        &edit(X86, &[(7, "vector_registers = 24")]),
        Some(7),
        "vector_registers",
        "16, or 32 with avx512f",
    );
    rejects(
        &edit(X86, &[(7, "vector_registers = 32")]),
        Some(7),
        "vector_registers",
        "need avx512f",
    );
    let avx512 = edit(
        X86,
        &[
            (
                5,
                r#"features = ["sse42", "avx", "avx2", "fma", "avx512f"]"#,
            ),
            (6, "vector_bits = 512"),
        ],
    );
    rejects(
        &avx512,
        Some(7),
        "vector_registers",
        "avx512f has 32 vector registers",
    );
    rejects(
        &edit(ARM, &[(7, "vector_registers = 16")]),
        Some(7),
        "vector_registers",
        "aarch64 has 32",
    );
}

#[test]
fn zero_core_values() {
    rejects(
        &edit(X86, &[(16, "cores = 0")]),
        Some(16),
        "core.cores",
        "at least 1",
    );
    rejects(
        &edit(X86, &[(17, "ghz = 0.0")]),
        Some(17),
        "core.ghz",
        "positive",
    );
    rejects(
        &edit(X86, &[(17, "ghz = -1.5")]),
        Some(17),
        "core.ghz",
        "positive",
    );
    rejects(
        &edit(X86, &[(17, "ghz = nan")]),
        Some(17),
        "core.ghz",
        "positive",
    );
    rejects(
        &edit(X86, &[(17, "ghz = 3000.0")]),
        Some(17),
        "core.ghz",
        "not MHz",
    );
    rejects(
        &edit(X86, &[(18, "fma_units = 0")]),
        Some(18),
        "core.fma_units",
        "at least 1",
    );
    rejects(
        &edit(X86, &[(19, "dot_units = 0")]),
        Some(19),
        "core.dot_units",
        "at least 1",
    );
    rejects(
        &edit(X86, &[(20, "vector_alu_units = 0")]),
        Some(20),
        "core.vector_alu_units",
        "at least 1",
    );
    rejects(
        &edit(X86, &[(21, "load_units = 0")]),
        Some(21),
        "core.load_units",
        "at least 1",
    );
}

#[test]
fn zero_caches() {
    rejects(
        &edit(X86, &[(10, "l1d = 0")]),
        Some(10),
        "cache.l1d",
        "greater than zero",
    );
    rejects(
        &edit(X86, &[(11, "l2 = 0")]),
        Some(11),
        "cache.l2",
        "greater than zero",
    );
    rejects(
        &edit(X86, &[(12, "l3 = 0")]),
        Some(12),
        "cache.l3",
        "greater than zero",
    );
    rejects(
        &edit(X86, &[(13, "line = 0")]),
        Some(13),
        "cache.line",
        "greater than zero",
    );
}

#[test]
fn cache_line_power_of_two() {
    rejects(
        &edit(X86, &[(13, "line = 48")]),
        Some(13),
        "cache.line",
        "48 is not a power of two",
    );
}

#[test]
fn cache_sizes_in_bytes() {
    // 32 (meaning KiB) is smaller than a line: caught with a hint.
    rejects(
        &edit(X86, &[(10, "l1d = 32")]),
        Some(10),
        "cache.l1d",
        "sizes are in bytes",
    );
}

#[test]
fn cache_sizes_increase() {
    rejects(
        &edit(X86, &[(11, "l2 = 32768")]),
        Some(11),
        "cache.l2",
        "L2 (32 KiB) must be larger than L1d (32 KiB)",
    );
    rejects(
        &edit(X86, &[(11, "l2 = 16384")]),
        Some(11),
        "cache.l2",
        "must be larger than L1d",
    );
    rejects(
        &edit(X86, &[(12, "l3 = 524288")]),
        Some(12),
        "cache.l3",
        "L3 (512 KiB) must be at least L2 (1 MiB)",
    );
    // l2 == l3 is allowed (no separate last level).
    parse_ok(&edit(X86, &[(12, "l3 = 1048576")]));
}

#[test]
fn bandwidth_positive() {
    rejects(
        &edit(X86, &[(24, "bandwidth_gbs = 0.0")]),
        Some(24),
        "memory.bandwidth_gbs",
        "positive",
    );
    rejects(
        &edit(X86, &[(24, "bandwidth_gbs = -5.0")]),
        Some(24),
        "memory.bandwidth_gbs",
        "positive",
    );
    rejects(
        &edit(X86, &[(24, "bandwidth_gbs = inf")]),
        Some(24),
        "memory.bandwidth_gbs",
        "positive",
    );
    rejects(
        &edit(X86, &[(25, "bandwidth_per_core_gbs = 0.0")]),
        Some(25),
        "memory.bandwidth_per_core_gbs",
        "positive",
    );
}

#[test]
fn per_core_bandwidth_within_socket() {
    rejects(
        &edit(X86, &[(25, "bandwidth_per_core_gbs = 80.0")]),
        Some(25),
        "memory.bandwidth_per_core_gbs",
        "exceeds the whole socket's 60 GB/s",
    );
}

#[test]
fn error_renders_on_one_line() {
    let (err, file, _dir) = load_err(&edit(ARM, &[(5, r#"features = ["i8mm"]"#)]));
    assert_eq!(
        err.to_string(),
        format!("{}:5: key `features`: i8mm requires neon", file.display())
    );
}

// ---------------------------------------------------------------------------
// Robustness.
// ---------------------------------------------------------------------------

/// Every prefix of a valid file and a sweep of single-byte corruptions are
/// either accepted or rejected with a line inside the document; none panics.
#[test]
fn no_panic_on_damaged_input() {
    let text = std::fs::read_to_string(target::targets_dir().join("neoverse-v1.toml")).unwrap();
    let lines = text.lines().count() + 1;
    let check = |doc: &str| {
        if let Err(e) = target::parse(doc, Path::new("neoverse-v1.toml")) {
            if let Some(l) = e.line {
                assert!(
                    (1..=lines).contains(&l),
                    "line {l} outside the document: {e}"
                );
            }
            assert!(!e.message.is_empty());
        }
    };
    for end in (0..=text.len()).filter(|i| text.is_char_boundary(*i)) {
        check(&text[..end]);
    }
    for (i, b) in text.bytes().enumerate() {
        for replacement in [b'"', b'[', b'=', b'\n', b'x', b'0'] {
            if b.is_ascii() && replacement != b {
                let mut bytes = text.clone().into_bytes();
                bytes[i] = replacement;
                check(std::str::from_utf8(&bytes).unwrap());
            }
        }
    }
}
