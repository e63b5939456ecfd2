//! The checks behind the `kgen-downstream-example` binary, written against
//! any [`Registry`] so that the binary and the integration tests (each of
//! which includes the kernels this crate's `build.rs` generated) share them.
//!
//! 1. A 4-bit group-128 layer is written to a safetensors file in the
//!    AutoGPTQ layout, loaded back with [`kgen_runtime::load_gptq`], packed
//!    for the best kernel of the registry, and its GEMV and GEMM compared with
//!    the f64 reference of the matrix that was written.
//! 2. A random 3-bit whole-column matrix is packed straight from memory and
//!    checked the same way.
//! 3. Random f32 weights are quantized to GGUF Q4_0, which the int8 family
//!    runs (activations quantized to int8 per 32-block), and checked against
//!    the exact integer oracle of the same quantized activations.
//!
//! All three are the one [`Matrix`] type; the registry carries both
//! families' kernels in one `kernels()`.

use half::f16;
use kgen::format::gptq::GptqMatrix;
use kgen::format::rng::Rng;
use kgen::format::symmetric::quantize_symmetric;
use kgen::layout::act::{quantize_activations, reference_i8};
use kgen_runtime::{Family, GptqOptions, Group, Matrix, Registry};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::error::Error;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Largest accepted `max |y - ref| / max |ref|`.
pub const TOLERANCE: f64 = 1e-4;

/// Rows of the GEMM check.
pub const GEMM_M: usize = 8;

/// The layer written to the safetensors file.
pub const LAYER: &str = "model.layers.0.mlp.up_proj";

/// The shape of the file layer (K x N, `y = x W`).
pub const FILE_K: usize = 1024;
pub const FILE_N: usize = 2816;

/// The shape of the in-memory 3-bit layer.
pub const MEM_K: usize = 1536;
pub const MEM_N: usize = 1024;

/// The shape of the Q4_0 layer.
pub const Q4_K: usize = 2048;
pub const Q4_N: usize = 768;

type BoxError = Box<dyn Error + Send + Sync>;

/// The outcome of one format's check.
#[derive(Clone, Debug)]
pub struct Check {
    /// What was checked (format, source, shape).
    pub label: String,
    /// The kernel family that ran it.
    pub family: Family,
    pub gemv_kernel: &'static str,
    pub gemv_isa: &'static str,
    pub gemm_kernel: &'static str,
    pub gemm_isa: &'static str,
    /// Max relative error of the GEMV (one row).
    pub gemv_error: f64,
    /// Max relative error of the GEMM ([`GEMM_M`] rows).
    pub gemm_error: f64,
}

