//! Instruction counts as a noise-free metric: `valgrind --tool=callgrind` counts the
//! instructions a workload executes, the same count whatever else the machine is doing
//! (the count depends only on the binary, its inputs and its environment). The workload
//! runs single-threaded in a child process (`tensorforge __count-instructions`), with
//! collection switched on only inside [`tensorforge_counted_region`], so process start-up,
//! input preparation and one warm-up call are not counted; the count is divided by the
//! iterations. Left out: hardware counters (`perf stat -e instructions` reports "not
//! supported" on many virtual machines, including the one this was built on), cycles
//! and cache misses (callgrind's cache simulation is a model, not this CPU), and
//! multi-threaded runs (thread interleaving changes spin counts).

use crate::error::{MeasureError, Result};
use crate::exec::prepare;
use crate::workload::WorkloadSpec;
use std::path::Path;
use std::process::Command;

/// The symbol callgrind's `--toggle-collect` names: collection is on only inside it.
pub const COUNTED_REGION_SYMBOL: &str = "tensorforge_counted_region";

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

/// Prepare `spec` on one thread, call it once untimed, then run it `iterations` times inside
/// the counted region (what the child process does).
pub fn run_counted(spec: &WorkloadSpec, iterations: u64) -> Result<()> {
    spec.validate(&spec.name)?;
    let pool = crate::harness::thread_pool(1)?;
    pool.install(|| -> Result<()> {
        let mut f = prepare(&spec.kind, 1, 1)?;
        f()?;
        tensorforge_counted_region(&mut f, iterations)
    })
}

/// The total `Ir` (instructions executed) from a callgrind output file: its `summary:` line
/// (or `totals:` when there is no summary).
pub fn parse_callgrind_total(text: &str, source: &str) -> Result<f64> {
    let line = text
        .lines()
        .find(|l| l.starts_with("summary:"))
        .or_else(|| text.lines().find(|l| l.starts_with("totals:")))
        .ok_or_else(|| MeasureError::Parse {
            source_name: source.into(),
            message: "no `summary:` or `totals:` line (is it a callgrind output file?)".into(),
        })?;
    let first = line
        .split_once(':')
        .map(|(_, v)| v.split_whitespace().next().unwrap_or(""))
        .unwrap_or("");
    first.parse::<f64>().map_err(|_| MeasureError::Parse {
        source_name: source.into(),
        message: format!("`{}` does not start with an instruction count", line.trim()),
    })
}

/// Count the instructions per iteration of `spec`: run `exe __count-instructions` under
/// callgrind with `iterations` counted calls; returns `Ir / iterations`. Errors name what is
/// missing (valgrind) or what failed.
pub fn count_with_callgrind(exe: &Path, spec: &WorkloadSpec, iterations: u64) -> Result<f64> {
    if iterations == 0 {
        return Err(MeasureError::invalid(
            &spec.name,
            "instruction iterations",
            0,
            "must be at least 1",
        ));
    }
    let dir = std::env::temp_dir().join(format!(
        "tensorforge-callgrind-{}-{}",
        std::process::id(),
        crate::harness::new_run_id()
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| MeasureError::Other(format!("{}: {e}", dir.display())))?;
    let spec_path = dir.join("workload.json");
    let out_path = dir.join("callgrind.out");
    let cleanup = || {
        let _ = std::fs::remove_dir_all(&dir);
    };
    let json = serde_json::to_string(spec).map_err(|e| MeasureError::Other(e.to_string()))?;
    std::fs::write(&spec_path, json)
        .map_err(|e| MeasureError::Other(format!("{}: {e}", spec_path.display())))?;
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_path.display()))
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={COUNTED_REGION_SYMBOL}"))
        .arg(exe)
        .arg("__count-instructions")
        .arg(&spec_path)
        .arg("--iterations")
        .arg(iterations.to_string())
        .env("RAYON_NUM_THREADS", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    let out = match status {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            cleanup();
            return Err(MeasureError::Other(
                "valgrind not found: the instructions metric needs it (Debian: apt-get install valgrind)".into(),
            ));
        }
        Err(e) => {
            cleanup();
            return Err(MeasureError::Other(format!("cannot run valgrind: {e}")));
        }
    };
    if !out.status.success() {
        cleanup();
        let err = String::from_utf8_lossy(&out.stderr);
        let tail = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(MeasureError::Other(format!(
            "valgrind --tool=callgrind on `{}` exited with {}: {}",
            spec.name,
            out.status,
            tail.trim()
        )));
    }
    let text = std::fs::read_to_string(&out_path)
        .map_err(|e| MeasureError::Other(format!("{}: {e}", out_path.display())));
    cleanup();
    let total = parse_callgrind_total(&text?, "callgrind output")?;
    if total <= 0.0 {
        return Err(MeasureError::Other(format!(
            "callgrind counted no instructions in {COUNTED_REGION_SYMBOL} for `{}` (was the symbol stripped?)",
            spec.name
        )));
    }
    Ok(total / iterations as f64)
}

/// Count every suite workload with callgrind and attach the count to its record (matched by
/// fingerprint), with `instructions_source = "callgrind"`.
pub fn attach_counts(
    exe: &Path,
    suite: &[WorkloadSpec],
    records: &mut [tensorforge_store::Record],
    iterations: u64,
) -> Result<()> {
    for spec in suite {
        let fp = spec.identity().fingerprint();
        let count = count_with_callgrind(exe, spec, iterations)?;
        for r in records.iter_mut().filter(|r| r.fingerprint == fp) {
            r.instructions = Some(count);
            r.instructions_source = Some("callgrind".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_summary_and_totals() {
        let text =
            "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 123456\ntotals: 123456\n";
        assert_eq!(parse_callgrind_total(text, "t").unwrap(), 123_456.0);
        assert_eq!(
            parse_callgrind_total("events: Ir\ntotals: 42 7\n", "t").unwrap(),
            42.0
        );
        let e = parse_callgrind_total("events: Ir\n", "cg.out")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cg.out") && e.contains("summary"), "{e}");
        assert!(parse_callgrind_total("summary: lots\n", "t").is_err());
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
}
