//! The recurrent layer, [`Op::Recurrence`](crate::ir::Op::Recurrence) (ONNX `LSTM` and
//! `GRU` after their input projection, which the graph runs as one MatMul for every step and
//! direction): for each direction, step after step, the recurrent product `h·Rᵀ` (`B × H`
//! by `H × G·H`) added to the step's projected input, then the cell's gates in place
//! (sigmoid and tanh through the Kernels crate's explicit-SIMD `vmath`, the rest plain loops),
//! the new hidden state written straight into the output. One kernel for the whole
//! sequence, as onnxruntime's `LSTM` is: the unrolled graph it replaces ran five copies, a
//! product and a gate kernel per step (255 kernels for a 2-layer bidirectional LSTM of 8
//! steps).
//!
//! The product: with few rows (`B` < [`GEMM_MIN_ROWS`]) or few multiply-adds, each row of
//! `h` times `Rᵀ` as four rows of `Rᵀ` at a time added into the gate row (compiled for
//! AVX-512F and for AVX2 + FMA, at the level `vmath` runs at); larger ones through
//! [`crate::gemm::matmul_acc`]. The two directions of a bidirectional layer run on two threads
//! when there are two workers and enough work ([`PAR_MIN_DIRECTION_MACS`]), each into rows of
//! its own that are then interleaved into the output. Left out: splitting one step's product
//! among threads (a step is well under a microsecond of work at the sizes exported models
//! have; the steps themselves are sequential).

use crate::ir::{RecurrentCell, RecurrentDirection};
use tensorforge_kernels::vmath;

/// Rows of `h` from which a product large enough ([`GEMM_MIN_MACS`]) runs as a GEMM: with
/// fewer, each row streams `Rᵀ` once, as a GEMV does.
pub(super) const GEMM_MIN_ROWS: usize = 8;

/// Multiply-adds from which a product of at least [`GEMM_MIN_ROWS`] rows runs as a GEMM.
pub(super) const GEMM_MIN_MACS: usize = 1 << 16;

/// Multiply-adds of one direction (S·B·H·G·H) from which the two directions of a
/// bidirectional layer run on two threads.
pub(super) const PAR_MIN_DIRECTION_MACS: usize = 1 << 15;

/// The sizes of one recurrence: `S` steps, batch `B`, hidden `H`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dims {
    pub(super) steps: usize,
    pub(super) batch: usize,
    pub(super) hidden: usize,
}

