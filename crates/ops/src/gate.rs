//! The regression gate over stored runs: match baseline and candidate records by workload
//! fingerprint, check identity, and decide each gated metric under a [`Policy`].
//!
//! The unit of replication is the run. Each side's records are grouped by `run_id`; a run
//! contributes one observation per metric, its statistic (e.g. the median of its samples).
//! A timed metric under the default `run_t` test compares the candidate runs' geometric
//! mean `c` with the baseline runs' log-scale mean `m` and standard deviation `s` (n runs):
//! `T = sign · (ln c − m) / (s · √(1/n + 1/n_c))`, one-sided `p = P(T_{n−1} > T)`. It FAILs
//! when the change in the regression direction exceeds
//! `allowed = max(max_relative · |baseline|, max_absolute, clock floor)` *and* p (after
//! Benjamini–Hochberg across the suite) is ≤ α; beyond-allowed but not significant is
//! INCONCLUSIVE, and so is any beyond-allowed change with fewer than `history.min_runs`
//! baseline runs ("too little history": samples of one run are not replicates, so they
//! never FAIL anything). The within-run tests (`mann_whitney`, `bootstrap`) remain for
//! users who ask for them, INCONCLUSIVE at worst. Counts (peak allocation, instructions)
//! are deterministic: no test, the allowance alone decides. The `empty` workload is the
//! harness's overhead probe: reported, never gated. Missing evidence is never PASS: a
//! workload on one side only, an identity mismatch or an invalid record is ERROR. Overall:
//! ERROR over FAIL over INCONCLUSIVE over PASS. Left out: drift within a run, interleaved
//! designs (see [`crate::compare`]), and any use of the analytical model (context only).

use crate::date::Date;
use crate::policy::{
    Direction, IdentityRule, Metric, MetricPolicy, MetricRole, Policy, Statistic, TestKind,
};
use crate::rng::derive_seed;
use crate::stats::{self, BootstrapInterval, MwuMethod};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tensorforge_record::Record;

/// Version of the gate result JSON.
pub const GATE_SCHEMA_VERSION: u32 = 3;

/// Decision for one metric, and overall.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// Within the allowed change.
    Pass,
    /// Beyond the allowed change and statistically significant.
    Fail,
    /// Beyond the allowed change but not significant, or too few samples to test.
    Inconclusive,
    /// The policy does not gate this metric, or neither side measured it.
    NotComparable,
    /// A FAIL or INCONCLUSIVE accepted by an unexpired waiver.
    Waived,
    /// Missing on one side, identity mismatch, or invalid record.
    Error,
}

impl Verdict {
    /// Upper-case label as in the JSON.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Inconclusive => "INCONCLUSIVE",
            Verdict::NotComparable => "NOT_COMPARABLE",
            Verdict::Waived => "WAIVED",
            Verdict::Error => "ERROR",
        }
    }

    /// Process exit status of an overall verdict: PASS 0, FAIL 1, ERROR 2, INCONCLUSIVE 3
    /// (per-metric-only verdicts NOT_COMPARABLE and WAIVED map to 0).
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Pass | Verdict::NotComparable | Verdict::Waived => 0,
            Verdict::Fail => 1,
            Verdict::Error => 2,
            Verdict::Inconclusive => 3,
        }
    }
}

/// How a waiver was used on a row.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct WaiverUse {
    /// The waiver's reason.
    pub reason: String,
    /// Its expiry date.
    pub expires: Date,
    /// `applied` (row WAIVED), `expired` (row keeps its verdict) or `not_needed` (row passed).
    pub status: String,
}

/// One compared metric of one workload (or one workload-level ERROR, with `metric` =
/// `workload`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MetricRow {
    /// Workload display name.
    pub workload: String,
    /// Workload fingerprint (baseline side's for a mismatch).
    pub fingerprint: String,
    /// The metric, or `None` for a workload-level row (identity mismatch, missing evidence),
    /// written `workload` in JSON.
    #[serde(with = "row_metric")]
    pub metric: Option<Metric>,
    /// Unit of baseline/candidate/allowed.
    pub unit: String,
    /// The decision.
    pub verdict: Verdict,
    /// Statistic compared (`p50`, `mean`...).
    pub statistic: Option<Statistic>,
    /// Baseline statistic.
    pub baseline: Option<f64>,
    /// Candidate statistic.
    pub candidate: Option<f64>,
    /// `(candidate − baseline) / |baseline|`.
    pub change_relative: Option<f64>,
    /// Change in the regression direction, `sign · (candidate − baseline)` (> 0 is worse).
    pub worse_change: Option<f64>,
    /// Allowed regression `max(max_relative · |baseline|, max_absolute)`, metric unit.
    pub allowed: Option<f64>,
    /// `allowed / |baseline|`.
    pub allowed_relative: Option<f64>,
    /// Test used (`mann_whitney`, `bootstrap`, `none`).
    pub test: Option<TestKind>,
    /// `exact` or `normal` for Mann–Whitney.
    pub test_method: Option<String>,
    /// One-sided p-value in the regression direction.
    pub p_value: Option<f64>,
    /// Benjamini–Hochberg adjusted p-value (when suite FDR control is on).
    pub p_adjusted: Option<f64>,
    /// Significance level.
    pub alpha: Option<f64>,
    /// Bootstrap interval of the relative change.
    pub interval: Option<BootstrapInterval>,
    /// Baseline samples.
    pub n_baseline: usize,
    /// Candidate samples.
    pub n_candidate: usize,
    /// Baseline runs (distinct run ids) behind the baseline value.
    #[serde(default)]
    pub baseline_runs: usize,
    /// Candidate runs behind the candidate value (more than one after confirmations).
    #[serde(default)]
    pub candidate_runs: usize,
    /// For `run_t`: the candidate value beyond which the change is significant at α
    /// (before the suite correction), metric unit.
    #[serde(default)]
    pub significance_limit: Option<f64>,
    /// The smallest per-iteration change the clock and the harness overhead can resolve,
    /// ns (latency metrics of harness records); part of `allowed`.
    #[serde(default)]
    pub clock_floor: Option<f64>,
    /// Waiver that matched this row, if any.
    pub waiver: Option<WaiverUse>,
    /// Why this verdict, in one sentence.
    pub reason: String,
    /// The policy's role for the metric (`None` for workload-level rows and ungated metrics).
    #[serde(default)]
    pub role: Option<MetricRole>,
    /// Whether this row's verdict entered the overall decision (see [`MetricRole`]).
    #[serde(default)]
    pub decides: bool,
    /// A count that could not be compared because one side was not counted (valgrind
    /// missing, the count failed): an ERROR that lets the workload's fallback metrics decide.
    #[serde(default)]
    pub unavailable: bool,
}

/// How one workload was decided: its verdict and the metrics that decided it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct WorkloadDecision {
    /// Display name.
    pub workload: String,
    /// Fingerprint.
    pub fingerprint: String,
    /// The worst verdict of its deciding rows.
    pub verdict: Verdict,
    /// The metrics whose rows decided (`workload` for a workload-level row).
    pub decided_by: Vec<String>,
    /// Why fallback metrics decided, when they did.
    pub note: Option<String>,
}

/// A field that differs between the two sides.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct FieldChange {
    /// Dotted field name, e.g. `software.git_commit`.
    pub field: String,
    /// Baseline value (`—` when absent).
    pub baseline: String,
    /// Candidate value.
    pub candidate: String,
}

/// Context of one workload compared across the two sides.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct WorkloadComparison {
    /// Display name.
    pub name: String,
    /// Fingerprint.
    pub fingerprint: String,
    /// Kind (`gemm`...).
    pub kind: String,
    /// Dtype.
    pub dtype: String,
    /// Records pooled on the baseline side.
    pub baseline_records: usize,
    /// Records pooled on the candidate side.
    pub candidate_records: usize,
    /// Device model on each side.
    pub device_baseline: String,
    /// Device model on the candidate side.
    pub device_candidate: String,
    /// Software differences (listed unless the software rule is `ignore`).
    pub software_changes: Vec<FieldChange>,
    /// Runtime differences: machine, threads, cores, OS, kernel, harness settings.
    pub runtime_changes: Vec<FieldChange>,
}

/// Status of one policy waiver in this gate run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct WaiverStatus {
    /// Workload name or fingerprint.
    pub workload: String,
    /// Metric or `*`.
    pub metric: String,
    /// Reason.
    pub reason: String,
    /// Expiry.
    pub expires: Date,
    /// `applied`, `expired` (no longer applies), or `unused` (nothing to waive).
    pub status: String,
}

