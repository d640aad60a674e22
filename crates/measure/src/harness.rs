//! The timing harness: builds a rayon pool with an explicit thread count, prepares one or
//! more instances of a workload (rotating input buffers when one instance's working set would
//! otherwise stay in the last-level cache), runs untimed warm-up iterations, then timed
//! iterations until both a minimum count and a time budget are met, and turns the per-call
//! wall-clock samples into a [`Record`]. Each sample is one call timed with
//! `Instant::now()` around it, so it includes the call's dispatch cost (measured separately
//! by the `empty` workload). Not controlled: CPU frequency scaling, other processes, thread
//! placement (no pinning), page faults after warm-up, and SMT siblings.

use crate::context::{device_context, llc_bytes, software_context};
use crate::error::{MeasureError, Result};
use crate::exec::prepare;
use crate::workload::WorkloadSpec;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use tensorforge_store::{DeviceContext, HarnessSettings, Record, SoftwareContext};

/// Rotation aims for this many times the LLC size across all instances.
pub const ROTATION_LLC_MULTIPLE: u64 = 4;
/// At most this many rotating instances.
pub const MAX_ROTATING_SETS: u64 = 4096;
/// At most this many bytes across rotating instances (1 GiB).
pub const MAX_ROTATING_BYTES: u64 = 1 << 30;

/// How to run the timed loop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HarnessOptions {
    /// Worker threads of the rayon pool (and faer's parallelism), at least 1.
    pub threads: usize,
    /// Untimed iterations before timing.
    pub warmup_iterations: u64,
    /// Minimum timed iterations.
    pub min_iterations: u64,
    /// Minimum total timed duration, ns.
    pub time_budget_ns: u64,
    /// Hard cap on timed iterations (a guard for sub-microsecond workloads).
    pub max_iterations: u64,
    /// Rotate buffers when the working set fits in cache.
    pub rotate: bool,
    /// Last-level cache size used for the rotation decision, bytes (None: read sysfs).
    pub llc_bytes: Option<u64>,
    /// Labels copied into every record.
    pub labels: BTreeMap<String, String>,
    /// Run id shared by the records of one invocation.
    pub run_id: String,
    /// Draw an indicatif bar on stderr when it is a terminal.
    pub progress: bool,
}

impl HarnessOptions {
    /// Defaults for `threads`: 3 warm-up, at least 10 iterations and 200 ms, at most 100 000.
    pub fn new(threads: usize) -> HarnessOptions {
        HarnessOptions {
            threads: threads.max(1),
            warmup_iterations: 3,
            min_iterations: 10,
            time_budget_ns: 200_000_000,
            max_iterations: 100_000,
            rotate: true,
            llc_bytes: None,
            labels: BTreeMap::new(),
            run_id: new_run_id(),
            progress: true,
        }
    }

    fn check(&self) -> Result<()> {
        if self.threads == 0 || self.threads > 4096 {
            return Err(MeasureError::invalid(
                "harness options",
                "threads",
                self.threads,
                "must be between 1 and 4096",
            ));
        }
        if self.min_iterations == 0 {
            return Err(MeasureError::invalid(
                "harness options",
                "min_iterations",
                0,
                "must be at least 1",
            ));
        }
        if self.max_iterations < self.min_iterations {
            return Err(MeasureError::invalid(
                "harness options",
                "max_iterations",
                self.max_iterations,
                format!("must be at least min_iterations = {}", self.min_iterations),
            ));
        }
        Ok(())
    }
}

/// A fresh run id (the store's format: sortable by time, unique across processes).
pub fn new_run_id() -> String {
    tensorforge_store::store::new_run_id()
}

/// Seconds since the Unix epoch now.
pub fn unix_now_s() -> i64 {
    tensorforge_store::time::now_unix_s()
}

