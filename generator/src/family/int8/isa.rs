//! The int8 family's ISAs as data: features, lanes, registers, the
//! template each one unrolls, and how its kernels are written (their
//! instruction costs are counted from the emitted code, see
//! [`crate::family::int8::model::block_counts`]).

use crate::family::int8::spec::I8Spec;
use crate::spec::Op;
use crate::target::{Arch, Feature, TargetDesc};

/// One ISA of the int8 family.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct I8Isa {
    pub name: &'static str,
    pub arch: Option<Arch>,
    /// Target features a target must list to run it.
    pub requires: &'static [Feature],
    /// `target_feature` / run-time detection names (f16c is implied by every
    /// AVX2 CPU but is its own feature bit).
    pub features: &'static [&'static str],
    /// i32 lanes per vector: columns interleaved per vector.
    pub lanes: usize,
    pub registers: usize,
    pub template_path: &'static str,
    pub template: &'static str,
    /// The ISA whose template this one's extends: the kernels get its
    /// primitives, less those this template redefines by name
    /// ([`crate::emit::extend_template`]). An ISA extends one whose
    /// instructions it has and whose vectors it uses.
    pub extends: Option<&'static I8Isa>,
    /// Bytes of one column per lane and chunk: 4 (one column per i32 lane,
    /// dot-product instructions) or 8 (column pairs for 2x2 matrix multiply).
    pub group_bytes: usize,
    /// 4-bit levels stored as signed nibbles, read as `16 q` with one shift
    /// or one mask and no bias correction (needs a signed x signed dot).
    pub signed_nibbles: bool,
    /// GEMM micro kernels use 2x2 matrix-multiply tiles (smmla) on
    /// activation rows interleaved in pairs.
    pub mmla: bool,
    /// Activation broadcasts as a 16-byte load (`xquad`) and an in-lane
    /// dword shuffle (`xsel`) instead of a 4-byte broadcast load each:
    /// measured 1.27x on the AVX2 GEMM micro kernel on Zen 3, where the
    /// broadcast loads limited it. Rust 1.95's LLVM folds the pair back
    /// into one `vpbroadcastd` from memory (the shipped q4_k 4x8 AVX2 GEMM
    /// has 80 and no `vpshufd`), which Zen 3 issues on the same two shuffle
    /// pipes: llvm-mca -mcpu=znver3 puts that kernel at 39 cycles per
    /// block, bound by those pipes, and a kernel-only timing measured 38.
    pub x_quad: bool,
    /// Kernels only for the formats whose levels are looked up from a table
    /// (codebook and grid formats, [`I8Spec::table_lookup`]): the ISA it
    /// extends runs the rest with the same instructions.
    pub table_lookup_only: bool,
    /// A template overlay for the GEMV micro kernels: its primitives
    /// replace the template's of the same name there (AVX-512: dots that
    /// broadcast their activation bytes from memory, see the file).
    pub gemv_overlay: Option<Overlay>,
    /// Whether and how GEMV micro kernels prefetch their weight stream
    /// ([`Prefetch`]); `None`: they do not.
    pub prefetch: Option<Prefetch>,
    /// The `asm!` register class of an integer vector, where the micro
    /// kernels fence their accumulators after every chunk (see
    /// [`crate::family::int8::emit`]'s lane kernels); `None` where the
    /// aarch64 dots are `asm!` blocks LLVM does not reorder or there is no
    /// instruction set to name (portable). (AVX-512's GEMV dots are `asm!`
    /// too, [`Self::gemv_overlay`], and keep the fence: the pointers it
    /// takes keep each chunk's broadcasts below the previous fence.)
    pub fence_class: Option<&'static str>,
    /// The fence also takes the weight and activation pointers, so no load
    /// of a chunk moves above the previous chunk's fence: with 32 registers
    /// LLVM otherwise hoists the next chunks' loads (and their unpacking)
    /// until it spills (`generator/examples/spills.rs` on x86-64-v4-vnni: iq4_nl
    /// 8x16 72 stack accesses without, 0 with). On AVX2 it costs more than
    /// it saves (iq4_nl 4x8: 2 without, 18 with). Not in the K-quant and
    /// TQ GEMVs ([`crate::family::int8::emit::lane::fences_pointers`]).
    pub fence_pointers: bool,
    /// Count one more register per weight vector a signed dot (`dot_s`:
    /// 8-bit and codebook levels) reads: x86 has no signed x signed byte
    /// dot, so it keeps `|w|` beside `w`, shared by the tile's rows. Set
    /// where compiled kernels show it (`generator/examples/spills.rs`): on
    /// AVX-512, where without it the model picked iq4_nl 5x32 (98 stack
    /// accesses) and with it every pick compiles without spilling. The
    /// 16-register AVX2 ISAs leave it out: their 8-bit kernels hold one
    /// activation vector and no nibble mask, two fewer than the count
    /// assumes, and every tile the count admits there compiled without a
    /// spill but q8_0 5x8.
    pub signed_dot_abs: bool,
    /// The byte dot is unsigned x signed into i32 lanes with no narrower
    /// sum in between (vpdpbusd), so signed levels are cheapest read as
    /// `level + 128`: codebook tables shifted by 128, 8-bit levels with
    /// their sign bit flipped (`flip`, one xor per weight vector shared by
    /// the tile's rows), and the activations' `128 * sum(x)` removed per
    /// scale. The sign trick (`dot_s`) costs two or three more instructions
    /// per dot. Not on AVX2, whose maddubs sums pairs into saturating i16.
    pub unsigned_dot: bool,
    /// GEMM kernels of 5- and 6-bit formats unpack each tile's levels
    /// 1024 values at a time into a scratch of bytes (the 8-bit layout's
    /// value chunks) and every row group dots those, so the unpack (9 ops
    /// per chunk pair for 5-bit, 22 per block for 6-bit on AVX2) is paid
    /// once per block instead of once per `m_r` rows, and the masks and
    /// planes leave the registers (AVX2 5-bit: 3x8 tiles become 2x16). Set
    /// where it was measured faster: AVX2 on Zen 3 (Q5_0, Q5_1, Q5_K, Q6_K
    /// GEMM m=32/128, 1.14 to 1.29x). The other lane ISAs keep the
    /// in-register unpack until measured on their hardware.
    pub scratch_levels: bool,
    /// Formats with integer sub-scales under an f16 super-block scale
    /// ([`crate::format::row::IntSubScales`]: Q2_K's 4-bit scale and min
    /// per 16 values, Q6_K's i8 scale per 16 (and Q3_K's 6-bit one, read
    /// out as i8), Q4_K's and Q5_K's 6-bit
    /// scale and min per 32) keep them integers: each part's i16 pair sums
    /// are widened by one madd with the sub-scale in place of the word of
    /// ones, the mins (or the offset times the scales) go in through one
    /// madd of a pair of sub-scale values with the row's two half sums (of
    /// two blocks' sums, at the super-block's close, for mins per 32), and
    /// only the super-block's two i32 sums are converted and scaled. The f16 layout takes a conversion and an FMA
    /// or two (and an offset subtraction) per part, row and column group on
    /// the pipes the dots use. Needs the i16 pair sums of maddubs ISAs
    /// (AVX2), or [`I8Isa::int_halves_packed`].
    pub int_sub_scales: bool,
    /// Integer sub-scales on an ISA whose dots sum in i32 (vpdpbusd): a
    /// block's two 16-value halves share each column's i32 lane as an i16
    /// pair (half 1's dot high, half 0's low over a bias that keeps it
    /// positive, each summed apart first), so one vpdpwssd scales both
    /// halves where the f16 layout takes two conversions and FMAs per row
    /// and column group, on the pipes the dots use (Zen 5). The 2-bit
    /// nibble form only (Q2_K): its half dots stay within 16 * 3 * 127.
    pub int_halves_packed: bool,
    /// The block accumulator (`pair_acc`) sums i16 pairs (maddubs) that
    /// `block_sum` widens; elsewhere the dots accumulate i32 lanes.
    pub pair_sums_i16: bool,
    /// SVE vector length the kernels are written for (`None`: not SVE).
    /// They run only where SVE is present at exactly this length: targets
    /// must list it as `sve_vector_bits`, and run-time detection reads it.
    pub sve_bits: Option<u32>,
    /// The template unpacks 3-bit layouts (`lo3`, `hi3`, `spill3`): formats
    /// whose levels fit 3 bits (Q3_K, the IQ1 and IQ2 codebooks) repack
    /// to 3 bits per level. Elsewhere they are read at 4
    /// ([`crate::format::row::Int8Repack::read_bits`]).
    pub three_bit: bool,
}

