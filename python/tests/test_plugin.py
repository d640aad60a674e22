"""The pytest plugin (``tensorforge.pytest_plugin``, loaded through the ``pytest11`` entry
point): recording pytest-benchmark results into a store, gating them against the history,
and its usage and operational errors. Each test runs pytest inside pytest (``pytester``)."""

import json
import re

import pytest

import tensorforge

pytest_plugins = ["pytester"]

FAST = """
def test_sum(benchmark):
    benchmark(sum, range(1000))
"""

# The same test id (file test_bench.py, test test_sum) with about 2 ms more work per call.
SLOW = """
import time

def work():
    time.sleep(0.002)
    return sum(range(1000))

def test_sum(benchmark):
    benchmark(work)

def test_new(benchmark):
    benchmark(sum, range(10))
"""

# Short benchmarks: at least 10 rounds (the gate's min_samples is 5), 10 ms per benchmark.
QUICK = ["-p", "no:cacheprovider", "--benchmark-min-rounds=10", "--benchmark-max-time=0.01"]


def output(result):
    return "\n".join(result.outlines + result.errlines)


def test_options_are_registered_through_the_entry_point(pytester):
    result = pytester.runpytest("--help")
    assert result.ret == 0
    text = output(result)
    for flag in ("--tf-store", "--tf-gate", "--tf-history", "--tf-policy", "--tf-label"):
        assert flag in text


def test_without_tf_store_the_plugin_does_nothing(pytester):
    pytester.makepyfile(test_bench=FAST)
    result = pytester.runpytest(*QUICK)
    assert result.ret == 0
    assert not [line for line in result.outlines + result.errlines if "tensorforge:" in line]
    assert not list(pytester.path.glob("*.sqlite"))


def test_records_each_benchmark_with_identity_samples_and_context(pytester, tmp_path):
    store = tmp_path / "s.sqlite"
    pytester.makepyfile(test_bench=FAST)
    # A new store's path as a separate argument (see test_existing_store_as_separate_argument).
    result = pytester.runpytest(
        *QUICK, "--tf-store", str(store), "--tf-label", "ci=yes",
        "--benchmark-json", str(tmp_path / "pb.json"),
    )
    assert result.ret == 0, output(result)
    result.stdout.fnmatch_lines(["tensorforge: stored 1 record in *s.sqlite (run *)"])

    st = tensorforge.Store(store)
    runs = st.runs()
    assert len(runs) == 1
    records = st.records(runs[0].run_id)
    assert len(records) == 1
    r = records[0]
    assert r["workload"]["kind"] == "pytest-benchmark"
    assert "test_sum" in r["workload"]["name"]
    assert r["workload"]["name"] == "test_bench.py::test_sum"
    # The name is not part of the fingerprint; the node id in the parameters is.
    assert r["workload"]["params"] == {"test": "test_bench.py::test_sum"}
    assert r["labels"] == {"ci": "yes"}
    assert r["run_id"] == runs[0].run_id
    assert r["run_id"] in output(result)
    # Every round's time is a sample: the same rounds pytest-benchmark wrote itself.
    pb = json.loads((tmp_path / "pb.json").read_text())["benchmarks"][0]["stats"]
    assert r["stats"]["count"] > 0
    assert r["stats"]["count"] == len(r["samples_ns"]) == len(pb["data"]) == pb["rounds"]
    assert r["samples_ns"] == pytest.approx([s * 1e9 for s in pb["data"]])
    # Device and software context of this machine.
    assert r["device"]["kind"] == "cpu"
    assert r["device"]["machine_id"]
    assert r["device"]["logical_cores"] >= 1
    assert r["software"]["tensorforge_version"] == tensorforge.__version__


def test_existing_store_as_separate_argument(pytester, tmp_path):
    # pytest picks its rootdir before it knows --tf-store, so an existing PATH written as a
    # separate argument counts as a test path there; outside the project it would move the
    # rootdir and so every node id (workload name). The plugin refuses that case.
    store = tmp_path / "s.sqlite"
    pytester.makepyfile(test_bench=FAST)
    assert pytester.runpytest(*QUICK, "--tf-store", str(store)).ret == 0
    moved = pytester.runpytest(*QUICK, "--tf-store", str(store))
    assert moved.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in moved.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1 and f"write --tf-store={store}" in errors[0], output(moved)
    assert pytester.runpytest(*QUICK, f"--tf-store={store}").ret == 0
    # A store inside the rootdir does not move it: accepted either way.
    inside = pytester.path / "inside.sqlite"
    assert pytester.runpytest(*QUICK, "--tf-store", str(inside)).ret == 0
    assert pytester.runpytest(*QUICK, "--tf-store", str(inside)).ret == 0
    st = tensorforge.Store(store)
    names = {r["workload"]["name"] for run in st.runs() for r in st.records(run.run_id)}
    assert names == {"test_bench.py::test_sum"}
    assert len(st.runs()) == 2


