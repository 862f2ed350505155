"""cancel_reshapes_around_matmul: a batched MatMul whose operands' batch
axes were merged into one, and whose result's are split back, is the
MatMul of the unmerged operands.

    y = Reshape(MatMul(Reshape(a, [-1, m, k]), Reshape(b, [-1, k, n])), [..., m, n])
 -> y = MatMul(a, b)            a: [b1, ..., bj, m, k], b: [b1, ..., bj, k, n]

A bias added to the merged product before the split (Bloom's ALiBi, [B*H,
1, T]) is split the same way and added to the unmerged product:

    y = Reshape(Add(MatMul(...), bias), [..., m, n])
 -> y = Add(MatMul(a, b), Reshape(bias, [..., 1 | m, 1 | n]))

Either operand may also go through a Transpose of its last two axes after
its Reshape; that Transpose then applies to a or b itself (a Transpose of
the last two axes commutes with merging the axes before them). Axes of
size 1 hold no order: a Reshape may drop them from a or b, or add them to
y, anywhere; a Squeeze of a or b, or an Unsqueeze of the product, keeps
them (with a dynamic sequence length tf2onnx merges `[B, H, S, 1, d]`, and
its Unsqueeze then cancels against that Squeeze).

tf2onnx lowers Keras's einsums (MultiHeadAttention's scores
`[B, H, S, d] x [B, H, T, d] -> [B, H, S, T]`, and its context) to
`[B*H, S, d]` products between such Reshapes; unmerged, the attention is
the 4-d one fuse_attention reads.

Refuses when:
 1. a dim of a, b, y or the merged operands' last two is unknown (not an
    int nor a symbol);
 2. a Reshape does more than merge the axes before the last two (those
    two kept; a merged operand's last two of size 1 refused too), the
    merged operands are not 3-d, or the Transpose moves other axes;
 3. a's and b's batch axes are not provably the same dims (the merged
    product pairs them one to one; a MatMul of a and b would broadcast);
 4. y is not a's batch axes followed by the product's two;
 5. with a bias: a size-1 axis moves between operands and result; the
    bias is not 3-d, or would widen the product; the batch axes hold more
    than one symbol (the bias's split has one -1; its own last two dims
    are read from it at run time where they are symbols).
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
        def product(sa: bool, sb: bool, biased: bool) -> Op:
            mm = Op("MatMul", _operand("a", sa), _operand("b", sb), name="matmul")
            return Op("Add", mm, Var("bias"), name="biased", commutative=True) if biased else mm

        return [Op("Reshape", product(sa, sb, biased), Var("y_shape"), name="split")
                for biased in (False, True) for sa in (False, True) for sb in (False, True)]

    def check(self, m: Match) -> Optional[str]:
        plan = _plan(m)
        if isinstance(plan, str):
            return plan
        target = _bias_target(m, plan) if "bias" in m else None
        return target if isinstance(target, str) else None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        plan = _plan(m)
        operands = []
        for side in ("a", "b"):
            v, ones = m[side], plan[side]
            if ones:  # the merge dropped them
                v = edit.squeeze("Squeeze", v, ones, hint=f"{m.root.outputs[0].name}_{side}_squeezed")
            if f"{side}_swap" in m:
                rank = len(dims(m[side])) - len(ones)
                (v,) = edit.node("Transpose", [v], {"perm": list(range(rank - 2)) + [rank - 1, rank - 2]},
                                 hint=f"{m.root.outputs[0].name}_{side}_swapped")
            operands.append(v)
        if "bias" in m:  # its merged batch split as the product's, then added
            (product,) = edit.node("MatMul", operands, hint=f"{m.root.outputs[0].name}_product")
            target = edit.shape_from_dims(_bias_target(m, plan), f"{m['bias'].name}_split_shape")
            (bias,) = edit.node("Reshape", [m["bias"], target], hint=f"{m['bias'].name}_split")
            edit.replace_root("Add", [product, bias])
            return None
        if not plan["y"]:
            edit.replace_root("MatMul", operands)
            return None
        (product,) = edit.node("MatMul", operands, hint=f"{m.root.outputs[0].name}_product")
        edit.squeeze("Unsqueeze", product, plan["y"], root=True)  # the split added them
        return None


def _bias_target(m: Match, plan: dict):
    """A bias added to the merged product, [M | 1, r, c] with r and c 1 or
    the product's own: its target split as the product's batch (one
    symbol at most there, the -1), as a list of ints and (bias, axis)
    reads of the bias's own dims; or why not."""
    bias, y = dims(m["bias"]), dims(m.root.outputs[0])
    product = dims(m["matmul"].outputs[0])
    if any(plan[side] for side in ("a", "b", "y")):
        return "a size-1 axis moves between the operands and the result beside the bias"
    if bias is None or len(bias) != 3 or product is None or len(product) != 3:
        return f"the bias {bias} is not 3-d like the merged product {product}"
    if not (bias[0] == 1 or same_dim(bias[0], product[0])) or any(
            not (d == 1 or same_dim(d, p)) for d, p in zip(bias[1:], product[1:])):
        return f"the bias {bias} does not broadcast into the merged product {product} without widening it"
    batch = y[:-2] if bias[0] != 1 else [1] * (len(y) - 2)
    symbols = [d for d in batch if not isinstance(d, int)]
    if len(symbols) > 1:
        return f"the product's batch axes {batch} hold more than one symbol"
    return [d if isinstance(d, int) else -1 for d in batch] + [d if isinstance(d, int) else (m["bias"], i + 1)
                                                              for i, d in enumerate(bias[1:])]


