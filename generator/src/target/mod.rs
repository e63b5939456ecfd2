//! Target descriptions: what the planner knows about a CPU.
//!
//! A target is a TOML file in `targets/` (see `targets/zen5.toml` for every
//! field), or `native`, read off the running CPU (see [`crate::target::native`]).
//!
//! Descriptions are data a person types from a datasheet, so loading is
//! strict: a key that is missing, misspelt, of the wrong type or physically
//! impossible (an x86 feature on an aarch64 part, L2 smaller than L1, a
//! per-core bandwidth above the socket's) is an error naming the file, the
//! line and the dotted key, rather than a plan silently tuned for a machine
//! that cannot exist. Use [`load`] for names and paths, [`parse`] for text.

pub mod desc;
pub mod native;
mod parse;
mod validate;

pub use desc::*;
pub use parse::parse;
pub use validate::Invalid;

use std::path::{Path, PathBuf};

/// Reads and parses one target file.
pub fn load_file(path: &Path) -> Result<TargetDesc, TargetError> {
    let text = std::fs::read_to_string(path).map_err(|e| TargetError {
        file: path.to_path_buf(),
        key: None,
        line: None,
        message: format!("cannot read target file: {e}"),
    })?;
    parse(&text, path)
}

/// Loads a target by name or path: `native` describes the running CPU; a
/// value containing a path separator or ending in `.toml` is a file; any
/// other value is a shipped target, `targets/NAME.toml`.
pub fn load(name_or_path: &str) -> Result<TargetDesc, TargetError> {
    if name_or_path == "native" {
        let desc = crate::target::native::detect();
        desc.validate().map_err(|inv| TargetError {
            file: PathBuf::from("native"),
            key: Some(inv.key),
            line: None,
            message: format!("{} (detected on {})", inv.message, desc.description),
        })?;
        return Ok(desc);
    }
    let is_path = name_or_path.contains('/')
        || name_or_path.contains(std::path::MAIN_SEPARATOR)
        || name_or_path.ends_with(".toml");
    if is_path {
        return load_file(Path::new(name_or_path));
    }
    let file = targets_dir().join(format!("{name_or_path}.toml"));
    if !file.is_file() {
        return Err(TargetError {
            file,
            key: None,
            line: None,
            message: format!(
                "unknown target `{name_or_path}`; available: {}",
                available().join(", ")
            ),
        });
    }
    load_file(&file)
}

/// The shipped target files, sorted by path.
fn shipped_files() -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(targets_dir())? {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == "toml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Names [`load`] accepts: the shipped targets, sorted, then `native`.
pub fn available() -> Vec<String> {
    let mut names: Vec<String> = shipped_files()
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_string))
        .collect();
    names.sort();
    names.push("native".to_string());
    names
}

