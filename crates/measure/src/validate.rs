//! Validation: predicts each holdout workload from a calibrated profile with the pure
//! roofline (per operation `max(FLOPs / peak, bytes / bandwidth)`, summed over the
//! workload's operations; no fitted term) and compares with the measured p50. A second,
//! labelled variant adds a fixed floor: the measured p50 of an empty call through the same
//! harness path, which is never fitted to the holdout set. Errors are reported per workload
//! (signed error, absolute percentage error, ratio) and summarized (median, mean, max APE).
//! The roofline leaves out what [`LIMITATIONS`] lists.

use crate::calibrate::Calibration;
use crate::error::{MeasureError, Result};
use crate::workload::WorkloadSpec;
use serde::{Deserialize, Serialize};
use tensorforge_core::{roofline, Bound, DType};
use tensorforge_store::Record;

/// Version of the validation report JSON.
pub const VALIDATION_SCHEMA_VERSION: u32 = 1;

/// Label of the pure roofline variant.
pub const ROOFLINE: &str = "roofline";
/// Label of the roofline-plus-floor variant.
pub const ROOFLINE_PLUS_FLOOR: &str = "roofline+floor";

/// What the roofline prediction omits.
pub const LIMITATIONS: &[&str] = &[
    "launch/dispatch overhead: function calls, rayon task spawning and joins, faer's packing setup (the floor variant adds only an empty call's cost)",
    "caches: only DRAM is a roof; working sets that stay in cache can beat the DRAM bound, and cache-level bandwidths are not calibrated",
    "instruction issue: non-FMA work (exp, division, comparisons, packing, im2col copies) is charged at the FMA peak or not at all",
    "contention: other processes and SMT siblings on a shared machine slow measurements the model cannot see",
    "frequency scaling: turbo and thermal limits change the clock between calibration and measurement",
    "no overlap model: operations of a block are summed, each at its own bound; compute and memory of one operation overlap perfectly",
];

/// One holdout workload: prediction beside measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValidationRow {
    /// Workload name.
    pub workload: String,
    /// Workload kind.
    pub kind: String,
    /// Workload fingerprint.
    pub fingerprint: String,
    /// FLOPs per iteration (None when the model does not count them).
    pub flops: Option<f64>,
    /// Compulsory bytes per iteration.
    pub bytes: f64,
    /// Pure roofline prediction, s.
    pub predicted_s: f64,
    /// Roofline plus the measured floor, s (None without a floor).
    pub predicted_with_floor_s: Option<f64>,
    /// Which roof binds (for multi-op workloads: the side with more predicted time).
    pub predicted_bound: String,
    /// Measured median latency, s.
    pub measured_p50_s: f64,
    /// `(predicted − measured) / measured · 100`; negative = the model under-predicts.
    pub signed_error_pct: f64,
    /// `|signed_error_pct|`.
    pub ape_pct: f64,
    /// `measured / predicted`.
    pub ratio: f64,
    /// Signed error of the floor variant, %.
    pub signed_error_with_floor_pct: Option<f64>,
    /// APE of the floor variant, %.
    pub ape_with_floor_pct: Option<f64>,
    /// Measured FLOP/s at p50, when FLOPs are counted.
    pub measured_flops_per_s: Option<f64>,
    /// Measured arithmetic intensity, FLOP per compulsory byte.
    pub arithmetic_intensity: Option<f64>,
}

/// APE summary of one model variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VariantSummary {
    /// `roofline` or `roofline+floor`.
    pub label: String,
    /// What the variant is.
    pub description: String,
    /// Median APE, %.
    pub median_ape_pct: f64,
    /// Mean APE, %.
    pub mean_ape_pct: f64,
    /// Max APE, %.
    pub max_ape_pct: f64,
}

/// A validation report (serde; `schema_version` versioned).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValidationReport {
    /// Always [`VALIDATION_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `model-vs-measurement`.
    pub evidence: String,
    /// Profile name.
    pub profile: String,
    /// Machine id of profile and measurement.
    pub machine_id: String,
    /// Threads of profile and measurement.
    pub threads: u32,
    /// fp32 peak used, FLOP/s.
    pub peak_flops_per_s: f64,
    /// DRAM bandwidth used, B/s.
    pub dram_bandwidth_bytes_per_s: f64,
    /// The floor (p50 of the empty call), s, when measured.
    pub floor_s: Option<f64>,
    /// Run id of the measurements.
    pub run_id: String,
    /// One row per holdout workload.
    pub rows: Vec<ValidationRow>,
    /// Summaries: the pure roofline first, then the floor variant when a floor exists.
    pub variants: Vec<VariantSummary>,
    /// What the model omits.
    pub limitations: Vec<String>,
}

