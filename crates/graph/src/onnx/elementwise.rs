//! The elementwise family of the ONNX front end: the op table's functions lowered one to one
//! (`crate::optable`: Add, Exp, Sigmoid, IsNaN, comparisons, logic, Sin, ...), and the
//! elementwise ops lowered to several IR ops or read with attributes (Clip's bounds, Mod,
//! (variadic Max / Min chains, exact GELU, Reciprocal, Pow with a constant exponent, Where,
//! Cast). Left out: Pow with a run-time exponent and the ops the table does not hold yet.

use super::*;
use crate::ir::{BinaryFn, UnaryFn};

/// The ONNX ops this family lowers (a node of any other type is not sent here).
pub(super) const OPS: &[&str] = &[
    "Max",
    "Min",
    "Gelu",
    "Pow",
    "Reciprocal",
    "Clip",
    "Mod",
    "Where",
    "Cast",
];

impl<'a> Importer<'a> {
    /// Lower node `np` (its op type is one of [`OPS`] or an op-table function).
    pub(super) fn lower_elementwise(
        &mut self,
        np: &'a NodeProto,
        name: &str,
        out: &str,
    ) -> Result<Lowering<'a>> {
        let op_type = np.op_type.as_str();
        let n_in = np.input.iter().filter(|s| !s.is_empty()).count();
        // The op table's functions (crate::optable): Add, Exp, Sigmoid, IsNaN, Less, ...
        let table_unary = if op_type == "IsInf" {
            let flag = |k: &str| attr_i(np, k).unwrap_or(1) != 0;
            match crate::optable::UnaryFn::is_inf(flag("detect_positive"), flag("detect_negative"))
            {
                Some(f) => Some(f),
                None => {
                    opaque!("IsInf with detect_positive=0 and detect_negative=0 (always false)")
                }
            }
        } else {
            crate::optable::UnaryFn::from_onnx(op_type)
        };
        if let Some(f) = table_unary {
            arity!(np, 1);
            return Ok(one(name, out, Op::Unary { f }, inputs!(self, np, [0])));
        }
        if let Some(f) = crate::optable::BinaryFn::from_onnx(op_type) {
            arity!(np, 2);
            return Ok(one(name, out, Op::Binary { f }, inputs!(self, np, [0, 1])));
        }
        Ok(match op_type {
            "Max" | "Min" => {
                if n_in != np.input.len() || n_in == 0 {
                    opaque!("expects 1 or more non-empty inputs");
                }
                let ins = inputs!(self, np, 0..n_in);
                if ins.len() == 1 {
                    return Ok(Lowering::Alias(ins[0].clone()));
                }
                let f = if op_type == "Max" {
                    BinaryFn::Max
                } else {
                    BinaryFn::Min
                };
                let mut v = vec![];
                let mut acc = ins[0].clone();
                for (k, b) in ins.iter().enumerate().skip(1) {
                    let last = k + 1 == ins.len();
                    let (nm, o) = if last {
                        (name.to_string(), out.to_string())
                    } else {
                        (format!("{name}#{k}"), format!("{out}#{op_type}{k}"))
                    };
                    v.push(Node {
                        name: nm,
                        op: Op::Binary { f },
                        inputs: vec![acc, b.clone()],
                        outputs: vec![o.clone()],
                    });
                    acc = o;
                }
                Lowering::Nodes(v)
            }
            "Gelu" => {
                arity!(np, 1);
                let approx = attr_s(np, "approximate").unwrap_or_else(|| "none".into());
                match approx.as_str() {
                    "tanh" => one(
                        name,
                        out,
                        Op::Unary { f: UnaryFn::Gelu },
                        inputs!(self, np, [0]),
                    ),
                    "none" => {
                        // Exact GELU, x · ½ · (1 + erf(x / √2)), as five IR nodes.
                        let x = inputs!(self, np, [0]);
                        let dtype = self.specs[&x[0]].dtype;
                        let t = |k: &str| format!("{out}#{k}");
                        let c = |k: &str, value: f64| Node {
                            name: format!("{name}#{k}"),
                            op: Op::Constant {
                                shape: vec![],
                                dtype,
                                value,
                            },
                            inputs: vec![],
                            outputs: vec![t(k)],
                        };
                        let b = |k: &str, op: Op, ins: Vec<String>, o: String| Node {
                            name: if o == out {
                                name.to_string()
                            } else {
                                format!("{name}#{k}")
                            },
                            op,
                            inputs: ins,
                            outputs: vec![o],
                        };
                        Lowering::Nodes(vec![
                            c("sqrt2", std::f64::consts::SQRT_2),
                            c("half", 0.5),
                            c("one", 1.0),
                            b(
                                "scaled",
                                Op::Binary { f: BinaryFn::Div },
                                vec![x[0].clone(), t("sqrt2")],
                                t("scaled"),
                            ),
                            b(
                                "erf",
                                Op::Unary { f: UnaryFn::Erf },
                                vec![t("scaled")],
                                t("erf"),
                            ),
                            b(
                                "onep",
                                Op::Binary { f: BinaryFn::Add },
                                vec![t("erf"), t("one")],
                                t("onep"),
                            ),
                            b(
                                "halfx",
                                Op::Binary { f: BinaryFn::Mul },
                                vec![x[0].clone(), t("half")],
                                t("halfx"),
                            ),
                            b(
                                "gelu",
                                Op::Binary { f: BinaryFn::Mul },
                                vec![t("halfx"), t("onep")],
                                out.to_string(),
                            ),
                        ])
                    }
                    other => opaque!("unknown GELU approximation `{other}`"),
                }
            }
            "Pow" => {
                arity!(np, 2);
                let exponent = match self.param(np, 1) {
                    Some(Ok((v, _))) if v.len() == 1 => v.f64_at(0),
                    Some(Ok(_)) => opaque!("the exponent is not a scalar"),
                    Some(Err(why)) => opaque!("the exponent must be a constant scalar: {why}"),
                    None => opaque!("no exponent"),
                };
                one(name, out, Op::Pow { exponent }, inputs!(self, np, [0]))
            }
            "Cast" => {
                arity!(np, 1);
                let to_code = attr_i(np, "to").unwrap_or(0);
                let Some(to) = i32::try_from(to_code).ok().and_then(dtype_of) else {
                    opaque!(
                        "casts to {}, which the IR cannot represent",
                        dt::name(i32::try_from(to_code).unwrap_or(-1))
                    )
                };
                one(name, out, Op::Cast { to }, inputs!(self, np, [0]))
            }
            "Where" => {
                arity!(np, 3);
                one(name, out, Op::Where, inputs!(self, np, [0, 1, 2]))
            }
            "Reciprocal" => {
                arity!(np, 1);
                let x = inputs!(self, np, [0]);
                let dtype = self.specs[&x[0]].dtype;
                let one_t = format!("{out}#one");
                Lowering::Nodes(vec![
                    Node {
                        name: format!("{name}#one"),
                        op: Op::Constant {
                            shape: vec![],
                            dtype,
                            value: 1.0,
                        },
                        inputs: vec![],
                        outputs: vec![one_t.clone()],
                    },
                    Node {
                        name: name.to_string(),
                        op: Op::Binary { f: BinaryFn::Div },
                        inputs: vec![one_t, x[0].clone()],
                        outputs: vec![out.to_string()],
                    },
                ])
            }
            "Clip" => {
                // Lower and upper bounds as table functions that keep NaN, as onnxruntime
                // does; bounds from inputs 1 and 2 (opset 11+) or attributes (before).
                let x = inputs!(self, np, [0]);
                let dtype = self.specs[&x[0]].dtype;
                let bound =
                    |this: &Self, i: usize, a: &str| -> std::result::Result<Option<f64>, String> {
                        if this.opset < 11 {
                            return Ok(attr_f(np, a));
                        }
                        match this.param(np, i) {
                            None => Ok(None),
                            Some(Ok((v, _))) if v.len() == 1 => Ok(Some(v.f64_at(0))),
                            Some(Ok(_)) => Err(format!("`{a}` must be one value")),
                            Some(Err(why)) => Err(format!("`{a}` must be constant: {why}")),
                        }
                    };
                let (lo, hi) = match (bound(self, 1, "min"), bound(self, 2, "max")) {
                    (Ok(lo), Ok(hi)) => (lo, hi),
                    (Err(why), _) | (_, Err(why)) => opaque!("{why}"),
                };
                // A missing bound is the type's lowest / highest value (the ONNX default):
                // for floats that clamps ±inf to ∓f32::MAX, as onnxruntime does.
                let float = matches!(dtype, DType::Fp32 | DType::Fp16 | DType::Bf16);
                let (lo, hi) = if float {
                    (
                        Some(lo.unwrap_or(f64::from(f32::MIN))),
                        Some(hi.unwrap_or(f64::from(f32::MAX))),
                    )
                } else {
                    (lo, hi)
                };
                let mut nodes = vec![];
                let mut cur = x[0].clone();
                for (k, (v, f)) in [
                    (lo, crate::optable::BinaryFn::ClipLow),
                    (hi, crate::optable::BinaryFn::ClipHigh),
                ]
                .into_iter()
                .enumerate()
                {
                    let Some(v) = v else { continue };
                    let c = format!("{out}#bound{k}");
                    nodes.push(Node {
                        name: c.clone(),
                        op: Op::Constant {
                            shape: vec![],
                            dtype,
                            value: v,
                        },
                        inputs: vec![],
                        outputs: vec![c.clone()],
                    });
                    let o = format!("{out}#clip{k}");
                    nodes.push(Node {
                        name: format!("{name}#{k}"),
                        op: Op::Binary { f },
                        inputs: vec![cur, c],
                        outputs: vec![o.clone()],
                    });
                    cur = o;
                }
                match nodes.last_mut() {
                    Some(last) => {
                        last.name = name.to_string();
                        last.outputs = vec![out.to_string()];
                        Lowering::Nodes(nodes)
                    }
                    None => Lowering::Alias(x[0].clone()),
                }
            }
            "Mod" => {
                arity!(np, 2);
                let f = if attr_i(np, "fmod").unwrap_or(0) != 0 {
                    crate::optable::BinaryFn::FMod
                } else {
                    crate::optable::BinaryFn::Mod
                };
                one(name, out, Op::Binary { f }, inputs!(self, np, [0, 1]))
            }
            _ => Lowering::Opaque(format!("op `{op_type}` has no IR equivalent")),
        })
    }
}
