//! Ingestion of benchmark results measured by other tools into records. Each parser reads
//! the tool's documented JSON output and returns raw per-iteration latency samples of ONE
//! benchmark (chosen with `select` when the file holds several):
//!
//! - `pytest-benchmark` (`--benchmark-json`): `benchmarks[].stats.data`, per-round seconds
//!   already divided by the round's iterations; present only with `--benchmark-save-data`.
//!   Without it the file holds summary statistics only and is refused.
//! - `google-benchmark` (`--benchmark_format=json` / `--benchmark_out`): entries of
//!   `benchmarks[]` with `run_type` `iteration`; each repetition's `real_time` (a mean per
//!   iteration, in `time_unit`) is one sample. Aggregates (`mean`, `median`, `stddev`, `cv`)
//!   are skipped; `cpu_time` is not used.
//! - `criterion` `sample.json`: `iters[i]` and `times[i]` (ns for that many iterations);
//!   one sample per entry, `times[i] / iters[i]`. A criterion `estimates.json` holds point
//!   estimates only and is refused: samples are never invented from summary statistics.
//! - `hyperfine` (`--export-json`): `results[].times`, whole-command wall time in seconds
//!   per execution (process start-up included).
//!
//! The workload identity comes from the user; the file's own names only select a benchmark.
//! Harness settings the file does not state are left at zero and the harness note says where
//! the samples came from.

use crate::error::StoreError;
use crate::record::{DeviceContext, HarnessSettings, Record, SoftwareContext, WorkloadIdentity};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A supported external benchmark format.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum IngestFormat {
    /// pytest-benchmark `--benchmark-json` output (needs `--benchmark-save-data`).
    PytestBenchmark,
    /// Google Benchmark JSON output.
    GoogleBenchmark,
    /// criterion.rs `sample.json` (an `estimates.json` is recognised and refused).
    Criterion,
    /// hyperfine `--export-json` output.
    Hyperfine,
}

impl IngestFormat {
    /// Every format, in the order they are documented.
    pub const ALL: [IngestFormat; 4] = [
        IngestFormat::PytestBenchmark,
        IngestFormat::GoogleBenchmark,
        IngestFormat::Criterion,
        IngestFormat::Hyperfine,
    ];

    /// The format's command-line name (`pytest-benchmark`, `google-benchmark`, ...).
    pub fn name(self) -> &'static str {
        match self {
            IngestFormat::PytestBenchmark => "pytest-benchmark",
            IngestFormat::GoogleBenchmark => "google-benchmark",
            IngestFormat::Criterion => "criterion",
            IngestFormat::Hyperfine => "hyperfine",
        }
    }

    /// Parse a command-line name; also accepts `pytest`, `gbench`, `google` and `criterion-sample`.
    pub fn parse(s: &str) -> Result<IngestFormat, StoreError> {
        let f = match s.trim().to_ascii_lowercase().as_str() {
            "pytest-benchmark" | "pytest" => IngestFormat::PytestBenchmark,
            "google-benchmark" | "google" | "gbench" => IngestFormat::GoogleBenchmark,
            "criterion" | "criterion-sample" => IngestFormat::Criterion,
            "hyperfine" => IngestFormat::Hyperfine,
            _ => {
                return Err(StoreError::invalid(
                    "ingest",
                    "format",
                    s,
                    format!(
                        "expected one of {}",
                        IngestFormat::ALL.map(IngestFormat::name).join(", ")
                    ),
                ))
            }
        };
        Ok(f)
    }
}

/// The samples of one benchmark read from an external file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct IngestedSeries {
    /// The benchmark's name in the file (test name, benchmark run name, command...).
    pub benchmark: String,
    /// Per-iteration latencies in ns.
    pub samples_ns: Vec<f64>,
    /// Threads the tool reports, when it does.
    pub threads: Option<u32>,
    /// Iterations behind each sample when the file states one figure for all, else `None`.
    pub iterations_per_sample: Option<u64>,
    /// How the samples were derived from the file.
    pub note: String,
}

/// What the user supplies for an ingested record: the identity and context the file lacks.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct IngestContext {
    /// Run id for the record.
    pub run_id: String,
    /// What was measured.
    pub workload: WorkloadIdentity,
    /// Where it was measured.
    pub device: DeviceContext,
    /// Software context.
    pub software: SoftwareContext,
    /// Labels to attach.
    pub labels: BTreeMap<String, String>,
    /// Record timestamp (Unix seconds).
    pub timestamp_unix_s: i64,
    /// FLOPs per iteration, when known.
    pub flops: Option<f64>,
    /// Bytes moved per iteration, when known.
    pub bytes: Option<f64>,
}