impl Check {
    pub fn passed(&self) -> bool {
        // `<=` is false for NaN, so a NaN error fails.
        self.gemv_error <= TOLERANCE && self.gemm_error <= TOLERANCE
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} ({} family)", self.label, self.family)?;
        writeln!(
            f,
            "  GEMV        kernel {} (isa {})  max rel error {:.3e}",
            self.gemv_kernel, self.gemv_isa, self.gemv_error
        )?;
        writeln!(
            f,
            "  GEMM (m={GEMM_M})  kernel {} (isa {})  max rel error {:.3e}",
            self.gemm_kernel, self.gemm_isa, self.gemm_error
        )?;
        write!(
            f,
            "  {} (tolerance {TOLERANCE:e})",
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}

/// `max |y - reference| / max |reference|` over all outputs; infinite if any
/// output is not finite (`f64::max` would silently skip a NaN).
pub fn max_relative_error(y: &[f32], reference: &[f64]) -> f64 {
    assert_eq!(y.len(), reference.len());
    if y.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let scale = reference.iter().fold(0f64, |a, r| a.max(r.abs()));
    let diff = y
        .iter()
        .zip(reference)
        .fold(0f64, |a, (&v, &r)| a.max((v as f64 - r).abs()));
    if scale > 0.0 {
        diff / scale
    } else {
        diff
    }
}

/// A random GPTQ matrix as a checkpoint would hold it: integer levels, scales
/// that are exactly representable in f16 (so the matrix and a file written
/// from it agree bit for bit), and AutoGPTQ v1 zero points `z = stored + 1`,
/// i.e. in `1..=2^bits`.
pub fn random_checkpoint_matrix(
    k: usize,
    n: usize,
    bits: u32,
    group: Group,
    seed: u64,
) -> GptqMatrix {
    let mut rng = Rng::new(seed);
    let levels: Vec<u8> = (0..k * n).map(|_| rng.below(1 << bits) as u8).collect();
    let groups = group.size().map_or(1, |g| k.div_ceil(g));
    let scales = (0..groups * n)
        .map(|_| f16::from_f32(0.002 + 0.01 * (rng.f32() + 1.0)).to_f32())
        .collect();
    let zeros = (0..groups * n)
        .map(|_| (rng.below(1 << bits) + 1) as f32)
        .collect();
    GptqMatrix::from_levels(k, n, bits, group, &levels, scales, zeros)
}

/// Little-endian bytes of 32-bit words (I32 tensors hold the bit patterns).
fn le_words(v: impl IntoIterator<Item = u32>) -> Vec<u8> {
    v.into_iter().flat_map(u32::to_le_bytes).collect()
}

/// Writes `m` as the GPTQ layer `prefix` of a safetensors file in the
/// AutoGPTQ ("v1") layout:
///
/// | tensor             | dtype | shape                     |
/// |--------------------|-------|---------------------------|
/// | `{prefix}.qweight` | I32   | `[K * bits / 32, N]`      |
/// | `{prefix}.qzeros`  | I32   | `[groups, N * bits / 32]` |
/// | `{prefix}.scales`  | F16   | `[groups, N]`             |
/// | `{prefix}.g_idx`   | I32   | `[K]`                     |
///
/// `qweight` packs along K, `qzeros` along N, least significant bits first;
/// the stored zero point is `z - 1`. `m.zeros` must be in `1..=2^bits` and its
/// scales representable in f16.
pub fn write_gptq_safetensors(path: &Path, prefix: &str, m: &GptqMatrix) -> Result<(), BoxError> {
    m.validate()?;
    if !m.k.is_multiple_of(32) {
        return Err(format!("K = {} must be a multiple of 32 for this writer", m.k).into());
    }
    let bits = m.bits as usize;
    let (k, n, groups) = (m.k, m.n, m.groups());

    // qweight: GptqMatrix already packs along K exactly like the file.
    let word_rows = k * bits / 32;
    let qweight = le_words(m.qweight[..word_rows * n].iter().copied());

    // qzeros: z - 1, packed along N as one LSB-first bit stream per group.
    let mask = (1u32 << bits) - 1;
    let zcols = (n * bits).div_ceil(32);
    let mut qz = vec![0u32; groups * zcols];
    for g in 0..groups {
        let row = &mut qz[g * zcols..(g + 1) * zcols];
        for j in 0..n {
            let z = m.zeros[g * n + j];
            if !(1.0..=(mask + 1) as f32).contains(&z) || z.fract() != 0.0 {
                return Err(format!("zero point {z} cannot be stored in the v1 layout").into());
            }
            let stored = (z as u32 - 1) & mask;
            let bit = j * bits;
            let (w, shift) = (bit / 32, bit % 32);
            row[w] |= stored << shift;
            if shift + bits > 32 {
                row[w + 1] |= stored >> (32 - shift);
            }
        }
    }
    let qzeros = le_words(qz);

    // scales: F16.
    let mut scales = Vec::with_capacity(groups * n * 2);
    for &s in &m.scales {
        let h = f16::from_f32(s);
        if h.to_f32() != s {
            return Err(format!("scale {s} is not representable in f16").into());
        }
        scales.extend_from_slice(&h.to_bits().to_le_bytes());
    }

    // g_idx: the group of each row (no act-order).
    let gs = m.group_size();
    let g_idx = le_words((0..k).map(|i| (i / gs) as u32));

    let tensors = [
        ("qweight", Dtype::I32, vec![word_rows, n], &qweight),
        ("qzeros", Dtype::I32, vec![groups, zcols], &qzeros),
        ("scales", Dtype::F16, vec![groups, n], &scales),
        ("g_idx", Dtype::I32, vec![k], &g_idx),
    ]
    .into_iter()
    .map(|(name, dtype, shape, data)| {
        Ok((
            format!("{prefix}.{name}"),
            TensorView::new(dtype, shape, data)?,
        ))
    })
    .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    safetensors::serialize_to_file(tensors, None, path)?;
    Ok(())
}

/// Runs `qm` on random activations and compares with `reference(x, rows)`
/// (`rows x n`, f64).
pub fn check_matrix(
    label: String,
    qm: &Matrix,
    reference: &dyn Fn(&[f32], usize) -> Vec<f64>,
    seed: u64,
) -> Result<Check, BoxError> {
    let (k, n) = (qm.k(), qm.n());
    let mut rng = Rng::new(seed);

    let x = rng.vec_f32(k);
    let mut y = vec![0f32; n];
    qm.gemv(&x, &mut y)?;
    let gemv_error = max_relative_error(&y, &reference(&x, 1));

    let xs = rng.vec_f32(GEMM_M * k);
    let mut ys = vec![0f32; GEMM_M * n];
    qm.gemm(&xs, GEMM_M, &mut ys)?;
    let gemm_error = max_relative_error(&ys, &reference(&xs, GEMM_M));

    Ok(Check {
        label,
        family: qm.family(),
        gemv_kernel: qm.gemv_kernel().name,
        gemv_isa: qm.gemv_kernel().isa,
        gemm_kernel: qm.gemm_kernel().name,
        gemm_isa: qm.gemm_kernel().isa,
        gemv_error,
        gemm_error,
    })
}

/// [`check_matrix`] against the f64 reference of a GPTQ matrix.
pub fn check_gptq(
    label: String,
    truth: &GptqMatrix,
    qm: &Matrix,
    seed: u64,
) -> Result<Check, BoxError> {
    check_matrix(label, qm, &|x, m| truth.reference_gemm(x, m), seed)
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "kgen-downstream-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The 4-bit group-128 check, through a safetensors file.
pub fn check_file_layer(registry: &Registry) -> Result<Check, BoxError> {
    let truth = random_checkpoint_matrix(FILE_K, FILE_N, 4, Group::Size(128), 1);
    let dir = TempDir::new()?;
    let path = dir.0.join("model.safetensors");
    write_gptq_safetensors(&path, LAYER, &truth)?;

    let layer = kgen_runtime::load_gptq(
        &path,
        LAYER,
        &GptqOptions {
            bits: 4,
            convention: None,
        },
    )?;
    if layer.matrix != truth {
        return Err(format!(
            "{}: the loaded layer differs from the one written",
            path.display()
        )
        .into());
    }
    let qm = Matrix::from_gptq_layer_with(registry, layer)?;
    check_gptq(
        format!("4-bit group 128, {FILE_K}x{FILE_N}, `{LAYER}` loaded from a safetensors file"),
        &truth,
        &qm,
        2,
    )
}

/// The 3-bit whole-column check, from memory.
pub fn check_in_memory(registry: &Registry) -> Result<Check, BoxError> {
    let truth = kgen::format::gptq::random_gptq(MEM_K, MEM_N, 3, Group::Column, 3);
    let qm = Matrix::from_gptq_with(registry, &truth)?;
    check_gptq(
        format!("3-bit whole column, {MEM_K}x{MEM_N}, random matrix in memory"),
        &truth,
        &qm,
        4,
    )
}

/// The Q4_0 check: f32 weights quantized by [`Matrix::from_f32_with`], against
/// the integer oracle of the same Q4_0 blocks and the same int8 activations.
pub fn check_q4_0(registry: &Registry) -> Result<Check, BoxError> {
    let w = Rng::new(5).vec_f32(Q4_K * Q4_N);
    let qm = Matrix::from_f32_with(registry, &w, Q4_K, Q4_N, "q4_0")?;
    let blocks = quantize_symmetric(&w, Q4_K, Q4_N, 4, 32);
    let reference = |x: &[f32], m: usize| {
        reference_i8(
            &blocks,
            &quantize_activations(x, m, Q4_K, Q4_K, blocks.dtype),
            m,
        )
    };
    check_matrix(
        format!("GGUF Q4_0, {Q4_K}x{Q4_N}, quantized from f32 weights"),
        &qm,
        &reference,
        6,
    )
}

/// All three checks.
pub fn check_all(registry: &Registry) -> Result<Vec<Check>, BoxError> {
    Ok(vec![
        check_file_layer(registry)?,
        check_in_memory(registry)?,
        check_q4_0(registry)?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_error_is_relative_to_the_largest_output() {
        assert_eq!(max_relative_error(&[1.0, -2.0], &[1.0, -4.0]), 0.5);
        assert_eq!(max_relative_error(&[0.0], &[0.0]), 0.0);
        assert_eq!(
            max_relative_error(&[1.0, f32::NAN], &[1.0, 1.0]),
            f64::INFINITY
        );
    }

    #[test]
    fn file_round_trips_through_the_loader() {
        for (bits, group) in [
            (4, Group::Size(128)),
            (3, Group::Size(32)),
            (2, Group::Column),
        ] {
            let m = random_checkpoint_matrix(256, 40, bits, group, 5);
            let dir = TempDir::new().unwrap();
            let path = dir.0.join("l.safetensors");
            write_gptq_safetensors(&path, "l", &m).unwrap();
            let l = kgen_runtime::load_gptq(&path, "l", &GptqOptions::new(bits)).unwrap();
            assert_eq!(l.perm, None);
            assert_eq!(l.matrix, m, "{bits}-bit {group}");
        }
    }

    #[test]
    fn a_wrong_result_fails_the_check() {
        // The runtime's built-in kernels include 4-bit group 128. The f32
        // family: dispatch would run 4-bit GPTQ on the int8 family's SIMD
        // kernels, whose int8 activations exceed this check's tolerance.
        let registry = &Registry::builtin().with_family(Some(Family::F32));
        let truth = random_checkpoint_matrix(256, 64, 4, Group::Size(128), 6);
        let other = random_checkpoint_matrix(256, 64, 4, Group::Size(128), 7);
        let good = Matrix::from_gptq_with(registry, &truth).unwrap();
        assert!(check_gptq("same".into(), &truth, &good, 8)
            .unwrap()
            .passed());
        let bad = Matrix::from_gptq_with(registry, &other).unwrap();
        let c = check_gptq("other".into(), &truth, &bad, 8).unwrap();
        assert!(!c.passed(), "{c}");
        assert!(c.to_string().contains("FAIL"));
    }
}
