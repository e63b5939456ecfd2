//! The plan type every family shares ([`Plan`]), its L1 blocks, block
//! order, where a tile came from, why a plan could not be made, and the
//! kernel naming convention.

use crate::family::{Family, FamilyIsa, TileGeometry};
use serde::Serialize;
use std::fmt;

/// A plan for one kernel of family `F` on one ISA of one target: the micro
/// tile, the L1 blocks and the model's figures, and how it was chosen.
#[derive(Clone, Debug, Serialize)]
#[serde(bound = "")]
pub struct Plan<F: Family> {
    pub target: String,
    pub isa: &'static str,
    pub spec: F::Spec,
    /// Output columns per vector.
    pub lanes: usize,
    pub tile: F::Tile,
    pub block: L1Block,
    pub order: BlockOrder,
    pub registers: F::Registers,
    pub prediction: F::Prediction,
    /// Where the tile (and blocks) came from.
    pub source: TileSource,
    /// Shape the plan was ranked for (kernels accept any shape).
    pub shape: (usize, usize),
    /// Every tile the planner could have used, best first by the model.
    pub candidates: Vec<F::Candidate>,
    /// How tuning profiles were (not) applied, for headers and messages.
    pub notes: Vec<String>,
}

impl<F: Family> Plan<F> {
    /// The plan's ISA.
    pub fn isa(&self) -> F::Isa {
        F::isa_by_name(self.isa).expect("a plan names one of its family's ISAs")
    }

    /// How the tile maps onto the layout and the kernel name.
    pub fn geometry(&self) -> TileGeometry {
        F::geometry(&self.isa(), self.tile)
    }

    /// `q4_0_gemv_1x64__avx512vnni`: see [`kernel_name`].
    pub fn kernel_name(&self) -> String {
        let g = self.geometry();
        kernel_name(
            &F::format_tag(&self.spec),
            F::op(&self.spec),
            g.rows,
            g.cols,
            g.k_unroll,
            self.isa().name(),
        )
    }
}

/// The L1 blocking (`m_b` K values by `t_b` columns) and how full it makes
/// the cache by eq. 5.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct L1Block {
    pub m_b: usize,
    pub t_b: usize,
    /// eq. 5 left-hand side, bits.
    pub lhs_bits: u64,
    /// L1 data cache size, bits (gamma).
    pub gamma_bits: u64,
    pub utilization: f64,
}

impl L1Block {
    pub fn new(m_b: usize, t_b: usize, lhs_bits: u64, gamma_bits: u64) -> L1Block {
        L1Block {
            m_b,
            t_b,
            lhs_bits,
            gamma_bits,
            utilization: lhs_bits as f64 / gamma_bits as f64,
        }
    }
}

/// Order in which a thread visits its mini-GEMV blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum BlockOrder {
    /// Column panel by column panel, K blocks inside: the weight stream is
    /// sequential and `y` stays hot; best when `x` fits in L2.
    Panel,
    /// Z-curve (Morton) order over (K block, panel): keeps both `x` and `y`
    /// blocks close when neither fits in L2.
    ZCurve,
}

/// Where the micro tile came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum TileSource {
    /// Ranked by the performance model.
    Model,
    /// Read from a tuning profile.
    Profile(String),
    /// Set by the caller.
    Fixed,
}

impl TileSource {
    /// What generated headers say after `tile from:`.
    pub fn describe(&self) -> String {
        match self {
            TileSource::Model => "performance model (no tuning profile)".to_string(),
            TileSource::Profile(path) => format!("tuning profile {path}"),
            TileSource::Fixed => "fixed by the caller".to_string(),
        }
    }
}

/// The name of a kernel in every family: `FORMAT_OP_MRxNR[cK]__ISA`.
///
/// `MR x NR` is the micro tile as rows x columns: `MR` activation rows per
/// micro kernel call (1 for a GEMV) and `NR` output columns. `cK` is the
/// K unroll, written only when it is above 1 (XNNPACK's `1x16c8`): the f32
/// family's `m_u` (independent partial sums along K); the int8 family's
/// block loop always consumes one 32-value block, so its names have none.
/// Examples: `q4g32_gemv_1x64c2__avx512f`, `q4_0_gemm_4x16__avx2`.
pub fn kernel_name(
    format: &str,
    op: crate::spec::Op,
    rows: usize,
    cols: usize,
    k_unroll: usize,
    isa: &str,
) -> String {
    let unroll = if k_unroll > 1 {
        format!("c{k_unroll}")
    } else {
        String::new()
    };
    format!("{format}_{}_{rows}x{cols}{unroll}__{isa}", op.name())
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError(pub String);

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no plan: {}", self.0)
    }
}

impl std::error::Error for PlanError {}
