//! Results do not depend on the thread count or on the order the threads
//! claim column panels in: each output column is computed by one claim, with
//! the kernel's own reduction order. Every product here runs on pools of 1,
//! 2, 3 and 5 threads (the multi-thread pools twice, so claims land in a
//! different order) and must be bit-identical; the result is also checked
//! against the scalar oracle with the bounds of `kernels.rs` / `int8.rs`
//! (every row, or four rows of the 32-row products).
//!
//! The large shapes are above the minimum claim (2^18 multiply-accumulates)
//! many times over, so they are split into several claims; the small ones
//! stay on one claim. N is never a multiple of the panel width `t_b`.

mod common;

use common::{check, check_i8, i8_format_built};
use kgen::format::gptq::random_gptq;
use kgen::format::rng::Rng;
use kgen::format::symmetric::quantize_symmetric;
use kgen_runtime::{Family, Group, Matrix, Op, Pool, Registry, WeightFormat};

/// Thread counts compared.
const THREADS: [usize; 4] = [1, 2, 3, 5];

/// Activation rows: 1 runs the GEMV kernel, the others the GEMM one.
const ROWS: [usize; 3] = [1, 3, 32];

/// f32 family `(k, n)`: ragged K and N, one claim up to many.
const F32_SHAPES: &[(usize, usize)] = &[
    (100, 33),
    (257, 130),
    (1024, 1000),
    (4096, 300),
    (2000, 1100),
];

/// int8 family `(k, n)` (K whole 32-blocks), as above.
const I8_SHAPES: &[(usize, usize)] = &[
    (96, 33),
    (320, 130),
    (1024, 1000),
    (4096, 300),
    (2048, 1100),
];

/// The built-in registry, best ISA whatever `KGEN_FORCE_ISA` says.
fn best() -> Registry {
    Registry::builtin().with_isa(None)
}

/// The f32 family, which 4-bit GPTQ leaves for the int8 family's SIMD
/// kernels by default (those are covered with the int8 formats).
fn f32_family() -> Registry {
    Registry::builtin().with_family(Some(Family::F32))
}

fn pools() -> Vec<Pool> {
    THREADS.iter().map(|&t| Pool::new(t)).collect()
}

/// Runs `qm` on `m` rows of `x` on every pool (and `Matrix::gemv` on the
/// global pool for one row), asserts the results are bit-identical, and
/// returns the 1-thread one.
fn same_on_every_pool(qm: &Matrix, pools: &[Pool], x: &[f32], m: usize, what: &str) -> Vec<f32> {
    let n = qm.n();
    let run = |pool: &Pool| {
        let mut y = vec![f32::NAN; m * n];
        qm.gemm_on(pool, x, m, &mut y).unwrap();
        y
    };
    let first = run(&pools[0]);
    let same = |y: &[f32], how: &str| {
        if let Some(j) = (0..m * n).find(|&j| y[j].to_bits() != first[j].to_bits()) {
            panic!(
                "{what} rows {m}: {how} differs from 1 thread at row {} col {}: {} vs {}",
                j / n,
                j % n,
                y[j],
                first[j]
            );
        }
    };
    for pool in &pools[1..] {
        for round in 0..2 {
            same(
                &run(pool),
                &format!("{} threads (round {round})", pool.threads()),
            );
        }
    }
    if m == 1 {
        let mut y = vec![f32::NAN; n];
        qm.gemv(x, &mut y).unwrap();
        same(&y, "Matrix::gemv on the global pool");
    }
    first
}

/// The rows of an `m`-row result checked against the oracle: all of them for
/// a few rows; for 32, the first and last and both sides of the boundary
/// between 8-row micro-kernel groups (the oracle is the slow part of this
/// test in a debug build, and the thread comparison covers every row).
fn oracle_rows(m: usize) -> Vec<usize> {
    if m <= 3 {
        (0..m).collect()
    } else {
        vec![0, 7, 8, m - 1]
    }
}

/// The f32 family's formats used here that this build has.
fn f32_formats(reg: &Registry) -> Vec<(u32, Group)> {
    let built = reg.formats();
    [
        (4, Group::Size(32)),
        (3, Group::Size(128)),
        (4, Group::Column),
    ]
    .into_iter()
    .filter(|&(bits, group)| {
        let here = built.contains(&WeightFormat::gptq(bits, group).unwrap());
        if !here {
            eprintln!("{bits}:{group}: not in this build, skipped");
        }
        here
    })
    .collect()
}

/// The int8 formats used here, with the symmetric quantizer `int8.rs` uses.
fn i8_formats() -> Vec<(&'static str, u32)> {
    [("q4_0", 4), ("q8_0", 8)]
        .into_iter()
        .filter(|&(f, _)| i8_format_built(f))
        .collect()
}

