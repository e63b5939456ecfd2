//! Reading GGUF files gguf-py wrote: metadata of every value type, tensor
//! order and alignment, versions 2 and 3, and the tensors and versions kgen
//! refuses with an error naming the file. See `gguf_py/mod.rs` for what the
//! writer script needs.

mod gguf_py;

use gguf_py::{data_dir, file, open};
use kgen_runtime::gguf::{GgufFile, MetaArray, MetaValue};

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
        ("unsupported.q8_k", "Q8_K"),
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
    assert_eq!(g.tensor_bytes("unsupported.q8_k").unwrap().len(), 3 * 292);
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
