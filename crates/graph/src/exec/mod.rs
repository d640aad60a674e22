//! CPU executor for a [`Program`]. The unfused program runs one op per kernel with every
//! tensor materialized; the fused program evaluates each fused kernel in blocks (about
//! [`BLOCK_ELEMS`] elements, so that a kernel's scratch fits L1, whole rows for row and matmul kernels) with rayon over blocks,
//! every node of the kernel computed op by op into small per-thread scratch buffers that
//! stay in L1/L2, and only the kernel's outputs stored to full-size buffers; on AVX2 CPUs pure
//! elementwise kernels run register-tiled instead (module `tile`). Max/Min are IEEE
//! maxNum/minNum in every path (`fmax`, `fmin`). Numerics come
//! from the Kernels crate where it has them (softmax, log-softmax, logsumexp, logaddexp,
//! the fused RMSNorm+SwiGLU). MatMul runs on faer (module `gemm`): a matmul kernel computes
//! each product whole first (into its output buffer when stored), then evaluates its fused
//! elementwise epilogue (bias, activation, residual) per block of output rows from that
//! product; a MatMul operand that is a transpose of the last two axes of a stored tensor is
//! read in place through swapped strides, never copied. The executor does not count bytes:
//! what a kernel moves is the traffic model's figure ([`crate::traffic`]), labelled model
//! wherever it is printed. Inputs and weights are borrowed for a run, never copied. Values are held in f32
//! whatever the declared dtype (Cast to bf16 rounds; other casts keep f32). Other views are
//! materialized on demand as uncounted copies (the model treats them as strided aliases).
//! Not executable: Opaque ops.
//
// Files by job: `inputs` (seeded input values), `pool` (recycled buffers and the memory
// check), `program` (the interpreter: one kernel after another, views, whole-tensor ops,
// compiled kernels), `blocks` (the block evaluator of elementwise, row and matmul kernels),
// `elementwise` (the scalar loops of each op), `tile` (the AVX2 register-tiled path), `conv`
// (convolutions as GEMMs), `winograd` (3×3 convolutions by F(2×2, 3×3)), `pooling` (max
// and average pooling), `gather_elements` (ONNX GatherElements), `recurrence` (LSTM and GRU layers), `spin` (a worker kept awake during runs); this
// file holds the entry points, the result type and the fused-vs-unfused comparison.

mod attention;
mod blocks;
mod conv;
mod depthwise;
mod depthwise_planes;
mod depthwise_small;
mod depthwise_tiny;
mod elementwise;
mod gather;
mod gather_elements;
mod inputs;
mod lanes;
mod linear;
mod pool;
mod pooling;
mod program;
mod recurrence;
mod spin;
#[cfg(target_arch = "x86_64")]
mod tile;
mod winograd;

pub use blocks::BLOCK_ELEMS;
pub(crate) use blocks::{plan_nodes, Bind, NodePlan};
pub use inputs::{fill_inputs, random_values, to_executor_values, MAX_EXACT_INT};
pub use pool::{available_memory_bytes, Pool, MAX_EXEC_ELEMENTS};

use crate::error::Result;

/// What the executor derives from a program's kernels once and keeps in the program
/// ([`Program`]'s memo): each blocked kernel's node plan, by kernel index, made on the first
/// run, and each Winograd convolution's transformed filters (module `winograd`). Cloning a
/// program clones what it holds (still valid: plans depend only on the program, and
/// transformed filters are used only while a run binds the weight they came from).
#[derive(Default, Clone)]
pub struct ExecMemo {
    plans: std::sync::OnceLock<Vec<Option<blocks::MemoPlans>>>,
    releases: std::sync::OnceLock<Vec<Vec<usize>>>,
    reads: std::sync::OnceLock<Vec<Vec<usize>>>,
    filters: winograd::FilterCache,
}

impl std::fmt::Debug for ExecMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExecMemo")
    }
}

