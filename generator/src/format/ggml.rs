//! GGML weight blocks as GGUF files store them (F32, F16, Q4_0, Q8_0,
//! IQ4_NL), with the reference quantizer and dequantizer.
//!
//! A GGUF weight tensor has `ne[0] = K` (contiguous, input features) and
//! `ne[1] = N` (rows, output features). Each row is a run of blocks along K:
//!
//! | type | values / block | bytes / block | block                                   |
//! |------|----------------|---------------|-----------------------------------------|
//! | F32  | 1              | 4             | `f32` little-endian                     |
//! | F16  | 1              | 2             | IEEE binary16 little-endian             |
//! | Q4_0 | 32             | 18            | `f16 d`, 16 bytes: byte `b` holds element `b` in its low nibble and `b + 16` in its high nibble; value `(nibble - 8) * d` |
//! | Q8_0 | 32             | 34            | `f16 d`, 32 `i8` `q`; value `q * d`      |
//! | IQ4_NL | 32           | 18            | `f16 d`, 16 bytes of 4-bit indices in Q4_0's nibble order; value `d * IQ4_NL_VALUES[index]` |
//!
//! Our convention is `y = x W` with `W` K x N, so `W[i][j]` is element `i` of
//! GGUF row `j`.
//!
//! The arithmetic is that of llama.cpp's gguf-py (`gguf.quants`), which works
//! in numpy float32; [`GgmlMatrix::dequantize`] and the quantizers reproduce
//! it bit for bit (the tests in `runtime/tests/gguf.rs` compare against it).
//! gguf-py has no IQ4_NL quantizer; kgen's ([`GgmlMatrix::quantize_iq4_nl`])
//! follows ggml's search for the block scale, and its output is checked by
//! dequantizing it with gguf-py.

use crate::format::error::FormatError;
use half::f16;
use std::fmt;

/// Values per block of the quantized types.
pub const QK: usize = 32;

/// The GGML tensor types kgen reads and writes.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q8_0,
    /// 4-bit indices into the non-linear codebook [`IQ4_NL_VALUES`].
    Iq4Nl,
}

/// IQ4_NL's codebook (ggml's `kvalues_iq4nl`): the int8 level of each 4-bit
/// index, before the block scale.
pub const IQ4_NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

impl GgmlType {
    pub const ALL: [GgmlType; 5] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Iq4Nl,
    ];

    /// The GGUF / ggml type id.
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q8_0 => 8,
            GgmlType::Iq4Nl => 20,
        }
    }

    /// The type with this GGUF id, if kgen supports it.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The ggml name ("Q4_0", ...).
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Iq4Nl => "IQ4_NL",
        }
    }

    /// Values per block (1 for the float types).
    pub fn block_values(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 => 1,
            GgmlType::Q4_0 | GgmlType::Q8_0 | GgmlType::Iq4Nl => QK,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 => 2,
            GgmlType::Q4_0 | GgmlType::Iq4Nl => 2 + QK / 2,
            GgmlType::Q8_0 => 2 + QK,
        }
    }

    pub fn is_quantized(self) -> bool {
        self.block_values() > 1
    }

    /// Bytes of one row of `k` values; `None` if `k` is not a whole number of
    /// blocks or the size overflows.
    pub fn row_bytes(self, k: usize) -> Option<usize> {
        if !k.is_multiple_of(self.block_values()) {
            return None;
        }
        (k / self.block_values()).checked_mul(self.block_bytes())
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Every ggml tensor type a GGUF file may name: (id, name, values per block,
/// bytes per block). Ids that ggml retired (4, 5, 31-33, 36-38) are absent.
pub const GGML_TYPES: &[(u32, &str, usize, usize)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 40),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

/// The ggml name of a type id, if it is a known type.
pub fn type_name(id: u32) -> Option<&'static str> {
    GGML_TYPES.iter().find(|t| t.0 == id).map(|t| t.1)
}

/// (values per block, bytes per block) of a known type id.
pub fn type_size(id: u32) -> Option<(usize, usize)> {
    GGML_TYPES.iter().find(|t| t.0 == id).map(|t| (t.2, t.3))
}

/// A weight matrix as GGUF stores it: `n` rows (output features) of `k`
/// values (input features), each row a sequence of blocks along `k`.
/// `W` (K x N, `y = x W`) has `W[i][j]` = row `j`, element `i`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgmlMatrix {
    pub k: usize,
    pub n: usize,
    pub dtype: GgmlType,
    /// `n` rows of [`GgmlMatrix::row_bytes`] bytes.
    pub data: Vec<u8>,
}

