//! Parsing target TOML with positions, so every error names the file, the
//! line and the dotted key.

use crate::target::desc::TargetDesc;
use crate::target::desc::TargetError;
use std::path::Path;
use toml::de::{DeTable, DeValue};

// ---------------------------------------------------------------------------
// Parsing with positions.
// ---------------------------------------------------------------------------

pub(crate) type Span = std::ops::Range<usize>;

/// One `key = value` of the document, flattened: its dotted path and where
/// the key and the value are written.
pub(crate) struct Entry {
    pub(crate) path: String,
    pub(crate) key: Span,
    pub(crate) value: Span,
}

pub(crate) fn collect_entries(table: &DeTable<'_>, prefix: &str, out: &mut Vec<Entry>) {
    for (k, v) in table.iter() {
        let path = if prefix.is_empty() {
            k.get_ref().to_string()
        } else {
            format!("{prefix}.{}", k.get_ref())
        };
        out.push(Entry {
            path: path.clone(),
            key: k.span(),
            value: v.span(),
        });
        if let DeValue::Table(inner) = v.get_ref() {
            collect_entries(inner, &path, out);
        }
    }
}

pub(crate) fn entries(table: &DeTable<'_>) -> Vec<Entry> {
    let mut out = Vec::new();
    collect_entries(table, "", &mut out);
    out
}

/// 1-based line of byte offset `at` (clamped to the text).
pub(crate) fn line_at(text: &str, at: usize) -> usize {
    let at = at.min(text.len());
    1 + text.as_bytes()[..at]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
}

pub(crate) fn contains(outer: &Span, inner: &Span) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

/// The entry an error span is about: the innermost key or value enclosing it.
/// A table header like `[cache]` is the value span of `cache`, so an error
/// inside the table resolves to the entry of the key, not the table.
pub(crate) fn entry_at<'a>(all: &'a [Entry], span: &Span) -> Option<&'a Entry> {
    all.iter()
        .filter_map(|e| {
            let enclosing = [&e.key, &e.value]
                .into_iter()
                .filter(|s| contains(s, span))
                .map(|s| s.len())
                .min()?;
            Some((enclosing, std::cmp::Reverse(e.path.len()), e))
        })
        .min_by_key(|(len, depth, _)| (*len, *depth))
        .map(|(_, _, e)| e)
}

/// Line where the dotted `key` is written, or, when the key is absent, where
/// the innermost table that should hold it is opened. `None` for an absent
/// top-level key (there is no line to point at).
pub(crate) fn line_of_key(all: &[Entry], text: &str, key: &str) -> Option<usize> {
    let mut key = key;
    loop {
        if let Some(e) = all.iter().find(|e| e.path == key) {
            return Some(line_at(text, e.key.start));
        }
        key = &key[..key.rfind('.')?];
    }
}

/// Key for a syntax error at `at`: parse what can be recovered and take the
/// innermost entry whose key or value reaches `at`, else one written on the
/// same line, else read the key off the line's text (a duplicate key, say,
/// is not in the recovered table).
pub(crate) fn key_near_syntax_error(text: &str, at: usize) -> Option<String> {
    let (recovered, _) = DeTable::parse_recoverable(text);
    let all = entries(recovered.get_ref());
    let reaches = |s: &Span| s.start <= at && at <= s.end;
    let line = line_at(text, at);
    all.iter()
        .filter(|e| reaches(&e.key) || reaches(&e.value))
        .min_by_key(|e| {
            (
                e.value.len().min(e.key.len()),
                std::cmp::Reverse(e.path.len()),
            )
        })
        .or_else(|| {
            all.iter()
                .filter(|e| line_at(text, e.key.start) == line)
                .max_by_key(|e| e.path.len())
        })
        .map(|e| e.path.clone())
        .or_else(|| key_from_line_text(text, line))
}

/// A dotted key of bare-key characters (`cache.l2`), with spaces around the
/// dots removed, or `None` when `raw` is not one.
pub(crate) fn bare_key(raw: &str) -> Option<String> {
    let parts: Vec<&str> = raw.split('.').map(str::trim).collect();
    let bare = |p: &&str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    parts.iter().all(bare).then(|| parts.join("."))
}

