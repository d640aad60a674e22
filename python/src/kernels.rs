//! The overflow-safe kernels and saturating quantization on NumPy arrays: each input is
//! borrowed read-only without a copy when it is C-contiguous (copied once when it is not),
//! the kernel runs with the GIL released, and the result is a new array that owns the
//! kernel's output buffer (no copy on the way out). Dispatch, dtype and shape checks are the
//! library's (`tensorforge_kernels::call`), so errors read as the CLI's `kernel` command's.

use crate::{guard, value_err};
use numpy::{
    IntoPyArray, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use tensorforge_kernels::call::{
    self, DataRef, KernelOp, KernelParams, QuantDtype, RequantMethod, TensorRef,
};
use tensorforge_kernels::npy::{NpyArray, NpyData};

/// One input held for the duration of a call: a borrowed NumPy buffer, or an owned
/// contiguous copy of a strided one.
pub(crate) enum Held<'py> {
    F32(PyReadonlyArrayDyn<'py, f32>),
    F64(PyReadonlyArrayDyn<'py, f64>),
    U8(PyReadonlyArrayDyn<'py, u8>),
    I8(PyReadonlyArrayDyn<'py, i8>),
    I32(PyReadonlyArrayDyn<'py, i32>),
    I64(PyReadonlyArrayDyn<'py, i64>),
    Owned(Vec<usize>, NpyData),
}

fn owned<T: Clone + numpy::Element>(a: &PyReadonlyArrayDyn<'_, T>) -> (Vec<usize>, Vec<T>) {
    (a.shape().to_vec(), a.as_array().iter().cloned().collect())
}

impl<'py> Held<'py> {
    /// Hold `obj` (an ndarray, or anything `numpy.asarray` accepts); `name` names it in errors.
    pub(crate) fn new(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Held<'py>> {
        let py = obj.py();
        let arr: Bound<'py, PyAny> = if obj.cast::<PyUntypedArray>().is_ok() {
            obj.clone()
        } else {
            py.import("numpy")?.call_method1("asarray", (obj,))?
        };
        macro_rules! take {
            ($t:ty, $v:ident) => {
                if let Ok(a) = arr.extract::<PyReadonlyArrayDyn<'py, $t>>() {
                    if a.is_c_contiguous() {
                        return Ok(Held::$v(a));
                    }
                    let (s, v) = owned(&a);
                    return Ok(Held::Owned(s, NpyData::$v(v)));
                }
            };
        }
        take!(f32, F32);
        take!(f64, F64);
        take!(u8, U8);
        take!(i8, I8);
        take!(i32, I32);
        take!(i64, I64);
        let dtype = arr
            .cast::<PyUntypedArray>()
            .map(|a| a.dtype().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Err(value_err(format!(
            "`{name}` has dtype {dtype}; the kernels take float32, float64, uint8, int8, int32 or int64"
        )))
    }

    /// The borrowed view the library takes.
    pub(crate) fn view<'a>(&'a self, name: &'a str) -> PyResult<TensorRef<'a>> {
        let slice_err = |_| value_err(format!("`{name}` is not contiguous"));
        let (shape, data): (&[usize], DataRef<'a>) = match self {
            Held::F32(a) => (a.shape(), DataRef::F32(a.as_slice().map_err(slice_err)?)),
            Held::F64(a) => (a.shape(), DataRef::F64(a.as_slice().map_err(slice_err)?)),
            Held::U8(a) => (a.shape(), DataRef::U8(a.as_slice().map_err(slice_err)?)),
            Held::I8(a) => (a.shape(), DataRef::I8(a.as_slice().map_err(slice_err)?)),
            Held::I32(a) => (a.shape(), DataRef::I32(a.as_slice().map_err(slice_err)?)),
            Held::I64(a) => (a.shape(), DataRef::I64(a.as_slice().map_err(slice_err)?)),
            Held::Owned(s, d) => (s.as_slice(), d.view()),
        };
        Ok(TensorRef { name, shape, data })
    }
}

/// A new NumPy array owning `a`'s buffer.
pub(crate) fn to_numpy<'py>(
    py: Python<'py>,
    shape: &[usize],
    data: NpyData,
) -> PyResult<Bound<'py, PyAny>> {
    macro_rules! out {
        ($v:expr) => {
            $v.into_pyarray(py).reshape(shape.to_vec())?.into_any()
        };
    }
    Ok(match data {
        NpyData::F32(v) => out!(v),
        NpyData::F64(v) => out!(v),
        NpyData::U8(v) => out!(v),
        NpyData::I8(v) => out!(v),
        NpyData::I32(v) => out!(v),
        NpyData::I64(v) => out!(v),
    })
}

fn array_out(py: Python<'_>, a: NpyArray) -> PyResult<Bound<'_, PyAny>> {
    to_numpy(py, &a.shape, a.data)
}

/// Run `op` on the held inputs with `p`, GIL released.
fn call_op<'py>(
    py: Python<'py>,
    op: KernelOp,
    inputs: &[(&Bound<'py, PyAny>, &str)],
    p: KernelParams,
) -> PyResult<Bound<'py, PyAny>> {
    guard(|| {
        let held = inputs
            .iter()
            .map(|(o, n)| Held::new(o, n))
            .collect::<PyResult<Vec<_>>>()?;
        let views = held
            .iter()
            .zip(inputs)
            .map(|(h, (_, n))| h.view(n))
            .collect::<PyResult<Vec<_>>>()?;
        let r = py.detach(|| call::run(op, &views, &p)).map_err(value_err)?;
        array_out(py, r)
    })
}

/// A scale or zero point: one number, or a sequence of them (per axis).
macro_rules! numbers {
    ($t:ty, $obj:expr, $name:expr) => {{
        match $obj {
            None => Ok(vec![]),
            Some(o) => {
                if let Ok(v) = o.extract::<$t>() {
                    Ok(vec![v])
                } else {
                    o.extract::<Vec<$t>>().map_err(|_| {
                        value_err(format!(
                            "invalid value for `{}`: expected a number or a sequence of numbers",
                            $name
                        ))
                    })
                }
            }
        }
    }};
}

fn zero_points(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<i32>> {
    numbers!(i32, obj, "zero_point")
}

/// f32 scales from Python floats, refused where f32 would turn them into inf, 0 or a
/// subnormal (as the CLI refuses `--scale`).
fn scales(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<f32>> {
    { let v: PyResult<Vec<f64>> = numbers!(f64, obj, "scale"); v? }
        .into_iter()
        .map(|v| {
            let f = v as f32;
            if v.is_finite() && (f.is_infinite() || (v != 0.0 && !f.is_normal())) {
                Err(value_err(format!(
                    "invalid value for `scale`: {v} is outside the normal f32 range the kernels compute in"
                )))
            } else {
                Ok(f)
            }
        })
        .collect()
}

/// log(e^a + e^b) elementwise, overflow-safe (float32 or float64, one shape).
#[pyfunction]
#[pyo3(signature = (a, b, *, naive = false))]
fn logaddexp<'py>(
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    naive: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let p = KernelParams {
        naive,
        ..Default::default()
    };
    call_op(a.py(), KernelOp::Logaddexp, &[(a, "a"), (b, "b")], p)
}

/// log2(2^a + 2^b) elementwise, overflow-safe.
#[pyfunction]
#[pyo3(signature = (a, b, *, naive = false))]
fn logaddexp2<'py>(
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    naive: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let p = KernelParams {
        naive,
        ..Default::default()
    };
    call_op(a.py(), KernelOp::Logaddexp2, &[(a, "a"), (b, "b")], p)
}

/// log Σ e^x over the last axis (the output drops it).
#[pyfunction]
#[pyo3(signature = (x, *, naive = false))]
fn logsumexp<'py>(x: &Bound<'py, PyAny>, naive: bool) -> PyResult<Bound<'py, PyAny>> {
    let p = KernelParams {
        naive,
        ..Default::default()
    };
    call_op(x.py(), KernelOp::Logsumexp, &[(x, "x")], p)
}

/// softmax over the last axis.
#[pyfunction]
#[pyo3(signature = (x, *, naive = false))]
fn softmax<'py>(x: &Bound<'py, PyAny>, naive: bool) -> PyResult<Bound<'py, PyAny>> {
    let p = KernelParams {
        naive,
        ..Default::default()
    };
    call_op(x.py(), KernelOp::Softmax, &[(x, "x")], p)
}

