//! The block evaluator of elementwise, row and matmul kernels: each node input bound to
//! scratch, a flat slice, a scalar, a per-row or a broadcast read (`plan_nodes`, shared with
//! the C code generator), scratch slots by liveness, MatMul products computed whole by faer
//! first, then blocks of whole rows evaluated in parallel with only the kernel's outputs
//! stored. Pure elementwise kernels on AVX2 go to `tile` instead.

use super::elementwise::{binary_apply, unary_apply, Src};
use super::program::{exec_err, Buf, Bufs, State};
#[cfg(target_arch = "x86_64")]
use super::tile;
use crate::error::Result;
use crate::fusion::Kernel;
#[cfg(any(target_arch = "x86_64", test))]
use crate::fusion::KernelKind;
use crate::ir::{Op, TypedGraph};
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

#[derive(Clone, Copy)]
pub(super) struct SendPtr(pub(super) *mut f32);
// SAFETY: blocks write disjoint ranges of each output buffer (see `run_blocks`).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

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

#[derive(Clone)]
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

/// MatMul node `n`'s product, computed with faer from its operands' buffers into `c` (an
/// operand that is a transpose of a stored tensor's last two axes is read in place), added
/// to what `c` holds with `accumulate`.
pub(super) fn product_into(st: &State, n: usize, c: &mut [f32], accumulate: bool) -> Result<()> {
    let (tg, bufs) = (st.tg, &st.bufs);
    let operand = |j: usize| {
        let t = tg.node_inputs[n][j];
        crate::gemm::operand(tg, |u| bufs[u].as_deref(), t).ok_or_else(|| {
            exec_err(
                tg,
                n,
                format!("operand `{}` is not available", tg.tensors[t].name),
            )
        })
    };
    let (a, b) = (operand(0)?, operand(1)?);
    // A weight on the right (read in place or through a transpose of its last two axes)
    // runs through the packed kernel with the weight packed once ([`super::linear`]).
    let rhs = tg.node_inputs[n][1];
    let stored = crate::gemm::transposed_source(tg, rhs).unwrap_or(rhs);
    if matches!(tg.nodes[tg.producer[stored]].op, Op::Weight { .. })
        && super::linear::packed_weight_product(st.filters, n, a, b, c, accumulate)
            .map_err(|e| exec_err(tg, n, e))?
    {
        return Ok(());
    }
    crate::gemm::matmul_acc(a, b, c, accumulate).map_err(|e| exec_err(tg, n, e))
}

/// Every row of `c` set to bias tensor `b` (one value per column), for node `n`'s GEMM to
/// accumulate onto ([`crate::fusion::matmul_bias`]).
pub(super) fn fill_bias_rows(st: &State, n: usize, b: usize, c: &mut [f32]) -> Result<()> {
    let bias = st.bufs[b]
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| exec_err(st.tg, n, "the bias has no value"))?;
    for row in c.chunks_exact_mut(bias.len()) {
        row.copy_from_slice(bias);
    }
    Ok(())
}

/// A kernel's node plans as the program's memo holds them: for the node list they were made
/// for (a kernel whose nodes changed since is planned again).
pub(crate) type MemoPlans = (Vec<usize>, Vec<NodePlan>);

