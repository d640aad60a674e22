//! Calibration probes: what this CPU sustains, measured with simple, well-understood loops.
//! * Memory bandwidth: STREAM-style copy (`b = a`) and triad (`a = b + s·c`) over f64 arrays
//!   of at least 4× the last-level cache each, counting read + write bytes (16 B per copied
//!   element, 24 B per triad element; write-allocate traffic is not counted, as in STREAM).
//! * Peak compute: an FMA-throughput microkernel with 12 independent accumulators (enough to
//!   cover the FMA latency on two pipes) using every AVX2 lane (8 f32) via `std::arch` when
//!   `is_x86_feature_detected!` finds AVX2 + FMA; a scalar loop with 8 accumulators
//!   otherwise (then the figure is a scalar peak, and says so).
//! * Achievable GEMM rate: a large square faer f32 GEMM.
//!
//! Each probe reports every sample (as a rate) and its best (the ceiling) and median. Not
//! measured: cache-level bandwidths, latency, AVX-512, mixed-precision units, turbo residency.

use crate::error::Result;
use crate::exec::filled;
use crate::harness::thread_pool;
use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;
use tensorforge_store::WorkloadIdentity;

/// One probe at one thread count, with its samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// `stream_copy`, `stream_triad`, `fma_peak` or `gemm`.
    pub probe: String,
    /// Threads the probe ran on.
    pub threads: u32,
    /// What ran (kind, parameters, dtype); `gemm` uses the harness's GEMM identity.
    pub identity: WorkloadIdentity,
    /// `identity.fingerprint()`.
    pub fingerprint: String,
    /// Unit of the samples: `bytes_per_s` or `flops_per_s`.
    pub unit: String,
    /// Bytes or FLOPs per timed repetition.
    pub work_per_sample: f64,
    /// Rate of each repetition, in `unit`.
    pub samples: Vec<f64>,
    /// Largest sample (the ceiling), in `unit`.
    pub best: f64,
    /// Median sample, in `unit`.
    pub median: f64,
}

fn ident(kind: &str, dtype: &str, params: &[(&str, serde_json::Value)]) -> WorkloadIdentity {
    WorkloadIdentity {
        kind: kind.into(),
        name: String::new(),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
        dtype: dtype.into(),
    }
}

fn result(
    probe: &str,
    threads: usize,
    mut identity: WorkloadIdentity,
    unit: &str,
    work: f64,
    samples: Vec<f64>,
) -> ProbeResult {
    identity.name = probe.into();
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    let best = sorted.last().copied().unwrap_or(0.0);
    let median = if sorted.is_empty() {
        0.0
    } else {
        tensorforge_store::stats::percentile_sorted(&sorted, 0.5)
    };
    ProbeResult {
        probe: probe.into(),
        threads: threads as u32,
        fingerprint: identity.fingerprint(),
        identity,
        unit: unit.into(),
        work_per_sample: work,
        samples,
        best,
        median,
    }
}

