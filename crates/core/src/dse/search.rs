//! The evaluation of a design space: every input checked and the candidate count capped
//! before anything runs, the per-exploration and per-tile invariants hoisted, and the
//! (tile, PE shape) groups evaluated in parallel chunks merged deterministically. Each
//! candidate's traffic, cycles and times come from the Core's model; nothing outside it
//! (inter-tile movement on chip, stalls inside a tile) is counted.

use super::rank::{rank_cmp, supersedes, time_pair_cmp, Pareto, Rec, TopK};
use super::types::{dataflow_index, order_index, sorted_dedup, DesignSpace, RankBy};
use super::{MAX_TOP_K, REASON_OVERFLOW, REASON_SRAM, REASON_SRAM_DOUBLE};
use crate::error::{CoreError, Result};
use crate::gemm::{Gemm, Operand, OperandBytes};
use crate::hardware::{HardwareSpec, PeArray};
use crate::levels::{EnergyTable, GemmEnergy, Hierarchy, NestParts};
use crate::mapping::{map_cycles, Dataflow};
use crate::schedule::{tile_footprint_bytes, tiled_traffic, BufferLayout, LoopOrder, Tile};
use rayon::prelude::*;
use std::cmp::Ordering;
use std::sync::atomic::AtomicU64;

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
pub(super) struct Prepared {
    batch: u64,
    dims: [u64; 3],
    dtype: crate::dtype::DType,
    accumulate: bool,
    ob: OperandBytes,
    tm: Vec<u64>,
    tn: Vec<u64>,
    tk: Vec<u64>,
    pub(super) pes: Vec<PeArray>,
    /// Indices into `pes` by PE count ascending (ties by index).
    pe_order: Vec<usize>,
    orders: Vec<(LoopOrder, u8)>,
    dataflows: Vec<(Dataflow, u8)>,
    pub(super) sram_capacity_bytes: u64,
    double_buffer: bool,
    fill_drain: bool,
    pub(super) dram_bw: f64,
    pub(super) clock_hz: f64,
    /// `factors[pe][dim][list index]`, dims in the order M, N, K.
    factors: Vec<[Vec<DimFactor>; 3]>,
    /// `trips[dim][list index] = ceil(D / v)`, dims in the order M, N, K.
    trips: [Vec<u64>; 3],
    /// Whether [`TileState::classes`] is needed: for a PE shape with several arrays (and for
    /// the debug check of the factored cycles).
    need_classes: bool,
    /// What the ranking minimizes first.
    pub(super) rank: RankBy,
    /// The workload (energy needs its per-level counts).
    pub(super) gemm: Gemm,
    /// Energies, when ranking by energy or EDP (checked complete in `prepare`).
    pub(super) energy: Option<EnergyTable>,
    /// The GEMM's part of every candidate's energy, with `energy`.
    gemm_energy: Option<GemmEnergy>,
    /// `NestParts::states` for every (dataflow, order, trip pattern), indexed
    /// `(dataflow · 6 + order) · 64 + pattern`; empty unless ranking by energy or EDP.
    state_lut: Vec<[u8; 3]>,
    /// Whether the tile buffer holds A, B and C.
    pub(super) buffer_holds: [bool; 3],
    /// How the tile buffer holds the tiles (the feasibility check).
    layout: BufferLayout,
}

const N_REASONS: usize = 3;
const IDX_SRAM: usize = 0;
const IDX_SRAM_DOUBLE: usize = 1;
const IDX_OVERFLOW: usize = 2;
pub(super) const REASONS: [&str; N_REASONS] = [REASON_SRAM, REASON_SRAM_DOUBLE, REASON_OVERFLOW];

