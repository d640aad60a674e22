//! Validation: predicts each holdout workload from a calibrated profile with the pure
//! roofline (per operation `max(FLOPs / peak, bytes / bandwidth)`, summed over the
//! workload's operations; no fitted term) and compares with the measured p50. A second,
//! labelled variant adds a fixed floor: the measured p50 of an empty call through the same
//! harness path, which is never fitted to the holdout set. Errors are reported per workload
//! (signed error, absolute percentage error, ratio) and summarized (median, mean, max APE).
//! The roofline is a lower bound on time only if the calibrated ceilings are ceilings: every
//! workload measured faster than its prediction is flagged as a [`CeilingViolation`] (the
//! calibration evidence is wrong or incomplete), never reported as a normal ratio.
//! The roofline leaves out what [`LIMITATIONS`] lists.

use crate::calibrate::Calibration;
use crate::error::{MeasureError, Result};
use crate::workload::WorkloadSpec;
use serde::{Deserialize, Serialize};
use tensorforge_core::{roofline, Bound, DType};
use tensorforge_store::Record;

/// Version of the validation report JSON. 2 added `ValidationRow::ceiling_violated`,
/// `ValidationRow::roof` and `ValidationReport::ceiling_violations`.
pub const VALIDATION_SCHEMA_VERSION: u32 = 2;

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
    /// The roof (or roofs, summed over operations) the prediction uses, e.g.
    /// `fp32 compute peak 123.4 GFLOP/s` or `DRAM bandwidth 12.3 GB/s`.
    #[serde(default)]
    pub roof: String,
    /// True when the measurement beat its roofline lower bound (`measured_p50_s <
    /// predicted_s`): the calibration's ceilings are wrong or incomplete for this workload.
    #[serde(default)]
    pub ceiling_violated: bool,
}

/// A holdout workload measured faster than its roofline lower bound allows: the calibrated
/// ceilings are not ceilings for it (a probe missed a faster unit, a cache level served the
/// data, or the machine was slower during calibration).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CeilingViolation {
    /// Workload name.
    pub workload: String,
    /// The roof that bounds it (see [`ValidationRow::roof`]).
    pub roof: String,
    /// Roofline lower bound, s.
    pub predicted_s: f64,
    /// Measured p50, s.
    pub measured_s: f64,
    /// `predicted_s / measured_s · 100` (above 100 means the roof was beaten).
    pub percent_of_roofline: f64,
}

impl CeilingViolation {
    /// One line: `ceiling violated: W ran at 211.4 % of its calibrated roof (R); the
    /// calibration evidence is wrong or incomplete`.
    pub fn message(&self) -> String {
        format!(
            "ceiling violated: {} ran at {:.1} % of its calibrated roof ({}); the calibration evidence is wrong or incomplete",
            self.workload, self.percent_of_roofline, self.roof
        )
    }
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
    /// Every row whose measurement beat its roofline lower bound, in row order.
    #[serde(default)]
    pub ceiling_violations: Vec<CeilingViolation>,
    /// What the model omits.
    pub limitations: Vec<String>,
}

/// A roofline prediction with its parts.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// Pure roofline time, s: `Σ_ops max(FLOPs / peak, bytes / bandwidth)`.
    pub time_s: f64,
    /// Which roof binds (for multi-op workloads: the side with more predicted time).
    pub bound: String,
    /// Time of the operations bound by compute, s.
    pub compute_s: f64,
    /// Time of the operations bound by memory, s.
    pub memory_s: f64,
    /// The roof(s) used, in words with their values.
    pub roof: String,
}

/// Pure roofline time of a workload on the profile, with its parts and roof description.
pub fn predict_detail(cal: &Calibration, spec: &WorkloadSpec) -> Result<Prediction> {
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
    let peak = hw.peak_for(DType::Fp32)?;
    let peak_txt = format!("fp32 compute peak {:.1} GFLOP/s", peak / 1e9);
    let bw_txt = format!("DRAM bandwidth {:.1} GB/s", bw / 1e9);
    let roof = match (compute > 0.0, memory > 0.0) {
        (true, false) => peak_txt,
        (false, true) => bw_txt,
        _ => format!(
            "per-operation roofs summed: {:.0} % of the time at the {peak_txt}, {:.0} % at the {bw_txt}",
            100.0 * compute / total,
            100.0 * memory / total
        ),
    };
    Ok(Prediction {
        time_s: total,
        bound: Bound::classify(compute, memory).label().to_string(),
        compute_s: compute,
        memory_s: memory,
        roof,
    })
}

/// Pure roofline time of a workload on the profile, s, and its bound label.
pub fn predict(cal: &Calibration, spec: &WorkloadSpec) -> Result<(f64, String)> {
    let p = predict_detail(cal, spec)?;
    Ok((p.time_s, p.bound))
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
        let prediction = predict_detail(cal, spec)?;
        let (predicted, bound) = (prediction.time_s, prediction.bound);
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
            roof: prediction.roof,
            ceiling_violated: measured < predicted,
        });
    }
    let ceiling_violations = rows
        .iter()
        .filter(|r| r.ceiling_violated)
        .map(|r| CeilingViolation {
            workload: r.workload.clone(),
            roof: r.roof.clone(),
            predicted_s: r.predicted_s,
            measured_s: r.measured_p50_s,
            percent_of_roofline: r.predicted_s / r.measured_p50_s * 100.0,
        })
        .collect();
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
        ceiling_violations,
        limitations: LIMITATIONS.iter().map(|s| s.to_string()).collect(),
    })
}

