"""The TensorForge pytest plugin, loaded through the ``pytest11`` entry point.

``pytest --tf-store URL_OR_PATH`` turns every pytest-benchmark result of the session into a
record (workload kind ``pytest-benchmark``, named by the test's node id, with the node id, the
test's parameters and its benchmark group as workload parameters; every round's time as a
sample; this machine's device and software context; the ``--tf-label`` labels) and stores
them as one run in the SQLite file or PostgreSQL server. ``--tf-gate`` then gates that run
against the newest ``--tf-history`` comparable earlier runs with the library's gate (the
CLI's ``gate --history N`` decision, the embedded policy unless ``--tf-policy``): FAIL or
ERROR fails the pytest run (exit 1), INCONCLUSIVE is printed and does not. A benchmark with
no earlier comparable run starts its history, as the quickstart's first run does, instead of
being the gate's "missing in the baseline" ERROR.

Without ``--tf-store`` the plugin does nothing. A bad option, a missing pytest-benchmark, an
unreadable policy or a store that cannot be opened is a usage error before any test runs;
failing to record at the end is exit 3 with one line. Node ids are relative to pytest's
rootdir, so the benchmarks' identity is too; an existing store path written as a separate
argument that would move the rootdir is refused (write ``--tf-store=PATH``). Left out:
benchmarks whose test failed, xdist (pytest-benchmark measures nothing there), callgrind
counts, and the interleaved ``compare``.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

import pytest

import tensorforge

MAX_HISTORY_RUNS = 10_000
SOURCE = "<pytest session>"


def _one_line(x: Any) -> str:
    """A message on one line: a newline in a name or message cannot forge a line of ours."""
    return " ".join(str(x).split())


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("tensorforge", "TensorForge: record and gate pytest-benchmark results")
    g.addoption(
        "--tf-store", metavar="URL_OR_PATH", default=None,
        help="record every pytest-benchmark result of this session as one run in this store "
        "(an SQLite file path or a postgres:// URL); without it the plugin does nothing. "
        "Write an existing path as --tf-store=PATH (pytest reads a separate one when it "
        "chooses its rootdir)",
    )
    g.addoption(
        "--tf-gate", action="store_true", default=False,
        help="gate the run against its history in --tf-store; a regression (FAIL) or a gate "
        "ERROR fails the pytest run, INCONCLUSIVE does not",
    )
    g.addoption(
        "--tf-history", metavar="N", type=int, default=None,
        help="runs of history each benchmark is gated against (default 5; needs --tf-gate)",
    )
    g.addoption(
        "--tf-policy", metavar="FILE", default=None,
        help="gate policy TOML file (default: the embedded policy; needs --tf-gate)",
    )
    g.addoption(
        "--tf-label", metavar="KEY=VALUE", action="append", default=[],
        help="label attached to every record (repeatable; needs --tf-store)",
    )


def _labels(items: List[str]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise pytest.UsageError(
                f"invalid --tf-label `{_one_line(item)}`: expected KEY=VALUE with a non-empty key"
            )
        out[k.strip()] = v
    return out


def _is_url(location: str) -> bool:
    return location.lower().startswith(("postgres://", "postgresql://"))


def _separate_value(args: List[str]) -> Optional[str]:
    """The value of ``--tf-store VALUE`` written as two arguments (the last one wins)."""
    value = None
    for a, b in zip(args, args[1:]):
        if a == "--":
            break
        if a == "--tf-store":
            value = b
    return value


def _check_rootdir(config: pytest.Config) -> None:
    """pytest chooses its rootdir before it knows plugin options, so the value of
    ``--tf-store PATH`` written as two arguments, when PATH exists, counts as a test path
    there. That can move the rootdir, and with it every node id: the benchmarks' workload
    names would differ from a run that wrote ``--tf-store=PATH``. Refuse when it did."""
    args = shlex.split(os.environ.get("PYTEST_ADDOPTS", "")) + [str(a) for a in config.invocation_params.args]
    value = _separate_value(args)
    if value is None or _is_url(value) or not os.path.exists(value):
        return
    try:
        from _pytest.config.findpaths import determine_setup  # noqa: PLC0415 (private API)

        given = config.args_source == pytest.Config.ArgsSource.ARGS
        kw = {
            "inifile": config.option.inifilename,
            "override_ini": config.option.override_ini,
            "args": [str(a) for a in config.args] if given else [],
            "rootdir_cmd_arg": config.option.rootdir or None,
            "invocation_dir": config.invocation_params.dir,
        }
        accepted = inspect.signature(determine_setup).parameters
        without = Path(determine_setup(**{k: v for k, v in kw.items() if k in accepted})[0])
    except Exception:  # pytest's internals changed: no check rather than a wrong one
        return
    if without != config.rootpath:
        raise pytest.UsageError(
            f"--tf-store {value}: as a separate argument an existing path takes part in "
            f"pytest's choice of rootdir ({config.rootpath} instead of {without}), which "
            f"changes the benchmarks' node ids and so their workload names; write "
            f"--tf-store={value}"
        )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    opt = config.option
    location = opt.tf_store
    if location is None:
        for flag, given in (
            ("--tf-gate", opt.tf_gate),
            ("--tf-history", opt.tf_history is not None),
            ("--tf-policy", opt.tf_policy is not None),
            ("--tf-label", bool(opt.tf_label)),
        ):
            if given:
                raise pytest.UsageError(f"{flag} needs --tf-store URL_OR_PATH (the store to record into)")
        return
    if hasattr(config, "workerinput"):
        # An xdist worker: pytest-benchmark measures nothing there; the controller reports.
        return
    if not opt.tf_gate:
        for flag, given in (("--tf-history", opt.tf_history is not None),
                            ("--tf-policy", opt.tf_policy is not None)):
            if given:
                raise pytest.UsageError(f"{flag} needs --tf-gate")
    if not (config.pluginmanager.has_plugin("benchmark") and hasattr(opt, "benchmark_save_data")):
        raise pytest.UsageError(
            "--tf-store needs pytest-benchmark (pip install pytest-benchmark), which is not "
            "installed or not active in this session"
        )
    # pytest-benchmark keeps every round in memory, where the records' samples come from;
    # this also keeps them in its own --benchmark-save files (never summary statistics only).
    opt.benchmark_save_data = True

    history = 5 if opt.tf_history is None else opt.tf_history
    if not 1 <= history <= MAX_HISTORY_RUNS:
        raise pytest.UsageError(f"invalid --tf-history {history}: must be between 1 and {MAX_HISTORY_RUNS}")
    labels = _labels(opt.tf_label)
    if location.strip() == "":
        raise pytest.UsageError("invalid --tf-store ``: expected an SQLite file path or a postgres:// URL")
    if not _is_url(location):
        _check_rootdir(config)
        location = os.path.abspath(location)
    try:
        store = tensorforge.Store(location)
    except (OSError, ValueError, RuntimeError) as e:
        raise pytest.UsageError(f"--tf-store: {_one_line(e)}") from None
    policy = None
    if opt.tf_policy is not None:
        policy = os.path.abspath(opt.tf_policy)
        try:
            tensorforge.gate([], [], policy=policy)  # reads and checks the policy only
        except (OSError, ValueError, RuntimeError) as e:
            raise pytest.UsageError(f"--tf-policy: {_one_line(e)}") from None
    config.pluginmanager.register(
        _Recorder(store, opt.tf_gate, history, policy, labels), "tensorforge-recorder"
    )


def _jsonable(v: Any) -> Any:
    """A parameter value as JSON: numbers, strings, booleans and None as they are, lists and
    dicts element-wise, anything else (and a non-finite float) as its ``str``."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def _records(labels: Dict[str, str], benches: List[Any], run_id: str) -> List[Dict[str, Any]]:
    out = []
    for b in benches:
        d = b.as_dict(include_data=True, flat=False, stats=True)
        stats = {k: _jsonable(v) for k, v in d["stats"].items()}
        doc = {"benchmarks": [{"name": b.name, "fullname": b.fullname, "stats": stats}]}
        # The fingerprint is (kind, params, dtype): the workload name is not part of it, so the
        # node id goes into the parameters too, or every benchmark would be one workload.
        params = {str(k): _jsonable(v) for k, v in (b.params or {}).items()}
        params["test" if "test" not in params else "pytest.test"] = b.fullname
        if b.group is not None:
            params["group" if "group" not in params else "pytest.group"] = _jsonable(b.group)
        text = tensorforge._native._ingest_pytest_benchmark(
            json.dumps(doc, allow_nan=False), SOURCE, b.fullname, b.fullname,
            params_json=json.dumps(params, allow_nan=False), run_id=run_id,
            labels=labels or None,
        )
        out.append(json.loads(text))
    return out


