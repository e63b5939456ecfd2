//! What the K-quants (Q2_K .. Q6_K) share: 256-value super-blocks of
//! sub-blocks with their own integer scales, the 6-bit scale / min packing
//! of Q4_K and Q5_K, and kgen's reference fits of a sub-block's scale (and
//! min).
//!
//! gguf-py dequantizes the K-quants but cannot quantize them, so the
//! quantizers are kgen's own, after the method llama.cpp describes: per
//! sub-block, a small search over candidate scales (and mins) for the least
//! weighted error; the sub-block scales then quantized against one f16
//! super-block scale, and the levels quantized again with the rounded
//! scales. Everything is in f32 and deterministic; a super-block holding a
//! non-finite value is encoded with NaN super-block scales (which
//! `GgmlMatrix::validate` refuses), never a panic.

use crate::format::row::QK;

/// Values per super-block.
pub(crate) const QK_K: usize = 256;

/// Where value `f` of a super-block sits in a plane of 2-bit fields
/// (Q2_K's and TQ2_0's levels, Q3_K's low two bits): byte
/// `32 (f / 128) + f % 32` of the plane, bits `2 ((f % 128) / 32)` up.
pub(crate) fn crumb_place(f: usize) -> (usize, u32) {
    (32 * (f / 128) + f % 32, 2 * (f % 128 / 32) as u32)
}

/// The 2-bit field of value `f` in `plane` (see [`crumb_place`]).
pub(crate) fn crumb(plane: &[u8], f: usize) -> u8 {
    let (byte, shift) = crumb_place(f);
    (plane[byte] >> shift) & 3
}

/// The 2-bit fields of 32-value sub-block `s`, in order along K.
pub(crate) fn sub_block_crumbs(plane: &[u8], s: usize) -> [u8; QK] {
    // Value `i` of the sub-block is value `32 s + i` of the super-block:
    // byte `32 (s / 4) + i`, bits `2 (s % 4)` up (`crumb_place`). One
    // shift for all 32, so the loop is a few vector ops, not 32 look-ups:
    // the repack reads every sub-block of Q2_K and TQ2_0 this way.
    let (bytes, shift) = (&plane[32 * (s / 4)..][..QK], 2 * (s % 4));
    std::array::from_fn(|i| (bytes[i] >> shift) & 3)
}

/// ORs the low two bits of each of `fields` (in order along K) into their
/// places of `plane` (see [`crumb_place`]).
pub(crate) fn pack_crumbs(fields: impl IntoIterator<Item = u8>, plane: &mut [u8]) {
    for (f, v) in fields.into_iter().enumerate() {
        let (byte, shift) = crumb_place(f);
        plane[byte] |= (v & 3) << shift;
    }
}

/// Sub-block magnitudes below this are all-zero sub-blocks (ggml's
/// `GROUP_MAX_EPS`).
const EPS: f32 = 1e-15;

/// Round to nearest, ties to even (ggml's `nearest_int`), then to an integer
/// clamped to `lo..=hi`; NaN gives `lo.max(0).min(hi)` (Rust's saturating
/// cast turns NaN into 0), never a panic.
pub(crate) fn nearest_clamped(v: f32, lo: i32, hi: i32) -> i32 {
    (v.round_ties_even() as i32).clamp(lo, hi)
}

// Q4_K's and Q5_K's 6-bit unpack lives with the sub-scale kinds it
// decodes (the repack inlines it from there).
pub(crate) use crate::format::row::scale_min_k4;