/// Copy and triad at `threads`, `samples` repetitions each, on `elements`-long f64 arrays.
pub fn bandwidth(elements: usize, threads: usize, samples: usize) -> Result<Vec<ProbeResult>> {
    let pool = thread_pool(threads)?;
    let chunk = elements.div_ceil(threads * 4).max(4096);
    pool.install(|| {
        // First touch in parallel, so pages land where the workers run.
        let mut a = vec![0.0f64; elements];
        let mut b = vec![0.0f64; elements];
        let mut c = vec![0.0f64; elements];
        a.par_chunks_mut(chunk).for_each(|x| x.fill(1.0));
        b.par_chunks_mut(chunk).for_each(|x| x.fill(2.0));
        c.par_chunks_mut(chunk).for_each(|x| x.fill(0.5));
        let copy = |a: &[f64], b: &mut [f64]| {
            b.par_chunks_mut(chunk)
                .zip(a.par_chunks(chunk))
                .for_each(|(d, s)| d.copy_from_slice(s));
        };
        let triad = |a: &mut [f64], b: &[f64], c: &[f64]| {
            a.par_chunks_mut(chunk)
                .zip(b.par_chunks(chunk).zip(c.par_chunks(chunk)))
                .for_each(|(a, (b, c))| {
                    for ((x, y), z) in a.iter_mut().zip(b).zip(c) {
                        *x = y + 3.0 * z;
                    }
                });
        };
        // Warm-up once each.
        copy(&a, &mut b);
        triad(&mut a, &b, &c);
        let n = elements as f64;
        let mut cs = Vec::new();
        let mut ts = Vec::new();
        for _ in 0..samples.max(1) {
            let t = Instant::now();
            copy(&a, &mut b);
            cs.push(16.0 * n / t.elapsed().as_secs_f64().max(1e-9));
            let t = Instant::now();
            triad(&mut a, &b, &c);
            ts.push(24.0 * n / t.elapsed().as_secs_f64().max(1e-9));
        }
        std::hint::black_box((&a, &b));
        let p = |probe: &str| {
            ident(
                "probe",
                "f64",
                &[
                    ("probe", serde_json::json!(probe)),
                    ("elements", serde_json::json!(elements)),
                ],
            )
        };
        Ok(vec![
            result(
                "stream_copy",
                threads,
                p("stream_copy"),
                "bytes_per_s",
                16.0 * n,
                cs,
            ),
            result(
                "stream_triad",
                threads,
                p("stream_triad"),
                "bytes_per_s",
                24.0 * n,
                ts,
            ),
        ])
    })
}

/// FMA accumulators per thread.
pub const FMA_ACCUMULATORS: u64 = 12;

/// True when the AVX2 + FMA microkernel runs on this CPU.
pub fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_avx2(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let a = _mm256_set1_ps(0.999_999);
    let b = _mm256_set1_ps(1e-7);
    let mut r = [_mm256_set1_ps(1.0); 12];
    for _ in 0..iters {
        // Twelve independent dependency chains.
        r[0] = _mm256_fmadd_ps(r[0], a, b);
        r[1] = _mm256_fmadd_ps(r[1], a, b);
        r[2] = _mm256_fmadd_ps(r[2], a, b);
        r[3] = _mm256_fmadd_ps(r[3], a, b);
        r[4] = _mm256_fmadd_ps(r[4], a, b);
        r[5] = _mm256_fmadd_ps(r[5], a, b);
        r[6] = _mm256_fmadd_ps(r[6], a, b);
        r[7] = _mm256_fmadd_ps(r[7], a, b);
        r[8] = _mm256_fmadd_ps(r[8], a, b);
        r[9] = _mm256_fmadd_ps(r[9], a, b);
        r[10] = _mm256_fmadd_ps(r[10], a, b);
        r[11] = _mm256_fmadd_ps(r[11], a, b);
    }
    let mut s = _mm256_setzero_ps();
    for v in r {
        s = _mm256_add_ps(s, v);
    }
    let mut out = [0.0f32; 8];
    _mm256_storeu_ps(out.as_mut_ptr(), s);
    out.iter().sum()
}

fn fma_scalar(iters: u64) -> f32 {
    let (a, b) = (std::hint::black_box(0.999_999f32), 1e-7f32);
    let mut r = [1.0f32; 8];
    for _ in 0..iters {
        for x in r.iter_mut() {
            *x = *x * a + b;
        }
    }
    r.iter().sum()
}

/// FLOPs of one microkernel call of `iters` iterations (2 per lane per FMA).
pub fn fma_flops(iters: u64, simd: bool) -> f64 {
    if simd {
        (iters * FMA_ACCUMULATORS * 8 * 2) as f64
    } else {
        (iters * 8 * 2) as f64
    }
}

fn fma_call(iters: u64, simd: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: only called when has_avx2_fma() said AVX2 and FMA are present.
        return unsafe { fma_avx2(iters) };
    }
    let _ = simd;
    fma_scalar(iters)
}

