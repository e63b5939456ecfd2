//! The `kgen` binary for both families: `plan --format`, `targets`, `tune
//! --print/--report` on int8 entries, the flags that exclude each other, and
//! every command writing into a closed pipe.

use std::process::{Command, Output};

fn kgen(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kgen"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = kgen(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The format as GGUF and llama.cpp spell it (`Q4_K`, as the README's CLI
/// tour writes it) names the same kernels as its tag; a name outside the
/// table is refused with the tags listed.
#[test]
fn format_names_in_any_case() {
    let upper = ok(&["--target", "zen4", "--format", "Q4_K", "--op", "gemv"]);
    let lower = ok(&["--target", "zen4", "--format", "q4_k", "--op", "gemv"]);
    // Only the header's command line differs.
    let body = |s: &str| s.lines().skip(2).collect::<Vec<_>>().join("\n");
    assert!(upper.contains("q4_k_gemv_1x"), "{upper}");
    assert_eq!(body(&upper), body(&lower));
    let out = kgen(&["--target", "zen4", "--format", "Q4_Z"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Q4_Z") && err.contains("q4_k"), "{err}");
}

#[test]
fn plan_format_json_has_the_int8_plan() {
    let text = ok(&[
        "plan",
        "--target",
        "zen4",
        "--format",
        "q4_0",
        "--no-profile",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let p = &v[0];
    assert_eq!(p["family"], "int8");
    assert_eq!(p["format"], "q4_0");
    assert_eq!(p["isa"], "avx512vnni");
    let kernel = p["kernel"].as_str().unwrap();
    assert!(
        kernel.starts_with("q4_0_gemv_1x") && kernel.ends_with("__avx512vnni"),
        "{kernel}"
    );
    assert!(p["layout"].as_str().unwrap().starts_with("Q4_0_"), "{p}");
    for f in ["t_u", "t_sub", "m_r"] {
        assert!(p["tile"][f].as_u64().unwrap() > 0, "tile.{f} in {p}");
    }
    assert_eq!(p["tile"]["m_r"], 1);
    assert_eq!(p["lanes"], 16);
    // The plan type every family shares: block, registers, prediction.
    for (o, f) in [
        ("block", "m_b"),
        ("block", "t_b"),
        ("block", "lhs_bits"),
        ("block", "gamma_bits"),
        ("registers", "used"),
        ("registers", "limit"),
    ] {
        assert!(p[o][f].as_u64().unwrap() > 0, "{o}.{f} in {p}");
    }
    assert!(p["registers"]["used"].as_u64() <= p["registers"]["limit"].as_u64());
    assert!(p["block"]["lhs_bits"].as_u64() <= p["block"]["gamma_bits"].as_u64());
    let (gbs, gflops) = (&p["prediction"]["gbs"], &p["prediction"]["gflops"]);
    assert!(gbs.as_f64().unwrap() > 0.0 && gflops.as_f64().unwrap() > 0.0);
    assert_eq!(p["source"], "Model");
    let cands = p["candidates"].as_array().unwrap();
    assert!(cands.len() > 1);
    assert_eq!(cands[0]["tile"], p["tile"], "the model's pick ranks first");

    // A GEMM plan keeps the GEMV's layout.
    let text = ok(&[
        "plan",
        "--target",
        "neoverse-v1",
        "--format",
        "q4_0",
        "--m",
        "32",
        "--no-profile",
        "--json",
    ]);
    let g: serde_json::Value = serde_json::from_str(&text).unwrap();
    let g = &g[0];
    assert_eq!(g["isa"], "i8mm");
    assert!(g["kernel"].as_str().unwrap().starts_with("q4_0_gemm_"));
    assert_eq!(g["spec"]["op"]["Gemm"]["m"], 32);
    assert!(g["tile"]["m_r"].as_u64().unwrap() >= 2);

    // f32 plans name their family and kernel too.
    let text = ok(&[
        "plan",
        "--target",
        "zen4",
        "--bits",
        "4",
        "--group",
        "32",
        "--no-profile",
        "--json",
    ]);
    let f: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(f[0]["family"], "f32");
    assert!(f[0]["kernel"]
        .as_str()
        .unwrap()
        .starts_with("q4g32_gemv_1x"));
}

#[test]
fn plan_format_text_and_explain() {
    let text = ok(&[
        "plan",
        "--target",
        "haswell",
        "--format",
        "q8_0",
        "--no-profile",
    ]);
    for want in [
        "kernel q8_0_gemv_1x",
        "isa avx2",
        "micro tile  t_u=",
        "layout      Q8_0_",
        "L1 block    m_b=",
        "registers",
        "GB/s of weights",
        "GFLOPS",
        "performance model",
        "per block   ",
        "counted from the emitted micro kernel",
    ] {
        assert!(text.contains(want), "`{want}` missing in\n{text}");
    }
    // The bound named is the largest of the four limits printed.
    let line = text.lines().find(|l| l.contains("per block")).unwrap();
    let cycles: f64 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    let terms: Vec<f64> = line
        .split(" = ")
        .skip(1)
        .map(|t| t.split([',', ';']).next().unwrap().trim().parse().unwrap())
        .collect();
    assert_eq!(terms.len(), 4, "{line}");
    assert!(
        terms.iter().all(|&t| t <= cycles) && terms.contains(&cycles),
        "{line}"
    );
    let text = ok(&[
        "plan",
        "--target",
        "neoverse-n1",
        "--format",
        "iq4_nl",
        "--no-profile",
        "--explain",
    ]);
    assert!(
        text.contains("candidates (model rank, best first):"),
        "{text}"
    );
    assert!(text.contains("     1. t_u="), "{text}");
    // The op counts of the GEMV and the GEMM on its layout.
    assert!(text.contains("op counts:"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("int8") && l.contains("iq4_nl_gemv_1x") && l.contains("__dotprod")),
        "{text}"
    );
    assert!(text.lines().any(|l| l.contains("iq4_nl_gemm_")), "{text}");
}

/// The GEMV roofline: the block loop's GB/s against each memory level the
/// target file gives, the bound named for each; none for a GEMM.
#[test]
fn plan_prints_the_gemv_roofline() {
    let plan = |target: &str, m: Option<&str>| {
        let mut args = vec![
            "plan",
            "--target",
            target,
            "--format",
            "tq2_0",
            "--no-profile",
        ];
        if let Some(m) = m {
            args.extend(["--m", m]);
        }
        ok(&args)
    };
    let text = plan("zen3", None);
    let line = text.lines().find(|l| l.contains("roofline")).unwrap();
    let compute: f64 = line
        .split(" GB/s at ")
        .next()
        .and_then(|a| a.rsplit(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    // zen3: DRAM 22 GB/s per core, L3 65; each side is the smaller figure.
    for (name, mem) in [("DRAM", 22.0f64), ("L3", 65.0)] {
        let (gbs, bound) = if compute < mem {
            (compute, "kernel-bound")
        } else {
            (mem, "memory-bound")
        };
        let want = format!("{name} {mem:.1} GB/s per core: {bound}, {gbs:.1} GB/s");
        assert!(line.contains(&want), "`{want}` missing in {line}");
    }
    // haswell's file gives no L3 bandwidth; a GEMM plan has no roofline.
    assert!(plan("haswell", None).contains("L3: no bandwidth in the target file"));
    assert!(!plan("zen3", Some("32")).contains("roofline"));
}

#[test]
fn format_excludes_bits_group_and_unknown_formats_are_named() {
    for args in [
        &[
            "plan", "--target", "zen4", "--format", "q4_0", "--bits", "4",
        ][..],
        &[
            "plan", "--target", "zen4", "--format", "q4_0", "--group", "32",
        ],
        &["--target", "zen4", "--format", "q8_0", "--bits", "8"],
        &["tune", "--format", "q4_0", "--group", "32", "--print"],
    ] {
        let out = kgen(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(
            err.contains("--format") && err.contains("cannot be used with"),
            "{args:?}: {err}"
        );
    }
    let out = kgen(&["plan", "--target", "zen4", "--format", "q8_k"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("q8_k") && err.contains("q4_0") && err.contains("iq4_nl"),
        "{err}"
    );
    // Help lists the format table's int8 rows, not a hand-kept list.
    for cmd in [
        &["gen", "--help"][..],
        &["plan", "--help"],
        &["tune", "--help"],
    ] {
        let help = ok(cmd);
        for f in kgen::format::int8_formats() {
            assert!(
                help.contains(f.tag),
                "{cmd:?} --help lacks {}: {help}",
                f.tag
            );
        }
    }
}

#[test]
fn targets_names_each_familys_kernels() {
    let text = ok(&["targets"]);
    let header = text.lines().next().unwrap();
    for col in [
        "TARGET",
        "ARCH",
        "FAMILY",
        "FORMAT",
        "ISA",
        "GEMV KERNEL",
        "GEMM KERNEL",
    ] {
        assert!(header.contains(col), "{header}");
    }
    // Zen 4: the f32 default spec on AVX-512F, each int8 format on AVX-512 VNNI.
    let zen4: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("zen4 "))
        .take(4)
        .collect();
    assert!(
        zen4[0].contains("f32") && zen4[0].contains("q4g128_gemv_1x"),
        "{zen4:?}"
    );
    assert!(zen4[0].contains("__avx512f"), "{zen4:?}");
    for (line, format) in zen4[1..].iter().zip(kgen::build::int8_format_tags()) {
        assert!(line.contains("int8"), "{line}");
        assert!(
            line.contains(&format!("{format}_gemv_1x"))
                && line.contains(&format!("{format}_gemm_"))
                && line.contains("__avx512vnni"),
            "{line}"
        );
    }
    // Every target has every int8 format (SVE falls back to dotprod for IQ4_NL).
    for t in kgen::target::load_all().unwrap() {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{} ", t.name))),
            "{}",
            t.name
        );
    }
    // The target's rows: its own line, then one per family and format.
    let sve: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("generic-aarch64-sve256 "))
        .take(1 + kgen::build::int8_format_tags().len())
        .collect();
    let row = |tag: &str| {
        sve.iter()
            .find(|l| l.contains(&format!("{tag}_gemv_1x")))
            .unwrap_or_else(|| panic!("no {tag} row: {sve:?}"))
    };
    assert!(row("q4_0").contains("__sve256"), "{sve:?}");
    // Formats sve256 has no kernels for fall back to dotprod or i8mm there.
    assert!(row("iq4_nl").contains("__dotprod"), "{sve:?}");
    assert!(text.lines().last().unwrap().starts_with("native"));

    let summary = ok(&["targets", "--summary"]);
    assert!(
        summary.contains("L1d") && summary.contains("int8 kernels: avx512vnni"),
        "{summary}"
    );
}

#[test]
fn tune_print_and_report_cover_int8_entries() {
    use kgen::family::int8::spec::I8Spec;
    use kgen::profile::{key_for_i8, Measured, Profile, ProfileEntry};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let target = kgen::target::load("native").unwrap();
    let spec = I8Spec::from_tag(kgen::spec::Op::Gemv, "q8_0").unwrap();
    let isa = kgen::select_i8_isas(&target, &spec, &kgen::IsaChoice::Best).unwrap()[0];
    let out = ok(&["tune", "--format", "q8_0", "--print", "--profile-dir", d]);
    assert!(out.contains("no profile entry for int8 q8_0 gemv"), "{out}");

    let key = key_for_i8(&target, &isa, &spec, 1);
    let m = Measured {
        m_u: None,
        t_u: 2,
        t_sub: Some(2),
        m_r: 1,
        m_b: 256,
        t_b: 64,
        median_s: 1e-3,
        gbs: 10.0,
        gflops: 20.0,
        model_rank: 1,
        model_gbs: 12.0,
        model_pick: true,
    };
    let p = Profile {
        entries: vec![ProfileEntry {
            key,
            shapes: vec!["4096x4096".into()],
            measured: vec![m],
            failed: vec![],
        }],
        machines: vec![],
    };
    p.save(&kgen::tune::profile_file(dir.path(), &target.description))
        .unwrap();
    let out = ok(&["tune", "--format", "q8_0", "--print", "--profile-dir", d]);
    assert!(
        out.contains("family = \"int8\"") && out.contains("format = \"q8_0\""),
        "{out}"
    );
    assert!(out.contains("t_sub = 2") && !out.contains("m_u"), "{out}");
    // The f32 spec of the same bits is another key.
    let out = ok(&[
        "tune",
        "--bits",
        "8",
        "--group",
        "32",
        "--print",
        "--profile-dir",
        d,
    ]);
    assert!(out.contains("no profile entry"), "{out}");
    let out = ok(&["tune", "--report", "--profile-dir", d]);
    assert!(
        out.contains("int8") && out.contains("q8_0") && out.contains("t_u=2 t_sub=2 m_r=1"),
        "{out}"
    );
}

/// A profile's measured read bandwidth and clock are the roofline's sides
/// for `native` (and said on standard error); without one, `native` says
/// the L3 figure is unknown and how to get it.
#[test]
fn native_plans_take_the_measured_bandwidth() {
    use kgen::profile::{machine_entry, Profile};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let target = kgen::target::load("native").unwrap();
    let args = [
        "plan",
        "--target",
        "native",
        "--format",
        "q4_0",
        "--explain",
        "--profile",
        d,
    ];
    let before = ok(&args);
    assert!(
        before.contains("L3: bandwidth unknown (`kgen tune` measures it)"),
        "{before}"
    );
    let measured = kgen::target::desc::Memory {
        bandwidth_gbs: 33.3,
        bandwidth_per_core_gbs: 11.1,
        l3_bandwidth_per_core_gbs: Some(44.4),
    };
    let p = Profile {
        entries: vec![],
        machines: vec![machine_entry(
            &target,
            &measured,
            2,
            (1 << 28, Some(1 << 23)),
            Some(3.21),
        )],
    };
    p.save(&kgen::tune::profile_file(dir.path(), &target.description))
        .unwrap();
    let out = kgen(&args);
    assert!(out.status.success());
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        text.contains("weights in DRAM 11.1 GB/s per core")
            && text.contains("in L3 44.4 GB/s per core")
            && text.contains("at 3.21 GHz"),
        "{text}"
    );
    assert!(err.contains("as kgen tune measured it"), "{err}");
    // --no-profile: the guesses again.
    let mut plain = args.to_vec();
    plain.truncate(6);
    plain.push("--no-profile");
    assert!(ok(&plain).contains("L3: bandwidth unknown"));
}

/// `kgen ... | head` must not panic: every command, with standard output a
/// pipe whose reader is already gone.
#[cfg(unix)]
#[test]
fn every_command_ends_quietly_into_a_closed_pipe() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let commands: &[&[&str]] = &[
        &[
            "plan", "--target", "zen4", "--bits", "4", "--group", "32", "--json",
        ],
        &[
            "plan",
            "--target",
            "zen4",
            "--bits",
            "4",
            "--group",
            "32",
            "--explain",
        ],
        &["plan", "--target", "zen4", "--format", "q4_0", "--json"],
        &["plan", "--target", "zen4", "--format", "q4_0", "--explain"],
        &["--target", "zen4", "--isa", "all"],
        &["gen", "--target", "zen4", "--format", "iq4_nl"],
        &["targets"],
        &["targets", "--summary"],
        &["tune", "--report", "--profile-dir", d],
        &["tune", "--print", "--format", "q4_0", "--profile-dir", d],
        &["--help"],
        &["--version"],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_kgen"))
            .args(*args)
            .stdout(writer)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe") && !err.contains("backtrace"),
            "{args:?}: {err}"
        );
        assert!(
            out.status.success() || out.status.signal() == Some(libc_sigpipe()),
            "{args:?}: {:?} {err}",
            out.status
        );
    }
}

/// SIGPIPE's number on the Unix systems kgen runs on.
#[cfg(unix)]
fn libc_sigpipe() -> i32 {
    13
}
