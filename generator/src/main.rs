//! The `kgen` command line.
//!
//! `kgen --target T --bits B --group G` writes the f32 family's kernels and
//! `kgen --target T --format F` the int8 family's; `kgen plan` explains the
//! plan, `kgen tune` measures tiles on this machine, and `kgen targets`
//! lists the CPUs kgen knows with the kernels each would get.
//!
//! Everything goes to standard output through [`out`]: when the reader goes
//! away (`kgen ... | head`) kgen ends quietly, killed by SIGPIPE on Unix as
//! other tools are, or with status 0 where a write returns `BrokenPipe`.

use clap::{Args, Parser, Subcommand, ValueEnum};
use kgen::family::f32::isa::Isa;
use kgen::family::f32::model::MicroTile;
use kgen::family::f32::planner::{Plan, PlanOptions};
use kgen::family::int8::model;
use kgen::family::int8::plan::I8Plan;
use kgen::family::int8::spec::I8Spec;
use kgen::family::plan::BlockOrder;
use kgen::spec::{Group, Op};
use kgen::{target, Error, I8Request, IsaChoice, Request};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Writes to standard output; a closed pipe comes back as
/// `Error::Io(BrokenPipe)`, which [`main`] turns into a quiet exit.
fn out(args: std::fmt::Arguments) -> Result<(), Error> {
    std::io::stdout().lock().write_fmt(args).map_err(Error::Io)
}

/// `println!` through [`out`], returning from the function on error.
macro_rules! outln {
    () => { out(format_args!("\n"))? };
    ($($t:tt)*) => { out(format_args!("{}\n", format_args!($($t)*)))? };
}

/// `eprintln!` that never panics (a closed standard error is not an error).
macro_rules! note {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

#[derive(Parser, Debug)]
#[command(
    name = "kgen",
    version,
    about = "Generates quantized GEMV/GEMM kernels for a CPU",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    gen: GenArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write the kernels for a target and weight format (the default command).
    Gen(GenArgs),
    /// Show the plan for a target and weight format, and why.
    Plan(PlanArgs),
    /// List the known targets and the kernels each would get.
    Targets(TargetsArgs),
    /// Time candidate micro tiles on this machine and store the winner in a profile (with the machine's read bandwidth and clock, for `native` plans).
    Tune(TuneArgs),
    /// What kgen makes of a GGUF model file on this CPU: tensors by type,
    /// the kernel each gets, repack times, `--check` against f64, `--json`
    /// (runs `kgen-inspect`: `cargo build --release -p kgen-inspect`).
    Inspect(InspectArgs),
}

/// `kgen inspect`'s arguments, passed on as they are.
#[derive(Args, Debug)]
struct InspectArgs {
    /// FILE.gguf [--check] [--json] [--threads N] (see `kgen inspect --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// An int8-family format by its tag in the format table.
/// `--format`: a tag of the format table's int8 rows, which clap lists as
/// the possible values in `--help` and in its errors.
#[derive(Clone)]
struct Int8FormatParser;

impl clap::builder::TypedValueParser for Int8FormatParser {
    type Value = I8Spec;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<I8Spec, clap::Error> {
        let tag = value.to_string_lossy();
        I8Spec::from_tag(Op::Gemv, &tag).ok_or_else(|| {
            let mut e = clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd);
            use clap::error::{ContextKind, ContextValue};
            if let Some(arg) = arg {
                e.insert(
                    ContextKind::InvalidArg,
                    ContextValue::String(arg.to_string()),
                );
            }
            e.insert(
                ContextKind::InvalidValue,
                ContextValue::String(tag.into_owned()),
            );
            e.insert(
                ContextKind::ValidValue,
                ContextValue::Strings(
                    kgen::build::int8_format_tags()
                        .into_iter()
                        .map(String::from)
                        .collect(),
                ),
            );
            e
        })
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            kgen::format::int8_formats().map(|f| clap::builder::PossibleValue::new(f.tag)),
        ))
    }
}

