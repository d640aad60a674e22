#!/usr/bin/env python3
"""Write the ONNX fixtures: examples/graphs/tiny_mlp.onnx and the real models in examples/onnx/.

Needs the packages pinned in tools/onnx_fixtures_requirements.txt (onnx, onnxruntime, numpy).
The output is checked in, so the Rust tests and CI do not need Python; rerun this only to
regenerate:

    python3 -m venv /tmp/onnxvenv
    /tmp/onnxvenv/bin/pip install -r tools/onnx_fixtures_requirements.txt
    /tmp/onnxvenv/bin/python tools/make_onnx_fixtures.py

examples/graphs/tiny_mlp.onnx (used by crates/graph/tests/onnx_import.rs): RMSNorm written in
primitive ops (ReduceMean with its axes as an input, opset 18), Erf, a MatMul with a raw_data
weight and a ReLU. Initializers use both float_data and raw_data; value_info comes from ONNX
shape inference, so every intermediate shape is declared.

examples/onnx/<name>/ holds, for each fixture (tiny_mlp, mlp_gelu_erf, bert_block, llama_block,
convnet, gpt_embed, qdq_mlp; see examples/onnx/README.md):
    model.onnx                 opset 18, ir_version 8, static shapes, value_info declared
    inputs/<input_name>.npy    seeded random fp32 inputs
    expected/<output_name>.npy onnxruntime (CPUExecutionProvider) outputs for those inputs

Every fixture is also checked here against an independent float64 NumPy implementation
(relative to the largest output magnitude), and against onnxruntime with its graph
optimizations on; the script fails if either disagrees by more than 1e-5.
"""
import math
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "examples", "graphs")
ONNX_OUT = os.path.join(HERE, "..", "examples", "onnx")
OPSET = 18
TOLERANCE = 1e-5  # max |a - b| / max |reference|


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


# ---------------------------------------------------------------------------------------------
# Helpers shared by the examples/onnx fixtures.


def _finish(nodes, name, inputs, outputs, inits) -> onnx.ModelProto:
    """Make an opset-18, ir_version-8 model; declare value_info (strict) and full-check it."""
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    model = helper.make_model(
        graph,
        producer_name="make_onnx_fixtures",
        producer_version="2",
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model, full_check=True)
    return model


class _Builder:
    """Collects nodes and initializers; names nodes after their (first) output."""

    def __init__(self):
        self.nodes = []
        self.inits = []

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def const(self, name, array):
        """A `Constant` node (as torch.onnx.export writes scalars), not an initializer."""
        t = numpy_helper.from_array(np.asarray(array), name)
        self.nodes.append(helper.make_node("Constant", [], [name], name=name, value=t))
        return name

    def op(self, op_type, inputs, output, **attrs):
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=output, **attrs))
        return output


def _linear_w(rng, fan_in, fan_out):
    return (rng.standard_normal((fan_in, fan_out)) / math.sqrt(fan_in)).astype(np.float32)


def _bias(rng, n):
    return (0.1 * rng.standard_normal(n)).astype(np.float32)


def _gelu_erf(b, x, prefix, sqrt2, one, half):
    """GELU in the Erf form as torch.onnx.export writes it: (x * (1 + Erf(x / sqrt 2))) * 0.5."""
    d = b.op("Div", [x, sqrt2], f"{prefix}_div")
    e = b.op("Erf", [d], f"{prefix}_erf")
    a = b.op("Add", [e, one], f"{prefix}_add")
    m = b.op("Mul", [x, a], f"{prefix}_mul")
    return b.op("Mul", [m, half], f"{prefix}_out")


def _np_gelu(x):
    erf = np.vectorize(math.erf)
    return x * 0.5 * (1.0 + erf(x / math.sqrt(2.0)))


def _np_layernorm(x, g, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _np_softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _f64(d):
    return {k: np.asarray(v, dtype=np.float64) for k, v in d.items()}


# ---------------------------------------------------------------------------------------------
# Fixtures. Each returns (model, inputs, reference) where reference(inputs) -> {output: float64}.


def tiny_mlp_fixture():
    model = tiny_mlp()
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "w"))
    x = np.random.default_rng(101).standard_normal((2, 8)).astype(np.float32)

    def reference(i):
        x = i["x"].astype(np.float64)
        h = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)
        return {"y": np.maximum(np.vectorize(math.erf)(h) @ w.astype(np.float64), 0.0)}

    return model, {"x": x}, reference


