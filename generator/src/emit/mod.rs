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

/// The name of a template's function, constant or static (what kernels
/// call); `None` for other items.
pub(crate) fn item_name(item: &syn::Item) -> Option<String> {
    match item {
        syn::Item::Fn(f) => Some(f.sig.ident.to_string()),
        syn::Item::Const(c) => Some(c.ident.to_string()),
        syn::Item::Static(s) => Some(s.ident.to_string()),
        _ => None,
    }
}

/// A template extending `base` (as XNNPACK's ISAs extend others: AVX-VNNI
/// is AVX2 with another dot instruction): `base`'s items, each replaced in
/// place by `own`'s item of the same name (the same line, for `use`s);
/// `own`'s other items follow the item they follow in `own`.
pub(crate) fn extend_template(base: syn::File, own: syn::File) -> syn::File {
    use quote::ToTokens;
    let key = |item: &syn::Item| match item {
        syn::Item::Type(t) => Some(t.ident.to_string()),
        syn::Item::Use(u) => Some(u.to_token_stream().to_string()),
        _ => item_name(item),
    };
    let mut items = base.items;
    let mut next = 0;
    for item in own.items {
        let k = key(&item);
        match items.iter().position(|b| k.is_some() && key(b) == k) {
            Some(i) => {
                items[i] = item;
                next = i + 1;
            }
            None => {
                items.insert(next, item);
                next += 1;
            }
        }
    }
    syn::File { items, ..own }
}

/// The template items `code` calls, directly or through other kept items
/// (functions, constants, statics and one-name `use` lines; type aliases
/// and glob imports always stay), in the
/// template's order. A kernel's `ops` thus holds what it runs and nothing
/// else, whatever else its template (or the one it extends) defines.
pub(crate) fn keep_used(items: Vec<syn::Item>, code: &[&TokenStream]) -> Vec<syn::Item> {
    use quote::ToTokens;
    use std::collections::BTreeSet;
    fn idents(tokens: TokenStream, out: &mut BTreeSet<String>) {
        for t in tokens {
            match t {
                proc_macro2::TokenTree::Ident(i) => {
                    out.insert(i.to_string());
                }
                proc_macro2::TokenTree::Group(g) => idents(g.stream(), out),
                _ => {}
            }
        }
    }
    // A `use` of one name counts as an item of that name (an unused one
    // would warn); glob imports stay.
    fn use_name(tree: &syn::UseTree) -> Option<String> {
        match tree {
            syn::UseTree::Path(p) => use_name(&p.tree),
            syn::UseTree::Name(n) => Some(n.ident.to_string()),
            _ => None,
        }
    }
    let name = |item: &syn::Item| match item {
        syn::Item::Use(u) => use_name(&u.tree),
        _ => item_name(item),
    };
    let mut used = BTreeSet::new();
    for c in code {
        idents((*c).clone(), &mut used);
    }
    let mut keep = vec![false; items.len()];
    loop {
        let mut grew = false;
        for (i, item) in items.iter().enumerate() {
            if !keep[i] && name(item).is_none_or(|n| used.contains(&n)) {
                keep[i] = true;
                grew = true;
                idents(item.to_token_stream(), &mut used);
            }
        }
        if !grew {
            break;
        }
    }
    items
        .into_iter()
        .zip(keep)
        .filter_map(|(item, k)| k.then_some(item))
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

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;

    fn names(items: &[syn::Item]) -> Vec<String> {
        items
            .iter()
            .map(|i| match i {
                syn::Item::Fn(f) => f.sig.ident.to_string(),
                syn::Item::Type(t) => t.ident.to_string(),
                syn::Item::Const(c) => c.ident.to_string(),
                other => other.to_token_stream().to_string(),
            })
            .collect()
    }

    /// Redefined items take the base's place; new ones follow what they
    /// follow in the derived template; a shared `use` appears once.
    #[test]
    fn a_derived_template_overrides_in_place_and_inserts_after() {
        let base: syn::File = syn::parse_quote! {
            use core::arch::x86_64::*;
            pub type I = u32;
            pub fn a() -> u32 { 1 }
            pub fn dot() -> u32 { 2 }
            pub fn c() -> u32 { 3 }
        };
        let own: syn::File = syn::parse_quote! {
            use core::arch::x86_64::*;
            pub fn dot() -> u32 { 20 }
            pub fn flip() -> u32 { 4 }
        };
        let f = extend_template(base, own);
        assert_eq!(
            names(&f.items),
            [
                "use core :: arch :: x86_64 :: * ;",
                "I",
                "a",
                "dot",
                "flip",
                "c"
            ]
        );
        let dot = f.items[3].to_token_stream().to_string();
        assert!(dot.contains("20"), "{dot}");
    }

    /// Items stay when the code or a kept item calls them; type aliases
    /// and globs always; unused items and one-name imports go.
    #[test]
    fn keep_used_follows_calls_through_items() {
        let file: syn::File = syn::parse_quote! {
            use core::arch::x86_64::*;
            use core::arch::asm;
            pub type I = u32;
            pub const TABLE: [u8; 2] = [1, 2];
            pub fn lut() -> u8 { TABLE[0] }
            pub fn top() -> u8 { lut() }
            pub fn unused() -> u8 { 0 }
        };
        let code = quote! { fn k() { ops::top(); } };
        let kept = keep_used(file.items, &[&code]);
        assert_eq!(
            names(&kept),
            [
                "use core :: arch :: x86_64 :: * ;",
                "I",
                "TABLE",
                "lut",
                "top"
            ]
        );
    }
}
