//! Activation quantizers of the int8 family, per x86 ISA level.
//!
//! Every int8 call first quantizes its activations (`kgen::layout::act`).
//! Compiled for baseline x86-64 that loop stays scalar and calls `roundf`
//! per value, which a default build would pay on every call (a fifth of a
//! 4096-wide Q4_0 GEMV). So, as with the kernels, the runtime carries a
//! vector block quantizer under a thin `#[target_feature]` wrapper around
//! the shared layout code (`quantize_with`, `#[inline(always)]`), and picks
//! it with the kernel: only when the selected kernel's own features include
//! the quantizer's, so it never runs an instruction the CPU lacks. Every
//! variant gives the scalar reference's bytes, which a test checks.
//! (aarch64's baseline already has NEON and a round-half-away instruction.)

use crate::kernel::KernelEntry;
use kgen::layout::act::{quantize_into, ActFormat, QuantizedActivations};

/// `quantize_into` compiled for one ISA level.
type QuantizeFn = unsafe fn(&[f32], usize, usize, usize, ActFormat, &mut QuantizedActivations);

/// One compiled quantizer and the CPU features it was compiled for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ActQuantizer {
    pub name: &'static str,
    features: &'static [&'static str],
    run: QuantizeFn,
}

impl ActQuantizer {
    /// Quantizes `m` rows of `x` (`m x k`) padded to `k_pad` into `out`.
    pub(crate) fn quantize(
        &self,
        x: &[f32],
        m: usize,
        k: usize,
        k_pad: usize,
        fmt: ActFormat,
        out: &mut QuantizedActivations,
    ) {
        assert!(
            self.runnable(),
            "quantizer {} needs {:?}",
            self.name,
            self.features
        );
        // SAFETY: this CPU has every feature the function was compiled for.
        unsafe { (self.run)(x, m, k, k_pad, fmt, out) }
    }

    /// Whether this CPU has every feature the quantizer was compiled for.
    pub(crate) fn runnable(&self) -> bool {
        self.features.iter().all(|f| cpu_has(f))
    }
}

/// Run-time detection of the features the quantizers are compiled for.
fn cpu_has(feature: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match feature {
            "avx2" => std::arch::is_x86_feature_detected!("avx2"),
            "fma" => std::arch::is_x86_feature_detected!("fma"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = feature;
        false
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2(
    x: &[f32],
    m: usize,
    k: usize,
    k_pad: usize,
    fmt: ActFormat,
    out: &mut QuantizedActivations,
) {
    // SAFETY (of the block calls): AVX2 is enabled on this function.
    kgen::layout::act::quantize_with(
        x,
        m,
        k,
        k_pad,
        fmt,
        out,
        |b| unsafe { avx2_amax(b) },
        |b, id| unsafe { avx2_levels(b, id) },
    )
}

/// `kgen::layout::act::block_amax` in AVX2, with the same result bit for
/// bit: the max of the absolute values skips NaNs as `f32::max` does (the
/// running max is never NaN and `vmaxps` returns its second operand when the
/// first is).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn avx2_amax(buf: &[f32; 32]) -> f32 {
    use core::arch::x86_64::*;
    let p = buf.as_ptr();
    let sign = _mm256_set1_ps(-0.0);
    let mut mx = _mm256_setzero_ps();
    for i in 0..4 {
        mx = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(p.add(8 * i))), mx);
    }
    let m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps::<1>(mx));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let m1 = _mm_max_ss(m2, _mm_shuffle_ps::<1>(m2, m2));
    _mm_cvtss_f32(m1)
}

/// `kgen::layout::act::quantize_levels` in AVX2, with the same result bit
/// for bit: `round` (half away from zero) is `trunc(y + copysign(0.5 -
/// 2^-25, y))`, exact for |y| < 2^23, clamped to +-127 before the
/// truncation so that an infinite `y` saturates as the scalar cast does;
/// NaN levels become 0.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn avx2_levels(buf: &[f32; 32], id: f32) -> ([i8; 32], i32) {
    use core::arch::x86_64::*;
    let p = buf.as_ptr();
    let sign = _mm256_set1_ps(-0.0);
    let vid = _mm256_set1_ps(id);
    let half = _mm256_set1_ps(0.499_999_97);
    let (hi, lo) = (_mm256_set1_ps(127.0), _mm256_set1_ps(-127.0));
    let mut q = [_mm256_setzero_si256(); 4];
    for (i, q) in q.iter_mut().enumerate() {
        let y = _mm256_mul_ps(_mm256_loadu_ps(p.add(8 * i)), vid);
        let y = _mm256_and_ps(y, _mm256_cmp_ps::<_CMP_ORD_Q>(y, y));
        let r = _mm256_add_ps(y, _mm256_or_ps(_mm256_and_ps(y, sign), half));
        *q = _mm256_cvttps_epi32(_mm256_max_ps(_mm256_min_ps(r, hi), lo));
    }
    let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    let s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
    let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<1>(s2));
    // packs work per 128-bit lane: dword i of lane 0 holds values 4i..4i+4
    // of vector i, lane 1 the next four; the permute restores value order.
    let b = _mm256_packs_epi16(
        _mm256_packs_epi32(q[0], q[1]),
        _mm256_packs_epi32(q[2], q[3]),
    );
    let b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    let mut out = [0i8; 32];
    _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, b);
    (out, _mm_cvtsi128_si32(s1))
}

