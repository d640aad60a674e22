//! Graph compiler commands: `fuse`, `plan-memory`, `run` and `memory-traffic`. Parsing,
//! file reading and printing only; the work is in `tensorforge-graph`.

use super::{print_json, HwArgs};
use crate::fmt;
use crate::render::Table;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::collections::HashMap;
use std::fmt::Write as _;
use tensorforge_core::DType;
use tensorforge_graph::fusion::compile;
use tensorforge_graph::onnx::ImportOptions;
use tensorforge_graph::planner::{check_capacity, plan, DEFAULT_ALIGN_BYTES};
use tensorforge_graph::traffic::fuse_report;
use tensorforge_graph::{mlp, Graph};

/// Load a graph file (JSON or ONNX) and the weight data it carries (ONNX initializers and
/// `Constant` tensors; a JSON graph carries none), by tensor name: the single place that
/// decides how a path is read. An ONNX model's symbolic dims are bound by `options`; with
/// `runnable`, a model holding any op that cannot execute is an error listing them all.
pub fn load_graph_with(
    path: &str,
    options: &ImportOptions,
    runnable: bool,
) -> Result<(Graph, HashMap<String, Vec<f32>>)> {
    let l = load_graph_dims(path, options, runnable)?;
    Ok((l.0, l.1))
}

pub use tensorforge_graph::load::Loaded;

/// [`load_graph_with`], plus each graph output's dims with the model's symbolic names
/// carried through (`batch`, `sequence`; empty for a JSON graph): the library's
/// [`tensorforge_graph::load::load_graph`].
pub fn load_graph_dims(path: &str, options: &ImportOptions, runnable: bool) -> Result<Loaded> {
    Ok(tensorforge_graph::load::load_graph(
        path, options, runnable,
    )?)
}

/// Arguments of `fuse`.
#[derive(Args, Debug)]
pub struct FuseArgs {
    /// Graph file (JSON; see docs/graph.md).
    pub graph: String,
    /// The value of a symbolic dim of an ONNX model (`--dim batch=2`; repeatable).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// Print every rewrite and fusion decision with its reason.
    #[arg(long)]
    pub explain: bool,
    #[command(flatten)]
    pub hw: HwArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `codegen`.
#[derive(Args, Debug)]
pub struct CodegenArgs {
    /// Graph file (JSON or ONNX).
    pub graph: String,
    /// The value of a symbolic dim of an ONNX model (`--dim batch=2`; repeatable).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// Target language.
    #[arg(long, value_enum, default_value_t = CodegenTarget::C)]
    pub target: CodegenTarget,
    /// Element type of tensors in device memory (`--target cuda` only; arithmetic is f32).
    #[arg(long, value_enum, default_value_t = CodegenStorage::Fp32)]
    pub storage: CodegenStorage,
    /// Folder to write the sources into (created; files are replaced).
    #[arg(long, value_name = "DIR")]
    pub out: String,
}

/// Source targets of `codegen`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CodegenTarget {
    /// C11, as the JIT compiles it.
    C,
    /// Triton (Python), one program per row, with a launcher.
    Triton,
    /// CUDA C: a warp or a block per row, 128-bit loads where rows allow.
    Cuda,
}

/// Tensor storage of `codegen --target cuda`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CodegenStorage {
    /// IEEE binary32.
    Fp32,
    /// IEEE binary16.
    Fp16,
    /// bfloat16.
    Bf16,
}

impl From<CodegenStorage> for tensorforge_graph::codegen::cuda::Storage {
    fn from(s: CodegenStorage) -> Self {
        use tensorforge_graph::codegen::cuda::Storage;
        match s {
            CodegenStorage::Fp32 => Storage::F32,
            CodegenStorage::Fp16 => Storage::F16,
            CodegenStorage::Bf16 => Storage::Bf16,
        }
    }
}

