//! The interpreter of a compiled program: Input, Weight and Constant buffers, Reshapes
//! sharing their source's buffer and Transposes materialized on demand (uncounted; a MatMul,
//! a Concat and a Slice read a view in place with its strides instead), then one kernel after
//! another with its bytes counted: natively when the JIT compiled it, in blocks for
//! elementwise, row and matmul kernels, whole-tensor loops for reductions, Concat and Slice
//! (strided copies, `gather`), Conv2d, pooling, Where and Gather, the Kernels crate for
//! fused RMSNorm+SwiGLU. Left out: other Opaque ops (an error names them).

use super::blocks::run_blocks;
use super::pool::check_size;
use super::pooling::{PoolKind, PoolShape};
use super::{ExecResult, Pool, Values};
use crate::error::{GraphError, Result};
use crate::fusion::{Kernel, KernelKind, Program};
use crate::ir::{norm_axis, Op, PadMode, TypedGraph};
use rayon::prelude::*;
use std::collections::HashMap;

/// A tensor's values during a run: borrowed from the caller (inputs and weights, never
/// copied) or owned (computed, from the pool).
pub(super) type Buf<'a> = std::borrow::Cow<'a, [f32]>;

/// Every tensor's value during a run, indexed by tensor. A Reshape of a stored tensor is not
/// copied: its index resolves to the tensor whose buffer it shares (always one step, the
/// alias is resolved when it is made), so reads and writes through either index reach the
/// same slot.
pub(super) struct Bufs<'a> {
    slots: Vec<Option<Buf<'a>>>,
    alias: Vec<usize>,
}

impl<'a> Bufs<'a> {
    /// `n` empty slots, none aliased.
    pub(super) fn new(n: usize) -> Self {
        Bufs {
            slots: vec![None; n],
            alias: (0..n).collect(),
        }
    }

    /// Tensor `t` shares tensor `s`'s buffer from now on (`s`'s own alias followed).
    fn share(&mut self, t: usize, s: usize) {
        self.alias[t] = self.alias[s];
    }

    /// Tensor `t`'s own buffer (not one it shares) back to `pool`, when it owns one.
    pub(super) fn release(&mut self, t: usize, pool: &mut Pool) {
        if self.alias[t] == t {
            if let Some(Buf::Owned(v)) = self.slots[t].take() {
                pool.put(v);
            }
        }
    }

    /// The slot tensor `t`'s values live in (its own, or the one it shares).
    pub(super) fn root(&self, t: usize) -> usize {
        self.alias[t]
    }

    /// Tensor `t`'s buffer taken out of the run when the run owns it (`None`, and the slot
    /// untouched, when it is borrowed or absent).
    pub(super) fn take_owned(&mut self, t: usize) -> Option<Vec<f32>> {
        let slot = &mut self.slots[self.alias[t]];
        match slot.take() {
            Some(Buf::Owned(v)) => Some(v),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Every owned buffer back to `pool` (slots emptied, aliases reset).
    pub(super) fn release_into(&mut self, pool: &mut Pool) {
        for (i, a) in self.alias.iter_mut().enumerate() {
            *a = i;
        }
        for b in self.slots.iter_mut() {
            if let Some(Buf::Owned(v)) = b.take() {
                pool.put(v);
            }
        }
    }
}

impl<'a> std::ops::Index<usize> for Bufs<'a> {
    type Output = Option<Buf<'a>>;
    fn index(&self, t: usize) -> &Self::Output {
        &self.slots[self.alias[t]]
    }
}

impl std::ops::IndexMut<usize> for Bufs<'_> {
    fn index_mut(&mut self, t: usize) -> &mut Self::Output {
        &mut self.slots[self.alias[t]]
    }
}

pub(super) struct State<'a> {
    pub(super) tg: &'a TypedGraph,
    pub(super) bufs: Bufs<'a>,
    pub(super) pool: Pool,
    /// The program's Winograd filters, transformed once per weight.
    pub(super) filters: &'a super::winograd::FilterCache,
}

pub(super) fn exec_err(tg: &TypedGraph, n: usize, detail: impl Into<String>) -> GraphError {
    GraphError::Exec {
        node: tg.nodes[n].name.clone(),
        op: tg.nodes[n].op.name().into(),
        detail: detail.into(),
    }
}

impl<'a> State<'a> {
    /// Tensor `t`'s values where they lie: its own buffer when it has one, else (a view
    /// that no earlier kernel made) the buffer of the stored tensor its views start from,
    /// with the views' strides ([`crate::gemm::strided_view`]). [`kernel_reads`] made that
    /// tensor available.
    fn view_of(&self, t: usize) -> (&[f32], super::gather::View) {
        let tg = self.tg;
        if let Some(b) = self.bufs[t].as_deref() {
            return (b, super::gather::View::contiguous(&tg.tensors[t].shape));
        }
        match crate::gemm::strided_view(tg, t) {
            Some((s, axes)) => (
                self.bufs[s].as_deref().unwrap_or(&[]),
                super::gather::View { base: 0, axes },
            ),
            None => (&[], super::gather::View::contiguous(&tg.tensors[t].shape)),
        }
    }

