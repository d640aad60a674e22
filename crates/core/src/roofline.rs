//! The roofline: attainable rate `min(peak, AI · bandwidth)` for each memory level that has a
//! published bandwidth, and the time lower bound `max(FLOPs / peak, bytes / bandwidth)`.
//! Each level is charged the same bytes (the traffic must cross every level at least once),
//! so on-chip roofs only bind when the caller passes more bytes for them. Omitted: latency,
//! launch overhead, partial overlap, and any rate below the published peak (clock throttling,
//! issue limits, bank conflicts).

use crate::dtype::DType;
use crate::error::{CoreError, Result};
use crate::hardware::HardwareSpec;
use serde::{Deserialize, Serialize};

/// Which roof binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// Memory time exceeds compute time.
    Memory,
    /// Compute time exceeds memory time.
    Compute,
    /// The two agree within 1e-9 relative.
    Balanced,
}

impl Bound {
    /// Classify from the two times: balanced when `|tc − tm| ≤ 1e-9 · max(tc, tm)`.
    pub fn classify(compute_s: f64, memory_s: f64) -> Bound {
        let scale = compute_s.max(memory_s);
        if (compute_s - memory_s).abs() <= 1e-9 * scale {
            Bound::Balanced
        } else if memory_s > compute_s {
            Bound::Memory
        } else {
            Bound::Compute
        }
    }

    /// Lower-case label.
    pub fn label(self) -> &'static str {
        match self {
            Bound::Memory => "memory",
            Bound::Compute => "compute",
            Bound::Balanced => "balanced",
        }
    }
}

/// One bandwidth roof.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoofLevel {
    /// Memory level name.
    pub level: String,
    /// Bytes charged to this level.
    pub bytes: f64,
    /// Level bandwidth, bytes per second.
    pub bandwidth_bytes_per_s: f64,
    /// `bytes / bandwidth`, seconds.
    pub time_s: f64,
    /// Ridge point `peak / bandwidth`, FLOP per byte.
    pub ridge_flops_per_byte: f64,
    /// `min(peak, AI_level · bandwidth)`, FLOP/s.
    pub attainable_flops_per_s: f64,
}

/// Roofline result for one (FLOPs, bytes) point on one chip and dtype.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Roofline {
    /// Dtype whose peak was used.
    pub dtype: DType,
    /// Dense peak for that dtype, FLOP/s.
    pub peak_flops_per_s: f64,
    /// Work, FLOPs.
    pub flops: f64,
    /// DRAM bytes.
    pub dram_bytes: f64,
    /// `flops / dram_bytes`, FLOP per byte.
    pub arithmetic_intensity: f64,
    /// DRAM ridge point `peak / dram bandwidth`, FLOP per byte.
    pub ridge_flops_per_byte: f64,
    /// `min` over roofs of the attainable rate, FLOP/s.
    pub attainable_flops_per_s: f64,
    /// `flops / peak`, seconds.
    pub compute_time_s: f64,
    /// Max over levels of `bytes / bandwidth`, seconds.
    pub memory_time_s: f64,
    /// `max(compute_time_s, memory_time_s)`, seconds.
    pub time_lower_bound_s: f64,
    /// Which side binds.
    pub bound: Bound,
    /// `compute` or the name of the binding memory level.
    pub binding_roof: String,
    /// Every bandwidth roof, DRAM first.
    pub levels: Vec<RoofLevel>,
}