#[derive(Args, Debug, Clone)]
struct TuneArgs {
    /// Target to tune for; tuning measures the running CPU, so `native`.
    #[arg(long, short, default_value = "native")]
    target: String,
    /// f32 family: weight bits.
    #[arg(long, short, default_value_t = 4)]
    bits: u32,
    /// f32 family: group size.
    #[arg(long, short, default_value = "32")]
    group: String,
    /// Tune the int8 family for this GGUF format instead of the f32
    /// family's --bits/--group.
    #[arg(long, value_parser = Int8FormatParser, conflicts_with_all = ["bits", "group"])]
    format: Option<I8Spec>,
    #[arg(long, value_enum, default_value = "gemv")]
    op: OpArg,
    /// Activation rows for `--op gemm`.
    #[arg(long, default_value_t = 32)]
    m: usize,
    /// Shapes KxN to time, comma-separated.
    #[arg(long, default_value = "4096x4096", value_delimiter = ',', value_parser = parse_shape)]
    shapes: Vec<(usize, usize)>,
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Wall-clock budget in seconds, compilation included.
    #[arg(long, default_value_t = 120.0)]
    budget: f64,
    /// Measure again even if the profile already has this key.
    #[arg(long)]
    force: bool,
    /// Where profiles live.
    #[arg(long, default_value = "profiles")]
    profile_dir: PathBuf,
    /// Most micro tiles to time (block variants of the model's pick come on top).
    #[arg(long, default_value_t = 10)]
    max_tiles: usize,
    /// Print the model's pick against the measured best for every tuned entry
    /// (both families), and exit.
    #[arg(long)]
    report: bool,
    /// Print the profile entry for this machine and spec (if any), and exit.
    #[arg(long)]
    print: bool,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum OpArg {
    Gemv,
    Gemm,
}

#[derive(Args, Debug, Clone)]
struct SpecArgs {
    /// Target name (see `kgen targets`), `native`, or a path to a target TOML.
    #[arg(long, short, default_value = "native")]
    target: String,
    /// f32 family: weight bits, 2, 3, 4 or 8.
    #[arg(long, short, default_value_t = 4)]
    bits: u32,
    /// f32 family: group size along K, 16, 32, 64, 128, 256, or `col` for whole column.
    #[arg(long, short, default_value = "128")]
    group: String,
    /// The int8-activation family instead of the f32 family's
    /// --bits/--group: a format tag of the format table (GGUF types, and
    /// kgen's own 2- and 1-bit grids k2_bb, k2_pl, k1).
    #[arg(long, value_parser = Int8FormatParser, conflicts_with_all = ["bits", "group", "tile", "order"])]
    format: Option<I8Spec>,
    /// ISAs to emit: `best`, `all`, or a comma-separated list
    /// (f32: avx512f,avx2,neon,portable; int8: avx512vnni,avxvnni,avx2,i8mm,sve256,dotprod,portable).
    #[arg(long, default_value = "best")]
    isa: String,
    /// Representative shape KxN the model ranks tiles for (kernels accept any shape).
    #[arg(long, value_parser = parse_shape)]
    shape: Option<(usize, usize)>,
    /// f32 family: force the micro tile as M_UxT_U[xM_R] instead of the model's pick.
    #[arg(long, value_parser = parse_tile)]
    tile: Option<MicroTile>,
    /// f32 family: force the block order.
    #[arg(long, value_enum)]
    order: Option<OrderArg>,
    /// Tuning profile file or directory (default: `profiles/` if it exists).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Ignore tuning profiles: plan with the model alone.
    #[arg(long)]
    no_profile: bool,
}

#[derive(Args, Debug, Clone)]
struct GenArgs {
    #[command(flatten)]
    spec: SpecArgs,
    /// Activation rows the GEMM kernel is planned for.
    #[arg(long, default_value_t = 32)]
    m: usize,
    /// Which operations to emit.
    #[arg(long, value_enum, default_value = "both")]
    op: OpsArg,
    /// Output file (default: standard output). Rewritten only if the content changes.
    #[arg(long, short)]
    output: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct PlanArgs {
    #[command(flatten)]
    spec: SpecArgs,
    /// Plan a GEMM for M activation rows instead of a GEMV.
    #[arg(long)]
    m: Option<usize>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Also list every candidate micro tile with the model's prediction, and
    /// count the instructions of the emitted kernels.
    #[arg(long)]
    explain: bool,
}

#[derive(Args, Debug, Clone)]
struct TargetsArgs {
    /// f32 family: weight bits of the kernels listed.
    #[arg(long, short, default_value_t = 4)]
    bits: u32,
    /// f32 family: group size of the kernels listed.
    #[arg(long, short, default_value = "128")]
    group: String,
    /// Activation rows the GEMM kernels are planned for.
    #[arg(long, default_value_t = 32)]
    m: usize,
    /// `best` (what `kgen --target T` emits) or `all` (what a target can run).
    #[arg(long, default_value = "best")]
    isa: String,
    /// One line per target with its hardware (features, registers, caches,
    /// cores, bandwidth) instead of the kernel table.
    #[arg(long)]
    summary: bool,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum OpsArg {
    Gemv,
    Gemm,
    Both,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum OrderArg {
    Panel,
    Zcurve,
}

fn parse_shape(s: &str) -> Result<(usize, usize), String> {
    let (k, n) = s
        .split_once(['x', 'X'])
        .ok_or("shape must be KxN, e.g. 4096x11008")?;
    let k = k.parse().map_err(|_| format!("bad K in `{s}`"))?;
    let n = n.parse().map_err(|_| format!("bad N in `{s}`"))?;
    if k == 0 || n == 0 {
        return Err("shape dimensions must be positive".into());
    }
    Ok((k, n))
}

fn parse_tile(s: &str) -> Result<MicroTile, String> {
    let parts: Vec<usize> = s
        .split(['x', 'X'])
        .map(|p| {
            p.parse()
                .map_err(|_| format!("bad tile `{s}`: expected M_UxT_U[xM_R]"))
        })
        .collect::<Result<_, _>>()?;
    match parts[..] {
        [m_u, t_u] if m_u > 0 && t_u > 0 => Ok(MicroTile { m_u, t_u, m_r: 1 }),
        [m_u, t_u, m_r] if m_u > 0 && t_u > 0 && m_r > 0 => Ok(MicroTile { m_u, t_u, m_r }),
        _ => Err(format!(
            "bad tile `{s}`: expected M_UxT_U[xM_R] with positive numbers"
        )),
    }
}

fn isa_choice(s: &str) -> IsaChoice {
    match s {
        "best" => IsaChoice::Best,
        "all" => IsaChoice::All,
        list => IsaChoice::Named(list.split(',').map(|x| x.trim().to_string()).collect()),
    }
}

/// The profile files a command reads: `--profile`, else `profiles/` if it
/// exists; none with `--no-profile` or a forced tile.
fn profile_files(spec: &SpecArgs) -> Vec<PathBuf> {
    if spec.tile.is_some() || spec.no_profile {
        return Vec::new();
    }
    let dir = spec
        .profile
        .clone()
        .unwrap_or_else(|| PathBuf::from("profiles"));
    if dir.is_dir() {
        kgen::profile::files_in(&dir)
    } else if dir.is_file() {
        vec![dir]
    } else {
        Vec::new()
    }
}

fn request(spec: &SpecArgs, ops: Vec<Op>) -> Result<Request, Error> {
    let group = Group::parse(&spec.group)?;
    let mut req = Request::new(spec.bits, group, ops);
    req.isas = isa_choice(&spec.isa);
    req.options = PlanOptions {
        shape: spec.shape,
        tile: spec.tile,
        order: spec.order.map(|o| match o {
            OrderArg::Panel => BlockOrder::Panel,
            OrderArg::Zcurve => BlockOrder::ZCurve,
        }),
        ..PlanOptions::default()
    };
    // A forced tile wins over profiles.
    req.profiles = profile_files(spec);
    Ok(req)
}

fn i8_request(spec: &SpecArgs, format: I8Spec, ops: Vec<Op>) -> I8Request {
    let mut req = I8Request::new(format, ops);
    req.isas = isa_choice(&spec.isa);
    req.shape = spec.shape;
    req.profiles = profile_files(spec);
    req
}

/// Each distinct plan note once, on standard error.
fn print_notes<'a>(notes: impl Iterator<Item = &'a String>) {
    let mut seen = std::collections::BTreeSet::new();
    for n in notes {
        if seen.insert(n.clone()) {
            note!("kgen: {n}");
        }
    }
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("kgen {}", args.join(" "))
}

/// The ops `--op` names, with `m` rows for a GEMM.
fn ops_of(op: OpsArg, m: usize) -> Vec<Op> {
    match op {
        OpsArg::Gemv => vec![Op::Gemv],
        OpsArg::Gemm => vec![Op::Gemm { m }],
        OpsArg::Both => vec![Op::Gemv, Op::Gemm { m }],
    }
}

/// Writes `text` to `--output` (saying so on stderr) or standard output.
fn write_output(args: &GenArgs, text: &str, kernels: &[String]) -> Result<(), Error> {
    match &args.output {
        Some(path) => {
            let changed = kgen::emit::write_if_changed(path, text)?;
            note!(
                "kgen: {} {} ({} kernel(s): {})",
                if changed { "wrote" } else { "unchanged" },
                path.display(),
                kernels.len(),
                kernels.join(", ")
            );
        }
        None => out(format_args!("{text}"))?,
    }
    Ok(())
}

/// `--target`, with the read bandwidth and clock a tuning profile measured
/// on this machine when the target is `native` (`kgen tune` records them),
/// said on standard error.
fn load_target(spec: &SpecArgs) -> Result<kgen::target::TargetDesc, Error> {
    let target = target::load(&spec.target)?;
    let (target, note) = kgen::profile::with_measured_machine(&target, &profile_files(spec));
    if let Some(n) = note {
        note!("kgen: {n}");
    }
    Ok(target)
}

fn gen(args: &GenArgs) -> Result<(), Error> {
    let target = load_target(&args.spec)?;
    let ops = ops_of(args.op, args.m);
    if let Some(format) = args.spec.format {
        // The int8 family: GEMV and a GEMM sharing its layout.
        let plans = kgen::plans_for_i8(&target, &i8_request(&args.spec, format, ops))?;
        print_notes(plans.iter().flat_map(|p| &p.notes));
        let out = kgen::family::file::emit_file(&target, &plans, &command_line())?;
        return write_output(args, &out.text, &out.kernels);
    }
    let req = request(&args.spec, ops)?;
    let plans = kgen::plans_for(&target, &req)?;
    print_notes(plans.iter().flat_map(|p| &p.notes));
    let out = kgen::family::file::emit_file(&target, &plans, &command_line())?;
    write_output(args, &out.text, &out.kernels)
}

/// A plan as `kgen plan --json` prints it: the family and kernel name, then
/// the plan's own fields.
#[derive(Serialize)]
struct PlanJson<'a, P: Serialize> {
    family: &'static str,
    kernel: String,
    /// int8 family: the format tag and the packed layout's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layout: Option<String>,
    #[serde(flatten)]
    plan: &'a P,
}

fn json<T: Serialize>(v: &T) -> Result<String, Error> {
    serde_json::to_string_pretty(v).map_err(|e| Error::Usage(e.to_string()))
}

fn print_plan(p: &Plan, explain: bool) -> Result<(), Error> {
    outln!("kernel {}", p.kernel_name());
    outln!(
        "  target {}  isa {} ({} f32 lanes, {} registers)",
        p.target,
        p.isa,
        p.lanes,
        p.registers.limit
    );
    outln!("  spec   {}", p.spec);
    outln!(
        "  micro tile  m_u={} t_u={} m_r={}  ({} columns per tile; from {:?})",
        p.tile.m_u,
        p.tile.t_u,
        p.tile.m_r,
        p.tile.t_u * p.lanes,
        p.source
    );
    outln!(
        "  L1 block    m_b={} t_b={}  order={:?}",
        p.block.m_b,
        p.block.t_b,
        p.order
    );
    let r = &p.registers;
    outln!(
        "  eq. 4  registers: {} acc + {} weights + {} broadcast = {} <= {}  (paper form m_u + m_u t_u + t_u = {}); {} unpack masks, {} reloaded from memory",
        r.accumulators,
        r.weights,
        r.broadcast,
        r.total,
        r.limit,
        p.tile.m_u + p.tile.m_u * p.tile.t_u + p.tile.t_u,
        r.masks,
        r.spilled_masks()
    );
    outln!(
        "  eq. 5  L1: 32*{m_r}*{mb} + {b}*{mb}*{tb} + 32*{m_r}*{tb} = {} <= {} bits ({:.1}% used)",
        p.block.lhs_bits,
        p.block.gamma_bits,
        100.0 * p.block.utilization,
        m_r = p.tile.m_r,
        mb = p.block.m_b,
        tb = p.block.t_b,
        b = p.spec.bits
    );
    let pr = &p.prediction;
    outln!(
        "  roofline at {}x{}: compute {:.1} GB/s, memory {:.1} GB/s per core -> {:.1} GB/s, {:.1} GFLOPS on one core ({:?}-bound); {:.1} GB/s on all cores",
        p.shape.0, p.shape.1, pr.compute_gbs, pr.memory_gbs, pr.gbs, pr.gflops, pr.bound, pr.gbs_all_cores
    );
    outln!(
        "  unpack: {} vector ALU ops per {}-value unit per column vector (shift/and/convert)",
        kgen::family::f32::model::unpack_alu_ops(p.spec.bits),
        p.spec.values_per_unit()
    );
    if explain {
        outln!("  candidates (model rank, best first):");
        for (i, c) in p.candidates.iter().enumerate() {
            outln!(
                "   {:>3}. m_u={:<2} t_u={:<2} m_r={}  regs {:>2}/{} +{} masks ({} reloaded)  {:>7.1} GB/s  {:>7.1} GFLOPS  compute {:>7.1} GB/s  col-eff {:.3}",
                i + 1,
                c.tile.m_u,
                c.tile.t_u,
                c.tile.m_r,
                c.registers.total,
                c.registers.limit,
                c.registers.masks,
                c.registers.spilled_masks(),
                c.prediction.gbs,
                c.prediction.gflops,
                c.prediction.compute_gbs,
                c.prediction.column_efficiency
            );
        }
    }
    Ok(())
}

fn print_plan_i8(
    p: &I8Plan,
    target: &kgen::target::TargetDesc,
    explain: bool,
) -> Result<(), Error> {
    let isa = kgen::family::int8::isa::I8Isa::by_name(p.isa).expect("plan ISA");
    outln!("kernel {}", p.kernel_name());
    outln!(
        "  target {}  isa {} ({} columns per vector, {} registers)",
        p.target,
        p.isa,
        p.lanes,
        p.registers.limit
    );
    let levels = if p.spec.codebook() {
        "4-bit codebook indices".to_string()
    } else if let Some(grid) = p.spec.format.grid() {
        format!("{}-bit indices into the grid {grid:?}", p.spec.bits())
    } else {
        format!("{}-bit levels", p.spec.bits())
    };
    let source = p.spec.source_type();
    outln!(
        "  format {} ({} {}: {levels}, blocks of 32), op {}",
        p.spec.format_tag(),
        source.origin(),
        source.name(),
        match p.spec.op {
            Op::Gemv => "gemv".to_string(),
            Op::Gemm { m } => format!("gemm (m={m})"),
        }
    );
    outln!(
        "  micro tile  t_u={} t_sub={} m_r={}  ({} columns per tile, {} per micro kernel; from {})",
        p.tile.t_u,
        p.tile.t_sub,
        p.tile.m_r,
        p.tile.t_u * p.lanes,
        p.tile.t_sub * p.lanes,
        p.source.describe()
    );
    outln!(
        "  layout      {} ({} columns interleaved in {}-byte groups; the GEMV and GEMM kernels share it)",
        p.layout_name(),
        p.tile.t_u * p.lanes,
        isa.group_bytes
    );
    outln!(
        "  L1 block    m_b={} t_b={}  order={:?} (the model's{}; kernels call over all of K)",
        p.block.m_b,
        p.block.t_b,
        p.order,
        if p.spec.op == Op::Gemv {
            ""
        } else {
            ", the GEMV's"
        }
    );
    outln!(
        "  registers   {} {} {}",
        p.registers.used,
        if p.registers.used <= p.registers.limit {
            "<="
        } else {
            ">"
        },
        p.registers.limit
    );
    outln!(
        "  L1          8*{m_r}*{mb} + {w}*{mb}*{tb}/2 + 32*{m_r}*{tb} = {} {} {} bits ({:.1}%)",
        p.block.lhs_bits,
        if p.block.lhs_bits <= p.block.gamma_bits {
            "<="
        } else {
            ">"
        },
        p.block.gamma_bits,
        100.0 * p.block.lhs_bits as f64 / p.block.gamma_bits as f64,
        m_r = p.tile.m_r,
        mb = p.block.m_b,
        tb = p.block.t_b,
        w = <kgen::family::Int8 as kgen::family::Family>::footprint(&p.spec, &p.isa())
            .weight_half_bits
    );
    // The planner ranks tiles with the weights streamed from DRAM at any
    // shape; the GEMV roofline below gives the L3 figure beside it.
    outln!(
        "  model       {:.1} GB/s of weights, {:.1} GFLOPS on one core at {}x{}, weights from DRAM",
        p.prediction.gbs,
        p.prediction.gflops,
        p.shape.0,
        p.shape.1
    );
    let count = model::block_counts(&p.spec, &isa, p.tile);
    let limits = model::limits(&count.counts, target);
    let bound = model::bound(&count.counts, target);
    outln!(
        "  per block   {:.1} cycles, {}-bound ({}; counted from the emitted micro kernel{})",
        bound.cycles(),
        bound.what,
        limits
            .iter()
            .map(|l| {
                let count = if l.extra > 0 {
                    format!(
                        "{} + {} for byte shuffles' further slots = {}",
                        l.count - l.extra,
                        l.extra,
                        l.count
                    )
                } else {
                    l.count.to_string()
                };
                format!("{} {count} / {} = {:.1}", l.what, l.units, l.cycles())
            })
            .collect::<Vec<_>>()
            .join(", "),
        if count.approximate {
            ", approximate: some primitives map to no instruction"
        } else {
            ""
        }
    );
    if p.spec.op == Op::Gemv {
        let r = model::roofline(&p.spec, &isa, target, p.tile);
        let side = |name: &str, mem: Option<f64>| match mem {
            Some(m) => {
                let (gbs, kernel) = r.with_memory(m);
                format!(
                    "{name} {m:.1} GB/s per core: {}, {gbs:.1} GB/s",
                    if kernel {
                        "kernel-bound"
                    } else {
                        "memory-bound"
                    }
                )
            }
            None if target.name == "native" => {
                format!("{name}: bandwidth unknown (`kgen tune` measures it)")
            }
            None => format!("{name}: no bandwidth in the target file"),
        };
        outln!(
            "  roofline    the block loop streams {:.0} bytes per {:.1} cycles = {:.1} GB/s at {} GHz; weights in {}; in {}",
            r.bytes,
            r.cycles,
            r.compute_gbs,
            target.core.ghz,
            side("DRAM", Some(r.dram_gbs)),
            side("L3", r.l3_gbs)
        );
    }
    if explain {
        outln!("  candidates (model rank, best first):");
        for (i, c) in p.candidates.iter().enumerate() {
            outln!(
                "   {:>3}. t_u={} t_sub={} m_r={}  regs {:>2}/{}  {:>7.1} GB/s  {:>7.1} GFLOPS",
                i + 1,
                c.tile.t_u,
                c.tile.t_sub,
                c.tile.m_r,
                c.registers,
                p.registers.limit,
                c.gbs,
                c.gflops
            );
        }
    }
    Ok(())
}

fn plan(args: &PlanArgs) -> Result<(), Error> {
    let target = load_target(&args.spec)?;
    let op = match args.m {
        Some(m) => Op::Gemm { m },
        None => Op::Gemv,
    };
    if let Some(format) = args.spec.format {
        return plan_i8(args, &target, format, op);
    }
    let req = request(&args.spec, vec![op])?;
    let plans = kgen::plans_for(&target, &req)?;
    print_notes(plans.iter().flat_map(|p| &p.notes));
    if args.json {
        let v: Vec<_> = plans
            .iter()
            .map(|p| PlanJson {
                family: "f32",
                kernel: p.kernel_name(),
                format: None,
                layout: None,
                plan: p,
            })
            .collect();
        outln!("{}", json(&v)?);
    } else {
        for p in &plans {
            print_plan(p, args.explain)?;
        }
        if args.explain {
            // Both operations, as `kgen` emits them together; GEMM at the
            // paper's batch of 8 unless --m says otherwise.
            let m = args.m.unwrap_or(8);
            let req = request(&args.spec, vec![Op::Gemv, Op::Gemm { m }])?;
            let f32_plans = kgen::plans_for(&target, &req)?;
            let counts =
                kgen::explain::explain(&target, &f32_plans, args.spec.bits, m, args.spec.shape)?;
            out(format_args!("{counts}"))?;
        }
    }
    Ok(())
}

fn plan_i8(
    args: &PlanArgs,
    target: &kgen::target::TargetDesc,
    format: I8Spec,
    op: Op,
) -> Result<(), Error> {
    let plans = kgen::plans_for_i8(target, &i8_request(&args.spec, format, vec![op]))?;
    print_notes(plans.iter().flat_map(|p| &p.notes));
    if args.json {
        let v: Vec<_> = plans
            .iter()
            .map(|p| PlanJson {
                family: "int8",
                kernel: p.kernel_name(),
                format: Some(p.spec.format_tag()),
                layout: Some(p.layout_name()),
                plan: p,
            })
            .collect();
        outln!("{}", json(&v)?);
        return Ok(());
    }
    for p in &plans {
        print_plan_i8(p, target, args.explain)?;
    }
    if args.explain {
        // The GEMV and a GEMM on its layout, as `kgen --format` emits them;
        // GEMM at the paper's batch of 8 unless --m says otherwise.
        let m = args.m.unwrap_or(8);
        let both = i8_request(&args.spec, format, vec![Op::Gemv, Op::Gemm { m }]);
        let plans = kgen::plans_for_i8(target, &both)?;
        let counts = kgen::explain::explain_i8(target, &plans)?;
        out(format_args!("{counts}"))?;
    }
    Ok(())
}

/// One row of `kgen targets`: a family's kernels on one ISA.
struct KernelRow {
    family: &'static str,
    format: String,
    isa: String,
    gemv: String,
    gemm: String,
}

/// The f32 and int8 kernels `kgen --target T` would write for `t`.
fn kernel_rows(t: &kgen::target::TargetDesc, args: &TargetsArgs) -> Result<Vec<KernelRow>, Error> {
    let mut rows = Vec::new();
    let m = args.m;
    let mut req = Request::new(
        args.bits,
        Group::parse(&args.group)?,
        vec![Op::Gemv, Op::Gemm { m }],
    );
    req.isas = isa_choice(&args.isa);
    let plans = kgen::plans_for(t, &req)?;
    for pair in plans.chunks(2) {
        rows.push(KernelRow {
            family: "f32",
            format: pair[0].spec.format_tag(),
            isa: pair[0].isa.to_string(),
            gemv: pair[0].kernel_name(),
            gemm: pair.get(1).map(Plan::kernel_name).unwrap_or_default(),
        });
    }
    for tag in kgen::build::int8_format_tags() {
        let spec = I8Spec::from_tag(Op::Gemv, tag).expect("a listed int8 format");
        let mut req = I8Request::new(spec, vec![Op::Gemv, Op::Gemm { m }]);
        req.isas = isa_choice(&args.isa);
        let plans = kgen::plans_for_i8(t, &req)?;
        if plans.is_empty() {
            rows.push(KernelRow {
                family: "int8",
                format: tag.to_string(),
                isa: "-".into(),
                gemv: "(no int8 ISA has kernels for it)".into(),
                gemm: String::new(),
            });
        }
        for pair in plans.chunks(2) {
            rows.push(KernelRow {
                family: "int8",
                format: tag.to_string(),
                isa: pair[0].isa.to_string(),
                gemv: pair[0].kernel_name(),
                gemm: pair.get(1).map(I8Plan::kernel_name).unwrap_or_default(),
            });
        }
    }
    Ok(rows)
}

/// Runs `kgen-inspect` (beside this binary, else on `PATH`) with `args`: it
/// links the runtime's kernels, which this binary cannot (the runtime is
/// built with this crate), as `cargo foo` runs `cargo-foo`.
fn inspect(args: &InspectArgs) -> ExitCode {
    let beside = std::env::current_exe()
        .ok()
        .map(|e| e.with_file_name(format!("kgen-inspect{}", std::env::consts::EXE_SUFFIX)))
        .filter(|p| p.is_file());
    let program = beside.unwrap_or_else(|| PathBuf::from("kgen-inspect"));
    match std::process::Command::new(&program)
        .args(&args.args)
        .status()
    {
        Ok(status) => ExitCode::from(status.code().map_or(2, |c| c.clamp(0, 255) as u8)),
        Err(e) => {
            note!(
                "kgen: error: cannot run {} ({e}); build it with `cargo build --release -p kgen-inspect`",
                program.display()
            );
            ExitCode::from(2)
        }
    }
}

fn targets(args: &TargetsArgs) -> Result<(), Error> {
    let all = target::load_all()?;
    if args.summary {
        for t in &all {
            let isas: Vec<_> = Isa::for_target(t).iter().map(|i| i.name).collect();
            let i8: Vec<_> = kgen::family::int8::isa::I8Isa::for_target(t)
                .iter()
                .map(|i| i.name)
                .collect();
            outln!(
                "{:<16} {}  [f32 kernels: {}; int8 kernels: {}]",
                t.name,
                t.summary(),
                isas.join(", "),
                i8.join(", ")
            );
        }
        outln!("{:<16} the CPU kgen runs on (read at run time)", "native");
        return Ok(());
    }
    let w = all.iter().map(|t| t.name.len()).max().unwrap_or(6).max(6);
    let gemm = format!("GEMM KERNEL (m={})", args.m);
    outln!(
        "{:<w$}  {:<7}  {:<6}  {:<7}  {:<10}  {:<30}  {gemm}",
        "TARGET",
        "ARCH",
        "FAMILY",
        "FORMAT",
        "ISA",
        "GEMV KERNEL"
    );
    for t in &all {
        for (i, r) in kernel_rows(t, args)?.iter().enumerate() {
            let (name, arch) = if i == 0 {
                (t.name.as_str(), t.arch.cfg_name())
            } else {
                ("", "")
            };
            outln!(
                "{name:<w$}  {arch:<7}  {:<6}  {:<7}  {:<10}  {:<30}  {}",
                r.family,
                r.format,
                r.isa,
                r.gemv,
                r.gemm
            );
        }
    }
    outln!(
        "{:<w$}  the CPU kgen runs on (read at run time; see `kgen plan --target native`)",
        "native"
    );
    Ok(())
}

fn tune(args: &TuneArgs) -> Result<(), Error> {
    if args.report {
        out(format_args!("{}", kgen::tune::report(&args.profile_dir)?))?;
        return Ok(());
    }
    let target = target::load(&args.target)?;
    let op = kgen::profile::op_of(matches!(args.op, OpArg::Gemm), args.m);
    if args.print {
        let (key, what) = match args.format {
            Some(format) => {
                let spec = I8Spec { op, ..format };
                let isa = kgen::select_i8_isas(&target, &spec, &IsaChoice::Best)?
                    .into_iter()
                    .next()
                    .ok_or_else(|| {
                        Error::Usage(format!(
                            "no int8 ISA of {} has {} kernels",
                            target.name,
                            spec.format_tag()
                        ))
                    })?;
                let key = kgen::profile::key_for_i8(&target, &isa, &spec, args.threads.max(1));
                (
                    key,
                    format!("int8 {} {}", spec.format_tag(), spec.op.name()),
                )
            }
            None => {
                let group = Group::parse(&args.group)?;
                let spec = kgen::spec::KernelSpec::new(op, args.bits, group)?;
                let isa = Isa::for_target(&target)
                    .into_iter()
                    .next()
                    .expect("portable always runs");
                let key = kgen::profile::key_for(&target, &isa, &spec, args.threads.max(1));
                (key, spec.to_string())
            }
        };
        let found = kgen::profile::lookup(&kgen::profile::files_in(&args.profile_dir), &key);
        for w in &found.warnings {
            note!("kgen tune: warning: {w}");
        }
        match found.found {
            Some(f) => {
                if let Some(why) = &f.family {
                    note!("kgen tune: {why}");
                }
                let one = kgen::profile::Profile {
                    entries: vec![f.entry],
                    machines: Vec::new(),
                };
                outln!("# from {}\n{}", f.path.display(), one.to_toml());
            }
            None => outln!(
                "no profile entry for {what} on `{}` in {}",
                key.cpu_model,
                args.profile_dir.display()
            ),
        }
        return Ok(());
    }
    if args.target != "native" {
        note!(
            "kgen tune: warning: timing runs on this machine, keyed as `{}`; tune with --target native",
            target.description
        );
    }
    let budget = std::time::Duration::from_secs_f64(args.budget.max(1.0));
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let t0 = std::time::Instant::now();
    let (out, what) = match args.format {
        Some(format) => {
            let spec = I8Spec { op, ..format };
            let req = kgen::tune::TuneRequest {
                spec,
                shapes: args.shapes.clone(),
                threads: args.threads.max(1),
                budget,
                force: args.force,
                profile_dir: args.profile_dir.clone(),
                max_tiles: args.max_tiles.max(1),
                progress,
            };
            let what = format!("int8 {} {}", spec.format_tag(), spec.op.name());
            (kgen::tune::tune_i8(&target, &req)?, what)
        }
        None => {
            let group = Group::parse(&args.group)?;
            let spec = kgen::spec::KernelSpec::new(op, args.bits, group)?;
            let req = kgen::tune::TuneRequest {
                spec,
                shapes: args.shapes.clone(),
                threads: args.threads.max(1),
                budget,
                force: args.force,
                profile_dir: args.profile_dir.clone(),
                max_tiles: args.max_tiles.max(1),
                progress,
            };
            (kgen::tune::tune(&target, &req)?, spec.to_string())
        }
    };
    for n in &out.notes {
        note!("kgen tune: {n}");
    }
    let e = &out.entry;
    if out.cache_hit {
        outln!(
            "cache hit: {} already holds {what} (use --force to measure again)",
            out.path.display()
        );
    } else {
        outln!(
            "tuned {what} in {:.1} s ({} candidates passed the reference check, {} failed); wrote {}",
            t0.elapsed().as_secs_f64(),
            e.measured.len(),
            e.failed.len(),
            out.path.display()
        );
    }
    for (i, m) in e.measured.iter().take(5).enumerate() {
        outln!(
            "  {}. {} m_b={} t_b={}  {:.1} GB/s  {:.1} GFLOPS  (model rank {})",
            i + 1,
            m.tile_text(),
            m.m_b,
            m.t_b,
            m.gbs,
            m.gflops,
            m.model_rank
        );
    }
    if let Some((pick, rank, ratio)) = e.model_pick() {
        outln!(
            "  model's pick {}: empirical rank {} of {}, {:.3}x the best time",
            pick.tile_text(),
            rank,
            e.measured.len(),
            ratio
        );
    }
    Ok(())
}

/// Restores the default action for SIGPIPE (Rust ignores it), so that a
/// write to a closed pipe ends kgen silently, as it does `cat` or `grep`.
#[cfg(unix)]
fn default_sigpipe() {
    // SAFETY: setting a standard signal's disposition to its default, before
    // any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn default_sigpipe() {}

fn main() -> ExitCode {
    default_sigpipe();
    let cli = Cli::parse();
    let result = match &cli.command {
        None => gen(&cli.gen),
        Some(Command::Gen(a)) => gen(a),
        Some(Command::Plan(a)) => plan(a),
        Some(Command::Targets(a)) => targets(a),
        Some(Command::Tune(a)) => tune(a),
        Some(Command::Inspect(a)) => return inspect(a),
    }
    .and_then(|()| std::io::stdout().flush().map_err(Error::Io));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`kgen ... | head`): nothing left to say.
        Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            note!("kgen: error: {e}");
            ExitCode::FAILURE
        }
    }
}
