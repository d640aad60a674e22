//! CUDA rendering of the loop nest ([`super`]): one thread block per row of the iteration
//! domain (rows are handed out grid-stride, so any grid size works), and the block's threads
//! stride over the row's columns, so that a warp reads 32 consecutive floats of a row at
//! once (coalesced). Row operations reduce in two steps: each thread over its own columns,
//! then the block through warp shuffles and 32 slots of shared memory (`tf_block_sum`,
//! `tf_block_max`). Every thread touches only its own columns of the per-block scratch rows,
//! so the only barriers are inside those reductions.
//!
//! Each kernel is `extern "C" __global__ void tf_k<i>(const float *I0, …, float *O0, …,
//! float *scratch, long long rows)`: inputs in [`CudaKernel::inputs`] order, outputs in the
//! kernel's output order, then `gridDim.x × scratch_floats` floats of scratch. Launch it with
//! [`BLOCK_THREADS`] threads per block (any multiple of 32 up to 1024 is correct).
//!
//! Arithmetic is the C target's: the prelude's polynomials for exp/log/tanh/erf, sums of
//! reductions and norms in double (cheap on data-centre GPUs; a consumer GPU's FP64 rate is
//! 1/64 of FP32), maxNum/minNum as the interpreter. The summation order is the block's, not
//! the interpreter's, so sums agree to rounding, not bit for bit.
//!
//! Left out: 128-bit vector loads, fp16/bf16 storage (tensors are f32 here), shared-memory
//! row caching, and the kernels the C target also leaves out (matmuls, opaque kernels).
//! NVRTC compiles this source without any system header (`tensorforge-cuda` checks every
//! example graph's kernels that way in the tests).

use super::{lower, write_gather_bases, Nest, Step};
use crate::fusion::{Kernel, Program};
use crate::ir::{Op, TypedGraph};
use std::fmt::Write;

/// Threads per block the launchers use (8 warps).
pub const BLOCK_THREADS: u32 = 256;

/// The block reductions generated kernels call (device code only).
const BLOCK_HELPERS: &str = r#"
/* Block-wide reductions. Every thread of the block calls them with its partial and gets
 * the block's result; they contain barriers, so the call must be uniform over the block.
 * The leading barrier keeps one call's writes of `part` from overtaking the previous
 * call's reads. */
TF_INLINE double tf_block_sum(double v) {
    __shared__ double part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < nw ? part[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The same over one warp (the row kernels of at most 1024 columns give each row a warp;
 * no barrier, so the warps of a block may work through different numbers of rows). */
TF_INLINE double tf_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

TF_INLINE float tf_warp_max(float v, int *nan) {
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    *nan = __any_sync(0xffffffffu, *nan);
    return v;
}

/* Block max of NaN-free partials (−inf where a thread saw nothing), and whether any thread
 * saw a NaN (*nan in: this thread's flag; out: the block's). */
TF_INLINE float tf_block_max(float v, int *nan) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) part[warp] = v;
    *nan = __syncthreads_or(*nan);
    v = lane < nw ? part[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    return v;
}
"#;

/// The device prelude: the C prelude's helpers as `__device__` functions (with CUDA's bit
/// casts and, under NVRTC, no system header), then the block reductions.
pub fn device_prelude() -> String {
    let mut s = String::from(
        "/* TensorForge generated CUDA: one block per row, threads strided over columns. */\n\
         #pragma once\n\
         #define TF_INLINE static __device__ __forceinline__\n\
         #define TF_FN __device__\n\
         #define restrict __restrict__\n\
         #define TF_MAX_LANES 1\n\
         #define TF_SUM_LANES 1\n\
         #define TF_EXP_LANES 1\n",
    );
    s.push_str(super::c::PRELUDE);
    s.push_str(BLOCK_HELPERS);
    s
}

/// One rendered kernel.
#[derive(Debug, Clone)]
pub struct CudaKernel {
    /// Index of the kernel in its program.
    pub kernel: usize,
    /// The `__global__` function's name.
    pub symbol: String,
    /// Rows of the iteration domain (the `rows` argument).
    pub rows: usize,
    /// Columns per row.
    pub cols: usize,
    /// Elements of the iteration domain (elementwise kernels: the last row may be short).
    pub elems: usize,
    /// Tensor ids of the `I` arguments, in order.
    pub inputs: Vec<usize>,
    /// Tensor ids of the `O` arguments, in order.
    pub outputs: Vec<usize>,
    /// Floats of scratch one row unit (a warp or a block, see `unit`) needs.
    pub scratch_floats: usize,
    /// Who works on one row: a warp (row kernels of at most [`WARP_ROW_MAX_COLS`] columns)
    /// or the whole block.
    pub unit: RowUnit,
    /// The kernel's source (without the prelude).
    pub source: String,
}

/// Who works on one row of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowUnit {
    /// One warp per row: `blockDim.x / 32` rows per block at a time.
    Warp,
    /// The whole block per row.
    Block,
}

