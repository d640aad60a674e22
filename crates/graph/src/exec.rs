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
//! read in place through swapped strides, never copied. The executor counts the bytes it reads from and writes to
//! full-size buffers: each kernel's input buffers once and its outputs once, in the
//! declared dtype's size, which is exactly the analytical traffic. Values are held in f32
//! whatever the declared dtype (Cast to bf16 rounds; other casts keep f32). Other views are
//! materialized on demand as uncounted copies (the model treats them as strided aliases).
//! Not executable: Opaque ops.

use crate::error::{GraphError, Result};
use crate::fusion::{Kernel, KernelKind, Program};
use crate::gemm::transposed_source;
use crate::ir::{norm_axis, DType, Op, TypedGraph};
use rayon::prelude::*;
use std::collections::HashMap;
use tensorforge_kernels::Shape2;

/// Target elements per block of the fused evaluator.
pub const BLOCK_ELEMS: usize = 1024;
/// Block size: [`BLOCK_ELEMS`], or `TF_BLOCK_ELEMS` from the environment (for tuning runs).
fn block_elems() -> usize {
    static B: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *B.get_or_init(|| {
        std::env::var("TF_BLOCK_ELEMS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&v: &usize| v > 0)
            .unwrap_or(BLOCK_ELEMS)
    })
}

/// Largest total element count the executor allocates across all tensors (2³² f32 values,
/// 16 GiB); larger graphs are refused with an error rather than aborting on allocation.
pub const MAX_EXEC_ELEMENTS: u64 = 1 << 32;

fn check_size(tg: &TypedGraph) -> Result<()> {
    let total = tg
        .tensors
        .iter()
        .fold(0u64, |a, t| a.saturating_add(t.numel));
    if total > MAX_EXEC_ELEMENTS {
        let big = tg
            .tensors
            .iter()
            .max_by_key(|t| t.numel)
            .map(|t| t.name.clone())
            .unwrap_or_default();
        return Err(GraphError::Input {
            tensor: big,
            detail: format!(
                "the graph holds {total} elements in all, more than the executor's limit of {MAX_EXEC_ELEMENTS}"
            ),
        });
    }
    // Every tensor held once as f32 is an upper bound on what a run allocates: refuse a run
    // that cannot fit in the memory the OS says is available, instead of aborting in an
    // allocation half-way through.
    if let Some(avail) = available_memory_bytes() {
        let need = total.saturating_mul(4);
        if need > avail {
            let big = tg
                .tensors
                .iter()
                .max_by_key(|t| t.numel)
                .map(|t| (t.name.clone(), t.shape.clone()))
                .unwrap_or_default();
            return Err(GraphError::Input {
                tensor: big.0,
                detail: format!(
                    "shape {:?}: running the graph needs up to {} of f32 buffers, and {} is available (MemAvailable, or TENSORFORGE_MEMORY_LIMIT_BYTES)",
                    big.1,
                    tensorforge_core::units::bytes(need as f64),
                    tensorforge_core::units::bytes(avail as f64)
                ),
            });
        }
    }
    Ok(())
}

/// The memory a run may use, in bytes: `MemAvailable` from `/proc/meminfo`, capped by
/// `TENSORFORGE_MEMORY_LIMIT_BYTES` when set (`None` when neither is known).
pub fn available_memory_bytes() -> Option<u64> {
    let os = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        });
    let cap = std::env::var("TENSORFORGE_MEMORY_LIMIT_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    match (os, cap) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Relative tolerance (of the tensor's largest magnitude) for fused vs unfused agreement.
pub const RTOL: f32 = 1e-4;
/// Absolute tolerance for fused vs unfused agreement.
pub const ATOL: f32 = 1e-5;

/// Result of one execution.
#[derive(Debug, Clone)]
pub struct ExecResult {
    /// Graph outputs: name, shape, values.
    pub outputs: Vec<(String, Vec<usize>, Vec<f32>)>,
    /// Bytes read from full-size buffers.
    pub read_bytes: u64,
    /// Bytes written to full-size buffers.
    pub write_bytes: u64,
    /// Wall time of the kernels, ns.
    pub elapsed_ns: u64,
}

impl ExecResult {
    /// read + write.
    pub fn total_bytes(&self) -> u64 {
        self.read_bytes + self.write_bytes
    }
}

/// Deterministic uniform values in [−1, 1) for inputs not supplied
/// ([`tensorforge_core::rng::SplitMix64::f32_pm1_vec`]).
pub fn random_values(n: usize, seed: u64) -> Vec<f32> {
    tensorforge_core::rng::SplitMix64::f32_pm1_vec(seed, n)
}

/// Seeded random values for every Input and Weight of `tg` not already in `given`.
pub fn fill_inputs(
    tg: &TypedGraph,
    given: &mut HashMap<String, Vec<f32>>,
    seed: u64,
) -> Result<()> {
    check_size(tg)?;
    for (i, n) in tg.nodes.iter().enumerate() {
        if matches!(n.op, Op::Input { .. } | Op::Weight { .. }) {
            let t = &tg.tensors[tg.node_outputs[i][0]];
            if let Some(v) = given.get(&t.name) {
                if v.len() as u64 != t.numel {
                    return Err(GraphError::Input {
                        tensor: t.name.clone(),
                        detail: format!(
                            "has {} elements, the graph declares {:?} ({} elements)",
                            v.len(),
                            t.shape,
                            t.numel
                        ),
                    });
                }
                continue;
            }
            let n = usize::try_from(t.numel).map_err(|_| GraphError::Input {
                tensor: t.name.clone(),
                detail: "too large for this machine".into(),
            })?;
            let h = t
                .name
                .bytes()
                .fold(seed, |a, b| a.wrapping_mul(31).wrapping_add(b as u64));
            let mut v = random_values(n, h);
            if let Some(hi) = integer_range(tg, tg.node_outputs[i][0]) {
                // Whole numbers in [0, hi): valid indices for every Gather that reads them.
                for x in &mut v {
                    *x = (((*x + 1.0) * 0.5 * hi as f32) as usize).min(hi - 1) as f32;
                }
            }
            given.insert(t.name.clone(), v);
        }
    }
    Ok(())
}

/// For a generated integer tensor `t`: values are drawn from `[0, hi)`, `hi` the shortest
/// axis a `Gather` indexes with it, 2 for booleans, else 100. `None` for float tensors.
fn integer_range(tg: &TypedGraph, t: usize) -> Option<usize> {
    let spec = &tg.tensors[t];
    if !spec.dtype.is_integer() {
        return None;
    }
    let gathered = tg
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(n, node)| match node.op {
            Op::Gather { axis } if tg.node_inputs[n].get(1) == Some(&t) => {
                let d = &tg.tensors[tg.node_inputs[n][0]].shape;
                norm_axis(axis, d.len()).map(|a| d[a])
            }
            _ => None,
        })
        .min();
    Some(
        gathered
            .unwrap_or(if spec.dtype == DType::Bool { 2 } else { 100 })
            .max(1),
    )
}

#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: blocks write disjoint ranges of each output buffer (see `run_blocks`).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

struct State<'a> {
    tg: &'a TypedGraph,
    bufs: Vec<Option<Vec<f32>>>,
    pool: Pool,
}

/// Recycled full-size buffers by length, so that repeated runs (benchmarks) do not pay
/// first-touch page faults on every fresh allocation, as a runtime with a preallocated arena
/// would not.
#[derive(Debug, Default)]
pub struct Pool {
    free: HashMap<usize, Vec<Vec<f32>>>,
}

impl Pool {
    /// A buffer of exactly `n` elements (contents unspecified); an allocation the machine
    /// cannot satisfy is an error, not an abort.
    fn take(&mut self, n: usize) -> Result<Vec<f32>> {
        match self.free.get_mut(&n).and_then(|v| v.pop()) {
            Some(b) => Ok(b),
            None => {
                let mut v: Vec<f32> = Vec::new();
                v.try_reserve_exact(n).map_err(|_| {
                    GraphError::Argument(format!(
                        "cannot allocate a buffer of {n} f32 values ({}): out of memory",
                        tensorforge_core::units::bytes(n as f64 * 4.0)
                    ))
                })?;
                v.resize(n, 0.0);
                Ok(v)
            }
        }
    }

    fn put(&mut self, b: Vec<f32>) {
        self.free.entry(b.len()).or_default().push(b);
    }

    /// Bytes held for reuse; constant across repeated runs of one program.
    pub fn held_bytes(&self) -> usize {
        self.free
            .values()
            .flat_map(|v| v.iter())
            .map(|b| b.capacity() * std::mem::size_of::<f32>())
            .sum()
    }
}

fn exec_err(tg: &TypedGraph, n: usize, detail: impl Into<String>) -> GraphError {
    GraphError::Exec {
        node: tg.nodes[n].name.clone(),
        op: tg.nodes[n].op.name().into(),
        detail: detail.into(),
    }
}

impl State<'_> {
    /// Make tensor `t` available (views materialized on demand, uncounted).
    fn ensure(&mut self, t: usize) -> Result<()> {
        if self.bufs[t].is_some() {
            return Ok(());
        }
        let tg = self.tg;
        let p = tg.producer[t];
        match &tg.nodes[p].op {
            Op::Reshape { .. } => {
                let s = tg.node_inputs[p][0];
                self.ensure(s)?;
                // A view: the same values under another shape. Copied into a pooled
                // buffer (not cloned) so that repeated runs do not grow the pool.
                let n = self.bufs[s].as_ref().map_or(0, |v| v.len());
                let mut b = self.pool.take(n)?;
                if let Some(src) = self.bufs[s].as_deref() {
                    b.copy_from_slice(src);
                }
                self.bufs[t] = Some(b);
            }
            Op::Transpose { perm } => {
                let s = tg.node_inputs[p][0];
                self.ensure(s)?;
                #[cfg(test)]
                tests::TRANSPOSE_COPIES.with(|c| c.set(c.get() + 1));
                let src = self.bufs[s].as_deref().unwrap_or(&[]);
                let mut v = self.pool.take(src.len())?;
                transpose_into(src, &tg.tensors[s].shape, perm, &mut v);
                self.bufs[t] = Some(v);
            }
            _ => {
                return Err(exec_err(
                    tg,
                    p,
                    format!(
                        "tensor `{}` was read before it was written",
                        tg.tensors[t].name
                    ),
                ))
            }
        }
        Ok(())
    }
}

