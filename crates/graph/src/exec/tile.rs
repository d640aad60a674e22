//! Register-tiled evaluation of pure elementwise kernels (AVX2): each tile of
//! [`TILE`] elements is held in eight `ymm` registers while the whole chain of ops is
//! applied to it, so an element makes one trip from memory and back instead of one trip
//! through L1 per op. The kernel is translated once into an accumulator program: each node
//! computes into the accumulator; its other operand is a scalar constant, an input read in
//! place, or a value spilled to a small per-thread scratch slot (only for values read again
//! after the next node). Ops without a vector form here (transcendentals, bf16 casts,
//! logaddexp) are applied to the tile through the same scalar loops as the block path, so the
//! two paths give bit-identical results.

use super::blocks::{Bind, NodePlan, SendPtr};
use super::elementwise::{binary_apply, unary_apply, Src};
use super::program::exec_err;
use crate::error::Result;
use crate::fusion::Kernel;
use crate::ir::{BinaryFn, DType, Op, TypedGraph, UnaryFn};
use rayon::prelude::*;
use std::arch::x86_64::*;

/// Vectors of 8 lanes per tile.
const V: usize = 8;
/// Elements per tile.
pub(super) const TILE: usize = 8 * V;
/// Elements per parallel task (rayon granularity).
const TASK: usize = 1 << 15;

#[derive(Clone, Copy, PartialEq)]
enum X {
    Acc,
    Slot(usize),
    Const(f32),
    Ext(usize),
}

#[derive(Clone, Copy)]
enum B {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    /// Max / Min against a non-NaN constant second operand: one instruction.
    MaxC,
    MinC,
}

#[derive(Clone, Copy)]
enum U {
    Neg,
    Relu,
    Sqrt,
    Rsqrt,
    Square,
    Dequant(f32, f32),
}

#[derive(Clone, Copy)]
enum Ins {
    Load(X),
    Un(U),
    /// Unary op of node `plans[i]` through the scalar loop.
    UnScalar(usize),
    /// `acc = f(acc, acc)`.
    BinAcc(B),
    /// `acc = f(acc, c)`; the `R` forms are `f(operand, acc)`.
    BinC(B, f32),
    BinCR(B, f32),
    /// Operand from a spill slot.
    BinS(B, usize),
    BinSR(B, usize),
    /// Operand read in place from input `ext[j]`.
    BinE(B, usize),
    BinER(B, usize),
    /// Binary op of node `plans[i]` through the scalar loop.
    BinScalar(usize, X, bool),
    Spill(usize),
    Store(usize),
}

pub(super) struct Prog<'a> {
    ins: Vec<Ins>,
    ops: Vec<&'a Op>,
    ext: Vec<&'a [f32]>,
    nslots: usize,
    n: usize,
}

