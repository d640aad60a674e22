//! Bounded design-space exploration (DSE): rank the candidates the user supplies — tile
//! shapes × PE-array shapes × tile-loop orders × dataflows — for one GEMM (or a list of
//! named GEMMs) on one chip, under the Core's model. Each candidate's tile is clipped to the
//! problem and must fit the SRAM (one tile of each operand, or double-buffered A and B);
//! its DRAM traffic follows the reuse rule of [`crate::schedule`], its compute cycles are
//! [`map_cycles`] summed over the full and edge tiles, and its time is the overlapped
//! (max) or serialized (sum) combination of compute and memory time. Ranking is total and
//! deterministic, independent of the order of the input lists, and the Pareto front over
//! (overlapped time, SRAM bytes, PE count) is reported with it.
//!
//! Left out: any candidate the user did not list (this is not a search), anything the
//! underlying model omits (see [`LIMITATIONS`]), the cost of moving data between tiles
//! inside the chip, and operand-delivery stalls inside a tile.
//!
//! [`map_cycles`]: crate::mapping::map_cycles
//
// Files by job: `types` (the design space and result types, their serde forms),
// `spellings` (the TOML spellings of PE shapes, loop orders and dataflows), `search`
// (checking the inputs, enumerating and evaluating candidates in parallel), `rank` (the
// ranking order, the top list and the Pareto set), `explain` (the `why` and each row's
// `reason`); this file holds the constants, the two entry points and the result assembly.

mod explain;
mod rank;
mod search;
mod spellings;
mod types;

pub use types::{Candidate, DesignSpace, ExploreResult, GemmBest, MultiExploreResult, RankBy};

use crate::analysis::{Timing, LIMITATIONS, SCHEMA_VERSION};
use crate::error::{CoreError, Result};
use crate::gemm::{Gemm, NamedGemm};
use crate::hardware::HardwareSpec;
use crate::levels::{gemm_levels, Hierarchy};
use crate::mapping::Dataflow;
use crate::schedule::{LoopOrder, Tile};
use explain::{energy_row_reason, off_front_text, row_reason, why_text};
use rank::{time_pair_cmp, Rec};
use search::{prepare, run, Prepared, REASONS};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// Default cap on the number of candidates one exploration may evaluate.
pub const DEFAULT_MAX_CANDIDATES: u64 = 1_000_000;

/// Largest `top_k` accepted; larger requests are an error rather than a huge allocation.
pub const MAX_TOP_K: usize = 10_000;

/// At most this many (or `top_k`, when larger) candidates tied for best are listed in
/// [`ExploreResult::ties_for_best`]; [`ExploreResult::ties_for_best_count`] counts them all.
pub const TIES_LISTED: usize = 64;

/// Infeasibility reason: one tile of each operand exceeds the SRAM capacity.
pub const REASON_SRAM: &str = "tile exceeds SRAM";

/// Infeasibility reason: the double-buffered footprint `2·(A+B)+C` exceeds the SRAM capacity.
pub const REASON_SRAM_DOUBLE: &str = "double-buffered tile exceeds SRAM";

/// Infeasibility reason: a byte or cycle count of the candidate does not fit in 64 bits.
pub const REASON_OVERFLOW: &str = "overflow";

/// The ranking rule, in words: the lexicographic chain of keys every candidate is sorted by.
pub const RANKING_RULE: &str = "lowest overlapped time (compute and memory fully overlapped) first, then serialized time, DRAM bytes, compute cycles and PE count; exact ties are broken by the candidate's fields in a fixed order: tile (M, N, K), PE rows and columns, loop order (c-resident, a-resident, b-resident, nmk, kmn, knm), dataflow (output-, weight-, input-stationary)";

/// The Pareto rule, in words.
pub const PARETO_RULE: &str = "candidates not dominated on (overlapped_time_s, sram_used_bytes, pe_count), all minimized (a dominates b when it is no worse on all three and better on one); of candidates equal on all three only the first in ranking order is kept; sorted in ranking order";

/// What the DSE adds to [`LIMITATIONS`].
pub const DSE_LIMITATIONS: &[&str] = &[
    "ranks only the candidates supplied (tile, PE shape, loop order, dataflow lists): a better design outside them is not searched for",
    "ranking is under the analytical model: compute cycles are map_cycles summed over full and edge tiles, traffic follows the tile-reuse rule, SRAM holds only the three tiles",
    "a PE-shape candidate keeps the chip's clock and MACs per PE per cycle and is one array; area, power and the chip's real peak for that shape are not modelled",
];

/// The ranking rule for `rank`, in words: [`RANKING_RULE`] behind the energy or the
/// energy-delay product when ranking by those.
pub fn ranking_rule(rank: RankBy) -> String {
    match rank {
        RankBy::Latency => RANKING_RULE.into(),
        RankBy::Energy => format!("lowest energy (MACs plus the traffic of the PE registers, the tile buffer and DRAM, each at its sourced pJ per byte) first; equal energies by the latency rule: {RANKING_RULE}"),
        RankBy::Edp => format!("lowest energy-delay product (energy in pJ × overlapped time in s) first; equal products by the latency rule: {RANKING_RULE}"),
    }
}

