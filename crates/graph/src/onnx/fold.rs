//! Import-time constant folding of the shape arithmetic exporters emit around static
//! shapes: `Shape → Gather → Unsqueeze → Concat → Reshape`, `Range` for position ids,
//! `ConstantOfShape`, `Cast`, small elementwise arithmetic and comparisons. A node is
//! folded when every input it reads is a constant known at import time (for `Shape` and
//! `Size`, when the input's static shape is known); the result becomes a constant tensor and
//! no IR node. Results are small (at most [`MAX_PARAM_VALUES`] elements); anything larger,
//! or any input not known, is left to the normal lowering.
//!
//! Integers are computed in i64 (wrapping, as ONNX integer arithmetic; division truncates
//! toward zero), floats in f64 and stored as the node's float type. Left out: string and
//! complex types, `Mod` with fmod semantics, bitwise ops, `NonZero` (data-dependent shape).

use super::proto::{dt, NodeProto, TensorProto};
use super::{attr, attr_i, attr_ints, Vals, MAX_PARAM_VALUES, MAX_RANK};

/// A tensor whose values are known at import time.
#[derive(Debug, Clone)]
pub(super) struct Known {
    /// Dimensions.
    pub dims: Vec<usize>,
    /// Values, row-major.
    pub vals: Vals,
    /// ONNX data type code.
    pub code: i32,
}

/// One input of a node as the folder sees it.
pub(super) enum Arg<'a> {
    /// The optional input is not given.
    Absent,
    /// A constant (initializer, `Constant`, or an earlier folded node).
    Const(Known),
    /// A runtime tensor with a static shape (enough for `Shape` and `Size`).
    Shape(&'a [usize]),
    /// Not known at import time.
    Unknown,
}

/// The op types the folder knows.
pub(super) const FOLDABLE: &[&str] = &[
    "Shape",
    "Size",
    "Gather",
    "Concat",
    "Unsqueeze",
    "Squeeze",
    "Reshape",
    "Slice",
    "Cast",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Min",
    "Max",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "Not",
    "And",
    "Or",
    "Where",
    "ConstantOfShape",
    "Range",
    "Neg",
    "Abs",
    "Sqrt",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Expand",
    "Transpose",
    "Sin",
    "Cos",
    "Trilu",
    "MatMul",
    "Mod",
];

/// Most multiply-adds a folded MatMul may cost at import (2^24: a rotary table's
/// `inv_freq @ positions` is a few thousand).
const MAX_FOLD_MACS: u64 = 1 << 24;

type R<T> = std::result::Result<T, String>;

fn is_int_code(c: i32) -> bool {
    matches!(
        c,
        dt::INT64 | dt::INT32 | dt::INT16 | dt::INT8 | dt::UINT8 | dt::UINT16 | dt::BOOL
    )
}

fn numel(dims: &[usize]) -> R<usize> {
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n as u64 <= MAX_PARAM_VALUES)
        .ok_or_else(|| {
            format!("folded result {dims:?} exceeds {MAX_PARAM_VALUES} elements (not folded)")
        })
}

fn norm(axis: i64, rank: usize) -> R<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(a as usize)
}

fn ints(k: &Known, what: &str) -> R<Vec<i64>> {
    match &k.vals {
        Vals::Int(v) => Ok(v.clone()),
        Vals::Float(_) => Err(format!("{what} must be an integer tensor")),
    }
}

fn f64s(v: &Vals) -> Vec<f64> {
    match v {
        Vals::Int(v) => v.iter().map(|&x| x as f64).collect(),
        Vals::Float(v) => v.clone(),
    }
}

/// NumPy broadcast of two shapes.
fn bcast(a: &[usize], b: &[usize]) -> R<Vec<usize>> {
    crate::ir::broadcast_shapes(a, b)
        .ok_or_else(|| format!("shapes {a:?} and {b:?} do not broadcast"))
}

