//! The int8-activation family's data: packed weight layout, on-the-fly
//! activation quantization, and the exact oracle.
//!
//! Weights are symmetric with one scale per block of 32 values along K
//! (GGUF Q4_0 / Q8_0; kgen's own symmetric groups of 64-256 store the group's
//! scale in each of its blocks). Activations are quantized per block of 32 to
//! int8 with an f32 scale (as Q8_0), so a block's contribution to an output is
//! `d_w * d_x * sum(q_w * q_x)`, an exact integer dot product scaled once.
//!
//! **Layout** (paper 000's SIMD-aware interleaving): `L` consecutive output
//! columns are interleaved so that one i32 lane of a vector register belongs
//! to one column and no horizontal reduction is ever needed. For each block
//! and group of columns the weights form `bits` chunks of `4 L` bytes; in
//! chunk `g`, lane `c` holds 4 bytes of column `c`:
//! - 4-bit: byte `j` = `q[8g + j] | q[8g + 4 + j] << 4` with unsigned
//!   nibbles `q = level + 8`: masking gives values `8g..8g+4`, a 4-bit shift
//!   and mask gives `8g+4..8g+8`, each matched by a 4-byte activation
//!   broadcast. The `+8` is removed once per block with the activation sum.
//! - 8-bit: byte `j` = `q[4g + j]` as i8.
//! - 2-bit (`layout_bits` 2: Q2_K, TQ1_0, TQ2_0): 2 chunks, byte `j` of
//!   chunk `g` = `sum_c q[16g + 4c + j] << 2c`, unsigned: a shift by `2c`
//!   and a mask give values `16g + 4c..+4`, one activation broadcast each.
//!   With `G` = 8 the one chunk's byte `j` is `sum_c q[8c + j] << 2c`.
//! - 3-bit (`layout_bits` 3: Q3_K, the IQ1 and IQ2 codebook indices; 4-byte
//!   groups, elsewhere read at 4 bits): 3 chunks, the 4-bit layout's chunks
//!   0..3 with levels below 8, so bits 3 and 7 of every byte are free: they
//!   carry chunk 3, whose byte `j` bit `g` sits in bits 3 (low level) and 7
//!   (high) of chunk `g`'s byte `j`. A stored chunk's levels are one mask
//!   (`& 7`) or a shift and a mask; chunk 3 is `(a >> 3 & 0x11) | (b >> 2 &
//!   0x22) | (c >> 1 & 0x44)` over the three loads, then the same. 12 bytes
//!   per column and block where the 4-bit layout takes 16.
//! - 1-bit (`layout_bits` 1: kgen's `k1`): 1 chunk, byte `j` =
//!   `sum_c q[4c + j] << c` for `c` in 0..8; 4-byte groups only (the pair
//!   ISAs run no 1-bit kernels).
//!
//! Grid formats (kgen's `k2_*`, `k1`) store indices, which their kernels
//! look up a nibble at a time (one byte shuffle per index field).
//!
//! With `group_bytes` G = 8 (the MMLA layouts, paper 000's Q4_0_4_8 and
//! Q4_0_8_8) a lane is 8 bytes of one column and a 16-byte vector holds a
//! column pair: 4-bit chunk `g` byte `j` = `q[16g + j] | q[16g + 8 + j] << 4`.
//! The interleave (columns whose chunk `g` is contiguous) is `lanes * t_u`.
//! `signed` layouts store 4-bit levels as two's-complement nibbles
//! (`level ^ 8`): the kernel gets `16 q` from one shift (low) or one mask
//! (high), and the factor 16 is folded into the activation scale.
//!
//! **5-bit** layouts (`layout_bits` 5: GGUF Q5_0; any format whose levels
//! are 0..32 with an offset) hold the low 4 bits of each level exactly as
//! the 4-bit layout holds a nibble (unsigned, in its chunks for the group
//! size), followed by a plane of fifth bits, one 4-byte word per column in
//! column order (`t`, then lane), so `block_bytes` is 20. For `G = 4` the
//! plane is simply chunk 4. In a column's word:
//! - `G = 4`: byte `j` bit `g` is the fifth bit of the value in chunk `g`'s
//!   low nibble at byte `j` (value `8g + j`), bit `4 + g` that of its high
//!   nibble (`8g + 4 + j`). The kernels isolate chunk `g`'s two bits with one
//!   shift and one mask, `y = (h >> g) & 0x11` (32-bit shifts: bits that
//!   cross into the byte below are masked off), then insert them:
//!   `lo = (w & 0x0F) | (y << 4 & 0x10)`, `hi = (w >> 4 & 0x0F) | (y & 0x10)`.
//!   NEON does each insert in one `sli` / `sri` (4 ops per chunk), AVX-512
//!   in one `vpternlogd` bit select (6 ops as written, about 7 as LLVM
//!   emits them: it folds `y << 4` into a second shift and mask of `h`),
//!   AVX2 in and + or (9 ops).
//! - `G = 8` (pairs): byte `k` bit `2g + s` is the fifth bit of chunk `g`'s
//!   low nibble at byte `k + 4s` of the column's 8 (value `16g + k + 4s`),
//!   bit `4 + 2g + s` that of its high nibble (`16g + 8 + k + 4s`). The
//!   plane of two column pairs is one 16-byte load `h`; zipping the words of
//!   `h` with those of `h >> 1` (per byte) gives each pair's 8 bytes per
//!   column with chunk `g`'s bits at `2g` and `4 + 2g`, then as for `G = 4`
//!   with a shift of `2g`. Its column groups are half as wide as the nibble
//!   chunks', so the kernels read it through a pointer of its own.
//!
//! Levels stay unsigned (0..32, never signed nibbles) and the offset (16 for
//! Q5_0) is removed once per block through the activation sums, on every ISA.
//!
//! **6-bit** layouts (`layout_bits` 6: GGUF Q6_K, levels 0..64 with an
//! offset of 32, removed through the activation sums as for 5-bit) take the
//! 8-bit layout's chunks of levels (`32 / G` per block) and keep the first
//! three quarters: each keeps its levels in bits 0..6 of every byte and
//! carries in bits 6..8 one bit pair of a dropped (spill) chunk, so a block
//! is 24 bytes per column. Spill chunk `i` (chunk `3/4 C + i` of the `C`)
//! is spread over stored chunks `3 i`, `3 i + 1`, `3 i + 2`: byte `j` of
//! stored chunk `3 i + p` holds bits `2p..2p + 2` of the spill chunk's byte
//! `j` (`G = 4`: chunks 6 and 7 over 0..3 and 3..6; `G = 8`: chunk 3 over
//! 0..3). A kept chunk is one mask (`& 0x3F`); a spill chunk is
//! `(a >> 6) | (b >> 6) << 2 | (c >> 6) << 4` per byte, three shifts and a
//! merge. Both scales of a Q6_K block (one per 16 values) follow the
//! chunks' halves: the spill chunks are all in the second one.
//!
//! `codebook` layouts (GGUF IQ4_NL, and IQ4_XS, whose sub-block scales
//! `d (ls - 32)` are rounded to f16) repack as Q4_0 with unsigned
//! nibbles, but the nibbles are indices into the 16-entry int8 codebook
//! [`IQ4_NL_VALUES`]: the kernel unpacks them (mask, shift + mask), looks
//! them up with a byte table lookup (`tbl` / `pshufb`), and takes a signed x
//! signed dot product with no activation-sum correction; the vpdpbusd ISAs
//! look them up in the table shifted by 128 and remove `128 * sum(x)` per
//! block (the kernels' business: the layout is the same).
//!
//! Loop levels: panels of `t_b` columns (the unit threads share), tiles of
//! `TW = L * t_u` columns, then all of K in 32-value blocks, chunks, and
//! the `t_u` column groups of a tile. Unlike the f32 family
//! ([`crate::layout::f32`]) the K blocks of `m_b` values are not a level:
//! a tile's blocks run contiguously over all of K, and the kernels' drivers
//! call each micro kernel once per tile (and row group) over the whole K,
//! because calls split at `m_b` measured slower (see the int8 emitter's
//! `driver`). The f16 scales form a second stream in the same order, `L`
//! per column group and block, so one vector op converts the scales of `L`
//! columns; where the kernels take a super-block's scales once
//! ([`I8Layout::super_groups`]), the stream holds per tile and super-block
//! a header of those, then the blocks' entries.

use crate::format::ggml::{GgmlMatrix, GgmlType, GgmlView, QK};
use crate::format::row::ScaleAt;
use crate::format::FormatError;
use crate::layout::align::{round_up, AlignedWords};
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Geometry of one packed int8-family matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct I8Layout {
    /// The weight format (a row of the format table the int8 family runs).
    pub format: GgmlType,
    /// Bits per level in the layout (the format's `layout_bits`).
    pub bits: u32,
    /// Columns per vector: i32 lanes (G = 4) or column pairs (G = 8).
    pub lanes: usize,
    pub t_u: usize,
    /// Bytes of one column per lane and chunk: 4 (dot-product layouts) or 8
    /// (matrix-multiply layouts).
    pub group_bytes: usize,
    /// 4-bit levels as signed nibbles (kernels read `16 q`).
    pub signed: bool,
    /// The scale stream holds the format's integer sub-scales and its f16
    /// super-block scales ([`I8Layout::int_sub_scales`]).
    pub int_scales: bool,
    /// The format has one scale per super-block (TQ1_0, TQ2_0) and the
    /// stream holds it once, not per block ([`I8Layout::group_scales`]).
    pub group_scales: bool,
    /// K block, values (multiple of 32).
    pub m_b: usize,
    /// Panel width, columns (multiple of `lanes * t_u`).
    pub t_b: usize,
    pub k: usize,
    pub n: usize,
    pub k_pad: usize,
    pub n_pad: usize,
}

/// Weights and scales in an [`I8Layout`].
#[derive(Clone, Debug, Default)]
pub struct I8Packed {
    /// Weight bytes (in 64-byte aligned words).
    pub w: AlignedWords,
    /// The scale stream: f16 scales (and mins) as bits, or, for
    /// [`I8Layout::int_sub_scales`], sub-scale bytes and f16 super-scales.
    pub sc: Vec<u16>,
}

