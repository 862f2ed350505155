"""Counting another framework's exports: each optimized three ways by
`pyonnxopt optimize` (which checks its result in onnxruntime) and by
onnxslim and onnxsim at their defaults. Shared by jax_exports.py,
keras_exports.py and sklearn_exports.py."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys

VARIANTS = {"default": [], "opset23": ["--opset", "23"], "ort": ["--target", "ort"]}


def nodes(path: str):
    """Nodes, those of subgraphs included; None when nothing was written."""
    import onnx

    from pyonnxopt.proto_graphs import graphs

    if not os.path.exists(path):
        return None
    return sum(len(g.node) for g in graphs(onnx.load(path, load_external_data=False).graph))


def optimized(path: str, variant: str):
    """The result's node count; "FAILED" where the run or its check failed,
    "unchecked" where the export itself cannot be checked (onnxruntime cannot
    run it, or its outputs change from run to run)."""
    out = path[:-5] + f"__{variant}.onnx"
    run = subprocess.run([sys.executable, "-m", "pyonnxopt", "optimize", path, out] + VARIANTS[variant],
                         capture_output=True, text=True)
    said = run.stdout + run.stderr
    if run.returncode == 0 and "not checked:" in said:
        return "unchecked"
    return nodes(out) if run.returncode == 0 and "checked in onnxruntime" in said else "FAILED"


def peer(path: str, tool: str):
    out = path[:-5] + f"__{tool}.onnx"
    run = subprocess.run([sys.executable, "-m", tool, path, out], capture_output=True, text=True)
    if run.returncode and "No module named" in run.stderr:
        return "missing"
    return nodes(out) if run.returncode == 0 else f"error {run.returncode}"


def export_each(out: str, names, opsets, make, write) -> list:
    """`out`/{name}_opset{opset}.onnx for each name and opset, in that order;
    one not there yet is written by write(made, name, opset, path), made =
    make(name) called at most once per name (building a model is the slow
    part, and none is built where every file is there). One that fails to
    build or export is a row saying why, and left out."""
    paths = []
    for name in names:
        made = None
        for opset in opsets:
            path = os.path.join(out, f"{name}_opset{opset}.onnx")
            if not os.path.exists(path):
                try:
                    made = made or make(name)
                    write(made, name, opset, path)
                except Exception as e:  # the framework's or its exporter's: a row says so, the rest go on
                    from pyonnxopt.errors import first_line

                    print(f"model={name}_opset{opset} export=failed ({type(e).__name__}: {first_line(e)})",
                          flush=True)
                    if os.path.exists(path):
                        os.remove(path)  # half written: the next run tries again
                    continue
            paths.append(path)
    return paths


def count(paths: list, json_path=None) -> int:
    """Prints a row per export; 1 when a pyonnxopt result failed, else 0."""
    rows = []
    for path in paths:
        row = {"model": os.path.basename(path)[:-5], "export": nodes(path)}
        row.update({v: optimized(path, v) for v in VARIANTS})
        row.update({t: peer(path, t) for t in ("onnxslim", "onnxsim")})
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any("FAILED" in map(str, r.values()) for r in rows) else 0


def main(argv, *, description: str, opsets: str, needs: tuple, models, export, out: str,
         install: str = "") -> int:
    """The command line the export scripts share: --models, --opsets, --json.
    `needs` are the modules to import first (2 and a one-line error
    without them, saying `pip install` `install`, default the modules'
    names), `models()` builds {name: maker}, `export(models, names,
    opsets)` writes the ONNX files under `out` and returns their paths."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--models", default="", help="comma-separated names (default: all)")
    p.add_argument("--opsets", default=opsets, help=f"comma-separated opsets to export at (default {opsets})")
    p.add_argument("--json", help="write the rows there too")
    args = p.parse_args(argv)
    try:
        for module in needs:
            importlib.import_module(module)
    except ImportError as e:
        print(f"error: {e.name} is not installed: pip install {install or ' '.join(needs)}", file=sys.stderr)
        return 2
    made = models()
    names = [n for n in args.models.split(",") if n] or list(made)
    unknown = sorted(set(names) - set(made))
    if unknown:
        print(f"error: --models: unknown {', '.join(unknown)} (known: {', '.join(made)})", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    return count(export(made, names, [int(o) for o in args.opsets.split(",")]), args.json)
