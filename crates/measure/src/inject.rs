//! Deliberate slowdowns for gate sensitivity trials (`TENSORFORGE_INJECT_EXTRA_WORK`): real
//! extra work added to every call of one named workload, so that every metric the gate uses
//! sees it — time, instruction counts and the cache-simulated cycle estimate alike.
//!
//! Two modes: `NAME=FRACTION` runs, after each call, an instance of the same workload with
//! `FRACTION` of its work (its own code on its own buffers, [`WorkloadSpec::scaled`]);
//! `NAME=stream:FRACTION` reads, after each call, `FRACTION` × the workload's compulsory
//! bytes from a ring of memory larger than any cache, a memory-bound slowdown. Records of
//! the workload carry [`InjectedWork`], so reports say a slowdown was injected. Left out:
//! slowdowns that change the instance's own code path (that is what a real regression is),
//! and workloads without a scalable dimension (graphs, transformer blocks), which are
//! refused in mode `work`.

use crate::error::{MeasureError, Result};
use crate::exec::{prepare, Iteration};
use crate::workload::WorkloadSpec;
use tensorforge_store::{InjectedWork, InjectionMode};

/// Environment variable for gate sensitivity trials: `NAME=FRACTION` (mode `work`) or
/// `NAME=stream:FRACTION`. Never set by TensorForge itself; `tools/gate_trials.sh` uses it.
pub const INJECT_EXTRA_WORK_ENV: &str = "TENSORFORGE_INJECT_EXTRA_WORK";

/// Bytes of the ring the `stream` mode reads from (128 MiB: beyond the last-level cache of
/// the machines this runs on, and beyond the counter's simulated 8 MiB last level).
pub const STREAM_RING_BYTES: usize = 128 << 20;

/// Parse an injection value (`NAME=FRACTION` or `NAME=stream:FRACTION`) into the workload
/// name and the injected work.
///
/// ```
/// use tensorforge_measure::inject::parse_injection;
/// use tensorforge_store::InjectionMode;
/// let (name, w) = parse_injection("softmax_1024x4096=stream:0.25").unwrap();
/// assert_eq!((name.as_str(), w.mode, w.fraction), ("softmax_1024x4096", InjectionMode::Stream, 0.25));
/// ```
pub fn parse_injection(v: &str) -> Result<(String, InjectedWork)> {
    let Some((name, rest)) = v.rsplit_once('=') else {
        return Err(MeasureError::invalid(
            INJECT_EXTRA_WORK_ENV,
            "value",
            v,
            "expected NAME=FRACTION or NAME=stream:FRACTION, e.g. gemm_tall=0.10",
        ));
    };
    let (mode, frac) = match rest.split_once(':') {
        Some(("stream", f)) => (InjectionMode::Stream, f),
        Some(("work", f)) => (InjectionMode::Work, f),
        Some((m, _)) => {
            return Err(MeasureError::invalid(
                INJECT_EXTRA_WORK_ENV,
                "mode",
                m,
                "expected work or stream",
            ))
        }
        None => (InjectionMode::Work, rest),
    };
    let fraction: f64 = frac.trim().parse().map_err(|_| {
        MeasureError::invalid(INJECT_EXTRA_WORK_ENV, "fraction", frac, "not a number")
    })?;
    if !(fraction.is_finite() && fraction > 0.0 && fraction <= 1.0) {
        return Err(MeasureError::invalid(
            INJECT_EXTRA_WORK_ENV,
            "fraction",
            frac,
            "must be in (0, 1]",
        ));
    }
    Ok((name.trim().to_string(), InjectedWork { mode, fraction }))
}

/// The work injected into `workload`, if [`INJECT_EXTRA_WORK_ENV`] names it.
pub fn injected_work(workload: &str) -> Result<Option<InjectedWork>> {
    let Ok(v) = std::env::var(INJECT_EXTRA_WORK_ENV) else {
        return Ok(None);
    };
    let (name, w) = parse_injection(&v)?;
    Ok((name == workload).then_some(w))
}

