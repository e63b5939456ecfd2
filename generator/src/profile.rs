//! Tuning profiles: what `kgen tune` measured on a machine, and how the
//! planner finds a profile that applies.
//!
//! A profile file (`profiles/<machine>.toml`) holds entries, each keyed by
//! everything that makes a measurement valid elsewhere: CPU model, arch, ISA
//! set, vector length, kernel family, format, op, rows, threads and kgen
//! version. Entries written before keys named the family and format are f32
//! entries; they load with both filled in from their bits and group. Lookup
//! returns an exact match, else a *family* match (same arch, ISA set and
//! vector length, other CPU model), else nothing; every skipped entry that
//! nearly matched is reported with the field that differs, so a stale
//! profile never applies silently.

use crate::family::f32::isa::Isa;
use crate::family::f32::model::MicroTile;
use crate::family::f32::planner::PlanOptions;
use crate::family::int8::isa::I8Isa;
use crate::family::int8::model::I8Fixed;
use crate::family::int8::plan::I8Tile;
use crate::family::int8::spec::I8Spec;
use crate::family::plan::TileSource;
use crate::spec::KernelSpec;
use crate::spec::{Group, Op};
use crate::target::desc::TargetDesc;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Everything a measurement depends on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileKey {
    pub cpu_model: String,
    pub arch: String,
    /// The CPU's ISA features, sorted.
    pub isa_set: Vec<String>,
    pub vector_bits: u32,
    /// Kernel family: `f32` or `int8` (empty in files written before keys
    /// named it: those are f32 entries, see [`ProfileKey::upgrade`]).
    #[serde(default)]
    pub family: String,
    /// Weight format tag: `q4g32` (f32 family), `q4_0` (int8 family).
    #[serde(default)]
    pub format: String,
    /// The kernel family's ISA that was tuned (`avx2`, ...).
    pub isa: String,
    /// Bits per weight level.
    pub bits: u32,
    /// Group size (`column` for whole columns; 32 for the int8 family's blocks).
    pub group: String,
    /// `gemv` or `gemm`.
    pub op: String,
    /// Activation rows (1 for gemv).
    pub m: usize,
    pub threads: usize,
    pub kgen_version: String,
}

impl ProfileKey {
    pub fn group_of(g: Group) -> String {
        g.to_string()
    }

    pub fn op_of(op: Op) -> (String, usize) {
        (op.name().to_string(), op.rows())
    }

    /// Fills in the family and format of an entry written before keys named
    /// them (always an f32 entry, whose format follows from bits and group).
    pub fn upgrade(&mut self) -> Result<(), String> {
        if self.family.is_empty() {
            self.family = "f32".into();
        }
        if self.format.is_empty() {
            if self.family != "f32" {
                return Err(format!(
                    "a {} entry for ISA {} names no format",
                    self.family, self.isa
                ));
            }
            let group = Group::parse(&self.group).map_err(|e| {
                format!(
                    "an entry written before profiles named formats has group `{}`: {e}",
                    self.group
                )
            })?;
            self.format = format!("q{}{}", self.bits, group.tag());
        }
        Ok(())
    }

    /// Whether a measurement under `self` says something about `other`'s
    /// spec at all (same family, format, ISA, op, rows, threads).
    fn same_problem(&self, other: &ProfileKey) -> bool {
        (&self.family, &self.format) == (&other.family, &other.format)
            && (
                &self.isa,
                self.bits,
                &self.group,
                &self.op,
                self.m,
                self.threads,
            ) == (
                &other.isa,
                other.bits,
                &other.group,
                &other.op,
                other.m,
                other.threads,
            )
    }

    /// Same kind of machine: arch, ISA set and vector length.
    fn same_family(&self, other: &ProfileKey) -> bool {
        (&self.arch, &self.isa_set, self.vector_bits)
            == (&other.arch, &other.isa_set, other.vector_bits)
    }

    /// The first field that differs, for warnings.
    fn mismatch(&self, other: &ProfileKey) -> Option<String> {
        let fields = [
            (
                "kgen_version",
                self.kgen_version.clone(),
                other.kgen_version.clone(),
            ),
            ("cpu_model", self.cpu_model.clone(), other.cpu_model.clone()),
            ("arch", self.arch.clone(), other.arch.clone()),
            ("isa_set", self.isa_set.join(","), other.isa_set.join(",")),
            (
                "vector_bits",
                self.vector_bits.to_string(),
                other.vector_bits.to_string(),
            ),
        ];
        fields
            .into_iter()
            .find(|(_, a, b)| a != b)
            .map(|(k, a, b)| format!("{k} is `{a}` in the profile, `{b}` here"))
    }
}

