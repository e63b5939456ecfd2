//! Cache-line aligned word buffers and the integer helpers every layout uses.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
/// 47 MB on a Zen 3 VM). Smaller buffers made inside a [`WordArena`]'s
/// scope are carved from that arena instead.
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
    /// Lines of a [`WordArena`]: `base` points into it, the `Arc` keeps it
    /// alive, and no other buffer's lines overlap these.
    Arena {
        base: *mut Line,
        _arena: Arc<WordArena>,
    },
}

// SAFETY: every storage but `Arena` is Send and Sync on its own. An `Arena`
// buffer's lines belong to it alone (the arena hands each range out once),
// are read only through `&self` and written only through `&mut self`, and
// the `Arc` keeps the arena's mapping alive on any thread.
unsafe impl Send for Storage {}
unsafe impl Sync for Storage {}

/// A reserved range of memory that buffers under [`AlignedWords::MAPPED`]
/// are carved from, one after the other, while a thread is inside its
/// [`WordArena::scope`]: a mixture-of-experts layer's experts (under a MiB
/// each in Qwen3-30B-A3B), which otherwise each get 4 KiB pages of their
/// own. A token's picks then take hundreds of TLB misses that dense
/// matrices of the same bytes, on huge pages, do not: on a Zen 3 VM the
/// fused GEMVs of a token ran 10-16% slower than dense matrices of the same
/// bytes with the experts apart, 3-7% with them in one huge-page mapping.
///
/// The range is reserved, not committed (`MAP_NORESERVE`): pages are
/// touched, and so resident, only as buffers are written, and the repack
/// writes straight into them (copying finished buffers in would make every
/// page twice, which on the VM tripled the load time of a MoE file). The
/// arena never reuses a range, and its mapping lives until its last buffer
/// is dropped. A buffer that does not fit what is left is allocated as
/// usual.
pub struct WordArena {
    base: *mut Line,
    lines: usize,
    next: AtomicUsize,
    _map: memmap2::MmapMut,
}

// SAFETY: `base` points into `_map`, which the arena owns; ranges are handed
// out once each through an atomic counter, so threads never share one.
unsafe impl Send for WordArena {}
unsafe impl Sync for WordArena {}

thread_local! {
    /// The arena of the innermost [`WordArena::scope`] on this thread.
    static CURRENT: RefCell<Option<Arc<WordArena>>> = const { RefCell::new(None) };
}

impl WordArena {
    /// Reserves `bytes` (rounded up to whole huge pages), asking for
    /// transparent huge pages; `None` if the reservation fails (callers
    /// then allocate as usual).
    pub fn new(bytes: usize) -> Option<Arc<WordArena>> {
        const HUGE: usize = AlignedWords::MAPPED;
        let bytes = bytes.checked_next_multiple_of(HUGE)?;
        // One huge page more than asked, so that the arena can start on a
        // huge-page boundary (kernels before 6.7 align only file mappings
        // that way): otherwise its first and last pages stay small.
        let mut map = memmap2::MmapOptions::new()
            .len(bytes.checked_add(HUGE)?)
            .no_reserve_swap()
            .map_anon()
            .ok()?;
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        let skip = map.as_ptr().align_offset(HUGE);
        Some(Arc::new(WordArena {
            // SAFETY: `skip` < HUGE, and the mapping is `bytes + HUGE` long.
            base: unsafe { map.as_mut_ptr().add(skip) }.cast::<Line>(),
            lines: bytes / 64,
            next: AtomicUsize::new(0),
            _map: map,
        }))
    }

    /// Runs `f` with this arena as the thread's current one (buffers under
    /// [`AlignedWords::MAPPED`] that `f` makes on this thread come from
    /// it), then restores the previous one, also if `f` panics.
    pub fn scope<R>(self: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Arc<WordArena>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| *c.borrow_mut() = self.0.take());
            }
        }
        let _restore = Restore(CURRENT.with(|c| c.borrow_mut().replace(Arc::clone(self))));
        f()
    }

    /// Bytes handed out so far.
    pub fn used_bytes(&self) -> usize {
        self.next.load(Ordering::Relaxed).min(self.lines) * 64
    }

    /// `n` fresh lines of the current arena, if a scope is open and they fit.
    fn take_current(n: usize) -> Option<Storage> {
        let arena = CURRENT.with(|c| c.borrow().clone())?;
        let mut at = arena.next.load(Ordering::Relaxed);
        loop {
            let end = at.checked_add(n).filter(|&e| e <= arena.lines)?;
            match arena
                .next
                .compare_exchange_weak(at, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => at = now,
            }
        }
        // SAFETY: lines `at..at + n` lie in the reservation and no other
        // caller got them (the exchange above claimed them); they were
        // never written, so they are zero.
        let base = unsafe { arena.base.add(at) };
        Some(Storage::Arena {
            base,
            _arena: arena,
        })
    }
}

impl AlignedWords {
    /// Bytes from which a buffer is mapped rather than allocated: one huge
    /// page.
    pub const MAPPED: usize = 2 << 20;

