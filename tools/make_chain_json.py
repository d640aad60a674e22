#!/usr/bin/env python3
"""Write a graph JSON chain of N `ReLU` nodes (x -> r0 -> r1 -> ...) for the large-graph
timing in docs/reliability.md; it fuses into one elementwise kernel.

    python3 tools/make_chain_json.py 1000000 /tmp/chain1m.json
    /usr/bin/time -f "%e s %M KB" target/release/tensorforge fuse /tmp/chain1m.json > /dev/null
"""
import json
import sys

n, path = int(sys.argv[1]), sys.argv[2]
nodes = [{"name": "x", "op": "Input", "attrs": {"shape": [4], "dtype": "fp32"}}]
prev = "x"
for i in range(n):
    nodes.append({"name": f"r{i}", "op": "ReLU", "inputs": [prev]})
    prev = f"r{i}"
with open(path, "w") as f:
    json.dump({"schema_version": 1, "name": "chain", "nodes": nodes}, f)
