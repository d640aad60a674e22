#!/usr/bin/env python3
"""Write the ONNX fixture(s) used by crates/graph/tests/onnx_import.rs.

Needs the `onnx` Python package (pip install onnx). The output is checked in, so the Rust
tests do not need Python; rerun this only to regenerate:

    python3 tools/make_onnx_fixtures.py

examples/graphs/tiny_mlp.onnx: RMSNorm written in primitive ops (ReduceMean with its axes
as an input, opset 18), an unsupported op (Erf, imported as opaque), a MatMul with a raw_data
weight and a ReLU. Initializers use both float_data and raw_data; value_info comes from ONNX
shape inference, so the opaque node's output shape is declared.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "examples", "graphs")


def tiny_mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    inits = [
        helper.make_tensor("gamma", TensorProto.FLOAT, [8], [1.0] * 8),  # float_data
        numpy_helper.from_array(w, "w"),  # raw_data
        helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-6]),
        helper.make_tensor("axes", TensorProto.INT64, [1], [-1]),
    ]
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"], name="sq"),
        helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], name="ms", keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["mse"], name="mse"),
        helper.make_node("Sqrt", ["mse"], ["rms"], name="rms"),
        helper.make_node("Div", ["x", "rms"], ["xn"], name="xn"),
        helper.make_node("Mul", ["xn", "gamma"], ["h"], name="h"),
        helper.make_node("Erf", ["h"], ["erf_out"], name="erf"),
        helper.make_node("MatMul", ["erf_out", "w"], ["z"], name="z"),
        helper.make_node("Relu", ["z"], ["y"], name="y"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        producer_name="make_onnx_fixtures",
        producer_version="1",
        opset_imports=[helper.make_opsetid("", 18)],
    )
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "tiny_mlp.onnx")
    onnx.save_model(tiny_mlp(), path)
    print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
