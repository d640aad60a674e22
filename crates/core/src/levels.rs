//! Per-level traffic of a tiled GEMM on a PE array: how many elements of A, B and C each
//! memory level reads and writes, in three levels — the PEs' operand registers (one word per
//! operand per PE), the on-chip buffer that holds one tile of each operand, and DRAM.
//!
//! The loop nest, innermost first, is: the dataflow's time loop over the tile's time extent;
//! the two fold loops over the tile's spatial extents (ceil(T / array side) trips each, in
//! the tile loop order); the three tile loops (`ceil(dim / T)` trips, in the tile loop order);
//! the batch. The array's rows and columns unroll two dimensions spatially
//! ([`crate::mapping`]). Loops of one trip are dropped. For an operand X, a loop is
//! *irrelevant* when X does not depend on its dimension (A on N, B on M, C on K). Each level
//! keeps what it holds while irrelevant loops turn:
//!
//! - the registers keep the innermost run of loops irrelevant to X (their product is `s`,
//!   the stationarity: C over K for output-stationary, B over M for weight-stationary);
//! - the buffer holds the intra-tile loops above that run, then the run of tile loops
//!   irrelevant to X right above them (the reuse rule of [`crate::schedule`]); `i1` is the
//!   product of the irrelevant loops it holds;
//! - DRAM holds the rest; `i2` is the product of its irrelevant loops;
//! - `i0` is the product of the array sides that unroll a dimension irrelevant to X: one
//!   read from the buffer feeds that many PEs (a broadcast for A and B, a spatial reduction
//!   for C).
//!
//! With `size` the elements of X (batch included) the counts are, for an input (A or B):
//! registers are written and read `size·i0·i1·i2` times (once per stationary period), the
//! buffer is read `size·i1·i2` times and written `size·i2` times, DRAM read `size·i2` times.
//! For C with `v = s·i0·i1·i2` MACs per element: the registers take `size·v` writes from the
//! MACs, give `size·(v − 1)` reads back to them, are read out upward `size·i0·i1·i2` times
//! and refilled `size·(i1·i2 − 1)` times; the buffer takes `size·i1·i2` writes from below,
//! gives `size·(i1·i2 − 1)` back, is read out upward `size·i2` times and refilled
//! `size·(i2 − 1)` times; DRAM takes `size·i2` writes and gives `size·(i2 − 1)` reads (one
//! more pass, `size·i2`, when the GEMM accumulates into C).
//!
//! These are ZigZag's counts (KU Leuven, zigzag-dse 3.9.1, `mapping/mapping.py` with its
//! stationarity merge-down), checked case by case by `tools/zigzag_levels.py` and the
//! `matches_zigzag` test. An operand the buffer does not hold goes from DRAM to the registers
//! directly: the buffer's loops join DRAM's. Left out: edge tiles and edge folds are counted
//! as full ones (exact when the tile divides the problem and the array divides the tile),
//! the interconnect between buffer and PEs (a broadcast costs one read), a wider
//! accumulator for C, and the buffer's word width (counts are elements, energy is per byte).

use crate::error::{CoreError, Result};
use crate::gemm::{Gemm, Operand};
use crate::hardware::{AccessEnergy, HardwareSpec, MemoryLevel, PeArray};
use crate::mapping::Dataflow;
use crate::schedule::{LoopDim, LoopOrder, Tile};
use serde::{Deserialize, Serialize};

/// Element accesses of one operand at one level, split by direction (ZigZag's four).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accesses {
    /// Elements read out toward the PEs (to the level below).
    pub reads_to_lower: u64,
    /// Elements written in from the level above (fills).
    pub writes_from_higher: u64,
    /// Elements read out toward the level above (C's partial and final sums going up).
    pub reads_to_higher: u64,
    /// Elements written in from below (C's sums coming up).
    pub writes_from_lower: u64,
}

impl Accesses {
    /// `reads_to_lower + reads_to_higher`; `None` on overflow.
    pub fn reads(&self) -> Option<u64> {
        self.reads_to_lower.checked_add(self.reads_to_higher)
    }
    /// `writes_from_higher + writes_from_lower`; `None` on overflow.
    pub fn writes(&self) -> Option<u64> {
        self.writes_from_higher.checked_add(self.writes_from_lower)
    }
}

/// Element accesses at the three levels, each indexed by [`Operand`] (A, B, C).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LevelCounts {
    /// The PEs' operand registers, all PEs together.
    pub registers: [Accesses; 3],
    /// The tile buffer (all zero for an operand it does not hold).
    pub buffer: [Accesses; 3],
    /// DRAM.
    pub dram: [Accesses; 3],
}

fn relevant(x: Operand, d: LoopDim) -> bool {
    match x {
        Operand::A => d != LoopDim::N,
        Operand::B => d != LoopDim::M,
        Operand::C => d != LoopDim::K,
    }
}

/// The one dimension operand `x` does not depend on: N for A, M for B, K for C.
fn free_dim(x: Operand) -> LoopDim {
    match x {
        Operand::A => LoopDim::N,
        Operand::B => LoopDim::M,
        Operand::C => LoopDim::K,
    }
}

fn time_dim(df: Dataflow) -> (LoopDim, LoopDim, LoopDim) {
    // (rows, cols, time), as crate::mapping lays them.
    match df {
        Dataflow::OutputStationary => (LoopDim::M, LoopDim::N, LoopDim::K),
        Dataflow::WeightStationary => (LoopDim::K, LoopDim::N, LoopDim::M),
        Dataflow::InputStationary => (LoopDim::K, LoopDim::M, LoopDim::N),
    }
}

