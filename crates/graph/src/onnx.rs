//! ONNX import: reads an `.onnx` file (protobuf, decoded in pure Rust with prost and
//! hand-written messages, see [`proto`]) into a [`Graph`] of the IR's ops.
//!
//! - Graph inputs (that are not initializers) become [`Op::Input`] with static shapes; a
//!   symbolic dim is bound by [`ImportOptions`] (the input's own shape, or the dim's name),
//!   and an unbound one is an error naming the input, the dim and how to bind it.
//! - Initializers and `Constant` nodes read as runtime tensors become [`Op::Weight`] (a
//!   one-element tensor becomes [`Op::Constant`] with its value); their data is kept, as
//!   f32, in [`OnnxImport::weights`] (fp16/bf16 through the `half` crate), so a model runs
//!   with its own weights. Constants read as parameters (reduce axes, reshape targets, `Pow` exponents,
//!   quantization scales) are folded into the op's attributes and create no node.
//! - Ops the IR models are mapped, each op family in a file of its own (`elementwise`,
//!   `reduce`, `shape`, `nn` with `einsum`, `quant`, `control`, `recurrent`; see docs/onnx.md
//!   for the table). Every other node, and
//!   every mapped node the IR rejects (for example a MatMul with broadcast batch dims),
//!   becomes [`Op::Opaque`] with the output shapes declared in the model's `value_info`,
//!   and is listed in [`OnnxImport::opaque`] with the reason. Nothing is dropped silently:
//!   approximations and renamings are listed in [`OnnxImport::notes`].
//! - External tensor data is read from the model's folder (see the `external` module): paths that
//!   leave it, offsets past the end and lengths that disagree with the dims are errors.
//! - Refused: files over [`MAX_FILE_BYTES`], more than
//!   [`MAX_NODES`] nodes, ranks over [`MAX_RANK`], tensors over [`MAX_ELEMENTS`] elements,
//!   names over [`MAX_NAME_BYTES`], and models whose decoded form would exceed
//!   [`DECODED_BYTES_PER_FILE_BYTE`] × the file size + [`DECODED_FLOOR_BYTES`] (at most
//!   [`MAX_DECODED_BYTES`]; checked by a wire-format pre-pass before decoding). A truncated
//!   or malformed file is a [`GraphError::Onnx`] naming the file, never a panic.

mod external;
mod fold;
pub mod proto;
mod scan;

use crate::error::{GraphError, Result};
use crate::ir::{DType, Graph, Node, Op, TensorInfo, TensorSpec};
use proto::tensor_shape_proto::dimension::Value as DimValue;
use proto::type_proto::Value as TypeValue;
use proto::{
    dt, AttributeProto, GraphProto, Message, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;

/// Imported graphs up to this many nodes are validated again as a whole, a cross-check of
/// the importer (see `import`).
const CROSS_CHECK_MAX_NODES: usize = 100_000;

/// Largest file accepted (2 GiB, the protobuf message limit).
pub const MAX_FILE_BYTES: u64 = 2 << 30;
/// Most nodes in the graph.
pub const MAX_NODES: u64 = 1_000_000;
/// Most elements of one tensor (2^40).
pub const MAX_ELEMENTS: u64 = 1 << 40;
/// Highest tensor rank.
pub const MAX_RANK: usize = 16;
/// Longest name (node, tensor, op type) in bytes.
pub const MAX_NAME_BYTES: usize = 4096;
/// Most values read from one constant tensor used as a parameter (axes, shapes, scalars).
pub const MAX_PARAM_VALUES: u64 = 1 << 20;
/// Most bytes the decoded protobuf messages may occupy (estimated before decoding).
pub const MAX_DECODED_BYTES: u64 = 4 << 30;
/// The decoded messages may occupy at most this many bytes per byte of the file (plus
/// [`DECODED_FLOOR_BYTES`]): memory stays proportional to the input's real size. Real
/// models stay far below: weights decode to their own size, a node-heavy graph to about
/// 10 bytes per file byte (see docs/onnx.md).
pub const DECODED_BYTES_PER_FILE_BYTE: u64 = 32;
/// Decoded bytes always allowed, whatever the file size.
pub const DECODED_FLOOR_BYTES: u64 = 64 << 20;

/// A node imported as [`Op::Opaque`] (or, when none of its outputs has an IR dtype, left
/// out of the graph), with the reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpaqueNode {
    /// Node name in the IR graph (the ONNX name, or `OpType_index` when it had none).
    pub name: String,
    /// ONNX op type (`domain::OpType` outside the default domain).
    pub op_type: String,
    /// Why it is not mapped to an IR op.
    pub reason: String,
}

/// The result of an import.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OnnxImport {
    /// The imported graph (validated).
    pub graph: Graph,
    /// Every node imported as opaque, in model order.
    pub opaque: Vec<OpaqueNode>,
    /// The default-domain opset version the model imports.
    pub opset: i64,
    /// `producer_name producer_version` of the model.
    pub producer: String,
    /// Approximations and renamings the import made (e.g. exact GELU mapped to the tanh
    /// form, a graph output that is an `Identity` of another tensor).
    pub notes: Vec<String>,
    /// The data of every [`Op::Weight`] of the graph (initializers and `Constant` tensors),
    /// by tensor name, as f32 (the executor's type).
    #[serde(skip)]
    pub weights: HashMap<String, Vec<f32>>,
    /// Each graph input's symbolic dim names (`dim_param`; `None` for a fixed dim), by input
    /// name: where [`crate::symdims::propagate`] starts.
    #[serde(default)]
    pub dim_params: BTreeMap<String, Vec<Option<String>>>,
    /// The value each symbolic dim name was bound to.
    #[serde(default)]
    pub dim_values: BTreeMap<String, usize>,
}

/// How to fix what the file leaves open: the value of each symbolic dim (`dim_param`), by
/// name, and the shape of graph inputs, by input name (a `run` takes them from its input
/// files). An input's listed shape binds each of its symbolic or unknown dims and must
/// agree with its fixed ones; a name in `dims` binds that `dim_param` wherever it appears.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// Symbolic dim values by `dim_param` name (`batch=2`).
    pub dims: std::collections::BTreeMap<String, usize>,
    /// Graph input shapes by input name.
    pub input_shapes: HashMap<String, Vec<usize>>,
}

/// Read and import an ONNX file (at most [`MAX_FILE_BYTES`] are read).
pub fn import_onnx_file(path: impl AsRef<Path>) -> Result<OnnxImport> {
    import_onnx_file_with(path, &ImportOptions::default())
}

/// [`import_onnx_file`] with symbolic dims bound by `options`.
pub fn import_onnx_file_with(
    path: impl AsRef<Path>,
    options: &ImportOptions,
) -> Result<OnnxImport> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let err = |detail: String| GraphError::Onnx {
        file: name.clone(),
        detail,
    };
    let file = std::fs::File::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| err(format!("cannot read: {e}")))?;
    let base = path
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."));
    import_bytes_in(&bytes, &name, Some(base), options)
}

/// Import an ONNX model from its bytes; `source_name` names it in errors. External tensor
/// data is refused (there is no model folder to read it from; use [`import_onnx_file`]).
pub fn import_onnx_bytes(bytes: &[u8], source_name: &str) -> Result<OnnxImport> {
    import_bytes_in(bytes, source_name, None, &ImportOptions::default())
}

