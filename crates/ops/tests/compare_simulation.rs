//! A/A and power simulations of the interleaved comparison (seeded, reproducible). Each
//! trial draws k ABBA rounds on a model of a shared machine: every round has its own level
//! `exp(N(0, 10 %))` (co-tenants come and go between rounds, and the level hits both sides
//! of the round), and every run inside a round carries `exp(N(0, σ))` of its own.
//! Thresholds (from issue 10): a real 10 % slowdown is FAILed in ≥ 95 % of trials and an
//! A/A comparison PASSes in ≥ 99 % of trials (more rounds allowed up to the policy budget,
//! as the command does); the test's own size at zero allowance stays ≤ α + 3 SE.

use tensorforge_ops::compare::{decide, wants_more_rounds, Round, WorkloadRounds};
use tensorforge_ops::rng::SplitMix64;
use tensorforge_ops::{Metric, Policy, Verdict};

fn round(rng: &mut SplitMix64, slowdown: f64, run_sd: f64) -> Round {
    let level = (0.10 * rng.normal()).exp() * 1e6;
    let mut run = |f: f64| level * f * (run_sd * rng.normal()).exp();
    let (a1, b1, b2, a2) = (run(1.0), run(slowdown), run(slowdown), run(1.0));
    Round {
        baseline_ns: vec![a1, a2],
        candidate_ns: vec![b1, b2],
    }
}

/// Runs the command's loop: `rounds` first, then 5 more at a time while INCONCLUSIVE, up to
/// `max_rounds`. Returns the final verdict.
fn trial(rng: &mut SplitMix64, p: &Policy, slowdown: f64, run_sd: f64) -> Verdict {
    let mut w = WorkloadRounds {
        name: "w".into(),
        fingerprint: "f".into(),
        rounds: (0..p.compare.rounds)
            .map(|_| round(rng, slowdown, run_sd))
            .collect(),
    };
    loop {
        let r = decide(p, std::slice::from_ref(&w)).unwrap();
        if !wants_more_rounds(&r) || w.rounds.len() >= p.compare.max_rounds {
            return r.overall;
        }
        for _ in 0..5 {
            w.rounds.push(round(rng, slowdown, run_sd));
        }
    }
}

fn rates(trials: usize, seed: u64, p: &Policy, slowdown: f64, run_sd: f64) -> (f64, f64, f64) {
    let mut rng = SplitMix64::new(seed);
    let (mut pass, mut fail, mut inc) = (0, 0, 0);
    for _ in 0..trials {
        match trial(&mut rng, p, slowdown, run_sd) {
            Verdict::Pass => pass += 1,
            Verdict::Fail => fail += 1,
            _ => inc += 1,
        }
    }
    let t = trials as f64;
    (pass as f64 / t, fail as f64 / t, inc as f64 / t)
}

fn fast_policy() -> Policy {
    let mut p = Policy::default_embedded();
    p.suite.bootstrap_resamples = 500;
    p
}

#[test]
fn aa_passes_and_a_10pct_slowdown_fails() {
    let p = fast_policy();
    for run_sd in [0.01, 0.03] {
        let (pass, fail, inc) = rates(500, 1, &p, 1.0, run_sd);
        println!("A/A, run sd {run_sd}: PASS {pass}, FAIL {fail}, INCONCLUSIVE {inc}");
        assert!(pass >= 0.99, "A/A pass rate {pass} at run sd {run_sd}");
        let (pass, fail, inc) = rates(500, 2, &p, 1.10, run_sd);
        println!("10 % slowdown, run sd {run_sd}: PASS {pass}, FAIL {fail}, INCONCLUSIVE {inc}");
        assert!(fail >= 0.95, "detection {fail} at run sd {run_sd}");
    }
}

#[test]
fn size_at_zero_allowance_is_alpha() {
    let mut p = fast_policy();
    p.metrics.get_mut(&Metric::LatencyP50).unwrap().max_relative = 0.0;
    p.metrics.get_mut(&Metric::LatencyP50).unwrap().alpha = 0.05;
    p.compare.max_rounds = p.compare.rounds;
    let mut rng = SplitMix64::new(3);
    let mut fail = 0;
    for _ in 0..1000 {
        if trial(&mut rng, &p, 1.0, 0.03) == Verdict::Fail {
            fail += 1;
        }
    }
    let f = fail as f64 / 1000.0;
    println!("A/A, zero allowance, alpha 0.05: FAIL {f}");
    // The noise floor still guards, so the rate may sit below α; never above α + 3 SE.
    assert!(f <= 0.05 + 3.0 * 0.0069, "{f}");
}