def mlp_gelu_erf():
    """x[4,64] -> MatMul(64x128) + Add -> GELU (Erf form) -> MatMul(128x32) + Add -> y[4,32]."""
    rng = np.random.default_rng(1)
    p = {
        "fc1.weight": _linear_w(rng, 64, 128),
        "fc1.bias": _bias(rng, 128),
        "fc2.weight": _linear_w(rng, 128, 32),
        "fc2.bias": _bias(rng, 32),
    }
    b = _Builder()
    for k, v in p.items():
        b.init(k, v)
    sqrt2 = b.init("gelu.sqrt2", np.array(math.sqrt(2.0), np.float32))
    one = b.init("gelu.one", np.array(1.0, np.float32))
    half = b.init("gelu.half", np.array(0.5, np.float32))
    h = b.op("MatMul", ["x", "fc1.weight"], "fc1_matmul")
    h = b.op("Add", [h, "fc1.bias"], "fc1_out")
    g = _gelu_erf(b, h, "gelu", sqrt2, one, half)
    h = b.op("MatMul", [g, "fc2.weight"], "fc2_matmul")
    b.op("Add", [h, "fc2.bias"], "y")
    model = _finish(
        b.nodes,
        "mlp_gelu_erf",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        b.inits,
    )
    x = np.random.default_rng(1001).standard_normal((4, 64)).astype(np.float32)
    q = _f64(p)

    def reference(i):
        h = i["x"].astype(np.float64) @ q["fc1.weight"] + q["fc1.bias"]
        return {"y": _np_gelu(h) @ q["fc2.weight"] + q["fc2.bias"]}

    return model, {"x": x}, reference


def bert_block():
    """Pre-LN BERT-style encoder block: batch 1, seq 16, hidden 64, 4 heads of 16, FFN 256.

    Scalars (1/sqrt 2, 1, 0.5, sqrt(head_dim)) are `Constant` nodes, as torch.onnx.export
    writes them; weights are initializers.
    """
    S, H, NH, HD, F = 16, 64, 4, 16, 256
    eps = 1e-5
    rng = np.random.default_rng(2)
    p = {}
    p["ln1.weight"] = (1.0 + 0.1 * rng.standard_normal(H)).astype(np.float32)
    p["ln1.bias"] = _bias(rng, H)
    for n in ("query", "key", "value", "attn_out"):
        p[f"{n}.weight"] = _linear_w(rng, H, H)
        p[f"{n}.bias"] = _bias(rng, H)
    p["ln2.weight"] = (1.0 + 0.1 * rng.standard_normal(H)).astype(np.float32)
    p["ln2.bias"] = _bias(rng, H)
    p["ffn_in.weight"] = _linear_w(rng, H, F)
    p["ffn_in.bias"] = _bias(rng, F)
    p["ffn_out.weight"] = _linear_w(rng, F, H)
    p["ffn_out.bias"] = _bias(rng, H)

    b = _Builder()
    for k, v in p.items():
        b.init(k, v)
    heads_shape = b.init("heads_shape", np.array([1, S, NH, HD], np.int64))
    hidden_shape = b.init("hidden_shape", np.array([1, S, H], np.int64))
    scale = b.const("attn_scale", np.array(math.sqrt(HD), np.float32))
    sqrt2 = b.const("gelu_sqrt2", np.array(math.sqrt(2.0), np.float32))
    one = b.const("gelu_one", np.array(1.0, np.float32))
    half = b.const("gelu_half", np.array(0.5, np.float32))

    x = "hidden_states"
    ln1 = b.op("LayerNormalization", [x, "ln1.weight", "ln1.bias"], "ln1_out", axis=-1, epsilon=eps)
    proj = {}
    for n in ("query", "key", "value"):
        t = b.op("MatMul", [ln1, f"{n}.weight"], f"{n}_matmul")
        t = b.op("Add", [t, f"{n}.bias"], f"{n}_out")
        proj[n] = b.op("Reshape", [t, heads_shape], f"{n}_heads")  # [1,16,4,16]
    q = b.op("Transpose", [proj["query"]], "q_t", perm=[0, 2, 1, 3])  # [1,4,16,16]
    kt = b.op("Transpose", [proj["key"]], "k_t", perm=[0, 2, 3, 1])  # [1,4,16(hd),16(seq)]
    v = b.op("Transpose", [proj["value"]], "v_t", perm=[0, 2, 1, 3])  # [1,4,16,16]
    s = b.op("MatMul", [q, kt], "scores")
    s = b.op("Div", [s, scale], "scores_scaled")
    a = b.op("Softmax", [s], "probs", axis=-1)
    c = b.op("MatMul", [a, v], "context")  # [1,4,16,16]
    c = b.op("Transpose", [c], "context_t", perm=[0, 2, 1, 3])  # [1,16,4,16]
    c = b.op("Reshape", [c, hidden_shape], "context_merged")  # [1,16,64]
    o = b.op("MatMul", [c, "attn_out.weight"], "attn_out_matmul")
    o = b.op("Add", [o, "attn_out.bias"], "attn_out")
    h = b.op("Add", [x, o], "residual1")
    ln2 = b.op("LayerNormalization", [h, "ln2.weight", "ln2.bias"], "ln2_out", axis=-1, epsilon=eps)
    f = b.op("MatMul", [ln2, "ffn_in.weight"], "ffn_in_matmul")
    f = b.op("Add", [f, "ffn_in.bias"], "ffn_in_out")
    f = _gelu_erf(b, f, "gelu", sqrt2, one, half)
    f = b.op("MatMul", [f, "ffn_out.weight"], "ffn_out_matmul")
    f = b.op("Add", [f, "ffn_out.bias"], "ffn_out")
    b.op("Add", [h, f], "last_hidden_state")

    model = _finish(
        b.nodes,
        "bert_block",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, S, H])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, S, H])],
        b.inits,
    )
    xin = np.random.default_rng(1002).standard_normal((1, S, H)).astype(np.float32)
    w = _f64(p)

    def reference(i):
        x = i["hidden_states"].astype(np.float64)
        n = _np_layernorm(x, w["ln1.weight"], w["ln1.bias"], eps)

        def heads(name):
            t = n @ w[f"{name}.weight"] + w[f"{name}.bias"]
            return t.reshape(1, S, NH, HD).transpose(0, 2, 1, 3)

        q, k, v = heads("query"), heads("key"), heads("value")
        a = _np_softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(HD))
        c = (a @ v).transpose(0, 2, 1, 3).reshape(1, S, H)
        h = x + c @ w["attn_out.weight"] + w["attn_out.bias"]
        n2 = _np_layernorm(h, w["ln2.weight"], w["ln2.bias"], eps)
        f = _np_gelu(n2 @ w["ffn_in.weight"] + w["ffn_in.bias"])
        return {"last_hidden_state": h + f @ w["ffn_out.weight"] + w["ffn_out.bias"]}

    return model, {"hidden_states": xin}, reference


