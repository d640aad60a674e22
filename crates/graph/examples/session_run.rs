//! What `Session::run` costs per call on an ONNX model whose inputs are float32 (seeded
//! values in [−1, 1); symbolic dims set to 1 unless given, unknown dims 1), first with the
//! outputs dropped after each call, then handed back (`Session::recycle`): the figures
//! behind docs/performance.md's "Outputs handed over" section (a 16384 × 1024 softmax: its
//! 64 MiB output is fresh memory on every call unless handed back). Prints the per-call min / median / max over the calls after two warm-up
//! calls, and the CPU. Left out: non-float inputs (an error says so).
//!
//! `cargo run --release -p tensorforge-graph --example session_run -- MODEL.onnx [CALLS] [THREADS] [DIM=N ...]`

use tensorforge_graph::exec::random_values;
use tensorforge_graph::session::{Dim, Session};
use tensorforge_kernels::call::{DataRef, TensorRef};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(model) = args.first() else {
        eprintln!("usage: session_run MODEL.onnx [CALLS] [THREADS] [DIM=N ...]");
        std::process::exit(2);
    };
    let calls: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(12);
    let threads: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1);
    let dims: Vec<(String, usize)> = args
        .iter()
        .skip(3)
        .filter_map(|a| {
            let (k, v) = a.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect();
    let s = match Session::open(model, Some(threads)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{model}: {e}");
            std::process::exit(2);
        }
    };
    let mut shapes = vec![];
    let mut values = vec![];
    for (k, i) in s.inputs().iter().enumerate() {
        if i.dtype != "float32" {
            eprintln!("{model}: input `{}` is {}, not float32", i.name, i.dtype);
            std::process::exit(2);
        }
        let shape: Vec<usize> = i
            .dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => *n,
                Dim::Symbol(name) => dims
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| *v)
                    .unwrap_or(1),
                Dim::Unknown => 1,
            })
            .collect();
        values.push(random_values(shape.iter().product(), 1 + k as u64));
        shapes.push(shape);
    }
    let feeds: Vec<TensorRef> = s
        .inputs()
        .iter()
        .zip(&shapes)
        .zip(&values)
        .map(|((i, shape), v)| TensorRef {
            name: &i.name,
            shape,
            data: DataRef::F32(v),
        })
        .collect();
    // Per call, ms, after two warm-up calls: outputs dropped, or handed back
    // (`Session::recycle`).
    let timed = |recycle: bool| -> Vec<f64> {
        let mut ms = vec![];
        for c in 0..calls + 2 {
            let t = std::time::Instant::now();
            let out = match s.run(&feeds, None) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("{model}: {e}");
                    std::process::exit(2);
                }
            };
            let dt = t.elapsed().as_secs_f64() * 1e3;
            if recycle {
                s.recycle(out);
            } else {
                drop(out);
            }
            if c >= 2 {
                ms.push(dt);
            }
        }
        ms.sort_by(f64::total_cmp);
        ms
    };
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    for (recycle, how) in [(false, "outputs dropped"), (true, "outputs handed back")] {
        let ms = timed(recycle);
        println!(
            "{model}: Session::run, {threads} thread(s), {calls} calls, {how}: {:.2} / {:.2} / {:.2} ms (min / median / max); {cpu}",
            ms[0],
            ms[ms.len() / 2],
            ms[ms.len() - 1]
        );
    }
}
