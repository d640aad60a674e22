//! A/A and power simulations of the interleaved comparison (seeded, reproducible). Each
//! trial runs the command's loop (`rounds`, then 5 more at a time while INCONCLUSIVE, up to
//! `max_rounds`) with the command's order (`round_order`) on a model of a shared machine:
//! every round has its own level (co-tenants come and go between rounds, and the level hits
//! both sides of the round), every run carries `exp(N(0, σ))` of its own, and, in the
//! bursty models of issue 24, a co-tenant slows whole runs by ×1.65–2.2 (`exp(U(0.5, 0.8))`),
//! as measured on this 2-core machine with one core kept busy (about one run in ten hit,
//! mostly one run at a time, sometimes two or three in a row, across round boundaries).
//! Thresholds: a real 10 % slowdown is FAILed in ≥ 95 % of trials on the quiet model and
//! ≥ 85 % with measured-rate bursts (the rule before issue 24: 83 %); an A/A comparison
//! never FAILs under bursts (0 of 2 × 1000 trials; the old rule FAILed 0.6 % of the
//! heavy-burst trials), FAILs at most α with a co-tenant that returns every round (the old
//! rule: 38 %), and PASSes in ≥ 99 % on the quiet model; the sign test's size at the
//! boundary is its exact binomial value.

use tensorforge_ops::compare::{decide, round_order, wants_more_rounds, Round, WorkloadRounds};
use tensorforge_ops::rng::SplitMix64;
use tensorforge_ops::{Metric, Policy, RoundOrder, Verdict};

/// What else runs on the machine.
#[derive(Clone, Copy, Debug)]
enum CoTenant {
    /// Nothing beyond the per-round level and the per-run noise.
    Quiet,
    /// Bursts as a two-state chain over consecutive runs (it carries across rounds): a burst
    /// starts before a run with probability `start` and goes on with probability `stay`.
    Markov { start: f64, stay: f64 },
    /// A co-tenant that comes back every 3.8–4.2 runs (about once a round) and hits one run,
    /// from a random phase.
    Periodic,
}

/// One machine for one trial.
struct Machine {
    level_sd: f64,
    run_sd: f64,
    co: CoTenant,
    in_burst: bool,
    period: f64,
    phase: f64,
    t: f64,
}

impl Machine {
    fn new(rng: &mut SplitMix64, level_sd: f64, run_sd: f64, co: CoTenant) -> Machine {
        let period = 3.8 + 0.4 * rng.next_f64();
        Machine {
            level_sd,
            run_sd,
            co,
            in_burst: false,
            period,
            phase: period * rng.next_f64(),
            t: 0.0,
        }
    }

    /// ln of one run's slowdown from noise and co-tenants.
    fn run(&mut self, rng: &mut SplitMix64) -> f64 {
        let mut x = self.run_sd * rng.normal();
        let hit = match self.co {
            CoTenant::Quiet => false,
            CoTenant::Markov { start, stay } => {
                let p = if self.in_burst { stay } else { start };
                self.in_burst = rng.next_f64() < p;
                self.in_burst
            }
            CoTenant::Periodic => (self.t + self.phase) % self.period < 1.0,
        };
        self.t += 1.0;
        if hit {
            x += 0.5 + 0.3 * rng.next_f64();
        }
        x
    }

    fn round(&mut self, rng: &mut SplitMix64, order: RoundOrder, slowdown: f64) -> Round {
        let level = (self.level_sd * rng.normal()).exp() * 1e6;
        let mut r = Round {
            baseline_ns: Vec::new(),
            candidate_ns: Vec::new(),
        };
        for is_base in round_order(order, rng) {
            let v = level * self.run(rng).exp();
            if is_base {
                r.baseline_ns.push(v);
            } else {
                r.candidate_ns.push(v * slowdown);
            }
        }
        r
    }
}

/// The command's loop on one fresh machine; returns the final verdict.
fn trial(rng: &mut SplitMix64, p: &Policy, m: &mut Machine, slowdown: f64) -> Verdict {
    let order = p.compare.order;
    let mut w = WorkloadRounds {
        name: "w".into(),
        fingerprint: "f".into(),
        rounds: (0..p.compare.rounds)
            .map(|_| m.round(rng, order, slowdown))
            .collect(),
    };
    loop {
        let r = decide(p, std::slice::from_ref(&w)).unwrap();
        if !wants_more_rounds(&r) || w.rounds.len() >= p.compare.max_rounds {
            return r.overall;
        }
        for _ in 0..5 {
            w.rounds.push(m.round(rng, order, slowdown));
        }
    }
}

/// (PASS, FAIL, INCONCLUSIVE) counts over `trials` fresh machines.
fn counts(
    trials: usize,
    seed: u64,
    p: &Policy,
    level_sd: f64,
    run_sd: f64,
    co: CoTenant,
    slowdown: f64,
) -> (usize, usize, usize) {
    let mut rng = SplitMix64::new(seed);
    let (mut pass, mut fail, mut inc) = (0, 0, 0);
    for _ in 0..trials {
        let mut m = Machine::new(&mut rng, level_sd, run_sd, co);
        match trial(&mut rng, p, &mut m, slowdown) {
            Verdict::Pass => pass += 1,
            Verdict::Fail => fail += 1,
            _ => inc += 1,
        }
    }
    println!(
        "{co:?}, level sd {level_sd}, run sd {run_sd}, slowdown {slowdown}: PASS {pass}, FAIL {fail}, INCONCLUSIVE {inc} of {trials}"
    );
    (pass, fail, inc)
}

