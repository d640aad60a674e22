//! Store rates on both engines in one process, alternating SQLite and PostgreSQL round by
//! round so both see the same machine load: ingest (one run of 100 records x 1,000
//! full-precision samples per round: validation, serialization, insert and commit) and the
//! history queries over 10,000 stored runs of one workload (the gate's history, the full
//! series the `history` command plots, a label baseline, the run list and a name lookup),
//! and, for scale, parsing the whole series' records from JSON with no database.
//! Prints min / median / max per engine. PostgreSQL runs in a fresh database on the server
//! that `TENSORFORGE_TEST_POSTGRES` names (an admin URL), dropped at the end; without it only
//! SQLite is measured.
//!
//! Run: `TENSORFORGE_TEST_POSTGRES=postgres://postgres:PW@127.0.0.1:PORT/postgres \
//!       cargo run --release -p tensorforge-store --example store_rates`

use std::collections::BTreeMap;
use std::time::Instant;
use tensorforge_core::rng::SplitMix64;
use tensorforge_store::testing::TestDatabase;
use tensorforge_store::{
    new_run_id, DeviceContext, HarnessSettings, Record, SoftwareContext, Store, StoreLocation,
    WorkloadIdentity,
};

const INGEST_ROUNDS: usize = 5;
const RECORDS: usize = 100;
const SAMPLES: usize = 1_000;
const HISTORY_RUNS: usize = 10_000;
const BATCH_RUNS: usize = 500;
const QUERY_ROUNDS: usize = 11;

/// One record of workload `gemm_<i>` with `samples` random latencies; even timestamps carry
/// label `main`, odd ones `pr`.
fn record(run: &str, i: usize, samples: usize, ts: i64, rng: &mut SplitMix64) -> Record {
    let mut params = BTreeMap::new();
    params.insert("m".into(), serde_json::json!(64 + i));
    let mut labels = BTreeMap::new();
    let label = if ts % 2 == 0 { "main" } else { "pr" };
    labels.insert("label".to_string(), label.to_string());
    Record::new(tensorforge_store::RecordParts {
        run_id: run.to_string(),
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
        samples_ns: (0..samples)
            .map(|_| 10_000.0 + rng.next_f64() * 1_003.0)
            .collect(),
        flops: Some(1e9),
        bytes: None,
        peak_alloc_bytes: None,
        timestamp_unix_s: ts,
        labels,
        source: "harness".into(),
    })
    .expect("valid synthetic record")
}

/// `min / median / max` of `v`, formatted by `f`.
fn spread(v: &mut [f64], f: impl Fn(f64) -> String) -> String {
    v.sort_by(f64::total_cmp);
    format!(
        "min {} / median {} / max {}",
        f(v[0]),
        f(v[v.len() / 2]),
        f(v[v.len() - 1])
    )
}

fn die(e: &dyn std::fmt::Display) -> ! {
    eprintln!("error: {e}");
    std::process::exit(2);
}

type Query<'a> = (&'a str, Box<dyn Fn(&Store) -> usize + 'a>);

