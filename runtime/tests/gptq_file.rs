//! GPTQ safetensors loading against files written by Python (`safetensors` +
//! `numpy`, packed the way AutoGPTQ packs) by `tests/data/write_gptq.py`,
//! which also stores the dequantized weights it expects.
//!
//! Needs `python3`; if `safetensors` or `numpy` are missing the tests try
//! `pip install --quiet -r scripts/requirements.txt` once and fail loudly otherwise.

use kgen::spec::Group;
use kgen_runtime::gptq_file::{
    list_layers, load_gptq, GptqFile, GptqLayer, GptqOptions, ZeroConvention,
};
use safetensors::{Dtype, SafeTensors};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const PYTHON: &str = "python3";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/write_gptq.py")
}

fn python_has_deps() -> Result<bool, String> {
    let out = Command::new(PYTHON)
        .args(["-c", "import numpy, safetensors.numpy"])
        .output()
        .map_err(|e| format!("cannot run `{PYTHON}` ({e})"))?;
    Ok(out.status.success())
}

/// Makes sure python3 with numpy and safetensors is usable (installing them
/// once if needed); panics with an explanation otherwise.
fn ensure_python() {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    let r = READY.get_or_init(|| {
        if python_has_deps()? {
            return Ok(());
        }
        // The versions scripts/setup.sh installs.
        let reqs = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/requirements.txt");
        eprintln!("python3 lacks safetensors/numpy: running pip install --quiet -r {reqs}");
        let st = Command::new(PYTHON)
            .args(["-m", "pip", "install", "--quiet", "-r", reqs])
            .status()
            .map_err(|e| format!("cannot run pip ({e})"))?;
        if python_has_deps()? {
            Ok(())
        } else {
            Err(format!("pip install -r {reqs} failed ({st})"))
        }
    });
    if let Err(e) = r {
        panic!(
            "these tests need {PYTHON} with the `safetensors` and `numpy` packages to write GPTQ \
             files: {e}. Install them (pip install safetensors numpy) and re-run."
        );
    }
}

