//! End-to-end tests of `tensorforge records ...` and `tensorforge ingest ...`: ingest each
//! external format, store, list, show, export and import back; bad input exits 2 with a
//! one-line error naming the file and field, and leaves the store without a partial run.

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn tf() -> Command {
    let mut c = Command::cargo_bin("tensorforge").unwrap();
    c.env_remove("TENSORFORGE_STORE");
    c
}

fn tmp(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "tf-records-cli-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn json_out(c: &mut Command) -> Value {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn fails(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    err
}

const GBENCH: &str = r#"{"context": {"num_cpus": 2},
 "benchmarks": [
  {"name": "BM_Gemm/64", "run_name": "BM_Gemm/64", "run_type": "iteration", "repetitions": 3,
   "repetition_index": 0, "threads": 1, "iterations": 1000, "real_time": 1.5, "cpu_time": 1.4, "time_unit": "us"},
  {"name": "BM_Gemm/64", "run_name": "BM_Gemm/64", "run_type": "iteration", "repetitions": 3,
   "repetition_index": 1, "threads": 1, "iterations": 1000, "real_time": 2.5, "cpu_time": 2.4, "time_unit": "us"},
  {"name": "BM_Gemm/64", "run_name": "BM_Gemm/64", "run_type": "iteration", "repetitions": 3,
   "repetition_index": 2, "threads": 1, "iterations": 1000, "real_time": 2.0, "cpu_time": 1.9, "time_unit": "us"},
  {"name": "BM_Gemm/64_mean", "run_name": "BM_Gemm/64", "run_type": "aggregate", "aggregate_name": "mean",
   "repetitions": 3, "threads": 1, "iterations": 3, "real_time": 2.0, "cpu_time": 1.9, "time_unit": "us"}
 ]}"#;

const HYPERFINE: &str = r#"{"results":[{"command":"./gemm 64","mean":0.0015,"stddev":0.0005,
 "median":0.0015,"user":0.001,"system":0.0,"min":0.001,"max":0.002,"times":[0.001,0.002,0.0015],
 "exit_codes":[0,0,0]}]}"#;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn ingest_args(c: &mut Command, format: &str, file: &Path) {
    c.args(["ingest", format]).arg(file).args([
        "--workload-kind",
        "gemm",
        "--workload-name",
        "gemm_64",
        "--param",
        "m=64",
        "--param",
        "n=64",
        "--param",
        "k=64",
        "--dtype",
        "f32",
    ]);
}

