//! A tiny real tuning run: candidates compiled into a scratch crate, checked
//! against the reference, timed, written to a profile; then a cache hit.

use kgen::spec::{Group, KernelSpec, Op};
use kgen::tune::{tune, TuneRequest};
use std::path::Path;
use std::time::Duration;

/// A one-thread request into `dir`, not forced, no progress bar.
fn request<S>(spec: S, shape: (usize, usize), max_tiles: usize, dir: &Path) -> TuneRequest<S> {
    TuneRequest {
        spec,
        shapes: vec![shape],
        threads: 1,
        // Generous: the first build of the scratch crate compiles its dependencies.
        budget: Duration::from_secs(900),
        force: false,
        profile_dir: dir.to_path_buf(),
        max_tiles,
        progress: false,
    }
}

#[test]
fn tiny_tune_writes_a_profile_then_hits_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let target = kgen::target::load("native").unwrap();
    let spec = KernelSpec::new(Op::Gemv, 4, Group::Size(32)).unwrap();
    let req = request(spec, (256, 256), 3, dir.path());
    let first = tune(&target, &req).unwrap();
    assert!(!first.cache_hit);
    assert!(first.path.exists());
    let e = &first.entry;
    assert!(
        e.failed.is_empty(),
        "candidates failed the reference check: {:?}",
        e.failed
    );
    assert!(e.measured.len() >= 3, "{:?}", e.measured);
    assert!(
        e.measured
            .windows(2)
            .all(|w| w[0].median_s <= w[1].median_s),
        "sorted fastest first"
    );
    assert!(e.measured.iter().all(|m| m.median_s > 0.0 && m.gbs > 0.0));
    assert_eq!(
        e.measured.iter().filter(|m| m.model_pick).count(),
        1,
        "the model's own plan is measured"
    );
    assert_eq!(e.key.kgen_version, kgen::VERSION);

    // Beside the tiles, the machine's read bandwidth and clock, once:
    // `native` plans set their roofline against them.
    let profile = kgen::profile::Profile::load(&first.path).unwrap();
    let [mem] = &profile.machines[..] else {
        panic!("one machine entry: {:?}", profile.machines);
    };
    assert!(mem.matches(&target));
    assert!(mem.bandwidth_per_core_gbs > 0.0 && mem.bandwidth_gbs > 0.0);
    assert!(mem.dram_bytes >= 256 << 20);
    assert!(first.notes.iter().any(|n| n.contains("read bandwidth")));
    let (measured, note) =
        kgen::profile::with_measured_machine(&target, &kgen::profile::files_in(dir.path()));
    assert_eq!(measured.memory, mem.memory());
    if let Some(ghz) = mem.ghz {
        assert_eq!(measured.core.ghz, ghz);
    }
    assert!(note.is_some_and(|n| n.contains("kgen tune")));

    let second = tune(&target, &req).unwrap();
    assert!(second.cache_hit);
    assert_eq!(second.entry, first.entry);
    // Not measured again.
    assert!(second.notes.is_empty(), "{:?}", second.notes);
    let again = kgen::profile::Profile::load(&first.path).unwrap();
    assert_eq!(again.machines, profile.machines);

    // The planner then takes its tile from the profile, and says so.
    let mut r = kgen::Request::new(4, Group::Size(32), vec![Op::Gemv]);
    r.profiles = kgen::profile::files_in(dir.path());
    let plans = kgen::plans_for(&target, &r).unwrap();
    let best = e.winner().unwrap();
    assert_eq!(plans[0].tile, best.tile());
    assert_eq!(
        (plans[0].block.m_b, plans[0].block.t_b),
        (best.m_b, best.t_b)
    );
    assert!(matches!(
        plans[0].source,
        kgen::family::plan::TileSource::Profile(_)
    ));

    let report = kgen::tune::report(dir.path()).unwrap();
    assert!(
        report.contains("model pick") && report.contains("rank"),
        "{report}"
    );
}

