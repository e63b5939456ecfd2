//! Mixture-of-experts stacks: 3-D GGUF tensors (`dims = [k, n, experts]`)
//! written by gguf-py's `GGUFWriter` from kgen's own blocks
//! (`tests/data/from_bytes.py`), read back one expert at a time: each
//! expert's bytes are the blocks kgen wrote for it, its dequantized weights
//! are gguf-py's bit for bit, and its GEMV (through `Model::experts` and
//! through `Experts::gemv_selected`, which quantizes the activation once)
//! matches numpy's product with gguf-py's weights. See `gguf_py/mod.rs` for
//! what the scripts need.

mod common;
mod gguf_py;

use gguf_py::{assert_bits_eq, assert_gemv_near_numpy, from_bytes, read_f32};
use kgen::format::ggml::{GgmlMatrix, GgmlType};
use kgen::format::Rng;
use kgen_runtime::{Matrix, Model, Pool};

/// The expert's slice of a dump of `experts` matrices of `len` values each.
fn slice(v: &[f32], e: usize, len: usize) -> &[f32] {
    &v[e * len..(e + 1) * len]
}

#[test]
fn expert_stacks_written_by_gguf_py_load_and_match_numpy() {
    // The writer script's dependencies, installed once if missing.
    gguf_py::data_dir();
    let types = [
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q5_K,
        GgmlType::Q2_K,
    ];
    // A stack wider than a micro tile and one with a ragged N.
    let shapes = [(256usize, 40usize, 3usize), (512, 7, 2)];
    let mut checked = 0;
    for dtype in types {
        if !common::i8_format_built(dtype.tag()) {
            continue;
        }
        let dir = tempfile::Builder::new()
            .prefix("experts-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let mut list = String::new();
        let mut stacks = Vec::new();
        for (s, &(k, n, experts)) in shapes.iter().enumerate() {
            let name = format!("blk.{s}.ffn_up_exps.weight");
            let mut rng = Rng::new(s as u64 + 7 * dtype.id() as u64);
            let mats: Vec<GgmlMatrix> = (0..experts)
                .map(|_| GgmlMatrix::quantize(&rng.vec_f32(k * n), k, n, dtype))
                .collect();
            let bytes: Vec<u8> = mats.iter().flat_map(|m| m.data.iter().copied()).collect();
            std::fs::write(dir.path().join(format!("{name}.bin")), bytes).unwrap();
            let x = rng.vec_f32(k);
            let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            std::fs::write(dir.path().join(format!("{name}.x")), xb).unwrap();
            list += &format!("{name} {k} {n} {experts}\n");
            stacks.push((name, k, n, mats, x));
        }
        std::fs::write(dir.path().join("list.txt"), list).unwrap();
        let path = from_bytes(dir.path(), dtype);

        let model = Model::open(&path).unwrap();
        for (name, k, n, mats, x) in &stacks {
            let (k, n, experts) = (*k, *n, mats.len());
            let info = model.file().tensor_info(name).unwrap();
            assert_eq!(info.dims, [k as u64, n as u64, experts as u64], "{name}");
            assert_eq!(info.experts(), Some(experts as u64));
            let e = model.matrix(name).unwrap_err().to_string();
            assert!(e.contains(&format!("a stack of {experts} experts")), "{e}");

            let deq = read_f32(&dir.path().join(format!("{name}.deq")));
            let y_np = read_f32(&dir.path().join(format!("{name}.y")));
            let stack = model.experts(name).unwrap();
            assert_eq!((stack.len(), stack.k(), stack.n()), (experts, k, n));
            for (e, m) in mats.iter().enumerate() {
                let what = format!("{dtype} {name} expert {e}");
                // Where gguf-py put expert e is where kgen reads it.
                let read = model.file().expert(name, e).unwrap();
                assert!(read.data == m.data, "{what}: not the bytes kgen wrote");
                let w_kn = {
                    let nk = slice(&deq, e, k * n);
                    let mut kn = vec![0f32; k * n];
                    for j in 0..n {
                        for i in 0..k {
                            kn[i * n + j] = nk[j * k + i];
                        }
                    }
                    kn
                };
                assert_bits_eq(&what, &read.dequantize(), &w_kn, n);
                let qm = stack.get(e).unwrap();
                let y = assert_gemv_near_numpy(
                    &what,
                    qm,
                    x,
                    slice(&deq, e, k * n),
                    slice(&y_np, e, n),
                    &[],
                );
                // The stack's expert is the matrix its blocks make alone.
                let alone = Matrix::from_ggml(m).unwrap();
                let mut y_alone = vec![0f32; n];
                alone.gemv(x, &mut y_alone).unwrap();
                assert_eq!(y, y_alone, "{what}");
                checked += 1;
            }

            // Routed: the activation quantized once for the picked experts
            // (one picked twice), each row as that expert's own GEMV.
            let picked: Vec<usize> = [experts - 1, 0, experts - 1].into();
            let mut y = vec![f32::NAN; picked.len() * n];
            stack.gemv_selected(&picked, x, &mut y).unwrap();
            for (row, &e) in picked.iter().enumerate() {
                let mut want = vec![0f32; n];
                stack.get(e).unwrap().gemv(x, &mut want).unwrap();
                assert_eq!(&y[row * n..(row + 1) * n], &want[..], "{name} row {row}");
            }
        }

        // All of it on the pool: the stacks, counted once per tensor and
        // once per expert.
        let all = model.load_all(&Pool::new(2)).unwrap();
        assert!(all.matrices.is_empty() && all.unsupported.is_empty());
        assert_eq!(all.experts.len(), stacks.len());
        let t = &all.types[0];
        assert_eq!((all.types.len(), t.count, t.matrices), (1, 2, 5), "{t:?}");
        for (name, _, n, mats, x) in &stacks {
            let loaded = &all.experts[name];
            for (e, m) in mats.iter().enumerate() {
                let (mut a, mut b) = (vec![0f32; *n], vec![0f32; *n]);
                loaded.get(e).unwrap().gemv(x, &mut a).unwrap();
                Matrix::from_ggml(m).unwrap().gemv(x, &mut b).unwrap();
                assert_eq!(a, b, "{dtype} {name} expert {e} from load_all");
            }
        }
    }
    assert!(checked >= 10, "only {checked} experts checked");
}
