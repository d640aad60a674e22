//! Executors: turn a workload into a closure that runs one iteration on buffers it owns.
//! GEMMs run on faer (f32, row-major, `Par::rayon(threads)` or sequential for one thread);
//! Conv2D lowers each image and group with im2col into a column buffer and multiplies by the
//! weight matrix; attention and transformer blocks run the Core decomposition's GEMMs (faer)
//! and element-wise ops (the kernels crate's `block` and `softmax`) back to back, each on its
//! own buffers of the decomposition's shapes (data does not flow between them: head-layout
//! transposes are not modelled, which keeps each op's traffic at its compulsory bytes); kernels call the kernels crate; graphs run the graph
//! compiler's executor (`execute_pooled`, fused or unfused program) on seeded inputs
//! allocated once, with the executor's buffer pool kept across calls. Closures must be
//! run inside the rayon pool the harness built, so `rayon` parallelism uses its threads.

use crate::error::{MeasureError, Result};
use crate::workload::{fp32_block, fp32_conv, GraphWorkload, KernelWorkload, WorkloadKind};
use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;
use tensorforge_core::conv::Conv2d;
use tensorforge_core::transformer::{MlpKind, NormKind, TransformerBlock};
use tensorforge_core::GemmRole;
use tensorforge_kernels::fused::{rmsnorm_swiglu_fused, rmsnorm_swiglu_unfused, SwigluShape};
use tensorforge_kernels::Shape2;

/// One iteration of a workload on its own buffers.
pub type Iteration = Box<dyn FnMut() -> Result<()> + Send>;

/// Loops run on rayon above this many elements (when threads > 1): the kernels' threshold.
use tensorforge_kernels::block::PAR_MIN_ELEMS;

