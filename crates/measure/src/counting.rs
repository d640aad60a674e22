//! Counted metrics, the ones co-tenant load does not move: `valgrind --tool=callgrind
//! --cache-sim=yes` executes a workload under a simulator and counts the instructions it
//! runs and the misses of a fixed, simulated cache hierarchy; the cycle estimate weighs them
//! (`Ir + 5·L1 misses + 35·LL misses`, as iai-callgrind and CodSpeed do) so that a
//! memory-bound regression moves a counted metric too. The counts depend only on the
//! binary, its inputs and its environment, not on what else the machine runs.
//!
//! Cost control: valgrind runs vector code 50–600× slower than the CPU (it emulates each
//! lane of a fused multiply-add), so a workload is counted on a smaller instance of the
//! same code path when its model FLOPs exceed [`COUNT_FLOP_BUDGET`]
//! ([`WorkloadSpec::scaled`] divides the outermost dimension; the record names the counted
//! instance and the divisor), for one iteration after one uncounted warm-up call, and the
//! workloads are counted in parallel processes. The child process is
//! `tensorforge __count-instructions`, with collection on only inside
//! [`tensorforge_counted_region`], so start-up, input preparation and the warm-up are not
//! counted.
//!
//! Left out: hardware counters (`perf stat` is "not supported" on many VMs, this one
//! included), this CPU's real caches and cycles (the simulated geometry is fixed so counts
//! agree across machines: [`CACHE_MODEL`]), prefetching and out-of-order overlap, and
//! multi-threaded runs (thread interleaving changes spin counts).

use crate::error::{MeasureError, Result};
use crate::workload::WorkloadSpec;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tensorforge_store::{CountedEvents, Counter, Record};

/// The symbol callgrind's `--toggle-collect` names: collection is on only inside it.
pub const COUNTED_REGION_SYMBOL: &str = "tensorforge_counted_region";

/// Most model FLOPs one counted call may do (2^25 ≈ 33.6 M): a larger workload is counted on
/// an instance with its outermost dimension divided until it fits, about 1 s of valgrind
/// time per call on a 2020s x86 core.
pub const COUNT_FLOP_BUDGET: f64 = 33_554_432.0;

/// The simulated caches (callgrind's `--I1`, `--D1`, `--LL`: size in bytes, ways, line
/// bytes): a 32 KiB 8-way L1 pair and an 8 MiB 16-way last level, typical of one core's
/// share of a current server CPU. Fixed, so counts agree between machines.
pub const CACHE_MODEL: [(&str, u64, u64, u64); 3] = [
    ("I1", 32_768, 8, 64),
    ("D1", 32_768, 8, 64),
    ("LL", 8_388_608, 16, 64),
];

/// Environment variable naming the valgrind executable (default `valgrind` on `PATH`).
pub const VALGRIND_ENV: &str = "TENSORFORGE_VALGRIND";

/// Environment variable overriding the per-workload counting limit, seconds (default 300).
pub const COUNT_TIMEOUT_ENV: &str = "TENSORFORGE_COUNT_TIMEOUT_S";

/// How counting is run.
#[derive(Clone, Debug)]
pub struct CountOptions {
    /// The `tensorforge` executable that has the `__count-instructions` command.
    pub exe: PathBuf,
    /// Counted iterations per workload (after one uncounted warm-up call).
    pub iterations: u64,
    /// Workloads counted at once (parallel valgrind processes).
    pub jobs: usize,
    /// Longest one workload's count may take before it is killed and reported as an error.
    pub timeout: Duration,
    /// FLOPs above which a smaller instance is counted ([`COUNT_FLOP_BUDGET`]).
    pub flop_budget: f64,
}

