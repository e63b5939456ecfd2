//! The ISA-neutral quantized matrix (GPTQ packing) and the scalar oracle.
//!
//! A [`GptqMatrix`] holds `W` (K x N, `y = x W`) the way GPTQ checkpoints do:
//! `qweight` is `word_rows x N` u32, each word holding `32 / bits` consecutive
//! K values of one column, least significant bits first; 3-bit packs 32 values
//! into three consecutive words as one 96-bit little-endian stream. Scales and
//! zero points are `groups x N`. The dequantized weight is `s * (q - z)`.

use crate::format::error::FormatError;
use crate::format::rng::Rng;
use crate::spec::Group;

#[derive(Clone, Debug, PartialEq)]
pub struct GptqMatrix {
    pub k: usize,
    pub n: usize,
    pub bits: u32,
    pub group: Group,
    /// `word_rows() x n`.
    pub qweight: Vec<u32>,
    /// `groups() x n`.
    pub scales: Vec<f32>,
    /// `groups() x n`, already in the `q - z` convention (GPTQ v1 files store z - 1).
    pub zeros: Vec<f32>,
}

impl GptqMatrix {
    /// Rows of u32 words needed for `k` values (K padded to whole 32-value units).
    pub fn word_rows_for(k: usize, bits: u32) -> usize {
        k.div_ceil(32) * bits as usize
    }

    pub fn word_rows(&self) -> usize {
        Self::word_rows_for(self.k, self.bits)
    }

    pub fn group_size(&self) -> usize {
        self.group.size().unwrap_or(self.k.max(1))
    }

    pub fn groups(&self) -> usize {
        self.k.div_ceil(self.group_size()).max(1)
    }

    /// Checks that every buffer has the length the shape implies and every zero
    /// point is a level of the format.
    pub fn validate(&self) -> Result<(), FormatError> {
        if self.k == 0 || self.n == 0 {
            return Err(FormatError(format!("empty matrix {}x{}", self.k, self.n)));
        }
        if ![2, 3, 4, 8].contains(&self.bits) {
            return Err(FormatError(format!(
                "{} bits per weight is not a GPTQ format",
                self.bits
            )));
        }
        let want = |name: &str, got: usize, want: usize| {
            if got != want {
                Err(FormatError(format!(
                    "{name} has {got} elements, a {}x{} {}-bit matrix with group {} needs {want}",
                    self.k, self.n, self.bits, self.group
                )))
            } else {
                Ok(())
            }
        };
        want("qweight", self.qweight.len(), self.word_rows() * self.n)?;
        want("scales", self.scales.len(), self.groups() * self.n)?;
        want("zeros", self.zeros.len(), self.groups() * self.n)?;
        if let Some(z) = self.zeros.iter().find(|z| !z.is_finite()) {
            return Err(FormatError(format!("zero point {z} is not finite")));
        }
        // Files store `z - 1` in `bits` bits, so `z` is at most 2^bits.
        let levels = (1u32 << self.bits) - 1;
        if let Some(z) = self
            .zeros
            .iter()
            .find(|&&z| !(0.0..=levels as f32 + 1.0).contains(&z))
        {
            return Err(FormatError(format!(
                "zero point {z} is outside the {}-bit levels (0..={})",
                self.bits,
                levels + 1
            )));
        }
        if let Some(s) = self.scales.iter().find(|s| !s.is_finite()) {
            return Err(FormatError(format!("scale {s} is not finite")));
        }
        Ok(())
    }

    /// The integer level of `W[i][j]`.
    pub fn q(&self, i: usize, j: usize) -> u32 {
        get_level(&self.qweight, self.n, self.bits, i, j)
    }

    /// Dequantized `W[i][j]` in f64.
    pub fn w(&self, i: usize, j: usize) -> f64 {
        let g = i / self.group_size();
        let s = self.scales[g * self.n + j] as f64;
        let z = self.zeros[g * self.n + j] as f64;
        s * (self.q(i, j) as f64 - z)
    }