/// What one chunk of the candidate range produced.
pub(super) struct ChunkOut {
    /// Sorted, at most `cap` long.
    pub(super) top: Vec<Rec>,
    best_pair: Option<Rec>,
    pub(super) ties: u64,
    pub(super) pareto: Vec<Rec>,
    pub(super) evaluated: u64,
    pub(super) infeasible: [u64; N_REASONS],
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
    /// The orders whose traffic fits in 64 bits as `(index into the normalized orders,
    /// dram_bytes, memory_s)`, sorted by `(dram_bytes, index)`: for one PE shape and dataflow
    /// (one compute time) this is ranking order (see [`Prepared::eval_range`]).
    ranked: [(usize, u64, f64); 6],
    n_ranked: usize,
    /// Orders whose traffic overflows 64 bits.
    n_overflow: u64,
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
    /// The order-independent parts of the energy of tile `idx` on PE shape `pi` with `df`,
    /// from the hoisted fold and tile trips (no division).
    #[inline]
    fn nest_parts(&self, pi: usize, idx: [usize; 3], tile: [u64; 3], df: Dataflow) -> NestParts {
        let pe = &self.pes[pi];
        let f = &self.factors[pi];
        let (rd, cd) = match df {
            Dataflow::OutputStationary => (0, 1),
            Dataflow::WeightStationary => (2, 1),
            Dataflow::InputStationary => (2, 0),
        };
        let mut folds = [1u64; 3];
        folds[rd] = f[rd][idx[rd]].rows[0];
        folds[cd] = f[cd][idx[cd]].cols[0];
        let trips = [
            self.trips[0][idx[0]],
            self.trips[1][idx[1]],
            self.trips[2][idx[2]],
        ];
        NestParts::from_parts(df, tile, folds, trips, pe.rows, pe.cols)
    }