fn transpose_into(src: &[f32], shape: &[usize], perm: &[usize], out: &mut Vec<f32>) {
    let r = shape.len();
    let mut strides = vec![1usize; r];
    for i in (0..r.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let out_strides: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
    let n: usize = shape.iter().product();
    out.clear();
    let mut idx = vec![0usize; r];
    for _ in 0..n {
        let off: usize = idx.iter().zip(&out_strides).map(|(a, b)| a * b).sum();
        out.push(src.get(off).copied().unwrap_or(0.0));
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Threads the executor's parallel loops use (the current rayon pool; `RAYON_NUM_THREADS`
/// sets it for the CLI).
pub fn worker_threads() -> usize {
    rayon::current_num_threads()
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
    let tg = &p.graph;
    let mut st = State {
        tg,
        bufs: vec![None; tg.tensors.len()],
        pool: std::mem::take(pool),
    };
    let r = run_program_checked(p, inputs, &mut st, jit);
    for b in st.bufs.iter_mut() {
        if let Some(v) = b.take() {
            st.pool.put(v);
        }
    }
    *pool = std::mem::take(&mut st.pool);
    r
}

fn run_program_checked(
    p: &Program,
    inputs: &HashMap<String, Vec<f32>>,
    st: &mut State,
    jit: Option<&crate::jit::Jit>,
) -> Result<ExecResult> {
    check_size(&p.graph)?;
    if let Some(j) = jit {
        if j.kernels.len() != p.kernels.len() {
            return Err(GraphError::Argument(
                "the JIT was compiled for another program".into(),
            ));
        }
    }
    run_program(p, inputs, st, jit)
}

fn run_program(
    p: &Program,
    inputs: &HashMap<String, Vec<f32>>,
    st: &mut State,
    jit: Option<&crate::jit::Jit>,
) -> Result<ExecResult> {
    let tg = &p.graph;
    for (i, n) in tg.nodes.iter().enumerate() {
        let t = tg.node_outputs[i][0];
        match &n.op {
            Op::Input { .. } | Op::Weight { .. } => {
                let v = inputs
                    .get(&tg.tensors[t].name)
                    .ok_or_else(|| GraphError::Input {
                        tensor: tg.tensors[t].name.clone(),
                        detail: "no values supplied".into(),
                    })?;
                if v.len() as u64 != tg.tensors[t].numel {
                    return Err(GraphError::Input {
                        tensor: tg.tensors[t].name.clone(),
                        detail: format!(
                            "has {} elements, expected {}",
                            v.len(),
                            tg.tensors[t].numel
                        ),
                    });
                }
                let mut b = st.pool.take(v.len())?;
                b.copy_from_slice(v);
                st.bufs[t] = Some(b);
            }
            Op::Constant { value, .. } => {
                let mut b = st.pool.take(tg.tensors[t].numel as usize)?;
                b.fill(*value as f32);
                st.bufs[t] = Some(b);
            }
            _ => {}
        }
    }
    let (mut rb, mut wb) = (0u64, 0u64);
    let t0 = std::time::Instant::now();
    for (ki, k) in p.kernels.iter().enumerate() {
        // Views the kernel reads from outside. A MatMul reads a transpose of the last two
        // axes in place (strided), so only the transpose's source is made available.
        for &n in &k.nodes {
            let mm = matches!(tg.nodes[n].op, Op::MatMul);
            for &t in &tg.node_inputs[n] {
                if !k.nodes.contains(&tg.producer[tg.base(t)]) {
                    match transposed_source(tg, t).filter(|_| mm) {
                        Some(s) => st.ensure(s)?,
                        None => st.ensure(t)?,
                    }
                }
            }
        }
        rb += crate::traffic::kernel_read_bytes(tg, k);
        match jit.and_then(|j| j.kernels[ki].as_ref()) {
            Some(jk) => run_jit(st, k, jk)?,
            None => run_kernel(st, k)?,
        }
        for &t in &k.outputs {
            wb += tg.tensors[t].bytes;
        }
    }
    let elapsed_ns = t0.elapsed().as_nanos() as u64;
    let mut outputs = vec![];
    for &t in &tg.outputs {
        st.ensure(t)?;
        outputs.push((
            tg.tensors[t].name.clone(),
            tg.tensors[t].shape.clone(),
            st.bufs[t].clone().unwrap_or_default(),
        ));
    }
    Ok(ExecResult {
        outputs,
        read_bytes: rb,
        write_bytes: wb,
        elapsed_ns,
    })
}

fn run_kernel(st: &mut State, k: &Kernel) -> Result<()> {
    let tg = st.tg;
    match k.kind {
        KernelKind::Elementwise | KernelKind::Row | KernelKind::Matmul => run_blocks(st, k),
        KernelKind::Reduction => {
            let n = k.nodes[0];
            let x = tg.node_inputs[n][0];
            let (axis, kind) = match &tg.nodes[n].op {
                Op::ReduceSum { axis, .. } => (*axis, 0),
                Op::ReduceMax { axis, .. } => (*axis, 1),
                Op::ReduceMean { axis, .. } => (*axis, 2),
                _ => return Err(exec_err(tg, n, "not a reduction")),
            };
            let s = &tg.tensors[x].shape;
            let a = norm_axis(axis, s.len()).ok_or_else(|| exec_err(tg, n, "bad axis"))?;
            let outer: usize = s[..a].iter().product();
            let len = s[a];
            let inner: usize = s[a + 1..].iter().product();
            let mut out = st.pool.take(outer * inner)?;
            let src = st.bufs[x].as_deref().unwrap_or(&[]);
            for o in 0..outer {
                for i in 0..inner {
                    let mut acc = if kind == 1 { f64::NEG_INFINITY } else { 0.0 };
                    for j in 0..len {
                        let v = src[(o * len + j) * inner + i] as f64;
                        acc = if kind == 1 { acc.max(v) } else { acc + v };
                    }
                    if kind == 2 {
                        acc /= len as f64;
                    }
                    out[o * inner + i] = acc as f32;
                }
            }
            st.bufs[tg.node_outputs[n][0]] = Some(out);
            Ok(())
        }
        KernelKind::Pattern => {
            let n = k.nodes[0];
            let eps = match &tg.nodes[n].op {
                Op::RmsNormSwiGlu { eps } => *eps as f32,
                _ => return Err(exec_err(tg, n, "not a pattern op")),
            };
            let ins = &tg.node_inputs[n];
            let x = &tg.tensors[ins[0]];
            let d = *x.shape.last().unwrap_or(&1);
            let f = tg.tensors[ins[2]].shape[1];
            let shape = tensorforge_kernels::fused::SwigluShape {
                tokens: x.numel as usize / d.max(1),
                d_model: d,
                d_ff: f,
            };
            let o = tg.node_outputs[n][0];
            // Every element is written by the kernel, so a pooled buffer needs no clearing.
            let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
            let get = |t: usize| st.bufs[t].as_deref().unwrap_or(&[]);
            tensorforge_kernels::fused::rmsnorm_swiglu_fused(
                get(ins[0]),
                get(ins[1]),
                get(ins[2]),
                get(ins[3]),
                shape,
                eps,
                &mut out,
            )
            .map_err(|e| exec_err(tg, n, e.to_string()))?;
            st.bufs[o] = Some(out);
            Ok(())
        }
        KernelKind::Opaque => {
            let n = k.nodes[0];
            match &tg.nodes[n].op {
                Op::Concat { axis } => {
                    let o = tg.node_outputs[n][0];
                    let os = &tg.tensors[o].shape;
                    let a =
                        norm_axis(*axis, os.len()).ok_or_else(|| exec_err(tg, n, "bad axis"))?;
                    let outer: usize = os[..a].iter().product();
                    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                    out.clear();
                    for ob in 0..outer {
                        for &t in &tg.node_inputs[n] {
                            let s = &tg.tensors[t].shape;
                            let chunk: usize = s[a..].iter().product();
                            let src = st.bufs[t].as_deref().unwrap_or(&[]);
                            out.extend_from_slice(&src[ob * chunk..(ob + 1) * chunk]);
                        }
                    }
                    st.bufs[o] = Some(out);
                    Ok(())
                }
                Op::Slice {
                    starts,
                    ends,
                    axes,
                    steps,
                } => {
                    let i = tg.node_inputs[n][0];
                    let o = tg.node_outputs[n][0];
                    let ishape = &tg.tensors[i].shape;
                    let plan = crate::ir::slice_plan(ishape, starts, ends, axes, steps)
                        .map_err(|e| exec_err(tg, n, e))?;
                    let src = st.bufs[i].as_deref().unwrap_or(&[]);
                    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                    out.clear();
                    let istr = strides(ishape);
                    let oshape: Vec<usize> = plan.iter().map(|p| p.2).collect();
                    for_each_index(&oshape, |idx| {
                        let mut off = 0i64;
                        for (d, &k) in idx.iter().enumerate() {
                            off += (plan[d].0 + plan[d].1 * k as i64) * istr[d] as i64;
                        }
                        out.push(src[off as usize]);
                    });
                    st.bufs[o] = Some(out);
                    Ok(())
                }
                Op::Conv2d {
                    strides,
                    pads,
                    dilations,
                    group,
                } => {
                    let ins = &tg.node_inputs[n];
                    let o = tg.node_outputs[n][0];
                    let (xs, ws) = (&tg.tensors[ins[0]].shape, &tg.tensors[ins[1]].shape);
                    let os = tg.tensors[o].shape.clone();
                    let x = st.bufs[ins[0]].as_deref().unwrap_or(&[]);
                    let w = st.bufs[ins[1]].as_deref().unwrap_or(&[]);
                    let b = ins.get(2).map(|t| st.bufs[*t].as_deref().unwrap_or(&[]));
                    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                    out.clear();
                    let (c, h, wd) = (xs[1], xs[2] as isize, xs[3] as isize);
                    let (kk, cg, r, sk) = (ws[0], ws[1], ws[2], ws[3]);
                    let kg = kk / group;
                    for nn in 0..os[0] {
                        for k in 0..kk {
                            let g = k / kg;
                            for p in 0..os[2] {
                                for q in 0..os[3] {
                                    let mut acc = b.map_or(0.0, |b| b[k]);
                                    for ci in 0..cg {
                                        let cin = g * cg + ci;
                                        for rr in 0..r {
                                            let ih = (p * strides[0] + rr * dilations[0]) as isize
                                                - pads[0] as isize;
                                            if ih < 0 || ih >= h {
                                                continue;
                                            }
                                            for ss in 0..sk {
                                                let iw = (q * strides[1] + ss * dilations[1])
                                                    as isize
                                                    - pads[1] as isize;
                                                if iw < 0 || iw >= wd {
                                                    continue;
                                                }
                                                let xi = ((nn * c + cin) * h as usize
                                                    + ih as usize)
                                                    * wd as usize
                                                    + iw as usize;
                                                let wi = ((k * cg + ci) * r + rr) * sk + ss;
                                                acc += x[xi] * w[wi];
                                            }
                                        }
                                    }
                                    out.push(acc);
                                }
                            }
                        }
                    }
                    st.bufs[o] = Some(out);
                    Ok(())
                }
                Op::AvgPool2d {
                    kernel,
                    strides,
                    pads,
                    count_include_pad,
                } => {
                    let whole = (kernel[0] * kernel[1]) as f32;
                    pool2d(tg, n, st, kernel, strides, pads, |win| {
                        let (sum, count) = win.fold((0.0f32, 0usize), |(s, c), v| (s + v, c + 1));
                        sum / if *count_include_pad {
                            whole
                        } else {
                            count.max(1) as f32
                        }
                    })
                }
                Op::MaxPool2d {
                    kernel,
                    strides,
                    pads,
                } => {
                    // NaN propagates, as in ONNX Runtime's max; padding never wins.
                    pool2d(tg, n, st, kernel, strides, pads, |win| {
                        win.fold(
                            f32::NEG_INFINITY,
                            |m, v| if v > m || v.is_nan() { v } else { m },
                        )
                    })
                }
                Op::Where => {
                    let ins = &tg.node_inputs[n];
                    let o = tg.node_outputs[n][0];
                    let oshape = tg.tensors[o].shape.clone();
                    let view = |t: usize| {
                        let s = &tg.tensors[t].shape;
                        broadcast_strides(s, &oshape)
                    };
                    let (sc, sx, sy) = (view(ins[0]), view(ins[1]), view(ins[2]));
                    let (c, x, y) = (
                        st.bufs[ins[0]].as_deref().unwrap_or(&[]),
                        st.bufs[ins[1]].as_deref().unwrap_or(&[]),
                        st.bufs[ins[2]].as_deref().unwrap_or(&[]),
                    );
                    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                    out.clear();
                    for_each_index(&oshape, |idx| {
                        let at = |s: &[usize]| idx.iter().zip(s).map(|(i, s)| i * s).sum::<usize>();
                        out.push(if c[at(&sc)] != 0.0 {
                            x[at(&sx)]
                        } else {
                            y[at(&sy)]
                        });
                    });
                    st.bufs[o] = Some(out);
                    Ok(())
                }
                Op::Gather { axis } => {
                    let (d, ix) = (tg.node_inputs[n][0], tg.node_inputs[n][1]);
                    let o = tg.node_outputs[n][0];
                    let ds = &tg.tensors[d].shape;
                    let a =
                        norm_axis(*axis, ds.len()).ok_or_else(|| exec_err(tg, n, "bad axis"))?;
                    let outer: usize = ds[..a].iter().product();
                    let len = ds[a];
                    let inner: usize = ds[a + 1..].iter().product();
                    let src = st.bufs[d].as_deref().unwrap_or(&[]);
                    let idx = st.bufs[ix].as_deref().unwrap_or(&[]);
                    // Indices are held as f32 (exact up to 2^24); resolve them once.
                    let mut rows = Vec::with_capacity(idx.len());
                    for &v in idx {
                        let i = v as i64;
                        let r = if i < 0 { i + len as i64 } else { i };
                        if v.fract() != 0.0 || r < 0 || r >= len as i64 {
                            return Err(exec_err(
                                tg,
                                n,
                                format!("index {v} is outside [-{len}, {len}) on axis {a}"),
                            ));
                        }
                        rows.push(r as usize);
                    }
                    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                    out.clear();
                    for ob in 0..outer {
                        for &r in &rows {
                            let at = (ob * len + r) * inner;
                            out.extend_from_slice(&src[at..at + inner]);
                        }
                    }
                    st.bufs[o] = Some(out);
                    Ok(())
                }
                Op::Opaque { name, .. } => Err(exec_err(
                    tg,
                    n,
                    format!("opaque op `{name}` has no CPU implementation"),
                )),
                _ => Err(exec_err(tg, n, "no implementation")),
            }
        }
    }
}

#[derive(Clone, Copy)]
struct SendConst(*const *const f32, *const *mut f32);
// SAFETY: the pointer arrays outlive the parallel loop in `run_jit`; each call writes only
// rows [r0, r1) of every output, and blocks are disjoint.
unsafe impl Send for SendConst {}
unsafe impl Sync for SendConst {}

/// Run one compiled kernel: rows in blocks of about 16 Ki elements, in parallel on the
/// current rayon pool when the kernel has at least 64 Ki elements.
fn run_jit(st: &mut State, k: &Kernel, jk: &crate::jit::JitKernel) -> Result<()> {
    let tg = st.tg;
    let m = &jk.meta;
    let mut ins: Vec<*const f32> = Vec::with_capacity(m.inputs.len());
    for &t in &m.inputs {
        let b = st.bufs[t].as_deref().ok_or_else(|| {
            exec_err(
                tg,
                k.nodes[0],
                format!("input `{}` has no value", tg.tensors[t].name),
            )
        })?;
        if b.len() as u64 != tg.tensors[t].numel {
            return Err(exec_err(tg, k.nodes[0], "input buffer of the wrong size"));
        }
        ins.push(b.as_ptr());
    }
    let mut outs: Vec<Vec<f32>> = k
        .outputs
        .iter()
        .map(|&t| st.pool.take(tg.tensors[t].numel as usize))
        .collect::<Result<_>>()?;
    let optrs: Vec<*mut f32> = outs.iter_mut().map(|v| v.as_mut_ptr()).collect();
    let ptrs = SendConst(ins.as_ptr(), optrs.as_ptr());
    let rows = m.rows;
    let per_block = (16384 / m.cols.max(1)).max(1);
    let nblocks = rows.div_ceil(per_block);
    let f = jk.f;
    let call = |scratch: &mut Vec<f32>, b: usize| {
        let r0 = b * per_block;
        let r1 = (r0 + per_block).min(rows);
        let p = ptrs;
        // SAFETY: `f` was compiled for this kernel (same program, checked by the caller):
        // it reads the inputs it was rendered with, whose buffers hold their tensors'
        // element counts (checked above), writes rows [r0, r1) of outputs sized to their
        // tensors, and uses `scratch_floats` of scratch.
        unsafe { f(p.0, p.1, r0 as i64, r1 as i64, scratch.as_mut_ptr()) }
    };
    let init = || vec![0f32; m.scratch_floats.max(1)];
    if m.elems >= 1 << 16 && nblocks > 1 {
        (0..nblocks)
            .into_par_iter()
            .for_each_init(init, |s, b| call(s, b));
    } else {
        let mut s = init();
        for b in 0..nblocks {
            call(&mut s, b);
        }
    }
    drop(ins);
    drop(optrs);
    for (t, v) in k.outputs.iter().zip(outs) {
        st.bufs[*t] = Some(v);
    }
    Ok(())
}

/// 2-D pooling over NCHW (node `n`'s one input): for every output position, `reduce`
/// gets the window's input values (padded positions left out) and returns the output.
fn pool2d(
    tg: &TypedGraph,
    n: usize,
    st: &mut State,
    kernel: &[usize],
    strides: &[usize],
    pads: &[usize],
    reduce: impl Fn(&mut dyn Iterator<Item = f32>) -> f32,
) -> Result<()> {
    let i = tg.node_inputs[n][0];
    let o = tg.node_outputs[n][0];
    let xs = &tg.tensors[i].shape;
    let os = &tg.tensors[o].shape;
    let x = st.bufs[i].as_deref().unwrap_or(&[]);
    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
    out.clear();
    let (h, w) = (xs[2] as isize, xs[3] as isize);
    for nc in 0..os[0] * os[1] {
        for p in 0..os[2] {
            for q in 0..os[3] {
                let mut win = (0..kernel[0])
                    .flat_map(|r| (0..kernel[1]).map(move |c| (r, c)))
                    .filter_map(|(r, c)| {
                        let ih = (p * strides[0] + r) as isize - pads[0] as isize;
                        let iw = (q * strides[1] + c) as isize - pads[1] as isize;
                        (ih >= 0 && ih < h && iw >= 0 && iw < w)
                            .then(|| x[(nc * h as usize + ih as usize) * w as usize + iw as usize])
                    });
                out.push(reduce(&mut win));
            }
        }
    }
    st.bufs[o] = Some(out);
    Ok(())
}

/// Row-major strides of `shape`, in elements.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Strides of a tensor of `shape` read as the NumPy broadcast `out` (rank-aligned at the
/// right; a broadcast axis has stride 0), one per axis of `out`.
fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(shape);
    let pad = out.len() - shape.len();
    (0..out.len())
        .map(|d| {
            if d < pad || shape[d - pad] == 1 {
                0
            } else {
                own[d - pad]
            }
        })
        .collect()
}

/// Calls `f` with every multi-index of `shape` in row-major order.
fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0usize; shape.len()];
    loop {
        f(&idx);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Where a node input comes from inside a block (also read by the C code generator).
#[derive(Clone)]
pub(crate) enum Bind {
    /// Internal: scratch of kernel node position `pos`; `rows` true when one value per row.
    Internal {
        pos: usize,
        slot: usize,
        per_row: bool,
    },
    /// External buffer of the same element count as the node output (flat slice).
    Flat(usize),
    /// External scalar.
    Scalar(usize),
    /// External, one value per row (shape = out[..-1] + [1]) of a full node.
    PerRow(usize),
    /// External, general NumPy broadcast: buffer and its strides over the output shape.
    Gather(usize, Vec<usize>),
    /// External, read whole by the op itself (matmul operands, row-op inputs, norm
    /// parameters).
    Direct(usize),
}

pub(crate) struct NodePlan {
    pub(crate) node: usize,
    pub(crate) per_row: bool,
    pub(crate) binds: Vec<Bind>,
    pub(crate) out_shape: Vec<usize>,
    /// Index into the kernel output list when the node's value is stored.
    pub(crate) store: Option<usize>,
    /// Scratch buffer holding the node's block of values (reused once it is dead).
    pub(crate) slot: usize,
}

pub(crate) fn plan_nodes(tg: &TypedGraph, k: &Kernel) -> Result<Vec<NodePlan>> {
    let pos_of: HashMap<usize, usize> = k.nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let full = k.rows.saturating_mul(k.cols);
    let mut plans: Vec<NodePlan> = vec![];
    for &n in &k.nodes {
        let o = tg.node_outputs[n][0];
        let out = &tg.tensors[o];
        let per_row = k.cols > 1 && out.numel != full && out.numel == k.rows;
        let mut binds = vec![];
        for &t in &tg.node_inputs[n] {
            let b = tg.base(t);
            let op = &tg.nodes[n].op;
            let elementwise = op.is_unary() || op.is_binary() || matches!(op, Op::Broadcast { .. });
            let bind = if let Some(&p) = pos_of.get(&tg.producer[b]) {
                Bind::Internal {
                    pos: p,
                    slot: 0,
                    per_row: plans[p].per_row,
                }
            } else if !elementwise {
                Bind::Direct(t)
            } else {
                let ti = &tg.tensors[t];
                let mut row_shape = out.shape.clone();
                if let Some(l) = row_shape.last_mut() {
                    *l = 1;
                }
                if ti.numel == out.numel {
                    Bind::Flat(t)
                } else if ti.numel == 1 {
                    Bind::Scalar(t)
                } else if !per_row && k.cols > 1 && ti.shape == row_shape {
                    Bind::PerRow(t)
                } else {
                    // Strides of the input over the output's axes (0 where broadcast).
                    let r = out.shape.len();
                    let off = r.checked_sub(ti.shape.len()).ok_or_else(|| {
                        exec_err(
                            tg,
                            n,
                            format!("input `{}` has a higher rank than the output", ti.name),
                        )
                    })?;
                    let mut strides = vec![0usize; r];
                    let mut acc = 1usize;
                    for d in (0..ti.shape.len()).rev() {
                        if ti.shape[d] != 1 {
                            strides[off + d] = acc;
                        }
                        acc *= ti.shape[d];
                    }
                    Bind::Gather(t, strides)
                }
            };
            binds.push(bind);
        }
        plans.push(NodePlan {
            node: n,
            per_row,
            binds,
            out_shape: out.shape.clone(),
            store: k.outputs.iter().position(|&x| x == o),
            slot: 0,
        });
    }
    // Scratch slots by liveness inside the block: a slot is reused once its node's last
    // reader in the kernel has run, so a chain needs only a few L1-resident buffers.
    let mut last_use: Vec<usize> = (0..plans.len()).collect();
    for (pi, p) in plans.iter().enumerate() {
        for b in &p.binds {
            if let Bind::Internal { pos, .. } = b {
                last_use[*pos] = last_use[*pos].max(pi);
            }
        }
    }
    let mut free: Vec<usize> = vec![];
    let mut nslots = 0;
    for pi in 0..plans.len() {
        let slot = free.pop().unwrap_or_else(|| {
            nslots += 1;
            nslots - 1
        });
        plans[pi].slot = slot;
        let done: Vec<usize> = (0..pi).filter(|&q| last_use[q] == pi).collect();
        for q in done {
            free.push(plans[q].slot);
        }
        if last_use[pi] == pi {
            free.push(slot);
        }
    }
    let slots: Vec<usize> = plans.iter().map(|p| p.slot).collect();
    for p in plans.iter_mut() {
        for b in p.binds.iter_mut() {
            if let Bind::Internal { pos, slot, .. } = b {
                *slot = slots[*pos];
            }
        }
    }
    Ok(plans)
}

struct Scratch {
    vals: Vec<Vec<f32>>,
    tmp: Vec<Vec<f32>>,
}

fn run_blocks(st: &mut State, k: &Kernel) -> Result<()> {
    let tg = st.tg;
    let plans = plan_nodes(tg, k)?;
    let rows = k.rows as usize;
    let cols = (k.cols as usize).max(1);
    let rows_per_block = (block_elems() / cols).max(1);
    let nblocks = rows.div_ceil(rows_per_block);
    let mut outs: Vec<Vec<f32>> = k
        .outputs
        .iter()
        .map(|&t| st.pool.take(tg.tensors[t].numel as usize))
        .collect::<Result<_>>()?;
    // MatMul nodes first, whole, with faer: into the kernel's output buffer when the
    // product is stored (taken out of `outs`, so no block writes it), else into a pooled
    // full-size buffer; the blocks below then treat them as computed (`eval_block`).
    let mut pre: Vec<Option<Vec<f32>>> = vec![None; plans.len()];
    for (pi, p) in plans.iter().enumerate() {
        let n = p.node;
        if !matches!(tg.nodes[n].op, Op::MatMul) {
            continue;
        }
        let mut c = match p.store {
            Some(oi) => std::mem::take(&mut outs[oi]),
            None => st
                .pool
                .take(tg.tensors[tg.node_outputs[n][0]].numel as usize)?,
        };
        let operand = |j: usize| {
            let t = tg.node_inputs[n][j];
            crate::gemm::operand(tg, &st.bufs, t).ok_or_else(|| {
                exec_err(
                    tg,
                    n,
                    format!("operand `{}` is not available", tg.tensors[t].name),
                )
            })
        };
        crate::gemm::matmul_into(operand(0)?, operand(1)?, &mut c)
            .map_err(|e| exec_err(tg, n, e))?;
        pre[pi] = Some(c);
    }
    let finish = |st: &mut State, outs: Vec<Vec<f32>>, pre: Vec<Option<Vec<f32>>>| {
        let mut outs: Vec<Option<Vec<f32>>> = outs.into_iter().map(Some).collect();
        for (p, c) in plans.iter().zip(pre) {
            match (p.store, c) {
                (Some(oi), Some(c)) => {
                    if let Some(empty) = outs[oi].replace(c) {
                        st.pool.put(empty);
                    }
                }
                (None, Some(c)) => st.pool.put(c),
                _ => {}
            }
        }
        for (t, v) in k.outputs.iter().zip(outs) {
            st.bufs[*t] = v;
        }
    };
    if plans
        .iter()
        .all(|p| matches!(tg.nodes[p.node].op, Op::MatMul))
    {
        finish(st, outs, pre);
        return Ok(());
    }
    let ptrs: Vec<(SendPtr, usize)> = outs
        .iter_mut()
        .map(|v| (SendPtr(v.as_mut_ptr()), v.len()))
        .collect();
    let bufs = &st.bufs;
    #[cfg(target_arch = "x86_64")]
    if matches!(k.kind, KernelKind::Elementwise) && tile::available() {
        if let Some(prog) = tile::compile(tg, bufs, &plans, k)? {
            tile::run(&prog, &ptrs)?;
            drop(prog);
            for (t, v) in k.outputs.iter().zip(outs) {
                st.bufs[*t] = Some(v);
            }
            return Ok(());
        }
    }
    let max_in = plans.iter().map(|p| p.binds.len()).max().unwrap_or(0);
    let cap = rows_per_block * cols;
    let work = |s: &mut Scratch, b: usize| -> Result<()> {
        let r0 = b * rows_per_block;
        let r1 = (r0 + rows_per_block).min(rows);
        eval_block(tg, bufs, &plans, &pre, s, r0, r1, cols, &ptrs)
    };
    let init = || Scratch {
        vals: vec![Vec::with_capacity(cap); plans.iter().map(|p| p.slot + 1).max().unwrap_or(1)],
        tmp: vec![Vec::with_capacity(cap); max_in.max(1)],
    };
    if rows.saturating_mul(cols) >= 1 << 16 && nblocks > 1 {
        (0..nblocks)
            .into_par_iter()
            .with_min_len(16)
            .try_for_each_init(init, work)?;
    } else {
        let mut s = init();
        for b in 0..nblocks {
            work(&mut s, b)?;
        }
    }
    finish(st, outs, pre);
    Ok(())
}

enum Src<'a> {
    S(&'a [f32]),
    C(f32),
}

#[allow(clippy::too_many_arguments)]
fn eval_block(
    tg: &TypedGraph,
    bufs: &[Option<Vec<f32>>],
    plans: &[NodePlan],
    pre: &[Option<Vec<f32>>],
    s: &mut Scratch,
    r0: usize,
    r1: usize,
    cols: usize,
    ptrs: &[(SendPtr, usize)],
) -> Result<()> {
    let nb = r1 - r0;
    for (pi, p) in plans.iter().enumerate() {
        let len = if p.per_row { nb } else { nb * cols };
        let (f0, f1) = if p.per_row {
            (r0, r1)
        } else {
            (r0 * cols, r1 * cols)
        };
        let n = p.node;
        let op = &tg.nodes[n].op;
        // Resolve inputs into temp buffers where needed.
        let mut out_buf = std::mem::take(&mut s.vals[p.slot]);
        if out_buf.len() != len {
            out_buf.resize(len, 0.0);
        }
        let out = &mut out_buf[..];
        let done = &s.vals;
        let buf = |t: usize| bufs[t].as_deref().unwrap_or(&[]);
        for (j, bind) in p.binds.iter().enumerate() {
            let tmp = &mut s.tmp[j];
            match bind {
                Bind::Internal { slot, per_row, .. } if *per_row && !p.per_row => {
                    tmp.clear();
                    for &v in &done[*slot][..nb] {
                        tmp.extend(std::iter::repeat_n(v, cols));
                    }
                }
                Bind::PerRow(t) => {
                    tmp.clear();
                    for &v in &buf(*t)[r0..r1] {
                        tmp.extend(std::iter::repeat_n(v, cols));
                    }
                }
                Bind::Gather(t, strides) => {
                    tmp.clear();
                    let src = buf(*t);
                    let shape = &p.out_shape;
                    let r = shape.len();
                    let mut idx = vec![0usize; r];
                    let mut rem = f0;
                    for d in (0..r).rev() {
                        let dim = shape[d].max(1);
                        idx[d] = rem % dim;
                        rem /= dim;
                    }
                    let mut off: usize = idx.iter().zip(strides).map(|(a, b)| a * b).sum();
                    for _ in f0..f1 {
                        tmp.push(src.get(off).copied().unwrap_or(0.0));
                        for d in (0..r).rev() {
                            idx[d] += 1;
                            off += strides[d];
                            if idx[d] < shape[d] {
                                break;
                            }
                            off -= strides[d] * shape[d];
                            idx[d] = 0;
                        }
                    }
                }
                _ => {}
            }
        }
        let src = |j: usize| -> Src {
            match &p.binds[j] {
                Bind::Internal { slot, per_row, .. } => {
                    if *per_row && !p.per_row {
                        Src::S(&s.tmp[j][..len])
                    } else {
                        Src::S(&done[*slot][..len])
                    }
                }
                Bind::Flat(t) => Src::S(&buf(*t)[f0..f1]),
                Bind::Scalar(t) => Src::C(buf(*t).first().copied().unwrap_or(0.0)),
                Bind::PerRow(_) | Bind::Gather(..) => Src::S(&s.tmp[j][..len]),
                Bind::Direct(t) => Src::S(buf(*t)),
            }
        };
        match op {
            o if o.is_unary() => match src(0) {
                Src::S(x) => unary_apply(o, x, out),
                Src::C(c) => {
                    let mut one = [0f32];
                    unary_apply(o, &[c], &mut one);
                    out.fill(one[0]);
                }
            },
            o if o.is_binary() => binary_apply(o, src(0), src(1), out),
            Op::Broadcast { .. } => match src(0) {
                Src::S(x) => out.copy_from_slice(&x[..len]),
                Src::C(c) => out.fill(c),
            },
            Op::ReduceSum { .. } | Op::ReduceMax { .. } | Op::ReduceMean { .. } => {
                let x = row_input(&p.binds[0], done, bufs, r0, r1, cols);
                for (r, y) in out.iter_mut().enumerate() {
                    let row = &x[r * cols..(r + 1) * cols];
                    *y = match op {
                        Op::ReduceMax { .. } => {
                            row.iter().copied().fold(f32::NEG_INFINITY, f32::max)
                        }
                        Op::ReduceSum { .. } => row.iter().map(|&v| v as f64).sum::<f64>() as f32,
                        _ => (row.iter().map(|&v| v as f64).sum::<f64>() / cols as f64) as f32,
                    };
                }
            }
            Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::LogSumExp { .. } => {
                let x = row_input(&p.binds[0], done, bufs, r0, r1, cols);
                let sh = Shape2::new(nb, cols);
                let r = match op {
                    Op::Softmax { .. } => tensorforge_kernels::softmax(x, sh, out),
                    Op::LogSoftmax { .. } => tensorforge_kernels::log_softmax(x, sh, out),
                    _ => tensorforge_kernels::logsumexp(x, sh, out),
                };
                r.map_err(|e| exec_err(tg, n, e.to_string()))?;
            }
            Op::RmsNorm { eps } | Op::LayerNorm { eps } => {
                let x = row_input(&p.binds[0], done, bufs, r0, r1, cols);
                let param = |j: usize| match &p.binds[j] {
                    Bind::Direct(t) => Ok(buf(*t)),
                    _ => Err(exec_err(tg, n, "norm parameters must come from memory")),
                };
                let gamma = param(1)?;
                let is_ln = matches!(op, Op::LayerNorm { .. });
                let beta = if is_ln { param(2)? } else { &[][..] };
                for r in 0..nb {
                    let row = &x[r * cols..(r + 1) * cols];
                    let y = &mut out[r * cols..(r + 1) * cols];
                    if is_ln {
                        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / cols as f64;
                        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>()
                            / cols as f64;
                        let inv = (1.0 / (var + eps).sqrt()) as f32;
                        let m = mean as f32;
                        for j in 0..cols {
                            y[j] = (row[j] - m) * inv * gamma[j] + beta[j];
                        }
                    } else {
                        let ss =
                            row.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / cols as f64;
                        let inv = (1.0 / (ss + eps).sqrt()) as f32;
                        for j in 0..cols {
                            y[j] = row[j] * inv * gamma[j];
                        }
                    }
                }
            }
            Op::MatMul => {
                // Computed whole by faer before the blocks (`run_blocks`); this block's rows
                // feed the epilogue from scratch like any other node's.
                let c = pre
                    .get(pi)
                    .and_then(|c| c.as_deref())
                    .ok_or_else(|| exec_err(tg, n, "the product was not computed"))?;
                out.copy_from_slice(&c[f0..f1]);
            }
            _ => {
                return Err(exec_err(tg, n, "not supported inside a blocked kernel"));
            }
        }
        // A stored product already sits in its output buffer.
        let stored_whole = pre.get(pi).is_some_and(|c| c.is_some());
        if let Some(oi) = p.store.filter(|_| !stored_whole) {
            let (ptr, olen) = ptrs[oi];
            if f1 > olen || f1 - f0 > out.len() {
                return Err(exec_err(tg, n, "block outside the output buffer"));
            }
            // SAFETY: this block owns rows [r0, r1) of every output of the kernel; blocks
            // cover disjoint ranges, the range is inside the buffer (checked above), and the
            // buffer outlives the parallel loop in `run_blocks`.
            let dst = unsafe { std::slice::from_raw_parts_mut(ptr.0.add(f0), f1 - f0) };
            dst.copy_from_slice(&out[..f1 - f0]);
        }
        s.vals[p.slot] = out_buf;
    }
    Ok(())
}

/// Row-major [nb, cols] input of a row op: internal scratch or a slice of the buffer.
fn row_input<'a>(
    b: &Bind,
    done: &'a [Vec<f32>],
    bufs: &'a [Option<Vec<f32>>],
    r0: usize,
    r1: usize,
    cols: usize,
) -> &'a [f32] {
    match b {
        Bind::Internal { slot, .. } => &done[*slot][..(r1 - r0) * cols],
        Bind::Flat(t)
        | Bind::Gather(t, _)
        | Bind::PerRow(t)
        | Bind::Scalar(t)
        | Bind::Direct(t) => {
            let v = bufs[*t].as_deref().unwrap_or(&[]);
            &v[(r0 * cols).min(v.len())..(r1 * cols).min(v.len())]
        }
    }
}

