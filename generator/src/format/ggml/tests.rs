use super::*;
use crate::format::ggml::iq4_nl;
use crate::format::ggml::numpy::{argmax_abs, np_cast_i64, read_f16};
use half::f16;

/// Deterministic pseudo-random values in [-scale, scale).
fn rand_vals(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

#[test]
fn type_ids_and_sizes() {
    for t in GgmlType::all().filter(|t| t.is_gguf()) {
        assert_eq!(GgmlType::from_id(t.id()), Some(t));
        assert_eq!(type_name(t.id()), Some(t.name()));
        assert_eq!(type_size(t.id()), Some((t.block_values(), t.block_bytes())));
    }
    assert_eq!(GgmlType::Q4_0.block_bytes(), 18);
    assert_eq!(GgmlType::Q8_0.block_bytes(), 34);
    assert_eq!(GgmlType::from_id(9), None); // Q8_1
    assert_eq!(GgmlType::Q4_K.row_bytes(512), Some(288));
    assert_eq!(GgmlType::Q4_K.row_bytes(32), None);
    assert_eq!(type_name(14), Some("Q6_K"));
    assert_eq!(GgmlType::Q4_0.row_bytes(64), Some(36));
    assert_eq!(GgmlType::Q4_0.row_bytes(48), None);
    assert_eq!(GgmlType::F16.row_bytes(7), Some(14));
}

#[test]
fn round_trips_within_half_a_step() {
    for (k, n) in [(32, 1), (64, 3), (256, 7), (512, 2)] {
        let w = rand_vals(k * n, (k * 31 + n) as u64, 3.0);
        for dtype in GgmlType::all().filter(|t| k % t.block_values() == 0) {
            let m = GgmlMatrix::quantize(&w, k, n, dtype);
            m.validate().unwrap();
            assert_eq!(m.data.len(), m.row_bytes() * n);
            let back = m.dequantize();
            let bv = dtype.block_values();
            for i in 0..k {
                for j in 0..n {
                    let (v, b) = (w[i * n + j], back[i * n + j]);
                    assert_eq!(b.to_bits(), m.get(i, j).to_bits());
                    let d = m.scale(j, i / bv).abs();
                    let blk = m.block(j, i / bv);
                    let min = || read_f16(&blk[2..]).abs();
                    // The K-quants: one step of the super-block's range.
                    let amax = (0..bv)
                        .map(|t| w[(i / bv * bv + t) * n + j].abs())
                        .fold(0f32, f32::max);
                    let tol = match dtype.tag() {
                        "f32" => 0.0,
                        "f16" => v.abs() / 1024.0,
                        // Rounds half up, and values near -max map to
                        // level 15 = +7 d: up to one step.
                        "q4_0" | "q4_0_g128" => d * 1.01,
                        // As Q4_0 (-max maps to level 31 = +15 d), plus
                        // the f16 rounding of d over 16 steps.
                        "q5_0" => d * (1.0 + 16.0 / 1024.0),
                        // Levels come from the f32 d, values from its
                        // f16 rounding: 0.5 d + 127 d 2^-11.
                        "q8_0" => d * 0.6,
                        // Half the widest codebook gap (24) inside the
                        // range; the fitted scale may leave the largest
                        // values up to ~21 d beyond an end.
                        "iq4_nl" => d * 22.0,
                        // Half the widest codebook gap (24) where amax
                        // maps near 113: 0.106 amax, plus the 6-bit
                        // rounding of the fitted scales (0.113 measured).
                        "iq4_xs" => amax * 0.15,
                        // d = 2^(floor(log2 amax) - 3): amax lies in 8 d ..
                        // 16 d, and the top level is 12 d, so the largest
                        // values clip by under 4 d (the widest gap, 8 to
                        // 12, leaves 2 d).
                        "mxfp4" => d * 4.0,
                        // Half a step from the f32 d and min, plus their
                        // f16 rounding (over 15 / 31 steps for d).
                        "q4_1" => d * (0.5 + 15.0 / 2048.0) + min() / 2048.0,
                        "q5_1" => d * (0.5 + 31.0 / 2048.0) + min() / 2048.0,
                        // The fitted scales and mins may clip the ends of a
                        // sub-block by about a step, and their 4- / 6- /
                        // 8-bit rounding adds some: 1.5 steps of the range
                        // (2 amax with a min, amax for the signed Q3_K /
                        // Q6_K, whose largest magnitude maps to -4 / -32).
                        "q2_k" => 1.5 * 2.0 * amax / 3.0,
                        "q3_k" => 1.5 * amax / 4.0,
                        "q4_k" => 1.5 * 2.0 * amax / 15.0,
                        "q5_k" => 1.5 * 2.0 * amax / 31.0,
                        "q6_k" => 1.5 * amax / 32.0,
                        // Ternary: half of d = amax, plus d's f16 rounding.
                        "tq1_0" | "tq2_0" => amax * (0.5 + 1.0 / 1024.0),
                        // kgen's 2-bit grids: the fitted scale may be half
                        // the extreme one, clipping the largest values by
                        // up to half the range.
                        "k2_bb" | "k2_pl" => amax * 0.55,
                        // Signs: d is the mean magnitude, at most amax.
                        "k1" => amax * 1.001,
                        // The lattice i-quants: a grid holds few of the
                        // level patterns (256 of 3^8 for IQ2_XXS), so one
                        // value may land far from its own nearest level;
                        // about 1.2 times the largest error measured here
                        // (their RMS errors: each row's codec file).
                        "iq1_s" | "iq1_m" => amax * 1.05,
                        "iq2_xxs" | "iq2_xs" => amax * 0.9,
                        "iq2_s" => amax * 0.6,
                        "iq3_xxs" => amax * 0.75,
                        "iq3_s" => amax * 0.45,
                        other => panic!("no tolerance for {other}"),
                    };
                    assert!(
                        (v - b).abs() <= tol,
                        "{dtype} W[{i}][{j}] {v} -> {b} (d {d})"
                    );
                }
            }
            if dtype == GgmlType::F32 {
                assert_eq!(back, w);
            }
        }
    }
}

#[test]
fn all_zero_block() {
    let w = vec![0f32; 32 * 2];
    let q4 = GgmlMatrix::quantize_q4_0(&w, 32, 2);
    // d = 0 / -8 = -0.0 (as in numpy), levels all 8, values -0.0.
    assert_eq!(q4.block(0, 0)[..2], [0x00, 0x80]);
    assert!(q4.block(1, 0)[2..].iter().all(|&b| b == 0x88));
    assert!(q4.dequantize().iter().all(|v| *v == 0.0));
    let q8 = GgmlMatrix::quantize_q8_0(&w, 32, 2);
    assert!(q8.data.iter().all(|&b| b == 0));
    assert!(q8.dequantize().iter().all(|v| v.to_bits() == 0));
    q4.validate().unwrap();
    q8.validate().unwrap();
}

#[test]
fn q4_0_nibble_order_and_rounding() {
    // One column: max -8 -> d = 1, so q = trunc(v + 8.5) clamped.
    let mut w = vec![0f32; 32];
    w[0] = -8.0;
    w[1] = 0.5; // 9.0 -> 9
    w[2] = -0.5; // 8.0 -> 8 (ties round up)
    w[3] = 7.9; // 16.4 -> 16 -> 15
    w[16] = 3.0; // element 16: high nibble of byte 0
    w[17] = -3.0;
    let m = GgmlMatrix::quantize_q4_0(&w, 32, 1);
    let blk = m.block(0, 0);
    assert_eq!(read_f16(blk), 1.0);
    assert_eq!(blk[2], 11 << 4);
    assert_eq!(blk[3], 9 | (5 << 4));
    assert_eq!(blk[4], 8 | (8 << 4));
    assert_eq!(blk[5], 15 | (8 << 4));
    let back = m.dequantize();
    assert_eq!(back[0], -8.0);
    assert_eq!(back[1], 1.0);
    assert_eq!(back[2], 0.0);
    assert_eq!(back[3], 7.0);
    assert_eq!(back[16], 3.0);
    assert_eq!(back[17], -3.0);
    // Positive max: d negative.
    let mut w = vec![0f32; 32];
    w[5] = 4.0;
    w[6] = -4.0; // same magnitude later: first wins
    let m = GgmlMatrix::quantize_q4_0(&w, 32, 1);
    assert_eq!(read_f16(m.block(0, 0)), -0.5);
    assert_eq!(m.dequantize()[5], 4.0);
    assert_eq!(m.dequantize()[6], -3.5);
}

#[test]
fn q8_0_rounds_half_away_from_zero() {
    let mut w = vec![0f32; 32];
    w[0] = 127.0; // d = 1
    w[1] = 2.5;
    w[2] = -2.5;
    w[3] = 0.49;
    w[4] = -127.0;
    let m = GgmlMatrix::quantize_q8_0(&w, 32, 1);
    let blk = m.block(0, 0);
    assert_eq!(read_f16(blk), 1.0);
    assert_eq!(blk[2..7], [127, 3, (-3i8) as u8, 0, (-127i8) as u8]);
}

#[test]
fn iq4_nl_decodes_the_codebook_in_q4_0_nibble_order() {
    // Byte b: index b % 16 (low nibble, value b) and 15 - b % 16 (high,
    // value b + 16); d = 0.5.
    let mut blk = f16::from_f32(0.5).to_bits().to_le_bytes().to_vec();
    blk.extend((0..16u8).map(|b| b | ((15 - b) << 4)));
    let m = GgmlMatrix {
        k: 32,
        n: 1,
        dtype: GgmlType::IQ4_NL,
        data: blk,
    };
    m.validate().unwrap();
    let w = m.dequantize();
    for b in 0..16 {
        assert_eq!(w[b], 0.5 * iq4_nl::VALUES[b] as f32);
        assert_eq!(w[b + 16], 0.5 * iq4_nl::VALUES[15 - b] as f32);
    }
    assert_eq!(GgmlType::from_id(20), Some(GgmlType::IQ4_NL));
    assert_eq!(GgmlType::IQ4_NL.block_bytes(), 18);
    assert_eq!(GgmlType::IQ4_NL.name(), "IQ4_NL");
}

#[test]
fn iq4_nl_nearest_index() {
    for (i, &v) in iq4_nl::VALUES.iter().enumerate() {
        assert_eq!(iq4_nl::nearest(v as f32) as usize, i);
    }
    assert_eq!(iq4_nl::nearest(-1000.0), 0);
    assert_eq!(iq4_nl::nearest(1000.0), 15);
    assert_eq!(iq4_nl::nearest(f32::INFINITY), 15);
    assert_eq!(iq4_nl::nearest(f32::NEG_INFINITY), 0);
    // ggml's best_index_int8: no comparison with NaN holds, so the top.
    assert_eq!(iq4_nl::nearest(f32::NAN), 15);
    // Midpoints go up (ggml's best_index_int8), just below goes down.
    assert_eq!(iq4_nl::nearest(-4.5), 8);
    assert_eq!(iq4_nl::nearest(-4.6), 7);
    assert_eq!(iq4_nl::nearest(101.0), 15);
    assert_eq!(iq4_nl::nearest(100.9), 14);
}

#[test]
fn iq4_nl_quantizer() {
    // All zero: d = 0 and index 8 (level 1) everywhere.
    let z = GgmlMatrix::quantize_iq4_nl(&[0.0; 64], 32, 2);
    assert!(z
        .data
        .chunks(18)
        .all(|b| b[..2] == [0, 0] && b[2..].iter().all(|&x| x == 0x88)));
    assert!(z.dequantize().iter().all(|&v| v == 0.0));
    // Values on the codebook grid come back exactly.
    let grid: Vec<f32> = (0..32)
        .map(|i| 0.25 * iq4_nl::VALUES[(i * 7) % 16] as f32)
        .collect();
    let m = GgmlMatrix::quantize_iq4_nl(&grid, 32, 1);
    assert_eq!(m.dequantize(), grid);
    // Bell-shaped weights: IQ4_NL beats Q4_0 in squared error (what the
    // non-linear codebook is for).
    let (k, n) = (256, 16);
    let mut w = rand_vals(k * n, 11, 1.0);
    for v in &mut w {
        *v = *v * *v * *v; // heavier tails than uniform
    }
    let err = |dtype| -> f64 {
        let back = GgmlMatrix::quantize(&w, k, n, dtype).dequantize();
        w.iter()
            .zip(&back)
            .map(|(a, b)| ((a - b) as f64).powi(2))
            .sum()
    };
    let (nl, q4) = (err(GgmlType::IQ4_NL), err(GgmlType::Q4_0));
    assert!(nl < q4, "IQ4_NL error {nl} vs Q4_0 {q4}");
    // Non-finite inputs never panic; a block with inf gets a non-finite
    // scale, which validate() refuses.
    let mut bad = rand_vals(64, 3, 1.0);
    bad[5] = f32::NAN;
    bad[40] = f32::INFINITY;
    let m = GgmlMatrix::quantize_iq4_nl(&bad, 64, 1);
    assert!(m.validate().is_err());
    assert!(m.scale(0, 0).is_finite());
}

#[test]
fn layout_is_k_by_n() {
    // W[i][j] = i + 100 j in F32: row j of the GGUF data is column j of W.
    let (k, n) = (3, 2);
    let w: Vec<f32> = (0..k * n)
        .map(|x| ((x / n) + 100 * (x % n)) as f32)
        .collect();
    let m = GgmlMatrix::quantize(&w, k, n, GgmlType::F32);
    let row1: Vec<f32> = m
        .row(1)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(row1, [100.0, 101.0, 102.0]);
    assert_eq!(m.dequantize(), w);
}

#[test]
fn validate_rejects_bad_matrices() {
    let w = rand_vals(64 * 2, 5, 1.0);
    let good = GgmlMatrix::quantize_q8_0(&w, 64, 2);
    good.validate().unwrap();
    let mut m = good.clone();
    m.k = 48;
    assert!(m.validate().unwrap_err().0.contains("multiple of 32"));
    let mut m = good.clone();
    m.data.pop();
    assert!(m.validate().is_err());
    let mut m = good.clone();
    m.n = 0;
    assert!(m.validate().is_err());
    let mut m = good.clone();
    let bb = GgmlType::Q8_0.block_bytes();
    m.data[3 * bb..3 * bb + 2].copy_from_slice(&f16::INFINITY.to_bits().to_le_bytes());
    let e = m.validate().unwrap_err().0;
    assert!(e.contains("row 1 block 1"), "{e}");
    let mut m = good.clone();
    m.data[0..2].copy_from_slice(&f16::NAN.to_bits().to_le_bytes());
    assert!(m.validate().is_err());
    let m = GgmlMatrix {
        k: usize::MAX / 2 + 1,
        n: 4,
        dtype: GgmlType::F32,
        data: vec![],
    };
    assert!(m.validate().is_err());
    // F16 / F32 take any K.
    let m = GgmlMatrix::quantize(&rand_vals(7 * 3, 2, 1.0), 7, 3, GgmlType::F16);
    m.validate().unwrap();
}

#[test]
#[should_panic(expected = "multiple of 32")]
fn quantize_rejects_ragged_k() {
    GgmlMatrix::quantize_q4_0(&[0.0; 40], 40, 1);
}

#[test]
fn numpy_cast_semantics() {
    assert_eq!(np_cast_i64(f32::NAN) as u8, 0);
    assert_eq!(np_cast_i64(f32::INFINITY) as u8, 0);
    assert_eq!(np_cast_i64(300.0) as u8, 44);
    assert_eq!(np_cast_i64(-1.0) as u8, 255);
    assert_eq!(argmax_abs(&[1.0, -2.0, 2.0]), 1);
    assert_eq!(argmax_abs(&[1.0, f32::NAN, 5.0, f32::NAN]), 1);
}