    /// The invariants of the tile `[tm[idx[0]], tn[idx[1]], tk[idx[2]]]`.
    fn tile_state(&self, tile: [u64; 3], idx: [usize; 3]) -> TileState {
        let t = Tile {
            tm: tile[0],
            tn: tile[1],
            tk: tile[2],
        };
        let fit = match tile_footprint_bytes(t, self.dtype) {
            None => Err(IDX_OVERFLOW),
            Some((a, b, c)) => {
                let used = self.layout.used_bytes(a, b, c, self.double_buffer);
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
            ranked: [(0, 0, 0.0); 6],
            n_ranked: 0,
            n_overflow: 0,
        };
        if st.fit.is_err() {
            return st;
        }
        let trips = [
            self.trips[0][idx[0]],
            self.trips[1][idx[1]],
            self.trips[2][idx[2]],
        ];
        for (j, &(order, _)) in self.orders.iter().enumerate() {
            match tiled_traffic(&self.ob, trips, order, self.accumulate) {
                Some(tr) => {
                    st.ranked[st.n_ranked] = (j, tr.total, tr.total as f64 / self.dram_bw);
                    st.n_ranked += 1;
                }
                None => st.n_overflow += 1,
            }
        }
        // Insertion sort by (dram_bytes, index): at most 6 entries.
        for i in 1..st.n_ranked {
            let mut j = i;
            while j > 0 && st.ranked[j].1 < st.ranked[j - 1].1 {
                st.ranked.swap(j, j - 1);
                j -= 1;
            }
        }
        if !self.need_classes {
            return st;
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

    /// Evaluate groups `lo..hi`: every candidate is counted and placed in ranking order
    /// against the top list, the tie count and (via its group's best) the Pareto set. None
    /// of these depends on the order the candidates come in, so the order is chosen for
    /// speed: tiles from the last to the first (larger tiles, which tend to rank first, set
    /// a tight top-list threshold early), and a tile's PE shapes by PE count ascending.
    ///
    /// Within one group and dataflow the compute time `c` is fixed and the orders differ
    /// only in DRAM bytes `d`: memory time `d / bw` is non-decreasing in `d`, so overlapped
    /// time `max(c, d / bw)` and serialized time `c + d / bw` are too, and the later keys
    /// (cycles, PE count, tile, PE shape, dataflow) are equal up to the order index. The
    /// tile's orders sorted by `(d, order index)` are therefore in ranking order, and the
    /// loop stops at the first record that the top list turns away and that is behind the
    /// best (overlapped, serialized) pair: every later record of that dataflow ranks after
    /// it, so it would be turned away and would neither tie nor beat the best. The records
    /// skipped this way are still counted in `evaluated`; the results are the same as
    /// building every record (the naive-reference test checks all of them).
    ///
    /// A group's best goes to the Pareto set unless a group of the same tile (same SRAM
    /// bytes) with fewer PEs is no slower, or the record that last kept a group of the same
    /// PE shape off the set supersedes it: either keeps it off the front (superseding is
    /// transitive, so what supersedes that record supersedes it too).
    fn eval_range(&self, lo: u64, hi: u64, cap: usize, shared: &AtomicU64) -> ChunkOut {
        let mut top = TopK::new(cap, shared);
        let mut pareto = Pareto::default();
        // Per PE shape, the last record that kept one of its groups off the Pareto set: tried
        // first, since neighbouring tiles tend to be superseded by the same record.
        let mut rejecter: Vec<Option<Rec>> = vec![None; self.pes.len()];
        let mut out = ChunkOut {
            top: Vec::new(),
            best_pair: None,
            ties: 0,
            pareto: Vec::new(),
            evaluated: 0,
            infeasible: [0; N_REASONS],
        };
        let np = self.pes.len() as u64;
        let (nn, nk) = (self.tn.len() as u64, self.tk.len() as u64);
        let n_orders = self.orders.len() as u64;
        let per_group = n_orders * self.dataflows.len() as u64;
        if lo >= hi {
            return out;
        }
        // The last tile of the range; earlier tiles by decrementing its index (no division).
        let mut ti = (hi - 1) / np;
        let mut idx = [
            (ti / (nn * nk)) as usize,
            ((ti / nk) % nn) as usize,
            (ti % nk) as usize,
        ];
        let mut end = hi;
        while end > lo {
            if end != hi {
                ti -= 1;
                if idx[2] > 0 {
                    idx[2] -= 1;
                } else {
                    idx[2] = nk as usize - 1;
                    if idx[1] > 0 {
                        idx[1] -= 1;
                    } else {
                        idx[1] = nn as usize - 1;
                        idx[0] -= 1;
                    }
                }
            }
            // This tile's PE shapes `pi0..pi1` (the whole list except at the ends).
            let pi0 = (ti * np).max(lo) - ti * np;
            let pi1 = end - ti * np;
            end -= pi1 - pi0;
            let tile = [self.tm[idx[0]], self.tn[idx[1]], self.tk[idx[2]]];
            let st = self.tile_state(tile, idx);
            let sram_used = match st.fit {
                Ok(u) => u,
                Err(reason) => {
                    out.infeasible[reason] += per_group * (pi1 - pi0);
                    continue;
                }
            };
            let ranked = &st.ranked[..st.n_ranked];
            top.refresh();
            // Least overlapped time (bits) of this tile's groups with fewer PEs than the
            // current level, and of the current level so far.
            let (mut below, mut level, mut level_pe) = (u64::MAX, u64::MAX, 0u64);
            for &pi in &self.pe_order {
                if (pi as u64) < pi0 || (pi as u64) >= pi1 {
                    continue;
                }
                let pe = &self.pes[pi];
                let pe_count = pe.pe_count();
                if pe_count != level_pe {
                    below = below.min(level);
                    level = u64::MAX;
                    level_pe = pe_count;
                }
                let mut group_best: Option<Rec> = None;
                for &(df, df_idx) in &self.dataflows {
                    let cycles = if pe.arrays == 1 {
                        let c = self.cycles_factored(pi, idx, df);
                        debug_assert_eq!(c, self.cycles(&st, pe, df));
                        c
                    } else {
                        self.cycles(&st, pe, df)
                    };
                    let Some(cycles) = cycles else {
                        out.infeasible[IDX_OVERFLOW] += n_orders;
                        continue;
                    };
                    out.infeasible[IDX_OVERFLOW] += st.n_overflow;
                    out.evaluated += ranked.len() as u64;
                    let compute_s = cycles as f64 / self.clock_hz;
                    let rec = |j: usize, dram_bytes: u64, memory_s: f64, primary| Rec {
                        primary,
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
                        order: self.orders[j].1,
                        dataflow: df_idx,
                    };
                    // Offer the group's records in ranking order; stop once neither the top
                    // list nor the ties can take one (every later one ranks after it).
                    let (mut to_top, mut to_ties) = (true, true);
                    // A macro rather than a closure: the flags and the group's best stay in
                    // registers of this loop (measured: the closure cost the latency path).
                    macro_rules! offer {
                        ($n:expr, $r:expr) => {{
                            let r: Rec = $r;
                            if $n == 0 {
                                // Same tile and PE shape => same SRAM bytes and PE count: only
                                // the group's first in ranking order can be on the Pareto front.
                                match &group_best {
                                    Some(g) if rank_cmp(&r, g) != Ordering::Less => {}
                                    _ => group_best = Some(r),
                                }
                            }
                            if to_top {
                                to_top = top.push(&r);
                            }
                            if to_ties {
                                match out.best_pair.as_ref().map(|b| time_pair_cmp(&r, b)) {
                                    None | Some(Ordering::Less) => {
                                        out.best_pair = Some(r);
                                        out.ties = 1;
                                    }
                                    Some(Ordering::Equal) => out.ties += 1,
                                    Some(Ordering::Greater) => to_ties = false,
                                }
                            }
                            to_top || to_ties
                        }};
                    }
                    if self.rank == RankBy::Latency {
                        // One compute time and orders by DRAM bytes: `ranked` is ranking
                        // order, and records are built only as far as they are needed.
                        for (n, &(j, dram_bytes, memory_s)) in ranked.iter().enumerate() {
                            let r = rec(j, dram_bytes, memory_s, compute_s.max(memory_s));
                            if !offer!(n, r) {
                                break;
                            }
                        }
                    } else {
                        // By energy or EDP: every order's record, sorted into ranking order.
                        let (Some(table), Some(ge)) = (&self.energy, &self.gemm_energy) else {
                            unreachable!("prepare gives an energy table when ranking by energy")
                        };
                        // Each operand's energy in each of its (at most five) states, computed
                        // once per group when first needed; the states of an order come from
                        // the table built in `prepare`.
                        let parts = self.nest_parts(pi, idx, tile, df);
                        let base = (df_idx as usize * 6) * 64 + parts.pattern() as usize;
                        let mut memo = [[f64::NAN; 5]; 3];
                        // Within a group, ranking order is (primary, overlapped, serialized,
                        // DRAM bytes, order): the other keys are the group's. Records are
                        // built and offered in that order, the least first, until one is
                        // turned away.
                        let mut keys = [(0u64, 0u64, 0u64, 0u64, 0u8); 6];
                        for (k, &(j, dram_bytes, memory_s)) in ranked.iter().enumerate() {
                            let states = self.state_lut[base + self.orders[j].1 as usize * 64];
                            let mut e = ge.mac_pj;
                            for (xi, x) in Operand::ALL.into_iter().enumerate() {
                                let st = states[xi] as usize;
                                if memo[xi][st].is_nan() {
                                    memo[xi][st] = table.state_pj(
                                        ge,
                                        &parts,
                                        x,
                                        st as u8,
                                        self.buffer_holds[xi],
                                    );
                                }
                                e += memo[xi][st];
                            }
                            let e = e * ge.bytes_per_element;
                            let overlapped_s = compute_s.max(memory_s);
                            let primary = if self.rank == RankBy::Energy {
                                e
                            } else {
                                e * overlapped_s
                            };
                            keys[k] = (
                                primary.to_bits(),
                                overlapped_s.to_bits(),
                                (compute_s + memory_s).to_bits(),
                                dram_bytes,
                                self.orders[j].1,
                            );
                        }
                        let mut used = 0u32;
                        for n in 0..ranked.len() {
                            let mut least = usize::MAX;
                            for k in 0..ranked.len() {
                                if used & (1 << k) == 0
                                    && (least == usize::MAX || keys[k] < keys[least])
                                {
                                    least = k;
                                }
                            }
                            used |= 1 << least;
                            let (j, dram_bytes, memory_s) = ranked[least];
                            let r = rec(j, dram_bytes, memory_s, f64::from_bits(keys[least].0));
                            if !offer!(n, r) {
                                break;
                            }
                        }
                    }
                }
                if let Some(g) = group_best {
                    let t = g.primary.to_bits();
                    if t < below && !rejecter[pi].as_ref().is_some_and(|p| supersedes(p, &g)) {
                        if let Some(p) = pareto.insert(g) {
                            rejecter[pi] = Some(p);
                        }
                    }
                    level = level.min(t);
                }
            }
        }
        out.top = top.into_sorted();
        out.pareto = pareto.into_sorted();
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
            energy: hw.pe_array.as_ref().and_then(|p| p.energy.clone()),
        })
        .collect();
    Ok((pes, clock_hz))
}

/// The energy table when ranking by energy or EDP, and which operands the tile buffer
/// holds. The chip's PE energy applies to every candidate PE shape (per MAC and per
/// register byte, independent of the shape); a given `sram_bytes` replaces only the tile
/// buffer's capacity (its energy per byte and held operands stay). Anything unsourced is an
/// error naming it.
fn energy_table(
    g: &Gemm,
    hw: &HardwareSpec,
    space: &DesignSpace,
) -> Result<(Option<EnergyTable>, [bool; 3])> {
    let buffer = hw.tile_buffer();
    let holds = buffer.map_or([true; 3], |b| crate::gemm::Operand::ALL.map(|x| b.holds(x)));
    if space.rank == RankBy::Latency {
        return Ok((None, holds));
    }
    let pe = hw.pe_array.clone().unwrap_or(PeArray {
        rows: 1,
        cols: 1,
        macs_per_pe_per_cycle: 1,
        clock_hz: 1.0,
        arrays: 1,
        energy: None,
    });
    let h = Hierarchy {
        pe: &pe,
        buffer,
        dram: &hw.dram,
    };
    let table = EnergyTable::of(&h, g).map_err(|missing| {
        CoreError::invalid(
            "rank",
            space.rank.name(),
            format!(
                "ranking by {} needs sourced energies; hardware `{}` has none for: {missing}",
                space.rank.name(),
                hw.name
            ),
        )
    })?;
    Ok((Some(table), holds))
}

/// Everything checked before evaluation: the prepared inputs and the candidate count.
pub(super) fn prepare(
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
    let trips = [
        (g.m, &norm.tile_m),
        (g.n, &norm.tile_n),
        (g.k, &norm.tile_k),
    ]
    .map(|(d, list)| list.iter().map(|&v| d.div_ceil(v)).collect());
    let (energy, buffer_holds) = energy_table(g, hw, space)?;
    let need_classes = cfg!(debug_assertions) || pes.iter().any(|p| p.arrays != 1);
    let mut pe_order: Vec<usize> = (0..pes.len()).collect();
    pe_order.sort_by_key(|&i| (pes[i].pe_count(), i));
    let p = Prepared {
        trips,
        need_classes,
        pe_order,
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
        rank: space.rank,
        gemm: g.clone(),
        gemm_energy: energy.as_ref().map(|t| GemmEnergy::new(t, g)),
        state_lut: if energy.is_some() {
            let mut v = Vec::with_capacity(3 * 6 * 64);
            for df in Dataflow::ALL {
                for o in LoopOrder::ALL {
                    for pattern in 0..64u8 {
                        v.push(NestParts::states(df, o, pattern));
                    }
                }
            }
            v
        } else {
            Vec::new()
        },
        energy,
        buffer_holds,
        layout: hw
            .tile_buffer()
            .map_or(BufferLayout::default(), BufferLayout::of),
    };
    Ok((p, norm, sram_source, count.unwrap_or(u64::MAX)))
}

/// Run every chunk in parallel and merge deterministically.
pub(super) fn run(p: &Prepared, cap: usize) -> ChunkOut {
    let groups = p.groups();
    let threads = rayon::current_num_threads().max(1) as u64;
    let n_chunks = groups.min(threads * 8).max(1);
    let shared = AtomicU64::new(u64::MAX);
    let outs: Vec<ChunkOut> = (0..n_chunks)
        .into_par_iter()
        .map(|c| {
            let lo = groups * c / n_chunks;
            let hi = groups * (c + 1) / n_chunks;
            p.eval_range(lo, hi, cap, &shared)
        })
        .collect();
    let mut pareto = Pareto::default();
    let mut merged = ChunkOut {
        top: merge_sorted(&outs, cap),
        best_pair: None,
        ties: 0,
        pareto: Vec::new(),
        evaluated: 0,
        infeasible: [0; N_REASONS],
    };
    for o in outs {
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
            pareto.insert(r);
        }
    }
    merged.pareto = pareto.into_sorted();
    merged
}

/// The first `cap` records of the chunks' sorted top lists, in ranking order: a merge that
/// takes the least head each time (one comparison per chunk per record taken).
fn merge_sorted(outs: &[ChunkOut], cap: usize) -> Vec<Rec> {
    let mut heads = vec![0usize; outs.len()];
    let mut top = Vec::with_capacity(cap);
    while top.len() < cap {
        let mut least: Option<(usize, &Rec)> = None;
        for (c, o) in outs.iter().enumerate() {
            if let Some(r) = o.top.get(heads[c]) {
                if least.is_none_or(|(_, l)| rank_cmp(r, l) == Ordering::Less) {
                    least = Some((c, r));
                }
            }
        }
        let Some((c, r)) = least else { break };
        top.push(*r);
        heads[c] += 1;
    }
    top
}

#[cfg(test)]
mod tests {
    use super::super::rank::{objectives, supersedes};
    use super::super::tests::{strip, toy_hw};
    use super::super::{explore, Candidate};
    use super::*;
    use crate::dtype::DType;
    use proptest::prelude::*;

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
                                        primary: compute_s.max(memory_s),
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