/// f32 rounded to the nearest bfloat16 (ties to even) and back: the `half` crate.
fn round_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

#[inline(always)]
fn map1_body<F: Fn(f32) -> f32>(x: &[f32], out: &mut [f32], f: F) {
    for (y, &v) in out.iter_mut().zip(x) {
        *y = f(v);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map1_avx2<F: Fn(f32) -> f32>(x: &[f32], out: &mut [f32], f: F) {
    map1_body(x, out, f)
}

/// One elementwise loop; compiled a second time for AVX2 and picked at run time.
#[inline(always)]
fn map1<F: Fn(f32) -> f32>(x: &[f32], out: &mut [f32], f: F) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked on the line above).
            return unsafe { map1_avx2(x, out, f) };
        }
    }
    map1_body(x, out, f)
}

/// Apply a unary op over a slice; one monomorphic, vectorizable loop per op.
fn unary_apply(op: &Op, x: &[f32], out: &mut [f32]) {
    match op {
        Op::Neg => map1(x, out, |v| -v),
        Op::Exp => map1(x, out, f32::exp),
        Op::Log => map1(x, out, f32::ln),
        Op::Log1p => map1(x, out, f32::ln_1p),
        Op::Sqrt => map1(x, out, f32::sqrt),
        Op::Rsqrt => map1(x, out, |v| 1.0 / v.sqrt()),
        Op::Tanh => map1(x, out, f32::tanh),
        Op::Erf => map1(x, out, libm::erff),
        Op::Sigmoid => map1(x, out, |v| 1.0 / (1.0 + (-v).exp())),
        Op::Silu => tensorforge_kernels::simd::silu_mul(x, None, out),
        Op::Gelu => map1(x, out, |v| {
            0.5 * v * (1.0 + (0.797_884_6 * (v + 0.044_715 * v * v * v)).tanh())
        }),
        Op::Relu => map1(x, out, |v| fmax(v, 0.0)),
        Op::Pow { exponent } => {
            let e = *exponent as f32;
            if e == 2.0 {
                map1(x, out, |v| v * v)
            } else {
                map1(x, out, |v| v.powf(e))
            }
        }
        Op::Cast { to } => match to {
            DType::Bf16 => map1(x, out, round_bf16),
            DType::Fp16 => map1(x, out, |v| half::f16::from_f32(v).to_f32()),
            // Float → integer truncates toward zero (ONNX Cast); out-of-range values
            // saturate (ONNX leaves them undefined). Int64 beyond 2^24 is not exact in f32.
            DType::Int8 => map1(x, out, |v| v.trunc().clamp(-128.0, 127.0)),
            DType::Int4 => map1(x, out, |v| v.trunc().clamp(-8.0, 7.0)),
            DType::Int32 => map1(x, out, |v| {
                v.trunc().clamp(i32::MIN as f32, i32::MAX as f32)
            }),
            DType::Int64 => map1(x, out, f32::trunc),
            DType::Bool => map1(x, out, |v| if v != 0.0 { 1.0 } else { 0.0 }),
            // fp32 and tf32 keep the value; fp8's two encodings are not modelled.
            DType::Fp32 | DType::Tf32 | DType::Fp8 => map1(x, out, |v| v),
        },
        Op::Quantize { scale, zero_point } => {
            let (s, z) = (*scale as f32, *zero_point as f32);
            map1(x, out, |v| {
                ((v / s).round_ties_even() + z).clamp(-128.0, 127.0)
            })
        }
        Op::Dequantize {
            scale, zero_point, ..
        } => {
            let (s, z) = (*scale as f32, *zero_point as f32);
            map1(x, out, |q| (q - z) * s)
        }
        _ => map1(x, out, |v| v),
    }
}

