//! Symbolic dims carried through a graph: which dims of each tensor are which named dims of
//! the inputs (`batch`, `sequence`), or a product of them (`batch·sequence` after a Reshape
//! merges the two). The graph itself stays static, bound at import; these labels say which
//! sizes another binding would change, and name them in reports. Each op maps its inputs'
//! labels to its outputs': an elementwise op takes the broadcast of its inputs' dims, MatMul
//! keeps the batch and row dims of the left operand and the column dim of the right one,
//! Transpose permutes, reductions drop or reset the reduced axis, a Reshape carries labels
//! across each group of dims whose products match and splits a product back into its
//! factors by their bound sizes. Left out: arithmetic on dims (a Concat along a symbolic
//! axis, a Slice that shortens one, a convolution's spatial dims get no label); labels are
//! matched by size at the bound values, so two names bound to the same size can be confused
//! (bind distinct values, e.g. `--dim batch=3 --dim sequence=7`, to rule that out).

use crate::ir::{norm_axis, Op, TypedGraph};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One dim's label: the ordered symbolic names whose product (times a constant) is its size.
/// Empty for a dim that no binding changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DimLabel {
    /// The names, in the order the dims were merged.
    pub syms: Vec<String>,
}

impl DimLabel {
    /// A single name.
    pub fn sym(name: &str) -> Self {
        DimLabel {
            syms: vec![name.to_string()],
        }
    }

    /// True when no name scales this dim.
    pub fn is_fixed(&self) -> bool {
        self.syms.is_empty()
    }

    /// The dim as a user reads it: `batch`, `batch·sequence`, `3·batch`, or the size.
    pub fn render(&self, size: usize, values: &BTreeMap<String, usize>) -> String {
        if self.syms.is_empty() {
            return size.to_string();
        }
        let prod = self.product(values);
        let names = self.syms.join("·");
        match prod {
            Some(p) if p > 0 && size.is_multiple_of(p) && size / p != 1 => {
                format!("{}·{names}", size / p)
            }
            _ => names,
        }
    }

    fn product(&self, values: &BTreeMap<String, usize>) -> Option<usize> {
        self.syms.iter().try_fold(1usize, |acc, s| {
            values.get(s).and_then(|v| acc.checked_mul(*v))
        })
    }
}

/// The labels of every tensor of `tg` (indexed like `tg.tensors`), from the labels of the
/// graph inputs (`inputs`: by input name, one name or `None` per dim) and the values the
/// names were bound to (`values`).
pub fn propagate(
    tg: &TypedGraph,
    inputs: &BTreeMap<String, Vec<Option<String>>>,
    values: &BTreeMap<String, usize>,
) -> Vec<Vec<DimLabel>> {
    let mut labels: Vec<Vec<DimLabel>> = tg
        .tensors
        .iter()
        .map(|t| vec![DimLabel::default(); t.shape.len()])
        .collect();
    for (i, n) in tg.nodes.iter().enumerate() {
        let ins: Vec<(&[usize], Vec<DimLabel>)> = tg.node_inputs[i]
            .iter()
            .map(|&t| (tg.tensors[t].shape.as_slice(), labels[t].clone()))
            .collect();
        for (k, &t) in tg.node_outputs[i].iter().enumerate() {
            let shape = &tg.tensors[t].shape;
            let out = if k == 0 {
                node_labels(&n.op, &tg.tensors[t].name, &ins, shape, inputs, values)
            } else {
                None
            };
            if let Some(l) = out.filter(|l| l.len() == shape.len()) {
                labels[t] = l;
            }
        }
    }
    labels
}

