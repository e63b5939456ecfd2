//! Operation counts of emitted kernels, for the int8 model and `kgen plan
//! --explain` (one source for both): vector
//! instructions per 32-weight block in a micro kernel's inner loop, next to
//! the figures of the Arm paper (002: GGML's Q4_0 block takes 12 ops, the
//! optimised GEMV 6.5, the batch-8 SMMLA GEMM 2.5 per output point; loads
//! are not in those figures).
//!
//! The counts are read off the emitted source, not off the performance
//! model, so they show what the templates and the emitter really produce.
//! Nothing here knows a template: a kernel module's `pub mod ops { .. }`
//! (the ISA's primitives, copied from `templates/`) is classified by rule,
//! and a new ISA is counted as soon as it is emitted.
//!
//! # Counting rules
//!
//! Per primitive fn of `ops` (its own body, plus the primitives it calls,
//! recursively):
//! - A call to an architecture intrinsic (`v*` with `core::arch::aarch64`
//!   in scope, `_*` with `core::arch::x86_64`, or any path through
//!   `arch::`) is one instruction, classified by name:
//!   - free: reinterprets and casts (`vreinterpret*`, `vget_low*`,
//!     `_mm*_cast*`, `zext`, `undefined`) cost nothing;
//!   - load (`vld*`, `*_load*`, `lddqu`, `_broadcast_s*` / `_p*`, gathers,
//!     prefetches) and store (`vst*`, `*_store*`, `stream`, scatters);
//!   - constants (`setzero`, or a `set1` / `vdup*_n` / `[c; N]` of
//!     literals) cost one op only when the primitive returns them (a fresh
//!     accumulator such as `zero_i`, re-made every iteration); as an operand
//!     they are loop-invariant and the compiler hoists them;
//!   - a `set1` / `vdup*_n` / `[x; N]` of a memory read is one load (ld1r,
//!     vpbroadcastd from memory), of a register one op;
//!   - MAC: integer dots and matrix MACs (`*dot*`, `*mmla*`, `dpbusd`,
//!     `dpwssd`, `maddubs`, `madd_epi16`, ...: the "dot" sub-count, what the
//!     paper calls MAC) and floating multiply-adds (`vfma*`, `vmla*`,
//!     `*fmadd*`, ...); both are also ops;
//!   - the "fmul" sub-count: the multiply-adds other than dots (float
//!     FMAs, and Arm's integer `vmla*`) and float multiplies (`*_mul_p*`,
//!     `vmul*_f*`; asm `vmulps`, `fmul`), which contend with the dots on
//!     cores that set `core.dots_share_fma`; the multiplies are ops too;
//!   - everything else is one op.
//! - `asm!`: each line of the template strings is one instruction, except
//!   directives (`.arch_extension`), labels and comments; by mnemonic,
//!   `ld*` is a load (`ld1r` a broadcast one), a prefetch (`prfm`,
//!   `prefetch*`) a load that is not full-width, as a broadcast (it takes
//!   a load port, no vector data), `st*` a store, an Intel-syntax memory operand
//!   (`[..]`, not an Arm lane index `z0.b[1]`) makes a `mov`/broadcast a
//!   load or store and adds a load to any other instruction (a broadcast
//!   one for an EVEX embedded broadcast, `[p]{1to16}`), and dot/MAC
//!   mnemonics (sdot, smmla, fmla, vpdpbusd, ...) are sub-counted as above.
//!   Only instructions on vector, predicate or mask registers are ops:
//!   branches and general-register bookkeeping (`add {w}, {w}, #512` with
//!   `w = inout(reg) ..`, loop counters) are not, as `p.add(n)` is not.
//! - A dereference `*p`, `read_unaligned` / `ptr::read*` is a load (unless
//!   it is the address operand of a load already counted); `*p = v`,
//!   `write_unaligned` / `ptr::write*` a store. Pointer arithmetic
//!   (`p.add(n)`, `as` casts) is free.
//! - Anything else that computes (scalar operators, loops, closures,
//!   indexing, branches, unknown calls or methods or macros, as in the
//!   portable templates) cannot be mapped to instructions: the primitive
//!   gets one op for it, and the report names it.
//!
//! Per micro kernel: the block loop is the first top-level `for` loop of the
//! fn that calls `ops`; every `ops::NAME(..)` call in its body (arguments
//! included) adds NAME's counts, times the trip count of enclosing inner
//! loops with literal bounds. A micro kernel that is one `asm!` block (the
//! SVE kernels) has no such loop: its block loop is the template's
//! outermost label-to-backward-branch span (`2:` .. `b.ne 2b`). Code outside
//! the loop (accumulator loads, masks, stores of the result) is not counted. The per-32-weight-block
//! figure is `per-iteration * 32 / K`, divided by the micro tile's columns
//! (GEMV) or rows x columns (GEMM), where K, the values one iteration
//! consumes, is read for the f32 family from the activation pointer's
//! advances (`x = x.add(8)` in an inner loop of 4: 32) and is one 32-value
//! block for the int8 family, whose activations may be interleaved in row
//! pairs (see [`KPerIter`]).

