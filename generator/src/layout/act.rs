//! Activations of the int8 family: quantized per 32-value block on every
//! call (Q8_0 arithmetic), in the order a kernel reads them, and the exact
//! oracle the int8 kernels are checked against.

use crate::format::ggml::{GgmlMatrix, GgmlType, QK};
use crate::layout::align::round_up;
use crate::layout::int8::{block_levels, stored_scale};

/// Activations quantized per 32-block (Q8_0 arithmetic): `m x k_pad` int8
/// levels, `m x blocks` scales, and `m x blocks x sums` corrections
/// `bias * sum(q)` (the format's level offset: 8 for Q4_0; 128 for signed
/// 8-bit and IQ4_NL codebook weights, which the u8-dot ISAs read as
/// `level + 128`; 1 for formats with mins; per half block where the format
/// scales each 16 values).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuantizedActivations {
    pub q: Vec<i8>,
    pub d: Vec<f32>,
    pub c: Vec<i32>,
}

/// How a kernel reads its activations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ActFormat {
    /// The weights' level offset (the format table's [`Levels::Offset`]:
    /// 8 for Q4_0's unsigned nibbles; a grid's `-min(grid)`; 128 for signed
    /// and codebook levels, which only the u8-dot ISAs offset); the kernels
    /// that read offset levels remove `bias * sum(q)` per block.
    ///
    /// [`Levels::Offset`]: crate::format::row::Levels::Offset
    pub bias: i32,
    /// Rows interleaved in pairs for 2x2 matrix-multiply instructions: per
    /// pair, block and 8 values, 8 bytes of the even row then 8 of the odd
    /// one; scales as `[d0, d0, d1, d1]` per pair and block. An odd last
    /// row is paired with zeros.
    pub row_pairs: bool,
    /// Factor on the stored scales (1/16 for signed-nibble weights).
    pub scale: f32,
    /// Sums per block in `c`: 1, or 2 (of values 0..16 and 16..32) for
    /// weights with a scale per 16 values (Q2_K, Q3_K, Q6_K).
    pub sums: usize,
    /// Blocks that share one scale (the format table's
    /// [`Int8Repack::act_group`]: 8 for the K-quants and TQ1_0 / TQ2_0, Q8_K's scale per 256
    /// values; 1 for Q8_0's per 32). Every block still stores its scale in
    /// `d`, so a kernel that reads one per block gets the same result; the
    /// groups start at block 0 of each row, the last one may be shorter.
    ///
    /// [`Int8Repack::act_group`]: crate::format::row::Int8Repack::act_group
    pub group: usize,
}

impl ActFormat {
    /// Rows of levels stored for `m` activation rows: `m`, or with row
    /// pairs `m` rounded up to even (an odd last row is paired with zeros).
    pub fn stored_rows(&self, m: usize) -> usize {
        if self.row_pairs {
            m.next_multiple_of(2)
        } else {
            m
        }
    }

    /// Plain row order and scales for weights of `format`.
    pub fn plain(format: GgmlType) -> ActFormat {
        ActFormat {
            bias: act_bias(format),
            row_pairs: false,
            scale: 1.0,
            sums: format.format().int8.map_or(1, |r| r.sums_per_block()),
            group: format.format().int8.map_or(1, |r| r.act_group),
        }
    }

    /// The bias the kernels remove per block.
    pub fn bias(&self) -> i32 {
        self.bias
    }
}

/// The factor on a block's level sum in the activations' `c` for weights of
/// `format`: the level offset the kernels remove (8 for Q4_0), or 1 for
/// formats with mins, whose kernels take the sum itself to add
/// `m * d_x * sum(q)` per block. Signed and codebook levels get
/// [`SIGNED_BIAS`]: ISAs whose byte dot is unsigned x signed into i32
/// (vpdpbusd) read them as `level + 128` (flipping the sign bit, or from a
/// shifted table) and remove it here; ISAs with a signed dot ignore `c`.
pub fn act_bias(format: GgmlType) -> i32 {
    let f = format.format();
    if f.int8.is_some_and(|r| r.mins) {
        assert_eq!(f.offset(), 0, "{}: mins and an offset", f.name);
        1
    } else if f.signed_levels() {
        SIGNED_BIAS
    } else {
        f.offset()
    }
}

