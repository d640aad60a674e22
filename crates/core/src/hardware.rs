//! Hardware descriptions: per-dtype dense peak throughput, a DRAM level, optional on-chip
//! levels, an optional processing-element (PE) array and an optional device-to-device
//! interconnect. A spec is a set of published ceilings, not a simulator: it leaves out clocks
//! that vary with power, caches' replacement behaviour, the interconnect's latency, topology
//! beyond one scale-up domain and contention, and anything the vendor does not publish.
//! Fields a source does not give are absent rather than guessed.

use crate::dtype::DType;
use crate::error::{CoreError, Result};
use crate::gemm::Operand;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One level of the memory hierarchy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryLevel {
    /// Level name, e.g. `dram`, `smem_per_sm`, `l2`.
    pub name: String,
    /// Capacity of one instance of the level, in bytes, when published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// Aggregate bandwidth of the level in bytes per second, when published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_bytes_per_s: Option<f64>,
    /// How many instances exist (e.g. one shared-memory block per SM); 1 for a shared level.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub instances: u64,
    /// Energy per byte read and written, with its source, when published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<AccessEnergy>,
    /// The operands the level holds (`a`, `b`, `c`); empty means all three. An operand a
    /// tile buffer does not hold moves between DRAM and the PE registers directly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operands: Vec<Operand>,
    /// `capacity_bytes` is per operand (a separate buffer for each operand it holds) rather
    /// than shared by all of them; the SRAM-fit check then compares each tile with it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capacity_per_operand: bool,
}

/// Energy of one level's accesses: `reads · read_pj_per_byte + writes · write_pj_per_byte`
/// (bytes). Per byte rather than per access, so that a figure published per 64-bit word
/// divides by 8; partial-word accesses and the level's word width are not modelled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessEnergy {
    /// Picojoules per byte read.
    pub read_pj_per_byte: f64,
    /// Picojoules per byte written.
    pub write_pj_per_byte: f64,
    /// Where the figures come from (paper or datasheet, process node).
    pub source: String,
}

/// Energy of a PE array's arithmetic and operand registers, with its source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeEnergy {
    /// Picojoules per multiply-accumulate at `mac_dtype`.
    pub mac_pj: f64,
    /// The dtype `mac_pj` is for; a GEMM of another dtype gets no MAC energy.
    pub mac_dtype: DType,
    /// The PE operand registers (one word per operand per PE).
    pub registers: AccessEnergy,
    /// Where the figures come from.
    pub source: String,
}

fn one() -> u64 {
    1
}
fn is_one(v: &u64) -> bool {
    *v == 1
}

/// A rectangular array of multiply-accumulate PEs (a systolic array or a tensor core).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeArray {
    /// PE rows.
    pub rows: u64,
    /// PE columns.
    pub cols: u64,
    /// MACs each PE completes per cycle.
    #[serde(default = "one")]
    pub macs_per_pe_per_cycle: u64,
    /// Array clock in Hz.
    pub clock_hz: f64,
    /// Number of identical arrays that work on independent folds in parallel.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub arrays: u64,
    /// MAC and register energies, when sourced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<PeEnergy>,
}

impl PeArray {
    /// A `rows` × `cols` array in place of `hw`'s: its clock (or `clock_hz`) and MACs per PE
    /// per cycle (1 when `hw` has no array), one array. Without `clock_hz`, a chip with no
    /// PE array is an error (its clock is unknown).
    pub fn resized(hw: &HardwareSpec, rows: u64, cols: u64, clock_hz: Option<f64>) -> Result<Self> {
        let clock = match (clock_hz, &hw.pe_array) {
            (Some(c), _) => c,
            (None, Some(p)) => p.clock_hz,
            (None, None) => {
                return Err(CoreError::invalid(
                    "pe",
                    format!("{rows}x{cols}"),
                    format!(
                        "hardware `{}` has no PE array, so its clock is unknown; give clock_hz",
                        hw.name
                    ),
                ))
            }
        };
        Ok(PeArray {
            rows,
            cols,
            macs_per_pe_per_cycle: hw.pe_array.as_ref().map_or(1, |p| p.macs_per_pe_per_cycle),
            clock_hz: clock,
            arrays: 1,
            energy: hw.pe_array.as_ref().and_then(|p| p.energy.clone()),
        })
    }

