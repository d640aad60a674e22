//! A whole fused program on a device, its tensors staying there between kernels:
//! elementwise and row kernels as generated CUDA; matmul kernels as cuBLAS GEMMs (strided
//! batched, a transposed operand read in place by the GEMM's own transpose) followed by
//! their elementwise epilogue as generated CUDA; every other kernel (gathers, convolutions,
//! attention, reductions over other axes) in the CPU interpreter, its inputs copied to the
//! host and its outputs back, and listed as such. Reshapes share their source's buffer;
//! other transposes are materialized on the host.
//!
//! The device is a [`Backend`]: [`CudaBackend`] on a GPU, and a host backend in the tests
//! that gives each primitive the same contract (column-major GEMM with cuBLAS's
//! parameters; a generated kernel's semantics through the interpreter), so the planning —
//! which buffer goes to which parameter, the GEMMs' orientation, strides and transposes — is
//! checked against the interpreter on every example graph and ONNX fixture without a GPU.
//! Left out: streams and overlap of host and device work, buffer reuse (every tensor gets its
//! own buffer), fp16/bf16 tensors.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use cudarc::driver::{CudaModule, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use tensorforge_graph::codegen::cuda::{device_prelude, render_kernel, CudaKernel, BLOCK_THREADS};
use tensorforge_graph::exec::transposed_source;
use tensorforge_graph::fusion::{Kernel, KernelKind, Program};
use tensorforge_graph::ir::{Op, TypedGraph};

/// One GEMM as cuBLAS takes it (column-major, f32, α = 1, β = 0):
/// `C_b = op(A_b)·op(B_b)` for each of `batch` matrices, `op(A)` m × k, `op(B)` k × n.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GemmCall {
    /// A is stored k × m (read transposed).
    pub transa: bool,
    /// B is stored n × k (read transposed).
    pub transb: bool,
    /// Rows of op(A) and C.
    pub m: usize,
    /// Columns of op(B) and C.
    pub n: usize,
    /// The reduction.
    pub k: usize,
    /// Leading dimensions.
    pub lda: usize,
    /// Of B.
    pub ldb: usize,
    /// Of C.
    pub ldc: usize,
    /// Elements between consecutive matrices of A, B and C.
    pub stride_a: usize,
    /// Of B.
    pub stride_b: usize,
    /// Of C.
    pub stride_c: usize,
    /// Matrices.
    pub batch: usize,
}

/// What a device must do for [`execute_on`]. Buffers are ids the backend hands out.
pub trait Backend {
    /// A new buffer holding `v`.
    fn upload(&mut self, v: &[f32]) -> Result<usize>;
    /// A new zeroed buffer of `n` floats.
    fn alloc(&mut self, n: usize) -> Result<usize>;
    /// A buffer's values.
    fn download(&mut self, b: usize) -> Result<Vec<f32>>;
    /// Overwrite buffer `b` (of `v.len()` floats) with `v`.
    fn write(&mut self, b: usize, v: &[f32]) -> Result<()>;
    /// Make the generated kernels of `source` launchable (NVRTC on a GPU).
    fn prepare(&mut self, source: &str) -> Result<()>;
    /// Launch `ck` (rendered from `k`) with `args` = its inputs then its outputs.
    fn launch(&mut self, ck: &CudaKernel, k: &Kernel, args: &[usize]) -> Result<()>;
    /// `g` on buffers `a`, `b`, `c`.
    fn gemm(&mut self, g: &GemmCall, a: usize, b: usize, c: usize) -> Result<()>;
}

/// Where a kernel ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// Generated CUDA.
    Generated,
    /// cuBLAS GEMMs, then the epilogue as generated CUDA when there is one.
    Cublas {
        /// GEMM calls.
        gemms: usize,
        /// Whether an epilogue kernel followed.
        epilogue: bool,
    },
    /// The CPU interpreter, with the reason.
    Host(String),
}

/// One kernel's placement.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// Kernel name.
    pub kernel: String,
    /// Where it ran.
    pub placement: Placement,
}

