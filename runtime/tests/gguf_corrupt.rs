//! Damaged copies of the GGUF files gguf-py wrote (truncated, bad magic,
//! impossible counts, random byte changes) are errors naming the file, never
//! panics. See `gguf_py/mod.rs` for what the writer script needs;
//! `gguf_crafted.rs` covers damage gguf-py cannot write.

mod gguf_py;

use gguf_py::file;
use kgen_runtime::gguf::GgufFile;

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