/// For every element of `out` (row-major), the flat index of the element of a tensor of
/// shape `src` that broadcasts to it.
fn bmap(src: &[usize], out: &[usize]) -> Vec<usize> {
    let n: usize = out.iter().product();
    let off = out.len() - src.len();
    let mut strides = vec![0usize; out.len()];
    let mut s = 1;
    for i in (0..src.len()).rev() {
        strides[i + off] = if src[i] == 1 { 0 } else { s };
        s *= src[i];
    }
    let mut v = Vec::with_capacity(n);
    let mut idx = vec![0usize; out.len()];
    for _ in 0..n {
        v.push(idx.iter().zip(&strides).map(|(i, s)| i * s).sum());
        for d in (0..out.len()).rev() {
            idx[d] += 1;
            if idx[d] < out[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    v
}

fn pick(v: &Vals, at: &[usize]) -> Vals {
    match v {
        Vals::Int(x) => Vals::Int(at.iter().map(|&i| x[i]).collect()),
        Vals::Float(x) => Vals::Float(at.iter().map(|&i| x[i]).collect()),
    }
}

fn cmp_op(op: &str, a: f64, b: f64) -> bool {
    match op {
        "Equal" => a == b,
        "Less" => a < b,
        "Greater" => a > b,
        "LessOrEqual" => a <= b,
        _ => a >= b,
    }
}

fn binary(op: &str, a: &Known, b: &Known) -> R<Known> {
    let dims = bcast(&a.dims, &b.dims)?;
    numel(&dims)?;
    let (ia, ib) = (bmap(&a.dims, &dims), bmap(&b.dims, &dims));
    if matches!(
        op,
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "And" | "Or"
    ) {
        let (x, y) = (f64s(&a.vals), f64s(&b.vals));
        let v = ia
            .iter()
            .zip(&ib)
            .map(|(&i, &j)| {
                let r = match op {
                    "And" => x[i] != 0.0 && y[j] != 0.0,
                    "Or" => x[i] != 0.0 || y[j] != 0.0,
                    _ => cmp_op(op, x[i], y[j]),
                };
                i64::from(r)
            })
            .collect();
        return Ok(Known {
            dims,
            vals: Vals::Int(v),
            code: dt::BOOL,
        });
    }
    let vals = match (&a.vals, &b.vals) {
        (Vals::Int(x), Vals::Int(y)) => {
            let mut v = Vec::with_capacity(ia.len());
            for (&i, &j) in ia.iter().zip(&ib) {
                let (p, q) = (x[i], y[j]);
                v.push(match op {
                    "Add" => p.wrapping_add(q),
                    "Sub" => p.wrapping_sub(q),
                    "Mul" => p.wrapping_mul(q),
                    "Div" => {
                        if q == 0 {
                            return Err("integer division by zero".into());
                        }
                        p.wrapping_div(q)
                    }
                    "Min" => p.min(q),
                    // ONNX Mod: fmod = 0 takes the divisor's sign, fmod = 1 the dividend's.
                    "Mod" | "FMod" => {
                        if q == 0 {
                            return Err("integer modulo by zero".into());
                        }
                        if op == "Mod" {
                            p.rem_euclid(q) + if q < 0 && p.rem_euclid(q) != 0 { q } else { 0 }
                        } else {
                            p.wrapping_rem(q)
                        }
                    }
                    _ => p.max(q),
                });
            }
            Vals::Int(v)
        }
        _ => {
            let (x, y) = (f64s(&a.vals), f64s(&b.vals));
            Vals::Float(
                ia.iter()
                    .zip(&ib)
                    .map(|(&i, &j)| {
                        let (p, q) = (x[i], y[j]);
                        match op {
                            "Add" => p + q,
                            "Sub" => p - q,
                            "Mul" => p * q,
                            "Div" => p / q,
                            "Min" => p.min(q),
                            "Mod" => p - q * (p / q).floor(),
                            "FMod" => p % q,
                            _ => p.max(q),
                        }
                    })
                    .collect(),
            )
        }
    };
    let code = if matches!(vals, Vals::Int(_)) {
        a.code
    } else if is_int_code(a.code) {
        b.code
    } else {
        a.code
    };
    Ok(Known { dims, vals, code })
}

fn unary(op: &str, a: &Known) -> Known {
    let vals = match (&a.vals, op) {
        (Vals::Int(x), "Neg") => Vals::Int(x.iter().map(|v| v.wrapping_neg()).collect()),
        (Vals::Int(x), "Abs") => Vals::Int(x.iter().map(|v| v.wrapping_abs()).collect()),
        (Vals::Int(x), "Not") => Vals::Int(x.iter().map(|&v| i64::from(v == 0)).collect()),
        (Vals::Int(x), "Floor" | "Ceil") => Vals::Int(x.clone()),
        (v, _) => Vals::Float(
            f64s(v)
                .into_iter()
                .map(|x| match op {
                    "Neg" => -x,
                    "Abs" => x.abs(),
                    "Sqrt" => x.sqrt(),
                    "Reciprocal" => 1.0 / x,
                    "Floor" => x.floor(),
                    "Ceil" => x.ceil(),
                    "Sin" => x.sin(),
                    "Cos" => x.cos(),
                    _ => f64::from(u8::from(x == 0.0)),
                })
                .collect(),
        ),
    };
    Known {
        dims: a.dims.clone(),
        vals,
        code: if op == "Not" { dt::BOOL } else { a.code },
    }
}

/// Whether Trilu keeps element `(i, j)`: on or above diagonal `k` (`upper`), on or below it
/// otherwise; the one rule for the folder and the runtime mask.
pub(super) fn trilu_keeps(upper: bool, k: i64, i: usize, j: usize) -> bool {
    let d = j as i64 - i as i64;
    if upper {
        d >= k
    } else {
        d <= k
    }
}

/// NumPy `matmul` of two constants (rank >= 2 each, batch dims broadcast), in f64; an
/// integer product stays integer.
fn matmul(a: &Known, b: &Known) -> R<Known> {
    let (ra, rb) = (a.dims.len(), b.dims.len());
    if ra < 2 || rb < 2 {
        return Err("folded MatMul needs rank >= 2 operands".into());
    }
    let (m, k, n) = (a.dims[ra - 2], a.dims[ra - 1], b.dims[rb - 1]);
    if b.dims[rb - 2] != k {
        return Err(format!(
            "MatMul {:?} x {:?}: inner dims differ",
            a.dims, b.dims
        ));
    }
    let batch = bcast(&a.dims[..ra - 2], &b.dims[..rb - 2])?;
    let mut dims = batch.clone();
    dims.extend([m, n]);
    let total = numel(&dims)?;
    if (total as u64).saturating_mul(k as u64) > MAX_FOLD_MACS {
        return Err(format!(
            "MatMul {:?} x {:?} is too costly to fold",
            a.dims, b.dims
        ));
    }
    let (ia, ib) = (
        bmap(&a.dims[..ra - 2], &batch),
        bmap(&b.dims[..rb - 2], &batch),
    );
    let (av, bv) = (f64s(&a.vals), f64s(&b.vals));
    let mut out = Vec::with_capacity(total);
    for (p, q) in ia.iter().zip(&ib) {
        let (ao, bo) = (p * m * k, q * k * n);
        for i in 0..m {
            for j in 0..n {
                out.push(
                    (0..k)
                        .map(|t| av[ao + i * k + t] * bv[bo + t * n + j])
                        .sum::<f64>(),
                );
            }
        }
    }
    let vals = match (&a.vals, &b.vals) {
        (Vals::Int(_), Vals::Int(_)) => Vals::Int(out.iter().map(|&x| x as i64).collect()),
        _ => Vals::Float(out),
    };
    let code = if matches!(vals, Vals::Int(_)) {
        a.code
    } else if is_int_code(a.code) {
        b.code
    } else {
        a.code
    };
    Ok(Known { dims, vals, code })
}

fn cast(a: &Known, to: i32) -> R<Known> {
    let vals = if to == dt::BOOL {
        Vals::Int(f64s(&a.vals).iter().map(|&x| i64::from(x != 0.0)).collect())
    } else if is_int_code(to) {
        match &a.vals {
            Vals::Int(v) => Vals::Int(v.clone()),
            Vals::Float(v) => Vals::Int(v.iter().map(|x| x.trunc() as i64).collect()),
        }
    } else if matches!(to, dt::FLOAT | dt::DOUBLE | dt::FLOAT16 | dt::BFLOAT16) {
        Vals::Float(f64s(&a.vals))
    } else {
        return Err(format!("Cast to {} is not folded", dt::name(to)));
    };
    Ok(Known {
        dims: a.dims.clone(),
        vals,
        code: to,
    })
}

/// The values of a `Concat` of constants along `axis`.
fn concat(parts: &[&Known], axis: i64) -> R<Known> {
    let f = parts[0];
    let a = norm(axis, f.dims.len())?;
    let mut dims = f.dims.clone();
    dims[a] = 0;
    for p in parts {
        if p.dims.len() != f.dims.len()
            || p.dims
                .iter()
                .zip(&f.dims)
                .enumerate()
                .any(|(i, (x, y))| i != a && x != y)
        {
            return Err(format!("Concat parts {:?} and {:?} differ", p.dims, f.dims));
        }
        dims[a] += p.dims[a];
    }
    numel(&dims)?;
    let outer: usize = f.dims[..a].iter().product();
    let all_int = parts.iter().all(|p| matches!(p.vals, Vals::Int(_)));
    let mut iv = vec![];
    let mut fv = vec![];
    for o in 0..outer {
        for p in parts {
            let chunk: usize = p.dims[a..].iter().product();
            let r = o * chunk..(o + 1) * chunk;
            match &p.vals {
                Vals::Int(v) if all_int => iv.extend_from_slice(&v[r]),
                v => fv.extend_from_slice(&f64s(v)[r]),
            }
        }
    }
    Ok(Known {
        dims,
        vals: if all_int {
            Vals::Int(iv)
        } else {
            Vals::Float(fv)
        },
        code: f.code,
    })
}

fn gather(data: &Known, idx: &Known, axis: i64) -> R<Known> {
    let a = norm(axis, data.dims.len())?;
    let len = data.dims[a] as i64;
    let rows: Vec<usize> = ints(idx, "Gather indices")?
        .into_iter()
        .map(|i| {
            let r = if i < 0 { i + len } else { i };
            if r < 0 || r >= len {
                Err(format!("Gather index {i} is outside [-{len}, {len})"))
            } else {
                Ok(r as usize)
            }
        })
        .collect::<R<_>>()?;
    let mut dims = data.dims[..a].to_vec();
    dims.extend_from_slice(&idx.dims);
    dims.extend_from_slice(&data.dims[a + 1..]);
    numel(&dims)?;
    let outer: usize = data.dims[..a].iter().product();
    let inner: usize = data.dims[a + 1..].iter().product();
    let mut at = vec![];
    for o in 0..outer {
        for &r in &rows {
            at.extend((0..inner).map(|i| (o * len as usize + r) * inner + i));
        }
    }
    Ok(Known {
        dims,
        vals: pick(&data.vals, &at),
        code: data.code,
    })
}

fn reshaped(k: &Known, dims: Vec<usize>) -> R<Known> {
    if numel(&dims)? != k.vals.len() {
        return Err(format!(
            "cannot reshape {:?} ({} values) to {dims:?}",
            k.dims,
            k.vals.len()
        ));
    }
    Ok(Known {
        dims,
        vals: k.vals.clone(),
        code: k.code,
    })
}

/// The target shape of an ONNX `Reshape` of `from` to `target` (0 copies, −1 infers).
pub(super) fn reshape_dims(from: &[usize], target: &[i64], allowzero: bool) -> R<Vec<usize>> {
    let total: usize = from.iter().product();
    let mut infer = None;
    let mut dims = Vec::with_capacity(target.len());
    for (i, &d) in target.iter().enumerate() {
        dims.push(match d {
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            0 if !allowzero => *from.get(i).ok_or_else(|| {
                format!("target dim {i} is 0 but the input has rank {}", from.len())
            })?,
            d if d >= 0 => d as usize,
            _ => return Err(format!("target shape {target:?} has an invalid dim {d}")),
        });
    }
    if let Some(i) = infer {
        let rest: usize = dims.iter().product();
        if rest == 0 || !total.is_multiple_of(rest) {
            return Err(format!(
                "cannot infer the −1 dim of {target:?} for {from:?}"
            ));
        }
        dims[i] = total / rest;
    }
    Ok(dims)
}

fn axes_of(np: &NodeProto, args: &[Arg]) -> R<Option<Vec<i64>>> {
    if let Some(a) = attr_ints(np, "axes") {
        return Ok(Some(a.to_vec()));
    }
    match args.get(1) {
        Some(Arg::Const(k)) => ints(k, "axes").map(Some),
        _ => Ok(None),
    }
}

/// Every input constant (absent optional inputs allowed) or `None`.
fn consts<'k>(args: &'k [Arg]) -> Option<Vec<Option<&'k Known>>> {
    args.iter()
        .map(|a| match a {
            Arg::Const(k) => Some(Some(k)),
            Arg::Absent => Some(None),
            _ => None,
        })
        .collect()
}

/// Fold node `np` over `args`: `None` when it cannot be folded (an input is not known, or
/// the op is not one the folder knows); `Some(Err)` when the model is inconsistent.
pub(super) fn fold(np: &NodeProto, args: &[Arg], opset: i64) -> Option<R<Known>> {
    let op = np.op_type.as_str();
    if !FOLDABLE.contains(&op) {
        return None;
    }
    if op == "Shape" || op == "Size" {
        let dims: Vec<usize> = match args.first()? {
            Arg::Const(k) => k.dims.clone(),
            Arg::Shape(s) => s.to_vec(),
            _ => return None,
        };
        if op == "Size" {
            return Some(Ok(Known {
                dims: vec![],
                vals: Vals::Int(vec![dims.iter().product::<usize>() as i64]),
                code: dt::INT64,
            }));
        }
        let r = dims.len() as i64;
        let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let s = clampi(attr_i(np, "start").unwrap_or(0));
        let e = clampi(attr_i(np, "end").unwrap_or(r));
        let v: Vec<i64> = dims[s.min(e)..e].iter().map(|&d| d as i64).collect();
        return Some(Ok(Known {
            dims: vec![v.len()],
            vals: Vals::Int(v),
            code: dt::INT64,
        }));
    }
    let c = consts(args)?;
    let first = (*c.first()?)?;
    let r = (|| -> R<Known> {
        match op {
            "Add" | "Sub" | "Mul" | "Div" | "Equal" | "Less" | "Greater" | "LessOrEqual"
            | "GreaterOrEqual" | "And" | "Or" => {
                let b = c
                    .get(1)
                    .copied()
                    .flatten()
                    .ok_or("second input is missing")?;
                binary(op, first, b)
            }
            "Mod" => {
                let b = c
                    .get(1)
                    .copied()
                    .flatten()
                    .ok_or("second input is missing")?;
                let which = if attr_i(np, "fmod").unwrap_or(0) != 0 {
                    "FMod"
                } else {
                    "Mod"
                };
                binary(which, first, b)
            }
            "Min" | "Max" => {
                let mut acc = first.clone();
                for k in c[1..].iter().flatten() {
                    acc = binary(op, &acc, k)?;
                }
                Ok(acc)
            }
            "Neg" | "Abs" | "Sqrt" | "Reciprocal" | "Floor" | "Ceil" | "Not" | "Sin" | "Cos" => {
                Ok(unary(op, first))
            }
            "Trilu" => {
                let k = match c.get(1).copied().flatten() {
                    Some(t) => *ints(t, "Trilu k")?.first().ok_or("empty k")?,
                    None => 0,
                };
                let upper = attr_i(np, "upper").unwrap_or(1) != 0;
                let r = first.dims.len();
                if r < 2 {
                    return Err(format!("Trilu needs rank >= 2, got {:?}", first.dims));
                }
                let (n, m) = (first.dims[r - 2], first.dims[r - 1]);
                let keep = |flat: usize| {
                    let (i, j) = ((flat / m.max(1)) % n.max(1), flat % m.max(1));
                    trilu_keeps(upper, k, i, j)
                };
                let vals = match &first.vals {
                    Vals::Int(v) => Vals::Int(
                        v.iter()
                            .enumerate()
                            .map(|(f, &x)| if keep(f) { x } else { 0 })
                            .collect(),
                    ),
                    Vals::Float(v) => Vals::Float(
                        v.iter()
                            .enumerate()
                            .map(|(f, &x)| if keep(f) { x } else { 0.0 })
                            .collect(),
                    ),
                };
                Ok(Known {
                    dims: first.dims.clone(),
                    vals,
                    code: first.code,
                })
            }
            "MatMul" => {
                let b = c.get(1).copied().flatten().ok_or("no right operand")?;
                matmul(first, b)
            }
            "Cast" => cast(first, attr_i(np, "to").unwrap_or(0) as i32),
            "Concat" => {
                let parts: Vec<&Known> = c.iter().flatten().copied().collect();
                concat(&parts, attr_i(np, "axis").ok_or("Concat has no axis")?)
            }
            "Gather" => {
                let idx = c.get(1).copied().flatten().ok_or("no indices")?;
                gather(first, idx, attr_i(np, "axis").unwrap_or(0))
            }
            "Unsqueeze" | "Squeeze" => {
                let axes = axes_of(np, args)?;
                let rank = first.dims.len();
                let dims = if op == "Squeeze" {
                    let drop: Vec<usize> = match axes {
                        None => (0..rank).filter(|&i| first.dims[i] == 1).collect(),
                        Some(a) => a.iter().map(|&x| norm(x, rank)).collect::<R<_>>()?,
                    };
                    first
                        .dims
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| !drop.contains(i))
                        .map(|(_, &d)| d)
                        .collect()
                } else {
                    let a = axes.ok_or("Unsqueeze needs axes")?;
                    let out_rank = rank + a.len();
                    let ins: Vec<usize> = a.iter().map(|&x| norm(x, out_rank)).collect::<R<_>>()?;
                    let mut it = first.dims.iter();
                    (0..out_rank)
                        .map(|i| {
                            if ins.contains(&i) {
                                1
                            } else {
                                *it.next().unwrap_or(&1)
                            }
                        })
                        .collect()
                };
                reshaped(first, dims)
            }
            "Reshape" => {
                let t = c.get(1).copied().flatten().ok_or("no target shape")?;
                let target = ints(t, "target shape")?;
                let allowzero = attr_i(np, "allowzero").unwrap_or(0) != 0;
                reshaped(first, reshape_dims(&first.dims, &target, allowzero)?)
            }
            "Slice" => {
                let get = |i: usize| -> R<Option<Vec<i64>>> {
                    match c.get(i).copied().flatten() {
                        Some(k) => ints(k, "Slice parameter").map(Some),
                        None => Ok(None),
                    }
                };
                let starts = get(1)?.ok_or("no starts")?;
                let ends = get(2)?.ok_or("no ends")?;
                let axes = get(3)?.unwrap_or_else(|| (0..starts.len() as i64).collect());
                let steps = get(4)?.unwrap_or_else(|| vec![1; starts.len()]);
                let plan = crate::ir::slice_plan(&first.dims, &starts, &ends, &axes, &steps)?;
                let dims: Vec<usize> = plan.iter().map(|p| p.2).collect();
                numel(&dims)?;
                let mut strides = vec![1usize; first.dims.len()];
                for i in (0..first.dims.len().saturating_sub(1)).rev() {
                    strides[i] = strides[i + 1] * first.dims[i + 1];
                }
                let at: Vec<usize> = bmap(&dims, &dims)
                    .into_iter()
                    .map(|flat| {
                        let mut rem = flat;
                        let mut off = 0i64;
                        for d in (0..dims.len()).rev() {
                            let k = rem % dims[d].max(1);
                            rem /= dims[d].max(1);
                            off += (plan[d].0 + plan[d].1 * k as i64) * strides[d] as i64;
                        }
                        off as usize
                    })
                    .collect();
                Ok(Known {
                    dims,
                    vals: pick(&first.vals, &at),
                    code: first.code,
                })
            }
            "Transpose" => {
                // Exporters compute pads and shapes through Transpose (a reflect-padded Conv
                // in TorchScript): permuted like the IR's view.
                let r = first.dims.len();
                let perm: Vec<usize> = match attr_ints(np, "perm") {
                    Some(p) => p.iter().map(|&x| norm(x, r)).collect::<R<_>>()?,
                    None => (0..r).rev().collect(),
                };
                let mut seen = vec![false; r];
                if perm.len() != r || perm.iter().any(|&p| std::mem::replace(&mut seen[p], true)) {
                    return Err(format!("perm {perm:?} is not a permutation of {r} axes"));
                }
                let dims: Vec<usize> = perm.iter().map(|&p| first.dims[p]).collect();
                let mut strides = vec![1usize; r];
                for i in (0..r.saturating_sub(1)).rev() {
                    strides[i] = strides[i + 1] * first.dims[i + 1];
                }
                let at: Vec<usize> = bmap(&dims, &dims)
                    .into_iter()
                    .map(|flat| {
                        let (mut rem, mut off) = (flat, 0usize);
                        for d in (0..r).rev() {
                            let k = rem % dims[d].max(1);
                            rem /= dims[d].max(1);
                            off += k * strides[perm[d]];
                        }
                        off
                    })
                    .collect();
                Ok(Known {
                    dims,
                    vals: pick(&first.vals, &at),
                    code: first.code,
                })
            }
            "Where" => {
                let (x, y) = match (c.get(1).copied().flatten(), c.get(2).copied().flatten()) {
                    (Some(x), Some(y)) => (x, y),
                    _ => return Err("Where needs three inputs".into()),
                };
                let dims = bcast(&bcast(&first.dims, &x.dims)?, &y.dims)?;
                numel(&dims)?;
                let (ic, ix, iy) = (
                    bmap(&first.dims, &dims),
                    bmap(&x.dims, &dims),
                    bmap(&y.dims, &dims),
                );
                let cv = f64s(&first.vals);
                let vals = match (&x.vals, &y.vals) {
                    (Vals::Int(a), Vals::Int(b)) => Vals::Int(
                        (0..ic.len())
                            .map(|k| if cv[ic[k]] != 0.0 { a[ix[k]] } else { b[iy[k]] })
                            .collect(),
                    ),
                    (a, b) => {
                        let (a, b) = (f64s(a), f64s(b));
                        Vals::Float(
                            (0..ic.len())
                                .map(|k| if cv[ic[k]] != 0.0 { a[ix[k]] } else { b[iy[k]] })
                                .collect(),
                        )
                    }
                };
                Ok(Known {
                    dims,
                    vals,
                    code: x.code,
                })
            }
            "Expand" => {
                let s = c.get(1).copied().flatten().ok_or("no shape")?;
                let target: Vec<usize> = ints(s, "Expand shape")?
                    .into_iter()
                    .map(|d| usize::try_from(d).map_err(|_| format!("Expand dim {d} is negative")))
                    .collect::<R<_>>()?;
                let dims = bcast(&first.dims, &target)?;
                numel(&dims)?;
                let at = bmap(&first.dims, &dims);
                Ok(Known {
                    vals: pick(&first.vals, &at),
                    dims,
                    code: first.code,
                })
            }
            "ConstantOfShape" => {
                let dims = constant_of_shape_dims(first)?;
                let n = numel(&dims)?;
                let (value, code) = constant_of_shape_value(np)?;
                let vals = if is_int_code(code) {
                    Vals::Int(vec![value as i64; n])
                } else {
                    Vals::Float(vec![value; n])
                };
                Ok(Known { dims, vals, code })
            }
            "Range" => {
                let (l, d) = match (c.get(1).copied().flatten(), c.get(2).copied().flatten()) {
                    (Some(l), Some(d)) => (l, d),
                    _ => return Err("Range needs start, limit and delta".into()),
                };
                let (s0, l0, d0) = (f64s(&first.vals), f64s(&l.vals), f64s(&d.vals));
                if s0.len() != 1 || l0.len() != 1 || d0.len() != 1 || d0[0] == 0.0 {
                    return Err("Range needs scalar start, limit and non-zero delta".into());
                }
                let n = ((l0[0] - s0[0]) / d0[0]).ceil().max(0.0);
                if n > MAX_PARAM_VALUES as f64 {
                    return Err(format!("Range of {n} values is not folded"));
                }
                let n = n as usize;
                let vals = match (&first.vals, &d.vals) {
                    (Vals::Int(s), Vals::Int(dd)) => {
                        Vals::Int((0..n as i64).map(|i| s[0] + i * dd[0]).collect())
                    }
                    _ => Vals::Float((0..n).map(|i| s0[0] + i as f64 * d0[0]).collect()),
                };
                Ok(Known {
                    dims: vec![n],
                    vals,
                    code: first.code,
                })
            }
            _ => Err(format!("`{op}` is not folded")),
        }
    })();
    let _ = opset;
    Some(r.and_then(|k| {
        if k.dims.len() > MAX_RANK {
            Err(format!("folded rank {} exceeds {MAX_RANK}", k.dims.len()))
        } else {
            Ok(k)
        }
    }))
}

