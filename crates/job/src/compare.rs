//! `tensorforge compare`: measure a baseline and a candidate in the same job, in
//! alternating rounds, and decide with [`tensorforge_ops::compare::decide`]. Each side is a
//! shell command (two builds of `tensorforge`, or any user command, as hyperfine takes them).
//!
//! Two ways to read a side's run:
//! - [`Mode::Wall`]: the command's wall-clock time from spawn to exit is the value (one
//!   workload, named by the caller), startup included, as a user pays it;
//! - [`Mode::Records`]: the command prints TensorForge records (JSON lines, a JSON array, or
//!   `bench --json` output) and each workload's per-iteration median is its value. Both sides
//!   must measure the same workloads (the same fingerprints), else it is an identity error.
//!
//! Each side runs once untimed first (a warm-up that also checks the command works and, in
//! records mode, the identities). Then rounds in the policy's order (ABBA or its mirror
//! BAAB by a seeded coin per round, or seeded AB/BA),
//! `rounds` at first and 5 more at a time while a workload is INCONCLUSIVE, up to
//! `max_rounds`. A command that exits non-zero or outlives the per-run timeout ends the job
//! with an error naming the side and the round; nothing is recorded. Not controlled: what
//! else the machine runs, and carry-over from one run to the next (caches, frequency).

use crate::error::{JobError, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tensorforge_ops::compare::{
    decide, round_order, wants_more_rounds, CompareResult, Round, WorkloadRounds, EXTRA_ROUNDS,
};
use tensorforge_ops::rng::SplitMix64;
use tensorforge_ops::Policy;
use tensorforge_store::{parse_records_text, Record};

/// Version of the comparison output JSON.
/// 2: the decision's schema 2, and each run's values.
pub const COMPARE_OUTPUT_SCHEMA_VERSION: u32 = 2;

/// How a run's value is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Wall-clock time of the whole command.
    Wall,
    /// Per-workload medians from the records the command prints.
    Records,
}

/// One side: a label and a shell command.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SideSpec {
    /// `baseline` or `candidate` (used in messages).
    pub label: String,
    /// Run with `sh -c`.
    pub command: String,
}

/// What to compare and how.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Side A.
    pub baseline: SideSpec,
    /// Side B.
    pub candidate: SideSpec,
    /// How values are read.
    pub mode: Mode,
    /// Workload name in wall mode.
    pub name: String,
    /// Per-run timeout.
    pub timeout: Duration,
    /// Policy (allowance, α, rounds, order, seed).
    pub policy: Policy,
}

/// The policy's compare settings overridden by a caller's round counts and order, checked:
/// `rounds` in 3..=1000, `max_rounds` from the rounds to 10000 (the command line's
/// `--rounds`, `--max-rounds`, `--order`; errors name `--rounds`/`--max-rounds`).
pub fn override_rounds(
    policy: &mut tensorforge_ops::Policy,
    rounds: Option<usize>,
    max_rounds: Option<usize>,
    order: Option<tensorforge_ops::RoundOrder>,
) -> Result<()> {
    if let Some(r) = rounds {
        if !(3..=1000).contains(&r) {
            return Err(JobError::invalid(
                "--rounds",
                r,
                "must be between 3 and 1000",
            ));
        }
        policy.compare.rounds = r;
        policy.compare.max_rounds = policy.compare.max_rounds.max(r);
    }
    if let Some(m) = max_rounds {
        if m < policy.compare.rounds || m > 10_000 {
            return Err(JobError::invalid(
                "--max-rounds",
                m,
                format!(
                    "must be between the rounds ({}) and 10000",
                    policy.compare.rounds
                ),
            ));
        }
        policy.compare.max_rounds = m;
    }
    if let Some(o) = order {
        policy.compare.order = o;
    }
    Ok(())
}

/// One timed run, as it happened.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunLog {
    /// 1-based round.
    pub round: usize,
    /// `baseline` or `candidate`.
    pub side: String,
    /// Wall-clock time of the command, ns.
    pub wall_ns: f64,
    /// The value each workload took in this run, ns, by workload name (records mode: its
    /// per-iteration median; wall mode: the wall time), so the rounds can be re-analysed.
    #[serde(default)]
    pub values_ns: BTreeMap<String, f64>,
}

/// The decision and every run behind it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CompareOutput {
    /// Always [`COMPARE_OUTPUT_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The two commands.
    pub baseline: SideSpec,
    /// The candidate command.
    pub candidate: SideSpec,
    /// How values were read.
    pub mode: Mode,
    /// Rounds run.
    pub rounds: usize,
    /// The decision.
    pub result: CompareResult,
    /// Every timed run in order.
    pub runs: Vec<RunLog>,
}

