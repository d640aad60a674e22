//! `tensorforge compare` end to end: interleaved ABBA/BAAB rounds of two commands, its JSON,
//! and its errors (a side that fails, a side that hangs past the timeout, two sides that
//! measure different workloads: one line, exit 2). Decisions on real timings are measured
//! by tools/gate_trials.sh, not asserted here (a timed assertion would be flaky).

use assert_cmd::Command;

fn tf() -> Command {
    Command::cargo_bin("tensorforge").unwrap()
}

#[test]
fn wall_mode_json_lists_every_run() {
    let out = tf()
        .args([
            "compare",
            "--baseline",
            "true",
            "--candidate",
            "true",
            "--rounds",
            "3",
            "--max-rounds",
            "3",
            "--json",
        ])
        .output()
        .unwrap();
    // Same command on both sides: never a regression.
    assert!(matches!(out.status.code(), Some(0) | Some(3)), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema_version"], 2);
    assert_eq!(v["result"]["schema_version"], 2);
    assert_eq!(v["rounds"], 3);
    // ABBA or BAAB: four timed runs per round.
    assert_eq!(v["runs"].as_array().unwrap().len(), 12);
    assert_eq!(v["result"]["rows"][0]["rounds"], 3);
    assert_ne!(v["result"]["overall"], "FAIL");
}

#[test]
fn failing_hanging_and_mismatched_sides_exit_2() {
    let out = tf()
        .args(["compare", "--baseline", "true", "--candidate", "exit 7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("candidate command") && err.contains('7'),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let out = tf()
        .args([
            "compare",
            "--baseline",
            "true",
            "--candidate",
            "sleep 30",
            "--timeout-s",
            "0.5",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("timed out"));

    let bench = |w: &str| {
        format!(
            "{} bench {w} --json --threads 1 --time-budget-ms 5 --iterations 3",
            env!("CARGO_BIN_EXE_tensorforge")
        )
    };
    let out = tf()
        .args([
            "compare",
            "--mode",
            "records",
            "--baseline",
            &bench("gemm:m=8:n=8:k=8"),
            "--candidate",
            &bench("gemm:m=8:n=8:k=9"),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("identity mismatch"), "{err}");

    let out = tf()
        .args([
            "compare",
            "--baseline",
            "true",
            "--candidate",
            "true",
            "--rounds",
            "2",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rounds"));
}
