//! GGUF tensors gguf-py wrote, end to end through `Matrix::from_gguf` and
//! the int8 kernels: Q4_0 / Q5_0 / Q8_0 / IQ4_NL / IQ4_XS / MXFP4 results against numpy and
//! the exact oracle on every ISA here, kgen's own IQ4_NL bytes through
//! gguf-py's writer and back, and float tensors refused. See
//! `gguf_py/mod.rs` for what the writer script needs.

mod common;
mod gguf_py;

use gguf_py::{
    assert_bits_eq, assert_gemv_near_numpy, f16_scale_slack, file, files, from_bytes, manifest,
    read_f32,
};
use kgen::format::ggml::{GgmlMatrix, GgmlType};
use kgen_runtime::gguf::GgufFile;

/// End to end: Q4_0 / Q5_0 / Q8_0 / MXFP4 tensors written by gguf-py (and raw
/// IQ4_NL, IQ4_XS and lattice i-quant ones), loaded and repacked by
/// `Matrix::from_gguf`, multiplied by the int8 kernels, against numpy's
/// float32 `x @ deq.T` of gguf-py's dequantized weights. The kernels quantize
/// x per 32-block (Q8_0 arithmetic); the tolerance is that rounding's worst
/// case plus the f32 summation bound (`gguf_py::assert_gemv_near_numpy`).
/// The same outputs are then held to gguf-py's weights times those
/// quantized activations (`common::check_kernels`), a bound that does not
/// carry the activations' rounding.
#[test]
fn int8_kernels_match_numpy_on_gguf_py_files() {
    let files = files();
    let mut checked = 0;
    for e in manifest().into_iter().filter(|e| {
        e.matmul
            && ((e.dtype == GgmlType::Q4_0 || e.dtype == GgmlType::Q8_0)
                || (e.dtype == GgmlType::IQ4_NL && common::i8_format_built("iq4_nl"))
                || (e.dtype == GgmlType::IQ4_XS && common::i8_format_built("iq4_xs"))
                || (e.dtype == GgmlType::MXFP4 && common::i8_format_built("mxfp4"))
                || (e.dtype == GgmlType::Q5_0 && common::i8_format_built("q5_0"))
                // The lattice i-quants' random blocks.
                || (e.dtype.tag().starts_with("iq")
                    && e.dtype.block_values() == 256
                    && common::i8_format_built(e.dtype.tag())))
    }) {
        let qm = kgen_runtime::Matrix::from_gguf(file(&e.file), &e.name).unwrap();
        let deq = read_f32(&e.data("deq"));
        let x = read_f32(&e.data("x"));
        let y_np = read_f32(&e.data("y"));
        let m = files[&e.file].matrix(&e.name).unwrap();
        let slack = f16_scale_slack(&m, &x);
        let y = assert_gemv_near_numpy(&e.name, &qm, &x, &deq, &y_np, &slack);
        checked += y.len();
        // numpy's bound must allow for the activations' rounding; on the
        // same quantized activations the kernels are held to gguf-py's
        // weights far tighter.
        assert_bits_eq(&e.name, &m.dequantize(), &e.w("deq"), e.n);
        common::check_kernels(&qm, &m, &x, e.k, 1, &y);
    }
    assert!(checked > 20, "only {checked} outputs checked");
}

/// Q5_0 end to end on every int8 ISA this CPU runs: gguf-py's quantized
/// tensors (random rows, the edge rows, K up to 256, N up to 40), read from
/// its GGUF files, dequantized bit for bit as gguf-py (as in `gguf_codec.rs`),
/// repacked and multiplied by the GEMV and GEMM kernels for 1..=9 rows,
/// against the exact oracle on the same quantized activations; and the
/// default `Matrix::from_gguf` path picks the best ISA here.
#[test]
fn q5_0_gguf_py_tensors_on_every_isa_match_the_oracle() {
    if !common::i8_format_built("q5_0") {
        return;
    }
    let files = files();
    let reg = kgen_runtime::Registry::builtin();
    let isas: Vec<&str> = reg
        .runnable(
            kgen_runtime::WeightFormat::Ggml(GgmlType::Q5_0),
            kgen_runtime::Op::Gemv,
        )
        .iter()
        .map(|e| e.isa)
        .collect();
    let mut checked = 0;
    for e in manifest()
        .into_iter()
        .filter(|e| e.dtype == GgmlType::Q5_0 && !e.name.starts_with("special."))
    {
        let m = files[&e.file].matrix(&e.name).unwrap();
        assert_bits_eq(&e.name, &m.dequantize(), &e.w("deq"), e.n);
        let best = kgen_runtime::Matrix::from_gguf(file(&e.file), &e.name).unwrap();
        assert_eq!(best.gemv_kernel().isa, isas[0]);
        for isa in &isas {
            let qm = kgen_runtime::Matrix::from_ggml_with(&reg.with_isa(Some(isa)), &m).unwrap();
            assert_eq!((qm.gemv_kernel().isa, qm.gemm_kernel().isa), (*isa, *isa));
            for rows in 1..=9 {
                let x = kgen::format::rng::Rng::new(rows as u64).vec_f32(rows * e.k);
                let mut y = vec![f32::NAN; rows * e.n];
                qm.gemm(&x, rows, &mut y).unwrap();
                let what = format!("{} {} rows {rows}", e.name, qm.gemm_kernel().name);
                let int = common::int_scales_of(qm.gemm_kernel());
                common::check_i8_with(&m, &x, e.k, rows, &y, &what, int);
                checked += 1;
            }
        }
    }
    assert!(checked >= 9 * 10 * isas.len(), "only {checked} runs");
}