/// The holdout suite compiled into the binary (examples/holdout.toml).
pub const EMBEDDED_HOLDOUT_TOML: &str = include_str!("../data/holdout.toml");

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
            for size in crate::calibrate::CalibrateOptions::new(2, quick).gemm_sizes() {
                let probe =
                    parse_workload_name(&format!("gemm:m={size}:n={size}:k={size}")).unwrap();
                let fp = probe.identity().fingerprint();
                assert!(
                    suite.iter().all(|s| s.identity().fingerprint() != fp),
                    "{size}"
                );
                // Nor a GEMM preset (gemm_large_square is 1024³, gemm_tiny 128³).
                for (name, ..) in tensorforge_core::presets::GEMM_PRESETS {
                    let p = parse_workload_name(name).unwrap();
                    assert_ne!(p.identity().fingerprint(), fp, "{name}");
                }
            }
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
        assert_eq!(json["schema_version"], 2);
        assert_eq!(
            json["ceiling_violations"].as_array().unwrap().len(),
            rep.rows.iter().filter(|r| r.ceiling_violated).count()
        );
        for r in &rep.rows {
            assert_eq!(r.ceiling_violated, r.measured_p50_s < r.predicted_s);
            assert!(!r.roof.is_empty());
        }
        // A holdout equal to the probe GEMM (64³ in tiny options) is refused.
        let clash = vec![parse_workload_name("gemm:m=64:n=64:k=64").unwrap()];
        assert!(matches!(
            measure_and_validate(&cal, "p.toml", &clash, &opts, &mut |_| {}),
            Err(MeasureError::Overlap { .. })
        ));
    }

    #[test]
    fn beating_the_roof_is_flagged() {
        let mut cal = calibrate(&tiny_options(1), &mut |_| {}).unwrap();
        let suite = vec![
            parse_workload_name("gemm:m=16:n=16:k=16").unwrap(),
            parse_workload_name("kernel:logaddexp:n=64").unwrap(),
            WorkloadSpec::empty(),
        ];
        let opts = HarnessOptions {
            min_iterations: 3,
            time_budget_ns: 1_000_000,
            progress: false,
            llc_bytes: Some(1 << 16),
            ..HarnessOptions::new(1)
        };
        let records = crate::harness::run_suite(&suite, &opts, &mut |_| {}).unwrap();
        // Ceilings of 1 FLOP/s and 1 B/s: the 16³ GEMM (8192 FLOPs, 3·16·16·4 = 3072 B)
        // would need at least 8192 s, logaddexp (12·64 = 768 B) 768 s. Both ran in far
        // less, so both beat their roofs.
        cal.profile.peak_ops_per_s.insert(DType::Fp32, 1.0);
        cal.profile.dram.bandwidth_bytes_per_s = Some(1.0);
        let rep = validate(&cal, &suite, &records).unwrap();
        assert_eq!(rep.ceiling_violations.len(), 2);
        assert!(rep.rows.iter().all(|r| r.ceiling_violated));
        let g = &rep.ceiling_violations[0];
        assert_eq!(g.workload, "gemm:m=16:n=16:k=16");
        assert_eq!(g.roof, "fp32 compute peak 0.0 GFLOP/s");
        assert_eq!(g.predicted_s, 8192.0);
        assert!((g.percent_of_roofline - 8192.0 / g.measured_s * 100.0).abs() < 1e-6);
        assert!(g.percent_of_roofline > 100.0);
        let k = &rep.ceiling_violations[1];
        assert_eq!(k.roof, "DRAM bandwidth 0.0 GB/s");
        assert_eq!(k.predicted_s, 768.0);
        let m = k.message();
        assert!(
            m.starts_with("ceiling violated: kernel:logaddexp:n=64 ran at ")
                && m.contains("% of its calibrated roof (DRAM bandwidth 0.0 GB/s)")
                && m.ends_with("the calibration evidence is wrong or incomplete"),
            "{m}"
        );
        // Ceilings of 1e30: nothing is violated.
        cal.profile.peak_ops_per_s.insert(DType::Fp32, 1e30);
        cal.profile.dram.bandwidth_bytes_per_s = Some(1e30);
        let rep = validate(&cal, &suite, &records).unwrap();
        assert!(rep.ceiling_violations.is_empty());
        assert!(rep.rows.iter().all(|r| !r.ceiling_violated));
        // A multi-op workload names both roofs.
        let attn = parse_workload_name("attention:transformer_small").unwrap();
        let p = predict_detail(&cal, &attn).unwrap();
        assert!(
            p.roof.starts_with("per-operation roofs summed"),
            "{}",
            p.roof
        );
        assert!((p.compute_s + p.memory_s - p.time_s).abs() <= 1e-12 * p.time_s);
    }
}
