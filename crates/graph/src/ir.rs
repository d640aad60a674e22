//! The graph IR: tensors (name, shape, dtype) and single-assignment nodes (op, inputs,
//! outputs, attributes), its JSON form, and validation with shape and dtype inference.
//! Broadcasting follows NumPy: shapes align at the trailing axis, and two dims are
//! compatible when equal or when one is 1. Validation rejects cycles, dangling inputs and
//! duplicate names. Not modelled: dynamic shapes, strides (views are aliases), control flow,
//! integer arithmetic semantics (the executor computes in f32 whatever the declared dtype).

use crate::error::{GraphError, Result};
pub use crate::optable::{BinaryFn, UnaryFn};
use serde::{Deserialize, Serialize};

pub use tensorforge_core::DType;

/// Version of every JSON object this crate writes (and of the graph format).
pub const SCHEMA_VERSION: u32 = 1;

fn yes() -> bool {
    true
}
fn minus_one() -> i64 {
    -1
}
fn eps_rms() -> f64 {
    1e-6
}
fn eps_ln() -> f64 {
    1e-5
}
fn fp32() -> DType {
    DType::Fp32
}

/// Shape and dtype of one tensor, used by [`Op::Opaque`] to declare its outputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorSpec {
    /// Dimensions, outermost first (empty for a scalar).
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
}

/// How [`Op::Pad`] fills the cells it adds (ONNX `Pad` modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PadMode {
    /// A constant value.
    Constant,
    /// The mirror image, the edge element not repeated.
    Reflect,
    /// The edge element repeated.
    Edge,
    /// The values from the other end of the axis (circular).
    Wrap,
}

/// The cell of an [`Op::Recurrence`] (ONNX `LSTM` and `GRU`, default activations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecurrentCell {
    /// LSTM, gates `i, o, f, c` (ONNX order): `c = σ(f) ⊙ c + σ(i) ⊙ tanh(c̃)`,
    /// `h = σ(o) ⊙ tanh(c)`; no peepholes.
    Lstm,
    /// GRU, gates `z, r, h`: `h̃ = tanh(x_h + (σ(r) ⊙ h)·R_hᵀ + Rb_h)`,
    /// `h = (1 − σ(z)) ⊙ h̃ + σ(z) ⊙ h`.
    Gru,
    /// GRU with `linear_before_reset`: `h̃ = tanh(x_h + σ(r) ⊙ (h·R_hᵀ + Rb_h))`.
    GruLinearBeforeReset,
}

impl RecurrentCell {
    /// Gates per step: 4 (LSTM) or 3 (GRU).
    pub fn gates(self) -> usize {
        match self {
            RecurrentCell::Lstm => 4,
            RecurrentCell::Gru | RecurrentCell::GruLinearBeforeReset => 3,
        }
    }

    /// States carried from step to step: 2 (LSTM's `h` and `c`) or 1.
    pub fn states(self) -> usize {
        match self {
            RecurrentCell::Lstm => 2,
            _ => 1,
        }
    }
}

/// Which ways an [`Op::Recurrence`] runs over the sequence (ONNX `direction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecurrentDirection {
    /// From the first step to the last.
    Forward,
    /// From the last step to the first.
    Reverse,
    /// Both, as two independent directions (forward first).
    Bidirectional,
}

impl RecurrentDirection {
    /// The directions, in output order: `true` for reverse.
    pub fn reversed(self) -> &'static [bool] {
        match self {
            RecurrentDirection::Forward => &[false],
            RecurrentDirection::Reverse => &[true],
            RecurrentDirection::Bidirectional => &[false, true],
        }
    }
}

/// An operation with its attributes. JSON: `"op": "Name"` and, when the op has any,
/// `"attrs": {...}` beside it in the node object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", content = "attrs")]
pub enum Op {
    /// A graph input (activation), supplied at run time.
    Input {
        /// Shape.
        shape: Vec<usize>,
        /// Dtype.
        dtype: DType,
    },
    /// A parameter tensor resident in device memory (not planned by the arena planner).
    Weight {
        /// Shape.
        shape: Vec<usize>,
        /// Dtype.
        dtype: DType,
    },
    /// A tensor filled with one value (a parameter, like a weight).
    Constant {
        /// Shape (often `[]` or `[1]`).
        shape: Vec<usize>,
        /// Dtype.
        dtype: DType,
        /// Fill value.
        value: f64,
    },
    /// `[.., M, K] × [K, N]` or batched `[B.., M, K] × [B.., K, N]` (equal batch dims).
    MatMul,
    /// x^exponent with a constant exponent.
    Pow {
        /// The exponent.
        exponent: f64,
    },
    /// Sum over one axis.
    ReduceSum {
        /// Axis (negative counts from the end).
        axis: i64,
        /// Keep the reduced axis as size 1 (default true, as ONNX).
        #[serde(default = "yes")]
        keepdims: bool,
    },
    /// Maximum over one axis.
    ReduceMax {
        /// Axis (negative counts from the end).
        axis: i64,
        /// Keep the reduced axis as size 1.
        #[serde(default = "yes")]
        keepdims: bool,
    },
    /// Mean over one axis.
    ReduceMean {
        /// Axis (negative counts from the end).
        axis: i64,
        /// Keep the reduced axis as size 1.
        #[serde(default = "yes")]
        keepdims: bool,
    },
    /// Overflow-safe softmax over the last axis.
    Softmax {
        /// Must be the last axis (−1 or rank−1).
        #[serde(default = "minus_one")]
        axis: i64,
    },
    /// Overflow-safe log-softmax over the last axis.
    LogSoftmax {
        /// Must be the last axis.
        #[serde(default = "minus_one")]
        axis: i64,
    },
    /// Overflow-safe ln Σ eˣ over the last axis.
    LogSumExp {
        /// Must be the last axis.
        #[serde(default = "minus_one")]
        axis: i64,
        /// Keep the reduced axis as size 1.
        #[serde(default = "yes")]
        keepdims: bool,
    },
    /// x / √(mean(x²) + eps) ⊙ γ over the last axis; inputs `[x, gamma]`.
    #[serde(rename = "RMSNorm")]
    RmsNorm {
        /// Epsilon (default 1e-6).
        #[serde(default = "eps_rms")]
        eps: f64,
    },
    /// (x − mean)/√(var + eps) ⊙ γ + β over the last axis; inputs `[x, gamma, beta]`.
    LayerNorm {
        /// Epsilon (default 1e-5).
        #[serde(default = "eps_ln")]
        eps: f64,
    },
    /// A view with a new shape of equal element count (one dim may be −1).
    Reshape {
        /// Target shape.
        shape: Vec<i64>,
    },
    /// A view with permuted axes.
    Transpose {
        /// Permutation of the axes.
        perm: Vec<usize>,
    },
    /// Materialize a NumPy broadcast to `shape`.
    Broadcast {
        /// Target shape.
        shape: Vec<usize>,
    },
    /// Concatenate along one axis.
    Concat {
        /// Axis (negative counts from the end).
        axis: i64,
    },
    /// ONNX `Slice`: along each of `axes`, elements `starts[i], starts[i] + steps[i], …`
    /// up to (not including) `ends[i]`; negative indices count from the end and starts/ends
    /// are clamped to the axis (so `ends = i64::MAX` means "to the end").
    Slice {
        /// First index per sliced axis.
        starts: Vec<i64>,
        /// One past the last index per sliced axis.
        ends: Vec<i64>,
        /// The sliced axes (negative counts from the end).
        axes: Vec<i64>,
        /// Step per sliced axis (non-zero).
        steps: Vec<i64>,
    },
    /// `cond ? x : y` elementwise, with NumPy broadcasting of all three inputs; `cond` is
    /// true where it is non-zero (ONNX `Where`; a boolean condition arrives as 0/1).
    Where,
    /// ONNX `Gather` (an embedding lookup when `axis = 0`): inputs `[data, indices]`,
    /// `out[a…, j…, b…] = data[a…, indices[j…], b…]` with `a…` the axes before `axis` and
    /// `b…` those after; output shape `data[..axis] ++ indices ++ data[axis+1..]`. A negative
    /// index counts from the end; one outside `[−len, len)` is an execution error.
    Gather {
        /// The gathered axis of `data` (negative counts from the end).
        #[serde(default)]
        axis: i64,
    },
    /// ONNX `GatherElements`: inputs `[data, indices]` of the same rank,
    /// `out[i₀, …, iₐ, …] = data[i₀, …, indices[i₀, …, iₐ, …], …]` (the index replaces the
    /// coordinate on `axis` only); output shape that of `indices`, whose extent on every
    /// other axis must not exceed data's. A negative index counts from the end; one outside
    /// `[−len, len)` is an execution error.
    GatherElements {
        /// The indexed axis of `data` (negative counts from the end).
        #[serde(default)]
        axis: i64,
    },
    /// 2-D convolution, NCHW: x `[N, C, H, W]`, w `[K, C/group, R, S]`, optional bias `[K]`
    /// → `[N, K, P, Q]`, `P = (H + pad_top + pad_bottom − dil_h·(R − 1) − 1) / stride_h + 1`
    /// (cross-correlation, as ONNX `Conv`).
    Conv2d {
        /// `[stride_h, stride_w]`.
        strides: Vec<usize>,
        /// `[top, left, bottom, right]`.
        pads: Vec<usize>,
        /// `[dil_h, dil_w]`.
        dilations: Vec<usize>,
        /// Groups (C and K divisible by it).
        group: usize,
    },
    /// 2-D max pooling, NCHW; padded positions never win (ONNX `MaxPool`).
    MaxPool2d {
        /// `[R, S]`.
        kernel: Vec<usize>,
        /// `[stride_h, stride_w]`.
        strides: Vec<usize>,
        /// `[top, left, bottom, right]`.
        pads: Vec<usize>,
    },
    /// 2-D average pooling, NCHW (ONNX `AveragePool`): the mean over the window's input
    /// positions, or over the whole window with padding counted as zeros when
    /// `count_include_pad`.
    AvgPool2d {
        /// `[R, S]`.
        kernel: Vec<usize>,
        /// `[stride_h, stride_w]`.
        strides: Vec<usize>,
        /// `[top, left, bottom, right]`.
        pads: Vec<usize>,
        /// Divide by R·S (padding counted) instead of the window's input positions.
        count_include_pad: bool,
    },
    /// Change the dtype (values kept in f32 by the executor).
    Cast {
        /// Target dtype.
        to: DType,
    },
    /// Saturating affine quantization to int8: clamp(round(x/scale) + zero_point, −128, 127).
    Quantize {
        /// Scale (> 0).
        scale: f64,
        /// Zero point in [−128, 127].
        zero_point: i64,
    },
    /// (q − zero_point) · scale.
    Dequantize {
        /// Scale (> 0).
        scale: f64,
        /// Zero point.
        zero_point: i64,
        /// Output dtype (default fp32).
        #[serde(default = "fp32")]
        to: DType,
    },
    /// The Kernels crate's fused RMSNorm + SwiGLU: inputs `[x, gamma, w_gate, w_up]`,
    /// SiLU(RMSNorm(x)·W_gate) ⊙ (RMSNorm(x)·W_up). Produced by the pattern rewrite.
    #[serde(rename = "RMSNormSwiGLU")]
    RmsNormSwiGlu {
        /// RMSNorm epsilon.
        #[serde(default = "eps_rms")]
        eps: f64,
    },
    /// Scaled dot-product attention in one kernel: inputs `[q, kt, v]` or `[q, kt, v, mask]`,
    /// `softmax(scale · q·kt + mask) · v` over the last axis, with `q` `[..., Sq, D]`, `kt`
    /// `[..., D, Sk]` (the right operand of the scores' MatMul, as that MatMul reads it), `v`
    /// `[..., Sk, Dv]` (equal leading dims) and `mask` broadcastable to `[..., Sq, Sk]`; the
    /// output is `[..., Sq, Dv]`. The executor streams keys in blocks with a running max and
    /// sum (the online softmax), so the `Sq × Sk` scores are never stored. A row whose scores
    /// are all −∞ gives NaN, as the softmax does, or 0 with `zero_masked_rows` (PyTorch's
    /// NaN guard, `Where(IsNaN(p), 0, p)`). Produced by the `attention` pattern rewrite.
    #[serde(rename = "FusedAttention")]
    FusedAttention {
        /// The factor the scores are multiplied by (1 when the graph had none).
        scale: f64,
        /// A fully masked row gives 0 instead of NaN.
        #[serde(default)]
        zero_masked_rows: bool,
    },
    /// Running sum along `axis` (ONNX `CumSum`): `out[.., i, ..] = Σ x[.., j, ..]` over
    /// `j ≤ i` (`j < i` when `exclusive`; from the end when `reverse`). Shape and dtype of
    /// the input.
    CumSum {
        /// Axis (negative counts from the end).
        axis: i64,
        /// Leave out the element itself.
        #[serde(default)]
        exclusive: bool,
        /// Sum from the end of the axis.
        #[serde(default)]
        reverse: bool,
    },
    /// ONNX `Pad`: `pads` holds every axis's count before, then every axis's count after
    /// (negative ones crop, before any padding); `out_dim = in_dim + before + after`. `mode` fills the new cells
    /// with `value` (`constant`), the mirror image without the edge (`reflect`), the edge
    /// value (`edge`) or the values from the other end (`wrap`).
    Pad {
        /// `[before_0, …, before_{r-1}, after_0, …, after_{r-1}]`.
        pads: Vec<i64>,
        /// How new cells are filled.
        mode: PadMode,
        /// The fill value of `constant` mode.
        #[serde(default)]
        value: f64,
    },
    /// A recurrent layer over a whole sequence (ONNX `LSTM` / `GRU` after their input
    /// projection, which stays a MatMul of the graph). Inputs `[xw, rt, h0, extra]`: `xw`
    /// `[S, B, D·G·H]` is every step's input projection with the biases added (direction `d`'s
    /// `G` gates in columns `d·G·H ..`; GRU's `h` gate without its recurrent bias), `rt`
    /// `[D, H, G·H]` the recurrent weights transposed, `h0` `[D, B, H]` the initial hidden
    /// state and `extra` `[D, B, H]` LSTM's initial cell state or `[D, H]` GRU's recurrent
    /// bias of the `h` gate. Each step of direction `d` computes `g = xw[t] + h·rt[d]` and the
    /// cell ([`RecurrentCell`]); the output `[S + F, D, B, H]` holds the hidden state after
    /// every step `t` at row `t` (in sequence order, whichever way the direction runs), then,
    /// with `finals`, the last hidden state (`F = 1`) and LSTM's last cell state (`F = 2`).
    Recurrence {
        /// The cell.
        cell: RecurrentCell,
        /// Forward, reverse or both.
        direction: RecurrentDirection,
        /// Append the last hidden (and cell) state after the `S` steps.
        #[serde(default)]
        finals: bool,
    },
    /// A one-input function of the op table ([`crate::optable`]): its dtype rule, scalar
    /// reference and code-generator expressions are defined there.
    Unary {
        /// The function.
        f: UnaryFn,
    },
    /// A two-input function of the op table, with NumPy broadcasting.
    Binary {
        /// The function.
        f: BinaryFn,
    },
    /// An op this crate does not model (for importers): never fused, never executed.
    Opaque {
        /// The foreign op name.
        name: String,
        /// Shape and dtype of each output, in order.
        output_specs: Vec<TensorSpec>,
    },
}