/// Parse `text` (the content of `file`) in `format` and build one validated record.
pub fn ingest_record(
    format: IngestFormat,
    text: &str,
    file: &str,
    select: Option<&str>,
    ctx: IngestContext,
) -> Result<Record, StoreError> {
    let series = parse_series(format, text, file, select)?;
    let harness = HarnessSettings {
        warmup_iterations: 0,
        min_iterations: series.iterations_per_sample.unwrap_or(0),
        time_budget_ns: 0,
        threads: series.threads.unwrap_or(ctx.device.threads_used),
        rotating_buffers: false,
        note: Some(format!(
            "ingested from {} file {file}, benchmark `{}`: {}; warm-up and time budget not stated by the file (0 = unknown)",
            format.name(),
            series.benchmark,
            series.note
        )),
        batch_iterations: 1,
        timer_resolution_ns: None,
        overhead_ns: None,
    };
    Record::new(crate::record::RecordParts {
        run_id: ctx.run_id,
        workload: ctx.workload,
        device: ctx.device,
        software: ctx.software,
        harness,
        samples_ns: series.samples_ns,
        flops: ctx.flops,
        bytes: ctx.bytes,
        peak_alloc_bytes: None,
        timestamp_unix_s: ctx.timestamp_unix_s,
        labels: ctx.labels,
        source: format!("ingest:{}", format.name()),
    })
    .map_err(|e| StoreError::Record(e.with_source(file)))
}

/// Parse the samples of one benchmark from `text` (the content of `file`).
pub fn parse_series(
    format: IngestFormat,
    text: &str,
    file: &str,
    select: Option<&str>,
) -> Result<IngestedSeries, StoreError> {
    let v: Value = serde_json::from_str(text).map_err(|e| StoreError::Parse {
        source_name: file.to_string(),
        message: format!("{} JSON: {e}", format.name()),
    })?;
    tensorforge_core::json::reject_duplicate_keys(text).map_err(|message| StoreError::Parse {
        source_name: file.to_string(),
        message,
    })?;
    match format {
        IngestFormat::PytestBenchmark => pytest(&v, file, select),
        IngestFormat::GoogleBenchmark => google(&v, file, select),
        IngestFormat::Criterion => criterion(&v, file, select),
        IngestFormat::Hyperfine => hyperfine(&v, file, select),
    }
}

fn missing(file: &str, field: &str, reason: impl Into<String>) -> StoreError {
    StoreError::invalid(file, field, "(missing)", reason)
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

fn array<'a>(
    v: &'a Value,
    key: &str,
    file: &str,
    path: &str,
) -> Result<&'a Vec<Value>, StoreError> {
    match v.get(key) {
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(StoreError::invalid(
            file,
            path,
            short(other),
            "expected an array",
        )),
        None => Err(missing(file, path, "required field is absent")),
    }
}

fn number(v: &Value, file: &str, path: &str) -> Result<f64, StoreError> {
    match v.as_f64() {
        Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(StoreError::invalid(
            file,
            path,
            short(v),
            "expected a finite, non-negative number",
        )),
    }
}

fn numbers(v: &Value, key: &str, file: &str, path: &str) -> Result<Vec<f64>, StoreError> {
    array(v, key, file, path)?
        .iter()
        .enumerate()
        .map(|(i, x)| number(x, file, &format!("{path}[{i}]")))
        .collect()
}

/// Pick the one candidate named `select` (or the only one); errors list the names.
fn choose<T>(
    items: Vec<(String, T)>,
    select: Option<&str>,
    file: &str,
    field: &str,
    names_of: impl Fn(&T) -> Vec<String>,
) -> Result<(String, T), StoreError> {
    let list = |items: &[(String, T)]| {
        let mut names: Vec<&str> = items.iter().map(|(n, _)| n.as_str()).collect();
        names.dedup();
        let more = names.len().saturating_sub(12);
        let mut s = names.into_iter().take(12).collect::<Vec<_>>().join(", ");
        if more > 0 {
            s.push_str(&format!(" and {more} more"));
        }
        s
    };
    if items.is_empty() {
        return Err(missing(file, field, "the file holds no benchmark results"));
    }
    match select {
        Some(sel) => {
            let all = list(&items);
            items
                .into_iter()
                .find(|(n, t)| n == sel || names_of(t).iter().any(|x| x == sel))
                .ok_or_else(|| {
                    StoreError::invalid(
                        file,
                        field,
                        sel,
                        format!("no such benchmark; the file holds: {all}"),
                    )
                })
        }
        None if items.len() == 1 => Ok(items.into_iter().next().unwrap_or_else(|| unreachable!())),
        None => Err(StoreError::invalid(
            file,
            field,
            format!("{} benchmarks", items.len()),
            format!(
                "the file holds several benchmarks; select one by name: {}",
                list(&items)
            ),
        )),
    }
}

