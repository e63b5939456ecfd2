//! The int8 formats whose blocks carry more than a scale: mins (Q4_1, Q5_1,
//! Q4_K, Q5_K, Q2_K with one per 16 values) and 256-value super-blocks
//! (the K-quants with sub-block scales, and the ternary TQ1_0 / TQ2_0 with
//! an offset of 1), every one the format table lists, against the exact oracle on
//! every ISA this CPU runs, on raw blocks with every level and on quantized
//! weights; each ISA also forced through `KGEN_FORCE_ISA`.

mod common;

use kgen::format::ggml::{GgmlMatrix, GgmlType};
use kgen::format::rng::Rng;
use kgen_runtime::{Matrix, Op, Pool, Registry, WeightFormat};

/// The formats this file covers: table rows with mins or super-blocks that
/// this build has kernels for.
fn formats() -> Vec<GgmlType> {
    kgen::format::int8_formats()
        .filter(|f| f.int8.is_some_and(|r| r.mins) || f.block > 32)
        .map(GgmlType)
        .filter(|t| common::i8_format_built(t.tag()))
        .collect()
}

/// The ISAs whose kernels take one column per i32 lane (not the pair
/// layouts of i8mm or the SVE asm kernels).
const LANE_ISAS: [&str; 6] = [
    "avx2",
    "avxvnni",
    "avx512vnni",
    "avx512vbmi",
    "dotprod",
    "portable",
];

fn isas(reg: &Registry, t: GgmlType) -> Vec<&'static str> {
    reg.runnable(WeightFormat::Ggml(t), Op::Gemv)
        .iter()
        .map(|e| e.isa)
        .collect()
}

/// Every such format on every ISA, over K (one block to many, several
/// scratch fills of 32 blocks), N (ragged against every tile width), rows 1..=9 and
/// larger, one and three threads.
#[test]
fn every_isa_over_k_n_and_rows() {
    let reg = Registry::builtin();
    let (p1, p3) = (Pool::new(1), Pool::new(3));
    let rows: Vec<usize> = (1..=9).chain([12, 17]).collect();
    let mut runs = std::collections::BTreeMap::new();
    for t in formats() {
        let bv = t.block_values();
        let ks: Vec<usize> = if bv == 32 {
            vec![32, 64, 96, 224, 1056]
        } else {
            vec![bv, 2 * bv, 5 * bv]
        };
        let isas = isas(reg, t);
        assert_eq!(*isas.last().unwrap(), "portable", "{t}");
        for (ki, &k) in ks.iter().enumerate() {
            for (ni, &n) in [1usize, 3, 7, 8, 9, 16, 17, 33, 65, 130].iter().enumerate() {
                let seed = (ki * 100 + ni) as u64;
                let w = if ni % 2 == 0 {
                    common::raw_blocks(t, k, n, seed)
                } else {
                    let wf = Rng::new(seed).vec_f32(k * n);
                    GgmlMatrix::quantize(&wf, k, n, t)
                };
                for isa in &isas {
                    let qm = Matrix::from_ggml_with(&reg.with_isa(Some(isa)), &w).unwrap();
                    assert_eq!((qm.gemv_kernel().isa, qm.gemm_kernel().isa), (*isa, *isa));
                    assert_eq!(qm.gemv_kernel().format, t.tag());
                    for &m in rows.iter().filter(|&&m| k * n < 20_000 || m % 4 == 1) {
                        let x = Rng::new(seed * 31 + m as u64).vec_f32(m * k);
                        let mut y = vec![f32::NAN; m * n];
                        let pool = if m % 2 == 0 { &p3 } else { &p1 };
                        qm.gemm_on(pool, &x, m, &mut y).unwrap();
                        common::check_kernels(&qm, &w, &x, k, m, &y);
                        *runs.entry(format!("{t} {isa}")).or_insert(0) += 1;
                    }
                }
            }
        }
    }
    eprintln!("oracle runs per format and ISA: {runs:?}");
}