def llama_block():
    """Llama-style decoder block: batch 1, seq 8, hidden 64, 4 heads of 16, SwiGLU FFN 128.

    RMSNorm as Pow/ReduceMean(axes input)/Add/Sqrt/Div/Mul; rotary embedding from cos/sin
    initializers [8,16] with Slice (second half ends at INT64_MAX, as torch writes `x[..., 8:]`),
    Neg, Concat, Mul, Add; causal mask as Where(bool [8,8] initializer, scores, -inf).
    """
    S, H, NH, HD, F = 8, 64, 4, 16, 128
    eps = 1e-6
    rng = np.random.default_rng(3)
    p = {}
    p["input_layernorm.weight"] = (1.0 + 0.1 * rng.standard_normal(H)).astype(np.float32)
    for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
        p[f"{n}.weight"] = _linear_w(rng, H, H)
    p["post_attention_layernorm.weight"] = (1.0 + 0.1 * rng.standard_normal(H)).astype(np.float32)
    p["gate_proj.weight"] = _linear_w(rng, H, F)
    p["up_proj.weight"] = _linear_w(rng, H, F)
    p["down_proj.weight"] = _linear_w(rng, F, H)

    inv_freq = 1.0 / (10000.0 ** (np.arange(0, HD, 2, dtype=np.float64) / HD))
    freqs = np.outer(np.arange(S, dtype=np.float64), inv_freq)  # [8, 8]
    emb = np.concatenate([freqs, freqs], axis=-1)  # [8, 16]
    cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
    mask = np.tril(np.ones((S, S), dtype=bool))

    b = _Builder()
    for k, v in p.items():
        b.init(k, v)
    b.init("rope_cos", cos)
    b.init("rope_sin", sin)
    b.init("causal_mask", mask)
    b.init("mask_fill", np.array(-np.inf, np.float32))
    b.init("rms_pow", np.array(2.0, np.float32))
    b.init("rms_axes", np.array([-1], np.int64))
    b.init("rms_eps", np.array(eps, np.float32))
    b.init("attn_scale", np.array(math.sqrt(HD), np.float32))
    b.init("heads_shape", np.array([1, S, NH, HD], np.int64))
    b.init("hidden_shape", np.array([1, S, H], np.int64))
    b.init("slice_axes", np.array([-1], np.int64))
    b.init("slice_lo_start", np.array([0], np.int64))
    b.init("slice_lo_end", np.array([HD // 2], np.int64))
    b.init("slice_hi_start", np.array([HD // 2], np.int64))
    b.init("slice_hi_end", np.array([np.iinfo(np.int64).max], np.int64))

    def rmsnorm(x, weight, prefix):
        sq = b.op("Pow", [x, "rms_pow"], f"{prefix}_pow")
        ms = b.op("ReduceMean", [sq, "rms_axes"], f"{prefix}_mean", keepdims=1)
        ms = b.op("Add", [ms, "rms_eps"], f"{prefix}_add_eps")
        r = b.op("Sqrt", [ms], f"{prefix}_sqrt")
        n = b.op("Div", [x, r], f"{prefix}_div")
        return b.op("Mul", [n, weight], f"{prefix}_out")

    def rope(t, prefix):  # t: [1,4,8,16]
        lo = b.op("Slice", [t, "slice_lo_start", "slice_lo_end", "slice_axes"], f"{prefix}_lo")
        hi = b.op("Slice", [t, "slice_hi_start", "slice_hi_end", "slice_axes"], f"{prefix}_hi")
        nhi = b.op("Neg", [hi], f"{prefix}_neg_hi")
        rot = b.op("Concat", [nhi, lo], f"{prefix}_rotate_half", axis=-1)
        a = b.op("Mul", [t, "rope_cos"], f"{prefix}_mul_cos")
        c = b.op("Mul", [rot, "rope_sin"], f"{prefix}_mul_sin")
        return b.op("Add", [a, c], f"{prefix}_rope")

    x = "hidden_states"
    n1 = rmsnorm(x, "input_layernorm.weight", "input_rmsnorm")
    heads = {}
    for n in ("q_proj", "k_proj", "v_proj"):
        t = b.op("MatMul", [n1, f"{n}.weight"], f"{n}_out")
        t = b.op("Reshape", [t, "heads_shape"], f"{n}_heads")  # [1,8,4,16]
        heads[n] = b.op("Transpose", [t], f"{n}_t", perm=[0, 2, 1, 3])  # [1,4,8,16]
    q = rope(heads["q_proj"], "q")
    k = rope(heads["k_proj"], "k")
    kt = b.op("Transpose", [k], "k_rope_t", perm=[0, 1, 3, 2])  # [1,4,16,8]
    s = b.op("MatMul", [q, kt], "scores")
    s = b.op("Div", [s, "attn_scale"], "scores_scaled")
    s = b.op("Where", ["causal_mask", s, "mask_fill"], "scores_masked")
    a = b.op("Softmax", [s], "probs", axis=-1)
    c = b.op("MatMul", [a, heads["v_proj"]], "context")  # [1,4,8,16]
    c = b.op("Transpose", [c], "context_t", perm=[0, 2, 1, 3])
    c = b.op("Reshape", [c, "hidden_shape"], "context_merged")
    o = b.op("MatMul", [c, "o_proj.weight"], "o_proj_out")
    h = b.op("Add", [x, o], "residual1")
    n2 = rmsnorm(h, "post_attention_layernorm.weight", "post_rmsnorm")
    g = b.op("MatMul", [n2, "gate_proj.weight"], "gate_proj_out")
    sg = b.op("Sigmoid", [g], "gate_sigmoid")
    silu = b.op("Mul", [g, sg], "gate_silu")
    u = b.op("MatMul", [n2, "up_proj.weight"], "up_proj_out")
    m = b.op("Mul", [silu, u], "swiglu")
    d = b.op("MatMul", [m, "down_proj.weight"], "down_proj_out")
    b.op("Add", [h, d], "output")

    model = _finish(
        b.nodes,
        "llama_block",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, S, H])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, S, H])],
        b.inits,
    )
    xin = np.random.default_rng(1003).standard_normal((1, S, H)).astype(np.float32)
    w = _f64(p)
    cos64, sin64 = cos.astype(np.float64), sin.astype(np.float64)

    def reference(i):
        x = i["hidden_states"].astype(np.float64)

        def rms(t, g):
            return t / np.sqrt((t**2).mean(axis=-1, keepdims=True) + eps) * g

        def rot(t):
            return t * cos64 + np.concatenate([-t[..., HD // 2 :], t[..., : HD // 2]], -1) * sin64

        n = rms(x, w["input_layernorm.weight"])

        def heads(name):
            return (n @ w[f"{name}.weight"]).reshape(1, S, NH, HD).transpose(0, 2, 1, 3)

        q, k, v = rot(heads("q_proj")), rot(heads("k_proj")), heads("v_proj")
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(HD)
        s = np.where(mask, s, -np.inf)
        c = (_np_softmax(s) @ v).transpose(0, 2, 1, 3).reshape(1, S, H)
        h = x + c @ w["o_proj.weight"]
        n2 = rms(h, w["post_attention_layernorm.weight"])
        g = n2 @ w["gate_proj.weight"]
        m = g / (1.0 + np.exp(-g)) * (n2 @ w["up_proj.weight"])
        return {"output": h + m @ w["down_proj.weight"]}

    return model, {"hidden_states": xin}, reference


def convnet():
    """input[1,3,16,16] -> Conv(8,3x3,pad 1) -> BatchNormalization -> Relu -> MaxPool 2x2 ->
    Conv(16,3x3,pad 1) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(16->10, transB=1)."""
    rng = np.random.default_rng(4)
    p = {
        "conv1.weight": (rng.standard_normal((8, 3, 3, 3)) / math.sqrt(27)).astype(np.float32),
        "conv1.bias": _bias(rng, 8),
        "bn1.weight": (1.0 + 0.1 * rng.standard_normal(8)).astype(np.float32),
        "bn1.bias": _bias(rng, 8),
        "bn1.running_mean": _bias(rng, 8),
        "bn1.running_var": rng.uniform(0.5, 1.5, 8).astype(np.float32),
        "conv2.weight": (rng.standard_normal((16, 8, 3, 3)) / math.sqrt(72)).astype(np.float32),
        "conv2.bias": _bias(rng, 16),
        "fc.weight": (rng.standard_normal((10, 16)) / math.sqrt(16)).astype(np.float32),
        "fc.bias": _bias(rng, 10),
    }
    eps = 1e-5
    b = _Builder()
    for k, v in p.items():
        b.init(k, v)
    t = b.op("Conv", ["input", "conv1.weight", "conv1.bias"], "conv1_out",
             kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    t = b.op("BatchNormalization",
             [t, "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"],
             "bn1_out", epsilon=eps, momentum=0.9)
    t = b.op("Relu", [t], "relu1_out")
    t = b.op("MaxPool", [t], "pool1_out", kernel_shape=[2, 2], strides=[2, 2])
    t = b.op("Conv", [t, "conv2.weight", "conv2.bias"], "conv2_out",
             kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    t = b.op("Relu", [t], "relu2_out")
    t = b.op("GlobalAveragePool", [t], "gap_out")
    t = b.op("Flatten", [t], "flatten_out", axis=1)
    b.op("Gemm", [t, "fc.weight", "fc.bias"], "logits", alpha=1.0, beta=1.0, transB=1)
    model = _finish(
        b.nodes,
        "convnet",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        b.inits,
    )
    xin = np.random.default_rng(1004).standard_normal((1, 3, 16, 16)).astype(np.float32)
    w = _f64(p)

    def conv3x3_pad1(x, weight, bias):  # x [1,C,H,W], weight [O,C,3,3]
        _, _, hh, ww = x.shape
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((1, weight.shape[0], hh, ww))
        for dy in range(3):
            for dx in range(3):
                out += np.einsum("nchw,oc->nohw", xp[:, :, dy : dy + hh, dx : dx + ww],
                                 weight[:, :, dy, dx])
        return out + bias[None, :, None, None]

    def reference(i):
        x = i["input"].astype(np.float64)
        t = conv3x3_pad1(x, w["conv1.weight"], w["conv1.bias"])
        c = lambda v: v[None, :, None, None]  # noqa: E731
        t = (t - c(w["bn1.running_mean"])) / np.sqrt(c(w["bn1.running_var"]) + eps)
        t = np.maximum(t * c(w["bn1.weight"]) + c(w["bn1.bias"]), 0.0)
        t = t.reshape(1, 8, 8, 2, 8, 2).max(axis=(3, 5))
        t = np.maximum(conv3x3_pad1(t, w["conv2.weight"], w["conv2.bias"]), 0.0)
        t = t.mean(axis=(2, 3))
        return {"logits": t @ w["fc.weight"].T + w["fc.bias"]}

    return model, {"input": xin}, reference


def gpt_embed():
    """GPT-2-style block with the shape arithmetic torch.onnx.export writes around it.

    Token ids (int64 input) → Gather on a tied embedding table; position ids from
    Shape → Gather → Range → Unsqueeze → Gather on an fp16 position table (Cast to fp32);
    LayerNormalization; fused QKV MatMul → Split (sizes as an input); head shapes built by
    Shape/Gather/Unsqueeze/Concat (a −1 dim in the merge); attention scale
    Sqrt(Cast(Gather(Shape(q), 3))); causal mask LessOrEqual of two Range vectors with the fill
    from ConstantOfShape(Shape(scores), −inf); an out projection weight of shape [1,64,64]
    (batch dims all 1); FFN bias added through Expand to a computed shape; tanh GELU written
    out (Pow 3, Tanh); LM head MatMul with Transpose(wte); a value head MatMul with a 1-D
    weight [64] → [1,8]; and a MatMul of [1,8,64] by a [2,64,16] weight (the left operand's
    batch dims broadcast) → [2,8,16].
    """
    V, S, P, H, NH, HD, F = 100, 8, 16, 64, 4, 16, 256
    eps = 1e-5
    rng = np.random.default_rng(5)
    p = {
        "wte": (0.5 * rng.standard_normal((V, H))).astype(np.float32),
        "ln_1.weight": (1.0 + 0.1 * rng.standard_normal(H)).astype(np.float32),
        "ln_1.bias": _bias(rng, H),
        "c_attn.weight": _linear_w(rng, H, 3 * H),
        "c_attn.bias": _bias(rng, 3 * H),
        "c_proj.weight": _linear_w(rng, H, H).reshape(1, H, H),
        "ln_2.weight": (1.0 + 0.1 * rng.standard_normal(H)).astype(np.float32),
        "ln_2.bias": _bias(rng, H),
        "mlp.c_fc.weight": _linear_w(rng, H, F),
        "mlp.c_fc.bias": _bias(rng, F),
        "mlp.c_proj.weight": _linear_w(rng, F, H),
        "mlp.c_proj.bias": _bias(rng, H),
        "value_head.weight": (rng.standard_normal(H) / math.sqrt(H)).astype(np.float32),
        "pair.weight": (rng.standard_normal((2, H, 16)) / math.sqrt(H)).astype(np.float32),
    }
    wpe16 = (0.5 * rng.standard_normal((P, H))).astype(np.float16)

    b = _Builder()
    for k, v in p.items():
        b.init(k, v)
    b.init("wpe", wpe16)
    b.init("split_sizes", np.array([H, H, H], np.int64))
    b.init("axes0", np.array([0], np.int64))
    b.init("axes1", np.array([1], np.int64))
    b.init("heads_tail", np.array([NH, HD], np.int64))
    b.init("minus_one", np.array([-1], np.int64))
    b.init("ffn_width", np.array([F], np.int64))
    b.const("zero_i", np.array(0, np.int64))
    b.const("one_i", np.array(1, np.int64))
    b.const("three_i", np.array(3, np.int64))
    b.const("gelu_c", np.array(math.sqrt(2.0 / math.pi), np.float32))
    b.const("gelu_k", np.array(0.044715, np.float32))
    b.const("three_f", np.array(3.0, np.float32))
    b.const("half", np.array(0.5, np.float32))
    b.const("one_f", np.array(1.0, np.float32))

    ids = "input_ids"
    tok = b.op("Gather", ["wte", ids], "tok_emb", axis=0)
    shp = b.op("Shape", [ids], "ids_shape")
    seq = b.op("Gather", [shp, "one_i"], "seq_len", axis=0)
    pos = b.op("Range", ["zero_i", seq, "one_i"], "positions")
    pos2 = b.op("Unsqueeze", [pos, "axes0"], "position_ids")
    wpe = b.op("Cast", ["wpe"], "wpe_f32", to=TensorProto.FLOAT)
    pe = b.op("Gather", [wpe, pos2], "pos_emb", axis=0)
    x = b.op("Add", [tok, pe], "embeddings")
    ln1 = b.op("LayerNormalization", [x, "ln_1.weight", "ln_1.bias"], "ln_1_out", axis=-1, epsilon=eps)
    qkv = b.op("MatMul", [ln1, "c_attn.weight"], "qkv_mm")
    qkv = b.op("Add", [qkv, "c_attn.bias"], "qkv")
    b.nodes.append(helper.make_node("Split", [qkv, "split_sizes"], ["q", "k", "v"], name="split_qkv", axis=-1))
    lshape = b.op("Shape", [ln1], "ln_1_shape")
    b0 = b.op("Gather", [lshape, "zero_i"], "batch_dim", axis=0)
    s0 = b.op("Gather", [lshape, "one_i"], "seq_dim", axis=0)
    b0u = b.op("Unsqueeze", [b0, "axes0"], "batch_dim_1d")
    s0u = b.op("Unsqueeze", [s0, "axes0"], "seq_dim_1d")
    heads_shape = b.op("Concat", [b0u, s0u, "heads_tail"], "heads_shape", axis=0)
    merged_shape = b.op("Concat", [b0u, s0u, "minus_one"], "merged_shape", axis=0)
    ffn_shape = b.op("Concat", [b0u, s0u, "ffn_width"], "ffn_shape", axis=0)
    qh = b.op("Transpose", [b.op("Reshape", ["q", heads_shape], "q_heads")], "q_t", perm=[0, 2, 1, 3])
    kt = b.op("Transpose", [b.op("Reshape", ["k", heads_shape], "k_heads")], "k_t", perm=[0, 2, 3, 1])
    vh = b.op("Transpose", [b.op("Reshape", ["v", heads_shape], "v_heads")], "v_t", perm=[0, 2, 1, 3])
    hd = b.op("Gather", [b.op("Shape", [qh], "q_t_shape"), "three_i"], "head_dim", axis=0)
    scale = b.op("Sqrt", [b.op("Cast", [hd], "head_dim_f", to=TensorProto.FLOAT)], "attn_scale")
    sc = b.op("Div", [b.op("MatMul", [qh, kt], "scores_raw"), scale], "scores")
    r = b.op("Range", ["zero_i", seq, "one_i"], "mask_range")
    rows = b.op("Unsqueeze", [r, "axes1"], "mask_rows")
    cols = b.op("Unsqueeze", [r, "axes0"], "mask_cols")
    mask = b.op("LessOrEqual", [cols, rows], "causal_mask")
    fill_t = numpy_helper.from_array(np.array([-np.inf], np.float32), "fill_value")
    fill = b.op("ConstantOfShape", [b.op("Shape", [sc], "scores_shape")], "mask_fill", value=fill_t)
    sc = b.op("Where", [mask, sc, fill], "scores_masked")
    pr = b.op("Softmax", [sc], "probs", axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [pr, vh], "context")], "context_t", perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, merged_shape], "context_merged")
    ao = b.op("MatMul", [ctx, "c_proj.weight"], "attn_out")
    h = b.op("Add", [x, ao], "residual1")
    ln2 = b.op("LayerNormalization", [h, "ln_2.weight", "ln_2.bias"], "ln_2_out", axis=-1, epsilon=eps)
    fc = b.op("MatMul", [ln2, "mlp.c_fc.weight"], "fc_mm")
    fc = b.op("Add", [fc, b.op("Expand", ["mlp.c_fc.bias", ffn_shape], "fc_bias_full")], "fc")
    cube = b.op("Pow", [fc, "three_f"], "fc_cube")
    inner = b.op("Add", [fc, b.op("Mul", [cube, "gelu_k"], "fc_cube_k")], "gelu_inner")
    th = b.op("Tanh", [b.op("Mul", [inner, "gelu_c"], "gelu_scaled")], "gelu_tanh")
    g = b.op("Mul", [b.op("Mul", [fc, "half"], "fc_half"), b.op("Add", [th, "one_f"], "gelu_onep")], "gelu")
    mo = b.op("Add", [b.op("MatMul", [g, "mlp.c_proj.weight"], "mlp_mm"), "mlp.c_proj.bias"], "mlp_out")
    h2 = b.op("Add", [h, mo], "hidden_out")
    wte_t = b.op("Transpose", ["wte"], "wte_t", perm=[1, 0])
    b.op("MatMul", [h2, wte_t], "logits")
    b.op("MatMul", [h2, "value_head.weight"], "value")
    b.op("MatMul", [ln2, "pair.weight"], "pair_proj")

    model = _finish(
        b.nodes,
        "gpt_embed",
        [helper.make_tensor_value_info(ids, TensorProto.INT64, [1, S])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, S, V]),
            helper.make_tensor_value_info("value", TensorProto.FLOAT, [1, S]),
            helper.make_tensor_value_info("pair_proj", TensorProto.FLOAT, [2, S, 16]),
        ],
        b.inits,
    )
    id_in = np.random.default_rng(1005).integers(0, V, size=(1, S), dtype=np.int64)
    w = _f64(p)
    wpe64 = wpe16.astype(np.float64)

    def reference(i):
        t = i["input_ids"]
        x = w["wte"][t] + wpe64[np.arange(S)][None]
        n1 = _np_layernorm(x, w["ln_1.weight"], w["ln_1.bias"], eps)
        qkv = n1 @ w["c_attn.weight"] + w["c_attn.bias"]
        q, k, v = (qkv[..., j * H:(j + 1) * H].reshape(1, S, NH, HD).transpose(0, 2, 1, 3) for j in range(3))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(HD)
        s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
        c = (_np_softmax(s) @ v).transpose(0, 2, 1, 3).reshape(1, S, H)
        h = x + c @ w["c_proj.weight"][0]
        n2 = _np_layernorm(h, w["ln_2.weight"], w["ln_2.bias"], eps)
        fc = n2 @ w["mlp.c_fc.weight"] + w["mlp.c_fc.bias"]
        g = 0.5 * fc * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (fc + 0.044715 * fc**3)))
        h2 = h + g @ w["mlp.c_proj.weight"] + w["mlp.c_proj.bias"]
        return {
            "logits": h2 @ w["wte"].T,
            "value": h2 @ w["value_head.weight"],
            "pair_proj": n2 @ w["pair.weight"],
        }

    return model, {"input_ids": id_in}, reference


