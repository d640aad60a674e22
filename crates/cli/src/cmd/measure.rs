//! `bench`, `calibrate` and `validate`: thin wrappers over `tensorforge-measure`. Every
//! argument and input file is checked before anything runs, and files, store rows and plots
//! are written only after the work succeeded (files atomically), so bad input writes nothing.

use super::print_json;
use crate::fmt;
use crate::render::Table;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tensorforge_cuda::bench::{bench_gpu, GpuHarnessOptions};
use tensorforge_cuda::calibrate::{calibrate_gpu, GpuProfile};
use tensorforge_cuda::device::{DeviceSpec, Gpu};
use tensorforge_cuda::validate::{spec_lines, validate_gpu, HOLDOUT};
use tensorforge_measure::calibrate::{calibrate, probe_label, CalibrateOptions, Calibration};
use tensorforge_measure::context::{device_context, host_logical_cores, software_context};
use tensorforge_measure::counting::{count_suite, CountMode, CountOptions};
use tensorforge_measure::harness::{
    progress_bar, run_suite, HarnessOptions, DEFAULT_MAX_ITERATIONS,
};
use tensorforge_measure::plots;
use tensorforge_measure::validate::{
    embedded_holdout_suite, measure_and_validate, ValidationReport, ROOFLINE_PLUS_FLOOR,
};
use tensorforge_measure::workload::{parse_workload, WorkloadSpec};
use tensorforge_store::location::{is_missing_file, shown};
use tensorforge_store::{default_store_path, write_atomic, Record, Store};

/// Version of the JSON that `bench --json` and `calibrate --json` print.
const JSON_SCHEMA_VERSION: u32 = 1;

/// Time workloads on this machine's CPU.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Workloads: Core presets (gemm_tiny, conv_spatial, transformer_small,
    /// attention:transformer_small...), `gemm:m=M:n=N:k=K[:batch=B]`,
    /// `kernel:softmax:rows=R:cols=C`, `graph:attention_softmax[:mode=fused|unfused]` (see
    /// docs/measurement.md), `empty`, or a workload file (.toml).
    #[arg(required = true, num_args = 1..)]
    pub workloads: Vec<String>,
    /// Worker threads (default: every logical core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Minimum timed iterations (calls; short calls are timed in batches, each call counts).
    #[arg(long, default_value_t = 10)]
    pub iterations: u64,
    /// Minimum timed duration per workload, ms (both minimums must be met).
    #[arg(long, default_value_t = 200)]
    pub time_budget_ms: u64,
    /// Untimed warm-up iterations.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// Do not rotate input buffers (results may be cache-warm; the record says so).
    #[arg(long)]
    pub no_rotate: bool,
    /// Insert the records into the store as one run.
    #[arg(long)]
    pub record: bool,
    /// Count instructions and estimated cycles per iteration with valgrind's callgrind and
    /// its cache simulator (metrics a busy machine does not move; single-threaded; N counted
    /// iterations after one warm-up, default 1). On by default with --record.
    #[arg(long, visible_alias = "instructions", value_name = "N", num_args = 0..=1, default_missing_value = "1")]
    pub counts: Option<u64>,
    /// With --record: do not count (the records then gate on time only).
    #[arg(long, conflicts_with = "counts")]
    pub no_counts: bool,
    /// Store: SQLite file or postgres:// URL (implies --record; default: $TENSORFORGE_STORE or the XDG data dir).
    #[arg(long, value_name = "PATH|URL")]
    pub store: Option<PathBuf>,
    /// Label K=V added to every record (repeatable).
    #[arg(long = "label", value_name = "K=V")]
    pub labels: Vec<String>,
    /// Print the records as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where to run: `cpu` (default) or `cuda[:N]` (an NVIDIA GPU: workloads
    /// `gemm:m=M:n=N:k=K[:dtype=fp32|tf32|fp16|bf16|fp8]` through cuBLAS (fp8: e4m3 through
    /// cuBLASLt, bf16 out, B stored [n, k]),
    /// `kernel:softmax|logaddexp|rmsnorm|swiglu|quantize:rows=R:cols=C[:dtype=fp32|fp16|bf16]`
    /// as generated CUDA (dtype: the tensors' storage),
    /// `rmsnorm_swiglu:tokens=T:d=D:f=F` (generated kernels around cuBLAS), `graph:NAME`
    /// (a whole program on the GPU),
    /// `copy:bytes=B`; docs/gpu.md).
    #[arg(long, default_value = "cpu", value_name = "cpu|cuda[:N]")]
    pub device: String,
}

