#!/usr/bin/env python3
"""One-convolution ONNX graphs at the layer shapes of MobileNetV2 and EfficientNet, for
timing one convolution kernel against onnxruntime's node (`tensorforge run DIR/model.onnx
--inputs DIR/inputs --profile` beside `python tools/ort_profile.py DIR`). Each folder holds
model.onnx (a Conv with bias, random weights) and inputs/x.npy (batch 1).

Depthwise: dw_C_H[_sS][_kK] = C channels of H x H, stride S (default 1), K x K filter
(default 3), padding K // 2. Pointwise: pw_C_K_H = a 1 x 1 convolution from C to K channels
on H x H. Dense: conv_C_K_H_sS_kK = a K x K convolution from C to K channels on H x H,
stride S (MobileNetV2's and EfficientNet's stem).

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
DENSE = [  # (in channels, out channels, size, stride, kernel)
    (3, 32, 224, 2, 3),
]


def save(out, name, c, k, h, group, kernel, stride, rng):
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    fan_in = (c // group) * kernel * kernel
    w = (rng.standard_normal((k, c // group, kernel, kernel)) / np.sqrt(fan_in)).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group,
                            kernel_shape=[kernel, kernel], pads=[kernel // 2] * 4,
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
    print(f"{len(DEPTHWISE) + len(POINTWISE) + len(DENSE)} graphs under {out}")


if __name__ == "__main__":
    main()