#[inline(always)]
fn map2_body<F: Fn(f32, f32) -> f32>(a: Src, b: Src, out: &mut [f32], f: F) {
    match (a, b) {
        (Src::S(a), Src::S(b)) => {
            for ((y, &x), &z) in out.iter_mut().zip(a).zip(b) {
                *y = f(x, z);
            }
        }
        (Src::S(a), Src::C(c)) => {
            for (y, &x) in out.iter_mut().zip(a) {
                *y = f(x, c);
            }
        }
        (Src::C(c), Src::S(b)) => {
            for (y, &z) in out.iter_mut().zip(b) {
                *y = f(c, z);
            }
        }
        (Src::C(a), Src::C(b)) => out.fill(f(a, b)),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map2_avx2<F: Fn(f32, f32) -> f32>(a: Src, b: Src, out: &mut [f32], f: F) {
    map2_body(a, b, out, f)
}

/// One binary loop; compiled a second time for AVX2 and picked at run time.
#[inline(always)]
fn map2<F: Fn(f32, f32) -> f32>(a: Src, b: Src, out: &mut [f32], f: F) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked on the line above).
            return unsafe { map2_avx2(a, b, out, f) };
        }
    }
    map2_body(a, b, out, f)
}

/// Apply a binary op; one monomorphic loop per (op, operand kinds).
fn binary_apply(op: &Op, a: Src, b: Src, out: &mut [f32]) {
    match op {
        Op::Add => map2(a, b, out, |x, y| x + y),
        Op::Sub => map2(a, b, out, |x, y| x - y),
        Op::Mul => map2(a, b, out, |x, y| x * y),
        Op::Div => map2(a, b, out, |x, y| x / y),
        Op::Max => map2(a, b, out, fmax),
        Op::Min => map2(a, b, out, fmin),
        _ => map2(a, b, out, tensorforge_kernels::logaddexp::<f32>),
    }
}

