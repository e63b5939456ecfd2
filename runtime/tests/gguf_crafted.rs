//! Hand-rolled GGUF images for damage gguf-py will not write: data and
//! offsets past the end, bad dims, duplicates, bad alignment, impossible
//! lengths and counts, deep nesting. Each is refused with an error naming
//! the file and saying what is wrong, never a panic; the edge cases that are
//! valid still open. Needs no Python.

use kgen::format::ggml::GgmlMatrix;
use kgen_runtime::gguf::{GgufFile, MetaArray, MetaValue};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;

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

/// A valid 64 x 2 Q8_0 matrix with a finite scale pattern.
fn q8() -> GgmlMatrix {
    GgmlMatrix::quantize_q8_0(
        &(0..128).map(|x| x as f32 - 60.0).collect::<Vec<_>>(),
        64,
        2,
    )
}

/// An array value's header: element type and length.
fn arr(ty: u32, len: u64) -> Vec<u8> {
    [ty.to_le_bytes().as_slice(), &len.to_le_bytes()].concat()
}

#[test]
fn crafted_baseline_opens() {
    let q8 = q8();
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
}

#[test]
fn crafted_damage_is_refused() {
    let mut deep = Vec::new();
    for _ in 0..100_000 {
        deep.extend_from_slice(&arr(9, 1));
    }
    deep.extend_from_slice(&arr(4, 0));
    // (case, file, what its error says)
    let table: Vec<(&str, Builder, &str)> = vec![
        (
            "tensor data past the end",
            Builder::new().tensor("w", &[64, 2], 8, 0).data(135),
            "runs past the end",
        ),
        (
            "offset past the end",
            Builder::new().tensor("w", &[32, 1], 0, 1 << 20).data(128),
            "past the end",
        ),
        (
            "offset that overflows",
            Builder::new()
                .tensor("w", &[32, 1], 0, u64::MAX - 31)
                .data(128),
            "past the end",
        ),
        (
            "misaligned offset",
            Builder::new().tensor("w", &[8, 1], 0, 4).data(64),
            "not a multiple of the alignment",
        ),
        (
            "dims whose product overflows",
            Builder::new()
                .tensor("w", &[1 << 32, 1 << 32], 0, 0)
                .data(64),
            "overflow",
        ),
        (
            "dim out of i64",
            Builder::new().tensor("w", &[u64::MAX, 1], 0, 0).data(64),
            "out of range",
        ),
        (
            "too many dims",
            Builder::new().tensor("w", &[1, 1, 1, 1, 1], 0, 0).data(64),
            "5 dimensions",
        ),
        (
            "ragged quantized rows",
            Builder::new().tensor("w", &[48, 1], 2, 0).data(64),
            "not a multiple of 32",
        ),
        // The size fits u64 but not the file.
        (
            "huge f32 tensor",
            Builder::new()
                .tensor("w", &[1 << 30, 1 << 30], 0, 0)
                .data(64),
            "past the end",
        ),
        (
            "duplicate tensor",
            Builder::new()
                .tensor("w", &[8, 1], 0, 0)
                .tensor("w", &[8, 1], 0, 32)
                .data(64),
            "duplicate tensor",
        ),
        (
            "duplicate metadata key",
            Builder::new()
                .kv("a", 4, &[1, 0, 0, 0])
                .kv("a", 4, &[2, 0, 0, 0]),
            "duplicate metadata key",
        ),
        (
            "alignment zero",
            Builder::new().kv("general.alignment", 4, &0u32.to_le_bytes()),
            "power of two",
        ),
        (
            "alignment not a power of two",
            Builder::new().kv("general.alignment", 4, &48u32.to_le_bytes()),
            "power of two",
        ),
        (
            "alignment of the wrong type",
            Builder::new().kv("general.alignment", 6, &1.0f32.to_le_bytes()),
            "general.alignment",
        ),
        (
            "unknown value type",
            Builder::new().kv("a", 13, &[0; 16]),
            "unknown value type 13",
        ),
        (
            "string length u64::MAX",
            Builder::new().kv("a", 8, &(u64::MAX).to_le_bytes()),
            "impossible",
        ),
        (
            "string length past the file",
            Builder::new().kv("a", 8, &(1u64 << 40).to_le_bytes()),
            "impossible",
        ),
        (
            "unknown array element type",
            Builder::new().kv("a", 9, &arr(99, 1)),
            "unknown array element type 99",
        ),
        (
            "u32 array length past the file",
            Builder::new().kv("a", 9, &arr(4, u64::MAX / 2)),
            "impossible",
        ),
        (
            "string array length past the file",
            Builder::new().kv("a", 9, &arr(8, 1 << 50)),
            "impossible",
        ),
        (
            "nested array length past the file",
            Builder::new().kv("a", 9, &arr(9, 1 << 61)),
            "impossible",
        ),
        (
            "arrays nested too deep",
            Builder::new().kv("a", 9, &deep),
            "nested deeper",
        ),
        (
            "tensor count past the file",
            {
                let mut b = Builder::new().tensor("w", &[8, 1], 0, 0).data(32);
                b.n_t = 1 << 60;
                b
            },
            "tensor count",
        ),
        (
            "metadata count past the pairs",
            {
                let mut b = Builder::new().kv("a", 4, &[0; 4]);
                b.n_kv = 2;
                b.align = 1; // no zero padding that would read as a second (empty) pair
                b
            },
            "metadata count",
        ),
    ];
    let mut seen = std::collections::HashSet::new();
    let failed: Vec<String> = table
        .iter()
        .filter_map(|(case, b, want)| {
            assert!(seen.insert(*case), "two cases named `{case}`");
            // A panic is a failure of this case, not of the whole table.
            let opened = panic::catch_unwind(AssertUnwindSafe(|| b.open()));
            let why = match opened {
                Err(p) => {
                    let msg = p
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| p.downcast_ref::<&str>().copied());
                    format!("panicked: {}", msg.unwrap_or("(no message)"))
                }
                Ok(Ok(g)) => format!("accepted, wanted an error with {want:?}: {g:?}"),
                Ok(Err(e)) if !e.contains(want) => format!("wanted {want:?}, got {e}"),
                Ok(Err(_)) => return None,
            };
            Some(format!("case `{case}`: {why}"))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        table.len(),
        failed.join("\n")
    );
}

