//! Matrices for the int8-activation kernels: GGUF Q4_0 / Q8_0 / IQ4_NL
//! weights (or kgen's own symmetric 4/8-bit groups), activations quantized
//! per call.

use crate::dispatch::Registry;
use crate::error::Error;
use crate::gguf::GgufFile;
use crate::kernel::I8KernelEntry;
use crate::pool::{self, Pool};
use kgen::format::ggml::{GgmlMatrix, QK};
use kgen::format::symmetric::quantize_symmetric;
use kgen::layout::act::{quantize_activations_as, ActFormat};
use kgen::layout::int8::{I8Layout, I8Packed};
use std::path::Path;
use std::time::Instant;

/// A weight matrix `W` (K x N, `y = x W`) packed for an int8-activation kernel.
pub struct Int8Matrix {
    layout: I8Layout,
    packed: I8Packed,
    gemv: I8KernelEntry,
    gemm: I8KernelEntry,
    repack_seconds: f64,
}

impl std::fmt::Debug for Int8Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Int8Matrix")
            .field("k", &self.layout.k)
            .field("n", &self.layout.n)
            .field("bits", &self.layout.bits)
            .field("gemv", &self.gemv.name)
            .field("gemm", &self.gemm.name)
            .finish()
    }
}

impl Int8Matrix {
    /// Packs GGUF Q4_0 / Q8_0 / IQ4_NL weights for the best kernel of the
    /// built-in registry.
    pub fn from_ggml(m: &GgmlMatrix) -> Result<Int8Matrix, Error> {
        let forced = std::env::var(crate::FORCE_ISA_ENV)
            .ok()
            .filter(|s| !s.is_empty());
        Self::from_ggml_isa(Registry::builtin(), m, forced.as_deref())
    }

