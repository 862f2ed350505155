"""fuse_matmul_add_into_gemm: a MatMul of two matrices plus a bias that
broadcasts to the product becomes one Gemm.

    y = Add(MatMul(a, b), c)    (either Add input order)
 -> y = Gemm(a, b, c)           (alpha = beta = 1, no transposes)

a and b need not be constants; their ranks must be known to be 2 (run
infer_shapes first). Gemm broadcasts C only from C to [M, N]
(unidirectionally), while Add broadcasts both ways: c must not widen the
product.

A constant bias added after a Reshape that splits the product's columns
into the trailing axes (Keras's EinsumDense through tf2onnx, `[B*S, 64]`
-> `[B, S, 4, 16]` + b[4, 16]) goes into the Gemm as one row:

    y = Add(Reshape(MatMul(a, b), shape), c)
 -> y = Reshape(Gemm(a, b, c as [N]), shape)

Refuses when:
1. the product has another reader or is a graph output (pattern);
2. the rank of a or b is unknown, or not 2;
3. the element type is unknown or not float16, float or double (Gemm on
   integers is standard from opset 11, but onnxruntime has no kernel for it);
4. c's shape is unknown, has more than 2 axes, or has an axis that is
   neither 1 nor known to equal the product's (it could widen the product);
5. the opset is below 7 (Gemm's C broadcast by attribute there);
6. after a Reshape: c is not a constant, the Reshape's trailing dims do
   not hold exactly the product's N columns, or c varies along another
   axis than those.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules._channels import type_refusal
from pyonnxopt.fusion.values import constant_array


class FuseMatmulAddIntoGemm(Rule):
    name = "fuse_matmul_add_into_gemm"
    description = "MatMul(a, b) + c -> Gemm(a, b, c) for 2-D a and b when c broadcasts to the product"
    min_opset = 7

    def pattern(self, opset: int) -> list:
        matmul = Op("MatMul", Var("a"), Var("b"), name="matmul")
        return [Op("Add", matmul, Var("c"), name="add", commutative=True),
                Op("Add", Op("Reshape", matmul, Var("shape"), name="split"), Var("c"), name="add", commutative=True)]

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
        if "split" in m:
            return _split_bias_refusal(m, b[1])
        return _bias_refusal(m.shape("c"), [a[0], b[1]])

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        if "split" not in m:
            edit.replace_root("Gemm", [m["a"], m["b"], m["c"]])
            return None
        row = edit.constant(np.ascontiguousarray(m.array("c").reshape(-1)), f"{m['c'].name}_row")
        (gemm,) = edit.node("Gemm", [m["a"], m["b"], row], hint=m["matmul"].name or "gemm")
        edit.replace_root("Reshape", [gemm, m["shape"]], copy_attrs_from=m["split"])
        return None


def _split_bias_refusal(m: Match, columns) -> Optional[str]:
    """None when c, a constant, covers exactly the trailing axes the
    Reshape splits the product's columns into."""
    c = constant_array(m["c"])
    if c is None:
        return "the value added after the Reshape is not a constant"
    out = m.shape("split")
    kept = list(c.shape)
    while kept and kept[0] == 1:
        kept.pop(0)
    if not isinstance(columns, int) or out is None or not kept or len(out) <= len(kept) or c.ndim > len(out):
        return f"the added value's shape {list(c.shape)} does not fit the Reshape's {out}"
    if list(out[-len(kept):]) != kept or int(np.prod(kept)) != columns:
        return (f"the added value's shape {list(c.shape)} is not the trailing axes the Reshape splits "
                f"the {columns} columns into ({out})")
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
