//! The design space a user supplies and the result types an exploration returns, with
//! their serde forms (TOML for the space, JSON for every type): checking the candidate
//! lists, clipping them to a GEMM and counting the candidates. Evaluating and ranking the
//! candidates is not here (`search`, `rank`), nor the prose of the results (`explain`).

use super::spellings::{serde_dataflows, serde_orders, serde_pe_shapes};
use super::DEFAULT_MAX_CANDIDATES;
use crate::analysis::Timing;
use crate::error::{CoreError, Result};
use crate::gemm::Gemm;
use crate::mapping::Dataflow;
use crate::roofline::Bound;
use crate::schedule::{LoopOrder, Tile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the ranking minimizes first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankBy {
    /// Overlapped time `max(compute, memory)`.
    #[default]
    Latency,
    /// Energy: MACs plus the traffic of every level ([`crate::levels`]); needs sourced
    /// energies for the PE array, the tile buffer and DRAM.
    Energy,
    /// Energy-delay product: energy (pJ) × overlapped time (s).
    Edp,
}

impl RankBy {
    /// `latency`, `energy` or `edp`.
    pub fn name(self) -> &'static str {
        match self {
            RankBy::Latency => "latency",
            RankBy::Energy => "energy",
            RankBy::Edp => "edp",
        }
    }

    /// Parse `latency`, `energy` or `edp` (case-insensitive).
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "latency" | "time" => Ok(RankBy::Latency),
            "energy" => Ok(RankBy::Energy),
            "edp" | "energy-delay" => Ok(RankBy::Edp),
            _ => Err(CoreError::Unknown {
                kind: "ranking".into(),
                name: s.into(),
                valid: "latency, energy, edp".into(),
            }),
        }
    }

    fn is_latency(&self) -> bool {
        *self == RankBy::Latency
    }
}

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
    /// What the ranking minimizes first (default: latency).
    #[serde(default, skip_serializing_if = "RankBy::is_latency")]
    pub rank: RankBy,
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
            rank: RankBy::Latency,
        }
    }
}

/// Sort and deduplicate a list.
pub(super) fn sorted_dedup<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort_unstable();
    v.dedup();
    v
}

/// A list of `t` clipped to `dim`, sorted and deduplicated.
fn clip_list(list: &[u64], dim: u64) -> Vec<u64> {
    sorted_dedup(list.iter().map(|&t| t.min(dim)).collect())
}

pub(super) fn order_index(o: LoopOrder) -> u8 {
    LoopOrder::ALL.iter().position(|x| *x == o).unwrap_or(0) as u8
}

pub(super) fn dataflow_index(d: Dataflow) -> u8 {
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
    /// Energy of MACs and each level, when the exploration ranks by energy or EDP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy: Option<crate::levels::EnergyReport>,
    /// Energy-delay product `total_pj · overlapped_time_s`, pJ·s, when ranking by EDP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edp_pj_s: Option<f64>,
}

/// Result of [`explore`](super::explore): the ranking of the supplied candidates for one GEMM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExploreResult {
    /// [`SCHEMA_VERSION`](crate::analysis::SCHEMA_VERSION).
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
    /// What the ranking minimizes first.
    pub rank: RankBy,
    /// The ranking rule for `rank`, in words ([`super::ranking_rule`]).
    pub ranking_rule: String,
    /// The Pareto rule for `rank`, in words ([`super::pareto_rule`]).
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
    /// The Pareto front ([`PARETO_RULE`](super::PARETO_RULE)).
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
    /// Best candidate's energy (MACs and every level), pJ, when ranking by energy or EDP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy_pj: Option<f64>,
    /// The exploration's `why` for this GEMM.
    pub why: String,
}

/// Result of [`explore_many`](super::explore_many): the best candidate of each named GEMM and
/// their sums.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MultiExploreResult {
    /// [`SCHEMA_VERSION`](crate::analysis::SCHEMA_VERSION).
    pub schema_version: u32,
    /// Always `model`.
    pub evidence: String,
    /// Always `dse-many`.
    pub kind: String,
    /// Hardware name.
    pub hardware: String,
    /// The space as supplied (each GEMM clips the tile lists to its own shape).
    pub space: DesignSpace,
    /// The ranking rule, in words ([`super::ranking_rule`]).
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
    /// Σ over rows of the best candidate's energy, pJ, when ranking by energy or EDP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_energy_pj: Option<f64>,
    /// Wall time of all explorations, seconds.
    pub elapsed_s: f64,
    /// `evaluated / elapsed_s`.
    pub evaluations_per_s: f64,
    /// What the model and the DSE leave out.
    pub limitations: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