/// The GEMV weight-stream prefetch of an ISA ([`I8Isa::prefetch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefetch {
    /// GEMV micro kernels ask for the weight stream's cache lines this many
    /// bytes ahead (`ops::prefetch` once per line of each block). The GEMV
    /// reads its weights once, in layout order. On the Zen 3 VM, weights
    /// beyond L3 (4096x11008 and 11008x4096, Q4_0 and Q4_K, 1 thread,
    /// medians of 4 alternating rounds) read 13.4-15.9 GB/s without, 16.9-19.5
    /// with 2048 bytes and 21.4-26.4 with 4096; 4096x4096 (in L3) did not
    /// change. On the Zen 5 VM (AVX-512 VNNI, 4096x11008, 1 and 2 threads,
    /// each sweep paired with a read pass of as many bytes) the 2-bit
    /// `k2_bb` GEMV read 0.84-0.91 of the read bandwidth without, 0.98-1.02
    /// with 4096 bytes (2048: 0.84-0.98; 8192 as 4096); Q4_0 and Q4_K were
    /// at the bandwidth either way, and Q4_K in L3 gained about 5%. Set
    /// where it was measured (AVX2 on Zen 3, AVX-512 VNNI on Zen 5; Intel
    /// unmeasured). On a Zen 4 VM 8192 bytes did not beat 4096 (Q4_0 and
    /// Q8_0 GEMV from DRAM, 1 thread: 0.84-0.96 of the read rate against
    /// 0.88-0.98).
    pub ahead: usize,
    /// Only the GEMVs of formats read at most this many bits per level
    /// ([`I8Isa::reads`]) prefetch. Set from the Zen 4
    /// VM alone (AVX-512 VNNI; the GEMV micro kernels timed alone, 1
    /// thread, cycles per block with and without; then kgen_peer, old and
    /// new binaries alternating): the prefetches cost the 3- to 6-bit GEMVs
    /// 5-15% with the weights in L3 (Q4_0, Q4_K, Q5_0, Q6_K, IQ4_NL) and up
    /// to 40% beyond L3 (Q5_0, Q5_K; Q4_0 and Q4_K 15%): the hardware
    /// prefetchers keep up with those streams and the prefetches take load
    /// slots. Q8_0 was mixed (5-9% slower without in L3 in the A/B runs,
    /// faster beyond L3). Beyond L3 the 2-bit GEMVs were split (k2_bb 8%
    /// and Q2_K 12% faster with, TQ2_0 6-9% slower, TQ1_0 even), and the
    /// Zen 5 figures above are k2_bb's, so the formats read at 2 bits or
    /// fewer keep them (Q2_K, TQ1_0, TQ2_0, k2_bb, k2_pl, k1); the IQ1/IQ2
    /// lattice formats read 3-bit indices and do not (IQ2_XXS was 6-9%
    /// slower with). On Zen 5 this gives up the 5% Q4_K gained in L3
    /// there (unmeasured since); Intel is unmeasured either way.
    pub max_bits: u32,
}

