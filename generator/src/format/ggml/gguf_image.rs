//! A minimal GGUF writer: what tests and tools need to make model files
//! without Python (the runtime reads them; gguf-py writes the real ones the
//! parity tests use).

use crate::format::ggml::GgmlMatrix;

/// A GGUF v3 image holding `tensors` (name, matrix with `dims = [k, n]`),
/// no metadata, alignment 32.
pub fn gguf_image(tensors: &[(&str, &GgmlMatrix)]) -> Vec<u8> {
    const ALIGN: usize = 32;
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&0u64.to_le_bytes());
    let mut data: Vec<u8> = Vec::new();
    for (name, m) in tensors {
        head.extend_from_slice(&(name.len() as u64).to_le_bytes());
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(&2u32.to_le_bytes());
        head.extend_from_slice(&(m.k as u64).to_le_bytes());
        head.extend_from_slice(&(m.n as u64).to_le_bytes());
        head.extend_from_slice(&m.dtype.id().to_le_bytes());
        head.extend_from_slice(&(data.len() as u64).to_le_bytes());
        data.extend_from_slice(&m.data);
        data.resize(data.len().next_multiple_of(ALIGN), 0);
    }
    head.resize(head.len().next_multiple_of(ALIGN), 0);
    head.extend_from_slice(&data);
    head
}
