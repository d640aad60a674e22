//! Built-in presets: hardware (the reference model's abstract accelerators and sourced real
//! devices, see docs/hardware.md) and named workloads. An unknown name is an error listing
//! the valid names; there is no silent fallback.

mod devices;

use crate::dtype::DType;
use crate::error::{CoreError, Result};
use crate::gemm::Gemm;
use crate::hardware::{HardwareSpec, MemoryLevel, PeArray};
use std::collections::BTreeMap;

/// An abstract accelerator of the reference model: one MAC per PE per cycle, the same peak
/// `2 · rows · cols · clock` for every dtype, one SRAM level, one DRAM level.
fn abstract_accel(name: &str, pe: u64, sram_kib: u64, bw_gb_s: f64) -> HardwareSpec {
    let clock_hz = 1e9;
    let peak = 2.0 * (pe * pe) as f64 * clock_hz;
    let peak_ops_per_s: BTreeMap<DType, f64> = DType::COMPUTE.iter().map(|d| (*d, peak)).collect();
    HardwareSpec {
        schema_version: crate::hardware::HARDWARE_SCHEMA_VERSION,
        name: name.into(),
        description: format!(
            "reference-model abstract accelerator: {pe}x{pe} PEs at 1 GHz, {sram_kib} KiB SRAM, {bw_gb_s} GB/s DRAM"
        ),
        peak_ops_per_s,
        dram: MemoryLevel {
            name: "dram".into(),
            capacity_bytes: None,
            bandwidth_bytes_per_s: Some(bw_gb_s * 1e9),
            instances: 1,
        },
        onchip: vec![MemoryLevel {
            name: "sram".into(),
            capacity_bytes: Some(sram_kib * 1024),
            bandwidth_bytes_per_s: None,
            instances: 1,
        }],
        pe_array: Some(PeArray {
            rows: pe,
            cols: pe,
            macs_per_pe_per_cycle: 1,
            clock_hz,
            arrays: 1,
        }),
        interconnect: None,
        sources: vec!["TensorForge reference model (shared/reference/reference-model.md)".into()],
        notes: vec!["abstract: peak = 2·rows·cols·clock for every dtype".into()],
    }
}

/// Every built-in hardware preset, abstract ones first.
pub fn hardware_presets() -> Vec<HardwareSpec> {
    let mut v = vec![
        abstract_accel("small", 16, 256, 50.0),
        abstract_accel("balanced", 32, 512, 100.0),
        abstract_accel("compute_heavy", 64, 512, 100.0),
        abstract_accel("bandwidth_heavy", 32, 512, 300.0),
    ];
    v.extend(devices::devices());
    v
}

/// Short names accepted for presets: `(alias, preset)`.
pub const HARDWARE_ALIASES: &[(&str, &str)] = &[
    ("tenstorrent_blackhole", "tenstorrent_blackhole_p150"),
    ("tenstorrent_wormhole", "tenstorrent_wormhole_n150"),
    ("h100", "nvidia_h100_sxm"),
    ("h200", "nvidia_h200"),
    ("a100", "nvidia_a100_sxm"),
    ("mi300x", "amd_mi300x"),
    ("tpu_v5e", "google_tpu_v5e"),
];

/// Names of every hardware preset.
pub fn hardware_names() -> Vec<String> {
    hardware_presets().into_iter().map(|h| h.name).collect()
}

/// Look up a hardware preset by name or alias.
pub fn hardware(name: &str) -> Result<HardwareSpec> {
    let key = name.trim().to_ascii_lowercase().replace('-', "_");
    let key = HARDWARE_ALIASES
        .iter()
        .find(|(a, _)| *a == key)
        .map(|(_, p)| p.to_string())
        .unwrap_or(key);
    hardware_presets()
        .into_iter()
        .find(|h| h.name == key)
        .ok_or_else(|| CoreError::Unknown {
            kind: "hardware preset".into(),
            name: name.into(),
            valid: hardware_names().join(", "),
        })
}

/// The reference model's GEMM presets, all fp16: `(name, M, N, K)`.
pub const GEMM_PRESETS: &[(&str, u64, u64, u64)] = &[
    ("gemm_tiny", 128, 128, 128),
    ("gemm_tall", 2048, 256, 512),
    ("gemm_wide", 256, 2048, 512),
    ("gemm_large_square", 1024, 1024, 1024),
];

/// A GEMM preset by name.
pub fn gemm(name: &str) -> Result<Gemm> {
    GEMM_PRESETS
        .iter()
        .find(|(n, ..)| *n == name)
        .map(|&(_, m, n, k)| Gemm::new(m, n, k, DType::Fp16))
        .unwrap_or_else(|| {
            Err(CoreError::Unknown {
                kind: "gemm preset".into(),
                name: name.into(),
                valid: GEMM_PRESETS
                    .iter()
                    .map(|p| p.0)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_validates_and_names_are_unique() {
        let all = hardware_presets();
        for h in &all {
            h.validate().unwrap_or_else(|e| panic!("{}: {e}", h.name));
        }
        let mut names: Vec<_> = all.iter().map(|h| h.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
    }

    #[test]
    fn abstract_peaks() {
        // balanced: 2·32·32·1e9 = 2.048e12 FLOP/s; 100 GB/s; 512 KiB.
        let b = hardware("balanced").unwrap();
        assert_eq!(b.peak_for(DType::Fp16).unwrap(), 2.048e12);
        assert_eq!(b.dram.bandwidth_bytes_per_s, Some(1e11));
        assert_eq!(b.tile_buffer().unwrap().capacity_bytes, Some(524288));
    }

    #[test]
    fn unknown_lists_valid_names() {
        let e = hardware("h900").unwrap_err().to_string();
        assert!(e.contains("h900") && e.contains("balanced"), "{e}");
        assert!(gemm("gemm_huge")
            .unwrap_err()
            .to_string()
            .contains("gemm_tiny"));
    }

    #[test]
    fn aliases_resolve() {
        for (alias, preset) in HARDWARE_ALIASES {
            assert_eq!(&hardware(alias).unwrap().name, preset);
        }
    }
}