/// A template file that overlays an ISA's template for some kernels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Overlay {
    pub path: &'static str,
    pub text: &'static str,
}

pub const AVX512VNNI: I8Isa = I8Isa {
    name: "avx512vnni",
    arch: Some(Arch::X86_64),
    requires: &[Feature::Avx512f, Feature::Avx512bw, Feature::Avx512vnni],
    features: &["avx512f", "avx512bw", "avx512vnni"],
    lanes: 16,
    registers: 32,
    template_path: "templates/i8/avx512vnni.rs",
    template: include_str!("../../../../templates/i8/avx512vnni.rs"),
    extends: None,
    gemv_overlay: Some(Overlay {
        path: "templates/i8/avx512vnni_xmem.rs",
        text: include_str!("../../../../templates/i8/avx512vnni_xmem.rs"),
    }),
    table_lookup_only: false,
    group_bytes: 4,
    signed_nibbles: false,
    mmla: false,
    three_bit: true,
    sve_bits: None,
    prefetch: Some(Prefetch {
        ahead: 4096,
        max_bits: 2,
    }),
    x_quad: false,
    scratch_levels: false,
    int_sub_scales: true,
    int_halves_packed: true,
    fence_class: Some("zmm_reg"),
    fence_pointers: true,
    signed_dot_abs: true,
    pair_sums_i16: false,
    unsigned_dot: true,
};

