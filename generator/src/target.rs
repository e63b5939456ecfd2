//! Target descriptions: what the planner knows about a CPU.
//!
//! A target is a TOML file in `targets/` (see `targets/zen5.toml` for every
//! field), or `native`, read off the running CPU (see [`crate::native`]).

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
    /// Vector ALU pipes per core (shifts, logic, converts).
    pub vector_alu_units: u32,
    /// Loads per cycle per core.
    pub load_units: u32,
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

/// The directory holding the shipped target descriptions.
pub fn targets_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../targets")
}
