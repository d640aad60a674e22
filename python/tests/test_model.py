"""Every model function's `to_dict()` equals the CLI's `--json` object for the same
arguments, and results read as attributes."""

import json

import pytest

import tensorforge as tf


def cli_json(cli, *args):
    return json.loads(cli(*args, "--json").stdout)


def test_analyze_gemm_equals_cli(cli):
    r = tf.analyze_gemm(4096, 4096, 4096, hw="google_tpu_v4", dtype="bf16", tile=(128, 128, 64), pe=(64, 64))
    assert r.to_dict() == cli_json(
        cli, "analyze", "gemm", "--m", 4096, "--n", 4096, "--k", 4096, "--hw", "google_tpu_v4",
        "--dtype", "bf16", "--tile", "128x128x64", "--pe", "64x64",
    )
    assert tf.analyze_gemm(256, 256, 256, hw="h100", pe="32x32", clock_hz=1e9).to_dict() == cli_json(
        cli, "analyze", "gemm", "--m", 256, "--n", 256, "--k", 256, "--hw", "h100", "--pe", "32x32",
        "--clock-hz", 1e9,
    )
    assert r.evidence == "model"
    assert r.flops == 2 * 4096**3  # 2·M·N·K


def test_analyze_conv2d_equals_cli(cli):
    r = tf.analyze_conv2d(cin=64, cout=128, height=56, width=56, kernel=3, pad=1, stride=(2, 2))
    assert r.to_dict() == cli_json(
        cli, "analyze", "conv2d", "--cin", 64, "--cout", 128, "--height", 56, "--width", 56,
        "--kernel", 3, "--pad", 1, "--stride", "2x2",
    )


def test_transformer_model_and_serve_equal_cli(cli, root):
    assert tf.analyze_transformer("transformer_small", hw="a100").to_dict() == cli_json(
        cli, "analyze", "transformer", "--preset", "transformer_small", "--hw", "a100"
    )
    cfg = root / "examples/models/llama3_8b_config.json"
    assert tf.analyze_model(cfg, seq=512, hw="h100").to_dict() == cli_json(
        cli, "analyze", "model", "--config", cfg, "--seq", 512, "--hw", "h100"
    )
    m = tf.analyze_model(json.loads(cfg.read_text()), seq=512, hw="h100")
    assert m.to_dict()["totals"] == cli_json(
        cli, "analyze", "model", "--config", cfg, "--seq", 512, "--hw", "h100"
    )["totals"]
    assert tf.serve(cfg, hw="h100", tp=2, batch=[1, 8], context=[2048]).to_dict() == cli_json(
        cli, "serve", "--config", cfg, "--hw", "h100", "--tp", 2, "--batch", "1,8", "--context", 2048
    )


def test_quantization_groups_equal_cli(cli, root):
    cfg = root / "examples/models/llama3_8b_config.json"
    q = tf.serve(cfg, hw="h100", batch=[1], context=[2048], weight_dtype="int4", group_size=128, zero_points=True)
    assert q.to_dict() == cli_json(
        cli, "serve", "--config", cfg, "--hw", "h100", "--batch", 1, "--context", 2048,
        "--weight-dtype", "int4", "--group-size", 128, "--zero-points",
    )
    # 4 015 130 624 B of int4 values + 62 736 416 groups · (2 + 0.5) B.
    assert q.to_dict()["weight_bytes_per_device"] == 4_015_130_624 + 125_472_832 + 31_368_208
    m = tf.analyze_model(cfg, seq=512, hw="h100", weight_dtype="int4", group_size=128)
    assert m.to_dict()["totals"]["weight_bytes"] == 4_015_130_624 + 125_472_832
    with pytest.raises(ValueError, match="group_size"):
        tf.serve(cfg, hw="h100", weight_dtype="int4", zero_points=True)
    with pytest.raises(ValueError, match="narrower"):
        tf.serve(cfg, hw="h100", group_size=128)


def test_explore_and_hardware_equal_cli(cli):
    r = tf.explore_gemm(512, 512, 512, tile_m=[64, 128], tile_n=[64, 128], tile_k=[32, 64], hw="balanced")
    c = cli_json(
        cli, "explore", "gemm", "--m", 512, "--n", 512, "--k", 512, "--tile-m", "64,128",
        "--tile-n", "64,128", "--tile-k", "32,64", "--hw", "balanced",
    )
    d = r.to_dict()
    # wall-clock fields of the search differ between two runs; everything else is equal
    for x in (d, c):
        for key in [k for k in x if "elapsed" in k or "per_s" in k or k.endswith("_ns")]:
            x.pop(key)
    assert d == c
    assert r.why and r.best
    # Ranked by energy: the same as the CLI, the best spends the least; a bad ranking name
    # is a ValueError naming the valid ones.
    e = tf.explore_gemm(512, 512, 512, tile_m=[64, 128], tile_n=[64, 128], tile_k=[32, 64], hw="balanced", rank="energy")
    c = cli_json(
        cli, "explore", "gemm", "--m", 512, "--n", 512, "--k", 512, "--tile-m", "64,128",
        "--tile-n", "64,128", "--tile-k", "32,64", "--hw", "balanced", "--rank", "energy",
    )
    d = e.to_dict()
    for x in (d, c):
        for key in [k for k in x if "elapsed" in k or "per_s" in k]:
            x.pop(key)
    assert d == c
    best = d["best"]["energy"]["total_pj"]
    assert all(t["energy"]["total_pj"] >= best for t in d["top"])
    with pytest.raises(ValueError, match="latency, energy, edp"):
        tf.explore_gemm(64, 64, 64, tile_m=[64], tile_n=[64], tile_k=[64], rank="power")
    assert tf.hardware("h100").to_dict() == cli_json(cli, "hw", "show", "h100")
    assert [h.to_dict() for h in tf.hardware_presets()] == cli_json(cli, "hw", "list")["presets"]


def test_graph_reports_equal_cli(cli, root):
    g = root / "examples/graphs/rmsnorm_swiglu_mlp.json"
    assert tf.fuse_report(g).to_dict() == cli_json(cli, "fuse", g)
    assert tf.plan_memory(g).to_dict() == cli_json(cli, "plan-memory", g)


def test_results_read_as_attributes_and_errors_are_value_errors():
    r = tf.analyze_gemm(preset=None, m=64, n=64, k=64)
    assert r.workload.m == 64
    with pytest.raises(AttributeError, match="no such field"):
        r.nope
    with pytest.raises(ValueError, match="preset"):
        tf.analyze_gemm(m=64)
    with pytest.raises(ValueError, match="unknown"):
        tf.analyze_gemm(64, 64, 64, hw="no_such_chip")
    with pytest.raises(ValueError):
        tf.analyze_gemm(64, 64, 64, dtype="fp7")
    with pytest.raises(TypeError):
        tf.analyze_transformer("transformer_small", no_such_field=1)


def test_rows_make_a_dataframe():
    import pandas as pd  # CI installs it for this test; the package does not depend on it
    r = tf.analyze_transformer("transformer_small")
    rows = r.gemms
    df = pd.DataFrame(rows)
    assert len(df) == len(r.to_dict()["gemms"])
    assert set(r.to_dict()["gemms"][0]) <= set(df.columns)
    assert dict(r.gemms[0]).keys() == r.to_dict()["gemms"][0].keys()


def test_memory_traffic_equals_cli(cli):
    assert tf.memory_traffic(seq=512, dim=1024).to_dict() == cli_json(
        cli, "memory-traffic", "--seq", 512, "--dim", 1024
    )
