//! Loads every 2-D quantized tensor of a GGUF file with `Model::load_all` and
//! reports the process's peak resident memory against the file size: the
//! check that the mapped file and its repacked copy are not resident
//! together.
//!
//!     cargo run --release -p kgen-runtime --example load_model -- --write /tmp/big.gguf 2
//!     cargo run --release -p kgen-runtime --example load_model -- /tmp/big.gguf
//!
//! `--write PATH GIB` writes a synthetic Q4_0 file of about GIB GiB first
//! (4096x11008 matrices of random nibbles, scale 1/64); `--write-mix PATH
//! GIB` a Q4_K_M-like mix of layers (Q4_K attention and gate / up, Q6_K
//! value and down projections, every third value Q8_0 and every fourth down
//! Q5_0, F32 norms; random level bytes, f16 scales 1/64), or with a third
//! argument `q2_k` a Q2_K-like one (Q2_K attention and gate / up, Q3_K
//! down and every other value projection, Q4_K the other values), or with
//! `moe` a mixture-of-experts one shaped like Qwen3-30B-A3B's layers
//! (hidden size 2048, 128 experts of FFN size 768 stored as 3-D tensors:
//! Q4_K gate and up, Q6_K down; Q4_K attention with a Q6_K value
//! projection, an F32 router), or with `iq` an i-quant one like
//! llama.cpp's IQ2 / IQ1 files (IQ2_XXS, IQ2_S, IQ1_S or IQ1_M attention
//! and gate / up by layer, IQ1_S every other key projection, IQ3_S or IQ4_XS
//! values, IQ3_XXS or IQ2_XS down). Linux only for the memory figures
//! (`/proc/self/status`).

use kgen::format::ggml::{gguf_header, GGUF_ALIGN};
use kgen_runtime::{Model, Pool};
use std::io::Write;
use std::time::Instant;

const K: usize = 4096;
const N: usize = 11008;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path =
        match args.as_slice() {
            [flag, path, gib] if flag == "--write" => {
                write_q4_0(path, gib.parse()?)?;
                return Ok(());
            }
            [flag, path, gib] if flag == "--write-mix" => {
                write_mix(path, gib.parse()?, Mix::Q4KM)?;
                return Ok(());
            }
            [flag, path, gib, mix] if flag == "--write-mix" && mix == "q2_k" => {
                write_mix(path, gib.parse()?, Mix::Q2K)?;
                return Ok(());
            }
            [flag, path, gib, mix] if flag == "--write-mix" && mix == "moe" => {
                write_mix(path, gib.parse()?, Mix::Moe)?;
                return Ok(());
            }
            [flag, path, gib, mix] if flag == "--write-mix" && mix == "iq" => {
                write_mix(path, gib.parse()?, Mix::Iq)?;
                return Ok(());
            }
            [path] => path.clone(),
            _ => return Err(
                "usage: load_model [--write PATH GIB | --write-mix PATH GIB [q2_k|moe|iq] | PATH]"
                    .into(),
            ),
        };
    let size = std::fs::metadata(&path)?.len();
    let before = status("VmRSS:");
    let start = Instant::now();
    let model = Model::open(&path)?;
    let all = model.load_all(&Pool::new(kgen_runtime::pool::physical_cores()))?;
    let took = start.elapsed();
    let gib = |kib: u64| kib as f64 / (1 << 20) as f64;
    println!(
        "{path}: {:.2} GiB, {} matrices loaded in {:.2} s, {:.2} GB/s ({} not supported)",
        size as f64 / (1u64 << 30) as f64,
        all.types.iter().map(|t| t.matrices).sum::<usize>(),
        took.as_secs_f64(),
        size as f64 / took.as_secs_f64() / 1e9,
        all.unsupported.len()
    );
    for t in &all.types {
        println!("  {t}");
    }
    let (hwm, rss) = (status("VmHWM:"), status("VmRSS:"));
    println!(
        "resident before {:.2} GiB, peak {:.2} GiB, after {:.2} GiB: peak / file size {:.2}",
        gib(before),
        gib(hwm),
        gib(rss),
        (hwm * 1024) as f64 / size as f64
    );
    Ok(())
}

