//! The main job on an NVIDIA GPU, `tensorforge quickstart --device cuda[:N]`: calibrate the
//! GPU (quick probes), measure the embedded GPU holdout suite, validate the calibrated
//! roofline against it, gate the run against the history of earlier GPU quickstart runs on
//! this GPU (the records' machine id is the GPU's), write `report.md` and `report.html`, and
//! record the run and the profile. The rules are the CPU job's (`crate::quickstart`): the
//! run is the unit of replication, suspect workloads are measured again at most
//! [`CONFIRMATION_ATTEMPTS`] times, and a GPU measurably slower than in the history (its
//! calibrated copy bandwidth or FMA rate) turns timed FAILs into INCONCLUSIVE. GPU records
//! carry no instruction counts, so timed metrics decide. Not controlled: clocks (recorded
//! from NVML, not locked), other processes on the GPU.

use crate::baseline::labelled_history;
use crate::error::{JobError, Result};
use crate::machine::{downgrade_for_drift, MachineState};
use crate::quickstart::{
    check_out_dir, confirmation_note, suspects, write_reports, QuickstartOutcome,
    CONFIRMATION_ATTEMPTS, QUICKSTART_LABEL_KEY, QUICKSTART_OUTCOME_SCHEMA_VERSION,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;
use tensorforge_cuda::bench::{run_gpu_suite, GpuHarnessOptions, GpuWorkload};
use tensorforge_cuda::calibrate::calibrate_gpu;
use tensorforge_cuda::device::Gpu;
use tensorforge_cuda::validate::{validate_gpu, GpuValidationReport, HOLDOUT};
use tensorforge_ops::{
    gate, render_html_with_lead, render_markdown_with_lead, Date, HtmlBody, HtmlSection, Policy,
    Report,
};
use tensorforge_store::Store;

/// The label value of GPU quickstart runs.
pub const GPU_QUICKSTART_LABEL: &str = "quickstart-cuda";

/// What to run.
#[derive(Clone, Debug)]
pub struct GpuQuickstartOptions {
    /// The store.
    pub store_path: PathBuf,
    /// Directory for report.md and report.html.
    pub out_dir: PathBuf,
    /// CUDA device ordinal.
    pub ordinal: usize,
    /// The gate policy.
    pub policy: Policy,
    /// Minimum timed GPU time per workload, ns.
    pub time_budget_ns: u64,
    /// Minimum timed calls per workload.
    pub min_iterations: u64,
}

impl GpuQuickstartOptions {
    /// Defaults: device 0, the embedded policy, 200 ms and 20 calls per workload.
    pub fn new(store_path: PathBuf, out_dir: PathBuf) -> GpuQuickstartOptions {
        GpuQuickstartOptions {
            store_path,
            out_dir,
            ordinal: 0,
            policy: Policy::default_embedded(),
            time_budget_ns: 200_000_000,
            min_iterations: 20,
        }
    }
}

fn check(o: &GpuQuickstartOptions) -> Result<()> {
    check_out_dir(&o.out_dir)?;
    if o.min_iterations == 0 {
        return Err(JobError::invalid("iterations", 0, "must be at least 1"));
    }
    Ok(())
}

/// The validation table as Markdown rows and HTML cells.
fn validation_rows(v: &GpuValidationReport) -> Vec<Vec<String>> {
    v.rows
        .iter()
        .map(|r| {
            vec![
                r.workload.clone(),
                r.bound.label().to_string(),
                tensorforge_core::units::time(r.predicted_s),
                tensorforge_core::units::time(r.measured_p50_s),
                format!("{:+.1} %", r.error_pct),
                r.likely_cause
                    .clone()
                    .unwrap_or_else(|| "one roof binds".into()),
            ]
        })
        .collect()
}

const VALIDATION_HEADERS: [&str; 6] = [
    "workload",
    "bound",
    "predicted (roofline + launch floor)",
    "measured p50",
    "error",
    "disagreement expected",
];

/// Run the GPU main job; `progress` receives one line per step.
pub fn run_gpu_quickstart(
    o: &GpuQuickstartOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<QuickstartOutcome> {
    let started = Instant::now();
    check(o)?;
    // The device first: without one, nothing (not even the store file) is created.
    let gpu = Gpu::open(o.ordinal)?;
    let store = Store::open(&o.store_path)?;
    let machine_id = gpu.info.device_context().machine_id;
    progress(&format!(
        "[1/6] calibrating {} ({}) with quick probes",
        gpu.info.name, gpu.info.uuid
    ));
    let profile = calibrate_gpu(&gpu, true)?;
    let hw = profile.hardware_spec()?;
    let machine = MachineState {
        fma_flops_per_s: profile.fp32_fma_flops_per_s,
        copy_bytes_per_s: profile.hbm_copy_bytes_per_s,
    };

    progress(&format!(
        "[2/6] measuring the embedded GPU holdout suite ({} workloads)",
        HOLDOUT.len()
    ));
    let mut labels = BTreeMap::new();
    labels.insert(
        QUICKSTART_LABEL_KEY.to_string(),
        GPU_QUICKSTART_LABEL.to_string(),
    );
    labels.extend(machine.labels());
    let opts = GpuHarnessOptions {
        warmup: 3,
        min_iterations: o.min_iterations,
        time_budget_ns: o.time_budget_ns,
        flush_l2: true,
        run_id: tensorforge_store::new_run_id(),
        labels,
    };
    let specs: Vec<String> = HOLDOUT.iter().map(|s| s.to_string()).collect();
    let validation = validate_gpu(&gpu, &profile, &specs, &opts)?;
    let records = validation.records.clone();

    progress("[3/6] validating the model against the measurement");
    let single: Vec<f64> = validation
        .rows
        .iter()
        .filter(|r| r.one_roof_binds)
        .map(|r| r.error_pct.abs())
        .collect();
    let median_ape = if single.is_empty() {
        f64::NAN
    } else {
        tensorforge_ops::stats::median(&single)
    };
    progress(&format!(
        "      one roof binds: {} of {} rows within 15 %, median |error| {median_ape:.1} %",
        validation.single_roof_within_tolerance, validation.single_roof_rows
    ));

    let hist = labelled_history(
        &store,
        &machine_id,
        QUICKSTART_LABEL_KEY,
        GPU_QUICKSTART_LABEL,
        o.policy.history.lookback,
    )?;
    let (history_infos, history) = (&hist.runs, &hist.records);
    let today = Date::today_utc();
    let first_run = history_infos.is_empty();
    let mut confirmations = vec![];
    let mut machine_note = None;
    let mut candidate = records.clone();
    let suite: Vec<GpuWorkload> = specs
        .iter()
        .map(|s| GpuWorkload::parse(s))
        .collect::<std::result::Result<_, _>>()?;
    let (report, decision, code) = if !first_run {
        progress(&format!(
            "[4/6] gating against {} earlier run(s) on this GPU",
            history_infos.len()
        ));
        let mut g = gate(&o.policy, history, &candidate, today);
        for attempt in 1..=CONFIRMATION_ATTEMPTS {
            let fps = suspects(&g);
            let sus: Vec<&GpuWorkload> = suite
                .iter()
                .filter(|w| fps.contains(&w.identity().fingerprint()))
                .collect();
            if sus.is_empty() {
                break;
            }
            let names: Vec<String> = sus.iter().map(|w| w.name()).collect();
            let note = confirmation_note(attempt, &g, &names);
            progress(&format!("      {note}"));
            confirmations.push(note);
            let mut ropts = opts.clone();
            ropts.run_id = format!("{}-confirm{attempt}", opts.run_id);
            let again: Vec<GpuWorkload> = sus.into_iter().cloned().collect();
            candidate.extend(run_gpu_suite(&gpu, &again, &ropts)?);
            g = gate(&o.policy, history, &candidate, today);
        }
        if let Some(why) = downgrade_for_drift(&o.policy, &machine, &hist, &mut g, "GPU") {
            progress(&format!("      {why}"));
            machine_note = Some(why);
        }
        let code = g.exit_code();
        let decision = format!(
            "gate: {} against {} earlier run(s) on this GPU (exit {code})",
            g.overall.label(),
            history_infos.len()
        );
        (
            Report::new(g, history, &candidate, Some(&hw)),
            decision,
            code,
        )
    } else {
        progress("[4/6] no earlier GPU quickstart run on this GPU: this run starts the history");
        let mut g = gate(&o.policy, &records, &records, today);
        g.reasons = vec![
            "first GPU quickstart run on this GPU: it starts the history; nothing was compared"
                .into(),
        ];
        let mut report = Report::new(g, &records, &records, Some(&hw));
        report.decision_label = Some("BASELINE ESTABLISHED".into());
        (
            report,
            "gate: baseline established (first run on this GPU; later runs are gated against the history it starts)".to_string(),
            0,
        )
    };

    progress(&format!(
        "[5/6] writing reports into {}",
        o.out_dir.display()
    ));
    let mut lead: Vec<(String, String)> = vec![(
        "GPU".into(),
        format!(
            "{} ({}), compute capability {}.{}, {} SMs; calibrated: HBM copy {}, fp32 FMA {}, bf16 cuBLAS {}; launch floor {}.",
            gpu.info.name,
            gpu.info.uuid,
            gpu.info.compute_capability.0,
            gpu.info.compute_capability.1,
            gpu.info.sm_count,
            tensorforge_core::units::bandwidth(profile.hbm_copy_bytes_per_s),
            tensorforge_core::units::rate(profile.fp32_fma_flops_per_s, "FLOP"),
            tensorforge_core::units::rate(
                profile.gemm_flops_per_s.get("bf16").copied().unwrap_or(0.0),
                "FLOP"
            ),
            tensorforge_core::units::time(profile.launch_floor_ns * 1e-9)
        ),
    )];
    lead.push((
        "How this was decided".into(),
        if first_run {
            "First GPU quickstart run on this GPU: it starts the history. The gate table below compares the run with itself and is shown only for its shape.".into()
        } else {
            format!(
                "GPU records carry no instruction counts, so timed metrics decide: this run against the spread of {} earlier GPU quickstart run(s) on this GPU (test run_t; a FAIL needs at least {} runs of history, a change beyond the allowance and p ≤ α after Benjamini–Hochberg).",
                history_infos.len(),
                o.policy.history.min_runs
            )
        },
    ));
    if let Some(why) = &machine_note {
        lead.push((
            "GPU drift (timed failures downgraded to INCONCLUSIVE)".into(),
            why.clone(),
        ));
    }
    if !confirmations.is_empty() {
        lead.push((
            "Confirmation re-measurements".into(),
            confirmations.join("\n"),
        ));
    }
    let mut markdown = render_markdown_with_lead(&report, &lead);
    markdown.push_str(
        "\n## Model validation on the GPU (model vs measurement; never part of the gate decision)\n\n",
    );
    markdown.push_str(&format!("| {} |\n", VALIDATION_HEADERS.join(" | ")));
    markdown.push_str(&format!("|{}\n", "---|".repeat(VALIDATION_HEADERS.len())));
    for row in validation_rows(&validation) {
        let cells: Vec<String> = row
            .iter()
            .map(|c| tensorforge_ops::markup::escape_markdown(c))
            .collect();
        markdown.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    markdown.push_str("\nWhat the model omits:\n\n");
    for l in &validation.omits {
        markdown.push_str(&format!("- {l}\n"));
    }
    let lead_html: Vec<HtmlSection> = lead
        .iter()
        .map(|(t, x)| HtmlSection {
            title: t.clone(),
            body: HtmlBody::Text(x.clone()),
        })
        .collect();
    let extra = vec![
        HtmlSection {
            title: "Model validation on the GPU (never part of the gate decision)".into(),
            body: HtmlBody::Table {
                headers: VALIDATION_HEADERS.iter().map(|s| s.to_string()).collect(),
                rows: validation_rows(&validation),
            },
        },
        HtmlSection {
            title: "What the model omits".into(),
            body: HtmlBody::Text(validation.omits.join("\n")),
        },
    ];
    let html = render_html_with_lead(&report, &lead_html, &extra);
    let (md_path, html_path) = write_reports(&o.out_dir, &markdown, &html)?;

    progress(&format!("[6/6] recording the run in {}", store.describe()));
    let profile_id = format!("quickstart-cuda-{}", tensorforge_store::new_run_id());
    let hw_toml = toml::to_string(&hw)
        .map_err(|e| JobError::invalid("profile", "hardware", e.to_string()))?;
    let profile_json = serde_json::to_string(&profile)
        .map_err(|e| JobError::invalid("profile", "json", e.to_string()))?;
    store.insert_profile(&profile_id, &machine_id, &hw_toml, &profile_json)?;
    let run_id = store.insert_run(&records)?.run_id;
    Ok(QuickstartOutcome {
        schema_version: QUICKSTART_OUTCOME_SCHEMA_VERSION,
        exit_code: code,
        decision,
        reasons: if first_run {
            vec![]
        } else {
            report.gate.reasons.clone()
        },
        history_runs: history_infos.len(),
        confirmations,
        ceiling_violations: vec![],
        roofline_median_ape_pct: median_ape,
        validated_workloads: validation.rows.len(),
        run_id,
        store: store.describe(),
        markdown_path: md_path,
        html_path,
        duration_s: started.elapsed().as_secs_f64(),
        counting: None,
        injected: vec![],
        gate: (!first_run).then(|| report.gate.clone()),
    })
}