/// Longest row a warp reduces alone (32 floats per lane); longer rows get a block.
pub const WARP_ROW_MAX_COLS: usize = 1024;

impl CudaKernel {
    /// Floats of scratch a launch of `grid` blocks of `block` threads needs:
    /// `grid × units per block × scratch_floats`.
    pub fn scratch_floats_for(&self, grid: u32, block: u32) -> usize {
        let units = match self.unit {
            RowUnit::Warp => (block / 32).max(1),
            RowUnit::Block => 1,
        };
        (grid as usize)
            .saturating_mul(units as usize)
            .saturating_mul(self.scratch_floats)
    }

    /// The parameter names in order: `I0…`, `O0…`, `scratch`, `rows` (all 64-bit).
    pub fn params(&self) -> Vec<String> {
        let mut v: Vec<String> = (0..self.inputs.len()).map(|i| format!("I{i}")).collect();
        v.extend((0..self.outputs.len()).map(|o| format!("O{o}")));
        v.push("scratch".into());
        v.push("rows".into());
        v
    }
}

/// A program's rendered kernels and those left to other executors, with the reason.
#[derive(Debug, Clone, Default)]
pub struct CudaProgram {
    /// Rendered kernels.
    pub kernels: Vec<CudaKernel>,
    /// `(kernel index, reason)` for each kernel not rendered.
    pub skipped: Vec<(usize, String)>,
}

impl CudaProgram {
    /// One self-contained translation unit (device prelude, then every kernel), as NVRTC
    /// compiles it.
    pub fn source(&self) -> String {
        let mut s = device_prelude();
        for k in &self.kernels {
            s.push('\n');
            s.push_str(&k.source);
        }
        s
    }
}

/// Render every kernel of `p` that has a CUDA form.
pub fn render_program(p: &Program) -> CudaProgram {
    let mut out = CudaProgram::default();
    for (i, k) in p.kernels.iter().enumerate() {
        match render_kernel(&p.graph, k, i) {
            Ok(c) => out.kernels.push(c),
            Err(why) => out.skipped.push((i, why)),
        }
    }
    out
}

/// The files `codegen --target cuda` writes: `prelude.cuh` (the device prelude), one
/// `<kernel>.cu` per rendered kernel (the fusion decisions as comments, then the kernel),
/// `kernels.cu` (the self-contained translation unit, for `nvcc -c` or NVRTC), and
/// `manifest.json` (per kernel: function, parameters, rows, columns, scratch floats per block,
/// tensor names; the launch contract; the kernels left out, with the reason).
pub fn files(p: &Program) -> Vec<(String, String)> {
    let cp = render_program(p);
    let tg = &p.graph;
    let mut out = vec![("prelude.cuh".to_string(), device_prelude())];
    let mut manifest = vec![];
    for ck in &cp.kernels {
        let k = &p.kernels[ck.kernel];
        let mut src = String::from("#include \"prelude.cuh\"\n\n");
        for line in super::decision_lines(p, &k.name) {
            let _ = writeln!(src, "/* {} */", line.replace("*/", "* /"));
        }
        src.push_str(&ck.source);
        out.push((format!("{}.cu", k.name), src));
        let names = |ts: &[usize]| -> Vec<String> {
            ts.iter().map(|&t| tg.tensors[t].name.clone()).collect()
        };
        manifest.push(serde_json::json!({
            "kernel": k.name, "file": format!("{}.cu", k.name),
            "function": ck.symbol, "params": ck.params(), "rows": ck.rows,
            "cols": ck.cols, "elements": ck.elems,
            "row_unit": ck.unit, "scratch_floats_per_unit": ck.scratch_floats,
            "inputs": names(&ck.inputs), "outputs": names(&ck.outputs),
        }));
    }
    out.push(("kernels.cu".into(), cp.source()));
    let m = serde_json::json!({
        "schema_version": 2, "target": "cuda",
        "launch": format!("grid: any number of blocks (rows are grid-strided); block: {BLOCK_THREADS} threads (any multiple of 32 up to 1024); a row unit is a warp or the block; scratch: gridDim.x * (units per block) * scratch_floats_per_unit floats"),
        "kernels": manifest, "interpreted": super::interpreted_json(p, &cp.skipped),
    });
    out.push((
        "manifest.json".into(),
        serde_json::to_string_pretty(&m).unwrap_or_default(),
    ));
    out
}

