//! An inference session over an ONNX model, the way onnxruntime's `InferenceSession` is used:
//! open a file once, then run it many times on the caller's arrays, by input name. The
//! model's declared inputs and outputs (names, element types, dims with their symbolic names)
//! are read without binding any dim. Each distinct set of input shapes binds the model's
//! symbolic dims, imports, fuses and compiles it once (the JIT where a C compiler exists,
//! else the interpreter) and is kept; a run converts the inputs to the executor's f32,
//! executes on the session's own worker pool and returns each output in its declared kind
//! (integer and boolean outputs as int64).
//!
//! Left out: concurrent runs of one shape (they take turns on its kept buffers), inputs of
//! other than f32/f64/u8/i8/i32/i64, an output dtype other than f32 or int64, and eviction of
//! kept shapes (each costs its weights once more).

use crate::error::{GraphError, Result};
use crate::exec::{execute_values, Pool, Values};
use crate::fusion::{compile, Program};
use crate::jit::Jit;
use crate::onnx::proto::tensor_shape_proto::dimension::Value as DimValue;
use crate::onnx::proto::type_proto::Value as TypeValue;
use crate::onnx::proto::{ModelProto, ValueInfoProto};
use crate::onnx::{import_model_with, ImportOptions, MAX_FILE_BYTES};
use prost::Message;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tensorforge_kernels::call::{DataRef, TensorRef};
use tensorforge_kernels::npy::NpyData;

/// One dim of a declared input or output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Dim {
    /// A fixed size.
    Fixed(usize),
    /// A symbolic name (`batch`), bound at run time.
    Symbol(String),
    /// Neither (bound by the input given); `null` in JSON.
    Unknown,
}

/// A declared graph input or output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoSpec {
    /// Tensor name.
    pub name: String,
    /// NumPy's name of the declared element type (`float32`, `int64`, `bool`).
    pub dtype: String,
    /// Declared dims.
    pub dims: Vec<Dim>,
}

/// NumPy's name of an ONNX `TensorProto.DataType` code.
pub fn numpy_dtype_name(code: i32) -> &'static str {
    match code {
        1 => "float32",
        2 => "uint8",
        3 => "int8",
        4 => "uint16",
        5 => "int16",
        6 => "int32",
        7 => "int64",
        8 => "str",
        9 => "bool",
        10 => "float16",
        11 => "float64",
        12 => "uint32",
        13 => "uint64",
        16 => "bfloat16",
        _ => "unknown",
    }
}

fn io_spec(vi: &ValueInfoProto) -> IoSpec {
    let (dtype, dims) = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(TypeValue::TensorType(tt)) => (
            numpy_dtype_name(tt.elem_type),
            tt.shape
                .as_ref()
                .map(|s| {
                    s.dim
                        .iter()
                        .map(|d| match &d.value {
                            Some(DimValue::DimValue(v)) => {
                                usize::try_from(*v).map_or(Dim::Unknown, Dim::Fixed)
                            }
                            Some(DimValue::DimParam(p)) if !p.is_empty() => Dim::Symbol(p.clone()),
                            _ => Dim::Unknown,
                        })
                        .collect()
                })
                .unwrap_or_default(),
        ),
        None => ("unknown", vec![]),
    };
    IoSpec {
        name: vi.name.clone(),
        dtype: dtype.to_string(),
        dims,
    }
}

/// One output of a run: name, shape and values in the output's kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// Tensor name.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Values: f32, or int64 for an integer or boolean output.
    pub data: NpyData,
}

/// A model bound to one set of input shapes, compiled, with its weights and buffers.
struct Bound {
    program: Program,
    jit: Option<Jit>,
    /// The weights, and the current run's inputs under their names.
    values: HashMap<String, Vec<f32>>,
    pool: Pool,
    /// Whether each graph tensor name is an integer or boolean output.
    integer: HashSet<String>,
    /// Below every parallel threshold of the executor (no tensor of 2^16 elements, under
    /// [`SMALL_FLOPS`] operations): runs on the caller's thread, never handed to the pool.
    small: bool,
    /// Whether the first run has chosen, per kernel, the faster of compiled and interpreted.
    tuned: bool,
}

