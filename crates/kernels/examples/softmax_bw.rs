//! Softmax, log_softmax and logsumexp over rows of f32 against this machine's copy bandwidth
//! (16 Mi f32, rows of `cols`; bytes = read + write: 8 B per element for softmax and
//! log_softmax and the copy, 4 B per element + 4 B per row for logsumexp). The copy runs on
//! the same pool (`threads` workers) as the kernels and alternates with each kernel, round
//! by round (see `support`); each kernel line gives the min / median / max over the rounds
//! of that round's kernel bandwidth / copy bandwidth. Run: `cargo run --release -p
//! tensorforge-kernels --example softmax_bw -- [cols] [threads] [rounds] [elements]`; a small
//! `elements` (e.g. 65536, in L2) shows the compute-bound speed, but the copy reference is
//! then a cache copy too.

mod support;

use support::{interleave, par_copy};
use tensorforge_kernels::{log_softmax, logsumexp, softmax, Shape2};

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (cols, threads, rounds) = (arg(1, 4096), arg(2, 1), arg(3, 9));
    let n = (arg(4, 16 << 20) / cols).max(1) * cols;
    let mut r = tensorforge_core::rng::SplitMix64::new(1);
    let x: Vec<f32> = (0..n).map(|_| r.next_f32_pm1() * 10.0).collect();
    let mut y = vec![0.0f32; n];
    let mut l = vec![0.0f32; n / cols];
    let sh = Shape2::new(n / cols, cols);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    pool.install(|| {
        let copy_bytes = (n * 8) as f64;
        let mut c = vec![0.0f32; n];
        let rs = interleave(
            rounds,
            || par_copy(&x, &mut c),
            || softmax(&x, sh, &mut y).unwrap(),
        );
        let rl = interleave(
            rounds,
            || par_copy(&x, &mut c),
            || log_softmax(&x, sh, &mut y).unwrap(),
        );
        let re = interleave(
            rounds,
            || par_copy(&x, &mut c),
            || logsumexp(&x, sh, &mut l).unwrap(),
        );
        let best_copy = [&rs, &rl, &re]
            .iter()
            .map(|r| r.best_copy_s())
            .fold(f64::INFINITY, f64::min);
        println!(
            "threads = {threads}, {} rows of {cols}, copy on {threads} thread(s) best {:.2} GB/s",
            n / cols,
            copy_bytes / best_copy / 1e9
        );
        for (name, bytes, r) in [
            ("softmax", n * 8, &rs),
            ("log_softmax", n * 8, &rl),
            ("logsumexp", n * 4 + 4 * (n / cols), &re),
        ] {
            let t = r.best_kernel_s();
            println!(
                "  {name:<12} {}; best {:.2} GB/s, {:.3} ns/elem",
                r.describe(copy_bytes, bytes as f64),
                bytes as f64 / t / 1e9,
                t / n as f64 * 1e9
            );
        }
    });
}
