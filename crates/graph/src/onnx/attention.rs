//! The attention family of the ONNX front end: the `com.microsoft` ops that onnxruntime's
//! transformer optimizer (`onnxruntime.transformers.optimizer`) writes into BERT- and
//! GPT-2-style models, lowered to the IR's own ops:
//!
//! - `SkipLayerNormalization`: `LayerNorm(input + skip [+ bias]) · gamma + beta`; its
//!   optional fourth output is the sum.
//! - `BiasGelu`: exact GELU of `A + bias`, x · ½ · (1 + erf(x / √2)).
//! - `FastGelu`: the tanh GELU of `X [+ bias]` (the IR's `GELU`).
//! - `EmbedLayerNormalization`: `LayerNorm(word[ids] + position[0..S] [+ segment[ids]])`, and
//!   its `mask_index` output, the count of ones of each mask row.
//! - `Attention`: packed QKV projection, `num_heads` heads, scores scaled by `scale` (default
//!   1/√head), a key mask from `mask_index` (1-D end positions, or a 2-D 1/0 mask) and
//!   `unidirectional` adding `mask_filter_value` (default −10000) where masked, Softmax, the
//!   weighted values, heads merged.
//!
//! Left out (the node stays opaque with the reason): `past` / `present` key-value caches,
//! `relative_position_bias`, `qkv_hidden_sizes` that differ, 3-D and 4-D masks, and the other
//! contrib ops.

use super::proto::NodeProto;
use super::{attr_f, attr_i, Emit, Importer, Lowering};
use crate::error::Result;
use crate::ir::{BinaryFn, DType, Op, UnaryFn};

/// The `com.microsoft` ops this family lowers.
pub(super) const OPS: &[&str] = &[
    "SkipLayerNormalization",
    "BiasGelu",
    "FastGelu",
    "EmbedLayerNormalization",
    "Attention",
];

impl Emit {
    /// A scalar constant of `dtype`.
    fn scalar(&mut self, value: f64, dtype: DType) -> String {
        self.op(
            Op::Constant {
                shape: vec![],
                dtype,
                value,
            },
            &[],
        )
    }

    /// Exact GELU of `x`: x · ½ · (1 + erf(x / √2)).
    fn gelu_erf(&mut self, x: &str, dtype: DType) -> String {
        let sqrt2 = self.scalar(std::f64::consts::SQRT_2, dtype);
        let half = self.scalar(0.5, dtype);
        let one = self.scalar(1.0, dtype);
        let s = self.op(Op::Binary { f: BinaryFn::Div }, &[x, &sqrt2]);
        let e = self.op(Op::Unary { f: UnaryFn::Erf }, &[&s]);
        let p = self.op(Op::Binary { f: BinaryFn::Add }, &[&e, &one]);
        let h = self.op(Op::Binary { f: BinaryFn::Mul }, &[x, &half]);
        self.op(Op::Binary { f: BinaryFn::Mul }, &[&h, &p])
    }
}

impl<'a> Importer<'a> {
    /// Runtime input `i` of `np` (resolved, materialized), or why it has no IR form; `None`
    /// when the input is absent.
    fn optional_input(
        &mut self,
        np: &NodeProto,
        i: usize,
    ) -> Result<std::result::Result<Option<String>, String>> {
        let Some(raw) = np.input.get(i).filter(|s| !s.is_empty()) else {
            return Ok(Ok(None));
        };
        let r = self.resolve(raw);
        Ok(self
            .runtime(&r, &format!("node `{}` ({})", np.name, np.op_type))?
            .map(|_| Some(r)))
    }

