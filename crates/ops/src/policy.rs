//! The gate policy: which metrics are compared, in which direction a change is a regression,
//! how much regression is allowed (`allowed = max(max_relative · |baseline|, max_absolute)`),
//! which statistic and significance test decide, the identity rules, waivers with expiry
//! dates, and suite-level false-discovery control. Parsed from TOML with every value checked
//! (errors name the file, field and value). A default policy is embedded in the binary
//! (`examples/policy.toml`). The policy decides nothing by itself; [`mod@crate::gate`] applies it.

use crate::date::Date;
use crate::error::OpsError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the policy file format this build reads.
pub const POLICY_SCHEMA_VERSION: u32 = 1;

/// The embedded default policy (the text of `examples/policy.toml`).
pub const DEFAULT_POLICY_TOML: &str = include_str!("../data/policy.toml");

/// A gated metric of one workload.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Median latency (ns).
    LatencyP50,
    /// 90th-percentile latency (ns).
    LatencyP90,
    /// 95th-percentile latency (ns).
    LatencyP95,
    /// 99th-percentile latency (ns).
    LatencyP99,
    /// Mean latency (ns).
    LatencyMean,
    /// Throughput, iterations per second per sample (`1e9 / latency_ns`).
    Throughput,
    /// Peak bytes allocated during the timed region (one value per record).
    PeakAlloc,
    /// Instructions retired per iteration, counted by callgrind or hardware counters (one
    /// value per record): a count, not a time, and repeatable on a busy machine.
    Instructions,
    /// Estimated cycles per iteration from callgrind's cache simulator,
    /// `instructions + 5 · L1 misses + 35 · LL misses` (one value per record): a count that
    /// also moves when a change adds memory traffic.
    EstimatedCycles,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 9] = [
        Metric::LatencyP50,
        Metric::LatencyP90,
        Metric::LatencyP95,
        Metric::LatencyP99,
        Metric::LatencyMean,
        Metric::Throughput,
        Metric::PeakAlloc,
        Metric::Instructions,
        Metric::EstimatedCycles,
    ];

    /// Snake-case name, as in the policy file.
    pub fn name(self) -> &'static str {
        match self {
            Metric::LatencyP50 => "latency_p50",
            Metric::LatencyP90 => "latency_p90",
            Metric::LatencyP95 => "latency_p95",
            Metric::LatencyP99 => "latency_p99",
            Metric::LatencyMean => "latency_mean",
            Metric::Throughput => "throughput",
            Metric::PeakAlloc => "peak_alloc",
            Metric::Instructions => "instructions",
            Metric::EstimatedCycles => "estimated_cycles",
        }
    }

    /// Parse a snake-case name.
    pub fn parse(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == s.trim())
    }

    /// Unit of the metric's values.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Throughput => "iter/s",
            Metric::PeakAlloc => "bytes",
            Metric::Instructions => "instructions",
            Metric::EstimatedCycles => "cycles",
            _ => "ns",
        }
    }

    /// The statistic the name implies (`None` for throughput, which may use any).
    pub fn implied_statistic(self) -> Option<Statistic> {
        match self {
            Metric::LatencyP50 => Some(Statistic::P50),
            Metric::LatencyP90 => Some(Statistic::P90),
            Metric::LatencyP95 => Some(Statistic::P95),
            Metric::LatencyP99 => Some(Statistic::P99),
            Metric::LatencyMean => Some(Statistic::Mean),
            Metric::Throughput => None,
            Metric::PeakAlloc | Metric::Instructions | Metric::EstimatedCycles => {
                Some(Statistic::Value)
            }
        }
    }

    /// Whether the metric is one deterministic value per record (a count, not a time): it
    /// is gated without a significance test.
    pub fn is_count(self) -> bool {
        matches!(
            self,
            Metric::PeakAlloc | Metric::Instructions | Metric::EstimatedCycles
        )
    }

    /// Whether the metric counts the work of a call (instructions, estimated cycles): the
    /// metrics whose presence decides whether a `fallback` metric decides (see
    /// [`MetricRole::Fallback`]).
    pub fn is_counted_cost(self) -> bool {
        matches!(self, Metric::Instructions | Metric::EstimatedCycles)
    }

    /// Whether the metric's values are nanoseconds per iteration (the clock's resolution
    /// bounds what a change in them can show).
    pub fn is_latency(self) -> bool {
        matches!(
            self,
            Metric::LatencyP50
                | Metric::LatencyP90
                | Metric::LatencyP95
                | Metric::LatencyP99
                | Metric::LatencyMean
        )
    }

    /// Direction used when the policy does not state one.
    pub fn default_direction(self) -> Direction {
        match self {
            Metric::Throughput => Direction::LowerIsWorse,
            _ => Direction::HigherIsWorse,
        }
    }
}

