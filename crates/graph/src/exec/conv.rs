//! 2-D convolution (NCHW, grouped, strided, dilated, zero-padded) on the CPU as GEMMs, one
//! per image and group, `[K/g, C/g · R · S] · [C/g · R · S, P · Q]`. Where the Kernels
//! crate has a packed GEMM for this CPU (`sgemm`: AVX2 or AVX-512), the filters are packed for
//! it once per weight buffer (kept in the program's filter cache, as Winograd's transformed
//! filters are) and the right operand is read in place: the input planes (1×1, unit
//! stride, no padding), or the input's zero-padded planes split by stride into phase planes,
//! each tap a unit-stride window of one of them (implicit GEMM, for horizontal strides 1 and
//! 2: no column matrix; an output width of whole vectors is read as one run per output row
//! and written in place, otherwise the product spans the phase width, at most 5/4 of the
//! output width, and its extra columns are dropped when it is copied out), or else an
//! explicit column matrix (im2col) gathered from the padded planes, except for a patch
//! embedding (stride equal to the kernel, no padding: ViT's, ConvNeXt's stem), which runs as
//! a linear layer over its patches ([`patch_embedding`]). A 1 × 1 convolution on a small map
//! (7 × 7) runs as pixels × channels instead, its tiles stored transposed
//! into the output planes ([`pointwise_transposed`]), where that fills more of the vectors. Without that kernel
//! (other CPUs) the column matrix goes to faer. A large product is cut into blocks of
//! output channels or of pixels, whichever dimension is larger, one per worker
//! (`sgemm::Kernel::blocks`; faer's splits its output channels); many small ones run
//! (image, group) per worker. Depthwise convolutions
//! (one input and one output channel per group) skip the GEMM: across channels in blocks
//! of a vector (module `depthwise`) where the CPU has AVX2 and FMA, else a loop per channel
//! over its rows, channels in parallel. A residual added to the output and a clamp (ReLU,
//! ReLU6) of the following nodes ([`Post`]) are applied by the GEMM's tiles in registers
//! (`sgemm::Epilogue`), by Winograd's output transform and the implicit path's copy-out per
//! output plane, by the depthwise kernel to its sums (the clamp; with a residual, both in a
//! pass after), and by the patch and faer paths in a pass after.
//! Left out: FFT algorithms (Winograd is module `winograd`), NHWC layouts.

use faer::{Accum, MatRef};
use rayon::prelude::*;
use tensorforge_kernels::clamp::Clamp;
use tensorforge_kernels::sgemm::{Epilogue, Kernel, Left, Right};

/// What follows a convolution's sums (bias included) in its kernel and the convolution
/// applies itself: `clamp(out + addend)`, the addend laid out as the output (a residual
/// connection), each `+` one f32 rounding, so the value equals the graph's Add then
/// Relu / Clip nodes computed apart.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Post<'a> {
    /// Values of the output's shape added to it, or none.
    pub addend: Option<&'a [f32]>,
    /// Bounds applied last.
    pub clamp: Clamp,
}

impl<'a> Post<'a> {
    /// Nothing after the sums.
    pub(crate) const NONE: Post<'static> = Post {
        addend: None,
        clamp: Clamp::NONE,
    };

    /// The part of it for output values `[start, start + len)`.
    pub(crate) fn part(&self, start: usize, len: usize) -> Post<'a> {
        Post {
            addend: self.addend.map(|d| &d[start..][..len]),
            clamp: self.clamp,
        }
    }

    /// Applied to `out` (already holding the sums) in one pass, for the paths that do not
    /// apply it as they store.
    pub(crate) fn apply(&self, out: &mut [f32]) {
        if let Some(d) = self.addend {
            out.iter_mut().zip(d).for_each(|(o, d)| *o += d);
        }
        self.clamp.apply_slice(out);
    }
}

/// The geometry of one convolution.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConvShape {
    /// Batch, input channels, input height and width.
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    /// Output channels, kernel height and width.
    pub k: usize,
    pub r: usize,
    pub s: usize,
    /// Output height and width.
    pub p: usize,
    pub q: usize,
    pub stride: [usize; 2],
    pub pad: [usize; 2],
    pub dil: [usize; 2],
    pub group: usize,
}

impl ConvShape {
    /// The geometry of `Conv2d` node `n` of `tg` (`None` for another op or a tensor of
    /// another rank).
    pub(crate) fn of_node(tg: &crate::ir::TypedGraph, n: usize) -> Option<ConvShape> {
        let crate::ir::Op::Conv2d {
            strides,
            pads,
            dilations,
            group,
        } = &tg.nodes[n].op
        else {
            return None;
        };
        let ins = &tg.node_inputs[n];
        let (xs, ws) = (&tg.tensors[ins[0]].shape, &tg.tensors[*ins.get(1)?].shape);
        let os = &tg.tensors[*tg.node_outputs[n].first()?].shape;
        if xs.len() != 4 || ws.len() != 4 || os.len() != 4 {
            return None;
        }
        Some(ConvShape {
            n: xs[0],
            c: xs[1],
            h: xs[2],
            w: xs[3],
            k: ws[0],
            r: ws[2],
            s: ws[3],
            p: os[2],
            q: os[3],
            stride: [*strides.first()?, *strides.get(1)?],
            pad: [*pads.first()?, *pads.get(1)?],
            dil: [*dilations.first()?, *dilations.get(1)?],
            group: *group,
        })
    }
}

/// Multiply-accumulates of one GEMM below which faer runs it on the calling thread.
const PAR_MIN_MACS: usize = 1 << 20;
/// Multiply-accumulates of a whole convolution below which its (image, group) GEMMs run one
/// after another on the calling thread: waking a second worker costs tens of µs on a shared
/// VM, more than a few million multiply-adds save (ResNet fixture convolutions of 1.2 Mi
/// took 2x longer on two workers).
const PAR_MIN_TASKS_MACS: usize = 1 << 22;
/// The same while the run keeps its other workers awake (module `spin`): a hand-off then
/// costs about a microsecond, and the ResNet fixture's 1.2 Mi convolutions (two images) run
/// on two workers in well under the time of one. Its stem (3 → 16 channels, 0.2 Mi over two
/// images) gains too: 12.7–13.7 → 8.2–11.1 µs on two workers, and the whole fixture at two
/// threads 65.5–68.8 → 63.9–65.5 µs (4 alternated rounds, AMD EPYC Zen 3, AVX2; was 1 << 19).
const PAR_MIN_TASKS_MACS_SPINNING: usize = 1 << 17;

/// Where one (image, group) product finds its right operand `[C/g · R · S, P · Q]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cols {
    /// A 1×1 convolution with unit stride and no padding: the input planes themselves.
    Direct,
    /// Implicit GEMM (with [`Kernel`]): row (ci, r, s) of the operand is read in place from
    /// the input's phase planes ([`phase_planes`]) at the tap's offset, `n_eff = (P − 1)·Wq +
    /// Q` values, so the product is computed over the phase width `Wq` and the `Wq − Q` extra
    /// columns of each output row are dropped when the result is copied out. No column matrix.
    Implicit { n_eff: usize },
    /// Implicit GEMM whose output width `Q` is whole vectors of the kernel: each output row's
    /// `Q` columns are one run at that row's offset in the phase planes ([`Right::Runs`]), so
    /// the product has exactly `P · Q` columns and is written to the output in place.
    ImplicitRuns,
    /// An explicit column matrix gathered from the zero-padded planes.
    Im2col,
}

/// How a convolution runs on the current pool: its operand ([`Cols`]), its (image, group)
/// GEMMs spread over `workers` (`across`), `packed` values of filters packed for [`Kernel`]
/// (all groups, shared, held by the program's filter cache), each worker's `need` scratch
/// values (`padded` of them the zero-padded input planes, or their phase planes), `total`
/// scratch values for all.
struct Layout {
    cols: Cols,
    across: bool,
    workers: usize,
    packed: usize,
    padded: usize,
    need: usize,
    total: usize,
}

/// Extra columns the implicit GEMM may compute, as a fraction of the useful ones, before an
/// explicit column matrix is cheaper: `Wq / Q ≤ 5/4` (a 3×3 convolution with 8 or more
/// output columns). Only horizontal strides 1 and 2 take the implicit path: their phase
/// planes are a copy or a split of pairs; a wider stride (a patch embedding, 8×8 stride 8)
/// gathers every value alone, which measured slower than the column matrix (12.3 µs
/// against 9.3 for ViT's).
fn implicit_pays(q: usize, wq: usize) -> bool {
    wq.saturating_mul(4) <= q.saturating_mul(5)
}

/// Rows and columns of one phase plane: the zero-padded planes ([`padded_dims`]) split by
/// stride, `⌈Hp / stride_h⌉ × ⌈Wp / stride_w⌉` (the padded planes themselves at unit stride).
fn phase_dims(g: &ConvShape) -> (usize, usize) {
    let (hp, wp) = padded_dims(g);
    (hp.div_ceil(g.stride[0]), wp.div_ceil(g.stride[1]))
}

fn layout(g: &ConvShape, kern: Option<Kernel>) -> Layout {
    let (cg, kg) = (g.c / g.group.max(1), g.k / g.group.max(1));
    let (pq, crs) = (g.p * g.q, cg * g.r * g.s);
    let direct =
        g.r == 1 && g.s == 1 && g.stride == [1, 1] && g.pad == [0, 0] && g.p == g.h && g.q == g.w;
    let (hp, wp) = padded_dims(g);
    let (hq, wq) = phase_dims(g);
    let cols = if direct {
        Cols::Direct
    } else if kern.is_some_and(|k| g.q.is_multiple_of(k.lanes())) && g.stride[1] <= 2 && g.p > 0 {
        Cols::ImplicitRuns
    } else if kern.is_some() && g.stride[1] <= 2 && g.p > 0 && implicit_pays(g.q, wq) {
        Cols::Implicit {
            n_eff: (g.p - 1) * wq + g.q,
        }
    } else {
        Cols::Im2col
    };
    let threads = rayon::current_num_threads();
    let tasks = g.n * g.group;
    let macs = kg * crs * pq;
    // Several images or groups and enough work: the (image, group) GEMMs dealt to the
    // workers in contiguous runs, each sequential with its own column buffer; otherwise one
    // after another, a large GEMM cut into blocks inside.
    let min_tasks = if super::spin::active() {
        PAR_MIN_TASKS_MACS_SPINNING
    } else {
        PAR_MIN_TASKS_MACS
    };
    let across = threads > 1 && tasks >= 2 && macs < PAR_MIN_MACS && macs * tasks >= min_tasks;
    let workers = if across { threads.min(tasks) } else { 1 };
    // The operand is read from a zero-padded copy of the input planes (no bounds tests or
    // fills in the gather loop or the kernel).
    let padded = match cols {
        Cols::Direct => 0,
        Cols::Implicit { .. } | Cols::ImplicitRuns => cg * g.stride[0] * g.stride[1] * hq * wq,
        Cols::Im2col => cg * hp * wp,
    };
    let need = match cols {
        Cols::Direct => 0,
        Cols::Implicit { n_eff } => padded + kg * n_eff,
        Cols::ImplicitRuns => padded,
        Cols::Im2col => crs * pq + padded,
    };
    let packed = kern.map_or(0, |k| k.packed_a_len(kg, crs).unwrap_or(0) * g.group);
    Layout {
        cols,
        across,
        workers,
        packed,
        padded,
        need,
        total: need * workers,
    }
}

