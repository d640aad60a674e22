//! Measurement and policy from Python: `bench` (the CPU harness on workload specs), `Store`
//! (the SQLite file or PostgreSQL server the CLI uses, records in and out as the record
//! format's JSON), `gate` against given records or against the store's history (the CLI's
//! decision and exit code), the Markdown/HTML impact report, and the ingestion of a
//! pytest-benchmark result that the pytest plugin records. Records cross the boundary as
//! JSON text; the Python package turns them into dicts. Left out: callgrind counts (they
//! need the `tensorforge` binary: `tensorforge bench --record` takes them).

use crate::{guard, os_err, to_json, value_err};
use pyo3::prelude::*;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tensorforge_measure::context::{device_context, software_context};
use tensorforge_measure::harness::{run_suite, HarnessOptions};
use tensorforge_measure::workload::parse_workload;
use tensorforge_ops::{gate, render_html, render_markdown, Date, Policy, Report};
use tensorforge_store::{
    default_store_path, ingest_record, new_run_id, IngestContext, IngestFormat, Record, Store,
    WorkloadIdentity,
};

fn records_of(json: &str, what: &str) -> PyResult<Vec<Record>> {
    serde_json::from_str(json)
        .map_err(|e| value_err(format!("{what}: not a list of TensorForge records: {e}")))
}

/// The baseline and candidate records, the policy and the day a gate judges them by.
fn gate_inputs(
    baseline_json: &str,
    candidate_json: &str,
    policy: Option<&str>,
    today: Option<&str>,
) -> PyResult<(Vec<Record>, Vec<Record>, Policy, Date)> {
    Ok((
        records_of(baseline_json, "baseline")?,
        records_of(candidate_json, "candidate")?,
        policy_of(policy)?,
        today_of(today)?,
    ))
}

fn store_path(location: Option<&str>) -> PathBuf {
    location
        .map(PathBuf::from)
        .unwrap_or_else(default_store_path)
}

/// The record store: an SQLite file or a `postgres://` URL (the CLI's `--store`); the
/// default is the CLI's default store.
#[pyclass(name = "Store", module = "tensorforge", frozen)]
struct PyStore {
    /// Opened for each call: a store connection is not shareable across Python threads.
    location: PathBuf,
    described: String,
}

impl PyStore {
    fn open(&self) -> PyResult<Store> {
        Store::open(&self.location).map_err(os_err)
    }
}

#[pymethods]
impl PyStore {
    #[new]
    #[pyo3(signature = (location = None))]
    fn new(py: Python<'_>, location: Option<String>) -> PyResult<Self> {
        guard(|| {
            let p = store_path(location.as_deref());
            let described = py
                .detach(|| Store::open(&p).map(|s| s.describe()))
                .map_err(os_err)?;
            Ok(PyStore {
                location: p,
                described,
            })
        })
    }

    /// Where the store is (a password in a URL is never shown).
    fn describe(&self) -> String {
        self.described.clone()
    }

    fn __repr__(&self) -> String {
        format!("Store({})", self.described)
    }

    /// Every run, oldest first, as JSON text (the CLI's `runs list --json` rows).
    fn _runs(&self, py: Python<'_>) -> PyResult<String> {
        guard(|| to_json(&py.detach(|| self.open()?.list_runs().map_err(os_err))?))
    }

    /// The records of one run, as JSON text.
    fn _run_records(&self, py: Python<'_>, run_id: &str) -> PyResult<String> {
        guard(|| to_json(&py.detach(|| self.open()?.run_records(run_id).map_err(os_err))?))
    }

    /// Insert one run's records (JSON text of a list); returns what the store did.
    fn _insert_run(&self, py: Python<'_>, records_json: &str) -> PyResult<String> {
        guard(|| {
            let records = records_of(records_json, "records")?;
            let out = py.detach(|| self.open()?.insert_run(&records).map_err(value_err))?;
            to_json(&out)
        })
    }

    /// The history of `candidate` (JSON text) over the newest `runs` comparable runs.
    fn _history(&self, py: Python<'_>, candidate_json: &str, runs: usize) -> PyResult<String> {
        guard(|| {
            let c = records_of(candidate_json, "candidate")?;
            let h = py.detach(|| {
                tensorforge_job::baseline::history_baseline(&self.open()?, &c, runs).map_err(os_err)
            })?;
            to_json(&h)
        })
    }
}

