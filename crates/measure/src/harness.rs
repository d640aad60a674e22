//! The timing harness: builds a rayon pool with an explicit thread count, prepares one or
//! more instances of a workload (rotating input buffers when one instance's working set would
//! otherwise stay in the last-level cache), runs untimed warm-up iterations, then timed
//! samples until both a minimum iteration count and a time budget are met, and turns the
//! per-iteration times into a [`Record`].
//!
//! **Batching.** Once per [`run_suite`] the harness measures the clock ([`measure_clock`]:
//! the smallest non-zero step between successive `Instant::now()` reads, and the cost of one
//! read pair plus an empty call through the harness path). A short untimed trial of each
//! workload then picks a batch size ([`batch_size`]) so that one sample spans at least
//! [`RESOLUTION_MULTIPLE`]× the clock's resolution, as criterion and Google Benchmark do; a
//! sample is one batch's wall-clock time divided by its iterations (a per-iteration time,
//! including the read pair's cost spread over the batch). A batch cycles through the
//! rotating instances. Workloads that already take longer than the target run unbatched
//! (batch 1, one call per sample, including its dispatch cost, which the `empty` workload
//! measures). Not controlled: CPU frequency scaling, other processes, thread placement (no
//! pinning), page faults after warm-up, and SMT siblings.
use crate::context::{device_context, llc_bytes, software_context};
use crate::error::{MeasureError, Result};
use crate::exec::{prepare, Iteration};
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
/// A sample spans at least this many times the clock's resolution.
pub const RESOLUTION_MULTIPLE: f64 = 1000.0;
/// The batch is capped so that `max_iterations` still yields this many samples.
pub const MIN_SAMPLES: u64 = 10;
/// Default cap on timed iterations (calls): 10 million.
pub const DEFAULT_MAX_ITERATIONS: u64 = 10_000_000;

/// How to run the timed loop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HarnessOptions {
    /// Worker threads of the rayon pool (and faer's parallelism), at least 1.
    pub threads: usize,
    /// Untimed iterations (calls) before timing; the batch-size trial adds a few more.
    pub warmup_iterations: u64,
    /// Minimum timed iterations (calls, summed over samples); the harness also takes at
    /// least `min(min_iterations, MIN_SAMPLES)` samples.
    pub min_iterations: u64,
    /// Minimum total timed duration, ns.
    pub time_budget_ns: u64,
    /// Hard cap on timed iterations (calls, summed over samples; the last batch may end
    /// past it by less than one batch). The batch size is capped at
    /// `max_iterations / MIN_SAMPLES` so that the cap still leaves [`MIN_SAMPLES`] samples.
    pub max_iterations: u64,
    /// Rotate buffers when the working set fits in cache.
    pub rotate: bool,
    /// Last-level cache size used for the rotation decision, bytes (None: read sysfs).
    pub llc_bytes: Option<u64>,
    /// Most bytes across rotating instances (default [`MAX_ROTATING_BYTES`]). A large
    /// rotation defeats a large cache, but on a VM whose memory placement changes between
    /// allocations it makes whole runs 2–3× apart (a 512³ GEMM over 1 GiB of rotating
    /// buffers: per-run medians of 2.3 and 6.3 ms on an idle machine, 1.8 ms steady
    /// without rotation); the quickstart, which gates runs against each other, caps it.
    pub max_rotating_bytes: u64,
    /// Labels copied into every record.
    pub labels: BTreeMap<String, String>,
    /// Run id shared by the records of one invocation.
    pub run_id: String,
    /// Draw an indicatif bar on stderr when it is a terminal.
    pub progress: bool,
}

