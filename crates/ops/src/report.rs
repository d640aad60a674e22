//! The impact report for one baseline/candidate pair: the gate's decision and reasons, the
//! per-metric table, the analytical model's roofline context per workload (prediction on a
//! given hardware spec, its bound, the percentage of the roofline each side reached), sizing
//! feasibility (peak allocation against device memory; a GEMM's tile against the tile
//! buffer), software and runtime changes, waivers and limitations — rendered as Markdown
//! (for a CI job summary), one self-contained HTML page (a maud template; plots from
//! plotters inlined as SVG), or JSON. The model
//! context is labelled as such and never changes the decision. Left out: scripts, external
//! assets, and any plot not derivable from the records.

use crate::gate::{describe_row, GateResult, MetricRow, Verdict};
use crate::markup::Text;
use crate::svg::{self, RoofPoint, Series};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde::{Deserialize, Serialize};
use tensorforge_core::schedule::{sram_fit, SramFit, Tile};
use tensorforge_core::units;
use tensorforge_core::{roofline, DType, Gemm, HardwareSpec};
use tensorforge_record::Record;

/// Version of the report JSON.
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// Limitations stated in every report.
pub const LIMITATIONS: &[&str] = &[
    "Verdicts use the measurements and the policy only; the analytical context (roofline, sizing) never changes them.",
    "The unit of replication is the run: a timed metric FAILs only against the spread of several baseline runs (test run_t, at least history.min_runs of them); samples of one run are never treated as independent replicates for a FAIL.",
    "Within-run tests (mann_whitney, bootstrap), when a policy asks for them, only show that two runs differ; their rows are INCONCLUSIVE at worst.",
    "Bootstrap intervals are seeded percentile intervals; with fewer than about 20 samples per side they are too narrow.",
    "The roofline is an upper bound from the given hardware spec (published or calibrated peaks); a percentage of it is context, not a target.",
];

/// The model's roofline prediction for one workload (evidence: model).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Prediction {
    /// Hardware spec name.
    pub hardware: String,
    /// `max(flops / peak, bytes / bandwidth)`, seconds.
    pub time_lower_bound_s: f64,
    /// `memory`, `compute` or `balanced`.
    pub bound: String,
    /// Binding roof (`compute` or a memory level).
    pub binding_roof: String,
    /// Attainable FLOP/s `min(peak, AI · bandwidth)`.
    pub attainable_flops_per_s: f64,
    /// FLOP per byte.
    pub arithmetic_intensity: f64,
    /// Peak FLOP/s for the dtype.
    pub peak_flops_per_s: f64,
    /// Every bandwidth roof `(level, bytes/s)`, DRAM first.
    pub bandwidth_roofs: Vec<(String, f64)>,
}

/// Peak allocation against device memory capacity.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MemoryFit {
    /// Baseline peak allocation, bytes.
    pub baseline_peak_bytes: Option<u64>,
    /// Candidate peak allocation, bytes.
    pub candidate_peak_bytes: Option<u64>,
    /// Capacity checked against, bytes.
    pub capacity_bytes: u64,
    /// Where the capacity came from.
    pub capacity_source: String,
    /// `max(peaks) ≤ capacity`.
    pub fits: bool,
}

/// Analytical and sizing context of one workload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct WorkloadContext {
    /// Display name.
    pub name: String,
    /// Fingerprint.
    pub fingerprint: String,
    /// Always `model` for the prediction and fits.
    pub evidence: String,
    /// FLOPs per iteration (from the record).
    pub flops: Option<f64>,
    /// Bytes per iteration (from the record).
    pub bytes: Option<f64>,
    /// Roofline prediction, when hardware, flops, bytes and a peak for the dtype are known.
    pub prediction: Option<Prediction>,
    /// `flops / baseline p50 seconds`.
    pub baseline_flops_per_s: Option<f64>,
    /// `flops / candidate p50 seconds`.
    pub candidate_flops_per_s: Option<f64>,
    /// Baseline achieved / attainable × 100.
    pub baseline_pct_of_roofline: Option<f64>,
    /// Candidate achieved / attainable × 100.
    pub candidate_pct_of_roofline: Option<f64>,
    /// Peak allocation against device memory.
    pub memory: Option<MemoryFit>,
    /// The GEMM's tile (params `tile` = "TMxTNxTK", or `tile_m`/`tile_n`/`tile_k`) against
    /// the tile buffer.
    pub tile_fit: Option<SramFit>,
    /// Why something could not be computed.
    pub notes: Vec<String>,
    /// One line per side measured faster than the roofline allows (over 100 %): the
    /// hardware spec's ceilings are wrong or incomplete for this workload.
    #[serde(default)]
    pub ceiling_violations: Vec<String>,
}

/// Latency samples of one workload for the distribution plot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Distribution {
    /// Display name.
    pub workload: String,
    /// Fingerprint.
    pub fingerprint: String,
    /// Baseline samples, ns.
    pub baseline_ns: Vec<f64>,
    /// Candidate samples, ns.
    pub candidate_ns: Vec<f64>,
}