/// Graph outputs: name, shape, values (as the CPU executor's `ExecResult::outputs`).
pub type Outputs = Vec<(String, Vec<usize>, Vec<f32>)>;

/// A program run on a device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceRun {
    /// Graph outputs: name, shape, values.
    pub outputs: Outputs,
    /// Every kernel, in order.
    pub steps: Vec<Step>,
}

/// How a matmul kernel runs on the device.
struct MatmulPlan {
    /// (GEMM, A tensor, B tensor, C tensor) per MatMul node; A and B are the tensors whose
    /// buffers cuBLAS reads (a transposed operand's source).
    gemms: Vec<(GemmCall, usize, usize, usize)>,
    /// The epilogue, when the kernel has one.
    epilogue: Option<(Kernel, CudaKernel)>,
}

/// cuBLAS's view of row-major `C = A·B` for MatMul node `n`: column-major `Cᵀ = Bᵀ·Aᵀ`, so
/// B's buffer is cuBLAS's A and A's is its B. An operand that is a transpose of the last
/// two axes is read from its source with the GEMM's transpose. A batched A against a 2-D B
/// folds A's batch into its rows; equal batches are strided; anything else is None.
fn plan_gemm(tg: &TypedGraph, n: usize) -> Option<(GemmCall, usize, usize, usize)> {
    let (ta, tb) = (tg.node_inputs[n][0], tg.node_inputs[n][1]);
    let tc = tg.node_outputs[n][0];
    let (sa, sb) = (&tg.tensors[ta].shape, &tg.tensors[tb].shape);
    if sa.len() < 2 || sb.len() < 2 {
        return None;
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let n_ = sb[sb.len() - 1];
    if sb[sb.len() - 2] != k {
        return None;
    }
    let batch_a: usize = sa[..sa.len() - 2].iter().product();
    let batch_b: usize = sb[..sb.len() - 2].iter().product();
    let (a_t, a_buf) = match transposed_source(tg, ta) {
        Some(s) => (true, s),
        None => (false, ta),
    };
    let (b_t, b_buf) = match transposed_source(tg, tb) {
        Some(s) => (true, s),
        None => (false, tb),
    };
    let (rows, batch) = if batch_b == 1 && !a_t {
        (batch_a * m, 1)
    } else if batch_a == batch_b {
        (m, batch_a)
    } else {
        return None;
    };
    if tg.tensors[tc].numel as usize != batch * rows * n_ {
        return None;
    }
    let g = GemmCall {
        transa: b_t,
        transb: a_t,
        m: n_,
        n: rows,
        k,
        lda: if b_t { k } else { n_ },
        ldb: if a_t { m } else { k },
        ldc: n_,
        stride_a: k * n_,
        stride_b: m * k,
        stride_c: m * n_,
        batch,
    };
    Some((g, b_buf, a_buf, tc))
}

/// The device plan of matmul kernel `k` (index `ki`), or why it stays on the host.
fn plan_matmul(tg: &TypedGraph, k: &Kernel, ki: usize) -> std::result::Result<MatmulPlan, String> {
    if k.kind != KernelKind::Matmul {
        return Err("not a matmul kernel".into());
    }
    let mm: Vec<usize> = k
        .nodes
        .iter()
        .copied()
        .filter(|&n| matches!(tg.nodes[n].op, Op::MatMul))
        .collect();
    let mut gemms = vec![];
    for &n in &mm {
        // A product that reads another product of this kernel cannot run whole first.
        if tg.node_inputs[n]
            .iter()
            .any(|&t| k.nodes.contains(&tg.producer[tg.base(t)]))
        {
            return Err("a product reads another node of its kernel".into());
        }
        gemms.push(plan_gemm(tg, n).ok_or("operand layout or batch the GEMM path does not take")?);
    }
    if mm.len() == k.nodes.len() {
        return Ok(MatmulPlan {
            gemms,
            epilogue: None,
        });
    }
    // The other nodes, elementwise over the products' shape, reading them from memory (the
    // bias Add among them: the GEMM does not add it).
    let epi = tensorforge_graph::fusion::matmul_epilogue_with(tg, k, false)
        .ok_or("its other nodes are not an elementwise epilogue over the products")?;
    let ck = render_kernel(tg, &epi, ki)?;
    Ok(MatmulPlan {
        gemms,
        epilogue: Some((epi, ck)),
    })
}

enum KernelPlan {
    Generated(CudaKernel),
    Matmul(MatmulPlan),
    Host(String),
}

/// A program ready to run on a device: its plans, its generated kernels prepared, its
/// inputs, weights and constants uploaded. Each [`DeviceProgram::run`] reuses the buffers
/// the first one allocated.
pub struct DeviceProgram {
    p: Program,
    plans: Vec<KernelPlan>,
    /// Buffers of the sources (uploaded once).
    sources: HashMap<usize, usize>,
    /// Buffers of every other tensor, allocated by the first run and reused.
    computed: HashMap<usize, usize>,
    /// Which buffer holds each tensor after the last run.
    live: HashMap<usize, usize>,
}

impl DeviceProgram {
    /// Plan `p`, prepare its generated kernels on `dev` and upload `inputs` (Input and
    /// Weight values by name; constants are filled).
    pub fn new<B: Backend>(
        dev: &mut B,
        p: &Program,
        inputs: &HashMap<String, Vec<f32>>,
    ) -> Result<DeviceProgram> {
        let tg = &p.graph;
        let gerr = |m: String| CudaError::Graph {
            name: tg.name.clone(),
            message: m,
        };
        let mut plans = vec![];
        let mut source = device_prelude();
        for (ki, k) in p.kernels.iter().enumerate() {
            let plan = match render_kernel(tg, k, ki) {
                Ok(ck) => KernelPlan::Generated(ck),
                Err(why) if k.kind == KernelKind::Matmul => match plan_matmul(tg, k, ki) {
                    Ok(mp) => KernelPlan::Matmul(mp),
                    Err(w) => KernelPlan::Host(format!("{why}; {w}")),
                },
                Err(why) => KernelPlan::Host(why),
            };
            match &plan {
                KernelPlan::Generated(ck) => source.push_str(&ck.source),
                KernelPlan::Matmul(MatmulPlan {
                    epilogue: Some((_, ck)),
                    ..
                }) => source.push_str(&ck.source),
                _ => {}
            }
            plans.push(plan);
        }
        dev.prepare(&source)?;
        let mut sources = HashMap::new();
        for (i, n) in tg.nodes.iter().enumerate() {
            let t = tg.node_outputs[i][0];
            match &n.op {
                Op::Input { .. } | Op::Weight { .. } => {
                    let v = inputs
                        .get(&tg.tensors[t].name)
                        .ok_or_else(|| gerr(format!("input `{}` not given", tg.tensors[t].name)))?;
                    if v.len() as u64 != tg.tensors[t].numel {
                        return Err(gerr(format!(
                            "input `{}` has {} values, expected {}",
                            tg.tensors[t].name,
                            v.len(),
                            tg.tensors[t].numel
                        )));
                    }
                    sources.insert(t, dev.upload(v)?);
                }
                Op::Constant { value, .. } => {
                    sources.insert(
                        t,
                        dev.upload(&vec![*value as f32; tg.tensors[t].numel as usize])?,
                    );
                }
                _ => {}
            }
        }
        Ok(DeviceProgram {
            p: p.clone(),
            plans,
            sources,
            computed: HashMap::new(),
            live: HashMap::new(),
        })
    }

    /// Where each kernel runs, in order.
    pub fn placements(&self) -> Vec<Step> {
        self.p
            .kernels
            .iter()
            .zip(&self.plans)
            .map(|(k, plan)| Step {
                kernel: k.name.clone(),
                placement: match plan {
                    KernelPlan::Generated(_) => Placement::Generated,
                    KernelPlan::Matmul(mp) => Placement::Cublas {
                        gemms: mp.gemms.len(),
                        epilogue: mp.epilogue.is_some(),
                    },
                    KernelPlan::Host(why) => Placement::Host(why.clone()),
                },
            })
            .collect()
    }

    /// Enqueue every kernel once, in order (host kernels wait for their inputs). Nothing
    /// is cloned or allocated on the host per run but what a host kernel needs.
    pub fn run<B: Backend>(&mut self, dev: &mut B) -> Result<()> {
        let DeviceProgram {
            p,
            plans,
            sources,
            computed,
            live: last,
        } = self;
        let tg = &p.graph;
        // Which tensors this run has written (views resolve only to those and the sources).
        let mut live: HashMap<usize, usize> = sources.clone();
        for (k, plan) in p.kernels.iter().zip(plans.iter()) {
            match plan {
                KernelPlan::Generated(ck) => {
                    let args = launch_args(dev, tg, computed, &mut live, ck)?;
                    dev.launch(ck, k, &args)?;
                }
                KernelPlan::Matmul(mp) => {
                    for (g, a, b, c) in &mp.gemms {
                        let ba = resolve(dev, tg, computed, &mut live, *a)?;
                        let bb = resolve(dev, tg, computed, &mut live, *b)?;
                        let bc = out_buf(dev, tg, computed, *c)?;
                        live.insert(*c, bc);
                        dev.gemm(g, ba, bb, bc)?;
                    }
                    if let Some((ek, ck)) = &mp.epilogue {
                        let args = launch_args(dev, tg, computed, &mut live, ck)?;
                        dev.launch(ck, ek, &args)?;
                    }
                }
                KernelPlan::Host(_) => {
                    let mut values = HashMap::new();
                    for t in tensorforge_graph::exec::kernel_reads(tg, k) {
                        let b = resolve(dev, tg, computed, &mut live, t)?;
                        values.insert(t, dev.download(b)?);
                    }
                    let outs =
                        tensorforge_graph::exec::run_kernel_alone(p, k, &values).map_err(|e| {
                            CudaError::Graph {
                                name: tg.name.clone(),
                                message: e.to_string(),
                            }
                        })?;
                    for (&t, v) in k.outputs.iter().zip(&outs) {
                        let b = out_buf(dev, tg, computed, t)?;
                        dev.write(b, v)?;
                        live.insert(t, b);
                    }
                }
            }
        }
        *last = live;
        Ok(())
    }

    /// The graph outputs after a run.
    pub fn outputs<B: Backend>(&mut self, dev: &mut B) -> Result<Outputs> {
        let tg = &self.p.graph;
        let mut out = vec![];
        for &t in &tg.outputs {
            let b = resolve(dev, tg, &mut self.computed, &mut self.live, t)?;
            out.push((
                tg.tensors[t].name.clone(),
                tg.tensors[t].shape.clone(),
                dev.download(b)?,
            ));
        }
        Ok(out)
    }
}

/// A launch's buffers: each input resolved, then each output's buffer.
fn launch_args<B: Backend>(
    dev: &mut B,
    tg: &TypedGraph,
    computed: &mut HashMap<usize, usize>,
    live: &mut HashMap<usize, usize>,
    ck: &CudaKernel,
) -> Result<Vec<usize>> {
    let mut args = Vec::with_capacity(ck.inputs.len() + ck.outputs.len());
    for &t in &ck.inputs {
        args.push(resolve(dev, tg, computed, live, t)?);
    }
    for &t in &ck.outputs {
        let b = out_buf(dev, tg, computed, t)?;
        live.insert(t, b);
        args.push(b);
    }
    Ok(args)
}

/// The buffer a kernel writes tensor `t` into: the one an earlier run allocated, or a new
/// one.
fn out_buf<B: Backend>(
    dev: &mut B,
    tg: &TypedGraph,
    computed: &mut HashMap<usize, usize>,
    t: usize,
) -> Result<usize> {
    if let Some(&b) = computed.get(&t) {
        return Ok(b);
    }
    let b = dev.alloc(tg.tensors[t].numel as usize)?;
    computed.insert(t, b);
    Ok(b)
}

/// The buffer holding tensor `t` in this run: its own, its Reshape source's (the same
/// values), or a Transpose materialized on the host (into a buffer kept for later runs).
fn resolve<B: Backend>(
    dev: &mut B,
    tg: &TypedGraph,
    computed: &mut HashMap<usize, usize>,
    live: &mut HashMap<usize, usize>,
    t: usize,
) -> Result<usize> {
    if let Some(&b) = live.get(&t) {
        return Ok(b);
    }
    let p = tg.producer[t];
    let src = tg.node_inputs[p].first().copied();
    let b = match (&tg.nodes[p].op, src) {
        (Op::Reshape { .. }, Some(s)) => resolve(dev, tg, computed, live, s)?,
        (Op::Transpose { perm }, Some(s)) => {
            let sb = resolve(dev, tg, computed, live, s)?;
            let v = dev.download(sb)?;
            let moved = tensorforge_graph::exec::transpose(&v, &tg.tensors[s].shape, perm);
            let b = out_buf(dev, tg, computed, t)?;
            dev.write(b, &moved)?;
            b
        }
        _ => {
            return Err(CudaError::Graph {
                name: tg.name.clone(),
                message: format!(
                    "tensor `{}` is read before any kernel wrote it",
                    tg.tensors[t].name
                ),
            })
        }
    };
    live.insert(t, b);
    Ok(b)
}

/// Run `p` once on `dev` with `inputs`; its outputs and where each kernel ran.
pub fn execute_on<B: Backend>(
    dev: &mut B,
    p: &Program,
    inputs: &HashMap<String, Vec<f32>>,
) -> Result<DeviceRun> {
    let mut dp = DeviceProgram::new(dev, p, inputs)?;
    dp.run(dev)?;
    Ok(DeviceRun {
        outputs: dp.outputs(dev)?,
        steps: dp.placements(),
    })
}

/// [`Backend`] on a GPU: buffers in device memory, kernels from NVRTC, GEMMs by cuBLAS.
pub struct CudaBackend<'g> {
    gpu: &'g Gpu,
    /// Each buffer and the number of floats it stands for (a zero-length tensor still has
    /// one float of storage, so that it has an address).
    bufs: Vec<(CudaSlice<f32>, usize)>,
    module: Option<Arc<CudaModule>>,
    blas: cudarc::cublas::CudaBlas,
    /// The scratch buffer launches share (grown when a launch needs more), and its size.
    scratch: Option<(usize, usize)>,
    /// Functions looked up in the module, by name.
    functions: HashMap<String, cudarc::driver::CudaFunction>,
}

