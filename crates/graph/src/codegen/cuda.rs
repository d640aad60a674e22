//! CUDA rendering of the loop nest ([`super`]): one thread block per row of the iteration
//! domain (rows are handed out grid-stride, so any grid size works), and the block's threads
//! stride over the row's columns, so that a warp reads consecutive elements of a row at once
//! (coalesced). Where the row splits into 16-byte vectors, each thread takes
//! [`CudaOptions::cols_per_thread`] consecutive columns per step through 128-bit loads and
//! stores (4 f32 or 8 16-bit values; 512 contiguous bytes per warp instruction), scratch
//! rows too (f32, 16-byte aligned since their offsets are multiples of the row). Row
//! operations reduce in two steps: each thread over its own columns, then the row unit (a
//! warp, or the block through 32 slots of shared memory: `tf_block_sum`, `tf_block_max`).
//! Every loop of a kernel gives a thread the same columns, and every thread touches only its
//! own columns of the per-block scratch rows, so the only barriers are inside the reductions.
//!
//! Each kernel is `extern "C" __global__ void tf_k<i>(const T *I0, …, T *O0, …, float
//! *scratch, long long rows)`, `T` the [`Storage`] type: inputs in [`CudaKernel::inputs`]
//! order, outputs in the kernel's output order, then `gridDim.x × scratch_floats` floats of
//! scratch. Launch it with [`BLOCK_THREADS`] threads per block (any multiple of 32 up to
//! 1024 is correct). Tensors may be stored as f32, f16 or bf16; arithmetic and scratch are
//! f32 (sums of reductions and norms in double), a 16-bit value is widened exactly on load
//! and rounded to nearest even once on store (the prelude's `tf_f32_to_f16` /
//! `tf_f32_to_bf16`, software conversions that run the same in the tests' CPU emulator).
//!
//! Arithmetic is the C target's: the prelude's polynomials for exp/log/tanh/erf, sums of
//! reductions and norms in double (cheap on data-centre GPUs; a consumer GPU's FP64 rate is
//! 1/64 of FP32), maxNum/minNum as the interpreter. The summation order is the row unit's,
//! not the interpreter's, so sums agree to rounding, not bit for bit.
//!
//! Left out: shared-memory row caching (a softmax reads its row three times, a norm twice,
//! from L1/L2 after the first), the hardware conversion instructions (`cvt.rn.bf16.f32`),
//! 16-bit arithmetic, and the kernels the C target also leaves out (matmuls, opaque
//! kernels). NVRTC compiles this source without any system header (`tensorforge-cuda`
//! checks every example graph's kernels that way in the tests).

use super::{lower, write_gather_bases, Nest, Step};
use crate::exec::Bind;
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

/// How tensors are stored in device memory (arithmetic is f32 whatever the storage).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub enum Storage {
    /// IEEE binary32.
    #[default]
    #[serde(rename = "fp32")]
    F32,
    /// IEEE binary16 (5 exponent bits: finite up to 65504).
    #[serde(rename = "fp16")]
    F16,
    /// bfloat16 (f32's 8 exponent bits, 8 significant bits).
    #[serde(rename = "bf16")]
    Bf16,
}

impl Storage {
    /// Every storage type.
    pub const ALL: [Storage; 3] = [Storage::F32, Storage::F16, Storage::Bf16];

