//! [`Matrix`]: a weight matrix in any format, packed for the best kernel
//! this CPU runs, whatever the family.

use crate::dispatch::Registry;
use crate::error::Error;
use crate::family::{
    f32::F32Matrix,
    int8::{GroupMins, Int8Matrix, QuantizedInput},
};
use crate::format::{Family, WeightFormat};
use crate::gguf::GgufFile;
use crate::gptq_file::{self, GptqLayer, GptqOptions};
use crate::kernel::KernelEntry;
use crate::pool::{self, Pool};
use kgen::format::ggml::q4_0::q4_0_pack;
use kgen::format::ggml::{GgmlMatrix, GgmlType, GgmlView};
use kgen::format::gptq::GptqMatrix;
use kgen::format::symmetric::quantize_symmetric;
use kgen::format::FormatError;
use std::fmt;
use std::path::Path;

/// A weight matrix `W` (K x N, `y = x W`), packed for the kernels that run
/// its format fastest on this CPU.
///
/// Construct it from a GGUF tensor ([`Matrix::from_gguf`],
/// [`Matrix::from_ggml`]), a GPTQ layer ([`Matrix::from_gptq_file`],
/// [`Matrix::from_gptq_layer`], [`Matrix::from_gptq`]) or f32 weights
/// quantized to a [`WeightFormat`] ([`Matrix::from_f32`]); multiply with
/// [`Matrix::gemv`], [`Matrix::gemm`] or [`Matrix::gemm_on`].
///
/// **Which kernel.** The format decides the family
/// ([`WeightFormat::families`]): the GGUF formats of the format table and kgen's
/// symmetric groups run on the int8 family (activations quantized to int8 per
/// 32-block on each call); GPTQ formats, which have zero points, on the f32
/// family, except 4- and 8-bit GPTQ with groups of a multiple of 32 (or
/// per column), which run on the int8 family's `q4_0_g128` kernels (4-bit
/// groups of 128 / 256 / per column) or Q4_1 kernels (zero points as mins)
/// or Q8_0 kernels (8-bit), zero-point terms added after the kernel where
/// there are no mins, wherever those have SIMD dot products on this CPU:
/// faster (3 to 4x for 4-bit), with int8 activations' error. [`Registry::with_family`] picks a
/// family explicitly. Within the family, the best ISA this CPU runs, or
/// the one `KGEN_FORCE_ISA` (or [`Registry::with_isa`]) forces: a forced ISA
/// the CPU or the build lacks is an error. [`Matrix::kernel`] and the
/// `Display` form say what was picked.
///
/// The constructors without `_with` use the kernels built into this crate
/// ([`Registry::builtin`]); the `_with` ones take a registry, e.g. the
/// kernels a downstream `build.rs` generated (`Registry::new(kernels())`).
///
/// Nothing here panics on bad input: shapes, data and formats that do not fit
/// are an [`Error`].
pub struct Matrix {
    format: WeightFormat,
    backend: Backend,
}

enum Backend {
    F32(F32Matrix),
    Int8(Int8Matrix),
}

impl Matrix {
    /// A GGUF tensor of an int8 format of the table (Q4_0, Q5_0, ...) from memory. F32 / F16 tensors are
    /// refused: no kernel runs them, and quantizing silently would hide a
    /// loss of precision; quantize them explicitly with
    /// `Matrix::from_f32(&m.dequantize(), m.k, m.n, format)`.
    pub fn from_ggml(m: &GgmlMatrix) -> Result<Matrix, Error> {
        Self::from_ggml_with(Registry::builtin(), m)
    }

    /// As [`Matrix::from_ggml`], with the kernels of `registry`.
    pub fn from_ggml_with(registry: &Registry, m: &GgmlMatrix) -> Result<Matrix, Error> {
        let format = ggml_format(m)?;
        m.validate_shape()?;
        Self::ggml(registry, &m.view(), format, m.k)
    }

    /// A 2-D tensor of a GGUF file (`dims[0]` is K, `dims[1]` N), in any
    /// format [`Matrix::from_ggml`] takes.
    pub fn from_gguf(path: impl AsRef<Path>, tensor: &str) -> Result<Matrix, Error> {
        Self::from_gguf_with(Registry::builtin(), path, tensor)
    }