/// Run the recurrence: `xw` `[S, B, D·G·H]`, `rt` `[D, H, G·H]`, `h0` `[D, B, H]`, `extra`
/// LSTM's `c0` `[D, B, H]` or GRU's `Rb_h` `[D, H]`; `out` `[S + F, D, B, H]` (see the op).
/// `scratch` is working memory (one vector per direction), resized here.
#[allow(clippy::too_many_arguments)]
pub(super) fn recurrence(
    cell: RecurrentCell,
    direction: RecurrentDirection,
    finals: bool,
    dims: Dims,
    xw: &[f32],
    rt: &[f32],
    h0: &[f32],
    extra: &[f32],
    out: &mut [f32],
    scratch: &mut [Vec<f32>; 2],
) -> Result<(), String> {
    let Dims {
        steps: s,
        batch: b,
        hidden: h,
    } = dims;
    let dirs = direction.reversed();
    let (g, d) = (cell.gates(), dirs.len());
    let gh = g * h;
    let bh = b * h;
    let rows = s + if finals { cell.states() } else { 0 };
    let want = |what: &str, got: usize, dims: &[usize]| -> Result<(), String> {
        let n = dims
            .iter()
            .try_fold(1usize, |a, &x| a.checked_mul(x))
            .ok_or_else(|| format!("{what}: size overflows"))?;
        if got != n {
            return Err(format!("{what} has {got} values, expected {dims:?}"));
        }
        Ok(())
    };
    want("xw", xw.len(), &[s, b, d, gh])?;
    want("rt", rt.len(), &[d, h, gh])?;
    want("h0", h0.len(), &[d, b, h])?;
    match cell {
        RecurrentCell::Lstm => want("c0", extra.len(), &[d, b, h])?,
        _ => want("Rb_h", extra.len(), &[d, h])?,
    }
    want("output", out.len(), &[rows, d, b, h])?;
    // Each direction into its own rows [S + F, B, H] (in its own scratch), on two threads
    // when there are two directions, two workers and enough work; then interleaved into
    // `out`'s [S + F, D, B, H].
    let macs = s.saturating_mul(b).saturating_mul(h).saturating_mul(gh);
    let (s0, s1) = scratch.split_at_mut(1);
    let (s0, s1) = (&mut s0[0], &mut s1[0]);
    let shape = Layer {
        cell,
        dims,
        dirs: d,
        finals,
    };
    let one = |di: usize, sc: &mut Vec<f32>| {
        let w = Weights {
            xw,
            rt: &rt[di * h * gh..(di + 1) * h * gh],
            h0: &h0[di * bh..(di + 1) * bh],
            extra: match cell {
                RecurrentCell::Lstm => &extra[di * bh..(di + 1) * bh],
                _ => &extra[di * h..(di + 1) * h],
            },
        };
        direction_into(&shape, di, dirs[di], w, sc)
    };
    if d == 2 && rayon::current_num_threads() > 1 && macs >= PAR_MIN_DIRECTION_MACS {
        let (a, c) = rayon::join(|| one(0, s0), || one(1, s1));
        a?;
        c?;
    } else {
        one(0, s0)?;
        if d == 2 {
            one(1, s1)?;
        }
    }
    for (di, sc) in [&*s0, &*s1].into_iter().take(d).enumerate() {
        let ys = &sc[sc.len() - rows * bh..];
        for (t, y) in ys.chunks_exact(bh).enumerate() {
            let at = (t * d + di) * bh;
            out[at..at + bh].copy_from_slice(y);
        }
    }
    Ok(())
}

/// The sizes and cell of one layer.
struct Layer {
    cell: RecurrentCell,
    dims: Dims,
    dirs: usize,
    finals: bool,
}

/// One direction's operands: every step's projections (all directions'), and this
/// direction's `Rᵀ` `[H, G·H]`, `h0` `[B, H]` and `c0` `[B, H]` or `Rb_h` `[H]`.
struct Weights<'a> {
    xw: &'a [f32],
    rt: &'a [f32],
    h0: &'a [f32],
    extra: &'a [f32],
}

