//! MatMuls whose right operand is a weight (a linear layer, a projection, an LM head) through
//! the Kernels crate's packed `sgemm`: the weight `B` (`K × N`, read in place or through a
//! transpose of its last two axes, as ONNX `Gemm` with `transB` gives it) is packed into
//! panels once per weight buffer and kept in the program's memo ([`super::winograd::FilterCache`]),
//! so a run reads it as one sequential stream (faer is handed the plain matrix on every call
//! and arranges it itself); the activation `A` (row-major, any batch folded
//! into its rows) is read in place ([`Left::RowMajor`]): packing it cost 20–138 µs a call on
//! the GPT-2 and ViT shapes, 4–17 % of the product (the `sgemm_vs_faer` example, AMD EPYC
//! with AVX2; docs/performance.md).
//! The weight is packed in K blocks of [`Kernel::kc`] rows, run one after another.
//!
//! Threading: with more than one worker and at least [`crate::gemm::PAR_MIN_MACS`]
//! multiply-adds, the rows of `C` split among the workers in whole panels of `A` when there
//! are enough of them, else the columns split in whole panels of `B` (a short `A`, such as
//! one token's row, is then read by each worker).
//!
//! Left out: CPUs without the packed kernel (AVX2 + FMA or AVX-512F; aarch64 included), where
//! [`packed_weight_product`] declines and faer runs the product; products of at most
//! [`crate::gemm::SMALL_MACS`] multiply-adds (the plain loop there costs less); weights of
//! more than one matrix (a batched right operand); other element types. The packed copy doubles the
//! weight's memory (the original stays bound to the graph).

use super::winograd::FilterCache;
use crate::gemm::{Operand, PAR_MIN_MACS};
use rayon::prelude::*;
use tensorforge_kernels::fused::OutPtr;
use tensorforge_kernels::sgemm::{Kernel, Left, Right};

/// `out (+)= a · b` through the packed kernel when `b` is weight `node`'s single matrix and
/// `a` is row-major (its batch folded into rows): `Ok(true)` when it ran, `Ok(false)` when the
/// product does not take this path (no packed kernel on this CPU, a batched or tiny right
/// operand), so the caller runs it otherwise.
pub(super) fn packed_weight_product(
    cache: &FilterCache,
    node: usize,
    a: Operand,
    b: Operand,
    out: &mut [f32],
    accumulate: bool,
) -> Result<bool, String> {
    let Some(kern) = Kernel::detect() else {
        return Ok(false);
    };
    packed_weight_product_with(kern, cache, node, a, b, out, accumulate)
}

/// [`packed_weight_product`] with the packed kernel chosen by the caller.
pub(super) fn packed_weight_product_with(
    kern: Kernel,
    cache: &FilterCache,
    node: usize,
    a: Operand,
    b: Operand,
    out: &mut [f32],
    accumulate: bool,
) -> Result<bool, String> {
    let (ab, m, k) = a.dims();
    let (bb, bk, n) = b.dims();
    if bb != 1 || bk != k || !a.is_row_major() || k == 0 || n == 0 {
        return Ok(false);
    }
    // A product at or below SMALL_MACS keeps `gemm`'s plain loop: packing costs more.
    if ab.saturating_mul(m).saturating_mul(k).saturating_mul(n) <= crate::gemm::SMALL_MACS {
        return Ok(false);
    }
    let rows = ab
        .checked_mul(m)
        .ok_or_else(|| "rows of A overflow".to_string())?;
    if rows == 0 {
        return Ok(true);
    }
    if out.len() != rows * n {
        return Err(format!(
            "output has {} elements, expected {rows} x {n}",
            out.len()
        ));
    }
    let (rs, cs) = b.strides();
    let held = cache.packed_right(kern, node, k, n, rs, cs, b.values())?;
    let pb: &[f32] = &held.packed;
    let av = &a.values()[..rows * k];
    let threads = rayon::current_num_threads();
    let macs = rows.saturating_mul(k).saturating_mul(n);
    let mr = kern.panel_rows();
    let nr = kern.panel_cols();
    let workers = if threads > 1 && macs >= PAR_MIN_MACS {
        threads
    } else {
        1
    };
    let panels_m = rows.div_ceil(mr);
    let panels_n = n.div_ceil(nr);
    if workers == 1 {
        return product_block(kern, av, rows, k, n, 0, n, pb, out, accumulate).map(|_| true);
    }
    if panels_m >= 2 * workers {
        // Rows in whole panels of A, one block per worker.
        let per = panels_m.div_ceil(workers) * mr;
        out.par_chunks_mut(per * n)
            .zip(av.par_chunks(per * k))
            .try_for_each(|(c, a)| {
                product_block(kern, a, c.len() / n, k, n, 0, n, pb, c, accumulate)
            })?;
    } else {
        // Columns in whole panels of B: each worker writes its columns of every row (C's row
        // stride stays n) from the whole of A.
        let per_panels = panels_n.div_ceil(workers);
        let per = per_panels * nr;
        let cptr = OutPtr::new(out);
        let len = out.len();
        (0..panels_n.div_ceil(per_panels))
            .into_par_iter()
            .try_for_each(|w| {
                let j0 = w * per;
                let cols = per.min(n - j0);
                // SAFETY: worker w writes only columns j0..j0 + cols of each row (disjoint
                // across workers); `gemm` checks the span (rows - 1)·n + cols ≤ len - j0.
                let c = unsafe { std::slice::from_raw_parts_mut(cptr.get().add(j0), len - j0) };
                product_block(kern, av, rows, k, n, j0, cols, pb, c, accumulate)
            })?;
    }
    Ok(true)
}

