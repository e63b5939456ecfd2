//! `kgen-inspect` (and `kgen inspect`, which runs it) on GGUF files written
//! here: grouping, kernels, the --check bound, exit statuses, --json.

use kgen::format::ggml::{gguf_image, gguf_image_raw, GgmlMatrix, GgmlType};
use kgen::format::rng::Rng;
use std::path::Path;
use std::process::Command;

fn inspect(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kgen-inspect"))
        .args(args)
        .output()
        .expect("kgen-inspect runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn quantized(k: usize, n: usize, t: GgmlType, seed: u64) -> GgmlMatrix {
    GgmlMatrix::quantize(&Rng::new(seed).vec_f32(k * n), k, n, t)
}

fn write(path: &Path, tensors: &[(&str, &GgmlMatrix)]) {
    std::fs::write(path, gguf_image(tensors)).unwrap();
}

#[test]
fn a_supported_file_is_ok_with_check_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ok.gguf");
    let (a, b, c, d) = (
        quantized(64, 16, GgmlType::Q4_0, 1),
        quantized(64, 16, GgmlType::Q4_0, 2),
        quantized(96, 40, GgmlType::Q8_0, 3),
        quantized(512, 24, GgmlType::Q2_K, 4),
    );
    let norm = GgmlMatrix {
        k: 32,
        n: 1,
        dtype: GgmlType::F32,
        data: vec![0; 32 * 4],
    };
    write(
        &path,
        &[("a", &a), ("b", &b), ("c", &c), ("d", &d), ("norm", &norm)],
    );
    let p = path.to_str().unwrap();
    let (code, out, err) = inspect(&[p, "--check"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("Q4_0") && out.contains("2 tensor(s)"), "{out}");
    assert!(out.contains("shapes 64x16 x2"), "{out}");
    assert!(
        out.contains("kernel q4_0_gemv_")
            && out.contains("kernel q8_0_gemv_")
            && out.contains("kernel q2_k_gemv_"),
        "{out}"
    );
    assert!(out.contains("not a matrix"), "{out}");
    assert_eq!(out.matches("GEMV max relative error").count(), 3, "{out}");

    let (code, out, _) = inspect(&[p, "--check", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true);
    let types = v["types"].as_array().unwrap();
    let q8 = types.iter().find(|t| t["type_name"] == "Q8_0").unwrap();
    assert_eq!(q8["status"], "loaded");
    let e = q8["max_rel_error"].as_f64().unwrap();
    assert!(e > 0.0 && e < 2e-2, "{e}");
}

#[test]
fn unsupported_types_and_bad_files_fail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kq.gguf");
    // Q8_K (type 15), which kgen has no kernel for: 512 values, 584 bytes.
    let bytes = gguf_image_raw(&[("kq", 15, &[256, 2], &[0u8; 584])]);
    std::fs::write(&path, &bytes).unwrap();
    let (code, out, _) = inspect(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Q8_K") && out.contains("unsupported"), "{out}");
    assert!(out.contains("NOT OK"), "{out}");

    std::fs::write(&path, b"GGUF\x03").unwrap();
    let (code, _, err) = inspect(&[path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("kq.gguf"), "{err}");
}

/// `kgen inspect` runs `kgen-inspect` from beside itself.
#[test]
fn kgen_inspect_runs_it() {
    let bin = Path::new(env!("CARGO_BIN_EXE_kgen-inspect"));
    let kgen = bin.with_file_name(format!("kgen{}", std::env::consts::EXE_SUFFIX));
    if !kgen.is_file() {
        // Only when the workspace built the kgen binary into the same dir.
        eprintln!("no {} beside kgen-inspect: skipped", kgen.display());
        return;
    }
    let out = Command::new(&kgen)
        .args(["inspect", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--check"));
}

/// A mixture-of-experts file: a 3-D stack of Q4_K experts beside a 2-D
/// Q4_K matrix loads as one matrix per expert, `--check` runs every expert,
/// and a stack of a type without kernels fails the file.
#[test]
fn expert_stacks_are_loaded_and_checked_per_expert() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("moe.gguf");
    let (k, n) = (256, 24);
    let experts: Vec<GgmlMatrix> = (0..3)
        .map(|e| quantized(k, n, GgmlType::Q4_K, 20 + e))
        .collect();
    let stack: Vec<u8> = experts.iter().flat_map(|m| m.data.clone()).collect();
    let dense = quantized(k, 8, GgmlType::Q4_K, 9);
    let id = GgmlType::Q4_K.id();
    let image = gguf_image_raw(&[
        ("blk.0.ffn_down_exps.weight", id, &[k, n, 3], &stack),
        ("blk.0.attn_v.weight", id, &[k, 8], &dense.data),
    ]);
    std::fs::write(&path, &image).unwrap();
    let p = path.to_str().unwrap();
    let (code, out, err) = inspect(&[p, "--check"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("256x24x3 x1") && out.contains("4 matrices"),
        "{out}"
    );
    assert!(out.contains("kernel q4_k_gemv_"), "{out}");
    let (code, out, _) = inspect(&[p, "--check", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let q4k = &v["types"][0];
    assert_eq!(
        (q4k["tensors"].as_u64(), q4k["matrices"].as_u64()),
        (Some(2), Some(4))
    );
    let e = q4k["max_rel_error"].as_f64().unwrap();
    assert!(e > 0.0 && e < 2e-2, "{e}");

    // The same experts as an older file stores them, one tensor each (in
    // the file in another order): each is checked against its own blocks.
    let split = dir.path().join("split.gguf");
    let names: Vec<String> = (0..3)
        .map(|e| format!("blk.0.ffn_down.{e}.weight"))
        .collect();
    let (kn, k8) = ([k, n], [k, 8]);
    let mut tensors: Vec<(&str, u32, &[usize], &[u8])> = [1, 2, 0]
        .into_iter()
        .map(|e| (names[e].as_str(), id, &kn[..], &experts[e].data[..]))
        .collect();
    tensors.push(("blk.0.attn_v.weight", id, &k8, &dense.data));
    std::fs::write(&split, gguf_image_raw(&tensors)).unwrap();
    let (code, out, err) = inspect(&[split.to_str().unwrap(), "--check", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let q4k = &v["types"][0];
    assert_eq!(
        (q4k["tensors"].as_u64(), q4k["matrices"].as_u64()),
        (Some(4), Some(4))
    );
    let e = q4k["max_rel_error"].as_f64().unwrap();
    assert!(e > 0.0 && e < 2e-2, "{e}");

    // Q8_K experts (type 15, 256 values in 292 bytes): unsupported.
    let bad = dir.path().join("q8k.gguf");
    let image = gguf_image_raw(&[("blk.0.ffn_up_exps.weight", 15, &[256, 1, 2], &[0u8; 584])]);
    std::fs::write(&bad, &image).unwrap();
    let (code, out, _) = inspect(&[bad.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Q8_K") && out.contains("unsupported"), "{out}");
}
