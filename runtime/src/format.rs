//! Weight formats: which ones the runtime runs, which kernel family runs
//! each, and the one parser of their names.
//!
//! | name              | format                                             | family |
//! |-------------------|----------------------------------------------------|--------|
//! | `4:128`, `3:col`  | GPTQ: 2/3/4/8-bit levels, scale and zero point per group of 16..256 along K or per column | f32 |
//! | `q4_0`, `q8_0`, `iq4_nl`, ... | a GGUF block format of kgen's format table (`kgen::format::FORMATS`) that the int8 family runs | int8 |
//! | `q4_0:128`, `q8_0:64` | kgen's symmetric groups: Q4_0 / Q8_0 blocks sharing one scale per 64, 128 or 256 values | int8 |
//!
//! Names are case-insensitive (`Q4_0`, ggml's spelling, is `q4_0`); a GPTQ
//! group is written as in `KGEN_SPECS` (`128`, `g128`, `col`).

use crate::error::Error;
use kgen::format::ggml::GgmlType;
use kgen::format::q4_0_g128::G128;
use kgen::format::symmetric;
use kgen::spec::{Group, KernelSpec, Op};
use std::fmt;
use std::str::FromStr;

/// A kernel family: a way of computing `y = x W`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// f32 activations against weights unpacked to f32 and multiplied with
    /// FMA (QIGen): the GPTQ formats, zero points included.
    F32,
    /// Activations quantized to int8 per 32-block on every call, integer dot
    /// products against packed weights (Arm papers 000/002): the GGUF block
    /// formats and kgen's symmetric groups. No zero-point kernels yet.
    Int8,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::F32 => "f32",
            Family::Int8 => "int8",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A weight format, parsed from its name with [`str::parse`] / `TryFrom<&str>`.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WeightFormat {
    /// GPTQ: `bits` (2, 3, 4 or 8) unsigned levels `q`, a scale `s` and a zero
    /// point `z` per `group` values along K (or per column), `w = s (q - z)`.
    /// Named `BITS:GROUP`: `4:128`, `3:col`.
    Gptq { bits: u32, group: Group },
    /// A GGUF block format of the format table that the int8 family runs
    /// (`q4_0`, `q8_0`, `iq4_nl`, ...), named by its tag.
    Ggml(GgmlType),
    /// kgen's symmetric groups (`q4_0:128`, `q8_0:64`): Q4_0 / Q8_0 levels
    /// with one scale per `group` (64, 128 or 256) values along K, stored as
    /// Q4_0 / Q8_0 blocks that repeat their group's scale. Group 32 is
    /// exactly Q4_0 / Q8_0. (4-bit GPTQ groups of 128 run on kgen's
    /// `q4_0_g128` instead, which holds the scale once per 128 values;
    /// symmetric groups stay on Q4_0, which every build with 4-bit int8
    /// kernels has.)
    Symmetric { bits: u32, group: usize },
}

/// Symmetric group sizes (32 is plain Q4_0 / Q8_0).
const SYMMETRIC_GROUPS: [usize; 4] = [32, 64, 128, 256];