/// A complete impact report.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Report {
    /// Always [`REPORT_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The gate's decision (measurement + policy).
    pub gate: GateResult,
    /// Hardware spec used for the model context.
    pub hardware: Option<String>,
    /// Per-workload model context.
    pub context: Vec<WorkloadContext>,
    /// Latency samples per workload.
    pub distributions: Vec<Distribution>,
    /// Stated limitations.
    pub limitations: Vec<String>,
    /// The decision as the caller words it, when it is not a plain gate verdict (the
    /// quickstart's first run: "BASELINE ESTABLISHED"); `None` prints the gate's label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_label: Option<String>,
}

impl Report {
    /// The decision's label: [`Report::decision_label`] or the gate's verdict.
    pub fn decision(&self) -> String {
        self.decision_label
            .clone()
            .unwrap_or_else(|| self.gate.overall.label().to_string())
    }
}

/// Extra HTML section supplied by a caller (e.g. a validation table or plots).
#[derive(Clone, Debug, PartialEq)]
pub struct HtmlSection {
    /// Heading; escaped by [`render_html`].
    pub title: String,
    /// Content.
    pub body: HtmlBody,
}

/// Content of an [`HtmlSection`].
#[derive(Clone, Debug, PartialEq)]
pub enum HtmlBody {
    /// Plain text; escaped by [`render_html`].
    Text(String),
    /// A table of plain-text cells; every header and cell is escaped by [`render_html`].
    Table {
        /// Column headers.
        headers: Vec<String>,
        /// Rows of cells.
        rows: Vec<Vec<String>>,
    },
    /// Markup inserted verbatim (e.g. an SVG built with [`crate::svg`]): the caller must
    /// have escaped every user-supplied string in it (use [`crate::markup::escape`]).
    TrustedHtml(String),
}

fn pooled<'a>(records: &'a [Record], fp: &str) -> Vec<&'a Record> {
    records.iter().filter(|r| r.fingerprint == fp).collect()
}

fn p50_of(recs: &[&Record]) -> Option<f64> {
    let mut v: Vec<f64> = recs
        .iter()
        .flat_map(|r| r.samples_ns.iter().copied())
        .collect();
    if v.is_empty() {
        return None;
    }
    Some(crate::policy::Statistic::P50.apply(&mut v))
}

fn param_u64(r: &Record, key: &str) -> Option<u64> {
    r.workload.params.get(key).and_then(|v| v.as_u64())
}

fn record_tile(r: &Record) -> Option<Tile> {
    if let Some(s) = r.workload.params.get("tile").and_then(|v| v.as_str()) {
        return Tile::parse(s).ok();
    }
    Some(Tile {
        tm: param_u64(r, "tile_m")?,
        tn: param_u64(r, "tile_n")?,
        tk: param_u64(r, "tile_k")?,
    })
}

