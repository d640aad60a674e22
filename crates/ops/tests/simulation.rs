//! A/A and power simulations of the gate (seeded, reproducible). Thresholds used:
//! - A/A, default embedded policy (latency_p50 +25 %, throughput −20 %, Mann–Whitney with
//!   α = 0.01 and Benjamini–Hochberg), 200 bootstrap resamples instead of 2000 for speed
//!   (the interval does not enter Mann–Whitney verdicts): false alarms must be ≤ α = 1 %,
//!   both for i.i.d. 3 % noise and for a shared-machine model (run-level drift plus
//!   co-tenant hits).
//! - A/A, zero-threshold policy (latency_p50 only, max_relative = 0, α = 0.05): every
//!   significant change fails, so this measures the test's own size: ≤ α + 3 binomial SE.
//! - Power, sensitive policy (latency_p50 only, max_relative = 0.05, α = 0.01): a 10 % shift
//!   with 30 samples per side at 3 % noise must FAIL in ≥ 95 % of trials.
//! - The default policy must FAIL a 2x slowdown in every trial.

use std::collections::BTreeMap;
use tensorforge_ops::rng::SplitMix64;
use tensorforge_ops::{gate, Date, Policy, Verdict};
use tensorforge_store::{
    DeviceContext, HarnessSettings, Record, SoftwareContext, WorkloadIdentity,
};

fn rec(samples: Vec<f64>) -> Record {
    let mut params = BTreeMap::new();
    params.insert("m".into(), serde_json::json!(64));
    let w = WorkloadIdentity {
        kind: "gemm".into(),
        name: "g".into(),
        params,
        dtype: "f32".into(),
    };
    let d = DeviceContext {
        kind: "cpu".into(),
        cpu_model: "sim".into(),
        ..Default::default()
    };
    Record::new(
        "r".into(),
        w,
        d,
        SoftwareContext::default(),
        HarnessSettings::default(),
        samples,
        None,
        None,
        None,
        0,
        BTreeMap::new(),
        "sim".into(),
    )
    .unwrap()
}

fn draw(rng: &mut SplitMix64, n: usize, mean: f64, rel_sd: f64) -> Vec<f64> {
    (0..n)
        .map(|_| (mean * (1.0 + rel_sd * rng.normal())).max(1.0))
        .collect()
}

/// A shared noisy machine: a per-run factor exp(N(0, 0.05)) and 10 % of samples hit by a
/// co-tenant (× U(1.5, 3)).
fn draw_noisy(rng: &mut SplitMix64, n: usize, mean: f64) -> Vec<f64> {
    let run = (0.05 * rng.normal()).exp();
    (0..n)
        .map(|_| {
            let hit = if rng.next_f64() < 0.1 {
                1.5 + 1.5 * rng.next_f64()
            } else {
                1.0
            };
            mean * run * (1.0 + 0.03 * rng.normal()) * hit
        })
        .collect()
}

fn policy(text: &str) -> Policy {
    Policy::from_toml_str(text, "sim.toml").unwrap()
}

fn rate(
    trials: usize,
    seed: u64,
    p: &Policy,
    mut pair: impl FnMut(&mut SplitMix64) -> (Vec<f64>, Vec<f64>),
) -> (f64, f64) {
    let mut rng = SplitMix64::new(seed);
    let today = Date::parse("2025-01-01", "t", "t").unwrap();
    let (mut fail, mut inconclusive) = (0, 0);
    for _ in 0..trials {
        let (b, c) = pair(&mut rng);
        let g = gate(p, &[rec(b)], &[rec(c)], today);
        match g.overall {
            Verdict::Fail => fail += 1,
            Verdict::Inconclusive => {
                inconclusive += 1;
            }
            Verdict::Pass => {}
            other => panic!("unexpected {other:?}: {:?}", g.reasons),
        }
    }
    (
        fail as f64 / trials as f64,
        inconclusive as f64 / trials as f64,
    )
}

fn default_fast() -> Policy {
    let mut p = Policy::default_embedded();
    p.suite.bootstrap_resamples = 200;
    p
}

#[test]
fn aa_default_policy_no_false_alarms() {
    let p = default_fast();
    let (f, i) = rate(1000, 1, &p, |r| {
        (draw(r, 30, 1e6, 0.03), draw(r, 30, 1e6, 0.03))
    });
    println!("A/A iid 3 % noise, default policy: false alarm rate {f}, inconclusive {i}");
    assert!(f <= 0.01, "{f}");
    let (f, i) = rate(1000, 2, &p, |r| {
        (draw_noisy(r, 30, 1e6), draw_noisy(r, 30, 1e6))
    });
    println!("A/A shared-machine noise, default policy: false alarm rate {f}, inconclusive {i}");
    assert!(f <= 0.01, "{f}");
}

#[test]
fn aa_zero_threshold_size_is_alpha() {
    let p = policy("schema_version = 1\n[suite]\nbootstrap_resamples = 0\n[metrics.latency_p50]\nmax_relative = 0.0\nalpha = 0.05\n");
    let (f, _) = rate(1000, 3, &p, |r| {
        (draw(r, 30, 1e6, 0.03), draw(r, 30, 1e6, 0.03))
    });
    println!("A/A zero threshold alpha 0.05: false alarm rate {f}");
    // SE of a rate of 0.05 over 1000 trials = sqrt(0.05·0.95/1000) = 0.0069.
    assert!(f <= 0.05 + 3.0 * 0.0069, "{f}");
    assert!(f > 0.01, "the test must be able to reject at all: {f}");
}

#[test]
fn power_10pct_shift_30_samples_3pct_noise() {
    let p = policy("schema_version = 1\n[suite]\nbootstrap_resamples = 0\n[metrics.latency_p50]\nmax_relative = 0.05\nalpha = 0.01\n");
    let (f, i) = rate(1000, 4, &p, |r| {
        (draw(r, 30, 1e6, 0.03), draw(r, 30, 1.1e6, 0.03))
    });
    println!(
        "power 10 % shift, sensitive policy (5 %, alpha 0.01): detection {f}, inconclusive {i}"
    );
    assert!(f >= 0.95, "{f}");
    let (a, _) = rate(1000, 5, &p, |r| {
        (draw(r, 30, 1e6, 0.03), draw(r, 30, 1e6, 0.03))
    });
    println!("A/A under the sensitive policy: false alarm rate {a}");
    assert!(a <= 0.01, "{a}");
    let (f2, _) = rate(300, 6, &default_fast(), |r| {
        (draw_noisy(r, 30, 1e6), draw_noisy(r, 30, 2e6))
    });
    println!("2x slowdown, shared-machine noise, default policy: detection {f2}");
    assert_eq!(f2, 1.0);
}