#[test]
fn aa_passes_and_a_10pct_slowdown_fails_on_a_quiet_machine() {
    let p = Policy::default_embedded();
    for run_sd in [0.01, 0.03] {
        let (pass, fail, _) = counts(500, 1, &p, 0.10, run_sd, CoTenant::Quiet, 1.0);
        assert_eq!(fail, 0, "A/A FAIL at run sd {run_sd}");
        assert!(pass >= 495, "A/A pass {pass} of 500 at run sd {run_sd}");
        let (_, fail, _) = counts(500, 2, &p, 0.10, run_sd, CoTenant::Quiet, 1.10);
        assert!(fail >= 475, "detection {fail} of 500 at run sd {run_sd}");
    }
}

#[test]
fn bursty_co_tenants_never_fail_an_aa_comparison() {
    // Issue 24: one binary against itself FAILed under load. Bursts at the rate measured
    // here (start 0.07, stay 0.2: 8 % of runs) and heavy bursts (start 0.25, stay 0.3: 26 %
    // of runs), 1000 trials each: zero FAILs (the rule before issue 24: 0 and 0.6 %).
    let p = Policy::default_embedded();
    let models = [
        CoTenant::Markov {
            start: 0.07,
            stay: 0.2,
        },
        CoTenant::Markov {
            start: 0.25,
            stay: 0.3,
        },
    ];
    for (i, co) in models.into_iter().enumerate() {
        let (_, fail, _) = counts(1000, 10 + i as u64, &p, 0.05, 0.03, co, 1.0);
        assert_eq!(fail, 0, "A/A FAILs with {co:?}");
    }
}

#[test]
fn a_co_tenant_that_returns_every_round_fails_at_most_alpha() {
    // A co-tenant that comes back about once a round hit the same position of every round;
    // with a fixed ABBA order that position was one side's, and the rule before issue 24
    // FAILed 38 % of these A/A trials. The coin between ABBA and BAAB makes the side
    // random, so the ratios are ±35 % with a fair sign: the median sits in a gap where
    // P(ratio > allowance) is close to ½, the one case where the sign test runs at its level
    // instead of far below it, and where five looks at α each would add up to 1.5 %; the
    // per-look level α′ keeps them within α. At most α = 1 % of 500 trials.
    let p = Policy::default_embedded();
    let (_, fail, _) = counts(500, 12, &p, 0.05, 0.03, CoTenant::Periodic, 1.0);
    assert!(
        fail <= 5,
        "A/A FAILs {fail} of 500 with a periodic co-tenant"
    );
}

#[test]
fn bursty_co_tenants_still_let_a_10pct_slowdown_fail() {
    // Bursts at the measured rate: a 10 % slowdown still FAILs in ≥ 85 % of trials (the
    // rest INCONCLUSIVE after 30 rounds; the rule before issue 24: 83 %). Heavy bursts:
    // PASS in at most 1 % (a real slowdown is rarely waved through, even there).
    let p = Policy::default_embedded();
    let light = CoTenant::Markov {
        start: 0.07,
        stay: 0.2,
    };
    let (pass, fail, _) = counts(500, 20, &p, 0.05, 0.03, light, 1.10);
    assert!(
        fail >= 425,
        "detection {fail} of 500 with measured-rate bursts"
    );
    assert_eq!(pass, 0);
    let heavy = CoTenant::Markov {
        start: 0.25,
        stay: 0.3,
    };
    let (pass, _, _) = counts(500, 21, &p, 0.05, 0.03, heavy, 1.10);
    assert!(
        pass <= 5,
        "a real slowdown PASSed {pass} of 500 under heavy bursts"
    );
}

#[test]
fn size_at_the_boundary_is_the_exact_binomial_value() {
    // Zero allowance and AB/BA rounds (one run a side: no same-side pairs, noise floor 0),
    // so the threshold is 0 and an A/A comparison sits exactly on the boundary of "median
    // change ≤ threshold". One look of 10 rounds at α = 0.05 rejects when ≥ 9 of 10 ratios
    // are above 1: P(B ≥ 9) = 11/1024 = 1.07 % (the sign test is exact, and conservative
    // because B is discrete: P(B ≥ 8) = 56/1024 = 5.5 % would exceed α).
    let mut p = Policy::default_embedded();
    p.metrics.get_mut(&Metric::LatencyP50).unwrap().max_relative = 0.0;
    p.metrics.get_mut(&Metric::LatencyP50).unwrap().alpha = 0.05;
    p.compare.order = RoundOrder::Random;
    p.compare.max_rounds = p.compare.rounds;
    let n = 4000;
    let (_, fail, _) = counts(n, 3, &p, 0.10, 0.03, CoTenant::Quiet, 1.0);
    let f = fail as f64 / n as f64;
    let expect = 11.0 / 1024.0;
    // 3 standard errors: 3·√(0.0107·0.989/4000) = 0.0049.
    let se3 = 3.0 * (expect * (1.0 - expect) / n as f64).sqrt();
    assert!(
        (f - expect).abs() <= se3,
        "size {f}, expected {expect} ± {se3}"
    );
}
