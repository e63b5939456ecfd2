//! Damaged copies of the GGUF files gguf-py wrote (truncated, bad magic,
//! impossible counts, random byte changes) are errors naming the file, never
//! panics; damaged blocks loaded as a model loads them are refused as
//! full validation refuses them, or run as their dequantized weights say.
//! See `gguf_py/mod.rs` for what the writer script needs;
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

/// A deterministic stream of pseudo-random words (xorshift64).
fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

/// Changes 1 to `most` random bytes of `b` anywhere: to 0xff, to 0, one bit
/// flipped, or a random value.
fn mutate(b: &mut [u8], most: u64, next: &mut impl FnMut() -> u64) {
    for _ in 0..1 + next() % most {
        let at = (next() % b.len() as u64) as usize;
        b[at] = match next() % 4 {
            0 => 0xff,
            1 => 0,
            2 => b[at] ^ (1 << (next() % 8)),
            _ => next() as u8,
        };
    }
}

/// Random byte changes in the header and data: Ok or Err, never a panic; and
/// whatever opens yields matrices that validate or errors.
#[test]
fn random_corruption_never_panics() {
    let mut next = xorshift(0x1234_5678_9abc_def1);
    for name in ["small.gguf", "align64.gguf"] {
        let p = file(name);
        let bytes = std::fs::read(&p).unwrap();
        let (mut ok, mut err) = (0, 0);
        for _ in 0..3000 {
            let mut b = bytes.clone();
            mutate(&mut b, 4, &mut next);
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

/// Random byte changes inside one quantized tensor's blocks, loaded the way
/// a model is (`Model::matrix`: the shape checked first, the blocks as the
/// repack reads them): refused exactly when `GgufFile::matrix`'s full
/// validation refuses them, with the same error, and when accepted, the
/// kernel's `x W` agrees with the f64 product of the dequantized weights,
/// however odd the scales the changes left.
#[test]
fn corrupt_blocks_through_the_checked_repack() {
    use kgen_runtime::{Error, Model};
    let mut next = xorshift(0x0dd_b10c_5eed_2026);
    let src = file("model.gguf");
    let bytes = std::fs::read(&src).unwrap();
    let g0 = GgufFile::from_bytes(bytes.clone(), &src).unwrap();
    let model0 = Model::open(&src).unwrap();
    // Quantized matrices a kernel runs, with their data ranges.
    let targets: Vec<(String, (usize, usize))> = model0
        .quantized_matrices()
        .filter(|t| model0.matrix(&t.name).is_ok())
        .map(|t| (t.name.clone(), t.range.unwrap()))
        .collect();
    // A build with fewer formats (`KGEN_SPECS`) loads fewer of them.
    if targets.is_empty() {
        eprintln!("no quantized matrix of model.gguf has a kernel in this build: skipped");
        return;
    }
    let all = targets.len() >= 40;
    drop((g0, model0));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mutated.gguf");
    let (mut ok, mut refused) = (0, 0);
    for round in 0..600 {
        let (name, (start, end)) = &targets[(next() % targets.len() as u64) as usize];
        let mut b = bytes.clone();
        for _ in 0..1 + next() % 4 {
            let at = start + (next() % (end - start) as u64) as usize;
            b[at] = match next() % 4 {
                0 => 0xff,
                1 => 0x7c | (b[at] & 0x83),
                2 => b[at] ^ (1 << (next() % 8)),
                _ => next() as u8,
            };
        }
        std::fs::write(&path, &b).unwrap();
        let g = GgufFile::from_bytes(b, &path).unwrap();
        let model = Model::open(&path).unwrap();
        let what = format!("round {round}: {name}");
        match (g.matrix(name), model.matrix(name)) {
            (Err(want), Err(Error::Load(got))) => {
                assert_eq!(got, want.to_string(), "{what}");
                assert!(
                    got.contains("mutated.gguf") && got.contains(name.as_str()),
                    "{got}"
                );
                refused += 1;
            }
            (Ok(w), Ok(m)) => {
                let x: Vec<f32> = (0..w.k)
                    .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
                    .collect();
                let mut y = vec![0f32; w.n];
                m.gemv(&x, &mut y).unwrap();
                let d = w.dequantize();
                let xmax = x.iter().fold(0f64, |a, &v| a.max(v.abs() as f64));
                for (c, &got) in y.iter().enumerate() {
                    // `dequantize` is K x N row-major.
                    let col = || (0..w.k).map(|i| d[i * w.n + c] as f64);
                    let want: f64 = col().zip(&x).map(|(a, &b)| a * b as f64).sum();
                    let l1: f64 = col().map(f64::abs).sum();
                    // Int8 activations: each product is off by at most
                    // |w| max|x| / 254; a hundredth leaves room for the
                    // f16 and f32 roundings and catches a wrong term.
                    let bound = 1e-2 * l1 * xmax + 1e-6;
                    assert!(
                        (got as f64 - want).abs() <= bound,
                        "{what} column {c}: {got} against {want} (bound {bound})"
                    );
                }
                ok += 1;
            }
            (a, b) => panic!(
                "{what}: full validation {:?}, checked repack {:?}",
                a.map(|_| ()),
                b.map(|_| ())
            ),
        }
    }
    let (want_ok, want_refused) = if all { (100, 10) } else { (1, 0) };
    assert!(
        ok >= want_ok && refused >= want_refused,
        "{ok} accepted, {refused} refused"
    );
}

/// A mixture-of-experts file (3-D stacks and a stack stored per expert
/// beside a 2-D matrix) with random
/// byte changes anywhere, header included, loaded whole with
/// `Model::load_all` and one expert at a time: Ok or Err, never a panic or
/// a hang on a count the file cannot hold; what loads runs.
#[test]
fn corrupt_expert_stacks_never_panic() {
    use kgen::format::ggml::{gguf_image_raw, GgmlMatrix, GgmlType};
    use kgen_runtime::{Model, Pool};
    let q = |k: usize, n: usize, t: GgmlType, seed: u64| {
        GgmlMatrix::quantize(&kgen::format::Rng::new(seed).vec_f32(k * n), k, n, t)
    };
    let stack = |ms: &[GgmlMatrix]| -> Vec<u8> { ms.iter().flat_map(|m| m.data.clone()).collect() };
    let a: Vec<GgmlMatrix> = (0..3).map(|e| q(64, 8, GgmlType::Q4_0, e)).collect();
    let b: Vec<GgmlMatrix> = (0..2).map(|e| q(32, 4, GgmlType::Q8_0, 9 + e)).collect();
    let dense = q(256, 4, GgmlType::Q4_K, 20);
    let bytes = gguf_image_raw(&[
        (
            "blk.0.ffn_up_exps.weight",
            GgmlType::Q4_0.id(),
            &[64, 8, 3],
            &stack(&a),
        ),
        (
            "blk.0.ffn_down_exps.weight",
            GgmlType::Q8_0.id(),
            &[32, 4, 2],
            &stack(&b),
        ),
        (
            "blk.0.attn_q.weight",
            GgmlType::Q4_K.id(),
            &[256, 4],
            &dense.data,
        ),
        // A stack stored one tensor per expert, as older Mixtral files do.
        (
            "blk.1.ffn_up.0.weight",
            GgmlType::Q4_0.id(),
            &[64, 8],
            &a[0].data,
        ),
        (
            "blk.1.ffn_up.1.weight",
            GgmlType::Q4_0.id(),
            &[64, 8],
            &a[1].data,
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("moe.gguf");
    let pool = Pool::new(2);
    let mut next = xorshift(0x0e_4e47_5ace_2026);
    let (mut loaded, mut refused) = (0, 0);
    for _ in 0..500 {
        let mut b = bytes.clone();
        mutate(&mut b, 3, &mut next);
        std::fs::write(&path, &b).unwrap();
        let Ok(model) = Model::open(&path) else {
            refused += 1;
            continue;
        };
        for t in model.tensors() {
            for e in 0..t.experts().unwrap_or(0).min(4) as usize {
                if let Ok(m) = model.file().expert(&t.name, e) {
                    m.validate().unwrap();
                    assert_eq!(m.dequantize().len(), m.k * m.n);
                }
            }
        }
        match model.load_all(&pool) {
            Ok(all) => {
                for s in all.experts.values() {
                    let x = vec![0.25f32; s.k()];
                    let mut y = vec![0f32; s.len() * s.n()];
                    let ids: Vec<usize> = (0..s.len()).collect();
                    s.gemv_selected(&ids, &x, &mut y).unwrap();
                }
                loaded += 1;
            }
            Err(_) => refused += 1,
        }
    }
    assert!(
        loaded > 50 && refused > 50,
        "{loaded} loaded, {refused} refused"
    );
}
