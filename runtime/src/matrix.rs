//! The packed quantized matrix and its products.

use crate::dispatch::Registry;
use crate::error::Error;
use crate::gptq_file::{self, GptqOptions};
use crate::kernel::KernelEntry;
use crate::pool::{self, Pool};
use kgen::format::gptq::GptqMatrix;
use kgen::layout::f32::{Layout, Packed, Tiling};
use kgen::spec::Group;
use std::path::Path;
use std::time::Instant;

/// A weight matrix `W` (K x N, `y = x W`) packed for one kernel.
pub struct QuantMatrix {
    layout: Layout,
    packed: Packed,
    gemv: KernelEntry,
    gemm: KernelEntry,
    /// Act-order: row `j` of the packed matrix is row `perm[j]` of the original.
    perm: Option<Vec<u32>>,
    zcurve: bool,
    repack_seconds: f64,
}

impl std::fmt::Debug for QuantMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantMatrix")
            .field("k", &self.layout.k)
            .field("n", &self.layout.n)
            .field("bits", &self.layout.bits)
            .field("group", &self.layout.group)
            .field("gemv", &self.gemv.name)
            .field("gemm", &self.gemm.name)
            .finish()
    }
}

fn log_enabled() -> bool {
    std::env::var_os("KGEN_LOG").is_some()
}

impl QuantMatrix {
    /// Packs a GPTQ matrix for the best kernel of the built-in registry.
    pub fn from_gptq(m: &GptqMatrix) -> Result<QuantMatrix, Error> {
        Self::from_gptq_with(Registry::builtin(), m, None)
    }

    /// Packs a GPTQ matrix for the best kernel of `registry`. `perm` is an
    /// act-order row permutation (see [`gptq_file::GptqLayer`]).
    pub fn from_gptq_with(
        registry: &Registry,
        m: &GptqMatrix,
        perm: Option<Vec<u32>>,
    ) -> Result<QuantMatrix, Error> {
        let forced = std::env::var(crate::FORCE_ISA_ENV)
            .ok()
            .filter(|s| !s.is_empty());
        Self::from_gptq_isa(registry, m, perm, forced.as_deref())
    }

    /// As [`QuantMatrix::from_gptq_with`] with the ISA chosen by the caller
    /// (`None`: the best this CPU runs) instead of `KGEN_FORCE_ISA`.
    pub fn from_gptq_isa(
        registry: &Registry,
        m: &GptqMatrix,
        perm: Option<Vec<u32>>,
        isa: Option<&str>,
    ) -> Result<QuantMatrix, Error> {
        let (gemv, gemm) = registry.select_isa(m.bits, m.group, isa)?;
        Self::from_gptq_kernels(m, perm, gemv, gemm)
    }

