"""merge_equal_dims: values read out of `Shape` that are provably the same
dims merge; the first one computed (in topological order) serves every
reader of the others, so the rest, and what they feed, become common
subexpressions or dead code:

    a = Gather(Shape(x: [batch, seq, 512]), 1)        a = Gather(Shape(x), 1)
    b = Gather(Shape(m: [batch, seq]), 1)        ->   r1 = Range(0, a, 1)
    r1 = Range(0, a, 1)                               r2 = Range(0, a, 1)   # CSE: r1
    r2 = Range(0, b, 1)

Two values are the same when they are a `Shape` (start/end), a `Gather`
with constant indices along axis 0, or a step-1 `Slice` of one, have the
same rank, and their entries are, one by one, the same int or the same
named symbol (a model declares that dims sharing a `dim_param` are one
size, as the other passes read it).

Refused (the value stays): an entry onnx's inference left as a generated
`unk__` name or unknown; all entries ints (fold_constants' job); a value that
is a graph output; a pinned producer; function bodies (their dims are the
caller's). A subgraph's values merge within it (an If branch of optimum's
merged decoders reads the sequence length from input_ids, the mask and the
positions), never with another graph's."""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion.values import constant_ints
from pyonnxopt.model import Model
from pyonnxopt.passes.base import Pass, PassOptions, PassResult
from pyonnxopt.passes.resolve_dynamic_reshapes import _entries


def _named(e) -> bool:
    return isinstance(e, str) and e != "" and not e.startswith("unk__")


def _key(n) -> Optional[tuple]:
    """(scalar, entries) of a Shape-derived value whose entries are all
    ints or named symbols, with at least one symbol; else None."""
    if n.domain or n.op_type not in ("Shape", "Gather", "Slice") or not n.outputs or n.outputs[0] is None:
        return None
    if n.op_type != "Shape":
        src = n.inputs[0].producer if n.inputs and n.inputs[0] is not None else None
        if src is None or src.op_type != "Shape" or src.domain:
            return None
    if n.op_type == "Gather":
        idx = n.inputs[1] if len(n.inputs) > 1 else None
        if idx is None or constant_ints(idx) is None:
            return None
        scalar = not idx.initializer.dims
    else:
        scalar = False
    entries = _entries(n.outputs[0])
    if not entries or scalar and len(entries) != 1:
        return None
    if not all(isinstance(e, int) or _named(e) for e in entries) or all(isinstance(e, int) for e in entries):
        return None
    return scalar, tuple(entries)


class MergeEqualDims(Pass):
    name = "merge_equal_dims"
    description = "values read from Shape that are the same dims (same int or named symbol) merge into the first"

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        stats = {"nodes_removed": 0, "rewrites": [], "refused": []}
        for g in model._core.all_graphs():
            if g.is_function_body:
                continue
            first = {}
            for n in g.topological_order():
                if n.removed:
                    continue
                key = _key(n)
                if key is None:
                    continue
                out = n.outputs[0]
                if key not in first:
                    first[key] = out
                    continue
                keep = first[key]
                if out.is_graph_output or n.pinned:
                    stats["refused"].append(f"'{out.name}': {'a graph output' if out.is_graph_output else 'pinned'}")
                    continue
                if not out.uses:
                    continue
                g.replace_all_uses(out, keep)
                stats["rewrites"].append({"what": "same dims", "consumed": [out.name], "produced": [keep.name]})
        return PassResult(bool(stats["rewrites"]), stats)
