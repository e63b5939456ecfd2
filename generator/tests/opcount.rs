//! The op counter against hand-counted modules, then on the real emitters:
//! the counts the `--explain` report prints come from these functions.

use kgen::opcount::{count_kernel, Counts, KPerIter, Site};
use kgen::spec::{Group, Op};
use kgen::{explain, opcount};
use kgen::{target, IsaChoice, Request};
use std::process::Command;

/// An aarch64 kernel module in the emitters' shape, each primitive's
/// instructions noted by hand.
const ARM: &str = r#"
pub mod k {
    pub mod ops {
        use core::arch::aarch64::*;
        use core::arch::asm;
        pub type F = float32x4_t;
        pub type I = int32x4_t;
        // Returned constant: a fresh accumulator every iteration, 1 op.
        pub unsafe fn zero_i() -> I { vdupq_n_s32(0) }
        pub unsafe fn zero_f() -> F { vdupq_n_f32(0.0) }
        // 1 load; reinterprets are free.
        pub unsafe fn loadb(p: *const u8) -> I { vreinterpretq_s32_u8(vld1q_u8(p)) }
        // 1 op; the mask operand is a hoisted constant.
        pub unsafe fn nib_lo(w: I) -> I {
            vreinterpretq_s32_u8(vandq_u8(vreinterpretq_u8_s32(w), vdupq_n_u8(0x0F)))
        }
        // 2 ops in one asm template (two lines); the directive is free.
        pub unsafe fn nib_hi(w: I) -> I {
            let out: I;
            asm!(
                ".arch_extension neon",
                "ushr {o:v}.16b, {w:v}.16b, #4\n and {o:v}.16b, {o:v}.16b, {o:v}.16b",
                o = out(vreg) out,
                w = in(vreg) w,
            );
            out
        }
        // ld1r: 1 load, no op.
        pub unsafe fn bcast4(p: *const i8) -> I {
            vdupq_n_s32((p as *const i32).read_unaligned())
        }
        // 1 dot.
        pub unsafe fn sdot(acc: I, w: I, x: I) -> I {
            let mut acc = acc;
            asm!(
                ".arch_extension dotprod",
                "sdot {a:v}.4s, {w:v}.16b, {x:v}.16b",
                a = inout(vreg) acc,
                w = in(vreg) w,
                x = in(vreg) x,
            );
            acc
        }
        // Counted through the primitive it calls.
        pub unsafe fn pair_acc(acc: I, w: I, x: I) -> I { sdot(acc, w, x) }
        // 1 load + 1 op.
        pub unsafe fn scales(p: *const u16) -> F {
            let h = vld1_u16(p);
            let out: F;
            asm!("fcvtl {o:v}.4s, {h:v}.4h", o = out(vreg) out, h = in(vreg) h);
            out
        }
        // 1 load (a deref feeding a dup).
        pub unsafe fn splatf(p: *const f32) -> F { vdupq_n_f32(*p) }
        pub unsafe fn cvti(a: I) -> F { vcvtq_f32_s32(a) }
        // 1 op, a MAC but not a dot.
        pub unsafe fn fmaf(a: F, b: F, c: F) -> F { vfmaq_f32(c, a, b) }
        pub unsafe fn storef(p: *mut f32, v: F) { vst1q_f32(p, v) }
        // No instruction to recognise: 1 op, reported.
        pub unsafe fn scalar(a: [f32; 4]) -> [f32; 4] { a.map(|v| v * 2.0) }
    }

    unsafe fn micro_r2(mut w: *const u8, mut xq: *const i8, sc: *const u16, xd: *const f32, y: *mut f32, blocks: usize) {
        unsafe {
            let mut f = ops::zero_f();
            let s = ops::scales(sc);
            for _ in 0..blocks {
                let mut i = ops::zero_i();
                for _ in 0..2 {
                    let wv = ops::loadb(w.add(0));
                    let lo = ops::nib_lo(wv);
                    let hi = ops::nib_hi(wv);
                    let x = ops::bcast4(xq.add(0));
                    i = ops::pair_acc(i, lo, x);
                    i = ops::pair_acc(i, hi, x);
                    w = w.add(16);
                    xq = xq.add(16);
                }
                f = ops::fmaf(ops::cvti(i), ops::splatf(xd), f);
                let t = ops::scalar([0.0; 4]);
                ops::storef(y, f);
            }
            ops::storef(y, f);
        }
    }
}
"#;

