//! Cache-line aligned word buffers and the integer helpers every layout uses.

/// One cache line of words: the unit [`AlignedWords`] allocates in.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
struct Line([u32; 16]);

/// A zero-initialised word buffer that starts on a 64-byte boundary, so that
/// no vector load of a tile row splits a cache line (a plain `Vec<u32>` from
/// the allocator is only 16-byte aligned, and its offset varies run to run).
#[derive(Clone, Debug, Default)]
pub struct AlignedWords {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedWords {
    pub fn zeroed(len: usize) -> AlignedWords {
        AlignedWords {
            lines: vec![Line::default(); len.div_ceil(16)],
            len,
        }
    }
    /// The words as bytes (native order), for byte-granular layouts.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: any initialised u32 storage is valid as 4x as many bytes.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.len * 4) }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, with unique access; every byte pattern is a valid u32.
        unsafe {
            std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<u8>(), self.len * 4)
        }
    }
}

impl std::ops::Deref for AlignedWords {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        // SAFETY: `Line` is `repr(C)` around `[u32; 16]` with no padding, so
        // the lines are `16 * lines.len() >= len` contiguous, initialised u32.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u32>(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedWords {
    fn deref_mut(&mut self) -> &mut [u32] {
        // SAFETY: as in `deref`, with unique access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<u32>(), self.len) }
    }
}

pub fn round_up(x: usize, m: usize) -> usize {
    x.div_ceil(m) * m
}

pub fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

pub fn lcm(a: usize, b: usize) -> usize {
    a / gcd(a, b) * b
}
