//! What an int8-family kernel computes: the weight format and the operation.

use crate::format::ggml::{GgmlType, IQ4_NL_VALUES};
use crate::spec::Op;
use serde::Serialize;

/// An int8-family format: Q4_0-like (4) or Q8_0-like (8) weights, or (with
/// `codebook`) IQ4_NL's 4-bit indices into [`IQ4_NL_VALUES`]; blocks of 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct I8Spec {
    pub op: Op,
    pub bits: u32,
    /// 4-bit codebook indices (IQ4_NL): looked up to signed int8 levels.
    pub codebook: bool,
}

impl I8Spec {
    pub fn new(op: Op, bits: u32) -> Result<I8Spec, crate::spec::SpecError> {
        if bits != 4 && bits != 8 {
            return Err(crate::spec::SpecError(format!(
                "int8-activation kernels take 4-bit (Q4_0) or 8-bit (Q8_0) weights, not {bits}"
            )));
        }
        Ok(I8Spec {
            op,
            bits,
            codebook: false,
        })
    }

    /// IQ4_NL: 4-bit indices into a 16-entry int8 codebook.
    pub fn iq4_nl(op: Op) -> I8Spec {
        I8Spec {
            op,
            bits: 4,
            codebook: true,
        }
    }

    /// The format named by its tag (`q4_0`, `q8_0`, `iq4_nl`).
    pub fn from_tag(op: Op, tag: &str) -> Option<I8Spec> {
        match tag {
            "q4_0" => Some(I8Spec::new(op, 4).expect("4 bits")),
            "q8_0" => Some(I8Spec::new(op, 8).expect("8 bits")),
            "iq4_nl" => Some(I8Spec::iq4_nl(op)),
            _ => None,
        }
    }

    /// Bits per level in the packed layout (4 or 8); the accessor the
    /// format table keeps when the field goes.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// 4-bit codebook indices (IQ4_NL); the accessor the format table keeps.
    pub fn codebook(&self) -> bool {
        self.codebook
    }

    /// `q4_0` / `q8_0` / `iq4_nl`.
    pub fn format_tag(&self) -> String {
        if self.codebook {
            "iq4_nl".into()
        } else {
            format!("q{}_0", self.bits)
        }
    }

    /// The GGUF type the kernels read.
    pub fn source_type(&self) -> GgmlType {
        match (self.bits, self.codebook) {
            (4, true) => GgmlType::Iq4Nl,
            (4, false) => GgmlType::Q4_0,
            _ => GgmlType::Q8_0,
        }
    }

    /// The codebook of a codebook format.
    pub fn codebook_values(&self) -> Option<&'static [i8; 16]> {
        self.codebook.then_some(&IQ4_NL_VALUES)
    }
}
