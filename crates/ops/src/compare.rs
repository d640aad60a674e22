//! Decisions for an interleaved A/B comparison: the baseline (A) and the candidate (B) were
//! measured in the same job in alternating rounds (ABBA by default), so slow drift of a
//! shared machine hits both sides alike and the unit of replication is the round.
//!
//! Per workload and round, `L_i = ln(B_i / A_i)`, where each side's value is the geometric
//! mean of its runs in that round (two each under ABBA). Across the k rounds:
//! - the change is `exp(median L) − 1`, with a seeded percentile-bootstrap interval of the
//!   median;
//! - the one-sided Wilcoxon signed-rank test of "L is centred above 0" (exact for small k),
//!   Benjamini–Hochberg adjusted across the suite;
//! - the noise floor: the smallest change the rounds resolve,
//!   `exp(z_{1−α} · 1.2533 · σ / √k) − 1`, with σ the robust spread (1.4826·MAD) of the
//!   per-round log ratios `L_i` and 1.2533 the median's efficiency factor. (The A/A spread
//!   `ln(A2_i / A1_i)` inside ABBA rounds is reported beside it, but it is not the floor:
//!   the two baseline runs of a round are three runs apart, so within-round drift, which
//!   ABBA cancels in `L_i`, inflates it.)
//!
//! A workload FAILs when the adjusted p ≤ α *and* the change exceeds
//! `threshold = max(allowed relative change of the policy's latency_p50, noise floor)`;
//! it PASSes when the interval's upper end is within the policy's allowance (clearly not a
//! regression worth failing for: a large noise floor never turns into a PASS, it only keeps
//! a FAIL from being claimed); otherwise it is INCONCLUSIVE, and the caller may run more rounds
//! up to the policy's budget (as Chromium's Pinpoint does). Left out: drift faster than a
//! round, carry-over between adjacent runs (cache, frequency), and any model evidence.

use crate::gate::Verdict;
use crate::policy::{Metric, Policy};
use crate::rng::derive_seed;
use crate::stats;
use serde::{Deserialize, Serialize};

/// Version of the comparison JSON.
pub const COMPARE_SCHEMA_VERSION: u32 = 1;

/// One round of one workload: each side's per-iteration time in ns, one value per run of
/// that side in the round (two under ABBA).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Round {
    /// Baseline values, ns, in the order they ran.
    pub baseline_ns: Vec<f64>,
    /// Candidate values, ns, in the order they ran.
    pub candidate_ns: Vec<f64>,
}

/// Every round of one workload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct WorkloadRounds {
    /// Display name.
    pub name: String,
    /// Workload fingerprint (equal on both sides; the caller checks identity).
    pub fingerprint: String,
    /// Rounds in the order they ran.
    pub rounds: Vec<Round>,
}

/// The decision for one workload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CompareRow {
    /// Display name.
    pub workload: String,
    /// Fingerprint.
    pub fingerprint: String,
    /// Rounds used.
    pub rounds: usize,
    /// Per-round ratio candidate / baseline.
    pub ratios: Vec<f64>,
    /// `exp(median ln ratio) − 1`; > 0 is slower.
    pub change_relative: f64,
    /// Bootstrap interval of the change, (low, high).
    pub interval: Option<(f64, f64)>,
    /// Two-sided coverage of the interval.
    pub confidence: f64,
    /// Smallest change these rounds resolve (relative).
    pub noise_floor_relative: f64,
    /// Robust spread of the A/A ratio of the two baseline runs inside each ABBA round
    /// (relative; a diagnostic of the machine's noise, not used in the decision).
    pub aa_spread_relative: Option<f64>,
    /// The policy's allowed relative change (latency_p50 `max_relative`).
    pub allowed_relative: f64,
    /// `max(allowed_relative, noise_floor_relative)`.
    pub threshold_relative: f64,
    /// Wilcoxon `W+`.
    pub w_plus: f64,
    /// One-sided Wilcoxon p-value.
    pub p_value: f64,
    /// Benjamini–Hochberg adjusted p-value (when the policy turns it on).
    pub p_adjusted: Option<f64>,
    /// `exact` or `normal`.
    pub test_method: String,
    /// Significance level.
    pub alpha: f64,
    /// PASS, FAIL or INCONCLUSIVE.
    pub verdict: Verdict,
    /// Why, in one sentence.
    pub reason: String,
}

