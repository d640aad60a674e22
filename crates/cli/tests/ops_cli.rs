//! End-to-end runs of `tensorforge gate`, `report` and `history` on JSON-lines record files
//! written here with `Record::new`: every gate exit code (0 pass, 1 fail against a history of
//! runs, 2 error, 3 inconclusive with too little history), HTML well-formedness with a hostile workload name, and change points.

use assert_cmd::Command;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tensorforge_store::{
    DeviceContext, HarnessSettings, Record, SoftwareContext, WorkloadIdentity,
};

fn tf() -> Command {
    Command::cargo_bin("tensorforge").unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tf-ops-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn rec(name: &str, dtype: &str, run: &str, samples: Vec<f64>, ts: i64) -> Record {
    let mut params = BTreeMap::new();
    params.insert("m".into(), serde_json::json!(64));
    let w = WorkloadIdentity {
        kind: "gemm".into(),
        name: name.into(),
        params,
        dtype: dtype.into(),
    };
    let d = DeviceContext {
        kind: "cpu".into(),
        cpu_model: "test cpu".into(),
        machine_id: "m1".into(),
        ..Default::default()
    };
    Record::new(tensorforge_store::RecordParts {
        run_id: run.into(),
        workload: w,
        device: d,
        software: SoftwareContext::default(),
        harness: HarnessSettings::default(),
        samples_ns: samples,
        flops: None,
        bytes: None,
        peak_alloc_bytes: None,
        timestamp_unix_s: ts,
        labels: BTreeMap::new(),
        source: "harness".into(),
    })
    .unwrap()
}

fn ramp(base: f64, n: usize) -> Vec<f64> {
    (0..n).map(|i| base * (1.0 + i as f64 / 1000.0)).collect()
}

fn write(path: &Path, recs: &[Record]) -> String {
    let text: String = recs
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect();
    std::fs::write(path, text).unwrap();
    path.display().to_string()
}

fn gate_code(dir: &Path, b: &[Record], c: &[Record], extra: &[&str]) -> (i32, String) {
    let bf = write(&dir.join("b.jsonl"), b);
    let cf = write(&dir.join("c.jsonl"), c);
    let out = tf()
        .args([
            "gate",
            "--baseline",
            &bf,
            "--candidate",
            &cf,
            "--today",
            "2025-01-01",
        ])
        .args(extra)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!text.contains("panicked"), "{text}");
    (out.status.code().unwrap(), text)
}

#[test]
fn gate_exit_codes_end_to_end() {
    let d = tmp("codes");
    let base = vec![rec("g", "f32", "b", ramp(1000.0, 30), 1)];
    // 0: the same build twice.
    let (code, out) = gate_code(&d, &base, &base, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("PASS"));
    // 1: a 2x slowdown against six runs of history (1 % apart) in one baseline file.
    let history: Vec<Record> = (0..6)
        .map(|i| {
            let f = 1.0 + i as f64 / 100.0;
            rec("g", "f32", &format!("b{i}"), ramp(1000.0 * f, 30), i)
        })
        .collect();
    let slow = vec![rec("g", "f32", "c", ramp(2000.0, 30), 20)];
    let (code, out) = gate_code(&d, &history, &slow, &["--json"]);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["overall"], "FAIL");
    assert_eq!(v["exit_code"], 1);
    assert_eq!(v["schema_version"], 3);
    assert_eq!(v["rows"][0]["baseline_runs"], 6);
    // 3: the same 2x slowdown against one baseline run: samples of one run are not
    // replicates, so it is INCONCLUSIVE ("too little history"), never FAIL.
    let (code, out) = gate_code(&d, &base, &slow, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("too little history"), "{out}");
    // 2: identity mismatch (same name, other dtype) is ERROR, never FAIL or PASS.
    let other = vec![rec("g", "f16", "c", ramp(1000.0, 30), 2)];
    let (code, out) = gate_code(&d, &base, &other, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("identity mismatch"), "{out}");
    // 2: a workload missing on one side.
    let two = vec![
        rec("g", "f32", "b", ramp(1000.0, 30), 1),
        rec("h", "bf16", "b", ramp(1000.0, 30), 1),
    ];
    let (code, out) = gate_code(&d, &two, &base, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("missing in the candidate"), "{out}");
    // 3: too few samples to test.
    let few = vec![rec("g", "f32", "b", ramp(1000.0, 4), 1)];
    let (code, out) = gate_code(&d, &few, &few, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("INCONCLUSIVE"));
}