fn syntax() -> String {
    format!(
        "BITS:GROUP for GPTQ (4:128, 3:col), an int8 format of the table ({}), \
         or q4_0:GROUP / q8_0:GROUP for symmetric groups of 64, 128 or 256",
        kgen::format::int8_formats()
            .map(|f| f.tag)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

impl WeightFormat {
    /// GGUF Q4_0 (also kgen's symmetric 4-bit groups of 32).
    pub const Q4_0: WeightFormat = WeightFormat::Ggml(GgmlType::Q4_0);
    /// GGUF Q8_0 (also kgen's symmetric 8-bit groups of 32).
    pub const Q8_0: WeightFormat = WeightFormat::Ggml(GgmlType::Q8_0);
    /// GGUF IQ4_NL.
    pub const IQ4_NL: WeightFormat = WeightFormat::Ggml(GgmlType::IQ4_NL);

    /// A GPTQ format, checked (bits 2, 3, 4, 8; a group size the kernels take).
    pub fn gptq(bits: u32, group: Group) -> Result<WeightFormat, Error> {
        KernelSpec::new(Op::Gemv, bits, group)
            .map_err(|e| Error::Unsupported(format!("GPTQ {bits}:{}: {e}", group_name(group))))?;
        Ok(WeightFormat::Gptq { bits, group })
    }

    /// A symmetric format: `bits` 4 or 8, `group` 32, 64, 128 or 256 (32 gives
    /// Q4_0 / Q8_0).
    pub fn symmetric(bits: u32, group: usize) -> Result<WeightFormat, Error> {
        if bits != 4 && bits != 8 {
            return Err(Error::Unsupported(format!(
                "symmetric groups take 4- or 8-bit weights, not {bits}"
            )));
        }
        if !SYMMETRIC_GROUPS.contains(&group) {
            return Err(Error::Unsupported(format!(
                "symmetric group {group}: use 32, 64, 128 or 256"
            )));
        }
        Ok(if group == kgen::format::QK {
            WeightFormat::Ggml(symmetric::storage(bits))
        } else {
            WeightFormat::Symmetric { bits, group }
        })
    }

    /// The format of a GGUF tensor type; `None` for types no kernel runs
    /// (the float types).
    pub fn from_ggml(t: GgmlType) -> Option<WeightFormat> {
        t.format().int8.map(|_| WeightFormat::Ggml(t))
    }

    /// The GGUF type the weights are stored as (the symmetric groups are
    /// stored as Q4_0 / Q8_0 blocks); `None` for GPTQ.
    pub fn ggml_type(self) -> Option<GgmlType> {
        match self.kernel_format() {
            WeightFormat::Ggml(t) => Some(t),
            _ => None,
        }
    }

    /// Bits per weight level.
    pub fn bits(self) -> u32 {
        match self {
            WeightFormat::Gptq { bits, .. } | WeightFormat::Symmetric { bits, .. } => bits,
            WeightFormat::Ggml(t) => t.format().bits,
        }
    }

    /// The families that can run the format, each with the format its
    /// kernels read. 4- and 8-bit GPTQ with groups of a multiple of 32 (or
    /// per column) run on both: the f32 family, and the int8 family's
    /// kernels. 4-bit: kgen's `q4_0_g128` where the groups are whole
    /// 128-blocks (g128, g256, per column; levels `q - 8` under one scale
    /// per 128 values, and `s (8 - z)` per group added after the kernel),
    /// else, or where a build lacks those, Q4_1 (a scale and a min per 32
    /// values, `s (q - z) = s q - s z`). 8-bit: Q8_0 (levels `q - 128`, and
    /// `s (128 - z)` per group added after the kernel). [`crate::Registry`]
    /// orders them ([`crate::Registry::select_pair`]).
    pub fn families(self) -> Vec<(Family, WeightFormat)> {
        let mut out = vec![(self.family(), self.kernel_format())];
        if let WeightFormat::Gptq { bits, group } = self {
            let whole = |b: usize| group.size().is_none_or(|g| g.is_multiple_of(b));
            let mut int8 = |t: GgmlType| out.push((Family::Int8, WeightFormat::Ggml(t)));
            match bits {
                // One scale per 128 values where the groups allow it (g128,
                // g256, per column), else Q4_1's scale and min per 32.
                4 if whole(G128) => {
                    int8(GgmlType::Q4_0_G128);
                    int8(GgmlType::Q4_1);
                }
                4 if whole(32) => int8(GgmlType::Q4_1),
                8 if whole(32) => int8(GgmlType::Q8_0),
                _ => {}
            }
        }
        out
    }

    /// The format's own family (the first of [`WeightFormat::families`]):
    /// f32 for GPTQ, whose 4- and 8-bit formats dispatch may still run on
    /// the int8 family ([`crate::Registry::select_pair`]).
    pub fn family(self) -> Family {
        match self {
            WeightFormat::Gptq { .. } => Family::F32,
            _ => Family::Int8,
        }
    }

    /// The format the kernels read: the format itself, except for the
    /// symmetric groups, which the Q4_0 / Q8_0 kernels run.
    pub fn kernel_format(self) -> WeightFormat {
        match self {
            WeightFormat::Symmetric { bits, .. } => WeightFormat::Ggml(symmetric::storage(bits)),
            f => f,
        }
    }

    /// A phrase for messages: `GPTQ 4-bit, scale and zero per group of 128`,
    /// `GGUF Q4_0`, ...
    pub fn describe(self) -> String {
        match self {
            WeightFormat::Gptq { bits, group } => match group {
                Group::Size(g) => format!("GPTQ {bits}-bit, scale and zero per group of {g}"),
                Group::Column => format!("GPTQ {bits}-bit, scale and zero per column"),
            },
            WeightFormat::Ggml(t) => format!("{} {}", t.origin(), t.name()),
            WeightFormat::Symmetric { bits, group } => {
                format!("symmetric {bits}-bit, one scale per {group} values")
            }
        }
    }
}

fn group_name(g: Group) -> String {
    match g {
        Group::Size(s) => s.to_string(),
        Group::Column => "col".into(),
    }
}

impl fmt::Display for WeightFormat {
    /// The name [`WeightFormat::from_str`] parses back: `4:128`, `3:col`,
    /// `q4_0`, `q8_0`, `iq4_nl`, `q4_0:128`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WeightFormat::Gptq { bits, group } => write!(f, "{bits}:{}", group_name(group)),
            WeightFormat::Ggml(t) => f.write_str(t.tag()),
            WeightFormat::Symmetric { bits, group } => write!(f, "q{bits}_0:{group}"),
        }
    }
}

