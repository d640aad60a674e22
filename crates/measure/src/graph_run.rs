//! `tensorforge run` as a library: a graph's inputs read from `.npy` files (or seeded), the
//! fused or unfused program executed (generated code where the JIT compiles it), outputs
//! written as `.npy`, and the benchmark protocol of `--bench` (best of N whole calls per path,
//! each run's outputs handed back to the executor's pool before the next:
//! unfused interpreter, fused interpreter, fused with the run's executor; agreement within
//! the executor's tolerance; STREAM copy bandwidth at the same thread count in the same
//! process as the denominator of the bandwidth fraction) and the per-kernel `--profile`.
//! Times are measurements of this machine; byte counts are the traffic model's and say so.
//! Left out: hardware counters (bytes are never counted), warm-up beyond the best-of-N.

use crate::error::{MeasureError, Result};
use crate::probes::CopyProbe;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use tensorforge_graph::exec::{
    compare, execute_with, fill_inputs, ExecResult, KernelProfile, Pool, ATOL, RTOL,
};
use tensorforge_graph::fusion::compile;
use tensorforge_graph::jit::Jit;
use tensorforge_graph::traffic::{program_bytes, program_counts};
use tensorforge_graph::{Graph, TypedGraph};
use tensorforge_kernels::npy::{parse_npy, to_npy, NpyArray, NpyData};

/// `run --json`'s schema: 2 dropped the `measured_*` byte fields and `counts_match_model`
/// (the executor never counted bytes; they were the model's figures) for `model_*_bytes`;
/// 3 added `bench.fused_kernels_ns` and `bench.kernels_bandwidth_fraction`.
pub const RUN_SCHEMA_VERSION: u32 = 3;

/// Which executor a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Executor {
    /// The JIT when a C compiler is present, else the interpreter (with a note). A run
    /// without `bench` or `profile` whose compiled kernels are not in the JIT cache yet runs
    /// the interpreter and leaves the compile to a background process, which fills the
    /// cache for the next run ([`tensorforge_graph::jit::compile_or_start`]).
    Auto,
    /// The JIT; an error without a C compiler.
    Jit,
    /// The interpreter only.
    Interpreter,
}

/// What to run and how.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Run the unfused program (one op per kernel) instead of the fused one.
    pub unfused: bool,
    /// Folder of `<tensor>.npy` inputs (and weights to replace).
    pub inputs_dir: Option<String>,
    /// Seed of the inputs not given.
    pub seed: u64,
    /// Run the benchmark protocol.
    pub bench: bool,
    /// Time every kernel.
    pub profile: bool,
    /// Repetitions of the benchmark and the profile (best kept).
    pub reps: u32,
    /// Folder to write every output into as `<name>.npy`.
    pub out_dir: Option<String>,
    /// The executor.
    pub executor: Executor,
}

/// What the JIT did for a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JitSummary {
    /// Kernels running generated code.
    pub compiled_kernels: usize,
    /// Kernels of the program.
    pub kernels: usize,
    /// Rendering, compiling (or loading) and loading, ms.
    pub build_ms: f64,
    /// Loaded from the cache.
    pub cached: bool,
    /// `(kernel, reason)` for each kernel the interpreter runs.
    pub skipped: Vec<(String, String)>,
}

/// One output's summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSummary {
    /// Output name.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// The shape with the model's symbolic dim names carried through (`batch`, `sequence`),
    /// when its inputs have any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dims: Vec<String>,
    /// Smallest finite value.
    pub min: f32,
    /// Largest finite value.
    pub max: f32,
    /// Mean of the finite values.
    pub mean: f64,
    /// NaN and infinite values.
    pub non_finite: usize,
}