impl I8Layout {
    pub fn new(
        format: GgmlType,
        lanes: usize,
        t_u: usize,
        m_b: usize,
        t_b: usize,
        k: usize,
        n: usize,
    ) -> I8Layout {
        let bits = format
            .format()
            .int8
            .unwrap_or_else(|| panic!("{format} has no int8 layout"))
            .layout_bits;
        let tw = lanes * t_u;
        assert!(
            m_b.is_multiple_of(QK) && t_b.is_multiple_of(tw),
            "blocks must be whole tiles and 32-blocks"
        );
        I8Layout {
            format,
            bits,
            lanes,
            t_u,
            group_bytes: 4,
            signed: false,
            int_scales: false,
            group_scales: false,
            m_b,
            t_b,
            k,
            n,
            k_pad: round_up(k.max(1), QK),
            n_pad: round_up(n.max(1), tw),
        }
    }

    /// The same geometry with `group_bytes`-byte lane groups and, for 4-bit,
    /// signed nibbles.
    pub fn grouped(mut self, group_bytes: usize, signed: bool) -> I8Layout {
        assert!(
            group_bytes == 4 || group_bytes == 8,
            "lane groups of 4 or 8 bytes"
        );
        // No kernel reads one (`I8Isa::supports` refuses 1-bit pair ISAs).
        assert!(
            self.bits != 1 || group_bytes == 4,
            "1-bit int8 layouts take 4-byte lane groups"
        );
        self.group_bytes = group_bytes;
        if group_bytes == 8 {
            // No 3-bit pair layout: such formats are read at 4 bits there.
            self = self.read_at(self.int8_row().read_bits(false));
        }
        self.signed = signed && self.bits == 4 && !self.codebook();
        self
    }

    /// The same geometry at `bits` per level, as a kernel reads it: the
    /// format's `layout_bits`, or 4 for a 3-bit format a kernel reads at 4
    /// ([`crate::format::row::Int8Repack::read_bits`]). Before
    /// [`I8Layout::grouped`], which decides signed nibbles by the bits.
    pub fn read_at(mut self, bits: u32) -> I8Layout {
        let r = self.int8_row();
        assert!(
            bits == r.read_bits(true) || bits == r.read_bits(false),
            "{} is read at {} or {} bits, not {bits}",
            self.format,
            r.read_bits(true),
            r.read_bits(false)
        );
        self.bits = bits;
        self
    }

    fn int8_row(&self) -> crate::format::row::Int8Repack {
        self.format
            .format()
            .int8
            .expect("int8 layouts repack int8 formats")
    }

    /// The same geometry with the format's integer sub-scales kept as
    /// they are, where it has them and `on`
    /// ([`crate::format::row::IntSubScales`]). Per tile and super-block
    /// (the K-quants' 256 values, the kernels' activation scale group) the
    /// stream holds a header, the tile's f16 `d`s and, with mins, its
    /// `-dmin`s (`TW` entries each), then per 32-value block one entry per
    /// column: the block's two sub-scale bytes (Q2_K: each 16-value half's
    /// scale and min nibbles; Q6_K: each half's i8 scale; Q3_K: each
    /// half's 6-bit scale as the i8 `sc - 32`; Q4_K / Q5_K: the 6-bit scale
    /// code, then the min code). So a Q4_K column takes 4.625 bits per
    /// weight (4 + 8 x 16 / 256 + 2 x 16 / 256), Q2_K and Q6_K exactly
    /// their file's 2.625 and 6.5625. (An f16 in every block, non-zero in
    /// two of eight, cost 0.375 bits per weight more with mins, 0.4375
    /// without.)
    pub fn int_sub_scales(mut self, on: bool) -> I8Layout {
        self.int_scales = on && self.int_repack().is_some();
        if self.int_scales {
            self.assert_whole_super_blocks("integer sub-scales need");
        }
        self
    }

    /// The kernels read a super-block's scales from its header
    /// ([`I8Layout::super_groups`]), so every K block (and call) must
    /// start a super-block: K and `m_b` are whole ones.
    fn assert_whole_super_blocks(&self, what: &str) {
        let group = QK * self.int8_row().act_group;
        assert!(
            self.m_b.is_multiple_of(group) && self.k_pad.is_multiple_of(group),
            "{what} K and its blocks in whole {group}-value super-blocks"
        );
    }

    /// The same geometry with a format's one scale per super-block (its
    /// row's `group_scale`: TQ1_0's and TQ2_0's `d` per 256 values) held
    /// once per column and super-block, where `on`: per tile and
    /// super-block the tile's `TW` f16 scales, and nothing per block. The
    /// kernels that sum a super-block's integer dots and scale them once
    /// read it at the group's close. So TQ2_0 repacks at its file's 2.06
    /// bits per weight (2.5 with a scale per 32 values).
    pub fn group_scales(mut self, on: bool) -> I8Layout {
        let r = self.int8_row();
        self.group_scales = on && r.group_scale && r.act_group > 1;
        if self.group_scales {
            self.assert_whole_super_blocks("one scale per super-block needs");
        }
        self
    }

    fn int_repack(&self) -> Option<crate::format::row::IntSubScales> {
        self.format.format().int8.and_then(|r| r.int_sub_scales)
    }

    /// Codebook indices (IQ4_NL): unsigned nibbles the kernel looks up.
    pub fn codebook(&self) -> bool {
        self.format.format().codebook().is_some()
    }

    /// The GGUF type this layout repacks.
    pub fn source_type(&self) -> GgmlType {
        self.format
    }

    /// Activation scale factor the kernels expect: signed nibbles read `16 q`.
    pub fn x_scale(&self) -> f32 {
        if self.signed {
            1.0 / 16.0
        } else {
            1.0
        }
    }

    /// `Q4_0_8_8` / `IQ4_NL_4_4`: format, interleaved columns, bytes per
    /// lane group.
    pub fn name(&self) -> String {
        format!(
            "{}_{}_{}",
            self.source_type().name(),
            self.tile_width(),
            self.group_bytes
        )
    }

    pub fn tile_width(&self) -> usize {
        self.lanes * self.t_u
    }

    /// Whether the format has mins: the scale stream then holds, per tile
    /// and block, the tile's `TW` scales followed by its `TW` mins (each
    /// `scales_per_block` times: both halves' scales, then both mins), or
    /// with integer sub-scales its `TW` `-dmin`s in each super-block's
    /// header.
    pub fn mins(&self) -> bool {
        self.format.format().int8.is_some_and(|r| r.mins)
    }

    /// Scales per column and 32-value block (2: one per 16 values).
    pub fn scales_per_block(&self) -> usize {
        self.format.format().int8.map_or(1, |r| r.scales_per_block)
    }

    /// u16 entries of the scale stream per column and block: its f16
    /// scales, then as many mins where the format has mins; with integer
    /// sub-scales 1, the sub-scale bytes, and with group scales 0, besides
    /// each super-block's header ([`I8Layout::super_groups`]).
    pub fn scale_entries(&self) -> usize {
        if self.int_scales {
            return 1;
        }
        if self.group_scales {
            return 0;
        }
        self.format.format().int8.map_or(1, |r| r.scale_entries())
    }

    /// Where the stream goes by super-blocks ([`I8Layout::int_sub_scales`],
    /// [`I8Layout::group_scales`]): blocks per super-block, and f16 header
    /// entries per column and super-block ahead of the blocks' entries.
    pub fn super_groups(&self) -> Option<(usize, usize)> {
        let r = self.format.format().int8?;
        if self.group_scales {
            return Some((r.act_group, 1));
        }
        let int = r.int_sub_scales.filter(|_| self.int_scales)?;
        Some((r.act_group, int.super_entries()))
    }

    /// Index in the scale stream of the entries `column_blocks` column
    /// blocks in, at a tile's first block or a super-block's (by
    /// super-blocks, a whole number of them: what
    /// [`I8Layout::int_sub_scales`] and [`I8Layout::group_scales`] assert
    /// K and its blocks are).
    pub fn scale_index(&self, column_blocks: usize) -> usize {
        let e = self.scale_entries();
        match self.super_groups() {
            Some((g, h)) => {
                debug_assert_eq!(column_blocks % g, 0, "not at a super-block's first block");
                column_blocks / g * (g * e + h)
            }
            None => column_blocks * e,
        }
    }

    /// 32-value blocks along the padded K.
    pub fn blocks(&self) -> usize {
        self.k_pad / QK
    }

    /// Weight bytes of one column in one block.
    pub fn block_bytes(&self) -> usize {
        4 * self.bits as usize
    }

    pub fn panels(&self) -> usize {
        self.n_pad.div_ceil(self.t_b)
    }

    pub fn panel_width(&self, panel: usize) -> usize {
        self.t_b.min(self.n_pad - panel * self.t_b)
    }

    /// Packed weight bytes.
    pub fn bytes(&self) -> usize {
        self.n_pad * self.blocks() * self.block_bytes()
    }

    /// Offsets of block 0 of `panel`'s tile `tile`: (weight byte, scale
    /// index). A panel holds its tiles one after another, each with all of
    /// its blocks along K (block `b` starts `b * tile_width()` columns on),
    /// so the bytes do not depend on `m_b`, and a driver can run a micro
    /// kernel over any range of a tile's blocks in one call (by
    /// super-blocks, [`I8Layout::super_groups`], a range of whole ones).
    pub fn tile_offset(&self, panel: usize, tile: usize) -> (usize, usize) {
        let cols_before = (panel * self.t_b + tile * self.tile_width()) * self.blocks();
        (
            cols_before * self.block_bytes(),
            self.scale_index(cols_before),
        )
    }

    /// Repacks blocks of the format's GGUF type (`src.k == self.k`,
    /// `src.n == self.n`, `src.dtype == self.source_type()`).
    ///
    /// Each source block turns into `bits` 4-byte lane words; the loop walks
    /// the destination in order, so writes are sequential per tile.
    pub fn repack<D: AsRef<[u8]>>(&self, src: &GgmlMatrix<D>) -> I8Packed {
        self.repack_threads(src, 1)
    }

    /// [`I8Layout::repack`] on `threads` scoped threads, each filling a
    /// contiguous range of panels (panels are contiguous in both streams).
    pub fn repack_threads<D: AsRef<[u8]>>(&self, src: &GgmlMatrix<D>, threads: usize) -> I8Packed {
        match self.fill(&src.view(), threads, false) {
            Ok(packed) => packed,
            Err(_) => unreachable!("the blocks are not checked"),
        }
    }

