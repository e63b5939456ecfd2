//! Loading GPTQ layers from `.safetensors` checkpoints (AutoGPTQ / GPTQModel
//! layout) into the ISA-neutral [`GptqMatrix`].
//!
//! A layer `{prefix}` is stored as
//!
//! | tensor             | dtype             | shape               |
//! |--------------------|-------------------|---------------------|
//! | `{prefix}.qweight` | I32               | `[K * bits / 32, N]` |
//! | `{prefix}.qzeros`  | I32               | `[groups, N * bits / 32]` |
//! | `{prefix}.scales`  | F16 (F32, BF16)   | `[groups, N]`       |
//! | `{prefix}.g_idx`   | I32 (optional)    | `[K]`               |
//!
//! `qweight` packs along K and `qzeros` along N, both least significant bits
//! first, 3-bit as a 96-bit little-endian stream per 32 values.
//!
//! Zero points: AutoGPTQ's classic format ("v1") stores `z - 1`; its
//! dequantization unpacks `stored & mask` and adds one *without* masking again,
//! so the zero point is in `1..=2^bits` (a quantizer zero of 0 ends up as
//! `2^bits`, exactly what AutoGPTQ, exllama and the CUDA kernels compute for
//! such a file). [`ZeroConvention::V1`] does the same. GPTQModel's "gptq_v2"
//! stores `z` itself.
//!
//! Act-order (`desc_act`) checkpoints carry a non-trivial `g_idx`; the loader
//! sorts the rows by group (stable), re-packs `qweight` in that order and
//! returns the permutation so the caller can permute activations the same way.

use crate::mapped::Bytes;
use kgen::format::gptq::GptqMatrix;
use kgen::spec::Group;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How a checkpoint stores zero points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroConvention {
    /// AutoGPTQ classic: stored value is `z - 1`; `z = (stored & mask) + 1`.
    V1,
    /// GPTQModel `gptq_v2`: stored value is `z`.
    V2,
}

/// What the caller knows about the checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GptqOptions {
    /// Bits per weight: 2, 3, 4 or 8.
    pub bits: u32,
    /// `None`: the safetensors metadata key `checkpoint_format` equal to
    /// `gptq_v2` selects [`ZeroConvention::V2`], anything else V1.
    pub convention: Option<ZeroConvention>,
}

impl GptqOptions {
    /// `bits` with the zero convention read from the file's metadata.
    pub fn new(bits: u32) -> GptqOptions {
        GptqOptions {
            bits,
            convention: None,
        }
    }
}

/// A loaded layer.
#[derive(Clone, Debug, PartialEq)]
pub struct GptqLayer {
    /// The weights, rows in `perm` order when `perm` is `Some`; validated.
    pub matrix: GptqMatrix,
    /// Act-order permutation: row `j` of `matrix` is row `perm[j]` of the
    /// checkpoint, so `y = x W` becomes `y = x' matrix` with `x'[j] = x[perm[j]]`.
    /// `None` when the rows are in checkpoint order.
    pub perm: Option<Vec<u32>>,
}

/// A load failure; the message names the file, the tensor and the problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError(pub String);

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

/// Maps the file (the OS error is mapped to a message naming the path).
fn read_file(path: &Path) -> Result<Bytes, LoadError> {
    Bytes::map(path).map_err(|e| LoadError(format!("{}: cannot read file: {e}", path.display())))
}

fn parse<'a>(path: &Path, buf: &'a [u8]) -> Result<SafeTensors<'a>, LoadError> {
    SafeTensors::deserialize(buf).map_err(|e| {
        LoadError(format!(
            "{}: not a valid safetensors file ({e})",
            path.display()
        ))
    })
}

/// A checkpoint mapped once, for loading several layers from it
/// ([`load_gptq`] and [`list_layers`] map the file on every call). The file
/// must not be truncated or rewritten while it is open.
#[derive(Clone)]
pub struct GptqFile {
    path: PathBuf,
    bytes: Arc<Bytes>,
}

