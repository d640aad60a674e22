//! `gate`, `report` and `history`: have `tensorforge_job::baseline` choose the records of
//! each side (a JSON-lines file, a stored run, or the history of comparable runs), call
//! `tensorforge-ops`, print. `gate` chooses its exit status (0 pass, 1 policy failure,
//! 2 error, 3 inconclusive); every operational error returns `Err` and exits 2.

use super::{load_hw_file, print_json, read_text};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use tensorforge_core::{presets, HardwareSpec};
use tensorforge_job::baseline::{resolve_history, resolve_side};
use tensorforge_ops::report::HtmlSection;
use tensorforge_ops::{
    gate, history, render_html, render_markdown, Date, GateResult, Metric, Policy, Report,
};
use tensorforge_store::location::{is_missing_file, shown};
use tensorforge_store::{default_store_path, read_records_jsonl, write_atomic, Record, Store};

/// Where the two sides come from, and under which policy.
#[derive(Args, Debug, Clone)]
pub struct SidesArgs {
    /// Baseline: a JSON-lines records file (several runs in it are a history), or a run
    /// selector in the store (run id, label, `latest`).
    #[arg(long, value_name = "RUN|FILE", required_unless_present = "history")]
    pub baseline: Option<String>,
    /// Instead of --baseline: gate each candidate workload against its last N runs in the
    /// store on the same machine at the same thread count (the between-run history).
    #[arg(long, value_name = "N", conflicts_with = "baseline")]
    pub history: Option<usize>,
    /// Candidate: a JSON-lines records file, or a run selector in the store.
    #[arg(long, value_name = "RUN|FILE")]
    pub candidate: String,
    /// Policy TOML (default: the embedded policy, examples/policy.toml).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<String>,
    /// Store for run selectors: SQLite file or postgres:// URL (default: $TENSORFORGE_STORE or the XDG data dir).
    #[arg(long, value_name = "PATH|URL")]
    pub store: Option<PathBuf>,
    /// Restrict `latest` and label selectors to this machine id.
    #[arg(long, value_name = "ID")]
    pub machine: Option<String>,
    /// Date waivers are checked against, YYYY-MM-DD (default: today, UTC).
    #[arg(long, value_name = "DATE")]
    pub today: Option<String>,
}

/// Arguments of `tensorforge gate`.
#[derive(Args, Debug)]
pub struct GateArgs {
    #[command(flatten)]
    pub sides: SidesArgs,
    /// Print the gate result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the Markdown report to FILE.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
}

struct Loaded {
    policy: Policy,
    baseline: Vec<Record>,
    candidate: Vec<Record>,
    today: Date,
}

fn load(a: &SidesArgs) -> Result<Loaded> {
    let policy = match &a.policy {
        Some(f) => Policy::from_toml_str(&read_text(f)?, f)?,
        None => Policy::default_embedded(),
    };
    let today = match &a.today {
        Some(t) => Date::parse(t, "--today", "today")?,
        None => Date::today_utc(),
    };
    // Which records each side is: the library's one baseline rule (tensorforge_job::baseline).
    let store = a.store.clone().unwrap_or_else(default_store_path);
    let machine = a.machine.as_deref();
    let candidate = resolve_side(&a.candidate, &store, machine, "--candidate")?;
    let baseline = match (&a.baseline, a.history) {
        (Some(b), _) => resolve_side(b, &store, machine, "--baseline")?,
        (None, Some(n)) => resolve_history(n, &store, &candidate, "--history")?,
        (None, None) => bail!("--baseline or --history is required"),
    };
    Ok(Loaded {
        policy,
        baseline,
        candidate,
        today,
    })
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    write_atomic(path, text.as_bytes())?;
    Ok(())
}

fn print_human(g: &GateResult) {
    use tensorforge_ops::markup::one_line;
    // User strings (workload names, the policy path, reasons quoting them) on one line each:
    // a newline inside one cannot forge a line such as `gate: PASS`.
    println!(
        "gate: {} (exit {}) — policy {}",
        g.overall.label(),
        g.exit_code,
        one_line(&g.policy_source)
    );
    for r in &g.reasons {
        println!("  {}", one_line(r));
    }
    for r in &g.rows {
        if r.verdict != tensorforge_ops::Verdict::NotComparable {
            println!(
                "  {:<24} {:<14} {:<14} {}",
                one_line(&r.workload),
                r.metric_name(),
                r.verdict.label(),
                r.change_relative
                    .map(|c| format!("{:+.1} %", c * 100.0))
                    .unwrap_or_default()
            );
        }
    }
}

/// Run the gate; the returned code is the process exit status.
pub fn run_gate(a: GateArgs) -> Result<u8> {
    let l = load(&a.sides)?;
    let g = gate(&l.policy, &l.baseline, &l.candidate, l.today);
    if let Some(md) = &a.markdown {
        let report = Report::new(g.clone(), &l.baseline, &l.candidate, None);
        write_file(md, &render_markdown(&report))?;
    }
    if a.json {
        print_json(&g)?;
    } else {
        print_human(&g);
    }
    Ok(g.exit_code())
}

/// Arguments of `tensorforge report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    pub sides: SidesArgs,
    /// Calibrated device profile or hardware file (TOML or JSON) for the model context.
    #[arg(long, value_name = "P.toml", conflicts_with = "hw")]
    pub profile: Option<String>,
    /// Hardware preset for the model context.
    #[arg(long, value_name = "H")]
    pub hw: Option<String>,
    /// Write report.md, report.html and report.json into DIR.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// Write the Markdown report to FILE.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Write the HTML report to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Write the impact report (the decision is printed; the exit status is 0 whatever it is).