impl ExecMemo {
    /// The plans of `p`'s blocked kernels (None where planning fails: that kernel plans again
    /// when it runs, and reports the error there).
    pub(crate) fn plans(&self, p: &Program) -> &[Option<blocks::MemoPlans>] {
        self.plans.get_or_init(|| {
            p.kernels
                .iter()
                .map(|k| match k.kind {
                    crate::fusion::KernelKind::Elementwise
                    | crate::fusion::KernelKind::Row
                    | crate::fusion::KernelKind::Matmul => {
                        plan_nodes(&p.graph, k).ok().map(|pl| (k.nodes.clone(), pl))
                    }
                    _ => None,
                })
                .collect()
        })
    }

    /// By kernel index, the tensors that kernel reads from outside itself
    /// ([`program::kernel_reads`]), found once: on a 32 × 32 MobileNetV2 (60 kernels, a
    /// 110 µs run) finding them on every run took 3–4 % of it.
    pub(crate) fn reads(&self, p: &Program) -> &[Vec<usize>] {
        self.reads.get_or_init(|| {
            p.kernels
                .iter()
                .map(|k| program::kernel_reads(&p.graph, k))
                .collect()
        })
    }

    /// By kernel index, the tensors whose buffers go back to the pool once that kernel has
    /// run: the planner's lifetimes ([`crate::planner::intervals`]): a tensor lives to the
    /// last kernel that reads it, directly or through views, and a graph output (or a view
    /// of one) to the end. Inputs and weights (borrowed) and Reshapes (sharing their
    /// source's buffer) own nothing; a materialized Transpose is released like a kernel's
    /// output.
    pub(crate) fn releases(&self, p: &Program) -> &[Vec<usize>] {
        self.releases.get_or_init(|| {
            let tg = &p.graph;
            let kof = p.kernel_of_node();
            let mut out = vec![vec![]; p.kernels.len()];
            for t in 0..tg.tensors.len() {
                if matches!(
                    tg.nodes[tg.producer[t]].op,
                    crate::ir::Op::Input { .. }
                        | crate::ir::Op::Weight { .. }
                        | crate::ir::Op::Reshape { .. }
                ) || crate::fusion::exposed(tg, t)
                {
                    continue;
                }
                let last = crate::fusion::readers(tg, t)
                    .iter()
                    .filter_map(|&r| kof[r])
                    .max();
                if let Some(k) = last {
                    out[k].push(t);
                }
            }
            out
        })
    }
}
use crate::fusion::Program;
use program::{run_program_checked, State};
use std::collections::HashMap;

/// Relative tolerance (of the tensor's largest magnitude) for fused vs unfused agreement.
pub const RTOL: f32 = 1e-4;
/// Absolute tolerance for fused vs unfused agreement.
pub const ATOL: f32 = 1e-5;

/// Result of one execution.
#[derive(Debug, Clone)]
pub struct ExecResult {
    /// Graph outputs: name, shape, values.
    pub outputs: Vec<(String, Vec<usize>, Vec<f32>)>,
    /// Wall time of the whole run, ns: binding inputs, every kernel, handing the outputs
    /// over (what a caller pays per call; an output is the run's own buffer, copied only
    /// where it is borrowed or shared with another output).
    pub elapsed_ns: u64,
    /// Wall time of each kernel of the program, in program order, ns (the views and copies a
    /// kernel's inputs need are counted in its time).
    pub kernel_ns: Vec<u64>,
}

/// Threads the executor's parallel loops use (the current rayon pool; `RAYON_NUM_THREADS`
/// sets it for the CLI).
pub fn worker_threads() -> usize {
    rayon::current_num_threads()
}

/// Run `f` with every parallel loop and GEMM of the executor on `threads` worker threads
/// (a pool of its own; [`worker_threads`] reports `threads` inside `f`).
///
/// ```
/// let n = tensorforge_graph::exec::with_threads(3, tensorforge_graph::exec::worker_threads).unwrap();
/// assert_eq!(n, 3);
/// ```
pub fn with_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> Result<R> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .start_handler(|_| spin::mark_spinning_pool())
        .build()
        .map_err(|e| {
            crate::GraphError::Argument(format!("cannot start {threads} worker threads: {e}"))
        })?;
    Ok(pool.install(f))
}

