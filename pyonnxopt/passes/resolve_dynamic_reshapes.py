"""resolve_dynamic_reshapes: a Reshape whose target shape is computed at run
time (Shape -> Gather/Slice -> Unsqueeze -> Concat, the exporters' way of
writing "keep the batch") gets a constant target instead, so the shape
arithmetic becomes dead code and the Reshape a plain one:

    b = Gather(Shape(x: [batch, 768, 14, 14]), 0)
    s = Concat(Unsqueeze(b, [0]), [768], [196])      ->   y = Reshape(x, [0, 768, 196])
    y = Reshape(x, s)

Each entry of the computed shape is resolved from what the model states:
a constant; a dim of some tensor that is a known int; a dim provably equal
(the same int or the same symbol) to x's dim at the same position, which
Reshape's 0 copies; and, when exactly one entry is still unknown and no -1
is there, -1 (the one dim Reshape works out). Where that leaves two
unknowns, or an unknown beside a -1, an entry is the Reshape's output dim
that shape inference (with the symbolic walk) knows as an int, the same
for every input the model runs on: tf2onnx's `Concat(ReduceProd(batch
dims), [-1], [16])` becomes `[-1, 8, 16]`. Otherwise the Reshape stays.
With allowzero=1 (torch's dynamo exporter) the rewritten Reshape takes
allowzero=0 where a 0 copies: the copied dim is the very entry the target
held, an empty one included. The arithmetic may go through Casts to int32
and back (tf2onnx's), Gathers and Slices of shape values, and Concats.
Refused: an entry whose producer is not one of those forms or whose count
is unknown; a -1 it would add beside a 0 copying a dim that may be empty
(a data-dependent count, Graph.count_symbols: onnxruntime cannot work a -1
out beside an empty dim, where the original target ran), and with
allowzero=1 any -1 it would add."""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt.fusion.rule import node_id, shape_from_dims
from pyonnxopt.fusion.values import attr_or_input, clamped_range, constant_ints, dims, one_axis_slice
from pyonnxopt.model import Model, raw_data
from pyonnxopt.passes.base import Pass, PassOptions, PassResult

_UNKNOWN = object()


def _peeled(v):
    """v before any Casts to int32 or int64: tf2onnx computes shapes in
    int32, Cast(Shape(x), int32) ... Cast(target, int64). A dim past int32
    would wrap in the original; the resolved target says what it meant."""
    p = v.producer if v is not None else None
    while p is not None and p.op_type == "Cast" and not p.domain and p.attributes.get("to") in (6, 7):
        v = p.inputs[0]
        p = v.producer if v is not None else None
    return v


def _shape_dims(node) -> Optional[list]:
    """The entries a Shape node produces: ("dim", tensor dims, index) each."""
    d = dims(node.inputs[0])
    if d is None:
        return None
    rank = len(d)
    start, end = node.attributes.get("start", 0), node.attributes.get("end", rank)
    start = max(0, min(rank, start + rank if start < 0 else start))
    end = max(0, min(rank, end + rank if end < 0 else end))
    return [d[i] for i in range(start, end)]


def _entries(v) -> Optional[list]:
    """The entries of a 1-D int64 (or int32) value: int, a symbol (str), or
    _UNKNOWN; None when not even their count is known."""
    v = _peeled(v)
    ints = constant_ints(v)
    if ints is not None:
        return ints
    p = v.producer
    if p is None or p.domain:
        return None
    if p.op_type == "Shape":
        return _shape_dims(p)
    if p.op_type == "Unsqueeze":
        axes = attr_or_input(p, "axes", 1)
        inner = _scalar_entry(p.inputs[0])
        return [inner] if axes in ([0], [-1]) and inner is not None else _unknown_of(v)
    if p.op_type == "Concat":
        parts = [_entries(x) if x is not None else None for x in p.inputs]
        return None if any(part is None for part in parts) else [e for part in parts for e in part]
    if p.op_type == "Gather":
        gathered = _gathered(p)
        return gathered if gathered is not None else _unknown_of(v)
    if p.op_type == "Slice" and len(p.inputs) >= 3:
        data = _entries(p.inputs[0]) if p.inputs[0] is not None else None
        part = one_axis_slice(p)
        if data is not None and part is not None and part[0] in (0, -1):
            return data[slice(*clamped_range(part[1], part[2], len(data)))]
    return _unknown_of(v)


def _gathered(p) -> Optional[list]:
    """The entries of Gather(entries, constant indices) along axis 0 (one
    per index; a scalar index gives one): of a Shape, or of shape
    arithmetic on one (tf2onnx permutes a Shape through a Gather), or None."""
    idx = constant_ints(p.inputs[1])
    if p.domain or p.attributes.get("axis", 0) != 0 or idx is None or p.inputs[0] is None:
        return None
    data = _entries(p.inputs[0])
    if data is None or not all(-len(data) <= i < len(data) for i in idx):
        return None
    return [data[i] for i in idx]


