//! One kernel, named, over borrowed tensors: the dispatch that `tensorforge kernel OP` (on
//! `.npy` files) and the Python package (on NumPy arrays) share, so both check dtypes and
//! shapes, read per-tensor or per-axis quantization parameters and shape the output the same
//! way, with the same one-line errors.
//!
//! The float kernels take f32 or f64 and reduce or normalize over the last axis; the
//! quantization kernels take f32 values or u8/i8 codes. Left out: broadcasting (the two
//! inputs of a binary kernel must have one shape and one dtype), strided inputs (a caller
//! passes contiguous row-major data) and dtypes other than those named.

use crate::fused::{rmsnorm_swiglu_fused, SwigluShape};
use crate::npy::{NpyArray, NpyData};
use crate::quant::{self, QuantInt, QuantParams};
use crate::{checked_numel, elementary, naive, KernelError, Shape2};
use serde::{Deserialize, Serialize};

/// The kernels [`run`] dispatches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelOp {
    /// log(e^a + e^b), elementwise over two inputs of one shape (f32/f64).
    Logaddexp,
    /// log2(2^a + 2^b), elementwise over two inputs of one shape (f32/f64).
    Logaddexp2,
    /// log Σ e^x over the last axis (f32/f64); the output drops that axis.
    Logsumexp,
    /// softmax over the last axis (f32/f64).
    Softmax,
    /// log_softmax over the last axis (f32/f64).
    LogSoftmax,
    /// f32 → u8/i8, per tensor or per axis.
    Quantize,
    /// u8/i8 → f32, per tensor or per axis.
    Dequantize,
    /// u8/i8 → u8/i8 with an output scale and zero point.
    Requantize,
}

impl KernelOp {
    /// The op's name (`log_softmax`).
    pub fn name(self) -> &'static str {
        match self {
            KernelOp::Logaddexp => "logaddexp",
            KernelOp::Logaddexp2 => "logaddexp2",
            KernelOp::Logsumexp => "logsumexp",
            KernelOp::Softmax => "softmax",
            KernelOp::LogSoftmax => "log_softmax",
            KernelOp::Quantize => "quantize",
            KernelOp::Dequantize => "dequantize",
            KernelOp::Requantize => "requantize",
        }
    }

    /// Number of input tensors.
    pub fn arity(self) -> usize {
        match self {
            KernelOp::Logaddexp | KernelOp::Logaddexp2 => 2,
            _ => 1,
        }
    }

    /// Whether a naive textbook form exists (`naive: true`).
    pub fn has_naive(self) -> bool {
        matches!(
            self,
            KernelOp::Logaddexp
                | KernelOp::Logaddexp2
                | KernelOp::Logsumexp
                | KernelOp::Softmax
                | KernelOp::LogSoftmax
        )
    }
}