/// The values a run reads, by tensor name: a map the caller keeps (weights, inputs it
/// converted) and this call's f32 feeds, borrowed where they lie (a feed takes precedence
/// over the map's value of the same name). Nothing is copied: the run reads both in place.
#[derive(Debug, Clone, Copy)]
pub struct Values<'a> {
    map: &'a HashMap<String, Vec<f32>>,
    feeds: &'a [(&'a str, &'a [f32])],
}

impl<'a> Values<'a> {
    /// `map`'s values, with `feeds` over them.
    pub fn new(map: &'a HashMap<String, Vec<f32>>, feeds: &'a [(&'a str, &'a [f32])]) -> Self {
        Values { map, feeds }
    }

    /// The values of tensor `name` (a feed first, else the map's).
    pub fn get(&self, name: &str) -> Option<&'a [f32]> {
        self.feeds
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .or_else(|| self.map.get(name).map(Vec::as_slice))
    }
}

/// Execute a program on the given Input / Weight values (by tensor name).
pub fn execute(p: &Program, inputs: &HashMap<String, Vec<f32>>) -> Result<ExecResult> {
    execute_pooled(p, inputs, &mut Pool::default())
}

/// [`execute`] with buffers taken from and returned to `pool`.
pub fn execute_pooled(
    p: &Program,
    inputs: &HashMap<String, Vec<f32>>,
    pool: &mut Pool,
) -> Result<ExecResult> {
    execute_with(p, inputs, pool, None)
}

/// [`execute_pooled`], running the kernels `jit` compiled for `p` as native code (see
/// [`crate::jit`]) and every other kernel in the interpreter. `jit` must come from
/// [`crate::jit::compile`] on this same program.
pub fn execute_with(
    p: &Program,
    inputs: &HashMap<String, Vec<f32>>,
    pool: &mut Pool,
    jit: Option<&crate::jit::Jit>,
) -> Result<ExecResult> {
    execute_values(p, Values::new(inputs, &[]), pool, jit)
}

/// [`execute_with`] on [`Values`]: a caller's map and feeds borrowed for this call.
///
/// ```
/// use std::collections::HashMap;
/// use tensorforge_graph::exec::{execute_values, Pool, Values};
/// let g = tensorforge_graph::Graph::from_json_str(r#"{"nodes":[
///   {"name":"x","op":"Input","attrs":{"shape":[2],"dtype":"fp32"}},
///   {"name":"w","op":"Weight","attrs":{"shape":[2],"dtype":"fp32"}},
///   {"name":"y","op":"Add","inputs":["x","w"]}]}"#).unwrap();
/// let p = tensorforge_graph::fusion::compile(&g).unwrap().fused;
/// let weights = HashMap::from([("w".to_string(), vec![10.0f32, 20.0])]);
/// let x = [1.0f32, 2.0];
/// let feeds = [("x", &x[..])];
/// let r = execute_values(&p, Values::new(&weights, &feeds), &mut Pool::default(), None).unwrap();
/// assert_eq!(r.outputs[0].2, vec![11.0, 22.0]);
/// ```
pub fn execute_values(
    p: &Program,
    inputs: Values<'_>,
    pool: &mut Pool,
    jit: Option<&crate::jit::Jit>,
) -> Result<ExecResult> {
    // The whole call is timed, binding the buffers and handing them back included: what a
    // caller pays per run (the program's own clock starts after the binding).
    let t0 = std::time::Instant::now();
    // On a pool of several workers, the others stay awake for the run (module `spin`).
    let _spin = spin::Spin::start();
    let tg = &p.graph;
    let mut st = State {
        tg,
        bufs: program::Bufs::new(tg.tensors.len()),
        pool: std::mem::take(pool),
        filters: &p.exec_memo.filters,
    };
    let r = run_program_checked(p, inputs, &mut st, jit, None);
    st.bufs.release_into(&mut st.pool);
    *pool = std::mem::take(&mut st.pool);
    r.map(|mut x| {
        x.elapsed_ns = t0.elapsed().as_nanos() as u64;
        x
    })
}

