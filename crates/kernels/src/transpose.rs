//! Out-of-place transposes of row-major f32 matrices: `dst` (`cols × rows`) = `srcᵀ` (`src`
//! `rows × cols`). A layout change between channels-first and channels-last maps (`NCHW ↔
//! NHWC`: `C × H·W ↔ H·W × C`) is one such transpose per image; read element by element at
//! the source's stride, every value of a row of the output comes from another cache line.
//! Here the matrix is walked in 32 × 32 tiles (4 KiB of source and of output, both in the L1
//! cache), each cut into 8 × 8 blocks turned in registers where the CPU has AVX2 (eight
//! 8-value loads, 24 shuffles, eight 8-value stores); the ragged edges are copied value by
//! value. With several workers the output's rows (the source's columns) are dealt out in
//! contiguous ranges.
//!
//! Left out: 16 × 16 blocks at AVX-512 (measured no faster than 8 × 8 ones where they were
//! tried, in the depthwise convolutions' tiles: the transposes wait on loads), non-temporal
//! stores for outputs larger than the caches, other element types, and NEON blocks
//! (aarch64 copies value by value).

use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Side of the square tiles the matrix is walked in (a multiple of 8).
const TILE: usize = 32;

/// Values from which the output's rows are dealt to the pool's workers.
const PAR_MIN_VALUES: usize = 1 << 16;

/// Appends the transpose of `src` (`rows × cols`, row-major) to `out`: `cols` rows of `rows`
/// values, `out[len + j·rows + i] = src[i·cols + j]` where `len` is `out`'s length before the
/// call. Uses the rayon pool's workers when the matrix has at least 65 536 values.
///
/// # Panics
/// If `rows · cols` overflows or `src` holds fewer than `rows · cols` values (callers pass
/// a tensor's own shape).
///
/// ```
/// // [[1, 2, 3], [4, 5, 6]]ᵀ = [[1, 4], [2, 5], [3, 6]]
/// let mut out = vec![];
/// tensorforge_kernels::transpose::transpose_append(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3, &mut out);
/// assert_eq!(out, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
/// ```
pub fn transpose_append(src: &[f32], rows: usize, cols: usize, out: &mut Vec<f32>) {
    let n = rows
        .checked_mul(cols)
        .expect("transpose: rows · cols overflows");
    assert!(
        src.len() >= n,
        "transpose: {} values for {rows} × {cols}",
        src.len()
    );
    if n == 0 {
        return;
    }
    out.reserve(n);
    let len = out.len();
    deal(src, rows, cols, &mut out.spare_capacity_mut()[..n]);
    // SAFETY: `columns` wrote each of the `n` values after `len` (every output row of every
    // range, every value of each row), and `reserve` made room for them.
    unsafe { out.set_len(len + n) };
}

/// `dst` (`cols × rows`) = the transpose of `src` (`rows × cols`): `dst[j·rows + i] =
/// src[i·cols + j]`, as [`transpose_append`] but into a slice of exactly `rows · cols` values.
///
/// # Panics
/// If `rows · cols` overflows or either slice's length differs from it.
pub fn transpose_to(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    let n = rows
        .checked_mul(cols)
        .expect("transpose: rows · cols overflows");
    assert!(
        src.len() == n && dst.len() == n,
        "transpose: slices for {rows} × {cols}"
    );
    if n == 0 {
        return;
    }
    // SAFETY: the same memory seen as possibly-uninitialized values; only initialized
    // values (copies of `src`'s) are written through it.
    let dst: &mut [MaybeUninit<f32>] =
        unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast(), n) };
    deal(src, rows, cols, dst);
}

/// All of `dst`'s `cols` rows written, dealt to the pool's workers in ranges of a multiple
/// of 8 rows (about two per worker) when the matrix is large enough.
fn deal(src: &[f32], rows: usize, cols: usize, dst: &mut [MaybeUninit<f32>]) {
    let threads = rayon::current_num_threads();
    if threads > 1 && dst.len() >= PAR_MIN_VALUES && cols >= 16 {
        let per = cols.div_ceil(2 * threads).next_multiple_of(8);
        dst.par_chunks_mut(per * rows)
            .enumerate()
            .for_each(|(i, d)| columns(src, rows, cols, i * per, d));
    } else {
        columns(src, rows, cols, 0, dst);
    }
}

/// Output rows `c0 ..` (source columns) into `dst`, `dst.len() / rows` of them, each `rows`
/// values long; every value of `dst` is written.
fn columns(src: &[f32], rows: usize, cols: usize, c0: usize, dst: &mut [MaybeUninit<f32>]) {
    let c1 = c0 + dst.len() / rows;
    debug_assert!(c1 <= cols);
    #[cfg(target_arch = "x86_64")]
    if crate::simd::avx2_fma() {
        // SAFETY: AVX2 is present; the ranges are checked inside.
        unsafe { columns_avx2(src, rows, cols, c0, c1, dst) };
        return;
    }
    columns_portable(src, rows, cols, c0, c1, dst);
}

/// [`columns`] value by value, tile by tile (CPUs without AVX2).
fn columns_portable(
    src: &[f32],
    rows: usize,
    cols: usize,
    c0: usize,
    c1: usize,
    dst: &mut [MaybeUninit<f32>],
) {
    for r0 in (0..rows).step_by(TILE) {
        for j0 in (c0..c1).step_by(TILE) {
            edge(
                src,
                rows,
                cols,
                c0,
                dst,
                r0..(r0 + TILE).min(rows),
                j0..(j0 + TILE).min(c1),
            );
        }
    }
}