/// A borrowed, contiguous, row-major buffer of one of the dtypes the kernels know.
#[derive(Debug, Clone, Copy)]
pub enum DataRef<'a> {
    /// float32
    F32(&'a [f32]),
    /// float64
    F64(&'a [f64]),
    /// uint8
    U8(&'a [u8]),
    /// int8
    I8(&'a [i8]),
    /// int32
    I32(&'a [i32]),
    /// int64
    I64(&'a [i64]),
}

impl DataRef<'_> {
    /// NumPy's name of the dtype (`float32`).
    pub fn dtype_name(&self) -> &'static str {
        match self {
            DataRef::F32(_) => "float32",
            DataRef::F64(_) => "float64",
            DataRef::U8(_) => "uint8",
            DataRef::I8(_) => "int8",
            DataRef::I32(_) => "int32",
            DataRef::I64(_) => "int64",
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            DataRef::F32(v) => v.len(),
            DataRef::F64(v) => v.len(),
            DataRef::U8(v) => v.len(),
            DataRef::I8(v) => v.len(),
            DataRef::I32(v) => v.len(),
            DataRef::I64(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl NpyData {
    /// A borrowed view of the data.
    pub fn view(&self) -> DataRef<'_> {
        match self {
            NpyData::F32(v) => DataRef::F32(v),
            NpyData::F64(v) => DataRef::F64(v),
            NpyData::U8(v) => DataRef::U8(v),
            NpyData::I8(v) => DataRef::I8(v),
            NpyData::I32(v) => DataRef::I32(v),
            NpyData::I64(v) => DataRef::I64(v),
        }
    }
}

/// One named input: what errors call it (a file name, a Python argument), its shape and data.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a> {
    /// How errors name it.
    pub name: &'a str,
    /// Row-major shape.
    pub shape: &'a [usize],
    /// Its elements (`shape`'s product of them).
    pub data: DataRef<'a>,
}

impl<'a> TensorRef<'a> {
    /// A view of a parsed `.npy` array named `name`.
    pub fn of(name: &'a str, a: &'a NpyArray) -> Self {
        TensorRef {
            name,
            shape: &a.shape,
            data: a.data.view(),
        }
    }

    fn check(&self) -> Result<(), KernelError> {
        let n = checked_numel(self.shape)?;
        if n != self.data.len() {
            return Err(KernelError::InvalidArgument(format!(
                "`{}` has shape {:?} ({n} elements) but {} elements",
                self.name,
                self.shape,
                self.data.len()
            )));
        }
        Ok(())
    }
}

/// The code type of a quantized tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantDtype {
    /// uint8 codes.
    U8,
    /// int8 codes.
    I8,
}

impl QuantDtype {
    /// Parse `u8`/`uint8`/`i8`/`int8`; an error names `dtype` and the value.
    pub fn parse(s: &str) -> Result<Self, KernelError> {
        match s {
            "u8" | "uint8" => Ok(QuantDtype::U8),
            "i8" | "int8" => Ok(QuantDtype::I8),
            other => Err(KernelError::InvalidArgument(format!(
                "invalid value for `dtype`: `{other}` (expected u8 or i8)"
            ))),
        }
    }
}

/// The arithmetic of requantization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequantMethod {
    /// gemmlowp/TFLite integer path (the default).
    #[default]
    Fixed,
    /// f32 arithmetic.
    Float,
}

impl RequantMethod {
    /// Parse `fixed`/`float`; an error names `method` and the value.
    pub fn parse(s: &str) -> Result<Self, KernelError> {
        match s {
            "fixed" => Ok(RequantMethod::Fixed),
            "float" => Ok(RequantMethod::Float),
            m => Err(KernelError::InvalidArgument(format!(
                "invalid value for `method`: `{m}` (expected fixed or float)"
            ))),
        }
    }
}

/// The parameters of the quantization kernels (ignored by the float kernels) and the naive
/// switch of the float ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelParams {
    /// Scales: one per tensor, or one per channel of `axis`.
    pub scale: Vec<f32>,
    /// Zero points, as many as scales (empty: all 0).
    pub zero_point: Vec<i32>,
    /// The channel axis of per-axis (de)quantization.
    pub axis: Option<usize>,
    /// The code type of quantize's and requantize's output (default u8; requantize: the
    /// input's type).
    pub dtype: Option<QuantDtype>,
    /// Requantize's output scale.
    pub out_scale: Option<f32>,
    /// Requantize's output zero point (default 0).
    pub out_zero_point: Option<i32>,
    /// Requantize's arithmetic.
    pub method: RequantMethod,
    /// Run the naive textbook float kernel instead (what the overflow sweep catches).
    pub naive: bool,
}

fn bad(msg: String) -> KernelError {
    KernelError::InvalidArgument(msg)
}

/// Leading dims and last-axis length of a shape (a 0-d array is one row of one element).
fn rows_cols(shape: &[usize]) -> Result<(Vec<usize>, Shape2), KernelError> {
    match shape.split_last() {
        None => Ok((vec![], Shape2::new(1, 1))),
        Some((&cols, lead)) => Ok((lead.to_vec(), Shape2::new(checked_numel(lead)?, cols))),
    }
}

fn unary_rows<T: naive::NativeFloat>(
    op: KernelOp,
    naive_k: bool,
    x: &[T],
    s: Shape2,
) -> Result<Vec<T>, KernelError> {
    let zero = T::from_f64(0.0);
    if op == KernelOp::Logsumexp {
        let mut o = vec![zero; s.rows];
        if naive_k {
            naive::logsumexp(x, s, &mut o)?
        } else {
            elementary::logsumexp(x, s, &mut o)?
        }
        return Ok(o);
    }
    let mut o = vec![zero; x.len()];
    match (op, naive_k) {
        (KernelOp::Softmax, false) => elementary::softmax(x, s, &mut o)?,
        (KernelOp::Softmax, true) => naive::softmax(x, s, &mut o)?,
        (_, false) => elementary::log_softmax(x, s, &mut o)?,
        (_, true) => naive::log_softmax(x, s, &mut o)?,
    }
    Ok(o)
}

fn binary<T: naive::NativeFloat>(
    op: KernelOp,
    naive_k: bool,
    a: &[T],
    b: &[T],
) -> Result<Vec<T>, KernelError> {
    let mut o = vec![T::from_f64(0.0); a.len()];
    match (op, naive_k) {
        (KernelOp::Logaddexp, false) => elementary::logaddexp_slice(a, b, &mut o)?,
        (KernelOp::Logaddexp, true) => naive::logaddexp_slice(a, b, &mut o)?,
        (_, false) => elementary::logaddexp2_slice(a, b, &mut o)?,
        (_, true) => naive::logaddexp2_slice(a, b, &mut o)?,
    }
    Ok(o)
}

/// Per-tensor or per-axis (scales, zero points), checked against the input's shape.
fn quant_params(
    op: KernelOp,
    p: &KernelParams,
    shape: &[usize],
) -> Result<(Vec<f32>, Vec<i32>), KernelError> {
    if p.scale.is_empty() {
        return Err(bad(format!("`scale` is required for {}", op.name())));
    }
    let channels = match p.axis {
        Some(ax) => *shape.get(ax).ok_or_else(|| {
            bad(format!(
                "invalid value for `axis`: {ax} (the input has rank {})",
                shape.len()
            ))
        })?,
        None => 1,
    };
    let zps = if p.zero_point.is_empty() {
        vec![0; p.scale.len()]
    } else {
        p.zero_point.clone()
    };
    if p.axis.is_none() && (p.scale.len() != 1 || zps.len() != 1) {
        return Err(bad(
            "per-tensor quantization takes one `scale` and one `zero_point`; give `axis` for lists"
                .into(),
        ));
    }
    if p.scale.len() != channels || zps.len() != channels {
        return Err(bad(format!(
            "`axis` {} has {channels} channels but {} scales and {} zero points were given",
            p.axis.unwrap_or(0),
            p.scale.len(),
            zps.len()
        )));
    }
    Ok((p.scale.clone(), zps))
}

fn quantize_as<Q: QuantInt>(
    x: &[f32],
    shape: &[usize],
    axis: Option<usize>,
    scales: &[f32],
    zps: &[i32],
) -> Result<Vec<Q>, KernelError> {
    let mut o = vec![Q::from_clamped(Q::MIN.max(0)); x.len()];
    match axis {
        Some(ax) => quant::quantize_per_axis(x, shape, ax, scales, zps, &mut o)?,
        None => quant::quantize(x, scales[0], zps[0], &mut o)?,
    }
    Ok(o)
}

fn dequantize_as<Q: QuantInt>(
    q: &[Q],
    shape: &[usize],
    axis: Option<usize>,
    scales: &[f32],
    zps: &[i32],
) -> Result<Vec<f32>, KernelError> {
    let mut o = vec![0.0f32; q.len()];
    match axis {
        Some(ax) => quant::dequantize_per_axis(q, shape, ax, scales, zps, &mut o)?,
        None => quant::dequantize(q, scales[0], zps[0], &mut o)?,
    }
    Ok(o)
}

fn requantize_as<Qi: QuantInt, Qo: QuantInt>(
    q: &[Qi],
    input: QuantParams,
    output: QuantParams,
    method: RequantMethod,
) -> Result<Vec<Qo>, KernelError> {
    let mut o = vec![Qo::from_clamped(Qo::MIN.max(0)); q.len()];
    match method {
        RequantMethod::Fixed => quant::requantize_fixed(q, input, output, &mut o)?,
        RequantMethod::Float => quant::requantize_float(q, input, output, &mut o)?,
    }
    Ok(o)
}

/// Run `op` on `inputs` ([`KernelOp::arity`] of them) with `p`; the result is a new array.
///
/// ```
/// use tensorforge_kernels::call::{run, DataRef, KernelOp, KernelParams, TensorRef};
/// // softmax of one row [0, ln 3] = [1/4, 3/4]
/// let x = [0.0f32, 3.0f32.ln()];
/// let t = TensorRef { name: "x", shape: &[1, 2], data: DataRef::F32(&x) };
/// let out = run(KernelOp::Softmax, &[t], &KernelParams::default()).unwrap();
/// let tensorforge_kernels::npy::NpyData::F32(v) = out.data else { panic!() };
/// assert!((v[0] - 0.25).abs() < 1e-6 && (v[1] - 0.75).abs() < 1e-6);
/// ```
pub fn run(op: KernelOp, inputs: &[TensorRef], p: &KernelParams) -> Result<NpyArray, KernelError> {
    if inputs.len() != op.arity() {
        return Err(bad(format!(
            "{} takes {} input(s), {} given",
            op.name(),
            op.arity(),
            inputs.len()
        )));
    }
    if p.naive && !op.has_naive() {
        return Err(bad(
            "`naive` applies to logaddexp, logaddexp2, logsumexp, softmax and log_softmax only"
                .into(),
        ));
    }
    for t in inputs {
        t.check()?;
    }
    let x = inputs[0];
    let shape = x.shape.to_vec();
    match op {
        KernelOp::Logaddexp | KernelOp::Logaddexp2 => {
            let y = inputs[1];
            if x.shape != y.shape {
                return Err(bad(format!(
                    "inputs differ in shape: {} is {:?}, {} is {:?}",
                    x.name, x.shape, y.name, y.shape
                )));
            }
            let data = match (x.data, y.data) {
                (DataRef::F32(a), DataRef::F32(b)) => NpyData::F32(binary(op, p.naive, a, b)?),
                (DataRef::F64(a), DataRef::F64(b)) => NpyData::F64(binary(op, p.naive, a, b)?),
                (a, b) => {
                    return Err(bad(format!(
                        "inputs must both be float32 or both float64, got {} and {}",
                        a.dtype_name(),
                        b.dtype_name()
                    )))
                }
            };
            NpyArray::new(shape, data)
        }
        KernelOp::Logsumexp | KernelOp::Softmax | KernelOp::LogSoftmax => {
            let (lead, s) = rows_cols(x.shape)?;
            let data = match x.data {
                DataRef::F32(v) => NpyData::F32(unary_rows(op, p.naive, v, s)?),
                DataRef::F64(v) => NpyData::F64(unary_rows(op, p.naive, v, s)?),
                other => {
                    return Err(bad(format!(
                        "{} needs float32 or float64 input, got {}",
                        op.name(),
                        other.dtype_name()
                    )))
                }
            };
            NpyArray::new(
                if op == KernelOp::Logsumexp {
                    lead
                } else {
                    shape
                },
                data,
            )
        }
        KernelOp::Quantize => {
            let DataRef::F32(v) = x.data else {
                return Err(bad(format!(
                    "quantize needs float32 input, got {}",
                    x.data.dtype_name()
                )));
            };
            let (scales, zps) = quant_params(op, p, &shape)?;
            let data = match p.dtype.unwrap_or(QuantDtype::U8) {
                QuantDtype::U8 => NpyData::U8(quantize_as(v, &shape, p.axis, &scales, &zps)?),
                QuantDtype::I8 => NpyData::I8(quantize_as(v, &shape, p.axis, &scales, &zps)?),
            };
            NpyArray::new(shape, data)
        }
        KernelOp::Dequantize => {
            let (scales, zps) = quant_params(op, p, &shape)?;
            let data = match x.data {
                DataRef::U8(q) => dequantize_as(q, &shape, p.axis, &scales, &zps)?,
                DataRef::I8(q) => dequantize_as(q, &shape, p.axis, &scales, &zps)?,
                other => {
                    return Err(bad(format!(
                        "dequantize needs uint8 or int8 input, got {}",
                        other.dtype_name()
                    )))
                }
            };
            NpyArray::new(shape, NpyData::F32(data))
        }
        KernelOp::Requantize => {
            if p.axis.is_some() {
                return Err(bad(
                    "requantize is per tensor only; `axis` is not supported".into(),
                ));
            }
            let in_dtype = match x.data {
                DataRef::U8(_) => QuantDtype::U8,
                DataRef::I8(_) => QuantDtype::I8,
                other => {
                    return Err(bad(format!(
                        "requantize needs uint8 or int8 input, got {}",
                        other.dtype_name()
                    )))
                }
            };
            let (scales, zps) = quant_params(op, p, &shape)?;
            let input = QuantParams {
                scale: scales[0],
                zero_point: zps[0],
            };
            let output = QuantParams {
                scale: p
                    .out_scale
                    .ok_or_else(|| bad("`out_scale` is required for requantize".into()))?,
                zero_point: p.out_zero_point.unwrap_or(0),
            };
            let m = p.method;
            let data = match (x.data, p.dtype.unwrap_or(in_dtype)) {
                (DataRef::U8(q), QuantDtype::U8) => {
                    NpyData::U8(requantize_as(q, input, output, m)?)
                }
                (DataRef::U8(q), QuantDtype::I8) => {
                    NpyData::I8(requantize_as(q, input, output, m)?)
                }
                (DataRef::I8(q), QuantDtype::U8) => {
                    NpyData::U8(requantize_as(q, input, output, m)?)
                }
                (DataRef::I8(q), QuantDtype::I8) => {
                    NpyData::I8(requantize_as(q, input, output, m)?)
                }
                _ => unreachable!("in_dtype checked the input's type above"),
            };
            NpyArray::new(shape, data)
        }
    }
}

/// The fused RMSNorm+SwiGLU of [`crate::fused`] on shaped tensors: `x` \[..., D\] (any
/// leading dims, flattened to T rows), `gamma` \[D\], `w_gate` and `w_up` \[D, F\]; the result
/// is \[..., F\] in f32.
///
/// ```
/// use tensorforge_kernels::call::{rmsnorm_swiglu, DataRef, TensorRef};
/// // D = F = 1, x = 2, γ = 1: h = 2/sqrt(4 + 0) = 1; g = u = 1; out = SiLU(1)·1 = 1/(1+e^-1)
/// let one = [1.0f32];
/// let t = |name, shape, v| TensorRef { name, shape, data: DataRef::F32(v) };
/// let out = rmsnorm_swiglu(t("x", &[1, 1], &[2.0]), t("gamma", &[1], &one),
///     t("w_gate", &[1, 1], &one), t("w_up", &[1, 1], &one), 0.0).unwrap();
/// assert_eq!(out.shape, vec![1, 1]);
/// ```
pub fn rmsnorm_swiglu(
    x: TensorRef,
    gamma: TensorRef,
    w_gate: TensorRef,
    w_up: TensorRef,
    eps: f32,
) -> Result<NpyArray, KernelError> {
    let f32s = |t: &TensorRef<'_>| -> Result<Vec<usize>, KernelError> {
        t.check()?;
        match t.data {
            DataRef::F32(_) => Ok(t.shape.to_vec()),
            other => Err(bad(format!(
                "rmsnorm_swiglu needs float32 `{}`, got {}",
                t.name,
                other.dtype_name()
            ))),
        }
    };
    let (xs, gs, wg, wu) = (f32s(&x)?, f32s(&gamma)?, f32s(&w_gate)?, f32s(&w_up)?);
    let Some((&d, lead)) = xs.split_last() else {
        return Err(bad(format!(
            "`{}` must have at least one axis (its last is d_model), got shape []",
            x.name
        )));
    };
    if gs != [d] {
        return Err(bad(format!(
            "`{}` has shape {gs:?}; it must be [{d}] (the last axis of `{}`)",
            gamma.name, x.name
        )));
    }
    if wg.len() != 2 || wg[0] != d {
        return Err(bad(format!(
            "`{}` has shape {wg:?}; it must be [{d}, d_ff]",
            w_gate.name
        )));
    }
    if wu != wg {
        return Err(bad(format!(
            "`{}` has shape {wu:?}; it must equal `{}`'s {wg:?}",
            w_up.name, w_gate.name
        )));
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(bad(format!(
            "invalid value for `eps`: {eps} (must be finite and >= 0)"
        )));
    }
    let shape = SwigluShape {
        tokens: checked_numel(lead)?,
        d_model: d,
        d_ff: wg[1],
    };
    let mut out_shape = lead.to_vec();
    out_shape.push(shape.d_ff);
    let n = checked_numel(&out_shape)?;
    let mut out = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| KernelError::ShapeOverflow {
            shape: out_shape.clone(),
        })?;
    out.resize(n, 0.0f32);
    let (DataRef::F32(xv), DataRef::F32(gv), DataRef::F32(wgv), DataRef::F32(wuv)) =
        (x.data, gamma.data, w_gate.data, w_up.data)
    else {
        unreachable!("dtypes checked above")
    };
    rmsnorm_swiglu_fused(xv, gv, wgv, wuv, shape, eps, &mut out)?;
    NpyArray::new(out_shape, NpyData::F32(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32t<'a>(name: &'a str, shape: &'a [usize], v: &'a [f32]) -> TensorRef<'a> {
        TensorRef {
            name,
            shape,
            data: DataRef::F32(v),
        }
    }

    #[test]
    fn logsumexp_drops_the_last_axis() {
        // rows [0, 0] and [1000, 1000]: log(2) and 1000 + log(2) (the naive form overflows).
        let x = [0.0f32, 0.0, 1000.0, 1000.0];
        let out = run(
            KernelOp::Logsumexp,
            &[f32t("x", &[2, 2], &x)],
            &KernelParams::default(),
        )
        .unwrap();
        assert_eq!(out.shape, vec![2]);
        let NpyData::F32(v) = out.data else { panic!() };
        assert!((v[0] - std::f32::consts::LN_2).abs() < 1e-6);
        assert!((v[1] - (1000.0 + std::f32::consts::LN_2)).abs() < 1e-3);
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let x = [1.0f32; 4];
        let i = [1i32; 4];
        let p = KernelParams::default();
        let e = run(
            KernelOp::Logaddexp,
            &[f32t("a", &[4], &x), f32t("b", &[2, 2], &x)],
            &p,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("inputs differ in shape: a is [4], b is [2, 2]"),
            "{e}"
        );
        let ti = TensorRef {
            name: "x",
            shape: &[4],
            data: DataRef::I32(&i),
        };
        let e = run(KernelOp::Softmax, &[ti], &p).unwrap_err().to_string();
        assert!(
            e.contains("softmax needs float32 or float64 input, got int32"),
            "{e}"
        );
        let e = run(KernelOp::Quantize, &[f32t("x", &[4], &x)], &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`scale` is required for quantize"), "{e}");
        let e = run(KernelOp::Softmax, &[f32t("x", &[3], &x)], &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("shape [3] (3 elements) but 4 elements"), "{e}");
    }

    #[test]
    fn per_axis_quantize_matches_hand_values() {
        // channel 0: scale 0.5, zp 10 → 1.0/0.5 + 10 = 12; channel 1: scale 2, zp 0 → 4/2 = 2.
        let x = [1.0f32, 4.0];
        let p = KernelParams {
            scale: vec![0.5, 2.0],
            zero_point: vec![10, 0],
            axis: Some(1),
            ..Default::default()
        };
        let out = run(KernelOp::Quantize, &[f32t("x", &[1, 2], &x)], &p).unwrap();
        assert_eq!(out.data, NpyData::U8(vec![12, 2]));
    }

    #[test]
    fn rmsnorm_swiglu_keeps_leading_dims() {
        // x = [[3, 4]]: mean(x²) = 12.5, h = x/sqrt(12.5) ⊙ 1; W = identity → g = u = h,
        // out = SiLU(h) ⊙ h.
        let x = [3.0f32, 4.0];
        let w = [1.0f32, 0.0, 0.0, 1.0];
        let out = rmsnorm_swiglu(
            f32t("x", &[1, 1, 2], &x),
            f32t("gamma", &[2], &[1.0, 1.0]),
            f32t("w_gate", &[2, 2], &w),
            f32t("w_up", &[2, 2], &w),
            0.0,
        )
        .unwrap();
        assert_eq!(out.shape, vec![1, 1, 2]);
        let NpyData::F32(v) = out.data else { panic!() };
        for (o, xv) in v.iter().zip(x) {
            let h = xv / 12.5f32.sqrt();
            let want = h / (1.0 + (-h).exp()) * h;
            assert!((o - want).abs() < 1e-5, "{o} vs {want}");
        }
        let e = rmsnorm_swiglu(
            f32t("x", &[2], &x),
            f32t("gamma", &[3], &[1.0; 3]),
            f32t("w_gate", &[2, 2], &w),
            f32t("w_up", &[2, 2], &w),
            0.0,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`gamma` has shape [3]; it must be [2]"), "{e}");
    }
}