def _scalar_entry(v):
    """A 0-d value's entry (Gather of a Shape with a scalar index)."""
    v = _peeled(v)
    p = v.producer if v is not None else None
    if p is None or p.op_type != "Gather":
        return _UNKNOWN
    gathered = _gathered(p)  # not None: the index is a constant initializer
    return gathered[0] if gathered and not p.inputs[1].initializer.dims else _UNKNOWN


def _unknown_of(v) -> Optional[list]:
    d = dims(v)
    if d is None or len(d) != 1 or not isinstance(d[0], int):
        return None
    return [_UNKNOWN] * d[0]


def _with_known_output_dims(entries: list, out_dims: Optional[list]) -> list:
    """An entry the arithmetic leaves unknown, or a -1, is the output's dim
    where shape inference (with the symbolic walk) knows it as an int: that
    dim is the same for every input the model runs on. tf2onnx writes
    `Reshape(x, Concat(ReduceProd(batch dims), [-1], [16]))`: the -1 is
    worked out, so the product can be the -1."""
    if out_dims is None or len(out_dims) != len(entries):
        return entries
    return [o if isinstance(o, int) and (not isinstance(e, int) or e == -1) else e for e, o in zip(entries, out_dims)]


def resolve(x_dims: Optional[list], entries: list, counts: frozenset = frozenset()) -> tuple:
    """(constant target, None) or (None, why not). `counts`: the symbols
    that may be 0 (Graph.count_symbols)."""
    out = []
    for j, e in enumerate(entries):
        if isinstance(e, int):
            out.append(e)
        elif isinstance(e, str) and x_dims is not None and j < len(x_dims) and x_dims[j] == e:
            out.append(0)  # Reshape's 0 copies x's dim j, which is this very dim
        else:
            out.append(None)
    unknown = [j for j, e in enumerate(out) if e is None]
    if len(unknown) > 1:
        return None, f"{len(unknown)} entries of the target shape are not known"
    if unknown:
        if -1 in out:
            return None, "one entry is unknown and another is already -1"
        for j, e in enumerate(out):
            d = x_dims[j] if x_dims is not None and j < len(x_dims) else None
            if e == 0 and not (isinstance(d, int) and d > 0 or isinstance(d, str) and d not in counts):
                # A detector's boxes after TopK: with none kept, [0, -1] fails where [0, 4] ran
                return None, (f"entry {j} copies dim {d!r}, a count that may be empty, and a -1 beside an empty "
                              "dim is undefined")
        out[unknown[0]] = -1
    return out, None


def _input_dims(g) -> dict:
    """symbol -> (graph input, axis) for the named dims of the graph's inputs."""
    found = {}
    for v in g.inputs:
        if v.initializer is None:
            for axis, d in enumerate(dims(v) or []):
                if isinstance(d, str):
                    found.setdefault(d, (v, axis))
    return found


def _read_form(target) -> bool:
    """Whether the target is already constants and Gather(Shape(.), [i])
    reads, as shape_from_dims writes them (whose Shape other passes may have
    moved to a value of the same dims): rewriting it again would only add
    the same nodes."""
    p = target.producer
    if p is None or p.op_type != "Concat":
        return False
    for v in p.inputs:
        q = v.producer if v is not None else None
        shape = q.inputs[0].producer if q is not None and q.op_type == "Gather" else None
        read = shape is not None and shape.op_type == "Shape" and constant_ints(q.inputs[1]) is not None
        if constant_ints(v) is None and not read:
            return False
    return True


def _shape_of_product(node) -> bool:
    p = node.inputs[0].producer if node.op_type == "Shape" and node.inputs else None
    return p is not None and p.op_type == "MatMul" and not p.domain


def _dead_after(target, reshape, limit: int = 64) -> set:
    """The nodes computing `target` that nothing else reads: they go once
    the Reshape reads another target."""
    dead: set = set()
    stack = [target.producer]
    while stack and len(dead) < limit:
        p = stack.pop()
        if p is None or p in dead:
            continue
        if any(v.is_graph_output or any(user != reshape and user not in dead for user, _ in v.uses)
               for v in p.outputs if v is not None):
            continue
        dead.add(p)
        stack.extend(x.producer for x in p.inputs if x is not None)
    return dead