    /// As [`Matrix::from_gguf`], with the kernels of `registry`.
    pub fn from_gguf_with(
        registry: &Registry,
        path: impl AsRef<Path>,
        tensor: &str,
    ) -> Result<Matrix, Error> {
        let file = GgufFile::open(path.as_ref()).map_err(|e| Error::Load(e.to_string()))?;
        Self::from_gguf_tensor(registry, &file, tensor)
    }

    /// A 2-D tensor of an open GGUF file (see [`crate::Model`] for a whole
    /// model): only its own bytes are read.
    pub(crate) fn from_gguf_tensor(
        registry: &Registry,
        file: &GgufFile,
        tensor: &str,
    ) -> Result<Matrix, Error> {
        Self::from_gguf_stack(registry, file, tensor, None)
    }

    /// Expert `expert` of a 3-D tensor of an open GGUF file (see
    /// [`crate::Model::experts`]): only that expert's bytes are read.
    pub(crate) fn from_gguf_expert(
        registry: &Registry,
        file: &GgufFile,
        tensor: &str,
        expert: usize,
    ) -> Result<Matrix, Error> {
        Self::from_gguf_stack(registry, file, tensor, Some(expert))
    }

    fn from_gguf_stack(
        registry: &Registry,
        file: &GgufFile,
        tensor: &str,
        expert: Option<usize>,
    ) -> Result<Matrix, Error> {
        let m = match expert {
            None => file.matrix_view_shape(tensor),
            Some(e) => file.expert_view_shape(tensor, e),
        }
        .map_err(|e| Error::Load(e.to_string()))?;
        let format = ggml_format(&m).map_err(|e| {
            Error::Unsupported(format!(
                "{}: tensor {tensor:?}: {}",
                file.path().display(),
                e.message()
            ))
        })?;
        // The repack checks the blocks as it reads them: a bad one is the
        // file's error, worded as `GgufFile::matrix_view` words it.
        Self::ggml(registry, &m, format, m.k).map_err(|e| match e {
            Error::Format(msg) => {
                Error::Load(file.invalid(tensor, expert, &FormatError(msg)).to_string())
            }
            e => e,
        })
    }

    /// A GPTQ matrix, rows in order (see [`Matrix::from_gptq_layer`] for
    /// act-order layers).
    pub fn from_gptq(m: &GptqMatrix) -> Result<Matrix, Error> {
        Self::from_gptq_with(Registry::builtin(), m)
    }

    /// As [`Matrix::from_gptq`], with the kernels of `registry`.
    pub fn from_gptq_with(registry: &Registry, m: &GptqMatrix) -> Result<Matrix, Error> {
        Self::gptq(registry, m, None)
    }

    /// A loaded GPTQ layer, act-order permutation included: the activations
    /// are permuted the same way on every call.
    pub fn from_gptq_layer(layer: GptqLayer) -> Result<Matrix, Error> {
        Self::from_gptq_layer_with(Registry::builtin(), layer)
    }

    /// As [`Matrix::from_gptq_layer`], with the kernels of `registry`.
    pub fn from_gptq_layer_with(registry: &Registry, layer: GptqLayer) -> Result<Matrix, Error> {
        Self::gptq(registry, &layer.matrix, layer.perm)
    }

    /// Loads the GPTQ layer `prefix` (`{prefix}.qweight`, `.qzeros`,
    /// `.scales`, optional `.g_idx`) from a safetensors file.
    pub fn from_gptq_file(
        path: impl AsRef<Path>,
        prefix: &str,
        opts: &GptqOptions,
    ) -> Result<Matrix, Error> {
        Self::from_gptq_file_with(Registry::builtin(), path, prefix, opts)
    }