/// AVX-512 VNNI plus VBMI (Ice Lake and later Intel, Zen 4, Zen 5): the
/// table-lookup formats' nibble indices go to vpermb unmasked (see its
/// template). Everything else is [`AVX512VNNI`]'s.
pub const AVX512VBMI: I8Isa = I8Isa {
    name: "avx512vbmi",
    requires: &[
        Feature::Avx512f,
        Feature::Avx512bw,
        Feature::Avx512vnni,
        Feature::Avx512vbmi,
    ],
    features: &["avx512f", "avx512bw", "avx512vnni", "avx512vbmi"],
    template_path: "templates/i8/avx512vbmi.rs",
    template: include_str!("../../../../templates/i8/avx512vbmi.rs"),
    extends: Some(&AVX512VNNI),
    table_lookup_only: true,
    ..AVX512VNNI
};

/// AVX2 with vpdpbusd (VEX): i32 dots with no saturating i16 pairs in
/// between, so signed levels are read as `level + 128` and sub-scales stay
/// f16 (the integer form widens maddubs' i16 pairs). No prefetch,
/// activation quads or scratch of levels: those were measured on AVX2
/// CPUs only. Its other settings and primitives are AVX2's.
pub const AVXVNNI: I8Isa = I8Isa {
    name: "avxvnni",
    requires: &[Feature::Avx2, Feature::Fma, Feature::Avxvnni],
    features: &["avx2", "fma", "f16c", "avxvnni"],
    template_path: "templates/i8/avxvnni.rs",
    template: include_str!("../../../../templates/i8/avxvnni.rs"),
    extends: Some(&AVX2),
    gemv_overlay: None,
    table_lookup_only: false,
    prefetch: None,
    x_quad: false,
    scratch_levels: false,
    int_sub_scales: false,
    pair_sums_i16: false,
    unsigned_dot: true,
    ..AVX2
};

pub const AVX2: I8Isa = I8Isa {
    name: "avx2",
    arch: Some(Arch::X86_64),
    requires: &[Feature::Avx2, Feature::Fma],
    features: &["avx2", "fma", "f16c"],
    lanes: 8,
    registers: 16,
    template_path: "templates/i8/avx2.rs",
    template: include_str!("../../../../templates/i8/avx2.rs"),
    extends: None,
    gemv_overlay: None,
    table_lookup_only: false,
    group_bytes: 4,
    signed_nibbles: false,
    mmla: false,
    three_bit: true,
    sve_bits: None,
    prefetch: Some(Prefetch {
        ahead: 4096,
        max_bits: 8,
    }),
    x_quad: true,
    scratch_levels: true,
    int_sub_scales: true,
    int_halves_packed: false,
    fence_class: Some("ymm_reg"),
    fence_pointers: false,
    signed_dot_abs: false,
    pair_sums_i16: true,
    unsigned_dot: false,
};

pub const DOTPROD: I8Isa = I8Isa {
    name: "dotprod",
    arch: Some(Arch::Aarch64),
    requires: &[Feature::Neon, Feature::Dotprod],
    features: &["neon", "dotprod"],
    lanes: 4,
    registers: 32,
    template_path: "templates/i8/dotprod.rs",
    template: include_str!("../../../../templates/i8/dotprod.rs"),
    extends: None,
    gemv_overlay: None,
    table_lookup_only: false,
    group_bytes: 4,
    signed_nibbles: true,
    mmla: false,
    three_bit: true,
    sve_bits: None,
    prefetch: None,
    x_quad: false,
    scratch_levels: false,
    int_sub_scales: false,
    int_halves_packed: false,
    fence_class: None,
    fence_pointers: false,
    signed_dot_abs: false,
    pair_sums_i16: false,
    unsigned_dot: false,
};