    /// Name on the command line, in manifests and in records.
    pub fn label(self) -> &'static str {
        match self {
            Storage::F32 => "fp32",
            Storage::F16 => "fp16",
            Storage::Bf16 => "bf16",
        }
    }

    /// The storage named `s` (`fp32`, `fp16`, `bf16`).
    pub fn parse(s: &str) -> Option<Storage> {
        Storage::ALL.into_iter().find(|t| t.label() == s)
    }

    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            Storage::F32 => 4,
            Storage::F16 | Storage::Bf16 => 2,
        }
    }

    /// The element type in generated CUDA.
    pub fn c_type(self) -> &'static str {
        match self {
            Storage::F32 => "float",
            Storage::F16 => "tf_st_f16",
            Storage::Bf16 => "tf_st_bf16",
        }
    }

    /// `x` as this storage holds it (rounded to nearest even; the `half` crate's
    /// conversions, which the generated code's must equal bit for bit).
    ///
    /// ```
    /// use tensorforge_graph::codegen::cuda::Storage;
    /// // bf16 keeps 7 fraction bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and
    /// // rounds to the even one, 1.
    /// assert_eq!(Storage::Bf16.round(1.0 + 2f32.powi(-8)), 1.0);
    /// // f16 overflows above 65504 (65520 is halfway to 2^16 and rounds to infinity).
    /// assert_eq!(Storage::F16.round(65520.0), f32::INFINITY);
    /// assert_eq!(Storage::F32.round(0.1), 0.1);
    /// ```
    pub fn round(self, x: f32) -> f32 {
        match self {
            Storage::F32 => x,
            Storage::F16 => half::f16::from_f32(x).to_f32(),
            Storage::Bf16 => half::bf16::from_f32(x).to_f32(),
        }
    }

    /// The 16-bit pattern of `x` in this storage (`None` for f32).
    pub fn bits16(self, x: f32) -> Option<u16> {
        match self {
            Storage::F32 => None,
            Storage::F16 => Some(half::f16::from_f32(x).to_bits()),
            Storage::Bf16 => Some(half::bf16::from_f32(x).to_bits()),
        }
    }
}

/// How [`render_kernel_with`] renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CudaOptions {
    /// Element type of every tensor in device memory.
    pub storage: Storage,
    /// Consecutive columns a thread takes per step where rows split evenly (1: one column,
    /// 32-bit or 16-bit accesses; 4 or 8: 128-bit accesses, 8 for 16-bit storage).
    pub cols_per_thread: usize,
}

impl Default for CudaOptions {
    fn default() -> CudaOptions {
        CudaOptions::new(Storage::F32)
    }
}

impl CudaOptions {
    /// Tensors stored as `storage`, one 128-bit vector per thread step (`16 / bytes`
    /// columns).
    pub fn new(storage: Storage) -> CudaOptions {
        CudaOptions {
            storage,
            cols_per_thread: 16 / storage.bytes(),
        }
    }

    /// The same with `n` columns per thread step: 1, or a whole number of 16-byte vectors
    /// (f32: 4 or 8; 16-bit: 8).
    ///
    /// ```
    /// use tensorforge_graph::codegen::cuda::{CudaOptions, Storage};
    /// assert!(CudaOptions::new(Storage::F32).with_cols_per_thread(8).is_ok());
    /// assert!(CudaOptions::new(Storage::Bf16).with_cols_per_thread(4).is_err());
    /// ```
    pub fn with_cols_per_thread(self, n: usize) -> Result<CudaOptions, String> {
        let per_vector = 16 / self.storage.bytes();
        if n == 1 || (n.is_multiple_of(per_vector) && (per_vector..=16).contains(&n)) {
            Ok(CudaOptions {
                cols_per_thread: n,
                ..self
            })
        } else {
            Err(format!(
                "{n} columns per thread: {} storage takes 1 or a multiple of {per_vector} up to 16",
                self.storage.label()
            ))
        }
    }
}

/// Element storage and 128-bit vector access (device code; the same text compiles in the
/// tests' CPU emulator, which defines `float4` and `uint4`).
const STORAGE_HELPERS: &str = r#"
/* 16-bit storage: widened exactly, rounded to nearest even (ties to even; NaN stays a
 * quiet NaN with the top of its payload; f16 overflows to infinity from 65520 up). The
 * same software conversions on the GPU and in the tests' emulator, checked there bit for
 * bit against every 16-bit pattern and against the `half` crate. */
