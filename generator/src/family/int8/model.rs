//! The int8 family's performance model and planner: register budget,
//! L1 footprint, roofline, and the tile and block search.

use crate::family::int8::emit::micro::scratch_levels;
use crate::family::int8::emit::micro::MicroSpec;
use crate::family::int8::emit::{micro, ops_items};
use crate::family::int8::isa::I8Isa;
use crate::family::int8::plan::{I8Candidate, I8Plan, I8Tile};
use crate::family::int8::spec::I8Spec;
use crate::family::int8::Int8;
use crate::family::plan::{BlockOrder, L1Block, PlanError, TileSource};
use crate::family::{search, Family};
use crate::format::ggml::QK;
use crate::layout::align::round_up;
use crate::opcount::{count_micro, primitives, Counts, KPerIter, Primitive, Site};
use crate::spec::Op;
use crate::target::TargetDesc;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

type Primitives = Arc<BTreeMap<String, Primitive>>;

/// Vector registers a tile keeps live: f32 and i32 accumulators, the
/// weight vectors (and their high nibbles; 5-bit: and each column group's
/// fifth bits, live through the block; signed dots on x86: and their
/// absolute values), two activation vectors, and two constants (nibble
/// mask, word of ones; 5-bit: and the fifth-bit mask; 6-bit: two masks of
/// the spill merge; 8-bit on the u8-dot
/// ISAs: the sign-bit mask of `flip`, in place of the two they do not use).
/// Kernels that dot a scratch of levels hold no masks or planes: each
/// column group's level pair, two activation vectors and the word of ones.
pub fn registers(spec: &I8Spec, isa: &I8Isa, tile: I8Tile) -> usize {
    let spec = &isa.reads(spec);
    // A grid kernel's tables: one per index field of a nibble.
    let grid_tables = if spec.grid() {
        4 / spec.bits() as usize
    } else {
        0
    };
    let vectors = match spec.bits() {
        // 1- and 2-bit grids: each column group's two nibble planes and one
        // level.
        1 | 2 if grid_tables > 0 => 3 * tile.t_sub,
        // 2-bit: each column group's chunk and one bit pair of it; 3- and
        // 4-bit: the chunk and one level.
        2..=4 => 2 * tile.t_sub,
        // 5-bit: the chunk, its plane and a level; 6-bit: a spill chunk's
        // three stored chunks, or two levels and a load.
        5 | 6 => 3 * tile.t_sub,
        _ => tile.t_sub,
    };
    // 8-bit and codebook levels go through `dot_s`, unless the ISA reads
    // them as `level + 128`.
    let signed = (spec.bits() == 8 || spec.codebook()) && !isa.offsets_signed(spec);
    let weights = if signed && isa.signed_dot_abs {
        2 * vectors
    } else {
        vectors
    };
    let accumulators = if isa.group_bytes == 8 {
        if tile.m_r == 1 {
            // i32 per column pair, f32 per 4 columns.
            tile.t_sub + tile.t_sub.div_ceil(2)
        } else {
            // 2x2 (rows x columns) tiles, i32 and f32.
            2 * tile.m_r.div_ceil(2) * tile.t_sub
        }
    } else if crate::family::int8::emit::micro::int_scales(spec, isa)
        && matches!(spec.bits(), 5 | 6)
    {
        // `dot2_sc` sums straight into the super-block's sums (scaled
        // levels and offsets), or 5-bit half blocks' i16 sums do first
        // (`i16_half_blocks`); the part's scales stay live.
        let halves = crate::family::int8::emit::lane::i16_half_blocks(spec, isa);
        (1 + usize::from(halves)) * tile.t_sub * tile.m_r + tile.t_sub
    } else if crate::family::int8::emit::lane::late_mins(spec, isa) {
        // The block's i16 pair sums and the super-block's scaled sums (the
        // mins go in at the group's close, through no register of the loop).
        2 * tile.t_sub * tile.m_r
    } else if crate::family::int8::emit::micro::int_scales(spec, isa) {
        // The half block's sums (i16 pairs; i32 lanes on packed ISAs) and
        // the super-block's two i32 sums (scaled levels, mins). (4x8 would
        // fit 16 registers only with the activation quads reloaded; it
        // measured no faster than 3x8 on Zen 3, 162 against 159 GFLOPS at
        // m = 128.) Packed halves: half 1's own i32 sums, each column
        // group's sum of the scale levels the join's bias met, and the bias.
        if crate::family::int8::emit::micro::packed_halves(spec, isa) {
            4 * tile.t_sub * tile.m_r + tile.t_sub + 1
        } else {
            3 * tile.t_sub * tile.m_r
        }
    } else if crate::family::int8::emit::lane::masked_high_nibbles(spec, isa)
        || crate::family::int8::emit::lane::masked_odd_crumbs(spec, isa)
    {
        // And the high nibbles' own i32 accumulators, or the odd bit pairs'
        // (i16 pairs on maddubs ISAs, i32 lanes on vpdpbusd ones).
        3 * tile.t_sub * tile.m_r
    } else {
        2 * tile.t_sub * tile.m_r
    };
    if isa.sve_bits.is_some() {
        // The SVE emitter's own register map (activations share scratch).
        return crate::family::int8::emit::sve::registers(spec.bits(), tile.t_sub, tile.m_r);
    }
    if scratch_levels(spec, isa) {
        // Levels loaded unpacked: each column group's level pair, two
        // activation vectors and the word of ones (the scales, counted
        // above, in its place with integer sub-scales); no masks or planes.
        let ones = usize::from(!crate::family::int8::emit::micro::int_scales(spec, isa));
        return accumulators + 2 * tile.t_sub + 2 + ones;
    }
    // Codebook and grid kernels keep their tables in registers too.
    accumulators
        + weights
        + 2
        + 2
        + usize::from(spec.codebook())
        + grid_tables
        + usize::from(spec.bits() == 5)
        // 6-bit: the spill merge's two masks beside the level mask; 3-bit:
        // its three on aarch64, whose ands take no memory operands (x86
        // folds them into the ands: counting them there took the AVX2
        // codebook GEMMs from 4x8 to 2x8 tiles and 16-18% slower).
        + 2 * usize::from(spec.bits() == 6)
        + 3 * usize::from(spec.bits() == 3 && isa.arch == Some(crate::target::Arch::Aarch64))
}