/// Write the generated kernel sources of a graph's fused program.
pub fn run_codegen(a: CodegenArgs) -> Result<()> {
    if a.storage != CodegenStorage::Fp32 && a.target != CodegenTarget::Cuda {
        bail!(
            "invalid `--storage` = `{}`: only `--target cuda` stores tensors in 16 bits",
            tensorforge_graph::codegen::cuda::Storage::from(a.storage).label()
        );
    }
    let g = load_graph_with(&a.graph, &import_options(&a.dims, None)?, false)?.0;
    let c = compile(&g).map_err(|e| anyhow!("{}: {e}", a.graph))?;
    let files = match a.target {
        CodegenTarget::C => tensorforge_graph::codegen::c::files(&c.fused),
        CodegenTarget::Triton => tensorforge_graph::codegen::triton::files(&c.fused),
        CodegenTarget::Cuda => tensorforge_graph::codegen::cuda::files(
            &c.fused,
            &tensorforge_graph::codegen::cuda::CudaOptions::new(a.storage.into()),
        ),
    };
    let d = std::path::Path::new(&a.out);
    if d.exists() && !d.is_dir() {
        bail!("invalid `--out` = `{}`: not a directory", a.out);
    }
    std::fs::create_dir_all(d).with_context(|| format!("{}: cannot create directory", a.out))?;
    let files: Vec<(std::path::PathBuf, &String)> =
        files.iter().map(|(n, t)| (d.join(n), t)).collect();
    tensorforge_store::write_all_atomic(&files)?;
    println!(
        "wrote {} files to {} ({} kernels in the fused program; manifest.json lists the generated ones and why the others are left to the interpreter)",
        files.len(),
        a.out,
        c.fused.kernels.len()
    );
    Ok(())
}

/// Fuse a graph and report kernels, reasons and traffic.
pub fn run_fuse(a: FuseArgs) -> Result<()> {
    let g = load_graph_with(&a.graph, &import_options(&a.dims, None)?, false)?.0;
    let hw = a.hw.load()?;
    let c = compile(&g).map_err(|e| anyhow!("{}: {e}", a.graph))?;
    let r = fuse_report(&c, &hw)?;
    if a.json {
        return print_json(&r);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "graph `{}` on {} (evidence: model)",
        r.graph, r.hardware
    );
    let mut t = Table::new(&[
        "kernel", "kind", "pattern", "nodes", "read", "write", "FLOPs", "time", "bound",
    ]);
    for k in &r.kernels {
        t.row(vec![
            k.name.clone(),
            format!("{:?}", k.kind).to_lowercase(),
            k.pattern.clone().unwrap_or_else(|| "-".into()),
            k.nodes.join(","),
            fmt::bytes(k.read_bytes as f64),
            fmt::bytes(k.write_bytes as f64),
            fmt::count(k.flops as f64, "FLOP"),
            fmt::time(k.time_ns * 1e-9),
            k.bound.clone(),
        ]);
    }
    out.push_str(&t.render());
    let s = &r.traffic;
    let _ = writeln!(
        out,
        "traffic: unfused {} ({} kernels, {}) -> fused {} ({} kernels, {}): {:.2}x less, {:.1} % saved",
        fmt::bytes(s.unfused_bytes as f64),
        r.unfused_kernels.len(),
        fmt::time(s.unfused_time_ns * 1e-9),
        fmt::bytes(s.fused_bytes as f64),
        r.kernels.len(),
        fmt::time(s.fused_time_ns * 1e-9),
        s.reduction_ratio,
        s.saved_percent
    );
    if a.explain {
        let _ = writeln!(out, "decisions ([+] accepted, [-] refused):");
        for d in &r.decisions {
            let _ = writeln!(
                out,
                "  [{}] {} {}{}: ({}) {}",
                if d.accepted { "+" } else { "-" },
                d.stage,
                d.node,
                d.target
                    .as_ref()
                    .map(|t| format!(" -> {t}"))
                    .unwrap_or_default(),
                d.rule,
                d.reason
            );
        }
    } else {
        let _ = writeln!(out, "(--explain prints the reason for every decision)");
    }
    print!("{out}");
    // The process exits next: freeing a million-node graph block by block took 4 of its
    // 15 seconds (docs/reliability.md), and the operating system reclaims it at once.
    std::mem::forget((g, c, r));
    Ok(())
}

