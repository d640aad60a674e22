//! `sgemm` (this crate's packed GEMM) against faer's `matmul` on one thread, on the shapes the
//! executor runs: a convolution's product (filter `M × K` packed once, as at load; im2col
//! columns `K × N` read in place) and a linear layer's (activation `M × K` read in place,
//! [`Left::RowMajor`]; weight `K × N` packed once). For the linear shapes the line also gives
//! what packing the activation would cost per call (`pack_a`, best of `rounds` × `reps`),
//! the pass the in-place read saves. faer gets the same row-major operands and `Par::Seq`.
//! Each round times `reps` calls of each side, alternating which goes first (see `support`);
//! the line gives faer time ÷ sgemm time per round (> 1: sgemm faster), min / median / max.
//! Run: `cargo run --release -p tensorforge-kernels --example sgemm_vs_faer -- [rounds]
//! [sets]`. With `sets` W > 1 each call takes the next of W different operand sets (A, B
//! with its packed copy, and C), as a model's layers do, so that they come from L3 or memory
//! rather than from the L2 the previous call left them in.

#[allow(dead_code)] // the bandwidth helpers of `support` are not used here
mod support;

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use support::{interleave, min_median_max};
use tensorforge_kernels::sgemm::{Kernel, Left, Right};

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(9);
    let sets: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    let Some(kern) = Kernel::detect() else {
        println!("no sgemm kernel on this CPU (needs AVX2 + FMA or AVX-512F)");
        return;
    };
    println!(
        "kernel {:?}, {rounds} rounds, {sets} operand set(s) in rotation",
        kern.level()
    );
    // (what, M, K, N, linear: A read in place, B a weight packed once)
    let shapes = [
        ("conv 16->16 3x3 16x16", 16, 144, 256, false),
        ("conv 32->32 3x3 8x8", 32, 288, 64, false),
        ("conv 64->64 3x3 28x28", 64, 576, 784, false),
        ("conv 64->64 1x1 56x56", 64, 64, 3136, false),
        ("linear 16x64x256", 16, 64, 256, true),
        ("linear 126x256x768", 126, 256, 768, true),
        ("linear 128x256x768", 128, 256, 768, true),
        ("linear 128x1024x256", 128, 1024, 256, true),
        ("linear 197x192x576", 197, 192, 576, true),
        ("linear 197x768x192", 197, 768, 192, true),
        ("linear 197x192x768", 197, 192, 768, true),
    ];
    for (what, m, k, n, linear) in shapes {
        let a_sets: Vec<Vec<f32>> = (0..sets)
            .map(|w| tensorforge_core::rng::SplitMix64::f32_pm1_vec(1 + 1000 * w as u64, m * k))
            .collect();
        let a = &a_sets[0];
        // Each side writes its own C per set (set 0: `c_faer`, `c_ours`, compared below).
        let mut c_sets_faer: Vec<Vec<f32>> = (0..sets).map(|_| vec![0.0f32; m * n]).collect();
        let mut c_sets_ours = c_sets_faer.clone();
        let bs: Vec<Vec<f32>> = (0..sets)
            .map(|w| tensorforge_core::rng::SplitMix64::f32_pm1_vec(2 + w as u64, k * n))
            .collect();
        let mut c_faer = vec![0.0f32; m * n];
        let mut c_ours = vec![0.0f32; m * n];
        let mut ap = vec![0.0; kern.packed_a_len(m, k).unwrap()];
        let bps: Vec<Vec<f32>> = bs
            .iter()
            .map(|b| {
                let mut bp = vec![0.0; kern.packed_b_len(k, n).unwrap()];
                kern.pack_b(b, k, n, n, 1, &mut bp).unwrap();
                bp
            })
            .collect();
        kern.pack_a(a, m, k, k, 1, &mut ap).unwrap();
        let reps = (20_000_000 / (m * n * k)).clamp(1, 2000);
        let r = interleave(
            rounds,
            || {
                for i in 0..reps {
                    let w = i % sets;
                    let am = MatRef::from_row_major_slice(&a_sets[w], m, k);
                    let bm = MatRef::from_row_major_slice(&bs[w], k, n);
                    let c = if w == 0 {
                        &mut c_faer
                    } else {
                        &mut c_sets_faer[w]
                    };
                    let cm = MatMut::from_row_major_slice_mut(c, m, n);
                    matmul(cm, Accum::Replace, am, bm, 1.0f32, Par::Seq);
                }
            },
            || {
                for i in 0..reps {
                    let w = i % sets;
                    let c = if w == 0 {
                        &mut c_ours
                    } else {
                        &mut c_sets_ours[w]
                    };
                    if linear {
                        let left = Left::RowMajor {
                            data: &a_sets[w],
                            ld: k,
                        };
                        let right = Right::Packed(&bps[w]);
                        kern.gemm_left(m, n, k, left, right, c, n, false).unwrap();
                    } else {
                        let right = Right::RowMajor {
                            data: &bs[w],
                            ld: n,
                        };
                        kern.gemm(m, n, k, &ap, right, c, n, false).unwrap();
                    }
                }
            },
        );
        let err = c_faer
            .iter()
            .zip(&c_ours)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        let ratios: Vec<f64> = r
            .copy_s
            .iter()
            .zip(&r.kernel_s)
            .map(|(f, o)| f / o)
            .collect();
        let (lo, med, hi) = min_median_max(&ratios);
        let (_, of, _) = min_median_max(&r.copy_s);
        let (_, oo, _) = min_median_max(&r.kernel_s);
        let flops = 2.0 * (m * n * k) as f64 * reps as f64;
        let pack = if linear {
            let mut best = f64::MAX;
            for _ in 0..rounds {
                let t = std::time::Instant::now();
                for _ in 0..reps {
                    kern.pack_a(a, m, k, k, 1, &mut ap).unwrap();
                    std::hint::black_box(&ap);
                }
                best = best.min(t.elapsed().as_secs_f64() / reps as f64);
            }
            format!("  pack_a {:.1} us", best * 1e6)
        } else {
            String::new()
        };
        println!(
            "{what:24} faer {:8.2} us ({:5.1} GFLOP/s)  sgemm {:8.2} us ({:5.1} GFLOP/s)  \
             faer/sgemm {lo:.2} / {med:.2} / {hi:.2}  max|diff| {err:.1e}{pack}",
            of / reps as f64 * 1e6,
            flops / of * 1e-9,
            oo / reps as f64 * 1e6,
            flops / oo * 1e-9,
        );
    }
}
