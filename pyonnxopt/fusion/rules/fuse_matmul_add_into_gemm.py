"""fuse_matmul_add_into_gemm: a MatMul of two matrices plus a bias that
broadcasts to the product becomes one Gemm.

    y = Add(MatMul(a, b), c)    (either Add input order)
 -> y = Gemm(a, b, c)           (alpha = beta = 1, no transposes)

a and b need not be constants; their ranks must be known to be 2 (run
infer_shapes first). Gemm broadcasts C only from C to [M, N]
(unidirectionally), while Add broadcasts both ways: c must not widen the
product.

Refuses when:
1. the product has another reader or is a graph output (pattern);
2. the rank of a or b is unknown, or not 2;
3. the element type is unknown or not float16, float or double (Gemm on
   integers is standard from opset 11, but onnxruntime has no kernel for it);
4. c's shape is unknown, has more than 2 axes, or has an axis that is
   neither 1 nor known to equal the product's (it could widen the product);
5. the opset is below 7 (Gemm's C broadcast by attribute there).
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules._channels import type_refusal


class FuseMatmulAddIntoGemm(Rule):
    name = "fuse_matmul_add_into_gemm"
    description = "MatMul(a, b) + c -> Gemm(a, b, c) for 2-D a and b when c broadcasts to the product"
    min_opset = 7

    def pattern(self, opset: int) -> Op:
        return Op("Add", Op("MatMul", Var("a"), Var("b"), name="matmul"), Var("c"), name="add", commutative=True)

    def check(self, m: Match) -> Optional[str]:
        a, b = m.shape("a"), m.shape("b")
        for name, shape in (("a", a), ("b", b)):
            if shape is None:
                return f"the rank of MatMul input {name} is unknown"
            if len(shape) != 2:
                return f"MatMul input {name} has rank {len(shape)}, Gemm needs 2"
        why = type_refusal(m.dtype("a") or m.dtype("b"))
        if why:
            return why
        return _bias_refusal(m.shape("c"), [a[0], b[1]])

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        edit.replace_root("Gemm", [m["a"], m["b"], m["c"]])
        return None


def _bias_refusal(c: Optional[list], product: list) -> Optional[str]:
    if c is None:
        return "the shape of the added value is unknown"
    if len(c) > 2:
        return f"the added value has rank {len(c)}: the sum is not 2-D"
    for d, p in zip(reversed(c), reversed(product)):
        if d != 1 and (d is None or p is None or d != p):
            return f"the added value's shape {c} may widen the product's {product}: Gemm broadcasts C one way only"
    return None