fn arm_site(k: KPerIter<'static>) -> Site<'static> {
    Site {
        module: "k",
        micro: "micro_r2",
        k,
        rows: 2,
        cols: 4,
    }
}

#[test]
fn counts_a_hand_written_aarch64_module() {
    let file = opcount::parse(ARM).unwrap();
    let k = count_kernel(&file, &arm_site(KPerIter::Advance("xq"))).unwrap();
    // zero_i 1 + 2 x (nib_lo 1 + nib_hi 2 + 2 sdot) + cvti 1 + fmaf 1 + scalar 1.
    let expect = Counts {
        ops: 1 + 2 * (1 + 2 + 2) + 1 + 1 + 1,
        // 2 x (loadb + bcast4) + splatf.
        loads: 2 * 2 + 1,
        // bcast4 (a dup of a read) and splatf.
        bcast: 2 + 1,
        stores: 1,
        mac: 2 * 2 + 1,
        dot: 2 * 2,
        // fmaf.
        fmul: 1,
        shuf: 0,
    };
    assert_eq!(k.per_iter, expect);
    assert_eq!(k.k_per_iter, 32, "xq advances 16 twice per iteration");
    assert_eq!(k.calls["pair_acc"], 4);
    assert!(!k.calls.contains_key("zero_f"), "outside the loop");
    assert_eq!(
        k.unclassified
            .iter()
            .filter(|u| u.starts_with("scalar:"))
            .count(),
        k.unclassified.len()
    );
    assert!(!k.unclassified.is_empty());

    let col = k.per_block_column();
    assert!((col.ops - 14.0 / 4.0).abs() < 1e-9, "{col:?}");
    assert!((col.dot - 1.0).abs() < 1e-9, "{col:?}");
    let point = k.per_block_point();
    assert!((point.ops - 14.0 / 8.0).abs() < 1e-9, "{point:?}");

    // A fixed K per iteration halves the figure when it says 64.
    let k64 = count_kernel(&file, &arm_site(KPerIter::Fixed(64))).unwrap();
    assert_eq!(k64.per_iter, k.per_iter);
    assert!((k64.per_block_column().ops - 14.0 / 8.0).abs() < 1e-9);
}

/// x86 primitives, and an f32-style grouped loop (units of 8 values, 4 per
/// group of 32) with K read from the activation pointer.
const X86: &str = r#"
pub mod q {
    pub mod ops {
        use core::arch::x86_64::*;
        pub type I = __m256i;
        pub type V = __m256;
        // 1 op.
        pub unsafe fn zero() -> V { _mm256_setzero_ps() }
        // 1 load.
        pub unsafe fn loadw(p: *const u32) -> I { _mm256_loadu_si256(p as *const _) }
        // 1 load: broadcast from memory, its deref is the same load.
        pub unsafe fn splat(p: *const f32) -> V { _mm256_broadcast_ss(&*p) }
        // vpbroadcastd from memory: 1 load.
        pub unsafe fn splati(p: *const i32) -> I { _mm256_set1_epi32(*p) }
        // Register broadcast: 1 op.
        pub unsafe fn splatw(v: u32) -> I { _mm256_set1_epi32(v as i32) }
        // 1 op; the constant operand is hoisted.
        pub unsafe fn and15(w: I) -> I { _mm256_and_si256(w, _mm256_set1_epi32(15)) }
        pub unsafe fn cvt(w: I) -> V { _mm256_cvtepi32_ps(w) }
        // 1 MAC, not a dot.
        pub unsafe fn fma(a: V, b: V, c: V) -> V { _mm256_fmadd_ps(a, b, c) }
        // maddubs (dot) + add: 2 ops.
        pub unsafe fn pair_acc(acc: I, w: I, x: I) -> I {
            _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x))
        }
        // 1 op + 1 load.
        pub unsafe fn scales(p: *const u16) -> V { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
        // Casts are free: 1 op.
        pub unsafe fn or_f(a: V, b: I) -> V { _mm256_or_ps(a, _mm256_castsi256_ps(b)) }
        // Memory operand: a dot plus a load.
        pub unsafe fn dot_mem(acc: I, w: I, p: *const u8) -> I {
            let mut acc = acc;
            core::arch::asm!("vpdpbusd {a}, {w}, ymmword ptr [{p}]", a = inout(ymm_reg) acc, w = in(ymm_reg) w, p = in(reg) p);
            acc
        }
        // Embedded broadcast: a dot plus a broadcast load.
        pub unsafe fn dot_bcast(acc: I, w: I, p: *const i8) -> I {
            let mut acc = acc;
            core::arch::asm!("vpdpbusd {a}, {w}, dword ptr [{p}]{{1to8}}", a = inout(ymm_reg) acc, w = in(ymm_reg) w, p = in(reg) p);
            acc
        }
        // A byte shuffle (a table lookup): 1 op, counted apart.
        pub unsafe fn lut(t: I, w: I) -> I { _mm256_shuffle_epi8(t, w) }
        // The same written as asm: 1 op, counted apart.
        pub unsafe fn lut_asm(t: I, w: I) -> I {
            let mut w = w;
            core::arch::asm!("vpermb {w}, {w}, {t}", w = inout(ymm_reg) w, t = in(ymm_reg) t);
            w
        }
        pub unsafe fn store(p: *mut f32, v: V) { _mm256_storeu_ps(p, v) }
    }

    unsafe fn micro_r1(mut w: *const u32, mut x: *const f32, sc: *const f32, y: *mut f32, units: usize) {
        unsafe {
            let mask = ops::splatw(15);
            for _ in 0..units / 4 {
                let mut a = ops::zero();
                for _ in 0..4 {
                    let p = ops::loadw(w);
                    let xv = ops::splat(x);
                    a = ops::fma(ops::cvt(ops::and15(p)), xv, a);
                    w = w.add(8);
                    x = x.add(8);
                }
                let i = ops::pair_acc(ops::splati(sc as *const i32), mask, mask);
                let i = ops::dot_mem(i, mask, w as *const u8);
                let i = ops::dot_bcast(i, mask, x as *const i8);
                let i = ops::lut_asm(mask, ops::lut(mask, i));
                let s = ops::or_f(ops::scales(sc as *const u16), i);
                ops::store(y, ops::fma(a, s, ops::zero()));
            }
        }
    }
}
"#;