def read_plan(x_dims: Optional[list], entries: list, out_dims: Optional[list], readable: dict,
              counts: frozenset = frozenset()) -> Optional[list]:
    """The target as ints (constants, 0 copies, one -1) and (input, axis)
    reads of graph inputs' dims at run time, or None. An entry left
    unknown is the output's dim there when the walk names it."""
    out = []
    for j, e in enumerate(entries):
        if e is _UNKNOWN and out_dims is not None and j < len(out_dims) and isinstance(out_dims[j], (int, str)):
            e = out_dims[j]
        if isinstance(e, int):
            out.append(e)
        elif isinstance(e, str) and x_dims is not None and j < len(x_dims) and x_dims[j] == e:
            out.append(0)
        elif isinstance(e, str):
            out.append(e)
        else:
            return None
    symbols = [j for j, e in enumerate(out) if isinstance(e, str)]
    if not symbols:
        return None
    zeros_safe = all(not (e == 0 and isinstance(e, int)) or (isinstance(d, int) and d > 0)
                     or (isinstance(d, str) and d not in counts)
                     for e, d in zip(out, (x_dims or []) + [None] * len(out)))
    if -1 not in out and zeros_safe:
        j = next((j for j in symbols if out[j] not in readable), symbols[0])
        out[j] = -1
    if any(isinstance(e, str) and e not in readable for e in out):
        return None
    return [readable[e] if isinstance(e, str) else e for e in out]


def _constant(g, hint: str, shape: list, before, as_node: bool):
    data = np.asarray(shape, np.int64)
    if not as_node:
        return g.add_initializer(g.unique_name(hint), 7, [len(shape)], data.tobytes())
    n = g.add_node("Constant", [], [g.unique_name(hint)], name=g.unique_name(hint), before=before)
    n.set_attribute("value", ("tensor", *raw_data(data)))
    return n.outputs[0]


class ResolveDynamicReshapes(Pass):
    name = "resolve_dynamic_reshapes"
    description = "a Reshape target computed from Shape becomes a constant (0 copies a dim, -1 the one left)"

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        stats = {"nodes_removed": 0, "rewrites": [], "refused": []}
        old_ir = (model.ir_version or 0) < 4  # IR 3 lists every initializer as an input: a Constant node then
        for g in model._core.all_graphs():
            if g.is_function_body:
                continue
            counts = None  # Graph.count_symbols, worked out for the first target that may need it
            for n in list(g.nodes):
                if n.op_type != "Reshape" or n.domain or n.removed or n.pinned or len(n.inputs) < 2:
                    continue
                target = n.inputs[1]
                if (target is None or constant_ints(target) is not None or target.producer is None
                        or target.producer.op_type == "Constant"):
                    continue
                label = f"'{node_id(n)}' (Reshape)"
                entries = _entries(target)
                if entries is None:
                    continue
                if counts is None and not all(isinstance(e, int) for e in entries):
                    counts = frozenset(g.count_symbols())  # only an entry not a constant can become a -1
                x_dims, may_be_empty = dims(n.inputs[0]), counts or frozenset()
                shape, why = resolve(x_dims, entries, may_be_empty)
                if why:
                    shape, why = resolve(x_dims, _with_known_output_dims(entries, dims(n.outputs[0])), may_be_empty)
                # Worth it where a MatMul's Shape goes with the old arithmetic (the product is then the
                # fusions' to take), and that arithmetic outweighs the new: a Concat, and a Shape and a
                # Gather a read.
                dead = _dead_after(target, n) if why and g.parent is None and not old_ir else set()
                if any(_shape_of_product(d) for d in dead) and not _read_form(target):
                    plan = read_plan(x_dims, entries, dims(n.outputs[0]), _input_dims(g), may_be_empty)
                    reads = sum(isinstance(e, tuple) for e in plan or [])
                    if plan is not None and not (n.attributes.get("allowzero", 0) and (-1 in plan or 0 in plan)) \
                            and len(dead) >= 1 + 2 * reads:
                        read, _ = shape_from_dims(g, plan, n, f"{n.outputs[0].name}_shape")
                        g.set_input(n, 1, read)
                        stats["rewrites"].append({"what": "target read from the graph inputs' dims",
                                                  "consumed": [target.name], "produced": [read.name]})
                        continue
                allowzero = n.attributes.get("allowzero", 0)
                if not why and allowzero and (-1 in shape and -1 not in entries):
                    # The copies are exact with allowzero=0 (an empty dim is copied as 0), but a -1 made
                    # here beside one would be ill-defined where the original target was not.
                    why = "allowzero=1 and an entry unknown: its -1 could meet an empty dim"
                if why:
                    stats["refused"].append(f"{label}: {why}")
                    continue
                const = _constant(g, f"{n.outputs[0].name}_shape", shape, before=n, as_node=old_ir)
                g.set_input(n, 1, const)
                if allowzero and 0 in shape:  # torch's dynamo exporter writes allowzero=1: a 0 now copies
                    n.set_attribute("allowzero", 0)
                stats["rewrites"].append({"what": "constant target", "consumed": [target.name],
                                          "produced": [const.name]})
        return PassResult(bool(stats["rewrites"]), stats)

