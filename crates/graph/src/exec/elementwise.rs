//! The loops of the elementwise ops: exp, log, tanh, erf and the sigmoid family through the
//! Kernels crate's explicit-SIMD `vmath` (AVX-512, AVX2 or NEON, picked at run time); every
//! other op one monomorphic loop (per operand kind: slice or scalar), compiled a second time
//! for AVX2 and chosen at run time; Max/Min are IEEE maxNum/minNum and bf16/fp16 casts round
//! through `half`.
//! Left out: fp8's two encodings (a cast to fp8 keeps the f32 value).

use crate::ir::{BinaryFn, DType, Op, UnaryFn};
#[cfg(test)]
use crate::optable::{fmax, fmin};
use tensorforge_kernels::vmath;

pub(super) enum Src<'a> {
    S(&'a [f32]),
    C(f32),
}

/// f32 rounded to the nearest bfloat16 (ties to even) and back: the `half` crate.
fn round_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

#[inline(always)]
fn map1_body<F: Fn(f32) -> f32>(x: &[f32], out: &mut [f32], f: F) {
    for (y, &v) in out.iter_mut().zip(x) {
        *y = f(v);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map1_avx2<F: Fn(f32) -> f32>(x: &[f32], out: &mut [f32], f: F) {
    map1_body(x, out, f)
}

/// One elementwise loop; compiled a second time for AVX2 and picked at run time.
#[inline(always)]
fn map1<F: Fn(f32) -> f32>(x: &[f32], out: &mut [f32], f: F) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked on the line above).
            return unsafe { map1_avx2(x, out, f) };
        }
    }
    map1_body(x, out, f)
}

/// A function of the op table over a slice: one monomorphic, vectorizable loop per function
/// (its scalar reference inlined with the function fixed); the transcendental ones through
/// the Kernels crate's explicit-SIMD `vmath`.
fn unary_fn_apply(f: UnaryFn, x: &[f32], out: &mut [f32]) {
    macro_rules! each {
        ($($v:ident),*) => {
            match f {
                // Explicit-width SIMD (AVX-512, AVX2, NEON) from the Kernels crate's vmath,
                // within 3.4 ulp of the exact value (the scalar references are libm's).
                UnaryFn::Exp => vmath::exp(x, out),
                UnaryFn::Log => vmath::log(x, out),
                UnaryFn::Tanh => vmath::tanh(x, out),
                UnaryFn::Erf => vmath::erf(x, out),
                UnaryFn::Sigmoid => vmath::sigmoid(x, out),
                UnaryFn::Silu => vmath::silu(x, out),
                UnaryFn::Gelu => vmath::gelu_tanh(x, out),
                UnaryFn::GeluErf => vmath::gelu_erf(x, out),
                $(UnaryFn::$v => map1(x, out, |v| UnaryFn::$v.eval(v)),)*
            }
        };
    }
    each!(
        Neg, Log1p, Sqrt, Rsqrt, Relu, Not, IsNaN, IsInf, IsPosInf, IsNegInf, Sin, Cos, Abs, Floor,
        Ceil, Sign
    )
}

