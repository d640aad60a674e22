//! GPU calibration: probes that measure the ceilings the roofline needs, on this GPU, into
//! a versioned profile. HBM copy bandwidth (`cuMemcpyDtoD` of 1 GiB, bytes read plus
//! written), L2 read bandwidth (a kernel re-reading a buffer of a quarter of L2), the f32
//! FMA peak (a kernel of independent FMA chains), the launch floor (an empty kernel timed
//! alone), and each dtype's GEMM rate through cuBLAS (8192³). Each figure is the best
//! sample's rate, and each probe's samples are kept. Left out: clocks are not locked (NVML's
//! clocks at open are recorded), shared-memory bandwidth, fp8, sparsity.

use crate::bench::{CublasGemm, GemmDtype, GpuHarnessOptions, Timer};
use crate::device::{Gpu, GpuInfo};
use crate::error::{CudaError, Result};
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use serde::Serialize;
use std::collections::BTreeMap;

/// Version of the profile JSON.
pub const GPU_PROFILE_SCHEMA_VERSION: u32 = 1;

/// The probe kernels (NVRTC, no headers).
pub const PROBE_SOURCE: &str = r#"
extern "C" __global__ void tf_empty() {}

/* Each thread reads float4s grid-strided over `n4` of them, `passes` times; the sum is
 * stored only when impossible, so the loads are not removed. */
extern "C" __global__ void tf_l2_read(const float4 *__restrict__ p, long long n4, int passes, float *out) {
    float acc = 0.0f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (int k = 0; k < passes; ++k)
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
            const float4 v = __ldcg(p + i);
            acc += v.x + v.y + v.z + v.w;
        }
    if (acc == -1.0f) out[0] = acc;
}

/* Tensor cores without memory: each warp issues 4 independent chains of
 * mma.sync m16n8k16 (bf16 inputs, f32 accumulation; 2·16·8·16 = 4096 FLOPs each), `iters`
 * rounds. sm_80 and later. On Hopper, mma.sync does not reach the rate of the wgmma
 * instructions cuBLAS uses, so this is a lower bound on the tensor-core peak there. */
extern "C" __global__ void tf_mma_bf16(int iters, float *out) {
    const unsigned a0 = 0x3f803f80u ^ threadIdx.x, a1 = 0x3f803f80u, a2 = 0x3f803f80u, a3 = 0x3f803f80u;
    const unsigned b0 = 0x3c003c00u, b1 = 0x3c003c00u ^ threadIdx.x;
    float c[4][4];
    for (int j = 0; j < 4; ++j)
        for (int q = 0; q < 4; ++q) c[j][q] = 0.0f;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    float s = 0.0f;
    for (int j = 0; j < 4; ++j)
        for (int q = 0; q < 4; ++q) s += c[j][q];
    if (s == -1.0f) out[0] = s;
}

/* 8 independent FMA chains per thread, `iters` rounds: 16 · iters FLOPs per thread. */
extern "C" __global__ void tf_fma(float seed, int iters, float *out) {
    float a0 = seed, a1 = seed + 1.0f, a2 = seed + 2.0f, a3 = seed + 3.0f;
    float a4 = seed + 4.0f, a5 = seed + 5.0f, a6 = seed + 6.0f, a7 = seed + 7.0f;
    const float m = 0.999f, c = 0.001f;
    for (int i = 0; i < iters; ++i) {
        a0 = fmaf(a0, m, c); a1 = fmaf(a1, m, c); a2 = fmaf(a2, m, c); a3 = fmaf(a3, m, c);
        a4 = fmaf(a4, m, c); a5 = fmaf(a5, m, c); a6 = fmaf(a6, m, c); a7 = fmaf(a7, m, c);
    }
    const float s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    if (s == -1.0f) out[0] = s;
}
"#;

/// One probe's result.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ProbeResult {
    /// Probe name.
    pub name: String,
    /// Work per call: bytes (bandwidth probes) or FLOPs (compute probes).
    pub work_per_call: f64,
    /// Best sample, ns.
    pub min_ns: f64,
    /// Median sample, ns.
    pub p50_ns: f64,
    /// Samples, ns.
    pub samples_ns: Vec<f64>,
    /// `work_per_call / min_ns · 1e9`: bytes/s or FLOP/s.
    pub best_rate_per_s: f64,
}

