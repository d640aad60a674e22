//! The order candidates are ranked in and the sets kept while evaluating: a compact,
//! heap-free record per feasible candidate, the total ranking order and the (time, time)
//! tie order, the Pareto set over (the ranked quantity, SRAM bytes, PE count) and a top list of
//! fixed size. How a record's quantities are computed is left to `search`.

use std::cmp::Ordering;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

/// One feasible candidate, plain old data (no heap), as the inner loop produces it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Rec {
    /// What the ranking minimizes first: `overlapped_s` when ranking by latency, the energy
    /// (pJ) or the energy-delay product (pJ·s) otherwise. Never negative.
    pub(super) primary: f64,
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
    fn key(&self) -> (u64, u64, u64, u64, u64, u64, [u64; 3], [u64; 2], u8, u8) {
        (
            self.primary.to_bits(),
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

/// Order on (primary, overlapped time, serialized time) only: equal means tied for best.
/// Ranking by latency, the primary is the overlapped time, so this is the time pair.
#[inline(always)]
pub(super) fn time_pair_cmp(a: &Rec, b: &Rec) -> Ordering {
    (
        a.primary.to_bits(),
        a.overlapped_s.to_bits(),
        a.serialized_s.to_bits(),
    )
        .cmp(&(
            b.primary.to_bits(),
            b.overlapped_s.to_bits(),
            b.serialized_s.to_bits(),
        ))
}

/// Pareto objectives of `a` against `b`: (no worse on all three, equal on all three).
#[inline]
pub(super) fn objectives(a: &Rec, b: &Rec) -> (bool, bool) {
    let t = a.primary.to_bits().cmp(&b.primary.to_bits());
    let s = a.sram_used_bytes.cmp(&b.sram_used_bytes);
    let p = a.pe_count.cmp(&b.pe_count);
    let no_worse = t != Ordering::Greater && s != Ordering::Greater && p != Ordering::Greater;
    let equal = t == Ordering::Equal && s == Ordering::Equal && p == Ordering::Equal;
    (no_worse, equal)
}

/// `a` dominates `b`, or equals it on every objective and precedes it in ranking order: the
/// relation [`Pareto`] keeps its members minimal under. A strict partial order, so any
/// feasible record that supersedes `b` keeps `b` off the front, whether or not it is (still)
/// a member.
#[inline]
pub(super) fn supersedes(a: &Rec, b: &Rec) -> bool {
    let (no_worse, equal) = objectives(a, b);
    no_worse && (!equal || rank_cmp(a, b) == Ordering::Less)
}

/// Insert `c` into a Pareto set kept as a plain list: a linear scan over the members. The
/// reference that [`Pareto`] is tested against.
#[cfg(test)]
pub(super) fn pareto_insert(front: &mut Vec<Rec>, c: Rec) {
    if front.iter().any(|p| p == &c || supersedes(p, &c)) {
        return;
    }
    front.retain(|p| !supersedes(&c, p));
    front.push(c);
}

/// A Pareto set over (primary, SRAM bytes, PE count), the primary being the overlapped time
/// when ranking by latency, all minimized: `a` supersedes
/// `b` when it is no worse on all three and better on one, or equal on all three and first
/// in ranking order; the set keeps the records no other record supersedes.
///
/// Members are grouped by PE count into *levels*, levels sorted by PE count. Within a
/// level no member may be no worse than another on both remaining objectives, so sorted by
/// SRAM bytes ascending a level's overlapped times strictly descend: a 2-D staircase. Of
/// the members with SRAM ≤ `c`'s in a level, the last one (found by binary search) has the
/// least time, so whether `c` is superseded costs one binary search per level with PE count
/// ≤ `c`'s, `O(L · log(F / L))` for `L` levels and `F` members, instead of a scan of all
/// `F`. The members `c` supersedes form one contiguous run per level with PE count ≥ `c`'s
/// (SRAM ≥ `c`'s and time ≥ `c`'s), removed by two more binary searches. The set reached
/// does not depend on the insertion order: it is the set of records no inserted record
/// supersedes, since superseding is a strict partial order (irreflexive and transitive).
#[derive(Debug, Default)]
pub(super) struct Pareto {
    /// `(pe_count, members by SRAM bytes ascending)`, by `pe_count` ascending.
    levels: Vec<(u64, Vec<Rec>)>,
}

impl Pareto {
    /// Add `c` unless a member supersedes it (then return that member); drop the members it
    /// supersedes.
    pub(super) fn insert(&mut self, c: Rec) -> Option<Rec> {
        let t = c.primary.to_bits();
        let (s, pe) = (c.sram_used_bytes, c.pe_count);
        for (lpe, lv) in &self.levels {
            if *lpe > pe {
                break;
            }
            // `lv` is sorted by SRAM ascending and time strictly descending: the cheapest
            // time among members with SRAM ≤ s is the last of them.
            let i = lv.partition_point(|p| p.sram_used_bytes <= s);
            let Some(p) = i.checked_sub(1).map(|i| &lv[i]) else {
                continue;
            };
            match p.primary.to_bits().cmp(&t) {
                Ordering::Less => return Some(*p),
                Ordering::Equal if *lpe < pe || p.sram_used_bytes < s => return Some(*p),
                // Equal on all three: the first in ranking order stays (a copy of `c` too).
                Ordering::Equal if rank_cmp(p, &c) != Ordering::Greater => return Some(*p),
                _ => {}
            }
        }
        for (lpe, lv) in self.levels.iter_mut() {
            if *lpe < pe {
                continue;
            }
            let lo = lv.partition_point(|p| p.sram_used_bytes < s);
            let hi = lo + lv[lo..].partition_point(|p| p.primary.to_bits() >= t);
            if hi > lo {
                lv.drain(lo..hi);
            }
        }
        let li = self.levels.partition_point(|(lpe, _)| *lpe < pe);
        if self.levels.get(li).is_none_or(|(lpe, _)| *lpe != pe) {
            self.levels.insert(li, (pe, Vec::new()));
        }
        let lv = &mut self.levels[li].1;
        let at = lv.partition_point(|p| p.sram_used_bytes < s);
        lv.insert(at, c);
        None
    }

    /// The members in ranking order.
    pub(super) fn into_sorted(self) -> Vec<Rec> {
        let mut v: Vec<Rec> = self.levels.into_iter().flat_map(|(_, lv)| lv).collect();
        v.sort_unstable_by(rank_cmp);
        v
    }
}

/// The first `cap` records in ranking order, kept in a buffer of `2 · cap` pre-allocated
/// slots: a record enters when it precedes the threshold (the `cap`-th best seen at the
/// last compaction); a full buffer is cut back to its best `cap` by selection. Amortized
/// O(1) per record, no allocation.
///
/// The chunks of one exploration share a bound: the least overlapped time (as bits) of any
/// chunk's threshold. A record slower than that ranks after the `cap` records of that
/// chunk, so it cannot be among the first `cap` overall and is turned away. Which records
/// the bound turns away depends on timing, the merged result does not.
pub(super) struct TopK<'a> {
    buf: Vec<Rec>,
    cap: usize,
    threshold: Option<Rec>,
    shared: &'a AtomicU64,
    /// This chunk's copy of `shared` (refreshed by [`TopK::refresh`] and at compactions).
    bound: u64,
}

impl<'a> TopK<'a> {
    pub(super) fn new(cap: usize, shared: &'a AtomicU64) -> TopK<'a> {
        TopK {
            buf: Vec::with_capacity(2 * cap),
            cap,
            threshold: None,
            bound: shared.load(AtomicOrdering::Relaxed),
            shared,
        }
    }

    /// Take up the bound other chunks have published.
    #[inline]
    pub(super) fn refresh(&mut self) {
        self.bound = self.shared.load(AtomicOrdering::Relaxed);
    }

    /// Offer `r`; `false` when it was turned away because it does not precede the threshold
    /// or is slower than the shared bound. Both only move forward in ranking order, so every
    /// record that ranks after a turned-away one would be turned away too.
    #[inline(always)]
    pub(super) fn push(&mut self, r: &Rec) -> bool {
        if r.primary.to_bits() > self.bound {
            return false;
        }
        if let Some(t) = &self.threshold {
            if rank_cmp(r, t) != Ordering::Less {
                return false;
            }
        }
        self.buf.push(*r);
        if self.buf.len() == 2 * self.cap {
            self.compact();
        }
        true
    }

    fn compact(&mut self) {
        let k = self.cap - 1;
        self.buf.select_nth_unstable_by(k, rank_cmp);
        self.buf.truncate(self.cap);
        self.threshold = Some(self.buf[k]);
        let t = self.buf[k].primary.to_bits();
        self.bound = self.shared.fetch_min(t, AtomicOrdering::Relaxed).min(t);
    }

    /// The best `cap` records, sorted.
    pub(super) fn into_sorted(mut self) -> Vec<Rec> {
        first_sorted(&mut self.buf, self.cap);
        self.buf
    }
}

/// Cut `v` to its first `n` records in ranking order, sorted: a selection, then a sort of
/// those `n` only.
fn first_sorted(v: &mut Vec<Rec>, n: usize) {
    if n == 0 {
        v.clear();
        return;
    }
    if v.len() > n {
        v.select_nth_unstable_by(n - 1, rank_cmp);
        v.truncate(n);
    }
    v.sort_unstable_by(rank_cmp);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rec(t: u8, ser: u8, sram: u64, pe: u64, order: u8) -> Rec {
        Rec {
            primary: f64::from(t),
            overlapped_s: f64::from(t),
            serialized_s: f64::from(t) + f64::from(ser),
            compute_s: 0.0,
            memory_s: 0.0,
            dram_bytes: 0,
            compute_cycles: 0,
            pe_count: pe,
            sram_used_bytes: sram,
            tile: [1, 1, 1],
            pe: [pe, 1],
            pe_idx: 0,
            order,
            dataflow: 0,
        }
    }

    #[test]
    fn staircase_by_hand() {
        // (time, SRAM, PE): (4, 1, 1) and (2, 3, 1) form PE level 1; (1, 1, 2) opens level 2.
        // (3, 2, 1) sits between them on level 1. (2, 3, 2) is dominated by (1, 1, 2).
        // (1, 1, 1) then dominates all of level 1 and (1, 1, 2) (same time and SRAM, fewer PEs).
        let mut p = Pareto::default();
        for (t, s, pe) in [(4, 1, 1), (2, 3, 1), (1, 1, 2), (3, 2, 1), (2, 3, 2)] {
            p.insert(rec(t, 0, s, pe, 0));
        }
        let objs = |p: &Pareto| -> Vec<(u64, u64, u64)> {
            let mut v: Vec<_> = p
                .levels
                .iter()
                .flat_map(|(_, lv)| lv.iter())
                .map(|r| (r.overlapped_s as u64, r.sram_used_bytes, r.pe_count))
                .collect();
            v.sort();
            v
        };
        assert_eq!(objs(&p), vec![(1, 1, 2), (2, 3, 1), (3, 2, 1), (4, 1, 1)]);
        // Equal on all three objectives: the first in ranking order stays, whichever comes first.
        p.insert(rec(3, 0, 2, 1, 1));
        assert_eq!(p.levels[0].1[1].order, 0);
        p.insert(rec(1, 0, 1, 2, 0)); // an identical copy changes nothing
        assert_eq!(objs(&p).len(), 4);
        p.insert(rec(1, 0, 1, 1, 0));
        assert_eq!(objs(&p), vec![(1, 1, 1)]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn staircase_matches_the_linear_scan(
            recs in prop::collection::vec((0u8..6, 0u8..3, 0u64..6, 0u64..4, 0u8..3), 0..80),
        ) {
            let recs: Vec<Rec> = recs.into_iter().map(|(t, ser, s, pe, o)| rec(t, ser, s, pe, o)).collect();
            let mut linear = Vec::new();
            let mut stair = Pareto::default();
            for r in &recs {
                pareto_insert(&mut linear, *r);
                stair.insert(*r);
                // The staircase invariant after every insertion.
                for (pe, lv) in &stair.levels {
                    for w in lv.windows(2) {
                        prop_assert!(w[0].sram_used_bytes < w[1].sram_used_bytes);
                        prop_assert!(w[0].overlapped_s > w[1].overlapped_s);
                    }
                    prop_assert!(lv.iter().all(|r| r.pe_count == *pe));
                }
            }
            linear.sort_unstable_by(rank_cmp);
            prop_assert_eq!(stair.into_sorted(), linear);
        }
    }
}
