//! The performance model: what a micro tile costs on a target, kept apart from
//! the search over tiles ([`crate::family::f32::planner`]).
//!
//! Three parts:
//! - **registers** (QIGen eq. 4, per ISA): accumulators + weight registers +
//!   broadcast registers must fit the ISA's register file;
//! - **L1** (eq. 5): the x block, the weight block and the y block of one
//!   mini-GEMV must fit the L1 data cache;
//! - **roofline** (AI-PC eq. 1-3): time is the larger of the weight stream at
//!   the core's bandwidth and the up-convert + FMA work at the core's issue
//!   rate, which predicts GB/s of weights and GFLOPS for a plan.
//!
//! Three corrections came from timing the candidates with `kgen tune` on a
//! Zen 3 (4096x4096 q4g32, where the earlier model's pick was 1.08x the best
//! GEMV and 1.12x the best m=32 GEMM):
//! - GB/s count packed weights only, as the tuner and benches do; the
//!   scales and zeros are streamed beside them (the earlier figures counted
//!   them, which read as a 40% optimistic model);
//! - the 4-bit unpack keeps 7 masks live: a tile that leaves some without a
//!   register reloads them at every use ([`RegisterUse::spilled_masks`]);
//! - the FMA chains restart each group, so the out-of-order window
//!   (`core.vector_window`) overlaps consecutive groups' chains and only
//!   the part it cannot hold is exposed latency.
//!
//! Instruction counts come from [`unpack_steps`], the same description the
//! emitter unrolls, so the model counts what the generated code executes.

use crate::family::f32::isa::Isa;
use crate::spec::{Group, KernelSpec};
use crate::target::TargetDesc;
use serde::Serialize;

/// How one value of a packing unit is pulled out of its words.
///
/// Most values are never shifted: masking a word in place leaves
/// `q * 2^shift`, which converts to f32 exactly (a few significant bits),
/// and the kernel multiplies it by an activation pre-scaled by `2^-shift`
/// ([`UnpackStep::x_scale`]). The factor is folded into the activations once
/// per call instead of a shift per weight vector, as the Arm paper folds the
/// nibble factor 16 into the scale. Only the value that reaches the sign bit
/// (and 3-bit values straddling two words) is shifted down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnpackStep {
    /// Word within the unit holding the value's low bits.
    pub word: usize,
    /// Bit position of the value in that word.
    pub shift: u32,
    /// Whether the value continues into the next word (3-bit only).
    pub straddles: bool,
    /// Masked in place (no shift); its activation is pre-scaled by `2^-shift`.
    pub in_place: bool,
    /// Whether a mask is needed (the top value of a word needs none).
    pub needs_mask: bool,
}

impl UnpackStep {
    /// Factor the activation at this position is multiplied by beforehand.
    pub fn x_scale(&self) -> f32 {
        if self.in_place {
            (-(self.shift as f32)).exp2()
        } else {
            1.0
        }
    }

    /// Right shift the kernel applies (0: none).
    pub fn applied_shift(&self) -> u32 {
        if self.in_place {
            0
        } else {
            self.shift
        }
    }
}

/// The unpack sequence for one packing unit of `bits`-bit values.
pub fn unpack_steps(bits: u32) -> Vec<UnpackStep> {
    let values = if bits == 3 { 32 } else { 32 / bits as usize };
    (0..values)
        .map(|i| {
            let bit = i * bits as usize;
            let word = bit / 32;
            let shift = (bit % 32) as u32;
            let straddles = shift + bits > 32;
            // Below the sign bit, so the signed convert sees q * 2^shift >= 0.
            let in_place = !straddles && shift + bits <= 31;
            UnpackStep {
                word,
                shift,
                straddles,
                in_place,
                needs_mask: straddles || shift + bits < 32,
            }
        })
        .collect()
}

/// Distinct unpack masks the micro kernel splats once and keeps live: one
/// per in-place position (the emitter's `mask_<shift>`), 7 for 4-bit.
pub fn unpack_masks(bits: u32) -> usize {
    unpack_steps(bits)
        .iter()
        .filter(|s| s.needs_mask)
        .map(|s| if s.in_place { s.shift } else { 0 })
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// Activation pre-scale factors for the positions of one packing unit.
pub fn x_scales(bits: u32) -> Vec<f32> {
    unpack_steps(bits).iter().map(UnpackStep::x_scale).collect()
}

/// Vector ALU uops to unpack one unit for one column vector.
pub fn unpack_alu_ops(bits: u32) -> usize {
    unpack_steps(bits)
        .iter()
        .map(|s| {
            let shift = usize::from(s.applied_shift() != 0);
            let straddle = if s.straddles { 2 } else { 0 }; // shift left + or
            shift + straddle + usize::from(s.needs_mask) + 1 // + convert
        })
        .sum()
}

/// A micro tile: `m_u` broadcast values x `t_u` output vectors, for `m_r`
/// activation rows at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct MicroTile {
    pub m_u: usize,
    pub t_u: usize,
    pub m_r: usize,
}

