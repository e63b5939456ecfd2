//! `kgen tune`: the empirical search that QIGen uses for m_u and t_u.
//!
//! 1. **Candidates**: the model's ranked micro tiles (each with its solved L1
//!    block), plus block variants around the model's pick.
//! 2. **Scratch crate**: the candidates are emitted by the normal emitter into
//!    a crate in a temporary directory that depends on this kgen and
//!    kgen-runtime, with the timing harness from `templates/tune/harness.rs`,
//!    and built with `cargo build --release` under the caller's environment
//!    (so with the same flags a user build gets). Its target directory
//!    persists, so dependencies compile once.
//! 3. **Measurement** (in the harness): every candidate is checked against the
//!    reference first, then timed in interleaved rounds (warm-up, repeated
//!    medians, rotated order) until the budget is spent.
//! 4. **Profile**: the results, keyed by machine and spec, are written to
//!    `profiles/<machine>.toml`; the planner and build scripts read them.

use crate::family::f32::isa::Isa;
use crate::family::f32::planner;
use crate::family::f32::planner::{Plan, PlanOptions};
use crate::generate::Error;
use crate::layout::f32::Layout;
use crate::profile::key_for;
use crate::profile::{self, Measured, Profile, ProfileEntry};
use crate::registry::{detector, entry};
use crate::spec::KernelSpec;
use crate::target::TargetDesc;
use indicatif::{ProgressBar, ProgressStyle};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What to tune.
#[derive(Clone, Debug)]
pub struct TuneRequest {
    pub spec: KernelSpec,
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

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("generator/ has a parent")
        .to_path_buf()
}

