//! The model-level API: a GGUF file opened mapped, its tensors listed, one
//! loaded alone, all 2-D quantized ones loaded on the pool.

mod common;

use common::i8_format_built;
use kgen::format::ggml::{gguf_image_raw, GgmlMatrix, GgmlType};
use kgen::format::rng::Rng;
use kgen_runtime::{Error, Matrix, Model, Pool};

fn quantized(k: usize, n: usize, t: GgmlType, seed: u64) -> GgmlMatrix {
    GgmlMatrix::quantize(&Rng::new(seed).vec_f32(k * n), k, n, t)
}

#[test]
fn open_list_load_one_and_load_all() {
    assert!(i8_format_built("q4_0") && i8_format_built("q8_0"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let (a, b) = (
        quantized(64, 16, GgmlType::Q4_0, 1),
        quantized(96, 24, GgmlType::Q8_0, 2),
    );
    // A Q8_K tensor (type 15, llama.cpp's activation blocks), which no
    // kernel runs: 512 values, 584 bytes.
    let k_quant = [0u8; 584];
    let image = gguf_image_raw(&[
        ("blk.0.a", a.dtype.id(), &[a.k, a.n], &a.data),
        ("blk.0.b", b.dtype.id(), &[b.k, b.n], &b.data),
        ("norm", GgmlType::F32.id(), &[32, 2], &[0u8; 32 * 2 * 4]),
        ("blk.0.kq", 15, &[256, 2], &k_quant),
    ]);
    std::fs::write(&path, image).unwrap();

    let model = Model::open(&path).unwrap();
    let listed: Vec<(String, String, Vec<u64>)> = model
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), t.type_name(), t.dims.clone()))
        .collect();
    assert_eq!(
        listed,
        [
            ("blk.0.a".into(), "Q4_0".into(), vec![64, 16]),
            ("blk.0.b".into(), "Q8_0".into(), vec![96, 24]),
            ("norm".into(), "F32".into(), vec![32, 2]),
            ("blk.0.kq".into(), "Q8_K".into(), vec![256, 2]),
        ]
    );

    // One tensor, the same as Matrix::from_gguf gives.
    let one = model.matrix("blk.0.b").unwrap();
    let alone = Matrix::from_gguf(&path, "blk.0.b").unwrap();
    let x = Rng::new(4).vec_f32(96);
    let (mut y1, mut y2) = (vec![0.0; 24], vec![0.0; 24]);
    one.gemv(&x, &mut y1).unwrap();
    alone.gemv(&x, &mut y2).unwrap();
    assert_eq!(y1, y2);
    let e = model.matrix("blk.0.kq").unwrap_err();
    assert!(e.to_string().contains("Q8_K"), "{e}");
    assert!(matches!(model.matrix("nope"), Err(Error::Load(_))));

    // All of them: the two quantized matrices, the K-quant reported, the
    // float tensor left alone, after the release of every tensor's pages.
    let all = model.load_all(&Pool::new(2)).unwrap();
    let names: Vec<&str> = all.matrices.keys().map(String::as_str).collect();
    assert_eq!(names, ["blk.0.a", "blk.0.b"]);
    assert_eq!(all.unsupported.len(), 1);
    assert_eq!(all.unsupported[0].0, "blk.0.kq");
    let types: Vec<(&str, usize, usize)> = all
        .types
        .iter()
        .map(|t| (t.type_name.as_str(), t.count, t.bytes))
        .collect();
    assert_eq!(
        types,
        [("Q4_0", 1, a.data.len()), ("Q8_0", 1, b.data.len())]
    );
    assert!(
        all.types[0].kernel.starts_with("q4_0_gemv_"),
        "{:?}",
        all.types
    );
    let mut y3 = vec![0.0; 24];
    all.matrices["blk.0.b"].gemv(&x, &mut y3).unwrap();
    assert_eq!(y1, y3);
    // Released pages read back from the file.
    let again = model.matrix("blk.0.b").unwrap();
    again.gemv(&x, &mut y3).unwrap();
    assert_eq!(y1, y3);
}

