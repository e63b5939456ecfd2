//! Micro kernels on the lane layouts (4-byte groups, one column per i32
//! lane): dot-product instructions (vpdpbusd, maddubs, sdot, portable).

use crate::family::int8::emit::micro::lit;
use crate::family::int8::emit::micro::MicroSpec;
use crate::family::int8::emit::micro::{
    group_int, index_level, int_scale_form, micro_fn, min_factors, min_term, nibble_split,
    packed_halves, scratch_levels, six_bit_level, super_entries, GroupFold,
};
use crate::family::int8::isa::I8Isa;
use crate::family::int8::spec::I8Spec;
use crate::format::row::{IntSubScales, SubScaleKind};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

/// 4 activation bytes of `row` at byte `off` of the block in every lane: a
/// broadcast load, or (`x_quad` ISAs) an in-lane dword shuffle of the
/// 16 bytes around them, one load LLVM shares between four broadcasts.
fn bcast(isa: &I8Isa, row: usize, off: usize) -> TokenStream {
    let row = lit(row);
    if isa.x_quad {
        // vpshufd's immediate repeats the dword index in its four fields.
        let (base, imm) = (lit(off / 16 * 16), lit(off % 16 / 4 * 0x55));
        quote! { ops::xsel::<#imm>(ops::xquad(xq.add(#row * ldx + #base))) }
    } else {
        let off = lit(off);
        quote! { ops::bcast4(xq.add(#row * ldx + #off)) }
    }
}

/// A fence after each chunk: one empty `asm!` that takes every accumulator
/// of the tile in and out of a register. Without it LLVM reassociates a
/// block's dot chains into one tree per accumulator and evaluates them
/// row after row, which keeps every weight vector of the block (and its
/// absolute value, for signed dots) live until the next row uses it, and
/// spills: q8_0 2x16 on AVX2 made 70 stack accesses and ran 1.4x slower than
/// its op count. With all accumulators in one fence, chunk `g` of every row
/// is summed before chunk `g + 1` of any, the order the kernel is written in.
/// The fence emits no instruction (`#` starts an assembler comment).
fn fence(isa: &I8Isa, spec: &I8Spec, rows: usize, t_sub: usize) -> TokenStream {
    fence_of(isa, spec, rows, t_sub, &["i"])
}

/// [`fence`] over the accumulators `{prefix}_{r}_{t}` of every prefix, and
/// the pointers where [`fences_pointers`].
fn fence_of(
    isa: &I8Isa,
    spec: &I8Spec,
    rows: usize,
    t_sub: usize,
    prefixes: &[&str],
) -> TokenStream {
    let Some(class) = isa.fence_class else {
        return TokenStream::new();
    };
    let class = format_ident!("{}", class);
    let accs: Vec<_> = prefixes
        .iter()
        .flat_map(|pre| {
            (0..rows)
                .flat_map(move |r| (0..t_sub).map(move |t| format_ident!("{}_{}_{}", pre, r, t)))
        })
        .collect();
    let with_pointers = fences_pointers(isa, spec);
    let pointers = if with_pointers {
        quote! { inout(reg) w, inout(reg) xq, }
    } else {
        TokenStream::new()
    };
    let operands = accs.len() + if with_pointers { 2 } else { 0 };
    let text = (0..operands).fold(String::from("# fence"), |s, n| s + &format!(" {{{n}}}"));
    quote! {
        core::arch::asm!(#text, #(inout(#class) #accs,)* #pointers options(pure, nomem, nostack, preserves_flags));
    }
}

/// Whether `spec`'s fences on `isa` also take the weight and activation
/// pointers ([`I8Isa::fence_pointers`]): not in the GEMVs of formats whose
/// activations share a scale per group of blocks (the K-quants, TQ). Zen 5,
/// AVX-512 VNNI, 4096x4096, 1 thread, GFLOPS, medians of two sessions'
/// alternating rounds (8 and 6), fenced to unfenced: Q4_K 309 / 305 to
/// 326 / 324, Q5_K 234 / 229 to 261 / 256, Q3_K 308 / 297 to 322 / 313;
/// flat within the rounds' spread: Q6_K 207 / 211 to 225 / 207, Q2_K 396 /
/// 393 to 393 / 390, TQ1_0 558 to 554, TQ2_0 554 to 551 (one session). The
/// other GEMVs keep them (one session: Q4_0 356 to 361, Q5_0 288 to 285,
/// IQ4_NL 358 to 352, Q8_0 191 to 185 without), and Q8_0's 1x128 GEMV
/// spills without them (0 stack accesses fenced, 20 unfenced,
/// `generator/examples/spills.rs`; Q5_K's and Q6_K's 1x64 go from 8 and 2
/// to 14 each, outside what slows them).
pub(crate) fn fences_pointers(isa: &I8Isa, spec: &I8Spec) -> bool {
    isa.fence_pointers && !(spec.op == crate::spec::Op::Gemv && spec.act_group() > 1)
}

/// GEMV on plain 4-bit nibbles where the byte dot is unsigned into i32
/// (vpdpbusd): high nibbles are read in place as `16 q` (one mask instead of
/// a shift and a mask) into accumulators `j_{r}_{t}` of their own, joined to
/// the low ones once per block. Two fewer vector ops per block and column
/// group, and the ALU-bound GEMV gains; the GEMM, bound by its dot pipe,
/// would only pay the extra accumulators.
pub(crate) fn masked_high_nibbles(spec: &I8Spec, isa: &I8Isa) -> bool {
    isa.unsigned_dot
        && spec.op == crate::spec::Op::Gemv
        && matches!(spec.bits(), 3 | 4)
        && !spec.codebook()
        && !isa.signed_nibbles
}

/// Whether `spec`'s kernels on `isa` take a 2-bit layout's odd bit pairs
/// in place (`crumb1_x4`, `crumb3_x4`: as `4 q`, one mask where `crumb`
/// takes a shift and a mask) into accumulators of their own (`j`), scaled back by
/// `join_crumbs`: on maddubs ISAs into the block accumulators every
/// [`I16_CRUMB_BLOCKS`] blocks, on vpdpbusd ISAs (i32 lanes, no bound to
/// keep) into the group's sums at its close. The GEMV of a format with one
/// weight scale per group (TQ2_0, and TQ1_0 in its 2-bit layout), which runs
/// on the vector ALUs: on Zen 5, 4096x4096, AVX2 (forced) TQ2_0 228 -> 248
/// GFLOPS and TQ1_0 227 -> 246; AVX-512 TQ2_0's block loop alone 615 ->
/// 762. GEMMs keep one accumulator per output vector: the extra ones took
/// TQ2_0's AVX2 GEMM from 4x8 to 3x8 and 3-4% slower.
pub(crate) fn masked_odd_crumbs(spec: &I8Spec, isa: &I8Isa) -> bool {
    (isa.pair_sums_i16 || isa.unsigned_dot)
        && spec.op == crate::spec::Op::Gemv
        && spec.bits() == 2
        && !spec.grid()
        && group_int(spec, isa)
}

/// `let mut {prefix}_{r}_{t} = ops::zero_i();` for every row and column
/// group of the tile.
fn zeroed(prefix: &str, rows: usize, t_sub: usize) -> TokenStream {
    (0..rows)
        .flat_map(|r| (0..t_sub).map(move |t| format_ident!("{prefix}_{r}_{t}")))
        .map(|a| quote! { let mut #a = ops::zero_i(); })
        .collect()
}

fn jv(r: usize, t: usize) -> proc_macro2::Ident {
    format_ident!("j_{}_{}", r, t)
}

pub(crate) fn micro_kernel(p: &MicroSpec, isa: &I8Isa, rows: usize) -> TokenStream {
    // Loops cover the micro tile's t_sub column groups; strides are the layout's t_u.
    let (t_u, t_sub) = (p.tile.t_u, p.tile.t_sub);
    let l = p.lanes;
    let chunk = 4 * l; // bytes per chunk per column group
    let chunks = p.spec.bits() as usize;
    let fv = |r: usize, t: usize| format_ident!("f_{}_{}", r, t);
    let iv = |r: usize, t: usize| format_ident!("i_{}_{}", r, t);
    let mut init = TokenStream::new();
    let mut store = TokenStream::new();
    let mut zero = TokenStream::new();
    for r in 0..rows {
        for t in 0..t_sub {
            let (f, i) = (fv(r, t), iv(r, t));
            let (row, off) = (lit(r), lit(t * l));
            init.extend(quote! { let mut #f = ops::loadf(y.add(#row * ldy + #off)); });
            store.extend(quote! { ops::storef(y.add(#row * ldy + #off), #f); });
            zero.extend(quote! { let mut #i = ops::zero_i(); });
        }
    }
    let odd_crumbs = masked_odd_crumbs(&p.spec, isa);
    // They open with the group (`group_zero`).
    let crumb_zero = if odd_crumbs {
        zeroed("j", rows, t_sub)
    } else {
        TokenStream::new()
    };
    let mut block = TokenStream::new();
    let scales_per_block = p.spec.scales_per_block();
    let hi16 = masked_high_nibbles(&p.spec, isa);
    // The masked high nibbles' own accumulators start at zero whatever the
    // low ones start at.
    let mut zero_hi = TokenStream::new();
    let mut halves: Vec<TokenStream> = Vec::new();
    if scratch_levels(&p.spec, isa) {
        // Levels the driver unpacked: value chunk `v` of column group `t`
        // at the 8-bit layout's offset.
        halves = level_parts(p, isa, rows, |v, t| {
            let off = lit((v * t_u + t) * chunk);
            quote! { ops::loadb(w.add(#off)) }
        });
        block = halves.pop().expect("a block has a part");
    } else if p.spec.bits() == 5 {
        block = five_bit_block(p, isa, rows);
    } else if p.spec.bits() == 6 {
        halves = six_bit_block(p, isa, rows);
        block = halves.pop().expect("a 6-bit block has a part");
    } else if p.spec.bits() <= 2 {
        // 2-bit: each chunk covers 16 K values, the bit pair `2c` of its
        // bytes holding values 16g + 4c..16g + 4c + 4; 1-bit: the one chunk
        // covers the block, bit c holding values 4c..4c + 4. Unsigned levels
        // go through the template's block accumulator as nibbles do. A
        // scale per 16 values (Q2_K): chunk 0 is the first half. Grid
        // formats split each byte into its nibbles once and look up each
        // field's level with one shuffle (paper 004: per 2-bit chunk 1
        // shift, 2 ands and 4 shuffles).
        let (fields, per_chunk) = (8 / chunks, 32 / chunks);
        // Packed halves: half 1 into accumulators of its own (`i1`), so
        // each half is a dot chain of its own, joined after it.
        let packed = packed_halves(&p.spec, isa);
        let mut pre = "i";
        for g in 0..chunks {
            if g == chunks / scales_per_block && g > 0 {
                halves.push(std::mem::take(&mut block));
                if packed {
                    pre = "i1";
                }
            }
            for t in 0..t_sub {
                let (wv, off) = (format_ident!("w_{}", t), lit((g * t_u + t) * chunk));
                block.extend(quote! { let #wv = ops::loadb(w.add(#off)); });
                if p.spec.grid() {
                    block.extend(nibble_split(t));
                }
            }
            for c in 0..fields {
                // Odd bit pairs in place into `j` (`masked_odd_crumbs`).
                let odd = odd_crumbs && c % 2 == 1;
                for t in 0..t_sub {
                    block.extend(if odd {
                        let (q, wv) = (format_ident!("q_{}", t), format_ident!("w_{}", t));
                        debug_assert!(c == 1 || c == 3, "bit pair {c} of 4");
                        let op = format_ident!("crumb{}_x4", c);
                        quote! { let #q = ops::#op(#wv); }
                    } else {
                        index_level(p, t, c)
                    });
                }
                let acc = if odd { "j" } else { pre };
                for r in 0..rows {
                    let (x, b) = (
                        format_ident!("x_{}", r),
                        bcast(isa, r, per_chunk * g + 4 * c),
                    );
                    block.extend(quote! { let #x = #b; });
                    for t in 0..t_sub {
                        let (i, q) = (format_ident!("{acc}_{r}_{t}"), format_ident!("q_{}", t));
                        block.extend(quote! { #i = ops::pair_acc(#i, #q, #x); });
                    }
                }
                block.extend(if odd_crumbs {
                    fence_of(isa, &p.spec, rows, t_sub, &["i", "j"])
                } else {
                    fence_of(isa, &p.spec, rows, t_sub, &[pre])
                });
            }
        }
    } else if matches!(p.spec.bits(), 3 | 4) {
        // Each chunk covers 8 K values: low nibbles 8g..8g+4, high 8g+4..8g+8.
        // Codebook nibbles are indices: looked up (signed int8 levels) and
        // dotted signed x signed straight into i32; plain nibbles go through
        // the template's block accumulator. 3-bit layouts hold the same
        // four chunks of levels in three, the fourth in their spare bits
        // (`spill3` of the three loads).
        let three = p.spec.bits() == 3;
        let unpack = |half: &str, wv: &proc_macro2::Ident| {
            let level = if three {
                format_ident!("{}3", half)
            } else if p.spec.codebook() {
                format_ident!("idx_{}", half)
            } else {
                format_ident!("nib_{}", half)
            };
            if p.spec.codebook() {
                quote! { ops::lut(ops::#level(#wv)) }
            } else {
                quote! { ops::#level(#wv) }
            }
        };
        let chunks = 4;
        // Codebook levels: signed dots, or unsigned ones of the table
        // shifted by 128 where the ISA offsets signed levels.
        let acc = format_ident!(
            "{}",
            if p.spec.codebook() && !isa.offsets_signed(&p.spec) {
                "dot_s"
            } else {
                "pair_acc"
            }
        );
        if hi16 {
            zero_hi = zeroed("j", rows, t_sub);
        }
        for g in 0..chunks {
            // A scale per 16 values: chunks 0 and 1 hold values 0..16.
            if g == chunks / scales_per_block && g > 0 {
                halves.push(std::mem::take(&mut block));
            }
            for t in 0..t_sub {
                let (wv, lo, hi) = (
                    format_ident!("w_{}", t),
                    format_ident!("lo_{}", t),
                    format_ident!("hi_{}", t),
                );
                let load = |g: usize| {
                    let off = lit((g * t_u + t) * chunk);
                    quote! { ops::loadb(w.add(#off)) }
                };
                let word = if three && g == 3 {
                    let (a, b, c) = (load(0), load(1), load(2));
                    quote! { ops::spill3(#a, #b, #c) }
                } else {
                    load(g)
                };
                let (ulo, uhi) = if hi16 {
                    let hi = format_ident!("{}", if three { "hi3_16" } else { "nib_hi16" });
                    (unpack("lo", &wv), quote! { ops::#hi(#wv) })
                } else {
                    (unpack("lo", &wv), unpack("hi", &wv))
                };
                block.extend(quote! {
                    let #wv = #word;
                    let #lo = #ulo;
                    let #hi = #uhi;
                });
            }
            for r in 0..rows {
                let (xl, xh) = (format_ident!("xl_{}", r), format_ident!("xh_{}", r));
                let (bl, bh) = (bcast(isa, r, 8 * g), bcast(isa, r, 8 * g + 4));
                block.extend(quote! {
                    let #xl = #bl;
                    let #xh = #bh;
                });
                for t in 0..t_sub {
                    let (i, lo, hi) = (
                        iv(r, t),
                        format_ident!("lo_{}", t),
                        format_ident!("hi_{}", t),
                    );
                    let ih = if hi16 { jv(r, t) } else { i.clone() };
                    block.extend(quote! {
                        #i = ops::#acc(#i, #lo, #xl);
                        #ih = ops::#acc(#ih, #hi, #xh);
                    });
                }
            }
            block.extend(fence_of(
                isa,
                &p.spec,
                rows,
                t_sub,
                if hi16 { &["i", "j"] } else { &["i"] },
            ));
        }
    } else {
        // Formats with a scale per 16 values fold each half of the block on
        // its own: `halves[h]` holds chunks `h * chunks / 2..`.
        // Signed bytes: dotted signed x signed, or flipped to `level + 128`
        // once per weight vector and dotted unsigned by every row.
        let flip = isa.offsets_signed(&p.spec);
        let dot = format_ident!("{}", if flip { "dot_u" } else { "dot_s" });
        for g in 0..chunks {
            if g == chunks / scales_per_block && g > 0 {
                halves.push(std::mem::take(&mut block));
            }
            for t in 0..t_sub {
                let wv = format_ident!("w_{}", t);
                let off = lit((g * t_u + t) * chunk);
                let load = quote! { ops::loadb(w.add(#off)) };
                block.extend(if flip {
                    quote! { let #wv = ops::flip(#load); }
                } else {
                    quote! { let #wv = #load; }
                });
            }
            for r in 0..rows {
                let x = format_ident!("x_{}", r);
                let b = bcast(isa, r, 4 * g);
                block.extend(quote! { let #x = #b; });
                for t in 0..t_sub {
                    let (i, wv) = (iv(r, t), format_ident!("w_{}", t));
                    block.extend(quote! { #i = ops::#dot(#i, #wv, #x); });
                }
            }
            block.extend(fence(isa, &p.spec, rows, t_sub));
        }
    }
    // Fold the block: (dot - bias * sum(x)) * d_x * d_w into the f32 sums.
    // With mins, `+ m * d_x * sum(q_x)` (the tile's mins follow its scales).
    // Formats whose activations share a scale per group of blocks (the
    // K-quants) fold into per-group sums `g` without it.
    let grouped = p.spec.act_group() > 1;
    // One weight scale per group (TQ1_0, TQ2_0): the blocks' integer dots
    // sum into the group's i32 `ga`, converted and scaled once at its
    // close, so a block pays one add per output vector instead of a
    // conversion and an FMA (and no scale loads).
    let group_int = group_int(&p.spec, isa);
    let form = int_scale_form(&p.spec, isa);
    let neg_init = offset_in_init(&p.spec, isa);
    // An offset the fold still removes: not one that came in with the
    // accumulator's start.
    let removes = isa.removes_offset(&p.spec) && !neg_init;
    // The activation sum of part `h` of a block of row `r`: per half with
    // per-16 scales.
    let sum_at = |r: usize, h: usize| {
        let row = lit(r);
        match p.spec.sums_per_block() {
            1 => quote! { #row * ldb },
            n => {
                let (n, h) = (lit(n), lit(h));
                quote! { #row * ldb * #n + #h }
            }
        }
    };
    let fold_of = |h: usize| {
        if group_int {
            return group_fold(p, isa, rows);
        }
        let mut fold = TokenStream::new();
        let (mins, signed) = (p.spec.mins(), isa.signed_levels(&p.spec));
        for t in 0..t_sub {
            let (s, mn) = (format_ident!("s_{}", t), format_ident!("mn_{}", t));
            let (off, moff) = (
                lit(h * t_u * l + t * l),
                lit((scales_per_block + h) * t_u * l + t * l),
            );
            fold.extend(quote! { let #s = ops::scales(sc.add(#off)); });
            if mins {
                fold.extend(quote! { let #mn = ops::scales(sc.add(#moff)); });
            }
        }
        for r in 0..rows {
            let (dx, c) = (format_ident!("dx_{}", r), format_ident!("c_{}", r));
            let (sx, sb) = (format_ident!("sx_{}", r), format_ident!("sb_{}", r));
            let row = lit(r);
            if !grouped {
                fold.extend(quote! { let #dx = ops::splatf(xd.add(#row * ldb)); });
            }
            if removes || mins {
                let at = sum_at(r, h);
                fold.extend(quote! { let #c = ops::splati(xc.add(#at)); });
            }
            if mins {
                let dx = (!grouped).then_some(&dx);
                fold.extend(min_factors(signed, dx, &quote! { #c }, &sx, &sb));
            }
            for t in 0..t_sub {
                let (f, i, s) = (fv(r, t), iv(r, t), format_ident!("s_{}", t));
                // 1- to 4-bit blocks accumulate in the template's block form
                // (i16 pairs on maddubs ISAs); 5-, 6- and 8-bit ones directly in i32. Only
                // unsigned levels carry a bias to remove (signed ones read as
                // `level + 128` included).
                // Masked high nibbles join their own accumulator first.
                let dot = if hi16 {
                    let j = jv(r, t);
                    quote! { ops::join_hi(#i, #j) }
                } else {
                    quote! { ops::block_sum(#i) }
                };
                let sum = match p.spec.bits() {
                    _ if p.spec.codebook() && !isa.removes_offset(&p.spec) => quote! { #i },
                    5 | 6 | 8 if removes => quote! { ops::subi(#i, #c) },
                    1..=4 if removes => quote! { ops::subi(#dot, #c) },
                    1..=4 => dot,
                    _ => quote! { #i },
                };
                // Grouped: the group sum `g`, whose activation scale comes
                // in at the group's close; else `f`, scaled per block.
                let (acc, scale) = if grouped {
                    (gv(r, t), quote! { #s })
                } else {
                    (f, quote! { ops::mulf(#s, #dx) })
                };
                fold.extend(quote! { #acc = ops::fmaf(ops::cvti(#sum), #scale, #acc); });
                if mins {
                    let mn = format_ident!("mn_{}", t);
                    fold.extend(min_term(signed, &acc, &mn, &s, &sx, &sb));
                }
            }
        }
        fold
    };
    halves.push(block);
    if form.is_some() && matches!(p.spec.bits(), 5 | 6) {
        // `dot2_sc` sums into `sa`: no per-part accumulators.
        zero = TokenStream::new();
    }
    // i16 block accumulators run over several blocks of a group: they
    // open with the group and `group_fold` zeroes them as it widens them.
    let mut group_zero = if group_int && isa.pair_sums_i16 {
        std::mem::take(&mut zero)
    } else {
        TokenStream::new()
    };
    group_zero.extend(crumb_zero);
    let mut body = TokenStream::new();
    let packed = packed_halves(&p.spec, isa);
    assert!(
        !packed || halves.len() == 2,
        "packed halves: a scale per 16 values, two parts per block"
    );
    for (h, part) in halves.iter().enumerate() {
        let fold = match form {
            Some(form) => int_fold(p, isa, form, rows, h, h + 1 == halves.len()),
            None => fold_of(h),
        };
        // Packed halves: half 1's own accumulators.
        let zero = if packed && h > 0 {
            zeroed("i1", rows, t_sub)
        } else if neg_init {
            // Each row's `-offset * sum(x)` once, the start of every
            // column group's accumulator (high nibbles still from 0).
            let mut z = TokenStream::new();
            for r in 0..rows {
                let (nc, at) = (format_ident!("nc_{}", r), sum_at(r, h));
                z.extend(quote! { let #nc = ops::subi(ops::zero_i(), ops::splati(xc.add(#at))); });
                for t in 0..t_sub {
                    let i = iv(r, t);
                    z.extend(quote! { let mut #i = #nc; });
                }
            }
            quote! { #z #zero_hi }
        } else {
            quote! { #zero #zero_hi }
        };
        body.extend(quote! { #zero #part #fold });
    }
    if form.is_some() {
        assert!(grouped, "integer sub-scales come with super-blocks");
        return int_scale_kernel(p, isa, rows, body);
    }
    if !grouped {
        return micro_fn(p, isa, rows, init, body, store, (32, 1), None);
    }
    // Per activation scale group: its scales and zeroed sums, and at its
    // end `y += g dx` (y stays in memory: a load and a store per group and
    // output vector, and no f32 accumulators beside the sums).
    // The scales are read at the close, through the group's first block
    // (`xg`), so no vector register holds them through the group.
    let (mut open, mut close) = (quote! { let xg = xd; }, TokenStream::new());
    if group_int {
        // The group's scale, its header (`sg`, `TW` entries, which `sc`
        // steps past; the blocks have none), and its blocks' activation
        // sums (`xcg`), whose total is the offset term.
        let head = lit(t_u * l * super_entries(&p.spec, isa).expect("a group scale"));
        open.extend(quote! { let sg = sc; sc = sc.add(#head); let xcg = xc; });
        open.extend(group_zero);
        for t in 0..t_sub {
            let (s, off) = (format_ident!("s_{}", t), lit(t * l));
            close.extend(quote! { let #s = ops::scales(sg.add(#off)); });
        }
    }
    let offset = group_int && isa.removes_offset(&p.spec);
    for r in 0..rows {
        let (dx, cs, row) = (format_ident!("dx_{}", r), format_ident!("cs_{}", r), lit(r));
        close.extend(quote! { let #dx = ops::splatf(xg.add(#row * ldb)); });
        if offset {
            close.extend(quote! {
                let #cs: i32 = (0..run).map(|j| *xcg.add(#row * ldb + j)).sum();
                let #cs = ops::splati(&#cs);
            });
        }
        for t in 0..t_sub {
            let off = lit(t * l);
            // The group's sum and what scales it: the i32 sum less the
            // offset term, converted, times the weight and activation
            // scales; else the f32 sum, whose weight scales it already has.
            let (sum, scale) = if group_int {
                let (ga, s) = (gav(r, t), format_ident!("s_{}", t));
                open.extend(quote! { let mut #ga = ops::zero_i(); });
                if odd_crumbs && !isa.pair_sums_i16 {
                    // The group's `4 q` sums, in i32 lanes throughout.
                    let j = jv(r, t);
                    close.extend(quote! { #ga = ops::join_crumbs(#ga, #j); });
                }
                let ga = if offset {
                    quote! { ops::subi(#ga, #cs) }
                } else {
                    quote! { #ga }
                };
                (quote! { ops::cvti(#ga) }, quote! { ops::mulf(#s, #dx) })
            } else {
                let g = gv(r, t);
                open.extend(quote! { let mut #g = ops::zero_f(); });
                (quote! { #g }, quote! { #dx })
            };
            close.extend(quote! {
                ops::storef(
                    y.add(#row * ldy + #off),
                    ops::fmaf(#sum, #scale, ops::loadf(y.add(#row * ldy + #off))),
                );
            });
        }
    }
    let group = GroupFold {
        blocks: p.spec.act_group(),
        open,
        close,
        counted: group_int && sums_span_blocks(&p.spec, isa),
    };
    micro_fn(
        p,
        isa,
        rows,
        TokenStream::new(),
        body,
        TokenStream::new(),
        (32, 1),
        Some(group),
    )
}

/// The fold of part `h` of a block on a kernel that keeps integer
/// sub-scales ([`int_scales`]): the part's i16 pair sums widened by one
/// madd with its scale levels into the super-block's i32 sums `sa` (5- and
/// 6-bit levels took theirs in `dot2_sc` already); after the last part,
/// one madd of each column's two sub-scale values against the row's two
/// half sums into `sm`: the min levels (nibble form), or the signed
/// scales, which times the offset remove it. The stream's entry 0 of the
/// block holds the column group's sub-scale bytes.
///
/// With packed halves ([`packed_halves`]) the halves' i32 dots, summed in
/// accumulators of their own (`i`, `i1`), are joined into one i16 pair per
/// lane after half 1 instead (`join_halves`: half 0 low, over a bias), and
/// one vpdpwssd per row and column group scales both (`sub_pair`: half 0's
/// scale level low); `corr_{t}` adds up the scale levels the bias met, for
/// the group's close.
fn int_fold(
    p: &MicroSpec,
    isa: &I8Isa,
    form: IntSubScales,
    rows: usize,
    h: usize,
    last: bool,
) -> TokenStream {
    let (t_sub, l) = (p.tile.t_sub, p.lanes);
    let signed = form.signed();
    let mut fold = TokenStream::new();
    let packed = packed_halves(&p.spec, isa);
    if packed && !last {
        return fold;
    }
    if packed {
        for r in 0..rows {
            for t in 0..t_sub {
                let (i, i1) = (format_ident!("i_{r}_{t}"), format_ident!("i1_{r}_{t}"));
                fold.extend(quote! { #i = ops::join_halves(#i, #i1); });
            }
        }
    }
    // 5- and 6-bit levels took their scales in `dot2_sc` already; the
    // others fold each part's sums here.
    let folds_parts = packed || !matches!(p.spec.bits(), 5 | 6);
    if packed {
        for t in 0..t_sub {
            let (sv, cv, off) = (
                format_ident!("sv_{}", t),
                format_ident!("corr_{}", t),
                lit(t * l),
            );
            fold.extend(quote! {
                let #sv = ops::sub_pair(sc.add(#off));
                #cv = ops::addi(#cv, #sv);
            });
        }
    } else if folds_parts {
        fold.extend(part_scales(p, form, h));
    }
    if folds_parts {
        for r in 0..rows {
            for t in 0..t_sub {
                let (a, i, sv) = (
                    sav(r, t),
                    format_ident!("i_{}_{}", r, t),
                    format_ident!("sv_{}", t),
                );
                fold.extend(quote! { #a = ops::scaled_sum(#a, #i, #sv); });
            }
        }
    }
    // Per-32 mins go in at the group's close, two blocks per madd
    // (`int_scale_kernel`).
    if last && form.kind != SubScaleKind::ScaleMin {
        // The activation sums of an offset format carry the offset (Q6_K:
        // 32 * sum, past i16): shifted back down before they are packed.
        // Signed scales take the offset (`-offset sc`, within i16) and add
        // into the scaled sums `sa`, under the same `d`; min levels go into
        // `sm`, under `dmin`.
        let offset = p.spec.format.offset().max(1) as u32;
        assert!(
            offset.is_power_of_two(),
            "{}: offset {offset}",
            p.spec.format_tag()
        );
        let shift = proc_macro2::Literal::i32_unsuffixed(offset.trailing_zeros() as i32);
        for t in 0..t_sub {
            let (mv, off) = (format_ident!("mv_{}", t), lit(t * l));
            fold.extend(if signed {
                quote! { let #mv = ops::sub_offset_s::<#shift>(sc.add(#off)); }
            } else {
                quote! { let #mv = ops::sub_mins(sc.add(#off)); }
            });
        }
        let n = lit(p.spec.sums_per_block());
        for r in 0..rows {
            let (bp, row) = (format_ident!("bp_{}", r), lit(r));
            fold.extend(quote! { let #bp = ops::sum_pair::<#shift>(xc.add(#row * ldb * #n)); });
            for t in 0..t_sub {
                let m = if signed { sav(r, t) } else { smv(r, t) };
                let mv = format_ident!("mv_{}", t);
                fold.extend(quote! { #m = ops::scaled_sum(#m, #mv, #bp); });
            }
        }
    }
    fold
}

/// `sv_{t}`: part `h`'s scale levels of each column group in both i16
/// halves of its lanes, from the block's sub-scale bytes (entry 0).
fn part_scales(p: &MicroSpec, form: IntSubScales, h: usize) -> TokenStream {
    let h = lit(h);
    (0..p.tile.t_sub)
        .map(|t| {
            let (sv, off) = (format_ident!("sv_{}", t), lit(t * p.lanes));
            match form.kind {
                SubScaleKind::Signed | SubScaleKind::Packed6 => {
                    quote! { let #sv = ops::sub_scale_s::<#h>(sc.add(#off)); }
                }
                SubScaleKind::Nibbles => {
                    quote! { let #sv = ops::sub_scale::<#h>(ops::sub_bytes(sc.add(#off))); }
                }
                SubScaleKind::ScaleMin => {
                    quote! { let #sv = ops::scale_byte(ops::sub_bytes(sc.add(#off))); }
                }
            }
        })
        .collect()
}

/// The micro kernel of a format with integer sub-scales: per super-block
/// (the activation scale group) zeroed i32 sums `sa` (levels times scale
/// levels, and for signed scales the offset's share) and, for min
/// nibbles, `sm` (min levels times activation sums), then `y += dx (d sa
/// - dmin sm)`, with `d` and `-dmin` read from the group's header (`sg`,
/// `TW` entries each), which `sc` steps past at the group's open.
fn int_scale_kernel(p: &MicroSpec, isa: &I8Isa, rows: usize, body: TokenStream) -> TokenStream {
    let (t_sub, l) = (p.tile.t_sub, p.lanes);
    let tw = p.tile.t_u * l;
    let mins = p.spec.mins();
    let packed = packed_halves(&p.spec, isa);
    let head = lit(tw * super_entries(&p.spec, isa).expect("integer sub-scales"));
    let (mut open, mut close) = (
        quote! { let xg = xd; let sg = sc; sc = sc.add(#head); },
        TokenStream::new(),
    );
    let late_mins = late_mins(&p.spec, isa);
    if late_mins {
        open.extend(quote! { let xcg = xc; });
        close.extend(late_min_sums(p, isa, rows));
    }
    for t in 0..t_sub {
        let (dw, mw) = (format_ident!("dw_{}", t), format_ident!("mw_{}", t));
        if packed {
            // The join's bias times half 0's scale levels, per column.
            let (cv, cb) = (format_ident!("corr_{}", t), format_ident!("cb_{}", t));
            open.extend(quote! { let mut #cv = ops::zero_i(); });
            close.extend(quote! { let #cb = ops::unbias(#cv); });
        }
        // The header: TW `d`s, then TW `-dmin`s.
        let (d_at, m_at) = (lit(t * l), lit(tw + t * l));
        close.extend(quote! { let #dw = ops::scales(sg.add(#d_at)); });
        if mins {
            close.extend(quote! { let #mw = ops::scales(sg.add(#m_at)); });
        }
    }
    for r in 0..rows {
        let (dx, row) = (format_ident!("dx_{}", r), lit(r));
        close.extend(quote! { let #dx = ops::splatf(xg.add(#row * ldb)); });
        for t in 0..t_sub {
            let (a, m, off) = (sav(r, t), smv(r, t), lit(t * l));
            let (dw, mw) = (format_ident!("dw_{}", t), format_ident!("mw_{}", t));
            open.extend(quote! { let mut #a = ops::zero_i(); });
            let a = if packed {
                let cb = format_ident!("cb_{}", t);
                quote! { ops::subi(#a, #cb) }
            } else {
                quote! { #a }
            };
            let v = if mins {
                if !late_mins {
                    open.extend(quote! { let mut #m = ops::zero_i(); });
                }
                quote! { ops::fmaf(ops::cvti(#m), #mw, ops::mulf(ops::cvti(#a), #dw)) }
            } else {
                quote! { ops::mulf(ops::cvti(#a), #dw) }
            };
            close.extend(quote! {
                let v = #v;
                ops::storef(
                    y.add(#row * ldy + #off),
                    ops::fmaf(v, #dx, ops::loadf(y.add(#row * ldy + #off))),
                );
            });
        }
    }
    let group = GroupFold {
        blocks: p.spec.act_group(),
        open,
        close,
        counted: false,
    };
    micro_fn(
        p,
        isa,
        rows,
        TokenStream::new(),
        body,
        TokenStream::new(),
        (32, 1),
        Some(group),
    )
}

/// Whether `spec`'s kernels on `isa` keep a scale and min code per 32
/// values ([`SubScaleKind::ScaleMin`]) and so add the mins at the group's
/// close ([`late_min_sums`]), not in the block loop.
pub(crate) fn late_mins(spec: &I8Spec, isa: &I8Isa) -> bool {
    int_scale_form(spec, isa).is_some_and(|f| f.kind == SubScaleKind::ScaleMin)
}

/// The group's min sums `sm` of a kernel with a scale and min per 32
/// values ([`SubScaleKind::ScaleMin`]), at its close: per pair of blocks
/// and column group one `min_pair` of their min levels (entry 0 of each),
/// and per row one madd of it against the pair's activation sums, so the
/// mins cost no register through the group and half the madds of one per
/// block. The groups are whole super-blocks (`I8Layout::int_sub_scales`
/// asserts that K and its blocks are whole super-blocks), so every pair is
/// in range: these kernels never see the shorter last group other
/// kernels allow.
fn late_min_sums(p: &MicroSpec, isa: &I8Isa, rows: usize) -> TokenStream {
    let (t_sub, l) = (p.tile.t_sub, p.lanes);
    let group = p.spec.act_group();
    assert!(
        group.is_multiple_of(2)
            && p.spec.format.super_block == 32 * group
            && p.spec.sums_per_block() == 1,
        "{}: min pairs need whole super-blocks of an even number of blocks, one sum each",
        p.spec.format_tag()
    );
    // The blocks' entries follow the group's header (`d`, `-dmin`), TW
    // per block.
    let stride = p.tile.t_u * l;
    let head = stride * super_entries(&p.spec, isa).expect("integer sub-scales");
    let mut out = TokenStream::new();
    for r in 0..rows {
        for t in 0..t_sub {
            let m = smv(r, t);
            out.extend(quote! { let mut #m = ops::zero_i(); });
        }
    }
    for j in 0..group / 2 {
        for t in 0..t_sub {
            let mv = format_ident!("mv_{}", t);
            let (a, b) = (
                lit(head + 2 * j * stride + t * l),
                lit(head + (2 * j + 1) * stride + t * l),
            );
            out.extend(quote! { let #mv = ops::min_pair(sg.add(#a), sg.add(#b)); });
        }
        for r in 0..rows {
            let (bp, row, at) = (format_ident!("bp_{}", r), lit(r), lit(2 * j));
            out.extend(quote! { let #bp = ops::sum_pair::<0>(xcg.add(#row * ldb + #at)); });
            for t in 0..t_sub {
                let (m, mv) = (smv(r, t), format_ident!("mv_{}", t));
                out.extend(quote! { #m = ops::scaled_sum(#m, #mv, #bp); });
            }
        }
    }
    out
}

fn sav(r: usize, t: usize) -> proc_macro2::Ident {
    format_ident!("sa_{}_{}", r, t)
}

fn smv(r: usize, t: usize) -> proc_macro2::Ident {
    format_ident!("sm_{}_{}", r, t)
}

/// Blocks of 2-bit levels (at most 3) an i16 pair accumulator holds: each
/// block adds 8 maddubs pair sums of at most 2 * 3 * 127, so 4 blocks stay
/// within 4 * 8 * 762 = 24384 < 2^15 (5 would too, at 30480, and widen as
/// often in a group of 8; 8 would wrap).
const I16_BLOCKS: usize = 4;

/// Blocks the odd bit pairs' i16 `4 q` accumulators of [`masked_odd_crumbs`]
/// (maddubs ISAs) hold before they join the block accumulators: each block adds 4 pair
/// sums of at most 2 * 12 * 127, so 2 blocks stay within 2 * 4 * 3048 =
/// 24384 < 2^15 (3 would wrap at level 3, 36576, which a TQ2_0 byte can
/// hold).
/// Joined, the block accumulators hold what they would without them.
const I16_CRUMB_BLOCKS: usize = 2;

/// The per-block fold of a format with one weight scale per group
/// ([`group_int`]): each block's dots go into the group's i32 sums `ga`;
/// on an ISA whose block accumulators are i16 pairs they run over
/// [`I16_BLOCKS`] blocks first (plain 2-bit levels) and are widened and
/// zeroed after every `I16_BLOCKS`-th block of the group and after its
/// last; 4-bit levels fill the pairs in one block and widen after each.
/// The offset term comes off once, at the close.
fn group_fold(p: &MicroSpec, isa: &I8Isa, rows: usize) -> TokenStream {
    let hi16 = masked_high_nibbles(&p.spec, isa);
    let mut add = TokenStream::new();
    for r in 0..rows {
        for t in 0..p.tile.t_sub {
            let (ga, i) = (gav(r, t), format_ident!("i_{}_{}", r, t));
            // Masked high nibbles: their own `16 q` sums join in (they
            // are zeroed with the block's).
            let dot = if hi16 {
                let j = jv(r, t);
                quote! { ops::join_hi(#i, #j) }
            } else {
                quote! { ops::block_sum(#i) }
            };
            add.extend(quote! { #ga = ops::addi(#ga, #dot); });
            if isa.pair_sums_i16 {
                add.extend(quote! { #i = ops::zero_i(); });
            }
        }
    }
    if !sums_span_blocks(&p.spec, isa) {
        return add;
    }
    // The bound above holds for plain 2-bit levels; a grid's table could
    // hold larger ones.
    assert!(
        p.spec.bits() == 2 && !p.spec.grid(),
        "i16 sums over several blocks: plain 2-bit levels only"
    );
    let last = lit(I16_BLOCKS - 1);
    let every = lit(I16_BLOCKS);
    let widen = quote! {
        if blk % #every == #last || blk + 1 == run {
            #add
        }
    };
    if !masked_odd_crumbs(&p.spec, isa) {
        return widen;
    }
    // The `4 q` sums join first, on every block that widens among others.
    const _: () = assert!(I16_BLOCKS.is_multiple_of(I16_CRUMB_BLOCKS));
    let mut join = TokenStream::new();
    for r in 0..rows {
        for t in 0..p.tile.t_sub {
            let (i, j) = (format_ident!("i_{}_{}", r, t), jv(r, t));
            join.extend(quote! {
                #i = ops::join_crumbs(#i, #j);
                #j = ops::zero_i();
            });
        }
    }
    let (last, every) = (lit(I16_CRUMB_BLOCKS - 1), lit(I16_CRUMB_BLOCKS));
    quote! {
        if blk % #every == #last || blk + 1 == run {
            #join
        }
        #widen
    }
}

/// Whether a group-sum kernel's i16 pair accumulators hold several blocks
/// before [`group_fold`] widens them (counting blocks to know when): the
/// maddubs ISAs, but not for 4-bit levels, which fill the pairs in one
/// block (`pair_acc`'s bound) and widen after every block.
fn sums_span_blocks(spec: &I8Spec, isa: &I8Isa) -> bool {
    isa.pair_sums_i16 && !(spec.bits() == 4 && !spec.codebook() && !spec.grid())
}

/// Whether `spec`'s kernels on `isa` remove the format's offset term by
/// starting each block accumulator at the row's `-offset * sum(x)` (one
/// negation per row and part, shared by its column groups) instead of one
/// subtraction per row, column group and part at the fold: offset formats
/// without mins on ISAs whose block accumulators are i32 lanes (maddubs'
/// i16 pair sums cannot hold the term), outside the group-sum and
/// integer-sub-scale kernels, which remove it their own way.
pub(crate) fn offset_in_init(spec: &I8Spec, isa: &I8Isa) -> bool {
    !isa.pair_sums_i16
        && isa.removes_offset(spec)
        && !spec.mins()
        && !group_int(spec, isa)
        && int_scale_form(spec, isa).is_none()
        && crate::family::int8::emit::micro::lane_isa(isa)
}

/// Whether `spec`'s scaled pair dots on `isa` sum a half block's i16 pair
/// sums before they widen them ([`pair_dots`]): maddubs ISAs and 5-bit
/// levels, whose four maddubs per half add up to at most
/// 4 * 2 * 31 * 127 = 31496 < 2^15 (6-bit levels would reach 64008).
pub(crate) fn i16_half_blocks(spec: &I8Spec, isa: &I8Isa) -> bool {
    isa.pair_sums_i16 && spec.bits() == 5
}

/// `ga_{r}_{t}`: the integer sum of a group of blocks with one weight scale.
fn gav(r: usize, t: usize) -> proc_macro2::Ident {
    format_ident!("ga_{}_{}", r, t)
}

fn gv(r: usize, t: usize) -> proc_macro2::Ident {
    format_ident!("g_{}_{}", r, t)
}

/// The block of a 5-bit kernel: each column group's plane of fifth bits
/// (chunk 4) once, then per nibble chunk `g` the 5-bit levels of its low and
/// high halves (`hb_lo::<g>` / `hb_hi::<g>`, values `8g..8g+4` and
/// `8g+4..8g+8`, unsigned 0..32), accumulated by [`pair_dots`].
fn five_bit_block(p: &MicroSpec, isa: &I8Isa, rows: usize) -> TokenStream {
    let (t_u, t_sub) = (p.tile.t_u, p.tile.t_sub);
    let chunk = 4 * p.lanes;
    let mut block = TokenStream::new();
    // With integer sub-scales (a scale per block) every pair's dots take
    // the block's scale levels straight into `sa`.
    let form = int_scale_form(&p.spec, isa);
    if let Some(form) = form {
        assert_eq!(p.spec.scales_per_block(), 1, "5-bit: one scale per block");
        block.extend(part_scales(p, form, 0));
    }
    for t in 0..t_sub {
        let (h, off) = (format_ident!("h_{}", t), lit((4 * t_u + t) * chunk));
        block.extend(quote! { let #h = ops::loadb(w.add(#off)); });
    }
    for g in 0..4 {
        let gl = proc_macro2::Literal::i32_unsuffixed(g as i32);
        for t in 0..t_sub {
            let (wv, h, lo, hi) = (
                format_ident!("w_{}", t),
                format_ident!("h_{}", t),
                format_ident!("lo_{}", t),
                format_ident!("hi_{}", t),
            );
            let off = lit((g * t_u + t) * chunk);
            block.extend(quote! {
                let #wv = ops::loadb(w.add(#off));
                let #lo = ops::hb_lo::<#gl>(#wv, #h);
                let #hi = ops::hb_hi::<#gl>(#wv, #h);
            });
        }
        block.extend(pair_dots(&p.spec, isa, rows, t_sub, g, form.is_some()));
    }
    block
}

/// Every row's dots of the level pair `lo_{t}` / `hi_{t}` (values `8g..8g + 4`
/// and `8g + 4..8g + 8`) two at a time (on maddubs ISAs the i16 pair sums
/// of levels below 64 leave room for two products, not for a whole
/// block), then the fence: into its i32 sums (`dot2_u`), or with `scaled`
/// (a kernel that keeps integer sub-scales, [`int_scales`]) widened by the
/// part's scale levels `sv_{t}` (`dot2_sc`) straight into the super-block
/// sums `sa`. Where [`i16_half_blocks`] holds, the scaled i16 pair sums
/// run over two level pairs (a half block, `pair_acc` into `i`) before
/// one `scaled_sum` widens them into `sa`: 2 fewer ops per block, row and
/// column group (5-bit GEMM on Zen 5's AVX2: m=32 263 to 292 GFLOPS).
fn pair_dots(
    spec: &I8Spec,
    isa: &I8Isa,
    rows: usize,
    t_sub: usize,
    g: usize,
    scaled: bool,
) -> TokenStream {
    let i16_halves = scaled && i16_half_blocks(spec, isa);
    let mut out = TokenStream::new();
    for r in 0..rows {
        let (xl, xh) = (format_ident!("xl_{}", r), format_ident!("xh_{}", r));
        let (bl, bh) = (bcast(isa, r, 8 * g), bcast(isa, r, 8 * g + 4));
        out.extend(quote! {
            let #xl = #bl;
            let #xh = #bh;
        });
        for t in 0..t_sub {
            let (lo, hi) = (format_ident!("lo_{}", t), format_ident!("hi_{}", t));
            let i = format_ident!("i_{}_{}", r, t);
            out.extend(if scaled && i16_halves {
                let (a, sv) = (sav(r, t), format_ident!("sv_{}", t));
                let open = if g.is_multiple_of(2) {
                    quote! { let mut #i = ops::zero_i(); }
                } else {
                    TokenStream::new()
                };
                let close = if g % 2 == 1 {
                    quote! { #a = ops::scaled_sum(#a, #i, #sv); }
                } else {
                    TokenStream::new()
                };
                quote! {
                    #open
                    #i = ops::pair_acc(#i, #lo, #xl);
                    #i = ops::pair_acc(#i, #hi, #xh);
                    #close
                }
            } else if scaled {
                let (a, sv) = (sav(r, t), format_ident!("sv_{}", t));
                quote! { #a = ops::dot2_sc(#a, #lo, #xl, #hi, #xh, #sv); }
            } else {
                let i = format_ident!("i_{}_{}", r, t);
                quote! { #i = ops::dot2_u(#i, #lo, #xl, #hi, #xh); }
            });
        }
    }
    let accs: &[&str] = match (scaled, i16_halves) {
        (true, true) => &["i", "sa"],
        (true, false) => &["sa"],
        _ => &["i"],
    };
    out.extend(fence_of(isa, spec, rows, t_sub, accs));
    out
}

/// The block of a 6-bit kernel, one part per scale: the 8-bit layout's
/// value chunks in order, two at a time (values `8k..8k + 4` and
/// `8k + 4..8k + 8`) into `dot2_u` as for 5-bit. Kept chunks are one mask
/// of their load (`lo6`); the spill chunks 6 and 7 merge the top bit pairs
/// of stored chunks 0..3 and 3..6 (`spill6`), loaded again where they are
/// needed: the fences hold `w` on the ISAs whose compilers would otherwise
/// keep the first half's chunks live through the second.
fn six_bit_block(p: &MicroSpec, isa: &I8Isa, rows: usize) -> Vec<TokenStream> {
    level_parts(p, isa, rows, |v, t| six_bit_at(p, v, t))
}

/// The 6-bit levels of value chunk `v` of column group `t` of the block
/// at `w` ([`six_bit_level`] over the lane layout's stored chunks).
fn six_bit_at(p: &MicroSpec, v: usize, t: usize) -> TokenStream {
    let (t_u, chunk) = (p.tile.t_u, 4 * p.lanes);
    six_bit_level(v, 8, |s| {
        let off = lit((s * t_u + t) * chunk);
        quote! { ops::loadb(w.add(#off)) }
    })
}

/// A block of unsigned levels below 64, one part per scale: value chunks
/// `2k` and `2k + 1` of each column group (`level(v, t)`) dotted in pairs
/// by [`pair_dots`].
fn level_parts(
    p: &MicroSpec,
    isa: &I8Isa,
    rows: usize,
    level: impl Fn(usize, usize) -> TokenStream,
) -> Vec<TokenStream> {
    let t_sub = p.tile.t_sub;
    // Chunk pairs per scale: 4, or 2 with a scale per 16 values.
    let per_part = 4 / p.spec.scales_per_block();
    let form = int_scale_form(&p.spec, isa);
    let mut parts = vec![TokenStream::new()];
    for k in 0..4 {
        if k > 0 && k % per_part == 0 {
            parts.push(TokenStream::new());
        }
        let block = parts.last_mut().expect("a part");
        if let Some(form) = form.filter(|_| k % per_part == 0) {
            block.extend(part_scales(p, form, k / per_part));
        }
        for t in 0..t_sub {
            for (v, name) in [(2 * k, "lo"), (2 * k + 1, "hi")] {
                let q = format_ident!("{}_{}", name, t);
                let l = level(v, t);
                block.extend(quote! { let #q = #l; });
            }
        }
        block.extend(pair_dots(&p.spec, isa, rows, t_sub, k, form.is_some()));
    }
    parts
}

/// `unpack(w, dst, blocks)`, the scratch filler of kernels that read
/// their levels from one ([`scratch_levels`]; the driver calls it for at
/// most `SCRATCH_BLOCKS` blocks at a time): per 32-value block of a
/// whole tile (`t_u` column groups), its 8 value chunks as unsigned bytes
/// at the 8-bit layout's offsets, unpacked by the same primitives the
/// in-register kernels use (5-bit `hb_lo` / `hb_hi`, 6-bit `lo6` /
/// `spill6`).
pub(crate) fn unpack_fn(p: &MicroSpec, isa: &I8Isa) -> TokenStream {
    let (t_u, chunk) = (p.tile.t_u, 4 * p.lanes);
    let at = |c: usize, t: usize| lit((c * t_u + t) * chunk);
    let mut body = TokenStream::new();
    let store = |v: usize, t: usize, level: TokenStream| {
        let off = at(v, t);
        quote! { ops::storeb(dst.add(#off), #level); }
    };
    for t in 0..t_u {
        if p.spec.bits() == 5 {
            let h = at(4, t);
            body.extend(quote! { let h = ops::loadb(w.add(#h)); });
            for g in 0..4 {
                let (gl, off) = (proc_macro2::Literal::i32_unsuffixed(g as i32), at(g, t));
                body.extend(quote! { let wg = ops::loadb(w.add(#off)); });
                body.extend(store(2 * g, t, quote! { ops::hb_lo::<#gl>(wg, h) }));
                body.extend(store(2 * g + 1, t, quote! { ops::hb_hi::<#gl>(wg, h) }));
            }
        } else {
            for v in 0..8 {
                body.extend(store(v, t, six_bit_at(p, v, t)));
            }
        }
    }
    let (wstep, dstep) = (
        lit(4 * p.spec.bits() as usize * t_u * p.lanes),
        lit(32 * t_u * p.lanes),
    );
    let attrs = crate::family::int8::emit::micro::fn_attrs(isa);
    quote! {
        /// One tile's levels of `blocks` 32-value blocks, unpacked into `dst`
        /// (the 8-bit layout's chunks) for the micro kernels to dot.
        #attrs
        unsafe fn unpack(mut w: *const u8, mut dst: *mut u8, blocks: usize) {
            unsafe {
                for _ in 0..blocks {
                    #body
                    w = w.add(#wstep);
                    dst = dst.add(#dstep);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::int8::emit::micro::int_scales;
    use crate::family::int8::isa::{AVX2, AVX512VNNI, AVXVNNI, DOTPROD, PORTABLE};
    use crate::family::int8::plan::I8Tile;
    use crate::family::int8::spec::I8Spec;
    use crate::spec::Op;

    fn emitted(isa: &I8Isa, tag: &str, t_sub: usize, rows: usize) -> String {
        emitted_op(isa, tag, t_sub, rows, Op::Gemm { m: 32 })
    }

    fn emitted_op(isa: &I8Isa, tag: &str, t_sub: usize, rows: usize, op: Op) -> String {
        let p = on_tile(
            isa,
            I8Spec::from_tag(op, tag).expect("format"),
            t_sub,
            t_sub,
            rows,
        );
        micro_kernel(&p, isa, rows).to_string()
    }

    /// `spec` on a `rows` x `t_sub` micro tile of a `t_u` tile on `isa`.
    fn on_tile(isa: &I8Isa, spec: I8Spec, t_u: usize, t_sub: usize, rows: usize) -> MicroSpec {
        MicroSpec {
            spec: isa.reads(&spec),
            tile: I8Tile {
                t_u,
                t_sub,
                m_r: rows,
            },
            lanes: isa.lanes,
        }
    }

    /// The x86 GEMVs (AVX2, AVX-512 VNNI) of formats within
    /// `Prefetch::max_bits` ask for every cache line of a tile's block
    /// `Prefetch::ahead` bytes ahead, once per block; their GEMMs, the
    /// GEMVs of formats read at more bits (on AVX-512 VNNI: more than 2,
    /// the IQ1/IQ2 lattice formats' 3-bit indices included) and the ISAs
    /// without a prefetch distance do not.
    #[test]
    fn x86_gemvs_prefetch_their_weight_stream() {
        let max_bits = |isa: &I8Isa| isa.prefetch.map(|f| f.max_bits);
        assert_eq!((max_bits(&AVX2), max_bits(&AVX512VNNI)), (Some(8), Some(2)));
        // Format, bits per level as AVX-512 VNNI reads them, and whether
        // its GEMV prefetches there.
        let cases = [
            ("q4_0", 4, false),
            ("q8_0", 8, false),
            ("q6_k", 6, false),
            ("q3_k", 3, false),
            ("iq2_xxs", 3, false),
            ("q2_k", 2, true),
            ("k2_bb", 2, true),
            ("tq1_0", 2, true),
            ("k1", 1, true),
        ];
        for isa in [&AVX2, &AVX512VNNI] {
            let ahead = isa.prefetch.expect("x86 GEMVs prefetch").ahead;
            for (tag, bits, on_avx512) in cases {
                let (name, t_u) = (isa.name, 2);
                let spec = I8Spec::from_tag(Op::Gemv, tag).expect("format");
                let read = isa.reads(&spec).bits() as usize;
                if isa.name == AVX512VNNI.name {
                    assert_eq!(read, bits, "{name} {tag}");
                }
                let g = emitted_op(isa, tag, t_u, 2, Op::Gemm { m: 32 });
                assert!(!g.contains("prefetch"), "{name} {tag} GEMM");
                let k = emitted_op(isa, tag, t_u, 1, Op::Gemv);
                if isa.name == AVX512VNNI.name && !on_avx512 {
                    assert!(!k.contains("prefetch"), "{name} {tag} GEMV");
                    continue;
                }
                let lines = (4 * read * t_u * isa.lanes).div_ceil(64);
                assert_eq!(k.matches("ops :: prefetch").count(), lines, "{name} {tag}");
                for l in 0..lines {
                    let at = format!("w . wrapping_add ({})", ahead + 64 * l);
                    assert!(k.contains(&at), "{name} {tag}: no {at}");
                }
            }
        }
        for (tag, _, _) in cases {
            let k = emitted_op(&DOTPROD, tag, 2, 1, Op::Gemv);
            assert!(!k.contains("prefetch"), "dotprod {tag}");
        }
    }

    /// Signed and codebook levels on the vpdpbusd ISAs: flipped (8-bit) or
    /// looked up shifted (codebook), dotted unsigned, with each block's
    /// `128 * sum(x)` removed; elsewhere the signed dot and no sums read.
    /// The only check the AVX-VNNI kernels get here, where no CPU runs them.
    #[test]
    fn signed_levels_are_offset_on_the_u8_dot_isas() {
        for isa in [&AVX512VNNI, &AVXVNNI] {
            for (tag, flips) in [("q8_0", 8), ("iq4_nl", 0)] {
                let k = emitted(isa, tag, 2, 2);
                assert!(!k.contains("dot_s"), "{} {tag}", isa.name);
                assert_eq!(
                    k.matches("ops :: flip").count(),
                    flips * 2,
                    "{} {tag}",
                    isa.name
                );
                assert!(k.contains("ops :: subi"), "{} {tag}", isa.name);
                assert!(k.contains("splati (xc"), "{} {tag}", isa.name);
            }
        }
        for tag in ["q8_0", "iq4_nl"] {
            let k = emitted(&AVX2, tag, 2, 2);
            assert!(k.contains("dot_s") && !k.contains("flip"), "avx2 {tag}");
            assert!(!k.contains("splati (xc"), "avx2 {tag}");
        }
    }

    /// 6-bit (Q6_K) on every lane ISA: per column group and block six
    /// masked chunks and two spill merges (none where the GEMM reads a
    /// scratch of levels), four `dot2_u` per row, one fence per chunk
    /// pair, and each half's offset removed with its own sum.
    #[test]
    fn six_bit_kernels_mask_kept_chunks_and_merge_spills() {
        for isa in [&AVX512VNNI, &AVXVNNI, &AVX2, &DOTPROD] {
            for (op, rows) in [(Op::Gemv, 1), (Op::Gemm { m: 32 }, 3)] {
                let k = emitted_op(isa, "q6_k", 2, rows, op);
                let n = |pat: &str| k.matches(pat).count();
                let spec = I8Spec::from_tag(op, "q6_k").expect("format");
                let unpacks = usize::from(!scratch_levels(&spec, isa));
                assert_eq!(n("ops :: lo6"), 6 * 2 * unpacks, "{} lo6", isa.name);
                assert_eq!(n("ops :: spill6"), 2 * 2 * unpacks, "{} spill6", isa.name);
                // Integer scales (AVX2): scaled dots, the offset through
                // one madd per block (`q6_k_on_avx2_keeps_signed_sub_scales`).
                let int = int_scales(&spec, isa);
                let dot = if int {
                    "ops :: dot2_sc"
                } else {
                    "ops :: dot2_u"
                };
                assert_eq!(n(dot), 4 * 2 * rows, "{} {dot}", isa.name);
                // The offset: per half and row one negated sum that starts
                // both column groups' accumulators (`offset_in_init`), or
                // one subtraction per column group.
                let neg = offset_in_init(&spec, isa);
                let subs = match (int, neg) {
                    (true, _) => 0,
                    (false, true) => 2 * rows,
                    (false, false) => 2 * 2 * rows,
                };
                assert_eq!(n("ops :: subi"), subs, "{} subi", isa.name);
                assert_eq!(
                    n("let mut i_0_1 = nc_0"),
                    if neg { 2 } else { 0 },
                    "{}",
                    isa.name
                );
                for h in (0..2).filter(|_| !int) {
                    let at = format!("xc . add ({} * ldb * 2 + {h})", rows - 1);
                    assert!(k.contains(&at), "{} {at}", isa.name);
                }
                assert!(!k.contains("flip") && !k.contains("dot_s"), "{}", isa.name);
                if isa.fence_class.is_some() {
                    assert_eq!(n("asm !"), 4, "{} fences", isa.name);
                }
            }
        }
    }

    /// 5- and 6-bit GEMMs on AVX2 read their levels from the scratch the
    /// driver fills: 8 plain loads per column group and block, four
    /// `dot2_u` per row and column group (Q5_K: 8 `pair_acc`, Q6_K: 4
    /// `dot2_sc`), no unpack in the micro kernel;
    /// `unpack` stores the 8 value chunks of every column group of the
    /// tile per block with the in-register kernels' primitives. GEMVs and
    /// the other ISAs keep the unpack in the micro kernel.
    #[test]
    fn five_and_six_bit_gemms_on_avx2_dot_a_scratch_of_levels() {
        for (tag, unpack_prim) in [
            ("q5_0", "ops :: hb_lo"),
            ("q5_1", "ops :: hb_lo"),
            ("q5_k", "ops :: hb_lo"),
            ("q6_k", "ops :: lo6"),
        ] {
            let spec = I8Spec::from_tag(Op::Gemm { m: 32 }, tag).expect("format");
            assert!(scratch_levels(&spec, &AVX2), "{tag}");
            // One row would share the unpack with nothing.
            let one = I8Spec::from_tag(Op::Gemm { m: 1 }, tag).expect("format");
            assert!(!scratch_levels(&one, &AVX2), "{tag} m=1");
            for (t_u, t_sub, rows) in [(2, 2, 2), (2, 1, 4), (3, 1, 1)] {
                let p = on_tile(&AVX2, spec, t_u, t_sub, rows);
                let k = micro_kernel(&p, &AVX2, rows).to_string();
                let n = |pat: &str| k.matches(pat).count();
                assert_eq!(n("ops :: loadb (w . add"), 8 * t_sub, "{tag} loads");
                // Pairs of chunks, or (integer 5-bit scales) single chunks
                // into a half block's i16 sums.
                let (dot, per) = match (int_scales(&spec, &AVX2), i16_half_blocks(&spec, &AVX2)) {
                    (true, true) => ("ops :: pair_acc", 8),
                    (true, false) => ("ops :: dot2_sc", 4),
                    _ => ("ops :: dot2_u", 4),
                };
                assert_eq!(n(dot), per * t_sub * rows, "{tag} dots");
                for prim in ["hb_lo", "hb_hi", "lo6", "spill6", "nib_lo"] {
                    assert!(!k.contains(prim), "{tag} {prim} in the micro kernel");
                }
                // A block of the scratch: 32 bytes per column.
                let step = format!("w = w . add ({})", 32 * t_u * AVX2.lanes);
                assert!(k.contains(&step), "{tag} {step}");
                let u = unpack_fn(&p, &AVX2).to_string();
                assert_eq!(u.matches("ops :: storeb").count(), 8 * t_u, "{tag} stores");
                assert!(u.contains(unpack_prim), "{tag} unpack");
                for v in 0..8 {
                    for t in 0..t_u {
                        let at = format!("dst . add ({})", (v * t_u + t) * 4 * AVX2.lanes);
                        assert!(u.contains(&at), "{tag} {at}");
                    }
                }
            }
            let gemv = emitted_op(&AVX2, tag, 2, 1, Op::Gemv);
            assert!(gemv.contains(unpack_prim), "{tag} GEMV unpacks in place");
            assert!(
                emitted(&AVX512VNNI, tag, 2, 2).contains(unpack_prim),
                "{tag}"
            );
            assert!(emitted(&DOTPROD, tag, 2, 2).contains(unpack_prim), "{tag}");
        }
        for tag in ["q4_0", "q4_k", "q2_k", "q8_0", "iq4_nl"] {
            let spec = I8Spec::from_tag(Op::Gemm { m: 32 }, tag).expect("format");
            assert!(!scratch_levels(&spec, &AVX2), "{tag}");
        }
    }

    /// q4_0_g128 (Q4_0 levels, one f16 per 128 values) folds a group's
    /// integer dots as TQ2_0 does, but its 4-bit levels fill maddubs' i16
    /// pairs in one block: on AVX2 every block widens its pairs into the
    /// group sum and zeroes them, with no block counter; the vpdpbusd GEMVs
    /// join the masked high nibbles' `16 q` sums in the same fold.
    #[test]
    fn four_bit_group_sums_fold_every_block() {
        use crate::family::int8::isa::PORTABLE;
        for isa in [&AVX512VNNI, &AVXVNNI, &AVX2, &DOTPROD, &PORTABLE] {
            for (op, t_sub, rows) in [(Op::Gemv, 2, 1), (Op::Gemm { m: 32 }, 1, 3)] {
                let spec = I8Spec::from_tag(op, "q4_0_g128").expect("format");
                assert!(group_int(&spec, isa), "{}", isa.name);
                let what = format!("q4_0_g128 {} rows {rows}", isa.name);
                let p = on_tile(isa, spec, 2, t_sub, rows);
                let k = micro_kernel(&p, isa, rows).to_string();
                assert!(!k.contains("blk"), "{what}: a block counter");
                let body = &k[k.find("for _ in 0 .. run").expect("a block loop")..];
                let body = &body[..body.find("ops :: scales (sg").expect("a close")];
                for absent in ["cvti", "fmaf", "mulf"] {
                    assert!(!body.contains(absent), "{what}: {absent} in the block loop");
                }
                let fold = if masked_high_nibbles(&spec, isa) {
                    "ops :: join_hi (i_"
                } else {
                    "ops :: block_sum (i_"
                };
                assert_eq!(body.matches(fold).count(), rows * t_sub, "{what}");
                assert_eq!(
                    body.matches("ops :: addi (ga_").count(),
                    rows * t_sub,
                    "{what}"
                );
                if isa.pair_sums_i16 {
                    // Zeroed at the block's start and again after the fold.
                    let after = &body[body.find(fold).expect("a fold")..];
                    assert_eq!(after.matches("= ops :: zero_i ()").count(), rows * t_sub);
                }
            }
        }
    }

    /// TQ1_0 and TQ2_0 (one `d` per 256 values) sum a group's integer
    /// dots on every lane ISA: per block, row and column group one `addi`
    /// and no conversion, FMA, scale load or offset term; per group one f16
    /// scale load per column group, read through the group's first block,
    /// one sum of the activation sums per row, and one offset subtraction,
    /// conversion and FMA per row and column group. On AVX2, whose block
    /// accumulators are i16 pairs, the widening runs after every fourth
    /// block and the group's last, and zeroes them; elsewhere every block
    /// zeroes its own. The formats with a scale per block keep theirs per
    /// block.
    #[test]
    fn one_scale_per_group_sums_the_groups_integer_dots() {
        use crate::family::int8::isa::{I8MM, PORTABLE, SVE256};
        for tag in ["tq2_0", "tq1_0"] {
            for isa in [&AVX512VNNI, &AVXVNNI, &AVX2, &DOTPROD, &PORTABLE] {
                for (op, t_sub, rows) in [(Op::Gemv, 2, 1), (Op::Gemm { m: 32 }, 1, 3)] {
                    let spec = I8Spec::from_tag(op, tag).expect("format");
                    assert!(group_int(&spec, isa), "{tag} {}", isa.name);
                    let p = on_tile(isa, spec, 2, t_sub, rows);
                    let k = micro_kernel(&p, isa, rows).to_string();
                    let n = |pat: &str| k.matches(pat).count();
                    let what = format!("{tag} {} rows {rows}", isa.name);
                    let i16 = isa.pair_sums_i16;
                    let head = if i16 {
                        "for blk in 0 .. run"
                    } else {
                        "for _ in 0 .. run"
                    };
                    let body = &k[k.find(head).expect("a block loop")..];
                    let body = &body[..body.find("let s_0 = ops :: scales (sg").expect("a close")];
                    assert_eq!(body.matches("ops :: addi").count(), rows * t_sub, "{what}");
                    for absent in ["cvti", "fmaf", "scales", "mulf", "subi", "splati"] {
                        assert!(!body.contains(absent), "{what}: {absent} in the block loop");
                    }
                    let widen = "if blk % 4 == 3 || blk + 1 == run {";
                    assert_eq!(body.matches(widen).count(), usize::from(i16), "{what}");
                    // i16 accumulators zeroed at the group's open and at each
                    // widening (and the odd bit pairs' at each join, see
                    // `ternary_x86_gemvs_take_odd_bit_pairs_in_place`); i32
                    // ones at each block's start.
                    let joins = usize::from(masked_odd_crumbs(&spec, isa) && i16);
                    let zeroes = body.matches("= ops :: zero_i ()").count();
                    assert_eq!(zeroes, (1 + joins) * rows * t_sub, "{what}");
                    if i16 {
                        let w = &body[body.find(widen).expect("a widening")..];
                        assert_eq!(w.matches("= ops :: zero_i ()").count(), rows * t_sub);
                    }
                    assert_eq!(
                        masked_odd_crumbs(&spec, isa),
                        rows == 1 && (i16 || isa.unsigned_dot),
                        "{what}"
                    );
                    assert_eq!(n("ops :: scales (sg"), t_sub, "{what}");
                    // The scale is a header per super-block, which the
                    // group's open steps past; the blocks have none.
                    let tw = 2 * isa.lanes;
                    let open = format!("let sg = sc ; sc = sc . add ({tw}) ;");
                    assert!(k.contains(&open), "{what}: {open}");
                    assert_eq!(n("sc = sc . add"), 1, "{what}");
                    assert_eq!(n("ops :: cvti"), rows * t_sub, "{what}");
                    assert_eq!(n("ops :: fmaf"), rows * t_sub, "{what}");
                    assert_eq!(n("ops :: subi"), rows * t_sub, "{what}");
                    assert_eq!(n(". sum ()"), rows, "{what}");
                }
            }
            for isa in [&I8MM, &SVE256] {
                let spec = I8Spec::from_tag(Op::Gemv, tag).expect("format");
                assert!(!group_int(&spec, isa), "{tag} {}", isa.name);
            }
        }
        for tag in ["q4_k", "q4_0", "q6_k", "k2_bb"] {
            let spec = I8Spec::from_tag(Op::Gemv, tag).expect("format");
            assert!(!group_int(&spec, &AVX2), "{tag}");
            assert!(!emitted(&AVX2, tag, 2, 1).contains("ops :: addi"), "{tag}");
        }
    }

    /// TQ2_0's and TQ1_0's x86 GEMVs take the odd bit pairs in place into
    /// accumulators of their own (one shift per weight vector, not three),
    /// opened with the group: AVX2's i16 ones join the block accumulators
    /// every two blocks and before every widening, the vpdpbusd ISAs' i32
    /// ones the group's sums at its close. Their GEMMs, aarch64 and
    /// portable, and the 2-bit formats with sub-scales or grids keep `crumb`.
    #[test]
    fn ternary_x86_gemvs_take_odd_bit_pairs_in_place() {
        for tag in ["tq2_0", "tq1_0"] {
            for isa in [&AVX2, &AVXVNNI, &AVX512VNNI] {
                let spec = I8Spec::from_tag(Op::Gemv, tag).expect("format");
                assert!(masked_odd_crumbs(&spec, isa), "{tag} {}", isa.name);
                let p = on_tile(isa, spec, 2, 2, 1);
                let k = micro_kernel(&p, isa, 1).to_string();
                let n = |pat: &str| k.matches(pat).count();
                let what = format!("{tag} {}", isa.name);
                // Two weight vectors per chunk, two chunks: bit pairs 1 and 3
                // in place, 0 and 2 through `crumb`.
                assert_eq!(n("ops :: crumb1_x4"), 4, "{what}");
                assert_eq!(n("ops :: crumb3_x4"), 4, "{what}");
                assert_eq!(n("ops :: crumb :: < 0 >") + n("ops :: crumb :: < 4 >"), 8);
                assert!(!k.contains("crumb :: < 2 >") && !k.contains("crumb :: < 6 >"));
                let (head, close) = (
                    k.find("in 0 .. run").expect("a block loop"),
                    k.find("let s_0 = ops :: scales (sg").expect("a close"),
                );
                for t in 0..2 {
                    assert_eq!(n(&format!("j_0_{t} = ops :: pair_acc (j_0_{t} ,")), 4);
                    assert_eq!(n(&format!("i_0_{t} = ops :: pair_acc (i_0_{t} ,")), 4);
                    // Opened with the group, before its block loop.
                    let open = k.find(&format!("let mut j_0_{t} = ops :: zero_i ()"));
                    assert!(open.expect("an open") < head, "{what}");
                    let join = if isa.pair_sums_i16 {
                        format!("i_0_{t} = ops :: join_crumbs (i_0_{t} , j_0_{t})")
                    } else {
                        format!("ga_0_{t} = ops :: join_crumbs (ga_0_{t} , j_0_{t})")
                    };
                    assert_eq!(n(&join), 1, "{what}");
                    let at = k.find(&join).expect("a join");
                    assert_eq!(at > close, !isa.pair_sums_i16, "{what}");
                    if !isa.pair_sums_i16 {
                        // Before the close reads the group's sums.
                        let read = k.find(&format!("ops :: subi (ga_0_{t} ,"));
                        assert!(at < read.expect("the offset's removal"), "{what}");
                    }
                }
                if isa.pair_sums_i16 {
                    // The join comes before the widening, each on its own
                    // period and both after a run's last block (whatever its
                    // length: the runtime's groups are always whole).
                    let join = k.find("if blk % 2 == 1 || blk + 1 == run {");
                    let widen = k.find("if blk % 4 == 3 || blk + 1 == run {");
                    assert!(join.expect("a join") < widen.expect("a widening"));
                } else {
                    assert!(!k.contains("blk %"), "{what}");
                }
            }
        }
        for (isa, tag, op) in [
            (&AVX2, "tq2_0", Op::Gemm { m: 32 }),
            (&AVX512VNNI, "tq1_0", Op::Gemm { m: 32 }),
            (&AVX2, "q2_k", Op::Gemv),
            (&AVX512VNNI, "q2_k", Op::Gemv),
            (&AVX2, "k2_bb", Op::Gemv),
            (&DOTPROD, "tq2_0", Op::Gemv),
            (&PORTABLE, "tq2_0", Op::Gemv),
        ] {
            let spec = I8Spec::from_tag(op, tag).expect("format");
            assert!(!masked_odd_crumbs(&spec, isa), "{} {tag}", isa.name);
        }
        assert!(!emitted_op(&AVX2, "tq2_0", 2, 3, Op::Gemm { m: 32 }).contains("_x4"));
    }

    /// Q2_K on AVX-512 VNNI keeps its integer sub-scales with the halves
    /// packed: each half sums into accumulators of its own (`i`, `i1`),
    /// joined per row and column group after half 1 into one i16 pair, then
    /// one `scaled_sum` for both halves' scales and one for the mins; per
    /// column group one `sub_pair` (half 0's levels low) whose sum the close
    /// takes back off (`unbias`). No per-half shuffle, no f16 scale per
    /// half. Q6_K (signed) and the 5- and 6-bit formats keep f16.
    #[test]
    fn q2_k_on_avx512vnni_packs_both_halves_into_one_scaled_sum() {
        for (op, t_sub, rows) in [
            (Op::Gemv, 4, 1),
            (Op::Gemm { m: 32 }, 1, 4),
            (Op::Gemm { m: 32 }, 2, 3),
        ] {
            let spec = I8Spec::from_tag(op, "q2_k").expect("format");
            assert!(int_scales(&spec, &AVX512VNNI) && packed_halves(&spec, &AVX512VNNI));
            let p = on_tile(&AVX512VNNI, spec, 4, t_sub, rows);
            let k = micro_kernel(&p, &AVX512VNNI, rows).to_string();
            let n = |pat: &str| k.matches(pat).count();
            assert_eq!(n("ops :: join_halves"), rows * t_sub);
            assert_eq!(n("ops :: sub_pair"), t_sub);
            assert_eq!(n("ops :: addi"), t_sub);
            assert_eq!(n("ops :: unbias"), t_sub);
            assert_eq!(n("ops :: sub_mins"), t_sub);
            assert_eq!(n("ops :: sum_pair :: < 0 >"), rows);
            assert_eq!(n("ops :: scaled_sum"), 2 * rows * t_sub);
            assert_eq!(n("ops :: pair_acc"), 8 * rows * t_sub);
            // Four dots per row and column group into each half's own
            // accumulator, and nothing else into either.
            for r in 0..rows {
                for t in 0..t_sub {
                    for (pre, other) in [("i", "i1"), ("i1", "i")] {
                        let acc = format!("{pre}_{r}_{t} = ops :: pair_acc ({pre}_{r}_{t} ,");
                        assert_eq!(n(&acc), 4, "{pre}_{r}_{t}");
                        let mixed = format!("{pre}_{r}_{t} = ops :: pair_acc ({other}_{r}_{t} ,");
                        assert_eq!(n(&mixed), 0, "{mixed}");
                    }
                    let join = format!("i_{r}_{t} = ops :: join_halves (i_{r}_{t} , i1_{r}_{t})");
                    assert_eq!(n(&join), 1, "{join}");
                }
            }
            // Both halves' accumulators zeroed per block (i, i1), and the
            // group's sa, sm and per column group corr.
            assert_eq!(n("= ops :: zero_i ()"), 4 * rows * t_sub + t_sub);
            assert!(!k.contains("sub_scale") && !k.contains("block_sum"));
            assert_eq!(n("ops :: scales"), 2 * t_sub);
            // Half 1's dots come after the last of half 0's and before the
            // join; the join before the scaled sum that reads it.
            let first_i1 = k.find("i1_0_0 = ops :: pair_acc").expect("half 1");
            let last_i = k.rfind("i_0_0 = ops :: pair_acc").expect("half 0");
            let join = k.find("ops :: join_halves").expect("a join");
            let scaled = k.find("ops :: scaled_sum").expect("a scaled sum");
            assert!(last_i < first_i1 && first_i1 < join && join < scaled);
        }
        for tag in ["q6_k", "q4_k", "q3_k", "q5_k"] {
            let spec = I8Spec::from_tag(Op::Gemm { m: 32 }, tag).expect("format");
            assert!(!int_scales(&spec, &AVX512VNNI), "{tag}");
        }
    }

    /// For each `(op, t_u, t_sub, rows)` tile, `tag`'s AVX2 micro kernel
    /// keeps integer sub-scales with one `ops::{scale}::<h>` shuffle per
    /// half block and column group; `check` gets the kernel's text and the
    /// tile for the format's own counts.
    fn avx2_int_scale_kernels(
        tag: &str,
        scale: &str,
        tiles: &[(Op, usize, usize, usize)],
        check: impl Fn(&str, usize, usize, usize),
    ) {
        for &(op, t_u, t_sub, rows) in tiles {
            let spec = I8Spec::from_tag(op, tag).expect("format");
            assert!(int_scales(&spec, &AVX2), "{tag}");
            let p = on_tile(&AVX2, spec, t_u, t_sub, rows);
            let k = micro_kernel(&p, &AVX2, rows).to_string();
            for h in 0..2 {
                let pat = format!("ops :: {scale} :: < {h} >");
                assert_eq!(k.matches(&pat).count(), t_sub, "{tag} half {h}");
            }
            check(&k, t_u, t_sub, rows);
        }
    }

    /// Q2_K on AVX2 keeps its integer sub-scales: per half block and
    /// column group one scale shuffle and per row one `scaled_sum` of the
    /// half's pair sums, then one min madd per row; no f16 scale per half,
    /// and per super-block only the two sums converted against `d` and
    /// `-dmin` from entry 1 of the group's first two blocks. The other
    /// ISAs and formats keep f16 scales.
    #[test]
    fn q2_k_on_avx2_keeps_integer_sub_scales() {
        let tiles = [
            (Op::Gemv, 2, 2, 1),
            (Op::Gemm { m: 32 }, 2, 1, 3),
            (Op::Gemm { m: 32 }, 3, 1, 4),
        ];
        avx2_int_scale_kernels("q2_k", "sub_scale", &tiles, |k, t_u, t_sub, rows| {
            let n = |pat: &str| k.matches(pat).count();
            assert_eq!(n("ops :: sub_mins"), t_sub);
            assert_eq!(n("ops :: sum_pair :: < 0 >"), rows);
            assert_eq!(n("ops :: scaled_sum"), 3 * rows * t_sub);
            assert_eq!(n("ops :: pair_acc"), 8 * rows * t_sub);
            assert!(!k.contains("block_sum") && !k.contains("splati"));
            // Only the close converts: d and -dmin of each column group.
            assert_eq!(n("ops :: scales"), 2 * t_sub);
            let tw = t_u * AVX2.lanes;
            // The group's header: TW `d`s, then TW `-dmin`s, which `sc`
            // steps past at the open.
            for t in 0..t_sub {
                let d = format!("sg . add ({})", t * AVX2.lanes);
                let m = format!("sg . add ({})", tw + t * AVX2.lanes);
                assert!(k.contains(&d) && k.contains(&m), "{d} {m}");
            }
            assert!(k.contains(&format!("let sg = sc ; sc = sc . add ({})", 2 * tw)));
            // Then one entry per column and block.
            assert!(k.contains(&format!("sc = sc . add ({})", tw)));
        });
        for isa in [&AVXVNNI, &DOTPROD] {
            let spec = I8Spec::from_tag(Op::Gemm { m: 32 }, "q2_k").expect("format");
            assert!(!int_scales(&spec, isa), "{}", isa.name);
            assert!(
                !emitted(isa, "q2_k", 2, 2).contains("scaled_sum"),
                "{}",
                isa.name
            );
        }
        for tag in ["tq2_0", "q4_0", "q4_1", "q5_1"] {
            let spec = I8Spec::from_tag(Op::Gemm { m: 32 }, tag).expect("format");
            assert!(!int_scales(&spec, &AVX2), "{tag}");
        }
    }

    /// Q4_K and Q5_K on AVX2 keep their 6-bit scales and mins: in the
    /// block loop per column group one `scale_byte` shuffle and per row
    /// one `scaled_sum` of the block's pair sums (4-bit) or every pair's
    /// dots scaled into `sa` (5-bit `dot2_sc`), and nothing else: no
    /// conversion, FMA or activation-sum load. The mins go in at the
    /// group's close, per pair of blocks one `min_pair` per column group
    /// and one madd per row against the pair's sums, read at the blocks'
    /// own offsets.
    #[test]
    fn q4_k_and_q5_k_on_avx2_keep_6_bit_scales_and_mins() {
        for tag in ["q4_k", "q5_k"] {
            for (op, t_u, t_sub, rows) in [
                (Op::Gemv, 2, 2, 1),
                (Op::Gemm { m: 32 }, 2, 1, 4),
                (Op::Gemm { m: 32 }, 2, 2, 2),
            ] {
                let spec = I8Spec::from_tag(op, tag).expect("format");
                let form = int_scale_form(&spec, &AVX2).expect("integer sub-scales");
                assert_eq!(form.kind, SubScaleKind::ScaleMin);
                let p = on_tile(&AVX2, spec, t_u, t_sub, rows);
                let k = micro_kernel(&p, &AVX2, rows).to_string();
                let what = format!("{tag} {rows}x{t_sub}");
                let (body, close) = k.split_at(k.find("let mut sm_0_0").expect(&what));
                let n = |s: &str, pat: &str| s.matches(pat).count();
                assert_eq!(n(body, "ops :: scale_byte"), t_sub, "{what}");
                // Q4_K: a block's i16 pair sums, widened once; Q5_K: each
                // half block's (`i16_half_blocks`).
                let widen = if tag == "q4_k" { 1 } else { 2 };
                assert_eq!(n(body, "ops :: scaled_sum"), widen * rows * t_sub, "{what}");
                assert_eq!(n(body, "ops :: pair_acc"), 8 * rows * t_sub, "{what}");
                assert!(!body.contains("dot2"), "{what}");
                for no in [
                    "cvti",
                    "fmaf",
                    "splati",
                    "block_sum",
                    "scales",
                    "sum_pair",
                    "min_pair",
                    "sub_mins",
                    "sub_scale",
                ] {
                    assert!(!body.contains(no), "{what}: {no}");
                }
                assert_eq!(n(close, "ops :: min_pair"), 4 * t_sub, "{what}");
                assert_eq!(n(close, "ops :: scaled_sum"), 4 * rows * t_sub, "{what}");
                let tw = t_u * AVX2.lanes;
                for j in 0..4 {
                    for r in 0..rows {
                        let at = format!("xcg . add ({r} * ldb + {})", 2 * j);
                        assert!(close.contains(&at), "{what}: {at}");
                    }
                    for t in 0..t_sub {
                        let at = format!(
                            "ops :: min_pair (sg . add ({}) , sg . add ({}))",
                            (2 + 2 * j) * tw + t * AVX2.lanes,
                            (3 + 2 * j) * tw + t * AVX2.lanes
                        );
                        assert!(close.contains(&at), "{what}: {at}");
                    }
                }
                // d and -dmin of each column group, and nothing scaled per block.
                assert_eq!(n(close, "ops :: scales"), 2 * t_sub, "{what}");
                assert_eq!(n(close, "ops :: cvti"), 2 * rows * t_sub, "{what}");
            }
        }
        // Not on the i32-dot ISAs (no i16 pair sums to widen by a scale).
        for isa in [&AVX512VNNI, &AVXVNNI, &DOTPROD] {
            let spec = I8Spec::from_tag(Op::Gemm { m: 32 }, "q4_k").expect("format");
            assert!(!int_scales(&spec, isa), "{}", isa.name);
        }
    }

    /// Q6_K on AVX2 keeps its i8 scales: per part (16 values) one signed
    /// scale shuffle per column group, every chunk pair's dots scaled by it
    /// into `sa` (`dot2_sc`, no per-part accumulator or f16 fold), and one
    /// madd per row of `-32` times the scale pair against the half sums
    /// brought down from `32 sum` (`sum_pair::<5>`) into `sa` too.
    /// Its template items stay out of Q2_K's kernels and back.
    #[test]
    fn q6_k_on_avx2_keeps_signed_sub_scales() {
        let tiles = [
            (Op::Gemv, 2, 2, 1),
            (Op::Gemm { m: 32 }, 2, 2, 2),
            (Op::Gemm { m: 32 }, 3, 1, 3),
        ];
        avx2_int_scale_kernels("q6_k", "sub_scale_s", &tiles, |k, _, t_sub, rows| {
            let n = |pat: &str| k.matches(pat).count();
            assert_eq!(n("ops :: dot2_sc"), 4 * rows * t_sub);
            assert_eq!(n("ops :: sub_offset_s :: < 5 >"), t_sub);
            assert_eq!(n("ops :: sum_pair :: < 5 >"), rows);
            assert_eq!(n("ops :: scaled_sum (sa_"), rows * t_sub);
            for no in ["dot2_u", "subi", "i_0_0", "sm_0_0"] {
                assert!(!k.contains(no), "{no}");
            }
            // Only `d`, of block 0, at the close.
            assert_eq!(n("ops :: scales"), t_sub);
        });
        // What a 2x2 GEMM micro kernel's module keeps of the template.
        let items = |tag: &str| -> Vec<String> {
            let spec = I8Spec::from_tag(Op::Gemm { m: 32 }, tag).expect("format");
            let micro = micro_kernel(&on_tile(&AVX2, spec, 2, 2, 2), &AVX2, 2);
            let all = crate::family::int8::emit::ops_items(&spec, &AVX2).expect("items");
            crate::emit::keep_used(all, &[&micro])
                .iter()
                .filter_map(|it| match it {
                    syn::Item::Fn(f) => Some(f.sig.ident.to_string()),
                    syn::Item::Const(c) => Some(c.ident.to_string()),
                    _ => None,
                })
                .collect()
        };
        let (q6, q2, q4) = (items("q6_k"), items("q2_k"), items("q4_0"));
        let (q4k, q5k) = (items("q4_k"), items("q5_k"));
        let has = |v: &[String], name: &str| v.iter().any(|n| n == name);
        for name in [
            "dot2_sc",
            "sub_scale_s",
            "SUB_CTL_S",
            "sub_offset_s",
            "sum_pair",
        ] {
            assert!(has(&q6, name), "q6_k {name}");
            assert!(!has(&q4, name), "q4_0 {name}");
        }
        for name in ["sub_scale", "SUB_CTL", "sub_mins"] {
            assert!(has(&q2, name) && !has(&q6, name), "{name}");
        }
        assert!(!has(&q2, "dot2_sc"));
        // The 6-bit scale-and-min form's own.
        for name in ["scale_byte", "min_pair", "sum_pair", "SUB_CTL"] {
            assert!(has(&q4k, name) && has(&q5k, name), "{name}");
        }
        for name in ["scale_byte", "min_pair"] {
            assert!(!has(&q2, name) && !has(&q6, name), "{name}");
        }
        for name in ["sub_scale", "sub_mins", "sub_scale_s"] {
            assert!(!has(&q4k, name) && !has(&q5k, name), "{name}");
        }
        assert!(!has(&q5k, "dot2_sc") && !has(&q4k, "dot2_sc"));
    }

    /// Q3_K on AVX2 keeps its 6-bit scales, read out as i8 (`Packed6`): per
    /// part (16 values) one signed scale shuffle per column group and per
    /// row one `scaled_sum` of the part's pair sums of nibble levels, then
    /// one madd per row of `-4` times the scale pair against the half sums
    /// brought down from `4 sum` (`sum_pair::<2>`); only `d` converted, at
    /// the close. Elsewhere its scales stay f16.
    #[test]
    fn q3_k_on_avx2_keeps_signed_sub_scales() {
        let tiles = [
            (Op::Gemv, 2, 2, 1),
            (Op::Gemm { m: 32 }, 2, 1, 4),
            (Op::Gemm { m: 32 }, 2, 2, 2),
        ];
        avx2_int_scale_kernels("q3_k", "sub_scale_s", &tiles, |k, _, t_sub, rows| {
            let n = |pat: &str| k.matches(pat).count();
            assert_eq!(n("ops :: sub_offset_s :: < 2 >"), t_sub);
            assert_eq!(n("ops :: sum_pair :: < 2 >"), rows);
            assert_eq!(n("ops :: scaled_sum (sa_"), 3 * rows * t_sub);
            for no in ["dot2_sc", "subi", "sm_0_0", "fmaf (ops :: cvti (i_"] {
                assert!(!k.contains(no), "{no}");
            }
            assert_eq!(n("ops :: scales"), t_sub);
        });
        for isa in [&AVX512VNNI, &AVXVNNI, &DOTPROD, &PORTABLE] {
            let spec = I8Spec::from_tag(Op::Gemm { m: 32 }, "q3_k").expect("format");
            assert!(!int_scales(&spec, isa), "{}", isa.name);
        }
    }

    /// Offset formats on the i32-accumulating lane ISAs start each block
    /// accumulator at the row's negated offset sum: per row and part one
    /// `subi` of the broadcast sum from zero, which every column group's
    /// accumulator takes, and no subtraction at the fold. Not on AVX2
    /// (i16 pair sums), not for formats with mins, group sums (TQ) or
    /// integer sub-scales, not on the pair layouts.
    #[test]
    fn offset_terms_start_the_accumulators() {
        let mut kernels = 0;
        for isa in [&AVX512VNNI, &AVXVNNI, &DOTPROD, &PORTABLE] {
            for (tag, parts) in [("q5_0", 1), ("q3_k", 2), ("q6_k", 2), ("q8_0", 1)] {
                let spec = I8Spec::from_tag(Op::Gemm { m: 32 }, tag).expect("format");
                if !isa.removes_offset(&spec) {
                    assert!(!offset_in_init(&spec, isa), "{} {tag}", isa.name);
                    continue;
                }
                assert!(offset_in_init(&spec, isa), "{} {tag}", isa.name);
                kernels += 1;
                let (rows, t_sub) = (3, 2);
                let k = emitted(isa, tag, t_sub, rows);
                let n = |pat: &str| k.matches(pat).count();
                let what = format!("{} {tag}", isa.name);
                assert_eq!(
                    n("ops :: subi (ops :: zero_i () , ops :: splati (xc"),
                    rows * parts,
                    "{what}"
                );
                assert_eq!(n("ops :: subi"), rows * parts, "{what}");
                for r in 0..rows {
                    for t in 0..t_sub {
                        let init = format!("let mut i_{r}_{t} = nc_{r}");
                        assert_eq!(n(&init), parts, "{what} {init}");
                    }
                }
            }
        }
        // Q5_0's, Q3_K's (3-bit, never signed nibbles) and Q6_K's unsigned
        // levels on all four, Q8_0's `level + 128` on the two u8-dot ISAs.
        assert_eq!(kernels, 14);
        for tag in [
            "q5_0", "q3_k", "q6_k", "q8_0", "q4_1", "q4_k", "tq2_0", "iq4_nl",
        ] {
            let spec = I8Spec::from_tag(Op::Gemm { m: 32 }, tag).expect("format");
            assert!(!offset_in_init(&spec, &AVX2), "avx2 {tag}");
        }
        for tag in ["q4_1", "q5_1", "q4_k", "tq2_0", "tq1_0"] {
            let spec = I8Spec::from_tag(Op::Gemm { m: 32 }, tag).expect("format");
            assert!(!offset_in_init(&spec, &AVX512VNNI), "avx512vnni {tag}");
        }
    }

    /// GEMV on plain nibbles over vpdpbusd: high nibbles masked in place
    /// into accumulators of their own (fenced with the low ones), joined
    /// once per block to the low ones, which started at the offset term;
    /// GEMM, AVX2 and codebook
    /// nibbles keep the shift and one accumulator. The AVX-VNNI kernels get
    /// no other check, where no CPU runs them.
    #[test]
    fn gemv_masks_high_nibbles_in_place_on_the_u8_dot_isas() {
        for isa in [&AVX512VNNI, &AVXVNNI] {
            // Q3_K: unsigned nibbles with an offset and a scale per 16
            // values, so a join and an offset per half.
            for (tag, offset, halves) in [
                ("q4_0", true, 1),
                ("q4_1", false, 1),
                ("q4_k", false, 1),
                ("q3_k", true, 2),
            ] {
                let k = emitted_op(isa, tag, 3, 1, Op::Gemv);
                // Q3_K's 3-bit layout masks its own bits 4..7.
                let hi16 = if tag == "q3_k" {
                    "ops :: hi3_16"
                } else {
                    "ops :: nib_hi16"
                };
                assert_eq!(k.matches(hi16).count(), 4 * 3, "{} {tag}", isa.name);
                assert!(!k.contains("ops :: nib_hi ("), "{} {tag}", isa.name);
                for t in 0..3 {
                    let acc = format!("j_0_{t} = ops :: pair_acc (j_0_{t} , hi_{t}");
                    assert_eq!(k.matches(&acc).count(), 4, "{} {tag} {acc}", isa.name);
                    let join = format!("ops :: join_hi (i_0_{t} , j_0_{t})");
                    assert_eq!(k.matches(&join).count(), halves, "{} {tag}", isa.name);
                }
                // The offset came in with the low accumulator's start.
                assert!(
                    !k.contains("ops :: subi (ops :: join_hi"),
                    "{} {tag}",
                    isa.name
                );
                assert_eq!(
                    k.contains("let mut i_0_2 = nc_0"),
                    offset,
                    "{} {tag}",
                    isa.name
                );
                let gemm = emitted(isa, tag, 2, 2);
                assert!(
                    !gemm.contains("nib_hi16") && !gemm.contains("j_0_0"),
                    "{} {tag}",
                    isa.name
                );
            }
            let iq = emitted_op(isa, "iq4_nl", 2, 1, Op::Gemv);
            assert!(!iq.contains("nib_hi16"), "{} iq4_nl", isa.name);
        }
        let avx2 = emitted_op(&AVX2, "q4_0", 2, 1, Op::Gemv);
        assert!(!avx2.contains("nib_hi16") && avx2.contains("ops :: nib_hi ("));
    }

    /// One fence per chunk (8-bit: 8, 4- and 5-bit: 4; 2-bit: one per bit
    /// pair of its 2 chunks, 8) holding every accumulator of the tile (Q2_K
    /// on AVX-512: the half's own); the pointers only where the ISA says so, but
    /// not in K-quant and TQ GEMVs; none on aarch64, whose dots are `asm!`
    /// blocks already.
    #[test]
    fn fences_hold_every_accumulator_once_per_chunk() {
        for (tag, chunks) in [
            ("q8_0", 8),
            ("q4_0", 4),
            ("iq4_nl", 4),
            ("q5_0", 4),
            ("tq2_0", 8),
            ("q2_k", 8),
        ] {
            let avx2 = emitted(&AVX2, tag, 2, 3);
            assert_eq!(avx2.matches("asm !").count(), chunks, "{tag} avx2");
            for r in 0..3 {
                for t in 0..2 {
                    let acc = format!("inout (ymm_reg) i_{r}_{t}");
                    assert_eq!(avx2.matches(&acc).count(), chunks, "{tag} {acc}");
                }
            }
            assert!(!avx2.contains("inout (reg) w"), "{tag} avx2");
            // Q2_K's packed halves: half 1's chunks fence its own `i1`.
            let (half0, half1) = if tag == "q2_k" {
                (chunks / 2, chunks / 2)
            } else {
                (chunks, 0)
            };
            let avx512 = emitted(&AVX512VNNI, tag, 1, 2);
            assert_eq!(avx512.matches("inout (reg) w").count(), chunks, "{tag}");
            assert_eq!(avx512.matches("inout (zmm_reg) i_1_0").count(), half0);
            assert_eq!(avx512.matches("inout (zmm_reg) i1_1_0").count(), half1);
            // A K-quant or TQ GEMV fences its accumulators only, the other
            // GEMVs the pointers too.
            let gemv = emitted_op(&AVX512VNNI, tag, 2, 1, Op::Gemv);
            assert_eq!(
                gemv.matches("inout (zmm_reg) i_0_1").count(),
                half0,
                "{tag}"
            );
            assert_eq!(gemv.matches("inout (zmm_reg) i1_0_1").count(), half1);
            let grouped = tag.ends_with("_k") || tag.starts_with("tq");
            assert_eq!(
                gemv.matches("inout (reg) w").count(),
                if grouped { 0 } else { chunks },
                "{tag} gemv"
            );
            assert!(!emitted(&DOTPROD, tag, 2, 2).contains("asm !"), "{tag}");
        }
    }
}
