"""gather_own_positions: a Gather of a flattened tensor at each element's
own row-major position reads the tensor as it is, with axes of 1 added.

    f   = Flatten(x: [B, S], axis=2)                       # [B*S, 1]
    idx = Reshape(Range(0, S, 1), [1, 1, 1, -1])
        + Reshape(Range(0, B, 1), [-1, 1, 1, 1]) * S        # [B, 1, 1, S]: b*S + s
    y   = Gather(f, idx)                                    # [B, 1, 1, S, 1]
 -> y   = Unsqueeze(x, [1, 2, 4])

transformers 5 builds every padding mask this way (`padding_mask[b, kv]`
through vmapped index functions): in each TorchScript export of an
encoder or a decoder with an attention mask, about a dozen nodes that
amount to an Unsqueeze of the mask.

The proof, dim by dim: the index is a sum of position grids, one per
leading axis j of x, each `Range(0, n_j, 1)` laid along one axis of the
index (the others 1), scaled by the product of x's later leading dims;
n_j is x's dim j (an int or the same symbol), and the grids lie along
increasing axes in x's order. Then y, read in row-major order, is x in
row-major order, and its shape is the index's with the trailing dims of
the flattened tensor.

Refuses quietly (not its case): a Gather along another axis, an index
that is no sum of position grids. Refuses with a reason: a grid's length,
or a scale, not provably the dim it must be; grids out of x's order; a
flattened tensor whose rows are not x's trailing dims.
"""

from __future__ import annotations

from typing import Optional, Union

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import attr_or_input, constant_array, dims, range_behind, same_dim, same_dims
from pyonnxopt.passes.resolve_dynamic_reshapes import _entries

_MAX_TERMS = 8


class GatherOwnPositions(Rule):
    name = "gather_own_positions"
    description = "Gather of a flattened tensor at its own row-major positions (Range grids) -> Unsqueeze"
    min_opset = 11  # Range
    after_cleanup = False  # a cleanup itself
    pattern_near_misses = False  # most Gathers of a Flatten read other positions: no "almost"

    def pattern(self, opset: int) -> list:
        return [Op("Gather", Op("Flatten", Var("x"), name="flat"), Var("idx"), name="gather"),
                Op("Gather", Op("Reshape", Var("x"), Const("target"), name="flat"), Var("idx"), name="gather"),
                Op("GatherND", Var("x"), Var("idx"), name="gather")]

    def check(self, m: Match) -> Optional[str]:
        plan = _plan(m)
        return plan if isinstance(plan, str) else None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        axes = _plan(m)
        if not axes:
            if edit.bypass_root(m["x"]) is not None:  # a graph input straight to a graph output
                edit.replace_root("Identity", [m["x"]])
            return None
        edit.squeeze("Unsqueeze", m["x"], axes, root=True)
        return None


def _plan(m: Match) -> Union[list, str]:
    """The axes to unsqueeze x by, or why not ("" where it is not the case)."""
    if m.root.op_type == "GatherND":
        return _nd_plan(m)
    if m.root.attributes.get("axis", 0) != 0:
        return ""
    x, flat = dims(m["x"]), dims(m["flat"].outputs[0])
    terms = _terms(m["idx"], _MAX_TERMS)
    if terms is None or x is None or flat is None or not flat:
        return ""
    grids = []
    for grid, scale in terms:
        d = dims(grid)
        placed = [a for a, n in enumerate(d or []) if n != 1]
        if d is None or len(placed) != 1:
            return f"the position grid '{grid.name}' does not lie along one axis: {d}"
        grids.append((placed[0], len(d), _range_length(grid), scale))
    grids.sort(key=lambda g: g[0])
    rank, k = grids[0][1], len(grids)
    if any(g[1] != rank for g in grids) or len({g[0] for g in grids}) != k:
        return "the position grids do not share one index shape"
    if k > len(x) or None in x:
        return f"{k} position grids for x of dims {x}"
    for j, (_, _, length, scale) in enumerate(grids):
        if not same_dim(length, x[j]):
            return f"a position grid's length is {length}, not x's dim {j} ({x[j]})"
        if scale is None or scale != _product(x[j + 1:k]):
            return f"the positions along x's dim {j} are not scaled by the dims after it"
    trailing = flat[1:]
    if same_dims(trailing, x[k:]):
        extra = []
    elif trailing == [1] and k == len(x):
        extra = [rank]  # Flatten(x, axis=rank): rows of one element
    else:
        return f"the flattened rows {trailing} are not x's trailing dims {x[k:]}"
    placed = {g[0] for g in grids}
    index = dims(m["idx"])
    if index is None or len(index) != rank or any(
            d is not None and d != (x[[g[0] for g in grids].index(a)] if a in placed else 1)
            for a, d in enumerate(index)):
        return f"the index's dims {index} are not the grids' {rank}-d layout"  # a scale of higher rank
    return [a for a in range(rank) if a not in placed] + extra