/// The offset u8-dot kernels add to signed and codebook levels.
pub const SIGNED_BIAS: i32 = 128;

/// Quantizes `m` rows of `x` (`m x k`) for a kernel on `format` weights,
/// with each row padded to `k_pad`.
pub fn quantize_activations(
    x: &[f32],
    m: usize,
    k: usize,
    k_pad: usize,
    format: GgmlType,
) -> QuantizedActivations {
    quantize_activations_as(x, m, k, k_pad, ActFormat::plain(format))
}

/// [`quantize_activations`] into the order and scaling `fmt` describes, so
/// the reorder costs no extra pass.
pub fn quantize_activations_as(
    x: &[f32],
    m: usize,
    k: usize,
    k_pad: usize,
    fmt: ActFormat,
) -> QuantizedActivations {
    let mut out = QuantizedActivations::default();
    quantize_into(x, m, k, k_pad, fmt, &mut out);
    out
}

/// [`quantize_activations_as`] into `out`, reusing its buffers.
pub fn quantize_into(
    x: &[f32],
    m: usize,
    k: usize,
    k_pad: usize,
    fmt: ActFormat,
    out: &mut QuantizedActivations,
) {
    quantize_with(x, m, k, k_pad, fmt, out, block_amax, quantize_levels)
}

/// The layout half of [`quantize_into`], with the arithmetic of one block
/// passed in: a runtime compiles it again around a vector `amax` and
/// `levels` for its ISA (`#[inline(always)]`, so they inline into that
/// `#[target_feature]` function). They must give exactly [`block_amax`]'s
/// and [`quantize_levels`]'s results.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn quantize_with(
    x: &[f32],
    m: usize,
    k: usize,
    k_pad: usize,
    fmt: ActFormat,
    out: &mut QuantizedActivations,
    amax: impl Fn(&[f32; QK]) -> f32,
    levels: impl Fn(&[f32; QK], f32) -> ([i8; QK], i32),
) {
    assert!(x.len() >= m * k && k <= k_pad && k_pad.is_multiple_of(QK));
    let blocks = k_pad / QK;
    let rows = fmt.stored_rows(m);
    let d_per_row = if fmt.row_pairs { 2 } else { 1 };
    let sums = fmt.sums;
    // Every value of rows 0..m is written below, so the buffers are resized
    // without clearing them (the runtime quantizes into fresh ones today; a
    // caller that reuses them pays no clearing); only the zero row an odd
    // last row is paired with is zeroed.
    out.q.resize(rows * k_pad, 0);
    out.d.resize(rows * blocks * d_per_row, 0.0);
    out.c.resize(m * blocks * sums, 0);
    if rows > m {
        out.q[(rows - 2) * k_pad..].fill(0);
        out.d[(rows - 2) * blocks * d_per_row..].fill(0.0);
    }
    let group = fmt.group.max(1);
    assert!(
        group <= MAX_GROUP,
        "activation scale groups of {group} blocks"
    );
    // Blocks inside K are read where they are; a block reaching past K (the
    // padding to k_pad) is copied into `tail` with zeros after K.
    let zero = [0f32; QK];
    let mut tail = [0f32; QK];
    // Per group of a row: its largest magnitude (NaN where a value is not
    // finite), then all its scales and inverses in one pass, so the
    // divisions run as vectors and the levels never wait on them (per
    // block, Q8_0's scales paid a division chain every 32 values).
    let groups = blocks.div_ceil(group);
    let mut amaxes: Vec<f32> = vec![0.0; groups];
    let mut scales: Vec<(f32, f32)> = vec![(0.0, 0.0); groups];
    for r in 0..m {
        let row = &x[r * k..(r + 1) * k];
        let (pair, odd) = (r / 2, r % 2);
        if !k.is_multiple_of(QK) {
            let lo = k / QK * QK;
            tail = zero;
            tail[..k - lo].copy_from_slice(&row[lo..]);
        }
        let block = |b: usize| -> &[f32; QK] {
            let lo = b * QK;
            match row.get(lo..lo + QK) {
                Some(s) => s.try_into().expect("a slice of QK values"),
                None if lo < k => &tail,
                None => &zero,
            }
        };
        // One scale per group: from the largest magnitude of its blocks, or
        // what a non-finite value makes it. No `fold`/`all` closures around
        // `amax`: those were left as calls outside the runtime's
        // `#[target_feature]` function, and `amax` with them.
        for (gi, a) in amaxes.iter_mut().enumerate() {
            let mut finite = true;
            let mut mx = 0f32;
            for b in gi * group..blocks.min((gi + 1) * group) {
                finite &= all_finite(block(b));
                mx = mx.max(amax(block(b)));
            }
            *a = if finite { mx } else { f32::NAN };
        }
        for (s, &a) in scales.iter_mut().zip(&amaxes) {
            *s = block_scale(a);
        }
        for (gi, (&a, &(mut d, id))) in amaxes.iter().zip(&scales).enumerate() {
            let g = gi * group..blocks.min((gi + 1) * group);
            let finite = !a.is_nan();
            if !finite {
                let copies: Vec<[f32; QK]> = g.clone().map(|b| *block(b)).collect();
                d = non_finite_scale(&copies);
            }
            for b in g {
                let buf = block(b);
                let (q, sum) = if finite {
                    levels(buf, id)
                } else {
                    non_finite_levels(buf, d)
                };
                store_block(
                    out,
                    &fmt,
                    (r, pair, odd),
                    (b, blocks, b * QK),
                    k_pad,
                    (d, &q, sum),
                );
            }
        }
    }
}

