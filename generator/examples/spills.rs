//! Compiles every micro tile the int8 model ranks on a target's x86 ISAs and
//! counts each kernel's vector spills (stack accesses naming an xmm, ymm or
//! zmm register), beside the vector registers the model says the tile needs
//! (`kgen::family::int8::model::registers`).
//!
//! The register budget is the one model term a machine without the ISA can
//! still check: compilation needs no AVX-512 hardware, so the AVX-512 tiles
//! are checked on an AVX2 machine too. Nothing here runs a kernel.
//!
//!     cargo run --release -p kgen --example spills -- zen4 q8_0 iq4_nl
//!
//! Arguments: a target name, then format tags (default: every int8 format).

use kgen::family::file::emit_file;
use kgen::family::int8::isa::I8_FAMILY;
use kgen::family::int8::model::{self, I8Fixed};
use kgen::family::int8::plan::{I8Candidate, I8Plan};
use kgen::family::int8::spec::I8Spec;
use kgen::family::plan::TileSource;
use kgen::spec::Op;
use kgen::target::Arch;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

const SHAPE: (usize, usize) = (4096, 4096);
const GEMM_M: usize = 32;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let target = kgen::target::load(&args.next().ok_or("usage: spills TARGET [FORMAT...]")?)?;
    let mut formats: Vec<String> = args.collect();
    if formats.is_empty() {
        formats = kgen::build::int8_format_tags()
            .into_iter()
            .map(String::from)
            .collect();
    }
    // (plan, is the model's pick) for every ranked tile.
    let mut plans: Vec<(I8Plan, bool)> = Vec::new();
    for isa in I8_FAMILY
        .iter()
        .filter(|i| i.arch == Some(Arch::X86_64) && i.runs_on(&target))
    {
        for tag in &formats {
            let spec = I8Spec::from_tag(Op::Gemv, tag).ok_or(format!("no int8 format {tag}"))?;
            if isa.supports(&spec).is_err() {
                continue;
            }
            let gemv = model::plan(&spec, isa, &target, SHAPE)?;
            let fixed = |c: &I8Candidate| I8Fixed {
                tile: c.tile,
                block: None,
                source: TileSource::Fixed,
            };
            for (n, c) in model::rank_tiles(&spec, isa, &target, SHAPE)
                .iter()
                .enumerate()
            {
                let p = model::plan_with(&spec, isa, &target, SHAPE, Some(&fixed(c)))?;
                plans.push((p, n == 0));
            }
            for (n, c) in model::rank_gemm_tiles(&gemv, GEMM_M, &target)
                .iter()
                .enumerate()
            {
                let p = model::plan_gemm_with(&gemv, GEMM_M, &target, Some(&fixed(c)))?;
                plans.push((p, n == 0));
            }
        }
    }
    let dir = tempfile::tempdir()?;
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src)?;
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"kgen-spills-scratch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\n\n[workspace]\n\n[lib]\npath = \"src/lib.rs\"\n\n\
         [profile.release]\ndebug = false\ncodegen-units = 1\n",
    )?;
    let mut lib = String::from("#![allow(clippy::all, unused)]\n");
    for (n, (p, _)) in plans.iter().enumerate() {
        let file = format!("kcand_{n}.rs");
        let text = emit_file(&target, std::slice::from_ref(p), "spills example")?.text;
        std::fs::write(src.join(&file), text)?;
        let _ = writeln!(lib, "pub mod kcand_{n}_k {{ include!(\"{file}\"); }}");
    }
    std::fs::write(src.join("lib.rs"), lib)?;
    eprintln!("compiling {} kernels for {}", plans.len(), target.name);
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "rustc",
            "--release",
            "--lib",
            "--quiet",
            "--",
            "--emit",
            "asm",
            "--cap-lints",
            "allow",
        ])
        .env("CARGO_TARGET_DIR", dir.path().join("target"))
        .current_dir(dir.path())
        .status()?;
    if !status.success() {
        return Err("the scratch crate did not compile".into());
    }
    let spills = count_spills(&dir.path().join("target/release/deps"), plans.len())?;
    println!(
        "{:<11} {:<7} {:<42} {:>9} {:>7}",
        "isa", "op", "kernel", "model reg", "spills"
    );
    for ((p, pick), s) in plans.iter().zip(spills) {
        let op = match p.spec.op {
            Op::Gemv => "gemv".to_string(),
            Op::Gemm { m } => format!("gemm{m}"),
        };
        println!(
            "{:<11} {:<7} {:<42} {:>5}/{:<3} {:>7}{}",
            p.isa,
            op,
            p.kernel_name(),
            p.registers.used,
            p.registers.limit,
            s,
            if *pick { "  <- model's pick" } else { "" }
        );
    }
    Ok(())
}

/// Vector stack accesses per `kcand_N_k` module (the `_k` ends the digits
/// before the mangled name's next length prefix) in the `.s` file under `deps`.
fn count_spills(deps: &Path, n: usize) -> Result<Vec<usize>, Box<dyn std::error::Error>> {
    let asm = std::fs::read_dir(deps)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "s"))
        .ok_or("no .s file")?;
    let mut counts = vec![0; n];
    let mut current: Option<usize> = None;
    for line in std::fs::read_to_string(asm)?.lines() {
        // A function's label: its mangled name holds the module.
        // (`.LBB` block labels start with a dot and stay in the function.)
        if !line.starts_with(char::is_whitespace) && !line.starts_with('.') && line.ends_with(':') {
            current = line.find("kcand_").and_then(|i| {
                let digits: String = line[i + 6..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok()
            });
            continue;
        }
        let vector = ["%xmm", "%ymm", "%zmm"].iter().any(|r| line.contains(r));
        if let Some(c) = current {
            if vector && line.contains("(%rsp)") {
                counts[c] += 1;
            }
        }
    }
    Ok(counts)
}