fn pytest(v: &Value, file: &str, select: Option<&str>) -> Result<IngestedSeries, StoreError> {
    let benches = array(v, "benchmarks", file, "benchmarks")?;
    let mut items = Vec::new();
    for (i, b) in benches.iter().enumerate() {
        let name = b.get("name").and_then(Value::as_str).ok_or_else(|| {
            missing(
                file,
                &format!("benchmarks[{i}].name"),
                "required field is absent",
            )
        })?;
        let full = b
            .get("fullname")
            .and_then(Value::as_str)
            .unwrap_or(name)
            .to_string();
        items.push((name.to_string(), (i, full)));
    }
    let (name, (i, _)) = choose(items, select, file, "benchmarks[].name", |(_, full)| {
        vec![full.clone()]
    })?;
    let b = &benches[i];
    let stats = b.get("stats").ok_or_else(|| {
        missing(
            file,
            &format!("benchmarks[{i}].stats"),
            "required field is absent",
        )
    })?;
    if stats.get("data").is_none() {
        return Err(missing(
            file,
            &format!("benchmarks[{i}].stats.data"),
            "this file holds summary statistics only; re-run pytest with --benchmark-save-data \
             so it stores every round's time (samples are never invented from min/median/max)",
        ));
    }
    let secs = numbers(stats, "data", file, &format!("benchmarks[{i}].stats.data"))?;
    if secs.is_empty() {
        return Err(StoreError::invalid(
            file,
            format!("benchmarks[{i}].stats.data"),
            "[]",
            "no rounds",
        ));
    }
    let iterations = stats.get("iterations").and_then(Value::as_u64);
    Ok(IngestedSeries {
        benchmark: name,
        samples_ns: secs.iter().map(|s| s * 1e9).collect(),
        threads: None,
        iterations_per_sample: iterations,
        note: format!(
            "{} rounds from stats.data (seconds per iteration, each the mean of {} iteration(s))",
            secs.len(),
            iterations.map_or("an unstated number of".into(), |n| n.to_string())
        ),
    })
}

fn unit_to_ns(unit: &str) -> Option<f64> {
    match unit {
        "ns" => Some(1.0),
        "us" => Some(1e3),
        "ms" => Some(1e6),
        "s" => Some(1e9),
        _ => None,
    }
}

/// One Google Benchmark run name's (samples ns, iteration counts, threads).
type GbenchGroup = (Vec<f64>, Vec<u64>, Option<u32>);

