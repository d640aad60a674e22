//! `tensorforge.Session`, an onnxruntime-style inference session over
//! `tensorforge_graph::session::Session` (`run(output_names, input_feed)` returning a list of
//! arrays, `get_inputs()`/`get_outputs()` metadata), and the graph compiler's reports (fuse
//! with its traffic, memory plan) as the JSON the CLI prints. Inputs are converted to the
//! executor's f32 inside the library (float32 ones read in place after a shape's first run);
//! outputs are arrays over the executor's buffers, each handed back to the session for a
//! later run's outputs when the array dies.

use crate::kernels::{to_numpy, Held};
use crate::{guard, to_json, value_err};
use numpy::PyArrayMethods;
use pyo3::exceptions::PyFileNotFoundError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::collections::BTreeMap;
use tensorforge_graph::onnx::ImportOptions;
use tensorforge_graph::session::{Dim, IoSpec, Recycler, Session};
use tensorforge_kernels::npy::NpyData;

/// A declared input or output, as onnxruntime's `NodeArg`: `name`, `shape` (ints, symbolic
/// names, or None) and `type` (`tensor(float)`), plus NumPy's `dtype` name.
#[pyclass(name = "NodeArg", module = "tensorforge", frozen)]
#[derive(Clone)]
struct NodeArg {
    spec: IoSpec,
}

fn onnx_type(dtype: &str) -> String {
    let t = match dtype {
        "float32" => "float",
        "float64" => "double",
        other => other,
    };
    format!("tensor({t})")
}

#[pymethods]
impl NodeArg {
    #[getter]
    fn name(&self) -> &str {
        &self.spec.name
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items: Vec<Bound<'py, PyAny>> = self
            .spec
            .dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => match n.into_pyobject(py) {
                    Ok(o) => o.into_any(),
                    Err(e) => match e {},
                },
                Dim::Symbol(s) => match s.into_pyobject(py) {
                    Ok(o) => o.into_any(),
                    Err(e) => match e {},
                },
                Dim::Unknown => py.None().into_bound(py),
            })
            .collect();
        PyList::new(py, items)
    }

    #[getter]
    fn r#type(&self) -> String {
        onnx_type(&self.spec.dtype)
    }

    #[getter]
    fn dtype(&self) -> &str {
        &self.spec.dtype
    }

    fn __repr__(&self) -> String {
        let dims: Vec<String> = self
            .spec
            .dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => n.to_string(),
                Dim::Symbol(s) => format!("{s:?}"),
                Dim::Unknown => "None".into(),
            })
            .collect();
        format!(
            "NodeArg(name={:?}, type={:?}, shape=[{}])",
            self.spec.name,
            onnx_type(&self.spec.dtype),
            dims.join(", ")
        )
    }
}

/// An ONNX model opened for repeated runs, like onnxruntime's `InferenceSession`.
#[pyclass(name = "Session", module = "tensorforge", frozen)]
struct PySession {
    inner: Session,
}

#[pymethods]
impl PySession {
    #[new]
    #[pyo3(signature = (path, threads = None))]
    fn new(py: Python<'_>, path: std::path::PathBuf, threads: Option<usize>) -> PyResult<Self> {
        guard(|| {
            if !path.exists() {
                return Err(PyFileNotFoundError::new_err(format!(
                    "{}: no such file",
                    path.display()
                )));
            }
            let inner = py
                .detach(|| Session::open(&path, threads))
                .map_err(value_err)?;
            Ok(PySession { inner })
        })
    }

    /// The model's inputs (initializers excluded).
    #[getter(inputs)]
    fn input_specs(&self) -> Vec<NodeArg> {
        self.inner
            .inputs()
            .iter()
            .map(|s| NodeArg { spec: s.clone() })
            .collect()
    }

    /// The model's outputs.
    #[getter(outputs)]
    fn output_specs(&self) -> Vec<NodeArg> {
        self.inner
            .outputs()
            .iter()
            .map(|s| NodeArg { spec: s.clone() })
            .collect()
    }

    /// onnxruntime's spelling of `inputs`.
    #[pyo3(name = "get_inputs")]
    fn input_list(&self) -> Vec<NodeArg> {
        self.input_specs()
    }

