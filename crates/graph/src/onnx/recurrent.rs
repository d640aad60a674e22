//! The recurrent family of the ONNX front end: `LSTM` and `GRU` unrolled at import into the
//! IR's own ops over the (static, after binding) sequence length. Per direction the input
//! projection of every time step is one MatMul against the transposed `W` (as onnxruntime
//! computes it), then each step is a MatMul of the previous hidden state against the
//! transposed `R`, gate Slices and the gate arithmetic (Sigmoid, Tanh, Mul, Add, Sub); the
//! hidden states are Concatenated into `Y`, the last ones into `Y_h` (and `Y_c`). Gate order
//! is ONNX's: LSTM `i, o, f, c`; GRU `z, r, h`, with `linear_before_reset` either way. `W`,
//! `R` and `B` must be constants (exporters write them as initializers); `initial_h` /
//! `initial_c` may be computed. Left out (the node stays opaque with the reason): peepholes
//! (`P`), `sequence_lens` shorter than the sequence, non-default `activations`, `clip` and
//! LSTM's `input_forget`.

use super::proto::{dt, NodeProto, TensorProto};
use super::{attr, attr_f, attr_i, attr_s, weight_values, Emit, Importer, Lowering};
use crate::error::Result;
use crate::ir::{BinaryFn, Op, UnaryFn};

/// A constant's dims and values.
type Dense = (Vec<usize>, Vec<f32>);

/// Which recurrent op.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Cell {
    Lstm,
    Gru,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }
}

/// `m` ([rows, cols], row-major) transposed.
fn transposed(m: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0; m.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = m[r * cols + c];
        }
    }
    t
}

