//! Activations of the int8 family: quantized per 32-value block on every
//! call (Q8_0 arithmetic), in the order a kernel reads them, and the exact
//! oracle the int8 kernels are checked against.

use crate::format::ggml::{GgmlMatrix, GgmlType, QK};
use crate::layout::align::round_up;
use crate::layout::int8::block_levels;
use half::f16;

/// Activations quantized per 32-block (Q8_0 arithmetic): `m x k_pad` int8
/// levels, `m x blocks` scales, and `m x blocks` corrections
/// `bias * sum(q)` (the format's level offset: 8 for Q4_0, 0 for 8-bit and
/// IQ4_NL codebook weights).
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
    /// 8 for Q4_0's unsigned nibbles, 0 for signed and codebook levels); the
    /// kernels remove `bias * sum(q)` per block.
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
}

impl ActFormat {
    /// Plain row order and scales for weights of `format`.
    pub fn plain(format: GgmlType) -> ActFormat {
        ActFormat {
            bias: format.format().offset(),
            row_pairs: false,
            scale: 1.0,
        }
    }

    /// The bias the kernels remove per block.
    pub fn bias(&self) -> i32 {
        self.bias
    }
}

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
    let blocks = k_pad / QK;
    let bias = fmt.bias();
    let rows = if fmt.row_pairs { m.div_ceil(2) * 2 } else { m };
    let d_per_row = if fmt.row_pairs { 2 } else { 1 };
    let mut out = QuantizedActivations {
        q: vec![0; rows * k_pad],
        d: vec![0.0; rows * blocks * d_per_row],
        c: vec![0; m * blocks],
    };
    let mut buf = [0f32; QK];
    for r in 0..m {
        for b in 0..blocks {
            let lo = b * QK;
            let hi = (lo + QK).min(k);
            buf.fill(0.0);
            if lo < k {
                buf[..hi - lo].copy_from_slice(&x[r * k + lo..r * k + hi]);
            }
            let amax = buf.iter().fold(0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            let mut sum = 0i32;
            let (pair, odd) = (r / 2, r % 2);
            for (i, v) in buf.iter().enumerate() {
                let q = (v * id).round().clamp(-127.0, 127.0) as i8;
                let at = if fmt.row_pairs {
                    pair * 2 * k_pad + b * 2 * QK + (i / 8) * 16 + odd * 8 + i % 8
                } else {
                    r * k_pad + lo + i
                };
                out.q[at] = q;
                sum += q as i32;
            }
            if fmt.row_pairs {
                let at = (pair * blocks + b) * 4 + 2 * odd;
                out.d[at..at + 2].fill(d * fmt.scale);
            } else {
                out.d[r * blocks + b] = d * fmt.scale;
            }
            out.c[r * blocks + b] = bias * sum;
        }
    }
    out
}

/// The oracle for the int8 family: `y = x W` with the activations exactly as
/// quantized in `xa` (`m` rows), integer dot products per block, scaled and
/// summed in f64. Returns `m x n`.
pub fn reference_i8(w: &GgmlMatrix, xa: &QuantizedActivations, m: usize) -> Vec<f64> {
    let k_pad = round_up(w.k, QK);
    let blocks = w.k / QK;
    let xb = k_pad / QK;
    let mut y = vec![0f64; m * w.n];
    let fmt = w.dtype.format();
    for j in 0..w.n {
        for b in 0..blocks {
            let block = w.block(j, b);
            let dw = f16::from_bits(u16::from_le_bytes([block[0], block[1]])).to_f64();
            let levels = block_levels(w.dtype, block);
            for r in 0..m {
                let xs = &xa.q[r * k_pad + b * QK..r * k_pad + (b + 1) * QK];
                let dot: i64 = levels
                    .iter()
                    .zip(xs)
                    .map(|(&l, &x)| fmt.level_value(l) as i64 * x as i64)
                    .sum();
                y[r * w.n + j] += dw * xa.d[r * xb + b] as f64 * dot as f64;
            }
        }
    }
    y
}