fn context_for(
    name: &str,
    fp: &str,
    b: &[&Record],
    c: &[&Record],
    hw: Option<&HardwareSpec>,
) -> WorkloadContext {
    let first = b.first().or(c.first()).copied();
    let mut ctx = WorkloadContext {
        name: name.into(),
        fingerprint: fp.into(),
        evidence: "model".into(),
        flops: first.and_then(|r| r.flops),
        bytes: first.and_then(|r| r.bytes),
        prediction: None,
        baseline_flops_per_s: None,
        candidate_flops_per_s: None,
        baseline_pct_of_roofline: None,
        candidate_pct_of_roofline: None,
        memory: None,
        tile_fit: None,
        notes: Vec::new(),
        ceiling_violations: Vec::new(),
    };
    let Some(first) = first else { return ctx };
    let achieved = |recs: &[&Record]| match (ctx.flops, p50_of(recs)) {
        (Some(f), Some(p)) if p > 0.0 => Some(f / (p * 1e-9)),
        _ => None,
    };
    ctx.baseline_flops_per_s = achieved(b);
    ctx.candidate_flops_per_s = achieved(c);
    let dtype = DType::parse(&first.workload.dtype);
    match (hw, ctx.flops, ctx.bytes, &dtype) {
        (None, ..) => ctx.notes.push(
            "no hardware spec given (a preset or a calibrated profile): no roofline context".into(),
        ),
        (Some(_), None, _, _) | (Some(_), _, None, _) => ctx
            .notes
            .push("the record has no flops or bytes: no roofline context".into()),
        (Some(_), _, _, Err(e)) => ctx.notes.push(format!("dtype: {e}")),
        (Some(h), Some(f), Some(by), Ok(d)) => match roofline(h, *d, f, by, &[]) {
            Ok(r) => {
                ctx.baseline_pct_of_roofline = ctx
                    .baseline_flops_per_s
                    .map(|a| a / r.attainable_flops_per_s * 100.0);
                ctx.candidate_pct_of_roofline = ctx
                    .candidate_flops_per_s
                    .map(|a| a / r.attainable_flops_per_s * 100.0);
                for (side, v) in [
                    ("baseline", ctx.baseline_pct_of_roofline),
                    ("candidate", ctx.candidate_pct_of_roofline),
                ] {
                    if let Some(v) = v.filter(|v| *v > 100.0) {
                        ctx.ceiling_violations.push(format!(
                            "ceiling violated: {} {side} ran at {v:.1} % of its roofline on {} ({} bound); the spec's ceilings are wrong or incomplete for this workload",
                            ctx.name,
                            h.name,
                            r.bound.label()
                        ));
                    }
                }
                ctx.prediction = Some(Prediction {
                    hardware: h.name.clone(),
                    time_lower_bound_s: r.time_lower_bound_s,
                    bound: r.bound.label().into(),
                    binding_roof: r.binding_roof.clone(),
                    attainable_flops_per_s: r.attainable_flops_per_s,
                    arithmetic_intensity: r.arithmetic_intensity,
                    peak_flops_per_s: r.peak_flops_per_s,
                    bandwidth_roofs: r
                        .levels
                        .iter()
                        .map(|l| (l.level.clone(), l.bandwidth_bytes_per_s))
                        .collect(),
                });
            }
            Err(e) => ctx.notes.push(format!("roofline: {e}")),
        },
    }
    // Memory feasibility.
    let peak = |recs: &[&Record]| recs.iter().filter_map(|r| r.peak_alloc_bytes).max();
    let (pb, pc) = (peak(b), peak(c));
    let capacity = match hw.and_then(|h| h.dram.total_capacity_bytes()) {
        Some(cap) => Some((
            cap,
            format!("{} DRAM", hw.map(|h| h.name.as_str()).unwrap_or("")),
        )),
        None => match first.device.gpu.as_ref().and_then(|g| g.memory_bytes) {
            Some(cap) => Some((cap, "record device.gpu.memory_bytes".to_string())),
            None => first
                .device
                .memory_bytes
                .map(|m| (m, "record device.memory_bytes (host)".to_string())),
        },
    };
    if let (Some((cap, src)), true) = (capacity, pb.is_some() || pc.is_some()) {
        let worst = pb.unwrap_or(0).max(pc.unwrap_or(0));
        ctx.memory = Some(MemoryFit {
            baseline_peak_bytes: pb,
            candidate_peak_bytes: pc,
            capacity_bytes: cap,
            capacity_source: src,
            fits: worst <= cap,
        });
    }
    // Tile feasibility for GEMMs.
    if first.workload.kind == "gemm" {
        if let (Some(h), Some(tile), Ok(d)) = (hw, record_tile(first), &dtype) {
            match (
                h.tile_buffer(),
                param_u64(first, "m"),
                param_u64(first, "n"),
                param_u64(first, "k"),
            ) {
                (Some(buf), Some(m), Some(n), Some(k)) => {
                    let fit = Gemm::new(m, n, k, *d).and_then(|g| {
                        sram_fit(&g, Some(tile), buf.capacity_bytes.unwrap_or(0), &buf.name)
                    });
                    match fit {
                        Ok(f) => ctx.tile_fit = Some(f),
                        Err(e) => ctx.notes.push(format!("tile fit: {e}")),
                    }
                }
                (None, ..) => ctx.notes.push(format!(
                    "hardware `{}` has no tile buffer: no tile fit",
                    h.name
                )),
                _ => ctx
                    .notes
                    .push("gemm record lacks integer params m, n, k: no tile fit".into()),
            }
        }
    }
    ctx
}

