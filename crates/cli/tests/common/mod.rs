//! Helpers shared by the CLI end-to-end tests: run the binary, read its JSON, and check the
//! bad-input contract (exit 2, one line on stderr naming what was wrong, never a panic; a
//! usage error caught by clap shows clap's whole message instead of one line).
#![allow(dead_code)] // each test file uses its own subset

use assert_cmd::Command;
use serde_json::Value;

/// The `tensorforge` binary under test.
pub fn tf() -> Command {
    Command::cargo_bin("tensorforge").unwrap()
}

/// Runs the command, expects success and returns its stdout parsed as JSON.
pub fn json(args: &[&str]) -> Value {
    let out = tf()
        .args(args)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON: {e}"))
}

/// Runs the command, expects exit 2 and one line on stderr holding every needle.
pub fn fails(args: &[&str], needles: &[&str]) {
    let out = tf().args(args).assert().code(2).get_output().clone();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks `{n}`:\n{err}");
    }
}

/// Runs the command, expects a usage error as clap writes it and returns its stderr: exit 2,
/// nothing on stdout, `error: ` first, every needle (the missing arguments, a tip) somewhere
/// in the message and clap's pointer to `--help` last.
pub fn usage_fails(args: &[&str], needles: &[&str]) -> String {
    let out = tf().args(args).assert().code(2).get_output().clone();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(out.stdout.is_empty(), "{args:?}: stdout not empty");
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    assert!(
        err.trim_end()
            .ends_with("For more information, try '--help'."),
        "{args:?}: {err}"
    );
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks `{n}`:\n{err}");
    }
    err
}
