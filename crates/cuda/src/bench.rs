//! Measuring on a GPU: workloads (cuBLAS GEMMs by dtype, the graph compiler's generated
//! kernels, device-to-device copies), timed one call per sample between two CUDA events on
//! the device's stream, with L2 written over between samples (a buffer of twice its size
//! zeroed outside the timed region), so every sample reads its operands from HBM. Each
//! workload gives a [`Record`] whose device context is the GPU's. Left out: CUDA graphs
//! (each sample is one launch, its launch cost included), clock locking, other streams.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::kernels::compile_program_with;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use tensorforge_graph::codegen::cuda::{CudaKernel, CudaOptions, RowUnit, Storage, BLOCK_THREADS};
use tensorforge_store::{HarnessSettings, Record, RecordParts, WorkloadIdentity};

/// Element types of a cuBLAS GEMM: storage of A, B and C, and how it multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GemmDtype {
    /// f32 storage, f32 FMA.
    Fp32,
    /// f32 storage, TF32 tensor cores (`CUBLAS_COMPUTE_32F_FAST_TF32`).
    Tf32,
    /// f16 storage, f32 accumulation.
    Fp16,
    /// bf16 storage, f32 accumulation.
    Bf16,
    /// fp8 e4m3 A and B, bf16 C, f32 accumulation, through cuBLASLt (compute capability 8.9
    /// and newer). B is stored as its transpose, [n, k] (a linear layer's weight): the "TN"
    /// layout cuBLASLt's fp8 kernels take. Dimensions must be multiples of 16.
    Fp8,
}

impl GemmDtype {
    /// Name in workload specs and records.
    pub fn label(self) -> &'static str {
        match self {
            GemmDtype::Fp32 => "fp32",
            GemmDtype::Tf32 => "tf32",
            GemmDtype::Fp16 => "fp16",
            GemmDtype::Bf16 => "bf16",
            GemmDtype::Fp8 => "fp8",
        }
    }

    /// Bytes per stored element of A and B.
    pub fn bytes(self) -> u64 {
        match self {
            GemmDtype::Fp32 | GemmDtype::Tf32 => 4,
            GemmDtype::Fp16 | GemmDtype::Bf16 => 2,
            GemmDtype::Fp8 => 1,
        }
    }

    /// Bytes per stored element of C (fp8 products are written as bf16).
    pub fn out_bytes(self) -> u64 {
        match self {
            GemmDtype::Fp8 => 2,
            d => d.bytes(),
        }
    }

    fn parse(s: &str) -> Option<GemmDtype> {
        [
            GemmDtype::Fp32,
            GemmDtype::Tf32,
            GemmDtype::Fp16,
            GemmDtype::Bf16,
            GemmDtype::Fp8,
        ]
        .into_iter()
        .find(|d| d.label() == s)
    }
}

/// A kernel the graph compiler generates for the GPU benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuKernel {
    /// Softmax over rows.
    Softmax,
    /// `logaddexp(a, b)` elementwise.
    Logaddexp,
    /// RMSNorm over rows with a gain.
    Rmsnorm,
    /// `silu(g) · u` elementwise (SwiGLU's gate).
    Swiglu,
    /// Saturating int8 quantization (values kept as f32).
    Quantize,
}

impl GpuKernel {
    /// Every kernel.
    pub const ALL: [GpuKernel; 5] = [
        GpuKernel::Softmax,
        GpuKernel::Logaddexp,
        GpuKernel::Rmsnorm,
        GpuKernel::Swiglu,
        GpuKernel::Quantize,
    ];

    /// Name in workload specs.
    pub fn label(self) -> &'static str {
        match self {
            GpuKernel::Softmax => "softmax",
            GpuKernel::Logaddexp => "logaddexp",
            GpuKernel::Rmsnorm => "rmsnorm",
            GpuKernel::Swiglu => "swiglu",
            GpuKernel::Quantize => "quantize",
        }
    }

    /// The kernel as a graph (JSON) over `rows × cols` f32 values.
    pub fn graph_json(self, rows: u64, cols: u64) -> String {
        let inp = |n: &str| {
            format!(
                r#"{{"name":"{n}","op":"Input","attrs":{{"shape":[{rows},{cols}],"dtype":"fp32"}}}}"#
            )
        };
        let nodes = match self {
            GpuKernel::Softmax => format!(
                r#"{},{{"name":"y","op":"Softmax","inputs":["x"],"attrs":{{"axis":-1}}}}"#,
                inp("x")
            ),
            GpuKernel::Logaddexp => format!(
                r#"{},{},{{"name":"y","op":"LogAddExp","inputs":["a","b"]}}"#,
                inp("a"),
                inp("b")
            ),
            GpuKernel::Rmsnorm => format!(
                r#"{},{{"name":"g","op":"Weight","attrs":{{"shape":[{cols}],"dtype":"fp32"}}}},{{"name":"y","op":"RMSNorm","inputs":["x","g"],"attrs":{{"eps":1e-6}}}}"#,
                inp("x")
            ),
            GpuKernel::Swiglu => format!(
                r#"{},{},{{"name":"s","op":"SiLU","inputs":["g"]}},{{"name":"y","op":"Mul","inputs":["s","u"]}}"#,
                inp("g"),
                inp("u")
            ),
            GpuKernel::Quantize => format!(
                r#"{},{{"name":"y","op":"Quantize","inputs":["x"],"attrs":{{"scale":0.05,"zero_point":0}}}}"#,
                inp("x")
            ),
        };
        format!(
            r#"{{"schema_version":1,"name":"{}","nodes":[{nodes}]}}"#,
            self.label()
        )
    }
}

/// What `bench --device cuda` runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum GpuWorkload {
    /// `C = A·B`, row-major, through cuBLAS `GemmEx`.
    Gemm {
        /// Rows of A and C.
        m: u64,
        /// Columns of B and C.
        n: u64,
        /// Reduction dimension.
        k: u64,
        /// Storage and arithmetic.
        dtype: GemmDtype,
    },
    /// A generated kernel over `rows × cols` values stored as `storage` (f32 arithmetic).
    Kernel {
        /// Which.
        kernel: GpuKernel,
        /// Rows.
        rows: u64,
        /// Columns.
        cols: u64,
        /// Element type of every tensor in device memory.
        storage: Storage,
    },
    /// RMSNorm, the gate and up projections (two cuBLAS f32 GEMMs) and SiLU(g)·u: the
    /// generated RMSNorm and SwiGLU kernels around cuBLAS.
    RmsnormSwiglu {
        /// Tokens T.
        tokens: u64,
        /// Model width D.
        d_model: u64,
        /// Hidden width F.
        d_ff: u64,
    },
    /// A device-to-device copy of `bytes` (`cuMemcpyDtoDAsync`).
    Copy {
        /// Bytes copied.
        bytes: u64,
    },
    /// A graph of the graph compiler run whole on the GPU ([`crate::exec`]): generated
    /// kernels, cuBLAS GEMMs with generated epilogues, other kernels on the host (their
    /// copies included in the time).
    Graph(Box<tensorforge_measure::workload::GraphWorkload>),
}

/// Largest operand a GPU workload may allocate, bytes (16 GiB).
pub const MAX_OPERAND_BYTES: u64 = 16 << 30;

