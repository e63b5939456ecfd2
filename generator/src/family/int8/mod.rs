//! The int8-activation kernel family (papers 000 and 002): ISAs as data, the
//! performance model and planner for it, and its emitter.
//!
//! The data layout and the oracle are in [`crate::layout::act`]. A micro
//! kernel handles `t_u` groups of `L` interleaved columns for `m_r`
//! activation rows; per 32-value block it keeps `m_r x t_u` i32 accumulators
//! (`i_{row}_{t}`), adds 4-byte products into them with the template's
//! `dot_u` / `dot_s`, then removes the level offset, converts, and folds the
//! block into `m_r x t_u` f32 accumulators (`f_{row}_{t}`) with the weight
//! scales of `L` columns converted in one vector op times the activation
//! block scale.
//!
//! Codebook formats (IQ4_NL, [`I8Spec::codebook`]) read the 4-bit layout's
//! nibbles as indices: `idx_lo` / `idx_hi` unpack them, `lut` (a 16-entry
//! byte table lookup: NEON `tbl`, x86 `pshufb`, portable scalar) turns them
//! into signed int8 levels, and `dot_s` (sdot / smmla on Arm) accumulates
//! with no bias correction. The template's `CODEBOOK` table is replaced by
//! the format's. On the vpdpbusd ISAs ([`I8Isa::unsigned_dot`]) the table
//! is shifted by 128 instead, the dot is unsigned (`dot_u`) and the
//! activations' `128 * sum(x)` is removed per block, as 8-bit signed levels
//! are read there too (`flip`). The SVE ISA has no table lookup:
//! [`I8Isa::supports`].

pub mod emit;
pub mod isa;
pub mod model;
pub mod plan;
pub mod spec;

use crate::emit::EmitError;
use crate::family::plan::Plan;
use crate::family::{Family, FamilyIsa, Footprint, TileGeometry};
use crate::spec::Op;
use crate::target::{Arch, TargetDesc};
use isa::I8Isa;
use plan::{I8Candidate, I8Prediction, I8Tile, RegisterCount};
use proc_macro2::TokenStream;
use quote::quote;
use spec::I8Spec;

/// The int8 family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int8;

impl FamilyIsa for I8Isa {
    fn name(&self) -> &'static str {
        self.name
    }
    fn arch(&self) -> Option<Arch> {
        self.arch
    }
    fn target_features(&self) -> Vec<&'static str> {
        self.features.to_vec()
    }
    fn runs_on(&self, t: &TargetDesc) -> bool {
        I8Isa::runs_on(self, t)
    }
    fn lanes(&self) -> usize {
        self.lanes
    }
    fn registers(&self) -> usize {
        self.registers
    }
    fn template_path(&self) -> &'static str {
        self.template_path
    }
    /// Its features and, for SVE kernels written for one vector length,
    /// that length (read with `rdvl` only once SVE is known to be there).
    fn detector(&self, name: &syn::Ident) -> TokenStream {
        let Some(bits) = self.sve_bits else {
            return crate::emit::detector_for(self.arch, self.features, name);
        };
        let features = self.features;
        let bytes = proc_macro2::Literal::u64_unsuffixed(u64::from(bits / 8));
        quote! {
            #[cfg(target_arch = "aarch64")]
            fn #name() -> bool {
                #(::std::arch::is_aarch64_feature_detected!(#features))&&* && {
                    let bytes: u64;
                    // SAFETY: SVE is present (checked above), so RDVL exists; it
                    // only writes the vector length in bytes to a register.
                    unsafe {
                        ::std::arch::asm!(
                            ".arch_extension sve",
                            "rdvl {b}, #1",
                            b = out(reg) bytes,
                            options(pure, nomem, nostack, preserves_flags),
                        );
                    }
                    bytes == #bytes
                }
            }
        }
    }
}

impl Family for Int8 {
    const NAME: &'static str = "int8";
    type Isa = I8Isa;
    type Spec = I8Spec;
    type Tile = I8Tile;
    type Registers = RegisterCount;
    type Prediction = I8Prediction;
    type Candidate = I8Candidate;

