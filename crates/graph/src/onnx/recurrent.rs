//! The recurrent family of the ONNX front end: `LSTM` and `GRU` as one MatMul (+ bias) that
//! projects every step of every direction at once (against the side-by-side transposed `W`
//! of the directions, as onnxruntime computes it) and one [`Op::Recurrence`] that runs the
//! steps (the recurrent product with the transposed `R` and the cell's gates, in the
//! executor's `recurrence` module); `Y` is the first `S` rows of its output, `Y_h` (and
//! `Y_c`) the rows after them. Gate order is ONNX's: LSTM `i, o, f, c`; GRU `z, r, h`, with
//! `linear_before_reset` either way. `W`, `R` and `B` must be constants (exporters write them
//! as initializers); `initial_h` / `initial_c` may be computed. Left out (the node stays
//! opaque with the reason): peepholes (`P`), `sequence_lens` shorter than the sequence,
//! non-default `activations`, `clip` and LSTM's `input_forget`.

use super::proto::{dt, NodeProto, TensorProto};
use super::{attr, attr_f, attr_i, attr_s, weight_values, Emit, Importer, Lowering};
use crate::error::Result;
use crate::ir::{BinaryFn, Op, RecurrentCell, RecurrentDirection};

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
        let (gh, dgh) = (g * h, nd * g * h);
        // Every direction's W transposed, side by side ([I, D·G·H]), so that one MatMul
        // projects every step for every direction; its bias Wb + Rb, except GRU's h gate,
        // whose Rb stays inside the cell (r ⊙ (...)).
        let mut w_all = vec![0f32; i * dgh];
        let mut bias_all = vec![0f32; dgh];
        let mut r_all = Vec::with_capacity(nd * h * gh);
        let mut rbh_all = vec![0f32; nd * h];
        for d in 0..nd {
            let wt = transposed(&w.1[d * gh * i..(d + 1) * gh * i], gh, i);
            for row in 0..i {
                w_all[row * dgh + d * gh..row * dgh + (d + 1) * gh]
                    .copy_from_slice(&wt[row * gh..(row + 1) * gh]);
            }
            r_all.extend(transposed(&r.1[d * gh * h..(d + 1) * gh * h], gh, h));
            let (wb, rb) = match &bias {
                Some((_, v)) => (
                    &v[d * 2 * gh..d * 2 * gh + gh],
                    &v[d * 2 * gh + gh..(d + 1) * 2 * gh],
                ),
                None => (&[][..], &[][..]),
            };
            if !wb.is_empty() {
                for k in 0..gh {
                    bias_all[d * gh + k] = if cell == Cell::Gru && k >= 2 * h {
                        wb[k]
                    } else {
                        wb[k] + rb[k]
                    };
                }
                if cell == Cell::Gru {
                    rbh_all[d * h..(d + 1) * h].copy_from_slice(&rb[2 * h..3 * h]);
                }
            }
        }
        let constant = |this: &mut Self, what: &str, dims: &[usize], v: Vec<f32>| {
            this.new_constant(format!("{name}#{what}"), dims, v)
        };
        let (wn, bn, rn) = match (
            constant(self, "W", &[i, dgh], w_all)?,
            constant(self, "B", &[dgh], bias_all)?,
            constant(self, "R", &[nd, h, gh], r_all)?,
        ) {
            (Ok(w), Ok(b), Ok(r)) => (w, b, r),
            (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => opaque!("{why}"),
        };
        let state = |this: &mut Self, given: Option<String>, what: &str| match given {
            Some(t) => Ok(Ok(t)),
            None => constant(this, what, &[nd, b, h], vec![0.0; nd * b * h]),
        };
        let h0 = match state(self, h0, "h0")? {
            Ok(t) => t,
            Err(why) => opaque!("{why}"),
        };
        let extra = match cell {
            Cell::Lstm => state(self, c0, "c0")?,
            Cell::Gru => constant(self, "Rbh", &[nd, h], rbh_all)?,
        };
        let extra = match extra {
            Ok(t) => t,
            Err(why) => opaque!("{why}"),
        };
        let outs: Vec<&str> = np.output.iter().map(String::as_str).collect();
        let used = |k: usize| outs.get(k).is_some_and(|o| !o.is_empty());
        let finals = used(1) || (cell == Cell::Lstm && used(2));
        let lbr = attr_i(np, "linear_before_reset").unwrap_or(0) != 0;
        // Input projections of every step and direction at once: [S, B, D·G·H].
        let xw = e.op(Op::MatMul, &[&x_sbi, &wn]);
        let xw = e.op(Op::Binary { f: BinaryFn::Add }, &[&xw, &bn]);
        let z = e.op(
            Op::Recurrence {
                cell: match cell {
                    Cell::Lstm => RecurrentCell::Lstm,
                    Cell::Gru if lbr => RecurrentCell::GruLinearBeforeReset,
                    Cell::Gru => RecurrentCell::Gru,
                },
                direction: match dirs[..] {
                    [false] => RecurrentDirection::Forward,
                    [true] => RecurrentDirection::Reverse,
                    _ => RecurrentDirection::Bidirectional,
                },
                finals,
            },
            &[&xw, &rn, &h0, &extra],
        );
        // Y: [S, D, B, H] (layout 0) or [B, S, D, H] (layout 1): the output's first S rows.
        if used(0) {
            let y = if finals {
                e.slice(&z, 0, 0, s)
            } else {
                z.clone()
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
        // Y_h and Y_c: rows S and S + 1, as [D, B, H] (layout 0) or [B, D, H] (layout 1).
        let last = |e: &mut Emit, row: usize, k: usize| {
            if !used(k) {
                return;
            }
            let one = e.slice(&z, 0, row, row + 1);
            let all = e.reshape(&one, &[nd, b, h]);
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
        last(&mut e, s, 1);
        if cell == Cell::Lstm {
            last(&mut e, s + 1, 2);
        }
        Ok(Lowering::Nodes(e.nodes))
    }
}