    /// [`I8Layout::repack_threads`] of a matrix not yet validated: the
    /// shape first ([`GgmlMatrix::validate_shape`]), then each tile's rows
    /// ([`GgmlMatrix::check_rows`]) just before they are read, so a mapped
    /// file is read once, not once to validate and again to repack. The
    /// error is [`GgmlMatrix::validate`]'s (the first bad block in file
    /// order); once a part of the matrix has failed, the parts after it
    /// stop at their next tile.
    pub fn repack_checked<D: AsRef<[u8]>>(
        &self,
        src: &GgmlMatrix<D>,
        threads: usize,
    ) -> Result<I8Packed, FormatError> {
        src.validate_shape()?;
        self.fill(&src.view(), threads, true)
    }

    fn fill(
        &self,
        src: &GgmlView<'_>,
        threads: usize,
        check: bool,
    ) -> Result<I8Packed, FormatError> {
        let want = self.source_type();
        assert_eq!((src.dtype, src.k, src.n), (want, self.k, self.n));
        let mut w = AlignedWords::zeroed(self.bytes().div_ceil(4));
        // Padding columns keep scale 0, so whatever their levels they add 0.
        let mut sc = vec![0u16; self.scale_index(self.n_pad * self.blocks())];
        let panels = self.panels();
        let parts = threads.clamp(1, panels);
        // Start of panel p in words and in scales.
        let cols = |p: usize| (p * self.t_b).min(self.n_pad) * self.blocks();
        let word_at = |p: usize| cols(p) * self.block_bytes() / 4;
        let scale_at = |p: usize| self.scale_index(cols(p));
        let fill = self.filler();
        // The lowest part whose blocks failed: a part above it stops, as
        // its error would not be the one reported.
        let failed = AtomicUsize::new(usize::MAX);
        let failed = &failed;
        std::thread::scope(|scope| {
            let (mut words, mut scales): (&mut [u32], &mut [u16]) = (&mut w, &mut sc);
            let (mut spawned, mut last) = (Vec::with_capacity(parts - 1), Ok(()));
            for part in 0..parts {
                let (p0, p1) = (part * panels / parts, (part + 1) * panels / parts);
                let (wa, wb) = std::mem::take(&mut words).split_at_mut(word_at(p1) - word_at(p0));
                let (sa, sb) =
                    std::mem::take(&mut scales).split_at_mut(scale_at(p1) - scale_at(p0));
                (words, scales) = (wb, sb);
                let bases = (word_at(p0), scale_at(p0));
                let check = check.then_some((failed, part));
                if part + 1 == parts {
                    last = fill(self, src, p0..p1, wa, sa, bases, check);
                } else {
                    spawned
                        .push(scope.spawn(move || fill(self, src, p0..p1, wa, sa, bases, check)));
                }
            }
            // Parts in order: the first error is the one in the lowest rows.
            spawned
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .chain([last])
                .collect::<Result<(), _>>()
        })?;
        Ok(I8Packed { w, sc })
    }

    /// The [`I8Layout::fill_panels`] instance for this layout: the lane
    /// group's word count, the words per column and block (the 5-bit
    /// plane's word aside) and the bits as constants, so the copies unroll
    /// and each level packing inlines (a runtime-length copy per group is a
    /// memcpy call in the hot loop); and the scale path as a constant, so
    /// the loop carries only its own path's state.
    fn filler(&self) -> Filler {
        macro_rules! by_path {
            ($gw:literal, $words:literal, $bits:literal) => {
                match self.scale_path() {
                    ScalePath::Direct => Self::fill_panels::<$gw, $words, $bits, DIRECT>,
                    ScalePath::Int => Self::fill_panels::<$gw, $words, $bits, INT>,
                    ScalePath::F32 => Self::fill_panels::<$gw, $words, $bits, F32>,
                }
            };
        }
        match (self.group_bytes, self.bits) {
            (4, 1) => by_path!(1, 1, 1),
            (_, 1) => unreachable!("`grouped` refuses 1-bit pair layouts"),
            (4, 2) => by_path!(1, 2, 2),
            (4, 3) => by_path!(1, 3, 3),
            (_, 3) => unreachable!("`grouped` reads 3-bit formats at 4 in pairs"),
            (_, 2) => by_path!(2, 2, 2),
            (4, 8) => by_path!(1, 8, 8),
            (4, 6) => by_path!(1, 6, 6),
            (4, 5) => by_path!(1, 4, 5),
            (4, _) => by_path!(1, 4, 4),
            (_, 8) => by_path!(2, 8, 8),
            (_, 6) => by_path!(2, 6, 6),
            (_, 5) => by_path!(2, 4, 5),
            _ => by_path!(2, 4, 4),
        }
    }

    /// How a block's scales reach the scale stream.
    fn scale_path(&self) -> ScalePath {
        let fmt = self.format.format();
        let repack = fmt.int8.expect("only int8 formats are repacked");
        // Blocks of 32 that start with their f16 scale and hold their levels
        // in Q4_0 / Q8_0 byte order right after it are copied a word at a
        // time; formats with integer sub-scales keep them (on layouts that
        // take them); the rest form each scale in f32 and round it to f16.
        if matches!(self.bits, 4 | 8)
            && fmt.block == QK
            && !repack.mins
            && repack.scales_per_block == 1
            && fmt.scales == [ScaleAt::Bytes(0)]
        {
            ScalePath::Direct
        } else if self.int_scales && self.int_repack().is_some() {
            // Integer sub-scales are stored as they are: no f32 pass.
            ScalePath::Int
        } else {
            ScalePath::F32
        }
    }

    /// Fills `panels` into `words` / `sc`, which start at `(word, scale)` = `base`.
    ///
    /// Column by column (a tile's columns, then the next tile's), each
    /// column's 32-value blocks along K: each is decoded into the lane words
    /// of every chunk (`col_words`) and scattered to its tile's chunks.
    fn fill_panels<const GW: usize, const WORDS: usize, const BITS: u32, const PATH: u8>(
        &self,
        src: &GgmlView<'_>,
        panels: std::ops::Range<usize>,
        words: &mut [u32],
        sc: &mut [u16],
        base: (usize, usize),
        check: Option<(&AtomicUsize, usize)>,
    ) -> Result<(), FormatError> {
        let tw = self.tile_width();
        let bb = self.block_bytes();
        // Everything is whole u32 words: lane groups are GW = 1 or 2 words.
        debug_assert_eq!(GW * 4, self.group_bytes);
        let tile_words = tw * bb / 4;
        // 5-bit: the nibble chunks, then the plane of fifth bits (one word
        // per column, after the chunks' 4 tw words).
        debug_assert_eq!(BITS, self.bits);
        let plane = BITS == 5;
        debug_assert_eq!(WORDS * 4, bb - if plane { 4 } else { 0 });
        let fmt = src.dtype.format();
        let repack = fmt.int8.expect("only int8 formats are repacked");
        // Source blocks per row, and 32-value sub-blocks per source block.
        let (src_blocks, subs) = (src.k / fmt.block, fmt.block / QK);
        let block_bytes = src.dtype.block_bytes();
        let row_bytes = src_blocks * block_bytes;
        let direct = PATH == DIRECT;
        let (s_n, spb) = (self.scale_entries(), repack.scales_per_block);
        let groups = self.super_groups();
        debug_assert!(groups.is_none() || repack.act_group == subs);
        let int_scales = (PATH == INT).then(|| self.int_repack()).flatten();
        let via_f32 = PATH == F32;
        debug_assert_eq!(PATH, self.scale_path() as u8);
        let flip = if self.signed { 0x8888_8888u32 } else { 0 };
        // Signed nibbles are `level - 8` (the flip): exact for Q4_0's offset
        // of 8, corrected through the mins for formats with mins (offset 0).
        // Another offset (Q3_K's 4) is shifted to 8 first, so the nibble is
        // `level - offset`, the value itself.
        let shift = match fmt.offset() {
            o @ 1..=7 if self.signed => (8 - o) as u8,
            _ => 0,
        };
        // A sub-block's levels into `out`: 4-bit levels (and 5-bit ones'
        // low four, with their fifth bits) stored in an order the chunks
        // regroup directly are read as they are; others (and levels
        // shifted to another offset) one per byte first.
        let fifth = repack.fifth.filter(|_| BITS == 5);
        let stored = repack
            .nibbles
            .filter(|_| shift == 0 && (BITS == 4 || fifth.is_some()));
        let chunks = |block: &[u8], sub: usize, out: &mut [u32; QK / 4]| match stored {
            Some(at) => {
                block_chunks(4, self.group_bytes, &at.q4_0_bytes(block, sub), out);
                if let Some(f) = fifth {
                    out[4] = fifth_word(self.group_bytes, f.word(block, sub));
                }
            }
            None => {
                let mut levels = (repack.block_levels)(block, sub);
                if shift != 0 {
                    levels = levels.map(|q| q.wrapping_add(shift) & 0x0F);
                }
                level_chunks(BITS, self.group_bytes, &levels, out)
            }
        };
        // A zero level: nibble 8 unsigned, 0 signed; 0 as i8; 5-bit 16
        // (nibble 0, fifth bit 1).
        let mut zero = [0u32; QK / 4];
        match BITS {
            4 => zero[..4].fill(0x8888_8888 ^ flip),
            5 => zero[4] = u32::MAX,
            6 => six_bit_chunks(self.group_bytes, &[32; QK], &mut zero),
            _ => {}
        }
        // The formats' scales are f32 products (`d * sc`): they are rounded
        // to f16 a panel at a time, one vector conversion instead of a
        // portable one per value.
        let mut panel_sc: Vec<f32> = Vec::new();
        for panel in panels {
            let s0 = self.scale_index((panel * self.t_b).min(self.n_pad) * self.blocks()) - base.1;
            let s1 =
                self.scale_index(((panel + 1) * self.t_b).min(self.n_pad) * self.blocks()) - base.1;
            if via_f32 {
                panel_sc.clear();
                panel_sc.resize(s1 - s0, 0.0);
            }
            for tile in 0..self.panel_width(panel) / tw {
                let c0 = panel * self.t_b + tile * tw;
                if let Some((failed, part)) = check {
                    if failed.load(Ordering::Relaxed) < part {
                        return Ok(());
                    }
                    // The tile's rows, about to be read (into cache).
                    if let Err(e) = src.check_rows(c0.min(self.n)..(c0 + tw).min(self.n)) {
                        failed.fetch_min(part, Ordering::Relaxed);
                        return Err(e);
                    }
                }
                let (off, soff) = self.tile_offset(panel, tile);
                let (off, soff) = (off / 4 - base.0, soff - base.1);
                // Column by column, each column's blocks along K: the
                // column's source row is read front to back (and a tile's
                // rows are adjacent in the file), so reads stream; the
                // writes land in the tile, which stays in cache. (Block by
                // block, each block's columns in turn, was 1.2x slower on
                // a Zen 3: the tile's rows as that many short streams.)
                for col in 0..tw {
                    // The column's source row, `None` past N: padding, zero
                    // levels and scale 0.
                    let row = (c0 + col < self.n)
                        .then(|| &src.data[(c0 + col) * row_bytes..][..row_bytes]);
                    let (mut sb, mut sub) = (0, 0);
                    for (b, tile_w) in words[off..][..self.blocks() * tile_words]
                        .chunks_exact_mut(tile_words)
                        .enumerate()
                    {
                        // The block's entries; by super-blocks after its
                        // super-block's header (`sb` is the super-block,
                        // `sub` the block in it).
                        let (at_sc, head) = match groups {
                            Some((_, h)) => {
                                let head = soff + sb * (subs * s_n + h) * tw;
                                (head + (h + sub * s_n) * tw, head)
                            }
                            None => (soff + b * s_n * tw, 0),
                        };
                        let mut col_words = zero;
                        // Blocks past K are padding too.
                        if let Some(block) = row
                            .filter(|_| sb < src_blocks)
                            .map(|r| &r[sb * block_bytes..][..block_bytes])
                        {
                            if direct {
                                sc[at_sc + col] = u16::from_le_bytes([block[0], block[1]]);
                                block_chunks(BITS, self.group_bytes, &block[2..], &mut col_words);
                            } else if let Some(int) = int_scales {
                                sc[at_sc + col] = u16::from_le_bytes(int.pair(block, sub));
                                // The super-block's header, once.
                                if sub == 0 {
                                    let [d, dmin] = int.supers(block);
                                    sc[head + col] = d;
                                    if int.super_entries() == 2 {
                                        sc[head + tw + col] = dmin ^ 0x8000;
                                    }
                                }
                                chunks(block, sub, &mut col_words);
                            } else if self.group_scales {
                                // The super-block's one scale, once.
                                if sub == 0 {
                                    panel_sc[head - s0 + col] = (repack.sub_scale)(block, 0).0;
                                }
                                chunks(block, sub, &mut col_words);
                            } else {
                                let tile_sc = &mut panel_sc[at_sc - s0..][..s_n * tw];
                                for h in 0..spb {
                                    let (d, m) = (repack.sub_scale)(block, sub * spb + h);
                                    tile_sc[col + h * tw] = d;
                                    if repack.mins {
                                        tile_sc[col + (spb + h) * tw] = m;
                                    }
                                }
                                chunks(block, sub, &mut col_words);
                            }
                            for v in &mut col_words[..4] {
                                *v ^= flip;
                            }
                        }
                        // A chunk holds one lane group per column of the
                        // tile, so the kernel loads a chunk for all columns.
                        for (g, chunk) in col_words[..WORDS].chunks_exact(GW).enumerate() {
                            let dst = (g * tw + col) * GW;
                            tile_w[dst..dst + GW].copy_from_slice(chunk);
                        }
                        if plane {
                            tile_w[tw * 4 + col] = col_words[4];
                        }
                        sub += 1;
                        if sub == subs {
                            (sb, sub) = (sb + 1, 0);
                        }
                    }
                }
            }
            if via_f32 {
                // Round to nearest even, as `stored_scale` (and F16C) do.
                sc[s0..s1]
                    .reinterpret_cast_mut::<half::f16>()
                    .convert_from_f32_slice(&panel_sc);
            }
        }
        Ok(())
    }
}