fn policy_of(policy: Option<&str>) -> PyResult<Policy> {
    match policy {
        None => Ok(Policy::default_embedded()),
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| os_err(format!("{f}: cannot read file: {e}")))?;
            Policy::from_toml_str(&text, f).map_err(value_err)
        }
    }
}

fn today_of(today: Option<&str>) -> PyResult<Date> {
    match today {
        Some(t) => Date::parse(t, "today", "today").map_err(value_err),
        None => Ok(Date::today_utc()),
    }
}

/// `tensorforge gate --json` over two lists of records (JSON text): the verdict per
/// workload and overall, with `exit_code` 0 pass, 1 fail, 3 inconclusive.
#[pyfunction]
#[pyo3(signature = (baseline_json, candidate_json, *, policy = None, today = None))]
fn _gate(
    baseline_json: &str,
    candidate_json: &str,
    policy: Option<&str>,
    today: Option<&str>,
) -> PyResult<String> {
    guard(|| {
        let (b, c, p, d) = gate_inputs(baseline_json, candidate_json, policy, today)?;
        to_json(&gate(&p, &b, &c, d))
    })
}

/// The impact report of a gate over the two lists: `format` `markdown` or `html`.
#[pyfunction]
#[pyo3(signature = (baseline_json, candidate_json, *, format = "markdown", policy = None, today = None))]
fn _report(
    baseline_json: &str,
    candidate_json: &str,
    format: &str,
    policy: Option<&str>,
    today: Option<&str>,
) -> PyResult<String> {
    guard(|| {
        let (b, c, p, d) = gate_inputs(baseline_json, candidate_json, policy, today)?;
        let g = gate(&p, &b, &c, d);
        let r = Report::new(g, &b, &c, None);
        match format {
            "markdown" | "md" => Ok(render_markdown(&r)),
            "html" => Ok(render_html(&r, &[])),
            other => Err(value_err(format!(
                "invalid value for `format`: `{other}` (valid: markdown, html)"
            ))),
        }
    })
}

/// `tensorforge bench --json` without callgrind counts: each workload spec (`gemm:m=..`,
/// a preset name; see `tensorforge workloads list`) measured by the harness; the records as
/// JSON text, stored in `store` when given.
#[pyfunction]
#[pyo3(signature = (workloads, *, threads = 1, iterations = 10, warmup = 3, time_budget_ms = 200, rotate = true, labels = None, store = None))]
#[allow(clippy::too_many_arguments)]
fn _bench(
    py: Python<'_>,
    workloads: Vec<String>,
    threads: usize,
    iterations: u64,
    warmup: u64,
    time_budget_ms: u64,
    rotate: bool,
    labels: Option<BTreeMap<String, String>>,
    store: Option<&str>,
) -> PyResult<String> {
    guard(|| {
        if threads == 0 {
            return Err(value_err(
                "invalid value for `threads`: 0 (must be at least 1)",
            ));
        }
        if iterations == 0 {
            return Err(value_err(
                "invalid value for `iterations`: 0 (must be at least 1)",
            ));
        }
        let mut suite = Vec::new();
        for w in &workloads {
            suite.extend(parse_workload(w).map_err(value_err)?);
        }
        let opts = HarnessOptions {
            warmup_iterations: warmup,
            min_iterations: iterations,
            time_budget_ns: time_budget_ms.saturating_mul(1_000_000),
            max_iterations: iterations.max(tensorforge_measure::harness::DEFAULT_MAX_ITERATIONS),
            rotate,
            labels: labels.unwrap_or_default(),
            ..HarnessOptions::new(threads)
        };
        let records = py
            .detach(|| run_suite(&suite, &opts, &mut |_| {}))
            .map_err(value_err)?;
        if let Some(s) = store {
            py.detach(|| {
                Store::open(&store_path(Some(s)))
                    .map_err(os_err)?
                    .insert_run(&records)
                    .map_err(value_err)
            })?;
        }
        to_json(&records)
    })
}