/// The `--bench` protocol's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// Unfused program, interpreter, best whole call, ns.
    pub unfused_ns: u64,
    /// Fused program with the run's executor, best whole call, ns. Each run's outputs go
    /// back to the executor's pool before the next (`Pool::recycle`, as a serving loop
    /// would hand them back), so the calls after the first write memory already paged in.
    pub fused_ns: u64,
    /// Fused program, interpreter, ns.
    pub fused_interpreter_ns: u64,
    /// Worker threads the runs used.
    pub threads: usize,
    /// STREAM copy bandwidth at the same thread count in this process, over the fused
    /// program's modelled bytes: the best of one sample (`probes::CopyProbe::once`, two
    /// copies or more) after each block of the fused program's runs (up to 5 blocks, each
    /// opening with an untimed run; at least 5 samples).
    pub copy_bytes_per_s: f64,
    /// (fused modelled bytes / fused time) / copy bandwidth.
    pub fused_bandwidth_fraction: f64,
    /// Fused program with the run's executor: the best over the runs of its kernels' summed
    /// time, ns: `fused_ns` less binding the inputs and handing the outputs over.
    pub fused_kernels_ns: u64,
    /// (fused modelled bytes / `fused_kernels_ns`) / copy bandwidth: the kernels' own
    /// fraction of copy bandwidth. Both sides write into memory already touched (the
    /// kernels into the run's pooled buffers, the copy into its warmed destination).
    pub kernels_bandwidth_fraction: f64,
    /// unfused_ns / fused_ns.
    pub measured_speedup: f64,
    /// Unfused modelled bytes / fused modelled bytes.
    pub predicted_traffic_ratio: f64,
    /// The traffic model's bytes of the unfused program.
    pub unfused_bytes: u64,
    /// The traffic model's bytes of the fused program.
    pub fused_bytes: u64,
    /// Fused and unfused outputs agree within the tolerance.
    pub agree: bool,
    /// Largest |fused − unfused|.
    pub max_abs_diff: f32,
    /// The agreement rule.
    pub tolerance: String,
}

/// What `run` prints (`--json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// [`RUN_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// What `elapsed_ns`, `bench` and `profile` are: measured on this machine.
    pub evidence: String,
    /// Graph name.
    pub graph: String,
    /// `fused` or `unfused`.
    pub path: String,
    /// Kernels of the program run.
    pub kernels: usize,
    /// The traffic model's bytes for the program run (evidence: model, not counted).
    pub model_read_bytes: u64,
    /// The traffic model's written bytes.
    pub model_write_bytes: u64,
    /// Their sum.
    pub model_bytes: u64,
    /// Wall time of the whole run: binding inputs, every kernel, handing the outputs over.
    pub elapsed_ns: u64,
    /// `jit` or `interpreter`.
    pub executor: String,
    /// The JIT's part, when it was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jit: Option<JitSummary>,
    /// Every output.
    pub outputs: Vec<OutputSummary>,
    /// The benchmark, with `bench`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bench: Option<BenchReport>,
    /// Each kernel's best time, slowest first, with `profile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Vec<KernelProfile>>,
    /// Things the user should know (the interpreter ran instead of the JIT, a kernel was
    /// handed back to the interpreter), one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

fn graph_err(source: &str) -> impl Fn(tensorforge_graph::GraphError) -> MeasureError + '_ {
    move |e| MeasureError::Parse {
        source_name: source.to_string(),
        message: e.to_string(),
    }
}

fn io(path: &Path, what: &str) -> impl Fn(std::io::Error) -> MeasureError {
    let p = path.display().to_string();
    let what = what.to_string();
    move |e| MeasureError::Io {
        path: p.clone(),
        message: format!("{what}: {e}"),
    }
}

/// The shape of every `<name>.npy` in `dir`, by name (what binds an ONNX model's symbolic
/// dims from its input files).
pub fn npy_shapes(dir: &str) -> Result<HashMap<String, Vec<usize>>> {
    let mut m = HashMap::new();
    let rd = std::fs::read_dir(dir).map_err(io(Path::new(dir), "--inputs: cannot read"))?;
    for e in rd.flatten() {
        let p = e.path();
        let Some(stem) = p
            .extension()
            .filter(|x| *x == "npy")
            .and(p.file_stem())
            .and_then(|s| s.to_str())
        else {
            continue;
        };
        let bytes = std::fs::read(&p).map_err(io(&p, "cannot read file"))?;
        let a = parse_npy(&bytes).map_err(|e| MeasureError::Parse {
            source_name: p.display().to_string(),
            message: format!("malformed .npy input: {e}"),
        })?;
        m.insert(stem.to_string(), a.shape.clone());
    }
    Ok(m)
}