impl<'g> CudaBackend<'g> {
    /// A backend on `gpu` (a cuBLAS handle on its stream).
    pub fn new(gpu: &'g Gpu) -> Result<CudaBackend<'g>> {
        Ok(CudaBackend {
            gpu,
            bufs: vec![],
            module: None,
            blas: crate::bench::new_blas(gpu)?,
            scratch: None,
            functions: HashMap::new(),
        })
    }

    fn ptr(&self, b: usize) -> u64 {
        self.bufs[b].0.device_ptr(&self.gpu.stream).0
    }
}

impl Backend for CudaBackend<'_> {
    fn upload(&mut self, v: &[f32]) -> Result<usize> {
        let s = if v.is_empty() {
            self.gpu.stream.alloc_zeros::<f32>(1)
        } else {
            self.gpu.stream.clone_htod(v)
        }
        .map_err(CudaError::driver("copying to the device"))?;
        self.bufs.push((s, v.len()));
        Ok(self.bufs.len() - 1)
    }

    fn alloc(&mut self, n: usize) -> Result<usize> {
        let s = self
            .gpu
            .stream
            .alloc_zeros::<f32>(n.max(1))
            .map_err(CudaError::driver("allocating"))?;
        self.bufs.push((s, n));
        Ok(self.bufs.len() - 1)
    }