/// Software prefetch distance for inputs read in place, elements ahead of the tile
/// (`TF_PREFETCH_ELEMS` overrides it for tuning runs; 0 turns it off).
fn pf_dist() -> usize {
    static B: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *B.get_or_init(|| {
        std::env::var("TF_PREFETCH_ELEMS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(256)
    })
}

pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// The accumulator program of a pure elementwise kernel, or None when some node needs
/// the general block evaluator (per-row or gathered operands, non-elementwise ops).
pub(super) fn compile<'a>(
    tg: &'a TypedGraph,
    bufs: &'a super::program::Bufs<'a>,
    plans: &[NodePlan],
    k: &Kernel,
) -> Result<Option<Prog<'a>>> {
    let n = (k.rows as usize).saturating_mul((k.cols as usize).max(1));
    let mut last_use = vec![0usize; plans.len()];
    for (pi, p) in plans.iter().enumerate() {
        let op = &tg.nodes[p.node].op;
        if p.per_row
            || tg.tensors[tg.node_outputs[p.node][0]].numel as usize != n
            || !(op.is_unary() || op.is_binary() || matches!(op, Op::Broadcast { .. }))
            || p.binds.len() != if op.is_binary() { 2 } else { 1 }
        {
            return Ok(None);
        }
        for b in &p.binds {
            match b {
                Bind::Internal { pos, per_row, .. } => {
                    if *per_row {
                        return Ok(None);
                    }
                    last_use[*pos] = last_use[*pos].max(pi);
                }
                Bind::Flat(_) | Bind::Scalar(_) => {}
                _ => return Ok(None),
            }
        }
    }
    let mut prog = Prog {
        ins: vec![],
        ops: plans.iter().map(|p| &tg.nodes[p.node].op).collect(),
        ext: vec![],
        nslots: plans.iter().map(|p| p.slot + 1).max().unwrap_or(1),
        n,
    };
    let mut ext_t: Vec<usize> = vec![];
    for (pi, p) in plans.iter().enumerate() {
        let op = prog.ops[pi];
        let mut xs = vec![];
        for b in &p.binds {
            xs.push(match b {
                Bind::Internal { pos, slot, .. } => {
                    if *pos + 1 == pi {
                        X::Acc
                    } else {
                        X::Slot(*slot)
                    }
                }
                Bind::Flat(t) => {
                    let v = bufs[*t].as_deref().unwrap_or(&[]);
                    if v.len() < n {
                        return Err(exec_err(tg, p.node, "input shorter than the kernel"));
                    }
                    let j = ext_t.iter().position(|e| e == t).unwrap_or_else(|| {
                        ext_t.push(*t);
                        prog.ext.push(&v[..n]);
                        ext_t.len() - 1
                    });
                    X::Ext(j)
                }
                Bind::Scalar(t) => X::Const(
                    bufs[*t]
                        .as_deref()
                        .and_then(|v| v.first())
                        .copied()
                        .unwrap_or(0.0),
                ),
                _ => unreachable!("checked above"),
            });
        }
        if op.is_binary() {
            let (x, rev) = if xs[0] == X::Acc {
                (xs[1], false)
            } else if xs[1] == X::Acc {
                (xs[0], true)
            } else {
                prog.ins.push(Ins::Load(xs[0]));
                (xs[1], false)
            };
            let const_ok = matches!(x, X::Const(c) if !c.is_nan()) && !rev;
            let b = match op {
                Op::Binary { f: BinaryFn::Add } => Some(B::Add),
                Op::Binary { f: BinaryFn::Sub } => Some(B::Sub),
                Op::Binary { f: BinaryFn::Mul } => Some(B::Mul),
                Op::Binary { f: BinaryFn::Div } => Some(B::Div),
                Op::Binary { f: BinaryFn::Max } if const_ok => Some(B::MaxC),
                Op::Binary { f: BinaryFn::Min } if const_ok => Some(B::MinC),
                Op::Binary { f: BinaryFn::Max } => Some(B::Max),
                Op::Binary { f: BinaryFn::Min } => Some(B::Min),
                _ => None,
            };
            prog.ins.push(match (b, x, rev) {
                (None, x, rev) => Ins::BinScalar(pi, x, rev),
                (Some(b), X::Acc, _) => Ins::BinAcc(b),
                (Some(b), X::Const(c), false) => Ins::BinC(b, c),
                (Some(b), X::Const(c), true) => Ins::BinCR(b, c),
                (Some(b), X::Slot(j), false) => Ins::BinS(b, j),
                (Some(b), X::Slot(j), true) => Ins::BinSR(b, j),
                (Some(b), X::Ext(j), false) => Ins::BinE(b, j),
                (Some(b), X::Ext(j), true) => Ins::BinER(b, j),
            });
        } else {
            if xs[0] != X::Acc {
                prog.ins.push(Ins::Load(xs[0]));
            }
            let u = match op {
                Op::Broadcast { .. } => None,
                Op::Cast {
                    to: DType::Fp32 | DType::Tf32 | DType::Fp8,
                } => None,
                Op::Unary { f: UnaryFn::Neg } => Some(Some(U::Neg)),
                Op::Unary { f: UnaryFn::Relu } => Some(Some(U::Relu)),
                Op::Unary { f: UnaryFn::Sqrt } => Some(Some(U::Sqrt)),
                Op::Unary { f: UnaryFn::Rsqrt } => Some(Some(U::Rsqrt)),
                Op::Pow { exponent } if *exponent as f32 == 2.0 => Some(Some(U::Square)),
                Op::Dequantize {
                    scale, zero_point, ..
                } => Some(Some(U::Dequant(*scale as f32, *zero_point as f32))),
                _ => Some(None),
            };
            match u {
                None => {}
                Some(Some(u)) => prog.ins.push(Ins::Un(u)),
                Some(None) => prog.ins.push(Ins::UnScalar(pi)),
            }
        }
        if last_use[pi] > pi + 1 {
            prog.ins.push(Ins::Spill(p.slot));
        }
        if let Some(oi) = p.store {
            prog.ins.push(Ins::Store(oi));
        }
    }
    Ok(Some(prog))
}

