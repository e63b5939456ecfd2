//! GGML weight blocks as GGUF files store them (every format of
//! [`crate::format::table`]), with the reference quantizer and dequantizer.
//!
//! A GGUF weight tensor has `ne[0] = K` (contiguous, input features) and
//! `ne[1] = N` (rows, output features). Each row is a run of blocks along K
//! (F32 / F16: one value each; the quantized formats: 32 values with f16
//! scales, or the K-quants' 256-value super-blocks), as each format's codec
//! file describes and its row of the table sizes.
//!
//! Our convention is `y = x W` with `W` K x N, so `W[i][j]` is element `i` of
//! GGUF row `j`.
//!
//! The arithmetic is that of llama.cpp's gguf-py (`gguf.quants`), which works
//! in numpy float32; [`GgmlMatrix::dequantize`] and the quantizers reproduce
//! it bit for bit (the tests in `runtime/tests/gguf_*.rs` compare against it).
//! Each format's codec is its own file beside this one, and its row is in
//! [`crate::format::table`].

use crate::format::error::FormatError;
use crate::format::row::{GgmlType, QK};

/// The largest block of any format (the K-quants' 256-value super-blocks).
const MAX_BLOCK: usize = 256;

/// f16 bits of +infinity: a magnitude's bits at or above it are an
/// infinity or a NaN.
const F16_INF: u16 = 0x7C00;
/// f16 bits of 256.0.
const F16_256: u16 = 0x5C00;

/// A weight matrix as GGUF stores it: `n` rows (output features) of `k`
/// values (input features), each row a sequence of blocks along `k`.
/// `W` (K x N, `y = x W`) has `W[i][j]` = row `j`, element `i`.
///
/// The bytes are owned (`Vec<u8>`, the default) or borrowed
/// ([`GgmlView`]: a tensor of a memory-mapped file, repacked without a
/// copy); everything that only reads them takes either.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgmlMatrix<D = Vec<u8>> {
    pub k: usize,
    pub n: usize,
    pub dtype: GgmlType,
    /// `n` rows of [`GgmlMatrix::row_bytes`] bytes.
    pub data: D,
}

/// A GGUF matrix whose bytes are borrowed (from a mapped file).
pub type GgmlView<'a> = GgmlMatrix<&'a [u8]>;

