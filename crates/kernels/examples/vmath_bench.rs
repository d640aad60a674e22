//! Times the `vmath` functions at every SIMD level this CPU supports against the plain scalar
//! loop over std / libm (`x.exp()`, `x.ln()`, `x.tanh()`, `libm::erff`, and the formulas of
//! sigmoid, SiLU and both GELUs written with them), on 16384 f32 inputs uniform in [−8, 8]
//! (log: their absolute values, in (0, 8]). Each variant's round is 200 calls; 7 rounds, the
//! variants taking turns within each round (so drift from co-tenant load hits all of them).
//! Prints ns per element as min / median / max over the rounds and the speed-up of the best
//! round over std's best round. Not controlled: frequency scaling, thread placement.
//! Run: `cargo run --release -p tensorforge-kernels --example vmath_bench`.

use std::hint::black_box;
use std::time::Instant;
use tensorforge_kernels::vmath::{self, Func, Level};

const N: usize = 16384;
const CALLS: usize = 200;
const ROUNDS: usize = 7;

/// The plain scalar loop over std / libm for `f`.
fn std_loop(f: Func, x: &[f32], out: &mut [f32]) {
    const C: f32 = 0.797_884_6; // √(2/π)
    let sig = |v: f32| 1.0 / (1.0 + (-v).exp());
    for (o, &v) in out.iter_mut().zip(x) {
        *o = match f {
            Func::Exp => v.exp(),
            Func::Log => v.ln(),
            Func::Tanh => v.tanh(),
            Func::Erf => libm::erff(v),
            Func::Sigmoid => sig(v),
            Func::Silu => v * sig(v),
            Func::GeluTanh => 0.5 * v * (1.0 + (C * (v + 0.044_715 * v * v * v)).tanh()),
            Func::GeluErf => 0.5 * v * (1.0 + libm::erff(v * std::f32::consts::FRAC_1_SQRT_2)),
        };
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

fn min_med_max(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

fn main() {
    println!("cpu: {}", cpu_model());
    println!(
        "vmath level: {:?} (TENSORFORGE_SIMD={})",
        vmath::level(),
        std::env::var("TENSORFORGE_SIMD").unwrap_or_else(|_| "unset".into())
    );
    let levels: Vec<Level> = Level::ALL
        .into_iter()
        .filter(|l| l.is_supported())
        .collect();
    println!("{N} elements, {ROUNDS} rounds x {CALLS} calls each");
    println!("ns/element min / median / max over the rounds; speed-up = std best / best");
    let mut r = tensorforge_core::rng::SplitMix64::new(2024);
    let xs: Vec<f32> = (0..N).map(|_| r.next_f32_pm1() * 8.0).collect();
    let xpos: Vec<f32> = xs.iter().map(|v| v.abs().max(f32::MIN_POSITIVE)).collect();
    let mut out = vec![0.0f32; N];
    for f in Func::ALL {
        let x = if f == Func::Log { &xpos } else { &xs };
        // variant 0: std/libm; then one per level
        let nv = levels.len() + 1;
        let mut times = vec![Vec::with_capacity(ROUNDS); nv];
        let run = |v: usize, out: &mut [f32]| {
            for _ in 0..CALLS {
                if v == 0 {
                    std_loop(f, black_box(x), out);
                } else {
                    vmath::eval_at(f, levels[v - 1], black_box(x), out);
                }
                black_box(&mut *out);
            }
        };
        for v in 0..nv {
            run(v, &mut out); // warm-up
        }
        for round in 0..ROUNDS {
            for k in 0..nv {
                // rotate the order each round
                let v = (k + round) % nv;
                let t = Instant::now();
                run(v, &mut out);
                times[v].push(t.elapsed().as_secs_f64() * 1e9 / (CALLS * N) as f64);
            }
        }
        let std_best = min_med_max(&mut times[0]).0;
        for (v, t) in times.iter_mut().enumerate() {
            let name = if v == 0 {
                "std/libm"
            } else {
                levels[v - 1].name()
            };
            let (lo, med, hi) = min_med_max(t);
            println!(
                "{:>9} {:>8}: {lo:7.3} / {med:7.3} / {hi:7.3} ns  x{:.1}",
                f.name(),
                name,
                std_best / lo
            );
        }
    }
}
