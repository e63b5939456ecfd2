//! The format table: every weight format kgen reads, one row each. The
//! CLI's values, `KGEN_SPECS`, the int8 registry and the runtime's dispatch
//! all look formats up here.
//!
//! A new format is one codec file under `format/ggml/` (its row and its
//! reference codec), one entry in [`FORMATS`], and the template primitives
//! its unpack needs.

// One path per codec module: the module graph (tests/module_graph.rs) reads
// `crate::format::ggml::{...}` as naming `format::ggml` itself, which
// re-exports this table's items.
use crate::format::ggml::float;
use crate::format::ggml::iq1;
use crate::format::ggml::iq2;
use crate::format::ggml::iq3;
use crate::format::ggml::iq4_nl;
use crate::format::ggml::iq4_xs;
use crate::format::ggml::mxfp4;
use crate::format::ggml::q2_k;
use crate::format::ggml::q3_k;
use crate::format::ggml::q4_0;
use crate::format::ggml::q4_1;
use crate::format::ggml::q4_k;
use crate::format::ggml::q5_0;
use crate::format::ggml::q5_1;
use crate::format::ggml::q5_k;
use crate::format::ggml::q6_k;
use crate::format::ggml::q8_0;
use crate::format::ggml::tq1_0;
use crate::format::ggml::tq2_0;
use crate::format::grid;
use crate::format::q4_0_g128;
use crate::format::row::{Format, GgmlType};

/// Every format, in the order the CLI lists them.
pub const FORMATS: &[&Format] = &[
    &float::F32,
    &float::F16,
    &q4_0::Q4_0,
    &q5_0::Q5_0,
    &q8_0::Q8_0,
    &iq4_nl::IQ4_NL,
    &iq4_xs::IQ4_XS,
    &mxfp4::MXFP4,
    &q4_1::Q4_1,
    &q5_1::Q5_1,
    &q2_k::Q2_K,
    &q3_k::Q3_K,
    &q4_k::Q4_K,
    &q5_k::Q5_K,
    &q6_k::Q6_K,
    &tq1_0::TQ1_0,
    &tq2_0::TQ2_0,
    &iq1::IQ1_S,
    &iq1::IQ1_M,
    &iq2::IQ2_XXS,
    &iq2::IQ2_XS,
    &iq2::IQ2_S,
    &iq3::IQ3_XXS,
    &iq3::IQ3_S,
    &grid::K2_BB,
    &grid::K2_PL,
    &grid::K1,
    &q4_0_g128::Q4_0_G128,
];

impl GgmlType {
    pub const F32: GgmlType = GgmlType(&float::F32);
    pub const F16: GgmlType = GgmlType(&float::F16);
    pub const Q4_0: GgmlType = GgmlType(&q4_0::Q4_0);
    pub const Q5_0: GgmlType = GgmlType(&q5_0::Q5_0);
    pub const Q8_0: GgmlType = GgmlType(&q8_0::Q8_0);
    pub const IQ4_NL: GgmlType = GgmlType(&iq4_nl::IQ4_NL);
    pub const IQ4_XS: GgmlType = GgmlType(&iq4_xs::IQ4_XS);
    pub const MXFP4: GgmlType = GgmlType(&mxfp4::MXFP4);
    pub const Q4_1: GgmlType = GgmlType(&q4_1::Q4_1);
    pub const Q5_1: GgmlType = GgmlType(&q5_1::Q5_1);
    pub const Q2_K: GgmlType = GgmlType(&q2_k::Q2_K);
    pub const Q3_K: GgmlType = GgmlType(&q3_k::Q3_K);
    pub const Q4_K: GgmlType = GgmlType(&q4_k::Q4_K);
    pub const Q5_K: GgmlType = GgmlType(&q5_k::Q5_K);
    pub const Q6_K: GgmlType = GgmlType(&q6_k::Q6_K);
    pub const TQ1_0: GgmlType = GgmlType(&tq1_0::TQ1_0);
    pub const TQ2_0: GgmlType = GgmlType(&tq2_0::TQ2_0);
    pub const IQ1_S: GgmlType = GgmlType(&iq1::IQ1_S);
    pub const IQ1_M: GgmlType = GgmlType(&iq1::IQ1_M);
    pub const IQ2_XXS: GgmlType = GgmlType(&iq2::IQ2_XXS);
    pub const IQ2_XS: GgmlType = GgmlType(&iq2::IQ2_XS);
    pub const IQ2_S: GgmlType = GgmlType(&iq2::IQ2_S);
    pub const IQ3_XXS: GgmlType = GgmlType(&iq3::IQ3_XXS);
    pub const IQ3_S: GgmlType = GgmlType(&iq3::IQ3_S);
    pub const K2_BB: GgmlType = GgmlType(&grid::K2_BB);
    pub const K2_PL: GgmlType = GgmlType(&grid::K2_PL);
    pub const K1: GgmlType = GgmlType(&grid::K1);
    pub const Q4_0_G128: GgmlType = GgmlType(&q4_0_g128::Q4_0_G128);