/// Arguments of `plan-memory`.
#[derive(Args, Debug)]
pub struct PlanMemoryArgs {
    /// Graph file (JSON).
    pub graph: String,
    /// The value of a symbolic dim of an ONNX model (`--dim batch=2`; repeatable).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// Fail (exit 2) when the plan needs more than this many bytes.
    #[arg(long, value_name = "N")]
    pub capacity_bytes: Option<u64>,
    /// Offset alignment in bytes (a power of two).
    #[arg(long, default_value_t = DEFAULT_ALIGN_BYTES, value_name = "N")]
    pub align: u64,
    /// Plan the unfused program (one kernel per op) instead of the fused one.
    #[arg(long)]
    pub unfused: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Plan a graph's static memory.
pub fn run_plan_memory(a: PlanMemoryArgs) -> Result<()> {
    let g = load_graph_with(&a.graph, &import_options(&a.dims, None)?, false)?.0;
    let c = compile(&g).map_err(|e| anyhow!("{}: {e}", a.graph))?;
    let prog = if a.unfused { &c.unfused } else { &c.fused };
    let p = plan(prog, a.align).map_err(|e| anyhow!("{}: {e}", a.graph))?;
    if let Some(cap) = a.capacity_bytes {
        check_capacity(&p, cap).map_err(|e| anyhow!("{}: {e}", a.graph))?;
    }
    if a.json {
        return print_json(&p);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "graph `{}`: {} steps ({} program), alignment {} B",
        p.graph,
        p.steps,
        if a.unfused { "unfused" } else { "fused" },
        p.align_bytes
    );
    let mut t = Table::new(&["tensor", "bytes", "offset", "steps"]);
    for x in &p.tensors {
        t.row(vec![
            x.name.clone(),
            fmt::bytes(x.aligned_bytes as f64),
            x.offset_bytes.to_string(),
            format!("{}..={}", x.first_step, x.last_step),
        ]);
    }
    out.push_str(&t.render());
    let _ = writeln!(
        out,
        "planned peak {} ({}), lower bound {} (step {}: {}), ratio {:.3}, no reuse {}",
        fmt::bytes(p.peak_bytes as f64),
        p.algorithm,
        fmt::bytes(p.lower_bound_bytes as f64),
        p.peak_step,
        p.peak_live_tensors.join(", "),
        p.peak_to_lower_bound,
        fmt::bytes(p.no_reuse_bytes as f64)
    );
    let _ = writeln!(
        out,
        "greedy by size {} B, lifetime ordered {} B; verified: no two live tensors overlap",
        p.greedy_by_size_bytes, p.lifetime_ordered_bytes
    );
    print!("{out}");
    Ok(())
}

/// Arguments of `run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Graph file (JSON).
    pub graph: String,
    /// Print each kernel's best time over --reps runs, slowest first (with --json: a
    /// `profile` list).
    #[arg(long)]
    pub profile: bool,
    /// Worker threads of every parallel loop and GEMM of the run (default: one per core,
    /// or `RAYON_NUM_THREADS`).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Run one op at a time with every tensor materialized.
    #[arg(long)]
    pub unfused: bool,
    /// Directory with `<tensor>.npy` for inputs (and weights to replace); inputs not given
    /// there are random with --seed, and so are the weights of a JSON graph (an ONNX model
    /// runs with its own weights).
    #[arg(long, value_name = "DIR")]
    pub inputs: Option<String>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Run both, check agreement, and print the measured fused/unfused time ratio beside
    /// the predicted traffic ratio.
    #[arg(long)]
    pub bench: bool,
    /// Repetitions per path for --bench (the best time is kept).
    #[arg(long, default_value_t = 5)]
    pub reps: u32,
    /// Write every graph output as `<DIR>/<output>.npy` (float32), to compare with NumPy or
    /// another framework; with `--inputs`, those are the inputs used.
    #[arg(long, value_name = "DIR")]
    pub out: Option<String>,
    /// Executor: `auto` compiles elementwise and row kernels to native code with the system
    /// C compiler when one is present (the interpreter otherwise, said once on stderr);
    /// `jit` requires the compiler (exit 2 without one); `interpreter` never compiles.
    #[arg(long, value_enum, default_value_t = Executor::Auto)]
    pub executor: Executor,
    /// The value of a symbolic dim of an ONNX model (`--dim batch=2`; repeatable). Dims of
    /// an input given in --inputs are taken from its file.
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// `cpu` (default), or `cuda[:N]`: run each generated kernel alone on the GPU, on the
    /// inputs the CPU executor gives it, then the whole program on the GPU (generated
    /// kernels, cuBLAS GEMMs with generated epilogues, the other kernels on the host), and
    /// compare both with the CPU executor.
    #[arg(long, default_value = "cpu", value_name = "cpu|cuda[:N]")]
    pub device: String,
}

