//! MatMul products of the CPU executor, computed with faer (the GEMM the kernels and measure
//! crates already use). An operand is described by its buffer, the strides of its last two
//! axes and those of its batch axes, so that a view of a stored tensor (a Transpose of the
//! last two axes, attention's head split: [`view_layout`]) is read in place instead of being
//! copied first; a Reshape that regroups non-contiguous axes is not expressible as strides
//! and is still copied. A batched product whose right operand
//! is shared (rank 2) and whose left operand is row-major folds the batch into M (one GEMM);
//! other batches run one product per batch matrix, in parallel across the batch when there
//! are at least as many products as workers (each product sequential), and one after another
//! otherwise (each product parallel inside faer).
//! Products of at most [`SMALL_MACS`] multiply-accumulates run a plain loop instead (faer's
//! dispatch would cost more). The thread count is explicit: `Par::rayon(rayon::current_num_threads())`, or `Par::Seq`
//! below [`PAR_MIN_MACS`] multiply-accumulates per product; never both levels at once.

use crate::ir::{Op, TypedGraph};
use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

/// Multiply-accumulates of one product below which faer runs it on the calling thread.
pub const PAR_MIN_MACS: usize = 1 << 20;
/// Multiply-accumulates of a whole batched MatMul below which its small products run on the
/// calling thread (a hand-off to the pool costs more than a few thousand multiply-adds;
/// attention's per-head products of a short sequence are this small).
pub const PAR_MIN_BATCH_MACS: usize = 1 << 18;
/// Multiply-accumulates of a whole MatMul node at or below which a plain loop runs it
/// (faer's dispatch costs more than such a product).
pub const SMALL_MACS: usize = 1 << 10;

/// The stored tensor behind `t` when `t` is a Transpose that swaps the last two axes and
/// keeps the others in place (a 2-D transpose or a batched one), else `None`.
pub fn transposed_source(tg: &TypedGraph, t: usize) -> Option<usize> {
    let p = *tg.producer.get(t)?;
    let Op::Transpose { perm } = &tg.nodes[p].op else {
        return None;
    };
    let r = perm.len();
    if r < 2 {
        return None;
    }
    let lead_in_place = perm[..r - 2].iter().enumerate().all(|(i, &q)| i == q);
    (lead_in_place && perm[r - 2] == r - 1 && perm[r - 1] == r - 2).then(|| tg.node_inputs[p][0])
}

/// Batch axes an operand keeps after merging contiguous ones (a view with more is
/// materialized instead).
const MAX_BATCH_AXES: usize = 4;

/// One MatMul operand as faer reads it: `batch` matrices of `rows` × `cols`, element
/// (b, i, j) at `data[offset(b) + i * rs + j * cs]`, where `offset(b)` unravels `b` over the
/// batch axes (outermost first, each a size and a stride). Stored operands have one batch
/// axis of stride `rows · cols`; a view read in place ([`Operand::strided`]: a head split,
/// a transpose) has its own strides. Built only by the checked constructors, which
/// guarantee every such offset is inside `data`.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    data: &'a [f32],
    batch: usize,
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
    /// Batch axes (size, stride), outermost first; `nb` of them are used.
    baxes: [(usize, usize); MAX_BATCH_AXES],
    nb: usize,
}

impl<'a> Operand<'a> {
    fn checked(
        data: &'a [f32],
        batch: usize,
        rows: usize,
        cols: usize,
        rs: usize,
        cs: usize,
    ) -> Option<Self> {
        // Matrices back to back, filling `data` exactly: within one matrix the largest
        // offset is (rows-1)*rs + (cols-1)*cs = rows*cols - 1 for both layouts below.
        let n = batch.checked_mul(rows)?.checked_mul(cols)?;
        if data.len() != n {
            return None;
        }
        Self::strided(data, &[(batch, rows * cols), (rows, rs), (cols, cs)])
    }

