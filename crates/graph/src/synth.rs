//! Synthetic graphs for property tests and benchmarks: random valid graphs over `[r, c]`
//! activations mixing elementwise, broadcast, row-reduction, softmax, RMSNorm, matmul,
//! transpose views and column reductions. Each op reads one of the four most recent
//! tensors of a shape class, so lifetimes are short and varied, like a real network's.
//! Not a model of any particular network.

use crate::ir::{BinaryFn, DType, Graph, Node, Op, UnaryFn};

#[derive(Clone, Copy, PartialEq)]
enum Cls {
    Full,
    Row,
    Col,
}

/// Build a random valid graph over [r, c] activations from a list of op choices.
pub fn random_graph(r: usize, c: usize, steps: &[(u8, u16, u16)]) -> Graph {
    let f32 = DType::Fp32;
    let mut nodes = vec![
        Node::new(
            "x0",
            Op::Input {
                shape: vec![r, c],
                dtype: f32,
            },
            &[],
        ),
        Node::new(
            "x1",
            Op::Input {
                shape: vec![r, c],
                dtype: f32,
            },
            &[],
        ),
        Node::new(
            "v",
            Op::Input {
                shape: vec![r, 1],
                dtype: f32,
            },
            &[],
        ),
        Node::new(
            "bias",
            Op::Weight {
                shape: vec![c],
                dtype: f32,
            },
            &[],
        ),
        Node::new(
            "w",
            Op::Weight {
                shape: vec![c, c],
                dtype: f32,
            },
            &[],
        ),
    ];
    let mut ts: Vec<(String, Cls)> = vec![
        ("x0".into(), Cls::Full),
        ("x1".into(), Cls::Full),
        ("v".into(), Cls::Row),
    ];
    let pick = |ts: &Vec<(String, Cls)>, cls: Cls, k: u16| -> Option<String> {
        let v: Vec<&String> = ts.iter().filter(|t| t.1 == cls).map(|t| &t.0).collect();
        if v.is_empty() {
            None
        } else {
            Some(v[v.len() - 1 - (k as usize % v.len().min(4))].clone())
        }
    };
    for (i, &(kind, a, b)) in steps.iter().enumerate() {
        let name = format!("n{i}");
        let fa = pick(&ts, Cls::Full, a).unwrap_or_else(|| "x0".into());
        let fb = pick(&ts, Cls::Full, b).unwrap_or_else(|| "x1".into());
        let bin = [
            Op::Binary { f: BinaryFn::Add },
            Op::Binary { f: BinaryFn::Sub },
            Op::Binary { f: BinaryFn::Mul },
            Op::Binary { f: BinaryFn::Max },
            Op::Binary { f: BinaryFn::Min },
        ][(a % 5) as usize]
            .clone();
        let un = [
            Op::Unary { f: UnaryFn::Tanh },
            Op::Unary { f: UnaryFn::Neg },
            Op::Unary {
                f: UnaryFn::Sigmoid,
            },
            Op::Unary { f: UnaryFn::Relu },
            Op::Unary { f: UnaryFn::Silu },
        ][(b % 5) as usize]
            .clone();
        let (node, cls) = match kind % 13 {
            0 => (Node::new(&name, un, &[&fa]), Cls::Full),
            1 => (Node::new(&name, bin, &[&fa, &fb]), Cls::Full),
            2 => {
                let rv = pick(&ts, Cls::Row, b).unwrap_or_else(|| "v".into());
                (Node::new(&name, bin, &[&fa, &rv]), Cls::Full)
            }
            3 => (Node::new(&name, bin, &[&fa, "bias"]), Cls::Full),
            4 => {
                let op = [
                    Op::ReduceSum {
                        axis: -1,
                        keepdims: true,
                    },
                    Op::ReduceMax {
                        axis: -1,
                        keepdims: true,
                    },
                    Op::ReduceMean {
                        axis: -1,
                        keepdims: true,
                    },
                ][(b % 3) as usize]
                    .clone();
                (Node::new(&name, op, &[&fa]), Cls::Row)
            }
            5 => (
                Node::new(&name, Op::Softmax { axis: -1 }, &[&fa]),
                Cls::Full,
            ),
            6 => (
                Node::new(&name, Op::RmsNorm { eps: 1e-6 }, &[&fa, "bias"]),
                Cls::Full,
            ),
            7 => {
                let rv = pick(&ts, Cls::Row, b).unwrap_or_else(|| "v".into());
                (
                    Node::new(&name, Op::Unary { f: UnaryFn::Tanh }, &[&rv]),
                    Cls::Row,
                )
            }
            8 => (Node::new(&name, Op::MatMul, &[&fa, "w"]), Cls::Full),
            9 => {
                let t1 = format!("{name}_t");
                nodes.push(Node::new(&t1, Op::Transpose { perm: vec![1, 0] }, &[&fa]));
                let t2 = format!("{name}_u");
                nodes.push(Node::new(&t2, Op::Unary { f: UnaryFn::Tanh }, &[&t1]));
                (
                    Node::new(&name, Op::Transpose { perm: vec![1, 0] }, &[&t2]),
                    Cls::Full,
                )
            }
            11 => {
                // Naive log(exp(u) + exp(v)) on bounded values: rewritten to LogAddExp.
                let (ta, tb, ea, eb, sum) = (
                    format!("{name}_ta"),
                    format!("{name}_tb"),
                    format!("{name}_ea"),
                    format!("{name}_eb"),
                    format!("{name}_s"),
                );
                nodes.push(Node::new(&ta, Op::Unary { f: UnaryFn::Tanh }, &[&fa]));
                nodes.push(Node::new(&tb, Op::Unary { f: UnaryFn::Tanh }, &[&fb]));
                nodes.push(Node::new(&ea, Op::Unary { f: UnaryFn::Exp }, &[&ta]));
                nodes.push(Node::new(&eb, Op::Unary { f: UnaryFn::Exp }, &[&tb]));
                nodes.push(Node::new(
                    &sum,
                    Op::Binary { f: BinaryFn::Add },
                    &[&ea, &eb],
                ));
                (
                    Node::new(&name, Op::Unary { f: UnaryFn::Log }, &[&sum]),
                    Cls::Full,
                )
            }
            12 => {
                // Naive softmax exp(u) / sum(exp(u)) on bounded values: rewritten to Softmax.
                let (t, e, sum) = (
                    format!("{name}_t"),
                    format!("{name}_e"),
                    format!("{name}_s"),
                );
                nodes.push(Node::new(&t, Op::Unary { f: UnaryFn::Tanh }, &[&fa]));
                nodes.push(Node::new(&e, Op::Unary { f: UnaryFn::Exp }, &[&t]));
                nodes.push(Node::new(
                    &sum,
                    Op::ReduceSum {
                        axis: -1,
                        keepdims: true,
                    },
                    &[&e],
                ));
                (
                    Node::new(&name, Op::Binary { f: BinaryFn::Div }, &[&e, &sum]),
                    Cls::Full,
                )
            }
            _ => {
                if a % 2 == 0 {
                    (
                        Node::new(
                            &name,
                            Op::ReduceSum {
                                axis: 0,
                                keepdims: true,
                            },
                            &[&fa],
                        ),
                        Cls::Col,
                    )
                } else {
                    let col = pick(&ts, Cls::Col, b);
                    match col {
                        Some(cv) => (Node::new(&name, bin, &[&fa, &cv]), Cls::Full),
                        None => (Node::new(&name, un, &[&fa]), Cls::Full),
                    }
                }
            }
        };
        nodes.push(node);
        ts.push((name, cls));
    }
    Graph::new("random", nodes)
}

/// A synthetic graph of about `n` nodes with steps drawn from a seeded generator; its only
/// output is the last node.
pub fn synthetic_graph(n: usize, r: usize, c: usize, seed: u64) -> Graph {
    let mut rng = tensorforge_core::rng::SplitMix64::new(seed);
    let mut next = || (rng.next_u64() >> 32) as u32;
    let steps: Vec<(u8, u16, u16)> = (0..n)
        .map(|_| ((next() % 13) as u8, next() as u16, next() as u16))
        .collect();
    let mut g = random_graph(r, c, &steps);
    // One graph output (the last node), so that every other tensor dies after its last read.
    if let Some(last) = g.nodes.last() {
        g.outputs = vec![last.name.clone()];
    }
    g
}
