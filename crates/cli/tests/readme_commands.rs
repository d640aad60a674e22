//! The README's "Using it" commands run as written on a fresh checkout: every input file they
//! name exists in the repository or is written by an earlier command of the block, and the
//! commands that need no measurement run and exit 0 (in a temporary folder, with the
//! repository's `examples/` linked in and a private store).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `sh` block under "## Using it", one command per entry (continuations joined,
/// comments dropped).
fn commands() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find("## Using it")
        .expect("README has a Using it section");
    let block = &readme[start..];
    let open = block.find("```sh\n").unwrap() + 6;
    let close = open + block[open..].find("```").unwrap();
    let mut out = vec![];
    let mut cur = String::new();
    for line in block[open..close].lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let line = match line.find(" # ") {
            Some(i) => line[..i].trim_end(),
            None => line,
        };
        if let Some(l) = line.strip_suffix('\\') {
            cur.push_str(l);
            cur.push(' ');
            continue;
        }
        cur.push_str(line);
        out.push(std::mem::take(&mut cur));
    }
    out
}

/// Split like a shell for the README's simple forms: whitespace, double quotes kept whole.
fn words(cmd: &str) -> Vec<String> {
    let mut v = vec![];
    let mut cur = String::new();
    let mut quoted = false;
    for c in cmd.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    v.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        v.push(cur);
    }
    v
}

const INPUT_EXTENSIONS: [&str; 5] = [".npy", ".json", ".jsonl", ".toml", ".onnx"];
/// Flags (and the shell's `>`) whose value a command writes.
const OUTPUT_FLAGS: [&str; 6] = [
    ">",
    "--out",
    "--out-dir",
    "--svg",
    "--plots",
    "--export-json",
];

#[test]
fn every_input_file_exists_or_is_written_before() {
    let cmds = commands();
    assert!(cmds.len() > 20, "found {} commands", cmds.len());
    let mut written: Vec<String> = vec![];
    let mut missing = vec![];
    for c in &cmds {
        let w = words(c);
        for (i, t) in w.iter().enumerate() {
            if t.contains(' ') || !INPUT_EXTENSIONS.iter().any(|e| t.ends_with(e)) {
                continue;
            }
            if i > 0 && OUTPUT_FLAGS.contains(&w[i - 1].as_str()) {
                written.push(t.clone());
            } else if !root().join(t).exists() && !written.contains(t) {
                missing.push(format!("`{t}` in: {c}"));
            }
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}

#[test]
fn the_model_and_graph_commands_run_as_written() {
    // Commands that measure this machine (bench, calibrate, validate, compare, gate on
    // measured files, report, history, records) take minutes and are covered by their own
    // end-to-end tests; everything else in the block runs here.
    const RUN: [&str; 14] = [
        "hw",
        "workloads",
        "analyze",
        "roofline",
        "explore",
        "verify-overflow",
        "verify-quant",
        "kernel",
        "fuse",
        "plan-memory",
        "codegen",
        "memory-traffic",
        "ingest",
        "serve",
    ];
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("readme_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(root().join("examples"), dir.join("examples")).unwrap();
    let mut ran = 0;
    for c in commands() {
        let w = words(&c);
        if w[0] != "tensorforge" || !RUN.contains(&w[1].as_str()) {
            continue;
        }
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tensorforge"))
            .args(&w[1..])
            .current_dir(&dir)
            .env("TENSORFORGE_STORE", dir.join("store.sqlite"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "`{c}` exited {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(ran >= 15, "ran only {ran} commands");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The set-up section's two commands: the main job, then the tests, each the first line of
/// the `sh` block after its sentence.
fn setup_commands() -> (String, String) {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find("## Set-up")
        .expect("README has a Set-up section");
    let end = start + readme[start..].find("## Using it").unwrap();
    let blocks: Vec<String> = readme[start..end]
        .split("```sh\n")
        .skip(1)
        .map(|b| b.lines().next().unwrap_or("").trim().to_string())
        .collect();
    // Two commands, and optionally a third: the Python package (issue 29), which CI builds
    // and tests before the README's test command.
    assert!(
        blocks.len() == 2 || (blocks.len() == 3 && blocks[2] == "pip install ./python"),
        "set-up has two commands (and the optional `pip install ./python`): {blocks:?}"
    );
    (blocks[0].clone(), blocks[1].clone())
}

#[test]
fn ci_runs_the_readme_test_command_and_it_shares_the_main_jobs_build() {
    let (job, test) = setup_commands();
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let last = ci.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert_eq!(
        last.trim(),
        test,
        "CI's last command is the README's test command"
    );
    // Both in the release profile, so the tests reuse the main job's build (the workspace
    // manifest unifies dev-dependency features; docs/architecture.md, "Build sharing").
    assert!(job.starts_with("cargo run --release"), "{job}");
    assert!(test.contains("--release"), "{test}");
}

/// Packages and their features in one build's resolve, one `name version [features]` per
/// line: `select` picks the packages as on a cargo command line (nothing: the default
/// members, as `cargo build --release` does), `edges` the dependency kinds.
fn resolved_features(select: &[&str], edges: &str) -> std::collections::BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(root())
        .args(["tree", "--offline", "-e", edges])
        .args(select)
        .args(["--prefix", "none", "-f", "{p} [{f}]"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim_end_matches(" (*)").to_string())
        .collect()
}

/// The package of a `name version [features]` line.
fn package(line: &str) -> &str {
    line.split(" [").next().unwrap()
}

#[test]
fn tests_and_the_python_build_resolve_the_same_features_as_the_main_job() {
    // The main job builds the default members (`cargo build --release`); the README's test
    // command the whole workspace with dev-dependencies; maturin the Python package alone
    // (`-p tensorforge-python`). Every package the main job builds must appear with the
    // same features in the other two, or they recompile it and everything above it (a clean
    // CI spent 200 s rebuilding faer, serde and every workspace crate for the tests when the
    // Python package's numpy and pyo3 turned on two features; docs/architecture.md, "Build
    // sharing").
    let main_job = resolved_features(&[], "normal,build");
    let tests = resolved_features(&["--workspace"], "normal,build,dev");
    let differ: Vec<&String> = main_job.difference(&tests).collect();
    assert!(
        differ.is_empty(),
        "features differ between `cargo build --release` and the README's tests: {differ:?}"
    );
    let python = resolved_features(&["-p", "tensorforge-python"], "normal,build");
    let shared: std::collections::BTreeSet<&str> = main_job.iter().map(|l| package(l)).collect();
    let differ: Vec<&String> = python
        .iter()
        .filter(|l| shared.contains(package(l)) && !main_job.contains(*l))
        .collect();
    assert!(
        differ.is_empty(),
        "features differ between `cargo build --release` and maturin's build: {differ:?}"
    );
}
