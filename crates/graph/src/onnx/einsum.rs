//! `Einsum` and `ScatterND` of the ONNX front end, lowered to the IR's own ops.
//!
//! `Einsum` with one or two operands and single-letter indices: indices only one operand has
//! and the output lacks are summed first (`ReduceSum`); then each operand is transposed to
//! `[batch, own, contracted]` / `[batch, contracted, own]`, reshaped to three dims, multiplied
//! (`MatMul`), reshaped back and transposed to the output's order. Left out (opaque with the
//! reason): an index repeated within one operand (a diagonal), three or more operands, and
//! ellipsis dims that broadcast from 1 (an ellipsis is spelled out with unused letters).
//!
//! `ScatterND` with constant indices and `reduction = none`: the data and the updates are
//! viewed as rows of the innermost `rank - k` dims, concatenated, and gathered in the order
//! that writes each updated row from the updates (the last write wins, as ONNX leaves
//! duplicates undefined and onnxruntime applies them in order).

use super::proto::NodeProto;
use super::{attr_s, tensor_values, Emit, Importer, Lowering, Vals};
use crate::error::Result;
use crate::ir::Op;

fn perm_to(from: &[char], to: &[char]) -> Vec<usize> {
    to.iter()
        .map(|c| from.iter().position(|x| x == c).expect("index present"))
        .collect()
}