/// The most blocks that share an activation scale (Q8_K's 256 values).
pub const MAX_GROUP: usize = 8;

/// One quantized block `b` of row `r` into `out`, in the order `fmt` says.
#[inline(always)]
fn store_block(
    out: &mut QuantizedActivations,
    fmt: &ActFormat,
    (r, pair, odd): (usize, usize, usize),
    (b, blocks, lo): (usize, usize, usize),
    k_pad: usize,
    (d, q, sum): (f32, &[i8; QK], i32),
) {
    let (bias, sums) = (fmt.bias(), fmt.sums);
    if fmt.row_pairs {
        // Per 8 values: 8 bytes of the even row, then 8 of the odd one.
        let base = pair * 2 * k_pad + b * 2 * QK + odd * 8;
        for (c, chunk) in q.chunks_exact(8).enumerate() {
            out.q[base + c * 16..base + c * 16 + 8].copy_from_slice(chunk);
        }
        let at = (pair * blocks + b) * 4 + 2 * odd;
        out.d[at..at + 2].fill(d * fmt.scale);
    } else {
        out.q[r * k_pad + lo..r * k_pad + lo + QK].copy_from_slice(q);
        out.d[r * blocks + b] = d * fmt.scale;
    }
    if sums == 1 {
        out.c[r * blocks + b] = bias * sum;
    } else {
        let at = (r * blocks + b) * sums;
        for (c, part) in out.c[at..at + sums]
            .iter_mut()
            .zip(q.chunks_exact(QK / sums))
        {
            *c = bias * part.iter().map(|&v| i32::from(v)).sum::<i32>();
        }
    }
}

/// Whether no value of the block is infinite or NaN (exponent bits all
/// ones): an integer fold without early exit, so it vectorises.
#[inline(always)]
fn all_finite(buf: &[f32; QK]) -> bool {
    let special = |v: &f32| u32::from(v.to_bits() & 0x7f80_0000 == 0x7f80_0000);
    buf.iter().fold(0, |a, v| a | special(v)) == 0
}

/// A scale group holding an infinity or a NaN, which int8 levels cannot
/// carry, so the scale does and the output comes out as f32 math would make
/// it: a NaN (or `+inf` beside `-inf`) makes the scale NaN, so every output
/// of the row is NaN; infinities of one sign get a scale of `+inf` (and
/// level +-127, [`non_finite_levels`]), the group's finite values 0, so an
/// output is `+-inf` where the weight at an infinity is non-zero and NaN
/// where it is zero (`inf * 0`). Unlike f32 math, two infinities whose
/// products have opposite signs give `+-inf` rather than NaN when the
/// weights differ in size.
pub fn non_finite_scale(bufs: &[[f32; QK]]) -> f32 {
    let has = |x: f32| bufs.iter().any(|b| b.contains(&x));
    let nan = bufs.iter().any(|b| b.iter().any(|v| v.is_nan()));
    if nan || (has(f32::INFINITY) && has(f32::NEG_INFINITY)) {
        f32::NAN
    } else {
        f32::INFINITY
    }
}