/// Instructions of one 32-value block of `tile`'s micro kernel (all its
/// `m_r` rows and `t_sub` column groups), counted from the kernel the
/// emitter writes ([`crate::opcount`]): the counts `kgen plan --explain`
/// prints, so the model and the report cannot disagree. Kernels that dot a
/// scratch of levels add their share of the tile's `unpack`
/// ([`unpack_share`]).
///
/// A plan ranks up to a few dozen tiles per ISA and every count starts from
/// the parsed template, so the counts (and each ISA's parsed primitives) are
/// cached for the process (the whole gen-snapshot run, ~300 `kgen`
/// invocations, went from 5.4 s to 10.5 s).
pub fn block_counts(spec: &I8Spec, isa: &I8Isa, tile: I8Tile) -> BlockCount {
    let spec = &isa.reads(spec);
    // The op and its rows: a GEMM's unpack share depends on m, and a GEMM
    // of one row is not the GEMV.
    type Key = (&'static str, &'static str, bool, usize, usize, usize, usize);
    static COUNTS: OnceLock<Mutex<HashMap<Key, BlockCount>>> = OnceLock::new();
    // The primitives differ between a format's GEMV (`prefetch`, the
    // ISA's GEMV overlay) and its scratch GEMM (`storeb`): keyed by ISA,
    // format and those three.
    type PrimKey = (&'static str, &'static str, bool, bool, Option<&'static str>);
    static PRIMS: OnceLock<Mutex<HashMap<PrimKey, Primitives>>> = OnceLock::new();
    let key = (
        isa.name,
        spec.format.tag,
        spec.op == Op::Gemv,
        spec.op.rows(),
        tile.t_u,
        tile.t_sub,
        tile.m_r,
    );
    let counts = COUNTS.get_or_init(Default::default);
    if let Some(c) = counts.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return *c;
    }
    let prims = {
        let mut all = PRIMS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        all.entry((
            isa.name,
            spec.format.tag,
            scratch_levels(spec, isa),
            crate::family::int8::emit::micro::prefetches(spec, isa),
            isa.overlay(spec.op).map(|o| o.path),
        ))
        .or_insert_with(|| {
            let items = ops_items(spec, isa)
                .unwrap_or_else(|e| panic!("{} template for {}: {e}", isa.name, spec.format_tag()));
            Arc::new(primitives(&items).unwrap_or_else(|e| {
                panic!("{} primitives for {}: {e}", isa.name, spec.format_tag())
            }))
        })
        .clone()
    };
    let micro_spec = MicroSpec {
        spec: *spec,
        tile,
        lanes: isa.lanes,
    };
    let tokens = micro(&micro_spec, isa, tile.m_r);
    let name = format!("micro_r{}", tile.m_r);
    let site = Site {
        module: isa.template_path,
        micro: &name,
        k: KPerIter::Fixed(QK),
        rows: tile.m_r,
        cols: tile.t_sub * isa.lanes,
    };
    let counted = syn::parse2::<syn::ItemFn>(tokens)
        .map_err(|e| e.to_string())
        .and_then(|f| count_micro(&prims, &f, &site).map_err(|e| e.0));
    let k = counted.unwrap_or_else(|e| {
        panic!(
            "counting {} {} tile {}x{}: {e}",
            isa.name,
            spec.format_tag(),
            tile.m_r,
            tile.t_sub
        )
    });
    let mut c = BlockCount {
        counts: k.per_iter,
        approximate: !k.unclassified.is_empty(),
    };
    if scratch_levels(spec, isa) {
        // The tile's unpack, once per block for every row group and
        // column sub-tile of the GEMM's rows.
        let tokens = crate::family::int8::emit::lane::unpack_fn(&micro_spec, isa);
        let site = Site {
            micro: "unpack",
            rows: 1,
            cols: tile.t_u * isa.lanes,
            ..site
        };
        let unpack = syn::parse2::<syn::ItemFn>(tokens)
            .map_err(|e| e.to_string())
            .and_then(|f| count_micro(&prims, &f, &site).map_err(|e| e.0))
            .unwrap_or_else(|e| panic!("counting {} {} unpack: {e}", isa.name, spec.format_tag()));
        c.counts += unpack_share(unpack.per_iter, spec, tile);
        c.approximate |= !unpack.unclassified.is_empty();
    }
    counts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, c);
    c
}

/// One micro kernel block's share of a scratch GEMM's `unpack` (its block
/// loop `unpack`): the micro kernel calls of one tile and scratch fill, the
/// GEMM's row groups times the tile's sub-tiles, share it; rounded up.
pub fn unpack_share(unpack: Counts, spec: &I8Spec, tile: I8Tile) -> Counts {
    let calls = (spec.op.rows().div_ceil(tile.m_r) * tile.t_u / tile.t_sub) as u64;
    let share = |n: u64| n.div_ceil(calls);
    Counts {
        ops: share(unpack.ops),
        loads: share(unpack.loads),
        bcast: share(unpack.bcast),
        stores: share(unpack.stores),
        mac: share(unpack.mac),
        dot: share(unpack.dot),
        fmul: share(unpack.fmul),
        shuf: share(unpack.shuf),
    }
}

