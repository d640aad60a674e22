//! TensorForge graph compiler: a small tensor-graph IR with a JSON format, validation with
//! shape and dtype inference, numerics and pattern rewrites, fusion with a reason for every
//! decision, DRAM-traffic accounting with a roofline time per kernel, a static memory
//! planner, and a CPU executor (fused and unfused) whose byte counters match the analytical
//! traffic. ONNX import is separate (`onnx` module, added by its own issue).
//!
//! ```
//! use tensorforge_graph::{fusion::compile, traffic::fuse_report, Graph};
//! let g = Graph::from_json_str(r#"{"schema_version": 1, "name": "g", "nodes": [
//!     {"name": "x", "op": "Input", "attrs": {"shape": [1024], "dtype": "fp32"}},
//!     {"name": "e", "op": "Exp", "inputs": ["x"]},
//!     {"name": "r", "op": "ReLU", "inputs": ["e"]}]}"#).unwrap();
//! let c = compile(&g).unwrap();
//! let hw = tensorforge_core::presets::hardware("balanced").unwrap();
//! let r = fuse_report(&c, &hw).unwrap();
//! // Unfused: Exp reads x and writes e, ReLU reads e and writes r: 4 · 4 KiB.
//! // Fused into one kernel: read x, write r: 2 · 4 KiB.
//! assert_eq!((r.traffic.unfused_bytes, r.traffic.fused_bytes), (16384, 8192));
//! assert_eq!(r.kernels.len(), 1);
//! ```
#![warn(missing_docs)]

pub mod codegen;
pub mod error;
pub mod exec;
pub mod fusion;
mod gemm;
pub mod ir;
pub mod jit;
pub mod load;
pub mod mlp;
pub mod onnx;
pub mod optable;
pub mod planner;
pub mod rewrite;
pub mod session;
pub mod symdims;
pub mod synth;
pub mod traffic;

pub use error::{GraphError, Result};
pub use ir::{
    broadcast_shapes, DType, Graph, Node, Op, OpClass, PadMode, TensorInfo, TensorSpec, TypedGraph,
    SCHEMA_VERSION,
};

#[cfg(test)]
mod props;
