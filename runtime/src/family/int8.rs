//! The int8 family's back-end of [`crate::Matrix`]: GGUF Q4_0 / Q8_0 /
//! IQ4_NL weights (or kgen's own symmetric 4/8-bit groups) repacked for the
//! int8-activation kernels, activations quantized per call.

use crate::act::{self, ActQuantizer};
use crate::error::Error;
use crate::kernel::{Int8Params, KernelEntry};
use crate::pool::{self, Pool};
use kgen::format::ggml::{GgmlView, QK};
use kgen::layout::act::{ActFormat, QuantizedActivations};
use kgen::layout::int8::{I8Layout, I8Packed};
use std::sync::Arc;
use std::time::Instant;

/// A weight matrix `W` (K x N, `y = x W`) packed for an int8-activation kernel.
pub(crate) struct Int8Matrix {
    layout: I8Layout,
    /// Shared with the pool's workers for the length of their claims (see
    /// [`crate::panels::over_panels_owned`]).
    packed: Arc<I8Packed>,
    gemv: KernelEntry,
    gemm: KernelEntry,
    gemv_p: Int8Params,
    gemm_p: Int8Params,
    /// Activation quantizers compiled for the GEMV's and the GEMM's ISA.
    act: [ActQuantizer; 2],
    /// Act-order (GPTQ): row `j` of the packed matrix is row `perm[j]` of
    /// the caller's, so activations are gathered in that order first.
    perm: Option<Arc<[u32]>>,
    /// Zero-point terms the blocks cannot hold (8-bit GPTQ), added in f32
    /// after the kernel (see [`GroupMins`]).
    group_mins: Option<GroupMins>,
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
    /// Packs GGUF-block weights for an explicit pair of int8-family kernels
    /// (same layout, runnable here). `m`'s shape has been validated
    /// ([`kgen::format::ggml::GgmlMatrix::validate_shape`]); its blocks are
    /// checked as the repack reads them
    /// ([`kgen::layout::int8::I8Layout::repack_checked`]), so a mapped
    /// file's bytes are read once, not once to validate and again to
    /// repack; a bad block is the only `Error::Format` this returns
    /// (callers word it as the file's error). `k` is the caller's K: `m.k` rounded up
    /// to whole blocks of the format (32 values, or 256 for super-blocks)
    /// with zero weights, as [`crate::Matrix::from_f32`] quantizes;
    /// activations are padded the same way.
    pub(crate) fn pack(
        m: &GgmlView<'_>,
        k: usize,
        gemv: KernelEntry,
        gemm: KernelEntry,
    ) -> Result<Int8Matrix, Error> {
        // Padding fills the last block (32 values; the K-quants' and TQ
        // formats' 256-value super-blocks).
        let block = m.dtype.block_values().max(QK);
        if k > m.k || m.k - k >= block {
            return Err(Error::Shape(format!(
                "K = {k} is not the {} rows of the matrix less padding to a {block}-value block",
                m.k
            )));
        }
        let mut params = [None; 2];
        for (slot, e) in params.iter_mut().zip([&gemv, &gemm]) {
            let Some(p) = e.int8() else {
                return Err(Error::NoKernel(format!(
                    "kernel {} is an {} kernel for {}, the matrix is {}",
                    e.name,
                    e.family(),
                    e.format,
                    m.dtype
                )));
            };
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
        let mut layout = I8Layout::new(m.dtype, gemv.lanes, gemv.t_u, gemv.m_b, gemv.t_b, m.k, m.n)
            .read_at(gemv.bits)
            .grouped(gemv_p.group_bytes, gemv_p.signed)
            .int_sub_scales(gemv_p.int_scales)
            .group_scales(gemv_p.group_scales);
        let t0 = Instant::now();
        let packed = layout.repack_checked(m, pool::side_threads())?;
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
        // K was padded to whole blocks with zero weights; keep the caller's K.
        layout.k = k;
        Ok(Int8Matrix {
            layout,
            packed: Arc::new(packed),
            gemv,
            gemm,
            gemv_p,
            gemm_p,
            act: [act::for_kernel(&gemv), act::for_kernel(&gemm)],
            perm: None,
            group_mins: None,
            repack_seconds,
        })
    }

    pub(crate) fn k(&self) -> usize {
        self.layout.k
    }

    pub(crate) fn n(&self) -> usize {
        self.layout.n
    }

    pub(crate) fn gemv_kernel(&self) -> &KernelEntry {
        &self.gemv
    }

    pub(crate) fn gemm_kernel(&self) -> &KernelEntry {
        &self.gemm
    }

    /// The activation quantizer a call with `m` rows uses.
    pub(crate) fn act_quantizer(&self, m: usize) -> &'static str {
        self.act[usize::from(m != 1)].name
    }