impl fmt::Debug for GptqFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GptqFile")
            .field("path", &self.path)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl GptqFile {
    /// Reads the file and checks that it is a well-formed safetensors file.
    pub fn open(path: &Path) -> Result<GptqFile, LoadError> {
        let bytes = read_file(path)?;
        parse(path, &bytes)?;
        Ok(GptqFile {
            path: path.to_path_buf(),
            bytes: Arc::new(bytes),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Names of every layer that has a `{prefix}.qweight` tensor, sorted.
    pub fn layers(&self) -> Result<Vec<String>, LoadError> {
        let st = parse(&self.path, &self.bytes)?;
        let mut out: Vec<String> = st
            .names()
            .into_iter()
            .filter_map(|n| n.strip_suffix(".qweight").map(str::to_owned))
            .collect();
        out.sort();
        Ok(out)
    }

    /// The zero convention the file's metadata declares: `checkpoint_format`
    /// equal to `gptq_v2` is V2, anything else (or no metadata) V1.
    pub fn declared_convention(&self) -> Result<ZeroConvention, LoadError> {
        let (_, meta) = SafeTensors::read_metadata(&self.bytes).map_err(|e| {
            LoadError(format!(
                "{}: not a valid safetensors file ({e})",
                self.path.display()
            ))
        })?;
        let v2 = meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get("checkpoint_format"))
            .is_some_and(|f| f.trim().eq_ignore_ascii_case("gptq_v2"));
        Ok(if v2 {
            ZeroConvention::V2
        } else {
            ZeroConvention::V1
        })
    }

    /// Loads the GPTQ layer `prefix`.
    pub fn load(&self, prefix: &str, opts: &GptqOptions) -> Result<GptqLayer, LoadError> {
        let st = parse(&self.path, &self.bytes)?;
        let convention = match opts.convention {
            Some(c) => c,
            None => self.declared_convention()?,
        };
        Loader {
            path: &self.path,
            prefix,
            st: &st,
            bits: opts.bits,
        }
        .load(convention)
    }
}

/// Checks that an act-order `perm` ([`GptqLayer::perm`]) is a permutation
/// of `0..k`: what both kernel families check before they gather
/// activations through it.
pub(crate) fn check_permutation(perm: &[u32], k: usize) -> Result<(), crate::Error> {
    let mut seen = vec![false; k];
    let ok = perm.len() == k
        && perm
            .iter()
            .all(|&i| (i as usize) < k && !std::mem::replace(&mut seen[i as usize], true));
    if ok {
        Ok(())
    } else {
        Err(crate::Error::Format(format!(
            "act-order permutation is not a permutation of 0..{k}"
        )))
    }
}

/// Names of every layer in the file that has a `{prefix}.qweight` tensor,
/// sorted.
pub fn list_layers(path: &Path) -> Result<Vec<String>, LoadError> {
    GptqFile::open(path)?.layers()
}

/// Loads the GPTQ layer `prefix` from the safetensors file at `path`.
pub fn load_gptq(path: &Path, prefix: &str, opts: &GptqOptions) -> Result<GptqLayer, LoadError> {
    GptqFile::open(path)?.load(prefix, opts)
}

struct Loader<'a, 'b> {
    path: &'a Path,
    prefix: &'a str,
    st: &'a SafeTensors<'b>,
    bits: u32,
}

impl Loader<'_, '_> {
    fn err(&self, tensor: &str, msg: impl fmt::Display) -> LoadError {
        if tensor.is_empty() {
            LoadError(format!(
                "{}: layer `{}`: {msg}",
                self.path.display(),
                self.prefix
            ))
        } else {
            LoadError(format!(
                "{}: tensor `{}.{tensor}`: {msg}",
                self.path.display(),
                self.prefix
            ))
        }
    }

    fn tensor(&self, name: &str) -> Result<Option<TensorView<'_>>, LoadError> {
        match self.st.tensor(&format!("{}.{name}", self.prefix)) {
            Ok(t) => Ok(Some(t)),
            Err(SafeTensorError::TensorNotFound(_)) => Ok(None),
            Err(e) => Err(self.err(name, e)),
        }
    }

    fn required(&self, name: &str) -> Result<TensorView<'_>, LoadError> {
        self.tensor(name)?
            .ok_or_else(|| self.err(name, "missing from the file"))
    }

    fn check_dtype(
        &self,
        name: &str,
        t: &TensorView<'_>,
        allowed: &[Dtype],
        expected: &str,
    ) -> Result<(), LoadError> {
        if allowed.contains(&t.dtype()) {
            Ok(())
        } else {
            Err(self.err(
                name,
                format_args!("dtype is {:?}, expected {expected}", t.dtype()),
            ))
        }
    }

    fn shape2(&self, name: &str, t: &TensorView<'_>) -> Result<(usize, usize), LoadError> {
        match *t.shape() {
            [r, c] => Ok((r, c)),
            ref s => Err(self.err(
                name,
                format_args!("shape {s:?} has rank {}, expected rank 2", s.len()),
            )),
        }
    }

    fn load(&self, convention: ZeroConvention) -> Result<GptqLayer, LoadError> {
        let bits = self.bits;
        if ![2, 3, 4, 8].contains(&bits) {
            return Err(self.err(
                "",
                format_args!("{bits} bits per weight is not a GPTQ format (2, 3, 4 or 8)"),
            ));
        }

        // qweight: [K * bits / 32, N] I32.
        let qw = self.required("qweight")?;
        self.check_dtype("qweight", &qw, &[Dtype::I32, Dtype::U32], "I32")?;
        let (word_rows, n) = self.shape2("qweight", &qw)?;
        if word_rows == 0 || n == 0 {
            return Err(self.err("qweight", format_args!("empty shape [{word_rows}, {n}]")));
        }
        if (word_rows * 32) % bits as usize != 0 {
            return Err(self.err(
                "qweight",
                format_args!(
                    "{word_rows} rows of 32-bit words do not hold a whole number of {bits}-bit values \
                     (K = rows * 32 / bits must be an integer; 3-bit needs a multiple of 3 rows)"
                ),
            ));
        }
        let k = word_rows * 32 / bits as usize;

        // scales: [groups, N] F16 / BF16 / F32.
        let sc = self.required("scales")?;
        self.check_dtype(
            "scales",
            &sc,
            &[Dtype::F16, Dtype::BF16, Dtype::F32],
            "F16, BF16 or F32",
        )?;
        let (groups, sn) = self.shape2("scales", &sc)?;
        if sn != n {
            return Err(self.err(
                "scales",
                format_args!("has {sn} columns but qweight has N = {n}"),
            ));
        }
        if groups == 0 {
            return Err(self.err("scales", "has 0 rows (groups)"));
        }

        // qzeros: [groups, N * bits / 32] I32, packed along N.
        let qz = self.required("qzeros")?;
        self.check_dtype("qzeros", &qz, &[Dtype::I32, Dtype::U32], "I32")?;
        let (zg, zcols) = self.shape2("qzeros", &qz)?;
        if zg != groups {
            return Err(self.err(
                "qzeros",
                format_args!("has {zg} rows but scales has {groups} groups"),
            ));
        }
        let min_cols = (n * bits as usize).div_ceil(32);
        let max_cols = n.div_ceil(32) * bits as usize;
        if zcols < min_cols || zcols > max_cols {
            let want = if min_cols == max_cols {
                format!("{min_cols}")
            } else {
                format!("{min_cols}..={max_cols}")
            };
            return Err(self.err(
                "qzeros",
                format_args!("has {zcols} columns, N = {n} at {bits} bits needs {want}"),
            ));
        }

        // g_idx: optional [K] I32.
        let g_idx = match self.tensor("g_idx")? {
            None => None,
            Some(t) => {
                self.check_dtype("g_idx", &t, &[Dtype::I32, Dtype::I64], "I32")?;
                if t.shape().len() != 1 {
                    return Err(
                        self.err("g_idx", format_args!("shape {:?} is not rank 1", t.shape()))
                    );
                }
                if t.shape()[0] != k {
                    return Err(self.err(
                        "g_idx",
                        format_args!(
                            "has {} entries but qweight holds K = {k} rows",
                            t.shape()[0]
                        ),
                    ));
                }
                let vals: Vec<i64> = if t.dtype() == Dtype::I32 {
                    words(t.data()).map(|w| w as i32 as i64).collect()
                } else {
                    t.data()
                        .chunks_exact(8)
                        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
                        .collect()
                };
                let mut idx = Vec::with_capacity(k);
                for (i, &v) in vals.iter().enumerate() {
                    if v < 0 || v as u64 >= groups as u64 {
                        return Err(self.err(
                            "g_idx",
                            format_args!("entry {i} is {v}, outside the {groups} groups of scales"),
                        ));
                    }
                    idx.push(v as u32);
                }
                Some(idx)
            }
        };

        // Group size (written without `is_multiple_of`, which needs Rust 1.87).
        let g = k / groups;
        if g * groups != k {
            return Err(self.err(
                "scales",
                format_args!(
                    "{groups} groups do not divide K = {k} rows evenly (group size must be exact)"
                ),
            ));
        }
        let group = if groups == 1 {
            Group::Column
        } else if Group::SUPPORTED.contains(&g) {
            Group::Size(g)
        } else {
            return Err(self.err(
                "scales",
                format_args!(
                    "{groups} groups over K = {k} give group size {g}; supported sizes are {:?} or one group per column",
                    Group::SUPPORTED
                ),
            ));
        };

        // Act-order permutation.
        let perm = match &g_idx {
            Some(idx) if idx.iter().enumerate().any(|(i, &v)| v as usize != i / g) => {
                let mut counts = vec![0usize; groups];
                for &v in idx {
                    counts[v as usize] += 1;
                }
                if let Some((bad, &c)) = counts.iter().enumerate().find(|(_, &c)| c != g) {
                    return Err(self.err(
                        "g_idx",
                        format_args!(
                            "group {bad} has {c} rows; act-order needs every group to hold exactly {g} rows"
                        ),
                    ));
                }
                // Stable counting sort by group: every group owns g slots.
                let mut next: Vec<usize> = (0..groups).map(|gr| gr * g).collect();
                let mut perm = vec![0u32; k];
                for (i, &v) in idx.iter().enumerate() {
                    perm[next[v as usize]] = i as u32;
                    next[v as usize] += 1;
                }
                Some(perm)
            }
            _ => None,
        };

        // Scales.
        let scales: Vec<f32> = match sc.dtype() {
            Dtype::F32 => words(sc.data()).map(f32::from_bits).collect(),
            Dtype::F16 => halves(sc.data())
                .map(|h| half::f16::from_bits(h).to_f32())
                .collect(),
            _ => halves(sc.data())
                .map(|h| half::bf16::from_bits(h).to_f32())
                .collect(),
        };
        if let Some(p) = scales.iter().position(|s| !s.is_finite()) {
            return Err(self.err(
                "scales",
                format_args!(
                    "value {} at group {}, column {} is not finite",
                    scales[p],
                    p / n,
                    p % n
                ),
            ));
        }

        // Zeros.
        let qzeros: Vec<u32> = words(qz.data()).collect();
        let mask = (1u32 << bits) - 1;
        let mut zeros = Vec::with_capacity(groups * n);
        for gr in 0..groups {
            let row = &qzeros[gr * zcols..(gr + 1) * zcols];
            for j in 0..n {
                let stored = stream_get(row, bits, j);
                let z = match convention {
                    ZeroConvention::V1 => stored + 1,
                    ZeroConvention::V2 => stored,
                };
                if z > mask + 1 {
                    // Unreachable for unpacked fields; kept as a guard on the convention.
                    return Err(self.err(
                        "qzeros",
                        format_args!(
                            "zero point {z} at group {gr}, column {j} is outside 0..={}",
                            mask + 1
                        ),
                    ));
                }
                zeros.push(z as f32);
            }
        }

        // Weights: into the GptqMatrix layout (K padded to whole 32-value units),
        // rows permuted for act-order.
        let src: Vec<u32> = words(qw.data()).collect();
        let padded_rows = GptqMatrix::word_rows_for(k, bits);
        let qweight = match &perm {
            None => {
                let mut q = src;
                q.resize(padded_rows * n, 0);
                q
            }
            Some(perm) => repack_rows(&src, n, bits, perm, padded_rows),
        };

        let matrix = GptqMatrix {
            k,
            n,
            bits,
            group,
            qweight,
            scales,
            zeros,
        };
        matrix.validate().map_err(|e| self.err("", e))?;
        Ok(GptqLayer { matrix, perm })
    }
}

