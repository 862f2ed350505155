"""fuse_consecutive_slices: a Slice of a Slice on other axes becomes one
Slice of the original tensor (Swin's patch merging takes x[:, 0::2, 1::2]
as two Slices, one per axis):

    a = Slice(x, [0], [INT64_MAX], axes=[1], steps=[2])
    y = Slice(a, [1], [INT64_MAX], axes=[2], steps=[2])
 -> y = Slice(x, [0, 1], [INT64_MAX, INT64_MAX], axes=[1, 2], steps=[2, 2])

The inner Slice may have other readers: it stays for them (and goes once
the last one is merged), so the merged Slice never takes a value from
anyone. Slicing axes independently commutes, so the result is the same
elements in the same order.

Refuses when:
1. starts, ends, axes or steps are not constants (or axes are absent while
   starts has another length than the data's known rank);
2. the two Slices share an axis (merging ranges on one axis is not done);
3. a negative axis meets an unknown rank;
4. the opset is below 10 (Slice took attributes then).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule


def _slice(inner: bool) -> tuple:
    p = "inner_" if inner else "outer_"
    return (Const(p + "starts"), Const(p + "ends"), Const(p + "axes", optional=True),
            Const(p + "steps", optional=True))


class FuseConsecutiveSlices(Rule):
    name = "fuse_consecutive_slices"
    description = "Slice(Slice(x)) on different axes -> one Slice"
    min_opset = 10

    def pattern(self, opset: int) -> Op:
        inner = Op("Slice", Var("x"), *_slice(True), name="inner", exclusive=False)
        return Op("Slice", inner, *_slice(False), name="outer")

    def _params(self, m: Match, p: str, rank: Optional[int]) -> tuple:
        starts = m.array(p + "starts").astype(np.int64).reshape(-1)
        ends = m.array(p + "ends").astype(np.int64).reshape(-1)
        if m[p + "axes"] is not None:
            axes = m.array(p + "axes").astype(np.int64).reshape(-1)
        elif rank is not None and rank == len(starts):
            axes = np.arange(len(starts), dtype=np.int64)
        else:
            return None, "axes absent and the data's rank unknown or longer than starts"
        if np.any(axes < 0):
            if rank is None:
                return None, "a negative axis and the data's rank unknown"
            axes = np.where(axes < 0, axes + rank, axes)
        steps = (m.array(p + "steps").astype(np.int64).reshape(-1) if m[p + "steps"] is not None
                 else np.ones(len(starts), np.int64))
        return (starts, ends, axes, steps), None

    def _merge(self, m: Match) -> tuple:
        """([starts, ends, axes, steps] of the one Slice, None) or (None, why not)."""
        shape = m.shape("x")
        rank = len(shape) if shape is not None else None
        inner, why = self._params(m, "inner_", rank)
        if why:
            return None, f"inner Slice: {why}"
        outer, why = self._params(m, "outer_", rank)
        if why:
            return None, f"outer Slice: {why}"
        if set(inner[2].tolist()) & set(outer[2].tolist()):
            return None, "the two Slices share an axis"
        return [np.concatenate([a, b]) for a, b in zip(inner, outer)], None

    def check(self, m: Match) -> Optional[str]:
        return self._merge(m)[1]

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        starts, ends, axes, steps = self._merge(m)[0]
        hint = m.root.outputs[0].name
        edit.replace_root("Slice", [m["x"], edit.constant(starts, hint + "_starts"), edit.constant(ends, hint + "_ends"),
                                    edit.constant(axes, hint + "_axes"), edit.constant(steps, hint + "_steps")])
        return None
