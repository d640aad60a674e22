//! The prose of an exploration: the `why` paragraph (the winner, the runner-up and the
//! ranking key that decided between them, ties, infeasibility advice), each row's `reason`
//! relative to the best, and the sentence when the best is off the Pareto front. Numbers go
//! through the workspace's unit formatters; nothing here changes a ranking.

use super::rank::{time_pair_cmp, Rec};
use super::search::{ChunkOut, Prepared};
use super::types::{Candidate, RankBy};
use super::{REASON_SRAM, REASON_SRAM_DOUBLE};
use crate::levels::{EnergyReport, LevelTraffic};
use crate::mapping::Dataflow;
use crate::roofline::Bound;
use crate::schedule::LoopOrder;
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// Seconds with a scaled unit (the workspace's one formatter, [`crate::units::time`]).
fn fmt_time(s: f64) -> String {
    crate::units::time(s)
}

/// Bytes with a binary unit ([`crate::units::bytes`]).
fn fmt_bytes(b: u64) -> String {
    crate::units::bytes(b as f64)
}

/// An integer with thousands separators ([`crate::units::grouped`]).
fn fmt_count(n: u64) -> String {
    crate::units::grouped(n)
}

/// `(a / b − 1) · 100` as text, e.g. `22 %`.
fn fmt_more(a: f64, b: f64) -> String {
    let p = (a / b - 1.0) * 100.0;
    fmt_pct(p)
}

fn fmt_pct(p: f64) -> String {
    if p >= 10.0 {
        format!("{p:.0} %")
    } else if p >= 1.0 {
        format!("{p:.1} %")
    } else if p >= 0.01 {
        format!("{p:.2} %")
    } else {
        "<0.01 %".into()
    }
}

/// Which key of the ranking decided between a winner and a loser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decider {
    Overlapped,
    Serialized,
    Dram,
    Cycles,
    PeCount,
    Fields,
}

fn decider(w: &Rec, l: &Rec) -> Decider {
    if w.overlapped_s.total_cmp(&l.overlapped_s) != Ordering::Equal {
        Decider::Overlapped
    } else if w.serialized_s.total_cmp(&l.serialized_s) != Ordering::Equal {
        Decider::Serialized
    } else if w.dram_bytes != l.dram_bytes {
        Decider::Dram
    } else if w.compute_cycles != l.compute_cycles {
        Decider::Cycles
    } else if w.pe_count != l.pe_count {
        Decider::PeCount
    } else {
        Decider::Fields
    }
}

fn bound_of(r: &Rec) -> Bound {
    Bound::classify(r.compute_s, r.memory_s)
}

/// What makes `l` slower than `w`: the quantity behind `l`'s binding side, when larger.
fn binding_detail(w: &Rec, l: &Rec) -> String {
    let bytes = || {
        format!(
            "moves {} more DRAM bytes: {} vs {}",
            fmt_more(l.dram_bytes as f64, w.dram_bytes as f64),
            fmt_bytes(l.dram_bytes),
            fmt_bytes(w.dram_bytes)
        )
    };
    let cycles = || {
        format!(
            "needs {} more compute cycles: {} vs {}",
            fmt_more(l.compute_cycles as f64, w.compute_cycles as f64),
            fmt_count(l.compute_cycles),
            fmt_count(w.compute_cycles)
        )
    };
    let mem_first = l.memory_s >= l.compute_s;
    if mem_first && l.dram_bytes > w.dram_bytes {
        bytes()
    } else if l.compute_cycles > w.compute_cycles {
        cycles()
    } else if l.dram_bytes > w.dram_bytes {
        bytes()
    } else {
        "same DRAM bytes and compute cycles".into()
    }
}

struct Names<'a> {
    p: &'a Prepared,
}

