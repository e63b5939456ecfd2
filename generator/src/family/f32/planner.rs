//! The search: which micro tile and which L1 blocks a kernel uses.
//!
//! 1. Enumerate micro tiles `(m_u, t_u, m_r)` that fit the ISA's registers
//!    ([`RegisterUse`], eq. 4) and rank them with the model's prediction
//!    ([`model::predict`]) for a representative shape.
//! 2. For the chosen tile, find `m_b, t_b` maximising eq. 5's left-hand side
//!    under the L1 size with an integer program (good_lp + microlp). The
//!    product `m_b * t_b` makes eq. 5 bilinear, so `t_b` is fixed per solve
//!    (one solve per panel width) and `m_b` is the integer variable; each
//!    solution is rounded and re-checked in integers. Among the solutions
//!    within 3% of the fullest L1 use, the block with the least x/y traffic
//!    per weight byte wins (then fuller, then larger `m_b`), so the choice is
//!    deterministic.
//!
//! The model and this search are kept apart: a tuning profile replaces step 1
//! with measured ranks without touching step 2.

use crate::family::f32::isa::Isa;
use crate::family::f32::model;
use crate::family::f32::model::{MicroTile, Prediction, RegisterUse};
use crate::family::plan::BlockOrder;
use crate::family::plan::PlanError;
use crate::family::plan::TileSource;
use crate::layout::align::round_up;
use crate::layout::f32::{Layout, Tiling};
use crate::spec::{KernelSpec, Op};
use crate::target::TargetDesc;
use good_lp::{constraint, microlp, variable, ProblemVariables, Solution, SolverModel};
use serde::Serialize;

/// A ranked candidate micro tile.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    pub tile: MicroTile,
    pub registers: RegisterUse,
    pub prediction: Prediction,
}

/// The L1 blocking and how full it makes the cache.
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

/// A complete plan for one spec on one ISA of one target.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub target: String,
    pub isa: &'static str,
    pub spec: KernelSpec,
    pub lanes: usize,
    pub tile: MicroTile,
    pub block: L1Block,
    pub order: BlockOrder,
    pub registers: RegisterUse,
    pub prediction: Prediction,
    pub source: TileSource,
    /// Shape the plan was ranked for (kernels accept any shape).
    pub shape: (usize, usize),
    /// Every feasible tile, best first.
    pub candidates: Vec<Candidate>,
    /// How tuning profiles were (not) applied, for headers and messages.
    pub notes: Vec<String>,
}

impl Plan {
    /// `q4g32_gemv_1x64c2__avx512f`: format, op, micro tile as rows x
    /// columns (`m_r` x `t_u * lanes`), `c{m_u}` for a K unroll above 1, ISA
    /// (see [`crate::family::plan::kernel_name`]).
    pub fn kernel_name(&self) -> String {
        crate::family::plan::kernel_name(
            &self.spec.format_tag(),
            self.spec.op,
            self.tile.m_r,
            self.tile.t_u * self.lanes,
            self.tile.m_u,
            self.isa,
        )
    }

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
/// Widest panel considered, in tiles.
const MAX_PANEL_TILES: usize = 64;

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
    let gamma = target.cache.l1d * 8;
    let granule = Layout::k_granule(spec.bits, spec.group);
    let tw = isa.lanes * tile.t_u;
    let max_m_b = round_up(shape.0.max(1), granule);
    let max_tiles = round_up(shape.1.max(1), tw) / tw;
    let mut solved: Vec<L1Block> = Vec::new();
    for tiles in 1..=max_tiles.min(MAX_PANEL_TILES) {
        let t_b = tiles * tw;
        let Some(a) = solve_m_b_units(spec.bits, tile.m_r, granule, t_b, gamma, max_m_b / granule)
        else {
            continue;
        };
        let m_b = a * granule;
        let lhs = model::eq5_lhs(spec.bits, tile.m_r, m_b, t_b);
        solved.push(L1Block {
            m_b,
            t_b,
            lhs_bits: lhs,
            gamma_bits: gamma,
            utilization: lhs as f64 / gamma as f64,
        });
    }
    // Eq. 5 has many near-optimal (m_b, t_b); among those within 3% of the
    // fullest, take the block that moves the least activation and output
    // traffic per weight byte: x (4 m_r m_b bytes) is reused across the
    // panel's tiles and y (8 m_r t_b bytes, load + store) across the block's
    // K, so balanced blocks win over one-tile panels or one-group blocks.
    let max_lhs = solved.iter().map(|b| b.lhs_bits).max()?;
    let traffic = |b: &L1Block| {
        let (m_r, m_b, t_b) = (tile.m_r as f64, b.m_b as f64, b.t_b as f64);
        (4.0 * m_r * m_b + 8.0 * m_r * t_b) / (m_b * t_b * spec.bits as f64 / 8.0)
    };
    solved
        .into_iter()
        .filter(|b| b.lhs_bits as f64 >= 0.97 * max_lhs as f64)
        .min_by(|a, b| {
            traffic(a)
                .total_cmp(&traffic(b))
                .then(b.lhs_bits.cmp(&a.lhs_bits))
                .then(b.m_b.cmp(&a.m_b))
        })
}

