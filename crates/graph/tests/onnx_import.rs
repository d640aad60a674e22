//! ONNX import: models built in code with the importer's own prost messages, plus one
//! fixture written by the `onnx` Python package (tools/make_onnx_fixtures.py).

use tensorforge_graph::ir::{BinaryFn, UnaryFn};
use tensorforge_graph::onnx::proto::tensor_shape_proto::{dimension, Dimension};
use tensorforge_graph::onnx::proto::type_proto::{Tensor as TypeTensor, Value as TypeValue};
use tensorforge_graph::onnx::proto::*;
use tensorforge_graph::onnx::{import_onnx_bytes, import_onnx_file, OnnxImport, MAX_NODES};
use tensorforge_graph::{DType, Graph, GraphError, Op};

const FLOAT: i32 = 1;
const INT8: i32 = 3;
const INT64: i32 = 7;

fn vi(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(TypeValue::TensorType(TypeTensor {
                elem_type: elem,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(dimension::Value::DimValue(d)),
                        })
                        .collect(),
                }),
            })),
        }),
    }
}

fn node(op: &str, ins: &[&str], outs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        name: outs.first().map(|o| format!("n_{o}")).unwrap_or_default(),
        op_type: op.into(),
        attribute: attrs,
        domain: String::new(),
    }
}

fn a_i(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        i,
        r#type: 2,
        ..Default::default()
    }
}
fn a_f(name: &str, f: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        f,
        r#type: 1,
        ..Default::default()
    }
}
fn a_ints(name: &str, ints: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        ints: ints.to_vec(),
        r#type: 7,
        ..Default::default()
    }
}
fn a_s(name: &str, s: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        s: s.as_bytes().to_vec(),
        r#type: 3,
        ..Default::default()
    }
}

/// A float initializer stored as raw little-endian bytes.
fn init_f32(name: &str, dims: &[i64], fill: f32) -> TensorProto {
    let n: i64 = dims.iter().product();
    TensorProto {
        dims: dims.to_vec(),
        data_type: FLOAT,
        name: name.into(),
        raw_data: (0..n).flat_map(|_| fill.to_le_bytes()).collect(),
        ..Default::default()
    }
}
fn init_i64(name: &str, vals: &[i64]) -> TensorProto {
    TensorProto {
        dims: vec![vals.len() as i64],
        data_type: INT64,
        name: name.into(),
        int64_data: vals.to_vec(),
        ..Default::default()
    }
}

struct M {
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    value_info: Vec<ValueInfoProto>,
    opset: i64,
}

impl M {
    fn new(opset: i64) -> M {
        M {
            nodes: vec![],
            inits: vec![],
            inputs: vec![],
            outputs: vec![],
            value_info: vec![],
            opset,
        }
    }
    fn model(self) -> ModelProto {
        ModelProto {
            ir_version: 8,
            producer_name: "tests".into(),
            producer_version: "1".into(),
            graph: Some(GraphProto {
                node: self.nodes,
                name: "g".into(),
                initializer: self.inits,
                input: self.inputs,
                output: self.outputs,
                value_info: self.value_info,
            }),
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: self.opset,
            }],
        }
    }
    fn bytes(self) -> Vec<u8> {
        self.model().encode_to_vec()
    }
    fn import(self) -> Result<OnnxImport, GraphError> {
        import_onnx_bytes(&self.bytes(), "test.onnx")
    }
}

fn shape_of(imp: &OnnxImport, t: &str) -> Vec<usize> {
    let tg = imp.graph.validate().unwrap();
    tg.tensors[tg.tensor_id(t).unwrap_or_else(|| panic!("no tensor `{t}`"))]
        .shape
        .clone()
}

/// RMSNorm written out in primitive ops, then a projection and a softmax.
fn rmsnorm_chain() -> M {
    let mut m = M::new(18);
    m.inputs.push(vi("x", FLOAT, &[4, 8]));
    m.inits.push(init_f32("gamma", &[8], 1.0));
    m.inits.push(init_f32("w", &[8, 16], 0.5));
    m.inits.push(init_f32("eps", &[], 1e-6));
    m.inits.push(init_i64("axes", &[-1]));
    m.nodes = vec![
        node("Mul", &["x", "x"], &["sq"], vec![]),
        node(
            "ReduceMean",
            &["sq", "axes"],
            &["ms"],
            vec![a_i("keepdims", 1)],
        ),
        node("Add", &["ms", "eps"], &["mse"], vec![]),
        node("Sqrt", &["mse"], &["rms"], vec![]),
        node("Div", &["x", "rms"], &["xn"], vec![]),
        node("Mul", &["xn", "gamma"], &["h"], vec![]),
        node("MatMul", &["h", "w"], &["logits"], vec![]),
        node("Softmax", &["logits"], &["p"], vec![a_i("axis", -1)]),
    ];
    m.outputs.push(vi("p", FLOAT, &[4, 16]));
    m
}