/// [`I8Layout::fill_panels`]'s signature.
type Filler = fn(
    &I8Layout,
    &GgmlView<'_>,
    std::ops::Range<usize>,
    &mut [u32],
    &mut [u16],
    (usize, usize),
    Option<(&AtomicUsize, usize)>,
) -> Result<(), FormatError>;

/// [`I8Layout::scale_path`]: the f16 scale copied with the levels, integer
/// sub-scales kept as they are, or scales computed in f32 and rounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum ScalePath {
    Direct = DIRECT,
    Int = INT,
    F32 = F32,
}
const DIRECT: u8 = 0;
const INT: u8 = 1;
const F32: u8 = 2;

/// One column's block in chunk order for lane groups of `gb` bytes: 4-bit
/// chunk `g` byte `j` packs value `2 gb g + j` (low nibble) and
/// `2 gb g + gb + j` (high); 8-bit chunks are the values in order.
#[inline(always)]
fn block_chunks(bits: u32, gb: usize, q: &[u8], out: &mut [u32; QK / 4]) {
    let word = |at: usize| u32::from_le_bytes(q[at..at + 4].try_into().expect("4 bytes"));
    if bits == 8 {
        for (g, v) in out.iter_mut().enumerate() {
            *v = word(4 * g);
        }
        return;
    }
    // GGUF Q4_0: byte i holds value i (low nibble) and value i + 16 (high).
    // Chunks 0..16/(2 gb) take low nibbles, the rest high ones; within a
    // nibble plane, chunk g' takes bytes 2 gb g'.. (its low half) and
    // 2 gb g' + gb.. (its high half). Done a word at a time: this is the
    // repack's inner loop.
    const LO: u32 = 0x0F0F_0F0F;
    let (a, b, c, d) = (word(0), word(4), word(8), word(12));
    let lo = |x: u32, y: u32| (x & LO) | ((y & LO) << 4);
    let hi = |x: u32, y: u32| ((x >> 4) & LO) | (y & !LO);
    // Little-endian words: an 8-byte group is two consecutive words.
    out[..4].copy_from_slice(&if gb == 4 {
        [lo(a, b), lo(c, d), hi(a, b), hi(c, d)]
    } else {
        [lo(a, c), lo(b, d), hi(a, c), hi(b, d)]
    });
}

/// A sub-block's scale and min as the layout stores them: f16, rounded to
/// nearest (the K-quants' `d * sc` is an f32 product).
#[inline]
pub fn stored_scale(
    sub_scale: fn(&[u8], usize) -> (f32, f32),
    block: &[u8],
    sub: usize,
) -> (half::f16, half::f16) {
    let (d, m) = sub_scale(block, sub);
    // Portable rounding (F16C's, bit for bit), inlined for the repack loop.
    (half::f16::from_f32_const(d), half::f16::from_f32_const(m))
}

/// One column's block of `levels` in the layout of `bits` (1, 2, 4, 5, 6 or 8) for
/// lane groups of `gb` bytes.
#[inline(always)]
fn level_chunks(bits: u32, gb: usize, levels: &[u8; QK], out: &mut [u32; QK / 4]) {
    match bits {
        6 => six_bit_chunks(gb, levels, out),
        3 => three_bit_chunks(levels, out),
        5 => five_bit_chunks(gb, levels, out),
        4 => block_chunks(4, gb, &nibble_bytes(levels), out),
        2 => two_bit_chunks(gb, levels, out),
        1 => out[0] = one_bit_word(levels),
        _ => block_chunks(8, gb, levels, out),
    }
}

/// One column's block of 3-bit `levels` (0..8) for 4-byte lane groups, as
/// the module documentation says: the 4-bit layout's chunks 0..3 with
/// their levels' low 3 bits in bits 0..3 and 4..7 of each byte, carrying
/// bit `g` of chunk 3's two levels in bits 3 and 7 of chunk `g`.
#[inline]
fn three_bit_chunks(levels: &[u8; QK], out: &mut [u32; QK / 4]) {
    const LOW3: u32 = 0x7777_7777;
    const BITS: u32 = 0x1111_1111;
    let mut v = [0u32; QK / 4];
    block_chunks(4, 4, &nibble_bytes(levels), &mut v);
    let spill = v[3] & LOW3;
    for (g, o) in out.iter_mut().enumerate().take(3) {
        *o = (v[g] & LOW3) | ((spill >> g) & BITS) << 3;
    }
}

/// One column's block of 2-bit `levels` (0..4) for lane groups of `gb`
/// bytes, in bit pair `c` of each byte: 4-byte groups, chunk `g` byte `i`
/// holds value `16 g + 4 c + i`; 8-byte groups (one chunk) byte `i` holds
/// value `8 c + i`. Levels below 4 never carry into the next byte.
#[inline]
fn two_bit_chunks(gb: usize, levels: &[u8; QK], out: &mut [u32; QK / 4]) {
    let word = |at: usize| u32::from_le_bytes(levels[at..at + 4].try_into().expect("4 bytes"));
    // Word `v` of the block: chunk `v` (4-byte groups), or half `v` of the
    // one 8-byte chunk.
    let at = |v: usize, c: usize| {
        if gb == 4 {
            16 * v + 4 * c
        } else {
            8 * c + 4 * v
        }
    };
    for (v, o) in out.iter_mut().enumerate().take(2) {
        *o = (0..4).fold(0, |a, c| a | word(at(v, c)) << (2 * c));
    }
}

/// One column's block of 1-bit `levels` (0 or 1) for 4-byte lane groups:
/// byte `j` bit `c` holds value `4 c + j`, so the bits of one byte are the
/// values its lane's activation broadcasts `4 c..4 c + 4` meet.
#[inline]
fn one_bit_word(levels: &[u8; QK]) -> u32 {
    let word = |at: usize| u32::from_le_bytes(levels[at..at + 4].try_into().expect("4 bytes"));
    (0..8).fold(0, |a, c| a | (word(4 * c) & 0x0101_0101) << c)
}