/// Apply a unary op over a slice; one monomorphic, vectorizable loop per op.
pub(super) fn unary_apply(op: &Op, x: &[f32], out: &mut [f32]) {
    match op {
        Op::Unary { f } => unary_fn_apply(*f, x, out),
        Op::Pow { exponent } => {
            let e = *exponent as f32;
            if e == 2.0 {
                map1(x, out, |v| v * v)
            } else if e == 3.0 {
                map1(x, out, |v| v * v * v)
            } else {
                map1(x, out, |v| v.powf(e))
            }
        }
        Op::Cast { to } => match to {
            DType::Bf16 => map1(x, out, round_bf16),
            DType::Fp16 => map1(x, out, |v| half::f16::from_f32(v).to_f32()),
            // Float → integer truncates toward zero (ONNX Cast); out-of-range values
            // saturate (ONNX leaves them undefined). Int64 beyond 2^24 is not exact in f32.
            DType::Int8 => map1(x, out, |v| v.trunc().clamp(-128.0, 127.0)),
            DType::Int4 => map1(x, out, |v| v.trunc().clamp(-8.0, 7.0)),
            DType::Int32 => map1(x, out, |v| {
                v.trunc().clamp(i32::MIN as f32, i32::MAX as f32)
            }),
            DType::Int64 => map1(x, out, f32::trunc),
            DType::Bool => map1(x, out, |v| if v != 0.0 { 1.0 } else { 0.0 }),
            // fp32 and tf32 keep the value; fp8's two encodings are not modelled.
            DType::Fp32 | DType::Tf32 | DType::Fp8 => map1(x, out, |v| v),
        },
        Op::Quantize { scale, zero_point } => {
            let (s, z) = (*scale as f32, *zero_point as f32);
            map1(x, out, |v| {
                ((v / s).round_ties_even() + z).clamp(-128.0, 127.0)
            })
        }
        Op::Dequantize {
            scale, zero_point, ..
        } => {
            let (s, z) = (*scale as f32, *zero_point as f32);
            map1(x, out, |q| (q - z) * s)
        }
        _ => map1(x, out, |v| v),
    }
}

#[inline(always)]
fn map2_body<F: Fn(f32, f32) -> f32>(a: Src, b: Src, out: &mut [f32], f: F) {
    match (a, b) {
        (Src::S(a), Src::S(b)) => {
            for ((y, &x), &z) in out.iter_mut().zip(a).zip(b) {
                *y = f(x, z);
            }
        }
        (Src::S(a), Src::C(c)) => {
            for (y, &x) in out.iter_mut().zip(a) {
                *y = f(x, c);
            }
        }
        (Src::C(c), Src::S(b)) => {
            for (y, &z) in out.iter_mut().zip(b) {
                *y = f(c, z);
            }
        }
        (Src::C(a), Src::C(b)) => out.fill(f(a, b)),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map2_avx2<F: Fn(f32, f32) -> f32>(a: Src, b: Src, out: &mut [f32], f: F) {
    map2_body(a, b, out, f)
}

/// One binary loop; compiled a second time for AVX2 and picked at run time.
#[inline(always)]
fn map2<F: Fn(f32, f32) -> f32>(a: Src, b: Src, out: &mut [f32], f: F) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked on the line above).
            return unsafe { map2_avx2(a, b, out, f) };
        }
    }
    map2_body(a, b, out, f)
}

/// Apply a binary op (a function of the op table); one monomorphic loop per (function,
/// operand kinds).
pub(super) fn binary_apply(op: &Op, a: Src, b: Src, out: &mut [f32]) {
    let Op::Binary { f } = op else {
        unreachable!("binary_apply is called for Op::Binary only")
    };
    // LogAddExp over two slices: the Kernels crate's vectorized kernel (the scalar
    // reference per element is 15x slower).
    if let (BinaryFn::LogAddExp, Src::S(x), Src::S(y)) = (f, &a, &b) {
        let n = out.len();
        if x.len() >= n
            && y.len() >= n
            && tensorforge_kernels::logaddexp_slice(&x[..n], &y[..n], out).is_ok()
        {
            return;
        }
    }
    macro_rules! each {
        ($($v:ident),*) => {
            match f {
                $(BinaryFn::$v => map2(a, b, out, |x, y| BinaryFn::$v.eval(x, y)),)*
            }
        };
    }
    each!(
        Add,
        Sub,
        Mul,
        Div,
        Max,
        Min,
        LogAddExp,
        And,
        Or,
        Xor,
        Equal,
        Less,
        Greater,
        LessOrEqual,
        GreaterOrEqual,
        ClipLow,
        ClipHigh,
        Mod,
        FMod
    )
}

#[cfg(test)]
mod tests {
    use super::super::{execute, fill_inputs, ExecResult};
    use super::*;
    use crate::fusion::compile;
    use crate::ir::Graph;
    use std::collections::HashMap;