/// How the fuser treats an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpClass {
    /// Input, Weight, Constant: data already in memory, no kernel.
    Source,
    /// One output element from the same-index input elements.
    Elementwise,
    /// Elementwise with a NumPy broadcast of an input, or an explicit Broadcast.
    Broadcast,
    /// Reshape / Transpose: an alias, no data moves.
    View,
    /// Reduces (or normalizes) along an axis.
    Reduction,
    /// Matrix product.
    Matmul,
    /// Anything else: its own kernel.
    Opaque,
}

impl Op {
    /// The op's name as written in JSON (for a function of the op table, the function's
    /// name: `"op": "Exp"`).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "Input",
            Op::Weight { .. } => "Weight",
            Op::Constant { .. } => "Constant",
            Op::MatMul => "MatMul",
            Op::Unary { f: UnaryFn::Log1p } => "Log1p",
            Op::Pow { .. } => "Pow",
            Op::ReduceSum { .. } => "ReduceSum",
            Op::ReduceMax { .. } => "ReduceMax",
            Op::ReduceMean { .. } => "ReduceMean",
            Op::Softmax { .. } => "Softmax",
            Op::LogSoftmax { .. } => "LogSoftmax",
            Op::LogSumExp { .. } => "LogSumExp",
            Op::RmsNorm { .. } => "RMSNorm",
            Op::LayerNorm { .. } => "LayerNorm",
            Op::Reshape { .. } => "Reshape",
            Op::Transpose { .. } => "Transpose",
            Op::Broadcast { .. } => "Broadcast",
            Op::Concat { .. } => "Concat",
            Op::Slice { .. } => "Slice",
            Op::Where => "Where",
            Op::Gather { .. } => "Gather",
            Op::GatherElements { .. } => "GatherElements",
            Op::Conv2d { .. } => "Conv2d",
            Op::MaxPool2d { .. } => "MaxPool2d",
            Op::AvgPool2d { .. } => "AvgPool2d",
            Op::Cast { .. } => "Cast",
            Op::Quantize { .. } => "Quantize",
            Op::Dequantize { .. } => "Dequantize",
            Op::RmsNormSwiGlu { .. } => "RMSNormSwiGLU",
            Op::FusedAttention { .. } => "FusedAttention",
            Op::CumSum { .. } => "CumSum",
            Op::Pad { .. } => "Pad",
            Op::Recurrence { .. } => "Recurrence",
            Op::Unary { f } => f.name(),
            Op::Binary { f } => f.name(),
            Op::Opaque { .. } => "Opaque",
        }
    }

    /// True for the two-input elementwise ops.
    pub fn is_binary(&self) -> bool {
        matches!(self, Op::Binary { .. })
    }

    /// True for the one-input elementwise ops.
    pub fn is_unary(&self) -> bool {
        matches!(
            self,
            Op::Pow { .. }
                | Op::Cast { .. }
                | Op::Quantize { .. }
                | Op::Dequantize { .. }
                | Op::Unary { .. }
        )
    }

    /// Class without shapes; [`TypedGraph::class`] refines elementwise into broadcast.
    pub fn base_class(&self) -> OpClass {
        match self {
            Op::Input { .. } | Op::Weight { .. } | Op::Constant { .. } => OpClass::Source,
            Op::MatMul => OpClass::Matmul,
            Op::Reshape { .. } | Op::Transpose { .. } => OpClass::View,
            Op::Broadcast { .. } => OpClass::Broadcast,
            Op::ReduceSum { .. }
            | Op::ReduceMax { .. }
            | Op::ReduceMean { .. }
            | Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::LogSumExp { .. }
            | Op::RmsNorm { .. }
            | Op::LayerNorm { .. } => OpClass::Reduction,
            Op::Concat { .. }
            | Op::Slice { .. }
            | Op::Where
            | Op::Gather { .. }
            | Op::GatherElements { .. }
            | Op::Conv2d { .. }
            | Op::MaxPool2d { .. }
            | Op::AvgPool2d { .. }
            | Op::RmsNormSwiGlu { .. }
            | Op::FusedAttention { .. }
            | Op::CumSum { .. }
            | Op::Pad { .. }
            | Op::Recurrence { .. }
            | Op::Opaque { .. } => OpClass::Opaque,
            _ => OpClass::Elementwise,
        }
    }
}

/// One node: an op reading named tensors and producing named tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Unique node name.
    pub name: String,
    /// The op and its attributes (flattened: `"op"` and `"attrs"` keys; a function of the
    /// op table is written by its name alone, `"op": "Exp"`).
    #[serde(flatten, with = "op_json")]
    pub op: Op,
    /// Input tensor names, in the op's order.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// Output tensor names; when empty the single output is named after the node.
    #[serde(default)]
    pub outputs: Vec<String>,
}