impl Names<'_> {
    fn order(&self, r: &Rec) -> LoopOrder {
        LoopOrder::ALL[r.order as usize]
    }
    fn dataflow(&self, r: &Rec) -> Dataflow {
        Dataflow::ALL[r.dataflow as usize]
    }
    fn pe(&self, r: &Rec) -> String {
        let a = self.p.pes[r.pe_idx as usize].arrays;
        if a == 1 {
            format!("{}x{}", r.pe[0], r.pe[1])
        } else {
            format!("{}x{} ×{a} arrays", r.pe[0], r.pe[1])
        }
    }
    fn short(&self, r: &Rec) -> String {
        format!(
            "tile {}x{}x{}, PE {}, schedule {}, {}",
            r.tile[0],
            r.tile[1],
            r.tile[2],
            self.pe(r),
            self.order(r).name(),
            self.dataflow(r).name()
        )
    }
    fn quantities(&self, r: &Rec) -> String {
        format!(
            "{}-bound: {} of DRAM traffic take {} against {} compute cycles = {} (overlapped {}, serialized {})",
            bound_of(r).label(),
            fmt_bytes(r.dram_bytes),
            fmt_time(r.memory_s),
            fmt_count(r.compute_cycles),
            fmt_time(r.compute_s),
            fmt_time(r.overlapped_s),
            fmt_time(r.serialized_s)
        )
    }
}

/// How the winner `w` beat `l`, in words.
fn decision_text(w: &Rec, l: &Rec) -> String {
    match decider(w, l) {
        Decider::Overlapped => format!(
            "wins on overlapped time: {} vs {} (+{} for the runner-up, which {})",
            fmt_time(w.overlapped_s),
            fmt_time(l.overlapped_s),
            fmt_more(l.overlapped_s, w.overlapped_s),
            binding_detail(w, l)
        ),
        Decider::Serialized => format!(
            "ties on overlapped time ({}) and wins on serialized time: {} vs {} (runner-up {})",
            fmt_time(w.overlapped_s),
            fmt_time(w.serialized_s),
            fmt_time(l.serialized_s),
            binding_detail(w, l)
        ),
        Decider::Dram => format!(
            "ties on both times and wins on DRAM bytes: {} vs {}",
            fmt_bytes(w.dram_bytes),
            fmt_bytes(l.dram_bytes)
        ),
        Decider::Cycles => format!(
            "ties on both times and DRAM bytes and wins on compute cycles: {} vs {}",
            fmt_count(w.compute_cycles),
            fmt_count(l.compute_cycles)
        ),
        Decider::PeCount => format!(
            "ties on times, DRAM bytes and cycles and wins on PE count: {} vs {}",
            fmt_count(w.pe_count),
            fmt_count(l.pe_count)
        ),
        Decider::Fields => "ties on every modelled quantity; the field tie-break (tile, PE shape, loop-order index, dataflow index) puts it first".into(),
    }
}

/// A short reason for a row relative to the best.
pub(super) fn row_reason(best: &Rec, r: &Rec) -> String {
    if r == best {
        return format!(
            "best: {}-bound, {}",
            bound_of(r).label(),
            fmt_time(r.overlapped_s)
        );
    }
    let mut s = match decider(best, r) {
        Decider::Overlapped => format!(
            "+{} overlapped time vs best ({}-bound; {})",
            fmt_more(r.overlapped_s, best.overlapped_s),
            bound_of(r).label(),
            binding_detail(best, r)
        ),
        Decider::Serialized => format!(
            "ties best on overlapped time; +{} serialized time ({})",
            fmt_more(r.serialized_s, best.serialized_s),
            binding_detail(best, r)
        ),
        Decider::Dram => format!(
            "ties best on both times; +{} DRAM bytes",
            fmt_more(r.dram_bytes as f64, best.dram_bytes as f64)
        ),
        Decider::Cycles => format!(
            "ties best on times and DRAM bytes; +{} compute cycles",
            fmt_more(r.compute_cycles as f64, best.compute_cycles as f64)
        ),
        Decider::PeCount => format!(
            "ties best on times, DRAM bytes and cycles; +{} PEs",
            fmt_more(r.pe_count as f64, best.pe_count as f64)
        ),
        Decider::Fields => {
            "ties best on every modelled quantity; after it in the field tie-break".into()
        }
    };
    if r.sram_used_bytes < best.sram_used_bytes {
        s.push_str(&format!(
            "; uses {} less SRAM ({} vs {})",
            fmt_pct((1.0 - r.sram_used_bytes as f64 / best.sram_used_bytes as f64) * 100.0),
            fmt_bytes(r.sram_used_bytes),
            fmt_bytes(best.sram_used_bytes)
        ));
    }
    if r.pe_count < best.pe_count {
        s.push_str(&format!(
            "; uses {} fewer PEs ({} vs {})",
            fmt_pct((1.0 - r.pe_count as f64 / best.pe_count as f64) * 100.0),
            fmt_count(r.pe_count),
            fmt_count(best.pe_count)
        ));
    }
    s
}