/// The integer program for one panel width: maximise eq. 5's left-hand side
/// over `m_b = granule * a`, `1 <= a <= a_max`, subject to eq. 5.
fn solve_m_b_units(
    bits: u32,
    m_r: usize,
    granule: usize,
    t_b: usize,
    gamma: u64,
    a_max: usize,
) -> Option<usize> {
    let fits = |a: usize| model::eq5_lhs(bits, m_r, a * granule, t_b) <= gamma;
    if a_max == 0 || !fits(1) {
        return None;
    }
    let per_unit = (32 * m_r * granule + bits as usize * granule * t_b) as f64;
    let constant = (32 * m_r * t_b) as f64;
    let mut vars = ProblemVariables::new();
    let a = vars.add(variable().integer().min(1).max(a_max as f64));
    let solution = vars
        .maximise(per_unit * a + constant)
        .using(microlp)
        .with(constraint!(per_unit * a + constant <= gamma as f64))
        .solve()
        .ok()?;
    // The solver answers in floats: round, then walk to the integer optimum.
    let mut a = (solution.value(a).round().max(1.0) as usize).min(a_max);
    while a > 1 && !fits(a) {
        a -= 1;
    }
    while a < a_max && fits(a + 1) {
        a += 1;
    }
    Some(a)
}

/// Checks caller-given blocks against eq. 5 and the divisibility conditions.
fn fixed_block(
    spec: &KernelSpec,
    isa: &Isa,
    target: &TargetDesc,
    tile: MicroTile,
    (m_b, t_b): (usize, usize),
) -> Result<L1Block, PlanError> {
    let granule = Layout::k_granule(spec.bits, spec.group);
    let tw = isa.lanes * tile.t_u;
    if m_b == 0 || t_b == 0 || !m_b.is_multiple_of(granule) || !t_b.is_multiple_of(tw) {
        return Err(PlanError(format!(
            "blocks m_b={m_b} t_b={t_b}: m_b must be a multiple of {granule} and t_b of {tw}"
        )));
    }
    let lhs = model::eq5_lhs(spec.bits, tile.m_r, m_b, t_b);
    let gamma = target.cache.l1d * 8;
    if lhs > gamma {
        return Err(PlanError(format!(
            "blocks m_b={m_b} t_b={t_b} need {lhs} L1 bits, {} has {gamma}",
            target.name
        )));
    }
    Ok(L1Block {
        m_b,
        t_b,
        lhs_bits: lhs,
        gamma_bits: gamma,
        utilization: lhs as f64 / gamma as f64,
    })
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
        let gamma = target.cache.l1d * 8;
        let block = L1Block {
            m_b,
            t_b,
            lhs_bits: lhs,
            gamma_bits: gamma,
            utilization: lhs as f64 / gamma as f64,
        };
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
                Some(b) => fixed_block(spec, isa, target, tile, b)?,
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
