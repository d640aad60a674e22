#!/usr/bin/env python3
"""Gate trials of the main job (issue 24): false alarms, power and INCONCLUSIVE rates per metric.

Runs `tensorforge quickstart --json` on this machine:
  1. UNCHANGED runs in one fresh store, the second half with one core kept busy by a spinning
     process (a co-tenant);
  2. COMPUTE slowdown runs: each against a copy of the unchanged history, with
     TENSORFORGE_INJECT_EXTRA_WORK=<workload>=<fraction> (after every call, a fraction-sized
     instance of the same workload runs: its own code, on its own buffers);
  3. MEMORY slowdown runs: the same with <workload>=stream:<fraction> (after every call, a
     read pass over fraction x the workload's compulsory bytes of memory no call touched
     recently: a memory-bound slowdown).
Then prints, per metric, the false-alarm rate (a FAIL in an unchanged run), the power (a FAIL
of the slowed workload's row), and the INCONCLUSIVE rate, overall exit codes, and run times
(min / median / max), as a Markdown table for docs/quickstart.md and as JSON (--out).

Not part of CI: 90 runs take about 30-40 minutes on 2 cores. Usage:
  cargo build --release
  python3 tools/quickstart_trials.py [--unchanged 50] [--compute 20] [--memory 20] \
      [--workload softmax_1024x4096] [--fraction 0.10] [--out trials.json]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

METRICS = ["instructions", "estimated_cycles", "peak_alloc", "latency_p50", "throughput"]


def run_quickstart(tf, store, out_dir, env_extra=None):
    env = dict(os.environ)
    env.pop("TENSORFORGE_INJECT_EXTRA_WORK", None)
    if env_extra:
        env.update(env_extra)
    t0 = time.monotonic()
    p = subprocess.run(
        [tf, "quickstart", "--store", store, "--out-dir", out_dir, "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.monotonic() - t0
    try:
        outcome = json.loads(p.stdout)
    except json.JSONDecodeError:
        sys.exit(f"quickstart printed no JSON (exit {p.returncode}): {p.stderr[-2000:]}")
    return p.returncode, outcome, wall


def metric_verdicts(outcome, workload=None):
    """Per metric: the worst verdict over workloads (or of one workload), NOT_COMPARABLE skipped."""
    order = {"ERROR": 4, "FAIL": 3, "INCONCLUSIVE": 2, "WAIVED": 1, "PASS": 1}
    out = {}
    gate = outcome.get("gate")
    if not gate:
        return out
    for r in gate["rows"]:
        m, v = r["metric"], r["verdict"]
        if m == "workload" or v == "NOT_COMPARABLE":
            continue
        if workload is not None and r["workload"] != workload:
            continue
        if m not in out or order.get(v, 0) > order.get(out[m], 0):
            out[m] = v
    return out


class Spinner:
    """One core kept busy by another process."""

    def __enter__(self):
        self.p = subprocess.Popen(["sh", "-c", "while :; do :; done"])
        return self

    def __exit__(self, *a):
        self.p.kill()
        self.p.wait()


def reference_spread(store):
    """Per workload, over the unchanged runs in `store`: the spread between runs (standard
    deviation of ln p50) of the raw median and of the median divided by the reference loop
    timed around it (label reference_loop_ns)."""
    import math
    import sqlite3

    con = sqlite3.connect(store)
    by = {}
    for (text,) in con.execute("SELECT record_json FROM records ORDER BY timestamp_unix_s, id"):
        r = json.loads(text)
        ref = r.get("labels", {}).get("reference_loop_ns")
        if r["workload"]["kind"] == "empty" or not ref:
            continue
        by.setdefault(r["workload"]["name"], []).append((r["stats"]["p50_ns"], float(ref)))
    out = {}
    for name, v in sorted(by.items()):
        if len(v) < 3:
            continue
        raw = [math.log(p) for p, _ in v]
        norm = [math.log(p / ref) for p, ref in v]
        out[name] = {"runs": len(v), "sd_ln_raw": statistics.stdev(raw), "sd_ln_normalized": statistics.stdev(norm)}
    return out


def tally(runs, key):
    n = len(runs)
    per = {}
    for m in METRICS:
        vs = [r[key].get(m) for r in runs if r[key].get(m)]
        per[m] = {
            "compared": len(vs),
            "fail": sum(v == "FAIL" for v in vs),
            "inconclusive": sum(v == "INCONCLUSIVE" for v in vs),
            "error": sum(v == "ERROR" for v in vs),
        }
    codes = {c: sum(r["exit"] == c for r in runs) for c in (0, 1, 2, 3)}
    walls = [r["wall_s"] for r in runs]
    return {
        "runs": n,
        "per_metric": per,
        "exit_codes": codes,
        "wall_s": [min(walls), statistics.median(walls), max(walls)] if walls else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tf", default="target/release/tensorforge")
    ap.add_argument("--unchanged", type=int, default=50)
    ap.add_argument("--compute", type=int, default=20)
    ap.add_argument("--memory", type=int, default=20)
    ap.add_argument("--workload", default="softmax_1024x4096")
    ap.add_argument("--fraction", type=float, default=0.10)
    ap.add_argument("--memory-fraction", type=float, default=None, help="default: --fraction")
    ap.add_argument("--out", default=None, help="write all runs and the summary as JSON")
    a = ap.parse_args()
    tf = os.path.abspath(a.tf)
    if not os.access(tf, os.X_OK):
        sys.exit(f"no {tf}: run cargo build --release first")
    work = tempfile.mkdtemp(prefix="tf-qs-trials-")
    store = os.path.join(work, "history.sqlite")
    out_dir = os.path.join(work, "reports")
    cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p' | head -1"], capture_output=True, text=True).stdout.strip()
    flags = open("/proc/cpuinfo").read()
    isa = "AVX-512" if "avx512f" in flags else ("AVX2" if "avx2" in flags else "SSE")
    print(f"CPU: {cpu} ({isa}), {os.cpu_count()} logical cores; work dir {work}", flush=True)
    runs = {"unchanged": [], "compute": [], "memory": []}
    half = a.unchanged // 2
    for i in range(1, a.unchanged + 1):
        loaded = i > half
        if loaded:
            with Spinner():
                code, o, wall = run_quickstart(tf, store, out_dir)
        else:
            code, o, wall = run_quickstart(tf, store, out_dir)
        r = {"i": i, "loaded": loaded, "exit": code, "wall_s": wall, "history": o.get("history_runs", 0),
             "verdicts": metric_verdicts(o), "decision": o.get("decision")}
        runs["unchanged"].append(r)
        print(f"unchanged {i:2d} ({'loaded' if loaded else 'idle'}): exit {code}, {wall:.1f} s, {r['verdicts']}", flush=True)
    base = os.path.join(work, "base.sqlite")
    shutil.copy(store, base)
    spread = reference_spread(store)
    mem_frac = a.memory_fraction if a.memory_fraction is not None else a.fraction
    for kind, n, inj in (
        ("compute", a.compute, f"{a.workload}={a.fraction}"),
        ("memory", a.memory, f"{a.workload}=stream:{mem_frac}"),
    ):
        for i in range(1, n + 1):
            trial = os.path.join(work, f"{kind}.sqlite")
            shutil.copy(base, trial)
            loaded = i > n // 2
            env = {"TENSORFORGE_INJECT_EXTRA_WORK": inj}
            if loaded:
                with Spinner():
                    code, o, wall = run_quickstart(tf, trial, out_dir, env)
            else:
                code, o, wall = run_quickstart(tf, trial, out_dir, env)
            r = {"i": i, "loaded": loaded, "exit": code, "wall_s": wall,
                 "verdicts": metric_verdicts(o, a.workload), "all": metric_verdicts(o),
                 "injected": o.get("injected"), "decision": o.get("decision")}
            runs[kind].append(r)
            print(f"{kind} {i:2d} ({inj}, {'loaded' if loaded else 'idle'}): exit {code}, {wall:.1f} s, {r['verdicts']}", flush=True)
    # False alarms count only runs that were gated (the first run starts the history).
    gated = [r for r in runs["unchanged"] if r["history"] >= 1]
    after5 = [r for r in runs["unchanged"] if r["history"] >= 5]
    summary = {
        "cpu": cpu,
        "isa": isa,
        "unchanged_gated": tally(gated, "verdicts"),
        "unchanged_after_5_runs": tally(after5, "verdicts"),
        "compute": tally(runs["compute"], "verdicts"),
        "memory": tally(runs["memory"], "verdicts"),
        "injections": {"compute": f"{a.workload}={a.fraction}", "memory": f"{a.workload}=stream:{mem_frac}"},
        "reference_loop_spread": spread,
    }
    print()
    print(f"CPU: {cpu} ({isa})")
    print("| metric | false alarms (unchanged) | INCONCLUSIVE (unchanged, ≥ 5 runs of history) | power, compute +10 % | power, memory-bound +10 % |")
    print("|---|---|---|---|---|")
    for m in METRICS:
        u, u5 = summary["unchanged_gated"]["per_metric"][m], summary["unchanged_after_5_runs"]["per_metric"][m]
        c, mm = summary["compute"]["per_metric"][m], summary["memory"]["per_metric"][m]
        print(f"| {m} | {u['fail']} / {u['compared']} | {u5['inconclusive']} / {u5['compared']} | {c['fail']} / {c['compared']} | {mm['fail']} / {mm['compared']} |")
    for k in ("unchanged_gated", "unchanged_after_5_runs", "compute", "memory"):
        t = summary[k]
        w = t["wall_s"]
        ws = f"{w[0]:.1f} / {w[1]:.1f} / {w[2]:.1f} s" if w else "-"
        print(f"- {k}: {t['runs']} runs; exit 0/1/2/3 = {t['exit_codes'][0]}/{t['exit_codes'][1]}/{t['exit_codes'][2]}/{t['exit_codes'][3]}; job time min/median/max {ws}")
    print()
    print("Spread between unchanged runs (sd of ln p50): raw vs divided by the reference loop timed around the workload")
    print("| workload | runs | raw | normalized |")
    print("|---|---|---|---|")
    for name, v in spread.items():
        print(f"| {name} | {v['runs']} | {v['sd_ln_raw'] * 100:.1f} % | {v['sd_ln_normalized'] * 100:.1f} % |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"summary": summary, "runs": runs}, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