/// One block's levels and their sum under a non-finite group scale `d`: 0
/// under a NaN; under `+inf`, +-127 at the infinities and 0 elsewhere.
pub fn non_finite_levels(buf: &[f32; QK], d: f32) -> ([i8; QK], i32) {
    if d.is_nan() {
        return ([0; QK], 0);
    }
    let q = buf.map(|v| match v {
        f32::INFINITY => 127,
        f32::NEG_INFINITY => -127,
        _ => 0,
    });
    (q, q.iter().map(|&v| i32::from(v)).sum())
}

/// A single block (a group of one) holding an infinity or a NaN: see
/// [`non_finite_scale`].
pub fn non_finite_block(buf: &[f32; QK]) -> (f32, [i8; QK], i32) {
    let d = non_finite_scale(std::slice::from_ref(buf));
    let (q, sum) = non_finite_levels(buf, d);
    (d, q, sum)
}

/// The largest magnitude of a block of finite values.
#[inline(always)]
pub fn block_amax(buf: &[f32; QK]) -> f32 {
    buf.iter().fold(0f32, |a, v| a.max(v.abs()))
}

/// A block's levels under the inverse scale `id`: `round(v id)` (half away
/// from zero) clamped to +-127, and their sum.
#[inline(always)]
pub fn quantize_levels(buf: &[f32; QK], id: f32) -> ([i8; QK], i32) {
    let mut q = [0i8; QK];
    for (o, v) in q.iter_mut().zip(buf) {
        *o = (v * id).round().clamp(-127.0, 127.0) as i8;
    }
    (q, q.iter().map(|&v| v as i32).sum())
}

/// One 32-block of finite values, Q8_0 arithmetic: scale `d = amax / 127`,
/// levels `round(v / d)` (half away from zero) clamped to +-127, and their
/// sum ([`quantize_with`] sends groups with an infinity or NaN to
/// [`non_finite_scale`] and [`non_finite_levels`] instead).
pub fn quantize_block(buf: &[f32; QK]) -> (f32, [i8; QK], i32) {
    let (d, id) = block_scale(block_amax(buf));
    let (q, sum) = quantize_levels(buf, id);
    (d, q, sum)
}

/// A block's scale and its inverse from its largest magnitude: the scalar
/// part every quantizer shares, so all give the same bits.
#[inline(always)]
pub fn block_scale(amax: f32) -> (f32, f32) {
    let d = amax / 127.0;
    (d, if d > 0.0 { 1.0 / d } else { 0.0 })
}

/// The oracle for the int8 family: `y = x W` with the activations exactly as
/// quantized in `xa` (`m` rows), integer dot products per 32-value block,
/// scaled by the block's scale (and its min times the level sum, for
/// formats with mins) as the layout stores them, and summed in f64.
/// Returns `m x n`.
pub fn reference_i8<D: AsRef<[u8]>>(
    w: &GgmlMatrix<D>,
    xa: &QuantizedActivations,
    m: usize,
) -> Vec<f64> {
    reference_i8_for(w, xa, m, false)
}