/// [`run_blocks`] with the kernel's plans from the program's memo when they were made for
/// these nodes (planning every run cost 3 % of a small block's run in allocations).
pub(super) fn run_blocks(st: &mut State, k: &Kernel, memo: Option<&MemoPlans>) -> Result<()> {
    let tg = st.tg;
    let planned;
    let plans: &[NodePlan] = match memo {
        Some((nodes, plans)) if *nodes == k.nodes => plans,
        _ => {
            planned = plan_nodes(tg, k)?;
            &planned
        }
    };
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
    // A bias the GEMM adds itself (`fusion::matmul_bias`): the Add's value is computed with
    // the product (rows started at the bias, the product accumulated onto them), and the
    // MatMul's own value, read by nothing else, is skipped in the blocks.
    let fold = crate::fusion::matmul_bias(tg, k)
        .and_then(|(add, b)| Some((plans.iter().position(|p| p.node == add)?, b)));
    let mut skip = None;
    for (pi, p) in plans.iter().enumerate() {
        let n = p.node;
        if !matches!(tg.nodes[n].op, Op::MatMul) {
            continue;
        }
        let (dst, b) = match fold.filter(|_| n == k.nodes[0]) {
            Some((pj, b)) => (pj, Some(b)),
            None => (pi, None),
        };
        let mut c = match plans[dst].store {
            Some(oi) => std::mem::take(&mut outs[oi]),
            None => st
                .pool
                .take(tg.tensors[tg.node_outputs[plans[dst].node][0]].numel as usize)?,
        };
        if let Some(b) = b {
            fill_bias_rows(st, n, b, &mut c)?;
            skip = Some(pi);
        }
        product_into(st, n, &mut c, b.is_some())?;
        pre[dst] = Some(c);
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
            st.bufs[*t] = v.map(Buf::Owned);
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
        if let Some(prog) = tile::compile(tg, bufs, plans, k)? {
            tile::run(&prog, &ptrs)?;
            drop(prog);
            for (t, v) in k.outputs.iter().zip(outs) {
                st.bufs[*t] = Some(Buf::Owned(v));
            }
            return Ok(());
        }
    }
    let max_in = plans.iter().map(|p| p.binds.len()).max().unwrap_or(0);
    let cap = rows_per_block * cols;
    let work = |s: &mut Scratch, b: usize| -> Result<()> {
        let r0 = b * rows_per_block;
        let r1 = (r0 + rows_per_block).min(rows);
        eval_block(tg, bufs, plans, &pre, skip, s, r0, r1, cols, &ptrs)
    };
    let nslots = plans.iter().map(|p| p.slot + 1).max().unwrap_or(1);
    let ntmp = max_in.max(1);
    if rows.saturating_mul(cols) >= 1 << 16 && nblocks > 1 {
        let init = || Scratch {
            vals: (0..nslots).map(|_| Vec::with_capacity(cap)).collect(),
            tmp: (0..ntmp).map(|_| Vec::with_capacity(cap)).collect(),
        };
        (0..nblocks)
            .into_par_iter()
            .with_min_len(16)
            .try_for_each_init(init, work)?;
    } else {
        // On this thread: the scratch vectors come from the pool and go back to it, so a
        // run of small kernels allocates none after the first run.
        let pool = &mut st.pool;
        let mut s = Scratch {
            vals: (0..nslots).map(|_| pool.scratch(cap)).collect(),
            tmp: (0..ntmp).map(|_| pool.scratch(cap)).collect(),
        };
        let r = (0..nblocks).try_for_each(|b| work(&mut s, b));
        for v in s.vals.into_iter().chain(s.tmp) {
            pool.keep_scratch(v);
        }
        r?;
    }
    finish(st, outs, pre);
    Ok(())
}

