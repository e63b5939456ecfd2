//! The packed weight layout the generated f32-path kernels read.
//!
//! Loop levels, outermost first (QIGen section 3):
//!
//! 1. **Panels**: the `n_pad` output columns are cut into panels of `t_b`
//!    columns (the last one may be narrower). Threads split work by panel.
//! 2. **K blocks**: each panel is cut along K into blocks of `m_b` values, so a
//!    block's slice of `x` (and the panel's slice of `y`) stays in L1 while the
//!    block streams by: the mini-GEMV of eq. 5.
//! 3. **Tiles**: a block is cut into micro tiles of `TW = lanes * t_u` columns;
//!    the micro kernel keeps the tile's outputs in `t_u` vector registers.
//! 4. **Word rows**: inside a tile, each u32 word row (GPTQ packing: 32/bits
//!    values along K, least significant bits first) is `TW` contiguous words,
//!    one per column, so one vector load fetches `lanes` columns.
//!
//! Everything is stored in exactly the order the kernel reads it, so the
//! weight stream is sequential. Because the word packing is GPTQ's own,
//! repacking from a GPTQ `qweight` only moves whole words.

use crate::format::gptq::GptqMatrix;
use crate::layout::align::{lcm, round_up, AlignedWords};
use crate::spec::Group;

/// Geometry of one packed matrix for one kernel's plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub bits: u32,
    pub group: Group,
    /// f32 lanes per vector register of the kernel's ISA.
    pub lanes: usize,
    pub t_u: usize,
    /// K block, in values (multiple of the group and of 32).
    pub m_b: usize,
    /// Panel width, in columns (multiple of `lanes * t_u`).
    pub t_b: usize,
    /// Logical shape.
    pub k: usize,
    pub n: usize,
    /// Padded shape the kernel works on.
    pub k_pad: usize,
    pub n_pad: usize,
}

/// The plan's choices that shape a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiling {
    /// f32 lanes per vector of the kernel's ISA.
    pub lanes: usize,
    /// Output vectors per micro tile.
    pub t_u: usize,
    /// K block, values.
    pub m_b: usize,
    /// Panel width, columns.
    pub t_b: usize,
}

/// Weights, scales and negated scaled zeros in a kernel's layout.
#[derive(Clone, Debug, Default)]
pub struct Packed {
    /// Words in panel / block / tile / word-row order, 64-byte aligned.
    pub w: AlignedWords,
    /// `groups_pad x n_pad` scales, row-major.
    pub sc: Vec<f32>,
    /// `groups_pad x n_pad` values of `-scale * zero`, row-major.
    pub nz: Vec<f32>,
}

impl Layout {
    /// Values along K that one packing unit holds and the padding granule:
    /// K is padded to whole units and whole groups.
    pub fn k_granule(bits: u32, group: Group) -> usize {
        let unit = if bits == 3 { 32 } else { 32 / bits as usize };
        let g = group.size().unwrap_or(1);
        lcm(lcm(32, unit), g)
    }

    pub fn new(bits: u32, group: Group, tiling: Tiling, k: usize, n: usize) -> Layout {
        let Tiling {
            lanes,
            t_u,
            m_b,
            t_b,
        } = tiling;
        let tw = lanes * t_u;
        let k_pad = round_up(k.max(1), Self::k_granule(bits, group));
        let n_pad = round_up(n.max(1), tw);
        assert!(
            m_b.is_multiple_of(Self::k_granule(bits, group)),
            "m_b {m_b} not a multiple of the K granule"
        );
        assert!(
            t_b.is_multiple_of(tw),
            "t_b {t_b} not a multiple of the tile width {tw}"
        );
        Layout {
            bits,
            group,
            lanes,
            t_u,
            m_b,
            t_b,
            k,
            n,
            k_pad,
            n_pad,
        }
    }

    /// Columns of one micro tile.
    pub fn tile_width(&self) -> usize {
        self.lanes * self.t_u
    }

    /// Word rows in the whole padded K.
    pub fn word_rows(&self) -> usize {
        self.k_pad * self.bits as usize / 32
    }

    /// Groups along the padded K (1 for whole-column).
    pub fn groups_pad(&self) -> usize {
        match self.group {
            Group::Size(g) => self.k_pad / g,
            Group::Column => 1,
        }
    }