def _without_ones(d: list) -> tuple:
    """d without its axes of size 1, and where they were."""
    return [e for e in d if e != 1], [i for i, e in enumerate(d) if e == 1]


def _plan(m: Match):
    """{"a", "b": the axes of size 1 a and b lose, "y": those y gains}, or
    why the rule does not apply. Axes of size
    1 hold no order, so a Reshape may drop or add them anywhere."""
    a, b, y = dims(m["a"]), dims(m["b"]), dims(m.root.outputs[0])
    ma, mb = dims(m["a_merged"].outputs[0]), dims(m["b_merged"].outputs[0])
    # The merged operands' first dim may be unknown: with their last two a's (b's), it is the product of the rest.
    for label, d in (("a", a), ("b", b), ("the merged a", ma and ma[1:]), ("the merged b", mb and mb[1:]),
                     ("the result", y)):
        if d is None or any(e is None for e in d):
            return f"{label}'s dims {d} are not all known (ints or symbols)"
    plan, kept = {}, {}
    for side, d, merged in (("a", a, ma), ("b", b, mb)):
        kept[side], plan[side] = _without_ones(d)
        if (len(merged) != 3 or 1 in merged[1:] or len(kept[side]) < 2
                or not all(same_dim(x, z) for x, z in zip(kept[side][-2:], merged[1:]))):
            return f"the Reshape of {side} {d} -> {merged} does more than merge the axes before the last two"
        swap = m[f"{side}_swap"] if f"{side}_swap" in m else None
        if swap is not None and list(swap.attributes.get("perm", [2, 1, 0])) != [0, 2, 1]:
            return f"the Transpose after {side}'s Reshape moves more than its last two axes"
    ka, kb = kept["a"], kept["b"]
    if len(ka) != len(kb) or not all(same_dim(x, z) for x, z in zip(ka[:-2], kb[:-2])):
        return f"a's batch axes {ka[:-2]} and b's {kb[:-2]} are not provably the same dims"
    rows = ka[-1] if "a_swap" in m else ka[-2]
    cols = kb[-2] if "b_swap" in m else kb[-1]
    want = ka[:-2] + [rows, cols]
    kept_y, plan["y"] = _without_ones(y)
    if len(kept_y) != len(want) or not all(same_dim(x, z) for x, z in zip(kept_y, want)):
        return f"the result {y} is not the batch axes and the product's two, {want}"
    return plan
