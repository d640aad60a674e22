//! `tensorforge records list|show|export|import|sync` over a store (a SQLite file or a
//! PostgreSQL URL), and
//! `tensorforge ingest`, which turns a pytest-benchmark, Google Benchmark, criterion or
//! hyperfine file into one record (the user supplies the workload identity the file lacks).
//! Parsing, validation and storage live in `tensorforge-store`; this module only wires
//! arguments to it and prints. It does not delete runs or edit stored records.

use super::print_json;
use crate::fmt;
use crate::render::Table;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tensorforge_store::location::{is_missing_file, shown};
use tensorforge_store::{
    default_store_path, ingest_record, new_run_id, read_records_jsonl, write_records_jsonl,
    GpuContext, IngestContext, IngestFormat, InsertStatus, Record, RunInfo, Store,
    WorkloadIdentity,
};

/// Version of the JSON printed by `records` and `ingest`.
pub const RECORDS_JSON_SCHEMA_VERSION: u32 = 1;

/// `records` arguments: the store and a subcommand.
#[derive(Args, Debug)]
pub struct RecordsArgs {
    /// Store: a SQLite file or a postgres://user@host:port/db URL (default:
    /// $TENSORFORGE_STORE, else $XDG_DATA_HOME/tensorforge/tensorforge.sqlite, else
    /// ~/.local/share/tensorforge/tensorforge.sqlite).
    #[arg(long, value_name = "PATH|URL", global = true)]
    pub store: Option<PathBuf>,
    #[command(subcommand)]
    pub command: RecordsCommand,
}