/// Register use of a micro tile (eq. 4 made per ISA).
///
/// The terms follow eq. 4 (`m_u + m_u t_u + t_u <= eta`) with the roles the
/// emitted code gives them: `m_u t_u` accumulators (m_u independent partial
/// sums per output vector, so FMA chains are m_u times shorter), `t_u`
/// packed weight words, and the broadcast activations; times `m_r` rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RegisterUse {
    /// m_u x t_u x m_r partial sums.
    pub accumulators: usize,
    /// t_u packed word vectors (two per column vector while a 3-bit value
    /// straddles words) plus the one unpacked weight in flight.
    pub weights: usize,
    /// One broadcast activation per row, plus one loaded ahead of its use.
    pub broadcast: usize,
    /// The unpack masks ([`unpack_masks`]), splatted once per call.
    pub masks: usize,
    /// accumulators + weights + broadcast: what must stay in registers.
    pub total: usize,
    /// The ISA's register count (eta).
    pub limit: usize,
}

impl RegisterUse {
    pub fn of(spec: &KernelSpec, isa: &Isa, tile: MicroTile) -> RegisterUse {
        let accumulators = tile.m_u * tile.t_u * tile.m_r;
        let words = if spec.bits == 3 { 2 } else { 1 };
        let weights = tile.t_u * words + 1;
        let broadcast = tile.m_r + 1;
        RegisterUse {
            accumulators,
            weights,
            broadcast,
            masks: unpack_masks(spec.bits),
            total: accumulators + weights + broadcast,
            limit: isa.registers,
        }
    }

    pub fn fits(&self) -> bool {
        self.total <= self.limit
    }

    /// Masks that do not fit beside the tile: the compiler reloads each from
    /// memory at every use (one load per weight vector and mask).
    pub fn spilled_masks(&self) -> usize {
        (self.total + self.masks)
            .saturating_sub(self.limit)
            .min(self.masks)
    }
}

/// QIGen eq. 4 as printed: `m_u + m_u t_u + t_u <= eta`.
pub fn eq4_holds(tile: MicroTile, eta: usize) -> bool {
    tile.m_u + tile.m_u * tile.t_u + tile.t_u <= eta
}

/// Left-hand side of eq. 5 in bits, with the x and y terms counted for the
/// `m_r` rows a micro kernel keeps in flight (m_r = 1 is the paper's form).
pub fn eq5_lhs(bits: u32, m_r: usize, m_b: usize, t_b: usize) -> u64 {
    let (m_r, m_b, t_b) = (m_r as u64, m_b as u64, t_b as u64);
    32 * m_r * m_b + bits as u64 * m_b * t_b + 32 * m_r * t_b
}

/// Why a plan is as fast as the model says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Bound {
    Memory,
    Compute,
}

/// The roofline estimate for a plan on a shape.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Prediction {
    /// Core cycles per packing unit of one tile (compute side).
    pub cycles_per_unit_tile: f64,
    /// Packed weight bytes one core can up-convert and multiply per second.
    /// Every GB/s here counts packed weights only (`k n bits / 8`), as
    /// `kgen tune` and the benches do; scales and zeros stream on top.
    pub compute_gbs: f64,
    /// Packed weight bytes one core can stream per second: its bandwidth
    /// less the share the scales and zeros take.
    pub memory_gbs: f64,
    /// Predicted GB/s of weights on one core, after padding waste.
    pub gbs: f64,
    /// Predicted GFLOPS (2 m k n per call) on one core.
    pub gflops: f64,
    /// Predicted GB/s when every core of the target runs.
    pub gbs_all_cores: f64,
    pub bound: Bound,
    /// Fraction of computed columns that are real (n / n_pad).
    pub column_efficiency: f64,
}

/// Cycles of FMA latency an accumulator chain must hide.
const FMA_LATENCY: f64 = 4.0;

