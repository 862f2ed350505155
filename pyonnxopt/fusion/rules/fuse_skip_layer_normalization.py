"""fuse_skip_layer_normalization (--target ort): a residual Add feeding a
LayerNormalization -> onnxruntime's com.microsoft SkipLayerNormalization.

    s = Add(input, skip)            (or Add(Add(input, bias), skip), bias [H])
    y = LayerNormalization(s, gamma, beta, axis=-1, epsilon=e)
->  y, _, _, s = SkipLayerNormalization(input, skip, gamma, beta, bias, epsilon=e)

When something else reads s (pre-norm transformers add it to the next
residual), the fused op returns it as its fourth output; s keeps its name.

onnxruntime's contract: input is [B, S, H] or [T, H]; skip has input's
shape, or [1, S, H] or [S, H]; gamma, beta and bias are [H].

Refuses when:
 1. the target is not ort (the rule does nothing for --target onnx);
 2. the normalization is not over the last axis alone, or uses stash_type 0,
    or its Mean/InvStdDev outputs are read;
 3. input and skip cannot be shown to fit that contract (unknown or
    different dims: a broadcast onnxruntime would reject at run time);
 4. gamma, beta or bias is not [H];
 5. onnxruntime's CPU provider has no kernel for the element type.
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion import Const, Op, Rule, Var
from pyonnxopt.fusion.rule import Edit, Match
from pyonnxopt.fusion.targets import MS_DOMAIN, dtype_reason, import_ms_domain
from pyonnxopt.fusion.values import dims, same_dim
from pyonnxopt.model import Model
from pyonnxopt.passes.base import PassOptions, PassResult


def _pattern(with_bias: bool) -> Op:
    a = Op("Add", Var("a"), Const("bias"), name="biased", commutative=True) if with_bias else Var("a")
    residual = Op("Add", a, Var("b"), name="residual", commutative=True, exclusive=False)
    return Op("LayerNormalization", residual, Const("gamma"), Const("beta", optional=True),
              name="norm", attrs={"stash_type": 1})


def _fits(inp: Optional[list], skip: Optional[list], total: Optional[list]) -> bool:
    """onnxruntime's shape contract, provably (ints or equal symbols)."""
    if inp is None or skip is None or total is None or len(inp) not in (2, 3) or len(total) != len(inp):
        return False
    if not all(same_dim(i, t) for i, t in zip(inp, total)):
        return False
    if len(skip) == len(inp) and all(same_dim(s, i) for s, i in zip(skip, inp)):
        return True
    if len(inp) == 3:
        tail = skip[-2:] if len(skip) in (2, 3) else None
        lead_ok = len(skip) == 2 or skip[0] == 1
        return tail is not None and lead_ok and all(same_dim(s, i) for s, i in zip(tail, inp[1:]))
    return False


class FuseSkipLayerNormalization(Rule):
    name = "fuse_skip_layer_normalization"
    description = "(--target ort) Add [+ bias] -> LayerNormalization => com.microsoft SkipLayerNormalization"

    def pattern(self, opset: int) -> list:
        return [_pattern(True), _pattern(False)]

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        if options.target != "ort":
            return PassResult(False, {"nodes_removed": 0, "nodes_added": 0, "rewrites": [], "refused": [],
                                      "near_misses": []})
        return super().run(model, options)

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
        return dtype_reason(MS_DOMAIN, "SkipLayerNormalization", m.dtype("gamma"))

    @staticmethod
    def _order(m: Match, total: list) -> Optional[tuple]:
        """(input, skip) as bound names, or None when neither order fits."""
        for inp, skip in (("a", "b"), ("b", "a")):
            if _fits(dims(m[inp]), dims(m[skip]), total) and isinstance(total[-1], int):
                return inp, skip
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        norm, residual = m["norm"], m["residual"]
        inp, skip = self._order(m, dims(residual.outputs[0]))
        inputs = [m[inp], m[skip], m["gamma"], m["beta"], m["bias"] if "bias" in m else None]
        while inputs[-1] is None:
            inputs.pop()
        eps = norm.attributes.get("epsilon", 1e-5)
        total = residual.outputs[0]
        read_elsewhere = total.is_graph_output or any(n != norm for n, _ in total.uses)
        import_ms_domain(m.model)
        outs = edit.node("SkipLayerNormalization", inputs, {"epsilon": float(eps)}, domain=MS_DOMAIN,
                         outputs=4 if read_elsewhere else 1, omitted=(1, 2), before=residual)
        edit.replace_value(norm.outputs[0], outs[0])
        if read_elsewhere:
            edit.replace_value(total, outs[3])
        return None
