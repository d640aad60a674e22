//! 3×3, stride-1, undilated, ungrouped convolutions by Winograd's minimal filtering
//! F(2×2, 3×3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016):
//! each 2×2 block of outputs ("tile") comes from a 4×4 input patch with 16 multiplies per
//! channel pair instead of 36, so the products shrink 2.25× for the cost of three transforms.
//!
//! Per image: the zero-padded input planes are split by column parity (so that each of a
//! tile's four patch columns is a contiguous run over the tiles of a row); the input
//! transform `V = Bᵀ d B` gives 16 matrices `V[ξ]` of `C × T` (T tiles); the filter transform
//! `U = G g Gᵀ` gives 16 matrices `U[ξ]` of `K × C`, packed for the Kernels crate's `sgemm`
//! once per weight buffer and kept ([`FilterCache`]); 16 GEMMs `M[ξ] = U[ξ] · V[ξ]` (split
//! across the workers); the output transform `Y = Aᵀ M A` writes each tile's 2×2 outputs plus
//! the bias, dropping those past an odd output edge. The transforms are plain loops over the
//! tiles of a row, compiled for AVX2 where the CPU has it so that they vectorize.
//!
//! Numerics: the transforms' coefficients are 0, ±1 and ±½, so the result differs from the
//! direct sum by a few rounding errors of the transformed values (tested against the f64
//! definition to 1e-5 of the output's scale). Non-finite inputs can give NaN where the direct
//! sum gives ±∞ (the transforms subtract transformed values).
//! Left out: larger tiles (F(4×4, 3×3) saves more multiplies but loses accuracy), strided,
//! dilated or grouped convolutions, and CPUs without the packed kernel (they keep the
//! convolution module's other paths).

use super::conv::ConvShape;
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tensorforge_kernels::sgemm::{Kernel, Right};

/// Multiply-adds of the direct convolution below which the Winograd path is not taken: the
/// transforms' fixed costs then outweigh the smaller products. Measured at one thread
/// against the direct path (AMD EPYC, AVX-512; docs/performance.md): 32 channels at 14×14
/// (1.8 Mi) 0.95×, at 28×28 (7.2 Mi) 1.13×; 64 channels at 28×28 1.48× (the `bench` test below).
const MIN_MACS: usize = 1 << 22;

/// Input and output channels below which the path is not taken: 16 channels measured
/// 0.77–0.81× the direct path at 28×28 and 56×56 (the products are too thin for the
/// transforms to pay).
const MIN_CHANNELS: usize = 32;

/// True when `g` takes this path with `kern`: 3×3, stride 1, no dilation, one group, at
/// least [`MIN_CHANNELS`] input and output channels and a direct product of at least
/// [`MIN_MACS`].
pub(crate) fn applies(g: &ConvShape, kern: Option<Kernel>) -> bool {
    kern.is_some()
        && g.r == 3
        && g.s == 3
        && g.stride == [1, 1]
        && g.dil == [1, 1]
        && g.group == 1
        && g.c >= MIN_CHANNELS
        && g.k >= MIN_CHANNELS
        && g.p >= 2
        && g.q >= 2
        && g.k * g.c * 9 * g.p * g.q >= MIN_MACS
}

/// Tile rows and columns, `⌈P/2⌉ × ⌈Q/2⌉`.
fn tiles(g: &ConvShape) -> (usize, usize) {
    (g.p.div_ceil(2), g.q.div_ceil(2))
}

/// Values of one parity plane: `(2·th + 2)` rows of `2·(tw + 1)`.
fn plane_len(g: &ConvShape) -> usize {
    let (th, tw) = tiles(g);
    (2 * th + 2) * 2 * (tw + 1)
}

/// Slack after the parity planes and after each gathered patch plane: the run copies move
/// whole blocks of [`RUN`] values and may read or write up to that many past a run's end.
const SLACK: usize = 2 * RUN;

/// Values one run copy moves at a time.
const RUN: usize = 16;

/// Scratch values for one image: `V` (`C · 16 · T`, channel-major), `M` (`16 · K · T`), and
/// per worker ([`per_worker`]) one parity plane and 16 patch planes of `T` (each plus
/// slack) for the input transform, or 4 output planes for the output transform.
pub(crate) fn scratch_len(g: &ConvShape) -> usize {
    let (th, tw) = tiles(g);
    let t = th * tw;
    let workers = rayon::current_num_threads().max(1);
    16 * g.c * t + 16 * g.k * t + workers * per_worker(g)
}

/// One worker's scratch: a parity plane ([`plane_len`]) and 16 patch planes of `T`, each
/// followed by [`SLACK`] values.
fn per_worker(g: &ConvShape) -> usize {
    let (th, tw) = tiles(g);
    plane_len(g) + SLACK + 16 * (th * tw + SLACK)
}

