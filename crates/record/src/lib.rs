//! The measurement record format, on its own: what was run (workload identity and its
//! fingerprint), where and with what (device, software and harness context), what happened
//! (samples, statistics, throughput, counted events), and records files (JSON lines, a JSON
//! array, or the object `bench --json` prints) read and written atomically. The store, the
//! measurement harness and the gate all build on this crate; it has no database, performs no
//! measurement and makes no decision. Its only workspace dependency is the Core (canonical
//! JSON, SHA-256, strict JSON).
//!
//! ```
//! use std::collections::BTreeMap;
//! use tensorforge_record::WorkloadIdentity;
//! let mut params = BTreeMap::new();
//! for (k, v) in [("m", 4096), ("n", 4096), ("k", 4096), ("batch", 1)] {
//!     params.insert(k.to_string(), serde_json::json!(v));
//! }
//! params.insert("layout".into(), serde_json::json!("row_major"));
//! params.insert("transpose_b".into(), serde_json::json!(false));
//! let w = WorkloadIdentity { kind: "gemm".into(), name: "any label".into(), params, dtype: "bf16".into() };
//! // The identity is sha256 of the canonical JSON of (kind, params, dtype), as Python's
//! // hashlib.sha256(json.dumps(..., sort_keys=True, separators=(",", ":"))) computes it.
//! assert_eq!(w.fingerprint(), "b79bc6965d8c8b1873ad5e4ce5f0d6ca84cef44f9fc1776fd951833c892e3135");
//! ```

pub mod error;
pub mod jsonl;
pub mod limits;
pub mod record;
pub mod stats;

pub use error::RecordError;
pub use jsonl::{
    parse_records_text, read_records_jsonl, records_jsonl_text, write_all_atomic, write_atomic,
    write_records_jsonl, StagedWrite,
};
pub use record::{
    CountedEvents, Counter, DeviceContext, GpuContext, HarnessSettings, InjectedWork,
    InjectionMode, Record, RecordParts, SoftwareContext, Throughput, WorkloadIdentity,
    RECORD_SCHEMA_VERSION, RECORD_SCHEMA_VERSION_MIN,
};
pub use stats::{percentile_sorted, LatencyStats};