/// The Pareto rule for `rank`: [`PARETO_RULE`], with the ranked quantity in place of the
/// overlapped time when ranking by energy or EDP.
pub fn pareto_rule(rank: RankBy) -> String {
    match rank {
        RankBy::Latency => PARETO_RULE.into(),
        RankBy::Energy => PARETO_RULE.replace("overlapped_time_s", "energy_pj"),
        RankBy::Edp => PARETO_RULE.replace("overlapped_time_s", "edp_pj_s"),
    }
}

/// Per-level traffic and energy of a record, for the listed candidates when ranking by
/// energy or EDP.
fn record_levels(
    p: &Prepared,
    hw: &HardwareSpec,
    r: &Rec,
) -> Option<(
    Vec<crate::levels::LevelTraffic>,
    crate::levels::EnergyReport,
)> {
    if p.rank == RankBy::Latency {
        return None;
    }
    let pe = &p.pes[r.pe_idx as usize];
    let h = Hierarchy {
        pe,
        buffer: hw.tile_buffer(),
        dram: &hw.dram,
    };
    let t = Tile {
        tm: r.tile[0],
        tn: r.tile[1],
        tk: r.tile[2],
    };
    gemm_levels(
        &p.gemm,
        &h,
        Dataflow::ALL[r.dataflow as usize],
        t,
        LoopOrder::ALL[r.order as usize],
    )
    .ok()
}

/// The best record's per-level traffic and energy, computed once per exploration and
/// passed to every listed row's reason.
type BestLevels = Option<(
    Vec<crate::levels::LevelTraffic>,
    crate::levels::EnergyReport,
)>;

fn candidate(
    p: &Prepared,
    hw: &HardwareSpec,
    best: &Rec,
    best_levels: &BestLevels,
    r: &Rec,
    compulsory: u64,
) -> Candidate {
    let order = LoopOrder::ALL[r.order as usize];
    let levels = record_levels(p, hw, r);
    let reason = match (&levels, best_levels) {
        (Some((rl, re)), Some((bl, be))) => energy_row_reason(p.rank, (best, be, bl), (r, re, rl)),
        _ => row_reason(best, r),
    };
    let energy = levels.map(|(_, e)| e);
    // The explorer's direct energy (what it ranked by) is the report's total.
    debug_assert!(energy.as_ref().and_then(|e| e.total_pj).is_none_or(|t| {
        let ranked = match p.rank {
            RankBy::Edp => t * r.overlapped_s,
            _ => t,
        };
        (ranked - r.primary).abs() <= 1e-9 * ranked
    }));
    let edp_pj_s = match (p.rank, &energy) {
        (RankBy::Edp, Some(e)) => e.total_pj.map(|t| t * r.overlapped_s),
        _ => None,
    };
    Candidate {
        tile: Tile {
            tm: r.tile[0],
            tn: r.tile[1],
            tk: r.tile[2],
        },
        pe_rows: r.pe[0],
        pe_cols: r.pe[1],
        pe_arrays: p.pes[r.pe_idx as usize].arrays,
        pe_count: r.pe_count,
        schedule: order.name(),
        loops: order.loops().map(String::from),
        dataflow: Dataflow::ALL[r.dataflow as usize],
        dram_bytes: r.dram_bytes,
        amplification: r.dram_bytes as f64 / compulsory as f64,
        compute_cycles: r.compute_cycles,
        sram_used_bytes: r.sram_used_bytes,
        timing: Timing::new(r.compute_s, r.memory_s),
        reason,
        energy,
        edp_pj_s,
    }
}

/// Rank the candidates of `space` for `g` on `hw` and return the best, the ties for best,
/// the first `top_k`, the Pareto front and a `why`. Errors before evaluating anything when
/// the inputs are invalid or the candidate count exceeds `space.max_candidates`
/// ([`CoreError::TooManyCandidates`]).
pub fn explore(
    g: &Gemm,
    hw: &HardwareSpec,
    space: &DesignSpace,
    top_k: usize,
) -> Result<ExploreResult> {
    let start = Instant::now();
    let (p, norm, sram_source, total) = prepare(g, hw, space, top_k)?;
    let compulsory = g.compulsory_bytes()?;
    let cap = top_k
        .max(TIES_LISTED)
        .max(2)
        .min(total.min(MAX_TOP_K as u64) as usize)
        .max(1);
    let m = run(&p, cap);
    let infeasible: BTreeMap<String, u64> = REASONS
        .iter()
        .zip(m.infeasible)
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| (r.to_string(), n))
        .collect();
    let mut why = why_text(&p, &m, total, &infeasible);
    let (best, ties_for_best, top, pareto) = match m.top.first() {
        None => (None, vec![], vec![], vec![]),
        Some(b) => {
            let best_levels = record_levels(&p, hw, b);
            let c = |r: &Rec| candidate(&p, hw, b, &best_levels, r, compulsory);
            let ties: Vec<Candidate> = m
                .top
                .iter()
                .take_while(|r| time_pair_cmp(r, b) == Ordering::Equal)
                .take(top_k.max(TIES_LISTED))
                .map(c)
                .collect();
            (
                Some(c(b)),
                ties,
                m.top.iter().take(top_k).map(c).collect(),
                m.pareto.iter().map(c).collect(),
            )
        }
    };
    if let Some(b) = &best {
        if space.rank == RankBy::Latency {
            why.push_str(&off_front_text(b, &pareto));
        } else {
            why = energy_why(space.rank, m.evaluated, total, b, &top, m.ties);
        }
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    Ok(ExploreResult {
        schema_version: SCHEMA_VERSION,
        evidence: "model".into(),
        kind: "dse".into(),
        workload: g.clone(),
        hardware: hw.name.clone(),
        space: norm,
        sram_capacity_bytes: p.sram_capacity_bytes,
        sram_source,
        clock_hz: p.clock_hz,
        dram_bandwidth_bytes_per_s: p.dram_bw,
        compulsory_bytes: compulsory,
        candidates_total: total,
        evaluated: m.evaluated,
        infeasible,
        rank: space.rank,
        ranking_rule: ranking_rule(space.rank),
        pareto_rule: pareto_rule(space.rank),
        best,
        ties_for_best,
        ties_for_best_count: m.ties,
        top,
        pareto,
        why,
        elapsed_s,
        evaluations_per_s: rate(m.evaluated, elapsed_s),
        limitations: limitations(),
    })
}