/// For every row count: the same output on every pool, and rows of it
/// against the family's oracle (`oracle(x_row, y_row, what)`).
fn every_row_count(
    qm: &Matrix,
    pools: &[Pool],
    label: &str,
    seed: u64,
    oracle: impl Fn(&[f32], &[f32], &str),
) {
    let (k, n) = (qm.k(), qm.n());
    for m in ROWS {
        let x = Rng::new(k as u64 * seed + m as u64).vec_f32(m * k);
        let what = format!(
            "{label} {k}x{n} {} / {} t_b {}",
            qm.gemv_kernel().name,
            qm.gemm_kernel().name,
            qm.kernel().t_b
        );
        let y = same_on_every_pool(qm, pools, &x, m, &what);
        for r in oracle_rows(m) {
            let (xr, yr) = (&x[r * k..(r + 1) * k], &y[r * n..(r + 1) * n]);
            oracle(xr, yr, &format!("{what} row {r} of {m}"));
        }
    }
}

#[test]
fn f32_family_is_bit_identical_on_any_thread_count() {
    let reg = f32_family().with_isa(None);
    let pools = pools();
    let formats = f32_formats(&reg);
    assert!(!formats.is_empty());
    for (bits, group) in formats {
        for (si, &(k, n)) in F32_SHAPES.iter().enumerate() {
            let w = random_gptq(k, n, bits, group, 100 + si as u64 + bits as u64);
            let qm = Matrix::from_gptq_with(&reg, &w).unwrap();
            let label = format!("{bits}:{group}");
            every_row_count(&qm, &pools, &label, 5, |xr, yr, what| {
                check(&w, xr, 1, yr, what)
            });
        }
    }
}

#[test]
fn int8_family_is_bit_identical_on_any_thread_count() {
    let reg = best();
    let pools = pools();
    let formats = i8_formats();
    assert!(!formats.is_empty());
    for (format, bits) in formats {
        for (si, &(k, n)) in I8_SHAPES.iter().enumerate() {
            let wf = Rng::new(200 + si as u64).vec_f32(k * n);
            let w = quantize_symmetric(&wf, k, n, bits, 32);
            let qm = Matrix::from_ggml_with(&reg, &w).unwrap();
            assert_eq!(qm.gemv_kernel().format, format);
            every_row_count(&qm, &pools, format, 3, |xr, yr, what| {
                check_i8(&w, xr, k, 1, yr, what)
            });
        }
    }
}

/// The claim split relies on each kernel's per-column order not depending on
/// the panels a call covers: every ISA this CPU runs, at one shape split into
/// several claims (the oracle checks every ISA over more shapes in
/// `kernels.rs` / `int8.rs`; here only the one-row result is checked again).
#[test]
fn every_runnable_isa_is_bit_identical_on_any_thread_count() {
    let f32 = f32_family();
    let reg = &f32;
    let pools = pools();
    let (k, n) = (512, 600);
    let mut runs = 0;
    for (bits, group) in f32_formats(reg) {
        let format = WeightFormat::gptq(bits, group).unwrap();
        let w = random_gptq(k, n, bits, group, 7);
        for e in reg.runnable(format, Op::Gemv) {
            let qm = Matrix::from_gptq_with(&reg.with_isa(Some(e.isa)), &w).unwrap();
            assert_eq!(qm.kernel().isa, e.isa);
            for m in [1, 32] {
                let x = Rng::new(m as u64).vec_f32(m * k);
                let what = format!("{format} {k}x{n} {}", qm.kernel().name);
                let y = same_on_every_pool(&qm, &pools, &x, m, &what);
                if m == 1 {
                    check(&w, &x, m, &y, &what);
                }
                runs += 1;
            }
        }
    }
    let reg = Registry::builtin();
    for (format, bits) in i8_formats() {
        let wf = Rng::new(8).vec_f32(k * n);
        let w = quantize_symmetric(&wf, k, n, bits, 32);
        for e in reg.runnable(format.parse().unwrap(), Op::Gemv) {
            let qm = Matrix::from_ggml_with(&reg.with_isa(Some(e.isa)), &w).unwrap();
            assert_eq!(qm.kernel().isa, e.isa);
            for m in [1, 32] {
                let x = Rng::new(m as u64 + 1).vec_f32(m * k);
                let what = format!("{format} {k}x{n} {}", qm.kernel().name);
                let y = same_on_every_pool(&qm, &pools, &x, m, &what);
                if m == 1 {
                    check_i8(&w, &x, k, m, &y, &what);
                }
                runs += 1;
            }
        }
    }
    assert!(runs > 0);
    eprintln!("{runs} products compared over thread counts");
}
