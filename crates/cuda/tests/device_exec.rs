//! The device executor's planning without a GPU: `execute_on` with a host backend whose
//! primitives keep the device's contracts — a GEMM with cuBLAS's column-major parameters
//! (transposes, leading dimensions, strides, batches) computed literally, a generated kernel
//! evaluated by the interpreter on exactly the buffers passed as its arguments — on every
//! example graph and ONNX fixture, against the CPU interpreter's outputs (within 1e-5 of each
//! output's magnitude: the GEMM sums in f64 here, faer in f32 there). A wrong buffer for a
//! parameter, a wrong orientation, leading dimension or stride fails it.

mod support;

use std::collections::HashMap;
use support::{example_programs, fixture, root};
use tensorforge_cuda::check::agreement;
use tensorforge_cuda::exec::{execute_on, Backend, DeviceProgram, GemmCall, Placement};
use tensorforge_cuda::Result;
use tensorforge_graph::codegen::cuda::CudaKernel;
use tensorforge_graph::exec::{execute, fill_inputs, kernel_reads, run_kernel_alone};
use tensorforge_graph::fusion::{compile, Kernel, Program};
use tensorforge_graph::Graph;

struct HostBackend<'p> {
    p: &'p Program,
    bufs: Vec<Vec<f32>>,
    launches: usize,
    gemms: usize,
}

impl Backend for HostBackend<'_> {
    fn upload(&mut self, v: &[f32]) -> Result<usize> {
        self.bufs.push(v.to_vec());
        Ok(self.bufs.len() - 1)
    }
    fn alloc(&mut self, n: usize) -> Result<usize> {
        self.bufs.push(vec![0.0; n]);
        Ok(self.bufs.len() - 1)
    }
    fn download(&mut self, b: usize) -> Result<Vec<f32>> {
        Ok(self.bufs[b].clone())
    }
    fn write(&mut self, b: usize, v: &[f32]) -> Result<()> {
        assert_eq!(self.bufs[b].len(), v.len());
        self.bufs[b].copy_from_slice(v);
        Ok(())
    }
    fn prepare(&mut self, _source: &str) -> Result<()> {
        Ok(())
    }
    /// The kernel's semantics from the interpreter, reading only the buffers passed: each
    /// tensor it reads must be one of the launch's inputs (itself, or the same storage under
    /// a Reshape).
    fn launch(&mut self, ck: &CudaKernel, k: &Kernel, args: &[usize]) -> Result<()> {
        let tg = &self.p.graph;
        assert_eq!(args.len(), ck.inputs.len() + ck.outputs.len());
        let mut values = HashMap::new();
        for t in kernel_reads(tg, k) {
            let j = ck
                .inputs
                .iter()
                .position(|&i| i == t || tg.base(i) == tg.base(t))
                .unwrap_or_else(|| panic!("{}: tensor {t} read but not passed", ck.symbol));
            values.insert(t, self.bufs[args[j]].clone());
        }
        let outs = run_kernel_alone(self.p, k, &values).unwrap();
        for (j, v) in outs.into_iter().enumerate() {
            let b = args[ck.inputs.len() + j];
            assert_eq!(self.bufs[b].len(), v.len(), "{} output {j}", ck.symbol);
            self.bufs[b] = v;
        }
        self.launches += 1;
        Ok(())
    }
    /// cuBLAS's definition, column-major: C[i + j·ldc] = Σ_l op(A)(i, l) · op(B)(l, j).
    fn gemm(&mut self, g: &GemmCall, a: usize, b: usize, c: usize) -> Result<()> {
        let (av, bv) = (self.bufs[a].clone(), self.bufs[b].clone());
        let cv = &mut self.bufs[c];
        for bt in 0..g.batch {
            let (oa, ob, oc) = (bt * g.stride_a, bt * g.stride_b, bt * g.stride_c);
            for i in 0..g.m {
                for j in 0..g.n {
                    let mut s = 0.0f64;
                    for l in 0..g.k {
                        let x = if g.transa {
                            av[oa + l + i * g.lda]
                        } else {
                            av[oa + i + l * g.lda]
                        };
                        let y = if g.transb {
                            bv[ob + j + l * g.ldb]
                        } else {
                            bv[ob + l + j * g.ldb]
                        };
                        s += f64::from(x) * f64::from(y);
                    }
                    cv[oc + i + j * g.ldc] = s as f32;
                }
            }
        }
        self.gemms += 1;
        Ok(())
    }
}