/// `records` subcommands.
#[derive(Subcommand, Debug)]
pub enum RecordsCommand {
    /// List stored runs, newest first.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one run's records: a run id, unique run-id prefix, `latest`, `label:NAME=VALUE`
    /// or a value of label `label`.
    Show {
        /// Run selector.
        run: String,
        /// Print JSON (the run summary and its full records).
        #[arg(long)]
        json: bool,
    },
    /// Export runs (all when none given) as JSON lines.
    Export {
        /// Run selectors (as for `show`).
        runs: Vec<String>,
        /// Output file (written whole via a temporary file, then renamed).
        #[arg(long, value_name = "FILE.jsonl")]
        out: PathBuf,
    },
    /// Import a JSON-lines (or JSON array) records file: every record is validated first,
    /// then all runs are written in one transaction, or nothing is. Runs already stored with
    /// the same records are reported and not written again.
    Import {
        /// Records file.
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Copy every run and profile of one store that another lacks (SQLite and PostgreSQL
    /// either way); running it again copies nothing. A run or profile that fails the
    /// store's checks (a NUL character, a string over its limit) or clashes with another
    /// under its id is refused and listed, one line each, the rest copied; exit 2 then.
    Sync {
        /// Source store (file path or postgres:// URL).
        #[arg(long, value_name = "PATH|URL")]
        from: PathBuf,
        /// Destination store (file path or postgres:// URL).
        #[arg(long, value_name = "PATH|URL")]
        to: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn open_store(path: Option<&Path>) -> Result<Store> {
    let p = path
        .map(Path::to_path_buf)
        .unwrap_or_else(default_store_path);
    Ok(Store::open(&p)?)
}

#[derive(Serialize)]
struct ListJson<'a> {
    schema_version: u32,
    store: String,
    runs: &'a [RunInfo],
}

#[derive(Serialize)]
struct ShowJson<'a> {
    schema_version: u32,
    run: &'a RunInfo,
    records: &'a [Record],
}

#[derive(Serialize)]
struct ImportJson {
    schema_version: u32,
    store: String,
    file: String,
    /// Every run of the file, in file order.
    runs: Vec<String>,
    /// The runs written now.
    inserted: Vec<String>,
    /// The runs the store already held with the same records (nothing written for them).
    already_stored: Vec<String>,
    records: usize,
}

/// Run `records`. `Some(2)` when `records sync` refused runs or profiles (each listed on
/// its own line, every other one copied); `None` otherwise.
pub fn run_records(a: RecordsArgs) -> Result<Option<u8>> {
    if let RecordsCommand::Sync { from, to, json } = &a.command {
        return run_sync(from, to, *json);
    }
    run_store_command(a).map(|()| None)
}

/// `records sync`: copy, then list every refused run and profile (one line each, ids and
/// reasons escaped), the summary, and exit 2 when anything was refused (also with `--json`,
/// after the JSON).
fn run_sync(from: &Path, to: &Path, json: bool) -> Result<Option<u8>> {
    use tensorforge_ops::markup::one_line;
    if is_missing_file(from) {
        bail!("--from {}: no such store file", shown(from));
    }
    let src = Store::open(from)?;
    let dest = Store::open(to)?;
    let r = src.sync_to(&dest)?;
    if json {
        print_json(&r)?;
    } else {
        for x in &r.runs_refused {
            println!(
                "refused run {}: {}",
                one_line(&x.run_id),
                one_line(&x.reason)
            );
        }
        for x in &r.profiles_refused {
            println!(
                "refused profile {}: {}",
                one_line(&x.profile_id),
                one_line(&x.reason)
            );
        }
        println!(
            "synced {} -> {}: {} run(s) copied ({} records), {} already there, {} refused; {} profile(s) copied, {} already there, {} refused",
            r.from,
            r.to,
            r.runs_copied,
            r.records_copied,
            r.runs_already_present,
            r.runs_refused.len(),
            r.profiles_copied,
            r.profiles_already_present,
            r.profiles_refused.len()
        );
    }
    if !r.refused_any() {
        return Ok(None);
    }
    eprintln!(
        "error: {} run(s) and {} profile(s) refused{}; every other one was copied, and a rerun copies only what is missing",
        r.runs_refused.len(),
        r.profiles_refused.len(),
        if json { " (see runs_refused, profiles_refused)" } else { " (listed above)" }
    );
    Ok(Some(2))
}

/// The `records` subcommands that work on one store.
fn run_store_command(a: RecordsArgs) -> Result<()> {
    let store = open_store(a.store.as_deref())?;
    match a.command {
        RecordsCommand::Sync { .. } => unreachable!("handled above"),
        RecordsCommand::List { json } => {
            let runs = store.list_runs()?;
            if json {
                return print_json(&ListJson {
                    schema_version: RECORDS_JSON_SCHEMA_VERSION,
                    store: store.describe(),
                    runs: &runs,
                });
            }
            if runs.is_empty() {
                println!("no runs in {}", store.describe());
                return Ok(());
            }
            let mut t = Table::new(&[
                "run", "created", "machine", "records", "samples", "source", "labels",
            ]);
            for r in &runs {
                t.row(vec![
                    r.run_id.clone(),
                    utc(r.created_unix_s),
                    r.machine_id.clone(),
                    r.record_count.to_string(),
                    r.sample_count.to_string(),
                    r.sources.join(","),
                    labels_text(&r.labels),
                ]);
            }
            print!("{}", t.render());
            println!("{} run(s) in {}", runs.len(), store.describe());
            Ok(())
        }
        RecordsCommand::Show { run, json } => {
            let info = store.find_run(&run, None)?;
            let records = store.run_records(&info.run_id)?;
            if json {
                return print_json(&ShowJson {
                    schema_version: RECORDS_JSON_SCHEMA_VERSION,
                    run: &info,
                    records: &records,
                });
            }
            println!(
                "run {}  created {}  machine {}  {} record(s)",
                info.run_id,
                utc(info.created_unix_s),
                info.machine_id,
                info.record_count
            );
            if !info.labels.is_empty() {
                println!("labels: {}", labels_text(&info.labels));
            }
            let mut t = Table::new(&[
                "workload",
                "kind",
                "dtype",
                "fingerprint",
                "device",
                "n",
                "p50",
                "p90",
                "min",
                "source",
            ]);
            for r in &records {
                t.row(vec![
                    r.workload.name.clone(),
                    r.workload.kind.clone(),
                    r.workload.dtype.clone(),
                    r.fingerprint.chars().take(12).collect(),
                    device_text(r),
                    r.stats.count.to_string(),
                    fmt::time(r.stats.p50_ns * 1e-9),
                    fmt::time(r.stats.p90_ns * 1e-9),
                    fmt::time(r.stats.min_ns * 1e-9),
                    r.source.clone(),
                ]);
            }
            print!("{}", t.render());
            Ok(())
        }
        RecordsCommand::Export { runs, out } => {
            let infos: Vec<RunInfo> = if runs.is_empty() {
                store.list_runs()?
            } else {
                runs.iter()
                    .map(|s| store.find_run(s, None))
                    .collect::<std::result::Result<_, _>>()?
            };
            if infos.is_empty() {
                bail!("store {}: no runs to export", store.describe());
            }
            let mut all = Vec::new();
            // Oldest first, so an import replays history in order.
            for info in infos.iter().rev() {
                all.extend(store.run_records(&info.run_id)?);
            }
            write_records_jsonl(&out, &all)?;
            println!(
                "exported {} record(s) of {} run(s) to {}",
                all.len(),
                infos.len(),
                out.display()
            );
            Ok(())
        }
        RecordsCommand::Import { file, json } => {
            let records = read_records_jsonl(&file)?;
            let groups = group_by_run(records);
            let n: usize = groups.iter().map(Vec::len).sum();
            let outcomes = store.insert_runs(&groups)?;
            let ids_with = |want: InsertStatus| -> Vec<String> {
                outcomes
                    .iter()
                    .filter(|o| o.status == want)
                    .map(|o| o.run_id.clone())
                    .collect()
            };
            let (inserted, already_stored) = (
                ids_with(InsertStatus::Inserted),
                ids_with(InsertStatus::AlreadyStored),
            );
            if json {
                return print_json(&ImportJson {
                    schema_version: RECORDS_JSON_SCHEMA_VERSION,
                    store: store.describe(),
                    file: file.display().to_string(),
                    runs: outcomes.iter().map(|o| o.run_id.clone()).collect(),
                    inserted,
                    already_stored,
                    records: n,
                });
            }
            println!(
                "imported {n} record(s) in {} run(s) from {} into {}: {} new{}{}",
                outcomes.len(),
                file.display(),
                store.describe(),
                inserted.len(),
                if inserted.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", inserted.join(", "))
                },
                if already_stored.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", {} already stored with the same records, not written again ({})",
                        already_stored.len(),
                        already_stored.join(", ")
                    )
                }
            );
            Ok(())
        }
    }
}

