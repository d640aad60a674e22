//! Calibration probes: what this CPU sustains, measured with simple, well-understood loops.
//! * Memory bandwidth: STREAM-style copy (`b = a`) and triad (`a = b + s·c`) over f64 arrays
//!   of at least 4× the last-level cache each, counting read + write bytes (16 B per copied
//!   element, 24 B per triad element; write-allocate traffic is not counted, as in STREAM).
//! * Peak compute: an f32 FMA-throughput microkernel on each vector ISA the CPU has
//!   ([`available_fma_isas`]): AVX-512F (24 independent zmm chains, 16 lanes), AVX2 + FMA
//!   (12 ymm chains, 8 lanes), NEON on aarch64 (16 chains, 4 lanes), else a scalar loop
//!   (8 chains). Every ISA keeps more chains than FMA latency × FMA pipes (about 4 × 2), so
//!   the pipes, not the dependency chains, limit it.
//! * Achievable GEMM rate: square faer f32 GEMMs (the caller picks the sizes).
//!
//! Each probe reports every sample (as a rate) and its best (the ceiling) and median. Not
//! measured: cache-level bandwidths, latency, f64 and mixed-precision units (AMX, VNNI,
//! `avx512_fp16`), turbo residency.

use crate::error::{MeasureError, Result};
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

/// `b = a` in parallel chunks of `chunk` elements on the current rayon pool.
fn par_copy(a: &[f64], b: &mut [f64], chunk: usize) {
    b.par_chunks_mut(chunk)
        .zip(a.par_chunks(chunk))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

/// [`bandwidth`]'s STREAM copy on arrays allocated and paged in once, timed one copy at a
/// time: a benchmark alternates it with what it measures, so that both sides see the same
/// moments of a shared machine (a copy measured only before or after drifts with the
/// co-tenants' load).
///
/// ```
/// let mut c = tensorforge_measure::probes::CopyProbe::new(1 << 16, 1).unwrap();
/// assert!(c.once() > 0.0);
/// ```
pub struct CopyProbe {
    pool: rayon::ThreadPool,
    a: Vec<f64>,
    b: Vec<f64>,
    chunk: usize,
}

impl CopyProbe {
    /// Two `elements`-long f64 arrays paged in by `threads` workers (first touch in parallel,
    /// as [`bandwidth`] does), copied once to warm up.
    pub fn new(elements: usize, threads: usize) -> Result<Self> {
        let pool = thread_pool(threads)?;
        let chunk = elements.div_ceil(threads.max(1) * 4).max(4096);
        let (a, b) = pool.install(|| {
            let mut a = vec![0.0f64; elements];
            let mut b = vec![0.0f64; elements];
            a.par_chunks_mut(chunk).for_each(|x| x.fill(1.0));
            b.par_chunks_mut(chunk).for_each(|x| x.fill(2.0));
            par_copy(&a, &mut b, chunk);
            (a, b)
        });
        Ok(CopyProbe { pool, a, b, chunk })
    }

    /// One sample: the best of at least two copies and as many as fill 1 ms, in one visit to
    /// the workers (waking them costs tens of µs, as much as a small copy), in bytes per
    /// second, counting 16 bytes per element (read + write, as [`bandwidth`]'s
    /// `stream_copy`).
    pub fn once(&mut self) -> f64 {
        let (a, b, chunk) = (&self.a, &mut self.b, self.chunk);
        let best_s = self.pool.install(|| {
            let start = Instant::now();
            let mut best = f64::INFINITY;
            let mut n = 0;
            while n < 2 || start.elapsed().as_secs_f64() < 1e-3 {
                let t = Instant::now();
                par_copy(a, b, chunk);
                best = best.min(t.elapsed().as_secs_f64());
                n += 1;
            }
            best
        });
        std::hint::black_box(&self.b);
        16.0 * a.len() as f64 / best_s.max(1e-9)
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
        let copy = |a: &[f64], b: &mut [f64]| par_copy(a, b, chunk);
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

/// A vector instruction set the FMA probe can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FmaIsa {
    /// x86-64 AVX-512F: 512-bit `vfmadd` on zmm registers, 16 f32 lanes.
    Avx512f,
    /// x86-64 AVX2 + FMA: 256-bit `vfmadd` on ymm registers, 8 f32 lanes.
    Avx2Fma,
    /// aarch64 NEON (Advanced SIMD): 128-bit `fmla`, 4 f32 lanes.
    Neon,
    /// Plain scalar Rust (`x * a + b`, which the compiler may or may not fuse).
    Scalar,
}

impl FmaIsa {
    /// Label used in identities, notes and the provenance (`avx512f`, `avx2+fma`, `neon`,
    /// `scalar`).
    pub fn label(self) -> &'static str {
        match self {
            FmaIsa::Avx512f => "avx512f",
            FmaIsa::Avx2Fma => "avx2+fma",
            FmaIsa::Neon => "neon",
            FmaIsa::Scalar => "scalar",
        }
    }

    /// f32 lanes of one vector register.
    pub fn f32_lanes(self) -> u64 {
        match self {
            FmaIsa::Avx512f => 16,
            FmaIsa::Avx2Fma => 8,
            FmaIsa::Neon => 4,
            FmaIsa::Scalar => 1,
        }
    }

    /// Independent accumulator chains per thread. Throughput needs at least
    /// `FMA latency × FMA pipes` chains in flight (4 cycles × 2 pipes = 8 on current x86 and
    /// Arm cores); each ISA keeps more, within its register file (32 zmm, 16 ymm, 32 NEON
    /// `v` registers) next to the two constant operands.
    pub fn accumulators(self) -> u64 {
        match self {
            FmaIsa::Avx512f => 24,
            FmaIsa::Avx2Fma => 12,
            FmaIsa::Neon => 16,
            FmaIsa::Scalar => 8,
        }
    }
}

/// Every FMA ISA this CPU can run, widest first (a vector ISA, then the ones it implies;
/// `scalar` only when no vector ISA is present).
pub fn available_fma_isas() -> Vec<FmaIsa> {
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            v.push(FmaIsa::Avx512f);
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            v.push(FmaIsa::Avx2Fma);
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            v.push(FmaIsa::Neon);
        }
    }
    if v.is_empty() {
        v.push(FmaIsa::Scalar);
    }
    v
}