/// Direction `di` of the layer (`reverse`: last step first) into the last `(S + F)·B·H`
/// values of `scratch` (resized here), row `t` the hidden state after step `t`.
fn direction_into(
    layer: &Layer,
    di: usize,
    reverse: bool,
    w: Weights,
    scratch: &mut Vec<f32>,
) -> Result<(), String> {
    let Layer {
        cell,
        dims,
        dirs: d,
        finals,
    } = *layer;
    let Dims {
        steps: s,
        batch: b,
        hidden: h,
    } = dims;
    let (gh, bh) = (cell.gates() * h, b * h);
    let rows = s + if finals { cell.states() } else { 0 };
    let (xw, r, extra) = (w.xw, w.rt, w.extra);
    // Pre-activations [B, G·H], activations [B, G·H], h [B, H], c or the h gate's product
    // [B, H], one more [B, H], then the rows written.
    scratch.clear();
    scratch.resize(2 * b * gh + 3 * bh + rows * bh, 0.0);
    let (gates, rest) = scratch.split_at_mut(b * gh);
    let (act, rest) = rest.split_at_mut(b * gh);
    let (hs, rest) = rest.split_at_mut(bh);
    let (cs, rest) = rest.split_at_mut(bh);
    let (tmp, ys) = rest.split_at_mut(bh);
    let isa = Isa::detect();
    let mut spare = vec![];
    hs.copy_from_slice(w.h0);
    if cell == RecurrentCell::Lstm {
        cs.copy_from_slice(extra);
    }
    for step in 0..s {
        let t = if reverse { s - 1 - step } else { step };
        for bi in 0..b {
            let at = ((t * b + bi) * d + di) * gh;
            gates[bi * gh..(bi + 1) * gh].copy_from_slice(&xw[at..at + gh]);
        }
        match cell {
            RecurrentCell::Lstm => {
                product(isa, hs, b, h, r, gh, 0, gh, gates, gh, &mut spare)?;
                for (gr, ar) in gates.chunks_exact(gh).zip(act.chunks_exact_mut(gh)) {
                    vmath::sigmoid(&gr[..3 * h], &mut ar[..3 * h]);
                    vmath::tanh(&gr[3 * h..], &mut ar[3 * h..]);
                }
                for bi in 0..b {
                    let gr = &act[bi * gh..(bi + 1) * gh];
                    let (i, rest) = gr.split_at(h);
                    let (o, rest) = rest.split_at(h);
                    let (f, cand) = rest.split_at(h);
                    let c = &mut cs[bi * h..(bi + 1) * h];
                    // c = f ⊙ c + i ⊙ c̃, as the unrolled graph's Mul, Mul, Add.
                    for k in 0..h {
                        c[k] = f[k] * c[k] + i[k] * cand[k];
                    }
                    let th = &mut tmp[bi * h..(bi + 1) * h];
                    vmath::tanh(c, th);
                    let hr = &mut hs[bi * h..(bi + 1) * h];
                    for k in 0..h {
                        hr[k] = o[k] * th[k];
                    }
                }
            }
            RecurrentCell::Gru | RecurrentCell::GruLinearBeforeReset => {
                let lbr = cell == RecurrentCell::GruLinearBeforeReset;
                // z and r: the first 2·H columns.
                product(isa, hs, b, h, r, gh, 0, 2 * h, gates, gh, &mut spare)?;
                for (gr, ar) in gates.chunks_exact(gh).zip(act.chunks_exact_mut(gh)) {
                    vmath::sigmoid(&gr[..2 * h], &mut ar[..2 * h]);
                }
                // The h gate's product: h·R_hᵀ (linear_before_reset) or (r ⊙ h)·R_hᵀ,
                // into `cs` (a GRU has no cell state), then Rb_h added.
                let src: &[f32] = if lbr {
                    hs
                } else {
                    for bi in 0..b {
                        let rg = &act[bi * gh + h..bi * gh + 2 * h];
                        let (hr, dst) = (&hs[bi * h..(bi + 1) * h], &mut tmp[bi * h..][..h]);
                        for k in 0..h {
                            dst[k] = rg[k] * hr[k];
                        }
                    }
                    tmp
                };
                cs.fill(0.0);
                product(isa, src, b, h, r, gh, 2 * h, h, cs, h, &mut spare)?;
                let rb = extra;
                for bi in 0..b {
                    let gr = &gates[bi * gh..(bi + 1) * gh];
                    let ar = &act[bi * gh..(bi + 1) * gh];
                    let hp = &mut cs[bi * h..(bi + 1) * h];
                    for k in 0..h {
                        let m = hp[k] + rb[k];
                        // x_h + r ⊙ (h·R_hᵀ + Rb_h), or x_h + ((r ⊙ h)·R_hᵀ + Rb_h).
                        hp[k] = gr[2 * h + k] + if lbr { ar[h + k] * m } else { m };
                    }
                    let th = &mut tmp[bi * h..(bi + 1) * h];
                    vmath::tanh(hp, th);
                    let hr = &mut hs[bi * h..(bi + 1) * h];
                    for k in 0..h {
                        let z = ar[k];
                        // (1 − z) ⊙ h̃ + z ⊙ h, as the unrolled graph's Sub, Mul, Mul, Add.
                        hr[k] = (1.0 - z) * th[k] + z * hr[k];
                    }
                }
            }
        }
        ys[t * bh..(t + 1) * bh].copy_from_slice(hs);
    }
    if finals {
        ys[s * bh..(s + 1) * bh].copy_from_slice(hs);
        if cell == RecurrentCell::Lstm {
            ys[(s + 1) * bh..(s + 2) * bh].copy_from_slice(cs);
        }
    }
    Ok(())
}

