//! Each generated kernel alone, against the CPU executor: the interpreter runs the whole
//! program and hands over every rendered kernel's inputs (before it runs) and outputs
//! (after) — [`kernel_cases`], no GPU needed — and each kernel then runs on the GPU (or
//! under the tests' CPU emulator) on exactly those inputs, its outputs compared with the
//! interpreter's ([`agreement`]). Kernels the CUDA target does not render (matmuls, opaque
//! kernels) stay on the CPU and are listed with the reason. Left out: running a whole
//! program on the GPU with its tensors staying there (the matmul and opaque kernels have no
//! GPU path yet; [`crate::exec`] runs the whole program, [`check_on_gpu`] does both).

use crate::bench::{stored_bytes, widen};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::kernels::compile_program_with;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use serde::Serialize;
use std::collections::HashMap;
use tensorforge_graph::codegen::cuda::{
    render_program, CudaKernel, CudaOptions, CudaProgram, Storage, BLOCK_THREADS,
};
use tensorforge_graph::fusion::Program;

/// One rendered kernel with the interpreter's inputs and outputs for it.
#[derive(Debug, Clone)]
pub struct KernelCase {
    /// The kernel (its `inputs` and `outputs` give the order of the two vectors below).
    pub kernel: CudaKernel,
    /// Kernel name in the program.
    pub name: String,
    /// Each input's values.
    pub inputs: Vec<Vec<f32>>,
    /// Each output's values as the interpreter computed them.
    pub expected: Vec<Vec<f32>>,
}

/// A program's rendered kernels as cases, and the kernels left to the CPU.
#[derive(Debug, Clone)]
pub struct Cases {
    /// The program's CUDA.
    pub cuda: CudaProgram,
    /// One case per rendered kernel.
    pub cases: Vec<KernelCase>,
    /// `(kernel name, reason)` for each kernel the CUDA target does not render.
    pub left_to_cpu: Vec<(String, String)>,
}

/// Run `p` in the interpreter on `inputs` and collect a case for every kernel the CUDA
/// target renders.
pub fn kernel_cases(p: &Program, inputs: &HashMap<String, Vec<f32>>) -> Result<Cases> {
    let cuda = render_program(p);
    let wanted: HashMap<usize, &CudaKernel> = cuda.kernels.iter().map(|k| (k.kernel, k)).collect();
    let mut seen: HashMap<(usize, usize), Vec<f32>> = HashMap::new();
    tensorforge_graph::exec::execute_observed(p, inputs, &mut |ki, t, v| {
        if wanted.contains_key(&ki) {
            seen.entry((ki, t)).or_insert_with(|| v.to_vec());
        }
    })
    .map_err(|e| CudaError::Graph {
        name: p.graph.name.clone(),
        message: e.to_string(),
    })?;
    let tg = &p.graph;
    let mut cases = vec![];
    for k in &cuda.kernels {
        let get = |t: usize| -> Result<Vec<f32>> {
            seen.get(&(k.kernel, t))
                .or_else(|| seen.get(&(k.kernel, tg.base(t))))
                .cloned()
                .ok_or_else(|| CudaError::Graph {
                    name: p.graph.name.clone(),
                    message: format!(
                        "the interpreter did not show tensor `{}` of kernel {}",
                        tg.tensors[t].name, p.kernels[k.kernel].name
                    ),
                })
        };
        cases.push(KernelCase {
            kernel: k.clone(),
            name: p.kernels[k.kernel].name.clone(),
            inputs: k.inputs.iter().map(|&t| get(t)).collect::<Result<_>>()?,
            expected: k.outputs.iter().map(|&t| get(t)).collect::<Result<_>>()?,
        });
    }
    let left_to_cpu = cuda
        .skipped
        .iter()
        .map(|(i, why)| (p.kernels[*i].name.clone(), why.clone()))
        .collect();
    Ok(Cases {
        cuda,
        cases,
        left_to_cpu,
    })
}