/// The widest FMA ISA this CPU can run.
pub fn widest_fma_isa() -> FmaIsa {
    available_fma_isas()[0]
}

/// True when the AVX2 + FMA microkernel runs on this CPU.
pub fn has_avx2_fma() -> bool {
    available_fma_isas().contains(&FmaIsa::Avx2Fma)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_avx512f(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let a = _mm512_set1_ps(0.999_999);
    let b = _mm512_set1_ps(1e-7);
    let mut r = [_mm512_set1_ps(1.0); 24];
    for _ in 0..iters {
        // 24 independent dependency chains (the constant-length loop is unrolled).
        for x in r.iter_mut() {
            *x = _mm512_fmadd_ps(*x, a, b);
        }
    }
    let mut s = _mm512_setzero_ps();
    for v in r {
        s = _mm512_add_ps(s, v);
    }
    _mm512_reduce_add_ps(s)
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
        for x in r.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    let mut s = _mm256_setzero_ps();
    for v in r {
        s = _mm256_add_ps(s, v);
    }
    let mut out = [0.0f32; 8];
    _mm256_storeu_ps(out.as_mut_ptr(), s);
    out.iter().sum()
}

#[cfg(target_arch = "aarch64")]
fn fma_neon(iters: u64) -> f32 {
    use std::arch::aarch64::*;
    // SAFETY: NEON is part of the aarch64 baseline; these intrinsics only touch registers
    // and the local `r` array.
    unsafe {
        let a = vdupq_n_f32(0.999_999);
        let b = vdupq_n_f32(1e-7);
        let mut r = [vdupq_n_f32(1.0); 16];
        for _ in 0..iters {
            for x in r.iter_mut() {
                *x = vfmaq_f32(b, *x, a);
            }
        }
        let mut s = vdupq_n_f32(0.0);
        for v in r {
            s = vaddq_f32(s, v);
        }
        vaddvq_f32(s)
    }
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

/// FLOPs of one microkernel call of `iters` iterations on `isa`:
/// `iters × accumulators × f32 lanes × 2` (an FMA is a multiply and an add per lane).
pub fn fma_flops(iters: u64, isa: FmaIsa) -> f64 {
    (iters * isa.accumulators() * isa.f32_lanes() * 2) as f64
}

fn fma_call(iters: u64, isa: FmaIsa) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` comes from available_fma_isas(), which detected AVX-512F.
        FmaIsa::Avx512f => unsafe { fma_avx512f(iters) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` comes from available_fma_isas(), which detected AVX2 and FMA.
        FmaIsa::Avx2Fma => unsafe { fma_avx2(iters) },
        #[cfg(target_arch = "aarch64")]
        FmaIsa::Neon => fma_neon(iters),
        _ => fma_scalar(iters),
    }
}