/// The 12 bytes [`scale_min_k4`] reads (scales and mins below 64).
pub(crate) fn pack_scale_min_k4(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..4 {
        q[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        q[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
        q[j + 8] = (sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4);
    }
    q
}

/// The search of [`fit_scale_min`]: candidate inverse scales
/// `(nmax + rmin + rdelta * t) / (max - min)` for `t` in `0..=steps`, and
/// the error it minimizes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Search {
    pub rmin: f32,
    pub rdelta: f32,
    pub steps: u32,
    /// Weighted absolute error (Q2_K) instead of squared.
    pub abs_error: bool,
}

/// Fits `x` by `scale * l - min` with levels `l` in `0..=nmax` and
/// `min >= 0`, minimizing the `w`-weighted error: the levels from the plain
/// range `[min(x, 0), max(x)]` first, then for each candidate inverse scale
/// of `search` the levels it rounds to and the weighted least-squares
/// `(scale, min)` for them (min clamped to `>= 0`, the scale refitted),
/// keeping the best. Writes the levels, returns `(scale, min)`.
pub(crate) fn fit_scale_min(
    x: &[f32],
    w: &[f32],
    nmax: i32,
    search: Search,
    levels: &mut [u8],
) -> (f32, f32) {
    let lo = x.iter().fold(0f32, |a, &v| a.min(v));
    let hi = x.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    if hi <= lo {
        // Constant non-positive (or empty) sub-block: the min is all of it.
        levels.fill(0);
        return (0.0, 0.0 - lo);
    }
    let round = |iscale: f32, l: &mut [u8]| {
        for (q, &v) in l.iter_mut().zip(x) {
            *q = nearest_clamped(iscale * (v - lo), 0, nmax) as u8;
        }
    };
    let error = |scale: f32, off: f32, l: &[u8]| -> f32 {
        x.iter()
            .zip(w)
            .zip(l)
            .map(|((&v, &wt), &q)| {
                let e = scale * q as f32 + off - v;
                wt * if search.abs_error { e.abs() } else { e * e }
            })
            .sum()
    };
    let iscale = nmax as f32 / (hi - lo);
    let (mut scale, mut off) = (1.0 / iscale, lo);
    round(iscale, levels);
    let mut best = error(scale, off, levels);
    let sw: f32 = w.iter().sum();
    let sx: f32 = x.iter().zip(w).map(|(&v, &wt)| wt * v).sum();
    let mut trial = vec![0u8; x.len()];
    for t in 0..=search.steps {
        let iscale = (search.rmin + search.rdelta * t as f32 + nmax as f32) / (hi - lo);
        round(iscale, &mut trial);
        let (mut sl, mut sl2, mut sxl) = (0f32, 0f32, 0f32);
        for ((&q, &v), &wt) in trial.iter().zip(x).zip(w) {
            let l = q as f32;
            sl += wt * l;
            sl2 += wt * l * l;
            sxl += wt * l * v;
        }
        let det = sw * sl2 - sl * sl;
        if det > 0.0 {
            let mut s = (sw * sxl - sx * sl) / det;
            let mut o = (sl2 * sx - sl * sxl) / det;
            if o > 0.0 {
                o = 0.0;
                s = sxl / sl2;
            }
            let e = error(s, o, &trial);
            if e < best {
                best = e;
                (scale, off) = (s, o);
                levels.copy_from_slice(&trial);
            }
        }
    }
    // 0 - off: an all-zero fit has min +0.0.
    (scale, 0.0 - off)
}

/// Fits `x` by `scale * l` with signed levels `l` in `-nmax..nmax`,
/// minimizing the error weighted by `x^2`: the first value of largest
/// magnitude mapped to `-nmax`, and to `-(nmax + t / 10)` for `t` in
/// `-9..=9`, each with its least-squares scale, keeping the best. Writes
/// the levels, returns the scale (0 and levels 0 for an all-zero
/// sub-block).
pub(crate) fn fit_scale(x: &[f32], nmax: i32, levels: &mut [i8]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            (amax, max) = (v.abs(), v);
        }
    }
    if amax < EPS {
        levels.fill(0);
        return 0.0;
    }
    // (sum w x l, sum w l^2) of the levels `iscale` rounds to.
    let sums = |iscale: f32, l: &mut [i8]| -> (f32, f32) {
        let (mut sxl, mut sl2) = (0f32, 0f32);
        for (q, &v) in l.iter_mut().zip(x) {
            let li = nearest_clamped(iscale * v, -nmax, nmax - 1);
            *q = li as i8;
            let (lf, wt) = (li as f32, v * v);
            sxl += wt * v * lf;
            sl2 += wt * lf * lf;
        }
        (sxl, sl2)
    };
    let (sxl, sl2) = sums(-(nmax as f32) / max, levels);
    let mut scale = if sl2 > 0.0 { sxl / sl2 } else { 0.0 };
    let mut best = scale * sxl;
    let mut trial = vec![0i8; x.len()];
    for t in -9..=9 {
        let (sxl, sl2) = sums(-(nmax as f32 + 0.1 * t as f32) / max, &mut trial);
        if sl2 > 0.0 && sxl * sxl > best * sl2 {
            scale = sxl / sl2;
            best = scale * sxl;
            levels.copy_from_slice(&trial);
        }
    }
    scale
}