/// Runs the writer script; panics with its stderr if it fails.
fn write(path: &Path, meta: &[&str], layers: &[String]) {
    ensure_python();
    let mut cmd = Command::new(PYTHON);
    cmd.arg(script()).arg("--out").arg(path);
    for m in meta {
        cmd.args(["--meta", m]);
    }
    for l in layers {
        cmd.args(["--layer", l]);
    }
    let out = cmd.output().expect("run python3");
    assert!(
        out.status.success(),
        "write_gptq.py failed for {layers:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `{prefix}.expected_w`: [K, N] f32 in checkpoint row order.
fn expected(path: &Path, prefix: &str) -> (Vec<f32>, usize, usize) {
    let buf = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&buf).unwrap();
    let t = st.tensor(&format!("{prefix}.expected_w")).unwrap();
    assert_eq!(t.dtype(), Dtype::F32);
    let (k, n) = (t.shape()[0], t.shape()[1]);
    let v = t
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (v, k, n)
}

fn opts(bits: u32, convention: Option<ZeroConvention>) -> GptqOptions {
    GptqOptions { bits, convention }
}

/// Loads `prefix` and compares every weight with the expected one (through
/// the permutation), then checks `y = x W` with permuted activations.
fn check(path: &Path, prefix: &str, o: &GptqOptions, group: Group, act_order: bool) -> GptqLayer {
    let layer = load_gptq(path, prefix, o).unwrap_or_else(|e| panic!("{prefix}: {e}"));
    let m = &layer.matrix;
    m.validate().unwrap();
    let (w, k, n) = expected(path, prefix);
    assert_eq!(
        (m.k, m.n, m.bits, m.group),
        (k, n, o.bits, group),
        "{prefix}"
    );
    assert_eq!(
        layer.perm.is_some(),
        act_order,
        "{prefix}: perm {:?}",
        layer.perm.as_ref().map(|p| &p[..8])
    );
    let perm: Vec<usize> = match &layer.perm {
        Some(p) => p.iter().map(|&i| i as usize).collect(),
        None => (0..k).collect(),
    };
    let mut seen = vec![false; k];
    for &p in &perm {
        assert!(!seen[p], "{prefix}: perm repeats {p}");
        seen[p] = true;
    }
    let mut bad = 0;
    for (j, &orig) in perm.iter().enumerate() {
        for c in 0..n {
            let (got, want) = (m.w(j, c), w[orig * n + c] as f64);
            if (got - want).abs() > 1e-6 * want.abs().max(1e-3) {
                if bad < 5 {
                    eprintln!("{prefix}: row {j} (orig {orig}) col {c}: got {got}, want {want}");
                }
                bad += 1;
            }
        }
    }
    assert_eq!(bad, 0, "{prefix}: {bad} of {} weights differ", k * n);

    // y = x W_orig must equal x' W_loaded with x'[j] = x[perm[j]].
    let rows = 2;
    let x: Vec<f32> = (0..rows * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let mut xp = vec![0f32; rows * k];
    for r in 0..rows {
        for (j, &p) in perm.iter().enumerate() {
            xp[r * k + j] = x[r * k + p];
        }
    }
    let y = m.reference_gemm(&xp, rows);
    for r in 0..rows {
        for c in 0..n {
            let want: f64 = (0..k)
                .map(|i| x[r * k + i] as f64 * w[i * n + c] as f64)
                .sum();
            let scale: f64 = (0..k)
                .map(|i| (x[r * k + i] as f64 * w[i * n + c] as f64).abs())
                .sum();
            assert!(
                (y[r * n + c] - want).abs() <= 1e-5 * scale.max(1e-6),
                "{prefix}: y[{r}][{c}] = {} vs {want}",
                y[r * n + c]
            );
        }
    }
    layer
}

fn group_of(g: i64) -> Group {
    if g < 0 {
        Group::Column
    } else {
        Group::Size(g as usize)
    }
}

#[test]
fn round_trip_every_width_group_and_convention() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.safetensors");
    let mut layers = Vec::new();
    let mut cases = Vec::new();
    let mut seed = 0;
    for bits in [2u32, 3, 4, 8] {
        for g in [32i64, 128, -1] {
            for conv in ["v1", "v2"] {
                seed += 1;
                let prefix = format!("model.layers.{seed}.mlp.b{bits}_g{g}_{conv}");
                layers.push(format!(
                    "prefix={prefix} bits={bits} group={g} k=256 n=64 seed={seed} zeros={conv}"
                ));
                cases.push((prefix, bits, g, conv));
            }
        }
    }
    write(&path, &[], &layers);
    let mut names: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
    names.sort();
    assert_eq!(list_layers(&path).unwrap(), names);
    let file = GptqFile::open(&path).unwrap();
    assert_eq!(file.layers().unwrap(), names);
    assert_eq!(file.declared_convention().unwrap(), ZeroConvention::V1);
    for (prefix, bits, g, conv) in &cases {
        let c = if *conv == "v1" {
            ZeroConvention::V1
        } else {
            ZeroConvention::V2
        };
        let layer = check(&path, prefix, &opts(*bits, Some(c)), group_of(*g), false);
        assert_eq!(file.load(prefix, &opts(*bits, Some(c))).unwrap(), layer);
        if *conv == "v1" {
            // No metadata: V1 is the default.
            check(&path, prefix, &opts(*bits, None), group_of(*g), false);
        }
    }
}

#[test]
fn wrong_convention_is_detected_by_the_comparison() {
    // Guards against a vacuous comparison: reading v1 zeros as v2 must fail it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.safetensors");
    write(
        &path,
        &[],
        &["prefix=l bits=4 group=32 k=128 n=32 seed=3 zeros=v1".to_string()],
    );
    let r = std::panic::catch_unwind(|| {
        check(
            &path,
            "l",
            &opts(4, Some(ZeroConvention::V2)),
            Group::Size(32),
            false,
        );
    });
    assert!(
        r.is_err(),
        "v1 zeros read as v2 matched the expected weights"
    );
}

#[test]
fn v2_metadata_selects_v2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.safetensors");
    let layers = [
        "prefix=a bits=4 group=128 k=256 n=64 seed=5 zeros=v2".to_string(),
        "prefix=b bits=3 group=32 k=128 n=96 seed=6 zeros=v2".to_string(),
    ];
    write(&path, &["checkpoint_format=gptq_v2"], &layers);
    check(&path, "a", &opts(4, None), Group::Size(128), false);
    check(&path, "b", &opts(3, None), Group::Size(32), false);
    // An explicit convention overrides the metadata.
    let v1 = load_gptq(&path, "a", &opts(4, Some(ZeroConvention::V1))).unwrap();
    let v2 = load_gptq(&path, "a", &opts(4, None)).unwrap();
    for (a, b) in v1.matrix.zeros.iter().zip(&v2.matrix.zeros) {
        assert_eq!(*a, b + 1.0);
    }
}