    fn download(&mut self, b: usize) -> Result<Vec<f32>> {
        let (s, n) = &self.bufs[b];
        let mut v = self
            .gpu
            .stream
            .clone_dtoh(s)
            .map_err(CudaError::driver("copying to the host"))?;
        v.truncate(*n);
        Ok(v)
    }

    fn write(&mut self, b: usize, v: &[f32]) -> Result<()> {
        if v.is_empty() {
            return Ok(());
        }
        let (s, n) = &mut self.bufs[b];
        if *n != v.len() {
            return Err(CudaError::Measurement {
                what: format!("buffer {b}"),
                reason: format!("holds {n} floats, written with {}", v.len()),
            });
        }
        self.gpu
            .stream
            .memcpy_htod(v, s)
            .map_err(CudaError::driver("copying to the device"))
    }

    fn prepare(&mut self, source: &str) -> Result<()> {
        self.functions.clear();
        let (ptx, _) = crate::nvrtc::compile_ptx_cached(source, "program", self.gpu.info.arch())?;
        self.module = Some(
            self.gpu
                .ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
                .map_err(CudaError::driver("loading the module"))?,
        );
        Ok(())
    }

    fn launch(&mut self, ck: &CudaKernel, _k: &Kernel, args: &[usize]) -> Result<()> {
        if !self.functions.contains_key(&ck.symbol) {
            let module = self.module.as_ref().ok_or_else(|| CudaError::Measurement {
                what: ck.symbol.clone(),
                reason: "launched before the module was prepared".into(),
            })?;
            let f = module
                .load_function(&ck.symbol)
                .map_err(CudaError::driver(format!("loading {}", ck.symbol)))?;
            self.functions.insert(ck.symbol.clone(), f);
        }
        let f = self.functions[&ck.symbol].clone();
        let grid = crate::bench::grid_for(ck, self.gpu.info.sm_count);
        let need = ck.scratch_floats_for(grid, BLOCK_THREADS).max(1);
        let scratch = match self.scratch {
            Some((b, n)) if n >= need => b,
            _ => {
                let b = self.alloc(need)?;
                self.scratch = Some((b, need));
                b
            }
        };
        let mut ptrs: Vec<u64> = args.iter().map(|&b| self.ptr(b)).collect();
        ptrs.push(self.ptr(scratch));
        let rows = ck.rows as i64;
        let mut b = self.gpu.stream.launch_builder(&f);
        for p in &ptrs {
            b.arg(p);
        }
        b.arg(&rows);
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: one device pointer per input and output (buffers of the tensors' element
        // counts) and the scratch buffer, then the row count: the kernel's parameters.
        unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching a kernel"))?;
        Ok(())
    }

    fn gemm(&mut self, g: &GemmCall, a: usize, b: usize, c: usize) -> Result<()> {
        use cudarc::cublas::sys::{
            cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType,
        };
        let i = |v: usize, f: &str| {
            i32::try_from(v).map_err(|_| CudaError::invalid("gemm", f, v, "exceeds 2^31 - 1"))
        };
        let op = |t: bool| {
            if t {
                cublasOperation_t::CUBLAS_OP_T
            } else {
                cublasOperation_t::CUBLAS_OP_N
            }
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (pa, pb, pc) = (self.ptr(a), self.ptr(b), self.ptr(c));
        let ty = cudaDataType::CUDA_R_32F;
        // SAFETY: the buffers hold the operands the plan sized (batch · stride elements
        // each, checked against the tensors' element counts when planned); host α and β.
        unsafe {
            cudarc::cublas::result::gemm_strided_batched_ex(
                *self.blas.handle(),
                op(g.transa),
                op(g.transb),
                i(g.m, "m")?,
                i(g.n, "n")?,
                i(g.k, "k")?,
                (&alpha as *const f32).cast(),
                pa as *const _,
                ty,
                i(g.lda, "lda")?,
                g.stride_a as i64,
                pb as *const _,
                ty,
                i(g.ldb, "ldb")?,
                g.stride_b as i64,
                (&beta as *const f32).cast(),
                pc as *mut _,
                ty,
                i(g.ldc, "ldc")?,
                g.stride_c as i64,
                i(g.batch, "batch")?,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(CudaError::cublas("GemmStridedBatchedEx"))
    }
}

/// Run `p` whole on `gpu` and compare its outputs with the CPU interpreter's.
pub fn execute_on_gpu(
    gpu: &Gpu,
    p: &Program,
    inputs: &HashMap<String, Vec<f32>>,
) -> Result<DeviceRun> {
    let mut dev = CudaBackend::new(gpu)?;
    execute_on(&mut dev, p, inputs)
}