fn main() {
    let dir = std::env::temp_dir().join(format!("tf-store-rates-{}", new_run_id()));
    let db = TestDatabase::create("store_rates example");
    let mut stores: Vec<(&str, Store)> = vec![(
        "sqlite",
        Store::open(&dir.join("rates.sqlite")).unwrap_or_else(|e| die(&e)),
    )];
    if let Some(db) = &db {
        let loc = StoreLocation::Postgres(Box::new(db.url.clone()));
        stores.push((
            "postgres",
            Store::open_location(&loc).unwrap_or_else(|e| die(&e)),
        ));
    }
    let mut rng = SplitMix64::new(1);
    let mut ingest: Vec<Vec<f64>> = vec![Vec::new(); stores.len()];
    for round in 0..INGEST_ROUNDS {
        for (k, (_, s)) in stores.iter().enumerate() {
            let run = new_run_id();
            let ts = 1_600_000_000 + round as i64;
            let recs: Vec<Record> = (0..RECORDS)
                .map(|i| record(&run, i, SAMPLES, ts, &mut rng))
                .collect();
            let t = Instant::now();
            s.insert_run(&recs).unwrap_or_else(|e| die(&e));
            ingest[k].push((RECORDS * SAMPLES) as f64 / t.elapsed().as_secs_f64());
        }
    }
    for ((name, _), v) in stores.iter().zip(&mut ingest) {
        println!(
            "{name:8} insert_run, {RECORDS} records x {SAMPLES} samples: samples/s {}",
            spread(v, |x| format!("{x:.0}"))
        );
    }
    // 10,000 runs of workload gemm_0 (one record of 50 samples each), 500 runs per
    // transaction, on top of the ingest rounds.
    for (_, s) in &stores {
        for chunk in 0..HISTORY_RUNS / BATCH_RUNS {
            let runs: Vec<Vec<Record>> = (0..BATCH_RUNS)
                .map(|j| {
                    let ts = 1_700_000_000 + (chunk * BATCH_RUNS + j) as i64;
                    vec![record(&new_run_id(), 0, 50, ts, &mut rng)]
                })
                .collect();
            s.insert_runs(&runs).unwrap_or_else(|e| die(&e));
        }
    }
    let probe = record("x", 0, 1, 0, &mut rng);
    let (fp, threads) = (probe.fingerprint, probe.harness.threads);
    let queries: Vec<Query> = vec![
        (
            "history_records (gate: newest 10 runs)",
            Box::new(|s| {
                s.history_records(&fp, "bench", threads, &[], 10)
                    .unwrap()
                    .len()
            }),
        ),
        (
            "records_for_fingerprint (every run)",
            Box::new(|s| s.records_for_fingerprint(&fp, Some("bench")).unwrap().len()),
        ),
        (
            "recent_runs_with_label (10 baselines)",
            Box::new(|s| {
                s.recent_runs_with_label("bench", "label", "main", 10)
                    .unwrap()
                    .len()
            }),
        ),
        ("list_runs", Box::new(|s| s.list_runs().unwrap().len())),
        (
            "fingerprints_named",
            Box::new(|s| s.fingerprints_named("gemm_0").unwrap().len()),
        ),
    ];
    let total = HISTORY_RUNS + INGEST_ROUNDS;
    for (qname, q) in &queries {
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); stores.len()];
        let mut rows = vec![0; stores.len()];
        for _ in 0..QUERY_ROUNDS {
            for (k, (_, s)) in stores.iter().enumerate() {
                let t = Instant::now();
                rows[k] = q(s);
                times[k].push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        for (k, (name, _)) in stores.iter().enumerate() {
            println!(
                "{name:8} {qname} over {total} runs: {} rows, {}",
                rows[k],
                spread(&mut times[k], |x| format!("{x:.1} ms"))
            );
        }
    }
    // The share of the whole-series read that is JSON parsing alone: the same records,
    // serialized as a store holds them, parsed back with no database involved.
    let jsons: Vec<String> = stores[0]
        .1
        .records_for_fingerprint(&fp, Some("bench"))
        .unwrap_or_else(|e| die(&e))
        .iter()
        .map(|r| serde_json::to_string(r).expect("serializable"))
        .collect();
    let mut parse_ms = Vec::new();
    for _ in 0..QUERY_ROUNDS {
        let t = Instant::now();
        for j in &jsons {
            let r: Record = serde_json::from_str(j).expect("parses");
            std::hint::black_box(r);
        }
        parse_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "(no db)  parsing the same {} records from JSON: {}",
        jsons.len(),
        spread(&mut parse_ms, |x| format!("{x:.1} ms"))
    );
    drop(stores);
    let _ = std::fs::remove_dir_all(&dir);
}
