//! The main job, `tensorforge quickstart`: on this machine, with the defaults built into the
//! binary (holdout suite, policy), calibrate the CPU, measure the holdout suite, validate the
//! model against it, gate the run against the history of earlier quickstart runs on this
//! machine at the same thread count, write `report.md` and `report.html`, and record the run.
//! Which runs are that history is [`crate::baseline::labelled_history`]'s rule.
//!
//! Noise rules (docs/quickstart.md): the unit of replication is the run. The gate compares
//! this run with the distribution of the last `history.lookback` comparable runs (`run_t`),
//! so co-tenant drift between runs is part of the baseline's spread rather than a
//! regression; with fewer than `history.min_runs` runs nothing timed can FAIL. A workload
//! whose between-run test is FAIL or INCONCLUSIVE is measured again (at most
//! [`CONFIRMATION_ATTEMPTS`] times) and each re-measurement is one more candidate run, so a
//! real regression is confirmed and a burst is averaged away; every attempt is reported. The
//! store keeps the first measurement only, so history is not biased by re-measuring. The
//! machine's own speed is probed before and after measuring ([`crate::machine`]); when it
//! is slower than in the history by more than the allowance, timed FAILs become
//! INCONCLUSIVE ("machine drift"), since the build cannot be blamed for them.
//! Not controlled: what other tenants do, frequency scaling, and thread placement.

use crate::baseline::labelled_history;
use crate::error::{JobError, Result};
use crate::machine::{downgrade_for_drift, MachineState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Instant;
use tensorforge_measure::calibrate::{calibrate, CalibrateOptions};
use tensorforge_measure::context::{device_context, host_logical_cores};
use tensorforge_measure::counting::{count_suite, CountMode, CountOptions, CountOutcome};
use tensorforge_measure::harness::{run_suite, HarnessOptions};
use tensorforge_measure::plots;
use tensorforge_measure::validate::{embedded_holdout_suite, measure_and_validate, validate};
use tensorforge_measure::validation_table::{
    ceiling_violation_lines, validation_rows, VALIDATION_HEADERS,
};
use tensorforge_measure::{ValidationReport, WorkloadSpec};
use tensorforge_ops::{
    gate, render_html_with_lead, render_markdown_with_lead, Date, GateResult, HtmlBody,
    HtmlSection, Policy, Report, Verdict,
};
use tensorforge_store::{write_all_atomic, Store};

/// Label key that marks the runs this job records; the value is `quickstart-<threads>t`, so
/// the job gates only against its own runs at the same thread count.
pub const QUICKSTART_LABEL_KEY: &str = "job";

/// Most bytes the quickstart rotates input buffers across, per workload (64 MiB): beyond
/// the private caches, within what a VM places consistently from run to run (see
/// `HarnessOptions::max_rotating_bytes`); records say "partly cache-warm" where it binds.
pub const QUICKSTART_MAX_ROTATING_BYTES: u64 = 64 << 20;

/// How many times a suspect workload is measured again before the verdict stands.
pub const CONFIRMATION_ATTEMPTS: u32 = 2;

/// What to run.
#[derive(Clone, Debug)]
pub struct QuickstartOptions {
    /// The store (a SQLite file).
    pub store_path: PathBuf,
    /// Directory for report.md and report.html.
    pub out_dir: PathBuf,
    /// Worker threads for calibration and measurement.
    pub threads: usize,
    /// The gate policy.
    pub policy: Policy,
    /// Minimum timed duration per workload, ns.
    pub time_budget_ns: u64,
    /// Minimum timed iterations per workload.
    pub min_iterations: u64,
    /// Calibration settings (`threads` is overridden by [`QuickstartOptions::threads`]).
    pub calibration: CalibrateOptions,
    /// Whether to count instructions and estimated cycles with callgrind (the metrics that
    /// decide by default); `Auto` counts when valgrind runs here and says so otherwise.
    pub count_mode: CountMode,
    /// How to count: the `tensorforge` executable that has the `__count-instructions`
    /// command, iterations, parallel processes. `None` with a mode other than `Off`: nothing
    /// can be counted, and the job says so.
    pub count_options: Option<CountOptions>,
}

impl QuickstartOptions {
    /// Defaults: 1 thread, the embedded policy, 300 ms and 20 iterations per workload,
    /// counting when valgrind runs here (`count_options` must name the executable).
    pub fn new(store_path: PathBuf, out_dir: PathBuf) -> QuickstartOptions {
        QuickstartOptions {
            store_path,
            out_dir,
            threads: 1,
            policy: Policy::default_embedded(),
            time_budget_ns: 300_000_000,
            min_iterations: 20,
            calibration: CalibrateOptions::new(1, true),
            count_mode: CountMode::Auto,
            count_options: None,
        }
    }
}

/// Version of [`QuickstartOutcome`] as JSON (`quickstart --json`).
pub const QUICKSTART_OUTCOME_SCHEMA_VERSION: u32 = 1;

/// What the job found, for the caller to print.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QuickstartOutcome {
    /// Always [`QUICKSTART_OUTCOME_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The gate's exit status (0 also when the baseline was just established).
    pub exit_code: u8,
    /// One line: the decision and what it was gated against.
    pub decision: String,
    /// The gate's reasons (empty on the first run).
    pub reasons: Vec<String>,
    /// Runs of history the gate used.
    pub history_runs: usize,
    /// Confirmation notes, one per attempt.
    pub confirmations: Vec<String>,
    /// One line per holdout workload measured faster than its calibrated roof.
    pub ceiling_violations: Vec<String>,
    /// Median APE of the pure roofline.
    pub roofline_median_ape_pct: f64,
    /// Holdout workloads validated.
    pub validated_workloads: usize,
    /// The recorded run.
    pub run_id: String,
    /// The store the run was recorded in (a path, or a URL with its password redacted).
    pub store: String,
    /// report.md path.
    pub markdown_path: PathBuf,
    /// report.html path.
    pub html_path: PathBuf,
    /// Wall-clock seconds.
    pub duration_s: f64,
    /// What counting did, in one line (`None` when it was off).
    pub counting: Option<String>,
    /// One line per workload with a deliberately injected slowdown.
    pub injected: Vec<String>,
    /// The gate's full result (every row, which metrics decided); `None` on the first run,
    /// which starts the history and compares nothing.
    pub gate: Option<GateResult>,
}

