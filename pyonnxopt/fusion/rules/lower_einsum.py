"""lower_einsum: a two-operand Einsum that is a (batched) matrix product
-> MatMul, with the Transposes that bring its operands and result into
MatMul's layout:

    y = Einsum("bhid,bhjd->bhij", q, k)  ->  y = MatMul(q, Transpose(k, [0, 1, 3, 2]))
    y = Einsum("bij,jk->bik", x, w)      ->  y = MatMul(x, w)

onnxruntime's Einsum kernel moves the same data with more overhead
(attention written with two Einsums runs 1.08x the time of MatMuls and
Transposes: bench/head_layouts.py), and the fusions after this one
(Attention, MatMul + Add into Gemm) read MatMuls.

The indices fall into four groups: batch (both operands and the output),
the one contracted (both operands, not the output), m (the first operand
and the output) and n (the second and the output). The product is
MatMul([batch.., m, k], [batch.., k, n]); without batch indices, m may be
several (MatMul's leading dims: x @ W), or n may be with the operands
swapped. Transposes are added only where an order differs.

Refuses when:
 1. the equation has an ellipsis, no "->", a repeated index in one term,
    or a term whose length is not its operand's rank;
 2. it contracts other than exactly one index, an index of one operand
    is summed out (not in the output or the other operand), or m or n is
    empty (a matrix-vector or outer product), or both are several;
 3. a batch index's dims are not known to be equal in both operands
    (Einsum does not broadcast them; MatMul would);
 4. the opset is below 12 (Einsum itself);
 5. onnxruntime's CPU provider has no MatMul for the element type (an
    integer Einsum: MatMul has no 8-bit types at all).
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.targets import dtype_reason
from pyonnxopt.fusion.values import dims, same_dim


class LowerEinsum(Rule):
    name = "lower_einsum"
    description = "Einsum that is a batched matrix product -> MatMul with Transposes"
    min_opset = 12

    def pattern(self, opset: int) -> Op:
        return Op("Einsum", Var("a"), Var("b"), name="einsum")

    def check(self, m: Match) -> Optional[str]:
        plan = _plan(m)
        return plan if isinstance(plan, str) else dtype_reason("", "MatMul", m.dtype("a"))

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        a_perm, b_perm, out_perm, swapped = _plan(m)
        a, b = (_transposed(edit, m[n], perm) for n, perm in (("a", a_perm), ("b", b_perm)))
        if swapped:
            a, b = b, a
        if out_perm is None:
            edit.replace_root("MatMul", [a, b])
            return None
        (product,) = edit.node("MatMul", [a, b], hint=f"{m.root.name or 'einsum'}_matmul")
        edit.replace_root("Transpose", [product], {"perm": out_perm})
        return None


def _transposed(edit: Edit, value, perm: list):
    if perm == list(range(len(perm))):
        return value
    return edit.node("Transpose", [value], {"perm": perm}, hint=f"{value.name}_transposed")[0]


def _plan(m: Match):
    """(perm of a, perm of b, perm of the product or None, whether the
    operands swap), or why the Einsum is no matrix product."""
    equation = m["einsum"].attributes.get("equation", b"")
    terms = _terms(equation.decode() if isinstance(equation, bytes) else equation)
    if isinstance(terms, str):
        return terms
    (ta, tb), to = terms
    da, db = dims(m["a"]), dims(m["b"])
    if da is None or db is None or len(da) != len(ta) or len(db) != len(tb):
        return f"the terms {ta!r}, {tb!r} do not match the operands' ranks"
    batch = [i for i in to if i in ta and i in tb]
    k = [i for i in ta if i in tb and i not in to]
    ms = [i for i in to if i in ta and i not in tb]
    ns = [i for i in to if i in tb and i not in ta]
    if len(k) != 1:
        return f"it contracts {len(k)} indices, not one"
    if set(ta) | set(tb) != set(to) | set(k):
        return "an index of one operand is summed out"
    if not ms or not ns:
        return "one operand has no index of its own (a matrix-vector or outer product)"
    for i in batch:
        if not same_dim(da[ta.index(i)], db[tb.index(i)]):
            return f"batch index {i!r} has dims {da[ta.index(i)]} and {db[tb.index(i)]}, not known to be equal"
    swapped = False
    if len(ns) > 1:  # x @ W with W first: the operands swap, n is then the leading part
        if batch or len(ms) > 1:
            return "both operands have several indices of their own"
        (ta, tb), ms, ns, swapped = (tb, ta), ns, ms, True
    elif len(ms) > 1 and batch:
        return "the first operand has several indices of its own beside batch indices"
    k = k[0]
    a_order = batch + ms + [k]
    b_order = batch + [k] + ns
    product = batch + ms + ns
    a_perm = [ta.index(i) for i in a_order]
    b_perm = [tb.index(i) for i in b_order]
    out_perm = [product.index(i) for i in to]
    if swapped:
        a_perm, b_perm = b_perm, a_perm
    return a_perm, b_perm, (None if out_perm == list(range(len(to))) else out_perm), swapped


def _terms(equation: str):
    """((first, second), output) of a two-operand equation, or why not."""
    eq = equation.replace(" ", "")
    if "..." in eq or "->" not in eq:
        return f"equation {equation!r} has an ellipsis or no output term"
    inputs, out = eq.split("->")
    terms = inputs.split(",")
    if len(terms) != 2 or any(len(set(t)) != len(t) for t in terms + [out]):
        return f"equation {equation!r} repeats an index within a term"
    return (terms[0], terms[1]), out