/// `--dim NAME=VALUE` values and the shapes of the `.npy` files in `inputs`, as import
/// options for an ONNX model.
fn import_options(dims: &[String], inputs: Option<&str>) -> Result<ImportOptions> {
    let mut o = ImportOptions::default();
    for d in dims {
        let (k, v) = d
            .split_once('=')
            .ok_or_else(|| anyhow!("--dim `{d}`: expected NAME=VALUE"))?;
        let v: usize = v
            .parse()
            .map_err(|_| anyhow!("--dim `{d}`: `{v}` is not a whole number"))?;
        o.dims.insert(k.to_string(), v);
    }
    if let Some(dir) = inputs {
        o.input_shapes = tensorforge_measure::graph_run::npy_shapes(dir)?;
    }
    Ok(o)
}

/// Which executor `run` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Executor {
    /// The JIT when a C compiler is present, else the interpreter. A plain run (no --bench,
    /// --profile) whose kernels are not in the JIT cache yet is interpreted while they
    /// compile in the background for the next run.
    Auto,
    /// The JIT; an error without a C compiler.
    Jit,
    /// The interpreter only.
    Interpreter,
}

/// Execute a graph on the CPU, on `--threads` worker threads (default: rayon's count, one
/// per core or `RAYON_NUM_THREADS`), always inside a pool of its own so that the run's other
/// workers can stay awake between its parallel sections.
pub fn run_graph(a: RunArgs) -> Result<()> {
    if let tensorforge_cuda::device::DeviceSpec::Cuda(ordinal) =
        tensorforge_cuda::device::DeviceSpec::parse(&a.device)?
    {
        return run_graph_gpu(a, ordinal);
    }
    let n = match a.threads {
        Some(0) => bail!("invalid `--threads` = `0`: at least 1"),
        Some(n) => n,
        None => tensorforge_graph::exec::worker_threads(),
    };
    tensorforge_graph::exec::with_threads(n, || run_graph_here(a)).map_err(|e| anyhow!("{e}"))?
}

/// `run --device cuda[:N]`: each generated kernel on the GPU against the CPU executor.
fn run_graph_gpu(a: RunArgs, ordinal: usize) -> Result<()> {
    for (given, flag) in [
        (a.bench, "--bench"),
        (a.profile, "--profile"),
        (a.unfused, "--unfused"),
        (a.out.is_some(), "--out"),
        (a.threads.is_some(), "--threads"),
        (a.executor != Executor::Auto, "--executor"),
    ] {
        if given {
            bail!(
                "invalid `{flag}` with `--device {}`: it applies to the CPU executor only",
                a.device
            );
        }
    }
    let options = import_options(&a.dims, a.inputs.as_deref())?;
    let (g, weights, _) = load_graph_dims(&a.graph, &options, true)?;
    let r = tensorforge_cuda::check::check_graph_on_gpu(
        ordinal,
        &g,
        weights,
        a.inputs.as_deref(),
        a.seed,
    )?;
    if a.json {
        print_json(&r)?;
    } else {
        println!(
            "graph `{}` on {} ({}): each generated kernel alone, on the CPU executor's inputs",
            a.graph, r.gpu.name, r.gpu.uuid
        );
        let mut t = crate::render::Table::new(&[
            "kernel",
            "rows x cols",
            "unit",
            "max |err| / scale",
            "agrees",
            "GPU time",
            "fp16 / bf16 storage: err, agrees, time",
        ]);
        for k in &r.kernels {
            let s16: Vec<String> = k
                .storage16
                .iter()
                .map(|s| {
                    format!(
                        "{:.1e} {} {}",
                        s.agreement.relative(),
                        if s.agrees { "yes" } else { "NO" },
                        crate::fmt::time(s.gpu_ns * 1e-9)
                    )
                })
                .collect();
            t.row(vec![
                k.kernel.clone(),
                format!("{} x {}", k.rows, k.cols),
                format!("{:?}", k.unit).to_lowercase(),
                format!("{:.1e}", k.agreement.relative()),
                if k.agrees { "yes".into() } else { "NO".into() },
                crate::fmt::time(k.gpu_ns * 1e-9),
                s16.join(" / "),
            ]);
        }
        print!("{}", t.render());
        for (k, why) in &r.left_to_cpu {
            println!("not generated [{k}]: {why}");
        }
        let w = &r.whole;
        println!(
            "whole program on the GPU: {} generated kernel(s), {} on cuBLAS, {} on the host (inputs copied back)",
            w.generated, w.cublas, w.host
        );
        for o in &w.outputs {
            println!(
                "  output `{}`: max |err| / scale {:.1e} against the CPU interpreter{}",
                o.name,
                o.agreement.relative(),
                if o.agrees { "" } else { ": DISAGREES" }
            );
        }
    }
    if !r.all_agree() {
        bail!(
            "{}: a generated kernel disagrees with the CPU executor on the GPU",
            a.graph
        );
    }
    Ok(())
}

