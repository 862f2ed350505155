"""fuse_skip_layer_normalization (--target ort): a residual Add feeding a
LayerNormalization -> onnxruntime's com.microsoft SkipLayerNormalization.

    s = Add(input, skip)            (or Add(Add(input, bias), skip), bias [H])
    y = LayerNormalization(s, gamma, beta, axis=-1, epsilon=e)
->  y, _, _, s = SkipLayerNormalization(input, skip, gamma, beta, bias, epsilon=e)

Only when nothing else reads s (post-norm blocks: BERT): where the next
residual reads it too (pre-norm: GPT-2), the op could return it as its
fourth output, but onnxruntime's CPU SkipLayerNormalization is slower than
Add + LayerNormalization, which onnxruntime keeps there (targets.py).

onnxruntime's contract: input is [B, S, H] or [T, H]; skip has input's
shape, or [1, S, H] or [S, H]; gamma, beta and bias are [H].

Refuses when:
 1. the target is not ort (the rule does nothing for --target onnx);
 2. the normalization is not over the last axis alone, or uses stash_type 0,
    or its Mean/InvStdDev outputs are read; the sum s has other readers;
 3. input and skip cannot be shown to fit that contract (unknown or
    different dims: a broadcast onnxruntime would reject at run time);
 4. gamma, beta or bias is not [H];
 5. onnxruntime's CPU provider has no kernel for the element type.
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion import Const, Op, Rule, Var
from pyonnxopt.fusion.rule import Edit, Match
from pyonnxopt.fusion.rules._normalization import emit_skip_norm
from pyonnxopt.fusion.targets import MS_DOMAIN, dtype_reason, fits_skip_contract, shared_sum_reason
from pyonnxopt.fusion.values import dims


def _pattern(with_bias: bool) -> Op:
    a = Op("Add", Var("a"), Const("bias"), name="biased", commutative=True) if with_bias else Var("a")
    residual = Op("Add", a, Var("b"), name="residual", commutative=True, exclusive=False)
    return Op("LayerNormalization", residual, Const("gamma"), Const("beta", optional=True),
              name="norm", attrs={"stash_type": 1})


class FuseSkipLayerNormalization(Rule):
    name = "fuse_skip_layer_normalization"
    description = "(--target ort) Add [+ bias] -> LayerNormalization => com.microsoft SkipLayerNormalization"
    only_target = "ort"

    def pattern(self, opset: int) -> list:
        return [_pattern(True), _pattern(False)]

    def check(self, m: Match) -> Optional[str]:
        norm = m["norm"]
        total = dims(m["residual"].outputs[0])
        axis = norm.attributes.get("axis", -1)
        if total is None or axis not in (-1, len(total) - 1):
            return f"normalizes from axis {axis} (rank {None if total is None else len(total)}), not the last axis alone"
        if any(v is not None and (v.uses or v.is_graph_output) for v in norm.outputs[1:]):
            return "its Mean or InvStdDev output is read"
        order = self._order(m, total)
        if order is None:
            return (f"input and skip shapes {dims(m['a'])} and {dims(m['b'])} (sum {total}) do not provably fit "
                    "[B,S,H] + [B,S,H] | [1,S,H] | [S,H]")
        hidden = total[-1]
        for name in ("gamma", "beta", "bias"):
            if name in m and m[name] is not None and list(m.array(name).shape) != [hidden]:
                return f"'{m[name].name}' has shape {list(m.array(name).shape)}, needs [{hidden}]"
        return (shared_sum_reason("SkipLayerNormalization", m["residual"], set(m.nodes))
                or dtype_reason(MS_DOMAIN, "SkipLayerNormalization", m.dtype("gamma")))

    @staticmethod
    def _order(m: Match, total: list) -> Optional[tuple]:
        """(input, skip) as bound names, or None when neither order fits."""
        for inp, skip in (("a", "b"), ("b", "a")):
            if fits_skip_contract(dims(m[inp]), dims(m[skip]), total) and isinstance(total[-1], int):
                return inp, skip
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        inp, skip = self._order(m, dims(m["residual"].outputs[0]))
        inputs = [m[inp], m[skip], m["gamma"], m["beta"], m["bias"] if "bias" in m else None]
        eps = m["norm"].attributes.get("epsilon", 1e-5)
        emit_skip_norm(m, edit, "SkipLayerNormalization", inputs, eps, m["residual"], m["norm"].outputs[0])
        return None
