#!/usr/bin/env python3
"""One-convolution ONNX graphs at the layer shapes of MobileNetV2 and EfficientNet, for
timing one convolution kernel against onnxruntime's node (`tensorforge run DIR/model.onnx
--inputs DIR/inputs --profile` beside `python tools/ort_profile.py DIR`). Each folder holds
model.onnx (a Conv with bias, random weights) and inputs/x.npy (batch 1).

Depthwise: dw_C_H[_sS][_kK] = C channels of H x H, stride S (default 1), K x K filter
(default 3), padding K // 2. Pointwise: pw_C_K_H = a 1 x 1 convolution from C to K channels
on H x H. Dense: conv_C_K_H_sS_kK = a K x K convolution from C to K channels on H x H,
stride S, padding K // 2 (MobileNetV2's and EfficientNet's stem) or none where K = S (ConvNeXt's
patch convolutions). Chains: chain_C_E_H_sS = MobileNetV2's
expansion and depthwise convolution, a 1 x 1 convolution from C to E channels on H x H, ReLU6,
a 3 x 3 depthwise convolution of stride S, ReLU6 (what `FusionRule::ConvChain` fuses).

Usage (onnx and numpy installed):
    python tools/make_conv_graphs.py OUT
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEPTHWISE = [  # (channels, size, stride, kernel)
    (960, 7, 1, 3), (576, 14, 1, 3), (384, 14, 1, 3), (192, 28, 2, 3), (144, 56, 1, 3),
    (192, 56, 1, 3), (96, 112, 2, 3), (32, 112, 1, 3), (240, 28, 1, 5), (96, 56, 1, 7),
]
POINTWISE = [  # (in channels, out channels, size)
    (960, 320, 7), (160, 960, 7), (96, 576, 14), (576, 96, 14), (112, 1280, 1),
    (112, 1280, 2), (64, 384, 4), (16, 96, 112),
]
DENSE = [  # (in channels, out channels, size, stride, kernel); padding K // 2 unless K = S
    (3, 32, 224, 2, 3),
    # ConvNeXt's patch convolutions (kernel = stride, no padding): its stem, its downsamplers.
    (3, 48, 224, 4, 4), (48, 96, 56, 2, 2), (96, 192, 28, 2, 2), (192, 384, 14, 2, 2),
]
CHAIN = [  # (in channels, expanded channels, size, depthwise stride)
    (16, 96, 112, 2), (24, 144, 56, 1), (24, 144, 56, 2), (32, 192, 28, 1), (64, 384, 14, 1),
    (96, 576, 14, 1), (160, 960, 7, 1),
]


def save_chain(out, name, c, e, h, stride, rng):
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    w1 = (rng.standard_normal((e, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b1 = rng.standard_normal(e).astype(np.float32)
    w2 = (rng.standard_normal((e, 1, 3, 3)) / 3.0).astype(np.float32)
    b2 = rng.standard_normal(e).astype(np.float32)
    lo, hi = np.array(0.0, np.float32), np.array(6.0, np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["t"], kernel_shape=[1, 1]),
        helper.make_node("Clip", ["t", "lo", "hi"], ["u"]),
        helper.make_node("Conv", ["u", "w2", "b2"], ["v"], group=e, kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], strides=[stride, stride]),
        helper.make_node("Clip", ["v", "lo", "hi"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (lo, "lo"), (hi, "hi")]]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, os.path.join(d, "model.onnx"))
    np.save(os.path.join(d, "inputs", "x.npy"), rng.standard_normal((1, c, h, h)).astype(np.float32))


def save(out, name, c, k, h, group, kernel, stride, rng):
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    fan_in = (c // group) * kernel * kernel
    w = (rng.standard_normal((k, c // group, kernel, kernel)) / np.sqrt(fan_in)).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group,
                            kernel_shape=[kernel, kernel],
                            pads=[0 if kernel == stride else kernel // 2] * 4,
                            strides=[stride, stride])
    graph = helper.make_graph(
        [node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, os.path.join(d, "model.onnx"))
    np.save(os.path.join(d, "inputs", "x.npy"), rng.standard_normal((1, c, h, h)).astype(np.float32))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    rng = np.random.default_rng(0)
    for c, h, s, k in DEPTHWISE:
        name = f"dw_{c}_{h}" + (f"_s{s}" if s != 1 else "") + (f"_k{k}" if k != 3 else "")
        save(out, name, c, c, h, c, k, s, rng)
    for c, k, h in POINTWISE:
        save(out, f"pw_{c}_{k}_{h}", c, k, h, 1, 1, 1, rng)
    for c, k, h, s, kk in DENSE:
        save(out, f"conv_{c}_{k}_{h}_s{s}_k{kk}", c, k, h, 1, kk, s, rng)
    for c, e, h, s in CHAIN:
        save_chain(out, f"chain_{c}_{e}_{h}_s{s}", c, e, h, s, rng)
    print(f"{len(DEPTHWISE) + len(POINTWISE) + len(DENSE) + len(CHAIN)} graphs under {out}")


if __name__ == "__main__":
    main()
