//! The packed GEMM's rate against the number of rows M, for a linear layer's shape (A `M ×
//! 256` read in place, a weight `256 × 768` packed once), beside the FMA pipes' own rate
//! measured in the same process: 12 independent chains of 8-lane fused multiply-adds
//! (16 flops each), what a core's two FMA pipes can give at AVX2 whatever the memory does.
//! Rows that do not fill whole tiles of the microkernel show here: before the edge tiles of
//! `Kernel::tile_rows`, 128 rows (21 tiles of 6 and one of 2) ran 2–4 % below 126 on AMD
//! EPYC (Zen 3).
//!
//! Each round times 100 products per M, the Ms in turn, then the FMA probe; the line gives
//! the best round's GFLOP/s and its fraction of the best FMA rate. Run:
//! `cargo run --release -p tensorforge-kernels --example sgemm_rows -- [rounds] [M ...]`
//! (default 15 rounds; M 120 126 127 128 130 197 256). Needs AVX2 + FMA (x86-64).

use tensorforge_kernels::sgemm::{Kernel, Left, Right};

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_chains(steps: usize) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); 12];
    for (i, a) in acc.iter_mut().enumerate() {
        *a = _mm256_set1_ps(i as f32);
    }
    let (x, y) = (_mm256_set1_ps(1.000_000_1), _mm256_set1_ps(0.999_999_9));
    for _ in 0..steps {
        for a in acc.iter_mut() {
            *a = _mm256_fmadd_ps(*a, x, y);
        }
    }
    let mut s = 0.0;
    for a in acc {
        let mut v = [0f32; 8];
        _mm256_storeu_ps(v.as_mut_ptr(), a);
        s += v[0];
    }
    s
}

/// Best-of-one GFLOP/s of the 12 FMA chains over `steps` steps.
fn fma_gflops(steps: usize) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        let t = std::time::Instant::now();
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        let s = unsafe { fma_chains(steps) };
        std::hint::black_box(s);
        return Some((steps * 12 * 16) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    let _ = steps;
    None
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(15);
    let mut ms: Vec<usize> = args.filter_map(|s| s.parse().ok()).collect();
    if ms.is_empty() {
        ms = vec![120, 126, 127, 128, 130, 197, 256];
    }
    let (Some(kern), Some(_)) = (Kernel::detect(), fma_gflops(1)) else {
        println!("needs the packed kernel and AVX2 + FMA");
        return;
    };
    let (k, n) = (256usize, 768usize);
    let mmax = ms.iter().copied().max().unwrap_or(1);
    let a = tensorforge_core::rng::SplitMix64::f32_pm1_vec(1, mmax * k);
    let b = tensorforge_core::rng::SplitMix64::f32_pm1_vec(2, k * n);
    let mut bp = vec![0.0; kern.packed_b_len(k, n).unwrap()];
    kern.pack_b(&b, k, n, n, 1, &mut bp).unwrap();
    let mut c = vec![0.0f32; mmax * n];
    let mut best = vec![f64::MAX; ms.len()];
    let mut peak = 0f64;
    for _ in 0..rounds {
        for (i, &m) in ms.iter().enumerate() {
            let t = std::time::Instant::now();
            for _ in 0..100 {
                let left = Left::RowMajor { data: &a, ld: k };
                kern.gemm_left(m, n, k, left, Right::Packed(&bp), &mut c, n, false)
                    .unwrap();
            }
            best[i] = best[i].min(t.elapsed().as_secs_f64() / 100.0);
        }
        peak = peak.max(fma_gflops(20_000_000).unwrap_or(0.0));
    }
    println!(
        "kernel {:?}, {rounds} rounds; FMA chains {peak:.1} GFLOP/s",
        kern.level()
    );
    for (i, &m) in ms.iter().enumerate() {
        let gf = 2.0 * (m * n * k) as f64 / best[i] / 1e9;
        println!(
            "M {m:4} x {k} x {n}: {:8.1} us  {gf:6.1} GFLOP/s  {:5.1} % of the FMA chains",
            best[i] * 1e6,
            100.0 * gf / peak
        );
    }
}