impl FromStr for WeightFormat {
    type Err = Error;

    fn from_str(s: &str) -> Result<WeightFormat, Error> {
        let t = s.trim().to_ascii_lowercase();
        let unknown =
            || Error::Unsupported(format!("unknown weight format `{s}`: use {}", syntax()));
        if let Some(f) = kgen::format::by_tag(&t).and_then(|f| WeightFormat::from_ggml(GgmlType(f)))
        {
            return Ok(f);
        }
        let (head, group) = t.split_once(':').ok_or_else(unknown)?;
        // Symmetric groups are written as the table format they are stored as.
        let sym_bits = [4, 8]
            .into_iter()
            .find(|&b| symmetric::storage(b).tag() == head);
        if let Some(bits) = sym_bits {
            let g = group
                .trim()
                .strip_prefix('g')
                .unwrap_or(group.trim())
                .parse()
                .map_err(|_| unknown())?;
            return WeightFormat::symmetric(bits, g)
                .map_err(|e| Error::Unsupported(format!("`{s}`: {}", e.message())));
        }
        let bits: u32 = head.trim().parse().map_err(|_| unknown())?;
        let group = Group::parse(group).map_err(|e| Error::Unsupported(format!("`{s}`: {e}")))?;
        WeightFormat::gptq(bits, group)
    }
}

impl TryFrom<&str> for WeightFormat {
    type Error = Error;

    fn try_from(s: &str) -> Result<WeightFormat, Error> {
        s.parse()
    }
}

impl TryFrom<&String> for WeightFormat {
    type Error = Error;

    fn try_from(s: &String) -> Result<WeightFormat, Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in [
            "2:32", "3:128", "4:col", "8:256", "4:16", "q4_0", "q8_0", "iq4_nl", "q4_0:64",
            "q8_0:256",
        ] {
            let f: WeightFormat = name.parse().unwrap();
            assert_eq!(f.to_string(), name);
        }
        assert_eq!("Q4_0".parse::<WeightFormat>().unwrap(), WeightFormat::Q4_0);
        assert_eq!(
            " 4:g128 ".parse::<WeightFormat>().unwrap(),
            WeightFormat::Gptq {
                bits: 4,
                group: Group::Size(128)
            }
        );
        assert_eq!(
            "3:column".parse::<WeightFormat>().unwrap().to_string(),
            "3:col"
        );
        assert_eq!(
            "q8_0:32".parse::<WeightFormat>().unwrap(),
            WeightFormat::Q8_0
        );
    }

    #[test]
    fn bad_names_say_what_is_wrong() {
        for (name, says) in [
            ("iq9_x", "unknown weight format `iq9_x`"),
            ("q8_k", "q4_0"),
            ("5:32", "5 weight bits"),
            ("4:48", "48"),
            ("q4_0:96", "symmetric group 96"),
            ("4", "BITS:GROUP"),
            ("x:32", "unknown weight format"),
        ] {
            let e = name.parse::<WeightFormat>().unwrap_err().to_string();
            assert!(e.contains(says), "{name}: {e}");
        }
    }

    #[test]
    fn families_and_kernel_formats() {
        let f = |s: &str| s.parse::<WeightFormat>().unwrap();
        assert_eq!(f("4:128").family(), Family::F32);
        for s in ["q4_0", "q8_0", "iq4_nl", "q4_0:128"] {
            assert_eq!(f(s).family(), Family::Int8, "{s}");
        }
        assert_eq!(f("q4_0:128").kernel_format(), WeightFormat::Q4_0);
        assert_eq!(f("q8_0:64").kernel_format(), WeightFormat::Q8_0);
        assert_eq!(f("q8_0:64").ggml_type(), Some(GgmlType::Q8_0));
        assert_eq!(f("3:col").ggml_type(), None);
        assert_eq!(WeightFormat::from_ggml(GgmlType::F16), None);
        assert_eq!(
            f("3:col").describe(),
            "GPTQ 3-bit, scale and zero per column"
        );
    }
}