    /// Make tensor `t` available: a Reshape shares its source's buffer, a Transpose is
    /// materialized (uncounted).
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
                // The same values under another shape: no copy.
                self.bufs.share(t, s);
            }
            Op::Transpose { perm } => {
                let s = tg.node_inputs[p][0];
                self.ensure(s)?;
                #[cfg(test)]
                super::tests::TRANSPOSE_COPIES.with(|c| c.set(c.get() + 1));
                let src = self.bufs[s].as_deref().unwrap_or(&[]);
                let mut v = self.pool.take(src.len())?;
                transpose_into(src, &tg.tensors[s].shape, perm, &mut v);
                self.bufs[t] = Some(v.into());
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

/// `out` = `src` (row-major, `shape`) with its axes permuted by `perm` (output axis `i` is
/// input axis `perm[i]`). Output axes that stay adjacent in the input are merged first, so a
/// head split `[B, S, H, D] → [B, H, S, D]` is `B·H·S` contiguous runs of `D` values,
/// gathered by [`super::blocks::gather_runs`]. `out` is replaced by `src.len()` values.
pub(super) fn transpose_into(src: &[f32], shape: &[usize], perm: &[usize], out: &mut Vec<f32>) {
    let in_strides = strides(shape);
    // Merged output axes, outermost first; size-1 axes dropped.
    let (mut sizes, mut st): (Vec<usize>, Vec<usize>) = (vec![], vec![]);
    for &p in perm {
        let (n, s) = (shape[p], in_strides[p]);
        if n == 1 {
            continue;
        }
        match (sizes.last_mut(), st.last_mut()) {
            // Contiguous with the previous axis in the input: one longer axis.
            (Some(ln), Some(ls)) if *ls == s * n => {
                *ln *= n;
                *ls = s;
            }
            _ => {
                sizes.push(n);
                st.push(s);
            }
        }
    }
    out.clear();
    let r = sizes.len();
    if r >= 2 && st[r - 2] == 1 && st[r - 1] == sizes[r - 2] {
        // The two inner axes swap a contiguous `B × A` block (`NCHW ↔ NHWC`: `C × H·W`):
        // one matrix transpose per outer index, in registers, not a gather at stride `A`.
        let (a, b) = (sizes[r - 2], sizes[r - 1]);
        let outer: usize = sizes[..r - 2].iter().product();
        let mut idx = vec![0usize; r - 2];
        for _ in 0..outer {
            let off: usize = idx.iter().zip(&st).map(|(i, s)| i * s).sum();
            match src.get(off..off + a * b) {
                Some(block) => tensorforge_kernels::transpose::transpose_append(block, b, a, out),
                // A malformed view reads zeros rather than panicking (as `gather_runs`).
                None => out.extend(std::iter::repeat_n(0.0, a * b)),
            }
            for d in (0..r - 2).rev() {
                idx[d] += 1;
                if idx[d] < sizes[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        return;
    }
    let mut idx = vec![0usize; r];
    super::blocks::gather_runs(src, &sizes, &st, &mut idx, 0, src.len(), out);
}

/// Called with (kernel index, tensor id, values): each kernel's inputs before it runs,
/// then its outputs after.
pub type Observer<'o> = &'o mut dyn FnMut(usize, usize, &[f32]);

pub(super) fn run_program_checked<'a>(
    p: &Program,
    inputs: Values<'a>,
    st: &mut State<'a>,
    jit: Option<&crate::jit::Jit>,
    observe: Option<Observer<'_>>,
) -> Result<ExecResult> {
    check_size(&p.graph)?;
    if let Some(j) = jit {
        if j.kernels.len() != p.kernels.len() {
            return Err(GraphError::Argument(
                "the JIT was compiled for another program".into(),
            ));
        }
    }
    run_program(p, inputs, st, jit, observe)
}

fn run_program<'a>(
    p: &Program,
    inputs: Values<'a>,
    st: &mut State<'a>,
    jit: Option<&crate::jit::Jit>,
    mut observe: Option<Observer<'_>>,
) -> Result<ExecResult> {
    let tg = &p.graph;
    let t0 = std::time::Instant::now();
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
                // Borrowed: inputs and weights are read in place, never copied per run.
                st.bufs[t] = Some(Buf::Borrowed(v));
            }
            Op::Constant { value, .. } => {
                let mut b = st.pool.take(tg.tensors[t].numel as usize)?;
                b.fill(*value as f32);
                st.bufs[t] = Some(b.into());
            }
            _ => {}
        }
    }
    let memo = p.exec_memo.plans(p);
    let releases = p.exec_memo.releases(p);
    let all_reads = p.exec_memo.reads(p);
    let mut kernel_ns = Vec::with_capacity(p.kernels.len());
    let mut tk = std::time::Instant::now();
    for (ki, k) in p.kernels.iter().enumerate() {
        // Views the kernel reads from outside (a MatMul's transposed operand as its source).
        let reads = &all_reads[ki];
        for &t in reads {
            st.ensure(t)?;
        }
        if let Some(obs) = observe.as_mut() {
            for &t in reads {
                if let Some(v) = st.bufs[t].as_deref() {
                    obs(ki, t, v);
                }
            }
        }
        match jit.and_then(|j| j.kernels[ki].as_ref()) {
            Some(jk) if k.kind == KernelKind::Matmul => run_matmul_jit(st, k, jk)?,
            Some(jk) => run_jit(st, k, jk)?,
            None => run_kernel(st, k, memo.get(ki).and_then(Option::as_ref))?,
        }
        if let Some(obs) = observe.as_mut() {
            for &t in &k.outputs {
                st.ensure(t)?;
                if let Some(v) = st.bufs[t].as_deref() {
                    obs(ki, t, v);
                }
            }
        }
        // Buffers no later kernel reads go back to the pool, so that the next kernel's
        // output of that length reuses one still in cache.
        for &t in &releases[ki] {
            st.bufs.release(t, &mut st.pool);
        }
        let now = std::time::Instant::now();
        kernel_ns.push((now - tk).as_nanos() as u64);
        tk = now;
    }
    let mut outputs = vec![];
    // Every output made available first, so that each one's slot (a Reshape shares its
    // source's) is known before any buffer leaves.
    for &t in &tg.outputs {
        st.ensure(t)?;
    }
    for (oi, &t) in tg.outputs.iter().enumerate() {
        // The run's own buffer is handed over, not copied: a copy of a large output into
        // fresh memory cost more than the kernels (a 64 MiB softmax: about 10 ms of kernels
        // in a 52 ms call, docs/performance.md). A buffer a later output shares (the same
        // tensor, or a Reshape of it) and one borrowed from the caller (an input passed
        // through) are copied.
        let root = st.bufs.root(t);
        let shared_later = tg.outputs[oi + 1..]
            .iter()
            .any(|&u| st.bufs.root(u) == root);
        let owned = if shared_later {
            None
        } else {
            st.bufs.take_owned(t)
        };
        let values = match owned {
            Some(v) => v,
            None => st.bufs[t]
                .as_deref()
                .map(<[f32]>::to_vec)
                .unwrap_or_default(),
        };
        outputs.push((
            tg.tensors[t].name.clone(),
            tg.tensors[t].shape.clone(),
            values,
        ));
    }
    let elapsed_ns = t0.elapsed().as_nanos() as u64;
    Ok(ExecResult {
        outputs,
        elapsed_ns,
        kernel_ns,
    })
}

/// The leading epilogue nodes of convolution kernel `k` that the convolution applies to
/// its sums itself ([`super::conv::Post`]): first an `Add` of a tensor of the output's shape
/// (a residual connection: its tensor is returned), then a `Relu`, or a `ClipLow` then a
/// `ClipHigh` (ONNX `Clip`: ReLU6) by one-element bounds that are not NaN, as one
/// [`Clamp`]; and how many nodes that is.
fn conv_post(st: &State, k: &Kernel) -> (Option<usize>, tensorforge_kernels::clamp::Clamp, usize) {
    use crate::optable::{BinaryFn, UnaryFn};
    let tg = st.tg;
    let mut c = tensorforge_kernels::clamp::Clamp::NONE;
    let mut folded = 0;
    let chain = tg.node_outputs[k.nodes[0]][0];
    let shape = &tg.tensors[chain].shape;
    let addend = k.nodes.get(1).and_then(|&e| {
        let ins = &tg.node_inputs[e];
        let add = matches!(tg.nodes[e].op, Op::Binary { f: BinaryFn::Add });
        let other = match ins[..] {
            [a, b] if a == chain && b != chain => b,
            [a, b] if b == chain && a != chain => a,
            _ => return None,
        };
        (add && tg.tensors[other].shape == *shape && st.bufs[other].is_some()).then_some(other)
    });
    if addend.is_some() {
        folded = 1;
    }
    for &e in &k.nodes[1 + folded..] {
        let ins = &tg.node_inputs[e];
        // The node's one-element operand (the other is the chain, checked by the fusion
        // rule): its value, if it is not NaN.
        let bound = || {
            let t = *ins.get(1)?;
            let v = *st.bufs[t].as_deref()?.first()?;
            (tg.tensors[t].numel == 1 && !v.is_nan()).then_some(v)
        };
        let unset = c == tensorforge_kernels::clamp::Clamp::NONE;
        match &tg.nodes[e].op {
            Op::Unary { f: UnaryFn::Relu } if unset => {
                c.lo = 0.0;
                c.relu = true;
            }
            Op::Binary {
                f: BinaryFn::ClipLow,
            } if unset => match bound() {
                Some(v) => c.lo = v,
                None => break,
            },
            Op::Binary {
                f: BinaryFn::ClipHigh,
            } if c.hi == f32::INFINITY && !c.relu => match bound() {
                Some(v) => c.hi = v,
                None => break,
            },
            _ => break,
        }
        folded += 1;
    }
    (addend, c, folded)
}