impl Node {
    /// A node with explicit inputs and one output named after the node.
    pub fn new(name: impl Into<String>, op: Op, inputs: &[&str]) -> Self {
        Node {
            name: name.into(),
            op,
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![],
        }
    }

    /// Output names, with the default (the node name) applied.
    pub fn output_names(&self) -> Vec<String> {
        self.output_names_ref().to_vec()
    }

    /// [`Node::output_names`] without copying: the node's name alone when `outputs` is empty.
    pub fn output_names_ref(&self) -> &[String] {
        if self.outputs.is_empty() {
            std::slice::from_ref(&self.name)
        } else {
            &self.outputs
        }
    }
}

/// A graph as written in JSON: nodes in any order and the graph outputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Graph {
    /// Format version (1).
    #[serde(default = "schema_v")]
    pub schema_version: u32,
    /// Graph name.
    #[serde(default)]
    pub name: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The nodes.
    pub nodes: Vec<Node>,
    /// Graph outputs; when empty, every tensor no node reads.
    #[serde(default)]
    pub outputs: Vec<String>,
}

fn schema_v() -> u32 {
    SCHEMA_VERSION
}

/// Shape and dtype of a validated tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorInfo {
    /// Tensor name.
    pub name: String,
    /// Inferred shape.
    pub shape: Vec<usize>,
    /// Inferred dtype.
    pub dtype: DType,
    /// Element count.
    pub numel: u64,
    /// Storage bytes (`ceil(numel · bits / 8)`).
    pub bytes: u64,
}

/// A validated graph: nodes in topological order, tensors by id, producer and consumers.
#[derive(Debug, Clone)]
pub struct TypedGraph {
    /// Graph name.
    pub name: String,
    /// Nodes in a topological order.
    pub nodes: Vec<Node>,
    /// Every tensor, by id.
    pub tensors: Vec<TensorInfo>,
    /// Input tensor ids of each node.
    pub node_inputs: Vec<Vec<usize>>,
    /// Output tensor ids of each node.
    pub node_outputs: Vec<Vec<usize>>,
    /// Producing node of each tensor.
    pub producer: Vec<usize>,
    /// Consuming nodes of each tensor (a node reading it twice is listed once).
    pub consumers: Vec<Vec<usize>>,
    /// Graph output tensor ids.
    pub outputs: Vec<usize>,
    index: rustc_hash::FxHashMap<String, usize>,
    out_flag: Vec<bool>,
}

impl Graph {
    /// Parse the JSON form.
    /// `attrs` may be omitted for ops whose attributes all have defaults (Softmax,
    /// LogSoftmax, LogSumExp, RMSNorm, LayerNorm, RMSNormSwiGLU).
    pub fn from_json_str(text: &str) -> Result<Graph> {
        let mut v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| GraphError::Json(e.to_string()))?;
        tensorforge_core::json::reject_duplicate_keys(text).map_err(GraphError::Json)?;
        default_attrs(&mut v);
        let g: Graph = match serde_json::from_value(v) {
            Ok(g) => g,
            Err(e) => {
                // Name the first node that does not parse, when one is to blame (parsed
                // again: the error path may be slow, the common path does not copy).
                let mut v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
                default_attrs(&mut v);
                let nodes = v
                    .get("nodes")
                    .and_then(|n| n.as_array())
                    .cloned()
                    .unwrap_or_default();
                for (i, n) in nodes.iter().enumerate() {
                    if let Err(ne) = serde_json::from_value::<Node>(n.clone()) {
                        let name = n.get("name").and_then(|x| x.as_str()).unwrap_or("?");
                        return Err(GraphError::Json(format!("node #{i} `{name}`: {ne}")));
                    }
                }
                return Err(GraphError::Json(e.to_string()));
            }
        };
        if g.schema_version != SCHEMA_VERSION {
            return Err(GraphError::Json(format!(
                "schema_version {} is not supported (expected {SCHEMA_VERSION})",
                g.schema_version
            )));
        }
        Ok(g)
    }

    /// Pretty JSON.
    pub fn to_json_string(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// A graph from nodes (outputs inferred).
    pub fn new(name: impl Into<String>, nodes: Vec<Node>) -> Graph {
        Graph {
            schema_version: SCHEMA_VERSION,
            name: name.into(),
            description: String::new(),
            nodes,
            outputs: vec![],
        }
    }

    /// Validate: unique names, no dangling inputs, no cycles, shapes and dtypes inferred.
    pub fn validate(&self) -> Result<TypedGraph> {
        validate(self)
    }

    /// [`Graph::validate`], consuming the graph: its nodes move into the typed graph instead
    /// of being copied.
    pub fn into_typed(self) -> Result<TypedGraph> {
        validate_owned(self)
    }
}

/// Output shape `[N, K, P, Q]` of a 2-D convolution (see [`Op::Conv2d`]); errors name what
/// is inconsistent. Checked arithmetic throughout.
pub fn conv_out(
    x: &[usize],
    w: &[usize],
    strides: &[usize],
    pads: &[usize],
    dilations: &[usize],
    group: usize,
) -> std::result::Result<Vec<usize>, String> {
    if x.len() != 4 || w.len() != 4 {
        return Err(format!(
            "expects x [N, C, H, W] and w [K, C/group, R, S], got {x:?} and {w:?}"
        ));
    }
    if strides.len() != 2 || dilations.len() != 2 || pads.len() != 4 {
        return Err("strides and dilations need 2 values, pads 4".into());
    }
    if strides.contains(&0) || dilations.contains(&0) || group == 0 {
        return Err("strides, dilations and group must be positive".into());
    }
    if !x[1].is_multiple_of(group) || !w[0].is_multiple_of(group) || w[1] != x[1] / group {
        return Err(format!(
            "channels: x has {} (group {group}), w {:?} needs C/group = {}",
            x[1],
            w,
            x[1] / group
        ));
    }
    let mut out = vec![x[0], w[0], 0, 0];
    for d in 0..2 {
        let span = dilations[d]
            .checked_mul(w[2 + d].saturating_sub(1))
            .and_then(|v| v.checked_add(1))
            .ok_or("kernel span overflows")?;
        let padded = x[2 + d]
            .checked_add(pads[d])
            .and_then(|v| v.checked_add(pads[d + 2]))
            .ok_or("padded size overflows")?;
        if w[2 + d] == 0 || padded < span {
            return Err(format!(
                "the kernel ({} with dilation {}) does not fit the padded input {padded}",
                w[2 + d],
                dilations[d]
            ));
        }
        out[2 + d] = (padded - span) / strides[d] + 1;
    }
    Ok(out)
}

/// Per axis of a [`Op::Slice`] input: `(start, step, output length)` after ONNX's
/// normalization (negative indices add the dim; starts and ends clamped to the axis).
/// Unsliced axes are `(0, 1, dim)`. Errors name the bad field.
pub fn slice_plan(
    shape: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: &[i64],
    steps: &[i64],
) -> std::result::Result<Vec<(i64, i64, usize)>, String> {
    let k = starts.len();
    if ends.len() != k || axes.len() != k || steps.len() != k {
        return Err(format!(
            "starts, ends, axes and steps must have one entry per sliced axis ({k}, {}, {}, {})",
            ends.len(),
            axes.len(),
            steps.len()
        ));
    }
    let mut plan: Vec<(i64, i64, usize)> = shape.iter().map(|d| (0, 1, *d)).collect();
    let mut seen = vec![false; shape.len()];
    for i in 0..k {
        let a = norm_axis(axes[i], shape.len())
            .ok_or_else(|| format!("axis {} is out of range for rank {}", axes[i], shape.len()))?;
        if std::mem::replace(&mut seen[a], true) {
            return Err(format!("axis {} is sliced twice", axes[i]));
        }
        let step = steps[i];
        if step == 0 {
            return Err(format!("step of axis {} is 0", axes[i]));
        }
        let dim = i64::try_from(shape[a]).map_err(|_| "dim too large".to_string())?;
        let fix = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
        let (s, e) = (fix(starts[i]), fix(ends[i]));
        let (s, e) = if step > 0 {
            (s.clamp(0, dim), e.clamp(0, dim))
        } else {
            (s.clamp(-1, dim - 1), e.clamp(-1, dim - 1))
        };
        let len = if step > 0 {
            if e > s {
                (e - s + step - 1) / step
            } else {
                0
            }
        } else if s > e {
            (s - e + (-step) - 1) / (-step)
        } else {
            0
        };
        plan[a] = (s, step, len as usize);
    }
    Ok(plan)
}

/// Normalize a possibly negative axis for a tensor of `rank`.
pub fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        None
    } else {
        Some(a as usize)
    }
}