/// The scratch values [`conv2d`] uses for `g` on the current pool (take a buffer of exactly
/// this length from the executor's pool, so that it is reused run after run).
pub(crate) fn scratch_len(g: &ConvShape) -> usize {
    let kern = Kernel::detect();
    if super::winograd::applies(g, kern) {
        return super::winograd::scratch_len(g);
    }
    if let Some(kern) = kern.filter(|&k| patches_apply(g, Some(k))) {
        return patches_scratch_len(g, kern);
    }
    if strided_pointwise(g).is_some() {
        return g.n * g.c * g.p * g.q;
    }
    layout(g, kern).total
}

/// `out = conv(x, w) + bias`, all row-major NCHW / KCRS; `out` holds `n·k·p·q` values.
/// `scratch` is grown as needed for the column matrix and kept for the next call. A 3×3
/// stride-1 convolution large enough runs by Winograd's F(2×2, 3×3) (module `winograd`), its
/// transformed filters kept in `filters` under node id `node`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv2d(
    g: &ConvShape,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
    filters: &super::winograd::FilterCache,
    node: usize,
    post: Post,
) -> Result<(), String> {
    let kern = Kernel::detect();
    if let Some(kern) = kern.filter(|_| super::winograd::applies(g, kern)) {
        let numel = g.n * g.k * g.p * g.q;
        if out.len() != numel
            || x.len() != g.n * g.c * g.h * g.w
            || post.addend.is_some_and(|d| d.len() != numel)
        {
            return Err(format!("conv2d buffers do not match the shapes {g:?}"));
        }
        let need = super::winograd::scratch_len(g);
        grow_scratch(scratch, need, "Winograd")?;
        super::winograd::conv(kern, filters, node, g, x, w, bias, post, out, scratch)?;
        return Ok(());
    }
    conv2d_with(
        kern,
        g,
        x,
        w,
        bias,
        out,
        scratch,
        Some((filters, node)),
        post,
    )
}

/// The direct paths of [`conv2d`] (never Winograd), for comparisons.
#[cfg(test)]
pub(crate) fn conv2d_direct(
    g: &ConvShape,
    x: &[f32],
    w: &[f32],
    out: &mut [f32],
    scratch: &mut Vec<f32>,
) -> Result<(), String> {
    conv2d_with(
        Kernel::detect(),
        g,
        x,
        w,
        None,
        out,
        scratch,
        None,
        Post::NONE,
    )
}

/// [`conv2d`] with the GEMM chosen by the caller: `kern`, or faer when `None`; the filters
/// packed for `kern` come from `cache` (kept there under the node id) or, without one, are
/// packed for this call.
#[allow(clippy::too_many_arguments)]
fn conv2d_with(
    kern: Option<Kernel>,
    g: &ConvShape,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
    cache: Option<(&super::winograd::FilterCache, usize)>,
    post: Post,
) -> Result<(), String> {
    let cg = g.c / g.group;
    let kg = g.k / g.group;
    let pq = g.p * g.q;
    let crs = cg * g.r * g.s;
    if out.len() != g.n * g.k * pq || x.len() != g.n * g.c * g.h * g.w || w.len() != g.k * crs {
        return Err(format!("conv2d buffers do not match the shapes {g:?}"));
    }
    if out.is_empty() {
        return Ok(());
    }
    if post.addend.is_some_and(|d| d.len() != out.len()) {
        return Err(format!(
            "conv2d: the addend does not match the output {g:?}"
        ));
    }
    if cg == 1 && kg == 1 {
        if super::depthwise::applies(g) {
            let input = super::depthwise::Input::Planes(x);
            return blocked_depthwise(g, input, w, bias, post, out, cache);
        }
        depthwise(g, x, w, bias, out);
        post.apply(out);
        return Ok(());
    }
    if let Some(kern) = kern.filter(|_| patches_apply(g, kern)) {
        patch_embedding(kern, g, x, w, bias, out, scratch, cache)?;
        post.apply(out);
        return Ok(());
    }
    if let Some(unit) = strided_pointwise(g) {
        let len = g.n * g.c * g.p * g.q;
        grow_scratch(scratch, len, "strided pixels")?;
        let xs = &mut scratch[..len];
        strided_pixels(g, x, xs);
        // The unit-stride product reads its input in place: no scratch of its own.
        let mut none = Vec::new();
        return conv2d_with(kern, &unit, xs, w, bias, out, &mut none, cache, post);
    }
    if let (Some(kern), Some(cache)) = (kern, cache) {
        if transposed_pays(g, kern) {
            return pointwise_transposed(kern, g, x, w, bias, post, out, cache);
        }
    }
    let Layout {
        cols,
        across,
        workers,
        packed,
        padded,
        need,
        total,
    } = layout(g, kern);
    let threads = rayon::current_num_threads();
    let macs = kg * crs * pq;
    grow_scratch(scratch, total, "im2col")?;
    // One large GEMM over the workers: the packed kernel cuts it into blocks of output
    // channels or of pixels, whichever dimension is larger (`Kernel::blocks`); faer's
    // product splits its output channels (at least 16 each).
    let split = match kern {
        _ if threads <= 1 || across || macs < PAR_MIN_MACS => 1,
        Some(_) => threads,
        None => crate::gemm::split_workers(threads, kg),
    };
    let work = &mut scratch[..total];
    // Every group's filters packed for the kernel (kg·crs values each), once per weight
    // buffer when the program's cache holds them, else for this call.
    let pa = packed / g.group.max(1);
    let (held, fresh);
    let packed_w: &[f32] = match (kern, cache) {
        (Some(kern), Some((cache, node))) => {
            held = cache.packed(kern, node, g.group, kg, crs, w)?;
            &held.packed
        }
        (Some(kern), None) => {
            fresh = super::winograd::pack_filters(kern, g.group, kg, crs, w)?;
            &fresh
        }
        (None, _) => &[],
    };
    let offsets = match cols {
        Cols::Implicit { .. } | Cols::ImplicitRuns => tap_offsets(g, cg),
        _ => Vec::new(),
    };
    // Output row p of a run layout starts at row p of the phase planes.
    let (_, wq) = phase_dims(g);
    let run_offsets: Vec<usize> = match cols {
        Cols::ImplicitRuns => (0..g.p).map(|p| p * wq).collect(),
        _ => Vec::new(),
    };
    // One (image, group): its operand, its GEMM, its bias and clamp.
    let one = |idx: usize, o: &mut [f32], scratch: &mut [f32]| -> Result<(), String> {
        let (img, grp) = (idx / g.group, idx % g.group);
        let xin = &x[(img * g.c + grp * cg) * g.h * g.w..][..cg * g.h * g.w];
        let bias_g = bias.map(|b| &b[grp * kg..][..kg]);
        let post = post.part(idx * kg * pq, kg * pq);
        let Some(kern) = kern else {
            let data = column_operand(g, xin, cols == Cols::Direct, &mut scratch[..need]);
            faer_product(g, data, &w[grp * kg * crs..][..kg * crs], bias_g, o, split);
            post.apply(o);
            return Ok(());
        };
        let ap = &packed_w[grp * pa..][..pa];
        let product = Product {
            kern,
            m: kg,
            k: crs,
            a: ap,
            split,
        };
        match cols {
            Cols::Implicit { n_eff } => {
                let (pad, tmp) = scratch[..need].split_at_mut(padded);
                phase_planes(g, xin, cg, pad, split > 1);
                let right = Right::Offsets {
                    data: pad,
                    offsets: &offsets,
                };
                product.run_into(n_eff, right, tmp, None, Post::NONE)?;
                copy_out(g, n_eff, tmp, bias_g, post, o, split > 1);
                Ok(())
            }
            Cols::ImplicitRuns => {
                let pad = &mut scratch[..padded];
                phase_planes(g, xin, cg, pad, split > 1);
                let right = Right::Runs {
                    data: pad,
                    offsets: &offsets,
                    run: g.q,
                    run_offsets: &run_offsets,
                };
                product.run_into(pq, right, o, bias_g, post)
            }
            Cols::Direct | Cols::Im2col => {
                let data = column_operand(g, xin, cols == Cols::Direct, &mut scratch[..need]);
                let right = Right::RowMajor { data, ld: pq };
                product.run_into(pq, right, o, bias_g, post)
            }
        }
    };
    if across {
        let per = (g.n * g.group).div_ceil(workers);
        let mut spare = vec![];
        let bufs: &mut [f32] = if need == 0 {
            spare.resize(workers, 0.0);
            &mut spare
        } else {
            &mut work[..need * workers]
        };
        out.par_chunks_mut(per * kg * pq)
            .zip(bufs.par_chunks_mut(need.max(1)))
            .enumerate()
            .try_for_each(|(wi, (ob, sc))| {
                for (j, o) in ob.chunks_mut(kg * pq).enumerate() {
                    one(wi * per + j, o, sc)?;
                }
                Ok(())
            })
    } else {
        for (idx, o) in out.chunks_mut(kg * pq).enumerate() {
            one(idx, o, work)?;
        }
        Ok(())
    }
}

/// `out` = `post(conv(x, w) + bias)` of depthwise convolution `g` whose input is given
/// channels-last: `x` holds `N × H × W × C` (the stored tensor the graph's `NCHW` input is a
/// transposed view of, [`super::depthwise::nhwc_source`]), read in place by the blocked
/// kernel, each pixel's block of channels one contiguous run (no transpose made, none into
/// the tile). The sums are the planar path's, in the same order.
pub(crate) fn depthwise_pixels(
    g: &ConvShape,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    cache: (&super::winograd::FilterCache, usize),
    post: Post,
) -> Result<(), String> {
    let (hw, pq) = (g.h * g.w, g.p * g.q);
    let sizes =
        x.len() == g.n * g.c * hw && out.len() == g.n * g.k * pq && w.len() == g.k * g.r * g.s;
    if !sizes || post.addend.is_some_and(|d| d.len() != out.len()) {
        return Err(format!("conv2d buffers do not match the shapes {g:?}"));
    }
    let input = super::depthwise::Input::Pixels(x);
    blocked_depthwise(g, input, w, bias, post, out, Some(cache))
}