#[test]
fn rmsnorm_chain_imports_and_matches_the_json_graph() {
    let imp = rmsnorm_chain().import().unwrap();
    assert!(imp.opaque.is_empty(), "{:?}", imp.opaque);
    assert_eq!(imp.opset, 18);
    assert_eq!(imp.producer, "tests 1");
    assert_eq!(imp.graph.outputs, vec!["p".to_string()]);
    // The axes initializer is folded into the ReduceMean; the scalar eps is a Constant.
    let ops: Vec<&str> = imp.graph.nodes.iter().map(|n| n.op.name()).collect();
    assert!(
        !imp.graph.nodes.iter().any(|n| n.output_names() == ["axes"]),
        "{ops:?}"
    );
    let eps = imp
        .graph
        .nodes
        .iter()
        .find(|n| n.output_names() == ["eps"])
        .unwrap();
    match &eps.op {
        Op::Constant {
            shape,
            dtype,
            value,
        } => {
            assert!(shape.is_empty() && *dtype == DType::Fp32 && (*value - 1e-6).abs() < 1e-12)
        }
        o => panic!("eps is {o:?}"),
    }
    let json = r#"{"name":"ref","nodes":[
      {"name":"x","op":"Input","attrs":{"shape":[4,8],"dtype":"fp32"}},
      {"name":"gamma","op":"Weight","attrs":{"shape":[8],"dtype":"fp32"}},
      {"name":"w","op":"Weight","attrs":{"shape":[8,16],"dtype":"fp32"}},
      {"name":"eps","op":"Constant","attrs":{"shape":[],"dtype":"fp32","value":1e-6}},
      {"name":"sq","op":"Mul","inputs":["x","x"]},
      {"name":"ms","op":"ReduceMean","attrs":{"axis":-1},"inputs":["sq"]},
      {"name":"mse","op":"Add","inputs":["ms","eps"]},
      {"name":"rms","op":"Sqrt","inputs":["mse"]},
      {"name":"xn","op":"Div","inputs":["x","rms"]},
      {"name":"h","op":"Mul","inputs":["xn","gamma"]},
      {"name":"logits","op":"MatMul","inputs":["h","w"]},
      {"name":"p","op":"Softmax","attrs":{"axis":-1},"inputs":["logits"]}]}"#;
    let reference = Graph::from_json_str(json).unwrap().validate().unwrap();
    let got = imp.graph.validate().unwrap();
    assert_eq!(got.tensors.len(), reference.tensors.len());
    for t in &reference.tensors {
        let g = &got.tensors[got.tensor_id(&t.name).unwrap()];
        assert_eq!(
            (&g.shape, g.dtype),
            (&t.shape, t.dtype),
            "tensor {}",
            t.name
        );
    }
    let mut want: Vec<&str> = reference.nodes.iter().map(|n| n.op.name()).collect();
    let mut have: Vec<&str> = got.nodes.iter().map(|n| n.op.name()).collect();
    want.sort_unstable();
    have.sort_unstable();
    assert_eq!(have, want);
    // The JSON form of the import parses back.
    Graph::from_json_str(&imp.graph.to_json_string())
        .unwrap()
        .validate()
        .unwrap();
}