    /// Row-major `[batch, rows, cols]` values.
    pub fn row_major(data: &'a [f32], batch: usize, rows: usize, cols: usize) -> Option<Self> {
        Self::checked(data, batch, rows, cols, cols, 1)
    }

    /// The transpose of row-major `[batch, cols, rows]` values (`[batch, rows, cols]`), read in
    /// place: element (i, j) of a batch matrix is the source's (j, i). (The executor builds
    /// such operands through [`Operand::strided`]; tests build them directly.)
    #[cfg(test)]
    pub fn transposed(data: &'a [f32], batch: usize, rows: usize, cols: usize) -> Option<Self> {
        Self::checked(data, batch, rows, cols, 1, rows)
    }

    /// A view of `data` with any strides: `axes` lists (size, stride) per axis, outermost
    /// first, the last two being the matrices' rows and columns. Batch axes of size 1 are
    /// dropped and adjacent ones that are contiguous with each other merged; `None` when
    /// more than [`MAX_BATCH_AXES`] remain, when there are fewer than two axes, or when the
    /// largest offset, Σ (size − 1) · stride, is outside `data`.
    pub fn strided(data: &'a [f32], axes: &[(usize, usize)]) -> Option<Self> {
        let r = axes.len();
        if r < 2 {
            return None;
        }
        let ((rows, rs), (cols, cs)) = (axes[r - 2], axes[r - 1]);
        let (baxes, nb, batch) = batch_axes(&axes[..r - 2])?;
        let n = batch.checked_mul(rows)?.checked_mul(cols)?;
        if n > 0 {
            let mut last = 0usize;
            for &(size, stride) in axes {
                last = last.checked_add((size - 1).checked_mul(stride)?)?;
            }
            if last >= data.len() || isize::try_from(data.len()).is_err() {
                return None;
            }
        }
        Some(Operand {
            data,
            batch,
            rows,
            cols,
            rs,
            cs,
            baxes,
            nb,
        })
    }

    /// Matrices, rows and columns: `(batch, rows, cols)`.
    pub fn dims(&self) -> (usize, usize, usize) {
        (self.batch, self.rows, self.cols)
    }

    /// Row and column strides within one matrix, in elements.
    pub fn strides(&self) -> (usize, usize) {
        (self.rs, self.cs)
    }

    /// The values the operand reads from (a view's whole source).
    pub fn values(&self) -> &'a [f32] {
        self.data
    }

    /// True when the matrices are row-major and back to back from the start of
    /// [`Operand::values`] (the batch folds into rows).
    pub fn is_row_major(&self) -> bool {
        let back_to_back =
            self.batch <= 1 || (self.nb == 1 && self.baxes[0].1 == self.rows * self.cols);
        self.cs == 1 && (self.rs == self.cols || self.rows <= 1) && back_to_back
    }

    /// Where batch matrix `b` starts in [`Operand::values`].
    pub fn offset(&self, mut b: usize) -> usize {
        let mut off = 0;
        for &(size, stride) in self.baxes[..self.nb].iter().rev() {
            off += (b % size) * stride;
            b /= size;
        }
        off
    }

    /// Batch matrix `b` (`b < batch`) as a faer view.
    pub(crate) fn mat(&self, b: usize) -> MatRef<'a, f32> {
        assert!(b < self.batch.max(1));
        let off = if self.batch == 0 { 0 } else { self.offset(b) };
        // SAFETY: the constructors bound every element's offset, off + i * rs + j * cs for
        // i < rows, j < cols, below data.len() (`checked`: the matrices are back to back
        // and fill data; `strided`: the largest offset is checked), the strides fit isize
        // because the whole length does, and the slice outlives 'a. `as_ptr` is non-null
        // even for an empty slice.
        unsafe {
            MatRef::from_raw_parts(
                self.data.as_ptr().add(off.min(self.data.len())),
                self.rows,
                self.cols,
                self.rs as isize,
                self.cs as isize,
            )
        }
    }
}