pub(super) fn why_text(
    p: &Prepared,
    m: &ChunkOut,
    total: u64,
    infeasible: &BTreeMap<String, u64>,
) -> String {
    let names = Names { p };
    let Some(best) = m.top.first() else {
        let reasons: Vec<String> = infeasible
            .iter()
            .map(|(k, v)| format!("{} {k}", fmt_count(*v)))
            .collect();
        let advice = if infeasible.contains_key(REASON_SRAM)
            || infeasible.contains_key(REASON_SRAM_DOUBLE)
        {
            format!(
                "Add smaller tiles, turn off double buffering or raise sram_bytes (capacity {}).",
                fmt_bytes(p.sram_capacity_bytes)
            )
        } else {
            "Byte or cycle counts overflow 64 bits: use larger tiles.".to_string()
        };
        return format!(
            "No candidate is feasible among {} ({}). {advice}",
            fmt_count(total),
            reasons.join(", ")
        );
    };
    let mut s = format!(
        "Best of {} feasible candidates ({} in the space): {}. It is {}.",
        fmt_count(m.evaluated),
        fmt_count(total),
        names.short(best),
        names.quantities(best)
    );
    match m.top.get(1) {
        None => s.push_str(" It is the only feasible candidate."),
        Some(ru) => {
            s.push_str(&format!(
                " Runner-up: {}, {}. The best {}.",
                names.short(ru),
                names.quantities(ru),
                decision_text(best, ru)
            ));
        }
    }
    if m.ties > 1 {
        s.push_str(&format!(
            " {} candidates tie with the best on overlapped and serialized time (see ties_for_best).",
            fmt_count(m.ties)
        ));
        // The runner-up is tied: also name the first candidate that is not.
        match m
            .top
            .iter()
            .find(|r| time_pair_cmp(r, best) != Ordering::Equal)
        {
            Some(next) => s.push_str(&format!(
                " The first candidate outside the tie is {}, {}; the best {}.",
                names.short(next),
                names.quantities(next),
                decision_text(best, next)
            )),
            None if (m.top.len() as u64) < m.evaluated => s.push_str(&format!(
                " The first candidate outside the tie ranks beyond the {} kept.",
                m.top.len()
            )),
            None => s.push_str(" Every feasible candidate is in the tie."),
        }
    }
    s
}

/// Same design point: tile, PE shape, loop order and dataflow.
fn same_point(a: &Candidate, b: &Candidate) -> bool {
    a.tile == b.tile
        && (a.pe_rows, a.pe_cols, a.pe_arrays) == (b.pe_rows, b.pe_cols, b.pe_arrays)
        && a.schedule == b.schedule
        && a.dataflow == b.dataflow
}

