//! GPU validation: a holdout suite measured on the GPU against the Core's roofline with the
//! calibrated profile's ceilings ([`GpuProfile::hardware_spec`]), plus the measured launch
//! floor (not fitted). Every row shows its error; where no single roof binds (a launch-bound
//! call, a working set inside L2, compute and memory times within 2× of each other, a GEMM
//! with fewer output tiles than SMs) the row says which, as the disagreement's likely
//! cause, and is kept out of the summary of rows where one roof binds. Left out: any
//! correction of the prediction toward the measurement.

use crate::bench::{run_gpu_suite, GemmDtype, GpuHarnessOptions, GpuWorkload};
use crate::calibrate::{probe_workloads, GpuProfile};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use serde::Serialize;
use tensorforge_core::dtype::DType;
use tensorforge_core::roofline::{roofline, Bound};
use tensorforge_store::Record;

/// Version of [`GpuValidationReport`]'s JSON.
pub const GPU_VALIDATION_SCHEMA_VERSION: u32 = 1;

/// The embedded holdout suite: GEMMs of other shapes than the probes' (square, skinny,
/// small), each dtype, and the generated kernels at sizes far beyond L2, with two small
/// ones where the launch floor dominates.
pub const HOLDOUT: &[&str] = &[
    "gemm:m=6144:n=6144:k=6144:dtype=bf16",
    "gemm:m=16384:n=1024:k=4096:dtype=bf16",
    "gemm:m=2048:n=8192:k=1024:dtype=fp16",
    "gemm:m=3072:n=5120:k=4096:dtype=tf32",
    "gemm:m=4096:n=2048:k=2048:dtype=fp32",
    "gemm:m=128:n=4096:k=4096:dtype=bf16",
    "gemm:m=512:n=512:k=512:dtype=fp32",
    "kernel:softmax:rows=16384:cols=4096",
    "kernel:rmsnorm:rows=32768:cols=4096",
    "kernel:logaddexp:rows=8192:cols=8192",
    "kernel:swiglu:rows=8192:cols=8192",
    "kernel:quantize:rows=8192:cols=8192",
    "kernel:softmax:rows=64:cols=1024",
    "copy:bytes=402653184",
];

/// The GPU workload specs of a holdout file: one per line, `#` starts a comment, blank
/// lines ignored.
///
/// ```
/// let s = tensorforge_cuda::validate::spec_lines("# suite\ncopy:bytes=1024  # small\n\n");
/// assert_eq!(s, vec!["copy:bytes=1024"]);
/// ```
pub fn spec_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Relative error under which a row where one roof binds counts as predicted.
pub const TOLERANCE: f64 = 0.15;

/// One holdout workload, predicted and measured.
#[derive(Debug, Clone, Serialize)]
pub struct GpuValidationRow {
    /// Workload name.
    pub workload: String,
    /// Which roof the model says binds.
    pub bound: Bound,
    /// Roofline time, s.
    pub roofline_s: f64,
    /// Roofline time plus the measured launch floor, s (the prediction).
    pub predicted_s: f64,
    /// Measured median, s.
    pub measured_p50_s: f64,
    /// `(measured − predicted) / predicted`, %.
    pub error_pct: f64,
    /// Whether a single roof binds (no reason below to expect disagreement).
    pub one_roof_binds: bool,
    /// Why the roofline is not expected to hold here, when it is not.
    pub likely_cause: Option<String>,
    /// `|error| ≤ 15 %`.
    pub within_tolerance: bool,
}

/// What `validate --device cuda` reports.
#[derive(Debug, Clone, Serialize)]
pub struct GpuValidationReport {
    /// Always [`GPU_VALIDATION_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `model-vs-measurement`.
    pub evidence: String,
    /// The GPU (its UUID matches the profile's).
    pub gpu: crate::device::GpuInfo,
    /// Every row.
    pub rows: Vec<GpuValidationRow>,
    /// Rows where one roof binds.
    pub single_roof_rows: usize,
    /// Of those, within [`TOLERANCE`].
    pub single_roof_within_tolerance: usize,
    /// Mean absolute error over those rows, %.
    pub single_roof_mape_pct: Option<f64>,
    /// The measurements.
    pub records: Vec<Record>,
    /// What the prediction omits.
    pub omits: Vec<String>,
}

