//! What the runtime knows about one generated kernel, of either family.

use crate::error::Error;
use crate::format::{Family, WeightFormat};

/// The entry point an f32-family kernel exports as `run`: see the generated
/// files' documentation for the argument contract.
pub type F32RunFn = unsafe fn(
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

/// The entry point an int8-family kernel exports as `run`.
pub type Int8RunFn = unsafe fn(
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

/// The operation a kernel was planned for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// One activation row.
    Gemv,
    /// Several activation rows per micro kernel.
    Gemm,
}

/// The f32 family's part of a [`KernelEntry`].
#[derive(Clone, Copy, Debug)]
pub struct F32Params {
    /// Group size along K; 0 for whole column.
    pub group: usize,
    pub m_u: usize,
    /// The plan's block order.
    pub zcurve: bool,
    /// Factors for the activations, by position within a packing unit, applied
    /// before the call (the kernel reads in-place-masked levels as `q * 2^shift`).
    pub x_scale: &'static [f32],
    pub run: F32RunFn,
}

/// The int8 family's part of a [`KernelEntry`].
#[derive(Clone, Copy, Debug)]
pub struct Int8Params {
    /// Bytes of a column per lane and chunk: 4, or 8 for the pair layouts
    /// (Q4_0_4_8 / Q4_0_8_8).
    pub group_bytes: usize,
    /// 4-bit levels stored as signed nibbles (activation scales carry 1/16).
    pub signed: bool,
    /// The scale stream keeps the format's integer sub-scales
    /// (`I8Layout::int_sub_scales`: Q2_K on AVX2 and AVX-512 VNNI; Q3_K,
    /// Q4_K, Q5_K and Q6_K on AVX2).
    pub int_scales: bool,
    /// The scale stream holds the format's one scale per super-block once
    /// (`I8Layout::group_scales`: TQ1_0 and TQ2_0 on the lane ISAs).
    pub group_scales: bool,
    /// Reads activation rows interleaved in pairs (`ActFormat::row_pairs`).
    pub row_pairs: bool,
    pub run: Int8RunFn,
}

/// What is particular to a kernel's family, and its entry point.
#[derive(Clone, Copy, Debug)]
pub enum FamilyParams {
    F32(F32Params),
    Int8(Int8Params),
}

/// One generated kernel and the plan it was generated for.
#[derive(Clone, Copy, Debug)]
pub struct KernelEntry {
    pub name: &'static str,
    pub isa: &'static str,
    /// The target description it was planned for.
    pub target: &'static str,
    /// Run-time CPU features it needs.
    pub features: &'static [&'static str],
    /// The weight format it reads, as a [`WeightFormat`] name: `4:128`,
    /// `3:col` (f32 family), `q4_0`, `q8_0`, `iq4_nl` (int8 family).
    pub format: &'static str,
    /// Bits per weight level.
    pub bits: u32,
    /// Columns per vector.
    pub lanes: usize,
    pub t_u: usize,
    pub m_r: usize,
    pub m_b: usize,
    pub t_b: usize,
    /// GEMM (several activation rows per micro kernel) or GEMV.
    pub gemm: bool,
    /// Whether the running CPU has `features`.
    pub detect: fn() -> bool,
    /// The family's parameters and entry point.
    pub params: FamilyParams,
}

impl KernelEntry {
    pub fn family(&self) -> Family {
        match self.params {
            FamilyParams::F32(_) => Family::F32,
            FamilyParams::Int8(_) => Family::Int8,
        }
    }

    pub fn op(&self) -> Op {
        if self.gemm {
            Op::Gemm
        } else {
            Op::Gemv
        }
    }

    /// The weight format it reads, parsed from [`KernelEntry::format`].
    pub fn weight_format(&self) -> Result<WeightFormat, Error> {
        let f: WeightFormat = self.format.parse().map_err(|e: Error| {
            Error::NoKernel(format!("kernel {}: {}", self.name, e.message()))
        })?;
        // A GGUF format's kernels read its int8 layout's bits (Q6_K: 6; a
        // 3-bit format 3, or 4 where the ISA has no 3-bit unpack).
        let reads = match f {
            // (3 only on 4-byte lane groups: no pair layout holds 3 bits.)
            WeightFormat::Ggml(t) => t.format().int8.map_or(self.bits == f.bits(), |r| {
                let lane = self.int8().is_some_and(|p| p.group_bytes == 4);
                self.bits == r.read_bits(lane) || self.bits == r.read_bits(false)
            }),
            _ => self.bits == f.bits(),
        };
        if f.family() != self.family() || !reads {
            return Err(Error::NoKernel(format!(
                "kernel {} is an {} kernel of {} bits, but says it reads {f}",
                self.name,
                self.family(),
                self.bits
            )));
        }
        Ok(f)
    }

    /// The f32 family's parameters, if it is an f32 kernel.
    pub fn f32(&self) -> Option<&F32Params> {
        match &self.params {
            FamilyParams::F32(p) => Some(p),
            FamilyParams::Int8(_) => None,
        }
    }

    /// The int8 family's parameters, if it is an int8 kernel.
    pub fn int8(&self) -> Option<&Int8Params> {
        match &self.params {
            FamilyParams::Int8(p) => Some(p),
            FamilyParams::F32(_) => None,
        }
    }

    /// Codebook formats (IQ4_NL): 4-bit indices, looked up by the kernel.
    /// Read from the format table, never from the format's name.
    pub fn codebook(&self) -> bool {
        kgen::format::by_tag(self.format).is_some_and(|f| f.codebook().is_some())
    }

    /// Whether two kernels read the same packed layout.
    pub fn same_layout(&self, other: &KernelEntry) -> bool {
        let common = self.format == other.format
            && (self.bits, self.lanes, self.t_u, self.m_b, self.t_b)
                == (other.bits, other.lanes, other.t_u, other.m_b, other.t_b);
        common
            && match (&self.params, &other.params) {
                (FamilyParams::F32(a), FamilyParams::F32(b)) => a.group == b.group,
                (FamilyParams::Int8(a), FamilyParams::Int8(b)) => {
                    (a.group_bytes, a.signed, a.int_scales, a.group_scales)
                        == (b.group_bytes, b.signed, b.int_scales, b.group_scales)
                }
                _ => false,
            }
    }
}