/// The order-independent parts of a schedule's loop nest for one (tile, array shape,
/// dataflow): what the six tile loop orders share, so that an explorer computes them once
/// per group and no division is left per order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NestParts {
    /// The dataflow.
    pub dataflow: Dataflow,
    /// Tile extents `[tm, tn, tk]`, clipped to the problem.
    pub tile: [u64; 3],
    /// Fold trips by dimension `[M, N, K]`: `ceil(tile / array side)` for the two spatial
    /// dimensions; the time dimension's entry is unused.
    pub folds: [u64; 3],
    /// Tile loop trips `[ceil(M / tm), ceil(N / tn), ceil(K / tk)]`.
    pub trips: [u64; 3],
    /// Per operand, the product of the array sides (clipped to the tile) that unroll a
    /// dimension the operand does not depend on.
    pub i0: [u64; 3],
}

fn dim_index(d: LoopDim) -> usize {
    match d {
        LoopDim::M => 0,
        LoopDim::N => 1,
        LoopDim::K => 2,
    }
}

impl NestParts {
    /// The parts of `g` tiled by `tile` (clipped) on a `rows × cols` array with `dataflow`.
    pub fn new(g: &Gemm, rows: u64, cols: u64, dataflow: Dataflow, tile: Tile) -> Self {
        let t = tile.clipped(g);
        let ext = [t.tm, t.tn, t.tk];
        let (rd, cd, _) = time_dim(dataflow);
        let mut folds = [1u64; 3];
        folds[dim_index(rd)] = ext[dim_index(rd)].div_ceil(rows);
        folds[dim_index(cd)] = ext[dim_index(cd)].div_ceil(cols);
        let trips = [g.m.div_ceil(t.tm), g.n.div_ceil(t.tn), g.k.div_ceil(t.tk)];
        Self::from_parts(dataflow, ext, folds, trips, rows, cols)
    }

    /// The parts from counts the caller already has (no division).
    #[inline]
    pub fn from_parts(
        dataflow: Dataflow,
        tile: [u64; 3],
        folds: [u64; 3],
        trips: [u64; 3],
        rows: u64,
        cols: u64,
    ) -> Self {
        let (rd, cd, _) = time_dim(dataflow);
        let mut i0 = [1u64; 3];
        for (xi, x) in Operand::ALL.into_iter().enumerate() {
            for (d, side) in [(rd, rows), (cd, cols)] {
                if !relevant(x, d) {
                    // At most the tile extent, itself at most a 64-bit dimension.
                    i0[xi] *= side.min(tile[dim_index(d)]);
                }
            }
        }
        NestParts {
            dataflow,
            tile,
            folds,
            trips,
            i0,
        }
    }

    /// Which loops have more than one trip, as six bits: the time loop, the fold of the
    /// rows dimension, the fold of the columns dimension, the M, N and K tile loops.
    #[inline]
    pub fn pattern(&self) -> u8 {
        let (rd, cd, td) = time_dim(self.dataflow);
        ((self.tile[dim_index(td)] > 1) as u8)
            | ((self.folds[dim_index(rd)] > 1) as u8) << 1
            | ((self.folds[dim_index(cd)] > 1) as u8) << 2
            | ((self.trips[0] > 1) as u8) << 3
            | ((self.trips[1] > 1) as u8) << 4
            | ((self.trips[2] > 1) as u8) << 5
    }

    /// `(a, b)` of operand `x`: the trips of its loop inside the tile over the dimension it
    /// does not depend on (the time loop or a fold), and of its tile loop over it.
    #[inline]
    pub fn loops_of(&self, x: Operand) -> (u64, u64) {
        let dx = free_dim(x);
        let (_, _, td) = time_dim(self.dataflow);
        let inner = if dx == td {
            self.tile[dim_index(td)]
        } else {
            self.folds[dim_index(dx)]
        };
        (inner, self.trips[dim_index(dx)])
    }

    /// Where each operand's two loops over the dimension it does not depend on sit, as a
    /// state 0–4 ([`EnergyTable::state_pj`]), for `dataflow`, `order` and the trip pattern
    /// [`NestParts::pattern`]: a pure function of the three, so an explorer can tabulate it.
    ///
    /// The nest without dropping one-trip loops has six positions innermost first: the time
    /// loop, the two folds, the three tile loops. A loop *blocks* X when X depends on its
    /// dimension and it has more than one trip. X's loop inside the tile is in the registers
    /// when nothing inner blocks, else in the buffer; its tile loop is in the registers when
    /// nothing inner blocks, in the buffer when no inner tile loop blocks, else in DRAM —
    /// the run rule of the module text.
    pub fn states(dataflow: Dataflow, order: LoopOrder, pattern: u8) -> [u8; 3] {
        let (rd, _, td) = time_dim(dataflow);
        let dims = order.dims();
        let mut dim = [td; 6];
        let mut gt1 = (pattern & 1) as u32;
        let mut p = 1;
        for &d in dims.iter().rev() {
            if d != td {
                dim[p] = d;
                let bit = if d == rd { 1 } else { 2 };
                gt1 |= (((pattern >> bit) & 1) as u32) << p;
                p += 1;
            }
        }
        for (q, &d) in dims.iter().rev().enumerate() {
            dim[3 + q] = d;
            gt1 |= (((pattern >> (3 + dim_index(d))) & 1) as u32) << (3 + q);
        }
        let mut out = [0u8; 3];
        for (xi, x) in Operand::ALL.into_iter().enumerate() {
            let dx = free_dim(x);
            let mut mine = 0u32;
            for (q, &d) in dim.iter().enumerate() {
                mine |= ((d == dx) as u32) << q;
            }
            let block = gt1 & !mine;
            let pi = (mine & 0b111).trailing_zeros();
            let pl = (mine & 0b111_000).trailing_zeros();
            let below = |q: u32| block & ((1u32 << q) - 1) == 0;
            let (i_reg, l_reg) = (below(pi), below(pl));
            let l_buf = !l_reg && block & ((1u32 << pl) - 1) & 0b111_000 == 0;
            out[xi] = match (i_reg, l_reg, l_buf) {
                (true, true, _) => 0,
                (true, false, true) => 1,
                (true, false, false) => 2,
                (false, _, true) => 3,
                _ => 4,
            };
        }
        out
    }

