//! End-to-end runs of the `tensorforge` binary: the JSON contract, the reference model's
//! hand-checked values, and bad input (one-line error, exit code 2, never a panic).

use std::io::Write;

mod common;
use common::{fails, json, tf, usage_fails};

#[test]
fn gemm_json_contract_and_reference_values() {
    // 2×3×4 fp32: A 32 + B 48 + C 24 = 104 compulsory bytes; 24 MACs, 48 FLOPs.
    let v = json(&[
        "analyze", "gemm", "--m", "2", "--n", "3", "--k", "4", "--dtype", "fp32", "--json",
    ]);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["evidence"], "model");
    assert!(v["limitations"].as_array().unwrap().len() >= 3);
    assert_eq!(v["macs"], 24);
    assert_eq!(v["flops"], 48);
    assert_eq!(v["compulsory_bytes"], 104);
    assert!((v["arithmetic_intensity"].as_f64().unwrap() - 48.0 / 104.0).abs() < 1e-12);
    // balanced: ridge 2.048e12 / 1e11 = 20.48 FLOP/B >> 0.46 -> memory-bound.
    assert_eq!(v["roofline"]["bound"], "memory");
    assert!(v["pe_mapping"]["waves"].is_u64());
}

#[test]
fn waves_on_a_16x16_array() {
    // ceil(17/16) · ceil(17/16) = 4 waves.
    let v = json(&[
        "analyze", "gemm", "--m", "17", "--n", "17", "--k", "8", "--pe", "16x16", "--json",
    ]);
    assert_eq!(v["pe_mapping"]["waves"], 4);
    let v = json(&[
        "analyze", "gemm", "--m", "17", "--n", "17", "--k", "8", "--hw", "small", "--json",
    ]);
    assert_eq!(v["pe_mapping"]["waves"], 4);
}

#[test]
fn reference_schedules_through_the_cli() {
    // 4×4×4 fp32, tile 2×2×2, 64 B SRAM: c-resident 320 B, a-resident 384 B, b-resident 384 B.
    let v = json(&[
        "analyze",
        "gemm",
        "--m",
        "4",
        "--n",
        "4",
        "--k",
        "4",
        "--dtype",
        "fp32",
        "--tile",
        "2x2x2",
        "--sram-bytes",
        "64",
        "--json",
    ]);
    let s = v["schedules"].as_array().unwrap();
    assert_eq!(s.len(), 6);
    let names: Vec<&str> = s.iter().map(|x| x["name"].as_str().unwrap()).collect();
    assert_eq!(&names[..3], &["c-resident", "a-resident", "b-resident"]);
    let totals: Vec<u64> = s
        .iter()
        .map(|x| x["dram_bytes"]["total"].as_u64().unwrap())
        .collect();
    assert_eq!(&totals[..3], &[320, 384, 384]);
    assert_eq!(v["sram_fit"]["tile_fits"], true);
}