/// A K-quant: its matrices' K is whole 256-value blocks and its L1 blocks
/// whole scale groups, in the reference check, the timed shapes and the
/// block variants alike (the harness once checked K = m_b + 96 and
/// panicked quantizing Q2_K).
#[test]
fn tiny_int8_tune_of_a_k_quant_uses_whole_blocks() {
    use kgen::family::int8::spec::I8Spec;
    let dir = tempfile::tempdir().unwrap();
    let target = kgen::target::load("native").unwrap();
    let spec = I8Spec::from_tag(Op::Gemv, "q2_k").unwrap();
    let req = request(spec, (300, 200), 2, dir.path());
    let e = kgen::tune::tune_i8(&target, &req).unwrap().entry;
    assert!(e.failed.is_empty(), "{:?}", e.failed);
    assert!(e.measured.len() >= 2, "{:?}", e.measured);
    assert!(
        e.measured.iter().all(|m| m.m_b % 256 == 0),
        "{:?}",
        e.measured
    );
}

/// The int8 family: a GEMV tune, then a GEMM tune on the GEMV's (tuned)
/// layout, both in one profile beside each other; generation takes both
/// tiles from it and says so in the header.
#[test]
fn tiny_int8_tune_keys_by_format_and_feeds_generation() {
    use kgen::family::int8::spec::I8Spec;
    use kgen::family::plan::TileSource;
    let dir = tempfile::tempdir().unwrap();
    let target = kgen::target::load("native").unwrap();
    let req = |op| {
        request(
            I8Spec::from_tag(op, "q4_0").unwrap(),
            (256, 256),
            3,
            dir.path(),
        )
    };
    let gemv = kgen::tune::tune_i8(&target, &req(Op::Gemv)).unwrap();
    assert!(!gemv.cache_hit);
    let e = &gemv.entry;
    assert!(e.failed.is_empty(), "{:?}", e.failed);
    assert!(e.measured.len() >= 3, "{:?}", e.measured);
    assert_eq!(
        (e.key.family.as_str(), e.key.format.as_str()),
        ("int8", "q4_0")
    );
    assert_eq!(e.measured.iter().filter(|m| m.model_pick).count(), 1);
    assert!(e
        .measured
        .iter()
        .all(|m| m.t_sub.is_some() && m.m_u.is_none()));

    let gemm_req = req(Op::Gemm { m: 8 });
    let gemm = kgen::tune::tune_i8(&target, &gemm_req).unwrap();
    let g = &gemm.entry;
    assert!(g.failed.is_empty(), "{:?}", g.failed);
    assert_eq!((g.key.op.as_str(), g.key.m), ("gemm", 8));
    // On the GEMV winner's layout.
    let v = e.winner().unwrap();
    assert!(g
        .measured
        .iter()
        .all(|m| (m.t_u, m.m_b, m.t_b) == (v.t_u, v.m_b, v.t_b)));
    assert!(kgen::tune::tune_i8(&target, &gemm_req).unwrap().cache_hit);

    // Generation reads both entries.
    let spec = I8Spec::from_tag(Op::Gemv, "q4_0").unwrap();
    let mut r = kgen::I8Request::new(spec, vec![Op::Gemv, Op::Gemm { m: 8 }]);
    r.profiles = kgen::profile::files_in(dir.path());
    let plans = kgen::plans_for_i8(&target, &r).unwrap();
    assert_eq!(plans[0].tile, v.i8_tile());
    assert_eq!((plans[0].block.m_b, plans[0].block.t_b), (v.m_b, v.t_b));
    assert_eq!(plans[1].tile, g.winner().unwrap().i8_tile());
    assert!(plans
        .iter()
        .all(|p| matches!(p.source, TileSource::Profile(_))));
    let text = kgen::family::file::emit_file(&target, &plans, "test")
        .unwrap()
        .text;
    assert_eq!(text.matches("tile from: tuning profile").count(), 2);

    let report = kgen::tune::report(dir.path()).unwrap();
    assert_eq!(report.lines().count(), 2, "{report}");
    assert!(
        report.contains("int8") && report.contains("q4_0 gemm(m=8)"),
        "{report}"
    );
}