#[test]
fn mapped_ops_and_attributes() {
    let mut m = M::new(23);
    m.inputs.push(vi("x", FLOAT, &[2, 3, 8]));
    m.inits.push(init_f32("g", &[8], 1.0));
    m.inits.push(init_f32("b", &[8], 0.0));
    m.inits.push(init_i64("shape", &[0, -1]));
    m.inits.push(init_f32("three", &[1], 3.0));
    m.inits.push(TensorProto {
        dims: vec![],
        data_type: INT8,
        name: "zp".into(),
        int32_data: vec![-3],
        ..Default::default()
    });
    m.inits.push(init_f32("qs", &[], 0.25));
    m.nodes = vec![
        node(
            "LayerNormalization",
            &["x", "g"],
            &["ln"],
            vec![a_f("epsilon", 1e-3)],
        ),
        node("LayerNormalization", &["x", "g", "b"], &["ln2"], vec![]),
        node(
            "RMSNormalization",
            &["x", "g"],
            &["rms"],
            vec![a_i("axis", 2)],
        ),
        node("Gelu", &["ln"], &["ge"], vec![]),
        node("Gelu", &["ln2"], &["gt"], vec![a_s("approximate", "tanh")]),
        node("Constant", &[], &["two"], vec![a_f("value_float", 2.0)]),
        node("Pow", &["rms", "two"], &["p2"], vec![]),
        node("Pow", &["rms", "three"], &["p3"], vec![]),
        node("Identity", &["p2"], &["p2_alias"], vec![]),
        node("Max", &["ge", "gt", "p2_alias"], &["mx"], vec![]),
        node("Min", &["mx", "p3"], &["mn"], vec![]),
        node("Reshape", &["mn", "shape"], &["r"], vec![]),
        node("Transpose", &["r"], &["rt"], vec![]),
        node("Concat", &["rt", "rt"], &["cat"], vec![a_i("axis", 1)]),
        node(
            "ReduceSum",
            &["cat"],
            &["rs"],
            vec![a_ints("axes", &[0]), a_i("keepdims", 0)],
        ),
        node("ReduceMax", &["cat"], &["rmx"], vec![a_ints("axes", &[1])]),
        node("LogSoftmax", &["cat"], &["ls"], vec![]),
        node("Cast", &["ls"], &["half"], vec![a_i("to", 10)]),
        node("QuantizeLinear", &["ls", "qs", "zp"], &["q"], vec![]),
        node("DequantizeLinear", &["q", "qs", "zp"], &["dq"], vec![]),
        node("Exp", &["dq"], &["e"], vec![]),
        node("Neg", &["e"], &["ne"], vec![]),
        node("Relu", &["ne"], &["re"], vec![]),
        node("Tanh", &["re"], &["th"], vec![]),
        node("Sigmoid", &["th"], &["sg"], vec![]),
        node("Log", &["sg"], &["lg"], vec![]),
        node("Sub", &["lg", "sg"], &["sb"], vec![]),
    ];
    for o in ["sb", "rs", "rmx", "half", "p2_alias"] {
        m.outputs.push(ValueInfoProto {
            name: o.into(),
            r#type: None,
        });
    }
    let imp = m.import().unwrap();
    assert!(imp.opaque.is_empty(), "{:?}", imp.opaque);
    let op = |out: &str| {
        imp.graph
            .nodes
            .iter()
            .find(|n| n.output_names().iter().any(|o| o == out))
            .unwrap_or_else(|| panic!("no producer of {out}"))
            .op
            .clone()
    };
    assert_eq!(
        op("ln"),
        Op::LayerNorm {
            eps: 1e-3f32 as f64
        }
    );
    assert_eq!(op("ln2"), Op::LayerNorm { eps: 1e-5 });
    assert!(matches!(op("rms"), Op::RmsNorm { .. }));
    assert_eq!(op("p2"), Op::Pow { exponent: 2.0 });
    assert_eq!(op("p3"), Op::Pow { exponent: 3.0 });
    assert_eq!(op("mx"), Op::Binary { f: BinaryFn::Max });
    assert_eq!(op("r"), Op::Reshape { shape: vec![2, -1] });
    assert_eq!(op("rt"), Op::Transpose { perm: vec![1, 0] });
    assert_eq!(op("cat"), Op::Concat { axis: 1 });
    assert_eq!(
        op("rs"),
        Op::ReduceSum {
            axis: 0,
            keepdims: false
        }
    );
    assert_eq!(
        op("rmx"),
        Op::ReduceMax {
            axis: 1,
            keepdims: true
        }
    );
    assert_eq!(op("half"), Op::Cast { to: DType::Fp16 });
    assert_eq!(
        op("q"),
        Op::Quantize {
            scale: 0.25,
            zero_point: -3
        }
    );
    assert_eq!(
        op("dq"),
        Op::Dequantize {
            scale: 0.25,
            zero_point: -3,
            to: DType::Fp32
        }
    );
    assert_eq!(shape_of(&imp, "r"), vec![2, 24]);
    assert_eq!(shape_of(&imp, "cat"), vec![24, 4]);
    assert_eq!(shape_of(&imp, "rs"), vec![4]);
    // Exact GELU is computed exactly (x · ½ · (1 + erf(x/√2)) in IR nodes), the tanh form
    // is the IR's GELU; Identity is an alias (noted for the output).
    assert_eq!(op("ge"), Op::Binary { f: BinaryFn::Mul });
    assert!(imp
        .graph
        .nodes
        .iter()
        .any(|n| n.op == Op::Unary { f: UnaryFn::Erf }));
    assert_eq!(op("gt"), Op::Unary { f: UnaryFn::Gelu });
    assert!(
        imp.notes.iter().any(|n| n.contains("p2_alias")),
        "{:?}",
        imp.notes
    );
    assert!(imp.graph.outputs.contains(&"p2".to_string()));
    // No bias: a zero constant of the normalized width.
    assert!(imp.graph.nodes.iter().any(|n| matches!(
        &n.op,
        Op::Constant { shape, value, .. } if shape == &[8] && *value == 0.0
    )));
}

#[test]
fn unsupported_ops_are_opaque_and_listed() {
    let mut m = M::new(17);
    m.inputs.push(vi("x", FLOAT, &[4, 8]));
    // UINT16 (data type 4) has no IR dtype.
    m.inits.push(TensorProto {
        name: "idx".into(),
        dims: vec![2],
        data_type: 4,
        int32_data: vec![0, 2],
        ..Default::default()
    });
    m.nodes = vec![
        node("Acos", &["x"], &["e"], vec![]),
        node("Compress", &["e", "idx"], &["g"], vec![]),
        node("ReduceSum", &["g"], &["s"], vec![]),
        node("Softmax", &["g"], &["sm"], vec![a_i("axis", 0)]),
        node("Relu", &["sm"], &["r"], vec![]),
    ];
    m.value_info.push(vi("e", FLOAT, &[4, 8]));
    m.value_info.push(vi("g", FLOAT, &[2, 8]));
    m.value_info.push(vi("s", FLOAT, &[1, 1]));
    m.value_info.push(vi("sm", FLOAT, &[2, 8]));
    m.outputs.push(vi("r", FLOAT, &[2, 8]));
    m.outputs.push(vi("s", FLOAT, &[1, 1]));
    let imp = m.import().unwrap();
    let listed: Vec<(&str, &str)> = imp
        .opaque
        .iter()
        .map(|o| (o.name.as_str(), o.op_type.as_str()))
        .collect();
    assert_eq!(
        listed,
        vec![("n_e", "Acos"), ("n_g", "Compress"), ("n_sm", "Softmax")]
    );
    let why = |n: &str| {
        imp.opaque
            .iter()
            .find(|o| o.name == n)
            .unwrap()
            .reason
            .clone()
    };
    assert!(why("n_e").contains("no IR equivalent"));
    // The uint16 indices have no IR dtype: left out of the opaque node, and said so.
    assert!(
        why("n_g").contains("`idx`") && why("n_g").contains("UINT16"),
        "{}",
        why("n_g")
    );
    // ReduceSum over every axis is one node per axis now: [2, 8] → [1, 1] (keepdims).
    assert_eq!(shape_of(&imp, "s"), vec![1, 1]);
    assert!(
        why("n_sm").contains("IR rejects") && why("n_sm").contains("last axis"),
        "{}",
        why("n_sm")
    );
    let tg = imp.graph.validate().unwrap();
    let acos = tg.nodes.iter().find(|n| n.name == "n_e").unwrap();
    assert_eq!(
        acos.op,
        Op::Opaque {
            name: "Acos".into(),
            output_specs: vec![tensorforge_graph::TensorSpec {
                shape: vec![4, 8],
                dtype: DType::Fp32
            }]
        }
    );
    assert_eq!(shape_of(&imp, "r"), vec![2, 8]);

    // Without declared output shapes an opaque node is an error that says what to do.
    let mut m = M::new(17);
    m.inputs.push(vi("x", FLOAT, &[4]));
    m.nodes = vec![node("Acos", &["x"], &["e"], vec![])];
    m.outputs.push(ValueInfoProto {
        name: "e".into(),
        r#type: None,
    });
    let e = m.import().unwrap_err().to_string();
    assert!(
        e.contains("n_e")
            && e.contains("`Acos` x1")
            && e.contains("infer_shapes")
            && e.contains("test.onnx"),
        "{e}"
    );

    // A custom domain is opaque too.
    let mut m = M::new(17);
    m.inputs.push(vi("x", FLOAT, &[4]));
    let mut n = node("Relu", &["x"], &["y"], vec![]);
    n.domain = "com.example".into();
    m.nodes = vec![n];
    m.outputs.push(vi("y", FLOAT, &[4]));
    let imp = m.import().unwrap();
    assert_eq!(imp.opaque[0].op_type, "com.example::Relu");
}

