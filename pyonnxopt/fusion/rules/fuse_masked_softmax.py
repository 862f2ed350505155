"""fuse_masked_softmax: a Softmax masked after the fact and renormalized
(jax2onnx's dot-product attention with a mask) -> a Softmax of the
masked scores:

    p = Softmax(s)                   w = Mul(p, M)      M: 0 or 1 per score
    total = ReduceSum(w, [-1])       kept = Greater(total, 0)
    y = Where(kept, Div(w, Where(kept, total, 1)), 0)
->  p = Softmax(Add(s, A))           A = Where(M, 0, -inf)
    y = Where(IsNaN(p), 0, p)

Both are exp(s) over the kept scores' sum where a query keeps a key, and 0
where it keeps none (the Softmax of -inf everywhere is NaN, which the guard
zeroes; that is torch's guard, so fuse_attention then takes the whole as an
Attention). The guard is left out when M is a constant that keeps a key for
every query. M is a Cast of a boolean, or a constant of 0s and 1s (A is
then a constant). Only where every kept weight underflows to 0 do the two
differ (the original then gives 0, this the Softmax over the kept keys).

Refuses when:
 1. the opset is below 13 (Softmax flattens at its axis before, and
    ReduceSum takes its axes as an attribute);
 2. the Softmax or the ReduceSum is not over the last axis (or the
    ReduceSum's axes are not constant);
 3. the mask is neither a Cast of a boolean to the scores' type nor a
    constant of 0s and 1s;
 4. a constant is not its value: the Greater's and the result's 0;
 5. the scores are not float16, float or double.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import helper

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import constant_ints, constant_reason, dims


def _renormalized(mask) -> Op:
    probs = Op("Softmax", Var("scores"), name="probs")
    masked = Op("Mul", probs, mask, name="masked", commutative=True)
    total = Op("ReduceSum", masked, Const("axes", optional=True), name="total",
               attrs={"keepdims": 1, "noop_with_empty_axes": 0})
    kept = Op("Greater", total, Const("zero"), name="kept")
    denominator = Op("Where", kept, total, Const("one"), name="denominator")
    return Op("Where", kept, Op("Div", masked, denominator, name="normed"), Const("zero_out"), name="result")


class FuseMaskedSoftmax(Rule):
    name = "fuse_masked_softmax"
    description = "Softmax(s) * mask renormalized over the kept keys -> Softmax(s + where(mask, 0, -inf)), guarded"
    min_opset = 13

    def pattern(self, opset: int) -> list:
        # The Cast may feed other readers too: it stays for them.
        cast = Op("Cast", Var("keep"), name="mask", exclusive=False)
        return [_renormalized(cast), _renormalized(Const("mask"))]

    def check(self, m: Match) -> Optional[str]:
        rank = len(dims(m["probs"].inputs[0]) or []) or None
        if not _last_axis(m["probs"].attributes.get("axis", -1), rank):
            return "the Softmax is not over the last axis"
        axes = None if m["axes"] is None else constant_ints(m["axes"])
        if axes is None or len(axes) != 1 or not _last_axis(axes[0], rank):
            return f"the ReduceSum is over axes {axes}, not the last"
        dtype = m.dtype("scores")
        if dtype not in (helper.TensorProto.FLOAT, helper.TensorProto.FLOAT16, helper.TensorProto.DOUBLE):
            return "the scores are not float16, float or double"
        if "keep" in m:
            if m.dtype("keep") != helper.TensorProto.BOOL or m["mask"].attributes.get("to") != dtype:
                return "the mask is not a Cast of a boolean to the scores' type"
        elif not np.all(np.isin(m.array("mask"), (0, 1))):
            return f"the mask '{m['mask'].name}' is not all 0s and 1s"
        for name in ("zero", "zero_out"):
            why = constant_reason(f"'{m[name].name}'", m.array(name), 0.0, dtype)
            if why:
                return why
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        dtype = helper.tensor_dtype_to_np_dtype(m.dtype("scores"))
        zero, minus_inf = np.zeros((), dtype), np.array(-np.inf, dtype)
        if "keep" in m:
            branches = [edit.constant(zero, "mask_zero"), edit.constant(minus_inf, "mask_minus_inf")]
            (additive,) = edit.node("Where", [m["keep"], *branches], hint=f"{m['keep'].name}_additive")
            guard = True
        else:
            mask = m.array("mask")
            additive = edit.constant(np.where(mask != 0, zero, minus_inf).astype(dtype), f"{m['mask'].name}_additive")
            guard = not bool(np.all(np.any(mask != 0, axis=-1)))
        (scores,) = edit.node("Add", [m["scores"], additive], hint=f"{m['scores'].name}_masked")
        (probs,) = edit.node("Softmax", [scores], {"axis": -1}, hint=m["probs"].name or "masked_softmax")
        if not guard:
            return edit.bypass_root(probs)
        (nan,) = edit.node("IsNaN", [probs], hint=f"{probs.name}_isnan")
        edit.replace_root("Where", [nan, edit.constant(zero, "nan_zero"), probs])
        return None


def _last_axis(axis: int, rank: Optional[int]) -> bool:
    return axis == -1 or (rank is not None and axis == rank - 1)