/// [`reference_i8`] for a layout that keeps the format's integer
/// sub-scales (`int_scales`, [`crate::layout::int8::I8Layout::int_scales`]):
/// each part's scale and min are then exact, not rounded to f16.
pub fn reference_i8_for<D: AsRef<[u8]>>(
    w: &GgmlMatrix<D>,
    xa: &QuantizedActivations,
    m: usize,
    int_scales: bool,
) -> Vec<f64> {
    let k_pad = round_up(w.k, QK);
    let blocks = w.k / QK;
    let xb = k_pad / QK;
    let mut y = vec![0f64; m * w.n];
    let fmt = w.dtype.format();
    let repack = fmt.int8.expect("an int8 format");
    let subs = fmt.block / QK;
    let spb = repack.scales_per_block;
    let part = QK / spb;
    for j in 0..w.n {
        for b in 0..blocks {
            let block = w.block(j, b / subs);
            let levels = block_levels(w.dtype, block, b % subs);
            // Per part of the block with its own scale (32 or 16 values).
            for h in 0..spb {
                let s = (b % subs) * spb + h;
                let (dw, mw) = layout_sub_scale(&repack, block, s, int_scales);
                let range = h * part..(h + 1) * part;
                for r in 0..m {
                    let xs = &xa.q[r * k_pad + b * QK..r * k_pad + (b + 1) * QK];
                    let dot: i64 = levels[range.clone()]
                        .iter()
                        .zip(&xs[range.clone()])
                        .map(|(&l, &x)| fmt.level_value(l) as i64 * x as i64)
                        .sum();
                    // The min of a part multiplies that part's level sum.
                    let sum: i64 = xs[range.clone()].iter().map(|&x| x as i64).sum();
                    // Only where there are mins: 0 * inf would turn an infinite
                    // activation scale's output NaN.
                    let dx = xa.d[r * xb + b] as f64;
                    y[r * w.n + j] += dw * dx * dot as f64;
                    if repack.mins {
                        y[r * w.n + j] += mw * dx * sum as f64;
                    }
                }
            }
        }
    }
    y
}