/// An infinity in the activations gives an infinite output where its
/// weight is not zero and NaN where it is (`inf * 0`), or NaN where a
/// scale and a min term meet as `inf - inf`; a NaN makes its row NaN;
/// rows without either stay finite. Every such format on every ISA.
#[test]
fn non_finite_activations_propagate() {
    let reg = Registry::builtin();
    for t in formats() {
        let (k, n, at) = (2 * t.block_values(), 24, 40);
        let w = GgmlMatrix::quantize(&Rng::new(31).vec_f32(k * n), k, n, t);
        for isa in isas(reg, t) {
            let qm = Matrix::from_ggml_with(&reg.with_isa(Some(isa)), &w).unwrap();
            let mut unit = vec![0.0; k];
            unit[at] = 1.0;
            let mut w_at = vec![0.0; n];
            qm.gemv(&unit, &mut w_at).unwrap();
            let mut x = Rng::new(9).vec_f32(3 * k);
            x[at] = f32::INFINITY;
            x[k + 7] = f32::NAN;
            let mut y = vec![0.0; 3 * n];
            qm.gemm(&x, 3, &mut y).unwrap();
            for (j, (&y0, &wj)) in y.iter().zip(&w_at).enumerate() {
                let what = format!("{t} {isa} col {j}: {y0}, weight {wj}");
                if wj == 0.0 {
                    assert!(y0.is_nan(), "{what}");
                } else {
                    assert!(y0.is_nan() || y0 == f32::INFINITY.copysign(wj), "{what}");
                }
            }
            assert!(y[n..2 * n].iter().all(|v| v.is_nan()), "{t} {isa} NaN row");
            assert!(
                y[2 * n..].iter().all(|v| v.is_finite()),
                "{t} {isa} finite row"
            );
        }
    }
}

/// Q2_K's half dots at their extremes: the all-0xFF row (levels 3, scale
/// and min levels 15) against activations of full magnitude and opposite
/// sign in the two halves of each block, both ways round, over several
/// super-blocks. AVX-512 VNNI packs a block's two half dots into one i32
/// lane (`int_halves_packed`), so this is where a borrow between them
/// would show.
#[test]
fn q2_k_half_dots_at_their_extremes() {
    let (k, n) = (4 * 256, 70);
    let w = common::raw_blocks(GgmlType::Q2_K, k, n, 9);
    let qm = Matrix::from_ggml(&w).unwrap();
    for m in [1, 4, 33] {
        for sign in [1.0f32, -1.0] {
            let x: Vec<f32> = (0..m * k)
                .map(|i| if (i % k) % 32 < 16 { sign } else { -sign })
                .collect();
            let mut y = vec![f32::NAN; m * n];
            qm.gemm(&x, m, &mut y).unwrap();
            let what = format!(
                "q2_k extremes {} rows {m} sign {sign}",
                qm.gemm_kernel().name
            );
            let int = common::int_scales_of(qm.gemm_kernel());
            common::check_i8_with(&w, &x, k, m, &y, &what, int);
        }
    }
}

/// The long integer sums at their extremes: raw blocks whose second
/// column is all 0xFF bytes (TQ2_0: every level 3; Q4_K / Q5_K: every level
/// 15 / 31 under 6-bit scale and min codes of 63) against activations all
/// of full magnitude and one sign, over several super-blocks, on every ISA
/// this CPU runs. The AVX2 kernels keep four blocks of ternary i16 pair
/// sums before they widen them (at most 24384 here; eight would wrap), the
/// AVX2 TQ GEMVs two blocks of their odd bit pairs' `4 q` sums before they
/// join those (at most 24384 at TQ2_0's level 3; three would wrap), and
/// widen a Q4_K block's i16 pair sums (at most 30480) by its scale code
/// into the super-block's i32 sums: this is where a wrap would show.
#[test]
fn long_integer_sums_at_their_extremes() {
    let reg = Registry::builtin();
    for t in [
        GgmlType::TQ2_0,
        GgmlType::TQ1_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
    ] {
        if !common::i8_format_built(t.tag()) {
            continue;
        }
        let (k, n) = (4 * 256, 40);
        let w = common::raw_blocks(t, k, n, 10);
        for isa in isas(reg, t) {
            let qm = Matrix::from_ggml_with(&reg.with_isa(Some(isa)), &w).unwrap();
            for m in [1, 4, 33] {
                for sign in [1.0f32, -1.0] {
                    let x = vec![sign; m * k];
                    let mut y = vec![f32::NAN; m * n];
                    qm.gemm(&x, m, &mut y).unwrap();
                    let what = format!("{t} extremes {isa} rows {m} sign {sign}");
                    common::check_kernels(&qm, &w, &x, k, m, &y);
                    assert!(y.iter().all(|v| v.is_finite()), "{what}");
                }
            }
        }
    }
}

