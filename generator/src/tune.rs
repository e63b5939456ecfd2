//! `kgen tune`: the empirical search that QIGen uses for m_u and t_u, for
//! both kernel families.
//!
//! 1. **Candidates**: the model's ranked micro tiles (each with its solved L1
//!    block), plus block variants around the model's pick. For an int8 GEMM
//!    the candidates are the GEMM tiles on the GEMV's packed layout (the one
//!    a generated file gives both kernels).
//! 2. **Scratch crate**: the candidates are emitted by the normal emitter into
//!    a crate in a temporary directory, with the timing harness from
//!    `templates/tune/` (`harness.rs` for f32, against kgen-runtime's
//!    matrices; `harness_i8.rs` for int8, which calls the kernels' `run`
//!    itself on `kgen::layout` data and needs only kgen), and built with
//!    `cargo build --release` under the caller's environment (so with the
//!    same flags a user build gets). Its target directory persists, so
//!    dependencies compile once.
//! 3. **Measurement** (in the harness): every candidate is checked against the
//!    reference first, then timed in interleaved rounds (warm-up, repeated
//!    medians, rotated order) until the budget is spent.
//! 4. **Profile**: the results, keyed by machine, family, format and op, are
//!    written to `profiles/<machine>.toml`; the planner and build scripts
//!    read them. Beside them, once per machine, its read bandwidth and clock
//!    ([`record_machine`], timed with [`crate::measure`]): the memory and
//!    compute sides of the roofline when plans are made for `native`.

use crate::family::f32::isa::Isa;
use crate::family::f32::planner;
use crate::family::f32::planner::{Plan, PlanOptions};
use crate::family::int8::isa::I8Isa;
use crate::family::int8::model::{self as i8model, I8Fixed};
use crate::family::int8::plan::I8Plan;
use crate::family::int8::spec::I8Spec;
use crate::family::plan::{Plan as FamilyPlan, TileSource};
use crate::family::{Family, FamilyIsa};
use crate::generate::{Error, I8Request, IsaChoice};
use crate::layout::f32::Layout;
use crate::profile::{self, Measured, Profile, ProfileEntry, ProfileKey};
use crate::profile::{key_for, key_for_i8};
use crate::registry::entry;
use crate::spec::{KernelSpec, Op};
use crate::target::TargetDesc;
use indicatif::{ProgressBar, ProgressStyle};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What to tune: `S` is the family's spec, [`KernelSpec`] (f32, [`tune`])
/// or [`I8Spec`] (int8, [`tune_i8`]).
#[derive(Clone, Debug)]
pub struct TuneRequest<S = KernelSpec> {
    pub spec: S,
    pub shapes: Vec<(usize, usize)>,
    pub threads: usize,
    pub budget: Duration,
    pub force: bool,
    pub profile_dir: PathBuf,
    /// Most tiles timed (block variants come on top).
    pub max_tiles: usize,
    /// Draw a progress bar (off in tests and when not on a terminal).
    pub progress: bool,
}

/// The outcome of a tune.
#[derive(Clone, Debug)]
pub struct TuneOutcome {
    pub entry: ProfileEntry,
    pub path: PathBuf,
    /// True when an existing profile entry answered (no measurement).
    pub cache_hit: bool,
    /// How the candidates were chosen (an int8 GEMM's layout and where it
    /// came from), for the caller to print.
    pub notes: Vec<String>,
}

/// File name for a machine's profile: its CPU model, made path-safe.
pub fn profile_file(dir: &Path, cpu_model: &str) -> PathBuf {
    let slug: String = cpu_model
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    dir.join(format!(
        "{}.toml",
        if slug.is_empty() {
            "unknown-cpu"
        } else {
            &slug
        }
    ))
}