    /// Array-derived peak: `2 · rows · cols · macs_per_pe_per_cycle · arrays · clock_hz` FLOP/s.
    pub fn peak_flops_per_s(&self) -> f64 {
        2.0 * self.rows as f64
            * self.cols as f64
            * self.macs_per_pe_per_cycle as f64
            * self.arrays as f64
            * self.clock_hz
    }

    /// Total PE count: `rows · cols · arrays`.
    pub fn pe_count(&self) -> u64 {
        self.rows
            .saturating_mul(self.cols)
            .saturating_mul(self.arrays)
    }
}

/// The device-to-device fabric of one scale-up domain (NVLink through NVSwitch, Infinity
/// Fabric, ICI, PCIe), as the multi-device model uses it: a bandwidth roof for collectives.
///
/// Bandwidths are **unidirectional** (one direction, what one device can send while it also
/// receives as much), in bytes per second, decimal. Vendors usually print the bidirectional
/// (duplex) figure, twice this: NVLink 4's "900 GB/s" is 450e9 here.
///
/// The bandwidth a group of `p` devices can use per device is
/// `min(unidirectional_bytes_per_s, (p − 1) · peer_unidirectional_bytes_per_s)`: each device
/// reaches each other one over at most one peer path (exact for a full mesh such as MI300X's
/// seven Infinity Fabric links, an upper bound for a torus such as ICI, where far chips are
/// several hops away). Without a peer figure (a switched fabric) every pair gets the whole
/// bandwidth.
///
/// Latency (Hockney's α-β cost, in the form NCCL's tuner uses): a collective of `s` steps
/// takes `α₀ + s · α + bytes / β`, with `α₀` = [`Interconnect::collective_latency_s`] (the
/// fixed cost of one collective call) and `α` = [`Interconnect::step_latency_s`] (one message
/// hop between neighbours). Absent, the latency term is 0 and the report says it is omitted.
/// Topology beyond the rules above, contention and the slower network between domains are
/// not modelled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interconnect {
    /// Fabric name, e.g. `nvlink4`, `infinity_fabric`, `ici`, `pcie5`.
    pub name: String,
    /// Bytes per second one device sends over all its links together, one direction.
    pub unidirectional_bytes_per_s: f64,
    /// Bytes per second one device can send to any single peer, one direction, when that is
    /// less than the total (one direct link: an Infinity Fabric or ICI link); absent when a
    /// switch gives every pair the full bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_unidirectional_bytes_per_s: Option<f64>,
    /// Links per device, when published (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<u64>,
    /// Devices in one domain of this fabric as usually built (an 8-GPU HGX board, a 256-chip
    /// TPU v5e pod); a group larger than this crosses a slower network that is not modelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_devices: Option<u64>,
    /// Fixed time of one collective call (launch, synchronization), seconds: `α₀`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective_latency_s: Option<f64>,
    /// Time of one step of a collective (one message hop to a neighbour), seconds: `α`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_latency_s: Option<f64>,
    /// Where `collective_latency_s` and `step_latency_s` come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_source: Option<String>,
}

impl Interconnect {
    /// Latency of one collective of `steps` steps: `α₀ + steps · α` seconds (0 for a
    /// collective of no step; each term 0 when the fabric does not give it).
    ///
    /// ```
    /// use tensorforge_core::hardware::Interconnect;
    /// let nvl = Interconnect {
    ///     name: "nvlink4".into(),
    ///     unidirectional_bytes_per_s: 450e9,
    ///     peer_unidirectional_bytes_per_s: None,
    ///     links: Some(18),
    ///     domain_devices: Some(8),
    ///     collective_latency_s: Some(6.6e-6),
    ///     step_latency_s: Some(0.6e-6),
    ///     latency_source: None,
    /// };
    /// // A ring all-reduce over 2 devices: 2·(2 − 1) = 2 steps, 6.6 + 2·0.6 = 7.8 µs.
    /// assert!((nvl.latency_s(2) - 7.8e-6).abs() < 1e-15);
    /// assert_eq!(nvl.latency_s(0), 0.0);
    /// ```
    pub fn latency_s(&self, steps: u64) -> f64 {
        if steps == 0 {
            return 0.0;
        }
        self.collective_latency_s.unwrap_or(0.0) + steps as f64 * self.step_latency_s.unwrap_or(0.0)
    }

