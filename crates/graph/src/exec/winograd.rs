//! 3×3, stride-1, undilated, ungrouped convolutions by Winograd's minimal filtering
//! F(2×2, 3×3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016):
//! each 2×2 block of outputs ("tile") comes from a 4×4 input patch with 16 multiplies per
//! channel pair instead of 36, so the products shrink 2.25× for the cost of three transforms.
//!
//! Per image: the input transform `V = Bᵀ d B` gives 16 matrices `V[ξ]` of `C × T` (T tiles),
//! each tile's 4×4 patch `d` read in registers (module `lanes`: up to 16 tiles of a tile row
//! at once, the patch columns as the even and odd lanes of masked loads, the padding never
//! written); the filter transform `U = G g Gᵀ` gives 16 matrices `U[ξ]` of `K × C`, packed
//! for the Kernels crate's `sgemm` once per weight buffer and kept ([`FilterCache`]); 16
//! GEMMs `M[ξ] = U[ξ] · V[ξ]` (split across the workers); the output transform `Y = Aᵀ M A`
//! writes each tile's 2×2 outputs plus the bias, its two columns interleaved in registers,
//! dropping those past an odd output edge.
//!
//! Numerics: the transforms' coefficients are 0, ±1 and ±½, so the result differs from the
//! direct sum by a few rounding errors of the transformed values (tested against the f64
//! definition to 1e-5 of the output's scale). Non-finite inputs can give NaN where the direct
//! sum gives ±∞ (the transforms subtract transformed values).
//! Left out: larger tiles (F(4×4, 3×3) saves more multiplies but loses accuracy), strided,
//! dilated or grouped convolutions, and CPUs without the packed kernel (they keep the
//! convolution module's other paths).

use super::conv::ConvShape;
#[cfg(target_arch = "x86_64")]
use super::lanes::{Avx2, Avx512, Isa};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tensorforge_kernels::sgemm::{Kernel, Right};
use tensorforge_kernels::vmath::Level;

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

