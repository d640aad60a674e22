//! What the harness can run, how it is named, what it is (its identity and fingerprint) and
//! what the Core model says it costs (FLOPs and compulsory DRAM bytes per iteration, per
//! operation). Every workload is measured in f32 on the CPU; the Core presets, which are
//! fp16, are re-typed to fp32 so the model counts the bytes the harness actually moves.
//!
//! Names accepted on the command line:
//! * Core presets: `gemm_tiny`, `gemm_tall`, `gemm_wide`, `gemm_large_square`, `conv_pointwise`,
//!   `conv_spatial`, `conv_downsample`, `transformer_small`, `transformer_medium`,
//!   `transformer_long_sequence` (a whole block), and `attention:<transformer preset>` (its
//!   attention part: q/k/v projections, scores, softmax, values, output projection).
//! * `gemm:m=M:n=N:k=K[:batch=B]` for any (batched) GEMM.
//! * `kernel:NAME:key=value...` for the kernels crate: `logaddexp:n=N`, `logsumexp:rows=R:cols=C`,
//!   `softmax:rows=R:cols=C`, `quantize:n=N` (f32 → int8, per tensor),
//!   `rmsnorm_swiglu_fused:tokens=T:d_model=D:d_ff=F`, `rmsnorm_swiglu_unfused:...`.
//! * `graph:NAME[:mode=fused|unfused]` for a graph run by the graph compiler's CPU executor:
//!   NAME is a built-in example graph ([`BUILTIN_GRAPHS`], embedded in the binary) or a path
//!   to a graph JSON file (ending in `.json`); the mode defaults to fused.
//! * `empty`: an empty call through the same harness path (the fixed floor).
//! * A path to a workload file (TOML, `[[workload]]` entries, see examples/holdout.toml).
//!
//! Left out: dtypes other than f32, data-dependent cost (all inputs are dense pseudo-random
//! numbers), and the causal mask's skipped work (GEMMs and softmax run dense, as the Core
//! decomposition charges them).

use crate::error::{MeasureError, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tensorforge_core::conv::{conv2d_preset, Conv2d, CONV2D_PRESET_NAMES};
use tensorforge_core::presets::GEMM_PRESETS;
use tensorforge_core::transformer::{
    transformer_preset, ElementwiseKind, TransformerBlock, TRANSFORMER_PRESET_NAMES,
};
use tensorforge_core::{DType, Gemm};
use tensorforge_graph::fusion::{compile, Compiled, Program};
use tensorforge_graph::Graph;
use tensorforge_store::WorkloadIdentity;

/// The dtype string of every harness workload's identity.
pub const DTYPE: &str = "f32";

/// A kernel of the kernels crate with its problem size: the Core's model of it, which owns
/// its FLOPs and bytes ([`tensorforge_core::kernel`]).
pub use tensorforge_core::kernel::KernelWorkload;

/// Example graphs of `examples/graphs/` compiled into the binary, by name.
pub const BUILTIN_GRAPHS: &[(&str, &str)] = &[
    (
        "attention_softmax",
        include_str!("../data/graphs/attention_softmax.json"),
    ),
    (
        "elementwise_chain",
        include_str!("../data/graphs/elementwise_chain.json"),
    ),
    (
        "logaddexp_chain",
        include_str!("../data/graphs/logaddexp_chain.json"),
    ),
    (
        "residual_layernorm",
        include_str!("../data/graphs/residual_layernorm.json"),
    ),
    (
        "rmsnorm_swiglu_mlp",
        include_str!("../data/graphs/rmsnorm_swiglu_mlp.json"),
    ),
];

/// Which program of a compiled graph the executor runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GraphMode {
    /// The rewritten, fused program (the default).
    #[default]
    Fused,
    /// One kernel per op of the original graph, every tensor materialized.
    Unfused,
}

impl GraphMode {
    /// `fused` or `unfused`.
    pub fn label(self) -> &'static str {
        match self {
            GraphMode::Fused => "fused",
            GraphMode::Unfused => "unfused",
        }
    }

    fn parse(src: &str, v: &str) -> Result<GraphMode> {
        match v {
            "fused" => Ok(GraphMode::Fused),
            "unfused" => Ok(GraphMode::Unfused),
            _ => Err(bad(src, "mode", v, "one of fused, unfused")),
        }
    }
}

/// A graph of the graph compiler, run by its CPU executor in one mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphWorkload {
    /// Where the graph came from: a built-in name or a file path (not part of the identity).
    pub source: String,
    /// Fused or unfused program.
    pub mode: GraphMode,
    /// The parsed graph.
    pub graph: Graph,
}