    /// onnxruntime's spelling of `outputs`.
    #[pyo3(name = "get_outputs")]
    fn output_list(&self) -> Vec<NodeArg> {
        self.output_specs()
    }

    /// Worker threads of the session.
    #[getter]
    fn threads(&self) -> usize {
        self.inner.threads()
    }

    /// What the import and the JIT noted (approximations, kernels left to the interpreter).
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.inner.notes()
    }

    /// Run on `input_feed` ({name: array}); return the outputs named in `output_names` (all,
    /// in declared order, when None) as a list of arrays.
    #[pyo3(signature = (output_names, input_feed))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        output_names: Option<Vec<String>>,
        input_feed: &Bound<'py, PyDict>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        guard(|| {
            let (names, held) = Self::hold(input_feed)?;
            let views = held
                .iter()
                .zip(&names)
                .map(|(h, n)| h.view(n))
                .collect::<PyResult<Vec<_>>>()?;
            let outs = py
                .detach(|| self.inner.run(&views, output_names.as_deref()))
                .map_err(value_err)?;
            outs.into_iter()
                .map(|o| match o.data {
                    NpyData::F32(v) => recycled_array(py, &o.shape, v, self.inner.recycler()),
                    data => to_numpy(py, &o.shape, data),
                })
                .collect()
        })
    }

    /// What one run costs inside the library, ns per run over `reps` runs on `input_feed`
    /// (inputs converted, executed, outputs handed over; no Python objects made): the
    /// denominator of the Python call overhead in docs/python.md.
    fn _run_rust_ns(&self, input_feed: &Bound<'_, PyDict>, reps: u32) -> PyResult<f64> {
        guard(|| {
            let (names, held) = Self::hold(input_feed)?;
            let views = held
                .iter()
                .zip(&names)
                .map(|(h, n)| h.view(n))
                .collect::<PyResult<Vec<_>>>()?;
            self.inner.run(&views, None).map_err(value_err)?;
            let t0 = std::time::Instant::now();
            for _ in 0..reps.max(1) {
                std::hint::black_box(self.inner.run(&views, None).map_err(value_err)?);
            }
            Ok(t0.elapsed().as_nanos() as f64 / reps.max(1) as f64)
        })
    }
}

/// The f32 vector behind an output array: when the array and every view of it are gone,
/// Python drops this base object and the vector goes back to its session
/// ([`Recycler`]), where a later run writes its outputs into it instead of into fresh memory
/// (onnxruntime reuses its outputs' memory too).
#[pyclass(module = "tensorforge")]
struct OutputBuffer {
    values: numpy::ndarray::Array1<f32>,
    back: Recycler,
}

impl Drop for OutputBuffer {
    fn drop(&mut self) {
        let a = std::mem::replace(&mut self.values, numpy::ndarray::Array1::zeros(0));
        let (v, _) = a.into_raw_vec_and_offset();
        self.back.give(v);
    }
}

/// A NumPy array of `shape` over `v`, its base an [`OutputBuffer`] that hands `v` back to
/// `back` when the array dies. Writable, as onnxruntime's outputs are.
fn recycled_array<'py>(
    py: Python<'py>,
    shape: &[usize],
    v: Vec<f32>,
    back: Recycler,
) -> PyResult<Bound<'py, PyAny>> {
    let owner = Bound::new(
        py,
        OutputBuffer {
            values: numpy::ndarray::Array1::from_vec(v),
            back,
        },
    )?;
    let flat = {
        let values = &owner.borrow().values;
        // SAFETY: `owner` becomes the array's base object, so it outlives the array, and
        // nothing reallocates or moves `values` while it lives (it is only read here, and
        // taken out in `drop`, after the array and its views are gone).
        unsafe { numpy::PyArray1::borrow_from_array(values, owner.clone().into_any()) }
    };
    Ok(flat.reshape(shape.to_vec())?.into_any())
}

