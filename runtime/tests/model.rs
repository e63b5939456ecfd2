//! The model-level API: a GGUF file opened mapped, its tensors listed, one
//! loaded alone, all 2-D quantized ones loaded on the pool.

mod common;

use common::i8_format_built;
use kgen::format::ggml::{gguf_image_raw, GgmlMatrix, GgmlType};
use kgen::format::rng::Rng;
use kgen_runtime::{Error, Matrix, Model, Pool};

fn quantized(k: usize, n: usize, t: GgmlType, seed: u64) -> GgmlMatrix {
    GgmlMatrix::quantize(&Rng::new(seed).vec_f32(k * n), k, n, t)
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
    // An IQ2_XXS tensor (type 16), which no kernel runs: 512 values, 132
    // bytes.
    let k_quant = [0u8; 132];
    fn raw<'a>(name: &'a str, m: &'a GgmlMatrix) -> (&'a str, u32, [usize; 2], &'a [u8]) {
        (name, m.dtype.id(), [m.k, m.n], m.data.as_slice())
    }
    let image = gguf_image_raw(&[
        raw("blk.0.a", &a),
        raw("blk.0.b", &b),
        ("norm", GgmlType::F32.id(), [32, 2], &[0u8; 32 * 2 * 4]),
        ("blk.0.kq", 16, [256, 2], &k_quant),
    ]);
    std::fs::write(&path, image).unwrap();

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
            ("blk.0.kq".into(), "IQ2_XXS".into(), vec![256, 2]),
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
    assert!(e.to_string().contains("IQ2_XXS"), "{e}");
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