/// One measured candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measured {
    /// f32 family: the K unroll (absent for the int8 family).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m_u: Option<usize>,
    pub t_u: usize,
    /// int8 family: column groups per micro kernel (absent for f32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_sub: Option<usize>,
    pub m_r: usize,
    pub m_b: usize,
    pub t_b: usize,
    /// Median seconds per call over the tuning shapes (summed).
    pub median_s: f64,
    /// GB/s of weights at that median.
    pub gbs: f64,
    pub gflops: f64,
    /// Rank the performance model gave this tile (1 = the model's pick).
    pub model_rank: usize,
    /// The model's predicted GB/s for this tile on one core.
    pub model_gbs: f64,
    /// Whether this is exactly the plan the model picks (tile and blocks).
    #[serde(default)]
    pub model_pick: bool,
}

impl Measured {
    /// The f32 family's tile.
    pub fn tile(&self) -> MicroTile {
        MicroTile {
            m_u: self.m_u.unwrap_or(1),
            t_u: self.t_u,
            m_r: self.m_r,
        }
    }

    /// The int8 family's tile.
    pub fn i8_tile(&self) -> I8Tile {
        I8Tile {
            t_u: self.t_u,
            t_sub: self.t_sub.unwrap_or(self.t_u),
            m_r: self.m_r,
        }
    }

    /// `m_u=2 t_u=2 m_r=1` (f32) or `t_u=4 t_sub=2 m_r=4` (int8).
    pub fn tile_text(&self) -> String {
        match (self.m_u, self.t_sub) {
            (_, Some(t_sub)) => format!("t_u={} t_sub={t_sub} m_r={}", self.t_u, self.m_r),
            (m_u, None) => format!("m_u={} t_u={} m_r={}", m_u.unwrap_or(1), self.t_u, self.m_r),
        }
    }
}

/// One tuned spec on one machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileEntry {
    pub key: ProfileKey,
    /// Shapes measured, `KxN`.
    pub shapes: Vec<String>,
    /// Every candidate that passed the reference check, fastest first.
    pub measured: Vec<Measured>,
    /// Candidates that failed the reference check (a generator bug if any).
    #[serde(default)]
    pub failed: Vec<String>,
}

impl ProfileEntry {
    pub fn winner(&self) -> Option<&Measured> {
        self.measured.first()
    }

    /// The model's pick among the measured, its empirical rank (1-based) and
    /// its time relative to the best.
    pub fn model_pick(&self) -> Option<(&Measured, usize, f64)> {
        let best = self.winner()?;
        let (i, m) = self
            .measured
            .iter()
            .enumerate()
            .find(|(_, m)| m.model_pick)
            .or_else(|| {
                self.measured
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, m)| m.model_rank)
            })?;
        Some((m, i + 1, m.median_s / best.median_s))
    }
}

/// A profile file: the entries of one machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    #[serde(default, rename = "entry")]
    pub entries: Vec<ProfileEntry>,
    /// The machine's read bandwidth and clock, one entry per CPU model and
    /// ISA set.
    #[serde(default, rename = "machine", skip_serializing_if = "Vec::is_empty")]
    pub machines: Vec<MachineEntry>,
}

/// What `kgen tune` measured of a machine itself: its read bandwidth
/// (median passes over buffers far beyond L3, and well inside it) and the
/// clock one busy core runs at. They replace the `native` target's guesses
/// (the OS reports no bandwidth, and `/proc/cpuinfo` a VM's nominal clock):
/// the memory and compute sides of the model's roofline. Keyed by CPU
/// model, arch and ISA set only: no kernel was timed, so the kgen version
/// does not matter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineEntry {
    pub cpu_model: String,
    pub arch: String,
    /// The CPU's ISA features, sorted.
    pub isa_set: Vec<String>,
    /// DRAM, `threads` threads at once (one per core).
    pub bandwidth_gbs: f64,
    pub threads: usize,
    /// DRAM, one thread.
    pub bandwidth_per_core_gbs: f64,
    /// A buffer inside L3, one thread; absent where the CPU has no L3
    /// beyond its L2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l3_bandwidth_per_core_gbs: Option<f64>,
    /// Bytes of the DRAM and L3 buffers.
    pub dram_bytes: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l3_bytes: Option<usize>,
    /// GHz of one busy core (a chain of dependent adds), where measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ghz: Option<f64>,
}