impl GraphWorkload {
    /// A built-in example graph by name; an unknown name is an error listing the valid ones.
    pub fn builtin(src: &str, name: &str, mode: GraphMode) -> Result<GraphWorkload> {
        let text = BUILTIN_GRAPHS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| *t)
            .ok_or_else(|| {
                bad(
                    src,
                    "graph",
                    name,
                    &format!(
                        "unknown built-in graph; valid graphs: {} (or a path to a .json graph file)",
                        builtin_graph_names().join(", ")
                    ),
                )
            })?;
        GraphWorkload::from_json(src, name, text, mode)
    }

    /// A graph from a JSON file.
    pub fn from_file(src: &str, path: &std::path::Path, mode: GraphMode) -> Result<GraphWorkload> {
        let text = std::fs::read_to_string(path).map_err(|e| MeasureError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        GraphWorkload::from_json(src, &path.display().to_string(), &text, mode)
    }

    /// A graph from its JSON text; `source` is kept for display.
    pub fn from_json(
        src: &str,
        source: &str,
        text: &str,
        mode: GraphMode,
    ) -> Result<GraphWorkload> {
        let graph =
            Graph::from_json_str(text).map_err(|e| bad(src, "graph", source, &e.to_string()))?;
        Ok(GraphWorkload {
            source: source.into(),
            mode,
            graph,
        })
    }

    /// sha256 (64 lowercase hex digits) of the graph's canonical JSON: the parsed graph
    /// serialized with sorted keys and no whitespace, without its `name` and `description`
    /// (labels, not work), so the same graph from two files hashes equal.
    pub fn content_hash(&self) -> String {
        let mut v = serde_json::to_value(&self.graph).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.remove("name");
            o.remove("description");
        }
        let text = tensorforge_core::digest::canonical_json(&v);
        tensorforge_core::digest::sha256_hex(&[text.as_bytes()])
    }

    /// Validate, rewrite and fuse the graph.
    pub fn compile(&self, src: &str) -> Result<Compiled> {
        compile(&self.graph).map_err(|e| bad(src, "graph", &self.source, &e.to_string()))
    }

    /// The program this workload's mode runs.
    pub fn program(&self, src: &str) -> Result<Program> {
        let c = self.compile(src)?;
        Ok(match self.mode {
            GraphMode::Fused => c.fused,
            GraphMode::Unfused => c.unfused,
        })
    }

    fn check(&self, src: &str) -> Result<()> {
        let p = self.program(src)?;
        let tg = &p.graph;
        for (i, n) in tg.nodes.iter().enumerate() {
            if matches!(n.op, tensorforge_graph::Op::Opaque { .. }) {
                return Err(bad(
                    src,
                    "graph",
                    &self.source,
                    &format!(
                        "node `{}` is an Opaque op, which the executor cannot run",
                        n.name
                    ),
                ));
            }
            for &t in &tg.node_outputs[i] {
                if tg.tensors[t].dtype != DType::Fp32 {
                    return Err(bad(
                        src,
                        "graph",
                        &self.source,
                        &format!(
                            "tensor `{}` is {:?}; the CPU harness measures fp32 graphs only",
                            tg.tensors[t].name, tg.tensors[t].dtype
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Names of the built-in graphs.
pub fn builtin_graph_names() -> Vec<&'static str> {
    BUILTIN_GRAPHS.iter().map(|(n, _)| *n).collect()
}

/// JSON with object keys sorted at every level and no whitespace.
/// The kinds of work the harness runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadKind {
    /// A (batched) f32 GEMM `C = A·B` with faer.
    Gemm {
        /// Rows of A and C.
        m: u64,
        /// Columns of B and C.
        n: u64,
        /// Reduction dimension.
        k: u64,
        /// Independent GEMMs.
        batch: u64,
    },
    /// A 2-D convolution (NCHW) by im2col + faer GEMM; dtype is fp32.
    Conv2d(Conv2d),
    /// The attention part of a transformer block; dtype is fp32.
    Attention(TransformerBlock),
    /// A whole transformer block; dtype is fp32.
    Transformer(TransformerBlock),
    /// One kernel of the kernels crate.
    Kernel(KernelWorkload),
    /// A graph run by the graph compiler's CPU executor (fused or unfused).
    Graph(GraphWorkload),
    /// An empty call (measures the harness floor).
    Empty,
}

/// A named workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// Display name (not part of the identity).
    pub name: String,
    /// What to run.
    pub kind: WorkloadKind,
}

/// One operation of a workload as the Core model counts it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelOp {
    /// Operation name, e.g. `q_proj`, `softmax`.
    pub name: String,
    /// FLOPs per iteration, when the model counts them (None for kernels it does not model).
    pub flops: Option<f64>,
    /// Compulsory DRAM bytes per iteration.
    pub bytes: f64,
}

fn bad(src: &str, field: &str, value: impl ToString, reason: &str) -> MeasureError {
    MeasureError::invalid(src, field, value, reason)
}

pub(crate) fn fp32_gemm(m: u64, n: u64, k: u64, batch: u64) -> Gemm {
    Gemm {
        m,
        n,
        k,
        batch,
        dtype: DType::Fp32,
        accumulate: false,
    }
}

impl WorkloadSpec {
    /// A GEMM workload (batch 1 unless given), validated by the Core.
    pub fn gemm(name: &str, m: u64, n: u64, k: u64, batch: u64) -> Result<WorkloadSpec> {
        let s = WorkloadSpec {
            name: name.into(),
            kind: WorkloadKind::Gemm { m, n, k, batch },
        };
        s.validate(name)?;
        Ok(s)
    }

    /// The empty call used as the fixed floor.
    pub fn empty() -> WorkloadSpec {
        WorkloadSpec {
            name: "empty".into(),
            kind: WorkloadKind::Empty,
        }
    }

    /// Check sizes with the Core's validators and the harness's own limits; `src` names the
    /// file or argument in errors.
    pub fn validate(&self, src: &str) -> Result<()> {
        let wrap = |e: tensorforge_core::CoreError| {
            if src == self.name {
                MeasureError::Other(format!("workload `{src}`: {e}"))
            } else {
                MeasureError::Other(format!("{src}: workload `{}`: {e}", self.name))
            }
        };
        match &self.kind {
            WorkloadKind::Gemm { m, n, k, batch } => {
                fp32_gemm(*m, *n, *k, *batch).validate().map_err(wrap)?;
            }
            WorkloadKind::Conv2d(c) => c.validate().map_err(wrap)?,
            WorkloadKind::Attention(b) | WorkloadKind::Transformer(b) => {
                b.validate().map_err(wrap)?;
                b.decompose().map_err(wrap)?;
                // The harness runs the standard block only; refuse rather than measure a
                // different block than the model counts.
                for (field, set) in [
                    ("moe", b.moe.is_some()),
                    ("mla", b.mla.is_some()),
                    ("sliding_window", b.sliding_window.is_some()),
                    ("qkv_bias", b.qkv_bias),
                    ("o_bias", b.o_bias),
                    ("rotary_dims", b.rotary_dims.is_some()),
                    ("weight_dtype", b.weight_dtype.is_some()),
                    ("kv_dtype", b.kv_dtype.is_some()),
                    (
                        "attention_kernel",
                        b.attention_kernel
                            != tensorforge_core::transformer::AttentionKernel::Materialized,
                    ),
                ] {
                    if set {
                        return Err(bad(
                            src,
                            field,
                            "set",
                            "the harness runs dense f32 blocks with full, materialized attention and no biases only",
                        ));
                    }
                }
            }
            WorkloadKind::Kernel(k) => k.validate().map_err(|e| match e {
                tensorforge_core::CoreError::InvalidField {
                    field,
                    value,
                    reason,
                    ..
                } => bad(src, &field, value, &reason),
                other => wrap(other),
            })?,
            WorkloadKind::Graph(g) => g.check(src)?,
            WorkloadKind::Empty => {}
        }
        // The working set must be allocatable: refuse above 16 GiB rather than abort.
        let ws = self.working_set_bytes();
        if ws > (16u64 << 30) {
            return Err(bad(
                src,
                &self.name,
                format!("{ws} bytes"),
                "working set exceeds the harness limit of 16 GiB",
            ));
        }
        Ok(())
    }

    /// The identity: kind, canonical parameters and dtype `f32`.
    pub fn identity(&self) -> WorkloadIdentity {
        let (kind, params): (&str, BTreeMap<String, serde_json::Value>) = match &self.kind {
            WorkloadKind::Gemm { m, n, k, batch } => (
                "gemm",
                [("m", *m), ("n", *n), ("k", *k), ("batch", *batch)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
                    .collect(),
            ),
            WorkloadKind::Conv2d(c) => ("conv2d", object_without_dtype(c)),
            WorkloadKind::Attention(b) => ("attention", object_without_dtype(b)),
            WorkloadKind::Transformer(b) => ("transformer", object_without_dtype(b)),
            WorkloadKind::Kernel(k) => ("kernel", object_without_dtype(k)),
            WorkloadKind::Graph(g) => (
                "graph",
                [
                    ("graph_sha256", serde_json::json!(g.content_hash())),
                    ("mode", serde_json::json!(g.mode.label())),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            ),
            WorkloadKind::Empty => ("empty", BTreeMap::new()),
        };
        WorkloadIdentity {
            kind: kind.into(),
            name: self.name.clone(),
            params,
            dtype: DTYPE.into(),
        }
    }

    /// The Core model's operations for one iteration (FLOPs and compulsory bytes in f32).
    pub fn model_ops(&self) -> Result<Vec<ModelOp>> {
        let op = |name: &str, flops: Option<f64>, bytes: f64| ModelOp {
            name: name.into(),
            flops,
            bytes,
        };
        Ok(match &self.kind {
            WorkloadKind::Gemm { m, n, k, batch } => {
                let g = fp32_gemm(*m, *n, *k, *batch);
                vec![op(
                    "gemm",
                    Some(g.flops()? as f64),
                    g.compulsory_bytes()? as f64,
                )]
            }
            WorkloadKind::Conv2d(c) => {
                let c = fp32_conv(c);
                let bytes = c.input_bytes()? + c.weight_bytes()? + c.output_bytes()?;
                vec![op("conv2d", Some(c.flops()? as f64), bytes as f64)]
            }
            WorkloadKind::Attention(b) | WorkloadKind::Transformer(b) => {
                let attention_only = matches!(self.kind, WorkloadKind::Attention(_));
                let d = fp32_block(b).decompose()?;
                let mut ops = Vec::new();
                for g in &d.gemms {
                    if attention_only && !g.role.is_attention() {
                        continue;
                    }
                    ops.push(op(
                        &g.name,
                        Some(g.gemm.flops()? as f64),
                        g.gemm.compulsory_bytes()? as f64,
                    ));
                }
                for e in &d.non_gemm {
                    if attention_only && e.op != ElementwiseKind::Softmax {
                        continue;
                    }
                    ops.push(op(
                        &e.name,
                        (e.flops > 0).then_some(e.flops as f64),
                        (e.bytes_read + e.bytes_written) as f64,
                    ));
                }
                ops
            }
            WorkloadKind::Kernel(k) => vec![op(
                k.op_name(),
                k.flops()?.map(|f| f as f64),
                k.compulsory_bytes()? as f64,
            )],
            WorkloadKind::Graph(g) => {
                // The graph compiler's analytical counts, one operation per kernel (no
                // hardware spec: counting bytes and FLOPs needs no chip).
                let p = g.program(&self.name)?;
                tensorforge_graph::traffic::program_counts(&p)
                    .into_iter()
                    .map(|k| {
                        let what = k.pattern.clone().unwrap_or_else(|| k.kind.label().into());
                        op(
                            &format!("{} ({what})", k.name),
                            (k.flops > 0).then_some(k.flops as f64),
                            k.total_bytes as f64,
                        )
                    })
                    .collect()
            }
            WorkloadKind::Empty => vec![],
        })
    }

    /// Total FLOPs per iteration (None when no operation has a FLOP count).
    pub fn flops(&self) -> Result<Option<f64>> {
        let ops = self.model_ops()?;
        let with: Vec<f64> = ops.iter().filter_map(|o| o.flops).collect();
        Ok((!with.is_empty()).then(|| with.iter().sum()))
    }

    /// Total compulsory bytes per iteration (None for the empty call).
    pub fn bytes(&self) -> Result<Option<f64>> {
        let ops = self.model_ops()?;
        Ok((!ops.is_empty()).then(|| ops.iter().map(|o| o.bytes).sum()))
    }

    /// The same workload doing about `factor` (0 < factor ≤ 1) of the work: its outermost
    /// independent dimension (GEMM batch then `m`, a kernel's rows, tokens or elements, a
    /// convolution's batch then input height) multiplied by `factor`, rounded, at least 1.
    /// Every call runs the same code on smaller buffers (the inner dimensions that pick a
    /// kernel's code path are kept). `None` for kinds without such a dimension (graphs,
    /// transformer blocks, the empty call) or when `factor` leaves the workload unchanged.
    ///
    /// ```
    /// use tensorforge_measure::WorkloadSpec;
    /// let s = WorkloadSpec::gemm("g", 512, 256, 128, 1).unwrap();
    /// let t = s.scaled(0.125).unwrap().unwrap();
    /// // m = 512 · 0.125 = 64; n and k unchanged.
    /// assert_eq!(t, WorkloadSpec::gemm("g", 64, 256, 128, 1).unwrap());
    /// ```
    pub fn scaled(&self, factor: f64) -> Result<Option<WorkloadSpec>> {
        if !(factor.is_finite() && factor > 0.0 && factor <= 1.0) {
            return Err(bad(&self.name, "scale factor", factor, "must be in (0, 1]"));
        }
        let sc = |v: u64| ((v as f64 * factor).round() as u64).clamp(1, v.max(1));
        let su = |v: usize| sc(v as u64) as usize;
        let kind = match &self.kind {
            WorkloadKind::Gemm { m, n, k, batch } => {
                if *batch > 1 && sc(*batch) < *batch {
                    WorkloadKind::Gemm {
                        m: *m,
                        n: *n,
                        k: *k,
                        batch: sc(*batch),
                    }
                } else {
                    WorkloadKind::Gemm {
                        m: sc(*m),
                        n: *n,
                        k: *k,
                        batch: *batch,
                    }
                }
            }
            WorkloadKind::Conv2d(c) => {
                let mut c = c.clone();
                if c.batch > 1 && sc(c.batch) < c.batch {
                    c.batch = sc(c.batch);
                } else {
                    // At least one output row: the kernel's extent.
                    let extent = c.dilation_h.saturating_mul(c.kernel_h.saturating_sub(1)) + 1;
                    c.height = sc(c.height).max(extent).min(c.height);
                }
                WorkloadKind::Conv2d(c)
            }
            WorkloadKind::Kernel(k) => WorkloadKind::Kernel(match *k {
                KernelWorkload::Logaddexp { n } => KernelWorkload::Logaddexp { n: su(n) },
                KernelWorkload::Quantize { n } => KernelWorkload::Quantize { n: su(n) },
                KernelWorkload::Logsumexp { rows, cols } => KernelWorkload::Logsumexp {
                    rows: su(rows),
                    cols,
                },
                KernelWorkload::Softmax { rows, cols } => KernelWorkload::Softmax {
                    rows: su(rows),
                    cols,
                },
                KernelWorkload::RmsnormSwigluFused {
                    tokens,
                    d_model,
                    d_ff,
                } => KernelWorkload::RmsnormSwigluFused {
                    tokens: su(tokens),
                    d_model,
                    d_ff,
                },
                KernelWorkload::RmsnormSwigluUnfused {
                    tokens,
                    d_model,
                    d_ff,
                } => KernelWorkload::RmsnormSwigluUnfused {
                    tokens: su(tokens),
                    d_model,
                    d_ff,
                },
            }),
            WorkloadKind::Attention(_)
            | WorkloadKind::Transformer(_)
            | WorkloadKind::Graph(_)
            | WorkloadKind::Empty => return Ok(None),
        };
        if kind == self.kind {
            return Ok(None);
        }
        let s = WorkloadSpec {
            name: self.name.clone(),
            kind,
        };
        s.validate(&self.name)?;
        Ok(Some(s))
    }

    /// The instance as one line: its kind and canonical parameters, e.g.
    /// `gemm {"batch":1,"k":512,"m":64,"n":512}` (what a count says it counted).
    pub fn instance_label(&self) -> String {
        let id = self.identity();
        let params = serde_json::to_value(&id.params).unwrap_or_default();
        format!(
            "{} {}",
            id.kind,
            tensorforge_core::digest::canonical_json(&params)
        )
    }

    /// Bytes of every buffer one instance of the workload allocates (its working set).
    pub fn working_set_bytes(&self) -> u64 {
        crate::exec::buffer_elements(&self.kind).saturating_mul(4)
    }
}

pub(crate) fn fp32_conv(c: &Conv2d) -> Conv2d {
    Conv2d {
        dtype: DType::Fp32,
        ..c.clone()
    }
}

pub(crate) fn fp32_block(b: &TransformerBlock) -> TransformerBlock {
    TransformerBlock {
        dtype: DType::Fp32,
        ..b.clone()
    }
}

fn object_without_dtype<T: Serialize>(v: &T) -> BTreeMap<String, serde_json::Value> {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::Object(m)) => m
            .into_iter()
            .filter(|(k, v)| k != "dtype" && !v.is_null())
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// Every name form accepted by [`parse_workload`], for error messages and `--help`.
pub fn valid_names() -> Vec<String> {
    let mut v: Vec<String> = GEMM_PRESETS.iter().map(|p| p.0.to_string()).collect();
    v.extend(CONV2D_PRESET_NAMES.iter().map(|s| s.to_string()));
    v.extend(TRANSFORMER_PRESET_NAMES.iter().map(|s| s.to_string()));
    v.extend(
        TRANSFORMER_PRESET_NAMES
            .iter()
            .map(|s| format!("attention:{s}")),
    );
    v.push("gemm:m=M:n=N:k=K[:batch=B]".into());
    v.extend(
        [
            "kernel:logaddexp:n=N",
            "kernel:logsumexp:rows=R:cols=C",
            "kernel:softmax:rows=R:cols=C",
            "kernel:quantize:n=N",
            "kernel:rmsnorm_swiglu_fused:tokens=T:d_model=D:d_ff=F",
            "kernel:rmsnorm_swiglu_unfused:tokens=T:d_model=D:d_ff=F",
            "graph:NAME[:mode=fused|unfused] (NAME: a built-in graph or a .json graph file)",
            "empty",
            "a workload file (.toml)",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    v
}

fn unknown(name: &str) -> MeasureError {
    MeasureError::UnknownWorkload {
        name: name.into(),
        valid: valid_names().join(", "),
    }
}

/// `key=value` pairs of a colon form into a TOML table (values parsed as integers).
fn kv_table(name: &str, parts: &[&str]) -> Result<toml::Table> {
    let mut t = toml::Table::new();
    for p in parts {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| bad(name, p, p, "expected key=value"))?;
        let n: i64 = v
            .trim()
            .parse()
            .map_err(|_| bad(name, k, v, "must be a non-negative integer"))?;
        if n < 0 {
            return Err(bad(name, k, v, "must be a non-negative integer"));
        }
        t.insert(k.trim().to_string(), toml::Value::Integer(n));
    }
    Ok(t)
}

/// Parse one command-line workload name (not a file); errors list the valid names.
pub fn parse_workload_name(name: &str) -> Result<WorkloadSpec> {
    let n = name.trim();
    if let Some(&(p, m, nn, k)) = GEMM_PRESETS.iter().find(|p| p.0 == n) {
        return WorkloadSpec::gemm(p, m, nn, k, 1);
    }
    if CONV2D_PRESET_NAMES.contains(&n) {
        let c = conv2d_preset(n)?;
        return Ok(WorkloadSpec {
            name: n.into(),
            kind: WorkloadKind::Conv2d(fp32_conv(&c)),
        });
    }
    if TRANSFORMER_PRESET_NAMES.contains(&n) {
        return Ok(WorkloadSpec {
            name: n.into(),
            kind: WorkloadKind::Transformer(fp32_block(&transformer_preset(n)?)),
        });
    }
    if n == "empty" {
        return Ok(WorkloadSpec::empty());
    }
    let parts: Vec<&str> = n.split(':').collect();
    match parts.as_slice() {
        ["attention", p] if TRANSFORMER_PRESET_NAMES.contains(p) => Ok(WorkloadSpec {
            name: n.into(),
            kind: WorkloadKind::Attention(fp32_block(&transformer_preset(p)?)),
        }),
        ["gemm", rest @ ..] if !rest.is_empty() => {
            let mut t = kv_table(n, rest)?;
            t.insert("kind".into(), "gemm".into());
            spec_from_table(n, n, t, None)
        }
        ["graph", graph, rest @ ..] => {
            let mut mode = GraphMode::Fused;
            for p in rest {
                match p.split_once('=') {
                    Some(("mode", v)) => mode = GraphMode::parse(n, v.trim())?,
                    Some((k, v)) => {
                        return Err(bad(n, k, v, "unknown graph field; only mode=fused|unfused"))
                    }
                    None => return Err(bad(n, p, p, "expected key=value")),
                }
            }
            let g = if graph.ends_with(".json") {
                GraphWorkload::from_file(n, std::path::Path::new(graph), mode)?
            } else {
                GraphWorkload::builtin(n, graph, mode)?
            };
            let s = WorkloadSpec {
                name: n.into(),
                kind: WorkloadKind::Graph(g),
            };
            s.validate(n)?;
            Ok(s)
        }
        ["kernel", kernel, rest @ ..] => {
            let mut t = kv_table(n, rest)?;
            t.insert("kind".into(), "kernel".into());
            t.insert("kernel".into(), toml::Value::String(kernel.to_string()));
            spec_from_table(n, n, t, None)
        }
        _ => Err(unknown(n)),
    }
}

/// Parse a name or, when it names an existing file, every workload in that file.
pub fn parse_workload(arg: &str) -> Result<Vec<WorkloadSpec>> {
    let p = std::path::Path::new(arg);
    if p.is_file() || arg.ends_with(".toml") {
        let text = std::fs::read_to_string(p).map_err(|e| MeasureError::Io {
            path: arg.into(),
            message: e.to_string(),
        })?;
        return parse_workload_file_in(&text, arg, p.parent());
    }
    Ok(vec![parse_workload_name(arg)?])
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GemmEntry {
    m: u64,
    n: u64,
    k: u64,
    #[serde(default = "one")]
    batch: u64,
}

fn one() -> u64 {
    1
}

fn from_toml<T: serde::de::DeserializeOwned>(src: &str, t: toml::Table) -> Result<T> {
    toml::Value::Table(t)
        .try_into()
        .map_err(|e: toml::de::Error| MeasureError::Parse {
            source_name: src.into(),
            message: e.to_string().trim().replace('\n', " "),
        })
}

/// Strip a `dtype` key, accepting only fp32 (the harness measures f32).
fn take_dtype(src: &str, t: &mut toml::Table) -> Result<()> {
    if let Some(v) = t.remove("dtype") {
        let s = v.as_str().unwrap_or_default();
        if DType::parse(s).ok() != Some(DType::Fp32) {
            return Err(bad(src, "dtype", v, "the CPU harness measures fp32 only"));
        }
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphEntry {
    graph: Option<String>,
    path: Option<String>,
    #[serde(default)]
    mode: GraphMode,
}

/// Build a spec from one TOML table with a `kind` key; `src` names the entry in errors;
/// `base` is the directory relative graph `path`s are resolved against.
fn spec_from_table(
    src: &str,
    name: &str,
    mut t: toml::Table,
    base: Option<&std::path::Path>,
) -> Result<WorkloadSpec> {
    let kind = match t.remove("kind") {
        Some(toml::Value::String(s)) => s,
        Some(v) => return Err(bad(src, "kind", v, "must be a string")),
        None => {
            return Err(bad(
                src,
                "kind",
                "(missing)",
                "one of gemm, conv2d, attention, transformer, kernel, graph",
            ))
        }
    };
    let kind = match kind.as_str() {
        "gemm" => {
            take_dtype(src, &mut t)?;
            let g: GemmEntry = from_toml(src, t)?;
            WorkloadKind::Gemm {
                m: g.m,
                n: g.n,
                k: g.k,
                batch: g.batch,
            }
        }
        "conv2d" => {
            take_dtype(src, &mut t)?;
            let c: Conv2d = from_toml(src, t)?;
            WorkloadKind::Conv2d(fp32_conv(&c))
        }
        "attention" | "transformer" => {
            take_dtype(src, &mut t)?;
            let b: TransformerBlock = from_toml(src, t)?;
            if kind == "attention" {
                WorkloadKind::Attention(fp32_block(&b))
            } else {
                WorkloadKind::Transformer(fp32_block(&b))
            }
        }
        "kernel" => WorkloadKind::Kernel(from_toml(src, t)?),
        "graph" => {
            take_dtype(src, &mut t)?;
            let g: GraphEntry = from_toml(src, t)?;
            WorkloadKind::Graph(match (g.graph, g.path) {
                (Some(n), None) => GraphWorkload::builtin(src, &n, g.mode)?,
                (None, Some(p)) => {
                    let p = std::path::Path::new(&p);
                    let full = match base {
                        Some(b) if p.is_relative() => b.join(p),
                        _ => p.to_path_buf(),
                    };
                    GraphWorkload::from_file(src, &full, g.mode)?
                }
                (Some(_), Some(_)) => {
                    return Err(bad(
                        src,
                        "path",
                        "",
                        "give either `graph` or `path`, not both",
                    ))
                }
                (None, None) => {
                    return Err(bad(
                        src,
                        "graph",
                        "(missing)",
                        &format!(
                            "`graph` = a built-in graph ({}) or `path` = a .json graph file",
                            builtin_graph_names().join(", ")
                        ),
                    ))
                }
            })
        }
        other => {
            return Err(bad(
                src,
                "kind",
                other,
                "one of gemm, conv2d, attention, transformer, kernel, graph",
            ))
        }
    };
    let s = WorkloadSpec {
        name: name.into(),
        kind,
    };
    s.validate(src)?;
    Ok(s)
}

/// Parse a workload file: `[[workload]]` entries, each either `preset = "NAME"` (any name
/// [`parse_workload_name`] accepts) or `kind = ...` with that kind's fields, plus an optional
/// `name`. `source` (the file name) prefixes errors; an empty file is an error. Relative
/// graph `path`s resolve against the current directory.
pub fn parse_workload_file(text: &str, source: &str) -> Result<Vec<WorkloadSpec>> {
    parse_workload_file_in(text, source, None)
}

/// [`parse_workload_file`] with relative graph `path`s resolved against `base` (the workload
/// file's directory).
pub fn parse_workload_file_in(
    text: &str,
    source: &str,
    base: Option<&std::path::Path>,
) -> Result<Vec<WorkloadSpec>> {
    let mut doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| MeasureError::Parse {
            source_name: source.into(),
            message: e.to_string().trim().replace('\n', " "),
        })?;
    let entries = match doc.remove("workload") {
        Some(toml::Value::Array(a)) => a,
        Some(v) => {
            return Err(bad(
                source,
                "workload",
                v.type_str(),
                "must be an array of tables ([[workload]])",
            ))
        }
        None => {
            return Err(bad(
                source,
                "workload",
                "(missing)",
                "the file needs at least one [[workload]] entry",
            ))
        }
    };
    if let Some(k) = doc.keys().next() {
        return Err(bad(
            source,
            k,
            k,
            "unknown top-level key; only [[workload]] is read",
        ));
    }
    if entries.is_empty() {
        return Err(bad(source, "workload", "[]", "no workloads"));
    }
    let mut out = Vec::new();
    for (i, e) in entries.into_iter().enumerate() {
        let src = format!("{source}: workload[{i}]");
        let mut t = match e {
            toml::Value::Table(t) => t,
            v => return Err(bad(&src, "workload", v.type_str(), "must be a table")),
        };
        let name = match t.remove("name") {
            Some(toml::Value::String(s)) if !s.trim().is_empty() => Some(s),
            Some(v) => return Err(bad(&src, "name", v, "must be a non-empty string")),
            None => None,
        };
        let spec = if let Some(p) = t.remove("preset") {
            let p = p
                .as_str()
                .ok_or_else(|| bad(&src, "preset", &p, "must be a string"))?
                .to_string();
            if let Some(k) = t.keys().next() {
                return Err(bad(
                    &src,
                    k,
                    k,
                    "a preset entry takes only `preset` and `name`",
                ));
            }
            let mut s =
                parse_workload_name(&p).map_err(|e| bad(&src, "preset", &p, &e.to_string()))?;
            if let Some(n) = name {
                s.name = n;
            }
            s
        } else {
            let n = name.unwrap_or_else(|| format!("workload{i}"));
            spec_from_table(&src, &n, t, base)?
        };
        out.push(spec);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_forms_parse() {
        for n in [
            "gemm_tiny",
            "conv_spatial",
            "transformer_small",
            "attention:transformer_small",
            "gemm:m=4:n=5:k=6:batch=2",
            "kernel:softmax:rows=2:cols=8",
            "kernel:rmsnorm_swiglu_fused:tokens=2:d_model=4:d_ff=8",
            "empty",
        ] {
            let s = parse_workload_name(n).unwrap_or_else(|e| panic!("{n}: {e}"));
            assert_eq!(s.identity().dtype, "f32");
        }
    }

    #[test]
    fn gemm_identity_and_model() {
        let s = parse_workload_name("gemm_tiny").unwrap();
        let id = s.identity();
        assert_eq!(
            id.canonical_json(),
            r#"{"dtype":"f32","kind":"gemm","params":{"batch":1,"k":128,"m":128,"n":128}}"#
        );
        // 2·128³ = 4194304 FLOPs; 3·128²·4 B = 196608 bytes.
        assert_eq!(s.flops().unwrap(), Some(4194304.0));
        assert_eq!(s.bytes().unwrap(), Some(196608.0));
        // The same GEMM by form has the same fingerprint, whatever its name.
        let t = parse_workload_name("gemm:m=128:n=128:k=128").unwrap();
        assert_eq!(t.identity().fingerprint(), id.fingerprint());
    }

    #[test]
    fn unknown_and_bad_forms_error() {
        let e = parse_workload_name("gemm_huge").unwrap_err().to_string();
        assert!(
            e.contains("gemm_huge") && e.contains("gemm_tiny") && e.contains("kernel:softmax"),
            "{e}"
        );
        let e = parse_workload_name("kernel:softmax:rows=0:cols=4")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rows") && e.contains('0'), "{e}");
        let e = parse_workload_name("kernel:softmax:rows=x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rows") && e.contains('x'), "{e}");
        let e = parse_workload_name("kernel:softmax:rows=2:cols=3:depth=4")
            .unwrap_err()
            .to_string();
        assert!(e.contains("depth"), "{e}");
        assert!(parse_workload_name("kernel:nope:n=1").is_err());
        assert!(parse_workload_name("gemm:m=0:n=1:k=1").is_err());
    }

    #[test]
    fn files_parse_and_errors_name_entry_and_field() {
        let text = r#"
[[workload]]
name = "g"
kind = "gemm"
m = 8
n = 8
k = 8

[[workload]]
preset = "conv_pointwise"

[[workload]]
kind = "kernel"
kernel = "softmax"
rows = 2
cols = 4
"#;
        let v = parse_workload_file(text, "w.toml").unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[1].name, "conv_pointwise");
        let e = parse_workload_file(&text.replace("m = 8", "m = 0"), "w.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("w.toml") && e.contains("workload[0]") && e.contains('m'),
            "{e}"
        );
        let e = parse_workload_file(&text.replace("k = 8", "kk = 8"), "w.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("kk"), "{e}");
        assert!(parse_workload_file("[[workload]\n", "w.toml").is_err());
        assert!(parse_workload_file("", "w.toml").is_err());
        let e = parse_workload_file(
            &text.replace("kind = \"gemm\"", "kind = \"gemm\"\ndtype = \"fp16\""),
            "w.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("dtype") && e.contains("fp16"), "{e}");
    }

    #[test]
    fn blocks_the_harness_cannot_run_are_refused() {
        let mut b = transformer_preset("transformer_small").unwrap();
        b.sliding_window = Some(64);
        let s = WorkloadSpec {
            name: "w".into(),
            kind: WorkloadKind::Transformer(b),
        };
        let e = s.validate("w.toml").unwrap_err().to_string();
        assert!(e.contains("w.toml") && e.contains("sliding_window"), "{e}");
    }

    #[test]
    fn transformer_ops_come_from_the_decomposition() {
        let s = parse_workload_name("attention:transformer_small").unwrap();
        let names: Vec<String> = s.model_ops().unwrap().into_iter().map(|o| o.name).collect();
        assert!(
            names.contains(&"softmax".to_string()) && names.contains(&"attn_scores".to_string())
        );
        assert!(!names.contains(&"mlp_up".to_string()));
        let t = parse_workload_name("transformer_small").unwrap();
        assert!(t.model_ops().unwrap().len() > names.len());
    }

    #[test]
    fn graph_forms_parse_with_identity_and_traffic() {
        let f = parse_workload_name("graph:attention_softmax:mode=fused").unwrap();
        let d = parse_workload_name("graph:attention_softmax").unwrap();
        let u = parse_workload_name("graph:attention_softmax:mode=unfused").unwrap();
        let other = parse_workload_name("graph:residual_layernorm").unwrap();
        let id = f.identity();
        assert_eq!(id.kind, "graph");
        assert_eq!(id.dtype, "f32");
        assert_eq!(id.params["mode"], "fused");
        let h = id.params["graph_sha256"].as_str().unwrap().to_string();
        assert_eq!(h.len(), 64);
        // Stable across calls; the default mode is fused; modes and graphs differ.
        assert_eq!(f.identity().fingerprint(), id.fingerprint());
        assert_eq!(d.identity().fingerprint(), id.fingerprint());
        assert_ne!(u.identity().fingerprint(), id.fingerprint());
        assert_eq!(u.identity().params["graph_sha256"], h.as_str());
        assert_ne!(other.identity().params["graph_sha256"], h.as_str());
        // Bytes are the graph compiler's analytical traffic for the mode (examples/graphs:
        // fused 262148 B, unfused 790532 B); FLOPs its op count (2·4·64·64·32 for Q·Kᵀ plus
        // the softmax's).
        assert_eq!(f.bytes().unwrap(), Some(262148.0));
        assert_eq!(u.bytes().unwrap(), Some(790532.0));
        let fl = f.flops().unwrap().unwrap();
        assert!(fl > 2.0 * 4.0 * 64.0 * 64.0 * 32.0, "{fl}");
        // The rewrite turns the naive softmax into one Softmax op: other counts, same order.
        let ufl = u.flops().unwrap().unwrap();
        assert!(ufl > 2.0 * 4.0 * 64.0 * 64.0 * 32.0, "{ufl}");
        assert_eq!(f.model_ops().unwrap().len(), 2);
    }

    #[test]
    fn graph_hash_ignores_layout_and_labels_not_content() {
        let (_, text) = BUILTIN_GRAPHS
            .iter()
            .find(|(n, _)| *n == "logaddexp_chain")
            .unwrap();
        let base = GraphWorkload::builtin("t", "logaddexp_chain", GraphMode::Fused).unwrap();
        // Same graph, other whitespace, key order, name and description: same hash.
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["name"] = "renamed".into();
        v["description"] = "other words".into();
        let compact = serde_json::to_string(&v).unwrap();
        let same = GraphWorkload::from_json("t", "copy.json", &compact, GraphMode::Fused).unwrap();
        assert_eq!(same.content_hash(), base.content_hash());
        // Another size: another hash.
        let bigger = text.replace("[4096]", "[8192]");
        let diff = GraphWorkload::from_json("t", "big.json", &bigger, GraphMode::Fused).unwrap();
        assert_ne!(diff.content_hash(), base.content_hash());
    }

    #[test]
    fn graph_errors_name_the_valid_graphs() {
        let e = parse_workload_name("graph:nope").unwrap_err().to_string();
        assert!(
            e.contains("nope")
                && e.contains("attention_softmax")
                && e.contains("rmsnorm_swiglu_mlp"),
            "{e}"
        );
        let e = parse_workload_name("graph:attention_softmax:mode=half")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mode") && e.contains("half"), "{e}");
        let e = parse_workload_name("graph:attention_softmax:size=3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("size"), "{e}");
        assert!(parse_workload_name("graph:/nonexistent/g.json").is_err());
        // A non-fp32 graph is refused.
        let g = r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[8],"dtype":"bf16"}},
          {"name":"y","op":"Neg","inputs":["x"]}]}"#;
        let w = GraphWorkload::from_json("t", "g.json", g, GraphMode::Fused).unwrap();
        let s = WorkloadSpec {
            name: "g".into(),
            kind: WorkloadKind::Graph(w),
        };
        assert!(s.validate("t").unwrap_err().to_string().contains("fp32"));
    }

    #[test]
    fn graph_file_entries_take_name_or_path() {
        let d = std::env::temp_dir().join(format!("tf-measure-graph-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let (_, text) = BUILTIN_GRAPHS
            .iter()
            .find(|(n, _)| *n == "residual_layernorm")
            .unwrap();
        std::fs::write(d.join("rl.json"), text).unwrap();
        let toml = r#"
[[workload]]
name = "a"
kind = "graph"
graph = "residual_layernorm"

[[workload]]
name = "b"
kind = "graph"
path = "rl.json"
mode = "unfused"
"#;
        let f = d.join("w.toml");
        std::fs::write(&f, toml).unwrap();
        let v = parse_workload(f.to_str().unwrap()).unwrap();
        assert_eq!(v.len(), 2);
        let (a, b) = (v[0].identity(), v[1].identity());
        assert_eq!(a.params["graph_sha256"], b.params["graph_sha256"]);
        assert_eq!(
            (a.params["mode"].as_str(), b.params["mode"].as_str()),
            (Some("fused"), Some("unfused"))
        );
        // Both, neither, a bad mode and unknown keys are errors naming the entry.
        for (from, to, field) in [
            (
                "graph = \"residual_layernorm\"",
                "graph = \"x\"\npath = \"y.json\"",
                "path",
            ),
            ("graph = \"residual_layernorm\"", "", "graph"),
            ("mode = \"unfused\"", "mode = \"sideways\"", "sideways"),
            ("mode = \"unfused\"", "size = 3", "size"),
        ] {
            let e = parse_workload_file_in(&toml.replace(from, to), "w.toml", Some(&d))
                .unwrap_err()
                .to_string();
            assert!(e.contains("w.toml") && e.contains(field), "{e}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
