"""eliminate_same_shape_reshapes: a Reshape whose result provably has its
input's dims, symbol by symbol, changes nothing.

    y = Reshape(x, shape)      dims(y) == dims(x), each an int or a symbol
 -> y = x

eliminate_nop does this where the target is a constant; torch's dynamo
exporter computes targets at run time (Shape, Slice, Concat), and after
scaled dot-product attention writes such a Reshape of its output back to
the shape it has, [B, H, S, D]. Shape inference works the target out as
the input's own symbols, and that is what this rule reads.

Refuses when a dim of x or y is unknown (neither an int nor a symbol) and
the others agree (a near miss); a Reshape whose dims provably change, or
whose ranks are unknown, is not this rule's case and is no near miss.
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import dims, same_dim


class EliminateSameShapeReshapes(Rule):
    name = "eliminate_same_shape_reshapes"
    description = "Reshape whose result provably has its input's dims (symbols included) -> its input"
    min_opset = 5  # Reshape with a shape input
    after_cleanup = False  # a cleanup itself: the fusions after it see the graph without it

    def pattern(self, opset: int) -> Op:
        return Op("Reshape", Var("x"), Var("shape"), name="reshape")

    pattern_near_misses = False  # every Reshape fits the pattern

    def check(self, m: Match) -> Optional[str]:
        return _same_dims_refusal(m["x"], m.root.outputs[0])

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        if edit.bypass_root(m["x"]) is not None:  # a graph input straight to a graph output
            edit.replace_root("Identity", [m["x"]])
        return None


def _same_dims_refusal(x, y) -> Optional[str]:
    """None where y provably has x's dims, int by int and symbol by symbol;
    "" (no near miss) where a dim differs or a rank is unknown; else why not."""
    a, b = dims(x), dims(y)
    if a is None or b is None or len(a) != len(b) or any(
            p is not None and q is not None and not same_dim(p, q) for p, q in zip(a, b)):
        return ""  # the dims change (or the ranks are unknown): no near miss, most nodes are so
    if None in a or None in b:
        return f"dims unknown where the rest agree: {a} -> {b}"
    return None
