//! The full GEMM analysis: op counts, compulsory bytes, roofline, PE mapping, SRAM fit and
//! every tile schedule, gathered into one serializable report. It is a hypothesis, never a
//! measurement: the report says `evidence = "model"` and lists what it leaves out.

use crate::error::{CoreError, Result};
use crate::gemm::{Gemm, OperandBytes};
use crate::hardware::{HardwareSpec, PeArray};
use crate::levels::{gemm_levels, EnergyReport, Hierarchy, LevelTraffic};
use crate::mapping::{map_gemm, Dataflow, PeMapping};
use crate::roofline::{roofline, Bound, Roofline};
use crate::schedule::{
    sram_fit_in, tiled_traffic, BufferLayout, DramTraffic, LoopOrder, SramFit, Tile,
};
use serde::{Deserialize, Serialize};

/// The SRAM-fit `capacity_source` when the caller gave the capacity (`sram_bytes`) rather
/// than the hardware spec's tile buffer.
pub const GIVEN_SRAM_SOURCE: &str = "the given sram_bytes";
/// Version of every JSON document the Core emits; bumped on any breaking change.
pub const SCHEMA_VERSION: u32 = 1;

/// What every model result leaves out.
pub const LIMITATIONS: &[&str] = &[
    "analytical model, not a measurement: no kernel-launch, framework or driver overhead",
    "no cache behaviour beyond the stated tile-reuse rule (no hardware-managed reuse, prefetch or eviction)",
    "no instruction issue, scheduling, synchronization or pipeline-latency effects",
    "no contention between concurrent kernels or for shared bandwidth",
    "peak rates are published dense ceilings; clocks that throttle under power or heat are not modelled",
    "compute and memory either fully serialize or fully overlap; partial overlap is not modelled",
];

/// What the per-level traffic ([`crate::levels`]) adds to [`LIMITATIONS`].
pub const LEVEL_LIMITATIONS: &[&str] = &[
    "per-level traffic: one word per operand per PE in registers, one tile per operand in the buffer; edge tiles and folds are counted as full ones (exact when the tile divides the problem and the array the tile)",
    "per-level energy: sourced pJ per byte times bytes moved; no leakage, no interconnect between buffer and PEs (a broadcast costs one read), no word-width or bank effects",
];

/// Options for [`analyze_gemm`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GemmOptions {
    /// PE array to use instead of the hardware's own.
    pub pe: Option<PeArray>,
    /// SRAM capacity in bytes to use instead of the hardware's tile buffer.
    pub sram_bytes: Option<u64>,
    /// Tile for the schedules; without one, no schedules are computed.
    pub tile: Option<Tile>,
    /// Dataflow of the primary PE mapping (default output-stationary).
    pub dataflow: Option<Dataflow>,
    /// Add the systolic fill/drain term `rows + cols − 2` per fold.
    pub fill_drain: bool,
}

/// Compute, memory and their serialized / overlapped combinations.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// PE-array cycles / clock when an array is known, else FLOPs / peak; seconds.
    pub compute_time_s: f64,
    /// DRAM bytes / DRAM bandwidth, seconds.
    pub memory_time_s: f64,
    /// `compute + memory`: no overlap, seconds.
    pub serialized_time_s: f64,
    /// `max(compute, memory)`: perfect overlap, seconds.
    pub overlapped_time_s: f64,
    /// Which side binds the overlapped time.
    pub bound: Bound,
}

impl Timing {
    /// Combine a compute time and a memory time.
    pub fn new(compute_time_s: f64, memory_time_s: f64) -> Self {
        Timing {
            compute_time_s,
            memory_time_s,
            serialized_time_s: compute_time_s + memory_time_s,
            overlapped_time_s: compute_time_s.max(memory_time_s),
            bound: Bound::classify(compute_time_s, memory_time_s),
        }
    }
}

