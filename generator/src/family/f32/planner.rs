//! The search: which micro tile and which L1 blocks a kernel uses.
//!
//! 1. Enumerate micro tiles `(m_u, t_u, m_r)` that fit the ISA's registers
//!    ([`RegisterUse`], eq. 4) and rank them with the model's prediction
//!    ([`model::predict`]) for a representative shape.
//! 2. For the chosen tile, find `m_b, t_b` with the L1 block search every
//!    family shares ([`crate::family::search`]: an integer program for eq. 5,
//!    then the 3% tie-break on traffic).
//!
//! The model and this search are kept apart: a tuning profile replaces step 1
//! with measured ranks without touching step 2.

use crate::family::f32::isa::Isa;
use crate::family::f32::model;
use crate::family::f32::model::{MicroTile, Prediction, RegisterUse};
use crate::family::f32::F32;
use crate::family::plan::{BlockOrder, L1Block, PlanError, TileSource};
use crate::family::search;
use crate::layout::f32::{Layout, Tiling};
use crate::spec::{KernelSpec, Op};
use crate::target::TargetDesc;
use serde::Serialize;

/// A ranked candidate micro tile.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    pub tile: MicroTile,
    pub registers: RegisterUse,
    pub prediction: Prediction,
}

/// A plan of the f32 family.
pub type Plan = crate::family::plan::Plan<F32>;

impl Plan {
    pub fn layout(&self, k: usize, n: usize) -> Layout {
        let tiling = Tiling {
            lanes: self.lanes,
            t_u: self.tile.t_u,
            m_b: self.block.m_b,
            t_b: self.block.t_b,
        };
        Layout::new(self.spec.bits, self.spec.group, tiling, k, n)
    }
}

/// Options that steer the planner away from its defaults.
#[derive(Clone, Debug, Default)]
pub struct PlanOptions {
    /// Representative shape (K, N) for ranking and block bounds; 4096x4096 if unset.
    pub shape: Option<(usize, usize)>,
    /// Use this tile instead of the model's pick (must fit the registers).
    pub tile: Option<MicroTile>,
    /// Where a fixed tile came from (a profile path), for the header.
    pub tile_source: Option<TileSource>,
    pub order: Option<BlockOrder>,
    /// Reuse another plan's packed layout `(t_u, m_b, t_b)`: the GEMM kernel
    /// of a matrix then reads the same packed weights as its GEMV kernel.
    pub layout: Option<(usize, usize, usize)>,
    /// With `tile`: use these L1 blocks `(m_b, t_b)` instead of solving eq. 5
    /// (a tuning profile's measured choice). They must keep eq. 5 and the
    /// divisibility conditions.
    pub block: Option<(usize, usize)>,
}

/// Most activation rows a GEMM micro kernel keeps in registers.
const MAX_M_R: usize = 8;

/// Every register-feasible micro tile, best first by the model.
pub fn rank_tiles(
    spec: &KernelSpec,
    isa: &Isa,
    target: &TargetDesc,
    shape: (usize, usize),
) -> Vec<Candidate> {
    let unit = spec.values_per_unit();
    let max_rows = match spec.op {
        Op::Gemv => 1,
        Op::Gemm { m } => m.min(MAX_M_R),
    };
    let mut out = Vec::new();
    for m_r in 1..=max_rows {
        for m_u in (1..=unit).filter(|d| unit.is_multiple_of(*d)) {
            for t_u in 1..=isa.registers {
                let tile = MicroTile { m_u, t_u, m_r };
                let registers = RegisterUse::of(spec, isa, tile);
                if !registers.fits() || !model::eq4_holds(tile, isa.registers) {
                    continue;
                }
                let prediction = model::predict(spec, isa, target, tile, shape.0, shape.1);
                out.push(Candidate {
                    tile,
                    registers,
                    prediction,
                });
            }
        }
    }
    // Fastest first; among equals the one with more compute headroom, then
    // more output vectors (fewer x broadcasts per weight), then fewer
    // broadcasts in flight. Total order, so the ranking is deterministic.
    out.sort_by(|a, b| {
        let time = |c: &Candidate| 1.0 / c.prediction.gbs;
        let work =
            |c: &Candidate| 1.0 / (c.prediction.compute_gbs * c.prediction.column_efficiency);
        time(a)
            .total_cmp(&time(b))
            .then(work(a).total_cmp(&work(b)))
            .then(b.tile.t_u.cmp(&a.tile.t_u))
            .then(a.tile.m_u.cmp(&b.tile.m_u))
            .then(b.tile.m_r.cmp(&a.tile.m_r))
    });
    out
}

/// Solves eq. 5 for the L1 blocks of `tile`, or `None` if no block fits.
pub fn solve_l1(
    spec: &KernelSpec,
    isa: &Isa,
    target: &TargetDesc,
    tile: MicroTile,
    shape: (usize, usize),
) -> Option<L1Block> {
    search::l1_block::<F32>(spec, isa, target, tile, shape)
}

/// Predicted-time slack within which a tile that fills L1 better is preferred.
const NEAR_BEST: f64 = 0.03;
/// eq. 5 utilisation the planner aims for.
const L1_TARGET: f64 = 0.9;

