//! What the lattice i-quants (GGUF IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
//! IQ3_XXS, IQ3_S; rows in `iq1.rs`, `iq2.rs`, `iq3.rs`) share: their grids,
//! the codebooks the int8 family reads them through, and a reference
//! quantizer.
//!
//! A lattice block stores, per 4 or 8 values, an index into a grid of
//! points (256 to 2048 of them, ggml's tables: `iq_grids.rs`), each value
//! of a point one of a few levels; signs per value (IQ2 / IQ3: 7 stored
//! bits and an even-parity eighth in the `ksigns` formats); and a scale per
//! 16 or 32 values, `d * k * (0.5 + ls)` with an f16 `d` per 256. IQ1's
//! grid is signed ({-1, 0, 1}) and shifted by `+-1/8` per 8 or 32 values.
//!
//! To the int8 family every such value is a small integer times its
//! sub-block's scale, so the formats are codebook formats: the repack
//! decodes each point into codebook indices and the kernels IQ4_NL's
//! table lookups generate run them on every ISA. IQ1's `8 g +- 1` (over a
//! scale of `d_l / 8`) and IQ2's three levels with a sign (bit 2) take 3-bit
//! indices, IQ3's eight levels with a sign (bit 3) 4-bit ones. The cost is
//! memory: the repacked layout holds 3.5 bits per weight for 3-bit indices
//! (4 with a scale per 16; 4.5 and 5 on ISAs that read them at 4 bits,
//! [`crate::format::row::Int8Repack::read_bits`]) and 4.5 for IQ3, where
//! the file holds 1.56 to 3.44.

use crate::format::ggml::iq_grids as g;
use crate::format::row::{Int8Repack, QK};

/// The int8 row every lattice format has: a codebook layout of
/// `index_bits`-bit indices (3 where a point's levels and sign fit 8
/// codebook entries, else 4) decoded sub-block by sub-block (no nibble
/// store applies), scales per 32 or 16 values, no mins.
pub const fn codebook_row(
    block_levels: fn(&[u8], usize) -> [u8; QK],
    sub_scale: fn(&[u8], usize) -> (f32, f32),
    scales_per_block: usize,
    index_bits: u32,
) -> Option<Int8Repack> {
    Some(Int8Repack {
        layout_bits: index_bits,
        block_levels,
        sub_scale,
        mins: false,
        scales_per_block,
        act_group: 1,
        group_scale: false,
        int_sub_scales: None,
        nibbles: None,
        fifth: None,
    })
}