/// NumPy broadcast of two shapes, or `None` when incompatible.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i < n - a.len() {
            1
        } else {
            a[i - (n - a.len())]
        };
        let db = if i < n - b.len() {
            1
        } else {
            b[i - (n - b.len())]
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

/// Element count, checked.
pub fn numel(shape: &[usize]) -> Option<u64> {
    shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
}

fn validate(g: &Graph) -> Result<TypedGraph> {
    let order = topological_order(g)?;
    typed(g.name.clone(), &g.outputs, &order, |i| g.nodes[i].clone())
}

/// [`validate`] of a graph the caller no longer needs: nodes move into the typed graph
/// instead of being copied (a million-node graph spends a second on the copies and the
/// frees of the originals).
fn validate_owned(g: Graph) -> Result<TypedGraph> {
    let order = topological_order(&g)?;
    let Graph {
        name,
        nodes,
        outputs,
        ..
    } = g;
    let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
    typed(name, &outputs, &order, |i| {
        slots[i]
            .take()
            .expect("a topological order lists each node once")
    })
}

/// Names unique, inputs produced, no cycle: the nodes' indices in a stable topological order.
fn topological_order(g: &Graph) -> Result<Vec<usize>> {
    if !g.nodes.iter().any(|n| {
        !matches!(
            n.op,
            Op::Input { .. } | Op::Weight { .. } | Op::Constant { .. }
        )
    }) {
        return Err(GraphError::Json(
            "`nodes` holds no operation (only inputs, weights and constants, or nothing): there is nothing to fuse, plan or run".into(),
        ));
    }
    // Names.
    // Maps borrow the names from `g` (no copy per tensor): validation is near-linear and
    // allocation-light, so a 1 M-node graph validates in about a second.
    let mut node_names: rustc_hash::FxHashMap<&str, usize> =
        rustc_hash::FxHashMap::with_capacity_and_hasher(g.nodes.len(), Default::default());
    let mut producer_of: rustc_hash::FxHashMap<&str, usize> =
        rustc_hash::FxHashMap::with_capacity_and_hasher(g.nodes.len(), Default::default());
    for (i, n) in g.nodes.iter().enumerate() {
        if n.name.is_empty() {
            return Err(GraphError::Invalid {
                node: format!("#{i}"),
                op: n.op.name().into(),
                detail: "node name must not be empty".into(),
            });
        }
        if node_names.insert(&n.name, i).is_some() {
            return Err(GraphError::Duplicate {
                kind: "node".into(),
                name: n.name.clone(),
            });
        }
        for o in n.output_names_ref() {
            if producer_of.insert(o, i).is_some() {
                return Err(GraphError::Duplicate {
                    kind: "tensor".into(),
                    name: o.clone(),
                });
            }
        }
    }
    for n in &g.nodes {
        for t in &n.inputs {
            if !producer_of.contains_key(t.as_str()) {
                return Err(GraphError::Dangling {
                    node: n.name.clone(),
                    tensor: t.clone(),
                });
            }
        }
    }
    // Kahn's topological order (stable: original order among ready nodes).
    // Successors in compressed rows (one allocation, not one per node): `succ[start[p]..
    // start[p + 1]]` are the readers of node p's outputs, one entry per input edge.
    let nn = g.nodes.len();
    let mut indeg = vec![0usize; nn];
    let mut start = vec![0usize; nn + 1];
    for n in &g.nodes {
        for t in &n.inputs {
            start[producer_of[t.as_str()] + 1] += 1;
        }
    }
    for p in 0..nn {
        start[p + 1] += start[p];
    }
    let mut fill = start.clone();
    let mut succ = vec![0usize; start[nn]];
    for (i, n) in g.nodes.iter().enumerate() {
        for t in &n.inputs {
            let p = producer_of[t.as_str()];
            succ[fill[p]] = i;
            fill[p] += 1;
            indeg[i] += 1;
        }
    }
    drop(fill);
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = (0..nn)
        .filter(|&i| indeg[i] == 0)
        .map(std::cmp::Reverse)
        .collect();
    let mut order = Vec::with_capacity(nn);
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        order.push(i);
        for &s in &succ[start[i]..start[i + 1]] {
            indeg[s] -= 1;
            if indeg[s] == 0 {
                ready.push(std::cmp::Reverse(s));
            }
        }
    }
    drop((succ, start, producer_of, node_names));
    if order.len() < nn {
        let left: Vec<&str> = (0..nn)
            .filter(|&i| indeg[i] > 0)
            .map(|i| g.nodes[i].name.as_str())
            .collect();
        return Err(GraphError::Cycle {
            node: left[0].to_string(),
            nodes: left.join(", "),
        });
    }
    Ok(order)
}

/// Shapes and dtypes inferred node by node in `order`; `take(i)` yields node i.
fn typed(
    name: String,
    outputs: &[String],
    order: &[usize],
    mut take: impl FnMut(usize) -> Node,
) -> Result<TypedGraph> {
    let nn = order.len();
    // Inference in order.
    let mut tg = TypedGraph {
        name,
        nodes: Vec::with_capacity(nn),
        tensors: vec![],
        node_inputs: vec![],
        node_outputs: vec![],
        producer: vec![],
        consumers: vec![],
        outputs: vec![],
        index: rustc_hash::FxHashMap::with_capacity_and_hasher(nn, Default::default()),
        out_flag: vec![],
    };
    for &i in order {
        let n = take(i);
        let ins: Vec<usize> = n.inputs.iter().map(|t| tg.index[t]).collect();
        let infos: Vec<&TensorInfo> = ins.iter().map(|&t| &tg.tensors[t]).collect();
        let outs = infer_node(&n, &infos)?;
        let ni = tg.nodes.len();
        let mut out_ids = Vec::with_capacity(outs.len());
        for info in outs {
            let id = tg.tensors.len();
            tg.index.insert(info.name.clone(), id);
            tg.tensors.push(info);
            tg.producer.push(ni);
            tg.consumers.push(vec![]);
            out_ids.push(id);
        }
        for &t in &ins {
            // Nodes are added in order, so `ni` can only already be listed last (a node
            // reading `t` twice): O(1) instead of a scan of every consumer (a 300 000-way
            // fan-out was quadratic).
            if tg.consumers[t].last() != Some(&ni) {
                tg.consumers[t].push(ni);
            }
        }
        tg.nodes.push(n);
        tg.node_inputs.push(ins);
        tg.node_outputs.push(out_ids);
    }
    // Graph outputs, each once (the flags make repeated names O(1) to skip).
    tg.out_flag = vec![false; tg.tensors.len()];
    if outputs.is_empty() {
        for t in 0..tg.tensors.len() {
            if tg.consumers[t].is_empty() {
                tg.out_flag[t] = true;
                tg.outputs.push(t);
            }
        }
    } else {
        for o in outputs {
            let id = *tg
                .index
                .get(o)
                .ok_or_else(|| GraphError::UnknownOutput { tensor: o.clone() })?;
            if !std::mem::replace(&mut tg.out_flag[id], true) {
                tg.outputs.push(id);
            }
        }
    }
    Ok(tg)
}

/// The output tensors of one node given its inputs' infos: shape and dtype inference, then
/// the element count and storage bytes of each output, refusing an empty or overflowing
/// tensor by name. Used by [`Graph::validate`] for every node and by importers to check one
/// lowered op at a time without building a graph.
pub fn infer_node(n: &Node, ins: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let outs = infer(n, ins)?;
    let names = n.output_names_ref();
    if names.len() != outs.len() {
        return Err(GraphError::Invalid {
            node: n.name.clone(),
            op: n.op.name().into(),
            detail: format!(
                "has {} outputs, the op produces {}",
                names.len(),
                outs.len()
            ),
        });
    }
    let mut v = Vec::with_capacity(outs.len());
    for (name, (shape, dtype)) in names.iter().zip(outs) {
        let ne = numel(&shape).ok_or_else(|| overflow(n, name, &shape))?;
        if ne == 0 {
            // Statistics, roofline bounds and the executor's blocks all assume at least
            // one element; an empty tensor is refused by name rather than reported as
            // "min inf, max -inf, bound balanced".
            return Err(GraphError::Shape {
                node: n.name.clone(),
                op: n.op.name().into(),
                tensor: name.clone(),
                detail: format!("shape {shape:?} has 0 elements: empty tensors are not supported"),
            });
        }
        let bytes = dtype.bytes_for(ne).map_err(|_| overflow(n, name, &shape))?;
        v.push(TensorInfo {
            name: name.clone(),
            shape,
            dtype,
            numel: ne,
            bytes,
        });
    }
    Ok(v)
}

