//! Scaled dot-product attention in one kernel (`Op::FusedAttention`): for each batch matrix
//! (batch × heads) and each block of [`BLOCK_ROWS`] query rows, the keys are streamed in
//! blocks of [`BLOCK_KEYS`]: the block's scores `scale · Q_blk · Kt_blk (+ mask)`, then the
//! online softmax (Milakov & Gimelshein 2018; FlashAttention's form, Dao et al. 2022):
//! a running row max `m` and sum `l`, the accumulated output rescaled by `e^(m_old − m_new)`
//! whenever the max grows, and `O += P_blk · V_blk`; at the end `O / l`. Only one block of
//! scores exists at a time per worker (`BLOCK_ROWS × BLOCK_KEYS` values), never the
//! `Sq × Sk` matrix. Query blocks of all batch matrices run in parallel on the pool.
//!
//! Numerics: products by faer in f32, e^x by the Kernels crate's `vmath`; the result differs
//! from softmax-then-product in the last bits (the sum is accumulated block by block, and
//! each block's values are scaled by `e^(m_blk − m)` later rather than computed against the
//! final max). A row whose scores are all −∞ has no finite max: it gives NaN, as the softmax
//! does, or 0 with `zero_masked_rows`. A NaN score makes its row NaN (through the sum).
//! A key block that the mask hides (−∞) from every row of a query block is skipped whole,
//! its products included, when q and those keys are finite: a causal mask skips about half.
//! Left out: dropout, and key/value heads shared across query heads (they arrive expanded).

use crate::gemm::Operand;
use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

/// Query rows per block (one task of the pool).
pub(crate) const BLOCK_ROWS: usize = 64;
/// Keys per block: the block's scores, `BLOCK_ROWS × BLOCK_KEYS` f32 (64 KiB), stay in L2.
pub(crate) const BLOCK_KEYS: usize = 256;

/// The mask as the kernel reads it: element (batch `b`, row `i`, key `j`) at
/// `data[b_off[b] + i · rs + j · cs]` (strides 0 along broadcast axes).
pub(crate) struct Mask<'a> {
    pub data: &'a [f32],
    pub b_off: Vec<usize>,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> Mask<'a> {
    /// The mask `data` of shape `shape`, broadcast to `[lead..., sq, sk]` (NumPy rules, right
    /// aligned; the caller checked that it broadcasts).
    pub(crate) fn broadcast(data: &'a [f32], shape: &[usize], lead: &[usize]) -> Self {
        // Strides against the scores' rank (`broadcast_strides` reads only the rank of its
        // target), then one offset per batch matrix, in order.
        let mut full = lead.to_vec();
        full.extend([1, 1]);
        let st = super::program::broadcast_strides(shape, &full);
        let r = st.len();
        let mut b_off = Vec::with_capacity(lead.iter().product());
        super::program::for_each_index(lead, |idx| {
            b_off.push(idx.iter().zip(&st).map(|(i, s)| i * s).sum());
        });
        Mask {
            data,
            b_off,
            rs: st[r - 2],
            cs: st[r - 1],
        }
    }
}

