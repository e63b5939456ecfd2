//! Intrinsic and mnemonic classes: which calls and asm lines are loads,
//! stores, MACs, free reinterprets or plain ops.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arch {
    Arm,
    X86,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Free,
    Load,
    Store,
    Const,
    Splat,
    Mac {
        dot: bool,
    },
    /// A float multiply (not accumulating): on cores whose dots issue on
    /// the FMA pipes it takes a dot slot, as an FMA does.
    FMul,
    /// A byte shuffle (`vpshufb`, `vpermb`, `tbl`): the table lookups of
    /// the codebook and grid formats, and any other byte shuffle (AVX2's
    /// K-quant scale shuffles), counted apart for `core.shuffle_slots`.
    Shuffle,
    Op,
}

pub(crate) fn is_x86_name(n: &str) -> bool {
    n.starts_with('_')
}

pub(crate) fn is_arm_name(n: &str) -> bool {
    n.starts_with('v') && n.contains('_')
}

pub(crate) fn classify_intrinsic(name: &str) -> Class {
    let n = name.to_ascii_lowercase();
    let has = |s: &str| n.contains(s);
    let starts = |s: &str| n.starts_with(s);
    if starts("vreinterpret")
        || starts("vget_low")
        || has("_cast")
        || has("zext")
        || has("undefined")
    {
        return Class::Free;
    }
    if starts("vld")
        || has("_load")
        || has("lddqu")
        || has("_broadcast_s")
        || has("_broadcast_p")
        || has("gather")
        || has("prefetch")
    {
        return Class::Load;
    }
    if starts("vst") || has("store") || has("_stream") || has("scatter") || has("maskmov") {
        return Class::Store;
    }
    if has("setzero") {
        return Class::Const;
    }
    if (starts("vdup") && has("_n_"))
        || starts("vmov_n")
        || starts("vmovq_n")
        || has("set1")
        || has("_set_")
        || has("_setr_")
        || has("cvtsi32_si")
        || has("cvtsi64_si")
    {
        return Class::Splat;
    }
    const X86_DOT: &[&str] = &[
        "dpbusd",
        "dpbssd",
        "dpbsud",
        "dpbuud",
        "dpwssd",
        "dpwsud",
        "dpwusd",
        "dpwuud",
        "maddubs",
        "madd_epi16",
        "madd52",
        "dpbf16",
        "dpph",
    ];
    if X86_DOT.iter().any(|d| has(d)) || (starts("v") && (has("dot") || has("mmla"))) {
        return Class::Mac { dot: true };
    }
    const ARM_FMA: &[&str] = &[
        "vfma", "vfms", "vfmlal", "vfmlsl", "vmla", "vmls", "vqdmla", "vqdmls", "vqrdmla",
        "vqrdmls", "vbfmlal",
    ];
    if ["fmadd", "fmsub", "fnmadd", "fnmsub"]
        .iter()
        .any(|d| has(d))
        || ARM_FMA.iter().any(|p| starts(p))
    {
        return Class::Mac { dot: false };
    }
    let sve_bytes = has("_s8") || has("_u8");
    if has("shuffle_epi8")
        || has("permutexvar_epi8")
        || has("permutex2var_epi8")
        || starts("vqtbl")
        || starts("vqtbx")
        || starts("vtbl")
        || starts("vtbx")
        || ((starts("svtbl") || starts("svtbx")) && sve_bytes)
    {
        return Class::Shuffle;
    }
    if has("_mul_p") || has("_mul_round_p") || ((starts("vmul") || starts("svmul")) && has("_f")) {
        return Class::FMul;
    }
    Class::Op
}

/// A load intrinsic that takes a load port but not a full-width load path:
/// one that broadcasts what it reads (`_mm256_broadcast_ss`,
/// `vld1q_dup_f32`), or a prefetch, which moves nothing into a register.
pub(crate) fn is_broadcast_load(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("_broadcast_s")
        || (n.starts_with("vld") && n.contains("_dup"))
        || n.contains("prefetch")
}

/// One broadcast load.
pub(crate) fn broadcast() -> Counts {
    Counts {
        loads: 1,
        bcast: 1,
        ..Counts::default()
    }
}