impl MachineEntry {
    /// What identifies the machine: CPU model, arch and ISA set.
    fn machine(&self) -> (&str, &str, &[String]) {
        (&self.cpu_model, &self.arch, &self.isa_set)
    }

    /// Whether this entry was measured on the machine `target` describes.
    pub fn matches(&self, target: &TargetDesc) -> bool {
        let m = machine_key(target);
        self.machine() == (&m.cpu_model, &m.arch, &m.isa_set[..])
    }

    /// The figures in one line, for notes.
    pub fn summary(&self) -> String {
        let l3 = self
            .l3_bandwidth_per_core_gbs
            .map_or(String::new(), |g| format!(", L3 {g:.1} GB/s per core"));
        let clock = self
            .ghz
            .map_or(String::new(), |g| format!("; clock {g:.2} GHz"));
        format!(
            "DRAM {:.1} GB/s per core, {:.1} on {} threads{l3}{clock}",
            self.bandwidth_per_core_gbs, self.bandwidth_gbs, self.threads
        )
    }

    /// The figures as a target's memory description.
    pub fn memory(&self) -> crate::target::desc::Memory {
        crate::target::desc::Memory {
            bandwidth_gbs: self.bandwidth_gbs,
            bandwidth_per_core_gbs: self.bandwidth_per_core_gbs,
            l3_bandwidth_per_core_gbs: self.l3_bandwidth_per_core_gbs,
        }
    }
}

/// `target` with the memory figures and clock a profile in `files` measured
/// on this machine, and a note saying so, when `target` is `native` (a named
/// target describes a class of CPU, not the machine the profile was
/// measured on, and keeps its file's figures).
pub fn with_measured_machine(
    target: &TargetDesc,
    files: &[PathBuf],
) -> (TargetDesc, Option<String>) {
    let mut t = target.clone();
    if target.name != "native" {
        return (t, None);
    }
    for path in files {
        let Ok(p) = Profile::load(path) else {
            continue;
        };
        if let Some(e) = p.machines.iter().find(|e| e.matches(target)) {
            t.memory = e.memory();
            if let Some(ghz) = e.ghz {
                t.core.ghz = ghz;
            }
            let note = format!(
                "`native` as kgen tune measured it ({}): {}",
                path.display(),
                e.summary()
            );
            return (t, Some(note));
        }
    }
    (t, None)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileError(pub String);

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProfileError {}

impl Profile {
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ProfileError(format!("{}: {e}", path.display())))?;
        let mut p: Profile =
            toml::from_str(&text).map_err(|e| ProfileError(format!("{}: {e}", path.display())))?;
        for (i, e) in p.entries.iter_mut().enumerate() {
            e.key.upgrade().map_err(|why| {
                ProfileError(format!("{}: entry {}: {why}", path.display(), i + 1))
            })?;
        }
        Ok(p)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("profiles serialise")
    }

    pub fn save(&self, path: &Path) -> Result<(), ProfileError> {
        let text = format!(
            "# kgen tuning profile: measured by `kgen tune`, read by `kgen` and kgen::build.\n{}",
            self.to_toml()
        );
        crate::emit::write_if_changed(path, &text)
            .map(|_| ())
            .map_err(|e| ProfileError(format!("{}: {e}", path.display())))
    }

    /// Replaces the entry of the same machine, or adds it.
    pub fn upsert_machine(&mut self, entry: MachineEntry) {
        match self
            .machines
            .iter_mut()
            .find(|e| e.machine() == entry.machine())
        {
            Some(e) => *e = entry,
            None => self.machines.push(entry),
        }
    }

    /// Replaces the entry with the same key, or adds it.
    pub fn upsert(&mut self, entry: ProfileEntry) {
        match self.entries.iter_mut().find(|e| e.key == entry.key) {
            Some(e) => *e = entry,
            None => self.entries.push(entry),
        }
    }
}