/// `out = softmax(scale · q·kt + mask) · v` per batch matrix, written row-major
/// `[batch, sq, dv]`. `q` is `[batch, sq, d]`, `kt` `[batch, d, sk]`, `v` `[batch, sk, dv]`
/// (any strides [`Operand`] allows).
pub(crate) fn attention(
    q: Operand,
    kt: Operand,
    v: Operand,
    mask: Option<&Mask>,
    scale: f32,
    zero_masked_rows: bool,
    out: &mut [f32],
) -> Result<(), String> {
    let (batch, sq, d) = q.dims();
    let (kb, kd, sk) = kt.dims();
    let (vb, vk, dv) = v.dims();
    if kb != batch || vb != batch || kd != d || vk != sk {
        return Err(format!(
            "attention operands disagree: q {:?}, kt {:?}, v {:?}",
            q.dims(),
            kt.dims(),
            v.dims()
        ));
    }
    if out.len() != batch * sq * dv {
        return Err(format!(
            "attention output has {} values, expected {batch} x {sq} x {dv}",
            out.len()
        ));
    }
    if out.is_empty() {
        return Ok(());
    }
    if sk == 0 {
        // No keys: the weighted sum over none is 0, as `MatMul(P, v)` with K = 0 gives.
        out.fill(0.0);
        return Ok(());
    }
    let qblocks = sq.div_ceil(BLOCK_ROWS);
    let kblocks = sk.div_ceil(BLOCK_KEYS);
    // Once per call, not per query block: which key blocks hold only finite keys (per batch
    // matrix), and which (query block, key block) pairs the mask hides entirely (per
    // distinct mask matrix: a mask broadcast over heads is read once, not once per head).
    let keys_finite: Vec<bool> = (0..batch * kblocks)
        .map(|t| {
            let (b, kb) = (t / kblocks, t % kblocks);
            let j0 = kb * BLOCK_KEYS;
            all_finite(kt.mat(b).subcols(j0, BLOCK_KEYS.min(sk - j0)))
        })
        .collect();
    let hidden: Option<(Vec<usize>, Vec<bool>)> = mask.map(|mk| {
        let mut offs: Vec<usize> = mk.b_off.clone();
        offs.sort_unstable();
        offs.dedup();
        let mut flags = Vec::with_capacity(offs.len() * qblocks * kblocks);
        for &off in &offs {
            for qb in 0..qblocks {
                let r0 = qb * BLOCK_ROWS;
                let rows = BLOCK_ROWS.min(sq - r0);
                for kb in 0..kblocks {
                    let j0 = kb * BLOCK_KEYS;
                    let cols = BLOCK_KEYS.min(sk - j0);
                    flags.push((0..rows).all(|i| {
                        let base = off + (r0 + i) * mk.rs + j0 * mk.cs;
                        (0..cols).all(|j| mk.data[base + j * mk.cs] == f32::NEG_INFINITY)
                    }));
                }
            }
        }
        (offs, flags)
    });
    let task = |(t, o): (usize, &mut [f32])| {
        let (b, qb) = (t / qblocks, t % qblocks);
        let r0 = qb * BLOCK_ROWS;
        let rows = o.len() / dv.max(1);
        let mut s = vec![0f32; rows * BLOCK_KEYS];
        let mut e = vec![0f32; BLOCK_KEYS];
        let mut m = vec![f32::NEG_INFINITY; rows];
        let mut l = vec![0f32; rows];
        o.fill(0.0);
        let qm = q.mat(b).subrows(r0, rows);
        let (km, vm) = (kt.mat(b), v.mat(b));
        let q_finite = all_finite(qm);
        let mut j0 = 0;
        while j0 < sk {
            let cols = BLOCK_KEYS.min(sk - j0);
            // A key block the mask hides from every row of this query block adds nothing
            // (e^(−∞) = 0): skipped, products included (a causal mask hides half the
            // blocks). Not when q or the block's keys hold NaN or ±∞: their scores would
            // make rows NaN, as the softmax's would be.
            if let (Some(mk), Some((offs, flags))) = (mask, &hidden) {
                let kb = j0 / BLOCK_KEYS;
                let m_at = offs.binary_search(&mk.b_off[b]).unwrap_or(0);
                if flags[(m_at * qblocks + qb) * kblocks + kb]
                    && q_finite
                    && keys_finite[b * kblocks + kb]
                {
                    j0 += cols;
                    continue;
                }
            }
            let sb = &mut s[..rows * cols];
            matmul(
                MatMut::from_row_major_slice_mut(sb, rows, cols),
                Accum::Replace,
                qm,
                km.subcols(j0, cols),
                scale,
                Par::Seq,
            );
            for (i, row) in sb.chunks_exact_mut(cols).enumerate() {
                if let Some(mk) = mask {
                    let base = mk.b_off[b] + (r0 + i) * mk.rs + j0 * mk.cs;
                    if mk.cs == 1 {
                        for (x, m) in row.iter_mut().zip(&mk.data[base..base + cols]) {
                            *x += m;
                        }
                    } else {
                        for (j, x) in row.iter_mut().enumerate() {
                            *x += mk.data[base + j * mk.cs];
                        }
                    }
                }
                // NaN scores are not seen by the max; they reach the sum through e^(x − m)
                // and make the row NaN, as the softmax does.
                let m_new = m[i].max(row_max(row));
                if m_new == f32::NEG_INFINITY {
                    // Every score so far masked: nothing to add yet.
                    row.fill(0.0);
                    continue;
                }
                let e = &mut e[..cols];
                for (d, x) in e.iter_mut().zip(row.iter()) {
                    *d = x - m_new;
                }
                tensorforge_kernels::vmath::exp(e, row);
                let alpha = if m[i] == f32::NEG_INFINITY {
                    0.0
                } else {
                    (m[i] - m_new).exp()
                };
                l[i] = l[i] * alpha + row_sum(row);
                if alpha != 1.0 {
                    for y in &mut o[i * dv..(i + 1) * dv] {
                        *y *= alpha;
                    }
                }
                m[i] = m_new;
            }
            matmul(
                MatMut::from_row_major_slice_mut(o, rows, dv),
                Accum::Add,
                MatRef::from_row_major_slice(sb, rows, cols),
                vm.subrows(j0, cols),
                1.0f32,
                Par::Seq,
            );
            j0 += cols;
        }
        for (i, y) in o.chunks_exact_mut(dv.max(1)).enumerate() {
            if m[i] == f32::NEG_INFINITY || l[i] == 0.0 {
                y.fill(if zero_masked_rows { 0.0 } else { f32::NAN });
            } else {
                let inv = 1.0 / l[i];
                for x in y.iter_mut() {
                    *x *= inv;
                }
            }
        }
    };
    // Tasks: (batch matrix, query block), each writing its own rows of `out`, ordered query
    // block first: the batch matrices (heads) of one query block run one after another, so
    // a mask they share is read from memory once and from cache for the other heads.
    let mut chunks: Vec<(usize, &mut [f32])> = out
        .chunks_mut(sq * dv)
        .flat_map(|ob| ob.chunks_mut(BLOCK_ROWS * dv))
        .enumerate()
        .collect();
    chunks.sort_by_key(|&(t, _)| (t % qblocks, t / qblocks));
    if rayon::current_num_threads() > 1 && chunks.len() > 1 {
        chunks.into_par_iter().for_each(task);
    } else {
        chunks.into_iter().for_each(task);
    }
    Ok(())
}

