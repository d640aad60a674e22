//! A 1 × 1 convolution's product two ways, best of 200 alternated calls each: channels ×
//! pixels (the filters packed as A, the input planes read in place as B, the output planes
//! as C: module `exec::conv`'s usual product) against pixels × channels (the input planes
//! read column-major as A, the filters transposed and packed as B, C stored transposed into
//! the output planes: `Kernel::gemm_transposed`), one K block of `kc` input channels at a
//! time, one thread. Prints both times, their ratio, and whether the outputs are equal bit
//! for bit (they must be: the same sums in the same order).
//!
//! `FLUSH=1` writes 64 MiB between calls, so that each call finds its filters out of cache as
//! in a model's run (the input is read again first, as the previous layer would leave it).
//! Left out: bias, clamp, several threads.
//!
//! Usage: `cargo run --release -p tensorforge-kernels --example transposed_pointwise --
//! PIXELS IN_CHANNELS OUT_CHANNELS` (AVX-512 only: the transposed store's tiles).
use std::time::Instant;
use tensorforge_kernels::sgemm::{Epilogue, Kernel, Left, Right};

fn main() {
    let Some(kern) = Kernel::detect() else {
        eprintln!("no sgemm kernel on this CPU");
        return;
    };
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .expect("three counts: PIXELS IN_CHANNELS OUT_CHANNELS")
        })
        .collect();
    let [hw, c, k] = args[..] else {
        eprintln!("usage: transposed_pointwise PIXELS IN_CHANNELS OUT_CHANNELS");
        return;
    };
    let x = tensorforge_core::rng::SplitMix64::f32_pm1_vec(1, c * hw);
    let w = tensorforge_core::rng::SplitMix64::f32_pm1_vec(2, k * c);
    let mut wp = vec![0.0; kern.packed_a_len(k, c).unwrap()];
    kern.pack_a(&w, k, c, c, 1, &mut wp).unwrap();
    // Wᵀ packed in K blocks of kc input channels.
    let kc = kern.kc();
    let wtp: Vec<Vec<f32>> = (0..c)
        .step_by(kc)
        .map(|pc| {
            let kb = kc.min(c - pc);
            let mut blk = vec![0.0; kern.packed_b_len(kb, k).unwrap()];
            kern.pack_b(&w[pc..], kb, k, 1, c, &mut blk).unwrap();
            blk
        })
        .collect();
    let (mut planar, mut transposed) = (vec![0.0f32; k * hw], vec![0.0f32; k * hw]);
    let mut best = [f64::MAX; 2];
    let flush = std::env::var_os("FLUSH").is_some();
    let mut junk = vec![1.0f32; if flush { 16 << 20 } else { 0 }];
    for _ in 0..200 {
        for (i, b) in best.iter_mut().enumerate() {
            if flush {
                junk.iter_mut().for_each(|v| *v += 1.0);
                std::hint::black_box(x.iter().sum::<f32>());
            }
            let t = Instant::now();
            if i == 0 {
                let right = Right::RowMajor { data: &x, ld: hw };
                kern.gemm_split(
                    k,
                    hw,
                    c,
                    Left::Packed(&wp),
                    right,
                    &mut planar,
                    hw,
                    false,
                    Epilogue::NONE,
                    1,
                )
                .unwrap();
            } else {
                for (bi, pc) in (0..c).step_by(kc).enumerate() {
                    let kb = kc.min(c - pc);
                    let left = Left::ColMajor {
                        data: &x[pc * hw..],
                        ld: hw,
                    };
                    let right = Right::Packed(&wtp[bi]);
                    let r = kern.gemm_transposed(
                        hw,
                        k,
                        kb,
                        left,
                        right,
                        &mut transposed,
                        hw,
                        pc > 0,
                        Epilogue::NONE,
                        1,
                    );
                    if let Err(e) = r {
                        eprintln!("{e}");
                        return;
                    }
                }
            }
            *b = b.min(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    let same = planar
        .iter()
        .zip(&transposed)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    println!(
        "{hw} pixels, {c} → {k} channels: channels × pixels {:.1} µs, transposed {:.1} µs ({:.2}x), bit-equal {same}",
        best[0],
        best[1],
        best[0] / best[1]
    );
}
