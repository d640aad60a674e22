//! The policy crate decides on records; it never reads a store. This test reads its manifest
//! and fails if it depends on the store, a database client or a crate above it (measure, job,
//! the CLI): the record format comes from `tensorforge-record`. It does not look at
//! dev-dependencies or at what the allowed crates pull in themselves.

use std::path::PathBuf;

/// The workspace crates the policy crate may depend on.
const ALLOWED_WORKSPACE: &[&str] = &["tensorforge-core", "tensorforge-record"];

/// Storage and network crates that must not reach the gate.
const FORBIDDEN: &[&str] = &[
    "rusqlite",
    "libsqlite3-sys",
    "postgres",
    "tokio-postgres",
    "diesel",
    "sqlx",
];

#[test]
fn ops_depends_on_the_record_format_not_on_the_store() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    let deps = doc
        .get("dependencies")
        .and_then(|d| d.as_table())
        .cloned()
        .unwrap_or_default();
    assert!(
        deps.contains_key("tensorforge-record"),
        "expected tensorforge-ops to take records from tensorforge-record"
    );
    for name in deps.keys() {
        if name.starts_with("tensorforge") {
            assert!(
                ALLOWED_WORKSPACE.contains(&name.as_str()),
                "tensorforge-ops depends on `{name}`: policy may depend only on {ALLOWED_WORKSPACE:?} among workspace crates"
            );
        }
        assert!(
            !FORBIDDEN.contains(&name.as_str()),
            "tensorforge-ops depends on `{name}`, a storage crate"
        );
    }
}