    /// Dequantizes the whole matrix, K x N row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.k * self.n];
        for i in 0..self.k {
            for j in 0..self.n {
                out[i * self.n + j] = self.w(i, j) as f32;
            }
        }
        out
    }

    /// Packs integer levels (`k x n` row-major, each `< 2^bits`) GPTQ-style.
    pub fn from_levels(
        k: usize,
        n: usize,
        bits: u32,
        group: Group,
        levels: &[u8],
        scales: Vec<f32>,
        zeros: Vec<f32>,
    ) -> GptqMatrix {
        assert_eq!(levels.len(), k * n);
        let mut qweight = vec![0u32; Self::word_rows_for(k, bits) * n];
        for i in 0..k {
            for j in 0..n {
                set_level(&mut qweight, n, bits, i, j, levels[i * n + j] as u32);
            }
        }
        GptqMatrix {
            k,
            n,
            bits,
            group,
            qweight,
            scales,
            zeros,
        }
    }

    /// Round-to-nearest affine quantization of `w` (`k x n` row-major) per
    /// group and column: the scale maps the group's [min, max] onto the levels.
    pub fn quantize_rtn(k: usize, n: usize, bits: u32, group: Group, w: &[f32]) -> GptqMatrix {
        assert_eq!(w.len(), k * n);
        let gs = group.size().unwrap_or(k.max(1));
        let groups = k.div_ceil(gs).max(1);
        let maxq = ((1u32 << bits) - 1) as f32;
        let mut scales = vec![0f32; groups * n];
        let mut zeros = vec![0f32; groups * n];
        let mut levels = vec![0u8; k * n];
        for g in 0..groups {
            let rows = g * gs..((g + 1) * gs).min(k);
            for j in 0..n {
                let (mut lo, mut hi) = (0f32, 0f32);
                for i in rows.clone() {
                    lo = lo.min(w[i * n + j]);
                    hi = hi.max(w[i * n + j]);
                }
                let s = if hi > lo { (hi - lo) / maxq } else { 1.0 };
                let z = (-lo / s).round().clamp(0.0, maxq);
                scales[g * n + j] = s;
                zeros[g * n + j] = z;
                for i in rows.clone() {
                    levels[i * n + j] = ((w[i * n + j] / s).round() + z).clamp(0.0, maxq) as u8;
                }
            }
        }
        Self::from_levels(k, n, bits, group, &levels, scales, zeros)
    }

    /// The oracle: `y = x W` for `m` rows of `x` (`m x k`), dequantizing and
    /// accumulating in f64. Returns `m x n`.
    pub fn reference_gemm(&self, x: &[f32], m: usize) -> Vec<f64> {
        assert_eq!(x.len(), m * self.k);
        let mut y = vec![0f64; m * self.n];
        for i in 0..self.k {
            for j in 0..self.n {
                let w = self.w(i, j);
                for r in 0..m {
                    y[r * self.n + j] += x[r * self.k + i] as f64 * w;
                }
            }
        }
        y
    }
}

/// Bit position of value `i` inside its column's word stream.
fn level_pos(bits: u32, i: usize) -> (usize, u32) {
    let bit = i * bits as usize;
    (bit / 32, (bit % 32) as u32)
}

fn get_level(qweight: &[u32], n: usize, bits: u32, i: usize, j: usize) -> u32 {
    let (row, shift) = level_pos(bits, i);
    let mask = (1u32 << bits) - 1;
    let mut v = qweight[row * n + j] >> shift;
    if shift + bits > 32 {
        v |= qweight[(row + 1) * n + j] << (32 - shift);
    }
    v & mask
}

fn set_level(qweight: &mut [u32], n: usize, bits: u32, i: usize, j: usize, v: u32) {
    let (row, shift) = level_pos(bits, i);
    let mask = (1u32 << bits) - 1;
    let v = v & mask;
    qweight[row * n + j] |= v << shift;
    if shift + bits > 32 {
        qweight[(row + 1) * n + j] |= v >> (32 - shift);
    }
}

/// A random GPTQ matrix with arbitrary levels, positive scales and zeros.
pub fn random_gptq(k: usize, n: usize, bits: u32, group: Group, seed: u64) -> GptqMatrix {
    let mut rng = Rng::new(seed);
    let levels: Vec<u8> = (0..k * n).map(|_| rng.below(1 << bits) as u8).collect();
    let groups = k.div_ceil(group.size().unwrap_or(k.max(1))).max(1);
    let scales = (0..groups * n)
        .map(|_| 0.01 + 0.05 * (rng.f32() + 1.0))
        .collect();
    let zeros = (0..groups * n)
        .map(|_| rng.below(1 << bits) as f32)
        .collect();
    GptqMatrix::from_levels(k, n, bits, group, &levels, scales, zeros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_round_trip_for_every_width() {
        for bits in [2, 3, 4, 8] {
            let k = 70;
            let n = 3;
            let levels: Vec<u8> = (0..k * n)
                .map(|i| ((i * 7 + 3) % (1 << bits)) as u8)
                .collect();
            let m = GptqMatrix::from_levels(
                k,
                n,
                bits,
                Group::Column,
                &levels,
                vec![1.0; n],
                vec![0.0; n],
            );
            for i in 0..k {
                for j in 0..n {
                    assert_eq!(m.q(i, j), levels[i * n + j] as u32, "bits {bits} i {i}");
                }
            }
        }
    }

    #[test]
    fn three_bit_matches_gptq_stream_layout() {
        // value 10 straddles words 0 and 1 at bit 30.
        let mut levels = vec![0u8; 32];
        levels[10] = 0b111;
        let m = GptqMatrix::from_levels(32, 1, 3, Group::Column, &levels, vec![1.0], vec![0.0]);
        assert_eq!(m.qweight, vec![0b11 << 30, 0b1, 0]);
    }

    #[test]
    fn rtn_error_is_within_half_a_step() {
        let (k, n) = (96, 5);
        let w = Rng::new(3).vec_f32(k * n);
        for bits in [2, 3, 4, 8] {
            let q = GptqMatrix::quantize_rtn(k, n, bits, Group::Size(32), &w);
            q.validate().unwrap();
            let d = q.dequantize();
            let mut rel = 0.0;
            for i in 0..k * n {
                let s = q.scales[(i / n / 32) * n + i % n];
                // Rounding is off by at most half a step; clamping at the top
                // level can add up to one more.
                assert!((d[i] - w[i]).abs() <= s * 1.0001, "bits {bits}");
                rel += ((d[i] - w[i]).abs() / s) as f64;
            }
            assert!(
                rel / ((k * n) as f64) < 0.3,
                "bits {bits}: mean error {rel}"
            );
        }
    }
}