/// The `why` when ranking by energy or EDP: the winner and its reason (which part of its
/// energy is largest), the runner-up and its reason (which part makes the difference), ties.
fn energy_why(
    rank: RankBy,
    evaluated: u64,
    total: u64,
    best: &Candidate,
    top: &[Candidate],
    ties: u64,
) -> String {
    let short = |c: &Candidate| {
        format!(
            "tile {}, PE {}x{}, schedule {}, {}",
            c.tile,
            c.pe_rows,
            c.pe_cols,
            c.schedule,
            c.dataflow.name()
        )
    };
    let what = match rank {
        RankBy::Edp => "energy-delay product",
        _ => "energy",
    };
    let mut s = format!(
        "Ranked by {what}. Best of {} feasible candidates ({} in the space): {}; {}.",
        crate::units::grouped(evaluated),
        crate::units::grouped(total),
        short(best),
        best.reason
    );
    match top.get(1) {
        None => s.push_str(" It is the only feasible candidate."),
        Some(ru) => s.push_str(&format!(" Runner-up: {}; {}.", short(ru), ru.reason)),
    }
    if ties > 1 {
        s.push_str(&format!(
            " {} candidates tie with the best on {what} and on overlapped and serialized time (see ties_for_best).",
            crate::units::grouped(ties)
        ));
    }
    s
}

fn rate(n: u64, s: f64) -> f64 {
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}

fn limitations() -> Vec<String> {
    LIMITATIONS
        .iter()
        .chain(DSE_LIMITATIONS.iter())
        .map(|s| s.to_string())
        .collect()
}

/// Explore every GEMM of a decomposed workload (a transformer block, a lowered
/// convolution) with the same space: the best candidate of each, in input order, and the
/// sums `Σ overlapped time`, `Σ serialized time`, `Σ DRAM bytes`, `Σ compute cycles`. Every
/// GEMM is validated and capped before any is evaluated; repeated shapes are explored once.
/// A GEMM with no feasible candidate is an error naming it.
pub fn explore_many(
    gemms: &[NamedGemm],
    hw: &HardwareSpec,
    space: &DesignSpace,
    top_k: usize,
) -> Result<MultiExploreResult> {
    let start = Instant::now();
    if gemms.is_empty() {
        return Err(CoreError::invalid("gemms", "[]", "give at least one GEMM"));
    }
    for ng in gemms {
        prepare(&ng.gemm, hw, space, top_k).map_err(|e| name_error(&ng.name, e))?;
    }
    let mut distinct: Vec<&Gemm> = Vec::new();
    let mut index: HashMap<&Gemm, usize> = HashMap::new();
    for ng in gemms {
        index.entry(&ng.gemm).or_insert_with(|| {
            distinct.push(&ng.gemm);
            distinct.len() - 1
        });
    }
    let mut results = Vec::with_capacity(distinct.len());
    for g in &distinct {
        results.push(explore(g, hw, space, top_k)?);
    }
    let mut rows = Vec::with_capacity(gemms.len());
    let (mut t_over, mut t_ser, mut t_dram, mut t_cyc) = (0.0f64, 0.0f64, 0u64, 0u64);
    for ng in gemms {
        let r = &results[index[&ng.gemm]];
        let Some(b) = &r.best else {
            return Err(CoreError::invalid(
                format!("gemms.{}", ng.name),
                format!("{}x{}x{}", ng.gemm.m, ng.gemm.n, ng.gemm.k),
                r.why.clone(),
            ));
        };
        t_over += b.timing.overlapped_time_s;
        t_ser += b.timing.serialized_time_s;
        t_dram = t_dram
            .checked_add(b.dram_bytes)
            .ok_or_else(|| CoreError::overflow("Σ DRAM bytes over the GEMMs"))?;
        t_cyc = t_cyc
            .checked_add(b.compute_cycles)
            .ok_or_else(|| CoreError::overflow("Σ compute cycles over the GEMMs"))?;
        rows.push(GemmBest {
            name: ng.name.clone(),
            m: ng.gemm.m,
            n: ng.gemm.n,
            k: ng.gemm.k,
            batch: ng.gemm.batch,
            candidates_total: r.candidates_total,
            evaluated: r.evaluated,
            tile: b.tile,
            pe_rows: b.pe_rows,
            pe_cols: b.pe_cols,
            schedule: b.schedule.clone(),
            dataflow: b.dataflow,
            overlapped_time_s: b.timing.overlapped_time_s,
            serialized_time_s: b.timing.serialized_time_s,
            dram_bytes: b.dram_bytes,
            compute_cycles: b.compute_cycles,
            bound: b.timing.bound,
            energy_pj: b.energy.as_ref().and_then(|e| e.total_pj),
            why: r.why.clone(),
        });
    }
    let candidates_total = results
        .iter()
        .map(|r| r.candidates_total)
        .fold(0u64, u64::saturating_add);
    let evaluated = results
        .iter()
        .map(|r| r.evaluated)
        .fold(0u64, u64::saturating_add);
    let total_energy_pj = match space.rank {
        RankBy::Latency => None,
        _ => rows.iter().map(|r| r.energy_pj).sum(),
    };
    let elapsed_s = start.elapsed().as_secs_f64();
    Ok(MultiExploreResult {
        schema_version: SCHEMA_VERSION,
        evidence: "model".into(),
        kind: "dse-many".into(),
        hardware: hw.name.clone(),
        space: space.clone(),
        ranking_rule: ranking_rule(space.rank),
        distinct_gemms: distinct.len() as u64,
        candidates_total,
        evaluated,
        rows,
        total_overlapped_time_s: t_over,
        total_serialized_time_s: t_ser,
        total_dram_bytes: t_dram,
        total_compute_cycles: t_cyc,
        total_energy_pj,
        elapsed_s,
        evaluations_per_s: rate(evaluated, elapsed_s),
        limitations: limitations(),
    })
}

