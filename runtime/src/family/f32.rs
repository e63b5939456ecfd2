//! The f32 family's back-end of [`crate::Matrix`]: GPTQ weights repacked
//! for the QIGen kernels, f32 activations.

use crate::error::Error;
use crate::kernel::{F32Params, KernelEntry};
use crate::pool::Pool;
use kgen::format::gptq::GptqMatrix;
use kgen::layout::f32::{Layout, Packed, Tiling};
use std::time::Instant;

/// A weight matrix `W` (K x N, `y = x W`) packed for one f32-family kernel pair.
pub(crate) struct F32Matrix {
    layout: Layout,
    packed: Packed,
    gemv: KernelEntry,
    gemm: KernelEntry,
    gemv_p: F32Params,
    gemm_p: F32Params,
    /// Act-order: row `j` of the packed matrix is row `perm[j]` of the original.
    perm: Option<Vec<u32>>,
    zcurve: bool,
    repack_seconds: f64,
}

fn log_enabled() -> bool {
    std::env::var_os("KGEN_LOG").is_some()
}

impl F32Matrix {
    /// Packs a GPTQ matrix for an explicitly chosen pair of f32-family
    /// kernels (they must share a layout and run on this CPU). `perm` is an
    /// act-order row permutation (see [`crate::GptqLayer`]).
    pub(crate) fn pack(
        m: &GptqMatrix,
        perm: Option<Vec<u32>>,
        gemv: KernelEntry,
        gemm: KernelEntry,
    ) -> Result<F32Matrix, Error> {
        m.validate()?;
        if let Some(p) = &perm {
            crate::gptq_file::check_permutation(p, m.k)?;
        }
        let group = m.group.size().unwrap_or(0);
        let mut params = [None; 2];
        for (slot, e) in params.iter_mut().zip([&gemv, &gemm]) {
            let Some(p) = e.f32() else {
                return Err(Error::NoKernel(format!(
                    "kernel {} is an {} kernel for {}, the matrix is GPTQ {}-bit group {}",
                    e.name,
                    e.family(),
                    e.format,
                    m.bits,
                    m.group
                )));
            };
            if (e.bits, p.group) != (m.bits, group) {
                return Err(Error::NoKernel(format!(
                    "kernel {} is for {}-bit group {}, the matrix is {}-bit group {}",
                    e.name, e.bits, p.group, m.bits, m.group
                )));
            }
            if !(e.detect)() {
                return Err(Error::NoKernel(format!(
                    "kernel {} needs {:?}, which this CPU lacks",
                    e.name, e.features
                )));
            }
            *slot = Some(*p);
        }
        if !gemv.same_layout(&gemm) {
            return Err(Error::NoKernel(format!(
                "kernels {} and {} read different layouts",
                gemv.name, gemm.name
            )));
        }
        let [Some(gemv_p), Some(gemm_p)] = params else {
            unreachable!("both checked above")
        };
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
        Ok(F32Matrix {
            layout,
            packed,
            gemv,
            gemm,
            gemv_p,
            gemm_p,
            perm,
            zcurve: gemv_p.zcurve,
            repack_seconds,
        })
    }

    pub(crate) fn k(&self) -> usize {
        self.layout.k
    }

    pub(crate) fn n(&self) -> usize {
        self.layout.n
    }

    /// The GEMV kernel this matrix dispatches to.
    pub(crate) fn gemv_kernel(&self) -> &KernelEntry {
        &self.gemv
    }

    /// The GEMM kernel this matrix dispatches to.
    pub(crate) fn gemm_kernel(&self) -> &KernelEntry {
        &self.gemm
    }

    /// Seconds the repack into the kernel's layout took.
    pub(crate) fn repack_seconds(&self) -> f64 {
        self.repack_seconds
    }

    /// Packed weight bytes (what a GEMV streams).
    pub(crate) fn weight_bytes(&self) -> usize {
        self.packed.w.len() * 4
    }

    /// Overrides the plan's block order (both orders compute the same result).
    pub(crate) fn set_zcurve(&mut self, zcurve: bool) {
        self.zcurve = zcurve;
    }

    /// `y = x W` for `m` rows (`x`: m x k row-major, `y`: m x n) on `pool`.
    pub(crate) fn gemm_on(
        &self,
        pool: &Pool,
        x: &[f32],
        m: usize,
        y: &mut [f32],
    ) -> Result<(), Error> {
        let l = &self.layout;
        crate::panels::check_shape(l.k, l.n, m, x.len(), y.len())?;
        if m == 0 {
            // An empty batch: nothing to compute and nothing to write.
            return Ok(());
        }
        let kernel = if m == 1 { &self.gemv_p } else { &self.gemm_p };
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
        let entry = if m == 1 { &self.gemv } else { &self.gemm };
        crate::panels::over_panels(
            pool,
            entry,
            k_pad,
            l.panels(),
            m,
            l.n,
            n_pad,
            y,
            |y, p0, p1| {
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
            },
        );
        Ok(())
    }
}