/// The values of tile `rs × js` value by value.
fn edge(
    src: &[f32],
    rows: usize,
    cols: usize,
    c0: usize,
    dst: &mut [MaybeUninit<f32>],
    rs: std::ops::Range<usize>,
    js: std::ops::Range<usize>,
) {
    for j in js {
        let d = &mut dst[(j - c0) * rows..][..rows];
        for i in rs.clone() {
            d[i].write(src[i * cols + j]);
        }
    }
}

/// [`columns`] tile by tile, each tile's whole 8 × 8 blocks turned in registers
/// (`simd::transpose8x8`), its ragged rows and columns by [`edge`].
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn columns_avx2(
    src: &[f32],
    rows: usize,
    cols: usize,
    c0: usize,
    c1: usize,
    dst: &mut [MaybeUninit<f32>],
) {
    use std::arch::x86_64::*;
    assert!(src.len() >= rows * cols && dst.len() >= (c1 - c0) * rows);
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr() as *mut f32);
    for r0 in (0..rows).step_by(TILE) {
        let r1 = (r0 + TILE).min(rows);
        let r8 = r0 + (r1 - r0) / 8 * 8;
        for j0 in (c0..c1).step_by(TILE) {
            let j1 = (j0 + TILE).min(c1);
            let j8 = j0 + (j1 - j0) / 8 * 8;
            for i in (r0..r8).step_by(8) {
                for j in (j0..j8).step_by(8) {
                    let mut v = [_mm256_setzero_ps(); 8];
                    for (k, v) in v.iter_mut().enumerate() {
                        // SAFETY: row i + k < rows, columns j .. j + 8 ≤ cols.
                        *v = _mm256_loadu_ps(sp.add((i + k) * cols + j));
                    }
                    crate::simd::transpose8x8(&mut v);
                    for (k, v) in v.iter().enumerate() {
                        // SAFETY: output row j + k − c0 < c1 − c0, values i .. i + 8 ≤ rows.
                        _mm256_storeu_ps(dp.add((j + k - c0) * rows + i), *v);
                    }
                }
            }
            if r8 < r1 {
                edge(src, rows, cols, c0, dst, r8..r1, j0..j1);
            }
            if j8 < j1 {
                edge(src, rows, cols, c0, dst, r0..r8, j8..j1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape from 1 × 1 to 41 × 41 plus large ones (ragged edges of every size against
    /// the 8 × 8 blocks and 32 × 32 tiles; split over two workers), appended after existing
    /// values: out[len + j·rows + i] = src[i·cols + j], and the values before are untouched.
    #[test]
    fn transposes_equal_the_definition() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let mut shapes: Vec<(usize, usize)> = vec![];
        for r in 1..=41 {
            for c in 1..=41 {
                shapes.push((r, c));
            }
        }
        shapes.extend([
            (3136, 48),
            (48, 3136),
            (785, 97),
            (97, 785),
            (1, 70_000),
            (70_000, 1),
        ]);
        for (rows, cols) in shapes {
            let src: Vec<f32> = (0..rows * cols).map(|v| v as f32).collect();
            for threads in [1, 2] {
                let mut out = vec![-1.0, -2.0];
                pool.install(|| {
                    if threads == 1 {
                        columns_once(&src, rows, cols, &mut out)
                    } else {
                        transpose_append(&src, rows, cols, &mut out)
                    }
                });
                assert_eq!(out.len(), 2 + rows * cols, "{rows} × {cols}");
                assert_eq!(&out[..2], &[-1.0, -2.0]);
                for j in 0..cols {
                    for i in 0..rows {
                        assert_eq!(out[2 + j * rows + i], src[i * cols + j], "{rows} × {cols}");
                    }
                }
            }
        }
    }

    /// The one-worker path whatever the pool.
    fn columns_once(src: &[f32], rows: usize, cols: usize, out: &mut Vec<f32>) {
        let single = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        single.install(|| transpose_append(src, rows, cols, out));
    }

    /// The path of CPUs without AVX2, whatever this one has.
    #[test]
    fn the_portable_path_equals_the_definition() {
        for (rows, cols) in [(1, 1), (7, 9), (33, 65), (48, 100)] {
            let src: Vec<f32> = (0..rows * cols).map(|v| v as f32).collect();
            let mut out = vec![MaybeUninit::new(f32::NAN); rows * cols];
            columns_portable(&src, rows, cols, 0, cols, &mut out);
            for j in 0..cols {
                for i in 0..rows {
                    // SAFETY: every value was initialized (to NaN, then overwritten).
                    let got = unsafe { out[j * rows + i].assume_init() };
                    assert_eq!(got, src[i * cols + j], "{rows} × {cols}");
                }
            }
        }
    }

    #[test]
    fn into_a_slice_equals_the_definition() {
        for (rows, cols) in [(3, 5), (48, 3136), (3136, 48)] {
            let src: Vec<f32> = (0..rows * cols).map(|v| v as f32).collect();
            let mut dst = vec![f32::NAN; rows * cols];
            transpose_to(&src, rows, cols, &mut dst);
            for j in 0..cols {
                for i in 0..rows {
                    assert_eq!(dst[j * rows + i], src[i * cols + j], "{rows} × {cols}");
                }
            }
        }
    }

    #[test]
    fn an_empty_matrix_appends_nothing() {
        let mut out = vec![1.0];
        transpose_append(&[], 0, 5, &mut out);
        transpose_append(&[], 5, 0, &mut out);
        assert_eq!(out, [1.0]);
    }
}
