//! `KGEN_FORCE_ISA` for both kernel families. One test in its own binary:
//! it sets the variable, which every other test of a binary would see.

mod common;

use common::{check, check_i8};
use kgen::format::gptq::random_gptq;
use kgen::format::rng::Rng;
use kgen::format::symmetric::quantize_symmetric;
use kgen_runtime::{Family, Group, Matrix, Registry, FORCE_ISA_ENV};

#[test]
fn force_isa_env_forces_both_families() {
    let (k, n) = (256, 40);
    let gptq = random_gptq(k, n, 4, Group::Size(32), 1);
    let q4 = quantize_symmetric(&Rng::new(2).vec_f32(k * n), k, n, 4, 32);
    let x = Rng::new(3).vec_f32(2 * k);
    let before = std::env::var_os(FORCE_ISA_ENV);

    // `portable` exists in both families on every architecture.
    std::env::set_var(FORCE_ISA_ENV, "portable");
    assert_eq!(
        Registry::builtin().forced_isa().as_deref(),
        Some("portable")
    );
    let a = Matrix::from_gptq(&gptq).unwrap();
    let b = Matrix::from_ggml(&q4).unwrap();
    let c = Matrix::from_f32(&Rng::new(4).vec_f32(k * n), k, n, "q8_0").unwrap();
    for (m, family) in [(&a, Family::F32), (&b, Family::Int8), (&c, Family::Int8)] {
        assert_eq!(m.family(), family);
        assert_eq!(m.kernel().isa, "portable", "{m}");
        assert_eq!(m.gemm_kernel().isa, "portable", "{m}");
    }
    let mut y = vec![f32::NAN; 2 * n];
    a.gemm(&x, 2, &mut y).unwrap();
    check(&gptq, &x, 2, &y, "KGEN_FORCE_ISA=portable f32");
    b.gemm(&x, 2, &mut y).unwrap();
    check_i8(&q4, &x, k, 2, &y, "KGEN_FORCE_ISA=portable int8");
    // A registry's own choice wins over the variable.
    let best = Registry::builtin().with_isa(None);
    let d = Matrix::from_ggml_with(&best, &q4).unwrap();
    assert_eq!(
        d.kernel().name,
        best.runnable(d.format(), kgen_runtime::Op::Gemv)[0].name
    );

    // An ISA no build has: an error naming the variable, the ISA and the format.
    std::env::set_var(FORCE_ISA_ENV, "sse9");
    for (e, format) in [
        (Matrix::from_gptq(&gptq).unwrap_err(), "4:32"),
        (Matrix::from_ggml(&q4).unwrap_err(), "q4_0"),
    ] {
        let msg = e.to_string();
        assert!(
            msg.contains("KGEN_FORCE_ISA=sse9") && msg.contains(format),
            "{msg}"
        );
    }

    // Empty means not forced.
    std::env::set_var(FORCE_ISA_ENV, "");
    assert_eq!(Registry::builtin().forced_isa(), None);
    Matrix::from_gptq(&gptq).unwrap();

    match before {
        Some(v) => std::env::set_var(FORCE_ISA_ENV, v),
        None => std::env::remove_var(FORCE_ISA_ENV),
    }
}
