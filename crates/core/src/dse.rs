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

use crate::analysis::{Timing, LIMITATIONS, SCHEMA_VERSION};
use crate::error::{CoreError, Result};
use crate::gemm::{Gemm, NamedGemm, OperandBytes};
use crate::hardware::{HardwareSpec, PeArray};
use crate::mapping::{map_cycles, Dataflow};
use crate::roofline::Bound;
use crate::schedule::{tile_footprint_bytes, tiled_traffic, LoopOrder, Tile};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
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

fn default_max_candidates() -> u64 {
    DEFAULT_MAX_CANDIDATES
}

/// The candidate lists of an exploration: every combination of one value from each list is
/// one candidate (`|tile_m| · |tile_n| · |tile_k| · |pe_shapes| · |orders| · |dataflows|`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesignSpace {
    /// Candidate tile heights `Tm` (rows of the A and C tiles).
    pub tile_m: Vec<u64>,
    /// Candidate tile widths `Tn` (columns of the B and C tiles).
    pub tile_n: Vec<u64>,
    /// Candidate tile depths `Tk` (the reduction slice of one tile).
    pub tile_k: Vec<u64>,
    /// Candidate PE-array shapes `(rows, cols)`, each one array at the chip's clock and MACs
    /// per PE per cycle; empty means the chip's own PE array. TOML: `[[32, 32], [16, 64]]`
    /// or `["32x32", "16x64"]`.
    #[serde(default, with = "serde_pe_shapes")]
    pub pe_shapes: Vec<(u64, u64)>,
    /// Candidate tile-loop orders; empty means all six. TOML: names such as `"c-resident"`
    /// or loop letters such as `"nmk"`.
    #[serde(default, with = "serde_orders")]
    pub orders: Vec<LoopOrder>,
    /// Candidate dataflows; empty means output-stationary. TOML: `"output-stationary"` or
    /// `"os"`, `"ws"`, `"is"`.
    #[serde(default, with = "serde_dataflows")]
    pub dataflows: Vec<Dataflow>,
    /// SRAM feasibility uses the double-buffered footprint `2·(A+B)+C` tile bytes instead
    /// of `A+B+C`.
    #[serde(default)]
    pub double_buffer: bool,
    /// Add the systolic fill/drain term `rows + cols − 2` cycles per fold of every tile.
    #[serde(default)]
    pub fill_drain: bool,
    /// SRAM capacity in bytes; absent means the chip's tile buffer (`hw.tile_buffer()`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sram_bytes: Option<u64>,
    /// PE clock in Hz: required when the chip has no PE array, and overrides the array's
    /// clock when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_hz: Option<f64>,
    /// Cap on the number of candidates; more is an error before anything is evaluated.
    #[serde(default = "default_max_candidates")]
    pub max_candidates: u64,
}

impl Default for DesignSpace {
    /// Empty lists (fill in the three tile lists), no double buffering, no fill/drain, the
    /// chip's SRAM and clock, and the default cap of [`DEFAULT_MAX_CANDIDATES`].
    fn default() -> Self {
        DesignSpace {
            tile_m: vec![],
            tile_n: vec![],
            tile_k: vec![],
            pe_shapes: vec![],
            orders: vec![],
            dataflows: vec![],
            double_buffer: false,
            fill_drain: false,
            sram_bytes: None,
            clock_hz: None,
            max_candidates: DEFAULT_MAX_CANDIDATES,
        }
    }
}

/// Sort and deduplicate a list.
fn sorted_dedup<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort_unstable();
    v.dedup();
    v
}

/// A list of `t` clipped to `dim`, sorted and deduplicated.
fn clip_list(list: &[u64], dim: u64) -> Vec<u64> {
    sorted_dedup(list.iter().map(|&t| t.min(dim)).collect())
}

fn order_index(o: LoopOrder) -> u8 {
    LoopOrder::ALL.iter().position(|x| *x == o).unwrap_or(0) as u8
}

fn dataflow_index(d: Dataflow) -> u8 {
    Dataflow::ALL.iter().position(|x| *x == d).unwrap_or(0) as u8
}

impl DesignSpace {
    /// Check every value: the three tile lists are non-empty and every entry is ≥ 1; PE
    /// shapes are ≥ 1 in both dimensions; `sram_bytes ≥ 1`; `clock_hz` positive and finite;
    /// `max_candidates ≥ 1`.
    pub fn validate(&self) -> Result<()> {
        for (name, list) in [
            ("tile_m", &self.tile_m),
            ("tile_n", &self.tile_n),
            ("tile_k", &self.tile_k),
        ] {
            if list.is_empty() {
                return Err(CoreError::invalid(
                    name,
                    "[]",
                    "give at least one candidate tile size, e.g. [32, 64, 128]",
                ));
            }
            if let Some(i) = list.iter().position(|&v| v == 0) {
                return Err(CoreError::invalid(
                    format!("{name}[{i}]"),
                    0,
                    "tile sizes must be at least 1",
                ));
            }
        }
        if let Some(i) = self.pe_shapes.iter().position(|&(r, c)| r == 0 || c == 0) {
            let (r, c) = self.pe_shapes[i];
            return Err(CoreError::invalid(
                format!("pe_shapes[{i}]"),
                format!("{r}x{c}"),
                "PE rows and columns must be at least 1",
            ));
        }
        if self.sram_bytes == Some(0) {
            return Err(CoreError::invalid("sram_bytes", 0, "must be at least 1"));
        }
        if let Some(c) = self.clock_hz {
            if !c.is_finite() || c <= 0.0 {
                return Err(CoreError::invalid(
                    "clock_hz",
                    c,
                    "must be a positive, finite number",
                ));
            }
        }
        if self.max_candidates == 0 {
            return Err(CoreError::invalid(
                "max_candidates",
                0,
                "must be at least 1",
            ));
        }
        Ok(())
    }

    /// Parse and validate a TOML candidates document; `source` (a file name) prefixes errors.
    pub fn from_toml_str(text: &str, source: &str) -> Result<Self> {
        let space: DesignSpace = toml::from_str(text).map_err(|e| CoreError::Parse {
            source_name: source.to_string(),
            message: e.to_string().trim().replace('\n', " "),
        })?;
        space.validate().map_err(|e| e.with_source(source))?;
        Ok(space)
    }

    /// Serialize to TOML (the format [`DesignSpace::from_toml_str`] reads).
    pub fn to_toml_string(&self) -> Result<String> {
        toml::to_string_pretty(self).map_err(|e| CoreError::Parse {
            source_name: "design space".into(),
            message: e.to_string(),
        })
    }

