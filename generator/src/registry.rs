//! Registry codegen: the run-time detection functions and the
//! `KernelEntry` constructors a generated registry holds, for every family.

use crate::family::plan::Plan;
use crate::family::{Family, FamilyIsa};
use crate::spec::Op;
use crate::target::{Arch, TargetDesc};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

pub(crate) fn rust_ident(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("t_{s}")
    } else {
        s
    }
}

/// `v.push(KernelEntry { .. })` for the kernel of `plan` in the generated
/// module `module` of target `t`, checked at run time by `detect`.
pub(crate) fn entry<F: Family>(
    rt: &str,
    t: &TargetDesc,
    module: &syn::Ident,
    plan: &Plan<F>,
    detect: &syn::Ident,
) -> TokenStream {
    let kernel = Kernel {
        rt,
        target: t,
        module,
        name: plan.kernel_name(),
        op: F::op(&plan.spec),
        format: F::entry_format(&plan.spec),
        arch: plan.isa().arch(),
        detect,
    };
    kernel.push(F::entry_params)
}

/// What every generated `KernelEntry` states, whatever its family.
struct Kernel<'a> {
    rt: &'a str,
    target: &'a TargetDesc,
    module: &'a syn::Ident,
    name: String,
    op: Op,
    format: String,
    arch: Option<Arch>,
    detect: &'a syn::Ident,
}

impl Kernel<'_> {
    /// `v.push(KernelEntry { .. })` for the kernel module `module::name`,
    /// with the family's `params` (written against the runtime path and the
    /// kernel module imported as `k`).
    fn push(&self, params: impl FnOnce(&syn::Path) -> TokenStream) -> TokenStream {
        let rt: syn::Path = syn::parse_str(self.rt).expect("runtime path checked by caller");
        let k = format_ident!("{}", self.name);
        let module = self.module;
        let target_name = &self.target.name;
        let format = &self.format;
        let gemm = matches!(self.op, Op::Gemm { .. });
        let detect = self.detect;
        let cfg = crate::emit::arch_cfg(self.arch);
        let params = params(&rt);
        quote! {
            #cfg
            {
                use #module::#k as k;
                v.push(#rt::KernelEntry {
                    name: k::NAME,
                    isa: k::ISA,
                    target: #target_name,
                    features: k::FEATURES,
                    format: #format,
                    bits: k::BITS,
                    lanes: k::LANES,
                    t_u: k::T_U,
                    m_r: k::M_R,
                    m_b: k::M_B,
                    t_b: k::T_B,
                    gemm: #gemm,
                    detect: #detect,
                    params: #params,
                });
            }
        }
    }
}
