//! Copies of strided views into contiguous outputs: what the executor's Concat and Slice do.
//! A view is a base offset and (size, stride) per axis over a buffer, so an input that is a
//! Transpose or Reshape of a stored tensor is read in place with its strides rather than
//! copied first (GPT-2's `present` keys are a Concat of the head-split Transpose), and a
//! forward Slice of such an input is the same view with stepped strides. The output is
//! written row by row (a row: the last axis), a contiguous row with one `copy_from_slice`;
//! with `parallel`, blocks of whole rows go to the pool's workers.
//!
//! Left out: negative strides (a Slice with a negative step keeps the executor's odometer),
//! and views whose element offsets do not fit the buffer, which are errors, not reads.

use rayon::prelude::*;

/// Elements from which a copy goes to the pool's workers when the run's workers spin
/// ([`super::spin::active`]); without spinning workers the executor copies on one.
pub(super) const PAR_MIN_ELEMS: usize = 1 << 14;

/// A strided view: element (i0, …, ik) at `base + Σ i_d · axes[d].1` of its buffer, `axes[d].0`
/// values along axis d.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct View {
    /// Offset of element (0, …, 0).
    pub base: usize,
    /// (size, stride) per axis, outermost first.
    pub axes: Vec<(usize, usize)>,
}

impl View {
    /// A row-major tensor of `shape`, from offset 0.
    pub fn contiguous(shape: &[usize]) -> View {
        let mut axes = vec![(0, 0); shape.len()];
        let mut stride = 1usize;
        for (a, &d) in axes.iter_mut().zip(shape).rev() {
            *a = (d, stride);
            stride = stride.saturating_mul(d);
        }
        View { base: 0, axes }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.axes.iter().map(|a| a.0).product()
    }

    /// The offset one past the last element read (`base` for an empty view), `None` on
    /// overflow.
    fn end(&self) -> Option<usize> {
        if self.numel() == 0 {
            return Some(self.base);
        }
        self.axes
            .iter()
            .try_fold(self.base.checked_add(1)?, |e, &(n, s)| {
                e.checked_add((n - 1).checked_mul(s)?)
            })
    }

    /// Elements of the sub-view over axes `a..` (one outer index's).
    pub fn inner_numel(&self, a: usize) -> usize {
        self.axes[a..].iter().map(|x| x.0).product()
    }

    /// Whether the sub-view over axes `a..` is one run from its first element (its axes
    /// row-major; an axis of size 1 may have any stride).
    pub fn row_major_from(&self, a: usize) -> bool {
        let mut want = 1usize;
        self.axes[a..].iter().rev().all(|&(size, stride)| {
            let ok = size == 1 || stride == want;
            want = want.saturating_mul(size);
            ok
        })
    }

    /// The offset of the first element of the sub-view over axes `a..` at outer index `ob`
    /// (row-major over the axes before `a`).
    pub fn offset_at(&self, a: usize, mut ob: usize) -> usize {
        let mut base = self.base;
        for &(n, s) in self.axes[..a].iter().rev() {
            let n = n.max(1);
            base += (ob % n) * s;
            ob /= n;
        }
        base
    }
}

/// `dst` = rows `row0 ..` of view `v` of `src` (row-major, a row being the last axis), as
/// many rows as `dst` holds. The caller has checked that the view fits `src`.
fn gather_rows(src: &[f32], v: &View, row0: usize, dst: &mut [f32]) {
    rows_at(src, v.base, &v.axes, row0, dst);
}

/// [`gather_rows`] of the view (`base`, `axes`): no allocation for up to 8 outer axes.
pub(super) fn rows_at(
    src: &[f32],
    base: usize,
    axes: &[(usize, usize)],
    row0: usize,
    dst: &mut [f32],
) {
    let Some(&(last, st)) = axes.last() else {
        if let Some(d) = dst.first_mut() {
            *d = src[base];
        }
        return;
    };
    if last == 0 {
        return;
    }
    let outer = &axes[..axes.len() - 1];
    // The multi-index of row `row0` over the outer axes, and its offset.
    let mut small = [0usize; 8];
    let mut big;
    let idx: &mut [usize] = if outer.len() <= small.len() {
        &mut small[..outer.len()]
    } else {
        big = vec![0usize; outer.len()];
        &mut big
    };
    let mut off = base;
    let mut r = row0;
    for (d, &(n, s)) in outer.iter().enumerate().rev() {
        let n = n.max(1);
        idx[d] = r % n;
        off += idx[d] * s;
        r /= n;
    }
    for row in dst.chunks_exact_mut(last) {
        match st {
            1 => row.copy_from_slice(&src[off..off + last]),
            0 => row.fill(src[off]),
            _ => {
                for (i, y) in row.iter_mut().enumerate() {
                    *y = src[off + i * st];
                }
            }
        }
        // Next row: carry through the outer axes.
        for d in (0..outer.len()).rev() {
            idx[d] += 1;
            off += outer[d].1;
            if idx[d] < outer[d].0 {
                break;
            }
            off -= outer[d].1 * outer[d].0;
            idx[d] = 0;
        }
    }
}

