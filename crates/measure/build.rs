//! Captures the git commit, the rustc version and the faer/rayon versions at build time for
//! the software context. Every step falls back to "unknown" (no env var) and never fails the
//! build: a source tarball without git or a missing Cargo.lock is fine.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for p in [
        ".git/HEAD",
        ".git/packed-refs",
        ".git/refs/heads",
        "Cargo.lock",
    ] {
        let path = root.join(p);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let git = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(&root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit()));
    if let Some(c) = git {
        println!("cargo:rustc-env=TF_GIT_COMMIT={c}");
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rv = Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && !s.contains('\n'));
    if let Some(v) = rv {
        println!("cargo:rustc-env=TF_RUSTC_VERSION={v}");
    }
    if let Ok(lock) = std::fs::read_to_string(root.join("Cargo.lock")) {
        for (krate, var) in [("faer", "TF_FAER_VERSION"), ("rayon", "TF_RAYON_VERSION")] {
            if let Some(v) = lock_version(&lock, krate) {
                println!("cargo:rustc-env={var}={v}");
            }
        }
    }
}

/// The version of the first `[[package]]` named `krate` in a Cargo.lock.
fn lock_version(lock: &str, krate: &str) -> Option<String> {
    let needle = format!("name = \"{krate}\"");
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l.trim() == needle {
            let v = lines.next()?.trim();
            let v = v.strip_prefix("version = \"")?.strip_suffix('"')?;
            return Some(v.to_string());
        }
    }
    None
}