impl GpuWorkload {
    /// Parse `gemm:m=M:n=N:k=K[:dtype=fp32|tf32|fp16|bf16]`,
    /// `kernel:softmax|logaddexp|rmsnorm|swiglu|quantize:rows=R:cols=C[:dtype=fp32|fp16|bf16]`
    /// (the tensors' storage) or `copy:bytes=B`.
    ///
    /// ```
    /// use tensorforge_cuda::bench::{GpuWorkload, GemmDtype};
    /// let w = GpuWorkload::parse("gemm:m=4096:n=4096:k=4096:dtype=bf16").unwrap();
    /// assert_eq!(w, GpuWorkload::Gemm { m: 4096, n: 4096, k: 4096, dtype: GemmDtype::Bf16 });
    /// // 2·M·N·K = 2 · 4096³ = 137 438 953 472
    /// assert_eq!(w.flops(), Some(137_438_953_472.0));
    /// ```
    pub fn parse(spec: &str) -> Result<GpuWorkload> {
        let bad = |field: &str, value: &str, why: &str| CudaError::invalid(spec, field, value, why);
        if spec.starts_with("graph:") {
            // The CPU harness's graph specs (a built-in name or a .json file, mode=fused|unfused).
            let ws = tensorforge_measure::workload::parse_workload(spec)?;
            return match ws.into_iter().next().map(|w| w.kind) {
                Some(tensorforge_measure::workload::WorkloadKind::Graph(g)) => {
                    Ok(GpuWorkload::Graph(Box::new(g)))
                }
                _ => Err(bad("graph", spec, "not a graph workload")),
            };
        }
        let mut parts = spec.split(':');
        let kind = parts.next().unwrap_or("");
        let mut kernel = None;
        if kind == "kernel" {
            let name = parts.next().unwrap_or("");
            kernel = Some(
                GpuKernel::ALL
                    .into_iter()
                    .find(|k| k.label() == name)
                    .ok_or_else(|| {
                        bad(
                            "kernel",
                            name,
                            "expected softmax, logaddexp, rmsnorm, swiglu or quantize",
                        )
                    })?,
            );
        }
        let mut kv: BTreeMap<&str, &str> = BTreeMap::new();
        for p in parts {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| bad("parameter", p, "expected KEY=VALUE"))?;
            if kv.insert(k, v).is_some() {
                return Err(bad(k, v, "given twice"));
            }
        }
        let mut num = |key: &str| -> Result<u64> {
            let v = kv.remove(key).ok_or_else(|| bad(key, "", "missing"))?;
            match v.parse::<u64>() {
                Ok(n) if (1..=1 << 31).contains(&n) => Ok(n),
                _ => Err(bad(key, v, "expected an integer from 1 to 2^31")),
            }
        };
        let w = match (kind, kernel) {
            ("gemm", _) => {
                let (m, n, k) = (num("m")?, num("n")?, num("k")?);
                let dtype = match kv.remove("dtype") {
                    None => GemmDtype::Fp32,
                    Some(d) => GemmDtype::parse(d).ok_or_else(|| {
                        bad("dtype", d, "expected fp32, tf32, fp16, bf16 or fp8")
                    })?,
                };
                if dtype == GemmDtype::Fp8 {
                    for (f, v) in [("m", m), ("n", n), ("k", k)] {
                        if v % 16 != 0 {
                            return Err(bad(f, &v.to_string(), "fp8 GEMMs (cuBLASLt) take dimensions that are multiples of 16"));
                        }
                    }
                }
                GpuWorkload::Gemm { m, n, k, dtype }
            }
            ("kernel", Some(kernel)) => GpuWorkload::Kernel {
                kernel,
                rows: num("rows")?,
                cols: num("cols")?,
                storage: match kv.remove("dtype") {
                    None => Storage::F32,
                    Some(d) => Storage::parse(d)
                        .ok_or_else(|| bad("dtype", d, "expected fp32, fp16 or bf16"))?,
                },
            },
            ("copy", _) => GpuWorkload::Copy {
                bytes: num("bytes")?,
            },
            ("rmsnorm_swiglu", _) => GpuWorkload::RmsnormSwiglu {
                tokens: num("tokens")?,
                d_model: num("d")?,
                d_ff: num("f")?,
            },
            _ => {
                return Err(bad(
                    "workload",
                    kind,
                    "a GPU workload is gemm:m=M:n=N:k=K[:dtype=D], kernel:NAME:rows=R:cols=C, rmsnorm_swiglu:tokens=T:d=D:f=F, graph:NAME|FILE.json[:mode=fused|unfused] or copy:bytes=B",
                ))
            }
        };
        if let Some((k, v)) = kv.into_iter().next() {
            return Err(bad(k, v, "unknown parameter"));
        }
        let largest = w.largest_operand_bytes();
        if largest.is_none_or(|b| b > MAX_OPERAND_BYTES) {
            return Err(bad("size", spec, "an operand would exceed 16 GiB"));
        }
        Ok(w)
    }

    /// The largest single buffer, bytes (None on overflow).
    fn largest_operand_bytes(&self) -> Option<u64> {
        match *self {
            GpuWorkload::Gemm { m, n, k, dtype } => [
                m.checked_mul(k)?.checked_mul(dtype.bytes())?,
                k.checked_mul(n)?.checked_mul(dtype.bytes())?,
                m.checked_mul(n)?.checked_mul(dtype.out_bytes())?,
            ]
            .into_iter()
            .max(),
            GpuWorkload::Kernel {
                rows,
                cols,
                storage,
                ..
            } => rows.checked_mul(cols)?.checked_mul(storage.bytes() as u64),
            GpuWorkload::Copy { bytes } => Some(bytes),
            GpuWorkload::Graph(ref g) => Some(
                g.program("graph")
                    .ok()?
                    .graph
                    .tensors
                    .iter()
                    .map(|t| t.numel.saturating_mul(4))
                    .max()
                    .unwrap_or(0),
            ),
            GpuWorkload::RmsnormSwiglu {
                tokens,
                d_model,
                d_ff,
            } => [
                tokens.checked_mul(d_model)?,
                d_model.checked_mul(d_ff)?,
                tokens.checked_mul(d_ff)?,
            ]
            .into_iter()
            .max()?
            .checked_mul(4),
        }
    }

    /// The CPU harness's spec of a graph workload (its identity, FLOP and byte counts are
    /// the traffic model's).
    fn graph_spec(&self) -> Option<tensorforge_measure::WorkloadSpec> {
        match self {
            GpuWorkload::Graph(g) => Some(tensorforge_measure::WorkloadSpec {
                name: format!("graph:{}", g.source),
                kind: tensorforge_measure::workload::WorkloadKind::Graph((**g).clone()),
            }),
            _ => None,
        }
    }

    /// The Core's kernel workload for the fused RMSNorm + SwiGLU (its FLOP and byte counts).
    fn core_swiglu(&self) -> Option<tensorforge_core::kernel::KernelWorkload> {
        match *self {
            GpuWorkload::RmsnormSwiglu {
                tokens,
                d_model,
                d_ff,
            } => Some(
                tensorforge_core::kernel::KernelWorkload::RmsnormSwigluFused {
                    tokens: tokens as usize,
                    d_model: d_model as usize,
                    d_ff: d_ff as usize,
                },
            ),
            _ => None,
        }
    }

    /// Spec text.
    pub fn name(&self) -> String {
        match self {
            GpuWorkload::Graph(g) => format!("graph:{}:mode={}", g.source, g.mode.label()),
            GpuWorkload::Gemm { m, n, k, dtype } => {
                format!("gemm:m={m}:n={n}:k={k}:dtype={}", dtype.label())
            }
            GpuWorkload::Kernel {
                kernel,
                rows,
                cols,
                storage,
            } => {
                // f32 is the default and keeps the name records had before 16-bit storage.
                let dtype = match storage {
                    Storage::F32 => String::new(),
                    s => format!(":dtype={}", s.label()),
                };
                format!("kernel:{}:rows={rows}:cols={cols}{dtype}", kernel.label())
            }
            GpuWorkload::Copy { bytes } => format!("copy:bytes={bytes}"),
            GpuWorkload::RmsnormSwiglu {
                tokens,
                d_model,
                d_ff,
            } => format!("rmsnorm_swiglu:tokens={tokens}:d={d_model}:f={d_ff}"),
        }
    }

    /// Workload identity (its fingerprint is what gates compare).
    pub fn identity(&self) -> WorkloadIdentity {
        if let Some(spec) = self.graph_spec() {
            let mut id = spec.identity();
            id.params.insert("backend".into(), "cuda".into());
            id.name = self.name();
            return id;
        }
        let mut params = BTreeMap::new();
        let (kind, dtype) = match self {
            GpuWorkload::Gemm { m, n, k, dtype } => {
                params.insert("m".into(), (*m).into());
                params.insert("n".into(), (*n).into());
                params.insert("k".into(), (*k).into());
                params.insert("batch".into(), 1.into());
                params.insert("backend".into(), "cublas".into());
                ("gemm", dtype.label())
            }
            GpuWorkload::Kernel {
                kernel,
                rows,
                cols,
                storage,
            } => {
                params.insert("kernel".into(), kernel.label().into());
                params.insert("rows".into(), (*rows).into());
                params.insert("cols".into(), (*cols).into());
                params.insert("backend".into(), "generated_cuda".into());
                ("kernel", storage.label())
            }
            GpuWorkload::Copy { bytes } => {
                params.insert("bytes".into(), (*bytes).into());
                ("copy", "u8")
            }
            GpuWorkload::Graph(_) => unreachable!("handled above"),
            GpuWorkload::RmsnormSwiglu {
                tokens,
                d_model,
                d_ff,
            } => {
                params.insert("kernel".into(), "rmsnorm_swiglu".into());
                params.insert("tokens".into(), (*tokens).into());
                params.insert("d_model".into(), (*d_model).into());
                params.insert("d_ff".into(), (*d_ff).into());
                params.insert("backend".into(), "generated_cuda+cublas".into());
                ("kernel", "fp32")
            }
        };
        WorkloadIdentity {
            kind: kind.into(),
            name: self.name(),
            params,
            dtype: dtype.into(),
        }
    }

    /// FLOPs per call where counted (GEMM: 2·M·N·K; RMSNorm + SwiGLU: the Core's count).
    pub fn flops(&self) -> Option<f64> {
        match *self {
            GpuWorkload::Gemm { m, n, k, .. } => Some(2.0 * m as f64 * n as f64 * k as f64),
            GpuWorkload::Graph(_) => self.graph_spec()?.flops().ok().flatten(),
            _ => self
                .core_swiglu()
                .and_then(|c| c.flops().ok().flatten())
                .map(|f| f as f64),
        }
    }

    /// Compulsory HBM bytes per call: every operand read once and every result written once
    /// (a copy: read and write).
    pub fn bytes(&self) -> f64 {
        match *self {
            GpuWorkload::Gemm { m, n, k, dtype } => {
                (m * k + k * n) as f64 * dtype.bytes() as f64
                    + (m * n) as f64 * dtype.out_bytes() as f64
            }
            GpuWorkload::Kernel {
                kernel,
                rows,
                cols,
                storage,
            } => {
                let b = storage.bytes() as f64;
                let e = (rows * cols) as f64 * b;
                match kernel {
                    GpuKernel::Softmax | GpuKernel::Quantize => 2.0 * e,
                    GpuKernel::Rmsnorm => 2.0 * e + cols as f64 * b,
                    GpuKernel::Logaddexp | GpuKernel::Swiglu => 3.0 * e,
                }
            }
            GpuWorkload::Copy { bytes } => 2.0 * bytes as f64,
            GpuWorkload::RmsnormSwiglu { .. } => self
                .core_swiglu()
                .and_then(|c| c.compulsory_bytes().ok())
                .unwrap_or(0) as f64,
            GpuWorkload::Graph(_) => self
                .graph_spec()
                .and_then(|s| s.bytes().ok().flatten())
                .unwrap_or(0.0),
        }
    }
}