/// Whether view `v` fits a buffer of `len` elements.
pub(super) fn fits(v: &View, len: usize) -> bool {
    v.end().is_some_and(|e| e <= len)
}

/// `dst` = every element of view `v` of `src` in row-major order (`dst.len()` must be
/// `v.numel()`), in blocks of whole rows on the pool's workers with `parallel`. An error
/// when the view reaches past `src` or `dst` has another length.
pub(super) fn gather(src: &[f32], v: &View, dst: &mut [f32], parallel: bool) -> Result<(), String> {
    let n = v.numel();
    if dst.len() != n {
        return Err(format!("a view of {n} elements into {} places", dst.len()));
    }
    if !fits(v, src.len()) {
        return Err(format!(
            "a view reaching past its buffer of {} elements",
            src.len()
        ));
    }
    let last = v.axes.last().map_or(1, |a| a.0).max(1);
    let rows = n / last;
    if parallel && rows > 1 {
        // Blocks of at least 4096 elements (whole rows), about four per worker.
        let per = (rows / (4 * rayon::current_num_threads()).max(1))
            .max(4096usize.div_ceil(last))
            .max(1);
        dst.par_chunks_mut(per * last)
            .enumerate()
            .for_each(|(b, d)| gather_rows(src, v, b * per, d));
    } else {
        gather_rows(src, v, 0, dst);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Element (i0, …) of `v` by the definition, one at a time.
    fn by_definition(src: &[f32], v: &View) -> Vec<f32> {
        let mut out = vec![];
        let n = v.numel();
        for mut flat in 0..n {
            let mut off = v.base;
            for &(size, s) in v.axes.iter().rev() {
                off += (flat % size) * s;
                flat /= size;
            }
            out.push(src[off]);
        }
        out
    }

    #[test]
    fn gathers_equal_the_definition_whole_and_in_blocks() {
        let src: Vec<f32> = (0..50_000).map(|i| i as f32).collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let views = [
            // A head split [1, 128, 4, 64] → [1, 4, 128, 64] (GPT-2's present keys).
            View {
                base: 0,
                axes: vec![(1, 32768), (4, 64), (128, 256), (64, 1)],
            },
            // A key transposed to [4, 64, 128]: rows of stride 256.
            View {
                base: 0,
                axes: vec![(4, 64), (64, 1), (128, 256)],
            },
            // The second half of each row of 32 (rotate-half's slice), from offset 16.
            View {
                base: 16,
                axes: vec![(8, 4096), (128, 32), (16, 1)],
            },
            // A broadcast row (stride 0) and a single element.
            View {
                base: 7,
                axes: vec![(5, 0), (3, 2)],
            },
            View {
                base: 9,
                axes: vec![],
            },
            View::contiguous(&[3, 0, 2]),
        ];
        for v in &views {
            let want = by_definition(&src, v);
            for parallel in [false, true] {
                let mut got = vec![f32::NAN; v.numel()];
                pool.install(|| gather(&src, v, &mut got, parallel))
                    .unwrap();
                assert_eq!(got, want, "{v:?} parallel {parallel}");
            }
            // Rows from the middle on equal the tail of the whole.
            let last = v.axes.last().map_or(1, |a| a.0);
            if last > 0 && v.numel() / last > 3 {
                let mut tail = vec![f32::NAN; v.numel() - 3 * last];
                gather_rows(&src, v, 3, &mut tail);
                assert_eq!(tail, want[3 * last..]);
            }
        }
        // The head split's axes 2.. at outer index 1 (batch 0, head 1): from offset 64.
        let v = &views[0];
        assert_eq!(v.offset_at(2, 1), 64);
        // Its axes 2.. ([128 of stride 256, 64 of stride 1]) are not one run; axis 3 is.
        assert_eq!(v.inner_numel(2), 128 * 64);
        assert!(!v.row_major_from(2) && v.row_major_from(3));
        assert!(View::contiguous(&[3, 1, 4]).row_major_from(0));
        // Axes 1.. of the rotate-half slice at outer index 3: 16 + 3·4096.
        assert_eq!(views[2].offset_at(1, 3), 16 + 3 * 4096);
    }

    #[test]
    fn a_view_past_its_buffer_is_an_error() {
        let src = vec![0f32; 100];
        let v = View {
            base: 10,
            axes: vec![(10, 10)],
        };
        let mut out = vec![0f32; 10];
        assert!(gather(&src, &v, &mut out, false)
            .unwrap_err()
            .contains("past its buffer"));
        let mut short = vec![0f32; 9];
        let ok = View::contiguous(&[10]);
        assert!(gather(&src, &ok, &mut short, false).is_err());
    }
}
