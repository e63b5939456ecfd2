//! Kernel families: ways of computing `y = x W` on a CPU. [`f32`] (QIGen,
//! paper 001) unpacks weights to f32 and multiplies with FMA; [`int8`]
//! (papers 000 and 002) quantizes activations to int8 and uses dot-product
//! instructions on packed integer weights.
//!
//! A family is a [`Family`] implementation: its ISAs as data
//! ([`FamilyIsa`]), its micro-tile candidates and register budget (QIGen
//! eq. 4), its L1 footprint terms (eq. 5), its cost model and its micro
//! kernel emitter. What every family shares is written once against the
//! trait: the plan type ([`plan::Plan`]), the L1 block search and its
//! tie-break ([`search`]), ISA selection, the file header and emitted file
//! ([`file`]), and the registry entries
//! ([`crate::registry`]). The model terms stay each family's own.

pub mod f32;
pub mod file;
pub mod int8;
pub mod plan;
pub mod search;

use crate::emit::EmitError;
use crate::spec::Op;
use crate::target::{Arch, TargetDesc};
use plan::Plan;
use proc_macro2::TokenStream;
use serde::Serialize;
use std::fmt::Debug;

pub use f32::F32;
pub use int8::Int8;

/// One ISA of a family, as data.
pub trait FamilyIsa: Copy + Debug + 'static {
    /// Short name used in kernel names (`__avx512vnni`) and on the CLI.
    fn name(&self) -> &'static str;
    /// `None`: any architecture (the portable ISA).
    fn arch(&self) -> Option<Arch>;
    /// `#[target_feature]` / run-time detection names.
    fn target_features(&self) -> Vec<&'static str>;
    /// Whether a CPU described by `t` can run the ISA's kernels.
    fn runs_on(&self, t: &TargetDesc) -> bool;
    /// Output columns per vector.
    fn lanes(&self) -> usize;
    /// Architectural vector registers (eta of eq. 4).
    fn registers(&self) -> usize;
    /// The template the emitter unrolls, relative to the repository root.
    fn template_path(&self) -> &'static str;
    /// The run-time check a registry uses before calling the ISA's kernels.
    fn detector(&self, name: &syn::Ident) -> TokenStream {
        crate::emit::detector_for(self.arch(), &self.target_features(), name)
    }
}

/// The terms of QIGen's eq. 5 for a family, in bits per value:
/// `8 act_bytes m_r m_b + weight_half_bits m_b t_b / 2 + 32 m_r t_b <= gamma`
/// (activations, weights with their scales, f32 outputs of `m_r` rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes of one activation value in the kernel (4 for f32, 1 for int8).
    pub act_bytes: u64,
    /// Weight bits per value, scales included, times two (int8: 4-bit
    /// values with an f16 scale per 32 are 4.5 bits, 9 half bits).
    pub weight_half_bits: u64,
    /// `m_b` is a multiple of this many K values (whole groups or blocks).
    pub k_granule: usize,
}

impl Footprint {
    /// Left-hand side of eq. 5 in bits for `m_r` rows and blocks `m_b x t_b`.
    pub fn bits(&self, m_r: usize, m_b: usize, t_b: usize) -> u64 {
        let (m_r, m_b, t_b) = (m_r as u64, m_b as u64, t_b as u64);
        8 * self.act_bytes * m_r * m_b + self.weight_half_bits * m_b * t_b / 2 + 32 * m_r * t_b
    }

    /// Activation and output bytes moved per weight byte by one block:
    /// x (`act_bytes m_r m_b`) is reused across the panel's tiles and y
    /// (`8 m_r t_b`, load + store) across the block's K. The search's
    /// tie-break prefers balanced blocks (low traffic).
    pub fn traffic(&self, m_r: usize, m_b: usize, t_b: usize) -> f64 {
        let (m_r, m_b, t_b) = (m_r as f64, m_b as f64, t_b as f64);
        (self.act_bytes as f64 * m_r * m_b + 8.0 * m_r * t_b)
            / (m_b * t_b * self.weight_half_bits as f64 / 16.0)
    }
}

