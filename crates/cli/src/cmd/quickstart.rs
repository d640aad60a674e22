//! `tensorforge quickstart`: parse the options, run the main job
//! (`tensorforge_job::quickstart`), print its progress on stderr and its decision on stdout.
//! Exit status is the gate's: 0 pass (or baseline established), 1 policy failure,
//! 3 inconclusive; 2 for an operational error or a gate ERROR.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use tensorforge_job::quickstart::{run_quickstart as run_job, QuickstartOptions};
use tensorforge_job::two_builds::{run_two_builds, TwoBuildsOptions};
use tensorforge_measure::counting::{CountMode, CountOptions};
use tensorforge_ops::Policy;
use tensorforge_store::default_store_path;

/// Arguments of `tensorforge quickstart`.
#[derive(Args, Debug)]
pub struct QuickstartArgs {
    /// Store: SQLite file or postgres://user@host:port/db URL (default: $TENSORFORGE_STORE, else
    /// $XDG_DATA_HOME/tensorforge/tensorforge.sqlite, else ~/.local/share/tensorforge/tensorforge.sqlite).
    #[arg(long, value_name = "PATH|URL")]
    pub store: Option<PathBuf>,
    /// Directory for report.md and report.html (default: the current directory).
    #[arg(long, default_value = ".")]
    pub out_dir: PathBuf,
    /// Worker threads for calibration and measurement. Default 1: on a shared machine,
    /// multi-threaded timings swing with co-tenant load far more than single-threaded ones.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Policy file (default: the policy built into the binary, examples/policy.toml).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Minimum timed duration per workload, ms.
    #[arg(long, default_value_t = 300)]
    pub time_budget_ms: u64,
    /// Minimum timed iterations per workload.
    #[arg(long, default_value_t = 20)]
    pub iterations: u64,
    /// Count instructions and estimated cycles with valgrind's callgrind (the default when
    /// valgrind is installed; these counts decide the gate) and fail when it is missing;
    /// N counted iterations after one warm-up (default 1).
    #[arg(long, visible_alias = "instructions", value_name = "N", num_args = 0..=1, default_missing_value = "1")]
    pub counts: Option<u64>,
    /// Do not count: the gate decides on time only (between-run tests, history needed).
    #[arg(long, conflicts_with = "counts")]
    pub no_counts: bool,
    /// Print the outcome (decision, every gate row, what decided each workload) as one JSON
    /// object instead of text; progress still goes to stderr.
    #[arg(long)]
    pub json: bool,
    /// Gate this build against another build of tensorforge (e.g. the previous commit's)
    /// instead of the store's history: each build's counts, and both timed in interleaved
    /// A B B A rounds, each run timing every workload for min(--time-budget-ms, 100) ms and
    /// min(--iterations, 10) iterations. Nothing is recorded.
    #[arg(long, value_name = "PATH", conflicts_with = "store")]
    pub baseline_bin: Option<PathBuf>,
    /// With --baseline-bin: A B B A rounds (each gives each build two timed runs).
    #[arg(long, default_value_t = 5, requires = "baseline_bin")]
    pub rounds: usize,
    /// `cpu` (default) or `cuda[:N]`: the main job on an NVIDIA GPU (calibrate it, measure
    /// the GPU holdout suite, validate, gate against earlier GPU runs on the same GPU;
    /// docs/gpu.md).
    #[arg(long, default_value = "cpu", value_name = "cpu|cuda[:N]")]
    pub device: String,
}

/// Run the main job; returns the gate's exit code.
pub fn run_quickstart(a: QuickstartArgs) -> Result<u8> {
    let policy = match &a.policy {
        Some(p) => Policy::from_toml_str(
            &super::read_text(&p.display().to_string())?,
            &p.display().to_string(),
        )?,
        None => Policy::default_embedded(),
    };
    if let tensorforge_cuda::device::DeviceSpec::Cuda(n) =
        tensorforge_cuda::device::DeviceSpec::parse(&a.device)?
    {
        return run_gpu(&a, n, policy);
    }
    let mut o = QuickstartOptions::new(
        a.store.clone().unwrap_or_else(default_store_path),
        a.out_dir.clone(),
    );
    o.threads = a.threads;
    o.policy = policy;
    o.time_budget_ns = a.time_budget_ms.saturating_mul(1_000_000);
    o.min_iterations = a.iterations;
    o.count_mode = match (a.counts, a.no_counts) {
        (Some(0), _) => anyhow::bail!("invalid `--counts` = `0`: must be at least 1"),
        (Some(_), _) => CountMode::Required,
        (None, true) => CountMode::Off,
        (None, false) => CountMode::Auto,
    };
    let mut co = CountOptions::new(
        std::env::current_exe()?,
        tensorforge_measure::context::host_logical_cores().max(1) as usize,
    );
    co.iterations = a.counts.unwrap_or(1);
    if let Some(bin) = &a.baseline_bin {
        return run_two(&a, bin, &o, co.jobs);
    }
    o.count_options = Some(co);
    let out = run_job(&o, &mut |line| eprintln!("{line}"))?;
    print_outcome(
        a.json,
        &out,
        &format!(
            "validation: pure roofline median APE {:.1} % over {} holdout workloads",
            out.roofline_median_ape_pct, out.validated_workloads
        ),
    )
}

