"""cancel_row_transposes: a Transpose that only reorders the rows a Gemm or
MatMul works on, flattened and unflattened around it, and the Transpose
that puts them back, both go.

    t = Transpose(x, q)                   q keeps the last axis: it reorders rows
    f = Reshape(t, [-1, K])               all rows, one after another
    g = Gemm(f, b, c) | MatMul(f, b)      each row alone (b 2-d)
    u = Reshape(g, t's leading dims + [N])
    y = Transpose(u, q^-1)
 -> y = Reshape(Gemm(Reshape(x, [-1, K]), b, c), x's leading dims + [N])

torch's nn.MultiheadAttention with a dynamic batch writes this around its
output projection ([S, B, E] in, [B, S, E] out); with batch 1 the two
Transposes are Reshapes already.

Refuses when:
 1. q moves the last axis, or the two perms are not inverses;
 2. Gemm transposes its first input or has a C that is not one row (a
    bias per row would follow the rows), or MatMul's second input is not 2-d;
 3. the flatten does not make [rows, K] of t, or the unflatten's leading
    dims are not provably t's;
 4. the result's shape (x's leading dims, N) holds more than one unknown (it would have
    to be computed at run time).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import dims, same_dim


def _variant(op: str) -> Op:
    t = Op("Transpose", Var("x"), name="t_in")
    flat = Op("Reshape", t, Const("flat_shape"), name="flatten")
    rows = (Op("Gemm", flat, Var("b"), Var("c", optional=True), name="rows") if op == "Gemm"
            else Op("MatMul", flat, Var("b"), name="rows"))
    return Op("Transpose", Op("Reshape", rows, Var("shape"), name="unflatten"), name="t_out")


class CancelRowTransposes(Rule):
    name = "cancel_row_transposes"
    description = ("Transpose -> flatten -> Gemm/MatMul -> unflatten -> inverse Transpose, where the Transpose only "
                   "reorders rows: both Transposes go")
    min_opset = 5  # Reshape with a shape input

    def pattern(self, opset: int) -> list:
        return [_variant("Gemm"), _variant("MatMul")]

    def check(self, m: Match) -> Optional[str]:
        x = dims(m["x"])
        if x is None or len(x) < 3:
            return "the transposed value's rank is unknown or below 3"
        r = len(x)
        q = m["t_in"].attributes.get("perm", list(reversed(range(r))))
        p = m["t_out"].attributes.get("perm", list(reversed(range(r))))
        if q[-1] != r - 1:
            return f"the first Transpose {q} moves the last axis"
        if len(p) != r or any(q[p[i]] != i for i in range(r)):
            return f"the Transposes {q} and {p} are not inverses"
        rows = m["rows"]
        if rows.op_type == "Gemm" and rows.attributes.get("transA", 0):
            return "the Gemm transposes its first input"
        if "c" in m and m["c"] is not None:
            c = m.shape("c")
            if c is None or (len(c) == 2 and c[0] != 1):
                return f"the Gemm's C {c} may differ from row to row"
        if rows.op_type == "MatMul" and len(m.shape("b") or []) != 2:
            return "MatMul's second input is not known to be 2-d"
        flat, out, t = dims(m["flatten"].outputs[0]), dims(m["unflatten"].outputs[0]), dims(m["t_in"].outputs[0])
        if flat is None or len(flat) != 2 or not isinstance(x[-1], int) or flat[1] != x[-1]:
            return f"the flatten to {flat} does not make rows of the last axis ({x[-1]})"
        if out is None or t is None or len(out) != r or not all(same_dim(a, b) for a, b in zip(out[:-1], t[:-1])):
            return f"the unflatten to {out} does not provably give back the rows' dims {t[:-1] if t else t}"
        if 0 in m.array("flat_shape").reshape(-1).tolist():
            return "the flatten copies a dim (a 0 in its shape), which x has elsewhere"
        if _target(m).count(-1) > 1:
            return f"the result's shape {x[:-1] + out[-1:]} has more than one unknown dim"
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        rows = m["rows"]
        (flat,) = edit.node("Reshape", [m["x"], m["flat_shape"]], hint=f"{m['flatten'].name or 'flatten'}_rows")
        inputs = [flat, m["b"]] + ([m["c"]] if "c" in m and m["c"] is not None else [])
        (g,) = edit.node(rows.op_type, inputs, hint=f"{rows.name or rows.op_type}_rows")
        edit.added[-1].copy_attributes(rows)
        edit.replace_root("Reshape", [g, edit.constant(np.array(_target(m), np.int64), "rows_shape")])
        return None


def _target(m: Match) -> list:
    """x's leading dims and the product's columns, -1 for an unknown."""
    x, out = dims(m["x"]), dims(m["unflatten"].outputs[0])
    return [d if isinstance(d, int) else -1 for d in x[:-1] + out[-1:]]
