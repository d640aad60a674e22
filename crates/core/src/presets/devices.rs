//! Real devices: dense (never 2:4-sparse) peaks, DRAM and on-chip capacities, each figure
//! taken from `shared/reference/hardware-specs.md` and tabled with its source in
//! docs/hardware.md. A figure no source gives is left out and named in the preset's notes.
//!
//! Conventions (also in docs/hardware.md):
//! - Peaks are literal FLOP/s (OP/s for int8/int4): 1 TFLOP/s = 1e12.
//! - Bandwidths are decimal: 3350 GB/s = 3.35e12 B/s.
//! - DRAM capacity is the vendor's printed number times 1e9 (decimal GB) for every device,
//!   even where a vendor writes GiB; real devices report slightly more, so this is a
//!   conservative figure.
//! - On-chip capacities are binary (KiB/MiB) for NVIDIA, AMD and Google, whose tuning guides,
//!   ROCm tables and scaling-book state KiB/MiB; decimal for Tenstorrent, whose docs print
//!   "1.5 MB" per Tensix core without saying more.
//! - The first on-chip level is the tile buffer used by the SRAM-fit check, per instance.
//!   No source gives an on-chip bandwidth, so on-chip levels add no roofline roofs.
//! - Interconnect bandwidths are per device and **unidirectional** (vendors print the duplex
//!   figure, twice that): NVLink 4's "900 GB/s" is stored as 450e9 B/s. Only the H100 SXM,
//!   H200, A100 SXM, MI300X and TPU v5e carry one; every other preset says in its notes why
//!   it has none.

use crate::dtype::DType;
use crate::hardware::{HardwareSpec, Interconnect, MemoryLevel, PeArray};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GB: u64 = 1_000_000_000;

/// A compact description of one device; `build` turns it into a `HardwareSpec`.
struct Device<'a> {
    name: &'a str,
    description: &'a str,
    /// Dense peaks in FLOP/s (OP/s for integers).
    peaks: &'a [(DType, f64)],
    dram_bytes_per_s: f64,
    dram_capacity_bytes: u64,
    /// `(name, capacity of one instance in bytes, instances)`, innermost first.
    onchip: &'a [(&'a str, u64, u64)],
    pe_array: Option<PeArray>,
    /// Device-to-device fabric (unidirectional bandwidths), when sourced.
    interconnect: Option<Interconnect>,
    sources: &'a [&'a str],
    notes: &'a [&'a str],
}

