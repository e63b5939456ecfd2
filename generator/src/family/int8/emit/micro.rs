//! The micro kernel function every int8 emitter fills: signature, block loop, pointer steps.

use crate::family::int8::isa::I8Isa;
use crate::family::int8::plan::{I8Plan, I8Tile};
use crate::family::int8::spec::I8Spec;
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

/// What a micro kernel is emitted from: the format and op, the tile and the
/// ISA's lanes. A plan has them; the model also emits tiles it is only
/// ranking, to count their instructions ([`crate::family::int8::model`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MicroSpec {
    pub spec: I8Spec,
    pub tile: I8Tile,
    pub lanes: usize,
}

impl From<&I8Plan> for MicroSpec {
    fn from(p: &I8Plan) -> MicroSpec {
        MicroSpec {
            spec: p.spec,
            tile: p.tile,
            lanes: p.lanes,
        }
    }
}

/// Bytes of a column group's chunk and chunks per block (5-bit: the nibble
/// chunks, without the plane of fifth bits after them).
pub(crate) fn geometry(p: &MicroSpec, isa: &I8Isa) -> (usize, usize) {
    let chunk = p.lanes * isa.group_bytes;
    let plane = if p.spec.bits() == 5 { 4 } else { 0 };
    (
        chunk,
        (4 * p.spec.bits() as usize - plane) / isa.group_bytes,
    )
}

