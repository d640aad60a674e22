//! CUDA C rendering: the C loop nest of each kernel ([`super::c`]) compiled as device code,
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

/// `kernels.cu` and `manifest.json`.
pub fn files(p: &Program) -> Vec<(String, String)> {
    let cp = render_program(p);
    let tg = &p.graph;
    let mut src = String::from(
        "/* TensorForge generated CUDA kernels: the C loop nest as device code, one thread per row. */\n\
         #define TF_INLINE static __device__ inline\n\
         #define TF_FN __device__\n\
         #define restrict __restrict__\n",
    );
    src.push_str(PRELUDE);
    let mut manifest = vec![];
    for ck in &cp.kernels {
        let k = &p.kernels[ck.kernel];
        for line in super::decision_lines(p, &k.name) {
            let _ = writeln!(src, "/* {} */", line.replace("*/", "* /"));
        }
        src.push_str(&ck.source);
        let _ = writeln!(
            src,
            "extern \"C\" __global__ void {s}_launch(const float *const *in, float *const *out, int64_t rows, float *scratch) {{\n    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n    if (r < rows) {s}(in, out, r, r + 1, scratch + r * {f}LL);\n}}\n",
            s = ck.symbol,
            f = ck.scratch_floats
        );
        let names = |ts: &[usize]| -> Vec<String> {
            ts.iter().map(|&t| tg.tensors[t].name.clone()).collect()
        };
        manifest.push(serde_json::json!({
            "kernel": k.name, "function": format!("{}_launch", ck.symbol), "rows": ck.rows,
            "cols": ck.cols, "scratch_floats_per_row": ck.scratch_floats,
            "inputs": names(&ck.inputs), "outputs": names(&k.outputs),
        }));
    }
    let skipped = super::interpreted_json(p, &cp.skipped);
    let m = serde_json::json!({
        "schema_version": 1, "target": "cuda", "threads": "one per row",
        "kernels": manifest, "interpreted": skipped,
    });
    vec![
        ("kernels.cu".into(), src),
        (
            "manifest.json".into(),
            serde_json::to_string_pretty(&m).unwrap_or_default(),
        ),
    ]
}
