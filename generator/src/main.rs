//! The `kgen` command line.
//!
//! `kgen --target T --bits B --group G` writes the kernels;
//! `kgen plan` explains the plan; `kgen targets` lists the CPUs kgen knows.

use clap::{Args, Parser, Subcommand, ValueEnum};
use kgen::family::f32::isa::Isa;
use kgen::family::f32::model::MicroTile;
use kgen::family::f32::planner::{Plan, PlanOptions};
use kgen::family::int8::spec::I8Spec;
use kgen::family::plan::BlockOrder;
use kgen::spec::{Group, Op};
use kgen::{target, Error, IsaChoice, Request};
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// List the known targets.
    Targets,
    /// Time candidate micro tiles on this machine and store the winner in a profile.
    Tune(TuneArgs),
}

#[derive(Args, Debug, Clone)]
struct TuneArgs {
    /// Target to tune for; tuning measures the running CPU, so `native`.
    #[arg(long, short, default_value = "native")]
    target: String,
    #[arg(long, short, default_value_t = 4)]
    bits: u32,
    #[arg(long, short, default_value = "32")]
    group: String,
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
    /// Print the model's pick against the measured best for every tuned spec, and exit.
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
    /// Weight bits: 2, 3, 4 or 8.
    #[arg(long, short, default_value_t = 4)]
    bits: u32,
    /// Group size along K: 16, 32, 64, 128, 256, or `col` for whole column.
    #[arg(long, short, default_value = "128")]
    group: String,
    /// ISAs to emit: `best`, `all`, or a comma-separated list (avx512f,avx2,neon,portable).
    #[arg(long, default_value = "best")]
    isa: String,
    /// Representative shape KxN the model ranks tiles for (kernels accept any shape).
    #[arg(long, value_parser = parse_shape)]
    shape: Option<(usize, usize)>,
    /// Force the micro tile as M_UxT_U[xM_R] instead of the model's pick.
    #[arg(long, value_parser = parse_tile)]
    tile: Option<MicroTile>,
    /// Force the block order.
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
    /// Emit the int8-activation family for GGUF-style weights instead
    /// (a tag of the format table: `q4_0`, `q8_0`, `iq4_nl`, ...; --bits/--group
    /// are then ignored).
    #[arg(long, value_parser = parse_int8_format)]
    format: Option<I8Spec>,
}

/// An int8-family format by its tag in the format table.
fn parse_int8_format(s: &str) -> Result<I8Spec, String> {
    I8Spec::from_tag(Op::Gemv, s).ok_or_else(|| {
        format!(
            "`{s}` is not an int8 format (one of {})",
            kgen::build::int8_format_tags().join(", ")
        )
    })
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
    /// Also list every candidate micro tile with the model's prediction.
    #[arg(long)]
    explain: bool,
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
    if spec.tile.is_none() && !spec.no_profile {
        let dir = spec
            .profile
            .clone()
            .unwrap_or_else(|| PathBuf::from("profiles"));
        req.profiles = if dir.is_dir() {
            kgen::profile::files_in(&dir)
        } else if dir.is_file() {
            vec![dir]
        } else {
            Vec::new()
        };
    }
    Ok(req)
}

fn print_notes(plans: &[Plan]) {
    let mut seen = std::collections::BTreeSet::new();
    for n in plans.iter().flat_map(|p| &p.notes) {
        if seen.insert(n.clone()) {
            eprintln!("kgen: {n}");
        }
    }
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("kgen {}", args.join(" "))
}

/// The int8 family's kernels for `target`: GEMV and a GEMM sharing its layout.
fn gen_int8(
    target: &kgen::target::TargetDesc,
    args: &GenArgs,
    spec: I8Spec,
) -> Result<String, Error> {
    use kgen::family::int8::{isa::I8Isa, model as int8};
    // ISAs without kernels for the format (sve256 for IQ4_NL) are passed
    // over unless named explicitly, which is an error.
    let supported = || {
        I8Isa::for_target(target)
            .into_iter()
            .filter(|i| i.supports(&spec).is_ok())
    };
    let isas: Vec<I8Isa> = match args.spec.isa.as_str() {
        "best" => supported().take(1).collect(),
        "all" => supported().collect(),
        list => list
            .split(',')
            .map(|n| {
                let isa = I8Isa::by_name(n.trim()).ok_or_else(|| {
                    Error::Usage(format!(
                        "unknown int8 ISA `{n}` (avx512vnni, avxvnni, avx2, i8mm, dotprod, portable)"
                    ))
                })?;
                if isa.runs_on(target) {
                    Ok(isa)
                } else {
                    Err(Error::Usage(format!(
                        "int8 ISA `{n}` needs {:?}, which `{}` does not have",
                        isa.requires, target.name
                    )))
                }
            })
            .collect::<Result<_, _>>()?,
    };
    let mut plans = Vec::new();
    for isa in isas {
        let gemv = int8::plan(&spec, &isa, target, args.spec.shape.unwrap_or((4096, 4096)))?;
        let gemm = int8::plan_gemm_sharing(&gemv, args.m, target);
        match args.op {
            OpsArg::Gemv => plans.push(gemv),
            OpsArg::Gemm => plans.push(gemm),
            OpsArg::Both => plans.extend([gemv, gemm]),
        }
    }
    Ok(kgen::family::int8::emit::emit_file(
        target,
        &plans,
        &command_line(),
    )?)
}

