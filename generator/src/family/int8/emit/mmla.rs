//! Micro kernels of the int8 family on pair layouts (8-byte lane groups,
//! paper 000's Q4_0_4_8 / Q4_0_8_8): a 16-byte vector holds 8 bytes of each
//! of two columns.
//!
//! - **GEMV** ([`micro_gemv`]): `sdot` against the activation's 8 bytes
//!   broadcast to both halves leaves two partial sums per column; one
//!   pairwise add per two column pairs turns them into 4 columns just before
//!   the block is scaled, so no horizontal reduction remains.
//! - **GEMM** ([`micro_mmla`]): `smmla` multiplies a row pair (8 values of
//!   each row, interleaved at quantization) by a column pair into a 2x2 tile
//!   `[r0c0, r0c1, r1c0, r1c1]`; the f32 tiles are transposed back to rows
//!   with 64-bit zips only when the micro kernel loads and stores `y`.
//!
//! 5-bit layouts: per block, each 16-byte load of the plane of fifth bits
//! (two column pairs) is split into the pairs' 8-byte-per-column words
//! (`hb_pair::<0>` / `hb_pair::<1>`), from which `hb_lo` / `hb_hi` rebuild
//! each nibble chunk's unsigned levels; sdot / smmla take them as they are
//! and `sub_bias` removes the format's offset per row and block. The
//! plane's column groups are half as wide as the chunks', so the micro
//! kernels read it through a pointer of their own (`wh`).
//!
//! Register names are systematic: `i_{pair}_{t}` / `f_{pair}_{t}` for the
//! integer / float tile of row pair `pair` and column pair `t`, `lo_{t}` /
//! `hi_{t}` the nibble planes of column pair `t`, `e_{t}` its fifth bits.

use crate::family::int8::emit::micro::MicroSpec;
use crate::family::int8::emit::micro::{
    geometry, index_level, micro_fn, min_factors, min_term, nibble_split, six_bit_level,
};
use crate::family::int8::isa::I8Isa;
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

fn lit(v: usize) -> Literal {
    Literal::usize_unsuffixed(v)
}