    pub(crate) fn repack_seconds(&self) -> f64 {
        self.repack_seconds
    }

    /// Packed weight and scale bytes (what a GEMV streams).
    pub(crate) fn weight_bytes(&self) -> usize {
        self.layout.bytes() + 2 * self.packed.sc.len()
    }

    pub(crate) fn weights_in_arena(&self) -> bool {
        self.packed.w.in_arena()
    }

    /// Sets an act-order permutation (see [`Int8Matrix::perm`]).
    pub(crate) fn set_perm(&mut self, perm: Option<Vec<u32>>) -> Result<(), Error> {
        if let Some(p) = &perm {
            crate::gptq_file::check_permutation(p, self.layout.k)?;
        }
        self.perm = perm.map(Arc::from);
        Ok(())
    }

    /// Sets the zero-point terms (see [`GroupMins`]).
    pub(crate) fn set_group_mins(&mut self, mins: GroupMins) -> Result<(), Error> {
        let l = &self.layout;
        let groups = l.k_pad.div_ceil(mins.group);
        if !mins.group.is_multiple_of(QK) || mins.c.len() != groups * l.n {
            return Err(Error::Shape(format!(
                "group terms for groups of {} hold {} values, a {}x{} matrix needs {}",
                mins.group,
                mins.c.len(),
                l.k,
                l.n,
                groups * l.n
            )));
        }
        self.group_mins = Some(mins);
        Ok(())
    }

    /// How this matrix's kernel for `m` rows reads its activations.
    pub(crate) fn act_format(&self, m: usize) -> ActFormat {
        let kernel = if m == 1 { &self.gemv_p } else { &self.gemm_p };
        ActFormat {
            row_pairs: kernel.row_pairs,
            scale: self.layout.x_scale(),
            ..ActFormat::plain(self.layout.format)
        }
    }

    /// `m` rows of `x` quantized as this matrix's kernels read them.
    pub(crate) fn quantize_input(&self, x: &[f32], m: usize) -> QuantizedInput {
        let l = &self.layout;
        let fmt = self.act_format(m);
        let mut xa = QuantizedActivations::default();
        let gathered: Vec<f32>;
        let x = match &self.perm {
            Some(p) => {
                gathered = (0..m)
                    .flat_map(|r| p.iter().map(move |&i| x[r * l.k + i as usize]))
                    .collect();
                &gathered[..]
            }
            None => x,
        };
        if m > 0 {
            self.act[usize::from(m != 1)].quantize(x, m, l.k, l.k_pad, fmt, &mut xa);
        }
        // f32 sums per 32-block of the padded K (0 past K), for the
        // zero-point terms.
        let sums = match self.group_mins {
            Some(_) => x
                .chunks_exact(l.k)
                .flat_map(|row| {
                    row.chunks(QK)
                        .map(|b| b.iter().sum::<f32>())
                        .chain(std::iter::repeat(0.0))
                        .take(l.k_pad / QK)
                })
                .collect(),
            None => Vec::new(),
        };
        QuantizedInput {
            fmt,
            k: l.k,
            m,
            perm: self.perm.clone(),
            sums,
            xa: Arc::new(xa),
        }
    }