/// Every quantizer, the widest first; the last one runs anywhere.
pub(crate) const QUANTIZERS: &[ActQuantizer] = &[
    #[cfg(target_arch = "x86_64")]
    ActQuantizer {
        name: "avx2",
        features: &["avx2", "fma"],
        run: avx2,
    },
    ActQuantizer {
        name: "baseline",
        features: &[],
        run: quantize_into,
    },
];

/// The widest quantizer whose features `kernel` requires too (an AVX-512
/// kernel implies AVX2 and FMA).
pub(crate) fn for_kernel(kernel: &KernelEntry) -> ActQuantizer {
    let has = |f: &str| kernel.features.contains(&f) || kernel.features.contains(&"avx512f");
    *QUANTIZERS
        .iter()
        .find(|q| q.features.iter().all(|f| has(f)) && q.runnable())
        .expect("the baseline quantizer needs no feature")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kgen::format::ggml::GgmlType;
    use kgen::format::rng::Rng;
    use kgen::layout::act::quantize_activations_as;

    /// Every quantizer this CPU runs gives the baseline's bytes, over ragged
    /// K, both row orders, odd row counts and non-finite values.
    #[test]
    fn every_runnable_quantizer_matches_the_baseline() {
        let mut ran = Vec::new();
        for q in QUANTIZERS.iter().filter(|q| q.runnable()) {
            ran.push(q.name);
            for (seed, &(m, k)) in [
                (1usize, 1usize),
                (1, 31),
                (2, 64),
                (3, 70),
                (5, 4096),
                (4, 33),
            ]
            .iter()
            .enumerate()
            {
                let k_pad = k.div_ceil(32) * 32;
                let mut x = Rng::new(seed as u64 + 7).vec_f32(m * k);
                // Scales from tiny to huge, exact halves, and non-finite values.
                for (i, v) in x.iter_mut().enumerate() {
                    match i % 97 {
                        3 => *v *= 1e-30,
                        5 => *v *= 1e30,
                        11 => *v = (i % 7) as f32 - 3.5,
                        _ => {}
                    }
                }
                if m * k > 40 {
                    x[17] = f32::NAN;
                    x[40] = f32::INFINITY;
                }
                if k >= 128 {
                    // A block of subnormals (its scale's inverse overflows)
                    // and one with amax 127, where the levels are the
                    // values: exact halves and their neighbours.
                    for (i, v) in x[64..96].iter_mut().enumerate() {
                        *v = f32::from_bits(i as u32 * 3) * if i % 2 == 0 { 1.0 } else { -1.0 };
                    }
                    let below = 0.5f32.next_down();
                    let halves = [127.0, -126.5, 126.5, 0.5, -0.5, 1.5, -2.5, below, -below];
                    for (i, v) in x[96..128].iter_mut().enumerate() {
                        *v = match halves.get(i) {
                            Some(&h) => h,
                            None => (i as f32 - 16.0) + 0.5f32.next_up() * (i % 3) as f32,
                        };
                    }
                }
                for row_pairs in [false, true] {
                    for format in [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K] {
                        let fmt = ActFormat {
                            row_pairs,
                            scale: 0.0625,
                            ..ActFormat::plain(format)
                        };
                        let want = quantize_activations_as(&x, m, k, k_pad, fmt);
                        let mut got = QuantizedActivations::default();
                        q.quantize(&x, m, k, k_pad, fmt, &mut got);
                        assert_eq!(got.q, want.q, "{} m={m} k={k}", q.name);
                        assert_eq!(got.c, want.c, "{} m={m} k={k}", q.name);
                        let bits = |d: &[f32]| d.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&got.d), bits(&want.d), "{} m={m} k={k}", q.name);
                    }
                }
            }
        }
        assert!(ran.contains(&"baseline"));
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            assert!(ran.contains(&"avx2"), "ran {ran:?}");
        }
        eprintln!("quantizers checked: {ran:?}");
    }

    /// The buffers are resized, not cleared, between calls: a call into
    /// buffers a larger call left behind gives a fresh call's bytes,
    /// including the zero row an odd last row is paired with.
    #[test]
    fn reused_buffers_give_a_fresh_calls_bytes() {
        let x = Rng::new(11).vec_f32(6 * 200);
        for q in QUANTIZERS.iter().filter(|q| q.runnable()) {
            for row_pairs in [false, true] {
                for format in [GgmlType::Q8_0, GgmlType::Q4_K] {
                    let fmt = ActFormat {
                        row_pairs,
                        ..ActFormat::plain(format)
                    };
                    let mut out = QuantizedActivations::default();
                    // 6 x 200 (k_pad 224), then 3 x 70 (k_pad 96) into the
                    // same buffers: stale levels sit where row 3 pairs.
                    q.quantize(&x, 6, 200, 224, fmt, &mut out);
                    q.quantize(&x[..210], 3, 70, 96, fmt, &mut out);
                    let want = quantize_activations_as(&x[..210], 3, 70, 96, fmt);
                    assert_eq!(out.q, want.q, "{} {row_pairs}", q.name);
                    assert_eq!(out.c, want.c, "{} {row_pairs}", q.name);
                    let bits = |d: &[f32]| d.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&out.d), bits(&want.d), "{} {row_pairs}", q.name);
                }
            }
        }
    }
}