    fn isas() -> &'static [I8Isa] {
        isa::I8_FAMILY
    }

    fn supports(isa: &I8Isa, spec: &I8Spec) -> Result<(), String> {
        isa.supports(spec)
    }

    fn op(spec: &I8Spec) -> Op {
        spec.op
    }

    fn format_tag(spec: &I8Spec) -> String {
        spec.format_tag()
    }

    fn entry_format(spec: &I8Spec) -> String {
        spec.format_tag()
    }

    fn registers(spec: &I8Spec, isa: &I8Isa, tile: I8Tile) -> RegisterCount {
        RegisterCount {
            used: model::registers(spec, isa, tile),
            limit: isa.registers,
        }
    }

    fn rank_tiles(
        spec: &I8Spec,
        isa: &I8Isa,
        target: &TargetDesc,
        shape: (usize, usize),
    ) -> Vec<I8Candidate> {
        model::rank_tiles(spec, isa, target, shape)
    }

    /// int8 activations, f32 outputs, weights with the scale stream the
    /// ISA's kernels read beside them (an f16 per 32-value block is `bits +
    /// 0.5` per value; the K-quants' scales and mins, per-16 scales or
    /// integer sub-scales are more or less), rounded up to a half bit, in
    /// whole blocks along K, or whole activation scale groups (the
    /// K-quants' 256 values: a micro kernel folds a group before it applies
    /// the group's scale).
    fn footprint(spec: &I8Spec, isa: &I8Isa) -> Footprint {
        let read = isa.reads(spec);
        // A column's 32-value block is `block_bytes` bytes: 8 / 32 bits
        // per value per byte, two half bits per bit.
        let half_bits = model::block_bytes(&read, isa) / 2.0;
        Footprint {
            act_bytes: 1,
            weight_half_bits: half_bits.ceil() as u64,
            k_granule: crate::format::ggml::QK * spec.act_group(),
        }
    }

    /// `m_r` rows by `t_sub` column groups of `lanes`; the block loop takes
    /// one 32-value block, so no K unroll.
    fn geometry(isa: &I8Isa, tile: I8Tile) -> TileGeometry {
        TileGeometry {
            rows: tile.m_r,
            cols: tile.t_sub * isa.lanes,
            layout_cols: tile.t_u * isa.lanes,
            k_unroll: 1,
        }
    }

    fn predict(
        spec: &I8Spec,
        isa: &I8Isa,
        target: &TargetDesc,
        tile: I8Tile,
        shape: (usize, usize),
    ) -> I8Prediction {
        let (gbs, gflops) = model::predict(spec, isa, target, tile, shape.0, shape.1);
        I8Prediction { gbs, gflops }
    }

    fn emit_kernel(plan: &Plan<Int8>) -> Result<TokenStream, EmitError> {
        emit::kernel_module(plan)
    }

    fn target_line(target: &TargetDesc) -> String {
        format!(
            "{} ({}; {})",
            target.name,
            target.description,
            target.arch.cfg_name()
        )
    }

    fn file_notes(_: &TargetDesc) -> Vec<String> {
        vec![
            "family: int8 activations, a scale per 32 values (per 256 for the K-quants and TQ1_0 / TQ2_0, as Q8_K); each kernel's weight levels and scales below"
                .to_string(),
        ]
    }

    fn describe(plan: &Plan<Int8>) -> Vec<String> {
        emit::describe(plan)
    }

    fn entry_params(rt: &syn::Path) -> TokenStream {
        quote! {
            #rt::FamilyParams::Int8(#rt::Int8Params {
                group_bytes: k::GROUP_BYTES,
                signed: k::SIGNED,
                int_scales: k::INT_SCALES,
                group_scales: k::GROUP_SCALES,
                row_pairs: k::ROW_PAIRS,
                run: k::run,
            })
        }
    }
}
