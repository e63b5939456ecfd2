//! Registry codegen: the run-time detection functions and the
//! `KernelEntry` / `I8KernelEntry` constructors a generated registry holds.

use crate::family::f32::isa::Isa;
use crate::spec::{Group, Op};
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

pub(crate) fn detector(isa: &Isa, name: &syn::Ident) -> TokenStream {
    detector_for(isa.arch, &isa.feature_names(), name)
}

/// A run-time detection function for `features` on `arch` (always true for
/// the portable ISA).
pub(crate) fn detector_for(
    arch: Option<Arch>,
    features: &[&str],
    name: &syn::Ident,
) -> TokenStream {
    match arch {
        None => quote! { fn #name() -> bool { true } },
        Some(Arch::X86_64) => quote! {
            #[cfg(target_arch = "x86_64")]
            fn #name() -> bool { #(::std::arch::is_x86_feature_detected!(#features))&&* }
        },
        Some(Arch::Aarch64) => quote! {
            #[cfg(target_arch = "aarch64")]
            fn #name() -> bool { #(::std::arch::is_aarch64_feature_detected!(#features))&&* }
        },
    }
}

/// The run-time check of an int8 ISA: its features and, for SVE kernels
/// written for one vector length, that length (read with `rdvl` only once
/// SVE is known to be there).
pub(crate) fn detector_i8(isa: &crate::family::int8::isa::I8Isa, name: &syn::Ident) -> TokenStream {
    let Some(bits) = isa.sve_bits else {
        return detector_for(isa.arch, isa.features, name);
    };
    let features = isa.features;
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

pub(crate) fn entry(
    rt: &str,
    t: &TargetDesc,
    module: &syn::Ident,
    plan: &crate::family::f32::planner::Plan,
    arch: Option<Arch>,
    detect: &syn::Ident,
) -> TokenStream {
    // The runtime's `WeightFormat` name, as in `KGEN_SPECS`: `4:128`, `3:col`.
    let format = match plan.spec.group {
        Group::Size(g) => format!("{}:{g}", plan.spec.bits),
        Group::Column => format!("{}:col", plan.spec.bits),
    };
    let kernel = Kernel {
        rt,
        target: t,
        module,
        name: plan.kernel_name(),
        op: plan.spec.op,
        format,
        arch,
        detect,
    };
    kernel.push(|rt| {
        quote! {
            #rt::FamilyParams::F32(#rt::F32Params {
                group: k::GROUP,
                m_u: k::M_U,
                zcurve: k::ZCURVE,
                x_scale: k::X_SCALE,
                run: k::run,
            })
        }
    })
}

pub(crate) fn entry_i8(
    rt: &str,
    t: &TargetDesc,
    module: &syn::Ident,
    p: &crate::family::int8::plan::I8Plan,
    detect: &syn::Ident,
) -> TokenStream {
    let kernel = Kernel {
        rt,
        target: t,
        module,
        name: p.kernel_name(),
        op: p.spec.op,
        format: p.spec.format_tag(),
        arch: crate::family::int8::isa::I8Isa::by_name(p.isa).and_then(|i| i.arch),
        detect,
    };
    kernel.push(|rt| {
        quote! {
            #rt::FamilyParams::Int8(#rt::Int8Params {
                group_bytes: k::GROUP_BYTES,
                signed: k::SIGNED,
                row_pairs: k::ROW_PAIRS,
                run: k::run,
            })
        }
    })
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
