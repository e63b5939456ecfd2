//! Plan data shared by every family: block order, where a tile came from,
//! why a plan could not be made, and the kernel naming convention.

use serde::Serialize;
use std::fmt;

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