/// Loads chunk `g` of the micro tile's column pairs (and, for 4-bit, splits
/// the nibble planes as `16 q`, or for codebook formats looks the indices
/// up; for 6-bit, value chunk `g` of the 8-bit layout's four).
fn load_weights(p: &MicroSpec, isa: &I8Isa, g: usize) -> TokenStream {
    let (chunk, _) = geometry(p, isa);
    let mut out = TokenStream::new();
    for t in 0..p.tile.t_sub {
        let (wv, lo, hi) = (
            format_ident!("w_{}", t),
            format_ident!("lo_{}", t),
            format_ident!("hi_{}", t),
        );
        let stored = |s: usize| {
            let off = lit((s * p.tile.t_u + t) * chunk);
            quote! { ops::loadb(w.add(#off)) }
        };
        if p.spec.bits() == 6 {
            let level = six_bit_level(g, value_chunks(p, isa), stored);
            out.extend(quote! { let #wv = #level; });
            continue;
        }
        let load = stored(g);
        out.extend(quote! { let #wv = #load; });
        if p.spec.bits() == 5 {
            let (e, gl) = (format_ident!("e_{}", t), Literal::i32_unsuffixed(g as i32));
            out.extend(quote! {
                let #lo = ops::hb_lo::<#gl>(#wv, #e);
                let #hi = ops::hb_hi::<#gl>(#wv, #e);
            });
        } else if p.spec.codebook() {
            // Codebook indices to signed int8 levels (table lookup).
            out.extend(quote! {
                let #lo = ops::lut(ops::idx_lo(#wv));
                let #hi = ops::lut(ops::idx_hi(#wv));
            });
        } else if p.spec.bits() == 4 {
            out.extend(quote! {
                let #lo = ops::nib_lo(#wv);
                let #hi = ops::nib_hi(#wv);
            });
        }
    }
    out
}

/// 5-bit layouts: the plane of fifth bits (`wh`, 8 bytes per column pair),
/// split per column pair into `e_{t}` once per block.
fn load_fifth_bits(p: &MicroSpec) -> TokenStream {
    let mut out = TokenStream::new();
    if p.spec.bits() != 5 {
        return out;
    }
    for q in 0..p.tile.t_sub / 2 {
        let (h, e0, e1) = (
            format_ident!("hq_{}", q),
            format_ident!("e_{}", 2 * q),
            format_ident!("e_{}", 2 * q + 1),
        );
        let off = lit(16 * q);
        out.extend(quote! {
            let #h = ops::loadb(wh.add(#off));
            let #e0 = ops::hb_pair::<0>(#h);
            let #e1 = ops::hb_pair::<1>(#h);
        });
    }
    out
}

/// Chunks of levels a block's loop runs over: the stored ones, or for 6-bit
/// the 8-bit layout's four that its three stored ones carry.
fn value_chunks(p: &MicroSpec, isa: &I8Isa) -> usize {
    let (_, stored) = geometry(p, isa);
    if p.spec.bits() == 6 {
        stored * 4 / 3
    } else {
        stored
    }
}

/// The GEMV's dots of half `h` on 4-, 5-, 6- and 8-bit pair layouts: per
/// chunk, `sdot` of each column pair's levels against the activation's 8
/// values broadcast to both halves.
fn chunk_gemv(p: &MicroSpec, isa: &I8Isa, h: usize, spb: usize) -> TokenStream {
    let chunks = value_chunks(p, isa);
    let (gb, t_sub) = (isa.group_bytes, p.tile.t_sub);
    let iv = |t: usize| format_ident!("i_0_{}", t);
    let mut body = TokenStream::new();
    for g in h * chunks / spb..(h + 1) * chunks / spb {
        body.extend(load_weights(p, isa, g));
        if !matches!(p.spec.bits(), 6 | 8) {
            // Low nibbles hold values 2 gb g.., high ones 2 gb g + gb.. .
            let (ol, oh) = (lit(2 * gb * g), lit(2 * gb * g + gb));
            body.extend(quote! {
                let xl = ops::bcast8(xq.add(#ol));
                let xh = ops::bcast8(xq.add(#oh));
            });
            for t in 0..t_sub {
                let (i, lo, hi) = (iv(t), format_ident!("lo_{}", t), format_ident!("hi_{}", t));
                body.extend(quote! {
                    #i = ops::sdot(#i, #lo, xl);
                    #i = ops::sdot(#i, #hi, xh);
                });
            }
        } else {
            let o = lit(gb * g);
            body.extend(quote! { let x = ops::bcast8(xq.add(#o)); });
            for t in 0..t_sub {
                let (i, wv) = (iv(t), format_ident!("w_{}", t));
                body.extend(quote! { #i = ops::sdot(#i, #wv, x); });
            }
        }
    }
    body
}

/// The GEMM's tiles of half `h` on 4-, 5-, 6- and 8-bit pair layouts: per
/// chunk and row pair, `smmla` against the pair's interleaved activations.
fn chunk_mmla(p: &MicroSpec, isa: &I8Isa, h: usize, spb: usize, pairs: usize) -> TokenStream {
    let chunks = value_chunks(p, isa);
    let t_sub = p.tile.t_sub;
    let iv = |q: usize, t: usize| format_ident!("i_{}_{}", q, t);
    let mut body = TokenStream::new();
    for g in h * chunks / spb..(h + 1) * chunks / spb {
        body.extend(load_weights(p, isa, g));
        for q in 0..pairs {
            let row = lit(q);
            if !matches!(p.spec.bits(), 6 | 8) {
                // 16 activation bytes per 8 values of the pair: values
                // 16g.. (low nibbles) and 16g + 8.. (high).
                let (ol, oh) = (lit(32 * g), lit(32 * g + 16));
                body.extend(quote! {
                    let xl = ops::loadx(xq.add(#row * ldx + #ol));
                    let xh = ops::loadx(xq.add(#row * ldx + #oh));
                });
                for t in 0..t_sub {
                    let (i, lo, hi) = (
                        iv(q, t),
                        format_ident!("lo_{}", t),
                        format_ident!("hi_{}", t),
                    );
                    body.extend(quote! {
                        #i = ops::mmla(#i, xl, #lo);
                        #i = ops::mmla(#i, xh, #hi);
                    });
                }
            } else {
                let o = lit(16 * g);
                body.extend(quote! { let x = ops::loadx(xq.add(#row * ldx + #o)); });
                for t in 0..t_sub {
                    let (i, wv) = (iv(q, t), format_ident!("w_{}", t));
                    body.extend(quote! { #i = ops::mmla(#i, x, #wv); });
                }
            }
        }
    }
    body
}

/// Bit pairs of the 2-bit layout that half `h` of `spb` covers: the one
/// 8-byte group per column holds values `8c..8c + 8` in bit pair `c`, so a
/// half block (a scale per 16 values) is two of them; the weights are
/// loaded with the first.
fn two_bit_pairs(p: &MicroSpec, isa: &I8Isa, h: usize, spb: usize) -> (TokenStream, Vec<usize>) {
    let load = if h == 0 {
        load_weights(p, isa, 0)
    } else {
        TokenStream::new()
    };
    (load, (h * 4 / spb..(h + 1) * 4 / spb).collect())
}

/// The unsigned levels of bit pair `c` of every column pair (`q_{t}`);
/// grid formats split the bytes into nibbles first, before bit pair 0.
fn crumbs(p: &MicroSpec, c: usize) -> TokenStream {
    let mut out = TokenStream::new();
    for t in 0..p.tile.t_sub {
        if p.spec.grid() && c == 0 {
            out.extend(nibble_split(t));
        }
        out.extend(index_level(p, t, c));
    }
    out
}

/// The 2-bit GEMV's dots of half `h`: per bit pair, `sdot` against the
/// activation's 8 values broadcast to both halves.
fn two_bit_gemv(p: &MicroSpec, isa: &I8Isa, h: usize, spb: usize) -> TokenStream {
    let (mut out, pairs) = two_bit_pairs(p, isa, h, spb);
    for c in pairs {
        out.extend(crumbs(p, c));
        let o = lit(8 * c);
        out.extend(quote! { let x = ops::bcast8(xq.add(#o)); });
        for t in 0..p.tile.t_sub {
            let (i, q) = (format_ident!("i_0_{}", t), format_ident!("q_{}", t));
            out.extend(quote! { #i = ops::sdot(#i, #q, x); });
        }
    }
    out
}

/// The 2-bit GEMM's tiles of half `h`: per bit pair and row pair, `smmla`
/// against the pair's 16 interleaved activation bytes of those 8 values.
fn two_bit_mmla(p: &MicroSpec, isa: &I8Isa, h: usize, spb: usize, row_pairs: usize) -> TokenStream {
    let (mut out, pairs) = two_bit_pairs(p, isa, h, spb);
    for c in pairs {
        out.extend(crumbs(p, c));
        for q in 0..row_pairs {
            let (row, o) = (lit(q), lit(16 * c));
            out.extend(quote! { let x = ops::loadx(xq.add(#row * ldx + #o)); });
            for t in 0..p.tile.t_sub {
                let (i, w) = (format_ident!("i_{}_{}", q, t), format_ident!("q_{}", t));
                out.extend(quote! { #i = ops::mmla(#i, x, #w); });
            }
        }
    }
    out
}

/// One activation row against `t_sub` column pairs with `sdot`.
pub(crate) fn micro_gemv(p: &MicroSpec, isa: &I8Isa) -> TokenStream {
    let t_sub = p.tile.t_sub;
    debug_assert!(
        t_sub.is_multiple_of(2),
        "pair GEMV folds two column pairs at once"
    );
    let fv = |v: usize| format_ident!("f_0_{}", v);
    let iv = |t: usize| format_ident!("i_0_{}", t);
    let (mut init, mut store, mut body) =
        (TokenStream::new(), TokenStream::new(), TokenStream::new());
    for v in 0..t_sub / 2 {
        let (f, off) = (fv(v), lit(4 * v));
        init.extend(quote! { let mut #f = ops::loadf(y.add(#off)); });
        store.extend(quote! { ops::storef(y.add(#off), #f); });
    }
    let mut zero = TokenStream::new();
    for t in 0..t_sub {
        let i = iv(t);
        zero.extend(quote! { let mut #i = ops::zero_i(); });
    }
    // Formats with a scale per 16 values fold each half of a block.
    let spb = p.spec.scales_per_block();
    for h in 0..spb {
        body.extend(zero.clone());
        if h == 0 {
            body.extend(load_fifth_bits(p));
        }
        body.extend(if p.spec.bits() == 2 {
            two_bit_gemv(p, isa, h, spb)
        } else {
            chunk_gemv(p, isa, h, spb)
        });
        body.extend(quote! { let dx = ops::splatf(xd); });
        let (mins, signed) = (p.spec.mins(), isa.signed_levels(&p.spec));
        let (sx, sb) = (format_ident!("sx"), format_ident!("sb"));
        // This half's level sum where a block has two (per-16 scales), for
        // the min term and the offset alike.
        let c = if p.spec.sums_per_block() == 1 {
            quote! { xc }
        } else {
            let h = lit(h);
            quote! { xc.add(#h) }
        };
        if mins {
            body.extend(min_factors(
                signed,
                Some(&format_ident!("dx")),
                &quote! { ops::splat_pair(#c, #c) },
                &sx,
                &sb,
            ));
        }
        let tw = p.tile.t_u * p.lanes;
        for v in 0..t_sub / 2 {
            let (f, a, b) = (fv(v), iv(2 * v), iv(2 * v + 1));
            let (s, off) = (format_ident!("s_{}", v), lit(h * tw + 4 * v));
            let (mn, moff) = (format_ident!("mn_{}", v), lit((spb + h) * tw + 4 * v));
            let sum = if isa.removes_offset(&p.spec) {
                quote! { ops::sub_bias(ops::pair_sum(#a, #b), #c, #c) }
            } else {
                quote! { ops::pair_sum(#a, #b) }
            };
            body.extend(quote! {
                let #s = ops::scales(sc.add(#off));
                #f = ops::fmaf(ops::cvti(#sum), ops::mulf(#s, dx), #f);
            });
            if mins {
                body.extend(quote! { let #mn = ops::scales(sc.add(#moff)); });
                body.extend(min_term(signed, &f, &mn, &s, &sx, &sb));
            }
        }
    }
    micro_fn(p, isa, 1, init, body, store, (32, 1), None)
}

/// `rows` activation rows (in pairs) against `t_sub` column pairs with `smmla`.
pub(crate) fn micro_mmla(p: &MicroSpec, isa: &I8Isa, rows: usize) -> TokenStream {
    let t_sub = p.tile.t_sub;
    debug_assert!(
        t_sub.is_multiple_of(2),
        "rows are stored 4 columns at a time"
    );
    let pairs = rows.div_ceil(2);
    let fv = |q: usize, t: usize| format_ident!("f_{}_{}", q, t);
    let iv = |q: usize, t: usize| format_ident!("i_{}_{}", q, t);
    let (mut init, mut store, mut body, mut zero) = (
        TokenStream::new(),
        TokenStream::new(),
        TokenStream::new(),
        TokenStream::new(),
    );
    for q in 0..pairs {
        // The odd row of a last, half pair is not in y: it reads as zeros
        // (its activations are zero too) and is never stored.
        let full = 2 * q + 1 < rows;
        let (r0, r1) = (lit(2 * q), lit(2 * q + 1));
        for v in 0..t_sub / 2 {
            let (fa, fb, off) = (fv(q, 2 * v), fv(q, 2 * v + 1), lit(4 * v));
            let odd = if full {
                quote! { ops::loadf(y.add(#r1 * ldy + #off)) }
            } else {
                quote! { ops::zero_f() }
            };
            init.extend(quote! {
                let a = ops::loadf(y.add(#r0 * ldy + #off));
                let b = #odd;
                let mut #fa = ops::zip_lo(a, b);
                let mut #fb = ops::zip_hi(a, b);
            });
            store.extend(quote! { ops::storef(y.add(#r0 * ldy + #off), ops::zip_lo(#fa, #fb)); });
            if full {
                store.extend(
                    quote! { ops::storef(y.add(#r1 * ldy + #off), ops::zip_hi(#fa, #fb)); },
                );
            }
        }
        for t in 0..t_sub {
            let i = iv(q, t);
            zero.extend(quote! { let mut #i = ops::zero_i(); });
        }
    }
    // Formats with a scale per 16 values fold each half of a block.
    let spb = p.spec.scales_per_block();
    let tw = p.tile.t_u * p.lanes;
    for h in 0..spb {
        body.extend(zero.clone());
        if h == 0 {
            body.extend(load_fifth_bits(p));
        }
        body.extend(if p.spec.bits() == 2 {
            two_bit_mmla(p, isa, h, spb, pairs)
        } else {
            chunk_mmla(p, isa, h, spb, pairs)
        });
        let (mins, signed) = (p.spec.mins(), isa.signed_levels(&p.spec));
        for t in 0..t_sub {
            let (s, off) = (format_ident!("s_{}", t), lit(h * tw + 2 * t));
            body.extend(quote! { let #s = ops::scales_pair(sc.add(#off)); });
            if mins {
                let (mn, moff) = (format_ident!("mn_{}", t), lit((spb + h) * tw + 2 * t));
                body.extend(quote! { let #mn = ops::scales_pair(sc.add(#moff)); });
            }
        }
        for q in 0..pairs {
            let (dx, row) = (format_ident!("dx_{}", q), lit(q));
            body.extend(quote! { let #dx = ops::loadf(xd.add(#row * ldb)); });
            // The level sums of rows 2q and 2q + 1 (xc holds one row of
            // blocks per activation row, ldb / 4 apart; with per-16 scales,
            // this half's of the block's n): the odd row of a half pair is
            // never stored, so it reuses the even row's.
            let (r0, r1) = (
                lit(2 * q),
                lit(if 2 * q + 1 < rows { 2 * q + 1 } else { 2 * q }),
            );
            let (c0, c1) = match p.spec.sums_per_block() {
                1 => (
                    quote! { xc.add(#r0 * (ldb / 4)) },
                    quote! { xc.add(#r1 * (ldb / 4)) },
                ),
                n => {
                    let (n, h) = (lit(n), lit(h));
                    (
                        quote! { xc.add(#r0 * (ldb / 4) * #n + #h) },
                        quote! { xc.add(#r1 * (ldb / 4) * #n + #h) },
                    )
                }
            };
            // The offset correction of the row pair.
            let bias = isa.removes_offset(&p.spec).then(|| quote! { #c0, #c1 });
            // With mins: the sums as [c0, c0, c1, c1], the order of the 2x2
            // tile's rows.
            let (sx, sb) = (format_ident!("sx_{}", q), format_ident!("sb_{}", q));
            if mins {
                let c = quote! { ops::splat_pair(#c0, #c1) };
                body.extend(min_factors(signed, Some(&dx), &c, &sx, &sb));
            }
            for t in 0..t_sub {
                let (f, i, s) = (fv(q, t), iv(q, t), format_ident!("s_{}", t));
                let sum = match &bias {
                    Some(c) => quote! { ops::sub_bias(#i, #c) },
                    None => quote! { #i },
                };
                body.extend(quote! { #f = ops::fmaf(ops::cvti(#sum), ops::mulf(#s, #dx), #f); });
                if mins {
                    let mn = format_ident!("mn_{}", t);
                    body.extend(min_term(signed, &f, &mn, &s, &sx, &sb));
                }
            }
        }
    }
    micro_fn(p, isa, rows, init, body, store, (64, 4), None)
}