/// The model's best tile with a feasible L1 block; among tiles predicted
/// within [`NEAR_BEST`] of it, the first whose block fills at least
/// [`L1_TARGET`] of L1 (the block sizes' granularity can leave the best
/// tile's block well short of it).
fn pick_tile(
    spec: &KernelSpec,
    isa: &Isa,
    target: &TargetDesc,
    candidates: &[Candidate],
    shape: (usize, usize),
) -> Option<(Candidate, L1Block, TileSource)> {
    let mut feasible = candidates.iter().filter_map(|c| {
        solve_l1(spec, isa, target, c.tile, shape).map(|b| (c.clone(), b, TileSource::Model))
    });
    let best = feasible.next()?;
    if best.1.utilization >= L1_TARGET {
        return Some(best);
    }
    let limit = best.0.prediction.gbs * (1.0 - NEAR_BEST);
    feasible
        .take_while(|(c, _, _)| c.prediction.gbs >= limit)
        .find(|(_, b, _)| b.utilization >= L1_TARGET)
        .or(Some(best))
}

/// Plans `spec` for `isa` on `target`.
pub fn plan(
    spec: &KernelSpec,
    isa: &Isa,
    target: &TargetDesc,
    opts: &PlanOptions,
) -> Result<Plan, PlanError> {
    spec.validate().map_err(|e| PlanError(e.to_string()))?;
    if !isa.runs_on(target) {
        return Err(PlanError(format!(
            "ISA {} needs features {:?}, which target {} does not list",
            isa.name,
            isa.feature_names(),
            target.name
        )));
    }
    let shape = opts.shape.unwrap_or((4096, 4096));
    let mut candidates = rank_tiles(spec, isa, target, shape);
    if let Some((t_u, m_b, t_b)) = opts.layout {
        candidates.retain(|c| c.tile.t_u == t_u);
        let best = candidates.first().cloned().ok_or_else(|| {
            PlanError(format!(
                "no {} micro tile with t_u = {t_u} fits the registers for {spec}",
                isa.name
            ))
        })?;
        // eq. 5 in the paper's GEMV form: the shared block was solved for it.
        let lhs = model::eq5_lhs(spec.bits, 1, m_b, t_b);
        let block = L1Block::new(m_b, t_b, lhs, target.cache.l1d * 8);
        return Ok(Plan {
            target: target.name.clone(),
            isa: isa.name,
            spec: *spec,
            lanes: isa.lanes,
            tile: best.tile,
            block,
            order: opts.order.unwrap_or(BlockOrder::Panel),
            registers: best.registers,
            prediction: best.prediction,
            source: opts.tile_source.clone().unwrap_or(TileSource::Model),
            shape,
            candidates,
            notes: Vec::new(),
        });
    }
    let (chosen, block, source) = match opts.tile {
        Some(tile) => {
            let regs = RegisterUse::of(spec, isa, tile);
            if !regs.fits() || !model::eq4_holds(tile, isa.registers) {
                return Err(PlanError(format!(
                    "tile m_u={} t_u={} m_r={} needs {} vector registers, {} has {}",
                    tile.m_u, tile.t_u, tile.m_r, regs.total, isa.name, isa.registers
                )));
            }
            if !spec.values_per_unit().is_multiple_of(tile.m_u) || tile.m_r > spec.op.rows().max(1)
            {
                return Err(PlanError(format!(
                    "tile m_u={} m_r={}: m_u must divide {} and m_r must not exceed the {} rows of the op",
                    tile.m_u,
                    tile.m_r,
                    spec.values_per_unit(),
                    spec.op.rows()
                )));
            }
            let block = match opts.block {
                Some(b) => search::fixed_block::<F32>(spec, isa, target, tile, b)?,
                None => solve_l1(spec, isa, target, tile, shape).ok_or_else(|| {
                    PlanError(format!(
                        "tile {tile:?} leaves no L1 block that satisfies eq. 5"
                    ))
                })?,
            };
            let prediction = model::predict(spec, isa, target, tile, shape.0, shape.1);
            let source = opts.tile_source.clone().unwrap_or(TileSource::Fixed);
            (
                Candidate {
                    tile,
                    registers: regs,
                    prediction,
                },
                block,
                source,
            )
        }
        None => pick_tile(spec, isa, target, &candidates, shape).ok_or_else(|| {
            PlanError(format!(
                "no micro tile of {} fits both {} registers and a {} KiB L1 for {}",
                isa.name,
                isa.registers,
                target.cache.l1d / 1024,
                spec
            ))
        })?,
    };
    let x_bytes = 4 * shape.0 * chosen.tile.m_r;
    let order = opts
        .order
        .unwrap_or(if x_bytes as u64 <= target.cache.l2 / 2 {
            BlockOrder::Panel
        } else {
            BlockOrder::ZCurve
        });
    Ok(Plan {
        target: target.name.clone(),
        isa: isa.name,
        spec: *spec,
        lanes: isa.lanes,
        tile: chosen.tile,
        block,
        order,
        registers: chosen.registers,
        prediction: chosen.prediction,
        source,
        shape,
        candidates,
        notes: Vec::new(),
    })
}