    /// Packs for an explicitly chosen pair of kernels (they must share a
    /// layout and run on this CPU): what `kgen tune` times candidates with.
    pub fn from_gptq_kernels(
        m: &GptqMatrix,
        perm: Option<Vec<u32>>,
        gemv: KernelEntry,
        gemm: KernelEntry,
    ) -> Result<QuantMatrix, Error> {
        m.validate()?;
        if let Some(p) = &perm {
            let mut seen = vec![false; m.k];
            if p.len() != m.k
                || !p
                    .iter()
                    .all(|&i| (i as usize) < m.k && !std::mem::replace(&mut seen[i as usize], true))
            {
                return Err(Error::Format(format!(
                    "act-order permutation is not a permutation of 0..{}",
                    m.k
                )));
            }
        }
        let group = m.group.size().unwrap_or(0);
        for e in [&gemv, &gemm] {
            if (e.bits, e.group) != (m.bits, group) {
                return Err(Error::NoKernel(format!(
                    "kernel {} is for {}-bit group {}, the matrix is {}-bit group {}",
                    e.name, e.bits, e.group, m.bits, m.group
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
        let tiling = Tiling {
            lanes: gemv.lanes,
            t_u: gemv.t_u,
            m_b: gemv.m_b,
            t_b: gemv.t_b,
        };
        let layout = Layout::new(m.bits, m.group, tiling, m.k, m.n);
        let t0 = Instant::now();
        let packed = layout.repack(m);
        let repack_seconds = t0.elapsed().as_secs_f64();
        if log_enabled() {
            eprintln!(
                "kgen: repacked {}x{} {}-bit group {} for {} in {:.2} ms",
                m.k,
                m.n,
                m.bits,
                m.group,
                gemv.name,
                repack_seconds * 1e3
            );
        }
        Ok(QuantMatrix {
            layout,
            packed,
            gemv,
            gemm,
            perm,
            zcurve: gemv.zcurve,
            repack_seconds,
        })
    }

    /// Quantizes f32 weights (`k x n` row-major) round-to-nearest per group.
    pub fn from_f32(
        w: &[f32],
        k: usize,
        n: usize,
        bits: u32,
        group: Group,
    ) -> Result<QuantMatrix, Error> {
        Self::check_format(bits, group)?;
        if k == 0 || n == 0 || w.len() != k * n {
            return Err(Error::Shape(format!(
                "{} weights given for a {k}x{n} matrix",
                w.len()
            )));
        }
        if let Some(v) = w.iter().find(|v| !v.is_finite()) {
            return Err(Error::Format(format!("weight {v} is not finite")));
        }
        Self::from_gptq(&GptqMatrix::quantize_rtn(k, n, bits, group, w))
    }

    /// Builds from raw GPTQ-packed buffers: `qweight` (`k*bits/32` rows x `n`,
    /// K padded to whole 32-value units), `scales` and `zeros` (`groups x n`,
    /// zeros in the `s * (q - z)` convention).
    pub fn from_raw(
        k: usize,
        n: usize,
        bits: u32,
        group: Group,
        qweight: Vec<u32>,
        scales: Vec<f32>,
        zeros: Vec<f32>,
    ) -> Result<QuantMatrix, Error> {
        Self::check_format(bits, group)?;
        let m = GptqMatrix {
            k,
            n,
            bits,
            group,
            qweight,
            scales,
            zeros,
        };
        m.validate()?;
        if let Some(z) = m
            .zeros
            .iter()
            .find(|&&z| z < 0.0 || z > ((1u32 << bits) - 1) as f32 + 1.0)
        {
            return Err(Error::Format(format!(
                "zero point {z} is outside the {bits}-bit levels"
            )));
        }
        Self::from_gptq(&m)
    }

    /// Loads one GPTQ layer (`{prefix}.qweight`, `.qzeros`, `.scales`, optional
    /// `.g_idx`) from a safetensors file.
    pub fn from_gptq_file(
        path: &Path,
        prefix: &str,
        opts: &GptqOptions,
    ) -> Result<QuantMatrix, Error> {
        let layer = gptq_file::load_gptq(path, prefix, opts)?;
        Self::from_gptq_with(Registry::builtin(), &layer.matrix, layer.perm)
    }

    fn check_format(bits: u32, group: Group) -> Result<(), Error> {
        kgen::spec::KernelSpec::new(kgen::spec::Op::Gemv, bits, group)
            .map(|_| ())
            .map_err(|e| Error::Format(e.to_string()))
    }

    pub fn k(&self) -> usize {
        self.layout.k
    }

    pub fn n(&self) -> usize {
        self.layout.n
    }

    /// The GEMV kernel this matrix dispatches to.
    pub fn gemv_kernel(&self) -> &KernelEntry {
        &self.gemv
    }

    /// The GEMM kernel this matrix dispatches to.
    pub fn gemm_kernel(&self) -> &KernelEntry {
        &self.gemm
    }

    /// Seconds the repack into the kernel's layout took.
    pub fn repack_seconds(&self) -> f64 {
        self.repack_seconds
    }

    /// Packed weight bytes (what a GEMV streams).
    pub fn weight_bytes(&self) -> usize {
        self.packed.w.len() * 4
    }

    /// Overrides the plan's block order (both orders compute the same result).
    pub fn set_zcurve(&mut self, zcurve: bool) {
        self.zcurve = zcurve;
    }

    /// `y = x W` for one activation row (`x`: k values, `y`: n values).
    pub fn gemv(&self, x: &[f32], y: &mut [f32]) -> Result<(), Error> {
        self.gemm_on(pool::global(), x, 1, y)
    }

    /// `y = x W` for `m` rows (`x`: m x k row-major, `y`: m x n).
    pub fn gemm(&self, x: &[f32], m: usize, y: &mut [f32]) -> Result<(), Error> {
        self.gemm_on(pool::global(), x, m, y)
    }

    /// As [`QuantMatrix::gemm`], on a given pool (its thread count).
    pub fn gemm_on(&self, pool: &Pool, x: &[f32], m: usize, y: &mut [f32]) -> Result<(), Error> {
        let l = &self.layout;
        crate::panels::check_shape(l.k, l.n, m, x.len(), y.len())?;
        let kernel = if m == 1 { &self.gemv } else { &self.gemm };
        // Activations padded to k_pad (and permuted for act-order), plus the
        // per-group sums the eq. 1/2 zero-point terms need.
        let groups = l.groups_pad();
        let gsize = l.k_pad / groups;
        let mut xp = vec![0f32; m * l.k_pad];
        let mut xs = vec![0f32; m * groups];
        for r in 0..m {
            let src = &x[r * l.k..(r + 1) * l.k];
            let dst = &mut xp[r * l.k_pad..r * l.k_pad + l.k];
            match &self.perm {
                Some(p) => dst
                    .iter_mut()
                    .zip(p)
                    .for_each(|(d, &i)| *d = src[i as usize]),
                None => dst.copy_from_slice(src),
            }
            for g in 0..groups {
                let s: f64 = xp[r * l.k_pad + g * gsize..r * l.k_pad + (g + 1) * gsize]
                    .iter()
                    .map(|&v| v as f64)
                    .sum();
                xs[r * groups + g] = s as f32;
            }
            // Pre-scale after the group sums, which need the plain values.
            let row = &mut xp[r * l.k_pad..(r + 1) * l.k_pad];
            for unit in row.chunks_exact_mut(kernel.x_scale.len()) {
                unit.iter_mut()
                    .zip(kernel.x_scale)
                    .for_each(|(v, f)| *v *= f);
            }
        }
        let (w, sc, nz) = (
            self.packed.w.as_ptr() as usize,
            self.packed.sc.as_ptr() as usize,
            self.packed.nz.as_ptr() as usize,
        );
        let (xptr, xsptr) = (xp.as_ptr() as usize, xs.as_ptr() as usize);
        let run = kernel.run;
        let (k_pad, n_pad, zcurve) = (l.k_pad, l.n_pad, self.zcurve);
        crate::panels::over_panels(pool, l.panels(), m, l.n, n_pad, y, |y, p0, p1| {
            // SAFETY: the kernel was selected by feature detection; the buffers
            // have the layout's sizes (checked above and by construction); each
            // call writes only panels p0..p1 of y.
            unsafe {
                run(
                    w as *const u32,
                    sc as *const f32,
                    nz as *const f32,
                    xptr as *const f32,
                    xsptr as *const f32,
                    y,
                    m,
                    k_pad,
                    n_pad,
                    p0,
                    p1,
                    zcurve,
                )
            }
        });
        Ok(())
    }
}