/// Render kernel `k` (index `idx` in its program) as a `__global__` function, or say why it
/// has no CUDA form.
pub fn render_kernel(tg: &TypedGraph, k: &Kernel, idx: usize) -> Result<CudaKernel, String> {
    let nest = lower(tg, k)?;
    let Nest {
        plans,
        elementwise,
        elems,
        rows,
        cols,
        inputs,
        slot_of: _,
        steps,
        needs_row,
        row_off,
        has_lse,
        scratch_floats,
        gathers,
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
    let sym = format!("tf_k{idx}");
    let mut w = String::new();
    let _ = writeln!(
        w,
        "/* kernel {} ({:?}), {rows} rows x {cols} columns: nodes {} */",
        k.name,
        k.kind,
        k.nodes
            .iter()
            .map(|&n| tg.nodes[n].name.replace("*/", "* /"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut params: Vec<String> = (0..inputs.len())
        .map(|i| format!("const float *__restrict__ I{i}"))
        .collect();
    params.extend((0..k.outputs.len()).map(|o| format!("float *__restrict__ O{o}")));
    params.push("float *__restrict__ scratch".into());
    params.push("long long rows".into());
    let _ = writeln!(
        w,
        "extern \"C\" __global__ void {sym}({}) {{",
        params.join(", ")
    );
    let unit = if !elementwise && cols <= WARP_ROW_MAX_COLS {
        RowUnit::Warp
    } else {
        RowUnit::Block
    };
    let (sum, max) = match unit {
        RowUnit::Warp => {
            let _ = writeln!(
                w,
                "    const int64_t u0 = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);\n    const int64_t us = (int64_t)gridDim.x * (blockDim.x >> 5);\n    const int64_t t0 = threadIdx.x & 31, nt = 32;"
            );
            ("tf_warp_sum", "tf_warp_max")
        }
        RowUnit::Block => {
            let _ = writeln!(
                w,
                "    const int64_t u0 = blockIdx.x, us = gridDim.x;\n    const int64_t t0 = threadIdx.x, nt = blockDim.x;"
            );
            ("tf_block_sum", "tf_block_max")
        }
    };
    let _ = writeln!(
        w,
        "    float *sc = scratch + u0 * {scratch_floats}LL;\n    (void)sc; (void)t0; (void)nt;"
    );
    let mut offs: Vec<(&usize, &usize)> = row_off.iter().collect();
    offs.sort();
    for (pi, off) in offs {
        let _ = writeln!(w, "    float *a{pi} = sc + {off};");
    }
    if has_lse {
        let _ = writeln!(w, "    float *lse_tmp = sc + {};", row_off.len() * l);
    }
    let _ = writeln!(w, "    for (int64_t r = u0; r < rows; r += us) {{");
    if elementwise {
        let _ = writeln!(
            w,
            "        const int64_t cn = ({elems}LL - r * {l}LL) < {l}LL ? ({elems}LL - r * {l}LL) : {l}LL;"
        );
    } else {
        let _ = writeln!(w, "        const int64_t cn = {l}LL;");
    }
    for (pi, p) in plans.iter().enumerate() {
        if steps[pi] == Step::Row && p.per_row {
            let _ = writeln!(w, "        float p{pi};");
        }
    }
    write_gather_bases(&mut w, gathers, l);
    const COLS: &str = "for (int64_t c = t0; c < cn; c += nt)";
    let mut pi = 0;
    while pi < plans.len() {
        let p = &plans[pi];
        let op = &tg.nodes[p.node].op;
        match steps[pi] {
            Step::Elem(_) => {
                let (body, next) = nest.run_body(tg, pi)?;
                let _ = writeln!(w, "        {COLS} {{\n{body}        }}");
                pi = next;
                continue;
            }
            Step::PerRow => {
                let e = nest.node_expr(tg, pi, false)?;
                let _ = writeln!(w, "        const float p{pi} = {e};");
                if let Some(o) = p.store {
                    let _ = writeln!(w, "        if (t0 == 0) O{o}[r] = p{pi};");
                }
            }
            Step::Row => {
                let (x, ydst) = nest.row_addr(tg, pi)?;
                let param = |j: usize| nest.row_param(tg, pi, j);
                let _ = writeln!(w, "        {{ const float *x = {x};");
                // The row's max ignoring NaN and whether it holds one, for the softmax family.
                let row_max = format!(
                    "          float mt = -INFINITY; int nan = 0;\n          \
                     {COLS} {{ const float v = x[c]; nan |= v != v; mt = v > mt ? v : mt; }}\n          \
                     const float m = {max}(mt, &nan);\n          \
                     const int fin = !nan && m != INFINITY && m != -INFINITY;"
                );
                // Σ e^(x − m) over the row, each thread writing its own columns of y.
                let exp_sum = |y: &str| {
                    format!(
                        "double s = 0.0; {COLS} {{ const float e = tf_exp_nonpos(x[c] - m); {y}[c] = e; s += (double)e; }} s = {sum}(s);"
                    )
                };
                match op {
                    Op::ReduceSum { .. } | Op::ReduceMean { .. } => {
                        let div = if matches!(op, Op::ReduceMean { .. }) {
                            format!(" / (double){l}")
                        } else {
                            String::new()
                        };
                        let _ = writeln!(
                            w,
                            "          double s = 0.0; {COLS} s += (double)x[c];\n          p{pi} = (float)({sum}(s){div}); }}"
                        );
                    }
                    Op::ReduceMax { .. } => {
                        let _ = writeln!(
                            w,
                            "          float mt = -INFINITY; int nan = 0;\n          {COLS} {{ const float v = x[c]; nan |= v != v; mt = v > mt ? v : mt; }}\n          p{pi} = {max}(mt, &nan); }}"
                        );
                    }
                    Op::Softmax { .. } => {
                        let _ = writeln!(
                            w,
                            "{row_max}\n          float *y = {ydst};\n          if (fin) {{ {} const float inv = (float)(1.0 / s); {COLS} y[c] *= inv; }}\n          else {{ const float f = (nan || m == INFINITY) ? NAN : 0.0f; {COLS} y[c] = f; }} }}",
                            exp_sum("y")
                        );
                    }
                    Op::LogSoftmax { .. } => {
                        let _ = writeln!(
                            w,
                            "{row_max}\n          float *y = {ydst};\n          if (fin) {{ {} const float ls = (float)log(s); {COLS} y[c] = (x[c] - m) - ls; }}\n          else {{ const float f = (nan || m == INFINITY) ? NAN : -INFINITY; {COLS} y[c] = f; }} }}",
                            exp_sum("y")
                        );
                    }
                    Op::LogSumExp { .. } => {
                        let _ = writeln!(
                            w,
                            "{row_max}\n          if (fin) {{ {} p{pi} = (float)((double)m + log(s)); }}\n          else p{pi} = nan ? NAN : m; }}",
                            exp_sum("lse_tmp")
                        );
                    }
                    Op::RmsNorm { eps } => {
                        let g = param(1)?;
                        let _ = writeln!(
                            w,
                            "          double s = 0.0; {COLS} s += (double)x[c] * (double)x[c];\n          const float inv = (float)(1.0 / sqrt({sum}(s) / (double){l} + {eps:?}));\n          float *y = {ydst}; {COLS} y[c] = x[c] * inv * {g}[c]; }}"
                        );
                    }
                    Op::LayerNorm { eps } => {
                        let g = param(1)?;
                        let b = param(2)?;
                        let _ = writeln!(
                            w,
                            "          double s = 0.0; {COLS} s += (double)x[c];\n          const double mean = {sum}(s) / (double){l};\n          double d2 = 0.0; {COLS} {{ const double d = (double)x[c] - mean; d2 += d * d; }}\n          const float inv = (float)(1.0 / sqrt({sum}(d2) / (double){l} + {eps:?}));\n          const float mf = (float)mean;\n          float *y = {ydst}; {COLS} y[c] = (x[c] - mf) * inv * {g}[c] + {b}[c]; }}"
                        );
                    }
                    other => return Err(format!("{} has no CUDA form", other.name())),
                }
                if p.per_row {
                    if let Some(o) = p.store {
                        let _ = writeln!(w, "        if (t0 == 0) O{o}[r] = p{pi};");
                    }
                } else if let (Some(o), true) = (p.store, needs_row[pi]) {
                    let _ = writeln!(w, "        {COLS} O{o}[r * {l}LL + c] = a{pi}[c];");
                }
            }
        }
        pi += 1;
    }
    let _ = writeln!(w, "    }}\n}}");
    Ok(CudaKernel {
        kernel: idx,
        symbol: sym,
        rows,
        cols,
        elems,
        inputs: inputs.clone(),
        outputs: k.outputs.clone(),
        scratch_floats,
        unit,
        source: w,
    })
}