/// Batch axes (size, stride), outermost first, with size-1 axes dropped and each axis
/// merged into the one before when the two are contiguous: the axes, how many are used, and
/// the batch count. `None` when more than [`MAX_BATCH_AXES`] remain or on overflow.
#[allow(clippy::type_complexity)]
fn batch_axes(axes: &[(usize, usize)]) -> Option<([(usize, usize); MAX_BATCH_AXES], usize, usize)> {
    let mut baxes = [(1usize, 0usize); MAX_BATCH_AXES];
    let mut nb = 0;
    let mut batch = 1usize;
    for &(size, stride) in axes {
        batch = batch.checked_mul(size)?;
        if size == 1 {
            continue;
        }
        if nb > 0 && baxes[nb - 1].1 == stride.checked_mul(size)? {
            // Contiguous with the axis before: one longer axis.
            baxes[nb - 1] = (baxes[nb - 1].0 * size, stride);
        } else {
            if nb == MAX_BATCH_AXES {
                return None;
            }
            baxes[nb] = (size, stride);
            nb += 1;
        }
    }
    Some((baxes, nb, batch))
}

/// `t` as (size, stride) axes over the buffer of the tensor its views (Reshape, Transpose)
/// start from, and that tensor: a Transpose permutes the axes, a Reshape regroups them where
/// the strides allow it (splitting an axis, or merging axes that are contiguous with each
/// other). `None` when `t` is not a view, when a Reshape regroups axes that are not
/// contiguous, or when the result is no MatMul operand [`Operand::strided`] can describe
/// (fewer than two axes, more than [`MAX_BATCH_AXES`] batch axes left): such a view must be
/// copied, and the executor asks for the copy exactly when this is `None`.
pub fn view_layout(tg: &TypedGraph, t: usize) -> Option<(usize, Vec<(usize, usize)>)> {
    let (x, axes) = strided_view(tg, t)?;
    if axes.len() < 2 {
        return None;
    }
    batch_axes(&axes[..axes.len() - 2])?;
    Some((x, axes))
}

/// `t` as (size, stride) axes over the buffer of the tensor its views (Reshape, Transpose)
/// start from, and that tensor, for any rank: [`view_layout`] without a MatMul operand's
/// limits (the executor's Concat and Slice read views this way). `None` when `t` is not a
/// view or a Reshape regroups axes that are not contiguous.
pub fn strided_view(tg: &TypedGraph, t: usize) -> Option<(usize, Vec<(usize, usize)>)> {
    let mut chain = vec![];
    let mut x = t;
    loop {
        let p = *tg.producer.get(x)?;
        match tg.nodes[p].op {
            Op::Reshape { .. } | Op::Transpose { .. } => {
                chain.push(p);
                x = tg.node_inputs[p][0];
            }
            _ => break,
        }
    }
    if chain.is_empty() {
        return None;
    }
    let shape = &tg.tensors[x].shape;
    let mut axes: Vec<(usize, usize)> = vec![(0, 0); shape.len()];
    let mut stride = 1usize;
    for (a, &d) in axes.iter_mut().zip(shape).rev() {
        *a = (d, stride);
        stride = stride.checked_mul(d)?;
    }
    for &p in chain.iter().rev() {
        let out = tg.node_outputs[p][0];
        axes = match &tg.nodes[p].op {
            Op::Transpose { perm } => perm
                .iter()
                .map(|&q| axes.get(q).copied())
                .collect::<Option<_>>()?,
            _ => regroup(&axes, &tg.tensors[out].shape)?,
        };
    }
    Some((x, axes))
}

