//! Softmax, log_softmax and logsumexp over rows of f32 against this machine's copy bandwidth
//! (16 Mi f32, rows of `cols`; bytes = read + write: 8 B per element for softmax and
//! log_softmax, 4 B per element + 4 B per row for logsumexp). Run: `cargo run --release -p
//! tensorforge-kernels --example softmax_bw -- [cols] [threads] [reps] [elements]`; a small
//! `elements` (e.g. 65536, in L2) shows the compute-bound speed, but the copy reference is
//! then a cache copy too.

use std::time::Instant;
use tensorforge_kernels::{log_softmax, logsumexp, softmax, Shape2};

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

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (cols, threads, reps) = (arg(1, 4096), arg(2, 1), arg(3, 5));
    let n = (arg(4, 16 << 20) / cols).max(1) * cols;
    let mut s = 1u32;
    let x: Vec<f32> = (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 20.0 - 10.0
        })
        .collect();
    let mut y = vec![0.0f32; n];
    let mut l = vec![0.0f32; n / cols];
    let sh = Shape2::new(n / cols, cols);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    pool.install(|| {
        let bw = (n * 8) as f64 / best(reps, || y.copy_from_slice(std::hint::black_box(&x)));
        let ts = best(reps, || softmax(&x, sh, &mut y).unwrap());
        let tl = best(reps, || log_softmax(&x, sh, &mut y).unwrap());
        let te = best(reps, || logsumexp(&x, sh, &mut l).unwrap());
        let pr = |name: &str, bytes: usize, t: f64| {
            let b = bytes as f64 / t;
            println!(
                "  {name:<12} {:6.1} % of copy ({:.2} GB/s, {:.3} ns/elem)",
                100.0 * b / bw,
                b / 1e9,
                t / n as f64 * 1e9
            );
        };
        println!(
            "threads = {threads}, {} rows of {cols}, copy {:.2} GB/s",
            n / cols,
            bw / 1e9
        );
        pr("softmax", n * 8, ts);
        pr("log_softmax", n * 8, tl);
        pr("logsumexp", n * 4 + 4 * (n / cols), te);
    });
}