    #[test]
    fn a_short_top_list_agrees_with_a_long_one_at_scale() {
        // 16 values per tile list (all below the dimensions, so none clip together), 3 PE
        // shapes, 6 orders, 3 dataflows: 16³ · 3 · 6 · 3 = 221,184 candidates, about 13,800
        // per chunk on 2 threads (16 chunks). A top list of 3 keeps 2 · 64 records per chunk,
        // so its thresholds, the bound shared between chunks and the early stop within a
        // group all engage; a list of MAX_TOP_K keeps up to 20,000 per chunk and turns almost
        // nothing away. Both must agree on everything the short one reports.
        let g = Gemm {
            m: 96,
            n: 80,
            k: 112,
            batch: 1,
            dtype: DType::Fp16,
            accumulate: false,
        };
        let s = DesignSpace {
            tile_m: (1..=16).map(|i| 6 * i).collect(),
            tile_n: (1..=16).map(|i| 5 * i).collect(),
            tile_k: (1..=16).map(|i| 7 * i).collect(),
            pe_shapes: vec![(4, 4), (8, 4), (8, 8)],
            dataflows: Dataflow::ALL.to_vec(),
            sram_bytes: Some(1 << 20),
            ..DesignSpace::default()
        };
        for bw in [1e9, 1e11] {
            let mut hw = toy_hw();
            hw.dram.bandwidth_bytes_per_s = Some(bw);
            hw.peak_ops_per_s.insert(DType::Fp16, 3.2e10);
            let short = explore(&g, &hw, &s, 3).unwrap();
            let long = explore(&g, &hw, &s, MAX_TOP_K).unwrap();
            assert_eq!(short.candidates_total, 221_184);
            assert_eq!(short.evaluated, long.evaluated);
            assert_eq!(short.best, long.best);
            assert_eq!(&short.top[..], &long.top[..3]);
            assert_eq!(short.ties_for_best_count, long.ties_for_best_count);
            let n = short.ties_for_best.len();
            assert_eq!(&short.ties_for_best[..], &long.ties_for_best[..n]);
            assert_eq!(short.pareto, long.pareto);
        }
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
            // A short top list (64 kept per chunk) turns records away, and the evaluation of
            // a group's orders stops early (see `eval_range`): the same counts, best, ties,
            // first rows and Pareto front as the full listing above.
            let short = explore(&g, &hw, &s, 3).unwrap();
            prop_assert_eq!((short.evaluated, &short.infeasible), (r.evaluated, &r.infeasible));
            prop_assert_eq!(&short.best, &r.best);
            prop_assert_eq!(&short.top[..], &r.top[..short.top.len()]);
            prop_assert_eq!(short.top.len(), r.top.len().min(3));
            prop_assert_eq!(short.ties_for_best_count, r.ties_for_best_count);
            prop_assert_eq!(&short.ties_for_best[..], &r.ties_for_best[..short.ties_for_best.len()]);
            prop_assert_eq!(&short.pareto, &r.pareto);
        }
    }
}