impl Device<'_> {
    /// Build the spec: DRAM level named `dram`, on-chip levels without bandwidth.
    fn build(self) -> HardwareSpec {
        HardwareSpec {
            schema_version: crate::hardware::HARDWARE_SCHEMA_VERSION,
            name: self.name.into(),
            description: self.description.into(),
            peak_ops_per_s: self.peaks.iter().copied().collect(),
            dram: MemoryLevel {
                name: "dram".into(),
                capacity_bytes: Some(self.dram_capacity_bytes),
                bandwidth_bytes_per_s: Some(self.dram_bytes_per_s),
                instances: 1,
            },
            onchip: self
                .onchip
                .iter()
                .map(|&(name, bytes, instances)| MemoryLevel {
                    name: name.into(),
                    capacity_bytes: Some(bytes),
                    bandwidth_bytes_per_s: None,
                    instances,
                })
                .collect(),
            pe_array: self.pe_array,
            sources: self
                .sources
                .iter()
                .map(|s| s.to_string())
                // The fabric's latency figures carry their own source.
                .chain(
                    self.interconnect
                        .as_ref()
                        .and_then(|i| i.latency_source.clone()),
                )
                .collect(),
            interconnect: self.interconnect,
            notes: self.notes.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// A grid of `arrays` square 128×128 MXUs, one MAC per PE per cycle (Google TPUs).
fn mxu_grid(arrays: u64, clock_hz: f64) -> Option<PeArray> {
    Some(PeArray {
        rows: 128,
        cols: 128,
        macs_per_pe_per_cycle: 1,
        clock_hz,
        arrays,
    })
}

/// A fabric: `name`, unidirectional bytes/s per device, the per-peer limit (direct links),
/// links per device and devices per domain; no latency figures ([`nvlink`] adds them).
fn fabric(
    name: &str,
    unidirectional_bytes_per_s: f64,
    peer_unidirectional_bytes_per_s: Option<f64>,
    links: Option<u64>,
    domain_devices: Option<u64>,
) -> Option<Interconnect> {
    Some(Interconnect {
        name: name.into(),
        unidirectional_bytes_per_s,
        peer_unidirectional_bytes_per_s,
        links,
        domain_devices,
        collective_latency_s: None,
        step_latency_s: None,
        latency_source: None,
    })
}

/// NCCL's latency model for collectives inside one NVLink domain: its default tuner
/// constants for the ring algorithm and the LL protocol (the lowest-latency protocol, which
/// its tuner picks for the small messages of decode): a fixed 6.6 µs per collective call
/// (`baseLatencies[Ring][LL]`) plus 0.6 µs per step over NVLink (`hwLatencies[NVLINK][Ring][LL]`).
const NCCL_NVLINK_LL: (f64, f64) = (6.6e-6, 0.6e-6);
const NCCL_TUNING: &str = "[NCCL-TUNING] NVIDIA/nccl@5067397c2676d5aed50042fc39e5c8ee96eb0027:src/graph/tuning.cc (ncclTunerConstantsDefaults: baseLatencies[Ring][LL] = 6.6 us, hwLatencies[NVLINK][Ring][LL] = 0.6 us)";

/// [`fabric`] for an NVLink domain, with NCCL's latencies ([`NCCL_NVLINK_LL`]).
fn nvlink(
    name: &str,
    unidirectional_bytes_per_s: f64,
    links: Option<u64>,
    domain_devices: Option<u64>,
) -> Option<Interconnect> {
    let mut f = fabric(
        name,
        unidirectional_bytes_per_s,
        None,
        links,
        domain_devices,
    )?;
    f.collective_latency_s = Some(NCCL_NVLINK_LL.0);
    f.step_latency_s = Some(NCCL_NVLINK_LL.1);
    f.latency_source = Some(NCCL_TUNING.into());
    Some(f)
}

// Source keys, exactly as shared/reference/hardware-specs.md gives them.
const STAS: &str = "[STAS] stas00/ml-engineering@744d01e18b79512572f64a6bbd8b5f4a725203a7:compute/accelerator/README.md";
const NV_H100_JP: &str =
    "[NV-H100-JP] https://archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html";
const GK_H100: &str = "[GK-H100] https://glennklockwood.com/garden/processors/h100";
const GK_A100: &str = "[GK-A100] https://glennklockwood.com/garden/processors/A100";
const NUMBA_AMP: &str = "[NUMBA-AMP] https://github.com/numba/numba/issues/7897";
const SCALING: &str =
    "[SCALING] jax-ml/scaling-book@0819a7d8c55ddc113f5cba0285a5f97380cac1e3:tpus.md";
// Interconnect sources (docs/hardware.md, "Interconnect").
const STAS_NET: &str =
    "[STAS-NET] stas00/ml-engineering@744d01e18b79512572f64a6bbd8b5f4a725203a7:network/README.md";

/// Every real-device preset, in a fixed order (NVIDIA, Apple, Tenstorrent, AMD, Google).
pub fn devices() -> Vec<HardwareSpec> {
    vec![
        nvidia_h100_sxm(),
        nvidia_h100_pcie(),
        nvidia_h200(),
        nvidia_a100_sxm(),
        nvidia_l4(),
        nvidia_rtx_4090(),
        rtx_3050_laptop(),
        apple_m3_max(),
        tenstorrent_wormhole_n150(),
        tenstorrent_blackhole_p150(),
        amd_mi300x(),
        google_tpu_v4(),
        google_tpu_v5e(),
        google_tpu_v5p(),
    ]
}

fn nvidia_h100_sxm() -> HardwareSpec {
    Device {
        name: "nvidia_h100_sxm",
        description: "NVIDIA H100 SXM5 80 GB (GH100, 132 SMs, HBM3, up to 700 W)",
        peaks: &[
            (DType::Fp32, 66.9e12),
            (DType::Tf32, 494.7e12),
            (DType::Bf16, 989.4e12),
            (DType::Fp16, 989.4e12),
            (DType::Fp8, 1978.9e12),
            (DType::Int8, 1978.9e12),
        ],
        dram_bytes_per_s: 3.35e12,
        dram_capacity_bytes: 80 * GB,
        onchip: &[("smem_per_sm", 228 * KIB, 132), ("l2", 50 * MIB, 1)],
        pe_array: None,
        interconnect: nvlink("nvlink4", 450e9, Some(18), Some(8)),
        sources: &[
            NV_H100_JP,
            GK_H100,
            STAS,
            "[LLMA] cli99/llm-analysis:llm_analysis/gpu_configs/h100-sxm-80gb.json",
            STAS_NET,
        ],
        notes: &[
            "dense: the datasheet's 989* TF32, 1,979* BF16/FP16 and 3,958* FP8/INT8 are 2:4-sparse; dense is half",
            "tensor peaks at the 1830 MHz tensor rating clock: 528 TCs x 512 FMA x 2 x 1.83 GHz = 989.4e12 (derived check, [STAS]); FP32 66.9e12 = 16896 lanes x 2 x 1.98 GHz max boost (derived check)",
            "int4 left out: Hopper has no INT4 tensor path",
            "DRAM: 3.35 TB/s = 3.35e12 B/s (older material's 3.0 TB/s is superseded); vendor '80 GB' stored as 80e9 bytes (decimal)",
            "tile buffer smem_per_sm: 228 KiB maximum shared-memory carve-out of the 256 KiB L1/shared array, x 132 SMs; l2: 50 MiB (Hopper tuning guide via [STAS]); register file not counted",
            "interconnect nvlink4: 900 GB/s bidirectional per GPU ([NV-H100-JP]) = 450e9 B/s each way over 18 links ([STAS-NET]); NVSwitch gives every pair the full bandwidth (no peer limit); domain 8 = one HGX/DGX H100 board, eight GPUs through four NVSwitch chips ([STAS-NET]); the PCIe Gen5 host link (128 GB/s bidirectional) is not modelled",
        ],
    }
    .build()
}

fn nvidia_h100_pcie() -> HardwareSpec {
    Device {
        name: "nvidia_h100_pcie",
        description: "NVIDIA H100 PCIe 80 GB (GH100, 114 SMs, HBM2e, 300-350 W)",
        peaks: &[
            (DType::Fp32, 51e12),
            (DType::Tf32, 378e12),
            (DType::Bf16, 756e12),
            (DType::Fp16, 756e12),
            (DType::Fp8, 1513e12),
            (DType::Int8, 1513e12),
        ],
        dram_bytes_per_s: 2.0e12,
        dram_capacity_bytes: 80 * GB,
        onchip: &[("smem_per_sm", 228 * KIB, 114), ("l2", 50 * MIB, 1)],
        pe_array: None,
        interconnect: None,
        sources: &[
            NV_H100_JP,
            STAS,
            "[MANUALS-H100PCIe] https://manuals.plus/m/56b0c3ef7d0a1c470c0af8f05a0bd1f29a778007472ba941201fbbb185c9bccd",
            "[LLMA] cli99/llm-analysis:llm_analysis/gpu_configs/h100-pcie-80gb.json",
            "[VD-SPECS] VladislavDuma/gpu_specs@103f3414c70a935b52b5315fb974f093d966768b:README.md",
        ],
        notes: &[
            "dense: the datasheet's 756* TF32, 1,513* BF16/FP16 and 3,026* FP8/INT8 are 2:4-sparse; dense is half",
            "NVIDIA's clock for this SKU was not seen; 756e12 / (114 SMs x 4096 FLOP/clk) implies a ~1.62 GHz tensor rating clock (derived)",
            "int4 left out: Hopper has no INT4 tensor path",
            "DRAM: NVIDIA says 'greater than 2,000 GB/s', stored as 2.0e12 B/s (some tools use 2048e9); memory is HBM2e per NVIDIA's table; vendor '80 GB' stored as 80e9 bytes (decimal)",
            "tile buffer smem_per_sm: 228 KiB maximum shared-memory carve-out x 114 SMs; l2: 50 MiB",
            "interconnect left out: NVIDIA gives NVLink 600 GB/s (bidirectional) and PCIe Gen5 128 GB/s ([NV-H100-JP]), but the NVLink bridge joins a few cards only and no source read says how many; give an [interconnect] table in a hardware file",
        ],
    }
    .build()
}

fn nvidia_h200() -> HardwareSpec {
    Device {
        name: "nvidia_h200",
        description: "NVIDIA H200 SXM 141 GB (GH100, 132 SMs, HBM3e, 700 W)",
        peaks: &[
            (DType::Fp32, 66.9e12),
            (DType::Tf32, 494.7e12),
            (DType::Bf16, 989.4e12),
            (DType::Fp16, 989.4e12),
            (DType::Fp8, 1978.9e12),
            (DType::Int8, 1978.9e12),
        ],
        dram_bytes_per_s: 4.8e12,
        dram_capacity_bytes: 141 * GB,
        onchip: &[("smem_per_sm", 228 * KIB, 132), ("l2", 50 * MIB, 1)],
        pe_array: None,
        interconnect: nvlink("nvlink4", 450e9, Some(18), Some(8)),
        sources: &[
            STAS,
            "[LZW-H200] https://lzwjava.github.io/nvidia-h200-gpu-specs-en",
            "[MLC-H200] https://raw.githubusercontent.com/mlcommons/inference_results_v4.1/main/closed/NVIDIA/systems/H200-SXM-141GBx8_TRT_MaxQ.json",
            "[GEEK-H200] https://geektopia.es/es/technology/2023/11/13/noticias/nvidia-anuncia-la-aceleradora-h200-tiene-141-gb-de-hbm3e.html",
            NV_H100_JP,
            GK_H100,
            STAS_NET,
        ],
        notes: &[
            "compute identical to H100 SXM ([STAS] note 16), so the H100 SXM dense figures are reused; some sellers' 'dense' 1.97 PFLOPS FP16 is the sparse figure",
            "clock not published by NVIDIA (3rd-party 1930-1980 MHz max boost, uncertain); the figures assume the H100 SXM's 1830 MHz tensor rating clock",
            "int4 left out: Hopper has no INT4 tensor path",
            "DRAM: 4.8 TB/s = 4.8e12 B/s; vendor '141 GB' (sold capacity; 144 GB physical) stored as 141e9 bytes (decimal)",
            "tile buffer smem_per_sm: 228 KiB carve-out of the 256 KiB L1/shared array, x 132 SMs (same Hopper SM as H100: carve-out from [NV-H100-JP], 256 KiB and 50 MiB L2 from [STAS])",
            "interconnect nvlink4 as on H100 SXM: 18 links, 450e9 B/s each way, 900 GB/s duplex ([STAS-NET] NVLink 4 row: H100, H200, GH200); NVSwitch, no peer limit; domain 8 = an 8-GPU HGX H200 board ([MLC-H200]: H200-SXM-141GBx8, [STAS-NET] 8x H200 node)",
        ],
    }
    .build()
}

fn nvidia_a100_sxm() -> HardwareSpec {
    Device {
        name: "nvidia_a100_sxm",
        description: "NVIDIA A100 SXM4 80 GB (GA100, 108 SMs, HBM2e, 400 W)",
        peaks: &[
            (DType::Fp32, 19.5e12),
            (DType::Tf32, 156e12),
            (DType::Bf16, 312e12),
            (DType::Fp16, 312e12),
            (DType::Int8, 624e12),
        ],
        dram_bytes_per_s: 2.039e12,
        dram_capacity_bytes: 80 * GB,
        onchip: &[("smem_per_sm", 164 * KIB, 108), ("l2", 40 * MIB, 1)],
        pe_array: None,
        interconnect: nvlink("nvlink3", 300e9, Some(12), None),
        sources: &[
            GK_A100,
            STAS,
            "[LLMA] cli99/llm-analysis:llm_analysis/gpu_configs/a100-sxm-80gb.json",
            "[THUNDER-A100] https://www.thundercompute.com/blog/nvidia-a100-specs-full-guide",
            "[GGANG-A100] https://ggangliu.cn/2023/06/25/nvidia-ampere-architecture.html",
            "[FUDZ-A100] https://fudzilla.com./news/ai/50832-nvidia-unveils-the-a100-tensor-core-gpu",
            NUMBA_AMP,
            STAS_NET,
        ],
        notes: &[
            "dense: 312 TF32, 624 BF16/FP16 and 1248 INT8 are the 2:4-sparse figures; dense is half",
            "1410 MHz boost: 432 TCs x 256 FMA x 2 x 1.41 GHz = 311.9e12 (derived check, [STAS])",
            "fp8 left out: Ampere has no FP8; int4 left out: no source read gives an A100 INT4 figure",
            "DRAM: 2039 GB/s = 2.039e12 B/s ([STAS] rounds to 2.0 TB/s); vendor '80 GB' stored as 80e9 bytes (decimal)",
            "tile buffer smem_per_sm: 164 KiB maximum shared-memory carve-out of the 192 KiB L1/shared array (Ampere tuning guide via [NUMBA-AMP]) x 108 SMs; l2: 40 MiB (40 960 KB, [FUDZ-A100])",
            "interconnect nvlink3: 12 links, 300e9 B/s each way, 600 GB/s duplex ([STAS-NET]); NVSwitch, no peer limit; domain_devices left out: no source read states the board size",
        ],
    }
    .build()
}

fn nvidia_l4() -> HardwareSpec {
    Device {
        name: "nvidia_l4",
        description: "NVIDIA L4 24 GB (AD104, GDDR6 192-bit, 72 W)",
        peaks: &[
            (DType::Fp32, 30.3e12),
            (DType::Tf32, 60e12),
            (DType::Bf16, 121e12),
            (DType::Fp16, 121e12),
            (DType::Fp8, 242e12),
            (DType::Int8, 242e12),
        ],
        dram_bytes_per_s: 300e9,
        dram_capacity_bytes: 24 * GB,
        onchip: &[],
        pe_array: None,
        interconnect: None,
        sources: &[
            "[WZ-SPECS] winston-zhang-orz/gpu-specs@097f0fb34b7530bb7aa83535e5170a4c6701b5d7:specs.md",
            "[VD-SPECS] VladislavDuma/gpu_specs@103f3414c70a935b52b5315fb974f093d966768b:README.md",
            "[SRC-L4] https://store.sourcecode.com/en-us/bg-bucket-compare/125/9820",
            "[FPS-L4] https://fpsbench.com/compare/gpu/nvidia-l4-vs-nvidia-tesla-m40",
        ],
        notes: &[
            "dense: the datasheet's 120* TF32, 242* BF16/FP16 and 485* FP8/INT8 are 2:4-sparse; dense is half",
            "data-center part: FP16/BF16 with FP32 accumulate runs at the full tensor rate",
            "int4 left out: no source read gives an L4 INT4 figure",
            "DRAM: 300 GB/s = 300e9 B/s; vendor '24 GB' stored as 24e9 bytes (decimal)",
            "on-chip levels left out: the only L2 (48 MB) and L1 (128 KB/SM) figures are 3rd-party, the SM count is uncertain (58 vs 60) and no source gives the shared-memory carve-out; give an SRAM capacity (`sram_bytes`) for the SRAM-fit check",
            "interconnect left out: no NVLink; the PCIe link rate is not given by a source read",
        ],
    }
    .build()
}

fn nvidia_rtx_4090() -> HardwareSpec {
    Device {
        name: "nvidia_rtx_4090",
        description: "NVIDIA GeForce RTX 4090 24 GB (AD102, 128 SMs, GDDR6X 384-bit, 2520 MHz boost, 450 W)",
        peaks: &[
            (DType::Fp32, 82.6e12),
            (DType::Tf32, 82.6e12),
            (DType::Bf16, 165.2e12),
            (DType::Fp16, 165.2e12),
            (DType::Fp8, 330.3e12),
            (DType::Int8, 660.6e12),
        ],
        dram_bytes_per_s: 1008e9,
        dram_capacity_bytes: 24 * GB,
        onchip: &[],
        pe_array: None,
        interconnect: None,
        sources: &[
            "[GH-RTXBW] GitHub doc (index id 70233061975) quoting NVIDIA RTX Blackwell whitepaper App. A",
            "[GH-ADA-TABLE] GitHub doc (index id 52619783155)",
            "[WAREDB-4090] https://waredb.com/processor/nvidia-geforce-rtx-4090",
            "[VD-SPECS] VladislavDuma/gpu_specs@103f3414c70a935b52b5315fb974f093d966768b:README.md",
            "[FPSR-4090] https://www.thefpsreview.com/gpu-family/nvidia-geforce-rtx-4090-gpu-family-specifications",
            "[TECHGOING-4090] https://www.techgoing.com/nvidia-rtx-4090-gaming-graphics-cards-break-100-tflops-for-the-first-time/?amp=1",
            "[GIST-MS] https://gist.github.com/mikasenghaas/d63ded03f1f0417b1677627119bacc0d",
        ],
        notes: &[
            "GeForce: bf16/fp16 = 165.2e12 is the FP32-accumulate dense rate (what PyTorch GEMMs reach); FP16-accumulate runs 2x (330.3e12, not used)",
            "fp8 330.3e12 is the FP32-accumulate dense rate ([WAREDB-4090] 3rd-party, [GH-ADA-TABLE]); FP16-accumulate 660.6e12 not used",
            "tf32 82.6e12 per [WAREDB-4090] (3rd-party) and [GH-ADA-TABLE]; [VD-SPECS]' 165/330 is the sparse pair",
            "int4 left out: no source read gives an RTX 4090 INT4 figure",
            "DRAM: 1008 GB/s = 1.008e12 B/s; vendor '24 GB' stored as 24e9 bytes (decimal)",
            "on-chip levels left out: the maximum shared-memory carve-out for cc 8.9 is not confirmed by any source read (L1/shared 128 KB per SM and L2 72 MB are sourced, but listing L2 alone would make it the tile buffer); give an SRAM capacity (`sram_bytes`) for the SRAM-fit check",
            "interconnect left out: no NVLink; the PCIe link rate is not given by a source read",
        ],
    }
    .build()
}

fn rtx_3050_laptop() -> HardwareSpec {
    Device {
        name: "rtx_3050_laptop",
        description: "NVIDIA GeForce RTX 3050 Laptop GPU, 4 GB SKU (2021, GA107, 16 SMs, GDDR6 128-bit), 80 W TGP at 1740 MHz boost",
        peaks: &[
            (DType::Fp32, 7.13e12),
            (DType::Tf32, 7.13e12),
            (DType::Bf16, 14.25e12),
            (DType::Fp16, 14.25e12),
            (DType::Int8, 57.02e12),
        ],
        dram_bytes_per_s: 192e9,
        dram_capacity_bytes: 4 * GB,
        onchip: &[("smem_per_sm", 100 * KIB, 16), ("l2", 2 * MIB, 1)],
        pe_array: None,
        interconnect: None,
        sources: &[
            "[HMC-3050-80W] https://hmc-tech.com/gpu/nvidia-geforce-rtx-4050-laptop-30w-vs-nvidia-geforce-rtx-3050-laptop-80w",
            "[HMC-3050-50W] https://hmc-tech.com/gpu/nvidia-geforce-rtx-3050-laptop-50w-vs-apple-8-core-m1",
            "[NBC-3050-leak] https://notebookcheck.com/Ein-Leak-verraet-weitere-Specs-der-Nvidia-GeForce-RTX-3050-Laptop-GPU.529463.0.html",
            "[NBC-3050-6G] https://notebookcheck.com/GeForce-RTX-3050-6GB-Laptop-GPU-vs-A570M-vs-A550M_11576_11610_11309.247532.0.html",
            "[PCM-3050] https://pcmasters.de/news/133711354-geforce-rtx-3050-und-rtx-3050-ti-fuer-notebooks.html",
            NUMBA_AMP,
            "[GIST-GETIANAO] https://gist.521000.best/getianao",
            "[TC-3050] http://technicalcity.b-cdn.net/en/video/GeForce-RTX-2050-mobile-vs-GeForce-RTX-3050-mobile-Refresh-4-GB",
        ],
        notes: &[
            "assumes the 4 GB SKU (2048 CUDA cores, 16 SMs) at the top 80 W TGP, 1740 MHz boost; OEMs set 35-80 W (1057-1740 MHz), e.g. at 50 W / 1417 MHz: fp32 5.8e12, fp16/bf16 11.61e12; the 6 GB 96-bit refresh is a different SKU",
            "all peaks are 3rd-party ([HMC-3050-80W]); fp32 7.13e12 = 2048 x 2 x 1.74 GHz, fp16/bf16 14.25e12 = 16 SMs x 512 FLOP/clk x 1.74 GHz (derived checks)",
            "GeForce: bf16/fp16 = 14.25e12 is the FP32-accumulate dense rate (what PyTorch GEMMs reach); FP16-accumulate runs 2x (28.51e12, not used); int8 114.03e12 is sparse",
            "fp8 left out: Ampere has no FP8; int4 left out: no source read gives an INT4 figure",
            "DRAM: 192 GB/s (GPU-Z, 128-bit x 12 Gb/s); NVIDIA does not publish laptop memory speed (OEM-dependent); vendor '4 GB' stored as 4e9 bytes (decimal)",
            "tile buffer smem_per_sm: 100 KiB maximum shared-memory carve-out for cc 8.6 (Ampere tuning guide via [NUMBA-AMP]) x 16 SMs; l2: 2 MiB (3rd-party, [TC-3050])",
            "interconnect left out: a laptop GPU, one device",
        ],
    }
    .build()
}

fn apple_m3_max() -> HardwareSpec {
    Device {
        name: "apple_m3_max",
        description: "Apple M3 Max, 16-core CPU / 40-core GPU (GPU only), 128 GB unified LPDDR5 configuration",
        peaks: &[(DType::Fp32, 14.3e12), (DType::Fp16, 14.3e12)],
        dram_bytes_per_s: 400e9,
        dram_capacity_bytes: 128 * GB,
        onchip: &[],
        pe_array: None,
        interconnect: None,
        sources: &[
            "[APPLE-MBP] https://support.apple.com/en-au/117737",
            "[EENEWS-M3] https://www.eenewseurope.com/en/apple-unveils-m3-processor-threeseome-for-mac-computers/",
            "[HMC-M3MAX] https://hmc-tech.com/gpu/apple-32-core-m4-max-vs-apple-40-core-m3-max",
            "[RADARGIT] https://radargit.com/2025/03/15/apple-m3-max-gpu-40-core-benchmark-and-specs",
        ],
        notes: &[
            "Apple publishes no GPU TFLOPS: fp32 14.3e12 (5120 ALUs x 2 x 1398 MHz) is 3rd-party ([HMC-M3MAX]); [RADARGIT] (3rd-party) gives 16.4e12 at 1600 MHz; the often-quoted 49 TFLOPS has no source",
            "fp16 = fp32 rate (no 2x half-precision rate), 3rd-party ([HMC-M3MAX])",
            "bf16, tf32, fp8, int8, int4 left out: not published by Apple or any source read; the Neural Engine is not modelled",
            "DRAM: 400 GB/s (Apple, 40-core GPU configuration; the 30-core GPU M3 Max has 300 GB/s), shared with the CPU; 'up to 128 GB' stored as 128e9 bytes (decimal)",
            "on-chip levels left out: Apple publishes no GPU cache or threadgroup-memory sizes; give an SRAM capacity (`sram_bytes`) for the SRAM-fit check",
            "interconnect left out: one device (unified memory shared with the CPU)",
        ],
    }
    .build()
}

fn tenstorrent_wormhole_n150() -> HardwareSpec {
    Device {
        name: "tenstorrent_wormhole_n150",
        description: "Tenstorrent Wormhole n150 (one Wormhole ASIC, 72 Tensix cores at 1 GHz, 12 GB GDDR6, 160 W)",
        peaks: &[(DType::Fp16, 74e12), (DType::Fp8, 262e12)],
        dram_bytes_per_s: 288e9,
        dram_capacity_bytes: 12 * GB,
        onchip: &[("l1_per_tensix", 1_500_000, 72)],
        pe_array: None,
        interconnect: None,
        sources: &[
            "[TT-WH] https://docs.tenstorrent.com/aibs/wormhole/specifications.html",
            "[TT-METAL] https://github.com/tenstorrent/tt-metal/blob/main/METALIUM_GUIDE.md",
            "[TT-VSCODE] https://docs.tenstorrent.com/tt-vscode-toolkit/version-compat/",
            "[HWLUXX-TT] https://www.hardwareluxx.de/index.php/news/hardware/grafikkarten/65873-tenstorrent-dev-day-blackhole-mit-neuen-riscv-kernen-k%C3%B6nnen-bestellt-werden.html",
        ],
        notes: &[
            "72 Tensix cores per [TT-WH] (the ASIC has 80; [TT-VSCODE]'s 'N150 80' conflicts with the spec page)",
            "fp16 74e12 and fp8 262e12 per [TT-WH]; the spec page does not say which math fidelity each assumes (fp8 ~3.5x fp16 is unlike GPUs): uncertain",
            "BLOCKFP8 148e12 left out (block-scaled formats are not modelled); bf16, fp32, tf32, int8, int4 left out: not published",
            "DRAM: 288 GB/s = 288e9 B/s; vendor '12 GB' stored as 12e9 bytes (decimal)",
            "tile buffer l1_per_tensix: 1.5 MB software-managed SRAM per Tensix core, taken as 1.5e6 bytes (the docs print MB) x 72 = 108 MB",
            "interconnect left out: the Ethernet ports' rate and direction are not given by a source read",
        ],
    }
    .build()
}

fn tenstorrent_blackhole_p150() -> HardwareSpec {
    Device {
        name: "tenstorrent_blackhole_p150",
        description: "Tenstorrent Blackhole p150a/p150b (140 Tensix cores at up to 1.35 GHz as presented at Hot Chips 2024, 32 GB GDDR6, 300 W)",
        peaks: &[(DType::Fp16, 372e12), (DType::Fp8, 745e12)],
        dram_bytes_per_s: 512e9,
        dram_capacity_bytes: 32 * GB,
        onchip: &[("l1_per_tensix", 1_500_000, 140)],
        pe_array: None,
        interconnect: None,
        sources: &[
            "[TT-BH] https://docs.tenstorrent.com/_sources/aibs/blackhole/specifications.md.txt",
            "[TT-FW] https://docs.tenstorrent.com/tt-system-firmware/_sources/boards/tenstorrent/tt_blackhole/doc/index.rst.txt",
            "[REG-BH] https://www.theregister.com/2024/08/27/tenstorrent_ai_blackhole/",
            "[SN-BH] https://servernews.ru/1136519",
            "[AA-BH] https://awesomeagents.ai/hardware/tenstorrent-blackhole-p150a",
            "[STH-BH] https://servethehome.com/tenstorrent-blackhole-and-metalium-for-standalone-ai-processing",
        ],
        notes: &[
            "figures assume 140 active Tensix cores: fp16 372e12 and fp8 745e12 are the Hot Chips 2024 chip figures as reported by [REG-BH]",
            "firmware caveat: a 2026 firmware reduced p150a/p150b to 120 active Tensix cores ([SN-BH]); 3rd-party figures at 120 cores are 332e12 BF16 and 664e12 BLOCKFP8 ([AA-BH]); on that firmware expect about 120/140 of these peaks and 180 MB of SRAM",
            "BLOCKFP8 left out (block-scaled formats are not modelled); bf16 left out (only a 3rd-party 120-core figure, which would mix core counts); fp32, tf32, int8, int4 left out: not published",
            "DRAM: 512 GB/s = 512e9 B/s (the '1 TB/s' sometimes quoted is the Ethernet aggregate); vendor '32 GB' stored as 32e9 bytes (decimal)",
            "tile buffer l1_per_tensix: 1.5 MB software-managed SRAM per Tensix core, taken as 1.5e6 bytes (the docs print MB) x 140 = 210 MB",
            "interconnect left out: [REG-BH]'s 1 TB/s Ethernet aggregate does not say its direction or how much one peer gets",
        ],
    }
    .build()
}

fn amd_mi300x() -> HardwareSpec {
    Device {
        name: "amd_mi300x",
        description: "AMD Instinct MI300X OAM 192 GB (CDNA 3, 304 CUs on 8 XCDs, 2100 MHz peak engine clock, HBM3, 750 W)",
        peaks: &[
            (DType::Fp32, 163.4e12),
            (DType::Tf32, 653.7e12),
            (DType::Bf16, 1307.4e12),
            (DType::Fp16, 1307.4e12),
            (DType::Fp8, 2614.9e12),
            (DType::Int8, 2614.9e12),
        ],
        dram_bytes_per_s: 5.3e12,
        dram_capacity_bytes: 192 * GB,
        onchip: &[
            ("lds_per_cu", 64 * KIB, 304),
            ("l2_per_xcd", 4 * MIB, 8),
            ("infinity_cache", 256 * MIB, 1),
        ],
        pe_array: None,
        interconnect: fabric("infinity_fabric", 448e9, Some(64e9), Some(7), Some(8)),
        sources: &[
            "[ROCM-300] ROCm/ROCm@e396b4898f459db094bfd60b876f419f77eb9f09:docs/conceptual/gpu-arch/mi300.md",
            "[ROCM-SPECS] ROCm/ROCm@e396b4898f459db094bfd60b876f419f77eb9f09:docs/reference/gpu-arch-specs.rst",
            STAS,
            "[MI300X-H200] https://raw.githubusercontent.com/alpharomercoma/MI300X-vs-H200/6077fdc7bfc215171c33435b7cd76ca4c5f2b236/METHODOLOGY.md",
            STAS_NET,
        ],
        notes: &[
            "dense: AMD's 'with structured sparsity' figures are 2x these; some sites call the 2,615 FP8 figure 'FP16 dense', which is wrong",
            "1307.4e12 = 1216 matrix cores x 256 FMA x 2 x 2.1 GHz (derived check, [STAS])",
            "fp32 163.4e12 is both the vector and the matrix FP32 figure; tf32 653.7e12 is the figure ROCm labels 'Vector TF32'",
            "int4 left out: no source read gives an MI300X INT4 figure",
            "DRAM: 5.3 TB/s = 5.3e12 B/s; '192 GB' (ROCm's table says 192 GiB) stored as 192e9 bytes (decimal)",
            "tile buffer lds_per_cu: 64 KiB LDS x 304 CUs; then L2 4 MiB per XCD x 8 and 256 MiB Infinity Cache; the 32 KiB L1 vector cache and 512 KiB VGPR file per CU are not counted",
            "interconnect infinity_fabric: seven links per GPU form a fully connected 8-GPU system ([ROCM-300]), so one peer is one link: 64e9 B/s each way per link, 7 x 64e9 = 448e9 B/s to all peers, 896 GB/s duplex ([STAS-NET]); AMD prints 128 GB/s per link without a direction, read as duplex by [STAS-NET] (if it were per direction every figure would double); the 8th (scale-out) link is not counted",
        ],
    }
    .build()
}

fn google_tpu_v4() -> HardwareSpec {
    Device {
        name: "google_tpu_v4",
        description: "Google Cloud TPU v4, one chip (2 TensorCores x 4 MXUs of 128x128, 32 GiB HBM2)",
        peaks: &[(DType::Bf16, 275e12), (DType::Int8, 275e12)],
        dram_bytes_per_s: 1.2e12,
        dram_capacity_bytes: 32 * GB,
        onchip: &[],
        pe_array: mxu_grid(8, 1.05e9),
        interconnect: None,
        sources: &[
            "[GCP-v4] https://cloud.google.com/tpu/docs/v4",
            SCALING,
            "[BJL-TPUv4] https://brendanjameslynskey.github.io/Google_TPU_06_v4_OCS_SparseCore/",
            "[GK-TPUv4] https://glennklockwood.com/garden/tpuv4",
        ],
        notes: &[
            "bf16 and int8 both 275e12 ('275 teraflops (bf16 or int8)', [GCP-v4]); no 2x int8 rate on v4",
            "PE array: 8 MXUs (2 TCs x 4) of 128x128 at 1.05 GHz: 2 x 128^2 x 8 x 1.05e9 = 275.3e12 (derived); the 1.05 GHz clock is 3rd-party ([BJL-TPUv4])",
            "fp32, tf32, fp16, fp8, int4 left out: not published",
            "DRAM: 1200 GB/s = 1.2e12 B/s; Google's '32 GiB' stored as 32e9 bytes (decimal convention, 7 % under 32 GiB)",
            "on-chip levels left out: CMEM exists but its size is not confirmed in any source read, VMEM per core is not published; give an SRAM capacity (`sram_bytes`) for the SRAM-fit check",
            "interconnect left out: [SCALING] gives 4.5e10 B/s one way per ICI link and 6 links (3D torus), but Google's per-chip figure was not read",
        ],
    }
    .build()
}

fn google_tpu_v5e() -> HardwareSpec {
    Device {
        name: "google_tpu_v5e",
        description: "Google Cloud TPU v5e, one chip (1 TensorCore, 4 MXUs of 128x128 at 1.5 GHz, 16 GB HBM2)",
        peaks: &[(DType::Bf16, 197e12), (DType::Int8, 393e12)],
        dram_bytes_per_s: 819e9,
        dram_capacity_bytes: 16 * GB,
        onchip: &[("vmem", 128 * MIB, 1)],
        pe_array: mxu_grid(4, 1.5e9),
        interconnect: fabric("ici", 200e9, Some(45e9), Some(4), Some(256)),
        sources: &[
            "[GCP-v5e-old] https://cloud.Google.com/tpu/docs/v5e",
            "[GCP-v5e-new] https://docs.cloud.google.com/tpu/docs/v5e?authuser=6",
            SCALING,
            STAS,
            "[GCP-v5e-rev] http://mobile.dudasite.com/site/google8/default?url=https%3A%2F%2Fcloud.google.com%2Ftpu%2Fdocs%2Fv5e%23configurations (a copy of a later revision of Google's v5e page)",
        ],
        notes: &[
            "bf16 197e12 and int8 393e12 per Google ([STAS] and [SCALING] round int8 to 394e12)",
            "PE array: 4 MXUs of 128x128 at 1.5 GHz ([SCALING]): 2 x 128^2 x 4 x 1.5e9 = 196.6e12 (derived), within 0.2 % of 197e12; it models the bf16 rate, not int8's 2x",
            "fp32, tf32, fp16, fp8, int4 left out: not published",
            "DRAM: 819 GB/s = 819e9 B/s (Google's newer page writes '800 GiBps' = 859e9, which disagrees; 819e9 matches [SCALING]'s 8.1e11); vendor '16 GB' stored as 16e9 bytes (decimal)",
            "tile buffer vmem: 128 MiB software-managed vector memory, from [SCALING] only (not on Google's spec page)",
            "interconnect ici: Google gives 1600 Gbps per chip ([GCP-v5e-old], direction not stated) = 200e9 B/s; a later revision of the page gives 400 GBps bidirectional per chip ([GCP-v5e-rev]), i.e. 200e9 each way, so it is read as unidirectional; 4 links to the nearest neighbours of a 2D torus at 4.5e10 B/s one way each ([SCALING]; 4 x 4.5e10 = 1.8e11, 10 % under Google's figure) give the peer limit; domain 256 = one v5e pod (16x16, [GCP-v5e-old], [SCALING])",
        ],
    }
    .build()
}

fn google_tpu_v5p() -> HardwareSpec {
    Device {
        name: "google_tpu_v5p",
        description: "Google Cloud TPU v5p, one chip (2 TensorCores x 4 MXUs of 128x128, 95 GB HBM2e)",
        peaks: &[(DType::Bf16, 459e12), (DType::Int8, 918e12)],
        dram_bytes_per_s: 2.765e12,
        dram_capacity_bytes: 95 * GB,
        onchip: &[],
        pe_array: mxu_grid(8, 1.75e9),
        interconnect: None,
        sources: &[
            "[GCP-v5p] https://cloud.google.com/tpu/docs/v5p-training",
            SCALING,
            STAS,
        ],
        notes: &[
            "bf16 459e12 per [GCP-v5p]; int8 918e12 per [SCALING] and [STAS] (not visible on the stored Google page)",
            "PE array: 8 MXUs (2 TCs x 4) of 128x128; the 1.75 GHz clock is derived from the bf16 peak (Google does not publish it): 2 x 128^2 x 8 x 1.75e9 = 458.8e12; it models the bf16 rate, not int8's 2x",
            "fp32, tf32, fp16, fp8, int4 left out: not published",
            "DRAM: 2765 GB/s = 2.765e12 B/s ([SCALING] is internally inconsistent: 2.8e12 and 2.5e12); vendor '95 GB' stored as 95e9 bytes (decimal; [SCALING] says 96 GB)",
            "on-chip levels left out: VMEM and CMEM sizes are not published; give an SRAM capacity (`sram_bytes`) for the SRAM-fit check",
            "interconnect left out: [SCALING] gives 9e10 B/s one way per ICI link and 6 links (3D torus), but Google's per-chip figure was not read",
        ],
    }
    .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str) -> HardwareSpec {
        devices()
            .into_iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("missing preset {name}"))
    }

    fn peak(name: &str, d: DType) -> f64 {
        dev(name).peak_for(d).unwrap()
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn required_presets_exist_and_validate() {
        for n in [
            "nvidia_h100_sxm",
            "nvidia_h200",
            "nvidia_a100_sxm",
            "rtx_3050_laptop",
            "apple_m3_max",
            "tenstorrent_wormhole_n150",
            "tenstorrent_blackhole_p150",
            "amd_mi300x",
            "google_tpu_v5e",
        ] {
            dev(n).validate().unwrap_or_else(|e| panic!("{n}: {e}"));
        }
    }

    #[test]
    fn every_device_is_documented_and_follows_conventions() {
        for h in devices() {
            assert!(
                !h.description.is_empty() && !h.sources.is_empty() && !h.notes.is_empty(),
                "{}",
                h.name
            );
            assert_eq!(h.dram.name, "dram", "{}", h.name);
            // DRAM capacity: vendor GB x 1e9, always a whole number of decimal GB.
            let cap = h.dram.capacity_bytes.unwrap();
            assert_eq!(cap % GB, 0, "{}", h.name);
            // No source gives an on-chip bandwidth: on-chip levels must not add roofs.
            assert!(
                h.onchip.iter().all(|l| l.bandwidth_bytes_per_s.is_none()),
                "{}",
                h.name
            );
            // Every preset says in its notes how it converted the capacity.
            assert!(h.notes.iter().any(|n| n.contains("decimal")), "{}", h.name);
        }
    }

    #[test]
    fn h100_sxm_hand_checked() {
        let n = "nvidia_h100_sxm";
        // 528 tensor cores x 512 FMA/clk x 2 FLOP x 1.83e9 Hz = 989.43e12 ~ 989.4e12 (dense).
        assert_eq!(peak(n, DType::Bf16), 989.4e12);
        assert_eq!(peak(n, DType::Fp16), 989.4e12);
        assert!(close(528.0 * 512.0 * 2.0 * 1.83e9, 989.4e12, 1e-3));
        // 132 SMs x 128 FP32 lanes x 2 x 1.98e9 = 66.91e12.
        assert_eq!(peak(n, DType::Fp32), 66.9e12);
        assert!(close(132.0 * 128.0 * 2.0 * 1.98e9, 66.9e12, 1e-3));
        assert_eq!(peak(n, DType::Tf32), 494.7e12); // half of bf16
        assert_eq!(peak(n, DType::Fp8), 1978.9e12); // 2 x bf16
        assert!(dev(n).peak_for(DType::Int4).is_err()); // Hopper has no INT4
        let h = dev(n);
        assert_eq!(h.dram.bandwidth_bytes_per_s, Some(3.35e12)); // 3350 GB/s
        assert_eq!(h.dram.capacity_bytes, Some(80_000_000_000)); // "80 GB" decimal
                                                                 // Tile buffer: 228 KiB = 233 472 B per SM, 132 instances; L2 50 MiB = 52 428 800 B.
        let tb = h.tile_buffer().unwrap();
        assert_eq!(
            (tb.name.as_str(), tb.capacity_bytes, tb.instances),
            ("smem_per_sm", Some(233_472), 132)
        );
        assert_eq!(h.onchip[1].capacity_bytes, Some(52_428_800));
        assert!(h.pe_array.is_none());
    }

    #[test]
    fn h200_same_compute_as_h100_more_memory() {
        let (a, b) = (dev("nvidia_h100_sxm"), dev("nvidia_h200"));
        assert_eq!(a.peak_ops_per_s, b.peak_ops_per_s);
        assert_eq!(b.dram.bandwidth_bytes_per_s, Some(4.8e12)); // 4.8 TB/s
        assert_eq!(b.dram.capacity_bytes, Some(141_000_000_000)); // "141 GB"
    }

    #[test]
    fn a100_hand_checked() {
        let n = "nvidia_a100_sxm";
        // 432 TCs x 256 FMA x 2 x 1.41e9 = 311.9e12 ~ 312e12.
        assert_eq!(peak(n, DType::Fp16), 312e12);
        assert!(close(432.0 * 256.0 * 2.0 * 1.41e9, 312e12, 1e-3));
        assert_eq!(peak(n, DType::Int8), 624e12);
        assert!(dev(n).peak_for(DType::Fp8).is_err()); // Ampere has no FP8
                                                       // 164 KiB = 167 936 B shared-memory carve-out per SM, x 108.
        let tb = dev(n).tile_buffer().unwrap().clone();
        assert_eq!((tb.capacity_bytes, tb.instances), (Some(167_936), 108));
    }

    #[test]
    fn geforce_uses_fp32_accumulate_rate() {
        // RTX 3050 Laptop 4 GB @1740 MHz: 16 SMs x 512 FLOP/clk x 1.74e9 = 14.254e12 (FP32 acc);
        // FP16-accumulate would be 28.51e12. FP32: 2048 x 2 x 1.74e9 = 7.127e12.
        assert_eq!(peak("rtx_3050_laptop", DType::Fp16), 14.25e12);
        assert!(close(16.0 * 512.0 * 1.74e9, 14.25e12, 1e-3));
        assert!(close(
            2048.0 * 2.0 * 1.74e9,
            peak("rtx_3050_laptop", DType::Fp32),
            1e-3
        ));
        // RTX 4090: 165.2e12 FP32-acc = half of the 330.3e12 FP16-acc rate.
        assert_eq!(peak("nvidia_rtx_4090", DType::Bf16), 165.2e12);
        for n in ["rtx_3050_laptop", "nvidia_rtx_4090"] {
            assert!(
                dev(n).notes.iter().any(|s| s.contains("FP32-accumulate")),
                "{n}"
            );
        }
    }

    #[test]
    fn tpu_pe_arrays_match_stated_peaks() {
        // v5e: 4 MXUs x 128^2 PEs x 2 FLOP x 1.5e9 Hz = 196.608e12, within 5 % (0.2 %) of 197e12.
        let v5e = dev("google_tpu_v5e");
        let d = v5e.pe_array.as_ref().unwrap().peak_flops_per_s();
        assert_eq!(d, 196.608e12);
        assert!(close(d, 197e12, 0.05) && close(d, peak("google_tpu_v5e", DType::Bf16), 0.003));
        assert_eq!(v5e.dram.bandwidth_bytes_per_s, Some(819e9));
        // 128 MiB = 134 217 728 B VMEM.
        assert_eq!(v5e.tile_buffer().unwrap().capacity_bytes, Some(134_217_728));
        // v4: 8 x 128^2 x 2 x 1.05e9 = 275.25e12 vs 275e12; v5p: 8 x 128^2 x 2 x 1.75e9 = 458.75e12 vs 459e12.
        let v4 = dev("google_tpu_v4").pe_array.unwrap().peak_flops_per_s();
        assert!(close(v4, 275e12, 0.01));
        let v5p = dev("google_tpu_v5p").pe_array.unwrap().peak_flops_per_s();
        assert!(close(v5p, 459e12, 0.01));
    }

    #[test]
    fn mi300x_hand_checked() {
        // 1216 matrix cores x 256 FMA x 2 x 2.1e9 = 1307.4e12.
        assert!(close(
            1216.0 * 256.0 * 2.0 * 2.1e9,
            peak("amd_mi300x", DType::Bf16),
            1e-4
        ));
        let h = dev("amd_mi300x");
        // LDS 64 KiB x 304 CUs = 19 922 944 B; L2 4 MiB x 8 XCDs = 32 MiB.
        assert_eq!(
            h.tile_buffer().unwrap().total_capacity_bytes(),
            Some(19_922_944)
        );
        assert_eq!(h.onchip[1].total_capacity_bytes(), Some(32 * MIB));
    }

    #[test]
    fn tenstorrent_and_apple_hand_checked() {
        // Wormhole n150: 72 Tensix x 1.5e6 B = 108e6 B (the spec page's 108 MB); 288 GB/s.
        let wh = dev("tenstorrent_wormhole_n150");
        assert_eq!(
            wh.tile_buffer().unwrap().total_capacity_bytes(),
            Some(108_000_000)
        );
        assert_eq!(wh.dram.bandwidth_bytes_per_s, Some(288e9));
        // Blackhole p150 at 140 Tensix: 140 x 1.5e6 = 210e6 B; 512 GB/s, not the 1 TB/s Ethernet figure.
        let bh = dev("tenstorrent_blackhole_p150");
        assert_eq!(
            bh.tile_buffer().unwrap().total_capacity_bytes(),
            Some(210_000_000)
        );
        assert_eq!(bh.dram.bandwidth_bytes_per_s, Some(512e9));
        assert!(
            bh.notes.iter().any(|s| s.contains("120"))
                && bh.notes.iter().any(|s| s.contains("140"))
        );
        // Apple M3 Max: 5120 ALUs x 2 x 1.398e9 = 14.315e12, printed as 14.3e12 (3rd-party); no bf16;
        // no on-chip level.
        let m3 = dev("apple_m3_max");
        assert!(close(
            5120.0 * 2.0 * 1.398e9,
            m3.peak_for(DType::Fp32).unwrap(),
            2e-3
        ));
        assert!(m3.peak_for(DType::Bf16).is_err() && m3.tile_buffer().is_none());
        assert!(m3.notes.iter().any(|s| s.contains("3rd-party")));
    }

    #[test]
    fn interconnects_hand_checked() {
        let ic = |n: &str| dev(n).interconnect.unwrap();
        // NVLink 4: 900 GB/s duplex per GPU = 450e9 B/s each way, 18 links, 8 GPUs per board.
        for n in ["nvidia_h100_sxm", "nvidia_h200"] {
            let f = ic(n);
            assert_eq!(
                (f.name.as_str(), f.unidirectional_bytes_per_s, f.links),
                ("nvlink4", 450e9, Some(18))
            );
            assert_eq!(f.domain_devices, Some(8));
            // NVSwitch: a pair gets the full 450e9.
            assert_eq!(f.group_bytes_per_s(2), 450e9);
        }
        // NVLink 3: 600 GB/s duplex = 300e9 each way, 12 links.
        assert_eq!(ic("nvidia_a100_sxm").unidirectional_bytes_per_s, 300e9);
        // MI300X: 7 links x 64e9 = 448e9 each way (896 GB/s duplex); one peer is one link.
        let mi = ic("amd_mi300x");
        assert_eq!(mi.unidirectional_bytes_per_s, 7.0 * 64e9);
        assert_eq!(mi.group_bytes_per_s(2), 64e9);
        assert_eq!(mi.group_bytes_per_s(8), 448e9);
        // TPU v5e: 1600 Gbps / 8 = 200e9 B/s; 4 ICI links of 4.5e10; 256 chips per pod.
        let v5e = ic("google_tpu_v5e");
        assert_eq!(v5e.unidirectional_bytes_per_s, 1600e9 / 8.0);
        assert_eq!(v5e.group_bytes_per_s(2), 45e9);
        assert_eq!(v5e.group_bytes_per_s(8), 200e9); // min(200e9, 7·45e9 = 315e9)
        assert_eq!(v5e.domain_devices, Some(256));
    }

    #[test]
    fn every_device_has_an_interconnect_or_says_why_not() {
        for h in devices() {
            match &h.interconnect {
                Some(ic) => {
                    // The note names the fabric and the duplex figure it was halved from.
                    assert!(
                        h.notes
                            .iter()
                            .any(|n| n.starts_with(&format!("interconnect {}", ic.name))),
                        "{}",
                        h.name
                    );
                }
                None => assert!(
                    h.notes
                        .iter()
                        .any(|n| n.starts_with("interconnect left out")),
                    "{}",
                    h.name
                ),
            }
        }
    }

    #[test]
    fn no_fp16_or_bf16_peak_is_a_sparse_or_wrong_accumulate_figure() {
        // 2:4-sparse fp16/bf16 datasheet figures (2x dense), and GeForce FP16-accumulate rates.
        const WRONG: &[(f64, &str)] = &[
            (1979e12, "H100/H200 SXM sparse"),
            (1513e12, "H100 PCIe sparse"),
            (624e12, "A100 sparse"),
            (242e12, "L4 sparse"),
            (2614.9e12, "MI300X sparse"),
            (1.97e15, "H200 'dense' (mislabelled sparse)"),
            (
                330.3e12,
                "RTX 4090 FP16-accumulate / FP32-accumulate sparse",
            ),
            (28.51e12, "RTX 3050 Laptop FP16-accumulate"),
        ];
        for h in devices() {
            for d in [DType::Fp16, DType::Bf16] {
                if let Some(&p) = h.peak_ops_per_s.get(&d) {
                    for (w, why) in WRONG {
                        assert!(
                            !close(p, *w, 0.005),
                            "{} {d} = {p:e} looks like {why}",
                            h.name
                        );
                    }
                }
            }
        }
    }
}