/// Measure this CPU's ceilings and write a device profile.
#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// Threads of the profile (default: every logical core); probes also run on 1 thread.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write the profile (hardware-file TOML) here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Store: SQLite file or postgres:// URL (default: $TENSORFORGE_STORE or the XDG data dir).
    #[arg(long, value_name = "PATH|URL")]
    pub store: Option<PathBuf>,
    /// Fewer, shorter samples (about 10 s instead of about 40 s on 2 cores).
    #[arg(long)]
    pub quick: bool,
    /// Do not insert the profile into the store (only --out).
    #[arg(long)]
    pub no_store: bool,
    /// Print profile and provenance as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where to calibrate: `cpu` (default) or `cuda[:N]` (GPU probes; the profile is JSON,
    /// written with --out, not stored).
    #[arg(long, default_value = "cpu", value_name = "cpu|cuda[:N]")]
    pub device: String,
}

/// Predict a holdout suite from a calibrated profile and compare with measurement.
#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Profile TOML written by `calibrate` (default: the store's latest for this machine).
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Holdout workload file (default: the embedded examples/holdout.toml).
    #[arg(long)]
    pub workloads: Option<PathBuf>,
    /// Store (SQLite file or postgres:// URL) for the default profile and --record.
    #[arg(long, value_name = "PATH|URL")]
    pub store: Option<PathBuf>,
    /// Insert the measured records into the store as one run.
    #[arg(long)]
    pub record: bool,
    /// Minimum timed iterations per workload.
    #[arg(long, default_value_t = 10)]
    pub iterations: u64,
    /// Minimum timed duration per workload, ms.
    #[arg(long, default_value_t = 200)]
    pub time_budget_ms: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write roofline.svg and predicted_vs_measured.svg into this directory.
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// Where to validate: `cpu` (default) or `cuda[:N]` (needs --profile from `calibrate
    /// --device cuda --out`; --workloads is then a file of GPU specs, one per line).
    #[arg(long, default_value = "cpu", value_name = "cpu|cuda[:N]")]
    pub device: String,
}

fn threads_arg(t: Option<usize>) -> Result<usize> {
    match t {
        Some(0) => bail!("invalid `--threads` = `0`: must be at least 1"),
        Some(n) if n > 4096 => bail!("invalid `--threads` = `{n}`: must be at most 4096"),
        Some(n) => Ok(n),
        None => Ok(host_logical_cores().max(1) as usize),
    }
}

fn parse_labels(labels: &[String]) -> Result<BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for l in labels {
        match l.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                m.insert(k.trim().to_string(), v.to_string());
            }
            _ => bail!("invalid `--label` = `{l}`: expected KEY=VALUE with a non-empty key"),
        }
    }
    Ok(m)
}

fn check_parent(path: &Path, flag: &str) -> Result<()> {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.is_dir() => bail!(
            "invalid `{flag}` = `{}`: directory {} does not exist",
            path.display(),
            d.display()
        ),
        _ if path.is_dir() => bail!("invalid `{flag}` = `{}`: is a directory", path.display()),
        _ => Ok(()),
    }
}

fn store_path(p: &Option<PathBuf>) -> PathBuf {
    p.clone().unwrap_or_else(default_store_path)
}

fn parse_all(args: &[String]) -> Result<Vec<WorkloadSpec>> {
    let mut v = Vec::new();
    for a in args {
        v.extend(parse_workload(a)?);
    }
    Ok(v)
}

fn opt_rate(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".into())
}

