#!/usr/bin/env python3
"""Per-level GEMM traffic from ZigZag, the independent reference for crates/core/src/levels.rs.

For each case (M, N, K, PE rows x cols, dataflow, tile, tile loop order, which operands the
buffer holds) this builds a ZigZag accelerator with the hierarchy TensorForge models:

- a one-word register per operand per PE (served_dimensions [], so one per PE);
- a buffer per operand, shared by the whole array, sized to exactly one tile of that
  operand, so that ZigZag's allocator puts the tile's loops in it (an operand the buffer
  does not hold has no buffer: it goes from DRAM to the registers);
- DRAM for all operands;

and gives ZigZag the complete temporal ordering TensorForge uses (innermost first): the
dataflow's time loop over the tile, the two fold loops (tile / array side) and the three
tile loops, both in the tile loop order. ZigZag then only allocates loops to levels and
counts. Ports are one element wide, so ZigZag's word accesses are element accesses; each
level gets a distinct energy per access so that energies can be compared too.

It writes, per case and per operand and level, ZigZag's element counts in its four
directions (mapping.unit_mem_data_movement), its word accesses (the counts its energy uses)
and its memory energy, to crates/core/data/zigzag_levels.json. The Rust test
`levels::tests::matches_zigzag` holds TensorForge's counts equal to the element counts.

Needs zigzag-dse 3.9.1 (PyPI) and six, kept out of the build:
    python3 -m venv /tmp/zzenv && /tmp/zzenv/bin/pip install zigzag-dse==3.9.1 six
    /tmp/zzenv/bin/python tools/zigzag_levels.py [--out crates/core/data/zigzag_levels.json]
"""
import argparse
import json
import logging
import os
import sys
import tempfile

import yaml

logging.disable(logging.CRITICAL)

from zigzag.api import get_hardware_performance_zigzag  # noqa: E402
from zigzag.mapping.data_movement import DataMoveAttr  # noqa: E402

BITS = 8
# Energy per one-element access (pJ): read, write. Distinct per level, arbitrary values: the
# comparison is of how counts turn into energy, not of the figures.
ENERGY = {"reg": (0.01, 0.0125), "buf": (1.0, 1.25), "dram": (100.0, 125.0)}
LAYOUT = {"os": ("M", "N", "K"), "ws": ("K", "N", "M"), "is": ("K", "M", "N")}
OPS = (("A", "I1", "I"), ("B", "I2", "W"), ("C", "O", "O"))


def memory(name, ops, size_bits, served, cost):
    ports = []
    for o in ops:
        dirs = ["tl", "fh"] if o != "O" else ["tl", "fh", "th", "fl"]
        ports += [f"{o}, {d}" for d in dirs]
    return {
        name: {
            "size": size_bits,
            "r_cost": cost[0],
            "w_cost": cost[1],
            "area": 0,
            "latency": 1,
            "auto_cost_extraction": False,
            "operands": list(ops),
            "ports": [
                {
                    "name": "rw_port_1",
                    "type": "read_write",
                    "bandwidth_min": BITS,
                    "bandwidth_max": BITS,
                    "allocation": ports,
                }
            ],
            "served_dimensions": served,
        }
    }


