//! The int8 family's performance model and planner: register budget,
//! L1 footprint, roofline, and the tile and block search.

use crate::family::int8::isa::I8Isa;
use crate::family::int8::plan::I8Plan;
use crate::family::int8::plan::I8Tile;
use crate::family::int8::spec::I8Spec;
use crate::family::plan::BlockOrder;
use crate::format::ggml::QK;
use crate::layout::align::round_up;
use crate::spec::Op;
use crate::target::TargetDesc;

/// Vector registers a tile keeps live: f32 and i32 accumulators, the
/// weight vectors (and their high nibbles; 5-bit: and each column group's
/// fifth bits, live through the block), two activation vectors, and two
/// constants (nibble mask, word of ones; 5-bit: and the fifth-bit mask).
pub fn registers(spec: &I8Spec, isa: &I8Isa, tile: I8Tile) -> usize {
    let weights = match spec.bits() {
        4 => 2 * tile.t_sub,
        5 => 3 * tile.t_sub,
        _ => tile.t_sub,
    };
    let accumulators = if isa.group_bytes == 8 {
        if tile.m_r == 1 {
            // i32 per column pair, f32 per 4 columns.
            tile.t_sub + tile.t_sub.div_ceil(2)
        } else {
            // 2x2 (rows x columns) tiles, i32 and f32.
            2 * tile.m_r.div_ceil(2) * tile.t_sub
        }
    } else {
        2 * tile.t_sub * tile.m_r
    };
    if isa.sve_bits.is_some() {
        // The SVE emitter's own register map (activations share scratch).
        return crate::family::int8::emit::sve::registers(spec.bits(), tile.t_sub, tile.m_r);
    }
    // Codebook kernels keep the table in a register too.
    accumulators + weights + 2 + 2 + usize::from(spec.codebook()) + usize::from(spec.bits() == 5)
}

/// Vector work of one 32-value block of one micro tile, as the emitter
/// writes it: (vector ALU uops, loads, dot/matrix instructions).
fn block_ops(spec: &I8Spec, isa: &I8Isa, tile: I8Tile) -> (f64, f64, f64) {
    let (t, rows) = (tile.t_sub as f64, tile.m_r as f64);
    let four = spec.bits() == 4;
    if spec.bits() == 5 {
        return five_bit_block_ops(isa, tile);
    }
    if isa.group_bytes == 8 {
        // Column pairs; chunks of 8 bytes per column.
        let chunks = if four { 2.0 } else { 4.0 };
        // Codebook: mask, shift and two table lookups per chunk.
        let unpack = match (four, spec.codebook()) {
            (true, true) => 4.0 * chunks * t,
            (true, false) => 2.0 * chunks * t,
            _ => 0.0,
        };
        if tile.m_r == 1 {
            // sdot on 8-byte groups, pair sums folded 4 columns at a time.
            let dots = 4.0 * t;
            let fold = (t / 2.0) * 5.0; // addp, cvt, mul, fma, scale convert
            let loads = t * chunks + if four { 2.0 * chunks } else { 4.0 } + t / 2.0 + 1.0;
            return (unpack + dots + fold, loads, dots);
        }
        let pairs = (rows / 2.0).ceil();
        let dots = 4.0 * pairs * t; // smmla: 2x2 outputs x 8 values
        let fold = 3.0 * pairs * t + t; // cvt, mul, fma; scale convert
        let loads = t * chunks + 4.0 * pairs + pairs + t;
        return (unpack + dots + fold, loads, dots);
    }
    let chunks = spec.bits() as f64; // 4-byte chunks per column per block
    if spec.codebook() {
        // Unpack (mask, shift + mask) and two table lookups per chunk, then
        // two signed x signed dots per chunk and row; no bias to remove.
        let unpack = 5.0 * t * chunks / 2.0;
        let dot = isa.dot_uops + isa.signed_extra;
        let dots = 2.0 * chunks * t * rows * dot;
        let fold = t * rows * 3.0 + t;
        let loads = t * chunks + 2.0 * rows * chunks + t + rows;
        return (unpack + dots + fold, loads, dots / dot);
    }
    let dot = if four {
        isa.dot_uops
    } else {
        isa.dot_uops + isa.signed_extra
    };
    let unpack = if four { 3.0 * t * chunks / 2.0 } else { 0.0 };
    // 4-bit: two pair_acc per chunk (both nibbles): maddubs + i16 add on
    // maddubs ISAs (2 of the 3 uops of a dot_u), plus one widening madd per block.
    let pair = if isa.dot_uops > 1.0 { 2.0 / 3.0 } else { 1.0 };
    let widen = if isa.dot_uops > 1.0 { 1.0 / 3.0 } else { 0.0 };
    let dots = if four {
        2.0 * pair * chunks + widen
    } else {
        chunks
    } * t
        * rows
        * dot;
    // (bias sub,) cvt, mul, fma; scale convert.
    let bias = if four && !isa.signed_nibbles {
        1.0
    } else {
        0.0
    };
    let fold = t * rows * (3.0 + bias) + t;
    // Weight chunks, activation broadcasts (two per 4-bit chunk, one per
    // 8-bit chunk, each covering 4 bytes), scales, and the block's x scale/sum.
    let loads = t * chunks + rows * chunks + t + 2.0 * rows;
    (unpack + dots + fold, loads, dots / dot)
}

