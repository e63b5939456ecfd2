//! What an int8-family kernel computes: the weight format (a row of the
//! format table that the int8 family runs) and the operation.

use crate::format::row::{Format, GgmlType};
use crate::format::table::{by_tag, int8_formats};
use crate::spec::{Op, SpecError};
use serde::{Serialize, Serializer};

/// An int8-family kernel's weight format and operation.
#[derive(Clone, Copy, Debug)]
pub struct I8Spec {
    pub op: Op,
    pub format: &'static Format,
    /// Bits per level of the layout its kernels read: the format's
    /// `layout_bits`, or 4 for a 3-bit format on an ISA without the
    /// 3-bit unpack ([`I8Spec::with_three_bit`], `I8Isa::reads`).
    pub bits: u32,
}

impl PartialEq for I8Spec {
    fn eq(&self, other: &I8Spec) -> bool {
        self.op == other.op && self.format.tag == other.format.tag && self.bits == other.bits
    }
}

impl Eq for I8Spec {}

impl Serialize for I8Spec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Out {
            op: Op,
            format: &'static str,
            bits: u32,
            codebook: bool,
        }
        Out {
            op: self.op,
            format: self.format.tag,
            bits: self.bits(),
            codebook: self.codebook(),
        }
        .serialize(s)
    }
}

impl I8Spec {
    /// 32-value blocks that share an activation scale (the format table's
    /// `act_group`: 8 for the K-quants and TQ1_0 / TQ2_0, else 1).
    pub fn act_group(&self) -> usize {
        self.format.int8.map_or(1, |r| r.act_group)
    }

    /// One weight scale per activation scale group (the format table's
    /// `group_scale`).
    pub fn group_scale(&self) -> bool {
        self.format.int8.is_some_and(|r| r.group_scale)
    }

    /// The int8 kernel for `format`, or why there is none.
    pub fn for_format(op: Op, format: &'static Format) -> Result<I8Spec, SpecError> {
        if format
            .int8
            .is_some_and(|r| r.scales_per_block > 1 && r.layout_bits == 5)
        {
            return Err(SpecError(format!(
                "{} has a scale per 16 values: the int8 family folds half blocks on 2-, 3-, 4-, 6- and 8-bit layouts only",
                format.name
            )));
        }
        if format.int8.is_none() {
            return Err(SpecError(format!(
                "{} has no int8-activation kernels (int8 formats: {})",
                format.name,
                int8_formats().map(|f| f.tag).collect::<Vec<_>>().join(", ")
            )));
        }
        let bits = format.int8.map_or(format.bits, |r| r.layout_bits);
        Ok(I8Spec { op, format, bits })
    }

    /// kgen's symmetric `bits`-bit weights, stored as Q4_0 (4) or Q8_0 (8).
    pub fn new(op: Op, bits: u32) -> Result<I8Spec, SpecError> {
        match bits {
            4 => Ok(I8Spec::for_format(op, GgmlType::Q4_0.format())?),
            8 => Ok(I8Spec::for_format(op, GgmlType::Q8_0.format())?),
            _ => Err(SpecError(format!(
                "int8-activation kernels take 4-bit (Q4_0) or 8-bit (Q8_0) symmetric weights, not {bits}"
            ))),
        }
    }

    /// The int8 format named by its tag (`q4_0`, `q8_0`, `iq4_nl`, ...).
    pub fn from_tag(op: Op, tag: &str) -> Option<I8Spec> {
        by_tag(tag).and_then(|f| I8Spec::for_format(op, f).ok())
    }

    /// Bits per level in the packed layout (1, 2, 3, 4, 5, 6 or 8).
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// The spec as kernels with (`three_bit`) or without the 3-bit unpack
    /// read it: a 3-bit format at 4 bits without
    /// ([`crate::format::row::Int8Repack::read_bits`];
    /// `I8Isa::reads` says which an ISA's kernels are).
    pub fn with_three_bit(self, three_bit: bool) -> I8Spec {
        let bits = self
            .format
            .int8
            .map_or(self.bits, |r| r.read_bits(three_bit));
        I8Spec { bits, ..self }
    }

    /// The format has mins (Q4_1, Q4_K, ...): a second f16 stream beside
    /// the scales, added as `m * d_x * sum(q_x)` per block.
    pub fn mins(&self) -> bool {
        self.format.int8.is_some_and(|r| r.mins)
    }

    /// Scales per 32-value block: 1, or 2 for formats with a scale per 16
    /// values (Q6_K), whose kernels fold each half of a block on its own.
    pub fn scales_per_block(&self) -> usize {
        self.format.int8.map_or(1, |r| r.scales_per_block)
    }

    /// Activation level sums per block (2 where a format has a scale per 16
    /// values: Q2_K, Q3_K, Q6_K): the step of the kernels' `xc`.
    pub fn sums_per_block(&self) -> usize {
        self.format.int8.map_or(1, |r| r.sums_per_block())
    }

    /// 4-bit codebook indices (IQ4_NL): looked up to signed int8 levels.
    pub fn codebook(&self) -> bool {
        self.format.codebook().is_some()
    }

    /// The table tag, `q4_0` / `q8_0` / `iq4_nl`.
    pub fn format_tag(&self) -> String {
        self.format.tag.to_string()
    }

    /// The GGUF type the kernels read.
    pub fn source_type(&self) -> GgmlType {
        GgmlType(self.format)
    }

    /// Indices into a grid of levels (kgen's 2- and 1-bit grids): looked
    /// up a nibble at a time, one table per index field.
    pub fn grid(&self) -> bool {
        self.format.grid().is_some()
    }

    /// A grid format's lookup tables (kgen's 2- and 1-bit grids), one per
    /// index field of a nibble.
    pub fn grid_tables(&self) -> Option<Vec<[i8; 16]>> {
        self.format.grid_tables()
    }

    /// Levels looked up from indices of a table: codebook and grid formats.
    pub fn table_lookup(&self) -> bool {
        self.grid() || self.codebook()
    }

    /// The codebook of a codebook format.
    pub fn codebook_values(&self) -> Option<&'static [i8; 16]> {
        self.format.codebook()
    }
}