/// The scale and min of part `s` of `block` as a layout stores them, the
/// oracle's reading: the exact integer sub-scales under their f16 super
/// scales where the layout keeps them (`int_scales`), else the format's
/// f32 `sub_scale` rounded to f16.
pub fn layout_sub_scale(
    repack: &crate::format::row::Int8Repack,
    block: &[u8],
    s: usize,
    int_scales: bool,
) -> (f64, f64) {
    match repack.int_sub_scales.filter(|_| int_scales) {
        Some(int) => int.exact(block, s),
        None => {
            let (d, m) = stored_scale(repack.sub_scale, block, s);
            (d.to_f64(), m.to_f64())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::rng::Rng;

    /// `quantize_into` against a plain per-group reference written here:
    /// each block copied with zeros past K, one scale per group from
    /// `block_amax`, levels from `quantize_levels`, non-finite groups as
    /// documented, stored by `store_block` into zeroed buffers. Ragged K, K
    /// padded past whole blocks, groups of 1 and 8, sums per block and per
    /// half, both row orders, odd row counts, NaN and inf, and always into
    /// buffers a larger call of the same format left behind.
    #[test]
    fn quantize_into_matches_a_per_group_reference() {
        for (m, k, k_pad) in [(3, 70, 160), (2, 300, 320), (5, 64, 64), (1, 31, 96)] {
            let mut x = Rng::new(k as u64).vec_f32(m * k);
            if m * k > 100 {
                x[90] = f32::NAN;
            }
            if m * k > 200 {
                x[150] = f32::INFINITY;
            }
            for format in [
                GgmlType::Q8_0,
                GgmlType::Q4_0,
                GgmlType::Q4_K,
                GgmlType::Q6_K,
            ] {
                for row_pairs in [false, true] {
                    let fmt = ActFormat {
                        row_pairs,
                        ..ActFormat::plain(format)
                    };
                    let blocks = k_pad / QK;
                    let rows = if row_pairs { m.div_ceil(2) * 2 } else { m };
                    let per_row_d = if row_pairs { 2 } else { 1 };
                    let mut want = QuantizedActivations {
                        q: vec![0; rows * k_pad],
                        d: vec![0.0; rows * blocks * per_row_d],
                        c: vec![0; m * blocks * fmt.sums],
                    };
                    for r in 0..m {
                        let bufs: Vec<[f32; QK]> = (0..blocks)
                            .map(|b| {
                                std::array::from_fn(|i| {
                                    let j = b * QK + i;
                                    if j < k {
                                        x[r * k + j]
                                    } else {
                                        0.0
                                    }
                                })
                            })
                            .collect();
                        for (gi, g) in bufs.chunks(fmt.group).enumerate() {
                            let finite = g.iter().all(|b| b.iter().all(|v| v.is_finite()));
                            let (d, id) = if finite {
                                block_scale(g.iter().map(block_amax).fold(0f32, f32::max))
                            } else {
                                (non_finite_scale(g), 0.0)
                            };
                            for (i, buf) in g.iter().enumerate() {
                                let (q, sum) = if finite {
                                    quantize_levels(buf, id)
                                } else {
                                    non_finite_levels(buf, d)
                                };
                                let b = gi * fmt.group + i;
                                let at = (r, r / 2, r % 2);
                                store_block(
                                    &mut want,
                                    &fmt,
                                    at,
                                    (b, blocks, b * QK),
                                    k_pad,
                                    (d, &q, sum),
                                );
                            }
                        }
                    }
                    let mut got = QuantizedActivations::default();
                    let big = Rng::new(99).vec_f32(7 * 400);
                    quantize_into(&big, 7, 400, 416, fmt, &mut got);
                    quantize_into(&x, m, k, k_pad, fmt, &mut got);
                    let what = format!("{format:?} m={m} k={k} k_pad={k_pad} pairs={row_pairs}");
                    assert_eq!(got.q, want.q, "{what}");
                    assert_eq!(got.c, want.c, "{what}");
                    let bits = |d: &[f32]| d.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got.d), bits(&want.d), "{what}");
                }
            }
        }
    }

    /// K-quant activations: one scale per 256 values (the group's largest
    /// magnitude over 127), stored for each of its blocks, the last group
    /// shorter where the row is; levels and sums as the scale gives them.
    /// A NaN makes its whole group's scale NaN and levels 0, an infinity
    /// its group's scale `+inf`, and the other groups keep theirs.
    #[test]
    fn k_quant_groups_share_one_scale_per_256_values() {
        let fmt = ActFormat::plain(GgmlType::Q4_K);
        assert_eq!(fmt.group, 8);
        assert_eq!(ActFormat::plain(GgmlType::Q4_1).group, 1);
        let (m, k) = (2, 320);
        let mut x = Rng::new(3).vec_f32(m * k);
        x[5] *= 100.0;
        let a = quantize_activations_as(&x, m, k, k, fmt);
        let blocks = k / QK;
        for r in 0..m {
            for (g0, n) in [(0, 8), (8, 2)] {
                let vals = &x[r * k + g0 * QK..r * k + (g0 + n) * QK];
                let amax = vals.iter().fold(0f32, |a, v| a.max(v.abs()));
                let (d, id) = block_scale(amax);
                for b in g0..g0 + n {
                    assert_eq!(
                        a.d[r * blocks + b].to_bits(),
                        d.to_bits(),
                        "row {r} block {b}"
                    );
                    let buf: [f32; QK] = x[r * k + b * QK..][..QK].try_into().unwrap();
                    let (q, sum) = quantize_levels(&buf, id);
                    assert_eq!(&a.q[r * k + b * QK..][..QK], &q[..]);
                    assert_eq!(a.c[r * blocks + b], sum);
                }
            }
        }
        // The scaled-up value sets row 0's first group only.
        assert!(a.d[0] > 10.0 * a.d[8] && a.d[0] > 10.0 * a.d[blocks]);
        let mut bad = x.clone();
        bad[40] = f32::NAN;
        bad[k + 300] = f32::INFINITY;
        let a = quantize_activations_as(&bad, m, k, k, fmt);
        for b in 0..8 {
            assert!(a.d[b].is_nan() && a.c[b] == 0);
            assert_eq!(
                a.d[blocks + b].to_bits(),
                quantize_activations_as(&x, m, k, k, fmt).d[blocks + b].to_bits()
            );
        }
        assert!(a.q[..8 * QK].iter().all(|&v| v == 0));
        assert_eq!(a.d[8], quantize_activations_as(&x, m, k, k, fmt).d[8]);
        for b in 8..10 {
            assert_eq!(a.d[blocks + b], f32::INFINITY);
        }
        assert_eq!(a.q[k + 300], 127);
        assert_eq!(a.c[blocks + 9], 127);
    }
}
