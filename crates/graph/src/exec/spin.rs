//! Keeps a pool's other workers awake across a burst of executor runs, so that a kernel's
//! parallel section is handed to a worker that is already running instead of one that must
//! first be woken. onnxruntime's thread pool spins the same way by default.
//!
//! How: a run on a pool of two or more workers makes sure one spinner task is spawned and
//! not yet gone. The spinner takes pool jobs as they appear (`rayon::yield_now`) and,
//! between polls, pauses for [`BACKOFF`] spin-loop hints (so that it does not keep the run's
//! own deque busy); it leaves [`LINGER`] after the last run on its owner thread ended.
//!
//! Why it cannot hold a run up: a spinner on top of a run's job on some worker's stack would
//! hold that job until it left, and it leaves only after the run. That cannot happen. The
//! spinner is pushed on the owner's deque before any job of the run, and thieves take the
//! oldest job first, so the first steal from the owner takes the spinner, and until then no
//! job of the run runs anywhere else (other workers' deques fill only from jobs stolen from
//! the owner). With one spinner per owner there is then none left to nest. The owner itself
//! takes its newest job first, so it reaches a queued spinner only while it waits inside its
//! run; the spinner then sees the run on its thread and leaves at once. (Two or more
//! spinners would break this on three or more workers: a worker running a job stolen from
//! another thief could take the second spinner. Hence one spinner, even on larger pools.)
//!
//! Only pools built by `exec::with_threads` spin (the CLI's `run`, benchmarks): there one
//! caller runs one program at a time. A pool that may run two programs at once (a Python
//! session called from several threads) does not: a spinner that checked in for one run
//! could sit on top of a job of the other for as long as the first kept running.
//!
//! Costs and limits: the other workers' cores stay busy for the burst plus [`LINGER`]; a run
//! never waits for them (the first run after an idle spell may end before they wake). The environment
//! variable `TENSORFORGE_SPIN=0` turns it off (read once per process), for comparisons.
//! Left out: pinning workers to cores, and callers outside a pool (a run from a thread that
//! is not a pool worker hands each parallel section to sleeping workers).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long spinners stay after their owner's last run ended.
pub(crate) const LINGER: Duration = Duration::from_millis(2);
/// Spin-loop hints between two polls for work.
pub(crate) const BACKOFF: usize = 16;

/// What an owner thread shares with its spinners.
struct Shared {
    running: AtomicBool,
    last_end_ns: AtomicU64,
    /// Spinners spawned and not yet gone (queued or spinning): 0 or 1.
    live: AtomicUsize,
    /// The spinner is in its loop.
    spinning: AtomicBool,
    epoch: Instant,
}

impl Shared {
    fn idle_for(&self) -> Duration {
        let now = self.epoch.elapsed().as_nanos() as u64;
        Duration::from_nanos(now.saturating_sub(self.last_end_ns.load(Ordering::Acquire)))
    }
}

thread_local! {
    /// This thread belongs to a pool built by `with_threads` ([`mark_spinning_pool`]).
    static SPIN_POOL: Cell<bool> = const { Cell::new(false) };
    static SHARED: RefCell<Option<Arc<Shared>>> = const { RefCell::new(None) };
    static IN_RUN: Cell<bool> = const { Cell::new(false) };
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as a worker of a pool whose runs may spin (a pool's start
/// handler calls it on each of its threads).
pub(crate) fn mark_spinning_pool() {
    SPIN_POOL.with(|p| p.set(true));
}

/// False when `TENSORFORGE_SPIN=0` (read once).
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFORGE_SPIN").map_or(true, |v| v.trim() != "0"))
}

/// True on a thread whose run has awake workers: a parallel section then costs a hand-off
/// of about a microsecond rather than a wake-up, and pays from smaller sizes.
pub(crate) fn active() -> bool {
    ACTIVE.with(Cell::get)
}

/// One run's hold on its spinners; dropping it ends the run (they linger, then leave).
pub(crate) struct Spin {
    shared: Arc<Shared>,
}

impl Spin {
    /// Begins a run on the current pool; `None` outside a pool, on one worker, or inside
    /// another run on this thread.
    pub(crate) fn start() -> Option<Spin> {
        let n = rayon::current_num_threads();
        if n < 2
            || !enabled()
            || !SPIN_POOL.with(Cell::get)
            || rayon::current_thread_index().is_none()
            || IN_RUN.with(Cell::get)
        {
            return None;
        }
        let shared = SHARED.with_borrow_mut(|s| {
            Arc::clone(s.get_or_insert_with(|| {
                Arc::new(Shared {
                    running: AtomicBool::new(false),
                    last_end_ns: AtomicU64::new(0),
                    live: AtomicUsize::new(0),
                    spinning: AtomicBool::new(false),
                    epoch: Instant::now(),
                })
            }))
        });
        IN_RUN.with(|r| r.set(true));
        shared.running.store(true, Ordering::Release);
        // One spinner at most (see the module comment): spawn it unless one is queued or
        // spinning.
        if shared
            .live
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let s = Arc::clone(&shared);
            rayon::spawn(move || spinner(&s));
        }
        ACTIVE.with(|a| a.set(shared.spinning.load(Ordering::Acquire)));
        Some(Spin { shared })
    }
}

