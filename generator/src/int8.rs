//! The int8-activation kernel family (papers 000 and 002): ISAs as data, the
//! performance model and planner for it, and its emitter.
//!
//! The data layout and the oracle are in [`crate::int8_layout`]. A micro
//! kernel handles `t_u` groups of `L` interleaved columns for `m_r`
//! activation rows; per 32-value block it keeps `m_r x t_u` i32 accumulators
//! (`i_{row}_{t}`), adds 4-byte products into them with the template's
//! `dot_u` / `dot_s`, then removes the nibble bias, converts, and folds the
//! block into `m_r x t_u` f32 accumulators (`f_{row}_{t}`) with the weight
//! scales of `L` columns converted in one vector op times the activation
//! block scale.
//!
//! Codebook formats (IQ4_NL, [`I8Spec::codebook`]) read the 4-bit layout's
//! nibbles as indices: `idx_lo` / `idx_hi` unpack them, `lut` (a 16-entry
//! byte table lookup: NEON `tbl`, x86 `pshufb`, portable scalar) turns them
//! into signed int8 levels, and `dot_s` (sdot / smmla on Arm) accumulates
//! with no bias correction. The template's `CODEBOOK` table is replaced by
//! the format's. The SVE ISA has no such primitive: [`I8Isa::supports`].

use crate::emit::EmitError;
use crate::ggml::{GgmlType, IQ4_NL_VALUES, QK};
use crate::layout::round_up;
use crate::planner::BlockOrder;
use crate::spec::Op;
use crate::target::{Arch, Feature, TargetDesc};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use serde::Serialize;
use std::fmt::Write as _;

/// One ISA of the int8 family.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct I8Isa {
    pub name: &'static str,
    pub arch: Option<Arch>,
    /// Target features a target must list to run it.
    pub requires: &'static [Feature],
    /// `target_feature` / run-time detection names (f16c is implied by every
    /// AVX2 CPU but is its own feature bit).
    pub features: &'static [&'static str],
    /// i32 lanes per vector: columns interleaved per vector.
    pub lanes: usize,
    pub registers: usize,
    pub template_path: &'static str,
    pub template: &'static str,
    /// Vector uops of one `dot_u` (maddubs + madd + add = 3; vpdpbusd = 1).
    pub dot_uops: f64,
    /// Extra uops of `dot_s` over `dot_u` (sign handling).
    pub signed_extra: f64,
    /// Bytes of one column per lane and chunk: 4 (one column per i32 lane,
    /// dot-product instructions) or 8 (column pairs for 2x2 matrix multiply).
    pub group_bytes: usize,
    /// 4-bit levels stored as signed nibbles, read as `16 q` with one shift
    /// or one mask and no bias correction (needs a signed x signed dot).
    pub signed_nibbles: bool,
    /// GEMM micro kernels use 2x2 matrix-multiply tiles (smmla) on
    /// activation rows interleaved in pairs.
    pub mmla: bool,
    /// Activation broadcasts as a 16-byte load (`xquad`) and an in-lane
    /// dword shuffle (`xsel`) instead of a 4-byte broadcast load each:
    /// measured 1.27x on the AVX2 GEMM micro kernel on Zen 3, where the
    /// broadcast loads limited it.
    pub x_quad: bool,
    /// SVE vector length the kernels are written for (`None`: not SVE).
    /// They run only where SVE is present at exactly this length: targets
    /// must list it as `sve_vector_bits`, and run-time detection reads it.
    pub sve_bits: Option<u32>,
}

pub const AVX512VNNI: I8Isa = I8Isa {
    name: "avx512vnni",
    arch: Some(Arch::X86_64),
    requires: &[Feature::Avx512f, Feature::Avx512bw, Feature::Avx512vnni],
    features: &["avx512f", "avx512bw", "avx512vnni"],
    lanes: 16,
    registers: 32,
    template_path: "templates/i8/avx512vnni.rs",
    template: include_str!("../../templates/i8/avx512vnni.rs"),
    dot_uops: 1.0,
    signed_extra: 3.0,
    group_bytes: 4,
    signed_nibbles: false,
    mmla: false,
    sve_bits: None,
    x_quad: false,
};

pub const AVXVNNI: I8Isa = I8Isa {
    name: "avxvnni",
    arch: Some(Arch::X86_64),
    requires: &[Feature::Avx2, Feature::Fma, Feature::Avxvnni],
    features: &["avx2", "fma", "f16c", "avxvnni"],
    lanes: 8,
    registers: 16,
    template_path: "templates/i8/avxvnni.rs",
    template: include_str!("../../templates/i8/avxvnni.rs"),
    dot_uops: 1.0,
    signed_extra: 2.0,
    group_bytes: 4,
    signed_nibbles: false,
    mmla: false,
    sve_bits: None,
    x_quad: false,
};