#[test]
fn ingest_store_list_show_export_import_round_trip() {
    let d = tmp("rt");
    let store = d.join("a.sqlite");
    let gb = write(&d, "gb.json", GBENCH);
    let hf = write(&d, "hf.json", HYPERFINE);

    let mut c = tf();
    ingest_args(&mut c, "google-benchmark", &gb);
    c.args([
        "--record",
        "--json",
        "--label",
        "label=base",
        "--flops",
        "524288",
    ])
    .arg("--store")
    .arg(&store);
    let v = json_out(&mut c);
    assert_eq!(v["schema_version"], 1);
    let rec = &v["record"];
    assert_eq!(rec["source"], "ingest:google-benchmark");
    assert_eq!(
        rec["samples_ns"],
        serde_json::json!([1500.0, 2500.0, 2000.0])
    );
    assert_eq!(rec["stats"]["p50_ns"], 2000.0);
    // 524288 FLOPs / 2 µs = 2.62144e11 FLOP/s
    let fps = rec["throughput"]["flops_per_s"].as_f64().unwrap();
    assert!((fps / 2.62144e11 - 1.0).abs() < 1e-12, "{fps}");
    let fp = rec["fingerprint"].as_str().unwrap().to_string();

    let mut c = tf();
    ingest_args(&mut c, "hyperfine", &hf);
    c.args(["--record", "--json", "--label", "label=cand"])
        .arg("--store")
        .arg(&store);
    let v2 = json_out(&mut c);
    assert_eq!(
        v2["record"]["fingerprint"],
        fp.as_str(),
        "same identity, same fingerprint"
    );

    let list = json_out(
        tf().args(["records", "list", "--json", "--store"])
            .arg(&store),
    );
    assert_eq!(list["schema_version"], 1);
    let runs = list["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["labels"]["label"], "cand", "newest first");

    let show = json_out(
        tf().args(["records", "show", "base", "--json", "--store"])
            .arg(&store),
    );
    assert_eq!(show["run"]["labels"]["label"], "base");
    assert_eq!(show["records"][0]["stats"]["count"], 3);

    let human = tf()
        .args(["records", "show", "latest", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert!(human.status.success());
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("gemm_64") && text.contains("ingest:hyperfine"),
        "{text}"
    );

    let out = d.join("all.jsonl");
    tf().args(["records", "export", "--out"])
        .arg(&out)
        .arg("--store")
        .arg(&store)
        .assert()
        .success();
    let lines = std::fs::read_to_string(&out).unwrap();
    assert_eq!(lines.lines().count(), 2);

    let store_b = d.join("b.sqlite");
    let imp = json_out(
        tf().args(["records", "import"])
            .arg(&out)
            .args(["--json", "--store"])
            .arg(&store_b),
    );
    assert_eq!(imp["records"], 2);
    let a_show = json_out(
        tf().args(["records", "show", "cand", "--json", "--store"])
            .arg(&store),
    );
    let b_show = json_out(
        tf().args(["records", "show", "cand", "--json", "--store"])
            .arg(&store_b),
    );
    assert_eq!(a_show["records"], b_show["records"]);
    // Importing the same runs again (a retried CI step) writes nothing and says so.
    let again = json_out(
        tf().args(["records", "import"])
            .arg(&out)
            .args(["--json", "--store"])
            .arg(&store_b),
    );
    assert_eq!(again["inserted"].as_array().unwrap().len(), 0, "{again}");
    assert_eq!(
        again["already_stored"].as_array().unwrap().len(),
        2,
        "{again}"
    );
    let human = tf()
        .args(["records", "import"])
        .arg(&out)
        .arg("--store")
        .arg(&store_b)
        .output()
        .unwrap();
    assert!(human.status.success());
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("0 new") && text.contains("2 already stored"),
        "{text}"
    );
    let list_b = json_out(
        tf().args(["records", "list", "--json", "--store"])
            .arg(&store_b),
    );
    assert_eq!(list_b["runs"].as_array().unwrap().len(), 2);
}

#[test]
fn import_with_one_bad_record_writes_nothing() {
    let d = tmp("badimport");
    let store = d.join("s.sqlite");
    let gb = write(&d, "gb.json", GBENCH);
    let good = d.join("good.jsonl");
    let mut c = tf();
    ingest_args(&mut c, "google-benchmark", &gb);
    c.arg("--out").arg(&good).assert().success();
    let line = std::fs::read_to_string(&good).unwrap();
    let line = line.trim_end();
    // Second record of another run, with a tampered identity.
    let bad =
        line.replace("\"m\":64", "\"m\":65")
            .replacen("\"run_id\":\"", "\"run_id\":\"other-", 1);
    let file = write(&d, "mixed.jsonl", &format!("{line}\n{bad}\n"));
    let e = fails(
        tf().args(["records", "import"])
            .arg(&file)
            .arg("--store")
            .arg(&store),
    );
    assert!(
        e.contains("mixed.jsonl:2") && e.contains("fingerprint"),
        "{e}"
    );
    let list = json_out(
        tf().args(["records", "list", "--json", "--store"])
            .arg(&store),
    );
    assert_eq!(list["runs"].as_array().unwrap().len(), 0);
}

#[test]
fn ingest_refuses_estimates_and_summary_only_files() {
    let d = tmp("refuse");
    let est = write(
        &d,
        "estimates.json",
        r#"{"mean":{"confidence_interval":{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":2.0},"point_estimate":1.5,"standard_error":0.1},"median":{"confidence_interval":{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":2.0},"point_estimate":1.5,"standard_error":0.1},"slope":null}"#,
    );
    let mut c = tf();
    ingest_args(&mut c, "criterion", &est);
    let e = fails(&mut c);
    assert!(
        e.contains("estimates.json") && e.contains("sample.json"),
        "{e}"
    );

    let py = write(
        &d,
        "py.json",
        r#"{"benchmarks":[{"name":"test_a","fullname":"t.py::test_a","stats":{"min":1e-6,"max":2e-6,"mean":1.5e-6,"median":1.5e-6,"rounds":2,"iterations":1}}]}"#,
    );
    let mut c = tf();
    ingest_args(&mut c, "pytest-benchmark", &py);
    let e = fails(&mut c);
    assert!(e.contains("benchmarks[0].stats.data"), "{e}");

    let sample = d.join("gemm_64").join("new");
    std::fs::create_dir_all(&sample).unwrap();
    let s = write(
        &sample,
        "sample.json",
        r#"{"sampling_mode":"Linear","iters":[10.0,20.0],"times":[1000.0,2400.0]}"#,
    );
    let mut c = tf();
    ingest_args(&mut c, "criterion", &s);
    let v = json_out(c.arg("--json"));
    assert_eq!(v["record"]["samples_ns"], serde_json::json!([100.0, 120.0]));
    assert_eq!(v["stored_in"], Value::Null);
}

#[test]
fn bad_arguments_and_files_exit_2_with_one_line() {
    let d = tmp("badargs");
    let gb = write(&d, "gb.json", GBENCH);
    let mut c = tf();
    ingest_args(&mut c, "google-benchmark", &gb);
    let e = fails(c.args(["--param", "m=128"]));
    assert!(e.contains("--param") && e.contains("twice"), "{e}");
    let mut c = tf();
    ingest_args(&mut c, "nanobench", &gb);
    let e = fails(&mut c);
    assert!(e.contains("format") && e.contains("nanobench"), "{e}");
    let mut c = tf();
    ingest_args(&mut c, "hyperfine", &gb);
    let e = fails(&mut c);
    assert!(e.contains("gb.json") && e.contains("results"), "{e}");
    let trunc = write(&d, "trunc.json", &GBENCH[..100]);
    let mut c = tf();
    ingest_args(&mut c, "google-benchmark", &trunc);
    assert!(fails(&mut c).contains("trunc.json"));
    let mut c = tf();
    ingest_args(&mut c, "google-benchmark", &d.join("missing.json"));
    assert!(fails(&mut c).contains("missing.json"));

    let garbage = write(&d, "garbage.sqlite", &"not a database ".repeat(500));
    let before = std::fs::read(&garbage).unwrap();
    let e = fails(tf().args(["records", "list", "--store"]).arg(&garbage));
    assert!(
        e.contains("garbage.sqlite") && e.contains("not a TensorForge store"),
        "{e}"
    );
    assert_eq!(std::fs::read(&garbage).unwrap(), before);

    let store = d.join("s.sqlite");
    let e = fails(
        tf().args(["records", "show", "nope", "--store"])
            .arg(&store),
    );
    assert!(e.contains("nope"), "{e}");
}

#[test]
fn default_store_comes_from_the_environment() {
    let d = tmp("env");
    let store = d.join("env.sqlite");
    let hf = write(&d, "hf.json", HYPERFINE);
    let mut c = tf();
    ingest_args(&mut c, "hyperfine", &hf);
    c.env("TENSORFORGE_STORE", &store)
        .arg("--record")
        .assert()
        .success();
    assert!(store.exists());
    let v = json_out(
        tf().env("TENSORFORGE_STORE", &store)
            .args(["records", "list", "--json"]),
    );
    assert_eq!(v["store"], store.display().to_string());
    assert_eq!(v["runs"].as_array().unwrap().len(), 1);
}

/// `ingest ... --record --store NOT_A_STORE --out o.jsonl`: exit 2 and no `o.jsonl`.
#[test]
fn an_ingest_whose_store_fails_leaves_no_out_file() {
    let d = tmp("ingest_atomic");
    let hf = write(&d, "hf.json", HYPERFINE);
    let not_a_store = write(&d, "not_a_store.sqlite", "this is not SQLite");
    let o = d.join("o.jsonl");
    let mut c = tf();
    ingest_args(&mut c, "hyperfine", &hf);
    c.arg("--record")
        .arg("--store")
        .arg(&not_a_store)
        .arg("--out")
        .arg(&o)
        .assert()
        .code(2);
    assert!(!o.exists(), "o.jsonl was written although recording failed");
}

#[test]
fn an_unreachable_postgres_store_is_one_line_redacted_and_writes_no_file() {
    // Before the PostgreSQL engine, the URL was taken as a file name: a local SQLite file
    // appeared and the command exited 0, so a team would have believed its runs were shared.
    // Now it is a server to connect to; none listens on this port.
    let dir = tmp("pg_url");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://ci:s3cret@127.0.0.1:{port}/bench?connect_timeout=2");
    let shown = format!("postgres://ci:***@127.0.0.1:{port}/bench");
    for args in [
        vec!["records", "list", "--store", &url],
        vec!["quickstart", "--store", &url],
        vec!["records", "sync", "--from", &url, "--to", "x.sqlite"],
    ] {
        let err = fails(tf().current_dir(&dir).args(&args));
        assert!(
            err.contains(&shown) && err.contains("cannot connect"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("s3cret"), "{args:?}: {err}");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "{args:?} wrote into the working directory"
        );
    }
}

#[test]
fn sync_lists_a_refused_run_copies_the_rest_and_exits_2() {
    use tensorforge_store::testing::record;
    use tensorforge_store::Store;
    let dir = tmp("sync-refused");
    let (a, b) = (dir.join("a.sqlite"), dir.join("b.sqlite"));
    // Two good runs and, between them, one the store's checks refuse: a NUL in its workload
    // name, under a run id holding a newline (written around the checks, as an old store may
    // hold it).
    let mut bad = record("bad\nrun", 2, "m", 2, 1, None);
    bad.workload.name = "g\0x".into();
    Store::open(&a)
        .unwrap()
        .insert_runs_unchecked(&[
            vec![record("good-1", 1, "m", 1, 1, None)],
            vec![bad],
            vec![record("good-2", 3, "m", 3, 1, None)],
        ])
        .unwrap();
    let sync = |json: bool| {
        let mut c = tf();
        c.args(["records", "sync", "--from"])
            .arg(&a)
            .arg("--to")
            .arg(&b);
        if json {
            c.arg("--json");
        }
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("1 run(s) and 0 profile(s) refused"),
            "{stderr}"
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let out = sync(false);
    // One line for the refused run, its id and the value escaped, then the summary.
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with("refused run bad\\nrun: run bad\\nrun record 0"),
        "{out}"
    );
    assert!(
        lines[0].contains("`workload.name` = `g\\0x`") && lines[0].contains("NUL"),
        "{out}"
    );
    assert!(!out.contains('\0'));
    assert!(
        lines[1].contains("2 run(s) copied (2 records), 0 already there, 1 refused"),
        "{out}"
    );
    let stored: Vec<String> = Store::open(&b)
        .unwrap()
        .list_runs()
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(stored, ["good-2", "good-1"]);
    // A rerun copies nothing, lists the same refusal and exits 2 again.
    let out = sync(false);
    assert!(
        out.contains("0 run(s) copied (0 records), 2 already there, 1 refused"),
        "{out}"
    );
    // The JSON says the same, then exits 2.
    let v: Value = serde_json::from_str(&sync(true)).unwrap();
    assert_eq!(v["schema_version"], 2);
    assert_eq!(v["runs_copied"], 0);
    assert_eq!(v["runs_refused"][0]["run_id"], "bad\nrun");
    // Syncing the clean copy onwards refuses nothing: exit 0.
    tf().args(["records", "sync", "--from"])
        .arg(&b)
        .arg("--to")
        .arg(dir.join("c.sqlite"))
        .assert()
        .success();
}
