#!/usr/bin/env python3
"""Write a fan-out ONNX model for the large-graph timing in docs/reliability.md: N `Relu`
nodes all reading one input x [4], every 1000th output a graph output.

    /tmp/onnxvenv/bin/python tools/make_fanout_onnx.py 300000 /tmp/fan.onnx
    /usr/bin/time -f "%e s %M KB" target/release/tensorforge fuse /tmp/fan.onnx > /dev/null
"""
import sys

import onnx
from onnx import TensorProto, helper

n, path = int(sys.argv[1]), sys.argv[2]
nodes = [helper.make_node("Relu", ["x"], [f"t{i}"], name=f"r{i}") for i in range(n)]
outs = [helper.make_tensor_value_info(f"t{i}", TensorProto.FLOAT, [4]) for i in range(0, n, 1000)]
g = helper.make_graph(nodes, "fan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])], outs)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