/// The little-endian u16 at `at`.
pub fn u16_at(b: &[u8], at: usize) -> u32 {
    u32::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// The little-endian u32 at `at`.
pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A grid of points: value `i` of point `p` is
/// `levels[(points[p] >> (bits * i)) & mask]`.
pub struct Grid {
    pub points: &'static [u16],
    /// The same points with level index `i` in byte `i`, for the repack,
    /// which decodes a point in one lookup.
    pub bytes: &'static [u64],
    pub levels: &'static [i8],
    pub bits: u32,
    /// Values per point: 8, or 4 for the IQ3 grids.
    pub width: usize,
}

/// `points` with each `bits`-bit level index in a byte of its own.
const fn spread_points<const N: usize>(points: &[u16; N], bits: u32) -> [u64; N] {
    let mut out = [0u64; N];
    let mut p = 0;
    while p < N {
        let mut i = 0;
        while i < 16 / bits {
            let l = (points[p] as u64 >> (bits * i)) & ((1 << bits) - 1);
            out[p] |= l << (8 * i);
            i += 1;
        }
        p += 1;
    }
    out
}

/// Bit `j` of the index as byte `j` (0 or 1): sign bits spread over the
/// bytes of 8 values.
pub const BIT_BYTES: [u64; 256] = {
    let mut out = [0u64; 256];
    let mut s = 0;
    while s < 256 {
        let mut j = 0;
        while j < 8 {
            out[s] |= ((s as u64 >> j) & 1) << (8 * j);
            j += 1;
        }
        s += 1;
    }
    out
};

impl Grid {
    /// The level index of value `i` of point `p`.
    #[inline(always)]
    pub fn level(&self, p: usize, i: usize) -> usize {
        ((self.points[p] >> (self.bits * i as u32)) & ((1 << self.bits) - 1)) as usize
    }

    /// The largest level magnitude.
    fn top(&self) -> f32 {
        self.levels
            .iter()
            .map(|l| l.unsigned_abs())
            .max()
            .unwrap_or(0) as f32
    }
}

static IQ2XXS_BYTES: [u64; g::IQ2XXS_GRID.len()] = spread_points(&g::IQ2XXS_GRID, 2);
static IQ2XS_BYTES: [u64; g::IQ2XS_GRID.len()] = spread_points(&g::IQ2XS_GRID, 2);
static IQ2S_BYTES: [u64; g::IQ2S_GRID.len()] = spread_points(&g::IQ2S_GRID, 2);
static IQ3XXS_BYTES: [u64; g::IQ3XXS_GRID.len()] = spread_points(&g::IQ3XXS_GRID, 3);
static IQ3S_BYTES: [u64; g::IQ3S_GRID.len()] = spread_points(&g::IQ3S_GRID, 3);
static IQ1S_BYTES: [u64; g::IQ1S_GRID.len()] = spread_points(&g::IQ1S_GRID, 2);

pub const IQ2XXS: Grid = Grid {
    points: &g::IQ2XXS_GRID,
    bytes: &IQ2XXS_BYTES,
    levels: &g::IQ2XXS_LEVELS,
    bits: 2,
    width: 8,
};
pub const IQ2XS: Grid = Grid {
    points: &g::IQ2XS_GRID,
    bytes: &IQ2XS_BYTES,
    levels: &g::IQ2XS_LEVELS,
    bits: 2,
    width: 8,
};
pub const IQ2S: Grid = Grid {
    points: &g::IQ2S_GRID,
    bytes: &IQ2S_BYTES,
    levels: &g::IQ2S_LEVELS,
    bits: 2,
    width: 8,
};
pub const IQ3XXS: Grid = Grid {
    points: &g::IQ3XXS_GRID,
    bytes: &IQ3XXS_BYTES,
    levels: &g::IQ3XXS_LEVELS,
    bits: 3,
    width: 4,
};
pub const IQ3S: Grid = Grid {
    points: &g::IQ3S_GRID,
    bytes: &IQ3S_BYTES,
    levels: &g::IQ3S_LEVELS,
    bits: 3,
    width: 4,
};
pub const IQ1S: Grid = Grid {
    points: &g::IQ1S_GRID,
    bytes: &IQ1S_BYTES,
    levels: &g::IQ1S_LEVELS,
    bits: 2,
    width: 8,
};

/// ggml's `ksigns_iq2xs`: 7 stored sign bits and their parity as the
/// eighth, so every group of 8 has an even number of negatives.
#[inline(always)]
pub fn ksigns(i: u32) -> u8 {
    let i = (i & 127) as u8;
    i | (((i.count_ones() & 1) as u8) << 7)
}

/// The codebook of a grid with separate signs: level `l` at index `l`, its
/// negative at `l + 2^(B - 1)` for `B`-bit indices (unused entries 0): IQ2's
/// three levels take 3-bit indices (sign bit 2), IQ3's eight take 4 (sign
/// bit 3).
pub const fn signed_codebook<const B: u32>(levels: &[i8]) -> [i8; 16] {
    let mut c = [0i8; 16];
    let mut l = 0;
    assert!(levels.len() <= 1 << (B - 1), "levels and signs fit B bits");
    while l < levels.len() {
        c[l] = levels[l];
        c[l + (1 << (B - 1))] = -levels[l];
        l += 1;
    }
    c
}

pub const IQ2_CODEBOOK: [i8; 16] = signed_codebook::<3>(&g::IQ2XXS_LEVELS);
pub const IQ3XXS_CODEBOOK: [i8; 16] = signed_codebook::<4>(&g::IQ3XXS_LEVELS);
pub const IQ3S_CODEBOOK: [i8; 16] = signed_codebook::<4>(&g::IQ3S_LEVELS);

/// IQ1's values `g + delta` (grid level `g` in {-1, 0, 1}, `delta = +-1/8`)
/// times 8: index `(g + 1) + 4 * (delta < 0)`; the scale the kernels take
/// is `d_l / 8`, exact in f32.
pub const IQ1_CODEBOOK: [i8; 16] = [-7, 1, 9, 0, -9, -1, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// A format's weights from its int8 description, `d * codebook[level]`
/// (for these formats bit for bit gguf-py's `db * grid * sign` and
/// `dl * (grid + delta)`: the sign and the factor 8 are exact).
pub fn dequantize_by_levels(
    blk: &[u8],
    out: &mut [f32],
    codebook: &[i8; 16],
    levels: fn(&[u8], usize) -> [u8; QK],
    sub_scale: fn(&[u8], usize) -> (f32, f32),
    scales_per_block: usize,
) {
    let part = QK / scales_per_block;
    for (s, o) in out.chunks_exact_mut(QK).enumerate() {
        let l = levels(blk, s);
        for (u, (o, l)) in o
            .chunks_exact_mut(part)
            .zip(l.chunks_exact(part))
            .enumerate()
        {
            let (d, _) = sub_scale(blk, s * scales_per_block + u);
            for (v, &q) in o.iter_mut().zip(l) {
                *v = d * codebook[q as usize] as f32;
            }
        }
    }
}

/// How a format's quantizer fits a super-block (the search
/// [`fit`] runs; the format packs the result).
pub struct Fit {
    pub grid: &'static Grid,
    /// Signs are stored apart from the (non-negative) levels.
    pub signed: bool,
    /// The signs of each 8 values have even parity (`ksigns`).
    pub parity: bool,
    /// Unit scale `d * k * (0.5 + ls)`, `ls` in `0..=ls_max`.
    pub k: f32,
    pub ls_max: u8,
    /// Values per unit scale (16 or 32).
    pub unit: usize,
    /// IQ1's `+-delta` and the values that share one sign (8 or 32).
    pub delta: Option<(f32, usize)>,
}

/// What [`fit`] chose for 256 values.
pub struct Choice {
    /// The f16 super-block scale, as stored.
    pub d: half::f16,
    /// Per unit.
    pub ls: Vec<u8>,
    /// Per `grid.width` values.
    pub points: Vec<u16>,
    /// Per value: stored negative (signed grids).
    pub negative: Vec<bool>,
    /// Per delta group: the delta is negative.
    pub negative_delta: Vec<bool>,
}

impl Choice {
    /// The sign bits of values `8 g .. 8 g + 8`, value `8 g + j` in bit `j`.
    pub fn sign_byte(&self, g: usize) -> u8 {
        (0..8).fold(0u8, |a, j| a | u8::from(self.negative[8 * g + j]) << j)
    }
}

/// A simple reference fit (not llama.cpp's search, which weighs values by
/// an importance matrix and walks grid neighbours): signs from the values
/// (the smallest of an odd-parity 8 flipped), the super-block scale from
/// the largest unit, each unit's scale from the three codes nearest its
/// own range, and each point the grid's nearest to the scaled values, by
/// exhaustive search. `x` must be finite.
pub fn fit(x: &[f32], f: &Fit) -> Choice {
    let n = x.len();
    let w = f.grid.width;
    let mut negative = vec![false; n];
    let mut t: Vec<f32> = x.to_vec();
    if f.signed {
        for (i, v) in x.iter().enumerate() {
            negative[i] = *v < 0.0;
            t[i] = v.abs();
        }
        if f.parity {
            for c in 0..n / 8 {
                let r = 8 * c..8 * c + 8;
                if negative[r.clone()].iter().filter(|&&b| b).count() % 2 == 1 {
                    let j = r
                        .clone()
                        .min_by(|&a, &b| t[a].total_cmp(&t[b]))
                        .unwrap_or(8 * c);
                    negative[j] = !negative[j];
                    // Stored with the wrong sign: the best level for it is
                    // the smallest.
                    t[j] = -t[j];
                }
            }
        }
    }
    let delta = f.delta.map_or(0.0, |d| d.0);
    let top = f.grid.top() + delta;
    let units = n / f.unit;
    let amax: Vec<f32> = (0..units)
        .map(|u| {
            x[u * f.unit..(u + 1) * f.unit]
                .iter()
                .fold(0f32, |a, v| a.max(v.abs()))
        })
        .collect();
    let largest = amax.iter().fold(0f32, |a, &v| a.max(v));
    let d = half::f16::from_f32(largest / top / (f.k * (0.5 + f.ls_max as f32)));
    let df = d.to_f32();
    let mut choice = Choice {
        d,
        ls: vec![0; units],
        points: vec![0; n / w],
        negative,
        negative_delta: vec![false; f.delta.map_or(0, |d| n / d.1)],
    };
    if df == 0.0 {
        return choice;
    }
    for u in 0..units {
        let ideal = amax[u] / top / (df * f.k) - 0.5;
        let c0 = ideal.round().clamp(0.0, f.ls_max as f32) as i32;
        let mut best = (f32::INFINITY, 0u8, Vec::new(), Vec::new());
        for c in (c0 - 1).max(0)..=(c0 + 1).min(f.ls_max as i32) {
            let s = df * f.k * (0.5 + c as f32);
            let (err, pts, dl) = fit_unit(&t[u * f.unit..(u + 1) * f.unit], s, f);
            if err < best.0 {
                best = (err, c as u8, pts, dl);
            }
        }
        choice.ls[u] = best.1;
        let (p0, d0) = (u * f.unit / w, f.delta.map_or(0, |d| u * f.unit / d.1));
        choice.points[p0..p0 + best.2.len()].copy_from_slice(&best.2);
        choice.negative_delta[d0..d0 + best.3.len()].copy_from_slice(&best.3);
    }
    choice
}

/// One unit's points (and delta signs) under scale `s`: the error, the
/// points, the deltas.
fn fit_unit(t: &[f32], s: f32, f: &Fit) -> (f32, Vec<u16>, Vec<bool>) {
    let w = f.grid.width;
    match f.delta {
        None => {
            let mut err = 0.0;
            let pts = t
                .chunks(w)
                .map(|c| {
                    let (p, e) = nearest_point(c, s, 0.0, f.grid);
                    err += e;
                    p
                })
                .collect();
            (err, pts, Vec::new())
        }
        Some((delta, per)) => {
            let (mut err, mut pts, mut dl) = (0.0, Vec::new(), Vec::new());
            for group in t.chunks(per) {
                let fits: Vec<_> = [delta, -delta]
                    .iter()
                    .map(|&dv| {
                        let mut e = 0.0;
                        let p: Vec<u16> = group
                            .chunks(w)
                            .map(|c| {
                                let (p, pe) = nearest_point(c, s, dv, f.grid);
                                e += pe;
                                p
                            })
                            .collect();
                        (e, p)
                    })
                    .collect();
                let neg = fits[1].0 < fits[0].0;
                let (e, p) = &fits[usize::from(neg)];
                err += e;
                pts.extend_from_slice(p);
                dl.push(neg);
            }
            (err, pts, dl)
        }
    }
}

/// The most index bits of half a grid point: IQ2's 8 values of 4 levels (2
/// bits each) and IQ3's 4 values of 8 levels (3 bits each) give 8 and 6.
const MAX_HALF_BITS: u32 = 8;

/// The grid point nearest `t / s - delta` (squared error), first of equals.
/// A point's error is the sum of its values' errors: those of the low and
/// the high half of its index bits are tabled once per group (at most 2^8
/// entries each), so each point costs two lookups.
fn nearest_point(t: &[f32], s: f32, delta: f32, grid: &Grid) -> (u16, f32) {
    let mut cost = [[0f32; 8]; 8];
    for (c, &v) in cost.iter_mut().zip(t) {
        for (c, &lv) in c.iter_mut().zip(grid.levels) {
            let e = v - s * (lv as f32 + delta);
            *c = e * e;
        }
    }
    let half = t.len() / 2;
    let half_bits = grid.bits * half as u32;
    // Built one position at a time: entry `code` of the table over
    // positions `from..from + j + 1` is the table over `from..from + j`
    // at `code` without its top field, plus that field's cost.
    debug_assert!(half_bits <= MAX_HALF_BITS);
    let table = |from: usize| -> [f32; 1 << MAX_HALF_BITS] {
        let mut t = [0f32; 1 << MAX_HALF_BITS];
        for j in 0..half {
            let shift = grid.bits as usize * j;
            for code in (0..1usize << (shift + grid.bits as usize)).rev() {
                let l = code >> shift;
                t[code] = t[code & ((1 << shift) - 1)] + cost[from + j][l];
            }
        }
        t
    };
    let (lo, hi) = (table(0), table(half));
    let mask = (1usize << half_bits) - 1;
    let mut best = (0u16, f32::INFINITY);
    for (p, &q) in grid.points.iter().enumerate() {
        let q = q as usize;
        let e = lo[q & mask] + hi[q >> half_bits];
        if e < best.1 {
            best = (p as u16, e);
        }
    }
    best
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The packed grids decode to gguf-py's levels (spot checks of ggml's
    /// tables: `iq2xxs_grid[1]` is 0x080808080808082b, `iq3xxs_grid[255]`
    /// 0x3e341c04, `iq1s_grid[0]` all -1) and every point is distinct.
    #[test]
    fn grids_decode() {
        let pt = |g: &Grid, p: usize| -> Vec<i8> {
            (0..g.width).map(|i| g.levels[g.level(p, i)]).collect()
        };
        assert_eq!(pt(&IQ2XXS, 1), [43, 8, 8, 8, 8, 8, 8, 8]);
        assert_eq!(pt(&IQ3XXS, 255), [4, 28, 52, 62]);
        assert_eq!(pt(&IQ1S, 0), [-1; 8]);
        for (g, n) in [
            (&IQ2XXS, 256),
            (&IQ2XS, 512),
            (&IQ2S, 1024),
            (&IQ3XXS, 256),
            (&IQ3S, 512),
            (&IQ1S, 2048),
        ] {
            assert_eq!(g.points.len(), n);
            let mut p = g.points.to_vec();
            p.sort();
            p.dedup();
            assert_eq!(p.len(), n);
            assert!(g
                .points
                .iter()
                .all(|&q| (q as u32) < 1 << (g.bits * g.width as u32)));
        }
    }

    /// A format's kgen-fit relative RMS error on standard normal values
    /// is below `bound` (1.2 times what was measured; llama.cpp's fit,
    /// with an importance matrix and a grid-neighbour search, is another
    /// quantizer).
    pub(crate) fn check_fit_error(f: &crate::format::row::Format, bound: f64) {
        let e = crate::format::ggml::kquant::rms_error(f, 5);
        assert!(e < bound, "{}: {e}", f.name);
    }

    /// The repack's byte tables decode every point as `level` does.
    #[test]
    fn point_bytes_agree_with_levels() {
        for g in [&IQ2XXS, &IQ2XS, &IQ2S, &IQ3XXS, &IQ3S, &IQ1S] {
            assert_eq!(g.bytes.len(), g.points.len());
            for p in 0..g.points.len() {
                let want = (0..g.width).fold(0u64, |a, i| a | (g.level(p, i) as u64) << (8 * i));
                assert_eq!(g.bytes[p], want, "point {p}");
            }
        }
        assert_eq!(BIT_BYTES[0b1000_0101], 0x0100_0000_0001_0001);
    }

    #[test]
    fn ksigns_have_even_parity() {
        for i in 0..128 {
            assert_eq!(ksigns(i).count_ones() % 2, 0);
            assert_eq!(u32::from(ksigns(i) & 127), i);
        }
        // ggml's table: entry 1 is 0x81, entry 3 is 0x03.
        assert_eq!((ksigns(1), ksigns(3)), (0x81, 0x03));
    }
}
