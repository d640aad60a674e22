"""`tensorforge.Session` against onnxruntime on the ONNX fixtures, with the fixtures' own
input files, and its metadata and errors."""

import pathlib

import numpy as np
import onnxruntime as ort
import pytest

import tensorforge as tf

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = sorted(
    p.parent.name
    for p in (ROOT / "examples" / "onnx").glob("*/model.onnx")
    if (p.parent / "inputs").is_dir()
)


def feeds(name):
    return {p.stem: np.load(p) for p in sorted((ROOT / "examples/onnx" / name / "inputs").glob("*.npy"))}


def test_there_are_fixtures():
    assert len(FIXTURES) >= 20, FIXTURES


@pytest.mark.parametrize("name", FIXTURES)
def test_session_matches_onnxruntime(name):
    path = str(ROOT / "examples/onnx" / name / "model.onnx")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref_sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    f = feeds(name)
    ref = ref_sess.run(None, f)
    s = tf.Session(path, threads=1)
    assert [i.name for i in s.get_inputs()] == [i.name for i in ref_sess.get_inputs()]
    assert [o.name for o in s.get_outputs()] == [o.name for o in ref_sess.get_outputs()]
    for a, b in zip(s.get_inputs(), ref_sess.get_inputs()):
        assert a.type == b.type, (a, b)
        assert a.shape == b.shape, (a.shape, b.shape)
    out = s.run(None, f)
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.shape == r.shape
        r64 = r.astype(np.float64)
        scale = max(1.0, float(np.max(np.abs(r64)))) if r.size else 1.0
        np.testing.assert_allclose(o.astype(np.float64), r64, rtol=0, atol=1e-4 * scale)
    # a second run reuses the compiled shape
    out2 = s.run([ref_sess.get_outputs()[0].name], f)
    np.testing.assert_array_equal(out2[0], out[0])


def test_new_shapes_bind_the_symbolic_dims():
    path = str(ROOT / "examples/onnx/bert_eager_ts/model.onnx")
    s = tf.Session(path, threads=1)
    ids = s.inputs[0]
    assert any(isinstance(d, str) for d in ids.shape), ids.shape
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch, seq in [(1, 4), (2, 7)]:
        rng = np.random.default_rng(batch)
        f = {
            "input_ids": rng.integers(0, 100, (batch, seq)).astype(np.int64),
            "attention_mask": np.ones((batch, seq), np.int64),
            "token_type_ids": np.zeros((batch, seq), np.int64),
        }
        f = {i.name: f[i.name] for i in ref.get_inputs()}
        o, r = s.run(None, f)[0], ref.run(None, f)[0]
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, atol=1e-4 * max(1.0, np.abs(r).max()))


def test_errors():
    path = str(ROOT / "examples/onnx/tiny_mlp/model.onnx")
    s = tf.Session(path)
    x = np.zeros(s.inputs[0].shape, np.float32)
    with pytest.raises(ValueError, match="is not an input"):
        s.run(None, {"nope": x})
    with pytest.raises(ValueError, match="was not given"):
        s.run(None, {})
    with pytest.raises(ValueError, match="is not an output"):
        s.run(["zz"], {s.inputs[0].name: x})
    with pytest.raises(ValueError):
        s.run(None, {s.inputs[0].name: np.zeros((3, 3, 3), np.float32)})
    with pytest.raises(FileNotFoundError):
        tf.Session("/nonexistent/model.onnx")
    with pytest.raises(ValueError):
        tf.Session(path, threads=0)


def _addr(a):
    return a.__array_interface__["data"][0]


def test_outputs_live_as_long_as_their_arrays_and_then_serve_later_runs():
    """An output array's memory is never written by a later run while the array (or a view
    of it) lives; once both are gone, its vector goes back to the session and serves a later
    run's output, with that run's values. (tiny_mlp's product takes a scratch vector of the
    output's length first, so a vector handed back circulates between the two and is an
    output again within two runs.)"""
    path = str(ROOT / "examples/onnx/tiny_mlp/model.onnx")
    s = tf.Session(path, threads=1)
    shape = s.inputs[0].shape
    name = s.inputs[0].name
    x0 = np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    x1 = (x0[..., ::-1] * 3).copy()
    want0 = s.run(None, {name: x0})[0].copy()
    want1 = s.run(None, {name: x1})[0].copy()
    assert not np.array_equal(want0, want1)
    kept = s.run(None, {name: x0})[0]
    assert kept.flags.writeable
    view = kept.reshape(-1)[:3]
    addr = _addr(kept)
    for _ in range(3):
        o = s.run(None, {name: x1})[0]
        assert _addr(o) != addr
        np.testing.assert_array_equal(o, want1)
        del o
    np.testing.assert_array_equal(kept, want0)
    del kept
    # The view keeps the vector alive: not reused, not written.
    o = s.run(None, {name: x1})[0]
    assert _addr(o) != addr
    del o
    np.testing.assert_array_equal(view, want0.reshape(-1)[:3])
    del view
    # Had the session freed the vector, this array of its size would most likely take its
    # memory; handed back, the vector holds the next run's output instead.
    blocker = np.empty_like(want0)
    seen = []
    for _ in range(3):
        again = s.run(None, {name: x1})[0]
        np.testing.assert_array_equal(again, want1)
        seen.append(_addr(again))
        del again
    assert addr in seen, "the freed output's vector was not reused"
    assert _addr(blocker) != addr
