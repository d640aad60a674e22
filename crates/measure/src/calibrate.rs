//! Calibration: runs the probes single-threaded and at the requested thread count and turns
//! the results into a device profile in the hardware-file format (a [`HardwareSpec`] that
//! `HardwareSpec::from_toml_str` accepts): fp32 peak = best FMA-microkernel rate, DRAM
//! bandwidth = best triad rate, both at the requested threads, plus the LLC as an on-chip
//! level without a bandwidth. The GEMM rate and the copy bandwidth are reported in the notes
//! and provenance but are not roofs. Because a hardware file denies unknown fields, the full
//! provenance (every probe's samples, date, machine and software context) travels as one
//! note line `provenance_json: {...}`; [`Calibration::from_toml_str`] reads it back.
//! Not calibrated: cache bandwidths, other dtypes, anything frequency- or load-dependent.

use crate::context::{device_context, llc_bytes, software_context, software_signature};
use crate::error::{MeasureError, Result};
use crate::harness::unix_now_s;
use crate::probes::{bandwidth, fma_peak, gemm_rate, has_avx2_fma, ProbeResult};
use crate::workload::WorkloadSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;
use tensorforge_core::{DType, HardwareSpec, MemoryLevel};
use tensorforge_store::{DeviceContext, SoftwareContext};

/// Version of the provenance JSON.
pub const PROVENANCE_SCHEMA_VERSION: u32 = 1;
/// Prefix of the note line that carries the provenance JSON.
pub const PROVENANCE_PREFIX: &str = "provenance_json: ";

/// What to calibrate and how long to spend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibrateOptions {
    /// Threads of the multi-threaded probes (the profile's thread count), at least 1.
    pub threads: usize,
    /// Quick mode: fewer, shorter samples (about 10 s on 2 cores instead of about 40 s).
    pub quick: bool,
    /// Override: f64 elements per bandwidth array (default 4× LLC / 8 B, at most 1/16 of RAM).
    pub bandwidth_elements: Option<usize>,
    /// Override: GEMM probe size (default 1536 full, 896 quick).
    pub gemm_size: Option<usize>,
    /// Override: samples per probe.
    pub samples: Option<usize>,
    /// Override: length of one FMA sample, ms.
    pub fma_sample_ms: Option<u64>,
}

impl CalibrateOptions {
    /// Defaults for `threads` threads.
    pub fn new(threads: usize, quick: bool) -> CalibrateOptions {
        CalibrateOptions {
            threads,
            quick,
            bandwidth_elements: None,
            gemm_size: None,
            samples: None,
            fma_sample_ms: None,
        }
    }
}

/// Where a profile came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// Always [`PROVENANCE_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Seconds since the Unix epoch when calibration finished.
    pub created_unix_s: i64,
    /// `quick` or `full`.
    pub mode: String,
    /// Threads the ceilings were measured at (validation runs at this count).
    pub threads: u32,
    /// Machine the profile belongs to.
    pub machine_id: String,
    /// Software signature the profile belongs to (see `context::software_signature`).
    pub software_signature: String,
    /// Device context at calibration.
    pub device: DeviceContext,
    /// Software context at calibration.
    pub software: SoftwareContext,
    /// LLC size used to size the bandwidth arrays, bytes.
    pub llc_bytes: u64,
    /// Where the LLC size came from.
    pub llc_source: String,
    /// `avx2+fma` or `scalar`.
    pub fma_isa: String,
    /// Every probe at 1 thread and at `threads`.
    pub probes: Vec<ProbeResult>,
    /// Wall-clock seconds the calibration took.
    pub duration_s: f64,
}

/// A calibrated profile and its provenance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The device profile (hardware-file format).
    pub profile: HardwareSpec,
    /// How it was measured.
    pub provenance: Provenance,
}

fn fmt_rate(v: f64, unit: &str) -> String {
    format!("{:.3} {unit}", v / 1e9)
}

impl Provenance {
    /// The probe `name` at `threads`, when present.
    pub fn probe(&self, name: &str, threads: u32) -> Option<&ProbeResult> {
        self.probes
            .iter()
            .find(|p| p.probe == name && p.threads == threads)
    }
}