/// Everything the gate decided, serializable as versioned JSON.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GateResult {
    /// Always [`GATE_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `measurement+policy`: the verdicts use measurements only.
    pub evidence: String,
    /// Where the policy came from.
    pub policy_source: String,
    /// The date waivers were checked against.
    pub today: Date,
    /// Overall verdict.
    pub overall: Verdict,
    /// Process exit status for `overall`.
    pub exit_code: u8,
    /// Why the overall verdict (one line per deciding row).
    pub reasons: Vec<String>,
    /// Per-metric rows, grouped by workload in name order.
    pub rows: Vec<MetricRow>,
    /// Per-workload context.
    pub workloads: Vec<WorkloadComparison>,
    /// Every policy waiver and what became of it.
    pub waivers: Vec<WaiverStatus>,
    /// `benjamini_hochberg` or `none`.
    pub fdr_method: String,
    /// Number of p-values in the false-discovery family.
    pub fdr_family_size: usize,
    /// Rows per verdict label.
    pub counts: BTreeMap<String, usize>,
    /// Per workload: its verdict and which metrics decided it.
    #[serde(default)]
    pub decisions: Vec<WorkloadDecision>,
}

impl GateResult {
    /// Exit status: 0 pass, 1 policy failure, 2 error, 3 inconclusive.
    pub fn exit_code(&self) -> u8 {
        self.overall.exit_code()
    }
}

fn device_model(r: &Record) -> String {
    let model = match &r.device.gpu {
        Some(g) => g.name.clone(),
        None => r.device.cpu_model.clone(),
    };
    format!("{} ({})", model, r.device.kind)
}

fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "—".into())
}

fn diff(out: &mut Vec<FieldChange>, field: &str, a: String, b: String) {
    if a != b {
        out.push(FieldChange {
            field: field.into(),
            baseline: a,
            candidate: b,
        });
    }
}

fn map_diff(
    out: &mut Vec<FieldChange>,
    prefix: &str,
    a: &BTreeMap<String, String>,
    b: &BTreeMap<String, String>,
) {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for k in keys {
        diff(
            out,
            &format!("{prefix}.{k}"),
            opt(&a.get(k).cloned()),
            opt(&b.get(k).cloned()),
        );
    }
}

fn software_changes(a: &Record, b: &Record) -> Vec<FieldChange> {
    let (x, y) = (&a.software, &b.software);
    let mut v = Vec::new();
    diff(
        &mut v,
        "software.tensorforge_version",
        x.tensorforge_version.clone(),
        y.tensorforge_version.clone(),
    );
    diff(
        &mut v,
        "software.git_commit",
        opt(&x.git_commit),
        opt(&y.git_commit),
    );
    diff(
        &mut v,
        "software.rustc_version",
        opt(&x.rustc_version),
        opt(&y.rustc_version),
    );
    map_diff(&mut v, "software.crates", &x.crates, &y.crates);
    map_diff(&mut v, "software.frameworks", &x.frameworks, &y.frameworks);
    v
}

fn runtime_changes(a: &Record, b: &Record) -> Vec<FieldChange> {
    let (x, y) = (&a.device, &b.device);
    let mut v = Vec::new();
    diff(
        &mut v,
        "device.machine_id",
        x.machine_id.clone(),
        y.machine_id.clone(),
    );
    diff(
        &mut v,
        "device.logical_cores",
        x.logical_cores.to_string(),
        y.logical_cores.to_string(),
    );
    diff(
        &mut v,
        "device.threads_used",
        x.threads_used.to_string(),
        y.threads_used.to_string(),
    );
    diff(&mut v, "device.os", x.os.clone(), y.os.clone());
    diff(&mut v, "device.kernel", opt(&x.kernel), opt(&y.kernel));
    let gpu_driver =
        |d: &tensorforge_record::DeviceContext| d.gpu.as_ref().and_then(|g| g.driver.clone());
    diff(
        &mut v,
        "device.gpu.driver",
        opt(&gpu_driver(x)),
        opt(&gpu_driver(y)),
    );
    let (h, k) = (&a.harness, &b.harness);
    diff(
        &mut v,
        "harness.warmup_iterations",
        h.warmup_iterations.to_string(),
        k.warmup_iterations.to_string(),
    );
    diff(
        &mut v,
        "harness.min_iterations",
        h.min_iterations.to_string(),
        k.min_iterations.to_string(),
    );
    diff(
        &mut v,
        "harness.time_budget_ns",
        h.time_budget_ns.to_string(),
        k.time_budget_ns.to_string(),
    );
    diff(
        &mut v,
        "harness.threads",
        h.threads.to_string(),
        k.threads.to_string(),
    );
    diff(
        &mut v,
        "harness.rotating_buffers",
        h.rotating_buffers.to_string(),
        k.rotating_buffers.to_string(),
    );
    diff(&mut v, "source", a.source.clone(), b.source.clone());
    v
}

impl MetricRow {
    /// The metric's name, or `workload` for a workload-level row.
    pub fn metric_name(&self) -> &'static str {
        self.metric.map_or("workload", Metric::name)
    }
}

/// `MetricRow::metric` in JSON: the metric's snake-case name, or `workload`.
mod row_metric {
    use super::Metric;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &Option<Metric>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.map_or("workload", Metric::name))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Metric>, D::Error> {
        let text = String::deserialize(d)?;
        if text == "workload" {
            return Ok(None);
        }
        Metric::parse(&text).map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!("unknown metric `{text}` (or `workload`)"))
        })
    }
}

pub(crate) fn error_row(
    workload: &str,
    fingerprint: &str,
    metric: Option<Metric>,
    unit: &str,
    reason: String,
) -> MetricRow {
    MetricRow {
        workload: workload.into(),
        fingerprint: fingerprint.into(),
        metric,
        unit: unit.into(),
        verdict: Verdict::Error,
        statistic: None,
        baseline: None,
        candidate: None,
        change_relative: None,
        worse_change: None,
        allowed: None,
        allowed_relative: None,
        test: None,
        test_method: None,
        p_value: None,
        p_adjusted: None,
        alpha: None,
        interval: None,
        n_baseline: 0,
        n_candidate: 0,
        baseline_runs: 0,
        candidate_runs: 0,
        significance_limit: None,
        clock_floor: None,
        waiver: None,
        reason,
        role: None,
        decides: true,
        unavailable: false,
    }
}

/// Samples of a metric over pooled records: latency ns, `1e9/ns` for throughput, peak
/// allocation bytes. `Err` names what is missing or invalid.
fn metric_samples(records: &[&Record], metric: Metric) -> Result<Vec<f64>, String> {
    match metric {
        Metric::PeakAlloc => {
            let v: Vec<f64> = records
                .iter()
                .filter_map(|r| r.peak_alloc_bytes.map(|b| b as f64))
                .collect();
            if v.len() != records.len() {
                return Err(format!(
                    "{} of {} records lack peak_alloc_bytes",
                    records.len() - v.len(),
                    records.len()
                ));
            }
            Ok(v)
        }
        Metric::Instructions | Metric::EstimatedCycles => {
            let v: Vec<f64> = records
                .iter()
                .filter_map(|r| match metric {
                    Metric::Instructions => r.instructions,
                    _ => r.counts.as_ref().map(|c| c.estimated_cycles),
                })
                .collect();
            if v.len() != records.len() {
                let why = records
                    .iter()
                    .find_map(|r| r.count_error.clone())
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default();
                return Err(format!(
                    "{} of {} records were not counted{why}",
                    records.len() - v.len(),
                    records.len()
                ));
            }
            Ok(v)
        }
        Metric::Throughput => {
            let mut v = Vec::new();
            for r in records {
                for x in &r.samples_ns {
                    if *x <= 0.0 {
                        return Err(format!(
                            "a latency sample of {x} ns has no finite throughput"
                        ));
                    }
                    v.push(1e9 / x);
                }
            }
            Ok(v)
        }
        _ => Ok(records
            .iter()
            .flat_map(|r| r.samples_ns.iter().copied())
            .collect()),
    }
}

struct Side<'a> {
    name: String,
    records: Vec<&'a Record>,
}

/// (name, fingerprint, error) of a record that failed validation.
type Invalid = (String, String, String);

fn group(records: &[Record]) -> (BTreeMap<String, Side<'_>>, Vec<Invalid>) {
    let mut out: BTreeMap<String, Side<'_>> = BTreeMap::new();
    let mut invalid = Vec::new();
    for r in records {
        if let Err(e) = r.validate() {
            invalid.push((
                r.workload.name.clone(),
                r.fingerprint.clone(),
                e.to_string(),
            ));
            continue;
        }
        out.entry(r.fingerprint.clone())
            .or_insert_with(|| Side {
                name: r.workload.name.clone(),
                records: Vec::new(),
            })
            .records
            .push(r);
    }
    (out, invalid)
}

fn identity_differences(a: &Record, b: &Record) -> String {
    let (x, y) = (&a.workload, &b.workload);
    let mut parts = Vec::new();
    if x.kind != y.kind {
        parts.push(format!("kind `{}` vs `{}`", x.kind, y.kind));
    }
    if x.dtype != y.dtype {
        parts.push(format!("dtype `{}` vs `{}`", x.dtype, y.dtype));
    }
    if x.params != y.params {
        let a = serde_json::to_string(&x.params).unwrap_or_default();
        let b = serde_json::to_string(&y.params).unwrap_or_default();
        parts.push(format!("params {a} vs {b}"));
    }
    parts.join("; ")
}

fn pct(x: f64) -> String {
    format!("{:+.1} %", x * 100.0)
}

