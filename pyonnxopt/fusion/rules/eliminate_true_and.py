"""eliminate_true_and: an And with an operand that is true everywhere only
broadcasts the other; where the readers broadcast that one to the same
result anyway, they read it as it is.

    q    = Reshape(Range(0, S, 1), [1, 1, -1, 1])     # [1, 1, S, 1], all >= 0
    keep = And(GreaterOrEqual(q, 0), m: [B, 1, 1, S])   # [B, 1, S, S]
    bias = Where(keep, 0, -3.4e38)                       # [B, 1, S, S]
    s2   = Add(scores: [B, H, S, S], bias)
 -> bias = Where(m, 0, -3.4e38)                          # [B, 1, 1, S]
    s2   = Add(scores, bias)                             # [B, H, S, S] as before

transformers 5 writes `q_idx >= 0` into every encoder's padding mask (its
bidirectional mask function): the compare is true everywhere and only
spreads the [B, 1, 1, S] mask over the queries, which each layer's Where
then computes S times over.

Provably true: a constant of trues; a compare of a Range(start, n, step)
laid along axes with a constant c (`>= c` where start >= c and step >= 0,
`> c` where start > c, or the same with the operands swapped).

The readers: elementwise ops (broadcasting ones, and unary ones that keep
the shape); a reader whose result would shrink too is checked the same
way, three levels down, and its stated type shrinks with it. Refuses
quietly (not its case): an And with no operand provably true. Refuses
with a reason: a reader that does not broadcast the value back (a
Softmax, a MatMul, a graph output, a Shape), or dims unknown.
"""

from __future__ import annotations

from typing import Optional, Union

from onnx import helper

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule, node_id
from pyonnxopt.fusion.values import constant_array, dims, range_behind, same_dims

_BROADCASTING = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Less", "Greater",
                 "LessOrEqual", "GreaterOrEqual", "Where", "Max", "Min", "Sum", "Mean"}
_UNARY = {"Not", "Neg", "Abs", "Cast", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "IsNaN",
          "IsInf", "Sign", "Floor", "Ceil", "Round", "Identity"}
_DEPTH = 3


class EliminateTrueAnd(Rule):
    name = "eliminate_true_and"
    description = "And(x, provably all true) -> x, where its readers broadcast x to the same results"
    min_opset = 7  # And with broadcasting
    after_cleanup = False  # a cleanup itself
    pattern_near_misses = False  # most Ands have no operand that is always true

    def pattern(self, opset: int) -> Op:
        return Op("And", Var("a"), Var("b"), name="and")

    def check(self, m: Match) -> Optional[str]:
        plan = _plan(m)
        return plan if isinstance(plan, str) else None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        x, shrunk = _plan(m)
        for v, new_dims in shrunk:
            t = v.type
            if t.get("elem_type"):
                proto = helper.make_tensor_type_proto(t["elem_type"], new_dims)
                edit.graph.set_value_type(v, proto.SerializeToString())
        if edit.bypass_root(x) is not None:
            edit.replace_root("Identity", [x])
        return None


def _plan(m: Match) -> Union[tuple, str]:
    """(the operand kept, [(value, its new dims)] for results that shrink), or why not."""
    a, b = m["a"], m["b"]
    x = b if _all_true(a) else a if _all_true(b) else None
    if x is None:
        return ""
    out = m.root.outputs[0]
    new = dims(x)
    if new is None or None in new or dims(out) is None:
        return "the dims of the And's operands are not known"
    shrunk = []
    why = _absorbed(out, new, _DEPTH, shrunk)
    return why if why else (x, shrunk)


def _absorbed(v, new: list, depth: int, shrunk: list) -> Optional[str]:
    """None where every reader of v, read with dims `new` instead of its
    own, gives the same result (results that shrink too are added to
    `shrunk`, their readers checked the same way); else why not."""
    if same_dims(dims(v), new):
        return None
    if v.is_graph_output:
        return f"'{v.name}' is a graph output: its shape would change"
    if depth == 0:
        return f"'{v.name}' is broadcast back too far down"
    for reader, _ in v.uses:
        if reader.domain or reader.graph != v.graph or reader.op_type not in _BROADCASTING | _UNARY:
            return f"{node_id(reader)} reads '{v.name}' and does not broadcast it back"
        shapes = [new if i == v else dims(i) for i in reader.inputs if i is not None]
        result = _broadcast(shapes)
        if result is None:
            return f"the dims of {node_id(reader)}'s operands are not known"
        why = _absorbed(reader.outputs[0], result, depth - 1, shrunk)
        if why:
            return why
        if not same_dims(result, dims(reader.outputs[0])):
            shrunk.append((reader.outputs[0], result))
    return None


def _broadcast(shapes: list) -> Optional[list]:
    """Numpy broadcasting of dims that are ints or symbols; None where one
    is unknown or two differ (other than 1)."""
    if any(s is None or None in s for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        here = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(here) > 1:
            return None
        out.append(here.pop() if here else 1)
    return out


def _all_true(v) -> bool:
    """Provably true everywhere: constant trues, or a compare of a Range
    grid with a constant that each of its values passes."""
    c = constant_array(v)
    if c is not None:
        return c.dtype == bool and bool(c.all())
    p = v.producer
    if p is None or p.domain or p.op_type not in ("GreaterOrEqual", "Greater", "LessOrEqual", "Less"):
        return False
    grid, bound = p.inputs
    strict = p.op_type in ("Greater", "Less")
    if p.op_type in ("LessOrEqual", "Less"):  # c <= grid, c < grid
        grid, bound = bound, grid
    low, c = _range_low(grid), constant_array(bound)
    if low is None or c is None or c.size != 1:
        return False
    return low > c.item() if strict else low >= c.item()


def _range_low(grid) -> Optional[float]:
    """The least value of a Range with a step >= 0 (through Reshape and
    Unsqueeze): its start; None otherwise."""
    p = range_behind(grid)
    if p is None:
        return None
    start, step = constant_array(p.inputs[0]), constant_array(p.inputs[2])
    if start is None or step is None or start.size != 1 or step.size != 1 or step.item() < 0:
        return None
    return start.item()
