"""squeeze_into_reshape: a Squeeze of a Reshape whose target is computed at
run time, where the target's entries at the squeezed axes are constant 1s,
is one Reshape to the target without those entries.

    t = Concat(Gather(Shape(h), [0, 1]), [4, 16], [1])
    y = Squeeze(Reshape(x, t), [4])
 -> y = Reshape(x, Concat(Gather(Shape(h), [0, 1]), [4, 16]))

collapse_reshapes does this where the target is a constant; tf2onnx's
Keras EinsumDense with a dynamic length computes it (the batch and length
read from a Shape) and splits the projection to [B, S, H, d, 1] first.

Refuses when:
 1. the target is not a Concat, the Squeeze's axes are not constants, or a
    part's length is unknown;
 2. an entry at a squeezed axis is not a constant 1;
 3. with allowzero=0, an entry after a squeezed axis is not a constant
    other than 0: a 0 copies the input's dim at its own position, which
    the removed entries would move.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import attr_or_input, constant_ints, dims


class SqueezeIntoReshape(Rule):
    name = "squeeze_into_reshape"
    description = "Squeeze(Reshape(x, computed target)) dropping constant 1 entries -> one Reshape"
    min_opset = 5  # Reshape with a shape input
    after_cleanup = False  # a layout cleanup
    pattern_near_misses = False  # every Squeeze of a Reshape fits; a refused one still says why

    def pattern(self, opset: int) -> Op:
        reshape = Op("Reshape", Var("x"), Var("target"), name="reshape")
        return Op("Squeeze", reshape, Var("axes"), name="squeeze") if opset >= 13 else \
            Op("Squeeze", reshape, name="squeeze")

    def check(self, m: Match) -> Optional[str]:
        plan = _plan(m)
        return plan if isinstance(plan, str) else None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        parts = []
        for value, keep in _plan(m):
            if keep is None:
                parts.append(value)
            elif keep:
                parts.append(edit.constant(np.array(keep, np.int64), f"{value.name}_kept"))
        (target,) = edit.node("Concat", parts, {"axis": 0}, hint=f"{m.root.outputs[0].name}_shape")
        edit.replace_root("Reshape", [m["x"], target], copy_attrs_from=m["reshape"])
        return None


def _plan(m: Match) -> Union[list, str]:
    """[(part, None: kept whole | the constant entries kept)], or why not."""
    concat = m["target"].producer
    if concat is None or concat.op_type != "Concat" or concat.domain:
        return ""  # a constant target is collapse_reshapes' case; other forms are no near miss
    axes = attr_or_input(m["squeeze"], "axes", 1)
    if axes is None:
        return "the Squeeze's axes are not constants"
    parts = []  # (value, constant entries or None, length)
    for v in concat.inputs:
        ints = constant_ints(v)
        d = dims(v)
        length = len(ints) if ints is not None else d[0] if d is not None and len(d) == 1 else None
        if not isinstance(length, int):
            return f"the length of the target's part '{v.name}' is unknown"
        parts.append((v, ints, length))
    rank = sum(length for _, _, length in parts)
    removed = sorted({a + rank if a < 0 else a for a in axes})
    if not removed or not all(0 <= a < rank for a in removed):
        return f"the Squeeze's axes {axes} do not fit the target's {rank} entries"
    allowzero = m["reshape"].attributes.get("allowzero", 0)
    plan, at = [], 0
    for v, ints, length in parts:
        here = [a - at for a in removed if at <= a < at + length]
        if here and (ints is None or any(ints[i] != 1 for i in here)):
            return f"the target's entries at the squeezed axes {removed} are not constant 1s"
        later = [i for i in range(length) if at + i > removed[0] and at + i not in removed]
        if later and not allowzero and (ints is None or any(ints[i] == 0 for i in later)):
            return "an entry after a squeezed axis may be 0, which copies the input's dim at its own position"
        plan.append((v, None if not here else [e for i, e in enumerate(ints) if i not in here]))
        at += length
    return plan