/// The dims of a `ConstantOfShape` from its (constant, int64) shape input.
pub(super) fn constant_of_shape_dims(k: &Known) -> R<Vec<usize>> {
    let d = ints(k, "ConstantOfShape shape")?;
    if d.len() > MAX_RANK {
        return Err(format!(
            "ConstantOfShape rank {} exceeds {MAX_RANK}",
            d.len()
        ));
    }
    d.into_iter()
        .map(|x| usize::try_from(x).map_err(|_| format!("ConstantOfShape dim {x} is negative")))
        .collect()
}

/// The fill value and data type of a `ConstantOfShape` (default: fp32 zero).
pub(super) fn constant_of_shape_value(np: &NodeProto) -> R<(f64, i32)> {
    match attr(np, "value").and_then(|a| a.t.as_deref()) {
        None => Ok((0.0, dt::FLOAT)),
        Some(t) => {
            let v = super::tensor_values(t)?;
            if v.len() != 1 {
                return Err("ConstantOfShape value must hold one element".into());
            }
            Ok((v.f64_at(0), t.data_type))
        }
    }
}

/// The tensor proto holding `k`, named `name`.
pub(super) fn to_tensor(name: &str, k: &Known) -> TensorProto {
    let mut t = TensorProto {
        name: name.to_string(),
        dims: k.dims.iter().map(|&d| d as i64).collect(),
        data_type: k.code,
        ..Default::default()
    };
    match (&k.vals, k.code) {
        (Vals::Int(v), dt::INT64) => t.int64_data = v.clone(),
        (Vals::Int(v), c) if is_int_code(c) => t.int32_data = v.iter().map(|&x| x as i32).collect(),
        (v, dt::DOUBLE) => t.double_data = f64s(v),
        (v, dt::FLOAT16) => {
            t.int32_data = f64s(v)
                .into_iter()
                .map(|x| i32::from(half::f16::from_f64(x).to_bits()))
                .collect()
        }
        (v, dt::BFLOAT16) => {
            t.int32_data = f64s(v)
                .into_iter()
                .map(|x| i32::from(half::bf16::from_f64(x).to_bits()))
                .collect()
        }
        (v, _) => {
            t.data_type = dt::FLOAT;
            t.float_data = f64s(v).into_iter().map(|x| x as f32).collect();
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(dims: &[usize], v: &[i64]) -> Known {
        Known {
            dims: dims.to_vec(),
            vals: Vals::Int(v.to_vec()),
            code: dt::INT64,
        }
    }

    fn node(op: &str) -> NodeProto {
        NodeProto {
            op_type: op.into(),
            ..Default::default()
        }
    }

    fn ivals(k: &Known) -> Vec<i64> {
        ints(k, "test").unwrap()
    }

    #[test]
    fn shape_gather_concat_chain() {
        // Shape of [2, 8, 64] = [2, 8, 64]; Gather index 1 (scalar) = 8; Unsqueeze to [1];
        // Concat [2] ++ [8] ++ [-1] = [2, 8, -1]: the target Reshape reads.
        let dims = [2usize, 8, 64];
        let s = fold(&node("Shape"), &[Arg::Shape(&dims)], 18)
            .unwrap()
            .unwrap();
        assert_eq!(ivals(&s), vec![2, 8, 64]);
        let g = gather(&s, &int(&[], &[1]), 0).unwrap();
        assert_eq!((g.dims.clone(), ivals(&g)), (vec![], vec![8]));
        let c = concat(&[&int(&[1], &[2]), &int(&[1], &[8]), &int(&[1], &[-1])], 0).unwrap();
        assert_eq!(ivals(&c), vec![2, 8, -1]);
        // −1 infers 2·8·64 / (2·8) = 64.
        assert_eq!(
            reshape_dims(&dims, &[2, 8, -1], false).unwrap(),
            vec![2, 8, 64]
        );
        assert_eq!(
            reshape_dims(&dims, &[0, 0, 8, 8], false).unwrap(),
            vec![2, 8, 8, 8]
        );
    }

    #[test]
    fn arithmetic_broadcasts_and_truncates() {
        // [[1],[2]] + [10, 20, 30] = [[11,21,31],[12,22,32]]; −7 / 2 truncates to −3.
        let a = int(&[2, 1], &[1, 2]);
        let b = int(&[3], &[10, 20, 30]);
        let s = binary("Add", &a, &b).unwrap();
        assert_eq!(s.dims, vec![2, 3]);
        assert_eq!(ivals(&s), vec![11, 21, 31, 12, 22, 32]);
        assert_eq!(
            ivals(&binary("Div", &int(&[], &[-7]), &int(&[], &[2])).unwrap()),
            vec![-3]
        );
        assert!(binary("Div", &int(&[], &[1]), &int(&[], &[0])).is_err());
        let e = binary("Equal", &b, &int(&[], &[20])).unwrap();
        assert_eq!((e.code, ivals(&e)), (dt::BOOL, vec![0, 1, 0]));
    }

    #[test]
    fn range_and_slice() {
        // Range(0, 5, 2) = [0, 2, 4]; Slice of [0..10) from 7 to INT64_MAX step −2 is empty,
        // from −3 to INT64_MAX = [7, 8, 9].
        let mut n = node("Range");
        let r = fold(
            &n,
            &[
                Arg::Const(int(&[], &[0])),
                Arg::Const(int(&[], &[5])),
                Arg::Const(int(&[], &[2])),
            ],
            18,
        )
        .unwrap()
        .unwrap();
        assert_eq!(ivals(&r), vec![0, 2, 4]);
        n.op_type = "Slice".into();
        let x = int(&[10], &(0..10).collect::<Vec<_>>());
        let s = fold(
            &n,
            &[
                Arg::Const(x),
                Arg::Const(int(&[1], &[-3])),
                Arg::Const(int(&[1], &[i64::MAX])),
            ],
            18,
        )
        .unwrap()
        .unwrap();
        assert_eq!(ivals(&s), vec![7, 8, 9]);
    }

    #[test]
    fn unknown_inputs_are_not_folded() {
        assert!(fold(
            &node("Add"),
            &[Arg::Unknown, Arg::Const(int(&[], &[1]))],
            18
        )
        .is_none());
        assert!(fold(&node("Shape"), &[Arg::Unknown], 18).is_none());
        assert!(fold(&node("MatMul"), &[], 18).is_none());
    }

    #[test]
    fn cast_truncates_floats() {
        let f = Known {
            dims: vec![3],
            vals: Vals::Float(vec![2.7, -2.7, 0.0]),
            code: dt::FLOAT,
        };
        assert_eq!(ivals(&cast(&f, dt::INT64).unwrap()), vec![2, -2, 0]);
        assert_eq!(ivals(&cast(&f, dt::BOOL).unwrap()), vec![1, 1, 0]);
    }
}
