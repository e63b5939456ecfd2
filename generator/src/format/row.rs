//! One weight format as data, as ggml's `type_traits`: what a block holds,
//! how to decode and encode it, and how the int8 family runs it. Code around
//! the formats reads these fields; it never matches on a format's name.

use std::fmt;
use std::hash::{Hash, Hasher};

/// Values per block of the 32-value GGML formats, and of the int8 family's
/// activation blocks.
pub const QK: usize = 32;

/// Type ids from here up name kgen's own formats (`"KG"` in the high
/// bytes): rows of the table that no GGUF file may name, so a file's type
/// id never resolves to one (see [`Format::is_gguf`]).
pub const OWN_TYPE_BASE: u32 = 0x4b47_0000;

/// How a block's integer levels map to weights (before the block scale).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Levels {
    /// Not quantized (F32, F16).
    Float,
    /// Stored unsigned `q`; the weight is `d * (q - offset)` (Q4_0: 8,
    /// Q5_0: 16). Kernels take unsigned dots and remove `offset * sum(x)`
    /// once per block through the activation sums.
    Offset(i32),
    /// Stored as `i8`; the weight is `d * q` (Q8_0).
    Signed,
    /// Stored 4-bit indices into an int8 codebook; the weight is
    /// `d * codebook[q]` (IQ4_NL). The codebook belongs to the format.
    Codebook(&'static [i8; 16]),
    /// Stored `bits`-bit indices into a grid of `2^bits` levels; the weight
    /// is `d * grid[q]` (kgen's own formats: the bit-balanced 2-bit grid
    /// {-2, -1, 1, 2}, the plain {-2, -1, 0, 1}, the 1-bit {-1, 1}). The int8 kernels look
    /// the indices up as unsigned levels `grid[q] - min(grid)` (one byte
    /// shuffle per index field of a nibble, paper 004) and remove
    /// `-min(grid)` per block through the activation sums, as an offset.
    Grid(&'static [i8]),
}

/// How the int8-activation family stores and reads a format. The family
/// works on 32-value sub-blocks: a format whose block is larger (the
/// K-quants' 256-value super-blocks) describes each of its sub-blocks.
#[derive(Clone, Copy, Debug)]
pub struct Int8Repack {
    /// Bits per level in the packed layout: 1 (a bit plane), 2 (four bit
    /// pairs per byte), 3 (two 3-bit levels per byte, the spare bits
    /// carrying a fourth chunk; [`Int8Repack::read_bits`]), 4 (two nibble planes), 5 (the nibble planes plus a
    /// plane of fifth bits), 6 (bytes whose top two bits carry a spill
    /// chunk) or 8 (bytes).
    pub layout_bits: u32,
    /// The stored level of each value of 32-value sub-block `s` of a block
    /// (unsigned level, codebook index, or the `i8` bit pattern), in order
    /// along K.
    pub block_levels: fn(&[u8], usize) -> [u8; QK],
    /// The scale `d` and min `m` of sub-block `s` (of 32 values, or of 16
    /// where `scales_per_block` is 2): its weights are
    /// `d * level_value(level) + m`, both exactly as gguf-py's f32
    /// arithmetic forms them (Q4_K: `d * sc` and `-(dmin * m)`).
    pub sub_scale: fn(&[u8], usize) -> (f32, f32),
    /// The format has mins (`m` above is not always 0): the layout stores
    /// them beside the scales and the kernels add `m * sum(x)` per
    /// sub-block through the activation sums, never per weight.
    pub mins: bool,
    /// Scales per 32-value sub-block: 1, or 2 where the format scales each
    /// 16 values (Q6_K, Q3_K, Q2_K); `sub_scale` then indexes 16-value
    /// sub-blocks and the kernels fold each half of a block on its own.
    /// The activations then carry a sum per 16 values too (for Q2_K's
    /// mins, and Q3_K's and Q6_K's offsets).
    pub scales_per_block: usize,
    /// 32-value blocks that share one activation scale: 8 for the K-quants
    /// and the ternary TQ1_0 / TQ2_0,
    /// whose activations llama.cpp quantizes as Q8_K (one scale per 256
    /// values), so a kernel folds a super-block's integer dots times the
    /// weight scales first and applies the activation scale once (one
    /// multiply per block and output vector fewer, on the pipes the dots
    /// use); 1 (Q8_0's scale per 32) elsewhere.
    pub act_group: usize,
    /// The weight scale is one per `act_group` blocks (TQ1_0's and TQ2_0's
    /// `d` per 256 values): `sub_scale` gives it for every sub-block, and
    /// the kernels that can sum a group's integer dots first convert and
    /// scale them once, at the group's close.
    pub group_scale: bool,
    /// Integer sub-scales under f16 super-block scales, for the kernels
    /// that keep them integers ([`IntSubScales`]); `None` where the format
    /// has none.
    pub int_sub_scales: Option<IntSubScales>,
    /// Where a 4-bit format's bytes already hold each sub-block's levels
    /// (a 5-bit format's low four bits, with `fifth`) in an order the
    /// repack regroups a word at a time ([`NibbleStore`]), agreeing with
    /// `block_levels`; `None` sends every sub-block through `block_levels`
    /// (a level per byte, then packed again).
    pub nibbles: Option<NibbleStore>,
    /// Where a 5-bit format keeps its fifth bits ([`FifthBits`]), beside
    /// the low four in `nibbles`; `None` sends every sub-block through
    /// `block_levels`.
    pub fifth: Option<FifthBits>,
}

/// Where a 5-bit format keeps a 32-value sub-block's fifth bits, stated as
/// data as [`NibbleStore`] states the low four.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FifthBits {
    /// Little-endian u32s from `at`, sub-block `s`'s at `at + 4 s`, bit `i`
    /// value `i` (Q5_0 at 2, Q5_1 at 4, one sub-block each).
    Word { at: usize },
    /// Bit `s` of the 32 bytes from `at`: byte `i` for value `i` of
    /// sub-block `s` (Q5_K at 16).
    Planes { at: usize },
}