#[test]
fn act_order_is_permuted_and_repacked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("act.safetensors");
    let layers = [
        "prefix=a bits=4 group=32 k=256 n=64 seed=11 act_order=1".to_string(),
        "prefix=b bits=3 group=128 k=512 n=32 seed=12 act_order=1 zeros=v2".to_string(),
        "prefix=c bits=2 group=16 k=128 n=32 seed=13 act_order=1".to_string(),
        "prefix=d bits=8 group=64 k=256 n=32 seed=14 act_order=1 scales=f32".to_string(),
        // A trivial g_idx is stored but needs no permutation.
        "prefix=e bits=4 group=64 k=256 n=32 seed=15 g_idx=1".to_string(),
        // act-order with a single group is no permutation either.
        "prefix=f bits=4 group=-1 k=128 n=32 seed=16 act_order=1".to_string(),
    ];
    write(&path, &[], &layers);
    let a = check(&path, "a", &opts(4, None), Group::Size(32), true);
    check(
        &path,
        "b",
        &opts(3, Some(ZeroConvention::V2)),
        Group::Size(128),
        true,
    );
    check(&path, "c", &opts(2, None), Group::Size(16), true);
    check(&path, "d", &opts(8, None), Group::Size(64), true);
    check(&path, "e", &opts(4, None), Group::Size(64), false);
    check(&path, "f", &opts(4, None), Group::Column, false);

    // perm sorts rows by group, stably.
    let buf = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&buf).unwrap();
    let g_idx: Vec<i32> = st
        .tensor("a.g_idx")
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let perm = a.perm.unwrap();
    for w in perm.windows(2) {
        let (p, q) = (w[0] as usize, w[1] as usize);
        assert!(
            (g_idx[p], p) < (g_idx[q], q),
            "perm not a stable sort by g_idx"
        );
    }
}

#[test]
fn scales_in_f32_and_bf16() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scales.safetensors");
    let layers = [
        "prefix=f32 bits=4 group=32 k=128 n=64 seed=21 scales=f32".to_string(),
        "prefix=bf16 bits=3 group=64 k=128 n=32 seed=22 scales=bf16".to_string(),
        "prefix=f16 bits=2 group=128 k=256 n=32 seed=23 scales=f16".to_string(),
    ];
    write(&path, &[], &layers);
    check(&path, "f32", &opts(4, None), Group::Size(32), false);
    check(&path, "bf16", &opts(3, None), Group::Size(64), false);
    check(&path, "f16", &opts(2, None), Group::Size(128), false);
}

#[test]
fn v1_zero_point_zero_follows_autogptq() {
    // A quantizer zero of 0 is packed by AutoGPTQ as (uint32)-1 and spills;
    // the loader must read back what AutoGPTQ's dequantization computes.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zero0.safetensors");
    let layers: Vec<String> = [2, 3, 4, 8]
        .iter()
        .map(|b| format!("prefix=b{b} bits={b} group=32 k=64 n=64 seed={b} zero0=1"))
        .collect();
    write(&path, &[], &layers);
    for b in [2, 3, 4, 8] {
        let l = check(
            &path,
            &format!("b{b}"),
            &opts(b, None),
            Group::Size(32),
            false,
        );
        let top = (1u32 << b) as f32;
        assert!(
            l.matrix.zeros.contains(&top),
            "bits {b}: no spilled zero read as 2^bits"
        );
        assert!(l.matrix.zeros.iter().all(|&z| (1.0..=top).contains(&z)));
    }
}

// ---- errors ----------------------------------------------------------------

fn load_err(path: &Path, prefix: &str, o: &GptqOptions) -> String {
    match load_gptq(path, prefix, o) {
        Ok(l) => panic!(
            "{prefix}: expected an error, loaded {}x{}",
            l.matrix.k, l.matrix.n
        ),
        Err(e) => e.to_string(),
    }
}

fn assert_mentions(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "error `{msg}` does not mention `{p}`");
    }
}

#[test]
fn missing_truncated_and_garbage_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.safetensors");
    let e = load_err(&missing, "l", &opts(4, None));
    assert_mentions(&e, &["nope.safetensors", "cannot read"]);
    assert!(list_layers(&missing).is_err());

    let path = dir.path().join("ok.safetensors");
    write(
        &path,
        &[],
        &["prefix=l bits=4 group=32 k=128 n=32 seed=1".to_string()],
    );
    load_gptq(&path, "l", &opts(4, None)).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    for cut in [1, 100, bytes.len() - 20, bytes.len() - 4] {
        let t = dir.path().join(format!("cut{cut}.safetensors"));
        std::fs::write(&t, &bytes[..bytes.len() - cut]).unwrap();
        let e = load_err(&t, "l", &opts(4, None));
        assert_mentions(
            &e,
            &[
                &format!("cut{cut}.safetensors"),
                "not a valid safetensors file",
            ],
        );
        assert!(list_layers(&t).is_err());
    }
    let g = dir.path().join("garbage.safetensors");
    std::fs::write(
        &g,
        b"\xff\xff\xff\xff\xff\xff\xff\x7fnot a safetensors file",
    )
    .unwrap();
    assert_mentions(
        &load_err(&g, "l", &opts(4, None)),
        &["garbage.safetensors", "safetensors"],
    );
    std::fs::write(&g, b"").unwrap();
    assert_mentions(
        &load_err(&g, "l", &opts(4, None)),
        &["garbage.safetensors", "safetensors"],
    );
}

