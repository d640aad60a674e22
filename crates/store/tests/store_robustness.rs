//! Store robustness: concurrent writers (threads and processes) lose nothing, a writer
//! killed with SIGKILL in the middle of a run leaves no partial run, and corrupt or foreign
//! files are named errors that leave the file untouched. Child processes are this test
//! binary re-executed on the `child_process_helper` test with environment variables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tensorforge_store::{
    new_run_id, DeviceContext, HarnessSettings, Record, SoftwareContext, Store, StoreError,
    WorkloadIdentity,
};

fn record(run: &str, i: u64, machine: &str) -> Record {
    let mut params = BTreeMap::new();
    params.insert("m".into(), serde_json::json!(i));
    Record::new(tensorforge_store::RecordParts {
        run_id: run.into(),
        workload: WorkloadIdentity {
            kind: "gemm".into(),
            name: format!("g{i}"),
            params,
            dtype: "f32".into(),
        },
        device: DeviceContext {
            kind: "cpu".into(),
            machine_id: machine.into(),
            ..Default::default()
        },
        software: SoftwareContext::default(),
        harness: HarnessSettings::default(),
        samples_ns: (0..50).map(|k| 100.0 + k as f64).collect(),
        flops: None,
        bytes: None,
        peak_alloc_bytes: None,
        timestamp_unix_s: 1_700_000_000 + i as i64,
        labels: BTreeMap::new(),
        source: "harness".into(),
    })
    .unwrap()
}

fn run_of(n: u64, machine: &str) -> Vec<Record> {
    let id = new_run_id();
    (0..n).map(|i| record(&id, i, machine)).collect()
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tf-store-it-{name}-{}", new_run_id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn total_records(s: &Store) -> usize {
    s.list_runs()
        .unwrap()
        .iter()
        .map(|r| s.run_records(&r.run_id).unwrap().len())
        .sum()
}

/// Not a test on its own: the body child processes run. Without the environment variable
/// it returns immediately.
#[test]
fn child_process_helper() {
    let Ok(db) = std::env::var("TF_STORE_CHILD_DB") else {
        return;
    };
    let mode = std::env::var("TF_STORE_CHILD_MODE").unwrap();
    let store = Store::open(Path::new(&db)).unwrap();
    match mode.as_str() {
        "hang-mid-run" => {
            let marker = std::env::var("TF_STORE_CHILD_MARKER").unwrap();
            let recs = run_of(200, "child");
            store
                .insert_run_with_hook(&recs, |i| {
                    if i == 100 {
                        std::fs::write(&marker, b"mid-run").unwrap();
                        std::thread::sleep(Duration::from_secs(120));
                    }
                })
                .unwrap();
        }
        "writer" => {
            for _ in 0..10 {
                store.insert_run(&run_of(5, "proc")).unwrap();
            }
        }
        other => panic!("unknown mode {other}"),
    }
}

fn child(db: &Path, mode: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "child_process_helper",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("TF_STORE_CHILD_DB", db)
    .env("TF_STORE_CHILD_MODE", mode)
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    c
}

#[test]
fn sigkill_mid_run_leaves_no_partial_run() {
    let dir = tmp_dir("kill");
    let db = dir.join("s.sqlite");
    let store = Store::open(&db).unwrap();
    store.insert_run(&run_of(3, "child")).unwrap();
    let marker = dir.join("marker");
    let mut ch = child(&db, "hang-mid-run")
        .env("TF_STORE_CHILD_MARKER", &marker)
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !marker.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "child never reached the middle of its run"
        );
        if let Some(status) = ch.try_wait().unwrap() {
            panic!("child exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The child holds 101 uncommitted records; a reader sees none of them.
    assert_eq!(store.list_runs().unwrap().len(), 1);
    ch.kill().unwrap(); // SIGKILL on Unix
    let status = ch.wait().unwrap();
    assert!(!status.success());
    drop(store);
    let store = Store::open(&db).unwrap();
    let runs = store.list_runs().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(total_records(&store), 3);
    let fp = record("x", 150, "child").fingerprint;
    assert!(store.records_for_fingerprint(&fp, None).unwrap().is_empty());
    // The store is still writable after the crash.
    store.insert_run(&run_of(4, "child")).unwrap();
    assert_eq!(total_records(&store), 7);
}

#[test]
fn concurrent_threads_lose_nothing() {
    let db = tmp_dir("threads").join("s.sqlite");
    // Every thread opens the fresh file itself, so migrations race too.
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                let s = Store::open(&db).unwrap();
                for _ in 0..15 {
                    s.insert_run(&run_of(4, &format!("m{t}"))).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = Store::open(&db).unwrap();
    assert_eq!(s.list_runs().unwrap().len(), 60);
    assert_eq!(total_records(&s), 240);
    for t in 0..4 {
        let fp = record("x", 2, "").fingerprint;
        assert_eq!(
            s.records_for_fingerprint(&fp, Some(&format!("m{t}")))
                .unwrap()
                .len(),
            15
        );
    }
}

#[test]
fn concurrent_processes_lose_nothing() {
    let db = tmp_dir("procs").join("s.sqlite");
    let children: Vec<_> = (0..3)
        .map(|_| child(&db, "writer").spawn().unwrap())
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let s = Store::open(&db).unwrap();
    assert_eq!(s.list_runs().unwrap().len(), 30);
    assert_eq!(total_records(&s), 150);
}

#[test]
fn non_sqlite_file_is_a_named_error_and_untouched() {
    let dir = tmp_dir("garbage");
    let p = dir.join("notes.sqlite");
    let garbage: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&p, &garbage).unwrap();
    let e = Store::open(&p).unwrap_err();
    assert!(matches!(e, StoreError::Database { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("notes.sqlite"), "{msg}");
    assert!(msg.contains("not a TensorForge store"), "{msg}");
    assert_eq!(std::fs::read(&p).unwrap(), garbage);
    // A directory is refused too.
    assert!(Store::open(&dir).is_err());
}

#[test]
fn corrupt_pages_are_errors_not_panics() {
    let dir = tmp_dir("corrupt");
    let p = dir.join("s.sqlite");
    {
        let s = Store::open(&p).unwrap();
        for _ in 0..5 {
            s.insert_run(&run_of(20, "m")).unwrap();
        }
    }
    let mut bytes = std::fs::read(&p).unwrap();
    assert!(
        bytes.len() > 16_384,
        "store too small to corrupt: {}",
        bytes.len()
    );
    for b in &mut bytes[4096..] {
        *b = 0xA5;
    }
    std::fs::write(&p, &bytes).unwrap();
    let outcome = Store::open(&p).and_then(|s| {
        let runs = s.list_runs()?;
        for r in &runs {
            s.run_records(&r.run_id)?;
        }
        Ok(runs.len())
    });
    let e = outcome.expect_err("reading a corrupted store must fail");
    assert!(e.to_string().contains("s.sqlite"), "{e}");
}

#[test]
fn newer_schema_is_refused() {
    let p = tmp_dir("newer").join("s.sqlite");
    drop(Store::open(&p).unwrap());
    {
        let c = rusqlite::Connection::open(&p).unwrap();
        c.execute_batch("PRAGMA user_version = 99").unwrap();
    }
    let e = Store::open(&p).unwrap_err().to_string();
    assert!(e.contains("99") && e.contains("newer"), "{e}");
}
