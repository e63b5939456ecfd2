//! The gguf-py fixture shared by the `gguf_*` test files (`mod gguf_py;`):
//! `tests/data/write_gguf.py` writes GGUF files with `gguf.GGUFWriter`,
//! quantizing with `gguf.quants.quantize`, and dumps the original weights,
//! gguf-py's encoded bytes and dequantized weights and numpy's `x @ W`.
//!
//! gguf-py cannot quantize IQ4_NL or the K-quants: the script writes raw
//! blocks of those (which gguf-py dequantizes; `raw` in the manifest), and
//! `tests/data/from_bytes.py` takes kgen's own encoded bytes through gguf-py's
//! writer and dequantizer ([`from_bytes`]).
//!
//! Needs `python3`; if `gguf` or `numpy` are missing the tests try
//! `pip install --quiet -r scripts/requirements.txt` (the pinned versions) once and fail loudly otherwise. Each test
//! binary runs the writer once (it takes well under a second).

// Each test file uses a different subset.
#![allow(dead_code)]

use kgen::format::ggml::{GgmlMatrix, GgmlType};
use kgen_runtime::gguf::GgufFile;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub const PYTHON: &str = "python3";

fn python_has_deps() -> Result<bool, String> {
    let out = Command::new(PYTHON)
        .args(["-c", "import numpy, gguf, gguf.quants"])
        .output()
        .map_err(|e| format!("cannot run `{PYTHON}` ({e})"))?;
    Ok(out.status.success())
}

fn ensure_python() -> Result<(), String> {
    if python_has_deps()? {
        return Ok(());
    }
    // The versions scripts/setup.sh installs.
    let reqs = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/requirements.txt");
    eprintln!("python3 lacks gguf/numpy: running pip install --quiet -r {reqs}");
    let st = Command::new(PYTHON)
        .args(["-m", "pip", "install", "--quiet", "-r", reqs])
        .status()
        .map_err(|e| format!("cannot run pip ({e})"))?;
    if python_has_deps()? {
        Ok(())
    } else {
        Err(format!("pip install -r {reqs} failed ({st})"))
    }
}

/// The directory the writer script filled (written once per test process).
pub fn data_dir() -> &'static Path {
    static DIR: OnceLock<Result<tempfile::TempDir, String>> = OnceLock::new();
    let r = DIR.get_or_init(|| {
        ensure_python()?;
        let dir = tempfile::Builder::new()
            .prefix("gguf-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .map_err(|e| e.to_string())?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/write_gguf.py");
        let out = Command::new(PYTHON)
            .arg(&script)
            .arg("--out")
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run {PYTHON}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "write_gguf.py failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(dir)
    });
    match r {
        Ok(d) => d.path(),
        Err(e) => panic!(
            "these tests need {PYTHON} with the `gguf` (llama.cpp gguf-py) and `numpy` \
             packages to write GGUF files: {e}. Install them (pip install gguf numpy) and re-run."
        ),
    }
}

pub fn file(name: &str) -> PathBuf {
    data_dir().join(name)
}

pub fn open(name: &str) -> GgufFile {
    let p = file(name);
    GgufFile::open(&p).unwrap_or_else(|e| panic!("{e}"))
}

pub fn read_f32(path: &Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(b.len() % 4, 0);
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A line of the writer's `manifest.txt`: a tensor, the file holding it,
/// whether the script also dumped `x` and numpy's `y = x @ deq.T`, and
/// whether it holds raw blocks (a type gguf-py cannot quantize: `NAME.q` is
/// the blocks themselves, `NAME.orig` their dequantized weights).
pub struct Entry {
    pub file: String,
    pub name: String,
    pub dtype: GgmlType,
    pub k: usize,
    pub n: usize,
    pub matmul: bool,
    pub raw: bool,
}

impl Entry {
    pub fn data(&self, ext: &str) -> PathBuf {
        file(&format!("{}.{ext}", self.name))
    }

    /// An N x K dump as K x N (W[i][j] = row j, element i).
    pub fn w(&self, ext: &str) -> Vec<f32> {
        let nk = read_f32(&self.data(ext));
        assert_eq!(nk.len(), self.k * self.n, "{}.{ext}", self.name);
        let mut kn = vec![0f32; nk.len()];
        for j in 0..self.n {
            for i in 0..self.k {
                kn[i * self.n + j] = nk[j * self.k + i];
            }
        }
        kn
    }
}

pub fn manifest() -> Vec<Entry> {
    let text = std::fs::read_to_string(file("manifest.txt")).unwrap();
    let v: Vec<Entry> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert!(
                f.len() == 6 || (f.len() == 7 && f[6] == "raw"),
                "manifest line {l:?}"
            );
            Entry {
                file: f[0].to_string(),
                name: f[1].to_string(),
                dtype: GgmlType::all()
                    .find(|t| t.name() == f[2])
                    .unwrap_or_else(|| panic!("type {}", f[2])),
                k: f[3].parse().unwrap(),
                n: f[4].parse().unwrap(),
                matmul: f[5] == "matmul",
                raw: f.len() == 7,
            }
        })
        .collect();
    assert!(v.len() >= 30, "manifest has {} entries", v.len());
    v
}

