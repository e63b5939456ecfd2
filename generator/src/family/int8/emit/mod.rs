//! The int8 family's emitter: one Rust module per kernel (the template's
//! primitives, the micro kernels for 1..=m_r rows, the driver over panels,
//! row groups and tiles with calls over all of K, and `run`), and its lines
//! of the file header.

use crate::family::int8::emit::lane::micro_kernel;
use crate::family::int8::emit::micro::{fn_attrs, lit, MicroSpec};
use crate::family::int8::isa::I8Isa;
use crate::family::int8::plan::I8Plan;
use crate::family::int8::spec::I8Spec;
use crate::format::row::SubScaleKind;
pub(crate) mod lane;
pub(crate) mod micro;
pub mod mmla;
pub mod sve;

use crate::emit::{item_name, EmitError};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

// What a format's kernels call from their template, by the part of the
// format that calls it: `ops_items` checks that the template has these
// before the emitter writes calls to them. (What a kernel's `ops` holds is
// what its code calls: `crate::emit::keep_used`.)

/// The codebook formats' table and lookup (IQ4_NL).
const CODEBOOK_ITEMS: &[&str] = &["CODEBOOK", "lut"];
/// The nibble split of table-lookup kernels (codebook and grid formats).
const INDEX_ITEMS: &[&str] = &["idx_lo", "idx_hi"];
/// kgen's 2- and 1-bit grids.
const GRID_ITEMS: &[&str] = &["GRID", "grid_lut"];
/// Integer sub-scales ([`crate::family::int8::emit::micro::int_scales`]):
/// those of every form, then each form's own.
const INT_SCALE_ITEMS: &[&str] = &["sum_pair", "scaled_sum"];
const INT_NIBBLE_ITEMS: &[&str] = &["SUB_CTL", "sub_bytes", "sub_scale", "sub_mins"];
/// The 6-bit scale-and-min form's (Q4_K, Q5_K).
const INT_SCALE_MIN_ITEMS: &[&str] = &["SUB_CTL", "sub_bytes", "scale_byte", "min_pair"];
/// The nibble form's on ISAs that pack a block's halves
/// ([`crate::family::int8::isa::I8Isa::int_halves_packed`]).
const INT_PACKED_ITEMS: &[&str] = &["join_halves", "sub_pair", "sub_mins", "addi", "unbias"];
const INT_SIGNED_ITEMS: &[&str] = &[
    "SUB_CTL_S",
    "sub_pair_s",
    "sub_scale_s",
    "sub_offset_s",
    "dot2_sc",
];
/// What the lane kernels of a format with one weight scale per group
/// (`group_scale`) use to sum the group's integer dots.
const GROUP_INT_ITEMS: &[&str] = &["addi"];
/// The 2-bit unpack (grid kernels unpack by table lookups instead).
const TWO_BIT_ITEMS: &[&str] = &["crumb"];
/// The odd bit pairs in place, where
/// [`crate::family::int8::emit::lane::masked_odd_crumbs`].
const ODD_CRUMB_ITEMS: &[&str] = &["crumb1_x4", "crumb3_x4", "join_crumbs"];
/// The fifth-bit unpack with the lanes' two-dot accumulate, or with the
/// pair layouts' plane split and offset removal.
const FIVE_BIT_LANE: &[&str] = &["hb_lo", "hb_hi", "dot2_u"];
const FIVE_BIT_PAIR: &[&str] = &["hb_lo", "hb_hi", "hb_pair", "sub_bias"];
/// The 3-bit unpack (lane layouts only).
const THREE_BIT_ITEMS: &[&str] = &["lo3", "hi3", "spill3"];
/// [`THREE_BIT_ITEMS`] of the GEMVs that read high levels in place.
const THREE_BIT_HI16: &str = "hi3_16";
/// The 6-bit unpack, with the 5-bit kernels' two-dot accumulate (lanes)
/// or offset removal (pairs).
const SIX_BIT_LANE: &[&str] = &["lo6", "spill6", "dot2_u"];
const SIX_BIT_PAIR: &[&str] = &["lo6", "spill6", "sub_bias"];

