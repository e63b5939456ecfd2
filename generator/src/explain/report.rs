//! The `--explain` op-count table: each emitted kernel counted with
//! [`crate::opcount`], next to the Arm paper's figures.

use crate::family::f32::planner::Plan;
use crate::family::int8::isa::I8Isa;
use crate::family::int8::plan::I8Plan;
use crate::family::int8::spec::I8Spec;
use crate::opcount::{count_kernel, parse, KPerIter, KernelOps, OpCountError, Rate, Site};
use crate::spec::Op;
use crate::target::TargetDesc;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// One line of the report.
#[derive(Clone, Debug)]
pub struct Row {
    /// `f32` (QIGen path) or `int8` (int8 activations).
    pub family: &'static str,
    pub kernel: String,
    pub gemm: bool,
    pub bits: u32,
    pub result: Result<KernelOps, OpCountError>,
}

impl Row {
    /// The row's unit: per column for a GEMV, per output point for a GEMM.
    pub fn rate(&self) -> Option<Rate> {
        let k = self.result.as_ref().ok()?;
        Some(if self.gemm {
            k.per_block_point()
        } else {
            k.per_block_column()
        })
    }
}

/// A kernel of an emitted file, as its plan describes it.
struct Planned {
    kernel: String,
    gemm: bool,
    bits: u32,
    rows: usize,
    cols: usize,
}

/// Counts each kernel's widest micro kernel (`micro_r{rows}`) in `text`.
fn rows_of(family: &'static str, text: &str, k: KPerIter, kernels: Vec<Planned>) -> Vec<Row> {
    let file = parse(text);
    kernels
        .into_iter()
        .map(|p| {
            let micro = format!("micro_r{}", p.rows);
            let site = Site {
                module: &p.kernel,
                micro: &micro,
                k,
                rows: p.rows,
                cols: p.cols,
            };
            let result = file
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|f| count_kernel(f, &site));
            Row {
                family,
                gemm: p.gemm,
                bits: p.bits,
                kernel: p.kernel,
                result,
            }
        })
        .collect()
}

/// The f32 family's kernels of `plans`, emitted as `kgen` would and counted.
pub fn f32_rows(target: &TargetDesc, plans: &[Plan]) -> Result<Vec<Row>, crate::Error> {
    let out = crate::family::file::emit_file(target, plans, "kgen plan --explain")?;
    let kernels = plans
        .iter()
        .map(|p| Planned {
            kernel: p.kernel_name(),
            gemm: p.spec.op != Op::Gemv,
            bits: p.spec.bits,
            rows: p.tile.m_r,
            cols: p.tile.t_u * p.lanes,
        })
        .collect();
    // f32 activations are row-major, one K value per element.
    Ok(rows_of("f32", &out.text, KPerIter::Advance("x"), kernels))
}

/// The int8 family's GEMV and GEMM (`m` rows, on the GEMV's layout) for
/// every int8 ISA of `target`, emitted as `kgen --format` would and counted.
pub fn int8_rows(
    target: &TargetDesc,
    bits: u32,
    m: usize,
    shape: (usize, usize),
) -> Result<Vec<Row>, crate::Error> {
    let mut rows = Vec::new();
    let spec = I8Spec::new(Op::Gemv, bits)?;
    // An ISA with kernels for some formats only (avx512vbmi) has no row.
    for isa in I8Isa::for_target(target)
        .into_iter()
        .filter(|i| i.supports(&spec).is_ok())
    {
        let gemv = crate::family::int8::model::plan(&spec, &isa, target, shape)?;
        let gemm = crate::family::int8::model::plan_gemm_sharing(&gemv, m, target);
        rows.extend(i8_plan_rows(target, &[gemv, gemm])?);
    }
    Ok(rows)
}

/// The int8 family's kernels of `plans` (all for `target`), emitted as
/// `kgen --format` would and counted.
pub fn i8_plan_rows(target: &TargetDesc, plans: &[I8Plan]) -> Result<Vec<Row>, crate::Error> {
    let text = crate::family::file::emit_file(target, plans, "kgen plan --explain")?.text;
    let kernels = plans
        .iter()
        .map(|p| Planned {
            kernel: p.kernel_name(),
            gemm: p.spec.op != Op::Gemv,
            bits: p.spec.bits(),
            rows: p.tile.m_r,
            cols: p.tile.t_sub * p.lanes,
        })
        .collect();
    let k = KPerIter::Fixed(crate::format::ggml::QK);
    let mut rows = rows_of("int8", &text, k, kernels);
    // Kernels that dot a scratch of levels: the tile's unpack, its share
    // per block, as the model costs it.
    let file = parse(&text);
    for (p, row) in plans.iter().zip(rows.iter_mut()) {
        let scratch = I8Isa::by_name(p.isa)
            .is_some_and(|isa| crate::family::int8::emit::micro::scratch_levels(&p.spec, &isa));
        let (Ok(ops), true) = (row.result.as_mut(), scratch) else {
            continue;
        };
        let site = Site {
            module: &row.kernel,
            micro: "unpack",
            k,
            rows: 1,
            cols: p.tile.t_u * p.lanes,
        };
        match file
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|f| count_kernel(f, &site))
        {
            Ok(u) => {
                ops.per_iter +=
                    crate::family::int8::model::unpack_share(u.per_iter, &p.spec, p.tile);
                ops.unclassified.extend(u.unclassified);
            }
            Err(e) => row.result = Err(e),
        }
    }
    Ok(rows)
}