/// Quantized weights: the kernels' result is close to `x W` with the
/// dequantized weights (activation rounding only).
#[test]
fn close_to_the_dequantized_product() {
    for t in formats() {
        let (k, n, m) = (1024, 72, 3);
        let w = GgmlMatrix::quantize(&Rng::new(21).vec_f32(k * n), k, n, t);
        let qm = Matrix::from_ggml(&w).unwrap();
        let deq = w.dequantize();
        let x = Rng::new(22).vec_f32(m * k);
        let mut y = vec![0f32; m * n];
        qm.gemm(&x, m, &mut y).unwrap();
        for r in 0..m {
            for j in 0..n {
                let exact: f64 = (0..k)
                    .map(|i| x[r * k + i] as f64 * deq[i * n + j] as f64)
                    .sum();
                let mag: f64 = (0..k)
                    .map(|i| (x[r * k + i] as f64 * deq[i * n + j] as f64).abs())
                    .sum();
                assert!(
                    (y[r * n + j] as f64 - exact).abs() <= 0.02 * mag,
                    "{t} row {r} col {j}: {} vs {exact}",
                    y[r * n + j]
                );
            }
        }
    }
}

/// `KGEN_FORCE_ISA` picks each kernel this CPU runs for every such format:
/// this test runs itself once per ISA in a child process with the variable
/// set, where `Matrix::from_ggml` must select that ISA and match the oracle.
#[test]
fn kgen_force_isa_selects_each_isa() {
    if let Ok(isa) = std::env::var(kgen_runtime::FORCE_ISA_ENV) {
        let reg = Registry::builtin();
        for t in formats()
            .into_iter()
            .filter(|&t| isas(reg, t).contains(&&*isa))
        {
            // Two blocks of 160 or more values: a ragged tile of 32-value blocks.
            let k = 320usize.next_multiple_of(t.block_values());
            let w = common::raw_blocks(t, k, 70, 5);
            let qm = Matrix::from_ggml(&w).unwrap();
            assert_eq!((qm.gemv_kernel().isa, qm.gemm_kernel().isa), (&*isa, &*isa));
            for m in [1, 4, 9] {
                let x = Rng::new(m as u64).vec_f32(m * k);
                let mut y = vec![f32::NAN; m * 70];
                qm.gemm(&x, m, &mut y).unwrap();
                let what = format!("{t} {isa} rows {m}");
                let int = common::int_scales_of(qm.gemm_kernel());
                common::check_i8_with(&w, &x, k, m, &y, &what, int);
            }
            println!("forced {isa} {t}: ok");
        }
        return;
    }
    let reg = Registry::builtin();
    let formats: Vec<_> = formats().into_iter().map(|t| (t, isas(reg, t))).collect();
    common::assert_each_isa_forced("kgen_force_isa_selects_each_isa", &formats);
}

/// 4-bit GPTQ on the int8 family (kgen's `q4_0_g128` kernels for groups
/// of 128 and per column, zero points as group terms; Q4_1's for groups of
/// 32 and 64, zero points as mins) and 8-bit (Q8_0's), with and without
/// act-order, on every ISA with those kernels: within the int8
/// activations' rounding of the f64 product, and the f32 family (the
/// default) still picked unless asked.
#[test]
fn gptq_4_and_8_bit_run_on_the_int8_family() {
    for bits in [4, 8] {
        gptq_on_the_int8_family(bits);
    }
}

