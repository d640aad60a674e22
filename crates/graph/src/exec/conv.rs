//! 2-D convolution (NCHW, grouped, strided, dilated, zero-padded) on the CPU as GEMMs: for
//! each image and group, the input patches are laid out as a `[C/g · R · S, P · Q]` column
//! matrix (im2col; a 1×1 convolution with unit stride and no padding reads the input in
//! place) and multiplied by the group's `[K/g, C/g · R · S]` weights with faer, on every
//! thread when the product is large. Depthwise convolutions (one input and one output
//! channel per group) skip the GEMM: a direct loop per channel, channels in parallel.
//! Left out: Winograd and FFT algorithms, weight prepacking across runs, NHWC layouts,
//! fusing the following activation into the GEMM's epilogue.

use faer::{Accum, MatRef};
use rayon::prelude::*;

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

/// Multiply-accumulates of one GEMM below which faer runs it on the calling thread.
const PAR_MIN_MACS: usize = 1 << 20;
/// Multiply-accumulates of a whole convolution below which its (image, group) GEMMs run one
/// after another on the calling thread: waking a second worker costs tens of µs on a shared
/// VM, more than a few million multiply-adds save (ResNet fixture convolutions of 1.2 Mi
/// took 2x longer on two workers).
const PAR_MIN_TASKS_MACS: usize = 1 << 22;

/// How a convolution runs on the current pool: in place (`direct`) or through columns, its
/// (image, group) GEMMs spread over `workers` (`across`), each worker's `need` scratch values
/// (`padded` of them a zero-padded copy of the input planes), `total` for all.
struct Layout {
    direct: bool,
    across: bool,
    workers: usize,
    padded: usize,
    need: usize,
    total: usize,
}

fn layout(g: &ConvShape) -> Layout {
    let (cg, kg) = (g.c / g.group.max(1), g.k / g.group.max(1));
    let (pq, crs) = (g.p * g.q, cg * g.r * g.s);
    let direct =
        g.r == 1 && g.s == 1 && g.stride == [1, 1] && g.pad == [0, 0] && g.p == g.h && g.q == g.w;
    let threads = rayon::current_num_threads();
    let tasks = g.n * g.group;
    let macs = kg * crs * pq;
    // Several images or groups and enough work: the (image, group) GEMMs dealt to the
    // workers in contiguous runs, each sequential with its own column buffer; otherwise one
    // after another, a large GEMM split by output channel inside.
    let across =
        threads > 1 && tasks >= 2 && macs < PAR_MIN_MACS && macs * tasks >= PAR_MIN_TASKS_MACS;
    let workers = if across { threads.min(tasks) } else { 1 };
    // The column matrix is gathered from a zero-padded copy of the input planes (no bounds
    // tests or fills in the gather loop).
    let (hp, wp) = padded_dims(g);
    let padded = if !direct { cg * hp * wp } else { 0 };
    let need = if direct { 0 } else { crs * pq + padded };
    Layout {
        direct,
        across,
        workers,
        padded,
        need,
        total: need * workers,
    }
}

/// The scratch values [`conv2d`] uses for `g` on the current pool (take a buffer of exactly
/// this length from the executor's pool, so that it is reused run after run).
pub(crate) fn scratch_len(g: &ConvShape) -> usize {
    layout(g).total
}

/// `out = conv(x, w) + bias`, all row-major NCHW / KCRS; `out` holds `n·k·p·q` values.
/// `scratch` is grown as needed for the column matrix and kept for the next call.
pub(crate) fn conv2d(
    g: &ConvShape,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
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
    if cg == 1 && kg == 1 {
        depthwise(g, x, w, bias, out);
        return Ok(());
    }
    let Layout {
        direct,
        across,
        workers,
        padded,
        need,
        total,
    } = layout(g);
    let threads = rayon::current_num_threads();
    let macs = kg * crs * pq;
    if scratch.len() < total {
        scratch
            .try_reserve_exact(total - scratch.len())
            .map_err(|_| format!("cannot allocate the {total}-value im2col buffer"))?;
        scratch.resize(total, 0.0);
    }
    // One large GEMM: its output channels split across the workers (at least 16 each).
    let split = if threads > 1 && !across && macs >= PAR_MIN_MACS {
        crate::gemm::split_workers(threads, kg)
    } else {
        1
    };
    // One (image, group): its columns (or the input in place), its bias, its GEMM.
    let one = |idx: usize, o: &mut [f32], scratch: &mut [f32]| {
        let (img, grp) = (idx / g.group, idx % g.group);
        let xin = &x[(img * g.c + grp * cg) * g.h * g.w..][..cg * g.h * g.w];
        let cols: &[f32] = if direct {
            xin
        } else {
            let (cols, pad) = scratch[..crs * pq + padded].split_at_mut(crs * pq);
            im2col_padded(g, xin, cg, cols, pad);
            &scratch[..crs * pq]
        };
        let accum = match bias {
            Some(b) => {
                for (row, &bv) in o.chunks_mut(pq).zip(&b[grp * kg..][..kg]) {
                    row.fill(bv);
                }
                Accum::Add
            }
            None => Accum::Replace,
        };
        let wg = &w[grp * kg * crs..][..kg * crs];
        let b = MatRef::from_row_major_slice(cols, crs, pq);
        crate::gemm::rows_split(o, wg, b, crs, pq, accum, split);
    };
    if across {
        let per = (g.n * g.group).div_ceil(workers);
        let mut spare = vec![];
        let bufs: &mut [f32] = if need == 0 {
            spare.resize(workers, 0.0);
            &mut spare
        } else {
            &mut scratch[..total]
        };
        out.par_chunks_mut(per * kg * pq)
            .zip(bufs.par_chunks_mut(need.max(1)))
            .enumerate()
            .for_each(|(wi, (ob, sc))| {
                for (j, o) in ob.chunks_mut(kg * pq).enumerate() {
                    one(wi * per + j, o, sc);
                }
            });
    } else {
        for (idx, o) in out.chunks_mut(kg * pq).enumerate() {
            one(idx, o, scratch);
        }
    }
    Ok(())
}