/// The key written on 1-based `line` (`key = ...` or a `[table]` header),
/// prefixed by the table header above it: a textual fallback for when the
/// document cannot be parsed.
pub(crate) fn key_from_line_text(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let header = |l: &str| {
        let l = l.trim();
        let inner = l.strip_prefix('[')?.trim_start_matches('[');
        bare_key(inner.split(']').next()?)
    };
    let here = lines.get(line.checked_sub(1)?)?.trim();
    if here.starts_with('[') {
        return header(here);
    }
    let key = bare_key(here.split_once('=')?.0)?;
    match lines[..line - 1]
        .iter()
        .rev()
        .find(|l| l.trim_start().starts_with('['))
        .and_then(|l| header(l))
    {
        Some(table) => Some(format!("{table}.{key}")),
        None => Some(key),
    }
}

/// serde's wording in the words of a target file: structs have keys, enums
/// are features or architectures.
pub(crate) fn plain_words(message: &str, key: Option<&str>) -> String {
    let thing = match key {
        Some("features") => "feature",
        Some("arch") => "arch",
        _ => "value",
    };
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        format!("unknown {thing} {rest}")
    } else if let Some(rest) = message.strip_prefix("unknown field ") {
        format!("unknown key {rest}")
    } else {
        message.to_string()
    }
}

/// Parses a target description. `file` is where the text came from: it is
/// named in errors and, when it ends in `.toml`, its stem must equal `name`
/// (targets are loaded by file name, and a mismatch would label generated
/// kernels and profiles with the wrong CPU).
///
/// Errors carry the file, the 1-based line and the dotted key, for syntax
/// errors, type errors, unknown keys, unknown features, missing keys and
/// descriptions [`TargetDesc::validate`] rejects.
pub fn parse(text: &str, file: &Path) -> Result<TargetDesc, TargetError> {
    let error = |line: Option<usize>, key: Option<String>, message: String| TargetError {
        file: file.to_path_buf(),
        key,
        line,
        message,
    };
    let doc = match DeTable::parse(text) {
        Ok(doc) => doc,
        Err(e) => {
            let at = e.span().map(|s| s.start);
            let key = at.and_then(|at| key_near_syntax_error(text, at));
            return Err(error(
                at.map(|at| line_at(text, at)),
                key,
                format!("TOML syntax error: {}", e.message()),
            ));
        }
    };
    let all = entries(doc.get_ref());
    let desc: TargetDesc = match toml::from_str(text) {
        Ok(desc) => desc,
        Err(e) => {
            let message = e.message();
            let missing = message
                .strip_prefix("missing field `")
                .and_then(|m| m.strip_suffix('`'));
            return Err(match (missing, e.span()) {
                (Some(field), span) => {
                    // The span is the table lacking the field: its header (or
                    // inline table), or the empty span of the document root.
                    let table = span.and_then(|s| all.iter().find(|t| t.value == s || t.key == s));
                    match table {
                        Some(t) => error(
                            Some(line_at(text, t.key.start)),
                            Some(format!("{}.{field}", t.path)),
                            format!("missing from [{}]; every target sets every key", t.path),
                        ),
                        None => error(
                            None,
                            Some(field.to_string()),
                            "missing; every target sets every key".into(),
                        ),
                    }
                }
                (None, Some(span)) => {
                    let key = entry_at(&all, &span).map(|e| e.path.clone());
                    let message = plain_words(message, key.as_deref());
                    error(Some(line_at(text, span.start)), key, message)
                }
                (None, None) => error(None, None, plain_words(message, None)),
            });
        }
    };
    if file.extension().is_some_and(|x| x == "toml") {
        if let Some(stem) = file.file_stem().and_then(|s| s.to_str()) {
            if stem != desc.name {
                return Err(error(
                    line_of_key(&all, text, "name"),
                    Some("name".into()),
                    format!(
                        "`{}` does not match the file name `{stem}.toml`; targets are loaded by file name, so the two must agree",
                        desc.name
                    ),
                ));
            }
        }
    }
    desc.validate().map_err(|inv| {
        error(
            line_of_key(&all, text, &inv.key),
            Some(inv.key),
            inv.message,
        )
    })?;
    Ok(desc)
}
