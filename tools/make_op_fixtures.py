#!/usr/bin/env python3
"""Single-op ONNX fixtures for the ops the op table and the importer added, with
onnxruntime's outputs (or, for a form onnxruntime refuses, the ONNX package's reference
evaluator's, said in OUT/<case>/REFERENCE): OUT/<case>/model.onnx, inputs/*.npy,
expected/*.npy.

Inputs are float32 (edge values: NaN, +-inf, +-0, halves); a bool operand is made inside the
model with Cast(to=BOOL), and a bool result is Cast back to float32, so every file is float32.
Usage: python tools/make_op_fixtures.py examples/onnx/ops  (versions as in
tools/real_onnx_requirements.txt).
"""

import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

OPSET = 17
EDGE = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 3.0, 1e-3, -7.25],
                dtype=np.float32)


def save(out, case, nodes, inputs, feeds, inits=(), opset=OPSET, reference="onnxruntime"):
    d = os.path.join(out, case)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(d, "expected"), exist_ok=True)
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    g = helper.make_graph(nodes, case, inputs, outs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                            helper.make_opsetid("com.microsoft", 1)],
                          producer_name="tensorforge-op-fixtures")
    m = onnx.shape_inference.infer_shapes(m)
    if not any(n.domain for n in m.graph.node):
        onnx.checker.check_model(m)
    path = os.path.join(d, "model.onnx")
    onnx.save(m, path)
    if callable(reference):
        # A float64 NumPy reference, where onnxruntime's float32 loses digits the test's
        # 1e-6 would flag (InstanceNormalization of values far from zero): the fixture says
        # so and how far onnxruntime was.
        y = reference(feeds).astype(np.float32)
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        dev = float(np.abs(s.run(None, feeds)[0] - y).max() / max(np.abs(y).max(), 1.0))
        with open(os.path.join(d, "REFERENCE"), "w") as f:
            f.write("expected/ computed in float64 NumPy (tools/make_op_fixtures.py); "
                    f"onnxruntime's float32 output differs from it by {dev:.1e} relative\n")
    elif reference == "onnxruntime":
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        y = s.run(None, feeds)[0]
    else:
        # onnxruntime refuses some forms (batch-major `layout = 1` recurrent ops): the ONNX
        # package's reference evaluator computes those, and the fixture says so.
        from onnx.reference import ReferenceEvaluator
        y = ReferenceEvaluator(m).run(None, feeds)[0].astype(np.float32)
        with open(os.path.join(d, "REFERENCE"), "w") as f:
            f.write("expected/ computed by onnx.reference.ReferenceEvaluator (onnxruntime refuses this form)\n")
    for k, v in feeds.items():
        np.save(os.path.join(d, "inputs", f"{k}.npy"), v)
    np.save(os.path.join(d, "expected", "y.npy"), y)
    print(case, y.shape)