/// How samples are taken.
#[derive(Debug, Clone)]
pub struct GpuHarnessOptions {
    /// Untimed calls first.
    pub warmup: u64,
    /// Minimum timed calls.
    pub min_iterations: u64,
    /// Minimum timed GPU time, ns (both minimums must be met; at most 100 000 samples).
    pub time_budget_ns: u64,
    /// Zero a buffer of twice the L2 between samples.
    pub flush_l2: bool,
    /// Run id shared by the records.
    pub run_id: String,
    /// Labels on every record.
    pub labels: BTreeMap<String, String>,
}

/// Events around each sample and the buffer that flushes L2.
pub struct Timer<'a> {
    gpu: &'a Gpu,
    flush: Option<CudaSlice<u8>>,
    start: cudarc::driver::CudaEvent,
    end: cudarc::driver::CudaEvent,
}

impl<'a> Timer<'a> {
    /// Timing events on `gpu`'s stream; with `flush_l2`, a buffer of 2 × L2 bytes.
    pub fn new(gpu: &'a Gpu, flush_l2: bool) -> Result<Timer<'a>> {
        let ev = || {
            gpu.ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(CudaError::driver("creating an event"))
        };
        let flush = if flush_l2 {
            let n = (gpu.info.l2_bytes.max(1 << 20) * 2) as usize;
            Some(
                gpu.stream
                    .alloc_zeros::<u8>(n)
                    .map_err(CudaError::driver("allocating the L2 flush buffer"))?,
            )
        } else {
            None
        };
        Ok(Timer {
            gpu,
            flush,
            start: ev()?,
            end: ev()?,
        })
    }

    /// Time one call of `f` (which enqueues work on the stream), ns.
    pub fn sample(&mut self, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        let s = &self.gpu.stream;
        if let Some(b) = self.flush.as_mut() {
            s.memset_zeros(b)
                .map_err(CudaError::driver("flushing L2"))?;
        }
        self.start
            .record(s)
            .map_err(CudaError::driver("recording an event"))?;
        f()?;
        self.end
            .record(s)
            .map_err(CudaError::driver("recording an event"))?;
        self.end
            .synchronize()
            .map_err(CudaError::driver("waiting for the work"))?;
        let ms = self
            .start
            .elapsed_ms(&self.end)
            .map_err(CudaError::driver("reading an event"))?;
        Ok(f64::from(ms) * 1e6)
    }

    /// Warm up, then sample until both minimums of `o` are met.
    pub fn samples(
        &mut self,
        o: &GpuHarnessOptions,
        f: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Vec<f64>> {
        for _ in 0..o.warmup {
            self.sample(f)?;
        }
        let mut v = vec![];
        let mut total = 0.0;
        while (v.len() as u64) < o.min_iterations.max(1)
            || (total < o.time_budget_ns as f64 && v.len() < 100_000)
        {
            let t = self.sample(f)?;
            total += t;
            v.push(t);
        }
        Ok(v)
    }
}

/// Deterministic values in [lo, hi) (a 64-bit LCG; the values only need to be finite and
/// varied).
fn fill(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// `v` rounded to `storage`, as its little-endian bytes.
pub fn stored_bytes(storage: Storage, v: &[f32]) -> Vec<u8> {
    match storage {
        Storage::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        _ => v
            .iter()
            .flat_map(|&x| storage.bits16(x).unwrap_or(0).to_le_bytes())
            .collect(),
    }
}

/// Little-endian elements of `storage` as f32 (16-bit values widened exactly).
pub fn widen(storage: Storage, b: &[u8]) -> Vec<f32> {
    match storage {
        Storage::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Storage::F16 => b
            .chunks_exact(2)
            .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
        Storage::Bf16 => b
            .chunks_exact(2)
            .map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
    }
}

fn upload_stored(gpu: &Gpu, storage: Storage, v: &[f32]) -> Result<CudaSlice<u8>> {
    let b = stored_bytes(storage, v);
    if b.is_empty() {
        return gpu
            .stream
            .alloc_zeros::<u8>(16)
            .map_err(CudaError::driver("allocating"));
    }
    gpu.stream
        .clone_htod(&b)
        .map_err(CudaError::driver("copying to the device"))
}

fn upload_f32(gpu: &Gpu, v: &[f32]) -> Result<CudaSlice<f32>> {
    gpu.stream
        .clone_htod(v)
        .map_err(CudaError::driver("copying to the device"))
}

/// A GEMM's operands on the device, in its storage type.
enum Operand {
    F32(CudaSlice<f32>),
    U16(CudaSlice<u16>),
}

impl Operand {
    fn new(gpu: &Gpu, dtype: GemmDtype, n: usize, seed: u64) -> Result<Operand> {
        let v = fill(n, seed, -1.0, 1.0);
        Ok(match dtype {
            GemmDtype::Fp32 | GemmDtype::Tf32 => Operand::F32(upload_f32(gpu, &v)?),
            GemmDtype::Fp16 => Operand::U16(
                gpu.stream
                    .clone_htod(
                        &v.iter()
                            .map(|&x| half::f16::from_f32(x).to_bits())
                            .collect::<Vec<_>>(),
                    )
                    .map_err(CudaError::driver("copying to the device"))?,
            ),
            GemmDtype::Bf16 => Operand::U16(
                gpu.stream
                    .clone_htod(
                        &v.iter()
                            .map(|&x| half::bf16::from_f32(x).to_bits())
                            .collect::<Vec<_>>(),
                    )
                    .map_err(CudaError::driver("copying to the device"))?,
            ),
            GemmDtype::Fp8 => {
                return Err(CudaError::invalid(
                    "gemm",
                    "dtype",
                    "fp8",
                    "fp8 GEMMs run through cuBLASLt (`Fp8Gemm`), not cublasGemmEx",
                ))
            }
        })
    }

    fn ptr(&self, gpu: &Gpu) -> u64 {
        match self {
            Operand::F32(s) => s.device_ptr(&gpu.stream).0,
            Operand::U16(s) => s.device_ptr(&gpu.stream).0,
        }
    }
}

/// A row-major GEMM through cuBLAS, ready to run: `C[m×n] = A[m×k]·B[k×n]`.
pub struct CublasGemm {
    blas: CudaBlas,
    a: Operand,
    b: Operand,
    c: Operand,
    m: i32,
    n: i32,
    k: i32,
    dtype: GemmDtype,
}

impl CublasGemm {
    /// Allocate and fill the operands.
    pub fn new(gpu: &Gpu, m: u64, n: u64, k: u64, dtype: GemmDtype) -> Result<CublasGemm> {
        let dim = |v: u64, f: &str| {
            i32::try_from(v).map_err(|_| CudaError::invalid("gemm", f, v, "exceeds 2^31 - 1"))
        };
        let (mi, ni, ki) = (dim(m, "m")?, dim(n, "n")?, dim(k, "k")?);
        if !crate::device::cublas_available() {
            return Err(CudaError::Missing {
                what: "cuBLAS",
                tried: "libcublas.so, libcublas.so.12".into(),
                hint: "install the CUDA toolkit's cuBLAS, or `pip install nvidia-cublas-cu12` and put its lib folder on LD_LIBRARY_PATH",
            });
        }
        let blas =
            CudaBlas::new(gpu.stream.clone()).map_err(CudaError::cublas("creating a handle"))?;
        Ok(CublasGemm {
            blas,
            a: Operand::new(gpu, dtype, (m * k) as usize, 1)?,
            b: Operand::new(gpu, dtype, (k * n) as usize, 2)?,
            c: Operand::new(gpu, dtype, (m * n) as usize, 3)?,
            m: mi,
            n: ni,
            k: ki,
            dtype,
        })
    }

    /// Enqueue one product.
    pub fn run(&mut self, gpu: &Gpu) -> Result<()> {
        let (a, b, c) = (self.a.ptr(gpu), self.b.ptr(gpu), self.c.ptr(gpu));
        // SAFETY: a, b and c were allocated in `new` with m·k, k·n and m·n elements of
        // the dtype's storage.
        unsafe { gemm_ex(&self.blas, self.dtype, a, b, c, self.m, self.n, self.k) }
    }
}

/// Enqueue row-major `C[m×n] = A[m×k]·B[k×n]` on `blas`'s stream. Row-major C = A·B is
/// column-major Cᵀ = Bᵀ·Aᵀ: cuBLAS gets (n, m, k) with B first.
///
/// # Safety
/// `a`, `b` and `c` must be device allocations of at least m·k, k·n and m·n elements of
/// `dtype`'s storage type, live until the work completes.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_ex(
    blas: &CudaBlas,
    dtype: GemmDtype,
    a: u64,
    b: u64,
    c: u64,
    m: i32,
    n: i32,
    k: i32,
) -> Result<()> {
    let (ty, compute) = match dtype {
        GemmDtype::Fp32 => (
            cudaDataType::CUDA_R_32F,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        GemmDtype::Tf32 => (
            cudaDataType::CUDA_R_32F,
            cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        ),
        GemmDtype::Fp16 => (
            cudaDataType::CUDA_R_16F,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        GemmDtype::Bf16 => (
            cudaDataType::CUDA_R_16BF,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        GemmDtype::Fp8 => {
            return Err(CudaError::invalid(
                "gemm",
                "dtype",
                "fp8",
                "fp8 GEMMs run through cuBLASLt (`Fp8Gemm`), not cublasGemmEx",
            ))
        }
    };
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: the caller's contract; alpha and beta are host f32 (pointer mode host, the
    // compute type is 32F).
    unsafe {
        cudarc::cublas::result::gemm_ex(
            *blas.handle(),
            cublasOperation_t::CUBLAS_OP_N,
            cublasOperation_t::CUBLAS_OP_N,
            n,
            m,
            k,
            (&alpha as *const f32).cast(),
            b as *const _,
            ty,
            n,
            a as *const _,
            ty,
            k,
            (&beta as *const f32).cast(),
            c as *mut _,
            ty,
            n,
            compute,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(CudaError::cublas("GemmEx"))
}

pub(crate) fn new_blas(gpu: &Gpu) -> Result<CudaBlas> {
    if !crate::device::cublas_available() {
        return Err(CudaError::Missing {
            what: "cuBLAS",
            tried: "libcublas.so, libcublas.so.12".into(),
            hint: "install the CUDA toolkit's cuBLAS, or `pip install nvidia-cublas-cu12` and put its lib folder on LD_LIBRARY_PATH",
        });
    }
    CudaBlas::new(gpu.stream.clone()).map_err(CudaError::cublas("creating a handle"))
}

/// RMSNorm + SwiGLU on the GPU: the generated RMSNorm kernel, two cuBLAS f32 GEMMs
/// reading its output, and the generated SiLU(g)·u kernel reading theirs.
pub struct RmsnormSwigluRun {
    norm: GeneratedRun,
    act: GeneratedRun,
    blas: CudaBlas,
    w_gate: CudaSlice<f32>,
    w_up: CudaSlice<f32>,
    t: i32,
    d: i32,
    f: i32,
}

impl RmsnormSwigluRun {
    /// Compile both kernels and allocate x, γ, the weights and every intermediate.
    pub fn new(gpu: &Gpu, tokens: u64, d_model: u64, d_ff: u64) -> Result<RmsnormSwigluRun> {
        let dim = |v: u64, f: &str| {
            i32::try_from(v)
                .map_err(|_| CudaError::invalid("rmsnorm_swiglu", f, v, "exceeds 2^31 - 1"))
        };
        let (t, d, f) = (dim(tokens, "tokens")?, dim(d_model, "d")?, dim(d_ff, "f")?);
        let norm = GeneratedRun::new(
            gpu,
            &GpuKernel::Rmsnorm.graph_json(tokens, d_model),
            "rmsnorm",
        )?;
        let act = GeneratedRun::new(gpu, &GpuKernel::Swiglu.graph_json(tokens, d_ff), "swiglu")?;
        let scale = 1.0 / (d_model as f32).sqrt();
        Ok(RmsnormSwigluRun {
            norm,
            act,
            blas: new_blas(gpu)?,
            w_gate: upload_f32(gpu, &fill((d_model * d_ff) as usize, 21, -scale, scale))?,
            w_up: upload_f32(gpu, &fill((d_model * d_ff) as usize, 22, -scale, scale))?,
            t,
            d,
            f,
        })
    }

    /// Enqueue the four launches.
    pub fn run(&mut self, gpu: &Gpu) -> Result<()> {
        self.norm.run(gpu)?;
        let h = self.norm.ptr(gpu, "y")?;
        let (g, u) = (self.act.ptr(gpu, "g")?, self.act.ptr(gpu, "u")?);
        let (wg, wu) = (
            self.w_gate.device_ptr(&gpu.stream).0,
            self.w_up.device_ptr(&gpu.stream).0,
        );
        // SAFETY: h is the RMSNorm output [T, D]; wg and wu are [D, F]; g and u are the
        // SwiGLU kernel's inputs [T, F]; all allocated above with those element counts.
        unsafe {
            gemm_ex(
                &self.blas,
                GemmDtype::Fp32,
                h,
                wg,
                g,
                self.t,
                self.f,
                self.d,
            )?;
            gemm_ex(
                &self.blas,
                GemmDtype::Fp32,
                h,
                wu,
                u,
                self.t,
                self.f,
                self.d,
            )?;
        }
        self.act.run(gpu)
    }
}

/// A generated kernel program on the device: its module, buffers and launch shapes.
pub struct GeneratedRun {
    launches: Vec<(cudarc::driver::CudaFunction, Vec<usize>, LaunchConfig, i64)>,
    /// Tensors as their storage's bytes; scratch as f32 bytes.
    buffers: Vec<CudaSlice<u8>>,
    storage: Storage,
    /// Buffer index by tensor id.
    pub tensor_buffer: HashMap<usize, usize>,
    /// Tensor id by name.
    pub tensor_id: HashMap<String, usize>,
}

/// Blocks for a kernel: enough to cover its rows (a warp unit takes `BLOCK_THREADS / 32`
/// rows per block at a time), at most 32 per SM.
pub fn grid_for(k: &CudaKernel, sm_count: u32) -> u32 {
    let per_block = match k.unit {
        RowUnit::Warp => (BLOCK_THREADS / 32) as usize,
        RowUnit::Block => 1,
    };
    let want = k.rows.div_ceil(per_block).max(1);
    want.min((sm_count.max(1) * 32) as usize) as u32
}

impl GeneratedRun {
    /// Compile the fused program of `graph_json` with NVRTC, load it, and allocate every
    /// tensor it touches as f32 (inputs filled with values in [-4, 4)).
    pub fn new(gpu: &Gpu, graph_json: &str, name: &str) -> Result<GeneratedRun> {
        GeneratedRun::new_with(gpu, graph_json, name, Storage::F32)
    }

    /// [`GeneratedRun::new`] with every tensor stored as `storage` (inputs rounded to it).
    pub fn new_with(
        gpu: &Gpu,
        graph_json: &str,
        name: &str,
        storage: Storage,
    ) -> Result<GeneratedRun> {
        let gerr = |e: &dyn std::fmt::Display| CudaError::Graph {
            name: name.into(),
            message: e.to_string(),
        };
        let g = tensorforge_graph::Graph::from_json_str(graph_json).map_err(|e| gerr(&e))?;
        let c = tensorforge_graph::fusion::compile(&g).map_err(|e| gerr(&e))?;
        let prog =
            compile_program_with(&c.fused, name, gpu.info.arch(), &CudaOptions::new(storage))?;
        if let Some((i, why)) = prog.cuda.skipped.first() {
            return Err(gerr(&format!(
                "kernel {} has no CUDA form: {why}",
                c.fused.kernels[*i].name
            )));
        }
        let module = gpu
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(prog.ptx.clone()))
            .map_err(CudaError::driver("loading the module"))?;
        let tg = &c.fused.graph;
        // Constants hold their value, as in the CPU executor.
        let constants: HashMap<usize, f32> = tg
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match n.op {
                tensorforge_graph::ir::Op::Constant { value, .. } => {
                    Some((tg.node_outputs[i][0], value as f32))
                }
                _ => None,
            })
            .collect();
        // Every kernel input must be a source or an earlier kernel's output: a view the CPU
        // executor makes between kernels (a transpose) has no GPU kernel yet.
        let mut ready: std::collections::HashSet<usize> = tg
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.op.base_class() == tensorforge_graph::ir::OpClass::Source)
            .map(|(i, _)| tg.node_outputs[i][0])
            .collect();
        for k in &prog.cuda.kernels {
            if let Some(&t) = k.inputs.iter().find(|t| !ready.contains(t)) {
                return Err(gerr(&format!(
                    "tensor `{}` of kernel {} is a view the GPU runner does not make",
                    tg.tensors[t].name, k.symbol
                )));
            }
            ready.extend(k.outputs.iter().copied());
        }
        let mut tensor_buffer = HashMap::new();
        let mut buffers = vec![];
        let mut launches = vec![];
        for k in &prog.cuda.kernels {
            let mut slots = vec![];
            for &t in k.inputs.iter().chain(&k.outputs) {
                let idx = match tensor_buffer.get(&t) {
                    Some(&i) => i,
                    None => {
                        let n = tg.tensors[t].numel as usize;
                        let v = match constants.get(&t) {
                            Some(&c) => vec![c; n],
                            None => fill(n, t as u64 + 7, -4.0, 4.0),
                        };
                        buffers.push(upload_stored(gpu, storage, &v)?);
                        tensor_buffer.insert(t, buffers.len() - 1);
                        buffers.len() - 1
                    }
                };
                slots.push(idx);
            }
            let grid = grid_for(k, gpu.info.sm_count);
            let scratch = k.scratch_floats_for(grid, BLOCK_THREADS).max(1);
            buffers.push(
                gpu.stream
                    .alloc_zeros::<u8>(scratch.saturating_mul(4))
                    .map_err(CudaError::driver("allocating scratch"))?,
            );
            slots.push(buffers.len() - 1);
            let f = module
                .load_function(&k.symbol)
                .map_err(CudaError::driver(format!("loading {}", k.symbol)))?;
            let cfg = LaunchConfig {
                grid_dim: (grid, 1, 1),
                block_dim: (BLOCK_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            launches.push((f, slots, cfg, k.rows as i64));
        }
        let tensor_id = tensor_buffer
            .keys()
            .map(|&t| (tg.tensors[t].name.clone(), t))
            .collect();
        Ok(GeneratedRun {
            launches,
            buffers,
            storage,
            tensor_buffer,
            tensor_id,
        })
    }

    /// Enqueue every kernel once, in program order.
    pub fn run(&mut self, gpu: &Gpu) -> Result<()> {
        for (f, slots, cfg, rows) in &self.launches {
            let ptrs: Vec<u64> = slots
                .iter()
                .map(|&i| self.buffers[i].device_ptr(&gpu.stream).0)
                .collect();
            let mut b = gpu.stream.launch_builder(f);
            for p in &ptrs {
                b.arg(p);
            }
            b.arg(rows);
            // SAFETY: the parameters are the kernel's (checked against its PTX entry by
            // compile_program): one device pointer per input, output and scratch buffer,
            // each allocated with the tensor's element count, and the row count.
            unsafe { b.launch(*cfg) }.map_err(CudaError::driver("launching a kernel"))?;
        }
        Ok(())
    }

    /// The device pointer of tensor `name`'s buffer.
    pub fn ptr(&self, gpu: &Gpu, name: &str) -> Result<u64> {
        let b = self
            .tensor_id
            .get(name)
            .and_then(|t| self.tensor_buffer.get(t))
            .ok_or_else(|| CudaError::Measurement {
                what: format!("tensor `{name}`"),
                reason: "not on the device".into(),
            })?;
        Ok(self.buffers[*b].device_ptr(&gpu.stream).0)
    }

    /// A tensor's values (after a run; 16-bit storage widened exactly).
    pub fn read(&self, gpu: &Gpu, tensor: usize) -> Result<Vec<f32>> {
        let i = *self
            .tensor_buffer
            .get(&tensor)
            .ok_or_else(|| CudaError::Measurement {
                what: format!("tensor {tensor}"),
                reason: "not on the device".into(),
            })?;
        let b = gpu
            .stream
            .clone_dtoh(&self.buffers[i])
            .map_err(CudaError::driver("copying to the host"))?;
        Ok(widen(self.storage, &b))
    }
}

/// An fp8 GEMM through cuBLASLt, ready to run: `C[m×n] = A[m×k]·Wᵀ` with A and W (stored
/// [n, k]) in e4m3, C in bf16, f32 accumulation, α = 1, β = 0, no scales (each 1). In
/// cuBLASLt's column-major terms: `Cᵀ (n × m, ld n) = op(W) · Aᵀ` with W as a k × n matrix
/// (ld k) transposed and Aᵀ a k × m matrix (ld k) as it is: the "TN" layout its fp8
/// kernels require. The fastest algorithm of cuBLASLt's heuristic is chosen once.
pub struct Fp8Gemm {
    handle: cudarc::cublaslt::sys::cublasLtHandle_t,
    desc: cudarc::cublaslt::sys::cublasLtMatmulDesc_t,
    layouts: [cudarc::cublaslt::sys::cublasLtMatrixLayout_t; 3],
    algo: cudarc::cublaslt::sys::cublasLtMatmulAlgo_t,
    workspace: CudaSlice<u8>,
    a: CudaSlice<u8>,
    w: CudaSlice<u8>,
    c: CudaSlice<u16>,
}

impl Fp8Gemm {
    /// Check the GPU (compute capability 8.9 or newer) and cuBLASLt, allocate and fill the
    /// operands, and pick the algorithm.
    pub fn new(gpu: &Gpu, m: u64, n: u64, k: u64) -> Result<Fp8Gemm> {
        use cudarc::cublaslt::{result as lt, sys};
        let (major, minor) = gpu.info.compute_capability;
        if (major, minor) < (8, 9) {
            return Err(CudaError::invalid(
                "gemm",
                "dtype",
                "fp8",
                format!("fp8 tensor cores need compute capability 8.9 or newer; this GPU is {major}.{minor}"),
            ));
        }
        // SAFETY: only asks the loader whether the library opens.
        if !unsafe { sys::is_culib_present() } {
            return Err(CudaError::Missing {
                what: "cuBLASLt",
                tried: "libcublasLt.so, libcublasLt.so.12".into(),
                hint: "install the CUDA toolkit's cuBLAS, or `pip install nvidia-cublas-cu12` and put its lib folder on LD_LIBRARY_PATH",
            });
        }
        let e4m3 = |v: &[f32]| -> Vec<u8> { v.iter().map(|&x| f32_to_e4m3(x)).collect() };
        let up8 = |v: Vec<u8>| {
            gpu.stream
                .clone_htod(&v)
                .map_err(CudaError::driver("copying to the device"))
        };
        let (mu, nu, ku) = (m as usize, n as usize, k as usize);
        let a = up8(e4m3(&fill(mu * ku, 1, -1.0, 1.0)))?;
        let w = up8(e4m3(&fill(nu * ku, 2, -1.0, 1.0)))?;
        let c = gpu
            .stream
            .alloc_zeros::<u16>(mu * nu)
            .map_err(CudaError::driver("allocating"))?;
        let ws_bytes: usize = 32 << 20;
        let workspace = gpu
            .stream
            .alloc_zeros::<u8>(ws_bytes)
            .map_err(CudaError::driver("allocating the workspace"))?;
        let handle = lt::create_handle().map_err(CudaError::cublaslt("creating a handle"))?;
        let desc = lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType::CUDA_R_32F,
        )
        .map_err(CudaError::cublaslt("creating the matmul descriptor"))?;
        let transpose: i32 = 1; // CUBLAS_OP_T
                                // SAFETY: desc was just created; the attribute is an int32 cublasOperation_t.
        unsafe {
            lt::set_matmul_desc_attribute(
                desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                (&transpose as *const i32).cast(),
                std::mem::size_of::<i32>(),
            )
        }
        .map_err(CudaError::cublaslt("setting TRANSA"))?;
        let layout = |ty, rows: u64, cols: u64, ld: u64| {
            lt::create_matrix_layout(ty, rows, cols, ld as i64)
                .map_err(CudaError::cublaslt("creating a matrix layout"))
        };
        let layouts = [
            layout(sys::cudaDataType::CUDA_R_8F_E4M3, k, n, k)?,
            layout(sys::cudaDataType::CUDA_R_8F_E4M3, k, m, k)?,
            layout(sys::cudaDataType::CUDA_R_16BF, n, m, n)?,
        ];
        let pref =
            lt::create_matmul_pref().map_err(CudaError::cublaslt("creating a preference"))?;
        // SAFETY: pref was just created; the attribute is a u64 byte count; the layouts and
        // descriptor are live; pref is destroyed once, after the query.
        let heuristic = unsafe {
            let ws = ws_bytes as u64;
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
            .and_then(|()| {
                lt::get_matmul_algo_heuristic(
                    handle, desc, layouts[0], layouts[1], layouts[2], layouts[2], pref,
                )
            })
            .and_then(|h| lt::destroy_matmul_pref(pref).map(|()| h))
        }
        .map_err(CudaError::cublaslt(
            "choosing an fp8 algorithm (cuBLASLt has none for this shape and GPU)",
        ))?;
        Ok(Fp8Gemm {
            handle,
            desc,
            layouts,
            algo: heuristic.algo,
            workspace,
            a,
            w,
            c,
        })
    }

    /// Enqueue one product on the device's stream.
    pub fn run(&mut self, gpu: &Gpu) -> Result<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let ws_size = self.workspace.len();
        let (w, a) = (
            self.w.device_ptr(&gpu.stream).0,
            self.a.device_ptr(&gpu.stream).0,
        );
        let c = self.c.device_ptr(&gpu.stream).0;
        let ws = self.workspace.device_ptr(&gpu.stream).0;
        // SAFETY: the descriptor, layouts and algorithm were made in `new` for these
        // buffers (W n·k and A m·k bytes of e4m3, C m·n bf16, 16-byte aligned device
        // allocations) and stay live with `self`; alpha and beta are host f32 (scale type
        // 32F); the workspace holds `ws_size` bytes.
        unsafe {
            cudarc::cublaslt::result::matmul(
                self.handle,
                self.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                w as *const _,
                self.layouts[0],
                a as *const _,
                self.layouts[1],
                c as *const _,
                self.layouts[2],
                c as *mut _,
                self.layouts[2],
                &self.algo,
                ws as *mut _,
                ws_size,
                gpu.stream.cu_stream() as *mut _,
            )
        }
        .map_err(CudaError::cublaslt("cublasLtMatmul"))
    }
}

impl Drop for Fp8Gemm {
    fn drop(&mut self) {
        use cudarc::cublaslt::result as lt;
        // SAFETY: each object was created in `new` and is destroyed once, here.
        unsafe {
            for l in self.layouts {
                let _ = lt::destroy_matrix_layout(l);
            }
            let _ = lt::destroy_matmul_desc(self.desc);
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

/// `x` as fp8 e4m3 (OCP E4M3FN: bias 7, no infinities, largest finite 448, NaN 0x7f),
/// rounded to nearest even, saturating at ±448 (the benchmark's operands are in [-1, 1)).
///
/// ```
/// use tensorforge_cuda::bench::f32_to_e4m3;
/// assert_eq!(f32_to_e4m3(1.0), 0x38); // exponent 7 + 7 = 14 → 0b0_1110_000
/// assert_eq!(f32_to_e4m3(-0.5), 0xb0); // sign, exponent 6 + 7 = 13 → 0b1_1101_000
/// assert_eq!(f32_to_e4m3(1.0625), 0x38); // halfway between 1 and 1.125: to even (1)
/// assert_eq!(f32_to_e4m3(2f32.powi(-9)), 0x01); // the smallest subnormal, 2^-9
/// assert_eq!(f32_to_e4m3(1e6), 0x7e); // saturates at 448
/// ```
pub fn f32_to_e4m3(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7f;
    }
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    let a = x.abs().min(448.0);
    if a < 2f32.powi(-6) {
        // Subnormals: multiples of 2^-9 (a·2^9 is exact); 8 units is 2^-6, code 0x08.
        return sign | (a * 512.0).round_ties_even() as u8;
    }
    // A normal: the exponent from the bits, the 23 fraction bits rounded to 3 (ties to
    // even; a carry into the exponent is the right code too).
    let bits = a.to_bits();
    let e = ((bits >> 23) & 0xff) as i32 - 127;
    let m = bits & 0x7f_ffff;
    let r = (m + 0x7_ffff + ((m >> 20) & 1)) >> 20;
    let code = (((e + 7) as u32) << 3) + r;
    sign | code.min(0x7e) as u8
}

/// Something `bench --device cuda` can time.
pub enum Prepared<'g> {
    /// cuBLAS.
    Gemm(Box<CublasGemm>),
    /// cuBLASLt fp8.
    Fp8(Box<Fp8Gemm>),
    /// Generated kernels.
    Generated(Box<GeneratedRun>),
    /// A copy between two buffers.
    Copy(CudaSlice<u8>, CudaSlice<u8>),
    /// RMSNorm + SwiGLU.
    RmsnormSwiglu(Box<RmsnormSwigluRun>),
    /// A whole program on the GPU.
    Graph(Box<(crate::exec::DeviceProgram, crate::exec::CudaBackend<'g>)>),
}

impl<'g> Prepared<'g> {
    /// Allocate and compile what `w` needs.
    pub fn new(gpu: &'g Gpu, w: &GpuWorkload) -> Result<Prepared<'g>> {
        Ok(match *w {
            GpuWorkload::Gemm {
                m,
                n,
                k,
                dtype: GemmDtype::Fp8,
            } => Prepared::Fp8(Box::new(Fp8Gemm::new(gpu, m, n, k)?)),
            GpuWorkload::Gemm { m, n, k, dtype } => {
                Prepared::Gemm(Box::new(CublasGemm::new(gpu, m, n, k, dtype)?))
            }
            GpuWorkload::Kernel {
                kernel,
                rows,
                cols,
                storage,
            } => Prepared::Generated(Box::new(GeneratedRun::new_with(
                gpu,
                &kernel.graph_json(rows, cols),
                kernel.label(),
                storage,
            )?)),
            GpuWorkload::Copy { bytes } => {
                let a = gpu
                    .stream
                    .alloc_zeros::<u8>(bytes as usize)
                    .map_err(CudaError::driver("allocating"))?;
                let b = gpu
                    .stream
                    .alloc_zeros::<u8>(bytes as usize)
                    .map_err(CudaError::driver("allocating"))?;
                Prepared::Copy(a, b)
            }
            GpuWorkload::RmsnormSwiglu {
                tokens,
                d_model,
                d_ff,
            } => Prepared::RmsnormSwiglu(Box::new(RmsnormSwigluRun::new(
                gpu, tokens, d_model, d_ff,
            )?)),
            GpuWorkload::Graph(ref g) => {
                let p = g.program("graph").map_err(|e| CudaError::Graph {
                    name: g.source.clone(),
                    message: e.to_string(),
                })?;
                let mut ins = HashMap::new();
                tensorforge_graph::exec::fill_inputs(&p.graph, &mut ins, 0).map_err(|e| {
                    CudaError::Graph {
                        name: g.source.clone(),
                        message: e.to_string(),
                    }
                })?;
                let mut dev = crate::exec::CudaBackend::new(gpu)?;
                let dp = crate::exec::DeviceProgram::new(&mut dev, &p, &ins)?;
                Prepared::Graph(Box::new((dp, dev)))
            }
        })
    }

    /// Enqueue one call.
    pub fn run(&mut self, gpu: &Gpu) -> Result<()> {
        match self {
            Prepared::Gemm(g) => g.run(gpu),
            Prepared::Fp8(g) => g.run(gpu),
            Prepared::Generated(g) => g.run(gpu),
            Prepared::Copy(a, b) => gpu
                .stream
                .memcpy_dtod(a, b)
                .map_err(CudaError::driver("cuMemcpyDtoDAsync")),
            Prepared::RmsnormSwiglu(r) => r.run(gpu),
            Prepared::Graph(b) => {
                let (dp, dev) = &mut **b;
                dp.run(dev)
            }
        }
    }
}

/// Time every workload on `gpu`, one record each (sharing `o.run_id`).
pub fn run_gpu_suite(
    gpu: &Gpu,
    suite: &[GpuWorkload],
    o: &GpuHarnessOptions,
) -> Result<Vec<Record>> {
    let device = gpu.info.device_context();
    let software = tensorforge_measure::context::software_context();
    let mut out = vec![];
    let mut timer = Timer::new(gpu, o.flush_l2)?;
    for w in suite {
        let mut p = Prepared::new(gpu, w)?;
        let samples = timer.samples(o, &mut || p.run(gpu))?;
        let mut labels = o.labels.clone();
        labels.insert("device".into(), format!("cuda:{}", gpu.info.ordinal));
        out.push(Record::new(RecordParts {
            run_id: o.run_id.clone(),
            workload: w.identity(),
            device: device.clone(),
            software: software.clone(),
            harness: HarnessSettings {
                warmup_iterations: o.warmup,
                min_iterations: o.min_iterations,
                time_budget_ns: o.time_budget_ns,
                threads: 1,
                rotating_buffers: false,
                note: Some(if o.flush_l2 {
                    "CUDA events around each call; L2 overwritten between calls".into()
                } else {
                    "CUDA events around each call; L2 kept warm".into()
                }),
                batch_iterations: 1,
                timer_resolution_ns: None,
                overhead_ns: None,
            },
            samples_ns: samples,
            flops: w.flops(),
            bytes: Some(w.bytes()),
            peak_alloc_bytes: None,
            timestamp_unix_s: tensorforge_measure::harness::unix_now_s(),
            labels,
            source: "harness:cuda".into(),
        })?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_workloads_parse_and_bad_ones_name_field_and_value() {
        assert_eq!(
            GpuWorkload::parse("kernel:softmax:rows=4096:cols=4096").unwrap(),
            GpuWorkload::Kernel {
                kernel: GpuKernel::Softmax,
                rows: 4096,
                cols: 4096,
                storage: Storage::F32,
            }
        );
        let w = GpuWorkload::parse("kernel:rmsnorm:rows=8:cols=64:dtype=bf16").unwrap();
        assert_eq!(w.name(), "kernel:rmsnorm:rows=8:cols=64:dtype=bf16");
        assert_eq!(w.identity().dtype, "bf16");
        // The f32 name is the one records had before storage types.
        let f = GpuWorkload::parse("kernel:rmsnorm:rows=8:cols=64:dtype=fp32").unwrap();
        assert_eq!(f.name(), "kernel:rmsnorm:rows=8:cols=64");
        assert_ne!(w.identity().fingerprint(), f.identity().fingerprint());
        assert_eq!(
            GpuWorkload::parse("copy:bytes=1024").unwrap(),
            GpuWorkload::Copy { bytes: 1024 }
        );
        for (spec, field) in [
            ("gemm:m=1:n=2", "`k`"),
            ("gemm:m=1:n=2:k=0", "`k` = `0`"),
            ("gemm:m=1:n=2:k=3:dtype=fp64", "`dtype` = `fp64`"),
            ("kernel:gelu:rows=1:cols=1", "`kernel` = `gelu`"),
            ("kernel:softmax:rows=1:cols=1:x=2", "`x` = `2`"),
            (
                "kernel:softmax:rows=1:cols=1:dtype=tf32",
                "`dtype` = `tf32`",
            ),
            ("conv:n=1", "`workload` = `conv`"),
            ("kernel:softmax:rows=2147483648:cols=2147483648", "16 GiB"),
        ] {
            let e = GpuWorkload::parse(spec).unwrap_err().to_string();
            assert!(e.contains(field), "{spec}: {e}");
        }
    }

    /// Bytes a kernel must move: softmax of 1024 × 1024 f32 reads and writes 4 MiB each.
    #[test]
    fn compulsory_bytes_count_every_operand_once() {
        let w = GpuWorkload::parse("kernel:softmax:rows=1024:cols=1024").unwrap();
        assert_eq!(w.bytes(), 8.0 * 1024.0 * 1024.0);
        // In bf16, half: 2 B · 2 · 1024²; RMSNorm adds its gain row, 2 B · 1024.
        let h = GpuWorkload::parse("kernel:softmax:rows=1024:cols=1024:dtype=bf16").unwrap();
        assert_eq!(h.bytes(), 4.0 * 1024.0 * 1024.0);
        let r = GpuWorkload::parse("kernel:rmsnorm:rows=1024:cols=1024:dtype=fp16").unwrap();
        assert_eq!(r.bytes(), 4.0 * 1024.0 * 1024.0 + 2048.0);
        // bf16 GEMM 64 × 32 × 16: (64·16 + 16·32 + 64·32) · 2 B = (1024 + 512 + 2048) · 2
        let g = GpuWorkload::parse("gemm:m=64:n=32:k=16:dtype=bf16").unwrap();
        assert_eq!(g.bytes(), 7168.0);
    }

    /// A graph workload is the CPU harness's graph (same content hash and counts) with the
    /// backend in its identity, so GPU and CPU records never compare.
    #[test]
    fn graph_workloads_take_the_cpu_specs_identity_with_the_backend() {
        let w = GpuWorkload::parse("graph:attention_softmax").unwrap();
        assert_eq!(w.name(), "graph:attention_softmax:mode=fused");
        let id = w.identity();
        assert_eq!(id.kind, "graph");
        assert_eq!(id.params["backend"], "cuda");
        let cpu = tensorforge_measure::workload::parse_workload("graph:attention_softmax")
            .unwrap()
            .remove(0);
        assert_ne!(id.fingerprint(), cpu.identity().fingerprint());
        assert_eq!(Some(w.bytes()), cpu.bytes().unwrap());
        let e = GpuWorkload::parse("graph:nope").unwrap_err().to_string();
        assert!(
            e.contains("`nope`") && e.contains("attention_softmax"),
            "{e}"
        );
    }

    /// The value of e4m3 code `c` (OCP E4M3FN), from its definition.
    fn e4m3_value(c: u8) -> f32 {
        let s = if c & 0x80 != 0 { -1.0 } else { 1.0 };
        let (e, f) = (((c >> 3) & 0xf) as i32, (c & 7) as f32);
        if e == 0 {
            s * f * 2f32.powi(-9)
        } else {
            s * (1.0 + f / 8.0) * 2f32.powi(e - 7)
        }
    }

    /// Every finite e4m3 code converts back to itself, the point halfway to the next code
    /// goes to the even one of the two, and values past 448 saturate.
    #[test]
    fn e4m3_round_trips_and_rounds_halfway_to_even() {
        for c in (0u8..=0xff).filter(|c| c & 0x7f != 0x7f) {
            let v = e4m3_value(c);
            assert_eq!(
                f32_to_e4m3(v),
                if v == 0.0 && c == 0x80 { 0x80 } else { c },
                "{c:#04x} = {v}"
            );
            let next = c + 1;
            if c & 0x7f < 0x7e {
                let mid = (v + e4m3_value(next)) / 2.0; // exact: a few significant bits
                let even = if c & 1 == 0 { c } else { next };
                assert_eq!(f32_to_e4m3(mid), even, "halfway after {c:#04x} ({mid})");
            }
        }
        assert_eq!(f32_to_e4m3(500.0), 0x7e);
        assert_eq!(f32_to_e4m3(-1e30), 0xfe);
        assert_eq!(f32_to_e4m3(f32::NAN), 0x7f);
    }

    /// fp8 GEMMs: 1-byte A and B, 2-byte C; dimensions multiples of 16.
    #[test]
    fn fp8_gemms_count_their_bytes_and_need_multiples_of_16() {
        let g = GpuWorkload::parse("gemm:m=64:n=32:k=16:dtype=fp8").unwrap();
        // (64·16 + 16·32) · 1 B + 64·32 · 2 B = 1536 + 4096
        assert_eq!(g.bytes(), 5632.0);
        assert_eq!(g.identity().dtype, "fp8");
        let e = GpuWorkload::parse("gemm:m=64:n=30:k=16:dtype=fp8")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`n` = `30`") && e.contains("multiples of 16"),
            "{e}"
        );
    }

    /// RMSNorm + SwiGLU counts as the Core does: T = 2, D = 3, F = 4.
    #[test]
    fn rmsnorm_swiglu_counts_are_the_cores() {
        let w = GpuWorkload::parse("rmsnorm_swiglu:tokens=2:d=3:f=4").unwrap();
        assert_eq!(w.name(), "rmsnorm_swiglu:tokens=2:d=3:f=4");
        // 4·T·D·F + 4·T·D + 5·T·F = 96 + 24 + 40
        assert_eq!(w.flops(), Some(160.0));
        // 4 B · (T·D + D + 2·D·F + T·F) = 4 · (6 + 3 + 24 + 8)
        assert_eq!(w.bytes(), 164.0);
        assert!(GpuWorkload::parse("rmsnorm_swiglu:tokens=2:d=3")
            .unwrap_err()
            .to_string()
            .contains("`f`"));
    }

    /// Every benchmark kernel's graph fuses to kernels the CUDA target renders, and (where
    /// NVRTC loads) compiles with entry points matching its launcher.
    #[test]
    fn every_benchmark_kernel_renders_and_compiles() {
        for k in GpuKernel::ALL {
            let g = tensorforge_graph::Graph::from_json_str(&k.graph_json(64, 2048)).unwrap();
            let c = tensorforge_graph::fusion::compile(&g).unwrap();
            let cp = tensorforge_graph::codegen::cuda::render_program(&c.fused);
            assert!(cp.skipped.is_empty(), "{}: {:?}", k.label(), cp.skipped);
            assert_eq!(cp.kernels.len(), 1, "{}", k.label());
            if crate::nvrtc::nvrtc_available() || crate::nvrtc::nvrtc_required() {
                for st in Storage::ALL {
                    compile_program_with(&c.fused, k.label(), "sm_90", &CudaOptions::new(st))
                        .unwrap();
                }
            }
        }
    }
}

/// Version of [`GpuBenchReport`]'s JSON.
pub const GPU_BENCH_SCHEMA_VERSION: u32 = 1;

/// A bandwidth-bound workload against a copy of as many bytes, timed in the same run.
#[derive(Debug, Clone, Serialize)]
pub struct BandwidthRow {
    /// Workload name.
    pub workload: String,
    /// Compulsory bytes ÷ median time.
    pub bytes_per_s: f64,
    /// A device-to-device copy moving the same bytes (read + write) ÷ its median time.
    pub copy_bytes_per_s: f64,
    /// `bytes_per_s / copy_bytes_per_s`.
    pub fraction_of_copy: f64,
}

/// What `bench --device cuda` measured.
#[derive(Debug, Clone, Serialize)]
pub struct GpuBenchReport {
    /// Always [`GPU_BENCH_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The GPU.
    pub gpu: crate::device::GpuInfo,
    /// One record per workload.
    pub records: Vec<Record>,
    /// Each generated kernel against the copy of its bytes.
    pub bandwidth: Vec<BandwidthRow>,
}

/// Parse `specs`, open CUDA device `ordinal`, time every workload and, for each generated
/// kernel, a copy of the same bytes (the bandwidth denominator, measured in the same run).
/// Bad specs are reported before the device is opened.
pub fn bench_gpu(
    ordinal: usize,
    specs: &[String],
    o: &GpuHarnessOptions,
) -> Result<GpuBenchReport> {
    let suite = specs
        .iter()
        .map(|s| GpuWorkload::parse(s))
        .collect::<Result<Vec<_>>>()?;
    let gpu = Gpu::open(ordinal)?;
    let records = run_gpu_suite(&gpu, &suite, o)?;
    let mut bandwidth = vec![];
    for (w, r) in suite.iter().zip(&records) {
        if !matches!(w, GpuWorkload::Kernel { .. }) {
            continue;
        }
        let copy = GpuWorkload::Copy {
            bytes: ((w.bytes() / 2.0) as u64).max(16),
        };
        let c = run_gpu_suite(&gpu, std::slice::from_ref(&copy), o)?;
        let bytes_per_s = w.bytes() / r.stats.p50_ns * 1e9;
        let copy_bytes_per_s = copy.bytes() / c[0].stats.p50_ns * 1e9;
        bandwidth.push(BandwidthRow {
            workload: w.name(),
            bytes_per_s,
            copy_bytes_per_s,
            fraction_of_copy: bytes_per_s / copy_bytes_per_s,
        });
    }
    Ok(GpuBenchReport {
        schema_version: GPU_BENCH_SCHEMA_VERSION,
        gpu: gpu.info.clone(),
        records,
        bandwidth,
    })
}