/// IEEE 754-2008 `maxNum` as both executor paths compute it: a NaN operand is ignored (the
/// other one is returned; NaN only when both are NaN); for `+0` vs `−0` the second operand
/// is returned. Written as the x86 `maxps` select plus a NaN fix-up on `b`, so the scalar
/// loop, its AVX2 vectorization and the tiled evaluator give bit-identical results.
#[inline(always)]
fn fmax(a: f32, b: f32) -> f32 {
    if b.is_nan() || a > b {
        a
    } else {
        b
    }
}

/// `minNum`, the counterpart of [`fmax`] (NaN ignored; second operand on `±0` ties).
#[inline(always)]
fn fmin(a: f32, b: f32) -> f32 {
    if b.is_nan() || a < b {
        a
    } else {
        b
    }
}

/// Register-tiled evaluation of pure elementwise kernels (AVX2): each tile of
/// [`tile::TILE`] elements is held in eight `ymm` registers while the whole chain of ops is
/// applied to it, so an element makes one trip from memory and back instead of one trip
/// through L1 per op. The kernel is translated once into an accumulator program: each node
/// computes into the accumulator; its other operand is a scalar constant, an input read in
/// place, or a value spilled to a small per-thread scratch slot (only for values read again
/// after the next node). Ops without a vector form here (transcendentals, bf16 casts,
/// logaddexp) are applied to the tile through the same scalar loops as the block path, so the
/// two paths give bit-identical results.
#[cfg(target_arch = "x86_64")]
mod tile {
    use super::{binary_apply, exec_err, unary_apply, Bind, NodePlan, SendPtr, Src};
    use crate::error::Result;
    use crate::fusion::Kernel;
    use crate::ir::{DType, Op, TypedGraph};
    use rayon::prelude::*;
    use std::arch::x86_64::*;

    /// Vectors of 8 lanes per tile.
    const V: usize = 8;
    /// Elements per tile.
    pub(super) const TILE: usize = 8 * V;
    /// Elements per parallel task (rayon granularity).
    const TASK: usize = 1 << 15;

    #[derive(Clone, Copy, PartialEq)]
    enum X {
        Acc,
        Slot(usize),
        Const(f32),
        Ext(usize),
    }

    #[derive(Clone, Copy)]
    enum B {
        Add,
        Sub,
        Mul,
        Div,
        Max,
        Min,
        /// Max / Min against a non-NaN constant second operand: one instruction.
        MaxC,
        MinC,
    }

    #[derive(Clone, Copy)]
    enum U {
        Neg,
        Relu,
        Sqrt,
        Rsqrt,
        Square,
        Dequant(f32, f32),
    }