/// A weight's filters packed for one kernel (Winograd's 16 transformed matrices `U[ξ]`, or
/// a direct convolution's groups), and what identifies the values they came from (as
/// [`FilterCache`] checks them).
pub(crate) struct Filters {
    kern: Kernel,
    addr: usize,
    len: usize,
    sample: [u32; 16],
    /// Winograd: `U[ξ]` packed, each [`Kernel::packed_a_len`]`(K, C)` values; direct: each
    /// group's filters packed ([`pack_filters`]).
    pub(crate) packed: Vec<f32>,
}

/// The bit patterns of 16 values spread evenly over `v`.
fn sample(v: &[f32]) -> [u32; 16] {
    let mut s = [0u32; 16];
    if !v.is_empty() {
        for (i, x) in s.iter_mut().enumerate() {
            *x = v[i * (v.len() - 1) / 15].to_bits();
        }
    }
    s
}

/// Packed filters by convolution node, kept in the program's executor memo so that a weight
/// is transformed and packed once, not per run: Winograd's transformed filters, or a direct
/// convolution's filters packed for the kernel ([`FilterCache::packed`]). An entry is used
/// only while the run binds the same weight buffer (address and length) holding the same 16
/// sampled values; otherwise the filters are packed again. A weight changed in place at
/// positions the sample misses is not noticed: bind a new buffer to change a weight.
#[derive(Default)]
pub struct FilterCache(Mutex<HashMap<(usize, Form), Arc<Filters>>>);

/// Which packing of a node's filters an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Form {
    Winograd,
    Direct,
    /// A MatMul's right operand packed in panels of columns ([`Kernel::pack_b`]).
    Right,
    /// A depthwise convolution's filters lane-major (module `depthwise`).
    Depthwise,
}

impl Clone for FilterCache {
    fn clone(&self) -> Self {
        FilterCache(Mutex::new(
            self.0.lock().map(|m| m.clone()).unwrap_or_default(),
        ))
    }
}

impl std::fmt::Debug for FilterCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FilterCache")
    }
}

impl FilterCache {
    /// The packed `U` of node `node`'s filters `w` (`K × C × 3 × 3`).
    fn get(
        &self,
        kern: Kernel,
        node: usize,
        g: &ConvShape,
        w: &[f32],
    ) -> Result<Arc<Filters>, String> {
        self.get_or_make(kern, (node, Form::Winograd), w, || {
            transform_filters(kern, g, w)
        })
    }

    /// Node `node`'s filters `w` (`group` groups of `kg × crs` values) packed for `kern`,
    /// group after group, each [`Kernel::packed_a_len`]`(kg, crs)` values: the left operand
    /// of the direct convolution's GEMMs.
    pub(crate) fn packed(
        &self,
        kern: Kernel,
        node: usize,
        group: usize,
        kg: usize,
        crs: usize,
        w: &[f32],
    ) -> Result<Arc<Filters>, String> {
        self.get_or_make(kern, (node, Form::Direct), w, || {
            pack_filters(kern, group, kg, crs, w)
        })
    }

    /// MatMul node `node`'s right operand `w` (`k × n`, element (p, j) at `w[p·rs + j·cs]`)
    /// packed for `kern` in blocks of [`Kernel::kc`] rows, one after
    /// another, each the [`Kernel::pack_b`] packing of its `kc × n` rows
    /// ([`Kernel::packed_b_len`]`(k, n)` values in all): the weight of a linear layer
    /// ([`super::linear`]), which runs one K block at a time.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn packed_right(
        &self,
        kern: Kernel,
        node: usize,
        k: usize,
        n: usize,
        rs: usize,
        cs: usize,
        w: &[f32],
    ) -> Result<Arc<Filters>, String> {
        self.get_or_make(kern, (node, Form::Right), w, || {
            let len = kern
                .packed_b_len(k, n)
                .ok_or_else(|| format!("packed weight of {k}x{n} overflows"))?;
            let mut out: Vec<f32> = Vec::new();
            out.try_reserve_exact(len)
                .map_err(|_| format!("cannot allocate {len} packed weight values"))?;
            out.resize(len, 0.0);
            let mut at = 0;
            for pc in (0..k).step_by(kern.kc()) {
                let kc = kern.kc().min(k - pc);
                let blen = kern.packed_b_len(kc, n).unwrap_or(0);
                kern.pack_b(&w[pc * rs..], kc, n, rs, cs, &mut out[at..at + blen])
                    .map_err(|e| e.to_string())?;
                at += blen;
            }
            Ok(out)
        })
    }

    /// Depthwise convolution node `node`'s filters `w` as `make` lays them out for its
    /// channel blocks (`super::depthwise`), kept like the packed filters.
    pub(crate) fn depthwise(
        &self,
        kern: Kernel,
        node: usize,
        w: &[f32],
        make: impl FnOnce() -> Vec<f32>,
    ) -> Result<Arc<Filters>, String> {
        self.get_or_make(kern, (node, Form::Depthwise), w, || Ok(make()))
    }

    fn get_or_make(
        &self,
        kern: Kernel,
        key: (usize, Form),
        w: &[f32],
        make: impl FnOnce() -> Result<Vec<f32>, String>,
    ) -> Result<Arc<Filters>, String> {
        let (addr, len, smp) = (w.as_ptr() as usize, w.len(), sample(w));
        if let Ok(map) = self.0.lock() {
            if let Some(f) = map.get(&key) {
                if f.kern == kern && f.addr == addr && f.len == len && f.sample == smp {
                    return Ok(f.clone());
                }
            }
        }
        let f = Arc::new(Filters {
            kern,
            addr,
            len,
            sample: smp,
            packed: make()?,
        });
        if let Ok(mut map) = self.0.lock() {
            map.insert(key, f.clone());
        }
        Ok(f)
    }
}

