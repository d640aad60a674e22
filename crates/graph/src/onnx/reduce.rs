//! The reduction family of the ONNX front end: ReduceSum / ReduceMax / ReduceMean (over
//! trailing axes one reduction of them flattened, otherwise one IR node per axis),
//! ReduceSumSquare / ReduceL2 / ReduceL1 / ReduceMin as those with an elementwise node
//! before and after, Softmax / LogSoftmax (the IR normalizes the last axis) and CumSum.
//! Left out: ReduceProd, ReduceLogSum, ReduceLogSumExp, ArgMax / ArgMin and TopK.

use super::*;
use crate::ir::{BinaryFn, UnaryFn};

/// The ONNX ops this family lowers (a node of any other type is not sent here).
pub(super) const OPS: &[&str] = &[
    "ReduceSum",
    "ReduceMax",
    "ReduceMean",
    "ReduceSumSquare",
    "ReduceL2",
    "ReduceL1",
    "ReduceMin",
    "Softmax",
    "LogSoftmax",
    "CumSum",
];

impl<'a> Importer<'a> {
    /// Lower node `np` (its op type is one of [`OPS`]).
    pub(super) fn lower_reduce(
        &mut self,
        np: &'a NodeProto,
        name: &str,
        out: &str,
    ) -> Result<Lowering<'a>> {
        let op_type = np.op_type.as_str();
        Ok(match op_type {
            "ReduceSum" | "ReduceMax" | "ReduceMean" => {
                if np.input.is_empty() || np.input.len() > 2 {
                    opaque!("expects 1 or 2 inputs, has {}", np.input.len());
                }
                let x = inputs!(self, np, [0]);
                let shape = self.specs[&x[0]].shape.clone();
                let kind = match op_type {
                    "ReduceSum" => Reduce::Sum,
                    "ReduceMax" => Reduce::Max,
                    _ => Reduce::Mean,
                };
                return self.reduce_axes(np, name, out, &x[0], &shape, kind);
            }
            "ReduceSumSquare" | "ReduceL2" | "ReduceL1" | "ReduceMin" => {
                // Composites: Σx² (and its square root), Σ|x|, and min x = −max(−x): one
                // elementwise node before the reduction, one after for L2 and Min.
                if np.input.is_empty() || np.input.len() > 2 {
                    opaque!("expects 1 or 2 inputs, has {}", np.input.len());
                }
                let x = inputs!(self, np, [0]);
                let shape = self.specs[&x[0]].shape.clone();
                let (pre_op, pre_in, kind, post) = match op_type {
                    "ReduceSumSquare" | "ReduceL2" => (
                        Op::Binary { f: BinaryFn::Mul },
                        vec![x[0].clone(), x[0].clone()],
                        Reduce::Sum,
                        (op_type == "ReduceL2").then_some(UnaryFn::Sqrt),
                    ),
                    "ReduceL1" => (
                        Op::Unary { f: UnaryFn::Abs },
                        vec![x[0].clone()],
                        Reduce::Sum,
                        None,
                    ),
                    _ => (
                        Op::Unary { f: UnaryFn::Neg },
                        vec![x[0].clone()],
                        Reduce::Max,
                        Some(UnaryFn::Neg),
                    ),
                };
                let pre = format!("{out}#pre");
                let reduced = if post.is_some() {
                    format!("{out}#red")
                } else {
                    out.to_string()
                };
                let red_name = if post.is_some() {
                    format!("{name}#red")
                } else {
                    name.to_string()
                };
                let mut v = vec![Node {
                    name: format!("{name}#pre"),
                    op: pre_op,
                    inputs: pre_in,
                    outputs: vec![pre.clone()],
                }];
                match self.reduce_axes(np, &red_name, &reduced, &pre, &shape, kind)? {
                    Lowering::Nodes(r) => v.extend(r),
                    Lowering::Opaque(why) => opaque!("{why}"),
                    _ => opaque!("noop_with_empty_axes with no axes is not lowered"),
                }
                if let Some(f) = post {
                    v.push(Node {
                        name: name.to_string(),
                        op: Op::Unary { f },
                        inputs: vec![reduced],
                        outputs: vec![out.to_string()],
                    });
                }
                Lowering::Nodes(v)
            }
            "Softmax" | "LogSoftmax" => {
                arity!(np, 1);
                let axis = attr_i(np, "axis").unwrap_or(if self.opset < 13 { 1 } else { -1 });
                // Before opset 13 the op flattens to 2-D at `axis`; that equals the IR's
                // last-axis op exactly when `axis` is the last axis, which the IR checks.
                let op = if op_type == "Softmax" {
                    Op::Softmax { axis }
                } else {
                    Op::LogSoftmax { axis }
                };
                one(name, out, op, inputs!(self, np, [0]))
            }
            "CumSum" => {
                arity!(np, 2);
                let axis = match self.param(np, 1).map(|r| r.and_then(|(v, _)| v.ints())) {
                    Some(Ok(a)) if a.len() == 1 => a[0],
                    Some(Ok(a)) => opaque!("axis must be one value, got {a:?}"),
                    Some(Err(why)) => opaque!("the axis must be constant: {why}"),
                    None => opaque!("no axis"),
                };
                let flag = |k: &str| attr_i(np, k).unwrap_or(0) != 0;
                one(
                    name,
                    out,
                    Op::CumSum {
                        axis,
                        exclusive: flag("exclusive"),
                        reverse: flag("reverse"),
                    },
                    inputs!(self, np, [0]),
                )
            }
            _ => Lowering::Opaque(format!("op `{op_type}` has no IR equivalent")),
        })
    }

    /// ReduceSum / ReduceMax / ReduceMean (`kind`) of `x` (of `shape`) over node `np`'s axes
    /// (attribute or constant second input; none: every axis, or the identity with
    /// `noop_with_empty_axes`), writing `out` under `name`: over trailing axes one reduction
    /// of them flattened, otherwise one IR node per axis.
    fn reduce_axes(
        &mut self,
        np: &NodeProto,
        name: &str,
        out: &str,
        x: &str,
        shape: &[usize],
        kind: Reduce,
    ) -> Result<Lowering<'a>> {
        let keepdims = attr_i(np, "keepdims").unwrap_or(1) != 0;
        let mut axes: Vec<i64> = if let Some(a) = attr_ints(np, "axes") {
            a.to_vec()
        } else {
            match self.param(np, 1) {
                None => vec![],
                Some(Ok((v, _))) => match v.ints() {
                    Ok(a) => a,
                    Err(e) => opaque!("axes {e}"),
                },
                Some(Err(why)) => opaque!("the axes must be constant: {why}"),
            }
        };
        let rank = shape.len() as i64;
        if axes.is_empty() {
            if attr_i(np, "noop_with_empty_axes").unwrap_or(0) != 0 {
                return Ok(Lowering::Alias(x.to_string()));
            }
            axes = (0..rank.max(1)).collect();
        }
        let mk = |axis: i64| match kind {
            Reduce::Sum => Op::ReduceSum { axis, keepdims },
            Reduce::Max => Op::ReduceMax { axis, keepdims },
            Reduce::Mean => Op::ReduceMean { axis, keepdims },
        };
        if axes.len() == 1 {
            return Ok(one(name, out, mk(axes[0]), vec![x.to_string()]));
        }
        // Several axes: one node per axis, the highest first (so that dropping an
        // axis with keepdims = 0 does not renumber the ones still to reduce). A sum
        // of sums, a max of maxes and a mean of equal-size means are the same as the
        // reduction over all of them at once.
        let mut norm: Vec<i64> = Vec::with_capacity(axes.len());
        for a in &axes {
            let k = if *a < 0 { a + rank } else { *a };
            if k < 0 || k >= rank || norm.contains(&k) {
                opaque!("axes {axes:?} are out of range or repeated for rank {rank}");
            }
            norm.push(k);
        }
        norm.sort_unstable_by(|a, b| b.cmp(a));
        // Trailing axes only (a global pooling's mean over H and W): one reduction
        // over them flattened, between two views, instead of one pass per axis (the
        // last axis alone is often short: 8 columns of an 8 × 8 map).
        let trailing = norm
            .iter()
            .enumerate()
            .all(|(i, &a)| a == rank - 1 - i as i64);
        if trailing {
            return Ok(Lowering::Nodes(reduce_trailing(
                name,
                out,
                x,
                shape,
                norm.len(),
                kind,
                keepdims,
            )));
        }
        let mut v = vec![];
        let mut cur = x.to_string();
        let last = norm.len() - 1;
        for (i, axis) in norm.into_iter().enumerate() {
            let o = if i == last {
                out.to_string()
            } else {
                format!("{out}#r{i}")
            };
            v.push(Node {
                name: if i == last {
                    name.to_string()
                } else {
                    format!("{name}#r{i}")
                },
                op: mk(axis),
                inputs: vec![cur],
                outputs: vec![o.clone()],
            });
            cur = o;
        }
        Ok(Lowering::Nodes(v))
    }
}