/// The blocked depthwise kernel with `post`: the kernel clamps its sums itself; an addend
/// comes before the clamp, so then both are applied after, in one pass.
fn blocked_depthwise(
    g: &ConvShape,
    input: super::depthwise::Input,
    w: &[f32],
    bias: Option<&[f32]>,
    post: Post,
    out: &mut [f32],
    cache: Option<(&super::winograd::FilterCache, usize)>,
) -> Result<(), String> {
    use super::depthwise::depthwise_from;
    if post.addend.is_none() {
        return depthwise_from(g, input, w, bias, post.clamp, out, cache);
    }
    depthwise_from(g, input, w, bias, Clamp::NONE, out, cache)?;
    post.apply(out);
    Ok(())
}

/// A 1 × 1 convolution with a stride above 1 and no padding (ResNet's downsampling
/// shortcuts) as the unit-stride one over the pixels its stride keeps: the shape of that
/// one (`H × W` = `P × Q`), or `None` for any other convolution. Through phase planes it
/// split the whole input into `Sh·Sw` planes to use one, then copied the product out
/// (`perf`, 64 → 128 channels, 28 × 28 stride 2: 30 % and 16 % of its time); the pixels
/// kept are a `1 / (Sh·Sw)` of the input, gathered once ([`strided_pixels`]).
fn strided_pointwise(g: &ConvShape) -> Option<ConvShape> {
    let fits = (g.r, g.s) == (1, 1)
        && g.pad == [0, 0]
        && g.stride != [1, 1]
        && g.p > 0
        && g.q > 0
        && (g.p - 1) * g.stride[0] < g.h
        && (g.q - 1) * g.stride[1] < g.w;
    fits.then_some(ConvShape {
        h: g.p,
        w: g.q,
        stride: [1, 1],
        dil: [1, 1],
        ..*g
    })
}

/// `xs` (`N·C × P × Q`) = the pixels of `x` (`N·C × H × W`) at rows `p·Sh` and columns
/// `q·Sw` ([`strided_pointwise`]).
fn strided_pixels(g: &ConvShape, x: &[f32], xs: &mut [f32]) {
    let [sh, sw] = g.stride;
    for (xp, op) in x
        .chunks_exact(g.h * g.w)
        .zip(xs.chunks_exact_mut(g.p * g.q))
    {
        for (p, orow) in op.chunks_exact_mut(g.q).enumerate() {
            let row = &xp[p * sh * g.w..][..g.w];
            for (q, o) in orow.iter_mut().enumerate() {
                *o = row[q * sw];
            }
        }
    }
}

/// `scratch` grown to at least `need` values (kept for the next call); an allocation the
/// machine cannot satisfy is an error naming the `what` buffer, not an abort.
fn grow_scratch(scratch: &mut Vec<f32>, need: usize, what: &str) -> Result<(), String> {
    if scratch.len() < need {
        scratch
            .try_reserve_exact(need - scratch.len())
            .map_err(|_| format!("cannot allocate the {need}-value {what} buffer"))?;
        scratch.resize(need, 0.0);
    }
    Ok(())
}

/// True for a patch embedding that the column-matrix path would otherwise run: ViT's 16×16
/// stride-16 projection, ConvNeXt's 4×4 stride-4 stem (and at AVX-512 its 2×2 stride-2
/// downsamplers), and a 1 × 1 convolution on a map of at most 4 values. The stride equals
/// the kernel (wider than 2, where no phase-plane path reads the input in place; 2 where
/// the product is stored transposed into the planes, AVX-512: 48 → 96 channels to 28 × 28
/// 160 → 150 µs, 96 → 192 to 14 × 14 155 → 141, 192 → 384 to 7 × 7 185 → 149 against phase
/// planes, one-convolution graphs, AMD EPYC Zen 5; or a 1 × 1 kernel), no padding or dilation, one
/// group, and every patch inside the input (trailing rows or columns no patch covers are
/// allowed). Such a convolution is a linear layer over the patches; [`patch_embedding`] runs
/// it as one.
fn patches_apply(g: &ConvShape, kern: Option<Kernel>) -> bool {
    // A 1 × 1 convolution on a map of at most 4 values: a product with that many columns
    // fills a sixteenth of a vector at most, while as a linear layer its output channels
    // are the columns (112 → 1280 channels on 1 × 1 and 2 × 2 maps, MobileNetV2's last
    // layer at 32 × 32: 27 → 11 and 13 µs; on 4 × 4, 64 → 384 channels, 5.2 → 9.0 µs, so
    // not there; AMD EPYC Zen 5, AVX-512, one-convolution graphs).
    // The same for any kernel, stride and padding: a 3 × 3 stride-2 convolution from 2 × 2
    // to 1 × 1 (32 channels, transformers' ResNet at 32 × 32) took 7.5 µs through phase
    // planes.
    let tiny = g.p * g.q <= 4;
    let patches = g.stride == [g.r, g.s]
        && (g.stride[1] > 2 || (g.stride[1] == 2 && kern.is_some_and(transposed_store)))
        && g.pad == [0, 0]
        && g.dil == [1, 1]
        && g.p * g.r <= g.h
        && g.q * g.s <= g.w;
    kern.is_some()
        && g.group == 1
        && (patches || tiny)
        && g.n * g.p * g.q * g.c * g.r * g.s * g.k > crate::gemm::SMALL_MACS
}

/// Scratch values of [`patch_embedding`] on `kern`: the patch matrix (`N·P·Q × C·R·S`) and,
/// below AVX-512 (no transposed store), the product (`N·P·Q × K`).
fn patches_scratch_len(g: &ConvShape, kern: Kernel) -> usize {
    let rows = g.n * g.p * g.q;
    let prod = if transposed_store(kern) {
        0
    } else {
        rows * g.k
    };
    rows * (g.c * g.r * g.s) + prod
}

/// Whether `kern` stores a product transposed (`Kernel::gemm_transposed`: AVX-512).
fn transposed_store(kern: Kernel) -> bool {
    kern.level() == tensorforge_kernels::vmath::Level::Avx512
}