    /// `(s, i1, i2)` of operand `x` under `order` (module text): the state of
    /// [`NestParts::states`] applied to the operand's two loops ([`NestParts::loops_of`]);
    /// `None` on 64-bit overflow.
    pub fn split(&self, order: LoopOrder, x: Operand) -> Option<(u64, u64, u64)> {
        let state = Self::states(self.dataflow, order, self.pattern())[x as usize];
        let (a, b) = self.loops_of(x);
        a.checked_mul(b)?;
        Some(state_factors(state, a, b, 1))
    }
}

/// `(s, i1, i2)` of an operand in `state` (0–4, [`NestParts::states`]) from `a`, the trips
/// of its loop inside the tile, and `b`, of its tile loop: the one table both the counts
/// and the explorer's energy use.
#[inline]
fn state_factors<T: Copy + std::ops::Mul<Output = T>>(state: u8, a: T, b: T, one: T) -> (T, T, T) {
    match state {
        0 => (a * b, one, one),
        1 => (a, b, one),
        2 => (a, one, b),
        3 => (one, a * b, one),
        _ => (one, a, b),
    }
}

/// Element accesses of every operand at the registers, the tile buffer and DRAM, for `g`
/// tiled by `tile` (clipped to the problem) in `order`, on a `rows × cols` array with
/// `dataflow`; `buffer_holds[x]` says whether the buffer holds operand `x` (indexed by
/// [`Operand`]). Allocation-free; `None` on 64-bit overflow. Formulas in the module text.
///
/// ```
/// use tensorforge_core::{Dataflow, DType, Gemm, LoopOrder, Tile};
/// use tensorforge_core::levels::level_counts;
/// // The issue's example: 64³ output-stationary on 32×32 PEs, one 64³ tile. A is read
/// // from the buffer once per column fold: 64·64 elements · 2 folds = 8192 reads.
/// let g = Gemm::new(64, 64, 64, DType::Int8).unwrap();
/// let t = Tile { tm: 64, tn: 64, tk: 64 };
/// let c = level_counts(&g, 32, 32, Dataflow::OutputStationary, t, LoopOrder::C_RESIDENT, [true; 3]).unwrap();
/// assert_eq!(c.buffer[0].reads_to_lower, 8192);
/// assert_eq!(c.dram[0].reads_to_lower, 4096);
/// ```
pub fn level_counts(
    g: &Gemm,
    rows: u64,
    cols: u64,
    dataflow: Dataflow,
    tile: Tile,
    order: LoopOrder,
    buffer_holds: [bool; 3],
) -> Option<LevelCounts> {
    let parts = NestParts::new(g, rows, cols, dataflow, tile);
    let batch = g.batch;
    let mut out = LevelCounts::default();
    for (xi, x) in Operand::ALL.into_iter().enumerate() {
        let (s, i1, i2) = parts.split(order, x)?;
        let i0 = parts.i0[xi];
        let (r, c) = match x {
            Operand::A => (g.m, g.k),
            Operand::B => (g.k, g.n),
            Operand::C => (g.m, g.n),
        };
        let size = batch.checked_mul(r)?.checked_mul(c)?;
        // Without the buffer, its loops join DRAM's.
        let holds = buffer_holds[xi];
        let (i1, i2) = if holds {
            (i1, i2)
        } else {
            (1, i1.checked_mul(i2)?)
        };
        let up = size.checked_mul(i0)?.checked_mul(i1)?.checked_mul(i2)?;
        let buf_out = size.checked_mul(i1)?.checked_mul(i2)?;
        let dram_out = size.checked_mul(i2)?;
        if x != Operand::C {
            out.registers[xi] = Accesses {
                reads_to_lower: up,
                writes_from_higher: up,
                ..Accesses::default()
            };
            if holds {
                out.buffer[xi] = Accesses {
                    reads_to_lower: buf_out,
                    writes_from_higher: dram_out,
                    ..Accesses::default()
                };
            }
            out.dram[xi] = Accesses {
                reads_to_lower: dram_out,
                ..Accesses::default()
            };
        } else {
            let macs = up.checked_mul(s)?;
            let back = |v: u64| size.checked_mul(v.checked_sub(1)?);
            let i12 = i1.checked_mul(i2)?;
            out.registers[xi] = Accesses {
                writes_from_lower: macs,
                reads_to_lower: back(s.checked_mul(i0)?.checked_mul(i12)?)?,
                reads_to_higher: up,
                writes_from_higher: back(i12)?,
            };
            if holds {
                out.buffer[xi] = Accesses {
                    writes_from_lower: buf_out,
                    reads_to_lower: back(i12)?,
                    reads_to_higher: dram_out,
                    writes_from_higher: back(i2)?,
                };
            }
            out.dram[xi] = Accesses {
                writes_from_lower: dram_out,
                reads_to_lower: if g.accumulate { dram_out } else { back(i2)? },
                ..Accesses::default()
            };
        }
    }
    Some(out)
}

/// Which of the three modelled levels a report row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LevelRole {
    /// The PEs' operand registers (one word per operand per PE).
    Registers,
    /// The on-chip buffer that holds the tiles.
    Buffer,
    /// Off-chip memory.
    Dram,
}

