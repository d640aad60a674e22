//! The generated CUDA without a GPU, two ways.
//!
//! 1. NVRTC compiles the kernels of every example graph and every ONNX fixture for sm_80
//!    and sm_90, and each entry point's parameters match the launch contract. CI installs
//!    NVRTC and sets `TENSORFORGE_TEST_NVRTC_REQUIRED=1`, so there this fails rather than
//!    printing SKIPPED.
//! 2. The same source runs on the CPU under `support/cuda_emu.hpp` (one OS thread per CUDA
//!    thread, real barriers and warp shuffles through shared slots), with the interpreter as
//!    the oracle: outputs agree to 2e-6 of the output's largest magnitude and have the same
//!    non-finite values. This checks the kernels' logic (row units, strided columns,
//!    reductions), not GPU speed or the GPU's arithmetic. It needs a C++20 compiler (`c++`),
//!    which the build image has; it is required, not skipped.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::{example_programs, root};
use tensorforge_cuda::bench::{widen, GpuKernel};
use tensorforge_cuda::check::{
    agreement, kernel_cases, rounded_expectation, storage_tolerance, Cases,
};
use tensorforge_cuda::kernels::{compile_program, compile_program_with};
use tensorforge_cuda::nvrtc::{nvrtc_available, nvrtc_required, TEST_ARCHS};
use tensorforge_graph::codegen::cuda::{
    device_prelude, render_program, render_program_with, CudaKernel, CudaOptions, CudaProgram,
    RowUnit, Storage,
};
use tensorforge_graph::exec::{execute_with, fill_inputs, Pool};
use tensorforge_graph::fusion::{compile, Program};
use tensorforge_graph::ir::{Op, OpClass};
use tensorforge_graph::synth::synthetic_graph;
use tensorforge_graph::Graph;

/// Whether NVRTC loads; where it does not, says SKIPPED (and fails where CI requires it).
fn nvrtc_here() -> bool {
    if !nvrtc_available() {
        assert!(
            !nvrtc_required(),
            "TENSORFORGE_TEST_NVRTC_REQUIRED=1 but NVRTC cannot be loaded (LD_LIBRARY_PATH?)"
        );
        println!("SKIPPED: NVRTC cannot be loaded here (libnvrtc.so.12 on LD_LIBRARY_PATH)");
        return false;
    }
    true
}