/// True when every element of `m` is finite.
fn all_finite(m: MatRef<'_, f32>) -> bool {
    (0..m.ncols()).all(|j| (0..m.nrows()).all(|i| m[(i, j)].is_finite()))
}

/// The largest value of `x` (−∞ when empty; NaN ignored), in 16 independent lanes so
/// that it vectorizes.
fn row_max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    acc.iter().fold(tail, |a, &v| a.max(v))
}

/// The sum of `x`, in 16 independent lanes so that it vectorizes.
fn row_sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    let tail: f32 = chunks.remainder().iter().sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    /// softmax(scale · q·kᵀ + mask) · v in f64, row-major, one batch matrix.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        mask: Option<&[f32]>,
        sq: usize,
        sk: usize,
        d: usize,
        dv: usize,
        scale: f64,
    ) -> Vec<f64> {
        let mut out = vec![0f64; sq * dv];
        for i in 0..sq {
            let s: Vec<f64> = (0..sk)
                .map(|j| {
                    let dot: f64 = (0..d)
                        .map(|t| q[i * d + t] as f64 * k[j * d + t] as f64)
                        .sum();
                    dot * scale + mask.map_or(0.0, |m| m[i * sk + j] as f64)
                })
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
            let z: f64 = e.iter().sum();
            for c in 0..dv {
                out[i * dv + c] = (0..sk).map(|j| e[j] / z * v[j * dv + c] as f64).sum();
            }
        }
        out
    }

    #[test]
    fn streamed_blocks_match_the_definition() {
        // Sizes that leave partial query and key blocks (70 = 64 + 6 rows, 300 = 256 + 44
        // keys), a mask of −∞ on the first 100 keys of some rows (so the running max grows
        // across blocks), and K read transposed in place, as the scores' MatMul reads it.
        let (sq, sk, d, dv) = (70, 300, 16, 24);
        let q = tensorforge_core::rng::SplitMix64::f32_pm1_vec(1, sq * d);
        let k: Vec<f32> = tensorforge_core::rng::SplitMix64::f32_pm1_vec(2, sk * d)
            .iter()
            .map(|x| 3.0 * x)
            .collect();
        let v = tensorforge_core::rng::SplitMix64::f32_pm1_vec(3, sk * dv);
        let mut mask = vec![0f32; sq * sk];
        for i in (0..sq).step_by(3) {
            for j in 0..100 {
                mask[i * sk + j] = f32::NEG_INFINITY;
            }
        }
        let want = reference(&q, &k, &v, Some(&mask), sq, sk, d, dv, 0.25);
        let qo = Operand::row_major(&q, 1, sq, d).unwrap();
        let kto = Operand::transposed(&k, 1, d, sk).unwrap();
        let vo = Operand::row_major(&v, 1, sk, dv).unwrap();
        let mk = Mask::broadcast(&mask, &[sq, sk], &[1]);
        let mut out = vec![0f32; sq * dv];
        attention(qo, kto, vo, Some(&mk), 0.25, false, &mut out).unwrap();
        for (i, (a, b)) in out.iter().zip(&want).enumerate() {
            assert!((*a as f64 - b).abs() < 2e-6, "{i}: {a} vs {b}");
        }
    }

    #[test]
    fn skipped_blocks_keep_the_softmax_nan_rows() {
        // A causal mask over 600 keys: query block 0 (rows 0..64) sees only key block 0,
        // so key blocks 1 and 2 are skipped for it, unless they hold a non-finite key. Here
        // key 599 has +∞ in component 0: for every row i < 599, q[i][0]·∞ + (−∞) is NaN
        // when q[i][0] > 0, so the softmax, and the output row, are NaN there; rows with
        // q[i][0] < 0 get −∞ and stay finite. The skip must not hide that.
        let (sq, sk, d) = (600, 600, 8);
        let q = tensorforge_core::rng::SplitMix64::f32_pm1_vec(7, sq * d);
        let mut k = tensorforge_core::rng::SplitMix64::f32_pm1_vec(8, sk * d);
        k[(sk - 1) * d] = f32::INFINITY;
        let v = tensorforge_core::rng::SplitMix64::f32_pm1_vec(9, sk * d);
        let mut mask = vec![0f32; sq * sk];
        for i in 0..sq {
            for j in i + 1..sk {
                mask[i * sk + j] = f32::NEG_INFINITY;
            }
        }
        let want = reference(&q, &k, &v, Some(&mask), sq, sk, d, d, 1.0);
        let mk = Mask::broadcast(&mask, &[sq, sk], &[1]);
        let mut out = vec![0f32; sq * d];
        attention(
            Operand::row_major(&q, 1, sq, d).unwrap(),
            Operand::transposed(&k, 1, d, sk).unwrap(),
            Operand::row_major(&v, 1, sk, d).unwrap(),
            Some(&mk),
            1.0,
            false,
            &mut out,
        )
        .unwrap();
        let mut nan_rows = 0;
        for i in 0..sq {
            let w = &want[i * d..(i + 1) * d];
            let o = &out[i * d..(i + 1) * d];
            if w[0].is_nan() {
                nan_rows += 1;
                assert!(o.iter().all(|x| x.is_nan()), "row {i}: {o:?}");
            } else {
                for (a, b) in o.iter().zip(w) {
                    assert!((*a as f64 - b).abs() < 2e-6, "row {i}: {a} vs {b}");
                }
            }
        }
        // About half the rows (those with q[i][0] > 0) are NaN.
        assert!(nan_rows > 200 && nan_rows < 400, "{nan_rows}");
    }

    #[test]
    fn no_keys_give_zeros() {
        let q = vec![1f32; 3 * 4];
        let mut out = vec![f32::NAN; 3 * 2];
        attention(
            Operand::row_major(&q, 1, 3, 4).unwrap(),
            Operand::row_major(&[], 1, 4, 0).unwrap(),
            Operand::row_major(&[], 1, 0, 2).unwrap(),
            None,
            1.0,
            false,
            &mut out,
        )
        .unwrap();
        assert!(out.iter().all(|&v| v == 0.0), "{out:?}");
    }

    #[test]
    fn fully_masked_rows_give_nan_or_zero() {
        let (sq, sk, d) = (3, 5, 4);
        let q = vec![0.5f32; sq * d];
        let kt = vec![0.25f32; d * sk];
        let v = vec![1f32; sk * d];
        // Row 1 masked everywhere; a [1, sk] mask row broadcast over the others is not.
        let mut mask = vec![0f32; sq * sk];
        mask[sk..2 * sk].fill(f32::NEG_INFINITY);
        let mk = Mask::broadcast(&mask, &[1, sq, sk], &[2]);
        for zero in [false, true] {
            let mut out = vec![7f32; 2 * sq * d];
            let q2 = [q.clone(), q.clone()].concat();
            let kt2 = [kt.clone(), kt.clone()].concat();
            let v2 = [v.clone(), v.clone()].concat();
            attention(
                Operand::row_major(&q2, 2, sq, d).unwrap(),
                Operand::row_major(&kt2, 2, d, sk).unwrap(),
                Operand::row_major(&v2, 2, sk, d).unwrap(),
                Some(&mk),
                1.0,
                zero,
                &mut out,
            )
            .unwrap();
            for b in 0..2 {
                for i in 0..sq {
                    for c in 0..d {
                        let y = out[(b * sq + i) * d + c];
                        if i == 1 {
                            assert!(if zero { y == 0.0 } else { y.is_nan() }, "{b},{i}: {y}");
                        } else {
                            // Equal scores: the mean of the values, 1.
                            assert!((y - 1.0).abs() < 1e-6, "{b},{i}: {y}");
                        }
                    }
                }
            }
        }
    }
}
