//! Summary statistics of latency samples. Percentiles use linear interpolation between
//! closest ranks (Hyndman & Fan type 7, NumPy's default): for sorted x of length n and
//! q in [0, 1], h = (n − 1)·q, value = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]).
//! p95 is reported only with at least 20 samples and p99 only with at least 100, because
//! below that they are an interpolation between the two largest samples, not a tail.

use crate::error::RecordError;
use serde::{Deserialize, Serialize};

/// Minimum sample count for a reported p95.
pub const MIN_SAMPLES_P95: usize = 20;
/// Minimum sample count for a reported p99.
pub const MIN_SAMPLES_P99: usize = 100;

/// Statistics of one record's latency samples, all in ns.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LatencyStats {
    /// Number of samples.
    pub count: usize,
    /// Arithmetic mean.
    pub mean_ns: f64,
    /// Sample standard deviation (n − 1 denominator; 0 for one sample).
    pub stddev_ns: f64,
    /// Smallest sample.
    pub min_ns: f64,
    /// Median (type-7 interpolation).
    pub p50_ns: f64,
    /// 90th percentile.
    pub p90_ns: f64,
    /// 95th percentile, only with ≥ 20 samples.
    pub p95_ns: Option<f64>,
    /// 99th percentile, only with ≥ 100 samples.
    pub p99_ns: Option<f64>,
    /// Largest sample.
    pub max_ns: f64,
    /// The percentile method, stated.
    pub interpolation: String,
}

/// Type-7 percentile of an ascending-sorted, non-empty slice; `q` in [0, 1].
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 1 {
        return sorted[0];
    }
    let h = (n - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

impl LatencyStats {
    /// Statistics of `samples_ns`; errors on an empty slice or any NaN, infinite or
    /// negative sample.
    pub fn from_samples(samples_ns: &[f64]) -> Result<LatencyStats, RecordError> {
        if samples_ns.is_empty() {
            return Err(RecordError::invalid(
                "samples",
                "samples_ns",
                "[]",
                "at least one sample is required",
            ));
        }
        if let Some((i, v)) = samples_ns
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite() || **v < 0.0)
        {
            return Err(RecordError::invalid(
                "samples",
                format!("samples_ns[{i}]"),
                v.to_string(),
                "samples must be finite and non-negative",
            ));
        }
        let mut s = samples_ns.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let mean = s.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            s.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        Ok(LatencyStats {
            count: n,
            mean_ns: mean,
            stddev_ns: var.sqrt(),
            min_ns: s[0],
            p50_ns: percentile_sorted(&s, 0.5),
            p90_ns: percentile_sorted(&s, 0.9),
            p95_ns: (n >= MIN_SAMPLES_P95).then(|| percentile_sorted(&s, 0.95)),
            p99_ns: (n >= MIN_SAMPLES_P99).then(|| percentile_sorted(&s, 0.99)),
            max_ns: s[n - 1],
            interpolation: "linear between closest ranks (type 7, NumPy default)".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_checked_percentiles() {
        // x = 1..=10: p50 h = 9*0.5 = 4.5 -> 5 + 0.5*(6-5) = 5.5 (np.percentile gives 5.5);
        // p90 h = 8.1 -> 9 + 0.1*1 = 9.1.
        let x: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = LatencyStats::from_samples(&x).unwrap();
        assert_eq!(s.p50_ns, 5.5);
        assert!((s.p90_ns - 9.1).abs() < 1e-12);
        assert_eq!(s.mean_ns, 5.5);
        // sample variance of 1..10 = 55/6 = 9.1667
        assert!((s.stddev_ns - (55.0f64 / 6.0).sqrt()).abs() < 1e-12);
        assert_eq!(s.p95_ns, None);
        assert_eq!(s.p99_ns, None);
        let y: Vec<f64> = (0..100).map(f64::from).collect();
        let t = LatencyStats::from_samples(&y).unwrap();
        // h = 99*0.99 = 98.01 -> 98.01
        assert!((t.p99_ns.unwrap() - 98.01).abs() < 1e-9);
        assert!((t.p95_ns.unwrap() - 94.05).abs() < 1e-9);
    }

    #[test]
    fn bad_samples_error() {
        assert!(LatencyStats::from_samples(&[]).is_err());
        let e = LatencyStats::from_samples(&[1.0, f64::NAN]).unwrap_err();
        assert!(e.to_string().contains("samples_ns[1]"), "{e}");
        assert!(LatencyStats::from_samples(&[-1.0]).is_err());
        assert!(LatencyStats::from_samples(&[f64::INFINITY]).is_err());
    }
}
