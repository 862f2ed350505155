"""cancel_reshapes_around_transpose: a Transpose between a Reshape that
merges runs of axes and one that splits them back is one Transpose.

    y = Reshape(Transpose(Reshape(x, A), p), B)
 -> y = Transpose(x, q)      (x itself when q keeps every axis)

torch's dynamo exporter writes K^T of scaled dot-product attention this
way: k [B, H, T, D] -> [B*H, T, D] -> [B*H, D, T] -> [B, H, D, T]. With
static shapes regroup_transposes moves such Transposes (its Reshape targets
are constants); with dynamic ones the targets are computed at run time
(Shape, Slice, Concat), and this rule proves the same from the dims shape
inference gives, symbols included: there the whole is Transpose(k, [0, 1,
3, 2]), which fuse_attention then takes.

How the runs are found: a dim of x equal to one of the merged view (the
same int or the same symbol) at the front or the back stays an axis of its
own, and what is left in the middle of x is one run merged into the one
axis left in the middle of the view (their products are equal since the
element count is). The split back is read the same way, and must give
each run back as it was: the same dims in the same order.

Refuses when:
 1. a dim of x, of either view or of y is unknown (not an int nor a symbol);
 2. a Reshape does more than merge (or split) one run of axes (axes of
    size 1 aside: they may come and go), or x and y differ in rank or in
    their count of axes of size 1;
 3. the split does not give back the runs the merge made.
"""

from __future__ import annotations

from typing import Optional, Union

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import dims, same_dim


class CancelReshapesAroundTranspose(Rule):
    name = "cancel_reshapes_around_transpose"
    description = "Reshape(Transpose(Reshape(x, A), p), B) that only permutes x's axes -> Transpose(x, q)"
    min_opset = 5  # Reshape with a shape input
    # A layout cleanup: the fusions wait until its leftovers (the Shape nodes
    # that computed the targets, reading the head split) are gone.
    after_cleanup = False
    pattern_near_misses = False  # every Reshape starts the pattern; a sandwich it refuses still says why

    def pattern(self, opset: int) -> Op:
        merge = Op("Reshape", Var("x"), Var("merge_shape"), name="merge")
        moved = Op("Transpose", merge, name="moved")
        return Op("Reshape", moved, Var("split_shape"), name="split")

    def check(self, m: Match) -> Optional[str]:
        perm = _permutation(m)
        return perm if isinstance(perm, str) else None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        perm = _permutation(m)
        if perm == list(range(len(perm))) and edit.bypass_root(m["x"]) is None:
            return None
        if perm == list(range(len(perm))):  # a graph input straight to a graph output
            edit.replace_root("Identity", [m["x"]])
        else:
            edit.replace_root("Transpose", [m["x"]], {"perm": perm})
        return None


def _permutation(m: Match) -> Union[list, str]:
    """The perm q with Transpose(x, q) == y, or why it is not provable.
    Axes of size 1 are left out of the runs (where they sit changes no
    element's place), then given to y's in order."""
    x, merged, y = dims(m["x"]), dims(m["merge"].outputs[0]), dims(m.root.outputs[0])
    for label, d in (("x", x), ("the merged view", merged), ("the result", y)):
        if d is None or any(e is None for e in d):
            return f"{label}'s dims {d} are not all known (ints or symbols)"
    perm = m["moved"].attributes.get("perm", list(range(len(merged)))[::-1])
    if sorted(perm) != list(range(len(merged))):
        return f"the Transpose's perm {list(perm)} does not fit the merged view {merged}"
    if len(x) != len(y) or x.count(1) != y.count(1):
        return f"x {x} and the result {y} differ in rank or in axes of size 1: no Transpose gives one from the other"
    squeezed = {a: i for i, a in enumerate(a for a, e in enumerate(merged) if e != 1)}  # merged axis -> merged_'s
    kept = [a for a in perm if a in squeezed]  # the moved view's axes, as merged's
    moved = [merged[a] for a in kept]
    merged_, x_, y_ = ([e for e in d if e != 1] for d in (merged, x, y))
    runs_x = _runs(x_, merged_)
    if runs_x is None:
        return f"the first Reshape {x} -> {merged} does more than merge one run of axes"
    runs_y = _runs(y_, moved)
    if runs_y is None:
        return f"the second Reshape {[merged[a] for a in perm]} -> {y} does more than split one axis into a run"
    x_axes = [a for a, e in enumerate(x) if e != 1]
    order = []  # x's axes (size 1 left out) in y's order
    for axis, run_y in zip((squeezed[a] for a in kept), runs_y):
        run_x = runs_x[axis]
        if len(run_x) != len(run_y) or not all(same_dim(x_[a], y_[b]) for a, b in zip(run_x, run_y)):
            return (f"the second Reshape splits {[merged_[axis]]} into {[y_[b] for b in run_y]}, "
                    f"not back into {[x_[a] for a in run_x]}")
        order.extend(x_axes[a] for a in run_x)
    ones, order = iter(a for a, e in enumerate(x) if e == 1), iter(order)
    return [next(ones) if e == 1 else next(order) for e in y]


def _runs(fine: list, coarse: list) -> Optional[list]:
    """For a Reshape between `fine` and `coarse` (either way), the run of
    fine's axes each of coarse's axes is: equal dims at the front and the
    back pair one to one, the middle of fine is one run making the one axis
    left in coarse's middle. None when that does not describe it."""
    head = 0
    while head < min(len(fine), len(coarse)) and same_dim(fine[head], coarse[head]):
        head += 1
    tail = 0
    while (tail < min(len(fine), len(coarse)) - head
           and same_dim(fine[len(fine) - 1 - tail], coarse[len(coarse) - 1 - tail])):
        tail += 1
    middle_fine = len(fine) - head - tail
    middle_coarse = len(coarse) - head - tail
    if (middle_fine, middle_coarse) != (0, 0) and (middle_coarse != 1 or middle_fine < 1):
        return None
    runs = [[i] for i in range(head)]
    if middle_coarse:
        runs.append(list(range(head, head + middle_fine)))
    runs += [[len(fine) - tail + i] for i in range(tail)]
    return runs
