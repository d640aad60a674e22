//! CUDA C rendering: the C loop nest of each kernel ([`c`](crate::codegen::c)) compiled as device code,
//! with one `__global__` launcher per kernel that gives each thread one row
//! (`tf_k<i>_launch(in, out, rows, scratch)`, grid-stride free: launch ⌈rows / block⌉ blocks;
//! `in` and `out` are device arrays of device pointers, `scratch` holds `rows ×
//! scratch_floats` floats). This is correct code for any NVIDIA GPU but not a tuned one: a
//! thread per row leaves memory accesses uncoalesced across a warp. Left out: tiling, shared
//! memory, warp reductions, half-precision storage. It is checked by compiling with `nvcc`
//! where one is installed (`tools/check_cuda.sh`); nothing in CI or the tests needs a GPU.

use super::c::{render_program, PRELUDE};
use crate::fusion::Program;
use std::fmt::Write;

/// The files `codegen --target cuda` writes: `prelude.cuh` (the C prelude as device
/// functions), one `<kernel>.cu` per rendered kernel (the fusion decisions as comments, the
/// device function and its `__global__` launcher), `kernels.cu` (includes them all: one unit
/// for `nvcc -c`), and `manifest.json`.
pub fn files(p: &Program) -> Vec<(String, String)> {
    let cp = render_program(p);
    let tg = &p.graph;
    let mut prelude = String::from(
        "/* TensorForge generated CUDA kernels: the C loop nest as device code, one thread per row. */\n\
         #pragma once\n\
         #define TF_INLINE static __device__ inline\n\
         #define TF_FN __device__\n\
         #define restrict __restrict__\n\
         #define TF_MAX_LANES 1\n\
         #define TF_SUM_LANES 1\n",
    );
    prelude.push_str(PRELUDE);
    let mut out = vec![("prelude.cuh".to_string(), prelude)];
    let mut all = String::from("/* Every generated kernel in one translation unit. */\n");
    let mut manifest = vec![];
    for ck in &cp.kernels {
        let k = &p.kernels[ck.kernel];
        let mut src = String::from("#include \"prelude.cuh\"\n\n");
        for line in super::decision_lines(p, &k.name) {
            let _ = writeln!(src, "/* {} */", line.replace("*/", "* /"));
        }
        src.push_str(&ck.source);
        let _ = writeln!(
            src,
            "extern \"C\" __global__ void {s}_launch(const float *const *in, float *const *out, int64_t rows, float *scratch) {{\n    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n    if (r < rows) {s}(in, out, r, r + 1, scratch + r * {f}LL);\n}}",
            s = ck.symbol,
            f = ck.scratch_floats
        );
        let _ = writeln!(all, "#include \"{}.cu\"", k.name);
        out.push((format!("{}.cu", k.name), src));
        let names = |ts: &[usize]| -> Vec<String> {
            ts.iter().map(|&t| tg.tensors[t].name.clone()).collect()
        };
        manifest.push(serde_json::json!({
            "kernel": k.name, "file": format!("{}.cu", k.name),
            "function": format!("{}_launch", ck.symbol), "rows": ck.rows,
            "cols": ck.cols, "scratch_floats_per_row": ck.scratch_floats,
            "inputs": names(&ck.inputs), "outputs": names(&k.outputs),
        }));
    }
    out.push(("kernels.cu".into(), all));
    let m = serde_json::json!({
        "schema_version": 1, "target": "cuda", "threads": "one per row",
        "kernels": manifest, "interpreted": super::interpreted_json(p, &cp.skipped),
    });
    out.push((
        "manifest.json".into(),
        serde_json::to_string_pretty(&m).unwrap_or_default(),
    ));
    out
}