/// Header lines of one int8 kernel: format and its levels, template,
/// layout, tile and blocks, registers and L1, the model's figures.
pub(crate) fn describe(p: &I8Plan) -> Vec<String> {
    let isa = p.isa();
    // Signed sub-scales (Q3_K, Q6_K): a scale per 16 values, and whether
    // the layout keeps them as integers.
    let signed_scales = match (
        p.spec.scales_per_block(),
        crate::family::int8::emit::micro::int_scales(&p.spec, &isa),
    ) {
        (1, _) => String::new(),
        (spb, kept) => format!(
            ", a scale per {} values{}",
            32 / spb,
            if kept {
                " (kept as i8 under the super-block's f16 d)"
            } else {
                ""
            }
        ),
    };
    vec![
        format!(
            "format:   {} ({}), op {}",
            p.spec.format_tag(),
            if p.spec.codebook() && isa.offsets_signed(&p.spec) {
                format!(
                    "{}-bit codebook indices, table lookup to int8 level + 128",
                    p.spec.bits()
                )
            } else if p.spec.codebook() {
                format!(
                    "{}-bit codebook indices, table lookup to signed int8",
                    p.spec.bits()
                )
            } else if let Some(grid) = p.spec.format.grid() {
                format!(
                    "{}-bit indices into the grid {grid:?}, table lookup to unsigned levels + {}",
                    p.spec.bits(),
                    p.spec.format.offset()
                )
            } else if p.spec.mins() {
                format!(
                    "{}-bit unsigned levels, a scale and a min per {} values{}",
                    p.spec.bits(),
                    32 / p.spec.scales_per_block(),
                    if isa.signed_levels(&p.spec) {
                        " (read as signed nibbles, 8 d added back with the min)"
                    } else {
                        match crate::family::int8::emit::micro::int_scale_form(&p.spec, &isa) {
                            Some(f) if f.kind == SubScaleKind::ScaleMin => {
                                " (kept as 6-bit integers under the super-block's f16 d and dmin)"
                            }
                            Some(_) => {
                                " (kept as 4-bit integers under the super-block's f16 d and dmin)"
                            }
                            None => "",
                        }
                    }
                )
            } else if p.spec.bits() == 5 {
                format!(
                    "5-bit, nibbles + fifth bits, unsigned levels - {}",
                    p.spec.format.offset()
                )
            } else if p.spec.bits() == 6 {
                format!(
                    "6-bit unsigned levels - {}{signed_scales}",
                    p.spec.format.offset()
                )
            } else if p.spec.bits() == 2 {
                format!("2-bit unsigned levels - {}", p.spec.format.offset())
            } else if matches!(p.spec.bits(), 3 | 4) {
                format!(
                    "{}-bit unsigned levels - {}{}{signed_scales}",
                    p.spec.bits(),
                    p.spec.format.offset(),
                    if isa.signed_levels(&p.spec) {
                        " (read as signed nibbles)"
                    } else {
                        ""
                    }
                )
            } else if isa.offsets_signed(&p.spec) {
                "8-bit signed, read as level + 128".to_string()
            } else {
                "8-bit signed".to_string()
            },
            p.spec.op.name()
        ),
        format!(
            "template: {} (family int8, ISA {})",
            isa.template_chain_for(p.spec.op),
            isa.name
        ),
        format!(
            "layout:   {} ({} columns interleaved in {}-byte groups{})",
            p.layout_name(),
            p.lanes * p.tile.t_u,
            isa.group_bytes,
            if p.spec.bits() == 3 {
                ", 3-bit levels in nibbles, a fourth chunk in their top bits"
            } else if p.spec.codebook() {
                ", unsigned nibble indices"
            } else if p.spec.format.grid().is_some() && p.spec.bits() == 1 {
                ", 1-bit indices, bit c of byte j is value 4c + j"
            } else if p.spec.format.grid().is_some() {
                ", 2-bit indices in the 4 bit pairs of each byte"
            } else if p.spec.bits() == 2 {
                ", 2-bit levels in the 4 bit pairs of each byte"
            } else if isa.signed_nibbles && p.spec.bits() == 4 {
                ", signed nibbles read as 16 q"
            } else if p.spec.bits() == 5 {
                ", nibble chunks + a plane of fifth bits"
            } else if p.spec.bits() == 6 {
                ", 6-bit bytes carrying the spill chunks' bit pairs"
            } else {
                ""
            }
        ),
        format!(
            "plan:     t_u={} (micro tile t_sub={}) m_r={} columns per vector={} m_b={} t_b={}{}",
            p.tile.t_u,
            p.tile.t_sub,
            p.tile.m_r,
            p.lanes,
            p.block.m_b,
            p.block.t_b,
            if isa.mmla && p.tile.m_r > 1 {
                " (2x2 smmla tiles, activation rows in pairs)"
            } else {
                ""
            }
        ),
        format!(
            "registers {} <= {}; L1 {} of {} bits",
            p.registers.used, p.registers.limit, p.block.lhs_bits, p.block.gamma_bits
        ),
        format!(
            "model:    {:.1} GB/s of weights, {:.1} GFLOPS on one core",
            p.prediction.gbs, p.prediction.gflops
        ),
    ]
}

