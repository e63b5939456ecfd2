//! Whether a description could be a real CPU: the checks behind
//! [`TargetDesc::validate`] and its one-line summary.

use crate::target::desc::Arch;
use crate::target::desc::Feature;
use crate::target::desc::TargetDesc;
use std::fmt;

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

pub(crate) fn invalid(key: &str, message: impl Into<String>) -> Result<(), Invalid> {
    Err(Invalid {
        key: key.to_string(),
        message: message.into(),
    })
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// `bytes` as the largest unit that divides it exactly (`48 KiB`, `32 MiB`).
pub(crate) fn format_bytes(bytes: u64) -> String {
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
            ("core.broadcast_loads", c.broadcast_loads.unwrap_or(1)),
            ("core.shuffle_slots", c.shuffle_slots()),
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
        if let Some(v) = m.l3_bandwidth_per_core_gbs {
            if !v.is_finite() || v <= 0.0 {
                return invalid(
                    "memory.l3_bandwidth_per_core_gbs",
                    format!("{v} is not a positive bandwidth in GB/s"),
                );
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