/// [`run_graph`] on the current thread pool.
fn run_graph_here(a: RunArgs) -> Result<()> {
    use tensorforge_measure::graph_run::{run, Executor as Ex, RunOptions};
    let options = import_options(&a.dims, a.inputs.as_deref())?;
    let (g, weights, dims) = load_graph_dims(&a.graph, &options, true)?;
    let opts = RunOptions {
        unfused: a.unfused,
        inputs_dir: a.inputs.clone(),
        seed: a.seed,
        bench: a.bench,
        profile: a.profile,
        reps: a.reps,
        out_dir: a.out.clone(),
        executor: match a.executor {
            Executor::Auto => Ex::Auto,
            Executor::Jit => Ex::Jit,
            Executor::Interpreter => Ex::Interpreter,
        },
    };
    let rep = run(&a.graph, &g, weights, &dims, &opts)?;
    for n in &rep.notes {
        eprintln!("note: {n}");
    }
    if a.json {
        return print_json(&rep);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "graph `{}`, {} path: {} ({} kernels{})",
        rep.graph,
        rep.path,
        fmt::time(rep.elapsed_ns as f64 * 1e-9),
        rep.kernels,
        match &rep.jit {
            Some(j) => format!(
                "; {} compiled by the JIT in {:.0} ms{}",
                j.compiled_kernels,
                j.build_ms,
                if j.cached { ", from the cache" } else { "" }
            ),
            None => ", interpreter".into(),
        }
    );
    let _ = writeln!(
        out,
        "bytes moved (traffic model, not counted): {} (read {}, write {})",
        rep.model_bytes, rep.model_read_bytes, rep.model_write_bytes,
    );
    let mut t = Table::new(&["output", "shape", "min", "max", "mean", "non-finite"]);
    for o in &rep.outputs {
        let shape = if o.dims.len() == o.shape.len()
            && o.dims.iter().any(|d| d.parse::<usize>().is_err())
        {
            // `[batch=2, sequence=8, 64]`: the name, then the size it was bound to.
            let parts: Vec<String> = o
                .dims
                .iter()
                .zip(&o.shape)
                .map(|(d, n)| {
                    if d.parse::<usize>().is_ok() {
                        d.clone()
                    } else {
                        format!("{d}={n}")
                    }
                })
                .collect();
            format!("[{}]", parts.join(", "))
        } else {
            format!("{:?}", o.shape)
        };
        t.row(vec![
            o.name.clone(),
            shape,
            format!("{:.6}", o.min),
            format!("{:.6}", o.max),
            format!("{:.6}", o.mean),
            o.non_finite.to_string(),
        ]);
    }
    out.push_str(&t.render());
    if let Some(rows) = &rep.profile {
        let mut t = Table::new(&["kernel", "kind", "ops", "code", "best", "share"]);
        for r in rows.iter().take(20) {
            let mut ops = r.ops.clone();
            if ops.len() > 60 {
                ops.truncate(57);
                ops.push_str("...");
            }
            t.row(vec![
                r.kernel.clone(),
                format!("{:?}", r.kind).to_lowercase(),
                ops,
                if r.jit { "jit" } else { "interpreter" }.into(),
                fmt::time(r.best_ns as f64 * 1e-9),
                format!("{:.1} %", 100.0 * r.share),
            ]);
        }
        let _ = writeln!(
            out,
            "profile: best of {} runs per kernel, slowest first{}",
            a.reps.max(1),
            if rows.len() > 20 { " (top 20)" } else { "" }
        );
        out.push_str(&t.render());
    }
    if let Some(b) = &rep.bench {
        let _ = writeln!(
            out,
            "bench (best of {}): unfused {} (interpreter), fused {} (interpreter), fused {} ({}): measured speed-up {:.2}x vs predicted traffic ratio {:.2}x ({} -> {})",
            a.reps.max(1),
            fmt::time(b.unfused_ns as f64 * 1e-9),
            fmt::time(b.fused_interpreter_ns as f64 * 1e-9),
            fmt::time(b.fused_ns as f64 * 1e-9),
            rep.executor,
            b.measured_speedup,
            b.predicted_traffic_ratio,
            fmt::bytes(b.unfused_bytes as f64),
            fmt::bytes(b.fused_bytes as f64)
        );
        let _ = writeln!(
            out,
            "fused: {} of the modelled bytes per second = {:.0} % of copy bandwidth ({}) at {} thread(s); kernels alone {} ({:.0} %)",
            fmt::bandwidth(b.fused_bytes as f64 / (b.fused_ns.max(1) as f64 * 1e-9)),
            100.0 * b.fused_bandwidth_fraction,
            fmt::bandwidth(b.copy_bytes_per_s),
            b.threads,
            fmt::time(b.fused_kernels_ns as f64 * 1e-9),
            100.0 * b.kernels_bandwidth_fraction
        );
        let _ = writeln!(
            out,
            "fused vs unfused: {} (max |diff| {}; {})",
            if b.agree { "agree" } else { "DISAGREE" },
            b.max_abs_diff,
            b.tolerance
        );
    }
    print!("{out}");
    if rep.bench.as_ref().is_some_and(|b| !b.agree) {
        bail!("fused and unfused results disagree beyond the tolerance");
    }
    Ok(())
}

