"""What checking each pass and bisecting cost on zoo models.

    python bench/bisect_zoo.py                          # resnet50 and bert_base from bench/out/zoo
    python bench/bisect_zoo.py --models resnet50 --json bench/out/bisect_zoo.json
    python bench/bisect_zoo.py --zoo /elsewhere/zoo     # models at <zoo>/<name>/model.onnx

Per model:
1. `optimize` with its usual final check, then with `verify_each_pass`:
   wall time and the number of checks.
2. A pass broken on purpose (every Add becomes Sum, one chosen Add becomes
   Sub) added to the pipeline: `bisect` with a rollback, its wall time, the
   checks it made (pipeline, isolation, rollback) and whether it named the
   broken Add and wrote a model that matches.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pyonnxopt import optimize  # noqa: E402
from pyonnxopt.fusion.rule import node_id  # noqa: E402
from pyonnxopt.passes import Pass, PassOptions, PassResult, register, unregister  # noqa: E402
from pyonnxopt.verify.bisect import bisect  # noqa: E402

ZOO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "zoo")
BROKEN_ADD = {"resnet50": "/layer3/layer3.2/Add", "bert_base": "/model/encoder/layer.6/output/Add"}


class AddsToSums(Pass):
    """Add -> Sum, and Sub for one node: wrong on purpose."""

    name = "bench_adds_to_sums"
    description = "Add -> Sum (Sub at one node: wrong on purpose)"

    def __init__(self, bad: str):
        self.bad = bad

    def run(self, model, options=PassOptions()):
        rewrites = []
        for n in list(model.graph.nodes):
            if n.op_type == "Add" and not n.pinned:
                consumed = node_id(n)
                new = model.graph.replace_node(n, "Sub" if n.name == self.bad else "Sum", list(n.inputs), name=n.name)
                rewrites.append({"what": "add to sum", "consumed": [consumed], "produced": [node_id(new)]})
        return PassResult(bool(rewrites), {"rewrites": rewrites, "nodes_removed": len(rewrites),
                                           "nodes_added": len(rewrites)})


def measure(name: str, zoo: str = ZOO) -> dict:
    path = os.path.join(zoo, name, "model.onnx")
    row = {"model": name}
    start = time.perf_counter()
    optimize(path)
    row["optimize_s"] = time.perf_counter() - start
    start = time.perf_counter()
    _, report = optimize(path, verify_each_pass=True)
    row["verify_each_pass_s"] = time.perf_counter() - start
    row["verify_each_pass_checks"] = report["verified_each_pass"]
    register(AddsToSums(BROKEN_ADD[name]))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "rolled_back.onnx")
            result = bisect(path, rollback_output=out)
    finally:
        unregister(AddsToSums.name)
    row.update({"bisect_s": result["seconds"], "bisect_checks": result["checks"],
                "pipeline_checks": result["passes_checked"], "pass": result["pass"],
                "rewrites_in_pass": result["rewrites"], "isolation_checks": result["isolation_checks"],
                "named": (result["rewrite"] or {}).get("consumed"), "rollback_ok": result["rollback"]["ok"]})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,bert_base")
    ap.add_argument("--zoo", default=ZOO, help="folder of <name>/model.onnx (default: bench/out/zoo)")
    ap.add_argument("--json", help="write the rows there")
    args = ap.parse_args()
    rows = []
    for name in args.models.split(","):
        row = measure(name, args.zoo)
        rows.append(row)
        print(json.dumps(row))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