impl HarnessOptions {
    /// Defaults for `threads`: 3 warm-up, at least 10 iterations and 200 ms, at most
    /// [`DEFAULT_MAX_ITERATIONS`].
    pub fn new(threads: usize) -> HarnessOptions {
        HarnessOptions {
            threads: threads.max(1),
            warmup_iterations: 3,
            min_iterations: 10,
            time_budget_ns: 200_000_000,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            rotate: true,
            llc_bytes: None,
            max_rotating_bytes: MAX_ROTATING_BYTES,
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
    rotation_plan_capped(working_set, llc, rotate, MAX_ROTATING_BYTES)
}

/// [`rotation_plan`] with at most `max_bytes` across the rotating instances.
pub fn rotation_plan_capped(
    working_set: u64,
    llc: u64,
    rotate: bool,
    max_bytes: u64,
) -> (u64, bool, Option<String>) {
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
        .min((max_bytes / ws).max(1))
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

/// What the harness measured about its clock, once per suite.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockCalibration {
    /// Smallest non-zero difference between successive `Instant::now()` reads, ns.
    pub resolution_ns: f64,
    /// Cost of one unbatched sample of an empty call: `Instant::now()`, the boxed empty
    /// call, `elapsed()` and storing the sample, per iteration, ns (median of 5 runs of
    /// 4096 such samples, each run timed as a whole so the clock's steps average out).
    pub overhead_ns: f64,
}

/// Measure the clock's resolution and the harness's per-sample overhead (a few ms).
pub fn measure_clock() -> Result<ClockCalibration> {
    // Resolution: successive reads until 20 000 pairs or 5 ms.
    let begin = Instant::now();
    let mut min_step = u128::MAX;
    let mut prev = Instant::now();
    for _ in 0..20_000 {
        let now = Instant::now();
        let d = now.duration_since(prev).as_nanos();
        if d > 0 {
            min_step = min_step.min(d);
        }
        prev = now;
        if begin.elapsed() > Duration::from_millis(5) {
            break;
        }
    }
    // A clock that never moved across the whole loop is at least that coarse.
    let resolution_ns = if min_step == u128::MAX {
        begin.elapsed().as_nanos().max(1) as f64
    } else {
        min_step as f64
    };
    let mut empty = prepare(&crate::workload::WorkloadKind::Empty, 1, 1)?;
    let mut sink: Vec<f64> = Vec::with_capacity(4096);
    let mut runs = Vec::with_capacity(5);
    for _ in 0..5 {
        sink.clear();
        let t = Instant::now();
        for _ in 0..4096 {
            let t0 = Instant::now();
            empty()?;
            sink.push(t0.elapsed().as_nanos() as f64);
        }
        runs.push(t.elapsed().as_nanos() as f64 / 4096.0);
        std::hint::black_box(&sink);
    }
    runs.sort_by(f64::total_cmp);
    Ok(ClockCalibration {
        resolution_ns,
        overhead_ns: runs[2],
    })
}

/// Iterations per sample for a workload whose call takes `per_call_ns`: the smallest batch
/// whose time reaches `RESOLUTION_MULTIPLE × resolution_ns`, i.e.
/// `ceil(RESOLUTION_MULTIPLE · resolution_ns / per_call_ns)`, at least 1 and at most
/// `max(1, max_iterations / MIN_SAMPLES)`.
pub fn batch_size(per_call_ns: f64, resolution_ns: f64, max_iterations: u64) -> u64 {
    let target = RESOLUTION_MULTIPLE * resolution_ns;
    let cap = (max_iterations / MIN_SAMPLES).max(1);
    if !(per_call_ns.is_finite() && per_call_ns > 0.0) {
        return cap;
    }
    if per_call_ns >= target {
        return 1;
    }
    ((target / per_call_ns).ceil() as u64).clamp(1, cap)
}

/// Raw timing of one workload: samples (ns), settings and peak allocation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Per-iteration wall-clock latencies, ns (one per batch: batch time / batch size).
    pub samples_ns: Vec<f64>,
    /// Settings as run.
    pub settings: HarnessSettings,
    /// Peak bytes above the baseline during the timed region, when the counting allocator
    /// is installed.
    pub peak_alloc_bytes: Option<u64>,
    /// The reference loop ([`reference_loop_ns`]) timed right before and right after the
    /// samples, ns (the mean of the fastest of 5 on each side): the machine's own speed
    /// around this workload.
    pub reference_loop_ns: f64,
}

/// Record label holding [`Timing::reference_loop_ns`]: an experiment (issue 24) on whether
/// dividing a workload's time by it lowers the spread between runs (docs/quickstart.md).
pub const REFERENCE_LOOP_LABEL: &str = "reference_loop_ns";

/// Time a fixed reference loop once, ns: a dependent multiply-add chain of 2^19 steps
/// (compute) and one read pass over `buf` (memory). Co-tenant load that slows the machine
/// slows it too; a change of the build does not.
pub fn reference_loop_ns(buf: &[f32]) -> f64 {
    let t = Instant::now();
    let mut x = std::hint::black_box(1.000_000_1f64);
    for _ in 0..(1 << 19) {
        x = x * 0.999_999_9 + 1e-9;
    }
    let s: f32 = buf.iter().step_by(16).sum();
    std::hint::black_box((x, s));
    t.elapsed().as_nanos() as f64
}

/// Samples of prepared instances (after warm-up): a trial picks the batch size, then
/// batches run, cycling through `instances`, until `min_iterations`, the time budget and
/// `min(min_iterations, MIN_SAMPLES)` samples are all reached, or `max_iterations`.
/// Returns the per-iteration samples (ns), the batch size and the peak allocation above
/// the baseline (when counting). `last_warmup_ns` is the last warm-up call's time.
fn time_instances(
    instances: &mut [Iteration],
    opts: &HarnessOptions,
    clock: &ClockCalibration,
    last_warmup_ns: f64,
    tick: &(dyn Fn(u64) + Sync),
) -> Result<(Vec<f64>, u64, u64)> {
    let n = instances.len();
    let target = RESOLUTION_MULTIPLE * clock.resolution_ns;
    let mut i = 0usize;
    // Trial: doubling call counts until their total reaches the target (skipped when one
    // warm-up call already did).
    let per_call = if last_warmup_ns >= target {
        last_warmup_ns
    } else {
        let mut count = 1u64;
        loop {
            let t = Instant::now();
            for _ in 0..count {
                instances[i % n]()?;
                i += 1;
            }
            let el = t.elapsed().as_nanos() as f64;
            if el >= target || count >= opts.max_iterations {
                break el / count as f64;
            }
            count *= 2;
        }
    };
    let batch = batch_size(per_call, clock.resolution_ns, opts.max_iterations);
    let min_samples = opts.min_iterations.min(MIN_SAMPLES);
    let budget = Duration::from_nanos(opts.time_budget_ns);
    // Reserved before the peak reset, so sample storage is not charged to the workload.
    let cap = (opts.max_iterations.div_ceil(batch) + 1).min(1 << 20) as usize;
    let mut samples: Vec<f64> = Vec::with_capacity(cap);
    let base = crate::alloc::reset_peak();
    let start = Instant::now();
    let mut iterations = 0u64;
    loop {
        let t0 = Instant::now();
        for _ in 0..batch {
            instances[i % n]()?;
            i += 1;
        }
        let dt = t0.elapsed();
        samples.push(dt.as_nanos() as f64 / batch as f64);
        iterations += batch;
        if samples.len().is_multiple_of(64) {
            tick(iterations);
        }
        let enough = iterations >= opts.min_iterations
            && samples.len() as u64 >= min_samples
            && start.elapsed() >= budget;
        if enough || iterations >= opts.max_iterations {
            break;
        }
    }
    let peak = crate::alloc::peak_bytes_since(base);
    Ok((samples, batch, peak))
}

/// Time one workload inside `pool` (no record): warm-up, a batch-size trial, then samples
/// until `min_iterations` and `time_budget_ns` are both met (or `max_iterations`).
pub fn time_workload(
    spec: &WorkloadSpec,
    opts: &HarnessOptions,
    clock: &ClockCalibration,
    pool: &rayon::ThreadPool,
    tick: &(dyn Fn(u64) + Sync),
) -> Result<Timing> {
    opts.check()?;
    spec.validate(&spec.name)?;
    let llc = opts.llc_bytes.unwrap_or_else(|| llc_bytes().0);
    let (sets, rotating, note) = rotation_plan_capped(
        spec.working_set_bytes(),
        llc,
        opts.rotate,
        opts.max_rotating_bytes,
    );
    let threads = opts.threads;
    pool.install(|| -> Result<Timing> {
        let mut instances = (0..sets)
            .map(|i| crate::inject::prepare_spec(spec, threads, 1 + 7 * i))
            .collect::<Result<Vec<_>>>()?;
        let n = instances.len();
        let warmup = opts.warmup_iterations.max(1);
        let mut last_ns = 0.0;
        for i in 0..warmup {
            let t = Instant::now();
            instances[i as usize % n]()?;
            last_ns = t.elapsed().as_nanos() as f64;
        }
        let counting = crate::alloc::is_active();
        // 8 MiB: past the private caches; allocated before the timed region.
        let ref_buf = vec![1.0f32; 2 << 20];
        // The fastest of 5 on each side: an interrupt inflates one repetition, not all.
        let reference = |b: &[f32]| {
            (0..5)
                .map(|_| reference_loop_ns(b))
                .fold(f64::INFINITY, f64::min)
        };
        let ref_before = reference(&ref_buf);
        let (samples, batch, peak) = time_instances(&mut instances, opts, clock, last_ns, tick)?;
        let reference_loop_ns = 0.5 * (ref_before + reference(&ref_buf));
        Ok(Timing {
            samples_ns: samples,
            settings: HarnessSettings {
                warmup_iterations: warmup,
                min_iterations: opts.min_iterations,
                time_budget_ns: opts.time_budget_ns,
                threads: threads as u32,
                rotating_buffers: rotating,
                note,
                batch_iterations: batch,
                timer_resolution_ns: Some(clock.resolution_ns),
                overhead_ns: Some(clock.overhead_ns),
            },
            peak_alloc_bytes: counting.then_some(peak),
            reference_loop_ns,
        })
    })
}

/// Measure one workload and build its record with the given contexts.
pub fn measure(
    spec: &WorkloadSpec,
    opts: &HarnessOptions,
    clock: &ClockCalibration,
    pool: &rayon::ThreadPool,
    device: &DeviceContext,
    software: &SoftwareContext,
    tick: &(dyn Fn(u64) + Sync),
) -> Result<Record> {
    let t = time_workload(spec, opts, clock, pool, tick)?;
    let mut r = Record::new(tensorforge_store::RecordParts {
        run_id: opts.run_id.clone(),
        workload: spec.identity(),
        device: device.clone(),
        software: software.clone(),
        harness: t.settings,
        samples_ns: t.samples_ns,
        flops: spec.flops()?,
        bytes: spec.bytes()?,
        peak_alloc_bytes: t.peak_alloc_bytes,
        timestamp_unix_s: unix_now_s(),
        labels: opts.labels.clone(),
        source: "harness".into(),
    })?;
    r.injected_work = crate::inject::injected_work(&spec.name)?;
    r.labels.insert(
        REFERENCE_LOOP_LABEL.into(),
        format!("{:.0}", t.reference_loop_ns),
    );
    Ok(r)
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
    // Once per suite, on a worker of the pool the workloads run on.
    let clock = pool.install(measure_clock)?;
    let bar = progress_bar(suite.len() as u64, opts.progress);
    let mut out = Vec::with_capacity(suite.len());
    for s in suite {
        progress(&s.name);
        bar.set_message(s.name.clone());
        out.push(measure(
            s,
            opts,
            &clock,
            &pool,
            &device,
            &software,
            &|_| {},
        )?);
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
        // A cap of 64 MiB over 3 MiB sets: 21 sets (64/3 = 21.3), partly cache-warm.
        let (sets, rot, note) = rotation_plan_capped(3 << 20, 480 << 20, true, 64 << 20);
        assert!(rot && sets == 21, "{sets}");
        assert!(note.unwrap().contains("partly"));
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
        // Every record carries the clock measured once for the suite.
        let res = recs[0].harness.timer_resolution_ns.unwrap();
        let over = recs[0].harness.overhead_ns.unwrap();
        assert!(res > 0.0 && over > 0.0);
        for r in &recs {
            assert_eq!(r.harness.timer_resolution_ns, Some(res));
            assert_eq!(r.harness.overhead_ns, Some(over));
            assert!(r.harness.batch_iterations >= 1);
        }
        // The empty call is far shorter than 1000x any clock step: it is batched.
        assert!(
            recs[2].harness.batch_iterations > 1,
            "{:?}",
            recs[2].harness
        );
    }

    #[test]
    fn batch_size_cases() {
        // Target 1000 x 20 ns = 20 000 ns.
        // A 2 ms call already spans it: one call per sample.
        assert_eq!(batch_size(2e6, 20.0, 1_000_000), 1);
        // Exactly the target: 1.
        assert_eq!(batch_size(20_000.0, 20.0, 1_000_000), 1);
        // 300 ns: ceil(20 000 / 300) = ceil(66.7) = 67.
        assert_eq!(batch_size(300.0, 20.0, 1_000_000), 67);
        // 1 ns: 20 000, capped at max_iterations / MIN_SAMPLES = 1000 / 10 = 100.
        assert_eq!(batch_size(1.0, 20.0, 1000), 100);
        // A cap below 1 rounds up to 1: max_iterations 5 / 10 = 0 -> 1.
        assert_eq!(batch_size(1.0, 20.0, 5), 1);
        // A clock step of 1 us: target 1 ms; a 10 us call -> 100.
        assert_eq!(batch_size(10_000.0, 1000.0, 1_000_000), 100);
        // Unmeasurable trial (0 ns): the cap.
        assert_eq!(batch_size(0.0, 20.0, 1000), 100);
    }

    fn counting(calls: &std::sync::Arc<std::sync::atomic::AtomicU64>, spin: Duration) -> Iteration {
        let c = calls.clone();
        Box::new(move || {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if !spin.is_zero() {
                let t = Instant::now();
                while t.elapsed() < spin {
                    std::hint::spin_loop();
                }
            }
            Ok(())
        })
    }

    #[test]
    fn slow_workload_is_not_batched_and_fast_one_is() {
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::Arc;
        // A fixed clock: 20 ns steps, so the target sample length is 20 us.
        let clock = ClockCalibration {
            resolution_ns: 20.0,
            overhead_ns: 25.0,
        };
        let opts = HarnessOptions {
            min_iterations: 3,
            time_budget_ns: 0,
            progress: false,
            ..HarnessOptions::new(1)
        };
        // Slow: each call spins 1 ms (50x the target). The last warm-up call took 1 ms, so
        // there is no trial: exactly 3 calls, 3 samples of 1 call each.
        let calls = Arc::new(AtomicU64::new(0));
        let mut slow = vec![counting(&calls, Duration::from_millis(1))];
        let (samples, batch, _) = time_instances(&mut slow, &opts, &clock, 1e6, &|_| {}).unwrap();
        assert_eq!(batch, 1);
        assert_eq!(samples.len(), 3);
        assert_eq!(calls.load(Ordering::Relaxed), 3);
        assert!(samples.iter().all(|s| *s >= 1e6));
        // Fast: a counter increment (well under 20 us even unoptimized) is batched, and a
        // batch cycles through the three rotating instances evenly.
        let counts: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
        let mut fast: Vec<Iteration> = counts.iter().map(|c| counting(c, Duration::ZERO)).collect();
        let (samples, batch, _) = time_instances(&mut fast, &opts, &clock, 0.0, &|_| {}).unwrap();
        assert!(batch > 1, "{batch}");
        // At least min(min_iterations, MIN_SAMPLES) = 3 samples, each a per-call time.
        assert!(samples.len() >= 3);
        let total: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let (lo, hi) = (total.iter().min().unwrap(), total.iter().max().unwrap());
        assert!(hi - lo <= 1, "{total:?}");
        // Trial calls + samples x batch.
        assert!(total.iter().sum::<u64>() >= samples.len() as u64 * batch);
    }

    #[test]
    fn bad_options_error() {
        let s = WorkloadSpec::empty();
        let pool = thread_pool(1).unwrap();
        let mut o = quick(1);
        o.min_iterations = 0;
        let clock = measure_clock().unwrap();
        let e = time_workload(&s, &o, &clock, &pool, &|_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("min_iterations"), "{e}");
        let mut o = quick(1);
        o.max_iterations = 1;
        assert!(time_workload(&s, &o, &clock, &pool, &|_| {}).is_err());
    }
}