/// How many instances to rotate through, whether that counts as rotation, and the note.
pub fn rotation_plan(working_set: u64, llc: u64, rotate: bool) -> (u64, bool, Option<String>) {
    if working_set == 0 {
        return (1, false, Some("no buffers: nothing to rotate".into()));
    }
    let ws = working_set;
    if !rotate {
        return (
            1,
            false,
            Some(format!(
                "rotation disabled; working set {ws} B vs LLC {llc} B: results may be cache-warm"
            )),
        );
    }
    if ws >= 2 * llc {
        return (
            1,
            false,
            Some(format!(
                "no rotation: working set {ws} B is at least 2x the LLC ({llc} B)"
            )),
        );
    }
    let want = (ROTATION_LLC_MULTIPLE * llc).div_ceil(ws);
    let sets = want
        .min(MAX_ROTATING_SETS)
        .min((MAX_ROTATING_BYTES / ws).max(1))
        .max(2);
    if sets < want {
        return (
            sets,
            true,
            Some(format!(
                "rotating {sets} buffer sets of {ws} B ({} B in all, less than {ROTATION_LLC_MULTIPLE}x LLC {llc} B): partly cache-warm",
                sets * ws
            )),
        );
    }
    (
        sets,
        true,
        Some(format!(
            "rotating {sets} buffer sets of {ws} B across {ROTATION_LLC_MULTIPLE}x LLC ({llc} B)"
        )),
    )
}

/// A bar on stderr, hidden when stderr is not a terminal or `enabled` is false.
pub fn progress_bar(total: u64, enabled: bool) -> ProgressBar {
    let target = if enabled && std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let pb = ProgressBar::with_draw_target(Some(total), target);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]") {
        pb.set_style(style);
    }
    pb
}

/// Build a rayon pool with exactly `threads` workers.
pub fn thread_pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()
        .map_err(|e| MeasureError::Other(format!("cannot build a {threads}-thread pool: {e}")))
}

/// Raw timing of one workload: samples (ns), settings and peak allocation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Per-iteration wall-clock latencies, ns.
    pub samples_ns: Vec<f64>,
    /// Settings as run.
    pub settings: HarnessSettings,
    /// Peak bytes above the baseline during the timed region, when the counting allocator
    /// is installed.
    pub peak_alloc_bytes: Option<u64>,
}

/// Time one workload inside `pool` (no record): warm-up, then until `min_iterations` and
/// `time_budget_ns` are both met (or `max_iterations`).
pub fn time_workload(
    spec: &WorkloadSpec,
    opts: &HarnessOptions,
    pool: &rayon::ThreadPool,
    tick: &(dyn Fn(u64) + Sync),
) -> Result<Timing> {
    opts.check()?;
    spec.validate(&spec.name)?;
    let llc = opts.llc_bytes.unwrap_or_else(|| llc_bytes().0);
    let (sets, rotating, note) = rotation_plan(spec.working_set_bytes(), llc, opts.rotate);
    let threads = opts.threads;
    pool.install(|| -> Result<Timing> {
        let mut instances = (0..sets)
            .map(|i| prepare(&spec.kind, threads, 1 + 7 * i))
            .collect::<Result<Vec<_>>>()?;
        let n = instances.len();
        for i in 0..opts.warmup_iterations.max(1) {
            instances[i as usize % n]()?;
        }
        let budget = Duration::from_nanos(opts.time_budget_ns);
        // Reserved before the peak reset, so sample storage is not charged to the workload.
        let mut samples: Vec<f64> = Vec::with_capacity(opts.max_iterations.min(1 << 20) as usize);
        let counting = crate::alloc::is_active();
        let base = crate::alloc::reset_peak();
        let start = Instant::now();
        let mut i = 0usize;
        loop {
            let f = &mut instances[i % n];
            let t0 = Instant::now();
            f()?;
            let dt = t0.elapsed();
            samples.push(dt.as_nanos() as f64);
            i += 1;
            if i.is_multiple_of(64) {
                tick(i as u64);
            }
            let enough = samples.len() as u64 >= opts.min_iterations && start.elapsed() >= budget;
            if enough || samples.len() as u64 >= opts.max_iterations {
                break;
            }
        }
        let peak = crate::alloc::peak_bytes().saturating_sub(base) as u64;
        Ok(Timing {
            samples_ns: samples,
            settings: HarnessSettings {
                warmup_iterations: opts.warmup_iterations.max(1),
                min_iterations: opts.min_iterations,
                time_budget_ns: opts.time_budget_ns,
                threads: threads as u32,
                rotating_buffers: rotating,
                note,
                batch_iterations: 1,
                timer_resolution_ns: None,
                overhead_ns: None,
            },
            peak_alloc_bytes: counting.then_some(peak),
        })
    })
}

