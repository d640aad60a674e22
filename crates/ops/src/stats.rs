//! The statistics the gate uses. Between runs (the unit of replication on a shared machine):
//! the one-sided sign test and the distribution-free (order-statistic) confidence bounds of a
//! median, exact under the binomial null, which `compare` uses over rounds; Student's t for a
//! new run against a history of runs. Within one run: the one-sided Mann–Whitney U test and
//! a bootstrap of the relative change, which only say that two runs differ. Across a suite:
//! Benjamini–Hochberg adjusted p-values. It leaves out autocorrelation between rounds
//! (rounds are treated as independent), changes of variance, and multi-modal mixture models.

use crate::rng::SplitMix64;
use serde::{Deserialize, Serialize};

/// Largest sample size per side for which the exact null distribution is used.
pub const EXACT_MAX_N: usize = 30;

/// `erfc(x)`: series `erf(x) = 2/√π · e^{−x²} · Σ 2ⁿ x^{2n+1} / (1·3·…·(2n+1))` for
/// |x| < 2.5 (all terms positive, no cancellation), Lentz continued fraction above.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 2.5 {
        let x2 = x * x;
        let mut term = x;
        let mut sum = x;
        let mut n = 0.0;
        while term > 1e-17 * sum {
            n += 1.0;
            term *= 2.0 * x2 / (2.0 * n + 1.0);
            sum += term;
        }
        return 1.0 - 2.0 / std::f64::consts::PI.sqrt() * (-x2).exp() * sum;
    }
    // erfc(x) = e^{−x²}/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + …))))).
    let tiny = 1e-300;
    let mut f = x;
    let mut c = x;
    let mut d = 0.0;
    for i in 1..300 {
        let a = i as f64 / 2.0;
        d = x + a * d;
        d = if d.abs() < tiny { tiny } else { d };
        c = x + a / c;
        c = if c.abs() < tiny { tiny } else { c };
        d = 1.0 / d;
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-x * x).exp() / std::f64::consts::PI.sqrt() / f
}

/// Upper tail of the standard normal, `P(Z > z) = erfc(z/√2)/2`.
pub fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// How a Mann–Whitney p-value was obtained.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MwuMethod {
    /// Exact permutation distribution (no ties, both sides ≤ [`EXACT_MAX_N`]).
    Exact,
    /// Normal approximation with tie and continuity corrections.
    Normal,
}

/// A one-sided Mann–Whitney U result.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct MwuResult {
    /// `U = #{(i, j): x_i > y_j} + ½ #{x_i = y_j}` for the first sample.
    pub u: f64,
    /// One-sided p-value for "x is stochastically greater than y".
    pub p_value: f64,
    /// Exact or normal approximation.
    pub method: MwuMethod,
}

/// Exact upper tail `P(U ≥ u)` for sizes (m, n) with no ties, by the recursion
/// `P_{i,j}(u) = i/(i+j)·P_{i−1,j}(u−j) + j/(i+j)·P_{i,j−1}(u)` (the largest of the i+j
/// values is an x, beating all j y's, with probability i/(i+j)).
pub fn mwu_exact_sf(m: usize, n: usize, u: f64) -> f64 {
    // prev[j] = distribution of U for sizes (i−1, j); cur[j] for (i, j).
    let mut prev: Vec<Vec<f64>> = (0..=n).map(|_| vec![1.0]).collect();
    for i in 1..=m {
        let mut cur: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
        cur.push(vec![1.0]);
        for j in 1..=n {
            let len = i * j + 1;
            let mut d = vec![0.0; len];
            let wx = i as f64 / (i + j) as f64;
            let wy = j as f64 / (i + j) as f64;
            for (k, p) in prev[j].iter().enumerate() {
                d[k + j] += wx * p;
            }
            for (k, p) in cur[j - 1].iter().enumerate() {
                d[k] += wy * p;
            }
            cur.push(d);
        }
        prev = cur;
    }
    let dist = &prev[n];
    let start = u.ceil().max(0.0) as usize;
    dist.iter().skip(start).sum::<f64>().min(1.0)
}