fn import_bytes_in(
    bytes: &[u8],
    source_name: &str,
    base: Option<&Path>,
    options: &ImportOptions,
) -> Result<OnnxImport> {
    let err = |detail: String| GraphError::Onnx {
        file: source_name.to_string(),
        detail,
    };
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(err(format!(
            "file is larger than {MAX_FILE_BYTES} bytes (the import limit; ONNX files over 2 GiB use external data, which is refused)"
        )));
    }
    if bytes.is_empty() {
        return Err(err("file is empty (not an ONNX model)".into()));
    }
    let max_decoded = (bytes.len() as u64)
        .saturating_mul(DECODED_BYTES_PER_FILE_BYTE)
        .saturating_add(DECODED_FLOOR_BYTES)
        .min(MAX_DECODED_BYTES);
    scan::scan_model(bytes, MAX_NODES, max_decoded)
        .map_err(|e| err(format!("malformed or truncated protobuf: {e}")))?;
    let model = ModelProto::decode(bytes)
        .map_err(|e| err(format!("malformed or truncated protobuf: {e}")))?;
    import_model_with(&model, source_name, base, options)
}

/// Import a decoded model (external tensor data refused, as in [`import_onnx_bytes`]).
pub fn import_model(model: &ModelProto, source_name: &str) -> Result<OnnxImport> {
    import_model_in(model, source_name, None)
}

/// Import a decoded model whose external tensor data, if any, lies in folder `base`.
pub fn import_model_in(
    model: &ModelProto,
    source_name: &str,
    base: Option<&Path>,
) -> Result<OnnxImport> {
    import_model_with(model, source_name, base, &ImportOptions::default())
}

/// [`import_model_in`] with symbolic dims bound by `options`.
pub fn import_model_with(
    model: &ModelProto,
    source_name: &str,
    base: Option<&Path>,
    options: &ImportOptions,
) -> Result<OnnxImport> {
    let err = |detail: String| GraphError::Onnx {
        file: source_name.to_string(),
        detail,
    };
    let opset = model
        .opset_import
        .iter()
        .filter(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .max()
        .ok_or_else(|| {
            err("the model imports no opset of the default ONNX domain (opset_import is empty or truncated)".into())
        })?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| err("the model has no graph".into()))?;
    let producer = format!("{} {}", model.producer_name, model.producer_version)
        .trim()
        .to_string();
    check_names(graph).map_err(err)?;
    let mut imp = Importer::new(source_name, opset, graph);
    imp.base = base.map(Path::to_path_buf);
    imp.options = options.clone();
    imp.run()?;
    if !imp.shapeless.is_empty() {
        return Err(err(format!(
            "{}; and the file does not declare the output shapes of these ops ({}), so the rest of the graph cannot be typed: run ONNX shape inference (onnx.shape_inference.infer_shapes) with static input shapes first",
            missing_ops_line(&imp.opaque),
            imp.shapeless.first().cloned().unwrap_or_default()
        )));
    }
    let name = if graph.name.is_empty() {
        Path::new(source_name)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        graph.name.clone()
    };
    let g = Graph {
        description: format!(
            "Imported from ONNX `{source_name}` (producer `{producer}`, opset {opset}); {} opaque node(s).",
            imp.opaque.len()
        ),
        outputs: imp.outputs.clone(),
        ..Graph::new(name, std::mem::take(&mut imp.nodes))
    };
    // Every lowered node was inferred against its inputs' specs when it was added
    // (`Importer::check`), names were made unique and inputs resolve only to known tensors,
    // so the whole-graph validation is a cross-check of the importer itself. It runs on
    // graphs up to CROSS_CHECK_MAX_NODES (every test model and fuzz input, in any build
    // profile) and is skipped above, where it cost a third of importing a million-node model
    // and every consumer (`compile`, the planner) validates anyway.
    if g.nodes.len() <= CROSS_CHECK_MAX_NODES {
        g.validate().map_err(|e| {
            err(format!(
                "internal: the imported graph does not validate: {e}"
            ))
        })?;
    }
    Ok(OnnxImport {
        graph: g,
        opaque: imp.opaque,
        opset,
        producer,
        notes: imp.notes,
        weights: imp.weights,
        dim_params: imp.dim_params,
        dim_values: imp.dim_values,
    })
}

impl OnnxImport {
    /// Each graph output's dims as a user reads them: the symbolic names of the inputs
    /// carried through the graph (`[batch, sequence, 64]`, `batch·sequence` for a merged
    /// dim), or the size where no name scales a dim ([`crate::symdims`]).
    pub fn output_dims(&self) -> Result<Vec<(String, Vec<String>)>> {
        let tg = self.graph.validate()?;
        let labels = crate::symdims::propagate(&tg, &self.dim_params, &self.dim_values);
        Ok(tg
            .outputs
            .iter()
            .map(|&t| {
                let shape = &tg.tensors[t].shape;
                let dims = labels[t]
                    .iter()
                    .zip(shape)
                    .map(|(l, &n)| l.render(n, &self.dim_values))
                    .collect();
                (tg.tensors[t].name.clone(), dims)
            })
            .collect())
    }

    /// `Ok` when every node can run; otherwise one error listing every op TensorForge lacks
    /// (or cannot lower in the form used) and the nodes using it: `GatherND` ×1
    /// (`node_GatherND_38`: reason), `IsNaN` ×2 (...), so a user sees the whole gap at once.
    pub fn require_runnable(&self, source_name: &str) -> Result<()> {
        if self.opaque.is_empty() {
            return Ok(());
        }
        Err(GraphError::Onnx {
            file: source_name.to_string(),
            detail: format!("cannot run: {}", missing_ops_line(&self.opaque)),
        })
    }
}

/// One line naming every op among `opaque` that TensorForge lacks (or cannot lower in the
/// form used) with its count, up to three of its nodes and the first node's reason; nodes
/// left opaque only because they read such an op's output are counted, not listed.
pub fn missing_ops_line(opaque: &[OpaqueNode]) -> String {
    let (downstream, primary): (Vec<&OpaqueNode>, Vec<&OpaqueNode>) = opaque
        .iter()
        .partition(|o| o.reason.starts_with(DEPENDS_ON));
    let mut by_op: Vec<(&str, Vec<&OpaqueNode>)> = Vec::new();
    for o in primary {
        match by_op.iter_mut().find(|(k, _)| *k == o.op_type) {
            Some((_, v)) => v.push(o),
            None => by_op.push((&o.op_type, vec![o])),
        }
    }
    let list: Vec<String> = by_op
        .iter()
        .map(|(op, nodes)| {
            let shown: Vec<String> = nodes
                .iter()
                .take(3)
                .map(|n| format!("`{}`", n.name))
                .collect();
            let more = if nodes.len() > 3 {
                format!(", +{} more", nodes.len() - 3)
            } else {
                String::new()
            };
            format!(
                "`{op}` x{} ({}{more}: {})",
                nodes.len(),
                shown.join(", "),
                nodes[0].reason
            )
        })
        .collect();
    let tail = if downstream.is_empty() {
        String::new()
    } else {
        format!(
            " (and {} node(s) that read their outputs)",
            downstream.len()
        )
    };
    format!(
        "{} op(s) TensorForge cannot execute: {}{tail}",
        by_op.len(),
        list.join("; ")
    )
}

fn check_names(g: &GraphProto) -> std::result::Result<(), String> {
    let check = |what: &str, s: &str| {
        if s.len() > MAX_NAME_BYTES {
            Err(format!(
                "{what} `{}…` is {} bytes long (limit {MAX_NAME_BYTES})",
                s.chars().take(40).collect::<String>(),
                s.len()
            ))
        } else {
            Ok(())
        }
    };
    check("graph name", &g.name)?;
    for n in &g.node {
        check("node name", &n.name)?;
        check("op type", &n.op_type)?;
        check("domain", &n.domain)?;
        for t in n.input.iter().chain(&n.output) {
            check("tensor name", t)?;
        }
    }
    for t in &g.initializer {
        check("initializer name", &t.name)?;
    }
    for v in g.input.iter().chain(&g.output).chain(&g.value_info) {
        check("value name", &v.name)?;
    }
    Ok(())
}