/// dotprod with smmla: pair layouts (8 bytes of each of two columns per
/// 16-byte vector) and 2x2 matrix tiles; its other settings and primitives
/// are dotprod's.
pub const I8MM: I8Isa = I8Isa {
    name: "i8mm",
    requires: &[Feature::Neon, Feature::Dotprod, Feature::I8mm],
    features: &["neon", "dotprod", "i8mm"],
    lanes: 2,
    template_path: "templates/i8/i8mm.rs",
    template: include_str!("../../../../templates/i8/i8mm.rs"),
    extends: Some(&DOTPROD),
    gemv_overlay: None,
    table_lookup_only: false,
    group_bytes: 8,
    mmla: true,
    ..DOTPROD
};

pub const PORTABLE: I8Isa = I8Isa {
    name: "portable",
    arch: None,
    requires: &[],
    features: &[],
    lanes: 8,
    registers: 16,
    template_path: "templates/i8/portable.rs",
    template: include_str!("../../../../templates/i8/portable.rs"),
    extends: None,
    gemv_overlay: None,
    table_lookup_only: false,
    group_bytes: 4,
    signed_nibbles: false,
    mmla: false,
    three_bit: true,
    sve_bits: None,
    prefetch: None,
    x_quad: false,
    scratch_levels: false,
    int_sub_scales: false,
    int_halves_packed: false,
    fence_class: None,
    fence_pointers: false,
    signed_dot_abs: false,
    pair_sums_i16: false,
    unsigned_dot: false,
};

/// SVE at 256-bit vectors (Neoverse V1): the lane layout with 8 columns per
/// `z` register; micro kernels are whole asm loops ([`crate::family::int8::emit::sve`]).
pub const SVE256: I8Isa = I8Isa {
    name: "sve256",
    arch: Some(Arch::Aarch64),
    requires: &[Feature::Neon, Feature::Sve],
    features: &["neon", "sve"],
    lanes: 8,
    registers: 32,
    template_path: "templates/i8/sve256.rs",
    template: include_str!("../../../../templates/i8/sve256.rs"),
    extends: None,
    gemv_overlay: None,
    table_lookup_only: false,
    group_bytes: 4,
    signed_nibbles: true,
    mmla: false,
    three_bit: false,
    sve_bits: Some(256),
    prefetch: None,
    x_quad: false,
    scratch_levels: false,
    int_sub_scales: false,
    int_halves_packed: false,
    fence_class: None,
    fence_pointers: false,
    signed_dot_abs: false,
    pair_sums_i16: false,
    unsigned_dot: false,
};

/// Best first. `sve256` ranks below `i8mm`: a 256-bit sdot and a 128-bit
/// smmla both do 32 multiply-adds, but cores with 256-bit SVE have half as
/// many SVE pipes as 128-bit NEON ones (Neoverse V1: 2x256 vs 4x128), so
/// the smmla GEMM does at least as much per cycle and reuses each weight
/// vector for two rows. It ranks above `dotprod`: at least the same
/// multiply-adds per cycle with half the instructions and weight loads per
/// column, and one replicated activation load per 16 values (indexed sdot)
/// instead of a broadcast per 4.
pub const I8_FAMILY: &[I8Isa] = &[
    AVX512VBMI, AVX512VNNI, AVXVNNI, AVX2, I8MM, SVE256, DOTPROD, PORTABLE,
];

/// A template file's text (`path` names it in the error).
fn parse_template(path: &str, text: &str) -> Result<syn::File, String> {
    syn::parse_str(text).map_err(|e| format!("template {path} does not parse: {e}"))
}

impl I8Isa {
    /// This ISA's template over those it extends, parsed.
    pub fn template_file(&self) -> Result<syn::File, String> {
        let own = parse_template(self.template_path, self.template)?;
        Ok(match self.extends {
            Some(base) => crate::emit::extend_template(base.template_file()?, own),
            None => own,
        })
    }

    /// The template `op`'s micro kernels unroll: [`Self::template_file`]
    /// under the GEMV overlay where `op` is a GEMV.
    pub fn template_file_for(&self, op: Op) -> Result<syn::File, String> {
        let base = self.template_file()?;
        Ok(match self.overlay(op) {
            Some(o) => crate::emit::extend_template(base, parse_template(o.path, o.text)?),
            None => base,
        })
    }