impl FifthBits {
    /// Sub-block `s`'s fifth bits: bit `i` is value `i`'s.
    #[inline(always)]
    pub fn word(self, block: &[u8], s: usize) -> u32 {
        match self {
            FifthBits::Word { at } => u32::from_le_bytes(
                block[at + 4 * s..at + 4 * s + 4]
                    .try_into()
                    .expect("4 bytes"),
            ),
            FifthBits::Planes { at } => {
                // Eight bytes' bit `s` at a time: with one bit per byte
                // (at 8 j), the product's top byte gathers byte j's at bit
                // j; the partial products' bits never collide, so no carry.
                const ONES: u64 = 0x0101_0101_0101_0101;
                const GATHER: u64 = 0x0102_0408_1020_4080;
                (0..4).fold(0u32, |h, c| {
                    let x = u64::from_le_bytes(
                        block[at + 8 * c..at + 8 * c + 8]
                            .try_into()
                            .expect("8 bytes"),
                    );
                    h | ((((x >> s) & ONES).wrapping_mul(GATHER) >> 56) as u32) << (8 * c)
                })
            }
        }
    }
}

/// Where a 4-bit format keeps a 32-value sub-block's levels (a 5-bit
/// format their low four bits), stated as data so that the repack reads
/// them as stored rather than unpacking each level to a byte and packing
/// it again (4096x11008 on a Zen 3, 1 thread: Q4_1 90 -> 51 ms, Q4_K 50 ->
/// 46 ms; Q5_0 with [`FifthBits`] about 93 -> 42 ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NibbleStore {
    /// GGUF Q4_0's order: the 16 bytes from `at + 16 s` hold value `i` of
    /// sub-block `s` in the low nibble of byte `i` and value `i + 16` in
    /// its high one (Q4_0 and IQ4_NL at 2, Q4_1 at 4, Q5_0 at 6, Q5_1 and
    /// IQ4_XS at 8).
    Q4_0Order { at: usize },
    /// Nibble planes: the 32 bytes from `at + 32 j` hold sub-block `2 j`
    /// in their low nibbles and `2 j + 1` in their high ones, value `i` in
    /// byte `i` (Q4_K at 16, Q5_K at 48).
    Planes { at: usize },
}

