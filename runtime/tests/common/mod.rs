//! Oracle checks and test shapes shared by test files (`mod common;`): the
//! same bounds as `kernels.rs` (f32 family) and `int8.rs` (int8 family).
// Each test crate uses a different subset.
#![allow(dead_code)]

use kgen::format::ggml::{GgmlMatrix, GgmlType};
use kgen::format::gptq::GptqMatrix;
use kgen::format::rng::Rng;
use kgen::layout::act::{layout_sub_scale, quantize_activations, reference_i8_for};
use kgen_runtime::Group;

/// f32 family `(k, n)` pairs: k not a multiple of the group or block, n not a
/// multiple of the tile width, several K blocks and panels.
pub const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (31, 7),
    (100, 33),
    (257, 130),
    (1000, 300),
    (2600, 70),
];

/// int8 family `(k, n)` pairs (k a multiple of the 32-value block).
pub const I8_SHAPES: &[(usize, usize)] = &[
    (32, 1),
    (64, 7),
    (96, 33),
    (320, 130),
    (1024, 300),
    (4096, 40),
];

/// Activation row counts: 1 runs the GEMV kernel, the others the GEMM one.
pub const ROWS: &[usize] = &[1, 2, 3, 5, 9];

/// Checks `y = x W` against the f64 oracle. The bound is relative to the
/// magnitude of the terms the kernel sums (|x| s (q + z)), with an f32
/// rounding allowance that grows like sqrt(k): a single wrong weight is far
/// outside it.
pub fn check(m: &GptqMatrix, x: &[f32], rows: usize, y: &[f32], what: &str) {
    let reference = m.reference_gemm(x, rows);
    let gs = m.group_size();
    for r in 0..rows {
        for j in 0..m.n {
            let mut bound = 0f64;
            for i in 0..m.k {
                let g = i / gs;
                let s = m.scales[g * m.n + j] as f64;
                let z = m.zeros[g * m.n + j] as f64;
                bound += (x[r * m.k + i] as f64).abs() * s * (m.q(i, j) as f64 + z);
            }
            let tol = 16.0 * f32::EPSILON as f64 * ((m.k + 1) as f64).sqrt() * bound + 1e-30;
            let got = y[r * m.n + j] as f64;
            let want = reference[r * m.n + j];
            assert!(
                (got - want).abs() <= tol,
                "{what}: row {r} col {j}: got {got}, want {want} (tol {tol:e})"
            );
        }
    }
}

/// Checks an int8-family result against the exact oracle (integer dot
/// products of the same quantized activations, scaled in f64); the bound is
/// f32 rounding of the per-block products and their sum, relative to the sum
/// of |terms|.
///
/// The oracle rounds sub-scales to f16 as every layout but the integer
/// sub-scale one does (Q2_K on AVX2 and AVX-512 VNNI; Q3_K, Q4_K, Q5_K and
/// Q6_K on AVX2): [`check_i8_with`] names the form of the kernel under
/// test, and also holds its output to the file's own weights.
pub fn check_i8(w: &GgmlMatrix, x: &[f32], k: usize, m: usize, y: &[f32], what: &str) {
    check_i8_with(w, x, k, m, y, what, false);
}

/// Whether `e` keeps integer sub-scales (`Int8Params::int_scales`).
pub fn int_scales_of(e: &kgen_runtime::KernelEntry) -> bool {
    matches!(e.params, kgen_runtime::FamilyParams::Int8(p) if p.int_scales)
}

/// [`check_i8_with`] of `qm`'s result `y` for `m` rows of `x`, against
/// the oracle of the layout its kernels read, named by its kernels and
/// shape.
pub fn check_kernels(
    qm: &kgen_runtime::Matrix,
    w: &GgmlMatrix,
    x: &[f32],
    k: usize,
    m: usize,
    y: &[f32],
) {
    let (gemv, gemm) = (qm.gemv_kernel(), qm.gemm_kernel());
    let what = format!("{} / {} {k}x{} rows {m}", gemv.name, gemm.name, qm.n());
    check_i8_with(w, x, k, m, y, &what, int_scales_of(gemm));
}