/// The first value of largest magnitude (0.0 if none is above 0).
pub(crate) fn signed_max(v: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &s in v {
        if s.abs() > amax {
            (amax, max) = (s.abs(), s);
        }
    }
    max
}

/// Unsigned sub-block scales (or mins) quantized to `0..=top` against
/// `d = max / top`: returns `d` (f32, before its f16 rounding) and the
/// integer scales.
pub(crate) fn quantize_scales<const N: usize>(v: &[f32; N], top: i32) -> (f32, [u8; N]) {
    let max = v.iter().fold(0f32, |a, &s| if s > a { s } else { a });
    let inv = if max > 0.0 { top as f32 / max } else { 0.0 };
    (
        max / top as f32,
        v.map(|s| nearest_clamped(inv * s, 0, top) as u8),
    )
}

/// Levels `0..=nmax` of `x` for the weight `d * l - m` (`d`, `m` as stored):
/// the nearest level, clamped; 0 if `d` is 0.
pub(crate) fn requantize_min(x: &[f32], d: f32, m: f32, nmax: i32, levels: &mut [u8]) {
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = if d == 0.0 {
            0
        } else {
            nearest_clamped((v + m) / d, 0, nmax) as u8
        };
    }
}

/// Signed levels `-nmax..nmax` of `x` for the weight `d * l` (`d` as
/// stored): the nearest level, clamped; 0 if `d` is 0.
pub(crate) fn requantize(x: &[f32], d: f32, nmax: i32, levels: &mut [i8]) {
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = if d == 0.0 {
            0
        } else {
            nearest_clamped(v / d, -nmax, nmax - 1) as i8
        };
    }
}