/// Pure roofline time of a workload on the profile, s, and its bound label.
pub fn predict(cal: &Calibration, spec: &WorkloadSpec) -> Result<(f64, String)> {
    let hw = &cal.profile;
    let bw = hw.dram.bandwidth_bytes_per_s.unwrap_or(f64::INFINITY);
    let (mut total, mut compute, mut memory) = (0.0f64, 0.0f64, 0.0f64);
    let ops = spec.model_ops()?;
    if ops.is_empty() {
        return Err(MeasureError::invalid(
            &spec.name,
            "kind",
            "empty",
            "has no model operations to predict",
        ));
    }
    for op in ops {
        let (t, bound) = match op.flops {
            Some(f) if f > 0.0 => {
                let r = roofline(hw, DType::Fp32, f, op.bytes.max(1.0), &[])?;
                (r.time_lower_bound_s, r.bound)
            }
            _ => (op.bytes / bw, Bound::Memory),
        };
        total += t;
        match bound {
            Bound::Compute => compute += t,
            _ => memory += t,
        }
    }
    let label = Bound::classify(compute, memory).label().to_string();
    Ok((total, label))
}

fn summary(label: &str, description: &str, apes: &[f64]) -> VariantSummary {
    let mut s = apes.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len().max(1) as f64;
    VariantSummary {
        label: label.into(),
        description: description.into(),
        median_ape_pct: if s.is_empty() {
            0.0
        } else {
            tensorforge_store::stats::percentile_sorted(&s, 0.5)
        },
        mean_ape_pct: s.iter().sum::<f64>() / n,
        max_ape_pct: s.last().copied().unwrap_or(0.0),
    }
}

/// Compare each suite workload's prediction with its record (matched by fingerprint). A
/// record of kind `empty` in `records` supplies the floor for the second variant.
pub fn validate(
    cal: &Calibration,
    suite: &[WorkloadSpec],
    records: &[Record],
) -> Result<ValidationReport> {
    cal.check_no_overlap(suite)?;
    let floor_s = records
        .iter()
        .find(|r| r.workload.kind == "empty")
        .map(|r| r.stats.p50_ns * 1e-9);
    let mut rows = Vec::new();
    for spec in suite
        .iter()
        .filter(|s| !matches!(s.kind, crate::workload::WorkloadKind::Empty))
    {
        let fp = spec.identity().fingerprint();
        let rec = records
            .iter()
            .find(|r| r.fingerprint == fp)
            .ok_or_else(|| {
                MeasureError::invalid(
                    &spec.name,
                    "records",
                    &fp,
                    "no record with this workload's fingerprint",
                )
            })?;
        let (predicted, bound) = predict(cal, spec)?;
        let measured = rec.stats.p50_ns * 1e-9;
        if !(measured > 0.0 && predicted > 0.0) {
            return Err(MeasureError::invalid(
                &spec.name,
                "p50",
                measured,
                "prediction and measurement must be positive",
            ));
        }
        let err = |p: f64| (p - measured) / measured * 100.0;
        let with_floor = floor_s.map(|f| predicted + f);
        let flops = spec.flops()?;
        let bytes = spec.bytes()?.unwrap_or(0.0);
        rows.push(ValidationRow {
            workload: spec.name.clone(),
            kind: rec.workload.kind.clone(),
            fingerprint: fp,
            flops,
            bytes,
            predicted_s: predicted,
            predicted_with_floor_s: with_floor,
            predicted_bound: bound,
            measured_p50_s: measured,
            signed_error_pct: err(predicted),
            ape_pct: err(predicted).abs(),
            ratio: measured / predicted,
            signed_error_with_floor_pct: with_floor.map(err),
            ape_with_floor_pct: with_floor.map(|p| err(p).abs()),
            measured_flops_per_s: flops.map(|f| f / measured),
            arithmetic_intensity: flops.filter(|_| bytes > 0.0).map(|f| f / bytes),
        });
    }
    let mut variants = vec![summary(
        ROOFLINE,
        "pure roofline: sum over operations of max(FLOPs/peak, bytes/bandwidth); nothing fitted",
        &rows.iter().map(|r| r.ape_pct).collect::<Vec<_>>(),
    )];
    if floor_s.is_some() {
        variants.push(summary(
            ROOFLINE_PLUS_FLOOR,
            "roofline plus a fixed floor: the p50 of an empty call through the same harness path (measured, not fitted)",
            &rows.iter().filter_map(|r| r.ape_with_floor_pct).collect::<Vec<_>>(),
        ));
    }
    Ok(ValidationReport {
        schema_version: VALIDATION_SCHEMA_VERSION,
        evidence: "model-vs-measurement".into(),
        profile: cal.profile.name.clone(),
        machine_id: cal.provenance.machine_id.clone(),
        threads: cal.provenance.threads,
        peak_flops_per_s: cal.profile.peak_for(DType::Fp32)?,
        dram_bandwidth_bytes_per_s: cal.profile.dram.bandwidth_bytes_per_s.unwrap_or(0.0),
        floor_s,
        run_id: records
            .first()
            .map(|r| r.run_id.clone())
            .unwrap_or_default(),
        rows,
        variants,
        limitations: LIMITATIONS.iter().map(|s| s.to_string()).collect(),
    })
}