fn records_table(records: &[Record]) -> String {
    let counted = records
        .iter()
        .any(|r| r.counts.is_some() || r.instructions.is_some());
    let mut headers = vec![
        "workload",
        "p50",
        "p90",
        "min",
        "samples",
        "batch",
        "FLOP/s",
        "bytes/s",
        "peak alloc",
        "rotating",
    ];
    if counted {
        headers.extend(["instructions", "est. cycles"]);
    }
    let mut t = Table::new(&headers);
    for r in records {
        let mut counts = Vec::new();
        if counted {
            counts.push(opt_rate(r.instructions, |v| fmt::count(v, "")));
            counts.push(opt_rate(
                r.counts.as_ref().map(|c| c.estimated_cycles),
                |v| fmt::count(v, ""),
            ));
        }
        let mut row = vec![
            r.workload.name.clone(),
            fmt::time(r.stats.p50_ns * 1e-9),
            fmt::time(r.stats.p90_ns * 1e-9),
            fmt::time(r.stats.min_ns * 1e-9),
            r.stats.count.to_string(),
            r.harness.batch_iterations.to_string(),
            opt_rate(r.throughput.flops_per_s, |v| fmt::rate(v, "FLOP")),
            opt_rate(r.throughput.bytes_per_s, fmt::bandwidth),
            opt_rate(r.peak_alloc_bytes.map(|b| b as f64), fmt::bytes),
            if r.harness.rotating_buffers {
                "yes"
            } else {
                "no"
            }
            .into(),
        ];
        row.extend(counts);
        t.row(row);
    }
    t.render()
}

#[derive(Serialize)]
struct BenchJson<'a> {
    schema_version: u32,
    run_id: &'a str,
    stored_in: Option<String>,
    records: &'a [Record],
}

/// Arguments of the hidden `__count-instructions` (the child that callgrind runs).
#[derive(Args, Debug)]
pub struct CountArgs {
    /// The workload as JSON (written by the parent).
    pub spec: PathBuf,
    /// Counted iterations.
    #[arg(long, default_value_t = 3)]
    pub iterations: u64,
}

/// Run the counted region for callgrind (see `tensorforge_measure::instructions`).
pub fn run_count(a: CountArgs) -> Result<()> {
    let text = super::read_text(&a.spec.display().to_string())?;
    let spec: tensorforge_measure::WorkloadSpec = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a workload spec", a.spec.display()))?;
    tensorforge_measure::counting::run_counted(&spec, a.iterations)?;
    Ok(())
}

/// Run `tensorforge bench`.
pub fn run_bench(a: BenchArgs) -> Result<()> {
    if let DeviceSpec::Cuda(n) = DeviceSpec::parse(&a.device)? {
        return run_bench_gpu(a, n);
    }
    let threads = threads_arg(a.threads)?;
    let labels = parse_labels(&a.labels)?;
    if a.iterations == 0 {
        bail!("invalid `--iterations` = `0`: must be at least 1");
    }
    let suite = parse_all(&a.workloads)?;
    let record = a.record || a.store.is_some();
    let opts = HarnessOptions {
        warmup_iterations: a.warmup,
        min_iterations: a.iterations,
        time_budget_ns: a.time_budget_ms.saturating_mul(1_000_000),
        max_iterations: a.iterations.max(DEFAULT_MAX_ITERATIONS),
        rotate: !a.no_rotate,
        labels,
        ..HarnessOptions::new(threads)
    };
    let mut records = run_suite(&suite, &opts, &mut |_| {})?;
    let mode = match (a.counts, record && !a.no_counts) {
        (Some(0), _) => bail!("invalid `--counts` = `0`: must be at least 1"),
        (Some(_), _) => CountMode::Required,
        (None, true) => CountMode::Auto,
        (None, false) => CountMode::Off,
    };
    let mut copts = CountOptions::new(
        std::env::current_exe()?,
        host_logical_cores().max(1) as usize,
    );
    copts.iterations = a.counts.unwrap_or(1);
    let counted = count_suite(&suite, &mut records, mode, &copts, &|_| {})?;
    let mut stored_in = None;
    if record {
        let store = Store::open(&store_path(&a.store))?;
        store.insert_run(&records)?;
        stored_in = Some(store.describe());
    }
    if a.json {
        return print_json(&BenchJson {
            schema_version: JSON_SCHEMA_VERSION,
            run_id: &opts.run_id,
            stored_in,
            records: &records,
        });
    }
    let d = &records[0].device;
    println!(
        "{} ({} logical cores), {threads} thread(s), run {}",
        d.cpu_model, d.logical_cores, opts.run_id
    );
    print!("{}", records_table(&records));
    if let (Some(res), Some(over)) = (
        records[0].harness.timer_resolution_ns,
        records[0].harness.overhead_ns,
    ) {
        println!(
            "clock: resolution {}, one timed empty call {}; a sample is a batch of calls spanning at least 1000x the resolution, reported per call",
            fmt::time(res * 1e-9),
            fmt::time(over * 1e-9)
        );
    }
    for r in &records {
        if let Some(n) = &r.harness.note {
            println!("note [{}]: {n}", r.workload.name);
        }
    }
    if let Some(line) = counted.describe() {
        println!("counts: {line}");
    }
    for r in &records {
        if let Some(c) = r.counts.as_ref().filter(|c| c.work_divisor > 1) {
            println!(
                "counts [{}]: per call of a smaller instance of the same code path ({}, 1/{} of the work)",
                r.workload.name, c.instance, c.work_divisor
            );
        }
        if let Some(e) = &r.count_error {
            println!("counts [{}]: ERROR {e}", r.workload.name);
        }
        if let Some(w) = &r.injected_work {
            println!(
                "injected [{}]: {} (TENSORFORGE_INJECT_EXTRA_WORK)",
                r.workload.name,
                w.describe()
            );
        }
    }
    if let Some(p) = stored_in {
        println!("recorded {} record(s) in {p}", records.len());
    }
    Ok(())
}

