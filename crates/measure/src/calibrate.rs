//! Calibration: runs the probes single-threaded and at the requested thread count and turns
//! the results into a device profile in the hardware-file format (a [`HardwareSpec`] that
//! `HardwareSpec::from_toml_str` accepts). Its ceilings are upper bounds on everything the
//! same calibration measured ([`Ceilings`]): fp32 peak = the best sample of every compute
//! probe (the FMA microkernel on each vector ISA present, faer GEMMs at several sizes) at 1
//! to N threads, DRAM bandwidth = the best STREAM copy or triad sample at 1 to N threads;
//! a note says which probe set each. The LLC is an on-chip level without a bandwidth.
//! Because a hardware file denies unknown fields, the full provenance (every repetition of
//! every probe, date, machine and software context) travels as one note line
//! `provenance_json: {...}`; [`Calibration::from_toml_str`] reads it back (schema 1 or 2).
//! Not calibrated: cache bandwidths, dtypes other than f32, anything frequency- or
//! load-dependent (a ceiling measured on a busy machine can be beaten later; validation
//! flags that as a ceiling violation).

use crate::context::{device_context, llc_bytes, software_context, software_signature};
use crate::error::{MeasureError, Result};
use crate::harness::unix_now_s;
use crate::probes::{available_fma_isas, bandwidth, fma_peak, gemm_rate, FmaIsa, ProbeResult};
use crate::workload::WorkloadSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;
use tensorforge_core::{DType, HardwareSpec, MemoryLevel};
use tensorforge_store::{DeviceContext, SoftwareContext};

/// Version of the provenance JSON. 2 added `fma_isas`, `fp32_peak_source` and
/// `dram_bandwidth_source`, several FMA ISAs and GEMM sizes per thread count; version-1
/// profiles are still read (the new fields empty).
pub const PROVENANCE_SCHEMA_VERSION: u32 = 2;
/// Oldest provenance version this build reads.
pub const PROVENANCE_MIN_SCHEMA_VERSION: u32 = 1;
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
    /// Override: GEMM probe sizes, each a square `n³` GEMM (default 256, 512, 896 quick;
    /// 256, 512, 1024, 1536 full).
    pub gemm_sizes: Option<Vec<usize>>,
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
            gemm_sizes: None,
            samples: None,
            fma_sample_ms: None,
        }
    }
}

impl CalibrateOptions {
    /// GEMM probe sizes: the override, else 256, 640, 896 (quick) or 256, 640, 1152, 1536
    /// (full). The defaults avoid 128, 512 and 1024, which are holdout and preset GEMMs.
    pub fn gemm_sizes(&self) -> Vec<usize> {
        let mut v = self.gemm_sizes.clone().unwrap_or_else(|| {
            if self.quick {
                vec![256, 640, 896]
            } else {
                vec![256, 640, 1152, 1536]
            }
        });
        for n in v.iter_mut() {
            *n = (*n).max(8);
        }
        v
    }

    /// Progress steps [`calibrate`] reports: per thread count, one bandwidth step, one per
    /// FMA ISA and one per GEMM size.
    pub fn steps(&self) -> u64 {
        let per = 1 + available_fma_isas().len() + self.gemm_sizes().len();
        let counts = if self.threads > 1 { 2 } else { 1 };
        (per * counts) as u64
    }
}

/// The profile's ceilings, chosen from a calibration's probes so that each is an upper bound
/// on every probe of its kind at or below the profile's thread count.
#[derive(Clone, Debug, PartialEq)]
pub struct Ceilings {
    /// fp32 peak = max over every `flops_per_s` probe (FMA on every ISA, GEMM at every
    /// size) at threads ≤ the profile's, of its best sample, FLOP/s.
    pub peak_flops_per_s: f64,
    /// The probe that set the peak.
    pub peak_source: String,
    /// True when a GEMM, not an FMA microkernel, set the peak.
    pub peak_from_gemm: bool,
    /// Best FMA-microkernel rate alone, FLOP/s.
    pub best_fma_flops_per_s: f64,
    /// DRAM bandwidth = max over `stream_copy` and `stream_triad` at threads ≤ the
    /// profile's, of the best sample, B/s.
    pub bandwidth_bytes_per_s: f64,
    /// The probe that set the bandwidth.
    pub bandwidth_source: String,
}