impl<'a> Importer<'a> {
    /// Lower `Einsum` node `np` (see the module notes).
    pub(super) fn lower_einsum(
        &mut self,
        np: &'a NodeProto,
        name: &str,
        out: &str,
    ) -> Result<Lowering<'a>> {
        let Some(eq) = attr_s(np, "equation") else {
            opaque!("attribute `equation` is missing")
        };
        let mut eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
        if eq.contains("...") {
            // The ellipsis stands for the leading dims each operand has beyond its letters:
            // spelled out with letters the equation does not use, aligned at the right as
            // NumPy broadcasts them (the dims must then be equal, not broadcast from 1).
            let lhs = eq.split("->").next().unwrap_or("").to_string();
            let mut ranks = vec![];
            for (i, t) in lhs.split(',').enumerate() {
                let Some(raw) = np.input.get(i).filter(|s| !s.is_empty()) else {
                    opaque!("equation `{eq}` names more operands than the node has")
                };
                let r = self.resolve(raw);
                let rank = match self.runtime(&r, &format!("node `{name}` (Einsum)"))? {
                    Ok(spec) => spec.shape.len(),
                    Err(why) => opaque!("{why}"),
                };
                let letters = t.replace("...", "").chars().count();
                if t.contains("...") && rank < letters {
                    opaque!("operand {i} has rank {rank}, fewer than the letters of `{t}`");
                }
                ranks.push(if t.contains("...") { rank - letters } else { 0 });
            }
            let widest = ranks.iter().copied().max().unwrap_or(0);
            let free: Vec<char> = ('A'..='Z')
                .chain('a'..='z')
                .filter(|c| !eq.contains(*c))
                .take(widest)
                .collect();
            if free.len() < widest {
                opaque!("equation `{eq}` leaves too few letters for its ellipsis");
            }
            let mut terms: Vec<String> = lhs
                .split(',')
                .zip(&ranks)
                .map(|(t, &r)| t.replace("...", &free[widest - r..].iter().collect::<String>()))
                .collect();
            let all: String = free.iter().collect();
            let rhs = match eq.split_once("->") {
                Some((_, r)) => r.replace("...", &all),
                None => {
                    // Implicit output: the ellipsis dims, then the letters used once, sorted.
                    let joined: String = terms.concat();
                    let mut once: Vec<char> = joined
                        .chars()
                        .filter(|c| !free.contains(c) && joined.matches(*c).count() == 1)
                        .collect();
                    once.sort();
                    format!("{all}{}", once.into_iter().collect::<String>())
                }
            };
            terms.truncate(np.input.len());
            eq = format!("{}->{rhs}", terms.join(","));
        }
        let (lhs, rhs) = match eq.split_once("->") {
            Some((l, r)) => (l.to_string(), Some(r.to_string())),
            None => (eq.clone(), None),
        };
        let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
        if terms.is_empty() || terms.len() > 2 || terms.len() != np.input.len() {
            opaque!(
                "equation `{eq}` with {} operand(s) (one or two are lowered)",
                terms.len()
            );
        }
        for t in &terms {
            let mut seen = std::collections::HashSet::new();
            if t.iter()
                .any(|c| !c.is_ascii_alphabetic() || !seen.insert(*c))
            {
                opaque!(
                    "equation `{eq}` repeats an index within an operand or uses other characters"
                );
            }
        }
        // Implicit output: the indices that appear once, in alphabetical order.
        let output: Vec<char> = match rhs {
            Some(r) => r.chars().collect(),
            None => {
                let mut v: Vec<char> = terms
                    .concat()
                    .into_iter()
                    .filter(|c| terms.concat().iter().filter(|x| *x == c).count() == 1)
                    .collect();
                v.sort();
                v
            }
        };
        let mut ins = vec![];
        for (i, t) in terms.iter().enumerate() {
            let raw = self.resolve(&np.input[i]);
            let spec = match self.runtime(&raw, &format!("node `{name}` (Einsum)"))? {
                Ok(s) => s,
                Err(why) => opaque!("{why}"),
            };
            if spec.shape.len() != t.len() {
                opaque!(
                    "operand {i} has rank {}, its term `{}` {}",
                    spec.shape.len(),
                    t.iter().collect::<String>(),
                    t.len()
                );
            }
            ins.push((raw, t.clone(), spec.shape));
        }
        let mut size = std::collections::HashMap::new();
        for (_, t, s) in &ins {
            for (c, &d) in t.iter().zip(s) {
                if *size.entry(*c).or_insert(d) != d {
                    opaque!("index `{c}` has sizes {} and {d}", size[c]);
                }
            }
        }
        if let Some(c) = output.iter().find(|c| !size.contains_key(c)) {
            opaque!("output index `{c}` is in no operand");
        }
        let mut e = Emit::new(name);
        // Sum the indices only this operand has and the output lacks.
        let mut ops: Vec<(String, Vec<char>)> = vec![];
        for (k, (raw, t, _)) in ins.iter().enumerate() {
            let other: Vec<char> = ins
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != k)
                .flat_map(|(_, x)| x.1.clone())
                .collect();
            let mut cur = raw.clone();
            let mut idx = t.clone();
            for c in t.iter().rev() {
                if !output.contains(c) && !other.contains(c) {
                    let a = idx.iter().position(|x| x == c).expect("present") as i64;
                    cur = e.op(
                        Op::ReduceSum {
                            axis: a,
                            keepdims: false,
                        },
                        &[&cur],
                    );
                    idx.retain(|x| x != c);
                }
            }
            ops.push((cur, idx));
        }
        let dims = |cs: &[char]| cs.iter().map(|c| size[c]).collect::<Vec<usize>>();
        let nodes = if ops.len() == 1 {
            let (cur, idx) = &ops[0];
            let perm = perm_to(idx, &output);
            if perm.iter().enumerate().all(|(i, &p)| i == p) {
                e.op(
                    Op::Reshape {
                        shape: dims(&output).iter().map(|&d| d as i64).collect(),
                    },
                    &[cur],
                );
            } else {
                e.op(Op::Transpose { perm }, &[cur]);
            }
            e.finish(name, out)
        } else {
            let ((a, ia), (b, ib)) = (ops[0].clone(), ops[1].clone());
            let batch: Vec<char> = ia
                .iter()
                .copied()
                .filter(|c| ib.contains(c) && output.contains(c))
                .collect();
            let contr: Vec<char> = ia
                .iter()
                .copied()
                .filter(|c| ib.contains(c) && !output.contains(c))
                .collect();
            let own_a: Vec<char> = ia.iter().copied().filter(|c| !ib.contains(c)).collect();
            let own_b: Vec<char> = ib.iter().copied().filter(|c| !ia.contains(c)).collect();
            let prod = |cs: &[char]| dims(cs).iter().product::<usize>() as i64;
            let order_a = [batch.clone(), own_a.clone(), contr.clone()].concat();
            let order_b = [batch.clone(), contr.clone(), own_b.clone()].concat();
            let ta = e.op(
                Op::Transpose {
                    perm: perm_to(&ia, &order_a),
                },
                &[&a],
            );
            let ra = e.op(
                Op::Reshape {
                    shape: vec![prod(&batch), prod(&own_a), prod(&contr)],
                },
                &[&ta],
            );
            let tb = e.op(
                Op::Transpose {
                    perm: perm_to(&ib, &order_b),
                },
                &[&b],
            );
            let rb = e.op(
                Op::Reshape {
                    shape: vec![prod(&batch), prod(&contr), prod(&own_b)],
                },
                &[&tb],
            );
            let m = e.op(Op::MatMul, &[&ra, &rb]);
            let got = [batch, own_a, own_b].concat();
            let full = e.op(
                Op::Reshape {
                    shape: dims(&got).iter().map(|&d| d as i64).collect(),
                },
                &[&m],
            );
            let perm = perm_to(&got, &output);
            if perm.iter().enumerate().all(|(i, &p)| i == p) {
                e.op(
                    Op::Reshape {
                        shape: dims(&output).iter().map(|&d| d as i64).collect(),
                    },
                    &[&full],
                );
            } else {
                e.op(Op::Transpose { perm }, &[&full]);
            }
            e.finish(name, out)
        };
        Ok(Lowering::Nodes(nodes))
    }

    /// Lower `ScatterND` node `np` (see the module notes).
    pub(super) fn lower_scatter_nd(
        &mut self,
        np: &'a NodeProto,
        name: &str,
        out: &str,
    ) -> Result<Lowering<'a>> {
        if let Some(r) = attr_s(np, "reduction").filter(|r| r != "none") {
            opaque!("attribute `reduction` = `{r}` (only `none` is lowered)");
        }
        if np.input.len() != 3 {
            opaque!("expects 3 inputs, has {}", np.input.len());
        }
        let idx_name = self.resolve(&np.input[1]);
        let Some(it) = self.statics.get(&idx_name) else {
            opaque!("the indices must be constant")
        };
        let idims: Vec<usize> = it.dims.iter().map(|&d| d as usize).collect();
        let vals = match tensor_values(it).and_then(Vals::ints) {
            Ok(v) => v,
            Err(e) => opaque!("indices: {e}"),
        };
        let (data, upd) = (self.resolve(&np.input[0]), self.resolve(&np.input[2]));
        let (ds, us) = match (
            self.runtime(&data, &format!("node `{name}`"))?,
            self.runtime(&upd, &format!("node `{name}`"))?,
        ) {
            (Ok(d), Ok(u)) => (d.shape, u.shape),
            (Err(why), _) | (_, Err(why)) => opaque!("{why}"),
        };
        let Some((&k, lead)) = idims.split_last() else {
            opaque!("indices must have rank >= 1")
        };
        if k == 0 || k > ds.len() {
            opaque!("index tuples of length {k} for data of rank {}", ds.len());
        }
        let rows: usize = ds[..k].iter().product();
        let inner: usize = ds[k..].iter().product();
        let n_upd: usize = lead.iter().product();
        let want: Vec<usize> = [lead, &ds[k..]].concat();
        if us != want {
            opaque!("updates have shape {us:?}, expected {want:?}");
        }
        // Row r of the output comes from data row r, or from update row u when u wrote it.
        let mut src: Vec<i64> = (0..rows as i64).collect();
        for (u, tuple) in vals.chunks(k).enumerate() {
            let mut at = 0i64;
            for (j, &i) in tuple.iter().enumerate() {
                let d = ds[j] as i64;
                let i = if i < 0 { i + d } else { i };
                if !(0..d).contains(&i) {
                    opaque!("index {tuple:?} is out of range for data of shape {ds:?}");
                }
                at = at * d + i;
            }
            src[at as usize] = (rows + u) as i64;
        }
        let map = match self.add_constant(super::proto::TensorProto {
            dims: vec![rows as i64],
            data_type: super::proto::dt::INT64,
            int64_data: src,
            name: format!("{out}#rows"),
            ..Default::default()
        })? {
            Ok(n) => n,
            Err(why) => opaque!("{why}"),
        };
        let mut e = Emit::new(name);
        let d2 = e.op(
            Op::Reshape {
                shape: vec![rows as i64, inner as i64],
            },
            &[&data],
        );
        let u2 = e.op(
            Op::Reshape {
                shape: vec![n_upd as i64, inner as i64],
            },
            &[&upd],
        );
        let all = e.op(Op::Concat { axis: 0 }, &[&d2, &u2]);
        let g = e.op(Op::Gather { axis: 0 }, &[&all, &map]);
        e.op(
            Op::Reshape {
                shape: ds.iter().map(|&d| d as i64).collect(),
            },
            &[&g],
        );
        Ok(Lowering::Nodes(e.finish(name, out)))
    }
}