#[test]
fn opset_11_softmax_uses_its_default_axis() {
    let mk = |dims: &[i64]| {
        let mut m = M::new(11);
        m.inputs.push(vi("x", FLOAT, dims));
        m.nodes = vec![node("Softmax", &["x"], &["y"], vec![])];
        m.outputs.push(vi("y", FLOAT, dims));
        m.import().unwrap()
    };
    // Rank 2: axis 1 is the last axis, the same as the IR's softmax.
    let imp = mk(&[3, 5]);
    assert!(imp.opaque.is_empty());
    assert!(matches!(imp.graph.nodes[1].op, Op::Softmax { axis: 1 }));
    // Rank 3: axis 1 flattens [5, 7]: not the IR op.
    let imp = mk(&[3, 5, 7]);
    assert_eq!(imp.opaque.len(), 1);
}

#[test]
fn external_data_is_refused() {
    let mut m = rmsnorm_chain();
    let w = m.inits.iter_mut().find(|t| t.name == "w").unwrap();
    w.raw_data.clear();
    w.data_location = 1;
    w.external_data.push(StringStringEntryProto {
        key: "location".into(),
        value: "weights.bin".into(),
    });
    let e = m.import().unwrap_err();
    assert!(matches!(e, GraphError::Onnx { .. }));
    let e = e.to_string();
    assert!(
        e.contains("`w`") && e.contains("external") && e.contains("weights.bin"),
        "{e}"
    );
}

#[test]
fn every_truncation_is_an_error_never_a_panic() {
    let bytes = rmsnorm_chain().bytes();
    assert!(import_onnx_bytes(&bytes, "full.onnx").is_ok());
    for len in 0..bytes.len() {
        let r = import_onnx_bytes(&bytes[..len], "cut.onnx");
        let e = r
            .expect_err(&format!("prefix of {len} bytes imported"))
            .to_string();
        assert!(e.contains("cut.onnx"), "{e}");
    }
    // Flipped bytes: any result, but no panic.
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0xa5;
        let _ = import_onnx_bytes(&b, "flip.onnx");
    }
}

