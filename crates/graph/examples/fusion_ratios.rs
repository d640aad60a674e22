//! Fused vs unfused CPU execution, measured in one run beside the predicted traffic ratio:
//! an 8-op arithmetic chain over 16 Mi f32 elements and RMSNorm -> SiLU -> Mul over
//! 4096 x 1024. Copy bandwidth is measured in the same run; the fused chain's effective
//! bandwidth (model bytes / time) is reported as a fraction of it.
//!
//! `cargo run --release -p tensorforge-graph --example fusion_ratios`

use rayon::prelude::*;
use std::collections::HashMap;
use std::time::Instant;
use tensorforge_graph::exec::{compare, execute_pooled, fill_inputs, Pool};
use tensorforge_graph::fusion::compile;
use tensorforge_graph::ir::{BinaryFn, DType, Graph, Node, Op, UnaryFn};
use tensorforge_graph::traffic::program_bytes;

fn copy_bandwidth(n: usize, reps: usize) -> f64 {
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        dst.par_chunks_mut(1 << 16)
            .zip(src.par_chunks(1 << 16))
            .for_each(|(d, s)| d.copy_from_slice(s));
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    (2 * n * 4) as f64 / best
}

fn bench(label: &str, g: &Graph, reps: usize, copy_bw: f64) {
    let c = compile(g).unwrap();
    let bu = program_bytes(&c.unfused);
    let bf = program_bytes(&c.fused);
    let mut ins = HashMap::new();
    fill_inputs(&c.unfused.graph, &mut ins, 1).unwrap();
    let mut tu = u64::MAX;
    let mut tf = u64::MAX;
    let (mut ru, mut rf) = (None, None);
    let (mut pu, mut pf) = (Pool::default(), Pool::default());
    for _ in 0..reps {
        let u = execute_pooled(&c.unfused, &ins, &mut pu).unwrap();
        tu = tu.min(u.elapsed_ns);
        ru = Some(u);
        let f = execute_pooled(&c.fused, &ins, &mut pf).unwrap();
        tf = tf.min(f.elapsed_ns);
        rf = Some(f);
    }
    let (ok, worst, _) = compare(rf.as_ref().unwrap(), ru.as_ref().unwrap());
    let fused_bw = bf as f64 / (tf as f64 * 1e-9);
    let unfused_bw = bu as f64 / (tu as f64 * 1e-9);
    println!("{label}");
    println!(
        "  unfused {:>8.2} ms ({} kernels, {:.1} MiB, {:.2} GB/s)   fused {:>8.2} ms ({} kernels, {:.1} MiB, {:.2} GB/s)",
        tu as f64 * 1e-6,
        c.unfused.kernels.len(),
        bu as f64 / 1048576.0,
        unfused_bw * 1e-9,
        tf as f64 * 1e-6,
        c.fused.kernels.len(),
        bf as f64 / 1048576.0,
        fused_bw * 1e-9
    );
    println!(
        "  measured time ratio (unfused/fused) {:.2}x   predicted traffic ratio {:.2}x   fused at {:.0} % of copy bandwidth   agree: {ok} (max |diff| {worst:e})",
        tu as f64 / tf as f64,
        bu as f64 / bf as f64,
        100.0 * fused_bw / copy_bw
    );
}

fn main() {
    let threads = rayon::current_num_threads();
    let copy_bw = copy_bandwidth(1 << 24, 7);
    println!(
        "threads {threads}; copy bandwidth (16 Mi f32, read+write, best of 7): {:.2} GB/s",
        copy_bw * 1e-9
    );
    let only = std::env::args().nth(1).unwrap_or_default();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/graphs/elementwise_chain.json"
    );
    let g = Graph::from_json_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    if only != "rms" {
        bench(
            "8-op elementwise chain, 16 Mi f32 (examples/graphs/elementwise_chain.json)",
            &g,
            5,
            copy_bw,
        );
    }
    if only == "chain" {
        return;
    }
    let (t, d) = (4096usize, 1024usize);
    let f32 = DType::Fp32;
    let mut g = Graph::new(
        "rmsnorm_silu_mul",
        vec![
            Node::new(
                "x",
                Op::Input {
                    shape: vec![t, d],
                    dtype: f32,
                },
                &[],
            ),
            Node::new(
                "u",
                Op::Input {
                    shape: vec![t, d],
                    dtype: f32,
                },
                &[],
            ),
            Node::new(
                "gamma",
                Op::Weight {
                    shape: vec![d],
                    dtype: f32,
                },
                &[],
            ),
            Node::new("h", Op::RmsNorm { eps: 1e-6 }, &["x", "gamma"]),
            Node::new("s", Op::Unary { f: UnaryFn::Silu }, &["h"]),
            Node::new("y", Op::Binary { f: BinaryFn::Mul }, &["s", "u"]),
        ],
    );
    g.outputs = vec!["y".into()];
    bench("RMSNorm -> SiLU -> Mul, 4096 x 1024 f32", &g, 5, copy_bw);
}