/// [`check_i8`] against the oracle of a layout that keeps integer
/// sub-scales or not.
pub fn check_i8_with(
    w: &GgmlMatrix,
    x: &[f32],
    k: usize,
    m: usize,
    y: &[f32],
    what: &str,
    int_scales: bool,
) {
    let k_pad = w.k;
    let xa = quantize_activations(x, m, k, k_pad, w.dtype);
    let want = reference_i8_for(w, &xa, m, int_scales);
    let deq = w.dequantize();
    let allow = file_allowance(w, &xa, m, int_scales);
    for r in 0..m {
        for j in 0..w.n {
            let term = |i: usize| {
                deq[i * w.n + j] as f64
                    * xa.q[r * k_pad + i] as f64
                    * xa.d[r * (k_pad / 32) + i / 32] as f64
            };
            let (mag, file) = (0..k_pad)
                .map(term)
                .fold((0f64, 0f64), |(m, f), t| (m + t.abs(), f + t));
            let tol = 8.0 * f32::EPSILON as f64 * ((k_pad / 32) as f64 + 4.0) * mag + 1e-30;
            let got = y[r * w.n + j] as f64;
            let exp = want[r * w.n + j];
            assert!(
                (got - exp).abs() <= tol,
                "{what}: row {r} col {j}: got {got}, want {exp} (tol {tol:e})"
            );
            // The oracle reads the scales as the layout does; gguf-py's
            // weights (the codec's `dequantize`) tie that reading to the
            // file, within what storing each part's scale and min can move
            // the oracle, and each file weight's own f32 rounding (at most
            // 2^-24 of it, doubled).
            let bound = tol + allow[r * w.n + j] + mag / 2f64.powi(23);
            assert!(
                (got - file).abs() <= bound,
                "{what}: row {r} col {j}: got {got}, the file's weights give {file} (bound {bound:e})"
            );
        }
    }
}

/// Per output, how far the oracle's scales move it from the file's own
/// weights: the oracle reads each part's (16 or 32 values) scale and min
/// as the layout stores them (`layout_sub_scale`: f16, or exact integer
/// sub-scales), so it moves by `dx (|dd| |sum l x| + |dm| |sum x|)` with
/// `dd` and `dm` those stored values less the file's. Where the file's
/// scales are f16 already (Q4_0, Q8_0, ..) that is 0. Per part, not
/// relative to the weights' magnitude: a min that nearly cancels its
/// scale's term leaves the weights small while the rounding of either is
/// not.
fn file_allowance(
    w: &GgmlMatrix,
    xa: &kgen::layout::act::QuantizedActivations,
    m: usize,
    int_scales: bool,
) -> Vec<f64> {
    let fmt = w.dtype.format();
    let repack = fmt.int8.expect("an int8 format");
    let (subs, spb) = (fmt.block / 32, repack.scales_per_block);
    let (part, k_pad, xb) = (32 / spb, w.k, w.k / 32);
    let mut allow = vec![0f64; m * w.n];
    for j in 0..w.n {
        for b in 0..xb {
            let block = w.block(j, b / subs);
            let levels = (repack.block_levels)(block, b % subs);
            for h in 0..spb {
                let s = (b % subs) * spb + h;
                let (d, mn) = (repack.sub_scale)(block, s);
                let (ds, ms) = layout_sub_scale(&repack, block, s, int_scales);
                let (dd, dm) = ((ds - d as f64).abs(), (ms - mn as f64).abs());
                if dd == 0.0 && dm == 0.0 {
                    continue;
                }
                let lv = &levels[h * part..(h + 1) * part];
                for r in 0..m {
                    let xs = &xa.q[r * k_pad + b * 32 + h * part..][..part];
                    let (dot, sum) =
                        lv.iter()
                            .zip(xs)
                            .fold((0f64, 0f64), |(dot, sum), (&l, &x)| {
                                (dot + (fmt.level_value(l) * x as i32) as f64, sum + x as f64)
                            });
                    let dx = xa.d[r * xb + b] as f64;
                    allow[r * w.n + j] += dx * (dd * dot.abs() + dm * sum.abs());
                }
            }
        }
    }
    allow
}

/// The `Group` of a registry entry's `group` field (0: per column).
pub fn group_of(g: usize) -> Group {
    if g == 0 {
        Group::Column
    } else {
        Group::Size(g)
    }
}

