//! The emitter: plans in, formatted Rust source out.
//!
//! Code is built as token trees with `quote` (never by pasting strings),
//! parsed back into a `syn::File` — a parse failure is a generator bug and
//! fails loudly — and printed with prettyplease. The only text added by hand
//! is the comment header, which token trees cannot carry.
//!
//! Each plan becomes one module named after its kernel
//! (`q4g32_gemv_1x64c2__avx512f`, see [`crate::family::plan::kernel_name`]) holding:
//! - `ops`: the ISA's template (`templates/f32/<isa>.rs`), the primitives;
//! - `micro_r{R}`: the micro kernels for `R = 1..=m_r` activation rows, fully
//!   unrolled over one packing unit with systematic register names
//!   (`p_{word}_{t}` packed words, `v_{value}_{t}` unpacked weights,
//!   `x_{row}_{value}` broadcasts, `a_{row}_{t}_{j}` the m_u accumulators of
//!   output vector t);
//! - `body`: the mini-GEMV driver visiting the plan's blocks in its order;
//! - `run`: the public entry, a thin `#[target_feature]` wrapper over `body`.

use crate::emit::arch_cfg;
use crate::emit::target_feature_attr;
use crate::emit::template_items;
use crate::emit::{fn_attrs, EmitError};
use crate::family::f32::isa::Isa;
use crate::family::f32::model::unpack_steps;
use crate::family::f32::planner::Plan;
use crate::family::plan::BlockOrder;
use crate::spec::Group;
use crate::target::{Arch, TargetDesc};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

fn lit(v: usize) -> Literal {
    Literal::usize_unsuffixed(v)
}

/// The f32 family's `target:` header line: the target's features, vectors,
/// registers and L1, which the f32 model reads.
pub(crate) fn target_line(target: &TargetDesc) -> String {
    let features: Vec<_> = target
        .features
        .iter()
        .map(|f| crate::family::f32::isa::feature_name(*f))
        .collect();
    format!(
        "{} ({}; {}; {}; {}-bit vectors, {} registers; L1d {} KiB)",
        target.name,
        target.description,
        target.arch.cfg_name(),
        features.join(" "),
        target.vector_bits,
        target.vector_registers,
        target.cache.l1d / 1024
    )
}

/// Header lines of an f32 file: on aarch64, that the extensions are unused.
pub(crate) fn file_notes(target: &TargetDesc) -> Vec<String> {
    use crate::target::Feature;
    let extensions = [Feature::Dotprod, Feature::I8mm, Feature::Sve]
        .iter()
        .any(|f| target.has(*f));
    if target.arch == Arch::Aarch64 && extensions {
        vec![
            "note: aarch64 f32 kernels use the NEON template (templates/f32/neon.rs); dotprod/i8mm/SVE".to_string(),
            "      templates are not written yet, so this target's extensions are not used.".to_string(),
        ]
    } else {
        Vec::new()
    }
}

/// Header lines of one f32 kernel: spec, template, tile and blocks, eq. 4
/// and 5, the model's figures.
pub(crate) fn describe(p: &Plan) -> Vec<String> {
    let isa = p.isa();
    let r = &p.registers;
    vec![
        format!("spec:     {}", p.spec),
        format!(
            "template: {} (family f32, ISA {})",
            isa.template_path, isa.name
        ),
        format!(
            "plan:     m_u={} t_u={} m_r={} m_b={} t_b={} lanes={} order={:?}",
            p.tile.m_u, p.tile.t_u, p.tile.m_r, p.block.m_b, p.block.t_b, p.lanes, p.order
        ),
        format!(
            "eq. 4:    {} accumulators + {} weights + {} broadcast = {} <= {} registers; {} unpack masks, {} reloaded",
            r.accumulators,
            r.weights,
            r.broadcast,
            r.total,
            r.limit,
            r.masks,
            r.spilled_masks()
        ),
        format!(
            "eq. 5:    {} of {} L1 bits ({:.1}%)",
            p.block.lhs_bits,
            p.block.gamma_bits,
            100.0 * p.block.utilization
        ),
        format!(
            "model:    {:.1} GB/s of weights, {:.1} GFLOPS on one core ({:?}-bound) at {}x{}",
            p.prediction.gbs, p.prediction.gflops, p.prediction.bound, p.shape.0, p.shape.1
        ),
    ]
}