/// The IR dtype of an ONNX data type code, if the IR has one.
pub fn dtype_of(code: i32) -> Option<DType> {
    Some(match code {
        dt::FLOAT => DType::Fp32,
        dt::FLOAT16 => DType::Fp16,
        dt::BFLOAT16 => DType::Bf16,
        dt::FLOAT8E4M3FN | dt::FLOAT8E4M3FNUZ | dt::FLOAT8E5M2 | dt::FLOAT8E5M2FNUZ => DType::Fp8,
        dt::INT8 => DType::Int8,
        dt::INT4 => DType::Int4,
        dt::INT32 => DType::Int32,
        dt::INT64 => DType::Int64,
        dt::BOOL => DType::Bool,
        _ => return None,
    })
}

fn check_dims(dims: &[i64]) -> std::result::Result<Vec<usize>, String> {
    if dims.len() > MAX_RANK {
        return Err(format!("rank {} exceeds the limit {MAX_RANK}", dims.len()));
    }
    let mut n: u64 = 1;
    let mut out = Vec::with_capacity(dims.len());
    for (i, &d) in dims.iter().enumerate() {
        if d < 0 {
            return Err(format!("dim {i} is negative ({d})"));
        }
        n = n
            .checked_mul(d as u64)
            .filter(|&n| n <= MAX_ELEMENTS)
            .ok_or_else(|| {
                format!("dims {dims:?} exceed {MAX_ELEMENTS} elements (the import limit)")
            })?;
        out.push(usize::try_from(d).map_err(|_| format!("dim {i} ({d}) does not fit in usize"))?);
    }
    Ok(out)
}

/// Shape of a tensor proto, refusing external data and checking the limits.
fn tensor_shape(t: &TensorProto) -> std::result::Result<Vec<usize>, String> {
    if t.data_location == 1 || !t.external_data.is_empty() {
        let loc = t
            .external_data
            .iter()
            .find(|e| e.key == "location")
            .map(|e| format!(" (location `{}`)", e.value))
            .unwrap_or_default();
        return Err(format!(
            "tensor `{}` keeps its data in an external file{loc}, which is read only for \
             initializers of a model imported from a file (import the .onnx file from its \
             folder, or re-save it with onnx.save_model(m, path, save_as_external_data=False))",
            t.name
        ));
    }
    check_dims(&t.dims).map_err(|e| format!("tensor `{}`: {e}", t.name))
}

fn shape_of_value_info(vi: &ValueInfoProto) -> std::result::Result<(Vec<usize>, i32), String> {
    let tt = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(TypeValue::TensorType(tt)) => tt,
        None => return Err(format!("`{}` has no tensor type", vi.name)),
    };
    let shape = tt
        .shape
        .as_ref()
        .ok_or_else(|| format!("`{}` has no shape (unknown rank)", vi.name))?;
    let mut dims = Vec::with_capacity(shape.dim.len().min(MAX_RANK + 1));
    if shape.dim.len() > MAX_RANK {
        return Err(format!(
            "`{}` has rank {} (limit {MAX_RANK})",
            vi.name,
            shape.dim.len()
        ));
    }
    for (i, d) in shape.dim.iter().enumerate() {
        match &d.value {
            Some(DimValue::DimValue(v)) => dims.push(*v),
            Some(DimValue::DimParam(p)) => {
                return Err(format!(
                    "`{}` dim {i} is symbolic (`{p}`); the IR needs static shapes: fix the dim \
                     before importing (e.g. onnxruntime's `make_dynamic_shape_fixed` or \
                     `onnx.tools.update_model_dims`)",
                    vi.name
                ))
            }
            None => return Err(format!("`{}` dim {i} has no value (unknown size)", vi.name)),
        }
    }
    let dims = check_dims(&dims).map_err(|e| format!("`{}`: {e}", vi.name))?;
    Ok((dims, tt.elem_type))
}

/// A graph input's shape and element type, its symbolic or unknown dims bound by `opts`
/// (the input's own shape first, then the dim's name).
fn input_shape(
    vi: &ValueInfoProto,
    opts: &ImportOptions,
) -> std::result::Result<(Vec<usize>, i32), String> {
    let tt = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(TypeValue::TensorType(tt)) => tt,
        None => return Err(format!("`{}` has no tensor type", vi.name)),
    };
    let shape = tt
        .shape
        .as_ref()
        .ok_or_else(|| format!("`{}` has no shape (unknown rank)", vi.name))?;
    if shape.dim.len() > MAX_RANK {
        return Err(format!(
            "`{}` has rank {} (limit {MAX_RANK})",
            vi.name,
            shape.dim.len()
        ));
    }
    let given = opts.input_shapes.get(&vi.name);
    if let Some(g) = given {
        if g.len() != shape.dim.len() {
            return Err(format!(
                "`{}` has rank {} in the model but the given input has shape {g:?}",
                vi.name,
                shape.dim.len()
            ));
        }
    }
    let mut dims = Vec::with_capacity(shape.dim.len());
    for (i, d) in shape.dim.iter().enumerate() {
        let from_input = given.map(|g| g[i]);
        let v = match &d.value {
            Some(DimValue::DimValue(v)) => {
                if let Some(g) = from_input {
                    if i64::try_from(g).ok() != Some(*v) {
                        return Err(format!(
                            "`{}` dim {i} is {v} in the model but the given input has {g}",
                            vi.name
                        ));
                    }
                }
                *v
            }
            Some(DimValue::DimParam(p)) => match from_input.or_else(|| opts.dims.get(p).copied()) {
                Some(g) => i64::try_from(g).map_err(|_| format!("`{}` dim {i}: too large", vi.name))?,
                None => {
                    return Err(format!(
                        "`{}` dim {i} is symbolic (`{p}`); give its value (`--dim {p}=N`) or the input itself (`--inputs DIR` with {}.npy)",
                        vi.name, vi.name
                    ))
                }
            },
            None => match from_input {
                Some(g) => i64::try_from(g).map_err(|_| format!("`{}` dim {i}: too large", vi.name))?,
                None => {
                    return Err(format!(
                        "`{}` dim {i} has no value (unknown size); give the input itself (`--inputs DIR` with {}.npy)",
                        vi.name, vi.name
                    ))
                }
            },
        };
        dims.push(v);
    }
    let dims = check_dims(&dims).map_err(|e| format!("`{}`: {e}", vi.name))?;
    Ok((dims, tt.elem_type))
}

/// Values of a constant tensor read as a parameter.
#[derive(Debug, Clone)]
enum Vals {
    Int(Vec<i64>),
    Float(Vec<f64>),
}

impl Vals {
    fn len(&self) -> usize {
        match self {
            Vals::Int(v) => v.len(),
            Vals::Float(v) => v.len(),
        }
    }
    fn f64_at(&self, i: usize) -> f64 {
        match self {
            Vals::Int(v) => v[i] as f64,
            Vals::Float(v) => v[i],
        }
    }
    fn ints(self) -> std::result::Result<Vec<i64>, String> {
        match self {
            Vals::Int(v) => Ok(v),
            Vals::Float(_) => Err("must be an integer tensor".into()),
        }
    }
}

