//! The int8 family's micro tile and plan.

use crate::family::int8::isa::I8Isa;
use crate::family::int8::Int8;
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

/// The registers an int8 tile keeps live and the ISA's count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RegisterCount {
    pub used: usize,
    pub limit: usize,
}

/// The int8 model's figures for one core.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct I8Prediction {
    /// GB/s of weights (scales included).
    pub gbs: f64,
    pub gflops: f64,
}

/// A plan of the int8 family.
pub type I8Plan = crate::family::plan::Plan<Int8>;

impl I8Plan {
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
