//! Store ingest rate: writes one run of 500 records x 1,000 samples (500,000 samples) into a
//! fresh store in a temporary directory and prints samples per second for `insert_run`
//! (validation, serialization, SQLite insert and commit). Sample values are full-precision
//! floats, as a harness produces. Run: `cargo run --release -p tensorforge-store --example ingest_rate`.

use std::collections::BTreeMap;
use std::time::Instant;
use tensorforge_store::{
    new_run_id, DeviceContext, HarnessSettings, Record, SoftwareContext, Store, WorkloadIdentity,
};

const RECORDS: usize = 500;
const SAMPLES: usize = 1_000;

fn main() {
    let dir = std::env::temp_dir().join(format!("tf-ingest-rate-{}", new_run_id()));
    let path = dir.join("bench.sqlite");
    let store = match Store::open(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let run = new_run_id();
    let mut rng = tensorforge_core::rng::SplitMix64::new(1);
    let records: Vec<Record> = (0..RECORDS)
        .map(|i| {
            let mut params = BTreeMap::new();
            params.insert("m".into(), serde_json::json!(64 + i));
            let samples: Vec<f64> = (0..SAMPLES)
                .map(|_| 10_000.0 + rng.next_f64() * 1_003.0)
                .collect();
            Record::new(tensorforge_store::RecordParts {
                run_id: run.clone(),
                workload: WorkloadIdentity {
                    kind: "gemm".into(),
                    name: format!("gemm_{i}"),
                    params,
                    dtype: "f32".into(),
                },
                device: DeviceContext {
                    kind: "cpu".into(),
                    machine_id: "bench".into(),
                    ..Default::default()
                },
                software: SoftwareContext::default(),
                harness: HarnessSettings::default(),
                samples_ns: samples,
                flops: Some(1e9),
                bytes: None,
                peak_alloc_bytes: None,
                timestamp_unix_s: 1_700_000_000,
                labels: BTreeMap::new(),
                source: "harness".into(),
            })
            .expect("valid synthetic record")
        })
        .collect();
    let t = Instant::now();
    let result = store.insert_run(&records);
    let secs = t.elapsed().as_secs_f64();
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    let n = RECORDS * SAMPLES;
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let db = size(&path);
    let wal = size(&path.with_extension("sqlite-wal"));
    println!(
        "insert_run: {RECORDS} records x {SAMPLES} samples = {n} samples in {:.1} ms -> {:.0} samples/s",
        secs * 1e3,
        n as f64 / secs,
    );
    println!(
        "on disk: database file {:.1} bytes/sample, WAL (not yet checkpointed) {:.1} bytes/sample",
        db as f64 / n as f64,
        wal as f64 / n as f64
    );
    let t = Instant::now();
    let back = store.run_records(&run).map(|r| r.len()).unwrap_or(0);
    let rs = t.elapsed().as_secs_f64();
    println!(
        "run_records: {back} records read back in {:.1} ms -> {:.0} samples/s",
        rs * 1e3,
        (back * SAMPLES) as f64 / rs
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
