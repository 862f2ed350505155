"""unsqueeze_into_gather: an Unsqueeze that puts back the axis a Gather of
one index took out is that Gather with a 1-d index.

    y = Unsqueeze(Gather(x, i, axis=a), [a])      (i a constant scalar)
 -> y = Gather(x, [i], axis=a)
 -> y = Shape(s, start=i, end=i+1)                (x = Shape(s), from opset 15)
 -> y = x                                         (x's axis a has size 1)

The TorchScript exporter reads each dim it needs at run time as
Unsqueeze(Gather(Shape(t), i), 0) and concatenates the dims into a target
shape: two nodes a dim, where one does (and none where the Shape was read
only for that dim). Mamba's sequential scan stacks its steps' `[B, D, 1]`
outputs as Unsqueeze(Gather(y, 0, axis=2), 2), which is y itself.

It runs with the cleanup. It used to wait for the fusions, in case they
read the exporters' spelling of a computed shape; without the wait the zoo
and 65 dynamo exports came out the same, in 1-2 fewer rounds where it fires.

Where the Unsqueeze adds other axes, and another reader of x is a Gather
and an Unsqueeze of the same form (Mamba's scan reads C[:, i] of each step
as Unsqueeze(Gather(C, i, axis=1), -1)), each pair becomes
Gather(Unsqueeze(x, axes'), i, axis=a'): the Unsqueezes are one and the
same, and eliminate_common_subexpressions merges them (k pairs -> 1 + k
nodes).

Refuses quietly (no near miss: most Unsqueezes of a Gather are not its
case): an index that is not a constant scalar, a Gather something else reads
too (nothing would be saved), an Unsqueeze of another axis or of several
with no sibling of its form (or x's rank unknown),
axes that cannot be compared where the rank is unknown, a Shape form whose
index may fall outside the rank (the Gather's error would become an empty
slice).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import attr_or_input, constant_array, dims


class UnsqueezeIntoGather(Rule):
    name = "unsqueeze_into_gather"
    description = "Unsqueeze(Gather(x, scalar i, axis a), [a]) -> Gather(x, [i], axis a), or a Shape slice"
    after_cleanup = True
    after_fusions = False
    pattern_near_misses = False

    def pattern(self, opset: int) -> Op:
        gather = Op("Gather", Var("x"), Const("i", scalar=True), name="gather")
        return (Op("Unsqueeze", gather, Var("axes"), name="unsqueeze") if opset >= 13
                else Op("Unsqueeze", gather, name="unsqueeze"))

    def check(self, m: Match) -> Optional[str]:
        return None if _index(m) is not None or _hoisted(m) is not None else ""

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        same_axis = _index(m)
        if same_axis is None:
            unsqueeze_axes, axis = _hoisted(m)
            wider = edit.squeeze("Unsqueeze", m["x"], unsqueeze_axes, hint=f"{m['x'].name}_unsqueezed")
            edit.replace_root("Gather", [wider, m["i"]], {"axis": axis})
            return None
        i, axis = same_axis
        x = m["x"]
        x_dims = dims(x)
        if x_dims is not None and x_dims[axis] == 1 and i in (0, -1):
            return edit.bypass_root(x)
        source = x.producer
        if m.opset >= 15 and _reads_whole_shape(source, i):
            edit.replace_root("Shape", [source.inputs[0]], {"start": i} if i == -1 else {"start": i, "end": i + 1})
            return None
        index = edit.constant(np.array([i], dtype=constant_array(m["i"]).dtype), f"{m['i'].name}_1d")
        edit.replace_root("Gather", [x, index], {"axis": axis})
        return None


def _index(m: Match) -> Optional[tuple]:
    """(i, the axis) where the Unsqueeze restores the Gather's axis; else
    None."""
    index = constant_array(m["i"])
    axes = attr_or_input(m["unsqueeze"], "axes", 1)
    if index is None or index.ndim != 0 or index.dtype.kind not in "iu" or axes is None or len(axes) != 1:
        return None
    a, u = m["gather"].attributes.get("axis", 0), axes[0]
    x_dims = dims(m["x"])
    rank = len(x_dims) if x_dims is not None else None
    if rank is None:
        out = dims(m["unsqueeze"].outputs[0])
        rank = len(out) if out is not None else None
    if rank is not None:
        if not (-rank <= a < rank and -rank <= u < rank):
            return None
        a, u = a % rank, u % rank
    elif (a < 0) != (u < 0):
        return None
    return (int(index), a) if a == u else None


def _hoisted(m: Match) -> Optional[tuple]:
    """(axes, a') where the Unsqueeze adds other axes than the Gather's and
    another reader of x is a Gather and an Unsqueeze of the same axes: each
    becomes Gather(Unsqueeze(x, axes), i, axis=a'), and the Unsqueezes,
    one and the same, merge (k pairs -> 1 + k nodes). Else None."""
    shape = _gather_unsqueeze(m["gather"])
    if shape is None:
        return None
    rank, a, added = shape
    kept = [j for j in range(rank - 1 + len(added)) if j not in added]  # where x's other axes land
    moved = kept[a] if a < len(kept) else (kept[-1] + 1 if kept else 0)  # x's axis a goes just before its successor
    axes = [j + (j >= moved) for j in added]
    # A sibling still to rewrite, or one rewritten already (its Unsqueeze of x is the one to share).
    if not any(reader != m["gather"] and slot == 0 and (_gather_unsqueeze(reader) == shape or _unsqueezes(reader, axes))
               for reader, slot in m["x"].uses):
        return None
    return axes, moved


def _unsqueezes(node, axes: list) -> bool:
    if node.op_type != "Unsqueeze" or node.domain:
        return False
    got = attr_or_input(node, "axes", 1)
    rank = len(axes) + len(dims(node.inputs[0]) or [])
    return got is not None and sorted(u % rank for u in got) == axes


def _gather_unsqueeze(gather) -> Optional[tuple]:
    """(x's rank, the Gather's axis, the Unsqueeze's sorted axes) where
    `gather` takes one constant scalar index of a known-rank x and only an
    Unsqueeze of constant axes reads it; else None."""
    if gather.op_type != "Gather" or gather.domain or len(gather.outputs[0].uses) != 1:
        return None
    reader = gather.outputs[0].uses[0][0]
    index = constant_array(gather.inputs[1])
    x_dims = dims(gather.inputs[0])
    if reader.op_type != "Unsqueeze" or reader.domain or index is None or index.ndim != 0 or x_dims is None:
        return None
    axes = attr_or_input(reader, "axes", 1)
    rank, a = len(x_dims), gather.attributes.get("axis", 0)
    out_rank = rank - 1 + len(axes or [])
    if not axes or not -rank <= a < rank or any(not -out_rank <= u < out_rank for u in axes):
        return None
    added = tuple(sorted(u % out_rank for u in axes))
    return (rank, a % rank, added) if len(set(added)) == len(added) else None


def _reads_whole_shape(node, i: int) -> bool:
    """Whether `node` is a Shape without start and end of a tensor whose
    rank is known to hold dim i."""
    if node is None or node.op_type != "Shape" or node.domain or len(node.attributes):
        return False
    d = dims(node.inputs[0])
    return d is not None and -len(d) <= i < len(d)