/// The SVE vector length of this thread in bits, where the CPU has SVE.
#[cfg(target_arch = "aarch64")]
pub fn sve_vector_bits() -> Option<u64> {
    if !std::arch::is_aarch64_feature_detected!("sve") {
        return None;
    }
    let bytes: u64;
    // SAFETY: SVE is present, so RDVL exists; it only writes a register.
    unsafe {
        std::arch::asm!(
            ".arch_extension sve",
            "rdvl {b}, #1",
            b = out(reg) bytes,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    Some(bytes * 8)
}

/// Whether the build has int8 kernels for `format` (`q4_0`, `q8_0`,
/// `iq4_nl`): the default build has every format (asserted); a build with
/// `KGEN_SPECS` set may leave some out, and the caller then skips.
pub fn i8_format_built(format: &str) -> bool {
    let here = kgen_runtime::Registry::builtin()
        .all()
        .iter()
        .any(|e| e.format == format);
    assert!(
        here || option_env!("KGEN_SPECS").is_some(),
        "the default build has no {format} kernel"
    );
    here
}

/// Whether the int8 family has a SIMD (not portable) kernel for `format`
/// in `reg` on this CPU: where dispatch runs GPTQ weights on it instead of
/// their own f32 family.
pub fn int8_has_simd(reg: &kgen_runtime::Registry, format: kgen_runtime::WeightFormat) -> bool {
    reg.with_family(Some(kgen_runtime::Family::Int8))
        .select_pair(format)
        .is_ok_and(|(gemv, _)| gemv.isa != "portable")
}

/// Writes a GGUF v3 file holding `tensors` (name, matrix: `dims = [k, n]`),
/// no metadata, alignment 32: enough for `Matrix::from_gguf` without Python.
pub fn write_gguf(path: &std::path::Path, tensors: &[(&str, &GgmlMatrix)]) {
    std::fs::write(path, kgen::format::ggml::gguf_image(tensors)).unwrap();
}

/// Writes `m` as the GPTQ layer `prefix` of a safetensors file (F32 scales,
/// zero points stored as they are: the `gptq_v2` convention, declared in the
/// metadata), with `g_idx` if given. `m.k` must be a multiple of 32.
pub fn write_gptq(path: &std::path::Path, prefix: &str, m: &GptqMatrix, g_idx: Option<&[u32]>) {
    use safetensors::tensor::TensorView;
    use safetensors::Dtype;
    assert_eq!(m.k % 32, 0);
    let words = |v: &[u32]| -> Vec<u8> { v.iter().flat_map(|w| w.to_le_bytes()).collect() };
    let bits = m.bits as usize;
    let word_rows = m.k * bits / 32;
    let qw = words(&m.qweight[..word_rows * m.n]);
    let zcols = (m.n * bits).div_ceil(32);
    let mut qz = vec![0u32; m.groups() * zcols];
    for g in 0..m.groups() {
        for j in 0..m.n {
            let bit = j * bits;
            let z = m.zeros[g * m.n + j] as u32;
            qz[g * zcols + bit / 32] |= z << (bit % 32);
            if bit % 32 + bits > 32 {
                qz[g * zcols + bit / 32 + 1] |= z >> (32 - bit % 32);
            }
        }
    }
    let qz = words(&qz);
    let sc: Vec<u8> = m.scales.iter().flat_map(|s| s.to_le_bytes()).collect();
    let gi = g_idx.map(words);
    let mut views = vec![
        (
            format!("{prefix}.qweight"),
            TensorView::new(Dtype::I32, vec![word_rows, m.n], &qw).unwrap(),
        ),
        (
            format!("{prefix}.qzeros"),
            TensorView::new(Dtype::I32, vec![m.groups(), zcols], &qz).unwrap(),
        ),
        (
            format!("{prefix}.scales"),
            TensorView::new(Dtype::F32, vec![m.groups(), m.n], &sc).unwrap(),
        ),
    ];
    if let Some(gi) = &gi {
        views.push((
            format!("{prefix}.g_idx"),
            TensorView::new(Dtype::I32, vec![m.k], gi).unwrap(),
        ));
    }
    let meta =
        std::collections::HashMap::from([("checkpoint_format".to_string(), "gptq_v2".to_string())]);
    std::fs::write(path, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
}

/// A command that runs this test binary again. Under qemu-user without
/// binfmt_misc the binary cannot exec itself, so the child goes through the
/// runner cargo used for this target (`CARGO_TARGET_<TRIPLE>_RUNNER`, which
/// the emulated process inherits): the child runs on the same emulated CPU.
fn self_command() -> std::process::Command {
    let exe = std::env::current_exe().unwrap();
    let runner = if cfg!(target_arch = "aarch64") {
        std::env::var("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER").ok()
    } else {
        None
    };
    let mut words = runner.as_deref().unwrap_or("").split_whitespace();
    match words.next() {
        Some(program) => {
            let mut c = std::process::Command::new(program);
            c.args(words).arg(exe);
            c
        }
        None => std::process::Command::new(exe),
    }
}

/// Whether this test binary can run its test `name` again in a child
/// process (directly, or through the target's runner); says so when not.
pub fn can_rerun_self(name: &str) -> bool {
    let probe = self_command().args(["--list", "--exact", name]).output();
    let ok = probe.is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    if !ok {
        eprintln!("this test binary cannot run itself here (emulated?): skipped");
    }
    ok
}

/// Runs this binary's test `name` in a child process with
/// `KGEN_FORCE_ISA=isa`: whether it passed, its stdout, and a message with
/// both outputs for an assertion.
pub fn rerun_forced(name: &str, isa: &str) -> (bool, String, String) {
    let out = self_command()
        .args(["--exact", name, "--nocapture"])
        .env(kgen_runtime::FORCE_ISA_ENV, isa)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let message = format!(
        "KGEN_FORCE_ISA={isa}:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text, message)
}

/// The parent side of forced-ISA test `name`: reruns this binary once per
/// ISA that some format of `formats` (each with its runnable ISAs) runs,
/// and asserts that the child passed and printed `forced {isa} {format}: ok`
/// for every format with a kernel for that ISA.
pub fn assert_each_isa_forced(name: &str, formats: &[(GgmlType, Vec<&'static str>)]) {
    if !can_rerun_self(name) {
        return;
    }
    let mut all: Vec<&str> = formats
        .iter()
        .flat_map(|(_, i)| i.iter().copied())
        .collect();
    all.sort();
    all.dedup();
    for isa in all {
        let (passed, text, message) = rerun_forced(name, isa);
        for (t, _) in formats.iter().filter(|(_, i)| i.contains(&isa)) {
            assert!(
                passed && text.contains(&format!("forced {isa} {t}: ok")),
                "{t}: {message}"
            );
        }
    }
}

/// Raw blocks of `dtype`: uniformly random bytes (every level, sub-block
/// scale and min code in every position), f16 scales of both signs over
/// several orders of magnitude where the format keeps them, the first
/// column's level bytes all 0 and the second's all 1 bits.
pub fn raw_blocks(dtype: GgmlType, k: usize, n: usize, seed: u64) -> GgmlMatrix {
    let f = dtype.format();
    let bb = dtype.block_bytes();
    let per_row = k / f.block;
    let mut rng = Rng::new(seed);
    let mut data: Vec<u8> = (0..n * per_row * bb)
        .map(|_| rng.next_u64() as u8)
        .collect();
    for (b, blk) in data.chunks_exact_mut(bb).enumerate() {
        match b / per_row {
            0 => blk.fill(0),
            1 => blk.fill(0xFF),
            _ => {}
        }
        for (i, &at) in f.scales.iter().enumerate() {
            let d = rng.f32() * [1e-3f32, 0.1, 1.0, 7.0][(b + i) % 4];
            at.write(blk, half::f16::from_f32(d).to_bits());
        }
    }
    let m = GgmlMatrix { k, n, dtype, data };
    m.validate().unwrap();
    m
}

/// The lattice i-quants, whose reference quantizer (an exhaustive search
/// over their grids) is slow under qemu: kernel tests that only need
/// valid blocks use [`raw_blocks`] for them, which also reach every grid
/// point and sign pattern.
pub const LATTICE: &[&str] = &[
    "iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s",
];