mod asm;
mod body;
mod classify;
mod kernel;

use asm::*;
use body::*;
pub use body::{primitives, Primitive};
use classify::*;

pub use kernel::{count_kernel, count_micro, parse, KPerIter, KernelOps, Site};

use std::fmt;
use std::ops::{Add, AddAssign, Mul};

/// K values per block in the paper's (and GGML's) Q4_0 / Q8_0 formats.
pub const BLOCK: usize = 32;

/// Instructions of some code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Vector instructions other than loads and stores (MACs included).
    pub ops: u64,
    pub loads: u64,
    /// Loads among `loads` that broadcast one scalar from memory to every
    /// lane (`set1` of a read, `vpbroadcastd` / `ld1r`): most cores issue
    /// them on every load port, while full-width vector loads may be fewer
    /// per cycle (Zen 4: one 512-bit load, three broadcasts). Prefetches
    /// count here too: a load port, no vector data.
    pub bcast: u64,
    pub stores: u64,
    /// Multiply-accumulates among `ops`: integer dots, matrix MACs, FMAs.
    pub mac: u64,
    /// Integer dot / matrix MACs among `mac`: the paper's "MAC" (it does not
    /// count the FMLA that scales a block).
    pub dot: u64,
    /// Float multiplies and the multiply-accumulates other than dots (FMAs)
    /// among `ops`: what shares the dot pipes on a core that issues its
    /// dots on its FMA pipes (`core.dots_share_fma`).
    pub fmul: u64,
    /// Byte shuffles among `ops` (`vpshufb`, `vpermb`, `tbl`): the table
    /// lookups of the codebook and grid formats (and any other byte
    /// shuffle), which take more than one vector issue slot on some cores
    /// (`core.shuffle_slots`).
    pub shuf: u64,
}

impl Add for Counts {
    type Output = Counts;
    fn add(self, o: Counts) -> Counts {
        Counts {
            ops: self.ops + o.ops,
            loads: self.loads + o.loads,
            bcast: self.bcast + o.bcast,
            stores: self.stores + o.stores,
            mac: self.mac + o.mac,
            dot: self.dot + o.dot,
            fmul: self.fmul + o.fmul,
            shuf: self.shuf + o.shuf,
        }
    }
}

impl AddAssign for Counts {
    fn add_assign(&mut self, o: Counts) {
        *self = *self + o;
    }
}

impl Counts {
    /// The counts of `n` iterations as per one, each rounded to the
    /// nearest whole instruction.
    pub fn per(self, n: u64) -> Counts {
        let d = |x: u64| (x + n / 2) / n;
        Counts {
            ops: d(self.ops),
            loads: d(self.loads),
            bcast: d(self.bcast),
            stores: d(self.stores),
            mac: d(self.mac),
            dot: d(self.dot),
            fmul: d(self.fmul),
            shuf: d(self.shuf),
        }
    }
}

impl Mul<u64> for Counts {
    type Output = Counts;
    fn mul(self, k: u64) -> Counts {
        Counts {
            ops: self.ops * k,
            loads: self.loads * k,
            bcast: self.bcast * k,
            stores: self.stores * k,
            mac: self.mac * k,
            dot: self.dot * k,
            fmul: self.fmul * k,
            shuf: self.shuf * k,
        }
    }
}

/// Counts scaled to a unit (per block and column or output point).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rate {
    pub ops: f64,
    pub loads: f64,
    pub bcast: f64,
    pub stores: f64,
    pub mac: f64,
    pub dot: f64,
}

impl Rate {
    pub(crate) fn of(c: Counts, scale: f64) -> Rate {
        Rate {
            ops: c.ops as f64 * scale,
            loads: c.loads as f64 * scale,
            bcast: c.bcast as f64 * scale,
            stores: c.stores as f64 * scale,
            mac: c.mac as f64 * scale,
            dot: c.dot as f64 * scale,
        }
    }
}

/// Why a kernel could not be counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpCountError(pub String);

impl fmt::Display for OpCountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OpCountError {}

pub(crate) fn err<T>(msg: impl Into<String>) -> Result<T, OpCountError> {
    Err(OpCountError(msg.into()))
}