/// The candidate plans: the model's top tiles, then block variants of its pick.
pub fn candidates(
    spec: &KernelSpec,
    isa: &Isa,
    target: &TargetDesc,
    shape: (usize, usize),
    max_tiles: usize,
) -> Vec<Plan> {
    let ranked = planner::rank_tiles(spec, isa, target, shape);
    let mut plans: Vec<Plan> = Vec::new();
    for c in ranked.iter() {
        if plans.len() >= max_tiles {
            break;
        }
        let opts = PlanOptions {
            shape: Some(shape),
            tile: Some(c.tile),
            ..PlanOptions::default()
        };
        if let Ok(p) = planner::plan(spec, isa, target, &opts) {
            plans.push(p);
        }
    }
    // Blocks around the model's pick: half and double of each dimension that
    // still keeps eq. 5 and the divisibility conditions.
    if let Ok(pick) = planner::plan(
        spec,
        isa,
        target,
        &PlanOptions {
            shape: Some(shape),
            ..PlanOptions::default()
        },
    ) {
        let granule = Layout::k_granule(spec.bits, spec.group);
        let tw = pick.lanes * pick.tile.t_u;
        let (m_b, t_b) = (pick.block.m_b, pick.block.t_b);
        let variants = [
            (crate::layout::align::round_up(m_b / 2, granule), t_b),
            (m_b * 2, t_b),
            (m_b, crate::layout::align::round_up(t_b / 2, tw)),
            (m_b, t_b * 2),
            (granule, tw),
        ];
        for (mb, tb) in variants {
            let opts = PlanOptions {
                shape: Some(shape),
                tile: Some(pick.tile),
                block: Some((mb, tb)),
                ..PlanOptions::default()
            };
            if let Ok(p) = planner::plan(spec, isa, target, &opts) {
                if !plans.iter().any(|q| {
                    q.tile == p.tile && q.block.m_b == p.block.m_b && q.block.t_b == p.block.t_b
                }) {
                    plans.push(p);
                }
            }
        }
    }
    plans
}

/// The int8 candidates for `spec` on `isa`, the model's pick among them.
///
/// A GEMV: the model's top tiles with their blocks, then block variants of
/// its pick (half and double of each dimension that still fits L1). A GEMM:
/// the model's top GEMM tiles on `gemv`'s layout, which the generated GEMM
/// kernel shares (so the winner applies to what `kgen --format` writes).
pub fn candidates_i8(
    spec: &I8Spec,
    isa: &I8Isa,
    target: &TargetDesc,
    shape: (usize, usize),
    max_tiles: usize,
    gemv: &I8Plan,
) -> Vec<I8Plan> {
    let fixed = |tile, block| I8Fixed {
        tile,
        block,
        source: TileSource::Fixed,
    };
    let mut plans: Vec<I8Plan> = Vec::new();
    // Plans that differ only in m_b emit the same kernels (a tile runs over
    // all of K whatever m_b), so they are timed once.
    let mut push = |p: I8Plan| {
        if !plans
            .iter()
            .any(|q| (q.tile, q.block.t_b) == (p.tile, p.block.t_b))
        {
            plans.push(p);
        }
    };
    match spec.op {
        Op::Gemv => {
            let ranked = i8model::rank_tiles(spec, isa, target, shape);
            for c in ranked.iter().take(max_tiles) {
                if let Ok(p) =
                    i8model::plan_with(spec, isa, target, shape, Some(&fixed(c.tile, None)))
                {
                    push(p);
                }
            }
            if let Ok(pick) = i8model::plan(spec, isa, target, shape) {
                let (m_b, t_b, tw) = (pick.block.m_b, pick.block.t_b, pick.lanes * pick.tile.t_u);
                // Whole K granules (a 256-value scale group for the K-quants).
                let qk = crate::family::int8::Int8::footprint(spec, isa).k_granule;
                let round = crate::layout::align::round_up;
                // t_b variants only (`push` keeps one plan per tile and t_b).
                let variants = [(m_b, round((t_b / 2).max(1), tw)), (m_b, t_b * 2), (qk, tw)];
                for block in variants {
                    let f = fixed(pick.tile, Some(block));
                    if let Ok(p) = i8model::plan_with(spec, isa, target, shape, Some(&f)) {
                        push(p);
                    }
                }
            }
        }
        Op::Gemm { m } => {
            for c in i8model::rank_gemm_tiles(gemv, m, target)
                .iter()
                .take(max_tiles)
            {
                if let Ok(p) = i8model::plan_gemm_with(gemv, m, target, Some(&fixed(c.tile, None)))
                {
                    push(p);
                }
            }
        }
    }
    plans
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("generator/ has a parent")
        .to_path_buf()
}

