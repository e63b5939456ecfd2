//! A minimal GGUF writer: what tests and tools need to make model files
//! without Python (the runtime reads them; gguf-py writes the real ones the
//! parity tests use).

use crate::format::ggml::GgmlMatrix;

/// The alignment of the data section and of every tensor's data in it.
pub const GGUF_ALIGN: usize = 32;

/// The header of a GGUF v3 file (no metadata) for tensors given as (name,
/// ggml type id, dimensions with the contiguous one first (`[k, n]` for a
/// matrix, `[k, n, experts]` for a stack of them), bytes of data), padded to
/// [`GGUF_ALIGN`]. The data section follows it: each tensor's bytes in the
/// same order, each padded to [`GGUF_ALIGN`]. Writers that stream large
/// data (`runtime/examples/load_model.rs`) write the header alone.
pub fn gguf_header(tensors: &[(&str, u32, &[usize], usize)]) -> Vec<u8> {
    gguf_header_with(&[], tensors)
}

/// A metadata value of the kinds [`gguf_header_with`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Meta<'a> {
    U32(u32),
    Str(&'a str),
}

/// As [`gguf_header`], with metadata key/value pairs (say
/// `general.architecture` and `llama.expert_count`) before the tensors.
pub fn gguf_header_with(
    meta: &[(&str, Meta)],
    tensors: &[(&str, u32, &[usize], usize)],
) -> Vec<u8> {
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    let string = |head: &mut Vec<u8>, s: &str| {
        head.extend_from_slice(&(s.len() as u64).to_le_bytes());
        head.extend_from_slice(s.as_bytes());
    };
    for &(key, value) in meta {
        string(&mut head, key);
        // GGUF value types: 4 = u32, 8 = string.
        match value {
            Meta::U32(v) => {
                head.extend_from_slice(&4u32.to_le_bytes());
                head.extend_from_slice(&v.to_le_bytes());
            }
            Meta::Str(v) => {
                head.extend_from_slice(&8u32.to_le_bytes());
                string(&mut head, v);
            }
        }
    }
    let mut offset = 0usize;
    for &(name, type_id, dims, bytes) in tensors {
        head.extend_from_slice(&(name.len() as u64).to_le_bytes());
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for &d in dims {
            head.extend_from_slice(&(d as u64).to_le_bytes());
        }
        head.extend_from_slice(&type_id.to_le_bytes());
        head.extend_from_slice(&(offset as u64).to_le_bytes());
        offset += bytes.next_multiple_of(GGUF_ALIGN);
    }
    head.resize(head.len().next_multiple_of(GGUF_ALIGN), 0);
    head
}

/// A whole GGUF image of tensors given as (name, ggml type id, dimensions
/// as [`gguf_header`] takes them, data): any type id, including ones kgen
/// has no codec for (the lattice i-quants, for the tests of unsupported
/// types), and any number of dimensions.
pub fn gguf_image_raw(tensors: &[(&str, u32, &[usize], &[u8])]) -> Vec<u8> {
    gguf_image_raw_with(&[], tensors)
}

/// As [`gguf_image_raw`], with metadata (see [`gguf_header_with`]).
pub fn gguf_image_raw_with(
    meta: &[(&str, Meta)],
    tensors: &[(&str, u32, &[usize], &[u8])],
) -> Vec<u8> {
    let entries: Vec<_> = tensors
        .iter()
        .map(|&(name, id, dims, data)| (name, id, dims, data.len()))
        .collect();
    let mut image = gguf_header_with(meta, &entries);
    for (_, _, _, data) in tensors {
        image.extend_from_slice(data);
        image.resize(image.len().next_multiple_of(GGUF_ALIGN), 0);
    }
    image
}

/// A GGUF v3 image holding `tensors` (name, matrix with `dims = [k, n]`),
/// no metadata, alignment [`GGUF_ALIGN`]. kgen's own formats (`k2_bb`, ...)
/// are written with their own ids, which readers refuse as unknown types:
/// tests use that; models have no business storing them in GGUF files.
pub fn gguf_image(tensors: &[(&str, &GgmlMatrix)]) -> Vec<u8> {
    let dims: Vec<[usize; 2]> = tensors.iter().map(|(_, m)| [m.k, m.n]).collect();
    let raw: Vec<_> = tensors
        .iter()
        .zip(&dims)
        .map(|(&(name, m), d)| (name, m.dtype.id(), &d[..], m.data.as_slice()))
        .collect();
    gguf_image_raw(&raw)
}
