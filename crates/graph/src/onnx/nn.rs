//! The neural-network family of the ONNX front end: MatMul, Gemm, Conv, pooling,
//! BatchNormalization (folded into weights), LayerNormalization / RMSNormalization,
//! InstanceNormalization (a LayerNorm over the spatial axes), Dropout
//! (an alias at inference), and the contractions and scatters of `einsum.rs`. 1-D
//! convolutions run as 2-D ones of height 1; `auto_pad` becomes explicit pads.
//! Left out: 3-D convolutions, 1-D and 3-D pools, `ceil_mode`.

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
    "InstanceNormalization",
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
                let ws = self.specs[&ins[1]].shape.clone();
                if xs.len() != 3 && xs.len() != 4 {
                    opaque!(
                        "only 1-D (NCL) and 2-D (NCHW) convolutions are supported, the input has rank {}",
                        xs.len()
                    );
                }
                let sp = xs.len() - 2;
                let ints = |key: &str| attr_ints(np, key).map(<[i64]>::to_vec);
                let strides = ints("strides").unwrap_or_else(|| vec![1; sp]);
                let dil = ints("dilations").unwrap_or_else(|| vec![1; sp]);
                let kernel = ws.get(2..).unwrap_or(&[]);
                let pads = match auto_pads(np, &xs[2..], kernel, &strides, &dil) {
                    Ok(Some(p)) => p,
                    Ok(None) => ints("pads").unwrap_or_else(|| vec![0; 2 * sp]),
                    Err(e) => opaque!("{e}"),
                };
                if xs.len() == 3 {
                    return Ok(self.conv1d(np, name, out, &ins, [&strides, &pads, &dil]));
                }
                let u = |v: &[i64]| {
                    v.iter()
                        .map(|x| usize::try_from(*x).ok())
                        .collect::<Option<Vec<usize>>>()
                };
                let (strides, pads, dil) = (u(&strides), u(&pads), u(&dil));
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
                {
                    opaque!("ceil_mode and dilations are not supported");
                }
                let u = |v: &[i64]| {
                    v.iter()
                        .map(|x| usize::try_from(*x).ok())
                        .collect::<Option<Vec<usize>>>()
                };
                let kernel = attr_ints(np, "kernel_shape").and_then(u);
                let stride_attr = attr_ints(np, "strides").unwrap_or(&[1, 1]);
                let xs = self.specs[&ins[0]].shape.clone();
                let auto = auto_pads(
                    np,
                    &xs[2..],
                    kernel.as_deref().unwrap_or(&[]),
                    stride_attr,
                    &[1, 1],
                );
                let pads = match auto {
                    Ok(Some(p)) => u(&p),
                    Ok(None) => u(attr_ints(np, "pads").unwrap_or(&[0, 0, 0, 0])),
                    Err(e) => opaque!("{e}"),
                };
                let strides = u(stride_attr);
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
            "InstanceNormalization" => {
                arity!(np, 3);
                let ins = inputs!(self, np, [0, 1, 2]);
                return Ok(self.instance_norm(np, name, out, &ins));
            }
            "Einsum" => return self.lower_einsum(np, name, out),
            "ScatterND" => return self.lower_scatter_nd(np, name, out),
            _ => Lowering::Opaque(format!("op `{op_type}` has no IR equivalent")),
        })
    }

    /// ONNX `InstanceNormalization` (wav2vec2's and other GroupNorms, which exporters write
    /// as one): `y = scale[c] · (x − μ) / √(σ² + ε) + B[c]` with μ and σ² (population) over
    /// the spatial axes of each `(n, c)`. Lowered as `x` viewed as `[N, C, S]`, a LayerNorm
    /// over `S` with unit scale and zero offset, the per-channel scale and offset applied to
    /// that view (`[C, 1]` operands), and the result viewed in `x`'s shape. `ins`: the
    /// resolved `[x, scale, B]`.
    fn instance_norm(
        &mut self,
        np: &NodeProto,
        name: &str,
        out: &str,
        ins: &[String],
    ) -> Lowering<'a> {
        let x = self.specs[&ins[0]].clone();
        let c = x.shape.get(1).copied().unwrap_or(0);
        let per_channel = |t: &String| self.specs[t].shape.iter().product::<usize>() == c;
        if x.shape.len() < 3 || !per_channel(&ins[1]) || !per_channel(&ins[2]) {
            return Lowering::Opaque(format!(
                "expects x of rank >= 3 and scale and B of its {c} channels, got x {:?}",
                x.shape
            ));
        }
        let eps = attr_f(np, "epsilon").unwrap_or(1e-5);
        let s: usize = x.shape[2..].iter().product();
        let mut e = Emit::new(out);
        let x3 = e.reshape(&ins[0], &[x.shape[0], c, s]);
        let constant = |e: &mut Emit, value: f64| {
            e.op(
                Op::Constant {
                    shape: vec![s],
                    dtype: x.dtype,
                    value,
                },
                &[],
            )
        };
        let (one, zero) = (constant(&mut e, 1.0), constant(&mut e, 0.0));
        let normed = e.op(Op::LayerNorm { eps }, &[&x3, &one, &zero]);
        let scale = e.reshape(&ins[1], &[c, 1]);
        let offset = e.reshape(&ins[2], &[c, 1]);
        let scaled = e.op(Op::Binary { f: BinaryFn::Mul }, &[&normed, &scale]);
        let y = e.op(Op::Binary { f: BinaryFn::Add }, &[&scaled, &offset]);
        e.reshape(&y, &x.shape);
        Lowering::Nodes(e.finish(name, out))
    }

    /// A 1-D convolution (input `[N, C, L]`, weight `[M, C/g, k]`: Whisper's and wav2vec2's
    /// front ends) as the 2-D one of height 1: `x` viewed as `[N, C, 1, L]`, the weight as
    /// `[M, C/g, 1, k]`, strides `[1, s]`, pads `[0, p₀, 0, p₁]`, dilations `[1, d]`, and the
    /// `[N, M, 1, L']` result viewed as `[N, M, L']` (both views are free: a Reshape shares
    /// its buffer). `ins` are the node's resolved runtime inputs; strides, pads (explicit or
    /// from `auto_pad`) and dilations as the node gives them.
    fn conv1d(
        &mut self,
        np: &NodeProto,
        name: &str,
        out: &str,
        ins: &[String],
        [strides, pads, dilations]: [&[i64]; 3],
    ) -> Lowering<'a> {
        let xs = self.specs[&ins[0]].shape.clone();
        let ws = self.specs[&ins[1]].shape.clone();
        if ws.len() != 3 {
            return Lowering::Opaque(format!(
                "a 1-D convolution's weight must have rank 3, has shape {ws:?}"
            ));
        }
        let counts = |v: &[i64], len: usize| -> Option<Vec<usize>> {
            (v.len() == len)
                .then(|| v.iter().map(|x| usize::try_from(*x).ok()).collect())
                .flatten()
        };
        let (Some(s), Some(p), Some(d)) =
            (counts(strides, 1), counts(pads, 2), counts(dilations, 1))
        else {
            return Lowering::Opaque(
                "a 1-D convolution needs one stride and dilation and two pads, none negative"
                    .to_string(),
            );
        };
        let Some(group) = attr_i(np, "group")
            .map_or(Some(1), |g| usize::try_from(g).ok())
            .filter(|g| *g > 0)
        else {
            return Lowering::Opaque("group must be positive".to_string());
        };
        // L' = ⌊(L + p₀ + p₁ − d·(k − 1) − 1) / s⌋ + 1, when the padded input covers one tap.
        let span = d[0]
            .checked_mul(ws[2].saturating_sub(1))
            .and_then(|x| x.checked_add(1));
        let padded = xs[2].checked_add(p[0]).and_then(|x| x.checked_add(p[1]));
        let l_out = match (span, padded) {
            (Some(span), Some(padded)) if ws[2] > 0 && s[0] > 0 && padded >= span => {
                (padded - span) / s[0] + 1
            }
            _ => {
                return Lowering::Opaque(format!(
                    "kernel {ws:?} with stride {s:?}, pads {p:?}, dilation {d:?} does not fit input {xs:?}"
                ))
            }
        };
        let mut e = Emit::new(out);
        let x4 = e.reshape(&ins[0], &[xs[0], xs[1], 1, xs[2]]);
        let w4 = e.reshape(&ins[1], &[ws[0], ws[1], 1, ws[2]]);
        let mut cins = vec![x4.as_str(), w4.as_str()];
        if let Some(b) = ins.get(2) {
            cins.push(b);
        }
        let y4 = e.op(
            Op::Conv2d {
                strides: vec![1, s[0]],
                pads: vec![0, p[0], 0, p[1]],
                dilations: vec![1, d[0]],
                group,
            },
            &cins,
        );
        e.reshape(&y4, &[xs[0], ws[0], l_out]);
        Lowering::Nodes(e.finish(name, out))
    }
}