/// Ops whose attributes all have defaults may omit `attrs`: insert `{}` so that serde's
/// tagged enum accepts them.
/// The JSON form of [`Op`] inside a node: the derived `"op"` / `"attrs"` form, except that
/// a function of the op table is named directly (`"op": "Exp"`, not a `Unary` wrapper).
mod op_json {
    use super::{BinaryFn, Op, UnaryFn};
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Deserialize)]
    struct Raw {
        op: String,
        #[serde(default)]
        attrs: Option<serde_json::Value>,
    }

    #[derive(Serialize)]
    struct Named<'a> {
        op: &'a str,
    }

    pub(super) fn serialize<S: Serializer>(op: &Op, s: S) -> Result<S::Ok, S::Error> {
        match op {
            Op::Unary { f } => Named { op: f.name() }.serialize(s),
            Op::Binary { f } => Named { op: f.name() }.serialize(s),
            other => other.serialize(s),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Op, D::Error> {
        let raw = Raw::deserialize(d)?;
        let table = UnaryFn::from_name(&raw.op)
            .map(|f| Op::Unary { f })
            .or_else(|| BinaryFn::from_name(&raw.op).map(|f| Op::Binary { f }));
        if let Some(op) = table {
            let empty = raw
                .attrs
                .as_ref()
                .is_none_or(|a| a.is_null() || a.as_object().is_some_and(|o| o.is_empty()));
            if !empty {
                return Err(D::Error::custom(format!(
                    "`{}` takes no attrs, got {}",
                    raw.op,
                    raw.attrs.unwrap_or_default()
                )));
            }
            return Ok(op);
        }
        let mut m = serde_json::Map::new();
        m.insert("op".into(), serde_json::Value::String(raw.op));
        if let Some(a) = raw.attrs {
            m.insert("attrs".into(), a);
        }
        Op::deserialize(serde_json::Value::Object(m)).map_err(|e| {
            let e = e.to_string();
            if e.starts_with("unknown variant") {
                let names: Vec<&str> = UnaryFn::ALL
                    .iter()
                    .map(|f| f.name())
                    .chain(BinaryFn::ALL.iter().map(|f| f.name()))
                    .collect();
                D::Error::custom(format!(
                    "{e}, or a function of the op table: {}",
                    names.join(", ")
                ))
            } else {
                D::Error::custom(e)
            }
        })
    }
}

fn default_attrs(v: &mut serde_json::Value) {
    if let Some(nodes) = v.get_mut("nodes").and_then(|n| n.as_array_mut()) {
        for n in nodes.iter_mut().filter_map(|n| n.as_object_mut()) {
            let defaulted = matches!(
                n.get("op").and_then(|o| o.as_str()),
                Some(
                    "Softmax"
                        | "LogSoftmax"
                        | "LogSumExp"
                        | "RMSNorm"
                        | "LayerNorm"
                        | "RMSNormSwiGLU"
                )
            );
            if defaulted && !n.contains_key("attrs") {
                n.insert("attrs".into(), serde_json::json!({}));
            }
        }
    }
}

fn overflow(n: &Node, t: &str, shape: &[usize]) -> GraphError {
    GraphError::Shape {
        node: n.name.clone(),
        op: n.op.name().into(),
        tensor: t.into(),
        detail: format!("shape {shape:?} overflows the addressable size"),
    }
}

/// A quantization scale must be a positive normal f32: the executor computes in f32, where
/// 1e-320 would become 0 and 1e300 infinity. The message shows the value as written.
fn check_scale(scale: f64) -> std::result::Result<(), String> {
    let s32 = scale as f32;
    if !(scale.is_finite() && scale > 0.0) {
        return Err(format!("scale {scale:?} must be finite and > 0"));
    }
    if !s32.is_normal() {
        return Err(format!(
            "scale {scale:?} is outside the positive normal f32 range [{:e}, {:e}] the executor computes in",
            f32::MIN_POSITIVE,
            f32::MAX
        ));
    }
    Ok(())
}

fn infer(n: &Node, ins: &[&TensorInfo]) -> Result<Vec<(Vec<usize>, DType)>> {
    let op = n.op.name();
    let inv = |detail: String| GraphError::Invalid {
        node: n.name.clone(),
        op: op.into(),
        detail,
    };
    let shape_err = |t: &TensorInfo, detail: String| GraphError::Shape {
        node: n.name.clone(),
        op: op.into(),
        tensor: t.name.clone(),
        detail,
    };
    // Gather's and GatherElements' data axis, after checking that the indices are integers.
    let gather_axis = |d: &TensorInfo, idx: &TensorInfo, axis: i64| -> Result<usize> {
        if !idx.dtype.is_integer() {
            return Err(shape_err(
                idx,
                format!("indices must be an integer tensor, got {}", idx.dtype),
            ));
        }
        norm_axis(axis, d.shape.len()).ok_or_else(|| {
            shape_err(
                d,
                format!("axis {axis} is out of range for rank {}", d.shape.len()),
            )
        })
    };
    let arity = |k: usize| -> Result<()> {
        if ins.len() != k {
            Err(inv(format!("expects {k} inputs, got {}", ins.len())))
        } else {
            Ok(())
        }
    };
    let same_dtype = |a: &TensorInfo, b: &TensorInfo| -> Result<()> {
        if a.dtype != b.dtype {
            Err(GraphError::Dtype {
                node: n.name.clone(),
                op: op.into(),
                tensor: b.name.clone(),
                expected: format!("{} (the dtype of `{}`)", a.dtype, a.name),
                got: b.dtype.to_string(),
            })
        } else {
            Ok(())
        }
    };
    let float = |t: &TensorInfo| -> Result<()> {
        if matches!(t.dtype, DType::Int8 | DType::Int4) {
            Err(GraphError::Dtype {
                node: n.name.clone(),
                op: op.into(),
                tensor: t.name.clone(),
                expected: "a floating-point dtype".into(),
                got: t.dtype.to_string(),
            })
        } else {
            Ok(())
        }
    };
    let last_axis = |t: &TensorInfo, axis: i64| -> Result<usize> {
        let a = norm_axis(axis, t.shape.len()).ok_or_else(|| {
            shape_err(
                t,
                format!("axis {axis} is out of range for rank {}", t.shape.len()),
            )
        })?;
        if a + 1 != t.shape.len() {
            return Err(shape_err(
                t,
                format!(
                    "axis {axis} must be the last axis ({}) for this op",
                    t.shape.len() - 1
                ),
            ));
        }
        Ok(a)
    };
    let source = |shape: &Vec<usize>, dtype: DType| -> Result<Vec<(Vec<usize>, DType)>> {
        arity(0)?;
        Ok(vec![(shape.clone(), dtype)])
    };
    let out = match &n.op {
        Op::Input { shape, dtype } | Op::Weight { shape, dtype } => source(shape, *dtype)?,
        Op::Constant { shape, dtype, .. } => source(shape, *dtype)?,
        Op::MatMul => {
            arity(2)?;
            let (a, b) = (ins[0], ins[1]);
            same_dtype(a, b)?;
            if a.shape.len() < 2 {
                return Err(shape_err(
                    a,
                    format!("MatMul needs rank >= 2, got shape {:?}", a.shape),
                ));
            }
            if b.shape.len() != 2 && b.shape.len() != a.shape.len() {
                return Err(shape_err(
                    b,
                    format!(
                        "right operand must be rank 2 or the left operand's rank {}, got shape {:?}",
                        a.shape.len(),
                        b.shape
                    ),
                ));
            }
            let ra = a.shape.len();
            let rb = b.shape.len();
            let k = a.shape[ra - 1];
            if b.shape[rb - 2] != k {
                return Err(shape_err(
                    b,
                    format!(
                        "contraction mismatch: left {:?} has K = {k}, right {:?} has K = {}",
                        a.shape,
                        b.shape,
                        b.shape[rb - 2]
                    ),
                ));
            }
            if rb > 2 && a.shape[..ra - 2] != b.shape[..rb - 2] {
                return Err(shape_err(
                    b,
                    format!(
                        "batch dims {:?} differ from the left operand's {:?} (no batch broadcast)",
                        &b.shape[..rb - 2],
                        &a.shape[..ra - 2]
                    ),
                ));
            }
            let mut s = a.shape[..ra - 1].to_vec();
            s.push(b.shape[rb - 1]);
            vec![(s, a.dtype)]
        }
        Op::Recurrence {
            cell,
            direction,
            finals,
        } => {
            arity(4)?;
            let (xw, rt, h0, extra) = (ins[0], ins[1], ins[2], ins[3]);
            float(xw)?;
            for p in &ins[1..] {
                same_dtype(xw, p)?;
            }
            let (g, d) = (cell.gates(), direction.reversed().len());
            if rt.shape.len() != 3 || rt.shape[0] != d {
                return Err(shape_err(
                    rt,
                    format!("must have shape [{d}, H, {g}·H], got {:?}", rt.shape),
                ));
            }
            let h = rt.shape[1];
            let gh = g
                .checked_mul(h)
                .ok_or_else(|| inv("G·H overflows".into()))?;
            if rt.shape[2] != gh || h == 0 {
                return Err(shape_err(
                    rt,
                    format!(
                        "must have shape [{d}, H, {g}·H] with H > 0, got {:?}",
                        rt.shape
                    ),
                ));
            }
            let cols = d
                .checked_mul(gh)
                .ok_or_else(|| inv("D·G·H overflows".into()))?;
            if xw.shape.len() != 3 || xw.shape[2] != cols {
                return Err(shape_err(
                    xw,
                    format!("must have shape [S, B, {cols}], got {:?}", xw.shape),
                ));
            }
            let (s, b) = (xw.shape[0], xw.shape[1]);
            if h0.shape != [d, b, h] {
                return Err(shape_err(
                    h0,
                    format!("must have shape [{d}, {b}, {h}], got {:?}", h0.shape),
                ));
            }
            let want: Vec<usize> = if *cell == RecurrentCell::Lstm {
                vec![d, b, h]
            } else {
                vec![d, h]
            };
            if extra.shape != want {
                return Err(shape_err(
                    extra,
                    format!("must have shape {want:?}, got {:?}", extra.shape),
                ));
            }
            let rows = s
                .checked_add(if *finals { cell.states() } else { 0 })
                .ok_or_else(|| inv("S overflows".into()))?;
            vec![(vec![rows, d, b, h], xw.dtype)]
        }
        Op::CumSum { axis, .. } => {
            arity(1)?;
            let t = ins[0];
            norm_axis(*axis, t.shape.len()).ok_or_else(|| {
                shape_err(
                    t,
                    format!("axis {axis} is out of range for rank {}", t.shape.len()),
                )
            })?;
            vec![(t.shape.clone(), t.dtype)]
        }
        Op::Pad { pads, mode, value } => {
            arity(1)?;
            let t = ins[0];
            let r = t.shape.len();
            if pads.len() != 2 * r {
                return Err(inv(format!(
                    "pads has {} values; rank {r} needs {}",
                    pads.len(),
                    2 * r
                )));
            }
            let _ = value; // any fill value, NaN included, is valid
            let mut s = Vec::with_capacity(r);
            for (a, &d) in t.shape.iter().enumerate() {
                let (b, e) = (pads[a], pads[r + a]);
                let n = (d as i64)
                    .checked_add(b)
                    .and_then(|x| x.checked_add(e))
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| {
                        shape_err(
                            t,
                            format!("pads {b} and {e} leave axis {a} (size {d}) negative"),
                        )
                    })?;
                // Negative pads crop first; the positive ones extend what is kept.
                let kept = d as i64 - (-b).max(0) - (-e).max(0);
                let need = match mode {
                    PadMode::Reflect => kept >= 2 && b.max(e) < kept,
                    PadMode::Edge | PadMode::Wrap => kept >= 1,
                    PadMode::Constant => true,
                };
                if !need && (b > 0 || e > 0) {
                    return Err(shape_err(
                        t,
                        format!(
                            "{mode:?} padding of {b} and {e} on axis {a} of size {d} ({kept} kept after cropping; reflect needs both pads below it)"
                        ),
                    ));
                }
                s.push(n as usize);
            }
            vec![(s, t.dtype)]
        }
        Op::Binary { f } => {
            arity(2)?;
            let (a, b) = (ins[0], ins[1]);
            same_dtype(a, b)?;
            let s = broadcast_shapes(&a.shape, &b.shape).ok_or_else(|| {
                shape_err(
                    b,
                    format!(
                        "shape {:?} does not broadcast with `{}` {:?} (NumPy rules: trailing dims equal or 1)",
                        b.shape, a.name, a.shape
                    ),
                )
            })?;
            let d = crate::optable::output_dtype(f.dtype_rule(), a.dtype).map_err(|want| {
                GraphError::Dtype {
                    node: n.name.clone(),
                    op: op.into(),
                    tensor: a.name.clone(),
                    expected: want.into(),
                    got: a.dtype.to_string(),
                }
            })?;
            vec![(s, d)]
        }
        Op::Unary { f } => {
            arity(1)?;
            let d = crate::optable::output_dtype(f.dtype_rule(), ins[0].dtype).map_err(|want| {
                GraphError::Dtype {
                    node: n.name.clone(),
                    op: op.into(),
                    tensor: ins[0].name.clone(),
                    expected: want.into(),
                    got: ins[0].dtype.to_string(),
                }
            })?;
            vec![(ins[0].shape.clone(), d)]
        }
        Op::Cast { to } => {
            arity(1)?;
            vec![(ins[0].shape.clone(), *to)]
        }
        Op::Quantize { scale, zero_point } => {
            arity(1)?;
            float(ins[0])?;
            check_scale(*scale).map_err(inv)?;
            if !(-128..=127).contains(zero_point) {
                return Err(inv(format!(
                    "zero_point {zero_point} is outside [-128, 127] of int8"
                )));
            }
            vec![(ins[0].shape.clone(), DType::Int8)]
        }
        Op::Dequantize {
            scale,
            zero_point,
            to,
        } => {
            arity(1)?;
            if ins[0].dtype != DType::Int8 {
                return Err(GraphError::Dtype {
                    node: n.name.clone(),
                    op: op.into(),
                    tensor: ins[0].name.clone(),
                    expected: "int8".into(),
                    got: ins[0].dtype.to_string(),
                });
            }
            check_scale(*scale).map_err(inv)?;
            if !(-128..=127).contains(zero_point) {
                return Err(inv(format!(
                    "zero_point {zero_point} is outside [-128, 127] of int8"
                )));
            }
            vec![(ins[0].shape.clone(), *to)]
        }
        Op::Pow { exponent } => {
            arity(1)?;
            float(ins[0])?;
            if exponent.is_nan() {
                return Err(inv("exponent must not be NaN".into()));
            }
            vec![(ins[0].shape.clone(), ins[0].dtype)]
        }
        o if o.is_unary() => {
            arity(1)?;
            float(ins[0])?;
            vec![(ins[0].shape.clone(), ins[0].dtype)]
        }
        Op::ReduceSum { axis, keepdims }
        | Op::ReduceMax { axis, keepdims }
        | Op::ReduceMean { axis, keepdims } => {
            arity(1)?;
            let t = ins[0];
            let a = norm_axis(*axis, t.shape.len()).ok_or_else(|| {
                shape_err(
                    t,
                    format!("axis {axis} is out of range for rank {}", t.shape.len()),
                )
            })?;
            let mut s = t.shape.clone();
            if *keepdims {
                s[a] = 1;
            } else {
                s.remove(a);
            }
            vec![(s, t.dtype)]
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            arity(1)?;
            float(ins[0])?;
            last_axis(ins[0], *axis)?;
            vec![(ins[0].shape.clone(), ins[0].dtype)]
        }
        Op::LogSumExp { axis, keepdims } => {
            arity(1)?;
            float(ins[0])?;
            let a = last_axis(ins[0], *axis)?;
            let mut s = ins[0].shape.clone();
            if *keepdims {
                s[a] = 1;
            } else {
                s.remove(a);
            }
            vec![(s, ins[0].dtype)]
        }
        Op::RmsNorm { eps } | Op::LayerNorm { eps } => {
            let k = if matches!(n.op, Op::RmsNorm { .. }) {
                2
            } else {
                3
            };
            arity(k)?;
            if !(eps.is_finite() && *eps >= 0.0) {
                return Err(inv(format!("eps {eps} must be finite and >= 0")));
            }
            let x = ins[0];
            float(x)?;
            let d = *x
                .shape
                .last()
                .ok_or_else(|| shape_err(x, "needs rank >= 1 (normalizes the last axis)".into()))?;
            if d == 0 {
                return Err(shape_err(x, "last axis is empty".into()));
            }
            for p in &ins[1..] {
                same_dtype(x, p)?;
                if p.shape != [d] {
                    return Err(shape_err(
                        p,
                        format!(
                            "must have shape [{d}] (the last dim of `{}`), got {:?}",
                            x.name, p.shape
                        ),
                    ));
                }
            }
            vec![(x.shape.clone(), x.dtype)]
        }
        Op::FusedAttention { scale, .. } => {
            if !(3..=4).contains(&ins.len()) {
                arity(3)?;
            }
            if !scale.is_finite() {
                return Err(inv(format!("scale {scale} must be finite")));
            }
            let (q, kt, v) = (ins[0], ins[1], ins[2]);
            float(q)?;
            for p in &ins[1..] {
                same_dtype(q, p)?;
            }
            let r = q.shape.len();
            if r < 2 || kt.shape.len() != r || v.shape.len() != r {
                return Err(shape_err(
                    q,
                    format!(
                        "q, kt and v must have one rank >= 2, got {:?}, {:?}, {:?}",
                        q.shape, kt.shape, v.shape
                    ),
                ));
            }
            let lead = &q.shape[..r - 2];
            let (sq, d) = (q.shape[r - 2], q.shape[r - 1]);
            let sk = kt.shape[r - 1];
            if kt.shape[..r - 2] != *lead || kt.shape[r - 2] != d {
                return Err(shape_err(
                    kt,
                    format!("must have shape {:?} + [{d}, Sk], got {:?}", lead, kt.shape),
                ));
            }
            if v.shape[..r - 2] != *lead || v.shape[r - 2] != sk {
                return Err(shape_err(
                    v,
                    format!("must have shape {:?} + [{sk}, Dv], got {:?}", lead, v.shape),
                ));
            }
            let mut scores = lead.to_vec();
            scores.extend([sq, sk]);
            if let Some(m) = ins.get(3) {
                if m.shape.len() > r
                    || broadcast_shapes(&m.shape, &scores).as_deref() != Some(&scores[..])
                {
                    return Err(shape_err(
                        m,
                        format!(
                            "mask {:?} does not broadcast to the scores {:?}",
                            m.shape, scores
                        ),
                    ));
                }
            }
            let mut s = lead.to_vec();
            s.extend([sq, v.shape[r - 1]]);
            vec![(s, q.dtype)]
        }
        Op::RmsNormSwiGlu { eps } => {
            arity(4)?;
            if !(eps.is_finite() && *eps >= 0.0) {
                return Err(inv(format!("eps {eps} must be finite and >= 0")));
            }
            let (x, g, wg, wu) = (ins[0], ins[1], ins[2], ins[3]);
            for p in [g, wg, wu] {
                same_dtype(x, p)?;
            }
            let d = *x
                .shape
                .last()
                .ok_or_else(|| shape_err(x, "needs rank >= 1".into()))?;
            if d == 0 {
                return Err(shape_err(x, "last axis is empty".into()));
            }
            if g.shape != [d] {
                return Err(shape_err(
                    g,
                    format!("must have shape [{d}], got {:?}", g.shape),
                ));
            }
            if wg.shape.len() != 2 || wg.shape[0] != d {
                return Err(shape_err(
                    wg,
                    format!("must have shape [{d}, F], got {:?}", wg.shape),
                ));
            }
            if wu.shape != wg.shape {
                return Err(shape_err(
                    wu,
                    format!(
                        "must have the gate weight's shape {:?}, got {:?}",
                        wg.shape, wu.shape
                    ),
                ));
            }
            let mut s = x.shape.clone();
            let last = s.len() - 1;
            s[last] = wg.shape[1];
            vec![(s, x.dtype)]
        }
        Op::Reshape { shape } => {
            arity(1)?;
            let t = ins[0];
            let mut unknown = None;
            let mut known: u64 = 1;
            for (i, &d) in shape.iter().enumerate() {
                if d == -1 {
                    if unknown.is_some() {
                        return Err(inv("at most one -1 in the target shape".into()));
                    }
                    unknown = Some(i);
                } else if d < 0 {
                    return Err(inv(format!("invalid target dim {d}")));
                } else {
                    known = known
                        .checked_mul(d as u64)
                        .ok_or_else(|| inv(format!("target shape {shape:?} overflows")))?;
                }
            }
            let mut s: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
            if let Some(u) = unknown {
                if known == 0 || !t.numel.is_multiple_of(known) {
                    return Err(shape_err(
                        t,
                        format!("{} elements cannot be reshaped to {shape:?}", t.numel),
                    ));
                }
                s[u] = (t.numel / known) as usize;
                known = t.numel;
            }
            if known != t.numel {
                return Err(shape_err(
                    t,
                    format!(
                        "reshape of {:?} ({} elements) to {shape:?} ({known} elements) changes the element count",
                        t.shape, t.numel
                    ),
                ));
            }
            vec![(s, t.dtype)]
        }
        Op::Transpose { perm } => {
            arity(1)?;
            let t = ins[0];
            let mut seen = vec![false; t.shape.len()];
            if perm.len() != t.shape.len() {
                return Err(shape_err(
                    t,
                    format!(
                        "perm {perm:?} has {} axes, the tensor has rank {}",
                        perm.len(),
                        t.shape.len()
                    ),
                ));
            }
            for &p in perm {
                if p >= seen.len() || seen[p] {
                    return Err(inv(format!("perm {perm:?} is not a permutation")));
                }
                seen[p] = true;
            }
            vec![(perm.iter().map(|&p| t.shape[p]).collect(), t.dtype)]
        }
        Op::Broadcast { shape } => {
            arity(1)?;
            let t = ins[0];
            match broadcast_shapes(&t.shape, shape) {
                Some(s) if &s == shape => vec![(s, t.dtype)],
                _ => {
                    return Err(shape_err(
                        t,
                        format!(
                            "shape {:?} does not broadcast to {shape:?} (NumPy rules)",
                            t.shape
                        ),
                    ))
                }
            }
        }
        Op::Concat { axis } => {
            if ins.is_empty() {
                return Err(inv("expects at least 1 input".into()));
            }
            let f = ins[0];
            let a = norm_axis(*axis, f.shape.len()).ok_or_else(|| {
                shape_err(
                    f,
                    format!("axis {axis} is out of range for rank {}", f.shape.len()),
                )
            })?;
            let mut s = f.shape.clone();
            for t in &ins[1..] {
                same_dtype(f, t)?;
                let ok = t.shape.len() == f.shape.len()
                    && t.shape
                        .iter()
                        .zip(&f.shape)
                        .enumerate()
                        .all(|(i, (x, y))| i == a || x == y);
                if !ok {
                    return Err(shape_err(
                        t,
                        format!(
                            "shape {:?} differs from {:?} outside axis {a}",
                            t.shape, f.shape
                        ),
                    ));
                }
                s[a] = s[a]
                    .checked_add(t.shape[a])
                    .ok_or_else(|| shape_err(t, "concatenated dim overflows".into()))?;
            }
            vec![(s, f.dtype)]
        }
        Op::Slice {
            starts,
            ends,
            axes,
            steps,
        } => {
            arity(1)?;
            let t = ins[0];
            let plan =
                slice_plan(&t.shape, starts, ends, axes, steps).map_err(|e| shape_err(t, e))?;
            vec![(plan.iter().map(|p| p.2).collect(), t.dtype)]
        }
        Op::Conv2d {
            strides,
            pads,
            dilations,
            group,
        } => {
            if ins.len() != 2 && ins.len() != 3 {
                return Err(inv(format!("expects 2 or 3 inputs, got {}", ins.len())));
            }
            let (x, w) = (ins[0], ins[1]);
            same_dtype(x, w)?;
            let p = conv_out(&x.shape, &w.shape, strides, pads, dilations, *group)
                .map_err(|e| shape_err(w, e))?;
            if let Some(b) = ins.get(2) {
                if b.shape != [w.shape[0]] {
                    return Err(shape_err(
                        b,
                        format!("bias must have shape [{}], got {:?}", w.shape[0], b.shape),
                    ));
                }
            }
            vec![(p, x.dtype)]
        }
        Op::MaxPool2d {
            kernel,
            strides,
            pads,
        }
        | Op::AvgPool2d {
            kernel,
            strides,
            pads,
            ..
        } => {
            arity(1)?;
            let x = ins[0];
            if x.shape.len() != 4 || kernel.len() != 2 {
                return Err(shape_err(x, "expects NCHW input and a 2-D kernel".into()));
            }
            let w = [x.shape[1], 1, kernel[0], kernel[1]];
            let mut p = conv_out(&x.shape, &w, strides, pads, &[1, 1], x.shape[1])
                .map_err(|e| shape_err(x, e))?;
            p[1] = x.shape[1];
            vec![(p, x.dtype)]
        }
        Op::Where => {
            arity(3)?;
            let (c, x, y) = (ins[0], ins[1], ins[2]);
            same_dtype(x, y)?;
            let s = broadcast_shapes(&c.shape, &x.shape)
                .and_then(|s| broadcast_shapes(&s, &y.shape))
                .ok_or_else(|| {
                    shape_err(
                        y,
                        format!(
                            "shapes {:?}, {:?} and {:?} do not broadcast together (NumPy rules)",
                            c.shape, x.shape, y.shape
                        ),
                    )
                })?;
            vec![(s, x.dtype)]
        }
        Op::GatherElements { axis } => {
            arity(2)?;
            let (d, idx) = (ins[0], ins[1]);
            let a = gather_axis(d, idx, *axis)?;
            let fits = idx.shape.len() == d.shape.len()
                && idx
                    .shape
                    .iter()
                    .zip(&d.shape)
                    .enumerate()
                    .all(|(k, (i, n))| k == a || i <= n);
            if !fits {
                return Err(shape_err(
                    idx,
                    format!(
                        "indices of shape {:?} do not fit data of shape {:?} off axis {a}",
                        idx.shape, d.shape
                    ),
                ));
            }
            vec![(idx.shape.clone(), d.dtype)]
        }
        Op::Gather { axis } => {
            arity(2)?;
            let (d, idx) = (ins[0], ins[1]);
            let a = gather_axis(d, idx, *axis)?;
            let mut s = d.shape[..a].to_vec();
            s.extend_from_slice(&idx.shape);
            s.extend_from_slice(&d.shape[a + 1..]);
            if s.len() > 16 {
                return Err(shape_err(
                    idx,
                    format!("output rank {} exceeds 16", s.len()),
                ));
            }
            vec![(s, d.dtype)]
        }
        Op::Opaque { output_specs, .. } => {
            if output_specs.is_empty() {
                return Err(inv(
                    "an opaque op must declare at least one output spec".into()
                ));
            }
            output_specs
                .iter()
                .map(|s| (s.shape.clone(), s.dtype))
                .collect()
        }
    };
    Ok(out)
}