    #[test]
    fn elementwise_nan_zero_and_tail_semantics() {
        // Max/Min are maxNum/minNum (a NaN operand is ignored), ReLU(NaN) = 0, on every
        // length around the tile size, so the tiled and block paths match the scalar rule.
        let g = Graph::from_json_str(
            r#"{"nodes":[
          {"name":"a","op":"Input","attrs":{"shape":[1000],"dtype":"fp32"}},
          {"name":"b","op":"Input","attrs":{"shape":[1000],"dtype":"fp32"}},
          {"name":"c","op":"Constant","attrs":{"shape":[],"dtype":"fp32","value":0.5}},
          {"name":"m","op":"Max","inputs":["a","b"]},
          {"name":"n","op":"Min","inputs":["b","m"]},
          {"name":"r","op":"ReLU","inputs":["a"]},
          {"name":"s","op":"Sub","inputs":["c","n"]},
          {"name":"t","op":"Mul","inputs":["s","r"]},
          {"name":"y","op":"Max","inputs":["c","t"]}]}"#,
        )
        .unwrap();
        let c = compile(&g).unwrap();
        assert!(c.fused.kernels.len() < c.unfused.kernels.len());
        let vals = [f32::NAN, 0.0, -0.0, 1.0, -1.0, 0.75, f32::INFINITY, -3.0];
        let a: Vec<f32> = (0..1000).map(|i| vals[i % 8]).collect();
        let b: Vec<f32> = (0..1000).map(|i| vals[(i / 8) % 8]).collect();
        let ins = HashMap::from([("a".to_string(), a.clone()), ("b".to_string(), b.clone())]);
        let f = execute(&c.fused, &ins).unwrap();
        let u = execute(&c.unfused, &ins).unwrap();
        let get = |r: &ExecResult, n: &str| r.outputs.iter().find(|o| o.0 == n).unwrap().2.clone();
        let y = |r: &ExecResult| get(r, "y");
        let expect: Vec<f32> = a
            .iter()
            .zip(&b)
            .map(|(&a, &b)| {
                let m = fmax(a, b);
                let n = fmin(b, m);
                fmax(0.5, (0.5 - n) * fmax(a, 0.0))
            })
            .collect();
        for r in [&f, &u] {
            let got = y(r);
            for (i, (g, e)) in got.iter().zip(&expect).enumerate() {
                assert!(
                    g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
                    "{i}: {g} vs {e}"
                );
            }
        }
        assert_eq!(fmax(f32::NAN, 1.0), 1.0);
        assert_eq!(fmax(1.0, f32::NAN), 1.0);
        assert!(fmax(f32::NAN, f32::NAN).is_nan());
        assert_eq!(fmin(f32::NAN, -1.0), -1.0);
        // Lengths around the tile and task sizes: every element written.
        for n in [1usize, 63, 64, 65, 200_003] {
            let g = Graph::from_json_str(&format!(
                r#"{{"nodes":[
              {{"name":"x","op":"Input","attrs":{{"shape":[{n}],"dtype":"fp32"}}}},
              {{"name":"e","op":"Exp","inputs":["x"]}},
              {{"name":"y","op":"Add","inputs":["e","x"]}}]}}"#
            ))
            .unwrap();
            let c = compile(&g).unwrap();
            let mut ins = HashMap::new();
            fill_inputs(&c.unfused.graph, &mut ins, 5).unwrap();
            let f = execute(&c.fused, &ins).unwrap();
            let x = &ins["x"];
            let got = &f.outputs[0].2;
            assert_eq!(got.len(), n);
            for i in 0..n {
                // vmath's exp is within 0.92 ulp and std's within 0.5, so the two sums
                // differ by at most 1.5 ulp of e^x plus the addition's rounding.
                let want = x[i].exp() + x[i];
                let tol = 4.0 * f32::EPSILON * (x[i].exp().abs() + x[i].abs());
                assert!(
                    (got[i] - want).abs() <= tol,
                    "n={n} i={i}: {} vs {want}",
                    got[i]
                );
            }
        }
    }
}