/// The elementwise nodes after a convolution in its kernel (`FusionRule::ConvEpilogue`),
/// `nodes[0]` the one whose value is stored, each one pass over the output while it is in
/// cache; a one-element operand is read as a constant; a value consumed by the next node is
/// returned to the pool.
fn conv_epilogue(st: &mut State, nodes: &[usize]) -> Result<()> {
    use super::elementwise::Src;
    let tg = st.tg;
    for w in nodes.windows(2) {
        let (prev, e) = (w[0], w[1]);
        let chain = tg.node_outputs[prev][0];
        let o = tg.node_outputs[e][0];
        let ins = &tg.node_inputs[e];
        let mut y = st.pool.take(tg.tensors[o].numel as usize)?;
        let val = |t: usize| st.bufs[t].as_deref().unwrap_or(&[]);
        let src = |t: usize| match val(t) {
            [v] if tg.tensors[o].numel != 1 => Src::C(*v),
            s => Src::S(s),
        };
        let op = &tg.nodes[e].op;
        if ins.len() == 1 {
            super::elementwise::unary_apply(op, val(ins[0]), &mut y);
        } else {
            super::elementwise::binary_apply(op, src(ins[0]), src(ins[1]), &mut y);
        }
        st.bufs[o] = Some(y.into());
        st.bufs.release(chain, &mut st.pool);
    }
    Ok(())
}

/// The tensors kernel `k` reads from outside itself, in first-use order, each once. A
/// MatMul reads a transpose of the last two axes in place (strided), so for its operands
/// (and the attention's q, kt and v) the transpose's source is listed instead.
pub(crate) fn kernel_reads(tg: &TypedGraph, k: &Kernel) -> Vec<usize> {
    let mut v: Vec<usize> = vec![];
    for &n in &k.nodes {
        let op = &tg.nodes[n].op;
        for (j, &t) in tg.node_inputs[n].iter().enumerate() {
            let mm = matches!(op, Op::MatMul) || (matches!(op, Op::FusedAttention { .. }) && j < 3);
            let copies = matches!(op, Op::Concat { .. } | Op::Slice { .. });
            if !k.nodes.contains(&tg.producer[tg.base(t)]) {
                // A MatMul reads a view of a stored tensor in place, with the view's
                // strides (`gemm::view_layout`), and so do Concat and Slice
                // (`gemm::strided_view`, `gather`) and a depthwise convolution a
                // channels-last tensor (`depthwise::nhwc_source`); other views are made
                // first.
                let pixels = (matches!(op, Op::Conv2d { .. }) && j == 0)
                    .then(|| super::depthwise::nhwc_source(tg, n))
                    .flatten();
                let r = if let Some(s) = pixels {
                    // A depthwise convolution reads a channels-last tensor in place.
                    s
                } else if copies {
                    crate::gemm::strided_view(tg, t).map_or(t, |(s, _)| s)
                } else {
                    crate::gemm::view_layout(tg, t)
                        .filter(|_| mm)
                        .map_or(t, |(s, _)| s)
                };
                if !v.contains(&r) {
                    v.push(r);
                }
            }
        }
    }
    v
}

/// Run kernel `k` (one of `p`'s, or one made from its nodes, such as a matmul kernel's
/// epilogue) alone in the interpreter: `values` must hold every tensor it reads
/// ([`kernel_reads`]: what [`super::execute_observed`] reports before the kernel); returns
/// each of its outputs, in `Kernel::outputs` order.
pub(crate) fn run_kernel_alone(
    p: &Program,
    k: &Kernel,
    values: &HashMap<usize, Vec<f32>>,
) -> Result<Vec<Vec<f32>>> {
    let tg = &p.graph;
    check_size(tg)?;
    let mut st = State {
        tg,
        bufs: Bufs::new(tg.tensors.len()),
        pool: Pool::default(),
        filters: &p.exec_memo.filters,
    };
    for t in kernel_reads(tg, k) {
        let v = values.get(&t).ok_or_else(|| GraphError::Input {
            tensor: tg.tensors[t].name.clone(),
            detail: format!("is read by kernel {} and was not given", k.name),
        })?;
        if v.len() as u64 != tg.tensors[t].numel {
            return Err(GraphError::Input {
                tensor: tg.tensors[t].name.clone(),
                detail: format!("has {} elements, expected {}", v.len(), tg.tensors[t].numel),
            });
        }
        st.bufs[t] = Some(Buf::Owned(v.clone()));
    }
    // The program's memoized node plans when `k` is one of its kernels.
    let memo = p.exec_memo.plans(p);
    let plan = p
        .kernels
        .iter()
        .position(|x| x.nodes == k.nodes && x.outputs == k.outputs)
        .and_then(|i| memo.get(i).and_then(Option::as_ref));
    run_kernel(&mut st, k, plan)?;
    let mut out = vec![];
    for &t in &k.outputs {
        st.ensure(t)?;
        out.push(
            st.bufs[t]
                .as_deref()
                .map(<[f32]>::to_vec)
                .unwrap_or_default(),
        );
    }
    Ok(out)
}