/// [`block_ops`] of 5-bit layouts: the two halves of each of the 4 nibble
/// chunks (lane layouts) or 2 chunks (pair layouts) per column group
/// rebuilt from the plane of fifth bits ([`I8Isa::fifth_bit_ops`]), dots of
/// unsigned levels, and the offset removed per block and output.
fn five_bit_block_ops(isa: &I8Isa, tile: I8Tile) -> (f64, f64, f64) {
    let (t, rows) = (tile.t_sub as f64, tile.m_r as f64);
    if isa.group_bytes == 8 {
        // Per column pair: 2 chunks, and the plane split (a shift per two
        // pairs, a zip per pair).
        let unpack = (2.0 * isa.fifth_bit_ops + 1.5) * t;
        if tile.m_r == 1 {
            let dots = 4.0 * t;
            let fold = (t / 2.0) * 6.0; // addp, bias, cvt, mul, fma, scale convert
            let loads = 2.0 * t + t / 2.0 + 4.0 + t / 2.0 + 2.0;
            return (unpack + dots + fold, loads, dots);
        }
        let pairs = (rows / 2.0).ceil();
        let dots = 4.0 * pairs * t;
        let fold = 4.0 * pairs * t + t; // bias, cvt, mul, fma; scale convert
        let loads = 2.0 * t + t / 2.0 + 4.0 * pairs + 3.0 * pairs + t;
        return (unpack + dots + fold, loads, dots);
    }
    let unpack = 4.0 * isa.fifth_bit_ops * t;
    // dot2_u per chunk: two dots into i32 (maddubs ISAs: two maddubs, an
    // i16 add, one widening madd and an i32 add).
    let (pair, widen) = if isa.dot_uops > 1.0 {
        (2.0 / 3.0, 1.0 / 3.0)
    } else {
        (1.0, 0.0)
    };
    let dots = 4.0 * (2.0 * pair + widen) * t * rows * isa.dot_uops;
    let fold = t * rows * 4.0 + t; // bias, cvt, mul, fma; scale convert
                                   // 5 chunks per column group, 8 broadcasts per row, scales, x scale and sum.
    let loads = 5.0 * t + 8.0 * rows + t + 2.0 * rows;
    (unpack + dots + fold, loads, dots / isa.dot_uops)
}

/// eq. 5 for this family, in bits: int8 activations, weights with their
/// f16 scale (bits + 0.5 per value), f32 outputs, for m_r rows.
pub fn l1_bits(spec: &I8Spec, m_r: usize, m_b: usize, t_b: usize) -> u64 {
    let (m_r, m_b, t_b) = (m_r as u64, m_b as u64, t_b as u64);
    8 * m_r * m_b + (2 * spec.bits() as u64 + 1) * m_b * t_b / 2 + 32 * m_r * t_b
}