/// Every shipped target, sorted by name; the first bad file is an error.
pub fn load_all() -> Result<Vec<TargetDesc>, TargetError> {
    let files = shipped_files().map_err(|e| TargetError {
        file: targets_dir(),
        key: None,
        line: None,
        message: format!("cannot list target directory: {e}"),
    })?;
    let mut all = files
        .iter()
        .map(|f| load_file(f))
        .collect::<Result<Vec<_>, _>>()?;
    all.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use toml::de::DeTable;

    use crate::target::parse::entries;
    use crate::target::parse::entry_at;
    use crate::target::parse::key_from_line_text;
    use crate::target::parse::line_at;
    use crate::target::parse::line_of_key;
    use crate::target::parse::plain_words;
    use crate::target::validate::format_bytes;

    fn sample() -> TargetDesc {
        TargetDesc {
            name: "sample".into(),
            description: "a valid x86_64 part".into(),
            arch: Arch::X86_64,
            features: vec![Feature::Sse42, Feature::Avx, Feature::Avx2, Feature::Fma],
            vector_bits: 256,
            vector_registers: 16,
            sve_vector_bits: None,
            cache: Cache {
                l1d: 32 << 10,
                l2: 1 << 20,
                l3: 32 << 20,
                line: 64,
            },
            core: Core {
                cores: 8,
                ghz: 3.0,
                fma_units: 2,
                dot_units: 2,
                vector_alu_units: 3,
                convert_units: 2,
                load_units: 2,
                broadcast_loads: None,
                dots_share_fma: false,
                vector_window: 128,
                shuffle_slots: None,
            },
            memory: Memory {
                bandwidth_gbs: 60.0,
                bandwidth_per_core_gbs: 20.0,
                l3_bandwidth_per_core_gbs: None,
            },
        }
    }

    #[test]
    fn feature_names_are_the_serde_names() {
        for f in Feature::ALL {
            let v = toml::Value::try_from(f).unwrap();
            assert_eq!(v.as_str(), Some(f.name()));
            assert_eq!(Feature::from_name(f.name()), Some(f));
        }
        assert_eq!(Feature::from_name("avx9000"), None);
        let mut unique = Feature::ALL.to_vec();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), Feature::ALL.len());
    }

    #[test]
    fn prerequisites_come_first_and_share_the_arch() {
        for (i, f) in Feature::ALL.iter().enumerate() {
            for r in f.requires() {
                let at = Feature::ALL.iter().position(|x| x == r).unwrap();
                assert!(
                    at < i,
                    "{} listed before its prerequisite {}",
                    f.name(),
                    r.name()
                );
                assert_eq!(r.arch(), f.arch());
            }
        }
    }

    #[test]
    fn consistent_drops_orphans_and_other_arches() {
        use Feature::*;
        assert_eq!(
            Feature::consistent(Arch::X86_64, &[Avx2, Fma, Avx512f, Neon]),
            vec![]
        );
        assert_eq!(
            Feature::consistent(Arch::X86_64, &[Avx512bw, Avx2, Avx, Sse42, Dotprod]),
            vec![Sse42, Avx, Avx2]
        );
        assert_eq!(
            Feature::consistent(Arch::Aarch64, &[Sve2, Neon, I8mm, Avx]),
            vec![Neon, I8mm]
        );
    }

    #[test]
    fn validate_accepts_sample_and_reports_keys() {
        let t = sample();
        assert_eq!(t.validate(), Ok(()));
        let mut bad = sample();
        bad.cache.l3 = 1 << 19;
        let e = bad.validate().unwrap_err();
        assert_eq!(e.key, "cache.l3");
        assert_eq!(e.to_string(), format!("key `cache.l3`: {}", e.message));
        let mut bad = sample();
        bad.features.push(Feature::Neon);
        assert_eq!(bad.validate().unwrap_err().key, "features");
        let mut bad = sample();
        bad.name = String::new();
        assert_eq!(bad.validate().unwrap_err().key, "name");
        let mut bad = sample();
        bad.memory.bandwidth_per_core_gbs = f64::NAN;
        assert_eq!(
            bad.validate().unwrap_err().key,
            "memory.bandwidth_per_core_gbs"
        );
        let mut bad = sample();
        bad.memory.l3_bandwidth_per_core_gbs = Some(-1.0);
        assert_eq!(
            bad.validate().unwrap_err().key,
            "memory.l3_bandwidth_per_core_gbs"
        );
    }

    #[test]
    fn summary_names_the_shape() {
        let s = sample().summary();
        assert_eq!(
            s,
            "x86_64 [sse42,avx,avx2,fma] 256-bit x16 regs, L1d 32 KiB / L2 1 MiB / L3 32 MiB, \
             8 cores @ 3 GHz, 60 GB/s (20 GB/s per core)"
        );
    }

    #[test]
    fn bytes_format_in_the_largest_exact_unit() {
        assert_eq!(format_bytes(48 << 10), "48 KiB");
        assert_eq!(format_bytes(1280 << 10), "1280 KiB");
        assert_eq!(format_bytes(32 << 20), "32 MiB");
        assert_eq!(format_bytes(100), "100 B");
        assert_eq!(format_bytes(0), "0 B");
    }

    #[test]
    fn lines_are_one_based_and_clamped() {
        let text = "a = 1\nb = 2\n\nc = 3";
        assert_eq!(line_at(text, 0), 1);
        assert_eq!(line_at(text, 5), 1);
        assert_eq!(line_at(text, 6), 2);
        assert_eq!(line_at(text, 13), 4);
        assert_eq!(line_at(text, 10_000), 4);
        assert_eq!(line_at("", 3), 1);
    }

    const DOC: &str = "name = \"x\"\nfeatures = [\"neon\", \"sve\"]\n\n[cache]\nl1d = 1\nl2 = 2\n\n[core]\nghz = 3.0\n";

    #[test]
    fn keys_resolve_to_their_lines() {
        let doc = DeTable::parse(DOC).unwrap();
        let all = entries(doc.get_ref());
        assert_eq!(line_of_key(&all, DOC, "name"), Some(1));
        assert_eq!(line_of_key(&all, DOC, "features"), Some(2));
        assert_eq!(line_of_key(&all, DOC, "cache"), Some(4));
        assert_eq!(line_of_key(&all, DOC, "cache.l2"), Some(6));
        assert_eq!(line_of_key(&all, DOC, "core.ghz"), Some(9));
        // Absent keys fall back to their table, or to nothing at the top.
        assert_eq!(line_of_key(&all, DOC, "cache.line"), Some(4));
        assert_eq!(line_of_key(&all, DOC, "memory.bandwidth_gbs"), None);
        assert_eq!(line_of_key(&all, DOC, "vector_bits"), None);
    }

    #[test]
    fn spans_resolve_to_the_innermost_key() {
        let doc = DeTable::parse(DOC).unwrap();
        let all = entries(doc.get_ref());
        let at = |needle: &str| {
            let start = DOC.find(needle).unwrap();
            entry_at(&all, &(start..start + needle.len())).map(|e| e.path.as_str())
        };
        assert_eq!(at("\"sve\""), Some("features"));
        assert_eq!(at("l2"), Some("cache.l2"));
        assert_eq!(at("3.0"), Some("core.ghz"));
        assert_eq!(at("[core]"), Some("core"));
    }

    #[test]
    fn keys_read_off_broken_lines() {
        let text = "name = \"x\"\n[cache]\nl1d = = 3\n[ core . inner ]\n x . y = 1\nnot a key\n";
        assert_eq!(key_from_line_text(text, 1).as_deref(), Some("name"));
        assert_eq!(key_from_line_text(text, 2).as_deref(), Some("cache"));
        assert_eq!(key_from_line_text(text, 3).as_deref(), Some("cache.l1d"));
        assert_eq!(key_from_line_text(text, 4).as_deref(), Some("core.inner"));
        assert_eq!(
            key_from_line_text(text, 5).as_deref(),
            Some("core.inner.x.y")
        );
        assert_eq!(key_from_line_text(text, 6), None);
        assert_eq!(key_from_line_text(text, 0), None);
        assert_eq!(key_from_line_text(text, 99), None);
    }

    #[test]
    fn serde_wording_is_translated() {
        assert_eq!(
            plain_words("unknown variant `x`, expected `a`", Some("features")),
            "unknown feature `x`, expected `a`"
        );
        assert_eq!(
            plain_words("unknown variant `x`, expected `a`", Some("arch")),
            "unknown arch `x`, expected `a`"
        );
        assert_eq!(
            plain_words("unknown field `x`, expected `a`", Some("cache.x")),
            "unknown key `x`, expected `a`"
        );
        assert_eq!(
            plain_words("invalid type: string \"w\", expected u32", None),
            "invalid type: string \"w\", expected u32"
        );
    }

    #[test]
    fn parse_reports_the_file() {
        let e = parse("name = ", Path::new("targets/x.toml")).unwrap_err();
        assert_eq!(e.file, PathBuf::from("targets/x.toml"));
        assert_eq!(e.line, Some(1));
        assert_eq!(e.key.as_deref(), Some("name"));
        assert!(
            e.to_string()
                .starts_with("targets/x.toml:1: key `name`: TOML syntax error"),
            "{e}"
        );
    }

    #[test]
    fn targets_dir_is_the_workspace_targets() {
        let dir = targets_dir();
        assert!(dir.ends_with("targets"));
        assert!(!dir.to_string_lossy().contains(".."));
        assert!(dir.join("zen5.toml").is_file());
    }
}
