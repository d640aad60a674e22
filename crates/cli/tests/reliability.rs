//! The reproductions of the reliability issue, each as a test: hostile or careless input
//! gets a one-line error naming what is wrong and exit 2 (or works, where it is valid), never
//! a panic; a usage error gets clap's message with its usage line, also exit 2.

use assert_cmd::Command;
use std::path::PathBuf;

fn tf() -> Command {
    Command::cargo_bin("tensorforge").unwrap()
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tf_reliab_{tag}_{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Exit 2, one line on stderr, no panic, containing every needle.
fn fails(c: &mut Command, needles: &[&str]) -> String {
    let out = c.assert().code(2).get_output().clone();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks `{n}`: {err}");
    }
    err
}

/// Exit 2, no panic, clap's usage message: `error: ` first, every needle, the pointer to
/// `--help` last.
fn usage_fails(c: &mut Command, needles: &[&str]) {
    let out = c.assert().code(2).get_output().clone();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.trim_end()
            .ends_with("For more information, try '--help'."),
        "{err}"
    );
    for n in needles {
        assert!(err.contains(n), "stderr lacks `{n}`: {err}");
    }
}

#[test]
fn a_table_cell_over_65535_characters_is_cut_not_a_panic() {
    // A ReLU node named with 70 000 characters: `format!` padding panics beyond 65 535.
    let d = tmpdir("cell");
    let name = "n".repeat(70_000);
    let g = format!(
        r#"{{"schema_version":1,"name":"g","nodes":[{{"name":"x","op":"Input","attrs":{{"shape":[2],"dtype":"fp32"}}}},{{"name":"{name}","op":"ReLU","inputs":["x"]}}]}}"#
    );
    let p = d.join("long.json");
    std::fs::write(&p, g).unwrap();
    for cmd in ["fuse", "plan-memory", "run"] {
        tf().arg(cmd).arg(&p).assert().success();
    }
    // The fuse table's node cell is cut and says by how much: 70 000 − 176 kept = 69 824.
    let out = tf()
        .arg("fuse")
        .arg(&p)
        .assert()
        .success()
        .get_output()
        .clone();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("… [+69824 chars]"), "{text}");
}

#[test]
fn quantization_scales_are_checked_in_the_precision_used() {
    // Graph attribute: 1e-320 becomes 0 in f32 and 1e300 becomes inf; both refused at
    // validation, the message quoting the value as written.
    let d = tmpdir("scale");
    for bad in ["1e-320", "1e300"] {
        let g = format!(
            r#"{{"schema_version":1,"name":"g","nodes":[{{"name":"x","op":"Input","attrs":{{"shape":[4],"dtype":"fp32"}}}},{{"name":"q","op":"Quantize","inputs":["x"],"attrs":{{"scale":{bad},"zero_point":0}}}},{{"name":"y","op":"Dequantize","inputs":["q"],"attrs":{{"scale":0.5,"zero_point":0}}}}]}}"#
        );
        let p = d.join("q.json");
        std::fs::write(&p, g).unwrap();
        fails(tf().arg("run").arg(&p), &[bad, "`q`"]);
    }
    // `kernel quantize`: the message shows what was typed, not its f32 rounding.
    let x = tensorforge_kernels::npy::NpyArray::new(
        vec![4],
        tensorforge_kernels::npy::NpyData::F32(vec![0.0, 1.0, 2.0, 3.0]),
    )
    .unwrap();
    let xin = d.join("x.npy");
    std::fs::write(&xin, tensorforge_kernels::npy::to_npy(&x).unwrap()).unwrap();
    let out = d.join("o.npy");
    let q = |scale: &str| {
        let mut c = tf();
        c.args(["kernel", "quantize", "--in"])
            .arg(&xin)
            .arg("--out")
            .arg(&out)
            .arg(format!("--scale={scale}"));
        c
    };
    let e = fails(&mut q("-0.1"), &["-0.1"]);
    assert!(!e.contains("0.10000000149"), "{e}");
    fails(&mut q("1e-320"), &["`1e-320`", "--scale"]);
    fails(&mut q("3.5e38"), &["`3.5e38`", "--scale"]);
    tf().args(["kernel", "quantize", "--in"])
        .arg(&xin)
        .arg("--out")
        .arg(&out)
        .arg("--scale=0.1")
        .assert()
        .success();
}

