"""select_concat_entries: a Where with a constant condition between a
constant and a 1-d Concat picks whole entries of the Concat, so the Concat
can hold the picked ones itself.

    s = Concat(Unsqueeze(B), [-1], [-1])
    t = Where([False, True, True], [1, 1, 1], s)
 -> t = Concat(Unsqueeze(B), [1], [1])        (Where(cond, s, c) alike)

The TorchScript exporter writes this guard for every expand(B, -1, -1)
with a size read at run time (ViT's class token, DETR's queries): -1 keeps
a dim, which Expand spells 1. Once fold_constants has decided the
Equal(s, -1), the condition is a constant.

Refuses quietly (not its case): a condition or other branch that is not a
1-d constant of the Concat's length (or one element), a Concat not along
axis 0 of 1-d parts. Refuses with a reason: a part computed at run time
with some of its entries picked from the constant and some kept, or a
part's length unknown.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import constant_array, dims


class SelectConcatEntries(Rule):
    name = "select_concat_entries"
    description = "Where(constant condition, constant, 1-d Concat) -> the Concat of the picked entries"
    min_opset = 9  # Where
    after_cleanup = False  # a cleanup itself
    pattern_near_misses = False  # most Wheres have no constant condition: no "almost"

    def pattern(self, opset: int) -> list:
        return [Op("Where", Const("cond"), Const("c"), Var("concat"), name="where"),
                Op("Where", Const("cond"), Var("concat"), Const("c"), name="where")]

    def check(self, m: Match) -> Optional[str]:
        plan = _plan(m)
        return plan if isinstance(plan, str) else None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        dtype = m.array("c").dtype
        hint = f"{m.root.outputs[0].name}_part"
        parts = [p if not isinstance(p, np.ndarray) else edit.constant(p.astype(dtype), hint) for p in _plan(m)]
        edit.replace_root("Concat", parts, {"axis": 0})
        return None


def _plan(m: Match) -> Union[list, str]:
    """The new Concat's parts: values kept whole, or constant arrays; or why not."""
    concat = m["concat"].producer
    if concat is None or concat.op_type != "Concat" or concat.domain or concat.attributes.get("axis") not in (0, -1):
        return ""
    cond, c = m.array("cond"), m.array("c")
    parts = []
    for v in concat.inputs:
        d = dims(v)
        if d is None or len(d) != 1:
            return ""
        if not isinstance(d[0], int):
            return f"the length of the Concat's part '{v.name}' is unknown"
        parts.append((v, d[0]))
    total = sum(length for _, length in parts)
    if cond.dtype != np.bool_ or any(a.ndim > 1 or a.size not in (1, total) for a in (cond, c)):
        return ""
    take_concat = m.root.inputs[1].name == m["concat"].name  # Where(cond, concat, c): True keeps its entry
    keep = np.broadcast_to(cond if take_concat else ~cond, (total,))
    fill = np.broadcast_to(c, (total,))
    plan, at = [], 0
    for v, length in parts:
        here = keep[at:at + length]
        if here.all():
            plan.append(v)
        else:
            values = constant_array(v)
            if values is None and here.any():
                return f"the Concat's part '{v.name}' is computed, and only some of its entries are picked"
            plan.append(np.where(here, values.reshape(-1), fill[at:at + length]) if values is not None
                        else np.array(fill[at:at + length]))
        at += length
    return _merged(plan)


def _merged(plan: list) -> list:
    """Adjacent constant parts as one."""
    out = []
    for p in plan:
        if isinstance(p, np.ndarray) and out and isinstance(out[-1], np.ndarray):
            out[-1] = np.concatenate([out[-1], p])
        else:
            out.append(p)
    return out
