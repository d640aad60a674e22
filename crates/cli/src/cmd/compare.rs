//! `tensorforge compare`: parse the two sides and the options, run the interleaved A/B job
//! (`tensorforge_job::compare`), print each workload's decision. Exit status 0 pass,
//! 1 regression, 3 inconclusive, 2 for an error (a side that fails or times out, different
//! workload identities).

use super::{print_json, read_text};
use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use std::time::Duration;
use tensorforge_job::compare::{override_rounds, run_compare, CompareOptions, Mode, SideSpec};
use tensorforge_ops::{Policy, RoundOrder};

/// How each side's run is read.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum ModeArg {
    /// Wall-clock time of the whole command (any command).
    Wall,
    /// The command prints TensorForge records (`tensorforge bench ... --json`); each
    /// workload's median per-iteration time is compared.
    Records,
}

/// Order of the sides within a round.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum OrderArg {
    /// A B B A.
    Abba,
    /// A B or B A, seeded.
    Random,
}

/// Arguments of `tensorforge compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Baseline command (run with `sh -c`), e.g. "./old/tensorforge bench gemm_tiny --json".
    #[arg(long, value_name = "CMD")]
    pub baseline: String,
    /// Candidate command.
    #[arg(long, value_name = "CMD")]
    pub candidate: String,
    /// How a run is read.
    #[arg(long, value_enum, default_value = "wall")]
    pub mode: ModeArg,
    /// Workload name in wall mode (the thing both commands do).
    #[arg(long, default_value = "command")]
    pub name: String,
    /// Rounds before the first decision (default: the policy's compare.rounds, 10).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Round budget for INCONCLUSIVE workloads (default: the policy's compare.max_rounds, 30).
    #[arg(long)]
    pub max_rounds: Option<usize>,
    /// Order within a round (default: the policy's compare.order, abba).
    #[arg(long, value_enum)]
    pub order: Option<OrderArg>,
    /// Per-run timeout, seconds.
    #[arg(long, default_value_t = 600.0)]
    pub timeout_s: f64,
    /// Policy file (default: the embedded policy).
    #[arg(long)]
    pub policy: Option<String>,
    /// Print the decision and every run as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Run `tensorforge compare`; returns the exit status.
pub fn run(a: CompareArgs) -> Result<u8> {
    let mut policy = match &a.policy {
        Some(p) => Policy::from_toml_str(&read_text(p)?, p)?,
        None => Policy::default_embedded(),
    };
    let order = a.order.map(|o| match o {
        OrderArg::Abba => RoundOrder::Abba,
        OrderArg::Random => RoundOrder::Random,
    });
    override_rounds(&mut policy, a.rounds, a.max_rounds, order)?;
    if !(a.timeout_s.is_finite() && a.timeout_s > 0.0) {
        bail!(
            "invalid `--timeout-s` = `{}`: must be a positive number of seconds",
            a.timeout_s
        );
    }
    let o = CompareOptions {
        baseline: SideSpec {
            label: "baseline".into(),
            command: a.baseline.clone(),
        },
        candidate: SideSpec {
            label: "candidate".into(),
            command: a.candidate.clone(),
        },
        mode: match a.mode {
            ModeArg::Wall => Mode::Wall,
            ModeArg::Records => Mode::Records,
        },
        name: a.name.clone(),
        timeout: Duration::from_secs_f64(a.timeout_s),
        policy,
    };
    let out = run_compare(&o, &mut |line| eprintln!("{line}"))?;
    if a.json {
        print_json(&out)?;
        return Ok(out.result.exit_code);
    }
    let r = &out.result;
    println!(
        "compare: {} after {} rounds ({}; exit {})",
        r.overall.label(),
        out.rounds,
        r.design,
        r.exit_code
    );
    for row in &r.rows {
        let pct = |x: f64| format!("{:+.1} %", x * 100.0);
        let iv = row
            .interval
            .map(|(lo, hi)| format!("[{}, {}]", pct(lo), pct(hi)))
            .unwrap_or_else(|| "[n/a]".into());
        println!(
            "  {}: {} — median change {} {iv}, lower bound {}, allowed {:.1} %, {}/{} rounds beyond, p = {:.2e} — {}",
            row.workload.replace(|c: char| c.is_control(), " "),
            row.verdict.label(),
            pct(row.change_relative),
            row.lower_bound_relative.map_or_else(|| "n/a".into(), pct),
            row.allowed_relative * 100.0,
            row.rounds_beyond,
            row.rounds,
            row.p_adjusted.unwrap_or(row.p_value),
            row.reason
        );
    }
    Ok(r.exit_code)
}