/// The holdout suite compiled into the binary (examples/holdout.toml).
pub const EMBEDDED_HOLDOUT_TOML: &str = include_str!("../../../examples/holdout.toml");

/// Parse the embedded holdout suite.
pub fn embedded_holdout_suite() -> Result<Vec<WorkloadSpec>> {
    crate::workload::parse_workload_file(EMBEDDED_HOLDOUT_TOML, "examples/holdout.toml (embedded)")
}

/// The whole validation loop: check the profile against this machine and software, check
/// that no holdout workload is a probe, measure the suite and the empty call at the
/// profile's thread count, and validate. Returns the report and every record (floor last).
pub fn measure_and_validate(
    cal: &Calibration,
    profile_source: &str,
    suite: &[WorkloadSpec],
    opts: &crate::harness::HarnessOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<(ValidationReport, Vec<Record>)> {
    let threads = cal.provenance.threads as usize;
    let device = crate::context::device_context(threads as u32);
    let software = crate::context::software_context();
    cal.check_compatible(&device, &software, profile_source)?;
    cal.check_no_overlap(suite)?;
    let mut all: Vec<WorkloadSpec> = suite.to_vec();
    all.push(WorkloadSpec::empty());
    let opts = crate::harness::HarnessOptions {
        threads,
        ..opts.clone()
    };
    let records = crate::harness::run_suite(&all, &opts, progress)?;
    let report = validate(cal, suite, &records)?;
    Ok((report, records))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::{calibrate, tiny_options};
    use crate::harness::HarnessOptions;
    use crate::workload::parse_workload_name;

    #[test]
    fn embedded_suite_parses_and_is_disjoint_from_probes() {
        let suite = embedded_holdout_suite().unwrap();
        assert!(suite.len() >= 4);
        let kinds: Vec<String> = suite.iter().map(|s| s.identity().kind).collect();
        for k in ["gemm", "conv2d", "kernel", "graph"] {
            assert!(kinds.iter().any(|x| x == k), "{k} missing from {kinds:?}");
        }
        for quick in [true, false] {
            let size = if quick { 896 } else { 1536 };
            let probe = parse_workload_name(&format!("gemm:m={size}:n={size}:k={size}")).unwrap();
            let fp = probe.identity().fingerprint();
            assert!(suite.iter().all(|s| s.identity().fingerprint() != fp));
        }
    }

    #[test]
    fn loop_produces_a_consistent_report() {
        let cal = calibrate(&tiny_options(1), &mut |_| {}).unwrap();
        let suite = vec![
            parse_workload_name("gemm:m=16:n=16:k=16").unwrap(),
            parse_workload_name("kernel:softmax:rows=4:cols=32").unwrap(),
            parse_workload_name("kernel:logaddexp:n=64").unwrap(),
        ];
        let opts = HarnessOptions {
            min_iterations: 3,
            time_budget_ns: 1_000_000,
            progress: false,
            llc_bytes: Some(1 << 16),
            ..HarnessOptions::new(1)
        };
        let (rep, recs) = measure_and_validate(&cal, "p.toml", &suite, &opts, &mut |_| {}).unwrap();
        assert_eq!(recs.len(), 4);
        assert_eq!(rep.rows.len(), 3);
        assert_eq!(rep.variants.len(), 2);
        assert_eq!(rep.variants[0].label, ROOFLINE);
        for r in &rep.rows {
            assert!((r.ratio - r.measured_p50_s / r.predicted_s).abs() < 1e-12);
            assert!((r.ape_pct - r.signed_error_pct.abs()).abs() < 1e-12);
            assert!(r.predicted_with_floor_s.unwrap() >= r.predicted_s);
        }
        let v = &rep.variants[0];
        assert!(v.max_ape_pct >= v.median_ape_pct && v.max_ape_pct >= v.mean_ape_pct);
        // The kernel without a FLOP count is memory-bound by construction.
        assert_eq!(rep.rows[2].predicted_bound, "memory");
        let json = serde_json::to_value(&rep).unwrap();
        assert_eq!(json["schema_version"], 1);
        // A holdout equal to the probe GEMM (64³ in tiny options) is refused.
        let clash = vec![parse_workload_name("gemm:m=64:n=64:k=64").unwrap()];
        assert!(matches!(
            measure_and_validate(&cal, "p.toml", &clash, &opts, &mut |_| {}),
            Err(MeasureError::Overlap { .. })
        ));
    }
}