    /// The space as it is explored for `g`: tile lists clipped to the problem
    /// (`min(T, dim)`), every list sorted and deduplicated, empty orders filled with all six
    /// and empty dataflows with output-stationary (empty PE shapes stay empty: the chip's).
    pub fn normalized_for(&self, g: &Gemm) -> DesignSpace {
        let orders = if self.orders.is_empty() {
            LoopOrder::ALL.to_vec()
        } else {
            let mut o = self.orders.clone();
            o.sort_unstable_by_key(|x| order_index(*x));
            o.dedup();
            o
        };
        let dataflows = if self.dataflows.is_empty() {
            vec![Dataflow::OutputStationary]
        } else {
            let mut d = self.dataflows.clone();
            d.sort_unstable_by_key(|x| dataflow_index(*x));
            d.dedup();
            d
        };
        DesignSpace {
            tile_m: clip_list(&self.tile_m, g.m),
            tile_n: clip_list(&self.tile_n, g.n),
            tile_k: clip_list(&self.tile_k, g.k),
            pe_shapes: sorted_dedup(self.pe_shapes.clone()),
            orders,
            dataflows,
            ..self.clone()
        }
    }

    /// Distinct candidates for `g`: the product of the normalized list lengths (an empty PE
    /// list counts as the chip's one array); `None` when the product overflows 64 bits.
    pub fn candidate_count(&self, g: &Gemm) -> Option<u64> {
        let n = self.normalized_for(g);
        [
            n.tile_m.len(),
            n.tile_n.len(),
            n.tile_k.len(),
            n.pe_shapes.len().max(1),
            n.orders.len(),
            n.dataflows.len(),
        ]
        .iter()
        .try_fold(1u64, |acc, &l| acc.checked_mul(l as u64))
    }
}

/// One ranked candidate with its deciding quantities.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// The tile, clipped to the problem.
    pub tile: Tile,
    /// PE rows.
    pub pe_rows: u64,
    /// PE columns.
    pub pe_cols: u64,
    /// Identical arrays (the chip's count for its own array, 1 for a candidate shape).
    pub pe_arrays: u64,
    /// `pe_rows · pe_cols · pe_arrays`.
    pub pe_count: u64,
    /// Loop-order name: `c-resident`, `a-resident`, `b-resident`, `nmk`, `kmn` or `knm`.
    pub schedule: String,
    /// Tile loops, outermost first.
    pub loops: [String; 3],
    /// Dataflow on the PE array.
    pub dataflow: Dataflow,
    /// DRAM traffic under the reuse rule, bytes.
    pub dram_bytes: u64,
    /// `dram_bytes / compulsory bytes` (≥ 1).
    pub amplification: f64,
    /// `batch · Σ_tiles map_cycles(tile)`: PE-array cycles over all full and edge tiles.
    pub compute_cycles: u64,
    /// SRAM footprint checked for feasibility: `A+B+C` tile bytes, or `2·(A+B)+C`.
    pub sram_used_bytes: u64,
    /// `compute_cycles / clock`, `dram_bytes / DRAM bandwidth`, their max and sum.
    pub timing: Timing,
    /// Why it sits where it does, relative to the best candidate.
    pub reason: String,
}

/// Result of [`explore`]: the ranking of the supplied candidates for one GEMM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExploreResult {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `model`.
    pub evidence: String,
    /// Always `dse`.
    pub kind: String,
    /// The workload.
    pub workload: Gemm,
    /// Hardware name.
    pub hardware: String,
    /// The space as explored ([`DesignSpace::normalized_for`] the workload).
    pub space: DesignSpace,
    /// SRAM capacity checked against, bytes.
    pub sram_capacity_bytes: u64,
    /// Where the capacity came from (`sram_bytes` or the chip's level).
    pub sram_source: String,
    /// PE clock used for every candidate, Hz.
    pub clock_hz: f64,
    /// DRAM bandwidth used for memory time, bytes per second.
    pub dram_bandwidth_bytes_per_s: f64,
    /// Compulsory DRAM bytes of the workload (each operand moved once).
    pub compulsory_bytes: u64,
    /// Distinct candidates: product of the normalized list lengths (≤ `max_candidates`).
    pub candidates_total: u64,
    /// Feasible candidates, each fully evaluated and ranked.
    pub evaluated: u64,
    /// Infeasible candidates by reason; `evaluated + Σ infeasible = candidates_total`.
    pub infeasible: BTreeMap<String, u64>,
    /// [`RANKING_RULE`].
    pub ranking_rule: String,
    /// [`PARETO_RULE`].
    pub pareto_rule: String,
    /// The first candidate in ranking order; `None` when nothing is feasible.
    pub best: Option<Candidate>,
    /// Candidates equal to the best on overlapped and serialized time, in ranking order
    /// (at most `max(top_k, TIES_LISTED)` listed; the best itself first).
    pub ties_for_best: Vec<Candidate>,
    /// How many candidates tie with the best on both times (the best included).
    pub ties_for_best_count: u64,
    /// The first `top_k` candidates in ranking order.
    pub top: Vec<Candidate>,
    /// The Pareto front ([`PARETO_RULE`]).
    pub pareto: Vec<Candidate>,
    /// Plain-language account of the winner, the runner-up and the key that decided.
    pub why: String,
    /// Wall time of the exploration, seconds.
    pub elapsed_s: f64,
    /// `evaluated / elapsed_s`: candidates fully evaluated per second of wall time.
    pub evaluations_per_s: f64,
    /// What the model and the DSE leave out.
    pub limitations: Vec<String>,
}

/// One row of [`MultiExploreResult`]: the best candidate of one named GEMM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmBest {
    /// GEMM name within the parent workload.
    pub name: String,
    /// Rows of A and C.
    pub m: u64,
    /// Columns of B and C.
    pub n: u64,
    /// Reduction dimension.
    pub k: u64,
    /// Independent GEMMs.
    pub batch: u64,
    /// Distinct candidates for this GEMM.
    pub candidates_total: u64,
    /// Feasible candidates for this GEMM.
    pub evaluated: u64,
    /// Best tile (clipped).
    pub tile: Tile,
    /// Best PE rows.
    pub pe_rows: u64,
    /// Best PE columns.
    pub pe_cols: u64,
    /// Best loop-order name.
    pub schedule: String,
    /// Best dataflow.
    pub dataflow: Dataflow,
    /// Best overlapped time `max(compute, memory)`, seconds.
    pub overlapped_time_s: f64,
    /// Best serialized time `compute + memory`, seconds.
    pub serialized_time_s: f64,
    /// Best DRAM traffic, bytes.
    pub dram_bytes: u64,
    /// Best compute cycles.
    pub compute_cycles: u64,
    /// Which side binds the best overlapped time.
    pub bound: Bound,
    /// The exploration's `why` for this GEMM.
    pub why: String,
}