/// The job's outcome: JSON, or the decision, the validation line, where the reports and
/// the run went; the gate's exit code.
fn print_outcome(
    json: bool,
    out: &tensorforge_job::quickstart::QuickstartOutcome,
    validation: &str,
) -> Result<u8> {
    if json {
        super::print_json(out)?;
        return Ok(out.exit_code);
    }
    print_decision(&out.decision, &out.counting, &out.injected, &out.reasons);
    for v in &out.ceiling_violations {
        println!("{v}");
    }
    println!("{validation}");
    println!(
        "wrote {} and {}",
        out.markdown_path.display(),
        out.html_path.display()
    );
    println!("recorded run {} in {}", out.run_id, out.store);
    println!("done in {:.1} s", out.duration_s);
    Ok(out.exit_code)
}

/// `quickstart --device cuda[:N]`.
fn run_gpu(a: &QuickstartArgs, ordinal: usize, policy: Policy) -> Result<u8> {
    for (given, flag) in [
        (a.threads != 1, "--threads"),
        (a.counts.is_some(), "--counts"),
        (a.no_counts, "--no-counts"),
        (a.baseline_bin.is_some(), "--baseline-bin"),
    ] {
        if given {
            anyhow::bail!(
                "invalid `{flag}` with `--device {}`: it applies to the CPU job only",
                a.device
            );
        }
    }
    let mut o = tensorforge_job::gpu_quickstart::GpuQuickstartOptions::new(
        a.store.clone().unwrap_or_else(default_store_path),
        a.out_dir.clone(),
    );
    o.ordinal = ordinal;
    o.policy = policy;
    o.time_budget_ns = a.time_budget_ms.saturating_mul(1_000_000);
    o.min_iterations = a.iterations;
    let out =
        tensorforge_job::gpu_quickstart::run_gpu_quickstart(&o, &mut |line| eprintln!("{line}"))?;
    print_outcome(
        a.json,
        &out,
        &format!(
            "validation: median |error| {:.1} % over the holdout rows where one roof binds ({} rows in all)",
            out.roofline_median_ape_pct, out.validated_workloads
        ),
    )
}

/// `quickstart --baseline-bin`: the two-builds job.
fn run_two(
    a: &QuickstartArgs,
    bin: &std::path::Path,
    o: &QuickstartOptions,
    jobs: usize,
) -> Result<u8> {
    let t = TwoBuildsOptions {
        baseline_exe: bin.to_path_buf(),
        candidate_exe: std::env::current_exe()?,
        out_dir: a.out_dir.clone(),
        threads: a.threads,
        rounds: a.rounds,
        time_budget_ms: a.time_budget_ms.min(100),
        min_iterations: a.iterations.min(10),
        policy: o.policy.clone(),
        count_mode: o.count_mode,
        count_jobs: jobs,
    };
    let out = run_two_builds(&t, &mut |line| eprintln!("{line}"))?;
    if a.json {
        super::print_json(&out)?;
        return Ok(out.exit_code);
    }
    print_decision(&out.decision, &out.counting, &[], &out.reasons);
    println!(
        "wrote {} and {}",
        out.markdown_path.display(),
        out.html_path.display()
    );
    println!("done in {:.1} s", out.duration_s);
    Ok(out.exit_code)
}

/// The decision, what counting did, injected slowdowns and the gate's reasons.
fn print_decision(
    decision: &str,
    counting: &Option<String>,
    injected: &[String],
    reasons: &[String],
) {
    println!("{decision}");
    if let Some(c) = counting {
        println!("counts: {c}");
    }
    for i in injected {
        println!("injected: {i}");
    }
    for reason in reasons {
        println!("  {reason}");
    }
}