/// Rows and columns of the zero-padded planes a convolution reads: output row `p` and tap `r`
/// read padded row `p·stride + r·dil` (input row `p·stride + r·dil − pad_top`), so the last
/// one read is `(P − 1)·stride + (R − 1)·dil`.
fn padded_dims(g: &ConvShape) -> (usize, usize) {
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
    let pq = g.p * g.q;
    let q = g.q;
    let pad = &*pad;
    let fill = |(row, d): (usize, &mut [f32])| {
        let ci = row / (g.r * g.s);
        let rr = (row / g.s) % g.r;
        let ss = row % g.s;
        let src = &pad[ci * hp * wp..][..hp * wp];
        let sw = g.stride[1];
        for op in 0..g.p {
            let s0 = (op * g.stride[0] + rr * g.dil[0]) * wp + ss * g.dil[1];
            let dst = &mut d[op * q..][..q];
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
                    *v = run[k * sw];
                }
            }
        }
    };
    if cols.len() >= PAR_MIN_COPY && rayon::current_num_threads() > 1 {
        cols.par_chunks_mut(pq).enumerate().for_each(fill);
    } else {
        cols.chunks_mut(pq).enumerate().for_each(fill);
    }
}

/// Values of a column matrix below which it is filled on the calling thread (a parallel
/// fill costs more in hand-offs than it saves).
const PAR_MIN_COPY: usize = 1 << 18;

/// One input and one output channel per group: a direct loop per output channel (the
/// multiply-adds are few; a GEMM of one row would cost more than it saves).
fn depthwise(g: &ConvShape, x: &[f32], w: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    let pq = g.p * g.q;
    let (h, wd) = (g.h as isize, g.w as isize);
    let channel = |(nk, o): (usize, &mut [f32])| {
        let (img, k) = (nk / g.k, nk % g.k);
        let plane = &x[(img * g.c + k) * g.h * g.w..][..g.h * g.w];
        let wk = &w[k * g.r * g.s..][..g.r * g.s];
        o.fill(bias.map_or(0.0, |b| b[k]));
        for rr in 0..g.r {
            for ss in 0..g.s {
                let wv = wk[rr * g.s + ss];
                for op in 0..g.p {
                    let ih = (op * g.stride[0] + rr * g.dil[0]) as isize - g.pad[0] as isize;
                    if ih < 0 || ih >= h {
                        continue;
                    }
                    let src = &plane[ih as usize * g.w..][..g.w];
                    let off = (ss * g.dil[1]) as isize - g.pad[1] as isize;
                    for (oq, v) in o[op * g.q..][..g.q].iter_mut().enumerate() {
                        let iw = (oq * g.stride[1]) as isize + off;
                        if iw >= 0 && iw < wd {
                            *v += wv * src[iw as usize];
                        }
                    }
                }
            }
        }
    };
    if out.len() >= PAR_MIN_COPY && rayon::current_num_threads() > 1 {
        out.par_chunks_mut(pq).enumerate().for_each(channel);
    } else {
        out.chunks_mut(pq).enumerate().for_each(channel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            for bias in [None, Some(b.as_slice())] {
                let want = reference(&g, &x, &wt, bias);
                let mut got = vec![f32::NAN; want.len()];
                let mut scratch = vec![];
                // On two workers, so the (image, group)-parallel path runs where it applies.
                crate::exec::with_threads(2, || conv2d(&g, &x, &wt, bias, &mut got, &mut scratch))
                    .unwrap()
                    .unwrap();
                for (j, (a, e)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - e).abs() <= 1e-4 * (1.0 + e.abs()),
                        "case {i} [{j}]: {a} vs {e}"
                    );
                }
            }
        }
    }
}