impl Calibration {
    /// The profile as TOML (hardware-file format; provenance in a note line).
    pub fn to_toml(&self) -> Result<String> {
        let mut spec = self.profile.clone();
        spec.notes.retain(|n| !n.starts_with(PROVENANCE_PREFIX));
        let json = serde_json::to_string(&self.provenance)
            .map_err(|e| MeasureError::Other(format!("provenance JSON: {e}")))?;
        spec.notes.push(format!("{PROVENANCE_PREFIX}{json}"));
        Ok(spec.to_toml_string()?)
    }

    /// The provenance as JSON (what the store keeps beside the TOML).
    pub fn provenance_json(&self) -> Result<String> {
        serde_json::to_string(&self.provenance)
            .map_err(|e| MeasureError::Other(format!("provenance JSON: {e}")))
    }

    /// Parse a profile written by [`Calibration::to_toml`]; `source` names the file in errors.
    pub fn from_toml_str(text: &str, source: &str) -> Result<Calibration> {
        let profile = HardwareSpec::from_toml_str(text, source)?;
        let note = profile
            .notes
            .iter()
            .find_map(|n| n.strip_prefix(PROVENANCE_PREFIX))
            .ok_or_else(|| MeasureError::Profile {
                source_name: source.into(),
                reason: format!("not a calibrated profile (no `{}` note); run `tensorforge calibrate` to make one", PROVENANCE_PREFIX.trim_end_matches(": ")),
            })?;
        let provenance: Provenance =
            serde_json::from_str(note).map_err(|e| MeasureError::Parse {
                source_name: format!("{source}: notes.provenance_json"),
                message: e.to_string(),
            })?;
        if provenance.schema_version != PROVENANCE_SCHEMA_VERSION {
            return Err(MeasureError::invalid(
                source,
                "provenance.schema_version",
                provenance.schema_version,
                format!("this build reads {PROVENANCE_SCHEMA_VERSION}"),
            ));
        }
        if provenance.threads == 0 {
            return Err(MeasureError::invalid(
                source,
                "provenance.threads",
                0,
                "must be at least 1",
            ));
        }
        Ok(Calibration {
            profile,
            provenance,
        })
    }

    /// Refuse a profile from another machine or another software signature.
    pub fn check_compatible(
        &self,
        device: &DeviceContext,
        software: &SoftwareContext,
        source: &str,
    ) -> Result<()> {
        let p = &self.provenance;
        if p.machine_id != device.machine_id {
            return Err(MeasureError::Profile {
                source_name: source.into(),
                reason: format!(
                    "calibrated on machine_id {} ({}, {} cores), but this machine is {} ({}, {} cores); run `tensorforge calibrate` on this machine",
                    p.machine_id, p.device.cpu_model, p.device.logical_cores,
                    device.machine_id, device.cpu_model, device.logical_cores
                ),
            });
        }
        let sig = software_signature(software);
        if p.software_signature != sig {
            return Err(MeasureError::Profile {
                source_name: source.into(),
                reason: format!(
                    "calibrated with software signature {} (tensorforge {}, {}), but this build is {} (tensorforge {}, {}); re-run `tensorforge calibrate`",
                    p.software_signature,
                    p.software.tensorforge_version,
                    p.software.rustc_version.as_deref().unwrap_or("rustc unknown"),
                    sig,
                    software.tensorforge_version,
                    software.rustc_version.as_deref().unwrap_or("rustc unknown"),
                ),
            });
        }
        Ok(())
    }

    /// Error when a holdout workload is identical (same fingerprint) to a calibration probe.
    pub fn check_no_overlap(&self, suite: &[WorkloadSpec]) -> Result<()> {
        for s in suite {
            let fp = s.identity().fingerprint();
            if let Some(p) = self.provenance.probes.iter().find(|p| p.fingerprint == fp) {
                return Err(MeasureError::Overlap {
                    name: s.name.clone(),
                    fingerprint: fp,
                    probe: format!("{} ({})", p.probe, p.identity.canonical_json()),
                });
            }
        }
        Ok(())
    }
}