fn core_dtype(d: GemmDtype) -> DType {
    match d {
        GemmDtype::Fp32 => DType::Fp32,
        GemmDtype::Tf32 => DType::Tf32,
        GemmDtype::Fp16 => DType::Fp16,
        GemmDtype::Bf16 => DType::Bf16,
        GemmDtype::Fp8 => DType::Fp8,
    }
}

/// The prediction for `w` on `p`: (bound, roofline seconds, why one roof may not bind).
pub fn predict(w: &GpuWorkload, p: &GpuProfile) -> Result<(Bound, f64, Option<String>)> {
    let hw = p.hardware_spec()?;
    let bytes = w.bytes();
    let floor_s = p.launch_floor_ns * 1e-9;
    let l2 = p.gpu.l2_bytes as f64;
    let (bound, t, mut cause) = match *w {
        GpuWorkload::Gemm { m, n, k, dtype } => {
            let flops = w.flops().unwrap_or(0.0);
            // Only DRAM is charged (the L2 roof would be charged the same bytes).
            let r = roofline(&hw, core_dtype(dtype), flops, bytes, &[("l2", 0.0)])
                .map_err(|e| CudaError::invalid(&w.name(), "roofline", "…", e.to_string()))?;
            let ratio = r.compute_time_s / r.memory_time_s;
            let tiles = m.div_ceil(128) * n.div_ceil(128);
            let cause = if tiles < u64::from(p.gpu.sm_count) {
                Some(format!(
                    "{tiles} output tiles of 128 × 128 for {} SMs: the GEMM cannot fill the GPU (wave quantization, not in the roofline)",
                    p.gpu.sm_count
                ))
            } else if (0.5..=2.0).contains(&ratio) {
                Some(format!(
                    "compute and memory times within 2× ({:.2}): the roofline assumes they overlap perfectly",
                    ratio
                ))
            } else {
                let _ = k;
                None
            };
            (r.bound, r.time_lower_bound_s, cause)
        }
        GpuWorkload::RmsnormSwiglu {
            tokens,
            d_model,
            d_ff,
        } => {
            let flops = w.flops().unwrap_or(0.0);
            let r = roofline(&hw, DType::Fp32, flops, bytes, &[("l2", 0.0)])
                .map_err(|e| CudaError::invalid(&w.name(), "roofline", "…", e.to_string()))?;
            // h = RMSNorm(x) is written once and read by both GEMMs; g and u are written
            // by the GEMMs and read by SwiGLU: 4·(3·T·D + 4·T·F) bytes the compulsory count
            // leaves out.
            let (t, d, f) = (tokens as f64, d_model as f64, d_ff as f64);
            let extra = 4.0 * (3.0 * t * d + 4.0 * t * f);
            let cause = (extra > 0.1 * bytes).then(|| {
                format!(
                    "four launches with h, g and u in HBM: {:.1} MB beyond the {:.1} MB the roofline charges",
                    extra / 1e6,
                    bytes / 1e6
                )
            });
            (r.bound, r.time_lower_bound_s, cause)
        }
        GpuWorkload::Graph(_) => {
            let flops = w.flops().unwrap_or(0.0);
            let t = if flops > 0.0 {
                roofline(&hw, DType::Fp32, flops, bytes.max(1.0), &[("l2", 0.0)])
                    .map_err(|e| CudaError::invalid(&w.name(), "roofline", "…", e.to_string()))?
                    .time_lower_bound_s
            } else {
                bytes / p.hbm_copy_bytes_per_s
            };
            (
                Bound::Memory,
                t,
                Some("a whole program: one launch floor per kernel, kernels run on the host and their copies are not in the roofline".into()),
            )
        }
        GpuWorkload::Kernel { .. } | GpuWorkload::Copy { .. } => {
            // No FLOP count for these kernels: the memory roof alone, bytes / copy bandwidth.
            (Bound::Memory, bytes / p.hbm_copy_bytes_per_s, None)
        }
    };
    if cause.is_none() && bytes < 2.0 * l2 {
        cause = Some(format!(
            "the working set ({:.1} MB) is within twice L2 ({:.1} MB): L2, not HBM, may serve part of it",
            bytes / 1e6,
            l2 / 1e6
        ));
    }
    if cause.is_none() && t < 10.0 * floor_s {
        cause = Some(format!(
            "launch-bound: the roofline time ({:.1} µs) is under 10 launch floors ({:.1} µs each)",
            t * 1e6,
            floor_s * 1e6
        ));
    }
    Ok((bound, t, cause))
}