/// One operand's traffic at one level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperandTraffic {
    /// Which operand.
    pub operand: Operand,
    /// Element accesses by direction.
    pub elements: Accesses,
    /// `bytes(reads)`: elements read, at the GEMM's dtype.
    pub read_bytes: u64,
    /// `bytes(writes)`: elements written, at the GEMM's dtype.
    pub write_bytes: u64,
}

/// One memory level's traffic and energy under one schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelTraffic {
    /// The hardware's name for the level (`registers` for the PE registers).
    pub level: String,
    /// Registers, buffer or DRAM.
    pub role: LevelRole,
    /// A, B and C (an operand the level does not hold is left out).
    pub operands: Vec<OperandTraffic>,
    /// Sum of the operands' read bytes.
    pub read_bytes: u64,
    /// Sum of the operands' write bytes.
    pub write_bytes: u64,
    /// `(reads · read_pj_per_byte + writes · write_pj_per_byte) · bits / 8` over the
    /// operands' element counts, when the level has sourced energies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy_pj: Option<f64>,
}

/// A schedule's energy: MACs plus every level; each part absent when unsourced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnergyReport {
    /// `MACs · mac_pj`, when the PE array gives a MAC energy for the GEMM's dtype.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac_pj: Option<f64>,
    /// Sum over the levels, when every level has an energy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub levels_pj: Option<f64>,
    /// `mac_pj + levels_pj`, when both are known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_pj: Option<f64>,
    /// The part with the most energy (`mac` or a level's name), when the total is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest: Option<String>,
    /// What has no sourced energy, so the total is absent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

/// The levels a schedule's traffic is reported at: the PE registers, the tile buffer and
/// DRAM, with the energies the hardware gives.
#[derive(Clone, Debug, PartialEq)]
pub struct Hierarchy<'a> {
    /// The PE array (its `energy` gives MAC and register energies).
    pub pe: &'a PeArray,
    /// The tile buffer: its name, which operands it holds and its energy. A capacity given
    /// on the command line replaces only its capacity. `None` when the chip has no tile
    /// buffer (then it holds every operand and has no energy).
    pub buffer: Option<&'a MemoryLevel>,
    /// DRAM.
    pub dram: &'a MemoryLevel,
}

impl<'a> Hierarchy<'a> {
    /// `hw`'s hierarchy with array `pe`, or `None` when `hw` has no tile buffer and no
    /// capacity was given (`given_capacity`).
    pub fn of(hw: &'a HardwareSpec, pe: &'a PeArray, given_capacity: bool) -> Option<Self> {
        let buffer = hw.tile_buffer();
        if buffer.is_none() && !given_capacity {
            return None;
        }
        Some(Hierarchy {
            pe,
            buffer,
            dram: &hw.dram,
        })
    }

    /// Whether the buffer holds each operand (every operand when its list is empty).
    pub fn buffer_holds(&self) -> [bool; 3] {
        match self.buffer {
            Some(l) => Operand::ALL.map(|x| l.holds(x)),
            None => [true; 3],
        }
    }
}

/// Energy of one level's accesses of every operand: `Σ (reads · r + writes · w) · bits / 8`
/// pJ, from element counts (so a 4-bit element costs half a byte's energy).
fn accesses_pj(acc: &[Accesses; 3], bits: u64, r: f64, w: f64) -> f64 {
    let mut pj = 0.0;
    for a in acc {
        let reads = a.reads_to_lower as f64 + a.reads_to_higher as f64;
        let writes = a.writes_from_higher as f64 + a.writes_from_lower as f64;
        pj += reads * r + writes * w;
    }
    pj * bits as f64 / 8.0
}

/// What a GEMM contributes to [`EnergyTable::parts_pj`], computed once per GEMM.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmEnergy {
    /// Elements of A, B and C (batch included).
    pub sizes: [f64; 3],
    /// `MACs · mac_pj / bytes_per_element` (the sum is scaled by bytes per element last).
    pub mac_pj: f64,
    /// `bits / 8`.
    pub bytes_per_element: f64,
    /// C is read once more from DRAM.
    pub accumulate: bool,
}

impl GemmEnergy {
    /// The parts of `g` under `table`.
    pub fn new(table: &EnergyTable, g: &Gemm) -> Self {
        let b = g.batch as f64;
        let sizes = [
            b * g.m as f64 * g.k as f64,
            b * g.k as f64 * g.n as f64,
            b * g.m as f64 * g.n as f64,
        ];
        let bytes_per_element = g.dtype.bits() as f64 / 8.0;
        GemmEnergy {
            sizes,
            mac_pj: sizes[2] * g.k as f64 * table.mac_pj / bytes_per_element,
            bytes_per_element,
            accumulate: g.accumulate,
        }
    }
}

/// Everything energy needs, with nothing missing: pJ per MAC, and pJ per byte read and
/// written at the registers, the tile buffer and DRAM.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EnergyTable {
    /// pJ per MAC at the GEMM's dtype.
    pub mac_pj: f64,
    /// `[registers, buffer, dram]`, each `(read, write)` pJ per byte.
    pub levels: [(f64, f64); 3],
}

