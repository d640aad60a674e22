//! The store conformance suite: every test of the store's behaviour runs against both engines,
//! the embedded SQLite file and a fresh database on a PostgreSQL server (named by
//! `TENSORFORGE_TEST_POSTGRES`; without it the PostgreSQL half prints `SKIPPED` and returns,
//! and with `TENSORFORGE_TEST_POSTGRES_REQUIRED=1`, as CI sets, it fails instead). Then the
//! tests only one engine can have: corrupt and foreign SQLite files; wrong passwords,
//! unreachable servers, dropped connections and syncing between engines for PostgreSQL.
//!
//! Child processes are this test binary re-executed on `child_process_helper` with
//! environment variables; they open the store from the same location text a user types.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tensorforge_store::testing::{record as record_with, TestDatabase};
use tensorforge_store::{
    new_run_id, parse_records_text, records_jsonl_text, InsertStatus, Record, Store, StoreError,
};

// ---------------------------------------------------------------- fixtures

fn record(run: &str, i: u64, machine: &str) -> Record {
    record_with(run, i, machine, 1_700_000_000 + i as i64, 1, None)
}

fn run_of(n: u64, machine: &str) -> Vec<Record> {
    let id = new_run_id();
    (0..n).map(|i| record(&id, i, machine)).collect()
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tf-store-conf-{name}-{}", new_run_id()));
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

#[derive(Clone, Copy, Debug, PartialEq)]
enum Engine {
    Sqlite,
    Postgres,
}

/// One empty store of either engine, and a scratch folder.
struct Fixture {
    engine: Engine,
    dir: PathBuf,
    db: Option<TestDatabase>,
}

impl Fixture {
    fn new(engine: Engine, test: &str) -> Option<Fixture> {
        let db = match engine {
            Engine::Sqlite => None,
            Engine::Postgres => Some(TestDatabase::create(test)?),
        };
        Some(Fixture {
            engine,
            dir: tmp_dir(test),
            db,
        })
    }

    /// What a user would pass to `--store` (with the password, for child processes).
    fn location(&self) -> String {
        match &self.db {
            None => self.dir.join("s.sqlite").display().to_string(),
            Some(db) => db.url_with_password(),
        }
    }

    fn open(&self) -> Store {
        Store::open(Path::new(&self.location())).unwrap()
    }

    /// The schema version this build writes for the engine.
    fn newest_schema(&self) -> i64 {
        match self.engine {
            Engine::Sqlite => tensorforge_store::sqlite::SQLITE_SCHEMA_VERSION,
            Engine::Postgres => i64::from(tensorforge_store::postgres::POSTGRES_SCHEMA_VERSION),
        }
    }

    /// Pretend a newer build wrote the schema.
    fn set_schema_version(&self, v: i64) {
        match &self.db {
            None => {
                let c = rusqlite::Connection::open(self.location()).unwrap();
                c.execute_batch(&format!("PRAGMA user_version = {v}"))
                    .unwrap();
            }
            Some(db) => db.execute(&format!(
                "UPDATE tensorforge.store_meta SET schema_version = {v}"
            )),
        }
    }
}

/// Each named test once per engine: `sqlite::NAME` and `postgres::NAME`.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $name() {
                let f = super::Fixture::new(super::Engine::Sqlite, stringify!($name)).unwrap();
                super::$name(&f);
            })*
        }
        mod postgres {
            $(#[test]
            fn $name() {
                if let Some(f) = super::Fixture::new(super::Engine::Postgres, stringify!($name)) {
                    super::$name(&f);
                }
            })*
        }
    };
}

conformance!(
    round_trip_and_selectors,
    bad_runs_write_nothing,
    retries_are_stored_once,
    insert_runs_is_all_or_nothing,
    profiles,
    reopen_keeps_data,
    newer_schema_is_refused,
    history_selects_the_newest_comparable_runs,
    label_baselines_and_names,
    jsonl_export_import_round_trips,
    sigkill_mid_run_leaves_no_partial_run,
    concurrent_threads_lose_nothing,
    eight_writer_processes_store_every_run_exactly_once,
    limits_refuse_the_same_values_on_both_engines,
    sync_copies_every_valid_run_and_lists_the_refused,
    sync_refuses_a_conflicting_run_and_copies_the_rest_of_its_batch,
);

// ---------------------------------------------------------------- child processes

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
            // 200 runs of 2 records with ids `<prefix>-<i>`; every 10th run is sent twice,
            // as a CI job that retries after a timeout would.
            let prefix = std::env::var("TF_STORE_CHILD_PREFIX").unwrap();
            let runs: u64 = std::env::var("TF_STORE_CHILD_RUNS")
                .unwrap()
                .parse()
                .unwrap();
            for i in 0..runs {
                let id = format!("{prefix}-{i:03}");
                let recs = vec![record(&id, 1, &prefix), record(&id, 2, &prefix)];
                let first = store.insert_run(&recs).unwrap();
                assert_eq!(first.status, InsertStatus::Inserted, "{id}");
                if i % 10 == 0 {
                    let again = store.insert_run(&recs).unwrap();
                    assert_eq!(again.status, InsertStatus::AlreadyStored, "{id}");
                }
            }
        }
        other => panic!("unknown mode {other}"),
    }
}

fn child(location: &str, mode: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "child_process_helper",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("TF_STORE_CHILD_DB", location)
    .env("TF_STORE_CHILD_MODE", mode)
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    c
}