    /// Every type kgen reads, in table order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        FORMATS.iter().map(|f| GgmlType(f))
    }

    /// The type with this GGUF id, if kgen supports it (never one of
    /// kgen's own formats).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        by_gguf_type(id).map(GgmlType)
    }

    /// Whether this is one of GGUF's types, not one of kgen's own.
    pub fn is_gguf(self) -> bool {
        self.0.is_gguf()
    }

    /// Where the type comes from, for messages: `GGUF` or `kgen's own`.
    pub fn origin(self) -> &'static str {
        if self.is_gguf() {
            "GGUF"
        } else {
            "kgen's own"
        }
    }
}

/// The format with this tag (`q4_0`), if any. Case does not matter: the
/// tags are GGUF's type names in lower case, and people write `Q4_K` as
/// GGUF and llama.cpp print it.
pub fn by_tag(tag: &str) -> Option<&'static Format> {
    FORMATS
        .iter()
        .copied()
        .find(|f| f.tag.eq_ignore_ascii_case(tag))
}

/// The format with this GGUF type id, if kgen supports it.
pub fn by_gguf_type(id: u32) -> Option<&'static Format> {
    FORMATS
        .iter()
        .copied()
        .find(|f| f.gguf_type == id && f.is_gguf())
}

/// The formats the int8 family runs, in table order.
pub fn int8_formats() -> impl Iterator<Item = &'static Format> {
    FORMATS.iter().copied().filter(|f| f.int8.is_some())
}

/// Every ggml tensor type a GGUF file may name: (id, name, values per block,
/// bytes per block), including those kgen cannot run, so a file using them
/// still parses and the error names the type. Ids that ggml retired (4, 5,
/// 31-33, 36-38) are absent.
pub const GGML_TYPES: &[(u32, &str, usize, usize)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 40),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

/// The ggml name of a type id, if it is a known type.
pub fn type_name(id: u32) -> Option<&'static str> {
    GGML_TYPES.iter().find(|t| t.0 == id).map(|t| t.1)
}

