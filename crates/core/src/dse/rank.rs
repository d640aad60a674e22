//! The order candidates are ranked in and the sets kept while evaluating: a compact,
//! heap-free record per feasible candidate, the total ranking order and the (time, time)
//! tie order, the Pareto set over (overlapped time, SRAM bytes, PE count) and a top list of
//! fixed size. How a record's quantities are computed is left to `search`.

use std::cmp::Ordering;

/// One feasible candidate, plain old data (no heap), as the inner loop produces it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Rec {
    pub(super) overlapped_s: f64,
    pub(super) serialized_s: f64,
    pub(super) compute_s: f64,
    pub(super) memory_s: f64,
    pub(super) dram_bytes: u64,
    pub(super) compute_cycles: u64,
    pub(super) pe_count: u64,
    pub(super) sram_used_bytes: u64,
    pub(super) tile: [u64; 3],
    pub(super) pe: [u64; 2],
    pub(super) pe_idx: u32,
    pub(super) order: u8,
    pub(super) dataflow: u8,
}

impl Rec {
    /// The full ranking key. Times are never negative (a `u64` count over a positive rate),
    /// and for non-negative `f64` the order of the bit patterns is exactly
    /// `f64::total_cmp`, so the key compares as integers.
    #[inline(always)]
    #[allow(clippy::type_complexity)]
    fn key(&self) -> (u64, u64, u64, u64, u64, [u64; 3], [u64; 2], u8, u8) {
        (
            self.overlapped_s.to_bits(),
            self.serialized_s.to_bits(),
            self.dram_bytes,
            self.compute_cycles,
            self.pe_count,
            self.tile,
            self.pe,
            self.order,
            self.dataflow,
        )
    }
}

/// Ranking order: [`RANKING_RULE`](super::RANKING_RULE).
#[inline(always)]
pub(super) fn rank_cmp(a: &Rec, b: &Rec) -> Ordering {
    a.key().cmp(&b.key())
}

/// Order on (overlapped time, serialized time) only: equal means tied for best.
#[inline(always)]
pub(super) fn time_pair_cmp(a: &Rec, b: &Rec) -> Ordering {
    (a.overlapped_s.to_bits(), a.serialized_s.to_bits())
        .cmp(&(b.overlapped_s.to_bits(), b.serialized_s.to_bits()))
}

/// Pareto objectives of `a` against `b`: (no worse on all three, equal on all three).
#[inline]
pub(super) fn objectives(a: &Rec, b: &Rec) -> (bool, bool) {
    let t = a.overlapped_s.to_bits().cmp(&b.overlapped_s.to_bits());
    let s = a.sram_used_bytes.cmp(&b.sram_used_bytes);
    let p = a.pe_count.cmp(&b.pe_count);
    let no_worse = t != Ordering::Greater && s != Ordering::Greater && p != Ordering::Greater;
    let equal = t == Ordering::Equal && s == Ordering::Equal && p == Ordering::Equal;
    (no_worse, equal)
}

/// `a` dominates `b`, or equals it on every objective and precedes it in ranking order.
#[inline]
pub(super) fn supersedes(a: &Rec, b: &Rec) -> bool {
    let (no_worse, equal) = objectives(a, b);
    no_worse && (!equal || rank_cmp(a, b) == Ordering::Less)
}

/// Insert `c` into a Pareto set (no allocation unless `c` joins the set and it is full).
pub(super) fn pareto_insert(front: &mut Vec<Rec>, c: Rec) {
    if front.iter().any(|p| p == &c || supersedes(p, &c)) {
        return;
    }
    front.retain(|p| !supersedes(&c, p));
    front.push(c);
}

/// The first `cap` records in ranking order, kept in a buffer of `2 · cap` pre-allocated
/// slots: a record enters when it precedes the threshold (the `cap`-th best seen at the
/// last compaction); a full buffer is cut back to its best `cap` by selection. Amortized
/// O(1) per record, no allocation.
pub(super) struct TopK {
    buf: Vec<Rec>,
    cap: usize,
    threshold: Option<Rec>,
}

impl TopK {
    pub(super) fn new(cap: usize) -> TopK {
        TopK {
            buf: Vec::with_capacity(2 * cap),
            cap,
            threshold: None,
        }
    }

    #[inline(always)]
    pub(super) fn push(&mut self, r: &Rec) {
        if let Some(t) = &self.threshold {
            if rank_cmp(r, t) != Ordering::Less {
                return;
            }
        }
        self.buf.push(*r);
        if self.buf.len() == 2 * self.cap {
            self.compact();
        }
    }

    fn compact(&mut self) {
        let k = self.cap - 1;
        self.buf.select_nth_unstable_by(k, rank_cmp);
        self.buf.truncate(self.cap);
        self.threshold = Some(self.buf[k]);
    }

    /// The best `cap` records, sorted.
    pub(super) fn into_sorted(mut self) -> Vec<Rec> {
        self.buf.sort_unstable_by(rank_cmp);
        self.buf.truncate(self.cap);
        self.buf
    }
}
