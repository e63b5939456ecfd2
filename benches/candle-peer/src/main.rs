//! candle's side of the peer bench (`benches/peers.sh`): candle-core's
//! `QMatMul` on quantized weights and f32 activations, one line per case in
//! the format of `kgen_benches::peer`. Run it in its own process, built with
//! `RUSTFLAGS="-C target-cpu=native"` in its own target directory, once per
//! thread count:
//!
//! ```sh
//! RAYON_NUM_THREADS=2 candle_peer --formats q4_0,q8_0,q5_0,q4k --m 1,32 --threads 2
//! ```
//!
//! candle sizes its thread pool (a barrier pool: the caller and T-1 workers)
//! once per process from `RAYON_NUM_THREADS`, so `--threads` takes one value;
//! the program sets the variable itself if it is unset.
//!
//! Formats: `q4_0`, `q8_0`, `q5_0` as GGUF, and `q4k` (candle's best 4-bit
//! format on x86: the only one it repacks on AVX2). candle has no IQ4_NL:
//! `iq4_nl` prints `status=n/a`.
//!
//! What runs, read from candle-core 0.11.1's source (`quantized/mod.rs`,
//! `repack.rs`, `repack_x86.rs`, `k_quants.rs`): `forward` quantizes the
//! activations and, for Q4K (and for Q8_0 on a CPU with AVX-VNNI or AVX-512
//! VNNI), runs the x86 repacked tiles; otherwise `k_quants::matmul` over the
//! GGUF blocks with one `vec_dot` per (row, 4 columns): AVX2 for Q4_0 and
//! Q8_0, scalar code (left to the compiler) for Q5_0.

// Shared with kgen's side; not every item is used here.
#[allow(dead_code)]
#[path = "../../src/peer.rs"]
mod peer;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use std::hint::black_box;

fn fail(msg: String) -> ! {
    eprintln!("candle_peer: {msg}");
    std::process::exit(1)
}

fn dtype(format: &str) -> Option<GgmlDType> {
    Some(match format {
        "q4_0" => GgmlDType::Q4_0,
        "q5_0" => GgmlDType::Q5_0,
        "q8_0" => GgmlDType::Q8_0,
        "q4k" | "q4_k" => GgmlDType::Q4K,
        "q4_1" => GgmlDType::Q4_1,
        "q5_1" => GgmlDType::Q5_1,
        "q5_k" => GgmlDType::Q5K,
        "q6_k" => GgmlDType::Q6K,
        "q3_k" => GgmlDType::Q3K,
        "q2_k" => GgmlDType::Q2K,
        _ => return None,
    })
}

/// Which kernel candle 0.11.1 runs for `dtype` on this CPU (its dispatch,
/// restated: candle does not report it). Its repacked x86 tiles pick their
/// tier at run time, whatever target-cpu candle was built for; the
/// environment variables candle reads (`MISTRALRS_FORCE_AVX2`,
/// `MISTRALRS_FORCE_AVXVNNI`) move it down, as `peers.sh --isa avx2` does.
#[cfg(target_arch = "x86_64")]
fn kernel(dtype: GgmlDType, m: usize, k: usize, n: usize) -> String {
    let forced = |v: &str| std::env::var(v).as_deref() == Ok("1");
    let (force_avx2, force_vnni) = (
        forced("MISTRALRS_FORCE_AVX2"),
        forced("MISTRALRS_FORCE_AVXVNNI"),
    );
    let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
    let level = if !force_avx2
        && !force_vnni
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("avx512f")
    {
        "avx512vnni"
    } else if !force_avx2 && (force_vnni || is_x86_feature_detected!("avxvnni")) {
        "avxvnni"
    } else {
        "avx2"
    };
    let tiles = avx2 && n.is_multiple_of(16) && k.is_multiple_of(256);
    match dtype {
        GgmlDType::Q4K if tiles => format!("repack_x86_q4k_tiles_{level}"),
        GgmlDType::Q6K if tiles && m > 1 => format!("repack_x86_q6k_tiles_{level}"),
        GgmlDType::Q8_0 if tiles && level != "avx2" => format!("repack_x86_q8_0_tiles_{level}"),
        GgmlDType::Q5_0 => "vec_dot_q5_0_q8_0_scalar".into(),
        GgmlDType::Q4_1
        | GgmlDType::Q5_1
        | GgmlDType::Q2K
        | GgmlDType::Q3K
        | GgmlDType::Q5K
        | GgmlDType::Q6K => {
            format!("candle_{dtype:?}_not_restated")
        }
        _ => {
            let (w, a) = match dtype {
                GgmlDType::Q4_0 => ("q4_0", "q8_0"),
                GgmlDType::Q8_0 => ("q8_0", "q8_0"),
                _ => ("q4k", "q8k"),
            };
            format!("vec_dot_{w}_{a}_{}", if avx2 { "avx2" } else { "scalar" })
        }
    }
}

