//! TensorForge Core: the analytical model. Op counts, compulsory bytes, arithmetic
//! intensity, roofline, PE-array mapping, SRAM fit, tile schedules and their DRAM traffic,
//! and bounded design-space exploration over user-supplied candidates.
//!
//! The Core is pure: it performs no file, network or process I/O and depends on no
//! measurement or storage crate (a test in `tests/dependency_arrow.rs` enforces both). Its
//! results are hypotheses labelled `evidence = "model"`, each listing what it omits.
//!
//! ```
//! use tensorforge_core::analysis::{analyze_gemm, GemmOptions};
//! use tensorforge_core::{presets, DType, Gemm};
//! let hw = presets::hardware("balanced").unwrap();
//! let g = Gemm::new(1024, 1024, 1024, DType::Fp16).unwrap();
//! let a = analyze_gemm(&g, &hw, &GemmOptions::default()).unwrap();
//! // 2·M·N·K = 2·1024³ FLOPs; compulsory bytes = 2 B·(MK + KN + MN) = 2·3·1024² = 6 MiB.
//! assert_eq!(a.flops, 2 * 1024 * 1024 * 1024);
//! assert_eq!(a.compulsory_bytes, 6 * 1024 * 1024);
//! assert_eq!(a.evidence, "model");
//! ```
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
pub mod kernel;
pub mod levels;
pub mod mapping;
pub mod parallel;
pub mod presets;
pub mod rng;
pub mod roofline;
pub mod schedule;
pub mod serve;
pub mod text;
pub mod transformer;
pub mod units;

pub use analysis::{analyze_gemm, GemmAnalysis, GemmOptions, Timing, LIMITATIONS, SCHEMA_VERSION};
pub use dtype::DType;
pub use error::{CoreError, Result};
pub use gemm::{Gemm, GemmRole, NamedGemm, Operand, OperandBytes};
pub use hardware::{AccessEnergy, HardwareSpec, MemoryLevel, PeArray, PeEnergy};
pub use mapping::{map_gemm, Dataflow, PeMapping};
pub use roofline::{roofline, Bound, Roofline};
pub use schedule::{DramTraffic, LoopOrder, SramFit, Tile};
