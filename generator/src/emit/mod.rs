//! What every family's emitter shares below the family level: the error
//! type, writing files only when they change, the `cfg` / `target_feature`
//! attributes, run-time feature detection, and copying a template's items
//! into a kernel module. The emitted file and its header, written against
//! the family trait, are [`crate::family::file`].

use proc_macro2::TokenStream;
use quote::quote;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmitError(pub String);

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kgen generator bug: {}", self.0)
    }
}

impl std::error::Error for EmitError {}

/// Writes `text` to `path` unless the file already holds exactly that, so
/// that an unchanged generation does not invalidate downstream builds.
/// Returns whether the file was written.
pub fn write_if_changed(path: &std::path::Path, text: &str) -> std::io::Result<bool> {
    if std::fs::read(path).is_ok_and(|old| old == text.as_bytes()) {
        return Ok(false);
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)?;
    Ok(true)
}

/// `#[cfg(target_arch = ...)]` for an ISA of one architecture; nothing for
/// the portable ISA.
pub(crate) fn arch_cfg(arch: Option<crate::target::Arch>) -> TokenStream {
    match arch {
        Some(a) => {
            let a = a.cfg_name();
            quote! { #[cfg(target_arch = #a)] }
        }
        None => TokenStream::new(),
    }
}

/// `#[target_feature(enable = ...)]` for an entry point; nothing without features.
pub(crate) fn target_feature_attr(features: &[&str]) -> TokenStream {
    if features.is_empty() {
        TokenStream::new()
    } else {
        let joined = features.join(",");
        quote! { #[target_feature(enable = #joined)] }
    }
}

/// Attributes of every function in a kernel module: an ISA with target
/// features gets `#[target_feature]` on each function (LLVM inlines only
/// between functions with the same features, and `inline(always)` cannot be
/// combined with `target_feature`); the portable ISA gets `inline(always)`.
pub(crate) fn fn_attrs(features: &[&str]) -> TokenStream {
    if features.is_empty() {
        quote! { #[inline(always)] }
    } else {
        let joined = features.join(",");
        quote! { #[inline] #[target_feature(enable = #joined)] }
    }
}

/// A template's items with the ISA's function attributes applied to its
/// `unsafe fn`s: templates are written feature-agnostic, with `#[inline(always)]`.
pub(crate) fn template_items(template: &syn::File, features: &[&str]) -> Vec<syn::Item> {
    let attrs = fn_attrs(features);
    let parsed: syn::ItemFn =
        syn::parse2(quote! { #attrs fn __x() {} }).expect("attribute tokens parse");
    template
        .items
        .iter()
        .map(|item| {
            let mut item = item.clone();
            if let syn::Item::Fn(f) = &mut item {
                if !features.is_empty() && matches!(f.sig.safety, syn::Safety::Unsafe(_)) {
                    f.attrs.retain(|a| !a.path().is_ident("inline"));
                    f.attrs.extend(parsed.attrs.iter().cloned());
                }
            }
            item
        })
        .collect()
}

/// A run-time detection function for `features` on `arch` (always true for
/// the portable ISA).
pub(crate) fn detector_for(
    arch: Option<crate::target::Arch>,
    features: &[&str],
    name: &syn::Ident,
) -> TokenStream {
    use crate::target::Arch;
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