impl<'a> Importer<'a> {
    /// A constant tensor made at import, materialized as a Weight (or Constant) node.
    fn new_constant(
        &mut self,
        name: String,
        dims: &[usize],
        data: Vec<f32>,
    ) -> Result<std::result::Result<String, String>> {
        self.add_constant(TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: dt::FLOAT,
            float_data: data,
            name,
            ..Default::default()
        })
    }

    /// The data and dims of constant input `i` of `np`.
    fn constant_input(
        &self,
        np: &NodeProto,
        i: usize,
    ) -> Option<std::result::Result<Dense, String>> {
        let raw = np.input.get(i).filter(|s| !s.is_empty())?;
        let n = self.resolve(raw);
        Some(match self.statics.get(&n) {
            Some(t) => weight_values(t).map(|v| (t.dims.iter().map(|&d| d as usize).collect(), v)),
            None => Err(format!(
                "input {i} (`{raw}`) must be a constant (an initializer)"
            )),
        })
    }

    /// Unroll `LSTM` / `GRU` node `np` (see the module notes).
    pub(super) fn lower_recurrent(
        &mut self,
        np: &'a NodeProto,
        name: &str,
        cell: Cell,
    ) -> Result<Lowering<'a>> {
        let g = cell.gates();
        let Some(h) = attr_i(np, "hidden_size")
            .filter(|h| *h > 0)
            .map(|h| h as usize)
        else {
            opaque!("attribute `hidden_size` is missing")
        };
        if attr(np, "activations").is_some() {
            opaque!("attribute `activations` (only the default activations are unrolled)");
        }
        if attr_f(np, "clip").is_some() {
            opaque!("attribute `clip` is not supported");
        }
        if cell == Cell::Lstm && attr_i(np, "input_forget").unwrap_or(0) != 0 {
            opaque!("attribute `input_forget` = 1 is not supported");
        }
        if cell == Cell::Lstm && np.input.get(7).is_some_and(|s| !s.is_empty()) {
            opaque!("peephole weights (input `P`) are not supported");
        }
        let lbr = cell == Cell::Gru && attr_i(np, "linear_before_reset").unwrap_or(0) != 0;
        let dirs: Vec<bool> = match attr_s(np, "direction").as_deref().unwrap_or("forward") {
            "forward" => vec![false],
            "reverse" => vec![true],
            "bidirectional" => vec![false, true],
            d => opaque!("attribute `direction` = `{d}`"),
        };
        let nd = dirs.len();
        let layout = attr_i(np, "layout").unwrap_or(0);
        if layout != 0 && layout != 1 {
            opaque!("attribute `layout` = {layout}");
        }
        let Some(x_raw) = np.input.first().filter(|s| !s.is_empty()) else {
            opaque!("input X is missing")
        };
        let x = self.resolve(x_raw);
        let xs = match self.runtime(&x, &format!("node `{name}`"))? {
            Ok(s) => s.shape,
            Err(why) => opaque!("{why}"),
        };
        if xs.len() != 3 {
            opaque!("X has rank {}, expected 3", xs.len());
        }
        let (s, b, i) = if layout == 0 {
            (xs[0], xs[1], xs[2])
        } else {
            (xs[1], xs[0], xs[2])
        };
        let (w, r, bias) = match (self.constant_input(np, 1), self.constant_input(np, 2)) {
            (Some(Ok(w)), Some(Ok(r))) => {
                let bias = match self.constant_input(np, 3) {
                    None => None,
                    Some(Ok(b)) => Some(b),
                    Some(Err(why)) => opaque!("B: {why}"),
                };
                (w, r, bias)
            }
            (Some(Err(why)), _) | (_, Some(Err(why))) => opaque!("{why}"),
            _ => opaque!("W and R are required"),
        };
        if w.0 != [nd, g * h, i] || r.0 != [nd, g * h, h] {
            opaque!(
                "W {:?} / R {:?} do not match {nd} direction(s), {g} gates, hidden {h}, input {i}",
                w.0,
                r.0
            );
        }
        if let Some((d, _)) = &bias {
            if *d != [nd, 2 * g * h] {
                opaque!("B {d:?} does not match [{nd}, {}]", 2 * g * h);
            }
        }
        if let Some(l) = np.input.get(4).filter(|s| !s.is_empty()) {
            match self.constant_input(np, 4) {
                Some(Ok((_, v))) if v.iter().all(|&n| n as usize == s) => {}
                _ => opaque!("input `sequence_lens` (`{l}`) is not the whole sequence ({s}) for every batch entry"),
            }
        }
        let mut e = Emit::new(name);
        // X as [S, B, I].
        let x_sbi = if layout == 0 {
            x.clone()
        } else {
            e.op(
                Op::Transpose {
                    perm: vec![1, 0, 2],
                },
                &[&x],
            )
        };
        let initial = |this: &mut Self,
                       e: &mut Emit,
                       idx: usize,
                       what: &str|
         -> Result<std::result::Result<Option<String>, String>> {
            let Some(raw) = np.input.get(idx).filter(|s| !s.is_empty()) else {
                return Ok(Ok(None));
            };
            let t = this.resolve(raw);
            match this.runtime(&t, &format!("node `{name}`"))? {
                Ok(spec) => {
                    let want = if layout == 0 { [nd, b, h] } else { [b, nd, h] };
                    if spec.shape != want {
                        return Ok(Err(format!(
                            "{what} has shape {:?}, expected {want:?}",
                            spec.shape
                        )));
                    }
                    Ok(Ok(Some(if layout == 0 {
                        t
                    } else {
                        e.op(
                            Op::Transpose {
                                perm: vec![1, 0, 2],
                            },
                            &[&t],
                        )
                    })))
                }
                Err(why) => Ok(Err(why)),
            }
        };
        let h0 = match initial(self, &mut e, 5, "initial_h")? {
            Ok(v) => v,
            Err(why) => opaque!("{why}"),
        };
        let c0 = if cell == Cell::Lstm {
            match initial(self, &mut e, 6, "initial_c")? {
                Ok(v) => v,
                Err(why) => opaque!("{why}"),
            }
        } else {
            None
        };
        let zeros = match self.new_constant(format!("{name}#zeros"), &[b, h], vec![0.0; b * h])? {
            Ok(z) => z,
            Err(why) => opaque!("{why}"),
        };
        let one = match self.new_constant(format!("{name}#one"), &[], vec![1.0])? {
            Ok(z) => z,
            Err(why) => opaque!("{why}"),
        };
        let gh = g * h;
        let mut ys: Vec<Vec<String>> = vec![]; // per direction, H_t for t = 0..S
        let mut last_h = vec![];
        let mut last_c = vec![];
        for (d, &reverse) in dirs.iter().enumerate() {
            let wt = transposed(&w.1[d * gh * i..(d + 1) * gh * i], gh, i);
            let rt = transposed(&r.1[d * gh * h..(d + 1) * gh * h], gh, h);
            let (wb, rb) = match &bias {
                Some((_, v)) => (
                    v[d * 2 * gh..d * 2 * gh + gh].to_vec(),
                    v[d * 2 * gh + gh..(d + 1) * 2 * gh].to_vec(),
                ),
                None => (vec![0.0; gh], vec![0.0; gh]),
            };
            // The bias added to the input projection: Wb + Rb for every gate, except GRU's
            // h gate with linear_before_reset, whose Rb stays inside r ⊙ (...).
            let mut in_bias: Vec<f32> = wb.iter().zip(&rb).map(|(a, c)| a + c).collect();
            if cell == Cell::Gru {
                in_bias[2 * h..3 * h].copy_from_slice(&wb[2 * h..3 * h]);
            }
            let names = (
                format!("{name}#W{d}"),
                format!("{name}#R{d}"),
                format!("{name}#B{d}"),
                format!("{name}#Rbh{d}"),
            );
            let wt = match self.new_constant(names.0, &[i, gh], wt)? {
                Ok(n) => n,
                Err(why) => opaque!("{why}"),
            };
            let rt = match self.new_constant(names.1, &[h, gh], rt)? {
                Ok(n) => n,
                Err(why) => opaque!("{why}"),
            };
            let bn = match self.new_constant(names.2, &[gh], in_bias)? {
                Ok(n) => n,
                Err(why) => opaque!("{why}"),
            };
            let rbh = if cell == Cell::Gru {
                match self.new_constant(names.3, &[h], rb[2 * h..3 * h].to_vec())? {
                    Ok(n) => Some(n),
                    Err(why) => opaque!("{why}"),
                }
            } else {
                None
            };
            // Input projections of every step at once: [S, B, G·H].
            let xw = e.op(Op::MatMul, &[&x_sbi, &wt]);
            let xw = e.op(Op::Binary { f: BinaryFn::Add }, &[&xw, &bn]);
            let take_state = |e: &mut Emit, init: &Option<String>| match init {
                Some(t) => {
                    let s = e.slice(t, 0, d, d + 1);
                    e.reshape(&s, &[b, h])
                }
                None => zeros.clone(),
            };
            let mut hp = take_state(&mut e, &h0);
            let mut cp = take_state(&mut e, &c0);
            let mut hs = vec![String::new(); s];
            let steps: Vec<usize> = if reverse {
                (0..s).rev().collect()
            } else {
                (0..s).collect()
            };
            for t in steps {
                let xt = e.slice(&xw, 0, t, t + 1);
                let xt = e.reshape(&xt, &[b, gh]);
                let hr = e.op(Op::MatMul, &[&hp, &rt]);
                let gate = |e: &mut Emit, src: &str, k: usize| e.slice(src, 1, k * h, (k + 1) * h);
                match cell {
                    Cell::Lstm => {
                        let sum = e.op(Op::Binary { f: BinaryFn::Add }, &[&xt, &hr]);
                        let (gi, go, gf, gc) = (
                            gate(&mut e, &sum, 0),
                            gate(&mut e, &sum, 1),
                            gate(&mut e, &sum, 2),
                            gate(&mut e, &sum, 3),
                        );
                        let it = e.op(
                            Op::Unary {
                                f: UnaryFn::Sigmoid,
                            },
                            &[&gi],
                        );
                        let ot = e.op(
                            Op::Unary {
                                f: UnaryFn::Sigmoid,
                            },
                            &[&go],
                        );
                        let ft = e.op(
                            Op::Unary {
                                f: UnaryFn::Sigmoid,
                            },
                            &[&gf],
                        );
                        let ct_new = e.op(Op::Unary { f: UnaryFn::Tanh }, &[&gc]);
                        let keep = e.op(Op::Binary { f: BinaryFn::Mul }, &[&ft, &cp]);
                        let add = e.op(Op::Binary { f: BinaryFn::Mul }, &[&it, &ct_new]);
                        cp = e.op(Op::Binary { f: BinaryFn::Add }, &[&keep, &add]);
                        let tc = e.op(Op::Unary { f: UnaryFn::Tanh }, &[&cp]);
                        hp = e.op(Op::Binary { f: BinaryFn::Mul }, &[&ot, &tc]);
                    }
                    Cell::Gru => {
                        let (xz, xr, xh) = (
                            gate(&mut e, &xt, 0),
                            gate(&mut e, &xt, 1),
                            gate(&mut e, &xt, 2),
                        );
                        let (hz, hrr) = (gate(&mut e, &hr, 0), gate(&mut e, &hr, 1));
                        let sz = e.op(Op::Binary { f: BinaryFn::Add }, &[&xz, &hz]);
                        let zt = e.op(
                            Op::Unary {
                                f: UnaryFn::Sigmoid,
                            },
                            &[&sz],
                        );
                        let sr = e.op(Op::Binary { f: BinaryFn::Add }, &[&xr, &hrr]);
                        let rt_g = e.op(
                            Op::Unary {
                                f: UnaryFn::Sigmoid,
                            },
                            &[&sr],
                        );
                        let inner = if lbr {
                            // r ⊙ (H·Rhᵀ + Rbh)
                            let hh = gate(&mut e, &hr, 2);
                            let hb = e.op(
                                Op::Binary { f: BinaryFn::Add },
                                &[&hh, rbh.as_deref().unwrap_or("")],
                            );
                            e.op(Op::Binary { f: BinaryFn::Mul }, &[&rt_g, &hb])
                        } else {
                            // (r ⊙ H)·Rhᵀ + Rbh
                            let rh = e.op(Op::Binary { f: BinaryFn::Mul }, &[&rt_g, &hp]);
                            let rh_h = e.slice(&rt, 1, 2 * h, 3 * h);
                            let m = e.op(Op::MatMul, &[&rh, &rh_h]);
                            e.op(
                                Op::Binary { f: BinaryFn::Add },
                                &[&m, rbh.as_deref().unwrap_or("")],
                            )
                        };
                        let pre = e.op(Op::Binary { f: BinaryFn::Add }, &[&xh, &inner]);
                        let ht_new = e.op(Op::Unary { f: UnaryFn::Tanh }, &[&pre]);
                        // H = (1 − z) ⊙ h̃ + z ⊙ H_prev
                        let omz = e.op(Op::Binary { f: BinaryFn::Sub }, &[&one, &zt]);
                        let a = e.op(Op::Binary { f: BinaryFn::Mul }, &[&omz, &ht_new]);
                        let c = e.op(Op::Binary { f: BinaryFn::Mul }, &[&zt, &hp]);
                        hp = e.op(Op::Binary { f: BinaryFn::Add }, &[&a, &c]);
                    }
                }
                hs[t] = hp.clone();
            }
            last_h.push(hp);
            last_c.push(cp);
            ys.push(hs);
        }
        let outs: Vec<&str> = np.output.iter().map(String::as_str).collect();
        let used = |k: usize| outs.get(k).is_some_and(|o| !o.is_empty());
        // Y: [S, D, B, H] (layout 0) or [B, S, D, H] (layout 1).
        if used(0) {
            let mut steps = vec![];
            for t in 0..s {
                let per_dir: Vec<String> = ys
                    .iter()
                    .map(|dir| e.reshape(&dir[t].clone(), &[1, 1, b, h]))
                    .collect();
                let refs: Vec<&str> = per_dir.iter().map(String::as_str).collect();
                steps.push(if nd == 1 {
                    per_dir[0].clone()
                } else {
                    e.op(Op::Concat { axis: 1 }, &refs)
                });
            }
            let refs: Vec<&str> = steps.iter().map(String::as_str).collect();
            let y = if s == 1 {
                e.reshape(refs[0], &[1, nd, b, h])
            } else {
                e.op(Op::Concat { axis: 0 }, &refs)
            };
            if layout == 1 {
                e.op(
                    Op::Transpose {
                        perm: vec![2, 0, 1, 3],
                    },
                    &[&y],
                );
            } else {
                e.reshape(&y, &[s, nd, b, h]);
            }
            e.name_last(outs[0]);
        }
        let finals = |e: &mut Emit, states: &[String], k: usize| {
            if !used(k) {
                return;
            }
            let parts: Vec<String> = states.iter().map(|t| e.reshape(t, &[1, b, h])).collect();
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            let all = if nd == 1 {
                parts[0].clone()
            } else {
                e.op(Op::Concat { axis: 0 }, &refs)
            };
            if layout == 1 {
                e.op(
                    Op::Transpose {
                        perm: vec![1, 0, 2],
                    },
                    &[&all],
                );
            } else {
                e.reshape(&all, &[nd, b, h]);
            }
            e.name_last(outs[k]);
        };
        finals(&mut e, &last_h, 1);
        if cell == Cell::Lstm {
            finals(&mut e, &last_c, 2);
        }
        Ok(Lowering::Nodes(e.nodes))
    }
}