/// Runs `tests/data/from_bytes.py` on `dir` for `dtype`: `dir/list.txt`
/// names the tensors ("NAME K N"), `dir/NAME.bin` holds kgen's blocks and
/// `dir/NAME.x` an activation vector. gguf-py writes them all to
/// `dir/kgen_<tag>.gguf` (returned) with `NAME.deq` (its dequantized
/// weights, N x K) and, for finite weights, `NAME.y` (numpy's `x @ deq.T`).
pub fn from_bytes(dir: &Path, dtype: GgmlType) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/from_bytes.py");
    let out = Command::new(PYTHON)
        .arg(&script)
        .arg(dir)
        .arg(dtype.name())
        .output()
        .unwrap_or_else(|err| panic!("cannot run {PYTHON}: {err}"));
    assert!(
        out.status.success(),
        "from_bytes.py {dtype} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join(format!("kgen_{}.gguf", dtype.tag()))
}

pub fn files() -> HashMap<String, GgufFile> {
    ["model.gguf", "align64.gguf", "small.gguf"]
        .into_iter()
        .map(|f| (f.to_string(), open(f)))
        .collect()
}

/// The tensor as a matrix, without validation (the "special" tensors have
/// non-finite scales, which `matrix()` rightly refuses).
pub fn raw_matrix(g: &GgufFile, e: &Entry) -> GgmlMatrix {
    let info = g.tensor_info(&e.name).unwrap();
    assert_eq!(info.dims, [e.k as u64, e.n as u64], "{}", e.name);
    assert_eq!(info.type_id, e.dtype.id(), "{}", e.name);
    GgmlMatrix {
        k: e.k,
        n: e.n,
        dtype: e.dtype,
        data: g.tensor_bytes(&e.name).unwrap().to_vec(),
    }
}

pub fn assert_bits_eq(what: &str, ours: &[f32], theirs: &[f32], n: usize) {
    assert_eq!(ours.len(), theirs.len(), "{what}");
    let bad: Vec<String> = ours
        .iter()
        .zip(theirs)
        .enumerate()
        .filter(|(_, (a, b))| a.to_bits() != b.to_bits())
        .take(5)
        .map(|(x, (a, b))| {
            format!(
                "W[{}][{}] kgen {a:e} ({:#x}) gguf-py {b:e} ({:#x})",
                x / n,
                x % n,
                a.to_bits(),
                b.to_bits()
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: dequantized values differ:\n{}",
        bad.join("\n")
    );
}

/// What the int8 layout's f16 sub-block scales can move each output of
/// `x W` by: `sum_i |x_i| |level_i| |f16(s_i) - s_i|` per column, with `s_i`
/// the f32 scale `sub_scale` forms for `W_ij`'s sub-block. Zero for formats
/// whose scales are f16 fields; for the lattice i-quants, whose sub-block
/// scales are `d (2 ls + 1) / 8` and smaller than `d`, it matters when `d`
/// is near f16's subnormals.
pub fn f16_scale_slack(m: &GgmlMatrix, x: &[f32]) -> Vec<f64> {
    let f = m.dtype.format();
    let Some(r) = f.int8 else {
        return vec![0.0; m.n];
    };
    let part = 32 / r.scales_per_block;
    (0..m.n)
        .map(|j| {
            let mut slack = 0f64;
            for b in 0..m.k / f.block {
                let blk = m.block(j, b);
                for s in 0..f.block / 32 {
                    let levels = (r.block_levels)(blk, s);
                    for (i, &l) in levels.iter().enumerate() {
                        let (d, _) = (r.sub_scale)(blk, s * r.scales_per_block + i / part);
                        let err = (half::f16::from_f32(d).to_f32() as f64 - d as f64).abs();
                        let xi = x[b * f.block + 32 * s + i].abs() as f64;
                        slack += xi * f.level_value(l).abs() as f64 * err;
                    }
                }
            }
            slack
        })
        .collect()
}

/// Checks an int8 kernel's `y = x W` (one row) against numpy's float32
/// `x @ deq.T` of gguf-py's N x K dequantized weights `deq_nk`. The kernels
/// quantize x per 32-block (Q8_0 arithmetic), so the tolerance is that
/// rounding's worst case, sum over blocks of d_x / 2 * sum |W_ij|, plus the
/// f32 summation bound K * 2^-23 * sum |x_i W_ij|, plus `slack[j]` where
/// given (the f16 scales: [`f16_scale_slack`]). Returns the outputs it
/// checked, for checks of their own.
pub fn assert_gemv_near_numpy(
    what: &str,
    qm: &kgen_runtime::Matrix,
    x: &[f32],
    deq_nk: &[f32],
    y_np: &[f32],
    slack: &[f64],
) -> Vec<f32> {
    let (k, n) = (x.len(), y_np.len());
    assert_eq!((qm.k(), qm.n(), deq_nk.len()), (k, n, k * n), "{what}");
    let mut y = vec![0f32; n];
    qm.gemv(x, &mut y)
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    for j in 0..n {
        let (mut act, mut mag) = (0f64, 0f64);
        for b in 0..k / 32 {
            let xs = &x[b * 32..b * 32 + 32];
            let dx = xs.iter().fold(0f32, |a, v| a.max(v.abs())) as f64 / 127.0;
            let w = |i: usize| deq_nk[j * k + b * 32 + i] as f64;
            act += dx / 2.0 * (0..32).map(|i| w(i).abs()).sum::<f64>();
            mag += (0..32).map(|i| (xs[i] as f64 * w(i)).abs()).sum::<f64>();
        }
        let tol = act + k as f64 * f32::EPSILON as f64 * mag + slack.get(j).unwrap_or(&0.0) + 1e-30;
        let diff = (y[j] as f64 - y_np[j] as f64).abs();
        assert!(
            diff <= tol,
            "{what} ({}) y[{j}]: kgen {} numpy {} (diff {diff:e} > tol {tol:e})",
            qm.gemv_kernel().name,
            y[j],
            y_np[j]
        );
    }
    y
}