#[test]
fn empty_tensors_and_negative_flag_values_are_named_errors() {
    // A [0, 4] input: refused by name instead of "min inf max -inf, bound balanced".
    let d = tmpdir("empty");
    let p = d.join("empty.json");
    std::fs::write(
        &p,
        r#"{"schema_version":1,"name":"g","nodes":[{"name":"x","op":"Input","attrs":{"shape":[0,4],"dtype":"fp32"}},{"name":"y","op":"ReLU","inputs":["x"]}]}"#,
    )
    .unwrap();
    for cmd in ["fuse", "run", "plan-memory"] {
        fails(tf().arg(cmd).arg(&p), &["`x`", "0 elements"]);
    }
    // `--m -5`: an invalid value of `--m`, not an unexpected argument `-5`. Usage errors
    // show clap's message (the error, then its tips and usage line), exit 2.
    usage_fails(
        tf().args(["analyze", "gemm", "--m", "-5", "--n", "4", "--k", "4"]),
        &["invalid value '-5' for '--m <M>'"],
    );
    usage_fails(
        tf().args(["analyze", "gemm", "--bogus"]),
        &[
            "unexpected argument '--bogus'",
            "Usage: tensorforge analyze gemm",
        ],
    );
}

#[test]
fn a_run_larger_than_memory_is_an_error_not_an_abort() {
    // x [65536, 1] broadcast to [65536, 16384] then ReLU: 2 × 2^30 + 2^16 elements, 8 GiB of
    // f32. With the run capped at 1 GiB it is refused before anything is allocated.
    let d = tmpdir("mem");
    let p = d.join("big.json");
    std::fs::write(
        &p,
        r#"{"schema_version":1,"name":"g","nodes":[{"name":"x","op":"Input","attrs":{"shape":[65536,1],"dtype":"fp32"}},{"name":"b","op":"Broadcast","inputs":["x"],"attrs":{"shape":[65536,16384]}},{"name":"y","op":"ReLU","inputs":["b"]}]}"#,
    )
    .unwrap();
    fails(
        tf().env("TENSORFORGE_MEMORY_LIMIT_BYTES", (1u64 << 30).to_string())
            .arg("run")
            .arg(&p),
        &["8.00 GiB", "1.00 GiB", "available"],
    );
}

#[test]
fn run_out_and_codegen_write_all_files_or_none() {
    // residual_layernorm writes resid.npy and y.npy; y.npy is a folder: nothing is written.
    let g = format!(
        "{}/../../examples/graphs/residual_layernorm.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let d = tmpdir("atomic_out");
    std::fs::create_dir_all(d.join("y.npy")).unwrap();
    fails(
        tf().args(["run", &g, "--out"]).arg(&d),
        &["y.npy", "directory"],
    );
    assert!(!d.join("resid.npy").exists());
    let c = tmpdir("atomic_cg");
    std::fs::create_dir_all(c.join("manifest.json")).unwrap();
    fails(
        tf().args(["codegen", &g, "--target", "c", "--out"]).arg(&c),
        &["manifest.json"],
    );
    assert!(!c.join("k0.c").exists() && !c.join("prelude.h").exists());
}

#[test]
fn a_newline_in_a_user_string_cannot_split_the_error_line() {
    // A node reads a tensor whose name holds a newline and a fake second error.
    let d = tmpdir("nl");
    let p = d.join("nl.json");
    std::fs::write(
        &p,
        r#"{"schema_version":1,"name":"g","nodes":[{"name":"x","op":"Input","attrs":{"shape":[2],"dtype":"fp32"}},{"name":"y","op":"ReLU","inputs":["missing\nerror: forged"]}]}"#,
    )
    .unwrap();
    fails(tf().arg("fuse").arg(&p), &["missing\\nerror: forged"]);
}

#[test]
fn duplicate_json_keys_are_refused_in_every_format() {
    // Graph attributes: {"axis": 0, "axis": -1} used to keep -1 silently.
    let d = tmpdir("dupkeys");
    let g = d.join("g.json");
    std::fs::write(
        &g,
        r#"{"schema_version":1,"name":"g","nodes":[{"name":"x","op":"Input","attrs":{"shape":[2,3],"dtype":"fp32"}},{"name":"s","op":"Softmax","inputs":["x"],"attrs":{"axis":0,"axis":-1}}]}"#,
    )
    .unwrap();
    fails(
        tf().arg("fuse").arg(&g),
        &["duplicate key `axis`", "$.nodes[1].attrs"],
    );
    // A Hugging Face config.json.
    let hf = d.join("config.json");
    std::fs::write(
        &hf,
        r#"{"hidden_size":4096,"hidden_size":64,"num_attention_heads":32,"num_hidden_layers":32,"intermediate_size":11008,"vocab_size":32000}"#,
    )
    .unwrap();
    fails(
        tf().args(["analyze", "model", "--seq", "128", "--config"])
            .arg(&hf),
        &["duplicate key `hidden_size`"],
    );
}