/// One tile schedule's traffic and time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduleResult {
    /// `c-resident`, `a-resident`, `b-resident`, or the loop letters.
    pub name: String,
    /// Tile loops, outermost first.
    pub loops: [String; 3],
    /// DRAM traffic per operand and total, bytes.
    pub dram_bytes: DramTraffic,
    /// `total / compulsory bytes` (≥ 1).
    pub amplification: f64,
    /// `FLOPs / total`, FLOP per byte.
    pub effective_arithmetic_intensity: f64,
    /// Compute, memory, serialized and overlapped time under this schedule.
    pub timing: Timing,
    /// Traffic at the PE registers, the tile buffer and DRAM under the primary dataflow
    /// ([`crate::levels`]), when a PE array and a tile buffer are known.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub levels: Vec<LevelTraffic>,
    /// MAC and per-level energy, with what is unsourced, when `levels` is present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy: Option<EnergyReport>,
}

/// The GEMM analysis report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmAnalysis {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `model`.
    pub evidence: String,
    /// Always `gemm`.
    pub kind: String,
    /// The workload.
    pub workload: Gemm,
    /// Hardware name.
    pub hardware: String,
    /// `batch · M · N · K`.
    pub macs: u64,
    /// `2 · MACs` (+ `batch·M·N` when accumulating).
    pub flops: u64,
    /// Operand sizes, bytes.
    pub operand_bytes: OperandBytes,
    /// Each operand moved once, bytes.
    pub compulsory_bytes: u64,
    /// `flops / compulsory_bytes`.
    pub arithmetic_intensity: f64,
    /// Roofline at the workload's dtype over the compulsory bytes.
    pub roofline: Roofline,
    /// Primary mapping (chosen dataflow), when a PE array is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pe_mapping: Option<PeMapping>,
    /// All three dataflows, when a PE array is known.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pe_mappings: Vec<PeMapping>,
    /// SRAM fit, when a capacity is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sram_fit: Option<SramFit>,
    /// Compute vs compulsory-memory time (no tiling).
    pub timing: Timing,
    /// Every loop order, named schedules first, when a tile is given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<ScheduleResult>,
    /// What the model leaves out.
    pub limitations: Vec<String>,
}

/// Compute time of `g` on `hw`: PE-array cycles / clock when an array is known (the chip's
/// own array runs at its dtype's rate, see [`HardwareSpec::pe_array_for`]), else
/// `FLOPs / peak(dtype)`. Returns the time and the mapping used.
pub fn compute_time_s(
    g: &Gemm,
    hw: &HardwareSpec,
    pe: Option<&PeArray>,
    dataflow: Dataflow,
    fill_drain: bool,
) -> Result<(f64, Option<PeMapping>)> {
    let own = hw.pe_array_for(g.dtype);
    match pe.or(own.as_ref()) {
        Some(p) => {
            let m = map_gemm(g, p, dataflow, fill_drain)?;
            Ok((m.compute_time_s, Some(m)))
        }
        None => Ok((g.flops()? as f64 / hw.peak_for(g.dtype)?, None)),
    }
}

