//! Prints, from one run, the ratios the kernels issue asks for: stable vs naive logaddexp,
//! softmax and quantize against this machine's measured copy bandwidth (read + write bytes),
//! and unfused/fused time of RMSNorm+SwiGLU (> 1: fused faster) — single thread and all
//! threads. The copy reference runs on the same pool (same thread count) as the kernel and
//! alternates with it round by round (see `support`); "% of copy" is the min / median / max
//! over the rounds. Other timings are the best of several repetitions. Run: `cargo run
//! --release -p tensorforge-kernels --example kernel_ratios` (add `-- --small` for CI-sized
//! shapes).

mod support;

use std::time::Instant;
use support::{interleave, par_copy};
use tensorforge_kernels::fused::{rmsnorm_swiglu_fused, rmsnorm_swiglu_unfused, SwigluShape};
use tensorforge_kernels::{log_softmax, logaddexp_slice, logsumexp, naive, quant, softmax, Shape2};

/// Uniform values in [−10.0, 10.0) from the workspace's one generator.
fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut r = tensorforge_core::rng::SplitMix64::new(u64::from(seed));
    (0..n).map(|_| r.next_f32_pm1() * 10.0).collect()
}

fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn run(threads: usize, small: bool) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    pool.install(|| {
        let n = if small { 1 << 20 } else { 16 << 20 };
        let (a, b) = (data(n, 1), data(n, 2));
        let mut out = vec![0.0f32; n];
        let mut q = vec![0u8; n];
        let rounds = 7;
        let copy_bytes = (n * 8) as f64;
        let mut c = vec![0.0f32; n];
        let t_stable = best(3, || logaddexp_slice(&a, &b, &mut out).unwrap());
        let t_naive = best(3, || naive::logaddexp_slice(&a, &b, &mut out).unwrap());
        let sh = Shape2::new(n / 4096, 4096);
        let r_soft = interleave(
            rounds,
            || par_copy(&a, &mut c),
            || softmax(&a, sh, &mut out).unwrap(),
        );
        let r_lsm = interleave(
            rounds,
            || par_copy(&a, &mut c),
            || log_softmax(&a, sh, &mut out).unwrap(),
        );
        let mut lse = vec![0.0f32; n / 4096];
        let r_lse = interleave(
            rounds,
            || par_copy(&a, &mut c),
            || logsumexp(&a, sh, &mut lse).unwrap(),
        );
        let r_q = interleave(
            rounds,
            || par_copy(&a, &mut c),
            || quant::quantize(&a, 0.05, 128, &mut q).unwrap(),
        );
        let best_copy = [&r_soft, &r_lsm, &r_lse, &r_q]
            .iter()
            .map(|r| r.best_copy_s())
            .fold(f64::INFINITY, f64::min);
        println!("threads = {threads}, n = {n} f32 ({} MiB per buffer)", (n * 4) >> 20);
        println!(
            "  copy bandwidth (read+write, {threads} thread(s), best) {:8.2} GB/s",
            copy_bytes / best_copy / 1e9
        );
        println!(
            "  logaddexp stable / naive         {:8.3}  ({:.2} vs {:.2} ns/elem)",
            t_stable / t_naive,
            t_stable / n as f64 * 1e9,
            t_naive / n as f64 * 1e9
        );
        // bytes: softmax / log_softmax read x and write out (8 B per element); logsumexp
        // reads x and writes one f32 per row (4·n + 4·rows B); quantize reads 4 B and
        // writes 1 B per element
        for (name, bytes, r) in [
            ("softmax     rows of 4096", n * 8, &r_soft),
            ("log_softmax rows of 4096", n * 8, &r_lsm),
            ("logsumexp   rows of 4096", n * 4 + 4 * (n / 4096), &r_lse),
            ("quantize f32->u8         ", n * 5, &r_q),
        ] {
            println!(
                "  {name} {}  (best {:.2} GB/s)",
                r.describe(copy_bytes, bytes as f64),
                bytes as f64 / r.best_kernel_s() / 1e9
            );
        }
        let shapes: &[(usize, usize, usize)] = if small {
            &[(1, 512, 1408), (8, 512, 1408), (64, 512, 1408)]
        } else {
            &[
                (1, 4096, 11008),
                (8, 4096, 11008),
                (16, 4096, 11008),
                (32, 4096, 11008),
                (512, 4096, 11008),
                (64, 1024, 2816),
                (512, 1024, 2816),
            ]
        };
        for &(t, d, f) in shapes {
            let gm = data(d, 5);
            let wg = data(d * f, 6);
            let wu = data(d * f, 7);
            let s = SwigluShape {
                tokens: t,
                d_model: d,
                d_ff: f,
            };
            let x = data(t * d, 4);
            let mut y = vec![0.0f32; t * f];
            let reps = if t >= 512 { 2 } else { 5 };
            let tf = best(reps, || {
                rmsnorm_swiglu_fused(&x, &gm, &wg, &wu, s, 1e-6, &mut y).unwrap();
            });
            let tu = best(reps, || {
                rmsnorm_swiglu_unfused(&x, &gm, &wg, &wu, s, 1e-6, &mut y).unwrap();
            });
            let rf = rmsnorm_swiglu_fused(&x, &gm, &wg, &wu, s, 1e-6, &mut y).unwrap();
            let ru = rmsnorm_swiglu_unfused(&x, &gm, &wg, &wu, s, 1e-6, &mut y).unwrap();
            println!(
                "  rmsnorm+swiglu T={t:<4} D={d:<4} F={f:<5}: fused {:9.3} ms, unfused {:9.3} ms, unfused/fused {:.3}; intermediates {} vs {} bytes",
                tf * 1e3,
                tu * 1e3,
                tu / tf,
                rf.intermediate_bytes,
                ru.intermediate_bytes
            );
        }
    });
}

fn main() {
    let small = std::env::args().any(|a| a == "--small");
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    run(1, small);
    if all > 1 {
        run(all, small);
    }
}
