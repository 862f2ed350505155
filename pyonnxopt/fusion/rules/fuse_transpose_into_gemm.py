"""fuse_transpose_into_gemm: a Transpose of Gemm's A or B becomes its
transA or transB (onnxoptimizer's rule of the same name).

    y = Gemm(Transpose(a), b, c)   ->  y = Gemm(a, b, c, transA = 1 - transA)
    y = Gemm(a, Transpose(b), c)   ->  y = Gemm(a, b, c, transB = 1 - transB)

Gemm's inputs are matrices, so the Transpose swaps their two axes; the
product kernel reads either layout, and the copy goes. A Transpose of a
constant is folded before this (the weight layout the product wants). It
runs once no other rule fires: rules that cancel Transposes across a
product (cancel_row_transposes) take them first, and refuse a transA.

Refuses when:
1. the Transpose's output has another reader or is a graph output (pattern);
2. its perm is given and is not [1, 0] (a malformed model).
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules._channels import attribute

class FuseTransposeIntoGemm(Rule):
    name = "fuse_transpose_into_gemm"
    description = "turn a Transpose of Gemm's A or B into its transA/transB"
    after_fusions = True
    min_opset = 7

    def pattern(self, opset: int) -> list:
        a, b, c = Var("a"), Var("b"), Var("c", optional=True)
        return [Op("Gemm", Op("Transpose", a, name="ta"), b, c, name="gemm"),
                Op("Gemm", a, Op("Transpose", b, name="tb"), c, name="gemm")]

    def check(self, m: Match) -> Optional[str]:
        t = m["ta"] if "ta" in m else m["tb"]
        perm = attribute(t, "perm")
        if perm is not None and list(perm) != [1, 0]:
            return f"the Transpose's perm {list(perm)} is not [1, 0]"
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        gemm = m["gemm"]
        flag = "transA" if "ta" in m else "transB"
        inputs = [m["a"], m["b"]] + ([m["c"]] if m["c"] is not None else [])
        edit.replace_root("Gemm", inputs, {flag: 1 - int(attribute(gemm, flag, 0))}, copy_attrs_from=gemm)
        return None