    /// Whether `input` was quantized the way this matrix reads it: same K,
    /// activation format and act-order permutation, with the block sums
    /// its zero-point terms need.
    pub(crate) fn accepts(&self, input: &QuantizedInput) -> bool {
        let same_perm = match (&self.perm, &input.perm) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        };
        // The padded K too: it depends on the format's block (32, or 256
        // for super-block formats), and the kernels read whole rows of it.
        input.k == self.layout.k
            && input.fmt == self.act_format(input.m)
            && input.xa.q.len() == input.fmt.stored_rows(input.m) * self.layout.k_pad
            && same_perm
            && (self.group_mins.is_none() || input.sums.len() == input.m * self.layout.k_pad / QK)
    }

    /// `y = x W` for `m` rows on `pool`: activations are quantized to int8 per
    /// 32-block first (Q8_0 arithmetic; the K-quants: one scale per 256
    /// values, Q8_K's), then the kernel runs over column panels split
    /// across the pool's threads.
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
        self.gemm_quantized(pool, &self.quantize_input(x, m), y)
    }

    /// [`Int8Matrix::gemm_on`] on activations already quantized for it.
    pub(crate) fn gemm_quantized(
        &self,
        pool: &Pool,
        input: &QuantizedInput,
        y: &mut [f32],
    ) -> Result<(), Error> {
        let l = &self.layout;
        let m = input.m;
        crate::panels::check_shape(l.k, l.n, m, m * input.k, y.len())?;
        if !self.accepts(input) {
            return Err(Error::Shape(format!(
                "activations quantized for K = {} ({:?}, act-order {}) do not fit this matrix \
                 (K = {}, {:?}, act-order {}{}): quantize them with this matrix's quantize_input",
                input.k,
                input.fmt,
                input.perm.is_some(),
                l.k,
                self.act_format(m),
                self.perm.is_some(),
                if self.group_mins.is_some() {
                    ", zero-point sums"
                } else {
                    ""
                }
            )));
        }
        if m == 0 {
            return Ok(());
        }
        let kernel = if m == 1 { &self.gemv_p } else { &self.gemm_p };
        let (packed, xa) = (Arc::clone(&self.packed), Arc::clone(&input.xa));
        let run = kernel.run;
        let (k_pad, n_pad) = (l.k_pad, l.n_pad);
        debug_assert_eq!(xa.q.len() % k_pad, 0);
        debug_assert_eq!(k_pad % QK, 0);
        let entry = if m == 1 { &self.gemv } else { &self.gemm };
        crate::panels::over_panels_owned(
            pool,
            entry,
            k_pad,
            l.panels(),
            m,
            l.n,
            n_pad,
            y,
            Arc::new(move |y, p0, p1| {
                // SAFETY: the kernel was selected by feature detection, the
                // buffers have the layout's sizes and live as long as this
                // closure; each call writes only panels p0..p1 of `y`.
                unsafe {
                    run(
                        packed.w.as_bytes().as_ptr(),
                        packed.sc.as_ptr(),
                        xa.q.as_ptr(),
                        xa.d.as_ptr(),
                        xa.c.as_ptr(),
                        y,
                        m,
                        k_pad,
                        n_pad,
                        p0,
                        p1,
                    )
                }
            }),
        );
        if let Some(gm) = &self.group_mins {
            gm.add(&input.sums, m, k_pad / QK, l.n, y);
        }
        Ok(())
    }
}

impl Int8Matrix {
    /// Whether [`Int8Matrix::gemv_many`] can run `self` beside `other`:
    /// the same shape, layout and GEMV kernel, and no act-order or
    /// zero-point terms (GGUF tensors have neither).
    fn fuses_with(&self, other: &Int8Matrix) -> bool {
        let (a, b) = (&self.layout, &other.layout);
        (a.k, a.n, a.k_pad, a.n_pad, a.t_b) == (b.k, b.n, b.k_pad, b.n_pad, b.t_b)
            && self.gemv.name == other.gemv.name
            && self.perm.is_none()
            && other.perm.is_none()
            && self.group_mins.is_none()
            && other.group_mins.is_none()
    }

