"""What changed between two models, structurally: node counts per op type,
graph inputs and outputs with their dtypes and shapes, nodes removed and
added (by name; an unnamed node is "op_type->first output", as node_id in
csrc/passes/pass.h names it), and initializer counts and bytes."""

from __future__ import annotations

from collections import Counter

from pyonnxopt.fusion.rule import node_id
from pyonnxopt.model import Model


def _io_type(value) -> dict:
    t = value.type or {}
    if t.get("kind") != "tensor":
        return {"dtype": t.get("text"), "shape": None}
    try:
        import numpy as np
        from onnx import helper

        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t["elem_type"])).name
    except Exception:  # no numpy dtype (e.g. bfloat16 in older onnx): onnx's own text
        dtype = t.get("text", "").split("[")[0] or None
    return {"dtype": dtype, "shape": t.get("shape")}


def _io_diff(before: list, after: list) -> list:
    """Per name, in the original's order then the new ones: its type before and after (null: absent)."""
    a = {v.name: _io_type(v) for v in before}
    b = {v.name: _io_type(v) for v in after}
    names = list(a) + [n for n in b if n not in a]
    return [{"name": n, "before": a.get(n), "after": b.get(n)} for n in names]


def _initializers(model: Model) -> tuple:
    tensors = [t for g in model.graphs() for t in g.initializers]
    return len(tensors), sum(t.nbytes for t in tensors)


def _node_ids(model: Model) -> list:
    return [(node_id(n), n.op_type) for n in model.nodes(recursive=True)]


def _only_in(ids: list, other: list) -> list:
    """The nodes of `ids` (in its order) that `other` does not have, as many times as they are missing."""
    extra = Counter(ids) - Counter(other)
    found = []
    for key in ids:
        if extra[key] > 0:
            extra[key] -= 1
            found.append({"name": key[0], "op_type": key[1]})
    return found


def structure_diff(original: Model, optimized: Model) -> dict:
    """The verify JSON's "structure" entry (nodes of every graph, subgraphs included)."""
    ops_a = Counter(n.op_type for n in original.nodes(recursive=True))
    ops_b = Counter(n.op_type for n in optimized.nodes(recursive=True))
    order = sorted(set(ops_a) | set(ops_b), key=lambda op: (-ops_a.get(op, 0), -ops_b.get(op, 0), op))
    ids_a, ids_b = _node_ids(original), _node_ids(optimized)
    count_a, bytes_a = _initializers(original)
    count_b, bytes_b = _initializers(optimized)
    return {
        "nodes": [sum(ops_a.values()), sum(ops_b.values())],
        "op_counts": {op: [ops_a.get(op, 0), ops_b.get(op, 0)] for op in order},
        "inputs": _io_diff(_real_inputs(original), _real_inputs(optimized)),
        "outputs": _io_diff(original.graph.outputs, optimized.graph.outputs),
        "removed_nodes": _only_in(ids_a, ids_b),
        "added_nodes": _only_in(ids_b, ids_a),
        "initializer_bytes": [bytes_a, bytes_b],
        "initializers": [count_a, count_b],
    }


def _real_inputs(model: Model) -> list:
    """Graph inputs that are not initializers (IR < 4 lists weights as inputs too)."""
    return [v for v in model.graph.inputs if v.initializer is None]

