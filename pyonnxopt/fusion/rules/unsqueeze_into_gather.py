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

Refuses quietly (no near miss: most Unsqueezes of a Gather are not its
case): an index that is not a constant scalar, a Gather something else reads
too (nothing would be saved), an Unsqueeze of another axis or of several,
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
        return None if _index(m) is not None else ""

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        i, axis = _index(m)
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


def _reads_whole_shape(node, i: int) -> bool:
    """Whether `node` is a Shape without start and end of a tensor whose
    rank is known to hold dim i."""
    if node is None or node.op_type != "Shape" or node.domain or len(node.attributes):
        return False
    d = dims(node.inputs[0])
    return d is not None and -len(d) <= i < len(d)