/// log_softmax over the last axis.
#[pyfunction]
#[pyo3(signature = (x, *, naive = false))]
fn log_softmax<'py>(x: &Bound<'py, PyAny>, naive: bool) -> PyResult<Bound<'py, PyAny>> {
    let p = KernelParams {
        naive,
        ..Default::default()
    };
    call_op(x.py(), KernelOp::LogSoftmax, &[(x, "x")], p)
}

/// float32 → uint8/int8 codes, saturating: q = clamp(round_half_even(x / scale) + zero_point).
#[pyfunction]
#[pyo3(signature = (x, scale, zero_point = None, *, axis = None, dtype = "u8"))]
fn quantize<'py>(
    x: &Bound<'py, PyAny>,
    scale: &Bound<'py, PyAny>,
    zero_point: Option<&Bound<'py, PyAny>>,
    axis: Option<usize>,
    dtype: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let p = KernelParams {
        scale: scales(Some(scale))?,
        zero_point: zero_points(zero_point)?,
        axis,
        dtype: Some(QuantDtype::parse(dtype).map_err(value_err)?),
        ..Default::default()
    };
    call_op(x.py(), KernelOp::Quantize, &[(x, "x")], p)
}

/// uint8/int8 codes → float32: x = (q − zero_point) · scale.
#[pyfunction]
#[pyo3(signature = (q, scale, zero_point = None, *, axis = None))]
fn dequantize<'py>(
    q: &Bound<'py, PyAny>,
    scale: &Bound<'py, PyAny>,
    zero_point: Option<&Bound<'py, PyAny>>,
    axis: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let p = KernelParams {
        scale: scales(Some(scale))?,
        zero_point: zero_points(zero_point)?,
        axis,
        ..Default::default()
    };
    call_op(q.py(), KernelOp::Dequantize, &[(q, "q")], p)
}