fn run_kernel(st: &mut State, k: &Kernel, memo: Option<&super::blocks::MemoPlans>) -> Result<()> {
    let tg = st.tg;
    match k.kind {
        // A lone product: the GEMM writes the kernel's output, with none of the blocks'
        // planning (the attention scores' product, whose scale and mask now go to the
        // softmax's row kernel).
        KernelKind::Matmul if k.nodes.len() == 1 => product_value(st, k, None).map(|_| ()),
        KernelKind::Matmul if k.nodes.len() == 2 => match crate::fusion::matmul_bias(tg, k) {
            // Only a MatMul and its bias: the GEMM writes the biased product straight into
            // the Add's output.
            Some(bias) => {
                let y = product_value(st, k, Some(bias))?;
                release_unless_stored(st, k, y);
                Ok(())
            }
            None => run_blocks(st, k, memo),
        },
        KernelKind::Elementwise | KernelKind::Row | KernelKind::Matmul => run_blocks(st, k, memo),
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
            st.bufs[tg.node_outputs[n][0]] = Some(out.into());
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
            st.bufs[o] = Some(out.into());
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
                    // Each input where it lies: a view of a stored tensor with its strides.
                    let ins: Vec<(&[f32], super::gather::View)> =
                        tg.node_inputs[n].iter().map(|&t| st.view_of(t)).collect();
                    for (src, v) in &ins {
                        if !super::gather::fits(v, src.len()) {
                            return Err(exec_err(tg, n, "an input's view reaches past its buffer"));
                        }
                    }
                    // Per input: its elements per outer index, and whether they lie in one
                    // run from the outer index's offset (a stored input, or a view whose
                    // axes from `a` on are row-major).
                    let parts: Vec<(usize, bool)> = ins
                        .iter()
                        .map(|(_, v)| (v.inner_numel(a), v.row_major_from(a)))
                        .collect();
                    let row: usize = parts.iter().map(|p| p.0).sum();
                    if out.len() != outer * row {
                        return Err(exec_err(tg, n, "output of the wrong size"));
                    }
                    let fill = |ob0: usize, dst: &mut [f32]| {
                        for (i, block) in dst.chunks_mut(row.max(1)).enumerate() {
                            let mut at = 0;
                            for ((src, v), &(len, run)) in ins.iter().zip(&parts) {
                                let off = v.offset_at(a, ob0 + i);
                                let d = &mut block[at..at + len];
                                if run {
                                    d.copy_from_slice(&src[off..off + len]);
                                } else {
                                    super::gather::rows_at(src, off, &v.axes[a..], 0, d);
                                }
                                at += len;
                            }
                        }
                    };
                    let parallel = copies_in_parallel(out.len()) && outer > 1 && row > 0;
                    if parallel {
                        let per = outer.div_ceil(4 * rayon::current_num_threads()).max(1);
                        out.par_chunks_mut(per * row)
                            .enumerate()
                            .for_each(|(b, d)| fill(b * per, d));
                    } else {
                        fill(0, &mut out);
                    }
                    st.bufs[o] = Some(out.into());
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
                    if plan.iter().all(|p| p.1 > 0) {
                        // A forward slice of the input's view (a stored tensor read in place
                        // with its strides): the same buffer with stepped strides.
                        let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                        let (src, v) = st.view_of(i);
                        let mut base = v.base;
                        let mut sv = Vec::with_capacity(plan.len());
                        for (&(start, step, size), &(_, stride)) in plan.iter().zip(&v.axes) {
                            base += start as usize * stride;
                            sv.push((size, step as usize * stride));
                        }
                        let view = super::gather::View { base, axes: sv };
                        let parallel = copies_in_parallel(out.len());
                        super::gather::gather(src, &view, &mut out, parallel)
                            .map_err(|e| exec_err(tg, n, e))?;
                        st.bufs[o] = Some(out.into());
                        return Ok(());
                    }
                    st.ensure(i)?;
                    let src = st.bufs[i].as_deref().unwrap_or(&[]);
                    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                    out.clear();
                    let istr = strides(ishape);
                    let oshape: Vec<usize> = plan.iter().map(|p| p.2).collect();
                    if plan.iter().all(|p| p.1 >= 0) {
                        // A forward slice is a strided view: gathered in runs.
                        let vs: Vec<usize> = plan
                            .iter()
                            .zip(&istr)
                            .map(|(p, s)| p.1 as usize * s)
                            .collect();
                        let base: usize =
                            plan.iter().zip(&istr).map(|(p, s)| p.0 as usize * s).sum();
                        let mut idx = vec![0usize; oshape.len()];
                        let total = out.capacity().min(tg.tensors[o].numel as usize);
                        super::blocks::gather_runs(
                            src, &oshape, &vs, &mut idx, base, total, &mut out,
                        );
                        st.bufs[o] = Some(out.into());
                        return Ok(());
                    }
                    for_each_index(&oshape, |idx| {
                        let mut off = 0i64;
                        for (d, &k) in idx.iter().enumerate() {
                            off += (plan[d].0 + plan[d].1 * k as i64) * istr[d] as i64;
                        }
                        out.push(src[off as usize]);
                    });
                    st.bufs[o] = Some(out.into());
                    Ok(())
                }
                Op::FusedAttention {
                    scale,
                    zero_masked_rows,
                } => {
                    let ins = &tg.node_inputs[n];
                    let o = tg.node_outputs[n][0];
                    let operand = |j: usize| {
                        crate::gemm::operand(tg, |u| st.bufs[u].as_deref(), ins[j]).ok_or_else(
                            || {
                                exec_err(
                                    tg,
                                    n,
                                    format!(
                                        "operand `{}` is not available",
                                        tg.tensors[ins[j]].name
                                    ),
                                )
                            },
                        )
                    };
                    let (q, kt, v) = (operand(0)?, operand(1)?, operand(2)?);
                    let qs = &tg.tensors[ins[0]].shape;
                    let lead = &qs[..qs.len() - 2];
                    let mask = ins.get(3).map(|&t| {
                        super::attention::Mask::broadcast(
                            st.bufs[t].as_deref().unwrap_or(&[]),
                            &tg.tensors[t].shape,
                            lead,
                        )
                    });
                    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                    super::attention::attention(
                        q,
                        kt,
                        v,
                        mask.as_ref(),
                        *scale as f32,
                        *zero_masked_rows,
                        &mut out,
                    )
                    .map_err(|e| exec_err(tg, n, e))?;
                    st.bufs[o] = Some(out.into());
                    Ok(())
                }
                Op::Conv2d { .. } => {
                    let ins = &tg.node_inputs[n];
                    let o = tg.node_outputs[n][0];
                    let geo = super::conv::ConvShape::of_node(tg, n)
                        .ok_or_else(|| exec_err(tg, n, "a convolution of rank other than 4"))?;
                    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                    let w = st.bufs[ins[1]].as_deref().unwrap_or(&[]);
                    let b = ins.get(2).map(|t| st.bufs[*t].as_deref().unwrap_or(&[]));
                    let (addend, clamp, folded) = conv_post(st, k);
                    let post = super::conv::Post {
                        addend: addend.map(|t| st.bufs[t].as_deref().unwrap_or(&[])),
                        clamp,
                    };
                    // A depthwise convolution of a channels-last tensor's transposed view
                    // reads that tensor in place ([`kernel_reads`] did not make the view).
                    let pixels = st.bufs[ins[0]]
                        .is_none()
                        .then(|| super::depthwise::nhwc_source(tg, n))
                        .flatten();
                    let mut scratch = st.pool.take(if pixels.is_some() {
                        0
                    } else {
                        super::conv::scratch_len(&geo)
                    })?;
                    match pixels {
                        Some(s) => {
                            let x = st.bufs[s].as_deref().unwrap_or(&[]);
                            let f = (st.filters, n);
                            super::conv::depthwise_pixels(&geo, x, w, b, &mut out, f, post)
                        }
                        None => {
                            let x = st.bufs[ins[0]].as_deref().unwrap_or(&[]);
                            let f = st.filters;
                            super::conv::conv2d(&geo, x, w, b, &mut out, &mut scratch, f, n, post)
                        }
                    }
                    .map_err(|e| exec_err(tg, n, e))?;
                    st.pool.put(scratch);
                    // The convolution's buffer holds the last folded node's value.
                    st.bufs[tg.node_outputs[k.nodes[folded]][0]] = Some(out.into());
                    conv_epilogue(st, &k.nodes[folded..])
                }
                Op::AvgPool2d {
                    kernel,
                    strides,
                    pads,
                    count_include_pad,
                } => {
                    let kind = if *count_include_pad {
                        PoolKind::AvgWhole
                    } else {
                        PoolKind::Avg
                    };
                    pool2d(tg, n, st, kernel, strides, pads, kind)
                }
                Op::MaxPool2d {
                    kernel,
                    strides,
                    pads,
                } => {
                    // NaN propagates, as in ONNX Runtime's max; padding never wins.
                    pool2d(tg, n, st, kernel, strides, pads, PoolKind::Max)
                }
                Op::Where => {
                    let ins = &tg.node_inputs[n];
                    let o = tg.node_outputs[n][0];
                    let oshape = tg.tensors[o].shape.clone();
                    let view = |t: usize| {
                        let s = &tg.tensors[t].shape;
                        broadcast_strides(s, &oshape)
                    };
                    let total = tg.tensors[o].numel as usize;
                    // Operands of the output's shape or of one element (a mask over
                    // constants, as exporters write `Where(mask, 0, -inf)`): selected in
                    // one pass, nothing gathered.
                    let whole_or_one =
                        |t: usize| tg.tensors[t].shape == oshape || tg.tensors[t].numel == 1;
                    if ins.iter().all(|&t| whole_or_one(t)) {
                        let own = |t: usize| st.bufs[t].as_deref().unwrap_or(&[]);
                        let mut out = st.pool.take(total)?;
                        select(own(ins[0]), own(ins[1]), own(ins[2]), &mut out);
                        st.bufs[o] = Some(out.into());
                        return Ok(());
                    }
                    // Each operand as a full-size run: itself when it has the output's
                    // shape, else its broadcast gathered in runs along the last axis.
                    let mut spread = |t: usize| -> Result<Option<Vec<f32>>> {
                        if tg.tensors[t].shape == oshape {
                            return Ok(None);
                        }
                        let mut v = st.pool.take(total)?;
                        v.clear();
                        let src = st.bufs[t].as_deref().unwrap_or(&[]);
                        let mut idx = vec![0usize; oshape.len()];
                        super::blocks::gather_runs(
                            src,
                            &oshape,
                            &view(t),
                            &mut idx,
                            0,
                            total,
                            &mut v,
                        );
                        Ok(Some(v))
                    };
                    let (gc, gx, gy) = (spread(ins[0])?, spread(ins[1])?, spread(ins[2])?);
                    let own = |t: usize| st.bufs[t].as_deref().unwrap_or(&[]);
                    let c = gc.as_deref().unwrap_or_else(|| own(ins[0]));
                    let x = gx.as_deref().unwrap_or_else(|| own(ins[1]));
                    let y = gy.as_deref().unwrap_or_else(|| own(ins[2]));
                    let mut out = st.pool.take(total)?;
                    for (((v, &c), &a), &b) in out.iter_mut().zip(c).zip(x).zip(y) {
                        *v = if c != 0.0 { a } else { b };
                    }
                    for g in [gc, gx, gy].into_iter().flatten() {
                        st.pool.put(g);
                    }
                    st.bufs[o] = Some(out.into());
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
                    st.bufs[o] = Some(out.into());
                    Ok(())
                }
                Op::GatherElements { axis } => {
                    let (d, ix) = (tg.node_inputs[n][0], tg.node_inputs[n][1]);
                    let o = tg.node_outputs[n][0];
                    let (ds, is) = (&tg.tensors[d].shape, &tg.tensors[ix].shape);
                    let a =
                        norm_axis(*axis, ds.len()).ok_or_else(|| exec_err(tg, n, "bad axis"))?;
                    let src = st.bufs[d].as_deref().unwrap_or(&[]);
                    let idx = st.bufs[ix].as_deref().unwrap_or(&[]);
                    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                    super::gather_elements::gather_elements(src, ds, idx, is, a, &mut out)
                        .map_err(|e| exec_err(tg, n, e))?;
                    st.bufs[o] = Some(out.into());
                    Ok(())
                }
                Op::Recurrence {
                    cell,
                    direction,
                    finals,
                } => {
                    let ins = &tg.node_inputs[n];
                    let o = tg.node_outputs[n][0];
                    let (xs, rs) = (&tg.tensors[ins[0]].shape, &tg.tensors[ins[1]].shape);
                    let dims = super::recurrence::Dims {
                        steps: xs[0],
                        batch: xs[1],
                        hidden: rs[1],
                    };
                    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                    let mut scratch = [st.pool.scratch(0), st.pool.scratch(0)];
                    let val = |j: usize| st.bufs[ins[j]].as_deref().unwrap_or(&[]);
                    super::recurrence::recurrence(
                        *cell,
                        *direction,
                        *finals,
                        dims,
                        val(0),
                        val(1),
                        val(2),
                        val(3),
                        &mut out,
                        &mut scratch,
                    )
                    .map_err(|e| exec_err(tg, n, e))?;
                    for v in scratch {
                        st.pool.keep_scratch(v);
                    }
                    st.bufs[o] = Some(out.into());
                    Ok(())
                }
                Op::CumSum {
                    axis,
                    exclusive,
                    reverse,
                } => {
                    let i = tg.node_inputs[n][0];
                    let o = tg.node_outputs[n][0];
                    let s = &tg.tensors[i].shape;
                    let a = norm_axis(*axis, s.len()).ok_or_else(|| exec_err(tg, n, "bad axis"))?;
                    let (outer, len, inner) = (
                        s[..a].iter().product::<usize>(),
                        s[a],
                        s[a + 1..].iter().product::<usize>(),
                    );
                    let src = st.bufs[i].as_deref().unwrap_or(&[]);
                    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                    out.clear();
                    out.resize(src.len(), 0.0);
                    for ob in 0..outer {
                        for ib in 0..inner {
                            // Accumulated in f64 and stored as f32, as a sum of int64 ids
                            // or of f32 values in a row.
                            let mut acc = 0f64;
                            for step in 0..len {
                                let j = if *reverse { len - 1 - step } else { step };
                                let at = (ob * len + j) * inner + ib;
                                if *exclusive {
                                    out[at] = acc as f32;
                                    acc += f64::from(src[at]);
                                } else {
                                    acc += f64::from(src[at]);
                                    out[at] = acc as f32;
                                }
                            }
                        }
                    }
                    st.bufs[o] = Some(out.into());
                    Ok(())
                }
                Op::Pad { pads, mode, value } => {
                    let i = tg.node_inputs[n][0];
                    let o = tg.node_outputs[n][0];
                    let is = tg.tensors[i].shape.clone();
                    let os = tg.tensors[o].shape.clone();
                    let src = st.bufs[i].as_deref().unwrap_or(&[]);
                    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
                    out.clear();
                    pad_rows(src, &is, &os, pads, *mode, *value as f32, &mut out);
                    st.bufs[o] = Some(out.into());
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

/// For output index `j` of axis `a` of a `Pad` (`pads` as ONNX orders them, `d_in` the
/// axis's input length): the input index it reads, or `None` where `constant` mode fills.
/// Negative pads crop first (as ONNX's reference and onnxruntime do): the kept range
/// `[lo, lo + d)` is what the positive pads extend, reflect or wrap.
fn pad_source(pads: &[i64], mode: PadMode, a: usize, d_in: usize, j: usize) -> Option<usize> {
    let r = pads.len() / 2;
    let (b, e) = (pads[a], pads[r + a]);
    let lo = (-b).max(0);
    let d = d_in as i64 - lo - (-e).max(0);
    let mut k = j as i64 - b.max(0);
    if k < 0 || k >= d {
        match mode {
            // Nothing kept to extend from (the import refuses such pads): filled.
            PadMode::Constant => return None,
            _ if d <= 0 => return None,
            PadMode::Edge => k = k.clamp(0, d - 1),
            PadMode::Wrap => k = k.rem_euclid(d),
            PadMode::Reflect => {
                // Mirror about the edge elements (not repeated).
                let period = 2 * (d - 1);
                let m = k.rem_euclid(period.max(1));
                k = if m < d { m } else { period - m };
            }
        }
    }
    Some((k + lo) as usize)
}

/// `out` (emptied) = `src` (shape `is`) padded to shape `os` ([`Op::Pad`]): each axis's
/// output indices mapped once to the input indices they read ([`pad_source`]), then the
/// output a row (last axis) at a time, each row's source row found from the other axes'
/// maps and its values copied through the last axis's map, the run of kept columns as one
/// copy. A value at a time through every axis, Swin's window padding took 10–17 µs and a
/// reflection pad of a 32 × 32 map (held-out padreflect_ts) 25 µs
/// (docs/performance.md).
fn pad_rows(
    src: &[f32],
    is: &[usize],
    os: &[usize],
    pads: &[i64],
    mode: PadMode,
    fill: f32,
    out: &mut Vec<f32>,
) {
    let r = is.len();
    let total: usize = os.iter().product();
    if total == 0 {
        return;
    }
    if r == 0 {
        out.extend_from_slice(&src[..1]);
        return;
    }
    let istr = strides(is);
    let maps: Vec<Vec<Option<usize>>> = (0..r)
        .map(|a| {
            (0..os[a])
                .map(|j| pad_source(pads, mode, a, is[a], j))
                .collect()
        })
        .collect();
    let cols = &maps[r - 1];
    // The longest run of output columns that read consecutive input columns (the kept
    // ones between the pads): `(first output column, first input column, length)`.
    let mut run = (0, 0, 0);
    let mut j = 0;
    while j < cols.len() {
        let Some(c0) = cols[j] else {
            j += 1;
            continue;
        };
        let len = cols[j..]
            .iter()
            .enumerate()
            .take_while(|(k, c)| **c == Some(c0 + k))
            .count();
        if len > run.2 {
            run = (j, c0, len);
        }
        j += len;
    }
    let width = os[r - 1];
    for_each_index(&os[..r - 1], |idx| {
        let mut off = Some(0usize);
        for (a, &j) in idx.iter().enumerate() {
            off = off.and_then(|o| maps[a][j].map(|s| o + s * istr[a]));
        }
        let Some(off) = off else {
            out.resize(out.len() + width, fill);
            return;
        };
        let row = &src[off..off + is[r - 1]];
        let (j0, c0, len) = run;
        for c in &cols[..j0] {
            out.push(c.map_or(fill, |c| row[c]));
        }
        out.extend_from_slice(&row[c0..c0 + len]);
        for c in &cols[j0 + len..] {
            out.push(c.map_or(fill, |c| row[c]));
        }
    });
}

#[derive(Clone, Copy)]
struct SendConst(*const *const f32, *const *mut f32);
// SAFETY: the pointer arrays outlive the parallel loop in `run_jit`; each call writes only
// rows [r0, r1) of every output, and blocks are disjoint.
unsafe impl Send for SendConst {}
unsafe impl Sync for SendConst {}

/// Whether a Concat or Slice of `elems` elements copies on the pool's workers: when they
/// spin and from [`super::gather::PAR_MIN_ELEMS`] (GPT-2 and Llama at two threads spend
/// 2.6 % and 3.9 % of a run in these copies, on one worker before).
fn copies_in_parallel(elems: usize) -> bool {
    rayon::current_num_threads() > 1
        && super::spin::active()
        && elems >= super::gather::PAR_MIN_ELEMS
}

/// Elements from which a compiled elementwise or row kernel deals its blocks of rows to the
/// pool's workers, when they must be woken for it.
const JIT_PAR_MIN_ELEMS: usize = 1 << 16;

/// [`JIT_PAR_MIN_ELEMS`] when the run's workers are awake ([`super::spin::active`]): a hand-off
/// then costs about a microsecond, and a LayerNorm over 128 rows of 256 (17 µs on one
/// worker) pays for it. GPT-2 h256 at two threads (`run --profile`, AMD EPYC Zen 3, AVX2): its
/// nine LayerNorm kernels 121–145 → 71–81 µs in all (docs/performance.md, "Small kernels on
/// both workers").
const JIT_PAR_MIN_ELEMS_SPINNING: usize = 1 << 14;

/// Run one compiled kernel: rows in blocks of about 16 Ki elements, in parallel on the
/// current rayon pool from [`JIT_PAR_MIN_ELEMS`] elements ([`JIT_PAR_MIN_ELEMS_SPINNING`]
/// when the run's workers spin).
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
    let mut outs: Vec<Vec<f32>> = m
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
        unsafe {
            f(
                p.0,
                p.1,
                r0 as i64,
                r1 as i64,
                rows as i64,
                scratch.as_mut_ptr(),
            )
        }
    };
    let init = || vec![0f32; m.scratch_floats.max(1)];
    let par_min = if super::spin::active() {
        JIT_PAR_MIN_ELEMS_SPINNING
    } else {
        JIT_PAR_MIN_ELEMS
    };
    if m.elems >= par_min && nblocks > 1 {
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
    for (t, v) in m.outputs.iter().zip(outs) {
        st.bufs[*t] = Some(v.into());
    }
    Ok(())
}

/// A matmul kernel whose elementwise epilogue the JIT compiled
/// ([`crate::fusion::matmul_epilogue`]): the product ([`product_value`]) into a pooled buffer
/// (kept as the product's value when the kernel stores it, else returned to the pool), then
/// the compiled epilogue over it.
fn run_matmul_jit(st: &mut State, k: &Kernel, jk: &crate::jit::JitKernel) -> Result<()> {
    let tg = st.tg;
    let mut prods = vec![product_value(st, k, crate::fusion::matmul_bias(tg, k))?];
    // Further MatMuls of the kernel (a gated MLP's second projection), each whole into a
    // pooled buffer, before the epilogue reads them all.
    for &n in &k.nodes[1..] {
        if matches!(tg.nodes[n].op, Op::MatMul) {
            let t = tg.node_outputs[n][0];
            let mut c = st.pool.take(tg.tensors[t].numel as usize)?;
            super::blocks::product_into(st, n, &mut c, false)?;
            st.bufs[t] = Some(Buf::Owned(c));
            prods.push(t);
        }
    }
    // The epilogue may read a product through a view (the `[1, S, D]` Reshape of a
    // `[S, D]` product, `fusion::same_but_leading_ones`): share the product's buffer.
    let mut r = Ok(());
    for &t in &jk.meta.inputs {
        if let Err(e) = st.ensure(t) {
            r = Err(e);
            break;
        }
    }
    if r.is_ok() {
        r = run_jit(st, k, jk);
    }
    for t in prods {
        release_unless_stored(st, k, t);
    }
    r
}

/// Computes matmul kernel `k`'s product into a pooled buffer set as its tensor's value, and
/// returns that tensor: the MatMul's output, or, with `bias` (the kernel's
/// [`crate::fusion::matmul_bias`]), the bias Add's output: every row starts at the bias and
/// the product accumulates onto it.
fn product_value(st: &mut State, k: &Kernel, bias: Option<(usize, usize)>) -> Result<usize> {
    let tg = st.tg;
    let n = k.nodes[0];
    let Some((add, b)) = bias else {
        let prod = tg.node_outputs[n][0];
        let mut c = st.pool.take(tg.tensors[prod].numel as usize)?;
        super::blocks::product_into(st, n, &mut c, false)?;
        st.bufs[prod] = Some(Buf::Owned(c));
        return Ok(prod);
    };
    let y = tg.node_outputs[add][0];
    let mut c = st.pool.take(tg.tensors[y].numel as usize)?;
    super::blocks::fill_bias_rows(st, add, b, &mut c)?;
    super::blocks::product_into(st, n, &mut c, true)?;
    st.bufs[y] = Some(Buf::Owned(c));
    Ok(y)
}

/// Tensor `t`'s pooled buffer back to the pool unless kernel `k` stores it.
fn release_unless_stored(st: &mut State, k: &Kernel, t: usize) {
    if !k.outputs.contains(&t) {
        if let Some(Buf::Owned(v)) = st.bufs[t].take() {
            st.pool.put(v);
        }
    }
}

/// `out[i] = if c[i] != 0 { x[i] } else { y[i] }` (ONNX `Where`), each operand either
/// `out.len()` values or one value read for every element; a loop per case, so that each
/// vectorizes.
fn select(c: &[f32], x: &[f32], y: &[f32], out: &mut [f32]) {
    let one = |v: &[f32]| (v.len() == 1 && out.len() != 1).then(|| v[0]);
    match (one(c), one(x), one(y)) {
        (None, Some(a), Some(b)) => {
            for (v, &c) in out.iter_mut().zip(c) {
                *v = if c != 0.0 { a } else { b };
            }
        }
        (None, None, Some(b)) => {
            for ((v, &c), &a) in out.iter_mut().zip(c).zip(x) {
                *v = if c != 0.0 { a } else { b };
            }
        }
        (None, Some(a), None) => {
            for ((v, &c), &b) in out.iter_mut().zip(c).zip(y) {
                *v = if c != 0.0 { a } else { b };
            }
        }
        (Some(c), _, _) => {
            // One condition for every element: a copy of x or of y (or its one value).
            let src = if c != 0.0 { x } else { y };
            if src.len() == out.len() {
                out.copy_from_slice(src);
            } else {
                out.fill(src[0]);
            }
        }
        (None, None, None) => {
            for (((v, &c), &a), &b) in out.iter_mut().zip(c).zip(x).zip(y) {
                *v = if c != 0.0 { a } else { b };
            }
        }
    }
}

/// 2-D pooling over NCHW of node `n`'s one input ([`super::pooling`]).
fn pool2d(
    tg: &TypedGraph,
    n: usize,
    st: &mut State,
    kernel: &[usize],
    strides: &[usize],
    pads: &[usize],
    kind: PoolKind,
) -> Result<()> {
    let i = tg.node_inputs[n][0];
    let o = tg.node_outputs[n][0];
    let xs = &tg.tensors[i].shape;
    let os = &tg.tensors[o].shape;
    let g = PoolShape {
        planes: os[0] * os[1],
        h: xs[2],
        w: xs[3],
        p: os[2],
        q: os[3],
        kernel: [kernel[0], kernel[1]],
        strides: [strides[0], strides[1]],
        pads: [pads[0], pads[1]],
    };
    let x = st.bufs[i].as_deref().unwrap_or(&[]);
    let mut out = st.pool.take(tg.tensors[o].numel as usize)?;
    super::pooling::pool2d(&g, kind, x, &mut out).map_err(|e| exec_err(tg, n, e))?;
    st.bufs[o] = Some(out.into());
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
pub(super) fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
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
pub(super) fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
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

#[cfg(test)]
mod slice_where_tests {
    use super::super::execute;
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

    #[test]
    fn constant_padding_by_hand() {
        // x = [[1, 2], [3, 4]] padded with 9: one row before and none after, one column
        // before and two after, as rows of 5: [9 9 9 9 9], [9 1 2 9 9], [9 3 4 9 9]. Then
        // with a column cropped (a negative pad), and in three dims (a
        // leading axis of 1 padded by one each side: an image of 9s before and after x).
        let pad = |pads: &str, shape: &str| {
            Graph::from_json_str(&format!(
                r#"{{"schema_version":1,"name":"pad","nodes":[
          {{"name":"x","op":"Input","attrs":{{"shape":{shape},"dtype":"fp32"}}}},
          {{"name":"y","op":"Pad","attrs":{{"pads":{pads},"mode":"constant","value":9.0}},"inputs":["x"]}}],
          "outputs":["y"]}}"#
            ))
            .unwrap()
        };
        let ins = HashMap::from([("x".to_string(), vec![1.0, 2.0, 3.0, 4.0])]);
        let cases = [
            (pad("[1,1,0,2]", "[2,2]"), vec![3, 5], {
                let mut v = vec![9.0; 15];
                v[6..8].copy_from_slice(&[1.0, 2.0]);
                v[11..13].copy_from_slice(&[3.0, 4.0]);
                v
            }),
            // Crop x's first column and pad one after: [[2, 9], [4, 9]].
            (
                pad("[0,-1,0,1]", "[2,2]"),
                vec![2, 2],
                vec![2.0, 9.0, 4.0, 9.0],
            ),
            // [1, 2, 2] with one more image each side: 3 images, the middle one x.
            (pad("[1,0,0,1,0,0]", "[1,2,2]"), vec![3, 2, 2], {
                let mut v = vec![9.0; 12];
                v[4..8].copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
                v
            }),
        ];
        for (g, shape, want) in cases {
            let c = compile(&g).unwrap();
            for p in [&c.unfused, &c.fused] {
                let r = execute(p, &ins).unwrap();
                assert_eq!(r.outputs[0].1, shape);
                assert_eq!(r.outputs[0].2, want);
            }
        }
    }
}