def _nd_plan(m: Match) -> Union[list, str]:
    """GatherND(x, Concat(Unsqueeze(Expand(grid_j, shape), -1), ...)): the
    index's last axis holds, for each leading dim j of x, a Range grid
    spread over the index shape (torch's dynamo exporter writes
    `mask[b, kv]` so)."""
    concat = m["idx"].producer
    if m.root.attributes.get("batch_dims", 0) != 0 or concat is None or concat.op_type != "Concat" \
            or concat.domain:
        return ""
    x, shape = dims(m["x"]), None
    placed = []
    for part in concat.inputs:
        spread = _unsqueezed_last(part)
        grid = spread.producer.inputs[0] if spread is not None and spread.producer is not None \
            and spread.producer.op_type == "Expand" and not spread.producer.domain else spread
        length = _range_length(grid) if grid is not None else None
        if length is None:
            return ""
        d, g = dims(spread), dims(grid)
        axes = [a for a, n in enumerate(g or []) if n != 1]
        if d is None or None in d or g is None or len(axes) != 1 or len(g) > len(d):
            return f"the position grid '{grid.name}' does not lie along one axis of a known shape"
        axes = [axes[0] + len(d) - len(g)]  # Expand aligns the grid's dims to the right
        if shape is None:
            shape = d
        if not same_dims(d, shape):
            return "the position grids are not spread to one index shape"
        placed.append((axes[0], length))
    rank, k = len(shape), len(placed)
    if concat.attributes.get("axis") not in (-1, rank):
        return ""
    if x is None or None in x or k > len(x):
        return f"{k} position grids for x of dims {x}"
    for j, (axis, length) in enumerate(placed):
        if j and axis <= placed[j - 1][0]:
            return "the position grids are not laid along axes in x's order"
        if not same_dim(length, x[j]) or not same_dim(shape[axis], x[j]):
            return f"a position grid's length is {length}, not x's dim {j} ({x[j]})"
    axes = {a for a, _ in placed}
    if any(shape[a] != 1 for a in range(rank) if a not in axes):
        return f"the index shape {shape} spreads the positions over more than x's dims"
    return [a for a in range(rank) if a not in axes]


def _unsqueezed_last(v):
    """The value an Unsqueeze of v's last axis reads, or None."""
    p = v.producer
    if p is None or p.domain or p.op_type != "Unsqueeze":
        return None
    axes = attr_or_input(p, "axes", 1)
    d = dims(v)
    if axes is None or d is None or len(axes) != 1 or axes[0] not in (-1, len(d) - 1):
        return None
    return p.inputs[0]


def _terms(v, budget: int) -> Optional[list]:
    """The index as a sum of (grid, scale) terms: a grid a Range laid along
    axes by Reshape or Unsqueeze; a scale a product (see _product), None
    when not known. None where it is no such sum."""
    p = v.producer
    if p is None or p.domain or budget <= 0:
        return None
    if p.op_type == "Add" and len(p.inputs) == 2:
        a = _terms(p.inputs[0], budget - 1)
        b = _terms(p.inputs[1], budget - 1) if a is not None else None
        return None if b is None else a + b
    if p.op_type == "Mul" and len(p.inputs) == 2:
        for side, other in (p.inputs, reversed(p.inputs)):
            inner = _terms(side, budget - 1)
            if inner is not None and len(inner) == 1:
                (grid, scale), more = inner[0], _scalar_product(other, 4)
                return [(grid, None if scale is None or more is None else _times(scale, more))]
        return None
    return [(v, (1, ()))] if _range_length(v) is not None else None


def _range_length(grid):
    """The length of the Range(0, n, 1) the grid lays along its axes, or None."""
    p = range_behind(grid)
    if p is None:
        return None
    start, step = (constant_array(p.inputs[i]) for i in (0, 2))
    if start is None or step is None or start.size != 1 or step.size != 1 or start.item() != 0 or step.item() != 1:
        return None
    d = dims(p.outputs[0])
    return d[0] if d is not None and len(d) == 1 else None


def _product(factors: list) -> Optional[tuple]:
    """A product of dims as (int, sorted symbols), or None if one is unknown."""
    n, symbols = 1, []
    for f in factors:
        if isinstance(f, int):
            n *= f
        elif isinstance(f, str) and f:
            symbols.append(f)
        else:
            return None
    return n, tuple(sorted(symbols))


def _times(a: tuple, b: tuple) -> tuple:
    return a[0] * b[0], tuple(sorted(a[1] + b[1]))


def _scalar_product(v, budget: int) -> Optional[tuple]:
    """A one-element integer value as a product of dims (see _product): a
    Mul of such, or what the shape arithmetic of resolve_dynamic_reshapes
    reads as one entry (a constant, a dim read from a Shape) once ops that
    keep its one element are peeled; None otherwise."""
    p = v.producer
    if p is not None and not p.domain and p.op_type == "Mul" and len(p.inputs) == 2 and budget > 0:
        a, b = (_scalar_product(i, budget - 1) for i in p.inputs)
        return None if a is None or b is None else _times(a, b)
    while p is not None and not p.domain and p.op_type in ("Cast", "Identity", "Squeeze", "Unsqueeze", "Reshape"):
        v, p = p.inputs[0], p.inputs[0].producer
    entries = _entries(v)
    return _product(entries) if entries is not None and len(entries) == 1 else None