impl CountOptions {
    /// One counted iteration, `jobs` processes, a 300 s limit per workload (or
    /// [`COUNT_TIMEOUT_ENV`] seconds when that is set to a positive number).
    pub fn new(exe: PathBuf, jobs: usize) -> CountOptions {
        let timeout_s = std::env::var(COUNT_TIMEOUT_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .unwrap_or(300.0);
        CountOptions {
            exe,
            iterations: 1,
            jobs: jobs.max(1),
            timeout: Duration::from_secs_f64(timeout_s),
            flop_budget: COUNT_FLOP_BUDGET,
        }
    }
}

/// Runs `f` `iterations` times. Callgrind counts only what executes inside this function
/// (it is never inlined, and its symbol name is fixed).
#[no_mangle]
#[inline(never)]
pub fn tensorforge_counted_region(
    f: &mut dyn FnMut() -> Result<()>,
    iterations: u64,
) -> Result<()> {
    for _ in 0..iterations {
        f()?;
    }
    Ok(())
}

/// Prepare `spec` on one thread (with any injected work), call it once uncounted, then run
/// it `iterations` times inside the counted region (what the child process does).
pub fn run_counted(spec: &WorkloadSpec, iterations: u64) -> Result<()> {
    spec.validate(&spec.name)?;
    let pool = crate::harness::thread_pool(1)?;
    pool.install(|| -> Result<()> {
        let mut f = crate::inject::prepare_spec(spec, 1, 1)?;
        f()?;
        tensorforge_counted_region(&mut f, iterations)
    })
}

/// The instance that is counted for `spec`, and how many times less work it does: `spec`
/// itself (divisor 1) when its FLOPs are within `flop_budget` or it has no scalable
/// dimension, else [`WorkloadSpec::scaled`] by `1 / divisor` with the smallest power-of-two
/// divisor that brings it within the budget.
///
/// ```
/// use tensorforge_measure::{counting::counted_instance, WorkloadSpec};
/// // 512³ GEMM: 2·512³ = 268 M FLOPs; ÷ 8 = 33.5 M ≤ 2^25, so m = 512 / 8 = 64.
/// let s = WorkloadSpec::gemm("g", 512, 512, 512, 1).unwrap();
/// let (c, d) = counted_instance(&s, 33_554_432.0).unwrap();
/// assert_eq!((c, d), (WorkloadSpec::gemm("g", 64, 512, 512, 1).unwrap(), 8));
/// ```
pub fn counted_instance(spec: &WorkloadSpec, flop_budget: f64) -> Result<(WorkloadSpec, u64)> {
    let flops = spec.flops()?.unwrap_or(0.0);
    if flops <= flop_budget || flop_budget <= 0.0 {
        return Ok((spec.clone(), 1));
    }
    let mut divisor: u64 = 2;
    while (flops / divisor as f64) > flop_budget && divisor < (1 << 40) {
        divisor *= 2;
    }
    Ok(match spec.scaled(1.0 / divisor as f64)? {
        Some(s) => (s, divisor),
        None => (spec.clone(), 1),
    })
}

/// The events of a callgrind output file: the `events:` names with the values of its
/// `summary:` line (or `totals:` when there is no summary).
pub fn parse_callgrind_events(text: &str, source: &str) -> Result<Vec<(String, f64)>> {
    let parse_err = |message: String| MeasureError::Parse {
        source_name: source.into(),
        message,
    };
    let names: Vec<String> = text
        .lines()
        .find_map(|l| l.strip_prefix("events:"))
        .ok_or_else(|| parse_err("no `events:` line (is it a callgrind output file?)".into()))?
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let line = text
        .lines()
        .find(|l| l.starts_with("summary:"))
        .or_else(|| text.lines().find(|l| l.starts_with("totals:")))
        .ok_or_else(|| {
            parse_err("no `summary:` or `totals:` line (is it a callgrind output file?)".into())
        })?;
    let values = line.split_once(':').map(|(_, v)| v).unwrap_or("");
    let mut out = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        // Callgrind leaves trailing zero events off a line.
        let v = match values.split_whitespace().nth(i) {
            None => 0.0,
            Some(t) => t.parse::<f64>().map_err(|_| {
                parse_err(format!("`{}`: `{t}` is not a count of {name}", line.trim()))
            })?,
        };
        out.push((name.clone(), v));
    }
    if out.is_empty() {
        return Err(parse_err("the `events:` line names no event".into()));
    }
    Ok(out)
}