/// A `/proc/self/status` field in KiB (0 where there is none).
fn status(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// A GGUF v3 file of Q4_0 matrices `K x N` (type 2), about `gib` GiB; the
/// data is written as it is made, never held whole.
fn write_q4_0(path: &str, gib: f64) -> std::io::Result<()> {
    let tensor_bytes = K * N / 32 * 18;
    let count = ((gib * (1u64 << 30) as f64) / tensor_bytes as f64)
        .ceil()
        .max(1.0) as usize;
    let names: Vec<String> = (0..count)
        .map(|i| format!("blk.{i}.ffn_up.weight"))
        .collect();
    let entries: Vec<_> = names
        .iter()
        .map(|name| (name.as_str(), 2u32, &[K, N][..], tensor_bytes))
        .collect();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    out.write_all(&gguf_header(&entries))?;
    // Blocks: f16 scale 1/64 (0x2400), 16 bytes of nibbles from an LCG.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut tensor = vec![0u8; tensor_bytes.next_multiple_of(GGUF_ALIGN)];
    for _ in 0..count {
        for block in tensor[..tensor_bytes].chunks_exact_mut(18) {
            block[..2].copy_from_slice(&0x2400u16.to_le_bytes());
            for b in &mut block[2..] {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *b = (state >> 56) as u8;
            }
        }
        out.write_all(&tensor)?;
    }
    out.flush()?;
    println!("wrote {path}: {count} Q4_0 matrices {K}x{N}");
    Ok(())
}

/// The layer mixes `--write-mix` writes.
#[derive(Clone, Copy, PartialEq)]
enum Mix {
    Q4KM,
    Q2K,
    Moe,
    Iq,
}

/// A GGUF v3 file of Q4_K_M-like (or Q2_K-like, or mixture-of-experts)
/// layers, about `gib` GiB (see the module documentation); each tensor is
/// written as it is made.
fn write_mix(path: &str, gib: f64, mix: Mix) -> std::io::Result<()> {
    use kgen::format::ggml::GgmlType;
    let layer = |i: usize| -> Vec<(String, GgmlType, Vec<usize>)> {
        let t = |name: &str, ty: GgmlType, dims: &[usize]| {
            (format!("blk.{i}.{name}.weight"), ty, dims.to_vec())
        };
        if mix == Mix::Moe {
            let (h, f, e) = (2048, 768, 128);
            return vec![
                t("attn_norm", GgmlType::F32, &[h, 1]),
                t("attn_q", GgmlType::Q4_K, &[h, 4096]),
                t("attn_k", GgmlType::Q4_K, &[h, 512]),
                t("attn_v", GgmlType::Q6_K, &[h, 512]),
                t("attn_output", GgmlType::Q4_K, &[4096, h]),
                t("ffn_norm", GgmlType::F32, &[h, 1]),
                t("ffn_gate_inp", GgmlType::F32, &[h, e]),
                t("ffn_gate_exps", GgmlType::Q4_K, &[h, f, e]),
                t("ffn_up_exps", GgmlType::Q4_K, &[h, f, e]),
                t("ffn_down_exps", GgmlType::Q6_K, &[f, h, e]),
            ];
        }
        let (main, v, down) = if mix == Mix::Iq {
            (
                [
                    GgmlType::IQ2_XXS,
                    GgmlType::IQ2_S,
                    GgmlType::IQ1_S,
                    GgmlType::IQ1_M,
                ][i % 4],
                [GgmlType::IQ3_S, GgmlType::IQ4_XS][i % 2],
                [GgmlType::IQ3_XXS, GgmlType::IQ2_XS][i % 2],
            )
        } else if mix == Mix::Q2K {
            let v = if i.is_multiple_of(2) {
                GgmlType::Q3_K
            } else {
                GgmlType::Q4_K
            };
            (GgmlType::Q2_K, v, GgmlType::Q3_K)
        } else {
            let v = if i.is_multiple_of(3) {
                GgmlType::Q8_0
            } else {
                GgmlType::Q6_K
            };
            let down = if i.is_multiple_of(4) {
                GgmlType::Q5_0
            } else {
                GgmlType::Q6_K
            };
            (GgmlType::Q4_K, v, down)
        };
        vec![
            t("attn_norm", GgmlType::F32, &[K, 1]),
            t("attn_q", main, &[K, K]),
            t(
                "attn_k",
                if mix == Mix::Iq && i.is_multiple_of(2) {
                    GgmlType::IQ1_S
                } else {
                    main
                },
                &[K, K],
            ),
            t("attn_v", v, &[K, K]),
            t("attn_output", main, &[K, K]),
            t("ffn_norm", GgmlType::F32, &[K, 1]),
            t("ffn_gate", main, &[K, N]),
            t("ffn_up", main, &[K, N]),
            t("ffn_down", down, &[N, K]),
        ]
    };
    let bytes = |(_, ty, dims): &(String, GgmlType, Vec<usize>)| {
        ty.row_bytes(dims[0]).unwrap() * dims[1..].iter().product::<usize>()
    };
    let mut tensors = Vec::new();
    let mut total = 0usize;
    let mut i = 0;
    while total == 0 || (total as f64) < gib * (1u64 << 30) as f64 {
        for t in layer(i) {
            total += bytes(&t);
            tensors.push(t);
        }
        i += 1;
    }
    let entries: Vec<_> = tensors
        .iter()
        .map(|t| (t.0.as_str(), t.1.id(), &t.2[..], bytes(t)))
        .collect();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    out.write_all(&gguf_header(&entries))?;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for t in &tensors {
        let n = bytes(t);
        let mut data = vec![0u8; n.next_multiple_of(GGUF_ALIGN)];
        if t.1 == GgmlType::F32 {
            for v in data[..n].chunks_exact_mut(4) {
                v.copy_from_slice(&1.0f32.to_le_bytes());
            }
        } else {
            let f = t.1.format();
            for block in data[..n].chunks_exact_mut(f.block_bytes) {
                for b in block.iter_mut() {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    *b = (state >> 56) as u8;
                }
                for &at in f.scales {
                    at.write(block, 0x2400);
                }
            }
        }
        out.write_all(&data)?;
    }
    out.flush()?;
    println!(
        "wrote {path}: {} layers, {} tensors, {:.2} GiB of tensor data",
        i,
        tensors.len(),
        total as f64 / (1u64 << 30) as f64
    );
    Ok(())
}
