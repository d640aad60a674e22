//! Built-in presets: hardware (the reference model's abstract accelerators and sourced real
//! devices, see docs/hardware.md) and named workloads. An unknown name is an error listing
//! the valid names; there is no silent fallback.
//!
//! Each hardware preset is a hardware file, `hardware/NAME.toml` (the format `--hw-file`
//! reads), embedded in the binary: a comment above each figure names its source, and the
//! file's `sources` give each source's title and URL.

use crate::dtype::DType;
use crate::error::{CoreError, Result};
use crate::gemm::Gemm;
use crate::hardware::HardwareSpec;
use std::sync::OnceLock;

/// Every built-in hardware preset as `(name, TOML text)`, in the order `hw list` prints
/// them: the reference model's abstract accelerators, then the real devices (NVIDIA, Apple,
/// Tenstorrent, AMD, Google).
const HARDWARE_FILES: &[(&str, &str)] = &[
    ("small", include_str!("hardware/small.toml")),
    ("balanced", include_str!("hardware/balanced.toml")),
    ("compute_heavy", include_str!("hardware/compute_heavy.toml")),
    (
        "bandwidth_heavy",
        include_str!("hardware/bandwidth_heavy.toml"),
    ),
    (
        "nvidia_h100_sxm",
        include_str!("hardware/nvidia_h100_sxm.toml"),
    ),
    (
        "nvidia_h100_pcie",
        include_str!("hardware/nvidia_h100_pcie.toml"),
    ),
    ("nvidia_h200", include_str!("hardware/nvidia_h200.toml")),
    (
        "nvidia_a100_sxm",
        include_str!("hardware/nvidia_a100_sxm.toml"),
    ),
    ("nvidia_l4", include_str!("hardware/nvidia_l4.toml")),
    (
        "nvidia_rtx_4090",
        include_str!("hardware/nvidia_rtx_4090.toml"),
    ),
    (
        "rtx_3050_laptop",
        include_str!("hardware/rtx_3050_laptop.toml"),
    ),
    ("apple_m3_max", include_str!("hardware/apple_m3_max.toml")),
    (
        "tenstorrent_wormhole_n150",
        include_str!("hardware/tenstorrent_wormhole_n150.toml"),
    ),
    (
        "tenstorrent_blackhole_p150",
        include_str!("hardware/tenstorrent_blackhole_p150.toml"),
    ),
    ("amd_mi300x", include_str!("hardware/amd_mi300x.toml")),
    ("google_tpu_v4", include_str!("hardware/google_tpu_v4.toml")),
    (
        "google_tpu_v5e",
        include_str!("hardware/google_tpu_v5e.toml"),
    ),
    (
        "google_tpu_v5p",
        include_str!("hardware/google_tpu_v5p.toml"),
    ),
];

/// Every built-in hardware preset, abstract ones first. The embedded files are parsed once.
pub fn hardware_presets() -> Vec<HardwareSpec> {
    static PRESETS: OnceLock<Vec<HardwareSpec>> = OnceLock::new();
    PRESETS
        .get_or_init(|| {
            HARDWARE_FILES
                .iter()
                .map(|(name, text)| {
                    // Cannot fail in a build whose tests pass: the unit test
                    // `tests::every_embedded_file_parses_and_is_named_after_itself` parses
                    // every embedded file the same way, so a broken preset fails there, not
                    // in a user's run.
                    HardwareSpec::from_toml_str(text, &format!("presets/hardware/{name}.toml"))
                        .unwrap_or_else(|e| panic!("built-in hardware preset: {e}"))
                })
                .collect()
        })
        .clone()
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
mod tests;