pub const AVX2: I8Isa = I8Isa {
    name: "avx2",
    arch: Some(Arch::X86_64),
    requires: &[Feature::Avx2, Feature::Fma],
    features: &["avx2", "fma", "f16c"],
    lanes: 8,
    registers: 16,
    template_path: "templates/i8/avx2.rs",
    template: include_str!("../../templates/i8/avx2.rs"),
    dot_uops: 3.0,
    signed_extra: 2.0,
    group_bytes: 4,
    signed_nibbles: false,
    mmla: false,
    sve_bits: None,
    x_quad: true,
};

pub const DOTPROD: I8Isa = I8Isa {
    name: "dotprod",
    arch: Some(Arch::Aarch64),
    requires: &[Feature::Neon, Feature::Dotprod],
    features: &["neon", "dotprod"],
    lanes: 4,
    registers: 32,
    template_path: "templates/i8/dotprod.rs",
    template: include_str!("../../templates/i8/dotprod.rs"),
    dot_uops: 1.0,
    signed_extra: 0.0,
    group_bytes: 4,
    signed_nibbles: true,
    mmla: false,
    sve_bits: None,
    x_quad: false,
};

pub const I8MM: I8Isa = I8Isa {
    name: "i8mm",
    arch: Some(Arch::Aarch64),
    requires: &[Feature::Neon, Feature::Dotprod, Feature::I8mm],
    features: &["neon", "dotprod", "i8mm"],
    lanes: 2,
    registers: 32,
    template_path: "templates/i8/i8mm.rs",
    template: include_str!("../../templates/i8/i8mm.rs"),
    dot_uops: 1.0,
    signed_extra: 0.0,
    group_bytes: 8,
    signed_nibbles: true,
    mmla: true,
    sve_bits: None,
    x_quad: false,
};

pub const PORTABLE: I8Isa = I8Isa {
    name: "portable",
    arch: None,
    requires: &[],
    features: &[],
    lanes: 8,
    registers: 16,
    template_path: "templates/i8/portable.rs",
    template: include_str!("../../templates/i8/portable.rs"),
    dot_uops: 12.0,
    signed_extra: 0.0,
    group_bytes: 4,
    signed_nibbles: false,
    mmla: false,
    sve_bits: None,
    x_quad: false,
};

/// SVE at 256-bit vectors (Neoverse V1): the lane layout with 8 columns per
/// `z` register; micro kernels are whole asm loops ([`crate::int8_sve`]).
pub const SVE256: I8Isa = I8Isa {
    name: "sve256",
    arch: Some(Arch::Aarch64),
    requires: &[Feature::Neon, Feature::Sve],
    features: &["neon", "sve"],
    lanes: 8,
    registers: 32,
    template_path: "templates/i8/sve256.rs",
    template: include_str!("../../templates/i8/sve256.rs"),
    dot_uops: 1.0,
    signed_extra: 0.0,
    group_bytes: 4,
    signed_nibbles: true,
    mmla: false,
    sve_bits: Some(256),
    x_quad: false,
};

/// Best first. `sve256` ranks below `i8mm`: a 256-bit sdot and a 128-bit
/// smmla both do 32 multiply-adds, but cores with 256-bit SVE have half as
/// many SVE pipes as 128-bit NEON ones (Neoverse V1: 2x256 vs 4x128), so
/// the smmla GEMM does at least as much per cycle and reuses each weight
/// vector for two rows. It ranks above `dotprod`: at least the same
/// multiply-adds per cycle with half the instructions and weight loads per
/// column, and one replicated activation load per 16 values (indexed sdot)
/// instead of a broadcast per 4.
pub const I8_FAMILY: &[I8Isa] = &[AVX512VNNI, AVXVNNI, AVX2, I8MM, SVE256, DOTPROD, PORTABLE];

impl I8Isa {
    pub fn by_name(name: &str) -> Option<I8Isa> {
        I8_FAMILY.iter().copied().find(|i| i.name == name)
    }

    pub fn runs_on(&self, t: &TargetDesc) -> bool {
        self.arch.is_none_or(|a| a == t.arch)
            && self.requires.iter().all(|f| t.has(*f))
            && self.sve_bits.is_none_or(|b| t.sve_vector_bits == Some(b))
    }

    /// Position in [`I8_FAMILY`] (lower is better).
    pub fn rank(&self) -> usize {
        I8_FAMILY
            .iter()
            .position(|i| i.name == self.name)
            .unwrap_or(usize::MAX)
    }

    pub fn for_target(t: &TargetDesc) -> Vec<I8Isa> {
        I8_FAMILY.iter().copied().filter(|i| i.runs_on(t)).collect()
    }