/// [`execute`] in the interpreter, calling `observe(kernel, tensor, values)` with each
/// tensor the kernel reads from outside (a MatMul's transposed operand as its source)
/// before it runs and its outputs after: what [`run_kernel_alone`] needs, and what another
/// back end needs to run one kernel alone and compare (`tensorforge-cuda` does).
///
/// ```
/// use std::collections::HashMap;
/// let g = tensorforge_graph::Graph::from_json_str(r#"{"nodes":[
///   {"name":"x","op":"Input","attrs":{"shape":[2],"dtype":"fp32"}},
///   {"name":"y","op":"Exp","inputs":["x"]}]}"#).unwrap();
/// let p = tensorforge_graph::fusion::compile(&g).unwrap().fused;
/// let ins = HashMap::from([("x".to_string(), vec![0.0f32, 1.0])]);
/// let mut seen = vec![];
/// tensorforge_graph::exec::execute_observed(&p, &ins, &mut |k, t, v: &[f32]| {
///     seen.push((k, p.graph.tensors[t].name.clone(), v.to_vec()))
/// }).unwrap();
/// assert_eq!(seen[0], (0, "x".to_string(), vec![0.0, 1.0]));
/// assert_eq!(seen[1].1, "y");
/// ```
pub fn execute_observed(
    p: &Program,
    inputs: &HashMap<String, Vec<f32>>,
    observe: &mut dyn FnMut(usize, usize, &[f32]),
) -> Result<ExecResult> {
    let tg = &p.graph;
    let mut st = State {
        tg,
        bufs: program::Bufs::new(tg.tensors.len()),
        pool: Pool::default(),
        filters: &p.exec_memo.filters,
    };
    let r = run_program_checked(p, Values::new(inputs, &[]), &mut st, None, Some(observe));
    st.bufs.release_into(&mut st.pool);
    r
}

/// Kernel `k` (one of `p`'s, or one made of its nodes, such as a matmul kernel's epilogue
/// from [`crate::fusion::matmul_epilogue`]) alone in the interpreter, on `values` by tensor
/// id (every tensor it reads, [`kernel_reads`], as [`execute_observed`] reports them); its
/// outputs in the kernel's output order. A back end that runs some kernels itself runs the
/// others this way.
///
/// ```
/// use std::collections::HashMap;
/// let g = tensorforge_graph::Graph::from_json_str(r#"{"nodes":[
///   {"name":"x","op":"Input","attrs":{"shape":[2],"dtype":"fp32"}},
///   {"name":"y","op":"Exp","inputs":["x"]}]}"#).unwrap();
/// let p = tensorforge_graph::fusion::compile(&g).unwrap().fused;
/// let x = p.graph.tensors.iter().position(|t| t.name == "x").unwrap();
/// let vals = HashMap::from([(x, vec![0.0, 1.0])]);
/// let out = tensorforge_graph::exec::run_kernel_alone(&p, &p.kernels[0], &vals).unwrap();
/// assert_eq!(out[0][0], 1.0);
/// ```
pub fn run_kernel_alone(
    p: &Program,
    k: &crate::fusion::Kernel,
    values: &HashMap<usize, Vec<f32>>,
) -> Result<Vec<Vec<f32>>> {
    program::run_kernel_alone(p, k, values)
}

/// The tensors kernel `k` reads from outside itself, each once, in first-use order; for a
/// MatMul operand (and the attention's q, kt, v) that is a transpose of the last two axes,
/// the transpose's source (the GEMM reads it strided).
pub fn kernel_reads(tg: &crate::ir::TypedGraph, k: &crate::fusion::Kernel) -> Vec<usize> {
    program::kernel_reads(tg, k)
}

/// The source of tensor `t` when `t` is a Transpose of its last two axes only (batch axes
/// in place), which a GEMM reads in place as a transposed operand; None otherwise.
pub fn transposed_source(tg: &crate::ir::TypedGraph, t: usize) -> Option<usize> {
    crate::gemm::transposed_source(tg, t)
}

/// `src` (row-major, `shape`) with its axes permuted by `perm` (output axis `i` is input
/// axis `perm[i]`), as the interpreter materializes a Transpose.
///
/// ```
/// // [[1, 2, 3], [4, 5, 6]] transposed
/// let t = tensorforge_graph::exec::transpose(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &[1, 0]);
/// assert_eq!(t, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
/// ```
pub fn transpose(src: &[f32], shape: &[usize], perm: &[usize]) -> Vec<f32> {
    let mut out = vec![];
    program::transpose_into(src, shape, perm, &mut out);
    out
}