#[test]
fn missing_tensors_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drop.safetensors");
    let layers = [
        "prefix=noz bits=4 group=32 k=128 n=32 drop=qzeros".to_string(),
        "prefix=nos bits=4 group=32 k=128 n=32 drop=scales".to_string(),
        "prefix=now bits=4 group=32 k=128 n=32 drop=qweight".to_string(),
    ];
    write(&path, &[], &layers);
    let o = opts(4, None);
    assert_mentions(
        &load_err(&path, "noz", &o),
        &["drop.safetensors", "noz.qzeros", "missing"],
    );
    assert_mentions(&load_err(&path, "nos", &o), &["nos.scales", "missing"]);
    assert_mentions(&load_err(&path, "now", &o), &["now.qweight", "missing"]);
    assert_mentions(&load_err(&path, "other", &o), &["other.qweight", "missing"]);
    assert_eq!(
        list_layers(&path).unwrap(),
        vec!["nos".to_string(), "noz".to_string()]
    );
}

#[test]
fn wrong_dtype_shape_and_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.safetensors");
    let layers = [
        "prefix=fq bits=4 group=32 k=128 n=32 qweight_dtype=f32".to_string(),
        "prefix=zc bits=4 group=32 k=128 n=64 qzeros_extra_cols=1".to_string(),
        "prefix=k3 bits=3 group=32 k=128 n=32 qweight_drop_rows=1".to_string(),
        "prefix=k4 bits=4 group=32 k=128 n=32 qweight_drop_rows=1".to_string(),
        "prefix=nan bits=4 group=32 k=128 n=32 nan_scale=1".to_string(),
        "prefix=ok bits=4 group=32 k=128 n=32".to_string(),
    ];
    write(&path, &[], &layers);
    let o = opts(4, None);
    assert_mentions(
        &load_err(&path, "fq", &o),
        &["bad.safetensors", "fq.qweight", "F32", "I32"],
    );
    assert_mentions(
        &load_err(&path, "zc", &o),
        &["zc.qzeros", "9 columns", "needs 8"],
    );
    assert_mentions(
        &load_err(&path, "k3", &opts(3, None)),
        &["k3.qweight", "11 rows", "whole number"],
    );
    // 4-bit: 15 word rows = 120 rows of K, not a multiple of the 4 groups' size.
    assert_mentions(&load_err(&path, "k4", &o), &["k4.scales", "K = 120"]);
    assert_mentions(&load_err(&path, "nan", &o), &["nan.scales", "not finite"]);
    // Declaring the wrong width shows up as inconsistent shapes.
    assert_mentions(
        &load_err(&path, "ok", &opts(3, None)),
        &["ok.qweight", "whole number"],
    );
    assert_mentions(
        &load_err(&path, "ok", &opts(2, None)),
        &["ok.qzeros", "needs 2"],
    );
    assert_mentions(&load_err(&path, "ok", &opts(5, None)), &["5 bits"]);
    load_gptq(&path, "ok", &o).unwrap();
}

#[test]
fn bad_g_idx() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gidx.safetensors");
    let layers = [
        "prefix=range bits=4 group=32 k=128 n=32 bad_gidx=range".to_string(),
        "prefix=count bits=4 group=32 k=128 n=32 act_order=1 bad_gidx=count".to_string(),
        "prefix=len bits=4 group=32 k=128 n=32 bad_gidx=len".to_string(),
    ];
    write(&path, &[], &layers);
    let o = opts(4, None);
    assert_mentions(
        &load_err(&path, "range", &o),
        &["range.g_idx", "entry 64 is 4", "outside"],
    );
    assert_mentions(
        &load_err(&path, "count", &o),
        &["count.g_idx", "exactly 32 rows"],
    );
    assert_mentions(
        &load_err(&path, "len", &o),
        &["len.g_idx", "127 entries", "K = 128"],
    );
}
