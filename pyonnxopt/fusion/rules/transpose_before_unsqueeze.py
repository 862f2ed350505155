"""transpose_before_unsqueeze: a Transpose of an Unsqueeze's result moves
before it; the axes of size 1 the Unsqueeze adds go where the Transpose
would have put them.

    y = Transpose(Unsqueeze(x, axes), p)
 -> y = Unsqueeze(Transpose(x, q), axes')     (no Transpose when q keeps every axis)

q is p without the added axes, numbered as x's; axes' are the places p
sends them to. The same elements move: an axis of size 1 holds no order.

tf2onnx lowers Keras's einsums (MultiHeadAttention's scores and context)
so: each operand goes to 5-d through an Unsqueeze, a Transpose brings the
batch and head axes to the front, and a Reshape merges them. Moved, the
Transpose meets the head split's, and the Unsqueeze the Reshape, and each
pair becomes one node.

Refuses (quietly: the pattern is no near miss) when the Unsqueeze's axes
are not constants, repeat, or fall outside the result's rank.
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import attr_or_input


class TransposeBeforeUnsqueeze(Rule):
    name = "transpose_before_unsqueeze"
    description = "Transpose(Unsqueeze(x)) -> Unsqueeze(Transpose(x)): the Transpose meets x's Transposes"
    after_cleanup = False  # a layout cleanup: the fusions see its result
    pattern_near_misses = False

    def pattern(self, opset: int) -> Op:
        unsqueeze = (Op("Unsqueeze", Var("x"), Var("axes"), name="unsqueeze") if opset >= 13
                     else Op("Unsqueeze", Var("x"), name="unsqueeze"))
        return Op("Transpose", unsqueeze, name="transpose")

    def check(self, m: Match) -> Optional[str]:
        return "" if _moved(m) is None else None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        q, added = _moved(m)
        x = m["x"]
        if q != list(range(len(q))):
            (x,) = edit.node("Transpose", [x], {"perm": q})
        edit.squeeze("Unsqueeze", x, added, root=True)
        return None


def _moved(m: Match) -> Optional[tuple]:
    """(q, axes'), or None where the Unsqueeze's axes are not known."""
    perm = m["transpose"].attributes.get("perm")
    axes = attr_or_input(m["unsqueeze"], "axes", 1)
    if perm is None or axes is None:  # without perm the rank must be known: left to other passes
        return None
    rank = len(perm)
    if sorted(perm) != list(range(rank)):
        return None
    added = sorted(a + rank if a < 0 else a for a in axes)
    if len(set(added)) != len(added) or not all(0 <= a < rank for a in added) or len(added) >= rank:
        return None
    place = {a: i for i, a in enumerate(a for a in range(rank) if a not in added)}  # result axis -> x's axis
    return [place[a] for a in perm if a in place], [i for i, a in enumerate(perm) if a in added]