/// Writes the scratch crate for `plans` into `dir`.
fn write_scratch(dir: &Path, target: &TargetDesc, plans: &[Plan]) -> Result<(), Error> {
    let root = repo_root();
    let toml_path = |p: PathBuf| p.display().to_string().replace('\\', "/");
    let manifest = format!(
        "[package]\nname = \"kgen-tune-scratch\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [workspace]\n\n[dependencies]\nkgen = {{ path = \"{}\", default-features = false }}\n\
         kgen-runtime = {{ path = \"{}\" }}\n\n[profile.release]\ndebug = false\n",
        toml_path(root.join("generator")),
        toml_path(root.join("runtime"))
    );
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    std::fs::write(
        dir.join("src/main.rs"),
        include_str!("../../templates/tune/harness.rs"),
    )?;

    let mut modules = TokenStream::new();
    let mut pushes = TokenStream::new();
    let mut detectors = std::collections::BTreeMap::new();
    for (i, plan) in plans.iter().enumerate() {
        let file = format!("c{i}.rs");
        let emitted = crate::family::f32::emit::emit_file(
            target,
            std::slice::from_ref(plan),
            "kgen tune (candidate)",
        )?;
        std::fs::write(dir.join("src").join(&file), emitted.text)?;
        let module = format_ident!("c{}", i);
        modules.extend(quote! { pub mod #module { include!(#file); } });
        let isa = Isa::by_name(plan.isa).expect("planned ISA");
        let detect = format_ident!("detect_{}", isa.name);
        detectors.insert(isa.name, detector(&isa, &detect));
        pushes.extend(entry(
            "::kgen_runtime",
            target,
            &module,
            plan,
            isa.arch,
            &detect,
        ));
    }
    let detect_fns = detectors.values();
    let file: syn::File = syn::parse2(quote! {
        #modules
        #(#detect_fns)*
        pub fn candidates() -> ::std::vec::Vec<::kgen_runtime::KernelEntry> {
            let mut v = ::std::vec::Vec::new();
            #pushes
            v
        }
    })
    .map_err(|e| Error::Emit(crate::emit::EmitError(format!("tune registry: {e}"))))?;
    std::fs::write(dir.join("src/kernels.rs"), prettyplease::unparse(&file))?;
    Ok(())
}

/// Runs `kgen tune` for one spec on the best ISA of `target`.
pub fn tune(target: &TargetDesc, req: &TuneRequest) -> Result<TuneOutcome, Error> {
    let start = Instant::now();
    let isa = Isa::for_target(target)
        .into_iter()
        .next()
        .expect("portable always runs");
    let key = key_for(target, &isa, &req.spec, req.threads);
    let path = profile_file(&req.profile_dir, &key.cpu_model);
    let files = profile::files_in(&req.profile_dir);
    let found = profile::lookup(&files, &key);
    for w in &found.warnings {
        eprintln!("kgen tune: warning: {w}");
    }
    if let Some(f) = &found.found {
        if f.family.is_none() && !req.force {
            return Ok(TuneOutcome {
                entry: f.entry.clone(),
                path: f.path.clone(),
                cache_hit: true,
            });
        }
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
    bar.set_message(format!(
        "compiling {} candidates for {}",
        plans.len(),
        req.spec
    ));
    let spec_env = format!("{}:{}", req.spec.bits, req.spec.group);
    let build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(scratch.path().join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        // The runtime's own built-in kernels: only the tuned format, to build fast.
        .env("KGEN_SPECS", &spec_env)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
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
    let exe = target_dir
        .join("release")
        .join(format!("kgen-tune-scratch{}", std::env::consts::EXE_SUFFIX));
    let mut child = Command::new(&exe)
        .args([
            "--shapes",
            &shapes_arg.join(","),
            "--threads",
            &req.threads.to_string(),
        ])
        .args([
            "--m",
            &req.spec.op.rows().to_string(),
            "--budget",
            &format!("{:.3}", timing.as_secs_f64()),
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut failed = Vec::new();
    let mut results: Vec<(usize, f64, f64, f64)> = Vec::new();
    let stdout = child.stdout.take().expect("piped");
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["check", i, "fail", rest @ ..] => {
                let i: usize = i.parse().unwrap_or(usize::MAX);
                let name = plans.get(i).map(Plan::kernel_name).unwrap_or_default();
                failed.push(format!("{name}: {}", rest.join(" ")));
            }
            ["round", r, "best", i, secs] => {
                let i: usize = i.parse().unwrap_or(0);
                let secs: f64 = secs.parse().unwrap_or(f64::NAN);
                bar.set_position(start.elapsed().as_millis() as u64);
                if let Some(p) = plans.get(i) {
                    bar.set_message(format!(
                        "round {r}: best so far m_u={} t_u={} m_r={} m_b={} t_b={} ({:.1} us)",
                        p.tile.m_u,
                        p.tile.t_u,
                        p.tile.m_r,
                        p.block.m_b,
                        p.block.t_b,
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
    let mut measured: Vec<Measured> = results
        .iter()
        .filter_map(|&(i, s, bytes, flops)| {
            let p = plans.get(i)?;
            Some(Measured {
                m_u: p.tile.m_u,
                t_u: p.tile.t_u,
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
    measured.sort_by(|a, b| a.median_s.total_cmp(&b.median_s));
    if measured.is_empty() {
        return Err(Error::Usage(format!(
            "no candidate passed the reference check: {failed:?}"
        )));
    }
    let entry = ProfileEntry {
        key,
        shapes: shapes_arg,
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
    })
}

/// One line per tuned entry: the model's pick against the empirical best.
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
                "{} | {} q{}g{} {}(m={}) threads={} | best m_u={} t_u={} m_r={} m_b={} t_b={} {:.1} GB/s {:.1} GFLOPS | \
                 model pick m_u={} t_u={} m_r={} m_b={} t_b={}: rank {} of {}, time x{:.3} of best\n",
                k.cpu_model,
                k.isa,
                k.bits,
                k.group,
                k.op,
                k.m,
                k.threads,
                best.m_u,
                best.t_u,
                best.m_r,
                best.m_b,
                best.t_b,
                best.gbs,
                best.gflops,
                pick.m_u,
                pick.t_u,
                pick.m_r,
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