/// Scratch values for one image: `V` (`C · 16 · T`, channel-major) and `M` (`16 · K · T`).
pub(crate) fn scratch_len(g: &ConvShape) -> usize {
    let (th, tw) = tiles(g);
    16 * (g.c + g.k) * th * tw
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
    if scratch.len() < scratch_len(g) || w.len() != k * c * 9 {
        return Err(format!("winograd buffers do not match the shapes {g:?}"));
    }
    let filters = cache.get(kern, node, g, w)?;
    let pa = kern.packed_a_len(k, c).unwrap_or(0);
    let level = kern.level();
    let (v, m) = scratch.split_at_mut(16 * c * t);
    let m = &mut m[..16 * k * t];
    let threads = rayon::current_num_threads();
    let par = threads > 1;
    let hw = g.h * g.w;
    for img in 0..g.n {
        let xin = &x[img * c * hw..][..c * hw];
        let o = &mut out[img * k * g.p * g.q..][..k * g.p * g.q];
        // 1. Each channel's 16 rows of V, channels dealt to the workers in contiguous runs.
        let chunk = c.div_ceil(if par { threads } else { 1 });
        v.par_chunks_mut(chunk * 16 * t)
            .enumerate()
            .for_each(|(wi, vb)| {
                for (j, vc) in vb.chunks_mut(16 * t).enumerate() {
                    let ci = wi * chunk + j;
                    input_tiles(level, g, &xin[ci * hw..][..hw], tw, (0, t), vc, t);
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
            .enumerate()
            .for_each(|(wi, ob)| {
                for (j, ok) in ob.chunks_mut(pq).enumerate() {
                    let kk = wi * kchunk + j;
                    let b = bias.map_or(0.0, |b| b[kk]);
                    output_tiles(level, g, m, kk, t, tw, (0, t), b, ok);
                    post.part((img * k + kk) * pq, pq).apply(ok);
                }
            });
    }
    Ok(())
}

/// The tiles `ta..tb` of row-major tile order (tile `ty·tw + tx`) as runs within a tile
/// row: `(ty, tx0, n)` for tiles `tx0 .. tx0 + n`, `n ≤ v`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn chunks(
    tw: usize,
    ta: usize,
    tb: usize,
    v: usize,
) -> impl Iterator<Item = (usize, usize, usize)> {
    let rows = if ta < tb {
        ta / tw..(tb - 1) / tw + 1
    } else {
        0..0
    };
    rows.flat_map(move |ty| {
        let x0 = ta.saturating_sub(ty * tw);
        let x1 = (tb - ty * tw).min(tw);
        (x0..x1)
            .step_by(v)
            .map(move |tx| (ty, tx, (x1 - tx).min(v)))
    })
}

/// Channel plane `xc`'s rows of `V` for the tiles `ta..tb`: `V[ξ]` of tile `t` at
/// `vc[ξ·ld + t − ta]`, `V = Bᵀ d B` with Bᵀ = [[1, 0, −1, 0], [0, 1, 1, 0], [0, −1, 1, 0],
/// [0, 1, 0, −1]] and `d` the tile's 4 × 4 patch of the zero-padded input. The patches of
/// up to `V` tiles of a tile row are read in registers: per patch row, the even and odd
/// columns of two masked loads (patch columns 0 and 1), and of two loads two columns on
/// (columns 2 and 3); the masks leave out columns outside the plane, and rows outside it
/// are zeros, so the padding is never written anywhere.
fn input_tiles(
    level: Level,
    g: &ConvShape,
    xc: &[f32],
    tw: usize,
    (ta, tb): (usize, usize),
    vc: &mut [f32],
    ld: usize,
) {
    assert!(
        xc.len() == g.h * g.w && (ta == tb || vc.len() >= 15 * ld + (tb - ta)),
        "winograd input transform: buffers do not match {g:?}"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `level` is the packed kernel's, which the CPU supports (AVX-512F, or AVX2
    // and FMA); loads are masked to the plane's columns of rows inside it, stores to tiles
    // `ta..tb`, within `vc` (asserted above).
    unsafe {
        if level == Level::Avx512 {
            input_avx512(g, xc, tw, (ta, tb), vc, ld)
        } else {
            input_avx2(g, xc, tw, (ta, tb), vc, ld)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (level, tw, vc, ld);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn input_avx512(
    g: &ConvShape,
    xc: &[f32],
    tw: usize,
    span: (usize, usize),
    vc: &mut [f32],
    ld: usize,
) {
    input_body::<Avx512>(g, xc, tw, span, vc, ld)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn input_avx2(
    g: &ConvShape,
    xc: &[f32],
    tw: usize,
    span: (usize, usize),
    vc: &mut [f32],
    ld: usize,
) {
    input_body::<Avx2>(g, xc, tw, span, vc, ld)
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn input_body<I: Isa>(
    g: &ConvShape,
    xc: &[f32],
    tw: usize,
    (ta, tb): (usize, usize),
    vc: &mut [f32],
    ld: usize,
) {
    let (h, w) = (g.h as isize, g.w as isize);
    let (pt, pl) = (g.pad[0] as isize, g.pad[1] as isize);
    let v = I::V as isize;
    let zero = I::splat(0.0);
    let out = vc.as_mut_ptr();
    for (ty, tx0, n) in chunks(tw, ta, tb, I::V) {
        let c0 = 2 * tx0 as isize - pl;
        let masks = [
            I::inside(c0, w),
            I::inside(c0 + v, w),
            I::inside(c0 + 2, w),
            I::inside(c0 + 2 + v, w),
        ];
        // d[i][j]: patch row i, column j, for each tile of the chunk.
        let mut d = [[zero; 4]; 4];
        for (i, di) in d.iter_mut().enumerate() {
            let ih = (2 * ty + i) as isize - pt;
            if ih < 0 || ih >= h {
                continue;
            }
            let row = xc.as_ptr().offset(ih * w);
            let at = |c: isize| row.wrapping_offset(c);
            let (lo, hi) = (I::load(masks[0], at(c0)), I::load(masks[1], at(c0 + v)));
            let (lo2, hi2) = (
                I::load(masks[2], at(c0 + 2)),
                I::load(masks[3], at(c0 + 2 + v)),
            );
            di[0] = I::pick(lo, hi, false);
            di[1] = I::pick(lo, hi, true);
            di[2] = I::pick(lo2, hi2, false);
            di[3] = I::pick(lo2, hi2, true);
        }
        let keep = I::keep(n);
        let at = out.add(ty * tw + tx0 - ta);
        for a in 0..4 {
            // Row a of Bᵀ·d (patch rows 0 − 2, 1 + 2, 2 − 1, 1 − 3), then B over its columns.
            let mut r = [zero; 4];
            for (j, rj) in r.iter_mut().enumerate() {
                *rj = match a {
                    0 => I::sub(d[0][j], d[2][j]),
                    1 => I::add(d[1][j], d[2][j]),
                    2 => I::sub(d[2][j], d[1][j]),
                    _ => I::sub(d[1][j], d[3][j]),
                };
            }
            let row = at.add(4 * a * ld);
            I::store(row, I::sub(r[0], r[2]), keep);
            I::store(row.add(ld), I::add(r[1], r[2]), keep);
            I::store(row.add(2 * ld), I::sub(r[2], r[1]), keep);
            I::store(row.add(3 * ld), I::sub(r[1], r[3]), keep);
        }
    }
}

/// Output channel `kk`'s plane `o` (`P × Q`) at the tiles `ta..tb` from `M` (`16 × K × T`,
/// `M[ξ]`'s row `kk` at `m[(ξ·K + kk)·T ..]`): tile (ty, tx)'s 2×2 block `Aᵀ m A + bias`,
/// Aᵀ = [[1, 1, 1, 0], [0, 1, −1, −1]], for up to `V` tiles at once, its two columns
/// interleaved in registers into the output rows; outputs past P or Q are not stored.
#[allow(clippy::too_many_arguments)]
fn output_tiles(
    level: Level,
    g: &ConvShape,
    m: &[f32],
    kk: usize,
    t: usize,
    tw: usize,
    (ta, tb): (usize, usize),
    bias: f32,
    o: &mut [f32],
) {
    assert!(
        m.len() >= 16 * g.k * t && kk < g.k && tb <= t && o.len() == g.p * g.q,
        "winograd output transform: buffers do not match {g:?}"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `level` is the packed kernel's, which the CPU supports; loads are masked to
    // the tiles of `M`'s rows (asserted above), stores to the outputs inside the plane.
    unsafe {
        if level == Level::Avx512 {
            output_avx512(g, m, kk, t, tw, (ta, tb), bias, o)
        } else {
            output_avx2(g, m, kk, t, tw, (ta, tb), bias, o)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (level, m, kk, t, tw, ta, tb, bias, o);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn output_avx512(
    g: &ConvShape,
    m: &[f32],
    kk: usize,
    t: usize,
    tw: usize,
    span: (usize, usize),
    bias: f32,
    o: &mut [f32],
) {
    output_body::<Avx512>(g, m, kk, t, tw, span, bias, o)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn output_avx2(
    g: &ConvShape,
    m: &[f32],
    kk: usize,
    t: usize,
    tw: usize,
    span: (usize, usize),
    bias: f32,
    o: &mut [f32],
) {
    output_body::<Avx2>(g, m, kk, t, tw, span, bias, o)
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn output_body<I: Isa>(
    g: &ConvShape,
    m: &[f32],
    kk: usize,
    t: usize,
    tw: usize,
    (ta, tb): (usize, usize),
    bias: f32,
    o: &mut [f32],
) {
    let b = I::splat(bias);
    let zero = I::splat(0.0);
    let kt = g.k * t;
    let (p, q) = (g.p, g.q);
    let src = m.as_ptr().add(kk * t);
    let dst = o.as_mut_ptr();
    for (ty, tx0, n) in chunks(tw, ta, tb, I::V) {
        let mask = I::inside(0, n as isize);
        let at = src.add(ty * tw + tx0);
        let mut mx = [zero; 16];
        for (xi, v) in mx.iter_mut().enumerate() {
            *v = I::load(mask, at.add(xi * kt));
        }
        // Column j of Aᵀ·m: s = m0j + m1j + m2j (output row 0), d = m1j − m2j − m3j (row 1);
        // then A over the columns: y·0 = bias + c0 + c1 + c2, y·1 = bias + c1 − c2 − c3.
        let mut s = [zero; 4];
        let mut d = [zero; 4];
        for j in 0..4 {
            s[j] = I::add(I::add(mx[j], mx[4 + j]), mx[8 + j]);
            d[j] = I::sub(I::sub(mx[4 + j], mx[8 + j]), mx[12 + j]);
        }
        // Outputs of a row from column 2·tx0: two per tile, fewer at an odd right edge.
        let cols = (q - 2 * tx0).min(2 * n);
        let (k0, k1) = (I::keep(cols.min(I::V)), I::keep(cols.saturating_sub(I::V)));
        for (r, c) in [(2 * ty, &s), (2 * ty + 1, &d)] {
            if r >= p {
                break;
            }
            let y0 = I::add(I::add(I::add(b, c[0]), c[1]), c[2]);
            let y1 = I::sub(I::sub(I::add(b, c[1]), c[2]), c[3]);
            let (lo, hi) = I::zip(y0, y1);
            let row = dst.add(r * q + 2 * tx0);
            I::store(row, lo, k0);
            if cols > I::V {
                I::store(row.add(I::V), hi, k1);
            }
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
    fn tile_runs_cover_a_range_row_by_row() {
        // Tiles 3..17 of rows of 7 in runs of at most 4: row 0 has tiles 3..7 (tx 3..7),
        // row 1 tiles 7..14 (tx 0..4, 4..7), row 2 tiles 14..17 (tx 0..3).
        let runs: Vec<_> = chunks(7, 3, 17, 4).collect();
        assert_eq!(runs, [(0, 3, 4), (1, 0, 4), (1, 4, 3), (2, 0, 3)]);
        assert_eq!(chunks(7, 5, 5, 4).count(), 0);
        // A whole plane of 14 × 14 tiles in 16 lanes: one run of 14 per tile row.
        assert!(chunks(14, 0, 196, 16).eq((0..14).map(|ty| (ty, 0, 14))));
    }

    #[test]
    fn matches_the_definition_on_even_odd_and_unpadded_geometries() {
        // Every packed kernel the CPU has (16 lanes and 8); none: the convolution module's
        // other paths run (tested there).
        for kern in [Level::Avx512, Level::Avx2]
            .into_iter()
            .filter_map(Kernel::for_level)
        {
            matches_the_definition_with(kern);
        }
    }

    fn matches_the_definition_with(kern: Kernel) {
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
                        "{:?} case {i} {threads}T [{j}]: {a} vs {e}",
                        kern.level()
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
