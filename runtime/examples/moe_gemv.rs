//! Times one token through a mixture-of-experts FFN shaped like
//! Qwen3-30B-A3B's (hidden 2048, 128 experts of FFN size 768, top-8; Q4_K
//! gate and up, Q6_K down; random blocks): the router's picks through
//! `Experts` (gate and up sharing one quantized input, down with a row per
//! expert), against the same picks one `Matrix` call per expert, and
//! against dense matrices of the same bytes (gate and up as one 2048 x
//! 12288 matrix, down as 6144 x 2048), which the picks can at best match:
//! they read as many bytes in smaller pieces. The experts (about 190 MB)
//! stay far beyond the L3, as a model's do, and so do the dense ones (8
//! copies, used in turn); each token picks other experts.
//!
//!     cargo run --release -p kgen-runtime --example moe_gemv -- [THREADS] [TOKENS] [BATCH]
//!
//! Prints the median time per token of each and the weight bytes it read
//! per second, then the same as one `KGEN_MOE` line for
//! `benches/peers.sh --moe`, which times llama.cpp's `ggml_mul_mat_id` on
//! the same case (`benches/llamacpp/bench_moe.cpp`).
//!
//! With a `BATCH` above 1 it times `TOKENS` batches of that many tokens
//! instead (a prompt), through `Experts::gemm_routed` (each token's 8
//! picks, the rows grouped by expert), and prints the median time per batch
//! and a `KGEN_MOE_BATCH` line (`bench_moe --batch` on llama.cpp's side).

use kgen::format::ggml::{GgmlMatrix, GgmlType};
use kgen::format::Rng;
use kgen::layout::WordArena;
use kgen_runtime::{Experts, Matrix, Pool};
use std::time::Instant;

const HIDDEN: usize = 2048;
const FFN: usize = 768;
const EXPERTS: usize = 128;
const TOP: usize = 8;

/// A K x N matrix of random blocks with f16 scales of 1/64 (quantizing
/// 300 M random weights would take minutes; the kernels' speed does not
/// depend on the values).
fn random(rng: &mut Rng, k: usize, n: usize, t: GgmlType) -> Matrix {
    let f = t.format();
    let mut data: Vec<u8> = (0..t.row_bytes(k).unwrap() * n)
        .map(|_| rng.next_u64() as u8)
        .collect();
    for block in data.chunks_exact_mut(f.block_bytes) {
        for &at in f.scales {
            at.write(block, 0x2400);
        }
    }
    Matrix::from_ggml(&GgmlMatrix {
        k,
        n,
        dtype: t,
        data,
    })
    .expect("valid blocks")
}

