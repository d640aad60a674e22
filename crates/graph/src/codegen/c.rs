//! C rendering of elementwise and row kernels (see the module above for the loop nest).
//!
//! Each kernel becomes `void tf_k<i>(const float *const *in, float *const *out, int64_t r0,
//! int64_t r1, int64_t rn, float *scratch)`, computing rows `[r0, r1)` of its iteration
//! domain of `rn` rows (row kernels read ahead into row `r1` when it exists; the count is
//! an argument, not a constant, so layers that differ only in rows share one function): `in`
//! lists the kernel's input tensors in [`CKernel::inputs`] order, `out` its outputs in
//! [`crate::fusion::Kernel::outputs`] order, `scratch` holds [`CKernel::scratch_floats`]
//! floats per calling thread. Elementwise kernels are re-blocked into rows of at most
//! [`ELEMENTWISE_ROW`] elements (a divisor of the last dim when an input is broadcast) so
//! that rows can be spread over threads and the inner loop vectorizes. Row kernels keep
//! their rows (the reduced axis is the last one). Arithmetic follows the interpreter: sums
//! of reductions and norms in double, `max`/`min` as its maxNum/minNum, casts rounding as it
//! does; `exp`, `log`, `log1p`, `logaddexp` use the prelude's polynomials (a few ulp from
//! libm, measured in docs/graph.md) and `tanh`, `erf`, `pow` call libm.

use super::{lower, Nest, Step};
use crate::exec::Bind;
use crate::fusion::{Kernel, Program};
use crate::ir::{DType, Op, TypedGraph};
use std::fmt::Write;

/// The prelude every generated file starts with (float helpers, see the file).
pub const PRELUDE: &str = include_str!("prelude.h");

pub use super::ELEMENTWISE_ROW;

/// One rendered kernel.
#[derive(Debug, Clone)]
pub struct CKernel {
    /// Index of the kernel in its program.
    pub kernel: usize,
    /// The C function's name.
    pub symbol: String,
    /// Rows of the loop nest (the function's `r` range is `0..rows`).
    pub rows: usize,
    /// Columns per row.
    pub cols: usize,
    /// Elements of the iteration domain (elementwise kernels: the last row may be short).
    pub elems: usize,
    /// Tensor ids in the order of the `in` argument.
    pub inputs: Vec<usize>,
    /// Tensor ids in the order of the `out` argument (the kernel's outputs; for a matmul
    /// kernel's compiled epilogue, those besides the product).
    pub outputs: Vec<usize>,
    /// Floats of scratch one thread needs.
    pub scratch_floats: usize,
    /// The function's source (without the prelude).
    pub source: String,
}

/// A program's rendered kernels and the kernels left to the interpreter, with the reason.
#[derive(Debug, Clone, Default)]
pub struct CProgram {
    /// Rendered kernels.
    pub kernels: Vec<CKernel>,
    /// `(kernel index, reason)` for each kernel not rendered.
    pub skipped: Vec<(usize, String)>,
}

impl CProgram {
    /// The whole translation unit: prelude, then every kernel.
    pub fn source(&self) -> String {
        let mut s = String::from(PRELUDE);
        for k in &self.kernels {
            s.push('\n');
            s.push_str(&k.source);
        }
        s
    }
}