TF_INLINE float tf_bf16_to_f32(unsigned int h) { return tf_bits_f((int32_t)((h & 0xffffu) << 16)); }
TF_INLINE unsigned int tf_f32_to_bf16(float v) {
    unsigned int b = (unsigned int)tf_f_bits(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (b >> 16) | 0x40u;
    return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
}
TF_INLINE float tf_f16_to_f32(unsigned int h) {
    const unsigned int s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return tf_bits_f((int32_t)(s | 0x7f800000u | (m ? 0x400000u : 0u) | (m << 13)));
    /* Zero and subnormals: m units of 2^-24, exact in float. */
    if (e == 0u) return tf_bits_f((int32_t)(s | (unsigned int)tf_f_bits((float)m * 5.9604644775390625e-8f)));
    return tf_bits_f((int32_t)(s | ((e + 112u) << 23) | (m << 13)));
}
TF_INLINE unsigned int tf_f32_to_f16(float v) {
    const unsigned int b = (unsigned int)tf_f_bits(v), s = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return s | 0x7e00u | ((a >> 13) & 0x3ffu);
    if (a >= 0x477ff000u) return s | 0x7c00u; /* 65520 and up (and infinity) */
    if (a < 0x38800000u) {
        /* Below 2^-14: half's subnormals, units of 2^-24. 0.5 + |v| rounds |v| to a multiple
         * of 2^-24 (the float ulp in [0.5, 1)) under the default rounding, to nearest even. */
        const float q = tf_bits_f((int32_t)a) + 0.5f;
        return s | ((unsigned int)tf_f_bits(q) - 0x3f000000u);
    }
    const unsigned int r = a - 0x38000000u; /* rebias the exponent from 127 to 15 */
    return s | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
}

struct tf_st_bf16 {
    unsigned short u;
    TF_FN operator float() const { return tf_bf16_to_f32(u); }
    TF_FN tf_st_bf16 &operator=(float v) { u = (unsigned short)tf_f32_to_bf16(v); return *this; }
};
struct tf_st_f16 {
    unsigned short u;
    TF_FN operator float() const { return tf_f16_to_f32(u); }
    TF_FN tf_st_f16 &operator=(float v) { u = (unsigned short)tf_f32_to_f16(v); return *this; }
};

/* V consecutive elements at p (16-byte aligned) to or from V floats: V / 4 float4 accesses
 * for f32, V / 8 uint4 accesses for 16-bit storage (element 0 in the low half). */
template <int V> TF_INLINE void tf_ldv(const float *p, float (&o)[V]) {
#pragma unroll
    for (int k = 0; k < V / 4; ++k) {
        const float4 q = reinterpret_cast<const float4 *>(p)[k];
        o[4 * k] = q.x; o[4 * k + 1] = q.y; o[4 * k + 2] = q.z; o[4 * k + 3] = q.w;
    }
}
template <int V> TF_INLINE void tf_stv(float *p, const float (&o)[V]) {
#pragma unroll
    for (int k = 0; k < V / 4; ++k) {
        float4 q;
        q.x = o[4 * k]; q.y = o[4 * k + 1]; q.z = o[4 * k + 2]; q.w = o[4 * k + 3];
        reinterpret_cast<float4 *>(p)[k] = q;
    }
}
#define TF_STORAGE16(T, TO_F32, FROM_F32)                                                        template <int V> TF_INLINE void tf_ldv(const T *p, float (&o)[V]) {                               _Pragma("unroll") for (int k = 0; k < V / 8; ++k) {                                                const uint4 q = reinterpret_cast<const uint4 *>(p)[k];                                         const unsigned int w[4] = {q.x, q.y, q.z, q.w};                                                _Pragma("unroll") for (int i = 0; i < 4; ++i) {                                                    o[8 * k + 2 * i] = TO_F32(w[i] & 0xffffu);                                                     o[8 * k + 2 * i + 1] = TO_F32(w[i] >> 16);                                                 }                                                                                          }                                                                                          }                                                                                              template <int V> TF_INLINE void tf_stv(T *p, const float (&o)[V]) {                               _Pragma("unroll") for (int k = 0; k < V / 8; ++k) {                                                unsigned int w[4];                                                                             _Pragma("unroll") for (int i = 0; i < 4; ++i)                                                      w[i] = FROM_F32(o[8 * k + 2 * i]) | (FROM_F32(o[8 * k + 2 * i + 1]) << 16);               uint4 q;                                                                                       q.x = w[0]; q.y = w[1]; q.z = w[2]; q.w = w[3];                                                reinterpret_cast<uint4 *>(p)[k] = q;                                                       }                                                                                          }
TF_STORAGE16(tf_st_bf16, tf_bf16_to_f32, tf_f32_to_bf16)
TF_STORAGE16(tf_st_f16, tf_f16_to_f32, tf_f32_to_f16)
#undef TF_STORAGE16
"#;

/// The device prelude: the C prelude's helpers as `__device__` functions (with CUDA's bit
/// casts and, under NVRTC, no system header), the storage types and vector accesses, then
/// the block reductions.
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
    s.push_str(STORAGE_HELPERS);
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
    /// Element type of the `I` and `O` arguments (scratch is f32).
    pub storage: Storage,
    /// Consecutive columns a thread takes per step (more than 1: 128-bit accesses).
    pub cols_per_thread: usize,
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

/// Render every kernel of `p` that has a CUDA form, with f32 tensors.
pub fn render_program(p: &Program) -> CudaProgram {
    render_program_with(p, &CudaOptions::default())
}

/// Render every kernel of `p` that has a CUDA form, as `o` says.
pub fn render_program_with(p: &Program, o: &CudaOptions) -> CudaProgram {
    let mut out = CudaProgram::default();
    for (i, k) in p.kernels.iter().enumerate() {
        match render_kernel_with(&p.graph, k, i, o) {
            Ok(c) => out.kernels.push(c),
            Err(why) => out.skipped.push((i, why)),
        }
    }
    out
}

/// The files `codegen --target cuda` writes: `prelude.cuh` (the device prelude), one
/// `<kernel>.cu` per rendered kernel (the fusion decisions as comments, then the kernel),
/// `kernels.cu` (the self-contained translation unit, for `nvcc -c` or NVRTC), and
/// `manifest.json` (the storage type; per kernel: function, parameters, rows, columns,
/// columns per thread step, scratch floats per block, tensor names; the launch contract;
/// the kernels left out, with the reason).
pub fn files(p: &Program, o: &CudaOptions) -> Vec<(String, String)> {
    let cp = render_program_with(p, o);
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
            "row_unit": ck.unit, "cols_per_thread": ck.cols_per_thread,
            "scratch_floats_per_unit": ck.scratch_floats,
            "inputs": names(&ck.inputs), "outputs": names(&ck.outputs),
        }));
    }
    out.push(("kernels.cu".into(), cp.source()));
    let m = serde_json::json!({
        "schema_version": 3, "target": "cuda", "storage": o.storage,
        "storage_bytes_per_element": o.storage.bytes(),
        "launch": format!("grid: any number of blocks (rows are grid-strided); block: {BLOCK_THREADS} threads (any multiple of 32 up to 1024); a row unit is a warp or the block; scratch: gridDim.x * (units per block) * scratch_floats_per_unit floats"),
        "kernels": manifest, "interpreted": super::interpreted_json(p, &cp.skipped),
    });
    out.push((
        "manifest.json".into(),
        serde_json::to_string_pretty(&m).unwrap_or_default(),
    ));
    out
}