    /// As [`Matrix::from_gptq_file`], with the kernels of `registry`.
    pub fn from_gptq_file_with(
        registry: &Registry,
        path: impl AsRef<Path>,
        prefix: &str,
        opts: &GptqOptions,
    ) -> Result<Matrix, Error> {
        let layer = gptq_file::load_gptq(path.as_ref(), prefix, opts)?;
        // The file loaded; what the kernels refuse is still about its layer.
        Self::from_gptq_layer_with(registry, layer)
            .map_err(|e| e.prefixed(&format!("{}: layer {prefix:?}: ", path.as_ref().display())))
    }

    /// Quantizes f32 weights (`k x n` row-major) to `format`, a
    /// [`WeightFormat`] or its name (`"q4_0"`, `"q8_0"`, `"iq4_nl"`,
    /// `"4:128"`, `"3:col"`, `"q4_0:128"`): GPTQ formats round to nearest per
    /// group (scale and zero from the group's range), the GGUF ones as
    /// llama.cpp does. K need not be a multiple of 32: the int8 formats pad it
    /// with zero weights to whole blocks (the K-quants and TQ formats to
    /// 256-value super-blocks), and the matrix keeps the caller's K.
    pub fn from_f32<F>(w: &[f32], k: usize, n: usize, format: F) -> Result<Matrix, Error>
    where
        F: TryInto<WeightFormat>,
        Error: From<F::Error>,
    {
        Self::from_f32_with(Registry::builtin(), w, k, n, format)
    }

    /// As [`Matrix::from_f32`], with the kernels of `registry`.
    pub fn from_f32_with<F>(
        registry: &Registry,
        w: &[f32],
        k: usize,
        n: usize,
        format: F,
    ) -> Result<Matrix, Error>
    where
        F: TryInto<WeightFormat>,
        Error: From<F::Error>,
    {
        let format: WeightFormat = format.try_into()?;
        if k == 0 || n == 0 || w.len() != k * n {
            return Err(Error::Shape(format!(
                "{} weights given for a {k}x{n} matrix",
                w.len()
            )));
        }
        if let Some(v) = w.iter().find(|v| !v.is_finite()) {
            return Err(Error::Format(format!("weight {v} is not finite")));
        }
        let g = match format {
            WeightFormat::Gptq { bits, group } => {
                return Self::gptq(
                    registry,
                    &GptqMatrix::quantize_rtn(k, n, bits, group, w),
                    None,
                )
            }
            WeightFormat::Symmetric { bits, group } => quantize_symmetric(w, k, n, bits, group),
            // The table format's own reference quantizer, K padded with zeros
            // to whole blocks.
            WeightFormat::Ggml(t) => {
                let k_pad = k.next_multiple_of(t.block_values());
                let mut wp = w.to_vec();
                wp.resize(k_pad * n, 0.0);
                GgmlMatrix::quantize(&wp, k_pad, n, t)
            }
        };
        g.validate_shape()?;
        Self::ggml(registry, &g.view(), format, k)
    }

    /// Packs a GPTQ matrix for an explicit pair of f32-family kernels (same
    /// layout, runnable on this CPU): how `kgen tune` and the tests time and
    /// check one kernel. Usual code lets the constructors above choose.
    pub fn from_gptq_kernels(
        m: &GptqMatrix,
        gemv: KernelEntry,
        gemm: KernelEntry,
    ) -> Result<Matrix, Error> {
        let format = WeightFormat::gptq(m.bits, m.group)?;
        let backend = Backend::F32(F32Matrix::pack(m, None, gemv, gemm)?);
        Ok(Matrix { format, backend })
    }

    /// Packs GGUF-block weights for an explicit pair of int8-family kernels
    /// (same layout, runnable on this CPU). See [`Matrix::from_gptq_kernels`].
    pub fn from_ggml_kernels(
        m: &GgmlMatrix,
        gemv: KernelEntry,
        gemm: KernelEntry,
    ) -> Result<Matrix, Error> {
        let format = ggml_format(m)?;
        m.validate_shape()?;
        let backend = Backend::Int8(Int8Matrix::pack(&m.view(), m.k, gemv, gemm)?);
        Ok(Matrix { format, backend })
    }

