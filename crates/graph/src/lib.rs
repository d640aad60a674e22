//! TensorForge graph compiler: a small tensor-graph IR with a JSON format, validation with
//! shape and dtype inference, numerics and pattern rewrites, fusion with a reason for every
//! decision, DRAM-traffic accounting with a roofline time per kernel, a static memory
//! planner, and a CPU executor (fused and unfused) whose byte counters match the analytical
//! traffic. ONNX import is separate (`onnx` module, added by its own issue).

#![warn(missing_docs)]

pub mod codegen;
pub mod error;
pub mod exec;
pub mod fusion;
mod gemm;
pub mod ir;
pub mod jit;
pub mod mlp;
pub mod onnx;
pub mod planner;
pub mod rewrite;
pub mod synth;
pub mod traffic;

pub use error::{GraphError, Result};
pub use ir::{
    broadcast_shapes, DType, Graph, Node, Op, OpClass, TensorInfo, TensorSpec, TypedGraph,
    SCHEMA_VERSION,
};

#[cfg(test)]
mod props;