/// Run every probe at 1 thread and at `opts.threads` (once when they are equal) and build
/// the profile. `progress` receives a short message before each step.
pub fn calibrate(opts: &CalibrateOptions, progress: &mut dyn FnMut(&str)) -> Result<Calibration> {
    if opts.threads == 0 || opts.threads > 4096 {
        return Err(MeasureError::invalid(
            "calibrate options",
            "threads",
            opts.threads,
            "must be between 1 and 4096",
        ));
    }
    let start = Instant::now();
    let device = device_context(opts.threads as u32);
    let software = software_context();
    let (llc, llc_source) = llc_bytes();
    let mem = device.memory_bytes.unwrap_or(8 << 30);
    let default_elems = (4 * llc / 8).max(1 << 20).min(mem / 16 / 8 / 3) as usize;
    let elements = opts.bandwidth_elements.unwrap_or(default_elems).max(1024);
    let samples = opts
        .samples
        .unwrap_or(if opts.quick { 5 } else { 15 })
        .max(1);
    let fma_ms = opts
        .fma_sample_ms
        .unwrap_or(if opts.quick { 40 } else { 150 });
    let gemm_size = opts
        .gemm_size
        .unwrap_or(if opts.quick { 896 } else { 1536 })
        .max(8);
    let mut thread_counts = vec![1usize];
    if opts.threads > 1 {
        thread_counts.push(opts.threads);
    }
    let mut probes = Vec::new();
    for &t in &thread_counts {
        progress(&format!("memory bandwidth, {t} thread(s)"));
        probes.extend(bandwidth(elements, t, samples)?);
        progress(&format!("FMA peak, {t} thread(s)"));
        probes.push(fma_peak(t, samples, fma_ms)?);
        progress(&format!("GEMM {gemm_size}³, {t} thread(s)"));
        probes.push(gemm_rate(
            gemm_size,
            t,
            samples.min(if opts.quick { 3 } else { 8 }),
        )?);
    }
    let t = opts.threads as u32;
    let get = |name: &str| -> Result<f64> {
        probes
            .iter()
            .find(|p| p.probe == name && p.threads == t)
            .map(|p| p.best)
            .filter(|v| v.is_finite() && *v > 0.0)
            .ok_or_else(|| {
                MeasureError::Other(format!("probe {name} at {t} threads gave no positive rate"))
            })
    };
    let peak = get("fma_peak")?;
    let triad = get("stream_triad")?;
    let copy = get("stream_copy")?;
    let gemm = get("gemm")?;
    let isa = if has_avx2_fma() { "avx2+fma" } else { "scalar" };
    let provenance = Provenance {
        schema_version: PROVENANCE_SCHEMA_VERSION,
        created_unix_s: unix_now_s(),
        mode: if opts.quick { "quick" } else { "full" }.into(),
        threads: t,
        machine_id: device.machine_id.clone(),
        software_signature: software_signature(&software),
        device: device.clone(),
        software,
        llc_bytes: llc,
        llc_source,
        fma_isa: isa.into(),
        probes,
        duration_s: start.elapsed().as_secs_f64(),
    };
    let mut peaks = BTreeMap::new();
    peaks.insert(DType::Fp32, peak);
    let mut notes = vec![
        format!(
            "machine_id = {}; software_signature = {}; threads = {t}",
            provenance.machine_id, provenance.software_signature
        ),
        format!(
            "fp32 peak = best {isa} FMA-microkernel rate: {}",
            fmt_rate(peak, "GFLOP/s")
        ),
        format!(
            "dram bandwidth = best STREAM triad (read + write bytes): {}; copy: {}",
            fmt_rate(triad, "GB/s"),
            fmt_rate(copy, "GB/s")
        ),
        format!(
            "achievable faer GEMM {gemm_size}³ rate (not a roof): {} ({:.0} % of peak)",
            fmt_rate(gemm, "GFLOP/s"),
            100.0 * gemm / peak
        ),
        "llc has no bandwidth roof: cache bandwidth is not calibrated".into(),
    ];
    if gemm > peak {
        notes.push("warning: GEMM rate exceeds the FMA peak; the microkernel underestimates this CPU's peak".into());
    }
    if !has_avx2_fma() {
        notes.push("warning: no AVX2+FMA; fp32 peak is a scalar peak".into());
    }
    let profile = HardwareSpec {
        name: format!("calibrated_{}_t{t}", provenance.machine_id),
        description: format!(
            "{} ({} logical cores), {t} thread(s): ceilings measured by tensorforge calibrate ({})",
            device.cpu_model, device.logical_cores, provenance.mode
        ),
        peak_ops_per_s: peaks,
        dram: MemoryLevel {
            name: "dram".into(),
            capacity_bytes: device.memory_bytes,
            bandwidth_bytes_per_s: Some(triad),
            instances: 1,
        },
        onchip: vec![MemoryLevel {
            name: "llc".into(),
            capacity_bytes: Some(llc),
            bandwidth_bytes_per_s: None,
            instances: 1,
        }],
        pe_array: None,
        sources: vec![format!(
            "measured by tensorforge calibrate ({}) at unix time {}; samples in the provenance_json note",
            provenance.mode, provenance.created_unix_s
        )],
        notes,
    };
    profile.validate()?;
    Ok(Calibration {
        profile,
        provenance,
    })
}

