//! kgen's own 2-bit and 1-bit weights (paper 004): blocks of 32 values
//! with an f16 scale `d` and `bits`-bit indices into a grid of `2^bits`
//! int8 levels, the weight `d * grid[q]`. Rows of one width share every
//! kernel and differ only in the grid:
//!
//! - `k2_bb`, the bit-balanced grid {-2, -1, 1, 2} (ABQ-LLM), symmetric
//!   with no zero level;
//! - `k2_pl`, the plain grid {-2, -1, 0, 1};
//! - `k1`, 1-bit: {-1, 1}, the weight `+-d`.
//!
//! A block is `d`, then `4 bits` bytes of indices, value `f` at bits
//! `bits (f / (4 bits))` of byte `f % (4 bits)`: 10 bytes (2.5 bits per
//! weight) for 2 bits, 6 (1.5) for 1. These are not GGUF types: their ids
//! are kgen's own ([`OWN_TYPE_BASE`]), which no file may name. The int8
//! family runs them on the 2- and 1-bit layouts: each nibble of a packed
//! byte holds `4 / bits` indices, and one byte shuffle per index field
//! turns a vector of nibbles into unsigned levels `grid[q] - min(grid)`
//! (the format's tables, [`Format::grid_tables`]); the offset is removed
//! once per block through the activation sums.

use crate::format::ggml::numpy::{read_f16, write_f16};
use crate::format::row::{
    leading_f16_scale, Format, Int8Repack, Levels, ScaleAt, OWN_TYPE_BASE, QK,
};

/// The bit-balanced grid (no zero level).
pub const BIT_BALANCED: [i8; 4] = [-2, -1, 1, 2];
/// The plain two's-complement grid.
pub const PLAIN: [i8; 4] = [-2, -1, 0, 1];

/// The 1-bit grid.
pub const SIGNS: [i8; 2] = [-1, 1];

/// Bytes of indices per block of `bits`-bit indices.
const fn index_bytes(bits: u32) -> usize {
    QK * bits as usize / 8
}

const fn row(
    tag: &'static str,
    name: &'static str,
    id: u32,
    grid: &'static [i8],
    dequantize: fn(&[u8], &mut [f32]),
    quantize: fn(&[f32], &mut Vec<u8>),
) -> Format {
    let bits = grid_bits(grid);
    Format {
        tag,
        name,
        gguf_type: OWN_TYPE_BASE + id,
        block: QK,
        super_block: QK,
        block_bytes: 2 + index_bytes(bits),
        bits,
        scales: &[ScaleAt::Bytes(0)],
        levels: Levels::Grid(grid),
        dequantize,
        quantize,
        int8: Some(Int8Repack {
            layout_bits: bits,
            block_levels: indices_of(bits),
            sub_scale: leading_f16_scale,
            mins: false,
            scales_per_block: 1,
            act_group: 1,
            group_scale: false,
            int_sub_scales: None,
            nibbles: None,
            fifth: None,
        }),
    }
}

pub const K2_BB: Format = row(
    "k2_bb",
    "K2_BB",
    1,
    &BIT_BALANCED,
    |b, o| dequantize(b, o, &BIT_BALANCED),
    |x, o| quantize(x, o, &BIT_BALANCED),
);

pub const K2_PL: Format = row(
    "k2_pl",
    "K2_PL",
    2,
    &PLAIN,
    |b, o| dequantize(b, o, &PLAIN),
    |x, o| quantize(x, o, &PLAIN),
);

pub const K1: Format = row(
    "k1",
    "K1",
    3,
    &SIGNS,
    |b, o| dequantize(b, o, &SIGNS),
    |x, o| quantize(x, o, &SIGNS),
);

/// Bits per index of a grid of `2^bits` levels.
const fn grid_bits(grid: &[i8]) -> u32 {
    grid.len().trailing_zeros()
}

/// The index reader of `bits`-bit blocks.
const fn indices_of(bits: u32) -> fn(&[u8], usize) -> [u8; QK] {
    if bits == 1 {
        indices::<1>
    } else {
        indices::<2>
    }
}

/// The 32 stored `BITS`-bit indices of a block, in order.
fn indices<const BITS: u32>(block: &[u8], _sub: usize) -> [u8; QK] {
    let (nb, mask) = (index_bytes(BITS), (1u8 << BITS) - 1);
    std::array::from_fn(|f| block[2 + f % nb] >> (BITS as usize * (f / nb)) & mask)
}

fn dequantize(blk: &[u8], out: &mut [f32], grid: &[i8]) {
    let d = read_f16(blk);
    let q = indices_of(grid_bits(grid))(blk, 0);
    for (o, q) in out.iter_mut().zip(q) {
        *o = d * grid[q as usize] as f32;
    }
}

