//! TensorForge Core: the analytical model. Op counts, compulsory bytes, arithmetic
//! intensity, roofline, PE-array mapping, SRAM fit, tile schedules and their DRAM traffic,
//! and bounded design-space exploration over user-supplied candidates.
//!
//! The Core is pure: it performs no file, network or process I/O and depends on no
//! measurement or storage crate (a test in `tests/dependency_arrow.rs` enforces both). Its
//! results are hypotheses labelled `evidence = "model"`, each listing what it omits.

#![warn(missing_docs)]

pub mod analysis;
pub mod conv;
pub mod digest;
pub mod dse;
pub mod dtype;
pub mod error;
pub mod gemm;
pub mod hardware;
pub mod json;
pub mod mapping;
pub mod presets;
pub mod rng;
pub mod roofline;
pub mod schedule;
pub mod transformer;
pub mod units;

pub use analysis::{analyze_gemm, GemmAnalysis, GemmOptions, Timing, LIMITATIONS, SCHEMA_VERSION};
pub use dtype::DType;
pub use error::{CoreError, Result};
pub use gemm::{Gemm, NamedGemm, OperandBytes};
pub use hardware::{HardwareSpec, MemoryLevel, PeArray};
pub use mapping::{map_gemm, Dataflow, PeMapping};
pub use roofline::{roofline, Bound, Roofline};
pub use schedule::{DramTraffic, LoopOrder, SramFit, Tile};
