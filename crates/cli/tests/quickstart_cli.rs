//! The main job end to end through the binary: a fresh store and an empty directory (no
//! source tree needed), run twice. The first run starts the history; the second is gated
//! against one earlier run, too little history for a FAIL, so an unchanged build passes or
//! is inconclusive (exit 0 or 3) and never fails; both write report.md and report.html.
//! Bad input exits 2 and writes nothing.

use assert_cmd::Command;
use std::path::PathBuf;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tf-qs-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn quickstart(dir: &PathBuf) -> assert_cmd::assert::Assert {
    Command::cargo_bin("tensorforge")
        .unwrap()
        .current_dir(dir)
        .env_remove("TENSORFORGE_STORE")
        .args(["quickstart", "--store"])
        .arg(dir.join("store.sqlite"))
        .args(["--time-budget-ms", "100", "--iterations", "20"])
        .assert()
}

#[test]
fn quickstart_twice_establishes_a_baseline_then_passes() {
    let dir = tmp("twice");
    let first = quickstart(&dir).code(0);
    let out = String::from_utf8_lossy(&first.get_output().stdout).to_string();
    assert!(out.contains("baseline established"), "{out}");
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(md.contains("Model validation"), "{md}");
    assert!(
        html.contains("<svg"),
        "the HTML report should inline its SVG plots"
    );
    assert!(html.contains("gemm_square_512"));
    tensorforge_ops::markup::check_well_formed(&html).unwrap();

    let second = quickstart(&dir);
    let code = second.get_output().status.code();
    let out = String::from_utf8_lossy(&second.get_output().stdout).to_string();
    assert!(matches!(code, Some(0) | Some(3)), "exit {code:?}: {out}");
    assert!(out.contains("against 1 earlier run(s)"), "{out}");
    if code == Some(3) {
        assert!(out.contains("too little history"), "{out}");
    }
    // The store now holds both runs, labelled as the main job's.
    let listed = Command::cargo_bin("tensorforge")
        .unwrap()
        .args(["records", "list", "--json", "--store"])
        .arg(dir.join("store.sqlite"))
        .assert()
        .success();
    let text = String::from_utf8_lossy(&listed.get_output().stdout).to_string();
    assert!(text.matches("quickstart-1t").count() >= 2, "{text}");
}

#[test]
fn quickstart_bad_policy_exits_2_and_writes_nothing() {
    let dir = tmp("badpolicy");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, "[metrics.latency_p50]\ndirection = \"sideways\"\n").unwrap();
    let a = Command::cargo_bin("tensorforge")
        .unwrap()
        .current_dir(&dir)
        .args(["quickstart", "--store"])
        .arg(dir.join("store.sqlite"))
        .arg("--policy")
        .arg(&policy)
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
    assert!(err.contains("policy.toml"), "{err}");
    assert!(!dir.join("report.md").exists());
    assert!(!dir.join("report.html").exists());
    assert!(!dir.join("store.sqlite").exists());
}