impl PySession {
    fn hold<'py>(input_feed: &Bound<'py, PyDict>) -> PyResult<(Vec<String>, Vec<Held<'py>>)> {
        let mut names = Vec::with_capacity(input_feed.len());
        let mut held = Vec::with_capacity(input_feed.len());
        for (k, v) in input_feed.iter() {
            let name: String = k
                .extract()
                .map_err(|_| value_err("input_feed keys must be input names (str)"))?;
            held.push(Held::new(&v, &name)?);
            names.push(name);
        }
        Ok((names, held))
    }
}

fn import_options(dims: Option<BTreeMap<String, usize>>) -> ImportOptions {
    ImportOptions {
        dims: dims.unwrap_or_default(),
        ..Default::default()
    }
}

fn load(path: &str, dims: Option<BTreeMap<String, usize>>) -> PyResult<tensorforge_graph::Graph> {
    if !std::path::Path::new(path).exists() {
        return Err(PyFileNotFoundError::new_err(format!(
            "{path}: no such file"
        )));
    }
    let (g, _, _) = tensorforge_graph::load::load_graph(path, &import_options(dims), false)
        .map_err(value_err)?;
    Ok(g)
}

/// `tensorforge fuse GRAPH --json`: the fused program's kernels, their traffic and time on
/// `hw`, the unfused comparison and every decision with its reason.
#[pyfunction]
#[pyo3(signature = (path, *, hw = None, hw_file = None, dims = None))]
fn _fuse_report(
    py: Python<'_>,
    path: &str,
    hw: Option<&str>,
    hw_file: Option<&str>,
    dims: Option<BTreeMap<String, usize>>,
) -> PyResult<String> {
    guard(|| {
        let g = load(path, dims)?;
        let spec = crate::model::hardware(hw, hw_file)?;
        py.detach(|| {
            let c = tensorforge_graph::fusion::compile(&g)
                .map_err(|e| value_err(format!("{path}: {e}")))?;
            let r = tensorforge_graph::traffic::fuse_report(&c, &spec).map_err(value_err)?;
            to_json(&r)
        })
    })
}

/// `tensorforge plan-memory GRAPH --json`: the static memory plan (offsets, lifetimes, peak).
#[pyfunction]
#[pyo3(signature = (path, *, align = tensorforge_graph::planner::DEFAULT_ALIGN_BYTES, unfused = false, capacity_bytes = None, dims = None))]
fn _plan_memory(
    path: &str,
    align: u64,
    unfused: bool,
    capacity_bytes: Option<u64>,
    dims: Option<BTreeMap<String, usize>>,
) -> PyResult<String> {
    guard(|| {
        let g = load(path, dims)?;
        let c = tensorforge_graph::fusion::compile(&g)
            .map_err(|e| value_err(format!("{path}: {e}")))?;
        let prog = if unfused { &c.unfused } else { &c.fused };
        let p = tensorforge_graph::planner::plan(prog, align)
            .map_err(|e| value_err(format!("{path}: {e}")))?;
        if let Some(cap) = capacity_bytes {
            tensorforge_graph::planner::check_capacity(&p, cap)
                .map_err(|e| value_err(format!("{path}: {e}")))?;
        }
        to_json(&p)
    })
}

/// `tensorforge memory-traffic --json`: the DRAM traffic of RMSNorm → SwiGLU, unfused and
/// fused, with and without the weights.
#[pyfunction]
#[pyo3(signature = (*, seq = 4096, dim = 8192, ffn = None, dtype = "fp16", hw = None, hw_file = None))]
fn _memory_traffic(
    seq: u64,
    dim: u64,
    ffn: Option<u64>,
    dtype: &str,
    hw: Option<&str>,
    hw_file: Option<&str>,
) -> PyResult<String> {
    guard(|| {
        let dt = tensorforge_core::DType::parse(dtype).map_err(value_err)?;
        let spec = crate::model::hardware(hw, hw_file)?;
        let r =
            tensorforge_graph::mlp::memory_traffic(seq, dim, ffn, dt, &spec).map_err(value_err)?;
        to_json(&r)
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySession>()?;
    m.add_class::<NodeArg>()?;
    m.add_function(wrap_pyfunction!(_fuse_report, m)?)?;
    m.add_function(wrap_pyfunction!(_plan_memory, m)?)?;
    m.add_function(wrap_pyfunction!(_memory_traffic, m)?)?;
    Ok(())
}