impl EnergyTable {
    /// The table of `h` for a GEMM of `g`'s dtype, or the one-line list of what is not
    /// sourced (MAC energy for another dtype counts as missing).
    pub fn of(h: &Hierarchy<'_>, g: &Gemm) -> std::result::Result<Self, String> {
        let mut missing = Vec::new();
        let pe = h.pe.energy.as_ref();
        match pe {
            Some(p) if p.mac_dtype != g.dtype => missing.push(format!(
                "MAC energy for {} (the PE array gives {})",
                g.dtype, p.mac_dtype
            )),
            Some(_) => {}
            None => missing.push("pe_array.energy (MAC and registers)".into()),
        }
        let buffer = match h.buffer {
            Some(l) => l
                .energy
                .as_ref()
                .ok_or_else(|| format!("{}.energy", l.name)),
            None => Err("a tile buffer's energy (the chip has no on-chip level)".into()),
        };
        if let Err(m) = &buffer {
            missing.push(m.clone());
        }
        if h.dram.energy.is_none() {
            missing.push(format!("{}.energy", h.dram.name));
        }
        if !missing.is_empty() {
            return Err(missing.join(", "));
        }
        let (pe, b, d) = (
            pe.unwrap(),
            buffer.unwrap(),
            h.dram.energy.as_ref().unwrap(),
        );
        Ok(EnergyTable {
            mac_pj: pe.mac_pj,
            levels: [
                (
                    pe.registers.read_pj_per_byte,
                    pe.registers.write_pj_per_byte,
                ),
                (b.read_pj_per_byte, b.write_pj_per_byte),
                (d.read_pj_per_byte, d.write_pj_per_byte),
            ],
        })
    }

    /// The energy of one schedule straight from the loop nest, pJ: the same sum as
    /// [`EnergyTable::total_pj`] of [`level_counts`], in floating point and without
    /// building the counts. `None` on overflow.
    #[allow(clippy::too_many_arguments)]
    pub fn schedule_pj(
        &self,
        g: &Gemm,
        rows: u64,
        cols: u64,
        dataflow: Dataflow,
        tile: Tile,
        order: LoopOrder,
        buffer_holds: [bool; 3],
    ) -> Option<f64> {
        let parts = NestParts::new(g, rows, cols, dataflow, tile);
        self.parts_pj(&GemmEnergy::new(self, g), &parts, order, buffer_holds)
    }

    /// [`EnergyTable::schedule_pj`] from precomputed parts: the MACs plus each operand's
    /// [`EnergyTable::state_pj`] in its [`NestParts::states`].
    #[inline]
    pub fn parts_pj(
        &self,
        ge: &GemmEnergy,
        parts: &NestParts,
        order: LoopOrder,
        buffer_holds: [bool; 3],
    ) -> Option<f64> {
        let states = NestParts::states(parts.dataflow, order, parts.pattern());
        let mut pj = ge.mac_pj;
        for (xi, x) in Operand::ALL.into_iter().enumerate() {
            pj += self.state_pj(ge, parts, x, states[xi], buffer_holds[xi]);
        }
        Some(pj * ge.bytes_per_element)
    }

    /// Operand `x`'s traffic energy at all three levels in `state` (see
    /// [`NestParts::states`]), in pJ per byte of element (the caller multiplies by bytes
    /// per element). With `a` the trips of x's loop inside the tile and `b` of its tile
    /// loop: state 0 keeps both in the registers (`s = a·b`), 1 the first in the registers
    /// and the second in the buffer (`s = a`, `i1 = b`), 2 the second in DRAM (`s = a`,
    /// `i2 = b`), 3 both in the buffer (`i1 = a·b`), 4 the first in the buffer and the
    /// second in DRAM (`i1 = a`, `i2 = b`).
    #[inline]
    pub fn state_pj(
        &self,
        ge: &GemmEnergy,
        parts: &NestParts,
        x: Operand,
        state: u8,
        held: bool,
    ) -> f64 {
        let [(rr, rw), (br, bw), (dr, dw)] = self.levels;
        let xi = x as usize;
        let (a, b) = parts.loops_of(x);
        let (s, i1, i2) = state_factors(state, a as f64, b as f64, 1.0);
        let (i1, i2) = if held { (i1, i2) } else { (1.0, i1 * i2) };
        let (i0, size) = (parts.i0[xi] as f64, ge.sizes[xi]);
        let up = i0 * i1 * i2;
        let h = if held { 1.0 } else { 0.0 };
        size * if x != Operand::C {
            up * (rr + rw) + h * (i1 * i2 * br + i2 * bw) + i2 * dr
        } else {
            let dram_reads = if ge.accumulate { i2 } else { i2 - 1.0 };
            (s * up + i1 * i2 - 1.0) * rw
                + (s * up - 1.0 + up) * rr
                + h * ((i1 * i2 + i2 - 1.0) * bw + (i1 * i2 - 1.0 + i2) * br)
                + i2 * dw
                + dram_reads * dr
        }
    }

    /// `MACs · mac_pj + Σ_levels accesses_pj`: the energy of one schedule, pJ.
    #[inline]
    pub fn total_pj(&self, macs: u64, c: &LevelCounts, bits: u64) -> f64 {
        let [(rr, rw), (br, bw), (dr, dw)] = self.levels;
        macs as f64 * self.mac_pj
            + accesses_pj(&c.registers, bits, rr, rw)
            + accesses_pj(&c.buffer, bits, br, bw)
            + accesses_pj(&c.dram, bits, dr, dw)
    }
}