#[test]
fn every_example_kernel_compiles_with_nvrtc_and_matches_its_launcher() {
    if !nvrtc_here() {
        return;
    }
    let mut kernels = 0;
    let programs = example_programs();
    assert!(programs.len() >= 25, "{}", programs.len());
    for (name, p, _) in &programs {
        for arch in TEST_ARCHS {
            let c = compile_program(p, name, arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
            assert!(c.ptx.contains(&format!(".target {arch}")), "{name}");
            kernels += c.entries.len();
        }
    }
    // Far more than one kernel per program: a broken renderer that emitted none would pass
    // the per-program check.
    assert!(kernels > 300, "{kernels}");
}

/// Compile `source` (the program's translation unit) with a `main` that loads the inputs,
/// launches every kernel in order on the emulator and writes every tensor the kernels
/// write; returns them by tensor id.
fn emulate(
    label: &str,
    p: &Program,
    kernels: &[CudaKernel],
    source: &str,
    inputs: &HashMap<usize, Vec<f32>>,
    block: u32,
) -> HashMap<usize, Vec<f32>> {
    let dir = emu_dir(label);
    std::fs::create_dir_all(&dir).unwrap();
    let numel = |t: usize| p.graph.tensors[t].numel as usize;
    let mut tensors: BTreeSet<usize> = BTreeSet::new();
    for k in kernels {
        tensors.extend(k.inputs.iter().chain(&k.outputs));
    }
    let written: BTreeSet<usize> = kernels.iter().flat_map(|k| k.outputs.clone()).collect();
    let mut main = String::from(
        "#include \"cuda_emu.hpp\"\n#include \"kernels.cu\"\n#include <cstdio>\n#include <vector>\nint main(int, char **argv) {\n",
    );
    for &t in &tensors {
        main.push_str(&format!(
            "  std::vector<float> T{t}({});\n",
            numel(t).max(1)
        ));
    }
    main.push_str("  FILE *f = std::fopen(argv[1], \"rb\");\n");
    let mut blob: Vec<u8> = vec![];
    for &t in &tensors {
        if let Some(v) = inputs.get(&t) {
            assert_eq!(v.len(), numel(t), "{label}: tensor {t}");
            main.push_str(&format!(
                "  if (std::fread(T{t}.data(), 4, {n}, f) != {n}) return 3;\n",
                n = v.len()
            ));
            blob.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        }
    }
    main.push_str("  std::fclose(f);\n");
    for k in kernels {
        // Two blocks for warp units (so rows are grid-strided over warps of both), three
        // for block units.
        let grid = match k.unit {
            RowUnit::Warp => 2,
            RowUnit::Block => 3,
        };
        let scratch = k.scratch_floats_for(grid, block).max(1);
        let args: Vec<String> = k
            .inputs
            .iter()
            .chain(&k.outputs)
            .map(|t| format!("T{t}.data()"))
            .chain(["S.data()".to_string(), format!("(long long){}", k.rows)])
            .collect();
        main.push_str(&format!(
            "  {{ std::vector<float> S({scratch}); tf_emu_launch({grid}, {block}, {}, {}); }}\n",
            k.symbol,
            args.join(", ")
        ));
    }
    main.push_str("  FILE *o = std::fopen(argv[2], \"wb\");\n");
    for &t in &written {
        main.push_str(&format!(
            "  std::fwrite(T{t}.data(), 4, {}, o);\n",
            numel(t)
        ));
    }
    main.push_str("  std::fclose(o);\n  return 0;\n}\n");
    std::fs::write(dir.join("kernels.cu"), source).unwrap();
    std::fs::write(dir.join("main.cpp"), main).unwrap();
    std::fs::write(dir.join("in.bin"), &blob).unwrap();
    let mut vals = compile_and_run(label, &dir).into_iter();
    let mut res = HashMap::new();
    for &t in &written {
        res.insert(t, vals.by_ref().take(numel(t)).collect());
    }
    res
}

fn emu_dir(label: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "tf-cuda-emu-{}-{}",
        std::process::id(),
        label.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    ))
}

/// Run `g` fused under the emulator and in the interpreter; returns the number of kernels
/// emulated, or None when the program has a kernel the CUDA target does not render.
fn check(label: &str, g: &Graph, block: u32) -> Option<usize> {
    let c = compile(g).unwrap();
    let p = &c.fused;
    let cuda = render_program(p);
    if !cuda.skipped.is_empty() {
        return None;
    }
    // Every kernel input must be a source (input, weight, constant) or an earlier kernel's
    // output: a view the CPU executor makes between kernels (a transpose) has no kernel.
    let mut ready: BTreeSet<usize> = p
        .graph
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.op.base_class() == OpClass::Source)
        .map(|(i, _)| p.graph.node_outputs[i][0])
        .collect();
    for k in &cuda.kernels {
        if !k.inputs.iter().all(|t| ready.contains(t)) {
            return None;
        }
        ready.extend(k.outputs.iter().copied());
    }
    let mut ins = HashMap::new();
    fill_inputs(&p.graph, &mut ins, 11).unwrap();
    let interp = execute_with(p, &ins, &mut Pool::default(), None).unwrap();
    let by_name: HashMap<&str, usize> = p
        .graph
        .tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let mut inputs: HashMap<usize, Vec<f32>> = ins
        .iter()
        .filter_map(|(n, v)| by_name.get(n.as_str()).map(|&t| (t, v.clone())))
        .collect();
    // Constants are filled with their value, as the executor does.
    for (i, n) in p.graph.nodes.iter().enumerate() {
        if let Op::Constant { value, .. } = n.op {
            let t = p.graph.node_outputs[i][0];
            inputs.insert(t, vec![value as f32; p.graph.tensors[t].numel as usize]);
        }
    }
    let got = emulate(label, p, &cuda.kernels, &cuda.source(), &inputs, block);
    std::fs::write(
        emu_dir(label).join("graph.json"),
        serde_json::to_string_pretty(g).unwrap(),
    )
    .unwrap();
    for (name, _, want) in &interp.outputs {
        let t = by_name[name.as_str()];
        let v = got
            .get(&t)
            .unwrap_or_else(|| panic!("{label}: output `{name}` not written by any kernel"));
        let scale = want
            .iter()
            .filter(|v| v.is_finite())
            .fold(1e-30f32, |m, v| m.max(v.abs()));
        for (i, (x, y)) in v.iter().zip(want).enumerate() {
            if x.is_finite() || y.is_finite() {
                assert!(
                    (x - y).abs() <= 2e-6 * scale,
                    "{label} `{name}`[{i}]: emulated CUDA {x} vs interpreter {y} (scale {scale})"
                );
            } else {
                assert!(
                    (x.is_nan() && y.is_nan()) || x == y,
                    "{label} `{name}`[{i}]: emulated CUDA {x} vs interpreter {y}"
                );
            }
        }
    }
    // Kept where a check failed, to read the source and the launches.
    let _ = std::fs::remove_dir_all(emu_dir(label));
    Some(cuda.kernels.len())
}