/// Measure one workload and build its record with the given contexts.
pub fn measure(
    spec: &WorkloadSpec,
    opts: &HarnessOptions,
    pool: &rayon::ThreadPool,
    device: &DeviceContext,
    software: &SoftwareContext,
    tick: &(dyn Fn(u64) + Sync),
) -> Result<Record> {
    let t = time_workload(spec, opts, pool, tick)?;
    Ok(Record::new(
        opts.run_id.clone(),
        spec.identity(),
        device.clone(),
        software.clone(),
        t.settings,
        t.samples_ns,
        spec.flops()?,
        spec.bytes()?,
        t.peak_alloc_bytes,
        unix_now_s(),
        opts.labels.clone(),
        "harness".into(),
    )?)
}

/// Measure every workload of a suite in order on one pool; one record each, sharing
/// `opts.run_id`. `progress` receives each workload's name before it runs.
pub fn run_suite(
    suite: &[WorkloadSpec],
    opts: &HarnessOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Record>> {
    opts.check()?;
    for s in suite {
        s.validate(&s.name)?;
    }
    let pool = thread_pool(opts.threads)?;
    let device = device_context(opts.threads as u32);
    let software = software_context();
    let bar = progress_bar(suite.len() as u64, opts.progress);
    let mut out = Vec::with_capacity(suite.len());
    for s in suite {
        progress(&s.name);
        bar.set_message(s.name.clone());
        out.push(measure(s, opts, &pool, &device, &software, &|_| {})?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::parse_workload_name;

    fn quick(threads: usize) -> HarnessOptions {
        HarnessOptions {
            min_iterations: 5,
            time_budget_ns: 1_000_000,
            progress: false,
            ..HarnessOptions::new(threads)
        }
    }

    #[test]
    fn rotation_plan_cases() {
        let llc = 1 << 20;
        // Small working set: rotate across 4x LLC.
        let (sets, rot, note) = rotation_plan(1 << 16, llc, true);
        assert!(rot && sets == 64, "{sets}");
        assert!(note.unwrap().contains("rotating"));
        // Large: no rotation, and the note says so.
        let (sets, rot, note) = rotation_plan(4 << 20, llc, true);
        assert!(!rot && sets == 1);
        assert!(note.unwrap().contains("no rotation"));
        // Tiny: capped at MAX_ROTATING_SETS, noted as partly warm.
        let (sets, rot, note) = rotation_plan(8, llc, true);
        assert!(rot && sets == MAX_ROTATING_SETS);
        assert!(note.unwrap().contains("partly"));
        let (sets, rot, _) = rotation_plan(0, llc, true);
        assert!(!rot && sets == 1);
        let (_, rot, note) = rotation_plan(8, llc, false);
        assert!(!rot && note.unwrap().contains("disabled"));
    }

    #[test]
    fn suite_records_have_structure() {
        let suite = vec![
            parse_workload_name("gemm:m=8:n=8:k=8").unwrap(),
            parse_workload_name("kernel:softmax:rows=4:cols=16").unwrap(),
            WorkloadSpec::empty(),
        ];
        let mut opts = quick(2);
        opts.llc_bytes = Some(1 << 16);
        let mut seen = Vec::new();
        let recs = run_suite(&suite, &opts, &mut |n| seen.push(n.to_string())).unwrap();
        assert_eq!(
            seen,
            ["gemm:m=8:n=8:k=8", "kernel:softmax:rows=4:cols=16", "empty"]
        );
        assert_eq!(recs.len(), 3);
        for (r, s) in recs.iter().zip(&suite) {
            r.validate().unwrap();
            assert!(r.samples_ns.len() >= 5);
            assert_eq!(r.fingerprint, s.identity().fingerprint());
            assert_eq!(r.harness.threads, 2);
            assert_eq!(r.device.threads_used, 2);
            assert_eq!(r.run_id, opts.run_id);
            assert!(r.harness.note.is_some());
        }
        assert_eq!(recs[0].flops, Some(1024.0));
        assert_eq!(recs[2].flops, None);
        // The counting allocator is not installed in unit tests.
        assert_eq!(recs[0].peak_alloc_bytes, None);
    }

    #[test]
    fn bad_options_error() {
        let s = WorkloadSpec::empty();
        let pool = thread_pool(1).unwrap();
        let mut o = quick(1);
        o.min_iterations = 0;
        let e = time_workload(&s, &o, &pool, &|_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("min_iterations"), "{e}");
        let mut o = quick(1);
        o.max_iterations = 1;
        assert!(time_workload(&s, &o, &pool, &|_| {}).is_err());
    }
}