/// Arguments of `memory-traffic`.
#[derive(Args, Debug)]
pub struct MemoryTrafficArgs {
    /// Tokens (rows of x).
    #[arg(long, default_value_t = 4096)]
    pub seq: u64,
    /// Model width.
    #[arg(long, default_value_t = 8192)]
    pub dim: u64,
    /// FFN width (default: the model width, as in the seed accounting).
    #[arg(long)]
    pub ffn: Option<u64>,
    /// Element type.
    #[arg(long, default_value = "fp16")]
    pub dtype: String,
    #[command(flatten)]
    pub hw: HwArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// DRAM traffic of RMSNorm -> SwiGLU, seed and full accounting.
pub fn run_memory_traffic(a: MemoryTrafficArgs) -> Result<()> {
    let dtype = DType::parse(&a.dtype)?;
    let hw = a.hw.load()?;
    let r = mlp::memory_traffic(a.seq, a.dim, a.ffn, dtype, &hw)?;
    if a.json {
        return print_json(&r);
    }
    let s = &r.seed_accounting;
    let f = &r.full_accounting;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "RMSNorm -> SwiGLU, seq {} x dim {}, {} (evidence: model)",
        r.seq, r.dim, dtype
    );
    let _ = writeln!(
        out,
        "seed accounting (activations only, FFN = dim): {} per tensor; unfused {} transfers = {}, fused {} = {}: {:.2}x, {:.1} % saved",
        fmt::bytes(s.tensor_bytes as f64),
        s.unfused_transfers.len(),
        fmt::bytes(s.unfused_bytes as f64),
        s.fused_transfers.len(),
        fmt::bytes(s.fused_bytes as f64),
        s.reduction_ratio,
        s.saved_percent
    );
    let _ = writeln!(out, "  unfused: {}", s.unfused_transfers.join("; "));
    let _ = writeln!(out, "  fused:   {}", s.fused_transfers.join("; "));
    let _ = writeln!(
        out,
        "full accounting (weights included, FFN {}, on {}): unfused {} -> fused {} ({:.2}x; weights {}), {} ",
        f.ffn,
        r.hardware,
        fmt::bytes(f.unfused_bytes as f64),
        fmt::bytes(f.fused_bytes as f64),
        f.traffic.reduction_ratio,
        fmt::bytes(f.weight_bytes as f64),
        fmt::count(f.flops as f64, "FLOP")
    );
    let mut t = Table::new(&[
        "program", "kernel", "nodes", "bytes", "FLOPs", "time", "bound",
    ]);
    for (label, p) in [("unfused", &f.unfused), ("fused", &f.fused)] {
        for k in &p.kernels {
            t.row(vec![
                label.into(),
                k.name.clone(),
                k.nodes.join(","),
                fmt::bytes(k.total_bytes as f64),
                fmt::count(k.flops as f64, "FLOP"),
                fmt::time(k.time_ns * 1e-9),
                k.bound.clone(),
            ]);
        }
    }
    out.push_str(&t.render());
    let _ = writeln!(
        out,
        "roofline time: unfused {} ({}-bound) -> fused {} ({}-bound)",
        fmt::time(f.traffic.unfused_time_ns * 1e-9),
        f.unfused_bound,
        fmt::time(f.traffic.fused_time_ns * 1e-9),
        f.fused_bound
    );
    let _ = writeln!(out, "reading: {}", f.note);
    print!("{out}");
    Ok(())
}
