//! `kgen inspect FILE.gguf`: what kgen makes of a model file on this CPU.
//!
//! The tensors grouped by ggml type with their shapes; for every quantized
//! type the kernel it gets here and the time its tensors took to load and
//! repack (a 3-D tensor, a mixture-of-experts stack, counts as one tensor
//! and as one matrix per expert; an older file's per-expert tensors count
//! one each); the ones kgen has no kernel for, and why.
//! `--check` runs each matrix's GEMV (every expert's) on a fixed activation
//! against an f64 product with the dequantized weights and reports the
//! largest relative error per type. The exit status is 1 if a quantized
//! matrix or stack is unsupported or outside the bound, 2 if the file
//! cannot be read. `--json` prints one JSON object.

use clap::Parser;
use kgen::format::rng::Rng;
use kgen_runtime::{GgmlMatrix, Matrix, Model, Pool};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// Largest relative error `--check` accepts: `max |y - y_ref| / max |y_ref|`
/// over a matrix's outputs. The int8 family quantizes activations to 8 bits
/// per 32-block, which alone gives about 4e-3 on random data.
const BOUND: f64 = 2e-2;

#[derive(Parser, Debug)]
#[command(
    name = "kgen inspect",
    version,
    about = "What kgen makes of a GGUF model file on this CPU"
)]
struct Cli {
    /// The GGUF file.
    file: PathBuf,
    /// Also run every matrix's GEMV against an f64 reference of its
    /// dequantized weights.
    #[arg(long)]
    check: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Threads to load with (default: the physical cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// One ggml type's tensors.
#[derive(Serialize, Debug, Default)]
struct TypeReport {
    type_name: String,
    tensors: usize,
    /// Matrices loaded: one per 2-D tensor, one per expert of a 3-D one.
    matrices: Option<usize>,
    bytes: usize,
    /// Distinct shapes `[dims...]` and how many tensors have each.
    shapes: Vec<(Vec<u64>, usize)>,
    /// `loaded`, `unsupported` or `not a matrix` (1-D, or a float type kgen
    /// leaves to the caller).
    status: String,
    kernel: Option<String>,
    family: Option<String>,
    repack_s: Option<f64>,
    /// Why the type has no kernel.
    reason: Option<String>,
    /// `--check`: the largest relative error over the type's matrices.
    max_rel_error: Option<f64>,
}

#[derive(Serialize, Debug)]
struct Report {
    file: String,
    types: Vec<TypeReport>,
    bound: Option<f64>,
    ok: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(report) => {
            if cli.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("serialisable")
                );
            } else {
                print_text(&report);
            }
            if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("kgen inspect: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: &Cli) -> Result<Report, kgen_runtime::Error> {
    let model = Model::open(&cli.file)?;
    let threads = cli
        .threads
        .unwrap_or_else(kgen_runtime::pool::physical_cores);
    let loaded = model.load_all(&Pool::new(threads.max(1)))?;
    let mut types: BTreeMap<String, TypeReport> = BTreeMap::new();
    for t in model.tensors() {
        let r = types.entry(t.type_name()).or_insert_with(|| TypeReport {
            type_name: t.type_name(),
            status: "not a matrix".into(),
            ..TypeReport::default()
        });
        r.tensors += 1;
        r.bytes += t.range.map_or(0, |(s, e)| e - s);
        match r.shapes.iter_mut().find(|(d, _)| *d == t.dims) {
            Some((_, n)) => *n += 1,
            None => r.shapes.push((t.dims.clone(), 1)),
        }
    }
    // A 2-D quantized type is loaded (in `loaded.types`) or unsupported:
    // load_all fails as a whole on anything else.
    for s in &loaded.types {
        let r = types.get_mut(&s.type_name).expect("a listed type");
        r.status = "loaded".into();
        r.matrices = Some(s.matrices);
        r.kernel = Some(s.kernel.clone());
        r.repack_s = Some(s.repack.as_secs_f64());
    }
    let type_of = |name: &str| {
        let t = model
            .file()
            .tensor_info(name)
            .expect("a tensor of the file");
        t.type_name()
    };
    for (name, why) in &loaded.unsupported {
        let r = types.get_mut(&type_of(name)).expect("a listed type");
        r.status = "unsupported".into();
        r.reason = Some(why.to_string());
    }
    // Each matrix as (the tensor that holds it, which expert of that
    // tensor): a stack stored one tensor per expert has a tensor each.
    let stacks = loaded.experts.iter().flat_map(|(name, s)| {
        s.iter().enumerate().map(|(e, m)| {
            let at = model.expert_tensor(name, e).expect("a loaded expert");
            (at.0, at.1, m)
        })
    });
    let matrices = loaded
        .matrices
        .iter()
        .map(|(name, m)| (name.as_str(), None, m));
    for (name, expert, m) in matrices.chain(stacks) {
        let r = types.get_mut(&type_of(name)).expect("a listed type");
        r.family = Some(m.family().to_string());
        if cli.check {
            let file = model.file();
            let w = match expert {
                None => file.matrix(name),
                Some(e) => file.expert(name, e),
            }
            .map_err(|e| kgen_runtime::Error::Load(e.to_string()))?;
            match expert {
                None => file.release(name),
                Some(e) => file.release_expert(name, e),
            }
            let err = rel_error(&w, m)?;
            r.max_rel_error = Some(r.max_rel_error.map_or(err, |e: f64| e.max(err)));
        }
    }
    let types: Vec<TypeReport> = types.into_values().collect();
    let ok = types
        .iter()
        .all(|t| t.status != "unsupported" && t.max_rel_error.is_none_or(|e| e <= BOUND));
    Ok(Report {
        file: cli.file.display().to_string(),
        types,
        bound: cli.check.then_some(BOUND),
        ok,
    })
}

/// `max |y - y_ref| / max |y_ref|` for the GEMV of a fixed activation (the
/// same for every matrix of a K), `y_ref` in f64 from `w` dequantized.
fn rel_error(w: &GgmlMatrix, m: &Matrix) -> Result<f64, kgen_runtime::Error> {
    let (k, n) = (w.k, w.n);
    let x = Rng::new(k as u64).vec_f32(k);
    let mut y = vec![0f32; n];
    m.gemv(&x, &mut y)?;
    let dq = w.dequantize();
    let mut want = vec![0f64; n];
    for (i, &xi) in x.iter().enumerate() {
        for (j, o) in want.iter_mut().enumerate() {
            *o += f64::from(xi) * f64::from(dq[i * n + j]);
        }
    }
    let scale = want
        .iter()
        .fold(0f64, |a, v| a.max(v.abs()))
        .max(f64::MIN_POSITIVE);
    let diff = y
        .iter()
        .zip(&want)
        .fold(0f64, |a, (&g, &r)| a.max((f64::from(g) - r).abs()));
    Ok(if diff.is_nan() {
        f64::INFINITY
    } else {
        diff / scale
    })
}

fn print_text(r: &Report) {
    println!("{}", r.file);
    for t in &r.types {
        let shapes: Vec<String> = t
            .shapes
            .iter()
            .map(|(d, n)| {
                let dims: Vec<String> = d.iter().map(u64::to_string).collect();
                format!("{} x{n}", dims.join("x"))
            })
            .collect();
        println!(
            "  {:<8} {:>4} tensor(s) {:>9.1} MiB  {}",
            t.type_name,
            t.tensors,
            t.bytes as f64 / (1 << 20) as f64,
            t.status
        );
        println!("           shapes {}", shapes.join(", "));
        if let Some(m) = t.matrices.filter(|&m| m != t.tensors) {
            println!("           {m} matrices (a 3-D tensor holds one per expert)");
        }
        if let (Some(k), Some(f), Some(s)) = (&t.kernel, &t.family, t.repack_s) {
            println!("           kernel {k} ({f} family), load and repack {s:.2} s");
        }
        if let Some(why) = &t.reason {
            println!("           {why}");
        }
        if let Some(e) = t.max_rel_error {
            let verdict = if e <= BOUND {
                "ok"
            } else {
                "OUTSIDE THE BOUND"
            };
            println!("           GEMV max relative error {e:.2e} (bound {BOUND:.0e}): {verdict}");
        }
    }
    println!("{}", if r.ok { "ok" } else { "NOT OK" });
}
