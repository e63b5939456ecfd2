//! kgen's GGML block codecs against llama.cpp's gguf-py, on the tensors
//! `tests/data/write_gguf.py` writes: dequantization agrees with gguf-py bit
//! for bit for every format, quantization for every format gguf-py quantizes,
//! and `x W` from the dequantized weights agrees with numpy. See `gguf_py/mod.rs` for what the script
//! writes and what it needs.

mod gguf_py;

use gguf_py::{assert_bits_eq, files, manifest, raw_matrix, read_f32};
use kgen::format::ggml::{GgmlMatrix, GgmlType};
use kgen_runtime::{Family, Matrix, Registry};
use std::collections::HashMap;

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
            // Loaded for a kernel, the shape alone is checked first and the
            // repack finds the bad scale as it reads the blocks: the same
            // error, naming file and tensor.
            // Without a kernel for it (the f32 family runs no GGUF type) the
            // blocks are still checked: corrupt, not unsupported.
            let path = gguf_py::file(&e.file);
            let f32_only = Registry::builtin().with_family(Some(Family::F32));
            for registry in [Registry::builtin(), &f32_only] {
                match Matrix::from_gguf_with(registry, &path, &e.name).map(|_| ()) {
                    Err(kgen_runtime::Error::Load(got)) => assert_eq!(got, err),
                    other => panic!("{}: {other:?}", e.name),
                }
            }
        } else {
            let mm = g.matrix(&e.name).unwrap_or_else(|err| panic!("{err}"));
            assert_eq!(mm, m);
        }
        *seen.entry(e.dtype).or_insert(0) += 1;
    }
    // kgen's own formats are in no GGUF file.
    for t in GgmlType::all().filter(|t| t.is_gguf()) {
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
        if e.raw {
            // Raw blocks (gguf-py cannot quantize IQ4_NL, IQ4_XS or the K-quants;
            // gguf_kgen_bytes.rs checks kgen's): the file holds them.
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