impl NibbleStore {
    /// Sub-block `s` of `block` in Q4_0's byte order: byte `i` holds level
    /// `i` (low nibble) and level `i + 16` (high), the order the int8
    /// layouts regroup (5-bit formats: the levels' low four bits).
    #[inline(always)]
    pub fn q4_0_bytes(self, block: &[u8], s: usize) -> [u8; QK / 2] {
        const LOW: u128 = u128::from_le_bytes([0x0F; 16]);
        let word =
            |at: usize| u128::from_le_bytes(block[at..at + 16].try_into().expect("16 bytes"));
        match self {
            NibbleStore::Q4_0Order { at } => word(at + 16 * s).to_le_bytes(),
            NibbleStore::Planes { at } => {
                let (a, b) = (word(at + 32 * (s / 2)), word(at + 32 * (s / 2) + 16));
                // Low plane: values i and i + 16 are the low nibbles of
                // bytes i and i + 16; high plane: their high nibbles.
                if s.is_multiple_of(2) {
                    ((a & LOW) | (b & LOW) << 4).to_le_bytes()
                } else {
                    ((a >> 4 & LOW) | (b & !LOW)).to_le_bytes()
                }
            }
        }
    }
}

/// A format whose super-block holds f16 scales over integer sub-scales,
/// two bytes per 32-value sub-block ([`SubScaleKind`]): GGUF Q2_K's scale
/// and min nibbles per 16 values under `d` and `dmin`, Q6_K's i8 scale per
/// 16 under `d`, Q3_K's packed 6-bit scale per 16 under `d`, or Q4_K's and
/// Q5_K's 6-bit scale and min per 32 under `d` and `dmin`. The int8 layout
/// then stores these as [`IntSubScales::pair`] reads them (two bytes per
/// column and 32-value block) after the super-block's f16 `d` (and, with
/// mins, `-dmin`) once per column
/// ([`crate::layout::int8::I8Layout::int_sub_scales`]); kernels on ISAs
/// with [`crate::family::int8::isa::I8Isa::int_sub_scales`] read that form.
#[derive(Clone, Copy, Debug)]
pub struct IntSubScales {
    /// Where the integer sub-scale bytes start in a block.
    pub at: usize,
    /// Where the f16 `d` sits in a block.
    pub d_at: usize,
    /// Where the f16 `dmin` sits; `None` for signed scales, whose
    /// [`IntSubScales::supers`] are `d` twice.
    pub dmin_at: Option<usize>,
    /// What the bytes hold.
    pub kind: SubScaleKind,
}

/// The integer sub-scale bytes of an [`IntSubScales`] format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubScaleKind {
    /// One byte per 16 values: the scale level in the low nibble, the min
    /// level in the high one (Q2_K), the weight `d sc q - dmin m`.
    Nibbles,
    /// One i8 scale per 16 values (Q6_K), the weight `d sc (q - offset)`:
    /// the offset comes off through the activation sums times the scales.
    Signed,
    /// Per 32 values a scale byte then a min byte, each below 64 (Q4_K,
    /// Q5_K), the weight `d sc q - dmin m`.
    ScaleMin,
    /// One 6-bit scale per 16 values, 16 of them packed in 12 bytes as
    /// Q3_K's ([`scale_k3`]), the weight `d (sc - 32) (q - offset)`: read
    /// out as the i8 `sc - 32`, after which kernels and layout treat them
    /// as [`SubScaleKind::Signed`].
    Packed6,
}

