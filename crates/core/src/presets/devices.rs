//! Real devices (dense figures, sourced in docs/hardware.md).

use crate::hardware::HardwareSpec;

/// Every real-device preset.
pub fn devices() -> Vec<HardwareSpec> {
    vec![]
}