fn gen(args: &GenArgs) -> Result<(), Error> {
    let target = target::load(&args.spec.target)?;
    if let Some(format) = args.format {
        let text = gen_int8(&target, args, format)?;
        return match &args.output {
            Some(path) => {
                let changed = kgen::emit::write_if_changed(path, &text)?;
                eprintln!(
                    "kgen: {} {}",
                    if changed { "wrote" } else { "unchanged" },
                    path.display()
                );
                Ok(())
            }
            None => {
                print!("{text}");
                Ok(())
            }
        };
    }
    let ops = match args.op {
        OpsArg::Gemv => vec![Op::Gemv],
        OpsArg::Gemm => vec![Op::Gemm { m: args.m }],
        OpsArg::Both => vec![Op::Gemv, Op::Gemm { m: args.m }],
    };
    let req = request(&args.spec, ops)?;
    let plans = kgen::plans_for(&target, &req)?;
    print_notes(&plans);
    let out = kgen::family::f32::emit::emit_file(&target, &plans, &command_line())?;
    match &args.output {
        Some(path) => {
            let changed = kgen::emit::write_if_changed(path, &out.text)?;
            eprintln!(
                "kgen: {} {} ({} kernel(s): {})",
                if changed { "wrote" } else { "unchanged" },
                path.display(),
                out.kernels.len(),
                out.kernels.join(", ")
            );
        }
        None => print!("{}", out.text),
    }
    Ok(())
}

