"""cancel_reshapes_around_matmul: a batched MatMul whose operands' batch
axes were merged into one, and whose result's are split back, is the
MatMul of the unmerged operands.

    y = Reshape(MatMul(Reshape(a, [-1, m, k]), Reshape(b, [-1, k, n])), [..., m, n])
 -> y = MatMul(a, b)            a: [b1, ..., bj, m, k], b: [b1, ..., bj, k, n]

Either operand may also go through a Transpose of its last two axes after
its Reshape; that Transpose then applies to a or b itself (a Transpose of
the last two axes commutes with merging the axes before them).

tf2onnx lowers Keras's einsums (MultiHeadAttention's scores
`[B, H, S, d] x [B, H, T, d] -> [B, H, S, T]`, and its context) to
`[B*H, S, d]` products between such Reshapes; unmerged, the attention is
the 4-d one fuse_attention reads.

Refuses when:
 1. a dim of a, b, the merged operands or y is unknown (not an int nor a
    symbol);
 2. a Reshape does more than merge the axes before the last two (those
    two kept), the merged operands are not 3-d, or the Transpose moves
    other axes;
 3. a's and b's batch axes are not provably the same dims (the merged
    product pairs them one to one; a MatMul of a and b would broadcast);
 4. y is not a's batch axes followed by the product's two.
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import dims, same_dim


def _operand(side: str, swapped: bool) -> Op:
    merged = Op("Reshape", Var(side), Var(f"{side}_shape"), name=f"{side}_merged")
    return Op("Transpose", merged, name=f"{side}_swap") if swapped else merged


class CancelReshapesAroundMatmul(Rule):
    name = "cancel_reshapes_around_matmul"
    description = "Reshape(MatMul(Reshape(a), Reshape(b))) merging and splitting the batch axes -> MatMul(a, b)"
    min_opset = 5  # Reshape with a shape input
    after_cleanup = False  # a layout cleanup: the fusions see its result
    pattern_near_misses = False  # every Reshape starts the pattern; a product it refuses still says why

    def pattern(self, opset: int) -> list:
        return [Op("Reshape", Op("MatMul", _operand("a", sa), _operand("b", sb), name="matmul"), Var("y_shape"),
                   name="split")
                for sa in (False, True) for sb in (False, True)]

    def check(self, m: Match) -> Optional[str]:
        return _refusal(m)

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        operands = []
        for side in ("a", "b"):
            v = m[side]
            if f"{side}_swap" in m:
                rank = len(dims(v))
                (v,) = edit.node("Transpose", [v], {"perm": list(range(rank - 2)) + [rank - 1, rank - 2]},
                                 hint=f"{m.root.outputs[0].name}_{side}_swapped")
            operands.append(v)
        edit.replace_root("MatMul", operands)
        return None


def _refusal(m: Match) -> Optional[str]:
    a, b, y = dims(m["a"]), dims(m["b"]), dims(m.root.outputs[0])
    ma, mb = dims(m["a_merged"].outputs[0]), dims(m["b_merged"].outputs[0])
    for label, d in (("a", a), ("b", b), ("the merged a", ma), ("the merged b", mb), ("the result", y)):
        if d is None or any(e is None for e in d):
            return f"{label}'s dims {d} are not all known (ints or symbols)"
    for side, d, merged in (("a", a, ma), ("b", b, mb)):
        if len(merged) != 3 or len(d) < 3 or not all(same_dim(x, z) for x, z in zip(d[-2:], merged[-2:])):
            return f"the Reshape of {side} {d} -> {merged} does more than merge the axes before the last two"
        swap = m[f"{side}_swap"] if f"{side}_swap" in m else None
        if swap is not None and list(swap.attributes.get("perm", [2, 1, 0])) != [0, 2, 1]:
            return f"the Transpose after {side}'s Reshape moves more than its last two axes"
    if len(a) != len(b) or not all(same_dim(x, z) for x, z in zip(a[:-2], b[:-2])):
        return f"a's batch axes {a[:-2]} and b's {b[:-2]} are not provably the same dims"
    rows = a[-1] if "a_swap" in m else a[-2]
    cols = b[-2] if "b_swap" in m else b[-1]
    want = a[:-2] + [rows, cols]
    if len(y) != len(want) or not all(same_dim(x, z) for x, z in zip(y, want)):
        return f"the result {y} is not the batch axes and the product's two, {want}"
    return None