/// Levels (low 4 bits) in Q4_0's byte order: byte `i` holds value `i` in
/// its low nibble and value `i + 16` in its high one. Sixteen bytes at a
/// time: this runs for every block the repack does not copy directly.
#[inline]
fn nibble_bytes(levels: &[u8; QK]) -> [u8; QK / 2] {
    const LOW: u128 = u128::from_le_bytes([0x0F; 16]);
    let half = |at: usize| u128::from_le_bytes(levels[at..at + 16].try_into().expect("16 bytes"));
    ((half(0) & LOW) | (half(16) & LOW) << 4).to_le_bytes()
}

/// One column's block of 5-bit `levels` (0..32) for lane groups of `gb`
/// bytes: the low 4 bits in the 4-bit layout's chunks (`out[..4]`), the
/// fifth bits as the module documentation says (`out[4]`).
#[inline]
fn five_bit_chunks(gb: usize, levels: &[u8; QK], out: &mut [u32; QK / 4]) {
    block_chunks(4, gb, &nibble_bytes(levels), out);
    // Chunk g byte j (of gb) holds values 2 gb g + j (low nibble) and
    // 2 gb g + gb + j (high): their fifth bits go to byte j % 4, bit
    // (gb / 4) g + j / 4, and 4 above it. A word of four levels' fifth bits
    // (one per byte, at bit 0) lands with one shift: bytes j..j + 4 of a
    // nibble half share g and j / 4.
    let fifth = |at: usize| {
        u32::from_le_bytes(levels[at..at + 4].try_into().expect("4 bytes")) >> 4 & 0x0101_0101
    };
    let mut h = 0u32;
    for g in 0..16 / gb {
        for half in 0..2 {
            for q in 0..gb / 4 {
                let at = 2 * gb * g + gb * half + 4 * q;
                h |= fifth(at) << ((gb / 4) * g + q + 4 * half);
            }
        }
    }
    out[4] = h;
}

/// [`five_bit_chunks`]'s word of fifth bits from the sub-block's fifth
/// bits as a format stores them (bit `v`: value `v`). Value `v` of chunk
/// `g`, nibble half `h`, byte `4 q + i` goes to bit `8 i + (gb / 4) g + q +
/// 4 h`: a permutation of the five bits of `v`, done by swapping them a
/// pair at a time (delta swaps) rather than bit by bit.
#[inline(always)]
fn fifth_word(gb: usize, qh: u32) -> u32 {
    // Exchanges bits `a` and `b` (a < b) of every bit's index: `mask`
    // holds the positions with bit `a` set and `b` clear.
    let swap = |x: u32, a: u32, b: u32, mask: u32| {
        let d = (1 << b) - (1 << a);
        let t = ((x >> d) ^ x) & mask;
        x ^ t ^ (t << d)
    };
    if gb == 4 {
        // v = 8 g + 4 h + i -> 8 i + 4 h + g: index bits 0 <-> 3, 1 <-> 4.
        swap(swap(qh, 0, 3, 0x00AA_00AA), 1, 4, 0x0000_CCCC)
    } else {
        // v = 16 g + 8 h + 4 q + i -> 8 i + 4 h + 2 g + q: index bits
        // 1 <-> 4, then 0 -> 3 -> 2 -> 0 as 0 <-> 3 and 0 <-> 2.
        let x = swap(qh, 1, 4, 0x0000_CCCC);
        swap(swap(x, 0, 3, 0x00AA_00AA), 0, 2, 0x0A0A_0A0A)
    }
}

/// One column's block of 6-bit `levels` (0..64) for lane groups of `gb`
/// bytes, as the module documentation says: the 8-bit layout's words, of
/// which the first six keep their levels' low 6 bits and carry the last
/// two's (the spill chunk's) in bits 6..8: bit pair `p` of spill word
/// `6 + i` in word `3 i + p` (4-byte groups: two spill chunks of a word) or
/// bit pair `p` of spill word `6 + h` in word `2 p + h` (8-byte groups: one
/// spill chunk of two words).
#[inline]
fn six_bit_chunks(gb: usize, levels: &[u8; QK], out: &mut [u32; QK / 4]) {
    const LOW2: u32 = 0x0303_0303;
    let mut v = [0u32; QK / 4];
    block_chunks(8, gb, levels, &mut v);
    for (s, o) in out.iter_mut().enumerate().take(6) {
        let (spill, p) = if gb == 4 {
            (6 + s / 3, s % 3)
        } else {
            (6 + s % 2, s / 2)
        };
        *o = v[s] | ((v[spill] >> (2 * p)) & LOW2) << 6;
    }
}