fn print_plan(p: &Plan, explain: bool) {
    println!("kernel {}", p.kernel_name());
    println!(
        "  target {}  isa {} ({} f32 lanes, {} registers)",
        p.target, p.isa, p.lanes, p.registers.limit
    );
    println!("  spec   {}", p.spec);
    println!(
        "  micro tile  m_u={} t_u={} m_r={}  ({} columns per tile; from {:?})",
        p.tile.m_u,
        p.tile.t_u,
        p.tile.m_r,
        p.tile.t_u * p.lanes,
        p.source
    );
    println!(
        "  L1 block    m_b={} t_b={}  order={:?}",
        p.block.m_b, p.block.t_b, p.order
    );
    let r = &p.registers;
    println!(
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
    println!(
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
    println!(
        "  roofline at {}x{}: compute {:.1} GB/s, memory {:.1} GB/s per core -> {:.1} GB/s, {:.1} GFLOPS on one core ({:?}-bound); {:.1} GB/s on all cores",
        p.shape.0, p.shape.1, pr.compute_gbs, pr.memory_gbs, pr.gbs, pr.gflops, pr.bound, pr.gbs_all_cores
    );
    println!(
        "  unpack: {} vector ALU ops per {}-value unit per column vector (shift/and/convert)",
        kgen::family::f32::model::unpack_alu_ops(p.spec.bits),
        p.spec.values_per_unit()
    );
    if explain {
        println!("  candidates (model rank, best first):");
        for (i, c) in p.candidates.iter().enumerate() {
            println!(
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
}

fn plan(args: &PlanArgs) -> Result<(), Error> {
    let target = target::load(&args.spec.target)?;
    let op = match args.m {
        Some(m) => Op::Gemm { m },
        None => Op::Gemv,
    };
    let req = request(&args.spec, vec![op])?;
    let plans = kgen::plans_for(&target, &req)?;
    print_notes(&plans);
    if args.json {
        let json = serde_json::to_string_pretty(&plans).map_err(|e| Error::Usage(e.to_string()))?;
        println!("{json}");
    } else {
        for p in &plans {
            print_plan(p, args.explain);
        }
        if args.explain {
            // Both operations, as `kgen` emits them together; GEMM at the
            // paper's batch of 8 unless --m says otherwise.
            let m = args.m.unwrap_or(8);
            let req = request(&args.spec, vec![Op::Gemv, Op::Gemm { m }])?;
            let f32_plans = kgen::plans_for(&target, &req)?;
            let counts = kgen::explain::opcount::explain(
                &target,
                &f32_plans,
                args.spec.bits,
                m,
                args.spec.shape,
            )?;
            print!("{counts}");
        }
    }
    Ok(())
}

fn targets() -> Result<(), Error> {
    for t in target::load_all()? {
        let isas: Vec<_> = Isa::for_target(&t).iter().map(|i| i.name).collect();
        println!(
            "{:<16} {}  [f32 kernels: {}]",
            t.name,
            t.summary(),
            isas.join(", ")
        );
    }
    println!("{:<16} the CPU kgen runs on (read at run time)", "native");
    Ok(())
}

fn tune(args: &TuneArgs) -> Result<(), Error> {
    if args.report {
        print!("{}", kgen::tune::report(&args.profile_dir)?);
        return Ok(());
    }
    let target = target::load(&args.target)?;
    if args.print {
        let group = Group::parse(&args.group)?;
        let op = kgen::profile::op_of(matches!(args.op, OpArg::Gemm), args.m);
        let spec = kgen::spec::KernelSpec::new(op, args.bits, group)?;
        let isa = Isa::for_target(&target)
            .into_iter()
            .next()
            .expect("portable always runs");
        let key = kgen::profile::key_for(&target, &isa, &spec, args.threads.max(1));
        let found = kgen::profile::lookup(&kgen::profile::files_in(&args.profile_dir), &key);
        for w in &found.warnings {
            eprintln!("kgen tune: warning: {w}");
        }
        match found.found {
            Some(f) => {
                if let Some(why) = &f.family {
                    eprintln!("kgen tune: {why}");
                }
                let one = kgen::profile::Profile {
                    entries: vec![f.entry],
                };
                println!("# from {}\n{}", f.path.display(), one.to_toml());
            }
            None => println!(
                "no profile entry for {spec} on `{}` in {}",
                key.cpu_model,
                args.profile_dir.display()
            ),
        }
        return Ok(());
    }
    if args.target != "native" {
        eprintln!(
            "kgen tune: warning: timing runs on this machine, keyed as `{}`; tune with --target native",
            target.description
        );
    }
    let group = Group::parse(&args.group)?;
    let op = kgen::profile::op_of(matches!(args.op, OpArg::Gemm), args.m);
    let spec = kgen::spec::KernelSpec::new(op, args.bits, group)?;
    let req = kgen::tune::TuneRequest {
        spec,
        shapes: args.shapes.clone(),
        threads: args.threads.max(1),
        budget: std::time::Duration::from_secs_f64(args.budget.max(1.0)),
        force: args.force,
        profile_dir: args.profile_dir.clone(),
        max_tiles: args.max_tiles.max(1),
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
    };
    let t0 = std::time::Instant::now();
    let out = kgen::tune::tune(&target, &req)?;
    let e = &out.entry;
    if out.cache_hit {
        println!(
            "cache hit: {} already holds {} (use --force to measure again)",
            out.path.display(),
            spec
        );
    } else {
        println!(
            "tuned {} in {:.1} s ({} candidates passed the reference check, {} failed); wrote {}",
            spec,
            t0.elapsed().as_secs_f64(),
            e.measured.len(),
            e.failed.len(),
            out.path.display()
        );
    }
    for (i, m) in e.measured.iter().take(5).enumerate() {
        println!(
            "  {}. m_u={} t_u={} m_r={} m_b={} t_b={}  {:.1} GB/s  {:.1} GFLOPS  (model rank {})",
            i + 1,
            m.m_u,
            m.t_u,
            m.m_r,
            m.m_b,
            m.t_b,
            m.gbs,
            m.gflops,
            m.model_rank
        );
    }
    if let Some((pick, rank, ratio)) = e.model_pick() {
        println!(
            "  model's pick m_u={} t_u={} m_r={}: empirical rank {} of {}, {:.3}x the best time",
            pick.m_u,
            pick.t_u,
            pick.m_r,
            rank,
            e.measured.len(),
            ratio
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        None => gen(&cli.gen),
        Some(Command::Gen(a)) => gen(a),
        Some(Command::Plan(a)) => plan(a),
        Some(Command::Targets) => targets(),
        Some(Command::Tune(a)) => tune(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kgen: error: {e}");
            ExitCode::FAILURE
        }
    }
}
