//! The neural-network family of the ONNX front end: MatMul, Gemm, Conv, pooling,
//! BatchNormalization (folded into weights), LayerNormalization / RMSNormalization, Dropout
//! (an alias at inference), and the contractions and scatters of `einsum.rs`. Left out: 1-D
//! and 3-D convolutions and pools, `auto_pad`, `ceil_mode`.

use super::*;
use crate::ir::BinaryFn;

/// The ONNX ops this family lowers (a node of any other type is not sent here).
pub(super) const OPS: &[&str] = &[
    "MatMul",
    "Gemm",
    "Conv",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "BatchNormalization",
    "LayerNormalization",
    "RMSNormalization",
    "Dropout",
    "Einsum",
    "ScatterND",
];

impl<'a> Importer<'a> {
    /// Lower node `np` (its op type is one of [`OPS`]).
    pub(super) fn lower_nn(
        &mut self,
        np: &'a NodeProto,
        name: &str,
        out: &str,
    ) -> Result<Lowering<'a>> {
        let op_type = np.op_type.as_str();
        let n_in = np.input.iter().filter(|s| !s.is_empty()).count();
        if op_type == "MatMul" {
            arity!(np, 2);
            let ab = inputs!(self, np, [0, 1]);
            return Ok(self.matmul(name, out, &ab[0], &ab[1]));
        }
        Ok(match op_type {
            "Dropout" => {
                // Inference: the identity (a mask output, if read, is not produced). The data
                // input is required (a fuzzed model without one panicked here).
                if np.input.first().is_none_or(|s| s.is_empty()) {
                    opaque!("the data input is missing");
                }
                if np.output.len() > 1 && !np.output[1].is_empty() {
                    opaque!("the mask output is used");
                }
                Lowering::Alias(self.resolve(&np.input[0]))
            }
            "Conv" => {
                if n_in != 2 && n_in != 3 {
                    opaque!("expects 2 or 3 inputs, has {n_in}");
                }
                let ins = inputs!(self, np, 0..n_in);
                let xs = self.specs[&ins[0]].shape.clone();
                if xs.len() != 4 {
                    opaque!(
                        "only 2-D convolutions (NCHW) are supported, the input has rank {}",
                        xs.len()
                    );
                }
                if attr(np, "auto_pad").is_some_and(|a| !a.s.is_empty() && a.s != b"NOTSET") {
                    opaque!("auto_pad is not supported; use explicit pads");
                }
                let u = |v: &[i64]| {
                    v.iter()
                        .map(|x| usize::try_from(*x).ok())
                        .collect::<Option<Vec<usize>>>()
                };
                let strides = u(attr_ints(np, "strides").unwrap_or(&[1, 1]));
                let pads = u(attr_ints(np, "pads").unwrap_or(&[0, 0, 0, 0]));
                let dil = u(attr_ints(np, "dilations").unwrap_or(&[1, 1]));
                let group = usize::try_from(attr_i(np, "group").unwrap_or(1)).ok();
                let (Some(strides), Some(pads), Some(dilations), Some(group)) =
                    (strides, pads, dil, group)
                else {
                    opaque!("negative strides, pads, dilations or group");
                };
                one(
                    name,
                    out,
                    Op::Conv2d {
                        strides,
                        pads,
                        dilations,
                        group,
                    },
                    ins,
                )
            }
            "MaxPool" | "AveragePool" => {
                if np.output.len() > 1 && !np.output[1].is_empty() {
                    opaque!("the Indices output is used");
                }
                let ins = inputs!(self, np, [0]);
                if self.specs[&ins[0]].shape.len() != 4 {
                    opaque!("only 2-D pooling (NCHW) is supported");
                }
                if attr_i(np, "ceil_mode").unwrap_or(0) != 0
                    || attr_ints(np, "dilations").is_some_and(|d| d.iter().any(|v| *v != 1))
                    || attr(np, "auto_pad").is_some_and(|a| !a.s.is_empty() && a.s != b"NOTSET")
                {
                    opaque!("ceil_mode, dilations and auto_pad are not supported");
                }
                let u = |v: &[i64]| {
                    v.iter()
                        .map(|x| usize::try_from(*x).ok())
                        .collect::<Option<Vec<usize>>>()
                };
                let kernel = attr_ints(np, "kernel_shape").and_then(u);
                let strides = u(attr_ints(np, "strides").unwrap_or(&[1, 1]));
                let pads = u(attr_ints(np, "pads").unwrap_or(&[0, 0, 0, 0]));
                let (Some(kernel), Some(strides), Some(pads)) = (kernel, strides, pads) else {
                    opaque!("kernel_shape missing, or negative strides or pads");
                };
                let op = if op_type == "MaxPool" {
                    Op::MaxPool2d {
                        kernel,
                        strides,
                        pads,
                    }
                } else {
                    Op::AvgPool2d {
                        kernel,
                        strides,
                        pads,
                        count_include_pad: attr_i(np, "count_include_pad").unwrap_or(0) != 0,
                    }
                };
                one(name, out, op, ins)
            }
            "GlobalAveragePool" => {
                let ins = inputs!(self, np, [0]);
                let rank = self.specs[&ins[0]].shape.len();
                if rank < 3 {
                    opaque!("expects rank ≥ 3, has {rank}");
                }
                // The mean over every spatial axis: one reduction over them flattened.
                let shape = self.specs[&ins[0]].shape.clone();
                Lowering::Nodes(super::reduce::reduce_trailing(
                    name,
                    out,
                    &ins[0],
                    &shape,
                    rank - 2,
                    super::reduce::Reduce::Mean,
                    true,
                ))
            }
            "Gemm" => {
                if n_in != 2 && n_in != 3 {
                    opaque!("expects 2 or 3 inputs, has {n_in}");
                }
                let ins = inputs!(self, np, 0..n_in);
                let (alpha, beta) = (
                    attr_f(np, "alpha").unwrap_or(1.0),
                    attr_f(np, "beta").unwrap_or(1.0),
                );
                let mut v = vec![];
                let operand = |i: usize, t: bool, v: &mut Vec<Node>| -> String {
                    if !t {
                        return ins[i].clone();
                    }
                    let o = format!("{out}#t{i}");
                    v.push(Node {
                        name: format!("{name}#t{i}"),
                        op: Op::Transpose { perm: vec![1, 0] },
                        inputs: vec![ins[i].clone()],
                        outputs: vec![o.clone()],
                    });
                    o
                };
                let a = operand(0, attr_i(np, "transA").unwrap_or(0) != 0, &mut v);
                let b = operand(1, attr_i(np, "transB").unwrap_or(0) != 0, &mut v);
                let dtype = self.specs[&ins[0]].dtype;
                let scaled = |v: &mut Vec<Node>, src: String, k: f64, tag: &str| -> String {
                    if k == 1.0 {
                        return src;
                    }
                    let c = format!("{out}#{tag}");
                    let o = format!("{out}#{tag}x");
                    v.push(Node {
                        name: format!("{name}#{tag}"),
                        op: Op::Constant {
                            shape: vec![],
                            dtype,
                            value: k,
                        },
                        inputs: vec![],
                        outputs: vec![c.clone()],
                    });
                    v.push(Node {
                        name: format!("{name}#{tag}x"),
                        op: Op::Binary { f: BinaryFn::Mul },
                        inputs: vec![src, c],
                        outputs: vec![o.clone()],
                    });
                    o
                };
                let has_c = ins.len() == 3;
                let mm = if has_c {
                    format!("{out}#mm")
                } else {
                    out.to_string()
                };
                v.push(Node {
                    name: if has_c {
                        format!("{name}#mm")
                    } else {
                        name.to_string()
                    },
                    op: Op::MatMul,
                    inputs: vec![a, b],
                    outputs: vec![mm.clone()],
                });
                if alpha != 1.0 && !has_c {
                    opaque!("alpha ≠ 1 without C is not mapped");
                }
                if has_c {
                    let ab = scaled(&mut v, mm, alpha, "alpha");
                    let c = scaled(&mut v, ins[2].clone(), beta, "beta");
                    v.push(Node {
                        name: name.to_string(),
                        op: Op::Binary { f: BinaryFn::Add },
                        inputs: vec![ab, c],
                        outputs: vec![out.to_string()],
                    });
                }
                Lowering::Nodes(v)
            }
            "BatchNormalization" => {
                // Inference form folded at import: y = x · a + b per channel, with
                // a = scale / √(var + ε) and b = bias − mean · a (in f64, then f32).
                if n_in != 5 || np.output.iter().skip(1).any(|o| !o.is_empty()) {
                    opaque!("only the inference form (5 inputs, one output) is mapped");
                }
                if attr_i(np, "training_mode").unwrap_or(0) != 0 {
                    opaque!("training_mode = 1");
                }
                let eps = attr_f(np, "epsilon").unwrap_or(1e-5);
                let mut consts = vec![];
                for i in 1..5 {
                    let r = self.resolve(&np.input[i]);
                    match self.statics.get(&r) {
                        Some(t) => consts.push(weight_values(t).map_err(|e| self.err(e))?),
                        None => opaque!("scale, bias, mean and var must be constants"),
                    }
                }
                let ins = inputs!(self, np, [0]);
                let xs = self.specs[&ins[0]].clone();
                let ch = consts[0].len();
                if xs.shape.len() < 2 || xs.shape[1] != ch || consts.iter().any(|c| c.len() != ch) {
                    opaque!(
                        "per-channel parameters of {ch} values do not match input {:?}",
                        xs.shape
                    );
                }
                let mut a = Vec::with_capacity(ch);
                let mut b = Vec::with_capacity(ch);
                let (scale, bias, mean, var) = (&consts[0], &consts[1], &consts[2], &consts[3]);
                for (((sc, bi), me), va) in scale.iter().zip(bias).zip(mean).zip(var) {
                    let ak = f64::from(*sc) / (f64::from(*va) + eps).sqrt();
                    a.push(ak as f32);
                    b.push((f64::from(*bi) - f64::from(*me) * ak) as f32);
                }
                let mut shape = vec![ch];
                shape.resize(xs.shape.len() - 1, 1);
                let (an, bn, mid) = (
                    format!("{out}#bn_a"),
                    format!("{out}#bn_b"),
                    format!("{out}#bn_ax"),
                );
                self.weights.insert(an.clone(), a);
                self.weights.insert(bn.clone(), b);
                let w = |n: &str| Node {
                    name: n.to_string(),
                    op: Op::Weight {
                        shape: shape.clone(),
                        dtype: xs.dtype,
                    },
                    inputs: vec![],
                    outputs: vec![n.to_string()],
                };
                self.notes.push(format!(
                    "BatchNormalization `{name}` folded into a per-channel multiply-add (inference form)"
                ));
                Lowering::Nodes(vec![
                    w(&an),
                    w(&bn),
                    Node {
                        name: format!("{name}#scale"),
                        op: Op::Binary { f: BinaryFn::Mul },
                        inputs: vec![ins[0].clone(), an.clone()],
                        outputs: vec![mid.clone()],
                    },
                    Node {
                        name: name.to_string(),
                        op: Op::Binary { f: BinaryFn::Add },
                        inputs: vec![mid, bn.clone()],
                        outputs: vec![out.to_string()],
                    },
                ])
            }
            "LayerNormalization" | "RMSNormalization" => {
                let rms = op_type == "RMSNormalization";
                let max_in = if rms { 2 } else { 3 };
                if np.input.len() < 2 || np.input.len() > max_in {
                    opaque!("expects 2 to {max_in} inputs, has {}", np.input.len());
                }
                let mut ins = inputs!(self, np, [0, 1]);
                let x = self.specs[&ins[0]].clone();
                let axis = attr_i(np, "axis").unwrap_or(-1);
                let rank = x.shape.len() as i64;
                if !(axis == -1 || (rank > 0 && axis == rank - 1)) {
                    opaque!("normalizes over the axes from {axis} of rank {rank}; the IR normalizes the last axis only");
                }
                let eps = attr_f(np, "epsilon").unwrap_or(1e-5);
                let mut v = vec![];
                if rms {
                    return Ok(one(name, out, Op::RmsNorm { eps }, ins));
                }
                if np.input.get(2).is_some_and(|s| !s.is_empty()) {
                    ins.extend(inputs!(self, np, [2]));
                } else {
                    // No bias: a zero Constant of the normalized width.
                    let d = x.shape.last().copied().unwrap_or(0);
                    let zero = format!("{out}#zero_bias");
                    v.push(Node {
                        name: format!("{name}#zero_bias"),
                        op: Op::Constant {
                            shape: vec![d],
                            dtype: x.dtype,
                            value: 0.0,
                        },
                        inputs: vec![],
                        outputs: vec![zero.clone()],
                    });
                    ins.push(zero);
                }
                v.push(Node {
                    name: name.to_string(),
                    op: Op::LayerNorm { eps },
                    inputs: ins,
                    outputs: vec![out.to_string()],
                });
                Lowering::Nodes(v)
            }
            "Einsum" => return self.lower_einsum(np, name, out),
            "ScatterND" => return self.lower_scatter_nd(np, name, out),
            _ => Lowering::Opaque(format!("op `{op_type}` has no IR equivalent")),
        })
    }
}
