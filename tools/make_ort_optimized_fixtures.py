#!/usr/bin/env python3
"""Fixtures of the attention family: onnxruntime's transformer optimizer
(`onnxruntime.transformers.optimizer.optimize_model`, opt_level 1) run over the BERT and
GPT-2 TorchScript exports in examples/onnx, giving com.microsoft Attention,
EmbedLayerNormalization, SkipLayerNormalization, BiasGelu and FastGelu nodes. Writes
OUT/<name>_ort_optimized/{model.onnx, inputs/, expected/, meta.json} with onnxruntime's
outputs of the optimized model. Usage (versions: tools/real_onnx_requirements.txt):

    python tools/make_ort_optimized_fixtures.py examples/onnx
"""

import collections
import json
import os
import shutil
import sys

import numpy as np
import onnxruntime as ort
from onnxruntime.transformers import optimizer


def main():
    root = sys.argv[1]
    for src, kind in [("bert_eager_ts", "bert"), ("gpt2_eager_ts", "gpt2")]:
        d = os.path.join(root, f"{kind}_ort_optimized")
        os.makedirs(os.path.join(d, "expected"), exist_ok=True)
        m = optimizer.optimize_model(os.path.join(root, src, "model.onnx"), model_type=kind,
                                     num_heads=4, hidden_size=64, opt_level=1)
        path = os.path.join(d, "model.onnx")
        m.save_model_to_file(path)
        shutil.copytree(os.path.join(root, src, "inputs"), os.path.join(d, "inputs"),
                        dirs_exist_ok=True)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        feed = {i.name: np.load(os.path.join(d, "inputs", f"{i.name}.npy"))
                for i in sess.get_inputs()}
        for o, v in zip(sess.get_outputs(), sess.run(None, feed)):
            np.save(os.path.join(d, "expected", f"{o.name}.npy"), v)
        ops = collections.Counter(
            (n.domain + "::" if n.domain else "") + n.op_type for n in m.model.graph.node)
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump({"model": kind, "exporter": "torchscript + onnxruntime optimizer",
                       "opset": 17, "attention": "eager", "source": src,
                       "torch_vs_onnxruntime_max_abs": None, "ops": sorted(ops),
                       "versions": {"onnxruntime": ort.__version__}}, f, indent=1)
        print(d, dict(ops))


if __name__ == "__main__":
    main()