impl Drop for Spin {
    fn drop(&mut self) {
        let now = self.shared.epoch.elapsed().as_nanos() as u64;
        self.shared.last_end_ns.store(now, Ordering::Release);
        self.shared.running.store(false, Ordering::Release);
        IN_RUN.with(|r| r.set(false));
        ACTIVE.with(|a| a.set(false));
    }
}

fn spinner(shared: &Shared) {
    if !IN_RUN.with(Cell::get) {
        shared.spinning.store(true, Ordering::Release);
        while shared.running.load(Ordering::Acquire) || shared.idle_for() < LINGER {
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                for _ in 0..BACKOFF {
                    std::hint::spin_loop();
                }
            }
        }
        shared.spinning.store(false, Ordering::Release);
    }
    shared.live.fetch_sub(1, Ordering::AcqRel);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn spinners_take_work_and_leave_after_the_linger() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .start_handler(|_| mark_spinning_pool())
            .build()
            .unwrap();
        pool.install(|| {
            for _ in 0..50 {
                let spin = Spin::start().expect("a pool of 3");
                // A run inside a run starts no spinners of its own.
                assert!(Spin::start().is_none());
                let s: u64 = (0..10_000u64).into_par_iter().sum();
                assert_eq!(s, 10_000 * 9_999 / 2);
                drop(spin);
                assert!(!active());
            }
            // After the linger every spinner has gone.
            let shared = SHARED.with_borrow(|s| Arc::clone(s.as_ref().unwrap()));
            let t0 = Instant::now();
            while shared.live.load(Ordering::Acquire) > 0 && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(shared.live.load(Ordering::Acquire), 0);
        });
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .start_handler(|_| mark_spinning_pool())
            .build()
            .unwrap();
        assert!(one.install(Spin::start).is_none());
        // A pool not built for spinning (a session's) never spins.
        let plain = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        assert!(plain.install(Spin::start).is_none());
        // Outside any pool: no spinners.
        assert!(Spin::start().is_none());
    }

    #[test]
    fn a_parallel_section_under_spinning_workers_uses_them() {
        // Both halves of a join run, one of them on another worker, in every one of 200
        // joins (a sleeping pool would also take some; this checks no join is lost or hangs).
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .start_handler(|_| mark_spinning_pool())
            .build()
            .unwrap();
        let other = pool.install(|| {
            let _spin = Spin::start();
            (0..200)
                .filter(|_| {
                    let me = rayon::current_thread_index();
                    let (_, b) = rayon::join(
                        || {
                            // About 20 µs of work the compiler cannot fold away.
                            let mut x = 1.0f64;
                            for _ in 0..20_000 {
                                x = std::hint::black_box(x * 1.000_001 + 1e-9);
                            }
                            x
                        },
                        rayon::current_thread_index,
                    );
                    b != me
                })
                .count()
        });
        assert!(other > 0, "the second worker took no half of 200 joins");
    }

    #[test]
    fn nested_parallel_runs_on_four_workers_finish() {
        // 300 runs of nested parallel loops on 4 workers, each run starting its spinner
        // again: a spinner stuck on top of a run's job would hang this test.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .start_handler(|_| mark_spinning_pool())
            .build()
            .unwrap();
        pool.install(|| {
            for r in 0..300u64 {
                let _spin = Spin::start();
                let s: u64 = (0..64u64)
                    .into_par_iter()
                    .map(|i| (0..64u64).into_par_iter().map(|j| i * j + r).sum::<u64>())
                    .sum();
                // Σi Σj (i·j + r) = (Σ i)² + 64·64·r, Σ i over 0..64 = 2016.
                assert_eq!(s, 2016 * 2016 + 4096 * r);
            }
        });
    }
}
