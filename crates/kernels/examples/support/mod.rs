//! Shared by the bandwidth examples: a copy reference at the same thread count as the
//! kernel it is compared with, and interleaved A/B timing. The copy is `copy_from_slice`
//! over chunks split across the current rayon pool (so a 2-thread kernel is compared with a
//! 2-thread copy, measured in the same process); copy and kernel alternate in ABBA order,
//! one timing each per round, so drift from co-tenant load hits both sides of a round
//! alike. Each round gives one ratio `(kernel bytes / kernel time) / (copy bytes / copy
//! time)`; the examples report its min, median and max over the rounds. Not controlled:
//! thread placement, frequency, and load that changes within a round.

use rayon::prelude::*;
use std::time::Instant;

/// `dst = src` on the current rayon pool, in chunks of `len / (4 × threads)` elements
/// clamped to 16 Ki..1 Mi (64 KiB..4 MiB), so every worker copies.
pub fn par_copy(src: &[f32], dst: &mut [f32]) {
    let threads = rayon::current_num_threads().max(1);
    let chunk = (src.len() / (4 * threads)).clamp(1 << 14, 1 << 20);
    dst.par_chunks_mut(chunk)
        .zip(src.par_chunks(chunk))
        .for_each(|(d, s)| d.copy_from_slice(std::hint::black_box(s)));
}

/// Per-round times of the two sides, s.
pub struct Rounds {
    /// Copy time of each round.
    pub copy_s: Vec<f64>,
    /// Kernel time of each round.
    pub kernel_s: Vec<f64>,
}

fn timed(f: &mut impl FnMut()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

/// One untimed call of each, then `rounds` rounds in ABBA order (copy first in even rounds,
/// kernel first in odd ones).
pub fn interleave(rounds: usize, mut copy: impl FnMut(), mut kernel: impl FnMut()) -> Rounds {
    copy();
    kernel();
    let mut r = Rounds {
        copy_s: Vec::new(),
        kernel_s: Vec::new(),
    };
    for i in 0..rounds.max(1) {
        if i % 2 == 0 {
            r.copy_s.push(timed(&mut copy));
            r.kernel_s.push(timed(&mut kernel));
        } else {
            r.kernel_s.push(timed(&mut kernel));
            r.copy_s.push(timed(&mut copy));
        }
    }
    r
}

/// Min, median and max of a sample (median of an even count: mean of the middle two).
pub fn min_median_max(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        0.5 * (s[n / 2 - 1] + s[n / 2])
    };
    (s[0], med, s[n - 1])
}

impl Rounds {
    /// Per-round `100 · (kernel_bytes / kernel_s) / (copy_bytes / copy_s)`, %.
    pub fn percent_of_copy(&self, copy_bytes: f64, kernel_bytes: f64) -> Vec<f64> {
        self.copy_s
            .iter()
            .zip(&self.kernel_s)
            .map(|(c, k)| 100.0 * (kernel_bytes / k) / (copy_bytes / c))
            .collect()
    }

    /// Best (shortest) kernel time, s.
    pub fn best_kernel_s(&self) -> f64 {
        self.kernel_s.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// Best (shortest) copy time, s.
    pub fn best_copy_s(&self) -> f64 {
        self.copy_s.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// `"a / b / c % of copy (min / median / max of N rounds)"`.
    pub fn describe(&self, copy_bytes: f64, kernel_bytes: f64) -> String {
        let (lo, med, hi) = min_median_max(&self.percent_of_copy(copy_bytes, kernel_bytes));
        format!(
            "{lo:5.1} / {med:5.1} / {hi:5.1} % of copy (min / median / max of {} rounds)",
            self.copy_s.len()
        )
    }
}