fn toml_path(p: PathBuf) -> String {
    p.display().to_string().replace('\\', "/")
}

/// Writes a scratch crate into `dir`: `manifest`, the `harness` as its
/// main.rs, one emitted file per candidate plan, and `kernels.rs` whose
/// `candidates()` returns one `item` (the harness's entry type) per
/// candidate, each pushed by `push` (given the plan, its module and the
/// name of its ISA's detection function).
fn write_scratch_crate<F: Family>(
    dir: &Path,
    target: &TargetDesc,
    plans: &[FamilyPlan<F>],
    manifest: &str,
    harness: &str,
    item: TokenStream,
    push: impl Fn(&FamilyPlan<F>, &syn::Ident, &syn::Ident) -> TokenStream,
) -> Result<(), Error> {
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    std::fs::write(dir.join("src/main.rs"), harness)?;
    let mut modules = TokenStream::new();
    let mut pushes = TokenStream::new();
    let mut detectors = std::collections::BTreeMap::new();
    for (i, plan) in plans.iter().enumerate() {
        let file = format!("c{i}.rs");
        let command = format!("kgen tune (candidate, family {})", F::NAME);
        let emitted = crate::family::file::emit_file(target, std::slice::from_ref(plan), &command)?;
        std::fs::write(dir.join("src").join(&file), emitted.text)?;
        let module = format_ident!("c{}", i);
        modules.extend(quote! { pub mod #module { include!(#file); } });
        let isa = plan.isa();
        let detect = format_ident!("detect_{}", isa.name());
        detectors.insert(isa.name(), isa.detector(&detect));
        pushes.extend(push(plan, &module, &detect));
    }
    let detect_fns = detectors.values();
    let file: syn::File = syn::parse2(quote! {
        #modules
        #(#detect_fns)*
        pub fn candidates() -> ::std::vec::Vec<#item> {
            let mut v = ::std::vec::Vec::new();
            #pushes
            v
        }
    })
    .map_err(|e| Error::Emit(crate::emit::EmitError(format!("tune registry: {e}"))))?;
    std::fs::write(dir.join("src/kernels.rs"), prettyplease::unparse(&file))?;
    Ok(())
}

/// Writes the f32 scratch crate for `plans` into `dir`: candidates are
/// runtime `KernelEntry`s, timed through the runtime's matrix.
fn write_scratch(dir: &Path, target: &TargetDesc, plans: &[Plan]) -> Result<(), Error> {
    let root = repo_root();
    let manifest = format!(
        "[package]\nname = \"kgen-tune-scratch\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [workspace]\n\n[dependencies]\nkgen = {{ path = \"{}\", default-features = false }}\n\
         kgen-runtime = {{ path = \"{}\" }}\n\n[profile.release]\ndebug = false\n",
        toml_path(root.join("generator")),
        toml_path(root.join("runtime"))
    );
    write_scratch_crate(
        dir,
        target,
        plans,
        &manifest,
        include_str!("../../templates/tune/harness.rs"),
        quote! { ::kgen_runtime::KernelEntry },
        |plan, module, detect| entry("::kgen_runtime", target, module, plan, detect),
    )
}

/// Writes the int8 scratch crate for `plans` into `dir`: candidates are the
/// harness's `Cand` (the kernel module's constants and `run`). It depends on
/// kgen alone, not on the runtime's matrix types.
fn write_scratch_i8(dir: &Path, target: &TargetDesc, plans: &[I8Plan]) -> Result<(), Error> {
    let root = repo_root();
    let manifest = format!(
        "[package]\nname = \"kgen-tune-scratch-i8\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [workspace]\n\n[dependencies]\nkgen = {{ path = \"{}\", default-features = false }}\n\n\
         [profile.release]\ndebug = false\n",
        toml_path(root.join("generator")),
    );
    write_scratch_crate(
        dir,
        target,
        plans,
        &manifest,
        include_str!("../../templates/tune/harness_i8.rs"),
        quote! { super::Cand },
        |plan, module, detect| {
            let k = format_ident!("{}", plan.kernel_name());
            let tag = plan.spec.format.tag;
            let cfg = crate::emit::arch_cfg(plan.isa().arch);
            quote! {
                #cfg
                {
                    use #module::#k as k;
                    v.push(super::Cand {
                        name: k::NAME,
                        format: #tag,
                        lanes: k::LANES,
                        t_u: k::T_U,
                        m_r: k::M_R,
                        m_b: k::M_B,
                        t_b: k::T_B,
                        bits: k::BITS,
                        group_bytes: k::GROUP_BYTES,
                        signed: k::SIGNED,
                        int_scales: k::INT_SCALES,
                        group_scales: k::GROUP_SCALES,
                        row_pairs: k::ROW_PAIRS,
                        detect: #detect,
                        run: k::run,
                    });
                }
            }
        },
    )
}

/// Measures the machine's read bandwidth and clock into the profile beside
/// the tiles, once per machine (again with `force`), for `native` only (a
/// named target's figures come from its file): `native` plans then set
/// their roofline against them instead of the run-time description's
/// guesses.
/// DRAM on one thread and on one per core over a buffer four times the L3
/// (at least 256 MiB, and 16 MiB per thread), L3 on one thread over a
/// quarter of it (at least twice the L2, at most 16 MiB). Returns a note
/// of what was measured.
pub fn record_machine(
    target: &TargetDesc,
    dir: &Path,
    force: bool,
) -> Result<Option<String>, Error> {
    if target.name != "native" {
        return Ok(None);
    }
    let path = profile_file(dir, &target.description);
    let mut p = if path.exists() {
        Profile::load(&path).map_err(|e| Error::Usage(e.to_string()))?
    } else {
        Profile::default()
    };
    if !force && p.machines.iter().any(|e| e.matches(target)) {
        return Ok(None);
    }
    let (l2, l3) = (target.cache.l2 as usize, target.cache.l3 as usize);
    let l3_bytes = (l3 > 2 * l2).then(|| (l3 / 4).max(2 * l2).min(16 << 20));
    let threads = target.core.cores.max(1) as usize;
    let dram_bytes = (4 * l3).max(256 << 20);
    let memory = crate::target::desc::Memory {
        bandwidth_per_core_gbs: crate::measure::read_bandwidth_gbs(dram_bytes),
        bandwidth_gbs: crate::measure::read_bandwidth_threads_gbs(
            dram_bytes.max(threads * (16 << 20)),
            threads,
        ),
        l3_bandwidth_per_core_gbs: l3_bytes.map(crate::measure::read_bandwidth_gbs),
    };
    // To 10 MHz, as the run-time description reads `/proc/cpuinfo`.
    let ghz = crate::measure::clock_ghz().map(|g| (g * 100.0).round() / 100.0);
    let entry = profile::machine_entry(target, &memory, threads, (dram_bytes, l3_bytes), ghz);
    let note = format!(
        "read bandwidth and clock measured into {}: {}",
        path.display(),
        entry.summary()
    );
    p.upsert_machine(entry);
    p.save(&path).map_err(|e| Error::Usage(e.to_string()))?;
    Ok(Some(note))
}

/// The profile's entry for `key`, if it answers without measuring.
fn cached(key: &ProfileKey, req_force: bool, dir: &Path) -> Option<TuneOutcome> {
    let found = profile::lookup(&profile::files_in(dir), key);
    for w in &found.warnings {
        eprintln!("kgen tune: warning: {w}");
    }
    let f = found.found?;
    (f.family.is_none() && !req_force).then(|| TuneOutcome {
        entry: f.entry,
        path: f.path,
        cache_hit: true,
        notes: Vec::new(),
    })
}

/// One candidate's measurement from the harness: (index, median seconds,
/// weight bytes, flops).
type Timed = (usize, f64, f64, f64);

/// A scratch crate to build and run.
struct Scratch<'a> {
    dir: &'a Path,
    /// Its package (and binary) name.
    package: &'static str,
    /// What is tuned, for the progress bar.
    what: String,
    /// Candidates in it.
    n: usize,
    /// `KGEN_SPECS` for the build (the runtime's built-in kernels), if it
    /// depends on the runtime.
    specs_env: Option<String>,
    /// Activation rows the harness times.
    rows: usize,
}