/// Constants a micro kernel and the driver share.
struct Geometry {
    bits: u32,
    lanes: usize,
    t_u: usize,
    m_u: usize,
    m_r: usize,
    /// Values per packing unit.
    vpu: usize,
    /// Words per packing unit.
    wpu: usize,
    /// Packing units per group (`None`: whole column).
    upg: Option<usize>,
    /// The ISA's target features (empty for portable).
    features: Vec<&'static str>,
}

impl Geometry {
    fn of(plan: &Plan) -> Geometry {
        let s = &plan.spec;
        Geometry {
            bits: s.bits,
            lanes: plan.lanes,
            t_u: plan.tile.t_u,
            m_u: plan.tile.m_u,
            m_r: plan.tile.m_r,
            vpu: s.values_per_unit(),
            wpu: s.words_per_unit(),
            upg: s.group.size().map(|g| g / s.values_per_unit()),
            features: Isa::by_name(plan.isa)
                .map(|i| i.feature_names())
                .unwrap_or_default(),
        }
    }

    fn tw(&self) -> usize {
        self.lanes * self.t_u
    }
}

pub(crate) fn kernel_module(plan: &Plan, isa: &Isa) -> Result<TokenStream, EmitError> {
    let template: syn::File = syn::parse_str(isa.template).map_err(|e| {
        EmitError(format!(
            "template {} does not parse: {e}",
            isa.template_path
        ))
    })?;
    let template_items = template_items(&template, &isa.feature_names());
    let geo = Geometry::of(plan);
    let name = plan.kernel_name();
    let module = format_ident!("{}", name);
    let micro: Vec<TokenStream> = (1..=geo.m_r).map(|r| micro_kernel(&geo, r)).collect();
    let driver = driver(plan, &geo);
    let feature_names = isa.feature_names();
    let cfg = arch_cfg(isa.arch);
    let tf = target_feature_attr(&feature_names);
    let isa_name = isa.name;
    let bits = geo.bits;
    let group = lit(plan.spec.group.size().unwrap_or(0));
    let (lanes, m_u, t_u, m_r) = (lit(geo.lanes), lit(geo.m_u), lit(geo.t_u), lit(geo.m_r));
    let (m_b, t_b) = (lit(plan.block.m_b), lit(plan.block.t_b));
    let zcurve = plan.order == BlockOrder::ZCurve;
    let x_scale = crate::family::f32::model::x_scales(geo.bits);
    let doc = format!(
        " {} on {}: see the file header for the plan.",
        plan.spec, plan.target
    );
    Ok(quote! {
        #[doc = #doc]
        #cfg
        #[allow(unused_unsafe, unsafe_op_in_unsafe_fn, unused_mut, unused_variables, clippy::all)]
        pub mod #module {
            /// The ISA's primitives, copied from its template.
            #[allow(dead_code)]
            pub mod ops {
                #(#template_items)*
            }

            pub const NAME: &str = #name;
            pub const ISA: &str = #isa_name;
            /// Run-time CPU features the kernel needs.
            pub const FEATURES: &[&str] = &[#(#feature_names),*];
            pub const BITS: u32 = #bits;
            /// Group size along K; 0 means one group per whole column.
            pub const GROUP: usize = #group;
            pub const LANES: usize = #lanes;
            pub const M_U: usize = #m_u;
            pub const T_U: usize = #t_u;
            pub const M_R: usize = #m_r;
            pub const M_B: usize = #m_b;
            pub const T_B: usize = #t_b;
            pub const ZCURVE: bool = #zcurve;
            /// Factors the activations are multiplied by before the call, per
            /// position in a packing unit (values masked in place are read as
            /// `q * 2^shift`).
            pub const X_SCALE: &[f32] = &[#(#x_scale),*];

            #(#micro)*

            #driver

            /// Computes `y = x W` for `m` rows over column panels
            /// `panel_begin..panel_end` (see `kgen::layout`), visiting blocks in
            /// Z-curve order if `zcurve` (the plan's choice is `ZCURVE`).
            ///
            /// # Safety
            /// The CPU must have `FEATURES`; `w`, `sc`, `nz` must hold a matrix packed
            /// for this kernel's layout with `k_pad x n_pad` values; `x` is `m x k_pad`,
            /// `xs` is `m x groups` (group sums of `x`), `y` is `m x n_pad`.
            #tf
            pub unsafe fn run(
                w: *const u32, sc: *const f32, nz: *const f32, x: *const f32, xs: *const f32,
                y: *mut f32, m: usize, k_pad: usize, n_pad: usize, panel_begin: usize, panel_end: usize,
                zcurve: bool,
            ) {
                unsafe { body(w, sc, nz, x, xs, y, m, k_pad, n_pad, panel_begin, panel_end, zcurve) }
            }
        }
    })
}

/// The unrolled micro kernel for `rows` activation rows.
fn micro_kernel(geo: &Geometry, rows: usize) -> TokenStream {
    let fname = format_ident!("micro_r{}", rows);
    let lanes = geo.lanes;
    let tw = geo.tw();
    let mut masks = std::collections::BTreeMap::new();
    for step in unpack_steps(geo.bits).iter().filter(|s| s.needs_mask) {
        let shift = if step.in_place { step.shift } else { 0 };
        let value = Literal::u32_unsuffixed((((1u64 << geo.bits) - 1) << shift) as u32);
        let name = mask_name(step);
        masks.insert(shift, quote! { let #name = ops::splatw(#value); });
    }
    let masks = masks.values();
    // m_u independent accumulators per output vector and row: value e of a
    // unit goes to accumulator e mod m_u, so FMA chains are m_u times shorter.
    let a = |r: usize, t: usize, j: usize| format_ident!("a_{}_{}_{}", r, t, j);
    let y_at = |r: usize, t: usize| {
        let (row, off) = (lit(r), lit(t * lanes));
        quote! { y.add(#row * ldy + #off) }
    };
    // Pairwise sum of a row/column's accumulators.
    let sum = |r: usize, t: usize| {
        let mut terms: Vec<TokenStream> = (0..geo.m_u)
            .map(|j| {
                let i = a(r, t, j);
                quote! { #i }
            })
            .collect();
        while terms.len() > 1 {
            terms = terms
                .chunks(2)
                .map(|c| match c {
                    [l, rr] => quote! { ops::add(#l, #rr) },
                    [l] => l.clone(),
                    _ => unreachable!(),
                })
                .collect();
        }
        terms.pop().expect("m_u >= 1")
    };

    let mut init = TokenStream::new();
    let mut finish = TokenStream::new();
    for r in 0..rows {
        for t in 0..geo.t_u {
            for j in 0..geo.m_u {
                let ai = a(r, t, j);
                let start = if geo.upg.is_none() && j == 0 {
                    // Whole column: accumulate straight into y's running value.
                    let yp = y_at(r, t);
                    quote! { ops::load(#yp) }
                } else {
                    quote! { ops::zero() }
                };
                init.extend(quote! { let mut #ai = #start; });
            }
        }
    }
    if geo.upg.is_some() {
        for t in 0..geo.t_u {
            let s = format_ident!("s_{}", t);
            let z = format_ident!("z_{}", t);
            let off = lit(t * lanes);
            finish.extend(quote! {
                let #s = ops::load(sc.add(#off));
                let #z = ops::load(nz.add(#off));
            });
        }
        for r in 0..rows {
            let xs_r = format_ident!("xs_{}", r);
            let row = lit(r);
            finish.extend(quote! { let #xs_r = ops::splat(xs.add(#row * ldxs)); });
            for t in 0..geo.t_u {
                let (s, z) = (format_ident!("s_{}", t), format_ident!("z_{}", t));
                let (total, yp) = (sum(r, t), y_at(r, t));
                // eq. 2: y += s * <x_g, q_g> - s z <x_g, 1>, with nz = -s z. y lives
                // in L1 between groups, which leaves the registers to the accumulators.
                finish.extend(quote! {
                    let yv = ops::fma(#total, #s, ops::load(#yp));
                    ops::store(#yp, ops::fma(#z, #xs_r, yv));
                });
            }
        }
    } else {
        for r in 0..rows {
            for t in 0..geo.t_u {
                let (total, yp) = (sum(r, t), y_at(r, t));
                finish.extend(quote! { ops::store(#yp, #total); });
            }
        }
    }

    // One packing unit, fully unrolled.
    let mut unit = TokenStream::new();
    for word in 0..geo.wpu {
        for t in 0..geo.t_u {
            let p = format_ident!("p_{}_{}", word, t);
            let off = lit(word * tw + t * lanes);
            unit.extend(quote! { let #p = ops::loadw(w.add(#off)); });
        }
    }
    for (e, step) in unpack_steps(geo.bits).iter().enumerate() {
        for r in 0..rows {
            let xi = format_ident!("x_{}_{}", r, e);
            let (row, col) = (lit(r), lit(e));
            unit.extend(quote! { let #xi = ops::splat(x.add(#row * ldx + #col)); });
        }
        for t in 0..geo.t_u {
            let v = format_ident!("v_{}_{}", e, t);
            let p = format_ident!("p_{}_{}", step.word, t);
            let shift = Literal::u32_unsuffixed(step.applied_shift());
            let mut val = if step.applied_shift() == 0 {
                quote! { #p }
            } else {
                quote! { ops::srl::<#shift>(#p) }
            };
            if step.straddles {
                let next = format_ident!("p_{}_{}", step.word + 1, t);
                let back = Literal::u32_unsuffixed(32 - step.shift);
                val = quote! { ops::or(#val, ops::sll::<#back>(#next)) };
            }
            if step.needs_mask {
                let m = mask_name(step);
                val = quote! { ops::and(#val, #m) };
            }
            unit.extend(quote! { let #v = ops::cvt(#val); });
            for r in 0..rows {
                let xi = format_ident!("x_{}_{}", r, e);
                let ai = a(r, t, e % geo.m_u);
                unit.extend(quote! { #ai = ops::fma(#v, #xi, #ai); });
            }
        }
    }
    let (wstep, xstep) = (lit(geo.wpu * tw), lit(geo.vpu));
    let advance = quote! {
        w = w.add(#wstep);
        x = x.add(#xstep);
    };
    let body = match geo.upg {
        Some(upg) => {
            let upg = lit(upg);
            quote! {
                for _ in 0..units / #upg {
                    #init
                    for _ in 0..#upg {
                        #unit
                        #advance
                    }
                    #finish
                    sc = sc.add(n_pad);
                    nz = nz.add(n_pad);
                    xs = xs.add(1);
                }
            }
        }
        None => quote! {
            #init
            for _ in 0..units {
                #unit
                #advance
            }
            #finish
        },
    };
    let doc = format!(
        " Micro kernel: {rows} row(s) x {tw} columns, {} accumulator(s) per output vector, \
         over `units` packing units of {} values.",
        geo.m_u, geo.vpu
    );
    let attrs = fn_attrs(&geo.features);
    quote! {
        #[doc = #doc]
        #attrs
        unsafe fn #fname(
            mut w: *const u32, mut x: *const f32, mut xs: *const f32, mut sc: *const f32, mut nz: *const f32,
            y: *mut f32, ldx: usize, ldxs: usize, ldy: usize, n_pad: usize, units: usize,
        ) {
            unsafe {
                #(#masks)*
                #body
            }
        }
    }
}

/// The mask register for a step: the level mask at the value's in-place position.
fn mask_name(step: &crate::family::f32::model::UnpackStep) -> proc_macro2::Ident {
    format_ident!("mask_{}", if step.in_place { step.shift } else { 0 })
}

/// The mini-GEMV driver: zeroes `y`, visits the blocks, applies the
/// whole-column epilogue (eq. 1).
fn driver(plan: &Plan, geo: &Geometry) -> TokenStream {
    let (tw, wpu) = (lit(geo.tw()), lit(geo.wpu));
    let bits = lit(geo.bits as usize);
    let m_r = lit(geo.m_r);
    let grouped = plan.spec.group != Group::Column;
    let gsize = lit(plan.spec.group.size().unwrap_or(1));
    let groups_total = if grouped {
        quote! { k_pad / #gsize }
    } else {
        quote! { 1 }
    };
    let group_of_k0 = if grouped {
        quote! { k0 / #gsize }
    } else {
        quote! { 0 }
    };
    let remainder_arms: Vec<TokenStream> = (1..geo.m_r)
        .map(|r| {
            let f = format_ident!("micro_r{}", r);
            let rl = lit(r);
            quote! { #rl => #f(wt, xr, xsr, sct, nzt, yr, ldx, ldxs, ldy, n_pad, units), }
        })
        .collect();
    let full = format_ident!("micro_r{}", geo.m_r);
    let epilogue = if grouped {
        TokenStream::new()
    } else {
        quote! {
            // eq. 1: y = s <x, q> - s z <x, 1>, applied once per column.
            for r in 0..m {
                let xsum = *xs.add(r * ldxs);
                for c in c_begin..c_end {
                    let yp = y.add(r * ldy + c);
                    *yp = *sc.add(c) * *yp + *nz.add(c) * xsum;
                }
            }
        }
    };
    let attrs = fn_attrs(&geo.features);
    quote! {
        #attrs
        unsafe fn body(
            w: *const u32, sc: *const f32, nz: *const f32, x: *const f32, xs: *const f32,
            y: *mut f32, m: usize, k_pad: usize, n_pad: usize, panel_begin: usize, panel_end: usize,
            zcurve: bool,
        ) {
            unsafe {
                let kw = k_pad * #bits / 32;
                let bw = M_B * #bits / 32;
                let k_blocks = (kw + bw - 1) / bw;
                let (ldx, ldxs, ldy) = (k_pad, #groups_total, n_pad);
                let c_begin = panel_begin * T_B;
                let c_end = (panel_end * T_B).min(n_pad);
                for r in 0..m {
                    core::ptr::write_bytes(y.add(r * ldy + c_begin), 0, c_end - c_begin);
                }
                let visit = |p: usize, kb: usize| {
                    let pw = T_B.min(n_pad - p * T_B);
                    let rows_w = bw.min(kw - kb * bw);
                    let units = rows_w / #wpu;
                    let k0 = kb * M_B;
                    let g0 = #group_of_k0;
                    let base = w.add(p * T_B * kw + kb * bw * pw);
                    for tile in 0..pw / #tw {
                        let c = p * T_B + tile * #tw;
                        let wt = base.add(tile * #tw * rows_w);
                        let sct = sc.add(g0 * n_pad + c);
                        let nzt = nz.add(g0 * n_pad + c);
                        let mut r = 0;
                        while r + #m_r <= m {
                            let xr = x.add(r * ldx + k0);
                            let xsr = xs.add(r * ldxs + g0);
                            let yr = y.add(r * ldy + c);
                            #full(wt, xr, xsr, sct, nzt, yr, ldx, ldxs, ldy, n_pad, units);
                            r += #m_r;
                        }
                        if r < m {
                            let xr = x.add(r * ldx + k0);
                            let xsr = xs.add(r * ldxs + g0);
                            let yr = y.add(r * ldy + c);
                            match m - r {
                                #(#remainder_arms)*
                                _ => unreachable!(),
                            }
                        }
                    }
                };
                if zcurve {
                    // Morton order over (K block, panel): interleave the index bits.
                    let panels = panel_end - panel_begin;
                    let side = k_blocks.max(panels).next_power_of_two();
                    for d in 0..side * side {
                        let (mut kb, mut p) = (0usize, 0usize);
                        for b in 0..usize::BITS / 2 {
                            kb |= ((d >> (2 * b)) & 1) << b;
                            p |= ((d >> (2 * b + 1)) & 1) << b;
                        }
                        if kb < k_blocks && p < panels {
                            visit(panel_begin + p, kb);
                        }
                    }
                } else {
                    for p in panel_begin..panel_end {
                        for kb in 0..k_blocks {
                            visit(p, kb);
                        }
                    }
                }
                #epilogue
            }
        }
    }
}
