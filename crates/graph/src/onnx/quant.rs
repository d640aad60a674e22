//! The quantization family of the ONNX front end: QuantizeLinear / DequantizeLinear with a
//! per-tensor constant scale and an int8 zero point. Left out: per-axis and blocked
//! quantization, UINT8 tensors.

use super::*;

/// The ONNX ops this family lowers (a node of any other type is not sent here).
pub(super) const OPS: &[&str] = &["QuantizeLinear", "DequantizeLinear"];

impl<'a> Importer<'a> {
    /// Lower node `np` (its op type is one of [`OPS`]).
    pub(super) fn lower_quant(
        &mut self,
        np: &'a NodeProto,
        name: &str,
        out: &str,
    ) -> Result<Lowering<'a>> {
        let op_type = np.op_type.as_str();
        Ok(match op_type {
            "QuantizeLinear" | "DequantizeLinear" => {
                if np.input.len() < 2 || np.input.len() > 3 {
                    opaque!("expects 2 or 3 inputs");
                }
                let scale_code;
                let scale = match self.param(np, 1) {
                    Some(Ok((v, code))) if v.len() == 1 => {
                        scale_code = code;
                        v.f64_at(0)
                    }
                    Some(Ok(_)) => opaque!("per-axis or blocked quantization (the scale is not a scalar); the IR quantizes per tensor"),
                    Some(Err(why)) => opaque!("the scale must be a constant scalar: {why}"),
                    None => opaque!("no scale"),
                };
                let zero_point = match self.param(np, 2) {
                    Some(Ok((v, code))) if v.len() == 1 => {
                        if code != dt::INT8 {
                            opaque!(
                                "the zero point has data type {}; the IR quantizes to int8 only",
                                dt::name(code)
                            );
                        }
                        v.f64_at(0) as i64
                    }
                    Some(Ok(_)) => {
                        opaque!("the zero point is not a scalar; the IR quantizes per tensor")
                    }
                    Some(Err(why)) => opaque!("the zero point must be a constant scalar: {why}"),
                    None => {
                        let out_dt = attr_i(np, "output_dtype").unwrap_or(0);
                        if op_type == "QuantizeLinear" && out_dt != i64::from(dt::INT8) {
                            opaque!("no zero point, so the output is uint8; the IR quantizes to int8 only");
                        }
                        0
                    }
                };
                let x = inputs!(self, np, [0]);
                if op_type == "QuantizeLinear" {
                    one(name, out, Op::Quantize { scale, zero_point }, x)
                } else {
                    let Some(to) = dtype_of(scale_code) else {
                        opaque!(
                            "the scale has data type {}, which the IR cannot represent",
                            dt::name(scale_code)
                        )
                    };
                    one(
                        name,
                        out,
                        Op::Dequantize {
                            scale,
                            zero_point,
                            to,
                        },
                        x,
                    )
                }
            }
            _ => Lowering::Opaque(format!("op `{op_type}` has no IR equivalent")),
        })
    }
}
