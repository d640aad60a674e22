//! Two builds in one run (`tensorforge quickstart --baseline-bin PATH`): gate this build
//! against a baseline build of `tensorforge` over the embedded holdout suite, for a CI that
//! has the previous build at hand and no history.
//!
//! Counts decide: each build's holdout workloads are counted with callgrind (instructions and
//! estimated cycles, [`tensorforge_measure::counting`]) — each build runs its own code through
//! its own `__count-instructions` — so a change of the build is the only thing that can
//! move them. Time is measured beside them in interleaved rounds, A B B A (each round runs
//! both builds' `bench` over the suite; a co-tenant burst that spans a round hits both
//! sides), every invocation one run; with at least `history.min_runs` runs per side the
//! timed metrics are tested between runs (`run_t`) and decide only a workload that could not
//! be counted (the policy's roles). Nothing is recorded in a store: the baseline is the
//! other binary, not the history. Not controlled: what else the machine runs between
//! rounds, and differences between the builds' harnesses (a baseline build older than the
//! record format this build reads is an error naming the side).

use crate::error::{JobError, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use tensorforge_measure::counting::{count_suite, CountMode, CountOptions, CountOutcome};
use tensorforge_measure::validate::{embedded_holdout_suite, EMBEDDED_HOLDOUT_TOML};
use tensorforge_ops::{
    gate, render_html_with_lead, render_markdown_with_lead, Date, GateResult, HtmlBody,
    HtmlSection, Policy, Report,
};
use tensorforge_store::{parse_records_text, Record};

/// Version of [`TwoBuildsOutcome`] as JSON.
pub const TWO_BUILDS_SCHEMA_VERSION: u32 = 1;

/// What to compare and how.
#[derive(Clone, Debug)]
pub struct TwoBuildsOptions {
    /// The baseline `tensorforge` executable.
    pub baseline_exe: PathBuf,
    /// The candidate `tensorforge` executable (usually this one).
    pub candidate_exe: PathBuf,
    /// Directory for report.md and report.html.
    pub out_dir: PathBuf,
    /// Worker threads of the timed runs.
    pub threads: usize,
    /// A B B A rounds (each gives each side two runs).
    pub rounds: usize,
    /// Minimum timed duration per workload per run, ms.
    pub time_budget_ms: u64,
    /// Minimum timed iterations per workload per run.
    pub min_iterations: u64,
    /// The gate policy.
    pub policy: Policy,
    /// Whether to count (counts decide; `Auto` falls back to time with a note).
    pub count_mode: CountMode,
    /// Parallel counting processes per build.
    pub count_jobs: usize,
}

/// What the comparison found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TwoBuildsOutcome {
    /// Always [`TWO_BUILDS_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The gate's exit status.
    pub exit_code: u8,
    /// One line: the decision.
    pub decision: String,
    /// The gate's reasons.
    pub reasons: Vec<String>,
    /// Timed runs per side.
    pub runs_per_side: usize,
    /// What counting did, per side (`None` when off).
    pub counting: Option<String>,
    /// The gate's result.
    pub gate: GateResult,
    /// report.md path.
    pub markdown_path: PathBuf,
    /// report.html path.
    pub html_path: PathBuf,
    /// Wall-clock seconds.
    pub duration_s: f64,
}

fn side_err(side: &str, when: &str, what: String) -> JobError {
    JobError::Command {
        side: side.into(),
        when: when.into(),
        what,
    }
}