/// `call` followed, on every call, by the injected work `w` for `spec`.
pub fn with_injected_work(
    mut call: Iteration,
    spec: &WorkloadSpec,
    w: InjectedWork,
    threads: usize,
    seed: u64,
) -> Result<Iteration> {
    match w.mode {
        InjectionMode::Work => {
            let Some(extra) = spec.scaled(w.fraction)? else {
                return Err(MeasureError::invalid(
                    INJECT_EXTRA_WORK_ENV,
                    "workload",
                    &spec.name,
                    "has no dimension to take a fraction of (mode work needs a GEMM, convolution or kernel; use stream:FRACTION)",
                ));
            };
            let mut extra = prepare(&extra.kind, threads, seed.wrapping_add(1_000_003))?;
            Ok(Box::new(move || {
                call()?;
                extra()
            }))
        }
        InjectionMode::Stream => {
            let bytes = spec.bytes()?.unwrap_or(0.0) * w.fraction;
            let per_call = ((bytes / 4.0).ceil() as usize).clamp(16, STREAM_RING_BYTES / 4);
            // Filled with non-zero values so every page is real memory, not the zero page.
            let ring = vec![1.0f32; STREAM_RING_BYTES / 4];
            let mut at = 0usize;
            Ok(Box::new(move || {
                call()?;
                if at + per_call > ring.len() {
                    at = 0;
                }
                // One load per 64-byte line: the pass costs memory traffic, not arithmetic
                // (a few instructions per line), as a memory-bound regression does.
                let s: f32 = ring[at..at + per_call].iter().step_by(16).sum();
                std::hint::black_box(s);
                at += per_call;
                Ok(())
            }))
        }
    }
}

/// Prepare one instance of `spec` (as [`prepare`]) with the injected work of
/// [`INJECT_EXTRA_WORK_ENV`] added when it names this workload.
pub fn prepare_spec(spec: &WorkloadSpec, threads: usize, seed: u64) -> Result<Iteration> {
    let call = prepare(&spec.kind, threads, seed)?;
    match injected_work(&spec.name)? {
        Some(w) => with_injected_work(call, spec, w, threads, seed),
        None => Ok(call),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_modes_and_refuses_bad_values() {
        let (n, w) = parse_injection("gemm_tall=0.10").unwrap();
        assert_eq!(n, "gemm_tall");
        assert_eq!(w.mode, InjectionMode::Work);
        assert!((w.fraction - 0.10).abs() < 1e-12);
        let (_, w) = parse_injection("a=b=work:1").unwrap();
        assert_eq!(w.mode, InjectionMode::Work);
        for bad in [
            "gemm_tall",
            "x=0",
            "x=1.5",
            "x=nan",
            "x=spin:0.1",
            "x=stream:",
        ] {
            let e = parse_injection(bad).unwrap_err().to_string();
            assert!(e.contains(INJECT_EXTRA_WORK_ENV), "{bad}: {e}");
        }
    }

    #[test]
    fn work_mode_runs_the_smaller_instance_too() {
        // Softmax of 40 rows with 25 % more work: the extra instance has round(40 · 0.25)
        // = 10 rows. Both calls run; the wrapped call succeeds.
        let spec = crate::workload::parse_workload_name("kernel:softmax:rows=40:cols=64").unwrap();
        let extra = spec.scaled(0.25).unwrap().unwrap();
        assert_eq!(
            extra.kind,
            crate::workload::parse_workload_name("kernel:softmax:rows=10:cols=64")
                .unwrap()
                .kind
        );
        let call = prepare(&spec.kind, 1, 1).unwrap();
        let w = InjectedWork {
            mode: InjectionMode::Work,
            fraction: 0.25,
        };
        let mut f = with_injected_work(call, &spec, w, 1, 1).unwrap();
        f().unwrap();
        f().unwrap();
    }

    #[test]
    fn work_mode_refuses_graphs() {
        let spec = crate::workload::parse_workload_name("graph:logaddexp_chain").unwrap();
        let call = prepare(&spec.kind, 1, 1).unwrap();
        let w = InjectedWork {
            mode: InjectionMode::Work,
            fraction: 0.1,
        };
        let e = with_injected_work(call, &spec, w, 1, 1)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("stream:FRACTION"), "{e}");
    }
}