/// Which way a change is a regression.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// An increase is a regression (latency, memory).
    HigherIsWorse,
    /// A decrease is a regression (throughput).
    LowerIsWorse,
}

impl Direction {
    /// +1 for higher-is-worse, −1 for lower-is-worse: `worse change = sign · (cand − base)`.
    pub fn sign(self) -> f64 {
        match self {
            Direction::HigherIsWorse => 1.0,
            Direction::LowerIsWorse => -1.0,
        }
    }
}

/// The statistic of the samples that a metric compares.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    /// Median (type-7 percentile).
    P50,
    /// 90th percentile.
    P90,
    /// 95th percentile.
    P95,
    /// 99th percentile.
    P99,
    /// Arithmetic mean.
    Mean,
    /// The single value of a per-record quantity (peak allocation, instructions).
    Value,
}

impl Statistic {
    /// Snake-case name.
    pub fn name(self) -> &'static str {
        match self {
            Statistic::P50 => "p50",
            Statistic::P90 => "p90",
            Statistic::P95 => "p95",
            Statistic::P99 => "p99",
            Statistic::Mean => "mean",
            Statistic::Value => "value",
        }
    }

    fn parse(s: &str) -> Option<Statistic> {
        [
            Statistic::P50,
            Statistic::P90,
            Statistic::P95,
            Statistic::P99,
            Statistic::Mean,
            Statistic::Value,
        ]
        .into_iter()
        .find(|x| x.name() == s.trim())
    }

    /// The statistic of `samples` (sorted in place; type-7 percentiles; mean; for `Value`
    /// the mean, i.e. the value itself when there is one). `NaN` when empty.
    pub fn apply(self, samples: &mut [f64]) -> f64 {
        if samples.is_empty() {
            return f64::NAN;
        }
        let q = match self {
            Statistic::P50 => 0.5,
            Statistic::P90 => 0.9,
            Statistic::P95 => 0.95,
            Statistic::P99 => 0.99,
            Statistic::Mean | Statistic::Value => {
                return samples.iter().sum::<f64>() / samples.len() as f64
            }
        };
        samples.sort_by(f64::total_cmp);
        tensorforge_record::stats::percentile_sorted(samples, q)
    }
}

/// The significance test of a metric.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TestKind {
    /// Between runs (the default for timed metrics): each run is one observation, its
    /// statistic; the candidate run(s) are tested against the distribution of the last
    /// baseline runs with a one-sided Student t on the log scale (see [`mod@crate::gate`]).
    /// Needs `history.min_runs` baseline runs to FAIL anything.
    RunT,
    /// One-sided Mann–Whitney U on the pooled samples in the regression direction. Samples
    /// of one run are not independent replicates, so this test can only show that two runs
    /// differ: its rows are INCONCLUSIVE at worst, never FAIL.
    MannWhitney,
    /// One-sided seeded bootstrap of the relative change in the statistic, on pooled
    /// samples: like `mann_whitney`, INCONCLUSIVE at worst.
    Bootstrap,
    /// No test: a change beyond the allowed one fails outright (deterministic quantities).
    None,
}

impl TestKind {
    /// Snake-case name.
    pub fn name(self) -> &'static str {
        match self {
            TestKind::RunT => "run_t",
            TestKind::MannWhitney => "mann_whitney",
            TestKind::Bootstrap => "bootstrap",
            TestKind::None => "none",
        }
    }
}

/// Whether a metric's verdict enters a workload's decision.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MetricRole {
    /// The verdict decides (the default).
    Decide,
    /// The verdict decides a workload only when none of its counted-cost metrics
    /// (instructions, estimated cycles) with role `decide` could be compared — e.g. valgrind
    /// is missing, or the count failed; otherwise it is reported beside them. The embedded
    /// policy gives time this role: on a shared machine counts decide, time is context.
    Fallback,
    /// Reported, never decides.
    Context,
}