/// Fingerprints of the workloads whose deciding run-level test says FAIL or INCONCLUSIVE
/// (with a p-value: "too little history" rows are not re-measured, since more measurement
/// of this build cannot add history; counts are not re-measured, they do not change).
pub(crate) fn suspects(g: &GateResult) -> BTreeSet<String> {
    g.rows
        .iter()
        .filter(|r| r.decides)
        .filter(|r| matches!(r.verdict, Verdict::Fail | Verdict::Inconclusive))
        .filter(|r| r.p_value.is_some())
        .map(|r| r.fingerprint.clone())
        .collect()
}

/// The line that reports confirmation attempt `attempt` of the workloads `names`.
pub(crate) fn confirmation_note(attempt: u32, g: &GateResult, names: &[String]) -> String {
    format!(
        "confirmation attempt {attempt}: {} against history ({}); measured again as one more candidate run: {}",
        g.overall.label(),
        g.reasons.join("; "),
        names.join(", ")
    )
}

/// The report folder must be a folder (or not exist yet), and the two reports must not be
/// folders in it.
pub(crate) fn check_out_dir(out_dir: &std::path::Path) -> Result<()> {
    if out_dir.exists() && !out_dir.is_dir() {
        return Err(JobError::invalid(
            "out_dir",
            out_dir.display(),
            "not a directory",
        ));
    }
    for name in ["report.md", "report.html"] {
        let p = out_dir.join(name);
        if p.is_dir() {
            return Err(JobError::invalid(
                "out_dir",
                out_dir.display(),
                format!(
                    "{} is a directory; the report cannot be written there",
                    p.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Check the options before anything is measured.
fn check(o: &QuickstartOptions) -> Result<()> {
    check_out_dir(&o.out_dir)?;
    if o.min_iterations == 0 {
        return Err(JobError::invalid("iterations", 0, "must be at least 1"));
    }
    let cores = host_logical_cores().max(1) as usize;
    if o.threads == 0 || o.threads > cores {
        return Err(JobError::invalid(
            "threads",
            o.threads,
            format!("must be between 1 and this machine's {cores} logical cores"),
        ));
    }
    Ok(())
}

/// Run the main job (see the module comment); `progress` receives one line per step.
pub fn run_quickstart(
    o: &QuickstartOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<QuickstartOutcome> {
    let started = Instant::now();
    check(o)?;
    let threads = o.threads;
    let label_value = format!("quickstart-{threads}t");
    let suite = embedded_holdout_suite()?;
    let store = Store::open(&o.store_path)?;
    let machine_id = device_context(threads as u32).machine_id;

    progress(&format!(
        "[1/6] calibrating this CPU on {threads} thread(s) (quick probes)"
    ));
    let cal_opts = CalibrateOptions {
        threads,
        ..o.calibration.clone()
    };
    let cal = calibrate(&cal_opts, &mut |m| progress(&format!("      {m}")))?;
    let profile_id = format!("quickstart-{}", tensorforge_store::new_run_id());

    progress(&format!(
        "[2/6] measuring the embedded holdout suite ({} workloads)",
        suite.len()
    ));
    let mut opts = HarnessOptions::new(threads);
    opts.min_iterations = o.min_iterations;
    opts.time_budget_ns = o.time_budget_ns;
    opts.max_iterations = opts.max_iterations.max(o.min_iterations);
    opts.max_rotating_bytes = QUICKSTART_MAX_ROTATING_BYTES;
    opts.labels
        .insert(QUICKSTART_LABEL_KEY.to_string(), label_value.clone());
    let mut machine = MachineState::probe(threads)?;
    let (mut validation, mut records) =
        measure_and_validate(&cal, "quickstart calibration", &suite, &opts, &mut |m| {
            progress(&format!("      {m}"))
        })?;
    machine = machine.slowest(MachineState::probe(threads)?);
    let counting = match (&o.count_options, o.count_mode) {
        (_, CountMode::Off) => CountOutcome::Off,
        (None, CountMode::Required) => {
            return Err(JobError::invalid(
                "count_options",
                "none",
                "counting is required but no executable to count with was given",
            ))
        }
        (None, _) => {
            CountOutcome::Unavailable("no tensorforge executable to count with was given".into())
        }
        (Some(co), mode) => {
            progress(&format!(
                "      counting instructions and estimated cycles with callgrind ({} process(es), single-threaded workloads)",
                co.jobs
            ));
            let lines = std::sync::Mutex::new(Vec::new());
            let outcome = count_suite(&suite, &mut records, mode, co, &|m| {
                if let Ok(mut v) = lines.lock() {
                    v.push(m.to_string());
                }
            })?;
            for m in lines.into_inner().unwrap_or_default() {
                progress(&format!("        {m}"));
            }
            outcome
        }
    };
    if let Some(line) = counting.describe() {
        progress(&format!("      counts: {line}"));
    }
    let injected: Vec<String> = records
        .iter()
        .filter_map(|r| {
            r.injected_work.map(|w| {
                format!(
                    "{}: {} injected on purpose ({})",
                    r.workload.name,
                    w.describe(),
                    tensorforge_measure::inject::INJECT_EXTRA_WORK_ENV
                )
            })
        })
        .collect();

    // The history: the last `lookback` quickstart runs on this machine at this thread
    // count (the per-job form of the baseline rule, crate::baseline), looked up before this
    // run is recorded.
    let hist = labelled_history(
        &store,
        &machine_id,
        QUICKSTART_LABEL_KEY,
        &label_value,
        o.policy.history.lookback,
    )?;
    let (history_infos, history) = (&hist.runs, &hist.records);

    progress("[3/6] validating the model against the measurement");
    for v in &validation.variants {
        progress(&format!(
            "      {}: median APE {:.1} %, mean {:.1} %, max {:.1} %",
            v.label, v.median_ape_pct, v.mean_ape_pct, v.max_ape_pct
        ));
    }

    let today = Date::today_utc();
    let mut confirmations: Vec<String> = Vec::new();
    let mut machine_note: Option<String> = None;
    for r in records.iter_mut() {
        r.labels.extend(machine.labels());
    }
    let mut candidate = records.clone();
    let first_run = history_infos.is_empty();
    let (report, decision, code) = if !first_run {
        progress(&format!(
            "[4/6] gating against {} earlier run(s) on this machine",
            history_infos.len()
        ));
        let mut g = gate(&o.policy, history, &candidate, today);
        for attempt in 1..=CONFIRMATION_ATTEMPTS {
            let sus = suspects(&g);
            if sus.is_empty() {
                break;
            }
            let specs: Vec<WorkloadSpec> = suite
                .iter()
                .filter(|w| sus.contains(&w.identity().fingerprint()))
                .cloned()
                .collect();
            if specs.is_empty() {
                break;
            }
            let names: Vec<String> = specs.iter().map(|w| w.name.clone()).collect();
            let note = confirmation_note(attempt, &g, &names);
            progress(&format!("      {note}"));
            confirmations.push(note);
            let mut ropts = opts.clone();
            ropts.threads = cal.provenance.threads as usize;
            ropts.run_id = format!("{}-confirm{attempt}", opts.run_id);
            let mut again = run_suite(&specs, &ropts, &mut |_| {})?;
            // A count does not change when measured again: carry it over.
            for r in again.iter_mut() {
                if let Some(first) = records.iter().find(|x| x.fingerprint == r.fingerprint) {
                    r.instructions = first.instructions;
                    r.instructions_source = first.instructions_source.clone();
                    r.counts = first.counts.clone();
                    r.count_error = first.count_error.clone();
                }
            }
            candidate.extend(again);
            g = gate(&o.policy, history, &candidate, today);
        }
        if !confirmations.is_empty() {
            machine = machine.slowest(MachineState::probe(threads)?);
        }
        // A slower machine is not a slower build: compare the machine's own speed in this
        // run with the history's.
        if let Some(why) = downgrade_for_drift(&o.policy, &machine, &hist, &mut g, "machine") {
            progress(&format!("      {why}"));
            machine_note = Some(why);
        }
        let code = g.exit_code();
        let decision = format!(
            "gate: {} against {} earlier run(s) on this machine (exit {code}{})",
            g.overall.label(),
            history_infos.len(),
            if confirmations.is_empty() {
                String::new()
            } else {
                format!(", after {} confirmation attempt(s)", confirmations.len())
            }
        );
        (
            Report::new(g, history, &candidate, Some(&cal.profile)),
            decision,
            code,
        )
    } else {
        progress("[4/6] no earlier quickstart run on this machine: this run starts the history");
        // Gate the run against itself so the report still carries the per-metric table;
        // the decision printed is "baseline established", never a comparison.
        let mut g = gate(&o.policy, &records, &records, today);
        g.reasons = vec![
            "first quickstart run on this machine at this thread count: it starts the history; nothing was compared".into(),
        ];
        let mut report = Report::new(g, &records, &records, Some(&cal.profile));
        report.decision_label = Some("BASELINE ESTABLISHED".into());
        (
            report,
            "gate: baseline established (first run on this machine; later runs are gated against the history it starts)".to_string(),
            0,
        )
    };
    if !confirmations.is_empty() {
        // Validate what the decision used: the last measurement of each workload.
        let mut last = records.clone();
        for r in candidate.iter().skip(records.len()) {
            if let Some(slot) = last.iter_mut().find(|x| x.fingerprint == r.fingerprint) {
                *slot = r.clone();
            }
        }
        validation = validate(&cal, &suite, &last)?;
    }
    let ceiling_violations = ceiling_violation_lines(&validation);

    progress(&format!(
        "[5/6] writing reports into {}",
        o.out_dir.display()
    ));
    let mut lead: Vec<(String, String)> = Vec::new();
    lead.push((
        "How this was decided".into(),
        if first_run {
            "First quickstart run on this machine: it starts the history. The gate table below compares the run with itself and is shown only for its shape; later runs are gated against the history.".to_string()
        } else {
            let decided = decision_summary(&report.gate);
            format!(
                "{decided} Counted metrics (instructions, estimated cycles) compare with the newest earlier run: the same build gives the same counts on a busy machine, so a change beyond the allowance is a FAIL without a test. Timed metrics are tested between runs: this run against the spread of {} earlier quickstart run(s) on this machine at {threads} thread(s) (test run_t; a FAIL needs at least {} runs of history, a change beyond the allowance and p ≤ α after Benjamini–Hochberg); they decide only a workload that could not be counted, and are otherwise reported beside the counts.",
                history_infos.len(),
                o.policy.history.min_runs
            )
        },
    ));
    if let Some(line) = counting.describe() {
        lead.push(("Counted metrics".into(), line));
    }
    if !injected.is_empty() {
        lead.push((
            "Injected slowdown (a trial, not a build change)".into(),
            injected.join("\n"),
        ));
    }
    if let Some(why) = &machine_note {
        lead.push((
            "Machine drift (timed failures downgraded to INCONCLUSIVE)".into(),
            format!("{why}. Counts (peak allocation, instructions, estimated cycles) still gate."),
        ));
    }
    if !ceiling_violations.is_empty() {
        lead.push((
            "Ceiling violated (calibration evidence is wrong or incomplete)".into(),
            ceiling_violations.join("\n"),
        ));
    }
    if !confirmations.is_empty() {
        lead.push((
            "Confirmation re-measurements".into(),
            format!(
                "A workload whose between-run test said FAIL or INCONCLUSIVE was measured again (at most {CONFIRMATION_ATTEMPTS} times); each re-measurement is one more candidate run.\n{}",
                confirmations.join("\n")
            ),
        ));
    }
    let mut markdown = render_markdown_with_lead(&report, &lead);
    markdown.push_str(&validation_markdown(&validation));
    let lead_html: Vec<HtmlSection> = lead
        .iter()
        .map(|(t, x)| HtmlSection {
            title: t.clone(),
            body: HtmlBody::Text(x.clone()),
        })
        .collect();
    let html = render_html_with_lead(&report, &lead_html, &validation_sections(&validation)?);
    let (md_path, html_path) = write_reports(&o.out_dir, &markdown, &html)?;

    progress(&format!("[6/6] recording the run in {}", store.describe()));
    store.insert_profile(
        &profile_id,
        &machine_id,
        &cal.to_toml()?,
        &cal.provenance_json()?,
    )?;
    let run_id = store.insert_run(&records)?.run_id;
    progress(&format!("      run {run_id} ({} records)", records.len()));
    Ok(QuickstartOutcome {
        schema_version: QUICKSTART_OUTCOME_SCHEMA_VERSION,
        exit_code: code,
        decision,
        reasons: if first_run {
            Vec::new()
        } else {
            report.gate.reasons.clone()
        },
        history_runs: history_infos.len(),
        confirmations,
        ceiling_violations,
        roofline_median_ape_pct: validation
            .variants
            .first()
            .map(|v| v.median_ape_pct)
            .unwrap_or(f64::NAN),
        validated_workloads: validation.rows.len(),
        run_id,
        store: store.describe(),
        markdown_path: md_path,
        html_path,
        duration_s: started.elapsed().as_secs_f64(),
        counting: counting.describe(),
        injected,
        gate: (!first_run).then(|| report.gate.clone()),
    })
}

/// Write `report.md` and `report.html` into `out_dir` (created if needed) together,
/// atomically; returns their paths.
pub(crate) fn write_reports(
    out_dir: &std::path::Path,
    markdown: &str,
    html: &str,
) -> Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(out_dir).map_err(|e| JobError::Io {
        path: out_dir.display().to_string(),
        what: "cannot create the report directory".into(),
        source: e,
    })?;
    let md_path = out_dir.join("report.md");
    let html_path = out_dir.join("report.html");
    write_all_atomic(&[
        (&md_path, markdown.as_bytes()),
        (&html_path, html.as_bytes()),
    ])?;
    Ok((md_path, html_path))
}

/// One sentence: which metrics decided how many workloads.
fn decision_summary(g: &GateResult) -> String {
    let mut by: std::collections::BTreeMap<String, usize> = Default::default();
    for d in g
        .decisions
        .iter()
        .filter(|d| d.verdict != Verdict::NotComparable)
    {
        *by.entry(d.decided_by.join(" + ")).or_default() += 1;
    }
    if by.is_empty() {
        return "No workload was decided.".into();
    }
    let parts: Vec<String> = by
        .iter()
        .map(|(m, n)| format!("{n} workload(s) by {m}"))
        .collect();
    format!("Decided: {}.", parts.join("; "))
}

fn validation_markdown(v: &ValidationReport) -> String {
    let mut s = String::from(
        "\n## Model validation (model vs measurement; never part of the gate decision)\n\n",
    );
    s.push_str(&format!(
        "Calibrated profile on {} thread(s): fp32 peak {}, DRAM {}. Pure roofline, no fitted term.\n\n",
        v.threads,
        tensorforge_core::units::rate(v.peak_flops_per_s, "FLOP"),
        tensorforge_core::units::bandwidth(v.dram_bandwidth_bytes_per_s)
    ));
    s.push_str(&format!("| {} |\n", VALIDATION_HEADERS.join(" | ")));
    s.push_str(&format!("|{}\n", "---|".repeat(VALIDATION_HEADERS.len())));
    for row in validation_rows(v) {
        let cells: Vec<String> = row
            .iter()
            .map(|c| tensorforge_ops::markup::escape_markdown(c))
            .collect();
        s.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    s.push('\n');
    for var in &v.variants {
        s.push_str(&format!(
            "- **{}**: median APE {:.1} %, mean {:.1} %, max {:.1} % — {}\n",
            var.label, var.median_ape_pct, var.mean_ape_pct, var.max_ape_pct, var.description
        ));
    }
    s.push_str("\nWhat the model omits:\n\n");
    for l in &v.limitations {
        s.push_str(&format!("- {l}\n"));
    }
    s
}

fn validation_sections(v: &ValidationReport) -> Result<Vec<HtmlSection>> {
    let mut out = vec![HtmlSection {
        title: "Model validation (model vs measurement; never part of the gate decision)".into(),
        body: HtmlBody::Table {
            headers: VALIDATION_HEADERS.iter().map(|s| s.to_string()).collect(),
            rows: validation_rows(v),
        },
    }];
    let summary: Vec<String> = v
        .variants
        .iter()
        .map(|var| {
            format!(
                "{}: median APE {:.1} %, mean {:.1} %, max {:.1} %. {}",
                var.label, var.median_ape_pct, var.mean_ape_pct, var.max_ape_pct, var.description
            )
        })
        .chain(v.limitations.iter().map(|l| format!("Omitted: {l}")))
        .collect();
    out.push(HtmlSection {
        title: "Validation summary and limitations".into(),
        body: HtmlBody::Text(summary.join("\n")),
    });
    // Drawn by plotters from the embedded suite's names (fixed strings in the binary);
    // plotters escapes text it writes into SVG.
    out.push(HtmlSection {
        title: "Calibrated roofline with measured points".into(),
        body: HtmlBody::TrustedHtml(plots::roofline_svg(v)?),
    });
    out.push(HtmlSection {
        title: "Predicted vs measured".into(),
        body: HtmlBody::TrustedHtml(plots::predicted_vs_measured_svg(v)?),
    });
    Ok(out)
}