/// Where one kernel's time goes: [`profile`]'s row.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KernelProfile {
    /// Kernel name.
    pub kernel: String,
    /// Loop-nest kind.
    pub kind: crate::fusion::KernelKind,
    /// The ops it runs, in order (`MatMul+Add+GELU`).
    pub ops: String,
    /// Whether the JIT ran it (else the interpreter).
    pub jit: bool,
    /// Its best time over the runs, ns.
    pub best_ns: u64,
    /// Its share of the sum of the best times.
    pub share: f64,
}

/// Run `p` `reps` times (with `jit` where given) and report each kernel's best time,
/// slowest first: what a kernel engineer looks at before touching code.
pub fn profile(
    p: &Program,
    inputs: &HashMap<String, Vec<f32>>,
    jit: Option<&crate::jit::Jit>,
    reps: usize,
) -> Result<Vec<KernelProfile>> {
    let mut best = vec![u64::MAX; p.kernels.len()];
    let mut pool = Pool::default();
    for _ in 0..reps.max(1) {
        let r = execute_with(p, inputs, &mut pool, jit)?;
        for (b, t) in best.iter_mut().zip(&r.kernel_ns) {
            *b = (*b).min(*t);
        }
        // The outputs back to the pool: every run after the first writes memory already
        // paged in, as in a serving loop.
        for (_, _, v) in r.outputs {
            pool.recycle(v);
        }
    }
    let total: u64 = best.iter().sum();
    let mut rows: Vec<KernelProfile> = p
        .kernels
        .iter()
        .zip(&best)
        .enumerate()
        .map(|(i, (k, &t))| KernelProfile {
            kernel: k.name.clone(),
            kind: k.kind,
            ops: k
                .nodes
                .iter()
                .map(|&n| p.graph.nodes[n].op.name())
                .collect::<Vec<_>>()
                .join("+"),
            jit: jit.is_some_and(|j| j.kernels.get(i).is_some_and(|k| k.is_some())),
            best_ns: t,
            share: t as f64 / total.max(1) as f64,
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.best_ns));
    Ok(rows)
}

/// Keep, per kernel, the faster of the JIT's generated code and the interpreter's kernel
/// (the Kernels crate's hand-written softmax and logaddexp can beat generated C): both run
/// `reps` times, alternating, and a compiled kernel whose best time is more than 5 % above
/// the interpreter's best is handed back to the interpreter (listed in `jit.skipped` with
/// both times). Returns one line per kernel handed back.
pub fn keep_faster(
    p: &Program,
    inputs: &HashMap<String, Vec<f32>>,
    jit: &mut crate::jit::Jit,
    reps: usize,
) -> Result<Vec<String>> {
    let n = p.kernels.len();
    let (mut with, mut without) = (vec![u64::MAX; n], vec![u64::MAX; n]);
    let mut pool = Pool::default();
    for _ in 0..reps.max(1) {
        let j = execute_with(p, inputs, &mut pool, Some(jit))?;
        let i = execute_with(p, inputs, &mut pool, None)?;
        for k in 0..n {
            with[k] = with[k].min(j.kernel_ns.get(k).copied().unwrap_or(u64::MAX));
            without[k] = without[k].min(i.kernel_ns.get(k).copied().unwrap_or(u64::MAX));
        }
        for (_, _, v) in j.outputs.into_iter().chain(i.outputs) {
            pool.recycle(v);
        }
    }
    let mut lines = vec![];
    for k in 0..n {
        if jit.kernels[k].is_some() && (without[k] as f64) * 1.05 < with[k] as f64 {
            jit.kernels[k] = None;
            let why = format!(
                "the interpreter's kernel is faster here ({} ns vs {} ns compiled)",
                without[k], with[k]
            );
            lines.push(format!("{}: {why}", p.kernels[k].name));
            jit.skipped.push((p.kernels[k].name.clone(), why));
        }
    }
    Ok(lines)
}