/// How far one output is from the interpreter's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Agreement {
    /// Largest |got − want| over elements where either is finite.
    pub max_abs_err: f64,
    /// Largest finite |want| (at least 1e-30): the scale errors are judged against.
    pub scale: f64,
    /// Elements where one side is non-finite and the two differ (NaN equals NaN).
    pub nonfinite_mismatches: usize,
    /// Elements compared (a length mismatch counts as a mismatch of every element).
    pub elements: usize,
}

impl Agreement {
    /// `max_abs_err / scale`.
    pub fn relative(&self) -> f64 {
        self.max_abs_err / self.scale
    }

    /// Within `tol` of the scale and no non-finite mismatch.
    pub fn within(&self, tol: f64) -> bool {
        self.nonfinite_mismatches == 0 && self.relative() <= tol
    }
}

/// Compare `got` with `want` element by element.
///
/// ```
/// let a = tensorforge_cuda::check::agreement(&[1.0, f32::NAN, 2.0], &[1.0, f32::NAN, 2.5]);
/// assert_eq!(a.max_abs_err, 0.5);
/// assert_eq!(a.scale, 2.5);
/// assert_eq!(a.nonfinite_mismatches, 0);
/// ```
pub fn agreement(got: &[f32], want: &[f32]) -> Agreement {
    let scale = want
        .iter()
        .filter(|v| v.is_finite())
        .fold(1e-30f64, |m, v| m.max(f64::from(v.abs())));
    if got.len() != want.len() {
        return Agreement {
            max_abs_err: f64::INFINITY,
            scale,
            nonfinite_mismatches: want.len().max(got.len()),
            elements: want.len(),
        };
    }
    let mut max_abs_err = 0.0f64;
    let mut bad = 0;
    for (x, y) in got.iter().zip(want) {
        if x.is_finite() && y.is_finite() {
            max_abs_err = max_abs_err.max(f64::from((x - y).abs()));
        } else if !((x.is_nan() && y.is_nan()) || x == y) {
            bad += 1;
        }
    }
    Agreement {
        max_abs_err,
        scale,
        nonfinite_mismatches: bad,
        elements: want.len(),
    }
}

/// Relative tolerance on the GPU: the CPU executor's 2e-6 (docs/graph.md) widened for
/// NVRTC's contraction of a·b + c into FMAs and the GPU's summation order.
pub const GPU_TOLERANCE: f64 = 1e-5;

/// One kernel on the GPU against the interpreter.
#[derive(Debug, Clone, Serialize)]
pub struct KernelCheck {
    /// Kernel name in the program.
    pub kernel: String,
    /// Rows × columns.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// `warp` or `block`.
    pub unit: tensorforge_graph::codegen::cuda::RowUnit,
    /// Consecutive columns a thread takes per step with f32 storage (more than 1: 128-bit
    /// accesses).
    pub cols_per_thread: usize,
    /// The worst output's agreement (f32 storage).
    pub agreement: Agreement,
    /// Within [`GPU_TOLERANCE`].
    pub agrees: bool,
    /// One launch between two events (inputs already on the device), ns.
    pub gpu_ns: f64,
    /// The same kernel with 16-bit storage (f16, bf16), against the interpreter on the
    /// same inputs rounded to that storage, its outputs rounded once.
    pub storage16: Vec<StorageCheck>,
}

/// One kernel with 16-bit storage on the GPU against the interpreter.
#[derive(Debug, Clone, Serialize)]
pub struct StorageCheck {
    /// The storage.
    pub storage: Storage,
    /// The worst output's agreement with the interpreter's output rounded to the storage.
    pub agreement: Agreement,
    /// Within [`GPU_TOLERANCE`] plus one unit in the last place of the storage at the
    /// output's scale ([`storage_tolerance`]).
    pub agrees: bool,
    /// One launch, ns.
    pub gpu_ns: f64,
}

/// Relative tolerance of a kernel stored as `s` against the interpreter's output rounded to
/// `s`: [`GPU_TOLERANCE`] plus one unit in the last place at the output's scale, 2^-7 for
/// bf16 (8 significant bits) and 2^-10 for f16 (11), since a float a rounding error away
/// from the interpreter's may round to the neighbouring 16-bit value.
pub fn storage_tolerance(s: Storage) -> f64 {
    GPU_TOLERANCE
        + match s {
            Storage::F32 => 0.0,
            Storage::F16 => 2f64.powi(-10),
            Storage::Bf16 => 2f64.powi(-7),
        }
}