impl TypedGraph {
    /// Tensor id by name.
    pub fn tensor_id(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The class of node `i`: elementwise ops whose inputs need a NumPy broadcast are
    /// `broadcast`.
    pub fn class(&self, i: usize) -> OpClass {
        let c = self.nodes[i].op.base_class();
        if c == OpClass::Elementwise {
            let out = &self.tensors[self.node_outputs[i][0]].shape;
            if self.node_inputs[i]
                .iter()
                .any(|&t| &self.tensors[t].shape != out)
            {
                return OpClass::Broadcast;
            }
        }
        c
    }

    /// The storage tensor behind `t`: follows views (Reshape / Transpose) to their source.
    pub fn base(&self, mut t: usize) -> usize {
        loop {
            let p = self.producer[t];
            if self.nodes[p].op.base_class() == OpClass::View {
                t = self.node_inputs[p][0];
            } else {
                return t;
            }
        }
    }

    /// True when tensor `t` is a graph output.
    pub fn is_output(&self, t: usize) -> bool {
        self.out_flag.get(t).copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod scale_tests {
    use super::*;

    #[test]
    fn quantize_scales_must_survive_f32() {
        // 1e-320 is a subnormal f64 that rounds to 0 in f32; 1e300 overflows to inf;
        // 3.5e38 > f32::MAX (3.4028235e38). The message shows the value as written.
        for bad in [1e-320, 1e300, 3.5e38, 1e-39] {
            let e = check_scale(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        assert!(check_scale(0.1).is_ok());
        assert!(check_scale(f32::MIN_POSITIVE as f64).is_ok());
        let g = Graph::from_json_str(
            r#"{"nodes":[{"name":"x","op":"Input","attrs":{"shape":[4],"dtype":"fp32"}},
              {"name":"q","op":"Quantize","inputs":["x"],"attrs":{"scale":1e-320,"zero_point":0}}]}"#,
        )
        .unwrap();
        let e = g.validate().unwrap_err().to_string();
        assert!(e.contains("1e-320") && e.contains("`q`"), "{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<TypedGraph> {
        Graph::from_json_str(s)?.validate()
    }

    #[test]
    fn owned_and_borrowed_validation_agree() {
        // Nodes listed out of order (the ReLU before its input), a graph output named
        // twice: both paths must sort, infer and deduplicate the same way.
        let text = r#"{"schema_version":1,"name":"g","outputs":["y","y","z"],"nodes":[
            {"name":"r","op":"ReLU","inputs":["x"],"outputs":["y"]},
            {"name":"x","op":"Input","attrs":{"shape":[2,3],"dtype":"fp32"}},
            {"name":"z","op":"Exp","inputs":["y"]}]}"#;
        let g = Graph::from_json_str(text).unwrap();
        let a = g.validate().unwrap();
        let b = g.into_typed().unwrap();
        let names = |t: &TypedGraph| t.nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&a), ["x", "r", "z"]);
        assert_eq!(names(&b), names(&a));
        assert_eq!(a.tensors, b.tensors);
        // y and z, y once.
        assert_eq!(a.outputs.len(), 2);
        assert_eq!(a.outputs, b.outputs);
        assert_eq!(a.out_flag, b.out_flag);
        assert_eq!(a.tensors[a.outputs[0]].name, "y");
    }

