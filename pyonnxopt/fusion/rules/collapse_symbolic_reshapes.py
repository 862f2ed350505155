"""collapse_symbolic_reshapes: two or three Reshape, Flatten, Squeeze and
Unsqueeze nodes in a row whose result provably has its input's dims, symbol
by symbol, with dims of 1 added or removed, are one Squeeze and/or
Unsqueeze of the input.

    r = Reshape(u: [B, 1, 1, S, 1], [-1])                  # [B*S]
    y = Reshape(r, Shape(idx: [B, 1, 1, S]))                # [B, 1, 1, S]
 -> y = Squeeze(u, [4])

All four ops keep the elements' row-major order, so where the dims other
than the 1s are the same, in the same order, only axes of 1 move.
collapse_reshapes does this from int dims and constant targets; this rule
reads the symbols shape inference gives, through targets computed at run
time (transformers 5's padding mask, after gather_own_positions).

Refuses quietly (not its case): a dim of the input or the result unknown,
other dims than 1s that differ, and a replacement of as many nodes as it
removes (unless a target computed at run time goes with them).
"""

from __future__ import annotations

from typing import Optional, Union

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import constant_ints, dims, same_dim

_RESHAPES = "Reshape|Flatten|Squeeze|Unsqueeze"


class CollapseSymbolicReshapes(Rule):
    name = "collapse_symbolic_reshapes"
    description = "Reshape/Flatten/Squeeze/Unsqueeze chain that only adds or removes dims of 1 (symbols) -> (Un)Squeeze"
    min_opset = 5  # Reshape with a shape input
    after_cleanup = False  # a layout cleanup
    pattern_near_misses = False  # any two reshapes in a row fit

    def pattern(self, opset: int) -> list:
        def step(inner, n):
            return Op(_RESHAPES, inner, Var(f"arg{n}", optional=True), name=f"step{n}")

        return [step(step(step(Var("x"), 2), 1), 0), step(step(Var("x"), 1), 0)]

    def check(self, m: Match) -> Optional[str]:
        plan = _plan(m)
        return plan if isinstance(plan, str) else None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        dropped, inserted = _plan(m)
        x = m["x"]
        if dropped:
            x = edit.squeeze("Squeeze", x, dropped, root=not inserted)
        if inserted:
            x = edit.squeeze("Unsqueeze", x, inserted, root=True)
        if not dropped and not inserted and edit.bypass_root(x) is not None:
            edit.replace_root("Identity", [x])  # a graph input straight to a graph output
        return None


def _plan(m: Match) -> Union[tuple, str]:
    """(input axes to squeeze, output axes to unsqueeze), or "" where not the case."""
    a, b = dims(m["x"]), dims(m.root.outputs[0])
    if a is None or b is None or None in a or None in b:
        return ""
    dropped, inserted, i, j = [], [], 0, 0
    while i < len(a) or j < len(b):
        if i < len(a) and j < len(b) and same_dim(a[i], b[j]):
            i, j = i + 1, j + 1
        elif i < len(a) and a[i] == 1:
            dropped, i = dropped + [i], i + 1
        elif j < len(b) and b[j] == 1:
            inserted, j = inserted + [j], j + 1
        else:
            return ""
    made = int(bool(dropped)) + int(bool(inserted))
    computed = any(len(n.inputs) > 1 and n.inputs[1] is not None and constant_ints(n.inputs[1]) is None
                   and len(n.inputs[1].uses) == 1 for n in m.nodes)
    if made > len(m.nodes) or (made == len(m.nodes) and not computed):
        return ""
    return dropped, inserted