/// Per-iteration [`CountedEvents`] from callgrind's totals over `iterations` calls.
pub fn events_from_totals(
    totals: &[(String, f64)],
    iterations: u64,
    instance: String,
    work_divisor: u64,
    source: &str,
) -> Result<CountedEvents> {
    let get = |n: &str| totals.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
    let ir = get("Ir").ok_or_else(|| MeasureError::Parse {
        source_name: source.into(),
        message: "no `Ir` event (instructions)".into(),
    })?;
    let sum = |names: &[&str]| names.iter().filter_map(|n| get(n)).sum::<f64>();
    let it = iterations.max(1) as f64;
    let (instructions, l1, ll) = (
        ir / it,
        sum(&["I1mr", "D1mr", "D1mw"]) / it,
        sum(&["ILmr", "DLmr", "DLmw"]) / it,
    );
    Ok(CountedEvents {
        counter: Counter::Callgrind,
        instance,
        work_divisor,
        iterations,
        instructions,
        l1_misses: l1,
        ll_misses: ll,
        estimated_cycles: CountedEvents::estimate_cycles(instructions, l1, ll),
        cache_model: cache_model_text(),
    })
}

/// [`CACHE_MODEL`] in words, as records state it.
pub fn cache_model_text() -> String {
    let parts: Vec<String> = CACHE_MODEL
        .iter()
        .map(|(n, size, ways, _)| format!("{n} {size} B {ways}-way"))
        .collect();
    format!("{}, {} B lines", parts.join(", "), CACHE_MODEL[0].3)
}

fn valgrind_program() -> String {
    std::env::var(VALGRIND_ENV).unwrap_or_else(|_| "valgrind".into())
}

/// Whether valgrind can be run here: `Err` says in one line why not.
pub fn valgrind_available() -> std::result::Result<String, String> {
    let prog = valgrind_program();
    match Command::new(&prog)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
        Ok(o) => Err(format!("`{prog} --version` exited with {}", o.status)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "valgrind not found (`{prog}`): counted metrics need it (Debian: apt-get install valgrind)"
        )),
        Err(e) => Err(format!("cannot run `{prog}`: {e}")),
    }
}

/// Count one workload: run `exe __count-instructions` under callgrind with the cache
/// simulator, on the counted instance of `spec`. Errors name the workload and what failed
/// (valgrind missing, crashed, or past `o.timeout`).
pub fn count_workload(spec: &WorkloadSpec, o: &CountOptions) -> Result<CountedEvents> {
    if o.iterations == 0 {
        return Err(MeasureError::invalid(
            &spec.name,
            "counted iterations",
            0,
            "must be at least 1",
        ));
    }
    let (instance, divisor) = counted_instance(spec, o.flop_budget)?;
    let dir = std::env::temp_dir().join(format!(
        "tensorforge-callgrind-{}-{}",
        std::process::id(),
        crate::harness::new_run_id()
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| MeasureError::Other(format!("{}: {e}", dir.display())))?;
    let result = count_in(&dir, spec, &instance, divisor, o);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn count_in(
    dir: &Path,
    spec: &WorkloadSpec,
    instance: &WorkloadSpec,
    divisor: u64,
    o: &CountOptions,
) -> Result<CountedEvents> {
    let fail = |what: String| MeasureError::Other(format!("counting `{}`: {what}", spec.name));
    let spec_path = dir.join("workload.json");
    let out_path = dir.join("callgrind.out");
    let log_path = dir.join("valgrind.log");
    let json = serde_json::to_string(instance).map_err(|e| fail(e.to_string()))?;
    std::fs::write(&spec_path, json).map_err(|e| fail(format!("{}: {e}", spec_path.display())))?;
    let prog = valgrind_program();
    let mut cmd = Command::new(&prog);
    cmd.arg("--tool=callgrind")
        .arg("--cache-sim=yes")
        .arg(format!("--log-file={}", log_path.display()))
        .arg(format!("--callgrind-out-file={}", out_path.display()))
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={COUNTED_REGION_SYMBOL}"));
    for (name, size, ways, line) in CACHE_MODEL {
        cmd.arg(format!("--{name}={size},{ways},{line}"));
    }
    cmd.arg(&o.exe)
        .arg("__count-instructions")
        .arg(&spec_path)
        .arg("--iterations")
        .arg(o.iterations.to_string())
        .env("RAYON_NUM_THREADS", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(fail(format!(
                "valgrind not found (`{prog}`): counted metrics need it (Debian: apt-get install valgrind)"
            )))
        }
        Err(e) => return Err(fail(format!("cannot run `{prog}`: {e}"))),
    };
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if started.elapsed() > o.timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!(
                    "valgrind did not finish within {} s and was stopped",
                    o.timeout.as_secs_f64()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(fail(format!("waiting for valgrind: {e}"))),
        }
    };
    if !status.success() {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail = log
            .lines()
            .rev()
            .map(|l| {
                l.trim_start_matches(|c: char| c == '=' || c.is_ascii_digit())
                    .trim()
            })
            .find(|l| !l.is_empty())
            .unwrap_or("no message");
        return Err(fail(format!("valgrind exited with {status}: {tail}")));
    }
    let text = std::fs::read_to_string(&out_path)
        .map_err(|e| fail(format!("no callgrind output ({}): {e}", out_path.display())))?;
    let totals =
        parse_callgrind_events(&text, "callgrind output").map_err(|e| fail(e.to_string()))?;
    let ev = events_from_totals(
        &totals,
        o.iterations,
        instance.instance_label(),
        divisor,
        "callgrind output",
    )
    .map_err(|e| fail(e.to_string()))?;
    if ev.instructions <= 0.0 {
        return Err(fail(format!(
            "callgrind counted no instructions in {COUNTED_REGION_SYMBOL} (was the symbol stripped?)"
        )));
    }
    Ok(ev)
}