fn google(v: &Value, file: &str, select: Option<&str>) -> Result<IngestedSeries, StoreError> {
    let benches = array(v, "benchmarks", file, "benchmarks")?;
    let mut groups: Vec<(String, GbenchGroup)> = Vec::new();
    let mut skipped = 0usize;
    for (i, b) in benches.iter().enumerate() {
        let at = |f: &str| format!("benchmarks[{i}].{f}");
        let run_type = b.get("run_type").and_then(Value::as_str);
        if run_type == Some("aggregate") || b.get("aggregate_name").is_some() {
            skipped += 1;
            continue;
        }
        let name = b
            .get("run_name")
            .or_else(|| b.get("name"))
            .and_then(Value::as_str)
            .ok_or_else(|| missing(file, &at("name"), "required field is absent"))?
            .to_string();
        if b.get("error_occurred").and_then(Value::as_bool) == Some(true) {
            let msg = b.get("error_message").map(short).unwrap_or_default();
            return Err(StoreError::invalid(
                file,
                at("error_occurred"),
                "true",
                format!("benchmark `{name}` reported an error {msg}; it has no valid timing"),
            ));
        }
        let rt = b
            .get("real_time")
            .ok_or_else(|| missing(file, &at("real_time"), "required field is absent"))?;
        let rt = number(rt, file, &at("real_time"))?;
        let unit = b.get("time_unit").and_then(Value::as_str).unwrap_or("ns");
        let scale = unit_to_ns(unit).ok_or_else(|| {
            StoreError::invalid(file, at("time_unit"), unit, "expected ns, us, ms or s")
        })?;
        let iters = b.get("iterations").and_then(Value::as_u64);
        let threads = b.get("threads").and_then(Value::as_u64).map(|t| t as u32);
        let pos = groups.iter().position(|(n, _)| *n == name);
        let g = match pos {
            Some(p) => &mut groups[p].1,
            None => {
                groups.push((name, (Vec::new(), Vec::new(), threads)));
                &mut groups.last_mut().unwrap_or_else(|| unreachable!()).1
            }
        };
        g.0.push(rt * scale);
        if let Some(n) = iters {
            g.1.push(n);
        }
    }
    let (name, (samples, iters, threads)) =
        choose(groups, select, file, "benchmarks[].run_name", |_| {
            Vec::new()
        })?;
    let same_iters = iters
        .first()
        .filter(|f| iters.iter().all(|x| x == *f))
        .copied();
    Ok(IngestedSeries {
        benchmark: name,
        note: format!(
            "{} repetition(s), each sample the repetition's mean real_time per iteration ({}); {skipped} aggregate entr{} skipped; cpu_time not used",
            samples.len(),
            same_iters.map_or("iterations vary".into(), |n| format!("{n} iterations each")),
            if skipped == 1 { "y" } else { "ies" }
        ),
        samples_ns: samples,
        threads,
        iterations_per_sample: same_iters,
    })
}

fn criterion(v: &Value, file: &str, select: Option<&str>) -> Result<IngestedSeries, StoreError> {
    if v.get("iters").is_none() && v.get("times").is_none() {
        let estimates = ["mean", "median", "slope", "std_dev"]
            .iter()
            .any(|k| v.get(*k).and_then(|e| e.get("point_estimate")).is_some());
        if estimates {
            return Err(missing(
                file,
                "iters/times",
                "this is a criterion estimates.json: it holds point estimates only, and samples \
                 are never invented from them; ingest the sample.json next to it \
                 (target/criterion/<benchmark>/new/sample.json)",
            ));
        }
        return Err(missing(
            file,
            "iters",
            "not a criterion sample.json (expected `iters` and `times` arrays)",
        ));
    }
    if let Some(sel) = select {
        return Err(StoreError::invalid(
            file,
            "select",
            sel,
            "a criterion sample.json holds one benchmark; selecting one does not apply",
        ));
    }
    let iters = numbers(v, "iters", file, "iters")?;
    let times = numbers(v, "times", file, "times")?;
    if iters.len() != times.len() {
        return Err(StoreError::invalid(
            file,
            "times",
            format!("{} entries", times.len()),
            format!("`iters` has {} entries; they must pair up", iters.len()),
        ));
    }
    if iters.is_empty() {
        return Err(StoreError::invalid(file, "iters", "[]", "no samples"));
    }
    if let Some(i) = iters.iter().position(|n| *n <= 0.0) {
        return Err(StoreError::invalid(
            file,
            format!("iters[{i}]"),
            iters[i].to_string(),
            "iteration counts must be positive",
        ));
    }
    let mode = v
        .get("sampling_mode")
        .and_then(Value::as_str)
        .unwrap_or("unstated");
    let benchmark = std::path::Path::new(file)
        .parent()
        .and_then(|p| p.parent())
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "criterion".into());
    Ok(IngestedSeries {
        benchmark,
        samples_ns: iters.iter().zip(&times).map(|(n, t)| t / n).collect(),
        threads: None,
        iterations_per_sample: None,
        note: format!(
            "{} criterion samples, each times[i]/iters[i] in ns (sampling_mode {mode}); criterion's regression slope is not used",
            iters.len()
        ),
    })
}