/// Operations under which a bound program counts as small (the executor's smallest
/// parallel threshold is 2^16 elements per op, its GEMM threshold 2^18 multiply-adds).
pub const SMALL_FLOPS: u64 = 1 << 19;

/// A bound model shared between the cache and a run in progress.
type Shared = Arc<Mutex<Bound>>;

/// An ONNX model opened for repeated runs (see the module docs).
///
/// ```no_run
/// use tensorforge_graph::session::Session;
/// use tensorforge_kernels::call::{DataRef, TensorRef};
/// let s = Session::open("model.onnx", Some(1)).unwrap();
/// let x = vec![0.5f32; 4];
/// let out = s.run(&[TensorRef { name: "x", shape: &[1, 4], data: DataRef::F32(&x) }], None).unwrap();
/// println!("{} {:?}", out[0].name, out[0].shape);
/// ```
pub struct Session {
    source: String,
    base: PathBuf,
    model: ModelProto,
    inputs: Vec<IoSpec>,
    outputs: Vec<IoSpec>,
    /// The session's own workers (`threads` given); `None`: rayon's global pool, as the CLI.
    pool: Option<rayon::ThreadPool>,
    bound: Mutex<HashMap<Vec<Vec<usize>>, Shared>>,
    notes: Mutex<Vec<String>>,
    returned: Recycler,
}

/// Output vectors handed back to a [`Session`] for a later run's outputs ([`Session::recycle`],
/// or a binding's array that gives its vector back when it dies): the next run takes them
/// into the pool of the shapes it runs, so it writes its outputs into memory already paged in
/// instead of fresh memory (a 64 MiB output's fresh pages cost about 4 ms even as huge pages;
/// docs/performance.md). It keeps at most [`Recycler::MAX_HELD`] vectors; a run takes only
/// those of a length one of its outputs has, and frees the others. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Recycler(Arc<Mutex<Vec<Vec<f32>>>>);

impl Recycler {
    /// Vectors held at most between runs (more are freed on arrival): enough for the
    /// outputs of a few runs of a model with several outputs.
    pub const MAX_HELD: usize = 16;

    /// Hand `v` back (freed instead when [`Recycler::MAX_HELD`] are held already).
    pub fn give(&self, v: Vec<f32>) {
        if v.is_empty() {
            return;
        }
        if let Ok(mut held) = self.0.lock() {
            if held.len() < Self::MAX_HELD {
                held.push(v);
            }
        }
    }

    /// Every vector held, taken out.
    fn take_all(&self) -> Vec<Vec<f32>> {
        self.0
            .lock()
            .map(|mut h| std::mem::take(&mut *h))
            .unwrap_or_default()
    }
}

fn err(source: &str, detail: String) -> GraphError {
    GraphError::Onnx {
        file: source.to_string(),
        detail,
    }
}

