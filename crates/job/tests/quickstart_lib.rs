//! The main job through the library, without the binary: a first run starts the history;
//! against a history that is twice as fast as this machine (six synthetic runs made from the
//! first run's records with every sample halved, 1 % apart, in a store of their own), the
//! next run is a regression:
//! re-measured as confirmation runs, then FAIL with exit 1. Bad options error before
//! anything is measured or written.

use std::path::PathBuf;
use tensorforge_job::quickstart::{run_quickstart, QuickstartOptions, QUICKSTART_LABEL_KEY};
use tensorforge_measure::calibrate::tiny_options;
use tensorforge_store::Store;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tf-job-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn opts(dir: &std::path::Path) -> QuickstartOptions {
    let mut o = QuickstartOptions::new(dir.join("store.sqlite"), dir.join("out"));
    o.time_budget_ns = 20_000_000;
    o.min_iterations = 10;
    o.calibration = tiny_options(1);
    o
}

#[test]
fn first_run_then_a_regression_against_a_faster_history() {
    let dir = tmp("hist");
    let o = opts(&dir);
    let first = run_quickstart(&o, &mut |_| {}).unwrap();
    assert_eq!(first.exit_code, 0);
    assert_eq!(first.history_runs, 0);
    assert!(
        first.decision.contains("baseline established"),
        "{}",
        first.decision
    );
    let md = std::fs::read_to_string(&first.markdown_path).unwrap();
    assert!(md.contains("Model validation") && md.contains("How this was decided"));
    assert!(
        md.contains("**Decision: BASELINE ESTABLISHED** (exit 0)"),
        "{md}"
    );
    let html = std::fs::read_to_string(&first.html_path).unwrap();
    tensorforge_ops::markup::check_well_formed(&html).unwrap();

    // Six synthetic earlier runs in a second store, each the first run with samples
    // × 0.5 · (1 + i/100).
    let recs = Store::open(&o.store_path)
        .unwrap()
        .run_records(&first.run_id)
        .unwrap();
    let mut o = o.clone();
    o.store_path = dir.join("store2.sqlite");
    let store = Store::open(&o.store_path).unwrap();
    for i in 0..6 {
        let run: Vec<_> = recs
            .iter()
            .map(|r| {
                let samples: Vec<f64> = r
                    .samples_ns
                    .iter()
                    .map(|x| x * 0.5 * (1.0 + i as f64 / 100.0))
                    .collect();
                let mut n = tensorforge_store::Record::new(tensorforge_store::RecordParts {
                    run_id: format!("synthetic-{i}"),
                    workload: r.workload.clone(),
                    device: r.device.clone(),
                    software: r.software.clone(),
                    harness: r.harness.clone(),
                    samples_ns: samples,
                    flops: r.flops,
                    bytes: r.bytes,
                    peak_alloc_bytes: r.peak_alloc_bytes,
                    timestamp_unix_s: r.timestamp_unix_s - 100 + i,
                    labels: r.labels.clone(),
                    source: r.source.clone(),
                })
                .unwrap();
                n.labels
                    .insert(QUICKSTART_LABEL_KEY.into(), "quickstart-1t".into());
                // Runs without machine-probe labels: no machine-drift check applies, so the
                // verdict does not depend on how busy the test machine is.
                n.labels.remove(tensorforge_job::machine::FMA_LABEL);
                n.labels.remove(tensorforge_job::machine::COPY_LABEL);
                n
            })
            .collect();
        store.insert_run(&run).unwrap();
    }
    let second = run_quickstart(&o, &mut |_| {}).unwrap();
    assert_eq!(second.history_runs, 6);
    // Twice as slow as a tight history: FAIL, confirmed by re-measurement.
    assert_eq!(second.exit_code, 1, "{:#?}", second);
    assert!(second.decision.contains("FAIL"), "{}", second.decision);
    assert!(!second.confirmations.is_empty());
    let md = std::fs::read_to_string(&second.markdown_path).unwrap();
    assert!(md.find("**Decision: FAIL**").unwrap() < md.find("Confirmation").unwrap());
}

#[test]
fn bad_options_error_before_measuring() {
    let dir = tmp("bad");
    let mut o = opts(&dir);
    o.threads = 0;
    let e = run_quickstart(&o, &mut |_| {}).unwrap_err().to_string();
    assert!(e.contains("threads") && e.contains('0'), "{e}");
    let mut o = opts(&dir);
    std::fs::create_dir_all(o.out_dir.join("report.html")).unwrap();
    o.min_iterations = 5;
    let e = run_quickstart(&o, &mut |_| {}).unwrap_err().to_string();
    assert!(e.contains("report.html") && e.contains("directory"), "{e}");
    assert!(!o.store_path.exists(), "nothing recorded");
}