    /// Whether the fabric gives any latency (else collectives are bandwidth terms only).
    pub fn has_latency(&self) -> bool {
        self.collective_latency_s.is_some() || self.step_latency_s.is_some()
    }

    /// Bandwidth per device, one direction, when `group_devices` devices exchange data:
    /// `min(U, (p − 1) · peer)` (`U` without a peer figure), bytes per second. A group of one
    /// device sends nothing; it gets `U`.
    pub fn group_bytes_per_s(&self, group_devices: u64) -> f64 {
        let u = self.unidirectional_bytes_per_s;
        match self.peer_unidirectional_bytes_per_s {
            Some(peer) if group_devices >= 2 => u.min((group_devices - 1) as f64 * peer),
            _ => u,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.name.trim().is_empty() {
            return Err(CoreError::invalid(
                "interconnect.name",
                "\"\"",
                "must not be empty",
            ));
        }
        positive_finite(
            "interconnect.unidirectional_bytes_per_s",
            self.unidirectional_bytes_per_s,
        )?;
        if let Some(p) = self.peer_unidirectional_bytes_per_s {
            positive_finite("interconnect.peer_unidirectional_bytes_per_s", p)?;
            if p > self.unidirectional_bytes_per_s {
                return Err(CoreError::invalid(
                    "interconnect.peer_unidirectional_bytes_per_s",
                    p,
                    format!(
                        "must not exceed interconnect.unidirectional_bytes_per_s = {}",
                        self.unidirectional_bytes_per_s
                    ),
                ));
            }
        }
        if let Some(l) = self.links {
            positive_int("interconnect.links", l)?;
        }
        for (field, v) in [
            (
                "interconnect.collective_latency_s",
                self.collective_latency_s,
            ),
            ("interconnect.step_latency_s", self.step_latency_s),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(CoreError::invalid(
                        field,
                        v,
                        "must be a finite number of seconds, 0 or more",
                    ));
                }
                // Seconds, not microseconds: a latency of a second or more is a unit slip.
                if v >= 1.0 {
                    return Err(CoreError::invalid(
                        field,
                        v,
                        "is in seconds (a collective's latency is microseconds: 6.6e-6)",
                    ));
                }
            }
        }
        if let Some(d) = self.domain_devices {
            if d < 2 {
                return Err(CoreError::invalid(
                    "interconnect.domain_devices",
                    d,
                    "must be at least 2 (a fabric joins devices)",
                ));
            }
        }
        Ok(())
    }
}

/// Version of the hardware file format (and of `hw show --json` / `hw list --json`).
pub const HARDWARE_SCHEMA_VERSION: u32 = 1;

fn hardware_schema_version() -> u32 {
    HARDWARE_SCHEMA_VERSION
}

/// A chip as TensorForge sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareSpec {
    /// File format version ([`HARDWARE_SCHEMA_VERSION`]); optional in files, always written.
    #[serde(default = "hardware_schema_version")]
    pub schema_version: u32,
    /// Preset or file name.
    pub name: String,
    /// One-line description (what part, which configuration).
    #[serde(default)]
    pub description: String,
    /// Dense (never 2:4-sparse) peak throughput per dtype, in FLOP/s (OP/s for integers).
    pub peak_ops_per_s: BTreeMap<DType, f64>,
    /// Off-chip memory; its bandwidth is required.
    pub dram: MemoryLevel,
    /// On-chip levels, innermost first. The first level with a capacity is where tiles are
    /// staged for the SRAM-fit check (per instance), unless the caller overrides it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub onchip: Vec<MemoryLevel>,
    /// PE array, when the chip's matrix engine is described as one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pe_array: Option<PeArray>,
    /// Device-to-device fabric, when published (the multi-device model's interconnect roof).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interconnect: Option<Interconnect>,
    /// Where each figure comes from (full list in docs/hardware.md for presets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// Caveats: derived figures, omitted figures, configuration assumptions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

fn positive_finite(field: &str, v: f64) -> Result<()> {
    if !v.is_finite() || v <= 0.0 {
        return Err(CoreError::invalid(
            field,
            v,
            "must be a positive, finite number",
        ));
    }
    Ok(())
}