/// One-sided Mann–Whitney U test of "x stochastically greater than y". Exact when both
/// sizes ≤ [`EXACT_MAX_N`] and no value repeats; otherwise z = (U − mn/2 − ½)/σ with
/// σ² = mn/12 · ((N+1) − Σ(t³−t)/(N(N−1))), p = P(Z > z). Empty input gives p = 1.
pub fn mann_whitney_greater(x: &[f64], y: &[f64]) -> MwuResult {
    let (m, n) = (x.len(), y.len());
    if m == 0 || n == 0 {
        return MwuResult {
            u: 0.0,
            p_value: 1.0,
            method: MwuMethod::Normal,
        };
    }
    // Ranks of the pooled sample with average ranks for ties.
    let mut all: Vec<(f64, bool)> = x
        .iter()
        .map(|v| (*v, true))
        .chain(y.iter().map(|v| (*v, false)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let big_n = all.len();
    let mut rank_sum_x = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < big_n {
        let mut j = i;
        while j + 1 < big_n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let avg_rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_x += avg_rank * all[i..=j].iter().filter(|e| e.1).count() as f64;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let (mf, nf) = (m as f64, n as f64);
    let u = rank_sum_x - mf * (mf + 1.0) / 2.0;
    if m <= EXACT_MAX_N && n <= EXACT_MAX_N && tie_term == 0.0 {
        return MwuResult {
            u,
            p_value: mwu_exact_sf(m, n, u),
            method: MwuMethod::Exact,
        };
    }
    let nn = big_n as f64;
    let var = mf * nf / 12.0 * ((nn + 1.0) - tie_term / (nn * (nn - 1.0)));
    let p_value = if var <= 0.0 {
        1.0
    } else {
        normal_sf((u - mf * nf / 2.0 - 0.5) / var.sqrt())
    };
    MwuResult {
        u,
        p_value,
        method: MwuMethod::Normal,
    }
}

/// Benjamini–Hochberg adjusted p-values, in input order:
/// `q_(i) = min_{k ≥ i} min(1, m · p_(k) / k)` over the ascending order statistics.
pub fn benjamini_hochberg(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut idx: Vec<usize> = (0..m).collect();
    idx.sort_by(|a, b| p[*a].total_cmp(&p[*b]));
    let mut q = vec![1.0; m];
    let mut running = 1.0f64;
    for (rank0, &i) in idx.iter().enumerate().rev() {
        let v = (p[i] * m as f64 / (rank0 + 1) as f64).min(1.0);
        running = running.min(v);
        q[i] = running;
    }
    q
}

/// A percentile-bootstrap interval of the relative change `stat(cand)/stat(base) − 1`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct BootstrapInterval {
    /// Lower end of the relative change.
    pub low: f64,
    /// Upper end of the relative change.
    pub high: f64,
    /// Two-sided coverage, e.g. 0.95.
    pub confidence: f64,
    /// Resamples drawn.
    pub resamples: u32,
    /// Seed of the stream.
    pub seed: u64,
    /// One-sided bootstrap p-value for "worse": `(1 + #{replicates not worse}) / (B + 1)`.
    pub p_worse: f64,
}

/// Seeded percentile bootstrap of `stat(cand*)/stat(base*) − 1`, resampling each side with
/// replacement `resamples` times; `worse_sign` is +1 when higher is worse, −1 when lower.
/// `None` when either side is empty, a resampled baseline statistic is 0, or `resamples` = 0.
pub fn bootstrap_relative_change(
    base: &[f64],
    cand: &[f64],
    stat: impl Fn(&mut [f64]) -> f64,
    resamples: u32,
    confidence: f64,
    seed: u64,
    worse_sign: f64,
) -> Option<BootstrapInterval> {
    if base.is_empty() || cand.is_empty() || resamples == 0 {
        return None;
    }
    let mut rng = SplitMix64::new(seed);
    let mut reps = Vec::with_capacity(resamples as usize);
    let mut bb = vec![0.0; base.len()];
    let mut cb = vec![0.0; cand.len()];
    let mut not_worse = 0u32;
    for _ in 0..resamples {
        for v in bb.iter_mut() {
            *v = base[rng.below(base.len())];
        }
        for v in cb.iter_mut() {
            *v = cand[rng.below(cand.len())];
        }
        let sb = stat(&mut bb);
        if sb == 0.0 || !sb.is_finite() {
            return None;
        }
        let r = stat(&mut cb) / sb - 1.0;
        if worse_sign * r <= 0.0 {
            not_worse += 1;
        }
        reps.push(r);
    }
    reps.sort_by(f64::total_cmp);
    let a = (1.0 - confidence) / 2.0;
    Some(BootstrapInterval {
        low: tensorforge_record::stats::percentile_sorted(&reps, a),
        high: tensorforge_record::stats::percentile_sorted(&reps, 1.0 - a),
        confidence,
        resamples,
        seed,
        p_worse: (1.0 + f64::from(not_worse)) / (f64::from(resamples) + 1.0),
    })
}

/// `P(B ≤ c)` for `B ~ Binomial(n, ½)`, summed exactly in log space
/// (`ln C(n, i) = Σ_{j ≤ i} ln((n − j + 1) / j)`), so it stays accurate for thousands of
/// trials. 1 when `c ≥ n`.
pub fn binomial_half_cdf(c: usize, n: usize) -> f64 {
    if c >= n {
        return 1.0;
    }
    let ln2n = n as f64 * std::f64::consts::LN_2;
    let mut ln_choose = 0.0;
    let mut sum = (-ln2n).exp();
    for i in 1..=c {
        ln_choose += ((n - i + 1) as f64 / i as f64).ln();
        sum += (ln_choose - ln2n).exp();
    }
    sum.min(1.0)
}

/// A one-sided sign test.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct SignTest {
    /// Values above the hypothesised median.
    pub above: usize,
    /// Values not equal to it (ties are dropped, the sign test's convention).
    pub n: usize,
    /// `P(B ≥ above)`, `B ~ Binomial(n, ½)`: one-sided p-value for "the median exceeds it".
    pub p_value: f64,
}

/// Exact one-sided sign test of "the median of `values` is above `m`" (as
/// `scipy.stats.binomtest(above, n, 0.5, alternative='greater')`). Under the null each value
/// lies above `m` with probability at most ½, independently, whatever its distribution: no
/// symmetry is assumed, so a few large outliers of one sign weigh no more than small values.
/// NaN values are ignored; nothing left gives p = 1.
pub fn sign_test_greater(values: &[f64], m: f64) -> SignTest {
    let above = values.iter().filter(|v| **v > m).count();
    let n = values.iter().filter(|v| !v.is_nan() && **v != m).count();
    let p_value = if above == 0 {
        1.0
    } else {
        1.0 - binomial_half_cdf(above - 1, n)
    };
    SignTest {
        above,
        n,
        p_value: p_value.clamp(0.0, 1.0),
    }
}

/// Probability that a sign test repeated at the round counts `looks` rejects at some look,
/// rejecting at look `n` when at least `crit(n)` of the first `n` values are above the
/// hypothesised median, under the least-favourable null: each value above it with
/// probability exactly ½, independently. Exact, by walking the distribution of the count.
fn sequential_rejection(looks: &[usize], level: f64) -> f64 {
    let Some(&last) = looks.last() else {
        return 0.0;
    };
    let mut dist = vec![0.0f64; last + 2];
    dist[0] = 1.0;
    let (mut n, mut rejected) = (0usize, 0.0);
    for &look in looks {
        while n < look {
            for c in (1..=n + 1).rev() {
                dist[c] = 0.5 * (dist[c] + dist[c - 1]);
            }
            dist[0] *= 0.5;
            n += 1;
        }
        // The smallest count whose one-sided p is within the level: P(B ≥ j) ≤ level.
        let crit = (0..=n + 1)
            .find(|&j| j > 0 && 1.0 - binomial_half_cdf(j - 1, n) <= level)
            .unwrap_or(n + 1);
        for d in dist.iter_mut().take(n + 1).skip(crit) {
            rejected += *d;
            *d = 0.0;
        }
    }
    rejected
}

/// The nominal level for a one-sided sign test repeated at each of `looks` (increasing
/// numbers of values, the first included), the same at every look (Pocock's design), so
/// that the chance of rejecting at any look stays within `alpha` under the least-favourable
/// null (each value beyond the hypothesised median with probability ½, independently):
/// the largest such level, found by bisection on the exact rejection probability. Testing
/// every look at `alpha` itself would reject more often than `alpha`: at 10, 15, 20, 25 and
/// 30 values and α = 0.01, 1.5 % of the time. For schedules beyond 2000 values it falls
/// back to Bonferroni's `alpha / looks`.
pub fn sign_test_sequential_level(looks: &[usize], alpha: f64) -> f64 {
    if looks.len() <= 1 {
        return alpha;
    }
    let bonferroni = alpha / looks.len() as f64;
    if looks.last().is_some_and(|&n| n > 2000) {
        return bonferroni;
    }
    if sequential_rejection(looks, alpha) <= alpha {
        return alpha;
    }
    // Invariant: lo keeps the rejection within alpha, hi does not.
    let (mut lo, mut hi) = (bonferroni, alpha);
    for _ in 0..60 {
        let mid = (lo * hi).sqrt();
        if sequential_rejection(looks, mid) <= alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Rank of the distribution-free one-sided bound of a median from `n` values at level `a`:
/// the largest `c` with `P(B ≤ c − 1) ≤ a`, `B ~ Binomial(n, ½)`, or 0 when even the
/// smallest value is not a bound at that level (`2⁻ⁿ > a`). The `c`-th smallest value is a
/// lower bound of the median with coverage at least `1 − a`, the `c`-th largest an upper one.
pub fn median_bound_rank(n: usize, a: f64) -> usize {
    let mut c = 0;
    while c < n && binomial_half_cdf(c, n) <= a {
        c += 1;
    }
    c
}

/// One-sided lower confidence bound of the median at coverage `1 − a`: the
/// [`median_bound_rank`]-th smallest value. `None` when there are too few values for that
/// coverage. For any `m` equal to none of the values, [`sign_test_greater`] rejects
/// "median ≤ m" at `a` exactly when this bound is above `m`: test and bound agree.
pub fn median_lower_bound(values: &[f64], a: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    let c = median_bound_rank(v.len(), a);
    (c > 0).then(|| v[c - 1])
}

/// Distribution-free two-sided interval of the median at `confidence`: the `c`-th smallest
/// and `c`-th largest values, `c = median_bound_rank(n, (1 − confidence) / 2)` (exact
/// coverage of at least `confidence` for independent values, no bootstrap). `None` when
/// there are too few values for that coverage.
pub fn median_interval(values: &[f64], confidence: f64) -> Option<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    let c = median_bound_rank(v.len(), (1.0 - confidence) / 2.0);
    (c > 0).then(|| (v[c - 1], v[v.len() - c]))
}

/// Upper tail of Student's t with `df` degrees of freedom, `P(T > t)` (statrs); `df` must
/// be positive. Infinite `t` gives 0 or 1.
pub fn student_t_sf(t: f64, df: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t == f64::INFINITY {
        return 0.0;
    }
    if t == f64::NEG_INFINITY {
        return 1.0;
    }
    match StudentsT::new(0.0, 1.0, df) {
        Ok(d) => d.sf(t),
        Err(_) => f64::NAN,
    }
}

/// Quantile of Student's t: the `t` with `P(T ≤ t) = q` (statrs).
pub fn student_t_quantile(q: f64, df: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    match StudentsT::new(0.0, 1.0, df) {
        Ok(d) if q > 0.0 && q < 1.0 => d.inverse_cdf(q),
        _ => f64::NAN,
    }
}

/// Quantile of the standard normal: the `z` with `P(Z ≤ z) = q` (statrs).
pub fn normal_quantile(q: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, Normal};
    match Normal::new(0.0, 1.0) {
        Ok(d) if q > 0.0 && q < 1.0 => d.inverse_cdf(q),
        _ => f64::NAN,
    }
}

/// Median of a slice (copies and sorts); NaN for an empty slice.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    tensorforge_record::stats::percentile_sorted(&v, 0.5)
}

