"""fuse_partial_rotary (opset 23): a RotaryEmbedding on the first r
channels of each head, concatenated with the rest, is one RotaryEmbedding
with rotary_embedding_dim=r.

    y = Concat(RotaryEmbedding(Slice(x, 0, r, axis=-1), cos, sin [, pos]), Slice(x, r, D, axis=-1), axis=-1)
->  y = RotaryEmbedding(x, cos, sin [, pos], rotary_embedding_dim=r)
(the two Slices also as one Split into [r, D - r], as slices_to_split
writes them).

torch's dynamo exporter writes Phi's, StableLM's and GPT-NeoX's partial
rotary this way at opset 23 (x the [B, H, S, D] heads). The op rotates the
first r channels of each head and passes the others through, as the
Concat did; its caches hold r/2 channels either way. Three nodes fewer,
and fuse_rotary_heads can then take the head split.

Refuses when:
 1. x is not 4-d with a known head size D, or the slices are not x's
    first r and last D - r channels (last axis, step 1; a Split: two parts
    of known sizes along the last axis);
 2. the RotaryEmbedding already rotates fewer than r channels, or r is odd.
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import clamped_range, dims, one_axis_slice

def _slice(x: Var, name: str) -> Op:
    return Op("Slice", x, Var(f"{name}_starts"), Var(f"{name}_ends"), Var(f"{name}_axes"),
              Var(f"{name}_steps", optional=True), name=name)


class FusePartialRotary(Rule):
    name = "fuse_partial_rotary"
    description = ("Concat(RotaryEmbedding(x[..., :r]), x[..., r:]) -> RotaryEmbedding(x, rotary_embedding_dim=r) "
                   "(opset 23)")
    min_opset = 23

    def pattern(self, opset: int) -> list:
        x = Var("x")  # both slices read it
        rotary = Op("RotaryEmbedding", _slice(x, "rotated"), Var("cos"), Var("sin"), Var("pos", optional=True),
                    name="rotary")
        x2, sizes = Var("x"), Var("sizes", optional=True)
        parts = [Op("Split", x2, sizes, name=n, output=i) for i, n in enumerate(("rotated", "passed"))]
        split_rotary = Op("RotaryEmbedding", parts[0], Var("cos"), Var("sin"), Var("pos", optional=True),
                          name="rotary")
        return [Op("Concat", rotary, _slice(x, "passed"), name="joined"),
                Op("Concat", split_rotary, parts[1], name="joined")]

    def check(self, m: Match) -> Optional[str]:
        x = dims(m["x"])
        if x is None or len(x) != 4 or not isinstance(x[3], int):
            return f"x {x} is not 4-d heads with a known head size"
        d = x[3]
        if m["joined"].attributes.get("axis") not in (-1, 3):
            return "the Concat is not along the last axis"
        r = _bounds(m, "rotated", d)
        rest = _bounds(m, "passed", d)
        if r is None or rest is None or r[0] != 0 or rest != (r[1], d):
            return f"the slices are not x's first r and last {d} - r channels along the last axis, step 1"
        r = r[1]
        if r % 2 or not 0 < r < d:
            return f"{r} rotated channels of {d}: not an even part of the head"
        given = m["rotary"].attributes.get("rotary_embedding_dim", 0)
        if given not in (0, r):
            return f"the RotaryEmbedding already rotates {given} of its {r} channels"
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        r = _bounds(m, "rotated", dims(m["x"])[3])[1]
        rotary = m["rotary"]
        inputs = [m["x"], m["cos"], m["sin"], m["pos"]]
        made = edit.replace_root("RotaryEmbedding", inputs, copy_attrs_from=rotary)
        made.set_attribute("rotary_embedding_dim", r)
        return None


def _bounds(m: Match, name: str, d: int) -> Optional[tuple]:
    """(start, end) of the Slice (or Split part) along x's last axis, clamped
    to [0, d]; None when it slices another axis, steps, or its operands are
    not constants."""
    if m[name].op_type == "Split":
        split = m[name]
        widths = [dims(v) for v in split.outputs]
        if (split != m["passed"] or len(widths) != 2 or split.attributes.get("axis", 0) not in (-1, 3)
                or any(w is None or len(w) != 4 or not isinstance(w[3], int) for w in widths)):
            return None
        first = widths[0][3]
        return (0, first) if name == "rotated" else (first, first + widths[1][3])
    part = one_axis_slice(m[name])
    return clamped_range(part[1], part[2], d) if part is not None and part[0] in (-1, 3) else None