    /// Lower `com.microsoft` node `np` (its op type is one of [`OPS`]).
    pub(super) fn lower_attention(
        &mut self,
        np: &'a NodeProto,
        name: &str,
        out: &str,
    ) -> Result<Lowering<'a>> {
        macro_rules! input {
            ($i:expr) => {
                match self.optional_input(np, $i)? {
                    Ok(v) => v,
                    Err(why) => opaque!("{why}"),
                }
            };
        }
        let outs: Vec<&str> = np.output.iter().map(String::as_str).collect();
        let used = |k: usize| outs.get(k).is_some_and(|o| !o.is_empty());
        let mut e = Emit::new(name);
        let op_type = np.op_type.as_str();
        match op_type {
            "SkipLayerNormalization" => {
                let (Some(x), Some(skip), Some(gamma)) = (input!(0), input!(1), input!(2)) else {
                    opaque!("input, skip and gamma are required")
                };
                if used(1) || used(2) {
                    opaque!("the mean / inv_std_var outputs are used");
                }
                let spec = self.specs[&x].clone();
                let eps = attr_f(np, "epsilon").unwrap_or(1e-12);
                let mut sum = e.op(Op::Binary { f: BinaryFn::Add }, &[&x, &skip]);
                if let Some(b) = input!(4) {
                    sum = e.op(Op::Binary { f: BinaryFn::Add }, &[&sum, &b]);
                }
                let beta = match input!(3) {
                    Some(b) => b,
                    None => {
                        let d = spec.shape.last().copied().unwrap_or(0);
                        e.op(
                            Op::Constant {
                                shape: vec![d],
                                dtype: spec.dtype,
                                value: 0.0,
                            },
                            &[],
                        )
                    }
                };
                let mut nodes = {
                    e.op(Op::LayerNorm { eps }, &[&sum, &gamma, &beta]);
                    e.finish(name, out)
                };
                if used(3) {
                    // The sum itself is the fourth output: a view of it under that name.
                    let shape = spec.shape.iter().map(|&d| d as i64).collect();
                    nodes.push(crate::ir::Node {
                        name: format!("{name}#sum"),
                        op: Op::Reshape { shape },
                        inputs: vec![sum],
                        outputs: vec![outs[3].to_string()],
                    });
                }
                Ok(Lowering::Nodes(nodes))
            }
            "BiasGelu" | "FastGelu" => {
                let Some(x) = input!(0) else {
                    opaque!("input A is required")
                };
                let dtype = self.specs[&x].dtype;
                let a = match input!(1) {
                    Some(b) => e.op(Op::Binary { f: BinaryFn::Add }, &[&x, &b]),
                    None => x,
                };
                if op_type == "BiasGelu" {
                    e.gelu_erf(&a, dtype);
                } else {
                    e.op(Op::Unary { f: UnaryFn::Gelu }, &[&a]);
                }
                Ok(Lowering::Nodes(e.finish(name, out)))
            }
            "EmbedLayerNormalization" => {
                let (Some(ids), Some(word), Some(pos)) = (input!(0), input!(2), input!(3)) else {
                    opaque!("input_ids, word_embedding and position_embedding are required")
                };
                if np.input.get(9).is_some_and(|s| !s.is_empty()) {
                    opaque!("explicit position_ids are not lowered");
                }
                let (segs, seg_table) = (input!(1), input!(4));
                let (Some(gamma), Some(beta)) = (input!(5), input!(6)) else {
                    opaque!("gamma and beta are required")
                };
                let mask = input!(7);
                let is = self.specs[&ids].shape.clone();
                if is.len() != 2 {
                    opaque!("input_ids has shape {is:?}, expected [batch, sequence]");
                }
                let s = is[1];
                let eps = attr_f(np, "epsilon").unwrap_or(1e-12);
                let w = e.op(Op::Gather { axis: 0 }, &[&word, &ids]);
                // Positions 0..S: the first S rows of the table, broadcast over the batch.
                let p = e.op(
                    Op::Slice {
                        starts: vec![0],
                        ends: vec![s as i64],
                        axes: vec![0],
                        steps: vec![1],
                    },
                    &[&pos],
                );
                let mut sum = e.op(Op::Binary { f: BinaryFn::Add }, &[&w, &p]);
                if let (Some(sg), Some(table)) = (&segs, &seg_table) {
                    let g = e.op(Op::Gather { axis: 0 }, &[table, sg]);
                    sum = e.op(Op::Binary { f: BinaryFn::Add }, &[&sum, &g]);
                }
                e.op(Op::LayerNorm { eps }, &[&sum, &gamma, &beta]);
                let mut nodes = e.finish(name, out);
                if used(1) {
                    // mask_index: the ones of each mask row (all S without a mask), int32.
                    let mut m = Emit::new(&format!("{name}#mask"));
                    let count = match &mask {
                        Some(mk) => {
                            let f = m.op(Op::Cast { to: DType::Fp32 }, &[mk]);
                            m.op(
                                Op::ReduceSum {
                                    axis: 1,
                                    keepdims: false,
                                },
                                &[&f],
                            )
                        }
                        None => m.op(
                            Op::Constant {
                                shape: vec![is[0]],
                                dtype: DType::Fp32,
                                value: s as f64,
                            },
                            &[],
                        ),
                    };
                    m.op(Op::Cast { to: DType::Int32 }, &[&count]);
                    nodes.extend(m.finish(&format!("{name}#mask_index"), outs[1]));
                }
                if used(2) {
                    opaque!("the embedding_sum output is used");
                }
                Ok(Lowering::Nodes(nodes))
            }
            "Attention" => {
                let (Some(x), Some(wqkv)) = (input!(0), input!(1)) else {
                    opaque!("input and weights are required")
                };
                for (i, what) in [(4, "past"), (5, "relative_position_bias")] {
                    if np.input.get(i).is_some_and(|s| !s.is_empty()) {
                        opaque!("input `{what}` is not lowered");
                    }
                }
                if used(1) {
                    opaque!("the `present` output is used");
                }
                if super::attr_ints(np, "qkv_hidden_sizes")
                    .is_some_and(|q| q.len() == 3 && (q[0] != q[1] || q[1] != q[2]))
                {
                    opaque!("qkv_hidden_sizes differ");
                }
                let Some(heads) = attr_i(np, "num_heads")
                    .filter(|h| *h > 0)
                    .map(|h| h as usize)
                else {
                    opaque!("attribute `num_heads` is missing")
                };
                let xs = self.specs[&x].shape.clone();
                let ws = self.specs[&wqkv].shape.clone();
                let dtype = self.specs[&x].dtype;
                if xs.len() != 3
                    || ws.len() != 2
                    || !ws[1].is_multiple_of(3)
                    || !(ws[1] / 3).is_multiple_of(heads)
                {
                    opaque!("input {xs:?} and weights {ws:?} do not give {heads} heads");
                }
                let (b, s, hidden) = (xs[0], xs[1], ws[1] / 3);
                let d = hidden / heads;
                let scale = attr_f(np, "scale").unwrap_or(1.0 / (d as f64).sqrt());
                let filter = attr_f(np, "mask_filter_value").unwrap_or(-10000.0);
                let mut qkv = e.op(Op::MatMul, &[&x, &wqkv]);
                if let Some(bias) = input!(2) {
                    qkv = e.op(Op::Binary { f: BinaryFn::Add }, &[&qkv, &bias]);
                }
                let mut part = |k: usize, perm: Vec<usize>| {
                    let p = e.op(
                        Op::Slice {
                            starts: vec![(k * hidden) as i64],
                            ends: vec![((k + 1) * hidden) as i64],
                            axes: vec![2],
                            steps: vec![1],
                        },
                        &[&qkv],
                    );
                    let r = e.reshape(&p, &[b, s, heads, d]);
                    e.op(Op::Transpose { perm }, &[&r])
                };
                let q = part(0, vec![0, 2, 1, 3]);
                let kt = part(1, vec![0, 2, 3, 1]);
                let v = part(2, vec![0, 2, 1, 3]);
                let raw = e.op(Op::MatMul, &[&q, &kt]);
                let sc = e.scalar(scale, dtype);
                let mut scores = e.op(Op::Binary { f: BinaryFn::Mul }, &[&raw, &sc]);
                // The key mask, as 1 (keep) / 0 per [batch, key], then filter where 0.
                let keep = match input!(3) {
                    None => None,
                    Some(m) => {
                        let shape = self.specs[&m].shape.clone();
                        let mf = e.op(Op::Cast { to: dtype }, &[&m]);
                        if shape == [b] {
                            // End positions: key j is kept when j < end[batch].
                            let ends = e.reshape(&mf, &[b, 1]);
                            let idx = match self.add_constant(super::proto::TensorProto {
                                dims: vec![1, s as i64],
                                data_type: super::proto::dt::FLOAT,
                                float_data: (0..s).map(|j| j as f32).collect(),
                                name: format!("{out}#key_positions"),
                                ..Default::default()
                            })? {
                                Ok(n) => n,
                                Err(why) => opaque!("{why}"),
                            };
                            let lt = e.op(
                                Op::Binary {
                                    f: crate::optable::BinaryFn::Less,
                                },
                                &[&idx, &ends],
                            );
                            Some(e.op(Op::Cast { to: dtype }, &[&lt]))
                        } else if shape == [b, s] {
                            Some(mf)
                        } else {
                            opaque!("mask_index of shape {shape:?} (1-D end positions and 2-D masks are lowered)");
                        }
                    }
                };
                if let Some(k) = keep {
                    // (1 − keep) · filter, as [batch, 1, 1, key].
                    let one = e.scalar(1.0, dtype);
                    let fv = e.scalar(filter, dtype);
                    let inv = e.op(Op::Binary { f: BinaryFn::Sub }, &[&one, &k]);
                    let add = e.op(Op::Binary { f: BinaryFn::Mul }, &[&inv, &fv]);
                    let add = e.reshape(&add, &[b, 1, 1, s]);
                    scores = e.op(Op::Binary { f: BinaryFn::Add }, &[&scores, &add]);
                }
                if attr_i(np, "unidirectional").unwrap_or(0) != 0 {
                    let causal: Vec<f32> = (0..s * s)
                        .map(|f| if f % s > f / s { filter as f32 } else { 0.0 })
                        .collect();
                    let c = match self.add_constant(super::proto::TensorProto {
                        dims: vec![s as i64, s as i64],
                        data_type: super::proto::dt::FLOAT,
                        float_data: causal,
                        name: format!("{out}#causal"),
                        ..Default::default()
                    })? {
                        Ok(n) => n,
                        Err(why) => opaque!("{why}"),
                    };
                    scores = e.op(Op::Binary { f: BinaryFn::Add }, &[&scores, &c]);
                }
                let p = e.op(Op::Softmax { axis: -1 }, &[&scores]);
                let ctx = e.op(Op::MatMul, &[&p, &v]);
                let t = e.op(
                    Op::Transpose {
                        perm: vec![0, 2, 1, 3],
                    },
                    &[&ctx],
                );
                e.reshape(&t, &[b, s, hidden]);
                Ok(Lowering::Nodes(e.finish(name, out)))
            }
            _ => opaque!("op `com.microsoft::{op_type}` has no IR equivalent"),
        }
    }
}
