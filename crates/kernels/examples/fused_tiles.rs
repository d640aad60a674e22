//! Sweep of fused RMSNorm+SwiGLU block sizes against the unfused path (default D = 4096,
//! F = 11008): F tiles of the weight-streaming kernel (T ≤ 64), and rows per block × F tile of
//! the faer-tiled path, plus the default dispatch. Run: `cargo run --release -p
//! tensorforge-kernels --example fused_tiles -- T [D F [THREADS]]` (T tokens, default 1;
//! THREADS defaults to all cores).

use std::time::Instant;
use tensorforge_kernels::fused::{
    default_tile_f, rmsnorm_swiglu_fused, rmsnorm_swiglu_fused_stream, rmsnorm_swiglu_fused_tiled,
    rmsnorm_swiglu_unfused, SwigluShape,
};

/// Uniform values in [−1.0, 1.0) from the workspace's one generator.
fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut r = tensorforge_core::rng::SplitMix64::new(u64::from(seed));
    (0..n).map(|_| r.next_f32_pm1() * 1.0).collect()
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

fn main() {
    let t: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let arg = |i: usize, v: usize| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(v)
    };
    let (d, f) = (arg(2, 4096), arg(3, 11008));
    let threads = arg(
        4,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    pool.install(|| sweep(t, d, f, threads));
}

fn sweep(t: usize, d: usize, f: usize, threads: usize) {
    let s = SwigluShape {
        tokens: t,
        d_model: d,
        d_ff: f,
    };
    let x = data(t * d, 1);
    let g = data(d, 2);
    let wg = data(d * f, 3);
    let wu = data(d * f, 4);
    let mut y = vec![0.0f32; t * f];
    let reps = if t > 64 { 1 } else { 4 };
    let tu = best(reps, || {
        rmsnorm_swiglu_unfused(&x, &g, &wg, &wu, s, 1e-6, &mut y).unwrap();
    });
    println!(
        "T={t} D={d} F={f} threads={threads}: unfused {:.3} ms",
        tu * 1e3
    );
    let td = best(reps, || {
        rmsnorm_swiglu_fused(&x, &g, &wg, &wu, s, 1e-6, &mut y).unwrap();
    });
    println!(
        "  default (tile {}): {:.3} ms ({:.3}x unfused)",
        default_tile_f(s),
        td * 1e3,
        td / tu
    );
    if t <= 64 {
        for &tf in &[64usize, 128, 256, 512, 1024, 2048, 4096, f.div_ceil(2), f] {
            let tt = best(reps, || {
                rmsnorm_swiglu_fused_stream(&x, &g, &wg, &wu, s, 1e-6, &mut y, tf).unwrap();
            });
            println!(
                "  stream tile {tf:5}: {:.3} ms ({:.3}x unfused)",
                tt * 1e3,
                tt / tu
            );
        }
    }
    for &rb in &[64usize, 128, 256, 512] {
        for &tf in &[256usize, 512, 1024, 2048, f] {
            if rb > t.max(64) {
                continue;
            }
            let tt = best(reps, || {
                rmsnorm_swiglu_fused_tiled(&x, &g, &wg, &wu, s, 1e-6, &mut y, rb, tf).unwrap();
            });
            println!(
                "  rows {rb:4} tile {tf:5}: {:.3} ms ({:.3}x unfused)",
                tt * 1e3,
                tt / tu
            );
        }
    }
}