/// One-line summary of a row (used in reasons and reports).
pub fn describe_row(r: &MetricRow) -> String {
    format!(
        "{} {}: {} — {}",
        r.workload,
        r.metric_name(),
        r.verdict.label(),
        r.reason
    )
}

/// Decide every metric of every workload; `today` decides which waivers have expired.
pub fn gate(policy: &Policy, baseline: &[Record], candidate: &[Record], today: Date) -> GateResult {
    let (bmap, binvalid) = group(baseline);
    let (cmap, cinvalid) = group(candidate);
    let mut rows: Vec<MetricRow> = Vec::new();
    let mut workloads = Vec::new();
    for (side, list) in [("baseline", &binvalid), ("candidate", &cinvalid)] {
        for (name, fp, e) in list {
            rows.push(error_row(
                name,
                fp,
                None,
                "",
                format!("invalid {side} record: {e}"),
            ));
        }
    }
    // Unmatched fingerprints: an identity mismatch when the other side has the same name
    // under another fingerprint, otherwise missing evidence.
    let b_only: Vec<&String> = bmap.keys().filter(|k| !cmap.contains_key(*k)).collect();
    let c_only: Vec<&String> = cmap.keys().filter(|k| !bmap.contains_key(*k)).collect();
    for fp in &b_only {
        let s = &bmap[*fp];
        let twin = c_only.iter().find(|c| cmap[**c].name == s.name);
        let reason = match twin {
            Some(c) => format!(
                "identity mismatch: fingerprint {} in baseline vs {} in candidate ({})",
                short(fp),
                short(c),
                identity_differences(s.records[0], cmap[*c].records[0])
            ),
            None => "missing in the candidate: no record with this fingerprint".to_string(),
        };
        rows.push(error_row(&s.name, fp, None, "", reason));
    }
    for fp in &c_only {
        let s = &cmap[*fp];
        if b_only.iter().any(|b| bmap[*b].name == s.name) {
            continue; // reported once, above
        }
        rows.push(error_row(
            &s.name,
            fp,
            None,
            "",
            "missing in the baseline: no record with this fingerprint".into(),
        ));
    }
    // Matched workloads, in name order.
    let mut matched: Vec<(&String, &Side<'_>, &Side<'_>)> = bmap
        .iter()
        .filter_map(|(fp, b)| cmap.get(fp).map(|c| (fp, b, c)))
        .collect();
    matched.sort_by(|a, b| (&a.1.name, a.0).cmp(&(&b.1.name, b.0)));
    let mut pending: Vec<Option<(MetricPolicy, bool)>> = Vec::new();
    for (fp, b, c) in matched {
        let (b0, c0) = (b.records[0], c.records[0]);
        let dev_b: std::collections::BTreeSet<String> =
            b.records.iter().map(|r| device_model(r)).collect();
        let dev_c: std::collections::BTreeSet<String> =
            c.records.iter().map(|r| device_model(r)).collect();
        let join = |s: &std::collections::BTreeSet<String>| {
            s.iter().cloned().collect::<Vec<_>>().join(", ")
        };
        let sw = software_changes(b0, c0);
        workloads.push(WorkloadComparison {
            name: b.name.clone(),
            fingerprint: fp.clone(),
            kind: b0.workload.kind.clone(),
            dtype: b0.workload.dtype.clone(),
            baseline_records: b.records.len(),
            candidate_records: c.records.len(),
            device_baseline: join(&dev_b),
            device_candidate: join(&dev_c),
            software_changes: if policy.identity.software == IdentityRule::Ignore {
                Vec::new()
            } else {
                sw.clone()
            },
            runtime_changes: runtime_changes(b0, c0),
        });
        if dev_b != dev_c && policy.identity.device_model == IdentityRule::MustMatch {
            rows.push(error_row(&b.name, fp, None, "", format!(
                "identity mismatch: device model `{}` in baseline vs `{}` in candidate (identity.device_model = must_match)",
                join(&dev_b), join(&dev_c))));
            pending.resize(rows.len(), None);
            continue;
        }
        if !sw.is_empty() && policy.identity.software == IdentityRule::MustMatch {
            let fields: Vec<&str> = sw.iter().map(|f| f.field.as_str()).collect();
            rows.push(error_row(
                &b.name,
                fp,
                None,
                "",
                format!(
                    "identity mismatch: software differs in {} (identity.software = must_match)",
                    fields.join(", ")
                ),
            ));
            pending.resize(rows.len(), None);
            continue;
        }
        if b0.workload.kind == "empty" {
            let mut r = error_row(&b.name, fp, None, "", String::new());
            r.verdict = Verdict::NotComparable;
            r.baseline = Some(b0.stats.p50_ns);
            r.candidate = Some(c0.stats.p50_ns);
            r.unit = "ns".into();
            r.reason = format!(
                "overhead probe (an empty call through the harness): p50 {:.1} ns vs {:.1} ns per call, reported and not gated",
                b0.stats.p50_ns, c0.stats.p50_ns
            );
            rows.push(r);
            pending.resize(rows.len(), None);
            continue;
        }
        for metric in Metric::ALL {
            let row = metric_row(policy, &b.name, fp, &b.records, &c.records, metric);
            pending.resize(rows.len(), None);
            rows.push(row.0);
            pending.push(row.1);
        }
    }
    pending.resize(rows.len(), None);
    // Suite-level false-discovery control over every p-value computed.
    let tested: Vec<usize> = (0..rows.len())
        .filter(|i| rows[*i].p_value.is_some())
        .collect();
    let pvals: Vec<f64> = tested
        .iter()
        .map(|i| rows[*i].p_value.unwrap_or(1.0))
        .collect();
    if policy.suite.benjamini_hochberg {
        for (i, q) in tested.iter().zip(stats::benjamini_hochberg(&pvals)) {
            rows[*i].p_adjusted = Some(q);
        }
    }
    for (row, pend) in rows.iter_mut().zip(&pending) {
        if let Some((mp, beyond)) = pend {
            decide(row, mp, *beyond);
        }
    }
    // Waivers.
    let mut waivers: Vec<WaiverStatus> = policy
        .waivers
        .iter()
        .map(|w| WaiverStatus {
            workload: w.workload.clone(),
            metric: w.metric.clone(),
            reason: w.reason.clone(),
            expires: w.expires,
            status: if today > w.expires {
                "expired".into()
            } else {
                "unused".into()
            },
        })
        .collect();
    for row in rows.iter_mut() {
        let Some(metric) = row.metric else {
            continue;
        };
        let Some((wi, w)) = policy
            .waivers
            .iter()
            .enumerate()
            .find(|(_, w)| w.matches(&row.workload, &row.fingerprint, metric))
        else {
            continue;
        };
        let status = if today > w.expires {
            if matches!(row.verdict, Verdict::Fail | Verdict::Inconclusive) {
                row.reason = format!(
                    "{}; the waiver expired on {} and no longer applies",
                    row.reason, w.expires
                );
            }
            "expired"
        } else if matches!(row.verdict, Verdict::Fail | Verdict::Inconclusive) {
            row.reason = format!(
                "{} (was {}; waived until {}: {})",
                row.reason,
                row.verdict.label(),
                w.expires,
                w.reason
            );
            row.verdict = Verdict::Waived;
            waivers[wi].status = "applied".into();
            "applied"
        } else {
            "not_needed"
        };
        row.waiver = Some(WaiverUse {
            reason: w.reason.clone(),
            expires: w.expires,
            status: status.into(),
        });
    }
    let decisions = assign_decisions(&mut rows);
    let (overall, reasons, counts) = summarize(&rows, &waivers);
    GateResult {
        schema_version: GATE_SCHEMA_VERSION,
        evidence: "measurement+policy".into(),
        policy_source: policy.source.clone(),
        today,
        overall,
        exit_code: overall.exit_code(),
        reasons,
        rows,
        workloads,
        waivers,
        fdr_method: if policy.suite.benjamini_hochberg {
            "benjamini_hochberg".into()
        } else {
            "none".into()
        },
        fdr_family_size: pvals.len(),
        counts,
        decisions,
    }
}

/// Severity order of verdicts for a decision: ERROR over FAIL over INCONCLUSIVE over PASS
/// (a waived row counts as a pass; NOT_COMPARABLE decides nothing).
fn severity(v: Verdict) -> u8 {
    match v {
        Verdict::Error => 4,
        Verdict::Fail => 3,
        Verdict::Inconclusive => 2,
        Verdict::Pass | Verdict::Waived => 1,
        Verdict::NotComparable => 0,
    }
}