/// A patch embedding ([`patches_apply`]) as the linear layer it is: the patches gathered as
/// rows, `N·P·Q × C·R·S` (each patch row `C·R` runs of `S` consecutive input values, where the
/// column matrix of the general path gathers every value at stride `S`), times the filters
/// transposed, `C·R·S × K`, packed once per weight buffer as a linear layer's weight is
/// ([`super::linear::packed_weight_product`], under this node's id in `cache`), then each
/// image's `P·Q × K` product transposed into its `K × P·Q` output with the bias. The batch
/// folds into the product's rows. At AVX-512 each image's product is stored transposed
/// straight into its planes, each output channel's sums started from its bias
/// (`Kernel::gemm_transposed`, `Epilogue::col_bias`): no product buffer and no pass turning
/// it (ConvNeXt's 4 × 4 stem alone 196 → 135 µs, and 94 with the patches gathered by
/// output row, [`patch_band`]). On ViT h192's 16×16 stride-16 projection (224×224×3 → 192
/// channels) the column-matrix path took 777–793 µs at one thread, this path 646–652 µs, and
/// a plain product of the same size 640–674 µs (AMD EPYC Zen 3, AVX2; docs/performance.md,
/// "patch embedding").
#[allow(clippy::too_many_arguments)]
fn patch_embedding(
    kern: Kernel,
    g: &ConvShape,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
    cache: Option<(&super::winograd::FilterCache, usize)>,
) -> Result<(), String> {
    let (pq, crs, k) = (g.p * g.q, g.c * g.r * g.s, g.k);
    let rows = g.n * pq;
    let need = patches_scratch_len(g, kern);
    grow_scratch(scratch, need, "patch")?;
    let (patches, prod) = scratch[..need].split_at_mut(rows * crs);
    // Patch (img, p, q) as a row: for each channel and kernel row, S consecutive values
    // (a 1 × 1 kernel: one value per channel, `P·Q` apart).
    let exact = g.stride == [g.r, g.s] && g.pad == [0, 0] && g.dil == [1, 1];
    let gather = |row: usize, dst: &mut [f32]| {
        let (img, p, q) = (row / pq, (row % pq) / g.q, row % g.q);
        if !exact {
            // Any geometry (a tiny output map): each tap's input value, or 0 in the padding.
            let mut d = dst.iter_mut();
            for c in 0..g.c {
                let plane = &x[(img * g.c + c) * g.h * g.w..][..g.h * g.w];
                for rr in 0..g.r {
                    let ih = (p * g.stride[0] + rr * g.dil[0])
                        .checked_sub(g.pad[0])
                        .filter(|&ih| ih < g.h);
                    for ss in 0..g.s {
                        let iw = (q * g.stride[1] + ss * g.dil[1])
                            .checked_sub(g.pad[1])
                            .filter(|&iw| iw < g.w);
                        if let Some(v) = d.next() {
                            *v = match (ih, iw) {
                                (Some(ih), Some(iw)) => plane[ih * g.w + iw],
                                _ => 0.0,
                            };
                        }
                    }
                }
            }
            return;
        }
        if g.r == 1 && g.s == 1 {
            let at = img * g.c * g.h * g.w + p * g.w + q;
            for (c, d) in dst.iter_mut().enumerate() {
                *d = x[at + c * g.h * g.w];
            }
            return;
        }
        let mut runs = dst.chunks_exact_mut(g.s);
        for c in 0..g.c {
            let plane = &x[(img * g.c + c) * g.h * g.w..][..g.h * g.w];
            for rr in 0..g.r {
                let src = &plane[(p * g.r + rr) * g.w + q * g.s..][..g.s];
                if let Some(d) = runs.next() {
                    d.copy_from_slice(src);
                }
            }
        }
    };
    // A 1 × 1 kernel at stride 1 (a tiny map's pointwise convolution), stored transposed:
    // each image's patch matrix is its `C × H·W` planes read column-major, and on a 1 × 1
    // map the input is the whole batch's patch matrix, row-major; read in place, not
    // gathered (a value at a time, that took 5 % of a 32 × 32 MobileNetV2's run).
    let in_place = exact && g.r == 1 && g.s == 1 && transposed_store(kern);
    if in_place {
    } else if exact && g.r == 1 && g.s == 1 && g.h * g.w == 1 {
        // A 1 × 1 map: the input is the patch matrix already.
        patches.copy_from_slice(&x[..rows * crs]);
    } else if exact && g.s > 1 {
        // By output row: each kernel row of each channel is one contiguous input row, cut
        // into `Q` runs of `S` values, one per patch.
        let band = g.q * crs;
        let row = |(i, d): (usize, &mut [f32])| patch_band(g, x, i / g.p, i % g.p, d);
        if patches.len() >= PAR_MIN_COPY && rayon::current_num_threads() > 1 {
            patches.par_chunks_mut(band).enumerate().for_each(row);
        } else {
            patches.chunks_mut(band).enumerate().for_each(row);
        }
    } else if patches.len() >= PAR_MIN_COPY && rayon::current_num_threads() > 1 {
        patches
            .par_chunks_mut(crs)
            .enumerate()
            .for_each(|(row, d)| gather(row, d));
    } else {
        for (row, d) in patches.chunks_mut(crs).enumerate() {
            gather(row, d);
        }
    }
    let own;
    let (cache, node) = match cache {
        Some(c) => c,
        None => {
            own = super::winograd::FilterCache::default();
            (&own, 0)
        }
    };
    if transposed_store(kern) {
        // Each image's product stored transposed, straight into its `K × P·Q` output planes,
        // each column (output channel) started from its bias: no product buffer, no pass
        // turning it.
        let pb = cache.packed_right(kern, node, crs, k, 1, crs, w)?;
        // A product's rows: one image's pixels, or every image's single pixel (below).
        let m = if pq == 1 { rows } else { pq };
        let split = if rayon::current_num_threads() <= 1 || m * crs * k < PAR_MIN_MACS {
            1
        } else {
            rayon::current_num_threads()
        };
        if pq == 1 {
            // A 1 × 1 output map: the output `N × K × 1 × 1` is the product `N × K` itself,
            // row-major, so every image is a row of one product (MobileNetV2's last layer
            // at 32 × 32, batch 2: one 2-row product, not two of one row).
            for (pc, kc, block) in super::winograd::right_blocks(kern, &pb.packed, crs, k) {
                let ep = Epilogue {
                    col_bias: bias.filter(|_| pc == 0),
                    ..Epilogue::NONE
                };
                let whole = if in_place { x } else { &*patches };
                let left = Left::RowMajor {
                    data: &whole[pc..],
                    ld: crs,
                };
                kern.gemm_split(
                    rows,
                    k,
                    kc,
                    left,
                    Right::Packed(block),
                    out,
                    k,
                    pc > 0,
                    ep,
                    split,
                )
                .map_err(|e| e.to_string())?;
            }
            return Ok(());
        }
        let images = if in_place { x } else { &*patches };
        for (pi, oi) in images
            .chunks_exact(pq * crs)
            .zip(out.chunks_exact_mut(k * pq))
        {
            for (pc, kc, block) in super::winograd::right_blocks(kern, &pb.packed, crs, k) {
                let ep = Epilogue {
                    col_bias: bias.filter(|_| pc == 0),
                    ..Epilogue::NONE
                };
                let left = if in_place {
                    // Pixel i, channel pc + c at (pc + c)·P·Q + i.
                    Left::ColMajor {
                        data: &pi[pc * pq..],
                        ld: pq,
                    }
                } else {
                    Left::RowMajor {
                        data: &pi[pc..],
                        ld: crs,
                    }
                };
                kern.gemm_transposed(
                    pq,
                    k,
                    kc,
                    left,
                    Right::Packed(block),
                    oi,
                    pq,
                    pc > 0,
                    ep,
                    split,
                )
                .map_err(|e| e.to_string())?;
            }
        }
        return Ok(());
    }
    let a = crate::gemm::Operand::row_major(patches, 1, rows, crs)
        .ok_or_else(|| format!("patch matrix of {rows}x{crs} does not fit"))?;
    // The filters `K × C·R·S` read as their transpose, `C·R·S × K`.
    let b = crate::gemm::Operand::strided(w, &[(crs, 1), (k, crs)])
        .ok_or_else(|| format!("filters of {k}x{crs} do not fit"))?;
    if !super::linear::packed_weight_product_with(kern, cache, node, a, b, prod, false)? {
        return Err(format!(
            "the packed product declined the patch embedding {g:?}"
        ));
    }
    // Each image's `P·Q × K` product transposed into its `K × P·Q` output, then each plane
    // plus its channel's bias.
    for (img, o) in out.chunks_mut(k * pq).enumerate() {
        tensorforge_kernels::transpose::transpose_to(&prod[img * pq * k..][..pq * k], pq, k, o);
        if let Some(b) = bias {
            for (plane, &b) in o.chunks_exact_mut(pq).zip(b) {
                plane.iter_mut().for_each(|v| *v += b);
            }
        }
    }
    Ok(())
}

/// The `Q` patch rows of output row `p` of image `img` (a patch embedding with stride =
/// kernel, no padding), `Q × C·R·S` values in `dst`: kernel row `rr` of channel `c` reads
/// input row `p·R + rr` from its start, `S` values per patch, into columns `(c·R + rr)·S ..`.
fn patch_band(g: &ConvShape, x: &[f32], img: usize, p: usize, dst: &mut [f32]) {
    fn runs<const S: usize>(src: &[f32], dst: &mut [f32], col: usize, crs: usize) {
        for (s, d) in src.chunks_exact(S).zip(dst.chunks_exact_mut(crs)) {
            if let (Ok(d), Ok(s)) = (
                <&mut [f32; S]>::try_from(&mut d[col..col + S]),
                <&[f32; S]>::try_from(s),
            ) {
                *d = *s;
            }
        }
    }
    let crs = g.c * g.r * g.s;
    for c in 0..g.c {
        let plane = &x[(img * g.c + c) * g.h * g.w..][..g.h * g.w];
        for rr in 0..g.r {
            let src = &plane[(p * g.r + rr) * g.w..][..g.q * g.s];
            let col = (c * g.r + rr) * g.s;
            match g.s {
                2 => runs::<2>(src, dst, col, crs),
                4 => runs::<4>(src, dst, col, crs),
                8 => runs::<8>(src, dst, col, crs),
                16 => runs::<16>(src, dst, col, crs),
                _ => {
                    for (s, d) in src.chunks_exact(g.s).zip(dst.chunks_exact_mut(crs)) {
                        d[col..col + g.s].copy_from_slice(s);
                    }
                }
            }
        }
    }
}

/// One (image, group) product's constant side: `m × k` filters packed for `kern`, the
/// product cut into up to `split` blocks of output channels or pixels
/// (`Kernel::blocks`), one per worker.
struct Product<'a> {
    kern: Kernel,
    m: usize,
    k: usize,
    a: &'a [f32],
    split: usize,
}

impl Product<'_> {
    /// `c` (`m × n`, row-major) = `clamp(bias + A·B + addend)`, the bias (one value per
    /// row), the addend and the clamp applied by the GEMM's tiles in registers
    /// ([`Epilogue`]): a bias filled into `c` first, a residual added and a clamp applied
    /// after were each one more pass over a whole image's output.
    fn run_into(
        &self,
        n: usize,
        right: Right,
        c: &mut [f32],
        bias: Option<&[f32]>,
        post: Post,
    ) -> Result<(), String> {
        let (kern, m, k) = (self.kern, self.m, self.k);
        let ep = Epilogue {
            row_bias: bias,
            col_bias: None,
            addend: post.addend,
            clamp: post.clamp,
        };
        kern.gemm_split(
            m,
            n,
            k,
            Left::Packed(self.a),
            right,
            &mut c[..m * n],
            n,
            false,
            ep,
            self.split,
        )
        .map_err(|e| e.to_string())
    }
}

/// Input channels (the product's depth) below which a 1 × 1 convolution stays channels ×
/// pixels even where [`transposed_pays`] would take it transposed: in MobileNetV2 (in the
/// model, best of six alternated rounds) the transposed product gained 5–12 % on 960 → 320,
/// 320 → 1280 and 576 → 160 at 7 × 7, but 160 → 960 went between −2 % and +6 %.
const TRANSPOSED_MIN_C: usize = 256;

/// Whether 1 × 1 convolution `g` runs as pixels × output channels with its output stored
/// transposed ([`pointwise_transposed`]) rather than channels × pixels: unit stride, no
/// padding, one group, output channels a whole number of 16-lane vectors, an AVX-512 kernel
/// (the transposing store's 8 × 16 tiles), and a map whose pixels fill at most 80 % of the
/// 16-lane vectors they take as columns while filling more of the 8-row panels they take as
/// rows: MobileNetV2's 7 × 7 layers (49 pixels: 77 % of 64 lanes, 88 % of 56 rows). There
/// the transposed product was 1.05–1.13x faster, in cache or not
/// (`crates/kernels/examples/transposed_pointwise.rs`, AMD EPYC Zen 5; docs/performance.md);
/// on 14 × 14 (94 % of the lanes) it was 0.92x, on 28 × 28 0.83x.
fn transposed_pays(g: &ConvShape, kern: Kernel) -> bool {
    let hw = g.h * g.w;
    let lanes_used = hw as f64 / (16 * hw.div_ceil(16)).max(1) as f64;
    let rows_used = hw as f64 / (8 * hw.div_ceil(8)).max(1) as f64;
    kern.level() == tensorforge_kernels::vmath::Level::Avx512
        && g.group == 1
        && (g.r, g.s) == (1, 1)
        && g.stride == [1, 1]
        && g.pad == [0, 0]
        && (g.p, g.q) == (g.h, g.w)
        && g.k.is_multiple_of(16)
        && g.c >= TRANSPOSED_MIN_C
        && lanes_used <= 0.8
        && rows_used > lanes_used + 0.05
}