#[derive(Serialize)]
struct CalibrateJson<'a> {
    schema_version: u32,
    profile_id: &'a str,
    stored_in: Option<String>,
    written_to: Option<String>,
    calibration: &'a Calibration,
}

/// Run `tensorforge calibrate`.
pub fn run_calibrate(a: CalibrateArgs) -> Result<()> {
    if let DeviceSpec::Cuda(n) = DeviceSpec::parse(&a.device)? {
        return run_calibrate_gpu(a, n);
    }
    let threads = threads_arg(a.threads)?;
    if let Some(o) = &a.out {
        check_parent(o, "--out")?;
    }
    if a.no_store && a.out.is_none() {
        bail!("invalid `--no-store` without `--out`: the profile would be written nowhere");
    }
    let opts = CalibrateOptions::new(threads, a.quick);
    let bar = progress_bar(opts.steps(), true);
    let cal = calibrate(&opts, &mut |m| {
        bar.set_message(m.to_string());
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    let toml = cal.to_toml()?;
    // Parse back what we are about to write: the file must be a valid hardware file.
    Calibration::from_toml_str(&toml, "calibrated profile")?;
    let profile_id = format!("{}-{}", cal.profile.name, tensorforge_store::new_run_id());
    let mut written_to = None;
    if let Some(o) = &a.out {
        write_atomic(o, toml.as_bytes())?;
        written_to = Some(o.display().to_string());
    }
    let mut stored_in = None;
    if !a.no_store {
        let store = Store::open(&store_path(&a.store))?;
        store.insert_profile(
            &profile_id,
            &cal.provenance.machine_id,
            &toml,
            &cal.provenance_json()?,
        )?;
        stored_in = Some(store.describe());
    }
    if a.json {
        return print_json(&CalibrateJson {
            schema_version: JSON_SCHEMA_VERSION,
            profile_id: &profile_id,
            stored_in,
            written_to,
            calibration: &cal,
        });
    }
    let p = &cal.provenance;
    println!(
        "{} — {} ({} logical cores), machine_id {}, {} mode, {:.1} s",
        cal.profile.name,
        p.device.cpu_model,
        p.device.logical_cores,
        p.machine_id,
        p.mode,
        p.duration_s
    );
    let mut t = Table::new(&["probe", "threads", "best", "median", "samples"]);
    for pr in &p.probes {
        let f = |v: f64| {
            if pr.unit == "bytes_per_s" {
                fmt::bandwidth(v)
            } else {
                fmt::rate(v, "FLOP")
            }
        };
        t.row(vec![
            probe_label(pr),
            pr.threads.to_string(),
            f(pr.best),
            f(pr.median),
            pr.samples.len().to_string(),
        ]);
    }
    print!("{}", t.render());
    for n in cal
        .profile
        .notes
        .iter()
        .filter(|n| !n.starts_with("provenance_json"))
    {
        println!("note: {n}");
    }
    if let Some(w) = written_to {
        println!("profile written to {w}");
    }
    if let Some(s) = stored_in {
        println!("profile {profile_id} stored in {s}");
    }
    Ok(())
}

fn load_profile(a: &ValidateArgs) -> Result<(Calibration, String)> {
    if let Some(p) = &a.profile {
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("cannot read profile {}", p.display()))?;
        let src = p.display().to_string();
        return Ok((Calibration::from_toml_str(&text, &src)?, src));
    }
    let path = store_path(&a.store);
    let machine = device_context(1).machine_id;
    let missing = || {
        anyhow::anyhow!(
            "no calibrated profile for this machine (machine_id {machine}) in store {}; run `tensorforge calibrate` first (or pass --profile FILE)",
            shown(&path)
        )
    };
    if is_missing_file(&path) {
        return Err(missing());
    }
    let store = Store::open(&path)?;
    let (id, text) = store.latest_profile(&machine)?.ok_or_else(missing)?;
    let src = format!("{id} (store {})", store.describe());
    Ok((Calibration::from_toml_str(&text, &src)?, src))
}

use tensorforge_measure::validation_table::{
    ceiling_violation_lines, validation_rows, VALIDATION_HEADERS,
};

fn report_text(r: &ValidationReport) -> String {
    let mut out = format!(
        "validation of {} ({} threads): fp32 peak {}, DRAM {}, floor {}\n",
        r.profile,
        r.threads,
        fmt::rate(r.peak_flops_per_s, "FLOP"),
        fmt::bandwidth(r.dram_bandwidth_bytes_per_s),
        r.floor_s.map(fmt::time).unwrap_or_else(|| "-".into())
    );
    let mut t = Table::new(&VALIDATION_HEADERS);
    for row in validation_rows(r) {
        t.row(row);
    }
    out.push_str(&t.render());
    for line in ceiling_violation_lines(r) {
        out.push_str(&line);
        out.push('\n');
    }
    if !r.ceiling_violations.is_empty() {
        out.push_str(&format!(
            "{} of {} workloads beat their roofline lower bound: the model's errors below are not evidence until the calibration covers them (re-run `tensorforge calibrate`)\n",
            r.ceiling_violations.len(),
            r.rows.len()
        ));
    }
    out.push_str("summary (absolute percentage error):\n");
    for v in &r.variants {
        out.push_str(&format!(
            "  {:<15} median {:.1} %, mean {:.1} %, max {:.1} %  — {}\n",
            v.label, v.median_ape_pct, v.mean_ape_pct, v.max_ape_pct, v.description
        ));
    }
    if !r.variants.iter().any(|v| v.label == ROOFLINE_PLUS_FLOOR) {
        out.push_str("  (no floor measured: roofline+floor variant omitted)\n");
    }
    out.push_str("limitations (what the roofline omits):\n");
    for l in &r.limitations {
        out.push_str(&format!("  - {l}\n"));
    }
    out
}

/// Run `tensorforge validate`.
pub fn run_validate(a: ValidateArgs) -> Result<()> {
    if let DeviceSpec::Cuda(n) = DeviceSpec::parse(&a.device)? {
        return run_validate_gpu(a, n);
    }
    if let Some(d) = &a.plots {
        if d.exists() && !d.is_dir() {
            bail!("invalid `--plots` = `{}`: not a directory", d.display());
        }
    }
    if a.iterations == 0 {
        bail!("invalid `--iterations` = `0`: must be at least 1");
    }
    let suite = match &a.workloads {
        Some(p) => parse_workload(&p.display().to_string())?,
        None => embedded_holdout_suite()?,
    };
    let (cal, src) = load_profile(&a)?;
    // Refuse a foreign profile or an overlapping suite before measuring anything.
    cal.check_compatible(
        &device_context(cal.provenance.threads),
        &software_context(),
        &src,
    )?;
    cal.check_no_overlap(&suite)?;
    let opts = HarnessOptions {
        min_iterations: a.iterations,
        time_budget_ns: a.time_budget_ms.saturating_mul(1_000_000),
        max_iterations: a.iterations.max(DEFAULT_MAX_ITERATIONS),
        ..HarnessOptions::new(cal.provenance.threads as usize)
    };
    let (report, records) = measure_and_validate(&cal, &src, &suite, &opts, &mut |_| {})?;
    let svgs = if a.plots.is_some() {
        Some((
            plots::roofline_svg(&report)?,
            plots::predicted_vs_measured_svg(&report)?,
        ))
    } else {
        None
    };
    if a.record {
        Store::open(&store_path(&a.store))?.insert_run(&records)?;
    }
    let mut written = Vec::new();
    if let (Some(dir), Some((roof, pvm))) = (&a.plots, svgs) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create plot directory {}", dir.display()))?;
        let files: Vec<(std::path::PathBuf, String)> =
            [("roofline.svg", roof), ("predicted_vs_measured.svg", pvm)]
                .into_iter()
                .map(|(name, svg)| (dir.join(name), svg))
                .collect();
        tensorforge_store::write_all_atomic(&files)?;
        written.extend(files.iter().map(|(p, _)| p.display().to_string()));
    }
    if a.json {
        for line in ceiling_violation_lines(&report) {
            eprintln!("warning: {line}");
        }
        return print_json(&report);
    }
    print!("{}", report_text(&report));
    for w in written {
        println!("plot written to {w}");
    }
    Ok(())
}

