//! The store of measurement records (one interface; an embedded SQLite engine and a shared
//! PostgreSQL engine), run selectors and histories over it, and ingestion of benchmark
//! results measured elsewhere. The record format itself (identity, fingerprint, statistics,
//! records files, atomic writes) lives in `tensorforge-record` and is re-exported here under
//! its old paths (`tensorforge_store::Record`, `tensorforge_store::record::...`,
//! `tensorforge_store::stats::...`, `tensorforge_store::jsonl::...`). This crate holds
//! *measurement* evidence only; it never computes a model prediction and the Core never
//! depends on it.
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
pub mod location;
pub mod notices;
pub mod postgres;
pub mod settings;
pub mod sqlite;
pub mod store;
pub mod testing;
pub mod time;
pub mod tls;

pub use engine::{
    check_profile, check_run, InsertOutcome, InsertStatus, StoreEngine, StoredProfile,
};
pub use error::StoreError;
pub use ingest::{ingest_record, parse_series, IngestContext, IngestFormat, IngestedSeries};
pub use location::StoreLocation;
pub use store::{
    default_store_path, new_run_id, RefusedProfile, RefusedRun, RunInfo, RunWorkload, Store,
    SyncReport, BUSY_TIMEOUT, SYNC_SCHEMA_VERSION,
};
/// The record format's modules, at the paths they had when they lived in this crate.
pub use tensorforge_record::{jsonl, limits, record, stats};
pub use tensorforge_record::{
    parse_records_text, read_records_jsonl, records_jsonl_text, write_all_atomic, write_atomic,
    write_records_jsonl, StagedWrite,
};
pub use tensorforge_record::{
    CountedEvents, Counter, DeviceContext, GpuContext, HarnessSettings, InjectedWork,
    InjectionMode, LatencyStats, Record, RecordError, RecordParts, SoftwareContext, Throughput,
    WorkloadIdentity, RECORD_SCHEMA_VERSION, RECORD_SCHEMA_VERSION_MIN,
};
