//! Measurement records with workload identity and device/software context, their
//! statistics, an embedded SQLite store, and ingestion of benchmark results measured
//! elsewhere. This crate holds *measurement* evidence only; it never computes a model
//! prediction and the Core never depends on it.

pub mod error;
pub mod record;
pub mod stats;

pub use error::StoreError;
pub use record::{
    DeviceContext, GpuContext, HarnessSettings, Record, SoftwareContext, Throughput,
    WorkloadIdentity, RECORD_SCHEMA_VERSION,
};
pub use stats::LatencyStats;
