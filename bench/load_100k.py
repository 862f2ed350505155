"""Load time of a graph with 100,000 nodes: pyonnxopt.load vs onnx.load vs onnx_ir.load.

    python bench/load_100k.py                  # builds bench/out/chain_100k/model.onnx if missing
    python bench/load_100k.py --nodes 20000 --repeats 9

The model is one long chain x -> Add(c) -> Mul(c) -> Relu -> Add(c) -> ...
over a [1, 16] float input, each Add/Mul with its own 16-float initializer
(inline raw data), so the file is mostly graph (~15 MB), not weights.

All three loads run in this one process, interleaved (A B C A B C ...) after a
warm-up read of the file, with a gc.collect() before each and the loaded model
dropped after; medians and the ratios of pyonnxopt to each peer are printed,
and the runs are written to bench/out/load_100k.json. What each tool does
differs: onnx.load parses the protobuf (its Python objects are made lazily);
onnx_ir.load and pyonnxopt.load also build a graph IR with use-def links.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _util  # noqa: E402

DEFAULT_MODEL = os.path.join(HERE, "out", "chain_100k", "model.onnx")
OPS = ("Add", "Mul", "Relu")
WIDTH = 16


def build(path: str, n_nodes: int, seed: int = 0) -> str:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev = "x"
    for i in range(n_nodes):
        op = OPS[i % len(OPS)]
        out = f"t{i}" if i < n_nodes - 1 else "y"
        if op == "Relu":
            nodes.append(helper.make_node(op, [prev], [out], name=f"n{i}"))
        else:
            c = f"c{i}"
            value = rng.uniform(0.9, 1.1, WIDTH).astype(np.float32) if op == "Mul" else \
                rng.uniform(-0.1, 0.1, WIDTH).astype(np.float32)
            inits.append(numpy_helper.from_array(value, c))
            nodes.append(helper.make_node(op, [prev, c], [out], name=f"n{i}"))
        prev = out
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="pyonnxopt-bench", ir_version=9)
    onnx.checker.check_model(model)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    onnx.save_model(model, path)
    return path


def loaders():
    import onnx
    import onnx_ir
    import pyonnxopt

    return {
        "pyonnxopt": (pyonnxopt.load, lambda m: len(m.graph)),
        "onnx": (onnx.load, lambda m: len(m.graph.node)),
        "onnx_ir": (onnx_ir.load, lambda m: len(m.graph)),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help=f"default: {os.path.relpath(DEFAULT_MODEL)}")
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tools", default="pyonnxopt,onnx,onnx_ir", help="onnx_ir takes ~25x longer than the others")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--json", default=os.path.join(HERE, "out", "load_100k.json"))
    a = ap.parse_args(argv)

    path = a.model or (DEFAULT_MODEL if a.nodes == 100_000 else
                       os.path.join(HERE, "out", f"chain_{a.nodes}", "model.onnx"))
    if a.rebuild or not os.path.exists(path):
        t0 = time.perf_counter()
        build(path, a.nodes)
        print(f"built {path} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    size = os.path.getsize(path)
    fns = {k: v for k, v in loaders().items() if k in a.tools.split(",")}
    if "pyonnxopt" not in fns:
        raise SystemExit("--tools must include pyonnxopt")
    core = sys.modules["pyonnxopt._core"].__file__
    core_build = time.strftime("%H:%M:%S", time.localtime(os.path.getmtime(core)))  # the build imported
    _util.read_through([path])

    times = {k: [] for k in fns}
    counts = {}
    load_before = os.getloadavg()[0]
    for rep in range(a.repeats):
        for name, (load, count) in fns.items():
            gc.collect()
            t0 = time.perf_counter()
            m = load(path)
            dt = time.perf_counter() - t0
            times[name].append(dt)
            if rep == 0:
                counts[name] = count(m)
            del m
    gc.collect()

    load_after = os.getloadavg()[0]
    med = {k: _util.median(v) for k, v in times.items()}
    rows = [[k, f"{med[k] * 1000:.1f}", f"{min(v) * 1000:.1f}", f"{max(v) * 1000:.1f}", counts[k]]
            for k, v in times.items()]
    ratios = {k: med["pyonnxopt"] / med[k] for k in fns if k != "pyonnxopt"}
    print(f"model: {path} ({size / 1e6:.1f} MB), {a.repeats} interleaved repeats, one process, warm file")
    print(f"machine: {os.cpu_count()} CPUs, 1-min load average {load_before:.1f} before, {load_after:.1f} after; "
          f"pyonnxopt._core built {core_build}")
    print(_util.table(["tool", "median ms", "min ms", "max ms", "nodes"], rows))
    print()
    for k, r in ratios.items():
        print(f"pyonnxopt / {k}: {r:.3f}  ({1 / r:.1f}x {'faster' if r < 1 else 'slower'})")
    met = ratios["onnx"] < 1.0 if "onnx" in ratios else None
    if met is not None:
        print(f"target pyonnxopt.load faster than onnx.load: {'yes' if met else 'NO'}")
    doc = {"model": path, "model_bytes": size, "nodes": a.nodes, "repeats": a.repeats,
           "times_s": times, "median_s": med, "ratios_pyonnxopt_over_peer": ratios,
           "node_counts": counts, "target_faster_than_onnx_load": met,
           "loadavg_1min": [load_before, load_after], "core_build": core_build, "environment": _util.environment()}
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"JSON: {a.json}")
    bad = [k for k, n in counts.items() if n != a.nodes]
    if bad:
        print(f"node count mismatch: { {k: counts[k] for k in bad} }", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