/// The K blocks of a weight packed by [`FilterCache::packed_right`] (`k × n`, blocks of
/// [`Kernel::kc`] rows one after another): `(pc, kc, block)` for rows `pc..pc + kc`, the
/// block's [`Kernel::packed_b_len`]`(kc, n)` values. One walk for every caller that runs
/// such a weight one K block at a time (linear layers, transposed 1 × 1 convolutions).
pub(crate) fn right_blocks(
    kern: Kernel,
    packed: &[f32],
    k: usize,
    n: usize,
) -> impl Iterator<Item = (usize, usize, &[f32])> {
    let kc = kern.kc().max(1);
    (0..k).step_by(kc).scan(0usize, move |at, pc| {
        let rows = kc.min(k - pc);
        let len = kern.packed_b_len(rows, n).unwrap_or(0);
        // (A weight of another k × n is a caller's bug: the slice panics, as before.)
        let block = &packed[*at..*at + len];
        *at += len;
        Some((pc, rows, block))
    })
}

/// `group` groups of `kg × crs` filters, each packed for `kern` ([`Kernel::pack_a`]).
pub(crate) fn pack_filters(
    kern: Kernel,
    group: usize,
    kg: usize,
    crs: usize,
    w: &[f32],
) -> Result<Vec<f32>, String> {
    let pa = kern
        .packed_a_len(kg, crs)
        .and_then(|n| n.checked_mul(group))
        .ok_or_else(|| format!("{group} groups of {kg}x{crs} packed filters overflow"))?;
    let mut out: Vec<f32> = Vec::new();
    out.try_reserve_exact(pa)
        .map_err(|_| format!("cannot allocate {pa} packed filter values"))?;
    out.resize(pa, 0.0);
    let per = pa / group.max(1);
    for (grp, dst) in out.chunks_mut(per.max(1)).enumerate() {
        kern.pack_a(&w[grp * kg * crs..][..kg * crs], kg, crs, crs, 1, dst)
            .map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// `U[ξ] = G g Gᵀ` for every (k, c), packed per ξ: G = [[1, 0, 0], [½, ½, ½], [½, −½, ½],
/// [0, 0, 1]].
fn transform_filters(kern: Kernel, g: &ConvShape, w: &[f32]) -> Result<Vec<f32>, String> {
    let (k, c) = (g.k, g.c);
    let mut u = vec![0f32; 16 * k * c];
    for (kc, f) in w.chunks_exact(9).enumerate() {
        // G·g: 4 rows × 3 columns.
        let mut t = [[0f32; 3]; 4];
        for j in 0..3 {
            let (g0, g1, g2) = (f[j], f[3 + j], f[6 + j]);
            t[0][j] = g0;
            t[1][j] = 0.5 * (g0 + g1 + g2);
            t[2][j] = 0.5 * (g0 - g1 + g2);
            t[3][j] = g2;
        }
        // (G·g)·Gᵀ: 4 × 4.
        for (a, row) in t.iter().enumerate() {
            let v = [
                row[0],
                0.5 * (row[0] + row[1] + row[2]),
                0.5 * (row[0] - row[1] + row[2]),
                row[2],
            ];
            for (b, &x) in v.iter().enumerate() {
                u[(a * 4 + b) * k * c + kc] = x;
            }
        }
    }
    let pa = kern.packed_a_len(k, c).ok_or("packed filters overflow")?;
    let mut packed = vec![0f32; 16 * pa];
    for (xi, dst) in packed.chunks_exact_mut(pa).enumerate() {
        kern.pack_a(&u[xi * k * c..][..k * c], k, c, c, 1, dst)
            .map_err(|e| e.to_string())?;
    }
    Ok(packed)
}

/// `out = clamp(conv(x, w) + bias + addend)` through F(2×2, 3×3) for `g` ([`applies`] must
/// hold), `post` holding the addend and clamp, the filters from `cache` under node id
/// `node`; `scratch` holds at least [`scratch_len`] values. `post` is applied to each output
/// plane as the output transform writes it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv(
    kern: Kernel,
    cache: &FilterCache,
    node: usize,
    g: &ConvShape,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    post: super::conv::Post,
    out: &mut [f32],
    scratch: &mut [f32],
) -> Result<(), String> {
    let (th, tw) = tiles(g);
    let t = th * tw;
    let (c, k) = (g.c, g.k);
    let ww = tw + 1;
    let plane = plane_len(g);
    if scratch.len() < scratch_len(g) || w.len() != k * c * 9 {
        return Err(format!("winograd buffers do not match the shapes {g:?}"));
    }
    let filters = cache.get(kern, node, g, w)?;
    let pa = kern.packed_a_len(k, c).unwrap_or(0);
    let (v, rest) = scratch.split_at_mut(16 * c * t);
    let (m, work) = rest.split_at_mut(16 * k * t);
    let threads = rayon::current_num_threads();
    let per_worker = per_worker(g);
    let work = &mut work[..threads.max(1) * per_worker];
    let par = threads > 1;
    for img in 0..g.n {
        let xin = &x[img * c * g.h * g.w..][..c * g.h * g.w];
        let o = &mut out[img * k * g.p * g.q..][..k * g.p * g.q];
        // 1. Each channel's parity plane, then its 16 rows of V from its 16 patch planes, in
        // one pass over the workers (the parity planes of all channels first, then the
        // transforms, were two: at two threads each pass is a fork and a join).
        let input = |(ci, vc): (usize, &mut [f32]), w: &mut [f32]| {
            let (pl, d) = w.split_at_mut(plane + SLACK);
            parity_plane(g, &xin[ci * g.h * g.w..][..g.h * g.w], &mut pl[..plane], ww);
            gather_patches(pl, ww, th, tw, d);
            input_transform(d, t, vc);
        };
        // Channels dealt to the workers in contiguous runs, each with its own planes.
        let chunk = c.div_ceil(if par { threads } else { 1 });
        v.par_chunks_mut(chunk * 16 * t)
            .zip(work.par_chunks_mut(per_worker))
            .enumerate()
            .for_each(|(wi, (vb, d))| {
                for (j, vc) in vb.chunks_mut(16 * t).enumerate() {
                    input((wi * chunk + j, vc), d);
                }
            });
        // 2. The 16 products M[ξ] = U[ξ]·V[ξ], V[ξ] read in place (row c at c·16·T + ξ·T).
        let v = &*v;
        let product = |(xi, mx): (usize, &mut [f32])| {
            kern.gemm(
                k,
                t,
                c,
                &filters.packed[xi * pa..][..pa],
                Right::RowMajor {
                    data: &v[xi * t..(c - 1) * 16 * t + xi * t + t],
                    ld: 16 * t,
                },
                mx,
                t,
                false,
            )
            .map_err(|e| e.to_string())
        };
        if par {
            m.par_chunks_mut(k * t).enumerate().try_for_each(product)?;
        } else {
            m.chunks_mut(k * t).enumerate().try_for_each(product)?;
        }
        // 3. The output transform, output channels dealt to the workers.
        let m = &*m;
        let kchunk = k.div_ceil(if par { threads } else { 1 });
        let pq = g.p * g.q;
        o.par_chunks_mut(kchunk * pq)
            .zip(work.par_chunks_mut(per_worker))
            .enumerate()
            .for_each(|(wi, (ob, y))| {
                for (j, ok) in ob.chunks_mut(pq).enumerate() {
                    let kk = wi * kchunk + j;
                    let b = bias.map_or(0.0, |b| b[kk]);
                    output_transform(g, m, kk, k, t, tw, b, &mut y[..4 * t], ok);
                    post.part((img * k + kk) * pq, pq).apply(ok);
                }
            });
    }
    Ok(())
}

/// One input plane zero-padded to `(2·th + 2)` rows and split by padded column parity: row
/// `r` holds padded columns `0, 2, 4, …` in its first `ww` values and `1, 3, 5, …` in the next
/// `ww`.
fn parity_plane(g: &ConvShape, src: &[f32], dst: &mut [f32], ww: usize) {
    dst.fill(0.0);
    let [pt, pl] = g.pad;
    for (r, row) in dst.chunks_exact_mut(2 * ww).enumerate() {
        let Some(ih) = r.checked_sub(pt).filter(|&ih| ih < g.h) else {
            continue;
        };
        let (even, odd) = row.split_at_mut(ww);
        for (iw, &v) in src[ih * g.w..][..g.w].iter().enumerate() {
            let pc = iw + pl;
            if pc / 2 < ww {
                if pc % 2 == 0 {
                    even[pc / 2] = v;
                } else {
                    odd[pc / 2] = v;
                }
            }
        }
    }
}

/// Copies `n` values from `src` to `dst` in whole blocks of [`RUN`]: the last block may
/// read and write up to `RUN − 1` values past the run (callers leave [`SLACK`] there, and
/// runs into one destination are written in increasing order, so an overshoot is
/// overwritten by the next run).
#[inline(always)]
fn copy_run(src: &[f32], dst: &mut [f32], n: usize) {
    let mut i = 0;
    while i < n {
        let s: &[f32; RUN] = src[i..i + RUN].try_into().expect("RUN values");
        let d: &mut [f32; RUN] = (&mut dst[i..i + RUN]).try_into().expect("RUN values");
        *d = *s;
        i += RUN;
    }
}

/// The 16 patch planes of one channel: plane `i·4 + j` holds, for tile t = ty·tw + tx, the
/// padded input at row `2·ty + i`, column `2·tx + j` (from the parity plane `p`: column
/// parity j mod 2, offset ⌊j/2⌋). `d` holds 16 planes of `T + SLACK`.
fn gather_patches(p: &[f32], ww: usize, th: usize, tw: usize, d: &mut [f32]) {
    let t = th * tw;
    for (ij, dp) in d.chunks_exact_mut(t + SLACK).enumerate() {
        let (i, j) = (ij / 4, ij % 4);
        let off = (j % 2) * ww + j / 2;
        for ty in 0..th {
            copy_run(&p[(2 * ty + i) * 2 * ww + off..], &mut dp[ty * tw..], tw);
        }
    }
}

/// `V` rows of one channel (`vc`: 16 rows of T, ξ-major) from its patch planes `d`:
/// `V = Bᵀ d B` per tile, Bᵀ = [[1, 0, −1, 0], [0, 1, 1, 0], [0, −1, 1, 0], [0, 1, 0, −1]],
/// as loops over all T tiles (compiled for AVX2 where the CPU has it).
fn input_transform(d: &[f32], t: usize, vc: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if tensorforge_kernels::simd::avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        unsafe { input_avx2(d, t, vc) };
        return;
    }
    input_body(d, t, vc);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn input_avx2(d: &[f32], t: usize, vc: &mut [f32]) {
    input_body(d, t, vc);
}

#[inline(always)]
fn input_body(d: &[f32], t: usize, vc: &mut [f32]) {
    let dp = |ij: usize| &d[ij * (t + SLACK)..][..t];
    let mut rows = vc.chunks_exact_mut(t);
    // Per patch row a of Bᵀ·d: the four columns, then B over them into V[a·4 .. a·4 + 4].
    for a in 0..4 {
        // Row a of Bᵀ picks patch rows: 0: r0 − r2; 1: r1 + r2; 2: r2 − r1; 3: r1 − r3.
        let (pi, mi, sign) = match a {
            0 => (0, 2, -1.0f32),
            1 => (1, 2, 1.0),
            2 => (2, 1, -1.0),
            _ => (1, 3, -1.0),
        };
        let col = |j: usize| (dp(pi * 4 + j), dp(mi * 4 + j));
        let (c0, c1, c2, c3) = (col(0), col(1), col(2), col(3));
        let (Some(v0), Some(v1), Some(v2), Some(v3)) =
            (rows.next(), rows.next(), rows.next(), rows.next())
        else {
            return;
        };
        for x in 0..t {
            let t0 = c0.0[x] + sign * c0.1[x];
            let t1 = c1.0[x] + sign * c1.1[x];
            let t2 = c2.0[x] + sign * c2.1[x];
            let t3 = c3.0[x] + sign * c3.1[x];
            v0[x] = t0 - t2;
            v1[x] = t1 + t2;
            v2[x] = t2 - t1;
            v3[x] = t1 - t3;
        }
    }
}

/// Output channel `kk`'s plane from `M` (`16 × K × T`): tile (ty, tx)'s 2×2 block
/// `Aᵀ m A + bias`, Aᵀ = [[1, 1, 1, 0], [0, 1, −1, −1]], computed over all T tiles into the
/// four planes of `y` (`4 · T`), then interleaved into the output rows; outputs past P or Q
/// dropped.
#[allow(clippy::too_many_arguments)]
fn output_transform(
    g: &ConvShape,
    m: &[f32],
    kk: usize,
    k: usize,
    t: usize,
    tw: usize,
    bias: f32,
    y: &mut [f32],
    o: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if tensorforge_kernels::simd::avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        unsafe { output_avx2(g, m, kk, k, t, tw, bias, y, o) };
        return;
    }
    output_body(g, m, kk, k, t, tw, bias, y, o);
}