def qdq_mlp():
    """A QDQ-quantized linear layer as quantization tools write it: the activation through
    QuantizeLinear/DequantizeLinear (fp32 scale, int8 zero point), an int8 weight initializer
    through DequantizeLinear, MatMul, Relu, and the output through a QDQ pair with a non-zero
    zero point."""
    rng = np.random.default_rng(6)
    sx, sw, sy, zy = 0.02, 0.01, 0.05, -10
    wq = rng.integers(-127, 128, size=(32, 16), dtype=np.int8)
    b = _Builder()
    b.init("w_q", wq)
    b.init("x_scale", np.array(sx, np.float32))
    b.init("x_zero", np.array(0, np.int8))
    b.init("w_scale", np.array(sw, np.float32))
    b.init("w_zero", np.array(0, np.int8))
    b.init("y_scale", np.array(sy, np.float32))
    b.init("y_zero", np.array(zy, np.int8))
    xq = b.op("QuantizeLinear", ["x", "x_scale", "x_zero"], "x_q")
    xd = b.op("DequantizeLinear", [xq, "x_scale", "x_zero"], "x_dq")
    wd = b.op("DequantizeLinear", ["w_q", "w_scale", "w_zero"], "w_dq")
    y = b.op("Relu", [b.op("MatMul", [xd, wd], "mm")], "y_f")
    yq = b.op("QuantizeLinear", [y, "y_scale", "y_zero"], "y_q")
    b.op("DequantizeLinear", [yq, "y_scale", "y_zero"], "y")
    model = _finish(
        b.nodes,
        "qdq_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        b.inits,
    )
    xin = np.random.default_rng(1006).standard_normal((4, 32)).astype(np.float32)

    def reference(i):
        # The quantization steps in float32 as ONNX defines them (x / scale in the input's
        # type, round half to even, saturate); the MatMul in float64.
        f32 = np.float32

        def qdq(v, s, z):
            q = np.clip(np.rint(v.astype(f32) / f32(s)) + z, -128, 127)
            return ((q - z) * f32(s)).astype(np.float64)

        xd = qdq(i["x"], sx, 0)
        wd = wq.astype(np.float64) * f32(sw).astype(np.float64)
        y = np.maximum(xd @ wd, 0.0)
        return {"y": qdq(y, sy, zy)}

    return model, {"x": xin}, reference