/// FMA peak of `isa` (f32) at `threads` (every worker runs the microkernel at once):
/// `samples` repetitions of about `sample_ms` each. Errors when `isa` is not available on
/// this CPU.
pub fn fma_peak(
    isa: FmaIsa,
    threads: usize,
    samples: usize,
    sample_ms: u64,
) -> Result<ProbeResult> {
    if !available_fma_isas().contains(&isa) && isa != FmaIsa::Scalar {
        return Err(MeasureError::invalid(
            "fma probe",
            "isa",
            isa.label(),
            "is not available on this CPU",
        ));
    }
    let pool = thread_pool(threads)?;
    // Size the repetition from a short trial on one thread.
    let trial = 200_000u64;
    let t = Instant::now();
    std::hint::black_box(fma_call(trial, isa));
    let per_iter = t.elapsed().as_secs_f64().max(1e-9) / trial as f64;
    let iters = ((sample_ms as f64 * 1e-3 / per_iter) as u64).clamp(10_000, 2_000_000_000);
    let mut rates = Vec::new();
    pool.broadcast(|_| std::hint::black_box(fma_call(iters / 10, isa)));
    for _ in 0..samples.max(1) {
        let t = Instant::now();
        pool.broadcast(|_| std::hint::black_box(fma_call(iters, isa)));
        let s = t.elapsed().as_secs_f64().max(1e-9);
        rates.push(fma_flops(iters, isa) * threads as f64 / s);
    }
    let id = ident(
        "probe",
        "f32",
        &[
            ("probe", serde_json::json!("fma_peak")),
            ("isa", serde_json::json!(isa.label())),
            ("accumulators", serde_json::json!(isa.accumulators())),
            ("iterations", serde_json::json!(iters)),
        ],
    );
    Ok(result(
        "fma_peak",
        threads,
        id,
        "flops_per_s",
        fma_flops(iters, isa) * threads as f64,
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
        for isa in available_fma_isas() {
            let f = fma_peak(isa, 1, 2, 1).unwrap();
            assert!(f.best > 0.0 && f.unit == "flops_per_s");
            assert_eq!(f.identity.params["isa"], isa.label());
        }
        let g = gemm_rate(32, 1, 2).unwrap();
        assert_eq!(g.identity.kind, "gemm");
        assert_eq!(g.work_per_sample, 2.0 * 32f64.powi(3));
    }

    #[test]
    fn fma_flop_count() {
        // 10 iterations x 24 accumulators x 16 lanes x 2 FLOPs = 7680.
        assert_eq!(fma_flops(10, FmaIsa::Avx512f), 7680.0);
        // 10 x 12 x 8 x 2 = 1920.
        assert_eq!(fma_flops(10, FmaIsa::Avx2Fma), 1920.0);
        // 10 x 16 x 4 x 2 = 1280.
        assert_eq!(fma_flops(10, FmaIsa::Neon), 1280.0);
        // 10 x 8 x 1 x 2 = 160.
        assert_eq!(fma_flops(10, FmaIsa::Scalar), 160.0);
    }

    #[test]
    fn isa_detection_is_ordered_and_checked() {
        let isas = available_fma_isas();
        assert!(!isas.is_empty());
        // Widest first.
        for w in isas.windows(2) {
            assert!(w[0].f32_lanes() > w[1].f32_lanes(), "{isas:?}");
        }
        assert_eq!(widest_fma_isa(), isas[0]);
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(
                isas.contains(&FmaIsa::Avx512f),
                is_x86_feature_detected!("avx512f")
            );
            // No NEON on x86: asking for it is a one-line error naming the field.
            let e = fma_peak(FmaIsa::Neon, 1, 1, 1).unwrap_err().to_string();
            assert!(e.contains("isa") && e.contains("neon"), "{e}");
        }
    }
}