/// Robust standard deviation, `1.4826 · MAD` (consistent for normal data); 0 for fewer than
/// two values.
pub fn robust_sd(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let m = median(values);
    let dev: Vec<f64> = values.iter().map(|v| (v - m).abs()).collect();
    1.4826 * median(&dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_test_by_hand() {
        // P(B ≤ 1), B ~ Bin(10, ½): (C(10,0) + C(10,1)) / 2¹⁰ = 11/1024.
        assert!(close(binomial_half_cdf(1, 10), 11.0 / 1024.0, 1e-13));
        // P(B ≤ 4), n = 20: (1 + 20 + 190 + 1140 + 4845) / 2²⁰ = 6196/1048576.
        assert!(close(binomial_half_cdf(4, 20), 6196.0 / 1048576.0, 1e-12));
        // n = 10 000: P(B ≤ n/2) = ½ + P(B = n/2)/2, and P(B = n/2) ≈ 1/√(π·5000) =
        // 0.0079788 (Stirling), so 0.5039894; the log-space sum must not underflow.
        assert!((binomial_half_cdf(5000, 10_000) - 0.5039894).abs() < 1e-5);
        assert_eq!(binomial_half_cdf(10, 10), 1.0);
        let d = [0.5, 1.2, -0.3, 0.8, 2.1, -0.1, 0.9, 1.5, 0.2, 0.7];
        // Above 0: eight of ten. P(B ≥ 8) = (C(10,8) + C(10,9) + C(10,10)) / 1024 = 56/1024.
        let r = sign_test_greater(&d, 0.0);
        assert_eq!((r.above, r.n), (8, 10));
        assert!(close(r.p_value, 56.0 / 1024.0, 1e-13), "{}", r.p_value);
        // Above 0.5: 1.2 0.8 2.1 0.9 1.5 0.7 (six); 0.5 itself is a tie and dropped, n = 9:
        // P(B ≥ 6) = (84 + 36 + 9 + 1) / 512 = 130/512.
        let r = sign_test_greater(&d, 0.5);
        assert_eq!((r.above, r.n), (6, 9));
        assert!(close(r.p_value, 130.0 / 512.0, 1e-13), "{}", r.p_value);
        // The size of an outlier does not matter, only its side: one huge value above, nine
        // below, p = P(B ≥ 1) = 1 − 1/1024.
        let mut o = [-1.0; 10];
        o[0] = 1e9;
        assert!(close(
            sign_test_greater(&o, 0.0).p_value,
            1023.0 / 1024.0,
            1e-13
        ));
        assert_eq!(sign_test_greater(&[0.0, 0.0], 0.0).p_value, 1.0);
        assert_eq!(sign_test_greater(&[], 0.0).p_value, 1.0);
    }

    #[test]
    fn median_bounds_by_hand() {
        // n = 10, a = 0.01: P(B ≤ 0) = 1/1024 ≤ 0.01 < P(B ≤ 1) = 11/1024 -> c = 1.
        assert_eq!(median_bound_rank(10, 0.01), 1);
        // a = 0.025: P(B ≤ 1) = 0.0107 ≤ 0.025 < P(B ≤ 2) = 56/1024 = 0.0547 -> c = 2.
        assert_eq!(median_bound_rank(10, 0.025), 2);
        // n = 20, a = 0.01: P(B ≤ 4) = 0.0059 ≤ 0.01 < P(B ≤ 5) = 21700/2²⁰ = 0.0207 -> 5.
        assert_eq!(median_bound_rank(20, 0.01), 5);
        // 2⁻⁶ = 0.0156 > 0.01: six values bound nothing at 1 %; 2⁻⁷ = 0.0078 does.
        assert_eq!(median_bound_rank(6, 0.01), 0);
        assert_eq!(median_bound_rank(7, 0.01), 1);
        // The textbook 95 % interval of a median from 21 values is (x₍₆₎, x₍₁₆₎):
        // P(B ≤ 5) = 27896/2²¹ = 0.0133 ≤ 0.025 < P(B ≤ 6) = 82160/2²¹ = 0.0392.
        let v: Vec<f64> = (1..=21).rev().map(f64::from).collect();
        assert_eq!(median_interval(&v, 0.95), Some((6.0, 16.0)));
        assert_eq!(median_lower_bound(&v, 0.01), {
            // P(B ≤ 3) = 1562/2²¹ = 0.00074, P(B ≤ 4) = 7547/2²¹ = 0.0036,
            // P(B ≤ 5) = 0.0133 > 0.01 -> c = 5.
            Some(5.0)
        });
        assert_eq!(median_interval(&[1.0, 2.0, 3.0], 0.95), None);
        assert_eq!(median_lower_bound(&[1.0; 6], 0.01), None);
    }

    #[test]
    fn repeated_looks_by_hand() {
        // One look: the level is α itself.
        assert_eq!(sign_test_sequential_level(&[10], 0.01), 0.01);
        // Looks at 2 and 3 values, level ½: at 2, P(B ≥ 2) = ¼ ≤ ½ < P(B ≥ 1) = ¾, so
        // reject with 2 of 2 (¼); at 3, P(B ≥ 2) = ½ ≤ ½, so reject with 2 of 3: from 1 of 2
        // (½) and the third above (½): ¼ more. Total ½. Level 0.3: at 3 only 3 of 3 rejects
        // (P(B ≥ 2) = ½ > 0.3), unreachable without 2 of 2 first: total ¼.
        assert!((sequential_rejection(&[2, 3], 0.5) - 0.5).abs() < 1e-15);
        assert!((sequential_rejection(&[2, 3], 0.3) - 0.25).abs() < 1e-15);
        // Looks at 10 and 15 at level 0.01: reject at 10 with 10 of 10 (1/1024); at 15 with
        // ≥ 13 of 15 (P(B ≤ 2) = 121/32768 = 0.0037 ≤ 0.01 < P(B ≤ 3) = 0.0176), not
        // having rejected at 10. The walks that reach ≥ 13 of 15 from < 10 of 10: 9 of 10
        // then ≥ 4 of 5 (10/1024 · 6/32), or 8 of 10 then 5 of 5 (45/1024 · 1/32). Total
        // 1/1024 + 60/32768 + 45/32768 = 137/32768.
        let r = sequential_rejection(&[10, 15], 0.01);
        assert!((r - 137.0 / 32768.0).abs() < 1e-15, "{r}");
        // The command's schedule: every look at 1 % would reject 1.5 % of the time...
        let looks = [10, 15, 20, 25, 30];
        let r = sequential_rejection(&looks, 0.01);
        assert!(r > 0.0145 && r < 0.0155, "{r}");
        // ...the common level keeps it within 1 %, and it is at most α.
        let l = sign_test_sequential_level(&looks, 0.01);
        assert!(l < 0.01 && l > 0.01 / 5.0, "{l}");
        assert!(sequential_rejection(&looks, l) <= 0.01);
        // Slightly more would break it: the level is the largest that keeps within α.
        assert!(sequential_rejection(&looks, l * 1.01) > 0.01);
    }

    #[test]
    fn sign_test_and_lower_bound_agree() {
        // The test rejects "median ≤ m" at a exactly when the lower bound is above m (for an
        // m equal to none of the values: a tie is dropped from the test, not from the bound).
        let mut rng = SplitMix64::new(7);
        for n in [7usize, 10, 15, 23, 40] {
            let v: Vec<f64> = (0..n).map(|_| rng.normal() + 1.0).collect();
            for a in [0.01, 0.05] {
                let lb = median_lower_bound(&v, a).unwrap();
                for m in [-1.0, 0.0, 0.5, 1.0, lb - 1e-9, lb + 1e-9, 2.0] {
                    let rejects = sign_test_greater(&v, m).p_value <= a;
                    assert_eq!(rejects, lb > m, "n {n} a {a} m {m} lb {lb}");
                }
            }
        }
    }

    #[test]
    fn student_t_against_scipy() {
        // python3 -c "from scipy.stats import t; print(t.sf(2.0, 9), t.ppf(0.99, 9),
        //   t.sf(-1.3, 4))" -> 0.038276411885350504 2.821437925025809 0.868274201764388
        assert!(close(student_t_sf(2.0, 9.0), 0.038276411885350504, 1e-9));
        assert!(close(
            student_t_quantile(0.99, 9.0),
            2.821437925025809,
            1e-9
        ));
        assert!(close(student_t_sf(-1.3, 4.0), 0.868274201764388, 1e-9));
        assert_eq!(student_t_sf(f64::INFINITY, 3.0), 0.0);
        // scipy.stats.norm.ppf(0.99) = 2.3263478740408408
        assert!(close(normal_quantile(0.99), 2.3263478740408408, 1e-9));
    }

    #[test]
    fn median_and_robust_sd() {
        let v: Vec<f64> = (1..=21).map(f64::from).collect();
        assert_eq!(median(&v), 11.0);
        // 1..=21: MAD = median |x − 11| = median of {0,1,1,...,10,10} = 5 -> 1.4826 · 5.
        assert!(close(robust_sd(&v), 1.4826 * 5.0, 1e-12));
        assert_eq!(robust_sd(&[3.0]), 0.0);
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-300)
    }

    #[test]
    fn erfc_against_scipy() {
        // python3 -c "from scipy.special import erfc, ndtr; print(erfc(1.0), erfc(3.0),
        //   erfc(0.3), ndtr(-4.0))"
        // -> 0.15729920705028516 2.2090496998585445e-05 0.6713732405408726 3.167124183311986e-05
        assert!(
            close(erfc(1.0), 0.15729920705028516, 1e-13),
            "{}",
            erfc(1.0)
        );
        assert!(
            close(erfc(3.0), 2.2090496998585445e-05, 1e-12),
            "{}",
            erfc(3.0)
        );
        assert!(close(erfc(0.3), 0.6713732405408726, 1e-13));
        assert!(close(normal_sf(4.0), 3.167124183311986e-05, 1e-12));
        assert!(close(erfc(-1.0), 2.0 - 0.15729920705028516, 1e-13));
        // Continuity across the switch at 2.5: erfc(2.5) = 4.0695201744495886e-04 (scipy).
        assert!(close(erfc(2.4999999), 4.0695201744495886e-04, 1e-6));
        assert!(close(erfc(2.5), 4.0695201744495886e-04, 1e-12));
    }

    #[test]
    fn exact_mwu_against_scipy() {
        // python3 -c "from scipy.stats import mannwhitneyu as mw
        //  b=[10.1,10.4,9.8,10.0,10.3,9.9,10.25,10.6]; c=[10.5,10.9,10.7,10.2,11.0,10.8,9.7,11.2]
        //  print(mw(c,b,alternative='greater',method='exact'))"
        // -> statistic=51.0, pvalue=0.02494172494172494 (and 'less' -> 0.981041181041181)
        let b = [10.1, 10.4, 9.8, 10.0, 10.3, 9.9, 10.25, 10.6];
        let c = [10.5, 10.9, 10.7, 10.2, 11.0, 10.8, 9.7, 11.2];
        let r = mann_whitney_greater(&c, &b);
        assert_eq!(r.method, MwuMethod::Exact);
        assert_eq!(r.u, 51.0);
        assert!(
            close(r.p_value, 0.02494172494172494, 1e-12),
            "{}",
            r.p_value
        );
        let l = mann_whitney_greater(&b, &c);
        assert!(close(l.p_value, 0.981041181041181, 1e-12), "{}", l.p_value);
        // Smallest case by hand: m = n = 1, x > y: U = 1, P(U ≥ 1) = 1/2.
        assert_eq!(mann_whitney_greater(&[2.0], &[1.0]).p_value, 0.5);
        // m = n = 2, x = {3,4} above y = {1,2}: U = 4, only 1 of C(4,2) = 6 orderings.
        assert!(close(
            mann_whitney_greater(&[3.0, 4.0], &[1.0, 2.0]).p_value,
            1.0 / 6.0,
            1e-15
        ));
    }

    #[test]
    fn exact_mwu_25_per_side_against_scipy() {
        // b2 = 1..=25, c2 = b2 + 3.5: mw(c2, b2, alternative='greater', method='exact')
        // -> statistic=394.0, pvalue=0.05831940563216319
        let b: Vec<f64> = (1..=25).map(f64::from).collect();
        let c: Vec<f64> = b.iter().map(|v| v + 3.5).collect();
        let r = mann_whitney_greater(&c, &b);
        assert_eq!(r.method, MwuMethod::Exact);
        assert_eq!(r.u, 394.0);
        assert!(
            close(r.p_value, 0.05831940563216319, 1e-10),
            "{}",
            r.p_value
        );
    }

    #[test]
    fn normal_mwu_with_ties_against_scipy() {
        // mw([3,4,4,5,5,6,6,7,7,8], [1,2,2,3,3,3,4,5,5,6], alternative='greater',
        //    method='asymptotic', use_continuity=True) -> 82.5, 0.0072080461879914974
        let b = [1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 5.0, 5.0, 6.0];
        let c = [3.0, 4.0, 4.0, 5.0, 5.0, 6.0, 6.0, 7.0, 7.0, 8.0];
        let r = mann_whitney_greater(&c, &b);
        assert_eq!(r.method, MwuMethod::Normal);
        assert_eq!(r.u, 82.5);
        assert!(
            close(r.p_value, 0.0072080461879914974, 1e-10),
            "{}",
            r.p_value
        );
        // 40 per side (above the exact limit), c = b + 5.5:
        // mw(c4, b4, 'greater', method='asymptotic') -> 1005.0, 0.024545402354819
        let b4: Vec<f64> = (0..40).map(f64::from).collect();
        let c4: Vec<f64> = b4.iter().map(|v| v + 5.5).collect();
        let r = mann_whitney_greater(&c4, &b4);
        assert_eq!(r.u, 1005.0);
        assert!(close(r.p_value, 0.024545402354819, 1e-10), "{}", r.p_value);
        // All equal: no evidence at all.
        assert_eq!(mann_whitney_greater(&[1.0; 40], &[1.0; 40]).p_value, 1.0);
    }

    #[test]
    fn bh_hand_checked() {
        // p = [0.01, 0.04, 0.03, 0.5], m = 4. Sorted: 0.01 (k1), 0.03 (k2), 0.04 (k3), 0.5 (k4).
        // raw m·p/k: 0.04, 0.06, 0.0533, 0.5; running min from the top: 0.5, 0.0533, 0.0533, 0.04.
        let q = benjamini_hochberg(&[0.01, 0.04, 0.03, 0.5]);
        assert!(close(q[0], 0.04, 1e-12));
        assert!(close(q[1], 0.16 / 3.0, 1e-12));
        assert!(close(q[2], 0.16 / 3.0, 1e-12));
        assert!(close(q[3], 0.5, 1e-12));
        assert!(benjamini_hochberg(&[]).is_empty());
    }

    #[test]
    fn bootstrap_is_seeded_and_brackets_the_shift() {
        let base: Vec<f64> = (0..30).map(|i| 100.0 + f64::from(i % 7)).collect();
        let cand: Vec<f64> = base.iter().map(|v| v * 1.2).collect();
        let med = |s: &mut [f64]| {
            s.sort_by(f64::total_cmp);
            tensorforge_record::stats::percentile_sorted(s, 0.5)
        };
        let a = bootstrap_relative_change(&base, &cand, med, 500, 0.95, 9, 1.0).unwrap();
        let b = bootstrap_relative_change(&base, &cand, med, 500, 0.95, 9, 1.0).unwrap();
        assert_eq!(a, b);
        // A pure ×1.2 scaling: the point change is +20 %; resampling both sides independently
        // spreads it, but the interval must sit well above 0 and contain 0.2.
        assert!(
            a.low > 0.1 && a.high < 0.3 && a.low <= 0.2 && a.high >= 0.2,
            "{a:?}"
        );
        assert!(a.p_worse < 0.01);
        assert!(bootstrap_relative_change(&base, &cand, med, 0, 0.95, 9, 1.0).is_none());
    }
}