/// Result of [`explore_many`]: the best candidate of each named GEMM and their sums.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MultiExploreResult {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `model`.
    pub evidence: String,
    /// Always `dse-many`.
    pub kind: String,
    /// Hardware name.
    pub hardware: String,
    /// The space as supplied (each GEMM clips the tile lists to its own shape).
    pub space: DesignSpace,
    /// [`RANKING_RULE`].
    pub ranking_rule: String,
    /// GEMMs with distinct shapes; repeated shapes are explored once.
    pub distinct_gemms: u64,
    /// Σ candidates over the distinct GEMMs.
    pub candidates_total: u64,
    /// Σ feasible candidates over the distinct GEMMs.
    pub evaluated: u64,
    /// One row per GEMM, in input order.
    pub rows: Vec<GemmBest>,
    /// Σ over rows of the best overlapped time, seconds (GEMMs run one after another).
    pub total_overlapped_time_s: f64,
    /// Σ over rows of the best candidate's serialized time, seconds.
    pub total_serialized_time_s: f64,
    /// Σ over rows of the best candidate's DRAM bytes.
    pub total_dram_bytes: u64,
    /// Σ over rows of the best candidate's compute cycles.
    pub total_compute_cycles: u64,
    /// Wall time of all explorations, seconds.
    pub elapsed_s: f64,
    /// `evaluated / elapsed_s`.
    pub evaluations_per_s: f64,
    /// What the model and the DSE leave out.
    pub limitations: Vec<String>,
}

// ---------------------------------------------------------------------------------------
// Evaluation: compact records, hoisted invariants, a fixed-size top list, a Pareto set.
// ---------------------------------------------------------------------------------------

/// One feasible candidate, plain old data (no heap), as the inner loop produces it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Rec {
    overlapped_s: f64,
    serialized_s: f64,
    compute_s: f64,
    memory_s: f64,
    dram_bytes: u64,
    compute_cycles: u64,
    pe_count: u64,
    sram_used_bytes: u64,
    tile: [u64; 3],
    pe: [u64; 2],
    pe_idx: u32,
    order: u8,
    dataflow: u8,
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

/// Ranking order: [`RANKING_RULE`].
#[inline(always)]
fn rank_cmp(a: &Rec, b: &Rec) -> Ordering {
    a.key().cmp(&b.key())
}

/// Order on (overlapped time, serialized time) only: equal means tied for best.
#[inline(always)]
fn time_pair_cmp(a: &Rec, b: &Rec) -> Ordering {
    (a.overlapped_s.to_bits(), a.serialized_s.to_bits())
        .cmp(&(b.overlapped_s.to_bits(), b.serialized_s.to_bits()))
}

/// Pareto objectives of `a` against `b`: (no worse on all three, equal on all three).
#[inline]
fn objectives(a: &Rec, b: &Rec) -> (bool, bool) {
    let t = a.overlapped_s.to_bits().cmp(&b.overlapped_s.to_bits());
    let s = a.sram_used_bytes.cmp(&b.sram_used_bytes);
    let p = a.pe_count.cmp(&b.pe_count);
    let no_worse = t != Ordering::Greater && s != Ordering::Greater && p != Ordering::Greater;
    let equal = t == Ordering::Equal && s == Ordering::Equal && p == Ordering::Equal;
    (no_worse, equal)
}

/// `a` dominates `b`, or equals it on every objective and precedes it in ranking order.
#[inline]
fn supersedes(a: &Rec, b: &Rec) -> bool {
    let (no_worse, equal) = objectives(a, b);
    no_worse && (!equal || rank_cmp(a, b) == Ordering::Less)
}