/// Little-endian u32 words of a tensor's bytes (the data need not be aligned).
fn words(b: &[u8]) -> impl Iterator<Item = u32> + '_ {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

fn halves(b: &[u8]) -> impl Iterator<Item = u16> + '_ {
    b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]))
}

/// Value `i` of a contiguous LSB-first bit stream of `bits`-bit fields.
fn stream_get(words: &[u32], bits: u32, i: usize) -> u32 {
    let bit = i * bits as usize;
    let (w, shift) = (bit / 32, (bit % 32) as u32);
    let mask = (1u32 << bits) - 1;
    let mut v = words[w] >> shift;
    if shift + bits > 32 {
        v |= words[w + 1] << (32 - shift);
    }
    v & mask
}

/// Re-packs the K-packed `src` (`* x n` words) so that new row `j` holds old
/// row `perm[j]`; the result has `out_rows x n` words.
fn repack_rows(src: &[u32], n: usize, bits: u32, perm: &[u32], out_rows: usize) -> Vec<u32> {
    let mask = (1u32 << bits) - 1;
    let mut out = vec![0u32; out_rows * n];
    for (j, &from) in perm.iter().enumerate() {
        let (sbit, dbit) = (from as usize * bits as usize, j * bits as usize);
        let (sw, ss) = (sbit / 32, (sbit % 32) as u32);
        let (dw, ds) = (dbit / 32, (dbit % 32) as u32);
        let s_split = ss + bits > 32;
        let d_split = ds + bits > 32;
        for c in 0..n {
            let mut v = src[sw * n + c] >> ss;
            if s_split {
                v |= src[(sw + 1) * n + c] << (32 - ss);
            }
            let v = v & mask;
            out[dw * n + c] |= v << ds;
            if d_split {
                out[(dw + 1) * n + c] |= v >> (32 - ds);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;
    use std::collections::HashMap;

    fn bytes_u32(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn bytes_f32(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Writes `m` (rows in order, optional g_idx) with v2 zeros.
    fn write(
        m: &GptqMatrix,
        g_idx: Option<&[u32]>,
        meta: Option<HashMap<String, String>>,
    ) -> tempfile::NamedTempFile {
        let word_rows = m.k * m.bits as usize / 32;
        let qw = bytes_u32(&m.qweight[..word_rows * m.n]);
        let zcols = (m.n * m.bits as usize).div_ceil(32);
        let mut qz = vec![0u32; m.groups() * zcols];
        for g in 0..m.groups() {
            for j in 0..m.n {
                let bit = j * m.bits as usize;
                let z = m.zeros[g * m.n + j] as u32;
                qz[g * zcols + bit / 32] |= z << (bit % 32);
                if bit % 32 + m.bits as usize > 32 {
                    qz[g * zcols + bit / 32 + 1] |= z >> (32 - bit % 32);
                }
            }
        }
        let qz = bytes_u32(&qz);
        let sc = bytes_f32(&m.scales);
        let gi = g_idx.map(bytes_u32);
        let mut views = vec![
            (
                "l.qweight".to_string(),
                TensorView::new(Dtype::I32, vec![word_rows, m.n], &qw).unwrap(),
            ),
            (
                "l.qzeros".to_string(),
                TensorView::new(Dtype::I32, vec![m.groups(), zcols], &qz).unwrap(),
            ),
            (
                "l.scales".to_string(),
                TensorView::new(Dtype::F32, vec![m.groups(), m.n], &sc).unwrap(),
            ),
        ];
        if let Some(gi) = &gi {
            views.push((
                "l.g_idx".to_string(),
                TensorView::new(Dtype::I32, vec![m.k], gi).unwrap(),
            ));
        }
        let bytes = safetensors::serialize(views, meta).unwrap();
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), bytes).unwrap();
        f
    }

    #[test]
    fn k_not_a_multiple_of_32_is_padded() {
        // 4-bit, K = 48 -> 6 word rows in the file, 8 in GptqMatrix.
        let m = kgen::format::gptq::random_gptq(48, 5, 4, Group::Size(16), 7);
        let f = write(&m, None, None);
        let opts = GptqOptions {
            bits: 4,
            convention: Some(ZeroConvention::V2),
        };
        let l = load_gptq(f.path(), "l", &opts).unwrap();
        assert_eq!(l.perm, None);
        assert_eq!(l.matrix, m);
    }

    #[test]
    fn metadata_selects_v2_and_default_is_v1() {
        let m = kgen::format::gptq::random_gptq(64, 40, 3, Group::Size(32), 9);
        let meta = HashMap::from([("checkpoint_format".to_string(), "gptq_v2".to_string())]);
        let f = write(&m, None, Some(meta));
        assert_eq!(
            load_gptq(f.path(), "l", &GptqOptions::new(3))
                .unwrap()
                .matrix,
            m
        );
        let f = write(&m, None, None);
        let v1 = load_gptq(f.path(), "l", &GptqOptions::new(3))
            .unwrap()
            .matrix;
        for (a, b) in v1.zeros.iter().zip(&m.zeros) {
            assert_eq!(*a, b + 1.0);
        }
        assert_eq!(list_layers(f.path()).unwrap(), vec!["l".to_string()]);
    }

    #[test]
    fn act_order_permutes_rows_stably() {
        let (k, n, g) = (64usize, 3usize, 16usize);
        let m = kgen::format::gptq::random_gptq(k, n, 3, Group::Size(g), 11);
        // Groups assigned in a scrambled but balanced way.
        let g_idx: Vec<u32> = (0..k).map(|i| ((i * 5 + 3) % 4) as u32).collect();
        let f = write(&m, Some(&g_idx), None);
        let opts = GptqOptions {
            bits: 3,
            convention: Some(ZeroConvention::V2),
        };
        let l = load_gptq(f.path(), "l", &opts).unwrap();
        let perm = l.perm.unwrap();
        let mut sorted: Vec<u32> = (0..k as u32).collect();
        sorted.sort_by_key(|&i| g_idx[i as usize]);
        assert_eq!(perm, sorted);
        for (j, &p) in perm.iter().enumerate() {
            for c in 0..n {
                assert_eq!(l.matrix.q(j, c), m.q(p as usize, c));
            }
        }
    }

    #[test]
    fn trivial_g_idx_is_no_permutation() {
        let m = kgen::format::gptq::random_gptq(64, 8, 2, Group::Size(32), 1);
        let g_idx: Vec<u32> = (0..64).map(|i| i / 32).collect();
        let f = write(&m, Some(&g_idx), None);
        let opts = GptqOptions {
            bits: 2,
            convention: Some(ZeroConvention::V2),
        };
        let l = load_gptq(f.path(), "l", &opts).unwrap();
        assert_eq!(l.perm, None);
        assert_eq!(l.matrix, m);
    }

    #[test]
    fn unsupported_group_size_and_bits_are_errors() {
        // 48 rows in 2 groups: group size 24.
        let m = kgen::format::gptq::random_gptq(48, 4, 4, Group::Size(24), 1);
        let f = write(&m, None, None);
        let e = load_gptq(f.path(), "l", &GptqOptions::new(4)).unwrap_err();
        assert!(e.0.contains("group size 24"), "{e}");
        let e = load_gptq(f.path(), "l", &GptqOptions::new(5)).unwrap_err();
        assert!(e.0.contains("5 bits"), "{e}");
    }
}