/// The levels of 6-bit value chunk `v` of a block's `chunks` (the 8-bit
/// layout's: 8 on lane layouts, 4 on pair ones), from `stored(s)`, the load
/// of stored chunk `s`: a kept chunk masked (`lo6`), or a spill chunk
/// merged from the three stored chunks that carry its bit pairs
/// (`spill6`), as [`crate::layout::int8`] lays them out.
pub(crate) fn six_bit_level(
    v: usize,
    chunks: usize,
    stored: impl Fn(usize) -> TokenStream,
) -> TokenStream {
    let kept = 3 * chunks / 4;
    if v < kept {
        let a = stored(v);
        quote! { ops::lo6(#a) }
    } else {
        let s = 3 * (v - kept);
        let (a, b, c) = (stored(s), stored(s + 1), stored(s + 2));
        quote! { ops::spill6(#a, #b, #c) }
    }
}

/// Whether `spec`'s kernels on `isa` read their levels from a scratch the
/// driver fills once per tile and [`SCRATCH_BLOCKS`] blocks
/// ([`I8Isa::scratch_levels`]): GEMMs of more than one row for 5- and
/// 6-bit formats on lane layouts (with one row nothing would share the
/// unpack). The scratch holds each block's 8 value chunks as unsigned
/// bytes, at the 8-bit layout's offsets (`(v * t_u + t) * chunk`), so the
/// micro kernel's `w` steps by 32 bytes per column and block.
pub(crate) fn scratch_levels(spec: &I8Spec, isa: &I8Isa) -> bool {
    isa.scratch_levels
        && isa.group_bytes == 4
        && isa.sve_bits.is_none()
        && spec.op.rows() > 1
        && matches!(spec.bits(), 5 | 6)
}

/// Whether `spec`'s kernels on `isa` keep the format's integer sub-scales
/// ([`I8Isa::int_sub_scales`], [`crate::format::row::IntSubScales`]): the
/// layout then stores them as they are (`I8Layout::int_sub_scales`).
pub(crate) fn int_scales(spec: &I8Spec, isa: &I8Isa) -> bool {
    int_scale_form(spec, isa).is_some()
}

/// The integer sub-scales `spec`'s kernels on `isa` keep, if they keep
/// them ([`int_scales`]).
pub(crate) fn int_scale_form(
    spec: &I8Spec,
    isa: &I8Isa,
) -> Option<crate::format::row::IntSubScales> {
    let form = spec.format.int8.and_then(|r| r.int_sub_scales)?;
    // The integer fold removes an offset only through signed scales.
    debug_assert!(form.signed() || spec.format.offset() == 0);
    // Packed halves: the 2-bit nibble form only (`dot2_sc`, the 5- and
    // 6-bit fold, is maddubs'; the signed form's offset is not packed).
    if isa.int_halves_packed && (form.signed() || spec.bits() != 2) {
        return None;
    }
    (isa.int_sub_scales && isa.group_bytes == 4 && isa.sve_bits.is_none()).then_some(form)
}

/// Whether `spec`'s kernels on `isa` keep integer sub-scales with a
/// block's two halves packed into one i16 pair per lane
/// ([`I8Isa::int_halves_packed`]).
pub(crate) fn packed_halves(spec: &I8Spec, isa: &I8Isa) -> bool {
    isa.int_halves_packed && int_scales(spec, isa)
}

/// Most blocks one fill of the scratch of levels covers (and its stack
/// size): 1024 values, 16 KiB for a 16-column tile, whatever the L1
/// block's `m_b`. A multiple of the K-quants' activation scale group (8
/// blocks), since the micro kernels start every call at a group boundary.
/// Fills of whole L1 blocks (16 to 32 blocks on the runtime's AVX2
/// kernels) measured 5 to 15% faster than fills of 8 (Zen 3, Q5_0 / Q5_K
/// / Q6_K GEMM m=8..128): longer micro kernel runs per call.
pub(crate) const SCRATCH_BLOCKS: usize = 32;

/// Bits per weight of a block the micro kernel's `w` walks: the layout's,
/// or 8 on a scratch of levels.
pub(crate) fn walked_bits(spec: &I8Spec, isa: &I8Isa) -> usize {
    if scratch_levels(spec, isa) {
        8
    } else {
        spec.bits() as usize
    }
}

/// Whether the kernel reads the plane of fifth bits through a pointer of its
/// own (`wh`): on 5-bit pair layouts the plane's column groups are half as
/// wide as the nibble chunks', so a sub-tile's offset differs between the
/// two (on lane layouts the plane is just chunk 4).
pub(crate) fn plane_pointer(p: &MicroSpec, isa: &I8Isa) -> bool {
    p.spec.bits() == 5 && isa.group_bytes == 8
}

/// `isa`'s micro kernels come from the lane emitter
/// (`lane::micro_kernel`): one column per i32 lane, not SVE.
pub(crate) fn lane_isa(isa: &I8Isa) -> bool {
    isa.sve_bits.is_none() && isa.group_bytes == 4
}

/// A micro kernel that folds each activation scale group (the K-quants'
/// 256 values) before it scales it: per group, `open` (the group's
/// zeroed sums: f32, or i32 where the group shares one weight scale too),
/// the group's blocks, then `close`
/// (the sums times the scales, added to `y`). Each block's fold is then one
/// FMA per output vector where a per-block activation scale takes a
/// multiply and an FMA, both on the pipes the dots use.
pub(crate) struct GroupFold {
    pub blocks: usize,
    pub open: TokenStream,
    pub close: TokenStream,
    /// The body reads the block's index within its group as `blk`.
    pub counted: bool,
}

/// The micro kernel `micro_r{rows}`: `init` before the loop over 32-value
/// blocks, `body` per block, then the pointer steps (`x_step` activation
/// bytes and `d_step` scales per block), `store` after it; with `group`,
/// the blocks run in groups of `group.blocks` (the last one may be shorter;
/// the driver starts every call at a group boundary: at block 0, or at a
/// multiple of `SCRATCH_BLOCKS`, which the K-quants' 8-block group divides).
#[allow(clippy::too_many_arguments)]
pub(crate) fn micro_fn(
    p: &MicroSpec,
    isa: &I8Isa,
    rows: usize,
    init: TokenStream,
    body: TokenStream,
    store: TokenStream,
    (x_step, d_step): (usize, usize),
    group: Option<GroupFold>,
) -> TokenStream {
    let fname = format_ident!("micro_r{}", rows);
    // A block of the tile: 4 bits bytes per column (8 bits on a scratch of
    // levels, `walked_bits`).
    let block_bytes = 4 * walked_bits(&p.spec, isa) * p.tile.t_u * p.lanes;
    let wstep = lit(block_bytes);
    // Layouts with one scale per super-block have no entries per block.
    let sstep = match p.tile.t_u * p.lanes * scale_entries(&p.spec, isa) {
        0 => TokenStream::new(),
        s => {
            let s = lit(s);
            quote! { sc = sc.add(#s); }
        }
    };
    let (x_step, d_step) = (lit(x_step), lit(d_step));
    // One activation sum per block, or one per half for per-16 scales.
    let c_step = lit(p.spec.sums_per_block());
    let attrs = fn_attrs(isa);
    // The plane of fifth bits, in the same tile as `w`: the same step.
    let (wh_param, wh_step) = if plane_pointer(p, isa) {
        (
            quote! { mut wh: *const u8, },
            quote! { wh = wh.add(#wstep); },
        )
    } else {
        (TokenStream::new(), TokenStream::new())
    };
    let prefetch = prefetch_lines(p, isa, block_bytes);
    let block_loop = |run: TokenStream, index: TokenStream| {
        quote! {
            for #index in 0..#run {
                #prefetch
                #body
                w = w.add(#wstep);
                #wh_step
                #sstep
                xq = xq.add(#x_step);
                xd = xd.add(#d_step);
                xc = xc.add(#c_step);
            }
        }
    };
    let blocks_loop = match group {
        None => block_loop(quote! { blocks }, quote! { _ }),
        Some(GroupFold {
            blocks: g,
            open,
            close,
            counted,
        }) => {
            let index = if counted {
                quote! { blk }
            } else {
                quote! { _ }
            };
            let (g, block_loop) = (lit(g), block_loop(quote! { run }, index));
            quote! {
                let mut left = blocks;
                while left > 0 {
                    let run = left.min(#g);
                    #open
                    #block_loop
                    #close
                    left -= run;
                }
            }
        }
    };
    let doc = format!(
        " Micro kernel: {rows} row(s) x {} columns, one 32-value block per iteration.",
        p.tile.t_sub * p.lanes
    );
    quote! {
        #[doc = #doc]
        #attrs
        unsafe fn #fname(
            mut w: *const u8, #wh_param mut sc: *const u16, mut xq: *const i8, mut xd: *const f32, mut xc: *const i32,
            y: *mut f32, ldx: usize, ldb: usize, ldy: usize, blocks: usize,
        ) {
            unsafe {
                #init
                #blocks_loop
                #store
            }
        }
    }
}

/// Whether `spec`'s kernels on `isa` prefetch their weight stream
/// ([`I8Isa::prefetch`]): GEMVs, which read each weight once, of formats
/// within [`Prefetch::max_bits`](crate::family::int8::isa::Prefetch).
pub(crate) fn prefetches(spec: &I8Spec, isa: &I8Isa) -> bool {
    // SVE kernels have their own block loop (`emit::sve`), without one.
    isa.prefetch
        .is_some_and(|f| isa.reads(spec).bits() <= f.max_bits)
        && isa.sve_bits.is_none()
        && spec.op == crate::spec::Op::Gemv
}

/// The prefetches of one block of `block_bytes` (what `w` steps by): each
/// of its cache lines `Prefetch::ahead` bytes ahead; a block that is not a
/// whole number of lines asks for its last line again with the next.
/// `wrapping_add`, since the address may lie past the matrix, which a
/// prefetch allows.
fn prefetch_lines(p: &MicroSpec, isa: &I8Isa, block_bytes: usize) -> TokenStream {
    let Some(ahead) = isa
        .prefetch
        .filter(|_| prefetches(&p.spec, isa))
        .map(|f| f.ahead)
    else {
        return TokenStream::new();
    };
    let lines = (0..block_bytes.div_ceil(64)).map(|l| {
        let at = lit(ahead + 64 * l);
        quote! { ops::prefetch(w.wrapping_add(#at)); }
    });
    quote! { #(#lines)* }
}

/// Kernels of `spec` on `isa` sum each activation group's integer dots
/// and scale the sum once: a format with one weight scale per group, on
/// the lane ISAs (the lane emitter's). Their layout holds that scale once
/// per super-block (`crate::layout::int8::I8Layout::group_scales`).
pub(crate) fn group_int(spec: &I8Spec, isa: &I8Isa) -> bool {
    spec.act_group() > 1 && spec.group_scale() && lane_isa(isa)
}

/// f16 entries per column and block in the scale stream: the scales (one
/// per 32 or per 16 values), then as many mins where the format has mins,
/// each as `TW` entries of the tile; 1 where the kernels keep integer
/// sub-scales (the sub-scale bytes) and 0 where they keep one scale per
/// super-block ([`group_int`]), besides each super-block's header
/// ([`super_entries`]).
pub(crate) fn scale_entries(spec: &I8Spec, isa: &I8Isa) -> usize {
    if int_scales(spec, isa) {
        return 1;
    }
    if group_int(spec, isa) {
        return 0;
    }
    spec.format.int8.map_or(1, |r| r.scale_entries())
}

/// Where the scale stream goes by super-blocks, the f16 entries per
/// column of a super-block's header ahead of its blocks' entries: with
/// integer sub-scales `d`, and `-dmin` with mins
/// (`crate::layout::int8::I8Layout::int_sub_scales`); with one scale per
/// super-block that scale (`I8Layout::group_scales`).
pub(crate) fn super_entries(spec: &I8Spec, isa: &I8Isa) -> Option<usize> {
    if group_int(spec, isa) {
        return Some(1);
    }
    int_scale_form(spec, isa).map(|f| f.super_entries())
}

/// Scale stream entries per column and 32-value block, the headers'
/// share included (what a GEMV reads per block).
pub(crate) fn stream_entries(spec: &I8Spec, isa: &I8Isa) -> f64 {
    let h = super_entries(spec, isa).map_or(0.0, |h| h as f64 / spec.act_group() as f64);
    scale_entries(spec, isa) as f64 + h
}

/// The per-row factors of the min term, after `dx` (the row's activation
/// scale) and `c` (its level sum as `I`) are in scope: `sx` is the block's
/// `d_x * sum(q_x)` (scaled back up where the activation scales carry the
/// signed nibbles' 1/16), and on signed-nibble layouts `sb = 8 sx`, which
/// times the block scale restores the `8 d` that reading `q - 8` took off.
///
/// With `dx` `None` (a kernel that applies the activation scale once per
/// scale group, [`GroupFold`]) `sx` is the sum alone, times 16 on
/// signed-nibble layouts.
pub(crate) fn min_factors(
    signed: bool,
    dx: Option<&proc_macro2::Ident>,
    c: &TokenStream,
    sx: &proc_macro2::Ident,
    sb: &proc_macro2::Ident,
) -> TokenStream {
    match (signed, dx) {
        (true, Some(dx)) => quote! {
            let #sx = ops::mulf(ops::cvti(#c), ops::mulf(#dx, ops::splatf(&16.0f32)));
            let #sb = ops::mulf(#sx, ops::splatf(&8.0f32));
        },
        (true, None) => quote! {
            let #sx = ops::mulf(ops::cvti(#c), ops::splatf(&16.0f32));
            let #sb = ops::mulf(#sx, ops::splatf(&8.0f32));
        },
        (false, Some(dx)) => quote! { let #sx = ops::mulf(ops::cvti(#c), #dx); },
        (false, None) => quote! { let #sx = ops::cvti(#c); },
    }
}

/// The min term of one accumulator: `f += m sx` (and `+ d sb` on
/// signed-nibble layouts).
pub(crate) fn min_term(
    signed: bool,
    f: &proc_macro2::Ident,
    m: &proc_macro2::Ident,
    s: &proc_macro2::Ident,
    sx: &proc_macro2::Ident,
    sb: &proc_macro2::Ident,
) -> TokenStream {
    if signed {
        quote! {
            #f = ops::fmaf(#m, #sx, #f);
            #f = ops::fmaf(#s, #sb, #f);
        }
    } else {
        quote! { #f = ops::fmaf(#m, #sx, #f); }
    }
}

/// Column group `t`'s chunk `w_{t}` split into its nibbles `n0_{t}` /
/// `n1_{t}` for the grid lookups of [`index_level`].
pub(crate) fn nibble_split(t: usize) -> TokenStream {
    let (wv, n0, n1) = (
        format_ident!("w_{}", t),
        format_ident!("n0_{}", t),
        format_ident!("n1_{}", t),
    );
    quote! {
        let #n0 = ops::idx_lo(#wv);
        let #n1 = ops::idx_hi(#wv);
    }
}

/// `q_{t}`: the unsigned levels of index field `c` of column group `t`'s
/// byte-packed chunk: for grid formats one shuffle of the nibble holding
/// the field (from [`nibble_split`]), else bit pair `c` of the 2-bit layout.
pub(crate) fn index_level(p: &MicroSpec, t: usize, c: usize) -> TokenStream {
    let q = format_ident!("q_{}", t);
    if p.spec.grid() {
        // A nibble holds 4 / bits fields.
        let fields = 4 / p.spec.bits() as usize;
        let (field, n) = (lit(c % fields), format_ident!("n{}_{}", c / fields, t));
        quote! { let #q = ops::grid_lut::<#field>(#n); }
    } else {
        let (shift, wv) = (
            Literal::i32_unsuffixed(2 * c as i32),
            format_ident!("w_{}", t),
        );
        quote! { let #q = ops::crumb::<#shift>(#wv); }
    }
}

pub(crate) fn lit(v: usize) -> Literal {
    Literal::usize_unsuffixed(v)
}

pub(crate) fn fn_attrs(isa: &I8Isa) -> TokenStream {
    crate::emit::fn_attrs(isa.features)
}

#[cfg(test)]
mod tests {
    use super::SCRATCH_BLOCKS;

    /// A micro kernel call starts at block 0 or at a multiple of
    /// `SCRATCH_BLOCKS` and must start at an activation-scale group's
    /// first block: so every format's group divides it.
    #[test]
    fn scratch_fills_cover_whole_activation_groups() {
        for f in crate::format::int8_formats() {
            let group = f.int8.expect("int8 format").act_group;
            assert!(group >= 1, "{}", f.tag);
            assert_eq!(SCRATCH_BLOCKS % group, 0, "{}: group of {group}", f.tag);
        }
    }
}