#[test]
fn corrupt_and_missing_files_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    for bytes in [
        &b""[..],
        b"GGUF",
        b"GGUF\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff",
    ] {
        std::fs::write(&path, bytes).unwrap();
        let e = Model::open(&path).unwrap_err().to_string();
        assert!(e.contains("bad.gguf"), "{e}");
    }
    let e = Model::open(dir.path().join("missing.gguf"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.gguf"), "{e}");
}

/// Stacks of experts (3-D tensors, `dims = [k, n, experts]`) written by
/// kgen's own GGUF writer: loaded one expert or all at once, run routed, and
/// bad ones refused with the tensor and expert named, without looping over
/// or allocating for a count the file cannot hold.
#[test]
fn expert_stacks_load_route_and_refuse_bad_input() {
    assert!(i8_format_built("q4_0"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("moe.gguf");
    let (k, n) = (64, 24);
    let mats: Vec<GgmlMatrix> = (0..4)
        .map(|e| quantized(k, n, GgmlType::Q4_0, 10 + e))
        .collect();
    let stack: Vec<u8> = mats.iter().flat_map(|m| m.data.clone()).collect();
    // Expert 2 of a second stack has a NaN scale (f16 0x7e00) in a block.
    let mut nan = stack.clone();
    let at = 2 * mats[0].data.len() + 18 * 5;
    nan[at..at + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
    let dense = quantized(k, n, GgmlType::Q4_0, 3);
    let image = gguf_image_raw(&[
        ("blk.0.ffn_up_exps.weight", 2, &[k, n, 4], &stack),
        ("blk.0.attn_q.weight", 2, &[k, n], &dense.data),
        // Q8_K (type 15, 256 values in 292 bytes): no kernel.
        (
            "blk.1.ffn_up_exps.weight",
            15,
            &[256, 1, 3],
            &[0u8; 292 * 3],
        ),
    ]);
    std::fs::write(&path, image).unwrap();
    let model = Model::open(&path).unwrap();
    let x = Rng::new(5).vec_f32(k);

    let experts = model.experts("blk.0.ffn_up_exps.weight").unwrap();
    assert_eq!((experts.len(), experts.k(), experts.n()), (4, k, n));
    // The experts' weights share one huge-page arena; a lone matrix's do not.
    assert!(experts.iter().all(Matrix::weights_in_arena));
    assert!(!model
        .matrix("blk.0.attn_q.weight")
        .unwrap()
        .weights_in_arena());
    assert!(!model
        .expert("blk.0.ffn_up_exps.weight", 1)
        .unwrap()
        .weights_in_arena());
    for (e, m) in mats.iter().enumerate() {
        let (mut a, mut b, mut c) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        experts.get(e).unwrap().gemv(&x, &mut a).unwrap();
        Matrix::from_ggml(m).unwrap().gemv(&x, &mut b).unwrap();
        model
            .expert("blk.0.ffn_up_exps.weight", e)
            .unwrap()
            .gemv(&x, &mut c)
            .unwrap();
        assert_eq!((&a, &a), (&b, &c), "expert {e}");
    }
    let mut y = vec![0.0; 2 * n];
    experts.gemv_selected(&[3, 1], &x, &mut y).unwrap();
    for (row, e) in [3, 1].into_iter().enumerate() {
        let mut want = vec![0.0; n];
        Matrix::from_ggml(&mats[e])
            .unwrap()
            .gemv(&x, &mut want)
            .unwrap();
        assert_eq!(&y[row * n..(row + 1) * n], &want[..], "row {row}");
    }
    let before = y.clone();
    assert!(matches!(
        experts.gemv_selected(&[1, 4], &x, &mut y),
        Err(Error::Shape(_))
    ));
    assert!(matches!(
        experts.gemv_selected(&[0, 1], &x, &mut y[..n]),
        Err(Error::Shape(_))
    ));
    assert_eq!(y, before, "an error writes nothing");
    experts.gemv_selected(&[], &x, &mut []).unwrap();

    // Asking for the wrong thing is an error naming the tensor.
    let e = model.expert("blk.0.ffn_up_exps.weight", 4).unwrap_err();
    assert!(matches!(e, Error::Shape(_)), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("no expert 4: the stack has 4") && e.contains("ffn_up_exps"),
        "{e}"
    );
    let e = model
        .expert("blk.0.ffn_up_exps.weight", usize::MAX)
        .unwrap_err();
    assert!(matches!(e, Error::Shape(_)), "{e}");
    let e = model
        .experts("blk.0.attn_q.weight")
        .unwrap_err()
        .to_string();
    assert!(e.contains("a stack of experts needs 3"), "{e}");
    let e = model
        .matrix("blk.0.ffn_up_exps.weight")
        .unwrap_err()
        .to_string();
    assert!(e.contains("a stack of 4 experts"), "{e}");
    let e = model.experts("blk.1.ffn_up_exps.weight").unwrap_err();
    assert!(
        matches!(e, Error::Unsupported(_)) && e.to_string().contains("Q8_K"),
        "{e}"
    );
    // load_all: the dense matrix, the stack, the Q8_K stack reported once.
    let all = model.load_all(&Pool::new(2)).unwrap();
    assert_eq!(all.matrices.len(), 1);
    assert_eq!(all.experts["blk.0.ffn_up_exps.weight"].len(), 4);
    assert!(all.experts["blk.0.ffn_up_exps.weight"]
        .iter()
        .all(Matrix::weights_in_arena));
    let unsupported: Vec<&str> = all.unsupported.iter().map(|u| u.0.as_str()).collect();
    assert_eq!(unsupported, ["blk.1.ffn_up_exps.weight"]);
    let q4 = &all.types[0];
    assert_eq!((q4.count, q4.matrices), (2, 5), "{q4:?}");
    assert!(q4.to_string().contains("(5 matrices)"), "{q4}");

    // A NaN scale in expert 2: the error names the tensor and the expert.
    let bad = dir.path().join("nan.gguf");
    std::fs::write(
        &bad,
        gguf_image_raw(&[("blk.0.ffn_gate_exps.weight", 2, &[k, n, 4], &nan)]),
    )
    .unwrap();
    let model = Model::open(&bad).unwrap();
    for e in [0, 1, 3] {
        model.expert("blk.0.ffn_gate_exps.weight", e).unwrap();
    }
    let e = model
        .experts("blk.0.ffn_gate_exps.weight")
        .unwrap_err()
        .to_string();
    assert!(e.contains("ffn_gate_exps") && e.contains("expert 2"), "{e}");
    let e = model.load_all(&Pool::new(2)).unwrap_err().to_string();
    assert!(e.contains("expert 2"), "{e}");

    // Stacks a loader must refuse without looping over or allocating for
    // what the header claims: 2^40 empty experts, more experts than kgen
    // loads (each a block), no experts; and a type no kernel runs with no
    // experts, which is unsupported, not corrupt.
    let blocks = vec![0u8; 18 * 4097];
    let cases: [(&[usize], u32, &[u8], &str); 4] = [
        (
            &[32, 0, 1 << 40],
            2,
            &[],
            "claims a stack of 1099511627776 matrices",
        ),
        (
            &[32, 1, 4097],
            2,
            &blocks,
            "claims a stack of 4097 matrices",
        ),
        (&[32, 4, 0], 2, &[], "a stack of no matrices"),
        (&[256, 1, 0], 16, &[], "a stack of no matrices"),
    ];
    for (i, (dims, id, data, want)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("case{i}.gguf"));
        std::fs::write(&path, gguf_image_raw(&[("t", id, dims, data)])).unwrap();
        let model = Model::open(&path).unwrap();
        let e = model.experts("t").unwrap_err().to_string();
        assert!(e.contains(want), "case {i}: {e}");
        match model.load_all(&Pool::new(2)) {
            Err(e) => assert!(e.to_string().contains(want), "case {i}: {e}"),
            Ok(all) => {
                assert_eq!(id, 16, "case {i}");
                assert!(all.unsupported[0].1.to_string().contains(want));
            }
        }
    }
    // A quantized tensor of 4 dimensions is listed, not silently skipped.
    let path = dir.path().join("4d.gguf");
    std::fs::write(
        &path,
        gguf_image_raw(&[("t", 2, &[32, 1, 1, 2], &[0u8; 36])]),
    )
    .unwrap();
    let all = Model::open(&path).unwrap().load_all(&Pool::new(1)).unwrap();
    let e = all.unsupported[0].1.to_string();
    assert!(e.contains("has 4 dimensions"), "{e}");
}

/// The routed products of a stack against each expert's own GEMV and GEMM,
/// on every int8 ISA here (the fused GEMV claims all the picked experts'
/// panels from one range, so it is run on 1 and 2 threads and on a ragged
/// N, whose last panel is narrower than the tile), bit for bit.
#[test]
fn routed_products_match_each_expert_on_every_isa() {
    use kgen_runtime::{Experts, Op, Registry, WeightFormat};
    let reg = Registry::builtin();
    // Big enough for several claims on 2 threads, some across two experts.
    for (dtype, k, n) in [(GgmlType::Q4_0, 1024, 168), (GgmlType::Q4_K, 512, 200)] {
        if !i8_format_built(dtype.tag()) {
            continue;
        }
        let mats: Vec<GgmlMatrix> = (0..6).map(|e| quantized(k, n, dtype, 40 + e)).collect();
        let isas: Vec<&str> = reg
            .runnable(WeightFormat::Ggml(dtype), Op::Gemv)
            .iter()
            .map(|e| e.isa)
            .collect();
        assert!(!isas.is_empty());
        for isa in isas {
            let r = reg.with_isa(Some(isa));
            let one = |m: &GgmlMatrix| Matrix::from_ggml_with(&r, m).unwrap();
            let stack = Experts::new(mats.iter().map(one).collect()).unwrap();
            assert_eq!(stack[0].gemv_kernel().isa, isa);
            let mut rng = Rng::new(7);
            let x = rng.vec_f32(4 * k);
            let what = format!("{dtype} {isa}");
            let own = |e: usize, x: &[f32]| {
                let mut y = vec![0f32; n];
                stack[e].gemv(x, &mut y).unwrap();
                y
            };
            for threads in [1, 2] {
                let pool = Pool::new(threads);
                // One row to five experts, one of them twice.
                let ids = [5, 0, 3, 5, 2];
                let mut y = vec![f32::NAN; ids.len() * n];
                let calls = pool.stats().calls;
                stack
                    .gemv_selected_on(&pool, &ids, &x[..k], &mut y)
                    .unwrap();
                // One call, split over the threads (the multi-claim path).
                assert_eq!(pool.stats().calls, calls + u64::from(threads > 1), "{what}");
                let input = stack.quantize_input(&x[..k]).unwrap();
                let mut y2 = vec![f32::NAN; ids.len() * n];
                stack
                    .gemv_selected_input_on(&pool, &input, &ids, &mut y2)
                    .unwrap();
                // A row per pick.
                let mut y3 = vec![f32::NAN; ids.len() * n];
                let xs = rng.vec_f32(ids.len() * k);
                stack.gemv_each_on(&pool, &ids, &xs, &mut y3).unwrap();
                for (i, &e) in ids.iter().enumerate() {
                    let row = i * n..(i + 1) * n;
                    assert_eq!(
                        y[row.clone()],
                        own(e, &x[..k]),
                        "{what} {threads}T pick {i}"
                    );
                    assert_eq!(y2[row.clone()], y[row.clone()], "{what} input pick {i}");
                    let xi = &xs[i * k..(i + 1) * k];
                    assert_eq!(y3[row], own(e, xi), "{what} {threads}T each {i}");
                }
            }
            // A batch of 4 rows, top-2 each; expert 4 gets three rows.
            let ids = [4, 1, 4, 0, 3, 4, 1, 2];
            let mut y = vec![f32::NAN; ids.len() * n];
            stack.gemm_routed(&x, 4, &ids, &mut y).unwrap();
            for e in 0..6 {
                let rows: Vec<usize> = (0..ids.len()).filter(|&s| ids[s] == e).collect();
                if rows.is_empty() {
                    continue;
                }
                let xg: Vec<f32> = rows
                    .iter()
                    .flat_map(|&s| x[s / 2 * k..(s / 2 + 1) * k].to_vec())
                    .collect();
                let mut want = vec![0f32; rows.len() * n];
                stack[e].gemm(&xg, rows.len(), &mut want).unwrap();
                for (j, &s) in rows.iter().enumerate() {
                    assert_eq!(
                        y[s * n..(s + 1) * n],
                        want[j * n..(j + 1) * n],
                        "{what} slot {s}"
                    );
                }
            }
            assert!(matches!(
                stack.gemm_routed(&x, 4, &ids[..7], &mut y[..7 * n]),
                Err(Error::Shape(_))
            ));
        }
    }
}

/// Older Mixtral files store each expert as its own 2-D tensor
/// (`blk.N.ffn_up.E.weight`): they load as a stack under the merged name
/// (`blk.N.ffn_up_exps.weight`), through `Model::experts`, `Model::expert`
/// and `Model::load_all`, the same matrices as each tensor loaded alone.
#[test]
fn per_expert_tensors_load_as_one_stack() {
    use kgen::format::ggml::{gguf_image_raw_with, Meta};
    assert!(i8_format_built("q4_0") && i8_format_built("q8_0"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixtral-old.gguf");
    let (k, n) = (64, 24);
    let up: Vec<GgmlMatrix> = (0..3)
        .map(|e| quantized(k, n, GgmlType::Q4_0, 30 + e))
        .collect();
    let gate: Vec<GgmlMatrix> = (0..3)
        .map(|e| quantized(k, n, GgmlType::Q8_0, 40 + e))
        .collect();
    let dense = quantized(k, n, GgmlType::Q4_0, 50);
    let names: Vec<String> = (0..3)
        .flat_map(|e| {
            [
                format!("blk.0.ffn_up.{e}.weight"),
                format!("blk.0.ffn_gate.{e}.weight"),
            ]
        })
        .collect();
    // Expert order in the file is not expert order: 2, 0, 1.
    let mut tensors: Vec<(&str, u32, &[usize], &[u8])> = Vec::new();
    let dims = [k, n];
    for e in [2, 0, 1] {
        tensors.push((&names[2 * e], 2, &dims, &up[e].data));
        tensors.push((&names[2 * e + 1], 8, &dims, &gate[e].data));
    }
    tensors.push(("blk.0.attn_q.weight", 2, &dims, &dense.data));
    let meta = [
        ("general.architecture", Meta::Str("llama")),
        ("llama.expert_count", Meta::U32(3)),
    ];
    std::fs::write(&path, gguf_image_raw_with(&meta, &tensors)).unwrap();

    let model = Model::open(&path).unwrap();
    assert_eq!(model.file().expert_count(), Some(3));
    let x = Rng::new(6).vec_f32(k);
    let gemv = |m: &Matrix| {
        let mut y = vec![0.0; n];
        m.gemv(&x, &mut y).unwrap();
        y
    };
    for (merged, mats, kind) in [
        ("blk.0.ffn_up_exps.weight", &up, "ffn_up"),
        ("blk.0.ffn_gate_exps.weight", &gate, "ffn_gate"),
    ] {
        let stack = model.experts(merged).unwrap();
        assert_eq!((stack.len(), stack.k(), stack.n()), (3, k, n), "{merged}");
        for (e, m) in mats.iter().enumerate() {
            let want = gemv(&Matrix::from_ggml(m).unwrap());
            assert_eq!(gemv(stack.get(e).unwrap()), want, "{merged} expert {e}");
            assert_eq!(gemv(&model.expert(merged, e).unwrap()), want);
            let alone = model.matrix(&format!("blk.0.{kind}.{e}.weight")).unwrap();
            assert_eq!(gemv(&alone), want);
        }
        let e = model.expert(merged, 3).unwrap_err();
        assert!(matches!(e, Error::Shape(_)), "{e}");
    }

    let all = model.load_all(&Pool::new(2)).unwrap();
    assert_eq!(
        all.experts.keys().collect::<Vec<_>>(),
        ["blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight"]
    );
    // Per-expert tensors repack into their stack's arena too.
    assert!(all
        .experts
        .values()
        .all(|s| s.iter().all(Matrix::weights_in_arena)));
    assert!(model
        .experts("blk.0.ffn_up_exps.weight")
        .unwrap()
        .iter()
        .all(Matrix::weights_in_arena));
    assert!(!all.matrices["blk.0.attn_q.weight"].weights_in_arena());
    assert_eq!(
        all.matrices.keys().collect::<Vec<_>>(),
        ["blk.0.attn_q.weight"]
    );
    for (merged, mats) in [
        ("blk.0.ffn_up_exps.weight", &up),
        ("blk.0.ffn_gate_exps.weight", &gate),
    ] {
        let stack = &all.experts[merged];
        for (e, m) in mats.iter().enumerate() {
            let want = gemv(&Matrix::from_ggml(m).unwrap());
            assert_eq!(gemv(stack.get(e).unwrap()), want, "{merged} expert {e}");
        }
    }
    // Q4_0: the attention matrix and one stack; Q8_0: one stack.
    let counts: Vec<(String, usize, usize)> = all
        .types
        .iter()
        .map(|s| (s.type_name.clone(), s.count, s.matrices))
        .collect();
    assert_eq!(
        counts,
        [("Q4_0".to_string(), 2, 4), ("Q8_0".to_string(), 1, 3)]
    );
}

/// A file whose stacks of experts disagree with `{arch}.expert_count`, or
/// whose per-expert tensors do not make a whole stack, is refused when it
/// is opened, with the file and the tensor named.
#[test]
fn expert_counts_and_per_expert_groups_that_disagree_are_refused() {
    use kgen::format::ggml::{gguf_image_raw_with, Meta};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    let (k, n) = (32, 4);
    let m = quantized(k, n, GgmlType::Q4_0, 60);
    let m8 = quantized(k, n, GgmlType::Q8_0, 61);
    let stack: Vec<u8> = (0..3).flat_map(|_| m.data.clone()).collect();
    let arch = ("general.architecture", Meta::Str("qwen3moe"));
    let open = |meta: &[(&str, Meta)], tensors: &[(&str, u32, &[usize], &[u8])]| {
        std::fs::write(&path, gguf_image_raw_with(meta, tensors)).unwrap();
        Model::open(&path).map(|_| ()).map_err(|e| e.to_string())
    };
    let (d2, d3): (&[usize], &[usize]) = (&[k, n], &[k, n, 3]);
    let merged = ("blk.0.ffn_up_exps.weight", 2, d3, &stack[..]);
    let one = |e: usize| format!("blk.1.ffn_down.{e}.weight");
    let (e0, e1, e2, e3) = (one(0), one(1), one(2), one(3));

    // Agreeing counts, merged or per expert, open.
    let count3 = [arch, ("qwen3moe.expert_count", Meta::U32(3))];
    open(&count3, &[merged]).unwrap();
    let split3 = [
        (&e0[..], 2, d2, &m.data[..]),
        (&e1[..], 2, d2, &m.data[..]),
        (&e2[..], 2, d2, &m.data[..]),
    ];
    open(&count3, &split3).unwrap();
    // No count, or a count without an architecture: nothing to check.
    open(&[], &[merged]).unwrap();
    open(&[("qwen3moe.expert_count", Meta::U32(8))], &[merged]).unwrap();
    // A 3-D tensor that is not a stack of experts is not checked.
    let count8 = [arch, ("qwen3moe.expert_count", Meta::U32(8))];
    open(&count8, &[("blk.0.attn_k_b.weight", 2, d3, &stack[..])]).unwrap();

    let refused = [
        (
            open(&count8, &[merged]),
            vec![
                "blk.0.ffn_up_exps.weight",
                "stacks 3 experts",
                "qwen3moe.expert_count",
                "8",
            ],
        ),
        (
            open(
                &[arch, ("qwen3moe.expert_count", Meta::Str("three"))],
                &[merged],
            ),
            vec!["qwen3moe.expert_count", "not an integer"],
        ),
        (
            open(&count8, &split3),
            vec![
                "blk.1.ffn_down_exps.weight",
                "3 per-expert tensors",
                "says 8",
            ],
        ),
        (
            open(&[], &[split3[0], split3[2]]),
            vec![&e2[..], "expert 1 is missing"],
        ),
        (
            open(&[], &[split3[1], split3[2]]),
            vec![&e1[..], "expert 0 is missing"],
        ),
        (
            open(&[], &[split3[0], (&e1[..], 8, d2, &m8.data[..]), split3[2]]),
            vec![&e1[..], "Q8_0", "Q4_0"],
        ),
        (
            open(
                &[],
                &[split3[0], ("blk.1.ffn_down_exps.weight", 2, d3, &stack[..])],
            ),
            vec!["blk.1.ffn_down_exps.weight", "both merged"],
        ),
        (
            open(
                &[],
                &[split3[0], split3[1], (&e3[..], 2, &[k, n, 1], &m.data[..])],
            ),
            vec![&e3[..], "expert 2 is missing"],
        ),
        (
            open(&[], &[(&e0[..], 2, d3, &stack[..])]),
            vec![&e0[..], "3 dimensions"],
        ),
    ];
    for (i, (result, words)) in refused.iter().enumerate() {
        let e = result.as_ref().expect_err(&format!("case {i} opened"));
        assert!(e.contains("bad.gguf"), "case {i}: {e}");
        for w in words {
            assert!(e.contains(w), "case {i}: {e:?} lacks {w:?}");
        }
    }
}