/// Prefix a GEMM's name to a field error (other errors pass through).
fn name_error(name: &str, e: CoreError) -> CoreError {
    match e {
        CoreError::InvalidField {
            source_name,
            field,
            value,
            reason,
        } => CoreError::InvalidField {
            source_name: format!("{source_name}GEMM `{name}`: "),
            field,
            value,
            reason,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::hardware::{MemoryLevel, PeArray};
    use crate::mapping::map_cycles;
    use crate::roofline::Bound;

    /// A chip with a 4×4 PE array at 1 GHz, 1 GB/s DRAM and no on-chip level (tests give
    /// `sram_bytes`).
    pub(super) fn toy_hw() -> HardwareSpec {
        let mut peak = BTreeMap::new();
        peak.insert(DType::Fp32, 3.2e10);
        HardwareSpec {
            schema_version: crate::hardware::HARDWARE_SCHEMA_VERSION,
            name: "toy".into(),
            description: String::new(),
            peak_ops_per_s: peak,
            dram: MemoryLevel {
                name: "dram".into(),
                capacity_bytes: None,
                bandwidth_bytes_per_s: Some(1e9),
                instances: 1,
                energy: None,
                operands: vec![],
                capacity_per_operand: false,
            },
            onchip: vec![],
            pe_array: Some(PeArray {
                rows: 4,
                cols: 4,
                macs_per_pe_per_cycle: 1,
                clock_hz: 1e9,
                arrays: 1,
                energy: None,
            }),
            interconnect: None,
            sources: vec![],
            notes: vec![],
        }
    }

    fn hand_space() -> DesignSpace {
        DesignSpace {
            tile_m: vec![2, 4],
            tile_n: vec![4, 2],
            tile_k: vec![2, 4],
            orders: vec![
                LoopOrder::B_RESIDENT,
                LoopOrder::C_RESIDENT,
                LoopOrder::A_RESIDENT,
            ],
            sram_bytes: Some(64),
            ..DesignSpace::default()
        }
    }

    #[test]
    fn hand_checked_4x4x4() {
        // 4×4×4 fp32; A = B = C = 4·4·4 B = 64 B, compulsory 192 B.
        // Tiles from [2,4]³: 4×4×4 needs 3·(4·4·4) = 192 B > 64 B; any tile with one 4 needs
        // e.g. 4×2×2: A 4·2·4 = 32, B 2·2·4 = 16, C 4·2·4 = 32 -> 80 B > 64 B. Only 2×2×2
        // fits: 3·(2·2·4) = 48 B. 8 tiles × 3 orders = 24 candidates, 21 infeasible.
        let g = Gemm::new(4, 4, 4, DType::Fp32).unwrap();
        let r = explore(&g, &toy_hw(), &hand_space(), 5).unwrap();
        assert_eq!((r.candidates_total, r.evaluated), (24, 3));
        assert_eq!(r.infeasible.get(REASON_SRAM), Some(&21));
        assert_eq!(r.compulsory_bytes, 192);
        // 2×2×2, mt = nt = kt = 2: c-resident A·nt + B·mt + C = 128 + 128 + 64 = 320 B;
        // a-resident A + B·mt + C·(2kt − 1) = 64 + 128 + 192 = 384 B; b-resident 384 B.
        // At 1 GB/s: 320 ns and 384 ns of memory time. Compute: 8 tiles, each one fold of the
        // 4×4 array (output-stationary, 2×2 outputs) for Tk = 2 cycles -> 16 cycles = 16 ns.
        let b = r.best.as_ref().unwrap();
        assert_eq!(
            b.tile,
            Tile {
                tm: 2,
                tn: 2,
                tk: 2
            }
        );
        assert_eq!(b.schedule, "c-resident");
        assert_eq!(
            (b.dram_bytes, b.compute_cycles, b.sram_used_bytes),
            (320, 16, 48)
        );
        assert!((b.timing.memory_time_s - 320e-9).abs() < 1e-18);
        assert!((b.timing.compute_time_s - 16e-9).abs() < 1e-18);
        assert_eq!(b.timing.bound, Bound::Memory);
        assert_eq!(b.pe_count, 16);
        // a-resident and b-resident tie at 384 B; a-resident is index 1 in LoopOrder::ALL.
        let names: Vec<&str> = r.top.iter().map(|c| c.schedule.as_str()).collect();
        assert_eq!(names, ["c-resident", "a-resident", "b-resident"]);
        assert_eq!(r.top[1].dram_bytes, 384);
        assert!(
            r.top[2].reason.contains("+20 % overlapped time"),
            "{}",
            r.top[2].reason
        );
        assert!(
            r.why
                .contains("wins on overlapped time: 320.00 ns vs 384.00 ns")
                && r.why.contains("moves 20 % more DRAM bytes: 384 B vs 320 B")
                && r.why
                    .contains("tile 2x2x2, PE 4x4, schedule c-resident, output-stationary")
                && r.why.contains("memory-bound"),
            "{}",
            r.why
        );
        assert_eq!(r.ties_for_best_count, 1);
        // All three share SRAM bytes and PE count, so the front is the best alone.
        assert_eq!(r.pareto.len(), 1);
        assert_eq!(&r.pareto[0], b);
        assert_eq!((r.evidence.as_str(), r.kind.as_str()), ("model", "dse"));
        assert!(r
            .limitations
            .iter()
            .any(|l| l.contains("ranks only the candidates supplied")));
    }

    #[test]
    fn ties_for_best_over_dataflows() {
        // Weight- and input-stationary also need one fold of 2 cycles per 2×2×2 tile: the
        // three dataflows tie on everything and the dataflow index orders them.
        let g = Gemm::new(4, 4, 4, DType::Fp32).unwrap();
        let mut s = hand_space();
        s.dataflows = vec![
            Dataflow::InputStationary,
            Dataflow::WeightStationary,
            Dataflow::OutputStationary,
        ];
        let r = explore(&g, &toy_hw(), &s, 1).unwrap();
        assert_eq!(r.ties_for_best_count, 3);
        let d: Vec<Dataflow> = r.ties_for_best.iter().map(|c| c.dataflow).collect();
        assert_eq!(d, Dataflow::ALL);
        assert_eq!(r.top.len(), 1);
        assert!(
            r.why.contains("field tie-break")
                && r.why.contains("3 candidates tie")
                && r.why.contains("first candidate outside the tie is tile 2x2x2, PE 4x4, schedule a-resident, output-stationary")
                && r.why.contains("wins on overlapped time: 320.00 ns vs 384.00 ns"),
            "{}",
            r.why
        );
        // One candidate alone.
        let s = DesignSpace {
            tile_m: vec![2],
            tile_n: vec![2],
            tile_k: vec![2],
            orders: vec![LoopOrder::C_RESIDENT],
            dataflows: vec![],
            ..s
        };
        let r = explore(&g, &toy_hw(), &s, 0).unwrap();
        assert!(r.top.is_empty() && r.best.is_some() && r.pareto.len() == 1);
        assert!(r.why.contains("only feasible candidate"), "{}", r.why);
    }

    #[test]
    fn double_buffering_makes_everything_infeasible() {
        // 2×2×2 double-buffered: 2·(16 + 16) + 16 = 80 B > 64 B.
        let g = Gemm::new(4, 4, 4, DType::Fp32).unwrap();
        let mut s = hand_space();
        s.double_buffer = true;
        let r = explore(&g, &toy_hw(), &s, 5).unwrap();
        assert_eq!(r.evaluated, 0);
        assert_eq!(r.infeasible.get(REASON_SRAM_DOUBLE), Some(&24));
        assert!(r.best.is_none() && r.top.is_empty() && r.pareto.is_empty());
        assert!(r.why.contains("No candidate is feasible"), "{}", r.why);
        s.sram_bytes = Some(80);
        let r = explore(&g, &toy_hw(), &s, 5).unwrap();
        assert_eq!(r.best.unwrap().sram_used_bytes, 80);
    }

    #[test]
    fn cap_fires_before_evaluation() {
        let g = Gemm::new(4, 4, 4, DType::Fp32).unwrap();
        let mut s = hand_space();
        s.max_candidates = 23;
        assert_eq!(
            explore(&g, &toy_hw(), &s, 5).unwrap_err(),
            CoreError::TooManyCandidates { count: 24, cap: 23 }
        );
        // 3000³ tiles × 6 orders = 1.62e11 candidates: evaluating them would take minutes.
        let g = Gemm::new(4096, 4096, 4096, DType::Fp16).unwrap();
        let list: Vec<u64> = (1..=3000).collect();
        let s = DesignSpace {
            tile_m: list.clone(),
            tile_n: list.clone(),
            tile_k: list,
            sram_bytes: Some(1 << 20),
            ..DesignSpace::default()
        };
        let t = Instant::now();
        let e = explore(&g, &toy_hw(), &s, 5).unwrap_err();
        assert_eq!(
            e,
            CoreError::TooManyCandidates {
                count: 162_000_000_000,
                cap: 1_000_000
            }
        );
        assert!(t.elapsed().as_secs_f64() < 5.0);
        assert!(e.to_string().contains("above the cap"), "{e}");
        // 2^16 values per tile list × 2^17 PE shapes × 6 orders overflows 64 bits.
        let g = Gemm::new(1 << 16, 1 << 16, 1 << 16, DType::Fp8).unwrap();
        let list: Vec<u64> = (1..=1 << 16).collect();
        let s = DesignSpace {
            tile_m: list.clone(),
            tile_n: list.clone(),
            tile_k: list,
            pe_shapes: (1..=1u64 << 17).map(|r| (r, 1)).collect(),
            sram_bytes: Some(1 << 20),
            ..DesignSpace::default()
        };
        assert_eq!(
            explore(&g, &toy_hw(), &s, 5).unwrap_err(),
            CoreError::TooManyCandidates {
                count: u64::MAX,
                cap: 1_000_000
            }
        );
        assert_eq!(s.candidate_count(&g), None);
    }

    #[test]
    fn overflow_is_counted_not_panicked() {
        // 2^21 × 2^21 × 2^20 fp32: A = 2^41 elements · 4 B = 2^43 B. A 1×1×1 tile makes
        // nt = 2^21 and c-resident's A·nt = 2^64: overflow, counted per candidate.
        let g = Gemm::new(1 << 21, 1 << 21, 1 << 20, DType::Fp32).unwrap();
        let s = DesignSpace {
            tile_m: vec![1],
            tile_n: vec![1],
            tile_k: vec![1],
            sram_bytes: Some(1 << 20),
            ..DesignSpace::default()
        };
        let r = explore(&g, &toy_hw(), &s, 5).unwrap();
        let over = r.infeasible.get(REASON_OVERFLOW).copied().unwrap_or(0);
        assert!(over >= 1, "{:?}", r.infeasible);
        assert_eq!(r.evaluated + over, 6);
    }

    #[test]
    fn inputs_are_checked() {
        let g = Gemm::new(4, 4, 4, DType::Fp32).unwrap();
        let mut s = hand_space();
        s.tile_k = vec![2, 0];
        assert!(explore(&g, &toy_hw(), &s, 5)
            .unwrap_err()
            .to_string()
            .contains("tile_k[1]"));
        let mut s = hand_space();
        s.tile_m.clear();
        assert!(explore(&g, &toy_hw(), &s, 5)
            .unwrap_err()
            .to_string()
            .contains("tile_m"));
        let s = hand_space();
        assert!(explore(&g, &toy_hw(), &s, MAX_TOP_K + 1)
            .unwrap_err()
            .to_string()
            .contains("top_k"));
        // No SRAM capacity anywhere.
        let mut s = hand_space();
        s.sram_bytes = None;
        let e = explore(&g, &toy_hw(), &s, 5).unwrap_err().to_string();
        assert!(
            e.contains("sram_bytes") && e.contains("no on-chip level"),
            "{e}"
        );
        // No PE array: clock_hz and PE shapes are required.
        let mut hw = toy_hw();
        hw.pe_array = None;
        let e = explore(&g, &hw, &hand_space(), 5).unwrap_err().to_string();
        assert!(e.contains("clock_hz") && e.contains("no PE array"), "{e}");
        let mut s = hand_space();
        s.clock_hz = Some(1e9);
        let e = explore(&g, &hw, &s, 5).unwrap_err().to_string();
        assert!(e.contains("pe_shapes"), "{e}");
        s.pe_shapes = vec![(4, 4)];
        let r = explore(&g, &hw, &s, 5).unwrap();
        assert_eq!(r.best.unwrap().compute_cycles, 16);
        // A PE shape whose fill/drain term would overflow.
        s.pe_shapes = vec![(u64::MAX, 2)];
        assert!(explore(&g, &hw, &s, 5).is_err());
        s.clock_hz = Some(f64::NAN);
        assert!(explore(&g, &hw, &s, 5)
            .unwrap_err()
            .to_string()
            .contains("clock_hz"));
    }

    #[test]
    fn multiple_arrays_use_map_cycles_per_tile_shape() {
        // 17×17×8 fp32 on the chip's 16×16 array ×3 arrays. The whole-problem tile is
        // map_cycles(17, 17, 8): 4 folds over 3 arrays = 2 waves × 8 cycles = 16 cycles.
        // Tile 16×16×8 gives four tile shapes (16×16, 16×1, 1×16, 1×1), one tile each:
        // 1 fold = 1 wave × 8 cycles apiece = 32 cycles.
        let mut hw = toy_hw();
        hw.pe_array = Some(PeArray {
            rows: 16,
            cols: 16,
            macs_per_pe_per_cycle: 1,
            clock_hz: 1e9,
            arrays: 3,
            energy: None,
        });
        let g = Gemm::new(17, 17, 8, DType::Fp32).unwrap();
        let s = DesignSpace {
            tile_m: vec![16, 17],
            tile_n: vec![16, 17],
            tile_k: vec![8],
            orders: vec![LoopOrder::C_RESIDENT],
            sram_bytes: Some(1 << 20),
            ..DesignSpace::default()
        };
        let r = explore(&g, &hw, &s, 10).unwrap();
        let cyc = |tm, tn| {
            r.top
                .iter()
                .find(|c| c.tile.tm == tm && c.tile.tn == tn)
                .unwrap()
                .compute_cycles
        };
        assert_eq!((cyc(17, 17), cyc(16, 16)), (16, 32));
        assert_eq!(r.best.as_ref().unwrap().pe_arrays, 3);
        assert_eq!(r.best.as_ref().unwrap().pe_count, 768);
    }

    #[test]
    fn whole_problem_tile_costs_compulsory_bytes_and_whole_gemm_cycles() {
        // Tiles larger than the problem clip to it: trips 1, each operand moved once, and the
        // cycles equal map_cycles of the whole GEMM.
        let mut g = Gemm::new(24, 40, 56, DType::Bf16).unwrap();
        g.batch = 3;
        for acc in [false, true] {
            g.accumulate = acc;
            let s = DesignSpace {
                tile_m: vec![24, 1000],
                tile_n: vec![4096],
                tile_k: vec![56, 57],
                dataflows: Dataflow::ALL.to_vec(),
                fill_drain: true,
                sram_bytes: Some(1 << 30),
                ..DesignSpace::default()
            };
            let r = explore(&g, &toy_hw(), &s, 100).unwrap();
            assert_eq!(r.candidates_total, 6 * 3);
            assert_eq!(r.top.len(), 18);
            for c in &r.top {
                assert_eq!(c.dram_bytes, g.compulsory_bytes().unwrap());
                let whole =
                    map_cycles(24, 40, 56, 3, &toy_hw().pe_array.unwrap(), c.dataflow, true)
                        .unwrap();
                assert_eq!(c.compute_cycles, whole.compute_cycles);
            }
        }
    }

    #[test]
    fn independent_of_thread_count_and_explore_many_sums() {
        let g = Gemm::new(96, 80, 72, DType::Fp16).unwrap();
        let s = DesignSpace {
            tile_m: vec![8, 16, 24, 32, 48],
            tile_n: vec![8, 16, 40, 80],
            tile_k: vec![8, 24, 72],
            pe_shapes: vec![(4, 4), (8, 2), (2, 8)],
            dataflows: Dataflow::ALL.to_vec(),
            sram_bytes: Some(16 * 1024),
            ..DesignSpace::default()
        };
        let many = explore(&g, &toy_hw(), &s, 20).unwrap();
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| explore(&g, &toy_hw(), &s, 20).unwrap());
        assert_eq!(strip(&many), strip(&one));

        let g2 = Gemm::new(16, 16, 256, DType::Fp16).unwrap();
        let gemms = vec![
            NamedGemm::new("a", g.clone()),
            NamedGemm::new("b", g2.clone()),
            NamedGemm::new("a_again", g.clone()),
        ];
        let m = explore_many(&gemms, &toy_hw(), &s, 3).unwrap();
        assert_eq!((m.rows.len(), m.distinct_gemms), (3, 2));
        let r2 = explore(&g2, &toy_hw(), &s, 3).unwrap();
        let (b1, b2) = (many.best.unwrap(), r2.best.unwrap());
        assert_eq!(m.total_dram_bytes, 2 * b1.dram_bytes + b2.dram_bytes);
        assert_eq!(
            m.total_compute_cycles,
            2 * b1.compute_cycles + b2.compute_cycles
        );
        let t = 2.0 * b1.timing.overlapped_time_s + b2.timing.overlapped_time_s;
        assert!((m.total_overlapped_time_s - t).abs() <= 1e-12 * t);
        assert_eq!(m.rows[1].name, "b");
        assert_eq!(m.rows[1].tile, b2.tile);
        assert_eq!(
            m.candidates_total,
            many.candidates_total + r2.candidates_total
        );

        // A GEMM with nothing feasible is an error naming it.
        let mut tiny = s.clone();
        tiny.sram_bytes = Some(8);
        let e = explore_many(&gemms, &toy_hw(), &tiny, 3)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gemms.a") && e.contains("No candidate is feasible"),
            "{e}"
        );
        assert!(explore_many(&[], &toy_hw(), &s, 3).is_err());
    }

    /// The parts of a result that must not depend on timing or input order.
    #[allow(clippy::type_complexity)]
    pub(super) fn strip(
        r: &ExploreResult,
    ) -> (
        Option<Candidate>,
        Vec<Candidate>,
        u64,
        Vec<Candidate>,
        Vec<Candidate>,
        String,
        BTreeMap<String, u64>,
        u64,
        u64,
        DesignSpace,
    ) {
        (
            r.best.clone(),
            r.ties_for_best.clone(),
            r.ties_for_best_count,
            r.top.clone(),
            r.pareto.clone(),
            r.why.clone(),
            r.infeasible.clone(),
            r.evaluated,
            r.candidates_total,
            r.space.clone(),
        )
    }

    /// Ranking by energy and by EDP picks the minimum over every feasible candidate, each
    /// candidate's energy taken from `analyze_gemm`'s per-level report (an independent
    /// path: the report, not the explorer's table); rows carry their energy and a reason
    /// naming the part that decides; ranking by latency is untouched.
    #[test]
    fn energy_and_edp_rank_the_minimum() {
        use crate::analysis::{analyze_gemm, GemmOptions};
        let hw = crate::levels::tests::energy_hw();
        let g = Gemm::new(64, 48, 32, DType::Fp32).unwrap();
        let base = DesignSpace {
            tile_m: vec![8, 16, 64],
            tile_n: vec![8, 48],
            tile_k: vec![4, 32],
            pe_shapes: vec![(4, 4), (8, 2), (2, 8)],
            dataflows: Dataflow::ALL.to_vec(),
            sram_bytes: Some(64 * 1024),
            ..DesignSpace::default()
        };
        // Brute force: every candidate through analyze_gemm's schedules.
        let mut all = vec![];
        for &tm in &base.tile_m {
            for &tn in &base.tile_n {
                for &tk in &base.tile_k {
                    for &(rows, cols) in &base.pe_shapes {
                        for df in Dataflow::ALL {
                            let pe = PeArray::resized(&hw, rows, cols, None).unwrap();
                            let opts = GemmOptions {
                                pe: Some(pe),
                                sram_bytes: base.sram_bytes,
                                tile: Some(Tile { tm, tn, tk }),
                                dataflow: Some(df),
                                fill_drain: false,
                            };
                            let a = analyze_gemm(&g, &hw, &opts).unwrap();
                            for sch in &a.schedules {
                                let e = sch.energy.as_ref().unwrap().total_pj.unwrap();
                                all.push((e, sch.timing.overlapped_time_s));
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(all.len(), 3 * 2 * 2 * 3 * 3 * 6);
        let min_e = all.iter().map(|x| x.0).fold(f64::MAX, f64::min);
        let min_edp = all.iter().map(|x| x.0 * x.1).fold(f64::MAX, f64::min);
        let max_e = all.iter().map(|x| x.0).fold(0.0, f64::max);
        assert!(
            max_e > 1.5 * min_e,
            "the space must spread energy: {min_e}..{max_e}"
        );

        let s = DesignSpace {
            rank: RankBy::Energy,
            ..base.clone()
        };
        let r = explore(&g, &hw, &s, 5).unwrap();
        assert_eq!(r.evaluated as usize, all.len());
        assert_eq!(r.rank, RankBy::Energy);
        assert!(r.ranking_rule.starts_with("lowest energy"));
        let best = r.best.as_ref().unwrap();
        let be = best.energy.as_ref().unwrap().total_pj.unwrap();
        assert!((be - min_e).abs() <= 1e-9 * min_e, "{be} vs {min_e}");
        assert!(
            best.reason.starts_with("best: lowest energy"),
            "{}",
            best.reason
        );
        for w in r.top.windows(2) {
            let (a, b) = (
                w[0].energy.as_ref().unwrap().total_pj.unwrap(),
                w[1].energy.as_ref().unwrap().total_pj.unwrap(),
            );
            assert!(a <= b * (1.0 + 1e-12));
        }
        // A row that spends more than the best names the part that decides; a row that ties
        // says so.
        let r = explore(&g, &hw, &s, 200).unwrap();
        let te = |c: &Candidate| c.energy.as_ref().unwrap().total_pj.unwrap();
        let more = r.top.iter().find(|c| te(c) > be).unwrap();
        assert!(
            more.reason.contains("energy vs best") && more.reason.contains("decides"),
            "{}",
            more.reason
        );
        if let Some(tie) = r.top[1..].iter().find(|c| te(c) == be) {
            assert!(
                tie.reason.starts_with("ties best on energy"),
                "{}",
                tie.reason
            );
        }

        let s = DesignSpace {
            rank: RankBy::Edp,
            ..base.clone()
        };
        let r = explore(&g, &hw, &s, 3).unwrap();
        let best = r.best.as_ref().unwrap();
        let edp = best.edp_pj_s.unwrap();
        assert!(
            (edp - min_edp).abs() <= 1e-9 * min_edp,
            "{edp} vs {min_edp}"
        );

        // By latency: no energy on the rows, the old rule.
        let r = explore(&g, &hw, &base, 3).unwrap();
        assert!(r.best.as_ref().unwrap().energy.is_none());
        assert_eq!(r.ranking_rule, RANKING_RULE);
    }

    #[test]
    fn energy_ranking_names_what_is_unsourced() {
        let mut hw = crate::levels::tests::energy_hw();
        hw.dram.energy = None;
        let g = Gemm::new(16, 16, 16, DType::Fp32).unwrap();
        let s = DesignSpace {
            tile_m: vec![8],
            tile_n: vec![8],
            tile_k: vec![8],
            rank: RankBy::Energy,
            ..DesignSpace::default()
        };
        let e = explore(&g, &hw, &s, 1).unwrap_err().to_string();
        assert!(e.contains("rank") && e.contains("dram.energy"), "{e}");
        let e = explore(
            &g,
            &toy_hw(),
            &DesignSpace {
                sram_bytes: Some(4096),
                ..s
            },
            1,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("pe_array.energy") && e.contains("tile buffer"),
            "{e}"
        );
    }
}