/// Tensors the file format allows but a matrix cannot be made of: the file
/// opens, the matrix is refused.
#[test]
fn crafted_tensors_that_are_not_matrices() {
    // Unknown type: refused by id.
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
    // kgen's own formats (k2_bb, ...) have ids no GGUF file may name: the
    // id is unknown to the reader, never decoded as kgen's blocks.
    let own = kgen::format::ggml::GgmlType::K2_BB.id();
    let g = Builder::new()
        .tensor("w", &[32, 1], own, 0)
        .data(64)
        .open()
        .unwrap();
    let e = g.matrix("w").unwrap_err().0;
    assert!(e.contains(&format!("unknown type id {own}")), "{e}");
    // Empty.
    let g = Builder::new().tensor("w", &[0, 4], 0, 0).open().unwrap();
    assert!(g.matrix("w").unwrap_err().0.contains("empty"));
}

#[test]
fn crafted_custom_alignment_is_honoured() {
    let q8 = q8();
    let mut b = Builder::new()
        .kv("general.alignment", 4, &256u32.to_le_bytes())
        .tensor("w", &[64, 2], 8, 0);
    b.align = 256;
    b.data = q8.data.clone();
    assert_eq!(b.open().unwrap().matrix("w").unwrap(), q8);
    b.align = 32; // data where a reader ignoring the alignment would look
    assert!(b.open().is_err());
}

/// Metadata at the edges of what is allowed still opens.
#[test]
fn crafted_metadata_within_limits_opens() {
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
}

/// The data section (after alignment padding) beyond the end of a file that
/// declares tensors, even an empty one.
#[test]
fn crafted_data_section_must_be_in_the_file() {
    let bytes = Builder::new().tensor("w", &[0, 1], 0, 0).bytes();
    assert_eq!(bytes.len(), 96); // 65 bytes of header, padded
    let e = GgufFile::from_bytes(bytes[..65].to_vec(), Path::new("x.gguf"))
        .unwrap_err()
        .0;
    assert!(e.contains("data section"), "{e}");
    GgufFile::from_bytes(bytes, Path::new("x.gguf")).unwrap();
}