/// `bench --device cuda[:N]`: flags that only mean something on the CPU are refused.
fn run_bench_gpu(a: BenchArgs, ordinal: usize) -> Result<()> {
    for (given, flag) in [
        (a.threads.is_some(), "--threads"),
        (a.counts.is_some(), "--counts"),
        (a.no_counts, "--no-counts"),
    ] {
        if given {
            bail!(
                "invalid `{flag}` with `--device {}`: it applies to the CPU only",
                a.device
            );
        }
    }
    if a.iterations == 0 {
        bail!("invalid `--iterations` = `0`: must be at least 1");
    }
    let labels = parse_labels(&a.labels)?;
    let record = a.record || a.store.is_some();
    let opts = GpuHarnessOptions {
        warmup: a.warmup,
        min_iterations: a.iterations,
        time_budget_ns: a.time_budget_ms.saturating_mul(1_000_000),
        flush_l2: !a.no_rotate,
        run_id: tensorforge_store::new_run_id(),
        labels,
    };
    let report = bench_gpu(ordinal, &a.workloads, &opts)?;
    let mut stored_in = None;
    if record {
        let store = Store::open(&store_path(&a.store))?;
        store.insert_run(&report.records)?;
        stored_in = Some(store.describe());
    }
    if a.json {
        return print_json(&report);
    }
    let g = &report.gpu;
    println!(
        "{} ({}, compute capability {}.{}, {} SMs), run {}",
        g.name, g.uuid, g.compute_capability.0, g.compute_capability.1, g.sm_count, opts.run_id
    );
    print!("{}", records_table(&report.records));
    for b in &report.bandwidth {
        println!(
            "bandwidth [{}]: {}, {:.0} % of a copy of the same bytes ({}) in this run",
            b.workload,
            fmt::bandwidth(b.bytes_per_s),
            b.fraction_of_copy * 100.0,
            fmt::bandwidth(b.copy_bytes_per_s)
        );
    }
    if let Some(p) = stored_in {
        println!("recorded {} record(s) in {p}", report.records.len());
    }
    Ok(())
}

