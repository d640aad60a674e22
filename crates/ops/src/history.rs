//! The history of one metric of one workload over runs (time order), with change points from
//! a penalized least-squares step fit: optimal partitioning (Jackson et al. 2005; exact, the
//! O(n²) form of PELT without pruning) minimizing `Σ_segments Σ (x − segment mean)² + β · k`
//! over k segments of at least `min_segment` points (3 for histories), with a BIC-style
//! penalty `β = 4 · σ² · ln n` and σ estimated robustly from successive differences,
//! `σ = 1.4826 · MAD(x_{i+1} − x_i) / √2` (a step moves one difference only, so it barely
//! moves σ). The constant is twice the textbook BIC's 2 because the MAD estimate is noisy
//! at tens of points: with `2·σ²·ln n` and min segment 2, 50 seeded flat series of 40 points
//! gave 32 spurious change points; with `4·σ²·ln n` and min segment 3 they give 1. Left out: changes in variance, trends, and seasonality; each run is one point
//! (its samples pooled into the metric's statistic).

use crate::error::OpsError;
use crate::policy::{Metric, Statistic};
use crate::svg;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tensorforge_record::Record;

/// Version of the history JSON.
pub const HISTORY_SCHEMA_VERSION: u32 = 1;

/// One segment of constant mean, points `start..end`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Segment {
    /// First index.
    pub start: usize,
    /// One past the last index.
    pub end: usize,
    /// Mean of the segment.
    pub mean: f64,
}

/// A fitted step function.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct StepFit {
    /// Segments in order.
    pub segments: Vec<Segment>,
    /// Index of the first point of each new segment.
    pub change_points: Vec<usize>,
    /// Robust noise estimate σ.
    pub sigma: f64,
    /// Penalty β per segment.
    pub penalty: f64,
    /// The method, stated.
    pub method: String,
}

fn median(v: &mut [f64]) -> f64 {
    Statistic::P50.apply(v)
}

/// Fit a step function to `values` (see the module comment); fewer than `2·min_segment`
/// points give one segment.
pub fn fit_steps(values: &[f64], min_segment: usize) -> StepFit {
    let n = values.len();
    let m = min_segment.max(1);
    let method = format!(
        "optimal partitioning, cost = within-segment sum of squares, penalty 4·σ²·ln n per segment, σ = 1.4826·MAD(successive differences)/√2, min segment {m}"
    );
    let mean_of = |a: usize, b: usize| values[a..b].iter().sum::<f64>() / (b - a) as f64;
    if n == 0 {
        return StepFit {
            segments: vec![],
            change_points: vec![],
            sigma: 0.0,
            penalty: 0.0,
            method,
        };
    }
    let mut d: Vec<f64> = values.windows(2).map(|w| w[1] - w[0]).collect();
    let sigma_raw = if d.is_empty() {
        0.0
    } else {
        let md = median(&mut d.clone());
        let mut dev: Vec<f64> = d.iter_mut().map(|x| (*x - md).abs()).collect();
        1.4826 * median(&mut dev) / std::f64::consts::SQRT_2
    };
    let center = median(&mut values.to_vec());
    let sigma = sigma_raw.max(1e-9 * center.abs()).max(1e-300);
    let penalty = 4.0 * sigma * sigma * (n as f64).ln().max(1.0);
    if n < 2 * m {
        return StepFit {
            segments: vec![Segment {
                start: 0,
                end: n,
                mean: mean_of(0, n),
            }],
            change_points: vec![],
            sigma,
            penalty,
            method,
        };
    }
    // Prefix sums of the centred data keep cancellation small.
    let mut s1 = vec![0.0; n + 1];
    let mut s2 = vec![0.0; n + 1];
    for (i, v) in values.iter().enumerate() {
        let x = v - center;
        s1[i + 1] = s1[i] + x;
        s2[i + 1] = s2[i] + x * x;
    }
    let cost = |a: usize, b: usize| {
        let k = (b - a) as f64;
        let s = s1[b] - s1[a];
        (s2[b] - s2[a] - s * s / k).max(0.0)
    };
    let mut f = vec![f64::INFINITY; n + 1];
    let mut prev = vec![0usize; n + 1];
    f[0] = -penalty;
    for t in m..=n {
        for s in (0..=t - m).filter(|s| *s == 0 || *s >= m) {
            if !f[s].is_finite() {
                continue;
            }
            let c = f[s] + cost(s, t) + penalty;
            if c < f[t] {
                f[t] = c;
                prev[t] = s;
            }
        }
    }
    let mut bounds = vec![n];
    let mut t = n;
    while t > 0 {
        t = prev[t];
        bounds.push(t);
    }
    bounds.reverse();
    let segments: Vec<Segment> = bounds
        .windows(2)
        .map(|w| Segment {
            start: w[0],
            end: w[1],
            mean: mean_of(w[0], w[1]),
        })
        .collect();
    let change_points = segments.iter().skip(1).map(|s| s.start).collect();
    StepFit {
        segments,
        change_points,
        sigma,
        penalty,
        method,
    }
}