#[test]
fn counts_a_hand_written_x86_module() {
    let file = opcount::parse(X86).unwrap();
    let k = count_kernel(
        &file,
        &Site {
            module: "q",
            micro: "micro_r1",
            k: KPerIter::Advance("x"),
            rows: 1,
            cols: 8,
        },
    )
    .unwrap();
    assert_eq!(k.k_per_iter, 32);
    let expect = Counts {
        // zero + 4 x (fma, cvt, and15) + pair_acc 2 + dot_mem 1
        // + dot_bcast 1 + lut, lut_asm + or_f 1 + scales 1 + fma + zero.
        ops: 1 + 4 * 3 + 2 + 1 + 1 + 2 + 1 + 1 + 1 + 1,
        // 4 x (loadw, splat) + splati + dot_mem's and dot_bcast's operands
        // + scales.
        loads: 4 * 2 + 1 + 1 + 1 + 1,
        // splat (broadcast_ss), splati (set1 of a read), dot_bcast's {1to8}.
        bcast: 4 + 1 + 1,
        stores: 1,
        mac: 4 + 1 + 1 + 1 + 1,
        dot: 3,
        // The five FMAs.
        fmul: 5,
        // lut and lut_asm.
        shuf: 2,
    };
    assert_eq!(k.per_iter, expect);
    assert!(k.unclassified.is_empty(), "{:?}", k.unclassified);
    assert!(!k.calls.contains_key("splatw"), "hoisted before the loop");
}