/// `calibrate --device cuda[:N]`.
fn run_calibrate_gpu(a: CalibrateArgs, ordinal: usize) -> Result<()> {
    if a.threads.is_some() {
        bail!(
            "invalid `--threads` with `--device {}`: it applies to the CPU only",
            a.device
        );
    }
    if a.store.is_some() {
        bail!(
            "invalid `--store` with `--device {}`: GPU profiles are written with --out, not stored",
            a.device
        );
    }
    if let Some(o) = &a.out {
        check_parent(o, "--out")?;
    }
    let gpu = Gpu::open(ordinal)?;
    let p = calibrate_gpu(&gpu, a.quick)?;
    let json = serde_json::to_string_pretty(&p)?;
    if let Some(o) = &a.out {
        write_atomic(o, json.as_bytes())?;
    }
    if a.json {
        println!("{json}");
        return Ok(());
    }
    println!("{} ({})", p.gpu.name, p.gpu.uuid);
    println!(
        "HBM copy (read + write): {}",
        fmt::bandwidth(p.hbm_copy_bytes_per_s)
    );
    println!(
        "L2 read:                 {}",
        fmt::bandwidth(p.l2_read_bytes_per_s)
    );
    println!(
        "fp32 FMA peak:           {}",
        fmt::rate(p.fp32_fma_flops_per_s, "FLOP")
    );
    for (d, r) in &p.gemm_flops_per_s {
        println!("cuBLAS GEMM {d:>4}:        {}", fmt::rate(*r, "FLOP"));
    }
    println!(
        "launch floor (median):   {}",
        fmt::time(p.launch_floor_ns * 1e-9)
    );
    if let Some(o) = &a.out {
        println!("wrote {}", o.display());
    }
    Ok(())
}