/// [`block_counts`]' result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockCount {
    /// One iteration of the block loop.
    pub counts: Counts,
    /// Some primitives map to no known instruction and were counted as one
    /// op each (the portable template, which LLVM vectorises for whatever
    /// the build targets): the figures are shown, but not used to rank.
    pub approximate: bool,
}

/// What tiles are ranked by: `value` (GB/s or GFLOPS), or 0 for every tile
/// of a kernel whose count is approximate, so they tie and the tie goes to
/// the biggest tile, as any tie does (the most reuse per load and unpack).
fn rank_value(spec: &I8Spec, isa: &I8Isa, tile: I8Tile, value: f64) -> f64 {
    if block_counts(spec, isa, tile).approximate {
        0.0
    } else {
        value
    }
}

/// One limit on a block's cycles: `count` instructions of a kind over
/// the `units` per cycle that can issue them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    pub what: &'static str,
    pub count: u64,
    pub units: u32,
    /// A limit of the load ports (what [`crowded`] looks for).
    pub load: bool,
    /// Of `count`, the issue slots byte shuffles take beyond their one
    /// each (`core.shuffle_slots`; 0 on the other limits).
    pub extra: u64,
}

impl Limit {
    pub fn cycles(&self) -> f64 {
        self.count as f64 / self.units.max(1) as f64
    }
}

/// The limits on one 32-value block of a micro tile on one core of `t`:
/// every vector op issues on an FMA or ALU pipe (a byte shuffle taking
/// `shuffle_slots` of them), dots on the dot pipes
/// (with the float multiplies and FMAs where `dots_share_fma`),
/// full-width loads on `load_units`, and all loads (broadcasts included)
/// on `broadcast_loads`.
pub fn limits(c: &Counts, t: &TargetDesc) -> [Limit; 4] {
    let core = &t.core;
    let extra = c.shuf * u64::from(core.shuffle_slots().saturating_sub(1));
    let dots = if core.dots_share_fma {
        Limit {
            what: "dots + FP multiplies",
            count: c.dot + c.fmul,
            units: core.dot_units,
            load: false,
            extra: 0,
        }
    } else {
        Limit {
            what: "dots",
            count: c.dot,
            units: core.dot_units,
            load: false,
            extra: 0,
        }
    };
    [
        Limit {
            what: "vector ops",
            count: c.ops + extra,
            units: core.vector_alu_units + core.fma_units,
            load: false,
            extra,
        },
        dots,
        Limit {
            what: "full-width loads",
            count: c.loads - c.bcast,
            units: core.load_units,
            load: true,
            extra: 0,
        },
        Limit {
            what: "loads",
            count: c.loads,
            units: core.broadcast_loads(),
            load: true,
            extra: 0,
        },
    ]
}

/// The limit that holds (the most cycles; the first on a tie).
pub fn bound(c: &Counts, t: &TargetDesc) -> Limit {
    limits(c, t)
        .into_iter()
        .reduce(|a, b| if b.cycles() > a.cycles() { b } else { a })
        .expect("four limits")
}

/// Cycles of one 32-value block of a micro tile on one core of `t`: the
/// limit that holds.
pub fn block_cycles(c: &Counts, t: &TargetDesc) -> f64 {
    bound(c, t).cycles()
}

/// The roofline of one core (paper 004, eq. 1-3): the GB/s of weights the
/// micro kernel's block loop consumes at the cycles its instruction counts
/// give (the up-convert and dot sequence, counted from the emitted code),
/// against the GB/s memory delivers to one core from DRAM and, where the
/// target file says, from L3.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Roofline {
    /// Weight and scale bytes of one 32-value block of the micro tile.
    pub bytes: f64,
    /// Cycles of that block (all `m` rows of a GEMM), by the limit that holds.
    pub cycles: f64,
    /// `bytes` per `cycles` at the core's clock.
    pub compute_gbs: f64,
    pub dram_gbs: f64,
    pub l3_gbs: Option<f64>,
}

impl Roofline {
    /// GB/s of weights with memory delivering `memory` GB/s, and whether the
    /// kernel (not memory) is the bound.
    pub fn with_memory(&self, memory: f64) -> (f64, bool) {
        (self.compute_gbs.min(memory), self.compute_gbs < memory)
    }
}

/// Bytes of one column's 32-value block in the layout: its levels and its
/// scale stream (f16 scales, and the mins where the format has them; or
/// integer sub-scales and a share of the super-block's f16s).
pub(crate) fn block_bytes(spec: &I8Spec, isa: &I8Isa) -> f64 {
    4.0 * spec.bits() as f64 + 2.0 * crate::family::int8::emit::micro::stream_entries(spec, isa)
}

/// The row groups a driver runs `m` rows in with micro kernels of up to
/// `m_r` rows, as `(rows, groups)`: as few groups as `m_r` allows, their
/// heights within one of each other (m = 32, m_r = 5: four of 5 and
/// three of 4); on row-pair ISAs (2x2 matrix tiles) groups of `m_r` and the
/// rest. The emitted driver's order (`crate::family::int8::emit`).
pub fn row_groups(m: usize, m_r: usize, isa: &I8Isa) -> Vec<(usize, usize)> {
    let m_r = m_r.max(1);
    let groups = m.div_ceil(m_r).max(1);
    let (tall, short) = if isa.mmla && m_r > 1 {
        ((m_r, m / m_r), (m % m_r, 1))
    } else {
        (
            (m / groups + 1, m % groups),
            (m / groups, groups - m % groups),
        )
    };
    [tall, short]
        .into_iter()
        .filter(|&(rows, n)| rows > 0 && n > 0)
        .collect()
}