/// Runs `p` through the host backend and the interpreter; returns (generated launches,
/// GEMMs, kernels left to the host).
fn check(label: &str, p: &Program, ins: &HashMap<String, Vec<f32>>) -> (usize, usize, usize) {
    let want = execute(p, ins).unwrap_or_else(|e| panic!("{label}: {e}"));
    let mut dev = HostBackend {
        p,
        bufs: vec![],
        launches: 0,
        gemms: 0,
    };
    let got = execute_on(&mut dev, p, ins).unwrap_or_else(|e| panic!("{label}: {e}"));
    assert_eq!(got.outputs.len(), want.outputs.len());
    for ((n, s, v), (wn, ws, wv)) in got.outputs.iter().zip(&want.outputs) {
        assert_eq!((n, s), (wn, ws), "{label}");
        let a = agreement(v, wv);
        assert!(a.within(1e-5), "{label} `{n}`: {a:?}");
    }
    let host = got
        .steps
        .iter()
        .filter(|s| matches!(s.placement, Placement::Host(_)))
        .count();
    (dev.launches, dev.gemms, host)
}

#[test]
fn every_example_runs_on_the_device_plan_as_in_the_interpreter() {
    let (mut launches, mut gemms, mut host) = (0, 0, 0);
    let mut add = |(l, g, h): (usize, usize, usize)| {
        launches += l;
        gemms += g;
        host += h;
    };
    for (name, p, ins) in example_programs() {
        add(check(&name, &p, &ins));
    }
    // Each path is exercised many times over: generated kernels, GEMMs (linear layers,
    // attention products, transposed operands), and host fallbacks (gathers, convolutions).
    assert!(launches >= 200, "{launches} launches");
    assert!(gemms >= 100, "{gemms} GEMMs");
    assert!(host >= 20, "{host} host kernels");
}

/// GEMM orientations the fixtures do not all reach: a transposed A, both operands
/// transposed in a batch, a batched A against a 2-D B with a bias and activation epilogue.
/// Shapes are small and unequal so that a swapped dimension or leading dimension shows.
#[test]
fn transposed_and_batched_gemm_operands_match_the_interpreter() {
    let cases = [
        r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[3,5],"dtype":"fp32"}},
          {"name":"w","op":"Weight","attrs":{"shape":[3,4],"dtype":"fp32"}},
          {"name":"xt","op":"Transpose","inputs":["x"],"attrs":{"perm":[1,0]}},
          {"name":"y","op":"MatMul","inputs":["xt","w"]}]}"#,
        r#"{"nodes":[
          {"name":"a","op":"Input","attrs":{"shape":[2,6,3],"dtype":"fp32"}},
          {"name":"b","op":"Input","attrs":{"shape":[2,4,6],"dtype":"fp32"}},
          {"name":"at","op":"Transpose","inputs":["a"],"attrs":{"perm":[0,2,1]}},
          {"name":"bt","op":"Transpose","inputs":["b"],"attrs":{"perm":[0,2,1]}},
          {"name":"p","op":"MatMul","inputs":["at","bt"]},
          {"name":"y","op":"ReLU","inputs":["p"]}]}"#,
        r#"{"nodes":[
          {"name":"a","op":"Input","attrs":{"shape":[2,5,3],"dtype":"fp32"}},
          {"name":"w","op":"Weight","attrs":{"shape":[3,4],"dtype":"fp32"}},
          {"name":"bias","op":"Weight","attrs":{"shape":[4],"dtype":"fp32"}},
          {"name":"p","op":"MatMul","inputs":["a","w"]},
          {"name":"q","op":"Add","inputs":["p","bias"]},
          {"name":"y","op":"Tanh","inputs":["q"]}]}"#,
    ];
    let mut gemms = 0;
    for (i, json) in cases.iter().enumerate() {
        let g = Graph::from_json_str(json).unwrap();
        let p = compile(&g).unwrap().fused;
        let mut ins = HashMap::new();
        fill_inputs(&p.graph, &mut ins, 4).unwrap();
        let (_, n, host) = check(&format!("case {i}"), &p, &ins);
        assert_eq!(host, 0, "case {i} left a kernel to the host");
        gemms += n;
    }
    assert_eq!(gemms, 3);
}

/// A prepared program runs again without new buffers (the first run's are reused) and gives
/// the same outputs: what `bench --device cuda graph:…` times.
#[test]
fn a_prepared_program_reuses_its_buffers_run_after_run() {
    let (p, ins) = fixture(&root().join("examples/onnx/llama_sdpa_ts"));
    let mut dev = HostBackend {
        p: &p,
        bufs: vec![],
        launches: 0,
        gemms: 0,
    };
    let mut dp = DeviceProgram::new(&mut dev, &p, &ins).unwrap();
    dp.run(&mut dev).unwrap();
    let first = dp.outputs(&mut dev).unwrap();
    let n = dev.bufs.len();
    dp.run(&mut dev).unwrap();
    assert_eq!(dev.bufs.len(), n, "the second run allocated");
    let second = dp.outputs(&mut dev).unwrap();
    assert_eq!(first, second);
    let want = execute(&p, &ins).unwrap();
    assert!(agreement(&second[0].2, &want.outputs[0].2).within(1e-5));
}
