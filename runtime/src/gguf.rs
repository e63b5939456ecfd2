//! Reading weight matrices from GGUF files (llama.cpp's format, versions 2
//! and 3, little-endian).
//!
//! Layout: `"GGUF"`, `u32` version, `u64` tensor count, `u64` metadata count;
//! the metadata key/value pairs (key: `u64` length + UTF-8 bytes, `u32` value
//! type, value; arrays are `u32` element type, `u64` length, elements); the
//! tensor infos (name, `u32` n_dims, `u64` dims with `dims[0]` contiguous,
//! `u32` ggml type, `u64` offset into the data section); padding to
//! `general.alignment` (default 32); the data section.
//!
//! The reader checks every length against the bytes that are there before it
//! allocates, so a corrupt file is an error, never a panic or a huge
//! allocation. Tensors of any known ggml type have their extent checked at
//! [`GgufFile::open`]; [`GgufFile::matrix`] converts a 2-D tensor of any
//! type of kgen's format table to a [`GgmlMatrix`], and
//! [`GgufFile::expert`] one expert of a 3-D tensor (`dims = [k, n,
//! experts]`, a mixture-of-experts model's stack of FFN matrices, stored
//! one expert after the other).

use crate::mapped::Bytes;
use kgen::format::ggml;
use kgen::format::ggml::{GgmlMatrix, GgmlType, GgmlView};
use kgen::format::FormatError;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// A GGUF file that could not be read, or a tensor that cannot be used; the
/// message names the file (and the tensor).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufError(pub String);

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GgufError {}

/// GGUF metadata value types.
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