/// Predicts one core's speed for `spec` with `tile` on `isa` for a `k x n` matrix.
pub fn predict(
    spec: &KernelSpec,
    isa: &Isa,
    target: &TargetDesc,
    tile: MicroTile,
    k: usize,
    n: usize,
) -> Prediction {
    let bits = spec.bits as usize;
    let values = spec.values_per_unit() as f64;
    let words = spec.words_per_unit() as f64;
    let (t_u, m_r) = (tile.t_u as f64, tile.m_r as f64);
    let rows = spec.op.rows() as f64;
    let core = &target.core;

    // Work per packing unit of one tile, in vector uops.
    let fma_ops = t_u * values * m_r * if isa.fused_fma { 1.0 } else { 2.0 };
    let alu_ops = t_u * unpack_alu_ops(spec.bits) as f64;
    // Masks that found no register are reloaded at each use: once per
    // weight vector, shared by the m_r rows.
    let spill_loads = t_u * RegisterUse::of(spec, isa, tile).spilled_masks() as f64;
    let loads = t_u * words + m_r * values + spill_loads;
    // Per-group fold (eq. 2): two FMAs and two loads per accumulator, amortised.
    let units_per_group = match spec.group {
        Group::Size(g) => (g / spec.values_per_unit()) as f64,
        Group::Column => f64::INFINITY,
    };
    let m_u = tile.m_u as f64;
    // Per group: sum the m_u partials, two FMAs, y load + store, scale loads.
    let fold_fma = (2.0 + (m_u - 1.0)) * t_u * m_r / units_per_group;
    let fold_loads = (2.0 * t_u + m_r + 2.0 * t_u * m_r) / units_per_group;

    let fma_units = core.fma_units.max(1) as f64;
    let all_units = fma_units + core.vector_alu_units as f64;
    // Every value is converted once per column vector, on the convert pipes.
    let converts = t_u * values / core.convert_units.max(1) as f64;
    let issue = ((fma_ops + fold_fma) / fma_units)
        .max(converts)
        // A mask reloaded from memory turns its `and` into a load-op the
        // vector scheduler holds as one more uop.
        .max((fma_ops + fold_fma + alu_ops + spill_loads) / all_units)
        .max((loads + fold_loads) / core.load_units.max(1) as f64);
    // Each accumulator receives values / m_u dependent FMAs per unit, but the
    // chains restart every group (eq. 2 folds them), so the out-of-order
    // window overlaps a group's chain with the next group's: the exposed part
    // is the share of a group's uops the window cannot hold.
    let chain = values / m_u * FMA_LATENCY * if isa.fused_fma { 1.0 } else { 2.0 };
    let group_uops = (fma_ops + fold_fma + alu_ops + loads + fold_loads) * units_per_group;
    let latency = if group_uops.is_finite() {
        chain * group_uops / (group_uops + core.vector_window.max(1) as f64)
    } else {
        chain
    };
    let cycles = issue.max(latency);

    let tw = (isa.lanes * tile.t_u) as f64;
    // Bytes per unit of one tile: the packed words, which is what GB/s of
    // weights counts here as in `kgen tune` and the benches, and the scale and
    // zero (f32 each, amortised), which stream from memory beside them.
    let packed = tw * words * 4.0;
    let streamed = packed + tw * 8.0 / units_per_group;
    // The rows of a GEMM call are processed m_r at a time, each pass re-reading
    // the weight tile from L1, so compute scales with rows / m_r.
    let passes = (rows / m_r).ceil();
    let hz = core.ghz * 1e9;
    let compute_gbs = packed * hz / (cycles * passes) / 1e9;
    let memory_gbs = target.memory.bandwidth_per_core_gbs * packed / streamed;
    let column_efficiency =
        n as f64 / crate::layout::align::round_up(n, isa.lanes * tile.t_u) as f64;
    let raw = compute_gbs.min(memory_gbs);
    let gbs = raw * column_efficiency;
    let weight_bytes = (k * n * bits) as f64 / 8.0;
    let flops = 2.0 * rows * (k * n) as f64;
    let gflops = flops / (weight_bytes / (gbs * 1e9)) / 1e9;
    let cores = core.cores.max(1) as f64;
    let gbs_all_cores = (compute_gbs * cores).min(target.memory.bandwidth_gbs * packed / streamed)
        * column_efficiency;
    Prediction {
        cycles_per_unit_tile: cycles,
        compute_gbs,
        memory_gbs,
        gbs,
        gflops,
        gbs_all_cores,
        bound: if compute_gbs < memory_gbs {
            Bound::Compute
        } else {
            Bound::Memory
        },
        column_efficiency,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpack_counts_skip_needless_shift_and_mask() {
        // 4-bit: 8 values; values 0..7 are masked in place, value 7 is only shifted.
        assert_eq!(unpack_alu_ops(4), 1 + 7 + 8);
        // 8-bit: 4 values.
        assert_eq!(unpack_alu_ops(8), 1 + 3 + 4);
        assert_eq!(x_scales(4)[1], 1.0 / 16.0);
        assert_eq!(x_scales(4)[7], 1.0);
        assert_eq!(x_scales(2)[14], (-28f32).exp2());
        let s3 = unpack_steps(3);
        assert_eq!(s3.len(), 32);
        assert_eq!(s3.iter().filter(|s| s.straddles).count(), 2);
        assert!(s3[10].straddles && s3[10].word == 0 && s3[10].shift == 30);
        assert!(s3[21].straddles && s3[21].word == 1 && s3[21].shift == 31);
        assert!(!s3[31].needs_mask);
    }
}