#[cfg(test)]
mod output_tests {
    use super::super::{execute_pooled, execute_values, Pool, Values};
    use super::*;
    use crate::fusion::compile;
    use crate::ir::Graph;

    /// Outputs are handed over, not copied, and never two outputs share one vector: a graph
    /// whose outputs are a computed tensor twice (y, and r = Reshape(y), the same buffer;
    /// r listed after y, so y's vector must not leave before r is made from it) and an
    /// input passed through a Reshape (borrowed from the caller). Every output
    /// must hold its own values, the pool must keep none of the run's outputs, and handing
    /// them back must give the next run the same values.
    #[test]
    fn outputs_are_handed_over_and_shared_buffers_copied() {
        let g = Graph::from_json_str(
            r#"{"schema_version":1,"name":"outs","nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[2,2],"dtype":"fp32"}},
          {"name":"y","op":"Mul","inputs":["x","x"]},
          {"name":"r","op":"Reshape","attrs":{"shape":[4]},"inputs":["y"]},
          {"name":"xr","op":"Reshape","attrs":{"shape":[4]},"inputs":["x"]}],
          "outputs":["y","r","xr"]}"#,
        )
        .unwrap();
        let c = compile(&g).unwrap();
        let ins = HashMap::from([("x".to_string(), vec![1.0, -2.0, 3.0, 0.5])]);
        // y = x·x = [1, 4, 9, 0.25] (each square exact in f32).
        let want_y = vec![1.0, 4.0, 9.0, 0.25];
        for p in [&c.unfused, &c.fused] {
            let mut pool = Pool::default();
            for round in 0..3 {
                let r = execute_pooled(p, &ins, &mut pool)
                    .unwrap_or_else(|e| panic!("round {round}, {} kernels: {e}", p.kernels.len()));
                let names: Vec<&str> = r.outputs.iter().map(|o| o.0.as_str()).collect();
                assert_eq!(names, ["y", "r", "xr"], "round {round}");
                assert_eq!(r.outputs[0].2, want_y);
                assert_eq!(r.outputs[1].2, want_y);
                assert_eq!(r.outputs[2].2, vec![1.0, -2.0, 3.0, 0.5]);
                let ptrs: Vec<*const f32> = r.outputs.iter().map(|o| o.2.as_ptr()).collect();
                for i in 0..ptrs.len() {
                    for j in 0..i {
                        assert_ne!(ptrs[i], ptrs[j], "outputs {j} and {i} share a vector");
                    }
                }
                assert!(
                    ptrs[2] != ins["x"].as_ptr(),
                    "a borrowed input was handed out"
                );
                for (_, _, v) in r.outputs {
                    pool.recycle(v);
                }
            }
        }
    }

    /// A run's last output leaves the pool with the result: the pool holds none of it, and
    /// [`Pool::recycle`] takes it back for the next run (which then allocates nothing).
    #[test]
    fn the_pool_keeps_no_output_until_it_is_recycled() {
        let g = Graph::from_json_str(
            r#"{"schema_version":1,"name":"one","nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[1000],"dtype":"fp32"}},
          {"name":"y","op":"Exp","inputs":["x"]}]}"#,
        )
        .unwrap();
        let p = compile(&g).unwrap().fused;
        let ins = HashMap::from([("x".to_string(), vec![0.0f32; 1000])]);
        let mut pool = Pool::default();
        let r = execute_pooled(&p, &ins, &mut pool).unwrap();
        assert_eq!(r.outputs[0].2, vec![1.0f32; 1000]);
        assert_eq!(pool.held_bytes(), 0);
        let ptr = r.outputs[0].2.as_ptr();
        for (_, _, v) in r.outputs {
            pool.recycle(v);
        }
        assert_eq!(pool.held_bytes(), 4000);
        let r2 = execute_pooled(&p, &ins, &mut pool).unwrap();
        assert_eq!(
            r2.outputs[0].2.as_ptr(),
            ptr,
            "the recycled vector was not reused"
        );
        assert_eq!(pool.held_bytes(), 0);
    }

    /// Feeds borrowed for a call take precedence over the map's value of the same name, and
    /// a feed of the wrong length is an error naming the input.
    #[test]
    fn feeds_override_the_map_and_are_checked() {
        let g = Graph::from_json_str(
            r#"{"schema_version":1,"name":"add","nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[2],"dtype":"fp32"}},
          {"name":"w","op":"Weight","attrs":{"shape":[2],"dtype":"fp32"}},
          {"name":"y","op":"Add","inputs":["x","w"]}]}"#,
        )
        .unwrap();
        let p = compile(&g).unwrap().fused;
        let map = HashMap::from([
            ("x".to_string(), vec![100.0f32, 200.0]),
            ("w".to_string(), vec![1.0f32, 2.0]),
        ]);
        let x = [5.0f32, 6.0];
        let feeds = [("x", &x[..])];
        let r = execute_values(&p, Values::new(&map, &feeds), &mut Pool::default(), None).unwrap();
        // y = feed x + w = [5 + 1, 6 + 2], not the map's x.
        assert_eq!(r.outputs[0].2, vec![6.0, 8.0]);
        let short = [5.0f32];
        let feeds = [("x", &short[..])];
        let e = execute_values(&p, Values::new(&map, &feeds), &mut Pool::default(), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains('x') && e.contains("has 1 elements, expected 2"),
            "{e}"
        );
    }

    /// A fresh buffer is n zeros, of capacity n (what a Vec<f32> of that length frees), at
    /// sizes under, at and over the huge-page advice's threshold.
    #[test]
    fn fresh_buffers_are_zeroed_at_every_size() {
        let mut pool = Pool::default();
        for n in [
            1usize,
            7,
            1 << 10,
            (2 << 20) / 4 - 1,
            (2 << 20) / 4,
            3 << 20,
        ] {
            let v = pool.take(n).unwrap();
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x.to_bits() == 0), "n = {n}");
        }
        assert!(pool.take(0).unwrap().is_empty());
    }
}