impl<D: AsRef<[u8]>> GgmlMatrix<D> {
    /// The same matrix with its bytes borrowed.
    pub fn view(&self) -> GgmlView<'_> {
        GgmlMatrix {
            k: self.k,
            n: self.n,
            dtype: self.dtype,
            data: self.data.as_ref(),
        }
    }

    /// The same matrix with its bytes copied.
    pub fn to_owned(&self) -> GgmlMatrix {
        GgmlMatrix {
            k: self.k,
            n: self.n,
            dtype: self.dtype,
            data: self.data.as_ref().to_vec(),
        }
    }

    fn bytes(&self) -> &[u8] {
        self.data.as_ref()
    }

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
        self.validate_shape()?;
        self.check_rows(0..self.n)
    }

    /// The shape and data-length half of [`GgmlMatrix::validate`]: what
    /// makes every row's bytes addressable. The int8 repack checks the
    /// blocks themselves ([`GgmlMatrix::check_rows`]) as it reads them.
    pub fn validate_shape(&self) -> Result<(), FormatError> {
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
        if self.bytes().len() != want {
            return Err(FormatError(format!(
                "{} matrix K={} N={} needs {want} bytes, got {}",
                self.dtype,
                self.k,
                self.n,
                self.bytes().len()
            )));
        }
        Ok(())
    }

    /// The block half of [`GgmlMatrix::validate`] for GGUF rows `rows`
    /// (columns of `W`), after [`GgmlMatrix::validate_shape`]: every block
    /// scale finite, and the sub-block scales of the formats that derive
    /// them within f16. Errors name the first bad block in file order.
    ///
    /// Panics if the shape has not been validated or `rows` ends past `n`.
    pub fn check_rows(&self, rows: std::ops::Range<usize>) -> Result<(), FormatError> {
        let fmt = self.dtype.format();
        // Sub-block scales computed from finite parts can still leave f16's
        // range (`d * sc` of the K-quants, IQ4_XS's `d * (ls - 32)`); the
        // int8 layout stores them as
        // f16, so those are checked too.
        // Formats without f16 scales (MXFP4's exponent byte) are checked
        // through `sub_scale` in every block.
        let no_f16 = fmt.scales.is_empty();
        let derived = fmt
            .int8
            .filter(|r| r.mins || fmt.block > QK || r.scales_per_block > 1 || no_f16)
            .map(|r| (r.sub_scale, r.scales_per_block));
        let (per_row, row_bytes) = (self.blocks_per_row(), self.row_bytes());
        let bytes = &self.bytes()[rows.start * row_bytes..rows.end * row_bytes];
        for (b, blk) in bytes
            .chunks_exact(self.dtype.block_bytes())
            .enumerate()
            .map(|(b, blk)| (b + rows.start * per_row, blk))
        {
            let bad = |what: &str, v: f32| {
                FormatError(format!(
                    "{} {what} {v} of row {} block {} is not finite",
                    self.dtype,
                    b / per_row,
                    b % per_row
                ))
            };
            // On the f16 bits, as this pass reads every block of the file:
            // all-ones exponent is an infinity or a NaN, and magnitudes
            // order as their bits do.
            let mut largest = 0u16;
            for &at in fmt.scales {
                let bits = at.read(blk) & 0x7FFF;
                if bits >= F16_INF {
                    return Err(bad("scale", at.get(blk)));
                }
                largest = largest.max(bits);
            }
            // Sub-block scales are the block's f16 scales times integers
            // below 256 in magnitude: only scales above 256 can leave f16's
            // range (65504), so only those blocks need the full check.
            if let Some((sub_scale, spb)) = derived.filter(|_| largest > F16_256 || no_f16) {
                for s in 0..fmt.block / QK * spb {
                    let (d, m) = sub_scale(blk, s);
                    for v in [d, m] {
                        if !half::f16::from_f32(v).is_finite() {
                            // The kernels take f16 scales.
                            let what = format!("sub-block {s} scale (as an f16)");
                            return Err(bad(&what, v));
                        }
                    }
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
        &self.bytes()[row * rb..(row + 1) * rb]
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

    /// The scale `d` of a quantized block (the K-quants: of the super-block,
    /// wherever the format keeps it), converted to f32 (1.0 for the float
    /// types; for MXFP4, which has no f16 field, its `sub_scale`: 0 for a
    /// block of zero codes).
    pub fn scale(&self, row: usize, blk: usize) -> f32 {
        let (fmt, block) = (self.dtype.format(), self.block(row, blk));
        match (self.dtype.is_quantized(), fmt.scales.first(), fmt.int8) {
            (false, ..) => 1.0,
            (true, Some(&at), _) => at.get(block),
            // No f16 field (MXFP4's exponent byte): its first sub-block's.
            (true, None, Some(r)) => (r.sub_scale)(block, 0).0,
            (true, None, None) => 1.0,
        }
    }

    /// Dequantized `W[i][j]`.
    ///
    /// Panics if out of range.
    pub fn get(&self, i: usize, j: usize) -> f32 {
        assert!(i < self.k, "element {i} of K = {}", self.k);
        let bv = self.dtype.block_values();
        let mut vals = [0f32; MAX_BLOCK];
        (self.dtype.0.dequantize)(self.block(j, i / bv), &mut vals[..bv]);
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
            self.bytes().len() >= rb * n,
            "{} matrix K={k} N={n} needs {} bytes, has {}",
            self.dtype,
            rb * n,
            self.bytes().len()
        );
        let mut out = vec![0f32; k * n];
        let mut vals = [0f32; MAX_BLOCK];
        for j in 0..n {
            let row = &self.bytes()[j * rb..(j + 1) * rb];
            for (b, blk) in row.chunks_exact(bb).enumerate() {
                (self.dtype.0.dequantize)(blk, &mut vals[..bv]);
                for (t, &v) in vals[..bv].iter().enumerate() {
                    out[(b * bv + t) * n + j] = v;
                }
            }
        }
        out
    }
}

impl GgmlMatrix {
    /// Encodes `w` (K x N row-major) as `dtype`, the way gguf-py's
    /// `gguf.quants.quantize` does (F16: round to nearest even); the formats
    /// gguf-py cannot quantize with kgen's own quantizers (IQ4_NL:
    /// [`GgmlMatrix::quantize_iq4_nl`]; IQ4_XS and the K-quants: see their
    /// codec files).
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
            col.chunks_exact(bv)
                .for_each(|b| (dtype.0.quantize)(b, &mut data));
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
        Self::quantize(w, k, n, GgmlType::IQ4_NL)
    }
}
