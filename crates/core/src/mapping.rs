//! Mapping a GEMM onto a PE array. Two GEMM dimensions are laid out spatially (one on the
//! rows, one on the columns) and the third runs in time:
//!
//! | dataflow            | rows | cols | time |
//! |---------------------|------|------|------|
//! | output-stationary   | M    | N    | K    |
//! | weight-stationary   | K    | N    | M    |
//! | input-stationary    | K    | M    | N    |
//!
//! `folds = batch · ceil(R_dim / rows) · ceil(C_dim / cols)`, `waves = ceil(folds / arrays)`,
//! `cycles = waves · (ceil(T_dim / macs_per_pe_per_cycle) + fill_drain)`, where the optional
//! systolic fill/drain term is `rows + cols − 2` cycles per fold (the skew of the wavefront).
//! Spatial utilization is `R_dim · C_dim · batch / (folds · rows · cols)`. Omitted: operand
//! delivery stalls (the array is assumed fed), the preload of the stationary operand beyond
//! the fill/drain term (weights for weight-stationary, inputs for input-stationary), and
//! accumulator precision.

use crate::error::{CoreError, Result};
use crate::gemm::Gemm;
use crate::hardware::PeArray;
use serde::{Deserialize, Serialize};

/// How the GEMM's dimensions are laid onto the array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dataflow {
    /// M on rows, N on columns, K in time (each PE owns one C element).
    OutputStationary,
    /// K on rows, N on columns, M in time (each PE holds one B element).
    WeightStationary,
    /// K on rows, M on columns, N in time (each PE holds one A element).
    InputStationary,
}

impl Dataflow {
    /// All three, output-stationary first.
    pub const ALL: [Dataflow; 3] = [
        Dataflow::OutputStationary,
        Dataflow::WeightStationary,
        Dataflow::InputStationary,
    ];

    /// Kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            Dataflow::OutputStationary => "output-stationary",
            Dataflow::WeightStationary => "weight-stationary",
            Dataflow::InputStationary => "input-stationary",
        }
    }

    /// Parse a name (`os`, `ws`, `is` accepted).
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "output-stationary" | "os" => Ok(Dataflow::OutputStationary),
            "weight-stationary" | "ws" => Ok(Dataflow::WeightStationary),
            "input-stationary" | "is" => Ok(Dataflow::InputStationary),
            _ => Err(CoreError::Unknown {
                kind: "dataflow".into(),
                name: s.into(),
                valid: Dataflow::ALL.map(|d| d.name()).join(", "),
            }),
        }
    }

    /// `(rows_dim, cols_dim, time_dim)` as dimension letters.
    pub fn dims(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Dataflow::OutputStationary => ("M", "N", "K"),
            Dataflow::WeightStationary => ("K", "N", "M"),
            Dataflow::InputStationary => ("K", "M", "N"),
        }
    }

    /// `(rows extent, cols extent, time extent)` for a GEMM of `m × n × k`.
    #[inline]
    pub fn extents(self, m: u64, n: u64, k: u64) -> (u64, u64, u64) {
        match self {
            Dataflow::OutputStationary => (m, n, k),
            Dataflow::WeightStationary => (k, n, m),
            Dataflow::InputStationary => (k, m, n),
        }
    }
}

/// Cycle counts of one mapping; `None` from [`map_cycles`] on 64-bit overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapCycles {
    /// Array-sized pieces of work.
    pub folds: u64,
    /// Rounds of folds over the arrays: `ceil(folds / arrays)`.
    pub waves: u64,
    /// Cycles one fold takes, fill/drain included.
    pub cycles_per_fold: u64,
    /// `waves · cycles_per_fold`.
    pub compute_cycles: u64,
}

/// Allocation-free cycle count used by both the report and the DSE inner loop.
#[inline]
pub fn map_cycles(
    m: u64,
    n: u64,
    k: u64,
    batch: u64,
    pe: &PeArray,
    dataflow: Dataflow,
    fill_drain: bool,
) -> Option<MapCycles> {
    let (r, c, t) = dataflow.extents(m, n, k);
    let folds = batch
        .checked_mul(r.div_ceil(pe.rows))?
        .checked_mul(c.div_ceil(pe.cols))?;
    let waves = folds.div_ceil(pe.arrays);
    let extra = if fill_drain { pe.rows + pe.cols - 2 } else { 0 };
    let cycles_per_fold = t.div_ceil(pe.macs_per_pe_per_cycle).checked_add(extra)?;
    let compute_cycles = waves.checked_mul(cycles_per_fold)?;
    Some(MapCycles {
        folds,
        waves,
        cycles_per_fold,
        compute_cycles,
    })
}

/// A GEMM laid onto a PE array.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeMapping {
    /// Which dataflow.
    pub dataflow: Dataflow,
    /// GEMM dimension on the PE rows.
    pub rows_dim: String,
    /// GEMM dimension on the PE columns.
    pub cols_dim: String,
    /// GEMM dimension in time.
    pub time_dim: String,
    /// PE rows × cols × arrays used.
    pub pe_rows: u64,
    /// PE columns.
    pub pe_cols: u64,
    /// Identical arrays.
    pub arrays: u64,
    /// `batch · ceil(R/rows) · ceil(C/cols)`.
    pub folds: u64,
    /// `ceil(folds / arrays)`.
    pub waves: u64,
    /// `R · C · batch / (folds · rows · cols)`, in (0, 1].
    pub spatial_utilization: f64,
    /// Fill/drain cycles per fold (0 unless enabled).
    pub fill_drain_cycles_per_fold: u64,
    /// `waves · (ceil(T / macs_per_pe_per_cycle) + fill_drain)`.
    pub compute_cycles: u64,
    /// `MACs / (compute_cycles · rows · cols · arrays · macs_per_pe_per_cycle)`, in (0, 1].
    pub utilization: f64,
    /// `compute_cycles / clock_hz`, seconds.
    pub compute_time_s: f64,
}