/// Count every workload of `suite` (in `o.jobs` parallel processes) and attach the result
/// to its records, matched by fingerprint: `counts` (and `instructions`, with
/// `instructions_source = "callgrind"`) on success, `count_error` naming the workload and
/// what failed otherwise. The empty call (the harness's overhead probe) is not counted.
/// Returns how many workloads failed.
pub fn attach_counts(
    suite: &[WorkloadSpec],
    records: &mut [Record],
    o: &CountOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> usize {
    let todo: Vec<&WorkloadSpec> = suite
        .iter()
        .filter(|s| !matches!(s.kind, crate::workload::WorkloadKind::Empty))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<(String, Result<CountedEvents>)>> =
        std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..o.jobs.min(todo.len()).max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(spec) = todo.get(i) else { break };
                let r = count_workload(spec, o);
                progress(&match &r {
                    Ok(c) => format!(
                        "{}: {:.3e} instructions, {:.3e} estimated cycles per call of {}",
                        spec.name, c.instructions, c.estimated_cycles, c.instance
                    ),
                    Err(e) => format!("{}: count failed: {e}", spec.name),
                });
                if let Ok(mut v) = results.lock() {
                    v.push((spec.identity().fingerprint(), r));
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    let mut failed = 0;
    for (fp, r) in results {
        if r.is_err() {
            failed += 1;
        }
        for rec in records.iter_mut().filter(|x| x.fingerprint == fp) {
            match &r {
                Ok(c) => {
                    rec.instructions = Some(c.instructions);
                    rec.instructions_source = Some("callgrind".into());
                    rec.counts = Some(c.clone());
                    rec.count_error = None;
                }
                Err(e) => {
                    rec.count_error = Some(e.to_string());
                }
            }
        }
    }
    failed
}

/// Whether a job counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountMode {
    /// Do not count.
    Off,
    /// Count when valgrind runs here; otherwise say so in one line and go on (time decides).
    Auto,
    /// Count, and fail the job when valgrind is missing.
    Required,
}

/// What counting a suite did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CountOutcome {
    /// Not asked for.
    Off,
    /// Counted; `failed` workloads carry a `count_error`.
    Counted {
        /// Workloads whose count failed.
        failed: usize,
    },
    /// valgrind cannot run here (mode `Auto`): the one-line reason.
    Unavailable(String),
}

impl CountOutcome {
    /// One line for the job's output, `None` when counting was off.
    pub fn describe(&self) -> Option<String> {
        match self {
            CountOutcome::Off => None,
            CountOutcome::Counted { failed: 0 } => Some(format!(
                "counted with callgrind (instructions and estimated cycles; simulated caches {})",
                cache_model_text()
            )),
            CountOutcome::Counted { failed } => Some(format!(
                "counted with callgrind; {failed} workload(s) could not be counted (their counted metrics are errors, time decides them)"
            )),
            CountOutcome::Unavailable(why) => Some(format!(
                "not counted: {why}; the gate decides on time only"
            )),
        }
    }
}

