//! Damaged GPTQ safetensors files (random byte changes, truncations) load
//! as a matrix that runs, or fail with an error naming the file: never a
//! panic. Bounded iterations, a fixed seed.

mod common;

use common::write_gptq;
use kgen::format::gptq::random_gptq;
use kgen_runtime::{GptqOptions, Group, Matrix};

#[test]
fn damaged_gptq_files_are_errors_or_matrices_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.safetensors");
    let (k, n) = (64, 24);
    let g_idx: Vec<u32> = (0..k as u32).map(|i| (i * 7 % k as u32) / 32).collect();
    write_gptq(
        &good,
        "l",
        &random_gptq(k, n, 4, Group::Size(32), 3),
        Some(&g_idx),
    );
    let bytes = std::fs::read(&good).unwrap();
    let opts = GptqOptions::new(4);
    Matrix::from_gptq_file(&good, "l", &opts).unwrap();

    let bad = dir.path().join("bad.safetensors");
    let mut s: u64 = 0x0dd_ba11_5eed;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let x = vec![0.5f32; k];
    let (mut ok, mut err) = (0, 0);
    for i in 0..1500 {
        let mut b = bytes.clone();
        if i % 10 == 0 {
            b.truncate((next() % b.len() as u64) as usize);
        } else {
            for _ in 0..1 + next() % 4 {
                // Half the changes in the JSON header, where they bite.
                let span = if next() % 2 == 0 { 8 + 512 } else { b.len() };
                let at = (next() % span.min(b.len()) as u64) as usize;
                b[at] = match next() % 4 {
                    0 => 0xff,
                    1 => b'9',
                    2 => b[at] ^ (1 << (next() % 8)),
                    _ => next() as u8,
                };
            }
        }
        std::fs::write(&bad, &b).unwrap();
        match Matrix::from_gptq_file(&bad, "l", &opts) {
            Ok(m) => {
                ok += 1;
                let mut y = vec![0f32; m.n()];
                // Whatever loaded has a consistent shape and runs.
                if m.k() == k {
                    m.gemv(&x, &mut y).unwrap();
                }
            }
            Err(e) => {
                err += 1;
                assert!(e.to_string().contains("bad.safetensors"), "{e}");
            }
        }
    }
    assert!(ok > 0 && err > 0, "{ok} ok, {err} errors");
}