/// GPTQ of `bits` on the int8 family's kernels, every ISA, groups and
/// act-order, against the f64 product.
fn gptq_on_the_int8_family(bits: u32) {
    use kgen::format::gptq::random_gptq;
    use kgen_runtime::{Family, GptqLayer, Group};
    let reg = Registry::builtin();
    let int8 = reg.with_family(Some(Family::Int8));
    for (gi, group) in [
        Group::Size(32),
        Group::Size(64),
        Group::Size(128),
        Group::Column,
    ]
    .into_iter()
    .enumerate()
    {
        let format = kgen_runtime::WeightFormat::gptq(bits, group).unwrap();
        // The int8 kernels dispatch takes: the first the build has.
        let Some(t) = format
            .families()
            .into_iter()
            .filter(|&(family, _)| family == Family::Int8)
            .filter_map(|(_, f)| f.ggml_type())
            .find(|t| common::i8_format_built(t.tag()))
        else {
            continue;
        };
        let expected = match (bits, group) {
            (8, _) => GgmlType::Q8_0,
            (4, Group::Size(32 | 64)) => GgmlType::Q4_1,
            _ => GgmlType::Q4_0_G128,
        };
        assert!(
            t == expected || !common::i8_format_built(expected.tag()),
            "{bits}-bit {group:?}: {t}"
        );
        let isas = isas(reg, t);
        for (k, n) in [(256usize, 40usize), (330, 17)] {
            let w = random_gptq(k, n, bits, group, gi as u64 * 7 + k as u64);
            // Dispatch takes the int8 family where its kernel here has SIMD
            // dot products, else the format's own (f32) where built.
            let int8_simd = common::int8_has_simd(reg, format);
            let f32_built = reg
                .with_family(Some(Family::F32))
                .select_pair(format)
                .is_ok();
            let own = if int8_simd || !f32_built {
                Family::Int8
            } else {
                Family::F32
            };
            assert_eq!(Matrix::from_gptq(&w).unwrap().family(), own, "{group:?}");
            for act_order in [false, true] {
                let perm: Option<Vec<u32>> = act_order.then(|| {
                    let mut rng = Rng::new(k as u64);
                    let mut p: Vec<u32> = (0..k as u32).collect();
                    for i in (1..k).rev() {
                        p.swap(i, rng.below(i as u64 + 1) as usize);
                    }
                    p
                });
                for isa in &isas {
                    let layer = GptqLayer {
                        matrix: w.clone(),
                        perm: perm.clone(),
                    };
                    let qm = Matrix::from_gptq_layer_with(&int8.with_isa(Some(isa)), layer)
                        .unwrap_or_else(|e| panic!("{group:?} {isa}: {e}"));
                    assert_eq!(qm.family(), Family::Int8);
                    assert_eq!(qm.gemv_kernel().format, t.format().tag);
                    for m in [1, 3] {
                        let x = Rng::new(m as u64 + 5).vec_f32(m * k);
                        // The matrix's rows are in `perm` order: x'[j] = x[perm[j]].
                        let xp: Vec<f32> = match &perm {
                            Some(p) => {
                                let x = &x;
                                (0..m)
                                    .flat_map(|r| p.iter().map(move |&i| x[r * k + i as usize]))
                                    .collect()
                            }
                            None => x.clone(),
                        };
                        let want = w.reference_gemm(&xp, m);
                        let mut y = vec![f32::NAN; m * n];
                        qm.gemm(&x, m, &mut y).unwrap();
                        for r in 0..m {
                            for j in 0..n {
                                let mag: f64 = (0..k)
                                    .map(|i| {
                                        let (s, z) = (
                                            w.scales[(i / w.group_size()) * n + j] as f64,
                                            w.zeros[(i / w.group_size()) * n + j] as f64,
                                        );
                                        (xp[r * k + i] as f64 * s * (w.q(i, j) as f64 - z)).abs()
                                    })
                                    .sum();
                                let (got, exp) = (y[r * n + j] as f64, want[r * n + j]);
                                assert!(
                                    (got - exp).abs() <= 0.02 * mag + 1e-6,
                                    "{bits}-bit {group:?} act-order {act_order} {isa} row {r} col {j}: {got} vs {exp}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    // 2-bit GPTQ has no int8 kernels: asking for them is an error, and
    // dispatch takes the f32 family where the build has it.
    let w2 = random_gptq(256, 8, 2, Group::Size(32), 1);
    assert!(Matrix::from_gptq_with(&int8, &w2).is_err());
    let f32_2bit = reg
        .with_family(Some(Family::F32))
        .select_pair(kgen_runtime::WeightFormat::gptq(2, Group::Size(32)).unwrap())
        .is_ok();
    if f32_2bit {
        assert_eq!(Matrix::from_gptq(&w2).unwrap().family(), Family::F32);
    }
}

/// Activations quantized for one act-order matrix are refused by another
/// with a different permutation (the q / k / v projections of a GPTQ model
/// each have their own), and taken by one with the same.
#[test]
fn shared_inputs_respect_act_order() {
    use kgen::format::gptq::random_gptq;
    use kgen_runtime::{Family, GptqLayer, Group};
    if !common::i8_format_built("q8_0") {
        return;
    }
    let int8 = Registry::builtin().with_family(Some(Family::Int8));
    let (k, n) = (128, 24);
    let layer = |seed: u64, perm: Option<Vec<u32>>| {
        let layer = GptqLayer {
            matrix: random_gptq(k, n, 8, Group::Size(32), seed),
            perm,
        };
        Matrix::from_gptq_layer_with(&int8, layer).unwrap()
    };
    let rev: Vec<u32> = (0..k as u32).rev().collect();
    let (a, b, c, plain) = (
        layer(1, Some(rev.clone())),
        layer(2, Some(rev)),
        layer(3, Some((0..k as u32).map(|i| i ^ 1).collect())),
        layer(4, None),
    );
    let x = Rng::new(9).vec_f32(2 * k);
    let input = a.quantize_input(&x, 2).unwrap();
    assert!(a.accepts(&input) && b.accepts(&input));
    assert!(!c.accepts(&input) && !plain.accepts(&input));
    let mut y = vec![0f32; 2 * n];
    assert!(c.gemm_input(&input, &mut y).is_err());
    let mut want = vec![0f32; 2 * n];
    b.gemm(&x, 2, &mut want).unwrap();
    b.gemm_input(&input, &mut y).unwrap();
    assert_eq!(y, want);
}

/// 4-bit GPTQ whose `s z` leaves f16's range cannot be Q4_1 blocks: asked
/// for the int8 family it is an error that says so; picked by dispatch it
/// falls back to the f32 family, where that is built.
#[test]
fn gptq_beyond_f16_falls_back_to_the_f32_family() {
    use kgen_runtime::{Family, Group};
    // Group 32 (Q4_1: `s z` beyond f16) and group 128 (`q4_0_g128`: the
    // scale itself beyond f16).
    for (group, scale, zero) in [
        (Group::Size(32), 30000.0, 15.0),
        (Group::Size(128), 1e5, 3.0),
    ] {
        let mut w = kgen::format::gptq::random_gptq(256, 16, 4, group, 3);
        w.scales[5] = scale;
        w.zeros[5] = zero;
        let reg = Registry::builtin();
        let format = WeightFormat::gptq(4, group).unwrap();
        if reg
            .with_family(Some(Family::Int8))
            .select_pair(format)
            .is_ok()
        {
            let e = Matrix::from_gptq_with(&reg.with_family(Some(Family::Int8)), &w).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.contains(&format.to_string()) && msg.contains("f16"),
                "{msg}"
            );
        }
        if reg
            .with_family(Some(Family::F32))
            .select_pair(format)
            .is_ok()
        {
            let m = Matrix::from_gptq(&w).unwrap();
            assert_eq!(m.family(), Family::F32, "{}", m.describe());
            let x = Rng::new(1).vec_f32(256);
            let mut y = vec![0f32; 16];
            m.gemv(&x, &mut y).unwrap();
            assert!(y.iter().all(|v| v.is_finite()));
        }
    }
}

/// Formats whose levels fit 3 bits (Q3_K, the IQ1 and IQ2 codebook
/// indices) pack at 3 bits per level where the kernels' ISA unpacks them
/// (`I8Isa::three_bit` on lane layouts: all but i8mm's pairs and SVE) and
/// at 4 elsewhere: each runnable
/// kernel pair reads the layout it says, which holds exactly its levels
/// and scales (12 or 16 bytes per column and block, and the scale stream),
/// and matches the oracle on it.
#[test]
fn three_bit_formats_pack_at_the_bits_their_kernels_read() {
    let reg = Registry::builtin();
    let three: Vec<GgmlType> = formats()
        .into_iter()
        .filter(|t| t.format().int8.is_some_and(|r| r.layout_bits == 3))
        .collect();
    // The table's 3-bit rows (whether or not this build has their kernels:
    // a `KGEN_SPECS` build may hold a few formats only).
    for want in ["q3_k", "iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s"] {
        let f = kgen::format::by_tag(want).expect("a format of the table");
        assert_eq!(f.int8.map(|r| r.layout_bits), Some(3), "{want}");
    }
    let mut three_bit_runs = 0;
    for &t in &three {
        let (k, n) = (512, 64);
        let w = common::raw_blocks(t, k, n, 9);
        let gemms = reg.runnable(WeightFormat::Ggml(t), Op::Gemm);
        for gemv in reg.runnable(WeightFormat::Ggml(t), Op::Gemv) {
            // The lane ISAs' templates have `lo3` / `hi3` / `spill3`.
            let bits = if LANE_ISAS.contains(&gemv.isa) { 3 } else { 4 };
            assert_eq!(gemv.bits, bits, "{t} {}", gemv.name);
            let gemm = gemms
                .iter()
                .find(|g| g.isa == gemv.isa && g.same_layout(&gemv))
                .expect("a GEMM on the GEMV's layout");
            let qm = Matrix::from_ggml_kernels(&w, gemv, *gemm).unwrap();
            let int = common::int_scales_of(qm.gemm_kernel());
            assert_eq!(
                qm.weight_bytes(),
                packed_bytes(t, &gemv, k, n),
                "{t} {}",
                gemv.name
            );
            let m = 3;
            let x = Rng::new(4).vec_f32(m * k);
            let mut y = vec![f32::NAN; m * n];
            qm.gemm(&x, m, &mut y).unwrap();
            common::check_i8_with(&w, &x, k, m, &y, &format!("{t} {}", gemv.name), int);
            three_bit_runs += usize::from(bits == 3);
        }
    }
    // Every CPU runs the portable kernels, which unpack 3 bits.
    assert!(
        three_bit_runs >= three.len(),
        "{three_bit_runs} 3-bit kernel pairs ran for {} formats",
        three.len()
    );
}

/// The scale stream by super-blocks: the K-quants' integer sub-scales on
/// AVX2 and AVX-512 VNNI keep `d` (and `-dmin`) once per column and
/// super-block and one 2-byte entry per block; TQ1_0's and TQ2_0's one
/// scale per super-block is held once on the lane ISAs. A packed matrix
/// then takes exactly those bytes, and matches the oracle.
#[test]
fn super_block_scales_pack_once_per_super_block() {
    let reg = Registry::builtin();
    let mut ran = (0, 0);
    for t in formats().into_iter().filter(|t| t.format().block == 256) {
        let row = t.format().int8.expect("an int8 format");
        let (k, n) = (768, 40);
        let w = common::raw_blocks(t, k, n, 21);
        let gemms = reg.runnable(WeightFormat::Ggml(t), Op::Gemm);
        for gemv in reg.runnable(WeightFormat::Ggml(t), Op::Gemv) {
            let kgen_runtime::FamilyParams::Int8(p) = gemv.params else {
                panic!("{} is an int8 kernel", gemv.name)
            };
            let what = format!("{t} {}", gemv.name);
            assert_eq!(
                p.group_scales,
                row.group_scale && LANE_ISAS.contains(&gemv.isa),
                "{what}"
            );
            assert_eq!(
                p.int_scales,
                row.int_sub_scales.is_some()
                    && ["avx2", "avx512vnni"].contains(&gemv.isa)
                    && (gemv.isa != "avx512vnni" || t == GgmlType::Q2_K),
                "{what}"
            );
            let gemm = gemms
                .iter()
                .find(|g| g.isa == gemv.isa && g.same_layout(&gemv))
                .expect("a GEMM on the GEMV's layout");
            let qm = Matrix::from_ggml_kernels(&w, gemv, *gemm).unwrap();
            assert_eq!(qm.weight_bytes(), packed_bytes(t, &gemv, k, n), "{what}");
            let m = 3;
            let x = Rng::new(6).vec_f32(m * k);
            let mut y = vec![f32::NAN; m * n];
            qm.gemm(&x, m, &mut y).unwrap();
            common::check_kernels(&qm, &w, &x, k, m, &y);
            ran.0 += usize::from(p.int_scales);
            ran.1 += usize::from(p.group_scales);
        }
    }
    // Portable kernels run everywhere: TQ's group scales, where built.
    let tq = formats()
        .iter()
        .any(|t| t.format().int8.is_some_and(|r| r.group_scale));
    assert!(ran.1 > 0 || !tq, "no kernel pair held group scales");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && formats().contains(&GgmlType::Q4_K) {
        assert!(ran.0 > 0, "no kernel pair kept integer sub-scales");
    }
}

/// The bytes a `k x n` matrix of the 256-value format `t` packs to on the
/// layout kernel `e` reads: per column (N padded to whole tiles) and
/// super-block, 8 blocks of levels at the kernel's bits, then the scale
/// stream: with integer sub-scales a header (`d`, and `-dmin` with mins)
/// and a 2-byte entry per block; with group scales the header alone;
/// otherwise the format's f16 entries per block.
fn packed_bytes(t: GgmlType, e: &kgen_runtime::KernelEntry, k: usize, n: usize) -> usize {
    let kgen_runtime::FamilyParams::Int8(p) = e.params else {
        panic!("{} is an int8 kernel", e.name)
    };
    let row = t.format().int8.expect("an int8 format");
    let scale_bytes = if p.int_scales {
        2 * (8 + row.int_sub_scales.unwrap().super_entries())
    } else if p.group_scales {
        2
    } else {
        2 * 8 * row.scale_entries()
    };
    let n_pad = n.next_multiple_of(e.lanes * e.t_u);
    n_pad * (k / 256) * (8 * 4 * e.bits as usize + scale_bytes)
}