/// Count `suite` into `records` under `mode` (see [`CountMode`]).
pub fn count_suite(
    suite: &[WorkloadSpec],
    records: &mut [Record],
    mode: CountMode,
    o: &CountOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<CountOutcome> {
    if mode == CountMode::Off {
        return Ok(CountOutcome::Off);
    }
    if let Err(why) = valgrind_available() {
        return match mode {
            CountMode::Required => Err(MeasureError::Other(why)),
            _ => Ok(CountOutcome::Unavailable(why)),
        };
    }
    let failed = attach_counts(suite, records, o, progress);
    Ok(CountOutcome::Counted { failed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_and_builds_the_estimate() {
        // Two iterations: Ir 2000, I1mr 2 + D1mr 16 + D1mw 2 = 20 L1 misses, ILmr 0 +
        // DLmr 4 (DLmw left off the line, so 0) = 4 LL misses; per iteration 1000, 10, 2;
        // estimate 1000 + 5·10 + 35·2 = 1120.
        let text = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\nsummary: 2000 300 100 2 16 2 0 4\n";
        let t = parse_callgrind_events(text, "t").unwrap();
        assert_eq!(t.len(), 9);
        assert_eq!(t[8], ("DLmw".to_string(), 0.0));
        let e = events_from_totals(&t, 2, "x".into(), 1, "t").unwrap();
        assert_eq!(
            (e.instructions, e.l1_misses, e.ll_misses),
            (1000.0, 10.0, 2.0)
        );
        assert_eq!(e.estimated_cycles, 1120.0);
        // Without the cache simulator only Ir exists: the estimate is the instructions.
        let t = parse_callgrind_events("events: Ir\ntotals: 42\n", "t").unwrap();
        assert_eq!(
            events_from_totals(&t, 1, "x".into(), 1, "t")
                .unwrap()
                .estimated_cycles,
            42.0
        );
    }

    #[test]
    fn bad_callgrind_files_name_the_source() {
        let e = parse_callgrind_events("events: Ir\n", "cg.out")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cg.out") && e.contains("summary"), "{e}");
        let e = parse_callgrind_events("summary: 1\n", "cg.out")
            .unwrap_err()
            .to_string();
        assert!(e.contains("events"), "{e}");
        assert!(parse_callgrind_events("events: Ir\nsummary: lots\n", "t").is_err());
    }

    #[test]
    fn counted_instance_divides_until_within_budget() {
        // gemm_tall 2048×256×512: 2·2048·256·512 = 536.9 M FLOPs; ÷16 = 33.55 M ≤ 2^25, so
        // m = 2048 / 16 = 128.
        let s = WorkloadSpec::gemm("t", 2048, 256, 512, 1).unwrap();
        let (c, d) = counted_instance(&s, COUNT_FLOP_BUDGET).unwrap();
        assert_eq!(d, 16);
        assert_eq!(c, WorkloadSpec::gemm("t", 128, 256, 512, 1).unwrap());
        // Batched: the batch is divided first (8 × 256³: 268 M FLOPs, ÷ 8 → batch 1).
        let s = WorkloadSpec::gemm("b", 256, 256, 256, 8).unwrap();
        let (c, d) = counted_instance(&s, COUNT_FLOP_BUDGET).unwrap();
        assert_eq!(d, 8);
        assert_eq!(c, WorkloadSpec::gemm("b", 256, 256, 256, 1).unwrap());
        // Within the budget: the instance itself.
        let s = WorkloadSpec::gemm("s", 128, 128, 128, 1).unwrap();
        assert_eq!(counted_instance(&s, COUNT_FLOP_BUDGET).unwrap().1, 1);
    }

    #[test]
    fn counted_region_runs_the_iterations() {
        let mut n = 0;
        tensorforge_counted_region(
            &mut || {
                n += 1;
                Ok(())
            },
            5,
        )
        .unwrap();
        assert_eq!(n, 5);
    }

    #[test]
    fn a_missing_valgrind_is_one_line_naming_the_workload() {
        // An executable path that does not exist stands in for a missing valgrind.
        std::env::set_var(VALGRIND_ENV, "/nonexistent/valgrind-for-test");
        let s = WorkloadSpec::gemm("gemm_for_missing_valgrind", 4, 4, 4, 1).unwrap();
        let e = count_workload(&s, &CountOptions::new("/bin/true".into(), 1))
            .unwrap_err()
            .to_string();
        std::env::remove_var(VALGRIND_ENV);
        assert!(
            e.contains("gemm_for_missing_valgrind") && e.contains("not found"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }
}