/// `validate --device cuda[:N]`.
fn run_validate_gpu(a: ValidateArgs, ordinal: usize) -> Result<()> {
    if a.plots.is_some() {
        bail!(
            "invalid `--plots` with `--device {}`: GPU validation has no plots yet",
            a.device
        );
    }
    if a.iterations == 0 {
        bail!("invalid `--iterations` = `0`: must be at least 1");
    }
    let Some(pp) = &a.profile else {
        bail!(
            "missing `--profile`: `validate --device {}` needs the profile `calibrate --device {} --out FILE` wrote",
            a.device,
            a.device
        );
    };
    let src = pp.display().to_string();
    let text = std::fs::read_to_string(pp).with_context(|| format!("{src}: cannot read file"))?;
    let profile = GpuProfile::from_json_str(&text, &src)?;
    let specs: Vec<String> = match &a.workloads {
        Some(w) => {
            let ws = w.display().to_string();
            let t =
                std::fs::read_to_string(w).with_context(|| format!("{ws}: cannot read file"))?;
            spec_lines(&t)
        }
        None => HOLDOUT.iter().map(|s| s.to_string()).collect(),
    };
    let opts = GpuHarnessOptions {
        warmup: 3,
        min_iterations: a.iterations,
        time_budget_ns: a.time_budget_ms.saturating_mul(1_000_000),
        flush_l2: true,
        run_id: tensorforge_store::new_run_id(),
        labels: BTreeMap::new(),
    };
    let gpu = Gpu::open(ordinal)?;
    let report = validate_gpu(&gpu, &profile, &specs, &opts)?;
    if a.record {
        let store = Store::open(&store_path(&a.store))?;
        store.insert_run(&report.records)?;
    }
    if a.json {
        return print_json(&report);
    }
    println!("{} ({}), profile {src}", report.gpu.name, report.gpu.uuid);
    let mut t = Table::new(&[
        "workload",
        "bound",
        "predicted",
        "measured p50",
        "error",
        "one roof",
    ]);
    for r in &report.rows {
        t.row(vec![
            r.workload.clone(),
            r.bound.label().to_string(),
            fmt::time(r.predicted_s),
            fmt::time(r.measured_p50_s),
            format!("{:+.1} %", r.error_pct),
            if r.one_roof_binds {
                "yes".into()
            } else {
                "no".into()
            },
        ]);
    }
    print!("{}", t.render());
    for r in &report.rows {
        if let Some(c) = &r.likely_cause {
            println!("disagreement expected [{}]: {c}", r.workload);
        }
    }
    if let Some(m) = report.single_roof_mape_pct {
        println!(
            "one roof binds: {} of {} rows within 15 %, mean |error| {m:.1} %",
            report.single_roof_within_tolerance, report.single_roof_rows
        );
    }
    Ok(())
}