fn read_f16(b: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

fn write_f16(out: &mut Vec<u8>, v: f32) {
    // Round to nearest even, as numpy's astype(np.float16).
    out.extend_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// numpy's float32 -> integer `astype` on x86-64 (what gguf-py runs): a
/// truncating conversion through a signed integer, so out-of-range values
/// wrap, and NaN / infinities / values beyond the 64-bit range become the
/// "integer indefinite" `i64::MIN`, whose low byte is 0. With a finite `1 / d`
/// the levels stay within a few ulps of their range, so what matters in
/// practice is the non-finite case: inf / NaN inputs, or blocks whose `d` is
/// below 2^-128 (all weights under ~2^-125), where `1 / d` overflows and the
/// products are inf or NaN. Those levels become 0 (Q4_0: clamped 0).
fn np_cast_i64(x: f32) -> i64 {
    if x.is_finite() && x.abs() < 9.223_372e18 {
        x as i64
    } else {
        i64::MIN
    }
}

/// Index of the first element of largest magnitude, numpy `argmax(abs(x))`
/// semantics (a NaN counts as the maximum, the first one wins).
fn argmax_abs(x: &[f32]) -> usize {
    let mut best = 0;
    let mut best_abs = x[0].abs();
    for (i, v) in x.iter().enumerate().skip(1) {
        if best_abs.is_nan() {
            break;
        }
        let a = v.abs();
        if a.is_nan() || a > best_abs {
            best = i;
            best_abs = a;
        }
    }
    best
}

/// One Q4_0 block, as gguf-py's `Q4_0.quantize_blocks`.
fn quantize_block_q4_0(x: &[f32], out: &mut Vec<u8>) {
    let max = x[argmax_abs(x)];
    let d = max / -8.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let q = |v: f32| -> u8 { (np_cast_i64((v * id + 8.5).trunc()) as u8).min(15) };
    write_f16(out, d);
    for b in 0..QK / 2 {
        out.push(q(x[b]) | (q(x[b + QK / 2]) << 4));
    }
}

/// One Q8_0 block, as gguf-py's `Q8_0.quantize_blocks`.
fn quantize_block_q8_0(x: &[f32], out: &mut Vec<u8>) {
    // np.max propagates NaN.
    let amax = x.iter().fold(0f32, |m, v| {
        if m.is_nan() || v.is_nan() {
            f32::NAN
        } else {
            m.max(v.abs())
        }
    });
    let d = amax / 127.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    write_f16(out, d);
    for &v in x {
        // gguf-py's np_roundf rounds half away from zero, exactly f32::round
        // for every f32 (its floor/fraction steps are exact).
        out.push(np_cast_i64((v * id).round()) as u8);
    }
}

/// Index of the codebook value nearest to `v` (ties to the larger value, as
/// ggml's `best_index_int8`); NaN gives 0.
fn iq4_nl_nearest(v: f32) -> u8 {
    let vals = &IQ4_NL_VALUES;
    if v.is_nan() || v <= vals[0] as f32 {
        return 0;
    }
    // First value >= v; v lies between it and its predecessor.
    let hi = vals.iter().position(|&c| c as f32 >= v).unwrap_or(15);
    if hi == 0 || vals[hi] as f32 <= v {
        return hi as u8;
    }
    let (a, b) = (vals[hi - 1] as f32, vals[hi] as f32);
    if v - a < b - v {
        (hi - 1) as u8
    } else {
        hi as u8
    }
}

/// Trials of IQ4_NL's scale search either side of mapping the largest
/// magnitude onto the codebook's -127 end (ggml uses 7 without an importance
/// matrix).
const IQ4_NL_TRIES: i32 = 7;

/// One IQ4_NL block: the scale minimizing the squared error weighted by
/// `v^2`, searched as ggml's `quantize_iq4_nl` does without an importance
/// matrix: a least-squares fit after mapping the largest magnitude onto
/// `+127`, then after mapping it onto each of `-127 - 7 ..= -127 + 7`;
/// indices are the nearest codebook values for the chosen scale (f32), which
/// is stored as f16.
fn quantize_block_iq4_nl(x: &[f32], out: &mut Vec<u8>) {
    // First value of largest magnitude (NaN never wins, as in ggml).
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let mut idx = [8u8; QK]; // value 1 * d = 0 for an all-zero block
    let mut d = 0f32;
    if amax >= 1e-15 {
        // Weighted least squares for the indices `id` picks: (d, d * sum q x w).
        let fit = |id: f32| -> (f32, f32, f32) {
            let (mut sqx, mut sq2) = (0f32, 0f32);
            for &v in x {
                let q = IQ4_NL_VALUES[iq4_nl_nearest(id * v) as usize] as f32;
                let w = v * v;
                sqx += w * q * v;
                sq2 += w * q * q;
            }
            (sqx, sq2, if sq2 > 0.0 { sqx / sq2 } else { 0.0 })
        };
        let (sqx, _, d0) = fit(127.0 / max);
        d = d0;
        let mut best = d * sqx;
        for t in -IQ4_NL_TRIES..=IQ4_NL_TRIES {
            let (sqx, sq2, dt) = fit((t as f32 - 127.0) / max);
            if sq2 > 0.0 && sqx * sqx > best * sq2 {
                d = dt;
                best = d * sqx;
            }
        }
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (l, &v) in idx.iter_mut().zip(x) {
            *l = iq4_nl_nearest(id * v);
        }
    }
    write_f16(out, d);
    for b in 0..QK / 2 {
        out.push(idx[b] | (idx[b + QK / 2] << 4));
    }
}

impl GgmlMatrix {
    /// Blocks per row.
    pub fn blocks_per_row(&self) -> usize {
        self.k / self.dtype.block_values()
    }

    /// Bytes per row (of a matrix whose `k` is a whole number of blocks).
    pub fn row_bytes(&self) -> usize {
        self.blocks_per_row() * self.dtype.block_bytes()
    }

    /// Checks the shape, the data length and that every block scale is finite.
    pub fn validate(&self) -> Result<(), FormatError> {
        if self.k == 0 || self.n == 0 {
            return Err(FormatError(format!(
                "empty {} matrix {}x{}",
                self.dtype, self.k, self.n
            )));
        }
        let row = self.dtype.row_bytes(self.k).ok_or_else(|| {
            FormatError(format!(
                "{} needs K to be a multiple of {}, got K = {}",
                self.dtype,
                self.dtype.block_values(),
                self.k
            ))
        })?;
        let want = row.checked_mul(self.n).ok_or_else(|| {
            FormatError(format!(
                "{} matrix {}x{} is too large",
                self.dtype, self.k, self.n
            ))
        })?;
        if self.data.len() != want {
            return Err(FormatError(format!(
                "{} matrix K={} N={} needs {want} bytes, got {}",
                self.dtype,
                self.k,
                self.n,
                self.data.len()
            )));
        }
        if self.dtype.is_quantized() {
            for (b, blk) in self.data.chunks_exact(self.dtype.block_bytes()).enumerate() {
                let d = read_f16(blk);
                if !d.is_finite() {
                    let per_row = self.blocks_per_row();
                    return Err(FormatError(format!(
                        "{} scale {d} of row {} block {} is not finite",
                        self.dtype,
                        b / per_row,
                        b % per_row
                    )));
                }
            }
        }
        Ok(())
    }

    /// The bytes of GGUF row `row` (column `row` of `W`).
    ///
    /// Panics if `row >= n` or the data is shorter than the shape needs.
    pub fn row(&self, row: usize) -> &[u8] {
        assert!(row < self.n, "row {row} of a matrix with {} rows", self.n);
        let rb = self.row_bytes();
        &self.data[row * rb..(row + 1) * rb]
    }

    /// The bytes of block `blk` of GGUF row `row` (values
    /// `blk * block_values ..` of column `row` of `W`).
    ///
    /// Panics if out of range.
    pub fn block(&self, row: usize, blk: usize) -> &[u8] {
        assert!(
            blk < self.blocks_per_row(),
            "block {blk} of a row with {} blocks",
            self.blocks_per_row()
        );
        let bb = self.dtype.block_bytes();
        &self.row(row)[blk * bb..(blk + 1) * bb]
    }

    /// The scale `d` of a quantized block, converted to f32 (1.0 for the float
    /// types).
    pub fn scale(&self, row: usize, blk: usize) -> f32 {
        if self.dtype.is_quantized() {
            read_f16(self.block(row, blk))
        } else {
            1.0
        }
    }

    /// Decodes one block into `out` (`block_values` values), in gguf-py's
    /// float32 arithmetic.
    fn decode_block(dtype: GgmlType, blk: &[u8], out: &mut [f32]) {
        match dtype {
            GgmlType::F32 => out[0] = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]),
            GgmlType::F16 => out[0] = read_f16(blk),
            GgmlType::Q4_0 => {
                let d = read_f16(blk);
                for (b, &byte) in blk[2..2 + QK / 2].iter().enumerate() {
                    out[b] = d * ((byte & 0x0f) as i8 - 8) as f32;
                    out[b + QK / 2] = d * ((byte >> 4) as i8 - 8) as f32;
                }
            }
            GgmlType::Q8_0 => {
                let d = read_f16(blk);
                for (o, &q) in out.iter_mut().zip(&blk[2..2 + QK]) {
                    *o = q as i8 as f32 * d;
                }
            }
            GgmlType::Iq4Nl => {
                let d = read_f16(blk);
                let v = |i: u8| IQ4_NL_VALUES[i as usize] as f32;
                for (b, &byte) in blk[2..2 + QK / 2].iter().enumerate() {
                    out[b] = d * v(byte & 0x0f);
                    out[b + QK / 2] = d * v(byte >> 4);
                }
            }
        }
    }

    /// Dequantized `W[i][j]`.
    ///
    /// Panics if out of range.
    pub fn get(&self, i: usize, j: usize) -> f32 {
        assert!(i < self.k, "element {i} of K = {}", self.k);
        let bv = self.dtype.block_values();
        let mut vals = [0f32; QK];
        Self::decode_block(self.dtype, self.block(j, i / bv), &mut vals[..bv]);
        vals[i % bv]
    }

    /// Dequantizes the whole matrix, K x N row-major (`W[i][j]` at `i * n + j`),
    /// bit for bit what gguf-py's `dequantize` gives (transposed).
    ///
    /// Panics if `k` is not a whole number of blocks or the data is shorter
    /// than the shape needs (see [`GgmlMatrix::validate`]).
    pub fn dequantize(&self) -> Vec<f32> {
        let (k, n) = (self.k, self.n);
        let bv = self.dtype.block_values();
        let bb = self.dtype.block_bytes();
        assert!(
            k.is_multiple_of(bv),
            "{} needs K to be a multiple of {bv}, got {k}",
            self.dtype
        );
        let rb = self.row_bytes();
        assert!(
            self.data.len() >= rb * n,
            "{} matrix K={k} N={n} needs {} bytes, has {}",
            self.dtype,
            rb * n,
            self.data.len()
        );
        let mut out = vec![0f32; k * n];
        let mut vals = [0f32; QK];
        for j in 0..n {
            let row = &self.data[j * rb..(j + 1) * rb];
            for (b, blk) in row.chunks_exact(bb).enumerate() {
                Self::decode_block(self.dtype, blk, &mut vals[..bv]);
                for (t, &v) in vals[..bv].iter().enumerate() {
                    out[(b * bv + t) * n + j] = v;
                }
            }
        }
        out
    }

    /// Encodes `w` (K x N row-major) as `dtype`, the way gguf-py's
    /// `gguf.quants.quantize` does (F16: round to nearest even; IQ4_NL, which
    /// gguf-py cannot quantize: [`GgmlMatrix::quantize_iq4_nl`]).
    ///
    /// Panics if `w.len() != k * n` or `k` is not a whole number of blocks.
    pub fn quantize(w: &[f32], k: usize, n: usize, dtype: GgmlType) -> GgmlMatrix {
        assert_eq!(w.len(), k * n, "weights are not {k} x {n}");
        let bv = dtype.block_values();
        let row_bytes = dtype
            .row_bytes(k)
            .unwrap_or_else(|| panic!("{dtype} needs K to be a multiple of {bv}, got {k}"));
        let mut data = Vec::with_capacity(row_bytes * n);
        let mut col = vec![0f32; k];
        for j in 0..n {
            for (i, c) in col.iter_mut().enumerate() {
                *c = w[i * n + j];
            }
            match dtype {
                GgmlType::F32 => col
                    .iter()
                    .for_each(|v| data.extend_from_slice(&v.to_le_bytes())),
                GgmlType::F16 => col.iter().for_each(|&v| write_f16(&mut data, v)),
                GgmlType::Q4_0 => col
                    .chunks_exact(QK)
                    .for_each(|b| quantize_block_q4_0(b, &mut data)),
                GgmlType::Q8_0 => col
                    .chunks_exact(QK)
                    .for_each(|b| quantize_block_q8_0(b, &mut data)),
                GgmlType::Iq4Nl => col
                    .chunks_exact(QK)
                    .for_each(|b| quantize_block_iq4_nl(b, &mut data)),
            }
        }
        GgmlMatrix { k, n, dtype, data }
    }

    /// Q4_0 of `w` (K x N row-major): per block `d = max / -8` where `max` is
    /// the first value of largest magnitude (sign kept), `q = min(15,
    /// trunc(v / d + 8.5))`, all in f32, `d` stored as f16. Panics unless
    /// `k % 32 == 0` and `w.len() == k * n`.
    pub fn quantize_q4_0(w: &[f32], k: usize, n: usize) -> GgmlMatrix {
        Self::quantize(w, k, n, GgmlType::Q4_0)
    }

    /// Q8_0 of `w` (K x N row-major): per block `d = max|v| / 127`, `q =
    /// round(v * (1 / d))` half away from zero, all in f32, `d` stored as f16.
    /// Panics unless `k % 32 == 0` and `w.len() == k * n`.
    pub fn quantize_q8_0(w: &[f32], k: usize, n: usize) -> GgmlMatrix {
        Self::quantize(w, k, n, GgmlType::Q8_0)
    }

    /// IQ4_NL of `w` (K x N row-major), kgen's own quantizer (gguf-py has
    /// none): per block the scale with the least `v^2`-weighted squared error
    /// among least-squares fits for 16 candidate index assignments (the
    /// largest magnitude mapped to `+127`, or to `-127 + t` for `|t| <= 7`),
    /// indices the nearest codebook values, all in f32, `d` stored as f16; an
    /// all-zero block (max |v| < 1e-15) is `d = 0`. Panics unless
    /// `k % 32 == 0` and `w.len() == k * n`.
    pub fn quantize_iq4_nl(w: &[f32], k: usize, n: usize) -> GgmlMatrix {
        Self::quantize(w, k, n, GgmlType::Iq4Nl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(type_name(t.id()), Some(t.name()));
            assert_eq!(type_size(t.id()), Some((t.block_values(), t.block_bytes())));
        }
        assert_eq!(GgmlType::Q4_0.block_bytes(), 18);
        assert_eq!(GgmlType::Q8_0.block_bytes(), 34);
        assert_eq!(GgmlType::from_id(3), None);
        assert_eq!(type_name(14), Some("Q6_K"));
        assert_eq!(GgmlType::Q4_0.row_bytes(64), Some(36));
        assert_eq!(GgmlType::Q4_0.row_bytes(48), None);
        assert_eq!(GgmlType::F16.row_bytes(7), Some(14));
    }

    #[test]
    fn round_trips_within_half_a_step() {
        for (k, n) in [(32, 1), (64, 3), (256, 7)] {
            let w = rand_vals(k * n, (k * 31 + n) as u64, 3.0);
            for dtype in GgmlType::ALL {
                let m = GgmlMatrix::quantize(&w, k, n, dtype);
                m.validate().unwrap();
                assert_eq!(m.data.len(), m.row_bytes() * n);
                let back = m.dequantize();
                for i in 0..k {
                    for j in 0..n {
                        let (v, b) = (w[i * n + j], back[i * n + j]);
                        assert_eq!(b.to_bits(), m.get(i, j).to_bits());
                        let d = m.scale(j, i / dtype.block_values()).abs();
                        let tol = match dtype {
                            GgmlType::F32 => 0.0,
                            GgmlType::F16 => v.abs() / 1024.0,
                            // Rounds half up, and values near -max map to
                            // level 15 = +7 d: up to one step.
                            GgmlType::Q4_0 => d * 1.01,
                            // Levels come from the f32 d, values from its
                            // f16 rounding: 0.5 d + 127 d 2^-11.
                            GgmlType::Q8_0 => d * 0.6,
                            // Half the widest codebook gap (24) inside the
                            // range; the fitted scale may leave the largest
                            // values up to ~21 d beyond an end.
                            GgmlType::Iq4Nl => d * 22.0,
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
            dtype: GgmlType::Iq4Nl,
            data: blk,
        };
        m.validate().unwrap();
        let w = m.dequantize();
        for b in 0..16 {
            assert_eq!(w[b], 0.5 * IQ4_NL_VALUES[b] as f32);
            assert_eq!(w[b + 16], 0.5 * IQ4_NL_VALUES[15 - b] as f32);
        }
        assert_eq!(GgmlType::from_id(20), Some(GgmlType::Iq4Nl));
        assert_eq!(GgmlType::Iq4Nl.block_bytes(), 18);
        assert_eq!(GgmlType::Iq4Nl.name(), "IQ4_NL");
    }

    #[test]
    fn iq4_nl_nearest_index() {
        for (i, &v) in IQ4_NL_VALUES.iter().enumerate() {
            assert_eq!(iq4_nl_nearest(v as f32) as usize, i);
        }
        assert_eq!(iq4_nl_nearest(-1000.0), 0);
        assert_eq!(iq4_nl_nearest(1000.0), 15);
        assert_eq!(iq4_nl_nearest(f32::INFINITY), 15);
        assert_eq!(iq4_nl_nearest(f32::NEG_INFINITY), 0);
        assert_eq!(iq4_nl_nearest(f32::NAN), 0);
        // Midpoints go up (ggml's best_index_int8), just below goes down.
        assert_eq!(iq4_nl_nearest(-4.5), 8);
        assert_eq!(iq4_nl_nearest(-4.6), 7);
        assert_eq!(iq4_nl_nearest(101.0), 15);
        assert_eq!(iq4_nl_nearest(100.9), 14);
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
            .map(|i| 0.25 * IQ4_NL_VALUES[(i * 7) % 16] as f32)
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
        let (nl, q4) = (err(GgmlType::Iq4Nl), err(GgmlType::Q4_0));
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
}
