//! Every kernel of every example graph and ONNX fixture, run alone on the tensors the whole
//! program's run showed it reading (`execute_observed`), gives exactly the outputs it gave
//! inside the program (`run_kernel_alone`): what a back end that runs some kernels itself
//! and leaves the rest to the interpreter relies on (`tensorforge-cuda`'s GPU executor).

mod common;

use common::{npy_dir, root};
use std::collections::HashMap;
use tensorforge_graph::exec::{execute_observed, fill_inputs, run_kernel_alone};
use tensorforge_graph::fusion::{compile, Program};
use tensorforge_graph::onnx::{import_onnx_file_with, ImportOptions};
use tensorforge_graph::Graph;

fn check(label: &str, p: &Program, ins: &HashMap<String, Vec<f32>>) -> usize {
    let mut reads: Vec<HashMap<usize, Vec<f32>>> = vec![HashMap::new(); p.kernels.len()];
    let mut outs: Vec<HashMap<usize, Vec<f32>>> = vec![HashMap::new(); p.kernels.len()];
    execute_observed(p, ins, &mut |k, t, v| {
        // A kernel's outputs are never among what it reads from outside.
        if p.kernels[k].outputs.contains(&t) {
            outs[k].insert(t, v.to_vec());
        } else {
            reads[k].insert(t, v.to_vec());
        }
    })
    .unwrap_or_else(|e| panic!("{label}: {e}"));
    for (ki, k) in p.kernels.iter().enumerate() {
        let got = run_kernel_alone(p, k, &reads[ki])
            .unwrap_or_else(|e| panic!("{label} {}: {e}", k.name));
        for (j, &t) in k.outputs.iter().enumerate() {
            let want = &outs[ki][&t];
            assert_eq!(got[j].len(), want.len(), "{label} {}", k.name);
            for (i, (a, b)) in got[j].iter().zip(want).enumerate() {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{label} kernel {} output {j}[{i}]: alone {a} vs in the program {b}",
                    k.name
                );
            }
        }
    }
    p.kernels.len()
}

#[test]
fn every_kernel_alone_gives_what_it_gave_in_the_program() {
    let mut kernels = 0;
    let gdir = root().join("../graphs");
    for e in std::fs::read_dir(&gdir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "json") {
            let g = Graph::from_json_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let p = compile(&g).unwrap().fused;
            let mut ins = HashMap::new();
            fill_inputs(&p.graph, &mut ins, 3).unwrap();
            kernels += check(&path.display().to_string(), &p, &ins);
        }
    }
    for e in std::fs::read_dir(root()).unwrap() {
        let d = e.unwrap().path();
        if !d.join("model.onnx").exists() || !d.join("inputs").exists() {
            continue;
        }
        let inputs = npy_dir(&d.join("inputs"));
        let options = ImportOptions {
            input_shapes: inputs
                .iter()
                .map(|(k, (s, _))| (k.clone(), s.clone()))
                .collect(),
            ..Default::default()
        };
        let imp = import_onnx_file_with(d.join("model.onnx"), &options).unwrap();
        let p = compile(&imp.graph).unwrap().fused;
        let mut ins = imp.weights;
        ins.extend(inputs.into_iter().map(|(k, (_, v))| (k, v)));
        kernels += check(&d.display().to_string(), &p, &ins);
    }
    assert!(kernels >= 300, "{kernels} kernels");
}