/// A branch the block loop takes once every `N` blocks (`blk % N`, the
/// AVX2 ternary kernels' widening) counts `1 / N` per iteration: the
/// counter walks `N` iterations at once and the branch once. With a fixed
/// K per iteration the counts come back per iteration; with an advancing
/// pointer K spans the `N` iterations.
#[test]
fn a_branch_taken_once_every_few_blocks_counts_its_share() {
    let site = |k| Site {
        module: "q",
        micro: "micro_r1",
        k,
        rows: 1,
        cols: 8,
    };
    let count = |text: &str, k| count_kernel(&opcount::parse(text).unwrap(), &site(k)).unwrap();
    let base = count(X86, KPerIter::Advance("x"));
    // The block loop with one more store of an FMA behind `cond`.
    let with_branch = |cond: &str| {
        let store = "ops::store(y, ops::fma(a, s, ops::zero()));";
        X86.replace("for _ in 0..units / 4 {", "for blk in 0..units / 4 {")
            .replace(store, &format!("{store} if {cond} {{ {store} }}"))
    };
    let periodic = with_branch("blk % 4 == 3 || blk + 1 == units / 4");
    let k = count(&periodic, KPerIter::Advance("x"));
    // 4 iterations, the branch's fma, zero and store once among them.
    assert_eq!(k.k_per_iter, 4 * base.k_per_iter);
    assert_eq!(k.per_iter.ops, 4 * base.per_iter.ops + 2);
    assert_eq!(k.per_iter.stores, 4 * base.per_iter.stores + 1);
    let note = |k: &kgen::opcount::KernelOps, what: &str| k.notes.iter().any(|n| n.contains(what));
    assert!(note(&k, "counted over 4 iterations"), "{:?}", k.notes);
    let fixed = count(&periodic, KPerIter::Fixed(32));
    assert_eq!(fixed.k_per_iter, 32);
    // (4 * ops + 2) / 4, rounded.
    assert_eq!(fixed.per_iter.ops, (4 * base.per_iter.ops + 2 + 2) / 4);
    // Any other branch counts as always taken, with a note.
    let k = count(&with_branch("units > 8"), KPerIter::Advance("x"));
    assert_eq!(k.per_iter.ops, base.per_iter.ops + 2);
    assert!(note(&k, "always taken"), "{:?}", k.notes);
}

#[test]
fn asm_and_other_calls_written_in_the_loop_itself_are_seen() {
    let base = count_kernel(
        &opcount::parse(ARM).unwrap(),
        &arm_site(KPerIter::Advance("xq")),
    )
    .unwrap();
    // A vector op and a scalar counter update, inside the inner loop of 2.
    let with_asm = ARM.replace(
        "w = w.add(16);",
        r#"w = w.add(16);
        core::arch::asm!("add {a:v}.4s, {a:v}.4s, {a:v}.4s", "add {n}, {n}, #1", a = inout(vreg) i, n = inout(reg) w);
        helper(w);"#,
    );
    let k = count_kernel(
        &opcount::parse(&with_asm).unwrap(),
        &arm_site(KPerIter::Advance("xq")),
    )
    .unwrap();
    assert_eq!(k.per_iter.ops, base.per_iter.ops + 2);
    assert!(
        k.notes.iter().any(|n| n.contains("helper")),
        "{:?}",
        k.notes
    );
}

#[test]
fn a_kernel_without_its_primitive_or_advance_is_an_error() {
    let bad = ARM.replace("ops::cvti(i)", "ops::cvt_missing(i)");
    let file = opcount::parse(&bad).unwrap();
    let e = count_kernel(&file, &arm_site(KPerIter::Advance("xq"))).unwrap_err();
    assert!(e.0.contains("cvt_missing"), "{e}");
    let file = opcount::parse(ARM).unwrap();
    let e = count_kernel(&file, &arm_site(KPerIter::Advance("nowhere"))).unwrap_err();
    assert!(e.0.contains("nowhere"), "{e}");
}

/// A micro kernel that is one asm! block, its block loop inside the
/// template: only the lines from the label to the backward branch count,
/// and scalar bookkeeping (pointer adds, the counter, the branch) does not.
const ASM_LOOP: &str = r#"
pub mod s {
    pub mod ops {
        use core::arch::asm;
        pub unsafe fn vector_bytes() -> usize {
            let n: usize;
            asm!("rdvl {n}, #1", n = out(reg) n);
            n
        }
    }