/// Codes in one (scale, zero_point) → codes in another, by the gemmlowp integer path
/// (`method="fixed"`) or in f32 (`"float"`).
#[pyfunction]
#[pyo3(signature = (q, scale, zero_point, out_scale, out_zero_point = 0, *, dtype = None, method = "fixed"))]
#[allow(clippy::too_many_arguments)]
fn requantize<'py>(
    q: &Bound<'py, PyAny>,
    scale: &Bound<'py, PyAny>,
    zero_point: &Bound<'py, PyAny>,
    out_scale: f64,
    out_zero_point: i32,
    dtype: Option<&str>,
    method: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let os = scales(Some(
        &pyo3::types::PyFloat::new(q.py(), out_scale).into_any(),
    ))?;
    let p = KernelParams {
        scale: scales(Some(scale))?,
        zero_point: zero_points(Some(zero_point))?,
        out_scale: os.first().copied(),
        out_zero_point: Some(out_zero_point),
        dtype: dtype
            .map(QuantDtype::parse)
            .transpose()
            .map_err(value_err)?,
        method: RequantMethod::parse(method).map_err(value_err)?,
        ..Default::default()
    };
    call_op(q.py(), KernelOp::Requantize, &[(q, "q")], p)
}

/// Fused RMSNorm + SwiGLU: SiLU(h·W_gate) ⊙ (h·W_up), h = x / sqrt(mean(x²) + eps) ⊙ gamma;
/// x [..., D], gamma [D], w_gate and w_up [D, F] → [..., F] (float32).
#[pyfunction]
#[pyo3(signature = (x, gamma, w_gate, w_up, eps = 1e-6))]
fn rmsnorm_swiglu<'py>(
    x: &Bound<'py, PyAny>,
    gamma: &Bound<'py, PyAny>,
    w_gate: &Bound<'py, PyAny>,
    w_up: &Bound<'py, PyAny>,
    eps: f32,
) -> PyResult<Bound<'py, PyAny>> {
    let py = x.py();
    guard(|| {
        let hs = [
            Held::new(x, "x")?,
            Held::new(gamma, "gamma")?,
            Held::new(w_gate, "w_gate")?,
            Held::new(w_up, "w_up")?,
        ];
        let (vx, vg, vwg, vwu) = (
            hs[0].view("x")?,
            hs[1].view("gamma")?,
            hs[2].view("w_gate")?,
            hs[3].view("w_up")?,
        );
        let r = py
            .detach(|| call::rmsnorm_swiglu(vx, vg, vwg, vwu, eps))
            .map_err(value_err)?;
        array_out(py, r)
    })
}

/// The kernels' entry cost without the GIL: the same dispatch as [`logaddexp`] on
/// borrowed arrays, `reps` times, returning nanoseconds per call (what the Python call
/// overhead is measured against; docs/python.md).
#[pyfunction]
fn _logaddexp_rust_ns(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>, reps: u32) -> PyResult<f64> {
    let (ha, hb) = (Held::new(a, "a")?, Held::new(b, "b")?);
    let views = [ha.view("a")?, hb.view("b")?];
    let p = KernelParams::default();
    let t0 = std::time::Instant::now();
    for _ in 0..reps.max(1) {
        let r = call::run(KernelOp::Logaddexp, &views, &p).map_err(value_err)?;
        std::hint::black_box(r);
    }
    Ok(t0.elapsed().as_nanos() as f64 / reps.max(1) as f64)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(logaddexp, m)?)?;
    m.add_function(wrap_pyfunction!(logaddexp2, m)?)?;
    m.add_function(wrap_pyfunction!(logsumexp, m)?)?;
    m.add_function(wrap_pyfunction!(softmax, m)?)?;
    m.add_function(wrap_pyfunction!(log_softmax, m)?)?;
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    m.add_function(wrap_pyfunction!(dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(requantize, m)?)?;
    m.add_function(wrap_pyfunction!(rmsnorm_swiglu, m)?)?;
    m.add_function(wrap_pyfunction!(_logaddexp_rust_ns, m)?)?;
    Ok(())
}