/// [`Roofline`] of `tile` on one core of `t`: a GEMM's cycles are those of
/// each row group's micro kernel ([`row_groups`]).
pub fn roofline(spec: &I8Spec, isa: &I8Isa, t: &TargetDesc, tile: I8Tile) -> Roofline {
    let spec = &isa.reads(spec);
    let tw = (isa.lanes * tile.t_sub) as f64;
    let bytes = tw * block_bytes(spec, isa);
    let cycles: f64 = row_groups(spec.op.rows(), tile.m_r, isa)
        .into_iter()
        .map(|(m_r, n)| {
            let group = I8Tile { m_r, ..tile };
            n as f64 * block_cycles(&block_counts(spec, isa, group).counts, t)
        })
        .sum();
    Roofline {
        bytes,
        cycles,
        compute_gbs: bytes * t.core.ghz / cycles,
        dram_gbs: t.memory.bandwidth_per_core_gbs,
        l3_gbs: t.memory.l3_bandwidth_per_core_gbs,
    }
}

/// Roofline for one core: (GB/s of weights, GFLOPS) for `k x n` with the
/// weights in DRAM.
pub fn predict(
    spec: &I8Spec,
    isa: &I8Isa,
    t: &TargetDesc,
    tile: I8Tile,
    k: usize,
    n: usize,
) -> (f64, f64) {
    let spec = &isa.reads(spec);
    let compute_gbs = roofline(spec, isa, t, tile).compute_gbs;
    let rows = spec.op.rows() as f64;
    let eff = n as f64 / round_up(n, isa.lanes * tile.t_u) as f64;
    let gbs = compute_gbs.min(t.memory.bandwidth_per_core_gbs) * eff;
    let weight_bytes = (k * n) as f64 * block_bytes(spec, isa) / QK as f64;
    let gflops = 2.0 * rows * (k * n) as f64 / (weight_bytes / (gbs * 1e9)) / 1e9;
    (gbs, gflops)
}

const MAX_M_R: usize = 8;

/// A tile (and optionally blocks) to use instead of the model's pick: a
/// tuning profile's measured winner, or the caller's.
#[derive(Clone, Debug, PartialEq)]
pub struct I8Fixed {
    pub tile: I8Tile,
    /// L1 blocks `(m_b, t_b)`; `None` solves them for the tile (GEMV only:
    /// a GEMM keeps its GEMV's blocks).
    pub block: Option<(usize, usize)>,
    pub source: TileSource,
}

/// Column-group widths `t_u` a GEMV tile may have on `isa`: matrix-multiply
/// layouts interleave 4 or 8 columns (Q4_0_4_8 / Q4_0_8_8), whole pairs of
/// column pairs, so GEMV pair sums fill vectors.
fn widths(isa: &I8Isa) -> &'static [usize] {
    if isa.group_bytes == 8 {
        &[2, 4]
    } else {
        &[1, 2, 3, 4, 5, 6, 7, 8]
    }
}

fn candidate(
    spec: &I8Spec,
    isa: &I8Isa,
    t: &TargetDesc,
    tile: I8Tile,
    shape: (usize, usize),
) -> I8Candidate {
    let (gbs, gflops) = predict(spec, isa, t, tile, shape.0, shape.1);
    I8Candidate {
        tile,
        registers: registers(spec, isa, tile),
        gbs,
        gflops,
    }
}