/// Insert `c` into a Pareto set (no allocation unless `c` joins the set and it is full).
fn pareto_insert(front: &mut Vec<Rec>, c: Rec) {
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
struct TopK {
    buf: Vec<Rec>,
    cap: usize,
    threshold: Option<Rec>,
}

impl TopK {
    fn new(cap: usize) -> TopK {
        TopK {
            buf: Vec::with_capacity(2 * cap),
            cap,
            threshold: None,
        }
    }

    #[inline(always)]
    fn push(&mut self, r: &Rec) {
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
    fn into_sorted(mut self) -> Vec<Rec> {
        self.buf.sort_unstable_by(rank_cmp);
        self.buf.truncate(self.cap);
        self.buf
    }
}

/// Per PE shape, dimension and list value `v` of that dimension `D`: the factors of
/// [`map_cycles`] for the full tiles (extent `v`, `D / v` of them) and the one edge tile
/// (extent `D mod v`, zero factors when `v` divides `D`). With one array (`waves = folds`)
/// `map_cycles` is a product `folds · cycles_per_fold` of per-dimension terms, so the sum
/// over the up-to-8 full/edge tile shapes factorizes into
/// `batch · S_rows · S_cols · S_time`, `S_role = full · f_role(v) + f_role(D mod v)`.
#[derive(Clone, Copy, Debug, Default)]
struct DimFactor {
    full: u64,
    /// `[ceil(v / rows), ceil(rem / rows)]`.
    rows: [u64; 2],
    /// `[ceil(v / cols), ceil(rem / cols)]`.
    cols: [u64; 2],
    /// `[ceil(v / macs) + fill_drain, ceil(rem / macs) + fill_drain]`; `None`-like `ok = false`
    /// when the sum overflows.
    time: [u64; 2],
    ok: bool,
}

impl DimFactor {
    fn new(dim: u64, v: u64, pe: &PeArray, fill_drain: bool) -> DimFactor {
        let rem = dim % v;
        let extra = if fill_drain { pe.rows + pe.cols - 2 } else { 0 };
        let t0 = v.div_ceil(pe.macs_per_pe_per_cycle).checked_add(extra);
        let t1 = if rem == 0 {
            Some(0)
        } else {
            rem.div_ceil(pe.macs_per_pe_per_cycle).checked_add(extra)
        };
        let edge = |d: u64| if rem == 0 { 0 } else { rem.div_ceil(d) };
        DimFactor {
            full: dim / v,
            rows: [v.div_ceil(pe.rows), edge(pe.rows)],
            cols: [v.div_ceil(pe.cols), edge(pe.cols)],
            time: [t0.unwrap_or(0), t1.unwrap_or(0)],
            ok: t0.is_some() && t1.is_some(),
        }
    }

    #[inline(always)]
    fn sum(&self, f: [u64; 2]) -> Option<u64> {
        self.full.checked_mul(f[0])?.checked_add(f[1])
    }
}

/// Everything the inner loop needs, computed once per exploration.
struct Prepared {
    batch: u64,
    dims: [u64; 3],
    dtype: crate::dtype::DType,
    accumulate: bool,
    ob: OperandBytes,
    tm: Vec<u64>,
    tn: Vec<u64>,
    tk: Vec<u64>,
    pes: Vec<PeArray>,
    orders: Vec<(LoopOrder, u8)>,
    dataflows: Vec<(Dataflow, u8)>,
    sram_capacity_bytes: u64,
    double_buffer: bool,
    fill_drain: bool,
    dram_bw: f64,
    clock_hz: f64,
    /// `factors[pe][dim][list index]`, dims in the order M, N, K.
    factors: Vec<[Vec<DimFactor>; 3]>,
}

const N_REASONS: usize = 3;
const IDX_SRAM: usize = 0;
const IDX_SRAM_DOUBLE: usize = 1;
const IDX_OVERFLOW: usize = 2;
const REASONS: [&str; N_REASONS] = [REASON_SRAM, REASON_SRAM_DOUBLE, REASON_OVERFLOW];

/// What one chunk of the candidate range produced.
struct ChunkOut {
    /// Sorted, at most `cap` long.
    top: Vec<Rec>,
    best_pair: Option<Rec>,
    ties: u64,
    pareto: Vec<Rec>,
    evaluated: u64,
    infeasible: [u64; N_REASONS],
}

/// Per-tile invariants: the full/edge tile classes, footprint and per-order traffic.
struct TileState {
    /// `(tm, tn, tk, count)` for each of up to 8 full/edge tile shapes; count = batch · the
    /// number of tiles of that shape.
    classes: [(u64, u64, u64, u64); 8],
    n_classes: usize,
    classes_ok: bool,
    /// `Ok(sram_used_bytes)` or `Err(reason index)`.
    fit: std::result::Result<u64, usize>,
    /// Per normalized order: `(dram_bytes, memory_s)`, `None` on overflow.
    traffic: [Option<(u64, f64)>; 6],
}

/// `[(extent, count)]` of the full and (when the tile does not divide) edge tiles of a dim.
#[inline]
fn dim_classes(dim: u64, t: u64) -> ([(u64, u64); 2], usize) {
    let full = dim / t;
    let rem = dim % t;
    if rem == 0 {
        ([(t, full), (0, 0)], 1)
    } else {
        ([(t, full), (rem, 1)], 2)
    }
}

impl Prepared {
    fn tile_state(&self, tile: [u64; 3]) -> TileState {
        let t = Tile {
            tm: tile[0],
            tn: tile[1],
            tk: tile[2],
        };
        let fit = match tile_footprint_bytes(t, self.dtype) {
            None => Err(IDX_OVERFLOW),
            Some((a, b, c)) => {
                let used = if self.double_buffer {
                    a.checked_add(b)
                        .and_then(|ab| ab.checked_mul(2))
                        .and_then(|ab2| ab2.checked_add(c))
                } else {
                    a.checked_add(b).and_then(|ab| ab.checked_add(c))
                };
                match used {
                    None => Err(IDX_OVERFLOW),
                    Some(u) if u > self.sram_capacity_bytes => Err(if self.double_buffer {
                        IDX_SRAM_DOUBLE
                    } else {
                        IDX_SRAM
                    }),
                    Some(u) => Ok(u),
                }
            }
        };
        let mut st = TileState {
            classes: [(0, 0, 0, 0); 8],
            n_classes: 0,
            classes_ok: true,
            fit,
            traffic: [None; 6],
        };
        if st.fit.is_err() {
            return st;
        }
        let trips = [
            self.dims[0].div_ceil(tile[0]),
            self.dims[1].div_ceil(tile[1]),
            self.dims[2].div_ceil(tile[2]),
        ];
        for (j, &(order, _)) in self.orders.iter().enumerate() {
            st.traffic[j] = tiled_traffic(&self.ob, trips, order, self.accumulate)
                .map(|tr| (tr.total, tr.total as f64 / self.dram_bw));
        }
        let (cm, nm) = dim_classes(self.dims[0], tile[0]);
        let (cn, nn) = dim_classes(self.dims[1], tile[1]);
        let (ck, nk) = dim_classes(self.dims[2], tile[2]);
        for &(lm, km) in &cm[..nm] {
            for &(ln, kn) in &cn[..nn] {
                for &(lk, kk) in &ck[..nk] {
                    match self
                        .batch
                        .checked_mul(km)
                        .and_then(|x| x.checked_mul(kn))
                        .and_then(|x| x.checked_mul(kk))
                    {
                        Some(count) => {
                            st.classes[st.n_classes] = (lm, ln, lk, count);
                            st.n_classes += 1;
                        }
                        None => st.classes_ok = false,
                    }
                }
            }
        }
        st
    }

    /// `batch · Σ_tiles map_cycles(tile)` over the tile classes; `None` on overflow.
    #[inline]
    fn cycles(&self, st: &TileState, pe: &PeArray, df: Dataflow) -> Option<u64> {
        if !st.classes_ok {
            return None;
        }
        let mut total: u64 = 0;
        for &(lm, ln, lk, count) in &st.classes[..st.n_classes] {
            let mc = map_cycles(lm, ln, lk, count, pe, df, self.fill_drain)?;
            total = total.checked_add(mc.compute_cycles)?;
        }
        Some(total)
    }

    /// [`Prepared::cycles`] for a one-array PE shape from the hoisted per-dimension factors:
    /// `batch · S_rows · S_cols · S_time` (equal to the sum of `map_cycles`, overflowing
    /// exactly when that sum does, since every partial product is at most the total).
    #[inline(always)]
    fn cycles_factored(&self, pi: usize, idx: [usize; 3], df: Dataflow) -> Option<u64> {
        let f = &self.factors[pi];
        let (r, c, t) = match df {
            Dataflow::OutputStationary => (0, 1, 2),
            Dataflow::WeightStationary => (2, 1, 0),
            Dataflow::InputStationary => (2, 0, 1),
        };
        let (fr, fc, ft) = (&f[r][idx[r]], &f[c][idx[c]], &f[t][idx[t]]);
        if !ft.ok {
            return None;
        }
        self.batch
            .checked_mul(fr.sum(fr.rows)?)?
            .checked_mul(fc.sum(fc.cols)?)?
            .checked_mul(ft.sum(ft.time)?)
    }

    /// Number of (tile, PE shape) groups; each holds `|dataflows| · |orders|` candidates.
    fn groups(&self) -> u64 {
        (self.tm.len() * self.tn.len() * self.tk.len() * self.pes.len()) as u64
    }

    /// Evaluate groups `lo..hi`: every candidate gets its full record, considered for the
    /// top list, the tie count and (via its group's best) the Pareto set.
    fn eval_range(&self, lo: u64, hi: u64, cap: usize) -> ChunkOut {
        let mut top = TopK::new(cap);
        let mut out = ChunkOut {
            top: Vec::new(),
            best_pair: None,
            ties: 0,
            pareto: Vec::with_capacity(64),
            evaluated: 0,
            infeasible: [0; N_REASONS],
        };
        let np = self.pes.len() as u64;
        let (nn, nk) = (self.tn.len() as u64, self.tk.len() as u64);
        let per_group = (self.orders.len() * self.dataflows.len()) as u64;
        let mut cached_ti = u64::MAX;
        let mut st: Option<TileState> = None;
        let mut tile = [0u64; 3];
        let mut idx = [0usize; 3];
        for gi in lo..hi {
            let ti = gi / np;
            let pi = (gi % np) as usize;
            if ti != cached_ti {
                cached_ti = ti;
                idx = [
                    (ti / (nn * nk)) as usize,
                    ((ti / nk) % nn) as usize,
                    (ti % nk) as usize,
                ];
                tile = [self.tm[idx[0]], self.tn[idx[1]], self.tk[idx[2]]];
                st = Some(self.tile_state(tile));
            }
            let Some(st) = st.as_ref() else { continue };
            let sram_used = match st.fit {
                Ok(u) => u,
                Err(reason) => {
                    out.infeasible[reason] += per_group;
                    continue;
                }
            };
            let pe = &self.pes[pi];
            let pe_count = pe.pe_count();
            let mut group_best: Option<Rec> = None;
            for &(df, df_idx) in &self.dataflows {
                let cycles = if pe.arrays == 1 {
                    let c = self.cycles_factored(pi, idx, df);
                    debug_assert_eq!(c, self.cycles(st, pe, df));
                    c
                } else {
                    self.cycles(st, pe, df)
                };
                let compute_s = cycles.map_or(0.0, |c| c as f64 / self.clock_hz);
                for (j, &(_, order_idx)) in self.orders.iter().enumerate() {
                    let (Some(cycles), Some((dram_bytes, memory_s))) = (cycles, st.traffic[j])
                    else {
                        out.infeasible[IDX_OVERFLOW] += 1;
                        continue;
                    };
                    let r = Rec {
                        overlapped_s: compute_s.max(memory_s),
                        serialized_s: compute_s + memory_s,
                        compute_s,
                        memory_s,
                        dram_bytes,
                        compute_cycles: cycles,
                        pe_count,
                        sram_used_bytes: sram_used,
                        tile,
                        pe: [pe.rows, pe.cols],
                        pe_idx: pi as u32,
                        order: order_idx,
                        dataflow: df_idx,
                    };
                    out.evaluated += 1;
                    top.push(&r);
                    match out.best_pair.as_ref().map(|b| time_pair_cmp(&r, b)) {
                        None | Some(Ordering::Less) => {
                            out.best_pair = Some(r);
                            out.ties = 1;
                        }
                        Some(Ordering::Equal) => out.ties += 1,
                        Some(Ordering::Greater) => {}
                    }
                    // Same tile and PE shape => same SRAM bytes and PE count: only the group's
                    // first in ranking order can be on the Pareto front.
                    match &group_best {
                        Some(g) if rank_cmp(&r, g) != Ordering::Less => {}
                        _ => group_best = Some(r),
                    }
                }
            }
            if let Some(g) = group_best {
                pareto_insert(&mut out.pareto, g);
            }
        }
        out.top = top.into_sorted();
        out
    }
}

/// The SRAM capacity and its source.
fn sram_capacity(hw: &HardwareSpec, space: &DesignSpace) -> Result<(u64, String)> {
    if let Some(b) = space.sram_bytes {
        return Ok((b, "sram_bytes".into()));
    }
    match hw.tile_buffer() {
        Some(l) => Ok((l.capacity_bytes.unwrap_or(0), format!("{} ({})", l.name, hw.name))),
        None => Err(CoreError::invalid(
            "sram_bytes",
            "(missing)",
            format!(
                "hardware `{}` has no on-chip level with a capacity; give sram_bytes in the design space",
                hw.name
            ),
        )),
    }
}

/// The PE arrays to explore and their clock.
fn pe_candidates(hw: &HardwareSpec, space: &DesignSpace) -> Result<(Vec<PeArray>, f64)> {
    let (clock_hz, macs) = match (&hw.pe_array, space.clock_hz) {
        (_, Some(c)) => (
            c,
            hw.pe_array.as_ref().map_or(1, |p| p.macs_per_pe_per_cycle),
        ),
        (Some(p), None) => (p.clock_hz, p.macs_per_pe_per_cycle),
        (None, None) => {
            return Err(CoreError::invalid(
                "clock_hz",
                "(missing)",
                format!(
                "hardware `{}` has no PE array; give pe_shapes and clock_hz in the design space",
                hw.name
            ),
            ))
        }
    };
    if !clock_hz.is_finite() || clock_hz <= 0.0 {
        return Err(CoreError::invalid(
            "pe_array.clock_hz",
            clock_hz,
            "must be a positive, finite number",
        ));
    }
    if macs == 0 {
        return Err(CoreError::invalid(
            "pe_array.macs_per_pe_per_cycle",
            0,
            "must be at least 1",
        ));
    }
    if let Some(i) = space
        .pe_shapes
        .iter()
        .position(|&(r, c)| r.checked_add(c).is_none())
    {
        let (r, c) = space.pe_shapes[i];
        return Err(CoreError::invalid(
            format!("pe_shapes[{i}]"),
            format!("{r}x{c}"),
            "rows + cols must fit in 64 bits",
        ));
    }
    if space.pe_shapes.is_empty() {
        return match &hw.pe_array {
            Some(p) => {
                if p.rows == 0
                    || p.cols == 0
                    || p.arrays == 0
                    || p.rows.checked_add(p.cols).is_none()
                {
                    return Err(CoreError::invalid(
                        "pe_array",
                        format!("{}x{}x{}", p.rows, p.cols, p.arrays),
                        "rows, cols and arrays must be at least 1 and rows + cols must fit in 64 bits",
                    ));
                }
                Ok((
                    vec![PeArray {
                        clock_hz,
                        ..p.clone()
                    }],
                    clock_hz,
                ))
            }
            None => Err(CoreError::invalid(
                "pe_shapes",
                "[]",
                format!(
                    "hardware `{}` has no PE array; list candidate PE shapes, e.g. [[32, 32]]",
                    hw.name
                ),
            )),
        };
    }
    let pes = sorted_dedup(space.pe_shapes.clone())
        .into_iter()
        .map(|(rows, cols)| PeArray {
            rows,
            cols,
            macs_per_pe_per_cycle: macs,
            clock_hz,
            arrays: 1,
        })
        .collect();
    Ok((pes, clock_hz))
}

/// Everything checked before evaluation: the prepared inputs and the candidate count.
fn prepare(
    g: &Gemm,
    hw: &HardwareSpec,
    space: &DesignSpace,
    top_k: usize,
) -> Result<(Prepared, DesignSpace, String, u64)> {
    g.validate()?;
    space.validate()?;
    if top_k > MAX_TOP_K {
        return Err(CoreError::invalid(
            "top_k",
            top_k,
            format!("must be at most {MAX_TOP_K}"),
        ));
    }
    let dram_bw = hw.dram.bandwidth_bytes_per_s.ok_or_else(|| {
        CoreError::invalid(
            "dram.bandwidth_bytes_per_s",
            "(missing)",
            "DRAM bandwidth is required",
        )
    })?;
    if !dram_bw.is_finite() || dram_bw <= 0.0 {
        return Err(CoreError::invalid(
            "dram.bandwidth_bytes_per_s",
            dram_bw,
            "must be a positive, finite number",
        ));
    }
    let (sram_capacity_bytes, sram_source) = sram_capacity(hw, space)?;
    if sram_capacity_bytes == 0 {
        return Err(CoreError::invalid("sram_bytes", 0, "must be at least 1"));
    }
    let (pes, clock_hz) = pe_candidates(hw, space)?;
    let norm = space.normalized_for(g);
    // The cap, with checked math, before anything is evaluated.
    let count = [
        norm.tile_m.len(),
        norm.tile_n.len(),
        norm.tile_k.len(),
        pes.len(),
        norm.orders.len(),
        norm.dataflows.len(),
    ]
    .iter()
    .try_fold(1u64, |acc, &l| acc.checked_mul(l as u64));
    match count {
        Some(c) if c <= space.max_candidates => {}
        other => {
            return Err(CoreError::TooManyCandidates {
                count: other.unwrap_or(u64::MAX),
                cap: space.max_candidates,
            })
        }
    }
    let factors = pes
        .iter()
        .map(|pe| {
            let f = |dim: u64, list: &[u64]| -> Vec<DimFactor> {
                list.iter()
                    .map(|&v| DimFactor::new(dim, v, pe, space.fill_drain))
                    .collect()
            };
            [
                f(g.m, &norm.tile_m),
                f(g.n, &norm.tile_n),
                f(g.k, &norm.tile_k),
            ]
        })
        .collect();
    let p = Prepared {
        factors,
        batch: g.batch,
        dims: [g.m, g.n, g.k],
        dtype: g.dtype,
        accumulate: g.accumulate,
        ob: g.operand_bytes()?,
        tm: norm.tile_m.clone(),
        tn: norm.tile_n.clone(),
        tk: norm.tile_k.clone(),
        pes,
        orders: norm.orders.iter().map(|o| (*o, order_index(*o))).collect(),
        dataflows: norm
            .dataflows
            .iter()
            .map(|d| (*d, dataflow_index(*d)))
            .collect(),
        sram_capacity_bytes,
        double_buffer: space.double_buffer,
        fill_drain: space.fill_drain,
        dram_bw,
        clock_hz,
    };
    Ok((p, norm, sram_source, count.unwrap_or(u64::MAX)))
}

/// Run every chunk in parallel and merge deterministically.
fn run(p: &Prepared, cap: usize) -> ChunkOut {
    let groups = p.groups();
    let threads = rayon::current_num_threads().max(1) as u64;
    let n_chunks = groups.min(threads * 8).max(1);
    let outs: Vec<ChunkOut> = (0..n_chunks)
        .into_par_iter()
        .map(|c| {
            let lo = groups * c / n_chunks;
            let hi = groups * (c + 1) / n_chunks;
            p.eval_range(lo, hi, cap)
        })
        .collect();
    let mut merged = ChunkOut {
        top: Vec::with_capacity(cap * outs.len()),
        best_pair: None,
        ties: 0,
        pareto: Vec::new(),
        evaluated: 0,
        infeasible: [0; N_REASONS],
    };
    for o in outs {
        merged.top.extend_from_slice(&o.top);
        merged.evaluated += o.evaluated;
        for (m, x) in merged.infeasible.iter_mut().zip(o.infeasible) {
            *m += x;
        }
        if let Some(b) = o.best_pair {
            match merged.best_pair.as_ref().map(|m| time_pair_cmp(&b, m)) {
                None | Some(Ordering::Less) => {
                    merged.best_pair = Some(b);
                    merged.ties = o.ties;
                }
                Some(Ordering::Equal) => merged.ties += o.ties,
                Some(Ordering::Greater) => {}
            }
        }
        for r in o.pareto {
            pareto_insert(&mut merged.pareto, r);
        }
    }
    merged.top.sort_unstable_by(rank_cmp);
    merged.top.truncate(cap);
    merged.pareto.sort_unstable_by(rank_cmp);
    merged
}

// ---------------------------------------------------------------------------------------
// Text: numbers with units, the `why` and each row's `reason`.
// ---------------------------------------------------------------------------------------

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
fn row_reason(best: &Rec, r: &Rec) -> String {
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

fn why_text(p: &Prepared, m: &ChunkOut, total: u64, infeasible: &BTreeMap<String, u64>) -> String {
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

fn candidate(p: &Prepared, best: &Rec, r: &Rec, compulsory: u64) -> Candidate {
    let order = LoopOrder::ALL[r.order as usize];
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
        reason: row_reason(best, r),
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
            let c = |r: &Rec| candidate(&p, b, r, compulsory);
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
        why.push_str(&off_front_text(b, &pareto));
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
        ranking_rule: RANKING_RULE.into(),
        pareto_rule: PARETO_RULE.into(),
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
fn off_front_text(best: &Candidate, pareto: &[Candidate]) -> String {
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
    let elapsed_s = start.elapsed().as_secs_f64();
    Ok(MultiExploreResult {
        schema_version: SCHEMA_VERSION,
        evidence: "model".into(),
        kind: "dse-many".into(),
        hardware: hw.name.clone(),
        space: space.clone(),
        ranking_rule: RANKING_RULE.into(),
        distinct_gemms: distinct.len() as u64,
        candidates_total,
        evaluated,
        rows,
        total_overlapped_time_s: t_over,
        total_serialized_time_s: t_ser,
        total_dram_bytes: t_dram,
        total_compute_cycles: t_cyc,
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

// ---------------------------------------------------------------------------------------
// Serde helpers: friendly TOML spellings for PE shapes, loop orders and dataflows.
// ---------------------------------------------------------------------------------------

mod serde_pe_shapes {
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(v: &[(u64, u64)], s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }

    struct Shape((u64, u64));

    impl<'de> Deserialize<'de> for Shape {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Shape;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a PE shape: [rows, cols] or \"ROWSxCOLS\"")
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Shape, E> {
                    let parts: Vec<&str> = s.split(['x', 'X', '×']).collect();
                    let bad = || {
                        E::custom(format!(
                            "pe_shapes: `{s}` is not ROWSxCOLS with positive integers, e.g. 32x32"
                        ))
                    };
                    if parts.len() != 2 {
                        return Err(bad());
                    }
                    let r = parts[0].trim().parse::<u64>().map_err(|_| bad())?;
                    let c = parts[1].trim().parse::<u64>().map_err(|_| bad())?;
                    Ok(Shape((r, c)))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
                    let r: u64 = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::custom("pe_shapes: expected [rows, cols]"))?;
                    let c: u64 = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::custom("pe_shapes: expected [rows, cols]"))?;
                    if seq.next_element::<u64>()?.is_some() {
                        return Err(de::Error::custom(
                            "pe_shapes: expected [rows, cols], got more than two numbers",
                        ));
                    }
                    Ok(Shape((r, c)))
                }
            }
            d.deserialize_any(V)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(u64, u64)>, D::Error> {
        let v: Vec<Shape> = Vec::deserialize(d)?;
        Ok(v.into_iter().map(|s| s.0).collect())
    }
}

mod serde_orders {
    use crate::schedule::LoopOrder;
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserialize, Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(v: &[LoopOrder], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|o| o.name()))
    }

    struct Order(LoopOrder);

    impl<'de> Deserialize<'de> for Order {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Order;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a loop order: a name such as \"c-resident\", letters such as \"nmk\", or [\"mi\", \"ni\", \"ki\"]")
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Order, E> {
                    LoopOrder::parse(s)
                        .map(Order)
                        .map_err(|e| E::custom(format!("orders: {e}")))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Order, A::Error> {
                    let mut letters = String::new();
                    while let Some(l) = seq.next_element::<String>()? {
                        letters.push_str(l.trim().trim_end_matches('i'));
                    }
                    LoopOrder::parse(&letters)
                        .map(Order)
                        .map_err(|e| de::Error::custom(format!("orders: {e}")))
                }
            }
            d.deserialize_any(V)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<LoopOrder>, D::Error> {
        let v: Vec<Order> = Vec::deserialize(d)?;
        Ok(v.into_iter().map(|o| o.0).collect())
    }
}

mod serde_dataflows {
    use crate::mapping::Dataflow;
    use serde::de::{self, Visitor};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(v: &[Dataflow], s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }

    struct Flow(Dataflow);

    impl<'de> Deserialize<'de> for Flow {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = Flow;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a dataflow: \"output-stationary\", \"weight-stationary\", \"input-stationary\" (or os, ws, is)")
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Flow, E> {
                    Dataflow::parse(s)
                        .map(Flow)
                        .map_err(|e| E::custom(format!("dataflows: {e}")))
                }
            }
            d.deserialize_str(V)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Dataflow>, D::Error> {
        let v: Vec<Flow> = Vec::deserialize(d)?;
        Ok(v.into_iter().map(|f| f.0).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::hardware::MemoryLevel;
    use proptest::prelude::*;

    /// A chip with a 4×4 PE array at 1 GHz, 1 GB/s DRAM and no on-chip level (tests give
    /// `sram_bytes`).
    fn toy_hw() -> HardwareSpec {
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
            },
            onchip: vec![],
            pe_array: Some(PeArray {
                rows: 4,
                cols: 4,
                macs_per_pe_per_cycle: 1,
                clock_hz: 1e9,
                arrays: 1,
            }),
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
    fn toml_space_round_trips_and_names_errors() {
        let text = r#"
tile_m = [64, 32]
tile_n = [32]
tile_k = [16, 32]
pe_shapes = [[16, 16], "32x8"]
orders = ["c-resident", "nmk", ["ki", "mi", "ni"]]
dataflows = ["os", "weight-stationary"]
double_buffer = true
sram_bytes = 65536
"#;
        let s = DesignSpace::from_toml_str(text, "cand.toml").unwrap();
        assert_eq!(s.pe_shapes, vec![(16, 16), (32, 8)]);
        assert_eq!(
            s.orders,
            vec![LoopOrder::C_RESIDENT, LoopOrder::ALL[3], LoopOrder::ALL[4]]
        );
        assert_eq!(
            s.dataflows,
            vec![Dataflow::OutputStationary, Dataflow::WeightStationary]
        );
        assert_eq!(s.max_candidates, DEFAULT_MAX_CANDIDATES);
        assert!(s.double_buffer && !s.fill_drain);
        let again = DesignSpace::from_toml_str(&s.to_toml_string().unwrap(), "x").unwrap();
        assert_eq!(again, s);
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<DesignSpace>(&j).unwrap(), s);

        let e = DesignSpace::from_toml_str(&text.replace("[16, 32]", "[16, 0]"), "cand.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cand.toml") && e.contains("tile_k[1]"), "{e}");
        let e = DesignSpace::from_toml_str(&text.replace("\"nmk\"", "\"mmk\""), "cand.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cand.toml") && e.contains("orders") && e.contains("mmk"),
            "{e}"
        );
        let e = DesignSpace::from_toml_str(&text.replace("\"os\"", "\"xs\""), "cand.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cand.toml") && e.contains("dataflows"), "{e}");
        let e = DesignSpace::from_toml_str(&text.replace("sram_bytes", "sram_kib"), "cand.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cand.toml") && e.contains("sram_kib"), "{e}");
        let e = DesignSpace::from_toml_str(&text.replace("\"32x8\"", "\"32by8\""), "cand.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pe_shapes") && e.contains("32by8"), "{e}");
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
            NamedGemm {
                name: "a".into(),
                gemm: g.clone(),
            },
            NamedGemm {
                name: "b".into(),
                gemm: g2.clone(),
            },
            NamedGemm {
                name: "a_again".into(),
                gemm: g.clone(),
            },
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
    fn strip(
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

    /// Shuffle (seeded) and duplicate part of a list.
    fn scramble<T: Clone>(v: &[T], seed: u64) -> Vec<T> {
        let mut out: Vec<T> = v.to_vec();
        let mut x = seed | 1;
        for i in (1..out.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let dup: Vec<T> = out.iter().take(v.len().div_ceil(2)).cloned().collect();
        out.extend(dup);
        out
    }

    /// A naive reference: every candidate evaluated tile by tile, no hoisting.
    fn brute(g: &Gemm, s: &DesignSpace, hw: &HardwareSpec) -> Vec<(Rec, u64)> {
        let n = s.normalized_for(g);
        let pe0 = hw.pe_array.clone().unwrap();
        let bw = hw.dram.bandwidth_bytes_per_s.unwrap();
        let cap = s.sram_bytes.unwrap();
        let ob = g.operand_bytes().unwrap();
        let mut out = vec![];
        for &tm in &n.tile_m {
            for &tn in &n.tile_n {
                for &tk in &n.tile_k {
                    let t = Tile { tm, tn, tk };
                    let (a, b, c) = tile_footprint_bytes(t, g.dtype).unwrap();
                    let used = if s.double_buffer {
                        2 * (a + b) + c
                    } else {
                        a + b + c
                    };
                    if used > cap {
                        continue;
                    }
                    for &(rows, cols) in &n.pe_shapes {
                        let pe = PeArray {
                            rows,
                            cols,
                            arrays: 1,
                            ..pe0.clone()
                        };
                        for &df in &n.dataflows {
                            // Every tile, edge tiles included, mapped on its own.
                            let mut cycles = 0u64;
                            for mi in (0..g.m).step_by(tm as usize) {
                                for ni in (0..g.n).step_by(tn as usize) {
                                    for ki in (0..g.k).step_by(tk as usize) {
                                        let (em, en, ek) =
                                            (tm.min(g.m - mi), tn.min(g.n - ni), tk.min(g.k - ki));
                                        cycles +=
                                            map_cycles(em, en, ek, g.batch, &pe, df, s.fill_drain)
                                                .unwrap()
                                                .compute_cycles;
                                    }
                                }
                            }
                            for &o in &n.orders {
                                let tr = tiled_traffic(&ob, t.trips(g), o, g.accumulate).unwrap();
                                let compute_s = cycles as f64 / pe.clock_hz;
                                let memory_s = tr.total as f64 / bw;
                                out.push((
                                    Rec {
                                        overlapped_s: compute_s.max(memory_s),
                                        serialized_s: compute_s + memory_s,
                                        compute_s,
                                        memory_s,
                                        dram_bytes: tr.total,
                                        compute_cycles: cycles,
                                        pe_count: rows * cols,
                                        sram_used_bytes: used,
                                        tile: [tm, tn, tk],
                                        pe: [rows, cols],
                                        pe_idx: 0,
                                        order: order_index(o),
                                        dataflow: dataflow_index(df),
                                    },
                                    tr.total,
                                ));
                            }
                        }
                    }
                }
            }
        }
        out
    }

    fn key(c: &Candidate) -> (Tile, u64, u64, String, Dataflow) {
        (c.tile, c.pe_rows, c.pe_cols, c.schedule.clone(), c.dataflow)
    }

    fn arb_space() -> impl Strategy<Value = (Gemm, DesignSpace, u64)> {
        (
            (
                1u64..=40,
                1u64..=40,
                1u64..=40,
                1u64..=3,
                any::<bool>(),
                0usize..4,
            ),
            (
                prop::collection::vec(1u64..=48, 1..5),
                prop::collection::vec(1u64..=48, 1..5),
                prop::collection::vec(1u64..=48, 1..5),
                prop::collection::vec((1u64..=8, 1u64..=8), 1..4),
                prop::collection::vec(0usize..6, 0..4),
                prop::collection::vec(0usize..3, 0..3),
            ),
            (any::<bool>(), any::<bool>(), 64u64..=16384, any::<u64>()),
        )
            .prop_map(
                |((m, n, k, batch, acc, dt), (tm, tn, tk, pes, os, dfs), (db, fd, sram, seed))| {
                    let g = Gemm {
                        m,
                        n,
                        k,
                        batch,
                        dtype: [DType::Fp32, DType::Fp16, DType::Int8, DType::Int4][dt],
                        accumulate: acc,
                    };
                    let s = DesignSpace {
                        tile_m: tm,
                        tile_n: tn,
                        tile_k: tk,
                        pe_shapes: pes,
                        orders: os.into_iter().map(|i| LoopOrder::ALL[i]).collect(),
                        dataflows: dfs.into_iter().map(|i| Dataflow::ALL[i]).collect(),
                        double_buffer: db,
                        fill_drain: fd,
                        sram_bytes: Some(sram),
                        ..DesignSpace::default()
                    };
                    (g, s, seed)
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn ranking_is_invariant_under_shuffles_and_duplicates((g, s, seed) in arb_space()) {
            let hw = toy_hw();
            let r1 = explore(&g, &hw, &s, 7).unwrap();
            let s2 = DesignSpace {
                tile_m: scramble(&s.tile_m, seed),
                tile_n: scramble(&s.tile_n, seed.rotate_left(7)),
                tile_k: scramble(&s.tile_k, seed.rotate_left(13)),
                pe_shapes: scramble(&s.pe_shapes, seed.rotate_left(19)),
                orders: scramble(&s.orders, seed.rotate_left(29)),
                dataflows: scramble(&s.dataflows, seed.rotate_left(37)),
                ..s.clone()
            };
            let r2 = explore(&g, &hw, &s2, 7).unwrap();
            prop_assert_eq!(strip(&r1), strip(&r2));
        }

        #[test]
        fn matches_a_naive_reference((g, s, _seed) in arb_space()) {
            let hw = toy_hw();
            let r = explore(&g, &hw, &s, MAX_TOP_K).unwrap();
            let mut all = brute(&g, &s, &hw);
            // The ranking rule spelled out with f64::total_cmp, independent of Rec::key.
            all.sort_by(|(a, _), (b, _)| {
                a.overlapped_s
                    .total_cmp(&b.overlapped_s)
                    .then(a.serialized_s.total_cmp(&b.serialized_s))
                    .then(a.dram_bytes.cmp(&b.dram_bytes))
                    .then(a.compute_cycles.cmp(&b.compute_cycles))
                    .then(a.pe_count.cmp(&b.pe_count))
                    .then(a.tile.cmp(&b.tile))
                    .then(a.pe.cmp(&b.pe))
                    .then(a.order.cmp(&b.order))
                    .then(a.dataflow.cmp(&b.dataflow))
            });
            // Every feasible candidate is listed, in the naive order, with the same numbers.
            prop_assert_eq!(r.evaluated as usize, all.len());
            prop_assert_eq!(r.top.len(), all.len());
            let compulsory = g.compulsory_bytes().unwrap();
            for (c, (x, dram)) in r.top.iter().zip(&all) {
                prop_assert_eq!(c.tile, Tile { tm: x.tile[0], tn: x.tile[1], tk: x.tile[2] });
                prop_assert_eq!((c.pe_rows, c.pe_cols), (x.pe[0], x.pe[1]));
                prop_assert_eq!(c.dram_bytes, *dram);
                prop_assert_eq!(c.compute_cycles, x.compute_cycles);
                prop_assert_eq!(c.sram_used_bytes, x.sram_used_bytes);
                prop_assert_eq!(c.timing.overlapped_time_s, x.overlapped_s);
                prop_assert!(c.dram_bytes >= compulsory, "{} < {}", c.dram_bytes, compulsory);
                prop_assert!(c.amplification >= 1.0);
            }
            let infeasible: u64 = r.infeasible.values().sum();
            prop_assert_eq!(r.evaluated + infeasible, r.candidates_total);
            if let Some(b) = &r.best {
                prop_assert_eq!(b, &r.top[0]);
                let ties = all.iter().filter(|(x, _)| time_pair_cmp(x, &all[0].0) == Ordering::Equal).count();
                prop_assert_eq!(r.ties_for_best_count as usize, ties);
            }
            // Pareto: members mutually non-dominated, none dominated by any feasible candidate,
            // and every feasible candidate is on the front or superseded by a member.
            let front: Vec<&Rec> = all
                .iter()
                .map(|(x, _)| x)
                .filter(|x| r.pareto.iter().any(|c| key(c) == (Tile { tm: x.tile[0], tn: x.tile[1], tk: x.tile[2] }, x.pe[0], x.pe[1], LoopOrder::ALL[x.order as usize].name(), Dataflow::ALL[x.dataflow as usize])))
                .collect();
            prop_assert_eq!(front.len(), r.pareto.len());
            for a in &front {
                for b in &front {
                    if a != b {
                        prop_assert!(!supersedes(a, b));
                        let (no_worse, equal) = objectives(a, b);
                        prop_assert!(!no_worse || equal, "{:?} dominates {:?}", a, b);
                    }
                }
            }
            for (x, _) in &all {
                let on_front = front.contains(&x);
                let covered = front.iter().any(|f| supersedes(f, x));
                prop_assert!(on_front ^ covered, "{:?}", x);
            }
            // The front is sorted in ranking order.
            for w in front.windows(2) {
                prop_assert_eq!(rank_cmp(w[0], w[1]), Ordering::Less);
            }
        }
    }
}