/// Run `exe bench <suite> --json ...` once; its records.
fn bench_once(
    side: &str,
    when: &str,
    exe: &Path,
    suite_file: &Path,
    o: &TwoBuildsOptions,
) -> Result<Vec<Record>> {
    let out = Command::new(exe)
        .arg("bench")
        .arg(suite_file)
        .args(["--threads", &o.threads.to_string()])
        .args(["--iterations", &o.min_iterations.to_string()])
        .args(["--time-budget-ms", &o.time_budget_ms.to_string()])
        .arg("--json")
        .env_remove(tensorforge_measure::inject::INJECT_EXTRA_WORK_ENV)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| side_err(side, when, format!("cannot run {}: {e}", exe.display())))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(side_err(
            side,
            when,
            format!(
                "`{} bench` exited with {}: {}",
                exe.display(),
                out.status,
                last.trim()
            ),
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    parse_records_text(&text, &format!("{side} bench output"))
        .map_err(|e| side_err(side, when, e.to_string()))
}

/// Run the comparison; `progress` receives one line per step.
pub fn run_two_builds(
    o: &TwoBuildsOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<TwoBuildsOutcome> {
    let started = Instant::now();
    if o.rounds == 0 {
        return Err(JobError::invalid("rounds", 0, "must be at least 1"));
    }
    if !o.baseline_exe.is_file() {
        return Err(JobError::invalid(
            "baseline-bin",
            o.baseline_exe.display(),
            "no such file",
        ));
    }
    if o.out_dir.exists() && !o.out_dir.is_dir() {
        return Err(JobError::invalid(
            "out_dir",
            o.out_dir.display(),
            "not a directory",
        ));
    }
    let suite = embedded_holdout_suite()?;
    let dir = std::env::temp_dir().join(format!(
        "tensorforge-two-builds-{}-{}",
        std::process::id(),
        tensorforge_store::new_run_id()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| JobError::Io {
        path: dir.display().to_string(),
        what: "cannot create a working directory".into(),
        source: e,
    })?;
    let result = compare_in(&dir, &suite, o, progress, started);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn compare_in(
    dir: &Path,
    suite: &[tensorforge_measure::WorkloadSpec],
    o: &TwoBuildsOptions,
    progress: &mut dyn FnMut(&str),
    started: Instant,
) -> Result<TwoBuildsOutcome> {
    let suite_file = dir.join("holdout.toml");
    std::fs::write(&suite_file, EMBEDDED_HOLDOUT_TOML).map_err(|e| JobError::Io {
        path: suite_file.display().to_string(),
        what: "cannot write the holdout suite".into(),
        source: e,
    })?;
    let sides = [
        ("baseline", &o.baseline_exe),
        ("candidate", &o.candidate_exe),
    ];
    // Warm-up: each build once, untimed (checks that it runs and reads the suite).
    for (side, exe) in sides {
        progress(&format!("warm-up: {side} ({})", exe.display()));
        bench_once(side, "warm-up run", exe, &suite_file, o)?;
    }
    let (mut base, mut cand): (Vec<Record>, Vec<Record>) = (Vec::new(), Vec::new());
    for round in 1..=o.rounds {
        let when = format!("round {round}");
        progress(&format!(
            "{when} of {}: baseline, candidate, candidate, baseline",
            o.rounds
        ));
        for i in [0usize, 1, 1, 0] {
            let (side, exe) = sides[i];
            let recs = bench_once(side, &when, exe, &suite_file, o)?;
            if i == 0 {
                base.extend(recs);
            } else {
                cand.extend(recs);
            }
        }
    }
    // Counts: once per build (they do not change from run to run), attached to every run.
    let mut counting_lines = Vec::new();
    for (side, exe) in sides {
        let mut co = CountOptions::new(exe.to_path_buf(), o.count_jobs);
        co.iterations = 1;
        progress(&format!("counting the {side} build with callgrind"));
        let recs = if side == "baseline" {
            &mut base
        } else {
            &mut cand
        };
        let outcome = count_suite(suite, recs, o.count_mode, &co, &|_| {})?;
        // count_suite attaches by fingerprint to every record of the side.
        if let Some(line) = outcome.describe() {
            counting_lines.push(format!("{side}: {line}"));
        }
        if let CountOutcome::Counted { failed } = outcome {
            if failed > 0 {
                progress(&format!(
                    "      {failed} workload(s) of the {side} build could not be counted"
                ));
            }
        }
    }
    let g = gate(&o.policy, &base, &cand, Date::today_utc());
    let code = g.exit_code();
    let runs_per_side = 2 * o.rounds;
    let decision = format!(
        "gate: {} — candidate build against baseline build in {} A B B A round(s), {runs_per_side} timed run(s) per side (exit {code})",
        g.overall.label(),
        o.rounds
    );
    let lead = vec![(
        "How this was decided".to_string(),
        format!(
            "Two builds in one run: baseline {} and candidate {}. Counted metrics (instructions, estimated cycles: callgrind, each build counting its own code) decide; the same build gives the same counts, so a change beyond the allowance is a FAIL without a test. Time was measured in {} interleaved A B B A rounds ({runs_per_side} runs per side, each `bench` invocation one run) and is tested between runs (run_t); it decides only a workload that could not be counted. Nothing was recorded in a store.{}",
            o.baseline_exe.display(),
            o.candidate_exe.display(),
            o.rounds,
            if counting_lines.is_empty() {
                String::new()
            } else {
                format!("\n{}", counting_lines.join("\n"))
            }
        ),
    )];
    let report = Report::new(g.clone(), &base, &cand, None);
    let markdown = render_markdown_with_lead(&report, &lead);
    let lead_html: Vec<HtmlSection> = lead
        .iter()
        .map(|(t, x)| HtmlSection {
            title: t.clone(),
            body: HtmlBody::Text(x.clone()),
        })
        .collect();
    let html = render_html_with_lead(&report, &lead_html, &[]);
    let (md_path, html_path) = crate::quickstart::write_reports(&o.out_dir, &markdown, &html)?;
    Ok(TwoBuildsOutcome {
        schema_version: TWO_BUILDS_SCHEMA_VERSION,
        exit_code: code,
        decision,
        reasons: g.reasons.clone(),
        runs_per_side,
        counting: (!counting_lines.is_empty()).then(|| counting_lines.join("; ")),
        gate: g,
        markdown_path: md_path,
        html_path,
        duration_s: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(baseline: &str) -> TwoBuildsOptions {
        TwoBuildsOptions {
            baseline_exe: baseline.into(),
            candidate_exe: "/bin/true".into(),
            out_dir: std::env::temp_dir(),
            threads: 1,
            rounds: 1,
            time_budget_ms: 1,
            min_iterations: 1,
            policy: Policy::default_embedded(),
            count_mode: CountMode::Off,
            count_jobs: 1,
        }
    }

    #[test]
    fn a_missing_baseline_binary_is_one_line_naming_it() {
        let e = run_two_builds(&opts("/nonexistent/tensorforge-old"), &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("baseline-bin") && e.contains("/nonexistent/tensorforge-old"),
            "{e}"
        );
    }

    #[test]
    fn a_baseline_that_is_not_tensorforge_names_the_side() {
        // `false` runs and exits 1: the warm-up names the baseline side.
        let e = run_two_builds(&opts("/bin/false"), &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("baseline command, warm-up run"), "{e}");
    }
}