/// Options small enough for tests: tiny arrays, a 64³ GEMM, 2 samples, 2 ms FMA samples.
pub fn tiny_options(threads: usize) -> CalibrateOptions {
    CalibrateOptions {
        bandwidth_elements: Some(1 << 14),
        gemm_size: Some(64),
        samples: Some(2),
        fma_sample_ms: Some(2),
        ..CalibrateOptions::new(threads, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::device_context;
    use crate::workload::parse_workload_name;

    #[test]
    fn profile_round_trips_and_guards() {
        let cal = calibrate(&tiny_options(2), &mut |_| {}).unwrap();
        assert_eq!(cal.provenance.probes.len(), 8);
        let text = cal.to_toml().unwrap();
        // A plain hardware-file reader accepts it.
        let spec = HardwareSpec::from_toml_str(&text, "p.toml").unwrap();
        assert!(spec.peak_for(DType::Fp32).unwrap() > 0.0);
        let back = Calibration::from_toml_str(&text, "p.toml").unwrap();
        // serde_json may move a float by one ulp; compare identities and rates closely.
        assert_eq!(back.provenance.machine_id, cal.provenance.machine_id);
        assert_eq!(back.provenance.probes.len(), cal.provenance.probes.len());
        for (a, b) in back.provenance.probes.iter().zip(&cal.provenance.probes) {
            assert_eq!(a.fingerprint, b.fingerprint);
            assert!((a.best - b.best).abs() <= 1e-9 * b.best);
        }
        let dev = device_context(2);
        let sw = software_context();
        back.check_compatible(&dev, &sw, "p.toml").unwrap();
        let mut other = dev.clone();
        other.machine_id = "0000000000000000".into();
        let e = back
            .check_compatible(&other, &sw, "p.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("p.toml") && e.contains("machine_id") && e.contains("calibrate"),
            "{e}"
        );
        let mut sw2 = sw.clone();
        sw2.rustc_version = Some("rustc 0.0.1".into());
        let e = back
            .check_compatible(&dev, &sw2, "p.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("software signature"), "{e}");
        // The GEMM probe is 64³: a holdout GEMM of that shape is refused, others pass.
        let clash = parse_workload_name("gemm:m=64:n=64:k=64").unwrap();
        let e = back.check_no_overlap(&[clash]).unwrap_err().to_string();
        assert!(
            e.contains("gemm:m=64:n=64:k=64") && e.contains("probe"),
            "{e}"
        );
        back.check_no_overlap(&[parse_workload_name("gemm_tiny").unwrap()])
            .unwrap();
    }

    #[test]
    fn plain_hardware_file_is_not_a_profile() {
        let spec = tensorforge_core::presets::hardware("balanced").unwrap();
        let text = spec.to_toml_string().unwrap();
        let e = Calibration::from_toml_str(&text, "b.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("b.toml") && e.contains("calibrate"), "{e}");
        assert!(Calibration::from_toml_str("name = ", "x.toml").is_err());
    }
}