fn positive_int(field: &str, v: u64) -> Result<()> {
    if v == 0 {
        return Err(CoreError::invalid(field, v, "must be at least 1"));
    }
    Ok(())
}

impl AccessEnergy {
    fn validate(&self, prefix: &str) -> Result<()> {
        positive_finite(&format!("{prefix}.read_pj_per_byte"), self.read_pj_per_byte)?;
        positive_finite(
            &format!("{prefix}.write_pj_per_byte"),
            self.write_pj_per_byte,
        )?;
        if self.source.trim().is_empty() {
            return Err(CoreError::invalid(
                format!("{prefix}.source"),
                "\"\"",
                "name where the energy comes from (paper or datasheet, process node)",
            ));
        }
        Ok(())
    }
}

impl MemoryLevel {
    fn validate(&self, prefix: &str, need_bandwidth: bool) -> Result<()> {
        if let Some(e) = &self.energy {
            e.validate(&format!("{prefix}.energy"))?;
        }
        if self.name.trim().is_empty() {
            return Err(CoreError::invalid(
                format!("{prefix}.name"),
                "\"\"",
                "must not be empty",
            ));
        }
        if let Some(c) = self.capacity_bytes {
            positive_int(&format!("{prefix}.capacity_bytes"), c)?;
        }
        match self.bandwidth_bytes_per_s {
            Some(b) => positive_finite(&format!("{prefix}.bandwidth_bytes_per_s"), b)?,
            None if need_bandwidth => {
                return Err(CoreError::invalid(
                    format!("{prefix}.bandwidth_bytes_per_s"),
                    "(missing)",
                    "DRAM bandwidth is required",
                ))
            }
            None => {}
        }
        positive_int(&format!("{prefix}.instances"), self.instances)
    }

    /// Whether the level holds operand `x` (every operand when its list is empty).
    pub fn holds(&self, x: Operand) -> bool {
        self.operands.is_empty() || self.operands.contains(&x)
    }

    /// Total capacity over all instances, when the capacity is known.
    pub fn total_capacity_bytes(&self) -> Option<u64> {
        self.capacity_bytes
            .map(|c| c.saturating_mul(self.instances))
    }
}

impl HardwareSpec {
    /// Check that every number is positive and finite and that the spec is self-consistent:
    /// at least one peak; DRAM bandwidth present; on-chip levels no larger in total than DRAM;
    /// unique level names; a PE array's derived peak within 5 % of some stated peak; an
    /// interconnect's peer bandwidth no larger than its total and a domain of at least 2.
    pub fn validate(&self) -> Result<()> {
        if self.schema_version != HARDWARE_SCHEMA_VERSION {
            return Err(CoreError::invalid(
                "schema_version",
                self.schema_version,
                format!("this build reads version {HARDWARE_SCHEMA_VERSION}"),
            ));
        }
        if self.name.trim().is_empty() {
            return Err(CoreError::invalid("name", "\"\"", "must not be empty"));
        }
        if self.peak_ops_per_s.is_empty() {
            return Err(CoreError::invalid(
                "peak_ops_per_s",
                "{}",
                "give at least one dtype's dense peak, e.g. fp16 = 1.0e14",
            ));
        }
        for (d, v) in &self.peak_ops_per_s {
            positive_finite(&format!("peak_ops_per_s.{d}"), *v)?;
        }
        self.dram.validate("dram", true)?;
        let mut names = vec![self.dram.name.as_str()];
        for (i, l) in self.onchip.iter().enumerate() {
            let prefix = format!("onchip[{i}]");
            l.validate(&prefix, false)?;
            if names.contains(&l.name.as_str()) {
                return Err(CoreError::invalid(
                    format!("{prefix}.name"),
                    &l.name,
                    "duplicate memory level name",
                ));
            }
            names.push(&l.name);
            if let (Some(total), Some(dram)) = (l.total_capacity_bytes(), self.dram.capacity_bytes)
            {
                if total > dram {
                    return Err(CoreError::invalid(
                        format!("{prefix}.capacity_bytes"),
                        total,
                        format!("on-chip total exceeds DRAM capacity ({dram} bytes)"),
                    ));
                }
            }
        }
        if let Some(pe) = &self.pe_array {
            positive_int("pe_array.rows", pe.rows)?;
            positive_int("pe_array.cols", pe.cols)?;
            positive_int("pe_array.macs_per_pe_per_cycle", pe.macs_per_pe_per_cycle)?;
            positive_int("pe_array.arrays", pe.arrays)?;
            positive_finite("pe_array.clock_hz", pe.clock_hz)?;
            if let Some(e) = &pe.energy {
                positive_finite("pe_array.energy.mac_pj", e.mac_pj)?;
                e.registers.validate("pe_array.energy.registers")?;
                if e.source.trim().is_empty() {
                    return Err(CoreError::invalid(
                        "pe_array.energy.source",
                        "\"\"",
                        "name where the energy comes from (paper or datasheet, process node)",
                    ));
                }
            }
            let derived = pe.peak_flops_per_s();
            if !derived.is_finite() {
                return Err(CoreError::invalid(
                    "pe_array",
                    derived,
                    "derived peak is not finite",
                ));
            }
            let consistent = self
                .peak_ops_per_s
                .values()
                .any(|p| (derived - p).abs() <= 0.05 * p);
            if !consistent {
                return Err(CoreError::invalid(
                    "pe_array",
                    format!("{derived:.4e} FLOP/s"),
                    "2·rows·cols·macs_per_pe_per_cycle·arrays·clock_hz must be within 5 % of one of the stated peak_ops_per_s",
                ));
            }
        }
        if let Some(ic) = &self.interconnect {
            ic.validate()?;
        }
        Ok(())
    }