/// The 32 stored levels of sub-block `sub` of a GGUF block (unsigned
/// levels, codebook indices or `i8` bit patterns), as the format table says.
pub(crate) fn block_levels(dtype: GgmlType, block: &[u8], sub: usize) -> [u8; QK] {
    let repack = dtype.format().int8.expect("only int8 formats are repacked");
    (repack.block_levels)(block, sub)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::symmetric::quantize_symmetric;
    use crate::layout::act::{
        quantize_activations, quantize_activations_as, reference_i8, ActFormat,
    };

    use crate::format::rng::Rng;

    /// The fifth-bit word from a format's stored fifth bits is the one
    /// [`five_bit_chunks`] builds from the levels, for both group sizes.
    #[test]
    fn fifth_word_permutes_as_the_chunks_do() {
        let mut rng = Rng::new(11);
        for _ in 0..500 {
            let levels: [u8; QK] = std::array::from_fn(|_| (rng.next_u64() % 32) as u8);
            let qh = (0..QK).fold(0u32, |h, i| h | u32::from(levels[i] >> 4) << i);
            for gb in [4, 8] {
                let mut out = [0u32; QK / 4];
                five_bit_chunks(gb, &levels, &mut out);
                assert_eq!(fifth_word(gb, qh), out[4], "gb {gb} qh {qh:08x}");
            }
        }
    }

    /// A 3-bit block holds the 4-bit layout's four chunks of levels: the
    /// three stored ones under a mask of the low 3 bits of each nibble, and
    /// the fourth as the kernels' `spill3` merges it from their bits 3 and
    /// 7 (the templates' 16-bit shifts: the masks drop what crosses bytes).
    #[test]
    fn three_bit_chunks_unpack_to_the_nibble_chunks() {
        let mut rng = Rng::new(12);
        for _ in 0..500 {
            let levels: [u8; QK] = std::array::from_fn(|_| (rng.next_u64() % 8) as u8);
            let (mut four, mut three) = ([0u32; QK / 4], [0u32; QK / 4]);
            block_chunks(4, 4, &nibble_bytes(&levels), &mut four);
            three_bit_chunks(&levels, &mut three);
            for g in 0..3 {
                assert_eq!(three[g] & 0x7777_7777, four[g], "chunk {g}");
            }
            let spill = (three[0] >> 3 & 0x1111_1111)
                | (three[1] >> 2 & 0x2222_2222)
                | (three[2] >> 1 & 0x4444_4444);
            assert_eq!(spill, four[3]);
        }
        let l = I8Layout::new(GgmlType::Q3_K, 8, 2, 256, 16, 256, 16);
        assert_eq!((l.bits, l.block_bytes()), (3, 12));
        assert_eq!(l.grouped(8, true).bits, 4, "no 3-bit pair layout");
        assert_eq!(l.read_at(4).block_bytes(), 16);
    }

    /// The checked repack reads each tile's rows once: valid blocks pack
    /// to the unchecked repack's bytes; a non-finite scale anywhere is the
    /// error `validate` gives (the first bad block in file order), on one
    /// thread and on several.
    #[test]
    fn checked_repack_finds_what_validate_finds() {
        let (k, n, lanes, t_u) = (512, 70, 8, 2);
        let tw = lanes * t_u;
        for t in [
            GgmlType::Q4_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::Q5_0,
        ] {
            let w = GgmlMatrix::quantize(&Rng::new(3).vec_f32(k * n), k, n, t);
            // The K-quants' integer-scale path with 8-byte groups too.
            let l = I8Layout::new(t, lanes, t_u, 256, 2 * tw, k, n);
            let l = if t == GgmlType::Q4_K {
                l.grouped(8, false).int_sub_scales(true)
            } else {
                l
            };
            for threads in [1, 3] {
                let (p, q) = (
                    l.repack_threads(&w, threads),
                    l.repack_checked(&w, threads).expect("valid blocks"),
                );
                assert_eq!((p.w.as_bytes(), &p.sc), (q.w.as_bytes(), &q.sc), "{t}");
            }
            let at = t.format().scales[0];
            let per_row = w.blocks_per_row();
            // Rows in the first tile, a later panel and the last (padded)
            // tile; two bad blocks report the first.
            for bad in [
                vec![(0, 0)],
                vec![(37, 1)],
                vec![(69, per_row - 1), (40, 0)],
            ] {
                let mut v = w.clone();
                for &(row, blk) in &bad {
                    let o = (row * per_row + blk) * t.block_bytes();
                    at.write(&mut v.data[o..o + t.block_bytes()], 0x7C00);
                }
                let want = v.validate().expect_err("an infinite scale").to_string();
                for threads in [1, 3] {
                    let got = l.repack_checked(&v, threads).err().map(|e| e.to_string());
                    assert_eq!(got.as_deref(), Some(want.as_str()), "{t} {bad:?} {threads}");
                }
            }
        }
    }

    #[test]
    fn tile_offsets_cover_the_bytes_once() {
        let l = I8Layout::new(GgmlType::Q4_0, 8, 2, 64, 48, 200, 40);
        let mut seen = vec![0u8; l.bytes()];
        for p in 0..l.panels() {
            for t in 0..l.panel_width(p) / l.tile_width() {
                let (off, _) = l.tile_offset(p, t);
                for s in &mut seen[off..off + l.blocks() * l.tile_width() * l.block_bytes()] {
                    *s += 1;
                }
            }
        }
        assert!(seen.iter().all(|&s| s == 1));
    }

    /// A tile's blocks run over all of K (the drivers run a micro kernel
    /// over all of K in one call), so the packed bytes do not depend on
    /// `m_b`; panels of several tiles (t_b = 48, TW = 16) and a ragged last
    /// panel included.
    #[test]
    fn tiles_run_contiguously_over_k_whatever_m_b() {
        let (k, n) = (256 * 3, 100);
        let w = GgmlMatrix::quantize(&Rng::new(5).vec_f32(k * n), k, n, GgmlType::Q4_K);
        let layout = |m_b| I8Layout::new(GgmlType::Q4_K, 8, 2, m_b, 48, k, n);
        let first = layout(64).repack(&w);
        for m_b in [256, 640, 1024] {
            let p = layout(m_b).repack(&w);
            assert_eq!(p.w.as_bytes(), first.w.as_bytes(), "m_b {m_b}");
            assert_eq!(p.sc, first.sc, "m_b {m_b}");
        }
    }

    #[test]
    fn threaded_repack_equals_serial() {
        let w = quantize_symmetric(&Rng::new(9).vec_f32(320 * 70), 320, 70, 4, 32);
        let l = I8Layout::new(GgmlType::Q4_0, 8, 2, 64, 32, 320, 70);
        let (a, b) = (l.repack(&w), l.repack_threads(&w, 3));
        assert_eq!((&*a.w, &a.sc), (&*b.w, &b.sc));
    }

    #[test]
    fn activations_round_trip_within_half_a_step() {
        let x = Rng::new(2).vec_f32(2 * 70);
        let a = quantize_activations(&x, 2, 70, 96, GgmlType::Q4_0);
        for r in 0..2 {
            for i in 0..96 {
                let d = a.d[r * 3 + i / 32];
                let v = if i < 70 { x[r * 70 + i] } else { 0.0 };
                assert!((a.q[r * 96 + i] as f32 * d - v).abs() <= 0.5 * d + 1e-7);
            }
            for b in 0..3 {
                let s: i32 = a.q[r * 96 + b * 32..r * 96 + b * 32 + 32]
                    .iter()
                    .map(|&q| q as i32)
                    .sum();
                assert_eq!(a.c[r * 3 + b], 8 * s);
            }
        }
    }

    #[test]
    fn per_16_sums_are_each_half_blocks_level_sum() {
        // Q2_K's activations: two sums per block, (row, block, half) in
        // order, each the sum of its 16 levels; the levels and scales are
        // those of one sum per block.
        let (m, k, k_pad) = (3, 70, 96);
        let x = Rng::new(14).vec_f32(m * k);
        let fmt = ActFormat::plain(GgmlType::Q2_K);
        assert_eq!((fmt.sums, fmt.bias), (2, 1));
        // Q3_K's take its offset of 4 per half, as Q4_0's 8 per block.
        let q3 = ActFormat::plain(GgmlType::Q3_K);
        assert_eq!((q3.sums, q3.bias, q3.group), (2, 4, 8));
        let a = quantize_activations_as(&x, m, k, k_pad, fmt);
        let one = quantize_activations_as(&x, m, k, k_pad, ActFormat { sums: 1, ..fmt });
        assert_eq!((&a.q, &a.d), (&one.q, &one.d));
        assert_eq!(a.c.len(), m * 3 * 2);
        for r in 0..m {
            for b in 0..3 {
                for h in 0..2 {
                    let lo = r * k_pad + b * 32 + h * 16;
                    let want: i32 = a.q[lo..lo + 16].iter().map(|&v| i32::from(v)).sum();
                    assert_eq!(a.c[(r * 3 + b) * 2 + h], want, "row {r} block {b} half {h}");
                }
                let whole = a.c[(r * 3 + b) * 2] + a.c[(r * 3 + b) * 2 + 1];
                assert_eq!(whole, one.c[r * 3 + b]);
            }
        }
    }

    #[test]
    fn offset_levels_carry_their_bias_times_each_scales_sum() {
        // Signed and codebook levels: `128 * sum(q)` per scale, for the
        // u8-dot kernels that read them as `level + 128`; Q6_K's offset of
        // 32 per half block.
        for (t, sums, bias) in [
            (GgmlType::Q8_0, 1, 128),
            (GgmlType::IQ4_NL, 1, 128),
            (GgmlType::Q6_K, 2, 32),
        ] {
            let fmt = ActFormat::plain(t);
            assert_eq!((fmt.sums, fmt.bias), (sums, bias), "{t}");
            let (m, k, k_pad) = (2, 70, 96);
            let x = Rng::new(15).vec_f32(m * k);
            let a = quantize_activations_as(&x, m, k, k_pad, fmt);
            for r in 0..m {
                for b in 0..3 {
                    for h in 0..sums {
                        let (len, lo) = (32 / sums, r * k_pad + b * 32 + h * 32 / sums);
                        let want: i32 = a.q[lo..lo + len].iter().map(|&v| i32::from(v)).sum();
                        assert_eq!(a.c[(r * 3 + b) * sums + h], bias * want, "{t} {r} {b} {h}");
                    }
                }
            }
        }
    }

    #[test]
    fn row_pairs_hold_the_same_levels() {
        let x = Rng::new(8).vec_f32(3 * 70);
        let plain = quantize_activations(&x, 3, 70, 96, GgmlType::Q4_0);
        let fmt = ActFormat {
            bias: 8,
            row_pairs: true,
            scale: 0.0625,
            sums: 1,
            group: 1,
        };
        let pairs = quantize_activations_as(&x, 3, 70, 96, fmt);
        assert_eq!(pairs.q.len(), 4 * 96);
        for r in 0..4 {
            for i in 0..96 {
                let at = (r / 2) * 192 + (i / 32) * 64 + (i % 32 / 8) * 16 + (r % 2) * 8 + i % 8;
                let want = if r < 3 { plain.q[r * 96 + i] } else { 0 };
                assert_eq!(pairs.q[at], want, "row {r} value {i}");
            }
            for b in 0..3 {
                let want = if r < 3 {
                    plain.d[r * 3 + b] / 16.0
                } else {
                    0.0
                };
                let at = ((r / 2) * 3 + b) * 4 + 2 * (r % 2);
                assert_eq!(&pairs.d[at..at + 2], &[want, want]);
            }
        }
    }

    /// The nibble of value `i` of column `j`, block `b`, in a 4-bit layout
    /// of 8-byte groups, 2 lanes and `t_u` 4 over 8 columns (one tile), by
    /// the module's documented rule: chunk `g` byte `jj` holds value
    /// `16 g + jj` (low nibble) and `16 g + 8 + jj` (high).
    fn g8_nibble(bytes: &[u8], j: usize, b: usize, i: usize) -> u8 {
        let (t, lane) = (j / 2, j % 2);
        let (g, half, jj) = (i / 16, (i % 16) / 8, i % 8);
        let at = b * 8 * 16 + ((g * 4 + t) * 2 + lane) * 8 + jj;
        if half == 0 {
            bytes[at] & 15
        } else {
            bytes[at] >> 4
        }
    }

    /// A two's-complement nibble's value.
    fn signed_nibble(nib: u8) -> i32 {
        ((nib ^ 8) as i32) - 8
    }

    #[test]
    fn byte_groups_of_8_and_signed_nibbles_hold_every_level() {
        // Unpack the G = 8 signed layout by its documented rule and compare
        // with the source levels.
        let (k, n) = (64, 8);
        let w = quantize_symmetric(&Rng::new(6).vec_f32(k * n), k, n, 4, 32);
        let l = I8Layout::new(GgmlType::Q4_0, 2, 4, 64, 8, k, n).grouped(8, true);
        assert_eq!(l.name(), "Q4_0_8_8");
        let p = l.repack(&w);
        let bytes = p.w.as_bytes();
        for j in 0..n {
            for b in 0..2 {
                let want = block_levels(w.dtype, w.block(j, b), 0);
                for (i, &lv) in want.iter().enumerate() {
                    // Signed nibble: two's complement of level - 8.
                    let level = signed_nibble(g8_nibble(bytes, j, b, i));
                    assert_eq!(level, lv as i32 - 8, "col {j} block {b} value {i}");
                }
            }
        }
    }

    #[test]
    fn q3_k_signed_nibbles_are_the_values() {
        // Q3_K's levels (0..8, offset 4) as signed nibbles hold `level - 4`,
        // the value, where Q4_0's hold `level - 8`; unsigned they stay as
        // stored. Same documented rule as the test above (G = 8).
        let (k, n) = (256, 8);
        let w = GgmlMatrix::quantize(&Rng::new(21).vec_f32(k * n), k, n, GgmlType::Q3_K);
        for signed in [true, false] {
            let l = I8Layout::new(GgmlType::Q3_K, 2, 4, 256, 8, k, n).grouped(8, signed);
            assert_eq!((l.bits, l.signed), (4, signed));
            let p = l.repack(&w);
            let bytes = p.w.as_bytes();
            for j in 0..n {
                for b in 0..8 {
                    let want = block_levels(w.dtype, w.block(j, b / 8), b % 8);
                    for (i, &lv) in want.iter().enumerate() {
                        let nib = g8_nibble(bytes, j, b, i);
                        let got = if signed {
                            signed_nibble(nib)
                        } else {
                            nib as i32 - 4
                        };
                        assert_eq!(
                            got,
                            lv as i32 - 4,
                            "signed {signed} col {j} block {b} value {i}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn one_bit_layout_holds_every_level_where_the_kernels_read_it() {
        // k1 on 4-byte lane groups: one chunk per block, byte j bit c of a
        // column's word is value 4c + j; the scale stream holds d.
        let (k, n) = (256, 16);
        let w = GgmlMatrix::quantize(&Rng::new(17).vec_f32(k * n), k, n, GgmlType::K1);
        let (lanes, t_u) = (8, 2);
        let l = I8Layout::new(GgmlType::K1, lanes, t_u, 128, 16, k, n).grouped(4, true);
        assert!(!l.signed && l.bits == 1 && l.block_bytes() == 4);
        let p = l.repack(&w);
        let bytes = p.w.as_bytes();
        let tw = l.tile_width();
        let mut ones = 0;
        for j in 0..n {
            let (tile, col) = (j / tw, j % tw);
            let (t, lane) = (col / lanes, col % lanes);
            for b in 0..k / 32 {
                let want = block_levels(w.dtype, w.block(j, b), 0);
                let (base, sbase) = l.tile_offset(0, tile);
                let block = base + b * tw * 4;
                for (i, &lv) in want.iter().enumerate() {
                    let byte = block + (t * lanes + lane) * 4 + i % 4;
                    assert_eq!(
                        (bytes[byte] >> (i / 4)) & 1,
                        lv,
                        "col {j} value {}",
                        32 * b + i
                    );
                    ones += lv as usize;
                }
                let want_d =
                    stored_scale(w.dtype.format().int8.unwrap().sub_scale, w.block(j, b), 0);
                assert_eq!(p.sc[sbase + b * tw + col], want_d.0.to_bits());
            }
        }
        // Both levels occur.
        assert!(ones > 0 && ones < k * n);
    }

    #[test]
    fn two_bit_layouts_hold_every_level_where_the_kernels_read_it() {
        // TQ2_0 (levels 0..3, an offset of 1) on lane groups of 4 and 8
        // bytes: unpack by the documented rule (chunk g byte j bit pair c is
        // value 16g + 4c + j; one 8-byte chunk: value 8c + j) and compare
        // with the source levels; the scale stream holds d.
        let (k, n) = (512, 16);
        let w = GgmlMatrix::quantize(&Rng::new(13).vec_f32(k * n), k, n, GgmlType::TQ2_0);
        for (lanes, t_u, gb) in [(8, 2, 4), (2, 4, 8)] {
            let l = I8Layout::new(GgmlType::TQ2_0, lanes, t_u, 256, 16, k, n).grouped(gb, true);
            assert!(!l.signed && l.x_scale() == 1.0 && l.bits == 2);
            assert_eq!(l.block_bytes(), 8);
            let p = l.repack(&w);
            let bytes = p.w.as_bytes();
            let tw = l.tile_width();
            for j in 0..n {
                let (tile, col) = (j / tw, j % tw);
                let (t, lane) = (col / lanes, col % lanes);
                for b in 0..k / 32 {
                    let want = block_levels(w.dtype, w.block(j, b / 8), b % 8);
                    let (base, sbase) = l.tile_offset(0, tile);
                    let block = base + b * tw * 8;
                    for (i, &lv) in want.iter().enumerate() {
                        let (byte, c) = if gb == 4 {
                            let (g, c, jj) = (i / 16, i % 16 / 4, i % 4);
                            (block + ((g * t_u + t) * lanes + lane) * 4 + jj, c)
                        } else {
                            (block + (t * lanes + lane) * 8 + i % 8, i / 8)
                        };
                        assert_eq!(
                            (bytes[byte] >> (2 * c)) & 3,
                            lv,
                            "gb {gb} col {j} value {}",
                            32 * b + i
                        );
                    }
                    let at = sbase + b * tw;
                    let want = stored_scale(
                        w.dtype.format().int8.unwrap().sub_scale,
                        w.block(j, b / 8),
                        b % 8,
                    );
                    assert_eq!(p.sc[at + col], want.0.to_bits());
                    assert_eq!(want.1.to_bits(), 0);
                }
            }
        }
    }

    #[test]
    fn codebook_layouts_keep_unsigned_indices() {
        // IQ4_NL repacks like Q4_0 (4- and 8-byte groups) with the indices
        // as they are: no signed flip, and the layout never turns signed.
        let (k, n) = (64, 8);
        let w = GgmlMatrix::quantize_iq4_nl(&Rng::new(12).vec_f32(k * n), k, n);
        for (lanes, t_u, gb) in [(4, 2, 4), (2, 4, 8)] {
            let l = I8Layout::new(GgmlType::IQ4_NL, lanes, t_u, 64, 8, k, n).grouped(gb, true);
            assert!(!l.signed && l.x_scale() == 1.0);
            assert_eq!(l.name(), format!("IQ4_NL_8_{gb}"));
            let p = l.repack(&w);
            let bytes = p.w.as_bytes();
            for j in 0..n {
                for b in 0..2 {
                    let want = block_levels(w.dtype, w.block(j, b), 0);
                    let (t, lane) = (j / lanes, j % lanes);
                    assert_eq!(
                        p.sc[b * 8 + j],
                        u16::from_le_bytes([w.block(j, b)[0], w.block(j, b)[1]])
                    );
                    for (i, &idx) in want.iter().enumerate() {
                        // Chunk g holds values 2 gb g.. (low) and 2 gb g + gb.. (high).
                        let (g, half, jj) = (i / (2 * gb), (i % (2 * gb)) / gb, i % gb);
                        let at = b * 8 * 16 + ((g * t_u + t) * lanes + lane) * gb + jj;
                        let nib = if half == 0 {
                            bytes[at] & 15
                        } else {
                            bytes[at] >> 4
                        };
                        assert_eq!(nib, idx, "gb {gb} col {j} block {b} value {i}");
                    }
                }
            }
        }
        // The oracle reads levels through the codebook; the activations
        // carry `128 * sum(q)` per block for the u8-dot kernels, which look
        // the levels up plus 128.
        let x = Rng::new(13).vec_f32(k);
        let fmt = ActFormat::plain(GgmlType::IQ4_NL);
        let xa = quantize_activations_as(&x, 1, k, k, fmt);
        for (b, &c) in xa.c.iter().enumerate() {
            let sum: i32 = xa.q[b * 32..(b + 1) * 32]
                .iter()
                .map(|&v| i32::from(v))
                .sum();
            assert_eq!(c, crate::layout::act::SIGNED_BIAS * sum, "block {b}");
        }
        let y = reference_i8(&w, &xa, 1);
        let deq = w.dequantize();
        for j in 0..n {
            let want: f64 = (0..k)
                .map(|i| deq[i * n + j] as f64 * xa.q[i] as f64 * xa.d[i / 32] as f64)
                .sum();
            assert!((y[j] - want).abs() <= 1e-9 * want.abs().max(1.0), "{j}");
        }
    }

    /// The 5-bit layouts unpacked with the kernels' own operations (as the
    /// module documentation gives them), for 4- and 8-byte groups, with
    /// padding columns at level 16 (weight 0).
    #[test]
    fn five_bit_layouts_unpack_with_the_documented_ops() {
        let (k, n) = (96, 11);
        let w = GgmlMatrix::quantize(&Rng::new(14).vec_f32(k * n), k, n, GgmlType::Q5_0);
        for (lanes, t_u, gb) in [(4, 3, 4), (8, 2, 4), (2, 4, 8)] {
            let l =
                I8Layout::new(GgmlType::Q5_0, lanes, t_u, 64, lanes * t_u, k, n).grouped(gb, true);
            assert!(!l.signed && l.x_scale() == 1.0);
            assert_eq!((l.bits, l.block_bytes()), (5, 20));
            assert_eq!(l.name(), format!("Q5_0_{}_{gb}", lanes * t_u));
            let p = l.repack(&w);
            let bytes = p.w.as_bytes();
            let tw = l.tile_width();
            for j in 0..l.n_pad {
                // Panels of one tile.
                let (panel, col) = (j / tw, j % tw);
                let (t, lane) = (col / lanes, col % lanes);
                for b in 0..l.blocks() {
                    let (off, soff) = l.tile_offset(panel, 0);
                    let at = off + b * tw * 20;
                    let word = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
                    let h = word(at + 16 * tw + 4 * col);
                    let want: [u8; QK] = if j < n {
                        assert_eq!(
                            p.sc[soff + b * tw + col],
                            u16::from_le_bytes([w.block(j, b)[0], w.block(j, b)[1]])
                        );
                        block_levels(w.dtype, w.block(j, b), 0)
                    } else {
                        [16; QK]
                    };
                    for g in 0..16 / gb {
                        // This column's gb bytes of chunk g, and its plane
                        // word as the kernel sees it (G = 8: h, then h >> 1
                        // per byte).
                        let chunk = at + (g * t_u + t) * lanes * gb + lane * gb;
                        let e: Vec<u8> =
                            (0..gb).map(|x| h.to_le_bytes()[x % 4] >> (x / 4)).collect();
                        for x in 0..gb {
                            let (wb, y) = (bytes[chunk + x], (e[x] >> ((gb / 4) * g)) & 0x11);
                            let lo = (wb & 0x0F) | ((y << 4) & 0x10);
                            let hi = ((wb >> 4) & 0x0F) | (y & 0x10);
                            let (vl, vh) = (2 * gb * g + x, 2 * gb * g + gb + x);
                            assert_eq!(lo, want[vl], "gb {gb} col {j} block {b} value {vl}");
                            assert_eq!(hi, want[vh], "gb {gb} col {j} block {b} value {vh}");
                        }
                    }
                }
            }
        }
        // The 32-bit shifts of the x86 kernels: bits shifted across bytes
        // land outside the 0x11 mask.
        let h = 0xA5C3_5A3Cu32;
        for g in 0..4 {
            let y = (h >> g) & 0x1111_1111;
            for x in 0..4 {
                let byte = (h >> (8 * x)) as u8;
                assert_eq!(y.to_le_bytes()[x], (byte >> g) & 0x11);
            }
        }
    }

    /// Q2_K, Q4_K, Q5_K and Q3_K with integer sub-scales: per column and
    /// block the file's two sub-scale bytes in entry 0 (Q2_K: the two
    /// halves' scale-and-min bytes; Q4_K / Q5_K: the 6-bit scale and min;
    /// Q3_K: the two halves' 6-bit scales as i8), and in
    /// entry 1 the super-block's `d` (first block), `-dmin` (second; Q3_K's
    /// signed scales: `-d`) or 0;
    /// the levels as in the f16 layout; padding columns all 0. Formats
    /// without them ignore the flag.
    #[test]
    fn integer_sub_scales_keep_the_files_bytes() {
        let (k, n) = (768, 11);
        let (lanes, t_u) = (8, 2);
        let tw = lanes * t_u;
        type Entry0 = fn(&[u8], usize) -> [u8; 2];
        let k4: Entry0 = |blk, sub| {
            let (sc, m) = crate::format::row::scale_min_k4(&blk[4..16], sub);
            [sc, m]
        };
        // Q3_K's two 6-bit scales of the block as i8 `sc - 32`.
        let k3: Entry0 = |blk, sub| {
            [2 * sub, 2 * sub + 1]
                .map(|j| crate::format::row::scale_k3(&blk[96..108], j).wrapping_sub(32))
        };
        // Where `d` and `dmin` sit (signed scales: `d` twice).
        let cases: [(GgmlType, Entry0, usize, usize); 5] = [
            (
                GgmlType::Q2_K,
                |blk, sub| [blk[2 * sub], blk[2 * sub + 1]],
                80,
                82,
            ),
            (GgmlType::Q4_K, k4, 0, 2),
            (GgmlType::Q5_K, k4, 0, 2),
            (GgmlType::Q3_K, k3, 108, 108),
            (
                GgmlType::Q6_K,
                |blk, sub| [blk[192 + 2 * sub], blk[193 + 2 * sub]],
                208,
                208,
            ),
        ];
        for (t, entry0, d_at, dmin_at) in cases {
            let w = GgmlMatrix::quantize(&Rng::new(17).vec_f32(k * n), k, n, t);
            let f16 = I8Layout::new(t, lanes, t_u, 256, tw, k, n);
            let l = f16.int_sub_scales(true);
            assert!(l.int_scales && !f16.int_scales, "{t}");
            assert_eq!(l.scale_entries(), 1, "{t}");
            let (p, pf) = (l.repack(&w), f16.repack(&w));
            assert_eq!(
                p.w.as_bytes(),
                pf.w.as_bytes(),
                "{t}: levels as in the f16 layout"
            );
            // Per super-block and column: the header (`d`, and `-dmin`
            // with mins), then one entry per 32-value block.
            // Signed scales (Q3_K, Q6_K) have no `-dmin`.
            let h = if d_at == dmin_at { 1 } else { 2 };
            let supers = l.blocks() / 8;
            assert_eq!(p.sc.len(), l.n_pad * supers * (8 + h), "{t}");
            for j in 0..l.n_pad {
                let (panel, col) = (j / tw, j % tw);
                let (_, soff) = l.tile_offset(panel, 0);
                assert_eq!(soff, panel * tw * supers * (8 + h), "{t}");
                for sb in 0..supers {
                    let head = soff + sb * (8 + h) * tw;
                    let d = |o: usize| {
                        let blk = w.block(j, sb);
                        u16::from_le_bytes([blk[o], blk[o + 1]])
                    };
                    let want = if j < n { d(d_at) } else { 0 };
                    assert_eq!(p.sc[head + col], want, "{t} col {j} super-block {sb}: d");
                    if h == 2 {
                        let want = if j < n { d(dmin_at) ^ 0x8000 } else { 0 };
                        assert_eq!(p.sc[head + tw + col], want, "{t} col {j} {sb}: -dmin");
                    }
                    for sub in 0..8 {
                        let e0 = p.sc[head + (h + sub) * tw + col];
                        let want = if j < n {
                            u16::from_le_bytes(entry0(w.block(j, sb), sub))
                        } else {
                            0
                        };
                        assert_eq!(e0, want, "{t} col {j} super-block {sb} block {sub}");
                    }
                }
            }
        }
        let q5 = I8Layout::new(GgmlType::Q5_0, lanes, t_u, 256, tw, k, n).int_sub_scales(true);
        assert!(!q5.int_scales);
        // Several panels of several tiles and K blocks, on 3 threads: the
        // same stream as the entry-by-entry walk of one thread.
        let n = 70;
        let w = GgmlMatrix::quantize(&Rng::new(18).vec_f32(k * n), k, n, GgmlType::Q2_K);
        let l = I8Layout::new(GgmlType::Q2_K, lanes, t_u, 512, 2 * tw, k, n).int_sub_scales(true);
        let (one, three) = (l.repack(&w), l.repack_threads(&w, 3));
        assert_eq!(
            (one.sc.clone(), one.w.as_bytes()),
            (three.sc, three.w.as_bytes())
        );
        for j in 0..n {
            let (panel, tile, col) = (j / (2 * tw), j % (2 * tw) / tw, j % tw);
            for b in 0..l.blocks() {
                let (_, soff) = l.tile_offset(panel, tile);
                let blk = w.block(j, b / 8);
                let at = soff + (b / 8 * 10 + 2 + b % 8) * tw + col;
                let sub = b % 8;
                assert_eq!(
                    one.sc[at],
                    u16::from_le_bytes([blk[2 * sub], blk[2 * sub + 1]])
                );
            }
        }
    }

    /// TQ1_0 / TQ2_0 and kgen's `q4_0_g128` with group scales: the
    /// levels as without, and per tile and super-block one header of the
    /// tile's `d`s (the file's f16, padding columns 0), nothing per block;
    /// several panels and tiles, on 1 and 3 threads.
    #[test]
    fn group_scales_hold_one_scale_per_super_block() {
        let (k, n) = (768, 70);
        let (lanes, t_u) = (8, 2);
        let tw = lanes * t_u;
        // The format, its 32-blocks per super-block, where its `d` sits.
        for (t, g, d_at) in [
            (GgmlType::TQ2_0, 8, 64),
            (GgmlType::TQ1_0, 8, 52),
            (GgmlType::Q4_0_G128, 4, 0),
        ] {
            let w = GgmlMatrix::quantize(&Rng::new(19).vec_f32(k * n), k, n, t);
            let per_block = I8Layout::new(t, lanes, t_u, 256, 2 * tw, k, n);
            let l = per_block.group_scales(true);
            assert!(l.group_scales && !per_block.group_scales, "{t}");
            assert_eq!((l.scale_entries(), l.super_groups()), (0, Some((g, 1))));
            let (p, pb) = (l.repack(&w), per_block.repack(&w));
            assert_eq!(p.w.as_bytes(), pb.w.as_bytes(), "{t}: the same levels");
            let supers = l.blocks() / g;
            assert_eq!(p.sc.len(), l.n_pad * supers, "{t}");
            let three = l.repack_threads(&w, 3);
            assert_eq!(
                (&p.sc, p.w.as_bytes()),
                (&three.sc, three.w.as_bytes()),
                "{t}: 3 threads"
            );
            for j in 0..l.n_pad {
                let (panel, tile, col) = (j / (2 * tw), j % (2 * tw) / tw, j % tw);
                let (_, soff) = l.tile_offset(panel, tile);
                for sb in 0..supers {
                    let want = if j < n {
                        let blk = w.block(j, sb);
                        u16::from_le_bytes([blk[d_at], blk[d_at + 1]])
                    } else {
                        0
                    };
                    assert_eq!(p.sc[soff + sb * tw + col], want, "{t} col {j} {sb}");
                }
            }
            // Per block, as before, where the kernels do not take it.
            assert_eq!(pb.sc.len(), l.n_pad * l.blocks(), "{t}");
        }
        // Other formats have no group scale to hold once.
        let q4 = I8Layout::new(GgmlType::Q4_K, lanes, t_u, 256, tw, k, 16).group_scales(true);
        assert!(!q4.group_scales && q4.super_groups().is_none());
    }

    #[test]
    fn six_bit_layouts_unpack_with_the_documented_ops() {
        let (k, n) = (512, 11);
        let w = GgmlMatrix::quantize(&Rng::new(16).vec_f32(k * n), k, n, GgmlType::Q6_K);
        for (lanes, t_u, gb) in [(4, 3, 4), (16, 1, 4), (2, 4, 8)] {
            let l =
                I8Layout::new(GgmlType::Q6_K, lanes, t_u, 256, lanes * t_u, k, n).grouped(gb, true);
            assert!(!l.signed);
            assert_eq!((l.bits, l.block_bytes()), (6, 24));
            let p = l.repack(&w);
            let bytes = p.w.as_bytes();
            let (tw, chunks) = (l.tile_width(), 32 / gb);
            for j in 0..l.n_pad {
                let (panel, col) = (j / tw, j % tw);
                let (t, lane) = (col / lanes, col % lanes);
                for b in 0..l.blocks() {
                    // Eight 32-blocks per super-block.
                    let (off, _) = l.tile_offset(panel, 0);
                    let at = off + b * tw * 24;
                    let want = if j < n {
                        block_levels(w.dtype, w.block(j, b / 8), b % 8)
                    } else {
                        [32; QK]
                    };
                    // Byte x of this column's group in stored chunk s.
                    let byte =
                        |s: usize, x: usize| bytes[at + (s * t_u + t) * lanes * gb + lane * gb + x];
                    for v in 0..chunks {
                        for x in 0..gb {
                            let got = if v < 3 * chunks / 4 {
                                byte(v, x) & 0x3F
                            } else {
                                let s = 3 * (v - 3 * chunks / 4);
                                (byte(s, x) >> 6)
                                    | (byte(s + 1, x) >> 6) << 2
                                    | (byte(s + 2, x) >> 6) << 4
                            };
                            let at_v = gb * v + x;
                            assert_eq!(got, want[at_v], "gb {gb} col {j} block {b} value {at_v}");
                        }
                    }
                }
            }
        }
        // The x86 kernels' spill merge on 16-bit lanes: shifts by 6, 4 and
        // 2, two bit selects under the masks 0x03 and 0x0F, then & 0x3F.
        let mut rng = Rng::new(6);
        for _ in 0..1000 {
            let [a, b, c] = [0; 3].map(|_: u16| rng.next_u64() as u16);
            let sel = |m: u16, x: u16, y: u16| (x & m) | (y & !m);
            let got = sel(0x0F0F, sel(0x0303, a >> 6, b >> 4), c >> 2) & 0x3F3F;
            let want = u16::from_le_bytes(std::array::from_fn(|i| {
                let (a, b, c) = (a.to_le_bytes()[i], b.to_le_bytes()[i], c.to_le_bytes()[i]);
                (a >> 6) | (b >> 6) << 2 | (c >> 6) << 4
            }));
            assert_eq!(got, want, "{a:#x} {b:#x} {c:#x}");
        }
    }

    #[test]
    fn symmetric_group_32_is_exactly_q4_0_and_groups_share_scales() {
        let (k, n) = (64, 3);
        let w = Rng::new(5).vec_f32(k * n);
        let a = quantize_symmetric(&w, k, n, 4, 32);
        let mut wk = vec![0f32; k * n];
        wk.copy_from_slice(&w);
        assert_eq!(a, GgmlMatrix::quantize_q4_0(&wk, k, n));
        let g = quantize_symmetric(&w, k, n, 8, 64);
        for j in 0..n {
            assert_eq!(g.block(j, 0)[..2], g.block(j, 1)[..2]);
        }
        let d = g.dequantize();
        for (a, b) in d.iter().zip(&w) {
            assert!((a - b).abs() < 0.02, "{a} {b}");
        }
    }
}
