//! What a target description holds: architecture, features, registers,
//! caches, core and memory figures.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

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
    /// Full-width vector loads per cycle per core.
    pub load_units: u32,
    /// Loads per cycle per core that broadcast one scalar to every lane
    /// (`vpbroadcastd` / `ld1r` from memory), counting the full-width ones
    /// issued in the same cycle: all load ports, where a core has more of
    /// them than full-width load paths (Zen 4: three loads, one of them
    /// 512-bit). `load_units` when a file leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast_loads: Option<u32>,
    /// The integer dots contend with the float multiplies and FMAs for the
    /// same issue slots: `dot_units` then bounds dots and those together.
    /// Measured on a Zen 5 EPYC with zmm (AVX-512 VNNI): four FMAs or four
    /// multiplies beside sixteen `vpdpbusd zmm` cost four more dot slots;
    /// adds, converts, logic, shifts and loads none. A target that sets it
    /// applies it to its AVX-VNNI and AVX2 plans too, where it was not
    /// measured. False when a file leaves it out.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dots_share_fma: bool,
    /// Vector uops the out-of-order core can hold waiting for their operands
    /// (vector scheduler plus its queue): how far it looks past a stalled
    /// FMA chain into the next group's independent one. 128 when a file
    /// leaves it out.
    #[serde(default = "default_vector_window")]
    pub vector_window: u32,
    /// Vector issue slots a byte shuffle (`vpshufb`, `vpermb`, `tbl`) takes
    /// in the "vector ops" limit, where the table lookups of the codebook
    /// and grid formats cost more than other ops: on Zen 4 (zmm) the
    /// lookup GEMVs run as if each took two. 1 when a file leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle_slots: Option<u32>,
}

impl Core {
    /// [`Core::shuffle_slots`], or 1.
    pub fn shuffle_slots(&self) -> u32 {
        self.shuffle_slots.unwrap_or(1)
    }

    /// [`Core::broadcast_loads`], or `load_units` when the file has none
    /// (never fewer than the full-width loads).
    pub fn broadcast_loads(&self) -> u32 {
        self.broadcast_loads
            .unwrap_or(self.load_units)
            .max(self.load_units)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// DRAM read bandwidth of the whole socket, GB/s.
    pub bandwidth_gbs: f64,
    /// Read bandwidth one core can draw on its own, GB/s.
    pub bandwidth_per_core_gbs: f64,
    /// Read bandwidth one core draws from its L3 (a buffer well inside
    /// it), GB/s, where known: the memory side of the roofline for weights
    /// that stay in L3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l3_bandwidth_per_core_gbs: Option<f64>,
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

fn two() -> u32 {
    2
}

fn default_vector_window() -> u32 {
    128
}

fn is_false(b: &bool) -> bool {
    !*b
}