/// Sub-block `j`'s 6-bit scale and min from the 12 packed bytes of Q4_K /
/// Q5_K (ggml's `get_scale_min_k4`): sub-blocks 0..4 have theirs in the low
/// 6 bits of bytes `j` and `j + 4`; sub-blocks 4..8 have their low 4 bits
/// in the nibbles of byte `j + 4` (scale low, min high) and their top 2 bits
/// in the top 2 bits of bytes `j - 4` (scale) and `j` (min).
#[inline(always)]
pub(crate) fn scale_min_k4(q: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q3_K's 6-bit scale `j` (0..64, the scale is `sc - 32`) from its 12
/// packed bytes: the low 4 bits in nibble `j / 8` of byte `j % 8`, the top
/// 2 at bits `2 (j / 4)` of byte `8 + j % 4`.
#[inline(always)]
pub(crate) fn scale_k3(q: &[u8], j: usize) -> u8 {
    ((q[j % 8] >> (4 * (j / 8))) & 0x0F) | (((q[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)
}

impl IntSubScales {
    /// Bytes `2s` and `2s + 1` of the block's integer sub-scales, those of
    /// its 32-value sub-block `s`: the bytes as stored, Q4_K's and Q5_K's
    /// 6-bit scale and min unpacked, or Q3_K's two 6-bit scales as i8.
    /// Offsets as data rather than a function per format: the repack calls
    /// this for every column and block, and inlined it is a few loads.
    #[inline(always)]
    pub fn pair(&self, block: &[u8], s: usize) -> [u8; 2] {
        let q = &block[self.at..];
        match self.kind {
            SubScaleKind::ScaleMin => scale_min_k4(q, s).into(),
            SubScaleKind::Packed6 => [2 * s, 2 * s + 1].map(|j| scale_k3(q, j).wrapping_sub(32)),
            SubScaleKind::Nibbles | SubScaleKind::Signed => [q[2 * s], q[2 * s + 1]],
        }
    }

    /// The block's `d` and `dmin` (signed: `d` twice) as f16 bits.
    #[inline(always)]
    pub fn supers(&self, block: &[u8]) -> [u16; 2] {
        let f16 = |at: usize| u16::from_le_bytes([block[at], block[at + 1]]);
        [f16(self.d_at), f16(self.dmin_at.unwrap_or(self.d_at))]
    }

    /// f16 entries per column and super-block ahead of its sub-scale
    /// pairs: `d`, and `-dmin` where the format has mins.
    pub fn super_entries(&self) -> usize {
        1 + usize::from(self.dmin_at.is_some())
    }

    /// [`IntSubScales::pair`] gives i8 scales ([`SubScaleKind::Signed`],
    /// [`SubScaleKind::Packed6`]).
    pub fn signed(&self) -> bool {
        matches!(self.kind, SubScaleKind::Signed | SubScaleKind::Packed6)
    }

    /// Sub-block `s`'s scale and min exactly, in f64 (what the kernels that
    /// keep them integers apply): `d sc` and `-(dmin m)`, or `d sc` and 0
    /// for signed scales (the offset is the levels'). `s` counts the
    /// format's scale parts: 16-value sub-blocks, or 32-value ones for
    /// [`SubScaleKind::ScaleMin`].
    pub fn exact(&self, block: &[u8], s: usize) -> (f64, f64) {
        let [d, dmin] = self.supers(block).map(|b| half::f16::from_bits(b).to_f64());
        let (sc, m) = match self.kind {
            SubScaleKind::Signed | SubScaleKind::Packed6 => {
                return (d * self.pair(block, s / 2)[s % 2] as i8 as f64, 0.0)
            }
            SubScaleKind::Nibbles => {
                let b = self.pair(block, s / 2)[s % 2];
                (b & 0x0F, b >> 4)
            }
            SubScaleKind::ScaleMin => self.pair(block, s).into(),
        };
        (d * sc as f64, -(dmin * m as f64))
    }
}

impl Int8Repack {
    /// f16 entries per column and 32-value block in the int8 layout's scale
    /// stream: its scales, then as many mins where the format has mins.
    pub fn scale_entries(&self) -> usize {
        self.scales_per_block * (1 + usize::from(self.mins))
    }

    /// Activation level sums per 32-value block the kernels read: one per
    /// scale, so a kernel that folds each half of a block on its own (a
    /// scale per 16 values) removes each half's own offset or adds its own
    /// min: Q2_K's per-16 mins, Q3_K's offset of 4 and Q6_K's of 32.
    pub fn sums_per_block(&self) -> usize {
        self.scales_per_block
    }

    /// The bits per level a kernel reads: `layout_bits`, except that a
    /// 3-bit layout is read at 4 bits by kernels without the 3-bit unpack
    /// (`three_bit` false): the pair layouts (i8mm), whose 8-byte lane
    /// groups hold a 32-value block in 2 nibble chunks, which 3 bits per
    /// level do not fill whole, and ISAs whose templates lack it.
    pub fn read_bits(&self, three_bit: bool) -> u32 {
        if self.layout_bits == 3 && !three_bit {
            4
        } else {
            self.layout_bits
        }
    }
}

/// The scale of a block that starts with an f16 `d` and has no min
/// ([`Int8Repack::sub_scale`] of Q4_0, Q5_0, Q8_0, IQ4_NL).
pub fn leading_f16_scale(block: &[u8], _sub: usize) -> (f32, f32) {
    (half::f16::from_le_bytes([block[0], block[1]]).to_f32(), 0.0)
}

/// Where one f16 scale of a block sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleAt {
    /// Two little-endian bytes at this offset.
    Bytes(usize),
    /// Spread over the top nibbles of four little-endian u16 words from this
    /// offset, lowest nibble first (IQ1_M's `d`; the words' other 12 bits
    /// hold sub-block scales).
    TopNibbles(usize),
}

impl ScaleAt {
    /// The scale's f16 bits in `block`.
    pub fn read(self, block: &[u8]) -> u16 {
        match self {
            ScaleAt::Bytes(at) => u16::from_le_bytes([block[at], block[at + 1]]),
            ScaleAt::TopNibbles(at) => (0..4).fold(0, |bits, w| {
                bits | u16::from(block[at + 2 * w + 1] >> 4) << (4 * w)
            }),
        }
    }

    /// Sets the scale's f16 bits in `block`, leaving every other bit.
    pub fn write(self, block: &mut [u8], bits: u16) {
        match self {
            ScaleAt::Bytes(at) => block[at..at + 2].copy_from_slice(&bits.to_le_bytes()),
            ScaleAt::TopNibbles(at) => {
                for w in 0..4 {
                    let b = &mut block[at + 2 * w + 1];
                    *b = (*b & 0x0F) | ((bits >> (4 * w)) as u8 & 0x0F) << 4;
                }
            }
        }
    }

    /// The scale in `block` as an f32.
    pub fn get(self, block: &[u8]) -> f32 {
        half::f16::from_bits(self.read(block)).to_f32()
    }
}

/// One row of the format table ([`crate::format::table::FORMATS`]).
#[derive(Debug)]
pub struct Format {
    /// The name kgen's CLI, `KGEN_SPECS` and kernel names use (`q4_0`).
    pub tag: &'static str,
    /// ggml's name (`Q4_0`).
    pub name: &'static str,
    /// The GGUF / ggml type id (kgen's own formats: [`OWN_TYPE_BASE`] and up).
    pub gguf_type: u32,
    /// Values per block along K (1 for the float types).
    pub block: usize,
    /// Values per super-block (the block itself for flat formats).
    pub super_block: usize,
    /// Bytes per block.
    pub block_bytes: usize,
    /// Bits per stored level (16 / 32 for the float types).
    pub bits: u32,
    /// Where a block keeps its f16 scales (`d`, and `m` / `dmin` where the
    /// format has one): a file whose scale there is not finite is refused
    /// when loaded.
    pub scales: &'static [ScaleAt],
    pub levels: Levels,
    /// One block to `block` values, in gguf-py's float32 arithmetic.
    pub dequantize: fn(&[u8], &mut [f32]),
    /// `block` values to one block, appended (kgen's reference quantizer).
    pub quantize: fn(&[f32], &mut Vec<u8>),
    /// How the int8 family runs it (`None`: no int8 kernels).
    pub int8: Option<Int8Repack>,
}

impl Format {
    /// If a value of the block `x` is not finite, appends this format's
    /// encoding of a block that cannot be quantized, zeros with NaN f16
    /// scales (wherever [`Format::scales`] says they are), and returns true
    /// (the quantizers' first step).
    pub(crate) fn encode_non_finite(&self, x: &[f32], out: &mut Vec<u8>) -> bool {
        if x.iter().all(|v| v.is_finite()) {
            return false;
        }
        let start = out.len();
        out.resize(start + self.block_bytes, 0);
        for &at in self.scales {
            at.write(&mut out[start..], half::f16::NAN.to_bits());
        }
        true
    }

    /// The offset removed from stored levels: [`Levels::Offset`]'s, a
    /// grid's `-min(grid)` (its unsigned table levels are `grid[q] + offset`),
    /// else 0.
    pub fn offset(&self) -> i32 {
        match self.levels {
            Levels::Offset(o) => o,
            Levels::Grid(g) => -g.iter().map(|&v| v as i32).min().unwrap_or(0),
            _ => 0,
        }
    }

    /// The level grid of a [`Levels::Grid`] format.
    pub fn grid(&self) -> Option<&'static [i8]> {
        match self.levels {
            Levels::Grid(g) => Some(g),
            _ => None,
        }
    }

    /// A grid format's lookup tables for the int8 kernels: table `c` maps a
    /// 4-bit index `n` (a nibble of the packed layout) to the unsigned level
    /// of its `c`-th `bits`-wide field, `grid[(n >> (bits c)) & mask] +
    /// offset`, for the `4 / bits` fields of a nibble.
    pub fn grid_tables(&self) -> Option<Vec<[i8; 16]>> {
        let g = self.grid()?;
        let bits = self.bits as usize;
        let (mask, off) = ((1usize << bits) - 1, self.offset());
        Some(
            (0..4 / bits)
                .map(|c| std::array::from_fn(|n| (g[(n >> (bits * c)) & mask] as i32 + off) as i8))
                .collect(),
        )
    }

    /// Whether the format is one of GGUF's types (not one of kgen's own,
    /// which no GGUF file may name).
    pub fn is_gguf(&self) -> bool {
        self.gguf_type < OWN_TYPE_BASE
    }

    /// The codebook of a [`Levels::Codebook`] format.
    pub fn codebook(&self) -> Option<&'static [i8; 16]> {
        match self.levels {
            Levels::Codebook(c) => Some(c),
            _ => None,
        }
    }

    /// Whether the int8 family reads signed int8 levels (stored as bytes or
    /// looked up in a codebook) rather than unsigned ones with an offset.
    pub fn signed_levels(&self) -> bool {
        matches!(self.levels, Levels::Signed | Levels::Codebook(_))
    }

    /// The signed int8 value of a stored level (what a kernel multiplies).
    pub fn level_value(&self, stored: u8) -> i32 {
        match self.levels {
            Levels::Offset(o) => stored as i32 - o,
            Levels::Signed => stored as i8 as i32,
            Levels::Codebook(c) => c[stored as usize & 15] as i32,
            Levels::Grid(g) => g[stored as usize & (g.len() - 1)] as i32,
            Levels::Float => stored as i32,
        }
    }
}

/// A GGML tensor type: a handle on its row of the format table. Compares,
/// hashes and prints as the format.
#[derive(Clone, Copy)]
pub struct GgmlType(pub &'static Format);

impl GgmlType {
    pub fn format(self) -> &'static Format {
        self.0
    }

    /// The GGUF / ggml type id.
    pub fn id(self) -> u32 {
        self.0.gguf_type
    }

    /// The ggml name ("Q4_0", ...).
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// kgen's tag ("q4_0", ...).
    pub fn tag(self) -> &'static str {
        self.0.tag
    }

    /// Values per block (1 for the float types).
    pub fn block_values(self) -> usize {
        self.0.block
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.0.block_bytes
    }

    pub fn is_quantized(self) -> bool {
        self.0.block > 1
    }

    /// Bytes of one row of `k` values; `None` if `k` is not a whole number of
    /// blocks or the size overflows.
    pub fn row_bytes(self, k: usize) -> Option<usize> {
        if !k.is_multiple_of(self.block_values()) {
            return None;
        }
        (k / self.block_values()).checked_mul(self.block_bytes())
    }
}