/// The files `tensorforge codegen --target c` writes, as `(file name, contents)`:
/// `prelude.h`; one `<kernel>.c` per rendered kernel (including the prelude, with the
/// fusion decisions that formed it as a comment; a matmul kernel's file holds its compiled
/// epilogue, which reads the product from memory, as the JIT renders it); `program.c`, the
/// translation unit the JIT compiles; and `manifest.json`, the launcher's contract (per
/// kernel: symbol, rows, columns, input and output tensor names, scratch floats; and the
/// kernels left to the interpreter with the reason).
pub fn files(p: &Program) -> Vec<(String, String)> {
    let cp = render_program_with(p, true);
    let tg = &p.graph;
    let mut out = vec![("prelude.h".to_string(), PRELUDE.to_string())];
    let mut manifest = vec![];
    for ck in &cp.kernels {
        let k = &p.kernels[ck.kernel];
        let mut head = format!(
            "/* TensorForge kernel {} ({:?}), {} rows x {} columns.\n",
            k.name, k.kind, ck.rows, ck.cols
        );
        if k.kind == crate::fusion::KernelKind::Matmul {
            head.push_str(
                " * Its elementwise epilogue: the product is computed by the GEMM and read from memory.\n",
            );
        }
        for line in super::decision_lines(p, &k.name) {
            head.push_str(&format!(" * {}\n", line.replace("*/", "* /")));
        }
        head.push_str(" */\n#include \"prelude.h\"\n\n");
        out.push((format!("{}.c", k.name), format!("{head}{}", ck.source)));
        let names = |ts: &[usize]| -> Vec<String> {
            ts.iter().map(|&t| tg.tensors[t].name.clone()).collect()
        };
        manifest.push(serde_json::json!({
            "kernel": k.name,
            "symbol": ck.symbol,
            "rows": ck.rows,
            "cols": ck.cols,
            "elements": ck.elems,
            "inputs": names(&ck.inputs),
            "outputs": names(&k.outputs),
            "scratch_floats": ck.scratch_floats,
        }));
    }
    out.push(("program.c".to_string(), cp.source()));
    let skipped = super::interpreted_json(p, &cp.skipped);
    let m = serde_json::json!({
        "schema_version": 1,
        "target": "c",
        "signature": "void f(const float *const *in, float *const *out, int64_t r0, int64_t r1, int64_t rn, float *scratch)",
        "kernels": manifest,
        "interpreted": skipped,
    });
    out.push((
        "manifest.json".to_string(),
        serde_json::to_string_pretty(&m).unwrap_or_default(),
    ));
    out
}

/// Render every kernel of `p` that has a C form.
pub fn render_program(p: &Program) -> CProgram {
    render_program_with(p, false)
}

/// [`render_program`]; with `epilogues`, a matmul kernel's elementwise epilogue is rendered
/// too, as a kernel that reads the product from memory
/// ([`crate::fusion::matmul_epilogue`]): the JIT runs the product with faer and the
/// epilogue compiled.
pub fn render_program_with(p: &Program, epilogues: bool) -> CProgram {
    let mut out = CProgram::default();
    for (i, k) in p.kernels.iter().enumerate() {
        let epi = if epilogues {
            crate::fusion::matmul_epilogue(&p.graph, k)
        } else {
            None
        };
        match render_kernel(&p.graph, epi.as_ref().unwrap_or(k), i) {
            Ok(c) => out.kernels.push(c),
            Err(why) => out.skipped.push((i, why)),
        }
    }
    out
}

/// A float as a C literal that parses to the same f32.
pub(crate) fn lit(v: f32) -> String {
    if v.is_nan() {
        "NAN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "INFINITY" } else { "(-INFINITY)" }.into()
    } else {
        let s = format!("{v:?}");
        if s.contains(['.', 'e', 'E']) {
            format!("{s}f")
        } else {
            format!("{s}.0f")
        }
    }
}

