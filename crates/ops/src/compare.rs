//! Decisions for an interleaved A/B comparison: the baseline (A) and the candidate (B) were
//! measured in the same job in alternating rounds, so slow drift of a shared machine hits
//! both sides alike and the unit of replication is the round. Under the default order each
//! round is A B B A or its mirror B A A B, chosen by a seeded coin per round: either cancels
//! drift that is linear over the round, and the coin keeps a co-tenant that comes back once
//! a round (a period near the round's length) from landing on the same side every round.
//!
//! Per workload and round, `L_i = ln(B_i / A_i)`, where each side's value is the geometric
//! mean of its runs in that round. Across the k rounds:
//! - the change is `exp(median L) − 1`, with the distribution-free interval of the median
//!   (order statistics, exact binomial coverage; no bootstrap, which is too narrow at ten
//!   rounds);
//! - the one-sided sign test of "the median of L exceeds ln(1 + δ)", δ the allowed relative
//!   change of the policy's latency_p50: `p = P(B ≥ j)`, `B ~ Binomial(n, ½)`, j the rounds
//!   beyond the allowance, Benjamini–Hochberg adjusted across the suite;
//! - the level of each look, α′: the command decides after `rounds`, then after every
//!   [`EXTRA_ROUNDS`] more up to `max_rounds` ([`planned_looks`]), and α′ is the largest
//!   common level at which all those looks together reject a true null at most α of the
//!   time ([`stats::sign_test_sequential_level`]; 0.73 % for 10, 15, …, 30 rounds at α = 1 %).
//!
//! A workload FAILs when that adjusted p ≤ α′: for one workload, exactly when the one-sided
//! (1 − α′) lower confidence bound of the median change is above the allowance. The bound
//! already stands as far from the estimate as the rounds' noise requires, so no separate
//! noise floor is added. It PASSes when the interval's upper end is within the allowance;
//! otherwise it is INCONCLUSIVE, and the caller may run more rounds up to the policy's
//! budget (as Chromium's Pinpoint does). The spread of same-side pairs inside a round (the
//! two A runs and the two B runs: a binary against itself) is reported, not used: it also
//! holds the drift within a round, which the round's ratio cancels, so as a floor it would
//! blind the comparison on a busy machine even where the rounds agree (docs/policy.md has
//! the measured values).
//!
//! Why not the signed-rank test on "L is centred above 0" with the point estimate beyond
//! `max(allowance, noise floor)`, as before: under load about one run in ten is slowed
//! by 30–130 % (a co-tenant burst), which puts a ±35 % outlier into that round's L. The
//! signed-rank test gives those outliers the top ranks, so when a few more of them land on
//! the B side than on the A side (their counts are small and bursts cluster in time) it
//! called an A/A comparison significant, and an even-sized median then lay halfway between
//! the quiet rounds and the burst rounds, beyond the allowance. The sign test counts a
//! burst round as one round whatever its size, needs no symmetry, and its bound must clear
//! the allowance itself, not 0. Left out: drift faster than a round, carry-over between
//! adjacent runs (cache, frequency), dependence between rounds, and any model evidence.

use crate::gate::Verdict;
use crate::policy::{CompareSettings, Metric, Policy, RoundOrder};
use crate::rng::SplitMix64;
use crate::stats;
use serde::{Deserialize, Serialize};

/// Version of the comparison JSON (2: sign test against the allowance, distribution-free
/// interval, same-side pair spread).
pub const COMPARE_SCHEMA_VERSION: u32 = 2;

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
    /// Distribution-free interval of the median change at `confidence`, (low, high);
    /// `None` when there are too few rounds for that coverage.
    pub interval: Option<(f64, f64)>,
    /// Two-sided coverage of the interval.
    pub confidence: f64,
    /// One-sided `1 − alpha_look` lower confidence bound of the median change; `None` when
    /// there are too few rounds for that coverage (fewer than 8 at the default 0.73 %).
    pub lower_bound_relative: Option<f64>,
    /// `exp(median |ln(X₂/X₁)|) − 1` over the pairs of same-side runs inside a round: how
    /// far the machine moved one binary against itself within a round, drift included (a
    /// diagnostic, not used in the decision). `None` when no round ran a side twice.
    pub pair_spread_relative: Option<f64>,
    /// The policy's allowed relative change (latency_p50 `max_relative`).
    pub allowed_relative: f64,
    /// Rounds whose ratio is above `1 + allowed_relative`.
    pub rounds_beyond: usize,
    /// One-sided sign-test p-value of "the median ratio is above `1 + allowed_relative`".
    pub p_value: f64,
    /// Benjamini–Hochberg adjusted p-value (when the policy turns it on).
    pub p_adjusted: Option<f64>,
    /// The test, in words.
    pub test_method: String,
    /// Significance level of the whole comparison.
    pub alpha: f64,
    /// Level of each look, so that the planned looks together stay within `alpha`.
    pub alpha_look: f64,
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