/// Elsewhere candle has other repacked paths (Arm dotprod / i8mm), not restated here.
#[cfg(not(target_arch = "x86_64"))]
fn kernel(dtype: GgmlDType, _m: usize, _k: usize, _n: usize) -> String {
    format!("candle_{dtype:?}_not_restated")
}

fn main() {
    let a = peer::Args::parse("candle_peer", std::env::args().skip(1));
    let [threads] = a.threads[..] else {
        fail("--threads takes one value (candle sizes its pool once per process)".into())
    };
    if a.dram {
        fail("--dram is kgen_peer's".into());
    }
    if std::env::var("RAYON_NUM_THREADS").is_err() {
        std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    }
    if candle_core::utils::get_num_threads() != threads {
        fail(format!(
            "RAYON_NUM_THREADS={} but --threads {threads}",
            std::env::var("RAYON_NUM_THREADS").unwrap_or_default()
        ));
    }
    if std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_some()
        || std::env::var_os("CANDLE_DEQUANTIZE_ALL_F16").is_some()
    {
        fail(
            "unset CANDLE_DEQUANTIZE_ALL(_F16): it times f32 matmul, not the quantized one".into(),
        );
    }
    eprintln!(
        "# candle-core 0.11 threads={threads} built with avx2={} fma={} avx512f={} (target-cpu=native wanted)",
        cfg!(target_feature = "avx2"),
        cfg!(target_feature = "fma"),
        cfg!(target_feature = "avx512f"),
    );
    let dev = Device::Cpu;
    let mut failed = 0;
    for format in &a.formats {
        let Some(dt) = dtype(format) else {
            let why = if format == "iq4_nl" {
                "candle has no IQ4_NL".to_string()
            } else {
                format!("unknown format {format}")
            };
            for &(k, n) in &a.shapes {
                for &m in &a.ms {
                    println!(
                        "CANDLE format={format} op={} shape={k}x{n} m={m} threads={threads} status=n/a reason=\"{why}\"",
                        if m == 1 { "gemv" } else { "gemm" }
                    );
                }
            }
            continue;
        };
        for &(k, n) in &a.shapes {
            // candle's weight is N x K (y = x W^T).
            let wt = Tensor::from_vec(peer::random_f32(n * k, (k * 31 + n) as u64), (n, k), &dev)
                .unwrap_or_else(|e| fail(format!("{e}")));
            let qt = QTensor::quantize(&wt, dt)
                .unwrap_or_else(|e| fail(format!("{format} {k}x{n}: {e}")));
            let bytes = qt.storage_size_in_bytes();
            // The reference: dequantized, as K x N row-major.
            let deq: Vec<f32> = qt
                .dequantize(&dev)
                .and_then(|t| t.t()?.contiguous()?.flatten_all()?.to_vec1())
                .unwrap_or_else(|e| fail(format!("{e}")));
            let qm = QMatMul::from_qtensor(qt).unwrap_or_else(|e| fail(format!("{e}")));
            if !matches!(qm, QMatMul::QTensor(_)) {
                fail(format!("{format}: candle dequantized the weights"));
            }
            eprintln!("# candle {format} {k}x{n}: {bytes} weight bytes");
            for &m in &a.ms {
                let kern = kernel(dt, m, k, n);
                let x = peer::random_f32(m * k, 99 + m as u64);
                let xt = Tensor::from_vec(x.clone(), (m, k), &dev).unwrap();
                let run = || qm.forward(black_box(&xt)).unwrap();
                let y: Vec<f32> = run().flatten_all().and_then(|t| t.to_vec1()).unwrap();
                let err = peer::relerr(&x, &deq, &y, m, k, n);
                if peer::is_wrong(err) {
                    eprintln!("CHECK FAILED candle {format} {k}x{n} m={m} relerr={err:.3e}");
                    failed += 1;
                }
                let t = peer::time(a.min_time, || {
                    black_box(run());
                });
                println!(
                    "{}",
                    peer::line("CANDLE", format, (k, n), m, threads, &t, bytes, err, &kern)
                );
            }
        }
    }
    if failed > 0 {
        fail(format!("{failed} correctness check(s) failed"));
    }
}
