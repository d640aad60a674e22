//! The record format sits below the store, the harness and the gate: this test reads its
//! manifest and fails if it depends on any workspace crate but the Core, or on a database
//! client. It does not look at dev-dependencies.

use std::path::PathBuf;

/// Storage crates that belong in `tensorforge-store`, not in the record format.
const FORBIDDEN: &[&str] = &[
    "rusqlite",
    "libsqlite3-sys",
    "postgres",
    "tokio-postgres",
    "diesel",
    "sqlx",
];

#[test]
fn record_depends_only_on_the_core_among_workspace_crates() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    let deps = doc
        .get("dependencies")
        .and_then(|d| d.as_table())
        .cloned()
        .unwrap_or_default();
    assert!(!deps.is_empty(), "expected some dependencies (serde...)");
    for name in deps.keys() {
        assert!(
            !name.starts_with("tensorforge") || name == "tensorforge-core",
            "tensorforge-record depends on `{name}`: the record format may depend only on the Core among workspace crates"
        );
        assert!(
            !FORBIDDEN.contains(&name.as_str()),
            "tensorforge-record depends on `{name}`, a storage crate"
        );
    }
}