    #[test]
    fn op_table_functions_are_named_directly_in_json() {
        let text = r#"{"nodes":[
            {"name":"x","op":"Input","attrs":{"shape":[4],"dtype":"fp32"}},
            {"name":"e","op":"Exp","inputs":["x"]},
            {"name":"n","op":"IsNaN","inputs":["e"]},
            {"name":"y","op":"Add","inputs":["e","x"]}]}"#;
        let g = Graph::from_json_str(text).unwrap();
        assert_eq!(g.nodes[1].op, Op::Unary { f: UnaryFn::Exp });
        assert_eq!(g.nodes[2].op, Op::Unary { f: UnaryFn::IsNaN });
        assert_eq!(g.nodes[3].op, Op::Binary { f: BinaryFn::Add });
        // Written back the same way: `"op":"Exp"`, no wrapper, no attrs; and read again.
        let out = g.to_json_string();
        assert!(out.contains(r#""op": "Exp""#), "{out}");
        assert!(out.contains(r#""op": "Add""#), "{out}");
        assert!(!out.contains("Unary") && !out.contains("Binary"), "{out}");
        assert_eq!(Graph::from_json_str(&out).unwrap().nodes, g.nodes);
        // Attributes on a function that takes none, and an unknown op, are named errors.
        let bad = text.replace(r#""op":"Exp","#, r#""op":"Exp","attrs":{"axis":1},"#);
        let e = Graph::from_json_str(&bad).unwrap_err().to_string();
        assert!(e.contains("`Exp` takes no attrs"), "{e}");
        let e = Graph::from_json_str(&text.replace("IsNaN", "IsNan"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("IsNan") && e.contains("op table: Neg, Exp"),
            "{e}"
        );
    }

    #[test]
    fn gather_elements_takes_the_indices_shape_and_checks_it() {
        let graph = |idx: &str, axis: i64| {
            format!(
                r#"{{"nodes":[
                  {{"name":"d","op":"Input","attrs":{{"shape":[3,4],"dtype":"fp32"}}}},
                  {{"name":"i","op":"Input","attrs":{{"shape":{idx},"dtype":"int64"}}}},
                  {{"name":"g","op":"GatherElements","inputs":["d","i"],"attrs":{{"axis":{axis}}}}}]}}"#
            )
        };
        // On axis 0 the index extent may exceed data's (5 > 3); off it, at most data's.
        let tg = Graph::from_json_str(&graph("[5,2]", 0))
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(tg.tensors[tg.node_outputs[2][0]].shape, [5, 2]);
        for (idx, axis, want) in [
            ("[2,5]", 0, "do not fit data of shape [3, 4] off axis 0"),
            ("[3]", 1, "do not fit"),
            ("[3,4]", 2, "axis 2 is out of range for rank 2"),
        ] {
            let e = Graph::from_json_str(&graph(idx, axis))
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{idx} axis {axis}: {e}");
        }
    }

    #[test]
    fn recurrence_shapes_and_checks() {
        // A bidirectional LSTM of 5 steps, batch 2, hidden 3: xw [5, 2, 2·4·3 = 24],
        // rt [2, 3, 12], h0 and c0 [2, 2, 3]; with finals the output has 5 + 2 rows.
        let graph = |rt: &str, c0: &str, finals: bool| {
            format!(
                r#"{{"nodes":[
                  {{"name":"xw","op":"Input","attrs":{{"shape":[5,2,24],"dtype":"fp32"}}}},
                  {{"name":"rt","op":"Weight","attrs":{{"shape":{rt},"dtype":"fp32"}}}},
                  {{"name":"h0","op":"Input","attrs":{{"shape":[2,2,3],"dtype":"fp32"}}}},
                  {{"name":"c0","op":"Input","attrs":{{"shape":{c0},"dtype":"fp32"}}}},
                  {{"name":"y","op":"Recurrence","inputs":["xw","rt","h0","c0"],
                    "attrs":{{"cell":"lstm","direction":"bidirectional","finals":{finals}}}}}]}}"#
            )
        };
        for (finals, rows) in [(true, 7), (false, 5)] {
            let tg = Graph::from_json_str(&graph("[2,3,12]", "[2,2,3]", finals))
                .unwrap()
                .validate()
                .unwrap();
            assert_eq!(tg.tensors[tg.node_outputs[4][0]].shape, [rows, 2, 2, 3]);
        }
        for (rt, c0, want) in [
            ("[2,3,9]", "[2,2,3]", "`rt`"),
            ("[1,3,12]", "[2,2,3]", "`rt`"),
            ("[2,3,12]", "[2,3]", "`c0`"),
        ] {
            let e = Graph::from_json_str(&graph(rt, c0, true))
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(want) && e.contains("must have shape"),
                "{rt} {c0}: {e}"
            );
        }
    }

    #[test]
    fn a_graph_without_operations_is_an_error() {
        for text in [
            r#"{"nodes":[]}"#,
            r#"{"nodes":[{"name":"x","op":"Input","attrs":{"shape":[4],"dtype":"fp32"}}]}"#,
        ] {
            let e = Graph::from_json_str(text).unwrap().validate().unwrap_err();
            assert!(e.to_string().contains("no operation"), "{e}");
        }
    }

    #[test]
    fn json_round_trip_and_inference() {
        let text = r#"{"name":"t","nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[4,8],"dtype":"fp32"}},
          {"name":"b","op":"Weight","attrs":{"shape":[8],"dtype":"fp32"}},
          {"name":"y","op":"Add","inputs":["x","b"]},
          {"name":"s","op":"ReduceSum","attrs":{"axis":-1},"inputs":["y"]},
          {"name":"e","op":"Exp","inputs":["s"]}
        ]}"#;
        let g = parse(text).unwrap();
        let s = g.tensor_id("s").unwrap();
        assert_eq!(g.tensors[s].shape, vec![4, 1]);
        // [4,8] fp32 = 32 elements · 4 B = 128 B.
        assert_eq!(g.tensors[g.tensor_id("y").unwrap()].bytes, 128);
        assert_eq!(g.class(2), OpClass::Broadcast);
        assert_eq!(g.outputs, vec![g.tensor_id("e").unwrap()]);
        let back =
            Graph::from_json_str(&Graph::from_json_str(text).unwrap().to_json_string()).unwrap();
        assert_eq!(back.nodes.len(), 5);
    }

    #[test]
    fn errors_name_node_tensor_and_mismatch() {
        let bad = r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[4,8],"dtype":"fp32"}},
          {"name":"w","op":"Input","attrs":{"shape":[3],"dtype":"fp32"}},
          {"name":"y","op":"Add","inputs":["x","w"]}]}"#;
        let e = parse(bad).unwrap_err().to_string();
        assert!(
            e.contains("`y`") && e.contains("`w`") && e.contains("[3]"),
            "{e}"
        );
        let dt = r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[4],"dtype":"fp32"}},
          {"name":"w","op":"Input","attrs":{"shape":[4],"dtype":"fp16"}},
          {"name":"y","op":"Mul","inputs":["x","w"]}]}"#;
        let e = parse(dt).unwrap_err().to_string();
        assert!(e.contains("fp16") && e.contains("`w`"), "{e}");
        let dangling = r#"{"nodes":[{"name":"y","op":"Exp","inputs":["nope"]}]}"#;
        assert!(matches!(parse(dangling), Err(GraphError::Dangling { .. })));
        let cyc = r#"{"nodes":[{"name":"a","op":"Exp","inputs":["b"]},{"name":"b","op":"Exp","inputs":["a"]}]}"#;
        assert!(matches!(parse(cyc), Err(GraphError::Cycle { .. })));
        let dup = r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[4],"dtype":"fp32"}},
          {"name":"x","op":"Exp","inputs":["x"]}]}"#;
        assert!(matches!(parse(dup), Err(GraphError::Duplicate { .. })));
        assert!(matches!(parse("{nodes"), Err(GraphError::Json(_))));
        let e = parse(r#"{"nodes":[{"name":"s","op":"ReduceSum","inputs":[]}]}"#).unwrap_err();
        assert!(e.to_string().contains("node #0 `s`"), "{e}");
        let e = parse(r#"{"nodes":[{"name":"s","op":"Frobnicate"}]}"#).unwrap_err();
        assert!(e.to_string().contains("Frobnicate"), "{e}");
        let mm = r#"{"nodes":[
          {"name":"a","op":"Input","attrs":{"shape":[4,8],"dtype":"fp32"}},
          {"name":"b","op":"Input","attrs":{"shape":[7,2],"dtype":"fp32"}},
          {"name":"c","op":"MatMul","inputs":["a","b"]}]}"#;
        let e = parse(mm).unwrap_err().to_string();
        assert!(e.contains("K = 8") && e.contains("`b`"), "{e}");
        let big = r#"{"nodes":[{"name":"a","op":"Input","attrs":{"shape":[4294967296,4294967296,16],"dtype":"fp32"}}]}"#;
        assert!(parse(big).is_err());
    }

    #[test]
    fn broadcasting_is_numpy() {
        assert_eq!(broadcast_shapes(&[4, 1, 3], &[5, 1]), Some(vec![4, 5, 3]));
        assert_eq!(broadcast_shapes(&[], &[2]), Some(vec![2]));
        assert_eq!(broadcast_shapes(&[4], &[3]), None);
    }
}