pub(crate) fn one(c: Class) -> Counts {
    match c {
        Class::Load => Counts {
            loads: 1,
            ..Counts::default()
        },
        Class::Store => Counts {
            stores: 1,
            ..Counts::default()
        },
        Class::Mac { dot } => Counts {
            ops: 1,
            mac: 1,
            dot: dot as u64,
            fmul: !dot as u64,
            ..Counts::default()
        },
        Class::FMul => Counts {
            ops: 1,
            fmul: 1,
            ..Counts::default()
        },
        Class::Shuffle => Counts {
            ops: 1,
            shuf: 1,
            ..Counts::default()
        },
        Class::Free => Counts::default(),
        Class::Const | Class::Splat | Class::Op => Counts {
            ops: 1,
            ..Counts::default()
        },
    }
}

/// Control flow is loop overhead, not work on data.
pub(crate) fn is_branch(m: &str) -> bool {
    m == "b"
        || m.starts_with("b.")
        || m.starts_with('j')
        || matches!(
            m,
            "bl" | "br" | "blr" | "ret" | "cbz" | "cbnz" | "tbz" | "tbnz" | "call" | "loop"
        )
}

/// SIMD/FP, SVE predicate and AVX-512 mask registers named literally
/// (`z3`, `v0`, `q1`, `p0`, `ymm2`, `k1`); general registers are not.
pub(crate) fn is_vector_register(t: &str) -> bool {
    let t = t.to_ascii_lowercase();
    let digits = |s: &str| !s.is_empty() && s.len() <= 2 && s.chars().all(|c| c.is_ascii_digit());
    let mut chars = t.chars();
    let first = chars.next().unwrap_or(' ');
    ("vzpqdshb".contains(first) && digits(chars.as_str()))
        || ["xmm", "ymm", "zmm"]
            .iter()
            .any(|p| t.strip_prefix(p).is_some_and(digits))
        || (first == 'k' && digits(chars.as_str()))
}

/// `ymmword ptr [{p} + 32]`, but not an Arm lane index (`z0.b[1]`); Arm
/// memory operands only occur in loads and stores, classified by mnemonic.
pub(crate) fn is_memory_operand(op: &str) -> bool {
    op.split('[').skip(1).any(|inside| {
        let inner = inside.split(']').next().unwrap_or("");
        !inner.trim().chars().all(|c| c.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Float multiplies and FMAs are counted apart from dots, for cores
    /// whose dots share the FMA pipes; integer multiplies are not.
    #[test]
    fn float_multiplies_are_counted_apart() {
        let c = |n: &str| one(classify_intrinsic(n));
        assert_eq!((c("_mm512_mul_ps").ops, c("_mm512_mul_ps").fmul), (1, 1));
        assert_eq!(c("vmulq_f32").fmul, 1);
        let fma = c("_mm512_fmadd_ps");
        assert_eq!((fma.mac, fma.dot, fma.fmul), (1, 0, 1));
        let dot = c("_mm512_dpbusd_epi32");
        assert_eq!((dot.mac, dot.dot, dot.fmul), (1, 1, 0));
        assert_eq!(c("_mm512_mullo_epi32").fmul, 0);
        assert_eq!(c("_mm512_cvtepi32_ps").fmul, 0);
    }

    /// Table lookups are counted apart, as ops that may take more than one
    /// issue slot; other shuffles and permutes are plain ops.
    #[test]
    fn byte_shuffles_are_counted_apart() {
        let c = |n: &str| one(classify_intrinsic(n));
        for n in [
            "_mm512_shuffle_epi8",
            "_mm256_shuffle_epi8",
            "_mm512_permutexvar_epi8",
            "vqtbl1q_s8",
            "vqtbx1q_u8",
            "svtbl_s8",
        ] {
            assert_eq!((c(n).ops, c(n).shuf), (1, 1), "{n}");
        }
        for n in [
            "_mm512_permutexvar_epi32",
            "_mm256_shuffle_epi32",
            "_mm512_unpacklo_epi8",
            "vzip1q_s8",
            "svtbl_f32",
        ] {
            assert_eq!((c(n).ops, c(n).shuf), (1, 0), "{n}");
        }
    }

    #[test]
    fn prefetches_take_a_load_port_but_not_a_full_width_load() {
        for name in ["_mm_prefetch", "__prefetch"] {
            assert_eq!(classify_intrinsic(name), Class::Load, "{name}");
            assert!(is_broadcast_load(name), "{name}");
        }
        assert!(!is_broadcast_load("_mm512_loadu_si512"));
        assert!(is_broadcast_load("_mm256_broadcast_ss"));
    }
}
