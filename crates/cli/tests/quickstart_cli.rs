//! The main job end to end through the binary: a fresh store and an empty directory (no
//! source tree needed). The first run starts the history; the second, unchanged, passes on
//! its counts with one run of history; the third, with a real 10 % slowdown injected into
//! one workload, fails on that workload's counts. Each writes report.md and report.html. Two
//! builds in one run (`--baseline-bin`). Bad input exits 2 and writes nothing.

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

    // The second run: counts decide (valgrind is installed wherever the tests run), and an
    // unchanged build counts the same, so it passes with one run of history; time is
    // reported beside the counts without deciding.
    let second = quickstart(&dir);
    let code = second.get_output().status.code();
    let out = String::from_utf8_lossy(&second.get_output().stdout).to_string();
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("against 1 earlier run(s)"), "{out}");
    assert!(out.contains("counts: counted with callgrind"), "{out}");
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    // Markdown escapes `_` and `+`: "Decided: 8 workload(s) by peak_alloc + instructions +
    // estimated_cycles".
    assert!(
        md.contains(r"by peak\_alloc \+ instructions \+ estimated\_cycles"),
        "{md}"
    );
    assert!(md.contains(r"no\: counts decide"), "{md}");

    // A real 10 % slowdown of one workload (a tenth-sized softmax after every call) is a
    // FAIL of its counts, and the output says the slowdown was injected.
    let third = Command::cargo_bin("tensorforge")
        .unwrap()
        .current_dir(&dir)
        .env_remove("TENSORFORGE_STORE")
        .env("TENSORFORGE_INJECT_EXTRA_WORK", "softmax_1024x4096=0.10")
        .args(["quickstart", "--json", "--store"])
        .arg(dir.join("store.sqlite"))
        .args(["--time-budget-ms", "100", "--iterations", "20"])
        .assert()
        .code(1);
    let v: serde_json::Value = serde_json::from_slice(&third.get_output().stdout).unwrap();
    assert_eq!(v["exit_code"], 1);
    assert!(
        v["injected"][0]
            .as_str()
            .unwrap()
            .contains("softmax_1024x4096: extra work +10.0 %"),
        "{v}"
    );
    let rows = v["gate"]["rows"].as_array().unwrap();
    let row = |m: &str| {
        rows.iter()
            .find(|r| r["workload"] == "softmax_1024x4096" && r["metric"] == m)
            .unwrap()
    };
    // 1024 rows + round(102.4) = 102 rows: +9.96 % of the instructions, give or take the
    // per-call overhead.
    let change = row("instructions")["change_relative"].as_f64().unwrap();
    assert!((0.08..0.12).contains(&change), "{change}");
    assert_eq!(row("instructions")["verdict"], "FAIL");
    assert_eq!(row("estimated_cycles")["verdict"], "FAIL");
    // Every other workload still passes on its counts.
    for d in v["gate"]["decisions"].as_array().unwrap() {
        let expect = if d["workload"] == "softmax_1024x4096" {
            "FAIL"
        } else {
            "PASS"
        };
        if d["verdict"] != "NOT_COMPARABLE" {
            assert_eq!(d["verdict"], expect, "{d}");
        }
    }
    // The store now holds both runs, labelled as the main job's.
    let listed = Command::cargo_bin("tensorforge")
        .unwrap()
        .args(["records", "list", "--json", "--store"])
        .arg(dir.join("store.sqlite"))
        .assert()
        .success();
    let text = String::from_utf8_lossy(&listed.get_output().stdout).to_string();
    assert!(text.matches("quickstart-1t").count() >= 3, "{text}");
}

/// `--baseline-bin`: this build against itself (the same binary) in one A B B A round:
/// counts equal, PASS; nothing recorded. A missing baseline is one line, exit 2.
#[test]
fn quickstart_against_a_baseline_binary() {
    let dir = tmp("twobuilds");
    let exe = assert_cmd::cargo::cargo_bin("tensorforge");
    let out = Command::cargo_bin("tensorforge")
        .unwrap()
        .current_dir(&dir)
        .env_remove("TENSORFORGE_STORE")
        .env("XDG_DATA_HOME", &dir)
        .args([
            "quickstart",
            "--json",
            "--rounds",
            "1",
            "--time-budget-ms",
            "5",
        ])
        .args(["--iterations", "3", "--baseline-bin"])
        .arg(&exe)
        .assert()
        .code(0);
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["runs_per_side"], 2);
    let d = v["gate"]["decisions"].as_array().unwrap();
    assert!(d.iter().any(|x| x["decided_by"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m == "estimated_cycles")));
    assert!(dir.join("report.html").is_file());
    assert!(
        !dir.join("tensorforge").exists(),
        "nothing recorded in a store"
    );
    let bad = Command::cargo_bin("tensorforge")
        .unwrap()
        .current_dir(&dir)
        .args(["quickstart", "--baseline-bin", "/nonexistent/tf-old"])
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&bad.get_output().stderr).to_string();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent/tf-old"), "{err}");
}

/// Where valgrind cannot run, the job says so in one line and gates on time; it does not
/// fail for that. `--counts` requires counting: then a missing valgrind is an error, exit 2.
#[test]
fn quickstart_without_valgrind_says_so_and_gates_on_time() {
    let dir = tmp("novalgrind");
    let run = |extra: &[&str]| {
        Command::cargo_bin("tensorforge")
            .unwrap()
            .current_dir(&dir)
            .env_remove("TENSORFORGE_STORE")
            .env("TENSORFORGE_VALGRIND", "/nonexistent/valgrind")
            .args(["quickstart", "--store"])
            .arg(dir.join("store.sqlite"))
            .args(["--time-budget-ms", "20", "--iterations", "5"])
            .args(extra)
            .assert()
    };
    let out = run(&[]).code(0);
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    let line: Vec<&str> = text.lines().filter(|l| l.starts_with("counts:")).collect();
    assert_eq!(line.len(), 1, "{text}");
    assert!(
        line[0].contains("valgrind not found") && line[0].contains("decides on time only"),
        "{text}"
    );
    let out = run(&["--counts"]).code(2);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("valgrind not found"), "{err}");
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