    pub fn zeroed(len: usize) -> AlignedWords {
        let n = len.div_ceil(16);
        let storage = if n == 0 {
            Storage::Empty
        } else if let Some(s) = (n * 64 < Self::MAPPED)
            .then(|| WordArena::take_current(n))
            .flatten()
        {
            s
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
            Storage::Arena { base, .. } => base.cast_const().cast(),
        }
    }

    fn ptr_mut(&mut self) -> *mut u32 {
        match &mut self.storage {
            Storage::Empty => std::ptr::NonNull::<Line>::dangling().as_ptr().cast(),
            Storage::Lines(v) => v.as_mut_ptr().cast(),
            Storage::Mapped(m) => m.as_mut_ptr().cast(),
            Storage::Arena { base, .. } => base.cast(),
        }
    }

    /// Whether this buffer's words lie in a [`WordArena`].
    pub fn in_arena(&self) -> bool {
        matches!(self.storage, Storage::Arena { .. })
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

    #[test]
    fn buffers_made_in_an_arena_scope_come_from_it_one_after_the_other() {
        use super::WordArena;
        let arena = WordArena::new(1 << 20).unwrap();
        let lens = [1, 17, 1000, 16, 0];
        let mut bufs: Vec<AlignedWords> =
            arena.scope(|| lens.iter().map(|&l| AlignedWords::zeroed(l)).collect());
        // The first starts on a huge-page boundary.
        assert_eq!(bufs[0].as_ptr() as usize % AlignedWords::MAPPED, 0);
        for (b, &l) in bufs.iter().zip(&lens) {
            assert_eq!(b.in_arena(), l > 0, "len {l}");
            assert_eq!(b.len(), l);
            assert_eq!(b.as_ptr() as usize % 64, 0);
            assert!(b.iter().all(|&v| v == 0));
        }
        let at = |i: usize| bufs[i].as_ptr() as usize;
        for i in 1..4 {
            assert_eq!(
                at(i) - at(i - 1),
                lens[i - 1].div_ceil(16) * 64,
                "buffer {i}"
            );
        }
        assert_eq!(arena.used_bytes(), (1 + 2 + 63 + 1) * 64);
        // Writing one touches no other; buffers outlive the arena handle
        // and move between threads.
        for (i, b) in bufs.iter_mut().enumerate() {
            b.fill(i as u32 + 1);
        }
        drop(arena);
        let third = bufs.remove(2);
        assert!(bufs[..3]
            .iter()
            .enumerate()
            .all(|(i, b)| b.iter().all(|&v| v == if i < 2 { i as u32 + 1 } else { 4 })));
        let sum = std::thread::spawn(move || third.iter().map(|&v| u64::from(v)).sum::<u64>());
        assert_eq!(sum.join().unwrap(), 3 * 1000);
        // Outside any scope, and for buffers of a huge page or more, as usual.
        assert!(!AlignedWords::zeroed(100).in_arena());
        let arena = WordArena::new(4 << 20).unwrap();
        assert!(!arena
            .scope(|| AlignedWords::zeroed(AlignedWords::MAPPED / 4))
            .in_arena());
    }

    #[test]
    fn a_full_arena_falls_back_and_scopes_nest_and_restore() {
        use super::WordArena;
        // 2 MiB: 32768 lines.
        let arena = WordArena::new(1).unwrap();
        let other = WordArena::new(1).unwrap();
        let (a, b, c, d) = arena.scope(|| {
            let a = AlignedWords::zeroed(16 * 30000);
            let b = AlignedWords::zeroed(16 * 3000); // does not fit: allocated
            let c = other.scope(|| AlignedWords::zeroed(16));
            let d = AlignedWords::zeroed(16 * 2768); // fits exactly
            (a, b, c, d)
        });
        assert!(a.in_arena() && !b.in_arena() && c.in_arena() && d.in_arena());
        assert_eq!(arena.used_bytes(), 2 << 20);
        assert_eq!(other.used_bytes(), 64);
        assert!(!AlignedWords::zeroed(16).in_arena(), "the scope ended");
        // A panic inside a scope restores the outer one too.
        let r = std::panic::catch_unwind(|| other.scope(|| panic!("inside")));
        assert!(r.is_err());
        assert!(!AlignedWords::zeroed(16).in_arena());
        // Two threads taking from one arena get disjoint ranges.
        let shared = WordArena::new(8 << 20).unwrap();
        let ptrs: Vec<usize> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    let shared = &shared;
                    s.spawn(move || {
                        shared.scope(|| {
                            (0..200)
                                .map(|_| {
                                    let w = AlignedWords::zeroed(160);
                                    let p = w.as_ptr() as usize;
                                    std::mem::forget(w);
                                    p
                                })
                                .collect::<Vec<_>>()
                        })
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let mut sorted = ptrs.clone();
        sorted.sort_unstable();
        assert!(sorted.windows(2).all(|w| w[1] - w[0] >= 640));
        assert_eq!(shared.used_bytes(), 400 * 640);
    }
}