/// IEEE binary16 bits to f32 (the `half` crate).
fn f16_to_f32(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

/// bfloat16 bits to f32 (the `half` crate).
fn bf16_to_f32(h: u16) -> f32 {
    half::bf16::from_bits(h).to_f32()
}

/// Bytes per element in `raw_data` of the numeric types the importer reads.
fn raw_elem_bytes(d: i32) -> Option<usize> {
    match d {
        dt::FLOAT | dt::INT32 => Some(4),
        dt::DOUBLE | dt::INT64 => Some(8),
        dt::INT8 | dt::UINT8 | dt::BOOL => Some(1),
        dt::INT16 | dt::UINT16 | dt::FLOAT16 | dt::BFLOAT16 => Some(2),
        _ => None,
    }
}

/// The data of a weight tensor as f32 (the executor's type): fp32, fp64, fp16, bf16, int8,
/// uint8, int16, uint16, int32, int64 and bool, from `raw_data` or the typed fields. Every
/// value count is checked against the dims before anything is allocated, and the
/// allocation is fallible, so memory stays bounded by the file's real size (at most 4× for
/// 1-byte types).
fn weight_values(t: &TensorProto) -> std::result::Result<Vec<f32>, String> {
    let shape = tensor_shape(t)?;
    let n = shape
        .iter()
        .try_fold(1usize, |a, d| a.checked_mul(*d))
        .ok_or_else(|| format!("tensor `{}`: dims {:?} overflow", t.name, t.dims))?;
    let d = t.data_type;
    let unsupported = || {
        format!(
            "weight `{}` has data type {}, which the executor does not read",
            t.name,
            dt::name(d)
        )
    };
    let (have, bytes_ok) = if !t.raw_data.is_empty() {
        let Some(size) = raw_elem_bytes(d) else {
            return Err(unsupported());
        };
        (
            t.raw_data.len() / size,
            t.raw_data.len().is_multiple_of(size),
        )
    } else {
        let len = match d {
            dt::FLOAT => t.float_data.len(),
            dt::DOUBLE => t.double_data.len(),
            dt::INT64 => t.int64_data.len(),
            dt::INT32
            | dt::INT8
            | dt::UINT8
            | dt::INT16
            | dt::UINT16
            | dt::BOOL
            | dt::FLOAT16
            | dt::BFLOAT16 => t.int32_data.len(),
            _ => return Err(unsupported()),
        };
        (len, true)
    };
    if have != n || !bytes_ok {
        return Err(format!(
            "weight `{}`: holds {} values ({} bytes of raw_data), its dims {:?} of {} need {n}",
            t.name,
            have,
            t.raw_data.len(),
            t.dims,
            dt::name(d)
        ));
    }
    let mut out: Vec<f32> = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| format!("weight `{}`: cannot allocate {n} values", t.name))?;
    if !t.raw_data.is_empty() {
        let r = &t.raw_data;
        match d {
            dt::FLOAT => out.extend(
                r.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            ),
            dt::DOUBLE => out.extend(r.chunks_exact(8).map(|b| {
                f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32
            })),
            dt::INT64 => out.extend(r.chunks_exact(8).map(|b| {
                i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32
            })),
            dt::INT32 => out.extend(
                r.chunks_exact(4)
                    .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32),
            ),
            dt::INT16 => out.extend(
                r.chunks_exact(2)
                    .map(|b| f32::from(i16::from_le_bytes([b[0], b[1]]))),
            ),
            dt::UINT16 => out.extend(
                r.chunks_exact(2)
                    .map(|b| f32::from(u16::from_le_bytes([b[0], b[1]]))),
            ),
            dt::FLOAT16 => out.extend(
                r.chunks_exact(2)
                    .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]]))),
            ),
            dt::BFLOAT16 => out.extend(
                r.chunks_exact(2)
                    .map(|b| bf16_to_f32(u16::from_le_bytes([b[0], b[1]]))),
            ),
            dt::INT8 => out.extend(r.iter().map(|b| f32::from(*b as i8))),
            _ => out.extend(r.iter().map(|b| f32::from(*b))),
        }
    } else {
        match d {
            dt::FLOAT => out.extend_from_slice(&t.float_data),
            dt::DOUBLE => out.extend(t.double_data.iter().map(|v| *v as f32)),
            dt::INT64 => out.extend(t.int64_data.iter().map(|v| *v as f32)),
            dt::FLOAT16 => out.extend(t.int32_data.iter().map(|v| f16_to_f32(*v as u16))),
            dt::BFLOAT16 => out.extend(t.int32_data.iter().map(|v| bf16_to_f32(*v as u16))),
            _ => out.extend(t.int32_data.iter().map(|v| *v as f32)),
        }
    }
    Ok(out)
}

/// Decode a (small) constant tensor's values.
fn tensor_values(t: &TensorProto) -> std::result::Result<Vals, String> {
    let shape = tensor_shape(t)?;
    let n = shape.iter().product::<usize>() as u64;
    if n > MAX_PARAM_VALUES {
        return Err(format!(
            "tensor `{}` has {n} elements; at most {MAX_PARAM_VALUES} are read as a parameter",
            t.name
        ));
    }
    let n = n as usize;
    let d = t.data_type;
    let unsupported = || {
        format!(
            "tensor `{}` has data type {}, which is not read as a parameter",
            t.name,
            dt::name(d)
        )
    };
    let vals = if !t.raw_data.is_empty() {
        let Some(size) = raw_elem_bytes(d) else {
            return Err(unsupported());
        };
        if t.raw_data.len() != n * size {
            return Err(format!(
                "tensor `{}`: raw_data has {} bytes, its dims {:?} of {} need {}",
                t.name,
                t.raw_data.len(),
                t.dims,
                dt::name(d),
                n * size
            ));
        }
        let c = t.raw_data.chunks_exact(size);
        match d {
            dt::FLOAT => Vals::Float(
                c.map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
                    .collect(),
            ),
            dt::DOUBLE => Vals::Float(
                c.map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                    .collect(),
            ),
            dt::INT64 => Vals::Int(
                c.map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                    .collect(),
            ),
            dt::INT32 => Vals::Int(
                c.map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                    .collect(),
            ),
            dt::INT8 => Vals::Int(c.map(|b| i64::from(b[0] as i8)).collect()),
            dt::UINT8 | dt::BOOL => Vals::Int(c.map(|b| i64::from(b[0])).collect()),
            dt::INT16 => Vals::Int(
                c.map(|b| i64::from(i16::from_le_bytes([b[0], b[1]])))
                    .collect(),
            ),
            dt::UINT16 => Vals::Int(
                c.map(|b| i64::from(u16::from_le_bytes([b[0], b[1]])))
                    .collect(),
            ),
            dt::FLOAT16 => Vals::Float(
                c.map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])) as f64)
                    .collect(),
            ),
            _ => Vals::Float(
                c.map(|b| bf16_to_f32(u16::from_le_bytes([b[0], b[1]])) as f64)
                    .collect(),
            ),
        }
    } else {
        match d {
            dt::FLOAT => Vals::Float(t.float_data.iter().map(|&v| v as f64).collect()),
            dt::DOUBLE => Vals::Float(t.double_data.clone()),
            dt::INT64 => Vals::Int(t.int64_data.clone()),
            dt::INT32 | dt::INT8 | dt::UINT8 | dt::INT16 | dt::UINT16 | dt::BOOL => {
                Vals::Int(t.int32_data.iter().map(|&v| i64::from(v)).collect())
            }
            dt::FLOAT16 => Vals::Float(
                t.int32_data
                    .iter()
                    .map(|&v| f16_to_f32(v as u16) as f64)
                    .collect(),
            ),
            dt::BFLOAT16 => Vals::Float(
                t.int32_data
                    .iter()
                    .map(|&v| bf16_to_f32(v as u16) as f64)
                    .collect(),
            ),
            _ => return Err(unsupported()),
        }
    };
    if vals.len() != n {
        return Err(format!(
            "tensor `{}`: holds {} values, its dims {:?} need {n}",
            t.name,
            vals.len(),
            t.dims
        ));
    }
    Ok(vals)
}

fn attr<'n>(np: &'n NodeProto, name: &str) -> Option<&'n AttributeProto> {
    np.attribute.iter().find(|a| a.name == name)
}
fn attr_i(np: &NodeProto, name: &str) -> Option<i64> {
    attr(np, name).map(|a| a.i)
}
fn attr_f(np: &NodeProto, name: &str) -> Option<f64> {
    attr(np, name).map(|a| f64::from(a.f))
}
fn attr_s(np: &NodeProto, name: &str) -> Option<String> {
    attr(np, name).map(|a| String::from_utf8_lossy(&a.s).into_owned())
}
fn attr_ints<'n>(np: &'n NodeProto, name: &str) -> Option<&'n [i64]> {
    attr(np, name).map(|a| a.ints.as_slice())
}