    #[derive(Clone, Copy)]
    enum Ins {
        Load(X),
        Un(U),
        /// Unary op of node `plans[i]` through the scalar loop.
        UnScalar(usize),
        /// `acc = f(acc, acc)`.
        BinAcc(B),
        /// `acc = f(acc, c)`; the `R` forms are `f(operand, acc)`.
        BinC(B, f32),
        BinCR(B, f32),
        /// Operand from a spill slot.
        BinS(B, usize),
        BinSR(B, usize),
        /// Operand read in place from input `ext[j]`.
        BinE(B, usize),
        BinER(B, usize),
        /// Binary op of node `plans[i]` through the scalar loop.
        BinScalar(usize, X, bool),
        Spill(usize),
        Store(usize),
    }

    pub(super) struct Prog<'a> {
        ins: Vec<Ins>,
        ops: Vec<&'a Op>,
        ext: Vec<&'a [f32]>,
        nslots: usize,
        n: usize,
    }

    /// Software prefetch distance for inputs read in place, elements ahead of the tile
    /// (`TF_PREFETCH_ELEMS` overrides it for tuning runs; 0 turns it off).
    fn pf_dist() -> usize {
        static B: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *B.get_or_init(|| {
            std::env::var("TF_PREFETCH_ELEMS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(256)
        })
    }

    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
    }

    /// The accumulator program of a pure elementwise kernel, or None when some node needs
    /// the general block evaluator (per-row or gathered operands, non-elementwise ops).
    pub(super) fn compile<'a>(
        tg: &'a TypedGraph,
        bufs: &'a [Option<Vec<f32>>],
        plans: &[NodePlan],
        k: &Kernel,
    ) -> Result<Option<Prog<'a>>> {
        let n = (k.rows as usize).saturating_mul((k.cols as usize).max(1));
        let mut last_use = vec![0usize; plans.len()];
        for (pi, p) in plans.iter().enumerate() {
            let op = &tg.nodes[p.node].op;
            if p.per_row
                || tg.tensors[tg.node_outputs[p.node][0]].numel as usize != n
                || !(op.is_unary() || op.is_binary() || matches!(op, Op::Broadcast { .. }))
                || p.binds.len() != if op.is_binary() { 2 } else { 1 }
            {
                return Ok(None);
            }
            for b in &p.binds {
                match b {
                    Bind::Internal { pos, per_row, .. } => {
                        if *per_row {
                            return Ok(None);
                        }
                        last_use[*pos] = last_use[*pos].max(pi);
                    }
                    Bind::Flat(_) | Bind::Scalar(_) => {}
                    _ => return Ok(None),
                }
            }
        }
        let mut prog = Prog {
            ins: vec![],
            ops: plans.iter().map(|p| &tg.nodes[p.node].op).collect(),
            ext: vec![],
            nslots: plans.iter().map(|p| p.slot + 1).max().unwrap_or(1),
            n,
        };
        let mut ext_t: Vec<usize> = vec![];
        for (pi, p) in plans.iter().enumerate() {
            let op = prog.ops[pi];
            let mut xs = vec![];
            for b in &p.binds {
                xs.push(match b {
                    Bind::Internal { pos, slot, .. } => {
                        if *pos + 1 == pi {
                            X::Acc
                        } else {
                            X::Slot(*slot)
                        }
                    }
                    Bind::Flat(t) => {
                        let v = bufs[*t].as_deref().unwrap_or(&[]);
                        if v.len() < n {
                            return Err(exec_err(tg, p.node, "input shorter than the kernel"));
                        }
                        let j = ext_t.iter().position(|e| e == t).unwrap_or_else(|| {
                            ext_t.push(*t);
                            prog.ext.push(&v[..n]);
                            ext_t.len() - 1
                        });
                        X::Ext(j)
                    }
                    Bind::Scalar(t) => X::Const(
                        bufs[*t]
                            .as_deref()
                            .and_then(|v| v.first())
                            .copied()
                            .unwrap_or(0.0),
                    ),
                    _ => unreachable!("checked above"),
                });
            }
            if op.is_binary() {
                let (x, rev) = if xs[0] == X::Acc {
                    (xs[1], false)
                } else if xs[1] == X::Acc {
                    (xs[0], true)
                } else {
                    prog.ins.push(Ins::Load(xs[0]));
                    (xs[1], false)
                };
                let const_ok = matches!(x, X::Const(c) if !c.is_nan()) && !rev;
                let b = match op {
                    Op::Add => Some(B::Add),
                    Op::Sub => Some(B::Sub),
                    Op::Mul => Some(B::Mul),
                    Op::Div => Some(B::Div),
                    Op::Max if const_ok => Some(B::MaxC),
                    Op::Min if const_ok => Some(B::MinC),
                    Op::Max => Some(B::Max),
                    Op::Min => Some(B::Min),
                    _ => None,
                };
                prog.ins.push(match (b, x, rev) {
                    (None, x, rev) => Ins::BinScalar(pi, x, rev),
                    (Some(b), X::Acc, _) => Ins::BinAcc(b),
                    (Some(b), X::Const(c), false) => Ins::BinC(b, c),
                    (Some(b), X::Const(c), true) => Ins::BinCR(b, c),
                    (Some(b), X::Slot(j), false) => Ins::BinS(b, j),
                    (Some(b), X::Slot(j), true) => Ins::BinSR(b, j),
                    (Some(b), X::Ext(j), false) => Ins::BinE(b, j),
                    (Some(b), X::Ext(j), true) => Ins::BinER(b, j),
                });
            } else {
                if xs[0] != X::Acc {
                    prog.ins.push(Ins::Load(xs[0]));
                }
                let u = match op {
                    Op::Broadcast { .. } => None,
                    Op::Cast {
                        to: DType::Fp32 | DType::Tf32 | DType::Fp8,
                    } => None,
                    Op::Neg => Some(Some(U::Neg)),
                    Op::Relu => Some(Some(U::Relu)),
                    Op::Sqrt => Some(Some(U::Sqrt)),
                    Op::Rsqrt => Some(Some(U::Rsqrt)),
                    Op::Pow { exponent } if *exponent as f32 == 2.0 => Some(Some(U::Square)),
                    Op::Dequantize {
                        scale, zero_point, ..
                    } => Some(Some(U::Dequant(*scale as f32, *zero_point as f32))),
                    _ => Some(None),
                };
                match u {
                    None => {}
                    Some(Some(u)) => prog.ins.push(Ins::Un(u)),
                    Some(None) => prog.ins.push(Ins::UnScalar(pi)),
                }
            }
            if last_use[pi] > pi + 1 {
                prog.ins.push(Ins::Spill(p.slot));
            }
            if let Some(oi) = p.store {
                prog.ins.push(Ins::Store(oi));
            }
        }
        Ok(Some(prog))
    }

    /// Run `prog` over all elements, outputs to `ptrs` (each at least `prog.n` long).
    pub(super) fn run(prog: &Prog, ptrs: &[(SendPtr, usize)]) -> Result<()> {
        let n = prog.n;
        if ptrs.iter().any(|p| p.1 < n) {
            return Err(crate::error::GraphError::Exec {
                node: String::new(),
                op: "elementwise".into(),
                detail: "output buffer shorter than the kernel".into(),
            });
        }
        let tasks = n.div_ceil(TASK);
        let work = |slots: &mut Vec<[__m256; V]>, t: usize| {
            let (e0, e1) = (t * TASK, ((t + 1) * TASK).min(n));
            // SAFETY: AVX2 is present (`available` was checked by the caller); every input
            // in `ext` holds `n` elements and every output `ptrs[i].1 >= n` (checked above);
            // tasks cover disjoint element ranges of the outputs.
            unsafe { run_range(prog, ptrs, slots, e0, e1) }
        };
        // SAFETY: all-zero bits are a valid __m256.
        let init = || vec![unsafe { std::mem::zeroed::<[__m256; V]>() }; prog.nslots];
        if n >= 1 << 16 && tasks > 1 {
            (0..tasks).into_par_iter().for_each_init(init, work);
        } else {
            let mut s = init();
            for t in 0..tasks {
                work(&mut s, t);
            }
        }
        Ok(())
    }

    #[target_feature(enable = "avx2")]
    unsafe fn run_range(
        prog: &Prog,
        ptrs: &[(SendPtr, usize)],
        slots: &mut [[__m256; V]],
        e0: usize,
        e1: usize,
    ) {
        let ext: Vec<*const f32> = prog.ext.iter().map(|v| v.as_ptr()).collect();
        let outs: Vec<*mut f32> = ptrs.iter().map(|p| p.0 .0).collect();
        let mut off = e0;
        let pf = pf_dist();
        while off + TILE <= e1 {
            if pf > 0 && off + pf + TILE <= e1 {
                for p in &ext {
                    for l in 0..TILE / 16 {
                        _mm_prefetch::<_MM_HINT_T0>(p.add(off + pf + 16 * l) as *const i8);
                    }
                }
            }
            run_tile(prog, &ext, &outs, off, slots);
            off += TILE;
        }
        if off < e1 {
            // Tail: padded copies of the inputs and outputs.
            let m = e1 - off;
            let mut ein = vec![[0f32; TILE]; ext.len()];
            let mut eout = vec![[0f32; TILE]; outs.len()];
            for (d, s) in ein.iter_mut().zip(&prog.ext) {
                d[..m].copy_from_slice(&s[off..e1]);
            }
            let ep: Vec<*const f32> = ein.iter().map(|v| v.as_ptr()).collect();
            let op: Vec<*mut f32> = eout.iter_mut().map(|v| v.as_mut_ptr()).collect();
            run_tile(prog, &ep, &op, 0, slots);
            for (s, d) in eout.iter().zip(&outs) {
                std::ptr::copy_nonoverlapping(s.as_ptr(), d.add(off), m);
            }
        }
    }

    #[inline(always)]
    unsafe fn fetch(
        x: X,
        acc: &[__m256; V],
        ext: &[*const f32],
        off: usize,
        slots: &[[__m256; V]],
    ) -> [__m256; V] {
        match x {
            X::Acc => *acc,
            X::Slot(s) => slots[s],
            X::Const(c) => [_mm256_set1_ps(c); V],
            X::Ext(j) => {
                let p = ext[j].add(off);
                let mut r = [_mm256_setzero_ps(); V];
                for (i, r) in r.iter_mut().enumerate() {
                    *r = _mm256_loadu_ps(p.add(8 * i));
                }
                r
            }
        }
    }

    /// `acc[i] = f(acc[i], get(i))` (or `f(get(i), acc[i])` when `REV`), for the op `b`.
    #[inline(always)]
    unsafe fn bin<const REV: bool, G: Fn(usize) -> __m256>(acc: &mut [__m256; V], b: B, get: G) {
        #[inline(always)]
        unsafe fn go<const REV: bool, G: Fn(usize) -> __m256, F: Fn(__m256, __m256) -> __m256>(
            acc: &mut [__m256; V],
            get: G,
            f: F,
        ) {
            for (i, a) in acc.iter_mut().enumerate() {
                *a = if REV { f(get(i), *a) } else { f(*a, get(i)) };
            }
        }
        match b {
            B::Add => go::<REV, _, _>(acc, get, |a, b| _mm256_add_ps(a, b)),
            B::Sub => go::<REV, _, _>(acc, get, |a, b| _mm256_sub_ps(a, b)),
            B::Mul => go::<REV, _, _>(acc, get, |a, b| _mm256_mul_ps(a, b)),
            B::Div => go::<REV, _, _>(acc, get, |a, b| _mm256_div_ps(a, b)),
            B::Max => go::<REV, _, _>(acc, get, |a, b| vmax(a, b)),
            B::Min => go::<REV, _, _>(acc, get, |a, b| vmin(a, b)),
            B::MaxC => go::<REV, _, _>(acc, get, |a, b| _mm256_max_ps(a, b)),
            B::MinC => go::<REV, _, _>(acc, get, |a, b| _mm256_min_ps(a, b)),
        }
    }

    #[inline(always)]
    unsafe fn un<F: Fn(__m256) -> __m256>(acc: &mut [__m256; V], f: F) {
        for a in acc.iter_mut() {
            *a = f(*a);
        }
    }

    /// `fmax` lanes: `maxps` selects `a` only when `a > b`; then `a` wherever `b` is NaN.
    #[inline(always)]
    unsafe fn vmax(a: __m256, b: __m256) -> __m256 {
        _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps::<_CMP_UNORD_Q>(b, b))
    }

    #[inline(always)]
    unsafe fn vmin(a: __m256, b: __m256) -> __m256 {
        _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps::<_CMP_UNORD_Q>(b, b))
    }

    #[inline(always)]
    unsafe fn to_arr(acc: &[__m256; V]) -> [f32; TILE] {
        let mut t = [0f32; TILE];
        for (i, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(t.as_mut_ptr().add(8 * i), *a);
        }
        t
    }

    #[inline(always)]
    unsafe fn from_arr(t: &[f32; TILE]) -> [__m256; V] {
        let mut acc = [_mm256_setzero_ps(); V];
        for (i, a) in acc.iter_mut().enumerate() {
            *a = _mm256_loadu_ps(t.as_ptr().add(8 * i));
        }
        acc
    }

    /// One tile at element `off`; inlined into the AVX2 `run_range`.
    #[inline(always)]
    unsafe fn run_tile(
        prog: &Prog,
        ext: &[*const f32],
        outs: &[*mut f32],
        off: usize,
        slots: &mut [[__m256; V]],
    ) {
        let mut acc = [_mm256_setzero_ps(); V];
        for ins in &prog.ins {
            match *ins {
                Ins::Load(x) => acc = fetch(x, &acc, ext, off, slots),
                Ins::BinAcc(b) => {
                    let a = acc;
                    bin::<false, _>(&mut acc, b, |i| a[i])
                }
                Ins::BinC(b, c) => {
                    let c = _mm256_set1_ps(c);
                    bin::<false, _>(&mut acc, b, |_| c)
                }
                Ins::BinCR(b, c) => {
                    let c = _mm256_set1_ps(c);
                    bin::<true, _>(&mut acc, b, |_| c)
                }
                Ins::BinS(b, j) => {
                    let s = &slots[j];
                    bin::<false, _>(&mut acc, b, |i| s[i])
                }
                Ins::BinSR(b, j) => {
                    let s = &slots[j];
                    bin::<true, _>(&mut acc, b, |i| s[i])
                }
                Ins::BinE(b, j) => {
                    let p = ext[j].add(off);
                    bin::<false, _>(&mut acc, b, |i| _mm256_loadu_ps(p.add(8 * i)))
                }
                Ins::BinER(b, j) => {
                    let p = ext[j].add(off);
                    bin::<true, _>(&mut acc, b, |i| _mm256_loadu_ps(p.add(8 * i)))
                }
                Ins::Un(u) => match u {
                    U::Neg => {
                        let m = _mm256_set1_ps(-0.0);
                        un(&mut acc, |a| _mm256_xor_ps(a, m))
                    }
                    U::Relu => {
                        let z = _mm256_setzero_ps();
                        un(&mut acc, |a| _mm256_max_ps(a, z))
                    }
                    U::Sqrt => un(&mut acc, |a| _mm256_sqrt_ps(a)),
                    U::Rsqrt => {
                        let one = _mm256_set1_ps(1.0);
                        un(&mut acc, |a| _mm256_div_ps(one, _mm256_sqrt_ps(a)))
                    }
                    U::Square => un(&mut acc, |a| _mm256_mul_ps(a, a)),
                    U::Dequant(s, z) => {
                        let (s, z) = (_mm256_set1_ps(s), _mm256_set1_ps(z));
                        un(&mut acc, |a| _mm256_mul_ps(_mm256_sub_ps(a, z), s))
                    }
                },
                Ins::UnScalar(pi) => {
                    let t = to_arr(&acc);
                    let mut y = [0f32; TILE];
                    unary_apply(prog.ops[pi], &t, &mut y);
                    acc = from_arr(&y);
                }
                Ins::BinScalar(pi, x, rev) => {
                    let a = to_arr(&acc);
                    let b = to_arr(&fetch(x, &acc, ext, off, slots));
                    let (l, r) = if rev { (&b, &a) } else { (&a, &b) };
                    let mut y = [0f32; TILE];
                    binary_apply(prog.ops[pi], Src::S(l), Src::S(r), &mut y);
                    acc = from_arr(&y);
                }
                Ins::Spill(s) => slots[s] = acc,
                Ins::Store(o) => {
                    let p = outs[o].add(off);
                    for (i, a) in acc.iter().enumerate() {
                        _mm256_storeu_ps(p.add(8 * i), *a);
                    }
                }
            }
        }
    }
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
    use crate::traffic::program_traffic;

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
    fn every_example_agrees_and_counts_match_the_model() {
        let hw = tensorforge_core::presets::hardware("balanced").unwrap();
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
            assert_eq!(
                u.total_bytes(),
                program_traffic(&c.unfused, &hw).total_bytes,
                "{name} unfused"
            );
            assert_eq!(
                f.total_bytes(),
                program_traffic(&c.fused, &hw).total_bytes,
                "{name} fused"
            );
            assert!(f.total_bytes() < u.total_bytes(), "{name}");
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
        assert_eq!(
            f.total_bytes(),
            program_traffic(
                &c.fused,
                &tensorforge_core::presets::hardware("balanced").unwrap()
            )
            .total_bytes
        );
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
    fn elementwise_nan_zero_and_tail_semantics() {
        // Max/Min are maxNum/minNum (a NaN operand is ignored), ReLU(NaN) = 0, on every
        // length around the tile size, so the tiled and block paths match the scalar rule.
        let g = Graph::from_json_str(
            r#"{"nodes":[
          {"name":"a","op":"Input","attrs":{"shape":[1000],"dtype":"fp32"}},
          {"name":"b","op":"Input","attrs":{"shape":[1000],"dtype":"fp32"}},
          {"name":"c","op":"Constant","attrs":{"shape":[],"dtype":"fp32","value":0.5}},
          {"name":"m","op":"Max","inputs":["a","b"]},
          {"name":"n","op":"Min","inputs":["b","m"]},
          {"name":"r","op":"ReLU","inputs":["a"]},
          {"name":"s","op":"Sub","inputs":["c","n"]},
          {"name":"t","op":"Mul","inputs":["s","r"]},
          {"name":"y","op":"Max","inputs":["c","t"]}]}"#,
        )
        .unwrap();
        let c = compile(&g).unwrap();
        assert!(c.fused.kernels.len() < c.unfused.kernels.len());
        let vals = [f32::NAN, 0.0, -0.0, 1.0, -1.0, 0.75, f32::INFINITY, -3.0];
        let a: Vec<f32> = (0..1000).map(|i| vals[i % 8]).collect();
        let b: Vec<f32> = (0..1000).map(|i| vals[(i / 8) % 8]).collect();
        let ins = HashMap::from([("a".to_string(), a.clone()), ("b".to_string(), b.clone())]);
        let f = execute(&c.fused, &ins).unwrap();
        let u = execute(&c.unfused, &ins).unwrap();
        let get = |r: &ExecResult, n: &str| r.outputs.iter().find(|o| o.0 == n).unwrap().2.clone();
        let y = |r: &ExecResult| get(r, "y");
        let expect: Vec<f32> = a
            .iter()
            .zip(&b)
            .map(|(&a, &b)| {
                let m = fmax(a, b);
                let n = fmin(b, m);
                fmax(0.5, (0.5 - n) * fmax(a, 0.0))
            })
            .collect();
        for r in [&f, &u] {
            let got = y(r);
            for (i, (g, e)) in got.iter().zip(&expect).enumerate() {
                assert!(
                    g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
                    "{i}: {g} vs {e}"
                );
            }
        }
        assert_eq!(fmax(f32::NAN, 1.0), 1.0);
        assert_eq!(fmax(1.0, f32::NAN), 1.0);
        assert!(fmax(f32::NAN, f32::NAN).is_nan());
        assert_eq!(fmin(f32::NAN, -1.0), -1.0);
        // Lengths around the tile and task sizes: every element written.
        for n in [1usize, 63, 64, 65, 200_003] {
            let g = Graph::from_json_str(&format!(
                r#"{{"nodes":[
              {{"name":"x","op":"Input","attrs":{{"shape":[{n}],"dtype":"fp32"}}}},
              {{"name":"e","op":"Exp","inputs":["x"]}},
              {{"name":"y","op":"Add","inputs":["e","x"]}}]}}"#
            ))
            .unwrap();
            let c = compile(&g).unwrap();
            let mut ins = HashMap::new();
            fill_inputs(&c.unfused.graph, &mut ins, 5).unwrap();
            let f = execute(&c.fused, &ins).unwrap();
            let x = &ins["x"];
            let got = &f.outputs[0].2;
            assert_eq!(got.len(), n);
            for i in 0..n {
                assert_eq!(got[i], x[i].exp() + x[i], "n={n} i={i}");
            }
        }
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