impl Session {
    /// Open `path` (an `.onnx` file); `threads` sets the session's worker pool (default: one
    /// per core, or `RAYON_NUM_THREADS`).
    pub fn open(path: impl AsRef<Path>, threads: Option<usize>) -> Result<Session> {
        let path = path.as_ref();
        let source = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| err(&source, format!("cannot read: {e}")))?;
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        Self::from_bytes(&bytes, &source, base, threads)
    }

    /// Open a model from its bytes; `source` names it in errors, `base` is the folder of its
    /// external data.
    pub fn from_bytes(
        bytes: &[u8],
        source: &str,
        base: PathBuf,
        threads: Option<usize>,
    ) -> Result<Session> {
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(err(
                source,
                format!("file is larger than {MAX_FILE_BYTES} bytes (the import limit)"),
            ));
        }
        // The full import (on the first run) bounds every size; here only the declarations
        // are read.
        let model = ModelProto::decode(bytes)
            .map_err(|e| err(source, format!("malformed or truncated protobuf: {e}")))?;
        let graph = model
            .graph
            .as_ref()
            .ok_or_else(|| err(source, "the model has no graph".into()))?;
        let init: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
        let inputs = graph
            .input
            .iter()
            .filter(|v| !init.contains(v.name.as_str()))
            .map(io_spec)
            .collect();
        let outputs = graph.output.iter().map(io_spec).collect();
        if threads == Some(0) {
            return Err(GraphError::Argument(
                "invalid value for `threads`: 0 (must be at least 1)".into(),
            ));
        }
        let pool = threads
            .map(|t| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(t)
                    .build()
                    .map_err(|e| {
                        GraphError::Argument(format!("cannot start {t} worker threads: {e}"))
                    })
            })
            .transpose()?;
        Ok(Session {
            source: source.to_string(),
            base,
            model,
            inputs,
            outputs,
            pool,
            bound: Mutex::new(HashMap::new()),
            notes: Mutex::new(vec![]),
            returned: Recycler::default(),
        })
    }

    /// Where output vectors go back for later runs (see [`Recycler`]); a binding keeps a
    /// clone beside each output it hands out.
    pub fn recycler(&self) -> Recycler {
        self.returned.clone()
    }

    /// Hand a run's outputs back once read: their f32 vectors hold a later run's outputs
    /// (see [`Recycler`]), so a loop of runs does not write fresh memory on every call.
    pub fn recycle(&self, outputs: Vec<Output>) {
        for o in outputs {
            if let NpyData::F32(v) = o.data {
                self.returned.give(v);
            }
        }
    }

    /// The model's inputs (initializers excluded), as declared.
    pub fn inputs(&self) -> &[IoSpec] {
        &self.inputs
    }

    /// The model's outputs, as declared.
    pub fn outputs(&self) -> &[IoSpec] {
        &self.outputs
    }

    /// Worker threads of the session's pool.
    pub fn threads(&self) -> usize {
        self.pool
            .as_ref()
            .map_or_else(rayon::current_num_threads, |p| p.current_num_threads())
    }

    /// What the import and the JIT said (approximations, kernels left to the interpreter).
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().map(|n| n.clone()).unwrap_or_default()
    }

    /// How many distinct input-shape sets have been compiled.
    pub fn bound_shapes(&self) -> usize {
        self.bound.lock().map(|b| b.len()).unwrap_or(0)
    }

    /// Import, fuse and compile the model for `shapes`, one per declared input, in order.
    fn bind(&self, shapes: &[Vec<usize>]) -> Result<Bound> {
        let options = ImportOptions {
            input_shapes: self
                .inputs
                .iter()
                .map(|i| i.name.clone())
                .zip(shapes.iter().cloned())
                .collect(),
            ..Default::default()
        };
        let imp = import_model_with(&self.model, &self.source, Some(&self.base), &options)?;
        imp.require_runnable(&self.source)?;
        let c = compile(&imp.graph)?;
        let program = c.fused;
        let mut notes = imp.notes.clone();
        let jit = match crate::jit::compile(&program) {
            Ok(j) => {
                notes.extend(j.notes.iter().cloned());
                Some(j)
            }
            Err(e) => {
                notes.push(format!("running the interpreter ({e})"));
                None
            }
        };
        let integer = program
            .graph
            .outputs
            .iter()
            .map(|&t| &program.graph.tensors[t])
            .filter(|t| t.dtype.is_integer())
            .map(|t| t.name.clone())
            .collect();
        let small = program.graph.tensors.iter().all(|t| t.numel < 1 << 16)
            && crate::traffic::program_counts(&program)
                .iter()
                .map(|k| k.flops)
                .sum::<u64>()
                < SMALL_FLOPS;
        if let Ok(mut n) = self.notes.lock() {
            for x in notes {
                if !n.contains(&x) {
                    n.push(x);
                }
            }
        }
        Ok(Bound {
            program,
            jit,
            values: imp.weights,
            pool: Pool::default(),
            integer,
            small,
            tuned: false,
        })
    }

    /// Run the model on `feeds` (one per declared input, by name) and return the outputs
    /// named in `output_names` (all, in declared order, when `None`).
    pub fn run(&self, feeds: &[TensorRef], output_names: Option<&[String]>) -> Result<Vec<Output>> {
        let arg = |m: String| GraphError::Argument(m);
        let declared: Vec<&str> = self.inputs.iter().map(|i| i.name.as_str()).collect();
        for f in feeds {
            if !declared.contains(&f.name) {
                return Err(arg(format!(
                    "`{}` is not an input of {}; its inputs are {declared:?}",
                    f.name, self.source
                )));
            }
        }
        let mut key = Vec::with_capacity(self.inputs.len());
        let mut ordered = Vec::with_capacity(self.inputs.len());
        for i in &self.inputs {
            let f = feeds.iter().find(|f| f.name == i.name).ok_or_else(|| {
                arg(format!(
                    "input `{}` of {} was not given (the model's inputs are {declared:?})",
                    i.name, self.source
                ))
            })?;
            key.push(f.shape.to_vec());
            ordered.push(*f);
        }
        let wanted: Vec<String> = match output_names {
            None => self.outputs.iter().map(|o| o.name.clone()).collect(),
            Some(names) => {
                for n in names {
                    if !self.outputs.iter().any(|o| &o.name == n) {
                        return Err(arg(format!(
                            "`{n}` is not an output of {}; its outputs are {:?}",
                            self.source,
                            self.outputs.iter().map(|o| &o.name).collect::<Vec<_>>()
                        )));
                    }
                }
                names.to_vec()
            }
        };
        let bound = {
            let mut cache = self
                .bound
                .lock()
                .map_err(|_| arg("the session was poisoned by an earlier failure".into()))?;
            match cache.get(&key) {
                Some(b) => Arc::clone(b),
                None => {
                    let b = Arc::new(Mutex::new(self.bind(&key)?));
                    cache.insert(key, Arc::clone(&b));
                    b
                }
            }
        };
        let mut b = bound
            .lock()
            .map_err(|_| arg("the session was poisoned by an earlier failure".into()))?;
        // f32 feeds are read where they lie (no copy: a 64 MiB input cost 5–9 ms to copy,
        // more than some whole runs), except on the tuning run below, which keeps them in
        // the map it times on; other types are converted into the map.
        let mut feeds: Vec<(&str, &[f32])> = Vec::with_capacity(ordered.len());
        for f in &ordered {
            if let (DataRef::F32(d), true) = (f.data, b.tuned) {
                check_len(f)?;
                b.values.remove(f.name);
                feeds.push((f.name, d));
                continue;
            }
            match b.values.get_mut(f.name) {
                Some(v) => to_f32(f, v)?,
                None => {
                    let mut v = Vec::new();
                    to_f32(f, &mut v)?;
                    b.values.insert(f.name.to_string(), v);
                }
            }
        }
        let b = &mut *b;
        // Output vectors handed back since the last run become this run's outputs where
        // their lengths match one (others are freed).
        let returned = self.returned.take_all();
        if !returned.is_empty() {
            let tg = &b.program.graph;
            for v in returned {
                if tg
                    .outputs
                    .iter()
                    .any(|&t| tg.tensors[t].numel == v.len() as u64)
                {
                    b.pool.recycle(v);
                }
            }
        }
        // The first run of a shape keeps, per kernel, the faster of the compiled and the
        // interpreted code on these very inputs (`exec::keep_faster`: three timed runs of
        // each), as `tensorforge run --bench` does: a compiled kernel can lose to the
        // interpreter's hand-vectorized one (a GELU-erf epilogue, 10 µs against 7).
        if !b.tuned {
            b.tuned = true;
            if let Some(j) = b.jit.as_mut() {
                let (program, values) = (&b.program, &b.values);
                let mut tune = || crate::exec::keep_faster(program, values, j, 3);
                let notes = match &self.pool {
                    Some(p) => p.install(tune)?,
                    None => tune()?,
                };
                if let Ok(mut n) = self.notes.lock() {
                    n.extend(notes);
                }
            }
        }
        // Handing a run to a pool costs a thread wake-up (tens of µs on a busy machine), more
        // than a small program's whole run: those run on the caller's thread, where none of
        // their ops reaches a parallel loop.
        let values = Values::new(&b.values, &feeds);
        let mut exec = || execute_values(&b.program, values, &mut b.pool, b.jit.as_ref());
        let r = match &self.pool {
            Some(p) if !b.small => p.install(exec)?,
            _ => exec()?,
        };
        // The run's output vectors are handed over, not copied (one named twice is copied).
        let mut produced = r.outputs;
        let mut outs = Vec::with_capacity(wanted.len());
        for (wi, name) in wanted.iter().enumerate() {
            let (_, shape, values) =
                produced
                    .iter_mut()
                    .find(|(n, _, _)| n == name)
                    .ok_or_else(|| {
                        arg(format!(
                            "internal: output `{name}` of {} was not produced",
                            self.source
                        ))
                    })?;
            let data = if b.integer.contains(name) {
                NpyData::I64(values.iter().map(|&v| v as i64).collect())
            } else if wanted[wi + 1..].contains(name) {
                NpyData::F32(values.clone())
            } else {
                NpyData::F32(std::mem::take(values))
            };
            outs.push(Output {
                name: name.clone(),
                shape: shape.clone(),
                data,
            });
        }
        Ok(outs)
    }
}