#[test]
fn human_report_scales_units() {
    let out = tf()
        .args([
            "analyze",
            "gemm",
            "--preset",
            "gemm_large_square",
            "--tile",
            "128x128x64",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let s = String::from_utf8(out).unwrap();
    // 3 · 1024² · 2 B = 6 MiB.
    assert!(s.contains("6.00 MiB"), "{s}");
    assert!(s.contains("c-resident") && s.contains("leaves out"), "{s}");
}

#[test]
fn bad_dimensions_exit_2_naming_the_field() {
    fails(
        &["analyze", "gemm", "--m", "0", "--n", "3", "--k", "4"],
        &["`m`", "0"],
    );
    usage_fails(
        &["analyze", "gemm", "--m", "-3", "--n", "3", "--k", "4"],
        &["invalid value '-3' for '--m <M>'"],
    );
    fails(
        &[
            "analyze",
            "gemm",
            "--m",
            "4294967296",
            "--n",
            "4294967296",
            "--k",
            "4294967296",
        ],
        &["overflow"],
    );
    fails(
        &["analyze", "gemm", "--m", "4", "--n", "4"],
        &["missing --k:"],
    );
    fails(
        &[
            "analyze", "gemm", "--m", "4", "--n", "4", "--k", "4", "--dtype", "fp64",
        ],
        &["fp64", "bf16"],
    );
    fails(
        &[
            "analyze", "gemm", "--m", "4", "--n", "4", "--k", "4", "--tile", "2x0x2",
        ],
        &["tile", "2x0x2"],
    );
    fails(
        &[
            "analyze", "gemm", "--m", "4", "--n", "4", "--k", "4", "--pe", "16",
        ],
        &["--pe", "16"],
    );
    fails(
        &[
            "analyze",
            "gemm",
            "--m",
            "4",
            "--n",
            "4",
            "--k",
            "4",
            "--sram-bytes",
            "0",
        ],
        &["--sram-bytes"],
    );
    fails(
        &["analyze", "gemm", "--preset", "gemm_huge"],
        &["gemm_huge", "gemm_tiny"],
    );
}

#[test]
fn unknown_hardware_lists_valid_names() {
    fails(&["hw", "show", "h900"], &["h900", "balanced", "small"]);
    fails(
        &["analyze", "gemm", "--preset", "gemm_tiny", "--hw", "nope"],
        &["nope", "compute_heavy"],
    );
}

#[test]
fn roofline_bad_numbers() {
    fails(
        &[
            "roofline", "--hw", "balanced", "--flops", "nan", "--bytes", "1",
        ],
        &["--flops", "nan"],
    );
    fails(
        &[
            "roofline", "--hw", "balanced", "--flops", "1", "--bytes", "-1",
        ],
        &["--bytes", "-1"],
    );
    fails(
        &[
            "roofline", "--hw", "balanced", "--flops", "1", "--bytes", "inf",
        ],
        &["--bytes"],
    );
}

#[test]
fn roofline_on_an_abstract_chip() {
    // balanced: 2.048 TFLOP/s, 100 GB/s -> ridge 20.48. 5e7 FLOPs / 1e6 B = AI 50 -> compute.
    let v = json(&[
        "roofline", "--hw", "balanced", "--flops", "50000000", "--bytes", "1000000", "--json",
    ]);
    assert_eq!(v["arithmetic_intensity"], 50.0);
    assert_eq!(v["ridge_flops_per_byte"], 20.48);
    assert_eq!(v["bound"], "compute");
    assert_eq!(v["attainable_flops_per_s"], 2.048e12);
}

fn temp_file(name: &str, text: &str) -> tempdir_lite::TempPath {
    tempdir_lite::write(name, text)
}

/// Minimal temp-file helper (no extra dependency): files under the target tmp dir.
mod tempdir_lite {
    use super::*;
    pub struct TempPath(pub std::path::PathBuf);
    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    pub fn write(name: &str, text: &str) -> TempPath {
        let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let p = dir.join(format!("{}-{name}", std::process::id()));
        let mut f = std::fs::File::create(&p).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        TempPath(p)
    }
}

const HW_TOML: &str = r#"
name = "toy"
[peak_ops_per_s]
fp16 = 2.048e12
[dram]
name = "dram"
bandwidth_bytes_per_s = 1.0e11
[[onchip]]
name = "sram"
capacity_bytes = 524288
[pe_array]
rows = 32
cols = 32
clock_hz = 1.0e9
"#;

#[test]
fn hardware_files_are_validated_with_file_and_field() {
    let good = temp_file("good.toml", HW_TOML);
    let p = good.0.to_str().unwrap();
    let v = json(&[
        "analyze",
        "gemm",
        "--preset",
        "gemm_tiny",
        "--hw-file",
        p,
        "--json",
    ]);
    assert_eq!(v["hardware"], "toy");
    let shown = json(&["hw", "show", "--file", p, "--json"]);
    assert_eq!(shown["dram"]["bandwidth_bytes_per_s"], 1.0e11);
    // The JSON form round-trips through --hw-file too.
    let j = temp_file("good.json", &serde_json::to_string(&shown).unwrap());
    json(&[
        "analyze",
        "gemm",
        "--preset",
        "gemm_tiny",
        "--hw-file",
        j.0.to_str().unwrap(),
        "--json",
    ]);

    let bad = temp_file("bad.toml", &HW_TOML.replace("1.0e11", "-1.0"));
    let bp = bad.0.to_str().unwrap().to_string();
    fails(
        &["analyze", "gemm", "--preset", "gemm_tiny", "--hw-file", &bp],
        &[&bp, "dram.bandwidth_bytes_per_s", "-1"],
    );
    let nan = temp_file(
        "nan.toml",
        &HW_TOML.replace("fp16 = 2.048e12", "fp16 = nan"),
    );
    fails(
        &["hw", "show", "--file", nan.0.to_str().unwrap()],
        &["peak_ops_per_s.fp16", "NaN"],
    );
    let trunc = temp_file("trunc.toml", &HW_TOML[..60]);
    fails(
        &["hw", "show", "--file", trunc.0.to_str().unwrap()],
        &["trunc.toml"],
    );
    fails(
        &["hw", "show", "--file", "/nonexistent/chip.toml"],
        &["/nonexistent/chip.toml"],
    );
}

#[test]
fn hw_list_and_show() {
    let v = json(&["hw", "list", "--json"]);
    assert_eq!(v["schema_version"], 1);
    let names: Vec<&str> = v["presets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    for n in ["small", "balanced", "compute_heavy", "bandwidth_heavy"] {
        assert!(names.contains(&n), "{names:?}");
    }
    let b = json(&["hw", "show", "balanced", "--json"]);
    // 2·32·32·1 GHz = 2.048e12.
    assert_eq!(b["peak_ops_per_s"]["fp16"], 2.048e12);
    assert_eq!(b["schema_version"], 1);
    // The table states units: 2.048e12 FLOP/s prints as 2.05 TFLOP/s.
    let out = tf().args(["hw", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fp16 2.05 TFLOP/s"), "{text}");
    // The interconnect in the human view: MI300X 7 links × 64e9 B/s = 448e9 B/s each way.
    let out = tf().args(["hw", "show", "amd_mi300x"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Interconnect: infinity_fabric, 448.00 GB/s per device each way"),
        "{text}"
    );
}

#[test]
fn every_workload_preset_analyzes() {
    let v = json(&["workloads", "list", "--json"]);
    assert_eq!(v["schema_version"], 1);
    let list = v["workloads"].as_array().unwrap();
    assert!(list.len() >= 10, "{list:?}");
    for e in list {
        let name = e["name"].as_str().unwrap();
        let kind = e["kind"].as_str().unwrap();
        let r = json(&[
            "analyze",
            kind,
            "--preset",
            name,
            "--hw",
            "nvidia_h100_sxm",
            "--json",
        ]);
        assert_eq!(r["evidence"], "model", "{name}");
        assert_eq!(r["schema_version"], 1, "{name}");
        assert!(!r["limitations"].as_array().unwrap().is_empty(), "{name}");
    }
}

#[test]
fn conv_hand_checks_through_the_cli() {
    // 5×5 single-channel input, 3×3 kernel, stride 1, no pad: 3×3 output, im2col 81 vs 25 elements.
    let v = json(&[
        "analyze", "conv2d", "--cin", "1", "--cout", "1", "--height", "5", "--width", "5",
        "--kernel", "3", "--json",
    ]);
    assert_eq!(v["output_height"], 3);
    assert!((v["im2col"]["expansion_ratio"].as_f64().unwrap() - 3.24).abs() < 1e-12);
    // conv_pointwise implicit traffic: 401 408 + 16 384 + 802 816 = 1 220 608 B.
    let v = json(&["analyze", "conv2d", "--preset", "conv_pointwise", "--json"]);
    assert_eq!(v["implicit_gemm"]["dram_bytes"], 1_220_608);
    fails(
        &[
            "analyze", "conv2d", "--cin", "3", "--cout", "4", "--height", "8", "--width", "8",
            "--kernel", "3", "--groups", "2",
        ],
        &["groups"],
    );
    fails(
        &[
            "analyze", "conv2d", "--cin", "3", "--cout", "4", "--height", "2", "--width", "2",
            "--kernel", "5",
        ],
        &["kernel"],
    );
}

#[test]
fn transformer_reference_flops_through_the_cli() {
    // 8·B·S·D² + 4·B·S·D·F + 4·B·S²·D for B1 S128 D512 F2048 = 838 860 800.
    let v = json(&[
        "analyze",
        "transformer",
        "--preset",
        "transformer_small",
        "--json",
    ]);
    assert_eq!(v["totals"]["gemm_flops"], 838_860_800u64);
    // GQA: 8 heads over 2 KV heads -> k_proj N = 2 · 64 = 128.
    let v = json(&[
        "analyze",
        "transformer",
        "--seq",
        "16",
        "--d-model",
        "512",
        "--heads",
        "8",
        "--kv-heads",
        "2",
        "--d-ff",
        "1024",
        "--mlp",
        "swiglu",
        "--norm",
        "rmsnorm",
        "--json",
    ]);
    let k = v["gemms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "k_proj")
        .unwrap()
        .clone();
    assert_eq!(k["n"], 128);
    fails(
        &[
            "analyze",
            "transformer",
            "--seq",
            "16",
            "--d-model",
            "512",
            "--heads",
            "8",
            "--kv-heads",
            "3",
            "--d-ff",
            "1024",
        ],
        &["kv_heads"],
    );
    fails(
        &[
            "analyze",
            "transformer",
            "--preset",
            "transformer_small",
            "--mlp",
            "relu",
        ],
        &["--mlp", "relu"],
    );
}

#[test]
fn model_from_hf_config() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/models/");
    let cfg = format!("{root}llama2_7b_config.json");
    // Llama-2-7B: 32000·4096·2 + 32·(4·4096² + 3·4096·11008 + 2·4096) + 4096 = 6 738 415 616.
    let v = json(&[
        "analyze", "model", "--config", &cfg, "--seq", "128", "--dtype", "bf16", "--json",
    ]);
    assert_eq!(v["weight_params"], 6_738_415_616u64);
    let bad = temp_file("bad_config.json", "{\"hidden_size\": 4096,");
    let bp = bad.0.to_str().unwrap().to_string();
    fails(&["analyze", "model", "--config", &bp, "--seq", "8"], &[&bp]);
    let missing = temp_file("missing_config.json", "{\"hidden_size\": 4096}");
    let mp = missing.0.to_str().unwrap().to_string();
    fails(
        &["analyze", "model", "--config", &mp, "--seq", "8"],
        &[&mp, "num_attention_heads"],
    );
}

#[test]
fn explore_hand_checked_and_capped() {
    // 4×4×4 fp32 on a 64-B SRAM, tiles {2,4}³: only 2×2×2 fits (3·16 = 48 B; any 4 makes ≥ 64+).
    // Among its orders c-resident (320 B) beats a-/b-resident (384 B); c-resident sorts before nmk.
    let v = json(&[
        "explore",
        "gemm",
        "--m",
        "4",
        "--n",
        "4",
        "--k",
        "4",
        "--dtype",
        "fp32",
        "--sram-bytes",
        "64",
        "--tile-m",
        "2,4",
        "--tile-n",
        "4,2",
        "--tile-k",
        "2,4",
        "--json",
    ]);
    assert_eq!(v["evidence"], "model");
    assert_eq!(v["best"]["schedule"], "c-resident");
    assert_eq!(v["best"]["dram_bytes"], 320);
    assert!(v["why"].as_str().unwrap().contains("c-resident"));
    assert!(v["evaluations_per_s"].as_f64().unwrap() > 0.0);
    fails(
        &[
            "explore",
            "gemm",
            "--preset",
            "gemm_large_square",
            "--tile-m",
            "16,32,64",
            "--tile-n",
            "16,32,64",
            "--tile-k",
            "16,32",
            "--max-candidates",
            "10",
        ],
        &["candidates", "cap", "--max-candidates N"],
    );
    fails(
        &[
            "explore",
            "gemm",
            "--preset",
            "gemm_tiny",
            "--tile-m",
            "0",
            "--tile-n",
            "2",
            "--tile-k",
            "2",
        ],
        &["--tile-m"],
    );
    let t = json(&[
        "explore",
        "transformer",
        "--preset",
        "transformer_small",
        "--tile-m",
        "64",
        "--tile-n",
        "64",
        "--tile-k",
        "64",
        "--json",
    ]);
    assert_eq!(t["rows"].as_array().unwrap().len(), 8);
}

#[test]
fn verify_commands_pass_on_stable_and_fail_on_naive_kernels() {
    tf().args(["verify-overflow"]).assert().success();
    tf().args(["verify-quant"]).assert().success();
    tf().args(["verify-overflow", "--naive"]).assert().code(2);
    tf().args(["verify-quant", "--naive"]).assert().code(2);
}

#[test]
fn roofline_original_form_on_blackhole() {
    // tenstorrent_blackhole -> p150: fp16 372e12 FLOP/s, 512e9 B/s -> ridge 726.5625 FLOP/B.
    // AI = 5e7 / 1e6 = 50 < ridge -> memory-bound at 50 · 512e9 = 2.56e13 FLOP/s.
    let out = tf()
        .args([
            "roofline",
            "--hw",
            "tenstorrent_blackhole",
            "--flops",
            "50000000",
            "--bytes",
            "1000000",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let s = String::from_utf8(out).unwrap();
    assert!(
        s.contains("726.562") && s.contains("memory") && s.contains("25.60 TFLOP/s"),
        "{s}"
    );
    let v = json(&[
        "roofline",
        "--hw",
        "tenstorrent_blackhole",
        "--flops",
        "50000000",
        "--bytes",
        "1000000",
        "--json",
    ]);
    assert_eq!(v["hardware"], "tenstorrent_blackhole_p150");
    assert_eq!(v["attainable_flops_per_s"], 2.56e13);
}

#[test]
fn explore_says_when_the_best_is_off_the_pareto_front() {
    // fp16, balanced (32x32 PEs): both tiles are compute-bound at 32,768 cycles, so they tie
    // on overlapped time; 128x128x32 wins on serialized time (less DRAM) but stages
    // A 128·32·2 + B 32·128·2 + C 128·128·2 = 8 + 8 + 32 = 48 KiB of SRAM, against
    // 64x128x32's 4 + 8 + 16 = 28 KiB: the front holds 64x128x32 alone.
    let out = tf()
        .args([
            "explore", "gemm", "--m", "128", "--n", "512", "--k", "512", "--dtype", "fp16", "--hw",
            "balanced", "--tile-m", "64,128", "--tile-n", "128", "--tile-k", "32", "--pe", "32x32",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("The best is not on the Pareto front")
            && text.contains("tile 64x128x32")
            && text.contains("28.00 KiB of SRAM (best: 48.00 KiB)"),
        "{text}"
    );
    assert!(
        !text.contains("LoopOrder::ALL") && !text.contains("total_cmp"),
        "{text}"
    );
}

#[test]
fn usage_errors_show_clap_whole_message() {
    // Missing required arguments: each one named on its own line, then the usage line.
    let err = usage_fails(
        &["kernel", "softmax"],
        &[
            "the following required arguments were not provided:",
            "--in <FILE>",
            "--out <FILE>",
            "Usage: tensorforge kernel --in <FILE> --out <FILE> <OP>",
        ],
    );
    // The op was given: the list of missing arguments (up to the blank line) leaves it out.
    let missing = err.split("\n\n").next().unwrap();
    assert!(
        missing.contains("--in <FILE>") && !missing.contains("<OP>"),
        "{err}"
    );
    usage_fails(
        &["roofline", "--flops", "1"],
        &["  --bytes <BYTES>", "Usage: tensorforge roofline"],
    );
    // clap's "did you mean" tips: a misspelled subcommand, a misspelled flag.
    usage_fails(
        &["analyz", "gemm"],
        &[
            "unrecognized subcommand 'analyz'",
            "tip: a similar subcommand exists: 'analyze'",
        ],
    );
    usage_fails(
        &["analyze", "gemm", "--jsn"],
        &["'--jsn'", "tip: a similar argument exists: '--json'"],
    );
    // A newline typed into a value is shown escaped: it cannot split the message or forge
    // a line.
    let err = usage_fails(
        &[
            "analyze",
            "gemm",
            "--m",
            "5\ngate: PASS",
            "--n",
            "1",
            "--k",
            "1",
        ],
        &["invalid value '5\\ngate: PASS' for '--m <M>'"],
    );
    assert!(!err.lines().any(|l| l.starts_with("gate:")), "{err}");
    // Shape flags are checked after parsing: one line naming exactly the flags missing.
    fails(
        &["analyze", "gemm", "--m", "4"],
        &["missing --n and --k: give either --preset NAME or all of --m, --n and --k"],
    );
    fails(
        &["analyze", "conv2d", "--cin", "3", "--kernel", "3"],
        &["missing --cout, --height and --width:"],
    );
    fails(
        &[
            "analyze",
            "transformer",
            "--phase",
            "decode",
            "--d-model",
            "64",
        ],
        &["missing --heads and --d-ff:"],
    );
}

#[test]
fn help_and_version_print_on_stdout_and_exit_0() {
    for args in [&["--help"][..], &["analyze", "gemm", "--help"][..]] {
        let out = tf().args(args).assert().success().get_output().clone();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage: tensorforge"), "{args:?}: {text}");
        assert!(out.stderr.is_empty(), "{args:?}");
    }
    let out = tf()
        .arg("--version")
        .assert()
        .success()
        .get_output()
        .clone();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("tensorforge "), "{text}");
}

#[test]
fn levels_energy_and_energy_ranking() {
    // 64³ fp16 on `balanced` (32×32 PEs), one 64³ tile, output-stationary, c-resident: A is
    // read from the buffer once per column fold, 64·64 elements · 2 folds = 8192, and from
    // DRAM once (4096); C leaves the registers once per element (4096).
    let v = json(&[
        "analyze", "gemm", "--m", "64", "--n", "64", "--k", "64", "--tile", "64x64x64", "--json",
    ]);
    let s = &v["schedules"][0];
    assert_eq!(s["name"], "c-resident");
    let levels = s["levels"].as_array().unwrap();
    let names: Vec<&str> = levels
        .iter()
        .map(|l| l["level"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["registers", "sram", "dram"]);
    let a_buf = &levels[1]["operands"][0];
    assert_eq!(a_buf["operand"], "a");
    assert_eq!(a_buf["elements"]["reads_to_lower"], 8192);
    assert_eq!(a_buf["read_bytes"], 8192 * 2);
    assert_eq!(levels[2]["operands"][0]["elements"]["reads_to_lower"], 4096);
    assert_eq!(
        levels[0]["operands"][2]["elements"]["reads_to_higher"],
        4096
    );
    // The total is the MACs plus the levels, every part sourced on this preset.
    let e = &s["energy"];
    let parts: f64 = levels
        .iter()
        .map(|l| l["energy_pj"].as_f64().unwrap())
        .sum::<f64>()
        + e["mac_pj"].as_f64().unwrap();
    assert!((parts - e["total_pj"].as_f64().unwrap()).abs() <= 1e-9 * parts);
    // 262144 MACs at 1.5 pJ (Horowitz 45 nm fp16 multiply + add).
    assert_eq!(e["mac_pj"].as_f64().unwrap(), 262_144.0 * 1.5);
    assert!(e.get("missing").is_none(), "{e}");

    let r = json(&[
        "explore",
        "gemm",
        "--m",
        "256",
        "--n",
        "256",
        "--k",
        "256",
        "--tile-m",
        "32,64,128",
        "--tile-n",
        "32,64,128",
        "--tile-k",
        "32,64",
        "--pe",
        "16x16,32x32",
        "--dataflows",
        "all",
        "--rank",
        "energy",
        "--json",
    ]);
    assert_eq!(r["rank"], "energy");
    let best = r["best"]["energy"]["total_pj"].as_f64().unwrap();
    for c in r["top"].as_array().unwrap() {
        assert!(c["energy"]["total_pj"].as_f64().unwrap() >= best);
    }
    assert!(r["why"].as_str().unwrap().starts_with("Ranked by energy"));
    // A chip without sourced energies: one line naming what is missing.
    fails(
        &[
            "explore",
            "gemm",
            "--m",
            "256",
            "--n",
            "256",
            "--k",
            "256",
            "--hw",
            "h100",
            "--tile-m",
            "64",
            "--tile-n",
            "64",
            "--tile-k",
            "64",
            "--pe",
            "16x16",
            "--clock-hz",
            "1e9",
            "--rank",
            "energy",
        ],
        &[
            "rank",
            "needs sourced energies",
            "pe_array.energy",
            "dram.energy",
        ],
    );
    fails(
        &[
            "explore", "gemm", "--m", "64", "--n", "64", "--k", "64", "--tile-m", "64", "--tile-n",
            "64", "--tile-k", "64", "--rank", "power",
        ],
        &["power", "latency, energy, edp"],
    );
}