/// Records grouped by run id, in first-seen order.
fn group_by_run(records: Vec<Record>) -> Vec<Vec<Record>> {
    let mut order: Vec<String> = Vec::new();
    let mut map: BTreeMap<String, Vec<Record>> = BTreeMap::new();
    for r in records {
        if !map.contains_key(&r.run_id) {
            order.push(r.run_id.clone());
        }
        map.entry(r.run_id.clone()).or_default().push(r);
    }
    order.into_iter().filter_map(|id| map.remove(&id)).collect()
}

fn labels_text(l: &BTreeMap<String, String>) -> String {
    l.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn device_text(r: &Record) -> String {
    match &r.device.gpu {
        Some(g) => format!("gpu {}", g.name),
        None => r.device.kind.clone(),
    }
}

/// `YYYY-MM-DD HH:MM:SSZ` for Unix seconds.
fn utc(secs: i64) -> String {
    tensorforge_store::time::utc_text(secs)
}

/// `ingest` arguments.
#[derive(Args, Debug)]
pub struct IngestArgs {
    /// File format: pytest-benchmark, google-benchmark, criterion (sample.json) or hyperfine.
    pub format: String,
    /// The file to read.
    pub file: PathBuf,
    /// Workload kind (e.g. gemm, conv2d, kernel).
    #[arg(long)]
    pub workload_kind: String,
    /// Workload display name (not part of the fingerprint).
    #[arg(long)]
    pub workload_name: String,
    /// Identity parameter KEY=VALUE (repeatable); integers, floats and true/false become
    /// JSON numbers and booleans, anything else a string.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Element type (e.g. f32, bf16).
    #[arg(long)]
    pub dtype: String,
    /// Device kind the file was measured on.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "gpu"])]
    pub device_kind: String,
    /// GPU name for --device-kind gpu (e.g. "NVIDIA H100 80GB HBM3").
    #[arg(long)]
    pub gpu_name: Option<String>,
    /// Machine id to record instead of this host's (when the file was measured elsewhere).
    #[arg(long)]
    pub machine_id: Option<String>,
    /// Which benchmark of the file (test name, run name or command) when it holds several.
    #[arg(long, value_name = "NAME")]
    pub select: Option<String>,
    /// FLOPs per iteration (for FLOP/s).
    #[arg(long)]
    pub flops: Option<f64>,
    /// Bytes moved per iteration (for bytes/s).
    #[arg(long)]
    pub bytes: Option<f64>,
    /// Label NAME=VALUE (repeatable); `label=X` makes the run selectable as plain `X`.
    #[arg(long = "label", value_name = "NAME=VALUE")]
    pub labels: Vec<String>,
    /// Run id (default: a new one).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Store the record as a new run.
    #[arg(long)]
    pub record: bool,
    /// Store for --record: SQLite file or postgres:// URL (default as for `records`).
    #[arg(long, value_name = "PATH|URL")]
    pub store: Option<PathBuf>,
    /// Also write the record as JSON lines to this file.
    #[arg(long, value_name = "FILE.jsonl")]
    pub out: Option<PathBuf>,
    /// Print the record as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct IngestJson<'a> {
    schema_version: u32,
    stored_in: Option<String>,
    out: Option<String>,
    record: &'a Record,
}

/// Parse a `KEY=VALUE` identity parameter into a JSON value.
fn param_value(v: &str) -> serde_json::Value {
    if let Ok(i) = v.parse::<i64>() {
        return serde_json::json!(i);
    }
    if let Ok(u) = v.parse::<u64>() {
        return serde_json::json!(u);
    }
    match v {
        "true" => return serde_json::json!(true),
        "false" => return serde_json::json!(false),
        _ => {}
    }
    match v.parse::<f64>() {
        Ok(f) if f.is_finite() => serde_json::json!(f),
        _ => serde_json::json!(v),
    }
}

fn split_kv<'a>(s: &'a str, flag: &str) -> Result<(&'a str, &'a str)> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim(), v)),
        _ => bail!("invalid value for `{flag}`: `{s}` (expected KEY=VALUE with a non-empty KEY)"),
    }
}