impl Report {
    /// Assemble a report from a gate result and the records it judged; `hw` (a calibrated
    /// profile or preset) adds the model context.
    pub fn new(
        gate: GateResult,
        baseline: &[Record],
        candidate: &[Record],
        hw: Option<&HardwareSpec>,
    ) -> Report {
        let mut context = Vec::new();
        let mut distributions = Vec::new();
        for w in &gate.workloads {
            let b = pooled(baseline, &w.fingerprint);
            let c = pooled(candidate, &w.fingerprint);
            context.push(context_for(&w.name, &w.fingerprint, &b, &c, hw));
            distributions.push(Distribution {
                workload: w.name.clone(),
                fingerprint: w.fingerprint.clone(),
                baseline_ns: b
                    .iter()
                    .flat_map(|r| r.samples_ns.iter().copied())
                    .collect(),
                candidate_ns: c
                    .iter()
                    .flat_map(|r| r.samples_ns.iter().copied())
                    .collect(),
            });
        }
        Report {
            schema_version: REPORT_SCHEMA_VERSION,
            gate,
            hardware: hw.map(|h| h.name.clone()),
            context,
            distributions,
            limitations: LIMITATIONS.iter().map(|s| s.to_string()).collect(),
            decision_label: None,
        }
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// Format a metric value in its unit.
pub fn fmt_value(v: Option<f64>, unit: &str) -> String {
    match v {
        None => "—".into(),
        Some(x) if unit == "ns" => units::time(x * 1e-9),
        Some(x) if unit == "bytes" => units::bytes(x),
        Some(x) if unit.is_empty() => format!("{x:.4}"),
        // Rates and counts with a decimal prefix: "119.25 iter/s", "2.15 GFLOP/s".
        Some(x) => units::count(x, unit),
    }
}

fn fmt_pct(v: Option<f64>) -> String {
    v.map(|x| format!("{:+.1} %", x * 100.0))
        .unwrap_or_else(|| "—".into())
}

fn fmt_p(r: &MetricRow) -> String {
    match (r.p_value, r.p_adjusted) {
        (Some(p), Some(q)) => format!("{p:.2e} (BH {q:.2e})"),
        (Some(p), None) => format!("{p:.2e}"),
        _ => "—".into(),
    }
}

fn fmt_interval(r: &MetricRow) -> String {
    match &r.interval {
        Some(i) => format!(
            "[{:+.1} %, {:+.1} %] ({:.0} %)",
            i.low * 100.0,
            i.high * 100.0,
            i.confidence * 100.0
        ),
        None => "—".into(),
    }
}

fn fmt_allowed(r: &MetricRow) -> String {
    match (r.allowed, r.allowed_relative) {
        // An allowance ten times the baseline or more comes from the policy's absolute floor
        // (a 64 KiB floor on a 16 B baseline): say so instead of printing "409600.0 %".
        (Some(a), Some(rel)) if rel >= 10.0 => format!(
            "{} (absolute floor, {rel:.0}× the baseline)",
            fmt_value(Some(a), &r.unit)
        ),
        (Some(a), Some(rel)) => format!("{} ({:.1} %)", fmt_value(Some(a), &r.unit), rel * 100.0),
        (Some(a), None) => fmt_value(Some(a), &r.unit),
        _ => "—".into(),
    }
}

/// Cells of the per-metric table (plain text, unescaped).
/// Whether a row decided, in words (see [`crate::policy::MetricRole`]).
fn decides_cell(r: &MetricRow) -> String {
    use crate::policy::MetricRole;
    match (r.decides, r.role) {
        (true, _) => "yes".into(),
        (false, Some(MetricRole::Fallback)) => "no: counts decide".into(),
        (false, Some(MetricRole::Decide)) if r.unavailable => {
            "no: not counted, time decides".into()
        }
        (false, Some(MetricRole::Context)) => "no: context".into(),
        (false, _) => "no: not gated".into(),
    }
}

fn metric_cells(r: &MetricRow) -> Vec<String> {
    vec![
        r.workload.clone(),
        r.metric_name().to_string(),
        decides_cell(r),
        fmt_value(r.baseline, &r.unit),
        fmt_value(r.candidate, &r.unit),
        fmt_pct(r.change_relative),
        fmt_allowed(r),
        fmt_p(r),
        fmt_interval(r),
        r.verdict.label().into(),
    ]
}

const METRIC_HEADERS: [&str; 10] = [
    "workload",
    "metric",
    "decides",
    "baseline",
    "candidate",
    "change",
    "allowed",
    "p-value",
    "interval",
    "verdict",
];

fn context_cells(c: &WorkloadContext) -> Vec<String> {
    let pred = c.prediction.as_ref();
    let mem = c.memory.as_ref().map(|m| {
        format!(
            "{} of {} ({}) — {}",
            units::bytes(
                m.baseline_peak_bytes
                    .unwrap_or(0)
                    .max(m.candidate_peak_bytes.unwrap_or(0)) as f64
            ),
            units::bytes(m.capacity_bytes as f64),
            m.capacity_source,
            if m.fits { "fits" } else { "does NOT fit" }
        )
    });
    let tile = c.tile_fit.as_ref().map(|t| {
        format!(
            "{} tile {} B in {} ({} B): {}",
            t.tile.map(|x| x.to_string()).unwrap_or_default(),
            t.tile_bytes.unwrap_or(0),
            t.capacity_source,
            t.capacity_bytes,
            if t.tile_fits == Some(true) {
                "fits"
            } else {
                "does NOT fit"
            }
        )
    });
    let pct = |v: Option<f64>| {
        v.map(|x| {
            if x > 100.0 {
                format!("{x:.1} % — CEILING VIOLATED")
            } else {
                format!("{x:.1} %")
            }
        })
        .unwrap_or_else(|| "—".into())
    };
    vec![
        c.name.clone(),
        pred.map(|p| p.hardware.clone())
            .unwrap_or_else(|| "—".into()),
        pred.map(|p| format!("{} ({})", p.bound, p.binding_roof))
            .unwrap_or_else(|| "—".into()),
        pred.map(|p| units::time(p.time_lower_bound_s))
            .unwrap_or_else(|| "—".into()),
        pct(c.baseline_pct_of_roofline),
        pct(c.candidate_pct_of_roofline),
        mem.unwrap_or_else(|| "—".into()),
        tile.unwrap_or_else(|| "—".into()),
        c.notes.join("; "),
    ]
}

const CONTEXT_HEADERS: [&str; 9] = [
    "workload",
    "hardware",
    "bound",
    "predicted lower bound",
    "baseline % of roofline",
    "candidate % of roofline",
    "peak memory vs capacity",
    "tile vs tile buffer",
    "notes",
];

fn md_cell(s: &str) -> String {
    crate::markup::escape_markdown(s)
}

fn md_table(out: &mut String, headers: &[&str], rows: &[Vec<String>]) {
    out.push_str(&format!("| {} |\n", headers.join(" | ")));
    out.push_str(&format!("|{}\n", "---|".repeat(headers.len())));
    for r in rows {
        let cells: Vec<String> = r.iter().map(|c| md_cell(c)).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
}

fn change_lines(report: &Report) -> Vec<String> {
    let mut v = Vec::new();
    for w in &report.gate.workloads {
        for ch in w.software_changes.iter().chain(&w.runtime_changes) {
            v.push(format!(
                "{}: {}: {} → {}",
                w.name, ch.field, ch.baseline, ch.candidate
            ));
        }
        if w.device_baseline != w.device_candidate {
            v.push(format!(
                "{}: device: {} → {}",
                w.name, w.device_baseline, w.device_candidate
            ));
        }
    }
    v
}

fn waiver_lines(report: &Report) -> Vec<String> {
    report
        .gate
        .waivers
        .iter()
        .map(|w| {
            let what = match w.status.as_str() {
                "expired" => format!("EXPIRED on {} — no longer applies", w.expires),
                s => format!("{s}, expires {}", w.expires),
            };
            format!("{} {}: {} ({})", w.workload, w.metric, what, w.reason)
        })
        .collect()
}

/// The report as Markdown for a CI job summary; every user string is HTML-escaped and `|`
/// is escaped in table cells (job summaries render inline HTML).
pub fn render_markdown(report: &Report) -> String {
    render_markdown_with_lead(report, &[])
}

/// Markdown like [`render_markdown`], with the caller's lead notes `(title, text)` right
/// after the decision and its reasons (each escaped like every other user string).
pub fn render_markdown_with_lead(report: &Report, lead: &[(String, String)]) -> String {
    let g = &report.gate;
    let mut s = String::new();
    s.push_str("# TensorForge impact report\n\n");
    s.push_str(&format!(
        "**Decision: {}** (exit {}) — policy `{}`, waivers checked on {}, false-discovery control: {} over {} test(s).\n\n",
        md_cell(&report.decision()),
        g.exit_code,
        md_cell(&g.policy_source),
        g.today,
        g.fdr_method,
        g.fdr_family_size
    ));
    s.push_str("Reasons:\n\n");
    for r in &g.reasons {
        s.push_str(&format!("- {}\n", md_cell(r)));
    }
    for (title, text) in lead {
        s.push_str(&format!("\n**{}**\n\n", md_cell(title)));
        for line in text.lines() {
            s.push_str(&format!("> {}\n", md_cell(line)));
        }
    }
    s.push_str("\n## Metrics (measurement; decides)\n\n");
    let rows: Vec<Vec<String>> = g.rows.iter().map(metric_cells).collect();
    md_table(&mut s, &METRIC_HEADERS, &rows);
    let notable: Vec<&MetricRow> = g
        .rows
        .iter()
        .filter(|r| !matches!(r.verdict, Verdict::Pass | Verdict::NotComparable))
        .collect();
    if !notable.is_empty() {
        s.push('\n');
        for r in notable {
            s.push_str(&format!("- {}\n", md_cell(&describe_row(r))));
        }
    }
    s.push_str("\n## Analytical context (model; never changes the decision)\n\n");
    for v in report.context.iter().flat_map(|c| &c.ceiling_violations) {
        s.push_str(&format!("- **{}**\n", md_cell(v)));
    }
    let rows: Vec<Vec<String>> = report.context.iter().map(context_cells).collect();
    md_table(&mut s, &CONTEXT_HEADERS, &rows);
    s.push_str("\n## Software and runtime changes\n\n");
    let ch = change_lines(report);
    if ch.is_empty() {
        s.push_str("None recorded.\n");
    }
    for c in ch {
        s.push_str(&format!("- {}\n", md_cell(&c)));
    }
    let wl = waiver_lines(report);
    if !wl.is_empty() {
        s.push_str("\n## Waivers\n\n");
        for w in wl {
            s.push_str(&format!("- {}\n", md_cell(&w)));
        }
    }
    s.push_str("\n## Limitations\n\n");
    for l in &report.limitations {
        s.push_str(&format!("- {}\n", md_cell(l)));
    }
    s
}

/// A table of plain-text cells; the cells of column `verdict_col` also get a `v-<verdict>`
/// class for their colour.
fn html_table(headers: &[String], rows: &[Vec<String>], verdict_col: Option<usize>) -> Markup {
    html! {
        table {
            thead { tr { @for h in headers { th { (Text(h)) } } } }
            tbody {
                @for r in rows {
                    tr {
                        @for (i, c) in r.iter().enumerate() {
                            @if Some(i) == verdict_col {
                                td class=(format!("v-{}", c.to_ascii_lowercase())) { (Text(c)) }
                            } @else {
                                td { (Text(c)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn html_list(items: &[String]) -> Markup {
    html! { ul { @for i in items { li { (Text(i)) } } } }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}\
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}\
.v-fail,.v-error{background:#fdd}.v-inconclusive{background:#ffe9b3}.v-pass{background:#e3f6e3}.v-waived{background:#e6e6ff}\
.decision{font-size:1.3em}.model{border-left:4px solid #999;padding-left:1em}svg{margin:0.5em 1em 0.5em 0}";

/// The report as one self-contained HTML page (inline CSS and SVG, no scripts). Every string
/// from records, policy or caller is escaped, except [`HtmlBody::TrustedHtml`] in `extra`,
/// which is inserted verbatim after the report's own sections.
pub fn render_html(report: &Report, extra: &[HtmlSection]) -> String {
    render_html_with_lead(report, &[], extra)
}

fn section(sec: &HtmlSection) -> Markup {
    html! {
        h2 { (Text(&sec.title)) }
        @match &sec.body {
            HtmlBody::Text(t) => p { (Text(t)) },
            HtmlBody::Table { headers, rows } => (html_table(headers, rows, None)),
            // The caller's markup (an SVG from plotters), trusted by contract.
            HtmlBody::TrustedHtml(h) => (PreEscaped(h)),
        }
    }
}

/// One ECDF per workload, baseline against candidate.
fn distribution_plots(report: &Report) -> Markup {
    html! {
        @for d in &report.distributions {
            (PreEscaped(svg::ecdf_plot(
                &d.workload,
                &[
                    Series { label: "baseline", color: "#1f77b4", values: &d.baseline_ns },
                    Series { label: "candidate", color: "#d62728", values: &d.candidate_ns },
                ],
            )))
        }
    }
}

/// One roofline per workload with a prediction, with the achieved rate of each side.
fn roofline_plots(report: &Report) -> Markup {
    html! {
        @for c in &report.context {
            @if let Some(p) = &c.prediction {
                @let bl = format!("{} baseline", c.name);
                @let cl = format!("{} candidate", c.name);
                @let sides = [
                    (bl.as_str(), "#1f77b4", c.baseline_flops_per_s),
                    (cl.as_str(), "#d62728", c.candidate_flops_per_s),
                ];
                @let points: Vec<RoofPoint<'_>> = sides
                    .iter()
                    .filter_map(|&(label, color, f)| {
                        Some(RoofPoint {
                            label,
                            color,
                            intensity: p.arithmetic_intensity,
                            flops_per_s: f?,
                        })
                    })
                    .collect();
                (PreEscaped(svg::roofline_plot(
                    &format!("{} on {}", c.name, p.hardware),
                    p.peak_flops_per_s,
                    &p.bandwidth_roofs,
                    &points,
                )))
            }
        }
    }
}

/// [`render_html`] with `lead` sections placed first, above the decision (e.g. "this run is
/// the baseline", or confirmation re-measurements the reader must see before the verdict).
pub fn render_html_with_lead(
    report: &Report,
    lead: &[HtmlSection],
    extra: &[HtmlSection],
) -> String {
    let g = &report.gate;
    let metric_headers: Vec<String> = METRIC_HEADERS.iter().map(|h| h.to_string()).collect();
    let metric_rows: Vec<Vec<String>> = g.rows.iter().map(metric_cells).collect();
    let notable: Vec<String> = g
        .rows
        .iter()
        .filter(|r| !matches!(r.verdict, Verdict::Pass | Verdict::NotComparable))
        .map(describe_row)
        .collect();
    let violations: Vec<String> = report
        .context
        .iter()
        .flat_map(|c| c.ceiling_violations.iter().cloned())
        .collect();
    let context_headers: Vec<String> = CONTEXT_HEADERS.iter().map(|h| h.to_string()).collect();
    let context_rows: Vec<Vec<String>> = report.context.iter().map(context_cells).collect();
    let changes = change_lines(report);
    let waivers = waiver_lines(report);
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "TensorForge impact report" }
                style { (STYLE) }
            }
            body {
                h1 { "TensorForge impact report" }
                p.decision {
                    "Decision: "
                    strong class=(format!("v-{}", g.overall.label().to_ascii_lowercase())) {
                        (Text(&report.decision()))
                    }
                    " (exit " (g.exit_code) ")"
                }
                p {
                    "Policy " code { (Text(&g.policy_source)) } "; waivers checked on "
                    (g.today.to_string()) "; false-discovery control: " (Text(&g.fdr_method)) " over "
                    (g.fdr_family_size) " test(s)."
                }
                h2 { "Reasons" }
                (html_list(&g.reasons))
                // The caller's lead sections (how the decision was reached) follow the
                // decision.
                @for sec in lead { (section(sec)) }
                h2 { "Metrics (measurement; decides)" }
                (html_table(&metric_headers, &metric_rows, Some(9)))
                @if !notable.is_empty() { (html_list(&notable)) }
                h2 { "Latency distributions" }
                (distribution_plots(report))
                div.model {
                    h2 { "Analytical context (model; never changes the decision)" }
                    @if !violations.is_empty() {
                        p { strong { "Ceiling violated" } }
                        (html_list(&violations))
                    }
                    (html_table(&context_headers, &context_rows, None))
                    (roofline_plots(report))
                }
                h2 { "Software and runtime changes" }
                @if changes.is_empty() {
                    p { "None recorded." }
                } @else {
                    (html_list(&changes))
                }
                @if !waivers.is_empty() {
                    h2 { "Waivers" }
                    (html_list(&waivers))
                }
                @for sec in extra { (section(sec)) }
                h2 { "Limitations" }
                (html_list(&report.limitations))
            }
        }
    };
    let mut s = page.into_string();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_allowance_from_the_absolute_floor_is_named_not_a_huge_percent() {
        let mut r = crate::gate::error_row(
            "w",
            "f",
            Some(crate::policy::Metric::PeakAlloc),
            "bytes",
            String::new(),
        );
        // 64 KiB allowed over a 16 B baseline: 65536 / 16 = 4096 times the baseline.
        r.allowed = Some(65536.0);
        r.allowed_relative = Some(4096.0);
        assert_eq!(
            fmt_allowed(&r),
            "64.00 KiB (absolute floor, 4096× the baseline)"
        );
        // 25 % of a 1 MiB baseline prints as a percentage.
        r.allowed = Some(262144.0);
        r.allowed_relative = Some(0.25);
        assert_eq!(fmt_allowed(&r), "256.00 KiB (25.0 %)");
    }
    use super::*;
    use crate::markup::check_well_formed;
    use crate::{gate, Date, Policy};
    use std::collections::BTreeMap;
    use tensorforge_record::{DeviceContext, HarnessSettings, SoftwareContext, WorkloadIdentity};

    fn rec(name: &str, scale: f64, commit: &str) -> Record {
        let mut params = BTreeMap::new();
        for (k, v) in [("m", 64), ("n", 64), ("k", 64)] {
            params.insert(k.into(), serde_json::json!(v));
        }
        params.insert("tile".into(), serde_json::json!("32x32x32"));
        let w = WorkloadIdentity {
            kind: "gemm".into(),
            name: name.into(),
            params,
            dtype: "fp32".into(),
        };
        let d = DeviceContext {
            kind: "cpu".into(),
            cpu_model: "cpu <x>".into(),
            ..Default::default()
        };
        let sw = SoftwareContext {
            git_commit: Some(commit.into()),
            ..Default::default()
        };
        let samples: Vec<f64> = (0..30).map(|i| scale * (1000.0 + f64::from(i))).collect();
        // 2·64³ = 524288 FLOPs; bytes 3·64²·4 = 49152.
        Record::new(tensorforge_record::RecordParts {
            run_id: "r".into(),
            workload: w,
            device: d,
            software: sw,
            harness: HarnessSettings::default(),
            samples_ns: samples,
            flops: Some(524_288.0),
            bytes: Some(49_152.0),
            peak_alloc_bytes: Some(1 << 20),
            timestamp_unix_s: 0,
            labels: BTreeMap::new(),
            source: "harness".into(),
        })
        .unwrap()
    }

    /// The text of every `<tag>…</tag>` in `html`, in order (no nested tags inside).
    fn texts_of(html: &str, tag: &str) -> Vec<String> {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        html.split(open.as_str())
            .skip(1)
            .filter_map(|rest| rest.split_once(close.as_str()).map(|(t, _)| t.to_string()))
            .collect()
    }

    #[test]
    fn html_has_its_sections_in_order_and_escapes_apostrophes() {
        let name = "it's <b>";
        let b = vec![rec(name, 1.0, "aaa")];
        let c = vec![rec(name, 2.0, "bbb")];
        let g = gate(
            &Policy::default_embedded(),
            &b,
            &c,
            Date::parse("2025-01-01", "t", "t").unwrap(),
        );
        let hw = tensorforge_core::presets::hardware("balanced").unwrap();
        let report = Report::new(g, &b, &c, Some(&hw));
        let lead = vec![HtmlSection {
            title: "How this was decided".into(),
            body: HtmlBody::Text("first".into()),
        }];
        let extra = vec![HtmlSection {
            title: "Model validation".into(),
            body: HtmlBody::Table {
                headers: vec!["a".into(), "b".into()],
                rows: vec![vec!["1".into(), "2".into()]],
            },
        }];
        let html = render_html_with_lead(&report, &lead, &extra);
        assert!(html.starts_with("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"));
        assert!(html.ends_with("</body></html>\n"));
        assert_eq!(
            texts_of(&html, "h2"),
            [
                "Reasons",
                "How this was decided",
                "Metrics (measurement; decides)",
                "Latency distributions",
                "Analytical context (model; never changes the decision)",
                "Software and runtime changes",
                "Model validation",
                "Limitations",
            ]
        );
        assert_eq!(texts_of(&html, "h1"), ["TensorForge impact report"]);
        // Every header of both report tables and of the caller's table.
        let th = texts_of(&html, "th");
        assert_eq!(
            th.len(),
            METRIC_HEADERS.len() + CONTEXT_HEADERS.len() + 2,
            "{th:?}"
        );
        assert_eq!(th[..METRIC_HEADERS.len()], METRIC_HEADERS);
        // The verdict cell carries its colour class; the decision its label.
        assert!(
            html.contains("<td class=\"v-inconclusive\">INCONCLUSIVE</td>"),
            "{html}"
        );
        assert!(html.contains("<strong class=\"v-inconclusive\">INCONCLUSIVE</strong> (exit 3)"));
        // The workload name in a table cell: `<`, `>` and the apostrophe all escaped.
        assert!(texts_of(&html, "td")
            .iter()
            .any(|t| t == "it&#39;s &lt;b&gt;"));
        assert!(!html.contains("it's") && !html.contains("<b>"));
        // One ECDF and one roofline, both plotters' SVG.
        assert_eq!(html.matches("<svg").count(), 2);
        // Lists: the reasons, the notable rows, the software change and the limitations.
        let li = texts_of(&html, "li");
        let notable = report
            .gate
            .rows
            .iter()
            .filter(|r| !matches!(r.verdict, Verdict::Pass | Verdict::NotComparable))
            .count();
        assert_eq!(
            li.len(),
            report.gate.reasons.len() + notable + 1 + LIMITATIONS.len(),
            "{li:?}"
        );
        assert!(
            li.iter().any(|l| l.ends_with("git_commit: aaa → bbb")),
            "{li:?}"
        );
        assert_eq!(li[li.len() - LIMITATIONS.len()..], *LIMITATIONS);
    }

    #[test]
    fn html_escapes_every_user_string_and_is_well_formed() {
        let evil = "<script>alert(1)</script>&\"|";
        let b = vec![rec(evil, 1.0, "aaa<b>")];
        let c = vec![rec(evil, 2.0, "bbb")];
        let g = gate(
            &Policy::default_embedded(),
            &b,
            &c,
            Date::parse("2025-01-01", "t", "t").unwrap(),
        );
        let hw = tensorforge_core::presets::hardware("balanced").unwrap();
        let report = Report::new(g, &b, &c, Some(&hw));
        let extra = vec![
            HtmlSection {
                title: "<i>validation</i>".into(),
                body: HtmlBody::Table {
                    headers: vec!["<h>".into()],
                    rows: vec![vec!["<td>".into()]],
                },
            },
            HtmlSection {
                title: "note".into(),
                body: HtmlBody::Text("a < b".into()),
            },
            HtmlSection {
                title: "plot".into(),
                body: HtmlBody::TrustedHtml("<svg width=\"1\" height=\"1\"></svg>".into()),
            },
        ];
        let html = render_html(&report, &extra);
        check_well_formed(&html).unwrap();
        assert!(!html.contains("<script"), "unescaped script tag");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(
            html.contains("&lt;i&gt;validation&lt;/i&gt;") && html.contains("<svg width=\"1\"")
        );
        assert!(
            html.contains("aaa&lt;b&gt;"),
            "software change listed and escaped"
        );
        assert!(html.contains("never changes the decision"));
        assert!(
            html.matches("<svg").count() >= 3,
            "ECDF, roofline and the caller's plot"
        );
        let md = render_markdown(&report);
        assert!(!md.contains("<script"));
        assert!(md.contains("&lt;script&gt;") && md.contains("\\|"));
        // One baseline run against one candidate run: twice as slow, but too little history
        // for a FAIL.
        assert!(md.contains("**Decision: INCONCLUSIVE** (exit 3)"), "{md}");
        // The model context: 524288 FLOPs / 49152 B = 10.667 FLOP/B on `balanced`.
        let ctx = &report.context[0];
        let p = ctx.prediction.as_ref().unwrap();
        assert!((p.arithmetic_intensity - 524_288.0 / 49_152.0).abs() < 1e-9);
        // Baseline p50 = 1014.5 ns: 524288 / 1.0145e-6 s = 5.168e11 FLOP/s; the candidate at
        // twice the latency reaches half of that share of the roofline.
        let (bp, cp) = (
            ctx.baseline_pct_of_roofline.unwrap(),
            ctx.candidate_pct_of_roofline.unwrap(),
        );
        assert!((bp / cp - 2.0).abs() < 1e-9, "{bp} {cp}");
        assert!((ctx.baseline_flops_per_s.unwrap() - 524_288.0 / 1.0145e-6).abs() < 1.0);
        let t = ctx.tile_fit.as_ref().unwrap();
        // 32×32×32 fp32 tile: 3 · 32·32·4 = 12288 B.
        assert_eq!(t.tile_bytes, Some(12_288));
        // Far below the `balanced` roof: no violation.
        assert!(ctx.ceiling_violations.is_empty());
        // A spec whose peak is 1 GFLOP/s and bandwidth 1 GB/s is beaten by these records
        // (5.2e11 FLOP/s): flagged in the context, the table and both renderings.
        let mut slow = hw.clone();
        for v in slow.peak_ops_per_s.values_mut() {
            *v = 1e9;
        }
        slow.dram.bandwidth_bytes_per_s = Some(1e9);
        let r2 = Report::new(report.gate.clone(), &b, &c, Some(&slow));
        assert_eq!(
            r2.context[0].ceiling_violations.len(),
            2,
            "{:?}",
            r2.context[0]
        );
        assert!(render_markdown(&r2).contains("CEILING VIOLATED"));
        let h2 = render_html(&r2, &[]);
        assert!(h2.contains("Ceiling violated") && h2.contains("CEILING VIOLATED"));
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["schema_version"], 1);
        assert_eq!(json["gate"]["overall"], "INCONCLUSIVE");
        assert_eq!(json["context"][0]["evidence"], "model");
    }
}