/// One run's value.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct HistoryPoint {
    /// Run id.
    pub run_id: String,
    /// Latest record timestamp of the run.
    pub timestamp_unix_s: i64,
    /// The metric's statistic over the run's pooled samples.
    pub value: f64,
    /// Samples pooled.
    pub n_samples: usize,
    /// Git commit of the build, when recorded.
    pub git_commit: Option<String>,
    /// Labels of the run's first record.
    pub labels: BTreeMap<String, String>,
}

/// A change point with the segment means around it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ChangePoint {
    /// Index of the first point after the change.
    pub index: usize,
    /// Run id at that index.
    pub run_id: String,
    /// Mean of the segment before.
    pub before: f64,
    /// Mean of the segment after.
    pub after: f64,
    /// `after / before − 1`.
    pub relative_change: f64,
}

/// A metric's history with its step fit.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct History {
    /// Always [`HISTORY_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `measurement`.
    pub evidence: String,
    /// Workload display name.
    pub workload: String,
    /// Fingerprint.
    pub fingerprint: String,
    /// Metric.
    pub metric: Metric,
    /// Statistic per run.
    pub statistic: Statistic,
    /// Unit.
    pub unit: String,
    /// Machine filter, when one was given.
    pub machine_id: Option<String>,
    /// Points in time order.
    pub points: Vec<HistoryPoint>,
    /// The step fit.
    pub fit: StepFit,
    /// Change points with context.
    pub change_points: Vec<ChangePoint>,
}