/// The strides of `new` sizes over the same elements as `axes` (size, stride), in the same
/// order, without moving them: each run of old axes whose strides chain (stride of one =
/// size · stride of the next, size-1 axes aside) is one contiguous block the new sizes may
/// split or merge freely; a new axis may not straddle two blocks. `None` otherwise or when
/// the element counts differ.
fn regroup(axes: &[(usize, usize)], new: &[usize]) -> Option<Vec<(usize, usize)>> {
    let numel: usize = axes.iter().map(|a| a.0).product();
    if new.iter().product::<usize>() != numel {
        return None;
    }
    if numel == 0 {
        let mut s = 1;
        let mut out = vec![(0, 0); new.len()];
        for (o, &d) in out.iter_mut().zip(new).rev() {
            *o = (d, s);
            s *= d.max(1);
        }
        return Some(out);
    }
    // Blocks of old axes (size-1 axes dropped): (elements, stride of the innermost axis).
    let mut blocks: Vec<(usize, usize)> = vec![];
    let mut prev_stride = 0usize;
    for &(size, stride) in axes.iter().filter(|a| a.0 != 1) {
        match blocks.last_mut() {
            Some(b) if prev_stride == size * stride => {
                b.0 *= size;
                b.1 = stride;
            }
            _ => blocks.push((size, stride)),
        }
        prev_stride = stride;
    }
    // Assign new axes to blocks from the innermost: each block's elements are covered by
    // consecutive new axes whose strides grow from the block's innermost stride.
    let mut out = vec![(1usize, 0usize); new.len()];
    let mut j = new.len();
    for &(elems, inner) in blocks.iter().rev() {
        let mut covered = 1usize;
        while covered < elems {
            j = j.checked_sub(1)?;
            let d = new[j];
            out[j] = (d, inner * covered);
            covered = covered.checked_mul(d)?;
        }
        if covered != elems {
            return None;
        }
    }
    // Leading size-1 axes left over.
    for (o, &d) in out.iter_mut().zip(new).take(j) {
        if d != 1 {
            return None;
        }
        *o = (1, 0);
    }
    Some(out)
}

/// The operand tensor `t` of a MatMul: its own buffer when it has one (row-major), else the
/// buffer its views start from, read in place with the views' strides ([`view_layout`]: a
/// transpose of the last two axes, a head split). `None` when neither buffer is available,
/// the view cannot be read in place, or the sizes disagree.
pub fn operand<'a>(
    tg: &TypedGraph,
    buf: impl Fn(usize) -> Option<&'a [f32]>,
    t: usize,
) -> Option<Operand<'a>> {
    let sh = &tg.tensors[t].shape;
    let r = sh.len();
    if r < 2 {
        return None;
    }
    let (rows, cols) = (sh[r - 2], sh[r - 1]);
    let batch = sh[..r - 2].iter().product();
    if let Some(v) = buf(t) {
        return Operand::row_major(v, batch, rows, cols);
    }
    let (s, axes) = view_layout(tg, t)?;
    Operand::strided(buf(s)?, &axes)
}

/// Workers a row split of `rows` rows uses: one per thread, at least 16 rows each.
pub(crate) fn split_workers(threads: usize, rows: usize) -> usize {
    threads.min(rows / 16).max(1)
}

/// `c (+)= a · b` with `a` (`rows × k`) and `c` (`rows × n`) row-major and `b` shared: the rows
/// split into `workers` blocks, each a sequential faer GEMM over the whole of `b` (faer's own
/// parallel GEMM measured up to 2x slower than one thread on these shapes on a 2-core VM; a
/// row split ran at 1.8x). One block runs on the calling thread.
pub(crate) fn rows_split(
    c: &mut [f32],
    a: &[f32],
    b: MatRef<'_, f32>,
    k: usize,
    n: usize,
    accum: Accum,
    workers: usize,
) {
    let rows = c.len() / n.max(1);
    let block = |cb: &mut [f32], ab: &[f32]| {
        let r = cb.len() / n.max(1);
        matmul(
            MatMut::from_row_major_slice_mut(cb, r, n),
            accum,
            MatRef::from_row_major_slice(ab, r, k),
            b,
            1.0f32,
            Par::Seq,
        );
    };
    if workers > 1 && n > 0 {
        let per = rows.div_ceil(workers);
        c.par_chunks_mut(per * n)
            .zip(a[..rows * k].par_chunks(per * k))
            .for_each(|(cb, ab)| block(cb, ab));
    } else {
        block(c, &a[..rows * k]);
    }
}