/// A calibrated GPU profile.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct GpuProfile {
    /// Always [`GPU_PROFILE_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The GPU, its clocks and power limit when calibrated.
    pub gpu: GpuInfo,
    /// HBM copy bandwidth (read + write), bytes/s.
    pub hbm_copy_bytes_per_s: f64,
    /// L2 read bandwidth, bytes/s.
    pub l2_read_bytes_per_s: f64,
    /// f32 FMA peak (CUDA cores), FLOP/s.
    pub fp32_fma_flops_per_s: f64,
    /// cuBLAS GEMM rate at 8192³ by dtype, FLOP/s.
    pub gemm_flops_per_s: BTreeMap<String, f64>,
    /// bf16 tensor cores through `mma.sync` with no memory traffic, FLOP/s (a lower bound
    /// of the tensor-core peak on Hopper, whose wgmma is faster).
    pub mma_sync_bf16_flops_per_s: f64,
    /// One empty kernel launch between two events, ns (median).
    pub launch_floor_ns: f64,
    /// Every probe's samples.
    pub probes: Vec<ProbeResult>,
    /// What the profile leaves out.
    pub omits: Vec<String>,
}

impl GpuProfile {
    /// Read a profile `calibrate --device cuda --out` wrote; `source` names it in errors.
    pub fn from_json_str(text: &str, source: &str) -> Result<GpuProfile> {
        let p: GpuProfile = serde_json::from_str(text).map_err(|e| {
            CudaError::invalid(source, "profile", "…", format!("not a GPU profile: {e}"))
        })?;
        if p.schema_version != GPU_PROFILE_SCHEMA_VERSION {
            return Err(CudaError::invalid(
                source,
                "schema_version",
                p.schema_version,
                format!("this build reads version {GPU_PROFILE_SCHEMA_VERSION}"),
            ));
        }
        for (field, v) in [
            ("hbm_copy_bytes_per_s", p.hbm_copy_bytes_per_s),
            ("l2_read_bytes_per_s", p.l2_read_bytes_per_s),
            ("fp32_fma_flops_per_s", p.fp32_fma_flops_per_s),
            ("mma_sync_bf16_flops_per_s", p.mma_sync_bf16_flops_per_s),
            ("launch_floor_ns", p.launch_floor_ns),
        ]
        .into_iter()
        .chain(p.gemm_flops_per_s.iter().map(|(k, v)| (k.as_str(), *v)))
        {
            if !(v.is_finite() && v > 0.0) {
                return Err(CudaError::invalid(
                    source,
                    field,
                    v,
                    "must be positive and finite",
                ));
            }
        }
        Ok(p)
    }

    /// The profile as a Core hardware spec: each dtype's peak is its cuBLAS GEMM rate at
    /// 8192³ (what a large GEMM attains, not the datasheet figure), DRAM is the copy
    /// bandwidth, and L2 a level with the L2 read bandwidth and the driver's L2 size.
    pub fn hardware_spec(&self) -> Result<tensorforge_core::hardware::HardwareSpec> {
        let mut peaks = serde_json::Map::new();
        for (d, r) in &self.gemm_flops_per_s {
            peaks.insert(d.clone(), (*r).into());
        }
        let v = serde_json::json!({
            "schema_version": tensorforge_core::hardware::HARDWARE_SCHEMA_VERSION,
            "name": format!("calibrated {}", self.gpu.name),
            "description": format!("calibrated by tensorforge calibrate --device cuda on {}", self.gpu.uuid),
            "peak_ops_per_s": peaks,
            "dram": {"name": "dram", "capacity_bytes": self.gpu.memory_bytes, "bandwidth_bytes_per_s": self.hbm_copy_bytes_per_s},
            "onchip": [{"name": "l2", "capacity_bytes": self.gpu.l2_bytes, "bandwidth_bytes_per_s": self.l2_read_bytes_per_s}],
        });
        let hw: tensorforge_core::hardware::HardwareSpec = serde_json::from_value(v)
            .map_err(|e| CudaError::invalid("GPU profile", "hardware", "…", e.to_string()))?;
        hw.validate()
            .map_err(|e| CudaError::invalid("GPU profile", "hardware", "…", e.to_string()))?;
        Ok(hw)
    }
}