    /// Whether this ISA has kernels for `spec`'s weight format, and if not why.
    /// Codebook formats need the `lut` primitive, which the SVE emitter (whole
    /// asm loops) does not have: SVE machines run them on i8mm or dotprod.
    pub fn supports(&self, spec: &I8Spec) -> Result<(), String> {
        if spec.codebook && self.sve_bits.is_some() {
            return Err(format!(
                "int8 ISA {} has no {} kernels (its asm emitter has no table lookup); \
                 SVE CPUs run {} on i8mm or dotprod",
                self.name,
                spec.format_tag(),
                spec.format_tag()
            ));
        }
        Ok(())
    }
}

/// Template primitives only codebook kernels use: left out of the other
/// kernels' `ops` so their code does not change.
const CODEBOOK_ITEMS: &[&str] = &["CODEBOOK", "lut", "idx_lo", "idx_hi"];

/// An int8-family format: Q4_0-like (4) or Q8_0-like (8) weights, or (with
/// `codebook`) IQ4_NL's 4-bit indices into [`IQ4_NL_VALUES`]; blocks of 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct I8Spec {
    pub op: Op,
    pub bits: u32,
    /// 4-bit codebook indices (IQ4_NL): looked up to signed int8 levels.
    pub codebook: bool,
}

impl I8Spec {
    pub fn new(op: Op, bits: u32) -> Result<I8Spec, crate::spec::SpecError> {
        if bits != 4 && bits != 8 {
            return Err(crate::spec::SpecError(format!(
                "int8-activation kernels take 4-bit (Q4_0) or 8-bit (Q8_0) weights, not {bits}"
            )));
        }
        Ok(I8Spec {
            op,
            bits,
            codebook: false,
        })
    }

    /// IQ4_NL: 4-bit indices into a 16-entry int8 codebook.
    pub fn iq4_nl(op: Op) -> I8Spec {
        I8Spec {
            op,
            bits: 4,
            codebook: true,
        }
    }

    /// The format named by its tag (`q4_0`, `q8_0`, `iq4_nl`).
    pub fn from_tag(op: Op, tag: &str) -> Option<I8Spec> {
        match tag {
            "q4_0" => Some(I8Spec::new(op, 4).expect("4 bits")),
            "q8_0" => Some(I8Spec::new(op, 8).expect("8 bits")),
            "iq4_nl" => Some(I8Spec::iq4_nl(op)),
            _ => None,
        }
    }

    /// `q4_0` / `q8_0` / `iq4_nl`.
    pub fn format_tag(&self) -> String {
        if self.codebook {
            "iq4_nl".into()
        } else {
            format!("q{}_0", self.bits)
        }
    }

    /// The GGUF type the kernels read.
    pub fn source_type(&self) -> GgmlType {
        match (self.bits, self.codebook) {
            (4, true) => GgmlType::Iq4Nl,
            (4, false) => GgmlType::Q4_0,
            _ => GgmlType::Q8_0,
        }
    }

    /// The codebook of a codebook format.
    pub fn codebook_values(&self) -> Option<&'static [i8; 16]> {
        self.codebook.then_some(&IQ4_NL_VALUES)
    }
}

/// Tile of the int8 family: `t_u` column groups of `lanes` in the packed
/// layout; the micro kernel covers `t_sub` of them (a divisor of `t_u`) for
/// `m_r` rows, so a GEMM can trade columns for rows on the GEMV's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct I8Tile {
    pub t_u: usize,
    pub t_sub: usize,
    pub m_r: usize,
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
}