/// `out = a · b`, or `out += a · b` with `accumulate` (a bias already in `out`), row-major
/// `[a.batch, a.rows, b.cols]`. `b` has one matrix (shared by the whole batch) or `a.batch`
/// of them.
pub fn matmul_acc(a: Operand, b: Operand, out: &mut [f32], accumulate: bool) -> Result<(), String> {
    let accum = if accumulate {
        Accum::Add
    } else {
        Accum::Replace
    };
    let (batch, m, k, n) = (a.batch, a.rows, a.cols, b.cols);
    if b.rows != k {
        return Err(format!("contraction mismatch: K = {k} vs {}", b.rows));
    }
    if b.batch != 1 && b.batch != batch {
        return Err(format!("batch {} vs {batch}", b.batch));
    }
    let mn = m * n;
    if out.len() != batch * mn {
        return Err(format!(
            "output has {} elements, expected {batch} x {m} x {n}",
            out.len()
        ));
    }
    if out.is_empty() {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            out.fill(0.0);
        }
        return Ok(());
    }
    if mn.saturating_mul(k).saturating_mul(batch) <= SMALL_MACS {
        small_matmul(a, b, out, accumulate);
        return Ok(());
    }
    let threads = rayon::current_num_threads();
    let par = |macs: usize| {
        if threads > 1 && macs >= PAR_MIN_MACS {
            Par::rayon(threads)
        } else {
            Par::Seq
        }
    };
    let macs = mn.saturating_mul(k);
    if b.batch == 1 && a.is_row_major() {
        // Shared right operand: the batch folds into M, one GEMM, its rows split among the
        // workers when it is worth several ([`rows_split`]).
        let rows = batch * m;
        let workers = match par(macs.saturating_mul(batch)) {
            Par::Seq => 1,
            _ => split_workers(threads, rows),
        };
        rows_split(out, a.data, b.mat(0), k, n, accum, workers);
        return Ok(());
    }
    let one = |i: usize, c: &mut [f32], p: Par| {
        let bi = if b.batch == 1 { 0 } else { i };
        let cm = MatMut::from_row_major_slice_mut(c, m, n);
        matmul(cm, accum, a.mat(i), b.mat(bi), 1.0f32, p);
    };
    if threads > 1 && batch >= threads && macs.saturating_mul(batch) >= PAR_MIN_BATCH_MACS {
        // Several products: parallel across the batch, each one sequential (faer's own
        // parallel GEMM on attention's per-head products, 128×64×128, measured 2.2–3×
        // slower at 2 threads than one thread, where the batch split runs at 1.3–1.5×). When
        // the products do not divide evenly among the workers (ViT's 3 heads on 2), each
        // is also split into `parts` blocks of rows, so the last round is not one worker's.
        let parts = if batch % threads == 0 {
            1
        } else {
            threads.min(m / 16).max(1)
        };
        let per = m.div_ceil(parts);
        out.par_chunks_mut(mn).enumerate().for_each(|(i, c)| {
            let bi = if b.batch == 1 { 0 } else { i };
            if parts == 1 {
                return one(i, c, Par::Seq);
            }
            c.par_chunks_mut(per * n).enumerate().for_each(|(j, cb)| {
                let rows = cb.len() / n;
                let cm = MatMut::from_row_major_slice_mut(cb, rows, n);
                let am = a.mat(i).subrows(j * per, rows);
                matmul(cm, accum, am, b.mat(bi), 1.0f32, Par::Seq);
            });
        });
    } else {
        for (i, c) in out.chunks_mut(mn).enumerate() {
            one(i, c, par(macs));
        }
    }
    Ok(())
}