    /// The overlay `op`'s micro kernels take, if any.
    pub fn overlay(&self, op: Op) -> Option<Overlay> {
        self.gemv_overlay.filter(|_| op == Op::Gemv)
    }

    /// [`Self::template_chain`] with `op`'s overlay on top.
    pub fn template_chain_for(&self, op: Op) -> String {
        match self.overlay(op) {
            Some(o) => format!("{} over {}", o.path, self.template_chain()),
            None => self.template_chain(),
        }
    }

    /// The template's path, with those it extends (`own over base`).
    pub fn template_chain(&self) -> String {
        match self.extends {
            Some(base) => format!("{} over {}", self.template_path, base.template_chain()),
            None => self.template_path.to_string(),
        }
    }

    pub fn by_name(name: &str) -> Option<I8Isa> {
        I8_FAMILY.iter().copied().find(|i| i.name == name)
    }

    pub fn runs_on(&self, t: &TargetDesc) -> bool {
        self.arch.is_none_or(|a| a == t.arch)
            && self.requires.iter().all(|f| t.has(*f))
            && self.sve_bits.is_none_or(|b| t.sve_vector_bits == Some(b))
    }

    /// Position in [`I8_FAMILY`] (lower is better).
    pub fn rank(&self) -> usize {
        I8_FAMILY
            .iter()
            .position(|i| i.name == self.name)
            .unwrap_or(usize::MAX)
    }

    pub fn for_target(t: &TargetDesc) -> Vec<I8Isa> {
        I8_FAMILY.iter().copied().filter(|i| i.runs_on(t)).collect()
    }

    /// Whether this ISA has kernels for `spec`'s weight format, and if not why.
    /// The SVE emitter (whole asm loops) has neither the codebook formats'
    /// `lut`, the 5- and 6-bit unpacks nor the min term: SVE machines run
    /// those on i8mm or dotprod.
    /// (A 256-bit SVE core with i8mm ranks i8mm first anyway, see
    /// [`I8_FAMILY`].)
    pub fn supports(&self, spec: &I8Spec) -> Result<(), String> {
        let spec = &self.reads(spec);
        if self.table_lookup_only && !spec.table_lookup() {
            return Err(format!(
                "int8 ISA {} has kernels only for the table-lookup formats \
                 (codebook and grid formats); {} runs on {}",
                self.name,
                spec.format_tag(),
                self.extends.map_or("the next ISA", |b| b.name)
            ));
        }
        if self.group_bytes == 8 && spec.bits() == 1 {
            return Err(format!(
                "int8 ISA {} has no {} kernels (1-bit levels have no pair layout); \
                 its CPUs run {} on dotprod",
                self.name,
                spec.format_tag(),
                spec.format_tag()
            ));
        }
        if self.sve_bits.is_some() {
            let missing = if spec.codebook() {
                "table lookup"
            } else if spec.mins() {
                "min term"
            } else if spec.scales_per_block() > 1 {
                "half-block fold"
            } else if spec.bits() == 5 {
                "5-bit unpack"
            } else if spec.bits() == 6 {
                "6-bit unpack"
            } else if spec.bits() == 2 {
                "2-bit unpack"
            } else if spec.bits() == 1 {
                "1-bit unpack"
            } else {
                return Ok(());
            };
            return Err(format!(
                "int8 ISA {} has no {} kernels (its asm emitter has no {missing}); \
                 SVE CPUs run {} on i8mm or dotprod",
                self.name,
                spec.format_tag(),
                spec.format_tag()
            ));
        }
        Ok(())
    }

    /// `spec` as this ISA's kernels read it: a 3-bit format at 3 bits on
    /// lane layouts whose template unpacks them, else at 4.
    pub fn reads(&self, spec: &I8Spec) -> I8Spec {
        spec.with_three_bit(self.three_bit && self.group_bytes == 4)
    }

    /// Whether kernels of `spec` here read 4-bit levels as signed nibbles
    /// (`16 q`, no offset to remove).
    pub fn signed_levels(&self, spec: &I8Spec) -> bool {
        self.signed_nibbles && self.reads(spec).bits() == 4 && !spec.codebook()
    }