pub(crate) fn unary_expr(op: &Op, x: &str) -> Option<String> {
    Some(match op {
        Op::Pow { exponent } => {
            let e = *exponent as f32;
            if e == 2.0 {
                format!("({x} * {x})")
            } else if e == 3.0 {
                // GELU's x³: two multiplies, as the interpreter computes it (powf is a call).
                format!("({x} * {x} * {x})")
            } else if e == 1.0 {
                x.to_string()
            } else {
                format!("powf({x}, {})", lit(e))
            }
        }
        Op::Cast { to } => match to {
            DType::Bf16 => format!("tf_bf16({x})"),
            DType::Fp16 => format!("tf_f16({x})"),
            DType::Int8 => format!("fminf(fmaxf(truncf({x}), -128.0f), 127.0f)"),
            DType::Int4 => format!("fminf(fmaxf(truncf({x}), -8.0f), 7.0f)"),
            DType::Int32 => format!("fminf(fmaxf(truncf({x}), -2147483648.0f), 2147483648.0f)"),
            DType::Int64 => format!("truncf({x})"),
            DType::Bool => format!("({x} != 0.0f ? 1.0f : 0.0f)"),
            DType::Fp32 | DType::Tf32 | DType::Fp8 => x.to_string(),
        },
        Op::Quantize { scale, zero_point } => format!(
            "tf_quant({x}, {}, {})",
            lit(*scale as f32),
            lit(*zero_point as f32)
        ),
        Op::Dequantize {
            scale, zero_point, ..
        } => format!(
            "(({x} - {}) * {})",
            lit(*zero_point as f32),
            lit(*scale as f32)
        ),
        Op::Broadcast { .. } => x.to_string(),
        Op::Unary { f } => f.c_expr(x),
        _ => return None,
    })
}

pub(crate) fn binary_expr(op: &Op, a: &str, b: &str) -> Option<String> {
    Some(match op {
        Op::Binary { f } => f.c_expr(a, b),
        _ => return None,
    })
}

