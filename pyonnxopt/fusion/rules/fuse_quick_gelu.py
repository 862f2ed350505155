"""fuse_quick_gelu (--target ort): x * Sigmoid(a * x) -> onnxruntime's
com.microsoft QuickGelu(x, alpha=a): SiLU/Swish (a = 1, EfficientNet's
activation, as torch exports it) and CLIP's quick GELU (a = 1.702).

    y = Mul(x, Sigmoid(x))               -> QuickGelu(x, alpha=1.0)
    y = Mul(x, Sigmoid(Mul(x, a)))       -> QuickGelu(x, alpha=a)

One op instead of two: 0.73x their time at ORT_DISABLE_ALL on a
[1, 96, 112, 112] float32 tensor (one thread); onnxruntime makes the same
op itself at its default level.

Refuses when:
 1. the target is not ort (the rule does nothing for --target onnx);
 2. a is not a one-element finite constant, or has more dims than x (it
    would broadcast x to a bigger shape);
 3. onnxruntime's CPU provider has no kernel for the element type.
"""

from __future__ import annotations

import math
from typing import Optional

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.targets import MS_DOMAIN, dtype_reason, import_ms_domain
from pyonnxopt.fusion.values import scalar_of


class FuseQuickGelu(Rule):
    name = "fuse_quick_gelu"
    description = "(--target ort) x * Sigmoid(a * x) => com.microsoft QuickGelu (SiLU/Swish, quick GELU)"
    only_target = "ort"

    def pattern(self, opset: int) -> list:
        x = Var("x")
        scaled = Op("Sigmoid", Op("Mul", x, Const("alpha"), name="scale", commutative=True), name="sigmoid")
        plain = Op("Sigmoid", x, name="sigmoid")
        return [Op("Mul", x, scaled, name="gate", commutative=True),
                Op("Mul", x, plain, name="gate", commutative=True)]

    def check(self, m: Match) -> Optional[str]:
        alpha = _alpha(m)
        if alpha is None or not math.isfinite(alpha):
            return f"the scale '{m['alpha'].name}' is not one finite number"
        scale_rank = len(m.shape("alpha")) if "alpha" in m else 0
        rank = None if m.shape("x") is None else len(m.shape("x"))
        if scale_rank and (rank is None or scale_rank > rank):
            return f"the scale '{m['alpha'].name}' has rank {scale_rank} and x's is {rank}: it may broadcast x"
        return dtype_reason(MS_DOMAIN, "QuickGelu", m.dtype("gate") or m.dtype("x"))

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        import_ms_domain(m.model)
        edit.replace_root("QuickGelu", [m["x"]], {"alpha": _alpha(m)}, domain=MS_DOMAIN)
        return None


def _alpha(m: Match) -> Optional[float]:
    return scalar_of(m.array("alpha")) if "alpha" in m else 1.0