/// How a micro tile maps onto the packed layout and the kernel name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileGeometry {
    /// Activation rows per micro kernel call (`MR`).
    pub rows: usize,
    /// Output columns the micro kernel covers (`NR`).
    pub cols: usize,
    /// Columns of one packed layout tile: `t_b` is a multiple of it.
    pub layout_cols: usize,
    /// K unroll written as `cK` in the name (1: none).
    pub k_unroll: usize,
}

/// A kernel family. Implementations are unit types ([`F32`], [`Int8`]);
/// the generic code in [`plan`], [`search`], [`crate::emit`],
/// [`crate::registry`] and [`crate::generate`] is written once against
/// this trait.
pub trait Family: Clone + Debug + 'static {
    /// `f32` or `int8`: in headers, profiles and registry comments.
    const NAME: &'static str;
    type Isa: FamilyIsa;
    /// What one kernel computes: op and weight format.
    type Spec: Copy + Debug + Serialize;
    type Tile: Copy + PartialEq + Debug + Serialize;
    /// The register budget of a tile (eq. 4 as the family counts it).
    type Registers: Clone + Debug + Serialize;
    type Prediction: Clone + Debug + Serialize;
    /// A tile the planner ranked, with the model's figures for it.
    type Candidate: Clone + Debug + Serialize;

    /// Every ISA of the family, best first.
    fn isas() -> &'static [Self::Isa];

    /// The ISA called `name`.
    fn isa_by_name(name: &str) -> Option<Self::Isa> {
        Self::isas().iter().copied().find(|i| i.name() == name)
    }

    /// Whether `isa` has kernels for `spec`'s format, and if not why.
    fn supports(_isa: &Self::Isa, _spec: &Self::Spec) -> Result<(), String> {
        Ok(())
    }

    fn op(spec: &Self::Spec) -> Op;

    /// The format part of kernel names (`q4_0`, `q4g32`).
    fn format_tag(spec: &Self::Spec) -> String;

    /// The runtime's name of the format (`KernelEntry::format`).
    fn entry_format(spec: &Self::Spec) -> String;

    /// eq. 4: the registers `tile` keeps live.
    fn registers(spec: &Self::Spec, isa: &Self::Isa, tile: Self::Tile) -> Self::Registers;

    /// Every register-feasible tile, best first by the cost model, for
    /// `shape` (K, N).
    fn rank_tiles(
        spec: &Self::Spec,
        isa: &Self::Isa,
        target: &TargetDesc,
        shape: (usize, usize),
    ) -> Vec<Self::Candidate>;

    /// eq. 5's terms for `spec`'s layout on `isa` (its weight bytes per
    /// value depend on the scale stream the ISA's kernels read).
    fn footprint(spec: &Self::Spec, isa: &Self::Isa) -> Footprint;

    fn geometry(isa: &Self::Isa, tile: Self::Tile) -> TileGeometry;

    /// The cost model: one core's speed with `tile` for a `shape` matrix.
    fn predict(
        spec: &Self::Spec,
        isa: &Self::Isa,
        target: &TargetDesc,
        tile: Self::Tile,
        shape: (usize, usize),
    ) -> Self::Prediction;

    /// The kernel module of `plan`: micro kernels, driver, constants.
    fn emit_kernel(plan: &Plan<Self>) -> Result<TokenStream, EmitError>;

    /// The header's `target:` line, after `// target: `.
    fn target_line(target: &TargetDesc) -> String;

    /// Header lines about the whole file, after the target line.
    fn file_notes(target: &TargetDesc) -> Vec<String>;

    /// Header lines of one kernel (after `// kernel NAME`, before `tile from:`).
    fn describe(plan: &Plan<Self>) -> Vec<String>;

    /// The family's `FamilyParams` variant of a registry entry, written
    /// against the runtime path `rt` with the kernel module imported as `k`.
    fn entry_params(rt: &syn::Path) -> TokenStream;
}
