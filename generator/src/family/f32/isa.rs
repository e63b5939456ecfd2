//! Instruction sets as data.
//!
//! Each [`Isa`] names the features a kernel needs, its vector shape, its
//! register file and the template holding its primitive operations
//! (`templates/<family>/<isa>.rs`). The emitter is the same for every ISA:
//! it unrolls calls to the template's primitives; adding an ISA means adding
//! a template and an entry here.

use crate::target::{Arch, Feature, TargetDesc};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IsaId {
    Avx512f,
    Avx2,
    Neon,
    Portable,
}

/// Per-instruction cost data the performance model uses, in vector uops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UnpackCost {
    /// Shift, and, convert: ALU uops to turn one packed word vector lane-set
    /// into one f32 vector.
    pub alu_per_value: f64,
    /// Extra uops when a 3-bit value straddles two words (shift, shift, or).
    pub alu_straddle: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Isa {
    pub id: IsaId,
    /// Short name used in kernel names (`__avx512f`).
    pub name: &'static str,
    /// `None`: any architecture.
    pub arch: Option<Arch>,
    /// Target features the kernel is compiled with and checked for at run time.
    pub features: &'static [Feature],
    /// f32 lanes per vector.
    pub lanes: usize,
    /// Architectural vector registers.
    pub registers: usize,
    /// Template file, relative to the repository root.
    pub template_path: &'static str,
    /// The template's source.
    pub template: &'static str,
    pub unpack: UnpackCost,
    /// Whether the ISA has a fused multiply-add (otherwise mul + add).
    pub fused_fma: bool,
}

pub const AVX512F: Isa = Isa {
    id: IsaId::Avx512f,
    name: "avx512f",
    arch: Some(Arch::X86_64),
    features: &[Feature::Avx512f],
    lanes: 16,
    registers: 32,
    template_path: "templates/f32/avx512f.rs",
    template: include_str!("../../../../templates/f32/avx512f.rs"),
    unpack: UnpackCost {
        alu_per_value: 3.0,
        alu_straddle: 3.0,
    },
    fused_fma: true,
};

pub const AVX2: Isa = Isa {
    id: IsaId::Avx2,
    name: "avx2",
    arch: Some(Arch::X86_64),
    features: &[Feature::Avx2, Feature::Fma],
    lanes: 8,
    registers: 16,
    template_path: "templates/f32/avx2.rs",
    template: include_str!("../../../../templates/f32/avx2.rs"),
    unpack: UnpackCost {
        alu_per_value: 3.0,
        alu_straddle: 3.0,
    },
    fused_fma: true,
};

/// aarch64 Advanced SIMD: 128-bit vectors, 32 registers, fused `fmla`.
pub const NEON: Isa = Isa {
    id: IsaId::Neon,
    name: "neon",
    arch: Some(Arch::Aarch64),
    features: &[Feature::Neon],
    lanes: 4,
    registers: 32,
    template_path: "templates/f32/neon.rs",
    template: include_str!("../../../../templates/f32/neon.rs"),
    unpack: UnpackCost {
        alu_per_value: 3.0,
        alu_straddle: 3.0,
    },
    fused_fma: true,
};

/// Plain Rust on arrays; LLVM vectorises it for whatever the build targets.
pub const PORTABLE: Isa = Isa {
    id: IsaId::Portable,
    name: "portable",
    arch: None,
    features: &[],
    lanes: 8,
    registers: 16,
    template_path: "templates/f32/portable.rs",
    template: include_str!("../../../../templates/f32/portable.rs"),
    unpack: UnpackCost {
        alu_per_value: 3.0,
        alu_straddle: 3.0,
    },
    fused_fma: false,
};

/// Every ISA of the f32 family, best first.
pub const F32_FAMILY: &[Isa] = &[AVX512F, AVX2, NEON, PORTABLE];

impl Isa {
    pub fn by_name(name: &str) -> Option<Isa> {
        F32_FAMILY.iter().copied().find(|i| i.name == name)
    }

    /// Whether a CPU described by `t` can run this ISA's kernels.
    pub fn runs_on(&self, t: &TargetDesc) -> bool {
        self.arch.is_none_or(|a| a == t.arch) && self.features.iter().all(|f| t.has(*f))
    }

    /// The ISAs `t` can run, best first (always ends with the portable one).
    pub fn for_target(t: &TargetDesc) -> Vec<Isa> {
        F32_FAMILY
            .iter()
            .copied()
            .filter(|i| i.runs_on(t))
            .collect()
    }

    /// Feature names as `#[target_feature(enable = ...)]` and the detection
    /// macros spell them.
    pub fn feature_names(&self) -> Vec<&'static str> {
        self.features.iter().map(|f| feature_name(*f)).collect()
    }
}

/// The `target_feature` / detection-macro spelling of a feature: the
/// target-file spelling, except `sse4.2`.
pub fn feature_name(f: Feature) -> &'static str {
    match f {
        Feature::Sse42 => "sse4.2",
        other => other.name(),
    }
}