fn hyperfine(v: &Value, file: &str, select: Option<&str>) -> Result<IngestedSeries, StoreError> {
    let results = array(v, "results", file, "results")?;
    let mut items = Vec::new();
    for (i, r) in results.iter().enumerate() {
        let cmd = r.get("command").and_then(Value::as_str).ok_or_else(|| {
            missing(
                file,
                &format!("results[{i}].command"),
                "required field is absent",
            )
        })?;
        items.push((cmd.to_string(), i));
    }
    let (command, i) = choose(items, select, file, "results[].command", |_| Vec::new())?;
    let r = &results[i];
    if r.get("times").is_none() {
        return Err(missing(
            file,
            &format!("results[{i}].times"),
            "per-run times are absent (export with `hyperfine --export-json`; samples are never invented from mean/stddev)",
        ));
    }
    let secs = numbers(r, "times", file, &format!("results[{i}].times"))?;
    if secs.is_empty() {
        return Err(StoreError::invalid(
            file,
            format!("results[{i}].times"),
            "[]",
            "no runs",
        ));
    }
    if let Some(codes) = r.get("exit_codes").and_then(Value::as_array) {
        if let Some((j, c)) = codes
            .iter()
            .enumerate()
            .find(|(_, c)| c.as_i64().is_some_and(|c| c != 0))
        {
            return Err(StoreError::invalid(
                file,
                format!("results[{i}].exit_codes[{j}]"),
                c.to_string(),
                "the command failed in this run; its time is not a valid measurement",
            ));
        }
    }
    Ok(IngestedSeries {
        benchmark: command,
        samples_ns: secs.iter().map(|s| s * 1e9).collect(),
        threads: None,
        iterations_per_sample: Some(1),
        note: format!(
            "{} executions, each the whole command's wall time (process start-up included)",
            secs.len()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> IngestContext {
        let mut params = BTreeMap::new();
        params.insert("m".into(), serde_json::json!(64));
        IngestContext {
            run_id: "run-i".into(),
            workload: WorkloadIdentity {
                kind: "gemm".into(),
                name: "g".into(),
                params,
                dtype: "f32".into(),
            },
            device: DeviceContext {
                kind: "cpu".into(),
                machine_id: "m".into(),
                threads_used: 1,
                ..Default::default()
            },
            software: SoftwareContext::default(),
            labels: BTreeMap::new(),
            timestamp_unix_s: 7,
            flops: Some(1e6),
            bytes: None,
        }
    }

    // Shape of pytest-benchmark 4.x `--benchmark-json` with `--benchmark-save-data`.
    const PYTEST: &str = r#"{
      "machine_info": {"node": "x", "python_version": "3.11.4"},
      "commit_info": {"id": "abc"},
      "benchmarks": [
        {"group": null, "name": "test_gemm", "fullname": "tests/test_perf.py::test_gemm",
         "params": null, "param": null, "extra_info": {},
         "options": {"disable_gc": false, "timer": "perf_counter", "min_rounds": 5,
                     "max_time": 1.0, "min_time": 5e-06, "warmup": false},
         "stats": {"min": 1e-6, "max": 3e-6, "mean": 2e-6, "stddev": 1e-6, "rounds": 3,
                   "median": 2e-6, "iqr": 1e-6, "q1": 1.5e-6, "q3": 2.5e-6,
                   "iqr_outliers": 0, "stddev_outliers": 0, "outliers": "0;0",
                   "ld15iqr": 1e-6, "hd15iqr": 3e-6, "ops": 500000.0, "total": 6e-6,
                   "data": [1e-6, 2e-6, 3e-6], "iterations": 10}},
        {"group": null, "name": "test_other", "fullname": "tests/test_perf.py::test_other",
         "stats": {"min": 1.0, "max": 1.0, "mean": 1.0, "rounds": 1, "median": 1.0,
                   "iterations": 1}}
      ],
      "datetime": "2024-05-01T10:00:00.000000", "version": "4.0.0"}"#;

    #[test]
    fn pytest_benchmark_data_in_seconds() {
        let s = parse_series(
            IngestFormat::PytestBenchmark,
            PYTEST,
            "p.json",
            Some("test_gemm"),
        )
        .unwrap();
        assert_eq!(s.samples_ns.len(), 3);
        assert!((s.samples_ns[1] - 2000.0).abs() < 1e-9);
        assert_eq!(s.iterations_per_sample, Some(10));
        // fullname selects too
        let f = parse_series(
            IngestFormat::PytestBenchmark,
            PYTEST,
            "p.json",
            Some("tests/test_perf.py::test_gemm"),
        )
        .unwrap();
        assert_eq!(f.benchmark, "test_gemm");
        // several benchmarks and no selection: error lists them
        let e = parse_series(IngestFormat::PytestBenchmark, PYTEST, "p.json", None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("p.json") && e.contains("test_other") && e.contains("select one by name"),
            "{e}"
        );
        // summary-only entry: refused, naming the field
        let e = parse_series(
            IngestFormat::PytestBenchmark,
            PYTEST,
            "p.json",
            Some("test_other"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("benchmarks[1].stats.data") && e.contains("--benchmark-save-data"),
            "{e}"
        );
        let r = ingest_record(
            IngestFormat::PytestBenchmark,
            PYTEST,
            "p.json",
            Some("test_gemm"),
            ctx(),
        )
        .unwrap();
        assert_eq!(r.source, "ingest:pytest-benchmark");
        assert_eq!(r.stats.p50_ns, 2000.0);
        r.validate().unwrap();
    }

    // Google Benchmark JSON with --benchmark_repetitions=3 (aggregates appended).
    const GBENCH: &str = r#"{
      "context": {"date": "2024-05-01T10:00:00+00:00", "host_name": "h", "executable": "./b",
                  "num_cpus": 2, "mhz_per_cpu": 2000, "cpu_scaling_enabled": false,
                  "caches": [], "library_build_type": "release"},
      "benchmarks": [
        {"name": "BM_Gemm/64", "family_index": 0, "per_family_instance_index": 0,
         "run_name": "BM_Gemm/64", "run_type": "iteration", "repetitions": 3,
         "repetition_index": 0, "threads": 1, "iterations": 1000,
         "real_time": 1.5, "cpu_time": 1.4, "time_unit": "us"},
        {"name": "BM_Gemm/64", "run_name": "BM_Gemm/64", "run_type": "iteration",
         "repetitions": 3, "repetition_index": 1, "threads": 1, "iterations": 1000,
         "real_time": 2.5, "cpu_time": 2.4, "time_unit": "us"},
        {"name": "BM_Gemm/64", "run_name": "BM_Gemm/64", "run_type": "iteration",
         "repetitions": 3, "repetition_index": 2, "threads": 1, "iterations": 1000,
         "real_time": 2.0, "cpu_time": 1.9, "time_unit": "us"},
        {"name": "BM_Gemm/64_mean", "run_name": "BM_Gemm/64", "run_type": "aggregate",
         "repetitions": 3, "threads": 1, "aggregate_name": "mean", "aggregate_unit": "time",
         "iterations": 3, "real_time": 2.0, "cpu_time": 1.9, "time_unit": "us"},
        {"name": "BM_Gemm/64_stddev", "run_name": "BM_Gemm/64", "run_type": "aggregate",
         "repetitions": 3, "threads": 1, "aggregate_name": "stddev", "aggregate_unit": "time",
         "iterations": 3, "real_time": 0.5, "cpu_time": 0.5, "time_unit": "us"}
      ]}"#;

    #[test]
    fn google_benchmark_repetitions_become_samples() {
        let s = parse_series(IngestFormat::GoogleBenchmark, GBENCH, "g.json", None).unwrap();
        assert_eq!(s.benchmark, "BM_Gemm/64");
        assert_eq!(s.samples_ns, vec![1500.0, 2500.0, 2000.0]);
        assert_eq!(s.iterations_per_sample, Some(1000));
        assert_eq!(s.threads, Some(1));
        assert!(s.note.contains("2 aggregate entries skipped"), "{}", s.note);
        let bad = GBENCH.replacen("\"time_unit\": \"us\"", "\"time_unit\": \"fortnights\"", 1);
        let e = parse_series(IngestFormat::GoogleBenchmark, &bad, "g.json", None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("benchmarks[0].time_unit") && e.contains("fortnights"),
            "{e}"
        );
        let e = parse_series(
            IngestFormat::GoogleBenchmark,
            GBENCH,
            "g.json",
            Some("BM_Other"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("BM_Gemm/64"), "{e}");
        let err = GBENCH.replacen(
            "\"real_time\": 1.5",
            "\"error_occurred\": true, \"error_message\": \"oops\", \"real_time\": 1.5",
            1,
        );
        assert!(
            parse_series(IngestFormat::GoogleBenchmark, &err, "g.json", None)
                .unwrap_err()
                .to_string()
                .contains("error_occurred")
        );
    }

    // criterion 0.5 target/criterion/<bench>/new/sample.json
    const CRIT_SAMPLE: &str =
        r#"{"sampling_mode":"Linear","iters":[1.0,2.0,3.0,4.0],"times":[100.0,220.0,300.0,400.0]}"#;
    // criterion 0.5 estimates.json
    const CRIT_EST: &str = r#"{"mean":{"confidence_interval":{"confidence_level":0.95,"lower_bound":99.0,"upper_bound":101.0},"point_estimate":100.0,"standard_error":0.5},
      "median":{"confidence_interval":{"confidence_level":0.95,"lower_bound":99.0,"upper_bound":101.0},"point_estimate":100.0,"standard_error":0.5},
      "median_abs_dev":{"confidence_interval":{"confidence_level":0.95,"lower_bound":0.1,"upper_bound":0.3},"point_estimate":0.2,"standard_error":0.05},
      "slope":null,
      "std_dev":{"confidence_interval":{"confidence_level":0.95,"lower_bound":0.5,"upper_bound":1.5},"point_estimate":1.0,"standard_error":0.2}}"#;

    #[test]
    fn criterion_sample_divides_times_by_iters_and_estimates_are_refused() {
        let s = parse_series(
            IngestFormat::Criterion,
            CRIT_SAMPLE,
            "target/criterion/gemm_64/new/sample.json",
            None,
        )
        .unwrap();
        assert_eq!(s.samples_ns, vec![100.0, 110.0, 100.0, 100.0]);
        assert_eq!(s.benchmark, "gemm_64");
        let e = parse_series(IngestFormat::Criterion, CRIT_EST, "estimates.json", None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("estimates.json") && e.contains("sample.json"),
            "{e}"
        );
        let uneven = r#"{"iters":[1.0],"times":[1.0,2.0]}"#;
        assert!(
            parse_series(IngestFormat::Criterion, uneven, "s.json", None)
                .unwrap_err()
                .to_string()
                .contains("times")
        );
        let zero = r#"{"iters":[0.0],"times":[1.0]}"#;
        assert!(parse_series(IngestFormat::Criterion, zero, "s.json", None)
            .unwrap_err()
            .to_string()
            .contains("iters[0]"));
    }

    // hyperfine --export-json
    const HYPERFINE: &str = r#"{"results":[
      {"command":"sleep 0.1","mean":0.1015,"stddev":0.0005,"median":0.1015,"user":0.001,
       "system":0.002,"min":0.101,"max":0.102,"times":[0.101,0.102],"exit_codes":[0,0]},
      {"command":"sleep 0.2","mean":0.2,"stddev":0.0,"median":0.2,"user":0.001,
       "system":0.002,"min":0.2,"max":0.2,"times":[0.2],"exit_codes":[1]}]}"#;

    #[test]
    fn hyperfine_times_in_seconds_and_failed_runs_refused() {
        let s = parse_series(
            IngestFormat::Hyperfine,
            HYPERFINE,
            "h.json",
            Some("sleep 0.1"),
        )
        .unwrap();
        assert_eq!(s.samples_ns.len(), 2);
        assert!((s.samples_ns[0] - 1.01e8).abs() < 1e-3);
        let e = parse_series(
            IngestFormat::Hyperfine,
            HYPERFINE,
            "h.json",
            Some("sleep 0.2"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("results[1].exit_codes[0]"), "{e}");
        let no_times = r#"{"results":[{"command":"x","mean":1.0}]}"#;
        assert!(
            parse_series(IngestFormat::Hyperfine, no_times, "h.json", None)
                .unwrap_err()
                .to_string()
                .contains("results[0].times")
        );
    }

    #[test]
    fn malformed_and_wrong_format_files_name_file_and_field() {
        let e = parse_series(IngestFormat::Hyperfine, "{not json", "x.json", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.json") && e.contains("hyperfine"), "{e}");
        let e = parse_series(IngestFormat::Hyperfine, GBENCH, "g.json", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("g.json") && e.contains("results"), "{e}");
        let e = parse_series(IngestFormat::GoogleBenchmark, HYPERFINE, "h.json", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("benchmarks"), "{e}");
        let neg = r#"{"results":[{"command":"x","times":[-1.0]}]}"#;
        let e = parse_series(IngestFormat::Hyperfine, neg, "n.json", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("results[0].times[0]") && e.contains("-1"), "{e}");
        assert!(IngestFormat::parse("nope").is_err());
        for f in IngestFormat::ALL {
            assert_eq!(IngestFormat::parse(f.name()).unwrap(), f);
        }
    }
}