/// The input slots a row kernel addresses as `I[r·L + c]`: flat operands of its full
/// elementwise nodes and the row a row op reduces (not per-row scalars, broadcasts or norm
/// parameters), in slot order.
fn row_strided_inputs(
    plans: &[crate::exec::NodePlan],
    steps: &[Step],
    input: &dyn Fn(usize) -> usize,
) -> Vec<usize> {
    let mut v: Vec<usize> = plans
        .iter()
        .zip(steps)
        .flat_map(|(p, st)| {
            p.binds
                .iter()
                .enumerate()
                .filter_map(move |(bi, b)| match (b, st) {
                    (Bind::Flat(t), Step::Elem(_)) if !p.per_row => Some(*t),
                    (Bind::Flat(t) | Bind::Direct(t), Step::Row) if bi == 0 => Some(*t),
                    _ => None,
                })
        })
        .map(input)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// How a row kernel streams the next row of its row-strided inputs (see `render_kernel`).
#[derive(Default)]
struct RowStreams {
    /// Input slots whose next row a row op reads in its own loop (no prefetch at the
    /// row's start for them).
    streamed: Vec<usize>,
    /// The softmax-family op that prefetches inside its exponential's loop, and the input
    /// slots (at most two) it asks for.
    exp_op: Option<usize>,
    exp_prefetch: Vec<usize>,
    /// Norms (RMSNorm, LayerNorm) reading an input row directly: each takes the next row's
    /// first statistic in the loop that writes this row (`tf_*_row_next`).
    pipelined: std::collections::BTreeSet<usize>,
}

fn row_streams(
    tg: &TypedGraph,
    plans: &[crate::exec::NodePlan],
    steps: &[Step],
    input: &dyn Fn(usize) -> usize,
) -> RowStreams {
    let strided = row_strided_inputs(plans, steps, input);
    let mut s = RowStreams::default();
    for (pi, p) in plans.iter().enumerate() {
        if steps[pi] != Step::Row || p.per_row {
            continue;
        }
        match &tg.nodes[p.node].op {
            Op::RmsNorm { .. } | Op::LayerNorm { .. } => {
                if let Some(Bind::Flat(t) | Bind::Direct(t)) = p.binds.first() {
                    let i = input(*t);
                    if !s.streamed.contains(&i) {
                        s.pipelined.insert(pi);
                        s.streamed.push(i);
                    }
                }
            }
            Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::LogSumExp { .. }
                if s.exp_op.is_none() =>
            {
                s.exp_op = Some(pi);
                s.exp_prefetch = strided
                    .iter()
                    .copied()
                    .filter(|i| !s.streamed.contains(i))
                    .take(2)
                    .collect();
                s.streamed.extend(s.exp_prefetch.iter().copied());
            }
            _ => {}
        }
    }
    s
}

/// The row ops that reduce a row to one value (`p{pi}` in the generated code).
fn to_scalar(op: &Op) -> bool {
    matches!(
        op,
        Op::ReduceSum { .. } | Op::ReduceMean { .. } | Op::ReduceMax { .. } | Op::LogSumExp { .. }
    )
}

/// The inputs' row that a softmax-family op's exponential loop asks for, rows ahead of the
/// one it computes: the row after next. Asked for one row ahead, the last lines of the
/// next row were requested at the end of this row's exponentials and had only the scaling
/// pass's time to arrive before the next row's max pass read them. A 1024-column softmax
/// over 64 MiB at one thread (AMD EPYC Zen 5, AVX-512): 0.318 → 0.250 ns per element
/// (`tools/kernel_driver.py`, `memcpy` 0.200), and its kernels' fraction of same-thread copy
/// bandwidth (`run --bench`) median 0.73 → 0.90; under the AVX2 cap 0.56 → 0.62, bound there
/// by the 8-lane exponentials. docs/performance.md, "Softmax rows read two ahead".
pub(crate) const EXP_READ_AHEAD_ROWS: usize = 2;

/// Render kernel `k` (index `idx` in its program), or say why it has no C form.
pub fn render_kernel(tg: &TypedGraph, k: &Kernel, idx: usize) -> Result<CKernel, String> {
    let nest = lower(tg, k)?;
    let Nest {
        plans,
        elementwise,
        elems,
        rows,
        cols,
        inputs,
        slot_of,
        steps,
        needs_row,
        row_off,
        has_lse,
        scratch_floats,
        gathers,
        flat_as_values: _,
    } = &nest;
    let (elementwise, elems, rows, cols, has_lse, scratch_floats) = (
        *elementwise,
        *elems,
        *rows,
        *cols,
        *has_lse,
        *scratch_floats,
    );
    let l = cols;
    let input = |t: usize| slot_of[&t];

    let sym = format!("tf_k{idx}");
    let mut body = String::new();
    let w = &mut body;
    let _ = writeln!(
        w,
        "/* kernel {} ({:?}): nodes {} */",
        k.name,
        k.kind,
        k.nodes
            .iter()
            .map(|&n| tg.nodes[n].name.replace("*/", "* /"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        w,
        "TF_FN void {sym}(const float *const *in, float *const *out, int64_t r0, int64_t r1, int64_t rn, float *scratch) {{"
    );
    // Row arrays.
    let mut offs: Vec<(&usize, &usize)> = row_off.iter().collect();
    offs.sort();
    for (pi, off) in offs {
        let _ = writeln!(w, "    float *restrict a{pi} = scratch + {off};");
    }
    if has_lse {
        let _ = writeln!(
            w,
            "    float *restrict lse_tmp = scratch + {};",
            row_off.len() * l
        );
    }
    let _ = writeln!(w, "    for (int64_t r = r0; r < r1; ++r) {{");
    // A row kernel reads each row in several passes (statistics, then the output), each
    // short enough that the hardware prefetcher does not run ahead into the next row: the
    // next row of every row-strided input is read while this one is computed. A norm whose
    // row comes straight from an input takes the next row's first statistic in the loop
    // that writes this row; the first softmax-family op asks for up to two inputs' rows
    // after next ([`EXP_READ_AHEAD_ROWS`]) line by line inside its exponential's loop, and
    // for its output's next row to write; the other inputs' next rows are
    // asked for at the row's start. "Next" is the tensor's next row, not the call's: the
    // executor calls a kernel over blocks of rows, and the block that follows is usually
    // the same thread's next call, so its first row is read ahead as well (stopping at the
    // call's last row left one row in 16 of a 1024-column softmax to wait on memory:
    // 0.58 → 0.51 ns per element in a C driver on AMD EPYC Zen 3, AVX2). `rn`, the rows of
    // the whole domain, is an argument so that one function serves every row count. A
    // pipelined norm takes the statistic of the next call's first row too, and that call
    // recomputes it from cache.
    let stream = if elementwise {
        RowStreams::default()
    } else {
        row_streams(tg, plans, steps, &input)
    };
    if !elementwise {
        for i in row_strided_inputs(plans, steps, &input) {
            if stream.streamed.contains(&i) {
                continue;
            }
            let _ = writeln!(
                w,
                "        if (r + 1 < rn) tf_prefetch_row(I{i} + (r + 1) * {l}LL, {l}LL);"
            );
        }
    }
    if elementwise {
        let _ = writeln!(
            w,
            "        const int64_t cn = ({elems}LL - r * {l}LL) < {l}LL ? ({elems}LL - r * {l}LL) : {l}LL;"
        );
    } else {
        let _ = writeln!(w, "        const int64_t cn = {l}LL;");
    }
    super::write_gather_bases(w, gathers, l);
    let mut pi = 0;
    while pi < plans.len() {
        let p = &plans[pi];
        let op = &tg.nodes[p.node].op;
        // A per-row value's store (a run's stores are in its body).
        let store = |w: &mut String, pi: usize, val: &str| {
            if let Some(o) = plans[pi].store {
                let _ = writeln!(w, "        O{o}[r] = {val};");
            }
        };
        match steps[pi] {
            Step::Elem(_) => {
                let (body, next) = nest.run_body(tg, pi)?;
                let _ = writeln!(
                    w,
                    "        TF_IVDEP\n        for (int64_t c = 0; c < cn; ++c) {{\n{body}        }}"
                );
                pi = next;
                continue;
            }
            Step::PerRow => {
                let e = nest.node_expr(tg, pi, false)?;
                let _ = writeln!(w, "        const float p{pi} = {e};");
                store(w, pi, &format!("p{pi}"));
            }
            Step::Row => {
                let (x, ydst) = nest.row_addr(tg, pi)?;
                let param = |j: usize| nest.row_param(tg, pi, j);
                // The max and exponential helpers' variant: vector tails on an input's row.
                let tails = if nest.row_is_input(pi) { "_in" } else { "" };
                let _ = writeln!(w, "        {{ const float *restrict x = {x};");
                match op {
                    Op::ReduceSum { .. } | Op::ReduceMean { .. } => {
                        let div = if matches!(op, Op::ReduceMean { .. }) {
                            format!(" / (double){l}")
                        } else {
                            String::new()
                        };
                        let _ =
                            writeln!(w, "          p{pi} = (float)(tf_row_sum(x, cn){div}); }}");
                    }
                    Op::ReduceMax { .. } => {
                        let _ = writeln!(
                            w,
                            "          int nan; p{pi} = tf_row_max{tails}(x, cn, &nan); }}"
                        );
                    }
                    Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::LogSumExp { .. } => {
                        // Row statistics as the interpreter's kernels: a NaN or +inf makes the
                        // row NaN (LogSumExp: +inf), an all −inf row gives 0 / −inf / −inf.
                        let _ = writeln!(
                            w,
                            "          int nan; const float m = tf_row_max{tails}(x, cn, &nan);"
                        );
                        let _ = writeln!(
                            w,
                            "          const int fin = !nan && m != INFINITY && m != -INFINITY;"
                        );
                        // The inputs' rows [`EXP_READ_AHEAD_ROWS`] ahead, read; the
                        // output's next row, to write.
                        let d = EXP_READ_AHEAD_ROWS;
                        let pf = |j: usize| match stream.exp_prefetch.get(j) {
                            Some(i) if stream.exp_op == Some(pi) => {
                                format!(
                                    "r + {d} < rn ? I{i} + (r + {d}) * {l}LL : (const float *)0"
                                )
                            }
                            _ => "(const float *)0".to_string(),
                        };
                        let (p0, p1) = (pf(0), pf(1));
                        // The next row of the output this op writes, fetched for writing.
                        let pw = match (stream.exp_op == Some(pi), needs_row[pi], p.store) {
                            (true, false, Some(o)) if !matches!(op, Op::LogSumExp { .. }) => {
                                format!("r + 1 < rn ? O{o} + (r + 1) * {l}LL : (float *)0")
                            }
                            _ => "(float *)0".to_string(),
                        };
                        match op {
                            Op::Softmax { .. } => {
                                let _ = writeln!(
                                    w,
                                    "          float *restrict y = {ydst};\n          if (fin) {{ const double s = tf_row_exp_shift{tails}(x, m, y, cn, {p0}, {p1}, {pw}); const float inv = (float)(1.0 / s); for (int64_t c = 0; c < cn; ++c) y[c] *= inv; }}\n          else {{ const float f = (nan || m == INFINITY) ? NAN : 0.0f; for (int64_t c = 0; c < cn; ++c) y[c] = f; }} }}"
                                );
                            }
                            Op::LogSoftmax { .. } => {
                                let _ = writeln!(
                                    w,
                                    "          float *restrict y = {ydst};\n          if (fin) {{ const float ls = (float)log(tf_row_exp_shift{tails}(x, m, y, cn, {p0}, {p1}, {pw})); for (int64_t c = 0; c < cn; ++c) y[c] = (x[c] - m) - ls; }}\n          else {{ const float f = (nan || m == INFINITY) ? NAN : -INFINITY; for (int64_t c = 0; c < cn; ++c) y[c] = f; }} }}"
                                );
                            }
                            _ => {
                                let _ = writeln!(
                                    w,
                                    "          p{pi} = nan ? NAN : !fin ? m : (float)((double)m + log(tf_row_exp_shift{tails}(x, m, lse_tmp, cn, {p0}, {p1}, {pw}))); }}"
                                );
                            }
                        }
                    }
                    Op::RmsNorm { eps } if stream.pipelined.contains(&pi) => {
                        let g = param(1)?;
                        let _ = writeln!(
                            w,
                            "          const double ss = nx{pi}_ok ? nx{pi} : tf_row_sumsq(x, cn);\n          const float inv = (float)(1.0 / sqrt(ss / (double){l} + {eps:?}));\n          float *restrict y = {ydst};\n          if (r + 1 < rn) {{ nx{pi} = tf_rmsnorm_row_next(x, inv, {g}, y, x + {l}LL, cn); nx{pi}_ok = 1; }}\n          else for (int64_t c = 0; c < cn; ++c) y[c] = x[c] * inv * {g}[c]; }}"
                        );
                    }
                    Op::LayerNorm { eps } if stream.pipelined.contains(&pi) => {
                        let g = param(1)?;
                        let b = param(2)?;
                        let _ = writeln!(
                            w,
                            "          const double mean = (nx{pi}_ok ? nx{pi} : tf_row_sum(x, cn)) / (double){l};\n          const float inv = (float)(1.0 / sqrt(tf_row_sumsq_dev(x, cn, mean) / (double){l} + {eps:?}));\n          const float mf = (float)mean;\n          float *restrict y = {ydst};\n          if (r + 1 < rn) {{ nx{pi} = tf_layernorm_row_next(x, mf, inv, {g}, {b}, y, x + {l}LL, cn); nx{pi}_ok = 1; }}\n          else for (int64_t c = 0; c < cn; ++c) y[c] = (x[c] - mf) * inv * {g}[c] + {b}[c]; }}"
                        );
                    }
                    Op::RmsNorm { eps } => {
                        let g = param(1)?;
                        let _ = writeln!(
                            w,
                            "          const float inv = (float)(1.0 / sqrt(tf_row_sumsq(x, cn) / (double){l} + {eps:?}));\n          float *restrict y = {ydst}; for (int64_t c = 0; c < cn; ++c) y[c] = x[c] * inv * {g}[c]; }}"
                        );
                    }
                    Op::LayerNorm { eps } => {
                        let g = param(1)?;
                        let b = param(2)?;
                        let _ = writeln!(
                            w,
                            "          const double mean = tf_row_sum(x, cn) / (double){l};\n          const float inv = (float)(1.0 / sqrt(tf_row_sumsq_dev(x, cn, mean) / (double){l} + {eps:?}));\n          const float mf = (float)mean;\n          float *restrict y = {ydst}; for (int64_t c = 0; c < cn; ++c) y[c] = (x[c] - mf) * inv * {g}[c] + {b}[c]; }}"
                        );
                    }
                    other => return Err(format!("{} has no C form", other.name())),
                }
                if p.per_row {
                    store(w, pi, &format!("p{pi}"));
                } else if to_scalar(op) {
                    // A reduction over rows of one column (a squeeze-excite's mean over a
                    // 1 × 1 map): its one value per row is the row itself, for the ops of
                    // the kernel that read it (`a`) and for its store.
                    if row_off.contains_key(&pi) {
                        let _ = writeln!(w, "        a{pi}[0] = p{pi};");
                    }
                    if let Some(o) = p.store {
                        let _ = writeln!(w, "        O{o}[r] = p{pi};");
                    }
                } else if let (Some(o), true) = (p.store, needs_row[pi]) {
                    let _ = writeln!(
                        w,
                        "        memcpy(O{o} + r * {l}LL, a{pi}, sizeof(float) * (size_t)cn);"
                    );
                }
            }
        }
        pi += 1;
    }
    let _ = writeln!(w, "    }}\n}}");
    // Per-row scalars of row ops are assigned inside blocks: declare them first.
    let decls: String = plans
        .iter()
        .enumerate()
        .filter(|(pi, p)| steps[*pi] == Step::Row && (p.per_row || to_scalar(&tg.nodes[p.node].op)))
        .map(|(pi, _)| format!("        float p{pi};\n"))
        .collect();
    let body = body.replacen(
        "        const int64_t cn",
        &format!("{decls}        const int64_t cn"),
        1,
    );
    // Input pointers.
    // `restrict`: inputs, outputs and scratch rows never overlap (the executor gives every
    // output its own buffer), which lets the compiler vectorize the row loops.
    let mut decl_in: String = (0..inputs.len())
        .map(|i| format!("    const float *restrict I{i} = in[{i}];\n"))
        .collect();
    for o in 0..k.outputs.len() {
        decl_in.push_str(&format!("    float *restrict O{o} = out[{o}];\n"));
    }
    // A pipelined norm's statistic of the next row, carried from one row to the next.
    for pi in &stream.pipelined {
        decl_in.push_str(&format!(
            "    double nx{pi} = 0.0;\n    int nx{pi}_ok = 0;\n"
        ));
    }
    let source = body.replacen(
        "    for (int64_t r = r0;",
        &format!("{decl_in}    for (int64_t r = r0;"),
        1,
    );
    Ok(CKernel {
        kernel: idx,
        symbol: sym,
        rows,
        cols,
        elems,
        inputs: inputs.clone(),
        outputs: k.outputs.clone(),
        scratch_floats,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::compile;
    use crate::Graph;

    /// The one kernel of `json`'s fused program, and its input tensors' names in slot order.
    fn kernel_source(json: &str) -> (CKernel, Vec<String>) {
        let g = Graph::from_json_str(json).unwrap();
        let c = compile(&g).unwrap();
        let mut cp = render_program(&c.fused);
        assert_eq!(cp.kernels.len(), 1, "{:?}", cp.skipped);
        let k = cp.kernels.remove(0);
        let names = k
            .inputs
            .iter()
            .map(|&t| c.fused.graph.tensors[t].name.clone())
            .collect();
        (k, names)
    }

    /// A row kernel asks for the next row of each input it reads row by row, and not for a
    /// norm's parameters (the same 1024 values on every row).
    #[test]
    fn row_kernels_prefetch_the_next_row_of_row_inputs_only() {
        let (k, names) = kernel_source(
            r#"{"nodes":[
              {"name":"x","op":"Input","attrs":{"shape":[8,1024],"dtype":"fp32"}},
              {"name":"res","op":"Input","attrs":{"shape":[8,1024],"dtype":"fp32"}},
              {"name":"g","op":"Weight","attrs":{"shape":[1024],"dtype":"fp32"}},
              {"name":"h","op":"Add","inputs":["x","res"]},
              {"name":"y","op":"RMSNorm","inputs":["h","g"],"attrs":{"eps":1e-6}}]}"#,
        );
        let slot = |name: &str| names.iter().position(|n| n == name).unwrap();
        let lines: Vec<&str> = k
            .source
            .lines()
            .filter(|l| l.contains("tf_prefetch_row("))
            .collect();
        // x and res are read as I[r·1024 + c]; g as I[c].
        let want: Vec<String> = ["x", "res"]
            .iter()
            .map(|n| format!("tf_prefetch_row(I{} + (r + 1) * 1024LL, 1024LL);", slot(n)))
            .collect();
        assert_eq!(lines.len(), 2, "{}", k.source);
        for w in &want {
            assert!(
                lines.iter().any(|l| l.contains(w.as_str())),
                "{w}\n{}",
                k.source
            );
        }
        assert!(!k
            .source
            .contains(&format!("tf_prefetch_row(I{}", slot("g"))));
    }

    /// A norm reading its rows straight from an input takes the next row's statistic in
    /// the loop that writes this row, and a softmax asks for the next rows of its input
    /// (to read) and of its output (to write) inside its exponential's loop; neither asks
    /// for that input's next row again at the row's start.
    #[test]
    fn row_ops_on_inputs_stream_the_next_row_inside_their_loops() {
        let (k, names) = kernel_source(
            r#"{"nodes":[
              {"name":"x","op":"Input","attrs":{"shape":[8,1024],"dtype":"fp32"}},
              {"name":"g","op":"Weight","attrs":{"shape":[1024],"dtype":"fp32"}},
              {"name":"y","op":"RMSNorm","inputs":["x","g"],"attrs":{"eps":1e-6}}]}"#,
        );
        let x = names.iter().position(|n| n == "x").unwrap();
        assert!(
            k.source.contains(&format!(
                "tf_rmsnorm_row_next(x, inv, I{}, y, x + 1024LL, cn)",
                1 - x
            )),
            "{}",
            k.source
        );
        assert!(k.source.contains("nx0_ok ? nx0 : tf_row_sumsq(x, cn)"));
        assert!(!k.source.contains("tf_prefetch_row("), "{}", k.source);
        let (k, _) = kernel_source(
            r#"{"nodes":[
              {"name":"x","op":"Input","attrs":{"shape":[8,1024],"dtype":"fp32"}},
              {"name":"y","op":"Softmax","inputs":["x"],"attrs":{"axis":-1}}]}"#,
        );
        assert!(
            k.source.contains(
                "tf_row_exp_shift_in(x, m, y, cn, r + 2 < rn ? I0 + (r + 2) * 1024LL : (const float *)0, (const float *)0, r + 1 < rn ? O0 + (r + 1) * 1024LL : (float *)0)"
            ),
            "{}",
            k.source
        );
        assert!(!k.source.contains("tf_prefetch_row("), "{}", k.source);
    }

    /// An elementwise kernel reads one stream front to back: no prefetch is emitted.
    #[test]
    fn elementwise_kernels_do_not_prefetch() {
        let (k, _) = kernel_source(
            r#"{"nodes":[
              {"name":"x","op":"Input","attrs":{"shape":[65536],"dtype":"fp32"}},
              {"name":"y","op":"Exp","inputs":["x"]}]}"#,
        );
        assert!(!k.source.contains("tf_prefetch_row("), "{}", k.source);
    }
}
