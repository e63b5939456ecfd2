//! A tiny real tuning run: candidates compiled into a scratch crate, checked
//! against the reference, timed, written to a profile; then a cache hit.

use kgen::spec::{Group, KernelSpec, Op};
use kgen::tune::{tune, TuneRequest};
use std::time::Duration;

#[test]
fn tiny_tune_writes_a_profile_then_hits_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let target = kgen::target::load("native").unwrap();
    let req = TuneRequest {
        spec: KernelSpec::new(Op::Gemv, 4, Group::Size(32)).unwrap(),
        shapes: vec![(256, 256)],
        threads: 1,
        // Generous: the first build of the scratch crate compiles its dependencies.
        budget: Duration::from_secs(900),
        force: false,
        profile_dir: dir.path().to_path_buf(),
        max_tiles: 3,
        progress: false,
    };
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

    let second = tune(&target, &req).unwrap();
    assert!(second.cache_hit);
    assert_eq!(second.entry, first.entry);

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
