//! kgen's quantizers against ggml's own, byte for byte, where kgen follows
//! ggml's method exactly (IQ4_NL, IQ4_XS: gguf-py quantizes neither, so
//! `gguf_codec.rs` cannot compare them). `tests/data/ggml/` holds f32 rows
//! and ggml's `ggml_quantize_chunk` output for them, written by
//! `scripts/ggml-quant-fixtures.sh` from llama.cpp's ggml (the build in
//! `benches/llamacpp`): Gaussian rows, outliers, one-signed, constant,
//! zero, f32-subnormal and huge values, and a block on which the rounding
//! of the first trial scale decides an index.

use kgen::format::by_tag;

fn data(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/ggml/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn iq4_quantizers_give_ggmls_bytes() {
    let x: Vec<f32> = data("x.f32")
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(x.len() % 256, 0);
    for tag in ["iq4_xs", "iq4_nl"] {
        let f = by_tag(tag).unwrap();
        let theirs = data(&format!("ggml.{tag}"));
        assert_eq!(theirs.len(), x.len() / f.block * f.block_bytes, "{tag}");
        for (b, (xs, want)) in x
            .chunks_exact(f.block)
            .zip(theirs.chunks_exact(f.block_bytes))
            .enumerate()
        {
            let mut ours = Vec::new();
            (f.quantize)(xs, &mut ours);
            assert_eq!(ours, want, "{tag} block {b}");
        }
    }
}