/// Analyze one GEMM on one chip.
pub fn analyze_gemm(g: &Gemm, hw: &HardwareSpec, opts: &GemmOptions) -> Result<GemmAnalysis> {
    g.validate()?;
    if let Some(p) = &opts.pe {
        if p.rows == 0
            || p.cols == 0
            || p.macs_per_pe_per_cycle == 0
            || p.arrays == 0
            || !(p.clock_hz.is_finite() && p.clock_hz > 0.0)
        {
            return Err(CoreError::invalid(
                "pe",
                format!("{}x{}", p.rows, p.cols),
                "PE array dimensions and clock must be positive",
            ));
        }
    }
    if opts.sram_bytes == Some(0) {
        return Err(CoreError::invalid("sram_bytes", 0, "must be at least 1"));
    }
    let macs = g.macs()?;
    let flops = g.flops()?;
    let ob = g.operand_bytes()?;
    let compulsory = g.compulsory_bytes()?;
    let rl = roofline(hw, g.dtype, flops as f64, compulsory as f64, &[])?;
    let dataflow = opts.dataflow.unwrap_or(Dataflow::OutputStationary);
    let (compute_s, pe_mapping) =
        compute_time_s(g, hw, opts.pe.as_ref(), dataflow, opts.fill_drain)?;
    let own = hw.pe_array_for(g.dtype);
    let pe_mappings = match opts.pe.as_ref().or(own.as_ref()) {
        Some(p) => Dataflow::ALL
            .iter()
            .map(|d| map_gemm(g, p, *d, opts.fill_drain))
            .collect::<Result<Vec<_>>>()?,
        None => vec![],
    };
    let dram_bw = hw.dram.bandwidth_bytes_per_s.unwrap_or(f64::NAN);
    let capacity = match opts.sram_bytes {
        Some(b) => Some((b, GIVEN_SRAM_SOURCE.to_string())),
        None => hw.tile_buffer().and_then(|l| {
            l.capacity_bytes
                .map(|c| (c, format!("{} ({})", l.name, hw.name)))
        }),
    };
    // A given capacity replaces the tile buffer's capacity only: which operands it holds and
    // whether the capacity is per operand stay the chip's.
    let layout = hw
        .tile_buffer()
        .map_or(BufferLayout::default(), BufferLayout::of);
    let sram = match &capacity {
        Some((c, src)) => Some(sram_fit_in(g, opts.tile, *c, src, layout)?),
        None => None,
    };
    let mut schedules = Vec::new();
    let level_pe = opts.pe.clone().or(own);
    let hierarchy = level_pe
        .as_ref()
        .and_then(|p| Hierarchy::of(hw, p, opts.sram_bytes.is_some()));
    if let Some(t) = opts.tile {
        let trips = t.trips(g);
        for order in LoopOrder::ALL {
            let tr = tiled_traffic(&ob, trips, order, g.accumulate)
                .ok_or_else(|| CoreError::overflow("tiled DRAM traffic"))?;
            let (levels, energy) = match &hierarchy {
                Some(h) => {
                    let (l, e) = gemm_levels(g, h, dataflow, t, order)?;
                    (l, Some(e))
                }
                None => (vec![], None),
            };
            schedules.push(ScheduleResult {
                name: order.name(),
                loops: order.loops().map(String::from),
                dram_bytes: tr,
                amplification: tr.total as f64 / compulsory as f64,
                effective_arithmetic_intensity: flops as f64 / tr.total as f64,
                timing: Timing::new(compute_s, tr.total as f64 / dram_bw),
                levels,
                energy,
            });
        }
    }
    let mut limitations: Vec<String> = LIMITATIONS.iter().map(|s| s.to_string()).collect();
    if opts.tile.is_some() {
        match (&hierarchy, &level_pe) {
            (Some(_), _) => limitations.extend(LEVEL_LIMITATIONS.iter().map(|s| s.to_string())),
            (None, None) => limitations.push(
                "per-level traffic and energy omitted: the chip has no PE array (give one, e.g. --pe 32x32)".into(),
            ),
            (None, Some(_)) => limitations.push(
                "per-level traffic and energy omitted: the chip has no on-chip level to hold the tiles (give --sram-bytes)".into(),
            ),
        }
    }
    Ok(GemmAnalysis {
        schema_version: SCHEMA_VERSION,
        evidence: "model".into(),
        kind: "gemm".into(),
        workload: g.clone(),
        hardware: hw.name.clone(),
        macs,
        flops,
        operand_bytes: ob,
        compulsory_bytes: compulsory,
        arithmetic_intensity: flops as f64 / compulsory as f64,
        roofline: rl,
        pe_mapping,
        pe_mappings,
        sram_fit: sram,
        timing: Timing::new(compute_s, compulsory as f64 / dram_bw),
        schedules,
        limitations,
    })
}