/// Append `n` values of a broadcast or strided view of `src` to `out`, starting at output
/// index `idx` (input offset `off`), in runs along the last axis: a run is a slice copy
/// (stride 1), a fill (stride 0, a broadcast bias) or a strided loop, so a bias row costs
/// a `memcpy` per output row instead of an index update per element. Reads outside `src`
/// give 0 (a malformed view never panics).
pub(super) fn gather_runs(
    src: &[f32],
    shape: &[usize],
    strides: &[usize],
    idx: &mut [usize],
    mut off: usize,
    n: usize,
    out: &mut Vec<f32>,
) {
    let r = shape.len();
    if r == 0 {
        out.extend(std::iter::repeat_n(src.first().copied().unwrap_or(0.0), n));
        return;
    }
    let (last, st) = (shape[r - 1].max(1), strides[r - 1]);
    let mut left = n;
    while left > 0 {
        let run = (last - idx[r - 1]).min(left);
        match st {
            0 => out.extend(std::iter::repeat_n(
                src.get(off).copied().unwrap_or(0.0),
                run,
            )),
            1 => match src.get(off..off + run) {
                Some(s) => out.extend_from_slice(s),
                None => out.extend((0..run).map(|i| src.get(off + i).copied().unwrap_or(0.0))),
            },
            _ => out.extend((0..run).map(|i| src.get(off + i * st).copied().unwrap_or(0.0))),
        }
        left -= run;
        idx[r - 1] += run;
        off += run * st;
        // Carry into the outer axes.
        let mut d = r - 1;
        while idx[d] >= shape[d].max(1) && d > 0 {
            off -= strides[d] * shape[d];
            idx[d] = 0;
            d -= 1;
            idx[d] += 1;
            off += strides[d];
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn eval_block(
    tg: &TypedGraph,
    bufs: &Bufs,
    plans: &[NodePlan],
    pre: &[Option<Vec<f32>>],
    skip: Option<usize>,
    s: &mut Scratch,
    r0: usize,
    r1: usize,
    cols: usize,
    ptrs: &[(SendPtr, usize)],
) -> Result<()> {
    let nb = r1 - r0;
    for (pi, p) in plans.iter().enumerate() {
        if skip == Some(pi) {
            continue; // a MatMul whose biased product sits in the bias Add's `pre`
        }
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
                    // Runs over the trailing dims the input steps through as one (a
                    // per-channel scale: whole planes), not only the last.
                    let (shape, strides) = crate::codegen::merge_trailing(&p.out_shape, strides);
                    let (shape, strides) = (&shape[..], &strides[..]);
                    let r = shape.len();
                    let mut idx = vec![0usize; r];
                    let mut rem = f0;
                    for d in (0..r).rev() {
                        let dim = shape[d].max(1);
                        idx[d] = rem % dim;
                        rem /= dim;
                    }
                    let off: usize = idx.iter().zip(strides).map(|(a, b)| a * b).sum();
                    gather_runs(src, shape, strides, &mut idx, off, f1 - f0, tmp);
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
        if let Some(c) = pre.get(pi).and_then(|c| c.as_deref()) {
            // Computed whole before the blocks (`run_blocks`): a MatMul's product, or a bias
            // Add's biased product; this block's rows feed the epilogue from scratch.
            out.copy_from_slice(&c[f0..f1]);
        } else {
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
                            Op::ReduceSum { .. } => {
                                row.iter().map(|&v| v as f64).sum::<f64>() as f32
                            }
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
                            let ss = row.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>()
                                / cols as f64;
                            let inv = (1.0 / (ss + eps).sqrt()) as f32;
                            for j in 0..cols {
                                y[j] = row[j] * inv * gamma[j];
                            }
                        }
                    }
                }
                Op::MatMul => {
                    return Err(exec_err(tg, n, "the product was not computed"));
                }
                _ => {
                    return Err(exec_err(tg, n, "not supported inside a blocked kernel"));
                }
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
    bufs: &'a Bufs<'a>,
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

/// MatMul through faer: plain, batched and transposed operands against a naive f64
/// reference, fused (with epilogues) and unfused.
#[cfg(test)]
mod matmul_tests {
    use super::super::tests::TRANSPOSE_COPIES;
    use super::super::{execute, fill_inputs};
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
        // Two transposes that move the batch axis and back compose to the stored layout:
        // read in place too.
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
        assert_eq!(run_both(&gp, &ins, &want), 0, "no copy");
        // A Reshape that merges axes which the Transpose made non-contiguous keeps the copy
        // path (and the counter sees it): kk [b, k, n] → [k, b, n] → [k, b·n], read as the
        // right operand of x [m, k].
        let gr = mm_graph(
            &[("x", &[m, k]), ("kk", &[b, k, n])],
            &format!(
                r#"{{"name":"kp","op":"Transpose","attrs":{{"perm":[1,0,2]}},"inputs":["kk"]}},
                   {{"name":"kr","op":"Reshape","attrs":{{"shape":[{k},{bn}]}},"inputs":["kp"]}},
                   {{"name":"y","op":"MatMul","inputs":["x","kr"]}}"#,
                bn = b * n
            ),
            "y",
        );
        let mut ins = HashMap::new();
        fill_inputs(&compile(&gr).unwrap().unfused.graph, &mut ins, 17).unwrap();
        // kr[q, bi·n + j] = kk[bi, q, j].
        let kr: Vec<f32> = (0..k)
            .flat_map(|q| {
                let kk = &ins["kk"];
                (0..b * n).map(move |c| kk[(c / n) * k * n + q * n + c % n])
            })
            .collect();
        let want = naive(&ins["x"], &kr, 1, m, k, b * n, false);
        assert!(run_both(&gr, &ins, &want) > 0);
        // Five batch axes reversed by a Transpose cannot merge (each axis's stride is smaller
        // than the next one's extent), more than an operand describes in place: copied, and
        // still the right product. a [2,2,2,2,2,3,4], perm [4,3,2,1,0,5,6]: output batch
        // index (o0..o4) reads a[o4, o3, o2, o1, o0].
        let gt = mm_graph(
            &[("a", &[2, 2, 2, 2, 2, 3, 4]), ("w", &[4, 5])],
            r#"{"name":"at","op":"Transpose","attrs":{"perm":[4,3,2,1,0,5,6]},"inputs":["a"]},
               {"name":"y","op":"MatMul","inputs":["at","w"]}"#,
            "y",
        );
        let mut ins = HashMap::new();
        fill_inputs(&compile(&gt).unwrap().unfused.graph, &mut ins, 18).unwrap();
        let a = &ins["a"];
        let mut at = vec![];
        for o in 0..32usize {
            // o = o0·16 + o1·8 + o2·4 + o3·2 + o4; the source index is (o4, o3, o2, o1, o0).
            let d = [
                (o >> 4) & 1,
                (o >> 3) & 1,
                (o >> 2) & 1,
                (o >> 1) & 1,
                o & 1,
            ];
            let src = d[4] * 16 + d[3] * 8 + d[2] * 4 + d[1] * 2 + d[0];
            at.extend_from_slice(&a[src * 12..(src + 1) * 12]);
        }
        let want = naive(&at, &ins["w"], 32, 3, 4, 5, false);
        assert!(run_both(&gt, &ins, &want) > 0);
    }
}

#[cfg(test)]
mod gather_tests {
    use super::gather_runs;

    /// Runs along the last axis equal the element-by-element odometer for broadcast
    /// (stride 0), contiguous and strided views, from any starting index.
    #[test]
    fn gather_runs_equals_the_odometer() {
        let src: Vec<f32> = (0..200).map(|i| i as f32).collect();
        let cases: [(&[usize], &[usize]); 5] = [
            (&[4, 8], &[0, 1]),        // a bias row repeated
            (&[4, 8], &[1, 0]),        // a column broadcast along rows
            (&[3, 4, 5], &[20, 5, 1]), // contiguous
            (&[3, 4, 5], &[1, 3, 12]), // a transposed view
            (&[2, 3, 1, 4], &[0, 4, 0, 1]),
        ];
        for (shape, strides) in cases {
            let total: usize = shape.iter().product();
            for start in [0, 1, 5, total / 2, total - 1] {
                for n in [1, 3, total - start] {
                    let n = n.min(total - start);
                    // The odometer, one element at a time.
                    let mut want = vec![];
                    for f in start..start + n {
                        let (mut rem, mut off) = (f, 0);
                        for d in (0..shape.len()).rev() {
                            off += (rem % shape[d]) * strides[d];
                            rem /= shape[d];
                        }
                        want.push(src[off]);
                    }
                    let mut idx = vec![0usize; shape.len()];
                    let mut rem = start;
                    for d in (0..shape.len()).rev() {
                        idx[d] = rem % shape[d];
                        rem /= shape[d];
                    }
                    let off = idx.iter().zip(strides).map(|(a, b)| a * b).sum();
                    let mut got = vec![];
                    gather_runs(&src, shape, strides, &mut idx, off, n, &mut got);
                    assert_eq!(got, want, "{shape:?} {strides:?} from {start}, {n}");
                }
            }
        }
    }
}
