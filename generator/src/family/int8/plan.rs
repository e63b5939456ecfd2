//! The int8 family's micro tile and plan.

use crate::family::int8::isa::I8Isa;
use crate::family::int8::spec::I8Spec;
use crate::family::plan::{BlockOrder, TileSource};
use serde::Serialize;

/// Tile of the int8 family: `t_u` column groups of `lanes` in the packed
/// layout; the micro kernel covers `t_sub` of them (a divisor of `t_u`) for
/// `m_r` rows, so a GEMM can trade columns for rows on the GEMV's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct I8Tile {
    pub t_u: usize,
    pub t_sub: usize,
    pub m_r: usize,
}

/// A tile the planner considered, with the model's figures for it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct I8Candidate {
    pub tile: I8Tile,
    /// Vector registers the tile keeps live.
    pub registers: usize,
    /// Predicted GB/s of weights and GFLOPS on one core.
    pub gbs: f64,
    pub gflops: f64,
}

/// A plan for one int8 kernel.
#[derive(Clone, Debug, Serialize)]
pub struct I8Plan {
    pub target: String,
    pub isa: &'static str,
    pub spec: I8Spec,
    pub lanes: usize,
    pub tile: I8Tile,
    pub m_b: usize,
    pub t_b: usize,
    pub registers: usize,
    pub register_limit: usize,
    pub l1_bits: u64,
    pub l1_gamma: u64,
    /// Predicted GB/s of weights and GFLOPS on one core.
    pub gbs: f64,
    pub gflops: f64,
    pub order: BlockOrder,
    /// Where the tile (and blocks) came from.
    pub source: TileSource,
    /// Shape the plan was ranked for (kernels accept any shape).
    pub shape: (usize, usize),
    /// Every tile the planner could have used, best first by the model (the
    /// model's pick first); for a GEMM, the tiles on the GEMV's layout.
    pub candidates: Vec<I8Candidate>,
    /// How tuning profiles were (not) applied, for headers and messages.
    pub notes: Vec<String>,
}

impl I8Plan {
    /// `q4_0_gemv_1x32__avx2`: format, op, micro tile as rows x columns
    /// (`m_r` x `t_sub * lanes`), ISA (see [`crate::family::plan::kernel_name`];
    /// no K unroll: the block loop consumes one 32-value block).
    pub fn kernel_name(&self) -> String {
        crate::family::plan::kernel_name(
            &self.spec.format_tag(),
            self.spec.op,
            self.tile.m_r,
            self.tile.t_sub * self.lanes,
            1,
            self.isa,
        )
    }

    /// The packed layout, in the Arm paper's naming: `Q4_0_8_8` is Q4_0 with
    /// 8 columns interleaved in 8-byte groups.
    pub fn layout_name(&self) -> String {
        let isa = I8Isa::by_name(self.isa).expect("plan ISA");
        format!(
            "{}_{}_{}",
            self.spec.source_type().name(),
            self.lanes * self.tile.t_u,
            isa.group_bytes
        )
    }
}