    fn gptq(registry: &Registry, m: &GptqMatrix, perm: Option<Vec<u32>>) -> Result<Matrix, Error> {
        let format = WeightFormat::gptq(m.bits, m.group)?;
        let (gemv, gemm) = registry.select_pair(format)?;
        let backend = match gemv.family() {
            Family::F32 => Backend::F32(F32Matrix::pack(m, perm, gemv, gemm)?),
            Family::Int8 => match Self::gptq_int8(m, perm.clone(), format, gemv, gemm) {
                Ok(w) => Backend::Int8(w),
                // Picked by dispatch, not asked for: weights the int8 blocks
                // cannot hold (a scale times zero beyond f16) still run, on
                // the f32 family, if it has a kernel here.
                Err(e @ Error::Unsupported(_)) if registry.family().is_none() => {
                    let f32 = registry.with_family(Some(Family::F32));
                    let Ok((gemv, gemm)) = f32.select_pair(format) else {
                        return Err(e);
                    };
                    Backend::F32(F32Matrix::pack(m, perm, gemv, gemm)?)
                }
                Err(e) => return Err(e),
            },
        };
        Ok(Matrix { format, backend })
    }

    /// 4-bit GPTQ as `q4_0_g128` blocks with their zero-point terms or as
    /// Q4_1 blocks, 8-bit as Q8_0 blocks with their zero-point terms,
    /// whichever the int8-family pair reads; `Unsupported` if the weights
    /// do not fit those blocks.
    fn gptq_int8(
        m: &GptqMatrix,
        perm: Option<Vec<u32>>,
        format: WeightFormat,
        gemv: KernelEntry,
        gemm: KernelEntry,
    ) -> Result<Int8Matrix, Error> {
        m.validate()?;
        // The table format dispatch picked the kernels of
        // (`WeightFormat::families`).
        let kernel_format = kgen::format::by_tag(gemv.format).map(GgmlType);
        let (blocks, mins) = match (m.bits, kernel_format) {
            (4, Some(t)) if t == GgmlType::Q4_1 => gptq_as_q4_1(m).map(|b| (b, None)),
            (4, Some(t)) if t == GgmlType::Q4_0_G128 => {
                gptq_as_q4_0_g128(m).map(|(b, mins)| (b, Some(mins)))
            }
            (8, Some(t)) if t == GgmlType::Q8_0 => gptq_as_q8_0(m).map(|(b, mins)| (b, Some(mins))),
            _ => None,
        }
        .ok_or_else(|| not_packable(format, &gemv))?;
        // The repack checks the converted blocks as it reads them: one
        // that is not finite is a scale (or -scale * zero) beyond f16.
        let mut w = Int8Matrix::pack(&blocks.view(), m.k, gemv, gemm).map_err(|e| match e {
            Error::Format(msg) => Error::Unsupported(format!(
                "{format} weights do not fit the int8 kernel {}'s {} blocks, which hold \
                 the scale{} as f16: {msg}",
                gemv.name,
                blocks.dtype,
                if mins.is_none() {
                    " and -scale * zero"
                } else {
                    ""
                },
            )),
            e => e,
        })?;
        w.set_perm(perm)?;
        if let Some(mins) = mins {
            w.set_group_mins(mins)?;
        }
        Ok(w)
    }

