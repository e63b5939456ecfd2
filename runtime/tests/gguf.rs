//! GGUF reading and GGML block formats against llama.cpp's gguf-py.
//!
//! `tests/data/write_gguf.py` writes GGUF files with `gguf.GGUFWriter`,
//! quantizing with `gguf.quants.quantize`, and dumps the original weights,
//! gguf-py's encoded bytes and dequantized weights and numpy's `x @ W`. The
//! tests check that kgen's dequantization and quantization agree with gguf-py
//! bit for bit, and that corrupt files are errors, never panics.
//!
//! gguf-py cannot quantize IQ4_NL: the script writes raw IQ4_NL blocks
//! (which gguf-py dequantizes), and `tests/data/iq4_nl_from_bytes.py` takes
//! kgen's own IQ4_NL bytes through gguf-py's writer and dequantizer.
//!
//! Needs `python3`; if `gguf` or `numpy` are missing the tests try
//! `pip install --quiet gguf numpy` once and fail loudly otherwise.

mod common;

use kgen::format::ggml::{GgmlMatrix, GgmlType};
use kgen_runtime::gguf::{GgufFile, MetaArray, MetaValue};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const PYTHON: &str = "python3";

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
    eprintln!("python3 lacks gguf/numpy: running pip install --quiet gguf numpy");
    let st = Command::new(PYTHON)
        .args(["-m", "pip", "install", "--quiet", "gguf", "numpy"])
        .status()
        .map_err(|e| format!("cannot run pip ({e})"))?;
    if python_has_deps()? {
        Ok(())
    } else {
        Err(format!("pip install gguf numpy failed ({st})"))
    }
}

/// The directory the writer script filled (written once per test process).
fn data_dir() -> &'static Path {
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

fn file(name: &str) -> PathBuf {
    data_dir().join(name)
}

fn open(name: &str) -> GgufFile {
    let p = file(name);
    GgufFile::open(&p).unwrap_or_else(|e| panic!("{e}"))
}

fn read_f32(path: &Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(b.len() % 4, 0);
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

struct Entry {
    file: String,
    name: String,
    dtype: GgmlType,
    k: usize,
    n: usize,
    matmul: bool,
}

impl Entry {
    fn data(&self, ext: &str) -> PathBuf {
        file(&format!("{}.{ext}", self.name))
    }

    /// An N x K dump as K x N (W[i][j] = row j, element i).
    fn w(&self, ext: &str) -> Vec<f32> {
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

fn manifest() -> Vec<Entry> {
    let text = std::fs::read_to_string(file("manifest.txt")).unwrap();
    let v: Vec<Entry> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 6, "manifest line {l:?}");
            Entry {
                file: f[0].to_string(),
                name: f[1].to_string(),
                dtype: GgmlType::all()
                    .find(|t| t.name() == f[2])
                    .unwrap_or_else(|| panic!("type {}", f[2])),
                k: f[3].parse().unwrap(),
                n: f[4].parse().unwrap(),
                matmul: f[5] == "matmul",
            }
        })
        .collect();
    assert!(v.len() >= 30, "manifest has {} entries", v.len());
    v
}

fn files() -> HashMap<String, GgufFile> {
    ["model.gguf", "align64.gguf", "small.gguf"]
        .into_iter()
        .map(|f| (f.to_string(), open(f)))
        .collect()
}