/// A constant input read as a parameter: its values and ONNX data type, or why not.
type Param = std::result::Result<(Vals, i32), String>;

/// How one ONNX node lowers.
enum Lowering<'a> {
    /// IR nodes; the last produces the ONNX node's first output.
    Nodes(Vec<Node>),
    /// The output is another name for this tensor.
    Alias(String),
    /// The output is a constant tensor (a `Constant` node).
    Static(Cow<'a, TensorProto>),
    /// Not mapped: the reason.
    Opaque(String),
}

/// Early return of an opaque lowering from inside `lower` or an op family's lowering.
macro_rules! opaque {
    ($($t:tt)*) => {
        return Ok(Lowering::Opaque(format!($($t)*)))
    };
}

/// The runtime inputs `$it` of node `$np`, resolved, or an early opaque return naming why
/// one has no IR form.
macro_rules! inputs {
    ($imp:expr, $np:expr, $it:expr) => {
        match $imp.rt_inputs($np, $it)? {
            Ok(v) => v,
            Err(why) => opaque!("{why}"),
        }
    };
}

/// An early opaque return unless node `$np` has exactly `$k` inputs, none empty.
macro_rules! arity {
    ($np:expr, $k:expr) => {
        if $np.input.iter().filter(|s| !s.is_empty()).count() != $k || $np.input.len() != $k {
            opaque!("expects {} input(s), has {}", $k, $np.input.len());
        }
    };
}

// The op families (after the macros above, which they use).
mod attention;
mod control;
mod einsum;
mod elementwise;
mod nn;
mod quant;
mod recurrent;
mod reduce;
mod shape;

/// The nodes of a lowering that needs several (an unrolled recurrence, an Einsum), each named
/// `<node>#<k>` with its one output named alike.
struct Emit {
    prefix: String,
    k: usize,
    nodes: Vec<Node>,
}

impl Emit {
    fn new(prefix: &str) -> Emit {
        Emit {
            prefix: prefix.to_string(),
            k: 0,
            nodes: vec![],
        }
    }

    /// Add a node applying `op` to `inputs`; its output's name.
    fn op(&mut self, op: Op, inputs: &[&str]) -> String {
        let out = format!("{}#{}", self.prefix, self.k);
        self.k += 1;
        self.nodes.push(Node {
            name: out.clone(),
            op,
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![out.clone()],
        });
        out
    }

    /// `x[.., lo:hi]` along `axis`.
    fn slice(&mut self, x: &str, axis: i64, lo: usize, hi: usize) -> String {
        self.op(
            Op::Slice {
                starts: vec![lo as i64],
                ends: vec![hi as i64],
                axes: vec![axis],
                steps: vec![1],
            },
            &[x],
        )
    }

    /// `x` viewed with `shape`.
    fn reshape(&mut self, x: &str, shape: &[usize]) -> String {
        self.op(
            Op::Reshape {
                shape: shape.iter().map(|&d| d as i64).collect(),
            },
            &[x],
        )
    }

    /// Rename the last node's output to `name` (a graph-visible output of the ONNX node).
    fn name_last(&mut self, name: &str) {
        if let Some(n) = self.nodes.last_mut() {
            n.outputs = vec![name.to_string()];
        }
    }

    /// The nodes, the last one writing `out` under the ONNX node's name.
    fn finish(mut self, name: &str, out: &str) -> Vec<Node> {
        if let Some(n) = self.nodes.last_mut() {
            n.name = name.to_string();
            n.outputs = vec![out.to_string()];
        }
        self.nodes
    }
}

/// One IR node named `name` writing `out`.
fn one<'a>(name: &str, out: &str, op: Op, inputs: Vec<String>) -> Lowering<'a> {
    Lowering::Nodes(vec![Node {
        name: name.to_string(),
        op,
        inputs,
        outputs: vec![out.to_string()],
    }])
}

struct Importer<'a> {
    src: String,
    /// The model's folder, where external tensor data is read from (`None`: refused).
    base: Option<std::path::PathBuf>,
    opset: i64,
    g: &'a GraphProto,
    nodes: Vec<Node>,
    outputs: Vec<String>,
    used: FxHashSet<String>,
    /// Runtime tensors present in `nodes`.
    specs: FxHashMap<String, TensorSpec>,
    /// Constant tensors (initializers, `Constant` outputs), materialized on first runtime use.
    statics: FxHashMap<String, Cow<'a, TensorProto>>,
    /// Tensors that exist in the model but not in the IR, with the reason.
    unavailable: FxHashMap<String, String>,
    alias: FxHashMap<String, String>,
    declared: FxHashMap<&'a str, &'a ValueInfoProto>,
    opaque: Vec<OpaqueNode>,
    notes: Vec<String>,
    /// Data of every Weight node, by tensor name.
    weights: HashMap<String, Vec<f32>>,
    /// Bindings of symbolic dims.
    options: ImportOptions,
    /// Each graph input's `dim_param`s, and the values they were bound to.
    dim_params: BTreeMap<String, Vec<Option<String>>>,
    dim_values: BTreeMap<String, usize>,
    /// Why an opaque node's output shape is unknown, one entry per such output.
    shapeless: Vec<String>,
}

/// How the reason of a node left opaque because an input comes from an opaque node begins.
const DEPENDS_ON: &str = "reads the output of opaque node";

impl<'a> Importer<'a> {
    /// Remember `vi`'s symbolic dim names and the sizes they were bound to (`shape`); a name
    /// bound to two sizes gets a note and no label.
    fn record_dim_params(&mut self, vi: &ValueInfoProto, shape: &[usize]) {
        let Some(TypeValue::TensorType(tt)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref())
        else {
            return;
        };
        let Some(sp) = tt.shape.as_ref() else { return };
        let mut names = Vec::with_capacity(shape.len());
        for (d, &n) in sp.dim.iter().zip(shape) {
            let p = match &d.value {
                Some(DimValue::DimParam(p)) if !p.is_empty() => p.clone(),
                _ => {
                    names.push(None);
                    continue;
                }
            };
            match self.dim_values.get(&p) {
                Some(&v) if v != n => {
                    self.notes.push(format!(
                        "symbolic dim `{p}` is {v} in one input but {n} in `{}`: it is not carried as a name",
                        vi.name
                    ));
                    names.push(None);
                    continue;
                }
                _ => {
                    self.dim_values.insert(p.clone(), n);
                }
            }
            names.push(Some(p));
        }
        self.dim_params.insert(vi.name.clone(), names);
    }

    fn new(src: &str, opset: i64, g: &'a GraphProto) -> Self {
        let mut declared = FxHashMap::default();
        for v in g.value_info.iter().chain(&g.output).chain(&g.input) {
            declared.entry(v.name.as_str()).or_insert(v);
        }
        Importer {
            src: src.to_string(),
            opset,
            g,
            nodes: vec![],
            outputs: vec![],
            used: Default::default(),
            specs: Default::default(),
            statics: Default::default(),
            unavailable: Default::default(),
            alias: Default::default(),
            declared,
            opaque: vec![],
            notes: vec![],
            weights: HashMap::new(),
            base: None,
            options: ImportOptions::default(),
            dim_params: BTreeMap::new(),
            dim_values: BTreeMap::new(),
            shapeless: vec![],
        }
    }

    fn err(&self, detail: String) -> GraphError {
        GraphError::Onnx {
            file: self.src.clone(),
            detail,
        }
    }

    fn unique(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut k = 1;
        while self.used.contains(&name) {
            name = format!("{base}#{k}");
            k += 1;
        }
        self.used.insert(name.clone());
        name
    }