/// Which compiled copy of the small product runs.
#[derive(Clone, Copy)]
enum Isa {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Plain,
}

impl Isa {
    /// The level `vmath` runs at (so `TENSORFORGE_SIMD=avx2` caps this product too).
    fn detect() -> Isa {
        match vmath::level() {
            #[cfg(target_arch = "x86_64")]
            vmath::Level::Avx512 => Isa::Avx512,
            #[cfg(target_arch = "x86_64")]
            vmath::Level::Avx2 => Isa::Avx2,
            _ => Isa::Plain,
        }
    }
}

/// `c[i, ..n] += a[i, ..k] · w[.., col0 .. col0 + n]` for the `m` rows of `a` (`k` apart),
/// `w` row-major with rows `ldw` apart and `c`'s rows `ldc` apart. `spare` is working memory
/// of the GEMM path.
#[allow(clippy::too_many_arguments)]
fn product(
    isa: Isa,
    a: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    ldw: usize,
    col0: usize,
    n: usize,
    c: &mut [f32],
    ldc: usize,
    spare: &mut Vec<f32>,
) -> Result<(), String> {
    if m >= GEMM_MIN_ROWS && m.saturating_mul(k).saturating_mul(n) >= GEMM_MIN_MACS {
        let lhs = crate::gemm::Operand::row_major(&a[..m * k], 1, m, k)
            .ok_or("the state is not an m × k matrix")?;
        let rhs = crate::gemm::Operand::strided(&w[col0..], &[(k, ldw), (n, 1)])
            .ok_or("Rᵀ is not a k × n view")?;
        spare.clear();
        spare.resize(m * n, 0.0);
        crate::gemm::matmul_acc(lhs, rhs, spare, false)?;
        for (cr, pr) in c.chunks_mut(ldc).zip(spare.chunks_exact(n)) {
            for (y, &p) in cr[..n].iter_mut().zip(pr) {
                *y += p;
            }
        }
        return Ok(());
    }
    match isa {
        // SAFETY: `Isa::detect` found the features each copy is compiled for.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { rows_avx512(a, m, k, w, ldw, col0, n, c, ldc) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { rows_avx2(a, m, k, w, ldw, col0, n, c, ldc) },
        Isa::Plain => rows::<false>(a, m, k, w, ldw, col0, n, c, ldc),
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_avx512(
    a: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    ldw: usize,
    col0: usize,
    n: usize,
    c: &mut [f32],
    ldc: usize,
) {
    rows::<true>(a, m, k, w, ldw, col0, n, c, ldc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_avx2(
    a: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    ldw: usize,
    col0: usize,
    n: usize,
    c: &mut [f32],
    ldc: usize,
) {
    rows::<true>(a, m, k, w, ldw, col0, n, c, ldc)
}

/// The small product's loops: per row of `a`, four rows of `w` at a time added into the row
/// of `c` (one load and store of `c` per four multiply-adds), fused multiply-adds with `FMA`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn rows<const FMA: bool>(
    a: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    ldw: usize,
    col0: usize,
    n: usize,
    c: &mut [f32],
    ldc: usize,
) {
    let madd = |x: f32, y: f32, z: f32| if FMA { x.mul_add(y, z) } else { x * y + z };
    let wr = |q: usize| &w[q * ldw + col0..q * ldw + col0 + n];
    for i in 0..m {
        let ar = &a[i * k..(i + 1) * k];
        let cr = &mut c[i * ldc..i * ldc + n];
        let mut q = 0;
        while q + 4 <= k {
            let (a0, a1, a2, a3) = (ar[q], ar[q + 1], ar[q + 2], ar[q + 3]);
            let (w0, w1, w2, w3) = (wr(q), wr(q + 1), wr(q + 2), wr(q + 3));
            for j in 0..n {
                cr[j] = madd(
                    a3,
                    w3[j],
                    madd(a2, w2[j], madd(a1, w1[j], madd(a0, w0[j], cr[j]))),
                );
            }
            q += 4;
        }
        while q < k {
            let (a0, w0) = (ar[q], wr(q));
            for j in 0..n {
                cr[j] = madd(a0, w0[j], cr[j]);
            }
            q += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorforge_core::rng::SplitMix64;

    fn sig(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// The ONNX formulas in f64, one loop per step, written from the operator's
    /// specification (not from the kernel): `W`-side projections already in `xw`.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        cell: RecurrentCell,
        direction: RecurrentDirection,
        dims: Dims,
        xw: &[f32],
        rt: &[f32],
        h0: &[f32],
        extra: &[f32],
    ) -> Vec<f64> {
        let Dims {
            steps: s,
            batch: b,
            hidden: h,
        } = dims;
        let dirs = direction.reversed();
        let (g, d) = (cell.gates(), dirs.len());
        let gh = g * h;
        let rows = s + cell.states();
        let mut out = vec![0f64; rows * d * b * h];
        for (di, &rev) in dirs.iter().enumerate() {
            for bi in 0..b {
                let mut hv: Vec<f64> = (0..h).map(|k| h0[(di * b + bi) * h + k] as f64).collect();
                let mut cv: Vec<f64> = match cell {
                    RecurrentCell::Lstm => (0..h)
                        .map(|k| extra[(di * b + bi) * h + k] as f64)
                        .collect(),
                    _ => vec![0.0; h],
                };
                for step in 0..s {
                    let t = if rev { s - 1 - step } else { step };
                    let x = |col: usize| xw[((t * b + bi) * d + di) * gh + col] as f64;
                    // (v · Rᵀ)[col] for a state row v.
                    let rdot = |v: &[f64], col: usize| -> f64 {
                        (0..h)
                            .map(|q| v[q] * rt[(di * h + q) * gh + col] as f64)
                            .sum()
                    };
                    let mut nh = vec![0f64; h];
                    for j in 0..h {
                        match cell {
                            RecurrentCell::Lstm => {
                                let gi = sig(x(j) + rdot(&hv, j));
                                let go = sig(x(h + j) + rdot(&hv, h + j));
                                let gf = sig(x(2 * h + j) + rdot(&hv, 2 * h + j));
                                let gc = (x(3 * h + j) + rdot(&hv, 3 * h + j)).tanh();
                                cv[j] = gf * cv[j] + gi * gc;
                                nh[j] = go * cv[j].tanh();
                            }
                            _ => {
                                let z = sig(x(j) + rdot(&hv, j));
                                let rb = extra[di * h + j] as f64;
                                let hh = if cell == RecurrentCell::GruLinearBeforeReset {
                                    let r = sig(x(h + j) + rdot(&hv, h + j));
                                    (x(2 * h + j) + r * (rdot(&hv, 2 * h + j) + rb)).tanh()
                                } else {
                                    let rh: Vec<f64> = (0..h)
                                        .map(|q| sig(x(h + q) + rdot(&hv, h + q)) * hv[q])
                                        .collect();
                                    (x(2 * h + j) + rdot(&rh, 2 * h + j) + rb).tanh()
                                };
                                nh[j] = (1.0 - z) * hh + z * hv[j];
                            }
                        }
                    }
                    hv = nh;
                    for j in 0..h {
                        out[((t * d + di) * b + bi) * h + j] = hv[j];
                    }
                }
                for j in 0..h {
                    out[((s * d + di) * b + bi) * h + j] = hv[j];
                    if cell == RecurrentCell::Lstm {
                        out[(((s + 1) * d + di) * b + bi) * h + j] = cv[j];
                    }
                }
            }
        }
        out
    }

    fn check(cell: RecurrentCell, direction: RecurrentDirection, dims: Dims) {
        let mut rng = SplitMix64::new(7);
        let mut vals = |n: usize, scale: f32| -> Vec<f32> {
            (0..n)
                .map(|_| (rng.next_f64() as f32 * 2.0 - 1.0) * scale)
                .collect()
        };
        let d = direction.reversed().len();
        let (s, b, h) = (dims.steps, dims.batch, dims.hidden);
        let gh = cell.gates() * h;
        let xw = vals(s * b * d * gh, 1.0);
        let rt = vals(d * h * gh, 0.5);
        let h0 = vals(d * b * h, 1.0);
        let extra = match cell {
            RecurrentCell::Lstm => vals(d * b * h, 1.0),
            _ => vals(d * h, 0.5),
        };
        let want = reference(cell, direction, dims, &xw, &rt, &h0, &extra);
        for finals in [true, false] {
            let rows = s + if finals { cell.states() } else { 0 };
            let mut out = vec![f32::NAN; rows * d * b * h];
            let mut scratch = [vec![], vec![]];
            recurrence(
                cell,
                direction,
                finals,
                dims,
                &xw,
                &rt,
                &h0,
                &extra,
                &mut out,
                &mut scratch,
            )
            .unwrap();
            for (i, (&got, &w)) in out.iter().zip(&want).enumerate() {
                assert!(
                    (got as f64 - w).abs() <= 2e-5,
                    "{cell:?} {direction:?} {dims:?} finals {finals} [{i}]: {got} vs {w}"
                );
            }
        }
    }

    #[test]
    fn every_cell_and_direction_matches_the_onnx_formulas() {
        use RecurrentCell::*;
        use RecurrentDirection::*;
        // Hidden 5 (not a multiple of 4 or of a vector), 32, and a batch of 9 rows with
        // 64 hidden (9 · 64 · 256 multiply-adds ≥ 2¹⁶: the GEMM path).
        for cell in [Lstm, Gru, GruLinearBeforeReset] {
            for dir in [Forward, Reverse, Bidirectional] {
                for (s, b, h) in [(3, 2, 5), (4, 1, 32), (2, 9, 64)] {
                    check(
                        cell,
                        dir,
                        Dims {
                            steps: s,
                            batch: b,
                            hidden: h,
                        },
                    );
                }
            }
        }
    }

    #[test]
    fn the_small_product_at_every_width() {
        // 3 rows of 7 (four-row steps and a remainder) times columns 2..13 of a 7 × 16
        // matrix, added to what c holds; against the sum in f64.
        let (m, k, ldw, col0, n) = (3, 7, 16, 2, 11);
        let a = SplitMix64::f32_pm1_vec(1, m * k);
        let w = SplitMix64::f32_pm1_vec(2, k * ldw);
        let c0 = SplitMix64::f32_pm1_vec(3, m * n);
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
        let mut isas = vec![Isa::Plain];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                isas.push(Isa::Avx2);
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                isas.push(Isa::Avx512);
            }
        }
        for isa in isas {
            let mut c = c0.clone();
            product(isa, &a, m, k, &w, ldw, col0, n, &mut c, n, &mut vec![]).unwrap();
            for i in 0..m {
                for j in 0..n {
                    let want = c0[i * n + j] as f64
                        + (0..k)
                            .map(|q| a[i * k + q] as f64 * w[q * ldw + col0 + j] as f64)
                            .sum::<f64>();
                    assert!((c[i * n + j] as f64 - want).abs() < 1e-5, "[{i}, {j}]");
                }
            }
        }
    }

    #[test]
    fn one_lstm_step_by_hand() {
        // H = 1, B = 1, one step, zero state: g = xw = [i, o, f, c] = [0, 0, 0, 0] + 0.
        // i = o = f = σ(0) = 0.5, c̃ = tanh(0) = 0: c = 0.5·c0 + 0.5·0 with c0 = 2 → 1,
        // h = 0.5 · tanh(1) = 0.5 · 0.761594… = 0.380797…
        let mut out = vec![0.0; 3];
        recurrence(
            RecurrentCell::Lstm,
            RecurrentDirection::Forward,
            true,
            Dims {
                steps: 1,
                batch: 1,
                hidden: 1,
            },
            &[0.0; 4],
            &[0.0; 4],
            &[0.0],
            &[2.0],
            &mut out,
            &mut [vec![], vec![]],
        )
        .unwrap();
        assert!((out[0] - 0.380_797).abs() < 1e-6, "{out:?}");
        assert_eq!(out[0], out[1]);
        assert!((out[2] - 1.0).abs() < 1e-6, "{out:?}");
    }
}
