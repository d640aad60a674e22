//! The limits every stored string obeys, checked once for a whole record before any store
//! engine (SQLite or PostgreSQL) sees it and when a records file is read, so both engines
//! accept exactly the same records and a refusal names the run, the field, the limit and
//! the value.
//!
//! Why these: PostgreSQL refuses a NUL character in `text` and `jsonb` ("invalid byte
//! sequence for encoding UTF8: 0x00") where SQLite stores it, and refuses an index row over
//! [`POSTGRES_INDEX_ROW_MAX_BYTES`] (run ids, machine ids, workload names and profile ids
//! are indexed) where SQLite has no such limit. The limits below keep every indexed column
//! far under that (the widest index holds a 64-character fingerprint, a machine id, three
//! integers: under 400 bytes) and bound every other string. Valid UTF-8 holds by
//! construction: a record's strings are Rust `String`s, and serde refuses a records file
//! that is not UTF-8 (lone surrogates in `\u` escapes included). Left out: limits on
//! numbers and array lengths (samples), which neither engine indexes.

use crate::error::RecordError;
use serde_json::Value;
use tensorforge_core::text::{shorten, SHORT_VALUE_CHARS};

/// PostgreSQL's largest btree index entry (version 4 btree, 8 KiB pages), bytes: the limit
/// the other limits keep clear of. Not checked directly.
pub const POSTGRES_INDEX_ROW_MAX_BYTES: usize = 2704;

/// Longest `run_id`, bytes (a UUID v7 run id is 36).
pub const RUN_ID_MAX_BYTES: usize = 128;

/// Longest `device.machine_id`, bytes (the harness writes 16 hex digits).
pub const MACHINE_ID_MAX_BYTES: usize = 256;

/// Longest `workload.name`, bytes.
pub const WORKLOAD_NAME_MAX_BYTES: usize = 512;

/// Longest label key, bytes.
pub const LABEL_KEY_MAX_BYTES: usize = 128;

/// Longest label value, bytes.
pub const LABEL_VALUE_MAX_BYTES: usize = 1024;

/// Longest profile id, bytes (profiles are stored beside runs; the store checks them).
pub const PROFILE_ID_MAX_BYTES: usize = 128;

/// Longest profile TOML or provenance JSON, bytes (1 MiB; neither is indexed).
pub const PROFILE_TEXT_MAX_BYTES: usize = 1024 * 1024;

/// Longest string anywhere else in a record (workload kind, dtype, parameter keys and
/// values at any depth, software and harness strings, source, ...), and longest key of any
/// object, bytes (64 KiB).
pub const STRING_MAX_BYTES: usize = 64 * 1024;

/// What is wrong with one string of a record or profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitViolation {
    /// Field path (`workload.name`, `labels.<key>`, `workload.params.shape[2]`).
    pub field: String,
    /// The offending value, shortened and escaped for a message.
    pub value: String,
    /// Why: a NUL character, or its size against the limit.
    pub reason: String,
}

impl LimitViolation {
    /// As a [`RecordError::InvalidField`] of `source_name`.
    pub fn into_error(self, source_name: impl Into<String>) -> RecordError {
        RecordError::invalid(source_name, self.field, self.value, self.reason)
    }
}

/// Check one string: no NUL character, at most `max_bytes` bytes. `what` names the field,
/// `limit_name` the constant in messages.
///
/// ```
/// use tensorforge_record::limits::{check_text, RUN_ID_MAX_BYTES};
/// assert!(check_text("run_id", "r1", RUN_ID_MAX_BYTES, "RUN_ID_MAX_BYTES").is_ok());
/// let e = check_text("run_id", "a\0b", RUN_ID_MAX_BYTES, "RUN_ID_MAX_BYTES").unwrap_err();
/// assert_eq!((e.field.as_str(), e.value.as_str()), ("run_id", "a\\0b"));
/// ```
pub fn check_text(
    what: &str,
    s: &str,
    max_bytes: usize,
    limit_name: &str,
) -> Result<(), LimitViolation> {
    let violation = |reason: String| LimitViolation {
        field: what.to_string(),
        value: shorten(s, SHORT_VALUE_CHARS),
        reason,
    };
    if let Some(at) = s.find('\0') {
        return Err(violation(format!(
            "contains a NUL character (at byte {at}); no stored string may"
        )));
    }
    if s.len() > max_bytes {
        return Err(violation(format!(
            "is {} bytes, over the limit of {max_bytes} bytes ({limit_name})",
            s.len()
        )));
    }
    Ok(())
}

/// One step of a path into a record's JSON.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The limit on the string at `path` (`key`: the string is an object key there) and the
/// name of its constant.
fn limit_at(path: &[Step<'_>], key: bool) -> (usize, &'static str) {
    use Step::Key;
    match (path, key) {
        ([Key("run_id")], false) => (RUN_ID_MAX_BYTES, "RUN_ID_MAX_BYTES"),
        ([Key("device"), Key("machine_id")], false) => {
            (MACHINE_ID_MAX_BYTES, "MACHINE_ID_MAX_BYTES")
        }
        ([Key("workload"), Key("name")], false) => {
            (WORKLOAD_NAME_MAX_BYTES, "WORKLOAD_NAME_MAX_BYTES")
        }
        ([Key("labels")], true) => (LABEL_KEY_MAX_BYTES, "LABEL_KEY_MAX_BYTES"),
        ([Key("labels"), Key(_)], false) => (LABEL_VALUE_MAX_BYTES, "LABEL_VALUE_MAX_BYTES"),
        _ => (STRING_MAX_BYTES, "STRING_MAX_BYTES"),
    }
}

/// `workload.params.shape[2]`, each key shortened and escaped.
fn path_text(path: &[Step<'_>]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&shorten(k, SHORT_VALUE_CHARS));
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn walk<'a>(v: &'a Value, path: &mut Vec<Step<'a>>) -> Result<(), LimitViolation> {
    match v {
        Value::String(s) => {
            let (max, name) = limit_at(path, false);
            check_text(&path_text(path), s, max, name)
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Step::Index(i));
                walk(item, path)?;
                path.pop();
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, item) in map {
                let (max, name) = limit_at(path, true);
                path.push(Step::Key(k));
                check_text(&path_text(path), k, max, name).map_err(|mut e| {
                    e.reason = format!("key {}", e.reason);
                    e
                })?;
                walk(item, path)?;
                path.pop();
            }
            Ok(())
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}

/// Check every string of a record's JSON, object keys included, at any depth: no NUL
/// character, and at most the limit of its field (the constants above; [`STRING_MAX_BYTES`]
/// where no tighter one applies). Returns the first violation in key order.
///
/// ```
/// use tensorforge_record::limits::check_record_json;
/// let v = serde_json::json!({"run_id": "r", "labels": {"ok": "x", "bad\u{0}key": "y"}});
/// let e = check_record_json(&v).unwrap_err();
/// assert_eq!(e.field, "labels.bad\\0key");
/// assert!(e.reason.starts_with("key contains a NUL"), "{}", e.reason);
/// let long = serde_json::json!({"workload": {"name": "n".repeat(513)}});
/// let e = check_record_json(&long).unwrap_err();
/// assert_eq!(e.field, "workload.name");
/// assert!(e.reason.contains("513 bytes") && e.reason.contains("512"), "{}", e.reason);
/// ```
pub fn check_record_json(v: &Value) -> Result<(), LimitViolation> {
    walk(v, &mut Vec::new())
}