impl MetricRole {
    /// Snake-case name.
    pub fn name(self) -> &'static str {
        match self {
            MetricRole::Decide => "decide",
            MetricRole::Fallback => "fallback",
            MetricRole::Context => "context",
        }
    }
}

/// How one metric is gated.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MetricPolicy {
    /// Whether its verdict decides.
    pub role: MetricRole,
    /// Which way is a regression.
    pub direction: Direction,
    /// Allowed regression as a fraction of the baseline statistic (0.25 = 25 %).
    pub max_relative: f64,
    /// Allowed regression in the metric's unit; `allowed = max(rel · |base|, abs)`.
    pub max_absolute: f64,
    /// Statistic compared.
    pub statistic: Statistic,
    /// Significance test.
    pub test: TestKind,
    /// Significance level (compared with the BH-adjusted p-value when BH is on).
    pub alpha: f64,
    /// Minimum samples per side to test; fewer gives INCONCLUSIVE.
    pub min_samples: usize,
}

/// What an identity difference does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum IdentityRule {
    /// A difference is an ERROR for the workload.
    MustMatch,
    /// A difference is listed in the report and does not change the verdict.
    Report,
    /// A difference is neither an error nor listed.
    Ignore,
}

/// Identity rules beyond the fingerprint and dtype (which must always match).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct IdentityRules {
    /// Device model (`gpu.name` for GPU records, else `cpu_model`) and device kind.
    pub device_model: IdentityRule,
    /// Software context (version, commit, rustc, crates, frameworks).
    pub software: IdentityRule,
}

/// Suite-level settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SuiteSettings {
    /// Benjamini–Hochberg over every p-value computed in one gate run.
    pub benjamini_hochberg: bool,
    /// Bootstrap resamples for the interval (0 = no interval; a `bootstrap` test needs > 0).
    pub bootstrap_resamples: u32,
    /// Two-sided coverage of the bootstrap interval.
    pub confidence: f64,
    /// Seed of the bootstrap streams.
    pub seed: u64,
}

/// How the gate uses stored history (the baseline side as a distribution of runs).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct HistorySettings {
    /// Fewest baseline runs for a `run_t` metric to FAIL; with fewer, a change beyond the
    /// allowed one is INCONCLUSIVE ("too little history").
    pub min_runs: usize,
    /// Most recent comparable runs used as the baseline when the caller selects history
    /// from a store (quickstart, `gate --history`).
    pub lookback: usize,
}

/// How `tensorforge compare` runs its interleaved rounds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CompareSettings {
    /// Rounds before the first decision.
    pub rounds: usize,
    /// Most rounds in all: INCONCLUSIVE workloads get more rounds until this budget.
    pub max_rounds: usize,
    /// Order of the sides within rounds.
    pub order: RoundOrder,
}

/// Order of the two sides within interleaved rounds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RoundOrder {
    /// A B B A or its mirror B A A B, a seeded coin per round: drift that is linear over a
    /// round cancels, a co-tenant that returns once a round cannot keep hitting one side,
    /// and each side runs twice, so the same-side pairs measure the noise floor.
    Abba,
    /// A B or B A per round, chosen by the seeded generator.
    Random,
}

impl RoundOrder {
    /// Snake-case name.
    pub fn name(self) -> &'static str {
        match self {
            RoundOrder::Abba => "abba",
            RoundOrder::Random => "random",
        }
    }
}

/// A waiver: accept a regression of one workload's metric until a date.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Waiver {
    /// Workload name or fingerprint.
    pub workload: String,
    /// Metric name, or `*` for every metric of the workload.
    pub metric: String,
    /// Why it is accepted.
    pub reason: String,
    /// Last day the waiver applies.
    pub expires: Date,
}

impl Waiver {
    /// Whether the waiver names this workload and metric.
    pub fn matches(&self, name: &str, fingerprint: &str, metric: Metric) -> bool {
        (self.workload == name || self.workload == fingerprint)
            && (self.metric == "*" || self.metric == metric.name())
    }
}