def temporal_ordering(case):
    ext = {"M": case["m"], "N": case["n"], "K": case["k"]}
    tile = dict(zip("MNK", case["tile"]))
    rd, cd, td = LAYOUT[case["dataflow"]]
    side = {rd: case["rows"], cd: case["cols"]}
    loops = []

    def add(d, s):
        if s > 1:
            loops.append([d, s])

    add(td, tile[td])
    order = case["order"].upper()  # outermost first
    for d in reversed(order):
        if d != td:
            add(d, tile[d] // side[d])
    for d in reversed(order):
        add(d, ext[d] // tile[d])
    return loops


def run_case(case):
    rd, cd, _ = LAYOUT[case["dataflow"]]
    tm, tn, tk = case["tile"]
    tiles = {"I1": tm * tk, "I2": tk * tn, "O": tm * tn}
    mems = {}
    for _, o, _ in OPS:
        mems.update(memory(f"reg_{o}", [o], BITS, [], ENERGY["reg"]))
    for _, o, _ in OPS:
        if o in case["buffer_holds_zz"]:
            mems.update(memory(f"buf_{o}", [o], tiles[o] * BITS, ["D1", "D2"], ENERGY["buf"]))
    mems.update(memory("dram", ["I1", "I2", "O"], 10**13, ["D1", "D2"], ENERGY["dram"]))
    hw = {
        "name": "tensorforge_levels",
        "memories": mems,
        "operational_array": {
            "unit_energy": 0.5,
            "unit_area": 1,
            "dimensions": ["D1", "D2"],
            "sizes": [case["rows"], case["cols"]],
        },
    }
    wl = [
        {
            "id": 0,
            "operator_type": "Gemm",
            "equation": "O[m][n]+=I[m][k]*W[k][n]",
            "loop_dims": ["M", "N", "K"],
            "loop_sizes": [case["m"], case["n"], case["k"]],
            "operand_precision": {"I": BITS, "W": BITS, "O": BITS, "O_final": BITS},
            "operand_source": {"I": 0, "W": 0},
        }
    ]
    mp = [
        {
            "name": "default",
            "spatial_mapping": {"D1": [f"{rd}, {case['rows']}"], "D2": [f"{cd}, {case['cols']}"]},
            "temporal_ordering": temporal_ordering(case),
            "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"},
        }
    ]
    d = tempfile.mkdtemp(prefix="zz_")
    for n, o in (("hw", hw), ("wl", wl), ("mp", mp)):
        with open(f"{d}/{n}.yaml", "w") as f:
            yaml.safe_dump(o, f, sort_keys=False)  # memory order is the hierarchy
    _, _, cmes = get_hardware_performance_zigzag(
        f"{d}/wl.yaml", f"{d}/hw.yaml", f"{d}/mp.yaml", dump_folder=f"{d}/out",
        loma_show_progress_bar=False,
    )
    cme = cmes[0][1][0][0]
    by_layer_op = {str(k): v for k, v in cme.mapping.unit_mem_data_movement.items()}
    words = {str(k): v for k, v in cme.memory_word_access.items()}
    energy = {str(k): v for k, v in cme.mem_energy_breakdown.items()}
    out = {"zigzag_temporal_mapping": str(cme.temporal_mapping.mapping_dic_stationary)}
    for tf, _, lo in OPS:
        levels = []
        for i, lv in enumerate(by_layer_op[lo]):
            el = lv.get_attribute(DataMoveAttr.DATA_ELEM_MOVE_COUNT).data
            wd = words[lo][i].data
            levels.append({
                "elements": {str(k): int(v) for k, v in el.items()},
                "words": {str(k): int(v) for k, v in wd.items()},
                "energy_pj": energy[lo][i],
            })
        out[tf] = levels
    out["mac_energy_pj"] = cme.mac_energy
    return out


def cases():
    out = []
    orders = ["mnk", "mkn", "nkm", "nmk", "kmn", "knm"]
    shapes = [
        # (M, N, K, rows, cols, tile)
        (64, 64, 64, 8, 8, (32, 32, 32)),
        (128, 64, 96, 16, 8, (64, 32, 32)),
    ]
    for df in ("os", "ws", "is"):
        for si, (m, n, k, r, c, t) in enumerate(shapes):
            for o in orders:
                out.append(dict(m=m, n=n, k=k, rows=r, cols=c, dataflow=df, tile=t, order=o))
    # Tiles the size of the array (one fold: the registers keep C, B or A across tiles),
    # whole-problem tiles, and one-trip loops.
    out += [
        dict(m=64, n=64, k=64, rows=32, cols=32, dataflow="os", tile=(32, 32, 64), order="mkn"),
        dict(m=64, n=64, k=64, rows=32, cols=32, dataflow="os", tile=(32, 32, 16), order="mnk"),
        dict(m=64, n=64, k=64, rows=32, cols=32, dataflow="os", tile=(64, 64, 64), order="mnk"),
        dict(m=64, n=128, k=32, rows=8, cols=16, dataflow="ws", tile=(64, 64, 8), order="nkm"),
        dict(m=96, n=48, k=64, rows=16, cols=16, dataflow="is", tile=(32, 48, 64), order="nmk"),
        dict(m=32, n=64, k=128, rows=32, cols=16, dataflow="is", tile=(16, 64, 32), order="kmn"),
    ]
    # A buffer that holds only A and B (C goes between the registers and DRAM).
    for df, o in (("os", "mnk"), ("os", "kmn"), ("ws", "nkm"), ("ws", "mkn"), ("is", "mnk"), ("is", "knm")):
        out.append(dict(m=64, n=64, k=64, rows=8, cols=8, dataflow=df, tile=(32, 32, 16), order=o,
                        buffer_holds=["a", "b"]))
    for c in out:
        c.setdefault("buffer_holds", ["a", "b", "c"])
        c["buffer_holds_zz"] = [{"a": "I1", "b": "I2", "c": "O"}[x] for x in c["buffer_holds"]]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "crates", "core", "data", "zigzag_levels.json"))
    args = ap.parse_args()
    results = []
    for c in cases():
        r = run_case(c)
        case = {k: v for k, v in c.items() if k != "buffer_holds_zz"}
        case["tile"] = list(c["tile"])
        results.append({"case": case, "zigzag": r})
        # Where ZigZag's energy counts (words) differ from its element counts.
        diffs = []
        for tf, _, _ in OPS:
            for i, lv in enumerate(r[tf]):
                for k, v in lv["elements"].items():
                    if lv["words"][k] != v:
                        diffs.append(f"{tf}[{i}].{k}: words {lv['words'][k]} elements {v}")
        print(f"{c['dataflow']} {c['m']}x{c['n']}x{c['k']} pe {c['rows']}x{c['cols']} tile {c['tile']} "
              f"{c['order']} buffer {''.join(c['buffer_holds'])}: " + ("; ".join(diffs) or "words = elements"))
    doc = {
        "schema_version": 1,
        "generator": "tools/zigzag_levels.py",
        "zigzag": "zigzag-dse 3.9.1",
        "bits": BITS,
        "energy_per_access_pj": ENERGY,
        "cases": results,
    }
    # One case per line, so that a regenerated file diffs case by case.
    head = {k: v for k, v in doc.items() if k != "cases"}
    with open(args.out, "w") as f:
        f.write(json.dumps(head)[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in results))
        f.write("\n]}\n")
    print(f"{len(results)} cases -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
