//! TensorForge on NVIDIA GPUs. Every CUDA library (the driver, NVRTC, cuBLAS, NVML) is
//! opened at first use, so the binary builds and runs on machines without them, and a
//! `--device cuda` there is a one-line error naming what is missing ([`device`]).
//!
//! - [`nvrtc`]: CUDA C++ to PTX at run time and the PTX's entry points (no GPU needed);
//! - [`kernels`]: the graph compiler's generated CUDA compiled and checked against its
//!   launch contract (no GPU needed);
//! - [`device`]: opening a GPU, its identity and state for records;
//! - [`mod@bench`]: workloads timed with CUDA events (cuBLAS GEMMs by dtype, generated
//!   kernels, copies) into records;
//! - [`calibrate`]: probes for the roofline's ceilings into a GPU profile.
//!
//! Measurements are evidence of the *measurement* kind; the Core does not depend on this
//! crate. Left out so far: running whole graphs on the GPU, GPU validation and the main job
//! on the GPU (docs/gpu.md lists what runs and what has not run on a GPU yet).
//!
//! ```
//! use tensorforge_cuda::device::DeviceSpec;
//! assert_eq!(DeviceSpec::parse("cuda:0").unwrap(), DeviceSpec::Cuda(0));
//! // Without a driver, opening it is an error, never a panic.
//! if !tensorforge_cuda::device::driver_available() {
//!     assert!(tensorforge_cuda::device::Gpu::open(0).is_err());
//! }
//! ```

#![warn(missing_docs)]

pub mod bench;
pub mod calibrate;
pub mod check;
pub mod device;
pub mod error;
pub mod exec;
pub mod kernels;
pub mod nvrtc;
pub mod validate;

pub use error::{CudaError, Result};
