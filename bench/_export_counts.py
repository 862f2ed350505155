"""Counting another framework's exports: each optimized three ways by
`pyonnxopt optimize` (which checks its result in onnxruntime) and by
onnxslim and onnxsim at their defaults. Shared by jax_exports.py and
keras_exports.py."""

from __future__ import annotations

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
    """The result's node count, or "FAILED" where the run or its check failed."""
    out = path[:-5] + f"__{variant}.onnx"
    run = subprocess.run([sys.executable, "-m", "pyonnxopt", "optimize", path, out] + VARIANTS[variant],
                         capture_output=True, text=True)
    checked = run.returncode == 0 and "checked in onnxruntime" in run.stdout + run.stderr
    return nodes(out) if checked else "FAILED"


def peer(path: str, tool: str):
    out = path[:-5] + f"__{tool}.onnx"
    run = subprocess.run([sys.executable, "-m", tool, path, out], capture_output=True, text=True)
    if run.returncode and "No module named" in run.stderr:
        return "missing"
    return nodes(out) if run.returncode == 0 else f"error {run.returncode}"


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