def test_all_benchmarks_of_a_session_are_one_run(pytester, tmp_path):
    store = tmp_path / "s.sqlite"
    pytester.makepyfile(test_bench="""
        import pytest

        @pytest.mark.parametrize("n", [10, 100])
        @pytest.mark.benchmark(group="sums")
        def test_sum(benchmark, n):
            benchmark(sum, range(n))

        def test_broken(benchmark):
            benchmark(sum, range(10))
            assert False, "fails after measuring"
    """)
    result = pytester.runpytest(*QUICK, f"--tf-store={store}")
    assert result.ret == 1  # test_broken failed
    result.stdout.fnmatch_lines(
        ["tensorforge: stored 2 records in * (1 benchmark(s) of failed tests left out)"]
    )
    st = tensorforge.Store(store)
    (run,) = st.runs()
    records = st.records(run.run_id)
    assert sorted(r["workload"]["name"] for r in records) == sorted([
        "test_bench.py::test_sum[10]", "test_bench.py::test_sum[100]",
    ])
    assert {r["run_id"] for r in records} == {run.run_id}
    by_name = {r["workload"]["name"]: r for r in records}
    assert by_name["test_bench.py::test_sum[10]"]["workload"]["params"] == {
        "n": 10, "group": "sums", "test": "test_bench.py::test_sum[10]",
    }
    assert len({r["fingerprint"] for r in records}) == 2


def test_gate_passes_on_history_and_fails_the_run_on_a_regression(pytester, tmp_path, cli):
    store = str(tmp_path / "s.sqlite")
    pytester.makepyfile(test_bench=FAST)
    # The first run starts the history: the gate does not fail it.
    first = pytester.runpytest(*QUICK, f"--tf-store={store}", "--tf-gate")
    assert first.ret == 0, output(first)
    first.stdout.fnmatch_lines(["tensorforge gate: BASELINE ESTABLISHED (exit 0)*"])
    # Four more unchanged runs: 5 runs of history, what a timed FAIL needs.
    for _ in range(4):
        again = pytester.runpytest(*QUICK, f"--tf-store={store}", "--tf-gate")
        assert again.ret == 0, output(again)
        again.stdout.fnmatch_lines(["tensorforge gate: * (exit [03]) — 1 benchmark(s) *"])
        # (an INCONCLUSIVE line may say what "a FAIL needs"; no verdict line is FAIL)
        assert "tensorforge gate: FAIL" not in output(again)
        assert not re.search(r"^\s+FAIL ", output(again), re.M), output(again)

    pytester.makepyfile(test_bench=SLOW)
    slow = pytester.runpytest(*QUICK, f"--tf-store={store}", "--tf-gate")
    text = output(slow)
    assert slow.ret == pytest.ExitCode.TESTS_FAILED, text
    slow.stdout.fnmatch_lines(["*2 passed*"])  # every test passed; the gate fails the run
    slow.stdout.fnmatch_lines([
        "tensorforge: stored 2 records in *",
        "tensorforge gate: FAIL (exit 1) — 1 benchmark(s) against up to 5 earlier run(s)*",
        "  FAIL test_bench.py::test_sum latency_p50: change +* beyond the spread of 5 baseline run(s)*",
    ])
    assert "  new: test_bench.py::test_new (no earlier comparable run" in text

    # The regressed run is stored all the same (stored before it is gated), as a sixth run.
    st = tensorforge.Store(store)
    assert len(st.runs()) == 6
    # The decision is the library's: gate_history over the same records says FAIL too.
    run_id = re.search(r"tensorforge: stored 2 records in .* \(run ([0-9a-f-]+)\)", text).group(1)
    cand = [r for r in st.records(run_id) if r["workload"]["name"].endswith("::test_sum")]
    assert len(cand) == 1
    g = tensorforge.gate_history(st, cand, runs=5)
    assert (g.overall, g.exit_code) == ("FAIL", 1)
    # ... and so does the CLI's `gate --history 5` on that record.
    f = tmp_path / "cand.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in cand))
    p = cli("gate", "--history", 5, "--candidate", f, "--store", store, "--json", check=False)
    assert p.returncode == 1, p.stderr
    c = json.loads(p.stdout)
    assert (c["overall"], c["exit_code"]) == ("FAIL", 1)


LENIENT = """
schema_version = 1
[history]
min_runs = 2
[metrics.latency_p50]
direction = "higher_is_worse"
max_relative = 1000.0
test = "run_t"
"""