/// Set each row's `decides` from its metric's role (see [`MetricRole`]) and return how each
/// workload was decided. A workload whose counted-cost metrics (role `decide`) compared is
/// decided by them and its other `decide` metrics; one that could not be counted is decided
/// by its `fallback` metrics, and its unavailable count rows are reported without deciding.
pub fn assign_decisions(rows: &mut [MetricRow]) -> Vec<WorkloadDecision> {
    let mut order: Vec<String> = Vec::new();
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in rows.iter().enumerate() {
        let g = groups.entry(r.fingerprint.clone()).or_default();
        if g.is_empty() {
            order.push(r.fingerprint.clone());
        }
        g.push(i);
    }
    let mut out = Vec::new();
    for fp in order {
        let idx = &groups[&fp];
        let counted = idx.iter().any(|&i| {
            let r = &rows[i];
            r.metric.is_some_and(Metric::is_counted_cost)
                && r.role == Some(MetricRole::Decide)
                && !r.unavailable
                && r.verdict != Verdict::NotComparable
        });
        let fallback = idx.iter().any(|&i| {
            rows[i].role == Some(MetricRole::Fallback) && rows[i].verdict != Verdict::NotComparable
        });
        for &i in idx {
            let r = &mut rows[i];
            r.decides = match (r.metric, r.role) {
                (None, _) => true,
                (Some(_), None) | (Some(_), Some(MetricRole::Context)) => false,
                (Some(_), Some(MetricRole::Decide)) => !(r.unavailable && fallback),
                (Some(_), Some(MetricRole::Fallback)) => !counted,
            };
        }
        let deciding: Vec<&MetricRow> = idx
            .iter()
            .map(|&i| &rows[i])
            .filter(|r| r.decides && r.verdict != Verdict::NotComparable)
            .collect();
        let verdict = deciding
            .iter()
            .map(|r| r.verdict)
            .max_by_key(|v| severity(*v))
            .map(|v| {
                if v == Verdict::Waived {
                    Verdict::Pass
                } else {
                    v
                }
            })
            .unwrap_or(Verdict::NotComparable);
        let by_fallback = deciding
            .iter()
            .any(|r| r.role == Some(MetricRole::Fallback));
        let note = by_fallback.then(|| {
            let why = idx
                .iter()
                .map(|&i| &rows[i])
                .find(|r| r.unavailable)
                .map(|r| r.reason.clone())
                .unwrap_or_else(|| "no counts on either side".into());
            format!("not counted ({why}): decided on time")
        });
        let first = &rows[idx[0]];
        out.push(WorkloadDecision {
            workload: first.workload.clone(),
            fingerprint: fp.clone(),
            verdict,
            decided_by: deciding
                .iter()
                .map(|r| r.metric_name().to_string())
                .collect(),
            note,
        });
    }
    out
}

/// The overall verdict over the deciding rows (ERROR over FAIL over INCONCLUSIVE over PASS;
/// nothing compared is ERROR), its reasons and the rows per verdict.
fn summarize(
    rows: &[MetricRow],
    waivers: &[WaiverStatus],
) -> (Verdict, Vec<String>, BTreeMap<String, usize>) {
    let has = |v: Verdict| rows.iter().any(|r| r.decides && r.verdict == v);
    let mut reasons = Vec::new();
    let overall = if has(Verdict::Error) {
        Verdict::Error
    } else if has(Verdict::Fail) {
        Verdict::Fail
    } else if has(Verdict::Inconclusive) {
        Verdict::Inconclusive
    } else if has(Verdict::Pass) || has(Verdict::Waived) {
        Verdict::Pass
    } else {
        reasons.push(if rows.is_empty() {
            "no records on either side: nothing was compared (missing evidence is never PASS)".to_string()
        } else {
            "no metric of these records is gated by the policy: nothing was compared (missing evidence is never PASS)".to_string()
        });
        Verdict::Error
    };
    reasons.extend(
        rows.iter()
            .filter(|r| r.decides && r.verdict == overall)
            .map(describe_row),
    );
    if overall == Verdict::Pass {
        let n = rows
            .iter()
            .filter(|r| r.decides && r.verdict == Verdict::Pass)
            .count();
        reasons.push(format!("{n} deciding metric(s) within the allowed change"));
        reasons.extend(
            rows.iter()
                .filter(|r| r.decides && r.verdict == Verdict::Waived)
                .map(describe_row),
        );
    }
    // Counts that could not be compared never pass silently: each is named, with the
    // metrics that decided its workload instead.
    reasons.extend(
        rows.iter()
            .filter(|r| r.unavailable && !r.decides)
            .map(|r| {
                format!(
                    "{}; the workload's fallback (time) metrics decided it",
                    describe_row(r)
                )
            }),
    );
    for w in waivers.iter().filter(|w| w.status == "expired") {
        reasons.push(format!(
            "waiver for {} {} expired on {} and no longer applies",
            w.workload, w.metric, w.expires
        ));
    }
    let mut counts = BTreeMap::new();
    for r in rows {
        *counts.entry(r.verdict.label().to_string()).or_insert(0) += 1;
    }
    (overall, reasons, counts)
}

/// When the machine itself measured slower than during the baseline runs (a co-tenant, a
/// lower clock), a timed change cannot be attributed to the build: turn every FAIL of a
/// timed metric into INCONCLUSIVE with `why` appended. Counts (peak allocation,
/// instructions) keep their verdicts. Returns how many rows changed; the overall verdict,
/// exit code, reasons and counts are recomputed.
pub fn downgrade_timed_failures(g: &mut GateResult, why: &str) -> usize {
    let mut n = 0;
    for r in g.rows.iter_mut() {
        let timed = r.metric.is_some_and(|m| !m.is_count());
        if timed && r.verdict == Verdict::Fail {
            r.verdict = Verdict::Inconclusive;
            r.reason = format!("{}; but {why}", r.reason);
            n += 1;
        }
    }
    if n > 0 {
        g.decisions = assign_decisions(&mut g.rows);
        let (overall, reasons, counts) = summarize(&g.rows, &g.waivers);
        g.overall = overall;
        g.exit_code = overall.exit_code();
        g.reasons = reasons;
        g.counts = counts;
    }
    n
}

fn short(fp: &str) -> &str {
    fp.get(..12).unwrap_or(fp)
}

/// The one value per record of a count metric (`None` for timed metrics, and for a record
/// that did not measure it).
fn count_value(r: &Record, metric: Metric) -> Option<f64> {
    match metric {
        Metric::PeakAlloc => r.peak_alloc_bytes.map(|b| b as f64),
        Metric::Instructions => r.instructions,
        Metric::EstimatedCycles => r.counts.as_ref().map(|c| c.estimated_cycles),
        _ => None,
    }
}

/// Records of one side grouped by run id, runs in time order (first record's timestamp).
fn runs_of<'a>(records: &[&'a Record]) -> Vec<Vec<&'a Record>> {
    let mut by: BTreeMap<&str, Vec<&'a Record>> = BTreeMap::new();
    for r in records {
        by.entry(r.run_id.as_str()).or_default().push(r);
    }
    let mut runs: Vec<Vec<&'a Record>> = by.into_values().collect();
    runs.sort_by_key(|r| r.iter().map(|x| x.timestamp_unix_s).min().unwrap_or(0));
    runs
}

/// What the clock and the harness overhead can resolve per iteration, ns: the largest
/// `(timer_resolution_ns + overhead_ns) / batch_iterations` over the records that state it.
fn clock_floor_ns(records: &[&Record]) -> Option<f64> {
    records
        .iter()
        .filter_map(|r| {
            let h = &r.harness;
            let res = h.timer_resolution_ns?;
            Some((res + h.overhead_ns.unwrap_or(0.0)) / h.batch_iterations.max(1) as f64)
        })
        .reduce(f64::max)
}