fn us(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Deterministic pseudo-random f32 in [-1, 1) (no zero pages, no denormals): the Core's
/// generator, [`tensorforge_core::rng::SplitMix64::f32_pm1_vec`].
pub fn filled(len: usize, seed: u64) -> Vec<f32> {
    tensorforge_core::rng::SplitMix64::f32_pm1_vec(seed, len)
}

fn par_for(threads: usize) -> Par {
    if threads > 1 {
        Par::rayon(threads)
    } else {
        Par::Seq
    }
}

struct GemmBufs {
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl GemmBufs {
    fn new(m: u64, n: u64, k: u64, batch: u64, seed: u64) -> GemmBufs {
        let (m, n, k, batch) = (us(m), us(n), us(k), us(batch));
        GemmBufs {
            m,
            n,
            k,
            batch,
            a: filled(batch * m * k, seed),
            b: filled(batch * k * n, seed + 1),
            c: vec![0.0; batch * m * n],
        }
    }

    fn run(&mut self, par: Par) {
        let (m, n, k) = (self.m, self.n, self.k);
        for i in 0..self.batch {
            matmul(
                MatMut::from_row_major_slice_mut(&mut self.c[i * m * n..(i + 1) * m * n], m, n),
                Accum::Replace,
                MatRef::from_row_major_slice(&self.a[i * m * k..(i + 1) * m * k], m, k),
                MatRef::from_row_major_slice(&self.b[i * k * n..(i + 1) * k * n], k, n),
                1.0f32,
                par,
            );
        }
    }
}

/// f32 elements of A, B and C: the Core's compulsory bytes in f32 / 4 (`u64::MAX` when the
/// shape overflows).
fn gemm_elems(m: u64, n: u64, k: u64, batch: u64) -> u64 {
    crate::workload::fp32_gemm(m, n, k, batch)
        .compulsory_bytes()
        .map(|b| b / 4)
        .unwrap_or(u64::MAX)
}

fn conv_dims(c: &Conv2d) -> Result<(u64, u64, u64, u64)> {
    let (ho, wo) = c.output_hw()?;
    let kk = (c.in_channels / c.groups) * c.kernel_h * c.kernel_w;
    Ok((ho, wo, kk, c.out_channels / c.groups))
}

fn conv_elems(c: &Conv2d) -> u64 {
    let Ok((ho, wo, kk, _)) = conv_dims(c) else {
        return u64::MAX;
    };
    let input = c.batch * c.in_channels * c.height * c.width;
    let weight = c.out_channels * kk;
    let col = kk.saturating_mul(ho * wo);
    let out = c.batch * c.out_channels * ho * wo;
    input
        .saturating_add(weight)
        .saturating_add(col)
        .saturating_add(out)
}

/// One element-wise operation of a block, with its buffers.
enum Elementwise {
    Norm {
        rows: usize,
        cols: usize,
        rms: bool,
        x: Vec<f32>,
        gamma: Vec<f32>,
        out: Vec<f32>,
    },
    Rotary {
        head_dim: usize,
        x: Vec<f32>,
        table: Vec<f32>,
        out: Vec<f32>,
    },
    Softmax {
        rows: usize,
        cols: usize,
        x: Vec<f32>,
        out: Vec<f32>,
    },
    Residual {
        a: Vec<f32>,
        b: Vec<f32>,
        out: Vec<f32>,
    },
    Gelu {
        x: Vec<f32>,
        out: Vec<f32>,
    },
    Swiglu {
        g: Vec<f32>,
        u: Vec<f32>,
        out: Vec<f32>,
    },
}

impl Elementwise {
    #[cfg(test)]
    fn elements(&self) -> usize {
        match self {
            Elementwise::Norm { x, gamma, out, .. } => x.len() + gamma.len() + out.len(),
            Elementwise::Rotary { x, table, out, .. } => x.len() + table.len() + out.len(),
            Elementwise::Softmax { x, out, .. } => x.len() + out.len(),
            Elementwise::Residual { a, b, out } | Elementwise::Swiglu { g: a, u: b, out } => {
                a.len() + b.len() + out.len()
            }
            Elementwise::Gelu { x, out } => x.len() + out.len(),
        }
    }

    fn run(&mut self, threads: usize) -> Result<()> {
        use tensorforge_kernels::block;
        match self {
            Elementwise::Norm {
                rows,
                cols,
                rms,
                x,
                gamma,
                out,
            } => block::norm_rows(x, gamma, out, *rows, *cols, *rms, threads)?,
            Elementwise::Rotary {
                head_dim,
                x,
                table,
                out,
            } => block::rotary(x, table, out, *head_dim, threads)?,
            Elementwise::Softmax { rows, cols, x, out } => {
                tensorforge_kernels::softmax(x, Shape2::new(*rows, *cols), out)?;
            }
            Elementwise::Residual { a, b, out } => block::residual_add(a, b, out, threads)?,
            Elementwise::Swiglu { g, u, out } => block::swiglu(g, u, out, threads)?,
            Elementwise::Gelu { x, out } => block::gelu(x, out, threads)?,
        }
        Ok(())
    }
}

enum BlockOp {
    Gemm(GemmBufs),
    Elementwise(Elementwise),
}

/// The ops of an attention part or whole block, in the decomposition's execution order
/// (GEMMs and element-wise ops interleaved as a block runs them).
fn block_ops(
    b: &TransformerBlock,
    attention_only: bool,
    allocate: bool,
) -> Result<(Vec<BlockOp>, u64)> {
    let d = fp32_block(b).decompose()?;
    let mut ops = Vec::new();
    let mut elems: u64 = 0;
    let v = |n: u64, seed: u64| {
        if allocate {
            filled(us(n), seed)
        } else {
            Vec::new()
        }
    };
    let z = |n: u64| {
        if allocate {
            vec![0.0f32; us(n)]
        } else {
            Vec::new()
        }
    };
    let (t, dm, f) = (d.tokens, b.d_model, b.d_ff);
    let hd = d.head_dim;
    let gemm = |role: GemmRole, ops: &mut Vec<BlockOp>, elems: &mut u64, seed: u64| {
        if let Some(g) = d.gemms.iter().find(|g| g.role == role) {
            let g = &g.gemm;
            *elems = elems.saturating_add(gemm_elems(g.m, g.n, g.k, g.batch));
            if allocate {
                ops.push(BlockOp::Gemm(GemmBufs::new(g.m, g.n, g.k, g.batch, seed)));
            }
        }
    };
    let push_ew = |e: Elementwise, n: u64, ops: &mut Vec<BlockOp>, elems: &mut u64| {
        *elems = elems.saturating_add(n);
        if allocate {
            ops.push(BlockOp::Elementwise(e));
        }
    };
    let td = t * dm;
    let rms = b.norm == NormKind::RmsNorm;
    if !attention_only {
        push_ew(
            Elementwise::Norm {
                rows: us(t),
                cols: us(dm),
                rms,
                x: v(td, 1),
                gamma: v(dm, 2),
                out: z(td),
            },
            2 * td + dm,
            &mut ops,
            &mut elems,
        );
    }
    for (i, role) in [GemmRole::QProj, GemmRole::KProj, GemmRole::VProj]
        .into_iter()
        .enumerate()
    {
        gemm(role, &mut ops, &mut elems, 10 + i as u64);
    }
    if !attention_only {
        let rot = t * (b.heads + d.kv_heads) * hd;
        push_ew(
            Elementwise::Rotary {
                head_dim: us(hd),
                x: v(rot, 3),
                table: v(2 * hd, 4),
                out: z(rot),
            },
            2 * rot + 2 * hd,
            &mut ops,
            &mut elems,
        );
    }
    gemm(GemmRole::AttnScores, &mut ops, &mut elems, 20);
    let scores = b.batch * b.heads * d.query_len * d.attention_len;
    push_ew(
        Elementwise::Softmax {
            rows: us(b.batch * b.heads * d.query_len),
            cols: us(d.attention_len),
            x: v(scores, 5),
            out: z(scores),
        },
        2 * scores,
        &mut ops,
        &mut elems,
    );
    gemm(GemmRole::AttnValues, &mut ops, &mut elems, 30);
    gemm(GemmRole::OProj, &mut ops, &mut elems, 40);
    if !attention_only {
        push_ew(
            Elementwise::Residual {
                a: v(td, 6),
                b: v(td, 7),
                out: z(td),
            },
            3 * td,
            &mut ops,
            &mut elems,
        );
        push_ew(
            Elementwise::Norm {
                rows: us(t),
                cols: us(dm),
                rms,
                x: v(td, 8),
                gamma: v(dm, 9),
                out: z(td),
            },
            2 * td + dm,
            &mut ops,
            &mut elems,
        );
        gemm(GemmRole::MlpGate, &mut ops, &mut elems, 50);
        gemm(GemmRole::MlpUp, &mut ops, &mut elems, 60);
        let tf = t * f;
        match b.mlp {
            MlpKind::Gelu => push_ew(
                Elementwise::Gelu {
                    x: v(tf, 11),
                    out: z(tf),
                },
                2 * tf,
                &mut ops,
                &mut elems,
            ),
            MlpKind::Swiglu => push_ew(
                Elementwise::Swiglu {
                    g: v(tf, 12),
                    u: v(tf, 13),
                    out: z(tf),
                },
                3 * tf,
                &mut ops,
                &mut elems,
            ),
        }
        gemm(GemmRole::MlpDown, &mut ops, &mut elems, 70);
        push_ew(
            Elementwise::Residual {
                a: v(td, 14),
                b: v(td, 15),
                out: z(td),
            },
            3 * td,
            &mut ops,
            &mut elems,
        );
    }
    Ok((ops, elems))
}

/// f32 elements of every buffer one instance allocates (saturating; `u64::MAX` when the
/// shape is invalid).
pub fn buffer_elements(kind: &WorkloadKind) -> u64 {
    match kind {
        WorkloadKind::Gemm { m, n, k, batch } => gemm_elems(*m, *n, *k, *batch),
        WorkloadKind::Conv2d(c) => conv_elems(c),
        WorkloadKind::Attention(b) => block_ops(b, true, false).map(|r| r.1).unwrap_or(u64::MAX),
        WorkloadKind::Transformer(b) => block_ops(b, false, false).map(|r| r.1).unwrap_or(u64::MAX),
        // The kernels allocate exactly the buffers they read and write (the quantizer's int8
        // output counted in f32 elements, rounded up): the Core's compulsory bytes / 4.
        WorkloadKind::Kernel(k) => k
            .compulsory_bytes()
            .map(|b| b.div_ceil(4))
            .unwrap_or(u64::MAX),
        WorkloadKind::Graph(g) => graph_elements(g).unwrap_or(u64::MAX),
        WorkloadKind::Empty => 0,
    }
}

/// f32 elements one graph instance holds: its inputs and weights, the executor's copies of
/// them, every full-size buffer its program writes (kernel outputs) and the cloned outputs.
fn graph_elements(g: &GraphWorkload) -> Result<u64> {
    let p = g.program(&g.source)?;
    let tg = &p.graph;
    let mut n: u64 = 0;
    for (i, node) in tg.nodes.iter().enumerate() {
        if matches!(
            node.op,
            tensorforge_graph::Op::Input { .. } | tensorforge_graph::Op::Weight { .. }
        ) {
            n = n.saturating_add(tg.tensors[tg.node_outputs[i][0]].numel.saturating_mul(2));
        }
    }
    for k in &p.kernels {
        for &t in &k.outputs {
            n = n.saturating_add(tg.tensors[t].numel);
        }
    }
    for &t in &tg.outputs {
        n = n.saturating_add(tg.tensors[t].numel);
    }
    Ok(n)
}

/// Compile the graph, fill its inputs (seeded) once, run it once untimed so the executor's
/// buffer pool holds every full-size buffer, and return the call that executes the program
/// again with that pool (`execute_pooled`, as `tensorforge run --bench` does), so calls do
/// not pay first-touch page faults.
///
/// Every buffer of a call comes from the pool and returns to it, so the peak allocation is
/// the same on every call.
fn graph_iteration(g: &GraphWorkload, seed: u64) -> Result<Iteration> {
    let (source, mode) = (g.source.clone(), g.mode);
    let err = move |e: tensorforge_graph::GraphError| {
        MeasureError::Other(format!("graph `{source}` ({}): {e}", mode.label()))
    };
    let p = g.program(&g.source)?;
    let mut inputs = std::collections::HashMap::new();
    tensorforge_graph::exec::fill_inputs(&p.graph, &mut inputs, seed).map_err(&err)?;
    let mut pool = tensorforge_graph::exec::Pool::default();
    tensorforge_graph::exec::execute_pooled(&p, &inputs, &mut pool).map_err(&err)?;
    Ok(Box::new(move || {
        let r = tensorforge_graph::exec::execute_pooled(&p, &inputs, &mut pool).map_err(&err)?;
        std::hint::black_box(&r);
        Ok(())
    }))
}

/// Allocate one instance's buffers (seeded by `seed`) and return its iteration closure.
pub fn prepare(kind: &WorkloadKind, threads: usize, seed: u64) -> Result<Iteration> {
    let par = par_for(threads);
    Ok(match kind {
        WorkloadKind::Gemm { m, n, k, batch } => {
            let mut g = GemmBufs::new(*m, *n, *k, *batch, seed);
            Box::new(move || {
                g.run(par);
                Ok(())
            })
        }
        WorkloadKind::Conv2d(c) => conv_iteration(&fp32_conv(c), threads, seed)?,
        WorkloadKind::Attention(b) | WorkloadKind::Transformer(b) => {
            let (mut ops, _) = block_ops(b, matches!(kind, WorkloadKind::Attention(_)), true)?;
            Box::new(move || {
                for op in ops.iter_mut() {
                    match op {
                        BlockOp::Gemm(g) => g.run(par),
                        BlockOp::Elementwise(e) => e.run(threads)?,
                    }
                }
                Ok(())
            })
        }
        WorkloadKind::Kernel(k) => kernel_iteration(k, seed),
        WorkloadKind::Graph(g) => graph_iteration(g, seed)?,
        WorkloadKind::Empty => Box::new(|| {
            std::hint::black_box(());
            Ok(())
        }),
    })
}

fn kernel_iteration(k: &KernelWorkload, seed: u64) -> Iteration {
    match *k {
        KernelWorkload::Logaddexp { n } => {
            let (a, b, mut out) = (filled(n, seed), filled(n, seed + 1), vec![0.0f32; n]);
            Box::new(move || Ok(tensorforge_kernels::logaddexp_slice(&a, &b, &mut out)?))
        }
        KernelWorkload::Logsumexp { rows, cols } => {
            let (x, mut out) = (filled(rows * cols, seed), vec![0.0f32; rows]);
            Box::new(move || {
                Ok(tensorforge_kernels::logsumexp(
                    &x,
                    Shape2::new(rows, cols),
                    &mut out,
                )?)
            })
        }
        KernelWorkload::Softmax { rows, cols } => {
            let (x, mut out) = (filled(rows * cols, seed), vec![0.0f32; rows * cols]);
            Box::new(move || {
                Ok(tensorforge_kernels::softmax(
                    &x,
                    Shape2::new(rows, cols),
                    &mut out,
                )?)
            })
        }
        KernelWorkload::Quantize { n } => {
            let (x, mut out) = (filled(n, seed), vec![0i8; n]);
            Box::new(move || {
                Ok(tensorforge_kernels::quant::quantize::<i8>(
                    &x, 0.01, 0, &mut out,
                )?)
            })
        }
        KernelWorkload::RmsnormSwigluFused {
            tokens,
            d_model,
            d_ff,
        }
        | KernelWorkload::RmsnormSwigluUnfused {
            tokens,
            d_model,
            d_ff,
        } => {
            let fused = matches!(k, KernelWorkload::RmsnormSwigluFused { .. });
            let shape = SwigluShape {
                tokens,
                d_model,
                d_ff,
            };
            let x = filled(tokens * d_model, seed);
            let gamma = filled(d_model, seed + 1);
            let wg = filled(d_model * d_ff, seed + 2);
            let wu = filled(d_model * d_ff, seed + 3);
            let mut out = vec![0.0f32; tokens * d_ff];
            Box::new(move || {
                if fused {
                    rmsnorm_swiglu_fused(&x, &gamma, &wg, &wu, shape, 1e-6, &mut out)?;
                } else {
                    rmsnorm_swiglu_unfused(&x, &gamma, &wg, &wu, shape, 1e-6, &mut out)?;
                }
                Ok(())
            })
        }
    }
}

/// im2col of one image and group into `col` (`K × Ho·Wo`, row-major).
#[allow(clippy::too_many_arguments)]
fn im2col(
    c: &Conv2d,
    image: &[f32],
    group: usize,
    ho: usize,
    wo: usize,
    col: &mut [f32],
    threads: usize,
) {
    let cin_g = us(c.in_channels / c.groups);
    let (h, w) = (us(c.height), us(c.width));
    let (kh, kw) = (us(c.kernel_h), us(c.kernel_w));
    let (sh, sw, ph, pw, dh, dw) = (
        us(c.stride_h),
        us(c.stride_w),
        us(c.pad_h),
        us(c.pad_w),
        us(c.dilation_h),
        us(c.dilation_w),
    );
    let fill = |(r, row): (usize, &mut [f32])| {
        let ch = group * cin_g + r / (kh * kw);
        let ky = (r / kw) % kh;
        let kx = r % kw;
        let plane = &image[ch * h * w..(ch + 1) * h * w];
        for oy in 0..ho {
            let iy = (oy * sh + ky * dh).wrapping_sub(ph);
            let out = &mut row[oy * wo..(oy + 1) * wo];
            if iy >= h {
                out.fill(0.0);
                continue;
            }
            for (ox, o) in out.iter_mut().enumerate() {
                let ix = (ox * sw + kx * dw).wrapping_sub(pw);
                *o = if ix < w { plane[iy * w + ix] } else { 0.0 };
            }
        }
    };
    if threads > 1 && col.len() >= PAR_MIN_ELEMS {
        col.par_chunks_mut(ho * wo).enumerate().for_each(fill);
    } else {
        col.chunks_mut(ho * wo).enumerate().for_each(fill);
    }
}

fn conv_iteration(c: &Conv2d, threads: usize, seed: u64) -> Result<Iteration> {
    let (ho, wo, kk, cout_g) = conv_dims(c)?;
    let (ho, wo, kk, cout_g) = (us(ho), us(wo), us(kk), us(cout_g));
    let (b, groups) = (us(c.batch), us(c.groups));
    let image_elems = us(c.in_channels * c.height * c.width);
    let input = filled(b * image_elems, seed);
    let weight = filled(us(c.out_channels) * kk, seed + 1);
    let mut col = vec![0.0f32; kk * ho * wo];
    let out_image = us(c.out_channels) * ho * wo;
    let mut out = vec![0.0f32; b * out_image];
    let conv = c.clone();
    let par = par_for(threads);
    if kk == 0 || ho * wo == 0 {
        return Err(MeasureError::Other(format!(
            "conv2d: empty lowered GEMM ({kk} × {ho}·{wo})"
        )));
    }
    Ok(Box::new(move || {
        for i in 0..b {
            let image = &input[i * image_elems..(i + 1) * image_elems];
            for g in 0..groups {
                im2col(&conv, image, g, ho, wo, &mut col, threads);
                let dst = &mut out[i * out_image + g * cout_g * ho * wo
                    ..i * out_image + (g + 1) * cout_g * ho * wo];
                matmul(
                    MatMut::from_row_major_slice_mut(dst, cout_g, ho * wo),
                    Accum::Replace,
                    MatRef::from_row_major_slice(
                        &weight[g * cout_g * kk..(g + 1) * cout_g * kk],
                        cout_g,
                        kk,
                    ),
                    MatRef::from_row_major_slice(&col, kk, ho * wo),
                    1.0f32,
                    par,
                );
            }
        }
        Ok(())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::parse_workload_name;

    #[test]
    fn every_kind_runs_once() {
        for n in [
            "gemm:m=3:n=4:k=5:batch=2",
            "kernel:logaddexp:n=7",
            "kernel:logsumexp:rows=3:cols=5",
            "kernel:softmax:rows=3:cols=5",
            "kernel:quantize:n=9",
            "kernel:rmsnorm_swiglu_fused:tokens=3:d_model=4:d_ff=6",
            "kernel:rmsnorm_swiglu_unfused:tokens=3:d_model=4:d_ff=6",
            "graph:logaddexp_chain",
            "graph:attention_softmax:mode=unfused",
            "empty",
        ] {
            let s = parse_workload_name(n).unwrap();
            let mut f = prepare(&s.kind, 2, 1).unwrap();
            f().unwrap_or_else(|e| panic!("{n}: {e}"));
        }
    }

    #[test]
    fn im2col_conv_matches_direct() {
        // 1 image, 2 in channels, 4x4, 3 out channels, 3x3 kernel, pad 1, stride 2.
        let c = Conv2d {
            batch: 1,
            in_channels: 2,
            height: 4,
            width: 4,
            out_channels: 3,
            kernel_h: 3,
            kernel_w: 3,
            stride_h: 2,
            stride_w: 2,
            pad_h: 1,
            pad_w: 1,
            dilation_h: 1,
            dilation_w: 1,
            groups: 1,
            dtype: tensorforge_core::DType::Fp32,
        };
        let (ho, wo, kk, _) = conv_dims(&c).unwrap();
        let (ho, wo, kk) = (ho as usize, wo as usize, kk as usize);
        let input = filled(32, 5);
        let weight = filled(3 * kk, 6);
        let mut col = vec![0.0; kk * ho * wo];
        im2col(&c, &input, 0, ho, wo, &mut col, 1);
        for oc in 0..3 {
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut direct = 0.0f32;
                    for ic in 0..2 {
                        for ky in 0..3 {
                            for kx in 0..3 {
                                let iy = (oy * 2 + ky) as isize - 1;
                                let ix = (ox * 2 + kx) as isize - 1;
                                if (0..4).contains(&iy) && (0..4).contains(&ix) {
                                    direct += input[ic * 16 + iy as usize * 4 + ix as usize]
                                        * weight[oc * kk + ic * 9 + ky * 3 + kx];
                                }
                            }
                        }
                    }
                    let lowered: f32 = (0..kk)
                        .map(|r| weight[oc * kk + r] * col[r * ho * wo + oy * wo + ox])
                        .sum();
                    assert!((direct - lowered).abs() < 1e-5, "{direct} vs {lowered}");
                }
            }
        }
    }

    #[test]
    fn block_buffers_match_working_set() {
        let s = parse_workload_name("attention:transformer_small").unwrap();
        let WorkloadKind::Attention(b) = &s.kind else {
            unreachable!()
        };
        let (ops, elems) = block_ops(b, true, true).unwrap();
        let counted: u64 = ops
            .iter()
            .map(|o| match o {
                BlockOp::Gemm(g) => (g.a.len() + g.b.len() + g.c.len()) as u64,
                BlockOp::Elementwise(e) => e.elements() as u64,
            })
            .sum();
        assert_eq!(counted, elems);
    }
}
