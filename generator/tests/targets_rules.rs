//! Semantic rules of a target description, past the TOML: features that fit
//! the arch and each other, vector width and register count that fit the
//! features, plausible core, cache and memory numbers, a usable name. Each
//! broken rule is reported at the line and key to fix, in one line.

#![cfg(feature = "codegen")]

mod common;

use common::{each_case, edit, load_err, parse_ok, rejects, rejects_all, Reject, ARM, X86};
use kgen::target;
use std::path::Path;

#[test]
fn features_must_fit_the_arch_and_each_other() {
    const TABLE: &[Reject] = &[
        (
            "x86_feature_on_aarch64",
            ARM,
            &[(
                5,
                r#"features = ["neon", "dotprod", "i8mm", "sve", "bf16", "avx2"]"#,
            )],
            Some(5),
            "features",
            "avx2 is an x86_64 feature, but arch is aarch64",
        ),
        (
            "aarch64_feature_on_x86",
            X86,
            &[(
                5,
                r#"features = ["sse42", "avx", "avx2", "fma", "dotprod"]"#,
            )],
            Some(5),
            "features",
            "dotprod is an aarch64 feature, but arch is x86_64",
        ),
        (
            "feature_listed_twice",
            X86,
            &[(5, r#"features = ["sse42", "avx", "avx2", "fma", "avx2"]"#)],
            Some(5),
            "features",
            "avx2 is listed twice",
        ),
        (
            "i8mm_requires_neon",
            ARM,
            &[(5, r#"features = ["i8mm"]"#)],
            Some(5),
            "features",
            "i8mm requires neon",
        ),
        (
            "dotprod_requires_neon",
            ARM,
            &[
                (5, r#"features = ["dotprod"]"#),
                (6, "vector_bits = 128"),
                (8, ""),
            ],
            Some(5),
            "features",
            "dotprod requires neon",
        ),
        (
            "sve_requires_neon",
            ARM,
            &[(5, r#"features = ["sve"]"#)],
            Some(5),
            "features",
            "sve requires neon",
        ),
        (
            "bf16_requires_neon",
            ARM,
            &[
                (5, r#"features = ["bf16"]"#),
                (6, "vector_bits = 128"),
                (8, ""),
            ],
            Some(5),
            "features",
            "bf16 requires neon",
        ),
        (
            "sve2_requires_sve",
            ARM,
            &[(5, r#"features = ["neon", "sve2"]"#)],
            Some(5),
            "features",
            "sve2 requires sve",
        ),
        (
            "sve_vector_bits_without_sve",
            ARM,
            &[
                (5, r#"features = ["neon", "dotprod"]"#),
                (6, "vector_bits = 128"),
            ],
            Some(8),
            "sve_vector_bits",
            "does not list sve",
        ),
        (
            "sve_without_sve_vector_bits",
            ARM,
            &[(8, "")],
            Some(5),
            "features",
            "sve requires `sve_vector_bits`",
        ),
        (
            "avx2_requires_avx",
            X86,
            &[(5, r#"features = ["sse42", "avx2", "fma"]"#)],
            Some(5),
            "features",
            "avx2 requires avx",
        ),
        (
            "avx512_extensions_require_avx512f: avx512bw",
            X86,
            &[(
                5,
                r#"features = ["sse42", "avx", "avx2", "fma", "avx512bw"]"#,
            )],
            Some(5),
            "features",
            "avx512bw requires avx512f",
        ),
        (
            "avx512_extensions_require_avx512f: avx512vl",
            X86,
            &[(
                5,
                r#"features = ["sse42", "avx", "avx2", "fma", "avx512vl"]"#,
            )],
            Some(5),
            "features",
            "avx512vl requires avx512f",
        ),
        (
            "avx512_extensions_require_avx512f: avx512vnni",
            X86,
            &[(
                5,
                r#"features = ["sse42", "avx", "avx2", "fma", "avx512vnni"]"#,
            )],
            Some(5),
            "features",
            "avx512vnni requires avx512f",
        ),
        (
            "avx512_extensions_require_avx512f: avx512vbmi",
            X86,
            &[(
                5,
                r#"features = ["sse42", "avx", "avx2", "fma", "avx512vbmi"]"#,
            )],
            Some(5),
            "features",
            "avx512vbmi requires avx512f",
        ),
        (
            "avx512_extensions_require_avx512f: avx512vpopcntdq",
            X86,
            &[(
                5,
                r#"features = ["sse42", "avx", "avx2", "fma", "avx512vpopcntdq"]"#,
            )],
            Some(5),
            "features",
            "avx512vpopcntdq requires avx512f",
        ),
        (
            "avx512_extensions_require_avx512f: avx512bf16",
            X86,
            &[(
                5,
                r#"features = ["sse42", "avx", "avx2", "fma", "avx512bf16"]"#,
            )],
            Some(5),
            "features",
            "avx512bf16 requires avx512f",
        ),
        (
            "avx512f_requires_avx2_and_fma: neither",
            X86,
            &[
                (5, r#"features = ["sse42", "avx", "avx512f"]"#),
                (6, "vector_bits = 512"),
                (7, "vector_registers = 32"),
            ],
            Some(5),
            "features",
            "avx512f requires avx2 and fma",
        ),
        (
            "avx512f_requires_avx2_and_fma: no fma",
            X86,
            &[
                (5, r#"features = ["sse42", "avx", "avx2", "avx512f"]"#),
                (6, "vector_bits = 512"),
                (7, "vector_registers = 32"),
            ],
            Some(5),
            "features",
            "avx512f requires fma",
        ),
        (
            "avxvnni_requires_avx2",
            X86,
            &[(5, r#"features = ["sse42", "avx", "avxvnni"]"#)],
            Some(5),
            "features",
            "avxvnni requires avx2",
        ),
    ];
    rejects_all(TABLE);
}

#[test]
fn vector_width_and_registers_must_fit_the_features() {
    const TABLE: &[Reject] = &[
        (
            "vector_bits_must_match_features: avx2 at 512",
            X86,
            &[(6, "vector_bits = 512")],
            Some(6),
            "vector_bits",
            "must be 256",
        ),
        (
            "vector_bits_must_match_features: avx512f at 256",
            X86,
            &[
                (
                    5,
                    r#"features = ["sse42", "avx", "avx2", "fma", "avx512f"]"#,
                ),
                (7, "vector_registers = 32"),
            ],
            Some(6),
            "vector_bits",
            "avx512f has 512-bit registers",
        ),
        (
            "vector_bits_must_match_features: sse42 at 256",
            X86,
            &[(5, r#"features = ["sse42"]"#)],
            Some(6),
            "vector_bits",
            "must be 128",
        ),
        (
            "vector_bits_must_match_features: sve 256 at 128",
            ARM,
            &[(6, "vector_bits = 128")],
            Some(6),
            "vector_bits",
            "sve_vector_bits is 256",
        ),
        (
            "vector_bits_must_match_features: neon at 256",
            ARM,
            &[(5, r#"features = ["neon"]"#), (8, "")],
            Some(6),
            "vector_bits",
            "must be 128",
        ),
        (
            "vector_registers_must_be_16_or_32: 24",
            X86,
            &[(7, "vector_registers = 24")],
            Some(7),
            "vector_registers",
            "16, or 32 with avx512f",
        ),
        (
            "vector_registers_must_be_16_or_32: 32 without avx512f",
            X86,
            &[(7, "vector_registers = 32")],
            Some(7),
            "vector_registers",
            "need avx512f",
        ),
        (
            "vector_registers_must_be_16_or_32: avx512f with 16",
            X86,
            &[
                (
                    5,
                    r#"features = ["sse42", "avx", "avx2", "fma", "avx512f"]"#,
                ),
                (6, "vector_bits = 512"),
            ],
            Some(7),
            "vector_registers",
            "avx512f has 32 vector registers",
        ),
        (
            "vector_registers_must_be_16_or_32: aarch64 with 16",
            ARM,
            &[(7, "vector_registers = 16")],
            Some(7),
            "vector_registers",
            "aarch64 has 32",
        ),
        (
            "sve_vector_bits_out_of_range: 200",
            ARM,
            &[(6, "vector_bits = 200"), (8, "sve_vector_bits = 200")],
            Some(8),
            "sve_vector_bits",
            "not an SVE vector length",
        ),
        (
            "sve_vector_bits_out_of_range: 0",
            ARM,
            &[(6, "vector_bits = 0"), (8, "sve_vector_bits = 0")],
            Some(8),
            "sve_vector_bits",
            "not an SVE vector length",
        ),
        (
            "sve_vector_bits_out_of_range: 64",
            ARM,
            &[(6, "vector_bits = 64"), (8, "sve_vector_bits = 64")],
            Some(8),
            "sve_vector_bits",
            "not an SVE vector length",
        ),
        (
            "sve_vector_bits_out_of_range: 2176",
            ARM,
            &[(6, "vector_bits = 2176"), (8, "sve_vector_bits = 2176")],
            Some(8),
            "sve_vector_bits",
            "not an SVE vector length",
        ),
        (
            "sve_vector_bits_out_of_range: 4096",
            ARM,
            &[(6, "vector_bits = 4096"), (8, "sve_vector_bits = 4096")],
            Some(8),
            "sve_vector_bits",
            "not an SVE vector length",
        ),
    ];
    rejects_all(TABLE);
}

#[test]
fn core_cache_and_memory_numbers_must_be_plausible() {
    const TABLE: &[Reject] = &[
        (
            "zero_core_values: cores 0",
            X86,
            &[(16, "cores = 0")],
            Some(16),
            "core.cores",
            "at least 1",
        ),
        (
            "zero_core_values: ghz 0",
            X86,
            &[(17, "ghz = 0.0")],
            Some(17),
            "core.ghz",
            "positive",
        ),
        (
            "zero_core_values: ghz negative",
            X86,
            &[(17, "ghz = -1.5")],
            Some(17),
            "core.ghz",
            "positive",
        ),
        (
            "zero_core_values: ghz nan",
            X86,
            &[(17, "ghz = nan")],
            Some(17),
            "core.ghz",
            "positive",
        ),
        (
            "zero_core_values: ghz in MHz",
            X86,
            &[(17, "ghz = 3000.0")],
            Some(17),
            "core.ghz",
            "not MHz",
        ),
        (
            "zero_core_values: fma_units 0",
            X86,
            &[(18, "fma_units = 0")],
            Some(18),
            "core.fma_units",
            "at least 1",
        ),
        (
            "zero_core_values: dot_units 0",
            X86,
            &[(19, "dot_units = 0")],
            Some(19),
            "core.dot_units",
            "at least 1",
        ),
        (
            "zero_core_values: vector_alu_units 0",
            X86,
            &[(20, "vector_alu_units = 0")],
            Some(20),
            "core.vector_alu_units",
            "at least 1",
        ),
        (
            "zero_core_values: load_units 0",
            X86,
            &[(21, "load_units = 0")],
            Some(21),
            "core.load_units",
            "at least 1",
        ),
        (
            "zero_core_values: shuffle_slots 0",
            X86,
            &[(22, "shuffle_slots = 0")],
            Some(22),
            "core.shuffle_slots",
            "at least 1",
        ),
        (
            "zero_caches: l1d",
            X86,
            &[(10, "l1d = 0")],
            Some(10),
            "cache.l1d",
            "greater than zero",
        ),
        (
            "zero_caches: l2",
            X86,
            &[(11, "l2 = 0")],
            Some(11),
            "cache.l2",
            "greater than zero",
        ),
        (
            "zero_caches: l3",
            X86,
            &[(12, "l3 = 0")],
            Some(12),
            "cache.l3",
            "greater than zero",
        ),
        (
            "zero_caches: line",
            X86,
            &[(13, "line = 0")],
            Some(13),
            "cache.line",
            "greater than zero",
        ),
        (
            "cache_line_power_of_two",
            X86,
            &[(13, "line = 48")],
            Some(13),
            "cache.line",
            "48 is not a power of two",
        ),
        // 32 (meaning KiB) is smaller than a line: caught with a hint.
        (
            "cache_sizes_in_bytes",
            X86,
            &[(10, "l1d = 32")],
            Some(10),
            "cache.l1d",
            "sizes are in bytes",
        ),
        (
            "cache_sizes_increase: l2 equal to l1d",
            X86,
            &[(11, "l2 = 32768")],
            Some(11),
            "cache.l2",
            "L2 (32 KiB) must be larger than L1d (32 KiB)",
        ),
        (
            "cache_sizes_increase: l2 below l1d",
            X86,
            &[(11, "l2 = 16384")],
            Some(11),
            "cache.l2",
            "must be larger than L1d",
        ),
        (
            "cache_sizes_increase: l3 below l2",
            X86,
            &[(12, "l3 = 524288")],
            Some(12),
            "cache.l3",
            "L3 (512 KiB) must be at least L2 (1 MiB)",
        ),
        (
            "bandwidth_positive: 0",
            X86,
            &[(24, "bandwidth_gbs = 0.0")],
            Some(24),
            "memory.bandwidth_gbs",
            "positive",
        ),
        (
            "bandwidth_positive: negative",
            X86,
            &[(24, "bandwidth_gbs = -5.0")],
            Some(24),
            "memory.bandwidth_gbs",
            "positive",
        ),
        (
            "bandwidth_positive: inf",
            X86,
            &[(24, "bandwidth_gbs = inf")],
            Some(24),
            "memory.bandwidth_gbs",
            "positive",
        ),
        (
            "bandwidth_positive: per core 0",
            X86,
            &[(25, "bandwidth_per_core_gbs = 0.0")],
            Some(25),
            "memory.bandwidth_per_core_gbs",
            "positive",
        ),
        (
            "per_core_bandwidth_within_socket",
            X86,
            &[(25, "bandwidth_per_core_gbs = 80.0")],
            Some(25),
            "memory.bandwidth_per_core_gbs",
            "exceeds the whole socket's 60 GB/s",
        ),
    ];
    rejects_all(TABLE);
}

/// The edges of the rules above, so a rule cannot pass by rejecting too much.
#[test]
fn boundary_values_are_accepted() {
    // (case, document, edits)
    type Accept = (&'static str, &'static str, &'static [(usize, &'static str)]);
    const TABLE: &[Accept] = &[
        (
            "smallest sve_vector_bits",
            ARM,
            &[(6, "vector_bits = 128"), (8, "sve_vector_bits = 128")],
        ),
        (
            "largest sve_vector_bits",
            ARM,
            &[(6, "vector_bits = 2048"), (8, "sve_vector_bits = 2048")],
        ),
        // No separate last level.
        ("l3 equal to l2", X86, &[(12, "l3 = 1048576")]),
    ];
    let names: Vec<&str> = TABLE.iter().map(|&(case, ..)| case).collect();
    each_case(&names, |i| {
        let (_, doc, edits) = TABLE[i];
        parse_ok(&edit(doc, edits));
    });
}

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
fn error_renders_on_one_line() {
    let (err, file, _dir) = load_err(&edit(ARM, &[(5, r#"features = ["i8mm"]"#)]));
    assert_eq!(
        err.to_string(),
        format!("{}:5: key `features`: i8mm requires neon", file.display())
    );
}
