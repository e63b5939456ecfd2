//! Target descriptions: what the planner knows about a CPU.
//!
//! A target is a TOML file in `targets/` (see `targets/zen5.toml` for every
//! field), or `native`, read off the running CPU (see [`crate::native`]).
//!
//! Descriptions are data a person types from a datasheet, so loading is
//! strict: a key that is missing, misspelt, of the wrong type or physically
//! impossible (an x86 feature on an aarch64 part, L2 smaller than L1, a
//! per-core bandwidth above the socket's) is an error naming the file, the
//! line and the dotted key, rather than a plan silently tuned for a machine
//! that cannot exist. Use [`load`] for names and paths, [`parse`] for text.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use toml::de::{DeTable, DeValue};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// The `target_arch` cfg value.
    pub fn cfg_name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }
}

/// ISA extensions a target may list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Feature {
    // x86_64
    Sse42,
    Avx,
    Avx2,
    Fma,
    Avx512f,
    Avx512bw,
    Avx512vl,
    Avx512vnni,
    Avx512vbmi,
    Avx512vpopcntdq,
    Avx512bf16,
    Avxvnni,
    // aarch64
    Neon,
    Dotprod,
    I8mm,
    Sve,
    Sve2,
    Bf16,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cache {
    /// L1 data cache per core, bytes.
    pub l1d: u64,
    /// L2 per core, bytes.
    pub l2: u64,
    /// Last-level cache shared by the cores, bytes.
    pub l3: u64,
    /// Cache line, bytes.
    pub line: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Core {
    /// Physical cores.
    pub cores: u32,
    /// Sustained all-core clock, GHz.
    pub ghz: f64,
    /// Vector FMA pipes per core.
    pub fma_units: u32,
    /// Vector integer dot-product pipes per core (vpdpbusd / sdot).
    pub dot_units: u32,
    /// Vector ALU pipes per core beside the FMA pipes (shifts, logic,
    /// converts); a vector uop issues on one of `fma_units + vector_alu_units`.
    pub vector_alu_units: u32,
    /// Vector int-to-float converts per cycle per core (the f32 path's
    /// up-convert); 2 when a file leaves it out.
    #[serde(default = "two")]
    pub convert_units: u32,
    /// Loads per cycle per core.
    pub load_units: u32,
    /// Vector uops the out-of-order core can hold waiting for their operands
    /// (vector scheduler plus its queue): how far it looks past a stalled
    /// FMA chain into the next group's independent one. 128 when a file
    /// leaves it out.
    #[serde(default = "default_vector_window")]
    pub vector_window: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// DRAM read bandwidth of the whole socket, GB/s.
    pub bandwidth_gbs: f64,
    /// Read bandwidth one core can draw on its own, GB/s.
    pub bandwidth_per_core_gbs: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetDesc {
    pub name: String,
    pub description: String,
    pub arch: Arch,
    pub features: Vec<Feature>,
    /// Widest vector register, bits (SVE: the implemented vector length).
    pub vector_bits: u32,
    /// Architectural vector registers of the widest ISA (eta in QIGen eq. 4).
    pub vector_registers: u32,
    /// SVE vector length in bits, where the target has SVE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sve_vector_bits: Option<u32>,
    pub cache: Cache,
    pub core: Core,
    pub memory: Memory,
}

impl TargetDesc {
    pub fn has(&self, f: Feature) -> bool {
        self.features.contains(&f)
    }
}

/// A target that could not be read, naming the file, the key and the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetError {
    pub file: PathBuf,
    pub key: Option<String>,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": key `{key}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for TargetError {}

/// The directory holding the shipped target descriptions (`targets/` at the
/// workspace root, next to the generator crate).
pub fn targets_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    // `parent()` rather than `join("..")` so error messages show a clean path.
    match manifest.parent() {
        Some(root) => root.join("targets"),
        None => manifest.join("../targets"),
    }
}

// ---------------------------------------------------------------------------
// Features: names, architecture, prerequisites.
// ---------------------------------------------------------------------------

impl Feature {
    /// Every feature, each listed after the features it requires, so one pass
    /// in this order can drop a feature whose prerequisites are absent
    /// (see [`Feature::consistent`]).
    pub const ALL: [Feature; 18] = [
        Feature::Sse42,
        Feature::Avx,
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
        Feature::Neon,
        Feature::Dotprod,
        Feature::I8mm,
        Feature::Sve,
        Feature::Sve2,
        Feature::Bf16,
    ];

    /// The spelling used in target files (the serde name).
    pub fn name(self) -> &'static str {
        match self {
            Feature::Sse42 => "sse42",
            Feature::Avx => "avx",
            Feature::Avx2 => "avx2",
            Feature::Fma => "fma",
            Feature::Avx512f => "avx512f",
            Feature::Avx512bw => "avx512bw",
            Feature::Avx512vl => "avx512vl",
            Feature::Avx512vnni => "avx512vnni",
            Feature::Avx512vbmi => "avx512vbmi",
            Feature::Avx512vpopcntdq => "avx512vpopcntdq",
            Feature::Avx512bf16 => "avx512bf16",
            Feature::Avxvnni => "avxvnni",
            Feature::Neon => "neon",
            Feature::Dotprod => "dotprod",
            Feature::I8mm => "i8mm",
            Feature::Sve => "sve",
            Feature::Sve2 => "sve2",
            Feature::Bf16 => "bf16",
        }
    }

    /// The feature a target file spells `name`, if any.
    pub fn from_name(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The architecture this extension belongs to.
    pub fn arch(self) -> Arch {
        match self {
            Feature::Sse42
            | Feature::Avx
            | Feature::Avx2
            | Feature::Fma
            | Feature::Avx512f
            | Feature::Avx512bw
            | Feature::Avx512vl
            | Feature::Avx512vnni
            | Feature::Avx512vbmi
            | Feature::Avx512vpopcntdq
            | Feature::Avx512bf16
            | Feature::Avxvnni => Arch::X86_64,
            Feature::Neon
            | Feature::Dotprod
            | Feature::I8mm
            | Feature::Sve
            | Feature::Sve2
            | Feature::Bf16 => Arch::Aarch64,
        }
    }

    /// Features no real CPU implements this one without. Kernels compiled
    /// for a feature use its prerequisites too (an AVX-512 kernel still
    /// issues AVX2 and FMA instructions), so a description lacking one would
    /// let the runtime pick a kernel that faults.
    pub fn requires(self) -> &'static [Feature] {
        match self {
            Feature::Sse42 | Feature::Neon => &[],
            Feature::Avx => &[Feature::Sse42],
            Feature::Avx2 | Feature::Fma => &[Feature::Avx],
            Feature::Avx512f => &[Feature::Avx2, Feature::Fma],
            Feature::Avx512bw
            | Feature::Avx512vl
            | Feature::Avx512vnni
            | Feature::Avx512vbmi
            | Feature::Avx512vpopcntdq
            | Feature::Avx512bf16 => &[Feature::Avx512f],
            Feature::Avxvnni => &[Feature::Avx2],
            Feature::Dotprod | Feature::I8mm | Feature::Sve | Feature::Bf16 => &[Feature::Neon],
            Feature::Sve2 => &[Feature::Sve],
        }
    }

    /// The features of `found` that belong to `arch` and whose prerequisites
    /// are all present, in [`Feature::ALL`] order. Run-time detection can
    /// report odd combinations (a hypervisor masking AVX but not AVX2); this
    /// keeps only what a kernel may rely on.
    pub fn consistent(arch: Arch, found: &[Feature]) -> Vec<Feature> {
        let mut kept: Vec<Feature> = Vec::new();
        for f in Feature::ALL {
            if f.arch() == arch
                && found.contains(&f)
                && f.requires().iter().all(|r| kept.contains(r))
            {
                kept.push(f);
            }
        }
        kept
    }
}