    fn resolve(&self, n: &str) -> String {
        self.alias.get(n).cloned().unwrap_or_else(|| n.to_string())
    }

    fn is_defined(&self, n: &str) -> bool {
        self.specs.contains_key(n)
            || self.statics.contains_key(n)
            || self.unavailable.contains_key(n)
    }

    fn define_check(&self, n: &str) -> Result<()> {
        if self.is_defined(n) || self.alias.contains_key(n) {
            return Err(self.err(format!(
                "tensor `{n}` is produced twice (ONNX graphs are single-assignment)"
            )));
        }
        Ok(())
    }

    fn run(&mut self) -> Result<()> {
        let g = self.g;
        for t in &g.initializer {
            if t.name.is_empty() {
                return Err(self.err("an initializer has no name".into()));
            }
            let t: Cow<'a, TensorProto> = match &self.base {
                Some(base) if t.data_location == 1 || !t.external_data.is_empty() => {
                    Cow::Owned(external::load(t, base).map_err(|e| self.err(e))?)
                }
                _ => Cow::Borrowed(t),
            };
            tensor_shape(&t).map_err(|e| self.err(e))?;
            self.define_check(&t.name)?;
            self.statics.insert(t.name.clone(), t);
        }
        for vi in &g.input {
            if self.statics.contains_key(&vi.name) {
                continue; // An initializer also listed as an input (IR version < 4 style).
            }
            let (shape, code) =
                input_shape(vi, &self.options).map_err(|e| self.err(format!("graph input {e}")))?;
            self.record_dim_params(vi, &shape);
            let dtype = dtype_of(code).ok_or_else(|| {
                self.err(format!(
                    "graph input `{}` has data type {}, which the IR cannot represent",
                    vi.name,
                    dt::name(code)
                ))
            })?;
            self.define_check(&vi.name)?;
            let name = self.unique(&vi.name);
            self.nodes.push(Node {
                name,
                op: Op::Input {
                    shape: shape.clone(),
                    dtype,
                },
                inputs: vec![],
                outputs: vec![vi.name.clone()],
            });
            self.specs
                .insert(vi.name.clone(), TensorSpec { shape, dtype });
        }
        for (idx, np) in g.node.iter().enumerate() {
            self.node(idx, np)?;
        }
        for vi in &g.output {
            let r = self.resolve(&vi.name);
            if r != vi.name {
                self.notes.push(format!(
                    "graph output `{}` is an Identity of `{r}` and is named `{r}` in the IR",
                    vi.name
                ));
            }
            match self.runtime(&r, "the graph outputs")? {
                Ok(_) => {
                    if !self.outputs.contains(&r) {
                        self.outputs.push(r);
                    }
                }
                Err(why) => self.notes.push(format!(
                    "graph output `{}` is not in the IR graph: {why}",
                    vi.name
                )),
            }
        }
        Ok(())
    }

    /// The runtime spec of tensor `n` (already resolved), materializing a constant as a
    /// Weight/Constant node on first use. `Ok(Err(reason))`: the tensor exists but has no
    /// IR form.
    fn runtime(
        &mut self,
        n: &str,
        reader: &str,
    ) -> Result<std::result::Result<TensorSpec, String>> {
        if let Some(s) = self.specs.get(n) {
            return Ok(Ok(s.clone()));
        }
        if let Some(why) = self.unavailable.get(n) {
            return Ok(Err(why.clone()));
        }
        let Some(t) = self.statics.get(n) else {
            return Err(self.err(format!(
                "{reader} read tensor `{n}`, which no earlier node, graph input or initializer produces \
                 (ONNX requires nodes in topological order)"
            )));
        };
        let shape = tensor_shape(t).map_err(|e| self.err(e))?;
        let Some(dtype) = dtype_of(t.data_type) else {
            let why = format!(
                "constant `{n}` has data type {}, which the IR cannot represent",
                dt::name(t.data_type)
            );
            self.unavailable.insert(n.to_string(), why.clone());
            return Ok(Err(why));
        };
        let numel: usize = shape.iter().product();
        let op = match (numel, tensor_values(t)) {
            (1, Ok(v)) => Op::Constant {
                shape: shape.clone(),
                dtype,
                value: v.f64_at(0),
            },
            _ => {
                let data = weight_values(t).map_err(|e| self.err(e))?;
                self.weights.insert(n.to_string(), data);
                Op::Weight {
                    shape: shape.clone(),
                    dtype,
                }
            }
        };
        let name = self.unique(n);
        self.nodes.push(Node {
            name,
            op,
            inputs: vec![],
            outputs: vec![n.to_string()],
        });
        let spec = TensorSpec { shape, dtype };
        self.specs.insert(n.to_string(), spec.clone());
        Ok(Ok(spec))
    }

    /// Values of input `i` of `np` when it is a constant: `None` when absent,
    /// `Some(Err(reason))` when it is not a readable constant.
    fn param(&self, np: &NodeProto, i: usize) -> Option<Param> {
        let raw = np.input.get(i).filter(|s| !s.is_empty())?;
        let n = self.resolve(raw);
        Some(match self.statics.get(&n) {
            Some(t) => tensor_values(t).map(|v| (v, t.data_type)),
            None => Err(format!(
                "input `{raw}` is not a constant (initializer or Constant node)"
            )),
        })
    }

    fn node(&mut self, idx: usize, np: &'a NodeProto) -> Result<()> {
        let base = if np.name.is_empty() {
            format!("{}_{idx}", np.op_type)
        } else {
            np.name.clone()
        };
        let name = self.unique(&base);
        let outs: Vec<&str> = np
            .output
            .iter()
            .map(|s| s.as_str())
            .filter(|s| !s.is_empty())
            .collect();
        if outs.is_empty() {
            return Err(self.err(format!("node `{name}` ({}) has no outputs", np.op_type)));
        }
        for o in &outs {
            self.define_check(o)?;
        }
        // A node reading what an opaque node of unknown shape would produce cannot be
        // lowered either; it is counted as downstream of that op, not as an op of its own.
        let upstream = np.input.iter().filter(|i| !i.is_empty()).find_map(|i| {
            self.unavailable
                .get(&self.resolve(i))
                .filter(|why| why.starts_with(DEPENDS_ON))
                .cloned()
        });
        let lowering = if let Some(why) = upstream {
            Lowering::Opaque(why)
        } else if np.domain == "com.microsoft" && attention::OPS.contains(&np.op_type.as_str()) {
            self.lower_attention(np, &name, outs[0])?
        } else if !(np.domain.is_empty() || np.domain == "ai.onnx") {
            Lowering::Opaque(format!(
                "op domain `{}` is not the default ONNX domain",
                np.domain
            ))
        } else {
            self.lower(np, &name, outs[0])?
        };
        let lowering = match lowering {
            Lowering::Nodes(v)
                if !outs
                    .iter()
                    .all(|o| v.iter().any(|n| n.outputs.iter().any(|x| x.as_str() == *o))) =>
            {
                let _ = v;
                Lowering::Opaque(format!(
                    "uses optional output(s) {:?} that the IR op does not produce",
                    &outs[1.min(outs.len())..]
                ))
            }
            l => l,
        };
        match lowering {
            Lowering::Alias(to) => {
                self.alias.insert(outs[0].to_string(), to);
                Ok(())
            }
            Lowering::Static(t) => {
                tensor_shape(&t).map_err(|e| self.err(format!("node `{name}`: {e}")))?;
                self.statics.insert(outs[0].to_string(), t);
                Ok(())
            }
            Lowering::Nodes(v) => match self.check(&v) {
                Ok(specs) => {
                    self.nodes.extend(v);
                    self.specs.extend(specs);
                    Ok(())
                }
                Err(e) => self.push_opaque(np, name, format!("the IR rejects the mapped op: {e}")),
            },
            Lowering::Opaque(reason) => self.push_opaque(np, name, reason),
        }
    }

    /// Validate lowered nodes against the specs of their inputs; returns their output specs.
    /// Each node is inferred on its own ([`crate::ir::infer_node`]), in dependency order,
    /// without building a graph: O(nodes of this op), so importing stays linear.
    fn check(&self, v: &[Node]) -> Result<Vec<(String, TensorSpec)>> {
        let mut local: HashMap<&str, TensorInfo> = HashMap::new();
        let mut done = vec![false; v.len()];
        let mut specs = vec![];
        for _ in 0..v.len() {
            // The first node whose inputs are all known (lowerings are short and nearly
            // always already in order, so this is one pass in practice).
            let Some(k) = (0..v.len()).find(|&k| {
                !done[k]
                    && v[k]
                        .inputs
                        .iter()
                        .all(|i| local.contains_key(i.as_str()) || !produced_by(v, i))
            }) else {
                return Err(self.err("internal: the lowered nodes form a cycle".into()));
            };
            done[k] = true;
            let n = &v[k];
            let mut owned = vec![];
            for i in &n.inputs {
                if local.contains_key(i.as_str()) {
                    continue;
                }
                let s = self
                    .specs
                    .get(i)
                    .ok_or_else(|| self.err(format!("internal: tensor `{i}` has no spec")))?;
                let numel = crate::ir::numel(&s.shape).unwrap_or(u64::MAX);
                owned.push(TensorInfo {
                    name: i.clone(),
                    shape: s.shape.clone(),
                    dtype: s.dtype,
                    numel,
                    bytes: s.dtype.bytes_for(numel).unwrap_or(u64::MAX),
                });
            }
            let infos: Vec<&TensorInfo> = n
                .inputs
                .iter()
                .map(|i| {
                    local
                        .get(i.as_str())
                        .or_else(|| owned.iter().find(|t| &t.name == i))
                        .expect("every input was resolved above")
                })
                .collect();
            let outs = crate::ir::infer_node(n, &infos)?;
            for (name, t) in n.output_names_ref().iter().zip(outs) {
                specs.push((
                    name.clone(),
                    TensorSpec {
                        shape: t.shape.clone(),
                        dtype: t.dtype,
                    },
                ));
                local.insert(name.as_str(), t);
            }
        }
        Ok(specs)
    }

    fn push_opaque(&mut self, np: &NodeProto, name: String, reason: String) -> Result<()> {
        let op_type = if np.domain.is_empty() || np.domain == "ai.onnx" {
            np.op_type.clone()
        } else {
            format!("{}::{}", np.domain, np.op_type)
        };
        let mut inputs = vec![];
        let mut omitted = vec![];
        for raw in np.input.iter().filter(|s| !s.is_empty()) {
            let r = self.resolve(raw);
            match self.runtime(&r, &format!("node `{name}` ({op_type})"))? {
                Ok(_) => {
                    if !inputs.contains(&r) {
                        inputs.push(r)
                    }
                }
                Err(why) => omitted.push(format!("`{raw}` ({why})")),
            }
        }
        let mut specs = vec![];
        let mut outputs = vec![];
        let mut dropped = vec![];
        for o in np.output.iter().filter(|s| !s.is_empty()) {
            let declared = self
                .declared
                .get(o.as_str())
                .ok_or_else(|| format!("`{o}` is not declared in value_info or the graph outputs"))
                .and_then(|vi| shape_of_value_info(vi));
            let (shape, code) = match declared {
                Ok(d) => d,
                Err(e) => {
                    // Without an output shape the node cannot stand in the IR graph: its
                    // outputs and what depends on them are left out, and the import fails
                    // at the end listing every such op at once (see `import_model_with`).
                    self.unavailable
                        .insert(o.clone(), format!("{DEPENDS_ON} `{name}` ({op_type})"));
                    dropped.push(o.clone());
                    self.shapeless.push(e);
                    continue;
                }
            };
            match dtype_of(code) {
                Some(dtype) => {
                    specs.push(TensorSpec { shape, dtype });
                    outputs.push(o.clone());
                }
                None => {
                    let why = format!(
                        "output of opaque node `{name}` with data type {}, which the IR cannot represent",
                        dt::name(code)
                    );
                    self.unavailable.insert(o.clone(), why);
                    dropped.push(o.clone());
                }
            }
        }
        let mut full = reason;
        if !omitted.is_empty() {
            full.push_str(&format!(
                "; inputs left out of the IR node: {}",
                omitted.join(", ")
            ));
        }
        if outputs.is_empty()
            && !full.starts_with(DEPENDS_ON)
            && !self.shapeless.is_empty()
            && dropped.iter().all(|d| {
                self.unavailable
                    .get(d)
                    .is_some_and(|w| w.starts_with(DEPENDS_ON))
            })
        {
            // Left out for an unknown output shape (said once, by the import's error).
        } else if outputs.is_empty() && !full.starts_with(DEPENDS_ON) {
            full.push_str(&format!(
                "; not added to the graph: none of its outputs ({}) has an IR dtype",
                dropped.join(", ")
            ));
        } else {
            if !dropped.is_empty() {
                full.push_str(&format!(
                    "; outputs without an IR dtype left out: {}",
                    dropped.join(", ")
                ));
            }
            for (o, s) in outputs.iter().zip(&specs) {
                self.specs.insert(o.clone(), s.clone());
            }
            self.nodes.push(Node {
                name: name.clone(),
                op: Op::Opaque {
                    name: op_type.clone(),
                    output_specs: specs,
                },
                inputs,
                outputs,
            });
        }
        self.opaque.push(OpaqueNode {
            name,
            op_type,
            reason: full,
        });
        Ok(())
    }

    /// A constant tensor made at import (a lowering's mask or transposed weight), defined as
    /// a static and materialized as a Weight (or Constant) node; its name.
    fn add_constant(&mut self, t: TensorProto) -> Result<std::result::Result<String, String>> {
        let name = t.name.clone();
        self.statics.insert(name.clone(), Cow::Owned(t));
        Ok(self.runtime(&name, "a lowering")?.map(|_| name))
    }

    /// Runtime inputs `idx` of `np`, resolved; `Err(reason)` when one is missing or has no
    /// IR form.
    fn rt_inputs(
        &mut self,
        np: &NodeProto,
        idx: impl IntoIterator<Item = usize>,
    ) -> Result<std::result::Result<Vec<String>, String>> {
        let mut v = vec![];
        for i in idx {
            let Some(raw) = np.input.get(i).filter(|s| !s.is_empty()) else {
                return Ok(Err(format!("input {i} is missing")));
            };
            let r = self.resolve(raw);
            if let Err(why) = self.runtime(&r, &format!("node `{}` ({})", np.name, np.op_type))? {
                return Ok(Err(why));
            }
            v.push(r);
        }
        Ok(Ok(v))
    }

    /// The inputs of `np` as the constant folder sees them.
    fn fold_args(&self, np: &NodeProto) -> Vec<fold::Arg<'_>> {
        np.input
            .iter()
            .map(|raw| {
                if raw.is_empty() {
                    return fold::Arg::Absent;
                }
                let n = self.resolve(raw);
                if let Some(t) = self.statics.get(&n) {
                    return match (tensor_values(t), tensor_shape(t)) {
                        (Ok(vals), Ok(dims)) => fold::Arg::Const(fold::Known {
                            dims,
                            vals,
                            code: t.data_type,
                        }),
                        (_, Ok(_)) => match self.specs.get(&n) {
                            Some(s) => fold::Arg::Shape(&s.shape),
                            None => fold::Arg::Unknown,
                        },
                        _ => fold::Arg::Unknown,
                    };
                }
                match self.specs.get(&n) {
                    Some(s) => fold::Arg::Shape(&s.shape),
                    None => fold::Arg::Unknown,
                }
            })
            .collect()
    }

    /// ONNX MatMul (NumPy `matmul`) lowered onto the IR's MatMul, which takes a right
    /// operand of rank 2 or of the left operand's rank with equal batch dims: a 1-D operand
    /// is reshaped to a matrix and back; a right operand whose batch dims are all 1 is
    /// reshaped to rank 2 (a free view); other batch dims that differ are materialized with
    /// Broadcast nodes (their bytes count in the traffic model, a note says so).
    fn matmul(&mut self, name: &str, out: &str, a: &str, b: &str) -> Lowering<'a> {
        let (sa, sb) = (self.specs[a].shape.clone(), self.specs[b].shape.clone());
        if sa.is_empty() || sb.is_empty() {
            return Lowering::Opaque("MatMul of a scalar (rank 0) operand".into());
        }
        let mut v: Vec<Node> = vec![];
        let t = |k: &str| format!("{out}#{k}");
        let view = |v: &mut Vec<Node>, k: &str, src: &str, shape: &[usize]| -> String {
            v.push(Node {
                name: format!("{name}#{k}"),
                op: Op::Reshape {
                    shape: shape.iter().map(|&d| d as i64).collect(),
                },
                inputs: vec![src.to_string()],
                outputs: vec![t(k)],
            });
            t(k)
        };
        let (mut a2, mut b2) = (a.to_string(), b.to_string());
        let (mut xa, mut xb) = (sa.clone(), sb.clone());
        if sa.len() == 1 {
            xa = vec![1, sa[0]];
            a2 = view(&mut v, "a2d", a, &xa);
        }
        if sb.len() == 1 {
            xb = vec![sb[0], 1];
            b2 = view(&mut v, "b2d", b, &xb);
        }
        let (ra, rb) = (xa.len(), xb.len());
        let (ba, bb) = (&xa[..ra - 2], &xb[..rb - 2]);
        let batch = match crate::ir::broadcast_shapes(ba, bb) {
            Some(s) => s,
            None => {
                return Lowering::Opaque(format!(
                    "MatMul batch dims {ba:?} and {bb:?} do not broadcast"
                ))
            }
        };
        if rb > 2 && bb.iter().all(|&d| d == 1) {
            xb = xb[rb - 2..].to_vec();
            b2 = view(&mut v, "b_mat", &b2, &xb);
        }
        if xb.len() > 2 {
            let mut want_a = batch.clone();
            want_a.extend_from_slice(&xa[ra - 2..]);
            let mut want_b = batch.clone();
            want_b.extend_from_slice(&xb[xb.len() - 2..]);
            for (k, cur, want, src) in [
                ("a_bcast", &mut xa, want_a, &mut a2),
                ("b_bcast", &mut xb, want_b, &mut b2),
            ] {
                if *cur != want {
                    self.notes.push(format!(
                        "MatMul `{name}`: operand {cur:?} is broadcast to {want:?} (materialized; its bytes count in the traffic model)"
                    ));
                    v.push(Node {
                        name: format!("{name}#{k}"),
                        op: Op::Broadcast {
                            shape: want.clone(),
                        },
                        inputs: vec![src.clone()],
                        outputs: vec![t(k)],
                    });
                    *src = t(k);
                    *cur = want;
                }
            }
        }
        let squeeze = sa.len() == 1 || sb.len() == 1;
        let mm_out = if squeeze { t("mm") } else { out.to_string() };
        v.push(Node {
            name: if squeeze {
                format!("{name}#mm")
            } else {
                name.to_string()
            },
            op: Op::MatMul,
            inputs: vec![a2, b2],
            outputs: vec![mm_out.clone()],
        });
        if squeeze {
            // NumPy drops the 1 that a 1-D operand was promoted with.
            let mut shape = batch.clone();
            if sa.len() != 1 {
                shape.push(xa[xa.len() - 2]);
            }
            if sb.len() != 1 {
                shape.push(xb[xb.len() - 1]);
            }
            v.push(Node {
                name: name.to_string(),
                op: Op::Reshape {
                    shape: shape.iter().map(|&d| d as i64).collect(),
                },
                inputs: vec![mm_out],
                outputs: vec![out.to_string()],
            });
        }
        Lowering::Nodes(v)
    }

    fn lower(&mut self, np: &'a NodeProto, name: &str, out: &str) -> Result<Lowering<'a>> {
        let op_type = np.op_type.as_str();
        // Shape arithmetic and other computations on constants are done here, at import.
        if fold::FOLDABLE.contains(&op_type) {
            let args = self.fold_args(np);
            if let Some(r) = fold::fold(np, &args, self.opset) {
                match r {
                    Ok(k) => return Ok(Lowering::Static(Cow::Owned(fold::to_tensor(out, &k)))),
                    // Not foldable (a result too large to hold at import, such as a causal
                    // mask of a long sequence): the op runs at run time where it has a
                    // lowering; where it has none, the folder's reason is the one given.
                    Err(why) => {
                        return Ok(match self.lower_at_run_time(np, name, out)? {
                            Lowering::Opaque(_) => {
                                Lowering::Opaque(format!("constant folding failed: {why}"))
                            }
                            l => l,
                        })
                    }
                }
            }
        }
        self.lower_at_run_time(np, name, out)
    }

    /// [`Self::lower`] without constant folding: the op as IR nodes, or why it has none.
    fn lower_at_run_time(
        &mut self,
        np: &'a NodeProto,
        name: &str,
        out: &str,
    ) -> Result<Lowering<'a>> {
        let op_type = np.op_type.as_str();
        // Each family lowers its own ops (one file each).
        if elementwise::OPS.contains(&op_type)
            || crate::optable::UnaryFn::from_onnx(op_type).is_some()
            || crate::optable::BinaryFn::from_onnx(op_type).is_some()
            || op_type == "IsInf"
        {
            return self.lower_elementwise(np, name, out);
        }
        if reduce::OPS.contains(&op_type) {
            return self.lower_reduce(np, name, out);
        }
        if shape::OPS.contains(&op_type) {
            return self.lower_shape(np, name, out);
        }
        if nn::OPS.contains(&op_type) {
            return self.lower_nn(np, name, out);
        }
        if quant::OPS.contains(&op_type) {
            return self.lower_quant(np, name, out);
        }
        Ok(match op_type {
            "If" => return self.lower_if(np, name),
            "LSTM" => return self.lower_recurrent(np, name, recurrent::Cell::Lstm),
            "GRU" => return self.lower_recurrent(np, name, recurrent::Cell::Gru),
            _ => Lowering::Opaque(format!("op `{op_type}` has no IR equivalent")),
        })
    }
}

/// True when one of `v`'s nodes produces `tensor`.
fn produced_by(v: &[Node], tensor: &str) -> bool {
    v.iter()
        .any(|n| n.output_names_ref().iter().any(|o| o == tensor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_precision_decodes() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert!(f16_to_f32(0x7c00).is_infinite());
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
    }

    #[test]
    fn dims_are_bounded() {
        assert!(check_dims(&[1 << 20, 1 << 20]).is_ok());
        assert!(check_dims(&[1 << 21, 1 << 20])
            .unwrap_err()
            .contains("exceed"));
        assert!(check_dims(&[i64::MAX, i64::MAX]).is_err());
        assert!(check_dims(&[-1]).unwrap_err().contains("negative"));
        assert!(check_dims(&[1; 17]).unwrap_err().contains("rank"));
    }

    #[test]
    fn garbage_is_an_error() {
        for bytes in [
            &[0xffu8; 16][..],
            &[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f],
            &[0x3a, 0x05, 0x0a],
        ] {
            let e = import_onnx_bytes(bytes, "junk.onnx")
                .unwrap_err()
                .to_string();
            assert!(e.contains("junk.onnx"), "{e}");
        }
    }
}