/// Render kernel `k` (index `idx` in its program) as a `__global__` function with f32
/// tensors ([`CudaOptions::default`]), or say why it has no CUDA form.
pub fn render_kernel(tg: &TypedGraph, k: &Kernel, idx: usize) -> Result<CudaKernel, String> {
    render_kernel_with(tg, k, idx, &CudaOptions::default())
}

/// A loop over this thread's columns of the row: each `(value, pointer)` of `reads` is
/// loaded as the float `value` before `body` (the pointer is indexed by the column `c`),
/// and each of `writes` declared before it and stored after it. With `v` > 1 the thread
/// takes `v` consecutive columns at a time through 128-bit loads and stores (`tf_ldv`,
/// `tf_stv`), so a warp moves 32 × 16 contiguous bytes per instruction; `v` must divide
/// every row's column count and the pointers must be 16-byte aligned at column 0.
fn cols_loop(
    v: usize,
    ind: &str,
    reads: &[(String, String)],
    writes: &[(String, String)],
    body: &str,
) -> String {
    let mut w = String::new();
    let inner = format!("{ind}    ");
    let body: String = body
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("{inner}{}{}\n", if v > 1 { "    " } else { "" }, l.trim()))
        .collect();
    if v == 1 {
        let _ = writeln!(w, "{ind}for (int64_t c = t0; c < cn; c += nt) {{");
        for (x, ptr) in reads {
            let _ = writeln!(w, "{inner}const float {x} = ({ptr})[c];");
        }
        for (y, _) in writes {
            let _ = writeln!(w, "{inner}float {y};");
        }
        w.push_str(&body);
        for (y, ptr) in writes {
            let _ = writeln!(w, "{inner}({ptr})[c] = {y};");
        }
        let _ = writeln!(w, "{ind}}}");
        return w;
    }
    let _ = writeln!(
        w,
        "{ind}for (int64_t c0 = t0 * {v}LL; c0 < cn; c0 += nt * {v}LL) {{"
    );
    for (x, ptr) in reads {
        let _ = writeln!(w, "{inner}float {x}_v[{v}]; tf_ldv(({ptr}) + c0, {x}_v);");
    }
    for (y, _) in writes {
        let _ = writeln!(w, "{inner}float {y}_v[{v}];");
    }
    let _ = writeln!(w, "{inner}#pragma unroll");
    let _ = writeln!(w, "{inner}for (int j = 0; j < {v}; ++j) {{");
    let _ = writeln!(w, "{inner}    const int64_t c = c0 + j; (void)c;");
    for (x, _) in reads {
        let _ = writeln!(w, "{inner}    const float {x} = {x}_v[j];");
    }
    for (y, _) in writes {
        let _ = writeln!(w, "{inner}    float {y};");
    }
    w.push_str(&body);
    for (y, _) in writes {
        let _ = writeln!(w, "{inner}    {y}_v[j] = {y};");
    }
    let _ = writeln!(w, "{inner}}}");
    for (y, ptr) in writes {
        let _ = writeln!(w, "{inner}tf_stv(({ptr}) + c0, {y}_v);");
    }
    let _ = writeln!(w, "{ind}}}");
    w
}