/// Run a shell command to completion within `timeout`; returns (wall ns, stdout).
fn run_command(
    side: &SideSpec,
    when: &str,
    timeout: Duration,
    capture: bool,
) -> Result<(f64, String)> {
    let err = |what: String| JobError::Command {
        side: side.label.clone(),
        when: when.into(),
        what,
    };
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(&side.command)
        .stdin(Stdio::null())
        .stdout(if capture {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| err(format!("cannot start `sh -c {}`: {e}", side.command)))?;
    let out_pipe = child.stdout.take();
    let err_pipe = child.stderr.take();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut p) = out_pipe {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut p) = err_pipe {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) => {
                if t0.elapsed() > timeout {
                    // Kill the whole process group (the shell and what it started).
                    let _ = Command::new("kill")
                        .args(["-KILL", "--", &format!("-{}", child.id())])
                        .status();
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(err(format!(
                        "timed out after {:.1} s (per-run timeout) and was killed",
                        timeout.as_secs_f64()
                    )));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => return Err(err(format!("cannot wait for it: {e}"))),
        }
    };
    let wall_ns = t0.elapsed().as_nanos() as f64;
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    if !status.success() {
        let tail: String = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .chars()
            .filter(|c| !c.is_control())
            .take(300)
            .collect();
        return Err(err(format!(
            "exited with {status}{}",
            if tail.is_empty() {
                String::new()
            } else {
                format!(" ({tail})")
            }
        )));
    }
    Ok((wall_ns, stdout))
}

/// Records printed by a side: JSON lines, a JSON array, or an object with `records`.
fn parse_side_records(text: &str, side: &SideSpec, when: &str) -> Result<Vec<Record>> {
    let err = |what: String| JobError::Command {
        side: side.label.clone(),
        when: when.into(),
        what,
    };
    let trimmed = text.trim_start();
    let recs = if trimmed.starts_with('{') && !trimmed.contains('\n') || trimmed.starts_with("{\n")
    {
        let v: serde_json::Value = serde_json::from_str(trimmed)
            .map_err(|e| err(format!("stdout is not records JSON: {e}")))?;
        match v.get("records") {
            Some(r) => parse_records_text(&r.to_string(), &format!("{} stdout", side.label))?,
            None => parse_records_text(trimmed, &format!("{} stdout", side.label))?,
        }
    } else {
        parse_records_text(trimmed, &format!("{} stdout", side.label))?
    };
    Ok(recs)
}

/// Per-fingerprint (name, per-iteration median ns).
fn values(recs: &[Record]) -> BTreeMap<String, (String, f64)> {
    recs.iter()
        .map(|r| {
            (
                r.fingerprint.clone(),
                (r.workload.name.clone(), r.stats.p50_ns),
            )
        })
        .collect()
}

/// Run the comparison (see the module comment); `progress` receives one line per round.
pub fn run_compare(o: &CompareOptions, progress: &mut dyn FnMut(&str)) -> Result<CompareOutput> {
    if o.timeout.is_zero() {
        return Err(JobError::invalid("timeout", "0", "must be positive"));
    }
    for s in [&o.baseline, &o.candidate] {
        if s.command.trim().is_empty() {
            return Err(JobError::invalid(&s.label, "", "the command is empty"));
        }
    }
    let capture = o.mode == Mode::Records;
    // Warm-up: each side once, untimed; checks that it runs and, for records, identity.
    let (_, a_out) = run_command(&o.baseline, "warm-up run", o.timeout, capture)?;
    let (_, b_out) = run_command(&o.candidate, "warm-up run", o.timeout, capture)?;
    let reference: BTreeMap<String, String> = if capture {
        let a = values(&parse_side_records(&a_out, &o.baseline, "warm-up run")?);
        let b = values(&parse_side_records(&b_out, &o.candidate, "warm-up run")?);
        check_identity(&a, &b)?;
        a.into_iter().map(|(fp, (n, _))| (fp, n)).collect()
    } else {
        let mut m = BTreeMap::new();
        m.insert(String::new(), o.name.clone());
        m
    };
    let mut per: BTreeMap<String, WorkloadRounds> = reference
        .iter()
        .map(|(fp, name)| {
            (
                fp.clone(),
                WorkloadRounds {
                    name: name.clone(),
                    fingerprint: if fp.is_empty() {
                        format!("wall:{name}")
                    } else {
                        fp.clone()
                    },
                    rounds: Vec::new(),
                },
            )
        })
        .collect();
    let mut rng = SplitMix64::new(o.policy.suite.seed);
    let mut runs = Vec::new();
    let mut round_no = 0usize;
    let mut target = o.policy.compare.rounds;
    loop {
        while round_no < target {
            round_no += 1;
            let when = format!("round {round_no}");
            let mut round: BTreeMap<String, Round> = per
                .keys()
                .map(|k| {
                    (
                        k.clone(),
                        Round {
                            baseline_ns: Vec::new(),
                            candidate_ns: Vec::new(),
                        },
                    )
                })
                .collect();
            for is_base in round_order(o.policy.compare.order, &mut rng) {
                let side = if is_base { &o.baseline } else { &o.candidate };
                let (wall, out) = run_command(side, &when, o.timeout, capture)?;
                let vals: BTreeMap<String, f64> = if capture {
                    let v = values(&parse_side_records(&out, side, &when)?);
                    let names: BTreeMap<String, (String, f64)> = v.clone();
                    check_identity(
                        &reference
                            .iter()
                            .map(|(k, n)| (k.clone(), (n.clone(), 0.0)))
                            .collect(),
                        &names,
                    )?;
                    v.into_iter().map(|(k, (_, x))| (k, x)).collect()
                } else {
                    [(String::new(), wall)].into_iter().collect()
                };
                runs.push(RunLog {
                    round: round_no,
                    side: side.label.clone(),
                    wall_ns: wall,
                    values_ns: vals
                        .iter()
                        .filter_map(|(k, x)| reference.get(k).map(|n| (n.clone(), *x)))
                        .collect(),
                });
                for (k, x) in vals {
                    if let Some(r) = round.get_mut(&k) {
                        if is_base {
                            r.baseline_ns.push(x);
                        } else {
                            r.candidate_ns.push(x);
                        }
                    }
                }
            }
            for (k, r) in round {
                if let Some(w) = per.get_mut(&k) {
                    w.rounds.push(r);
                }
            }
            progress(&format!("round {round_no} done"));
        }
        let list: Vec<WorkloadRounds> = per.values().cloned().collect();
        let result = decide(&o.policy, &list)?;
        if !wants_more_rounds(&result) || round_no >= o.policy.compare.max_rounds {
            return Ok(CompareOutput {
                schema_version: COMPARE_OUTPUT_SCHEMA_VERSION,
                baseline: o.baseline.clone(),
                candidate: o.candidate.clone(),
                mode: o.mode,
                rounds: round_no,
                result,
                runs,
            });
        }
        progress(&format!(
            "INCONCLUSIVE after {round_no} rounds: {EXTRA_ROUNDS} more (budget {})",
            o.policy.compare.max_rounds
        ));
        target = (round_no + EXTRA_ROUNDS).min(o.policy.compare.max_rounds);
    }
}