/// Run `ingest`.
pub fn run_ingest(a: IngestArgs) -> Result<()> {
    let format = IngestFormat::parse(&a.format)?;
    for (flag, v) in [
        ("--workload-kind", &a.workload_kind),
        ("--workload-name", &a.workload_name),
        ("--dtype", &a.dtype),
    ] {
        if v.trim().is_empty() {
            bail!("invalid value for `{flag}`: `` (must not be empty)");
        }
    }
    let mut params = BTreeMap::new();
    for p in &a.params {
        let (k, v) = split_kv(p, "--param")?;
        if params.insert(k.to_string(), param_value(v)).is_some() {
            bail!("invalid value for `--param`: `{p}` (key `{k}` given twice)");
        }
    }
    let mut labels = BTreeMap::new();
    for l in &a.labels {
        let (k, v) = split_kv(l, "--label")?;
        labels.insert(k.to_string(), v.to_string());
    }
    for (flag, v) in [("--flops", a.flops), ("--bytes", a.bytes)] {
        if let Some(x) = v {
            if !x.is_finite() || x < 0.0 {
                bail!("invalid value for `{flag}`: `{x}` (expected a finite, non-negative number)");
            }
        }
    }
    if a.gpu_name.is_some() && a.device_kind != "gpu" {
        bail!("invalid value for `--gpu-name`: it needs `--device-kind gpu`");
    }
    let file = a.file.display().to_string();
    let bytes = std::fs::read(&a.file).with_context(|| format!("{file}: cannot read file"))?;
    let text =
        String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{file}: file is not valid UTF-8"))?;
    let mut device = tensorforge_measure::context::device_context(1);
    device.kind = a.device_kind.clone();
    if a.device_kind == "gpu" {
        device.gpu = Some(GpuContext {
            name: a.gpu_name.clone().unwrap_or_else(|| "unspecified".into()),
            ..Default::default()
        });
    }
    if let Some(m) = &a.machine_id {
        if m.trim().is_empty() {
            bail!("invalid value for `--machine-id`: `` (must not be empty)");
        }
        device.machine_id = m.clone();
    }
    let software = tensorforge_measure::context::software_context();
    let ctx = IngestContext {
        run_id: a.run_id.clone().unwrap_or_else(new_run_id),
        workload: WorkloadIdentity {
            kind: a.workload_kind.clone(),
            name: a.workload_name.clone(),
            params,
            dtype: a.dtype.clone(),
        },
        device,
        software,
        labels,
        timestamp_unix_s: tensorforge_store::time::now_unix_s(),
        flops: a.flops,
        bytes: a.bytes,
    };
    let record = ingest_record(format, &text, &file, a.select.as_deref(), ctx).map_err(|e| {
        // The library names its `select` input; here it is the --select flag.
        let several = matches!(&e, tensorforge_store::StoreError::InvalidField { reason, .. }
            if reason.starts_with("the file holds several benchmarks"));
        if several {
            anyhow::anyhow!("{e} (pass --select NAME)")
        } else {
            anyhow::Error::new(e)
        }
    })?;
    // All or nothing: the store is opened and the file staged before anything is
    // published; the file appears only once the run is in the store.
    let store = if a.record {
        Some(open_store(a.store.as_deref())?)
    } else {
        None
    };
    let mut staged = tensorforge_store::StagedWrite::new();
    if let Some(out) = &a.out {
        let text = tensorforge_store::records_jsonl_text(out, std::slice::from_ref(&record))?;
        staged.stage(out, text.as_bytes())?;
    }
    let stored_in = match &store {
        Some(store) => {
            store.insert_run(std::slice::from_ref(&record))?;
            Some(store.describe())
        }
        None => None,
    };
    staged.publish()?;
    if a.json {
        return print_json(&IngestJson {
            schema_version: RECORDS_JSON_SCHEMA_VERSION,
            stored_in,
            out: a.out.as_ref().map(|p| p.display().to_string()),
            record: &record,
        });
    }
    let s = &record.stats;
    println!(
        "{} `{}` from {file}: {} samples, p50 {}, p90 {}, min {}, max {}",
        record.source,
        record.workload.name,
        s.count,
        fmt::time(s.p50_ns * 1e-9),
        fmt::time(s.p90_ns * 1e-9),
        fmt::time(s.min_ns * 1e-9),
        fmt::time(s.max_ns * 1e-9),
    );
    println!("fingerprint {}  run {}", record.fingerprint, record.run_id);
    if let Some(note) = &record.harness.note {
        println!("note: {note}");
    }
    match (&stored_in, &a.out) {
        (None, None) => {
            println!("not stored (pass --record to store it, --out FILE.jsonl to write it)")
        }
        _ => {
            if let Some(p) = &stored_in {
                println!("stored in {p}");
            }
            if let Some(o) = &a.out {
                println!("written to {}", o.display());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_parse_to_json_types() {
        assert_eq!(param_value("1024"), serde_json::json!(1024));
        assert_eq!(param_value("0.5"), serde_json::json!(0.5));
        assert_eq!(param_value("true"), serde_json::json!(true));
        assert_eq!(param_value("nn"), serde_json::json!("nn"));
        assert_eq!(param_value("NaN"), serde_json::json!("NaN"));
        assert!(split_kv("=3", "--param").is_err());
        assert!(split_kv("m", "--param").is_err());
        assert_eq!(utc(1_709_210_096), "2024-02-29 12:34:56Z");
    }
}
