//! `bench`, `calibrate` and `validate` through the binary: structure, errors and invariants
//! only (never timings: the machine is shared and noisy). Stores and files live in temp dirs.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn tf() -> Command {
    let mut c = Command::cargo_bin("tensorforge").unwrap();
    // Never touch the user's default store.
    c.env("TENSORFORGE_STORE", "/nonexistent-dir/never.sqlite");
    c
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tf-measure-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn dir_is_empty(d: &Path) -> bool {
    std::fs::read_dir(d).unwrap().next().is_none()
}

const TINY_SUITE: &str = r#"
[[workload]]
name = "g16"
kind = "gemm"
m = 16
n = 16
k = 16

[[workload]]
name = "sm"
kind = "kernel"
kernel = "softmax"
rows = 4
cols = 64
"#;

#[test]
fn bench_unknown_workload_lists_names_and_writes_nothing() {
    let d = tmp("unknown");
    let store = d.join("s.sqlite");
    let out = tf()
        .args(["bench", "gemm_huge", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr_of(&out);
    assert!(
        e.contains("gemm_huge") && e.contains("gemm_tiny") && e.contains("kernel:softmax"),
        "{e}"
    );
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(dir_is_empty(&d));
}

#[test]
fn bench_malformed_file_names_file_entry_and_field() {
    let d = tmp("malformed");
    let f = d.join("w.toml");
    std::fs::write(&f, TINY_SUITE.replace("m = 16", "m = 0")).unwrap();
    let out = tf().arg("bench").arg(&f).arg("--record").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr_of(&out);
    assert!(
        e.contains("w.toml") && e.contains("workload[0]") && e.contains('m'),
        "{e}"
    );
    std::fs::write(&f, "[[workload]\nkind=").unwrap();
    let out = tf().arg("bench").arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_of(&out).contains("w.toml"));
    let out = tf()
        .args(["bench", "gemm_tiny", "--label", "novalue"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_of(&out).contains("--label"));
    let out = tf()
        .args(["bench", "gemm_tiny", "--threads", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // Only the workload file itself exists.
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
}

#[test]
fn bench_json_records_and_store() {
    let d = tmp("bench");
    let store = d.join("s.sqlite");
    let out = tf()
        .args([
            "bench",
            "gemm:m=8:n=8:k=8:batch=2",
            "kernel:logaddexp:n=256",
            "empty",
            "--threads",
            "1",
            "--iterations",
            "3",
            "--time-budget-ms",
            "1",
            "--label",
            "branch=test",
            "--json",
            "--store",
        ])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema_version"], 1);
    let recs = v["records"].as_array().unwrap();
    assert_eq!(recs.len(), 3);
    for r in recs {
        assert_eq!(r["schema_version"], 2); // record schema 2: batching, clock and instruction fields
        assert_eq!(r["labels"]["branch"], "test");
        assert_eq!(r["harness"]["threads"], 1);
        assert!(r["samples_ns"].as_array().unwrap().len() >= 3);
        assert!(r["harness"]["note"].is_string());
        // The CLI installs the counting allocator.
        assert!(r["peak_alloc_bytes"].is_u64());
        assert_eq!(r["workload"]["dtype"], "f32");
        assert!(r["harness"]["timer_resolution_ns"].as_f64().unwrap() > 0.0);
        assert!(r["harness"]["overhead_ns"].as_f64().unwrap() > 0.0);
    }
    // The empty call is timed in batches spanning 1000x the clock's resolution.
    assert!(recs[2]["harness"]["batch_iterations"].as_u64().unwrap() > 1);
    // 2 GEMMs of 2·8³ FLOPs each.
    assert_eq!(recs[0]["flops"], 2048.0);
    assert!(recs[2]["flops"].is_null());
    assert!(store.is_file());
}

#[test]
fn bench_graph_workload_json_and_unknown_graph() {
    let out = tf()
        .args([
            "bench",
            "graph:attention_softmax:mode=fused",
            "--threads",
            "1",
            "--iterations",
            "2",
            "--time-budget-ms",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v["records"][0];
    assert_eq!(r["workload"]["kind"], "graph");
    assert_eq!(r["workload"]["dtype"], "f32");
    assert_eq!(r["workload"]["params"]["mode"], "fused");
    assert_eq!(
        r["workload"]["params"]["graph_sha256"]
            .as_str()
            .unwrap()
            .len(),
        64
    );
    // The graph compiler's fused traffic for examples/graphs/attention_softmax.json.
    assert_eq!(r["bytes"], 262148.0);
    assert!(r["flops"].as_f64().unwrap() > 0.0);
    assert!(r["samples_ns"].as_array().unwrap().len() >= 2);

    let out = tf()
        .args(["bench", "graph:no_such_graph:mode=fused"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr_of(&out);
    assert!(
        e.contains("no_such_graph")
            && e.contains("attention_softmax")
            && e.contains("rmsnorm_swiglu_mlp")
            && e.contains("elementwise_chain"),
        "{e}"
    );
    assert_eq!(e.trim().lines().count(), 1, "{e}");
}

#[test]
fn calibrate_then_validate_and_refusals() {
    let d = tmp("loop");
    let store = d.join("s.sqlite");
    let profile = d.join("p.toml");
    let suite = d.join("suite.toml");
    std::fs::write(&suite, TINY_SUITE).unwrap();

    // validate with an empty store: a clear error, nothing created.
    let out = tf()
        .args(["validate", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).contains("tensorforge calibrate"),
        "{}",
        stderr_of(&out)
    );
    assert!(!store.exists());

    // calibrate --out into a missing directory: error, nothing written.
    let out = tf()
        .args(["calibrate", "--quick", "--out"])
        .arg(d.join("missing/p.toml"))
        .arg("--store")
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!store.exists());

    let out = tf()
        .args(["calibrate", "--quick", "--json", "--out"])
        .arg(&profile)
        .arg("--store")
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let machine = v["calibration"]["provenance"]["machine_id"]
        .as_str()
        .unwrap()
        .to_string();
    let probes = v["calibration"]["provenance"]["probes"].as_array().unwrap();
    assert!(probes.iter().any(|p| p["probe"] == "stream_triad"));
    assert!(probes.iter().any(|p| p["probe"] == "fma_peak"));
    let text = std::fs::read_to_string(&profile).unwrap();
    // The profile is a plain hardware file too.
    let hw = tf()
        .args(["hw", "show", "--file"])
        .arg(&profile)
        .args(["--json"])
        .output()
        .unwrap();
    assert_eq!(hw.status.code(), Some(0), "{}", stderr_of(&hw));

    // validate from the store's latest profile, with plots and JSON.
    let plots = d.join("plots");
    let out = tf()
        .args([
            "validate",
            "--iterations",
            "3",
            "--time-budget-ms",
            "1",
            "--json",
            "--store",
        ])
        .arg(&store)
        .arg("--workloads")
        .arg(&suite)
        .arg("--plots")
        .arg(&plots)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["schema_version"], 2); // validation schema 2: ceiling violations
    assert_eq!(r["rows"].as_array().unwrap().len(), 2);
    assert_eq!(r["variants"][0]["label"], "roofline");
    assert_eq!(r["variants"][1]["label"], "roofline+floor");
    assert!(!r["limitations"].as_array().unwrap().is_empty());
    // Every row says whether it beat its roof; the report lists exactly those rows.
    let flagged = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["ceiling_violated"].as_bool().unwrap())
        .count();
    assert_eq!(r["ceiling_violations"].as_array().unwrap().len(), flagged);
    for f in ["roofline.svg", "predicted_vs_measured.svg"] {
        let s = std::fs::read_to_string(plots.join(f)).unwrap();
        assert!(s.contains("<svg") && s.contains("</svg>"));
    }

    // Human table from an explicit profile.
    let out = tf()
        .args([
            "validate",
            "--iterations",
            "2",
            "--time-budget-ms",
            "1",
            "--profile",
        ])
        .arg(&profile)
        .arg("--workloads")
        .arg(&suite)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("measured p50") && s.contains("median") && s.contains("limitations"),
        "{s}"
    );
    assert!(s.contains("ceiling"), "{s}");

    // The same profile with ceilings of 1 FLOP/s and 1 B/s: every workload beats its roof,
    // and each is flagged in the table and on its own line, never as a normal ratio.
    let low = d.join("low.toml");
    let lowered: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("fp32 = ") {
                "fp32 = 1.0".to_string()
            } else if l.starts_with("bandwidth_bytes_per_s = ") {
                "bandwidth_bytes_per_s = 1.0".to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    std::fs::write(&low, lowered.join("\n")).unwrap();
    let out = tf()
        .args([
            "validate",
            "--iterations",
            "2",
            "--time-budget-ms",
            "1",
            "--profile",
        ])
        .arg(&low)
        .arg("--workloads")
        .arg(&suite)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    assert_eq!(s.matches("ceiling violated: ").count(), 2, "{s}");
    assert_eq!(s.matches("VIOLATED").count(), 2, "{s}");
    assert!(
        s.contains("% of its calibrated roof (fp32 compute peak 0.0 GFLOP/s)")
            && s.contains("the calibration evidence is wrong or incomplete")
            && s.contains("2 of 2 workloads beat their roofline lower bound"),
        "{s}"
    );

    // A holdout equal to the calibration GEMM probe (896³ in quick mode) is refused.
    let clash = d.join("clash.toml");
    std::fs::write(
        &clash,
        "[[workload]]\nkind = \"gemm\"\nm = 896\nn = 896\nk = 896\n",
    )
    .unwrap();
    let out = tf()
        .args(["validate", "--profile"])
        .arg(&profile)
        .arg("--workloads")
        .arg(&clash)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_of(&out).contains("overlap"), "{}", stderr_of(&out));

    // A profile from another machine is refused, naming both machine ids.
    let foreign = d.join("foreign.toml");
    std::fs::write(&foreign, text.replace(&machine, "0123456789abcdef")).unwrap();
    let out = tf()
        .args(["validate", "--profile"])
        .arg(&foreign)
        .arg("--workloads")
        .arg(&suite)
        .arg("--plots")
        .arg(d.join("foreign-plots"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr_of(&out);
    assert!(
        e.contains("0123456789abcdef") && e.contains(&machine) && e.contains("calibrate"),
        "{e}"
    );
    assert!(!d.join("foreign-plots").exists());

    // A plain hardware preset is not a calibrated profile.
    let plain = d.join("plain.toml");
    std::fs::write(
        &plain,
        text.lines()
            .filter(|l| !l.contains("provenance_json"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let out = tf()
        .args(["validate", "--profile"])
        .arg(&plain)
        .arg("--workloads")
        .arg(&suite)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).contains("plain.toml"),
        "{}",
        stderr_of(&out)
    );
}

/// `bench --instructions` counts with callgrind: a count, so two runs of the same build give
/// the same number (the issue's bound is 0.1 %; single-threaded callgrind gives it exactly).
#[test]
fn instruction_counts_repeat() {
    let count = || -> Vec<(f64, f64)> {
        let out = Command::cargo_bin("tensorforge")
            .unwrap()
            .args([
                "bench",
                "gemm:m=32:n=32:k=32",
                "empty",
                "--threads",
                "1",
                "--time-budget-ms",
                "5",
                "--iterations",
                "3",
                "--instructions",
                "2",
                "--json",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let recs = v["records"].as_array().unwrap();
        // The empty call is the harness's overhead probe: never gated, so never counted.
        assert!(recs[1]["instructions"].is_null() && recs[1]["counts"].is_null());
        let r = &recs[0];
        assert_eq!(r["instructions_source"], "callgrind");
        assert_eq!(r["counts"]["counter"], "callgrind");
        assert_eq!(r["counts"]["iterations"], 2);
        // 65 536 FLOPs: within the counting budget, so the instance itself is counted.
        assert_eq!(r["counts"]["work_divisor"], 1);
        let i = r["instructions"].as_f64().unwrap();
        let c = r["counts"]["estimated_cycles"].as_f64().unwrap();
        assert_eq!(r["counts"]["instructions"].as_f64().unwrap(), i);
        vec![(i, c)]
    };
    let (a, b) = (count(), count());
    // A 32³ GEMM is 65 536 FLOPs: even at 32 FLOPs per AVX-512 FMA it takes thousands of
    // instructions; the estimate adds weighted misses, so it is never below the count.
    assert!(a[0].0 > 2048.0 && a[0].1 >= a[0].0, "{a:?}");
    for (x, y) in a.iter().zip(&b) {
        assert!((x.0 - y.0).abs() <= 0.001 * x.0, "{a:?} vs {b:?}");
        assert!((x.1 - y.1).abs() <= 0.01 * x.1, "{a:?} vs {b:?}");
    }
}

/// Without valgrind on the PATH, `--instructions` is one line naming what is missing, exit 2,
/// and nothing is recorded.
#[test]
fn instructions_without_valgrind_exit_2() {
    let dir = std::env::temp_dir().join(format!("tf-noval-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = dir.join("s.sqlite");
    let out = Command::cargo_bin("tensorforge")
        .unwrap()
        .env("PATH", &dir)
        .args([
            "bench",
            "empty",
            "--threads",
            "1",
            "--time-budget-ms",
            "5",
            "--instructions",
            "--store",
        ])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr_of(&out);
    assert!(err.contains("valgrind not found"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!store.exists(), "nothing recorded");
}

/// Write an executable shell script standing in for valgrind: it answers `--version` and
/// does `body` otherwise.
fn fake_valgrind(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("valgrind");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo valgrind-fake; exit 0; fi\n{body}\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A counter that crashes or hangs on a workload gives an error for the counted metrics of
/// that workload, naming it: never a PASS. The gate then decides that workload on time.
#[test]
fn a_crashing_or_hanging_counter_is_an_error_and_time_decides() {
    let dir = std::env::temp_dir().join(format!("tf-badval-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = dir.join("s.sqlite");
    let w = "gemm:m=16:n=16:k=16";
    let bench = |extra: &[&str]| {
        let mut c = Command::cargo_bin("tensorforge").unwrap();
        c.args([
            "bench",
            w,
            "--threads",
            "1",
            "--time-budget-ms",
            "5",
            "--iterations",
            "3",
        ]);
        c.args(extra);
        c
    };
    // History: one counted run with the real valgrind.
    let out = bench(&["--counts", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    for (name, body, timeout) in [
        (
            "crash",
            "echo 'vex: the impossible happened' >&2; kill -SEGV $$",
            "300",
        ),
        ("hang", "sleep 30", "1"),
    ] {
        let sub = dir.join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let fake = fake_valgrind(&sub, body);
        let out = bench(&["--counts", "--json"])
            .env("TENSORFORGE_VALGRIND", &fake)
            .env("TENSORFORGE_COUNT_TIMEOUT_S", timeout)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        let cand = sub.join("cand.json");
        std::fs::write(&cand, &out.stdout).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let err = v["records"][0]["count_error"].as_str().unwrap().to_string();
        assert!(err.contains(w), "{name}: {err}");
        if name == "hang" {
            assert!(err.contains("did not finish within 1 s"), "{err}");
        } else {
            assert!(err.contains("valgrind exited"), "{err}");
        }
        let out = Command::cargo_bin("tensorforge")
            .unwrap()
            .args(["gate", "--history", "5", "--json", "--store"])
            .arg(&store)
            .arg("--candidate")
            .arg(&cand)
            .output()
            .unwrap();
        let g: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: {e}: {}", stderr_of(&out)));
        let rows = g["gate"]["rows"]
            .as_array()
            .or(g["rows"].as_array())
            .unwrap()
            .clone();
        let row = |m: &str| rows.iter().find(|r| r["metric"] == m).unwrap().clone();
        for m in ["instructions", "estimated_cycles"] {
            assert_eq!(row(m)["verdict"], "ERROR", "{name} {m}");
            assert_eq!(row(m)["decides"], false, "{name} {m}");
        }
        assert_eq!(row("latency_p50")["decides"], true, "{name}");
        // Time decides: one run of history is too little to FAIL anything.
        assert_ne!(out.status.code(), Some(1), "{name}");
        assert_ne!(out.status.code(), Some(2), "{name}: {}", stderr_of(&out));
    }
}
