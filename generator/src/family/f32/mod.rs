//! The f32-activation family (QIGen, paper 001): GPTQ weights unpacked to
//! f32 with shift/and/convert and multiplied with FMA.
//!
//! [`isa`] holds its ISAs as data, [`model`] the performance model (eq. 1,
//! 2, 4, 5), [`planner`] the tile ranking and pick, [`emit`] the emitter;
//! [`F32`] puts them behind [`Family`].

pub mod emit;
pub mod isa;
pub mod model;
pub mod planner;

use crate::emit::EmitError;
use crate::family::plan::Plan;
use crate::family::{Family, FamilyIsa, Footprint, TileGeometry};
use crate::layout::f32::Layout;
use crate::spec::{Group, KernelSpec, Op};
use crate::target::{Arch, TargetDesc};
use isa::Isa;
use model::{MicroTile, Prediction, RegisterUse};
use proc_macro2::TokenStream;
use quote::quote;

/// The f32 family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct F32;

impl FamilyIsa for Isa {
    fn name(&self) -> &'static str {
        self.name
    }
    fn arch(&self) -> Option<Arch> {
        self.arch
    }
    fn target_features(&self) -> Vec<&'static str> {
        self.feature_names()
    }
    fn runs_on(&self, t: &TargetDesc) -> bool {
        Isa::runs_on(self, t)
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
}

impl Family for F32 {
    const NAME: &'static str = "f32";
    type Isa = Isa;
    type Spec = KernelSpec;
    type Tile = MicroTile;
    type Registers = RegisterUse;
    type Prediction = Prediction;
    type Candidate = planner::Candidate;

    fn isas() -> &'static [Isa] {
        isa::F32_FAMILY
    }

    fn op(spec: &KernelSpec) -> Op {
        spec.op
    }

    fn format_tag(spec: &KernelSpec) -> String {
        spec.format_tag()
    }

    /// `4:128`, `3:col`: as in `KGEN_SPECS`.
    fn entry_format(spec: &KernelSpec) -> String {
        match spec.group {
            Group::Size(g) => format!("{}:{g}", spec.bits),
            Group::Column => format!("{}:col", spec.bits),
        }
    }

    fn registers(spec: &KernelSpec, isa: &Isa, tile: MicroTile) -> RegisterUse {
        RegisterUse::of(spec, isa, tile)
    }

    fn rank_tiles(
        spec: &KernelSpec,
        isa: &Isa,
        target: &TargetDesc,
        shape: (usize, usize),
    ) -> Vec<planner::Candidate> {
        planner::rank_tiles(spec, isa, target, shape)
    }

    /// f32 activations and outputs; `bits` per weight (scales and zeros
    /// stream per group, outside the paper's eq. 5).
    fn footprint(spec: &KernelSpec, _isa: &Isa) -> Footprint {
        Footprint {
            act_bytes: 4,
            weight_half_bits: 2 * u64::from(spec.bits),
            k_granule: Layout::k_granule(spec.bits, spec.group),
        }
    }

    fn geometry(isa: &Isa, tile: MicroTile) -> TileGeometry {
        TileGeometry {
            rows: tile.m_r,
            cols: tile.t_u * isa.lanes,
            layout_cols: tile.t_u * isa.lanes,
            k_unroll: tile.m_u,
        }
    }

    fn predict(
        spec: &KernelSpec,
        isa: &Isa,
        target: &TargetDesc,
        tile: MicroTile,
        shape: (usize, usize),
    ) -> Prediction {
        model::predict(spec, isa, target, tile, shape.0, shape.1)
    }

    fn emit_kernel(plan: &Plan<F32>) -> Result<TokenStream, EmitError> {
        emit::kernel_module(plan, &plan.isa())
    }

    fn target_line(target: &TargetDesc) -> String {
        emit::target_line(target)
    }

    fn file_notes(target: &TargetDesc) -> Vec<String> {
        emit::file_notes(target)
    }

    fn describe(plan: &Plan<F32>) -> Vec<String> {
        emit::describe(plan)
    }

    fn entry_params(rt: &syn::Path) -> TokenStream {
        quote! {
            #rt::FamilyParams::F32(#rt::F32Params {
                group: k::GROUP,
                m_u: k::M_U,
                zcurve: k::ZCURVE,
                x_scale: k::X_SCALE,
                run: k::run,
            })
        }
    }
}
