//! Property tests over random valid graphs: fused and unfused results agree, the executor's
//! byte counts equal the model, fused traffic never exceeds unfused traffic, and memory
//! plans never overlap live tensors and never beat the lower bound.

use crate::exec::{compare, execute, fill_inputs};
use crate::fusion::compile;
use crate::planner::plan;
use crate::synth::random_graph;
use crate::traffic::program_bytes;
use proptest::prelude::*;
use std::collections::HashMap;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_fuse_run_and_plan_consistently(
        r in 1usize..6,
        c in 1usize..24,
        steps in prop::collection::vec((0u8..13, any::<u16>(), any::<u16>()), 1..14),
    ) {
        let g = random_graph(r, c, &steps);
        let comp = compile(&g).expect("random graphs are valid");
        // Rewrites only shrink the graph.
        prop_assert!(comp.fused.graph.nodes.len() <= comp.unfused.graph.nodes.len());
        let tu = program_bytes(&comp.unfused);
        let tf = program_bytes(&comp.fused);
        prop_assert!(tf <= tu, "fused {} > unfused {}", tf, tu);
        let mut ins = HashMap::new();
        fill_inputs(&comp.unfused.graph, &mut ins, 3).unwrap();
        let u = execute(&comp.unfused, &ins).unwrap();
        let f = execute(&comp.fused, &ins).unwrap();
        let (ok, worst, at) = compare(&f, &u);
        prop_assert!(ok, "disagree: {} at {}", worst, at);
        for p in [&comp.unfused, &comp.fused] {
            for align in [1u64, 64] {
                let pl = plan(p, align).expect("plans verify");
                prop_assert!(pl.peak_bytes >= pl.lower_bound_bytes);
                prop_assert!(pl.peak_bytes <= pl.no_reuse_bytes);
                prop_assert!(pl.verified_no_overlap);
            }
        }
    }
}

/// A case proptest found in CI: a LogAddExp (no vector form in the register-tiled evaluator)
/// inside an elementwise kernel. Kept as a fixed regression test.
#[test]
fn regression_logaddexp_inside_a_tiled_kernel() {
    let steps = [
        (0u8, 0u16, 0u16),
        (0, 985, 0),
        (11, 15514, 53952),
        (0, 4582, 0),
        (11, 32490, 21943),
        (1, 27029, 33574),
    ];
    let g = random_graph(1, 1, &steps);
    let comp = compile(&g).unwrap();
    let mut ins = HashMap::new();
    fill_inputs(&comp.unfused.graph, &mut ins, 3).unwrap();
    let u = execute(&comp.unfused, &ins).unwrap();
    let f = execute(&comp.fused, &ins).unwrap();
    let (ok, worst, at) = compare(&f, &u);
    assert!(ok, "disagree: {worst} at {at}");
}
