//! Triton rendering of the same loop nest: one program per row, the row held in a block of
//! `BLOCK` = next power of two ≥ columns lanes with a mask; runs of elementwise nodes are
//! block expressions, row ops are `tl.max` / `tl.sum` over the block, per-row values are
//! scalars. One file per kernel, and `launcher.py`, whose `run(tensors)` allocates outputs
//! (torch tensors) and launches every kernel in program order; it refuses a program with
//! kernels this backend does not render (matmul and opaque kernels; see `manifest.json`).
//!
//! Arithmetic is Triton's f32 (sums are tree reductions in f32, `exp`/`log` are the
//! backend's), so results agree with the interpreter to a tolerance, not bit for bit;
//! `max`/`min` propagate NaN (the interpreter ignores it); `pow` other than 1 and 2 and
//! casts to fp8 are not rendered. Checked under `TRITON_INTERPRET=1` by
//! `tools/check_triton.py` (outside CI).

use super::{lower, Nest, Step};
use crate::exec::Bind;
use crate::fusion::{Kernel, Program};
use crate::ir::{DType, Op, TypedGraph};
use std::fmt::Write;

fn lit(v: f64) -> String {
    if v.is_nan() {
        "float('nan')".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "float('inf')"
        } else {
            "float('-inf')"
        }
        .into()
    } else {
        format!("{:?}", v as f32)
    }
}

fn unary(op: &Op, x: &str) -> Option<String> {
    Some(match op {
        Op::Pow { exponent } if *exponent == 2.0 => format!("({x} * {x})"),
        Op::Pow { exponent } if *exponent == 3.0 => format!("({x} * {x} * {x})"),
        Op::Pow { exponent } if *exponent == 1.0 => x.to_string(),
        Op::Cast { to } => match to {
            // Round to nearest even on the bits, as the interpreter and the C backend do.
            DType::Bf16 => format!("_bf16({x})"),
            DType::Fp16 => format!("{x}.to(tl.float16).to(tl.float32)"),
            DType::Int8 => {
                format!("tl.minimum(tl.maximum({x}, -128.0), 127.0).to(tl.int32).to(tl.float32)")
            }
            DType::Int4 => {
                format!("tl.minimum(tl.maximum({x}, -8.0), 7.0).to(tl.int32).to(tl.float32)")
            }
            DType::Int32 | DType::Int64 => format!("{x}.to(tl.int64).to(tl.float32)"),
            DType::Bool => format!("tl.where({x} != 0.0, 1.0, 0.0)"),
            DType::Fp32 | DType::Tf32 => x.to_string(),
            DType::Fp8 => return None,
        },
        Op::Quantize { scale, zero_point } => {
            // Round half to even: floor, then the tie goes to the even neighbour.
            let v = format!("({x} / {})", lit(*scale as f32 as f64));
            format!(
                "tl.minimum(tl.maximum(_rne({v}) + {}, -128.0), 127.0)",
                lit(*zero_point as f64)
            )
        }
        Op::Dequantize {
            scale, zero_point, ..
        } => format!(
            "(({x} - {}) * {})",
            lit(*zero_point as f64),
            lit(*scale as f32 as f64)
        ),
        Op::Broadcast { .. } => format!("({x} + tl.zeros([BLOCK], tl.float32))"),
        Op::Unary { f } => f.triton_expr(x),
        _ => return None,
    })
}

fn binary(op: &Op, a: &str, b: &str) -> Option<String> {
    Some(match op {
        Op::Binary { f } => f.triton_expr(a, b),
        _ => return None,
    })
}