/// Explicit ONNX pads (`[begin…, end…]`) for node `np`'s `auto_pad` over spatial extents
/// `input` with `kernel`, `strides` and `dilations` (one per spatial axis): `None` when the
/// attribute is absent or `NOTSET`; `VALID`: zeros; `SAME_UPPER` / `SAME_LOWER`: on each
/// axis the total `max((⌈in / s⌉ − 1)·s + d·(k − 1) + 1 − in, 0)`, so that the output has
/// `⌈in / s⌉` positions, split with its odd one at the end (UPPER) or at the beginning
/// (LOWER), as onnxruntime does.
fn auto_pads(
    np: &NodeProto,
    input: &[usize],
    kernel: &[usize],
    strides: &[i64],
    dilations: &[i64],
) -> std::result::Result<Option<Vec<i64>>, String> {
    let mode = match attr(np, "auto_pad") {
        Some(a) if !a.s.is_empty() && a.s != b"NOTSET" => a.s.as_slice(),
        _ => return Ok(None),
    };
    let sp = input.len();
    if kernel.len() != sp || strides.len() != sp || dilations.len() != sp {
        return Err(format!(
            "auto_pad needs one kernel extent, stride and dilation per spatial axis ({sp})"
        ));
    }
    if mode == b"VALID" {
        return Ok(Some(vec![0; 2 * sp]));
    }
    let upper = match mode {
        b"SAME_UPPER" => true,
        b"SAME_LOWER" => false,
        other => {
            return Err(format!(
                "auto_pad `{}` is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER",
                String::from_utf8_lossy(other)
            ))
        }
    };
    let (mut begin, mut end) = (vec![], vec![]);
    for i in 0..sp {
        let (n, k) = (input[i] as i64, kernel[i] as i64);
        let (s, d) = (strides[i], dilations[i]);
        if s < 1 || d < 1 || k < 1 {
            return Err(format!(
                "auto_pad with stride {s}, dilation {d} and kernel extent {k} on axis {i}"
            ));
        }
        let total = ((n + s - 1) / s - 1)
            .checked_mul(s)
            .and_then(|x| d.checked_mul(k - 1).and_then(|y| x.checked_add(y)))
            .map(|x| (x + 1 - n).max(0))
            .ok_or_else(|| format!("auto_pad overflows on axis {i}"))?;
        let small = total / 2;
        let (b, e) = if upper {
            (small, total - small)
        } else {
            (total - small, small)
        };
        begin.push(b);
        end.push(e);
    }
    begin.extend(end);
    Ok(Some(begin))
}