/// The workloads the probes measure (a holdout suite must not contain them): the GEMMs at
/// 8192³ and 4096³ (quick) of every dtype and the copies of 1 GiB and 256 MiB.
pub fn probe_workloads() -> Vec<crate::bench::GpuWorkload> {
    use crate::bench::GpuWorkload;
    let mut v = vec![
        GpuWorkload::Copy { bytes: 1 << 30 },
        GpuWorkload::Copy { bytes: 256 << 20 },
    ];
    for d in [8192u64, 4096] {
        for dtype in [
            GemmDtype::Fp32,
            GemmDtype::Tf32,
            GemmDtype::Fp16,
            GemmDtype::Bf16,
        ] {
            v.push(GpuWorkload::Gemm {
                m: d,
                n: d,
                k: d,
                dtype,
            });
        }
    }
    v
}

fn probe(name: &str, work: f64, samples: Vec<f64>) -> Result<ProbeResult> {
    let mut s = samples.clone();
    s.sort_by(f64::total_cmp);
    let min = *s.first().ok_or_else(|| CudaError::Measurement {
        what: name.into(),
        reason: "no samples".into(),
    })?;
    if min.is_nan() || min <= 0.0 {
        return Err(CudaError::Measurement {
            what: name.into(),
            reason: format!("a sample of {min} ns"),
        });
    }
    Ok(ProbeResult {
        name: name.into(),
        work_per_call: work,
        min_ns: min,
        p50_ns: s[s.len() / 2],
        samples_ns: samples,
        best_rate_per_s: work / min * 1e9,
    })
}