/// Render kernel `k` (index `idx` in its program) as a `__global__` function whose tensors
/// are stored as `o.storage`, or say why it has no CUDA form.
pub fn render_kernel_with(
    tg: &TypedGraph,
    k: &Kernel,
    idx: usize,
    o: &CudaOptions,
) -> Result<CudaKernel, String> {
    let mut nest = lower(tg, k)?;
    nest.flat_as_values = true;
    let nest = nest;
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
        // A LogSumExp's scratch row (the C target keeps its exponentials there) is not used
        // here: the sum is taken as the exponentials are computed.
        has_lse: _,
        scratch_floats,
        gathers,
        flat_as_values: _,
    } = &nest;
    let (elementwise, elems, rows, cols, scratch_floats) =
        (*elementwise, *elems, *rows, *cols, *scratch_floats);
    let l = cols;
    // Columns per thread step: the option's where every row (the last elementwise row too)
    // splits into whole vectors, else one.
    let v = o.cols_per_thread;
    let v = if v > 1 && l.is_multiple_of(v) && (!elementwise || elems.is_multiple_of(v)) {
        v
    } else {
        1
    };
    let st = o.storage.c_type();
    let sym = format!("tf_k{idx}");
    let mut w = String::new();
    let _ = writeln!(
        w,
        "/* kernel {} ({:?}), {rows} rows x {cols} columns, {} storage, {v} columns per thread step: nodes {} */",
        k.name,
        k.kind,
        o.storage.label(),
        k.nodes
            .iter()
            .map(|&n| tg.nodes[n].name.replace("*/", "* /"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut params: Vec<String> = (0..inputs.len())
        .map(|i| format!("const {st} *__restrict__ I{i}"))
        .collect();
    params.extend((0..k.outputs.len()).map(|o| format!("{st} *__restrict__ O{o}")));
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
    let lp = |reads: &[(&str, &str)], writes: &[(&str, &str)], body: &str| -> String {
        let own = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        cols_loop(v, "          ", &own(reads), &own(writes), body)
    };
    let mut pi = 0;
    while pi < plans.len() {
        let p = &plans[pi];
        let op = &tg.nodes[p.node].op;
        match steps[pi] {
            Step::Elem(_) => {
                let (body, next) = nest.run_body(tg, pi)?;
                // The run's row-major inputs, loaded before the body, and its stores.
                let mut reads: Vec<(String, String)> = vec![];
                let mut writes: Vec<(String, String)> = vec![];
                for (qi, q) in plans[pi..next].iter().enumerate() {
                    for b in &q.binds {
                        let r = match b {
                            Bind::Flat(t) if !q.per_row => {
                                let i = slot_of[t];
                                (format!("in{i}"), format!("I{i} + r * {l}LL"))
                            }
                            // A full value from outside this run: its scratch row.
                            Bind::Internal {
                                pos,
                                per_row: false,
                                ..
                            } if steps[*pos] != steps[pi] => {
                                (format!("ra{pos}"), format!("a{pos}"))
                            }
                            _ => continue,
                        };
                        if !reads.contains(&r) {
                            reads.push(r);
                        }
                    }
                    if needs_row[pi + qi] {
                        let q = pi + qi;
                        writes.push((format!("row{q}"), format!("a{q}")));
                    }
                    if let Some(o) = q.store {
                        writes.push((format!("out{o}"), format!("O{o} + r * {l}LL")));
                    }
                }
                w.push_str(&cols_loop(v, "        ", &reads, &writes, &body));
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
                let _ = writeln!(w, "        {{ const auto *x = {x};");
                // The row's max ignoring NaN and whether it holds one, for the softmax family.
                let row_max = format!(
                    "          float mt = -INFINITY; int nan = 0;\n{}          const float m = {max}(mt, &nan);\n          const int fin = !nan && m != INFINITY && m != -INFINITY;\n",
                    lp(&[("xv", "x")], &[], "nan |= xv != xv; mt = xv > mt ? xv : mt;")
                );
                // Σ e^(x − m) over the row (the exponentials are computed again where they
                // are written, so a 16-bit output is rounded once, from the float).
                let exp_sum = format!(
                    "          double s = 0.0;\n{}          s = {sum}(s);\n",
                    lp(&[("xv", "x")], &[], "s += (double)tf_exp_nonpos(xv - m);")
                );
                match op {
                    Op::ReduceSum { .. } | Op::ReduceMean { .. } => {
                        let div = if matches!(op, Op::ReduceMean { .. }) {
                            format!(" / (double){l}")
                        } else {
                            String::new()
                        };
                        let _ = write!(
                            w,
                            "          double s = 0.0;\n{}          p{pi} = (float)({sum}(s){div}); }}\n",
                            lp(&[("xv", "x")], &[], "s += (double)xv;")
                        );
                    }
                    Op::ReduceMax { .. } => {
                        let _ = write!(
                            w,
                            "          float mt = -INFINITY; int nan = 0;\n{}          p{pi} = {max}(mt, &nan); }}\n",
                            lp(&[("xv", "x")], &[], "nan |= xv != xv; mt = xv > mt ? xv : mt;")
                        );
                    }
                    Op::Softmax { .. } => {
                        let _ = write!(
                            w,
                            "{row_max}          auto *y = {ydst};\n          if (fin) {{\n{exp_sum}          const float inv = (float)(1.0 / s);\n{}          }} else {{\n          const float f = (nan || m == INFINITY) ? NAN : 0.0f;\n{}          }} }}\n",
                            lp(&[("xv", "x")], &[("yv", "y")], "yv = tf_exp_nonpos(xv - m) * inv;"),
                            lp(&[], &[("yv", "y")], "yv = f;")
                        );
                    }
                    Op::LogSoftmax { .. } => {
                        let _ = write!(
                            w,
                            "{row_max}          auto *y = {ydst};\n          if (fin) {{\n{exp_sum}          const float ls = (float)log(s);\n{}          }} else {{\n          const float f = (nan || m == INFINITY) ? NAN : -INFINITY;\n{}          }} }}\n",
                            lp(&[("xv", "x")], &[("yv", "y")], "yv = (xv - m) - ls;"),
                            lp(&[], &[("yv", "y")], "yv = f;")
                        );
                    }
                    Op::LogSumExp { .. } => {
                        let _ = write!(
                            w,
                            "{row_max}          if (fin) {{\n{exp_sum}          p{pi} = (float)((double)m + log(s)); }}\n          else p{pi} = nan ? NAN : m; }}\n"
                        );
                    }
                    Op::RmsNorm { eps } => {
                        let g = param(1)?;
                        let _ = write!(
                            w,
                            "          double s = 0.0;\n{}          const float inv = (float)(1.0 / sqrt({sum}(s) / (double){l} + {eps:?}));\n          auto *y = {ydst};\n{} }}\n",
                            lp(&[("xv", "x")], &[], "s += (double)xv * (double)xv;"),
                            lp(&[("xv", "x"), ("gv", &g)], &[("yv", "y")], "yv = xv * inv * gv;")
                        );
                    }
                    Op::LayerNorm { eps } => {
                        let g = param(1)?;
                        let b = param(2)?;
                        let _ = write!(
                            w,
                            "          double s = 0.0;\n{}          const double mean = {sum}(s) / (double){l};\n          double d2 = 0.0;\n{}          const float inv = (float)(1.0 / sqrt({sum}(d2) / (double){l} + {eps:?}));\n          const float mf = (float)mean;\n          auto *y = {ydst};\n{} }}\n",
                            lp(&[("xv", "x")], &[], "s += (double)xv;"),
                            lp(&[("xv", "x")], &[], "const double d = (double)xv - mean; d2 += d * d;"),
                            lp(
                                &[("xv", "x"), ("gv", &g), ("bv", &b)],
                                &[("yv", "y")],
                                "yv = (xv - mf) * inv * gv + bv;"
                            )
                        );
                    }
                    other => return Err(format!("{} has no CUDA form", other.name())),
                }
                if p.per_row {
                    if let Some(o) = p.store {
                        let _ = writeln!(w, "        if (t0 == 0) O{o}[r] = p{pi};");
                    }
                } else if let (Some(o), true) = (p.store, needs_row[pi]) {
                    let a = format!("a{pi}");
                    let dst = format!("O{o} + r * {l}LL");
                    w.push_str(&cols_loop(
                        v,
                        "        ",
                        &[("av".to_string(), a)],
                        &[("ov".to_string(), dst)],
                        "ov = av;",
                    ));
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
        storage: o.storage,
        cols_per_thread: v,
        source: w,
    })
}