/// Measure the holdout `specs` on `gpu` and compare with `profile`'s prediction. The
/// profile must be this GPU's (same UUID), and no holdout workload may be a probe.
pub fn validate_gpu(
    gpu: &Gpu,
    profile: &GpuProfile,
    specs: &[String],
    o: &GpuHarnessOptions,
) -> Result<GpuValidationReport> {
    if profile.gpu.uuid != gpu.info.uuid {
        return Err(CudaError::invalid(
            "GPU profile",
            "gpu.uuid",
            &profile.gpu.uuid,
            format!(
                "the profile was calibrated on another GPU; this is {} ({})",
                gpu.info.name, gpu.info.uuid
            ),
        ));
    }
    let suite = specs
        .iter()
        .map(|s| GpuWorkload::parse(s))
        .collect::<Result<Vec<_>>>()?;
    let probes = probe_workloads();
    if let Some(w) = suite.iter().find(|w| probes.contains(w)) {
        return Err(CudaError::invalid(
            "holdout",
            "workload",
            w.name(),
            "is a calibration probe; holdout and calibration must not overlap",
        ));
    }
    let records = run_gpu_suite(gpu, &suite, o)?;
    let floor_s = profile.launch_floor_ns * 1e-9;
    let mut rows = vec![];
    for (w, r) in suite.iter().zip(&records) {
        let (bound, t, cause) = predict(w, profile)?;
        let predicted_s = t + floor_s;
        let measured = r.stats.p50_ns * 1e-9;
        let error_pct = (measured - predicted_s) / predicted_s * 100.0;
        rows.push(GpuValidationRow {
            workload: w.name(),
            bound,
            roofline_s: t,
            predicted_s,
            measured_p50_s: measured,
            error_pct,
            one_roof_binds: cause.is_none(),
            likely_cause: cause,
            within_tolerance: error_pct.abs() <= TOLERANCE * 100.0,
        });
    }
    let single: Vec<&GpuValidationRow> = rows.iter().filter(|r| r.one_roof_binds).collect();
    let mape = (!single.is_empty())
        .then(|| single.iter().map(|r| r.error_pct.abs()).sum::<f64>() / single.len() as f64);
    Ok(GpuValidationReport {
        schema_version: GPU_VALIDATION_SCHEMA_VERSION,
        evidence: "model-vs-measurement".into(),
        gpu: gpu.info.clone(),
        single_roof_rows: single.len(),
        single_roof_within_tolerance: single.iter().filter(|r| r.within_tolerance).count(),
        single_roof_mape_pct: mape,
        rows,
        records,
        omits: vec![
            "launch latency beyond one measured empty launch, and the tail of a partial wave"
                .into(),
            "L2 residency: only HBM is a roof for the prediction".into(),
            "cuBLAS's choice of kernel per shape: every GEMM is charged the 8192³ rate".into(),
            "clock changes between calibration and measurement (NVML clocks are recorded)".into(),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::GPU_PROFILE_SCHEMA_VERSION;
    use crate::device::GpuInfo;

    /// A made-up H200-like profile: 4 TB/s copy, 12 TB/s L2, bf16 800 TFLOP/s.
    fn profile() -> GpuProfile {
        GpuProfile {
            schema_version: GPU_PROFILE_SCHEMA_VERSION,
            gpu: GpuInfo {
                ordinal: 0,
                name: "test".into(),
                uuid: "GPU-test".into(),
                compute_capability: (9, 0),
                sm_count: 132,
                memory_bytes: 141 << 30,
                l2_bytes: 50 << 20,
                driver_api_version: 12080,
                driver_version: None,
                sm_clock_mhz: None,
                memory_clock_mhz: None,
                power_limit_w: None,
            },
            hbm_copy_bytes_per_s: 4e12,
            l2_read_bytes_per_s: 12e12,
            fp32_fma_flops_per_s: 60e12,
            mma_sync_bf16_flops_per_s: 600e12,
            gemm_flops_per_s: [
                ("fp32".to_string(), 50e12),
                ("tf32".to_string(), 400e12),
                ("fp16".to_string(), 800e12),
                ("bf16".to_string(), 800e12),
            ]
            .into_iter()
            .collect(),
            launch_floor_ns: 4000.0,
            probes: vec![],
            omits: vec![],
        }
    }

    #[test]
    fn predictions_are_the_roofline_and_say_where_it_should_not_hold() {
        let p = profile();
        // bf16 6144³: 2·6144³ = 4.638e11 FLOP / 8e14 = 579.8 µs; bytes 3·6144²·2 = 226.5 MB /
        // 4e12 = 56.6 µs: compute-bound, one roof.
        let w = GpuWorkload::parse("gemm:m=6144:n=6144:k=6144:dtype=bf16").unwrap();
        let (b, t, cause) = predict(&w, &p).unwrap();
        assert_eq!(b, Bound::Compute);
        assert!((t - 2.0 * 6144f64.powi(3) / 8e14).abs() < 1e-12, "{t}");
        assert!(cause.is_none(), "{cause:?}");
        // Softmax 16384 × 4096: 2 · 4 · 2^26 B = 536.9 MB / 4e12 = 134.2 µs, memory-bound.
        let w = GpuWorkload::parse("kernel:softmax:rows=16384:cols=4096").unwrap();
        let (b, t, cause) = predict(&w, &p).unwrap();
        assert_eq!(b, Bound::Memory);
        assert!((t - 8.0 * 16384.0 * 4096.0 / 4e12).abs() < 1e-12);
        assert!(cause.is_none());
        // 512³ fp32: 16 tiles for 132 SMs.
        let w = GpuWorkload::parse("gemm:m=512:n=512:k=512:dtype=fp32").unwrap();
        assert!(predict(&w, &p)
            .unwrap()
            .2
            .unwrap()
            .contains("16 output tiles"));
        // A 64 × 1024 softmax: 512 KiB, inside L2.
        let w = GpuWorkload::parse("kernel:softmax:rows=64:cols=1024").unwrap();
        assert!(predict(&w, &p).unwrap().2.unwrap().contains("L2"));
    }

    #[test]
    fn the_holdout_suite_parses_and_avoids_the_probes() {
        let probes = probe_workloads();
        for s in HOLDOUT {
            let w = GpuWorkload::parse(s).unwrap();
            assert!(!probes.contains(&w), "{s}");
        }
    }

    #[test]
    fn profiles_round_trip_and_bad_ones_name_the_field() {
        let p = profile();
        let text = serde_json::to_string(&p).unwrap();
        let q = GpuProfile::from_json_str(&text, "p.json").unwrap();
        assert_eq!(q.hbm_copy_bytes_per_s, 4e12);
        let bad = text.replace("4000000000000.0", "-1.0");
        let e = GpuProfile::from_json_str(&bad, "p.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("p.json") && e.contains("hbm_copy_bytes_per_s"),
            "{e}"
        );
        let hw = q.hardware_spec().unwrap();
        assert_eq!(hw.peak_for(DType::Bf16).unwrap(), 800e12);
    }
}