impl PartialEq for GgmlType {
    fn eq(&self, other: &GgmlType) -> bool {
        self.0.gguf_type == other.0.gguf_type
    }
}

impl Eq for GgmlType {}

impl PartialOrd for GgmlType {
    fn partial_cmp(&self, other: &GgmlType) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for GgmlType {
    fn cmp(&self, other: &GgmlType) -> std::cmp::Ordering {
        self.0.gguf_type.cmp(&other.0.gguf_type)
    }
}

impl Hash for GgmlType {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.gguf_type.hash(h)
    }
}

impl fmt::Debug for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

#[cfg(test)]
mod tests {
    use super::ScaleAt;
    use crate::format::rng::Rng;

    /// A written scale reads back, and every other bit of the block stays.
    #[test]
    fn scale_fields_write_only_their_bits() {
        let mut rng = Rng::new(3);
        for at in [ScaleAt::Bytes(5), ScaleAt::TopNibbles(2)] {
            for _ in 0..100 {
                let block: Vec<u8> = (0..16).map(|_| rng.next_u64() as u8).collect();
                let bits = rng.next_u64() as u16;
                let mut b = block.clone();
                at.write(&mut b, bits);
                assert_eq!(at.read(&b), bits, "{at:?}");
                let mut back = b.clone();
                at.write(&mut back, at.read(&block));
                assert_eq!(back, block, "{at:?}");
            }
        }
        // IQ1_M's layout: nibble w of `d` is the top nibble of word w.
        let mut b = [0u8; 8];
        ScaleAt::TopNibbles(0).write(&mut b, 0x4321);
        assert_eq!(b, [0, 0x10, 0, 0x20, 0, 0x30, 0, 0x40]);
    }
}