/// Builds the scratch crate and runs its harness: returns the timings and
/// the candidates that failed the reference check (by `name`).
fn build_and_run<S>(
    req: &TuneRequest<S>,
    start: Instant,
    s: &Scratch,
    name: impl Fn(usize) -> String,
    describe: impl Fn(usize) -> String,
) -> Result<(Vec<Timed>, Vec<String>), Error> {
    let n = s.n;
    let target_dir = repo_root().join("target").join("kgen-tune");
    let bar = if req.progress {
        ProgressBar::new(req.budget.as_millis() as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar.set_message(format!("compiling {n} candidates for {}", s.what));
    let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(s.dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(specs) = &s.specs_env {
        // The runtime's own built-in kernels: only the tuned format, to build fast.
        build.env("KGEN_SPECS", specs);
    }
    let build = build.output()?;
    if !build.status.success() {
        bar.finish_and_clear();
        return Err(Error::Usage(format!(
            "building the tuning candidates failed:\n{}",
            String::from_utf8_lossy(&build.stderr)
        )));
    }
    let left = req.budget.saturating_sub(start.elapsed());
    if left < Duration::from_secs(1) {
        bar.finish_and_clear();
        return Err(Error::Usage(format!(
            "compiling the candidates took {:.0} s of the {:.0} s budget; raise --budget (later runs reuse the build)",
            start.elapsed().as_secs_f64(),
            req.budget.as_secs_f64()
        )));
    }
    // Leave a margin for packing the matrices and writing the profile.
    let timing = left.mul_f64(0.8);
    let shapes_arg: Vec<String> = req.shapes.iter().map(|(k, n)| format!("{k}x{n}")).collect();
    let exe =
        target_dir
            .join("release")
            .join(format!("{}{}", s.package, std::env::consts::EXE_SUFFIX));
    let mut child = Command::new(&exe)
        .args([
            "--shapes",
            &shapes_arg.join(","),
            "--threads",
            &req.threads.to_string(),
        ])
        .args([
            "--m",
            &s.rows.to_string(),
            "--budget",
            &format!("{:.3}", timing.as_secs_f64()),
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut failed = Vec::new();
    let mut results: Vec<Timed> = Vec::new();
    let stdout = child.stdout.take().expect("piped");
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["check", i, "fail", rest @ ..] => {
                let i: usize = i.parse().unwrap_or(usize::MAX);
                let name = if i < n { name(i) } else { String::new() };
                failed.push(format!("{name}: {}", rest.join(" ")));
            }
            ["round", r, "best", i, secs] => {
                let i: usize = i.parse().unwrap_or(usize::MAX);
                let secs: f64 = secs.parse().unwrap_or(f64::NAN);
                bar.set_position(start.elapsed().as_millis() as u64);
                if i < n {
                    bar.set_message(format!(
                        "round {r}: best so far {} ({:.1} us)",
                        describe(i),
                        secs * 1e6
                    ));
                }
            }
            ["result", i, secs, bytes, flops] => {
                if let (Ok(i), Ok(s), Ok(b), Ok(fl)) =
                    (i.parse(), secs.parse(), bytes.parse(), flops.parse())
                {
                    results.push((i, s, b, fl));
                }
            }
            _ => {}
        }
    }
    let status = child.wait()?;
    bar.finish_and_clear();
    if !status.success() {
        return Err(Error::Usage(format!(
            "the tuning harness failed ({status})"
        )));
    }
    Ok((results, failed))
}

/// Sorts `measured`, writes the entry into its machine's profile.
fn save(
    key: ProfileKey,
    path: PathBuf,
    shapes: &[(usize, usize)],
    mut measured: Vec<Measured>,
    failed: Vec<String>,
    notes: Vec<String>,
) -> Result<TuneOutcome, Error> {
    measured.sort_by(|a, b| a.median_s.total_cmp(&b.median_s));
    if measured.is_empty() {
        return Err(Error::Usage(format!(
            "no candidate passed the reference check: {failed:?}"
        )));
    }
    let entry = ProfileEntry {
        key,
        shapes: shapes.iter().map(|(k, n)| format!("{k}x{n}")).collect(),
        measured,
        failed,
    };
    let mut profile = if path.exists() {
        Profile::load(&path).map_err(|e| Error::Usage(e.to_string()))?
    } else {
        Profile::default()
    };
    profile.upsert(entry.clone());
    profile
        .save(&path)
        .map_err(|e| Error::Usage(e.to_string()))?;
    Ok(TuneOutcome {
        entry,
        path,
        cache_hit: false,
        notes,
    })
}

/// Runs `kgen tune` for one f32 spec on the best ISA of `target`.
pub fn tune(target: &TargetDesc, req: &TuneRequest) -> Result<TuneOutcome, Error> {
    let start = Instant::now();
    let isa = Isa::for_target(target)
        .into_iter()
        .next()
        .expect("portable always runs");
    let key = key_for(target, &isa, &req.spec, req.threads);
    let path = profile_file(&req.profile_dir, &key.cpu_model);
    let machine_note = record_machine(target, &req.profile_dir, req.force)?;
    if let Some(mut hit) = cached(&key, req.force, &req.profile_dir) {
        hit.notes.extend(machine_note);
        return Ok(hit);
    }

    let shape = req.shapes.first().copied().unwrap_or((4096, 4096));
    let plans = candidates(&req.spec, &isa, target, shape, req.max_tiles);
    if plans.is_empty() {
        return Err(Error::Usage(format!(
            "no candidate tiles for {} on {}",
            req.spec, target.name
        )));
    }
    let ranked = planner::rank_tiles(&req.spec, &isa, target, shape);
    let pick = planner::plan(
        &req.spec,
        &isa,
        target,
        &PlanOptions {
            shape: Some(shape),
            ..PlanOptions::default()
        },
    )?;
    let is_pick = |p: &Plan| {
        p.tile == pick.tile && (p.block.m_b, p.block.t_b) == (pick.block.m_b, pick.block.t_b)
    };
    let model_rank = |p: &Plan| {
        ranked
            .iter()
            .position(|c| c.tile == p.tile)
            .map_or(usize::MAX, |i| i + 1)
    };

    let scratch = tempfile::Builder::new().prefix("kgen-tune-").tempdir()?;
    write_scratch(scratch.path(), target, &plans)?;
    let s = Scratch {
        dir: scratch.path(),
        package: "kgen-tune-scratch",
        what: req.spec.to_string(),
        n: plans.len(),
        specs_env: Some(format!("{}:{}", req.spec.bits, req.spec.group)),
        rows: req.spec.op.rows(),
    };
    let (results, failed) = build_and_run(
        req,
        start,
        &s,
        |i| plans[i].kernel_name(),
        |i| {
            let p = &plans[i];
            format!(
                "m_u={} t_u={} m_r={} m_b={} t_b={}",
                p.tile.m_u, p.tile.t_u, p.tile.m_r, p.block.m_b, p.block.t_b
            )
        },
    )?;
    let measured: Vec<Measured> = results
        .iter()
        .filter_map(|&(i, s, bytes, flops)| {
            let p = plans.get(i)?;
            Some(Measured {
                m_u: Some(p.tile.m_u),
                t_u: p.tile.t_u,
                t_sub: None,
                m_r: p.tile.m_r,
                m_b: p.block.m_b,
                t_b: p.block.t_b,
                median_s: s,
                gbs: bytes / s / 1e9,
                gflops: flops / s / 1e9,
                model_rank: model_rank(p),
                model_gbs: p.prediction.gbs,
                model_pick: is_pick(p),
            })
        })
        .collect();
    save(
        key,
        path,
        &req.shapes,
        measured,
        failed,
        machine_note.into_iter().collect(),
    )
}

/// Runs `kgen tune --format` for one int8 format and op on the best int8 ISA
/// of `target` that has kernels for the format.
///
/// A GEMM is tuned on the packed layout the GEMV kernel of a generated file
/// would use: the GEMV entry of `req.profile_dir` if there is one (so tune
/// the GEMV first), else the model's.
pub fn tune_i8(target: &TargetDesc, req: &TuneRequest<I8Spec>) -> Result<TuneOutcome, Error> {
    let start = Instant::now();
    let spec = req.spec;
    let isa = crate::generate::select_i8_isas(target, &spec, &IsaChoice::Best)?
        .into_iter()
        .next()
        .ok_or_else(|| {
            Error::Usage(format!(
                "no int8 ISA of {} has {} kernels",
                target.name,
                spec.format_tag()
            ))
        })?;
    let key = key_for_i8(target, &isa, &spec, req.threads);
    let path = profile_file(&req.profile_dir, &key.cpu_model);
    let machine_note = record_machine(target, &req.profile_dir, req.force)?;
    if let Some(mut hit) = cached(&key, req.force, &req.profile_dir) {
        hit.notes.extend(machine_note);
        return Ok(hit);
    }
    let shape = req.shapes.first().copied().unwrap_or((4096, 4096));
    // The GEMV a generated file would hold, with this directory's profiles.
    let mut gemv_req = I8Request::new(spec, vec![Op::Gemv]);
    gemv_req.isas = IsaChoice::Named(vec![isa.name.to_string()]);
    gemv_req.shape = Some(shape);
    gemv_req.profiles = profile::files_in(&req.profile_dir);
    gemv_req.profile_threads = req.threads;
    let gemv = crate::generate::plans_for_i8(target, &gemv_req)?
        .into_iter()
        .next()
        .expect("one ISA, one op");
    let mut notes: Vec<String> = machine_note.into_iter().collect();
    if let Op::Gemm { .. } = spec.op {
        notes.push(format!(
            "GEMM tiles on the GEMV layout {} (t_u={} m_b={} t_b={}) from {}",
            gemv.layout_name(),
            gemv.tile.t_u,
            gemv.block.m_b,
            gemv.block.t_b,
            gemv.source.describe()
        ));
    }
    let plans = candidates_i8(&spec, &isa, target, shape, req.max_tiles, &gemv);
    if plans.is_empty() {
        return Err(Error::Usage(format!(
            "no candidate tiles for {} {} on {}",
            spec.format_tag(),
            spec.op.name(),
            target.name
        )));
    }
    let (ranked, pick) = match spec.op {
        Op::Gemv => {
            let pick = i8model::plan(&spec, &isa, target, shape)?;
            (pick.candidates.clone(), pick)
        }
        Op::Gemm { m } => {
            let pick = i8model::plan_gemm_sharing(&gemv, m, target);
            (pick.candidates.clone(), pick)
        }
    };
    let is_pick = |p: &I8Plan| {
        (p.tile, p.block.m_b, p.block.t_b) == (pick.tile, pick.block.m_b, pick.block.t_b)
    };
    let model_rank = |p: &I8Plan| {
        ranked
            .iter()
            .position(|c| c.tile == p.tile)
            .map_or(usize::MAX, |i| i + 1)
    };
    let scratch = tempfile::Builder::new().prefix("kgen-tune-i8-").tempdir()?;
    write_scratch_i8(scratch.path(), target, &plans)?;
    let what = match spec.op {
        Op::Gemv => format!("{} gemv", spec.format_tag()),
        Op::Gemm { m } => format!("{} gemm (m={m})", spec.format_tag()),
    };
    let s = Scratch {
        dir: scratch.path(),
        package: "kgen-tune-scratch-i8",
        what,
        n: plans.len(),
        specs_env: None,
        rows: spec.op.rows(),
    };
    let (results, failed) = build_and_run(
        req,
        start,
        &s,
        |i| plans[i].kernel_name(),
        |i| {
            let p = &plans[i];
            format!(
                "t_u={} t_sub={} m_r={} m_b={} t_b={}",
                p.tile.t_u, p.tile.t_sub, p.tile.m_r, p.block.m_b, p.block.t_b
            )
        },
    )?;
    let measured: Vec<Measured> = results
        .iter()
        .filter_map(|&(i, s, bytes, flops)| {
            let p = plans.get(i)?;
            Some(Measured {
                m_u: None,
                t_u: p.tile.t_u,
                t_sub: Some(p.tile.t_sub),
                m_r: p.tile.m_r,
                m_b: p.block.m_b,
                t_b: p.block.t_b,
                median_s: s,
                gbs: bytes / s / 1e9,
                gflops: flops / s / 1e9,
                model_rank: model_rank(p),
                model_gbs: p.prediction.gbs,
                model_pick: is_pick(p),
            })
        })
        .collect();
    save(key, path, &req.shapes, measured, failed, notes)
}

/// `q4g32` / `q4_0`, and `gemv` or `gemm(m=32)`: what an entry tuned.
pub fn entry_title(k: &ProfileKey) -> String {
    let op = if k.op == "gemm" {
        format!("gemm(m={})", k.m)
    } else {
        k.op.clone()
    };
    format!("{} {} {} {op}", k.family, k.isa, k.format)
}

/// One line per tuned entry (both families): the model's pick against the
/// empirical best.
pub fn report(dir: &Path) -> Result<String, Error> {
    let mut out = String::new();
    for path in profile::files_in(dir) {
        let p = Profile::load(&path).map_err(|e| Error::Usage(e.to_string()))?;
        for e in &p.entries {
            let k = &e.key;
            let (Some(best), Some((pick, rank, ratio))) = (e.winner(), e.model_pick()) else {
                continue;
            };
            out.push_str(&format!(
                "{} | {} threads={} | best {} m_b={} t_b={} {:.1} GB/s {:.1} GFLOPS | \
                 model pick {} m_b={} t_b={}: rank {} of {}, time x{:.3} of best\n",
                k.cpu_model,
                entry_title(k),
                k.threads,
                best.tile_text(),
                best.m_b,
                best.t_b,
                best.gbs,
                best.gflops,
                pick.tile_text(),
                pick.m_b,
                pick.t_b,
                rank,
                e.measured.len(),
                ratio
            ));
        }
    }
    if out.is_empty() {
        out = format!("no tuning profiles in {}\n", dir.display());
    }
    Ok(out)
}
