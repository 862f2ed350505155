"""fuse_bias_gelu (--target ort): the bias Add before a Gelu goes into
onnxruntime's op, which adds it while it computes the Gelu.

    Gelu(Add(x, bias))  -> com.microsoft BiasGelu(x, bias)       (erf)
    FastGelu(Add(x, bias)) or Gelu<approximate=tanh>(Add(x, bias))
                        -> com.microsoft FastGelu(x, bias)       (tanh)

The Gelu is the opset-20 one or com.microsoft's (fuse_gelu, which runs just
before, writes the latter with --target ort): a transformer's
MatMul -> Add(bias) -> Gelu.

Refuses when:
 1. the target is not ort (the rule does nothing for --target onnx);
 2. the bias is not 1-d, or x's last dim is not provably its length (the
    ops take a bias of x's last dim and do not broadcast x);
 3. a FastGelu already has a bias (the pattern takes one input);
 4. onnxruntime's CPU provider has no kernel for the element type
    (BiasGelu: double).
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules._channels import attribute
from pyonnxopt.fusion.targets import MS_DOMAIN, dtype_reason, import_ms_domain
from pyonnxopt.fusion.values import dims


def _biased() -> Op:
    return Op("Add", Var("x"), Const("bias"), name="bias_add", commutative=True)


class FuseBiasGelu(Rule):
    name = "fuse_bias_gelu"
    description = "(--target ort) Add(x, bias) -> Gelu => com.microsoft BiasGelu / FastGelu with its bias"
    only_target = "ort"

    def pattern(self, opset: int) -> list:
        variants = [Op("Gelu|FastGelu", _biased(), name="gelu", domain=MS_DOMAIN)]
        if opset >= 20:
            variants.append(Op("Gelu", _biased(), name="gelu"))
        return variants

    def check(self, m: Match) -> Optional[str]:
        bias, x = m.shape("bias"), dims(m["x"])
        if len(bias) != 1 or x is None or not x or x[-1] != bias[0]:
            return f"the bias {bias} is not 1-d of x's last dim (x: {x})"
        return dtype_reason(MS_DOMAIN, _fused_op(m["gelu"]), m.dtype("bias"))

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        import_ms_domain(m.model)
        edit.replace_root(_fused_op(m["gelu"]), [m["x"], m["bias"]], domain=MS_DOMAIN)
        return None


def _fused_op(gelu) -> str:
    tanh = gelu.op_type == "FastGelu" or (gelu.domain == "" and attribute(gelu, "approximate", "none") == "tanh")
    return "FastGelu" if tanh else "BiasGelu"