#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn output_avx2(
    g: &ConvShape,
    m: &[f32],
    kk: usize,
    k: usize,
    t: usize,
    tw: usize,
    bias: f32,
    y: &mut [f32],
    o: &mut [f32],
) {
    output_body(g, m, kk, k, t, tw, bias, y, o);
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn output_body(
    g: &ConvShape,
    m: &[f32],
    kk: usize,
    k: usize,
    t: usize,
    tw: usize,
    bias: f32,
    y: &mut [f32],
    o: &mut [f32],
) {
    let mx = |xi: usize| &m[xi * k * t + kk * t..][..t];
    let (y0, rest) = y.split_at_mut(t);
    let (y1, rest) = rest.split_at_mut(t);
    let (y2, y3) = rest.split_at_mut(t);
    let y3 = &mut y3[..t];
    for x in 0..t {
        y0[x] = bias;
        y1[x] = bias;
        y2[x] = bias;
        y3[x] = bias;
    }
    // Column j of Aᵀ·m: s = m0j + m1j + m2j (output row 0), d = m1j − m2j − m3j (row 1);
    // then A over the columns: y·0 = c0 + c1 + c2, y·1 = c1 − c2 − c3.
    for j in 0..4 {
        let (m0, m1, m2, m3) = (mx(j), mx(4 + j), mx(8 + j), mx(12 + j));
        let (wa, wb) = match j {
            0 => (1.0f32, 0.0f32),
            1 => (1.0, 1.0),
            2 => (1.0, -1.0),
            _ => (0.0, -1.0),
        };
        for x in 0..t {
            let s = m0[x] + m1[x] + m2[x];
            let d = m1[x] - m2[x] - m3[x];
            y0[x] += wa * s;
            y1[x] += wb * s;
            y2[x] += wa * d;
            y3[x] += wb * d;
        }
    }
    let q = g.q;
    let ys = [&*y0, &*y1, &*y2, &*y3];
    for (r, row) in o.chunks_exact_mut(q).enumerate() {
        let (ty, i) = (r / 2, r % 2);
        let (a, b) = (&ys[2 * i][ty * tw..][..tw], &ys[2 * i + 1][ty * tw..][..tw]);
        let mut pairs = row.chunks_exact_mut(2);
        for (p, (&va, &vb)) in (&mut pairs).zip(a.iter().zip(b)) {
            p[0] = va;
            p[1] = vb;
        }
        if let Some(last) = pairs.into_remainder().first_mut() {
            *last = a[q / 2];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::conv::Post;
    use super::*;
    use tensorforge_kernels::clamp::Clamp;

    /// The definition in f64 (zero padding, stride 1).
    fn reference(g: &ConvShape, x: &[f32], w: &[f32], b: &[f32]) -> Vec<f64> {
        let mut out = vec![0f64; g.n * g.k * g.p * g.q];
        for n in 0..g.n {
            for k in 0..g.k {
                for p in 0..g.p {
                    for q in 0..g.q {
                        let mut acc = b[k] as f64;
                        for c in 0..g.c {
                            for r in 0..3 {
                                for s in 0..3 {
                                    let ih = (p + r) as isize - g.pad[0] as isize;
                                    let iw = (q + s) as isize - g.pad[1] as isize;
                                    if ih < 0 || iw < 0 || ih >= g.h as isize || iw >= g.w as isize
                                    {
                                        continue;
                                    }
                                    acc += x
                                        [((n * g.c + c) * g.h + ih as usize) * g.w + iw as usize]
                                        as f64
                                        * w[((k * g.c + c) * 3 + r) * 3 + s] as f64;
                                }
                            }
                        }
                        out[((n * g.k + k) * g.p + p) * g.q + q] = acc;
                    }
                }
            }
        }
        out
    }

    fn shape(
        n: usize,
        c: usize,
        h: usize,
        w: usize,
        k: usize,
        pad: usize,
        extra: usize,
    ) -> ConvShape {
        // Output = input + 2·pad − 2, minus `extra` rows/columns of bottom/right padding
        // left out (odd output sizes and windows that end inside the input).
        ConvShape {
            n,
            c,
            h,
            w,
            k,
            r: 3,
            s: 3,
            p: h + 2 * pad - 2 - extra,
            q: w + 2 * pad - 2 - extra,
            stride: [1, 1],
            pad: [pad, pad],
            dil: [1, 1],
            group: 1,
        }
    }

    #[test]
    fn matches_the_definition_on_even_odd_and_unpadded_geometries() {
        let Some(kern) = Kernel::detect() else {
            return; // no packed kernel: the convolution module's other paths run (tested there)
        };
        let cases = [
            shape(1, 16, 28, 28, 16, 1, 0), // ResNet's 3×3: even output, 14×14 tiles
            shape(2, 8, 9, 11, 12, 1, 0),   // odd output: the last tile row and column half used
            shape(1, 9, 10, 70, 8, 0, 0),   // no padding, a row of 34 tiles (three runs of 16)
            shape(1, 8, 7, 8, 8, 1, 1),     // bottom/right windows inside the input
            shape(1, 12, 6, 5, 20, 2, 0),   // padding of 2: patches wholly in the padding
        ];
        for (i, g) in cases.iter().enumerate() {
            let x = tensorforge_core::rng::SplitMix64::f32_pm1_vec(i as u64, g.n * g.c * g.h * g.w);
            let w = tensorforge_core::rng::SplitMix64::f32_pm1_vec(50 + i as u64, g.k * g.c * 9);
            let b = tensorforge_core::rng::SplitMix64::f32_pm1_vec(90 + i as u64, g.k);
            let want = reference(g, &x, &w, &b);
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
            // At two threads, plus an addend (a residual) and clamped to bounds inside the
            // values' range (each output plane as the output transform writes it).
            let d = tensorforge_core::rng::SplitMix64::f32_pm1_vec(70 + i as u64, want.len());
            let bounds = Post {
                addend: Some(&d),
                clamp: Clamp {
                    lo: (-0.1 * scale) as f32,
                    hi: (0.2 * scale) as f32,
                    relu: false,
                },
            };
            for (threads, post) in [(1, Post::NONE), (2, bounds)] {
                let clamp = post.clamp;
                let cache = FilterCache::default();
                let mut out = vec![f32::NAN; g.n * g.k * g.p * g.q];
                let mut scratch = vec![f32::NAN; scratch_len(g)];
                crate::exec::with_threads(threads, || {
                    conv(
                        kern,
                        &cache,
                        7,
                        g,
                        &x,
                        &w,
                        Some(&b),
                        post,
                        &mut out,
                        &mut scratch,
                    )
                })
                .unwrap()
                .unwrap();
                let (mut low, mut high) = (false, false);
                for (j, (a, e)) in out.iter().zip(&want).enumerate() {
                    let e = e + post.addend.map_or(0.0, |d| d[j] as f64);
                    low |= e < clamp.lo as f64;
                    high |= e > clamp.hi as f64;
                    let e = e.max(clamp.lo as f64).min(clamp.hi as f64);
                    assert!(
                        (*a as f64 - e).abs() <= 1e-5 * (scale + 1.0),
                        "case {i} {threads}T [{j}]: {a} vs {e}"
                    );
                }
                assert!(
                    clamp.is_none() || (low && high),
                    "case {i}: both bounds reached"
                );
            }
        }
    }

    #[test]
    fn the_convolution_entry_point_takes_this_path_where_it_applies() {
        let Some(kern) = Kernel::detect() else {
            return;
        };
        let g = shape(1, 32, 28, 28, 32, 1, 0); // 32·32·9·28·28 = 7.2 Mi multiply-adds
        assert!(applies(&g, Some(kern)));
        // Too few channels, strided, grouped: the direct paths.
        assert!(!applies(&shape(1, 16, 56, 56, 16, 1, 0), Some(kern)));
        assert!(!applies(
            &ConvShape {
                stride: [2, 2],
                p: 14,
                q: 14,
                ..g
            },
            Some(kern)
        ));
        assert!(!applies(&ConvShape { group: 2, ..g }, Some(kern)));
        assert!(!applies(&g, None));
        let x = tensorforge_core::rng::SplitMix64::f32_pm1_vec(1, 32 * 28 * 28);
        let w = tensorforge_core::rng::SplitMix64::f32_pm1_vec(2, 32 * 32 * 9);
        let b = tensorforge_core::rng::SplitMix64::f32_pm1_vec(3, 32);
        let want = reference(&g, &x, &w, &b);
        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
        let cache = FilterCache::default();
        let mut out = vec![f32::NAN; 32 * 28 * 28];
        let mut scratch = vec![]; // grown by the entry point
        super::super::conv::conv2d(
            &g,
            &x,
            &w,
            Some(&b),
            &mut out,
            &mut scratch,
            &cache,
            4,
            Post::NONE,
        )
        .unwrap();
        assert!(scratch.len() >= scratch_len(&g));
        for (a, e) in out.iter().zip(&want) {
            assert!((*a as f64 - e).abs() <= 1e-5 * scale, "{a} vs {e}");
        }
        // The filters were kept under node 4.
        assert!(cache.0.lock().unwrap().contains_key(&(4, Form::Winograd)));
    }

    #[test]
    fn filters_are_transformed_again_for_new_values() {
        let Some(kern) = Kernel::detect() else {
            return;
        };
        let g = shape(1, 8, 6, 6, 8, 1, 0);
        let x = vec![1f32; 8 * 36];
        let mut w = vec![0f32; 8 * 8 * 9];
        let cache = FilterCache::default();
        let mut scratch = vec![0f32; scratch_len(&g)];
        let mut run = |w: &[f32]| {
            let mut out = vec![0f32; 8 * 36];
            conv(
                kern,
                &cache,
                0,
                &g,
                &x,
                w,
                None,
                Post::NONE,
                &mut out,
                &mut scratch,
            )
            .unwrap();
            out
        };
        assert!(run(&w).iter().all(|&v| v == 0.0));
        // Every filter tap 1 (the sampled positions change): a centre output sums 8 channels
        // × 9 taps of ones = 72.
        w.fill(1.0);
        assert_eq!(run(&w)[6 + 1], 72.0);
    }

    #[test]
    fn direct_filters_are_packed_once_per_weight() {
        let Some(kern) = Kernel::detect() else {
            return;
        };
        // 8 channels (below Winograd's 32): the direct path, its packed filters kept under
        // node 3, then packed again when the same buffer holds new values.
        let g = shape(2, 8, 10, 10, 12, 1, 1);
        assert!(!applies(&g, Some(kern)));
        let x = tensorforge_core::rng::SplitMix64::f32_pm1_vec(4, 2 * 8 * 100);
        let mut w = tensorforge_core::rng::SplitMix64::f32_pm1_vec(5, 12 * 8 * 9);
        let b = tensorforge_core::rng::SplitMix64::f32_pm1_vec(6, 12);
        let cache = FilterCache::default();
        let mut scratch = vec![];
        for round in 0..3 {
            if round == 2 {
                for v in w.iter_mut() {
                    *v = -*v * 0.5;
                }
            }
            let want = reference(&g, &x, &w, &b);
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
            let mut out = vec![f32::NAN; want.len()];
            super::super::conv::conv2d(
                &g,
                &x,
                &w,
                Some(&b),
                &mut out,
                &mut scratch,
                &cache,
                3,
                Post::NONE,
            )
            .unwrap();
            for (a, e) in out.iter().zip(&want) {
                assert!(
                    (*a as f64 - e).abs() <= 1e-5 * scale,
                    "round {round}: {a} vs {e}"
                );
            }
            assert!(cache.0.lock().unwrap().contains_key(&(3, Form::Direct)));
        }
    }
}

/// The measurement behind [`MIN_MACS`] and [`MIN_CHANNELS`]: Winograd against the direct
/// path on square 3×3 convolutions, best of 30 each, printed (no assertion on time). Run
/// `RAYON_NUM_THREADS=1 cargo test --release -p tensorforge-graph --lib winograd_vs_direct
/// -- --ignored --nocapture`.
#[cfg(test)]
mod bench {
    use super::super::conv::Post;
    use super::*;

    #[test]
    #[ignore]
    fn winograd_vs_direct() {
        let Some(kern) = Kernel::detect() else {
            return;
        };
        for (c, hw) in [
            (16, 56),
            (16, 28),
            (32, 28),
            (32, 14),
            (64, 28),
            (64, 56),
            (128, 14),
            (256, 7),
        ] {
            let g = ConvShape {
                n: 1,
                c,
                h: hw,
                w: hw,
                k: c,
                r: 3,
                s: 3,
                p: hw,
                q: hw,
                stride: [1, 1],
                pad: [1, 1],
                dil: [1, 1],
                group: 1,
            };
            let x = tensorforge_core::rng::SplitMix64::f32_pm1_vec(1, c * hw * hw);
            let w = tensorforge_core::rng::SplitMix64::f32_pm1_vec(2, c * c * 9);
            let mut out = vec![0f32; c * hw * hw];
            let cache = FilterCache::default();
            let mut sw = vec![0f32; scratch_len(&g)];
            let mut sd = Vec::new();
            let mut best = [f64::MAX; 2];
            for _ in 0..30 {
                let t = std::time::Instant::now();
                conv(
                    kern,
                    &cache,
                    0,
                    &g,
                    &x,
                    &w,
                    None,
                    Post::NONE,
                    &mut out,
                    &mut sw,
                )
                .unwrap();
                best[0] = best[0].min(t.elapsed().as_secs_f64());
                let t = std::time::Instant::now();
                super::super::conv::conv2d_direct(&g, &x, &w, &mut out, &mut sd).unwrap();
                best[1] = best[1].min(t.elapsed().as_secs_f64());
            }
            eprintln!(
                "{c} channels {hw}x{hw}: Winograd {:.1} us, direct {:.1} us, direct / Winograd {:.2}",
                best[0] * 1e6,
                best[1] * 1e6,
                best[1] / best[0]
            );
        }
    }
}