// ---------------------------------------------------------------------------
// Semantic validation.
// ---------------------------------------------------------------------------

/// Why a description cannot be a real CPU: the dotted key at fault
/// (`features`, `cache.l2`, ...) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub key: String,
    pub message: String,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key `{}`: {}", self.key, self.message)
    }
}

impl std::error::Error for Invalid {}

fn invalid(key: &str, message: impl Into<String>) -> Result<(), Invalid> {
    Err(Invalid {
        key: key.to_string(),
        message: message.into(),
    })
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// `bytes` as the largest unit that divides it exactly (`48 KiB`, `32 MiB`).
fn format_bytes(bytes: u64) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

impl TargetDesc {
    /// Checks that the description could be a real CPU, returning the first
    /// problem found. The planner trusts every number here (register count
    /// bounds the micro-tile, L1 the block, features the instructions
    /// emitted), so an impossible value is refused rather than planned for.
    ///
    /// The file-name check (`name` equal to the file stem) needs the path and
    /// is done by [`parse`].
    pub fn validate(&self) -> Result<(), Invalid> {
        self.validate_name()?;
        self.validate_features()?;
        self.validate_vectors()?;
        self.validate_cache()?;
        self.validate_core()?;
        self.validate_memory()
    }

    fn validate_name(&self) -> Result<(), Invalid> {
        let ok = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok {
            return invalid(
                "name",
                format!(
                    "`{}` is not a valid target name (use letters, digits, `-`, `_` and `.`; it names the file and the generated kernels)",
                    self.name
                ),
            );
        }
        Ok(())
    }

    fn validate_features(&self) -> Result<(), Invalid> {
        for (i, f) in self.features.iter().enumerate() {
            if self.features[..i].contains(f) {
                return invalid("features", format!("{} is listed twice", f.name()));
            }
            if f.arch() != self.arch {
                return invalid(
                    "features",
                    format!(
                        "{} is an {} feature, but arch is {}",
                        f.name(),
                        f.arch().cfg_name(),
                        self.arch.cfg_name()
                    ),
                );
            }
        }
        for f in &self.features {
            let missing: Vec<&str> = f
                .requires()
                .iter()
                .filter(|r| !self.has(**r))
                .map(|r| r.name())
                .collect();
            if !missing.is_empty() {
                return invalid(
                    "features",
                    format!("{} requires {}", f.name(), missing.join(" and ")),
                );
            }
        }
        match (self.has(Feature::Sve), self.sve_vector_bits) {
            (true, None) => invalid(
                "features",
                "sve requires `sve_vector_bits`, the vector length the part implements (e.g. 256)",
            ),
            (false, Some(_)) => invalid(
                "sve_vector_bits",
                "is set, but `features` does not list sve; remove it or add sve",
            ),
            (true, Some(bits)) if !(128..=2048).contains(&bits) || bits % 128 != 0 => invalid(
                "sve_vector_bits",
                format!("{bits} is not an SVE vector length (a multiple of 128 from 128 to 2048)"),
            ),
            _ => Ok(()),
        }
    }

    fn validate_vectors(&self) -> Result<(), Invalid> {
        let (expected, why) = match self.arch {
            Arch::X86_64 if self.has(Feature::Avx512f) => {
                (512, "avx512f has 512-bit registers".to_string())
            }
            Arch::X86_64 if self.has(Feature::Avx) => (
                256,
                "with avx and without avx512f the widest registers are 256-bit".to_string(),
            ),
            Arch::X86_64 => (
                128,
                "without avx the widest x86_64 registers are 128-bit (SSE)".to_string(),
            ),
            Arch::Aarch64 => match self.sve_vector_bits {
                Some(bits) if self.has(Feature::Sve) => {
                    (bits, format!("sve_vector_bits is {bits}"))
                }
                _ => (
                    128,
                    "without sve aarch64 vector registers are 128-bit (NEON)".to_string(),
                ),
            },
        };
        if self.vector_bits != expected {
            return invalid(
                "vector_bits",
                format!(
                    "{} does not match the features: {why}, so it must be {expected}",
                    self.vector_bits
                ),
            );
        }
        let regs = self.vector_registers;
        match self.arch {
            Arch::X86_64 => {
                let avx512 = self.has(Feature::Avx512f);
                if regs != 16 && regs != 32 {
                    return invalid(
                        "vector_registers",
                        format!("{regs} is not an x86_64 register count (16, or 32 with avx512f)"),
                    );
                }
                if regs == 32 && !avx512 {
                    return invalid(
                        "vector_registers",
                        "32 vector registers need avx512f (zmm0-zmm31); without it x86_64 has 16",
                    );
                }
                if regs == 16 && avx512 {
                    return invalid(
                        "vector_registers",
                        "avx512f has 32 vector registers (zmm0-zmm31), not 16",
                    );
                }
            }
            Arch::Aarch64 => {
                if regs != 32 {
                    return invalid(
                        "vector_registers",
                        format!(
                            "{regs} is wrong: aarch64 has 32 vector registers (v0-v31 / z0-z31)"
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    fn validate_cache(&self) -> Result<(), Invalid> {
        let c = &self.cache;
        for (key, v) in [
            ("cache.l1d", c.l1d),
            ("cache.l2", c.l2),
            ("cache.l3", c.l3),
            ("cache.line", c.line),
        ] {
            if v == 0 {
                return invalid(key, "must be greater than zero (sizes are in bytes)");
            }
        }
        if !c.line.is_power_of_two() {
            return invalid("cache.line", format!("{} is not a power of two", c.line));
        }
        if c.l1d < c.line {
            return invalid(
                "cache.l1d",
                format!(
                    "{} bytes is smaller than one {}-byte cache line; sizes are in bytes",
                    c.l1d, c.line
                ),
            );
        }
        if c.l2 <= c.l1d {
            return invalid(
                "cache.l2",
                format!(
                    "L2 ({}) must be larger than L1d ({})",
                    format_bytes(c.l2),
                    format_bytes(c.l1d)
                ),
            );
        }
        if c.l3 < c.l2 {
            return invalid(
                "cache.l3",
                format!(
                    "L3 ({}) must be at least L2 ({}); L2 is the per-core share, L3 the last level the cores share (use the L2 size when there is no L3)",
                    format_bytes(c.l3),
                    format_bytes(c.l2)
                ),
            );
        }
        Ok(())
    }

    fn validate_core(&self) -> Result<(), Invalid> {
        let c = &self.core;
        if c.cores == 0 {
            return invalid("core.cores", "must be at least 1");
        }
        if !c.ghz.is_finite() || c.ghz <= 0.0 {
            return invalid(
                "core.ghz",
                format!("{} is not a positive clock in GHz", c.ghz),
            );
        }
        if c.ghz > 10.0 {
            return invalid(
                "core.ghz",
                format!("{} GHz is implausible; the clock is in GHz, not MHz", c.ghz),
            );
        }
        for (key, v) in [
            ("core.fma_units", c.fma_units),
            ("core.dot_units", c.dot_units),
            ("core.vector_alu_units", c.vector_alu_units),
            ("core.convert_units", c.convert_units),
            ("core.load_units", c.load_units),
            ("core.vector_window", c.vector_window),
        ] {
            if v == 0 {
                return invalid(
                    key,
                    "must be at least 1 (a core with no such pipe cannot run the kernels)",
                );
            }
        }
        Ok(())
    }

    fn validate_memory(&self) -> Result<(), Invalid> {
        let m = &self.memory;
        for (key, v) in [
            ("memory.bandwidth_gbs", m.bandwidth_gbs),
            ("memory.bandwidth_per_core_gbs", m.bandwidth_per_core_gbs),
        ] {
            if !v.is_finite() || v <= 0.0 {
                return invalid(key, format!("{v} is not a positive bandwidth in GB/s"));
            }
        }
        if m.bandwidth_per_core_gbs > m.bandwidth_gbs {
            return invalid(
                "memory.bandwidth_per_core_gbs",
                format!(
                    "{} GB/s for one core exceeds the whole socket's {} GB/s (memory.bandwidth_gbs)",
                    m.bandwidth_per_core_gbs, m.bandwidth_gbs
                ),
            );
        }
        Ok(())
    }

    /// One line for `kgen targets`: architecture, features, vector shape,
    /// caches, cores and bandwidth (the target's name is not included).
    pub fn summary(&self) -> String {
        let features = if self.features.is_empty() {
            "baseline".to_string()
        } else {
            self.features
                .iter()
                .map(|f| f.name())
                .collect::<Vec<_>>()
                .join(",")
        };
        let vectors = match self.sve_vector_bits {
            Some(bits) if self.has(Feature::Sve) => format!("SVE {bits}-bit"),
            _ => format!("{}-bit", self.vector_bits),
        };
        format!(
            "{} [{}] {} x{} regs, L1d {} / L2 {} / L3 {}, {} cores @ {} GHz, {} GB/s ({} GB/s per core)",
            self.arch.cfg_name(),
            features,
            vectors,
            self.vector_registers,
            format_bytes(self.cache.l1d),
            format_bytes(self.cache.l2),
            format_bytes(self.cache.l3),
            self.core.cores,
            self.core.ghz,
            self.memory.bandwidth_gbs,
            self.memory.bandwidth_per_core_gbs,
        )
    }
}

// ---------------------------------------------------------------------------
// Parsing with positions.
// ---------------------------------------------------------------------------

type Span = std::ops::Range<usize>;

/// One `key = value` of the document, flattened: its dotted path and where
/// the key and the value are written.
struct Entry {
    path: String,
    key: Span,
    value: Span,
}

fn collect_entries(table: &DeTable<'_>, prefix: &str, out: &mut Vec<Entry>) {
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

fn entries(table: &DeTable<'_>) -> Vec<Entry> {
    let mut out = Vec::new();
    collect_entries(table, "", &mut out);
    out
}

/// 1-based line of byte offset `at` (clamped to the text).
fn line_at(text: &str, at: usize) -> usize {
    let at = at.min(text.len());
    1 + text.as_bytes()[..at]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
}

fn contains(outer: &Span, inner: &Span) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

/// The entry an error span is about: the innermost key or value enclosing it.
/// A table header like `[cache]` is the value span of `cache`, so an error
/// inside the table resolves to the entry of the key, not the table.
fn entry_at<'a>(all: &'a [Entry], span: &Span) -> Option<&'a Entry> {
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
fn line_of_key(all: &[Entry], text: &str, key: &str) -> Option<usize> {
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
fn key_near_syntax_error(text: &str, at: usize) -> Option<String> {
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
fn bare_key(raw: &str) -> Option<String> {
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
fn key_from_line_text(text: &str, line: usize) -> Option<String> {
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
fn plain_words(message: &str, key: Option<&str>) -> String {
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
        let desc = crate::native::detect();
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

fn two() -> u32 {
    2
}

fn default_vector_window() -> u32 {
    128
}

#[cfg(test)]
mod tests {
    use super::*;

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
                vector_window: 128,
            },
            memory: Memory {
                bandwidth_gbs: 60.0,
                bandwidth_per_core_gbs: 20.0,
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
