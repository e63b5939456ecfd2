//! The L1 block search every family uses (QIGen eq. 5).
//!
//! For a chosen micro tile, find `m_b, t_b` maximising eq. 5's left-hand
//! side under the L1 size with an integer program (good_lp + microlp). The
//! product `m_b * t_b` makes eq. 5 bilinear, so `t_b` is fixed per solve
//! (one solve per panel width, whole layout tiles up to [`MAX_PANEL_TILES`])
//! and `m_b` is the integer variable, in whole K granules; each solution is
//! rounded and re-checked in integers. Among the solutions within 3% of the
//! fullest L1 use, the block with the least activation and output traffic
//! per weight byte wins ([`Footprint::traffic`]), then the fuller, then the
//! larger `m_b`, so the choice is deterministic.

use crate::family::plan::{L1Block, PlanError};
use crate::family::{Family, Footprint};
use crate::layout::align::round_up;
use crate::target::TargetDesc;
use good_lp::{constraint, microlp, variable, ProblemVariables, Solution, SolverModel};

/// Widest panel considered, in layout tiles.
pub const MAX_PANEL_TILES: usize = 64;

/// Blocks within this share of the fullest L1 use are compared by traffic.
const NEAR_FULLEST: f64 = 0.03;

/// The L1 blocks of `tile` for `spec` on `isa` (a `shape` = (K, N) matrix
/// bounds them), or `None` if no block fits the target's L1.
pub fn l1_block<F: Family>(
    spec: &F::Spec,
    isa: &F::Isa,
    target: &TargetDesc,
    tile: F::Tile,
    shape: (usize, usize),
) -> Option<L1Block> {
    let fp = F::footprint(spec, isa);
    let g = F::geometry(isa, tile);
    let gamma = target.cache.l1d * 8;
    let granule = fp.k_granule;
    let tw = g.layout_cols;
    let max_m_b = round_up(shape.0.max(1), granule);
    let max_tiles = round_up(shape.1.max(1), tw) / tw;
    let mut solved: Vec<L1Block> = Vec::new();
    for tiles in 1..=max_tiles.min(MAX_PANEL_TILES) {
        let t_b = tiles * tw;
        let Some(a) = solve_m_b_units(&fp, g.rows, t_b, gamma, max_m_b / granule) else {
            continue;
        };
        let m_b = a * granule;
        solved.push(L1Block::new(m_b, t_b, fp.bits(g.rows, m_b, t_b), gamma));
    }
    let max_lhs = solved.iter().map(|b| b.lhs_bits).max()?;
    let traffic = |b: &L1Block| fp.traffic(g.rows, b.m_b, b.t_b);
    solved
        .into_iter()
        .filter(|b| b.lhs_bits as f64 >= (1.0 - NEAR_FULLEST) * max_lhs as f64)
        .min_by(|a, b| {
            traffic(a)
                .total_cmp(&traffic(b))
                .then(b.lhs_bits.cmp(&a.lhs_bits))
                .then(b.m_b.cmp(&a.m_b))
        })
}

/// Checks caller-given blocks (a tuning profile's measured choice) against
/// eq. 5 and the layout's divisibility rules.
pub fn fixed_block<F: Family>(
    spec: &F::Spec,
    isa: &F::Isa,
    target: &TargetDesc,
    tile: F::Tile,
    (m_b, t_b): (usize, usize),
) -> Result<L1Block, PlanError> {
    let fp = F::footprint(spec, isa);
    let g = F::geometry(isa, tile);
    let (granule, tw) = (fp.k_granule, g.layout_cols);
    if m_b == 0 || t_b == 0 || !m_b.is_multiple_of(granule) || !t_b.is_multiple_of(tw) {
        return Err(PlanError(format!(
            "blocks m_b={m_b} t_b={t_b}: m_b must be a multiple of {granule} and t_b of {tw}"
        )));
    }
    let lhs = fp.bits(g.rows, m_b, t_b);
    let gamma = target.cache.l1d * 8;
    if lhs > gamma {
        return Err(PlanError(format!(
            "blocks m_b={m_b} t_b={t_b} need {lhs} L1 bits, {} has {gamma}",
            target.name
        )));
    }
    Ok(L1Block::new(m_b, t_b, lhs, gamma))
}

/// The integer program for one panel width: maximise eq. 5's left-hand side
/// over `m_b = granule * a`, `1 <= a <= a_max`, subject to eq. 5.
fn solve_m_b_units(
    fp: &Footprint,
    m_r: usize,
    t_b: usize,
    gamma: u64,
    a_max: usize,
) -> Option<usize> {
    let granule = fp.k_granule;
    let fits = |a: usize| fp.bits(m_r, a * granule, t_b) <= gamma;
    if a_max == 0 || !fits(1) {
        return None;
    }
    // eq. 5 is affine in m_b for a fixed t_b: constant + per_unit * a.
    let constant = fp.bits(m_r, 0, t_b) as f64;
    let per_unit = fp.bits(m_r, granule, t_b) as f64 - constant;
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