pub(crate) fn kernel_module(p: &I8Plan) -> Result<TokenStream, EmitError> {
    let isa =
        I8Isa::by_name(p.isa).ok_or_else(|| EmitError(format!("unknown int8 ISA {}", p.isa)))?;
    let items = ops_items(&p.spec, &isa)?;
    let name = p.kernel_name();
    let module = format_ident!("{}", name);
    let m = MicroSpec::from(p);
    let micro: Vec<TokenStream> = (1..=p.tile.m_r).map(|r| micro(&m, &isa, r)).collect();
    let driver = driver(p, &isa);
    let unpack = if crate::family::int8::emit::micro::scratch_levels(&p.spec, &isa) {
        crate::family::int8::emit::lane::unpack_fn(&m, &isa)
    } else {
        TokenStream::new()
    };
    let cfg = crate::emit::arch_cfg(isa.arch);
    let tf = crate::emit::target_feature_attr(isa.features);
    let features = isa.features;
    let isa_name = isa.name;
    let bits = p.spec.bits();
    let (lanes, t_u, m_r, m_b, t_b) = (
        lit(p.lanes),
        lit(p.tile.t_u),
        lit(p.tile.m_r),
        lit(p.block.m_b),
        lit(p.block.t_b),
    );
    let t_sub = lit(p.tile.t_sub);
    let group_bytes = lit(isa.group_bytes);
    let signed = isa.signed_levels(&p.spec);
    let row_pairs = isa.mmla && p.tile.m_r > 1;
    let sums_per_block = lit(p.spec.sums_per_block());
    let int_scales = crate::family::int8::emit::micro::int_scales(&p.spec, &isa);
    let group_scales = crate::family::int8::emit::micro::group_int(&p.spec, &isa);
    let code: Vec<&TokenStream> = micro.iter().chain([&unpack, &driver]).collect();
    let items = crate::emit::keep_used(items, &code);
    let doc = format!(
        " {} {} on {}: see the file header for the plan.",
        p.spec.format_tag(),
        p.spec.op.name(),
        p.target
    );
    Ok(quote! {
        #[doc = #doc]
        #cfg
        #[allow(unused_unsafe, unsafe_op_in_unsafe_fn, unused_mut, unused_variables, clippy::all)]
        pub mod #module {
            /// The ISA's primitives, copied from its template.
            #[allow(dead_code)]
            pub mod ops {
                #(#items)*
            }

            pub const NAME: &str = #name;
            pub const ISA: &str = #isa_name;
            pub const FEATURES: &[&str] = &[#(#features),*];
            pub const BITS: u32 = #bits;
            /// Columns interleaved per vector.
            pub const LANES: usize = #lanes;
            pub const T_U: usize = #t_u;
            /// Column groups one micro kernel covers (a divisor of T_U).
            pub const T_SUB: usize = #t_sub;
            pub const M_R: usize = #m_r;
            /// The model's L1 block (values): the driver calls over all of K
            /// and the packed bytes do not depend on it.
            pub const M_B: usize = #m_b;
            pub const T_B: usize = #t_b;
            /// Bytes of a column per lane and chunk (4, or 8 for pair layouts).
            pub const GROUP_BYTES: usize = #group_bytes;
            /// 4-bit levels as signed nibbles (activation scales carry 1/16).
            pub const SIGNED: bool = #signed;
            /// Activation rows interleaved in pairs (`kgen::int8_layout::ActFormat`).
            pub const ROW_PAIRS: bool = #row_pairs;
            /// Activation level sums per 32-value block (2: a scale per 16 values).
            pub const SUMS: usize = #sums_per_block;
            /// The scale stream keeps the format's integer sub-scales
            /// (`kgen::int8_layout::I8Layout::int_sub_scales`).
            pub const INT_SCALES: bool = #int_scales;
            /// The scale stream holds the format's one scale per super-block
            /// once (`kgen::int8_layout::I8Layout::group_scales`).
            pub const GROUP_SCALES: bool = #group_scales;

            #(#micro)*

            #unpack

            #driver

            /// `y = x W` for `m` rows over panels `panel_begin..panel_end`.
            ///
            /// # Safety
            /// The CPU must have `FEATURES`; `w` and `sc` hold a matrix packed for
            /// this kernel (see `kgen::int8_layout`) with `k_pad x n_pad` values;
            /// `xq` is `m x k_pad` int8 activations, `xd` is `m x k_pad/32` block
            /// scales and `xc` `m x k_pad/32 x SUMS` level sums (bias corrections);
            /// `y` is `m x n_pad`.
            #tf
            pub unsafe fn run(
                w: *const u8, sc: *const u16, xq: *const i8, xd: *const f32, xc: *const i32,
                y: *mut f32, m: usize, k_pad: usize, n_pad: usize, panel_begin: usize, panel_end: usize,
            ) {
                unsafe { body(w, sc, xq, xd, xc, y, m, k_pad, n_pad, panel_begin, panel_end) }
            }
        }
    })
}

