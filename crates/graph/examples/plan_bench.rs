//! Memory planner on every example graph and on a 10,000-node synthetic graph: planned
//! peak against the lower bound, and planning time.
//!
//! `cargo run --release -p tensorforge-graph --example plan_bench`

use std::time::Instant;
use tensorforge_graph::fusion::{compile, Program};
use tensorforge_graph::planner::plan;
use tensorforge_graph::synth::synthetic_graph;
use tensorforge_graph::Graph;

fn main() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/graphs");
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .expect("examples/graphs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    println!(
        "{:<28} {:>8} {:>6} {:>14} {:>14} {:>7} {:>10}",
        "graph", "program", "steps", "peak_bytes", "lower_bound", "ratio", "plan_ms"
    );
    let mut worst: f64 = 1.0;
    for p in &names {
        let g = Graph::from_json_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        let c = compile(&g).unwrap();
        for (label, prog) in [("unfused", &c.unfused), ("fused", &c.fused)] {
            let t = Instant::now();
            let pl = plan(prog, 64).unwrap();
            let ms = t.elapsed().as_secs_f64() * 1e3;
            worst = worst.max(pl.peak_to_lower_bound);
            println!(
                "{:<28} {:>8} {:>6} {:>14} {:>14} {:>7.4} {:>10.3}",
                g.name,
                label,
                pl.steps,
                pl.peak_bytes,
                pl.lower_bound_bytes,
                pl.peak_to_lower_bound,
                ms
            );
        }
    }
    for seed in [1u64, 2, 3] {
        let g = synthetic_graph(10_000, 64, 256, seed);
        let t = Instant::now();
        let tg = g.validate().unwrap();
        let prog = Program::unfused(tg);
        let build_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let pl = plan(&prog, 64).unwrap();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        worst = worst.max(pl.peak_to_lower_bound);
        println!(
            "{:<28} {:>8} {:>6} {:>14} {:>14} {:>7.4} {:>10.3}   ({} nodes, {} tensors; validate+program {:.1} ms; greedy-by-size {} B, lifetime-ordered {} B)",
            format!("synthetic_10k seed {seed}"),
            "unfused",
            pl.steps,
            pl.peak_bytes,
            pl.lower_bound_bytes,
            pl.peak_to_lower_bound,
            ms,
            g.nodes.len(),
            pl.tensors.len(),
            build_ms,
            pl.greedy_by_size_bytes,
            pl.lifetime_ordered_bytes
        );
    }
    // The fused program of a 10k-node graph: fusion time, then planning.
    let g = synthetic_graph(10_000, 64, 256, 1);
    let t = Instant::now();
    let c = compile(&g).unwrap();
    let fuse_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let pl = plan(&c.fused, 64).unwrap();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    worst = worst.max(pl.peak_to_lower_bound);
    println!(
        "{:<28} {:>8} {:>6} {:>14} {:>14} {:>7.4} {:>10.3}   (validate + rewrite + fuse {:.1} ms)",
        "synthetic_10k seed 1",
        "fused",
        pl.steps,
        pl.peak_bytes,
        pl.lower_bound_bytes,
        pl.peak_to_lower_bound,
        ms,
        fuse_ms
    );
    println!("worst peak / lower bound: {worst:.4} (target <= 1.05)");
}