    /// Dense peak for `dtype`, or an error listing the dtypes the spec does give.
    pub fn peak_for(&self, dtype: DType) -> Result<f64> {
        self.peak_ops_per_s
            .get(&dtype)
            .copied()
            .ok_or_else(|| CoreError::MissingPeak {
                hardware: self.name.clone(),
                dtype: dtype.to_string(),
                available: self.dtypes().join(", "),
            })
    }

    /// The chip's PE array as it runs `dtype`: MACs per PE per cycle scaled by
    /// `round(peak(dtype) / array peak)` (at least 1), so an array whose int8 rate is twice its
    /// bf16 rate runs int8 at two MACs per PE per cycle. `None` when the chip has no array.
    pub fn pe_array_for(&self, dtype: DType) -> Option<PeArray> {
        let mut p = self.pe_array.clone()?;
        if let Some(peak) = self.peak_ops_per_s.get(&dtype) {
            let ratio = peak / p.peak_flops_per_s();
            let scaled = (p.macs_per_pe_per_cycle as f64 * ratio).round();
            if scaled.is_finite() && scaled >= 1.0 && scaled < u32::MAX as f64 {
                p.macs_per_pe_per_cycle = scaled as u64;
            }
        }
        Some(p)
    }

    /// Names of the dtypes the spec gives a peak for.
    pub fn dtypes(&self) -> Vec<&'static str> {
        self.peak_ops_per_s.keys().map(|d| d.name()).collect()
    }

    /// The level where tiles are staged: the first on-chip level with a capacity.
    pub fn tile_buffer(&self) -> Option<&MemoryLevel> {
        self.onchip.iter().find(|l| l.capacity_bytes.is_some())
    }

    /// Every level with a bandwidth, DRAM first: each is a roof in the roofline.
    pub fn bandwidth_levels(&self) -> impl Iterator<Item = (&str, f64)> {
        std::iter::once(&self.dram)
            .chain(self.onchip.iter())
            .filter_map(|l| l.bandwidth_bytes_per_s.map(|b| (l.name.as_str(), b)))
    }

    /// Parse the text of a hardware file named `path`: JSON when the name ends in `.json`
    /// (any case), else TOML. The caller reads the file; errors name `path`.
    pub fn from_file_text(text: &str, path: &str) -> Result<Self> {
        let json = std::path::Path::new(path)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        if json {
            Self::from_json_str(text, path)
        } else {
            Self::from_toml_str(text, path)
        }
    }

    /// Parse and validate a TOML hardware document; `source` (a file name) prefixes errors.
    pub fn from_toml_str(text: &str, source: &str) -> Result<Self> {
        let spec: HardwareSpec = toml::from_str(text).map_err(|e| CoreError::Parse {
            source_name: source.to_string(),
            message: e.to_string().trim().replace('\n', " "),
        })?;
        spec.validate().map_err(|e| e.with_source(source))?;
        Ok(spec)
    }

    /// Parse and validate a JSON hardware document; `source` (a file name) prefixes errors.
    pub fn from_json_str(text: &str, source: &str) -> Result<Self> {
        let spec: HardwareSpec = serde_json::from_str(text).map_err(|e| CoreError::Parse {
            source_name: source.to_string(),
            message: e.to_string(),
        })?;
        spec.validate().map_err(|e| e.with_source(source))?;
        Ok(spec)
    }

    /// Serialize to TOML (the same format `from_toml_str` reads).
    pub fn to_toml_string(&self) -> Result<String> {
        toml::to_string_pretty(self).map_err(|e| CoreError::Parse {
            source_name: self.name.clone(),
            message: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "toy"
[peak_ops_per_s]
fp16 = 2.048e12
[dram]
name = "dram"
bandwidth_bytes_per_s = 1.0e11
capacity_bytes = 17179869184
[[onchip]]
name = "sram"
capacity_bytes = 524288
[pe_array]
rows = 32
cols = 32
clock_hz = 1.0e9
"#;

    #[test]
    fn toml_round_trip() {
        let s = HardwareSpec::from_toml_str(GOOD, "toy.toml").unwrap();
        assert_eq!(s.tile_buffer().unwrap().capacity_bytes, Some(524288));
        let again = HardwareSpec::from_toml_str(&s.to_toml_string().unwrap(), "x").unwrap();
        assert_eq!(s, again);
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(HardwareSpec::from_json_str(&j, "x.json").unwrap(), s);
    }

    /// A level list with energies and held operands: parsed, round-tripped, and each bad
    /// value named. GOOD itself (no energy, no operand list) is the old one-buffer form.
    #[test]
    fn energies_and_held_operands() {
        let with = format!(
            "{GOOD}{}",
            r#"[pe_array.energy]
mac_pj = 1.5
mac_dtype = "fp16"
source = "paper"
[pe_array.energy.registers]
read_pj_per_byte = 0.25
write_pj_per_byte = 0.3
source = "paper"
"#
        )
        .replace(
            "capacity_bytes = 524288\n",
            "capacity_bytes = 524288\noperands = [\"a\", \"b\"]\ncapacity_per_operand = true\n[onchip.energy]\nread_pj_per_byte = 12.5\nwrite_pj_per_byte = 13.0\nsource = \"paper\"\n",
        );
        let s = HardwareSpec::from_toml_str(&with, "lv.toml").unwrap();
        let buf = s.tile_buffer().unwrap();
        assert!(buf.holds(Operand::A) && buf.holds(Operand::B) && !buf.holds(Operand::C));
        assert!(buf.capacity_per_operand);
        assert_eq!(buf.energy.as_ref().unwrap().write_pj_per_byte, 13.0);
        assert!(s.dram.holds(Operand::C));
        let e = s.pe_array.as_ref().unwrap().energy.as_ref().unwrap();
        assert_eq!((e.mac_pj, e.mac_dtype), (1.5, DType::Fp16));
        let again = HardwareSpec::from_toml_str(&s.to_toml_string().unwrap(), "x").unwrap();
        assert_eq!(again, s);
        for (from, to, field) in [
            (
                "read_pj_per_byte = 12.5",
                "read_pj_per_byte = -1.0",
                "onchip[0].energy.read_pj_per_byte",
            ),
            ("mac_pj = 1.5", "mac_pj = 0.0", "pe_array.energy.mac_pj"),
            (
                "write_pj_per_byte = 0.3\nsource = \"paper\"",
                "write_pj_per_byte = 0.3\nsource = \" \"",
                "pe_array.energy.registers.source",
            ),
        ] {
            let bad = with.replace(from, to);
            assert_ne!(bad, with, "{from}");
            let e = HardwareSpec::from_toml_str(&bad, "lv.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains("lv.toml") && e.contains(field), "{e}");
        }
        let e = HardwareSpec::from_toml_str(
            &with.replace("[\"a\", \"b\"]", "[\"a\", \"d\"]"),
            "lv.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("lv.toml") && e.contains("operands"), "{e}");
    }

    #[test]
    fn schema_version_defaults_is_written_and_a_newer_one_is_refused() {
        let s = HardwareSpec::from_toml_str(GOOD, "toy.toml").unwrap();
        assert_eq!(s.schema_version, 1);
        assert!(s.to_toml_string().unwrap().contains("schema_version = 1"));
        let newer = format!("schema_version = 2\n{GOOD}");
        let e = HardwareSpec::from_toml_str(&newer, "chip.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("chip.toml") && e.contains("schema_version") && e.contains('2'),
            "{e}"
        );
    }

    #[test]
    fn negative_bandwidth_names_file_and_field() {
        let bad = GOOD.replace("1.0e11", "-5.0");
        let e = HardwareSpec::from_toml_str(&bad, "chip.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("chip.toml") && e.contains("dram.bandwidth_bytes_per_s") && e.contains("-5"),
            "{e}"
        );
    }

    #[test]
    fn nan_peak_rejected() {
        let bad = GOOD.replace("fp16 = 2.048e12", "fp16 = nan");
        let e = HardwareSpec::from_toml_str(&bad, "chip.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("peak_ops_per_s.fp16") && e.contains("NaN"),
            "{e}"
        );
    }

    #[test]
    fn unknown_field_and_truncation_rejected() {
        let bad = GOOD.replace("clock_hz", "clock_mhz");
        let e = HardwareSpec::from_toml_str(&bad, "chip.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("chip.toml") && e.contains("clock_mhz"), "{e}");
        let truncated = &GOOD[..GOOD.len() / 2];
        assert!(HardwareSpec::from_toml_str(truncated, "t.toml").is_err());
        assert!(HardwareSpec::from_json_str("{\"name\": \"x\"", "t.json").is_err());
    }

    #[test]
    fn inconsistent_pe_array_rejected() {
        // 2·32·32·1e9 = 2.048e12; a stated peak 10x higher is inconsistent.
        let bad = GOOD.replace("fp16 = 2.048e12", "fp16 = 2.048e13");
        let e = HardwareSpec::from_toml_str(&bad, "chip.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pe_array"), "{e}");
    }

    #[test]
    fn onchip_larger_than_dram_rejected() {
        let bad = GOOD.replace("capacity_bytes = 524288", "capacity_bytes = 34359738368");
        let e = HardwareSpec::from_toml_str(&bad, "chip.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("onchip[0].capacity_bytes"), "{e}");
    }

    #[test]
    fn pe_array_scales_with_dtype_rate() {
        // int8 at twice the fp16 rate: 2·32·32·1e9·2 = 4.096e12 -> 2 MACs/PE/cycle.
        let mut s = HardwareSpec::from_toml_str(GOOD, "toy.toml").unwrap();
        s.peak_ops_per_s.insert(DType::Int8, 4.096e12);
        assert_eq!(
            s.pe_array_for(DType::Int8).unwrap().macs_per_pe_per_cycle,
            2
        );
        assert_eq!(
            s.pe_array_for(DType::Fp16).unwrap().macs_per_pe_per_cycle,
            1
        );
        // A dtype without a peak keeps the array as described.
        assert_eq!(s.pe_array_for(DType::Fp8).unwrap().macs_per_pe_per_cycle, 1);
    }

    const FABRIC: &str = r#"
[interconnect]
name = "mesh"
unidirectional_bytes_per_s = 448.0e9
peer_unidirectional_bytes_per_s = 64.0e9
links = 7
domain_devices = 8
collective_latency_s = 6.6e-6
step_latency_s = 0.6e-6
latency_source = "NCCL tuning.cc"
"#;

    #[test]
    fn interconnect_is_optional_round_trips_and_is_written_only_when_present() {
        // A file without [interconnect] loads (existing hardware files) and writes none.
        let plain = HardwareSpec::from_toml_str(GOOD, "toy.toml").unwrap();
        assert!(plain.interconnect.is_none());
        assert!(!plain.to_toml_string().unwrap().contains("interconnect"));
        assert!(!serde_json::to_string(&plain)
            .unwrap()
            .contains("interconnect"));
        let s = HardwareSpec::from_toml_str(&format!("{GOOD}{FABRIC}"), "toy.toml").unwrap();
        let ic = s.interconnect.as_ref().unwrap();
        assert_eq!(
            (ic.name.as_str(), ic.links, ic.domain_devices),
            ("mesh", Some(7), Some(8))
        );
        // α₀ + 14 · α for a ring all-reduce over 8: 6.6 + 14 · 0.6 = 15.0 µs.
        assert!((ic.latency_s(14) - 15.0e-6).abs() < 1e-15);
        // Without the latency lines (an older file) the same fabric has none.
        let old = FABRIC
            .lines()
            .filter(|l| !l.contains("latency"))
            .collect::<Vec<_>>()
            .join("\n");
        let s_old = HardwareSpec::from_toml_str(&format!("{GOOD}{old}"), "toy.toml").unwrap();
        let ic_old = s_old.interconnect.as_ref().unwrap();
        assert!(!ic_old.has_latency());
        assert_eq!(ic_old.latency_s(14), 0.0);
        let again = HardwareSpec::from_toml_str(&s.to_toml_string().unwrap(), "x").unwrap();
        assert_eq!(s, again);
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(HardwareSpec::from_json_str(&j, "x.json").unwrap(), s);
    }

    #[test]
    fn group_bandwidth_is_capped_by_peer_links() {
        let s = HardwareSpec::from_toml_str(&format!("{GOOD}{FABRIC}"), "toy.toml").unwrap();
        let ic = s.interconnect.unwrap();
        // min(448e9, (p − 1)·64e9): p = 2 → 64e9; p = 4 → 192e9; p = 8 → 448e9 = 7·64e9;
        // p = 16 → still 448e9 (the total); p = 1 → the total (nothing is sent).
        assert_eq!(ic.group_bytes_per_s(2), 64e9);
        assert_eq!(ic.group_bytes_per_s(4), 192e9);
        assert_eq!(ic.group_bytes_per_s(8), 448e9);
        assert_eq!(ic.group_bytes_per_s(16), 448e9);
        assert_eq!(ic.group_bytes_per_s(1), 448e9);
        // A switched fabric (no peer figure): every group gets the total.
        let switched = Interconnect {
            peer_unidirectional_bytes_per_s: None,
            ..ic
        };
        assert_eq!(switched.group_bytes_per_s(2), 448e9);
    }

    #[test]
    fn bad_interconnect_names_the_field() {
        for (from, to, field) in [
            (
                "unidirectional_bytes_per_s = 448.0e9",
                "unidirectional_bytes_per_s = -1.0",
                "interconnect.unidirectional_bytes_per_s",
            ),
            (
                "peer_unidirectional_bytes_per_s = 64.0e9",
                "peer_unidirectional_bytes_per_s = 500.0e9",
                "interconnect.peer_unidirectional_bytes_per_s",
            ),
            ("links = 7", "links = 0", "interconnect.links"),
            (
                "domain_devices = 8",
                "domain_devices = 1",
                "interconnect.domain_devices",
            ),
            ("name = \"mesh\"", "name = \" \"", "interconnect.name"),
            (
                "collective_latency_s = 6.6e-6",
                "collective_latency_s = -1e-6",
                "interconnect.collective_latency_s",
            ),
            // Microseconds written where seconds are meant.
            (
                "step_latency_s = 0.6e-6",
                "step_latency_s = 0.6e6",
                "interconnect.step_latency_s",
            ),
        ] {
            let bad = format!("{GOOD}{}", FABRIC.replace(from, to));
            let e = HardwareSpec::from_toml_str(&bad, "chip.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains("chip.toml") && e.contains(field), "{e}");
        }
        let unknown = format!("{GOOD}{}", FABRIC.replace("links", "lanes"));
        let e = HardwareSpec::from_toml_str(&unknown, "chip.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lanes"), "{e}");
    }

    #[test]
    fn missing_peak_lists_available() {
        let s = HardwareSpec::from_toml_str(GOOD, "toy.toml").unwrap();
        let e = s.peak_for(DType::Int4).unwrap_err().to_string();
        assert!(e.contains("int4") && e.contains("fp16"), "{e}");
    }
}
