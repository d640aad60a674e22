//! Content hashes: SHA-256 as lowercase hex, and canonical JSON (keys sorted at every depth,
//! no whitespace, numbers in serde_json's shortest round-trip form), the one implementation
//! behind workload fingerprints, graph content hashes, machine ids and JIT cache keys. Not
//! a model of anything; no keyed or password hashing.

use sha2::{Digest, Sha256};

/// SHA-256 of the concatenation of `parts`, as 64 lowercase hex digits.
///
/// ```
/// use tensorforge_core::digest::sha256_hex;
/// // The standard test vector: SHA-256("abc").
/// assert_eq!(
///     sha256_hex(&[b"a", b"bc"]),
///     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
/// );
/// ```
pub fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Canonical JSON text of `v`: object keys sorted at every depth, no whitespace. serde_json's
/// maps are ordered by key (the workspace does not enable `preserve_order`), so this is its
/// compact form; the function exists so that every hash goes through one definition.
///
/// ```
/// let v = serde_json::json!({"b": [1, {"d": 2, "c": 1.5}], "a": "x"});
/// assert_eq!(
///     tensorforge_core::digest::canonical_json(&v),
///     r#"{"a":"x","b":[1,{"c":1.5,"d":2}]}"#
/// );
/// ```
pub fn canonical_json(v: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        x => out.push_str(&x.to_string()),
    }
}