/// A stack of random experts, their weights in one arena as `Model` loads
/// a file's (see `kgen::layout::WordArena`).
fn stack(rng: &mut Rng, k: usize, n: usize, t: GgmlType) -> Experts {
    let arena = WordArena::new(EXPERTS * (k + 256) * (n + 256)).expect("address space");
    let experts = arena.scope(|| {
        Experts::new((0..EXPERTS).map(|_| random(rng, k, n, t)).collect()).expect("one shape")
    });
    assert!(experts.iter().all(Matrix::weights_in_arena));
    experts
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("THREADS ROUNDS BATCH"))
        .collect();
    let (threads, rounds) = (
        args.first().copied().unwrap_or(1),
        args.get(1).copied().unwrap_or(200),
    );
    let pool = Pool::new(threads);
    let mut rng = Rng::new(1);
    let gate = stack(&mut rng, HIDDEN, FFN, GgmlType::Q4_K);
    let up = stack(&mut rng, HIDDEN, FFN, GgmlType::Q4_K);
    let down = stack(&mut rng, FFN, HIDDEN, GgmlType::Q6_K);
    if let Some(&batch) = args.get(2).filter(|&&b| b > 1) {
        return batches(&pool, &mut rng, [&gate, &up, &down], batch, rounds);
    }
    let copies: Vec<(Matrix, Matrix)> = (0..8)
        .map(|_| {
            (
                random(&mut rng, HIDDEN, 2 * TOP * FFN, GgmlType::Q4_K),
                random(&mut rng, TOP * FFN, HIDDEN, GgmlType::Q6_K),
            )
        })
        .collect();
    let bytes =
        (2 * TOP * HIDDEN * FFN) as f64 * 4.5 / 8.0 + (TOP * FFN * HIDDEN) as f64 * 6.5625 / 8.0;

    let x = rng.vec_f32(HIDDEN);
    let h = rng.vec_f32(TOP * FFN);
    let (mut g, mut u, mut y) = (
        vec![0f32; TOP * FFN],
        vec![0f32; TOP * FFN],
        vec![0f32; TOP * HIDDEN],
    );
    let mut gu = vec![0f32; 2 * TOP * FFN];
    let picks = |round: usize| -> Vec<usize> {
        (0..TOP)
            .map(|i| (round * 37 + i * 16 + i * i) % EXPERTS)
            .collect()
    };
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..rounds {
        let ids = picks(round);
        let t = Instant::now();
        let input = up.quantize_input(&x).unwrap();
        gate.gemv_selected_input_on(&pool, &input, &ids, &mut g)
            .unwrap();
        up.gemv_selected_input_on(&pool, &input, &ids, &mut u)
            .unwrap();
        down.gemv_each_on(&pool, &ids, &h, &mut y).unwrap();
        times[0].push(t.elapsed().as_secs_f64());

        let ids = picks(round + rounds);
        let t = Instant::now();
        for (i, &e) in ids.iter().enumerate() {
            let (g, u) = (
                &mut g[i * FFN..(i + 1) * FFN],
                &mut u[i * FFN..(i + 1) * FFN],
            );
            gate[e].gemm_on(&pool, &x, 1, g).unwrap();
            up[e].gemm_on(&pool, &x, 1, u).unwrap();
        }
        for (i, &e) in ids.iter().enumerate() {
            let (h, y) = (
                &h[i * FFN..(i + 1) * FFN],
                &mut y[i * HIDDEN..(i + 1) * HIDDEN],
            );
            down[e].gemm_on(&pool, h, 1, y).unwrap();
        }
        times[1].push(t.elapsed().as_secs_f64());

        let (gate_up, down_d) = &copies[round % copies.len()];
        let t = Instant::now();
        gate_up.gemm_on(&pool, &x, 1, &mut gu).unwrap();
        down_d.gemm_on(&pool, &h, 1, &mut y[..HIDDEN]).unwrap();
        times[2].push(t.elapsed().as_secs_f64());
    }
    println!(
        "{threads} thread(s), {rounds} tokens, {:.1} MB of weights per token",
        bytes / 1e6
    );
    let mut medians = Vec::new();
    for (name, t) in ["Experts (fused)", "per expert", "dense, same bytes"]
        .iter()
        .zip(&mut times)
    {
        t.sort_by(f64::total_cmp);
        let med = t[t.len() / 2];
        medians.push(med);
        println!(
            "  {name:<18} {:7.1} us  {:5.1} GB/s",
            med * 1e6,
            bytes / med / 1e9
        );
    }
    // The same, as one line for benches/peers.sh --moe (beside llama.cpp's
    // LLAMACPP_MOE from benches/llamacpp/bench_moe.cpp).
    println!(
        "KGEN_MOE threads={threads} tokens={rounds} median_us={:.1} gbs={:.2} per_expert_us={:.1} dense_us={:.1}",
        medians[0] * 1e6,
        bytes / medians[0] / 1e9,
        medians[1] * 1e6,
        medians[2] * 1e6
    );
}

/// Times `count` batches of `batch` tokens through `gemm_routed` (gate and
/// up on the tokens' rows, down on one row per pick).
fn batches(
    pool: &Pool,
    rng: &mut Rng,
    [gate, up, down]: [&Experts; 3],
    batch: usize,
    count: usize,
) {
    let x = rng.vec_f32(batch * HIDDEN);
    let h = rng.vec_f32(batch * TOP * FFN);
    let (mut g, mut u, mut y) = (
        vec![0f32; batch * TOP * FFN],
        vec![0f32; batch * TOP * FFN],
        vec![0f32; batch * TOP * HIDDEN],
    );
    let mut times = Vec::new();
    // One batch of warm-up, then `count` timed.
    for b in 0..=count {
        // Each token's 8 distinct picks (a partial Fisher-Yates shuffle).
        let ids: Vec<usize> = (0..batch)
            .flat_map(|_| {
                let mut all: Vec<usize> = (0..EXPERTS).collect();
                for i in 0..TOP {
                    all.swap(i, i + (rng.next_u64() as usize) % (EXPERTS - i));
                }
                all.truncate(TOP);
                all
            })
            .collect();
        let t = Instant::now();
        gate.gemm_routed_on(pool, &x, batch, &ids, &mut g).unwrap();
        up.gemm_routed_on(pool, &x, batch, &ids, &mut u).unwrap();
        // Down: batch * TOP rows, one pick each.
        down.gemm_routed_on(pool, &h, batch * TOP, &ids, &mut y)
            .unwrap();
        if b > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    let med = times[times.len() / 2];
    // 2 flops per weight of every pick.
    let flops = 2.0 * (batch * TOP) as f64 * (3 * HIDDEN * FFN) as f64;
    let threads = pool.threads();
    println!(
        "{threads} thread(s), {count} batches of {batch} tokens: {:.1} us per batch, {:.1} GFLOPS",
        med * 1e6,
        flops / med / 1e9
    );
    println!(
        "KGEN_MOE_BATCH threads={threads} batch={batch} batches={count} median_us={:.1} gflops={:.2}",
        med * 1e6,
        flops / med / 1e9
    );
}
