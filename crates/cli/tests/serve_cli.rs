//! End-to-end runs of `tensorforge serve`: the JSON contract on a Llama config and two
//! presets (hand-checked memory figures from `core::serve`), the SVG plot, the README's
//! `serve` line as written, and bad input (one-line error naming the field, exit 2).

use std::path::{Path, PathBuf};

mod common;
use common::{fails, json, tf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn llama3() -> String {
    root()
        .join("examples/models/llama3_8b_config.json")
        .display()
        .to_string()
}

#[test]
fn llama3_on_h100_json_contract_and_hand_checked_memory() {
    let cfg = llama3();
    let v = json(&[
        "serve",
        "--config",
        &cfg,
        "--hw",
        "nvidia_h100_sxm",
        "--batch",
        "1,238,239",
        "--context",
        "2048",
        "--json",
    ]);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["evidence"], "model");
    assert_eq!(v["kind"], "serve");
    assert_eq!(v["dtype"], "bf16");
    assert_eq!(v["interconnect"], "nvlink4");
    assert!(v["limitations"].as_array().unwrap().len() > 10);
    // 8 030 261 248 parameters · 2 B; KV per sequence at context 2048: 32·2·8·128·2049·2 B
    // = 268 566 528; ⌊(80e9 − 16 060 522 496) / 268 566 528⌋ = 238.
    assert_eq!(v["weight_params"], 8_030_261_248u64);
    assert_eq!(v["weight_bytes_per_device"], 16_060_522_496u64);
    assert_eq!(
        v["largest_batch"][0]["kv_cache_bytes_per_sequence"],
        268_566_528
    );
    assert_eq!(v["largest_batch"][0]["largest_batch"], 238);
    let d = v["decode"].as_array().unwrap();
    assert_eq!(d.len(), 3);
    assert_eq!(
        d.iter().map(|x| x["fits"].clone()).collect::<Vec<_>>(),
        [true, true, false]
    );
    // Decode of an 8 B model at these batches is bound by DRAM; tokens/s = batch / step.
    for x in d {
        assert_eq!(x["binding_roof"], "dram");
        let (b, t) = (
            x["batch"].as_f64().unwrap(),
            x["step_time_s"].as_f64().unwrap(),
        );
        assert!((x["tokens_per_s"].as_f64().unwrap() - b / t).abs() <= 1e-9 * b / t);
    }
    assert!(v["prefill"][0]["time_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn llama3_on_tpu_v5e_needs_two_chips_and_draws_the_plot() {
    let cfg = llama3();
    // 16 060 522 496 weight bytes > 16e9: nothing fits on one v5e.
    let v = json(&[
        "serve",
        "--config",
        &cfg,
        "--hw",
        "google_tpu_v5e",
        "--batch",
        "1",
        "--context",
        "2048",
        "--json",
    ]);
    assert_eq!(v["largest_batch"][0]["largest_batch"], 0);
    assert_eq!(v["decode"][0]["fits"], false);
    assert_eq!(v["attention_kernel"], "fused");
    // int4 weights: 8 030 261 248 / 2 = 4 015 130 624 bytes, and one chip holds them.
    let v = json(&[
        "serve",
        "--config",
        &cfg,
        "--hw",
        "google_tpu_v5e",
        "--weight-dtype",
        "int4",
        "--batch",
        "1",
        "--context",
        "2048",
        "--json",
    ]);
    assert_eq!(v["weight_dtype"], "int4");
    assert_eq!(v["weight_bytes_per_device"], 4_015_130_624u64);
    assert_eq!(v["decode"][0]["fits"], true);
    // tp = 2 over ICI: 59 sequences fit (core::serve's hand check), and the all-reduces cost
    // interconnect time.
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("serve_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("serve.svg");
    let v = json(&[
        "serve",
        "--config",
        &cfg,
        "--hw",
        "google_tpu_v5e",
        "--tp",
        "2",
        "--batch",
        "1,32",
        "--context",
        "2048",
        "--json",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(v["parallelism"]["tp"], 2);
    assert_eq!(v["devices"], 2);
    assert_eq!(v["interconnect"], "ici");
    assert_eq!(v["largest_batch"][0]["largest_batch"], 59);
    assert!(v["decode"][0]["interconnect_time_s"].as_f64().unwrap() > 0.0);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("context 2048 (fits ≤ 59)"));
    let _ = std::fs::remove_dir_all(&dir);
    // The human report names the split and the largest batch.
    let out = tf()
        .args([
            "serve",
            "--config",
            &cfg,
            "--hw",
            "tpu_v5e",
            "--tp",
            "2",
            "--batch",
            "1",
            "--context",
            "2048",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("tp 2 x pp 1 x ep 1 = 2 device(s) per replica"),
        "{text}"
    );
    assert!(text.contains("Largest batch that fits"), "{text}");
}

#[test]
fn bad_input_is_one_line_naming_the_field() {
    let cfg = llama3();
    fails(
        &[
            "serve",
            "--config",
            &cfg,
            "--hw",
            "nvidia_h100_sxm",
            "--tp",
            "3",
        ],
        &["error:", "`tp` = 3", "heads = 32"],
    );
    fails(
        &[
            "serve",
            "--config",
            &cfg,
            "--hw",
            "nvidia_h100_sxm",
            "--pp",
            "5",
        ],
        &["`pp` = 5", "layers = 32"],
    );
    fails(
        &[
            "serve",
            "--config",
            &cfg,
            "--hw",
            "nvidia_h100_sxm",
            "--ep",
            "2",
        ],
        &["`ep` = 2", "no experts"],
    );
    fails(
        &[
            "serve",
            "--config",
            &cfg,
            "--hw",
            "nvidia_h100_sxm",
            "--batch",
            "1,0",
        ],
        &["--batch", "`0`"],
    );
    fails(
        &["serve", "--config", &cfg, "--hw", "nvidia_l4", "--tp", "2"],
        &["`interconnect`", "nvidia_l4"],
    );
    fails(
        &[
            "serve",
            "--config",
            "no/such/config.json",
            "--hw",
            "nvidia_h100_sxm",
        ],
        &["no/such/config.json"],
    );
}

#[test]
fn the_readme_serve_line_runs_as_written() {
    // The README test runs only the commands it lists; this runs the `serve` line(s) of the
    // "Using it" block in a temporary folder with `examples/` linked in.
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme.find("## Using it").unwrap();
    let lines: Vec<&str> = readme[start..]
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("tensorforge serve "))
        .collect();
    assert!(
        !lines.is_empty(),
        "the README has no `tensorforge serve` line"
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("readme_serve_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(root().join("examples"), dir.join("examples")).unwrap();
    for l in lines {
        let line = l.split(" # ").next().unwrap();
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        tf().args(&words).current_dir(&dir).assert().success();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Weight-only quantization groups count their scales and zero points in the weight bytes,
/// and groups without a narrower weight dtype are a one-line error naming the field.
#[test]
fn quantization_groups_add_scales_to_the_weights() {
    let cfg = llama3();
    let weights = |extra: &[&str]| -> u64 {
        let mut args = vec![
            "serve",
            "--config",
            &cfg,
            "--hw",
            "nvidia_h100_sxm",
            "--batch",
            "1",
            "--context",
            "2048",
            "--weight-dtype",
            "int4",
            "--json",
        ];
        args.extend_from_slice(extra);
        json(&args)["weight_bytes_per_device"].as_u64().unwrap()
    };
    // 8 030 261 248 int4 weights = 4 015 130 624 B; in groups of 128: 62 736 416 fp16
    // scales = 125 472 832 B more, and with int4 zero points 31 368 208 B more again.
    assert_eq!(weights(&[]), 4_015_130_624);
    assert_eq!(weights(&["--group-size", "128"]), 4_140_603_456);
    assert_eq!(
        weights(&["--group-size", "128", "--zero-points"]),
        4_171_971_664
    );
    fails(
        &[
            "serve",
            "--config",
            &cfg,
            "--hw",
            "nvidia_h100_sxm",
            "--group-size",
            "128",
        ],
        &["weight_groups", "narrower than dtype = bf16"],
    );
    fails(
        &[
            "serve",
            "--config",
            &cfg,
            "--weight-dtype",
            "int4",
            "--group-size",
            "0",
        ],
        &["weight_groups.size"],
    );
}