/// Render kernel `k` (index `idx`) as a `@triton.jit` function, or say why not.
pub fn render_kernel(tg: &TypedGraph, k: &Kernel, idx: usize) -> Result<String, String> {
    let Nest {
        plans,
        elementwise,
        elems,
        cols,
        inputs,
        slot_of,
        steps,
        gathers,
        ..
    } = lower(tg, k)?;
    let l = cols;
    let input = |t: usize| slot_of[&t];
    let mut w = String::new();
    let args: Vec<String> = (0..inputs.len())
        .map(|i| format!("I{i}"))
        .chain((0..k.outputs.len()).map(|o| format!("O{o}")))
        .collect();
    let _ = writeln!(w, "@triton.jit");
    let _ = writeln!(
        w,
        "def tf_k{idx}({}, BLOCK: tl.constexpr):",
        args.join(", ")
    );
    let _ = writeln!(
        w,
        "    # kernel {} ({:?}), {} columns per row",
        k.name, k.kind, l
    );
    let _ = writeln!(w, "    r = tl.program_id(0).to(tl.int64)");
    let _ = writeln!(w, "    c = tl.arange(0, BLOCK)");
    if elementwise {
        let _ = writeln!(w, "    cn = tl.minimum({elems} - r * {l}, {l})");
    } else {
        let _ = writeln!(w, "    cn = {l}");
    }
    let _ = writeln!(w, "    mask = c < cn");
    for (pi, bi, shape, st) in &gathers {
        let d = *shape.last().unwrap_or(&1);
        let s_last = st.last().copied().unwrap_or(0);
        let _ = writeln!(w, "    g{pi}_{bi} = ((r * {l}) % {d}) * {s_last}");
        let _ = writeln!(w, "    rem = (r * {l}) // {d}");
        for dd in (0..shape.len().saturating_sub(1)).rev() {
            let _ = writeln!(
                w,
                "    g{pi}_{bi} += (rem % {}) * {}\n    rem = rem // {}",
                shape[dd].max(1),
                st[dd],
                shape[dd].max(1)
            );
        }
    }
    let operand = |pi: usize, bi: usize| -> Result<String, String> {
        let p = &plans[pi];
        Ok(match &p.binds[bi] {
            Bind::Internal { pos, per_row, .. } => {
                if *per_row {
                    format!("p{pos}")
                } else {
                    format!("v{pos}")
                }
            }
            Bind::Flat(t) => {
                let i = input(*t);
                if p.per_row {
                    format!("tl.load(I{i} + r)")
                } else {
                    format!("tl.load(I{i} + r * {l} + c, mask=mask, other=0.0)")
                }
            }
            Bind::Scalar(t) => format!("tl.load(I{})", input(*t)),
            Bind::PerRow(t) => format!("tl.load(I{} + r)", input(*t)),
            Bind::Gather(t, st) => {
                let s_last = st.last().copied().unwrap_or(0);
                format!(
                    "tl.load(I{} + g{pi}_{bi} + c * {s_last}, mask=mask, other=0.0)",
                    input(*t)
                )
            }
            Bind::Direct(t) => format!(
                "tl.load(I{} + r * {l} + c, mask=mask, other=0.0)",
                input(*t)
            ),
        })
    };
    for (pi, p) in plans.iter().enumerate() {
        let op = &tg.nodes[p.node].op;
        let name = &tg.nodes[p.node].name;
        let _ = writeln!(w, "    # {}: {}", name.replace('\n', " "), op.name());
        match steps[pi] {
            Step::Elem(_) | Step::PerRow => {
                let a: Vec<String> = (0..p.binds.len())
                    .map(|bi| operand(pi, bi))
                    .collect::<Result<_, _>>()?;
                let e = if a.len() == 1 {
                    unary(op, &a[0])
                } else {
                    binary(op, &a[0], &a[1])
                }
                .ok_or_else(|| format!("{} has no Triton form here", op.name()))?;
                let v = if p.per_row { "p" } else { "v" };
                let _ = writeln!(w, "    {v}{pi} = {e}");
            }
            Step::Row => {
                let x = operand(pi, 0)?;
                let param = |j: usize| match p.binds.get(j) {
                    Some(Bind::Direct(t)) | Some(Bind::Flat(t)) => {
                        Ok(format!("tl.load(I{} + c, mask=mask, other=0.0)", input(*t)))
                    }
                    _ => Err(format!("{} parameters must come from memory", op.name())),
                };
                let _ = writeln!(w, "    x = {x}");
                match op {
                    Op::ReduceSum { .. } => {
                        let _ = writeln!(w, "    p{pi} = tl.sum(tl.where(mask, x, 0.0), axis=0)");
                    }
                    Op::ReduceMean { .. } => {
                        let _ = writeln!(
                            w,
                            "    p{pi} = tl.sum(tl.where(mask, x, 0.0), axis=0) / {l}"
                        );
                    }
                    Op::ReduceMax { .. } => {
                        let _ = writeln!(
                            w,
                            "    p{pi} = tl.max(tl.where(mask, x, float('-inf')), axis=0)"
                        );
                    }
                    Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::LogSumExp { .. } => {
                        let _ = writeln!(
                            w,
                            "    m = tl.max(tl.where(mask, x, float('-inf')), axis=0)\n    ms = tl.where(m == float('-inf'), 0.0, m)\n    e = tl.where(mask, tl.exp(x - ms), 0.0)\n    s = tl.sum(e, axis=0)"
                        );
                        let _ = match op {
                            Op::Softmax { .. } => {
                                writeln!(w, "    v{pi} = tl.where(s > 0.0, e / s, 0.0)")
                            }
                            Op::LogSoftmax { .. } => {
                                writeln!(w, "    v{pi} = (x - ms) - tl.log(s)")
                            }
                            _ => writeln!(w, "    p{pi} = ms + tl.log(s)"),
                        };
                    }
                    Op::RmsNorm { eps } => {
                        let g = param(1)?;
                        let _ = writeln!(
                            w,
                            "    inv = 1.0 / tl.sqrt(tl.sum(tl.where(mask, x * x, 0.0), axis=0) / {l} + {})\n    v{pi} = x * inv * {g}",
                            lit(*eps)
                        );
                    }
                    Op::LayerNorm { eps } => {
                        let g = param(1)?;
                        let b = param(2)?;
                        let _ = writeln!(
                            w,
                            "    mean = tl.sum(tl.where(mask, x, 0.0), axis=0) / {l}\n    d = tl.where(mask, x - mean, 0.0)\n    inv = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / {l} + {})\n    v{pi} = d * inv * {g} + {b}",
                            lit(*eps)
                        );
                    }
                    other => return Err(format!("{} has no Triton form here", other.name())),
                }
            }
        }
        if let Some(o) = p.store {
            if p.per_row {
                let _ = writeln!(w, "    tl.store(O{o} + r, p{pi})");
            } else {
                let _ = writeln!(w, "    tl.store(O{o} + r * {l} + c, v{pi}, mask=mask)");
            }
        }
    }
    Ok(w)
}

