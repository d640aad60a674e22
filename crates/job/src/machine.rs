//! The machine's own speed during a run, so that a slower *machine* is not mistaken for a
//! slower *build*. Two short probes, the same code in every run: the FMA microkernel on the
//! widest vector ISA and a STREAM copy over 64 MiB arrays, each the *median* of 7 samples
//! at the run's thread count — the typical state, like the workloads' medians; a best-of
//! would pick the one sample a bursty co-tenant left alone (right for a ceiling, wrong for
//! the machine's state). The quickstart probes before and after measuring (and after any
//! confirmation runs) and keeps the slowest state; the values travel with the run as record
//! labels (`machine.fma_flops_per_s`, `machine.copy_bytes_per_s`). When this run's machine
//! is slower than the history's median by more than the policy's allowance, a timed FAIL
//! cannot be attributed to the build and becomes INCONCLUSIVE. Left out: what the probes
//! cannot see (cache contention of a particular workload, a co-tenant that starts and stops
//! between probes), and attributing part of a slowdown.

use crate::error::{JobError, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tensorforge_measure::probes::{available_fma_isas, bandwidth, fma_peak, FmaIsa};

/// Label key of the FMA probe's rate, FLOP/s.
pub const FMA_LABEL: &str = "machine.fma_flops_per_s";
/// Label key of the copy probe's rate, bytes/s.
pub const COPY_LABEL: &str = "machine.copy_bytes_per_s";

/// f64 elements per copy array (64 MiB).
const COPY_ELEMENTS: usize = 8 << 20;

/// The two probe rates.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineState {
    /// Median FMA rate, FLOP/s.
    pub fma_flops_per_s: f64,
    /// Median copy rate (read + write bytes), bytes/s.
    pub copy_bytes_per_s: f64,
}

impl MachineState {
    /// Probe now at `threads` threads (about 0.5 s).
    pub fn probe(threads: usize) -> Result<MachineState> {
        let isa = available_fma_isas()
            .first()
            .copied()
            .unwrap_or(FmaIsa::Scalar);
        let f = fma_peak(isa, threads, 7, 20)?;
        let bw = bandwidth(COPY_ELEMENTS, threads, 7)?;
        let copy = bw
            .iter()
            .find(|p| p.probe == "stream_copy")
            .map(|p| p.median)
            .ok_or_else(|| {
                JobError::invalid(
                    "machine probe",
                    "stream_copy",
                    "the copy probe gave no result",
                )
            })?;
        Ok(MachineState {
            fma_flops_per_s: f.median,
            copy_bytes_per_s: copy,
        })
    }

    /// The slower of two states, probe by probe.
    pub fn slowest(self, other: MachineState) -> MachineState {
        MachineState {
            fma_flops_per_s: self.fma_flops_per_s.min(other.fma_flops_per_s),
            copy_bytes_per_s: self.copy_bytes_per_s.min(other.copy_bytes_per_s),
        }
    }

    /// The state as record labels.
    pub fn labels(&self) -> [(String, String); 2] {
        [
            (FMA_LABEL.into(), format!("{:.6e}", self.fma_flops_per_s)),
            (COPY_LABEL.into(), format!("{:.6e}", self.copy_bytes_per_s)),
        ]
    }

    /// Read a state back from record labels (`None` when a run predates the probes).
    pub fn from_labels(l: &BTreeMap<String, String>) -> Option<MachineState> {
        let get = |k: &str| l.get(k)?.parse::<f64>().ok().filter(|v| *v > 0.0);
        Some(MachineState {
            fma_flops_per_s: get(FMA_LABEL)?,
            copy_bytes_per_s: get(COPY_LABEL)?,
        })
    }
}

/// How much slower `now` is than the median of `history`: the larger of the two probes'
/// `median_history / now − 1`, with the probe's name. `None` without history.
pub fn slowdown(now: &MachineState, history: &[MachineState]) -> Option<(f64, &'static str)> {
    if history.is_empty() {
        return None;
    }
    let med = |f: fn(&MachineState) -> f64| {
        let v: Vec<f64> = history.iter().map(f).collect();
        tensorforge_ops::stats::median(&v)
    };
    let fma = med(|s| s.fma_flops_per_s) / now.fma_flops_per_s - 1.0;
    let copy = med(|s| s.copy_bytes_per_s) / now.copy_bytes_per_s - 1.0;
    Some(if fma >= copy {
        (fma, "FMA compute probe")
    } else {
        (copy, "copy-bandwidth probe")
    })
}

/// When `now` is slower than the median machine state of the history's runs (read from
/// their records' labels) by more than the policy's allowed p50 regression: the timed FAILs
/// of `g` become INCONCLUSIVE and the sentence saying why is returned (None when nothing
/// was downgraded). `what` names the machine in the sentence (`machine`, `GPU`).
pub fn downgrade_for_drift(
    policy: &tensorforge_ops::Policy,
    now: &MachineState,
    history: &crate::baseline::LabelledHistory,
    g: &mut tensorforge_ops::GateResult,
    what: &str,
) -> Option<String> {
    let past: Vec<MachineState> = history
        .runs
        .iter()
        .filter_map(|info| {
            history
                .records
                .iter()
                .find(|r| r.run_id == info.run_id)
                .and_then(|r| MachineState::from_labels(&r.labels))
        })
        .collect();
    let allowed = policy
        .metrics
        .get(&tensorforge_ops::Metric::LatencyP50)
        .map_or(0.05, |m| m.max_relative);
    let (slow, probe) = slowdown(now, &past)?;
    if slow <= allowed {
        return None;
    }
    let why = format!(
        "the {what} itself measured {:.1} % slower in this run than the median of {} earlier run(s) ({probe}), beyond the allowed {:.1} %: a timed change cannot be attributed to the build",
        slow * 100.0,
        past.len(),
        allowed * 100.0
    );
    (tensorforge_ops::downgrade_timed_failures(g, &why) > 0).then_some(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(f: f64, c: f64) -> MachineState {
        MachineState {
            fma_flops_per_s: f,
            copy_bytes_per_s: c,
        }
    }

    #[test]
    fn slowdown_against_the_history_median() {
        // History FMA 100, 110, 90 (median 100), copy 10, 10, 10; now 80 and 10:
        // FMA 100/80 − 1 = 25 % slower, copy 0 %.
        let h = [st(100.0, 10.0), st(110.0, 10.0), st(90.0, 10.0)];
        let (s, which) = slowdown(&st(80.0, 10.0), &h).unwrap();
        assert!((s - 0.25).abs() < 1e-12 && which.contains("FMA"));
        let (s, which) = slowdown(&st(100.0, 5.0), &h).unwrap();
        assert!((s - 1.0).abs() < 1e-12 && which.contains("copy"));
        assert!(slowdown(&st(1.0, 1.0), &[]).is_none());
        // Labels round-trip; a run without them has no state.
        let m = st(1.5e11, 2.5e10);
        let l: BTreeMap<String, String> = m.labels().into_iter().collect();
        let back = MachineState::from_labels(&l).unwrap();
        assert!((back.fma_flops_per_s / m.fma_flops_per_s - 1.0).abs() < 1e-6);
        assert!(MachineState::from_labels(&BTreeMap::new()).is_none());
        assert_eq!(st(1.0, 5.0).slowest(st(2.0, 3.0)), st(1.0, 3.0));
    }

    #[test]
    fn probing_gives_positive_rates() {
        let s = MachineState::probe(1).unwrap();
        assert!(s.fma_flops_per_s > 0.0 && s.copy_bytes_per_s > 0.0);
    }
}