/// Both sides must measure exactly the same workloads (fingerprints).
fn check_identity(
    a: &BTreeMap<String, (String, f64)>,
    b: &BTreeMap<String, (String, f64)>,
) -> Result<()> {
    let only_a: Vec<String> = a
        .iter()
        .filter(|(k, _)| !b.contains_key(*k))
        .map(|(k, (n, _))| format!("{n} ({})", k.get(..12).unwrap_or(k)))
        .collect();
    let only_b: Vec<String> = b
        .iter()
        .filter(|(k, _)| !a.contains_key(*k))
        .map(|(k, (n, _))| format!("{n} ({})", k.get(..12).unwrap_or(k)))
        .collect();
    if only_a.is_empty() && only_b.is_empty() {
        return Ok(());
    }
    Err(JobError::Identity(format!(
        "the sides measured different workloads: only in the baseline [{}], only in the candidate [{}]",
        only_a.join(", "),
        only_b.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(a: &str, b: &str) -> CompareOptions {
        let mut policy = Policy::default_embedded();
        policy.compare.rounds = 3;
        policy.compare.max_rounds = 3;
        CompareOptions {
            baseline: SideSpec {
                label: "baseline".into(),
                command: a.into(),
            },
            candidate: SideSpec {
                label: "candidate".into(),
                command: b.into(),
            },
            mode: Mode::Wall,
            name: "t".into(),
            timeout: Duration::from_secs(10),
            policy,
        }
    }

    #[test]
    fn wall_mode_runs_abba_rounds() {
        let out = run_compare(&opts("true", "true"), &mut |_| {}).unwrap();
        assert_eq!(out.rounds, 3);
        // ABBA or BAAB: 4 timed runs a round, the two ends of a round on one side.
        assert_eq!(out.runs.len(), 12);
        for r in out.runs.chunks(4) {
            assert!(r.iter().all(|x| x.round == r[0].round));
            assert_eq!(r[0].side, r[3].side);
            assert_eq!(r[1].side, r[2].side);
            assert_ne!(r[0].side, r[1].side);
            assert_eq!(r[0].values_ns["t"], r[0].wall_ns);
        }
        assert_eq!(out.result.rows.len(), 1);
        assert_eq!(out.result.rows[0].rounds, 3);
    }

    #[test]
    fn failing_and_hanging_commands_are_errors() {
        let e = run_compare(&opts("true", "echo boom >&2; exit 3"), &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("candidate command") && e.contains("warm-up") && e.contains("boom"),
            "{e}"
        );
        let mut o = opts("true", "sleep 5");
        o.timeout = Duration::from_millis(300);
        let t = Instant::now();
        let e = run_compare(&o, &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("timed out"), "{e}");
        assert!(
            t.elapsed() < Duration::from_secs(4),
            "the hung command was killed"
        );
    }

    #[test]
    fn records_mode_checks_identity() {
        let mut o = opts("echo not-json", "echo not-json");
        o.mode = Mode::Records;
        let e = run_compare(&o, &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("baseline"), "{e}");
    }
}
