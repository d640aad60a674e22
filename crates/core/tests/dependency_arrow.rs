//! The Core must never depend on measurement or storage code, and must do no I/O: the
//! arrow from measurement to model is one-way. This test reads the Core's manifest and
//! sources and fails if either rule is broken.

use std::path::{Path, PathBuf};

const FORBIDDEN_DEPENDENCIES: &[&str] = &[
    "rusqlite",
    "sqlite",
    "libsqlite3-sys",
    "diesel",
    "sqlx",
    "sled",
    "redb",
    "rocksdb",
    "reqwest",
    "ureq",
    "hyper",
    "tokio",
    "indicatif",
    "criterion-measure",
];

const FORBIDDEN_SOURCE: &[&str] = &[
    "std::fs",
    "std::net",
    "std::process",
    "std::env",
    "File::open",
    "File::create",
    "std::io::stdin",
];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn core_depends_on_no_measurement_storage_or_sibling_crate() {
    let text = std::fs::read_to_string(manifest_dir().join("Cargo.toml")).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    let deps = doc
        .get("dependencies")
        .and_then(|d| d.as_table())
        .cloned()
        .unwrap_or_default();
    assert!(
        !deps.is_empty(),
        "expected the Core to have some dependencies (serde...)"
    );
    for name in deps.keys() {
        assert!(
            !name.starts_with("tensorforge"),
            "tensorforge-core depends on `{name}`: the Core must not depend on any other TensorForge crate (measurement, storage, policy, CLI)"
        );
        assert!(
            !FORBIDDEN_DEPENDENCIES.contains(&name.as_str()),
            "tensorforge-core depends on `{name}`, a storage/network/progress crate"
        );
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn core_sources_do_no_io() {
    let mut files = Vec::new();
    rust_files(&manifest_dir().join("src"), &mut files);
    assert!(files.len() > 5, "found too few sources: {files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for pat in FORBIDDEN_SOURCE {
            assert!(
                !text.contains(pat),
                "{} uses `{pat}`: the Core performs no I/O",
                f.display()
            );
        }
    }
}
