"""fuse_hard_swish: MobileNetV3's hard swish, as exporters write it below
opset 14 or spell it out, -> one HardSwish (opset 14):

    y = Mul(x, HardSigmoid(x, alpha=1/6, beta=0.5))     torch, paddle2onnx below opset 14
    y = Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)            x * relu6(x + 3) / 6
    y = Mul(Mul(x, Clip(Add(x, 3), 0, 6)), 1/6)          the same times 1/6 (TF)

HardSwish(x) = x * max(0, min(1, x / 6 + 0.5)); the Clip forms compute
x * min(max(x + 3, 0), 6) / 6, the same up to rounding (tolerance of the
element type, as the check says).

Refuses when:
 1. a constant is not its value (one element) or has more dims than x (it
    would broadcast x), or x's rank is unknown;
 2. the opset is below 14;
 3. onnxruntime's CPU provider has no kernel for the element type.
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.targets import dtype_reason, opset_reason
from pyonnxopt.fusion.values import constants_refusal

_VALUES = {"three": 3.0, "zero": 0.0, "six": 6.0, "divisor": 6.0, "sixth": 1 / 6}


def _mul(a, b, name: str) -> Op:
    return Op("Mul", a, b, name=name, commutative=True)


class FuseHardSwish(Rule):
    name = "fuse_hard_swish"
    description = "x * HardSigmoid(x) and x * relu6(x + 3) / 6 -> HardSwish (opset 14)"

    def pattern(self, opset: int) -> list:
        variants = []
        x = Var("x")
        variants.append(_mul(x, Op("HardSigmoid", x, name="gate"), "root"))
        for divide in (True, False):
            x = Var("x")
            relu6 = Op("Clip", Op("Add", x, Const("three"), name="shift", commutative=True), Const("zero"),
                       Const("six"), name="gate")
            product = _mul(x, relu6, "product")
            variants.append(Op("Div", product, Const("divisor"), name="root") if divide
                            else _mul(product, Const("sixth"), "root"))
        return variants

    def check(self, m: Match) -> Optional[str]:
        dtype = m.dtype("x") or m.dtype("root")
        gate = m["gate"]
        if gate.op_type == "HardSigmoid":
            alpha, beta = gate.attributes.get("alpha", 0.2), gate.attributes.get("beta", 0.5)
            if abs(alpha - 1 / 6) > 1e-6 or abs(beta - 0.5) > 1e-6:
                return f"HardSigmoid has alpha {alpha:.7g} and beta {beta:.7g}, HardSwish's are 1/6 and 0.5"
        return (constants_refusal(m, _VALUES, dtype) or opset_reason("HardSwish", m.opset)
                or dtype_reason("", "HardSwish", dtype))

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        edit.replace_root("HardSwish", [m["x"]])
        return None