/// Roofline for one core: (GB/s of weights, GFLOPS) for `k x n`.
pub fn predict(
    spec: &I8Spec,
    isa: &I8Isa,
    t: &TargetDesc,
    tile: I8Tile,
    k: usize,
    n: usize,
) -> (f64, f64) {
    let (vec_uops, loads, dot_calls) = block_ops(spec, isa, tile);
    let units = (t.core.vector_alu_units + t.core.fma_units).max(1) as f64;
    let cycles = (vec_uops / units)
        .max(loads / t.core.load_units.max(1) as f64)
        .max(dot_calls / t.core.dot_units.max(1) as f64);
    let tw = (isa.lanes * tile.t_sub) as f64;
    let bytes = tw * (4.0 * spec.bits() as f64 + 2.0);
    let rows = spec.op.rows() as f64;
    let passes = (rows / tile.m_r as f64).ceil();
    let compute_gbs = bytes * t.core.ghz / (cycles * passes);
    let eff = n as f64 / round_up(n, isa.lanes * tile.t_u) as f64;
    let gbs = compute_gbs.min(t.memory.bandwidth_per_core_gbs) * eff;
    let weight_bytes = (k * n) as f64 * (4.0 * spec.bits() as f64 + 2.0) / QK as f64;
    let gflops = 2.0 * rows * (k * n) as f64 / (weight_bytes / (gbs * 1e9)) / 1e9;
    (gbs, gflops)
}

const MAX_M_R: usize = 8;

/// Plans an int8 kernel: the fastest register-feasible tile by the model,
/// ties to wider tiles, then the fullest L1 block (eq. 5 for this family)
/// with balanced traffic, as for the f32 family.
pub fn plan(
    spec: &I8Spec,
    isa: &I8Isa,
    t: &TargetDesc,
    shape: (usize, usize),
) -> Result<I8Plan, crate::family::plan::PlanError> {
    if !isa.runs_on(t) {
        return Err(crate::family::plan::PlanError(format!(
            "int8 ISA {} needs {:?}, which target {} does not list",
            isa.name, isa.requires, t.name
        )));
    }
    isa.supports(spec).map_err(crate::family::plan::PlanError)?;
    let max_rows = match spec.op {
        Op::Gemv => 1,
        Op::Gemm { m } => m.min(MAX_M_R),
    };
    let mut best: Option<(f64, I8Tile)> = None;
    for m_r in 1..=max_rows {
        // Matrix-multiply layouts interleave 4 or 8 columns (Q4_0_4_8 /
        // Q4_0_8_8): whole pairs of column pairs, so GEMV pair sums fill vectors.
        let widths: &[usize] = if isa.group_bytes == 8 {
            &[2, 4]
        } else {
            &[1, 2, 3, 4, 5, 6, 7, 8]
        };
        for &t_u in widths {
            let tile = I8Tile {
                t_u,
                t_sub: t_u,
                m_r,
            };
            if registers(spec, isa, tile) > isa.registers {
                continue;
            }
            let (gbs, _) = predict(spec, isa, t, tile, shape.0, shape.1);
            let better = match best {
                None => true,
                Some((g, b)) => {
                    gbs > g * 1.0001
                        || ((gbs - g).abs() <= g * 1e-4 && (t_u * m_r) > (b.t_u * b.m_r))
                }
            };
            if better {
                best = Some((gbs, tile));
            }
        }
    }
    let (_, tile) = best
        .ok_or_else(|| crate::family::plan::PlanError(format!("no int8 tile fits {}", isa.name)))?;
    let gamma = t.cache.l1d * 8;
    let tw = isa.lanes * tile.t_u;
    let max_m_b = round_up(shape.0.max(1), QK);
    let mut blocks = Vec::new();
    for tiles in 1..=64usize.min(round_up(shape.1.max(1), tw) / tw) {
        let t_b = tiles * tw;
        let mut m_b = 0;
        while m_b + QK <= max_m_b && l1_bits(spec, tile.m_r, m_b + QK, t_b) <= gamma {
            m_b += QK;
        }
        if m_b > 0 {
            blocks.push((l1_bits(spec, tile.m_r, m_b, t_b), m_b, t_b));
        }
    }
    let max_lhs = blocks.iter().map(|b| b.0).max().unwrap_or(0);
    let traffic = |&(_, m_b, t_b): &(u64, usize, usize)| {
        let (m_r, m_b, t_b) = (tile.m_r as f64, m_b as f64, t_b as f64);
        (m_r * m_b + 8.0 * m_r * t_b) / (m_b * t_b * (2.0 * spec.bits() as f64 + 1.0) / 16.0)
    };
    let (lhs, m_b, t_b) = blocks
        .iter()
        .filter(|b| b.0 as f64 >= 0.97 * max_lhs as f64)
        .min_by(|a, b| traffic(a).total_cmp(&traffic(b)).then(b.0.cmp(&a.0)))
        .copied()
        .ok_or_else(|| {
            crate::family::plan::PlanError(format!("no L1 block fits {} KiB", t.cache.l1d / 1024))
        })?;
    let (gbs, gflops) = predict(spec, isa, t, tile, shape.0, shape.1);
    Ok(I8Plan {
        target: t.name.clone(),
        isa: isa.name,
        spec: *spec,
        lanes: isa.lanes,
        tile,
        m_b,
        t_b,
        registers: registers(spec, isa, tile),
        register_limit: isa.registers,
        l1_bits: lhs,
        l1_gamma: gamma,
        gbs,
        gflops,
        order: BlockOrder::Panel,
    })
}