/// A complete gate policy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Policy {
    /// Always [`POLICY_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Where the policy came from (file name, or `embedded default`).
    pub source: String,
    /// Suite-level settings.
    pub suite: SuiteSettings,
    /// Identity rules.
    pub identity: IdentityRules,
    /// History rules (run-level tests).
    pub history: HistorySettings,
    /// Interleaved comparison settings.
    pub compare: CompareSettings,
    /// Gated metrics; a metric absent here is NOT_COMPARABLE.
    pub metrics: BTreeMap<Metric, MetricPolicy>,
    /// Waivers.
    pub waivers: Vec<Waiver>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    schema_version: u32,
    #[serde(default)]
    suite: RawSuite,
    #[serde(default)]
    identity: RawIdentity,
    #[serde(default)]
    history: RawHistory,
    #[serde(default)]
    compare: RawCompare,
    #[serde(default)]
    metrics: BTreeMap<String, RawMetric>,
    #[serde(default)]
    waiver: Vec<RawWaiver>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSuite {
    benjamini_hochberg: Option<bool>,
    bootstrap_resamples: Option<u32>,
    confidence: Option<f64>,
    seed: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHistory {
    min_runs: Option<usize>,
    lookback: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCompare {
    rounds: Option<usize>,
    max_rounds: Option<usize>,
    order: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    device_model: Option<String>,
    software: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetric {
    role: Option<String>,
    direction: Option<String>,
    max_relative: Option<f64>,
    max_absolute: Option<f64>,
    statistic: Option<String>,
    test: Option<String>,
    alpha: Option<f64>,
    min_samples: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWaiver {
    workload: String,
    metric: String,
    reason: String,
    expires: toml::Value,
}

impl Policy {
    /// The embedded default policy (`examples/policy.toml`), tuned for a noisy shared
    /// 2-core machine: generous relative thresholds plus significance.
    pub fn default_embedded() -> Policy {
        // The embedded text is checked by a unit test; a parse failure here is a build bug.
        Policy::from_toml_str(DEFAULT_POLICY_TOML, "embedded default policy")
            .unwrap_or_else(|e| unreachable!("embedded policy is invalid: {e}"))
    }

    /// Parse and check a policy; `source_name` names the file in errors.
    pub fn from_toml_str(text: &str, source_name: &str) -> Result<Policy, OpsError> {
        let raw: RawPolicy = toml::from_str(text).map_err(|e| OpsError::Parse {
            source_name: source_name.to_string(),
            message: e.to_string().replace('\n', " "),
        })?;
        let bad = |field: &str, value: &dyn ToString, why: &str| {
            OpsError::invalid(source_name, field, value.to_string(), why)
        };
        if raw.schema_version != POLICY_SCHEMA_VERSION {
            return Err(bad(
                "schema_version",
                &raw.schema_version,
                &format!("this build reads schema_version {POLICY_SCHEMA_VERSION}"),
            ));
        }
        let confidence = raw.suite.confidence.unwrap_or(0.95);
        if !(confidence > 0.0 && confidence < 1.0) {
            return Err(bad("suite.confidence", &confidence, "must be in (0, 1)"));
        }
        let suite = SuiteSettings {
            benjamini_hochberg: raw.suite.benjamini_hochberg.unwrap_or(true),
            bootstrap_resamples: raw.suite.bootstrap_resamples.unwrap_or(2000),
            confidence,
            seed: raw.suite.seed.unwrap_or(0x7E50_4F06),
        };
        if suite.bootstrap_resamples > 1_000_000 {
            return Err(bad(
                "suite.bootstrap_resamples",
                &suite.bootstrap_resamples,
                "must be at most 1000000",
            ));
        }
        let rule = |field: &str, v: &Option<String>, default: IdentityRule| match v.as_deref() {
            None => Ok(default),
            Some("must_match") => Ok(IdentityRule::MustMatch),
            Some("report") => Ok(IdentityRule::Report),
            Some("ignore") => Ok(IdentityRule::Ignore),
            Some(other) => Err(bad(field, &other, "expected must_match, report or ignore")),
        };
        let identity = IdentityRules {
            device_model: rule(
                "identity.device_model",
                &raw.identity.device_model,
                IdentityRule::MustMatch,
            )?,
            software: rule(
                "identity.software",
                &raw.identity.software,
                IdentityRule::Report,
            )?,
        };
        let history = HistorySettings {
            min_runs: raw.history.min_runs.unwrap_or(5),
            lookback: raw.history.lookback.unwrap_or(20),
        };
        if history.min_runs < 2 {
            return Err(bad(
                "history.min_runs",
                &history.min_runs,
                "must be at least 2 (a spread needs two runs)",
            ));
        }
        if history.lookback < history.min_runs || history.lookback > 10_000 {
            return Err(bad(
                "history.lookback",
                &history.lookback,
                &format!(
                    "must be between history.min_runs = {} and 10000",
                    history.min_runs
                ),
            ));
        }
        let compare = CompareSettings {
            rounds: raw.compare.rounds.unwrap_or(10),
            max_rounds: raw.compare.max_rounds.unwrap_or(30),
            order: match raw.compare.order.as_deref() {
                None | Some("abba") => RoundOrder::Abba,
                Some("random") => RoundOrder::Random,
                Some(o) => return Err(bad("compare.order", &o, "expected abba or random")),
            },
        };
        if !(3..=1000).contains(&compare.rounds) {
            return Err(bad(
                "compare.rounds",
                &compare.rounds,
                "must be between 3 and 1000",
            ));
        }
        if compare.max_rounds < compare.rounds || compare.max_rounds > 10_000 {
            return Err(bad(
                "compare.max_rounds",
                &compare.max_rounds,
                &format!(
                    "must be between compare.rounds = {} and 10000",
                    compare.rounds
                ),
            ));
        }
        let mut metrics = BTreeMap::new();
        for (key, rm) in &raw.metrics {
            let metric = Metric::parse(key).ok_or_else(|| {
                bad(
                    "metrics",
                    key,
                    &format!(
                        "unknown metric; valid: {}",
                        Metric::ALL.map(|m| m.name()).join(", ")
                    ),
                )
            })?;
            let f = |name: &str| format!("metrics.{key}.{name}");
            let direction = match rm.direction.as_deref() {
                None => metric.default_direction(),
                Some("higher_is_worse") => Direction::HigherIsWorse,
                Some("lower_is_worse") => Direction::LowerIsWorse,
                Some(o) => {
                    return Err(bad(
                        &f("direction"),
                        &o,
                        "expected higher_is_worse or lower_is_worse",
                    ))
                }
            };
            let max_relative = rm
                .max_relative
                .ok_or_else(|| bad(&f("max_relative"), &"(missing)", "required"))?;
            if !max_relative.is_finite() || max_relative < 0.0 {
                return Err(bad(
                    &f("max_relative"),
                    &max_relative,
                    "must be finite and ≥ 0",
                ));
            }
            let max_absolute = rm.max_absolute.unwrap_or(0.0);
            if !max_absolute.is_finite() || max_absolute < 0.0 {
                return Err(bad(
                    &f("max_absolute"),
                    &max_absolute,
                    "must be finite and ≥ 0",
                ));
            }
            let statistic =
                match (rm.statistic.as_deref(), metric.implied_statistic()) {
                    (None, Some(s)) => s,
                    (None, None) => Statistic::P50,
                    (Some(s), implied) => {
                        let st = Statistic::parse(s).ok_or_else(|| {
                            bad(
                                &f("statistic"),
                                &s,
                                "expected p50, p90, p95, p99, mean or value",
                            )
                        })?;
                        match implied {
                            Some(i) if i != st => {
                                return Err(bad(
                                    &f("statistic"),
                                    &s,
                                    &format!("`{key}` always compares `{}`", i.name()),
                                ))
                            }
                            None if st == Statistic::Value => return Err(bad(
                                &f("statistic"),
                                &s,
                                "`value` is only for peak_alloc, instructions and estimated_cycles",
                            )),
                            _ => st,
                        }
                    }
                };
            let default_test = if metric.is_count() {
                TestKind::None
            } else {
                TestKind::RunT
            };
            let test = match rm.test.as_deref() {
                None => default_test,
                Some("run_t") => TestKind::RunT,
                Some("mann_whitney") => TestKind::MannWhitney,
                Some("bootstrap") => TestKind::Bootstrap,
                Some("none") => TestKind::None,
                Some(o) => {
                    return Err(bad(
                        &f("test"),
                        &o,
                        "expected run_t, mann_whitney, bootstrap or none",
                    ))
                }
            };
            if metric.is_count() && test != TestKind::None {
                return Err(bad(
                    &f("test"),
                    &test.name(),
                    &format!("{key} has one value per record; its test must be `none`"),
                ));
            }
            if test == TestKind::Bootstrap && suite.bootstrap_resamples == 0 {
                return Err(bad(
                    &f("test"),
                    &"bootstrap",
                    "needs suite.bootstrap_resamples > 0",
                ));
            }
            let alpha = rm.alpha.unwrap_or(0.01);
            if !(alpha > 0.0 && alpha < 1.0) {
                return Err(bad(&f("alpha"), &alpha, "must be in (0, 1)"));
            }
            let min_samples = rm.min_samples.unwrap_or(match statistic {
                Statistic::P95 => 20,
                Statistic::P99 => 100,
                Statistic::Value => 1,
                _ => 5,
            });
            if min_samples == 0 {
                return Err(bad(&f("min_samples"), &0, "must be at least 1"));
            }
            let role = match rm.role.as_deref() {
                None | Some("decide") => MetricRole::Decide,
                Some("fallback") => MetricRole::Fallback,
                Some("context") => MetricRole::Context,
                Some(o) => return Err(bad(&f("role"), &o, "expected decide, fallback or context")),
            };
            metrics.insert(
                metric,
                MetricPolicy {
                    role,
                    direction,
                    max_relative,
                    max_absolute,
                    statistic,
                    test,
                    alpha,
                    min_samples,
                },
            );
        }
        let mut waivers = Vec::new();
        for (i, w) in raw.waiver.iter().enumerate() {
            let f = |name: &str| format!("waiver[{i}].{name}");
            if w.metric != "*" && Metric::parse(&w.metric).is_none() {
                return Err(bad(&f("metric"), &w.metric, "unknown metric (or `*`)"));
            }
            if w.workload.trim().is_empty() {
                return Err(bad(
                    &f("workload"),
                    &"",
                    "must name a workload or fingerprint",
                ));
            }
            if w.reason.trim().is_empty() {
                return Err(bad(&f("reason"), &"", "a waiver needs a reason"));
            }
            let text = match &w.expires {
                toml::Value::String(s) => s.clone(),
                toml::Value::Datetime(d) => d.to_string(),
                other => other.to_string(),
            };
            let expires = Date::parse(&text, source_name, &f("expires"))?;
            waivers.push(Waiver {
                workload: w.workload.clone(),
                metric: w.metric.clone(),
                reason: w.reason.clone(),
                expires,
            });
        }
        Ok(Policy {
            schema_version: POLICY_SCHEMA_VERSION,
            source: source_name.to_string(),
            suite,
            identity,
            history,
            compare,
            metrics,
            waivers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_parses_with_generous_thresholds() {
        let p = Policy::from_toml_str(DEFAULT_POLICY_TOML, "examples/policy.toml").unwrap();
        let p50 = &p.metrics[&Metric::LatencyP50];
        assert_eq!(p50.direction, Direction::HigherIsWorse);
        // Between-run testing carries the noise; the allowance is the smallest change
        // worth a FAIL.
        assert!(p50.max_relative > 0.0 && p50.max_relative < 0.1);
        assert_eq!(p50.test, TestKind::RunT);
        assert_eq!(p.history.min_runs, 5);
        assert_eq!(p.compare.order, RoundOrder::Abba);
        let ins = &p.metrics[&Metric::Instructions];
        assert_eq!(ins.test, TestKind::None);
        assert!(p.suite.benjamini_hochberg);
        assert_eq!(p.identity.device_model, IdentityRule::MustMatch);
        assert_eq!(p.identity.software, IdentityRule::Report);
        assert_eq!(
            p.metrics[&Metric::Throughput].direction,
            Direction::LowerIsWorse
        );
        assert_eq!(
            Policy::default_embedded(),
            p.clone().with_source("embedded default policy")
        );
    }

    impl Policy {
        fn with_source(mut self, s: &str) -> Policy {
            self.source = s.into();
            self
        }
    }

    fn err(text: &str) -> String {
        Policy::from_toml_str(text, "p.toml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn bad_values_name_file_field_and_value() {
        let base = "schema_version = 1\n";
        let e = err(&format!(
            "{base}[metrics.latency_p50]\nmax_relative = -0.1\n"
        ));
        assert!(
            e.contains("p.toml")
                && e.contains("metrics.latency_p50.max_relative")
                && e.contains("-0.1"),
            "{e}"
        );
        let e = err(&format!(
            "{base}[metrics.latency_p77]\nmax_relative = 0.1\n"
        ));
        assert!(e.contains("latency_p77"), "{e}");
        let e = err(&format!(
            "{base}[metrics.latency_p50]\nmax_relative = 0.1\nalpha = 1.5\n"
        ));
        assert!(e.contains("alpha") && e.contains("1.5"), "{e}");
        let e = err(&format!(
            "{base}[metrics.latency_p50]\nmax_relative = 0.1\nstatistic = \"p90\"\n"
        ));
        assert!(e.contains("statistic") && e.contains("p90"), "{e}");
        let e = err(&format!(
            "{base}[metrics.peak_alloc]\nmax_relative = 0.1\ntest = \"mann_whitney\"\n"
        ));
        assert!(e.contains("metrics.peak_alloc.test"), "{e}");
        let e = err(&format!("{base}[identity]\ndevice_model = \"maybe\"\n"));
        assert!(
            e.contains("identity.device_model") && e.contains("maybe"),
            "{e}"
        );
        let e = err(&format!(
            "{base}[[waiver]]\nworkload = \"g\"\nmetric = \"latency_p50\"\nreason = \"r\"\nexpires = \"2024-02-30\"\n"
        ));
        assert!(
            e.contains("waiver[0].expires") && e.contains("2024-02-30"),
            "{e}"
        );
        let e = err(&format!("{base}[history]\nmin_runs = 1\n"));
        assert!(e.contains("history.min_runs") && e.contains('1'), "{e}");
        let e = err(&format!("{base}[compare]\norder = \"zigzag\"\n"));
        assert!(e.contains("compare.order") && e.contains("zigzag"), "{e}");
        let e = err(&format!("{base}[compare]\nrounds = 20\nmax_rounds = 10\n"));
        assert!(e.contains("compare.max_rounds") && e.contains("10"), "{e}");
        let e = err(&format!(
            "{base}[metrics.instructions]\nmax_relative = 0.01\ntest = \"run_t\"\n"
        ));
        assert!(e.contains("metrics.instructions.test"), "{e}");
        let e = err("schema_version = 2\n");
        assert!(e.contains("schema_version") && e.contains('2'), "{e}");
        let e = err("schema_version = 1\nbogus = 3\n");
        assert!(e.contains("p.toml") && e.contains("bogus"), "{e}");
    }

    #[test]
    fn waiver_accepts_toml_date_and_string() {
        let p = Policy::from_toml_str(
            "schema_version = 1\n[[waiver]]\nworkload = \"g\"\nmetric = \"*\"\nreason = \"known\"\nexpires = 2030-01-31\n\
             [[waiver]]\nworkload = \"g\"\nmetric = \"latency_p90\"\nreason = \"known\"\nexpires = \"2030-02-01\"\n",
            "p.toml",
        )
        .unwrap();
        assert_eq!(p.waivers[0].expires.to_string(), "2030-01-31");
        assert_eq!(p.waivers[1].expires.to_string(), "2030-02-01");
        assert!(p.waivers[0].matches("g", "ff", Metric::PeakAlloc));
        assert!(!p.waivers[1].matches("g", "ff", Metric::PeakAlloc));
        assert!(p.waivers[1].matches("x", "g", Metric::LatencyP90));
    }

    #[test]
    fn statistic_apply_hand_checked() {
        // [4,1,3,2]: sorted 1,2,3,4; p50 h = 3·0.5 = 1.5 -> 2.5; p90 h = 2.7 -> 3.7; mean 2.5.
        assert_eq!(Statistic::P50.apply(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!((Statistic::P90.apply(&mut [4.0, 1.0, 3.0, 2.0]) - 3.7).abs() < 1e-12);
        assert_eq!(Statistic::Mean.apply(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(Statistic::P50.apply(&mut []).is_nan());
    }
}
