//! TOML-level errors in a target file: syntax, value types, unknown and
//! missing keys and tables, however the tables are spelled (sections, inline,
//! dotted keys). Each is reported at the line and key to fix; damaged input
//! is an error, never a panic.

#![cfg(feature = "codegen")]

mod common;

use common::{parse_ok, rejects_all, Reject, ARM, X86};
use kgen::target::{self, Feature};
use std::path::Path;

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

#[test]
fn toml_errors_name_their_line_and_key() {
    const TABLE: &[Reject] = &[
        (
            "syntax_error",
            X86,
            &[(6, "vector_bits = = 256")],
            Some(6),
            "vector_bits",
            "TOML syntax error",
        ),
        (
            "syntax_error_duplicate_key",
            X86,
            &[(8, "arch = \"x86_64\"")],
            Some(8),
            "arch",
            "duplicate key",
        ),
        // A duplicate is not in the recovered table; the key comes off the
        // text.
        (
            "syntax_error_in_a_table: duplicate cache.l2",
            X86,
            &[(14, "l2 = 5")],
            Some(14),
            "cache.l2",
            "duplicate key",
        ),
        (
            "syntax_error_in_a_table: core.fma_units without a value",
            X86,
            &[(18, "fma_units = ")],
            Some(18),
            "core.fma_units",
            "TOML syntax error",
        ),
        (
            "syntax_error_in_a_table: [core] twice",
            X86,
            &[(22, "[core]")],
            Some(22),
            "core",
            "TOML syntax error",
        ),
        (
            "wrong_type",
            X86,
            &[(6, "vector_bits = \"wide\"")],
            Some(6),
            "vector_bits",
            "invalid type",
        ),
        (
            "wrong_type_in_a_table: cache.l2 string",
            X86,
            &[(11, "l2 = \"1M\"")],
            Some(11),
            "cache.l2",
            "invalid type",
        ),
        (
            "wrong_type_in_a_table: core.ghz bool",
            X86,
            &[(17, "ghz = true")],
            Some(17),
            "core.ghz",
            "invalid type",
        ),
        (
            "wrong_type_in_a_table: cache.l2 negative",
            X86,
            &[(11, "l2 = -1")],
            Some(11),
            "cache.l2",
            "-1",
        ),
        (
            "unknown_key",
            X86,
            &[(8, "turbo = true")],
            Some(8),
            "turbo",
            "unknown key `turbo`",
        ),
        (
            "unknown_key_in_a_table",
            X86,
            &[(14, "l4 = 1")],
            Some(14),
            "cache.l4",
            "unknown key `l4`, expected one of `l1d`",
        ),
        (
            "unknown_feature",
            X86,
            &[(
                5,
                r#"features = ["sse42", "avx", "avx2", "fma", "avx9000"]"#,
            )],
            Some(5),
            "features",
            "unknown feature `avx9000`, expected one of",
        ),
        (
            "unknown_arch",
            X86,
            &[(4, "arch = \"riscv64\"")],
            Some(4),
            "arch",
            "riscv64",
        ),
        (
            "missing_key",
            X86,
            &[(6, "")],
            None,
            "vector_bits",
            "missing",
        ),
        // A key missing from a table points at the table's header, where the
        // key belongs.
        (
            "missing_key_in_a_table: cache.l2",
            X86,
            &[(11, "")],
            Some(9),
            "cache.l2",
            "missing",
        ),
        (
            "missing_key_in_a_table: memory.bandwidth_per_core_gbs",
            X86,
            &[(25, "")],
            Some(23),
            "memory.bandwidth_per_core_gbs",
            "missing",
        ),
        (
            "missing_table",
            X86,
            &[(23, ""), (24, ""), (25, "")],
            None,
            "memory",
            "missing",
        ),
    ];
    rejects_all(TABLE);
}

/// Every table written as dotted keys at the top level; valid but for
/// `core.ghz` (line 12).
const DOTTED: &str = r#"name = "bad"
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

#[test]
fn inline_and_dotted_tables_resolve_keys() {
    const TABLE: &[Reject] = &[
        (
            "inline: cache.l2 below l1d",
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
            Some(9),
            "cache.l2",
            "must be larger than L1d",
        ),
        (
            "inline: cache.l2 wrong type",
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
            Some(9),
            "cache.l2",
            "invalid type",
        ),
        (
            "dotted: core.ghz zero",
            DOTTED,
            &[],
            Some(12),
            "core.ghz",
            "positive",
        ),
        (
            "dotted: cache.l2 wrong type",
            DOTTED,
            &[(8, "cache.l2 = \"big\"")],
            Some(8),
            "cache.l2",
            "invalid type",
        ),
        (
            "dotted: memory.bandwidth_per_core_gbs missing",
            DOTTED,
            &[(18, "")],
            Some(17),
            "memory.bandwidth_per_core_gbs",
            "missing",
        ),
        (
            "dotted: unknown key cache.l9",
            DOTTED,
            &[(8, "cache.l9 = 1")],
            Some(8),
            "cache.l9",
            "unknown key `l9`",
        ),
    ];
    rejects_all(TABLE);
}

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