/// The labels of a node's first output (`name`), or `None` to leave them fixed.
fn node_labels(
    op: &Op,
    name: &str,
    ins: &[(&[usize], Vec<DimLabel>)],
    shape: &[usize],
    inputs: &BTreeMap<String, Vec<Option<String>>>,
    values: &BTreeMap<String, usize>,
) -> Option<Vec<DimLabel>> {
    let first = || ins.first().map(|x| x.1.clone());
    let r = shape.len();
    Some(match op {
        Op::Input { .. } => inputs
            .get(name)?
            .iter()
            .map(|d| d.as_deref().map(DimLabel::sym).unwrap_or_default())
            .collect(),
        Op::Weight { .. } | Op::Constant { .. } | Op::Opaque { .. } => return None,
        Op::MatMul => {
            let (a, b) = (ins.first()?, ins.get(1)?);
            let mut l = a.1[..a.1.len() - 1].to_vec();
            l.push(b.1.last()?.clone());
            l
        }
        Op::Transpose { perm } => perm
            .iter()
            .map(|&p| ins[0].1.get(p).cloned())
            .collect::<Option<_>>()?,
        Op::Reshape { .. } => reshape(ins.first()?, shape, values),
        Op::ReduceSum { axis, keepdims }
        | Op::ReduceMax { axis, keepdims }
        | Op::ReduceMean { axis, keepdims }
        | Op::LogSumExp { axis, keepdims } => {
            let mut l = first()?;
            let a = norm_axis(*axis, l.len())?;
            if *keepdims {
                l[a] = DimLabel::default();
            } else {
                l.remove(a);
            }
            l
        }
        Op::Concat { axis } => {
            let mut l = first()?;
            let a = norm_axis(*axis, l.len())?;
            l[a] = DimLabel::default();
            l
        }
        Op::Slice { .. } | Op::Pad { .. } => {
            // A dim the op leaves whole keeps its label.
            let (s, l) = ins.first()?;
            l.iter()
                .zip(s.iter().zip(shape))
                .map(|(l, (a, b))| {
                    if a == b {
                        l.clone()
                    } else {
                        DimLabel::default()
                    }
                })
                .collect()
        }
        Op::Gather { axis } => {
            let (data, idx) = (ins.first()?, ins.get(1)?);
            let a = norm_axis(*axis, data.1.len())?;
            let mut l = data.1[..a].to_vec();
            l.extend(idx.1.iter().cloned());
            l.extend(data.1[a + 1..].iter().cloned());
            l
        }
        // The indices' shape is the output's.
        Op::GatherElements { .. } => ins.get(1)?.1.clone(),
        Op::Conv2d { .. } | Op::MaxPool2d { .. } | Op::AvgPool2d { .. } => {
            let mut l = vec![DimLabel::default(); r];
            l[0] = ins.first()?.1.first()?.clone();
            l
        }
        Op::FusedAttention { .. } => {
            // q's dims, the last one v's (`[..., Sq, Dv]`).
            let mut l = first()?;
            *l.last_mut()? = ins.get(2)?.1.last()?.clone();
            l
        }
        Op::Recurrence { .. } => {
            // [S + F, D, B, H]: the batch is xw's second dim.
            let mut l = vec![DimLabel::default(); r];
            *l.get_mut(2)? = ins.first()?.1.get(1)?.clone();
            l
        }
        Op::RmsNormSwiGlu { .. } => {
            let mut l = first()?;
            *l.last_mut()? = DimLabel::default();
            l
        }
        // Elementwise, broadcast and row ops: each output dim from an input dim of the same
        // size, right-aligned (NumPy broadcasting); an explicit Broadcast's new dims fixed.
        _ => broadcast(ins, shape),
    })
}

fn broadcast(ins: &[(&[usize], Vec<DimLabel>)], shape: &[usize]) -> Vec<DimLabel> {
    let r = shape.len();
    (0..r)
        .map(|d| {
            let mut best = DimLabel::default();
            for (s, l) in ins {
                if s.len() < r - d {
                    continue;
                }
                let j = s.len() - (r - d);
                if s[j] == shape[d] && best.is_fixed() {
                    best = l[j].clone();
                }
            }
            best
        })
        .collect()
}