#[cfg(test)]
mod transpose_tests {
    use super::transpose_into;

    /// Every permutation of ranks 1–4 (size-1 axes included) against the definition:
    /// out[i0, i1, ...] = src at the input index with axis perm[k] set to i_k.
    #[test]
    fn transpose_matches_the_definition_for_every_permutation() {
        fn perms(r: usize) -> Vec<Vec<usize>> {
            if r == 0 {
                return vec![vec![]];
            }
            let mut out = vec![];
            for p in perms(r - 1) {
                for k in 0..=p.len() {
                    let mut q = p.clone();
                    q.insert(k, r - 1);
                    out.push(q);
                }
            }
            out
        }
        for shape in [
            vec![5],
            vec![3, 4],
            vec![2, 1, 3],
            vec![2, 3, 4, 5],
            vec![1, 4, 1, 3],
        ] {
            let n: usize = shape.iter().product();
            let src: Vec<f32> = (0..n).map(|i| i as f32).collect();
            for perm in perms(shape.len()) {
                let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
                let mut got = vec![f32::NAN; n];
                transpose_into(&src, &shape, &perm, &mut got);
                assert_eq!(got.len(), n, "shape {shape:?} perm {perm:?}");
                for (o, &g) in got.iter().enumerate() {
                    // Unravel o in the output shape, then ravel in the input shape.
                    let mut rem = o;
                    let mut idx_in = vec![0usize; shape.len()];
                    for k in (0..out_shape.len()).rev() {
                        idx_in[perm[k]] = rem % out_shape[k];
                        rem /= out_shape[k];
                    }
                    let off = idx_in.iter().zip(&shape).fold(0, |acc, (i, d)| acc * d + i);
                    assert_eq!(g, src[off], "shape {shape:?} perm {perm:?} at {o}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::select;

    #[test]
    fn select_takes_each_operand_whole_or_as_one_value() {
        // out[i] = c[i] != 0 ? x[i] : y[i], a one-value operand read for every i.
        let c = [1.0, 0.0, -0.0, 2.0, f32::NAN];
        let x = [10.0, 11.0, 12.0, 13.0, 14.0];
        let y = [20.0, 21.0, 22.0, 23.0, 24.0];
        let def = |c: &[f32], x: &[f32], y: &[f32]| -> Vec<f32> {
            let at = |v: &[f32], i: usize| if v.len() == 1 { v[0] } else { v[i] };
            (0..5)
                .map(|i| if at(c, i) != 0.0 { at(x, i) } else { at(y, i) })
                .collect()
        };
        // -0.0 selects y (it equals zero); NaN selects x (NaN != 0).
        assert_eq!(def(&c, &x, &y), [10.0, 21.0, 22.0, 13.0, 14.0]);
        for (cc, xx, yy) in [
            (&c[..], &x[..], &y[..]),
            (&c[..], &[5.0][..], &[-5.0][..]),
            (&c[..], &x[..], &[-5.0][..]),
            (&c[..], &[5.0][..], &y[..]),
            (&[0.0][..], &x[..], &y[..]),
            (&[1.0][..], &[5.0][..], &y[..]),
        ] {
            let mut out = [f32::NAN; 5];
            select(cc, xx, yy, &mut out);
            assert_eq!(out.to_vec(), def(cc, xx, yy), "{cc:?} {xx:?} {yy:?}");
        }
        // One element in all: no broadcast.
        let mut one = [0.0];
        select(&[0.0], &[1.0], &[2.0], &mut one);
        assert_eq!(one, [2.0]);
    }
}