#[test]
fn hostile_sizes_are_bounded() {
    // A huge input dim.
    let mut m = M::new(17);
    m.inputs.push(vi("x", FLOAT, &[1 << 30, 1 << 30, 1 << 30]));
    m.nodes = vec![node("Relu", &["x"], &["y"], vec![])];
    let e = m.import().unwrap_err().to_string();
    assert!(e.contains("`x`") && e.contains("exceed"), "{e}");
    // Dims whose product overflows u64, on an initializer.
    let mut m = M::new(17);
    m.inits.push(TensorProto {
        dims: vec![i64::MAX, i64::MAX],
        data_type: FLOAT,
        name: "w".into(),
        ..Default::default()
    });
    let e = m.import().unwrap_err().to_string();
    assert!(e.contains("`w`"), "{e}");
    // Rank 17.
    let mut m = M::new(17);
    m.inputs.push(vi("x", FLOAT, &[1; 17]));
    assert!(m.import().unwrap_err().to_string().contains("rank"));
    // Negative dim.
    let mut m = M::new(17);
    m.inputs.push(vi("x", FLOAT, &[-4]));
    assert!(m.import().unwrap_err().to_string().contains("negative"));
    // More than MAX_NODES nodes: refused by the pre-pass before decoding. Each node has a
    // 60-byte name (64 bytes on the wire), so the file (64 MB) is large enough that the
    // decoded-size limit (32 × the file) does not trip first.
    let n = MAX_NODES as usize + 1;
    let mut graph = Vec::with_capacity(64 * n);
    for _ in 0..n {
        graph.extend_from_slice(&[0x0a, 62, 0x0a, 60]);
        graph.extend_from_slice(&[b'n'; 60]);
    }
    let mut bytes = vec![0x3a];
    let mut len = graph.len() as u64;
    while len >= 0x80 {
        bytes.push((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    bytes.push(len as u8);
    bytes.extend_from_slice(&graph);
    let e = import_onnx_bytes(&bytes, "many.onnx")
        .unwrap_err()
        .to_string();
    assert!(e.contains("1000000 nodes"), "{e}");
    // Tiny messages that would decode into far more memory than the file: millions of
    // empty initializers (2 bytes each on the wire, a whole TensorProto in memory).
    let per = std::mem::size_of::<TensorProto>() as u64;
    let n = (tensorforge_graph::onnx::MAX_DECODED_BYTES / per + 1) as usize;
    let mut graph = Vec::with_capacity(2 * n);
    for _ in 0..n {
        graph.extend_from_slice(&[0x2a, 0x00]);
    }
    let mut bytes = vec![0x3a];
    let mut len = graph.len() as u64;
    while len >= 0x80 {
        bytes.push((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    bytes.push(len as u8);
    bytes.extend_from_slice(&graph);
    drop(graph);
    let e = import_onnx_bytes(&bytes, "expand.onnx")
        .unwrap_err()
        .to_string();
    assert!(e.contains("bytes of memory"), "{e}");
    // A name over the limit.
    let mut m = M::new(17);
    m.inputs.push(vi(&"x".repeat(5000), FLOAT, &[1]));
    assert!(m.import().unwrap_err().to_string().contains("bytes long"));
    // A raw_data length that does not match the dims of a scalar read as a value.
    let mut m = rmsnorm_chain();
    m.inits
        .iter_mut()
        .find(|t| t.name == "axes")
        .unwrap()
        .int64_data = vec![-1, 0];
    m.value_info.push(vi("ms", FLOAT, &[4, 1]));
    let e = m.import().unwrap_err().to_string();
    assert!(
        e.contains("`axes`") && e.contains("holds 2 values") && e.contains("test.onnx"),
        "{e}"
    );
}

#[test]
fn symbolic_dims_and_missing_opset_are_named_errors() {
    let mut m = rmsnorm_chain();
    let x = &mut m.inputs[0];
    if let Some(TypeValue::TensorType(t)) = x.r#type.as_mut().and_then(|t| t.value.as_mut()) {
        t.shape.as_mut().unwrap().dim[0].value = Some(dimension::Value::DimParam("batch".into()));
    }
    let e = m.import().unwrap_err().to_string();
    assert!(
        e.contains("`x`") && e.contains("dim 0") && e.contains("`batch`"),
        "{e}"
    );

    let mut model = rmsnorm_chain().model();
    model.opset_import.clear();
    let e = import_onnx_bytes(&model.encode_to_vec(), "o.onnx")
        .unwrap_err()
        .to_string();
    assert!(e.contains("opset"), "{e}");

    // An input of a dtype the IR lacks (STRING, data type 8).
    let mut m = M::new(17);
    m.inputs.push(vi("ids", 8, &[4]));
    let e = m.import().unwrap_err().to_string();
    assert!(e.contains("`ids`") && e.contains("STRING"), "{e}");

    // Nodes out of topological order.
    let mut m = rmsnorm_chain();
    m.nodes.swap(0, 1);
    let e = m.import().unwrap_err().to_string();
    assert!(e.contains("`sq`") && e.contains("topological"), "{e}");
}

/// Written by tools/make_onnx_fixtures.py with the `onnx` Python package: real ONNX bytes
/// (proto2 unpacked dims, float_data and raw_data initializers, shape-inferred value_info).
#[test]
fn python_onnx_fixture_imports() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/graphs/tiny_mlp.onnx"
    );
    let imp = import_onnx_file(path).unwrap();
    assert!(
        imp.producer.starts_with("make_onnx_fixtures"),
        "{}",
        imp.producer
    );
    let ops: Vec<(&str, &str)> = imp
        .opaque
        .iter()
        .map(|o| (o.name.as_str(), o.op_type.as_str()))
        .collect();
    // Erf has a CPU implementation now: nothing is opaque.
    assert!(ops.is_empty(), "{ops:?}");
    assert!(imp
        .graph
        .nodes
        .iter()
        .any(|n| n.op == Op::Unary { f: UnaryFn::Erf }));
    let tg = imp.graph.validate().unwrap();
    let y = &tg.tensors[tg.outputs[0]];
    assert_eq!(
        (y.name.as_str(), y.shape.as_slice()),
        ("y", &[2usize, 4][..])
    );
    assert!(tg.nodes.iter().any(|n| n.op
        == Op::Weight {
            shape: vec![8, 4],
            dtype: DType::Fp32
        }));
    assert!(tg.nodes.iter().any(|n| matches!(
        n.op,
        Op::ReduceMean {
            axis: -1,
            keepdims: true
        }
    )));
    // A missing file is a named error.
    let e = import_onnx_file("/nonexistent/x.onnx")
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/x.onnx"), "{e}");
}

#[test]
fn exact_gelu_and_squeeze_unsqueeze_run() {
    use std::collections::HashMap;
    use tensorforge_graph::exec::execute;
    use tensorforge_graph::fusion::compile;
    let mut m = M::new(20);
    m.inputs.push(vi("x", FLOAT, &[2]));
    m.inits.push(init_i64("ax0", &[0]));
    m.nodes = vec![
        node("Gelu", &["x"], &["g"], vec![]),
        node("Unsqueeze", &["g", "ax0"], &["u"], vec![]),
        node("Squeeze", &["u", "ax0"], &["s"], vec![]),
    ];
    m.outputs.push(vi("u", FLOAT, &[1, 2]));
    m.outputs.push(vi("s", FLOAT, &[2]));
    let imp = m.import().unwrap();
    assert!(imp.opaque.is_empty(), "{:?}", imp.opaque);
    assert_eq!(shape_of(&imp, "u"), vec![1, 2]);
    assert_eq!(shape_of(&imp, "s"), vec![2]);
    let c = compile(&imp.graph).unwrap();
    // The importer's five-node lowering of exact GELU becomes one op before fusion.
    assert!(c.fused.graph.nodes.iter().any(|n| n.op
        == Op::Unary {
            f: UnaryFn::GeluErf
        }));
    let mut ins = HashMap::new();
    ins.insert("x".to_string(), vec![1.0f32, -1.0]);
    // GELU(1) = ½(1 + erf(1/√2)) = 0.8413447460685429; GELU(−1) = −0.15865525393145707
    // (scipy: 0.5 * (1 + erf(±1 / sqrt(2))) · ±1).
    for p in [&c.unfused, &c.fused] {
        let r = execute(p, &ins).unwrap();
        let s = &r.outputs.iter().find(|o| o.0 == "s").unwrap().2;
        assert!(
            (f64::from(s[0]) - 0.841_344_746_068_542_9).abs() < 1e-6,
            "{s:?}"
        );
        assert!(
            (f64::from(s[1]) + 0.158_655_253_931_457_07).abs() < 1e-6,
            "{s:?}"
        );
    }
}

#[test]
fn reductions_over_several_axes_run() {
    use std::collections::HashMap;
    use tensorforge_graph::exec::execute;
    use tensorforge_graph::fusion::compile;
    let mut m = M::new(18);
    m.inputs.push(vi("x", FLOAT, &[2, 3, 2]));
    m.inits.push(init_i64("axes", &[0, -1]));
    m.nodes = vec![node(
        "ReduceMean",
        &["x", "axes"],
        &["m"],
        vec![a_i("keepdims", 0)],
    )];
    m.outputs.push(vi("m", FLOAT, &[3]));
    let imp = m.import().unwrap();
    assert!(imp.opaque.is_empty(), "{:?}", imp.opaque);
    let c = compile(&imp.graph).unwrap();
    let mut ins = HashMap::new();
    ins.insert(
        "x".to_string(),
        (0..12).map(|v| v as f32).collect::<Vec<_>>(),
    );
    // x[i, j, k] = 6i + 2j + k; the mean over i, k ∈ {0, 1} is 3 + 2j + 0.5 = [3.5, 5.5, 7.5].
    for p in [&c.unfused, &c.fused] {
        let r = execute(p, &ins).unwrap();
        assert_eq!(r.outputs[0].1, vec![3]);
        assert_eq!(r.outputs[0].2, vec![3.5, 5.5, 7.5]);
    }
}

#[test]
fn average_pool_with_and_without_padding_in_the_count() {
    use std::collections::HashMap;
    use tensorforge_graph::exec::execute;
    use tensorforge_graph::fusion::compile;
    for (include, want) in [
        // x = [[1, 2], [3, 4]], 2×2 windows, stride 1, pad 1 → 3×3 outputs. Without padding
        // in the count: the mean of the window's inputs, e.g. top-left {1} = 1, top-middle
        // {1, 2} = 1.5, centre {1, 2, 3, 4} = 2.5.
        (0, [1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0]),
        // With it: the window sum over 4, e.g. top-left 1/4, top-middle 3/4.
        (1, [0.25, 0.75, 0.5, 1.0, 2.5, 1.5, 0.75, 1.75, 1.0]),
    ] {
        let mut m = M::new(18);
        m.inputs.push(vi("x", FLOAT, &[1, 1, 2, 2]));
        m.nodes = vec![node(
            "AveragePool",
            &["x"],
            &["y"],
            vec![
                a_ints("kernel_shape", &[2, 2]),
                a_ints("pads", &[1, 1, 1, 1]),
                a_i("count_include_pad", include),
            ],
        )];
        m.outputs.push(vi("y", FLOAT, &[1, 1, 3, 3]));
        let imp = m.import().unwrap();
        assert!(imp.opaque.is_empty(), "{:?}", imp.opaque);
        let c = compile(&imp.graph).unwrap();
        let mut ins = HashMap::new();
        ins.insert("x".to_string(), vec![1.0f32, 2.0, 3.0, 4.0]);
        let r = execute(&c.fused, &ins).unwrap();
        assert_eq!(
            r.outputs[0].2,
            want.to_vec(),
            "count_include_pad = {include}"
        );
    }
}

/// A fresh folder under the system temp dir.
fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tf_onnx_ext_{tag}_{}_{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `w` [8, 16] of rmsnorm_chain moved to an external file: `location`, `offset`, `length`.
fn external_w(loc: &str, offset: Option<u64>, length: Option<u64>) -> M {
    let mut m = rmsnorm_chain();
    let w = m.inits.iter_mut().find(|t| t.name == "w").unwrap();
    w.raw_data.clear();
    w.data_location = 1;
    w.external_data.push(StringStringEntryProto {
        key: "location".into(),
        value: loc.into(),
    });
    for (k, v) in [("offset", offset), ("length", length)] {
        if let Some(v) = v {
            w.external_data.push(StringStringEntryProto {
                key: k.into(),
                value: v.to_string(),
            });
        }
    }
    m
}

#[test]
fn external_data_is_read_from_the_models_folder() {
    let d = temp_dir("ok");
    // 16 bytes of padding, then the 8·16 fp32 values 0.5 (512 bytes), as the inline model.
    let mut data = vec![0xAAu8; 16];
    data.extend((0..128).flat_map(|_| 0.5f32.to_le_bytes()));
    std::fs::write(d.join("weights.bin"), &data).unwrap();
    std::fs::write(
        d.join("model.onnx"),
        external_w("weights.bin", Some(16), Some(512)).bytes(),
    )
    .unwrap();
    let ext = import_onnx_file(d.join("model.onnx")).unwrap();
    let inline = rmsnorm_chain().import().unwrap();
    assert_eq!(ext.weights["w"], inline.weights["w"]);
    assert_eq!(ext.weights["w"].len(), 128);
    // From bytes there is no folder: refused with the tensor and location named.
    let e = external_w("weights.bin", Some(16), Some(512))
        .import()
        .unwrap_err()
        .to_string();
    assert!(e.contains("`w`") && e.contains("weights.bin"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn external_data_that_escapes_or_overruns_is_refused() {
    let d = temp_dir("bad");
    let outside = temp_dir("outside");
    std::fs::write(outside.join("secret.bin"), vec![0u8; 512]).unwrap();
    std::fs::write(d.join("short.bin"), vec![0u8; 100]).unwrap();
    std::fs::write(d.join("ok.bin"), vec![0u8; 512]).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(outside.join("secret.bin"), d.join("link.bin")).unwrap();
    let abs = outside.join("secret.bin").display().to_string();
    let cases: Vec<(M, &str)> = vec![
        (external_w("../secret.bin", None, None), "no `..`"),
        (external_w(&abs, None, None), "no absolute path"),
        (external_w("missing.bin", None, None), "missing.bin"),
        // 512 bytes needed, the file has 100.
        (external_w("short.bin", None, None), "runs past the end"),
        (
            external_w("ok.bin", Some(1), Some(512)),
            "runs past the end",
        ),
        (
            external_w("ok.bin", Some(u64::MAX), None),
            "runs past the end",
        ),
        // A length that disagrees with the dims [8, 16] of fp32 (512 bytes).
        (external_w("ok.bin", None, Some(400)), "need 512"),
        (external_w("ok.bin", Some(7), Some(0)), "need 512"),
        (external_w("ok.bin", Some(0), None), ""),
    ];
    for (i, (m, want)) in cases.into_iter().enumerate() {
        let p = d.join(format!("m{i}.onnx"));
        std::fs::write(&p, m.bytes()).unwrap();
        let r = import_onnx_file(&p);
        if want.is_empty() {
            assert!(r.is_ok(), "case {i}: {r:?}");
            continue;
        }
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains(want) && e.contains("`w`") && e.contains(&format!("m{i}.onnx")),
            "case {i}: {e}"
        );
        assert!(!e.contains('\n'), "case {i}: one line: {e}");
    }
    #[cfg(unix)]
    {
        let p = d.join("link.onnx");
        std::fs::write(&p, external_w("link.bin", None, None).bytes()).unwrap();
        let e = import_onnx_file(&p).unwrap_err().to_string();
        assert!(e.contains("outside the model's folder"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&outside);
}

#[test]
fn decoded_memory_is_proportional_to_the_file() {
    // One node with 1 000 000 empty attributes: 2 bytes each on the wire (tag 0x2a, length
    // 0), a whole AttributeProto each in memory. The file is ~2 MB; the decoded limit is
    // 32 × 2 MB + 64 MiB ≈ 131 MB, and 10^6 attributes × 2 × size_of::<AttributeProto>()
    // (> 100 bytes) exceed it, so the pre-pass refuses before prost allocates.
    let mut node = b"\x0a\x01x\x12\x01y\x22\x04Relu".to_vec();
    for _ in 0..1_000_000 {
        node.extend_from_slice(b"\x2a\x00");
    }
    fn varint(mut v: usize, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    let mut graph = vec![0x0a];
    varint(node.len(), &mut graph);
    graph.extend_from_slice(&node);
    let mut model = b"\x08\x08\x3a".to_vec();
    varint(graph.len(), &mut model);
    model.extend_from_slice(&graph);
    model.extend_from_slice(b"\x42\x02\x10\x12");
    let e = import_onnx_bytes(&model, "amp.onnx")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("amp.onnx") && e.contains("bytes of memory"),
        "{e}"
    );
    assert!(std::mem::size_of::<AttributeProto>() > 100);
}

#[test]
fn nested_if_branches_are_bounded_not_a_stack_overflow() {
    // 40 Ifs each holding the next in its then_branch: 3 message levels per If (attribute,
    // graph, node) = 120 levels, over the pre-pass's 96; refused before prost decodes.
    let leaf = GraphProto {
        node: vec![node("Identity", &["x"], &["o"], vec![])],
        name: "leaf".into(),
        output: vec![vi("o", FLOAT, &[2])],
        ..Default::default()
    };
    let mut g = leaf.clone();
    for k in 0..40 {
        let mut n = node("If", &["c"], &["o"], vec![]);
        // Only the then branch nests (both would double the file at every level).
        for (name, sub) in [("then_branch", g.clone()), ("else_branch", leaf.clone())] {
            n.attribute.push(AttributeProto {
                name: name.into(),
                r#type: 5,
                g: Some(Box::new(sub)),
                ..Default::default()
            });
        }
        g = GraphProto {
            node: vec![n],
            name: format!("level{k}"),
            output: vec![vi("o", FLOAT, &[2])],
            ..Default::default()
        };
    }
    let mut m = M::new(17);
    m.inputs.push(vi("x", FLOAT, &[2]));
    m.inits.push(TensorProto {
        name: "c".into(),
        data_type: 9,
        int32_data: vec![1],
        ..Default::default()
    });
    m.nodes = g.node;
    m.outputs.push(vi("o", FLOAT, &[2]));
    let e = m.import().unwrap_err().to_string();
    assert!(e.contains("nest more than 96"), "{e}");

    // Two levels import, the constant condition choosing the then branch each time.
    let inner = GraphProto {
        node: vec![node("Neg", &["x"], &["t"], vec![])],
        name: "t".into(),
        output: vec![vi("t", FLOAT, &[2])],
        ..Default::default()
    };
    let branch = |g: &GraphProto, k: &str| AttributeProto {
        name: k.into(),
        r#type: 5,
        g: Some(Box::new(g.clone())),
        ..Default::default()
    };
    let mut mid_if = node("If", &["c"], &["m"], vec![]);
    mid_if.attribute = vec![branch(&inner, "then_branch"), branch(&inner, "else_branch")];
    let mid = GraphProto {
        node: vec![mid_if],
        name: "mid".into(),
        output: vec![vi("m", FLOAT, &[2])],
        ..Default::default()
    };
    let mut m = M::new(17);
    m.inputs.push(vi("x", FLOAT, &[2]));
    m.inits.push(TensorProto {
        name: "c".into(),
        dims: vec![],
        data_type: 9,
        int32_data: vec![1],
        ..Default::default()
    });
    let mut top = node("If", &["c"], &["y"], vec![]);
    top.attribute = vec![branch(&mid, "then_branch"), branch(&mid, "else_branch")];
    m.nodes = vec![top];
    m.outputs.push(vi("y", FLOAT, &[2]));
    let imp = m.import().unwrap();
    assert!(imp.opaque.is_empty(), "{:?}", imp.opaque);
    let ops: Vec<&str> = imp.graph.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(ops, ["Input", "Neg", "Reshape", "Reshape"], "{ops:?}");
}

#[test]
fn hostile_parameters_of_the_new_ops_are_errors_or_opaque_never_panics() {
    // Sizes from the file multiply: Tile by 2^40 x 2^40, Pad by 2^62, CumSum on axis 9,
    // GatherND tuples longer than the rank, Einsum with a diagonal, ScatterND out of range,
    // LSTM with no hidden_size, Trilu of a vector, Clip with a tensor bound.
    let cases: Vec<(&str, Vec<NodeProto>, Vec<TensorProto>)> = vec![
        (
            "tile",
            vec![node("Tile", &["x", "r"], &["y"], vec![])],
            vec![init_i64("r", &[1 << 40, 1 << 40])],
        ),
        (
            "pad",
            vec![node("Pad", &["x", "p"], &["y"], vec![])],
            vec![init_i64("p", &[1 << 62, 0, 1 << 62, 0])],
        ),
        (
            "pad_reflect_too_far",
            vec![node(
                "Pad",
                &["x", "p"],
                &["y"],
                vec![a_s("mode", "reflect")],
            )],
            vec![init_i64("p", &[0, 9, 0, 0])],
        ),
        (
            "cumsum",
            vec![node("CumSum", &["x", "a"], &["y"], vec![])],
            vec![init_i64("a", &[9])],
        ),
        (
            "gathernd",
            vec![node("GatherND", &["x", "i"], &["y"], vec![])],
            vec![init_i64("i", &[0, 0, 0])],
        ),
        (
            "scatternd",
            vec![node("ScatterND", &["x", "i", "x"], &["y"], vec![])],
            vec![init_i64("i", &[7])],
        ),
        (
            "einsum",
            vec![node(
                "Einsum",
                &["x"],
                &["y"],
                vec![a_s("equation", "ii->i")],
            )],
            vec![],
        ),
        (
            "lstm",
            vec![node("LSTM", &["x", "x", "x"], &["y"], vec![])],
            vec![],
        ),
        (
            "trilu",
            vec![
                node("ReduceSum", &["x"], &["v"], vec![a_i("keepdims", 0)]),
                node("Trilu", &["v"], &["y"], vec![]),
            ],
            vec![],
        ),
        (
            "clip",
            vec![node("Clip", &["x", "x"], &["y"], vec![])],
            vec![],
        ),
    ];
    for (case, nodes, inits) in cases {
        let mut m = M::new(18);
        m.inputs.push(vi("x", FLOAT, &[2, 3]));
        m.inits = inits;
        m.nodes = nodes;
        m.value_info.push(vi("v", FLOAT, &[]));
        m.outputs.push(vi("y", FLOAT, &[2, 3]));
        match m.import() {
            Ok(imp) => {
                let e = imp.require_runnable("t.onnx").unwrap_err().to_string();
                assert!(e.contains("cannot run"), "{case}: {e}");
            }
            Err(e) => assert!(e.to_string().contains("test.onnx"), "{case}: {e}"),
        }
    }
}
