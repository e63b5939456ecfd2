//! What the runtime knows about one generated kernel.

/// The entry point every generated kernel exports as `run`: see the generated
/// files' documentation for the argument contract.
pub type RunFn = unsafe fn(
    *const u32,
    *const f32,
    *const f32,
    *const f32,
    *const f32,
    *mut f32,
    usize,
    usize,
    usize,
    usize,
    usize,
    bool,
);

/// One generated kernel and the plan it was generated for.
#[derive(Clone, Copy, Debug)]
pub struct KernelEntry {
    pub name: &'static str,
    pub isa: &'static str,
    /// The target description it was planned for.
    pub target: &'static str,
    /// Run-time CPU features it needs.
    pub features: &'static [&'static str],
    pub bits: u32,
    /// Group size along K; 0 for whole column.
    pub group: usize,
    pub lanes: usize,
    pub m_u: usize,
    pub t_u: usize,
    pub m_r: usize,
    pub m_b: usize,
    pub t_b: usize,
    /// The plan's block order.
    pub zcurve: bool,
    /// Factors for the activations, by position within a packing unit, applied
    /// before the call (the kernel reads in-place-masked levels as `q * 2^shift`).
    pub x_scale: &'static [f32],
    /// GEMM (several activation rows per micro kernel) or GEMV.
    pub gemm: bool,
    /// Whether the running CPU has `features`.
    pub detect: fn() -> bool,
    pub run: RunFn,
}

impl KernelEntry {
    /// Whether two kernels read the same packed layout.
    pub fn same_layout(&self, other: &KernelEntry) -> bool {
        (
            self.bits, self.group, self.lanes, self.t_u, self.m_b, self.t_b,
        ) == (
            other.bits,
            other.group,
            other.lanes,
            other.t_u,
            other.m_b,
            other.t_b,
        )
    }
}

/// The entry point of a generated int8-activation kernel (`run`).
pub type I8RunFn = unsafe fn(
    *const u8,
    *const u16,
    *const i8,
    *const f32,
    *const i32,
    *mut f32,
    usize,
    usize,
    usize,
    usize,
    usize,
);

/// One generated int8-activation kernel and its plan.
#[derive(Clone, Copy, Debug)]
pub struct I8KernelEntry {
    pub name: &'static str,
    pub isa: &'static str,
    pub target: &'static str,
    pub features: &'static [&'static str],
    /// The weight format it reads: `q4_0`, `q8_0` or `iq4_nl`.
    pub format: &'static str,
    /// 4 (Q4_0 / IQ4_NL layout) or 8 (Q8_0 layout).
    pub bits: u32,
    /// Columns interleaved per vector.
    pub lanes: usize,
    pub t_u: usize,
    pub m_r: usize,
    pub m_b: usize,
    pub t_b: usize,
    /// Bytes of a column per lane and chunk: 4, or 8 for the pair layouts
    /// (Q4_0_4_8 / Q4_0_8_8).
    pub group_bytes: usize,
    /// 4-bit levels stored as signed nibbles (activation scales carry 1/16).
    pub signed: bool,
    /// Reads activation rows interleaved in pairs (`ActFormat::row_pairs`).
    pub row_pairs: bool,
    pub gemm: bool,
    pub detect: fn() -> bool,
    pub run: I8RunFn,
}

impl I8KernelEntry {
    /// Codebook formats (IQ4_NL): 4-bit indices, looked up by the kernel.
    pub fn codebook(&self) -> bool {
        kgen::format::by_tag(self.format).is_some_and(|f| f.codebook().is_some())
    }

    pub fn same_layout(&self, other: &I8KernelEntry) -> bool {
        self.format == other.format
            && (
                self.bits,
                self.lanes,
                self.t_u,
                self.m_b,
                self.t_b,
                self.group_bytes,
                self.signed,
            ) == (
                other.bits,
                other.lanes,
                other.t_u,
                other.m_b,
                other.t_b,
                other.group_bytes,
                other.signed,
            )
    }
}