#[cfg(test)]
mod slice_tests {
    use super::{conv_out, slice_plan};

    #[test]
    fn conv_out_by_hand() {
        // 16×16, 3×3, pad 1, stride 1: (16 + 2 − 3)/1 + 1 = 16.
        assert_eq!(
            conv_out(
                &[1, 3, 16, 16],
                &[8, 3, 3, 3],
                &[1, 1],
                &[1, 1, 1, 1],
                &[1, 1],
                1
            )
            .unwrap(),
            vec![1, 8, 16, 16]
        );
        // 7×7, 3×3, dilation 2 (span 5), stride 2, no pad: (7 − 5)/2 + 1 = 2.
        assert_eq!(
            conv_out(
                &[2, 4, 7, 7],
                &[6, 2, 3, 3],
                &[2, 2],
                &[0, 0, 0, 0],
                &[2, 2],
                2
            )
            .unwrap(),
            vec![2, 6, 2, 2]
        );
        assert!(conv_out(&[1, 3, 2, 2], &[8, 3, 3, 3], &[1, 1], &[0; 4], &[1, 1], 1).is_err());
        assert!(conv_out(&[1, 3, 8, 8], &[8, 2, 3, 3], &[1, 1], &[0; 4], &[1, 1], 1).is_err());
    }

    #[test]
    fn slice_plan_follows_onnx() {
        // x[..., 8:] on [1, 4, 8, 16] with ends = INT64_MAX: axis 3 from 8, 8 elements.
        let p = slice_plan(&[1, 4, 8, 16], &[8], &[i64::MAX], &[-1], &[1]).unwrap();
        assert_eq!(p[3], (8, 1, 8));
        assert_eq!(p[0], (0, 1, 1));
        // [10]: start −3 → 7, end 100 → 10, step 2: 7, 9 → 2 elements.
        assert_eq!(
            slice_plan(&[10], &[-3], &[100], &[0], &[2]).unwrap()[0],
            (7, 2, 2)
        );
        // Negative step: start 8, end 1, step −3: 8, 5, 2 → 3 elements.
        assert_eq!(
            slice_plan(&[10], &[8], &[1], &[0], &[-3]).unwrap()[0],
            (8, -3, 3)
        );
        // Empty when start ≥ end.
        assert_eq!(slice_plan(&[10], &[5], &[5], &[0], &[1]).unwrap()[0].2, 0);
        let e = slice_plan(&[10], &[0], &[5], &[0], &[0]).unwrap_err();
        assert!(e.contains("step"), "{e}");
        let e = slice_plan(&[10], &[0], &[5], &[3], &[1]).unwrap_err();
        assert!(e.contains("axis 3"), "{e}");
    }
}
