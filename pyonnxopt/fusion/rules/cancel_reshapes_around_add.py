"""cancel_reshapes_around_add: a constant added in a split view of x, and x's
shape put back right after, is the same constant reshaped to x's view.

    y = Reshape(Add(Reshape(x, A), c), shape of x)
 -> y = Add(x, c')      c' = c with each group of A's dims that makes one of
                         x's dims merged: 1 where c is 1 all along the group,
                         else whole (copied along the group's axes where c
                         broadcast there, e.g. a batch over the windows)

Swin's shifted windows add their mask this way: scores [B*nW, H, N, N] ->
[B, nW, H, N, N] + mask [1, nW, 1, N, N] -> back. With the Reshapes gone,
the mask is an ordinary additive one that fuse_attention takes.

Refuses when:
 1. x's or A's dims are not all known ints (or have a 0), or the result's
    are not x's;
 2. A's dims do not group into x's (a dim of x split across two of A's
    and merged with part of another);
 3. the constant widens the sum, or would be copied past the fold size
    limit (--fold-size-limit) to merge a group it broadcasts inside.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import dims


class CancelReshapesAroundAdd(Rule):
    name = "cancel_reshapes_around_add"
    description = "Reshape(Add(Reshape(x, A), c), shape of x) -> Add(x, c reshaped to x's view)"
    min_opset = 5  # Reshape with a shape input

    def pattern(self, opset: int) -> Op:
        split = Op("Reshape", Var("x"), Var("split_shape"), name="split")
        add = Op("Add", split, Const("c"), name="add", commutative=True)
        return Op("Reshape", add, Var("merge_shape"), name="merge")

    def check(self, m: Match) -> Optional[str]:
        plan = _view_of_c(m)
        return plan if isinstance(plan, str) else None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        full, widened, merged = _view_of_c(m)
        c = np.ascontiguousarray(np.broadcast_to(m.array("c").reshape(full), widened)).reshape(merged)
        edit.replace_root("Add", [m["x"], edit.constant(c, f"{m['c'].name}_unsplit")])
        return None


def _view_of_c(m: Match) -> Union[tuple, str]:
    """(c's shape given A's rank, the shape it is copied to, x's view of it),
    or why there is none. Nothing is copied here: the rewrite does that."""
    x, a, y = dims(m["x"]), dims(m["split"].outputs[0]), dims(m.root.outputs[0])
    for name, d in (("x", x), ("the split view", a)):
        if d is None or not all(isinstance(e, int) and e > 0 for e in d):
            return f"{name}'s dims {d} are not all known and nonzero"
    if y != x:
        return f"the result's dims {y} are not x's {x}"
    c = m.array("c")
    if c.ndim > len(a):
        return f"the constant has rank {c.ndim}, the split view {len(a)}"
    full = [1] * (len(a) - c.ndim) + list(c.shape)
    if any(f not in (1, d) for f, d in zip(full, a)):
        return f"the constant's shape {list(c.shape)} widens the split view {a}"
    groups = _groups(a, x)
    if groups is None:
        return f"the split view {a} does not group into x's dims {x}"
    merged, widened = [], list(full)
    for g in groups:
        moving = [i for i in g if a[i] != 1]  # size-1 axes are both 1 and whole
        if all(full[i] == 1 for i in moving):
            merged.append(1)
            continue
        for i in g:  # whole along the group, copied where it broadcast (a batch over windows)
            widened[i] = a[i]
        merged.append(int(np.prod([a[i] for i in g], dtype=np.int64)))
    size = int(np.prod(widened, dtype=np.int64))
    if size > c.size and size * c.itemsize > m.options.fold_size_limit:
        return (f"the constant {list(c.shape)} broadcasts inside the split of one of x's dims: its copy would take "
                f"{size * c.itemsize} bytes (--fold-size-limit {m.options.fold_size_limit})")
    return full, widened, merged


def _groups(a: list, x: list) -> Optional[list]:
    """Consecutive runs of a's axes whose sizes multiply to each of x's,
    trailing 1s joining the last; None when they do not line up."""
    groups, i = [], 0
    for d in x:
        g, p = [], 1
        while i < len(a) and p < d:
            g.append(i)
            p *= a[i]
            i += 1
        if p != d:
            return None
        groups.append(g)
    if any(s != 1 for s in a[i:]) or not groups:
        return None
    groups[-1].extend(range(i, len(a)))
    return groups