/// Start a child that stops in the middle of a 200-record run, holding its transaction
/// open; returns once it is there.
fn spawn_hanging_writer(f: &Fixture, tag: &str) -> std::process::Child {
    let marker = f.dir.join(format!("marker-{tag}"));
    let mut ch = child(&f.location(), "hang-mid-run")
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
            let mut err = String::new();
            if let Some(mut e) = ch.stderr.take() {
                std::io::Read::read_to_string(&mut e, &mut err).unwrap();
            }
            panic!("child exited early: {status}: {err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    ch
}

// ---------------------------------------------------------------- shared tests

fn round_trip_and_selectors(f: &Fixture) {
    let s = f.open();
    assert_eq!(s.schema_version().unwrap(), f.newest_schema());
    let r1 = vec![
        record_with("run-a", 1, "mach1", 100, 1, Some("base")),
        record_with("run-a", 2, "mach1", 101, 1, Some("base")),
    ];
    let r2 = vec![record_with("run-b", 1, "mach1", 200, 1, Some("cand"))];
    let r3 = vec![record_with("run-c", 1, "mach2", 300, 1, None)];
    assert_eq!(s.insert_run(&r1).unwrap().run_id, "run-a");
    s.insert_run(&r2).unwrap();
    s.insert_run(&r3).unwrap();
    // Bit-exact samples and every other field.
    assert_eq!(s.run_records("run-a").unwrap(), r1);
    let runs = s.list_runs().unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["run-c", "run-b", "run-a"]);
    assert_eq!(runs[2].record_count, 2);
    assert_eq!(runs[2].sample_count, 100); // 2 records x 50 samples
    assert_eq!(runs[2].created_unix_s, 101);
    assert_eq!(runs[2].labels.get("label").unwrap(), "base");
    assert_eq!(runs[2].workloads[1].name, "g2");
    assert_eq!(s.find_run("latest", None).unwrap().run_id, "run-c");
    assert_eq!(s.find_run("latest", Some("mach1")).unwrap().run_id, "run-b");
    assert_eq!(s.find_run("base", None).unwrap().run_id, "run-a");
    assert_eq!(
        s.find_run("label:label=cand", None).unwrap().run_id,
        "run-b"
    );
    assert_eq!(s.find_run("run-b", None).unwrap().run_id, "run-b");
    assert!(s
        .find_run("run-", None)
        .unwrap_err()
        .to_string()
        .contains("ambiguous"));
    assert!(matches!(
        s.find_run("nope", None),
        Err(StoreError::NotFound(_))
    ));
    assert!(s.find_run("latest", Some("mach9")).is_err());
    assert_eq!(
        s.latest_run("mach1", Some("run-b"))
            .unwrap()
            .unwrap()
            .run_id,
        "run-a"
    );
    assert!(s.latest_run("mach9", None).unwrap().is_none());
    let fp = r1[0].fingerprint.clone();
    let hist = s.records_for_fingerprint(&fp, None).unwrap();
    assert_eq!(
        hist.iter().map(|r| r.timestamp_unix_s).collect::<Vec<_>>(),
        [100, 200, 300]
    );
    assert_eq!(
        s.records_for_fingerprint(&fp, Some("mach2")).unwrap().len(),
        1
    );
    assert!(matches!(
        s.run_records("nope"),
        Err(StoreError::NotFound(_))
    ));
}

fn bad_runs_write_nothing(f: &Fixture) {
    let s = f.open();
    assert!(s.insert_run(&[]).is_err());
    let mixed = vec![record("a", 1, "m"), record("b", 2, "m")];
    let e = s.insert_run(&mixed).unwrap_err().to_string();
    assert!(e.contains("run_id") && e.contains("`b`"), "{e}");
    let machines = vec![record("a", 1, "m"), record("a", 2, "n")];
    assert!(s
        .insert_run(&machines)
        .unwrap_err()
        .to_string()
        .contains("machine_id"));
    let mut tampered = vec![record("a", 1, "m"), record("a", 2, "m")];
    tampered[1].fingerprint = "00".into();
    let e = s.insert_run(&tampered).unwrap_err().to_string();
    assert!(e.contains("record 1") && e.contains("fingerprint"), "{e}");
    assert!(s.list_runs().unwrap().is_empty());
}

fn retries_are_stored_once(f: &Fixture) {
    let s = f.open();
    let run = vec![record("retry", 1, "m"), record("retry", 2, "m")];
    assert_eq!(s.insert_run(&run).unwrap().status, InsertStatus::Inserted);
    // The same run again (a CI retry, or another process): stored once, and said so.
    let again = f.open().insert_run(&run).unwrap();
    assert_eq!(again.status, InsertStatus::AlreadyStored);
    assert_eq!(s.list_runs().unwrap().len(), 1);
    assert_eq!(total_records(&s), 2);
    // The same id with other records is not a retry: an error, nothing written.
    let mut other = run.clone();
    other.pop();
    let e = s.insert_run(&other).unwrap_err().to_string();
    assert!(e.contains("retry") && e.contains("different run"), "{e}");
    let mut changed = run.clone();
    changed[1] = record_with("retry", 2, "m", 5, 1, None);
    assert!(s.insert_run(&changed).is_err());
    assert_eq!(s.run_records("retry").unwrap(), run);
}