    unsafe fn micro_r1(w: *const u8, xq: *const i8, y: *mut f32, blocks: usize) {
        unsafe {
            debug_assert_eq!(ops::vector_bytes(), 32);
            core::arch::asm!(
                ".arch_extension sve",
                "ptrue p0.b",
                "ld1w {{ z4.s }}, p0/z, [{y}]",
                "cbz {n}, 3f",
                "2:",
                "mov z3.s, #0",
                "ld1rqb {{ z0.b }}, p0/z, [{x}]",
                "ldr z1, [{w}]",
                "lsl z2.b, z1.b, #4",
                "sdot z3.s, z2.b, z0.b[0]",
                "sdot z3.s, z1.b, z0.b[1]",
                "scvtf z3.s, p0/m, z3.s",
                "fmla z4.s, p0/m, z3.s, z3.s",
                "add {w}, {w}, #32",
                "add {x}, {x}, #32",
                "subs {n}, {n}, #1",
                "b.ne 2b",
                "3:",
                "st1w {{ z4.s }}, p0, [{y}]",
                w = inout(reg) w => _,
                x = inout(reg) xq => _,
                n = inout(reg) blocks => _,
                y = in(reg) y,
                out("v0") _,
                out("p0") _,
                options(nostack),
            );
        }
    }
}
"#;

#[test]
fn counts_a_block_loop_written_in_asm() {
    let file = opcount::parse(ASM_LOOP).unwrap();
    let site = |k| Site {
        module: "s",
        micro: "micro_r1",
        k,
        rows: 1,
        cols: 8,
    };
    let k = count_kernel(&file, &site(KPerIter::Fixed(32))).unwrap();
    // mov, lsl, 2 sdot (lane indices are not memory), scvtf, fmla.
    let expect = Counts {
        ops: 6,
        loads: 2,
        // ld1rqb replicates a quadword.
        bcast: 1,
        stores: 0,
        mac: 3,
        dot: 2,
        // fmla.
        fmul: 1,
        shuf: 0,
    };
    assert_eq!(k.per_iter, expect);
    assert!(k.notes.iter().any(|n| n.contains("asm")), "{:?}", k.notes);
    assert!((k.per_block_column().ops - 6.0 / 8.0).abs() < 1e-9);
    // Byte advances in asm are not K values.
    assert!(count_kernel(&file, &site(KPerIter::Advance("xq"))).is_err());
}

/// The row was counted, and every primitive of its kernel mapped to known
/// instructions.
fn assert_classified(r: &explain::Row) {
    let k = r
        .result
        .as_ref()
        .unwrap_or_else(|e| panic!("{}: {e}", r.kernel));
    assert!(
        k.unclassified.is_empty(),
        "{}: {:?}",
        r.kernel,
        k.unclassified
    );
}

fn f32_plans(t: &target::TargetDesc, isas: IsaChoice) -> Vec<kgen::family::f32::planner::Plan> {
    let mut req = Request::new(4, Group::Size(32), vec![Op::Gemv, Op::Gemm { m: 8 }]);
    req.isas = isas;
    kgen::plans_for(t, &req).unwrap()
}

#[test]
fn neoverse_v1_int8_q4_gemv_is_below_the_papers_reference() {
    let t = target::load("neoverse-v1").unwrap();
    let rows = explain::int8_rows(&t, 4, 8, (4096, 4096)).unwrap();
    let simd: Vec<_> = rows
        .iter()
        .filter(|r| !r.kernel.ends_with("__portable"))
        .collect();
    assert!(simd.iter().any(|r| !r.gemm) && simd.iter().any(|r| r.gemm));
    for r in &simd {
        assert_classified(r);
        let rate = r.rate().unwrap();
        assert!(
            rate.ops > 0.0 && rate.loads > 0.0 && rate.dot > 0.0,
            "{}: {rate:?}",
            r.kernel
        );
        if !r.gemm {
            assert!(
                rate.ops < explain::PAPER_GEMV[0].ops,
                "{}: {} ops per block and column, GGML's reference takes 12",
                r.kernel,
                rate.ops
            );
        }
    }
    // The sdot GEMV does 32 x 4 byte products per column and block in sdots
    // of 4 columns x 4 bytes: 2 per column, whatever the unpacking costs.
    let dotprod = simd
        .iter()
        .find(|r| !r.gemm && r.kernel.ends_with("__dotprod"))
        .expect("neoverse-v1 has dotprod");
    assert!((dotprod.rate().unwrap().dot - 2.0).abs() < 1e-9);
}