/// Map `g` onto `pe` with `dataflow`; `fill_drain` adds `rows + cols − 2` cycles per fold.
pub fn map_gemm(g: &Gemm, pe: &PeArray, dataflow: Dataflow, fill_drain: bool) -> Result<PeMapping> {
    let mc = map_cycles(g.m, g.n, g.k, g.batch, pe, dataflow, fill_drain)
        .ok_or_else(|| CoreError::overflow("PE-array cycle count"))?;
    let (r, c, _) = dataflow.extents(g.m, g.n, g.k);
    let (rd, cd, td) = dataflow.dims();
    let spatial = (r as f64 * c as f64 * g.batch as f64)
        / (mc.folds as f64 * pe.rows as f64 * pe.cols as f64);
    let capacity = mc.compute_cycles as f64
        * pe.rows as f64
        * pe.cols as f64
        * pe.arrays as f64
        * pe.macs_per_pe_per_cycle as f64;
    Ok(PeMapping {
        dataflow,
        rows_dim: rd.into(),
        cols_dim: cd.into(),
        time_dim: td.into(),
        pe_rows: pe.rows,
        pe_cols: pe.cols,
        arrays: pe.arrays,
        folds: mc.folds,
        waves: mc.waves,
        spatial_utilization: spatial,
        fill_drain_cycles_per_fold: if fill_drain { pe.rows + pe.cols - 2 } else { 0 },
        compute_cycles: mc.compute_cycles,
        utilization: g.macs()? as f64 / capacity,
        compute_time_s: mc.compute_cycles as f64 / pe.clock_hz,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    fn pe(r: u64, c: u64) -> PeArray {
        PeArray {
            rows: r,
            cols: c,
            macs_per_pe_per_cycle: 1,
            clock_hz: 1e9,
            arrays: 1,
            energy: None,
        }
    }

    #[test]
    fn reference_waves() {
        // 17×17×8 on 16×16: ceil(17/16)·ceil(17/16) = 2·2 = 4 waves; 4·8 = 32 cycles.
        let g = Gemm::new(17, 17, 8, DType::Fp16).unwrap();
        let m = map_gemm(&g, &pe(16, 16), Dataflow::OutputStationary, false).unwrap();
        assert_eq!(m.waves, 4);
        assert_eq!(m.compute_cycles, 32);
        // utilization 17·17 / (4·256) = 289/1024.
        assert!((m.spatial_utilization - 289.0 / 1024.0).abs() < 1e-15);
        assert!((m.utilization - 289.0 / 1024.0).abs() < 1e-15);
    }

    #[test]
    fn other_dataflows_and_fill_drain() {
        // WS: K=8 on rows (1 fold of 16), N=17 on cols (2 folds) -> 2 folds, M=17 steps each.
        let g = Gemm::new(17, 17, 8, DType::Fp16).unwrap();
        let m = map_gemm(&g, &pe(16, 16), Dataflow::WeightStationary, false).unwrap();
        assert_eq!((m.folds, m.compute_cycles), (2, 34));
        // IS with fill/drain: folds = ceil(8/16)·ceil(17/16) = 2; per fold 17 + 30 = 47.
        let m = map_gemm(&g, &pe(16, 16), Dataflow::InputStationary, true).unwrap();
        assert_eq!((m.folds, m.compute_cycles), (2, 94));
    }

    #[test]
    fn multiple_arrays_share_folds() {
        // 4 folds over 3 arrays -> 2 waves.
        let g = Gemm::new(17, 17, 8, DType::Fp16).unwrap();
        let mut p = pe(16, 16);
        p.arrays = 3;
        let m = map_gemm(&g, &p, Dataflow::OutputStationary, false).unwrap();
        assert_eq!((m.folds, m.waves), (4, 2));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, rng_seed: proptest::test_runner::RngSeed::Fixed(11), ..ProptestConfig::default() })]

            #[test]
            fn utilization_in_unit_interval(
                m in 1u64..2000, n in 1u64..2000, k in 1u64..2000, batch in 1u64..5,
                rows in 1u64..130, cols in 1u64..130, mpc in 1u64..5, arrays in 1u64..5,
                di in 0usize..3, fd in any::<bool>(),
            ) {
                let g = Gemm { m, n, k, batch, dtype: DType::Bf16, accumulate: false };
                let p = PeArray { rows, cols, macs_per_pe_per_cycle: mpc, clock_hz: 1e9, arrays, energy: None, };
                let mp = map_gemm(&g, &p, Dataflow::ALL[di], fd).unwrap();
                prop_assert!(mp.spatial_utilization > 0.0 && mp.spatial_utilization <= 1.0 + 1e-12);
                prop_assert!(mp.utilization > 0.0 && mp.utilization <= 1.0 + 1e-12);
                // Never faster than the array's peak: cycles ≥ MACs / (PEs · mpc).
                let pes = (rows * cols * arrays * mpc) as f64;
                prop_assert!(mp.compute_cycles as f64 >= (m * n * k * batch) as f64 / pes - 1e-9);
            }
        }
    }
}