#[cfg(test)]
mod slice_where_tests {
    use super::*;
    use crate::fusion::compile;
    use crate::ir::Graph;

    #[test]
    fn slice_and_where_by_hand() {
        // x = [0..6] as [2, 3]; s = x[:, 1:] = [[1, 2], [4, 5]];
        // w = where(c = [1, 0] broadcast over rows, s, y = −1) = [[1, −1], [4, −1]].
        let g = Graph::from_json_str(
            r#"{"schema_version":1,"name":"sw","nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[2,3],"dtype":"fp32"}},
          {"name":"c","op":"Input","attrs":{"shape":[2],"dtype":"fp32"}},
          {"name":"y","op":"Constant","attrs":{"shape":[1],"dtype":"fp32","value":-1.0}},
          {"name":"s","op":"Slice","attrs":{"starts":[1],"ends":[9223372036854775807],"axes":[1],"steps":[1]},"inputs":["x"]},
          {"name":"w","op":"Where","inputs":["c","s","y"]}],
          "outputs":["w"]}"#,
        )
        .unwrap();
        let c = compile(&g).unwrap();
        let mut ins = HashMap::new();
        ins.insert("x".to_string(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        ins.insert("c".to_string(), vec![1.0, 0.0]);
        for p in [&c.unfused, &c.fused] {
            let r = execute(p, &ins).unwrap();
            assert_eq!(r.outputs[0].1, vec![2, 2]);
            assert_eq!(r.outputs[0].2, vec![1.0, -1.0, 4.0, -1.0]);
        }
    }
}