/// `c (+)= a · B[:, j0..j0 + cols]` for a block of `rows` rows of row-major `a` and the
/// packed `B` (`c`'s row stride is `n`, its first element column `j0`'s).
#[allow(clippy::too_many_arguments)]
fn product_block(
    kern: Kernel,
    a: &[f32],
    rows: usize,
    k: usize,
    n: usize,
    j0: usize,
    cols: usize,
    pb: &[f32],
    c: &mut [f32],
    accumulate: bool,
) -> Result<(), String> {
    k_blocks(kern, a, k, n, pb, j0, |kc, left, bblk, first| {
        let acc = accumulate || !first;
        kern.gemm_left(rows, cols, kc, left, Right::Packed(bblk), c, n, acc)
            .map_err(|e| e.to_string())
    })
}

/// For each K block of `a` (`rows × k`, row-major) in turn: the block read in place, and the
/// same block of the packed weight `pb` (`k × n` in K blocks, [`FilterCache::packed_right`])
/// from its column `j0` (a multiple of the kernel's panel width) on, handed to
/// `f(kc, A block, packed B block, first)`.
#[allow(clippy::too_many_arguments)]
fn k_blocks(
    kern: Kernel,
    a: &[f32],
    k: usize,
    n: usize,
    pb: &[f32],
    j0: usize,
    mut f: impl FnMut(usize, Left, &[f32], bool) -> Result<(), String>,
) -> Result<(), String> {
    let nr = kern.panel_cols();
    for (pc, kc, block) in super::winograd::right_blocks(kern, pb, k, n) {
        let left = Left::RowMajor {
            data: &a[pc..],
            ld: k,
        };
        f(kc, left, &block[(j0 / nr) * nr * kc..], pc == 0)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn vals(n: usize, seed: u64) -> Vec<f32> {
        tensorforge_core::rng::SplitMix64::f32_pm1_vec(seed, n)
    }

    /// `c0 + a·b` in f64, with b given as `k × n` row-major (`bt` false) or as its transpose
    /// `n × k` row-major (`bt` true), and the bound Σ|a||b| that scales f32's error.
    fn reference(
        a: &[f32],
        b: &[f32],
        c0: &[f32],
        m: usize,
        k: usize,
        n: usize,
        bt: bool,
    ) -> (Vec<f64>, Vec<f64>) {
        let mut out = vec![0.0; m * n];
        let mut mag = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut g) = (c0[i * n + j] as f64, c0[i * n + j].abs() as f64);
                for p in 0..k {
                    let bv = if bt { b[j * k + p] } else { b[p * n + j] } as f64;
                    s += a[i * k + p] as f64 * bv;
                    g += (a[i * k + p] as f64 * bv).abs();
                }
                out[i * n + j] = s;
                mag[i * n + j] = g;
            }
        }
        (out, mag)
    }

    #[test]
    fn packed_products_match_the_definition_on_every_split() {
        let cache = FilterCache::default();
        // (batch, m, k, n): single rows (the column split at two threads), a batch folded into
        // rows, edges that are not whole panels, and products above PAR_MIN_MACS (2^20) that
        // split rows (128·96·100 = 1.23 Mi) or columns (4·512·600 = 1.23 Mi, one panel of rows).
        let shapes = [
            (1, 1, 300, 37),
            (3, 5, 64, 100),
            (1, 50, 33, 17),
            (1, 128, 96, 100),
            (1, 4, 512, 600),
            (2, 2, 520, 610),
        ];
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for (node, &(batch, m, k, n)) in shapes.iter().enumerate() {
                for bt in [false, true] {
                    for accumulate in [false, true] {
                        let rows = batch * m;
                        let a = vals(rows * k, node as u64 + 1);
                        let b = vals(k * n, node as u64 + 100);
                        let c0 = if accumulate {
                            vals(rows * n, 7)
                        } else {
                            vec![0.0; rows * n]
                        };
                        let ao = Operand::row_major(&a, batch, m, k).unwrap();
                        let bo = if bt {
                            Operand::transposed(&b, 1, k, n).unwrap()
                        } else {
                            Operand::row_major(&b, 1, k, n).unwrap()
                        };
                        let mut c = if accumulate {
                            c0.clone()
                        } else {
                            vec![f32::NAN; rows * n]
                        };
                        let ran = pool
                            .install(|| {
                                packed_weight_product(
                                    &cache,
                                    node * 4 + bt as usize,
                                    ao,
                                    bo,
                                    &mut c,
                                    accumulate,
                                )
                            })
                            .unwrap();
                        if Kernel::detect().is_none() {
                            // No packed kernel on this CPU: the product is declined, untouched.
                            assert!(!ran);
                            continue;
                        }
                        assert!(ran, "{batch}x{m}x{k}x{n}");
                        let (want, mag) = reference(&a, &b, &c0, rows, k, n, bt);
                        for (idx, ((&got, &w), &g)) in c.iter().zip(&want).zip(&mag).enumerate() {
                            // f32 accumulation: a few ulps of the magnitude sum per term.
                            assert!(
                                (got as f64 - w).abs() <= 1e-6 * g + 1e-30,
                                "{threads}T {batch}x{m}x{k}x{n} bt={bt} acc={accumulate} [{idx}]: {got} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_weight_is_packed_once_and_again_when_it_changes() {
        let Some(kern) = Kernel::detect() else {
            return; // nothing is packed without a kernel (the test above checks the decline)
        };
        let cache = FilterCache::default();
        let (k, n) = (20, 30);
        let w = vals(k * n, 3);
        let first = cache.packed_right(kern, 0, k, n, n, 1, &w).unwrap();
        let again = cache.packed_right(kern, 0, k, n, n, 1, &w).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the second call reuses the packed weight"
        );
        // Another buffer with other values (a rebound weight): packed again, from the new values.
        let w2: Vec<f32> = w.iter().map(|x| x + 1.0).collect();
        let other = cache.packed_right(kern, 0, k, n, n, 1, &w2).unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        let mut direct = vec![0.0; kern.packed_b_len(k, n).unwrap()];
        kern.pack_b(&w2, k, n, n, 1, &mut direct).unwrap();
        assert_eq!(other.packed, direct);
    }

    #[test]
    fn a_batched_or_tiny_product_is_declined() {
        let cache = FilterCache::default();
        // 2 · 20 · 40 · 30 = 48 000 multiply-adds: large enough, but two weight matrices.
        let a = vals(2 * 20 * 40, 1);
        let b = vals(2 * 40 * 30, 2);
        let ao = Operand::row_major(&a, 2, 20, 40).unwrap();
        let bo = Operand::row_major(&b, 2, 40, 30).unwrap();
        let mut c = vec![0.0; 2 * 20 * 30];
        assert!(!packed_weight_product(&cache, 0, ao, bo, &mut c, false).unwrap());
        // One weight but 4 · 8 · 32 = 1024 multiply-adds (SMALL_MACS): the plain loop's.
        let (a, b) = (vals(4 * 8, 3), vals(8 * 32, 4));
        let ao = Operand::row_major(&a, 1, 4, 8).unwrap();
        let bo = Operand::row_major(&b, 1, 8, 32).unwrap();
        let mut c = vec![0.0; 4 * 32];
        assert!(!packed_weight_product(&cache, 1, ao, bo, &mut c, false).unwrap());
        assert!(
            c.iter().all(|&x| x == 0.0),
            "a declined product leaves C as it was"
        );
    }
}