    pub fn panels(&self) -> usize {
        self.n_pad.div_ceil(self.t_b)
    }

    pub fn k_blocks(&self) -> usize {
        self.k_pad.div_ceil(self.m_b)
    }

    /// Total packed words.
    pub fn words(&self) -> usize {
        self.word_rows() * self.n_pad
    }

    /// Word offset of the start of `(panel, k_block, tile)` and that block's word rows.
    pub fn tile_offset(&self, panel: usize, kb: usize, tile: usize) -> (usize, usize) {
        let kw = self.word_rows();
        let pw = self.panel_width(panel);
        let bw = self.m_b * self.bits as usize / 32;
        let rows = bw.min(kw - kb * bw);
        let off = panel * self.t_b * kw + kb * bw * pw + tile * self.tile_width() * rows;
        (off, rows)
    }

    pub fn panel_width(&self, panel: usize) -> usize {
        self.t_b.min(self.n_pad - panel * self.t_b)
    }

    /// Moves a GPTQ-packed matrix into this layout.
    ///
    /// Panics only if `src` disagrees with the layout's shape or format, which
    /// callers check first (see `GptqMatrix::validate`).
    pub fn repack(&self, src: &GptqMatrix) -> Packed {
        assert_eq!(
            (src.k, src.n, src.bits, src.group),
            (self.k, self.n, self.bits, self.group)
        );
        let mut w = AlignedWords::zeroed(self.words());
        let src_rows = src.word_rows();
        let tw = self.tile_width();
        for panel in 0..self.panels() {
            let p0 = panel * self.t_b;
            let tiles = self.panel_width(panel) / tw;
            for kb in 0..self.k_blocks() {
                let r0 = kb * self.m_b * self.bits as usize / 32;
                for tile in 0..tiles {
                    let (off, rows) = self.tile_offset(panel, kb, tile);
                    let c0 = p0 + tile * tw;
                    let cols = tw.min(self.n.saturating_sub(c0));
                    if cols == 0 {
                        continue;
                    }
                    for r in 0..rows.min(src_rows.saturating_sub(r0)) {
                        let s = (r0 + r) * self.n + c0;
                        let d = off + r * tw;
                        w[d..d + cols].copy_from_slice(&src.qweight[s..s + cols]);
                    }
                }
            }
        }
        let gp = self.groups_pad();
        let mut sc = vec![0f32; gp * self.n_pad];
        let mut nz = vec![0f32; gp * self.n_pad];
        for g in 0..src.groups() {
            for j in 0..self.n {
                let s = src.scales[g * self.n + j];
                sc[g * self.n_pad + j] = s;
                nz[g * self.n_pad + j] = -s * src.zeros[g * self.n + j];
            }
        }
        Packed { w, sc, nz }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_words_are_aligned_and_zeroed() {
        for len in [0, 1, 15, 16, 17, 1000] {
            let mut w = AlignedWords::zeroed(len);
            assert_eq!(w.len(), len);
            assert_eq!(w.as_ptr() as usize % 64, 0);
            assert!(w.iter().all(|&v| v == 0));
            if len > 0 {
                w[len - 1] = 7;
                assert_eq!(w[len - 1], 7);
            }
        }
    }

    #[test]
    fn offsets_cover_every_word_once() {
        for &(bits, group, k, n) in &[
            (4u32, Group::Size(32), 300usize, 70usize),
            (3, Group::Column, 100, 33),
            (2, Group::Size(128), 1000, 130),
            (8, Group::Size(16), 48, 17),
        ] {
            let lanes = 8;
            let t_u = 2;
            let g = Layout::k_granule(bits, group);
            let l = Layout::new(
                bits,
                group,
                Tiling {
                    lanes,
                    t_u,
                    m_b: g * 2,
                    t_b: lanes * t_u * 3,
                },
                k,
                n,
            );
            let mut seen = vec![0u8; l.words()];
            for p in 0..l.panels() {
                for kb in 0..l.k_blocks() {
                    for t in 0..l.panel_width(p) / l.tile_width() {
                        let (off, rows) = l.tile_offset(p, kb, t);
                        for s in &mut seen[off..off + rows * l.tile_width()] {
                            *s += 1;
                        }
                    }
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "bits {bits} group {group:?}");
        }
    }
}