    /// Packs for `registry`'s kernels with `isa` forced (`None`: the best here).
    pub fn from_ggml_isa(
        registry: &Registry,
        m: &GgmlMatrix,
        isa: Option<&str>,
    ) -> Result<Int8Matrix, Error> {
        m.validate()?;
        if m.dtype.format().int8.is_none() {
            return Err(Error::Format(format!(
                "{} weights have no int8 kernel (int8 formats: {}); use QuantMatrix for GPTQ and f32",
                m.dtype,
                kgen::format::int8_formats()
                    .map(|f| f.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let format = m.dtype.tag();
        let (gemv, gemm) = registry.select_i8_format(format, isa)?;
        Self::from_ggml_kernels(m, gemv, gemm)
    }

    /// Packs for an explicit pair of kernels (same layout, runnable here).
    pub fn from_ggml_kernels(
        m: &GgmlMatrix,
        gemv: I8KernelEntry,
        gemm: I8KernelEntry,
    ) -> Result<Int8Matrix, Error> {
        m.validate()?;
        for e in [&gemv, &gemm] {
            let want = kgen::format::by_tag(e.format).map_or(e.format, |f| f.name);
            if e.format != m.dtype.tag() {
                return Err(Error::NoKernel(format!(
                    "kernel {} reads {want}, the matrix is {}",
                    e.name, m.dtype
                )));
            }
            if !(e.detect)() {
                return Err(Error::NoKernel(format!(
                    "kernel {} needs {:?}, which this CPU lacks",
                    e.name, e.features
                )));
            }
        }
        if !gemv.same_layout(&gemm) {
            return Err(Error::NoKernel(format!(
                "kernels {} and {} read different layouts",
                gemv.name, gemm.name
            )));
        }
        let layout = I8Layout::new(m.dtype, gemv.lanes, gemv.t_u, gemv.m_b, gemv.t_b, m.k, m.n)
            .grouped(gemv.group_bytes, gemv.signed);
        let t0 = Instant::now();
        let packed = layout.repack_threads(m, pool::global().threads());
        let repack_seconds = t0.elapsed().as_secs_f64();
        if std::env::var_os("KGEN_LOG").is_some() {
            eprintln!(
                "kgen: repacked {}x{} {} as {} for {} in {:.2} ms",
                m.k,
                m.n,
                m.dtype,
                layout.name(),
                gemv.name,
                repack_seconds * 1e3
            );
        }
        Ok(Int8Matrix {
            layout,
            packed,
            gemv,
            gemm,
            repack_seconds,
        })
    }

    /// Quantizes f32 weights (`k x n` row-major) to symmetric `bits` (4 or 8)
    /// levels with one scale per `group` (32, 64, 128 or 256) values along K.
    /// Group 32 is exactly GGUF Q4_0 / Q8_0.
    pub fn from_f32(
        w: &[f32],
        k: usize,
        n: usize,
        bits: u32,
        group: usize,
    ) -> Result<Int8Matrix, Error> {
        if bits != 4 && bits != 8 {
            return Err(Error::Format(format!(
                "int8 kernels take 4- or 8-bit weights, not {bits}"
            )));
        }
        if ![32, 64, 128, 256].contains(&group) {
            return Err(Error::Format(format!(
                "symmetric group {group}: use 32, 64, 128 or 256"
            )));
        }
        if k == 0 || n == 0 || w.len() != k * n {
            return Err(Error::Shape(format!(
                "{} weights given for a {k}x{n} matrix",
                w.len()
            )));
        }
        if let Some(v) = w.iter().find(|v| !v.is_finite()) {
            return Err(Error::Format(format!("weight {v} is not finite")));
        }
        let mut m = Self::from_ggml(&quantize_symmetric(w, k, n, bits, group))?;
        // K was padded to whole blocks with zero weights; keep the caller's K.
        m.layout.k = k;
        Ok(m)
    }

    /// Loads a Q4_0 / Q8_0 / IQ4_NL tensor from a GGUF file.
    pub fn from_gguf(path: &Path, tensor: &str) -> Result<Int8Matrix, Error> {
        let file = GgufFile::open(path).map_err(|e| Error::Load(e.to_string()))?;
        let m = file
            .matrix(tensor)
            .map_err(|e| Error::Load(e.to_string()))?;
        Self::from_ggml(&m)
    }

    pub fn k(&self) -> usize {
        self.layout.k
    }

    pub fn n(&self) -> usize {
        self.layout.n
    }

    pub fn gemv_kernel(&self) -> &I8KernelEntry {
        &self.gemv
    }

    pub fn gemm_kernel(&self) -> &I8KernelEntry {
        &self.gemm
    }

    pub fn repack_seconds(&self) -> f64 {
        self.repack_seconds
    }

    /// Packed weight and scale bytes (what a GEMV streams).
    pub fn weight_bytes(&self) -> usize {
        self.layout.bytes() + 2 * self.packed.sc.len()
    }

    pub fn gemv(&self, x: &[f32], y: &mut [f32]) -> Result<(), Error> {
        self.gemm_on(pool::global(), x, 1, y)
    }

    pub fn gemm(&self, x: &[f32], m: usize, y: &mut [f32]) -> Result<(), Error> {
        self.gemm_on(pool::global(), x, m, y)
    }

    /// `y = x W` for `m` rows on `pool`: activations are quantized to int8 per
    /// 32-block first (Q8_0 arithmetic), then the kernel runs over column
    /// panels split across the pool's threads.
    pub fn gemm_on(&self, pool: &Pool, x: &[f32], m: usize, y: &mut [f32]) -> Result<(), Error> {
        let l = &self.layout;
        crate::panels::check_shape(l.k, l.n, m, x.len(), y.len())?;
        let kernel = if m == 1 { &self.gemv } else { &self.gemm };
        let fmt = ActFormat {
            row_pairs: kernel.row_pairs,
            scale: l.x_scale(),
            ..ActFormat::plain(l.format)
        };
        let xa = quantize_activations_as(x, m, l.k, l.k_pad, fmt);
        let (w, sc) = (
            self.packed.w.as_bytes().as_ptr() as usize,
            self.packed.sc.as_ptr() as usize,
        );
        let (xq, xd, xc) = (
            xa.q.as_ptr() as usize,
            xa.d.as_ptr() as usize,
            xa.c.as_ptr() as usize,
        );
        let run = kernel.run;
        let (k_pad, n_pad) = (l.k_pad, l.n_pad);
        debug_assert_eq!(k_pad % QK, 0);
        crate::panels::over_panels(pool, l.panels(), m, l.n, n_pad, y, |y, p0, p1| {
            // SAFETY: the kernel was selected by feature detection and the
            // buffers have the layout's sizes; each call writes only panels p0..p1.
            unsafe {
                run(
                    w as *const u8,
                    sc as *const u16,
                    xq as *const i8,
                    xd as *const f32,
                    xc as *const i32,
                    y,
                    m,
                    k_pad,
                    n_pad,
                    p0,
                    p1,
                )
            }
        });
        Ok(())
    }
}
