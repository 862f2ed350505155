"""cancel_row_transposes: a Transpose that reorders the rows a Gemm or
MatMul works on, flattened and unflattened around it, is undone by the
first Transpose: the second goes, and the first takes its row order.

    t = Transpose(x, q)                   rows: t's leading j axes; columns: the rest
    f = Reshape(t, [-1, K])               all rows, one after another
    g = Gemm(f, b, c) | MatMul(f, b)      each row alone (b 2-d)
    u = Reshape(g, t's leading dims + [N])
    y = Transpose(u, p)                   p keeps the last axis: it reorders rows
 -> y = Reshape(Gemm(Reshape(Transpose(x, q'), [-1, K]), b, c), y's dims)
    q'[i] = q[p[i]] for the row axes, q[i] for the others; no Transpose
    where q' is the identity (p undoes q).

torch's nn.MultiheadAttention with a dynamic batch writes this around its
output projection: [B, S, E] in, [S, B, E] rows through it, [B, S, E] out,
where the two Transposes go; from heads [B, h, S, d] merged as [S, B, h*d],
one Transpose to [B, S, h, d] stays; with batch 1 the Transposes are
Reshapes already.

Refuses when:
 1. p moves the last axis, or moves nothing;
 2. Gemm transposes its first input or has a C that is not one row (a
    bias per row would follow the rows), or MatMul's second input is not 2-d;
 3. the flatten does not make [rows, K] of t with K t's trailing dims
    (known), or the unflatten's leading dims are not provably t's;
 4. below opset 10, the result's shape holds more than one unknown (from
    10 on they are read at run time: Shape of the value the flatten reads,
    whose leading dims are the result's rows).
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
    description = ("Transpose -> flatten -> Gemm/MatMul -> unflatten -> Transpose that only reorders rows: the "
                   "second goes, the first takes its row order (and goes too where that is the identity)")
    min_opset = 5  # Reshape with a shape input

    def pattern(self, opset: int) -> list:
        return [_variant("Gemm"), _variant("MatMul")]

    def check(self, m: Match) -> Optional[str]:
        x, t = dims(m["x"]), dims(m["t_in"].outputs[0])
        if x is None or len(x) < 3 or t is None:
            return "the transposed value's rank is unknown or below 3"
        rows = m["rows"]
        if rows.op_type == "Gemm" and rows.attributes.get("transA", 0):
            return "the Gemm transposes its first input"
        if "c" in m and m["c"] is not None:
            c = m.shape("c")
            if c is None or (len(c) == 2 and c[0] != 1):
                return f"the Gemm's C {c} may differ from row to row"
        if rows.op_type == "MatMul" and len(m.shape("b") or []) != 2:
            return "MatMul's second input is not known to be 2-d"
        flat, out = dims(m["flatten"].outputs[0]), dims(m["unflatten"].outputs[0])
        j = _row_axes(m)
        if flat is None or len(flat) != 2 or out is None or j is None:
            return f"the flatten to {flat} does not make rows of t {t} and columns of its last dims (known)"
        if not all(same_dim(a, b) for a, b in zip(out[:-1], t[:j])):
            return f"the unflatten to {out} does not provably give back the rows' dims {t[:j]}"
        p = _perm(m["t_out"], j + 1)
        if p[-1] != j:
            return f"the second Transpose {p} moves the last axis"
        if p == list(range(j + 1)):
            return f"the second Transpose {p} moves nothing"
        if 0 in m.array("flat_shape").reshape(-1).tolist():
            return "the flatten copies a dim (a 0 in its shape), which x has elsewhere"
        target = _target(m)
        if target.count(-1) > 1 and m.opset < 10:
            return f"the result's shape {target} has more than one unknown dim, and reading them needs opset 10"
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        rows, x = m["rows"], m["x"]
        q = _rows_first(m)
        if q != list(range(len(q))):
            (x,) = edit.node("Transpose", [x], {"perm": q}, hint=f"{m['t_in'].name or 'transpose'}_rows")
        (flat,) = edit.node("Reshape", [x, m["flat_shape"]], hint=f"{m['flatten'].name or 'flatten'}_rows")
        inputs = [flat, m["b"]] + ([m["c"]] if "c" in m and m["c"] is not None else [])
        (g,) = edit.node(rows.op_type, inputs, hint=f"{rows.name or rows.op_type}_rows")
        edit.added[-1].copy_attributes(rows)
        target = _target(m)
        shape = (edit.constant(np.array(target, np.int64), "rows_shape") if target.count(-1) <= 1
                 else _rows_at_run_time(m, edit, x, len(target) - 1, target[-1]))
        edit.replace_root("Reshape", [g, shape])
        return None


def _rows_at_run_time(m: Match, edit: Edit, rows_first, j: int, width: int):
    """The result's shape read from `rows_first` (whose leading j dims are
    the result's rows): Shape of it when it is as wide as the result, else
    its leading dims (Shape(start, end), or Shape and Slice below opset 15)
    and the width."""
    d = dims(rows_first)
    if d is not None and len(d) == j + 1 and d[-1] == width:
        return edit.node("Shape", [rows_first], hint="rows_shape")[0]
    lead = edit.dims_at_run_time(rows_first, 0, j, "rows_lead")
    return edit.node("Concat", [lead, edit.constant(np.array([width], np.int64), "rows_width")], {"axis": 0},
                     hint="rows_shape")[0]


def _perm(node, rank: int) -> list:
    return list(node.attributes.get("perm", list(reversed(range(rank)))))


def _row_axes(m: Match) -> Optional[int]:
    """j, the number of t's leading axes the flatten makes rows of (the
    unflatten gives them back, and N): None unless t's other dims are known
    and hold the flatten's K."""
    t, flat, out = dims(m["t_in"].outputs[0]), dims(m["flatten"].outputs[0]), dims(m["unflatten"].outputs[0])
    if t is None or flat is None or out is None or len(flat) != 2:
        return None
    j = len(out) - 1
    columns = t[j:]
    if not 1 <= j < len(t) or not all(isinstance(d, int) for d in columns) or not isinstance(flat[1], int):
        return None
    return j if int(np.prod(columns)) == flat[1] else None


def _rows_first(m: Match) -> list:
    """q': the first Transpose with the row order the second one asks for."""
    j = _row_axes(m)
    q, p = _perm(m["t_in"], len(dims(m["x"]))), _perm(m["t_out"], j + 1)
    return [q[p[i]] for i in range(j)] + q[j:]


def _target(m: Match) -> list:
    """The result's dims, t's row dims in the second Transpose's order and
    the product's columns, -1 for an unknown."""
    t, out = dims(m["t_in"].outputs[0]), dims(m["unflatten"].outputs[0])
    j = _row_axes(m)
    p = _perm(m["t_out"], j + 1)
    return [d if isinstance(d, int) else -1 for d in [t[p[i]] for i in range(j)] + out[-1:]]