/// The tensor as a matrix, without validation (the "special" tensors have
/// non-finite scales, which `matrix()` rightly refuses).
fn raw_matrix(g: &GgufFile, e: &Entry) -> GgmlMatrix {
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

fn assert_bits_eq(what: &str, ours: &[f32], theirs: &[f32], n: usize) {
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

#[test]
fn dequantize_matches_gguf_py_bit_for_bit() {
    let files = files();
    let mut seen = HashMap::new();
    for e in manifest() {
        let g = &files[&e.file];
        let m = raw_matrix(g, &e);
        let what = format!("{} {} {}x{}", e.name, e.dtype, e.k, e.n);
        assert_bits_eq(&what, &m.dequantize(), &e.w("deq"), e.n);
        if e.name.starts_with("special.") {
            let err = g.matrix(&e.name).unwrap_err().to_string();
            assert!(err.contains("not finite") && err.contains(&e.name), "{err}");
        } else {
            let mm = g.matrix(&e.name).unwrap_or_else(|err| panic!("{err}"));
            assert_eq!(mm, m);
        }
        *seen.entry(e.dtype).or_insert(0) += 1;
    }
    for t in GgmlType::all() {
        assert!(
            seen.get(&t).copied().unwrap_or(0) >= 3,
            "too few {t} tensors: {seen:?}"
        );
    }
}

#[test]
fn quantize_matches_gguf_py_bytes() {
    let files = files();
    for e in manifest() {
        let theirs = std::fs::read(e.data("q")).unwrap();
        if e.dtype == GgmlType::IQ4_NL {
            // Raw blocks (gguf-py has no IQ4_NL quantizer): the file holds them.
            assert_eq!(files[&e.file].tensor_bytes(&e.name).unwrap(), &theirs[..]);
            continue;
        }
        let w = e.w("orig");
        let ours = GgmlMatrix::quantize(&w, e.k, e.n, e.dtype);
        assert_eq!(ours.data.len(), theirs.len(), "{}", e.name);
        if let Some(x) = ours.data.iter().zip(&theirs).position(|(a, b)| a != b) {
            let bb = e.dtype.block_bytes();
            let (row, blk) = (x / ours.row_bytes(), (x % ours.row_bytes()) / bb);
            let s = x - x % bb;
            panic!(
                "{} {}: byte {x} (row {row} block {blk}) differs\n kgen    {:02x?}\n gguf-py {:02x?}",
                e.name,
                e.dtype,
                &ours.data[s..s + bb],
                &theirs[s..s + bb]
            );
        }
        // The file holds the same bytes.
        assert_eq!(files[&e.file].tensor_bytes(&e.name).unwrap(), &theirs[..]);
        if e.dtype == GgmlType::Q4_0 {
            assert_eq!(GgmlMatrix::quantize_q4_0(&w, e.k, e.n), ours);
        }
        if e.dtype == GgmlType::Q8_0 {
            assert_eq!(GgmlMatrix::quantize_q8_0(&w, e.k, e.n), ours);
        }
    }
}

/// y = x W from kgen's dequantized weights, accumulated in f64, against
/// numpy's float32 `x @ deq.T` (BLAS sgemv). Tolerance: the worst-case f32
/// summation error bound K * 2^-23 * sum |x_i W_ij| (twice the usual
/// gamma_K), which also covers numpy's rounding of each product.
#[test]
fn matmul_matches_numpy() {
    let files = files();
    let mut checked = 0;
    for e in manifest().into_iter().filter(|e| e.matmul) {
        let m = files[&e.file].matrix(&e.name).unwrap();
        let w = m.dequantize();
        let x = read_f32(&e.data("x"));
        let y_np = read_f32(&e.data("y"));
        assert_eq!((x.len(), y_np.len()), (e.k, e.n));
        for j in 0..e.n {
            let (mut y, mut mag) = (0f64, 0f64);
            for i in 0..e.k {
                let p = x[i] as f64 * w[i * e.n + j] as f64;
                y += p;
                mag += p.abs();
            }
            let tol = e.k as f64 * f32::EPSILON as f64 * mag + 1e-37;
            let diff = (y - y_np[j] as f64).abs();
            assert!(
                diff <= tol,
                "{} y[{j}]: kgen {y} numpy {} (diff {diff:e} > tol {tol:e})",
                e.name,
                y_np[j]
            );
            checked += 1;
        }
    }
    assert!(checked > 100);
}

#[test]
fn metadata_is_parsed() {
    let g = open("model.gguf");
    assert_eq!(g.version(), 3);
    assert_eq!(g.alignment(), 32);
    assert_eq!(g.metadata_str("general.architecture"), Some("kgentest"));
    assert_eq!(g.metadata_str("general.name"), Some("kgen test model"));
    assert_eq!(g.metadata_u32("general.alignment"), None);
    assert_eq!(g.metadata_u32("test.u32"), Some(123456));
    assert_eq!(g.metadata_u32("test.u8"), Some(200));
    assert_eq!(g.metadata_u32("test.i32"), None);
    assert_eq!(g.metadata_u32("test.u64"), None);
    assert_eq!(g.metadata_str("test.u32"), None);
    assert_eq!(g.metadata_str("test.unicode"), Some("żółw 🐢"));
    assert_eq!(g.metadata("test.i8"), Some(&MetaValue::I8(-100)));
    assert_eq!(g.metadata("test.u16"), Some(&MetaValue::U16(65000)));
    assert_eq!(g.metadata("test.i16"), Some(&MetaValue::I16(-30000)));
    assert_eq!(g.metadata("test.u64"), Some(&MetaValue::U64((1 << 40) + 5)));
    assert_eq!(g.metadata("test.i64"), Some(&MetaValue::I64(-(1 << 40))));
    assert_eq!(g.metadata("test.f32"), Some(&MetaValue::F32(0.25)));
    assert_eq!(g.metadata("test.f64"), Some(&MetaValue::F64(-1.5)));
    assert_eq!(g.metadata("test.bool"), Some(&MetaValue::Bool(true)));
    let strs =
        |v: &[&str]| MetaValue::Array(MetaArray::Str(v.iter().map(|s| s.to_string()).collect()));
    let long = "x".repeat(300);
    assert_eq!(
        g.metadata("test.strings"),
        Some(&strs(&["a", "", "bc", "ünï", &long]))
    );
    assert_eq!(
        g.metadata("test.ints"),
        Some(&MetaValue::Array(MetaArray::I32(vec![1, -2, 3])))
    );
    assert_eq!(
        g.metadata("test.floats"),
        Some(&MetaValue::Array(MetaArray::F32(vec![0.5, 1.5])))
    );
    assert_eq!(
        g.metadata("test.nested"),
        Some(&MetaValue::Array(MetaArray::Array(vec![
            MetaArray::I32(vec![1, 2]),
            MetaArray::I32(vec![3]),
            MetaArray::Str(vec!["s".into(), "t".into()]),
        ])))
    );
    assert_eq!(
        g.metadata("test.u8s"),
        Some(&MetaValue::Array(MetaArray::U8(vec![1, 2, 255])))
    );
    assert_eq!(
        g.metadata("test.bools"),
        Some(&MetaValue::Array(MetaArray::Bool(vec![true, false, true])))
    );
    assert_eq!(
        g.metadata("test.u64s"),
        Some(&MetaValue::Array(MetaArray::U64(vec![1, 1 << 63])))
    );
    assert_eq!(
        g.metadata("test.f64s"),
        Some(&MetaValue::Array(MetaArray::F64(vec![1.25, -2.0])))
    );
    assert_eq!(g.metadata("missing"), None);
    // Tensor order is file order.
    let names = g.tensor_names();
    assert_eq!(names[0], "blk.k32.n1.q4_0");
    assert_eq!(names.last(), Some(&"cube.f32"));
    assert_eq!(names.len(), g.tensors().len());

    let a = open("align64.gguf");
    assert_eq!(a.alignment(), 64);
    assert_eq!(a.metadata_u32("general.alignment"), Some(64));
    for t in a.tensors() {
        assert_eq!(t.offset % 64, 0);
        a.matrix(&t.name).unwrap();
    }
}

#[test]
fn unsupported_tensors_are_refused() {
    let g = open("model.gguf");
    let path = file("model.gguf").display().to_string();
    for (name, want) in [
        ("unsupported.q4_1", "Q4_1"),
        ("unsupported.q6_k", "Q6_K"),
        ("norm.weight", "1 dimensions"),
        ("cube.f32", "3 dimensions"),
        ("no.such.tensor", "not in the file"),
    ] {
        let e = g.matrix(name).unwrap_err().to_string();
        assert!(
            e.contains(want) && e.contains(name) && e.contains(&path),
            "{name}: {e}"
        );
    }
    // Their bytes are still reachable (known sizes).
    assert_eq!(g.tensor_bytes("unsupported.q6_k").unwrap().len(), 2 * 210);
    assert_eq!(g.tensor_bytes("cube.f32").unwrap().len(), 2 * 3 * 32 * 4);
}

#[test]
fn versions() {
    let p = file("model.gguf");
    let bytes = std::fs::read(&p).unwrap();
    let v3 = GgufFile::from_bytes(bytes.clone(), &p).unwrap();
    let mut b = bytes.clone();
    b[4..8].copy_from_slice(&2u32.to_le_bytes());
    let v2 = GgufFile::from_bytes(b, &p).unwrap();
    assert_eq!(v2.version(), 2);
    for name in v3.tensor_names() {
        assert_eq!(v2.matrix(name).ok(), v3.matrix(name).ok(), "{name}");
    }
    for (v, want) in [
        (1u32, "version 1"),
        (4, "version 4"),
        (0, "version 0"),
        (3u32.swap_bytes(), "big-endian"),
    ] {
        let mut b = bytes.clone();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        let e = GgufFile::from_bytes(b, &p).unwrap_err().to_string();
        assert!(e.contains(want) && e.contains("model.gguf"), "{e}");
    }
}

#[test]
fn missing_file_is_an_error() {
    let p = data_dir().join("nope.gguf");
    let e = GgufFile::open(&p).unwrap_err().to_string();
    assert!(e.contains("nope.gguf"), "{e}");
}

/// End of the last tensor's data: every shorter prefix must be refused.
fn data_end(g: &GgufFile) -> usize {
    g.tensors()
        .iter()
        .map(|t| t.range.unwrap().1)
        .max()
        .unwrap()
}

#[test]
fn truncated_files_are_errors() {
    for (name, stride) in [("small.gguf", 1), ("align64.gguf", 1), ("model.gguf", 7)] {
        let p = file(name);
        let bytes = std::fs::read(&p).unwrap();
        let end = data_end(&GgufFile::from_bytes(bytes.clone(), &p).unwrap());
        assert!(end <= bytes.len());
        let mut cuts: Vec<usize> = (0..end).step_by(stride).collect();
        cuts.extend([end - 1, end - 2]);
        for cut in cuts {
            match GgufFile::from_bytes(bytes[..cut].to_vec(), &p) {
                Ok(_) => panic!(
                    "{name} truncated to {cut} of {} bytes was accepted",
                    bytes.len()
                ),
                Err(e) => assert!(e.0.contains(name), "{e}"),
            }
        }
        // Trailing padding after the last tensor is not needed.
        GgufFile::from_bytes(bytes[..end].to_vec(), &p).unwrap();
    }
    // Through the file system too.
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(file("small.gguf")).unwrap();
    for cut in [0, 3, 10, 24, 60, bytes.len() / 2] {
        let p = dir.path().join(format!("cut{cut}.gguf"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let e = GgufFile::open(&p).unwrap_err().to_string();
        assert!(e.contains(&format!("cut{cut}.gguf")), "{e}");
    }
}

#[test]
fn bad_magic_and_huge_counts() {
    let p = file("small.gguf");
    let bytes = std::fs::read(&p).unwrap();
    let patched = |at: usize, v: &[u8]| {
        let mut b = bytes.clone();
        b[at..at + v.len()].copy_from_slice(v);
        GgufFile::from_bytes(b, &p)
    };
    let e = patched(0, b"GGUG").unwrap_err().0;
    assert!(e.contains("not a GGUF file"), "{e}");
    for v in [u64::MAX, 1 << 40, 1 << 20, 100] {
        let e = patched(8, &v.to_le_bytes()).unwrap_err().0;
        assert!(e.contains("tensor count") || e.contains("truncated"), "{e}");
        let e = patched(16, &v.to_le_bytes()).unwrap_err().0;
        assert!(e.contains("metadata"), "{e}");
    }
}

/// Random byte changes in the header and data: Ok or Err, never a panic; and
/// whatever opens yields matrices that validate or errors.
#[test]
fn random_corruption_never_panics() {
    let mut s: u64 = 0x1234_5678_9abc_def1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for name in ["small.gguf", "align64.gguf"] {
        let p = file(name);
        let bytes = std::fs::read(&p).unwrap();
        let (mut ok, mut err) = (0, 0);
        for _ in 0..3000 {
            let mut b = bytes.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % b.len() as u64) as usize;
                b[at] = match next() % 4 {
                    0 => 0xff,
                    1 => 0,
                    2 => b[at] ^ (1 << (next() % 8)),
                    _ => next() as u8,
                };
            }
            match GgufFile::from_bytes(b, &p) {
                Ok(g) => {
                    ok += 1;
                    for t in g.tensor_names() {
                        if let Ok(m) = g.matrix(t) {
                            m.validate().unwrap();
                            assert_eq!(m.dequantize().len(), m.k * m.n);
                        }
                    }
                }
                Err(_) => err += 1,
            }
        }
        assert!(ok > 0 && err > 0, "{name}: {ok} ok {err} err");
    }
}

/// A hand-rolled GGUF image for corruptions gguf-py will not write.
struct Builder {
    version: u32,
    kv: Vec<u8>,
    n_kv: u64,
    ti: Vec<u8>,
    n_t: u64,
    align: usize,
    data: Vec<u8>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl Builder {
    fn new() -> Builder {
        Builder {
            version: 3,
            kv: vec![],
            n_kv: 0,
            ti: vec![],
            n_t: 0,
            align: 32,
            data: vec![],
        }
    }

    /// A key with a raw value: `ty` then `value` bytes.
    fn kv(mut self, key: &str, ty: u32, value: &[u8]) -> Builder {
        put_str(&mut self.kv, key);
        self.kv.extend_from_slice(&ty.to_le_bytes());
        self.kv.extend_from_slice(value);
        self.n_kv += 1;
        self
    }

    fn tensor(mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Builder {
        put_str(&mut self.ti, name);
        self.ti
            .extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            self.ti.extend_from_slice(&d.to_le_bytes());
        }
        self.ti.extend_from_slice(&ty.to_le_bytes());
        self.ti.extend_from_slice(&offset.to_le_bytes());
        self.n_t += 1;
        self
    }

    fn data(mut self, len: usize) -> Builder {
        self.data = (0..len).map(|i| (i % 7) as u8 * 0x11).collect();
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.n_t.to_le_bytes());
        b.extend_from_slice(&self.n_kv.to_le_bytes());
        b.extend_from_slice(&self.kv);
        b.extend_from_slice(&self.ti);
        b.resize(b.len().next_multiple_of(self.align), 0);
        b.extend_from_slice(&self.data);
        b
    }

    fn open(&self) -> Result<GgufFile, String> {
        GgufFile::from_bytes(self.bytes(), Path::new("crafted.gguf")).map_err(|e| {
            assert!(e.0.starts_with("crafted.gguf: "), "{e}");
            e.0
        })
    }
}

fn err_contains(r: Result<GgufFile, String>, want: &str) {
    match r {
        Ok(g) => panic!("accepted, wanted an error with {want:?}: {g:?}"),
        Err(e) => assert!(e.contains(want), "wanted {want:?}, got {e}"),
    }
}

#[test]
fn crafted_files() {
    // A valid baseline: one 64 x 2 Q8_0 matrix with a finite scale pattern.
    let q8 = GgmlMatrix::quantize_q8_0(
        &(0..128).map(|x| x as f32 - 60.0).collect::<Vec<_>>(),
        64,
        2,
    );
    let mut base = Builder::new()
        .kv("general.architecture", 8, &{
            let mut v = vec![];
            put_str(&mut v, "crafted");
            v
        })
        .tensor("w", &[64, 2], 8, 0);
    base.data = q8.data.clone();
    let g = base.open().unwrap();
    assert_eq!(g.metadata_str("general.architecture"), Some("crafted"));
    assert_eq!(g.matrix("w").unwrap(), q8);

    // Tensor data past the end / offset past the end / misaligned.
    err_contains(
        Builder::new().tensor("w", &[64, 2], 8, 0).data(135).open(),
        "runs past the end",
    );
    err_contains(
        Builder::new()
            .tensor("w", &[32, 1], 0, 1 << 20)
            .data(128)
            .open(),
        "past the end",
    );
    err_contains(
        Builder::new()
            .tensor("w", &[32, 1], 0, u64::MAX - 31)
            .data(128)
            .open(),
        "past the end",
    );
    err_contains(
        Builder::new().tensor("w", &[8, 1], 0, 4).data(64).open(),
        "not a multiple of the alignment",
    );
    // Unknown type: the file opens, the matrix is refused by id.
    let g = Builder::new()
        .tensor("w", &[32, 1], 77, 0)
        .data(64)
        .open()
        .unwrap();
    let e = g.matrix("w").unwrap_err().0;
    assert!(
        e.contains("unknown type id 77") && e.contains("\"w\""),
        "{e}"
    );
    assert!(g.tensor_bytes("w").is_err());
    // Dims: overflow, out of i64, too many, ragged quantized rows.
    err_contains(
        Builder::new()
            .tensor("w", &[1 << 32, 1 << 32], 0, 0)
            .data(64)
            .open(),
        "overflow",
    );
    err_contains(
        Builder::new()
            .tensor("w", &[u64::MAX, 1], 0, 0)
            .data(64)
            .open(),
        "out of range",
    );
    err_contains(
        Builder::new()
            .tensor("w", &[1, 1, 1, 1, 1], 0, 0)
            .data(64)
            .open(),
        "5 dimensions",
    );
    err_contains(
        Builder::new().tensor("w", &[48, 1], 2, 0).data(64).open(),
        "not a multiple of 32",
    );
    // Huge f32 tensor: size fits u64 but not the file.
    err_contains(
        Builder::new()
            .tensor("w", &[1 << 30, 1 << 30], 0, 0)
            .data(64)
            .open(),
        "past the end",
    );
    // Empty matrices open but are not matrices.
    let g = Builder::new().tensor("w", &[0, 4], 0, 0).open().unwrap();
    assert!(g.matrix("w").unwrap_err().0.contains("empty"));
    // Duplicates.
    err_contains(
        Builder::new()
            .tensor("w", &[8, 1], 0, 0)
            .tensor("w", &[8, 1], 0, 32)
            .data(64)
            .open(),
        "duplicate tensor",
    );
    err_contains(
        Builder::new()
            .kv("a", 4, &[1, 0, 0, 0])
            .kv("a", 4, &[2, 0, 0, 0])
            .open(),
        "duplicate metadata key",
    );
    // Alignment: zero, not a power of two, wrong type; a valid custom one.
    err_contains(
        Builder::new()
            .kv("general.alignment", 4, &0u32.to_le_bytes())
            .open(),
        "power of two",
    );
    err_contains(
        Builder::new()
            .kv("general.alignment", 4, &48u32.to_le_bytes())
            .open(),
        "power of two",
    );
    err_contains(
        Builder::new()
            .kv("general.alignment", 6, &1.0f32.to_le_bytes())
            .open(),
        "general.alignment",
    );
    let mut b = Builder::new()
        .kv("general.alignment", 4, &256u32.to_le_bytes())
        .tensor("w", &[64, 2], 8, 0);
    b.align = 256;
    b.data = q8.data.clone();
    assert_eq!(b.open().unwrap().matrix("w").unwrap(), q8);
    b.align = 32; // data where a reader ignoring the alignment would look
    assert!(b.open().is_err());
    // Bad value types, lengths and nesting.
    err_contains(
        Builder::new().kv("a", 13, &[0; 16]).open(),
        "unknown value type 13",
    );
    err_contains(
        Builder::new().kv("a", 8, &(u64::MAX).to_le_bytes()).open(),
        "impossible",
    );
    err_contains(
        Builder::new()
            .kv("a", 8, &(1u64 << 40).to_le_bytes())
            .open(),
        "impossible",
    );
    let arr = |ty: u32, len: u64| [ty.to_le_bytes().as_slice(), &len.to_le_bytes()].concat();
    err_contains(
        Builder::new().kv("a", 9, &arr(99, 1)).open(),
        "unknown array element type 99",
    );
    err_contains(
        Builder::new().kv("a", 9, &arr(4, u64::MAX / 2)).open(),
        "impossible",
    );
    err_contains(
        Builder::new().kv("a", 9, &arr(8, 1 << 50)).open(),
        "impossible",
    );
    err_contains(
        Builder::new().kv("a", 9, &arr(9, 1 << 61)).open(),
        "impossible",
    );
    let mut deep = Vec::new();
    for _ in 0..100_000 {
        deep.extend_from_slice(&arr(9, 1));
    }
    deep.extend_from_slice(&arr(4, 0));
    err_contains(Builder::new().kv("a", 9, &deep).open(), "nested deeper");
    let mut ok_nest = Vec::new();
    for _ in 0..3 {
        ok_nest.extend_from_slice(&arr(9, 1));
    }
    ok_nest.extend_from_slice(&arr(4, 1));
    ok_nest.extend_from_slice(&7u32.to_le_bytes());
    let g = Builder::new().kv("a", 9, &ok_nest).open().unwrap();
    assert!(matches!(
        g.metadata("a"),
        Some(MetaValue::Array(MetaArray::Array(_)))
    ));
    // Strings need not be UTF-8.
    let g = Builder::new()
        .kv("a", 8, &[2, 0, 0, 0, 0, 0, 0, 0, 0xff, b'x'])
        .open()
        .unwrap();
    assert_eq!(g.metadata_str("a"), Some("\u{fffd}x"));
    // Counts larger than the file can hold.
    let mut b = Builder::new().tensor("w", &[8, 1], 0, 0).data(32);
    b.n_t = 1 << 60;
    err_contains(b.open(), "tensor count");
    let mut b = Builder::new().kv("a", 4, &[0; 4]);
    b.n_kv = 2;
    b.align = 1; // no zero padding that would read as a second (empty) pair
    err_contains(b.open(), "metadata count");
    // The data section (after alignment padding) beyond the end of a file
    // that declares tensors, even an empty one.
    let bytes = Builder::new().tensor("w", &[0, 1], 0, 0).bytes();
    assert_eq!(bytes.len(), 96); // 65 bytes of header, padded
    let e = GgufFile::from_bytes(bytes[..65].to_vec(), Path::new("x.gguf"))
        .unwrap_err()
        .0;
    assert!(e.contains("data section"), "{e}");
    GgufFile::from_bytes(bytes, Path::new("x.gguf")).unwrap();
}

/// End to end: Q4_0 / Q5_0 / Q8_0 tensors written by gguf-py (and raw
/// IQ4_NL ones), loaded and repacked by
/// `Matrix::from_gguf`, multiplied by the int8 kernels, against numpy's
/// float32 `x @ deq.T` of gguf-py's dequantized weights. The kernels quantize
/// x per 32-block (Q8_0 arithmetic), so the stated tolerance is that
/// rounding's worst case, sum over blocks of d_x / 2 * sum |W_ij|, plus the
/// f32 summation bound used above.
#[test]
fn int8_kernels_match_numpy_on_gguf_py_files() {
    let mut checked = 0;
    for e in manifest().into_iter().filter(|e| {
        e.matmul
            && ((e.dtype == GgmlType::Q4_0 || e.dtype == GgmlType::Q8_0)
                || (e.dtype == GgmlType::IQ4_NL && common::i8_format_built("iq4_nl"))
                || (e.dtype == GgmlType::Q5_0 && common::i8_format_built("q5_0")))
    }) {
        let qm = kgen_runtime::Matrix::from_gguf(file(&e.file), &e.name).unwrap();
        let deq = read_f32(&e.data("deq"));
        let x = read_f32(&e.data("x"));
        let y_np = read_f32(&e.data("y"));
        let mut y = vec![0f32; e.n];
        qm.gemv(&x, &mut y).unwrap();
        for j in 0..e.n {
            let (mut act, mut mag) = (0f64, 0f64);
            for b in 0..e.k / 32 {
                let xs = &x[b * 32..b * 32 + 32];
                let dx = xs.iter().fold(0f32, |a, v| a.max(v.abs())) as f64 / 127.0;
                let wsum: f64 = (0..32)
                    .map(|i| (deq[j * e.k + b * 32 + i] as f64).abs())
                    .sum();
                act += dx / 2.0 * wsum;
                mag += (0..32)
                    .map(|i| (xs[i] as f64 * deq[j * e.k + b * 32 + i] as f64).abs())
                    .sum::<f64>();
            }
            let tol = act + e.k as f64 * f32::EPSILON as f64 * mag + 1e-30;
            let diff = (y[j] as f64 - y_np[j] as f64).abs();
            assert!(
                diff <= tol,
                "{} ({}) y[{j}]: kgen {} numpy {} (diff {diff:e} > tol {tol:e})",
                e.name,
                qm.gemv_kernel().name,
                y[j],
                y_np[j]
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} outputs checked");
}

/// Q5_0 end to end on every int8 ISA this CPU runs: gguf-py's quantized
/// tensors (random rows, the edge rows, K up to 256, N up to 40), read from
/// its GGUF files, dequantized bit for bit as gguf-py (asserted above),
/// repacked and multiplied by the GEMV and GEMM kernels for 1..=9 rows,
/// against the exact oracle on the same quantized activations; and the
/// default `Matrix::from_gguf` path picks the best ISA here.
#[test]
fn q5_0_gguf_py_tensors_on_every_isa_match_the_oracle() {
    if !common::i8_format_built("q5_0") {
        return;
    }
    let files = files();
    let reg = kgen_runtime::Registry::builtin();
    let isas: Vec<&str> = reg
        .runnable(
            kgen_runtime::WeightFormat::Ggml(GgmlType::Q5_0),
            kgen_runtime::Op::Gemv,
        )
        .iter()
        .map(|e| e.isa)
        .collect();
    let mut checked = 0;
    for e in manifest()
        .into_iter()
        .filter(|e| e.dtype == GgmlType::Q5_0 && !e.name.starts_with("special."))
    {
        let m = files[&e.file].matrix(&e.name).unwrap();
        assert_bits_eq(&e.name, &m.dequantize(), &e.w("deq"), e.n);
        let best = kgen_runtime::Matrix::from_gguf(file(&e.file), &e.name).unwrap();
        assert_eq!(best.gemv_kernel().isa, isas[0]);
        for isa in &isas {
            let qm = kgen_runtime::Matrix::from_ggml_with(&reg.with_isa(Some(isa)), &m).unwrap();
            assert_eq!((qm.gemv_kernel().isa, qm.gemm_kernel().isa), (*isa, *isa));
            for rows in 1..=9 {
                let x = kgen::format::rng::Rng::new(rows as u64).vec_f32(rows * e.k);
                let mut y = vec![f32::NAN; rows * e.n];
                qm.gemm(&x, rows, &mut y).unwrap();
                let what = format!("{} {} rows {rows}", e.name, qm.gemm_kernel().name);
                common::check_i8(&m, &x, e.k, rows, &y, &what);
                checked += 1;
            }
        }
    }
    assert!(checked >= 9 * 10 * isas.len(), "only {checked} runs");
}

/// kgen's IQ4_NL quantizer on gguf-py's test weights (random rows with
/// outliers, and the edge rows: zeros, ties, subnormal and tiny values),
/// its bytes written into a GGUF file by gguf-py's `GGUFWriter` and
/// dequantized by gguf-py: kgen reads the file back, dequantizes bit for bit
/// as gguf-py, and its IQ4_NL kernels match numpy's `x @ deq.T` within the
/// bound of `int8_kernels_match_numpy_on_gguf_py_files`.
#[test]
fn iq4_nl_bytes_from_kgen_round_trip_through_gguf_py() {
    let dir = tempfile::Builder::new()
        .prefix("iq4nl-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let mut list = String::new();
    let mut mats = Vec::new();
    for e in manifest()
        .into_iter()
        .filter(|e| e.k % 32 == 0 && e.dtype != GgmlType::IQ4_NL && !e.name.starts_with("special."))
        .filter(|e| e.dtype == GgmlType::Q4_0 || e.name.starts_with("f32."))
    {
        let m = GgmlMatrix::quantize_iq4_nl(&e.w("orig"), e.k, e.n);
        m.validate()
            .unwrap_or_else(|err| panic!("{}: {err}", e.name));
        let name = format!("kgen.{}", e.name);
        std::fs::write(dir.path().join(format!("{name}.bin")), &m.data).unwrap();
        std::fs::copy(e.data("x"), dir.path().join(format!("{name}.x"))).unwrap();
        list += &format!("{name} {} {}\n", e.k, e.n);
        mats.push((name, m));
    }
    assert!(mats.len() >= 10, "{} matrices", mats.len());
    std::fs::write(dir.path().join("list.txt"), list).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/iq4_nl_from_bytes.py");
    let out = Command::new(PYTHON)
        .arg(&script)
        .arg(dir.path())
        .output()
        .unwrap_or_else(|err| panic!("cannot run {PYTHON}: {err}"));
    assert!(
        out.status.success(),
        "iq4_nl_from_bytes.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gguf_path = dir.path().join("kgen_iq4_nl.gguf");
    let g = GgufFile::open(&gguf_path).unwrap();
    let mut checked = 0;
    for (name, m) in &mats {
        let (k, n) = (m.k, m.n);
        let read = g.matrix(name).unwrap();
        assert_eq!(&read, m, "{name}");
        // gguf-py's dequantize is N x K.
        let nk = read_f32(&dir.path().join(format!("{name}.deq")));
        let mut theirs = vec![0f32; k * n];
        for j in 0..n {
            for i in 0..k {
                theirs[i * n + j] = nk[j * k + i];
            }
        }
        assert_bits_eq(name, &m.dequantize(), &theirs, n);
        if !common::i8_format_built("iq4_nl") {
            continue;
        }
        let qm = kgen_runtime::Matrix::from_gguf(&gguf_path, name).unwrap();
        assert!(qm.gemv_kernel().name.starts_with("iq4_nl_gemv_"));
        let x = read_f32(&dir.path().join(format!("{name}.x")));
        let y_np = read_f32(&dir.path().join(format!("{name}.y")));
        let mut y = vec![0f32; n];
        qm.gemv(&x, &mut y).unwrap();
        for j in 0..n {
            let (mut act, mut mag) = (0f64, 0f64);
            for b in 0..k / 32 {
                let xs = &x[b * 32..b * 32 + 32];
                let dx = xs.iter().fold(0f32, |a, v| a.max(v.abs())) as f64 / 127.0;
                let w = |i: usize| nk[j * k + b * 32 + i] as f64;
                act += dx / 2.0 * (0..32).map(|i| w(i).abs()).sum::<f64>();
                mag += (0..32).map(|i| (xs[i] as f64 * w(i)).abs()).sum::<f64>();
            }
            let tol = act + k as f64 * f32::EPSILON as f64 * mag + 1e-30;
            let diff = (y[j] as f64 - y_np[j] as f64).abs();
            assert!(
                diff <= tol,
                "{name} ({}) y[{j}]: kgen {} numpy {} (diff {diff:e} > tol {tol:e})",
                qm.gemv_kernel().name,
                y[j],
                y_np[j]
            );
            checked += 1;
        }
    }
    assert!(
        checked > 100 || !common::i8_format_built("iq4_nl"),
        "only {checked} outputs checked"
    );
}

/// `Matrix::from_gguf` on every 2-D tensor gguf-py wrote: the quantized ones
/// run on the int8 family in their own format, the float ones (F32, F16) are
/// refused with an error naming the file, the tensor and the type.
#[test]
fn matrix_from_gguf_picks_the_int8_family_and_refuses_floats() {
    let (mut quantized, mut floats) = (0, 0);
    for e in manifest().into_iter().filter(|e| e.matmul) {
        if e.dtype == GgmlType::IQ4_NL && !common::i8_format_built("iq4_nl") {
            continue;
        }
        let r = kgen_runtime::Matrix::from_gguf(file(&e.file), &e.name);
        match kgen_runtime::WeightFormat::from_ggml(e.dtype) {
            Some(format) => {
                let m = r.unwrap_or_else(|err| panic!("{}: {err}", e.name));
                assert_eq!(m.family(), kgen_runtime::Family::Int8, "{}", e.name);
                assert_eq!((m.format(), m.k(), m.n()), (format, e.k, e.n));
                assert_eq!(m.kernel().format, format.to_string());
                quantized += 1;
            }
            None => {
                let err = r.unwrap_err();
                assert!(
                    matches!(err, kgen_runtime::Error::Unsupported(_)),
                    "{}: {err}",
                    e.name
                );
                let msg = err.to_string();
                assert!(
                    msg.contains(&e.name)
                        && msg.contains(e.dtype.name())
                        && msg.contains(&e.file)
                        && msg.contains("Matrix::from_f32"),
                    "{msg}"
                );
                floats += 1;
            }
        }
    }
    assert!(
        quantized > 0 && floats > 0,
        "{quantized} quantized, {floats} float tensors"
    );
}