    /// Whether kernels of `spec` here take dots of the stored, unsigned
    /// levels and remove the format's offset (`offset * sum(x)`, the
    /// activations' `c`) once per block: Q4_0 off the signed-nibble ISAs,
    /// Q5_0 everywhere, signed and codebook levels on the u8-dot ISAs.
    pub fn removes_offset(&self, spec: &I8Spec) -> bool {
        (spec.format.offset() != 0 && !self.signed_levels(spec)) || self.offsets_signed(spec)
    }

    /// Whether kernels of `spec` here read signed levels (8-bit, codebook)
    /// as `level + 128` and take unsigned dots ([`I8Isa::unsigned_dot`]).
    pub fn offsets_signed(&self, spec: &I8Spec) -> bool {
        self.unsigned_dot && spec.format.signed_levels()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;

    fn item(file: &syn::File, name: &str) -> Option<String> {
        file.items.iter().find_map(|i| match i {
            syn::Item::Fn(f) if f.sig.ident == name => Some(f.to_token_stream().to_string()),
            _ => None,
        })
    }

    /// vpermb finds an unmasked index's level in the 16-entry table of its
    /// 128-bit lane at `index & 15`: for codebooks read at 3 bits (whose
    /// `lo3` / `hi3` leave bit 3, a bit of the fourth chunk, in place) the
    /// emitted table must repeat its 8 levels. Checked on the emitted
    /// `CODEBOOK`, whatever CPU runs the test.
    #[test]
    fn three_bit_codebooks_repeat_for_unmasked_lookups() {
        use crate::family::int8::emit::ops_items;
        let mut three = 0;
        for f in crate::format::table::FORMATS
            .iter()
            .filter(|f| f.int8.is_some())
        {
            let spec = I8Spec::from_tag(Op::Gemv, f.tag).expect("an int8 format");
            if !spec.codebook() {
                continue;
            }
            let items = ops_items(&spec, &AVX512VBMI).expect("vbmi primitives");
            let table = items
                .iter()
                .find_map(|i| match i {
                    syn::Item::Const(c) if c.ident == "CODEBOOK" => {
                        Some(c.expr.to_token_stream().to_string())
                    }
                    _ => None,
                })
                .expect("a CODEBOOK");
            let vals: Vec<i32> = table
                .trim_matches(|c| c == '[' || c == ']' || c == ' ')
                .split(',')
                .filter(|v| !v.trim().is_empty())
                .map(|v| v.replace(' ', "").parse().expect("an integer"))
                .collect();
            assert_eq!(vals.len(), 16, "{}: {table}", f.tag);
            if AVX512VBMI.reads(&spec).bits() == 3 {
                three += 1;
                for (i, v) in vals.iter().enumerate() {
                    assert_eq!(*v, vals[i & 7], "{} entry {i}: {table}", f.tag);
                }
            }
        }
        assert!(three >= 5, "the IQ1 / IQ2 lattice formats: {three}");
    }

    /// AVX-512 VBMI has kernels for the table-lookup formats only, with
    /// AVX-512 VNNI's primitives but its own unmasked index splits (4- and
    /// 3-bit) and vpermb lookups; every other format goes to AVX-512 VNNI.
    #[test]
    fn avx512_vbmi_takes_the_table_lookup_formats_only() {
        let vbmi = AVX512VBMI.template_file().expect("parses");
        assert!(item(&vbmi, "lut").expect("lut").contains("permutexvar"));
        assert!(item(&vbmi, "grid_lut")
            .expect("grid_lut")
            .contains("permutexvar"));
        for (lo, hi) in [("idx_lo", "idx_hi"), ("lo3", "hi3")] {
            assert!(item(&vbmi, lo).expect(lo).ends_with("{ w }"), "{lo}");
            let hi = item(&vbmi, hi).expect(hi);
            assert!(
                hi.contains("srli_epi16 :: < 4 >") && !hi.contains("_and_"),
                "{hi}"
            );
        }
        for lut in ["lut", "grid_lut"] {
            let f = item(&vbmi, lut).expect(lut);
            assert!(
                f.contains("broadcast_i32x4") && f.contains("permutexvar_epi8"),
                "{f}"
            );
        }
        assert!(item(&vbmi, "nib_lo").is_some(), "the base's primitives");
        let mut looked_up = Vec::new();
        for f in crate::format::table::FORMATS
            .iter()
            .filter(|f| f.int8.is_some())
        {
            let spec = I8Spec::from_tag(Op::Gemv, f.tag).expect("an int8 format");
            let ok = AVX512VBMI.supports(&spec).is_ok();
            assert_eq!(ok, spec.table_lookup(), "{}", f.tag);
            if ok {
                looked_up.push(f.tag);
            } else {
                let e = AVX512VBMI.supports(&spec).unwrap_err();
                assert!(e.contains(f.tag) && e.contains("avx512vnni"), "{e}");
            }
        }
        for tag in [
            "iq4_nl", "iq4_xs", "mxfp4", "iq3_s", "iq2_xxs", "iq1_s", "k2_bb", "k1",
        ] {
            assert!(looked_up.contains(&tag), "{tag}: {looked_up:?}");
        }
        for tag in ["q4_0", "q4_k", "q3_k", "tq2_0"] {
            assert!(!looked_up.contains(&tag), "{tag}");
        }
    }

    /// AVX-VNNI's kernels get AVX2's primitives with its own dot; i8mm's
    /// get dotprod's sdot with their own pair-layout loads.
    #[test]
    fn derived_templates_take_the_base_and_their_own_dots() {
        let vnni = AVXVNNI.template_file().expect("parses");
        assert!(item(&vnni, "dot_u").expect("dot_u").contains("dpbusd"));
        assert!(item(&vnni, "nib_lo").is_some() && item(&vnni, "xquad").is_some());
        let avx2 = AVX2.template_file().expect("parses");
        assert!(!item(&avx2, "dot_u").expect("dot_u").contains("dpbusd"));
        assert!(item(&avx2, "flip").is_none());
        let mm = I8MM.template_file().expect("parses");
        assert!(item(&mm, "sdot").is_some() && item(&mm, "mmla").is_some());
        assert_eq!(
            AVXVNNI.template_chain(),
            "templates/i8/avxvnni.rs over templates/i8/avx2.rs"
        );
        for isa in I8_FAMILY {
            isa.template_file().expect("every template parses");
            isa.template_file_for(Op::Gemv)
                .expect("every GEMV overlay parses");
        }
    }

    /// AVX-512's GEMVs dot activation bytes straight from memory, its GEMMs
    /// from broadcast registers. Every primitive the overlay defines but
    /// `xvec` replaces one of the template's: a misspelt name would add a
    /// primitive no kernel calls and leave the GEMVs as they were.
    #[test]
    fn the_gemv_overlay_replaces_the_dots_of_gemvs_only() {
        let overlay = AVX512VNNI.gemv_overlay.expect("AVX-512 has one");
        let own: syn::File = syn::parse_str(overlay.text).expect("parses");
        let base = AVX512VNNI.template_file().expect("parses");
        for it in &own.items {
            if let syn::Item::Fn(f) = it {
                let name = f.sig.ident.to_string();
                assert!(
                    name == "xvec" || item(&base, &name).is_some(),
                    "{name} is not in {}",
                    AVX512VNNI.template_path
                );
            }
        }
        let gemv = AVX512VNNI.template_file_for(Op::Gemv).expect("parses");
        let gemm = AVX512VNNI
            .template_file_for(Op::Gemm { m: 32 })
            .expect("parses");
        assert!(item(&gemv, "dot_u").expect("dot_u").contains("1to16"));
        assert!(!item(&gemm, "dot_u").expect("dot_u").contains("1to16"));
        assert!(item(&gemm, "bcast4").expect("bcast4").contains("set1"));
        assert_eq!(
            AVX512VNNI.template_chain_for(Op::Gemv),
            "templates/i8/avx512vnni_xmem.rs over templates/i8/avx512vnni.rs"
        );
        assert_eq!(
            AVX512VNNI.template_chain_for(Op::Gemm { m: 32 }),
            AVX512VNNI.template_path
        );
        // AVX-512 VBMI's GEMVs, over AVX-512 VNNI's template, take it too.
        for isa in I8_FAMILY {
            let avx512 = [AVX512VNNI.name, AVX512VBMI.name].contains(&isa.name);
            assert_eq!(isa.overlay(Op::Gemv).is_some(), avx512, "{}", isa.name);
        }
    }
}