/// One record from a pytest-benchmark JSON document (`text`, named `source`): the benchmark
/// `select` (its full name), identified as workload kind `pytest-benchmark` named `name` with
/// `params` (JSON object text), in run `run_id` (new when None), with this machine's device
/// and software context.
#[pyfunction]
#[pyo3(signature = (text, source, select, name, params_json = "{}", run_id = None, labels = None))]
fn _ingest_pytest_benchmark(
    text: &str,
    source: &str,
    select: &str,
    name: &str,
    params_json: &str,
    run_id: Option<String>,
    labels: Option<BTreeMap<String, String>>,
) -> PyResult<String> {
    guard(|| {
        let params: BTreeMap<String, serde_json::Value> = serde_json::from_str(params_json)
            .map_err(|e| value_err(format!("params: not a JSON object: {e}")))?;
        let ctx = IngestContext {
            run_id: run_id.unwrap_or_else(new_run_id),
            workload: WorkloadIdentity {
                kind: "pytest-benchmark".into(),
                name: name.to_string(),
                params,
                dtype: "unspecified".into(),
            },
            device: device_context(1),
            software: software_context(),
            labels: labels.unwrap_or_default(),
            timestamp_unix_s: tensorforge_store::time::now_unix_s(),
            flops: None,
            bytes: None,
        };
        let r = ingest_record(
            IngestFormat::PytestBenchmark,
            text,
            source,
            Some(select),
            ctx,
        )
        .map_err(value_err)?;
        to_json(&r)
    })
}

/// `tensorforge compare --json`: two shell commands measured in alternating rounds and
/// decided by the policy's paired test (`mode` `wall`: each command's wall time; `records`:
/// the records each prints). The decision and every run, as JSON text.
#[pyfunction]
#[pyo3(signature = (baseline, candidate, *, mode = "wall", name = "command", rounds = None,
    max_rounds = None, order = None, timeout_s = 600.0, policy = None))]
#[allow(clippy::too_many_arguments)]
fn _compare(
    py: Python<'_>,
    baseline: &str,
    candidate: &str,
    mode: &str,
    name: &str,
    rounds: Option<usize>,
    max_rounds: Option<usize>,
    order: Option<&str>,
    timeout_s: f64,
    policy: Option<&str>,
) -> PyResult<String> {
    use tensorforge_job::compare::{override_rounds, run_compare, CompareOptions, Mode, SideSpec};
    guard(|| {
        let mut pol = policy_of(policy)?;
        let order = match order {
            None => None,
            Some("abba") => Some(tensorforge_ops::RoundOrder::Abba),
            Some("random") => Some(tensorforge_ops::RoundOrder::Random),
            Some(o) => {
                return Err(value_err(format!(
                    "invalid value for `order`: `{o}` (valid: abba, random)"
                )))
            }
        };
        override_rounds(&mut pol, rounds, max_rounds, order).map_err(value_err)?;
        let mode = match mode {
            "wall" => Mode::Wall,
            "records" => Mode::Records,
            m => {
                return Err(value_err(format!(
                    "invalid value for `mode`: `{m}` (valid: wall, records)"
                )))
            }
        };
        if !(timeout_s.is_finite() && timeout_s > 0.0) {
            return Err(value_err(format!(
                "invalid value for `timeout_s`: {timeout_s} (must be a positive number of seconds)"
            )));
        }
        let o = CompareOptions {
            baseline: SideSpec {
                label: "baseline".into(),
                command: baseline.to_string(),
            },
            candidate: SideSpec {
                label: "candidate".into(),
                command: candidate.to_string(),
            },
            mode,
            name: name.to_string(),
            timeout: std::time::Duration::from_secs_f64(timeout_s),
            policy: pol,
        };
        let out = py
            .detach(|| run_compare(&o, &mut |_| {}))
            .map_err(value_err)?;
        to_json(&out)
    })
}

/// A new run id (the store's format).
#[pyfunction]
fn _new_run_id() -> String {
    new_run_id()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyStore>()?;
    m.add_function(wrap_pyfunction!(_gate, m)?)?;
    m.add_function(wrap_pyfunction!(_report, m)?)?;
    m.add_function(wrap_pyfunction!(_bench, m)?)?;
    m.add_function(wrap_pyfunction!(_ingest_pytest_benchmark, m)?)?;
    m.add_function(wrap_pyfunction!(_new_run_id, m)?)?;
    m.add_function(wrap_pyfunction!(_compare, m)?)?;
    Ok(())
}