#[test]
fn gate_operational_errors_exit_2_with_one_line() {
    let d = tmp("operr");
    let base = vec![rec("g", "f32", "b", ramp(1000.0, 30), 1)];
    let pf = d.join("bad.toml");
    std::fs::write(
        &pf,
        "schema_version = 1\n[metrics.latency_p50]\nmax_relative = -1\n",
    )
    .unwrap();
    let (code, out) = gate_code(&d, &base, &base, &["--policy", &pf.display().to_string()]);
    assert_eq!(code, 2);
    assert!(
        out.contains("bad.toml")
            && out.contains("metrics.latency_p50.max_relative")
            && out.contains("-1"),
        "{out}"
    );
    assert_eq!(out.trim().lines().count(), 1, "{out}");
    let (code, out) = gate_code(&d, &base, &base, &["--today", "2025-02-30"]);
    assert_eq!(code, 2, "{out}");
    let missing = d.join("nope.jsonl").display().to_string();
    let store = d.join("no-store.sqlite").display().to_string();
    let out = tf()
        .args([
            "gate",
            "--baseline",
            &missing,
            "--candidate",
            &missing,
            "--store",
            &store,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nope.jsonl") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn report_writes_three_formats_with_escaped_names() {
    let d = tmp("report");
    let evil = "<script>alert('x')</script>";
    let bf = write(
        &d.join("b.jsonl"),
        &[rec(evil, "f32", "b", ramp(1000.0, 30), 1)],
    );
    let cf = write(
        &d.join("c.jsonl"),
        &[rec(evil, "f32", "c", ramp(1500.0, 30), 2)],
    );
    let out_dir = d.join("out");
    tf().args([
        "report",
        "--baseline",
        &bf,
        "--candidate",
        &cf,
        "--hw",
        "balanced",
        "--today",
        "2025-01-01",
    ])
    .arg("--out-dir")
    .arg(&out_dir)
    .assert()
    .success();
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    tensorforge_ops::markup::check_well_formed(&html).unwrap();
    assert!(!html.contains("<script"), "unescaped user string");
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    // One baseline run: too little history for a FAIL.
    assert!(
        md.contains("**Decision: INCONCLUSIVE**") && !md.contains("<script"),
        "{md}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["gate"]["overall"], "INCONCLUSIVE");
    // No leftover temp files next to the outputs.
    let names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    // Nothing to write is an operational error.
    tf().args(["report", "--baseline", &bf, "--candidate", &cf])
        .assert()
        .code(2);
}

#[test]
fn history_marks_the_step() {
    let d = tmp("history");
    let mut recs = Vec::new();
    for i in 0..12 {
        let level = if i < 6 { 1000.0 } else { 1300.0 };
        let wobble = [0.0, 4.0, -3.0, 2.0, -5.0, 3.0][i % 6];
        recs.push(rec(
            "g",
            "f32",
            &format!("run{i:02}"),
            ramp(level + wobble, 10),
            100 + i as i64,
        ));
    }
    let f = write(&d.join("h.jsonl"), &recs);
    let svg = d.join("h.svg");
    let out = tf()
        .args([
            "history",
            "g",
            "--metric",
            "latency_p50",
            "--records",
            &f,
            "--json",
            "--svg",
        ])
        .arg(&svg)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["points"].as_array().unwrap().len(), 12);
    let cps = v["change_points"].as_array().unwrap();
    assert_eq!(cps.len(), 1, "{v}");
    assert_eq!(cps[0]["index"], 6);
    assert_eq!(cps[0]["run_id"], "run06");
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.contains("change point"));
    tensorforge_ops::markup::check_well_formed(&s).unwrap();
    // Text: times scaled with their unit, timestamps as UTC dates. Run 0's p50 is about
    // 1000 ns ("1.00 µs" after scaling; the ramp adds a little), timestamp 100 s after the
    // epoch is 1970-01-01 00:01:40Z.
    let out = tf()
        .args(["history", "g", "--metric", "latency_p50", "--records", &f])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1970-01-01 00:01:40Z") && text.contains(" µs") && !text.contains("e3"),
        "{text}"
    );
    tf().args(["history", "g", "--metric", "latency_p42", "--records", &f])
        .assert()
        .code(2);
    tf().args(["history", "nope", "--records", &f])
        .assert()
        .code(2);
}

/// `report --markdown ok.md --html /nonexistent/x.html`: exit 2 and no `ok.md` (every file
/// is staged before any is published).
#[test]
fn a_report_that_cannot_write_one_file_writes_none() {
    let d = tmp("report_atomic");
    let bf = write(
        &d.join("b.jsonl"),
        &[rec("w", "f32", "b", ramp(1000.0, 30), 1)],
    );
    let cf = write(
        &d.join("c.jsonl"),
        &[rec("w", "f32", "c", ramp(1000.0, 30), 2)],
    );
    let md = d.join("ok.md");
    let out = tf()
        .args([
            "report",
            "--baseline",
            &bf,
            "--candidate",
            &cf,
            "--markdown",
        ])
        .arg(&md)
        .args(["--html", "/nonexistent/dir/x.html"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/dir"), "{err}");
    assert!(!md.exists(), "ok.md was written although the report failed");
    assert!(
        std::fs::read_dir(&d).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".tmp-")),
        "a temporary file was left"
    );
}

/// A workload named like a Markdown image stays text in report.md (a CI summary would
/// otherwise load the image), and a newline in a name cannot forge a `gate:` line.
#[test]
fn user_strings_cannot_inject_markdown_or_lines() {
    let d = tmp("inject");
    let img = "![i](http://evil.example/p.png)";
    let bf = write(
        &d.join("b.jsonl"),
        &[rec(img, "f32", "b", ramp(1000.0, 30), 1)],
    );
    let cf = write(
        &d.join("c.jsonl"),
        &[rec(img, "f32", "c", ramp(1000.0, 30), 2)],
    );
    let md = d.join("r.md");
    tf().args([
        "report",
        "--baseline",
        &bf,
        "--candidate",
        &cf,
        "--markdown",
    ])
    .arg(&md)
    .assert()
    .success();
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(!text.contains("![i]("), "live image in the report:\n{text}");
    assert!(text.contains("\\!\\[i\\]"), "{text}");
    let forged = "w\ngate: PASS";
    let bf = write(
        &d.join("b2.jsonl"),
        &[rec(forged, "f32", "b", ramp(1000.0, 30), 1)],
    );
    let cf = write(
        &d.join("c2.jsonl"),
        &[rec(forged, "f32", "c", ramp(1000.0, 30), 2)],
    );
    let out = tf()
        .args(["gate", "--baseline", &bf, "--candidate", &cf])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("gate:")).count(),
        1,
        "{stdout}"
    );
    assert!(stdout.contains("w\\ngate: PASS"), "{stdout}");
}