    /// `m` holds `format`'s blocks, its shape validated (the repack checks
    /// the blocks, [`Int8Matrix::pack`]); `k` is the caller's K (`m.k`
    /// less padding).
    fn ggml(
        registry: &Registry,
        m: &GgmlView<'_>,
        format: WeightFormat,
        k: usize,
    ) -> Result<Matrix, Error> {
        let packed = registry
            .select_pair(format)
            .and_then(|(gemv, gemm)| match gemv.family() {
                Family::Int8 => Int8Matrix::pack(m, k, gemv, gemm),
                Family::F32 => Err(not_packable(format, &gemv)),
            });
        match packed {
            Ok(w) => Ok(Matrix {
                format,
                backend: Backend::Int8(w),
            }),
            // No repack read the blocks: a corrupt matrix is that error,
            // not a missing kernel (`Model::load_all` lists tensors without
            // a kernel and fails on corrupt ones).
            Err(e) if !matches!(e, Error::Format(_)) => {
                m.check_rows(0..m.n)?;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// The weight format.
    pub fn format(&self) -> WeightFormat {
        self.format
    }

    /// The kernel family that runs it.
    pub fn family(&self) -> Family {
        match self.backend {
            Backend::F32(_) => Family::F32,
            Backend::Int8(_) => Family::Int8,
        }
    }

    pub fn k(&self) -> usize {
        match &self.backend {
            Backend::F32(m) => m.k(),
            Backend::Int8(m) => m.k(),
        }
    }

    pub fn n(&self) -> usize {
        match &self.backend {
            Backend::F32(m) => m.n(),
            Backend::Int8(m) => m.n(),
        }
    }

    /// The kernel dispatch picked: the GEMV kernel, whose ISA, target and
    /// layout the GEMM kernel shares.
    pub fn kernel(&self) -> &KernelEntry {
        self.gemv_kernel()
    }

    /// The kernel [`Matrix::gemv`] (one row) runs.
    pub fn gemv_kernel(&self) -> &KernelEntry {
        match &self.backend {
            Backend::F32(m) => m.gemv_kernel(),
            Backend::Int8(m) => m.gemv_kernel(),
        }
    }

    /// The kernel [`Matrix::gemm`] runs for more than one row.
    pub fn gemm_kernel(&self) -> &KernelEntry {
        match &self.backend {
            Backend::F32(m) => m.gemm_kernel(),
            Backend::Int8(m) => m.gemm_kernel(),
        }
    }

    /// The compiled variant (`avx512`, `avx2` or `baseline`) of the int8
    /// family's activation quantizer that a call with `m` rows runs, chosen
    /// with its kernel; `None` for the f32 family, which reads f32.
    pub fn activation_quantizer(&self, m: usize) -> Option<&'static str> {
        match &self.backend {
            Backend::F32(_) => None,
            Backend::Int8(w) => Some(w.act_quantizer(m)),
        }
    }

    /// Seconds the repack into the kernel's layout took.
    pub fn repack_seconds(&self) -> f64 {
        match &self.backend {
            Backend::F32(m) => m.repack_seconds(),
            Backend::Int8(m) => m.repack_seconds(),
        }
    }

    /// Whether the packed weights lie in a `kgen::layout::WordArena` shared
    /// with other matrices: the experts of a stack that [`crate::Model`]
    /// loaded, which then sit on huge pages together.
    pub fn weights_in_arena(&self) -> bool {
        match &self.backend {
            Backend::F32(_) => false,
            Backend::Int8(m) => m.weights_in_arena(),
        }
    }

    /// Packed weight bytes, scales included (what a GEMV streams).
    pub fn weight_bytes(&self) -> usize {
        match &self.backend {
            Backend::F32(m) => m.weight_bytes(),
            Backend::Int8(m) => m.weight_bytes(),
        }
    }

    /// Overrides the plan's block order of an f32-family kernel (both orders
    /// compute the same result); the int8 kernels have one order and ignore it.
    pub fn set_zcurve(&mut self, zcurve: bool) {
        if let Backend::F32(m) = &mut self.backend {
            m.set_zcurve(zcurve);
        }
    }

    /// `y = x W` for one activation row (`x`: k values, `y`: n values).
    pub fn gemv(&self, x: &[f32], y: &mut [f32]) -> Result<(), Error> {
        self.gemm_on(pool::global(), x, 1, y)
    }

    /// `y = x W` for `m` rows (`x`: m x k row-major, `y`: m x n).
    pub fn gemm(&self, x: &[f32], m: usize, y: &mut [f32]) -> Result<(), Error> {
        self.gemm_on(pool::global(), x, m, y)
    }

    /// As [`Matrix::gemm`], on a given pool (its thread count).
    pub fn gemm_on(&self, pool: &Pool, x: &[f32], m: usize, y: &mut [f32]) -> Result<(), Error> {
        match &self.backend {
            Backend::F32(w) => w.gemm_on(pool, x, m, y),
            Backend::Int8(w) => w.gemm_on(pool, x, m, y),
        }
    }

    /// `m` rows of `x` (m x k) prepared once for several matrices that take
    /// the same input, e.g. the q / k / v projections of a layer, or its
    /// gate and up projections: on the int8 family the activations are
    /// quantized here (per 32-block, as [`Matrix::gemm`] does on every
    /// call), so each further matrix skips that pass.
    ///
    /// ```no_run
    /// # fn f(q: &kgen_runtime::Matrix, k: &kgen_runtime::Matrix, v: &kgen_runtime::Matrix,
    /// #      x: &[f32], yq: &mut [f32], yk: &mut [f32], yv: &mut [f32]) -> Result<(), kgen_runtime::Error> {
    /// let input = q.quantize_input(x, 1)?;
    /// for (w, y) in [(q, yq), (k, yk), (v, yv)] {
    ///     if w.accepts(&input) {
    ///         w.gemm_input(&input, y)?;
    ///     } else {
    ///         w.gemm(x, 1, y)?; // another format: quantizes for itself
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// An input fits every matrix with the same K whose kernels read
    /// activations the same way ([`Matrix::accepts`]): the int8 matrices of
    /// one format and ISA (Q4_0 and Q4_K differ: Q4_0's kernels remove an
    /// offset of 8 through the block sums, Q4_K's add mins through them;
    /// Q4_1 and Q4_K differ too: the K-quants take one activation scale per
    /// 256 values)
    /// and the same act-order permutation (GPTQ on the int8 family: the
    /// rows are gathered before they are quantized).
    pub fn quantize_input(&self, x: &[f32], m: usize) -> Result<Input, Error> {
        crate::panels::check_shape(self.k(), self.n(), m, x.len(), m * self.n())?;
        Ok(Input(match &self.backend {
            Backend::F32(_) => InputKind::F32 {
                x: x.to_vec(),
                k: self.k(),
                m,
            },
            Backend::Int8(w) => InputKind::Int8(w.quantize_input(x, m)),
        }))
    }

    /// Whether [`Matrix::gemm_input`] takes `input`.
    pub fn accepts(&self, input: &Input) -> bool {
        match (&self.backend, &input.0) {
            (Backend::F32(_), InputKind::F32 { k, .. }) => *k == self.k(),
            (Backend::Int8(w), InputKind::Int8(q)) => w.accepts(q),
            _ => false,
        }
    }

    /// `y = x W` for the rows of an input from [`Matrix::quantize_input`]
    /// (`y`: m x n); an input this matrix does not accept is an error.
    pub fn gemm_input(&self, input: &Input, y: &mut [f32]) -> Result<(), Error> {
        self.gemm_input_on(pool::global(), input, y)
    }

    /// As [`Matrix::gemm_input`], on a given pool.
    pub fn gemm_input_on(&self, pool: &Pool, input: &Input, y: &mut [f32]) -> Result<(), Error> {
        match (&self.backend, &input.0) {
            (Backend::F32(w), InputKind::F32 { x, k, m }) if *k == self.k() => {
                w.gemm_on(pool, x, *m, y)
            }
            (Backend::Int8(w), InputKind::Int8(q)) => w.gemm_quantized(pool, q, y),
            _ => Err(Error::Shape(format!(
                "this input was prepared for another family or K; this matrix is {}x{}, {} family",
                self.k(),
                self.n(),
                self.family()
            ))),
        }
    }

    /// The int8 family's back-end, if this matrix runs on it.
    pub(crate) fn as_int8(&self) -> Option<&Int8Matrix> {
        match &self.backend {
            Backend::Int8(w) => Some(w),
            Backend::F32(_) => None,
        }
    }

    /// What runs: family, format, ISA, target and kernels, e.g. `int8
    /// family, q4_0 (GGUF Q4_0), ISA avx512vnni (target x86-64-v4-vnni),
    /// kernels q4_0_gemv_1x64__avx512vnni / q4_0_gemm_8x16__avx512vnni`.
    pub fn describe(&self) -> String {
        let (v, m) = (self.gemv_kernel(), self.gemm_kernel());
        let kernels = if v.name == m.name {
            format!("kernel {}", v.name)
        } else {
            format!("kernels {} / {}", v.name, m.name)
        };
        format!(
            "{} family, {} ({}), ISA {} (target {}), {kernels}",
            self.family(),
            self.format,
            self.format.describe(),
            v.isa,
            v.target
        )
    }
}

/// Activation rows prepared once by [`Matrix::quantize_input`] for every
/// matrix that [`Matrix::accepts`] them.
pub struct Input(InputKind);

enum InputKind {
    F32 { x: Vec<f32>, k: usize, m: usize },
    Int8(QuantizedInput),
}

impl Input {
    /// The int8 family's quantized rows, if it was prepared for that family.
    pub(crate) fn as_int8(&self) -> Option<&QuantizedInput> {
        match &self.0 {
            InputKind::Int8(q) => Some(q),
            InputKind::F32 { .. } => None,
        }
    }

    /// Activation rows.
    pub fn rows(&self) -> usize {
        match &self.0 {
            InputKind::F32 { m, .. } => *m,
            InputKind::Int8(q) => q.m,
        }
    }
}

/// The format of a GGUF matrix; the float types are refused.
fn ggml_format<D>(m: &GgmlMatrix<D>) -> Result<WeightFormat, Error> {
    WeightFormat::from_ggml(m.dtype).ok_or_else(|| {
        Error::Unsupported(format!(
            "{} weights have no kernel: quantize them with \
             Matrix::from_f32(&m.dequantize(), m.k, m.n, format), e.g. format \"q8_0\" or \"4:128\"",
            m.dtype
        ))
    })
}

/// GPTQ weights as blocks of `dtype`, K padded to whole blocks: `block`
/// appends column `j`'s block `b` of group `g` (`live`: not wholly past K)
/// to the data. `None` if a group does not hold whole blocks.
fn gptq_blocks(
    m: &GptqMatrix,
    dtype: GgmlType,
    mut block: impl FnMut(&mut Vec<u8>, usize, usize, usize, bool),
) -> Option<GgmlMatrix> {
    let (gs, bv) = (m.group_size(), dtype.block_values());
    if m.group.size().is_some() && !gs.is_multiple_of(bv) {
        return None;
    }
    let k_pad = m.k.div_ceil(bv) * bv;
    let mut data = Vec::with_capacity(m.n * k_pad / bv * dtype.block_bytes());
    for j in 0..m.n {
        for b in 0..k_pad / bv {
            let g = (b * bv / gs).min(m.groups() - 1);
            block(&mut data, g, j, b, b * bv < m.k);
        }
    }
    Some(GgmlMatrix {
        k: k_pad,
        n: m.n,
        dtype,
        data,
    })
}

/// The 4-bit levels of column `j`'s `L` values from `at` along K, past K
/// `pad` (on the stack: the repack calls it once per block).
fn gptq_levels<const L: usize>(m: &GptqMatrix, j: usize, at: usize, pad: u8) -> [u8; L] {
    std::array::from_fn(|t| {
        let i = at + t;
        if i < m.k {
            m.q(i, j) as u8
        } else {
            pad
        }
    })
}

/// 4-bit GPTQ weights as GGUF Q4_1 blocks (K padded to 32 with zero
/// levels and zero scale): each 32 values of a column take their group's
/// scale `s` and min `-s z` (f16, as Q4_1 stores them), and their levels
/// as they are. `None` if a group does not hold whole 32-blocks.
fn gptq_as_q4_1(m: &GptqMatrix) -> Option<GgmlMatrix> {
    gptq_blocks(m, GgmlType::Q4_1, |data, g, j, b, live| {
        let (s, z) = (m.scales[g * m.n + j], m.zeros[g * m.n + j]);
        let q = gptq_levels::<32>(m, j, b * 32, 0);
        let (d, mn) = if live { (s, -(s * z)) } else { (0.0, 0.0) };
        data.extend_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        data.extend_from_slice(&half::f16::from_f32(mn).to_bits().to_le_bytes());
        data.extend_from_slice(&q4_0_pack(&q));
    })
}

/// 4-bit GPTQ weights with groups of a multiple of 128 (or one per
/// column) as kgen's `q4_0_g128` blocks and zero-point terms:
/// `s (q - z) = s (q - 8) + s (8 - z)`, so each 128 values of a column
/// take their group's scale `s` (f16, as the block stores it) and their
/// levels as they are (8, a zero weight, past K), and `s (8 - z)` goes to
/// the group's term. One f16 per 128 values where Q4_1 blocks hold two
/// per 32. `None` if a group does not hold whole 128-blocks.
fn gptq_as_q4_0_g128(m: &GptqMatrix) -> Option<(GgmlMatrix, GroupMins)> {
    let scale = |g: usize, j: usize| half::f16::from_f32(m.scales[g * m.n + j]);
    let blocks = gptq_blocks(m, GgmlType::Q4_0_G128, |data, g, j, b, live| {
        let d = if live { scale(g, j) } else { half::f16::ZERO };
        data.extend_from_slice(&d.to_bits().to_le_bytes());
        let q = gptq_levels::<128>(m, j, b * 128, 8);
        for sub in q.chunks_exact(32) {
            data.extend_from_slice(&q4_0_pack(sub));
        }
    })?;
    let mins = gptq_group_mins(m, blocks.k, 8, |g, j| scale(g, j).to_f32());
    Some((blocks, mins))
}

/// 8-bit GPTQ weights as GGUF Q8_0 blocks and zero-point terms (K padded
/// to 32 with zero levels and zero scale):
/// `s (q - z) = s (q - 128) + s (128 - z)`, so each 32 values of a column
/// take their group's scale `s` (f16, as Q8_0 stores it) and the levels
/// `q - 128` as `i8`, and `s (128 - z)` (with the same f16 `s`) goes to the
/// group's term. `None` if a group does not hold whole 32-blocks.
fn gptq_as_q8_0(m: &GptqMatrix) -> Option<(GgmlMatrix, GroupMins)> {
    let scale = |g: usize, j: usize| half::f16::from_f32(m.scales[g * m.n + j]);
    let blocks = gptq_blocks(m, GgmlType::Q8_0, |data, g, j, b, live| {
        let d = if live { scale(g, j) } else { half::f16::ZERO };
        data.extend_from_slice(&d.to_bits().to_le_bytes());
        data.extend((0..32).map(|t| {
            let i = b * 32 + t;
            if i < m.k {
                (m.q(i, j) as i32 - 128) as i8 as u8
            } else {
                0
            }
        }));
    })?;
    let mins = gptq_group_mins(m, blocks.k, 128, |g, j| scale(g, j).to_f32());
    Some((blocks, mins))
}

/// The zero-point terms `s (offset - z)` of blocks that hold `s` (read
/// back by `scale`, as the blocks round it) and the levels less `offset`,
/// `k_pad` the blocks' K.
fn gptq_group_mins(
    m: &GptqMatrix,
    k_pad: usize,
    offset: u32,
    scale: impl Fn(usize, usize) -> f32,
) -> GroupMins {
    // One group per column: it spans the padded K.
    let group = if m.group.size().is_some() {
        m.group_size()
    } else {
        k_pad
    };
    let c = (0..m.groups())
        .flat_map(|g| {
            let scale = &scale;
            (0..m.n).map(move |j| scale(g, j) * (offset as f32 - m.zeros[g * m.n + j]))
        })
        .collect();
    GroupMins { group, c }
}

/// A family was selected whose weights this source cannot be converted to.
fn not_packable(format: WeightFormat, kernel: &KernelEntry) -> Error {
    Error::Unsupported(format!(
        "{format} weights cannot be packed for the {} kernel {} yet",
        kernel.family(),
        kernel.name
    ))
}

impl fmt::Display for Matrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{} matrix, {}", self.k(), self.n(), self.describe())
    }
}

impl fmt::Debug for Matrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Matrix")
            .field("k", &self.k())
            .field("n", &self.n())
            .field("format", &self.format.to_string())
            .field("family", &self.family())
            .field("gemv", &self.gemv_kernel().name)
            .field("gemm", &self.gemm_kernel().name)
            .finish()
    }
}
