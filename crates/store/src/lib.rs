//! Measurement records with workload identity and device/software context, their
//! statistics, an embedded SQLite store, and ingestion of benchmark results measured
//! elsewhere. This crate holds *measurement* evidence only; it never computes a model
//! prediction and the Core never depends on it.
//!
//! ```
//! use std::collections::BTreeMap;
//! use tensorforge_store::WorkloadIdentity;
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

pub mod credentials;
pub mod engine;
pub mod error;
pub mod ingest;
pub mod jsonl;
pub mod location;
pub mod postgres;
pub mod record;
pub mod sqlite;
pub mod stats;
pub mod store;
pub mod testing;
pub mod time;

pub use engine::{InsertOutcome, InsertStatus, StoreEngine, StoredProfile};
pub use error::StoreError;
pub use ingest::{ingest_record, parse_series, IngestContext, IngestFormat, IngestedSeries};
pub use jsonl::{
    parse_records_text, read_records_jsonl, records_jsonl_text, write_all_atomic, write_atomic,
    write_records_jsonl, StagedWrite,
};
pub use location::StoreLocation;
pub use record::{
    CountedEvents, Counter, DeviceContext, GpuContext, HarnessSettings, InjectedWork,
    InjectionMode, Record, RecordParts, SoftwareContext, Throughput, WorkloadIdentity,
    RECORD_SCHEMA_VERSION, RECORD_SCHEMA_VERSION_MIN,
};
pub use stats::LatencyStats;
pub use store::{
    default_store_path, new_run_id, RunInfo, RunWorkload, Store, SyncReport, BUSY_TIMEOUT,
    SYNC_SCHEMA_VERSION,
};