/// An input whose element count is not its shape's product is an error naming it.
fn check_len(t: &TensorRef) -> Result<()> {
    let n = t.data.len();
    let expect: usize = t.shape.iter().product();
    if n != expect {
        return Err(GraphError::Input {
            tensor: t.name.to_string(),
            detail: format!("shape {:?} but {n} elements", t.shape),
        });
    }
    Ok(())
}

/// Convert one input into the executor's f32 values, reusing `v`'s allocation
/// ([`crate::exec::to_executor_values`]); an integer beyond 2^24 is an error naming the input.
fn to_f32(t: &TensorRef, v: &mut Vec<f32>) -> Result<()> {
    check_len(t)?;
    crate::exec::to_executor_values(t.data, v).map_err(|x| GraphError::Input {
        tensor: t.name.to_string(),
        detail: format!(
            "value {x} is beyond 2^24, which the executor's f32 values cannot hold exactly"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorforge_kernels::call::DataRef;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/onnx")
            .join(name)
    }

    /// An input's declared dims, each symbolic one set to 2.
    fn fixed_dims(i: &IoSpec) -> Vec<usize> {
        i.dims
            .iter()
            .map(|d| if let Dim::Fixed(n) = d { *n } else { 2 })
            .collect()
    }

    #[test]
    fn declared_inputs_keep_their_symbolic_dims() {
        let s = Session::open(fixture("bert_eager_ts/model.onnx"), Some(1)).unwrap();
        let names: Vec<&str> = s.inputs().iter().map(|i| i.name.as_str()).collect();
        assert!(names.contains(&"input_ids"), "{names:?}");
        let ids = s.inputs().iter().find(|i| i.name == "input_ids").unwrap();
        assert_eq!(ids.dtype, "int64");
        assert!(
            ids.dims.iter().any(|d| matches!(d, Dim::Symbol(_))),
            "{ids:?}"
        );
    }

    #[test]
    fn runs_bind_each_shape_once_and_name_bad_feeds() {
        let s = Session::open(fixture("tiny_mlp/model.onnx"), Some(1)).unwrap();
        let i = &s.inputs()[0];
        let dims = fixed_dims(i);
        let x = vec![0.25f32; dims.iter().product()];
        let feed = [TensorRef {
            name: &i.name,
            shape: &dims,
            data: DataRef::F32(&x),
        }];
        let a = s.run(&feed, None).unwrap();
        let b = s.run(&feed, None).unwrap();
        assert_eq!(a, b);
        // An output named twice comes back twice, whole both times.
        let y = s.outputs()[0].name.clone();
        let twice = s.run(&feed, Some(&[y.clone(), y])).unwrap();
        assert_eq!(twice.len(), 2);
        assert_eq!(twice[0], a[0]);
        assert_eq!(twice[1], a[0]);
        assert_eq!(s.bound_shapes(), 1);
        let bad = [TensorRef {
            name: "nope",
            shape: &dims,
            data: DataRef::F32(&x),
        }];
        let e = s.run(&bad, None).unwrap_err().to_string();
        assert!(e.contains("`nope` is not an input"), "{e}");
        let e = s.run(&[], None).unwrap_err().to_string();
        assert!(
            e.contains(&format!("input `{}`", i.name)) && e.contains("was not given"),
            "{e}"
        );
        let e = s
            .run(&feed, Some(&["zz".to_string()]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`zz` is not an output"), "{e}");
    }

    /// Outputs handed back serve later runs (the vector comes back as an output, holding
    /// that run's values), vectors of a length no output has are freed, and at most
    /// `Recycler::MAX_HELD` are kept. tiny_mlp's product takes a scratch vector of the
    /// output's length before its output, so the vector handed back circulates between the
    /// two and is an output again within two runs.
    #[test]
    fn recycled_outputs_hold_the_next_runs_values() {
        let s = Session::open(fixture("tiny_mlp/model.onnx"), Some(1)).unwrap();
        let i = s.inputs()[0].clone();
        let dims = fixed_dims(&i);
        let n: usize = dims.iter().product();
        let (x0, x1): (Vec<f32>, Vec<f32>) = (
            (0..n).map(|e| e as f32 * 0.1).collect(),
            (0..n).map(|e| 1.0 - e as f32 * 0.2).collect(),
        );
        let run = |x: &[f32]| {
            let f = [TensorRef {
                name: &i.name,
                shape: &dims,
                data: DataRef::F32(x),
            }];
            s.run(&f, None).unwrap()
        };
        let first = run(&x0);
        let want1 = run(&x1);
        let NpyData::F32(v) = &first[0].data else {
            panic!("tiny_mlp's output is f32")
        };
        let ptr = v.as_ptr();
        s.recycle(first);
        // Had `recycle` freed the vector, this one of its size would most likely take its
        // memory, and no run could hand it out.
        let blocker: Vec<f32> = std::iter::repeat_n(1.0, 8).collect();
        let mut seen = vec![];
        for _ in 0..3 {
            let again = run(&x1);
            assert_eq!(
                again, want1,
                "a recycled vector must hold the new run's values"
            );
            let NpyData::F32(v) = &again[0].data else {
                panic!("f32")
            };
            seen.push(v.as_ptr());
            s.recycle(again);
        }
        assert!(seen.contains(&ptr), "the handed-back vector was not reused");
        assert_ne!(blocker.as_ptr(), ptr);
        // Vectors of a length no output has are freed by the next run, not pooled, and no
        // more than MAX_HELD are ever held.
        let r = s.recycler();
        for _ in 0..2 * Recycler::MAX_HELD {
            r.give(vec![0.0; 3]);
        }
        assert_eq!(r.0.lock().unwrap().len(), Recycler::MAX_HELD);
        assert_eq!(run(&x0), run(&x0));
        assert!(r.0.lock().unwrap().is_empty());
    }

    /// After its first (tuning) run a session reads f32 feeds in place instead of copying
    /// them: each later run must see its own feed, never a value an earlier run left in the
    /// session's map, and agree with a fresh session's first run on the same feed (the
    /// converted path); a feed of the wrong length is still an error naming it.
    #[test]
    fn borrowed_feeds_are_each_runs_own() {
        let s = Session::open(fixture("tiny_mlp/model.onnx"), Some(1)).unwrap();
        let i = s.inputs()[0].clone();
        let dims = fixed_dims(&i);
        let n: usize = dims.iter().product();
        let xs: Vec<Vec<f32>> = (0..3)
            .map(|k| {
                (0..n)
                    .map(|e| ((e * 7 + k * 3) % 11) as f32 * 0.1 - 0.5)
                    .collect()
            })
            .collect();
        let feed = |x: &[f32]| -> Vec<Output> {
            let f = [TensorRef {
                name: &i.name,
                shape: &dims,
                data: DataRef::F32(x),
            }];
            s.run(&f, None).unwrap()
        };
        let fresh = |x: &[f32]| -> Vec<Output> {
            let t = Session::open(fixture("tiny_mlp/model.onnx"), Some(1)).unwrap();
            let f = [TensorRef {
                name: &i.name,
                shape: &dims,
                data: DataRef::F32(x),
            }];
            t.run(&f, None).unwrap()
        };
        let want: Vec<Vec<Output>> = xs.iter().map(|x| fresh(x)).collect();
        assert_ne!(want[0], want[1], "the feeds must give different outputs");
        for k in [0, 1, 2, 1, 0] {
            assert_eq!(feed(&xs[k]), want[k], "feed {k}");
        }
        let short = vec![0.0f32; n - 1];
        let f = [TensorRef {
            name: &i.name,
            shape: &dims,
            data: DataRef::F32(&short),
        }];
        let e = s.run(&f, None).unwrap_err().to_string();
        assert!(e.contains(&i.name) && e.contains("elements"), "{e}");
    }
}