/// One variant's outputs: `[case][output]` values.
type CaseOutputs = Vec<Vec<Vec<f32>>>;

/// One rendering of a program's kernels, run on its cases' inputs rounded as `inputs` says.
struct Variant {
    opts: CudaOptions,
    inputs: Rounding,
}

/// How a variant's inputs are rounded.
#[derive(Clone, Copy)]
enum Rounding {
    /// As recorded.
    None,
    /// To a value both f16 and bf16 hold exactly (8 significant bits within f16's range and
    /// grid), so one f32 run is the reference of both 16-bit kernels.
    Both16,
}

impl Rounding {
    fn apply(self, x: f32) -> f32 {
        match self {
            Rounding::None => x,
            Rounding::Both16 => {
                // bf16 then f16 leaves at most 8 significant bits on f16's grid; bf16 again
                // keeps them (f16 may add none), except where that rounds past 65504.
                let y = Storage::F16.round(Storage::Bf16.round(x));
                let z = Storage::Bf16.round(y);
                let w = Storage::F16.round(z);
                assert!(
                    w.to_bits() == z.to_bits() || (w.is_nan() && z.is_nan()),
                    "{x} has no value held by both f16 and bf16 here"
                );
                z
            }
        }
    }
}

/// Every rendered kernel of `cases` (rendered from `p`), each alone on the emulator on its
/// recorded inputs, once per variant (all variants in one translation unit, each kernel's
/// symbol suffixed with its variant); returns `[variant][case][output]` values, 16-bit
/// outputs widened exactly, and the variants' renderings.
fn emulate_variants(
    label: &str,
    p: &Program,
    cases: &Cases,
    block: u32,
    variants: &[Variant],
) -> (Vec<CaseOutputs>, Vec<CudaProgram>) {
    let dir = emu_dir(label);
    std::fs::create_dir_all(&dir).unwrap();
    let mut source = device_prelude();
    let mut main = String::from(
        "#include \"cuda_emu.hpp\"\n#include \"kernels.cu\"\n#include <cstdio>\n#include <vector>\nint main(int, char **argv) {\n  FILE *f = std::fopen(argv[1], \"rb\");\n  FILE *o = std::fopen(argv[2], \"wb\");\n",
    );
    let mut blob: Vec<u8> = vec![];
    let mut rendered = vec![];
    for (vi, var) in variants.iter().enumerate() {
        let cuda = render_program_with(p, &var.opts);
        assert_eq!(
            cuda.kernels.iter().map(|k| k.kernel).collect::<Vec<_>>(),
            cases
                .cases
                .iter()
                .map(|c| c.kernel.kernel)
                .collect::<Vec<_>>(),
            "{label}: every storage renders the same kernels"
        );
        let st = var.opts.storage;
        let (ty, size) = (st.c_type(), st.bytes());
        for (k, c) in cuda.kernels.iter().zip(&cases.cases) {
            let sym = format!("{}_v{vi}", k.symbol);
            source.push('\n');
            source.push_str(
                &k.source
                    .replace(&format!("void {}(", k.symbol), &format!("void {sym}(")),
            );
            let grid = match k.unit {
                RowUnit::Warp => 2,
                RowUnit::Block => 3,
            };
            main.push_str("  {\n");
            let mut args = vec![];
            for (j, v) in c.inputs.iter().enumerate() {
                let n = v.len().max(1);
                main.push_str(&format!(
                    "    std::vector<{ty}> I{j}({n}); if (std::fread(I{j}.data(), {size}, {n}, f) != {n}) return 3;\n"
                ));
                let padded: Vec<f32> = if v.is_empty() { vec![0.0] } else { v.clone() };
                for x in padded {
                    let x = var.inputs.apply(x);
                    match st.bits16(x) {
                        Some(b) => blob.extend(b.to_le_bytes()),
                        None => blob.extend(x.to_le_bytes()),
                    }
                }
                args.push(format!("I{j}.data()"));
            }
            for (j, v) in c.expected.iter().enumerate() {
                main.push_str(&format!(
                    "    std::vector<{ty}> O{j}({});\n",
                    v.len().max(1)
                ));
                args.push(format!("O{j}.data()"));
            }
            main.push_str(&format!(
                "    std::vector<float> S({});\n",
                k.scratch_floats_for(grid, block).max(1)
            ));
            args.push("S.data()".into());
            args.push(format!("(long long){}", k.rows));
            main.push_str(&format!(
                "    tf_emu_launch({grid}, {block}, {sym}, {});\n",
                args.join(", ")
            ));
            for (j, v) in c.expected.iter().enumerate() {
                main.push_str(&format!(
                    "    std::fwrite(O{j}.data(), {size}, {}, o);\n",
                    v.len()
                ));
            }
            main.push_str("  }\n");
        }
        rendered.push(cuda);
    }
    main.push_str("  std::fclose(f);\n  std::fclose(o);\n  return 0;\n}\n");
    std::fs::write(dir.join("kernels.cu"), source).unwrap();
    std::fs::write(dir.join("main.cpp"), main).unwrap();
    std::fs::write(dir.join("in.bin"), &blob).unwrap();
    let bytes = compile_and_run_bytes(label, &dir);
    let mut at = 0;
    let out = variants
        .iter()
        .map(|var| {
            let st = var.opts.storage;
            cases
                .cases
                .iter()
                .map(|c| {
                    c.expected
                        .iter()
                        .map(|v| {
                            let n = v.len() * st.bytes();
                            let vals = widen(st, &bytes[at..at + n]);
                            at += n;
                            vals
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    assert_eq!(at, bytes.len(), "{label}: emulator output length");
    (out, rendered)
}

/// The emulated kernels' compiler flags; the precompiled header is built with the same.
/// (`-fno-strict-aliasing`: the kernels' vector accesses read 16-bit and float arrays
/// through `uint4` / `float4` pointers, as CUDA code does.)
const EMU_FLAGS: [&str; 5] = [
    "-std=c++20",
    "-O1",
    "-pthread",
    "-w",
    "-fno-strict-aliasing",
];

/// A folder holding `cuda_emu.hpp` and its precompiled form (`cuda_emu.hpp.gch`), built once
/// per test process, or reused from an earlier one while the header is unchanged. Parsing
/// the header (`<thread>`, `<barrier>` in C++20) took 0.9 s of each 1.4 s compile; with the
/// precompiled header it takes 0.4 s. Where GCC cannot use the .gch it reads the header
/// beside it, so this changes speed, not what is compiled.
fn emu_header_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let header = std::fs::read(root().join("crates/cuda/tests/support/cuda_emu.hpp")).unwrap();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cuda-emu-pch");
        let gch = dir.join("cuda_emu.hpp.gch");
        if std::fs::read(dir.join("cuda_emu.hpp")).ok().as_ref() == Some(&header) && gch.exists() {
            return dir;
        }
        // Built under this process's own names and renamed into place, so that another test
        // process never reads a half-written header.
        std::fs::create_dir_all(&dir).unwrap();
        let tmp_gch = dir.join(format!("pch-{}.gch", std::process::id()));
        let tmp_hpp = dir.join(format!("pch-{}.hpp", std::process::id()));
        std::fs::write(&tmp_hpp, &header).unwrap();
        let out = Command::new("c++")
            .args(EMU_FLAGS)
            .args(["-x", "c++-header"])
            .arg(&tmp_hpp)
            .arg("-o")
            .arg(&tmp_gch)
            .output()
            .expect("a C++20 compiler (`c++`) is needed for the emulated kernels");
        assert!(
            out.status.success(),
            "precompiling cuda_emu.hpp: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp_gch, &gch).unwrap();
        std::fs::rename(&tmp_hpp, dir.join("cuda_emu.hpp")).unwrap();
        dir
    })
}

/// Compile `dir/main.cpp` against the emulator, run it on `dir/in.bin`, return the floats
/// it wrote.
fn compile_and_run(label: &str, dir: &Path) -> Vec<f32> {
    widen(Storage::F32, &compile_and_run_bytes(label, dir))
}

/// Compile `dir/main.cpp` against the emulator, run it on `dir/in.bin`, return the bytes it
/// wrote.
fn compile_and_run_bytes(label: &str, dir: &Path) -> Vec<u8> {
    let exe = dir.join("emu");
    let out = Command::new("c++")
        .args(EMU_FLAGS)
        .args(["-x", "c++"])
        .arg("-I")
        .arg(emu_header_dir())
        .arg("-I")
        .arg(dir)
        .arg(dir.join("main.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("a C++20 compiler (`c++`) is needed for the emulated kernels");
    assert!(
        out.status.success(),
        "{label}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe)
        .arg(dir.join("in.bin"))
        .arg(dir.join("out.bin"))
        .output()
        .unwrap();
    assert!(run.status.success(), "{label}: emulated run failed");
    std::fs::read(dir.join("out.bin")).unwrap()
}

/// Every rendered kernel of every example graph and ONNX fixture, alone under the emulator
/// on the interpreter's inputs for it, against the interpreter's outputs (f32 storage); and
/// with f16 and bf16 storage (8 columns per thread step), each kernel's outputs equal, bit
/// for bit, the f32 kernel's outputs (same width) on the same rounded inputs, rounded once
/// to nearest even, since 16-bit storage changes only the loads and stores; and they are
/// within `storage_tolerance` of the interpreter on the rounded inputs (the GPU check's
/// oracle).
#[test]
fn every_example_kernel_under_the_emulator_agrees_with_the_interpreter() {
    // The fixtures on as many threads as the machine has (each compiles its own program).
    let programs = std::sync::Mutex::new(example_programs());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (checked, vectorized): (usize, usize) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let (mut checked, mut vectorized) = (0, 0);
                    loop {
                        let next = programs.lock().unwrap().pop();
                        let Some((name, p, ins)) = next else {
                            return (checked, vectorized);
                        };
                        let (c, v) = check_example_kernels(&name, &p, &ins);
                        checked += c;
                        vectorized += v;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    // Each fixture contributes several kernels; far fewer means kernels went unchecked.
    assert!(checked >= 150, "{checked} kernels checked");
    // Most fixtures' rows are multiples of 8 columns: the 16-bit comparisons must cover
    // vector loads, not only the one-column fallback.
    assert!(
        vectorized >= 100,
        "{vectorized} kernels took 8 columns per step"
    );
}

/// Every rendered kernel of one example program under the emulator (see the test above);
/// returns how many kernels were checked and how many of them took 8 columns per step.
fn check_example_kernels(name: &str, p: &Program, ins: &support::Inputs) -> (usize, usize) {
    let cases = kernel_cases(p, ins).unwrap_or_else(|e| panic!("{name}: {e}"));
    if cases.cases.is_empty() {
        return (0, 0);
    }
    let label = Path::new(name)
        .components()
        .rev()
        .take(2)
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect::<Vec<_>>()
        .join("_");
    let wide = |st: Storage| CudaOptions::new(st).with_cols_per_thread(8).unwrap();
    let variants = [
        // 0: f32 against the interpreter.
        Variant {
            opts: CudaOptions::default(),
            inputs: Rounding::None,
        },
        // 1 against 2 and 3: the f32 kernel and the 16-bit ones on the same values, each
        // held exactly by f16 and by bf16.
        Variant {
            opts: wide(Storage::F32),
            inputs: Rounding::Both16,
        },
        Variant {
            opts: wide(Storage::Bf16),
            inputs: Rounding::Both16,
        },
        Variant {
            opts: wide(Storage::F16),
            inputs: Rounding::Both16,
        },
    ];
    let (got, rendered) = emulate_variants(&label, p, &cases, 64, &variants);
    for (c, outs) in cases.cases.iter().zip(&got[0]) {
        for (j, (g, want)) in outs.iter().zip(&c.expected).enumerate() {
            let a = agreement(g, want);
            assert!(a.within(2e-6), "{name} kernel {} output {j}: {a:?}", c.name);
        }
    }
    for (reference, sixteen, st) in [(1, 2, Storage::Bf16), (1, 3, Storage::F16)] {
        for (ci, c) in cases.cases.iter().enumerate() {
            for (j, (f, h)) in got[reference][ci].iter().zip(&got[sixteen][ci]).enumerate() {
                for (i, (x, y)) in f.iter().zip(h).enumerate() {
                    let want = st.round(*x);
                    assert!(
                        want.to_bits() == y.to_bits() || (want.is_nan() && y.is_nan()),
                        "{name} kernel {} output {j}[{i}], {} storage: {y} stored, the f32 kernel's {x} rounds to {want}",
                        c.name,
                        st.label()
                    );
                }
            }
        }
    }
    // The GPU check's oracle (`rounded_expectation`, the interpreter on rounded inputs) holds
    // the emulated 16-bit kernels to `storage_tolerance`.
    for (sixteen, st) in [(2, Storage::Bf16), (3, Storage::F16)] {
        for (ci, c) in cases.cases.iter().enumerate() {
            // On the inputs the kernel had (which rounding to `st` leaves as they are).
            let mut had = c.clone();
            for v in &mut had.inputs {
                v.iter_mut().for_each(|x| *x = Rounding::Both16.apply(*x));
            }
            let want = rounded_expectation(p, &had, st).unwrap_or_else(|e| panic!("{name}: {e}"));
            for (j, (g, w)) in got[sixteen][ci].iter().zip(&want).enumerate() {
                let a = agreement(g, w);
                assert!(
                    a.within(storage_tolerance(st)),
                    "{name} kernel {} output {j}, {} storage, against the interpreter on rounded inputs: {a:?}",
                    c.name,
                    st.label()
                );
            }
        }
    }
    let vectorized = rendered[2]
        .kernels
        .iter()
        .filter(|k| k.cols_per_thread == 8)
        .count();
    let _ = std::fs::remove_dir_all(emu_dir(&label));
    (cases.cases.len(), vectorized)
}

/// The benchmark kernels with rows that a warp reduces (1000 columns) and rows that need
/// the whole block (3000), on blocks of 2 and 8 warps.
#[test]
fn benchmark_kernels_under_the_emulator_agree_with_the_interpreter() {
    for k in GpuKernel::ALL {
        for (rows, cols, block) in [(7, 1000, 64), (3, 3000, 256), (5, 37, 64)] {
            let g = Graph::from_json_str(&k.graph_json(rows, cols)).unwrap();
            let label = format!("{}_{rows}x{cols}_b{block}", k.label());
            assert_eq!(check(&label, &g, block), Some(1), "{label}");
        }
    }
}

/// Example graphs whose fused programs the CUDA target renders whole, and synthetic chains.
#[test]
fn example_and_synthetic_graphs_under_the_emulator_agree_with_the_interpreter() {
    let mut kernels = 0;
    for name in ["elementwise_chain", "logaddexp_chain", "residual_layernorm"] {
        let p = root().join(format!("examples/graphs/{name}.json"));
        let g = Graph::from_json_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        kernels += check(name, &g, 64).unwrap_or_else(|| panic!("{name}: not rendered whole"));
    }
    let mut synthetic = 0;
    for seed in 0..32u64 {
        let g = synthetic_graph(16, 3 + seed as usize % 4, 40 + 29 * seed as usize, seed);
        if let Some(n) = check(&format!("synthetic_{seed}"), &g, 64) {
            kernels += n;
            synthetic += 1;
        }
    }
    // Most synthetic graphs hold a matmul (left to cuBLAS, not rendered); enough do not.
    assert!(
        synthetic >= 6,
        "{synthetic} synthetic graphs rendered whole"
    );
    assert!(kernels >= 10, "{kernels}");
}

/// The prelude's 16-bit conversions, run under the emulator, equal the `half` crate's
/// (round to nearest even) bit for bit: widening every one of the 65 536 patterns of each
/// format (a NaN to a NaN of its sign), and narrowing f32 values whose upper 16 bits take every pattern with low halves
/// at and around each rounding boundary (bf16's tie 0x8000; f16's 0x1000 in normals, and
/// its subnormals' wider boundaries through the random ones), plus 2^20 random patterns.
#[test]
fn storage_conversions_equal_the_half_crate_bit_for_bit() {
    let label = "storage_conversions";
    let dir = emu_dir(label);
    std::fs::create_dir_all(&dir).unwrap();
    let lows: [u32; 14] = [
        0, 1, 0x0fff, 0x1000, 0x1001, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0xe000, 0xefff,
        0xf000, 0xffff,
    ];
    let mut values: Vec<u32> = (0..=0xffffu32)
        .flat_map(|h| lows.iter().map(move |l| (h << 16) | l))
        .collect();
    let mut rng = tensorforge_core::rng::SplitMix64::new(7);
    values.extend((0..1 << 20).map(|_| rng.next_u64() as u32));
    let n = values.len();
    let main = format!(
        "#include \"cuda_emu.hpp\"\n#include \"kernels.cu\"\n#include <cstdio>\n#include <vector>\n\
         int main(int, char **argv) {{\n\
           std::vector<unsigned> v({n});\n\
           FILE *f = std::fopen(argv[1], \"rb\");\n\
           if (std::fread(v.data(), 4, {n}, f) != {n}) return 3;\n\
           std::fclose(f);\n\
           FILE *o = std::fopen(argv[2], \"wb\");\n\
           for (unsigned h = 0; h < 65536; ++h) {{\n\
             const float a = tf_bf16_to_f32(h), b = tf_f16_to_f32(h);\n\
             std::fwrite(&a, 4, 1, o); std::fwrite(&b, 4, 1, o);\n\
           }}\n\
           for (unsigned x : v) {{\n\
             const float y = tf_bits_f((int32_t)x);\n\
             const unsigned short a = tf_f32_to_bf16(y), b = tf_f32_to_f16(y);\n\
             std::fwrite(&a, 2, 1, o); std::fwrite(&b, 2, 1, o);\n\
           }}\n\
           std::fclose(o);\n  return 0;\n}}\n"
    );
    std::fs::write(dir.join("kernels.cu"), device_prelude()).unwrap();
    std::fs::write(dir.join("main.cpp"), main).unwrap();
    let blob: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(dir.join("in.bin"), blob).unwrap();
    let out = compile_and_run_bytes(label, &dir);
    assert_eq!(out.len(), 65536 * 8 + n * 4);
    let (wide, narrow) = out.split_at(65536 * 8);
    // A NaN widens to a NaN of the same sign; `half` also sets the quiet bit of a signalling
    // one, which the kernels need not (their loads only feed arithmetic).
    let same = |ours: u32, theirs: f32| {
        let o = f32::from_bits(ours);
        ours == theirs.to_bits()
            || (o.is_nan() && theirs.is_nan() && o.is_sign_negative() == theirs.is_sign_negative())
    };
    for (h, c) in wide.chunks_exact(8).enumerate() {
        let a = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let b = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        let h = h as u16;
        assert!(
            same(a, half::bf16::from_bits(h).to_f32()),
            "bf16 {h:#06x}: {a:#010x}"
        );
        assert!(
            same(b, half::f16::from_bits(h).to_f32()),
            "f16 {h:#06x}: {b:#010x}"
        );
    }
    for (x, c) in values.iter().zip(narrow.chunks_exact(4)) {
        let y = f32::from_bits(*x);
        let a = u16::from_le_bytes([c[0], c[1]]);
        let b = u16::from_le_bytes([c[2], c[3]]);
        assert_eq!(a, half::bf16::from_f32(y).to_bits(), "bf16 of {x:#010x}");
        assert_eq!(b, half::f16::from_f32(y).to_bits(), "f16 of {x:#010x}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// With bf16 storage the kernels of every example graph and fixture still compile with
/// NVRTC and match their launcher; and where a kernel takes whole vectors per step, its PTX
/// loads and stores them 128 bits at a time (`ld.global[.nc].v4`, `st.global.v4`).
#[test]
fn sixteen_bit_and_vector_kernels_compile_with_nvrtc_to_128_bit_accesses() {
    if !nvrtc_here() {
        return;
    }
    let arch = TEST_ARCHS[1];
    let mut kernels = 0;
    // Every example in bf16 (f16 differs in the conversion functions only, which the
    // benchmark kernels below compile in every storage).
    for (name, p, _) in &example_programs() {
        let c = compile_program_with(p, name, arch, &CudaOptions::new(Storage::Bf16))
            .unwrap_or_else(|e| panic!("{name} bf16: {e}"));
        kernels += c.entries.len();
    }
    assert!(kernels > 150, "{kernels}");
    // The benchmark kernels over rows of 4096, and residual_layernorm (a sum kept in a scratch
    // row and read back by the norm): every one takes whole vectors, scratch rows included.
    let mut graphs: Vec<(String, Graph)> = GpuKernel::ALL
        .iter()
        .map(|k| {
            let g = Graph::from_json_str(&k.graph_json(64, 4096)).unwrap();
            (k.label().to_string(), g)
        })
        .collect();
    let rl = root().join("examples/graphs/residual_layernorm.json");
    graphs.push((
        "residual_layernorm".into(),
        Graph::from_json_str(&std::fs::read_to_string(rl).unwrap()).unwrap(),
    ));
    let mut vector_kernels = 0;
    for (label, g) in &graphs {
        let p = compile(g).unwrap().fused;
        for st in Storage::ALL {
            let c = compile_program_with(&p, label, arch, &CudaOptions::new(st)).unwrap();
            for ck in &c.cuda.kernels {
                assert_eq!(ck.cols_per_thread, 16 / st.bytes(), "{label}");
                vector_kernels += 1;
            }
            let body = |name: &str| -> String {
                let at = c.ptx.find(&format!(".entry {name}(")).unwrap();
                let end = c.ptx[at..].find("\n}").map_or(c.ptx.len(), |e| at + e);
                c.ptx[at..end].to_string()
            };
            for ck in &c.cuda.kernels {
                let b = body(&ck.symbol);
                let loads =
                    b.matches("ld.global.nc.v4.").count() + b.matches("ld.global.v4.").count();
                let stores = b.matches("st.global.v4.").count();
                assert!(
                    loads >= 1 && stores >= 1,
                    "{label} {}: {loads} 128-bit loads, {stores} stores in\n{b}",
                    st.label()
                );
                // No element-wide global access is left in a kernel whose rows split.
                let narrow = b
                    .lines()
                    .filter(|l| {
                        (l.contains("ld.global") || l.contains("st.global")) && !l.contains(".v4.")
                    })
                    .count();
                assert_eq!(
                    narrow,
                    0,
                    "{label} {}: narrow global accesses in\n{b}",
                    st.label()
                );
            }
        }
    }
    assert_eq!(vector_kernels, (GpuKernel::ALL.len() + 1) * 3);
}