/// Short description of a probe: `fma_peak (avx512f) at 2 thread(s)`,
/// `faer gemm 896³ at 1 thread(s)`.
pub fn describe_probe(p: &ProbeResult) -> String {
    format!("{} at {} thread(s)", probe_label(p), p.threads)
}

/// A probe's name with what distinguishes it from its siblings: `fma_peak (avx512f)`,
/// `faer gemm 896³`, `stream_triad`.
pub fn probe_label(p: &ProbeResult) -> String {
    let param = |k: &str| {
        p.identity
            .params
            .get(k)
            .map(|v| v.to_string().trim_matches('"').to_string())
    };
    match p.probe.as_str() {
        "fma_peak" => format!("fma_peak ({})", param("isa").unwrap_or_default()),
        "gemm" => format!("faer gemm {}³", param("m").unwrap_or_default()),
        other => other.to_string(),
    }
}

impl Ceilings {
    /// Choose the ceilings from `probes` for a profile at `threads`. Errors when no compute
    /// or no bandwidth probe gave a positive rate.
    pub fn from_probes(probes: &[ProbeResult], threads: u32) -> Result<Ceilings> {
        let best = |f: &dyn Fn(&ProbeResult) -> bool| {
            probes
                .iter()
                .filter(|p| p.threads <= threads && p.best.is_finite() && p.best > 0.0 && f(p))
                .max_by(|a, b| a.best.total_cmp(&b.best))
        };
        let missing = |what: &str| {
            MeasureError::Other(format!(
                "no {what} probe at 1..{threads} thread(s) gave a positive rate"
            ))
        };
        let peak = best(&|p| p.unit == "flops_per_s").ok_or_else(|| missing("compute"))?;
        let fma = best(&|p| p.probe == "fma_peak")
            .map(|p| p.best)
            .unwrap_or(0.0);
        let bw = best(&|p| p.probe == "stream_copy" || p.probe == "stream_triad")
            .ok_or_else(|| missing("bandwidth"))?;
        Ok(Ceilings {
            peak_flops_per_s: peak.best,
            peak_source: describe_probe(peak),
            peak_from_gemm: peak.probe == "gemm",
            best_fma_flops_per_s: fma,
            bandwidth_bytes_per_s: bw.best,
            bandwidth_source: describe_probe(bw),
        })
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
    /// Widest FMA ISA probed: `avx512f`, `avx2+fma`, `neon` or `scalar`.
    pub fma_isa: String,
    /// Every FMA ISA probed, widest first (schema 2; empty when read from schema 1).
    #[serde(default)]
    pub fma_isas: Vec<String>,
    /// Which probe set the fp32 peak, e.g. `fma_peak (avx512f) at 2 thread(s)` (schema 2).
    #[serde(default)]
    pub fp32_peak_source: String,
    /// Which probe set the DRAM bandwidth, e.g. `stream_triad at 2 thread(s)` (schema 2).
    #[serde(default)]
    pub dram_bandwidth_source: String,
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
        if !(PROVENANCE_MIN_SCHEMA_VERSION..=PROVENANCE_SCHEMA_VERSION)
            .contains(&provenance.schema_version)
        {
            return Err(MeasureError::invalid(
                source,
                "provenance.schema_version",
                provenance.schema_version,
                format!(
                    "this build reads {PROVENANCE_MIN_SCHEMA_VERSION} to {PROVENANCE_SCHEMA_VERSION}"
                ),
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
    let gemm_sizes = opts.gemm_sizes();
    let isas = available_fma_isas();
    let mut thread_counts = vec![1usize];
    if opts.threads > 1 {
        thread_counts.push(opts.threads);
    }
    let gemm_samples = samples.min(if opts.quick { 3 } else { 8 });
    let mut probes = Vec::new();
    for &t in &thread_counts {
        progress(&format!("memory bandwidth, {t} thread(s)"));
        probes.extend(bandwidth(elements, t, samples)?);
        for &isa in &isas {
            progress(&format!("FMA peak ({}), {t} thread(s)", isa.label()));
            probes.push(fma_peak(isa, t, samples, fma_ms)?);
        }
        for &n in &gemm_sizes {
            progress(&format!("GEMM {n}³, {t} thread(s)"));
            // Small GEMMs are short: give them more repetitions for the best-of.
            let reps = if n <= 384 {
                gemm_samples * 4
            } else {
                gemm_samples
            };
            probes.push(gemm_rate(n, t, reps)?);
        }
    }
    let t = opts.threads as u32;
    let ceilings = Ceilings::from_probes(&probes, t)?;
    let isa = isas[0].label();
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
        fma_isas: isas.iter().map(|i| i.label().to_string()).collect(),
        fp32_peak_source: ceilings.peak_source.clone(),
        dram_bandwidth_source: ceilings.bandwidth_source.clone(),
        probes,
        duration_s: start.elapsed().as_secs_f64(),
    };
    let peak = ceilings.peak_flops_per_s;
    let bw = ceilings.bandwidth_bytes_per_s;
    let mut peaks = BTreeMap::new();
    peaks.insert(DType::Fp32, peak);
    let best_at = |probe: &str, param: &str| -> Vec<String> {
        provenance
            .probes
            .iter()
            .filter(|p| p.probe == probe && p.threads == t)
            .map(|p| {
                let v = p
                    .identity
                    .params
                    .get(param)
                    .map(|v| v.to_string().trim_matches('"').to_string())
                    .unwrap_or_default();
                let unit = if p.unit == "bytes_per_s" {
                    "GB/s"
                } else {
                    "GFLOP/s"
                };
                format!("{v} {}", fmt_rate(p.best, unit))
            })
            .collect()
    };
    let mut notes = vec![
        format!(
            "machine_id = {}; software_signature = {}; threads = {t}",
            provenance.machine_id, provenance.software_signature
        ),
        format!(
            "fp32 peak = the best rate of every compute probe of this calibration at 1..{t} thread(s) (FMA microkernels on each ISA, faer GEMMs at each size), so no probe beats it: {}, set by {}",
            fmt_rate(peak, "GFLOP/s"),
            ceilings.peak_source
        ),
        format!(
            "FMA microkernel (f32) best at {t} thread(s), per ISA: {}",
            best_at("fma_peak", "isa").join(", ")
        ),
        format!(
            "faer GEMM best at {t} thread(s), per size: {}",
            best_at("gemm", "m").join(", ")
        ),
        format!(
            "dram bandwidth = best STREAM rate (copy or triad, read + write bytes) at 1..{t} thread(s): {}, set by {}",
            fmt_rate(bw, "GB/s"),
            ceilings.bandwidth_source
        ),
        "llc has no bandwidth roof: cache bandwidth is not calibrated".into(),
    ];
    if ceilings.peak_from_gemm {
        notes.push(format!(
            "warning: a faer GEMM beat every FMA microkernel ({}); the microkernels underestimate this CPU's peak, so the GEMM rate is the ceiling",
            fmt_rate(ceilings.best_fma_flops_per_s, "GFLOP/s")
        ));
    }
    if isas[0] == FmaIsa::Scalar {
        notes.push("warning: no vector FMA ISA detected; the FMA microkernel is scalar".into());
    }
    let profile = HardwareSpec {
        schema_version: tensorforge_core::hardware::HARDWARE_SCHEMA_VERSION,
        name: format!("calibrated_{}_t{t}", provenance.machine_id),
        description: format!(
            "{} ({} logical cores), {t} thread(s): ceilings measured by tensorforge calibrate ({})",
            device.cpu_model, device.logical_cores, provenance.mode
        ),
        peak_ops_per_s: peaks,
        dram: MemoryLevel {
            name: "dram".into(),
            capacity_bytes: device.memory_bytes,
            bandwidth_bytes_per_s: Some(bw),
            instances: 1, energy: None, operands: vec![], capacity_per_operand: false,
        },
        onchip: vec![MemoryLevel {
            name: "llc".into(),
            capacity_bytes: Some(llc),
            bandwidth_bytes_per_s: None,
            instances: 1, energy: None, operands: vec![], capacity_per_operand: false,
        }],
        pe_array: None,
        interconnect: None,
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
        gemm_sizes: Some(vec![48, 64]),
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
        // Per thread count (1 and 2): copy, triad, one FMA probe per ISA, GEMM 48³ and 64³.
        let isas = available_fma_isas().len();
        assert_eq!(cal.provenance.probes.len(), 2 * (2 + isas + 2));
        assert_eq!(tiny_options(2).steps(), 2 * (1 + isas as u64 + 2));
        // The peak is an upper bound on every compute probe, the bandwidth on every stream.
        let peak = cal.profile.peak_for(DType::Fp32).unwrap();
        let bw = cal.profile.dram.bandwidth_bytes_per_s.unwrap();
        for p in &cal.provenance.probes {
            let roof = if p.unit == "flops_per_s" { peak } else { bw };
            assert!(p.best <= roof, "{} {} > {roof}", p.probe, p.best);
            assert!(p.samples.iter().all(|s| *s <= roof));
        }
        assert!(!cal.provenance.fp32_peak_source.is_empty());
        assert!(cal
            .profile
            .notes
            .iter()
            .any(|n| n.contains("set by") && n.contains(&cal.provenance.fp32_peak_source)));
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

    fn probe(name: &str, threads: u32, isa: &str, unit: &str, samples: &[f64]) -> ProbeResult {
        let mut id = tensorforge_store::WorkloadIdentity {
            kind: "probe".into(),
            name: name.into(),
            params: Default::default(),
            dtype: "f32".into(),
        };
        id.params.insert("isa".into(), serde_json::json!(isa));
        id.params.insert("m".into(), serde_json::json!(256));
        let best = samples.iter().copied().fold(0.0, f64::max);
        ProbeResult {
            probe: name.into(),
            threads,
            fingerprint: id.fingerprint(),
            identity: id,
            unit: unit.into(),
            work_per_sample: 1.0,
            samples: samples.to_vec(),
            best,
            median: best,
        }
    }

    #[test]
    fn ceilings_are_the_max_over_probes_and_thread_counts() {
        let f = "flops_per_s";
        let b = "bytes_per_s";
        let probes = vec![
            probe("fma_peak", 1, "avx2+fma", f, &[50.0, 60.0]),
            probe("fma_peak", 2, "avx2+fma", f, &[100.0, 118.0]),
            probe("fma_peak", 2, "avx512f", f, &[150.0, 140.0]),
            // A GEMM faster than every FMA microkernel sets the peak.
            probe("gemm", 2, "", f, &[170.0, 192.0]),
            // A 4-thread probe is above the profile's 2 threads: ignored.
            probe("gemm", 4, "", f, &[999.0]),
            probe("stream_copy", 1, "", b, &[9.0]),
            probe("stream_triad", 2, "", b, &[8.0, 7.0]),
        ];
        let c = Ceilings::from_probes(&probes, 2).unwrap();
        assert_eq!(c.peak_flops_per_s, 192.0);
        assert!(c.peak_from_gemm);
        assert_eq!(c.peak_source, "faer gemm 256³ at 2 thread(s)");
        assert_eq!(c.best_fma_flops_per_s, 150.0);
        // The 1-thread copy (9) beats the 2-thread triad (8): it is the ceiling.
        assert_eq!(c.bandwidth_bytes_per_s, 9.0);
        assert_eq!(c.bandwidth_source, "stream_copy at 1 thread(s)");
        // Without the GEMMs, AVX-512 sets the peak.
        let c = Ceilings::from_probes(&probes[..3], 2).unwrap_err();
        assert!(c.to_string().contains("bandwidth"), "{c}");
        let mut no_gemm = probes.clone();
        no_gemm.retain(|p| p.probe != "gemm");
        let c = Ceilings::from_probes(&no_gemm, 2).unwrap();
        assert_eq!(c.peak_source, "fma_peak (avx512f) at 2 thread(s)");
        assert!(!c.peak_from_gemm);
    }

    #[test]
    fn schema_1_profiles_still_read() {
        let cal = calibrate(&tiny_options(1), &mut |_| {}).unwrap();
        let mut v = serde_json::to_value(&cal.provenance).unwrap();
        let o = v.as_object_mut().unwrap();
        for k in ["fma_isas", "fp32_peak_source", "dram_bandwidth_source"] {
            o.remove(k);
        }
        let with = |version: u32| {
            let mut v = v.clone();
            v["schema_version"] = serde_json::json!(version);
            let mut spec = cal.profile.clone();
            spec.notes.retain(|n| !n.starts_with(PROVENANCE_PREFIX));
            spec.notes.push(format!("{PROVENANCE_PREFIX}{v}"));
            spec.to_toml_string().unwrap()
        };
        let back = Calibration::from_toml_str(&with(1), "old.toml").unwrap();
        assert_eq!(back.provenance.schema_version, 1);
        assert!(back.provenance.fma_isas.is_empty());
        // A future version is refused, naming the field.
        let e = Calibration::from_toml_str(&with(9), "new.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("schema_version") && e.contains('9'), "{e}");
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