/// When the ranking's best is not on the Pareto front (a candidate as fast uses less SRAM
/// or fewer PEs, and loses only on a later ranking key), one sentence saying which candidate
/// dominates it and why the ranking still puts the best first; empty otherwise.
pub(super) fn off_front_text(best: &Candidate, pareto: &[Candidate]) -> String {
    if pareto.is_empty() || pareto.iter().any(|c| same_point(c, best)) {
        return String::new();
    }
    let t = best.timing.overlapped_time_s;
    let Some(d) = pareto.iter().find(|c| {
        c.timing.overlapped_time_s <= t
            && c.sram_used_bytes <= best.sram_used_bytes
            && c.pe_count <= best.pe_count
    }) else {
        return String::new();
    };
    format!(
        " The best is not on the Pareto front (overlapped time, SRAM, PE count): tile {}, PE {}x{}, schedule {}, {} is as fast ({}) with {} of SRAM (best: {}) and {} PEs (best: {}); the ranking puts the best first on a later key (serialized time, DRAM bytes, cycles), which the front does not weigh.",
        d.tile,
        d.pe_rows,
        d.pe_cols,
        d.schedule,
        d.dataflow.name(),
        fmt_time(d.timing.overlapped_time_s),
        fmt_bytes(d.sram_used_bytes),
        fmt_bytes(best.sram_used_bytes),
        fmt_count(d.pe_count),
        fmt_count(best.pe_count),
    )
}

/// The parts of a schedule's energy: `("mac", pJ)` then each level's `(name, pJ)`.
fn energy_parts(e: &EnergyReport, levels: &[LevelTraffic]) -> Vec<(String, f64)> {
    std::iter::once(("MACs".to_string(), e.mac_pj.unwrap_or(0.0)))
        .chain(
            levels
                .iter()
                .map(|l| (l.level.clone(), l.energy_pj.unwrap_or(0.0))),
        )
        .collect()
}

/// A row's reason when ranking by energy or EDP: how much more than the best, and at which
/// part (MACs or a level) the difference is largest — the level whose traffic decides.
pub(super) fn energy_row_reason(
    rank: RankBy,
    best: (&Rec, &EnergyReport, &[LevelTraffic]),
    row: (&Rec, &EnergyReport, &[LevelTraffic]),
) -> String {
    let (b, be, bl) = best;
    let (r, re, rl) = row;
    let total = |e: &EnergyReport| e.total_pj.unwrap_or(0.0);
    if r == b {
        let parts = energy_parts(be, bl);
        let (name, pj) =
            parts.iter().cloned().fold(
                ("".to_string(), f64::MIN),
                |a, p| if p.1 > a.1 { p } else { a },
            );
        let lead = match rank {
            RankBy::Edp => format!(
                "best: lowest energy-delay product, {} × {}",
                crate::units::energy_pj(total(be)),
                fmt_time(b.overlapped_s)
            ),
            _ => format!(
                "best: lowest energy, {}",
                crate::units::energy_pj(total(be))
            ),
        };
        return format!(
            "{lead}; {name} is the largest part ({} of it); {}-bound",
            fmt_pct(pj / total(be) * 100.0),
            bound_of(b).label()
        );
    }
    let (bp, rp) = (energy_parts(be, bl), energy_parts(re, rl));
    let mut decide = ("".to_string(), f64::MIN, 0.0, 0.0);
    for ((name, x), (_, y)) in rp.iter().zip(&bp) {
        if x - y > decide.1 {
            decide = (name.clone(), x - y, *x, *y);
        }
    }
    let more = |a: f64, c: f64| {
        if a > c {
            format!("+{}", fmt_more(a, c))
        } else if a < c {
            format!("−{}", fmt_pct((1.0 - a / c) * 100.0))
        } else {
            "±0 %".into()
        }
    };
    let head = match rank {
        RankBy::Edp => format!(
            "{} energy-delay product vs best (energy {}, overlapped time {})",
            more(r.primary, b.primary),
            more(total(re), total(be)),
            more(r.overlapped_s, b.overlapped_s)
        ),
        _ if r.primary == b.primary => {
            "ties best on energy; after it on overlapped time or a later key".into()
        }
        _ => format!("{} energy vs best", more(total(re), total(be))),
    };
    if decide.1 > 0.0 {
        format!(
            "{head}; {} decides: +{} ({} vs {})",
            decide.0,
            crate::units::energy_pj(decide.1),
            crate::units::energy_pj(decide.2),
            crate::units::energy_pj(decide.3)
        )
    } else {
        head
    }
}