/// `out` = `clamp(bias + W·x + addend)` of 1 × 1 convolution `g` ([`transposed_pays`]) as the
/// product `H·W × C` (the input planes read column-major, nothing gathered) by `C × K` (the
/// filters transposed, packed once per weight buffer in `cache`), one K block of
/// [`Kernel::kc`] input channels at a time, its tiles stored transposed into the output
/// planes (`sgemm::Kernel::gemm_transposed`): the first block started from the bias, the
/// addend (a residual, laid out as the output) and the clamp after the last. The sums are the channels × pixels product's, in the same order,
/// so the values are equal bit for bit.
#[allow(clippy::too_many_arguments)]
fn pointwise_transposed(
    kern: Kernel,
    g: &ConvShape,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    post: Post,
    out: &mut [f32],
    (cache, node): (&super::winograd::FilterCache, usize),
) -> Result<(), String> {
    let hw = g.h * g.w;
    let sizes = x.len() == g.n * g.c * hw && out.len() == g.n * g.k * hw && w.len() == g.k * g.c;
    if !sizes || post.addend.is_some_and(|d| d.len() != out.len()) {
        return Err(format!("conv2d buffers do not match the shapes {g:?}"));
    }
    // Wᵀ: element (ci, ko) at w[ko·C + ci], packed in K blocks.
    let pb = cache.packed_right(kern, node, g.c, g.k, 1, g.c, w)?;
    let threads = rayon::current_num_threads();
    let split = if threads <= 1 || g.k * g.c * hw < PAR_MIN_MACS {
        1
    } else {
        threads
    };
    for (img, (xi, oi)) in x
        .chunks_exact(g.c * hw)
        .zip(out.chunks_exact_mut(g.k * hw))
        .enumerate()
    {
        let post = post.part(img * g.k * hw, g.k * hw);
        for (pc, kc, block) in super::winograd::right_blocks(kern, &pb.packed, g.c, g.k) {
            let (first, last) = (pc == 0, pc + kc == g.c);
            let ep = Epilogue {
                col_bias: bias.filter(|_| first),
                addend: post.addend.filter(|_| last),
                clamp: if last { post.clamp } else { Clamp::NONE },
                ..Epilogue::NONE
            };
            let left = Left::ColMajor {
                data: &xi[pc * hw..],
                ld: hw,
            };
            kern.gemm_transposed(
                hw,
                g.k,
                kc,
                left,
                Right::Packed(block),
                oi,
                hw,
                !first,
                ep,
                split,
            )
            .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The implicit GEMM's result (`K/g` rows of `n_eff` values over the padded width) copied to
/// the output's `P × Q` planes, each plus its channel's bias, then `post` (plane by plane,
/// while in cache).
fn copy_out(
    g: &ConvShape,
    n_eff: usize,
    tmp: &[f32],
    bias: Option<&[f32]>,
    post: Post,
    o: &mut [f32],
    par: bool,
) {
    let (_, wq) = phase_dims(g);
    let pq = g.p * g.q;
    let one = |(ch, (dst, src)): (usize, (&mut [f32], &[f32]))| {
        let b = bias.map_or(0.0, |b| b[ch]);
        for op in 0..g.p {
            let (d, s) = (&mut dst[op * g.q..][..g.q], &src[op * wq..][..g.q]);
            for (d, s) in d.iter_mut().zip(s) {
                *d = s + b;
            }
        }
        post.part(ch * pq, pq).apply(dst);
    };
    if par {
        o.par_chunks_mut(pq)
            .zip(tmp.par_chunks(n_eff))
            .enumerate()
            .for_each(one);
    } else {
        o.chunks_mut(pq)
            .zip(tmp.chunks(n_eff))
            .enumerate()
            .for_each(one);
    }
}

/// Offset of row (ci, r, s) of the implicit operand in the phase planes: the tap reads
/// padded row `p·sh + r·dh` and column `q·sw + s·dw`, that is phase plane
/// `(ci, r·dh mod sh, s·dw mod sw)` at row `p + ⌊r·dh / sh⌋` and column `q + ⌊s·dw / sw⌋`;
/// output position (p, q) then adds `p·Wq + q`.
fn tap_offsets(g: &ConvShape, cg: usize) -> Vec<usize> {
    let (hq, wq) = phase_dims(g);
    let [sh, sw] = g.stride;
    let mut v = Vec::with_capacity(cg * g.r * g.s);
    for ci in 0..cg {
        for rr in 0..g.r {
            for ss in 0..g.s {
                let (ry, rx) = (rr * g.dil[0], ss * g.dil[1]);
                let plane = (ci * sh + ry % sh) * sw + rx % sw;
                v.push(plane * hq * wq + (ry / sh) * wq + rx / sw);
            }
        }
    }
    v
}

/// The `cg` input planes of `xin`, zero-padded ([`padded_dims`]) and split by stride into
/// `stride_h · stride_w` phase planes each of [`phase_dims`]: phase `(a, b)` of channel ci
/// holds padded element `(i·sh + a, j·sw + b)` at `(i, j)`, stored as plane
/// `(ci·sh + a)·sw + b`. At unit stride this is the padded planes themselves. Every tap of
/// a strided convolution then reads one phase plane with unit stride.
/// With `par`, the channels go to the pool's workers (a convolution whose product is split
/// over them: built on one, the planes kept the other waiting).
fn phase_planes(g: &ConvShape, xin: &[f32], cg: usize, out: &mut [f32], par: bool) {
    let (hq, wq) = phase_dims(g);
    let each = g.stride[0] * g.stride[1] * hq * wq;
    let hw = g.h * g.w;
    let one = |(ci, dst): (usize, &mut [f32])| phase_planes_of(g, &xin[ci * hw..][..hw], dst);
    let out = &mut out[..cg * each];
    if par && cg > 1 {
        out.par_chunks_mut(each).enumerate().for_each(one);
    } else {
        out.chunks_mut(each).enumerate().for_each(one);
    }
}

/// [`phase_planes`] of one channel: its plane `plane` (`H × W`) into its `sh · sw` phase
/// planes `out`.
fn phase_planes_of(g: &ConvShape, plane: &[f32], out: &mut [f32]) {
    let (hq, wq) = phase_dims(g);
    let [sh, sw] = g.stride;
    let [pt, pl] = g.pad;
    out.fill(0.0);
    // Columns j of a phase row that hold input: pl ≤ j·sw + b < pl + W.
    let cols_of = |b: usize| {
        let j0 = (pl.saturating_sub(b)).div_ceil(sw);
        let j1 = (pl + g.w).saturating_sub(b).div_ceil(sw).min(wq);
        (j0, j1.max(j0))
    };
    for a in 0..sh {
        if sw == 2 {
            // Both column phases of each row at once: input pairs split into the even
            // and the odd phase (a loop the compiler vectorizes with shuffles).
            let base = a * 2 * hq * wq;
            let (even, odd) = out[base..base + 2 * hq * wq].split_at_mut(hq * wq);
            for (i, (re, ro)) in even
                .chunks_exact_mut(wq)
                .zip(odd.chunks_exact_mut(wq))
                .enumerate()
            {
                let Some(ih) = (i * sh + a).checked_sub(pt).filter(|&r| r < g.h) else {
                    continue;
                };
                deinterleave_row(&plane[ih * g.w..][..g.w], pl, re, ro);
            }
            continue;
        }
        for b in 0..sw {
            let dst = &mut out[(a * sw + b) * hq * wq..][..hq * wq];
            let (j0, j1) = cols_of(b);
            for (i, drow) in dst.chunks_exact_mut(wq).enumerate() {
                let Some(ih) = (i * sh + a).checked_sub(pt).filter(|&r| r < g.h) else {
                    continue;
                };
                let src = &plane[ih * g.w..][..g.w];
                let c0 = j0 * sw + b - pl; // input column of phase column j0
                if sw == 1 {
                    drow[j0..j1].copy_from_slice(&src[c0..c0 + (j1 - j0)]);
                } else {
                    for (d, x) in drow[j0..j1].iter_mut().zip(src[c0..].iter().step_by(sw)) {
                        *d = *x;
                    }
                }
            }
        }
    }
}

/// One input row placed at padded column `pl` and split by column parity: padded column
/// `2j` to `even[j]`, `2j + 1` to `odd[j]` (columns past either row are not stored).
fn deinterleave_row(src: &[f32], pl: usize, even: &mut [f32], odd: &mut [f32]) {
    let mut src = src;
    let mut pc = pl; // padded column of src[0]
    if pc % 2 == 1 {
        if let (Some(&v), Some(d)) = (src.first(), odd.get_mut(pc / 2)) {
            *d = v;
        }
        src = src.get(1..).unwrap_or(&[]);
        pc += 1;
    }
    let j0 = pc / 2;
    let pairs = (src.len() / 2)
        .min(even.len().saturating_sub(j0))
        .min(odd.len().saturating_sub(j0));
    let (ne, no) = (even.len(), odd.len());
    let (e, o) = (&mut even[j0.min(ne)..], &mut odd[j0.min(no)..]);
    for ((pair, de), d_o) in src
        .chunks_exact(2)
        .take(pairs)
        .zip(e.iter_mut())
        .zip(o.iter_mut())
    {
        *de = pair[0];
        *d_o = pair[1];
    }
    // An odd last value goes to the even phase.
    if src.len() % 2 == 1 {
        if let Some(d) = even.get_mut(j0 + src.len() / 2) {
            *d = src[src.len() - 1];
        }
    }
}

/// The `[C/g · R · S, P · Q]` operand of one (image, group) as a row-major matrix: the input
/// planes themselves (`direct`), or the column matrix gathered into the front of `scratch`
/// (its `C/g · R · S · P · Q` values, then the padded planes it is gathered from).
fn column_operand<'a>(
    g: &ConvShape,
    xin: &'a [f32],
    direct: bool,
    scratch: &'a mut [f32],
) -> &'a [f32] {
    if direct {
        return xin;
    }
    let cg = g.c / g.group;
    let n = cg * g.r * g.s * g.p * g.q;
    let (cm, pad) = scratch.split_at_mut(n);
    im2col_padded(g, xin, cg, cm, pad);
    cm
}

/// Fills each of `o`'s rows of `pq` values with its channel's bias; true when it did (the
/// product is then added).
fn fill_bias(o: &mut [f32], pq: usize, bias: Option<&[f32]>) -> bool {
    match bias {
        Some(b) => {
            for (row, &bv) in o.chunks_mut(pq).zip(b) {
                row.fill(bv);
            }
            true
        }
        None => false,
    }
}

/// One (image, group) product through faer: the operand ([`column_operand`]) times the
/// group's filters, the output channels split over `split` workers.
fn faer_product(
    g: &ConvShape,
    cols: &[f32],
    wg: &[f32],
    bias: Option<&[f32]>,
    o: &mut [f32],
    split: usize,
) {
    let (crs, pq) = (g.c / g.group * g.r * g.s, g.p * g.q);
    let accum = if fill_bias(o, pq, bias) {
        Accum::Add
    } else {
        Accum::Replace
    };
    let b = MatRef::from_row_major_slice(cols, crs, pq);
    crate::gemm::rows_split(o, wg, b, crs, pq, accum, split);
}

/// Rows and columns of the zero-padded planes a convolution reads: output row `p` and tap `r`
/// read padded row `p·stride + r·dil` (input row `p·stride + r·dil − pad_top`), so the last
/// one read is `(P − 1)·stride + (R − 1)·dil`.
pub(crate) fn padded_dims(g: &ConvShape) -> (usize, usize) {
    if g.p == 0 || g.q == 0 || g.r == 0 || g.s == 0 {
        return (0, 0); // an empty output reads nothing
    }
    (
        (g.p - 1) * g.stride[0] + (g.r - 1) * g.dil[0] + 1,
        (g.q - 1) * g.stride[1] + (g.s - 1) * g.dil[1] + 1,
    )
}

/// The column matrix of one image and group: row `(ci, rr, ss)` holds, for every output
/// position `(p, q)`, the input value under kernel tap `(rr, ss)` of channel `ci`, or 0 in
/// the padding. The input planes are first copied into zero-padded planes (`pad`,
/// [`padded_dims`]), so each column row is `P` runs of `Q` values with no bounds tests:
/// plain copies in 8-value blocks the compiler keeps in registers at unit stride (a
/// 16-channel 16×16 convolution has 2,304 such runs; as `memcpy` calls with bounds tests they
/// cost more than its GEMM), a strided gather otherwise. Rows are filled in parallel when
/// there are many.
fn im2col_padded(g: &ConvShape, xin: &[f32], cg: usize, cols: &mut [f32], pad: &mut [f32]) {
    let (hp, wp) = padded_dims(g);
    pad_planes(g, xin, cg, pad);
    let pq = g.p * g.q;
    let q = g.q;
    let pad = &*pad;
    let sw = g.stride[1];
    // Row (ci, rr, ss) of the column matrix: for each output row, Q values of padded row
    // `op·stride_h + rr·dil_h` of plane ci from column `ss·dil_w`, every `stride_w`-th.
    let fill = |ci: usize, rr: usize, ss: usize, d: &mut [f32]| {
        let src = &pad[ci * hp * wp..][..hp * wp];
        for (op, dst) in d.chunks_exact_mut(q).enumerate() {
            let s0 = (op * g.stride[0] + rr * g.dil[0]) * wp + ss * g.dil[1];
            if sw == 1 {
                let run = &src[s0..][..q];
                let mut k = 0;
                while k + 8 <= q {
                    dst[k..k + 8].copy_from_slice(&run[k..k + 8]);
                    k += 8;
                }
                dst[k..].copy_from_slice(&run[k..]);
            } else {
                let run = &src[s0..][..(q - 1) * sw + 1];
                for (k, v) in dst.iter_mut().enumerate() {
                    // SAFETY: k < q, so k·sw ≤ (q − 1)·sw < run.len().
                    *v = unsafe { *run.get_unchecked(k * sw) };
                }
            }
        }
    };
    if cols.len() >= PAR_MIN_COPY && rayon::current_num_threads() > 1 {
        let (r, s) = (g.r, g.s);
        cols.par_chunks_mut(pq)
            .enumerate()
            .for_each(|(row, d)| fill(row / (r * s), (row / s) % r, row % s, d));
    } else {
        // Nested counters: no division per row (three per row cost a 16-channel 8×8-patch
        // convolution a third of its time).
        let mut rows = cols.chunks_exact_mut(pq);
        for ci in 0..cg {
            for rr in 0..g.r {
                for ss in 0..g.s {
                    if let Some(d) = rows.next() {
                        fill(ci, rr, ss, d);
                    }
                }
            }
        }
    }
}

/// Values of a column matrix below which it is filled on the calling thread (a parallel
/// fill costs more in hand-offs than it saves).
const PAR_MIN_COPY: usize = 1 << 18;

/// The `cg` input planes of `xin` copied into zero-padded planes of [`padded_dims`] (`pad`
/// holds `cg · Hp · Wp` values): padding rows and columns 0, the input at `(pad_h, pad_w)`.
fn pad_planes(g: &ConvShape, xin: &[f32], cg: usize, pad: &mut [f32]) {
    let (hp, wp) = padded_dims(g);
    pad.fill(0.0);
    for ci in 0..cg {
        let plane = &xin[ci * g.h * g.w..][..g.h * g.w];
        let dst = &mut pad[ci * hp * wp..][..hp * wp];
        for ih in 0..g.h {
            let row = ih + g.pad[0];
            if row >= hp {
                break;
            }
            let c0 = g.pad[1];
            let n = g.w.min(wp.saturating_sub(c0));
            dst[row * wp + c0..][..n].copy_from_slice(&plane[ih * g.w..][..n]);
        }
    }
}

/// One input and one output channel per group, on CPUs without AVX2 and FMA (elsewhere
/// [`super::depthwise::applies`]): a direct loop per output channel (the
/// multiply-adds are few; a GEMM of one row would cost more than it saves). Each channel's
/// plane is first copied zero-padded ([`depthwise_padded`]), so that every tap of an output
/// row is a run of `Q` values without a bounds test, which the compiler vectorizes (at
/// stride 2 with shuffles). A loop over the taps of the unpadded plane, testing each column
/// and striding through it, ran at about 15 instructions per multiply-add; splitting the
/// padded plane's columns into stride phases cost more than the arithmetic (MobileNetV2's
/// 96-channel 112 × 112 stride-2 depthwise convolution, AMD EPYC Zen 3, AVX2).
fn depthwise(g: &ConvShape, x: &[f32], w: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    let pq = g.p * g.q;
    // Tap column s starts at padded column s·dw.
    let taps: Vec<usize> = (0..g.s).map(|s| s * g.dil[1]).collect();
    let taps = taps.as_slice();
    let channel = |buf: &mut Vec<f32>, (nk, o): (usize, &mut [f32])| {
        let (img, k) = (nk / g.k, nk % g.k);
        let plane = &x[(img * g.c + k) * g.h * g.w..][..g.h * g.w];
        let wk = &w[k * g.r * g.s..][..g.r * g.s];
        depthwise_channel(g, taps, plane, wk, bias.map_or(0.0, |b| b[k]), buf, o);
    };
    if out.len() >= PAR_MIN_COPY && rayon::current_num_threads() > 1 {
        out.par_chunks_mut(pq)
            .enumerate()
            .for_each_init(Vec::new, channel);
    } else {
        let mut buf = Vec::new();
        out.chunks_mut(pq)
            .enumerate()
            .for_each(|c| channel(&mut buf, c));
    }
}

/// One channel of [`depthwise`]: [`depthwise_direct`] on maps of at most four outputs,
/// else [`depthwise_body`].
fn depthwise_channel(
    g: &ConvShape,
    taps: &[usize],
    plane: &[f32],
    wk: &[f32],
    bias: f32,
    buf: &mut Vec<f32>,
    o: &mut [f32],
) {
    if g.p * g.q <= 4 {
        depthwise_direct(g, plane, wk, bias, o);
        return;
    }
    depthwise_body(g, taps, plane, wk, bias, buf, o);
}

/// A depthwise channel of at most four outputs (the 1 × 1 and 2 × 2 maps at the end of
/// MobileNetV2 at 32 × 32): each output value summed over the taps that fall inside the
/// plane, no padded copy (which cost more than the arithmetic there: 34 µs against 51 for
/// 672 channels of 1 × 1, AMD EPYC Zen 3). On 7 × 7 maps this loop took 3× the padded
/// path's time.
fn depthwise_direct(g: &ConvShape, plane: &[f32], wk: &[f32], bias: f32, o: &mut [f32]) {
    for op in 0..g.p {
        for oq in 0..g.q {
            let mut acc = bias;
            for rr in 0..g.r {
                let Some(ih) = (op * g.stride[0] + rr * g.dil[0])
                    .checked_sub(g.pad[0])
                    .filter(|&ih| ih < g.h)
                else {
                    continue;
                };
                for ss in 0..g.s {
                    if let Some(iw) = (oq * g.stride[1] + ss * g.dil[1])
                        .checked_sub(g.pad[1])
                        .filter(|&iw| iw < g.w)
                    {
                        acc += wk[rr * g.s + ss] * plane[ih * g.w + iw];
                    }
                }
            }
            o[op * g.q + oq] = acc;
        }
    }
}

/// One output channel `o` (`P × Q`) from its input `plane`, filter `wk` (`R × S`) and
/// `bias`: the plane copied zero-padded ([`depthwise_padded`]), then each output row the sum
/// over taps of the filter value times `Q` values of a padded row, every `sw`-th from the
/// tap's column: read as the first of each chunk of `sw`, which the compiler turns into
/// vector loads and shuffles (a multiply and an add: this path runs on CPUs without FMA,
/// where `mul_add` would be a library call). (Eight
/// output columns summed over all taps in one accumulator array measured slower: 850
/// against 660 µs for MobileNetV2's 96-channel 112 × 112 stride-2 layer, AMD EPYC Zen 3.)
fn depthwise_body(
    g: &ConvShape,
    taps: &[usize],
    plane: &[f32],
    wk: &[f32],
    bias: f32,
    buf: &mut Vec<f32>,
    o: &mut [f32],
) {
    let cols = depthwise_padded(g, plane, buf);
    let sw = g.stride[1];
    o.fill(bias);
    let fma = |v: &mut f32, wv: f32, xv: f32| *v += wv * xv;
    for op in 0..g.p {
        let dst = &mut o[op * g.q..][..g.q];
        for rr in 0..g.r {
            let row = &buf[(op * g.stride[0] + rr * g.dil[0]) * cols..];
            for (ss, &c) in taps.iter().enumerate() {
                let wv = wk[rr * g.s + ss];
                let src = &row[c..][..g.q * sw];
                match sw {
                    1 => dst.iter_mut().zip(src).for_each(|(v, &x)| fma(v, wv, x)),
                    2 => dst
                        .iter_mut()
                        .zip(src.chunks_exact(2))
                        .for_each(|(v, x)| fma(v, wv, x[0])),
                    _ => dst
                        .iter_mut()
                        .zip(src.chunks_exact(sw))
                        .for_each(|(v, x)| fma(v, wv, x[0])),
                }
            }
        }
    }
}

/// `plane` (`H × W`) copied into `buf` zero-padded to the rows and columns the output reads
/// ([`padded_dims`]: `(P − 1)·sh + (R − 1)·dh + 1` by `cols = (Q − 1)·sw + (S − 1)·dw + 1`;
/// the leading pads from `g.pad`, the trailing ones whatever is left), plus `sw` values of
/// slack at the end so that the last tap's run of `Q · sw` values stays inside. Returns
/// `cols`. `buf` must be empty or left by a call with the same geometry: its padding is
/// zeroed only when its length changes (every channel writes the same positions).
fn depthwise_padded(g: &ConvShape, plane: &[f32], buf: &mut Vec<f32>) -> usize {
    let sw = g.stride[1];
    let (rows, cols) = padded_dims(g);
    if buf.len() != rows * cols + sw {
        buf.clear();
        buf.resize(rows * cols + sw, 0.0);
    }
    let n = g.w.min(cols.saturating_sub(g.pad[1]));
    for r in 0..rows {
        let Some(ih) = r.checked_sub(g.pad[0]).filter(|&ih| ih < g.h) else {
            continue;
        };
        // Input columns [0, W) at padded columns [pad_left, …), clipped.
        buf[r * cols + g.pad[1]..][..n].copy_from_slice(&plane[ih * g.w..][..n]);
    }
    cols
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorforge_kernels::vmath::Level;

    /// The definition, in f64: out[n,k,p,q] = b[k] + Σ x[n, g·cg+ci, p·sh + r·dh − ph,
    /// q·sw + s·dw − pw] · w[k, ci, r, s] over in-range taps.
    fn reference(g: &ConvShape, x: &[f32], w: &[f32], b: Option<&[f32]>) -> Vec<f32> {
        let (cg, kg) = (g.c / g.group, g.k / g.group);
        let mut out = vec![0f32; g.n * g.k * g.p * g.q];
        for n in 0..g.n {
            for k in 0..g.k {
                let grp = k / kg;
                for p in 0..g.p {
                    for q in 0..g.q {
                        let mut acc = b.map_or(0.0, |b| b[k] as f64);
                        for ci in 0..cg {
                            for r in 0..g.r {
                                for s in 0..g.s {
                                    let ih = (p * g.stride[0] + r * g.dil[0]) as isize
                                        - g.pad[0] as isize;
                                    let iw = (q * g.stride[1] + s * g.dil[1]) as isize
                                        - g.pad[1] as isize;
                                    if ih < 0 || iw < 0 || ih >= g.h as isize || iw >= g.w as isize
                                    {
                                        continue;
                                    }
                                    let xv = x[((n * g.c + grp * cg + ci) * g.h + ih as usize)
                                        * g.w
                                        + iw as usize];
                                    let wv = w[((k * cg + ci) * g.r + r) * g.s + s];
                                    acc += xv as f64 * wv as f64;
                                }
                            }
                        }
                        out[((n * g.k + k) * g.p + p) * g.q + q] = acc as f32;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn a_pointwise_convolution_on_a_small_map_taken_transposed_equals_the_planar_one() {
        let Some(kern) = Kernel::detect() else {
            eprintln!("no sgemm kernel on this CPU; the test has nothing to check");
            return;
        };
        // MobileNetV2's 320 → 1280 on 7 × 7, a smaller one (9 × 5 = 45 pixels: 45 of 48 lanes,
        // not taken), two images; ReLU6 and a bias.
        let relu6 = Clamp {
            lo: 0.0,
            hi: 6.0,
            relu: false,
        };
        for (n, c, k, h, w) in [(1, 320, 1280, 7, 7), (2, 288, 64, 7, 7), (1, 256, 32, 9, 5)] {
            let g = ConvShape {
                n,
                c,
                h,
                w,
                k,
                r: 1,
                s: 1,
                p: h,
                q: w,
                stride: [1, 1],
                pad: [0, 0],
                dil: [1, 1],
                group: 1,
            };
            // 49 pixels: 77 % of 64 lanes, 88 % of 56 rows; 45: 94 % of 48 lanes.
            assert_eq!(
                transposed_pays(&g, kern),
                kern.level() == Level::Avx512 && h * w == 49,
                "{g:?}"
            );
            let mut rng = tensorforge_core::rng::SplitMix64::new(7);
            let x: Vec<f32> = (0..n * c * h * w).map(|_| rng.next_f32_pm1()).collect();
            let wt: Vec<f32> = (0..k * c).map(|_| rng.next_f32_pm1()).collect();
            let b: Vec<f32> = (0..k).map(|_| rng.next_f32_pm1()).collect();
            // With and without a residual (MobileNetV2's 960 → 160 + Add).
            let residual: Vec<f32> = (0..n * k * h * w).map(|_| rng.next_f32_pm1()).collect();
            let posts = [
                Post {
                    addend: None,
                    clamp: relu6,
                },
                Post {
                    addend: Some(&residual),
                    clamp: Clamp::NONE,
                },
            ];
            for post in posts {
                // The planar product (no filter cache: never transposed), then the entry point
                // with one: the same sums in the same order, so the same bits.
                let mut want = vec![f32::NAN; n * k * h * w];
                let mut scratch = vec![];
                conv2d_with(
                    Some(kern),
                    &g,
                    &x,
                    &wt,
                    Some(&b),
                    &mut want,
                    &mut scratch,
                    None,
                    post,
                )
                .unwrap();
                let cache = crate::exec::winograd::FilterCache::default();
                for threads in [1, 2] {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    let mut got = vec![f32::NAN; want.len()];
                    pool.install(|| {
                        conv2d(
                            &g,
                            &x,
                            &wt,
                            Some(&b),
                            &mut got,
                            &mut scratch,
                            &cache,
                            5,
                            post,
                        )
                    })
                    .unwrap();
                    for (i, (a, e)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            e.to_bits(),
                            "{g:?} {threads}T at {i}: {a} vs {e}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn every_geometry_matches_the_definition() {
        // (n, c, h, w, k, r, s, stride, pad, dil, group): 1×1 direct, 3×3 padded, strided,
        // dilated, grouped, depthwise, a 7×7 stride-2 stem, an odd width with stride 2.
        let cases = [
            (2, 8, 9, 9, 6, 1, 1, [1, 1], [0, 0], [1, 1], 1),
            (1, 3, 10, 12, 5, 3, 3, [1, 1], [1, 1], [1, 1], 1),
            (2, 4, 11, 9, 4, 3, 3, [2, 2], [1, 1], [1, 1], 1),
            (1, 4, 12, 12, 4, 3, 3, [1, 1], [2, 2], [2, 2], 1),
            (1, 8, 7, 7, 6, 3, 3, [1, 1], [1, 1], [1, 1], 2),
            (2, 6, 8, 8, 6, 3, 3, [1, 1], [1, 1], [1, 1], 6),
            (1, 3, 16, 16, 8, 7, 7, [2, 2], [3, 3], [1, 1], 1),
            (1, 2, 5, 7, 3, 1, 3, [2, 2], [0, 1], [1, 1], 1),
            // Sixteen images of 590 Ki multiply-adds: (image, group) runs per worker.
            (16, 16, 16, 16, 16, 3, 3, [1, 1], [1, 1], [1, 1], 1),
            (2, 16, 8, 8, 16, 1, 1, [1, 1], [0, 0], [1, 1], 2),
            // 1 × 1 on 2 × 2 and 1 × 1 maps: a linear layer over the pixels (`patches_apply`).
            (2, 40, 2, 2, 72, 1, 1, [1, 1], [0, 0], [1, 1], 1),
            (3, 40, 1, 1, 72, 1, 1, [1, 1], [0, 0], [1, 1], 1),
            // ... and any tiny output map: 3 × 3 stride 2 padded (2 × 2 → 1 × 1), 1 × 1
            // stride 2, a dilated 3 × 3 on 2 × 2.
            (2, 32, 2, 2, 40, 3, 3, [2, 2], [1, 1], [1, 1], 1),
            (2, 64, 2, 2, 48, 1, 1, [2, 2], [0, 0], [1, 1], 1),
            (1, 24, 2, 2, 40, 3, 3, [1, 1], [2, 2], [2, 2], 1),
            // Implicit GEMM: Wp/Q = 18/16 (3×3) and 10/8; a 5×5 dilated one past a K block
            // (C·R·S = 12·25 = 300 > 256); a large one whose output channels split over the
            // workers (64·576·784 ≈ 29 Mi multiply-adds); a 1×3 with one-sided padding.
            (2, 16, 16, 16, 16, 3, 3, [1, 1], [1, 1], [1, 1], 1),
            (1, 32, 8, 8, 20, 3, 3, [1, 1], [1, 1], [1, 1], 1),
            (1, 12, 24, 24, 9, 5, 5, [1, 1], [4, 4], [2, 2], 1),
            (1, 64, 28, 28, 64, 3, 3, [1, 1], [1, 1], [1, 1], 1),
            (1, 4, 6, 20, 5, 1, 3, [1, 1], [0, 1], [1, 1], 1),
            // Implicit GEMM over phase planes: a stride-2 3×3 (Wq/Q = 9/8), a patch
            // embedding (8×8 stride 8: Wq = Q), stride 2 with dilation 2, unequal strides
            // with asymmetric sizes.
            (2, 16, 16, 16, 32, 3, 3, [2, 2], [1, 1], [1, 1], 1),
            (2, 3, 32, 32, 64, 8, 8, [8, 8], [0, 0], [1, 1], 1),
            (1, 5, 21, 21, 7, 3, 3, [2, 2], [2, 2], [2, 2], 1),
            (1, 6, 19, 40, 8, 3, 5, [3, 2], [1, 2], [1, 1], 1),
            // Runs (output width a multiple of 16): past a K block (C·R·S = 288) and split
            // by output channel over two workers (32·288·1024 ≈ 9.4 Mi multiply-adds).
            (1, 32, 32, 32, 32, 3, 3, [1, 1], [1, 1], [1, 1], 1),
            // Patch embeddings as linear layers (`patch_embedding`): ViT's 16×16 stride 16
            // (C·R·S = 768, three K blocks; 16 patches); ConvNeXt's 4×4 stride-4 stem over two
            // images (2·64 patch rows, split over two workers: 128·48·40 ≈ 246 Ki
            // multiply-adds); an input no patch grid fills (37×29 under 8×8: 4×3 patches, 5
            // rows and columns left over) with 20 channels (not a multiple of 16); unequal
            // kernel sides; a 3×3 stride-3 over several images at 1.8 Mi multiply-adds;
            // ConvNeXt's 2×2 stride-2 downsamplers (at AVX-512 patch embeddings, at AVX2
            // phase planes): two images of 24 → 40 channels, and 48 → 96 on 56 × 56 (split
            // over two workers: 784·192·96 ≈ 14 Mi multiply-adds).
            (2, 24, 28, 28, 40, 2, 2, [2, 2], [0, 0], [1, 1], 1),
            (1, 48, 56, 56, 96, 2, 2, [2, 2], [0, 0], [1, 1], 1),
            (1, 3, 64, 64, 40, 16, 16, [16, 16], [0, 0], [1, 1], 1),
            (2, 3, 32, 32, 40, 4, 4, [4, 4], [0, 0], [1, 1], 1),
            (1, 4, 37, 29, 20, 8, 8, [8, 8], [0, 0], [1, 1], 1),
            (1, 2, 24, 30, 16, 4, 6, [4, 6], [0, 0], [1, 1], 1),
            (3, 16, 48, 48, 48, 3, 3, [3, 3], [0, 0], [1, 1], 1),
            // 1 × 1 with a stride above 1 (`strided_pointwise`): ResNet's downsampling
            // shortcut over two images, odd sides with unequal strides, two groups, and one
            // whose unit-stride product splits over two workers (128·64·196 ≈ 1.6 Mi
            // multiply-adds).
            (2, 16, 28, 28, 32, 1, 1, [2, 2], [0, 0], [1, 1], 1),
            (1, 8, 11, 9, 12, 1, 1, [3, 2], [0, 0], [1, 1], 1),
            (1, 8, 10, 10, 8, 1, 1, [2, 2], [0, 0], [1, 1], 2),
            (1, 64, 28, 28, 128, 1, 1, [2, 2], [0, 0], [1, 1], 1),
        ];
        for (i, &(n, c, h, w, k, r, s, stride, pad, dil, group)) in cases.iter().enumerate() {
            let p = (h + 2 * pad[0] - dil[0] * (r - 1) - 1) / stride[0] + 1;
            let q = (w + 2 * pad[1] - dil[1] * (s - 1) - 1) / stride[1] + 1;
            let g = ConvShape {
                n,
                c,
                h,
                w,
                k,
                r,
                s,
                p,
                q,
                stride,
                pad,
                dil,
                group,
            };
            let x: Vec<f32> = (0..n * c * h * w)
                .map(|j| ((j * 37 % 101) as f32 - 50.0) / 25.0)
                .collect();
            let wt: Vec<f32> = (0..k * c / group * r * s)
                .map(|j| ((j * 53 % 97) as f32 - 48.0) / 40.0)
                .collect();
            let b: Vec<f32> = (0..k).map(|j| j as f32 * 0.25 - 1.0).collect();
            // faer, and each packed kernel this CPU has (AVX2, AVX-512).
            let kernels = [None].into_iter().chain(
                [Level::Avx2, Level::Avx512]
                    .map(Kernel::for_level)
                    .into_iter()
                    .flatten()
                    .map(Some),
            );
            for kern in kernels {
                for bias in [None, Some(b.as_slice())] {
                    let mut want = reference(&g, &x, &wt, bias);
                    // With a bias, an addend (a residual, added before the clamp) and a
                    // clamp too, each applied as the path stores its output.
                    let d: Vec<f32> = (0..want.len())
                        .map(|j| ((j * 29 % 31) as f32 - 15.0) / 20.0)
                        .collect();
                    let post = match bias {
                        Some(_) => Post {
                            addend: Some(&d),
                            clamp: Clamp {
                                lo: -0.5,
                                hi: 0.75,
                                relu: false,
                            },
                        },
                        None => Post::NONE,
                    };
                    let clamp = post.clamp;
                    for (j, v) in want.iter_mut().enumerate() {
                        let add = post.addend.map_or(0.0, |d| d[j]);
                        *v = (*v + add).clamp(clamp.lo, clamp.hi);
                    }
                    for threads in [1, 2] {
                        let mut got = vec![f32::NAN; want.len()];
                        // Scratch full of NaN: every value the product reads is written first.
                        let mut scratch = vec![f32::NAN; 1 << 20];
                        // On two workers, the (image, group)-parallel path and the row split
                        // run where they apply.
                        crate::exec::with_threads(threads, || {
                            conv2d_with(kern, &g, &x, &wt, bias, &mut got, &mut scratch, None, post)
                        })
                        .unwrap()
                        .unwrap();
                        for (j, (a, e)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (a - e).abs() <= 1e-4 * (1.0 + e.abs()),
                                "case {i} {kern:?} {threads}T [{j}]: {a} vs {e}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Depthwise convolutions ([`depthwise`]) against the definition: end padding implied by
    /// the output size (SAME_UPPER at stride 2: 16 rows need (8 − 1)·2 + 3 = 17, one padded
    /// at the end), 5×5 taps, 14 columns (a last vector overlapping the one before) and 7
    /// (shorter than a vector), stride 3 with short and long rows, dilation 2 with unequal
    /// strides, 2 × 2 maps (the direct path), and one large enough for the channels to split
    /// over two workers (32·96·96 = 294,912 outputs ≥ 2^18).
    #[test]
    fn depthwise_geometries_match_the_definition() {
        // (n, c, h, w, r, s, stride, leading pad, p, q, dilation)
        let cases = [
            (2, 5, 16, 16, 3, 3, [2, 2], [0, 0], 8, 8, [1, 1]),
            (1, 4, 13, 21, 5, 5, [1, 1], [2, 2], 13, 21, [1, 1]),
            (1, 5, 14, 14, 3, 3, [1, 1], [1, 1], 14, 14, [1, 1]),
            (1, 3, 7, 7, 3, 3, [1, 1], [1, 1], 7, 7, [1, 1]),
            (1, 3, 17, 19, 3, 3, [3, 3], [1, 1], 6, 7, [1, 1]),
            (1, 3, 30, 31, 3, 3, [3, 3], [1, 1], 10, 11, [1, 1]),
            (2, 6, 2, 2, 3, 3, [1, 1], [1, 1], 2, 2, [1, 1]),
            (1, 4, 20, 20, 3, 3, [1, 2], [2, 2], 20, 10, [2, 2]),
            (1, 32, 96, 96, 3, 3, [1, 1], [1, 1], 96, 96, [1, 1]),
        ];
        for (i, &(n, c, h, w, r, s, stride, pad, p, q, dil)) in cases.iter().enumerate() {
            let g = ConvShape {
                n,
                c,
                h,
                w,
                k: c,
                r,
                s,
                p,
                q,
                stride,
                pad,
                dil,
                group: c,
            };
            let x: Vec<f32> = (0..n * c * h * w)
                .map(|j| ((j * 37 % 101) as f32 - 50.0) / 25.0)
                .collect();
            let wt: Vec<f32> = (0..c * r * s)
                .map(|j| ((j * 53 % 97) as f32 - 48.0) / 40.0)
                .collect();
            let b: Vec<f32> = (0..c).map(|j| j as f32 * 0.25 - 1.0).collect();
            for bias in [None, Some(b.as_slice())] {
                let want = reference(&g, &x, &wt, bias);
                for threads in [1, 2] {
                    let mut got = vec![f32::NAN; want.len()];
                    crate::exec::with_threads(threads, || depthwise(&g, &x, &wt, bias, &mut got))
                        .unwrap();
                    for (j, (a, e)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (a - e).abs() <= 1e-4 * (1.0 + e.abs()),
                            "case {i} {threads}T [{j}]: {a} vs {e}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn which_operand_each_geometry_reads() {
        // With a packed kernel: a stride-2 3×3 on 18×18 reads phase planes 10 wide for 9
        // output columns (10·4 = 40 ≤ 9·5); a patch embedding (stride 8) and a 3×3 on 4×4
        // outputs (6 columns computed for 4: 24 > 20) take the column matrix.
        let Some(kern) = Kernel::for_level(Level::Avx2) else {
            eprintln!("no AVX2: the packed kernel's paths are not chosen on this CPU");
            return;
        };
        let shape = |h: usize, r: usize, st: usize, pad: usize| {
            let p = (h + 2 * pad - r) / st + 1;
            ConvShape {
                n: 1,
                c: 4,
                h,
                w: h,
                k: 8,
                r,
                s: r,
                p,
                q: p,
                stride: [st, st],
                pad: [pad, pad],
                dil: [1, 1],
                group: 1,
            }
        };
        let g = shape(18, 3, 2, 1);
        assert_eq!(phase_dims(&g), (10, 10)); // Hp = Wp = (9 − 1)·2 + 3 = 19, halved up
        assert_eq!(
            layout(&g, Some(kern)).cols,
            Cols::Implicit { n_eff: 8 * 10 + 9 }
        );
        // Output width 8, one AVX2 vector: runs, no wasted columns, whatever the phase width.
        let g = shape(16, 3, 2, 1);
        assert_eq!(layout(&g, Some(kern)).cols, Cols::ImplicitRuns);
        assert_eq!(
            layout(&shape(16, 3, 1, 1), Some(kern)).cols,
            Cols::ImplicitRuns
        );
        let g = shape(32, 8, 8, 0);
        assert_eq!(layout(&g, Some(kern)).cols, Cols::Im2col);
        // ... which a patch embedding runs as a linear layer instead; not with padding, nor
        // at stride 2 (phase planes), nor without the packed kernel.
        assert!(patches_apply(&g, Some(kern)));
        assert!(!patches_apply(&shape(32, 8, 8, 1), Some(kern)));
        assert!(!patches_apply(&shape(32, 2, 2, 0), Some(kern)));
        assert!(!patches_apply(&g, None));
        // A 1 × 1 convolution on a 2 × 2 map is one too; on a 3 × 3 map not.
        let wide = |h| ConvShape {
            c: 64,
            k: 64,
            ..shape(h, 1, 1, 0)
        };
        assert!(patches_apply(&wide(2), Some(kern)));
        assert!(!patches_apply(&wide(3), Some(kern)));
        // At AVX-512, whose product is stored transposed into the planes, a 2 × 2 stride-2
        // convolution is a patch embedding too (no phase planes to split).
        if let Some(k512) = Kernel::for_level(Level::Avx512) {
            assert!(patches_apply(&shape(32, 2, 2, 0), Some(k512)));
            assert!(!patches_apply(&shape(32, 3, 2, 1), Some(k512)));
            // Not a 1 × 1 stride-1 convolution (stride = kernel too, but a pointwise layer:
            // its own paths, with the residual in the tile).
            assert!(!patches_apply(&wide(3), Some(k512)));
            assert!(!patches_apply(&wide(14), Some(k512)));
        }
        // 4×4 patches of 4·8·8 = 256 values, and their 16 × 8 product unless it is stored
        // transposed (AVX-512).
        let prod = if transposed_store(kern) { 0 } else { 16 * 8 };
        assert_eq!(patches_scratch_len(&g, kern), 16 * 256 + prod);
        if let Some(k) = Kernel::detect() {
            assert_eq!(scratch_len(&g), patches_scratch_len(&g, k));
        }
        assert_eq!(layout(&shape(4, 3, 1, 1), Some(kern)).cols, Cols::Im2col);
        assert_eq!(layout(&g, None).cols, Cols::Im2col);
    }
}
