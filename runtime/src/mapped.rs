//! Weight files mapped read-only rather than read: opening a multi-GB file
//! costs its header, and loading a tensor touches only that tensor's pages.

use std::path::Path;

/// A file's bytes: mapped, or (tests, crafted images) owned.
pub(crate) enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

impl Bytes {
    /// Maps `path` read-only. The file must not be truncated or rewritten
    /// while the mapping lives (as with any mapped file, a shrinking file
    /// would fault); the callers document that.
    pub(crate) fn map(path: &Path) -> std::io::Result<Bytes> {
        let file = std::fs::File::open(path)?;
        if file.metadata()?.len() == 0 {
            // An empty file cannot be mapped; the parsers name what is missing.
            return Ok(Bytes::Owned(Vec::new()));
        }
        // SAFETY: a read-only private mapping; see the contract above.
        Ok(Bytes::Mapped(unsafe { memmap2::Mmap::map(&file) }?))
    }

    /// Drops the whole pages inside `start..end` from the resident set (a
    /// mapping only; they are read back from the file if touched again).
    pub(crate) fn release(&self, start: usize, end: usize) {
        let Bytes::Mapped(map) = self else {
            return;
        };
        // 4 KiB pages; where pages are bigger the call fails and changes nothing.
        let page = 4096;
        let (s, e) = (start.next_multiple_of(page), end / page * page);
        if e > s {
            // SAFETY: a read-only private file mapping: dropped pages are
            // read back from the file, so no data the program sees changes.
            let _ =
                unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, s, e - s) };
        }
    }
}
