"""slices_to_split: Slices that cut one value into consecutive parts along
one axis become one Split; first, a Slice of the leading factor of a split
last axis, merged back, becomes a Slice of the axis itself.

    x: [B, S, 576]
    v = Reshape(x, [B, S, 3, 3, 64])
    q = Reshape(Slice(v, [0], [1], axes=[2]), [B, S, 192])       q, k, v = Split(x, [192, 192, 192], axis=2)
    k = Reshape(Slice(v, [1], [2], axes=[2]), [B, S, 192])  ->
    v = Reshape(Slice(v, [2], [3], axes=[2]), [B, S, 192])

torch's dynamo exporter writes timm's packed `qkv.unbind` that way (the
TorchScript one writes the Split): 7 nodes a layer become 1.

Step 1 takes Reshape(Slice(Reshape(x))) where the inner Reshape only splits
x's last axis L into [A, B1, ...], the Slice takes [a, b) of A with step 1,
and the outer Reshape merges the kept dims back into one; the parts of A
are contiguous runs of L, so that is x[..., a*P : b*P] with P = B1*... .
Step 2 takes Slices of one value on one axis with step 1 whose ranges tile
the axis exactly (no gap, no overlap, known length): one Split. Constant
parameters and opset 10 or later (Slice's inputs) only; the leading dims
must be provably the same (equal ints or the same symbol).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Optional

import numpy as np

from pyonnxopt.fusion.rule import node_id, take_over
from pyonnxopt.fusion.values import clamped_range, dims, one_axis_slice
from pyonnxopt.model import Model, raw_data
from pyonnxopt.opset import default_opset
from pyonnxopt.passes.base import Pass, PassOptions, PassResult

_STANDARD = ("", "ai.onnx")


def _op(n, op_type: str) -> bool:
    return n is not None and n.op_type == op_type and n.domain in _STANDARD and not n.pinned


def _same_dims(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is not None and x == y for x, y in zip(a, b))


def _int64s(g, values, hint: str):
    return g.add_initializer(g.unique_name(hint), *raw_data(np.asarray(values, np.int64)))


def _remove_if_unread(g, n) -> bool:
    if n.removed or n.pinned or any(o is not None and (o.uses or o.is_graph_output) for o in n.outputs):
        return False
    g.remove_node(n)
    return True


def _unsplit(g, outer) -> Optional[list]:
    """Step 1 at Reshape `outer`: the removed nodes' ids, or None."""
    s = outer.inputs[0].producer if outer.inputs else None
    inner = s.inputs[0].producer if _op(s, "Slice") else None
    if not _op(inner, "Reshape"):
        return None
    x = inner.inputs[0]
    dx, d_in, d_out = dims(x), dims(inner.outputs[0]), dims(outer.outputs[0])
    if dx is None or d_in is None or d_out is None or not isinstance(dx[-1], int):
        return None
    rank = len(dx)
    factors = d_in[rank - 1:]
    if (len(factors) < 2 or not all(isinstance(f, int) and f > 0 for f in factors) or math.prod(factors) != dx[-1]
            or not _same_dims(d_in[:rank - 1], dx[:-1])):
        return None
    part = one_axis_slice(s)
    if part is None or part[0] not in (rank - 1, rank - 1 - len(d_in)):
        return None
    start, end = clamped_range(part[1], part[2], factors[0])
    inner_size = math.prod(factors[1:])
    if end <= start or not _same_dims(d_out, [*dx[:-1], (end - start) * inner_size]):
        return None
    hint = outer.outputs[0].name
    bounds = [_int64s(g, [start * inner_size], f"{hint}_starts"), _int64s(g, [end * inner_size], f"{hint}_ends"),
              _int64s(g, [rank - 1], f"{hint}_axes")]
    sliced = g.add_node("Slice", [x, *bounds], [g.unique_name(f"{hint}_part")], name=g.unique_name(f"{hint}_part"),
                        before=outer)
    ids = [node_id(outer)]
    take_over(g, outer.outputs[0], sliced.outputs[0])
    g.remove_node(outer)
    for n in (s, inner):
        label = node_id(n)
        if _remove_if_unread(g, n):
            ids.append(label)
    return ids


def _tiles(parts: list, length: int) -> bool:
    at = 0
    for start, end, _ in sorted(parts, key=lambda p: p[0]):
        if start != at or end <= start:
            return False
        at = end
    return at == length


def _split(g, x, axis: int, slices: list, opset: int, position: dict) -> list:
    """One Split of x for `slices` [(start, end, Slice)], which tile the axis."""
    slices = sorted(slices, key=lambda p: p[0])
    sizes = [end - start for start, end, _ in slices]
    first = min((s for _, _, s in slices), key=position.__getitem__)
    hint = f"{x.name}_parts"
    inputs = [x] + ([_int64s(g, sizes, f"{hint}_sizes")] if opset >= 13 else [])
    split = g.add_node("Split", inputs, [g.unique_name(f"{hint}_{i}") for i in range(len(slices))],
                       name=g.unique_name(hint), before=first)
    split.set_attribute("axis", axis)
    if opset < 13:
        split.set_attribute("split", sizes)
    ids = []
    for (_, _, s), out in zip(slices, split.outputs):
        ids.append(node_id(s))
        take_over(g, s.outputs[0], out)
        g.remove_node(s)
    return ids


class SlicesToSplit(Pass):
    name = "slices_to_split"
    description = "Slices that cut a value into consecutive parts along one axis -> one Split"

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        stats = {"nodes_removed": 0, "nodes_added": 0, "rewrites": []}
        opset = default_opset(model)
        if opset < 10:  # Slice took attributes then
            return PassResult(False, stats)
        for g in model._core.all_graphs():
            for n in list(g.nodes):
                if not n.removed and _op(n, "Reshape"):
                    ids = _unsplit(g, n)
                    if ids:
                        self._record(stats, "slice of a split axis", ids, 1)
            position = {n: i for i, n in enumerate(g.nodes)}
            readers = defaultdict(list)  # (value name, axis) -> [(start, end, Slice)]
            for n in g.nodes:
                part = one_axis_slice(n) if _op(n, "Slice") and len(n.outputs) == 1 else None
                d = dims(n.inputs[0]) if part else None
                if d is None:
                    continue
                axis = part[0] + len(d) if part[0] < 0 else part[0]
                if 0 <= axis < len(d) and isinstance(d[axis], int):
                    readers[(n.inputs[0].name, axis)].append((*clamped_range(part[1], part[2], d[axis]), n))
            for (name, axis), parts in readers.items():
                x = g.value(name)
                if len(parts) >= 2 and _tiles(parts, dims(x)[axis]):
                    self._record(stats, "slices into a split", _split(g, x, axis, parts, opset, position), 1)
        return PassResult(bool(stats["rewrites"]), stats)

    @staticmethod
    def _record(stats: dict, what: str, consumed: list, added: int) -> None:
        stats["rewrites"].append({"what": what, "consumed": consumed, "produced": []})
        stats["nodes_removed"] += len(consumed)
        stats["nodes_added"] += added
