//! End-to-end runs of the graph commands (`fuse`, `plan-memory`, `run`, `memory-traffic`):
//! the JSON contract, hand-checked numbers, the example graphs, and bad input (one-line
//! error, exit 2, never a panic).

use serde_json::Value;
use std::path::{Path, PathBuf};

mod common;
use common::{fails, json, tf};

fn example(name: &str) -> String {
    format!(
        "{}/../../examples/graphs/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tf_graph_cli_{tag}_{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

const CHAIN: &str = r#"{"name":"chain","nodes":[
  {"name":"x","op":"Input","attrs":{"shape":[1024],"dtype":"fp32"}},
  {"name":"e","op":"Exp","inputs":["x"]},
  {"name":"y","op":"Neg","inputs":["e"]}]}"#;

#[test]
fn fuse_json_contract_and_hand_checked_traffic() {
    let d = tmpdir("fuse");
    let g = write(&d, "chain.json", CHAIN);
    let v = json(&["fuse", &g, "--json"]);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["kernels"].as_array().unwrap().len(), 1);
    // [1024] fp32 = 4096 B. Unfused: Exp reads x + writes e, Neg reads e + writes y = 16384 B.
    // Fused: read x, write y = 8192 B.
    assert_eq!(v["traffic"]["unfused_bytes"], 16384);
    assert_eq!(v["traffic"]["fused_bytes"], 8192);
    assert_eq!(v["traffic"]["reduction_ratio"], 2.0);
    assert!(v["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["rule"] == "elementwise_chain"));
    for name in [
        "rmsnorm_swiglu_mlp",
        "attention_softmax",
        "logaddexp_chain",
        "residual_layernorm",
    ] {
        let v = json(&["fuse", &example(name), "--json", "--hw", "h100"]);
        let (u, f) = (
            v["traffic"]["unfused_bytes"].as_u64().unwrap(),
            v["traffic"]["fused_bytes"].as_u64().unwrap(),
        );
        assert!(f < u, "{name}: {f} >= {u}");
        assert!(v["kernels"][0]["time_ns"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn explain_prints_reasons_and_the_overflow_example() {
    let out = tf()
        .args(["fuse", &example("logaddexp_chain"), "--explain"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let s = String::from_utf8(out).unwrap();
    assert!(s.contains("LogAddExp"), "{s}");
    assert!(
        s.contains("log(inf) = inf") && s.contains("100.6931"),
        "{s}"
    );
    let out = tf()
        .args(["fuse", &example("attention_softmax"), "--explain"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let s = String::from_utf8(out).unwrap();
    assert!(
        s.contains("[-]") && s.contains("[+]"),
        "refusals and acceptances: {s}"
    );
    assert!(s.contains("inf / inf = NaN"), "{s}");
}

#[test]
fn plan_memory_json_contract_and_hand_checked_plan() {
    let d = tmpdir("plan");
    let g = write(&d, "chain.json", CHAIN);
    // Unfused: x (4096 B, step 0), e (4096 B, steps 0-1), y (4096 B, step 1): live 8192 at
    // both steps, so the lower bound is 8192; best fit reuses x's slot for y.
    let v = json(&["plan-memory", &g, "--unfused", "--json"]);
    assert_eq!(v["lower_bound_bytes"], 8192);
    assert_eq!(v["peak_bytes"], 8192);
    assert_eq!(v["no_reuse_bytes"], 12288);
    assert_eq!(v["verified_no_overlap"], true);
    for name in [
        "rmsnorm_swiglu_mlp",
        "attention_softmax",
        "logaddexp_chain",
        "residual_layernorm",
    ] {
        let v = json(&["plan-memory", &example(name), "--json", "--align", "128"]);
        let (p, lb) = (
            v["peak_bytes"].as_u64().unwrap(),
            v["lower_bound_bytes"].as_u64().unwrap(),
        );
        assert!(
            p >= lb && (p as f64) <= 1.05 * lb as f64,
            "{name}: {p} vs {lb}"
        );
        assert!(v["no_reuse_bytes"].as_u64().unwrap() >= p);
    }
}

/// One head of 1024 positions and 8 dims: q·kᵀ · 0.125 + mask → Softmax → · v.
fn long_attention() -> String {
    let s = 1024;
    format!(
        r#"{{"schema_version":1,"name":"attn","nodes":[
  {{"name":"q","op":"Input","attrs":{{"shape":[1,1,{s},8],"dtype":"fp32"}}}},
  {{"name":"k","op":"Input","attrs":{{"shape":[1,1,{s},8],"dtype":"fp32"}}}},
  {{"name":"v","op":"Input","attrs":{{"shape":[1,1,{s},8],"dtype":"fp32"}}}},
  {{"name":"mask","op":"Input","attrs":{{"shape":[1,1,{s},{s}],"dtype":"fp32"}}}},
  {{"name":"kt","op":"Transpose","attrs":{{"perm":[0,1,3,2]}},"inputs":["k"]}},
  {{"name":"s","op":"MatMul","inputs":["q","kt"]}},
  {{"name":"c","op":"Constant","attrs":{{"shape":[],"dtype":"fp32","value":0.125}}}},
  {{"name":"ss","op":"Mul","inputs":["s","c"]}},
  {{"name":"sm_in","op":"Add","inputs":["ss","mask"]}},
  {{"name":"p","op":"Softmax","attrs":{{"axis":-1}},"inputs":["sm_in"]}},
  {{"name":"y","op":"MatMul","inputs":["p","v"]}}],"outputs":["y"]}}"#
    )
}

#[test]
fn a_long_attention_is_one_kernel_without_its_scores() {
    let d = tmpdir("attn");
    let g = write(&d, "attn.json", &long_attention());
    let v = json(&["fuse", &g, "--json"]);
    assert_eq!(v["kernels"].as_array().unwrap().len(), 1);
    assert!(v["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["rule"] == "attention" && d["accepted"] == true));
    // Fused, one step holds q, k, v (1024·8·4 = 32768 B each), the mask (1024² · 4 =
    // 4194304 B) and y (32768 B): 4194304 + 4 · 32768 = 4325376 B. The unfused program
    // peaks at its Add: the scaled scores, the mask and their sum (4194304 B each) with v
    // still to be read: 3 · 4194304 + 32768 = 12615680 B.
    let p = json(&["plan-memory", &g, "--json"]);
    assert_eq!(p["peak_bytes"], 4325376);
    let u = json(&["plan-memory", &g, "--unfused", "--json"]);
    assert_eq!(u["peak_bytes"], 12615680);
    // And the streamed kernel agrees with the unfused program on seeded inputs.
    let r = json(&["run", &g, "--bench", "--reps", "1", "--json"]);
    assert_eq!(r["bench"]["agree"], true);
}

#[test]
fn capacity_exceeded_names_the_step_and_tensors() {
    // residual_layernorm fused: one step with x, r, resid, y live (4 × 256 KiB).
    fails(
        &[
            "plan-memory",
            &example("residual_layernorm"),
            "--capacity-bytes",
            "1000000",
        ],
        &["does not fit", "step 0", "kernel `k0`", "resid (262144 B)"],
    );
    tf().args([
        "plan-memory",
        &example("residual_layernorm"),
        "--capacity-bytes",
        "1048576",
    ])
    .assert()
    .success();
}

#[test]
fn malformed_and_invalid_graphs_exit_2_with_a_named_error() {
    let d = tmpdir("bad");
    let bad = write(&d, "bad.json", r#"{"nodes":[{"name":"x","op":"Input""#);
    fails(&["fuse", &bad], &["malformed graph JSON", "bad.json"]);
    fails(&["plan-memory", &bad], &["malformed graph JSON"]);
    fails(&["run", &bad], &["malformed graph JSON"]);
    let dangling = write(
        &d,
        "dangling.json",
        r#"{"nodes":[{"name":"y","op":"Exp","inputs":["nope"]}]}"#,
    );
    fails(&["fuse", &dangling], &["`y`", "`nope`", "dangling"]);
    let shape = write(
        &d,
        "shape.json",
        r#"{"nodes":[{"name":"a","op":"Input","attrs":{"shape":[4,8],"dtype":"fp32"}},
           {"name":"b","op":"Input","attrs":{"shape":[3],"dtype":"fp32"}},
           {"name":"c","op":"Add","inputs":["a","b"]}]}"#,
    );
    fails(&["fuse", &shape], &["`c`", "`b`", "[3]", "broadcast"]);
    fails(&["fuse", "/nonexistent/graph.json"], &["cannot read"]);
    // 10⁵ × 10⁵ f32 = 40 GB: modelled fine, refused (not aborted) by the executor.
    let huge = write(
        &d,
        "huge.json",
        r#"{"nodes":[{"name":"x","op":"Input","attrs":{"shape":[100000,100000],"dtype":"fp32"}},
           {"name":"y","op":"Exp","inputs":["x"]}]}"#,
    );
    tf().args(["fuse", &huge]).assert().success();
    fails(&["run", &huge], &["executor's limit"]);
    let opaque = write(
        &d,
        "opaque.json",
        r#"{"nodes":[{"name":"x","op":"Input","attrs":{"shape":[3],"dtype":"fp32"}},
           {"name":"o","op":"Opaque","attrs":{"name":"TopK","output_specs":[{"shape":[3],"dtype":"fp32"}]},"inputs":["x"]}]}"#,
    );
    tf().args(["fuse", &opaque]).assert().success();
    fails(&["run", &opaque], &["`o`", "TopK"]);
}

#[test]
fn memory_traffic_reproduces_the_seed_numbers_and_the_full_accounting() {
    let v = json(&[
        "memory-traffic",
        "--seq",
        "4096",
        "--dim",
        "8192",
        "--dtype",
        "fp16",
        "--hw",
        "h100",
        "--json",
    ]);
    // 4096 · 8192 · 2 B = 64 MiB per tensor; 9 transfers = 576 MiB, 2 = 128 MiB.
    assert_eq!(v["seed_accounting"]["unfused_bytes"], 603_979_776u64);
    assert_eq!(v["seed_accounting"]["fused_bytes"], 134_217_728u64);
    assert_eq!(v["seed_accounting"]["reduction_ratio"], 4.5);
    let full = &v["full_accounting"];
    assert!(full["unfused_bytes"].as_u64().unwrap() > full["fused_bytes"].as_u64().unwrap());
    assert_eq!(full["fused_bound"], "compute");
    let out = tf()
        .args(["memory-traffic", "--seq", "4096", "--dim", "8192"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let s = String::from_utf8(out).unwrap();
    assert!(
        s.contains("576.00 MiB")
            && s.contains("128.00 MiB")
            && s.contains("4.50x")
            && s.contains("77.8 %"),
        "{s}"
    );
    assert!(
        s.contains("compute-bound") || s.contains("memory-bound"),
        "{s}"
    );
    fails(&["memory-traffic", "--seq", "0"], &["--seq"]);
}

#[test]
fn run_labels_bytes_as_the_model_and_paths_agree() {
    // The executor does not count bytes: `run` reports the traffic model's figure under
    // `model_*` names (schema 2), equal to what `fuse` reports for the same program, and no
    // field claims to be a measured byte count.
    for name in [
        "rmsnorm_swiglu_mlp",
        "attention_softmax",
        "logaddexp_chain",
        "residual_layernorm",
    ] {
        let path = example(name);
        let fused = json(&["fuse", &path, "--json"]);
        let fuse_bytes: u64 = fused["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["total_bytes"].as_u64().unwrap())
            .sum();
        for extra in [&[][..], &["--unfused"][..]] {
            let mut args = vec!["run", &path, "--json"];
            args.extend_from_slice(extra);
            let v = json(&args);
            assert_eq!(v["schema_version"], 3);
            let obj = v.as_object().unwrap();
            assert!(
                !obj.keys().any(|k| k.starts_with("measured")),
                "{name}: {obj:?}"
            );
            assert!(obj.get("counts_match_model").is_none());
            let (r, w, t) = (
                v["model_read_bytes"].as_u64().unwrap(),
                v["model_write_bytes"].as_u64().unwrap(),
                v["model_bytes"].as_u64().unwrap(),
            );
            assert_eq!(r + w, t, "{name}");
            if extra.is_empty() {
                assert_eq!(t, fuse_bytes, "{name}: run and fuse disagree");
            }
        }
    }
    let v = json(&[
        "run",
        &example("attention_softmax"),
        "--bench",
        "--reps",
        "2",
        "--json",
    ]);
    assert_eq!(v["bench"]["agree"], true);
    assert!(v["bench"]["predicted_traffic_ratio"].as_f64().unwrap() > 2.9);
    // The kernels are part of the whole call: their best time is positive and no longer
    // than the best call's, so their bandwidth fraction is at least the call's.
    let b = &v["bench"];
    let (kns, fns) = (
        b["fused_kernels_ns"].as_u64().unwrap(),
        b["fused_ns"].as_u64().unwrap(),
    );
    assert!(kns > 0 && kns <= fns, "{b}");
    assert!(
        b["kernels_bandwidth_fraction"].as_f64().unwrap()
            >= b["fused_bandwidth_fraction"].as_f64().unwrap(),
        "{b}"
    );
}

#[test]
fn run_reads_npy_inputs_and_shows_the_naive_overflow() {
    use tensorforge_kernels::npy::{to_npy, NpyArray, NpyData};
    let d = tmpdir("npy");
    for (n, v) in [("a", 100.0f32), ("b", 100.0), ("c", -5.0)] {
        let a = NpyArray::new(vec![4096], NpyData::F32(vec![v; 4096])).unwrap();
        std::fs::write(d.join(format!("{n}.npy")), to_npy(&a).unwrap()).unwrap();
    }
    let dir = d.display().to_string();
    let fused = json(&[
        "run",
        &example("logaddexp_chain"),
        "--inputs",
        &dir,
        "--json",
    ]);
    // logaddexp(logaddexp(100, 100), -5) = 100 + ln 2 (+ e^-105.7) = 100.693147.
    assert_eq!(fused["outputs"][0]["non_finite"], 0);
    assert!((fused["outputs"][0]["max"].as_f64().unwrap() - 100.693_147).abs() < 1e-4);
    let naive = json(&[
        "run",
        &example("logaddexp_chain"),
        "--inputs",
        &dir,
        "--unfused",
        "--json",
    ]);
    assert_eq!(naive["outputs"][0]["non_finite"], 4096);
    let wrong = NpyArray::new(vec![3], NpyData::F32(vec![0.0; 3])).unwrap();
    std::fs::write(d.join("a.npy"), to_npy(&wrong).unwrap()).unwrap();
    fails(
        &["run", &example("logaddexp_chain"), "--inputs", &dir],
        &["a.npy", "[3]", "[4096]"],
    );
}

#[test]
fn onnx_through_the_binary_imports_and_truncated_or_hostile_files_exit_2() {
    let good = format!(
        "{}/../../examples/graphs/tiny_mlp.onnx",
        env!("CARGO_MANIFEST_DIR")
    );
    let v = json(&["fuse", &good, "--json"]);
    assert!(!v["kernels"].as_array().unwrap().is_empty(), "{v}");
    assert!(
        v["traffic"]["unfused_bytes"].as_u64().unwrap()
            >= v["traffic"]["fused_bytes"].as_u64().unwrap()
    );

    let bytes = std::fs::read(&good).unwrap();
    let dir = tmpdir("onnx");
    // Truncated in the middle of the graph.
    let cut = dir.join("truncated.onnx");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let cut = cut.display().to_string();
    fails(&["fuse", &cut], &["truncated.onnx"]);
    // Hostile: a length-delimited field that claims 2 GiB of payload.
    let hostile = dir.join("hostile.onnx");
    std::fs::write(&hostile, [0x3a, 0xff, 0xff, 0xff, 0xff, 0x07, 0x00]).unwrap();
    let hostile = hostile.display().to_string();
    fails(&["plan-memory", &hostile], &["hostile.onnx"]);
}

#[test]
fn run_out_writes_each_output_as_npy_and_refuses_a_file_as_dir() {
    let dir = tmpdir("runout");
    let out = dir.join("out");
    tf().args(["run", &example("residual_layernorm"), "--out"])
        .arg(&out)
        .assert()
        .success();
    // residual_layernorm has two outputs, resid and y, both [128, 512] f32.
    for name in ["resid", "y"] {
        let bytes = std::fs::read(out.join(format!("{name}.npy"))).unwrap();
        let arr = tensorforge_kernels::npy::parse_npy(&bytes).unwrap();
        assert_eq!(arr.shape, vec![128, 512], "{name}");
        assert_eq!(arr.data.len(), 128 * 512);
    }
    let file = write(&dir, "not_a_dir", "x");
    fails(
        &["run", &example("residual_layernorm"), "--out", &file],
        &["--out", "not a directory"],
    );
}

/// `--threads N` runs every parallel loop on N workers (reported by `--bench`); 0 is a
/// one-line error, exit 2.
#[test]
fn run_threads_sets_the_worker_count() {
    let g = example("residual_layernorm");
    for n in [1u64, 3] {
        let v = json(&[
            "run",
            &g,
            "--threads",
            &n.to_string(),
            "--bench",
            "--reps",
            "1",
            "--json",
        ]);
        assert_eq!(v["bench"]["threads"], n);
        assert_eq!(v["bench"]["agree"], true);
    }
    fails(&["run", &g, "--threads", "0"], &["--threads", "at least 1"]);
}

/// `run` names an ONNX model's symbolic dims in its outputs' shapes: GPT-2's logits are
/// [batch, sequence, vocabulary 512] (the model's definition), with the bound sizes beside
/// the names in the table and the names in `--json`.
#[test]
fn run_names_the_symbolic_dims_of_its_outputs() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/onnx/gpt2_sdpa_ts/model.onnx")
        .display()
        .to_string();
    let dims = ["--dim", "batch=3", "--dim", "sequence=5"];
    let out = tf()
        .args(["run", &model, "--executor", "interpreter"])
        .args(dims)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("[batch=3, sequence=5, 512]"), "{text}");
    let v = json(&[
        "run",
        &model,
        "--executor",
        "interpreter",
        "--json",
        dims[0],
        dims[1],
        dims[2],
        dims[3],
    ]);
    assert_eq!(
        v["outputs"][0]["dims"],
        serde_json::json!(["batch", "sequence", "512"])
    );
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([3, 5, 512]));
}

/// Every real ONNX fixture through the binary, as a user runs it: `run --inputs --out`
/// writes outputs equal to onnxruntime's (1e-5 of the largest magnitude, fused and
/// `--unfused`), `fuse --explain` gives a reason per decision, and the traffic model counts
/// at least the weight bytes.
#[test]
fn onnx_fixtures_run_through_the_binary_equal_onnxruntime() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/onnx");
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.onnx").exists())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 7, "{names:?}");
    for name in &names {
        let d = root.join(name);
        let model = d.join("model.onnx").display().to_string();
        let inputs = d.join("inputs").display().to_string();
        for unfused in [false, true] {
            let out = tmpdir(&format!("onnxfx_{name}_{unfused}"));
            let mut args = vec!["run", &model, "--inputs", &inputs, "--out"];
            let o = out.display().to_string();
            args.push(&o);
            if unfused {
                args.push("--unfused");
            }
            tf().args(&args).assert().success();
            for e in std::fs::read_dir(d.join("expected")).unwrap() {
                let p = e.unwrap().path();
                let want =
                    tensorforge_kernels::npy::parse_npy(&std::fs::read(&p).unwrap()).unwrap();
                let got = tensorforge_kernels::npy::parse_npy(
                    &std::fs::read(out.join(p.file_name().unwrap())).unwrap(),
                )
                .unwrap();
                assert_eq!(got.shape, want.shape, "{name} {}", p.display());
                let (
                    tensorforge_kernels::npy::NpyData::F32(g),
                    tensorforge_kernels::npy::NpyData::F32(w),
                ) = (&got.data, &want.data)
                else {
                    panic!("{name}: not f32");
                };
                let scale = w.iter().fold(0f32, |m, x| m.max(x.abs()));
                let err = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                assert!(
                    err <= 1e-5 * scale,
                    "{name} unfused={unfused}: {err:e} vs {scale}"
                );
            }
        }
        // The TorchScript exports declare symbolic batch and sequence dims.
        let dims = ["--dim", "batch=2", "--dim", "sequence=8"];
        let explain = tf()
            .args(["fuse", &model, "--explain"])
            .args(dims)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let text = String::from_utf8(explain).unwrap();
        let decisions: Vec<&str> = text
            .lines()
            .filter(|l| l.trim_start().starts_with("[+]") || l.trim_start().starts_with("[-]"))
            .collect();
        assert!(!decisions.is_empty(), "{name}: {text}");
        // Every decision line carries a reason after its `(rule)` tag.
        for l in &decisions {
            let reason = l.split_once(")").map(|x| x.1.trim()).unwrap_or("");
            assert!(reason.len() > 10, "{name}: no reason in `{l}`");
        }
        let v = json(&["fuse", &model, "--json", dims[0], dims[1], dims[2], dims[3]]);
        let mut options = tensorforge_graph::onnx::ImportOptions::default();
        options.dims.insert("batch".into(), 2);
        options.dims.insert("sequence".into(), 8);
        let imp = tensorforge_graph::onnx::import_onnx_file_with(&model, &options).unwrap();
        let weight_bytes: usize = imp.weights.values().map(|w| w.len()).sum();
        // fp32 weights are 4 bytes each; int8 ones 1: the lower bound counts 1 byte each.
        assert!(
            v["traffic"]["fused_bytes"].as_u64().unwrap() >= weight_bytes as u64,
            "{name}: {v}"
        );
    }
}

/// The names of the files in `dir` (none when it does not exist).
fn files_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (up to 2 minutes) until a background build leaves exactly one file in `dir`, named
/// `*suffix`.
fn wait_for_one_file(dir: &Path, suffix: &str) {
    let t0 = std::time::Instant::now();
    loop {
        let f = files_in(dir);
        if f.len() == 1 && f[0].ends_with(suffix) {
            return;
        }
        assert!(
            t0.elapsed().as_secs() < 120,
            "background build did not end with one *{suffix} file: {f:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The JIT as a user meets it: a first plain run interprets while a background build fills
/// the cache (and says so), later runs load the compiled kernels, `--executor jit` waits for
/// the compiler, a missing compiler is a note and the interpreter under `auto` but exit 2
/// under `--executor jit`, a corrupt cache entry is rebuilt, an unusable cache folder falls
/// back to a temporary one, and `codegen` writes sources that compile.
#[test]
fn jit_executor_fallbacks_cache_and_codegen() {
    let dir = tmpdir("jit");
    let cache = dir.join("cache");
    let _ = std::fs::remove_dir_all(&cache);
    let g = example("residual_layernorm");
    let run = |envs: &[(&str, &str)], extra: &[&str]| {
        let mut c = tf();
        c.env("TENSORFORGE_CACHE_DIR", &cache);
        for (k, v) in envs {
            c.env(k, v);
        }
        c.args(["run", &g, "--json"]).args(extra);
        c
    };
    // Default, empty cache: interpreted now, compiled in the background for the next run.
    let out = run(&[], &[]).assert().success().get_output().clone();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["executor"], "interpreter", "{v}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("compiles in the background"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The build ends with `<key>.so` in the cache and nothing else: its sources, objects
    // and script are removed.
    wait_for_one_file(&cache, ".so");
    // Next run: the compiled kernels, and the outputs equal the interpreter's.
    let out = run(&[], &[]).assert().success().get_output().clone();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["executor"], "jit", "{v}");
    assert_eq!(v["jit"]["compiled_kernels"], 1, "{v}");
    assert_eq!(v["jit"]["cached"], true, "{v}");
    // A background build that fails leaves the compiler's messages in `<key>.failed`; the
    // next run reports them in one note and interprets, without compiling again.
    let broken = dir.join("broken_cache");
    let _ = std::fs::remove_dir_all(&broken);
    let with_false_cc = || {
        let mut c = tf();
        c.env("TENSORFORGE_CACHE_DIR", &broken)
            .env("CC", "false")
            .args(["run", &g, "--json"]);
        c
    };
    with_false_cc().assert().success();
    wait_for_one_file(&broken, ".failed");
    let out = with_false_cc().assert().success().get_output().clone();
    let err = String::from_utf8_lossy(&out.stderr);
    let notes: Vec<&str> = err.lines().filter(|l| l.starts_with("note:")).collect();
    assert!(
        notes.len() == 1
            && notes[0].contains("running the interpreter")
            && notes[0].contains(".failed"),
        "{err}"
    );
    assert_eq!(files_in(&broken).len(), 1, "{:?}", files_in(&broken));
    // `--executor jit` on an empty cache compiles before it runs.
    let fresh = dir.join("fresh_cache");
    let _ = std::fs::remove_dir_all(&fresh);
    let w: Value = serde_json::from_slice(
        &tf()
            .env("TENSORFORGE_CACHE_DIR", &fresh)
            .args(["run", &g, "--json", "--executor", "jit"])
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .unwrap();
    assert_eq!(
        (&w["executor"], &w["jit"]["cached"]),
        (&"jit".into(), &false.into())
    );
    let interp = run(&[], &["--executor", "interpreter"])
        .assert()
        .success()
        .get_output()
        .clone();
    let w: Value = serde_json::from_slice(&interp.stdout).unwrap();
    assert_eq!(w["executor"], "interpreter");
    for (a, b) in v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(w["outputs"].as_array().unwrap())
    {
        let (x, y) = (a["mean"].as_f64().unwrap(), b["mean"].as_f64().unwrap());
        assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "{a} vs {b}");
    }
    // Second run: from the cache.
    let again: Value =
        serde_json::from_slice(&run(&[], &[]).assert().success().get_output().stdout).unwrap();
    assert_eq!(again["jit"]["cached"], true);
    // A corrupt cache entry is rebuilt, never run.
    for e in std::fs::read_dir(&cache).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "so") {
            std::fs::write(&p, b"not an ELF object").unwrap();
        }
    }
    let out = run(&[], &["--executor", "jit"])
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("corrupt or foreign; rebuilt"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // No compiler: `auto` notes it once and interprets; `jit` is an error, exit 2.
    let out = run(&[("CC", "/nonexistent/cc")], &[])
        .assert()
        .success()
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("note: running the interpreter").count(),
        1,
        "{err}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["executor"], "interpreter");
    let out = run(&[("CC", "/nonexistent/cc")], &["--executor", "jit"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no C compiler") && err.contains("/nonexistent/cc"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // A cache "folder" that is a file: `--executor jit` compiles into a temporary folder,
    // said so; a plain run interprets, with a one-line note naming the folder.
    let file = write(&dir, "cache_is_a_file", "x");
    let out = tf()
        .env("TENSORFORGE_CACHE_DIR", &file)
        .args(["run", &g, "--executor", "jit"])
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not usable"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tf()
        .env("TENSORFORGE_CACHE_DIR", &file)
        .args(["run", &g])
        .assert()
        .success()
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    let note: Vec<&str> = err.lines().filter(|l| l.starts_with("note:")).collect();
    assert!(
        note.len() == 1 && note[0].contains("running the interpreter") && note[0].contains(&file),
        "{err}"
    );
    // codegen: per-kernel sources with the fusion reasons, a manifest, and a unit that cc
    // compiles.
    let cg = dir.join("cg");
    tf().args([
        "codegen",
        &example("attention_softmax"),
        "--target",
        "c",
        "--out",
    ])
    .arg(&cg)
    .assert()
    .success();
    let k1 = std::fs::read_to_string(cg.join("k1.c")).unwrap();
    assert!(
        k1.contains("[+] probs") && k1.contains("void tf_k1("),
        "{k1}"
    );
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(cg.join("manifest.json")).unwrap()).unwrap();
    // k0 is the scores matmul: its file and manifest entry are its compiled epilogue (the
    // scale), which reads the product, as the JIT renders it; nothing is left interpreted.
    assert_eq!(m["kernels"][0]["kernel"], "k0");
    assert_eq!(m["kernels"][1]["kernel"], "k1");
    assert!(
        m["kernels"][0]["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "scores"),
        "{m}"
    );
    assert_eq!(m["interpreted"], serde_json::json!([]));
    let k0 = std::fs::read_to_string(cg.join("k0.c")).unwrap();
    assert!(k0.contains("Its elementwise epilogue"), "{k0}");
    let st = std::process::Command::new("cc")
        .args(["-std=c11", "-fsyntax-only"])
        .arg(cg.join("program.c"))
        .status()
        .unwrap();
    assert!(st.success());
}

/// `codegen --target triton|cuda`: the Triton file holds one `@triton.jit` function per
/// generated kernel, the fusion reasons and a launcher that refuses programs with
/// interpreted kernels; the CUDA files hold `__global__` kernels with a warp or a block per row
/// (crates/cuda's tests compile them with NVRTC and run them under a CPU emulator).
#[test]
fn codegen_writes_triton_and_cuda_sources() {
    let dir = tmpdir("cg_targets");
    let t = dir.join("triton");
    tf().args([
        "codegen",
        &example("residual_layernorm"),
        "--target",
        "triton",
        "--out",
    ])
    .arg(&t)
    .assert()
    .success();
    let py = std::fs::read_to_string(t.join("k0.py")).unwrap();
    assert_eq!(py.matches("@triton.jit\ndef tf_k0").count(), 1, "{py}");
    assert!(py.contains("# [+] y ("), "{py}");
    let launcher = std::fs::read_to_string(t.join("launcher.py")).unwrap();
    assert!(
        launcher.contains("INTERPRETED = []") && launcher.contains("def run(tensors)"),
        "{launcher}"
    );
    assert!(t.join("tf_common.py").exists());
    let t2 = dir.join("triton_attn");
    tf().args([
        "codegen",
        &example("attention_softmax"),
        "--target",
        "triton",
        "--out",
    ])
    .arg(&t2)
    .assert()
    .success();
    let py = std::fs::read_to_string(t2.join("launcher.py")).unwrap();
    assert!(py.contains("INTERPRETED = [\"k0\"]"), "{py}");
    assert!(t2.join("k1.py").exists() && !t2.join("k0.py").exists());
    let c = dir.join("cuda");
    tf().args([
        "codegen",
        &example("residual_layernorm"),
        "--target",
        "cuda",
        "--out",
    ])
    .arg(&c)
    .assert()
    .success();
    let cu = std::fs::read_to_string(c.join("k0.cu")).unwrap();
    let unit = std::fs::read_to_string(c.join("kernels.cu")).unwrap();
    // kernels.cu is self-contained (NVRTC has no include path): the prelude, then k0.
    assert!(
        unit.contains("tf_block_sum(") && unit.contains("extern \"C\" __global__ void tf_k0("),
        "{unit}"
    );
    assert!(std::fs::read_to_string(c.join("prelude.cuh"))
        .unwrap()
        .contains("__device__"));
    assert!(
        cu.contains("#include \"prelude.cuh\"")
            && cu.contains("extern \"C\" __global__ void tf_k0(const float *__restrict__ I0"),
        "{cu}"
    );
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(c.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["schema_version"], 3);
    assert_eq!(m["storage"], "fp32");
    assert_eq!(m["kernels"][0]["rows"], 128);
    assert_eq!(m["kernels"][0]["cols"], 512);
    // 512 columns: a warp per row (rows up to 1024 columns), 4 floats (128 bits) per thread
    // step since 512 = 4 · 128.
    assert_eq!(m["kernels"][0]["row_unit"], "warp");
    assert_eq!(m["kernels"][0]["cols_per_thread"], 4);
    let params = m["kernels"][0]["params"].as_array().unwrap();
    assert_eq!(params.last().unwrap(), "rows");
    // bf16 storage: the tensors' pointers are 16-bit, 8 columns (128 bits) per step.
    let b = dir.join("cuda_bf16");
    tf().args([
        "codegen",
        &example("residual_layernorm"),
        "--target",
        "cuda",
        "--storage",
        "bf16",
        "--out",
    ])
    .arg(&b)
    .assert()
    .success();
    let cu = std::fs::read_to_string(b.join("k0.cu")).unwrap();
    assert!(
        cu.contains("tf_k0(const tf_st_bf16 *__restrict__ I0") && cu.contains("tf_ldv("),
        "{cu}"
    );
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(b.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["storage"], "bf16");
    assert_eq!(m["storage_bytes_per_element"], 2);
    assert_eq!(m["kernels"][0]["cols_per_thread"], 8);
    // Only the CUDA target stores 16-bit tensors: a one-line error, exit 2, nothing written.
    let bad = dir.join("c_bf16");
    let out = tf()
        .args([
            "codegen",
            &example("residual_layernorm"),
            "--storage",
            "fp16",
            "--out",
        ])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`--storage` = `fp16`") && err.lines().count() == 1,
        "{err}"
    );
    assert!(!bad.exists());
}