fn insert_runs_is_all_or_nothing(f: &Fixture) {
    let s = f.open();
    s.insert_run(&[record("old", 1, "m")]).unwrap();
    let ok = vec![vec![record("x", 1, "m")], vec![record("y", 1, "m")]];
    // "old" under the same id with other records: a conflict that must undo "z".
    let clash = vec![vec![record("z", 1, "m")], vec![record("old", 2, "m")]];
    let e = s.insert_runs(&clash).unwrap_err().to_string();
    assert!(e.contains("old") && e.contains("already stored"), "{e}");
    assert_eq!(
        s.list_runs().unwrap().len(),
        1,
        "the first run of a failed batch leaked"
    );
    let out = s.insert_runs(&ok).unwrap();
    assert_eq!(
        out.iter().map(|o| o.run_id.as_str()).collect::<Vec<_>>(),
        ["x", "y"]
    );
    assert_eq!(s.list_runs().unwrap().len(), 3);
    // The same batch again plus one new run: only the new one is written.
    let mut more = ok.clone();
    more.push(vec![record("w", 1, "m")]);
    let status: Vec<InsertStatus> = s
        .insert_runs(&more)
        .unwrap()
        .iter()
        .map(|o| o.status)
        .collect();
    assert_eq!(
        status,
        [
            InsertStatus::AlreadyStored,
            InsertStatus::AlreadyStored,
            InsertStatus::Inserted
        ]
    );
    assert_eq!(s.list_runs().unwrap().len(), 4);
    let dup = vec![vec![record("v", 1, "m")], vec![record("v", 2, "m")]];
    assert!(s.insert_runs(&dup).is_err());
}

fn profiles(f: &Fixture) {
    let s = f.open();
    assert!(s.latest_profile("m").unwrap().is_none());
    s.insert_profile("p1", "m", "a = 1", "{}").unwrap();
    std::thread::sleep(Duration::from_millis(1100)); // created_unix_s has 1 s resolution
    s.insert_profile("p2", "m", "a = 2", "{\"x\":1}").unwrap();
    s.insert_profile("p3", "other", "a = 3", "{}").unwrap();
    assert_eq!(
        s.latest_profile("m").unwrap().unwrap(),
        ("p2".to_string(), "a = 2".to_string())
    );
    assert!(s
        .insert_profile("p1", "m", "", "{}")
        .unwrap_err()
        .to_string()
        .contains("already"));
    assert!(s
        .insert_profile("p4", "m", "", "not json")
        .unwrap_err()
        .to_string()
        .contains("provenance_json"));
    assert_eq!(s.profile("p3").unwrap().unwrap().0, "other");
    let all: Vec<String> = s
        .profiles()
        .unwrap()
        .into_iter()
        .map(|p| p.profile_id)
        .collect();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0], "p1");
}

fn reopen_keeps_data(f: &Fixture) {
    let s = f.open();
    s.insert_run(&[record("a", 1, "m")]).unwrap();
    drop(s);
    let s = f.open();
    assert_eq!(s.list_runs().unwrap().len(), 1);
    assert_eq!(s.schema_version().unwrap(), f.newest_schema());
}