/// The nearest grid index of `v / d` (the lowest index on a tie).
fn nearest(v: f32, d: f32, grid: &[i8]) -> u8 {
    let mut best = (f32::INFINITY, 0u8);
    for (i, &g) in grid.iter().enumerate() {
        let e = (v - d * g as f32).abs();
        if e < best.0 {
            best = (e, i as u8);
        }
    }
    best.1
}

/// Squared error of `x` on the grid at scale `d`, with its indices.
fn fit(x: &[f32], d: f32, grid: &[i8]) -> (f64, [u8; QK]) {
    let mut q = [0u8; QK];
    let mut err = 0f64;
    for (o, &v) in q.iter_mut().zip(x) {
        *o = nearest(v, d, grid);
        err += ((v - d * grid[*o as usize] as f32) as f64).powi(2);
    }
    (err, q)
}

/// kgen's reference quantizer: the f16 scale of least squared error over a
/// deterministic search (scales from half to 1.2 times the one that puts
/// the block's extreme value on the grid's extreme level, each refined once
/// by least squares), then the nearest index of every value at that
/// stored scale. A block with a non-finite value gets a NaN or infinite
/// scale, which loading refuses.
fn quantize(x: &[f32], out: &mut Vec<u8>, grid: &[i8]) {
    let (gmin, gmax) = (grid[0] as f32, grid[grid.len() - 1] as f32);
    let (lo, hi) = x
        .iter()
        .fold((0f32, 0f32), |(l, h), &v| (l.min(v), h.max(v)));
    // The scale that maps the block's extremes inside the grid's range.
    let d0 = (hi / gmax).max(lo / gmin);
    let mut best = (f64::INFINITY, 0f32);
    if !d0.is_finite() || x.iter().any(|v| !v.is_finite()) {
        best.1 = if x.iter().any(|v| v.is_nan()) {
            f32::NAN
        } else {
            f32::INFINITY
        };
    } else if !half::f16::from_f32(0.5 * d0).is_finite() {
        // Beyond f16 even at the smallest scale tried: an infinite scale,
        // which loading refuses (as Q4_0's overflowing `d` is), rather than
        // a block of zeros.
        best.1 = f32::INFINITY;
    } else if d0 > 0.0 {
        for step in 0..15 {
            let d = d0 * (0.5 + 0.05 * step as f32);
            let (_, q) = fit(x, d, grid);
            // Least squares for these indices: d = sum(x g) / sum(g^2).
            let (xg, gg) = q.iter().zip(x).fold((0f64, 0f64), |(a, b), (&i, &v)| {
                let g = grid[i as usize] as f64;
                (a + v as f64 * g, b + g * g)
            });
            for d in [d, if gg > 0.0 { (xg / gg) as f32 } else { d }] {
                let d = half::f16::from_f32(d).to_f32();
                let (e, _) = fit(x, d, grid);
                if e < best.0 && d > 0.0 {
                    best = (e, d);
                }
            }
        }
    }
    let d = best.1;
    write_f16(out, d);
    let q = if d.is_finite() && d > 0.0 {
        fit(x, d, grid).1
    } else {
        // A zero block: the index of level 0, or of the smallest level.
        let zero = grid
            .iter()
            .enumerate()
            .min_by_key(|(_, &g)| g.unsigned_abs())
            .map_or(0, |(i, _)| i as u8);
        [zero; QK]
    };
    let bits = grid_bits(grid);
    let (start, nb) = (out.len(), index_bytes(bits));
    out.resize(start + nb, 0);
    for (f, &i) in q.iter().enumerate() {
        out[start + f % nb] |= i << (bits as usize * (f / nb));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ggml::GgmlType;
    use crate::format::rng::Rng;

    #[test]
    fn own_ids_are_never_gguf_types() {
        for t in [GgmlType::K2_BB, GgmlType::K2_PL, GgmlType::K1] {
            assert!(!t.is_gguf());
            assert_eq!(GgmlType::from_id(t.id()), None, "{t}");
            assert_eq!(
                crate::format::by_tag(t.tag()).map(|f| f.name),
                Some(t.name())
            );
        }
        assert!(GgmlType::TQ2_0.is_gguf());
    }

    #[test]
    fn block_order_and_tables() {
        for (fmt, grid) in [(&K2_BB, BIT_BALANCED), (&K2_PL, PLAIN)] {
            let q: [u8; QK] = std::array::from_fn(|f| ((f * 5 + f / 7) % 4) as u8);
            let mut b = vec![0u8; fmt.block_bytes];
            b[..2].copy_from_slice(&half::f16::from_f32(0.25).to_bits().to_le_bytes());
            for f in 0..QK {
                b[2 + f % 8] |= q[f] << (2 * (f / 8));
            }
            let mut w = [0f32; QK];
            (fmt.dequantize)(&b, &mut w);
            let repack = fmt.int8.unwrap();
            assert_eq!((repack.block_levels)(&b, 0), q);
            for f in 0..QK {
                assert_eq!(w[f], 0.25 * grid[q[f] as usize] as f32);
                assert_eq!(fmt.level_value(q[f]), grid[q[f] as usize] as i32);
            }
            // Tables: field c of nibble n, plus the offset 2.
            assert_eq!(fmt.offset(), 2);
            let t = fmt.grid_tables().unwrap();
            assert_eq!(t.len(), 2);
            for n in 0..16 {
                assert_eq!(t[0][n] as i32, grid[n & 3] as i32 + 2);
                assert_eq!(t[1][n] as i32, grid[n >> 2] as i32 + 2);
            }
        }
    }

    #[test]
    fn one_bit_block_order_and_tables() {
        let q: [u8; QK] = std::array::from_fn(|f| ((f * 5 + f / 7) % 2) as u8);
        let mut b = vec![0u8; K1.block_bytes];
        assert_eq!(b.len(), 6);
        b[..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        for f in 0..QK {
            b[2 + f % 4] |= q[f] << (f / 4);
        }
        let mut w = [0f32; QK];
        (K1.dequantize)(&b, &mut w);
        assert_eq!((K1.int8.unwrap().block_levels)(&b, 0), q);
        for f in 0..QK {
            assert_eq!(w[f], if q[f] == 1 { 0.5 } else { -0.5 });
        }
        assert_eq!(K1.offset(), 1);
        let t = K1.grid_tables().unwrap();
        assert_eq!(t.len(), 4);
        for (c, table) in t.iter().enumerate() {
            for (n, &v) in table.iter().enumerate() {
                assert_eq!(v, 2 * ((n >> c) & 1) as i8);
            }
        }
        // The least-squares scale of signs is the mean magnitude.
        let x: Vec<f32> = (0..QK)
            .map(|f| if f % 3 == 0 { -1.5 } else { 0.5 })
            .collect();
        let mut b = Vec::new();
        (K1.quantize)(&x, &mut b);
        let mean = x.iter().map(|v| v.abs()).sum::<f32>() / QK as f32;
        assert_eq!(read_f16(&b), half::f16::from_f32(mean).to_f32());
    }

    #[test]
    fn quantizer_finds_grid_values_and_beats_the_extreme_scale() {
        let mut rng = Rng::new(11);
        for (fmt, grid) in [(&K2_BB, BIT_BALANCED), (&K2_PL, PLAIN)] {
            // Values on the grid (the extreme level included) come back
            // exactly.
            let mut x: Vec<f32> = (0..QK)
                .map(|_| 0.5 * grid[rng.below(4) as usize] as f32)
                .collect();
            x[0] = 0.5 * grid[3] as f32;
            let mut b = Vec::new();
            (fmt.quantize)(&x, &mut b);
            let mut w = [0f32; QK];
            (fmt.dequantize)(&b, &mut w);
            assert_eq!(&w[..], &x[..], "{}", fmt.tag);
            // Gaussian blocks: no worse than the plain extreme-value scale.
            for _ in 0..50 {
                let x = crate::format::ggml::kquant::gaussian(&mut rng, QK);
                let mut b = Vec::new();
                (fmt.quantize)(&x, &mut b);
                assert_eq!(b.len(), fmt.block_bytes);
                let mut w = [0f32; QK];
                (fmt.dequantize)(&b, &mut w);
                let err: f64 = x
                    .iter()
                    .zip(&w)
                    .map(|(a, b)| ((a - b) as f64).powi(2))
                    .sum();
                let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = half::f16::from_f32(amax / 2.0).to_f32();
                let (naive, _) = fit(&x, d, &grid);
                assert!(err <= naive * 1.0001, "{}: {err} > {naive}", fmt.tag);
            }
        }
    }

    #[test]
    fn zero_and_non_finite_blocks() {
        for fmt in [&K2_BB, &K2_PL, &K1] {
            let mut b = Vec::new();
            (fmt.quantize)(&[0.0; QK], &mut b);
            let mut w = [1f32; QK];
            (fmt.dequantize)(&b, &mut w);
            assert!(w.iter().all(|&v| v == 0.0), "{}", fmt.tag);
            let mut x = [0.5f32; QK];
            x[3] = f32::NAN;
            let mut b = Vec::new();
            (fmt.quantize)(&x, &mut b);
            assert!(read_f16(&b).is_nan());
            // Finite values whose scale overflows f16: infinite, not zero.
            x[3] = 1e30;
            let mut b = Vec::new();
            (fmt.quantize)(&x, &mut b);
            assert_eq!(read_f16(&b), f32::INFINITY, "{}", fmt.tag);
        }
    }
}
