//! What a kernel computes: the weight format and the operation.
//!
//! A [`KernelSpec`] is independent of any CPU; the planner pairs it with a
//! target to choose tile sizes, and the emitter turns both into code.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Weight group: how many consecutive K values share one scale and zero point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Group {
    /// `g` consecutive values along K (16, 32, 64, 128 or 256).
    Size(usize),
    /// One scale and zero per output column (QIGen eq. 1).
    Column,
}

impl Group {
    pub const SUPPORTED: [usize; 5] = [16, 32, 64, 128, 256];

    /// Parses `32`, `g32`, `col`, `column` or `whole`.
    pub fn parse(s: &str) -> Result<Group, SpecError> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "col" | "column" | "whole" | "whole-column" | "-1" => Ok(Group::Column),
            _ => {
                let digits = t.strip_prefix('g').unwrap_or(&t);
                digits
                    .parse::<usize>()
                    .map(Group::Size)
                    .map_err(|_| SpecError(format!("group `{s}` is not a number or `col`")))
            }
        }
    }

    /// Group size in values, or `None` for whole-column.
    pub fn size(self) -> Option<usize> {
        match self {
            Group::Size(g) => Some(g),
            Group::Column => None,
        }
    }

    /// Short tag used in kernel names: `g32` or `gcol`.
    pub fn tag(self) -> String {
        match self {
            Group::Size(g) => format!("g{g}"),
            Group::Column => "gcol".to_string(),
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Group::Size(g) => write!(f, "{g}"),
            Group::Column => f.write_str("column"),
        }
    }
}

/// The operation a kernel performs: `y = x W` for one or `m` activation rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Op {
    Gemv,
    /// GEMM planned for `m` activation rows (the kernel accepts any row count).
    Gemm {
        m: usize,
    },
}

impl Op {
    /// Activation rows the plan is made for.
    pub fn rows(self) -> usize {
        match self {
            Op::Gemv => 1,
            Op::Gemm { m } => m,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::Gemv => "gemv",
            Op::Gemm { .. } => "gemm",
        }
    }
}

/// How integer levels map back to real weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Quantizer {
    /// `w = s * (q - z)` with `q` in `[0, 2^bits)`, as GPTQ stores it.
    Affine,
}

/// Activation precision the kernel consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Activation {
    /// f32 activations, weights up-converted to f32 (QIGen).
    F32,
}

/// A complete description of one kernel's arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KernelSpec {
    pub op: Op,
    pub bits: u32,
    pub group: Group,
    pub quantizer: Quantizer,
    pub activation: Activation,
}

/// A spec that kgen cannot build, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unsupported kernel spec: {}", self.0)
    }
}

impl std::error::Error for SpecError {}

impl KernelSpec {
    pub const SUPPORTED_BITS: [u32; 4] = [2, 3, 4, 8];

    /// Builds and validates an affine f32-activation spec.
    pub fn new(op: Op, bits: u32, group: Group) -> Result<KernelSpec, SpecError> {
        let spec = KernelSpec {
            op,
            bits,
            group,
            quantizer: Quantizer::Affine,
            activation: Activation::F32,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Refuses combinations the kernels cannot compute, saying why.
    pub fn validate(&self) -> Result<(), SpecError> {
        if !Self::SUPPORTED_BITS.contains(&self.bits) {
            return Err(SpecError(format!(
                "{} weight bits: the f32 path packs 2, 3, 4 or 8 bits per value into u32 words",
                self.bits
            )));
        }
        if let Group::Size(g) = self.group {
            if !Group::SUPPORTED.contains(&g) {
                return Err(SpecError(format!(
                    "group size {g}: supported are 16, 32, 64, 128, 256 or whole column"
                )));
            }
            if g % self.values_per_unit() != 0 {
                return Err(SpecError(format!(
                    "{}-bit with group {g}: {}-bit packs {} values per indivisible unit of {} u32 word(s), \
                     so a group must be a multiple of {}",
                    self.bits,
                    self.bits,
                    self.values_per_unit(),
                    self.words_per_unit(),
                    self.values_per_unit()
                )));
            }
        }
        if let Op::Gemm { m } = self.op {
            if m == 0 || m > 4096 {
                return Err(SpecError(format!(
                    "gemm with m = {m} rows: m must be between 1 and 4096"
                )));
            }
        }
        Ok(())
    }

    /// Values stored in one packing unit: a whole number of u32 words holding a
    /// whole number of values (3 bits: 32 values in three words).
    pub fn values_per_unit(&self) -> usize {
        if self.bits == 3 {
            32
        } else {
            32 / self.bits as usize
        }
    }

    /// u32 words in one packing unit.
    pub fn words_per_unit(&self) -> usize {
        self.values_per_unit() * self.bits as usize / 32
    }

    /// Format tag used in kernel names, e.g. `q4g32`, `q3gcol`.
    pub fn format_tag(&self) -> String {
        format!("q{}{}", self.bits, self.group.tag())
    }
}

impl fmt::Display for KernelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bits={} group={} quantizer=affine activation=f32",
            match self.op {
                Op::Gemv => "gemv".to_string(),
                Op::Gemm { m } => format!("gemm(m={m})"),
            },
            self.bits,
            self.group
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_unsupported_combinations_with_reason() {
        let e = KernelSpec::new(Op::Gemv, 5, Group::Size(32)).unwrap_err();
        assert!(e.0.contains("5 weight bits"), "{e}");
        let e = KernelSpec::new(Op::Gemv, 4, Group::Size(48)).unwrap_err();
        assert!(e.0.contains("group size 48"), "{e}");
        let e = KernelSpec::new(Op::Gemv, 3, Group::Size(16)).unwrap_err();
        assert!(e.0.contains("multiple of 32"), "{e}");
        let e = KernelSpec::new(Op::Gemm { m: 0 }, 4, Group::Column).unwrap_err();
        assert!(e.0.contains("m = 0"), "{e}");
    }

    #[test]
    fn accepts_every_documented_combination() {
        for bits in KernelSpec::SUPPORTED_BITS {
            for g in Group::SUPPORTED {
                let r = KernelSpec::new(Op::Gemv, bits, Group::Size(g));
                assert_eq!(r.is_ok(), !(bits == 3 && g == 16), "bits {bits} g {g}");
            }
            KernelSpec::new(Op::Gemm { m: 8 }, bits, Group::Column).unwrap();
        }
        assert_eq!(Group::parse("g128").unwrap(), Group::Size(128));
        assert_eq!(Group::parse("col").unwrap(), Group::Column);
        assert!(Group::parse("abc").is_err());
    }
}