/// `out = a · b` (`+=` with `accumulate`) for tiny products: row i of the output accumulates
/// a[i, q] · row q of b (contiguous over j when b is row-major), in f32 like faer.
fn small_matmul(a: Operand, b: Operand, out: &mut [f32], accumulate: bool) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    for (bi, c) in out.chunks_mut(m * n).enumerate() {
        let ao = a.offset(bi);
        let bo = if b.batch == 1 { 0 } else { b.offset(bi) };
        for (i, y) in c.chunks_mut(n).enumerate() {
            if !accumulate {
                y.fill(0.0);
            }
            for q in 0..k {
                let av = a.data[ao + i * a.rs + q * a.cs];
                let brow = bo + q * b.rs;
                if b.cs == 1 {
                    // Row-major b: contiguous, so the loop vectorizes.
                    for (yv, &bv) in y.iter_mut().zip(&b.data[brow..brow + n]) {
                        *yv += av * bv;
                    }
                } else {
                    for (j, yv) in y.iter_mut().enumerate() {
                        *yv += av * b.data[brow + j * b.cs];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Naive f64 reference for one batch matrix of `a` · `b`.
    fn reference(a: &Operand, b: &Operand) -> Vec<f64> {
        let (m, k, n) = (a.rows, a.cols, b.cols);
        let at = |o: &Operand, bi: usize, i: usize, j: usize| {
            o.data[o.offset(bi) + i * o.rs + j * o.cs] as f64
        };
        let mut out = vec![];
        for bi in 0..a.batch {
            let bb = if b.batch == 1 { 0 } else { bi };
            for i in 0..m {
                for j in 0..n {
                    out.push((0..k).map(|q| at(a, bi, i, q) * at(b, bb, q, j)).sum());
                }
            }
        }
        out
    }

    fn vals(n: usize, seed: u64) -> Vec<f32> {
        crate::exec::random_values(n, seed)
    }

    /// The product against the reference, written over NaN; then added to a prefilled
    /// output (a bias: 0.25 · (i mod 7) at element i) on the same path.
    fn check(a: Operand, b: Operand) {
        let mut out = vec![f32::NAN; a.batch * a.rows * b.cols];
        matmul_acc(a, b, &mut out, false).unwrap();
        let r = reference(&a, &b);
        let scale = r.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (i, (&x, &y)) in out.iter().zip(&r).enumerate() {
            assert!((x as f64 - y).abs() <= 1e-5 * scale, "[{i}] {x} vs {y}");
        }
        let pre = |i: usize| 0.25 * (i % 7) as f64;
        let mut acc: Vec<f32> = (0..out.len()).map(|i| pre(i) as f32).collect();
        matmul_acc(a, b, &mut acc, true).unwrap();
        for (i, (&x, &y)) in acc.iter().zip(&r).enumerate() {
            assert!(
                (x as f64 - y - pre(i)).abs() <= 1e-5 * (scale + 2.0),
                "acc [{i}] {x} vs {y}"
            );
        }
    }

    #[test]
    fn transposed_view_by_hand() {
        // s = [[1, 2, 3], [4, 5, 6]] (2 x 3); t = sᵀ (3 x 2) read in place.
        // a = [[1, 1, 1]] (1 x 3): a · t = [1+2+3, 4+5+6] = [6, 15].
        let s = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let t = Operand::transposed(&s, 1, 3, 2).unwrap();
        let a = [1.0f32; 3];
        let mut out = [0f32; 2];
        matmul_acc(Operand::row_major(&a, 1, 1, 3).unwrap(), t, &mut out, false).unwrap();
        assert_eq!(out, [6.0, 15.0]);
    }

    #[test]
    fn layouts_and_batches_match_the_reference() {
        // (5, 7, 3): at most SMALL_MACS, the plain loop; (37, 53, 29): faer.
        for ((m, k, n), batch) in [(5, 7, 3), (37, 53, 29)]
            .into_iter()
            .flat_map(|d| [1usize, 3, 8].map(|b| (d, b)))
        {
            let a = vals(batch * m * k, 1);
            let at = vals(batch * m * k, 2);
            let b = vals(batch * k * n, 3);
            let b2 = vals(k * n, 4);
            let ra = Operand::row_major(&a, batch, m, k).unwrap();
            let ta = Operand::transposed(&at, batch, m, k).unwrap();
            let rb = Operand::row_major(&b, batch, k, n).unwrap();
            let tb = Operand::transposed(&b, batch, k, n).unwrap();
            let shared = Operand::row_major(&b2, 1, k, n).unwrap();
            let shared_t = Operand::transposed(&b2, 1, k, n).unwrap();
            for (x, y) in [
                (ra, rb),
                (ra, tb),
                (ta, rb),
                (ta, tb),
                (ra, shared),
                (ta, shared),
                (ra, shared_t),
            ] {
                check(x, y);
            }
        }
    }

    #[test]
    fn large_products_in_parallel_match_the_reference() {
        // Above PAR_MIN_MACS, on 2 and 3 workers: the shared right operand splits its rows
        // among the workers (2 · 128 = 256 rows into blocks of 128 or 86, the last short);
        // a batched right operand splits the 2 products across 2 workers, and runs each
        // with faer's Par::rayon on 3 (fewer products than workers).
        let (m, k, n) = (128, 96, 100);
        let a = vals(2 * m * k, 5);
        let b = vals(k * n, 6);
        let bb = vals(2 * k * n, 7);
        for threads in [2, 3] {
            crate::exec::with_threads(threads, || {
                check(
                    Operand::row_major(&a, 2, m, k).unwrap(),
                    Operand::row_major(&b, 1, k, n).unwrap(),
                );
                check(
                    Operand::row_major(&a, 2, m, k).unwrap(),
                    Operand::transposed(&bb, 2, k, n).unwrap(),
                );
            })
            .unwrap();
        }
    }

    #[test]
    fn products_that_do_not_divide_among_the_workers_split_their_rows() {
        // 3 products of 64×64×64 (262 Ki multiply-adds each) on 2 workers: each product's
        // rows split in two blocks; A row-major and A read transposed in place (strided
        // rows), B batched.
        let (m, k, n) = (64, 64, 64);
        let a = vals(3 * m * k, 11);
        let b = vals(3 * k * n, 12);
        crate::exec::with_threads(2, || {
            check(
                Operand::row_major(&a, 3, m, k).unwrap(),
                Operand::row_major(&b, 3, k, n).unwrap(),
            );
            check(
                Operand::transposed(&a, 3, m, k).unwrap(),
                Operand::row_major(&b, 3, k, n).unwrap(),
            );
        })
        .unwrap();
    }

    /// Regrouping by hand: a contiguous [6] splits into [2, 3] (strides 3, 1); the transpose
    /// of a [2, 3] (axes (3, 1), (2, 3)) cannot merge into [6] but takes a trailing 1; the
    /// head split [S·H·D] → [S, H, D] of a stored row keeps the row's strides.
    #[test]
    fn regroup_splits_and_merges_only_contiguous_axes() {
        assert_eq!(regroup(&[(6, 1)], &[2, 3]), Some(vec![(2, 3), (3, 1)]));
        assert_eq!(regroup(&[(3, 1), (2, 3)], &[6]), None);
        assert_eq!(
            regroup(&[(3, 1), (2, 3)], &[3, 2, 1]).map(|v| v[..2].to_vec()),
            Some(vec![(3, 1), (2, 3)])
        );
        // [5, 12] rows of a [5, 12] tensor → [5, 3, 4]: (5, 12), (3, 4), (4, 1).
        assert_eq!(
            regroup(&[(5, 12), (12, 1)], &[5, 3, 4]),
            Some(vec![(5, 12), (3, 4), (4, 1)])
        );
        // Merging back a split that a transpose reordered: [3, 5, 4] with strides (4, 12,
        // 1) (a head split's transpose) → [3, 20] straddles the non-contiguous S and D.
        assert_eq!(regroup(&[(3, 4), (5, 12), (4, 1)], &[3, 20]), None);
        assert_eq!(regroup(&[(6, 1)], &[4]), None, "element counts differ");
    }

    /// A head split read in place: q stored [B, S, H, D], the view [B, H, S, D] (Transpose
    /// [0, 2, 1, 3] of it) as the left operand and the keys' [B, H, D, S] (Transpose [0, 2,
    /// 3, 1]) as the right: the products equal those of copies made by explicit index
    /// arithmetic.
    #[test]
    fn head_split_views_are_read_in_place() {
        // (2, 5, 3, 4): 600 multiply-adds, the plain loop; (2, 40, 3, 16): faer.
        for (bsz, sq, h, d) in [(2usize, 5usize, 3usize, 4usize), (2, 40, 3, 16)] {
            head_split_case(bsz, sq, h, d);
        }
    }

    fn head_split_case(bsz: usize, sq: usize, h: usize, d: usize) {
        let q = vals(bsz * sq * h * d, 21);
        let kk = vals(bsz * sq * h * d, 22);
        let at =
            |x: &[f32], b: usize, s: usize, hh: usize, e: usize| x[((b * sq + s) * h + hh) * d + e];
        // Copies: qh[b, h, s, e] = q[b, s, h, e]; kt[b, h, e, s] = k[b, s, h, e].
        let mut qh = vec![];
        let mut kt = vec![];
        for b in 0..bsz {
            for hh in 0..h {
                for s in 0..sq {
                    for e in 0..d {
                        qh.push(at(&q, b, s, hh, e));
                    }
                }
                for e in 0..d {
                    for s in 0..sq {
                        kt.push(at(&kk, b, s, hh, e));
                    }
                }
            }
        }
        // Strides of the stored [B, S, H, D]: (S·H·D, H·D, D, 1).
        let (sb, ss, sh) = (sq * h * d, h * d, d);
        let qv = Operand::strided(&q, &[(bsz, sb), (h, sh), (sq, ss), (d, 1)]).unwrap();
        let kv = Operand::strided(&kk, &[(bsz, sb), (h, sh), (d, 1), (sq, ss)]).unwrap();
        assert!(!qv.is_row_major());
        let mut got = vec![0f32; bsz * h * sq * sq];
        matmul_acc(qv, kv, &mut got, false).unwrap();
        let mut want = vec![0f32; got.len()];
        let (qc, kc) = (
            Operand::row_major(&qh, bsz * h, sq, d).unwrap(),
            Operand::row_major(&kt, bsz * h, d, sq).unwrap(),
        );
        matmul_acc(qc, kc, &mut want, false).unwrap();
        let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
        for (x, y) in got.iter().zip(&want) {
            assert!((x - y).abs() <= 1e-6 * scale, "{x} vs {y}");
        }
        check(qc, kc);
        // An offset past the end is refused.
        assert!(
            Operand::strided(&q[..q.len() - 1], &[(bsz, sb), (h, sh), (sq, ss), (d, 1)]).is_none()
        );
    }

    #[test]
    fn empty_and_k_zero() {
        let mut out = vec![7.0f32; 6];
        let a: [f32; 0] = [];
        let (a2, b3) = (
            Operand::row_major(&a, 1, 2, 0).unwrap(),
            Operand::row_major(&a, 1, 0, 3).unwrap(),
        );
        matmul_acc(a2, b3, &mut out, true).unwrap();
        assert_eq!(
            out,
            vec![7.0; 6],
            "K = 0 adds nothing to a prefilled output"
        );
        matmul_acc(a2, b3, &mut out, false).unwrap();
        assert_eq!(out, vec![0.0; 6]);
        assert!(Operand::row_major(&a, 1, 2, 3).is_none());
    }
}