/// The primitives a kernel of `spec` on `isa` may call: the template's
/// items (over those it extends) with the ISA's function attributes and
/// the format's own tables, once checked to hold what the format's kernels
/// call. The kernel module keeps those its code calls
/// ([`crate::emit::keep_used`]); the model counts ops from them.
pub(crate) fn ops_items(spec: &I8Spec, isa: &I8Isa) -> Result<Vec<syn::Item>, EmitError> {
    let spec = &isa.reads(spec);
    use crate::family::int8::emit::{lane, micro};
    let template = isa.template_file_for(spec.op).map_err(EmitError)?;
    let mut items = crate::emit::template_items(&template, isa.features);
    codebook_table(&mut items, spec, isa)?;
    grid_table(&mut items, spec, isa)?;
    let pairs = isa.group_bytes == 8;
    let mut need: Vec<&str> = Vec::new();
    match spec.bits() {
        5 if pairs => need.extend(FIVE_BIT_PAIR),
        5 => need.extend(FIVE_BIT_LANE),
        6 if pairs => need.extend(SIX_BIT_PAIR),
        6 => need.extend(SIX_BIT_LANE),
        2 if !spec.grid() => need.extend(TWO_BIT_ITEMS),
        3 => need.extend(THREE_BIT_ITEMS),
        _ => {}
    }
    if spec.bits() == 3 && lane::masked_high_nibbles(spec, isa) {
        need.push(THREE_BIT_HI16);
    }
    if lane::masked_odd_crumbs(spec, isa) {
        need.extend(ODD_CRUMB_ITEMS);
    }
    if micro::scratch_levels(spec, isa) {
        need.push("storeb");
    }
    if micro::prefetches(spec, isa) {
        need.push("prefetch");
    }
    if let Some(form) = micro::int_scale_form(spec, isa) {
        need.extend(INT_SCALE_ITEMS);
        need.extend(if form.signed() {
            INT_SIGNED_ITEMS
        } else if form.kind == SubScaleKind::ScaleMin {
            INT_SCALE_MIN_ITEMS
        } else if isa.int_halves_packed {
            INT_PACKED_ITEMS
        } else {
            INT_NIBBLE_ITEMS
        });
    }
    if micro::group_int(spec, isa) {
        need.extend(GROUP_INT_ITEMS);
    }
    if !need.is_empty() {
        require(&items, &need, spec, isa)?;
    }
    if spec.mins() {
        isa.supports(spec).map_err(EmitError)?;
    }
    Ok(items)
}

/// The micro kernel `micro_r{r}` of `p` for `r` activation rows.
pub(crate) fn micro(p: &MicroSpec, isa: &I8Isa, r: usize) -> TokenStream {
    if isa.sve_bits.is_some() {
        sve::micro_kernel(p, isa, r)
    } else if crate::family::int8::emit::micro::lane_isa(isa) {
        micro_kernel(p, isa, r)
    } else if p.tile.m_r == 1 {
        mmla::micro_gemv(p, isa)
    } else {
        mmla::micro_mmla(p, isa, r)
    }
}

