//! Target-description fixtures shared by the `targets_*` test files (`mod
//! common;`): two valid documents, a line editor that keeps line numbers, and
//! the checks that a broken document is rejected at the right file, line and
//! key.

// Each test file uses a different subset.
#![allow(dead_code)]

use kgen::target::{self, TargetDesc, TargetError};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

// Line numbers in the test tables are the real lines of these documents.
pub const X86: &str = r#"# A valid x86_64 test target; tests replace single lines.
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

pub const ARM: &str = r#"# A valid aarch64 SVE test target; tests replace single lines.
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
pub fn edit(doc: &str, changes: &[(usize, &str)]) -> String {
    let mut lines: Vec<String> = doc.lines().map(str::to_string).collect();
    for (n, text) in changes {
        assert!(*n >= 1 && *n <= lines.len(), "no line {n}");
        lines[n - 1] = text.to_string();
    }
    lines.join("\n") + "\n"
}

/// Writes `doc` to `<tempdir>/bad.toml` and loads it through [`target::load`]
/// as a path, returning the error (the document must be rejected).
pub fn load_err(doc: &str) -> (TargetError, PathBuf, tempfile::TempDir) {
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
pub fn rejects(doc: &str, line: Option<usize>, key: &str, needle: &str) {
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

pub fn parse_ok(doc: &str) -> TargetDesc {
    target::parse(doc, Path::new("bad.toml")).unwrap_or_else(|e| panic!("{e}"))
}

/// One row of a rejection table: `(case, document, edits, line, key,
/// needle)`, checked by [`rejects`] on `edit(document, edits)`.
pub type Reject = (
    &'static str,
    &'static str,
    &'static [(usize, &'static str)],
    Option<usize>,
    &'static str,
    &'static str,
);

/// Runs [`rejects`] on every row; see [`each_case`].
pub fn rejects_all(table: &[Reject]) {
    let names: Vec<&str> = table.iter().map(|&(case, ..)| case).collect();
    each_case(&names, |i| {
        let (_, doc, edits, line, key, needle) = table[i];
        rejects(&edit(doc, edits), line, key, needle);
    });
}

/// Calls `check(i)` for the i-th case of `names`, then fails once listing
/// every case that panicked with its message: one broken row must not hide
/// the others, and each failure must say which row it was (hence unique
/// names).
pub fn each_case<S: AsRef<str>>(names: &[S], check: impl Fn(usize)) {
    let mut seen = std::collections::HashSet::new();
    for name in names {
        assert!(
            seen.insert(name.as_ref()),
            "two cases named `{}`",
            name.as_ref()
        );
    }
    let failed: Vec<String> = names
        .iter()
        .enumerate()
        .filter_map(|(i, name)| {
            let payload = panic::catch_unwind(AssertUnwindSafe(|| check(i))).err()?;
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            Some(format!("case `{}`: {msg}", name.as_ref()))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        names.len(),
        failed.join("\n")
    );
}