/// One graph output of the whole program on the GPU against the CPU interpreter's.
#[derive(Debug, Clone, Serialize)]
pub struct OutputCheck {
    /// Output name.
    pub name: String,
    /// Agreement with the interpreter.
    pub agreement: Agreement,
    /// Within [`GPU_TOLERANCE`].
    pub agrees: bool,
}

/// The whole program on the GPU ([`crate::exec`]): where each kernel ran, and its outputs
/// against the CPU interpreter's.
#[derive(Debug, Clone, Serialize)]
pub struct WholeRun {
    /// Every kernel and where it ran.
    pub steps: Vec<crate::exec::Step>,
    /// Kernels run as generated CUDA.
    pub generated: usize,
    /// Kernels run as cuBLAS GEMMs (and their epilogue).
    pub cublas: usize,
    /// Kernels run on the host, with their inputs copied back.
    pub host: usize,
    /// Each graph output against the interpreter.
    pub outputs: Vec<OutputCheck>,
}

/// A program's kernels checked on the GPU.
#[derive(Debug, Clone, Serialize)]
pub struct GpuCheckReport {
    /// Always 1.
    pub schema_version: u32,
    /// Graph name.
    pub graph: String,
    /// The GPU.
    pub gpu: crate::device::GpuInfo,
    /// Rendered kernels, each run alone on the GPU.
    pub kernels: Vec<KernelCheck>,
    /// Kernels left to the CPU, with the reason.
    pub left_to_cpu: Vec<(String, String)>,
    /// The whole program on the GPU.
    pub whole: WholeRun,
}

impl GpuCheckReport {
    /// Every rendered kernel agrees in every storage, and so does every output of the
    /// whole program.
    pub fn all_agree(&self) -> bool {
        self.kernels
            .iter()
            .all(|k| k.agrees && k.storage16.iter().all(|s| s.agrees))
            && self.whole.outputs.iter().all(|o| o.agrees)
    }
}

/// Compile `p`'s kernels with NVRTC, run each on `gpu` on the interpreter's inputs and
/// compare its outputs with the interpreter's; then each again with f16 and with bf16
/// storage, on those inputs rounded to it, against the interpreter run on the rounded
/// inputs (the kernel alone), its outputs rounded.
pub fn check_on_gpu(
    gpu: &Gpu,
    p: &Program,
    inputs: &HashMap<String, Vec<f32>>,
) -> Result<GpuCheckReport> {
    let cases = kernel_cases(p, inputs)?;
    let mut modules = vec![];
    for st in Storage::ALL {
        let prog = compile_program_with(p, &p.graph.name, gpu.info.arch(), &CudaOptions::new(st))?;
        let module = gpu
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(prog.ptx.clone()))
            .map_err(CudaError::driver("loading the module"))?;
        modules.push((st, module, prog.cuda));
    }
    let mut kernels = vec![];
    for (ci, c) in cases.cases.iter().enumerate() {
        let k = &c.kernel;
        let lens: Vec<usize> = c.expected.iter().map(Vec::len).collect();
        let (got, ms) = launch_alone(gpu, &modules[0].1, k, &c.inputs, &lens)?;
        let a32 = worst(got.iter().zip(&c.expected).map(|(g, w)| agreement(g, w)));
        let mut storage16 = vec![];
        for (st, module, cuda) in &modules[1..] {
            let k16 = &cuda.kernels[ci];
            let want = rounded_expectation(p, c, *st)?;
            let (got, ms) = launch_alone(gpu, module, k16, &c.inputs, &lens)?;
            let a = worst(got.iter().zip(&want).map(|(g, w)| agreement(g, w)));
            storage16.push(StorageCheck {
                storage: *st,
                agrees: a.within(storage_tolerance(*st)),
                agreement: a,
                gpu_ns: ms * 1e6,
            });
        }
        kernels.push(KernelCheck {
            kernel: c.name.clone(),
            rows: k.rows,
            cols: k.cols,
            unit: k.unit,
            cols_per_thread: k.cols_per_thread,
            agrees: a32.within(GPU_TOLERANCE),
            agreement: a32,
            gpu_ns: ms * 1e6,
            storage16,
        });
    }
    let whole = whole_run(gpu, p, inputs)?;
    Ok(GpuCheckReport {
        schema_version: 2,
        graph: p.graph.name.clone(),
        gpu: gpu.info.clone(),
        kernels,
        left_to_cpu: cases.left_to_cpu,
        whole,
    })
}