/// GEMM plans reuse the GEMV plan's layout (t_u, m_b, t_b) so one packed
/// matrix serves both; the micro tile (t_sub column groups x m_r rows) is
/// the model's best that fits the registers with one to spare (at the exact
/// limit LLVM spills accumulators).
pub fn plan_gemm_sharing(gemv: &I8Plan, m: usize, t: &TargetDesc) -> I8Plan {
    let isa = I8Isa::by_name(gemv.isa).expect("planned ISA");
    let spec = I8Spec {
        op: Op::Gemm { m },
        ..gemv.spec
    };
    let t_u = gemv.tile.t_u;
    let mut best = (
        0.0,
        I8Tile {
            t_u,
            t_sub: t_u,
            m_r: if isa.mmla { 2 } else { 1 },
        },
    );
    // 2x2 matrix tiles: whole row pairs and column pairs of pairs.
    let step = if isa.mmla { 2 } else { 1 };
    for t_sub in (1..=t_u).filter(|d| t_u.is_multiple_of(*d) && d % step == 0) {
        for m_r in (step..=m.max(step).min(MAX_M_R)).step_by(step) {
            let tile = I8Tile { t_u, t_sub, m_r };
            if registers(&spec, &isa, tile) >= isa.registers {
                continue;
            }
            let (_, gflops) = predict(&spec, &isa, t, tile, 4096, 4096);
            // On a tie (a throughput bound the tile does not change, such as
            // maddubs on AVX2) the bigger tile: fewer loads and unpacks per MAC.
            let tie = (gflops - best.0).abs() <= best.0 * 1e-4;
            if gflops > best.0 * 1.0001
                || (tie && tile.m_r * tile.t_sub > best.1.m_r * best.1.t_sub)
            {
                best = (gflops, tile);
            }
        }
    }
    let tile = best.1;
    let (gbs, gflops) = predict(&spec, &isa, t, tile, 4096, 4096);
    I8Plan {
        spec,
        tile,
        registers: registers(&spec, &isa, tile),
        l1_bits: l1_bits(&spec, tile.m_r, gemv.m_b, gemv.t_b),
        gbs,
        gflops,
        ..gemv.clone()
    }
}