/// A figure from the Arm paper (Q4_0 on Neoverse V1, loads not counted).
#[derive(Clone, Copy, Debug)]
pub struct PaperFigure {
    pub what: &'static str,
    /// Vector ops per block and column (GEMV) or output point (GEMM).
    pub ops: f64,
    /// Its share of DOT / SMMLA instructions, percent.
    pub mac_percent: f64,
}

/// GEMV: GGML's reference block (12 ops, 2 DOT; plus 5 loads), the
/// four-block runtime transpose (38 / 4), the optimised memory format (26 / 4).
pub const PAPER_GEMV: &[PaperFigure] = &[
    PaperFigure {
        what: "GGML ref",
        ops: 12.0,
        mac_percent: 17.0,
    },
    PaperFigure {
        what: "4-block",
        ops: 9.5,
        mac_percent: 21.0,
    },
    PaperFigure {
        what: "Arm layout",
        ops: 6.5,
        mac_percent: 31.0,
    },
];

/// GEMM: batch 8 with SMMLA, 79 ops for 32 output points per block.
pub const PAPER_GEMM: &[PaperFigure] = &[PaperFigure {
    what: "SMMLA b8",
    ops: 79.0 / 32.0,
    mac_percent: 40.0,
}];

/// `12`, `9.5`, `2.47`.
fn num(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn paper_text(figs: &[PaperFigure]) -> String {
    figs.iter()
        .map(|f| format!("{} {} ({}%)", f.what, num(f.ops), num(f.mac_percent)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn with_pct(part: f64, whole: f64) -> String {
    let p = if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    };
    format!("{part:.2} ({p:>2.0}%)")
}

/// The op-count table for `rows`, with the paper's figures on each line.
pub fn report(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "op counts: vector instructions per 32-weight block in the block loop of the emitted micro kernels\n\
         \x20 (GEMV: per output column; GEMM: per output point. ops exclude loads and stores, as the paper's do;\n\
         \x20  MAC = dots, matrix MACs and FMAs; dot = integer dots / matrix MACs, what the paper's % MAC counts)"
    );
    let _ = writeln!(
        s,
        "  {:<6} {:<28} {:>5} {:>6} {:>11} {:>11} {:>6} {:>6}  {:<22} paper: ops (% MAC)",
        "family", "kernel", "tile", "ops", "MAC", "dot", "loads", "stores", "one loop iteration"
    );
    let mut unclassified = BTreeMap::<String, BTreeSet<String>>::new();
    let mut notes = BTreeSet::new();
    for r in rows {
        let paper = if r.bits == 4 {
            paper_text(if r.gemm { PAPER_GEMM } else { PAPER_GEMV })
        } else {
            "(4-bit only)".to_string()
        };
        let (k, rate) = match (&r.result, r.rate()) {
            (Ok(k), Some(rate)) => (k, rate),
            (Err(e), _) => {
                let _ = writeln!(s, "  {:<6} {:<28} cannot count: {e}", r.family, r.kernel);
                continue;
            }
            (Ok(_), None) => unreachable!("a counted row has a rate"),
        };
        let iter = format!(
            "{} ops {} ld, K={}",
            k.per_iter.ops, k.per_iter.loads, k.k_per_iter
        );
        let _ = writeln!(
            s,
            "  {:<6} {:<28} {:>5} {:>6.2} {:>11} {:>11} {:>6.2} {:>6.2}  {:<22} {}",
            r.family,
            k.module,
            format!("{}x{}", k.rows, k.cols),
            rate.ops,
            with_pct(rate.mac, rate.ops),
            with_pct(rate.dot, rate.ops),
            rate.loads,
            rate.stores,
            iter,
            paper
        );
        if !k.unclassified.is_empty() {
            unclassified
                .entry(k.module.clone())
                .or_default()
                .extend(k.unclassified.iter().cloned());
        }
        notes.extend(k.notes.iter().map(|n| format!("{}: {n}", k.module)));
    }
    for (module, what) in &unclassified {
        let split = |w: &String| {
            w.split_once(": ")
                .map_or((w.clone(), String::new()), |(n, r)| {
                    (n.to_string(), r.to_string())
                })
        };
        let names: BTreeSet<String> = what.iter().map(|w| split(w).0).collect();
        let reasons: BTreeSet<String> = what.iter().map(|w| split(w).1).collect();
        let _ = writeln!(
            s,
            "  approximate: {module}: {} primitive(s) counted as 1 op each, their code maps to no known instruction: {} [{}]",
            names.len(),
            names.into_iter().collect::<Vec<_>>().join(", "),
            reasons.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    for n in &notes {
        let _ = writeln!(s, "  note: {n}");
    }
    s
}

/// The `kgen plan --format --explain` op-count report for the int8 `plans`.
pub fn explain_i8(target: &TargetDesc, plans: &[I8Plan]) -> Result<String, crate::Error> {
    Ok(report(&i8_plan_rows(target, plans)?))
}

/// The `--explain` op-count report: the f32 family's `plans` (a GEMV and a
/// GEMM, as `kgen` emits them together) and, for 4- or 8-bit weights, the
/// int8 family's GEMV and `m`-row GEMM on every int8 ISA of `target`.
pub fn explain(
    target: &TargetDesc,
    f32_plans: &[Plan],
    bits: u32,
    m: usize,
    shape: Option<(usize, usize)>,
) -> Result<String, crate::Error> {
    let mut rows = f32_rows(target, f32_plans)?;
    if bits == 4 || bits == 8 {
        rows.extend(int8_rows(target, bits, m, shape.unwrap_or((4096, 4096)))?);
    }
    Ok(report(&rows))
}