/// What case `c`'s kernel stored as `st` should hold: the interpreter's outputs of the kernel
/// alone on the case's inputs rounded to `st`, each rounded to `st` (to within
/// [`storage_tolerance`]: the kernel's float arithmetic differs from the interpreter's by
/// rounding, which can move a value to the neighbouring 16-bit one).
pub fn rounded_expectation(p: &Program, c: &KernelCase, st: Storage) -> Result<Vec<Vec<f32>>> {
    let tg = &p.graph;
    let kernel = &p.kernels[c.kernel.kernel];
    let mut values = HashMap::new();
    // The tensors the interpreter reads, from the kernel's inputs (the same tensor, or the
    // same storage under a Reshape).
    for t in tensorforge_graph::exec::kernel_reads(tg, kernel) {
        if let Some(j) = c
            .kernel
            .inputs
            .iter()
            .position(|&i| i == t || tg.base(i) == tg.base(t))
        {
            values.insert(t, c.inputs[j].iter().map(|&x| st.round(x)).collect());
        }
    }
    let want = tensorforge_graph::exec::run_kernel_alone(p, kernel, &values).map_err(|e| {
        CudaError::Graph {
            name: p.graph.name.clone(),
            message: format!("kernel {} alone: {e}", c.name),
        }
    })?;
    Ok(want
        .into_iter()
        .map(|v| v.into_iter().map(|x| st.round(x)).collect())
        .collect())
}

/// The worst of some agreements (a non-finite mismatch first, then the largest relative
/// error); a perfect one where there are none.
fn worst(all: impl Iterator<Item = Agreement>) -> Agreement {
    let mut w: Option<Agreement> = None;
    for a in all {
        if w.is_none_or(|w| {
            (a.nonfinite_mismatches > 0, a.relative()) > (w.nonfinite_mismatches > 0, w.relative())
        }) {
            w = Some(a);
        }
    }
    w.unwrap_or(Agreement {
        max_abs_err: 0.0,
        scale: 1.0,
        nonfinite_mismatches: 0,
        elements: 0,
    })
}

