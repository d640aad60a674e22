"""The kernels on NumPy arrays against NumPy references written out here, the CLI's error
text, borrowing and the GIL."""

import threading

import numpy as np
import pytest

import tensorforge as tf


def np_logsumexp(x):
    x = np.asarray(x, np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    return (m + np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True)))[..., 0]


def test_logaddexp_matches_numpy_and_survives_overflow():
    rng = np.random.default_rng(0)
    a = rng.uniform(-50, 50, 10_000).astype(np.float32)
    b = rng.uniform(-50, 50, 10_000).astype(np.float32)
    np.testing.assert_allclose(tf.logaddexp(a, b), np.logaddexp(a, b), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(tf.logaddexp2(a, b), np.logaddexp2(a, b), rtol=2e-6, atol=2e-6)
    # log(e^1000 + e^1000) = 1000 + ln 2; the naive form overflows to inf.
    big = np.array([1000.0], np.float32)
    assert tf.logaddexp(big, big)[0] == pytest.approx(1000 + np.log(2), rel=1e-6)
    assert np.isinf(tf.logaddexp(big, big, naive=True)[0])
    d = rng.standard_normal(64)
    assert tf.logaddexp(d, d).dtype == np.float64


def test_row_kernels_match_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(0, 30, (3, 5, 257)).astype(np.float32)
    ref = np_logsumexp(x)
    out = tf.logsumexp(x)
    assert out.shape == (3, 5)
    np.testing.assert_allclose(out, ref, rtol=1e-5)
    sm = tf.softmax(x)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(tf.log_softmax(x), x - ref[..., None], rtol=1e-5, atol=1e-4)


def test_strided_input_is_copied_not_refused():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    assert not x.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(tf.softmax(x), tf.softmax(np.ascontiguousarray(x)))


def test_quantize_matches_numpy_round_half_even():
    x = np.array([-1.0, 0.0, 0.25, 0.75, 1.25, 300.0, -300.0], np.float32)
    scale, zp = 0.5, 3
    ref = np.clip(np.round(x / scale) + zp, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(tf.quantize(x, scale, zp), ref)
    ref8 = np.clip(np.round(x / scale) + zp, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(tf.quantize(x, scale, zp, dtype="i8"), ref8)
    q = tf.quantize(x, scale, zp)
    np.testing.assert_allclose(tf.dequantize(q, scale, zp), (q.astype(np.float32) - zp) * scale)
    # per axis: channel 0 scale 0.5 zp 10 → 1/0.5 + 10 = 12; channel 1 scale 2 → 4/2 = 2
    np.testing.assert_array_equal(
        tf.quantize(np.array([[1.0, 4.0]], np.float32), [0.5, 2.0], [10, 0], axis=1), [[12, 2]]
    )
    # requantize 100 codes of scale 0.1 (zp 0) into scale 0.2: 100·0.1/0.2 = 50
    assert tf.requantize(np.array([100], np.uint8), 0.1, 0, 0.2)[0] == 50


def test_rmsnorm_swiglu_matches_numpy():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 16)).astype(np.float32)
    g = rng.standard_normal(16).astype(np.float32)
    wg = rng.standard_normal((16, 24)).astype(np.float32)
    wu = rng.standard_normal((16, 24)).astype(np.float32)
    eps = 1e-6
    x64 = x.astype(np.float64)
    h = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * g
    gg, uu = h @ wg, h @ wu
    ref = gg / (1 + np.exp(-gg)) * uu
    out = tf.rmsnorm_swiglu(x, g, wg, wu, eps)
    assert out.shape == (2, 3, 24)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_errors_are_value_errors_with_the_clis_text(cli, tmp_path):
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    with pytest.raises(ValueError) as e:
        tf.softmax(x)
    np.save(tmp_path / "x.npy", x)
    p = cli("kernel", "softmax", "--in", tmp_path / "x.npy", "--out", tmp_path / "y.npy", check=False)
    assert p.returncode == 2
    assert str(e.value) in p.stderr, (str(e.value), p.stderr)
    with pytest.raises(ValueError, match="inputs differ in shape"):
        tf.logaddexp(np.zeros(3, np.float32), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="`scale` is required|invalid scale"):
        tf.quantize(np.zeros(3, np.float32), 0.0)
    with pytest.raises(ValueError, match="dtype"):
        tf.quantize(np.zeros(3, np.float32), 1.0, dtype="u4")


def test_the_gil_is_released_while_a_kernel_runs():
    # A Python thread counts while the main thread is inside one kernel call over 8 Mi
    # elements (tens of ms). Were the GIL held for the whole call, the counter could not move.
    a = np.random.default_rng(3).standard_normal(8 << 20).astype(np.float32)
    counter = [0]
    stop = threading.Event()
    inside = threading.Event()

    def spin():
        while not stop.is_set():
            if inside.is_set():
                counter[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        best = 0
        for _ in range(3):
            counter[0] = 0
            inside.set()
            tf.logaddexp(a, a)
            inside.clear()
            best = max(best, counter[0])
    finally:
        stop.set()
        t.join()
    assert best > 0