/// Roofline of `flops` over `dram_bytes` on `hw` at `dtype`'s peak. Every level with a
/// bandwidth is a roof, charged `dram_bytes` unless `level_bytes` gives it other bytes.
pub fn roofline(
    hw: &HardwareSpec,
    dtype: DType,
    flops: f64,
    dram_bytes: f64,
    level_bytes: &[(&str, f64)],
) -> Result<Roofline> {
    if !flops.is_finite() || flops <= 0.0 {
        return Err(CoreError::invalid(
            "flops",
            flops,
            "must be positive and finite",
        ));
    }
    if !dram_bytes.is_finite() || dram_bytes <= 0.0 {
        return Err(CoreError::invalid(
            "bytes",
            dram_bytes,
            "must be positive and finite",
        ));
    }
    let peak = hw.peak_for(dtype)?;
    let compute_time_s = flops / peak;
    let mut levels = Vec::new();
    for (name, bw) in hw.bandwidth_levels() {
        let bytes = level_bytes
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
            .unwrap_or(dram_bytes);
        let ai = flops / bytes;
        levels.push(RoofLevel {
            level: name.to_string(),
            bytes,
            bandwidth_bytes_per_s: bw,
            time_s: bytes / bw,
            ridge_flops_per_byte: peak / bw,
            attainable_flops_per_s: peak.min(ai * bw),
        });
    }
    // DRAM always has a bandwidth (validated), so levels[0] is DRAM.
    let dram = levels
        .first()
        .ok_or_else(|| CoreError::invalid("dram.bandwidth_bytes_per_s", "(missing)", "required"))?;
    let ridge = dram.ridge_flops_per_byte;
    let (binding_level, memory_time_s) = levels.iter().map(|l| (l.level.clone(), l.time_s)).fold(
        (String::new(), 0.0f64),
        |acc, x| if x.1 > acc.1 { x } else { acc },
    );
    let attainable = levels
        .iter()
        .map(|l| l.attainable_flops_per_s)
        .fold(peak, f64::min);
    let bound = Bound::classify(compute_time_s, memory_time_s);
    Ok(Roofline {
        dtype,
        peak_flops_per_s: peak,
        flops,
        dram_bytes,
        arithmetic_intensity: flops / dram_bytes,
        ridge_flops_per_byte: ridge,
        attainable_flops_per_s: attainable,
        compute_time_s,
        memory_time_s,
        time_lower_bound_s: compute_time_s.max(memory_time_s),
        bound,
        binding_roof: if bound == Bound::Compute {
            "compute".into()
        } else {
            binding_level
        },
        levels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hardware::MemoryLevel;
    use std::collections::BTreeMap;

    fn hw(peak: f64, bw: f64) -> HardwareSpec {
        let mut p = BTreeMap::new();
        p.insert(DType::Fp16, peak);
        HardwareSpec {
            schema_version: crate::hardware::HARDWARE_SCHEMA_VERSION,
            name: "t".into(),
            description: String::new(),
            peak_ops_per_s: p,
            dram: MemoryLevel {
                name: "dram".into(),
                capacity_bytes: None,
                bandwidth_bytes_per_s: Some(bw),
                instances: 1,
                energy: None,
                operands: vec![],
                capacity_per_operand: false,
            },
            onchip: vec![],
            pe_array: None,
            interconnect: None,
            sources: vec![],
            notes: vec![],
        }
    }

    #[test]
    fn memory_bound_point() {
        // peak 1e12, bw 1e11 -> ridge 10 FLOP/B. 5e7 FLOPs over 1e6 B: AI 50 > 10 -> compute.
        let r = roofline(&hw(1e12, 1e11), DType::Fp16, 5e7, 1e6, &[]).unwrap();
        assert_eq!(r.ridge_flops_per_byte, 10.0);
        assert_eq!(r.arithmetic_intensity, 50.0);
        assert_eq!(r.bound, Bound::Compute);
        assert_eq!(r.attainable_flops_per_s, 1e12);
        // compute 5e7/1e12 = 50 µs; memory 1e6/1e11 = 10 µs.
        assert!((r.time_lower_bound_s - 5e-5).abs() < 1e-18);
        // AI 2 < 10 -> memory-bound at 2 · 1e11 = 2e11 FLOP/s.
        let r = roofline(&hw(1e12, 1e11), DType::Fp16, 2e6, 1e6, &[]).unwrap();
        assert_eq!(r.bound, Bound::Memory);
        assert_eq!(r.attainable_flops_per_s, 2e11);
        assert_eq!(r.binding_roof, "dram");
    }

    #[test]
    fn balanced_at_ridge() {
        let r = roofline(&hw(1e12, 1e11), DType::Fp16, 1e7, 1e6, &[]).unwrap();
        assert_eq!(r.bound, Bound::Balanced);
    }

    #[test]
    fn onchip_level_is_a_roof() {
        let mut h = hw(1e12, 1e11);
        h.onchip.push(MemoryLevel {
            name: "l2".into(),
            capacity_bytes: Some(1 << 20),
            bandwidth_bytes_per_s: Some(5e10),
            instances: 1,
            energy: None,
            operands: vec![],
            capacity_per_operand: false,
        });
        let r = roofline(&h, DType::Fp16, 2e6, 1e6, &[]).unwrap();
        assert_eq!(r.levels.len(), 2);
        assert_eq!(r.binding_roof, "l2");
        assert_eq!(r.attainable_flops_per_s, 1e11);
    }

    #[test]
    fn rejects_bad_inputs() {
        assert!(roofline(&hw(1e12, 1e11), DType::Fp16, f64::NAN, 1e6, &[]).is_err());
        assert!(roofline(&hw(1e12, 1e11), DType::Fp16, 1.0, 0.0, &[]).is_err());
        assert!(roofline(&hw(1e12, 1e11), DType::Int8, 1.0, 1.0, &[]).is_err());
    }
}