pub fn run_report(a: ReportArgs) -> Result<()> {
    if a.out_dir.is_none() && a.markdown.is_none() && a.html.is_none() && a.json.is_none() {
        bail!("report: nothing to write; pass --out-dir DIR or --markdown/--html/--json FILE");
    }
    let hw: Option<HardwareSpec> = match (&a.profile, &a.hw) {
        (Some(p), _) => Some(load_hw_file(p)?),
        (None, Some(h)) => Some(presets::hardware(h)?),
        (None, None) => None,
    };
    let l = load(&a.sides)?;
    let g = gate(&l.policy, &l.baseline, &l.candidate, l.today);
    let report = Report::new(g, &l.baseline, &l.candidate, hw.as_ref());
    let extra: Vec<HtmlSection> = Vec::new();
    let mut targets: Vec<(PathBuf, String)> = Vec::new();
    if let Some(dir) = &a.out_dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create directory", dir.display()))?;
        targets.push((dir.join("report.md"), render_markdown(&report)));
        targets.push((dir.join("report.html"), render_html(&report, &extra)));
        targets.push((dir.join("report.json"), report.to_json()));
    }
    if let Some(p) = &a.markdown {
        targets.push((p.clone(), render_markdown(&report)));
    }
    if let Some(p) = &a.html {
        targets.push((p.clone(), render_html(&report, &extra)));
    }
    if let Some(p) = &a.json {
        targets.push((p.clone(), report.to_json()));
    }
    // All or nothing: every file is staged before any is published.
    tensorforge_store::write_all_atomic(&targets)?;
    for (p, _) in &targets {
        println!("wrote {}", p.display());
    }
    println!(
        "decision: {} (exit code of `gate` would be {})",
        report.gate.overall.label(),
        report.gate.exit_code
    );
    Ok(())
}

/// Arguments of `tensorforge history`.
#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// Workload name or fingerprint.
    pub workload: String,
    /// Metric: latency_p50, latency_p90, latency_p95, latency_p99, latency_mean, throughput, peak_alloc.
    #[arg(long, default_value = "latency_p50")]
    pub metric: String,
    /// Only records from this machine id.
    #[arg(long, value_name = "ID")]
    pub machine: Option<String>,
    /// Store: SQLite file or postgres:// URL (default: $TENSORFORGE_STORE or the XDG data dir).
    #[arg(long, value_name = "PATH|URL")]
    pub store: Option<PathBuf>,
    /// Read records from a JSON-lines file instead of the store.
    #[arg(long, value_name = "FILE", conflicts_with = "store")]
    pub records: Option<PathBuf>,
    /// Write the trend as SVG to FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Print a metric's history with change points.
pub fn run_history(a: HistoryArgs) -> Result<()> {
    let metric = Metric::parse(&a.metric).ok_or_else(|| {
        anyhow::anyhow!(
            "invalid value for `--metric`: `{}` (valid: {})",
            a.metric,
            Metric::ALL.map(|m| m.name()).join(", ")
        )
    })?;
    let records = match &a.records {
        Some(f) => read_records_jsonl(f)?,
        None => {
            let path = a.store.clone().unwrap_or_else(default_store_path);
            if is_missing_file(&path) {
                bail!(
                    "no store at {} (pass --store PATH or --records FILE)",
                    shown(&path)
                );
            }
            let st = Store::open(&path)?;
            // A name resolves to the fingerprints stored under it; a fingerprint to itself.
            let fps = st.fingerprints_named(&a.workload)?;
            let mut all = Vec::new();
            for fp in fps {
                all.extend(st.records_for_fingerprint(&fp, a.machine.as_deref())?);
            }
            all
        }
    };
    let h = history::history(&a.workload, &records, metric, a.machine.as_deref())?;
    if let Some(p) = &a.svg {
        write_file(p, &history::render_history_svg(&h))?;
    }
    if a.json {
        return print_json(&h);
    }
    println!(
        "{} ({}) — {} {} over {} run(s)",
        h.workload,
        &h.fingerprint[..h.fingerprint.len().min(12)],
        h.metric.name(),
        h.statistic.name(),
        h.points.len()
    );
    println!(
        "  {:<4} {:<28} {:<20} {:>16}  change",
        "#",
        "run",
        "time (UTC)",
        h.metric.name()
    );
    for (i, p) in h.points.iter().enumerate() {
        let mark = h
            .change_points
            .iter()
            .find(|c| c.index == i)
            .map(|c| format!("<- change point {:+.1} %", c.relative_change * 100.0))
            .unwrap_or_default();
        println!(
            "  {:<4} {:<28} {:<20} {:>16}  {}",
            i,
            p.run_id,
            tensorforge_store::time::utc_text(p.timestamp_unix_s),
            value_in_unit(p.value, &h.unit),
            mark
        );
    }
    println!(
        "  method: {} (σ = {}, penalty = {:.4e})",
        h.fit.method,
        value_in_unit(h.fit.sigma, &h.unit),
        h.fit.penalty
    );
    Ok(())
}

/// A history value in its unit, scaled: ns as time, bytes as binary sizes, rates with a
/// decimal prefix (the report's formatter).
fn value_in_unit(v: f64, unit: &str) -> String {
    tensorforge_ops::report::fmt_value(Some(v), unit)
}