/// Every register-feasible tile for `spec` on `isa`, the model's pick first,
/// then fastest first (ties to wider tiles).
pub fn rank_tiles(
    spec: &I8Spec,
    isa: &I8Isa,
    t: &TargetDesc,
    shape: (usize, usize),
) -> Vec<I8Candidate> {
    let spec = &isa.reads(spec);
    let max_rows = match spec.op {
        Op::Gemv => 1,
        Op::Gemm { m } => m.min(MAX_M_R),
    };
    let mut all = Vec::new();
    let mut best: Option<(f64, I8Tile)> = None;
    for m_r in 1..=max_rows {
        for &t_u in widths(isa) {
            let tile = I8Tile {
                t_u,
                t_sub: t_u,
                m_r,
            };
            if registers(spec, isa, tile) > isa.registers || !fits_l1(spec, isa, t, tile) {
                continue;
            }
            let c = candidate(spec, isa, t, tile, shape);
            let gbs = rank_value(spec, isa, tile, c.gbs);
            all.push(c);
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
    rank(&mut all, best.map(|b| b.1), |c| {
        rank_value(spec, isa, c.tile, c.gbs)
    });
    all
}

/// Whether the smallest L1 block of `tile` (one K granule by the tile's
/// width) fits the target's L1 (eq. 5): the K-quants' granule is a whole
/// 256-value scale group, which rules out the widest GEMV tiles on a
/// 32 KiB L1.
fn fits_l1(spec: &I8Spec, isa: &I8Isa, t: &TargetDesc, tile: I8Tile) -> bool {
    let fp = Int8::footprint(spec, isa);
    fp.bits(tile.m_r, fp.k_granule, tile.t_u * isa.lanes) <= t.cache.l1d * 8
}

/// Sorts `all` fastest first by `key` (ties to bigger tiles) with `pick` first.
fn rank(all: &mut [I8Candidate], pick: Option<I8Tile>, key: impl Fn(&I8Candidate) -> f64) {
    let area = |c: &I8Candidate| c.tile.t_sub * c.tile.m_r;
    all.sort_by(|a, b| {
        let first = |c: &I8Candidate| Some(c.tile) != pick;
        first(a)
            .cmp(&first(b))
            .then(key(b).total_cmp(&key(a)))
            .then(area(b).cmp(&area(a)))
            .then(b.tile.t_u.cmp(&a.tile.t_u))
    });
}

/// Plans an int8 kernel: the fastest register-feasible tile by the model,
/// ties to wider tiles, then the fullest L1 block (eq. 5 for this family)
/// with balanced traffic, as for the f32 family.
pub fn plan(
    spec: &I8Spec,
    isa: &I8Isa,
    t: &TargetDesc,
    shape: (usize, usize),
) -> Result<I8Plan, PlanError> {
    plan_with(spec, isa, t, shape, None)
}

/// [`plan`], or with `fixed`'s tile (and blocks) if given, which must fit
/// the registers, L1 and the layout's divisibility rules.
pub fn plan_with(
    spec: &I8Spec,
    isa: &I8Isa,
    t: &TargetDesc,
    shape: (usize, usize),
    fixed: Option<&I8Fixed>,
) -> Result<I8Plan, PlanError> {
    let spec = &isa.reads(spec);
    if !isa.runs_on(t) {
        return Err(PlanError(format!(
            "int8 ISA {} needs {:?}, which target {} does not list",
            isa.name, isa.requires, t.name
        )));
    }
    isa.supports(spec).map_err(PlanError)?;
    let candidates = rank_tiles(spec, isa, t, shape);
    let (tile, source) = match fixed {
        None => (
            candidates
                .first()
                .ok_or_else(|| PlanError(format!("no int8 tile fits {}", isa.name)))?
                .tile,
            TileSource::Model,
        ),
        Some(f) => {
            check_tile(spec, isa, f.tile, spec.op.rows().min(MAX_M_R))?;
            if f.tile.t_sub != f.tile.t_u {
                return Err(PlanError(format!(
                    "tile t_u={} t_sub={}: a GEMV layout's micro kernel covers the whole tile",
                    f.tile.t_u, f.tile.t_sub
                )));
            }
            (f.tile, f.source.clone())
        }
    };
    let block = match fixed.and_then(|f| f.block) {
        None => search::l1_block::<Int8>(spec, isa, t, tile, shape)
            .ok_or_else(|| PlanError(format!("no L1 block fits {} KiB", t.cache.l1d / 1024)))?,
        Some(b) => search::fixed_block::<Int8>(spec, isa, t, tile, b)?,
    };
    Ok(I8Plan {
        target: t.name.clone(),
        isa: isa.name,
        spec: *spec,
        lanes: isa.lanes,
        tile,
        block,
        registers: Int8::registers(spec, isa, tile),
        prediction: Int8::predict(spec, isa, t, tile, shape),
        order: BlockOrder::Panel,
        source,
        shape,
        candidates,
        notes: Vec::new(),
    })
}

/// Whether `tile` is one the emitter writes for `isa`: registers, widths,
/// and whole 2x2 tiles on matrix-multiply ISAs.
fn check_tile(spec: &I8Spec, isa: &I8Isa, tile: I8Tile, max_rows: usize) -> Result<(), PlanError> {
    let bad = |why: String| {
        Err(PlanError(format!(
            "tile t_u={} t_sub={} m_r={} on {}: {why}",
            tile.t_u, tile.t_sub, tile.m_r, isa.name
        )))
    };
    if tile.t_u == 0 || tile.t_sub == 0 || tile.m_r == 0 {
        return bad("every dimension must be positive".into());
    }
    if !widths(isa).contains(&tile.t_u) {
        return bad(format!("t_u must be one of {:?}", widths(isa)));
    }
    if !tile.t_u.is_multiple_of(tile.t_sub) {
        return bad("t_sub must divide t_u".into());
    }
    if tile.m_r > max_rows.max(1) {
        return bad(format!("at most {} rows", max_rows.max(1)));
    }
    // GEMMs on matrix-multiply ISAs are 2x2 tiles: whole row pairs and
    // column pairs of pairs (as the search makes them).
    let gemm = spec.op != Op::Gemv;
    if isa.mmla && gemm && (!tile.t_sub.is_multiple_of(2) || !tile.m_r.is_multiple_of(2)) {
        return bad("2x2 matrix tiles need even t_sub and m_r".into());
    }
    let regs = registers(spec, isa, tile);
    if regs > isa.registers {
        return bad(format!(
            "needs {regs} vector registers, {} has {}",
            isa.name, isa.registers
        ));
    }
    Ok(())
}

/// The GEMM tiles on `gemv`'s layout for `m` rows, in the order the model
/// prefers them: `t_sub` column groups (a divisor of the layout's t_u) by
/// `m_r` rows, fitting the registers with one to spare (at the exact limit
/// LLVM spills accumulators); the first is the model's pick.
pub fn rank_gemm_tiles(gemv: &I8Plan, m: usize, t: &TargetDesc) -> Vec<I8Candidate> {
    let isa = I8Isa::by_name(gemv.isa).expect("planned ISA");
    let spec = I8Spec {
        op: Op::Gemm { m },
        ..gemv.spec
    };
    let t_u = gemv.tile.t_u;
    let mut all = Vec::new();
    let mut best = (
        0.0,
        I8Tile {
            t_u,
            t_sub: t_u,
            m_r: if isa.mmla { 2 } else { 1 },
        },
    );
    let mut valued = Vec::new();
    // 2x2 matrix tiles: whole row pairs and column pairs of pairs.
    let step = if isa.mmla { 2 } else { 1 };
    for t_sub in (1..=t_u).filter(|d| t_u.is_multiple_of(*d) && d % step == 0) {
        for m_r in (step..=m.max(step).min(MAX_M_R)).step_by(step) {
            let tile = I8Tile { t_u, t_sub, m_r };
            if registers(&spec, &isa, tile) >= isa.registers {
                continue;
            }
            let c = candidate(&spec, &isa, t, tile, (4096, 4096));
            let gflops = rank_value(&spec, &isa, tile, c.gflops);
            all.push(c);
            valued.push((gflops, tile));
            if gemm_beats((gflops, tile), best) {
                best = (gflops, tile);
            }
        }
    }
    if t.core.dots_share_fma && best.0 > 0.0 && crowded(&spec, &isa, t, best.1) {
        best = roomier(&spec, &isa, t, &valued).unwrap_or(best);
    }
    if !all.iter().any(|c| c.tile == best.1) {
        all.push(candidate(&spec, &isa, t, best.1, (4096, 4096)));
    }
    rank(&mut all, Some(best.1), |c| {
        rank_value(&spec, &isa, c.tile, c.gflops)
    });
    all
}

/// Where dots and FMAs contend (`core.dots_share_fma`), a GEMM tile whose
/// loads come within 15% of the limit that holds runs well below its
/// count: on Zen 5 the 8x16 tiles, their loads within 1-11% of their dot
/// slots, measured 1.1-1.4x slower than 4x32 tiles the model ranked equal
/// or up to 5% slower, whose loads were 25% or more below. So such a tile
/// gives way to the fastest tile without that crowding within 10% of it
/// (ties to the bigger tile), if there is one. Not measured elsewhere, nor
/// applied to approximate counts (value 0).
fn roomier(
    spec: &I8Spec,
    isa: &I8Isa,
    t: &TargetDesc,
    valued: &[(f64, I8Tile)],
) -> Option<(f64, I8Tile)> {
    let top = valued.iter().map(|v| v.0).fold(0.0, f64::max);
    let mut pick: Option<(f64, I8Tile)> = None;
    for &v in valued {
        if v.0 < 0.9 * top || crowded(spec, isa, t, v.1) {
            continue;
        }
        if pick.is_none_or(|p| gemm_beats(v, p)) {
            pick = Some(v);
        }
    }
    pick
}

/// Whether GEMM tile `a` (its value and tile) ranks above `b`: faster, or
/// on a tie (a throughput bound the tile does not change, such as maddubs
/// on AVX2) bigger: fewer loads and unpacks per MAC.
fn gemm_beats(a: (f64, I8Tile), b: (f64, I8Tile)) -> bool {
    let tie = (a.0 - b.0).abs() <= b.0 * 1e-4;
    a.0 > b.0 * 1.0001 || (tie && a.1.m_r * a.1.t_sub > b.1.m_r * b.1.t_sub)
}

/// Whether the two largest limits of `tile`'s block are within 15% of
/// each other and one of them is a load limit (see [`roomier`]).
fn crowded(spec: &I8Spec, isa: &I8Isa, t: &TargetDesc, tile: I8Tile) -> bool {
    let counts = block_counts(spec, isa, tile).counts;
    let mut l = limits(&counts, t);
    l.sort_by(|a, b| b.cycles().total_cmp(&a.cycles()));
    l[1].cycles() >= 0.85 * l[0].cycles() && (l[0].load || l[1].load)
}

/// GEMM plans reuse the GEMV plan's layout (t_u, m_b, t_b) so one packed
/// matrix serves both; the micro tile (t_sub column groups x m_r rows) is
/// the model's best that fits the registers with one to spare (at the exact
/// limit LLVM spills accumulators).
pub fn plan_gemm_sharing(gemv: &I8Plan, m: usize, t: &TargetDesc) -> I8Plan {
    plan_gemm_with(gemv, m, t, None).expect("the model's GEMM tile is feasible")
}

/// [`plan_gemm_sharing`], or with `fixed`'s tile, which must be on the
/// GEMV's layout (same t_u and blocks) and fit the registers.
pub fn plan_gemm_with(
    gemv: &I8Plan,
    m: usize,
    t: &TargetDesc,
    fixed: Option<&I8Fixed>,
) -> Result<I8Plan, PlanError> {
    let isa = I8Isa::by_name(gemv.isa).expect("planned ISA");
    let spec = I8Spec {
        op: Op::Gemm { m },
        ..gemv.spec
    };
    let candidates = rank_gemm_tiles(gemv, m, t);
    let (tile, source) = match fixed {
        None => (candidates[0].tile, TileSource::Model),
        Some(f) => {
            let layout = (gemv.tile.t_u, gemv.block.m_b, gemv.block.t_b);
            if let Some((m_b, t_b)) = f.block {
                if (f.tile.t_u, m_b, t_b) != layout {
                    return Err(PlanError(format!(
                        "GEMM tile measured on layout t_u={} m_b={m_b} t_b={t_b}; the GEMV kernel packs t_u={} m_b={} t_b={}",
                        f.tile.t_u, layout.0, layout.1, layout.2
                    )));
                }
            }
            check_tile(&spec, &isa, f.tile, m.min(MAX_M_R))?;
            if f.tile.t_u != gemv.tile.t_u || registers(&spec, &isa, f.tile) >= isa.registers {
                return Err(PlanError(format!(
                    "GEMM tile t_u={} t_sub={} m_r={} does not fit the GEMV layout (t_u={}) with a register to spare",
                    f.tile.t_u, f.tile.t_sub, f.tile.m_r, gemv.tile.t_u
                )));
            }
            (f.tile, f.source.clone())
        }
    };
    let (m_b, t_b) = (gemv.block.m_b, gemv.block.t_b);
    let lhs = Int8::footprint(&spec, &isa).bits(tile.m_r, m_b, t_b);
    Ok(I8Plan {
        spec,
        tile,
        registers: Int8::registers(&spec, &isa, tile),
        block: L1Block::new(m_b, t_b, lhs, gemv.block.gamma_bits),
        prediction: Int8::predict(&spec, &isa, t, tile, (4096, 4096)),
        source,
        shape: (4096, 4096),
        candidates,
        notes: Vec::new(),
        ..gemv.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Op;

    /// eq. 5's weight term is the layout's bytes per value on the ISA, its
    /// scale stream included: Q4_0's f16 per block makes 4.5 bits (9 half
    /// bits), Q8_0's 8.5, Q4_K's scale and min 5, Q6_K's two scales per
    /// block 7; a 3-bit format weighs more where the ISA reads it at 4 bits.
    #[test]
    fn footprint_counts_the_scale_stream_the_isa_reads() {
        use crate::family::int8::isa::{AVX512VNNI, SVE256};
        let half = |tag: &str, isa: &I8Isa| {
            let spec = I8Spec::from_tag(Op::Gemv, tag).expect("format");
            Int8::footprint(&spec, isa).weight_half_bits
        };
        assert_eq!(half("q4_0", &AVX512VNNI), 9);
        assert_eq!(half("q8_0", &AVX512VNNI), 17);
        assert_eq!(half("q4_k", &AVX512VNNI), 10);
        assert_eq!(half("q6_k", &AVX512VNNI), 14);
        const { assert!(!SVE256.three_bit && AVX512VNNI.three_bit) };
        assert!(half("q3_k", &SVE256) > half("q3_k", &AVX512VNNI));
    }

    /// The roofline's compute side is the emitted block's bytes over its
    /// cycles; each memory level caps it, and says which bound holds.
    #[test]
    fn roofline_caps_the_kernel_by_each_memory_level() {
        let t = crate::target::load("zen3").unwrap();
        let isa = crate::family::int8::isa::AVX2;
        let spec = I8Spec::from_tag(Op::Gemv, "tq2_0").unwrap();
        let tile = I8Tile {
            t_u: 3,
            t_sub: 3,
            m_r: 1,
        };
        let r = roofline(&spec, &isa, &t, tile);
        // 24 columns x (8 level bytes + an eighth of an f16 scale: one per
        // super-block of 8 blocks).
        assert_eq!(r.bytes, 24.0 * 8.25);
        let cycles = block_cycles(&block_counts(&spec, &isa, tile).counts, &t);
        assert_eq!(r.cycles, cycles);
        assert_eq!(r.compute_gbs, r.bytes * t.core.ghz / cycles);
        assert_eq!(r.dram_gbs, t.memory.bandwidth_per_core_gbs);
        assert_eq!(r.l3_gbs, t.memory.l3_bandwidth_per_core_gbs);
        let (gbs, kernel) = r.with_memory(1.0);
        assert_eq!((gbs, kernel), (1.0, false));
        let (gbs, kernel) = r.with_memory(1e6);
        assert_eq!((gbs, kernel), (r.compute_gbs, true));
        // The DRAM prediction is the roofline's, times the tile's fill of N.
        let (dram, _) = predict(&spec, &isa, &t, tile, 4096, 4104);
        assert!((dram - r.compute_gbs.min(r.dram_gbs)).abs() < 1e-9);
    }

    /// Row groups cover m in ceil(m / m_r) groups of even heights (whole
    /// `m_r`s on row-pair ISAs), as the emitted driver runs them.
    #[test]
    fn row_groups_are_as_few_and_even_as_m_r_allows() {
        use crate::family::int8::isa::{AVX512VNNI, I8MM};
        assert_eq!(row_groups(32, 5, &AVX512VNNI), [(5, 4), (4, 3)]);
        assert_eq!(row_groups(128, 4, &AVX512VNNI), [(4, 32)]);
        assert_eq!(row_groups(6, 4, &AVX512VNNI), [(3, 2)]);
        assert_eq!(row_groups(1, 5, &AVX512VNNI), [(1, 1)]);
        assert!(row_groups(0, 5, &AVX512VNNI).is_empty());
        assert_eq!(row_groups(6, 4, &I8MM), [(4, 1), (2, 1)]);
        for m in 0..200 {
            for m_r in 1..=8 {
                let g = row_groups(m, m_r, &AVX512VNNI);
                assert_eq!(g.iter().map(|(h, n)| h * n).sum::<usize>(), m);
                assert_eq!(g.iter().map(|(_, n)| n).sum::<usize>(), m.div_ceil(m_r));
                assert!(g.iter().all(|&(h, _)| h <= m_r && h + 1 >= g[0].0));
            }
        }
    }

    fn zen5_gemm(format: &str) -> (I8Spec, I8Isa, TargetDesc, I8Plan) {
        let t = crate::target::load("zen5").unwrap();
        let isa = crate::family::int8::isa::AVX512VNNI;
        let spec = I8Spec::from_tag(Op::Gemv, format).unwrap();
        let gemv = plan(&spec, &isa, &t, (4096, 4096)).unwrap();
        (spec, isa, t, gemv)
    }

    /// Q2_K's packed integer sub-scales on AVX-512 VNNI: per block, row
    /// and column group 8 `vpdpbusd` and 2 `vpdpwssd` (both halves' scales,
    /// both mins) and no float multiply, where the f16 form (Zen 5: 96
    /// dot-pipe slots on a 4x32 tile) took 12.
    #[test]
    fn q2_k_packed_halves_take_ten_dot_slots_per_eight_dots() {
        let (gemv_spec, isa, t, _) = zen5_gemm("q2_k");
        let spec = I8Spec {
            op: Op::Gemm { m: 32 },
            ..gemv_spec
        };
        for (t_sub, m_r) in [(1, 4), (2, 3), (1, 8)] {
            let tile = I8Tile { t_u: 4, t_sub, m_r };
            let c = block_counts(&spec, &isa, tile).counts;
            assert_eq!(c.fmul, 0, "{tile:?}");
            assert_eq!(c.dot as usize, 10 * m_r * t_sub, "{tile:?}");
            assert_eq!(limits(&c, &t)[1].count, c.dot, "{tile:?}");
        }
    }

    /// On Zen 4 a byte shuffle takes two vector issue slots
    /// (`core.shuffle_slots`): IQ4_NL's GEMV on AVX-512 VBMI, two `vpermb`
    /// per 64 weight bytes, is bound by them; a format without lookups,
    /// and any target that leaves the key out, count one slot per op.
    #[test]
    fn byte_shuffles_take_the_targets_issue_slots() {
        let t = crate::target::load("zen4").unwrap();
        assert_eq!(t.core.shuffle_slots(), 2);
        let tile = I8Tile {
            t_u: 4,
            t_sub: 4,
            m_r: 1,
        };
        let isa = crate::family::int8::isa::AVX512VBMI;
        let spec = I8Spec::from_tag(Op::Gemv, "iq4_nl").unwrap();
        let c = block_counts(&spec, &isa, tile).counts;
        assert_eq!(c.shuf, 32);
        let ops = limits(&c, &t)[0];
        assert_eq!(
            (ops.what, ops.extra, ops.count),
            ("vector ops", 32, c.ops + 32)
        );
        assert_eq!(bound(&c, &t), ops);
        let mut one = t.clone();
        one.core.shuffle_slots = None;
        assert_eq!(limits(&c, &one)[0].count, c.ops);
        let plain = I8Spec::from_tag(Op::Gemv, "q4_0").unwrap();
        let q4_0 = block_counts(&plain, &crate::family::int8::isa::AVX512VNNI, tile).counts;
        assert_eq!(q4_0.shuf, 0);
        assert_eq!(limits(&q4_0, &t)[0].count, q4_0.ops);
    }

    /// Where dots share the FMA pipes (Zen 5), a block's float multiplies
    /// and FMAs count against the dot pipes; elsewhere only its dots do.
    #[test]
    fn shared_dot_pipes_count_float_multiplies() {
        let (gemv_spec, isa, t, _) = zen5_gemm("q4_0");
        assert!(t.core.dots_share_fma);
        let spec = I8Spec {
            op: Op::Gemm { m: 32 },
            ..gemv_spec
        };
        let tile = I8Tile {
            t_u: 4,
            t_sub: 2,
            m_r: 4,
        };
        let c = block_counts(&spec, &isa, tile).counts;
        // One scale product and one FMA per row and column vector.
        assert_eq!(c.dot, 64);
        assert_eq!(c.fmul, 16);
        let shared = limits(&c, &t)[1];
        assert_eq!((shared.what, shared.count), ("dots + FP multiplies", 80));
        assert_eq!(bound(&c, &t).what, "dots + FP multiplies");
        let mut apart = t.clone();
        apart.core.dots_share_fma = false;
        let dots = limits(&c, &apart)[1];
        assert_eq!((dots.what, dots.count), ("dots", 64));
    }

    /// Where dots and FMAs contend, a GEMM tile whose loads crowd its bound
    /// gives way to an uncrowded one within 10%: 5x32 over 8x16 on Zen 5
    /// (4x32 measured 1.1-1.4x faster than 8x16 there, 5x32 faster still at
    /// m = 32 in even row groups).
    #[test]
    fn shared_dot_pipes_pass_over_load_crowded_tiles() {
        // (Q2_K's packed integer sub-scales take no FP multiplies per
        // block: its tiles are bound by the dots alone.)
        for format in ["q4_0", "q4_k", "q5_k"] {
            let (_, isa, t, gemv) = zen5_gemm(format);
            let ranked = rank_gemm_tiles(&gemv, 32, &t);
            let pick = ranked[0].tile;
            assert_eq!((pick.m_r, pick.t_sub), (5, 2), "{format}: {ranked:?}");
            let spec = I8Spec {
                op: Op::Gemm { m: 32 },
                ..gemv.spec
            };
            let wide = I8Tile {
                t_u: 4,
                t_sub: 1,
                m_r: 8,
            };
            assert!(crowded(&spec, &isa, &t, wide), "{format}");
            assert!(!crowded(&spec, &isa, &t, pick), "{format}");
            let top = ranked.iter().map(|c| c.gflops).fold(0.0, f64::max);
            assert!(ranked[0].gflops >= 0.9 * top, "{format}: {ranked:?}");
        }
        // Without the key the model's fastest tile stands, crowded or not.
        let (_, _, t, gemv) = zen5_gemm("q5_k");
        let mut apart = t.clone();
        apart.core.dots_share_fma = false;
        let ranked = rank_gemm_tiles(&gemv, 32, &apart);
        let top = ranked.iter().map(|c| c.gflops).fold(0.0, f64::max);
        assert!((ranked[0].gflops - top).abs() <= top * 1e-4, "{ranked:?}");
    }

    /// Approximate counts (the portable template) rank no tile above
    /// another, so the shared-pipe tie rule stays out and the bigger tile
    /// wins, as on targets without the key.
    #[test]
    fn approximate_counts_keep_the_bigger_tile_rule() {
        let t = crate::target::load("zen5").unwrap();
        let mut apart = t.clone();
        apart.core.dots_share_fma = false;
        let isa = crate::family::int8::isa::PORTABLE;
        for format in crate::build::int8_format_tags() {
            let spec = I8Spec::from_tag(Op::Gemv, format).unwrap();
            let gemv = plan(&spec, &isa, &t, (4096, 4096)).unwrap();
            let shared = rank_gemm_tiles(&gemv, 32, &t)[0].tile;
            assert_eq!(
                shared,
                rank_gemm_tiles(&gemv, 32, &apart)[0].tile,
                "{format}"
            );
        }
    }
}