/// True when every output agrees norm-wise: `|a − b| ≤ ATOL + RTOL · max|b|` over the
/// tensor's finite values (matmul and reduction sums are reassociated between the paths);
/// NaN matches NaN and equal infinities match. Returns the worst absolute difference and where.
pub fn compare(a: &ExecResult, b: &ExecResult) -> (bool, f32, String) {
    let mut ok = true;
    let mut worst = 0.0f32;
    let mut at = String::new();
    for ((n, _, x), (_, _, y)) in a.outputs.iter().zip(&b.outputs) {
        if x.len() != y.len() {
            return (false, f32::INFINITY, n.clone());
        }
        let scale = y
            .iter()
            .filter(|v| v.is_finite())
            .fold(0.0f32, |m, v| m.max(v.abs()));
        for (i, (&u, &v)) in x.iter().zip(y).enumerate() {
            let same = (u.is_nan() && v.is_nan()) || u == v;
            if same {
                continue;
            }
            let d = (u - v).abs();
            if d.is_nan() || d > ATOL + RTOL * scale {
                ok = false;
            }
            if d.is_nan() || d > worst {
                worst = d;
                at = format!("{n}[{i}]");
            }
        }
    }
    (ok, worst, at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::compile;
    use crate::ir::Graph;

    thread_local! {
        /// Transposes materialized by `State::ensure` on this thread (the executor's view
        /// handling runs on the calling thread), to observe that a MatMul operand was read
        /// in place.
        pub(super) static TRANSPOSE_COPIES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn load(name: &str) -> Graph {
        let p = format!(
            "{}/../../examples/graphs/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        Graph::from_json_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    #[test]
    fn repeated_runs_do_not_grow_the_pool() {
        // Every buffer a run puts back must have been taken from the pool, or the pool (and
        // the peak memory a harness measures) grows with the iteration count.
        for name in [
            "rmsnorm_swiglu_mlp",
            "attention_softmax",
            "logaddexp_chain",
            "residual_layernorm",
        ] {
            let c = compile(&load(name)).unwrap();
            let mut ins = HashMap::new();
            fill_inputs(&c.unfused.graph, &mut ins, 3).unwrap();
            for p in [&c.fused, &c.unfused] {
                let mut pool = Pool::default();
                execute_pooled(p, &ins, &mut pool).unwrap();
                let after_first = pool.held_bytes();
                for _ in 0..3 {
                    execute_pooled(p, &ins, &mut pool).unwrap();
                }
                assert_eq!(pool.held_bytes(), after_first, "{name}");
            }
        }
    }

    #[test]
    fn reshapes_share_their_source_buffer() {
        // x [4, 8] → Reshape [8, 4] → Exp → Reshape [32] (the output), and a chain of two
        // reshapes of the input read by a Neg. Only the two computed tensors own buffers, and
        // both leave with the result (y shares e's buffer): the pool holds nothing after a
        // run. A reshape copied (as before) would leave its copy, or the buffer it copied
        // from, in the pool: 32 f32 = 128 bytes per copy.
        let g = Graph::from_json_str(
            r#"{"schema_version":1,"name":"views","nodes":[
              {"name":"x","op":"Input","attrs":{"shape":[4,8],"dtype":"fp32"}},
              {"name":"r","op":"Reshape","attrs":{"shape":[8,4]},"inputs":["x"]},
              {"name":"e","op":"Exp","inputs":["r"]},
              {"name":"y","op":"Reshape","attrs":{"shape":[32]},"inputs":["e"]},
              {"name":"r2","op":"Reshape","attrs":{"shape":[2,16]},"inputs":["r"]},
              {"name":"n","op":"Neg","inputs":["r2"]}
            ],"outputs":["y","n"]}"#,
        )
        .unwrap();
        let c = compile(&g).unwrap();
        let x: Vec<f32> = (0..32).map(|i| i as f32 / 8.0).collect();
        let ins = HashMap::from([("x".to_string(), x.clone())]);
        for p in [&c.fused, &c.unfused] {
            let mut pool = Pool::default();
            let r = execute_pooled(p, &ins, &mut pool).unwrap();
            assert_eq!(pool.held_bytes(), 0);
            let y = &r.outputs.iter().find(|o| o.0 == "y").unwrap().2;
            let n = &r.outputs.iter().find(|o| o.0 == "n").unwrap().2;
            for i in 0..32 {
                assert!((y[i] - x[i].exp()).abs() <= 1e-6 * x[i].exp(), "y[{i}]");
                assert_eq!(n[i], -x[i], "n[{i}]");
            }
        }
    }

    #[test]
    fn dead_buffers_are_reused_within_a_run() {
        // Unfused, x → Exp → Neg → Exp → Neg → Exp is five kernels of 32 values each. Each
        // tensor dies after the kernel that reads it, so at most two buffers are live (a
        // kernel's input and its output): a, b, c and d take turns in two buffers, y leaves
        // in one of them with the result, and the pool ends holding the other, 32 · 4 = 128
        // bytes. Holding every tensor to the end of the run, it held a, b, c and d, 512.
        let g = Graph::from_json_str(
            r#"{"schema_version":1,"name":"chain","nodes":[
              {"name":"x","op":"Input","attrs":{"shape":[4,8],"dtype":"fp32"}},
              {"name":"a","op":"Exp","inputs":["x"]},
              {"name":"b","op":"Neg","inputs":["a"]},
              {"name":"c","op":"Exp","inputs":["b"]},
              {"name":"d","op":"Neg","inputs":["c"]},
              {"name":"y","op":"Exp","inputs":["d"]}
            ],"outputs":["y"]}"#,
        )
        .unwrap();
        let c = compile(&g).unwrap();
        assert_eq!(c.unfused.kernels.len(), 5);
        let x: Vec<f32> = (0..32).map(|i| i as f32 / 32.0).collect();
        let ins = HashMap::from([("x".to_string(), x.clone())]);
        let mut pool = Pool::default();
        let r = execute_pooled(&c.unfused, &ins, &mut pool).unwrap();
        assert_eq!(pool.held_bytes(), 128);
        for (i, &v) in r.outputs[0].2.iter().enumerate() {
            let want = (-(-(x[i].exp())).exp()).exp();
            assert!((v - want).abs() <= 1e-6, "y[{i}] = {v}, want {want}");
        }
    }

    #[test]
    fn every_example_agrees() {
        for name in [
            "rmsnorm_swiglu_mlp",
            "attention_softmax",
            "logaddexp_chain",
            "residual_layernorm",
        ] {
            let c = compile(&load(name)).unwrap();
            let mut ins = HashMap::new();
            fill_inputs(&c.unfused.graph, &mut ins, 7).unwrap();
            let u = execute(&c.unfused, &ins).unwrap();
            let f = execute(&c.fused, &ins).unwrap();
            let (ok, worst, at) = compare(&f, &u);
            assert!(ok, "{name}: worst {worst} at {at}");
        }
    }

    #[test]
    fn other_ops_run_and_agree() {
        // Non-last-axis reduction, keepdims=false, Concat, Broadcast, Quantize/Dequantize,
        // Cast to bf16, Pow, LogSoftmax, LayerNorm, Reshape inside a chain, an Opaque op.
        let g = Graph::from_json_str(
            r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[3,4],"dtype":"fp32"}},
          {"name":"g","op":"Weight","attrs":{"shape":[4],"dtype":"fp32"}},
          {"name":"b","op":"Weight","attrs":{"shape":[4],"dtype":"fp32"}},
          {"name":"s0","op":"ReduceSum","attrs":{"axis":0,"keepdims":false},"inputs":["x"]},
          {"name":"m1","op":"ReduceMean","attrs":{"axis":1,"keepdims":false},"inputs":["x"]},
          {"name":"bc","op":"Broadcast","attrs":{"shape":[2,3,4]},"inputs":["x"]},
          {"name":"cat","op":"Concat","attrs":{"axis":0},"inputs":["x","x"]},
          {"name":"q","op":"Quantize","attrs":{"scale":0.01,"zero_point":3},"inputs":["x"]},
          {"name":"dq","op":"Dequantize","attrs":{"scale":0.01,"zero_point":3},"inputs":["q"]},
          {"name":"c16","op":"Cast","attrs":{"to":"bf16"},"inputs":["dq"]},
          {"name":"p","op":"Pow","attrs":{"exponent":3.0},"inputs":["x"]},
          {"name":"r","op":"Reshape","attrs":{"shape":[12]},"inputs":["p"]},
          {"name":"t","op":"Tanh","inputs":["r"]},
          {"name":"ls","op":"LogSoftmax","inputs":["x"]},
          {"name":"ln","op":"LayerNorm","inputs":["ls","g","b"]}]}"#,
        )
        .unwrap();
        let c = compile(&g).unwrap();
        let mut ins = HashMap::new();
        fill_inputs(&c.unfused.graph, &mut ins, 11).unwrap();
        let u = execute(&c.unfused, &ins).unwrap();
        let f = execute(&c.fused, &ins).unwrap();
        let (ok, worst, at) = compare(&f, &u);
        assert!(ok, "{worst} at {at}");
        let out = |r: &ExecResult, n: &str| r.outputs.iter().find(|o| o.0 == n).unwrap().2.clone();
        let x = &ins["x"];
        // s0[j] = x[0][j] + x[1][j] + x[2][j].
        assert!((out(&u, "s0")[1] - (x[1] + x[5] + x[9])).abs() < 1e-6);
        assert_eq!(out(&u, "cat")[12..], x[..]);
        assert_eq!(out(&u, "bc")[12..], x[..]);
        // Dequantize(Quantize(x)) is x rounded to the 0.01 grid (|x| < 1 never saturates).
        assert!(out(&u, "c16")
            .iter()
            .zip(x)
            .all(|(a, b)| (a - b).abs() < 0.01));
        let op = Graph::from_json_str(
            r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[3],"dtype":"fp32"}},
          {"name":"o","op":"Opaque","attrs":{"name":"NonMaxSuppression","output_specs":[{"shape":[3],"dtype":"fp32"}]},"inputs":["x"]}]}"#,
        )
        .unwrap();
        let c = compile(&op).unwrap();
        let mut ins = HashMap::new();
        fill_inputs(&c.unfused.graph, &mut ins, 1).unwrap();
        let e = execute(&c.fused, &ins).unwrap_err().to_string();
        assert!(e.contains("NonMaxSuppression") && e.contains("`o`"), "{e}");
    }

    #[test]
    fn naive_overflows_rewritten_does_not() {
        let c = compile(&load("logaddexp_chain")).unwrap();
        let mut ins = HashMap::new();
        ins.insert("a".to_string(), vec![100.0f32; 4096]);
        ins.insert("b".to_string(), vec![100.0f32; 4096]);
        ins.insert("c".to_string(), vec![-5.0f32; 4096]);
        let u = execute(&c.unfused, &ins).unwrap();
        let f = execute(&c.fused, &ins).unwrap();
        // Naive: exp(100) = inf in f32, log(inf + ...) = inf.
        assert!(u.outputs[0].2[0].is_infinite());
        // Rewritten: logaddexp(logaddexp(100, 100), -5) = 100 + ln 2 + ~e^-105.7 = 100.693147.
        assert!(
            (f.outputs[0].2[0] - 100.693_15).abs() < 1e-4,
            "{}",
            f.outputs[0].2[0]
        );
    }

    #[test]
    fn softmax_rewrite_survives_large_logits() {
        let g = Graph::from_json_str(
            r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[2,2],"dtype":"fp32"}},
          {"name":"e","op":"Exp","inputs":["x"]},
          {"name":"s","op":"ReduceSum","attrs":{"axis":-1},"inputs":["e"]},
          {"name":"y","op":"Div","inputs":["e","s"]}]}"#,
        )
        .unwrap();
        let c = compile(&g).unwrap();
        let mut ins = HashMap::new();
        ins.insert("x".to_string(), vec![100.0, 100.0, 0.0, 0.0]);
        let u = execute(&c.unfused, &ins).unwrap();
        let f = execute(&c.fused, &ins).unwrap();
        assert!(u.outputs[0].2[0].is_nan(), "inf / inf");
        assert_eq!(f.outputs[0].2, vec![0.5, 0.5, 0.5, 0.5]);
    }
}
