//! `bench` and `calibrate` with `--device cuda` through the binary. Argument and workload
//! errors are checked on every machine (they come before the device is opened); where no
//! NVIDIA driver exists, `--device cuda` must be one line naming it, exit 2, and nothing
//! written. The run on a GPU prints SKIPPED where there is none.

use assert_cmd::Command;
use std::path::PathBuf;

fn tf() -> Command {
    let mut c = Command::cargo_bin("tensorforge").unwrap();
    c.env("TENSORFORGE_STORE", "/nonexistent-dir/never.sqlite");
    c
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tf-gpu-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Whether a CUDA device is here; prints SKIPPED when not.
fn gpu_present() -> bool {
    let here = tensorforge_cuda::device::driver_available()
        && tensorforge_cuda::device::device_count().unwrap_or(0) > 0;
    if !here {
        println!("SKIPPED: no CUDA device here");
    }
    here
}

/// Run the binary with `args`, require success, parse its stdout as JSON.
fn json_of(args: &[&str]) -> serde_json::Value {
    let out = tf().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Exit 2 and exactly one line of stderr containing every `needle`.
fn one_line_error(args: &[&str], needles: &[&str]) {
    let out = tf().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: `{n}` not in {err}");
    }
}

#[test]
fn bad_devices_workloads_and_cpu_only_flags_are_one_line_errors() {
    one_line_error(
        &["bench", "copy:bytes=1024", "--device", "gpu0"],
        &["`--device` = `gpu0`"],
    );
    one_line_error(
        &["bench", "gemm:m=8:n=8:k=8:dtype=fp64", "--device", "cuda"],
        &["`dtype` = `fp64`"],
    );
    one_line_error(
        &["bench", "gemm_tiny", "--device", "cuda"],
        &["`workload` = `gemm_tiny`"],
    );
    // fp8 through cuBLASLt: dimensions must be multiples of 16, said before the device opens.
    one_line_error(
        &["bench", "gemm:m=30:n=32:k=32:dtype=fp8", "--device", "cuda"],
        &["`m` = `30`", "multiples of 16"],
    );
    one_line_error(
        &[
            "bench",
            "kernel:softmax:rows=8:cols=64:dtype=int8",
            "--device",
            "cuda",
        ],
        &["`dtype` = `int8`"],
    );
    one_line_error(
        &[
            "bench",
            "copy:bytes=1024",
            "--device",
            "cuda",
            "--threads",
            "2",
        ],
        &["`--threads`", "CPU only"],
    );
    one_line_error(
        &["calibrate", "--device", "cuda:1x"],
        &["`--device` = `cuda:1x`"],
    );
    one_line_error(&["validate", "--device", "cuda"], &["missing `--profile`"]);
    one_line_error(
        &["quickstart", "--device", "cuda", "--threads", "2"],
        &["`--threads`", "CPU job only"],
    );
    one_line_error(
        &[
            "run",
            "../../examples/graphs/elementwise_chain.json",
            "--device",
            "cuda",
            "--bench",
        ],
        &["`--bench`", "CPU executor only"],
    );
    let d = tmp("badprofile");
    let p = d.join("p.json");
    std::fs::write(&p, r#"{"schema_version":1}"#).unwrap();
    one_line_error(
        &[
            "validate",
            "--device",
            "cuda",
            "--profile",
            p.to_str().unwrap(),
        ],
        &["p.json", "not a GPU profile"],
    );
}

#[test]
fn without_a_driver_cuda_is_a_one_line_error_and_writes_nothing() {
    if tensorforge_cuda::device::driver_available() {
        println!("SKIPPED: an NVIDIA driver is installed here (the GPU run is checked instead)");
        return;
    }
    let d = tmp("nodriver");
    let store = d.join("s.sqlite");
    one_line_error(
        &[
            "bench",
            "kernel:softmax:rows=64:cols=64",
            "--device",
            "cuda",
            "--store",
            store.to_str().unwrap(),
        ],
        &["NVIDIA driver", "libcuda.so"],
    );
    let prof = d.join("p.json");
    one_line_error(
        &[
            "calibrate",
            "--device",
            "cuda:0",
            "--out",
            prof.to_str().unwrap(),
        ],
        &["NVIDIA driver"],
    );
    one_line_error(
        &[
            "run",
            "../../examples/graphs/elementwise_chain.json",
            "--device",
            "cuda",
        ],
        &["NVIDIA driver"],
    );
    one_line_error(
        &[
            "quickstart",
            "--device",
            "cuda",
            "--out-dir",
            d.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
        ],
        &["NVIDIA driver"],
    );
    assert!(
        std::fs::read_dir(&d).unwrap().next().is_none(),
        "something was written"
    );
}

/// On a GPU: every generated kernel of an ONNX fixture, alone on the GPU, and the whole
/// program on the GPU agree with the CPU executor (exit 0 only then).
#[test]
fn on_a_gpu_every_generated_kernel_agrees_with_the_cpu() {
    if !gpu_present() {
        return;
    }
    let v = json_of(&[
        "run",
        "../../examples/onnx/llama_sdpa_ts/model.onnx",
        "--inputs",
        "../../examples/onnx/llama_sdpa_ts/inputs",
        "--device",
        "cuda",
        "--json",
    ]);
    let ks = v["kernels"].as_array().unwrap();
    assert!(ks.len() >= 5, "{v}");
    assert!(ks.iter().all(|k| k["agrees"] == true), "{v}");
    // The whole program: its GEMMs on cuBLAS, its output as the CPU's.
    assert!(v["whole"]["cublas"].as_u64().unwrap() >= 4, "{v}");
    let outs = v["whole"]["outputs"].as_array().unwrap();
    assert!(
        !outs.is_empty() && outs.iter().all(|o| o["agrees"] == true),
        "{v}"
    );
}

/// On a GPU: a copy, a generated softmax and a bf16 GEMM give records whose device is the
/// GPU, and the softmax a bandwidth row against a copy of its bytes.
#[test]
fn on_a_gpu_bench_gives_gpu_records_and_bandwidth_fractions() {
    if !gpu_present() {
        return;
    }
    let v = json_of(&[
        "bench",
        "copy:bytes=1048576",
        "kernel:softmax:rows=256:cols=2048",
        "gemm:m=256:n=256:k=256:dtype=bf16",
        "--device",
        "cuda",
        "--iterations",
        "5",
        "--time-budget-ms",
        "10",
        "--json",
    ]);
    assert_eq!(v["schema_version"], 1);
    let recs = v["records"].as_array().unwrap();
    assert_eq!(recs.len(), 3);
    for r in recs {
        assert_eq!(r["device"]["kind"], "gpu");
        assert!(r["device"]["gpu"]["uuid"]
            .as_str()
            .unwrap()
            .starts_with("GPU-"));
    }
    let bw = v["bandwidth"].as_array().unwrap();
    assert_eq!(bw.len(), 1);
    let f = bw[0]["fraction_of_copy"].as_f64().unwrap();
    assert!(f > 0.0 && f.is_finite(), "{f}");
}