/// The history of `metric` for `workload` (a name or fingerprint) over `records`, one point
/// per run in time order, optionally only on `machine_id`. Errors when nothing matches or a
/// name maps to several fingerprints.
pub fn history(
    workload: &str,
    records: &[Record],
    metric: Metric,
    machine_id: Option<&str>,
) -> Result<History, OpsError> {
    let sel: Vec<&Record> = records
        .iter()
        .filter(|r| r.fingerprint == workload || r.workload.name == workload)
        .filter(|r| machine_id.is_none_or(|m| r.device.machine_id == m))
        .collect();
    let fps: std::collections::BTreeSet<&str> =
        sel.iter().map(|r| r.fingerprint.as_str()).collect();
    if fps.is_empty() {
        return Err(OpsError::Input(format!(
            "workload `{workload}`: no records{}",
            machine_id
                .map(|m| format!(" on machine `{m}`"))
                .unwrap_or_default()
        )));
    }
    if fps.len() > 1 {
        return Err(OpsError::Input(format!(
            "workload `{workload}` names {} different fingerprints ({}); pass one fingerprint",
            fps.len(),
            fps.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    let statistic = metric.implied_statistic().unwrap_or(Statistic::P50);
    let mut runs: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in &sel {
        runs.entry(r.run_id.as_str()).or_default().push(r);
    }
    let mut points = Vec::new();
    for (run, recs) in runs {
        let mut v: Vec<f64> = match metric {
            Metric::PeakAlloc => recs
                .iter()
                .filter_map(|r| r.peak_alloc_bytes.map(|b| b as f64))
                .collect(),
            Metric::Throughput => recs
                .iter()
                .flat_map(|r| r.samples_ns.iter().filter(|x| **x > 0.0).map(|x| 1e9 / x))
                .collect(),
            _ => recs
                .iter()
                .flat_map(|r| r.samples_ns.iter().copied())
                .collect(),
        };
        if v.is_empty() {
            continue;
        }
        let n = v.len();
        points.push(HistoryPoint {
            run_id: run.to_string(),
            timestamp_unix_s: recs.iter().map(|r| r.timestamp_unix_s).max().unwrap_or(0),
            value: statistic.apply(&mut v),
            n_samples: n,
            git_commit: recs[0].software.git_commit.clone(),
            labels: recs[0].labels.clone(),
        });
    }
    if points.is_empty() {
        return Err(OpsError::Input(format!(
            "workload `{workload}`: no run measured `{}`",
            metric.name()
        )));
    }
    points.sort_by(|a, b| (a.timestamp_unix_s, &a.run_id).cmp(&(b.timestamp_unix_s, &b.run_id)));
    let values: Vec<f64> = points.iter().map(|p| p.value).collect();
    let fit = fit_steps(&values, 3);
    let change_points = fit
        .segments
        .windows(2)
        .map(|w| ChangePoint {
            index: w[1].start,
            run_id: points[w[1].start].run_id.clone(),
            before: w[0].mean,
            after: w[1].mean,
            relative_change: if w[0].mean != 0.0 {
                w[1].mean / w[0].mean - 1.0
            } else {
                f64::NAN
            },
        })
        .collect();
    Ok(History {
        schema_version: HISTORY_SCHEMA_VERSION,
        evidence: "measurement".into(),
        workload: sel[0].workload.name.clone(),
        fingerprint: sel[0].fingerprint.clone(),
        metric,
        statistic,
        unit: metric.unit().into(),
        machine_id: machine_id.map(String::from),
        points,
        fit,
        change_points,
    })
}

/// The trend as a standalone SVG document (change points dashed red, segment means green).
pub fn render_history_svg(h: &History) -> String {
    let values: Vec<f64> = h.points.iter().map(|p| p.value).collect();
    let segs: Vec<(usize, usize, f64)> = h
        .fit
        .segments
        .iter()
        .map(|s| (s.start, s.end, s.mean))
        .collect();
    let title = format!(
        "{} — {} ({}) over {} run(s)",
        h.workload,
        h.metric.name(),
        h.statistic.name(),
        h.points.len()
    );
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{}\n",
        svg::trend_plot(&title, &h.unit, &values, &segs, &h.fit.change_points)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn noise(seed: u64, n: usize, mean: f64, sd: f64) -> Vec<f64> {
        let mut r = SplitMix64::new(seed);
        (0..n).map(|_| mean + sd * r.normal()).collect()
    }

    #[test]
    fn clear_step_is_found_where_it_is() {
        // 20 points at 100 then 20 at 130, noise sd 3: a 10σ step.
        let mut v = noise(1, 20, 100.0, 3.0);
        v.extend(noise(2, 20, 130.0, 3.0));
        let f = fit_steps(&v, 3);
        assert_eq!(f.change_points, vec![20], "{f:?}");
        assert!(
            (f.segments[0].mean - 100.0).abs() < 3.0 && (f.segments[1].mean - 130.0).abs() < 3.0
        );
        // σ from successive differences is near the true 3 despite the step.
        assert!(f.sigma > 2.0 && f.sigma < 4.5, "{}", f.sigma);
    }

    #[test]
    fn exact_steps_by_hand() {
        // [1,1,1,5,5,5]: d = [0,0,4,0,0], MAD(d) = 0 -> σ floored at 1e-9·median(=3);
        // the fit with one change at 3 has zero cost, so exactly one change point.
        let f = fit_steps(&[1.0, 1.0, 1.0, 5.0, 5.0, 5.0], 2);
        assert_eq!(f.change_points, vec![3]);
        assert_eq!(f.segments[1].mean, 5.0);
        assert!(fit_steps(&[7.0; 10], 2).change_points.is_empty());
        assert!(fit_steps(&[], 2).segments.is_empty());
        assert_eq!(
            fit_steps(&[1.0, 9.0, 1.0], 2).change_points,
            Vec::<usize>::new()
        );
    }

    #[test]
    fn flat_noise_gives_no_change_points() {
        let mut false_changes = 0;
        for seed in 0..50 {
            let f = fit_steps(&noise(100 + seed, 40, 1000.0, 20.0), 3);
            false_changes += f.change_points.len();
        }
        // 50 series of 40 flat points, min segment 3: 1 spurious change point measured.
        assert!(false_changes <= 2, "{false_changes}");
        assert!(fit_steps(&noise(7, 40, 1000.0, 20.0), 3)
            .change_points
            .is_empty());
    }
}