/// kgen's IQ4_NL quantizer on gguf-py's test weights (random rows with
/// outliers, and the edge rows: zeros, ties, subnormal and tiny values),
/// its bytes written into a GGUF file by gguf-py's `GGUFWriter` and
/// dequantized by gguf-py: kgen reads the file back, dequantizes bit for bit
/// as gguf-py, and its IQ4_NL kernels match numpy's `x @ deq.T` within the
/// bound of `int8_kernels_match_numpy_on_gguf_py_files`.
#[test]
fn iq4_nl_bytes_from_kgen_round_trip_through_gguf_py() {
    let dir = tempfile::Builder::new()
        .prefix("iq4nl-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let mut list = String::new();
    let mut mats = Vec::new();
    for e in manifest()
        .into_iter()
        .filter(|e| e.k % 32 == 0 && e.dtype != GgmlType::IQ4_NL && !e.name.starts_with("special."))
        .filter(|e| e.dtype == GgmlType::Q4_0 || e.name.starts_with("f32."))
    {
        let m = GgmlMatrix::quantize_iq4_nl(&e.w("orig"), e.k, e.n);
        m.validate()
            .unwrap_or_else(|err| panic!("{}: {err}", e.name));
        let name = format!("kgen.{}", e.name);
        std::fs::write(dir.path().join(format!("{name}.bin")), &m.data).unwrap();
        std::fs::copy(e.data("x"), dir.path().join(format!("{name}.x"))).unwrap();
        list += &format!("{name} {} {}\n", e.k, e.n);
        mats.push((name, m));
    }
    assert!(mats.len() >= 10, "{} matrices", mats.len());
    std::fs::write(dir.path().join("list.txt"), list).unwrap();
    let gguf_path = from_bytes(dir.path(), GgmlType::IQ4_NL);
    let g = GgufFile::open(&gguf_path).unwrap();
    let mut checked = 0;
    for (name, m) in &mats {
        let (k, n) = (m.k, m.n);
        let read = g.matrix(name).unwrap();
        assert_eq!(&read, m, "{name}");
        // gguf-py's dequantize is N x K.
        let nk = read_f32(&dir.path().join(format!("{name}.deq")));
        let mut theirs = vec![0f32; k * n];
        for j in 0..n {
            for i in 0..k {
                theirs[i * n + j] = nk[j * k + i];
            }
        }
        assert_bits_eq(name, &m.dequantize(), &theirs, n);
        if !common::i8_format_built("iq4_nl") {
            continue;
        }
        let qm = kgen_runtime::Matrix::from_gguf(&gguf_path, name).unwrap();
        assert!(qm.gemv_kernel().name.starts_with("iq4_nl_gemv_"));
        let x = read_f32(&dir.path().join(format!("{name}.x")));
        let y_np = read_f32(&dir.path().join(format!("{name}.y")));
        checked += assert_gemv_near_numpy(name, &qm, &x, &nk, &y_np, &[]).len();
    }
    assert!(
        checked > 100 || !common::i8_format_built("iq4_nl"),
        "only {checked} outputs checked"
    );
}

/// `Matrix::from_gguf` on every 2-D tensor gguf-py wrote: those of the int8
/// family's formats run on it in their own format (if this build has its
/// kernels), the others (F32, F16, and formats no int8 kernel runs yet, such
/// as Q6_K) are refused with an error naming the file, the tensor and the
/// type.
#[test]
fn matrix_from_gguf_picks_the_int8_family_and_refuses_floats() {
    let (mut quantized, mut floats) = (0, 0);
    for e in manifest().into_iter().filter(|e| e.matmul) {
        // A build with KGEN_SPECS may leave out some int8 formats.
        if e.dtype.format().int8.is_some() && !common::i8_format_built(e.dtype.tag()) {
            continue;
        }
        let r = kgen_runtime::Matrix::from_gguf(file(&e.file), &e.name);
        match kgen_runtime::WeightFormat::from_ggml(e.dtype) {
            Some(format) => {
                let m = r.unwrap_or_else(|err| panic!("{}: {err}", e.name));
                assert_eq!(m.family(), kgen_runtime::Family::Int8, "{}", e.name);
                assert_eq!((m.format(), m.k(), m.n()), (format, e.k, e.n));
                assert_eq!(m.kernel().format, format.to_string());
                quantized += 1;
            }
            None => {
                let err = r.unwrap_err();
                assert!(
                    matches!(err, kgen_runtime::Error::Unsupported(_)),
                    "{}: {err}",
                    e.name
                );
                let msg = err.to_string();
                assert!(
                    msg.contains(&e.name)
                        && msg.contains(e.dtype.name())
                        && msg.contains(&e.file)
                        && msg.contains("Matrix::from_f32"),
                    "{msg}"
                );
                floats += 1;
            }
        }
    }
    assert!(
        quantized > 0 && floats > 0,
        "{quantized} quantized, {floats} float tensors"
    );
}