/// Which reduction [`reduce_trailing`] makes.
#[derive(Clone, Copy)]
pub(super) enum Reduce {
    Sum,
    Max,
    Mean,
}

/// The reduction of `x` (of `shape`) over its last `n` axes as one reduction over them
/// flattened: a Reshape to `[lead…, prod(trailing)]`, the reduction over its last axis, and
/// (with `keepdims`) a Reshape to `[lead…, 1, …, 1]`. A sum of the flattened values, their
/// max, or their mean (equal-size groups) is the reduction over the axes themselves.
pub(super) fn reduce_trailing(
    name: &str,
    out: &str,
    x: &str,
    shape: &[usize],
    n: usize,
    kind: Reduce,
    keepdims: bool,
) -> Vec<Node> {
    let lead = &shape[..shape.len() - n];
    let flat: usize = shape[shape.len() - n..].iter().product();
    let mut flat_shape: Vec<i64> = lead.iter().map(|&d| d as i64).collect();
    flat_shape.push(flat as i64);
    let axis = lead.len() as i64;
    let reduced = if keepdims {
        format!("{out}#r")
    } else {
        out.to_string()
    };
    let op = match kind {
        Reduce::Sum => Op::ReduceSum {
            axis,
            keepdims: false,
        },
        Reduce::Max => Op::ReduceMax {
            axis,
            keepdims: false,
        },
        Reduce::Mean => Op::ReduceMean {
            axis,
            keepdims: false,
        },
    };
    let mut v = vec![
        Node {
            name: format!("{name}#flat"),
            op: Op::Reshape { shape: flat_shape },
            inputs: vec![x.to_string()],
            outputs: vec![format!("{out}#flat")],
        },
        Node {
            name: if keepdims {
                format!("{name}#r")
            } else {
                name.to_string()
            },
            op,
            inputs: vec![format!("{out}#flat")],
            outputs: vec![reduced.clone()],
        },
    ];
    if keepdims {
        let mut kept: Vec<i64> = lead.iter().map(|&d| d as i64).collect();
        kept.extend(std::iter::repeat_n(1, n));
        v.push(Node {
            name: name.to_string(),
            op: Op::Reshape { shape: kept },
            inputs: vec![reduced],
            outputs: vec![out.to_string()],
        });
    }
    v
}