/// Rounds the command adds while a workload is INCONCLUSIVE.
pub const EXTRA_ROUNDS: usize = 5;

/// The round counts at which the command decides: `rounds`, then every [`EXTRA_ROUNDS`]
/// more, up to and including `max_rounds`.
pub fn planned_looks(c: &CompareSettings) -> Vec<usize> {
    let mut looks = vec![c.rounds];
    while let Some(&k) = looks.last() {
        if k >= c.max_rounds {
            break;
        }
        looks.push((k + EXTRA_ROUNDS).min(c.max_rounds));
    }
    looks
}

/// The sides' order in one round, `true` for the baseline. [`RoundOrder::Abba`]: A B B A or
/// B A A B, one seeded coin per round; [`RoundOrder::Random`]: A B or B A.
pub fn round_order(order: RoundOrder, rng: &mut SplitMix64) -> Vec<bool> {
    let heads = rng.next_u64() & 1 == 0;
    match (order, heads) {
        (RoundOrder::Abba, true) => vec![true, false, false, true],
        (RoundOrder::Abba, false) => vec![false, true, true, false],
        (RoundOrder::Random, true) => vec![true, false],
        (RoundOrder::Random, false) => vec![false, true],
    }
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
    let alpha_look = stats::sign_test_sequential_level(&planned_looks(&policy.compare), alpha);
    let allowed = mp.max_relative;
    let mut rows = Vec::new();
    for w in workloads {
        let mut logs = Vec::with_capacity(w.rounds.len());
        let mut pairs = Vec::new();
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
            for side in [&r.baseline_ns, &r.candidate_ns] {
                pairs.extend(side.windows(2).map(|p| (p[1] / p[0]).ln().abs()));
            }
        }
        let sign = stats::sign_test_greater(&logs, allowed.ln_1p());
        let rel = |x: f64| x.exp() - 1.0;
        rows.push(CompareRow {
            workload: w.name.clone(),
            fingerprint: w.fingerprint.clone(),
            rounds: logs.len(),
            ratios: logs.iter().map(|l| l.exp()).collect(),
            change_relative: if logs.is_empty() {
                f64::NAN
            } else {
                rel(stats::median(&logs))
            },
            interval: stats::median_interval(&logs, policy.suite.confidence)
                .map(|(lo, hi)| (rel(lo), rel(hi))),
            confidence: policy.suite.confidence,
            lower_bound_relative: stats::median_lower_bound(&logs, alpha_look).map(rel),
            pair_spread_relative: (!pairs.is_empty()).then(|| stats::median(&pairs).exp() - 1.0),
            allowed_relative: allowed,
            rounds_beyond: sign.above,
            p_value: sign.p_value,
            p_adjusted: None,
            test_method: "sign test over rounds, exact binomial".into(),
            alpha,
            alpha_look,
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
        let allowed = format!("{:.1} %", r.allowed_relative * 100.0);
        let iv = r
            .interval
            .map(|(lo, hi)| format!("interval {}, {}", pct(lo), pct(hi)))
            .unwrap_or_else(|| {
                format!(
                    "too few rounds for a {:.0} % interval",
                    r.confidence * 100.0
                )
            });
        let lb = r
            .lower_bound_relative
            .map(pct)
            .unwrap_or_else(|| "none yet".into());
        let hi = r.interval.map_or(f64::INFINITY, |i| i.1);
        let head = format!(
            "median change {} over {} rounds ({iv}); {} of {} rounds beyond the allowed {allowed}",
            pct(r.change_relative),
            r.rounds,
            r.rounds_beyond,
            r.rounds
        );
        let level = format!(
            "α′ = {:.2e} per look, α = {} in all; the {:.1} % lower bound of the change is {lb}",
            r.alpha_look,
            r.alpha,
            (1.0 - r.alpha_look) * 100.0
        );
        if p <= r.alpha_look {
            r.verdict = Verdict::Fail;
            r.reason = format!("{head}: the median is beyond it ({which} = {p:.2e} ≤ {level})");
        } else if hi <= r.allowed_relative {
            r.verdict = Verdict::Pass;
            r.reason = format!("{head}: the interval stays within it");
        } else {
            r.verdict = Verdict::Inconclusive;
            r.reason = format!(
                "{head}: too few to call it a regression ({which} = {p:.2e} > {level}), and the interval does not rule one out"
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
            "interleaved rounds ({}), per-round ratio candidate/baseline, sign test of the median ratio against the allowance{}",
            match policy.compare.order {
                RoundOrder::Abba => "ABBA or BAAB per round, seeded",
                RoundOrder::Random => "AB or BA per round, seeded",
            },
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
        // Ten ABBA rounds, candidate 1.2·(1 + 0.001·i) times the baseline, baseline A/A
        // spread 1 %.
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
        // Same-side pairs: ten A pairs |ln 1.01| and ten B pairs |ln(0.99/1.01)|; the median
        // of the twenty is their mean, (2·ln 1.01 − ln 0.99)/2: a spread of 1.01/√0.99 − 1.
        let spread = 1.01 / 0.99f64.sqrt() - 1.0;
        assert!((row.pair_spread_relative.unwrap() - spread).abs() < 1e-12);
        // All ten ratios (≈ 1.19) beyond 1.05: p = 2⁻¹⁰; at α = 0.01 the lower bound is the
        // smallest ratio (round 0): 1.2·√0.99 − 1.
        assert_eq!(row.rounds_beyond, 10);
        assert!((row.p_value - 1.0 / 1024.0).abs() < 1e-15);
        let lb = 1.2 * 0.99f64.sqrt() - 1.0;
        assert!((row.lower_bound_relative.unwrap() - lb).abs() < 1e-12);
        assert_eq!(row.verdict, Verdict::Fail, "{row:#?}");
        assert_eq!(r.exit_code, 1);
        // The same values on both sides with ±1 % noise: every ratio is exactly 1: PASS.
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
    fn burst_rounds_on_one_side_do_not_fail_an_aa_comparison() {
        // The false alarm of issue 24, in miniature: one binary against itself, ten rounds;
        // in six of them a co-tenant burst doubled the first candidate run (ratio
        // √(2·(1 + 0.001·j)) ≈ +41 %), the four quiet rounds moved +0.5, +1.0, −1.5, +2.0 %.
        // The old rule FAILed this: signed ranks 5..10 for the bursts plus 1, 2 and 4 give
        // W+ = 52, exact p = #{subsets of 1..10 summing to ≤ 3} / 1024 = 5/1024 ≤ 0.01, and
        // the median (between the two middle rounds, both bursts) was +41 %.
        let p = Policy::default_embedded();
        let mut v: Vec<(f64, f64, f64, f64)> = [0.005, 0.010, -0.015, 0.020]
            .iter()
            .map(|q| (100.0, 100.0 * (1.0 + q), 100.0 * (1.0 + q), 100.0))
            .collect();
        v.extend((0..6).map(|j| (100.0, 200.0 * (1.0 + 0.001 * j as f64), 100.0, 100.0)));
        let r = decide(&p, &[rounds(&v)]).unwrap();
        let row = &r.rows[0];
        // Six of ten rounds beyond +5 %: p = P(B ≥ 6) = (210 + 120 + 45 + 10 + 1)/1024.
        assert_eq!(row.rounds_beyond, 6);
        assert!((row.p_value - 386.0 / 1024.0).abs() < 1e-12, "{row:#?}");
        assert_ne!(row.verdict, Verdict::Fail, "{row:#?}");
        // 95 % interval of ten: 2nd smallest to 2nd largest ratio: +0.5 % to ≈ +41 %.
        let (lo, hi) = row.interval.unwrap();
        assert!((lo - 0.005).abs() < 1e-12 && hi > 0.4, "{row:#?}");
        assert_eq!(row.verdict, Verdict::Inconclusive);
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
        let row = &r.rows[0];
        assert_eq!(row.verdict, Verdict::Inconclusive, "{row:#?}");
        // Ratios 1.08/√s: 0.947 (s = 1.3) and 1.291 (s = 0.7), five each. Five of ten beyond
        // 1.05: p = P(B ≥ 5) = (252 + 210 + 120 + 45 + 10 + 1)/1024 = 638/1024; the 95 %
        // interval (2nd smallest, 2nd largest) is 0.947 to 1.291, past the allowance.
        assert_eq!(row.rounds_beyond, 5);
        assert!((row.p_value - 638.0 / 1024.0).abs() < 1e-12, "{row:#?}");
        let (lo, hi) = row.interval.unwrap();
        assert!((lo - (1.08 / 1.3f64.sqrt() - 1.0)).abs() < 1e-12);
        assert!((hi - (1.08 / 0.7f64.sqrt() - 1.0)).abs() < 1e-12);
        assert!(wants_more_rounds(&r));
    }

    #[test]
    fn too_few_rounds_never_fail() {
        // Five rounds all +50 %: p = 2⁻⁵ = 0.031 > α = 0.01 and no 99 % bound exists yet;
        // no 95 % interval either (2⁻⁵ > 0.025): INCONCLUSIVE, more rounds.
        let p = Policy::default_embedded();
        let v: Vec<(f64, f64, f64, f64)> = (0..5)
            .map(|i| {
                let a = 100.0 + i as f64;
                (a, 1.5 * a, 1.5 * a, a)
            })
            .collect();
        let r = decide(&p, &[rounds(&v)]).unwrap();
        let row = &r.rows[0];
        assert!((row.p_value - 1.0 / 32.0).abs() < 1e-15);
        assert_eq!(row.lower_bound_relative, None);
        assert_eq!(row.interval, None);
        assert_eq!(row.verdict, Verdict::Inconclusive);
        assert!(row.reason.contains("too few rounds"), "{}", row.reason);
    }

    #[test]
    fn looks_and_their_level() {
        let mut p = Policy::default_embedded();
        assert_eq!(planned_looks(&p.compare), vec![10, 15, 20, 25, 30]);
        p.compare.max_rounds = 12;
        assert_eq!(planned_looks(&p.compare), vec![10, 12]);
        // One look (no more rounds allowed): the level is α itself.
        p.compare.max_rounds = 10;
        let r = decide(&p, &[rounds(&[(100.0, 101.0, 101.0, 100.0); 10])]).unwrap();
        assert_eq!(r.rows[0].alpha_look, 0.01);
        // Five looks: below α, above Bonferroni's α/5.
        let p = Policy::default_embedded();
        let r = decide(&p, &[rounds(&[(100.0, 101.0, 101.0, 100.0); 10])]).unwrap();
        let l = r.rows[0].alpha_look;
        assert!(l < 0.01 && l > 0.002, "{l}");
    }

    #[test]
    fn round_orders() {
        let mut rng = SplitMix64::new(5);
        let abba = vec![true, false, false, true];
        let baab = vec![false, true, true, false];
        let seq: Vec<Vec<bool>> = (0..100)
            .map(|_| round_order(RoundOrder::Abba, &mut rng))
            .collect();
        assert!(seq.iter().all(|o| *o == abba || *o == baab));
        // A fair coin gives both mirrors in 100 rounds (each missing: 2⁻¹⁰⁰).
        assert!(seq.contains(&abba) && seq.contains(&baab));
        let mut again = SplitMix64::new(5);
        assert_eq!(round_order(RoundOrder::Abba, &mut again), seq[0]);
        let o = round_order(RoundOrder::Random, &mut rng);
        assert!(o == vec![true, false] || o == vec![false, true]);
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
