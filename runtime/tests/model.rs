//! The model-level API: a GGUF file opened mapped, its tensors listed, one
//! loaded alone, all 2-D quantized ones loaded on the pool.

mod common;

use common::{i8_format_built, write_gguf};
use kgen::format::ggml::{GgmlMatrix, GgmlType};
use kgen::format::rng::Rng;
use kgen_runtime::{Error, Matrix, Model, Pool};

fn quantized(k: usize, n: usize, t: GgmlType, seed: u64) -> GgmlMatrix {
    GgmlMatrix::quantize(&Rng::new(seed).vec_f32(k * n), k, n, t)
}

/// Rewrites the type id of tensor `name` in a GGUF file written by
/// `write_gguf` (name, n_dims = 2, two dims, then the type).
fn set_type(bytes: &mut [u8], name: &str, id: u32) {
    let at = bytes
        .windows(name.len())
        .position(|w| w == name.as_bytes())
        .expect("tensor name in the header")
        + name.len()
        + 4
        + 16;
    bytes[at..at + 4].copy_from_slice(&id.to_le_bytes());
}

#[test]
fn open_list_load_one_and_load_all() {
    assert!(i8_format_built("q4_0") && i8_format_built("q8_0"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let (a, b) = (
        quantized(64, 16, GgmlType::Q4_0, 1),
        quantized(96, 24, GgmlType::Q8_0, 2),
    );
    let norm = GgmlMatrix {
        k: 32,
        n: 2,
        dtype: GgmlType::F32,
        data: vec![0; 32 * 2 * 4],
    };
    // 512 values of Q8_0 (544 bytes) are more than 512 of Q4_K (288).
    let k_quant = quantized(256, 2, GgmlType::Q8_0, 3);
    write_gguf(
        &path,
        &[
            ("blk.0.a", &a),
            ("blk.0.b", &b),
            ("norm", &norm),
            ("blk.0.kq", &k_quant),
        ],
    );
    let mut bytes = std::fs::read(&path).unwrap();
    set_type(&mut bytes, "blk.0.kq", 12); // Q4_K
    std::fs::write(&path, &bytes).unwrap();

    let model = Model::open(&path).unwrap();
    let listed: Vec<(String, String, Vec<u64>)> = model
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), t.type_name(), t.dims.clone()))
        .collect();
    assert_eq!(
        listed,
        [
            ("blk.0.a".into(), "Q4_0".into(), vec![64, 16]),
            ("blk.0.b".into(), "Q8_0".into(), vec![96, 24]),
            ("norm".into(), "F32".into(), vec![32, 2]),
            ("blk.0.kq".into(), "Q4_K".into(), vec![256, 2]),
        ]
    );

    // One tensor, the same as Matrix::from_gguf gives.
    let one = model.matrix("blk.0.b").unwrap();
    let alone = Matrix::from_gguf(&path, "blk.0.b").unwrap();
    let x = Rng::new(4).vec_f32(96);
    let (mut y1, mut y2) = (vec![0.0; 24], vec![0.0; 24]);
    one.gemv(&x, &mut y1).unwrap();
    alone.gemv(&x, &mut y2).unwrap();
    assert_eq!(y1, y2);
    let e = model.matrix("blk.0.kq").unwrap_err();
    assert!(e.to_string().contains("Q4_K"), "{e}");
    assert!(matches!(model.matrix("nope"), Err(Error::Load(_))));

    // All of them: the two quantized matrices, the K-quant reported, the
    // float tensor left alone, after the release of every tensor's pages.
    let all = model.load_all(&Pool::new(2)).unwrap();
    let names: Vec<&str> = all.matrices.keys().map(String::as_str).collect();
    assert_eq!(names, ["blk.0.a", "blk.0.b"]);
    assert_eq!(all.unsupported.len(), 1);
    assert_eq!(all.unsupported[0].0, "blk.0.kq");
    let types: Vec<(&str, usize, usize)> = all
        .types
        .iter()
        .map(|t| (t.type_name.as_str(), t.count, t.bytes))
        .collect();
    assert_eq!(
        types,
        [("Q4_0", 1, a.data.len()), ("Q8_0", 1, b.data.len())]
    );
    assert!(
        all.types[0].kernel.starts_with("q4_0_gemv_"),
        "{:?}",
        all.types
    );
    let mut y3 = vec![0.0; 24];
    all.matrices["blk.0.b"].gemv(&x, &mut y3).unwrap();
    assert_eq!(y1, y3);
    // Released pages read back from the file.
    let again = model.matrix("blk.0.b").unwrap();
    again.gemv(&x, &mut y3).unwrap();
    assert_eq!(y1, y3);
}

#[test]
fn corrupt_and_missing_files_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    for bytes in [
        &b""[..],
        b"GGUF",
        b"GGUF\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff",
    ] {
        std::fs::write(&path, bytes).unwrap();
        let e = Model::open(&path).unwrap_err().to_string();
        assert!(e.contains("bad.gguf"), "{e}");
    }
    let e = Model::open(dir.path().join("missing.gguf"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.gguf"), "{e}");
}
