//! Cache-line aligned word buffers and the integer helpers every layout uses.

/// One cache line of words: the unit [`AlignedWords`] allocates in.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
struct Line([u32; 16]);

/// A zero-initialised word buffer that starts on a 64-byte boundary, so that
/// no vector load of a tile row splits a cache line (a plain `Vec<u32>` from
/// the allocator is only 16-byte aligned, and its offset varies run to run).
///
/// Buffers of [`AlignedWords::MAPPED`] bytes or more (a model's repacked
/// matrices) are anonymous mappings that ask for transparent huge pages:
/// the repack writes every page once, and with 4 KiB pages the page faults
/// cost as much as the repack itself (measured: 25 ms against 4 ms for
/// 47 MB on a Zen 3 VM).
#[derive(Default)]
pub struct AlignedWords {
    storage: Storage,
    len: usize,
}

#[derive(Default)]
enum Storage {
    #[default]
    Empty,
    Lines(Vec<Line>),
    Mapped(memmap2::MmapMut),
}

impl AlignedWords {
    /// Bytes from which a buffer is mapped rather than allocated: one huge
    /// page.
    pub const MAPPED: usize = 2 << 20;

    pub fn zeroed(len: usize) -> AlignedWords {
        let n = len.div_ceil(16);
        let storage = if n == 0 {
            Storage::Empty
        } else if let Some(map) = (n * 64 >= Self::MAPPED)
            .then(|| memmap2::MmapMut::map_anon(n * 64).ok())
            .flatten()
        {
            // A hint: without THP the mapping works with small pages.
            #[cfg(target_os = "linux")]
            let _ = map.advise(memmap2::Advice::HugePage);
            Storage::Mapped(map)
        } else {
            // Zeroed allocation, not `vec![Line::default(); n]`: a large one
            // is fresh pages the kernel already zeroes, not a second pass of
            // stores.
            let layout = std::alloc::Layout::array::<Line>(n).expect("buffer size overflows");
            // SAFETY: `layout` has a non-zero size; the pointer is checked
            // for null; all-zero bytes are a valid `Line`; and `Vec<Line>`
            // with capacity `n` frees with exactly this layout.
            Storage::Lines(unsafe {
                let p = std::alloc::alloc_zeroed(layout).cast::<Line>();
                if p.is_null() {
                    std::alloc::handle_alloc_error(layout);
                }
                Vec::from_raw_parts(p, n, n)
            })
        };
        AlignedWords { storage, len }
    }

    /// The first word: 64-byte aligned (a mapping is page aligned), valid
    /// for `16 * len.div_ceil(16)` words, dangling (aligned) when empty.
    fn ptr(&self) -> *const u32 {
        match &self.storage {
            Storage::Empty => std::ptr::NonNull::<Line>::dangling().as_ptr().cast(),
            Storage::Lines(v) => v.as_ptr().cast(),
            Storage::Mapped(m) => m.as_ptr().cast(),
        }
    }

    fn ptr_mut(&mut self) -> *mut u32 {
        match &mut self.storage {
            Storage::Empty => std::ptr::NonNull::<Line>::dangling().as_ptr().cast(),
            Storage::Lines(v) => v.as_mut_ptr().cast(),
            Storage::Mapped(m) => m.as_mut_ptr().cast(),
        }
    }

    /// The words as bytes (native order), for byte-granular layouts.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` initialised u32 (see `deref`),
        // which are 4x as many bytes.
        unsafe { std::slice::from_raw_parts(self.ptr().cast::<u8>(), self.len * 4) }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, with unique access; every byte pattern is a valid u32.
        unsafe { std::slice::from_raw_parts_mut(self.ptr_mut().cast::<u8>(), self.len * 4) }
    }
}

impl Clone for AlignedWords {
    fn clone(&self) -> AlignedWords {
        let mut copy = AlignedWords::zeroed(self.len);
        copy.copy_from_slice(self);
        copy
    }
}

impl std::fmt::Debug for AlignedWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedWords")
            .field("len", &self.len)
            .finish()
    }
}

impl std::ops::Deref for AlignedWords {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        // SAFETY: `Line` is `repr(C)` around `[u32; 16]` with no padding, and
        // a mapping of `64 * lines` zeroed bytes is as many u32, so there are
        // `16 * lines >= len` contiguous, initialised, aligned u32 (none
        // needed when `len` is 0).
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedWords {
    fn deref_mut(&mut self) -> &mut [u32] {
        // SAFETY: as in `deref`, with unique access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr_mut(), self.len) }
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

#[cfg(test)]
mod buffer_tests {
    use super::AlignedWords;

    #[test]
    fn small_and_mapped_buffers_are_zeroed_aligned_and_clone() {
        for len in [
            0,
            1,
            17,
            AlignedWords::MAPPED / 4 - 1,
            AlignedWords::MAPPED / 4 + 5,
        ] {
            let mut w = AlignedWords::zeroed(len);
            assert_eq!(w.len(), len);
            assert_eq!(w.as_ptr() as usize % 64, 0, "len {len}");
            assert!(w.iter().all(|&v| v == 0), "len {len}");
            for (i, v) in w.iter_mut().enumerate() {
                *v = i as u32;
            }
            let c = w.clone();
            assert_eq!(&c[..], &w[..]);
            assert_eq!(c.as_bytes().len(), 4 * len);
        }
    }
}