/// Launch kernel `k` of `module` alone with `inputs` (rounded to the kernel's storage on
/// upload) and outputs of `lens` elements; returns the outputs (widened to f32) and the
/// launch's time between two events, ms.
fn launch_alone(
    gpu: &Gpu,
    module: &std::sync::Arc<cudarc::driver::CudaModule>,
    k: &CudaKernel,
    inputs: &[Vec<f32>],
    lens: &[usize],
) -> Result<(Vec<Vec<f32>>, f64)> {
    let st = k.storage;
    let ev = || {
        gpu.ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(CudaError::driver("creating an event"))
    };
    let (start, end) = (ev()?, ev()?);
    let f = module
        .load_function(&k.symbol)
        .map_err(CudaError::driver(format!("loading {}", k.symbol)))?;
    let mut bufs: Vec<CudaSlice<u8>> = vec![];
    for v in inputs {
        let mut b = stored_bytes(st, v);
        b.resize(b.len().max(16), 0);
        bufs.push(
            gpu.stream
                .clone_htod(&b)
                .map_err(CudaError::driver("copying to the device"))?,
        );
    }
    for &n in lens {
        bufs.push(
            gpu.stream
                .alloc_zeros::<u8>((n * st.bytes()).max(16))
                .map_err(CudaError::driver("allocating"))?,
        );
    }
    let grid = crate::bench::grid_for(k, gpu.info.sm_count);
    bufs.push(
        gpu.stream
            .alloc_zeros::<u8>(4 * k.scratch_floats_for(grid, BLOCK_THREADS).max(1))
            .map_err(CudaError::driver("allocating scratch"))?,
    );
    let ptrs: Vec<u64> = bufs.iter().map(|b| b.device_ptr(&gpu.stream).0).collect();
    let rows = k.rows as i64;
    let cfg = LaunchConfig {
        grid_dim: (grid, 1, 1),
        block_dim: (BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    start
        .record(&gpu.stream)
        .map_err(CudaError::driver("recording an event"))?;
    let mut b = gpu.stream.launch_builder(&f);
    for p in &ptrs {
        b.arg(p);
    }
    b.arg(&rows);
    // SAFETY: one device pointer per input (the values in the kernel's storage), output and
    // scratch buffer, sized as the kernel's tensors in that storage (scratch in f32); the
    // entry's parameters were checked against this list by compile_program_with.
    unsafe { b.launch(cfg) }.map_err(CudaError::driver("launching a kernel"))?;
    end.record(&gpu.stream)
        .map_err(CudaError::driver("recording an event"))?;
    end.synchronize()
        .map_err(CudaError::driver("waiting for the kernel"))?;
    let ms = start
        .elapsed_ms(&end)
        .map_err(CudaError::driver("reading an event"))?;
    let mut outs = vec![];
    for (j, &n) in lens.iter().enumerate() {
        let got = gpu
            .stream
            .clone_dtoh(&bufs[inputs.len() + j])
            .map_err(CudaError::driver("copying to the host"))?;
        let mut v = widen(st, &got);
        v.truncate(n);
        outs.push(v);
    }
    Ok((outs, f64::from(ms)))
}

/// The whole program on `gpu` against the interpreter.
fn whole_run(gpu: &Gpu, p: &Program, inputs: &HashMap<String, Vec<f32>>) -> Result<WholeRun> {
    use crate::exec::Placement;
    let want = tensorforge_graph::exec::execute(p, inputs).map_err(|e| CudaError::Graph {
        name: p.graph.name.clone(),
        message: e.to_string(),
    })?;
    let got = crate::exec::execute_on_gpu(gpu, p, inputs)?;
    let outputs = got
        .outputs
        .iter()
        .zip(&want.outputs)
        .map(|((n, _, v), (_, _, w))| {
            let a = agreement(v, w);
            OutputCheck {
                name: n.clone(),
                agrees: a.within(GPU_TOLERANCE),
                agreement: a,
            }
        })
        .collect();
    let count =
        |f: &dyn Fn(&Placement) -> bool| got.steps.iter().filter(|s| f(&s.placement)).count();
    Ok(WholeRun {
        generated: count(&|p| matches!(p, Placement::Generated)),
        cublas: count(&|p| matches!(p, Placement::Cublas { .. })),
        host: count(&|p| matches!(p, Placement::Host(_))),
        steps: got.steps,
        outputs,
    })
}

/// `run GRAPH --device cuda`: fuse `g`, take its inputs from `weights`, the `.npy` files of
/// `inputs_dir` and seeded values (as `run` does), open device `ordinal` and check every
/// generated kernel there ([`check_on_gpu`]). Input errors come before the device is
/// opened.
pub fn check_graph_on_gpu(
    ordinal: usize,
    g: &tensorforge_graph::Graph,
    weights: HashMap<String, Vec<f32>>,
    inputs_dir: Option<&str>,
    seed: u64,
) -> Result<GpuCheckReport> {
    let gerr = |e: &dyn std::fmt::Display| CudaError::Graph {
        name: g.name.clone(),
        message: e.to_string(),
    };
    let p = tensorforge_graph::fusion::compile(g)
        .map_err(|e| gerr(&e))?
        .fused;
    let mut ins = weights;
    if let Some(d) = inputs_dir {
        ins.extend(tensorforge_measure::graph_run::read_inputs(d, &p.graph).map_err(|e| gerr(&e))?);
    }
    tensorforge_graph::exec::fill_inputs(&p.graph, &mut ins, seed).map_err(|e| gerr(&e))?;
    let gpu = Gpu::open(ordinal)?;
    check_on_gpu(&gpu, &p, &ins)
}
