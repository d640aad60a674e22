//! `tensorforge quickstart`: parse the options, run the main job
//! (`tensorforge_job::quickstart`), print its progress on stderr and its decision on stdout.
//! Exit status is the gate's: 0 pass (or baseline established), 1 policy failure,
//! 3 inconclusive; 2 for an operational error or a gate ERROR.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use tensorforge_job::quickstart::{run_quickstart as run_job, QuickstartOptions};
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
    /// Also count instructions per iteration with valgrind's callgrind and gate on them (a
    /// repeatable metric on a busy machine; N counted iterations, default 3).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "3")]
    pub instructions: Option<u64>,
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
    let mut o = QuickstartOptions::new(
        a.store.clone().unwrap_or_else(default_store_path),
        a.out_dir.clone(),
    );
    o.threads = a.threads;
    o.policy = policy;
    o.time_budget_ns = a.time_budget_ms.saturating_mul(1_000_000);
    o.min_iterations = a.iterations;
    if let Some(n) = a.instructions {
        o.instructions = Some((std::env::current_exe()?, n));
    }
    let out = run_job(&o, &mut |line| eprintln!("{line}"))?;
    println!("{}", out.decision);
    for reason in &out.reasons {
        println!("  {reason}");
    }
    for v in &out.ceiling_violations {
        println!("{v}");
    }
    println!(
        "validation: pure roofline median APE {:.1} % over {} holdout workloads",
        out.roofline_median_ape_pct, out.validated_workloads
    );
    println!(
        "wrote {} and {}",
        out.markdown_path.display(),
        out.html_path.display()
    );
    println!("recorded run {} in {}", out.run_id, out.store);
    println!("done in {:.1} s", out.duration_s);
    Ok(out.exit_code)
}