/// Every `<tensor>.npy` in `dir` that names a tensor of `g`, as f32 values. A file of the
/// wrong size, or an integer beyond 2^24 (which f32 cannot hold exactly), is an error naming
/// the file and the tensor.
pub fn read_inputs(dir: &str, g: &TypedGraph) -> Result<HashMap<String, Vec<f32>>> {
    let mut m = HashMap::new();
    for t in &g.tensors {
        let p = Path::new(dir).join(format!("{}.npy", t.name));
        if !p.exists() {
            continue;
        }
        let ps = p.display().to_string();
        let bytes = std::fs::read(&p).map_err(io(&p, "cannot read file"))?;
        let a = parse_npy(&bytes).map_err(|e| MeasureError::Parse {
            source_name: ps.clone(),
            message: format!("malformed .npy input: {e}"),
        })?;
        if a.data.len() as u64 != t.numel {
            return Err(MeasureError::invalid(
                &ps,
                "shape",
                format!("{:?}", a.shape),
                format!("tensor `{}` is declared {:?} in the graph", t.name, t.shape),
            ));
        }
        let mut v = Vec::new();
        tensorforge_graph::exec::to_executor_values(a.data.view(), &mut v).map_err(|x| {
            MeasureError::invalid(
                &ps,
                "value",
                x,
                format!(
                    "tensor `{}`: beyond 2^24, which the executor's f32 values cannot hold exactly",
                    t.name
                ),
            )
        })?;
        m.insert(t.name.clone(), v);
    }
    Ok(m)
}

/// Write each output as `<dir>/<name>.npy`; every file is encoded before any is written, and
/// all are written atomically together, so a failure leaves no half-written file. Integer and
/// boolean outputs are written as int64 (their f32 values are whole numbers).
pub fn write_outputs(dir: &str, r: &ExecResult, g: &TypedGraph) -> Result<()> {
    let d = Path::new(dir);
    if d.exists() && !d.is_dir() {
        return Err(MeasureError::invalid(
            "--out",
            "--out",
            dir,
            "not a directory",
        ));
    }
    let mut files = Vec::new();
    for (name, shape, values) in &r.outputs {
        if name.contains(['/', '\\']) || name.is_empty() || name.starts_with('.') {
            return Err(MeasureError::invalid(
                "--out",
                "output tensor",
                name,
                "the name cannot be used as a file name",
            ));
        }
        let integer = g
            .tensors
            .iter()
            .any(|t| &t.name == name && t.dtype.is_integer());
        let data = if integer {
            NpyData::I64(values.iter().map(|&v| v as i64).collect())
        } else {
            NpyData::F32(values.clone())
        };
        let arr = NpyArray::new(shape.clone(), data)?;
        files.push((d.join(format!("{name}.npy")), to_npy(&arr)?));
    }
    std::fs::create_dir_all(d).map_err(io(d, "cannot create directory"))?;
    tensorforge_store::write_all_atomic(&files)?;
    Ok(())
}

/// (bytes / (ns · 1e-9)) / copy_bytes_per_s; 0 where either time or copy bandwidth is 0.
fn bandwidth_fraction(bytes: u64, ns: u64, copy_bytes_per_s: f64) -> f64 {
    if copy_bytes_per_s > 0.0 && ns > 0 {
        bytes as f64 / (ns as f64 * 1e-9) / copy_bytes_per_s
    } else {
        0.0
    }
}

fn summarize(r: &ExecResult, dims: &HashMap<String, Vec<String>>) -> Vec<OutputSummary> {
    r.outputs
        .iter()
        .map(|(n, s, v)| {
            let fin: Vec<f32> = v.iter().copied().filter(|x| x.is_finite()).collect();
            OutputSummary {
                name: n.clone(),
                shape: s.clone(),
                dims: dims.get(n).cloned().unwrap_or_default(),
                min: fin.iter().copied().fold(f32::INFINITY, f32::min),
                max: fin.iter().copied().fold(f32::NEG_INFINITY, f32::max),
                mean: fin.iter().map(|&x| x as f64).sum::<f64>() / fin.len().max(1) as f64,
                non_finite: v.len() - fin.len(),
            }
        })
        .collect()
}

