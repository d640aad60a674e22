"""Measurement and policy from Python: bench, the store, the gate's decision and the report."""

import json

import pytest

import tensorforge as tf


def test_bench_store_gate_report(tmp_path, cli):
    store = tmp_path / "s.sqlite"
    recs = tf.bench("gemm:m=64:n=64:k=64", iterations=5, time_budget_ms=20, store=store)
    assert len(recs) == 1
    r = recs[0]
    assert r["workload"]["kind"] == "gemm" and r["stats"]["count"] >= 5
    assert r["device"]["cpu_model"]
    s = tf.Store(store)
    runs = s.runs()
    assert len(runs) == 1 and runs[0].run_id == r["run_id"]
    assert s.records(r["run_id"]) == recs
    # the same records against themselves: no change, not a failure
    g = tf.gate(recs, recs)
    assert g.exit_code != 1
    # the CLI decides the same on the same records
    f = tmp_path / "r.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in recs))
    c = json.loads(cli("gate", "--baseline", f, "--candidate", f, "--json", check=False).stdout)
    assert c["exit_code"] == g.exit_code
    assert c["overall"] == g.overall
    md = tf.report(recs, recs)
    assert "gemm" in md
    assert tf.report(recs, recs, format="html").lstrip().lower().startswith("<!doctype html")
    with pytest.raises(ValueError):
        tf.report(recs, recs, format="pdf")


def test_store_errors_are_one_line_and_hide_passwords():
    with pytest.raises(OSError) as e:
        tf.Store("postgres://u:secret@127.0.0.1:1/db")
    assert "secret" not in str(e.value)
    assert "\n" not in str(e.value).strip()
    with pytest.raises(ValueError):
        tf.gate([{"not": "a record"}], [])