#[test]
fn x86_targets_are_counted_in_both_families() {
    for name in ["x86-64-v3", "x86-64-v4-vnni", "zen4"] {
        let t = target::load(name).unwrap();
        let mut rows = explain::f32_rows(&t, &f32_plans(&t, IsaChoice::All)).unwrap();
        rows.extend(explain::int8_rows(&t, 4, 8, (4096, 4096)).unwrap());
        assert!(rows.iter().filter(|r| r.family == "f32").count() >= 2);
        assert!(rows.iter().filter(|r| r.family == "int8").count() >= 2);
        for r in &rows {
            let k = r
                .result
                .as_ref()
                .unwrap_or_else(|e| panic!("{name} {}: {e}", r.kernel));
            let rate = r.rate().unwrap();
            assert!(rate.ops > 0.0 && rate.loads > 0.0, "{name} {}", r.kernel);
            if !r.kernel.ends_with("__portable") {
                assert!(
                    k.unclassified.is_empty(),
                    "{}: {:?}",
                    r.kernel,
                    k.unclassified
                );
                assert!(rate.mac > 0.0, "{name} {}", r.kernel);
            }
        }
        let report = explain::report(&rows);
        assert!(!report.contains("cannot count"), "{report}");
    }
}

#[test]
fn every_shipped_template_is_classified() {
    for t in target::load_all().unwrap() {
        let mut rows = explain::f32_rows(&t, &f32_plans(&t, IsaChoice::All)).unwrap();
        for bits in [4, 8] {
            rows.extend(explain::int8_rows(&t, bits, 8, (4096, 4096)).unwrap());
        }
        for r in rows.iter().filter(|r| !r.kernel.ends_with("__portable")) {
            assert_classified(r);
        }
    }
}

#[test]
fn plan_explain_prints_the_counts_next_to_the_paper() {
    let out = Command::new(env!("CARGO_BIN_EXE_kgen"))
        .args([
            "plan",
            "--target",
            "neoverse-v1",
            "--bits",
            "4",
            "--group",
            "32",
            "--no-profile",
            "--explain",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let gemv = text
        .lines()
        .find(|l| l.contains("q4_0_gemv") && l.contains("__dotprod"))
        .unwrap_or_else(|| panic!("no int8 GEMV line in\n{text}"));
    assert!(
        gemv.contains("GGML ref 12") && gemv.contains("6.5"),
        "{gemv}"
    );
    let gemm = text
        .lines()
        .find(|l| l.contains("q4_0_gemm"))
        .unwrap_or_else(|| panic!("no int8 GEMM line in\n{text}"));
    assert!(gemm.contains("SMMLA b8 2.47"), "{gemm}");
    assert!(text.lines().any(|l| l.contains("q4g32_gemv")));
    assert!(text.lines().any(|l| l.contains("q4g32_gemm")));
}

/// The int8 model ranks tiles by the counts `--explain` prints: for every
/// shipped target, int8 ISA and format, the planned GEMV's and GEMM's
/// counted block loop is exactly what the model costed.
#[test]
fn the_int8_model_costs_the_counts_explain_prints() {
    use kgen::family::int8::isa::I8Isa;
    use kgen::family::int8::model::{block_counts, plan, plan_gemm_sharing};
    use kgen::family::int8::spec::I8Spec;
    use kgen::format::table::int8_formats;
    let check_target = |t: &target::TargetDesc| {
        let mut checked = 0;
        for isa in I8Isa::for_target(t) {
            for format in int8_formats() {
                let spec = I8Spec::for_format(Op::Gemv, format).unwrap();
                if isa.supports(&spec).is_err() {
                    continue;
                }
                let gemv = plan(&spec, &isa, t, (4096, 4096)).unwrap();
                let gemm = plan_gemm_sharing(&gemv, 8, t);
                let rows = explain::i8_plan_rows(t, &[gemv.clone(), gemm.clone()]).unwrap();
                for (p, r) in [&gemv, &gemm].iter().zip(&rows) {
                    let counted = r.result.as_ref().unwrap().per_iter;
                    assert_eq!(
                        counted,
                        block_counts(&p.spec, &isa, p.tile).counts,
                        "{} {}",
                        t.name,
                        r.kernel
                    );
                    checked += 1;
                }
            }
        }
        checked
    };
    // Every kernel of every target is emitted and parsed: the targets are
    // split over the cores, which CI's debug build needs.
    let targets = target::load_all().unwrap();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = targets.len().div_ceil(threads);
    let checked: usize = std::thread::scope(|s| {
        let handles: Vec<_> = targets
            .chunks(chunk)
            .map(|ts| s.spawn(move || ts.iter().map(check_target).sum::<usize>()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert!(checked > 100, "{checked} kernels");
}