/// Per-level traffic and energy of `g` under (`dataflow`, `tile`, `order`) on `h`.
pub fn gemm_levels(
    g: &Gemm,
    h: &Hierarchy<'_>,
    dataflow: Dataflow,
    tile: Tile,
    order: LoopOrder,
) -> Result<(Vec<LevelTraffic>, EnergyReport)> {
    let holds = h.buffer_holds();
    let c = level_counts(g, h.pe.rows, h.pe.cols, dataflow, tile, order, holds)
        .ok_or_else(|| CoreError::overflow("per-level traffic"))?;
    let bytes = |e: u64| g.dtype.bytes_for(e);
    let row = |name: &str, role, acc: &[Accesses; 3], keep: [bool; 3], e: Option<&AccessEnergy>| {
        let mut operands = Vec::with_capacity(3);
        let (mut rb, mut wb) = (0u64, 0u64);
        for (i, x) in Operand::ALL.into_iter().enumerate() {
            if !keep[i] {
                continue;
            }
            let a = acc[i];
            let r = bytes(
                a.reads()
                    .ok_or_else(|| CoreError::overflow("level reads"))?,
            )?;
            let w = bytes(
                a.writes()
                    .ok_or_else(|| CoreError::overflow("level writes"))?,
            )?;
            rb = rb
                .checked_add(r)
                .ok_or_else(|| CoreError::overflow("level bytes"))?;
            wb = wb
                .checked_add(w)
                .ok_or_else(|| CoreError::overflow("level bytes"))?;
            operands.push(OperandTraffic {
                operand: x,
                elements: a,
                read_bytes: r,
                write_bytes: w,
            });
        }
        Ok::<_, CoreError>(LevelTraffic {
            level: name.to_string(),
            role,
            operands,
            read_bytes: rb,
            write_bytes: wb,
            energy_pj: e
                .map(|e| accesses_pj(acc, g.dtype.bits(), e.read_pj_per_byte, e.write_pj_per_byte)),
        })
    };
    let reg_energy = h.pe.energy.as_ref().map(|p| &p.registers);
    let mut levels = vec![row(
        "registers",
        LevelRole::Registers,
        &c.registers,
        [true; 3],
        reg_energy,
    )?];
    let (bname, benergy) = match h.buffer {
        Some(l) => (l.name.as_str(), l.energy.as_ref()),
        None => ("buffer", None),
    };
    levels.push(row(bname, LevelRole::Buffer, &c.buffer, holds, benergy)?);
    levels.push(row(
        &h.dram.name,
        LevelRole::Dram,
        &c.dram,
        [true; 3],
        h.dram.energy.as_ref(),
    )?);
    let mut missing = Vec::new();
    let mac_pj = match &h.pe.energy {
        Some(p) if p.mac_dtype == g.dtype => Some(g.macs()? as f64 * p.mac_pj),
        Some(p) => {
            missing.push(format!(
                "mac (the array's MAC energy is for {}, the GEMM is {})",
                p.mac_dtype, g.dtype
            ));
            None
        }
        None => {
            missing.push("mac".into());
            None
        }
    };
    for l in &levels {
        if l.energy_pj.is_none() {
            missing.push(l.level.clone());
        }
    }
    let levels_pj = if levels.iter().all(|l| l.energy_pj.is_some()) {
        Some(levels.iter().filter_map(|l| l.energy_pj).sum())
    } else {
        None
    };
    let total_pj = mac_pj.zip(levels_pj).map(|(a, b)| a + b);
    let largest = total_pj.map(|_| {
        let mut best = ("mac".to_string(), mac_pj.unwrap_or(0.0));
        for l in &levels {
            let e = l.energy_pj.unwrap_or(0.0);
            if e > best.1 {
                best = (l.level.clone(), e);
            }
        }
        best.0
    });
    Ok((
        levels,
        EnergyReport {
            mac_pj,
            levels_pj,
            total_pj,
            largest,
            missing,
        },
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::schedule::tiled_traffic;
    use serde_json::Value;

    const ZIGZAG: &str = include_str!("../data/zigzag_levels.json");

    fn gemm(m: u64, n: u64, k: u64) -> Gemm {
        Gemm::new(m, n, k, DType::Int8).unwrap()
    }

    fn acc(v: &Value) -> Accesses {
        let f = |k: &str| v[k].as_u64().unwrap();
        Accesses {
            reads_to_lower: f("rd_out_to_low"),
            writes_from_higher: f("wr_in_by_high"),
            reads_to_higher: f("rd_out_to_high"),
            writes_from_lower: f("wr_in_by_low"),
        }
    }

    /// Every case of tools/zigzag_levels.py: the element counts ZigZag 3.9.1 gives for each
    /// operand at each of its levels equal ours; A's and B's energies equal ZigZag's too
    /// (its ports are one 8-bit element wide, so pJ per access = pJ per byte).
    #[test]
    fn matches_zigzag() {
        let doc: Value = serde_json::from_str(ZIGZAG).unwrap();
        let cases = doc["cases"].as_array().unwrap();
        assert!(cases.len() >= 30, "{} cases", cases.len());
        let mut dataflows = std::collections::BTreeSet::new();
        let e = &doc["energy_per_access_pj"];
        let cost = |lv: &str, i: usize| e[lv][i].as_f64().unwrap();
        for c in cases {
            let k = &c["case"];
            let u = |f: &str| k[f].as_u64().unwrap();
            let g = gemm(u("m"), u("n"), u("k"));
            let t = &k["tile"];
            let tile = Tile {
                tm: t[0].as_u64().unwrap(),
                tn: t[1].as_u64().unwrap(),
                tk: t[2].as_u64().unwrap(),
            };
            let df = Dataflow::parse(k["dataflow"].as_str().unwrap()).unwrap();
            dataflows.insert(df);
            let order = LoopOrder::parse(k["order"].as_str().unwrap()).unwrap();
            let held: Vec<&str> = k["buffer_holds"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            let holds = ["a", "b", "c"].map(|x| held.contains(&x));
            let ours = level_counts(&g, u("rows"), u("cols"), df, tile, order, holds).unwrap();
            for (xi, x) in ["A", "B", "C"].into_iter().enumerate() {
                let zz = c["zigzag"][x].as_array().unwrap();
                let mut mine = vec![("registers", ours.registers[xi], "reg")];
                if holds[xi] {
                    mine.push(("buffer", ours.buffer[xi], "buf"));
                } else {
                    assert_eq!(ours.buffer[xi], Accesses::default());
                }
                mine.push(("dram", ours.dram[xi], "dram"));
                assert_eq!(zz.len(), mine.len(), "{k}: {x} levels");
                for (lv, (name, m, ekey)) in zz.iter().zip(mine) {
                    assert_eq!(acc(&lv["elements"]), m, "{k}: {x} at {name}");
                    if x != "C" {
                        let ours_pj = m.reads().unwrap() as f64 * cost(ekey, 0)
                            + m.writes().unwrap() as f64 * cost(ekey, 1);
                        let theirs = lv["energy_pj"].as_f64().unwrap();
                        assert!(
                            (ours_pj - theirs).abs() <= 1e-9 * theirs.max(1.0),
                            "{k}: {x} energy at {name}: {ours_pj} vs {theirs}"
                        );
                    }
                }
            }
        }
        assert_eq!(dataflows.len(), 3);
    }

    #[test]
    fn issue_example_and_hand_counts() {
        // 64³ output-stationary on 32×32, tile 64³, c-resident. Loops inner→outer: K 64
        // (time), N-fold 2, M-fold 2. A: no stationarity, i0 = 32 (columns unroll N), i1 = 2
        // (the N fold): registers 4096·32·2 = 262144, buffer reads 4096·2 = 8192, DRAM 4096.
        // C: s = 64 (K), i0 = i1 = i2 = 1: registers take 4096·64 = 262144 writes and give
        // 4096·63 = 258048 reads back; 4096 go up to the buffer and 4096 to DRAM.
        let g = gemm(64, 64, 64);
        let t = Tile {
            tm: 64,
            tn: 64,
            tk: 64,
        };
        let os = Dataflow::OutputStationary;
        let c = level_counts(&g, 32, 32, os, t, LoopOrder::C_RESIDENT, [true; 3]).unwrap();
        assert_eq!(c.registers[0].reads_to_lower, 262_144);
        assert_eq!(c.buffer[0].reads_to_lower, 8192);
        assert_eq!(c.buffer[0].writes_from_higher, 4096);
        assert_eq!(c.dram[0].reads_to_lower, 4096);
        assert_eq!(c.registers[2].writes_from_lower, 262_144);
        assert_eq!(c.registers[2].reads_to_lower, 258_048);
        assert_eq!(c.registers[2].reads_to_higher, 4096);
        assert_eq!(c.buffer[2].writes_from_lower, 4096);
        assert_eq!(c.dram[2].writes_from_lower, 4096);
        // Weight-stationary, same GEMM and tile: M runs in time, so B stays in the
        // registers over 64 steps (s = 64): B reaches the registers 4096 times, once. C is
        // reduced down the 32 rows (i0 = 32) and K has 2 row folds (i1 = 2): C goes up
        // 4096·32·2 = 262144 times, the buffer takes 4096·2 = 8192 writes and gives 4096
        // partial sums back.
        let ws = Dataflow::WeightStationary;
        let c = level_counts(&g, 32, 32, ws, t, LoopOrder::C_RESIDENT, [true; 3]).unwrap();
        assert_eq!(c.registers[1].writes_from_higher, 4096);
        assert_eq!(c.registers[2].reads_to_higher, 262_144);
        assert_eq!(c.buffer[2].writes_from_lower, 8192);
        assert_eq!(c.buffer[2].reads_to_lower, 4096);
    }

    /// A chip whose every level has an energy: a 4×4 array, a 1 KiB buffer, DRAM.
    pub(crate) fn energy_hw() -> HardwareSpec {
        let e = |r: f64| AccessEnergy {
            read_pj_per_byte: r,
            write_pj_per_byte: r,
            source: "test".into(),
        };
        let text = r#"
name = "energy-toy"
[peak_ops_per_s]
fp32 = 3.2e10
[dram]
name = "dram"
bandwidth_bytes_per_s = 1e9
[[onchip]]
name = "sram"
capacity_bytes = 1024
[pe_array]
rows = 4
cols = 4
clock_hz = 1e9
"#;
        let mut hw = HardwareSpec::from_toml_str(text, "toy").unwrap();
        hw.dram.energy = Some(e(160.0));
        hw.onchip[0].energy = Some(e(12.5));
        hw.pe_array.as_mut().unwrap().energy = Some(crate::hardware::PeEnergy {
            mac_pj: 2.0,
            mac_dtype: DType::Fp32,
            registers: e(0.25),
            source: "test".into(),
        });
        hw
    }

    #[test]
    fn hand_checked_energy() {
        // 4×4×4 fp32 (4 B) on 4×4, one 4×4×4 tile, output-stationary: the nest is K (4).
        // A: i0 = 4 (columns unroll N): registers 16·4 = 64 reads and 64 writes, buffer 16
        // and 16, DRAM 16 reads; B the same. C: s = 4: registers take 64 writes from the
        // MACs, give 16·3 = 48 back and 16 up; the buffer takes 16 and gives 16 up; DRAM
        // takes 16. Registers 192 reads, 192 writes = 768 B each; buffer 48 and 48 elements
        // = 192 B each; DRAM 32 reads (128 B), 16 writes (64 B).
        // Energy: registers (768 + 768)·0.25 = 384; buffer 384·12.5 = 4800; DRAM
        // 192·160 = 30720; MACs 64·2 = 128. Total 36032 pJ, DRAM the largest part.
        let hw = energy_hw();
        let g = Gemm::new(4, 4, 4, DType::Fp32).unwrap();
        let pe = hw.pe_array.clone().unwrap();
        let h = Hierarchy::of(&hw, &pe, false).unwrap();
        let t = Tile {
            tm: 4,
            tn: 4,
            tk: 4,
        };
        let (lv, e) =
            gemm_levels(&g, &h, Dataflow::OutputStationary, t, LoopOrder::C_RESIDENT).unwrap();
        let rw: Vec<(u64, u64)> = lv.iter().map(|l| (l.read_bytes, l.write_bytes)).collect();
        assert_eq!(rw, vec![(768, 768), (192, 192), (128, 64)]);
        let pj: Vec<f64> = lv.iter().map(|l| l.energy_pj.unwrap()).collect();
        assert_eq!(pj, vec![384.0, 4800.0, 30720.0]);
        assert_eq!(e.mac_pj, Some(128.0));
        assert_eq!(e.total_pj, Some(36032.0));
        assert_eq!(e.largest.as_deref(), Some("dram"));
        assert!(e.missing.is_empty());
        // The same through the explorer's table.
        let table = EnergyTable::of(&h, &g).unwrap();
        let c = level_counts(
            &g,
            4,
            4,
            Dataflow::OutputStationary,
            t,
            LoopOrder::C_RESIDENT,
            [true; 3],
        )
        .unwrap();
        assert_eq!(table.total_pj(64, &c, 32), 36032.0);
        // An fp16 GEMM has no MAC energy on this chip: named, and no total.
        let g16 = Gemm::new(4, 4, 4, DType::Fp16).unwrap();
        let (_, e) = gemm_levels(
            &g16,
            &h,
            Dataflow::OutputStationary,
            t,
            LoopOrder::C_RESIDENT,
        )
        .unwrap();
        assert!(
            e.total_pj.is_none() && e.missing[0].contains("fp32"),
            "{e:?}"
        );
        assert!(EnergyTable::of(&h, &g16)
            .unwrap_err()
            .contains("MAC energy for fp16"));
    }

    /// The run rule as a walk over the loop nest (innermost first, one-trip loops dropped):
    /// the registers keep the leading loops X does not depend on, the buffer the rest of the
    /// tile's loops and the tile loops X does not depend on right above them, DRAM the rest.
    /// The reference `NestParts::split` (a table of five states) is held equal to.
    fn reference_split(p: &NestParts, order: LoopOrder, x: Operand) -> (u64, u64, u64) {
        let (_, _, td) = time_dim(p.dataflow);
        // (dimension, trips, inside the tile)
        let mut nest = vec![(td, p.tile[dim_index(td)], true)];
        for &d in order.dims().iter().rev() {
            if d != td {
                nest.push((d, p.folds[dim_index(d)], true));
            }
        }
        for &d in order.dims().iter().rev() {
            nest.push((d, p.trips[dim_index(d)], false));
        }
        nest.retain(|l| l.1 > 1);
        let mut i = 0;
        let (mut s, mut i1, mut i2) = (1, 1, 1);
        while i < nest.len() && !relevant(x, nest[i].0) {
            s *= nest[i].1;
            i += 1;
        }
        while i < nest.len() && nest[i].2 {
            if !relevant(x, nest[i].0) {
                i1 *= nest[i].1;
            }
            i += 1;
        }
        while i < nest.len() && !relevant(x, nest[i].0) {
            i1 *= nest[i].1;
            i += 1;
        }
        for l in &nest[i..] {
            if !relevant(x, l.0) {
                i2 *= l.1;
            }
        }
        (s, i1, i2)
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, rng_seed: proptest::test_runner::RngSeed::Fixed(5), ..ProptestConfig::default() })]

            /// DRAM's rows are the one-buffer reuse rule's traffic (crate::schedule), for
            /// every order and dataflow, divisible or not, with a batch and accumulation.
            #[test]
            fn dram_level_is_the_schedule_traffic(
                m in 1u64..300, n in 1u64..300, k in 1u64..300, batch in 1u64..4,
                tm in 1u64..80, tn in 1u64..80, tk in 1u64..80,
                rows in 1u64..40, cols in 1u64..40, oi in 0usize..6, di in 0usize..3,
                accumulate in any::<bool>(),
            ) {
                let g = Gemm { m, n, k, batch, dtype: DType::Int8, accumulate };
                let t = Tile { tm, tn, tk };
                let o = LoopOrder::ALL[oi];
                let c = level_counts(&g, rows, cols, Dataflow::ALL[di], t, o, [true; 3]).unwrap();
                // The state table splits every operand's loops as the walk over the nest does.
                let parts = NestParts::new(&g, rows, cols, Dataflow::ALL[di], t);
                for x in Operand::ALL {
                    prop_assert_eq!(parts.split(o, x).unwrap(), reference_split(&parts, o, x));
                }
                let tr = tiled_traffic(&g.operand_bytes().unwrap(), t.trips(&g), o, accumulate).unwrap();
                prop_assert_eq!(c.dram[0].reads_to_lower, tr.a_read);
                prop_assert_eq!(c.dram[1].reads_to_lower, tr.b_read);
                prop_assert_eq!(c.dram[2].writes_from_lower, tr.c_write);
                prop_assert_eq!(c.dram[2].reads_to_lower, tr.c_read);
                // What the buffer takes in from DRAM is what DRAM gives out.
                prop_assert_eq!(c.buffer[0].writes_from_higher, c.dram[0].reads_to_lower);
                prop_assert_eq!(c.buffer[2].reads_to_higher, c.dram[2].writes_from_lower);
                // The explorer's direct energy equals the energy of the counts.
                let table = EnergyTable { mac_pj: 1.5, levels: [(0.25, 0.3), (12.5, 13.0), (160.0, 170.0)] };
                for holds in [[true; 3], [true, true, false], [false, true, true]] {
                    let c = level_counts(&g, rows, cols, Dataflow::ALL[di], t, o, holds).unwrap();
                    let want = table.total_pj(m * n * k * batch, &c, 8);
                    let got = table.schedule_pj(&g, rows, cols, Dataflow::ALL[di], t, o, holds).unwrap();
                    prop_assert!((got - want).abs() <= 1e-9 * want, "{} vs {}", got, want);
                }
                // Every MAC writes a partial sum into a register.
                prop_assert!(c.registers[2].writes_from_lower >= m * n * k * batch);
            }
        }
    }
}