/// Every workload's decision and the overall one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CompareResult {
    /// Always [`COMPARE_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `measurement+policy`.
    pub evidence: String,
    /// The design, in words.
    pub design: String,
    /// Where the policy came from.
    pub policy_source: String,
    /// Overall verdict: FAIL over INCONCLUSIVE over PASS.
    pub overall: Verdict,
    /// Exit status for `overall`.
    pub exit_code: u8,
    /// One line per deciding row.
    pub reasons: Vec<String>,
    /// Per-workload rows, in input order.
    pub rows: Vec<CompareRow>,
}

/// Why `decide` could not decide at all.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompareError {
    /// The policy does not gate median latency, which the comparison needs.
    #[error("policy {0}: `metrics.latency_p50` is required for an interleaved comparison")]
    NoLatencyPolicy(String),
    /// A round holds no value, or a non-positive one.
    #[error("workload `{workload}`, round {round}: {why}")]
    BadRound {
        /// Workload name.
        workload: String,
        /// 1-based round.
        round: usize,
        /// What is wrong.
        why: String,
    },
}

fn geo(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// Decide every workload from its rounds under `policy` (see the module comment).
pub fn decide(
    policy: &Policy,
    workloads: &[WorkloadRounds],
) -> Result<CompareResult, CompareError> {
    let mp = policy
        .metrics
        .get(&Metric::LatencyP50)
        .ok_or_else(|| CompareError::NoLatencyPolicy(policy.source.clone()))?;
    let alpha = mp.alpha;
    let z = stats::normal_quantile(1.0 - alpha);
    let mut rows = Vec::new();
    for w in workloads {
        let mut logs = Vec::with_capacity(w.rounds.len());
        let mut aa = Vec::new();
        for (i, r) in w.rounds.iter().enumerate() {
            let bad = |why: &str| CompareError::BadRound {
                workload: w.name.clone(),
                round: i + 1,
                why: why.into(),
            };
            if r.baseline_ns.is_empty() || r.candidate_ns.is_empty() {
                return Err(bad("a side has no value"));
            }
            if r.baseline_ns
                .iter()
                .chain(&r.candidate_ns)
                .any(|x| !(x.is_finite() && *x > 0.0))
            {
                return Err(bad("a value is not a positive, finite time"));
            }
            logs.push((geo(&r.candidate_ns) / geo(&r.baseline_ns)).ln());
            if r.baseline_ns.len() >= 2 {
                aa.push((r.baseline_ns[1] / r.baseline_ns[0]).ln());
            }
        }
        let k = logs.len();
        let med = stats::median(&logs);
        let sigma = stats::robust_sd(&logs);
        let aa_spread = (aa.len() >= 3).then(|| stats::robust_sd(&aa).exp() - 1.0);
        let noise_floor = if k > 0 {
            (z * 1.2533 * sigma / (k as f64).sqrt()).exp() - 1.0
        } else {
            f64::INFINITY
        };
        let seed = derive_seed(policy.suite.seed, &format!("{}/compare", w.fingerprint));
        let interval = stats::bootstrap_median_interval(
            &logs,
            policy.suite.bootstrap_resamples.max(1000),
            policy.suite.confidence,
            seed,
        )
        .map(|(lo, hi)| (lo.exp() - 1.0, hi.exp() - 1.0));
        let wx = stats::wilcoxon_signed_rank_greater(&logs);
        let allowed = mp.max_relative;
        rows.push(CompareRow {
            workload: w.name.clone(),
            fingerprint: w.fingerprint.clone(),
            rounds: k,
            ratios: logs.iter().map(|l| l.exp()).collect(),
            change_relative: med.exp() - 1.0,
            interval,
            confidence: policy.suite.confidence,
            noise_floor_relative: noise_floor,
            aa_spread_relative: aa_spread,
            allowed_relative: allowed,
            threshold_relative: allowed.max(noise_floor),
            w_plus: wx.w_plus,
            p_value: wx.p_value,
            p_adjusted: None,
            test_method: match wx.method {
                stats::MwuMethod::Exact => "exact".into(),
                stats::MwuMethod::Normal => "normal".into(),
            },
            alpha,
            verdict: Verdict::Inconclusive,
            reason: String::new(),
        });
    }
    if policy.suite.benjamini_hochberg {
        let p: Vec<f64> = rows.iter().map(|r| r.p_value).collect();
        for (r, q) in rows.iter_mut().zip(stats::benjamini_hochberg(&p)) {
            r.p_adjusted = Some(q);
        }
    }
    for r in rows.iter_mut() {
        let p = r.p_adjusted.unwrap_or(r.p_value);
        let which = if r.p_adjusted.is_some() {
            "BH-adjusted p"
        } else {
            "p"
        };
        let pct = |x: f64| format!("{:+.1} %", x * 100.0);
        let th = format!(
            "{:.1} % (allowed {:.1} %, noise floor {:.1} %)",
            r.threshold_relative * 100.0,
            r.allowed_relative * 100.0,
            r.noise_floor_relative * 100.0
        );
        let iv = r
            .interval
            .map(|(lo, hi)| format!("[{}, {}]", pct(lo), pct(hi)))
            .unwrap_or_else(|| "n/a".into());
        let hi = r.interval.map_or(f64::INFINITY, |i| i.1);
        if p <= r.alpha && r.change_relative > r.threshold_relative {
            r.verdict = Verdict::Fail;
            r.reason = format!(
                "median change {} over {} rounds (interval {iv}) is beyond the threshold {th}, and the rounds agree ({which} = {p:.2e} ≤ α = {})",
                pct(r.change_relative), r.rounds, r.alpha
            );
        } else if hi <= r.allowed_relative {
            r.verdict = Verdict::Pass;
            r.reason = format!(
                "median change {} over {} rounds; its interval {iv} stays within the allowed {:.1} %",
                pct(r.change_relative),
                r.rounds,
                r.allowed_relative * 100.0
            );
        } else {
            r.verdict = Verdict::Inconclusive;
            r.reason = format!(
                "median change {} over {} rounds (interval {iv}, {which} = {p:.2e}): neither clearly within the threshold {th} nor clearly beyond it",
                pct(r.change_relative),
                r.rounds
            );
        }
    }
    let has = |v: Verdict| rows.iter().any(|r| r.verdict == v);
    let overall = if rows.is_empty() {
        Verdict::Error
    } else if has(Verdict::Fail) {
        Verdict::Fail
    } else if has(Verdict::Inconclusive) {
        Verdict::Inconclusive
    } else {
        Verdict::Pass
    };
    let mut reasons: Vec<String> = rows
        .iter()
        .filter(|r| r.verdict == overall)
        .map(|r| format!("{}: {} — {}", r.workload, r.verdict.label(), r.reason))
        .collect();
    if rows.is_empty() {
        reasons.push("no workload on both sides: nothing was compared".into());
    }
    Ok(CompareResult {
        schema_version: COMPARE_SCHEMA_VERSION,
        evidence: "measurement+policy".into(),
        design: format!(
            "interleaved rounds ({}), per-round ratio candidate/baseline, Wilcoxon signed-rank over rounds{}",
            policy.compare.order.name(),
            if policy.suite.benjamini_hochberg {
                ", Benjamini–Hochberg across workloads"
            } else {
                ""
            }
        ),
        policy_source: policy.source.clone(),
        overall,
        exit_code: overall.exit_code(),
        reasons,
        rows,
    })
}

/// Whether another batch of rounds could change the outcome: some workload is INCONCLUSIVE.
pub fn wants_more_rounds(r: &CompareResult) -> bool {
    r.rows.iter().any(|x| x.verdict == Verdict::Inconclusive)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rounds(pairs: &[(f64, f64, f64, f64)]) -> WorkloadRounds {
        WorkloadRounds {
            name: "w".into(),
            fingerprint: "f".into(),
            rounds: pairs
                .iter()
                .map(|(a1, b1, b2, a2)| Round {
                    baseline_ns: vec![*a1, *a2],
                    candidate_ns: vec![*b1, *b2],
                })
                .collect(),
        }
    }

    #[test]
    fn clear_slowdown_fails_and_same_passes() {
        let p = Policy::default_embedded();
        // Ten ABBA rounds, candidate 1.2·(1 + 0.001·i) times the baseline (distinct ratios,
        // so the exact test applies), baseline A/A spread 1 %.
        let slow: Vec<(f64, f64, f64, f64)> = (0..10)
            .map(|i| {
                let a = 100.0 * (1.0 + 0.01 * i as f64);
                let f = 1.2 * (1.0 + 0.001 * i as f64);
                (a, f * a * 1.01, f * a * 0.99, a * 1.01)
            })
            .collect();
        let r = decide(&p, &[rounds(&slow)]).unwrap();
        let row = &r.rows[0];
        // Round i: geo(B) = f·a·√(1.01·0.99), geo(A) = a·√1.01, ratio = f·√0.99; the median
        // of the ten is the mean of rounds 4 and 5 in log space: 1.2·√(1.004·1.005)·√0.99.
        let expect = 1.2 * (1.004f64 * 1.005).sqrt() * 0.99f64.sqrt() - 1.0;
        assert!((row.change_relative - expect).abs() < 1e-9, "{row:#?}");
        // All ten log ratios positive: W+ = 55, exact p = 1/1024.
        assert_eq!(row.w_plus, 55.0);
        assert!((row.p_value - 1.0 / 1024.0).abs() < 1e-15);
        assert_eq!(row.verdict, Verdict::Fail, "{row:#?}");
        assert_eq!(r.exit_code, 1);
        // The same values on both sides with ±1 % noise: PASS.
        let same: Vec<(f64, f64, f64, f64)> = (0..10)
            .map(|i| {
                let e = if i % 2 == 0 { 1.01 } else { 0.99 };
                (100.0, 100.0 * e, 100.0 / e, 100.0)
            })
            .collect();
        let r = decide(&p, &[rounds(&same)]).unwrap();
        assert_eq!(r.overall, Verdict::Pass, "{:#?}", r.rows);
    }

    #[test]
    fn noisy_rounds_are_inconclusive_not_fail() {
        let p = Policy::default_embedded();
        // +8 % median but rounds disagree wildly (A/A spread ±30 %).
        let noisy: Vec<(f64, f64, f64, f64)> = (0..10)
            .map(|i| {
                let s = if i % 2 == 0 { 1.3 } else { 0.7 };
                (100.0, 108.0 * s, 108.0 / s, 100.0 * s)
            })
            .collect();
        let r = decide(&p, &[rounds(&noisy)]).unwrap();
        assert_eq!(r.rows[0].verdict, Verdict::Inconclusive, "{:#?}", r.rows[0]);
        assert!(r.rows[0].noise_floor_relative > 0.05);
        assert!(wants_more_rounds(&r));
    }

    #[test]
    fn bad_rounds_error() {
        let p = Policy::default_embedded();
        let w = rounds(&[(100.0, 0.0, 100.0, 100.0)]);
        assert!(matches!(
            decide(&p, &[w]),
            Err(CompareError::BadRound { round: 1, .. })
        ));
        let r = decide(&p, &[]).unwrap();
        assert_eq!(r.overall, Verdict::Error);
    }
}