/// FMA peak at `threads` (every worker runs the microkernel at once): `samples` repetitions
/// of about `sample_ms` each.
pub fn fma_peak(threads: usize, samples: usize, sample_ms: u64) -> Result<ProbeResult> {
    let simd = has_avx2_fma();
    let pool = thread_pool(threads)?;
    // Size the repetition from a short trial on one thread.
    let trial = 200_000u64;
    let t = Instant::now();
    std::hint::black_box(fma_call(trial, simd));
    let per_iter = t.elapsed().as_secs_f64().max(1e-9) / trial as f64;
    let iters = ((sample_ms as f64 * 1e-3 / per_iter) as u64).clamp(10_000, 2_000_000_000);
    let mut rates = Vec::new();
    pool.broadcast(|_| std::hint::black_box(fma_call(iters / 10, simd)));
    for _ in 0..samples.max(1) {
        let t = Instant::now();
        pool.broadcast(|_| std::hint::black_box(fma_call(iters, simd)));
        let s = t.elapsed().as_secs_f64().max(1e-9);
        rates.push(fma_flops(iters, simd) * threads as f64 / s);
    }
    let id = ident(
        "probe",
        "f32",
        &[
            ("probe", serde_json::json!("fma_peak")),
            (
                "isa",
                serde_json::json!(if simd { "avx2+fma" } else { "scalar" }),
            ),
            (
                "accumulators",
                serde_json::json!(if simd { FMA_ACCUMULATORS } else { 8 }),
            ),
            ("iterations", serde_json::json!(iters)),
        ],
    );
    Ok(result(
        "fma_peak",
        threads,
        id,
        "flops_per_s",
        fma_flops(iters, simd) * threads as f64,
        rates,
    ))
}

/// Rate of a square `size³` f32 faer GEMM at `threads`, `samples` repetitions after one warm-up.
pub fn gemm_rate(size: usize, threads: usize, samples: usize) -> Result<ProbeResult> {
    let pool = thread_pool(threads)?;
    let par = if threads > 1 {
        Par::rayon(threads)
    } else {
        Par::Seq
    };
    let a = filled(size * size, 91);
    let b = filled(size * size, 92);
    let mut c = vec![0.0f32; size * size];
    let flops = 2.0 * (size as f64).powi(3);
    let rates = pool.install(|| {
        let mut run = || {
            matmul(
                MatMut::from_row_major_slice_mut(&mut c, size, size),
                Accum::Replace,
                MatRef::from_row_major_slice(&a, size, size),
                MatRef::from_row_major_slice(&b, size, size),
                1.0f32,
                par,
            )
        };
        run();
        (0..samples.max(1))
            .map(|_| {
                let t = Instant::now();
                run();
                flops / t.elapsed().as_secs_f64().max(1e-9)
            })
            .collect::<Vec<f64>>()
    });
    let s = size as u64;
    let id = crate::workload::WorkloadSpec::gemm("gemm", s, s, s, 1)?.identity();
    Ok(result("gemm", threads, id, "flops_per_s", flops, rates))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_report_positive_rates() {
        let bw = bandwidth(1 << 14, 2, 2).unwrap();
        assert_eq!(bw.len(), 2);
        for p in &bw {
            assert_eq!(p.samples.len(), 2);
            assert!(p.best > 0.0 && p.best >= p.median);
            assert_eq!(p.fingerprint, p.identity.fingerprint());
        }
        assert_ne!(bw[0].fingerprint, bw[1].fingerprint);
        let f = fma_peak(1, 2, 1).unwrap();
        assert!(f.best > 0.0 && f.unit == "flops_per_s");
        let g = gemm_rate(32, 1, 2).unwrap();
        assert_eq!(g.identity.kind, "gemm");
        assert_eq!(g.work_per_sample, 2.0 * 32f64.powi(3));
    }

    #[test]
    fn fma_flop_count() {
        // 10 iterations x 12 accumulators x 8 lanes x 2 FLOPs = 1920.
        assert_eq!(fma_flops(10, true), 1920.0);
        assert_eq!(fma_flops(10, false), 160.0);
    }
}
