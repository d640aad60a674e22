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


def test_postgres_store_when_one_is_given():
    # CI starts a throw-away PostgreSQL server and requires this half (as the Rust store
    # tests do); elsewhere it prints SKIPPED without TENSORFORGE_TEST_POSTGRES.
    import os

    url = os.environ.get("TENSORFORGE_TEST_POSTGRES")
    if not url:
        if os.environ.get("TENSORFORGE_TEST_POSTGRES_REQUIRED") == "1":
            pytest.fail("TENSORFORGE_TEST_POSTGRES_REQUIRED=1 but TENSORFORGE_TEST_POSTGRES is not set")
        pytest.skip("SKIPPED: no PostgreSQL server (set TENSORFORGE_TEST_POSTGRES)")
    recs = tf.bench("gemm:m=32:n=32:k=32", iterations=3, time_budget_ms=5)
    s = tf.Store(url)
    from urllib.parse import urlparse

    password = urlparse(url).password
    assert not password or password not in s.describe(), s.describe()
    s.insert_run(recs)
    assert s.records(recs[0]["run_id"]) == recs
    assert any(r.run_id == recs[0]["run_id"] for r in s.runs())


def test_compare_two_commands():
    r = tf.compare("true", "true", rounds=3, max_rounds=3, timeout_s=30)
    assert r.result.exit_code in (0, 3)  # the same command on both sides is never a regression
    assert r.rounds == 3
    with pytest.raises(ValueError, match="--rounds"):
        tf.compare("true", "true", rounds=2)
    with pytest.raises(ValueError, match="candidate"):
        tf.compare("true", "false", rounds=3)