/// Run `prog` over all elements, outputs to `ptrs` (each at least `prog.n` long).
pub(super) fn run(prog: &Prog, ptrs: &[(SendPtr, usize)]) -> Result<()> {
    let n = prog.n;
    if ptrs.iter().any(|p| p.1 < n) {
        return Err(crate::error::GraphError::Exec {
            node: String::new(),
            op: "elementwise".into(),
            detail: "output buffer shorter than the kernel".into(),
        });
    }
    let tasks = n.div_ceil(TASK);
    let work = |slots: &mut Vec<[__m256; V]>, t: usize| {
        let (e0, e1) = (t * TASK, ((t + 1) * TASK).min(n));
        // SAFETY: AVX2 is present (`available` was checked by the caller); every input
        // in `ext` holds `n` elements and every output `ptrs[i].1 >= n` (checked above);
        // tasks cover disjoint element ranges of the outputs.
        unsafe { run_range(prog, ptrs, slots, e0, e1) }
    };
    // SAFETY: all-zero bits are a valid __m256.
    let init = || vec![unsafe { std::mem::zeroed::<[__m256; V]>() }; prog.nslots];
    if n >= 1 << 16 && tasks > 1 {
        (0..tasks).into_par_iter().for_each_init(init, work);
    } else {
        let mut s = init();
        for t in 0..tasks {
            work(&mut s, t);
        }
    }
    Ok(())
}

#[target_feature(enable = "avx2")]
unsafe fn run_range(
    prog: &Prog,
    ptrs: &[(SendPtr, usize)],
    slots: &mut [[__m256; V]],
    e0: usize,
    e1: usize,
) {
    let ext: Vec<*const f32> = prog.ext.iter().map(|v| v.as_ptr()).collect();
    let outs: Vec<*mut f32> = ptrs.iter().map(|p| p.0 .0).collect();
    let mut off = e0;
    let pf = pf_dist();
    while off + TILE <= e1 {
        if pf > 0 && off + pf + TILE <= e1 {
            for p in &ext {
                for l in 0..TILE / 16 {
                    _mm_prefetch::<_MM_HINT_T0>(p.add(off + pf + 16 * l) as *const i8);
                }
            }
        }
        run_tile(prog, &ext, &outs, off, slots);
        off += TILE;
    }
    if off < e1 {
        // Tail: padded copies of the inputs and outputs.
        let m = e1 - off;
        let mut ein = vec![[0f32; TILE]; ext.len()];
        let mut eout = vec![[0f32; TILE]; outs.len()];
        for (d, s) in ein.iter_mut().zip(&prog.ext) {
            d[..m].copy_from_slice(&s[off..e1]);
        }
        let ep: Vec<*const f32> = ein.iter().map(|v| v.as_ptr()).collect();
        let op: Vec<*mut f32> = eout.iter_mut().map(|v| v.as_mut_ptr()).collect();
        run_tile(prog, &ep, &op, 0, slots);
        for (s, d) in eout.iter().zip(&outs) {
            std::ptr::copy_nonoverlapping(s.as_ptr(), d.add(off), m);
        }
    }
}

#[inline(always)]
unsafe fn fetch(
    x: X,
    acc: &[__m256; V],
    ext: &[*const f32],
    off: usize,
    slots: &[[__m256; V]],
) -> [__m256; V] {
    match x {
        X::Acc => *acc,
        X::Slot(s) => slots[s],
        X::Const(c) => [_mm256_set1_ps(c); V],
        X::Ext(j) => {
            let p = ext[j].add(off);
            let mut r = [_mm256_setzero_ps(); V];
            for (i, r) in r.iter_mut().enumerate() {
                *r = _mm256_loadu_ps(p.add(8 * i));
            }
            r
        }
    }
}

/// `acc[i] = f(acc[i], get(i))` (or `f(get(i), acc[i])` when `REV`), for the op `b`.
#[inline(always)]
unsafe fn bin<const REV: bool, G: Fn(usize) -> __m256>(acc: &mut [__m256; V], b: B, get: G) {
    #[inline(always)]
    unsafe fn go<const REV: bool, G: Fn(usize) -> __m256, F: Fn(__m256, __m256) -> __m256>(
        acc: &mut [__m256; V],
        get: G,
        f: F,
    ) {
        for (i, a) in acc.iter_mut().enumerate() {
            *a = if REV { f(get(i), *a) } else { f(*a, get(i)) };
        }
    }
    match b {
        B::Add => go::<REV, _, _>(acc, get, |a, b| _mm256_add_ps(a, b)),
        B::Sub => go::<REV, _, _>(acc, get, |a, b| _mm256_sub_ps(a, b)),
        B::Mul => go::<REV, _, _>(acc, get, |a, b| _mm256_mul_ps(a, b)),
        B::Div => go::<REV, _, _>(acc, get, |a, b| _mm256_div_ps(a, b)),
        B::Max => go::<REV, _, _>(acc, get, |a, b| vmax(a, b)),
        B::Min => go::<REV, _, _>(acc, get, |a, b| vmin(a, b)),
        B::MaxC => go::<REV, _, _>(acc, get, |a, b| _mm256_max_ps(a, b)),
        B::MinC => go::<REV, _, _>(acc, get, |a, b| _mm256_min_ps(a, b)),
    }
}