/// Checks that `isa` runs `spec` and that its template has every item
/// of `names`, which `spec`'s kernels call.
fn require<'a>(
    items: &[syn::Item],
    names: impl IntoIterator<Item = &'a &'a str>,
    spec: &I8Spec,
    isa: &I8Isa,
) -> Result<(), EmitError> {
    isa.supports(spec).map_err(EmitError)?;
    let have = |n: &str| items.iter().any(|it| item_name(it).as_deref() == Some(n));
    match names.into_iter().find(|n| !have(n)) {
        Some(missing) => Err(EmitError(format!(
            "template {} lacks `{missing}`, which {} kernels need",
            isa.template_path,
            spec.format_tag()
        ))),
        None => Ok(()),
    }
}

/// Codebook kernels' `CODEBOOK` table is the spec's codebook (the
/// template's own values are a default).
fn codebook_table(items: &mut [syn::Item], spec: &I8Spec, isa: &I8Isa) -> Result<(), EmitError> {
    let Some(values) = spec.codebook_values() else {
        return Ok(());
    };
    require(items, CODEBOOK_ITEMS.iter().chain(INDEX_ITEMS), spec, isa)?;
    // ISAs that read signed levels as `level + 128` look up the shifted
    // table (unsigned bytes, written as their i8 bit patterns).
    let shift = if isa.offsets_signed(spec) { 128 } else { 0 };
    // Read at 3 bits (the lattice codebooks' 8 levels), entries 8..16
    // repeat 0..8: a lookup that reads index bits above the level's
    // (`avx512vbmi`'s unmasked `lo3` / `hi3`) then finds the same level.
    let period = if spec.bits() == 3 { 8 } else { 16 };
    let vals = (0..16)
        .map(|i| values[i % period])
        .map(|v| Literal::i8_unsuffixed((i32::from(v) + shift) as u8 as i8));
    let doc = format!(
        " The format's codebook: int8 level of each {}-bit index{}{}.",
        if period == 8 { 3 } else { 4 },
        if shift == 0 {
            ""
        } else {
            " plus 128, as an unsigned byte"
        },
        if period == 8 {
            ", entries 8..16 repeating 0..8"
        } else {
            ""
        },
    );
    replace_item(
        items,
        "CODEBOOK",
        quote! {
            #[doc = #doc]
            pub const CODEBOOK: [i8; 16] = [#(#vals),*];
        },
    );
    Ok(())
}

/// Puts `item` in place of the template's item `name` (a default table).
fn replace_item(items: &mut [syn::Item], name: &str, item: TokenStream) {
    let item: syn::Item = syn::parse2(item).expect("a generated item parses");
    for it in items.iter_mut() {
        if item_name(it).as_deref() == Some(name) {
            *it = item.clone();
        }
    }
}

/// Grid kernels' `GRID` tables are the format's
/// ([`kgen::format::Format::grid_tables`]).
fn grid_table(items: &mut [syn::Item], spec: &I8Spec, isa: &I8Isa) -> Result<(), EmitError> {
    let Some(tables) = spec.grid_tables() else {
        return Ok(());
    };
    require(items, GRID_ITEMS.iter().chain(INDEX_ITEMS), spec, isa)?;
    let count = lit(tables.len());
    let rows = tables.iter().map(|t| {
        let vals = t.iter().map(|&v| Literal::i8_unsuffixed(v));
        quote! { [#(#vals),*] }
    });
    replace_item(
        items,
        "GRID",
        quote! {
            /// The format's grid: the unsigned level of index field `C` of nibble `n`.
            pub const GRID: [[i8; 16]; #count] = [#(#rows),*];
        },
    );
    Ok(())
}

/// The driver of `p`'s kernel: panels `panel_begin..panel_end`, then row
/// groups and tiles (or, with a scratch of levels, tiles, fills and row
/// groups), each micro kernel call over all of K. A tile's blocks are
/// contiguous along K (`I8Layout::tile_offset`), and calls split at the L1
/// block `m_b` measured slower: each split costs the call's prologue, its
/// `y` update and a refill of the dot pipes. On the Zen 5, whole-K calls ran
/// Q8_0's AVX-512 GEMM (`m_b` = 352, calls of 11 blocks) 8 to 21% faster,
/// Q3_K's 5 to 7%, Q5_0's 3 to 4% and the other GEMMs 0 to 5% (4096 x 4096,
/// m = 8 to 128); GEMVs measured the same either way.
///
/// Rows go in as few groups as `m_r` allows, of heights within one of each
/// other ([`crate::family::int8::model::row_groups`]), and the model prices
/// a tile by those groups' micro kernels. With groups of `m_r` and a ragged
/// last one the model charged a 5-row tile at m = 32 for seven full groups
/// and picked 4-row tiles; the even groups run m = 32 as 5,5,5,5,4,4,4.
/// On the Zen 5 (AVX-512 VNNI, 1 thread, 4096 x 4096, 4 alternating
/// rounds) the 5- and 6-row tiles this picks ran m = 32 1 to 6% faster than
/// the 4-row ones (Q8_0 699 -> 741 GFLOPS, Q5_K 687 -> 705, IQ4_NL 762 ->
/// 778) and m = 128 0.5 to 4% (Q5_K 689 -> 717); m = 8 within 2%. The
/// AVX2 kernels (forced, same CPU) measured within 2% either way.
fn driver(p: &I8Plan, isa: &I8Isa) -> TokenStream {
    let tw = lit(p.tile.t_u * p.lanes);
    let block_bytes = lit(4 * p.spec.bits() as usize);
    // A micro kernel covers t_sub of the tile's t_u column groups.
    let (subs, sub_cols, sub_bytes) = (
        lit(p.tile.t_u / p.tile.t_sub),
        lit(p.tile.t_sub * p.lanes),
        lit(p.tile.t_sub * p.lanes * isa.group_bytes),
    );
    let m_r = lit(p.tile.m_r);
    // With mins each column and block has a scale and a min; with integer
    // sub-scales each super-block (`base` counts whole ones) a header too.
    let entries = crate::family::int8::emit::micro::scale_entries(&p.spec, isa);
    let scale_base = if let Some(h) = crate::family::int8::emit::micro::super_entries(&p.spec, isa)
    {
        let g = p.spec.act_group();
        match g * entries + h {
            1 => {
                let g = lit(g);
                quote! { base / #g }
            }
            gh => {
                let (g, gh) = (lit(g), lit(gh));
                quote! { base / #g * #gh }
            }
        }
    } else if entries > 1 {
        let e = lit(entries);
        quote! { base * #e }
    } else {
        quote! { base }
    };
    let full = format_ident!("micro_r{}", p.tile.m_r);
    // 5-bit pair layouts: the plane of fifth bits after the tile's nibble
    // chunks (16 bytes per column), 4 bytes per column.
    let (wh_let, wh_arg) = if crate::family::int8::emit::micro::plane_pointer(&p.into(), isa) {
        let (nib, plane) = (
            lit(16 * p.tile.t_u * p.lanes),
            lit(p.tile.t_sub * p.lanes * 4),
        );
        (
            quote! { let wh = w.add(base * #block_bytes + #nib + sub * #plane); },
            quote! { wh, },
        )
    } else {
        (TokenStream::new(), TokenStream::new())
    };
    let arms: Vec<TokenStream> = (1..p.tile.m_r)
        .map(|r| {
            let f = format_ident!("micro_r{}", r);
            let rl = lit(r);
            quote! { #rl => #f(wt, #wh_arg st, xr, xdr, xcr, yr, ldx, ldb, ldy, nb), }
        })
        .collect();
    let attrs = fn_attrs(isa);
    // Pair-interleaved activations: a row pair spans 2 k_pad bytes and 4
    // scales per block.
    let (pairs, xs, bs) = if isa.mmla && p.tile.m_r > 1 {
        (quote! { r / 2 }, lit(64), lit(4))
    } else {
        (quote! { r }, lit(32), lit(1))
    };
    // The row's activation sums: one per block, or per half block.
    let xc_row = match p.spec.sums_per_block() {
        1 => quote! { xc.add(r * blocks + b0) },
        s => {
            let s = lit(s);
            quote! { xc.add((r * blocks + b0) * #s) }
        }
    };
    let (ldx_mul, ldb_mul) = if isa.mmla && p.tile.m_r > 1 {
        (lit(2), lit(4))
    } else {
        (lit(1), lit(1))
    };
    // Row group `r`'s activations, and the micro kernel call of its rows.
    let row_ptrs = quote! {
        let (xr, xdr, xcr) = (xq.add(#pairs * ldx + b0 * #xs), xd.add(#pairs * ldb + b0 * #bs), #xc_row);
    };
    let call = quote! {
        match rows {
            #m_r => #full(wt, #wh_arg st, xr, xdr, xcr, yr, ldx, ldb, ldy, nb),
            #(#arms)*
            _ => unreachable!(),
        }
    };
    // Group `group`'s rows of `groups` (`m.div_ceil(m_r)`): even heights, or
    // on row-pair ISAs (2x2 matrix tiles) whole pairs, `m_r` at a time.
    let rows = if isa.mmla && p.tile.m_r > 1 {
        quote! { #m_r.min(m - r) }
    } else {
        quote! { m / groups + usize::from(group < m % groups) }
    };
    let scratch_levels = crate::family::int8::emit::micro::scratch_levels(&p.spec, isa);
    let per_block = if scratch_levels {
        // Tiles outside the row groups: a tile's levels of up to
        // SCRATCH_BLOCKS blocks (`nb` below) are unpacked once into
        // `scratch`, and every row group dots them; `base` and `b0` move
        // to the first of those blocks.
        let most = lit(crate::family::int8::emit::micro::SCRATCH_BLOCKS);
        quote! {
            for tile in 0..pw / #tw {
                let mut j = 0;
                while j < blocks {
                    let nb = #most.min(blocks - j);
                    let (base, b0) = (cols_before + (tile * blocks + j) * #tw, j);
                    unpack(w.add(base * #block_bytes), scratch.0.as_mut_ptr(), nb);
                    for sub in 0..#subs {
                        let c = p * T_B + tile * #tw + sub * #sub_cols;
                        let wt = scratch.0.as_ptr().add(sub * #sub_bytes);
                        let st = sc.add(#scale_base + sub * #sub_cols);
                        let mut r = 0;
                        for group in 0..groups {
                            let rows = #rows;
                            #row_ptrs
                            let yr = y.add(r * ldy + c);
                            #call
                            r += rows;
                        }
                    }
                    j += nb;
                }
            }
        }
    } else {
        // Row groups outside the tiles: a group's activations (m_r x K
        // bytes) stay in L1 while the tile's weights stream past them once
        // per group.
        quote! {
            let (nb, b0) = (blocks, 0);
            let mut r = 0;
            for group in 0..groups {
                let rows = #rows;
                #row_ptrs
                for idx in 0..pw / #tw * #subs {
                    let (tile, sub) = (idx / #subs, idx % #subs);
                    let c = p * T_B + tile * #tw + sub * #sub_cols;
                    let base = cols_before + tile * #tw * nb;
                    let wt = w.add(base * #block_bytes + sub * #sub_bytes);
                    #wh_let
                    let st = sc.add(#scale_base + sub * #sub_cols);
                    let yr = y.add(r * ldy + c);
                    #call
                }
                r += rows;
            }
        }
    };
    // One tile's levels of SCRATCH_BLOCKS blocks, 32 bytes per column and
    // block, aligned for whole-vector loads.
    let scratch = scratch_levels.then(|| {
        let blocks = crate::family::int8::emit::micro::SCRATCH_BLOCKS;
        let bytes = lit(blocks * 32 * p.tile.t_u * p.lanes);
        quote! {
            #[repr(align(64))]
            struct Scratch([u8; #bytes]);
            let mut scratch = Scratch([0u8; #bytes]);
        }
    });
    quote! {
        #attrs
        unsafe fn body(
            w: *const u8, sc: *const u16, xq: *const i8, xd: *const f32, xc: *const i32,
            y: *mut f32, m: usize, k_pad: usize, n_pad: usize, panel_begin: usize, panel_end: usize,
        ) {
            unsafe {
                let blocks = k_pad / 32;
                let groups = m.div_ceil(#m_r);
                let (ldx, ldb, ldy) = (#ldx_mul * k_pad, #ldb_mul * blocks, n_pad);
                let c_begin = panel_begin * T_B;
                let c_end = (panel_end * T_B).min(n_pad);
                for r in 0..m {
                    core::ptr::write_bytes(y.add(r * ldy + c_begin), 0, c_end - c_begin);
                }
                #scratch
                for p in panel_begin..panel_end {
                    let pw = T_B.min(n_pad - p * T_B);
                    let cols_before = p * T_B * blocks;
                    #per_block
                }
            }
        }
    }
}