/// (values per block, bytes per block) of a known type id.
pub fn type_size(id: u32) -> Option<(usize, usize)> {
    GGML_TYPES.iter().find(|t| t.0 == id).map(|t| (t.2, t.3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::rng::Rng;
    use crate::format::row::QK;

    /// The repack reads a [`crate::format::row::NibbleStore`] format's bytes
    /// as stored: they must hold exactly the levels `block_levels` decodes.
    #[test]
    fn stored_nibbles_agree_with_block_levels() {
        let mut rng = Rng::new(7);
        let mut rows = 0;
        for f in FORMATS {
            let Some((r, store)) = f.int8.and_then(|r| Some((r, r.nibbles?))) else {
                continue;
            };
            // 5-bit formats state their fifth bits too.
            assert_eq!(
                r.layout_bits,
                4 + u32::from(r.fifth.is_some()),
                "{}",
                f.name
            );
            for _ in 0..200 {
                let block: Vec<u8> = (0..f.block_bytes).map(|_| rng.next_u64() as u8).collect();
                for s in 0..f.block / QK {
                    let l = (r.block_levels)(&block, s);
                    let want: Vec<u8> = (0..QK / 2)
                        .map(|i| (l[i] & 0x0F) | l[i + QK / 2] << 4)
                        .collect();
                    let got = store.q4_0_bytes(&block, s);
                    assert_eq!(got.to_vec(), want, "{} sub-block {s}", f.name);
                    if let Some(fifth) = r.fifth {
                        let want = (0..QK).fold(0u32, |h, i| h | u32::from(l[i] >> 4) << i);
                        assert_eq!(fifth.word(&block, s), want, "{} sub-block {s}", f.name);
                    }
                }
            }
            rows += 1;
        }
        // Q4_0, Q4_1, IQ4_NL, IQ4_XS and Q4_K; Q5_0, Q5_1 and Q5_K.
        assert!(rows >= 8, "{rows} rows state their nibbles");
    }

    /// What the int8 repack reads of a block (`block_levels`, `sub_scale`)
    /// gives the codec's weights exactly: `d * level_value(level) + m` for
    /// every value of random blocks (random finite scales), every format
    /// with an int8 row. The oracle and the layout both read these; this
    /// and the kernel tests' file-weights check tie them to the file.
    #[test]
    fn block_levels_and_sub_scales_give_the_weights() {
        let mut rng = Rng::new(11);
        let mut rows = 0;
        for f in FORMATS {
            let Some(r) = f.int8 else { continue };
            let part = QK / r.scales_per_block;
            let mut w = vec![0f32; f.block];
            for t in 0..200 {
                let mut block: Vec<u8> = (0..f.block_bytes).map(|_| rng.next_u64() as u8).collect();
                // Each scale its own finite f16, either sign, subnormals
                // too: equal scales (or powers of two) would hide a swapped
                // scale and min and every rounding of `d l + m`.
                for &at in f.scales {
                    let bits = loop {
                        let b = rng.next_u64() as u16;
                        if b & 0x7C00 != 0x7C00 {
                            break b;
                        }
                    };
                    at.write(&mut block, bits);
                }
                (f.dequantize)(&block, &mut w);
                for s in 0..f.block / QK {
                    let levels = (r.block_levels)(&block, s);
                    for (i, &l) in levels.iter().enumerate() {
                        let (d, m) = (r.sub_scale)(&block, s * r.scales_per_block + i / part);
                        let (v, got) = (w[QK * s + i], d * f.level_value(l) as f32 + m);
                        assert!(
                            got == v,
                            "{} block {t} sub-block {s} value {i}: {got} vs {v}",
                            f.name
                        );
                    }
                }
            }
            rows += 1;
        }
        assert!(rows >= 16, "{rows} int8 rows");
    }

    #[test]
    fn rows_agree_with_ggml_sizes_and_tags_are_unique() {
        for f in FORMATS {
            if !f.is_gguf() {
                // kgen's own: unknown to ggml, and never named by a file.
                assert_eq!(type_name(f.gguf_type), None, "{}", f.name);
                assert!(by_gguf_type(f.gguf_type).is_none());
                assert_eq!(by_tag(f.tag).map(|g| g.name), Some(f.name));
                continue;
            }
            assert_eq!(
                type_size(f.gguf_type),
                Some((f.block, f.block_bytes)),
                "{}",
                f.name
            );
            assert_eq!(type_name(f.gguf_type), Some(f.name));
            assert_eq!(by_tag(f.tag).map(|g| g.name), Some(f.name));
            // GGUF's own spelling (`Q4_K`) names it too.
            assert_eq!(by_tag(f.name).map(|g| g.name), Some(f.name));
            assert_eq!(f.tag, f.name.to_ascii_lowercase());
            assert!(f.super_block.is_multiple_of(f.block));
        }
        let mut tags: Vec<_> = FORMATS.iter().map(|f| f.tag).collect();
        tags.sort();
        tags.dedup();
        assert_eq!(tags.len(), FORMATS.len());
    }

    /// A row that declares one weight scale per activation group has
    /// nothing the kernels' group sum would drop: no mins, no per-16
    /// scales or integer sub-scales, groups that tile its block, and
    /// `sub_scale` the same for every sub-block of a group (random blocks).
    #[test]
    fn group_scale_rows_have_one_scale_per_group() {
        let mut rng = crate::format::rng::Rng::new(35);
        let rows: Vec<_> = FORMATS
            .iter()
            .filter_map(|f| f.int8.map(|r| (f, r)))
            .filter(|(_, r)| r.group_scale)
            .collect();
        assert_eq!(
            rows.iter().map(|(f, _)| f.tag).collect::<Vec<_>>(),
            ["tq1_0", "tq2_0", "q4_0_g128"]
        );
        for (f, r) in rows {
            assert!(
                r.act_group > 1 && !r.mins && r.scales_per_block == 1,
                "{}",
                f.name
            );
            assert!(r.int_sub_scales.is_none(), "{}", f.name);
            let group = crate::format::ggml::QK * r.act_group;
            assert!(f.block.is_multiple_of(group), "{}", f.name);
            for _ in 0..64 {
                let blk: Vec<u8> = (0..f.block_bytes).map(|_| rng.next_u64() as u8).collect();
                for s in 0..f.block / crate::format::ggml::QK {
                    let first = (r.sub_scale)(&blk, s - s % r.act_group);
                    let got = (r.sub_scale)(&blk, s);
                    assert_eq!(
                        got.0.to_bits(),
                        first.0.to_bits(),
                        "{} sub-block {s}",
                        f.name
                    );
                    assert_eq!(
                        got.1.to_bits(),
                        first.1.to_bits(),
                        "{} sub-block {s}",
                        f.name
                    );
                }
            }
        }
    }

    /// Every quantizer on blocks whose largest magnitude runs from near
    /// f32's top to its subnormals, spread and constant: one block each,
    /// no panic, deterministic.
    #[test]
    fn quantizers_take_extreme_finite_values() {
        for f in FORMATS.iter().filter(|f| f.block > 1) {
            crate::format::ggml::kquant::check_extreme_scales(f, &[3e38, 1e20, 1.0, 1e-30, 1e-44]);
        }
    }
}
