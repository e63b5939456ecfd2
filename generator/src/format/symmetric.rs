//! kgen's own symmetric 4/8-bit weights with one scale per group of 32 to
//! 256 values, stored as GGUF Q4_0 / Q8_0 blocks (group 32 is exactly those
//! formats; larger groups repeat the group's scale in each of its blocks).

use crate::format::ggml::{GgmlMatrix, GgmlType, QK};
use crate::format::q4_0_g128::{put_q4_levels, q4_scale};
use half::f16;

/// The table format kgen's symmetric `bits`-bit groups are stored as
/// (`bits` 4 or 8): Q4_0 or Q8_0 blocks.
pub fn storage(bits: u32) -> GgmlType {
    if bits == 4 {
        GgmlType::Q4_0
    } else {
        GgmlType::Q8_0
    }
}

/// Quantizes f32 weights (`k x n` row-major, `y = x W`) to symmetric `bits`
/// levels with one scale per `group` values along K (32: exactly GGUF Q4_0 /
/// Q8_0; larger groups put the group's scale in each of its 32-blocks), K
/// padded with zeros to a multiple of 32.
pub fn quantize_symmetric(w: &[f32], k: usize, n: usize, bits: u32, group: usize) -> GgmlMatrix {
    assert!(bits == 4 || bits == 8);
    assert!(group.is_multiple_of(QK) && group > 0);
    assert_eq!(w.len(), k * n);
    let k_pad = k.max(1).div_ceil(QK) * QK;
    if group == QK {
        // Exactly the reference quantizers, on K padded with zero rows.
        let mut wp = w.to_vec();
        wp.resize(k_pad * n, 0.0);
        return if bits == 4 {
            GgmlMatrix::quantize_q4_0(&wp, k_pad, n)
        } else {
            GgmlMatrix::quantize_q8_0(&wp, k_pad, n)
        };
    }
    let mut wt = vec![0f32; n * k_pad];
    for i in 0..k {
        for j in 0..n {
            wt[j * k_pad + i] = w[i * n + j];
        }
    }
    let dtype = storage(bits);
    let blocks = k_pad / QK;
    let block_bytes = dtype.block_bytes();
    let mut data = vec![0u8; n * blocks * block_bytes];
    for j in 0..n {
        let row = &wt[j * k_pad..(j + 1) * k_pad];
        for g0 in (0..k_pad).step_by(group) {
            let vals = &row[g0..(g0 + group).min(k_pad)];
            let d = if bits == 4 {
                q4_scale(vals)
            } else {
                vals.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0
            };
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let dh = f16::from_f32(d).to_bits().to_le_bytes();
            for b in (g0 / QK)..((g0 + vals.len()) / QK) {
                let out =
                    &mut data[(j * blocks + b) * block_bytes..(j * blocks + b + 1) * block_bytes];
                out[..2].copy_from_slice(&dh);
                let v = &row[b * QK..(b + 1) * QK];
                if bits == 4 {
                    put_q4_levels(v, d, &mut out[2..]);
                } else {
                    for i in 0..QK {
                        out[2 + i] = (v[i] * id).round().clamp(-127.0, 127.0) as i8 as u8;
                    }
                }
            }
        }
    }
    GgmlMatrix {
        k: k_pad,
        n,
        dtype,
        data,
    }
}
