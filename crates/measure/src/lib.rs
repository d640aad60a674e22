//! TensorForge measurement: a CPU harness that times workloads (GEMM, batched GEMM, Conv2D
//! via im2col + GEMM, attention and transformer blocks from the Core's decomposition, each
//! kernel of the kernels crate) and produces versioned [`tensorforge_store::Record`]s;
//! calibration probes that measure this CPU's ceilings (memory bandwidth, FMA peak, GEMM
//! rate) into a device profile; and validation that predicts a holdout suite from that
//! profile with the pure roofline and compares the prediction with measurement.
//!
//! Measurements are evidence of the *measurement* kind; predictions come from the Core and
//! are reported beside them, never blended in. The Core does not depend on this crate.
//!
//! ```
//! use tensorforge_measure::workload::{parse_workload_name, WorkloadKind};
//! let w = parse_workload_name("gemm_tiny").unwrap();
//! assert!(matches!(w.kind, WorkloadKind::Gemm { m: 128, n: 128, k: 128, .. }));
//! // A, B and C in f32: 3 · 128 · 128 · 4 B = 196 608 B per instance.
//! assert_eq!(w.working_set_bytes(), 196_608);
//! ```

#![warn(missing_docs)]

pub mod alloc;
pub mod calibrate;
pub mod context;
pub mod counting;
pub mod error;
pub mod exec;
pub mod graph_run;
pub mod harness;
pub mod inject;
pub mod plots;
pub mod probes;
pub mod validate;
pub mod validation_table;
pub mod workload;

pub use calibrate::{calibrate, CalibrateOptions, Calibration, Provenance};
pub use error::{MeasureError, Result};
pub use harness::{run_suite, HarnessOptions};
pub use plots::{predicted_vs_measured_svg, roofline_svg};
pub use validate::{
    embedded_holdout_suite, measure_and_validate, validate, CeilingViolation, ValidationReport,
    ValidationRow,
};
pub use workload::{
    parse_workload, parse_workload_file, parse_workload_name, WorkloadKind, WorkloadSpec,
};