    /// `y[i] = x_i W_i` for several matrices that
    /// [fuse](Int8Matrix::fuses_with) (a mixture-of-experts layer's picked
    /// experts), each with one activation row quantized for it (`inputs`:
    /// one row for all, or one per matrix), in one pool call: their column
    /// panels are claimed from one range, so the threads meet once for all
    /// of them, not once per matrix, and a thread done with one matrix's
    /// panels goes on to the next. `y` is `mats.len()` rows of N.
    /// `Ok(false)`, with nothing written, if the matrices do not fuse or an
    /// input is not one row its matrix accepts.
    pub(crate) fn gemv_many(
        pool: &Pool,
        mats: &[&Int8Matrix],
        inputs: &[&QuantizedInput],
        y: &mut [f32],
    ) -> Result<bool, Error> {
        let Some(first) = mats.first() else {
            return Ok(true);
        };
        let input = |i: usize| inputs[if inputs.len() == 1 { 0 } else { i }];
        let fused = (inputs.len() == 1 || inputs.len() == mats.len())
            && mats
                .iter()
                .enumerate()
                .all(|(i, m)| first.fuses_with(m) && input(i).m == 1 && m.accepts(input(i)));
        if !fused {
            return Ok(false);
        }
        let l = &first.layout;
        if y.len() != mats.len() * l.n {
            return Err(Error::Shape(format!(
                "y has {} values, {} outputs of {} need {}",
                y.len(),
                mats.len(),
                l.n,
                mats.len() * l.n
            )));
        }
        // Matrix i's panels are panels i * per .. (i + 1) * per of one
        // range, its columns at i * stride of one output row: a panel's
        // columns then sit at panel * t_b, as the claims and the adoption
        // of a late worker's columns assume.
        let (k_pad, n_pad, per) = (l.k_pad, l.n_pad, l.panels());
        let stride = per * l.t_b;
        debug_assert_eq!(first.gemv.t_b, l.t_b);
        let packed: Vec<Arc<I8Packed>> = mats.iter().map(|m| Arc::clone(&m.packed)).collect();
        let xa: Vec<Arc<QuantizedActivations>> = inputs.iter().map(|q| Arc::clone(&q.xa)).collect();
        let run = first.gemv_p.run;
        let mut out = vec![0f32; mats.len() * stride];
        let width = out.len();
        crate::panels::over_panels_owned(
            pool,
            &first.gemv,
            k_pad,
            mats.len() * per,
            1,
            width,
            width,
            &mut out,
            Arc::new(move |y, p0, p1| {
                let mut p = p0;
                while p < p1 {
                    let (i, end) = (p / per, p1.min((p / per + 1) * per));
                    let (w, xa) = (&packed[i], &xa[if xa.len() == 1 { 0 } else { i }]);
                    // SAFETY: as in `gemm_quantized`, for matrix i: its
                    // kernel was selected by feature detection, the buffers
                    // have its layout's sizes and live as long as this
                    // closure, and the call writes only its panels
                    // p - i * per .. end - i * per, whose columns lie in
                    // i * stride .. (i + 1) * stride of the output row.
                    unsafe {
                        run(
                            w.w.as_bytes().as_ptr(),
                            w.sc.as_ptr(),
                            xa.q.as_ptr(),
                            xa.d.as_ptr(),
                            xa.c.as_ptr(),
                            y.add(i * stride),
                            1,
                            k_pad,
                            n_pad,
                            p - i * per,
                            end - i * per,
                        )
                    }
                    p = end;
                }
            }),
        );
        for (row, o) in y.chunks_exact_mut(l.n.max(1)).zip(out.chunks_exact(stride)) {
            row.copy_from_slice(&o[..l.n]);
        }
        Ok(true)
    }
}

/// Zero-point terms of a format whose blocks hold only a scale (8-bit GPTQ
/// on Q8_0 blocks): `W[i][j] = s (q - z) = s (q - 128) + s (128 - z)`, the
/// first part in the blocks, the second, `c[g][j] = s (128 - z)` per group
/// `g` of `group` values and column `j`, here. The kernel's `y` gets
/// `sum_g X[g] c[g][j]` added, `X[g]` the f32 sum of the group's
/// activations: `groups / K` of the kernel's work (1/128 for g128).
pub(crate) struct GroupMins {
    /// Values per group along K (a multiple of 32; K rounded up for a
    /// single group per column).
    pub(crate) group: usize,
    /// `groups x N`, row-major.
    pub(crate) c: Vec<f32>,
}

impl GroupMins {
    /// Adds the terms to `y` (`m x n`) from `sums`, the f32 sums of each
    /// 32-block of the (permuted) activations (`m x blocks`).
    fn add(&self, sums: &[f32], m: usize, blocks: usize, n: usize, y: &mut [f32]) {
        let per = self.group / QK;
        for (row, y) in sums.chunks_exact(blocks).zip(y.chunks_exact_mut(n)).take(m) {
            for (g, c) in self.c.chunks_exact(n).enumerate() {
                let x: f32 = row[(g * per).min(blocks)..((g + 1) * per).min(blocks)]
                    .iter()
                    .sum();
                for (y, c) in y.iter_mut().zip(c) {
                    *y += x * c;
                }
            }
        }
    }
}

/// Activations quantized once for every int8 matrix whose kernels read them
/// the same way (see [`crate::Matrix::quantize_input`]).
pub(crate) struct QuantizedInput {
    pub(crate) fmt: ActFormat,
    pub(crate) k: usize,
    pub(crate) m: usize,
    /// The act-order permutation the rows were gathered by.
    pub(crate) perm: Option<Arc<[u32]>>,
    /// f32 sums per 32-block (`m x K_pad / 32`), for matrices with
    /// [`GroupMins`]; empty otherwise.
    pub(crate) sums: Vec<f32>,
    /// Shared with the pool's workers, as the weights are.
    pub(crate) xa: Arc<QuantizedActivations>,
}
