//! Measurement records with workload identity and device/software context, their
//! statistics, an embedded SQLite store, and ingestion of benchmark results measured
//! elsewhere. This crate holds *measurement* evidence only; it never computes a model
//! prediction and the Core never depends on it.

pub mod error;
pub mod ingest;
pub mod jsonl;
pub mod record;
pub mod stats;
pub mod store;
pub mod time;

pub use error::StoreError;
pub use ingest::{ingest_record, parse_series, IngestContext, IngestFormat, IngestedSeries};
pub use jsonl::{
    parse_records_text, read_records_jsonl, records_jsonl_text, write_all_atomic, write_atomic,
    write_records_jsonl, StagedWrite,
};
pub use record::{
    DeviceContext, GpuContext, HarnessSettings, Record, SoftwareContext, Throughput,
    WorkloadIdentity, RECORD_SCHEMA_VERSION, RECORD_SCHEMA_VERSION_MIN,
};
pub use stats::LatencyStats;
pub use store::{
    default_store_path, new_run_id, RunInfo, RunWorkload, Store, BUSY_TIMEOUT, STORE_SCHEMA_VERSION,
};