#[inline(always)]
unsafe fn un<F: Fn(__m256) -> __m256>(acc: &mut [__m256; V], f: F) {
    for a in acc.iter_mut() {
        *a = f(*a);
    }
}

/// `fmax` lanes: `maxps` selects `a` only when `a > b`; then `a` wherever `b` is NaN.
#[inline(always)]
unsafe fn vmax(a: __m256, b: __m256) -> __m256 {
    _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps::<_CMP_UNORD_Q>(b, b))
}

#[inline(always)]
unsafe fn vmin(a: __m256, b: __m256) -> __m256 {
    _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps::<_CMP_UNORD_Q>(b, b))
}

#[inline(always)]
unsafe fn to_arr(acc: &[__m256; V]) -> [f32; TILE] {
    let mut t = [0f32; TILE];
    for (i, a) in acc.iter().enumerate() {
        _mm256_storeu_ps(t.as_mut_ptr().add(8 * i), *a);
    }
    t
}

#[inline(always)]
unsafe fn from_arr(t: &[f32; TILE]) -> [__m256; V] {
    let mut acc = [_mm256_setzero_ps(); V];
    for (i, a) in acc.iter_mut().enumerate() {
        *a = _mm256_loadu_ps(t.as_ptr().add(8 * i));
    }
    acc
}

/// One tile at element `off`; inlined into the AVX2 `run_range`.
#[inline(always)]
unsafe fn run_tile(
    prog: &Prog,
    ext: &[*const f32],
    outs: &[*mut f32],
    off: usize,
    slots: &mut [[__m256; V]],
) {
    let mut acc = [_mm256_setzero_ps(); V];
    for ins in &prog.ins {
        match *ins {
            Ins::Load(x) => acc = fetch(x, &acc, ext, off, slots),
            Ins::BinAcc(b) => {
                let a = acc;
                bin::<false, _>(&mut acc, b, |i| a[i])
            }
            Ins::BinC(b, c) => {
                let c = _mm256_set1_ps(c);
                bin::<false, _>(&mut acc, b, |_| c)
            }
            Ins::BinCR(b, c) => {
                let c = _mm256_set1_ps(c);
                bin::<true, _>(&mut acc, b, |_| c)
            }
            Ins::BinS(b, j) => {
                let s = &slots[j];
                bin::<false, _>(&mut acc, b, |i| s[i])
            }
            Ins::BinSR(b, j) => {
                let s = &slots[j];
                bin::<true, _>(&mut acc, b, |i| s[i])
            }
            Ins::BinE(b, j) => {
                let p = ext[j].add(off);
                bin::<false, _>(&mut acc, b, |i| _mm256_loadu_ps(p.add(8 * i)))
            }
            Ins::BinER(b, j) => {
                let p = ext[j].add(off);
                bin::<true, _>(&mut acc, b, |i| _mm256_loadu_ps(p.add(8 * i)))
            }
            Ins::Un(u) => match u {
                U::Neg => {
                    let m = _mm256_set1_ps(-0.0);
                    un(&mut acc, |a| _mm256_xor_ps(a, m))
                }
                U::Relu => {
                    let z = _mm256_setzero_ps();
                    un(&mut acc, |a| _mm256_max_ps(a, z))
                }
                U::Sqrt => un(&mut acc, |a| _mm256_sqrt_ps(a)),
                U::Rsqrt => {
                    let one = _mm256_set1_ps(1.0);
                    un(&mut acc, |a| _mm256_div_ps(one, _mm256_sqrt_ps(a)))
                }
                U::Square => un(&mut acc, |a| _mm256_mul_ps(a, a)),
                U::Dequant(s, z) => {
                    let (s, z) = (_mm256_set1_ps(s), _mm256_set1_ps(z));
                    un(&mut acc, |a| _mm256_mul_ps(_mm256_sub_ps(a, z), s))
                }
            },
            Ins::UnScalar(pi) => {
                let t = to_arr(&acc);
                let mut y = [0f32; TILE];
                unary_apply(prog.ops[pi], &t, &mut y);
                acc = from_arr(&y);
            }
            Ins::BinScalar(pi, x, rev) => {
                let a = to_arr(&acc);
                let b = to_arr(&fetch(x, &acc, ext, off, slots));
                let (l, r) = if rev { (&b, &a) } else { (&a, &b) };
                let mut y = [0f32; TILE];
                binary_apply(prog.ops[pi], Src::S(l), Src::S(r), &mut y);
                acc = from_arr(&y);
            }
            Ins::Spill(s) => slots[s] = acc,
            Ins::Store(o) => {
                let p = outs[o].add(off);
                for (i, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(p.add(8 * i), *a);
                }
            }
        }
    }
}