/// Run `g` (with `weights` by tensor name, and each output's symbolic dims `output_dims`)
/// as `opts` says; `source` names the graph in errors.
///
/// ```
/// use tensorforge_measure::graph_run::{run, Executor, RunOptions};
/// let g = tensorforge_graph::Graph::from_json_str(r#"{"nodes":[
///   {"name":"x","op":"Input","attrs":{"shape":[4],"dtype":"fp32"}},
///   {"name":"y","op":"Exp","inputs":["x"]}]}"#).unwrap();
/// let opts = RunOptions { unfused: false, inputs_dir: None, seed: 1, bench: false,
///     profile: false, reps: 1, out_dir: None, executor: Executor::Interpreter };
/// let r = run("g.json", &g, Default::default(), &Default::default(), &opts).unwrap();
/// assert_eq!(r.outputs[0].shape, vec![4]);
/// assert_eq!(r.executor, "interpreter");
/// ```
pub fn run(
    source: &str,
    g: &Graph,
    weights: HashMap<String, Vec<f32>>,
    output_dims: &HashMap<String, Vec<String>>,
    opts: &RunOptions,
) -> Result<RunReport> {
    let ge = graph_err(source);
    let c = compile(g).map_err(&ge)?;
    let mut ins = match &opts.inputs_dir {
        Some(d) => read_inputs(d, &c.unfused.graph)?,
        None => HashMap::new(),
    };
    // The model's own weights, unless a file in the inputs folder replaces one.
    for (name, data) in weights {
        ins.entry(name).or_insert(data);
    }
    fill_inputs(&c.unfused.graph, &mut ins, opts.seed).map_err(&ge)?;
    let model_u = program_bytes(&c.unfused);
    let model_f = program_bytes(&c.fused);
    let (prog, model) = if opts.unfused {
        (&c.unfused, model_u)
    } else {
        (&c.fused, model_f)
    };
    let model_read: u64 = program_counts(prog).iter().map(|k| k.read_bytes).sum();
    let mut notes = vec![];
    let mut jit: Option<Jit> = match opts.executor {
        Executor::Interpreter => None,
        Executor::Jit => Some(
            tensorforge_graph::jit::compile(prog)
                .map_err(|e| MeasureError::invalid(source, "--executor", "jit", e.to_string()))?,
        ),
        // A benchmark or a profile is about the compiled code: it waits for the compiler.
        Executor::Auto if opts.bench || opts.profile => match tensorforge_graph::jit::compile(prog)
        {
            Ok(j) => Some(j),
            Err(e) => {
                notes.push(format!("running the interpreter ({e})"));
                None
            }
        },
        // One run: the compiled kernels if the cache has them, else the interpreter now
        // and the compiler in the background for the next run.
        Executor::Auto => match tensorforge_graph::jit::compile_or_start(prog) {
            Ok(Some(j)) => Some(j),
            Ok(None) => {
                notes.push(
                    "the JIT cache has no object for this program yet: this run is interpreted while the C compiles in the background for the next one (`--executor jit` waits for it)"
                        .into(),
                );
                None
            }
            Err(e) => {
                notes.push(format!("running the interpreter ({e})"));
                None
            }
        },
    };
    if let Some(j) = &jit {
        notes.extend(j.notes.iter().cloned());
    }
    // A benchmark or a profile keeps, per kernel, the faster of compiled and interpreted.
    if let (Some(j), true) = (jit.as_mut(), opts.bench || opts.profile) {
        notes.extend(tensorforge_graph::exec::keep_faster(prog, &ins, j, 3).map_err(&ge)?);
    }
    let r = execute_with(prog, &ins, &mut Pool::default(), jit.as_ref()).map_err(&ge)?;
    if let Some(dir) = &opts.out_dir {
        write_outputs(dir, &r, &prog.graph)?;
    }
    let bench = if opts.bench {
        let reps = opts.reps.max(1);
        // Best whole call and best kernels-only time (each the minimum over the runs), the
        // runs split into `blocks` blocks with `between` called after each block.
        let best = |p,
                    j: Option<&Jit>,
                    blocks: u32,
                    between: &mut dyn FnMut()|
         -> Result<(u64, u64, ExecResult)> {
            let mut b = u64::MAX;
            let mut bk = u64::MAX;
            let mut last: Option<ExecResult> = None;
            let mut pool = Pool::default();
            let blocks = blocks.clamp(1, reps);
            for bi in 0..blocks {
                let timed = reps / blocks + u32::from(bi < reps % blocks);
                // A block after `between` (which may have evicted the caches) starts with one
                // untimed run, so that the timed runs see the steady state back-to-back calls
                // see, as onnxruntime's calls do.
                let warm = u32::from(blocks > 1);
                for r in 0..warm + timed {
                    // The last run's outputs back to the pool first: a serving loop that hands
                    // them back (`Pool::recycle`) writes each run's outputs into memory
                    // already paged in, as onnxruntime's `run` does with its outputs.
                    if let Some(ExecResult { outputs, .. }) = last.take() {
                        for (_, _, v) in outputs {
                            pool.recycle(v);
                        }
                    }
                    let x = execute_with(p, &ins, &mut pool, j).map_err(&ge)?;
                    if r >= warm {
                        b = b.min(x.elapsed_ns);
                        bk = bk.min(x.kernel_ns.iter().sum());
                    }
                    last = Some(x);
                }
                between();
            }
            last.map(|x| (b, bk, x))
                .ok_or_else(|| MeasureError::Other("no run".into()))
        };
        let fused_jit = if opts.unfused { None } else { jit.as_ref() };
        let (tu, _, ru) = best(&c.unfused, None, 1, &mut || {})?;
        let (ti, _, _) = best(&c.fused, None, 1, &mut || {})?;
        // The denominator: copy bandwidth at the same thread count, same process, over as
        // many bytes as the fused program moves (a copy of n f64 moves 16·n bytes), sampled
        // between blocks of the fused program's runs (up to 5 blocks, at least 5 samples),
        // best kept: both sides measured in the same stretch of time. Not after every run:
        // a copy evicts the caches, and a small model's runs then read their weights from
        // memory where back-to-back calls find them in cache (bert_block 38 → 43 µs).
        let threads = tensorforge_graph::exec::worker_threads();
        let mut probe = CopyProbe::new((model_f as usize / 16).max(1 << 16), threads)?;
        let mut copy = 0.0f64;
        let (tf, tk, rf) = best(&c.fused, fused_jit, 5, &mut || {
            copy = copy.max(probe.once())
        })?;
        for _ in reps.min(5)..5 {
            copy = copy.max(probe.once());
        }
        drop(probe);
        let (ok, worst, _) = compare(&rf, &ru);
        Some(BenchReport {
            unfused_ns: tu,
            fused_ns: tf,
            fused_interpreter_ns: ti,
            threads,
            copy_bytes_per_s: copy,
            fused_bandwidth_fraction: bandwidth_fraction(model_f, tf, copy),
            fused_kernels_ns: tk,
            kernels_bandwidth_fraction: bandwidth_fraction(model_f, tk, copy),
            measured_speedup: tu as f64 / tf.max(1) as f64,
            predicted_traffic_ratio: model_u as f64 / model_f.max(1) as f64,
            unfused_bytes: model_u,
            fused_bytes: model_f,
            agree: ok,
            max_abs_diff: worst,
            tolerance: format!("|fused - unfused| <= {ATOL} + {RTOL} * max|unfused| per output"),
        })
    } else {
        None
    };
    let profile = if opts.profile {
        Some(
            tensorforge_graph::exec::profile(prog, &ins, jit.as_ref(), opts.reps as usize)
                .map_err(&ge)?,
        )
    } else {
        None
    };
    Ok(RunReport {
        schema_version: RUN_SCHEMA_VERSION,
        evidence: "measurement".into(),
        graph: c.fused.graph.name.clone(),
        path: if opts.unfused { "unfused" } else { "fused" }.into(),
        kernels: prog.kernels.len(),
        model_read_bytes: model_read,
        model_write_bytes: model - model_read,
        model_bytes: model,
        elapsed_ns: r.elapsed_ns,
        executor: if jit.as_ref().is_some_and(|j| j.compiled_count() > 0) {
            "jit"
        } else {
            "interpreter"
        }
        .into(),
        jit: jit.as_ref().map(|j| JitSummary {
            compiled_kernels: j.compiled_count(),
            kernels: prog.kernels.len(),
            build_ms: j.build_ms,
            cached: j.cached,
            skipped: j.skipped.clone(),
        }),
        outputs: summarize(&r, output_dims),
        bench,
        profile,
        notes,
    })
}
