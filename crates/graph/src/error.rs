//! The one error type of the graph crate. Every variant names what the user can fix: the
//! node, the tensor and the mismatch. Internal invariant breaks (a plan overlap) are errors
//! too, never panics.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Errors of graph parsing, validation, fusion, planning and execution.
#[derive(Debug, Clone, PartialEq, Error, Serialize, Deserialize)]
pub enum GraphError {
    /// The graph text is not valid JSON or does not match the format.
    #[error("malformed graph JSON: {0}")]
    Json(String),
    /// Two nodes, or two producers of one tensor, share a name.
    #[error("duplicate {kind} name `{name}`")]
    Duplicate {
        /// `node` or `tensor`.
        kind: String,
        /// The repeated name.
        name: String,
    },
    /// A node reads a tensor that no node produces.
    #[error("node `{node}`: input tensor `{tensor}` is not produced by any node (dangling input)")]
    Dangling {
        /// Reading node.
        node: String,
        /// Missing tensor.
        tensor: String,
    },
    /// The nodes do not form a DAG.
    #[error("cycle: node `{node}` depends on itself (nodes on or behind the cycle: {nodes})")]
    Cycle {
        /// One node on the cycle.
        node: String,
        /// Every node that could not be ordered.
        nodes: String,
    },
    /// Shape inference failed.
    #[error("node `{node}` ({op}): tensor `{tensor}`: {detail}")]
    Shape {
        /// Node name.
        node: String,
        /// Op name.
        op: String,
        /// Offending tensor.
        tensor: String,
        /// The mismatch.
        detail: String,
    },
    /// Dtype inference failed.
    #[error("node `{node}` ({op}): tensor `{tensor}` has dtype {got}, expected {expected}")]
    Dtype {
        /// Node name.
        node: String,
        /// Op name.
        op: String,
        /// Offending tensor.
        tensor: String,
        /// Required dtype.
        expected: String,
        /// Actual dtype.
        got: String,
    },
    /// A bad attribute or arity.
    #[error("node `{node}` ({op}): {detail}")]
    Invalid {
        /// Node name.
        node: String,
        /// Op name.
        op: String,
        /// What is wrong.
        detail: String,
    },
    /// A declared graph output that no node produces.
    #[error("graph output `{tensor}` is not produced by any node")]
    UnknownOutput {
        /// The tensor name.
        tensor: String,
    },
    /// The memory plan exceeds the capacity.
    #[error(
        "memory plan does not fit: planned peak {peak_bytes} bytes > capacity {capacity_bytes} bytes; \
         live bytes peak ({live_bytes} bytes) at step {step} (kernel `{kernel}`), live tensors: {live}"
    )]
    Capacity {
        /// The budget.
        capacity_bytes: u64,
        /// The planned arena size.
        peak_bytes: u64,
        /// Live bytes at the step of the peak.
        live_bytes: u64,
        /// Step index of the peak.
        step: usize,
        /// Kernel running at that step.
        kernel: String,
        /// `name (bytes)` of every tensor live there.
        live: String,
    },
    /// The planner produced overlapping live tensors (a bug; reported, never ignored).
    #[error("memory plan overlap: `{a}` and `{b}` are live together and overlap ({detail})")]
    Overlap {
        /// First tensor.
        a: String,
        /// Second tensor.
        b: String,
        /// Offsets and steps.
        detail: String,
    },
    /// An input array does not match the graph.
    #[error("input `{tensor}`: {detail}")]
    Input {
        /// Tensor name.
        tensor: String,
        /// The mismatch.
        detail: String,
    },
    /// A node the executor cannot run.
    #[error("node `{node}` ({op}): cannot execute: {detail}")]
    Exec {
        /// Node name.
        node: String,
        /// Op name.
        op: String,
        /// Why.
        detail: String,
    },
    /// An ONNX file that cannot be imported (malformed, truncated, refused or over a limit).
    #[error("ONNX `{file}`: {detail}")]
    Onnx {
        /// The file (or source name) being imported.
        file: String,
        /// What is wrong, naming the node, tensor or field.
        detail: String,
    },
    /// A graph file that cannot be read, or whose content is wrong as a whole.
    #[error("{file}: {detail}")]
    File {
        /// The path as given.
        file: String,
        /// What is wrong.
        detail: String,
    },
    /// Any other invalid argument.
    #[error("invalid argument: {0}")]
    Argument(String),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, GraphError>;