/// Arrays of arrays deeper than this are treated as corrupt (bounds the
/// recursion of the parser).
const MAX_ARRAY_DEPTH: usize = 8;
/// ggml tensors have at most 4 dimensions.
const MAX_DIMS: u32 = 4;
const DEFAULT_ALIGNMENT: usize = 32;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    /// Invalid UTF-8 is replaced (U+FFFD).
    Str(String),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array, stored by element type.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    Str(Vec<String>),
    Array(Vec<MetaArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl MetaArray {
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::Str(v) => v.len(),
            MetaArray::Array(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl MetaValue {
    /// The value as a u32 if it is an integer that fits.
    pub fn as_u32(&self) -> Option<u32> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v),
            MetaValue::I8(v) => v.try_into().ok(),
            MetaValue::I16(v) => v.try_into().ok(),
            MetaValue::I32(v) => v.try_into().ok(),
            MetaValue::U64(v) => v.try_into().ok(),
            MetaValue::I64(v) => v.try_into().ok(),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Whether `t` is a mixture-of-experts layer's stack of experts by
/// llama.cpp's naming (`blk.N.ffn_{gate,up,down}_exps.weight`, ...): a 3-D
/// tensor with `_exps` in its name. Other 3-D tensors (a matrix per
/// attention head) are not checked against the expert count.
fn is_expert_stack(t: &TensorInfo) -> bool {
    t.experts().is_some() && t.name.contains("_exps.")
}

/// The most matrices a 3-D tensor may stack: far more than any model's
/// experts (DeepSeek-V3 has 256, Kimi K2 384) or attention heads, and a
/// bound on what a corrupt header can make a loader allocate per tensor.
pub const MAX_STACK: u64 = 4096;

/// One tensor's header entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// `dims[0]` is the contiguous dimension.
    pub dims: Vec<u64>,
    /// The ggml type id (see [`kgen::format::ggml::GGML_TYPES`]).
    pub type_id: u32,
    /// Offset of the data relative to the data section.
    pub offset: u64,
    /// Byte range in the file; `None` for a type id this reader does not know
    /// the size of.
    pub range: Option<(usize, usize)>,
}

impl TensorInfo {
    /// For a 3-D tensor (`dims = [k, n, experts]`: a mixture-of-experts
    /// layer's experts, or a matrix per attention head), the number of
    /// matrices it stacks.
    pub fn experts(&self) -> Option<u64> {
        match self.dims[..] {
            [_, _, e] => Some(e),
            _ => None,
        }
    }

    /// The ggml type name, or `type id N` for unknown ids.
    pub fn type_name(&self) -> String {
        match ggml::type_name(self.type_id) {
            Some(n) => n.to_string(),
            None => format!("unknown type id {}", self.type_id),
        }
    }
}

/// A parsed GGUF file, mapped read-only (or in memory, [`GgufFile::from_bytes`]).
pub struct GgufFile {
    path: PathBuf,
    version: u32,
    alignment: usize,
    /// `{arch}.expert_count`, read and checked against the stacks once, when
    /// the file is parsed.
    expert_count: Option<u32>,
    data_start: usize,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<TensorInfo>,
    /// Tensor name -> index in `tensors`.
    index: HashMap<String, usize>,
    bytes: Bytes,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("alignment", &self.alignment)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// A bounds-checked little-endian cursor. Errors are plain messages with the
/// offset; [`GgufFile`] adds the file name.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if n > self.remaining() {
            return Err(format!(
                "truncated: {what} at offset {} needs {n} bytes, {} left",
                self.pos,
                self.remaining()
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items that each take at least `min_size` bytes; rejected if
    /// the rest of the file cannot hold them.
    fn count(&mut self, what: &str, min_size: usize) -> Result<usize, String> {
        let at = self.pos;
        let c = self.u64(what)?;
        let fits = usize::try_from(c)
            .ok()
            .and_then(|c| c.checked_mul(min_size))
            .is_some_and(|bytes| bytes <= self.remaining());
        if !fits {
            return Err(format!(
                "{what}: count/length {c} at offset {at} is impossible, only {} bytes follow",
                self.remaining()
            ));
        }
        Ok(c as usize)
    }

    fn string(&mut self, what: &str) -> Result<String, String> {
        let len = self.count(what, 1)?;
        let b = self.take(len, what)?;
        Ok(String::from_utf8_lossy(b).into_owned())
    }

    /// Smallest encoding of one value of type `t` (arrays: type + length).
    fn min_size(t: u32) -> usize {
        match t {
            T_U8 | T_I8 | T_BOOL => 1,
            T_U16 | T_I16 => 2,
            T_U32 | T_I32 | T_F32 => 4,
            T_U64 | T_I64 | T_F64 | T_STRING => 8,
            _ => 12,
        }
    }

    fn vec<T>(
        &mut self,
        len: usize,
        mut f: impl FnMut(&mut Self) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let mut v = Vec::with_capacity(len);
        for _ in 0..len {
            v.push(f(self)?);
        }
        Ok(v)
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<MetaArray, String> {
        if depth > MAX_ARRAY_DEPTH {
            return Err(format!(
                "metadata {key:?}: arrays nested deeper than {MAX_ARRAY_DEPTH}"
            ));
        }
        let at = self.pos;
        let t = self.u32("array element type")?;
        if t > T_F64 {
            return Err(format!(
                "metadata {key:?}: unknown array element type {t} at offset {at}"
            ));
        }
        let len = self.count(&format!("metadata {key:?} array"), Self::min_size(t))?;
        let w = "array element";
        Ok(match t {
            T_U8 => MetaArray::U8(self.take(len, w)?.to_vec()),
            T_I8 => MetaArray::I8(self.vec(len, |r| Ok(r.u8(w)? as i8))?),
            T_U16 => MetaArray::U16(self.vec(len, |r| r.u16(w))?),
            T_I16 => MetaArray::I16(self.vec(len, |r| Ok(r.u16(w)? as i16))?),
            T_U32 => MetaArray::U32(self.vec(len, |r| r.u32(w))?),
            T_I32 => MetaArray::I32(self.vec(len, |r| Ok(r.u32(w)? as i32))?),
            T_F32 => MetaArray::F32(self.vec(len, |r| Ok(f32::from_bits(r.u32(w)?)))?),
            T_BOOL => MetaArray::Bool(self.vec(len, |r| Ok(r.u8(w)? != 0))?),
            T_STRING => MetaArray::Str(self.vec(len, |r| r.string(w))?),
            T_ARRAY => MetaArray::Array(self.vec(len, |r| r.array_value(key, depth + 1))?),
            T_U64 => MetaArray::U64(self.vec(len, |r| r.u64(w))?),
            T_I64 => MetaArray::I64(self.vec(len, |r| Ok(r.u64(w)? as i64))?),
            _ => MetaArray::F64(self.vec(len, |r| Ok(f64::from_bits(r.u64(w)?)))?),
        })
    }

    fn value(&mut self, key: &str) -> Result<MetaValue, String> {
        let at = self.pos;
        let t = self.u32("metadata value type")?;
        let w = "metadata value";
        Ok(match t {
            T_U8 => MetaValue::U8(self.u8(w)?),
            T_I8 => MetaValue::I8(self.u8(w)? as i8),
            T_U16 => MetaValue::U16(self.u16(w)?),
            T_I16 => MetaValue::I16(self.u16(w)? as i16),
            T_U32 => MetaValue::U32(self.u32(w)?),
            T_I32 => MetaValue::I32(self.u32(w)? as i32),
            T_F32 => MetaValue::F32(f32::from_bits(self.u32(w)?)),
            T_BOOL => MetaValue::Bool(self.u8(w)? != 0),
            T_STRING => MetaValue::Str(self.string(w)?),
            T_ARRAY => MetaValue::Array(self.array_value(key, 1)?),
            T_U64 => MetaValue::U64(self.u64(w)?),
            T_I64 => MetaValue::I64(self.u64(w)? as i64),
            T_F64 => MetaValue::F64(f64::from_bits(self.u64(w)?)),
            _ => {
                return Err(format!(
                    "metadata {key:?}: unknown value type {t} at offset {at}"
                ))
            }
        })
    }
}

impl GgufFile {
    /// Maps the file at `path` read-only and parses its header; tensor data
    /// is read from the mapping only when a tensor is used.
    ///
    /// The file must not be truncated or rewritten while the `GgufFile`
    /// lives (as with any mapped file, a shrinking file would fault).
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let bytes = Bytes::map(path)
            .map_err(|e| GgufError(format!("{}: cannot read: {e}", path.display())))?;
        Self::parse_bytes(bytes, path)
    }

    /// Parses a GGUF image already in memory; `path` names it in errors.
    pub fn from_bytes(bytes: Vec<u8>, path: &Path) -> Result<GgufFile, GgufError> {
        Self::parse_bytes(Bytes::Owned(bytes), path)
    }

    fn parse_bytes(bytes: Bytes, path: &Path) -> Result<GgufFile, GgufError> {
        let mut f = GgufFile {
            path: path.to_path_buf(),
            version: 0,
            alignment: DEFAULT_ALIGNMENT,
            expert_count: None,
            data_start: 0,
            metadata: Vec::new(),
            tensors: Vec::new(),
            index: HashMap::new(),
            bytes,
        };
        f.parse()
            .map_err(|e| GgufError(format!("{}: {e}", path.display())))?;
        Ok(f)
    }

    fn parse(&mut self) -> Result<(), String> {
        let bytes = std::mem::replace(&mut self.bytes, Bytes::Owned(Vec::new()));
        let r = self.parse_header(&bytes);
        self.bytes = bytes;
        r
    }

    /// Tells the kernel the pages of `name`'s data are not needed any more
    /// (a mapped file only: they are dropped from this process's resident
    /// set and read again from the file if touched). Loading calls it once a
    /// tensor is repacked, so a model's file and its repacked copy are not
    /// resident together.
    pub fn release(&self, name: &str) {
        if let Some((s, e)) = self.tensor_info(name).and_then(|t| t.range) {
            self.bytes.release(s, e);
        }
    }

    fn parse_header(&mut self, bytes: &[u8]) -> Result<(), String> {
        let mut r = Reader { buf: bytes, pos: 0 };
        let magic = r.array::<4>("magic")?;
        if &magic != b"GGUF" {
            return Err(format!("not a GGUF file (magic {magic:02x?})"));
        }
        let version = r.u32("version")?;
        match version {
            2 | 3 => {}
            1 => return Err("GGUF version 1 is not supported (only 2 and 3)".into()),
            v if matches!(v.swap_bytes(), 2 | 3) => {
                return Err("big-endian GGUF files are not supported".into())
            }
            v => return Err(format!("unsupported GGUF version {v} (only 2 and 3)")),
        }
        self.version = version;
        // Minimal encodings: tensor info = name length + n_dims + type +
        // offset; key/value = key length + type + one byte.
        let n_tensors = r.count("tensor count", 8 + 4 + 4 + 8)?;
        let n_kv = r.count("metadata count", 8 + 4 + 1)?;

        let mut metadata: Vec<(String, MetaValue)> = Vec::with_capacity(n_kv);
        let mut keys = HashSet::with_capacity(n_kv);
        for _ in 0..n_kv {
            let key = r.string("metadata key")?;
            if !keys.insert(key.clone()) {
                return Err(format!("duplicate metadata key {key:?}"));
            }
            let v = r.value(&key)?;
            metadata.push((key, v));
        }
        self.metadata = metadata;

        if let Some(v) = self.metadata("general.alignment") {
            let a = v
                .as_u32()
                .ok_or("general.alignment is not an integer that fits in u32")?;
            if a == 0 || !a.is_power_of_two() {
                return Err(format!(
                    "general.alignment {a} is not a non-zero power of two"
                ));
            }
            self.alignment = a as usize;
        }

        let mut tensors: Vec<TensorInfo> = Vec::with_capacity(n_tensors);
        for i in 0..n_tensors {
            let name = r.string("tensor name")?;
            let n_dims = r.u32(&format!("tensor {name:?} n_dims"))?;
            if n_dims > MAX_DIMS {
                return Err(format!(
                    "tensor {name:?} has {n_dims} dimensions (at most {MAX_DIMS})"
                ));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(r.u64(&format!("tensor {name:?} dims"))?);
            }
            let type_id = r.u32(&format!("tensor {name:?} type"))?;
            let offset = r.u64(&format!("tensor {name:?} offset"))?;
            if self.index.insert(name.clone(), i).is_some() {
                return Err(format!("duplicate tensor name {name:?}"));
            }
            tensors.push(TensorInfo {
                name,
                dims,
                type_id,
                offset,
                range: None,
            });
        }

        // The data section starts at the next multiple of the alignment.
        let data_start = r
            .pos
            .checked_next_multiple_of(self.alignment)
            .ok_or("data section offset overflows")?;
        if !tensors.is_empty() && data_start > bytes.len() {
            return Err(format!(
                "truncated: the data section would start at {data_start}, the file has {} bytes",
                bytes.len()
            ));
        }
        self.data_start = data_start;

        for t in &mut tensors {
            t.range = self.tensor_range(t, bytes.len())?;
        }
        self.tensors = tensors;
        self.expert_count = self.declared_expert_count()?;
        if let Some(count) = self.expert_count {
            for t in self.tensors.iter().filter(|t| is_expert_stack(t)) {
                let e = t.experts().expect("a stack is 3-D");
                if e != u64::from(count) {
                    return Err(format!(
                        "tensor {:?} stacks {e} experts ({:?}), but {:?} says {count}",
                        t.name,
                        t.dims,
                        self.expert_count_key().unwrap_or_default()
                    ));
                }
            }
        }
        Ok(())
    }

    /// The metadata key of the experts per MoE layer, `{arch}.expert_count`,
    /// where the file names its architecture.
    fn expert_count_key(&self) -> Option<String> {
        let arch = self.metadata_str("general.architecture")?;
        Some(format!("{arch}.expert_count"))
    }

    /// The experts per MoE layer the metadata declares
    /// (`{arch}.expert_count`), if it does; a value that is not an integer
    /// is an error. Parsing reads it once and checks the stacks of experts
    /// against it (as llama.cpp refuses a tensor whose shape disagrees with
    /// it), so a count that disagrees with the tensors is a corrupt file,
    /// not a matrix short of experts found at run time.
    fn declared_expert_count(&self) -> Result<Option<u32>, String> {
        let Some(key) = self.expert_count_key() else {
            return Ok(None);
        };
        match self.metadata(&key) {
            None => Ok(None),
            Some(v) => v
                .as_u32()
                .map(Some)
                .ok_or_else(|| format!("metadata {key:?} is not an integer that fits in u32")),
        }
    }

    /// Checks a tensor's shape and offset; its byte range if its type is known.
    fn tensor_range(
        &self,
        t: &TensorInfo,
        file_len: usize,
    ) -> Result<Option<(usize, usize)>, String> {
        let name = &t.name;
        let mut elems: u64 = 1;
        for &d in &t.dims {
            if d > i64::MAX as u64 {
                return Err(format!("tensor {name:?} dimension {d} is out of range"));
            }
            elems = elems
                .checked_mul(d)
                .filter(|&e| e <= i64::MAX as u64)
                .ok_or_else(|| format!("tensor {name:?} dims {:?} overflow", t.dims))?;
        }
        if !t.offset.is_multiple_of(self.alignment as u64) {
            return Err(format!(
                "tensor {name:?} offset {} is not a multiple of the alignment {}",
                t.offset, self.alignment
            ));
        }
        let start = usize::try_from(t.offset)
            .ok()
            .and_then(|o| o.checked_add(self.data_start))
            .filter(|&s| s <= file_len)
            .ok_or_else(|| {
                format!(
                    "tensor {name:?} offset {} is past the end of the file ({} bytes, data at {})",
                    t.offset, file_len, self.data_start
                )
            })?;
        let Some((bv, bb)) = ggml::type_size(t.type_id) else {
            return Ok(None);
        };
        let ne0 = t.dims.first().copied().unwrap_or(1);
        if !ne0.is_multiple_of(bv as u64) {
            return Err(format!(
                "tensor {name:?} of type {} has a row of {ne0} values, not a multiple of {bv}",
                t.type_name()
            ));
        }
        // elems / bv blocks of bb bytes each.
        let nbytes = (elems / bv as u64)
            .checked_mul(bb as u64)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| format!("tensor {name:?} dims {:?} overflow", t.dims))?;
        let end = start
            .checked_add(nbytes)
            .filter(|&e| e <= file_len)
            .ok_or_else(|| {
                format!(
                    "tensor {name:?} ({} {:?}, {nbytes} bytes at {start}) runs past the end of the file ({file_len} bytes)",
                    t.type_name(),
                    t.dims
                )
            })?;
        Ok(Some((start, end)))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Tensor names in file order.
    pub fn tensor_names(&self) -> Vec<&str> {
        self.tensors.iter().map(|t| t.name.as_str()).collect()
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// Metadata pairs in file order.
    pub fn metadata_entries(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    pub fn metadata(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The experts per MoE layer the metadata declares
    /// (`{arch}.expert_count`), if it does. Every stack of experts in the
    /// file has that many: opening the file checked it.
    pub fn expert_count(&self) -> Option<u32> {
        self.expert_count
    }

    /// A string value (e.g. `general.architecture`).
    pub fn metadata_str(&self, key: &str) -> Option<&str> {
        self.metadata(key)?.as_str()
    }

    /// An integer value that fits in u32 (e.g. `general.alignment`).
    pub fn metadata_u32(&self, key: &str) -> Option<u32> {
        self.metadata(key)?.as_u32()
    }

    /// The raw bytes of a tensor of known type.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8], GgufError> {
        let t = self.find(name)?;
        let (s, e) = t.range.ok_or_else(|| {
            self.err(
                name,
                &format!("has {}, whose size is unknown", t.type_name()),
            )
        })?;
        Ok(&self.bytes[s..e])
    }

    fn err(&self, tensor: &str, msg: &str) -> GgufError {
        GgufError(format!("{}: tensor {tensor:?} {msg}", self.path.display()))
    }

    fn find(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensor_info(name)
            .ok_or_else(|| self.err(name, "is not in the file"))
    }

    /// A 2-D tensor of a format in kgen's format table (F32, F16, Q4_0, ...) as a matrix: `dims[0]` is K
    /// (contiguous), `dims[1]` is N. Its bytes are copied out of the file
    /// ([`GgufFile::matrix_view`] borrows them).
    pub fn matrix(&self, name: &str) -> Result<GgmlMatrix, GgufError> {
        self.matrix_view(name).map(|m| m.to_owned())
    }

    /// As [`GgufFile::matrix`], its bytes borrowed from the mapping, so a
    /// tensor is never resident twice. Every block is checked here; the
    /// runtime's own loads take [`GgufFile::matrix_view_shape`] and let the
    /// repack check them as it reads them.
    pub fn matrix_view(&self, name: &str) -> Result<GgmlView<'_>, GgufError> {
        let m = self.matrix_view_shape(name)?;
        m.check_rows(0..m.n)
            .map_err(|e| self.invalid(name, None, &e))?;
        Ok(m)
    }

    /// As [`GgufFile::matrix_view`], only the shape validated
    /// ([`GgmlView::validate_shape`]): for the int8 repack, which checks
    /// the blocks as it reads them; [`GgufFile::invalid`] words what it
    /// finds as `matrix_view` would.
    pub(crate) fn matrix_view_shape(&self, name: &str) -> Result<GgmlView<'_>, GgufError> {
        self.view_shape(name, None)
    }

    /// Expert `expert` of the 3-D tensor `name` (`dims = [k, n, experts]`,
    /// as mixture-of-experts models store their FFN weights: the experts'
    /// matrices one after the other) as a matrix, its bytes copied out of
    /// the file.
    pub fn expert(&self, name: &str, expert: usize) -> Result<GgmlMatrix, GgufError> {
        self.expert_view(name, expert).map(|m| m.to_owned())
    }

    /// As [`GgufFile::expert`], its bytes borrowed from the mapping and
    /// every block checked.
    pub fn expert_view(&self, name: &str, expert: usize) -> Result<GgmlView<'_>, GgufError> {
        let m = self.expert_view_shape(name, expert)?;
        m.check_rows(0..m.n)
            .map_err(|e| self.invalid(name, Some(expert), &e))?;
        Ok(m)
    }

    /// As [`GgufFile::expert_view`], only the shape validated (see
    /// [`GgufFile::matrix_view_shape`]).
    pub(crate) fn expert_view_shape(
        &self,
        name: &str,
        expert: usize,
    ) -> Result<GgmlView<'_>, GgufError> {
        self.view_shape(name, Some(expert))
    }

    /// Tells the kernel the pages of expert `expert` of `name` are not needed
    /// any more, as [`GgufFile::release`] does for a whole tensor.
    pub fn release_expert(&self, name: &str, expert: usize) {
        if let Ok((s, e)) = self.expert_range(name, expert) {
            self.bytes.release(s, e);
        }
    }

    /// The number of matrices the 3-D tensor `name` stacks, or why it is
    /// not a stack kgen loads: not 3-D, no matrices, or more than
    /// [`MAX_STACK`] (a corrupt count, refused before anything is read).
    pub(crate) fn stack_len(&self, name: &str) -> Result<usize, GgufError> {
        let t = self.find(name)?;
        match t.experts() {
            None => Err(self.err(
                name,
                &format!(
                    "has {} dimensions {:?}, a stack of experts needs 3",
                    t.dims.len(),
                    t.dims
                ),
            )),
            Some(0) => Err(self.err(name, "is a stack of no matrices")),
            Some(c) if c > MAX_STACK => Err(self.err(
                name,
                &format!("claims a stack of {c} matrices; kgen loads at most {MAX_STACK}"),
            )),
            // At most MAX_STACK: fits in usize.
            Some(c) => Ok(c as usize),
        }
    }

    /// The byte range of expert `expert` of the 3-D tensor `name`.
    fn expert_range(&self, name: &str, expert: usize) -> Result<(usize, usize), GgufError> {
        let t = self.find(name)?;
        let experts = self.stack_len(name)? as u64;
        if expert as u64 >= experts {
            return Err(self.err(
                name,
                &format!("has no expert {expert}: the stack has {experts} (0..{experts})"),
            ));
        }
        let (s, e) = t.range.ok_or_else(|| {
            self.err(
                name,
                &format!("has {}, whose size is unknown", t.type_name()),
            )
        })?;
        // The matrices are the same size and follow each other; `expert <
        // experts <= MAX_STACK`, so neither overflows.
        let each = (e - s) / experts as usize;
        Ok((s + expert * each, s + (expert + 1) * each))
    }

    /// A matrix (`expert` None: a 2-D tensor) or one expert of a 3-D
    /// tensor, shape validated.
    fn view_shape(&self, name: &str, expert: Option<usize>) -> Result<GgmlView<'_>, GgufError> {
        let t = self.find(name)?;
        if expert.is_none() && t.dims.len() != 2 {
            let hint = match t.experts() {
                Some(e) => format!(
                    " (a stack of {e} experts: load them one at a time, `expert`, or all, `Model::experts`)"
                ),
                None => String::new(),
            };
            return Err(self.err(
                name,
                &format!(
                    "has {} dimensions {:?}, a matrix needs 2{hint}",
                    t.dims.len(),
                    t.dims
                ),
            ));
        }
        let dtype = GgmlType::from_id(t.type_id).ok_or_else(|| {
            let supported: Vec<&str> = GgmlType::all()
                .filter(|t| t.is_gguf())
                .map(|t| t.name())
                .collect();
            self.err(
                name,
                &format!(
                    "has type {}, which is not supported (only {})",
                    t.type_name(),
                    supported.join(", ")
                ),
            )
        })?;
        let data = match expert {
            Some(e) => {
                let (s, e) = self.expert_range(name, e)?;
                &self.bytes[s..e]
            }
            None => self.tensor_bytes(name)?,
        };
        // Both dims were checked to fit in i64 and their product in the file.
        let to_usize = |d: u64| {
            usize::try_from(d).map_err(|_| self.err(name, &format!("dimension {d} is too large")))
        };
        let (k, n) = (to_usize(t.dims[0])?, to_usize(t.dims[1])?);
        let m = GgmlMatrix { k, n, dtype, data };
        m.validate_shape()
            .map_err(|e| self.invalid(name, expert, &e))?;
        Ok(m)
    }

    /// Tensor `name`'s (or its expert `expert`'s) blocks or shape are not
    /// a valid matrix.
    pub(crate) fn invalid(&self, name: &str, expert: Option<usize>, e: &FormatError) -> GgufError {
        match expert {
            None => self.err(name, &format!("is not a valid matrix: {e}")),
            Some(x) => self.err(name, &format!("expert {x} is not a valid matrix: {e}")),
        }
    }
}
