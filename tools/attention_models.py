#!/usr/bin/env python3
"""One causal attention block per sequence length, as ONNX files with inputs, for
tools/ort_compare.py (docs/performance.md, "Attention without the score matrix").

Each folder OUT/attn_s{S} holds model.onnx and inputs/{q,k,v,mask}.npy: q, k, v of shape
[1, HEADS, S, 64] (uniform in [-1, 1], seeded), mask [1, 1, S, S] with 0 on and below the
diagonal and -inf above, and the graph
    y = MatMul(Softmax(MatMul(q, Transpose(k)) * 0.125 + mask, axis=-1), v)
which is what torch.onnx writes for a masked scaled_dot_product_attention (less the NaN
guard). TensorForge streams it as one FusedAttention kernel from 512 x 512 scores per head;
onnxruntime runs the two MatMuls and the Softmax with the scores in memory.

Usage: python tools/attention_models.py OUT [S ...]   (default S: 256 512 1024 2048 4096)
Needs numpy and onnx.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

HEADS = 4
DIM = 64


def model(s):
    shape = [1, HEADS, s, DIM]
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("q", "k", "v")
    ]
    inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, s, s]))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, HEADS, s, DIM])
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [], [0.125])
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    g = helper.make_graph(nodes, f"attn_s{s}", inputs, [out], initializer=[scale])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    sizes = [int(a) for a in sys.argv[2:]] or [256, 512, 1024, 2048, 4096]
    rng = np.random.default_rng(7)
    for s in sizes:
        d = os.path.join(out, f"attn_s{s}")
        os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
        onnx.save(model(s), os.path.join(d, "model.onnx"))
        for n in ("q", "k", "v"):
            x = rng.uniform(-1, 1, (1, HEADS, s, DIM)).astype(np.float32)
            np.save(os.path.join(d, "inputs", f"{n}.npy"), x)
        mask = np.triu(np.full((s, s), -np.inf, dtype=np.float32), k=1)[None, None]
        np.save(os.path.join(d, "inputs", "mask.npy"), mask)
        print(d)


if __name__ == "__main__":
    main()