FIXTURES = [
    ("tiny_mlp", tiny_mlp_fixture),
    ("mlp_gelu_erf", mlp_gelu_erf),
    ("bert_block", bert_block),
    ("llama_block", llama_block),
    ("convnet", convnet),
    ("gpt_embed", gpt_embed),
    ("qdq_mlp", qdq_mlp),
]


def _run_ort(model_bytes, inputs, level):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = level
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def _rel_err(got, want):
    return float(np.max(np.abs(got.astype(np.float64) - want)) / max(np.max(np.abs(want)), 1e-30))


def write_fixture(name, build) -> None:
    model, inputs, reference = build()
    model_bytes = model.SerializeToString()
    d = os.path.join(ONNX_OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "inputs"))
    os.makedirs(os.path.join(d, "expected"))
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model_bytes)

    graph_inputs = [i.name for i in model.graph.input]
    assert sorted(graph_inputs) == sorted(inputs), (name, graph_inputs)
    for k, v in inputs.items():
        assert v.dtype in (np.float32, np.int64) and np.all(np.isfinite(v))
        np.save(os.path.join(d, "inputs", f"{k}.npy"), np.ascontiguousarray(v))

    # The committed expectation: onnxruntime, CPU provider, no graph rewrites, one thread.
    outs = _run_ort(model_bytes, inputs, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert sorted(outs) == sorted(o.name for o in model.graph.output)
    optimized = _run_ort(model_bytes, inputs, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    ref = reference(inputs)
    for k, v in outs.items():
        assert v.dtype == np.float32, (name, k, v.dtype)
        assert np.all(np.isfinite(v)), (name, k)
        e_ref = _rel_err(v, ref[k])
        e_opt = _rel_err(optimized[k], v.astype(np.float64))
        assert e_ref <= TOLERANCE, (name, k, "vs numpy float64", e_ref)
        assert e_opt <= TOLERANCE, (name, k, "vs onnxruntime optimized", e_opt)
        np.save(os.path.join(d, "expected", f"{k}.npy"), np.ascontiguousarray(v))
        print(f"  {name}/{k}: shape {list(v.shape)}, max|y| {np.max(np.abs(v)):.3f}, "
              f"std {np.std(v):.3f}; rel err vs numpy f64 {e_ref:.1e}, "
              f"vs ort optimized {e_opt:.1e}")
    ops = sorted({n.op_type for n in model.graph.node})
    print(f"wrote examples/onnx/{name}/ (model {len(model_bytes)} bytes; ops: {', '.join(ops)})")


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "tiny_mlp.onnx")
    onnx.save_model(tiny_mlp(), path)
    print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path)} bytes)")
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}")
    for name, build in FIXTURES:
        write_fixture(name, build)


if __name__ == "__main__":
    main()