/// Labels across a Reshape: dims are grouped where the running products of the input and
/// output shapes meet; a group's names, in order, are dealt to its output dims by size.
fn reshape(
    input: &(&[usize], Vec<DimLabel>),
    out: &[usize],
    values: &BTreeMap<String, usize>,
) -> Vec<DimLabel> {
    let (ins, labels) = (input.0, &input.1);
    let mut res = vec![DimLabel::default(); out.len()];
    let (mut i, mut j) = (0usize, 0usize);
    while i < ins.len() || j < out.len() {
        // One group: start with the next dim on each side, then grow the smaller product
        // until the two meet.
        let (i0, j0) = (i, j);
        let next = |k: &mut usize, dims: &[usize]| {
            let d = dims.get(*k).copied().unwrap_or(1) as u128;
            *k = (*k + 1).min(dims.len());
            d
        };
        let (mut pi, mut pj) = (next(&mut i, ins), next(&mut j, out));
        while pi != pj {
            if pi < pj && i < ins.len() {
                pi *= next(&mut i, ins);
            } else if pj < pi && j < out.len() {
                pj *= next(&mut j, out);
            } else {
                break;
            }
        }
        let mut names: Vec<String> = labels[i0..i].iter().flat_map(|l| l.syms.clone()).collect();
        for (k, &size) in out[j0..j].iter().enumerate() {
            let mut take = vec![];
            let mut p = 1usize;
            while let Some(n) = names.first() {
                match values.get(n).and_then(|v| p.checked_mul(*v)) {
                    Some(q) if q > 0 && size.is_multiple_of(q) => {
                        p = q;
                        take.push(names.remove(0));
                    }
                    _ => break,
                }
            }
            res[j0 + k] = DimLabel { syms: take };
        }
        if i == i0 && j == j0 {
            break;
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Graph;

    fn labels_of(json: &str, tensor: &str) -> Vec<String> {
        let tg = Graph::from_json_str(json).unwrap().validate().unwrap();
        let inputs = BTreeMap::from([(
            "x".to_string(),
            vec![Some("batch".to_string()), Some("seq".to_string()), None],
        )]);
        let values = BTreeMap::from([("batch".to_string(), 3), ("seq".to_string(), 5)]);
        let l = propagate(&tg, &inputs, &values);
        let t = tg.tensors.iter().position(|t| t.name == tensor).unwrap();
        l[t].iter()
            .zip(&tg.tensors[t].shape)
            .map(|(l, &s)| l.render(s, &values))
            .collect()
    }

    #[test]
    fn labels_follow_broadcast_matmul_reshape_transpose_and_reduction() {
        // x [batch=3, seq=5, 8] · W [8, 4] + b [4]: rows keep their names, columns none.
        let g = r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[3,5,8],"dtype":"fp32"}},
          {"name":"w","op":"Weight","attrs":{"shape":[8,4],"dtype":"fp32"}},
          {"name":"b","op":"Weight","attrs":{"shape":[4],"dtype":"fp32"}},
          {"name":"m","op":"MatMul","inputs":["x","w"]},
          {"name":"y","op":"Add","inputs":["m","b"]},
          {"name":"flat","op":"Reshape","attrs":{"shape":[15,4]},"inputs":["y"]},
          {"name":"back","op":"Reshape","attrs":{"shape":[3,5,2,2]},"inputs":["flat"]},
          {"name":"t","op":"Transpose","attrs":{"perm":[0,2,1,3]},"inputs":["back"]},
          {"name":"s","op":"ReduceSum","attrs":{"axis":1,"keepdims":false},"inputs":["y"]},
          {"name":"bc","op":"Mul","inputs":["s","s"]}]}"#;
        assert_eq!(labels_of(g, "y"), ["batch", "seq", "4"]);
        // Merged rows: 15 = batch·seq; split again by the bound sizes 3 and 5.
        assert_eq!(labels_of(g, "flat"), ["batch·seq", "4"]);
        assert_eq!(labels_of(g, "back"), ["batch", "seq", "2", "2"]);
        assert_eq!(labels_of(g, "t"), ["batch", "2", "seq", "2"]);
        // ReduceSum over seq without keepdims: [batch, 4].
        assert_eq!(labels_of(g, "s"), ["batch", "4"]);
        assert_eq!(labels_of(g, "bc"), ["batch", "4"]);
    }
}