/// How a lookup went.
#[derive(Clone, Debug)]
pub struct Lookup {
    pub found: Option<Found>,
    /// Entries for the same problem that were skipped, and why.
    pub warnings: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Found {
    pub entry: ProfileEntry,
    pub path: PathBuf,
    /// `None` for an exact match; otherwise why it is only a family match.
    pub family: Option<String>,
}

/// Profile files in `dir` (`*.toml`, sorted by name).
pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

/// Finds the entry for `key` among `files`: exact, else family, else none.
pub fn lookup(files: &[PathBuf], key: &ProfileKey) -> Lookup {
    let mut warnings = Vec::new();
    let mut family: Option<Found> = None;
    for path in files {
        let profile = match Profile::load(path) {
            Ok(p) => p,
            Err(e) => {
                warnings.push(format!("ignoring unreadable profile {e}"));
                continue;
            }
        };
        for entry in profile.entries.iter().filter(|e| e.key.same_problem(key)) {
            match entry.key.mismatch(key) {
                None => {
                    return Lookup {
                        found: Some(Found {
                            entry: entry.clone(),
                            path: path.clone(),
                            family: None,
                        }),
                        warnings,
                    }
                }
                Some(why) => {
                    let usable_family =
                        entry.key.kgen_version == key.kgen_version && entry.key.same_family(key);
                    if usable_family && family.is_none() {
                        family = Some(Found {
                            entry: entry.clone(),
                            path: path.clone(),
                            family: Some(format!("family match (same ISA set): {why}")),
                        });
                    } else if !usable_family {
                        warnings.push(format!("ignoring profile {}: {why}", path.display()));
                    }
                }
            }
        }
    }
    Lookup {
        found: family,
        warnings,
    }
}

/// The profile key for a spec tuned on `target` with `isa`.
pub fn key_for(target: &TargetDesc, isa: &Isa, spec: &KernelSpec, threads: usize) -> ProfileKey {
    let (op, m) = ProfileKey::op_of(spec.op);
    ProfileKey {
        family: "f32".into(),
        format: spec.format_tag(),
        isa: isa.name.to_string(),
        bits: spec.bits,
        group: ProfileKey::group_of(spec.group),
        op,
        m,
        threads,
        ..machine_key(target)
    }
}

/// The entry of `target`'s machine for `measured` read bandwidths (DRAM on
/// `threads` threads, DRAM on one, L3 on one) over buffers of `dram_bytes`
/// and `l3_bytes`, and its measured clock `ghz`.
pub fn machine_entry(
    target: &TargetDesc,
    measured: &crate::target::desc::Memory,
    threads: usize,
    (dram_bytes, l3_bytes): (usize, Option<usize>),
    ghz: Option<f64>,
) -> MachineEntry {
    let m = machine_key(target);
    MachineEntry {
        cpu_model: m.cpu_model,
        arch: m.arch,
        isa_set: m.isa_set,
        bandwidth_gbs: measured.bandwidth_gbs,
        threads,
        bandwidth_per_core_gbs: measured.bandwidth_per_core_gbs,
        l3_bandwidth_per_core_gbs: measured.l3_bandwidth_per_core_gbs,
        dram_bytes,
        l3_bytes,
        ghz,
    }
}

/// The machine half of a key: CPU model, arch, ISA set, vector length and
/// kgen version (the rest left empty).
fn machine_key(target: &TargetDesc) -> ProfileKey {
    let mut isa_set: Vec<String> = target
        .features
        .iter()
        .map(|f| crate::family::f32::isa::feature_name(*f).to_string())
        .collect();
    isa_set.sort();
    ProfileKey {
        cpu_model: target.description.clone(),
        arch: target.arch.cfg_name().to_string(),
        isa_set,
        vector_bits: target.vector_bits,
        family: String::new(),
        format: String::new(),
        isa: String::new(),
        bits: 0,
        group: String::new(),
        op: String::new(),
        m: 0,
        threads: 0,
        kgen_version: crate::VERSION.to_string(),
    }
}

/// The profile key for an int8-family kernel tuned on `target` with `isa`.
pub fn key_for_i8(target: &TargetDesc, isa: &I8Isa, spec: &I8Spec, threads: usize) -> ProfileKey {
    let spec = &isa.reads(spec);
    let (op, m) = ProfileKey::op_of(spec.op);
    ProfileKey {
        family: "int8".into(),
        format: spec.format_tag(),
        isa: isa.name.to_string(),
        bits: spec.bits(),
        group: crate::format::ggml::QK.to_string(),
        op,
        m,
        threads,
        ..machine_key(target)
    }
}

/// The int8 tile (and blocks) a profile gives `spec` on `isa` for `target`,
/// if an entry matches, and notes on what happened, for headers and messages.
pub fn profile_tile_i8(
    files: &[PathBuf],
    target: &TargetDesc,
    isa: &I8Isa,
    spec: &I8Spec,
    threads: usize,
) -> (Option<I8Fixed>, Vec<String>) {
    let key = key_for_i8(target, isa, spec, threads);
    let found = lookup(files, &key);
    let mut notes = found.warnings;
    let Some(f) = found.found else {
        notes.push(format!(
            "no tuning profile for int8 {} {} {} on `{}`; using the performance model",
            isa.name,
            spec.format_tag(),
            spec.op.name(),
            target.description
        ));
        return (None, notes);
    };
    let Some(w) = f.entry.winner() else {
        return (None, notes);
    };
    let mut src = f.path.display().to_string();
    if let Some(why) = &f.family {
        src.push_str(&format!(" ({why})"));
        notes.push(format!("using {}: {why}", f.path.display()));
    }
    let fixed = I8Fixed {
        tile: w.i8_tile(),
        block: Some((w.m_b, w.t_b)),
        source: TileSource::Profile(src),
    };
    (Some(fixed), notes)
}

/// Applies a profile to plan options if one matches `spec` on `isa` for
/// `target`; returns what happened, for headers and messages.
pub fn apply_profile(
    files: &[PathBuf],
    target: &TargetDesc,
    isa: &Isa,
    spec: &KernelSpec,
    threads: usize,
    opts: &mut PlanOptions,
) -> Vec<String> {
    let key = key_for(target, isa, spec, threads);
    let found = lookup(files, &key);
    let mut notes = found.warnings;
    match found.found {
        Some(f) => {
            if let Some(w) = f.entry.winner() {
                opts.tile = Some(w.tile());
                opts.block = Some((w.m_b, w.t_b));
                let mut src = f.path.display().to_string();
                if let Some(why) = &f.family {
                    src.push_str(&format!(" ({why})"));
                    notes.push(format!("using {}: {why}", f.path.display()));
                }
                opts.tile_source = Some(TileSource::Profile(src));
            }
        }
        None => notes.push(format!(
            "no tuning profile for {} {} on `{}`; using the performance model",
            isa.name, spec, target.description
        )),
    }
    notes
}

/// The op a `--op`/`--m` pair names.
pub fn op_of(gemm: bool, m: usize) -> Op {
    if gemm {
        Op::Gemm { m }
    } else {
        Op::Gemv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine entry survives the file, replaces its machine's old one,
    /// and applies to `native` on that machine only.
    #[test]
    fn measured_machine_applies_to_native_on_its_machine() {
        let native = crate::target::native::detect();
        let measured = crate::target::desc::Memory {
            bandwidth_gbs: 30.0,
            bandwidth_per_core_gbs: 12.5,
            l3_bandwidth_per_core_gbs: Some(40.0),
        };
        let mut p = Profile::default();
        p.upsert_machine(machine_entry(
            &native,
            &measured,
            2,
            (1 << 28, Some(1 << 23)),
            None,
        ));
        let newer = crate::target::desc::Memory {
            bandwidth_per_core_gbs: 13.0,
            ..measured.clone()
        };
        p.upsert_machine(machine_entry(
            &native,
            &newer,
            2,
            (1 << 28, Some(1 << 23)),
            Some(3.25),
        ));
        assert_eq!(p.machines.len(), 1);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.toml");
        p.save(&path).unwrap();
        assert_eq!(Profile::load(&path).unwrap(), p);
        let files = [path];

        let (t, note) = with_measured_machine(&native, &files);
        assert_eq!((t.memory, t.core.ghz), (newer, 3.25));
        assert!(note.is_some_and(|n| n.contains("13.0") && n.contains("3.25 GHz")));
        // Another CPU model, or a named target: their own figures.
        let mut other = native.clone();
        other.description = "Another CPU".into();
        let (t, note) = with_measured_machine(&other, &files);
        assert_eq!(
            (t.memory, t.core.ghz, note),
            (native.memory.clone(), native.core.ghz, None)
        );
        let zen3 = crate::target::load("zen3").unwrap();
        let (t, note) = with_measured_machine(&zen3, &files);
        assert_eq!((t.memory, note), (zen3.memory.clone(), None));
    }

    fn key() -> ProfileKey {
        ProfileKey {
            cpu_model: "Test CPU 9000".into(),
            arch: "x86_64".into(),
            isa_set: vec!["avx".into(), "avx2".into(), "fma".into()],
            vector_bits: 256,
            family: "f32".into(),
            format: "q4g32".into(),
            isa: "avx2".into(),
            bits: 4,
            group: "32".into(),
            op: "gemv".into(),
            m: 1,
            threads: 1,
            kgen_version: crate::VERSION.into(),
        }
    }

    fn entry(k: ProfileKey) -> ProfileEntry {
        let m = |t_u, s| Measured {
            m_u: Some(2),
            t_u,
            t_sub: None,
            m_r: 1,
            m_b: 256,
            t_b: 64,
            median_s: s,
            gbs: 1.0 / s,
            gflops: 4.0 / s,
            model_rank: t_u,
            model_gbs: 10.0,
            model_pick: t_u == 1,
        };
        ProfileEntry {
            key: k,
            shapes: vec!["64x64".into()],
            measured: vec![m(3, 1.0), m(1, 1.5)],
            failed: vec![],
        }
    }

    #[test]
    fn round_trips_through_toml() {
        let mut p = Profile::default();
        p.upsert(entry(key()));
        let back: Profile = toml::from_str(&p.to_toml()).unwrap();
        assert_eq!(back, p);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.toml");
        p.save(&path).unwrap();
        assert_eq!(Profile::load(&path).unwrap(), p);
        // Upsert replaces the same key.
        p.upsert(entry(key()));
        assert_eq!(p.entries.len(), 1);
    }

    #[test]
    fn model_pick_rank_and_ratio() {
        let e = entry(key());
        let (m, rank, ratio) = e.model_pick().unwrap();
        assert_eq!((m.t_u, rank), (1, 2));
        assert!((ratio - 1.5).abs() < 1e-12);
    }

    #[test]
    fn lookup_exact_family_and_mismatches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.toml");
        let mut p = Profile::default();
        p.upsert(entry(key()));
        p.save(&path).unwrap();
        let files = files_in(dir.path());

        let exact = lookup(&files, &key());
        assert!(exact.found.as_ref().unwrap().family.is_none());

        let mut other_cpu = key();
        other_cpu.cpu_model = "Other CPU".into();
        let fam = lookup(&files, &other_cpu);
        let why = fam.found.unwrap().family.unwrap();
        assert!(why.contains("cpu_model"), "{why}");

        let mut newer = key();
        newer.kgen_version = "9.9.9".into();
        let l = lookup(&files, &newer);
        assert!(l.found.is_none());
        assert!(l.warnings[0].contains("kgen_version"), "{:?}", l.warnings);

        let mut other_isa_set = other_cpu.clone();
        other_isa_set.isa_set.push("avx512f".into());
        let l = lookup(&files, &other_isa_set);
        assert!(l.found.is_none());
        assert!(l.warnings[0].contains("cpu_model"), "{:?}", l.warnings);

        let mut other_problem = key();
        other_problem.bits = 3;
        let l = lookup(&files, &other_problem);
        assert!(l.found.is_none() && l.warnings.is_empty());
    }

    /// A profile written before keys named the family and format: no
    /// `family`/`format` in the key. It loads as f32 entries.
    const OLD_PROFILE: &str = r#"
[[entry]]
shapes = ["4096x4096"]
failed = []

[entry.key]
cpu_model = "Test CPU 9000"
arch = "x86_64"
isa_set = ["avx", "avx2", "fma"]
vector_bits = 256
isa = "avx2"
bits = 4
group = "32"
op = "gemv"
m = 1
threads = 1
kgen_version = "VERSION"

[[entry.measured]]
m_u = 2
t_u = 3
m_r = 1
m_b = 256
t_b = 64
median_s = 1.0
gbs = 1.0
gflops = 4.0
model_rank = 1
model_gbs = 10.0
"#;

    #[test]
    fn old_profiles_load_as_f32_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.toml");
        std::fs::write(&path, OLD_PROFILE.replace("VERSION", crate::VERSION)).unwrap();
        let p = Profile::load(&path).unwrap();
        let k = &p.entries[0].key;
        assert_eq!((k.family.as_str(), k.format.as_str()), ("f32", "q4g32"));
        assert_eq!(p.entries[0].measured[0].tile().m_u, 2);
        // And the f32 key of today finds it.
        let found = lookup(&files_in(dir.path()), &key());
        assert!(found.found.is_some(), "{:?}", found.warnings);

        // A group that names no format is reported with the file and entry.
        std::fs::write(
            &path,
            OLD_PROFILE
                .replace("VERSION", crate::VERSION)
                .replace("group = \"32\"", "group = \"wide\""),
        )
        .unwrap();
        let e = Profile::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("old.toml") && e.contains("entry 1") && e.contains("wide"),
            "{e}"
        );
        let l = lookup(&files_in(dir.path()), &key());
        assert!(
            l.found.is_none() && l.warnings[0].contains("unreadable"),
            "{:?}",
            l.warnings
        );
    }

    /// Keys never collide across families or formats: an int8 Q4_0 entry on
    /// the `avx2` ISA (a name both families use) with bits 4 and group 32
    /// says nothing about the f32 q4g32 kernel, nor about IQ4_NL.
    #[test]
    fn keys_are_per_family_and_format() {
        use crate::family::int8::isa::AVX2;
        let t = crate::target::load("zen3").unwrap();
        let q4_0 = I8Spec::from_tag(Op::Gemv, "q4_0").unwrap();
        let iq4 = I8Spec::from_tag(Op::Gemv, "iq4_nl").unwrap();
        let ki = key_for_i8(&t, &AVX2, &q4_0, 1);
        let f32_isa = Isa::by_name("avx2").unwrap();
        let spec = KernelSpec::new(Op::Gemv, 4, Group::Size(32)).unwrap();
        let kf = key_for(&t, &f32_isa, &spec, 1);
        assert_eq!(
            (ki.isa.as_str(), ki.bits, ki.group.as_str()),
            ("avx2", 4, "32")
        );
        assert_eq!(
            (kf.isa.as_str(), kf.bits, kf.group.as_str()),
            ("avx2", 4, "32")
        );
        assert_eq!((ki.family.as_str(), ki.format.as_str()), ("int8", "q4_0"));
        assert_eq!((kf.family.as_str(), kf.format.as_str()), ("f32", "q4g32"));
        let kn = key_for_i8(&t, &AVX2, &iq4, 1);
        assert_eq!(kn.format, "iq4_nl");

        let dir = tempfile::tempdir().unwrap();
        let mut p = Profile::default();
        let mut e = entry(ki.clone());
        for m in &mut e.measured {
            (m.m_u, m.t_sub) = (None, Some(m.t_u));
        }
        p.upsert(e);
        p.save(&dir.path().join("a.toml")).unwrap();
        let files = files_in(dir.path());
        assert!(lookup(&files, &ki).found.is_some());
        for other in [&kf, &kn] {
            let l = lookup(&files, other);
            assert!(l.found.is_none() && l.warnings.is_empty(), "{other:?}");
        }
        // Both families in one file, side by side.
        p.upsert(entry(kf.clone()));
        assert_eq!(p.entries.len(), 2);
        let back: Profile = toml::from_str(&p.to_toml()).unwrap();
        assert_eq!(back, p);

        // The int8 lookup gives the measured tile and blocks, from the profile.
        let (fixed, notes) = profile_tile_i8(&files, &t, &AVX2, &q4_0, 1);
        let f = fixed.unwrap();
        assert_eq!((f.tile.t_u, f.tile.t_sub, f.tile.m_r), (3, 3, 1));
        assert_eq!(f.block, Some((256, 64)));
        assert!(matches!(f.source, TileSource::Profile(_)));
        assert!(notes.is_empty(), "{notes:?}");
        let (none, notes) = profile_tile_i8(&files, &t, &AVX2, &iq4, 1);
        assert!(
            none.is_none() && notes[0].contains("no tuning profile"),
            "{notes:?}"
        );
    }
}