/// Standard normal values (Box-Muller), deterministic: the K-quants'
/// quality tests.
#[cfg(test)]
pub(crate) fn gaussian(rng: &mut crate::format::rng::Rng, len: usize) -> Vec<f32> {
    (0..len)
        .map(|_| {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let v = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            ((-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

/// kgen's quantizer on 4096 standard normal values (seed `seed`) through
/// `fmt`'s codec: the relative RMS error of the round trip, which each
/// K-quant's (and IQ4_XS's) tests bound against llama.cpp's own.
#[cfg(test)]
pub(crate) fn rms_error(fmt: &crate::format::row::Format, seed: u64) -> f64 {
    let x = gaussian(&mut crate::format::rng::Rng::new(seed), 4096);
    let mut out = Vec::new();
    for b in x.chunks(fmt.block) {
        (fmt.quantize)(b, &mut out);
    }
    assert_eq!(out.len(), 4096 / fmt.block * fmt.block_bytes);
    let mut w = vec![0f32; 4096];
    for (o, b) in w.chunks_mut(fmt.block).zip(out.chunks(fmt.block_bytes)) {
        (fmt.dequantize)(b, o);
    }
    let (se, sx) = x.iter().zip(&w).fold((0f64, 0f64), |(e, s), (&a, &b)| {
        (e + ((a - b) as f64).powi(2), s + (a as f64).powi(2))
    });
    (se / sx).sqrt()
}

/// `fmt`'s quantizer on a block of standard normal values scaled so that
/// its largest magnitude is each of `scales` (finite, from near f32's top
/// to its subnormals), and on a constant block of each: one block each, no
/// panic, and the same bytes twice.
#[cfg(test)]
pub(crate) fn check_extreme_scales(fmt: &crate::format::row::Format, scales: &[f32]) {
    let g = gaussian(&mut crate::format::rng::Rng::new(2), fmt.block);
    let amax = g.iter().fold(0f32, |a, v| a.max(v.abs()));
    for &scale in scales {
        let spread: Vec<f32> = g.iter().map(|v| v / amax * scale).collect();
        for x in [spread, vec![scale; fmt.block]] {
            assert!(
                x.iter().all(|v| v.is_finite()),
                "{} times {scale}",
                fmt.name
            );
            let (mut a, mut b) = (Vec::new(), Vec::new());
            (fmt.quantize)(&x, &mut a);
            (fmt.quantize)(&x, &mut b);
            assert_eq!(a.len(), fmt.block_bytes, "{} times {scale}", fmt.name);
            assert_eq!(a, b, "{} times {scale}: not deterministic", fmt.name);
        }
    }
}

/// For a format whose integer sub-scales read out as i8 per 16 values
/// under the f16 `d` at `d_at` (Q6_K, Q3_K): on 200 random super-blocks,
/// the scales taken exactly, times each stored level's value, give
/// gguf-py's weights bit for bit (`d * sc` is exact in f32: an 11-bit `d`
/// times an 8-bit scale), and each 32 values' pair of scale bytes is
/// `pair`'s.
#[cfg(test)]
pub(crate) fn check_signed_int_sub_scales(
    fmt: &crate::format::row::Format,
    d_at: usize,
    levels: fn(&[u8]) -> [u8; QK_K],
    pair: fn(&[u8], usize) -> [u8; 2],
    seed: u64,
) {
    use half::f16;
    let mut rng = crate::format::rng::Rng::new(seed);
    let int = fmt
        .int8
        .and_then(|r| r.int_sub_scales)
        .expect("int sub-scales");
    assert!(int.signed());
    let mut w = [0f32; QK_K];
    for t in 0..200 {
        let mut b: Vec<u8> = (0..fmt.block_bytes).map(|_| rng.below(256) as u8).collect();
        let v = 2f32.powi(rng.below(30) as i32 - 20) * (rng.f32() - 0.5);
        b[d_at..d_at + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
        (fmt.dequantize)(&b, &mut w);
        let d = u16::from_le_bytes([b[d_at], b[d_at + 1]]);
        assert_eq!(int.supers(&b), [d, d]);
        for s in 0..QK_K / 32 {
            assert_eq!(int.pair(&b, s), pair(&b, s), "block {t} sub {s}");
        }
        let lv = levels(&b);
        for (f, &want) in w.iter().enumerate() {
            let (d, m) = int.exact(&b, f / 16);
            assert_eq!(m, 0.0);
            let got = d * fmt.level_value(lv[f]) as f64;
            assert_eq!(got as f32, want, "block {t} value {f}");
        }
    }
}

/// For Q4_K / Q5_K (`d`, `dmin`, 12 bytes of 6-bit scales and mins first):
/// on 300 random super-blocks with scales across f16's range, every value
/// gguf-py dequantizes, `(d * sc) * q - (dmin * m)`, is the codec's and the
/// int8 row's `scale * level + min`, bit for bit; the row's integer
/// sub-scales are the 6-bit codes and give `d sc` and `-(dmin m)` exactly.
#[cfg(test)]
pub(crate) fn check_scale_times_level_plus_min(fmt: &crate::format::row::Format, seed: u64) {
    use crate::format::ggml::numpy::read_f16;
    use half::f16;
    let row = fmt.int8.expect("an int8 row");
    let mut rng = crate::format::rng::Rng::new(seed);
    for t in 0..300 {
        let mut b: Vec<u8> = (0..fmt.block_bytes).map(|_| rng.below(256) as u8).collect();
        let exp = |r: &mut crate::format::rng::Rng| 2f32.powi(r.below(40) as i32 - 24) * r.f32();
        let (d, dmin) = (exp(&mut rng), exp(&mut rng));
        b[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        b[2..4].copy_from_slice(&f16::from_f32(dmin).to_bits().to_le_bytes());
        let mut w = [0f32; QK_K];
        (fmt.dequantize)(&b, &mut w);
        let (d, dmin) = (read_f16(&b), read_f16(&b[2..]));
        for s in 0..8 {
            let (ds, ms) = (row.sub_scale)(&b, s);
            let (sc, m) = scale_min_k4(&b[4..16], s);
            // The integer form: the 6-bit bytes as they are, under the
            // header's d and dmin (exact in f64).
            let int = row.int_sub_scales.expect("integer sub-scales");
            assert_eq!(int.kind, crate::format::row::SubScaleKind::ScaleMin);
            assert_eq!(int.pair(&b, s), [sc, m]);
            assert_eq!(
                int.exact(&b, s),
                (d as f64 * sc as f64, -(dmin as f64 * m as f64)),
                "block {t} sub {s}"
            );
            for (i, q) in (row.block_levels)(&b, s).into_iter().enumerate() {
                let gguf_py = (d * sc as f32) * q as f32 - (dmin * m as f32);
                let v = w[32 * s + i];
                assert_eq!(
                    v.to_bits(),
                    gguf_py.to_bits(),
                    "block {t} sub {s} value {i}"
                );
                assert_eq!((ds * q as f32 + ms).to_bits(), v.to_bits());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::rng::Rng;

    /// A sub-block's fields in one shift are the ones `crumb` places.
    #[test]
    fn sub_block_crumbs_read_where_crumb_places() {
        let mut rng = Rng::new(9);
        let plane: Vec<u8> = (0..QK_K / 4).map(|_| rng.next_u64() as u8).collect();
        for s in 0..QK_K / QK {
            let want: [u8; QK] = std::array::from_fn(|i| crumb(&plane, QK * s + i));
            assert_eq!(sub_block_crumbs(&plane, s), want, "sub-block {s}");
        }
    }

    #[test]
    fn scale_min_packing_round_trips() {
        let mut rng = Rng::new(3);
        for _ in 0..200 {
            let sc: [u8; 8] = std::array::from_fn(|_| rng.below(64) as u8);
            let m: [u8; 8] = std::array::from_fn(|_| rng.below(64) as u8);
            let q = pack_scale_min_k4(&sc, &m);
            for j in 0..8 {
                assert_eq!(scale_min_k4(&q, j), (sc[j], m[j]), "sub-block {j}");
            }
        }
        // The layout gguf-py documents: scale 4's top bits are byte 0's
        // top bits, min 4's are byte 4's; their low bits share byte 8.
        let mut sc = [0u8; 8];
        let mut m = [0u8; 8];
        sc[4] = 0b11_0101;
        m[4] = 0b10_1010;
        sc[1] = 63;
        let q = pack_scale_min_k4(&sc, &m);
        assert_eq!(q, [0xC0, 63, 0, 0, 0x80, 0, 0, 0, 0xA5, 0, 0, 0]);
    }

    #[test]
    fn nearest_is_ties_to_even_and_never_panics() {
        assert_eq!(nearest_clamped(2.5, 0, 15), 2);
        assert_eq!(nearest_clamped(3.5, 0, 15), 4);
        assert_eq!(nearest_clamped(-0.5, -4, 3), 0);
        assert_eq!(nearest_clamped(99.0, -4, 3), 3);
        assert_eq!(nearest_clamped(f32::NAN, 0, 15), 0);
        assert_eq!(nearest_clamped(f32::NAN, 1, 15), 1);
        assert_eq!(nearest_clamped(f32::INFINITY, -32, 31), 31);
        assert_eq!(nearest_clamped(f32::NEG_INFINITY, -32, 31), -32);
    }

    #[test]
    fn fits_recover_exact_grids() {
        // x = 0.25 l - 1 for levels cycling 0..=15: the fit finds them.
        let x: Vec<f32> = (0..32).map(|i| 0.25 * (i % 16) as f32 - 1.0).collect();
        let w = vec![1f32; 32];
        let s = Search {
            rmin: -1.0,
            rdelta: 0.1,
            steps: 20,
            abs_error: false,
        };
        let mut l = [0u8; 32];
        let (scale, min) = fit_scale_min(&x, &w, 15, s, &mut l);
        assert_eq!((scale, min), (0.25, 1.0));
        for (i, &q) in l.iter().enumerate() {
            assert_eq!(q as usize, i % 16);
        }
        // Non-negative values: the min is 0.
        let x: Vec<f32> = (0..32).map(|i| 0.5 * (i % 16) as f32).collect();
        let (scale, min) = fit_scale_min(&x, &w, 15, s, &mut l);
        assert_eq!((scale, min), (0.5, 0.0));
        // Constant negative: all min.
        let (scale, min) = fit_scale_min(&[-2.0; 32], &w, 15, s, &mut l);
        assert_eq!((scale, min, l), (0.0, 2.0, [0; 32]));
        // Signed: 0.5 l for l in -32..32.
        let x: Vec<f32> = (0..16).map(|i| 0.5 * (i * 4 % 64) as f32 - 16.0).collect();
        let mut l = [0i8; 16];
        let scale = fit_scale(&x, 32, &mut l);
        assert_eq!(scale, 0.5);
        for i in 0..16 {
            assert_eq!(scale * l[i] as f32, x[i]);
        }
        assert_eq!(fit_scale(&[0.0; 16], 32, &mut l), 0.0);
        assert_eq!(l, [0; 16]);
    }
}