def test_policy_file_and_inconclusive_do_not_fail_the_run(pytester, tmp_path):
    store = tmp_path / "s.sqlite"
    policy = tmp_path / "lenient.toml"
    policy.write_text(LENIENT)
    pytester.makepyfile(test_bench=FAST)
    assert pytester.runpytest(*QUICK, f"--tf-store={store}", "--tf-gate").ret == 0
    pytester.makepyfile(test_bench=SLOW)
    # A policy that allows a 1000-fold slowdown passes the ~250-fold one.
    lenient = pytester.runpytest(
        *QUICK, f"--tf-store={store}", "--tf-gate", f"--tf-policy={policy}", "-k", "test_sum",
    )
    assert lenient.ret == 0, output(lenient)
    lenient.stdout.fnmatch_lines([f"tensorforge gate: PASS (exit 0) — 1 benchmark(s) * policy: {policy}"])
    # The embedded policy with two runs of history: beyond the allowance but too little
    # history to FAIL: INCONCLUSIVE, printed, and the pytest run still passes.
    unsure = pytester.runpytest(*QUICK, f"--tf-store={store}", "--tf-gate", "-k", "test_sum")
    assert unsure.ret == 0, output(unsure)
    unsure.stdout.fnmatch_lines([
        "tensorforge gate: INCONCLUSIVE (exit 3) — 1 benchmark(s) *",
        "  INCONCLUSIVE test_bench.py::test_sum latency_p50: *too little history*",
    ])


def test_gate_without_benchmark_results_is_never_a_pass(pytester, tmp_path):
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = pytester.runpytest(*QUICK, f"--tf-store={tmp_path / 's.sqlite'}", "--tf-gate")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output(result)
    result.stdout.fnmatch_lines(["tensorforge gate: ERROR (exit 2) — no benchmark results*"])
    # Without --tf-gate that is only said.
    result = pytester.runpytest(*QUICK, f"--tf-store={tmp_path / 's.sqlite'}")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["tensorforge: no benchmark results in this session; nothing recorded"])


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--tf-gate"], "--tf-gate needs --tf-store"),
        (["--tf-label", "a=b"], "--tf-label needs --tf-store"),
        (["--tf-store", "{tmp}/s.sqlite", "--tf-label", "novalue"], "invalid --tf-label"),
        (["--tf-store", "{tmp}/s.sqlite", "--tf-policy", "{tmp}/p.toml"], "--tf-policy needs --tf-gate"),
        (["--tf-store", "{tmp}/s.sqlite", "--tf-gate", "--tf-policy", "{tmp}/none.toml"], "--tf-policy: "),
        (["--tf-store", "{tmp}/s.sqlite", "--tf-gate", "--tf-history", "0"], "invalid --tf-history 0"),
        (["--tf-store", "{tmp}/s.sqlite", "-p", "no:benchmark"], "--tf-store needs pytest-benchmark"),
    ],
)
def test_usage_errors(pytester, tmp_path, args, needle):
    pytester.makepyfile(test_bench=FAST)
    result = pytester.runpytest("-p", "no:cacheprovider", *[a.format(tmp=tmp_path) for a in args])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1 and needle in errors[0], output(result)
    assert "Traceback" not in output(result)
    assert "passed" not in output(result)  # nothing ran


def test_store_that_cannot_be_created_is_a_one_line_error(pytester, tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    pytester.makepyfile(test_bench=FAST)
    result = pytester.runpytest(*QUICK, "--tf-store", str(tmp_path / "afile" / "s.sqlite"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1 and errors[0].startswith("ERROR: --tf-store: "), output(result)
    assert "afile" in errors[0]
    assert "Traceback" not in output(result)
    assert "passed" not in output(result)


def test_unreachable_postgres_is_a_one_line_error_without_the_password(pytester):
    pytester.makepyfile(test_bench=FAST)
    url = "postgres://u:secret@127.0.0.1:1/db?connect_retries=0"
    result = pytester.runpytest(*QUICK, "--tf-store", url, "--tf-gate")
    text = output(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "cannot connect" in errors[0], text
    assert "127.0.0.1:1" in errors[0]
    assert "secret" not in text
    assert "Traceback" not in text


def test_store_lost_during_the_session_fails_with_one_line(pytester, tmp_path):
    store = tmp_path / "s.sqlite"
    # The test itself ruins the store after the plugin checked it at start-up.
    pytester.makepyfile(test_bench=f"""
        import pathlib

        def test_sum(benchmark):
            benchmark(sum, range(100))
            p = pathlib.Path({str(store)!r})
            for extra in ("-wal", "-shm"):
                pathlib.Path(str(p) + extra).unlink(missing_ok=True)
            p.write_bytes(b"not a database" * 100)
    """)
    result = pytester.runpytest(*QUICK, f"--tf-store={store}", "--tf-gate")
    text = output(result)
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR, text
    lines = [line for line in result.outlines if line.startswith("tensorforge")]
    assert len(lines) == 1, text
    assert lines[0].startswith(f"tensorforge: error: cannot store the run in {store}: ")
    assert "Traceback" not in text