def fin(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def main():
    out = sys.argv[1]
    x = np.tile(EDGE, 2).reshape(2, 12)
    rng = np.random.default_rng(3)
    y = rng.choice(EDGE, size=(12,)).astype(np.float32)  # broadcasts over x's rows
    # Float -> float and float -> bool unary ops.
    for op, attrs in [("Sin", {}), ("Cos", {}), ("Abs", {}), ("Floor", {}), ("Ceil", {}),
                      ("Sign", {}), ("IsNaN", {}), ("IsInf", {}),
                      ("IsInf", {"detect_negative": 0}), ("IsInf", {"detect_positive": 0})]:
        case = op.lower() + "".join(f"_{k}{v}" for k, v in attrs.items())
        to_bool = op.startswith("Is")
        nodes = [helper.make_node(op, ["x"], ["r" if to_bool else "y"], **attrs)]
        if to_bool:
            nodes.append(helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT))
        save(out, case, nodes, [fin("x", [2, 12])], {"x": x})
    # Comparisons (NaN compares false) with broadcasting.
    for op in ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]:
        nodes = [helper.make_node(op, ["x", "z"], ["r"]),
                 helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
        save(out, op.lower(), nodes, [fin("x", [2, 12]), fin("z", [12])], {"x": x, "z": y})
    # Logic on bools made from floats (nonzero -> true).
    xb = (rng.random((2, 12)) > 0.5).astype(np.float32)
    yb = (rng.random((12,)) > 0.5).astype(np.float32)
    for op in ["And", "Or", "Xor"]:
        nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BOOL),
                 helper.make_node("Cast", ["z"], ["zb"], to=TensorProto.BOOL),
                 helper.make_node(op, ["xb", "zb"], ["r"]),
                 helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
        save(out, op.lower(), nodes, [fin("x", [2, 12]), fin("z", [12])], {"x": xb, "z": yb})
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BOOL),
             helper.make_node("Not", ["xb"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
    save(out, "not", nodes, [fin("x", [2, 12])], {"x": xb})
    # GatherND: constant 2-tuples (one negative) into [3, 4, 5], and runtime 1-tuples.
    data = rng.standard_normal((3, 4, 5)).astype(np.float32)
    idx = np.array([[[0, 1], [2, -1]], [[1, 0], [-3, 3]]], dtype=np.int64)  # [2, 2, 2]
    save(out, "gathernd_const2", [helper.make_node("GatherND", ["x", "i"], ["y"])],
         [fin("x", [3, 4, 5])], {"x": data},
         inits=[helper.make_tensor("i", TensorProto.INT64, idx.shape, idx.flatten())])
    nodes = [helper.make_node("Cast", ["i"], ["ii"], to=TensorProto.INT64),
             helper.make_node("GatherND", ["x", "ii"], ["y"])]
    save(out, "gathernd_runtime1", nodes, [fin("x", [3, 4, 5]), fin("i", [4, 1])],
         {"x": data, "i": np.array([[2], [0], [1], [2]], dtype=np.float32)})
    # CumSum: inclusive, exclusive, reverse, on axis 1 and -1 (int64 ids cast from floats,
    # as RoBERTa's position ids sum the attention mask).
    cs = rng.integers(-3, 4, size=(2, 5, 3)).astype(np.float32)
    for case, attrs, axis in [("cumsum", {}, 1), ("cumsum_exclusive", {"exclusive": 1}, 1),
                              ("cumsum_reverse", {"reverse": 1}, -1),
                              ("cumsum_both", {"exclusive": 1, "reverse": 1}, 0)]:
        save(out, case, [helper.make_node("CumSum", ["x", "a"], ["y"], **attrs)],
             [fin("x", [2, 5, 3])], {"x": cs},
             inits=[helper.make_tensor("a", TensorProto.INT64, [], [axis])])
    # Pad: every mode, negative pads (a crop), a constant value, and opset 18's axes input.
    px = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    pads = [0, 0, 1, 2, 0, 0, 2, -1]
    for mode, opset in [("constant", 17), ("reflect", 17), ("edge", 17), ("wrap", 19)]:
        ins = ["x", "p"] + (["v"] if mode == "constant" else [])
        inits = [helper.make_tensor("p", TensorProto.INT64, [8], pads)]
        if mode == "constant":
            inits.append(helper.make_tensor("v", TensorProto.FLOAT, [], [-1.5]))
        save(out, f"pad_{mode}", [helper.make_node("Pad", ins, ["y"], mode=mode)],
             [fin("x", [2, 3, 4, 5])], {"x": px}, inits=inits, opset=opset)
    save(out, "pad_axes", [helper.make_node("Pad", ["x", "p", "", "a"], ["y"], mode="reflect")],
         [fin("x", [2, 3, 4, 5])], {"x": px}, opset=18,
         inits=[helper.make_tensor("p", TensorProto.INT64, [4], [1, 2, 3, 1]),
                helper.make_tensor("a", TensorProto.INT64, [2], [-1, 2])])
    # Trilu at run time (upper and lower, k of either sign, batched) and of a constant
    # (folded at import), and the rotary pattern: Sin/Cos of a constant MatMul (folded).
    tx = rng.standard_normal((2, 4, 6)).astype(np.float32)
    for case, upper, k in [("trilu_upper", 1, 0), ("trilu_lower_k1", 0, 1),
                           ("trilu_upper_kneg2", 1, -2)]:
        save(out, case, [helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)],
             [fin("x", [2, 4, 6])], {"x": tx},
             inits=[helper.make_tensor("k", TensorProto.INT64, [], [k])])
    ones = np.ones((6, 6), dtype=np.float32)
    save(out, "trilu_const_folded",
         [helper.make_node("Trilu", ["c"], ["m"], upper=0),
          helper.make_node("Mul", ["x", "m"], ["y"])],
         [fin("x", [4, 6, 6])], {"x": rng.standard_normal((4, 6, 6)).astype(np.float32)},
         inits=[helper.make_tensor("c", TensorProto.FLOAT, [6, 6], ones.flatten())])
    inv_freq = (1.0 / (10000 ** (np.arange(0, 8, 2) / 8))).astype(np.float32).reshape(1, 4, 1)
    pos = np.arange(8, dtype=np.float32).reshape(1, 1, 8)
    save(out, "rotary_sin_cos_folded",
         [helper.make_node("MatMul", ["f", "p"], ["fp"]),
          helper.make_node("Transpose", ["fp"], ["ang"], perm=[0, 2, 1]),
          helper.make_node("Sin", ["ang"], ["s"]), helper.make_node("Cos", ["ang"], ["c"]),
          helper.make_node("Concat", ["s", "c"], ["sc"], axis=-1),
          helper.make_node("Mul", ["x", "sc"], ["y"])],
         [fin("x", [2, 8, 8])], {"x": rng.standard_normal((2, 8, 8)).astype(np.float32)},
         inits=[helper.make_tensor("f", TensorProto.FLOAT, [1, 4, 1], inv_freq.flatten()),
                helper.make_tensor("p", TensorProto.FLOAT, [1, 1, 8], pos.flatten())])
    # If: a constant condition (the chosen branch is inlined) and a run-time one (both
    # branches, then Where), each branch reading the outer x, one with its own initializer.
    ix = rng.standard_normal((3, 4)).astype(np.float32)
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [3, 4])],
                               initializer=[helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e_n"]),
                                helper.make_node("Exp", ["e_n"], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [3, 4])])
    for case, const in [("if_constant_false", False), ("if_runtime", None)]:
        nodes, inits = [], []
        if const is None:
            nodes += [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                      helper.make_node("Greater", ["s", "zero"], ["c"])]
            inits.append(helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]))
        else:
            inits.append(helper.make_tensor("c", TensorProto.BOOL, [], [const]))
        nodes.append(helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g))
        save(out, case, nodes, [fin("x", [3, 4])], {"x": ix}, inits=inits)
    save(out, "if_runtime_negative", nodes, [fin("x", [3, 4])], {"x": -np.abs(ix) - 0.1},
         inits=inits)
    # Clip (opset 11+ inputs, one bound missing, and opset 6 attributes; NaN stays NaN), Mod
    # (both signs, fmod 0 on int64 cast from floats and fmod 1 on floats), Tile.
    save(out, "clip", [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
         [fin("x", [2, 12])], {"x": x},
         inits=[helper.make_tensor("lo", TensorProto.FLOAT, [], [-0.5]),
                helper.make_tensor("hi", TensorProto.FLOAT, [], [1.5])])
    save(out, "clip_max_only", [helper.make_node("Clip", ["x", "", "hi"], ["y"])],
         [fin("x", [2, 12])], {"x": x},
         inits=[helper.make_tensor("hi", TensorProto.FLOAT, [], [0.25])])
    save(out, "clip_opset6", [helper.make_node("Clip", ["x"], ["y"], min=0.0, max=6.0)],
         [fin("x", [2, 12])], {"x": x * 4}, opset=6)
    ma = np.array([[-7, 7, -7, 7, 6, -6], [5, -5, 0, 9, -9, 1]], dtype=np.float32)
    mb = np.array([3, 3, -3, -3, 3, 4], dtype=np.float32)
    save(out, "mod_int64",
         [helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT64),
          helper.make_node("Cast", ["z"], ["zi"], to=TensorProto.INT64),
          helper.make_node("Mod", ["xi", "zi"], ["r"]),
          helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)],
         [fin("x", [2, 6]), fin("z", [6])], {"x": ma, "z": mb})
    save(out, "fmod_float", [helper.make_node("Mod", ["x", "z"], ["y"], fmod=1)],
         [fin("x", [2, 6]), fin("z", [6])], {"x": ma * 1.25, "z": mb})
    save(out, "tile", [helper.make_node("Tile", ["x", "r"], ["y"])],
         [fin("x", [2, 3, 4])], {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)},
         inits=[helper.make_tensor("r", TensorProto.INT64, [3], [2, 1, 3])])
    # Einsum: batched attention scores, a contraction with a summed-out index, an outer
    # product, an implicit output, a one-operand transpose-and-sum.
    ea = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    eb = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    for case, eq, shapes in [
        ("einsum_bhqd_bhkd", "bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
        ("einsum_sum_index", "ij,jk->k", [(3, 4), (4, 5)]),
        ("einsum_outer", "i,j->ji", [(4,), (6,)]),
        ("einsum_implicit", "bij,bjk", [(2, 3, 4), (2, 4, 5)]),
        ("einsum_one_operand", "abc->cb", [(2, 3, 4)]),
        ("einsum_ellipsis", "...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
        ("einsum_ellipsis_implicit", "...ij,jk", [(2, 4, 5), (5, 3)]),
    ]:
        names = ["x", "z"][: len(shapes)]
        feeds = {n: rng.standard_normal(sh).astype(np.float32) for n, sh in zip(names, shapes)}
        save(out, case, [helper.make_node("Einsum", names, ["y"], equation=eq)],
             [fin(n, list(sh)) for n, sh in zip(names, shapes)], feeds)
    # ScatterND: constant index tuples (one negative) writing rows of updates.
    sd = rng.standard_normal((4, 3, 5)).astype(np.float32)
    su = rng.standard_normal((2, 5)).astype(np.float32)
    save(out, "scatternd", [helper.make_node("ScatterND", ["x", "i", "u"], ["y"])],
         [fin("x", [4, 3, 5]), fin("u", [2, 5])], {"x": sd, "u": su},
         inits=[helper.make_tensor("i", TensorProto.INT64, [2, 2], [1, 2, -1, 0])])
    # com.microsoft Attention (a 2-D 1/0 key mask; and unidirectional with a 1-D end mask),
    # as onnxruntime's transformer optimizer writes it.
    B, S, Hd = 2, 4, 8
    ax = rng.standard_normal((B, S, Hd)).astype(np.float32)
    aw = (rng.standard_normal((Hd, 3 * Hd)) / np.sqrt(Hd)).astype(np.float32)
    ab = (0.1 * rng.standard_normal((3 * Hd,))).astype(np.float32)
    mask2 = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=np.int32)
    mask1 = np.array([4, 3], dtype=np.int32)
    for case, mask, attrs in [("attention_mask2d", mask2, {}),
                              ("attention_unidirectional_mask1d", mask1, {"unidirectional": 1})]:
        save(out, case,
             [helper.make_node("Attention", ["x", "w", "b", "m"], ["y"], domain="com.microsoft",
                               num_heads=2, **attrs)],
             [fin("x", [B, S, Hd]),
              helper.make_tensor_value_info("m", TensorProto.INT32, list(mask.shape))],
             {"x": ax, "m": mask},
             inits=[helper.make_tensor("w", TensorProto.FLOAT, aw.shape, aw.flatten()),
                    helper.make_tensor("b", TensorProto.FLOAT, ab.shape, ab.flatten())])
    # LSTM and GRU: every output (Y, Y_h, Y_c) flattened and concatenated into y.
    S, B, I, H = 5, 2, 3, 4
    for case, op, attrs, with_bias, with_init in [
        ("lstm_forward", "LSTM", {}, True, True),
        ("lstm_reverse", "LSTM", {"direction": "reverse"}, True, False),
        ("lstm_bidirectional_layout1", "LSTM", {"direction": "bidirectional", "layout": 1},
         False, False),
        ("gru_bidirectional", "GRU", {"direction": "bidirectional"}, True, True),
        ("gru_linear_before_reset_layout1", "GRU", {"linear_before_reset": 1, "layout": 1},
         True, True),
    ]:
        g = 4 if op == "LSTM" else 3
        nd = 2 if attrs.get("direction") == "bidirectional" else 1
        layout = attrs.get("layout", 0)
        xs = [S, B, I] if layout == 0 else [B, S, I]
        ss = [nd, B, H] if layout == 0 else [B, nd, H]
        init = lambda n, sh: helper.make_tensor(n, TensorProto.FLOAT, sh,
                                                rng.standard_normal(sh).astype(np.float32).flatten() * 0.5)
        inits = [init("W", [nd, g * H, I]), init("R", [nd, g * H, H])]
        ins = ["x", "W", "R"]
        ins.append("B" if with_bias else "")
        if with_bias:
            inits.append(init("B", [nd, 2 * g * H]))
        ins.append("")  # sequence_lens
        feeds = {"x": rng.standard_normal(xs).astype(np.float32)}
        graph_in = [fin("x", xs)]
        if with_init:
            ins.append("h0")
            feeds["h0"] = rng.standard_normal(ss).astype(np.float32)
            graph_in.append(fin("h0", ss))
            if op == "LSTM":
                ins.append("c0")
                feeds["c0"] = rng.standard_normal(ss).astype(np.float32)
                graph_in.append(fin("c0", ss))
        outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
        nodes = [helper.make_node(op, ins, outs, hidden_size=H, **attrs)]
        for o in outs:
            nodes.append(helper.make_node("Flatten", [o], [o + "_f"], axis=0))
        nodes.append(helper.make_node("Concat", [o + "_f" for o in outs], ["y"], axis=1))
        save(out, case, nodes, graph_in, feeds, inits=inits,
             reference="onnx" if layout == 1 else "onnxruntime")
    exporter_ops(out)


def exporter_ops(out):
    """What the held-out architectures of tools/export_real_onnx.py (2026-12-06) needed
    beyond the fixtures above (a stream of their own, so the cases above keep their values): 1-D convolutions (Whisper,
    wav2vec2), auto_pad (EfficientNet), InstanceNormalization (wav2vec2's GroupNorm),
    GatherElements (RoBERTa, DeBERTa), ReduceL2 and its kin (wav2vec2's weight norm)."""
    rng = np.random.default_rng(2027)
    f32 = lambda *sh: rng.standard_normal(sh).astype(np.float32)
    w_init = lambda n, a: helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.flatten())
    # Conv1d: grouped, strided, dilated, uneven pads, with a bias; and auto_pad on 1-D.
    save(out, "conv1d_grouped_strided", [helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], group=2, strides=[2], pads=[1, 2], dilations=[2])],
        [fin("x", [2, 4, 11])], {"x": f32(2, 4, 11)},
        inits=[w_init("w", f32(6, 2, 3)), w_init("b", f32(6))])
    save(out, "conv1d_same_upper", [helper.make_node(
        "Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER")],
        [fin("x", [1, 3, 9])], {"x": f32(1, 3, 9)}, inits=[w_init("w", f32(5, 3, 4))])
    # auto_pad on 2-D: SAME_UPPER with stride 2 (odd total pad: the extra one at the end),
    # SAME_LOWER with an even kernel (at the beginning), VALID, and a MaxPool.
    save(out, "conv_same_upper_stride2", [helper.make_node(
        "Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])],
        [fin("x", [1, 3, 7, 8])], {"x": f32(1, 3, 7, 8)}, inits=[w_init("w", f32(4, 3, 3, 3))])
    save(out, "conv_same_lower_even", [helper.make_node(
        "Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER")],
        [fin("x", [1, 2, 5, 6])], {"x": f32(1, 2, 5, 6)}, inits=[w_init("w", f32(3, 2, 2, 2))])
    save(out, "conv_valid", [helper.make_node(
        "Conv", ["x", "w"], ["y"], auto_pad="VALID", strides=[1, 2])],
        [fin("x", [1, 2, 6, 7])], {"x": f32(1, 2, 6, 7)}, inits=[w_init("w", f32(3, 2, 3, 3))])
    save(out, "maxpool_same_upper", [helper.make_node(
        "MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")],
        [fin("x", [1, 2, 7, 6])], {"x": f32(1, 2, 7, 6)})
    # InstanceNormalization over 3-D and 4-D inputs (means far from zero: the variance must
    # not lose them).
    for case, shape in [("instancenorm_3d", [2, 3, 10]), ("instancenorm_4d", [1, 4, 3, 5])]:
        c = shape[1]
        sc, bi = f32(c), f32(c)
        bc = (1, c) + (1,) * (len(shape) - 2)
        axes = tuple(range(2, len(shape)))

        def inorm(feeds, sc=sc, bi=bi, bc=bc, axes=axes):
            x = feeds["x"].astype(np.float64)
            mu = x.mean(axis=axes, keepdims=True)
            var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
            return sc.reshape(bc) * (x - mu) / np.sqrt(var + 1e-3) + bi.reshape(bc)

        save(out, case, [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"],
                                          epsilon=1e-3)],
             [fin("x", shape)], {"x": f32(*shape) + 4.0},
             inits=[w_init("s", sc), w_init("b", bi)], reference=inorm)
    # GatherElements: constant indices with negatives on the last axis (DeBERTa's form),
    # run-time indices on axis 0 with a smaller extent off the axis.
    gi = np.array([[[0, -1, 2], [1, 1, -4]], [[3, 0, 0], [-2, 2, 1]]], dtype=np.int64)
    save(out, "gatherelements_const_neg", [helper.make_node(
        "GatherElements", ["x", "i"], ["y"], axis=-1)],
        [fin("x", [2, 2, 4])], {"x": f32(2, 2, 4)},
        inits=[helper.make_tensor("i", TensorProto.INT64, gi.shape, gi.flatten())])
    save(out, "gatherelements_runtime_axis0",
         [helper.make_node("Cast", ["i"], ["ii"], to=TensorProto.INT64),
          helper.make_node("GatherElements", ["x", "ii"], ["y"], axis=0)],
         [fin("x", [3, 4]), fin("i", [2, 3])],
         {"x": f32(3, 4), "i": np.array([[2, 0, 1], [-1, 2, 0]], dtype=np.float32)})
    # ReduceSumSquare, ReduceL2, ReduceL1, ReduceMin: several axes, one axis, all axes.
    rx = f32(2, 3, 4)
    for case, op, attrs in [("reducesumsquare_axes12", "ReduceSumSquare", {"axes": [1, 2]}),
                            ("reducel2_last_keep", "ReduceL2", {"axes": [-1], "keepdims": 1}),
                            ("reducel1_axis0", "ReduceL1", {"axes": [0], "keepdims": 0}),
                            ("reducemin_all", "ReduceMin", {"keepdims": 0}),
                            ("reducemin_middle", "ReduceMin", {"axes": [1], "keepdims": 1})]:
        save(out, case, [helper.make_node(op, ["x"], ["y"], **attrs)], [fin("x", [2, 3, 4])],
             {"x": rx})


if __name__ == "__main__":
    main()