const COMMON: &str = "import triton
import triton.language as tl


@triton.jit
def _rne(v):
    f = tl.floor(v)
    d = v - f
    odd = (f - 2.0 * tl.floor(f * 0.5)) != 0.0
    return tl.where(d > 0.5, f + 1.0, tl.where(d < 0.5, f, tl.where(odd, f + 1.0, f)))


@triton.jit
def _bf16(x):
    i = x.to(tl.int32, bitcast=True)
    r = (i + 0x7FFF + ((i >> 16) & 1)) & -65536
    return tl.where(x != x, x, r.to(tl.float32, bitcast=True))


@triton.jit
def _logaddexp(a, b):
    hi = tl.maximum(a, b)
    lo = tl.minimum(a, b)
    t = tl.exp(lo - hi)
    l1p = tl.where(t < 1e-4, t * (1.0 - 0.5 * t), tl.log(1.0 + t))
    return tl.where(a == b, a + 0.6931471805599453, hi + l1p)
";

const KERNEL_HEADER: &str = "import triton
import triton.language as tl

from tf_common import _bf16, _logaddexp, _rne  # noqa: F401

";

const LAUNCHER_HEADER: &str = "import importlib.util
import os
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)


def _load(name, fn):
    spec = importlib.util.spec_from_file_location(f\"tf_{abs(hash(_HERE))}_{name}\", os.path.join(_HERE, f\"{name}.py\"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, fn)

";

/// The files `codegen --target triton` writes: `tf_common.py` (shared `@triton.jit`
/// helpers), one `<kernel>.py` per rendered kernel with the fusion decisions as comments,
/// `launcher.py` (`run(tensors)` launches every kernel in program order, and refuses a
/// program with kernels left to the interpreter), and `manifest.json`.
pub fn files(p: &Program) -> Vec<(String, String)> {
    let tg = &p.graph;
    let mut out = vec![("tf_common.py".to_string(), COMMON.to_string())];
    let mut launch = vec![];
    let mut skipped = vec![];
    let mut manifest = vec![];
    for (i, k) in p.kernels.iter().enumerate() {
        match (render_kernel(tg, k, i), lower(tg, k)) {
            (Ok(s), Ok(n)) => {
                let mut src = String::from(KERNEL_HEADER);
                for line in super::decision_lines(p, &k.name) {
                    let _ = writeln!(src, "# {line}");
                }
                src.push_str(&s);
                out.push((format!("{}.py", k.name), src));
                let names = |ts: &[usize]| -> Vec<String> {
                    ts.iter().map(|&t| tg.tensors[t].name.clone()).collect()
                };
                let block = n.cols.next_power_of_two();
                launch.push(format!(
                    "    (_load({:?}, \"tf_k{i}\"), {}, {block}, {:?}, {:?}, {:?}),",
                    k.name,
                    n.rows,
                    names(&n.inputs),
                    names(&k.outputs),
                    k.outputs
                        .iter()
                        .map(|&t| tg.tensors[t].numel)
                        .collect::<Vec<_>>()
                ));
                manifest.push(serde_json::json!({
                    "kernel": k.name, "file": format!("{}.py", k.name), "function": format!("tf_k{i}"),
                    "grid": n.rows, "block": block, "inputs": names(&n.inputs), "outputs": names(&k.outputs),
                }));
            }
            (Err(why), _) | (_, Err(why)) => {
                skipped.push(serde_json::json!({"kernel": k.name, "reason": why}));
            }
        }
    }
    let mut launcher = String::from(LAUNCHER_HEADER);
    let _ = writeln!(
        launcher,
        "\n# (function, grid, BLOCK, input names, output names, output element counts)\nKERNELS = [\n{}\n]\nINTERPRETED = {:?}\n\n\ndef run(tensors):\n    \"\"\"Launch every kernel in program order; `tensors` maps names to flat float32 torch\n    tensors and receives the outputs.\"\"\"\n    if INTERPRETED:\n        raise NotImplementedError(f\"kernels not rendered for Triton: {{INTERPRETED}}\")\n    for fn, grid, block, ins, outs, sizes in KERNELS:\n        out = [torch.empty(n, dtype=torch.float32) for n in sizes]\n        fn[(grid,)](*[tensors[n] for n in ins], *out, BLOCK=block)\n        tensors.update(zip(outs, out))\n    return tensors",
        launch.join("\n"),
        skipped
            .iter()
            .map(|s| s["kernel"].as_str().unwrap_or("").to_string())
            .collect::<Vec<_>>()
    );
    out.push(("launcher.py".into(), launcher));
    let m = serde_json::json!({
        "schema_version": 1, "target": "triton", "kernels": manifest, "interpreted": skipped,
    });
    out.push((
        "manifest.json".into(),
        serde_json::to_string_pretty(&m).unwrap_or_default(),
    ));
    out
}
