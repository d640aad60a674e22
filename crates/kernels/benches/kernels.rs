//! Criterion benchmarks of the kernels (short: 10 samples, ~2 s each). Inputs are larger
//! than a 32 MiB last-level cache where the target is about memory bandwidth. The one-run
//! ratio table lives in `examples/kernel_ratios.rs`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;
use tensorforge_kernels::fused::{rmsnorm_swiglu_fused, rmsnorm_swiglu_unfused, SwigluShape};
use tensorforge_kernels::{logaddexp_slice, naive, quant, softmax, Shape2};

/// Uniform values in [−10.0, 10.0) from the workspace's one generator.
fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut r = tensorforge_core::rng::SplitMix64::new(u64::from(seed));
    (0..n).map(|_| r.next_f32_pm1() * 10.0).collect()
}

fn elementwise(c: &mut Criterion) {
    let n = 8 << 20; // 3 × 32 MiB buffers
    let (a, b) = (data(n, 1), data(n, 2));
    let mut out = vec![0.0f32; n];
    let mut g = c.benchmark_group("logaddexp_f32_8M");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .throughput(Throughput::Elements(n as u64));
    g.bench_function("stable", |bch| {
        bch.iter(|| logaddexp_slice(black_box(&a), black_box(&b), &mut out).unwrap())
    });
    g.bench_function("naive", |bch| {
        bch.iter(|| naive::logaddexp_slice(black_box(&a), black_box(&b), &mut out).unwrap())
    });
    g.finish();

    let mut g = c.benchmark_group("softmax_quantize_f32_16M");
    let n = 16 << 20;
    let x = data(n, 3);
    let mut y = vec![0.0f32; n];
    let mut q = vec![0u8; n];
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .throughput(Throughput::Bytes((n * 8) as u64));
    g.bench_function("copy", |bch| bch.iter(|| y.copy_from_slice(black_box(&x))));
    g.bench_function("softmax_rows_4096", |bch| {
        bch.iter(|| softmax(black_box(&x), Shape2::new(n / 4096, 4096), &mut y).unwrap())
    });
    g.throughput(Throughput::Bytes((n * 5) as u64));
    g.bench_function("quantize_u8", |bch| {
        bch.iter(|| quant::quantize(black_box(&x), 0.05, 128, &mut q).unwrap())
    });
    g.finish();
}

fn fused(c: &mut Criterion) {
    // CI-sized shape; the D = 4096, F = 11008 shapes are in examples/kernel_ratios.rs.
    let s = SwigluShape {
        tokens: 8,
        d_model: 1024,
        d_ff: 2816,
    };
    let x = data(s.tokens * s.d_model, 4);
    let gm = data(s.d_model, 5);
    let wg = data(s.d_model * s.d_ff, 6);
    let wu = data(s.d_model * s.d_ff, 7);
    let mut out = vec![0.0f32; s.tokens * s.d_ff];
    let mut g = c.benchmark_group("rmsnorm_swiglu_T8_D1024_F2816");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    g.bench_function("fused", |bch| {
        bch.iter(|| rmsnorm_swiglu_fused(&x, &gm, &wg, &wu, s, 1e-6, &mut out).unwrap())
    });
    g.bench_function("unfused", |bch| {
        bch.iter(|| rmsnorm_swiglu_unfused(&x, &gm, &wg, &wu, s, 1e-6, &mut out).unwrap())
    });
    g.finish();
}

criterion_group!(benches, elementwise, fused);
criterion_main!(benches);