def _raise_exit(session: pytest.Session, code: pytest.ExitCode) -> None:
    """Raise the session's exit status to ``code``; an earlier failure's status is kept."""
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = code


class _Recorder:
    """The hooks of one session with ``--tf-store``: note failed tests, record and gate at the
    end, print what happened in the terminal summary."""

    def __init__(self, store: "tensorforge.Store", gate: bool, history: int,
                 policy: Optional[str], labels: Dict[str, str]):
        self.store = store
        self.gate = gate
        self.history = history
        self.policy = policy
        self.labels = labels
        self.failed: Set[str] = set()
        self.lines: List[Tuple[str, Dict[str, bool]]] = []
        self.printed = False

    def say(self, text: str, **markup: bool) -> None:
        self.lines.append((text, markup))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # A benchmark whose test failed (or errored in set-up or tear-down) is not recorded.
        if report.failed:
            self.failed.add(report.nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self.say("tensorforge: the session was interrupted; nothing recorded", yellow=True)
            return
        bs = getattr(session.config, "_benchmarksession", None)
        every = list(getattr(bs, "benchmarks", None) or [])
        # Errored or skipped benchmarks have no rounds; those of failed tests are left out.
        benches = [b for b in every if b and not b.has_error and b.fullname not in self.failed]
        left_out = sum(1 for b in every if b and not b.has_error and b.fullname in self.failed)
        note = f" ({left_out} benchmark(s) of failed tests left out)" if left_out else ""
        if not benches:
            if self.gate:
                self.say(f"tensorforge gate: ERROR (exit 2) — no benchmark results in this session{note}: "
                         "nothing to gate (missing evidence is never a pass)", red=True)
                _raise_exit(session, pytest.ExitCode.TESTS_FAILED)
            else:
                self.say(f"tensorforge: no benchmark results in this session{note}; nothing recorded")
            return
        where = self.store.describe()
        run_id = tensorforge._native._new_run_id()
        try:
            records = _records(self.labels, benches, run_id)
        except (OSError, ValueError, RuntimeError) as e:
            self.say(f"tensorforge: error: cannot record the benchmarks: {_one_line(e)}; "
                     "nothing recorded", red=True)
            _raise_exit(session, pytest.ExitCode.INTERNAL_ERROR)
            return
        try:
            self.store.insert_run(records)
        except (OSError, ValueError, RuntimeError) as e:
            self.say(f"tensorforge: error: cannot store the run in {where}: {_one_line(e)}", red=True)
            _raise_exit(session, pytest.ExitCode.INTERNAL_ERROR)
            return
        n = len(records)
        self.say(f"tensorforge: stored {n} record{'s' if n != 1 else ''} in {where} "
                 f"(run {run_id}){note}")
        if self.gate:
            self._gate(session, records)

    def _gate(self, session: pytest.Session, records: List[Dict[str, Any]]) -> None:
        # `Store.history` leaves the candidate's own run out, so the run is stored first.
        try:
            history = self.store.history(records, runs=self.history)
        except (OSError, ValueError, RuntimeError) as e:
            self.say(f"tensorforge: error: cannot read the history from {self.store.describe()}: "
                     f"{_one_line(e)}", red=True)
            _raise_exit(session, pytest.ExitCode.INTERNAL_ERROR)
            return
        known = {h["fingerprint"] for h in history}
        gated = [r for r in records if r["fingerprint"] in known]
        new = [r for r in records if r["fingerprint"] not in known]
        if not gated:
            self.say("tensorforge gate: BASELINE ESTABLISHED (exit 0) — no earlier comparable run "
                     "of these benchmarks on this machine: this run starts their history",
                     green=True)
            return
        try:
            # The same call as tensorforge.gate_history / `gate --history N`, on the
            # benchmarks that have a history.
            g = tensorforge.gate(history, gated, policy=self.policy).to_dict()
        except (OSError, ValueError, RuntimeError) as e:
            self.say(f"tensorforge: error: the gate failed: {_one_line(e)}", red=True)
            _raise_exit(session, pytest.ExitCode.INTERNAL_ERROR)
            return
        code = g["exit_code"]
        colour = {0: "green", 3: "yellow"}.get(code, "red")
        self.say(f"tensorforge gate: {g['overall']} (exit {code}) — {len(gated)} benchmark(s) "
                 f"against up to {self.history} earlier run(s), policy: "
                 f"{_one_line(g.get('policy_source', ''))}", **{colour: True})
        shown = 0
        for row in g.get("rows", []):
            if row.get("decides") and row.get("verdict") in ("FAIL", "ERROR", "INCONCLUSIVE"):
                shown += 1
                self.say(f"  {row['verdict']} {_one_line(row['workload'])} {row['metric']}: "
                         f"{_one_line(row.get('reason') or '')}",
                         **{"yellow" if row["verdict"] == "INCONCLUSIVE" else "red": True})
        if code != 0 and not shown:
            for reason in g.get("reasons", []):
                self.say(f"  {_one_line(reason)}", **{colour: True})
        for r in new:
            self.say(f"  new: {_one_line(r['workload']['name'])} (no earlier comparable run; "
                     "this run starts its history)")
        if code in (1, 2):
            _raise_exit(session, pytest.ExitCode.TESTS_FAILED)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.lines:
            return
        terminalreporter.ensure_newline()
        for text, markup in self.lines:
            terminalreporter.write_line(text, **markup)
        self.printed = True

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.lines and not self.printed:
            # No terminal summary ran (an internal error, or no terminal reporter).
            for text, _ in self.lines:
                sys.stderr.write(text + "\n")
            self.printed = True