impl I8Plan {
    /// `q4_0_gemv_1x32__avx2`: format, op, rows x columns, ISA.
    pub fn kernel_name(&self) -> String {
        format!(
            "{}_{}_{}x{}__{}",
            self.spec.format_tag(),
            self.spec.op.name(),
            self.tile.m_r,
            self.tile.t_sub * self.lanes,
            self.isa
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

/// Vector registers a tile keeps live: f32 and i32 accumulators, the
/// weight vectors (and their high nibbles), two activation vectors, and two
/// constants (nibble mask, word of ones).
pub fn registers(spec: &I8Spec, isa: &I8Isa, tile: I8Tile) -> usize {
    let weights = if spec.bits == 4 {
        2 * tile.t_sub
    } else {
        tile.t_sub
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
        return crate::int8_sve::registers(spec.bits, tile.t_sub, tile.m_r);
    }
    // Codebook kernels keep the table in a register too.
    accumulators + weights + 2 + 2 + usize::from(spec.codebook)
}

/// Vector work of one 32-value block of one micro tile, as the emitter
/// writes it: (vector ALU uops, loads, dot/matrix instructions).
fn block_ops(spec: &I8Spec, isa: &I8Isa, tile: I8Tile) -> (f64, f64, f64) {
    let (t, rows) = (tile.t_sub as f64, tile.m_r as f64);
    let four = spec.bits == 4;
    if isa.group_bytes == 8 {
        // Column pairs; chunks of 8 bytes per column.
        let chunks = if four { 2.0 } else { 4.0 };
        // Codebook: mask, shift and two table lookups per chunk.
        let unpack = match (four, spec.codebook) {
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
    let chunks = spec.bits as f64; // 4-byte chunks per column per block
    if spec.codebook {
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

/// eq. 5 for this family, in bits: int8 activations, weights with their
/// f16 scale (bits + 0.5 per value), f32 outputs, for m_r rows.
pub fn l1_bits(spec: &I8Spec, m_r: usize, m_b: usize, t_b: usize) -> u64 {
    let (m_r, m_b, t_b) = (m_r as u64, m_b as u64, t_b as u64);
    8 * m_r * m_b + (2 * spec.bits as u64 + 1) * m_b * t_b / 2 + 32 * m_r * t_b
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
    let bytes = tw * (4.0 * spec.bits as f64 + 2.0);
    let rows = spec.op.rows() as f64;
    let passes = (rows / tile.m_r as f64).ceil();
    let compute_gbs = bytes * t.core.ghz / (cycles * passes);
    let eff = n as f64 / round_up(n, isa.lanes * tile.t_u) as f64;
    let gbs = compute_gbs.min(t.memory.bandwidth_per_core_gbs) * eff;
    let weight_bytes = (k * n) as f64 * (4.0 * spec.bits as f64 + 2.0) / QK as f64;
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
) -> Result<I8Plan, crate::planner::PlanError> {
    if !isa.runs_on(t) {
        return Err(crate::planner::PlanError(format!(
            "int8 ISA {} needs {:?}, which target {} does not list",
            isa.name, isa.requires, t.name
        )));
    }
    isa.supports(spec).map_err(crate::planner::PlanError)?;
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
    let (_, tile) =
        best.ok_or_else(|| crate::planner::PlanError(format!("no int8 tile fits {}", isa.name)))?;
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
        (m_r * m_b + 8.0 * m_r * t_b) / (m_b * t_b * (2.0 * spec.bits as f64 + 1.0) / 16.0)
    };
    let (lhs, m_b, t_b) = blocks
        .iter()
        .filter(|b| b.0 as f64 >= 0.97 * max_lhs as f64)
        .min_by(|a, b| traffic(a).total_cmp(&traffic(b)).then(b.0.cmp(&a.0)))
        .copied()
        .ok_or_else(|| {
            crate::planner::PlanError(format!("no L1 block fits {} KiB", t.cache.l1d / 1024))
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

fn lit(v: usize) -> Literal {
    Literal::usize_unsuffixed(v)
}

/// Emits the int8 kernels of `plans` (all for `target`) as one file.
pub fn emit_file(
    target: &TargetDesc,
    plans: &[I8Plan],
    command: &str,
) -> Result<String, EmitError> {
    let mut items = TokenStream::new();
    for p in plans {
        items.extend(kernel_module(p)?);
    }
    let file: syn::File = syn::parse2(items)
        .map_err(|e| EmitError(format!("emitted int8 code does not parse: {e}")))?;
    let mut h = String::new();
    let _ = writeln!(
        h,
        "// @generated by kgen {} -- DO NOT EDIT.",
        crate::VERSION
    );
    let _ = writeln!(h, "// Regenerate with: {command}");
    let _ = writeln!(h, "//");
    let _ = writeln!(
        h,
        "// target: {} ({}; {})",
        target.name,
        target.description,
        target.arch.cfg_name()
    );
    let _ = writeln!(
        h,
        "// family: int8 activations (Q8_0-like, per 32-block), symmetric weights with f16 scales"
    );
    for p in plans {
        let isa = I8Isa::by_name(p.isa).expect("plan ISA");
        let _ = writeln!(h, "//");
        let _ = writeln!(h, "// kernel {}", p.kernel_name());
        let _ = writeln!(
            h,
            "//   format:   {} ({}), op {}",
            p.spec.format_tag(),
            if p.spec.codebook {
                "4-bit codebook indices, table lookup to signed int8"
            } else if p.spec.bits == 4 && isa.signed_nibbles {
                "4-bit, signed nibbles"
            } else if p.spec.bits == 4 {
                "4-bit, nibbles + 8"
            } else {
                "8-bit signed"
            },
            p.spec.op.name()
        );
        let _ = writeln!(
            h,
            "//   template: {} (family int8, ISA {})",
            isa.template_path, isa.name
        );
        let _ = writeln!(
            h,
            "//   layout:   {} ({} columns interleaved in {}-byte groups{})",
            p.layout_name(),
            p.lanes * p.tile.t_u,
            isa.group_bytes,
            if p.spec.codebook {
                ", unsigned nibble indices"
            } else if isa.signed_nibbles && p.spec.bits == 4 {
                ", signed nibbles read as 16 q"
            } else {
                ""
            }
        );
        let _ = writeln!(
            h,
            "//   plan:     t_u={} (micro tile t_sub={}) m_r={} columns per vector={} m_b={} t_b={}{}",
            p.tile.t_u,
            p.tile.t_sub,
            p.tile.m_r,
            p.lanes,
            p.m_b,
            p.t_b,
            if isa.mmla && p.tile.m_r > 1 {
                " (2x2 smmla tiles, activation rows in pairs)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            h,
            "//   registers {} <= {}; L1 {} of {} bits",
            p.registers, p.register_limit, p.l1_bits, p.l1_gamma
        );
        let _ = writeln!(
            h,
            "//   model:    {:.1} GB/s of weights, {:.1} GFLOPS on one core",
            p.gbs, p.gflops
        );
        let _ = writeln!(h, "//   tile from: performance model (no tuning profile)");
    }
    Ok(format!("{h}\n{}", prettyplease::unparse(&file)))
}

fn fn_attrs(isa: &I8Isa) -> TokenStream {
    crate::emit::fn_attrs(isa.features)
}

fn kernel_module(p: &I8Plan) -> Result<TokenStream, EmitError> {
    let isa =
        I8Isa::by_name(p.isa).ok_or_else(|| EmitError(format!("unknown int8 ISA {}", p.isa)))?;
    let template: syn::File = syn::parse_str(isa.template).map_err(|e| {
        EmitError(format!(
            "template {} does not parse: {e}",
            isa.template_path
        ))
    })?;
    let mut items = crate::emit::template_items(&template, isa.features);
    codebook_items(&mut items, &p.spec, &isa)?;
    let name = p.kernel_name();
    let module = format_ident!("{}", name);
    let micro: Vec<TokenStream> = (1..=p.tile.m_r)
        .map(|r| {
            if isa.sve_bits.is_some() {
                crate::int8_sve::micro_kernel(p, &isa, r)
            } else if isa.group_bytes == 4 {
                micro_kernel(p, &isa, r)
            } else if p.tile.m_r == 1 {
                crate::int8_mmla::micro_gemv(p, &isa)
            } else {
                crate::int8_mmla::micro_mmla(p, &isa, r)
            }
        })
        .collect();
    let driver = driver(p, &isa);
    let cfg = crate::emit::arch_cfg(isa.arch);
    let tf = crate::emit::target_feature_attr(isa.features);
    let features = isa.features;
    let isa_name = isa.name;
    let bits = p.spec.bits;
    let (lanes, t_u, m_r, m_b, t_b) = (
        lit(p.lanes),
        lit(p.tile.t_u),
        lit(p.tile.m_r),
        lit(p.m_b),
        lit(p.t_b),
    );
    let t_sub = lit(p.tile.t_sub);
    let group_bytes = lit(isa.group_bytes);
    let signed = isa.signed_nibbles && p.spec.bits == 4 && !p.spec.codebook;
    let row_pairs = isa.mmla && p.tile.m_r > 1;
    let doc = format!(
        " {} {} on {}: see the file header for the plan.",
        p.spec.format_tag(),
        p.spec.op.name(),
        p.target
    );
    Ok(quote! {
        #[doc = #doc]
        #cfg
        #[allow(unused_unsafe, unsafe_op_in_unsafe_fn, unused_mut, unused_variables, clippy::all)]
        pub mod #module {
            /// The ISA's primitives, copied from its template.
            #[allow(dead_code)]
            pub mod ops {
                #(#items)*
            }

            pub const NAME: &str = #name;
            pub const ISA: &str = #isa_name;
            pub const FEATURES: &[&str] = &[#(#features),*];
            pub const BITS: u32 = #bits;
            /// Columns interleaved per vector.
            pub const LANES: usize = #lanes;
            pub const T_U: usize = #t_u;
            /// Column groups one micro kernel covers (a divisor of T_U).
            pub const T_SUB: usize = #t_sub;
            pub const M_R: usize = #m_r;
            pub const M_B: usize = #m_b;
            pub const T_B: usize = #t_b;
            /// Bytes of a column per lane and chunk (4, or 8 for pair layouts).
            pub const GROUP_BYTES: usize = #group_bytes;
            /// 4-bit levels as signed nibbles (activation scales carry 1/16).
            pub const SIGNED: bool = #signed;
            /// Activation rows interleaved in pairs (`kgen::int8_layout::ActFormat`).
            pub const ROW_PAIRS: bool = #row_pairs;

            #(#micro)*

            #driver

            /// `y = x W` for `m` rows over panels `panel_begin..panel_end`.
            ///
            /// # Safety
            /// The CPU must have `FEATURES`; `w` and `sc` hold a matrix packed for
            /// this kernel (see `kgen::int8_layout`) with `k_pad x n_pad` values;
            /// `xq` is `m x k_pad` int8 activations, `xd` and `xc` are `m x k_pad/32`
            /// block scales and bias corrections; `y` is `m x n_pad`.
            #tf
            pub unsafe fn run(
                w: *const u8, sc: *const u16, xq: *const i8, xd: *const f32, xc: *const i32,
                y: *mut f32, m: usize, k_pad: usize, n_pad: usize, panel_begin: usize, panel_end: usize,
            ) {
                unsafe { body(w, sc, xq, xd, xc, y, m, k_pad, n_pad, panel_begin, panel_end) }
            }
        }
    })
}

/// The name of a template item (functions, constants, types).
fn item_name(item: &syn::Item) -> Option<String> {
    match item {
        syn::Item::Fn(f) => Some(f.sig.ident.to_string()),
        syn::Item::Const(c) => Some(c.ident.to_string()),
        syn::Item::Static(s) => Some(s.ident.to_string()),
        _ => None,
    }
}

/// Codebook primitives stay only in codebook kernels, whose `CODEBOOK`
/// table is the spec's codebook (the template's own values are a default).
fn codebook_items(items: &mut Vec<syn::Item>, spec: &I8Spec, isa: &I8Isa) -> Result<(), EmitError> {
    let Some(values) = spec.codebook_values() else {
        items.retain(|it| item_name(it).is_none_or(|n| !CODEBOOK_ITEMS.contains(&n.as_str())));
        return Ok(());
    };
    isa.supports(spec).map_err(EmitError)?;
    let have = |n: &str| items.iter().any(|it| item_name(it).as_deref() == Some(n));
    if let Some(missing) = CODEBOOK_ITEMS.iter().find(|n| !have(n)) {
        return Err(EmitError(format!(
            "template {} lacks `{missing}`, which {} kernels need",
            isa.template_path,
            spec.format_tag()
        )));
    }
    let vals = values.iter().map(|&v| Literal::i8_unsuffixed(v));
    let table: syn::Item = syn::parse2(quote! {
        /// The format's codebook: int8 level of each 4-bit index.
        pub const CODEBOOK: [i8; 16] = [#(#vals),*];
    })
    .expect("codebook const parses");
    for it in items.iter_mut() {
        if item_name(it).as_deref() == Some("CODEBOOK") {
            *it = table.clone();
        }
    }
    Ok(())
}

/// 4 activation bytes of `row` at byte `off` of the block in every lane: a
/// broadcast load, or (`x_quad` ISAs) an in-lane dword shuffle of the
/// 16 bytes around them, one load LLVM shares between four broadcasts.
fn bcast(isa: &I8Isa, row: usize, off: usize) -> TokenStream {
    let row = lit(row);
    if isa.x_quad {
        // vpshufd's immediate repeats the dword index in its four fields.
        let (base, imm) = (lit(off / 16 * 16), lit(off % 16 / 4 * 0x55));
        quote! { ops::xsel::<#imm>(ops::xquad(xq.add(#row * ldx + #base))) }
    } else {
        let off = lit(off);
        quote! { ops::bcast4(xq.add(#row * ldx + #off)) }
    }
}

fn micro_kernel(p: &I8Plan, isa: &I8Isa, rows: usize) -> TokenStream {
    // Loops cover the micro tile's t_sub column groups; strides are the layout's t_u.
    let (t_u, t_sub) = (p.tile.t_u, p.tile.t_sub);
    let l = p.lanes;
    let chunk = 4 * l; // bytes per chunk per column group
    let chunks = p.spec.bits as usize;
    let fv = |r: usize, t: usize| format_ident!("f_{}_{}", r, t);
    let iv = |r: usize, t: usize| format_ident!("i_{}_{}", r, t);
    let mut init = TokenStream::new();
    let mut store = TokenStream::new();
    let mut zero = TokenStream::new();
    for r in 0..rows {
        for t in 0..t_sub {
            let (f, i) = (fv(r, t), iv(r, t));
            let (row, off) = (lit(r), lit(t * l));
            init.extend(quote! { let mut #f = ops::loadf(y.add(#row * ldy + #off)); });
            store.extend(quote! { ops::storef(y.add(#row * ldy + #off), #f); });
            zero.extend(quote! { let mut #i = ops::zero_i(); });
        }
    }
    let mut block = TokenStream::new();
    if p.spec.bits == 4 {
        // Each chunk covers 8 K values: low nibbles 8g..8g+4, high 8g+4..8g+8.
        // Codebook nibbles are indices: looked up (signed int8 levels) and
        // dotted signed x signed straight into i32; plain nibbles go through
        // the template's block accumulator.
        let unpack = |half: &str, wv: &proc_macro2::Ident| {
            if p.spec.codebook {
                let idx = format_ident!("idx_{}", half);
                quote! { ops::lut(ops::#idx(#wv)) }
            } else {
                let nib = format_ident!("nib_{}", half);
                quote! { ops::#nib(#wv) }
            }
        };
        let acc = format_ident!("{}", if p.spec.codebook { "dot_s" } else { "pair_acc" });
        for g in 0..chunks {
            for t in 0..t_sub {
                let (wv, lo, hi) = (
                    format_ident!("w_{}", t),
                    format_ident!("lo_{}", t),
                    format_ident!("hi_{}", t),
                );
                let off = lit((g * t_u + t) * chunk);
                let (ulo, uhi) = (unpack("lo", &wv), unpack("hi", &wv));
                block.extend(quote! {
                    let #wv = ops::loadb(w.add(#off));
                    let #lo = #ulo;
                    let #hi = #uhi;
                });
            }
            for r in 0..rows {
                let (xl, xh) = (format_ident!("xl_{}", r), format_ident!("xh_{}", r));
                let (bl, bh) = (bcast(isa, r, 8 * g), bcast(isa, r, 8 * g + 4));
                block.extend(quote! {
                    let #xl = #bl;
                    let #xh = #bh;
                });
                for t in 0..t_sub {
                    let (i, lo, hi) = (
                        iv(r, t),
                        format_ident!("lo_{}", t),
                        format_ident!("hi_{}", t),
                    );
                    block.extend(quote! {
                        #i = ops::#acc(#i, #lo, #xl);
                        #i = ops::#acc(#i, #hi, #xh);
                    });
                }
            }
        }
    } else {
        for g in 0..chunks {
            for t in 0..t_sub {
                let wv = format_ident!("w_{}", t);
                let off = lit((g * t_u + t) * chunk);
                block.extend(quote! { let #wv = ops::loadb(w.add(#off)); });
            }
            for r in 0..rows {
                let x = format_ident!("x_{}", r);
                let b = bcast(isa, r, 4 * g);
                block.extend(quote! { let #x = #b; });
                for t in 0..t_sub {
                    let (i, wv) = (iv(r, t), format_ident!("w_{}", t));
                    block.extend(quote! { #i = ops::dot_s(#i, #wv, #x); });
                }
            }
        }
    }
    // Fold the block: (dot - bias * sum(x)) * d_x * d_w into the f32 sums.
    let mut fold = TokenStream::new();
    for t in 0..t_sub {
        let s = format_ident!("s_{}", t);
        let off = lit(t * l);
        fold.extend(quote! { let #s = ops::scales(sc.add(#off)); });
    }
    for r in 0..rows {
        let (dx, c) = (format_ident!("dx_{}", r), format_ident!("c_{}", r));
        let row = lit(r);
        fold.extend(quote! { let #dx = ops::splatf(xd.add(#row * ldb)); });
        if p.spec.bits == 4 && !isa.signed_nibbles && !p.spec.codebook {
            fold.extend(quote! { let #c = ops::splati(xc.add(#row * ldb)); });
        }
        for t in 0..t_sub {
            let (f, i, s) = (fv(r, t), iv(r, t), format_ident!("s_{}", t));
            // 4-bit blocks accumulate in the template's block form (i16 pairs
            // on maddubs ISAs); 8-bit ones directly in i32. Only unsigned
            // nibbles carry a bias to remove.
            let sum = match (p.spec.bits, isa.signed_nibbles) {
                _ if p.spec.codebook => quote! { #i },
                (4, false) => quote! { ops::subi(ops::block_sum(#i), #c) },
                (4, true) => quote! { ops::block_sum(#i) },
                _ => quote! { #i },
            };
            fold.extend(quote! {
                #f = ops::fmaf(ops::cvti(#sum), ops::mulf(#s, #dx), #f);
            });
        }
    }
    let body = quote! { #zero #block #fold };
    micro_fn(p, isa, rows, init, body, store, (32, 1))
}

/// Bytes of a column group's chunk and chunks per block.
pub(crate) fn geometry(p: &I8Plan, isa: &I8Isa) -> (usize, usize) {
    let chunk = p.lanes * isa.group_bytes;
    (chunk, 4 * p.spec.bits as usize / isa.group_bytes)
}

/// The micro kernel `micro_r{rows}`: `init` before the loop over 32-value
/// blocks, `body` per block, then the pointer steps (`x_step` activation
/// bytes and `d_step` scales per block), `store` after it.
pub(crate) fn micro_fn(
    p: &I8Plan,
    isa: &I8Isa,
    rows: usize,
    init: TokenStream,
    body: TokenStream,
    store: TokenStream,
    (x_step, d_step): (usize, usize),
) -> TokenStream {
    let fname = format_ident!("micro_r{}", rows);
    let (chunk, chunks) = geometry(p, isa);
    let (wstep, sstep) = (lit(chunks * p.tile.t_u * chunk), lit(p.tile.t_u * p.lanes));
    let (x_step, d_step) = (lit(x_step), lit(d_step));
    let attrs = fn_attrs(isa);
    let doc = format!(
        " Micro kernel: {rows} row(s) x {} columns, one 32-value block per iteration.",
        p.tile.t_sub * p.lanes
    );
    quote! {
        #[doc = #doc]
        #attrs
        unsafe fn #fname(
            mut w: *const u8, mut sc: *const u16, mut xq: *const i8, mut xd: *const f32, mut xc: *const i32,
            y: *mut f32, ldx: usize, ldb: usize, ldy: usize, blocks: usize,
        ) {
            unsafe {
                #init
                for _ in 0..blocks {
                    #body
                    w = w.add(#wstep);
                    sc = sc.add(#sstep);
                    xq = xq.add(#x_step);
                    xd = xd.add(#d_step);
                    xc = xc.add(1);
                }
                #store
            }
        }
    }
}

fn driver(p: &I8Plan, isa: &I8Isa) -> TokenStream {
    let tw = lit(p.tile.t_u * p.lanes);
    let block_bytes = lit(4 * p.spec.bits as usize);
    // A micro kernel covers t_sub of the tile's t_u column groups.
    let (subs, sub_cols, sub_bytes) = (
        lit(p.tile.t_u / p.tile.t_sub),
        lit(p.tile.t_sub * p.lanes),
        lit(p.tile.t_sub * p.lanes * isa.group_bytes),
    );
    let m_r = lit(p.tile.m_r);
    let full = format_ident!("micro_r{}", p.tile.m_r);
    let arms: Vec<TokenStream> = (1..p.tile.m_r)
        .map(|r| {
            let f = format_ident!("micro_r{}", r);
            let rl = lit(r);
            quote! { #rl => #f(wt, st, xr, xdr, xcr, yr, ldx, ldb, ldy, nb), }
        })
        .collect();
    let attrs = fn_attrs(isa);
    // Pair-interleaved activations: a row pair spans 2 k_pad bytes and 4
    // scales per block.
    let (pairs, xs, bs) = if isa.mmla && p.tile.m_r > 1 {
        (quote! { r / 2 }, lit(64), lit(4))
    } else {
        (quote! { r }, lit(32), lit(1))
    };
    let (ldx_mul, ldb_mul) = if isa.mmla && p.tile.m_r > 1 {
        (lit(2), lit(4))
    } else {
        (lit(1), lit(1))
    };
    quote! {
        #attrs
        unsafe fn body(
            w: *const u8, sc: *const u16, xq: *const i8, xd: *const f32, xc: *const i32,
            y: *mut f32, m: usize, k_pad: usize, n_pad: usize, panel_begin: usize, panel_end: usize,
        ) {
            unsafe {
                let blocks = k_pad / 32;
                let per_kb = M_B / 32;
                let k_blocks = (blocks + per_kb - 1) / per_kb;
                let (ldx, ldb, ldy) = (#ldx_mul * k_pad, #ldb_mul * blocks, n_pad);
                let c_begin = panel_begin * T_B;
                let c_end = (panel_end * T_B).min(n_pad);
                for r in 0..m {
                    core::ptr::write_bytes(y.add(r * ldy + c_begin), 0, c_end - c_begin);
                }
                for p in panel_begin..panel_end {
                    let pw = T_B.min(n_pad - p * T_B);
                    for kb in 0..k_blocks {
                        let nb = per_kb.min(blocks - kb * per_kb);
                        let cols_before = p * T_B * blocks + kb * per_kb * pw;
                        let b0 = kb * per_kb;
                        // Row groups outside the tiles: a group's activations
                        // (m_r x m_b bytes) stay in L1 while the panel's
                        // weight block streams past them once per group.
                        let mut r = 0;
                        while r < m {
                            let rows = #m_r.min(m - r);
                            let (xr, xdr, xcr) = (xq.add(#pairs * ldx + b0 * #xs), xd.add(#pairs * ldb + b0 * #bs), xc.add(r * blocks + b0));
                            for idx in 0..pw / #tw * #subs {
                                let (tile, sub) = (idx / #subs, idx % #subs);
                                let c = p * T_B + tile * #tw + sub * #sub_cols;
                                let base = cols_before + tile * #tw * nb;
                                let wt = w.add(base * #block_bytes + sub * #sub_bytes);
                                let st = sc.add(base + sub * #sub_cols);
                                let yr = y.add(r * ldy + c);
                                match rows {
                                    #m_r => #full(wt, st, xr, xdr, xcr, yr, ldx, ldb, ldy, nb),
                                    #(#arms)*
                                    _ => unreachable!(),
                                }
                            }
                            r += rows;
                        }
                    }
                }
            }
        }
    }
}
