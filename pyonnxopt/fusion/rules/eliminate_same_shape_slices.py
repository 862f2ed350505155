"""eliminate_same_shape_slices: a Slice with positive steps whose result
provably has its input's dims, symbol by symbol, takes everything.

    y = Slice(x, starts, ends, axes, steps)   dims(y) == dims(x), steps > 0
 -> y = x

With steps of 1 or more, a result as long as its input along an axis of
2 or more can only be the whole axis in order (along an axis of 0 or 1
every slice that keeps its length is the whole of it). eliminate_nop does
this where the bounds are constants; exporters compute them at run time
(`mask[:, :, :, :key_length]` where the key length is the mask's own,
torchvision detection's `boxes[:num_boxes]`).

Refuses when a dim of x or y is unknown (neither an int nor a symbol) and
the others agree, or a step is not a known positive constant (a negative
step reverses the axis and keeps its length); a Slice whose dims provably
change, or whose ranks are unknown, is not this rule's case.
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Match
from pyonnxopt.fusion.rules.eliminate_same_shape_reshapes import EliminateSameShapeReshapes
from pyonnxopt.fusion.values import constant_ints


class EliminateSameShapeSlices(EliminateSameShapeReshapes):
    """The Reshape rule's proof and bypass, and a check of the steps."""

    name = "eliminate_same_shape_slices"
    description = "Slice with positive steps whose result provably has its input's dims -> its input"
    min_opset = 1

    def pattern(self, opset: int) -> Op:
        if opset < 10:  # starts, ends and axes are attributes; every step is 1
            return Op("Slice", Var("x"), name="slice")
        return Op("Slice", Var("x"), Var("starts"), Var("ends"), Var("axes", optional=True),
                  Var("steps", optional=True), name="slice")

    def check(self, m: Match) -> Optional[str]:
        why = super().check(m)
        if why is not None:
            return why
        steps = m["steps"] if "steps" in m else None
        if steps is not None:
            values = constant_ints(steps)
            if values is None or any(s <= 0 for s in values):
                return f"steps '{steps.name}' are not known positive constants"
        return None