/// Run every probe on `gpu`; `quick` takes fewer samples and a smaller GEMM (4096³).
pub fn calibrate_gpu(gpu: &Gpu, quick: bool) -> Result<GpuProfile> {
    let (ptx, _) = crate::nvrtc::compile_ptx_cached(PROBE_SOURCE, "probes", gpu.info.arch())?;
    let module = gpu
        .ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
        .map_err(CudaError::driver("loading the probes"))?;
    let f = |n: &str| {
        module
            .load_function(n)
            .map_err(CudaError::driver(format!("loading {n}")))
    };
    let (empty, l2, fma, mma) = (
        f("tf_empty")?,
        f("tf_l2_read")?,
        f("tf_fma")?,
        f("tf_mma_bf16")?,
    );
    let o = GpuHarnessOptions {
        warmup: 3,
        min_iterations: if quick { 10 } else { 30 },
        time_budget_ns: if quick { 50_000_000 } else { 300_000_000 },
        flush_l2: false,
        run_id: String::new(),
        labels: BTreeMap::new(),
    };
    let mut timer = Timer::new(gpu, false)?;
    let mut flushed = Timer::new(gpu, true)?;
    let sms = gpu.info.sm_count.max(1);
    let mut sink: CudaSlice<f32> = gpu
        .stream
        .alloc_zeros(1)
        .map_err(CudaError::driver("allocating"))?;
    let mut probes = vec![];

    // Launch floor.
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    let s = timer.samples(&o, &mut || {
        let mut b = gpu.stream.launch_builder(&empty);
        // SAFETY: tf_empty takes no parameters.
        unsafe { b.launch(one) }.map_err(CudaError::driver("launching"))?;
        Ok(())
    })?;
    probes.push(probe("launch_floor", 0.0, s)?);

    // HBM copy: 1 GiB (256 MiB with quick), read and written.
    let bytes: usize = if quick { 256 << 20 } else { 1 << 30 };
    let src: CudaSlice<u8> = gpu
        .stream
        .alloc_zeros(bytes)
        .map_err(CudaError::driver("allocating"))?;
    let mut dst: CudaSlice<u8> = gpu
        .stream
        .alloc_zeros(bytes)
        .map_err(CudaError::driver("allocating"))?;
    let s = flushed.samples(&o, &mut || {
        gpu.stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(CudaError::driver("cuMemcpyDtoDAsync"))
    })?;
    probes.push(probe("hbm_copy", 2.0 * bytes as f64, s)?);
    drop((src, dst));

    // L2 read: a quarter of L2, 64 passes.
    let l2_bytes = (gpu.info.l2_bytes.max(4 << 20) / 4) as usize & !15;
    let buf: CudaSlice<f32> = gpu
        .stream
        .alloc_zeros(l2_bytes / 4)
        .map_err(CudaError::driver("allocating"))?;
    let n4 = (l2_bytes / 16) as i64;
    let passes = 64i32;
    let cfg = LaunchConfig {
        grid_dim: (sms * 4, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let s = timer.samples(&o, &mut || {
        let mut b = gpu.stream.launch_builder(&l2);
        b.arg(&buf).arg(&n4).arg(&passes).arg(&mut sink);
        // SAFETY: (float4 pointer to n4 float4s, n4, passes, one float) as declared.
        unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching"))?;
        Ok(())
    })?;
    probes.push(probe("l2_read", l2_bytes as f64 * f64::from(passes), s)?);
    drop(buf);

    // FMA peak: 8 blocks of 256 threads per SM, 4096 rounds of 8 FMAs.
    let iters = 4096i32;
    let seed = 1.0f32;
    let cfg = LaunchConfig {
        grid_dim: (sms * 8, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let threads = f64::from(sms * 8 * 256);
    let s = timer.samples(&o, &mut || {
        let mut b = gpu.stream.launch_builder(&fma);
        b.arg(&seed).arg(&iters).arg(&mut sink);
        // SAFETY: (float, int, float pointer) as declared.
        unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching"))?;
        Ok(())
    })?;
    probes.push(probe("fp32_fma", threads * 16.0 * f64::from(iters), s)?);

    // Tensor cores through mma.sync: 8 blocks of 256 threads (8 warps) per SM.
    let mma_iters = 2048i32;
    let s = timer.samples(&o, &mut || {
        let mut b = gpu.stream.launch_builder(&mma);
        b.arg(&mma_iters).arg(&mut sink);
        // SAFETY: (int, float pointer) as declared.
        unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching"))?;
        Ok(())
    })?;
    let warps = f64::from(sms * 8 * 8);
    probes.push(probe(
        "mma_sync_bf16",
        warps * f64::from(mma_iters) * 4.0 * 4096.0,
        s,
    )?);

    // cuBLAS per dtype.
    let d: u64 = if quick { 4096 } else { 8192 };
    let mut gemm = BTreeMap::new();
    for dtype in [
        GemmDtype::Fp32,
        GemmDtype::Tf32,
        GemmDtype::Fp16,
        GemmDtype::Bf16,
    ] {
        let mut g = CublasGemm::new(gpu, d, d, d, dtype)?;
        let s = timer.samples(&o, &mut || g.run(gpu))?;
        let p = probe(
            &format!("gemm_{}", dtype.label()),
            2.0 * (d as f64).powi(3),
            s,
        )?;
        gemm.insert(dtype.label().to_string(), p.best_rate_per_s);
        probes.push(p);
    }
    let rate = |n: &str| {
        probes
            .iter()
            .find(|p| p.name == n)
            .map(|p| p.best_rate_per_s)
            .unwrap_or(0.0)
    };
    Ok(GpuProfile {
        schema_version: GPU_PROFILE_SCHEMA_VERSION,
        gpu: gpu.info.clone(),
        hbm_copy_bytes_per_s: rate("hbm_copy"),
        l2_read_bytes_per_s: rate("l2_read"),
        fp32_fma_flops_per_s: rate("fp32_fma"),
        mma_sync_bf16_flops_per_s: rate("mma_sync_bf16"),
        gemm_flops_per_s: gemm,
        launch_floor_ns: probes[0].p50_ns,
        probes,
        omits: vec![
            "clocks are not locked: a GPU boosting differently gives other figures".into(),
            "fp8 GEMM (cuBLASLt) and structured sparsity".into(),
            "shared-memory and L1 bandwidth".into(),
            "the copy probe's read and write share HBM: its rate is read + write bytes".into(),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvrtc::compile_ptx;

    /// The probes compile for Ampere and Hopper, with the entry points the calibration
    /// launches.
    #[test]
    fn the_probe_kernels_compile_for_sm_80_and_sm_90() {
        if !crate::nvrtc::nvrtc_available() {
            assert!(!crate::nvrtc::nvrtc_required(), "NVRTC required but absent");
            println!("SKIPPED: NVRTC cannot be loaded here");
            return;
        }
        for arch in crate::nvrtc::TEST_ARCHS {
            let ptx = compile_ptx(PROBE_SOURCE, "probes", arch).unwrap();
            let names: Vec<String> = crate::nvrtc::ptx_entries(&ptx)
                .into_iter()
                .map(|e| e.name)
                .collect();
            for n in ["tf_empty", "tf_l2_read", "tf_fma", "tf_mma_bf16"] {
                assert!(names.iter().any(|x| x == n), "{arch}: {n} not in {names:?}");
            }
            assert!(ptx.contains("mma.sync.aligned.m16n8k16"), "{arch}");
        }
    }
}