/// MatMul through faer: plain, batched and transposed operands against a naive f64
/// reference, fused (with epilogues) and unfused.
#[cfg(test)]
mod matmul_tests {
    use super::tests::TRANSPOSE_COPIES;
    use super::*;
    use crate::fusion::compile;
    use crate::ir::Graph;

    /// One MatMul graph: `decl` declares the inputs, `body` the nodes after them.
    fn mm_graph(decl: &[(&str, &[usize])], body: &str, out: &str) -> Graph {
        let mut nodes: Vec<String> = decl
            .iter()
            .map(|(n, sh)| {
                format!(
                    r#"{{"name":"{n}","op":"Input","attrs":{{"shape":{sh:?},"dtype":"fp32"}}}}"#
                )
            })
            .collect();
        nodes.push(body.to_string());
        let j = format!(
            r#"{{"schema_version":1,"name":"mm","nodes":[{}],"outputs":["{out}"]}}"#,
            nodes.join(",")
        );
        Graph::from_json_str(&j).unwrap()
    }

    /// Naive f64 product of row-major `[batch, m, k]` and `[batch or 1, k, n]`; `bt` reads
    /// the right operand as the transpose of row-major `[batch or 1, n, k]`.
    fn naive(
        a: &[f32],
        b: &[f32],
        batch: usize,
        m: usize,
        k: usize,
        n: usize,
        bt: bool,
    ) -> Vec<f64> {
        let shared = b.len() == k * n;
        let mut out = vec![];
        for bi in 0..batch {
            let bo = if shared { 0 } else { bi * k * n };
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0f64;
                    for q in 0..k {
                        let bv = if bt {
                            b[bo + j * k + q]
                        } else {
                            b[bo + q * n + j]
                        };
                        acc += a[bi * m * k + i * k + q] as f64 * bv as f64;
                    }
                    out.push(acc);
                }
            }
        }
        out
    }

    /// Runs `g` fused and unfused on `ins` and checks the single output against `want` to
    /// 1e-5 of its largest magnitude; returns the transposes materialized by both runs.
    fn run_both(g: &Graph, ins: &HashMap<String, Vec<f32>>, want: &[f64]) -> usize {
        let c = compile(g).unwrap();
        let before = TRANSPOSE_COPIES.with(|c| c.get());
        for p in [&c.fused, &c.unfused] {
            let r = execute(p, ins).unwrap();
            let got = &r.outputs[0].2;
            assert_eq!(got.len(), want.len());
            let scale = want.iter().fold(1f64, |m, v| m.max(v.abs()));
            for (i, (&x, &y)) in got.iter().zip(want).enumerate() {
                assert!((x as f64 - y).abs() <= 1e-5 * scale, "[{i}] {x} vs {y}");
            }
        }
        TRANSPOSE_COPIES.with(|c| c.get()) - before
    }

    #[test]
    fn faer_matmul_with_bias_relu_epilogue() {
        let g = |m: usize, k: usize, n: usize| {
            mm_graph(
                &[("x", &[m, k]), ("w", &[k, n]), ("bias", &[n])],
                r#"{"name":"y","op":"MatMul","inputs":["x","w"]},
                   {"name":"z","op":"Add","inputs":["y","bias"]},
                   {"name":"r","op":"ReLU","inputs":["z"]}"#,
                "r",
            )
        };
        // By hand: x = [[1, 2], [3, 4]], w = [[1, 0, -1], [0, 1, 1]]:
        // x·w = [[1, 2, 2-1=1], [3, 4, 4-3=1]]; + bias [0.5, -3, 0] = [[1.5, -1, 1], [3.5, 1, 1]];
        // ReLU = [[1.5, 0, 1], [3.5, 1, 1]].
        let mut ins = HashMap::new();
        ins.insert("x".to_string(), vec![1.0, 2.0, 3.0, 4.0]);
        ins.insert("w".to_string(), vec![1.0, 0.0, -1.0, 0.0, 1.0, 1.0]);
        ins.insert("bias".to_string(), vec![0.5, -3.0, 0.0]);
        run_both(&g(2, 2, 3), &ins, &[1.5, 0.0, 1.0, 3.5, 1.0, 1.0]);
        // The fused program holds one matmul kernel with the two epilogue nodes.
        let c = compile(&g(2, 2, 3)).unwrap();
        assert_eq!(c.fused.kernels.len(), 1);
        assert_eq!(c.fused.kernels[0].kind, KernelKind::Matmul);
        assert_eq!(c.fused.kernels[0].nodes.len(), 3);
        // Random, several row blocks and above the parallel threshold.
        for (m, k, n) in [(67, 45, 130), (256, 128, 96)] {
            let mut ins = HashMap::new();
            fill_inputs(&compile(&g(m, k, n)).unwrap().unfused.graph, &mut ins, 11).unwrap();
            let y = naive(&ins["x"], &ins["w"], 1, m, k, n, false);
            let want: Vec<f64> = y
                .iter()
                .enumerate()
                .map(|(i, &v)| (v + ins["bias"][i % n] as f64).max(0.0))
                .collect();
            run_both(&g(m, k, n), &ins, &want);
        }
    }

    #[test]
    fn faer_batched_times_shared_matrix() {
        let g = |b: usize, m: usize, k: usize, n: usize| {
            mm_graph(
                &[("a", &[b, m, k]), ("w", &[k, n])],
                r#"{"name":"y","op":"MatMul","inputs":["a","w"]}"#,
                "y",
            )
        };
        // By hand: a = [[[1, 2]], [[3, 4]]] (2 x 1 x 2), w = [[1, 2], [3, 4]]:
        // [1·1+2·3, 1·2+2·4] = [7, 10]; [3·1+4·3, 3·2+4·4] = [15, 22].
        let mut ins = HashMap::new();
        ins.insert("a".to_string(), vec![1.0, 2.0, 3.0, 4.0]);
        ins.insert("w".to_string(), vec![1.0, 2.0, 3.0, 4.0]);
        run_both(&g(2, 1, 2, 2), &ins, &[7.0, 10.0, 15.0, 22.0]);
        let (b, m, k, n) = (3, 41, 33, 27);
        let mut ins = HashMap::new();
        fill_inputs(
            &compile(&g(b, m, k, n)).unwrap().unfused.graph,
            &mut ins,
            12,
        )
        .unwrap();
        let want = naive(&ins["a"], &ins["w"], b, m, k, n, false);
        run_both(&g(b, m, k, n), &ins, &want);
    }

    #[test]
    fn faer_batched_times_batched() {
        let g = |b: usize, m: usize, k: usize, n: usize| {
            mm_graph(
                &[("a", &[b, m, k]), ("c", &[b, k, n])],
                r#"{"name":"y","op":"MatMul","inputs":["a","c"]}"#,
                "y",
            )
        };
        // By hand: a = [[[2]], [[3]]], c = [[[1, 2]], [[10, 20]]]: [2, 4] and [30, 60].
        let mut ins = HashMap::new();
        ins.insert("a".to_string(), vec![2.0, 3.0]);
        ins.insert("c".to_string(), vec![1.0, 2.0, 10.0, 20.0]);
        run_both(&g(2, 1, 1, 2), &ins, &[2.0, 4.0, 30.0, 60.0]);
        for (b, m, k, n) in [(5, 19, 23, 17), (2, 130, 70, 120)] {
            let mut ins = HashMap::new();
            fill_inputs(
                &compile(&g(b, m, k, n)).unwrap().unfused.graph,
                &mut ins,
                13,
            )
            .unwrap();
            let want = naive(&ins["a"], &ins["c"], b, m, k, n, false);
            run_both(&g(b, m, k, n), &ins, &want);
        }
    }

    #[test]
    fn faer_reads_a_transposed_operand_in_place() {
        // 2-D: y = x · wᵀ. By hand: w = [[1, 2], [3, 4], [5, 6]] (3 x 2), wᵀ = [[1, 3, 5],
        // [2, 4, 6]]; x = [[1, 1]]: y = [1+2, 3+4, 5+6] = [3, 7, 11].
        let g2 = |m: usize, k: usize, n: usize| {
            mm_graph(
                &[("x", &[m, k]), ("w", &[n, k])],
                r#"{"name":"wt","op":"Transpose","attrs":{"perm":[1,0]},"inputs":["w"]},
                   {"name":"y","op":"MatMul","inputs":["x","wt"]}"#,
                "y",
            )
        };
        let mut ins = HashMap::new();
        ins.insert("x".to_string(), vec![1.0, 1.0]);
        ins.insert("w".to_string(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(
            run_both(&g2(1, 2, 3), &ins, &[3.0, 7.0, 11.0]),
            0,
            "no copy"
        );
        let (m, k, n) = (50, 64, 70);
        let mut ins = HashMap::new();
        fill_inputs(&compile(&g2(m, k, n)).unwrap().unfused.graph, &mut ins, 14).unwrap();
        let want = naive(&ins["x"], &ins["w"], 1, m, k, n, true);
        assert_eq!(run_both(&g2(m, k, n), &ins, &want), 0, "no copy");
        // Batched (attention's Q·Kᵀ): perm [0, 2, 1], with a scale epilogue.
        let (b, m, k, n) = (4, 16, 8, 24);
        let gb = mm_graph(
            &[("q", &[b, m, k]), ("kk", &[b, n, k]), ("s", &[1])],
            r#"{"name":"kt","op":"Transpose","attrs":{"perm":[0,2,1]},"inputs":["kk"]},
               {"name":"y","op":"MatMul","inputs":["q","kt"]},
               {"name":"z","op":"Mul","inputs":["y","s"]}"#,
            "z",
        );
        let mut ins = HashMap::new();
        fill_inputs(&compile(&gb).unwrap().unfused.graph, &mut ins, 15).unwrap();
        ins.insert("s".to_string(), vec![0.25]);
        let want: Vec<f64> = naive(&ins["q"], &ins["kk"], b, m, k, n, true)
            .iter()
            .map(|v| v * 0.25)
            .collect();
        assert_eq!(run_both(&gb, &ins, &want), 0, "no copy");
        // Another permutation keeps the copy path (and the counter sees it): [1, 0, 2]
        // moves the batch axis, so the operand is materialized before the product.
        let gp = mm_graph(
            &[("q", &[b, m, k]), ("kk", &[b, k, n])],
            r#"{"name":"kp","op":"Transpose","attrs":{"perm":[1,0,2]},"inputs":["kk"]},
               {"name":"kq","op":"Transpose","attrs":{"perm":[1,0,2]},"inputs":["kp"]},
               {"name":"y","op":"MatMul","inputs":["q","kq"]}"#,
            "y",
        );
        let mut ins = HashMap::new();
        fill_inputs(&compile(&gp).unwrap().unfused.graph, &mut ins, 16).unwrap();
        let want = naive(&ins["q"], &ins["kk"], b, m, k, n, false);
        assert!(run_both(&gp, &ins, &want) > 0);
    }
}