fn newer_schema_is_refused(f: &Fixture) {
    let s = f.open();
    s.insert_run(&[record("a", 1, "m")]).unwrap();
    drop(s);
    f.set_schema_version(99);
    let e = Store::open(Path::new(&f.location()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("99") && e.contains("newer"), "{e}");
    assert!(!e.contains("tfpass") && !e.contains("secret"), "{e}");
}

fn history_selects_the_newest_comparable_runs(f: &Fixture) {
    let s = f.open();
    // Runs h0..h5 of one workload on machine "m": record timestamps 10, 20, ... ; h3 at 4
    // threads; h5 on another machine. Each run has the workload twice (two repetitions at
    // t and t+1) plus another workload.
    for (i, (ts, threads, machine)) in [
        (10, 1, "m"),
        (20, 1, "m"),
        (30, 1, "m"),
        (40, 4, "m"),
        (50, 1, "m"),
        (60, 1, "other"),
    ]
    .iter()
    .enumerate()
    {
        let id = format!("h{i}");
        s.insert_run(&[
            record_with(&id, 7, machine, *ts, *threads, None),
            record_with(&id, 7, machine, ts + 1, *threads, None),
            record_with(&id, 8, machine, *ts, *threads, None),
        ])
        .unwrap();
    }
    let fp = record("x", 7, "m").fingerprint;
    let runs_of = |recs: Vec<Record>| recs.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>();
    // The newest 2 comparable runs at 1 thread on m: h4 (ts 50) and h2 (30); h3 is at 4
    // threads, h5 on another machine. Oldest first, both repetitions each.
    assert_eq!(
        runs_of(s.history_records(&fp, "m", 1, &[], 2).unwrap()),
        ["h2", "h2", "h4", "h4"]
    );
    // Leaving out the candidate h4: h2 and h1.
    assert_eq!(
        runs_of(s.history_records(&fp, "m", 1, &["h4".into()], 2).unwrap()),
        ["h1", "h1", "h2", "h2"]
    );
    assert_eq!(
        runs_of(s.history_records(&fp, "m", 4, &[], 5).unwrap()),
        ["h3", "h3"]
    );
    assert!(s
        .history_records(&fp, "nowhere", 1, &[], 5)
        .unwrap()
        .is_empty());
    assert_eq!(s.history_records(&fp, "m", 1, &[], 100).unwrap().len(), 8); // h0,h1,h2,h4 x 2
}

fn label_baselines_and_names(f: &Fixture) {
    let s = f.open();
    for (i, label) in ["main", "pr", "main", "main"].iter().enumerate() {
        let id = format!("l{i}");
        s.insert_run(&[record_with(&id, 3, "m", 100 + i as i64, 1, Some(label))])
            .unwrap();
    }
    s.insert_run(&[record_with("l9", 3, "n", 999, 1, Some("main"))])
        .unwrap();
    let ids =
        |v: Vec<tensorforge_store::RunInfo>| v.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
    assert_eq!(
        ids(s.recent_runs_with_label("m", "label", "main", 2).unwrap()),
        ["l3", "l2"]
    );
    assert_eq!(
        ids(s.recent_runs_with_label("m", "label", "pr", 10).unwrap()),
        ["l1"]
    );
    assert!(s
        .recent_runs_with_label("m", "nolabel", "main", 10)
        .unwrap()
        .is_empty());
    let fp = record("x", 3, "m").fingerprint;
    assert_eq!(
        s.fingerprints_named("g3").unwrap(),
        std::slice::from_ref(&fp)
    );
    assert_eq!(s.fingerprints_named(&fp).unwrap(), [fp]);
    assert!(s.fingerprints_named("g4").unwrap().is_empty());
}

fn jsonl_export_import_round_trips(f: &Fixture) {
    let s = f.open();
    let a = run_of(3, "m");
    let b = run_of(2, "m");
    s.insert_run(&a).unwrap();
    s.insert_run(&b).unwrap();
    let mut all = s.run_records(&a[0].run_id).unwrap();
    all.extend(s.run_records(&b[0].run_id).unwrap());
    let text = records_jsonl_text(Path::new("export.jsonl"), &all).unwrap();
    let back = parse_records_text(&text, "export.jsonl").unwrap();
    assert_eq!(back, all, "export then parse is the identity");
    // Importing the export into the same store writes nothing new.
    let out = s
        .insert_runs(&[back[..3].to_vec(), back[3..].to_vec()])
        .unwrap();
    assert!(out.iter().all(|o| o.status == InsertStatus::AlreadyStored));
    assert_eq!(total_records(&s), 5);
}

fn sigkill_mid_run_leaves_no_partial_run(f: &Fixture) {
    let store = f.open();
    store.insert_run(&run_of(3, "child")).unwrap();
    let mut ch = spawn_hanging_writer(f, "kill");
    // The child holds 101 uncommitted records; a reader sees none of them.
    assert_eq!(store.list_runs().unwrap().len(), 1);
    ch.kill().unwrap(); // SIGKILL on Unix
    let status = ch.wait().unwrap();
    assert!(!status.success());
    drop(store);
    let store = f.open();
    let runs = store.list_runs().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(total_records(&store), 3);
    let fp = record("x", 150, "child").fingerprint;
    assert!(store.records_for_fingerprint(&fp, None).unwrap().is_empty());
    // The store is still writable after the crash.
    store.insert_run(&run_of(4, "child")).unwrap();
    assert_eq!(total_records(&store), 7);
}

fn concurrent_threads_lose_nothing(f: &Fixture) {
    let location = f.location();
    // Every thread opens the fresh store itself, so migrations race too.
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let location = location.clone();
            std::thread::spawn(move || {
                let s = Store::open(Path::new(&location)).unwrap();
                for _ in 0..15 {
                    s.insert_run(&run_of(4, &format!("m{t}"))).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = f.open();
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

/// The team-store target (docs/records.md): 8 writer processes x 200 runs, every 10th sent
/// twice, while (PostgreSQL) a ninth writer is killed in the middle of its run. Every run is
/// stored exactly once, none is lost, the killed run is absent, and no writer saw an error.
/// SQLite has one writer at a time: a writer hung inside its transaction blocks the others
/// for the busy timeout, so there the killed writer is the separate
/// `sigkill_mid_run_leaves_no_partial_run`.
fn eight_writer_processes_store_every_run_exactly_once(f: &Fixture) {
    const WRITERS: usize = 8;
    const RUNS: usize = 200;
    drop(f.open()); // create the schema before the writers race on data, not on migration
    let hanging = (f.engine == Engine::Postgres).then(|| spawn_hanging_writer(f, "eight"));
    let started = Instant::now();
    let children: Vec<_> = (0..WRITERS)
        .map(|w| {
            child(&f.location(), "writer")
                .env("TF_STORE_CHILD_PREFIX", format!("w{w}"))
                .env("TF_STORE_CHILD_RUNS", RUNS.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a writer failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let elapsed = started.elapsed();
    if let Some(mut h) = hanging {
        h.kill().unwrap();
        h.wait().unwrap();
    }
    let s = f.open();
    let runs = s.list_runs().unwrap();
    let ids: BTreeSet<String> = runs.iter().map(|r| r.run_id.clone()).collect();
    let want: BTreeSet<String> = (0..WRITERS)
        .flat_map(|w| (0..RUNS).map(move |i| format!("w{w}-{i:03}")))
        .collect();
    assert_eq!(runs.len(), WRITERS * RUNS, "a run stored twice or lost");
    assert_eq!(ids, want);
    assert!(runs
        .iter()
        .all(|r| r.record_count == 2 && r.machine_id != "child"));
    let fp = record("x", 1, "").fingerprint;
    for w in 0..WRITERS {
        assert_eq!(
            s.records_for_fingerprint(&fp, Some(&format!("w{w}")))
                .unwrap()
                .len(),
            RUNS
        );
    }
    eprintln!(
        "{:?}: {WRITERS} writers x {RUNS} runs (+{} retries) in {:.1} s",
        f.engine,
        WRITERS * RUNS / 10,
        elapsed.as_secs_f64()
    );
}

// ---------------------------------------------------------------- SQLite only

#[test]
fn sqlite_non_sqlite_file_is_a_named_error_and_untouched() {
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
fn sqlite_corrupt_pages_are_errors_not_panics() {
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

// ---------------------------------------------------------------- PostgreSQL only

fn pg(test: &str) -> Option<Fixture> {
    Fixture::new(Engine::Postgres, test)
}

/// The fixture's URL with the password replaced.
fn with_password(f: &Fixture, password: &str) -> String {
    let u = &f.db.as_ref().unwrap().url;
    format!(
        "postgres://{}:{password}@{}:{}/{}",
        u.user, u.host, u.port, u.dbname
    )
}

#[test]
fn postgres_wrong_password_is_one_line_and_redacted() {
    let Some(f) = pg("wrong_password") else {
        return;
    };
    let e = Store::open(Path::new(&with_password(&f, "not-the-password-42")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("authentication failed") && e.contains("password from the URL"),
        "{e}"
    );
    assert!(
        e.contains(":***@") && !e.contains("not-the-password-42"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn postgres_unreachable_server_is_a_named_error() {
    let Some(f) = pg("unreachable") else { return };
    // A port nothing listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://u:hunter2@127.0.0.1:{port}/db?connect_timeout=2");
    let t = Instant::now();
    let e = Store::open(Path::new(&url)).unwrap_err().to_string();
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(
        e.contains("cannot connect") && e.contains(&port.to_string()),
        "{e}"
    );
    assert!(!e.contains("hunter2") && !e.contains('\n'), "{e}");
    // A database that does not exist on a live server.
    let u = &f.db.as_ref().unwrap().url;
    let missing = format!(
        "postgres://{}:x@{}:{}/tf_no_such_db",
        u.user, u.host, u.port
    );
    let e = Store::open(Path::new(&missing)).unwrap_err().to_string();
    assert!(
        e.contains("tf_no_such_db")
            && (e.contains("does not exist") || e.contains("authentication")),
        "{e}"
    );
}

#[test]
fn postgres_database_of_another_application_is_refused_and_untouched() {
    let Some(f) = pg("other_app") else { return };
    let db = f.db.as_ref().unwrap();
    db.execute("CREATE TABLE invoices (id INT); INSERT INTO invoices VALUES (1);");
    let e = Store::open(Path::new(&f.location()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not a TensorForge store") && e.contains("1 table"),
        "{e}"
    );
    let mut c = db.client();
    let schemas: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'tensorforge'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(schemas, 0, "nothing was created");
    let n: i64 = c
        .query_one("SELECT count(*) FROM invoices", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

#[test]
fn postgres_dropped_connection_mid_run_records_nothing() {
    let Some(f) = pg("dropped") else { return };
    let s = f.open();
    s.insert_run(&run_of(2, "m")).unwrap();
    let dbname = f.db.as_ref().unwrap().url.dbname.clone();
    let mut admin = f.db.as_ref().unwrap().client();
    let recs = run_of(50, "m");
    let e = s
        .insert_run_with_hook(&recs, |i| {
            if i == 20 {
                // The server drops every other session on this database (ours).
                admin
                    .execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                         WHERE datname = $1 AND pid <> pg_backend_pid()",
                        &[&dbname],
                    )
                    .unwrap();
            }
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("connection") && e.contains("nothing of it was stored"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    let s = f.open();
    assert_eq!(s.list_runs().unwrap().len(), 1);
    assert_eq!(total_records(&s), 2);
}

#[test]
fn postgres_sync_both_ways_is_idempotent() {
    let Some(f) = pg("sync") else { return };
    let pg_store = f.open();
    let lite_a = Store::open(&f.dir.join("a.sqlite")).unwrap();
    let lite_b = Store::open(&f.dir.join("b.sqlite")).unwrap();
    for _ in 0..3 {
        lite_a.insert_run(&run_of(3, "ma")).unwrap();
    }
    lite_a
        .insert_profile("prof-a", "ma", "x = 1", "{}")
        .unwrap();
    pg_store.insert_run(&run_of(2, "mp")).unwrap();
    let r = lite_a.sync_to(&pg_store).unwrap();
    assert_eq!(
        (r.runs_copied, r.records_copied, r.runs_already_present),
        (3, 9, 0)
    );
    assert_eq!(r.profiles_copied, 1);
    let r = lite_a.sync_to(&pg_store).unwrap();
    assert_eq!(
        (
            r.runs_copied,
            r.runs_already_present,
            r.profiles_already_present
        ),
        (0, 3, 1)
    );
    // And back into another SQLite store: all four runs, identical records.
    let r = pg_store.sync_to(&lite_b).unwrap();
    assert_eq!((r.runs_copied, r.records_copied), (4, 11));
    assert_eq!(pg_store.sync_to(&lite_b).unwrap().runs_copied, 0);
    for run in lite_a.list_runs().unwrap() {
        assert_eq!(
            lite_b.run_records(&run.run_id).unwrap(),
            lite_a.run_records(&run.run_id).unwrap()
        );
    }
    assert_eq!(lite_b.profile("prof-a").unwrap().unwrap().1, "x = 1");
    // A run id present on both sides with other records is refused and listed, not a silent
    // skip, and not an error that stops the sync.
    let clash = vec![record("clash", 1, "ma")];
    lite_a.insert_run(&clash).unwrap();
    pg_store.insert_run(&[record("clash", 2, "ma")]).unwrap();
    let r = lite_a.sync_to(&pg_store).unwrap();
    assert_eq!(r.runs_refused.len(), 1, "{r:?}");
    assert_eq!(r.runs_refused[0].run_id, "clash");
    assert!(r.runs_refused[0].reason.contains("different run"), "{r:?}");
    assert_eq!(
        pg_store.run_records("clash").unwrap(),
        vec![record("clash", 2, "ma")]
    );
}

// ---------------------------------------------------------------- limits and refused runs

/// A run of one record whose fields `edit` changes (the fingerprint is recomputed after, so
/// only the edited value can be the reason for a refusal).
fn edited_run(run: &str, edit: impl Fn(&mut Record)) -> Vec<Record> {
    let mut r = record(run, 1, "m");
    edit(&mut r);
    r.fingerprint = r.workload.fingerprint();
    vec![r]
}

fn limits_refuse_the_same_values_on_both_engines(f: &Fixture) {
    let s = f.open();
    type Edit = Box<dyn Fn(&mut Record)>;
    // (what, edit, field in the message, reason in the message). Sizes: "x" × n is n bytes;
    // "é" is 2 bytes, so "é" × 256 is exactly WORKLOAD_NAME_MAX_BYTES = 512 and one more
    // ASCII byte makes 513.
    let nul = "contains a NUL character";
    let bad: Vec<(&str, Edit, &str, String)> = vec![
        (
            "NUL in workload name",
            Box::new(|r| r.workload.name = "g\0x".into()),
            "`workload.name` = `g\\0x`",
            nul.into(),
        ),
        (
            "NUL in a param string value",
            Box::new(|r| {
                r.workload
                    .params
                    .insert("layout".into(), serde_json::json!("row\0major"));
            }),
            "`workload.params.layout`",
            nul.into(),
        ),
        (
            "NUL in a nested param key",
            Box::new(|r| {
                r.workload
                    .params
                    .insert("tile".into(), serde_json::json!([{"a\0": 1}]));
            }),
            "`workload.params.tile[0].a\\0`",
            format!("key {nul}"),
        ),
        (
            "NUL in a label key",
            Box::new(|r| {
                r.labels.insert("br\0anch".into(), "main".into());
            }),
            "`labels.br\\0anch`",
            format!("key {nul}"),
        ),
        (
            "NUL in a label value",
            Box::new(|r| {
                r.labels.insert("branch".into(), "ma\0in".into());
            }),
            "`labels.branch` = `ma\\0in`",
            nul.into(),
        ),
        (
            "NUL in the run id",
            Box::new(|r| r.run_id = "run\0id".into()),
            "`run_id` = `run\\0id`",
            nul.into(),
        ),
        (
            "NUL in the machine id",
            Box::new(|r| r.device.machine_id = "m\0".into()),
            "`device.machine_id`",
            nul.into(),
        ),
        (
            "NUL in the harness note",
            Box::new(|r| r.harness.note = Some("\0".into())),
            "`harness.note`",
            nul.into(),
        ),
        (
            "workload name of 2 800 bytes",
            Box::new(|r| r.workload.name = "n".repeat(2800)),
            "`workload.name`",
            "is 2800 bytes, over the limit of 512 bytes (WORKLOAD_NAME_MAX_BYTES)".into(),
        ),
        (
            "multibyte workload name one byte over",
            Box::new(|r| r.workload.name = format!("{}a", "é".repeat(256))),
            "`workload.name`",
            "is 513 bytes, over the limit of 512 bytes".into(),
        ),
        (
            "run id of 129 bytes",
            Box::new(|r| r.run_id = "r".repeat(129)),
            "`run_id`",
            "is 129 bytes, over the limit of 128 bytes (RUN_ID_MAX_BYTES)".into(),
        ),
        (
            "machine id of 2 800 bytes",
            Box::new(|r| r.device.machine_id = "m".repeat(2800)),
            "`device.machine_id`",
            "is 2800 bytes, over the limit of 256 bytes (MACHINE_ID_MAX_BYTES)".into(),
        ),
        (
            "label key of 129 bytes",
            Box::new(|r| {
                r.labels.insert("k".repeat(129), "v".into());
            }),
            "`labels.kkkk",
            "key is 129 bytes, over the limit of 128 bytes (LABEL_KEY_MAX_BYTES)".into(),
        ),
        (
            "label value of 1 025 bytes",
            Box::new(|r| {
                r.labels.insert("branch".into(), "v".repeat(1025));
            }),
            "`labels.branch`",
            "is 1025 bytes, over the limit of 1024 bytes (LABEL_VALUE_MAX_BYTES)".into(),
        ),
        (
            "source of 64 KiB + 1 bytes",
            Box::new(|r| r.source = "s".repeat(65_537)),
            "`source`",
            "is 65537 bytes, over the limit of 65536 bytes (STRING_MAX_BYTES)".into(),
        ),
    ];
    for (what, edit, field, reason) in &bad {
        let run = edited_run("bad", edit);
        let e = s.insert_run(&run).unwrap_err();
        let msg = e.to_string();
        // The store's own check refused it, before the engine saw it: the message is exactly
        // the engine-free check's (a PostgreSQL error would name the server instead).
        assert_eq!(
            msg,
            tensorforge_store::check_run(&run).unwrap_err().to_string(),
            "{what}"
        );
        assert!(
            matches!(e, StoreError::InvalidField { .. }),
            "{what}: {e:?}"
        );
        assert!(
            msg.contains(field) && msg.contains(reason.as_str()),
            "{what}: {msg}"
        );
        assert!(msg.starts_with("run "), "{what}: names the run: {msg}");
        assert!(
            !msg.contains('\0') && !msg.contains('\n'),
            "{what}: one clean line"
        );
        // Long values are cut: nothing of 2 800 or 65 537 repeated bytes reaches the message.
        assert!(msg.len() < 400, "{what}: {} bytes: {msg}", msg.len());
        // And the same refusal through the all-or-nothing batch write.
        assert!(s.insert_runs(std::slice::from_ref(&run)).is_err(), "{what}");
    }
    // The long values are shown as their first 40 characters and their size:
    let long = edited_run("long", |r| r.workload.name = "n".repeat(2800));
    let msg = s.insert_run(&long).unwrap_err().to_string();
    assert!(
        msg.contains(&format!("`{}… (2800 bytes)`", "n".repeat(40))),
        "{msg}"
    );
    assert!(s.list_runs().unwrap().is_empty(), "a refused run left rows");

    // The valid edges: every limit reached exactly, multibyte text, read back unchanged.
    let run_id = "r".repeat(128);
    let edge = edited_run(&run_id, |r| {
        r.workload.name = "é".repeat(256); // 512 bytes
        r.device.machine_id = "m".repeat(256);
        r.labels.insert("k".repeat(128), "v".repeat(1024));
        r.labels.insert("ünï".into(), "çødé ✓ 🚀".into());
        r.workload
            .params
            .insert("layout".into(), serde_json::json!("row_major ✓"));
        r.source = "s".repeat(65_536);
    });
    assert_eq!(edge[0].workload.name.len(), 512);
    assert_eq!(s.insert_run(&edge).unwrap().status, InsertStatus::Inserted);
    assert_eq!(s.run_records(&run_id).unwrap(), edge);
    let info = f.open().run_info(&run_id).unwrap().unwrap();
    assert_eq!(info.machine_id, "m".repeat(256));
    assert_eq!(info.labels, edge[0].labels);
    assert_eq!(info.workloads[0].name, "é".repeat(256));
    // Selected by the long label and by the multibyte name, as on the other engine.
    let by_label = s
        .recent_runs_with_label(&"m".repeat(256), &"k".repeat(128), &"v".repeat(1024), 5)
        .unwrap();
    assert_eq!(by_label.len(), 1);
    assert_eq!(
        s.fingerprints_named(&"é".repeat(256)).unwrap(),
        vec![edge[0].fingerprint.clone()]
    );
    assert_eq!(s.list_runs().unwrap().len(), 1);
}

/// A SQLite source store holding runs the checks refuse (written around them, as a store
/// written before the checks may hold them).
fn source_with_bad_runs(dir: &Path, n: usize, bad: &[(usize, &str)]) -> (Store, Vec<String>) {
    let src = Store::open(&dir.join("source.sqlite")).unwrap();
    let mut runs = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    for k in 0..n {
        let id = format!("run-{k:05}");
        // Oldest first: run k at time base + k.
        let mut r = record_with(&id, (k % 7) as u64, "m", 1_700_000_000 + k as i64, 1, None);
        if let Some((_, how)) = bad.iter().find(|(at, _)| *at == k) {
            match *how {
                "nul" => r.workload.name = format!("bad\0name-{k}"),
                "long" => r.workload.name = "n".repeat(2800),
                other => panic!("unknown bad kind {other}"),
            }
        }
        ids.push(id);
        runs.push(vec![r]);
    }
    src.insert_runs_unchecked(&runs).unwrap();
    (src, ids)
}

fn sync_copies_every_valid_run_and_lists_the_refused(f: &Fixture) {
    let dest = f.open();
    // 250 runs; 0-based positions: 39 is the 40th run (overlong name), 150 the 151st (NUL),
    // in batches of 100: the 151st is in the second batch, which used to stop every sync.
    let (src, ids) = source_with_bad_runs(&f.dir, 250, &[(39, "long"), (150, "nul")]);
    let good = tensorforge_store::StoredProfile {
        profile_id: "prof-good".into(),
        machine_id: "m".into(),
        created_unix_s: 1,
        toml_text: "a = 1".into(),
        provenance_json: "{}".into(),
    };
    let bad_profile = tensorforge_store::StoredProfile {
        profile_id: "prof-bad".into(),
        toml_text: "a = \"\0\"".into(),
        created_unix_s: 2,
        ..good.clone()
    };
    assert!(src.insert_profile_unchecked(&good).unwrap());
    assert!(src.insert_profile_unchecked(&bad_profile).unwrap());
    let check = |r: &tensorforge_store::SyncReport, copied: usize, present: usize| {
        assert_eq!(r.schema_version, 2);
        // 250 runs - 2 refused = 248.
        assert_eq!(
            (r.runs_copied, r.runs_already_present),
            (copied, present),
            "{r:?}"
        );
        assert_eq!(r.records_copied, copied, "one record per run");
        let refused: Vec<&str> = r.runs_refused.iter().map(|x| x.run_id.as_str()).collect();
        assert_eq!(refused, [ids[39].as_str(), ids[150].as_str()]);
        let (long, nul) = (&r.runs_refused[0].reason, &r.runs_refused[1].reason);
        assert!(
            long.contains("run run-00039 record 0")
                && long.contains("`workload.name`")
                && long.contains("2800 bytes, over the limit of 512 bytes"),
            "{long}"
        );
        assert!(
            nul.contains("`workload.name` = `bad\\0name-150`") && nul.contains("NUL"),
            "{nul}"
        );
        assert_eq!(r.profiles_refused.len(), 1, "{r:?}");
        assert_eq!(r.profiles_refused[0].profile_id, "prof-bad");
        assert!(
            r.profiles_refused[0].reason.contains("`toml_text`"),
            "{r:?}"
        );
    };
    let first = src.sync_to(&dest).unwrap();
    check(&first, 248, 0);
    assert_eq!(first.profiles_copied, 1);
    // The second sync copies nothing and lists the same refusals.
    let again = src.sync_to(&dest).unwrap();
    check(&again, 0, 248);
    assert_eq!(
        (again.profiles_copied, again.profiles_already_present),
        (0, 1)
    );
    // Every valid run is there with its records; the refused ones are not.
    let stored: BTreeSet<String> = dest
        .list_runs()
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(stored.len(), 248);
    for (k, id) in ids.iter().enumerate() {
        assert_eq!(stored.contains(id), k != 39 && k != 150, "{id}");
    }
    for id in [&ids[0], &ids[151], &ids[249]] {
        assert_eq!(dest.run_records(id).unwrap(), src.run_records(id).unwrap());
    }
    assert!(dest.profile("prof-bad").unwrap().is_none());
}

fn sync_refuses_a_conflicting_run_and_copies_the_rest_of_its_batch(f: &Fixture) {
    let dest = f.open();
    let src = Store::open(&f.dir.join("source.sqlite")).unwrap();
    for k in 0..5u64 {
        let id = format!("c{k}");
        src.insert_run(&[record_with(&id, k, "m", 10 + k as i64, 1, None)])
            .unwrap();
    }
    // The destination holds another run under the id of the third.
    dest.insert_run(&[record("c2", 9, "m")]).unwrap();
    let r = src.sync_to(&dest).unwrap();
    // 5 runs - 1 conflicting = 4 copied, all from the one batch the conflict failed.
    assert_eq!((r.runs_copied, r.runs_already_present), (4, 0), "{r:?}");
    assert_eq!(r.runs_refused.len(), 1);
    assert_eq!(r.runs_refused[0].run_id, "c2");
    assert!(r.runs_refused[0].reason.contains("different run"), "{r:?}");
    assert_eq!(dest.list_runs().unwrap().len(), 5);
    assert_eq!(dest.run_records("c2").unwrap(), vec![record("c2", 9, "m")]);
    let r = src.sync_to(&dest).unwrap();
    assert_eq!(
        (r.runs_copied, r.runs_already_present, r.runs_refused.len()),
        (0, 4, 1)
    );
}

/// The issue's target at scale: 10 000 runs, 10 of them invalid, synced into PostgreSQL.
#[test]
fn postgres_sync_of_10000_runs_with_10_bad_copies_9990_and_names_10() {
    let Some(f) = pg("sync_10000") else { return };
    let dest = f.open();
    // Bad runs every 1 000th from 500: 500, 1 500, ..., 9 500 (10 runs), alternating kinds.
    let bad: Vec<(usize, &str)> = (0..10)
        .map(|j| (500 + 1000 * j, if j % 2 == 0 { "nul" } else { "long" }))
        .collect();
    let (src, ids) = source_with_bad_runs(&f.dir, 10_000, &bad);
    let t = Instant::now();
    let r = src.sync_to(&dest).unwrap();
    let first_s = t.elapsed().as_secs_f64();
    // 10 000 - 10 = 9 990.
    assert_eq!(
        (r.runs_copied, r.records_copied),
        (9_990, 9_990),
        "{:?}",
        r.runs_refused
    );
    let refused: Vec<&str> = r.runs_refused.iter().map(|x| x.run_id.as_str()).collect();
    let expect: Vec<&str> = bad.iter().map(|(k, _)| ids[*k].as_str()).collect();
    assert_eq!(refused, expect);
    let t = Instant::now();
    let again = src.sync_to(&dest).unwrap();
    let second_s = t.elapsed().as_secs_f64();
    assert_eq!((again.runs_copied, again.runs_already_present), (0, 9_990));
    assert_eq!(again.runs_refused.len(), 10);
    assert_eq!(dest.list_runs().unwrap().len(), 9_990);
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "sync of 10000 runs (10 bad) into PostgreSQL: first {first_s:.2} s, again {second_s:.2} s"
    );
}