/// Geometric mean of positive values (NaN if any is not positive).
fn geometric_mean(v: &[f64]) -> f64 {
    if v.iter().any(|x| x.is_nan() || *x <= 0.0) {
        return f64::NAN;
    }
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// Build the row for one metric before the suite-level correction; the second value is
/// `(policy, beyond_allowed)` when the verdict still depends on significance.
fn metric_row(
    policy: &Policy,
    name: &str,
    fp: &str,
    b: &[&Record],
    c: &[&Record],
    metric: Metric,
) -> (MetricRow, Option<(MetricPolicy, bool)>) {
    let mut row = error_row(name, fp, Some(metric), metric.unit(), String::new());
    let mp = policy.metrics.get(&metric);
    row.role = mp.map(|m| m.role);
    // A count compares with the newest baseline run that has it: a count needs no
    // distribution of runs, and a change that was accepted becomes the baseline at once.
    let newest: Option<Vec<&Record>> = metric
        .is_count()
        .then(|| {
            runs_of(b)
                .into_iter()
                .rev()
                .find(|run| run.iter().all(|r| count_value(r, metric).is_some()))
        })
        .flatten();
    let b: &[&Record] = newest.as_deref().unwrap_or(b);
    let (bs, cs) = match (metric_samples(b, metric), metric_samples(c, metric)) {
        (Ok(x), Ok(y)) => (x, y),
        (eb, ec) => {
            let unmeasured =
                |recs: &[&Record]| recs.iter().all(|r| count_value(r, metric).is_none());
            let failed = c.iter().any(|r| r.count_error.is_some());
            if metric.is_count() && unmeasured(b) && unmeasured(c) && !failed {
                row.verdict = Verdict::NotComparable;
                row.reason = "not measured on either side".into();
                return (row, None);
            }
            if mp.is_none() {
                row.verdict = Verdict::NotComparable;
                row.reason = "no policy for this metric".into();
                return (row, None);
            }
            let side = if ec.is_err() { "candidate" } else { "baseline" };
            let why = ec.err().or(eb.err()).unwrap_or_default();
            row.reason = format!("missing or invalid on the {side} side: {why}");
            row.unavailable = metric.is_counted_cost();
            return (row, None);
        }
    };
    if metric.is_counted_cost() {
        let inst = |r: &Record| {
            r.counts
                .as_ref()
                .map(|c| (c.instance.clone(), c.cache_model.clone()))
        };
        let (bi, ci) = (
            b.first().and_then(|r| inst(r)),
            c.first().and_then(|r| inst(r)),
        );
        if let (Some(x), Some(y)) = (&bi, &ci) {
            if x != y {
                row.reason = format!(
                    "identity mismatch of the counted instance: `{}` ({}) in the baseline vs `{}` ({}) in the candidate; counts of different instances are not comparable (start a new baseline)",
                    x.0, x.1, y.0, y.1
                );
                return (row, None);
            }
        }
    }
    row.n_baseline = bs.len();
    row.n_candidate = cs.len();
    let (b_runs, c_runs) = (runs_of(b), runs_of(c));
    row.baseline_runs = b_runs.len();
    row.candidate_runs = c_runs.len();
    let statistic = mp
        .map(|m| m.statistic)
        .or(metric.implied_statistic())
        .unwrap_or(Statistic::P50);
    row.statistic = Some(statistic);
    let test = mp.map(|m| m.test).unwrap_or(TestKind::None);
    // Per-run statistics: the observations of the run-level test.
    let run_stats = |runs: &[Vec<&Record>]| -> Vec<f64> {
        runs.iter()
            .filter_map(|run| metric_samples(run, metric).ok())
            .map(|mut v| statistic.apply(&mut v))
            .collect()
    };
    let (b_stats, c_stats) = (run_stats(&b_runs), run_stats(&c_runs));
    let (bv, cv) = if test == TestKind::RunT {
        (geometric_mean(&b_stats), geometric_mean(&c_stats))
    } else {
        (
            statistic.apply(&mut bs.clone()),
            statistic.apply(&mut cs.clone()),
        )
    };
    row.baseline = Some(bv);
    row.candidate = Some(cv);
    if bv != 0.0 {
        row.change_relative = Some((cv - bv) / bv.abs());
    }
    let Some(mp) = mp else {
        row.verdict = Verdict::NotComparable;
        row.reason = "no policy for this metric".into();
        return (row, None);
    };
    let mp = mp.clone();
    let sign = mp.direction.sign();
    let worse = sign * (cv - bv);
    let floor = if metric.is_latency() {
        clock_floor_ns(&[b, c].concat())
    } else {
        None
    };
    row.clock_floor = floor;
    let allowed = (mp.max_relative * bv.abs())
        .max(mp.max_absolute)
        .max(floor.unwrap_or(0.0));
    row.worse_change = Some(worse);
    row.allowed = Some(allowed);
    if bv != 0.0 {
        row.allowed_relative = Some(allowed / bv.abs());
    }
    row.test = Some(mp.test);
    row.alpha = Some(mp.alpha);
    let beyond = worse > allowed;
    if mp.test != TestKind::None && (bs.len() < mp.min_samples || cs.len() < mp.min_samples) {
        row.verdict = Verdict::Inconclusive;
        row.reason = format!(
            "too few samples to test: {} baseline and {} candidate, min_samples = {}",
            bs.len(),
            cs.len(),
            mp.min_samples
        );
        return (row, None);
    }
    if policy.suite.bootstrap_resamples > 0 && statistic != Statistic::Value {
        let seed = derive_seed(policy.suite.seed, &format!("{fp}/{}", metric.name()));
        row.interval = stats::bootstrap_relative_change(
            &bs,
            &cs,
            |s: &mut [f64]| statistic.apply(s),
            policy.suite.bootstrap_resamples,
            policy.suite.confidence,
            seed,
            sign,
        );
    }
    match mp.test {
        TestKind::RunT => {
            let n = b_stats.len();
            if n < policy.history.min_runs {
                let rel = row.change_relative.map(pct).unwrap_or_else(|| "n/a".into());
                if beyond {
                    row.verdict = Verdict::Inconclusive;
                    row.reason = format!(
                        "change {rel} is beyond the allowed {} but there is too little history to test it: {n} baseline run(s), a FAIL needs at least history.min_runs = {} (samples of one run are not replicates); record more runs, or compare interleaved with `tensorforge compare`",
                        allowed_text(&row),
                        policy.history.min_runs
                    );
                } else {
                    row.verdict = Verdict::Pass;
                    row.reason = format!(
                        "change {rel} within the allowed {} ({n} baseline run(s): too few to test, none needed)",
                        allowed_text(&row)
                    );
                }
                return (row, None);
            }
            let logs: Vec<f64> = b_stats.iter().map(|x| x.ln()).collect();
            let m = logs.iter().sum::<f64>() / n as f64;
            let sd = (logs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
            let nc = c_stats.len().max(1) as f64;
            let se = sd * (1.0 / n as f64 + 1.0 / nc).sqrt();
            let df = (n - 1) as f64;
            let d = sign * (cv.ln() - m);
            let p = if se > 0.0 {
                stats::student_t_sf(d / se, df)
            } else if d > 0.0 {
                0.0
            } else {
                1.0
            };
            row.p_value = Some(if p.is_finite() { p } else { 1.0 });
            row.test_method = Some(format!("student_t, {n} baseline runs, df {}", n - 1));
            let tq = stats::student_t_quantile(1.0 - mp.alpha, df);
            if tq.is_finite() {
                row.significance_limit = Some((m + sign * tq * se).exp());
            }
        }
        TestKind::MannWhitney => {
            let r = match mp.direction {
                Direction::HigherIsWorse => stats::mann_whitney_greater(&cs, &bs),
                Direction::LowerIsWorse => stats::mann_whitney_greater(&bs, &cs),
            };
            row.p_value = Some(r.p_value);
            row.test_method = Some(match r.method {
                MwuMethod::Exact => "exact".into(),
                MwuMethod::Normal => "normal".into(),
            });
        }
        TestKind::Bootstrap => {
            row.p_value = Some(row.interval.as_ref().map_or(1.0, |i| i.p_worse));
            row.test_method = Some("percentile".into());
        }
        TestKind::None => {}
    }
    (row, Some((mp, beyond)))
}

/// The allowed change as the reasons print it: a percentage of the baseline, except for peak
/// allocation and wherever the allowance is ten times the baseline or more (the policy's
/// absolute floor binds: a 64 KiB floor on a 16 B baseline is not "409600.0 %"), which
/// print the allowance in the metric's unit, scaled (`64.00 KiB`), with its share of the
/// baseline.
fn allowed_text(row: &MetricRow) -> String {
    let allowed = row.allowed.unwrap_or(0.0);
    let absolute = crate::report::fmt_value(Some(allowed), &row.unit);
    let relative = row.allowed_relative.filter(|_| allowed > 0.0);
    let in_bytes = row.metric == Some(Metric::PeakAlloc);
    match relative {
        Some(rel) if rel >= 10.0 => format!("{absolute} ({rel:.0}× the baseline)"),
        Some(rel) if in_bytes => format!("{absolute} ({:.1} % of the baseline)", rel * 100.0),
        Some(rel) => format!("{:.1} %", rel * 100.0),
        None => absolute,
    }
}

fn decide(row: &mut MetricRow, mp: &MetricPolicy, beyond: bool) {
    let rel = row.change_relative.map(pct).unwrap_or_else(|| "n/a".into());
    let allowed = allowed_text(row);
    let dir = match mp.direction {
        Direction::HigherIsWorse => "increase",
        Direction::LowerIsWorse => "decrease",
    };
    let Some(p) = row.p_value else {
        // No significance test: the allowed change alone decides.
        if beyond {
            row.verdict = Verdict::Fail;
            row.reason = format!("change {rel} is a regression beyond the allowed {dir} of {allowed} (no test: deterministic metric)");
        } else {
            row.verdict = Verdict::Pass;
            row.reason = format!("change {rel} within the allowed {dir} of {allowed}");
        }
        return;
    };
    let p_eff = row.p_adjusted.unwrap_or(p);
    let which = if row.p_adjusted.is_some() {
        "BH-adjusted p"
    } else {
        "p"
    };
    let significant = p_eff <= mp.alpha;
    if !beyond {
        row.verdict = Verdict::Pass;
        row.reason = format!("change {rel} within the allowed {dir} of {allowed}");
    } else if significant && mp.test != TestKind::RunT {
        row.verdict = Verdict::Inconclusive;
        row.reason = format!(
            "change {rel} is beyond the allowed {dir} of {allowed}; the within-run {} test gives {which} = {p_eff:.2e}, which shows that two runs differ, not that the build regressed (a FAIL needs run-level evidence: test = \"run_t\" with history, or `tensorforge compare`)",
            mp.test.name()
        );
    } else if significant {
        row.verdict = Verdict::Fail;
        row.reason = format!(
            "change {rel} is beyond the allowed {dir} of {allowed} and beyond the spread of {} baseline run(s) ({which} = {p_eff:.2e} ≤ α = {})",
            row.baseline_runs, mp.alpha
        );
    } else {
        row.verdict = Verdict::Inconclusive;
        row.reason = format!(
            "change {rel} is beyond the allowed {dir} of {allowed} but not significant ({which} = {p_eff:.2e} > α = {})",
            mp.alpha
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorforge_record::{DeviceContext, HarnessSettings, SoftwareContext, WorkloadIdentity};

    pub(crate) fn rec(
        name: &str,
        m: u64,
        dtype: &str,
        samples: Vec<f64>,
        cpu: &str,
        peak: Option<u64>,
    ) -> Record {
        let mut params = BTreeMap::new();
        params.insert("m".into(), serde_json::json!(m));
        let w = WorkloadIdentity {
            kind: "gemm".into(),
            name: name.into(),
            params,
            dtype: dtype.into(),
        };
        let device = DeviceContext {
            kind: "cpu".into(),
            cpu_model: cpu.into(),
            machine_id: "mach".into(),
            ..Default::default()
        };
        Record::new(tensorforge_record::RecordParts {
            run_id: "run".into(),
            workload: w,
            device,
            software: SoftwareContext::default(),
            harness: HarnessSettings::default(),
            samples_ns: samples,
            flops: None,
            bytes: None,
            peak_alloc_bytes: peak,
            timestamp_unix_s: 0,
            labels: BTreeMap::new(),
            source: "harness".into(),
        })
        .unwrap()
    }

    fn day(s: &str) -> Date {
        Date::parse(s, "t", "t").unwrap()
    }

    #[test]
    fn row_metric_is_a_name_in_json_and_workload_rows_say_workload() {
        let mut r = error_row("w", "f", None, "", String::new());
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["metric"], "workload");
        r.metric = Some(Metric::LatencyP50);
        r.statistic = Some(Statistic::P50);
        r.test = Some(TestKind::RunT);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            (&v["metric"], &v["statistic"], &v["test"]),
            (
                &serde_json::json!("latency_p50"),
                &serde_json::json!("p50"),
                &serde_json::json!("run_t")
            )
        );
        let back: MetricRow = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back, r);
        let mut bad = v;
        bad["metric"] = serde_json::json!("latency_p42");
        let e = serde_json::from_value::<MetricRow>(bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("latency_p42"), "{e}");
    }

    fn row<'a>(g: &'a GateResult, metric: &str) -> &'a MetricRow {
        g.rows.iter().find(|r| r.metric_name() == metric).unwrap()
    }

    fn ramp(base: f64, n: usize) -> Vec<f64> {
        // Distinct values base·(1 + i/1000): a ±1.5 % spread.
        (0..n)
            .map(|i| base * (1.0 + (i as f64 - n as f64 / 2.0) / 1000.0))
            .collect()
    }

    /// Six baseline runs of `ramp(1000, 30)` scaled by 1.00, 1.02, 0.98, 1.01, 0.99, 1.00.
    fn history6() -> Vec<Record> {
        [1.00, 1.02, 0.98, 1.01, 0.99, 1.00]
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut r = rec("g", 8, "f32", ramp(1000.0 * f, 30), "cpu", Some(4096));
                r.run_id = format!("base-{i}");
                r.timestamp_unix_s = i as i64;
                r
            })
            .collect()
    }

    fn cand(scale: f64) -> Vec<Record> {
        let mut r = rec("g", 8, "f32", ramp(1000.0 * scale, 30), "cpu", Some(4096));
        r.run_id = "cand".into();
        r.timestamp_unix_s = 100;
        vec![r]
    }

    #[test]
    fn history_gate_hand_checked() {
        let p = Policy::default_embedded();
        let h = history6();
        // Run medians 999.5·f. scipy/numpy: l = ln(999.5·f), m = mean(l), sd = std(l, ddof=1),
        // se = sd·√(1/6 + 1/1); candidate 999.5·1.10: T = (ln c − m)/se = 6.2441,
        // t.sf(6.2441, 5) = 7.716e-4; geometric mean exp(m) = 999.4167; the α = 0.01 limit
        // exp(m + t.ppf(0.99, 5)·se) = 1052.137.
        let g = gate(&p, &h, &cand(1.10), day("2025-01-01"));
        let r = row(&g, "latency_p50");
        assert_eq!(r.baseline_runs, 6);
        assert_eq!(r.candidate_runs, 1);
        assert!((r.baseline.unwrap() - 999.4166976417097).abs() < 1e-9);
        assert!(
            (r.p_value.unwrap() - 7.716284046096673e-4).abs() < 1e-9,
            "{r:#?}"
        );
        assert!((r.significance_limit.unwrap() - 1052.137304040062).abs() < 1e-6);
        assert_eq!(r.test, Some(TestKind::RunT));
        // +10 % > 5 % allowed, and BH over p50 and throughput keeps it ≤ 0.01.
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert_eq!(g.overall, Verdict::Fail);
        assert_eq!(g.exit_code(), 1);
        // +3 %: within the 5 % allowance -> PASS (t.sf gives p = 0.055 anyway).
        let g = gate(&p, &h, &cand(1.03), day("2025-01-01"));
        assert_eq!(g.overall, Verdict::Pass, "{:#?}", g.reasons);
        // The same build: PASS.
        let g = gate(&p, &h, &cand(1.0), day("2025-01-01"));
        assert_eq!(g.overall, Verdict::Pass, "{:#?}", g.reasons);
        // A very noisy history (runs spread ±40 %) cannot show a +10 % change: INCONCLUSIVE.
        let noisy: Vec<Record> = [1.0, 1.4, 0.7, 1.3, 0.8, 1.1]
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut r = rec("g", 8, "f32", ramp(1000.0 * f, 30), "cpu", Some(4096));
                r.run_id = format!("n{i}");
                r
            })
            .collect();
        let g = gate(&p, &noisy, &cand(1.10), day("2025-01-01"));
        assert_eq!(row(&g, "latency_p50").verdict, Verdict::Inconclusive);
    }

    #[test]
    fn one_run_of_history_never_fails_a_timed_metric() {
        let p = Policy::default_embedded();
        let b = vec![rec("g", 8, "f32", ramp(1000.0, 30), "cpu", Some(4096))];
        let g = gate(&p, &b, &b, day("2025-01-01"));
        assert_eq!(g.overall, Verdict::Pass, "{:#?}", g.reasons);
        assert_eq!(row(&g, "latency_p95").verdict, Verdict::NotComparable);
        // 2x slower with thousands of separated samples is still one run against one run:
        // INCONCLUSIVE, with the reason.
        let c = vec![rec("g", 8, "f32", ramp(2000.0, 30), "cpu", Some(4096))];
        let g = gate(&p, &b, &c, day("2025-01-01"));
        assert_eq!(g.overall, Verdict::Inconclusive);
        assert_eq!(g.exit_code(), 3);
        let r = row(&g, "latency_p50");
        assert!(r.reason.contains("too little history"), "{}", r.reason);
        assert!(r.p_value.is_none());
        // ramp(1000, 30) median = 1000·(1 − 0.5/1000) = 999.5, ramp(2000) median 1999:
        // +100 %; allowed = 0.05 · 999.5 = 49.975 ns.
        assert!((r.change_relative.unwrap() - 1.0).abs() < 1e-9);
        assert!((r.allowed.unwrap() - 49.975).abs() < 1e-9);
        // A count still fails outright: peak allocation +50 % > 10 % and 64 KiB.
        let c = vec![rec(
            "g",
            8,
            "f32",
            ramp(1000.0, 30),
            "cpu",
            Some(4096 + 200_000),
        )];
        let g = gate(&p, &b, &c, day("2025-01-01"));
        assert_eq!(row(&g, "peak_alloc").verdict, Verdict::Fail);
    }

    #[test]
    fn clock_floor_widens_the_allowance_and_empty_is_not_gated() {
        let p = Policy::default_embedded();
        let mk = |name: &str, kind: &str, ns: f64, run: &str| {
            let mut r = rec(name, 8, "f32", ramp(ns, 30), "cpu", None);
            r.workload.kind = kind.into();
            r.fingerprint = r.workload.fingerprint();
            r.run_id = run.into();
            r.harness.timer_resolution_ns = Some(10.0);
            r.harness.overhead_ns = Some(20.0);
            r.harness.batch_iterations = 1;
            r
        };
        // A 25 ns call: 5 % is 1.25 ns, but the clock resolves (10 + 20)/1 = 30 ns.
        let h: Vec<Record> = (0..6)
            .map(|i| mk("tiny", "gemm", 25.0, &format!("b{i}")))
            .collect();
        let c = vec![mk("tiny", "gemm", 40.0, "c")];
        let g = gate(&p, &h, &c, day("2025-01-01"));
        let r = row(&g, "latency_p50");
        assert_eq!(r.clock_floor, Some(30.0));
        assert_eq!(r.allowed, Some(30.0));
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        // The empty call: one NOT_COMPARABLE row, whatever its change.
        let h: Vec<Record> = (0..6)
            .map(|i| mk("empty", "empty", 20.0, &format!("b{i}")))
            .collect();
        let c = vec![mk("empty", "empty", 30.0, "c")];
        let g = gate(&p, &h, &c, day("2025-01-01"));
        assert_eq!(g.rows.len(), 1);
        assert_eq!(g.rows[0].verdict, Verdict::NotComparable);
        assert!(
            g.rows[0].reason.contains("overhead probe"),
            "{}",
            g.rows[0].reason
        );
    }

    #[test]
    fn machine_drift_downgrades_timed_failures_only() {
        let p = Policy::default_embedded();
        let mut h = history6();
        for r in h.iter_mut() {
            r.peak_alloc_bytes = Some(4096);
        }
        let mut c = cand(2.0);
        c[0].peak_alloc_bytes = Some(4096 + 200_000);
        let mut g = gate(&p, &h, &c, day("2025-01-01"));
        assert_eq!(row(&g, "latency_p50").verdict, Verdict::Fail);
        assert_eq!(row(&g, "peak_alloc").verdict, Verdict::Fail);
        // latency_p50 and throughput change; the count keeps its FAIL.
        let n = downgrade_timed_failures(&mut g, "the machine measured 30 % slower");
        assert_eq!(n, 2);
        assert_eq!(row(&g, "latency_p50").verdict, Verdict::Inconclusive);
        assert!(row(&g, "latency_p50").reason.contains("30 % slower"));
        assert_eq!(row(&g, "peak_alloc").verdict, Verdict::Fail);
        assert_eq!(g.overall, Verdict::Fail);
        // Without the count's failure the overall becomes INCONCLUSIVE, exit 3.
        let mut g = gate(&p, &h, &cand(2.0), day("2025-01-01"));
        downgrade_timed_failures(&mut g, "drift");
        assert_eq!((g.overall, g.exit_code), (Verdict::Inconclusive, 3));
    }

    #[test]
    fn instructions_are_gated_as_a_count() {
        let p = Policy::default_embedded();
        let with = |n: f64| {
            let mut r = rec("g", 8, "f32", ramp(1000.0, 30), "cpu", None);
            r.instructions = Some(n);
            vec![r]
        };
        // 1 000 000 -> 1 005 000 (+0.5 %) is within 1 %; -> 1 020 000 (+2 %) fails.
        let g = gate(&p, &with(1e6), &with(1.005e6), day("2025-01-01"));
        assert_eq!(row(&g, "instructions").verdict, Verdict::Pass);
        let g = gate(&p, &with(1e6), &with(1.02e6), day("2025-01-01"));
        assert_eq!(row(&g, "instructions").verdict, Verdict::Fail);
        assert_eq!(g.overall, Verdict::Fail);
        // Counted on one side only: missing evidence.
        let plain = vec![rec("g", 8, "f32", ramp(1000.0, 30), "cpu", None)];
        let g = gate(&p, &plain, &with(1e6), day("2025-01-01"));
        assert_eq!(row(&g, "instructions").verdict, Verdict::Error);
        let g = gate(&p, &plain, &plain, day("2025-01-01"));
        assert_eq!(row(&g, "instructions").verdict, Verdict::NotComparable);
    }

    #[test]
    fn identity_mismatch_is_always_error() {
        let p = Policy::default_embedded();
        let b = vec![rec("g", 8, "f32", ramp(1000.0, 30), "cpu", None)];
        // Same name, other dtype: a different fingerprint -> identity mismatch, never FAIL/PASS,
        // even though the candidate is 2x slower or identical.
        for scale in [1000.0, 2000.0] {
            let c = vec![rec("g", 8, "f16", ramp(scale, 30), "cpu", None)];
            let g = gate(&p, &b, &c, day("2025-01-01"));
            assert_eq!(g.overall, Verdict::Error);
            assert_eq!(g.exit_code(), 2);
            assert_eq!(g.rows.len(), 1);
            assert!(
                g.rows[0].reason.contains("identity mismatch")
                    && g.rows[0].reason.contains("dtype `f32` vs `f16`"),
                "{}",
                g.rows[0].reason
            );
        }
        // Other device model under the default must_match rule.
        let c = vec![rec("g", 8, "f32", ramp(1000.0, 30), "other cpu", None)];
        let g = gate(&p, &b, &c, day("2025-01-01"));
        assert_eq!(g.overall, Verdict::Error);
        assert!(g.rows.iter().all(|r| r.verdict == Verdict::Error));
        // With device_model = "report" it is compared and listed instead.
        let mut q = p.clone();
        q.identity.device_model = IdentityRule::Report;
        let g = gate(&q, &b, &c, day("2025-01-01"));
        assert_eq!(g.overall, Verdict::Pass);
        assert_ne!(
            g.workloads[0].device_baseline,
            g.workloads[0].device_candidate
        );
        // A tampered fingerprint is an invalid record -> ERROR.
        let mut t = b[0].clone();
        t.fingerprint = "00".repeat(32);
        let g = gate(&p, &b, &[t], day("2025-01-01"));
        assert_eq!(g.overall, Verdict::Error);
        assert!(g
            .rows
            .iter()
            .any(|r| r.reason.contains("invalid candidate record")));
    }

    #[test]
    fn missing_evidence_is_never_pass() {
        let p = Policy::default_embedded();
        let b = vec![
            rec("g", 8, "f32", ramp(1000.0, 30), "cpu", None),
            rec("h", 9, "f32", ramp(1000.0, 30), "cpu", None),
        ];
        let g = gate(&p, &b, &b[..1], day("2025-01-01"));
        assert_eq!(g.overall, Verdict::Error);
        assert!(g
            .rows
            .iter()
            .any(|r| r.workload == "h" && r.reason.contains("missing in the candidate")));
        let g = gate(&p, &b[..1], &b, day("2025-01-01"));
        assert!(g
            .rows
            .iter()
            .any(|r| r.workload == "h" && r.reason.contains("missing in the baseline")));
        let g = gate(&p, &[], &[], day("2025-01-01"));
        assert_eq!(g.overall, Verdict::Error);
        // Peak allocation measured on one side only.
        let c = vec![rec("g", 8, "f32", ramp(1000.0, 30), "cpu", Some(10))];
        let g = gate(&p, &b[..1], &c, day("2025-01-01"));
        assert_eq!(row(&g, "peak_alloc").verdict, Verdict::Error);
        // Too few samples: INCONCLUSIVE, not PASS, even when nothing changed.
        let s = vec![rec("g", 8, "f32", ramp(1000.0, 4), "cpu", None)];
        let g = gate(&p, &s, &s, day("2025-01-01"));
        assert_eq!(g.overall, Verdict::Inconclusive);
        assert_eq!(g.exit_code(), 3);
    }

    #[test]
    fn beyond_allowed_but_not_significant_is_inconclusive() {
        // 10 vs 10 samples, candidate median +40 % but overlapping heavily: two baseline
        // values sit above most candidates, so the exact MWU p is not ≤ 0.01.
        let b: Vec<f64> = vec![
            100.0, 101.0, 102.0, 103.0, 104.0, 105.0, 300.0, 301.0, 302.0, 303.0,
        ];
        let c: Vec<f64> = vec![
            106.0, 107.0, 108.0, 109.0, 150.0, 151.0, 152.0, 153.0, 154.0, 155.0,
        ];
        // p50: base (104+105)/2 = 104.5, cand (150+151)/2 = 150.5 -> +44 % > 5 %.
        let mut p = Policy::default_embedded();
        if let Some(m) = p.metrics.get_mut(&Metric::LatencyP50) {
            m.test = TestKind::MannWhitney;
        }
        let g = gate(
            &p,
            &[rec("g", 8, "f32", b, "cpu", None)],
            &[rec("g", 8, "f32", c, "cpu", None)],
            day("2025-01-01"),
        );
        let r = row(&g, "latency_p50");
        assert!((r.change_relative.unwrap() - 46.0 / 104.5).abs() < 1e-12);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{r:#?}");
        assert!(r.reason.contains("not significant"), "{}", r.reason);
        assert_eq!(g.overall, Verdict::Inconclusive);
        // Complete separation under the within-run test: significant, yet INCONCLUSIVE at
        // worst, because samples of one run are not replicates.
        let g = gate(
            &p,
            &[rec("g", 8, "f32", ramp(1000.0, 30), "cpu", None)],
            &[rec("g", 8, "f32", ramp(2000.0, 30), "cpu", None)],
            day("2025-01-01"),
        );
        let r = row(&g, "latency_p50");
        assert!(r.p_value.unwrap() < 1e-15);
        assert_eq!(r.verdict, Verdict::Inconclusive);
        assert!(r.reason.contains("two runs differ"), "{}", r.reason);
    }

    #[test]
    fn waivers_apply_until_expiry_and_the_report_says_when_expired() {
        let text = format!(
            "{}\n[[waiver]]\nworkload = \"g\"\nmetric = \"*\"\nreason = \"known slowdown\"\nexpires = 2025-03-31\n",
            crate::policy::DEFAULT_POLICY_TOML
        );
        let p = Policy::from_toml_str(&text, "p.toml").unwrap();
        let (b, c) = (history6(), cand(2.0));
        let g = gate(&p, &b, &c, day("2025-03-31"));
        assert_eq!(g.overall, Verdict::Pass);
        assert_eq!(row(&g, "latency_p50").verdict, Verdict::Waived);
        assert_eq!(g.waivers[0].status, "applied");
        let g = gate(&p, &b, &c, day("2025-04-01"));
        assert_eq!(g.overall, Verdict::Fail);
        assert_eq!(g.waivers[0].status, "expired");
        assert!(row(&g, "latency_p50")
            .reason
            .contains("expired on 2025-03-31"));
        assert!(g
            .reasons
            .iter()
            .any(|r| r.contains("expired on 2025-03-31")));
    }

    #[test]
    fn bh_can_be_turned_off() {
        let mut p = Policy::default_embedded();
        let (b, c) = (history6(), cand(1.0));
        let g = gate(&p, &b, &c, day("2025-01-01"));
        assert_eq!(g.fdr_method, "benjamini_hochberg");
        assert_eq!(g.fdr_family_size, 2); // p50 and throughput
        assert!(row(&g, "latency_p50").p_adjusted.is_some());
        p.suite.benjamini_hochberg = false;
        let g = gate(&p, &b, &c, day("2025-01-01"));
        assert_eq!(g.fdr_method, "none");
        assert!(row(&g, "latency_p50").p_adjusted.is_none());
        let json = serde_json::to_value(&g).unwrap();
        assert_eq!(json["schema_version"], 3);
        assert_eq!(json["overall"], "PASS");
    }
    /// `records` with callgrind counts attached: `instr` instructions and `cycles`
    /// estimated cycles per iteration of instance `inst`.
    fn counted(mut records: Vec<Record>, instr: f64, cycles: f64, inst: &str) -> Vec<Record> {
        for r in records.iter_mut() {
            r.instructions = Some(instr);
            r.instructions_source = Some("callgrind".into());
            r.counts = Some(tensorforge_record::CountedEvents {
                counter: tensorforge_record::Counter::Callgrind,
                instance: inst.into(),
                work_divisor: 1,
                iterations: 1,
                instructions: instr,
                l1_misses: 0.0,
                ll_misses: (cycles - instr) / 35.0,
                estimated_cycles: cycles,
                cache_model: "test caches".into(),
            });
        }
        records
    }

    fn decision(g: &GateResult) -> &WorkloadDecision {
        g.decisions.iter().find(|d| d.workload == "g").unwrap()
    }

    #[test]
    fn counts_decide_and_time_is_context_beside_them() {
        // Time 40 % slower (a busy machine), counts unchanged: the counts decide, PASS.
        let p = Policy::default_embedded();
        let g = gate(
            &p,
            &counted(history6(), 1e6, 2e6, "i"),
            &counted(cand(1.4), 1e6, 2e6, "i"),
            day("2025-01-01"),
        );
        assert_eq!(row(&g, "latency_p50").verdict, Verdict::Fail);
        assert!(!row(&g, "latency_p50").decides);
        assert!(row(&g, "instructions").decides && row(&g, "estimated_cycles").decides);
        assert_eq!(g.overall, Verdict::Pass, "{:?}", g.reasons);
        assert_eq!(
            decision(&g).decided_by,
            vec!["peak_alloc", "instructions", "estimated_cycles"]
        );
        assert!(decision(&g).note.is_none());
    }

    #[test]
    fn a_counted_regression_fails_with_one_run_of_history() {
        // 1.10e6 vs 1.00e6 instructions: +10 % > 1 %; cycles 2.2e6 vs 2.0e6: +10 % > 2 %.
        // One baseline run is enough for a count (a timed metric would need 5).
        let p = Policy::default_embedded();
        let one: Vec<Record> = history6().into_iter().take(1).collect();
        let g = gate(
            &p,
            &counted(one, 1e6, 2e6, "i"),
            &counted(cand(1.0), 1.1e6, 2.2e6, "i"),
            day("2025-01-01"),
        );
        assert_eq!(g.overall, Verdict::Fail);
        let r = row(&g, "instructions");
        assert_eq!(r.verdict, Verdict::Fail);
        assert!((r.change_relative.unwrap() - 0.10).abs() < 1e-12);
        assert_eq!(row(&g, "estimated_cycles").verdict, Verdict::Fail);
        // A memory-bound change: instructions +0.5 % (within 1 %), cycles +8 % (beyond 2 %).
        let one: Vec<Record> = history6().into_iter().take(1).collect();
        let g = gate(
            &p,
            &counted(one, 1e6, 2e6, "i"),
            &counted(cand(1.0), 1.005e6, 2.16e6, "i"),
            day("2025-01-01"),
        );
        assert_eq!(row(&g, "instructions").verdict, Verdict::Pass);
        assert_eq!(row(&g, "estimated_cycles").verdict, Verdict::Fail);
        assert_eq!(g.overall, Verdict::Fail);
    }

    #[test]
    fn counts_compare_with_the_newest_baseline_run() {
        // Runs 0-4 counted 1.0e6, run 5 (newest) 1.1e6 after an accepted change; the
        // candidate's 1.1e6 is +0 % against the newest run (the mean would say +8 %).
        let p = Policy::default_embedded();
        let mut b = counted(history6(), 1e6, 2e6, "i");
        b[5] = counted(vec![b[5].clone()], 1.1e6, 2.2e6, "i").remove(0);
        let g = gate(
            &p,
            &b,
            &counted(cand(1.0), 1.1e6, 2.2e6, "i"),
            day("2025-01-01"),
        );
        let r = row(&g, "instructions");
        assert_eq!(r.baseline, Some(1.1e6));
        assert_eq!(r.baseline_runs, 1);
        assert_eq!(r.verdict, Verdict::Pass);
    }

    #[test]
    fn a_failed_count_is_an_error_and_time_decides() {
        // The candidate's count failed (valgrind crashed): the count rows are ERROR, never
        // PASS, and do not decide; the timed rows decide (unchanged time: PASS), and the
        // reasons name the failure.
        let p = Policy::default_embedded();
        let mut c = cand(1.0);
        c[0].count_error = Some("counting `g`: valgrind exited with signal 11".into());
        let g = gate(
            &p,
            &counted(history6(), 1e6, 2e6, "i"),
            &c,
            day("2025-01-01"),
        );
        let r = row(&g, "instructions");
        assert_eq!(r.verdict, Verdict::Error);
        assert!(r.unavailable && !r.decides);
        assert!(r.reason.contains("signal 11"), "{}", r.reason);
        assert!(row(&g, "latency_p50").decides);
        assert_eq!(g.overall, Verdict::Pass, "{:?}", g.reasons);
        assert!(decision(&g).note.as_deref().unwrap().contains("signal 11"));
        assert!(g.reasons.iter().any(|x| x.contains("signal 11")));
        // A 20 % slower time then fails through the fallback.
        let mut c = cand(1.2);
        c[0].count_error = Some("valgrind timed out".into());
        let g = gate(
            &p,
            &counted(history6(), 1e6, 2e6, "i"),
            &c,
            day("2025-01-01"),
        );
        assert_eq!(g.overall, Verdict::Fail);
        assert!(decision(&g).decided_by.contains(&"latency_p50".to_string()));
    }

    #[test]
    fn without_counts_time_decides_and_says_so() {
        let p = Policy::default_embedded();
        let g = gate(&p, &history6(), &cand(1.0), day("2025-01-01"));
        assert_eq!(row(&g, "instructions").verdict, Verdict::NotComparable);
        assert!(row(&g, "latency_p50").decides);
        assert!(decision(&g)
            .note
            .as_deref()
            .unwrap()
            .contains("no counts on either side"));
        // Without any fallback metric in the policy, a failed count decides: ERROR.
        let mut p = Policy::default_embedded();
        p.metrics.remove(&Metric::LatencyP50);
        p.metrics.remove(&Metric::Throughput);
        let mut c = cand(1.0);
        c[0].count_error = Some("valgrind timed out".into());
        let g = gate(
            &p,
            &counted(history6(), 1e6, 2e6, "i"),
            &c,
            day("2025-01-01"),
        );
        assert_eq!(g.overall, Verdict::Error);
    }

    #[test]
    fn counts_of_different_instances_are_an_identity_error() {
        let p = Policy::default_embedded();
        let g = gate(
            &p,
            &counted(history6(), 1e6, 2e6, "gemm m=64"),
            &counted(cand(1.0), 1e6, 2e6, "gemm m=128"),
            day("2025-01-01"),
        );
        let r = row(&g, "instructions");
        assert_eq!(r.verdict, Verdict::Error);
        assert!(!r.unavailable && r.decides);
        assert!(r.reason.contains("m=64") && r.reason.contains("m=128"));
        assert_eq!(g.overall, Verdict::Error);
    }
}
