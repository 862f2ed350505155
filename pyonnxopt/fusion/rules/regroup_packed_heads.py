"""regroup_packed_heads: a projection whose parts are interleaved head by
head (LeViT's q, k and v) and merged back part by part -> the projection's
columns in part order and one Split:

    p = Gemm(x, W, c) | MatMul(x, W) [+ c]            [..., H*D]
    heads = Reshape(p, [..., H, D])
    a, b, ... = Split(heads, axis=-1, [d1, d2, ...])   d1 + d2 + ... = D
    a3 = Reshape(a, [..., H*d1])   b3 = Reshape(b, [..., H*d2])   ...
->  p' = Gemm(x, W[:, order], c[order]) | MatMul(...)
    a3, b3, ... = Split(Reshape(p', [..., H*D]), axis=-1, [H*d1, H*d2, ...])

Column h*D + offset(i) + j of W (head h, part i, entry j) moves to
H*offset(i) + h*d_i + j: part i of every head, in head order, is then one
contiguous block, which is what its merge reads. Each output is the same
dot product as before, so the results are bit for bit. The merges are
those fuse_attention leaves when the parts go into an Attention in 3-d
(LeViT's values are wider than its keys): 3 nodes fewer per block.

Refuses when:
1. W (or the bias) is not a constant, or another node reads it (a second,
   reordered copy);
2. the head split is not a constant target whose last two dims are H and
   D with H*D the projection's width, or the Split is not along that last
   axis;
3. a part has a reader other than one Reshape that merges its heads back
   ([..., H, d] -> [..., H*d], the same leading dims), or is a graph output.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules._channels import attribute
from pyonnxopt.fusion.values import attr_or_input, dims, same_dims


def _projection(variant: str) -> Op:
    x, w = Var("x"), Const("w", rank=2)
    if variant == "gemm":
        return Op("Gemm", x, w, Const("c", optional=True), name="proj")
    product = Op("MatMul", x, w, name="proj")
    return product if variant == "matmul" else Op("Add", product, Const("c"), name="biased", commutative=True)


class RegroupPackedHeads(Rule):
    name = "regroup_packed_heads"
    description = ("a projection interleaved head by head, split into parts that are merged back (LeViT's q, k, v) "
                   "-> its columns in part order and one Split")
    min_opset = 5  # Reshape's shape input

    def pattern(self, opset: int) -> list:
        return [Op("Split", Op("Reshape", _projection(v), Const("heads_shape"), name="heads"),
                   Var("sizes", optional=True), name="split") for v in ("gemm", "biased", "matmul")]

    def check(self, m: Match) -> Optional[str]:
        for name in ("w", "c"):
            if name in m and m[name] is not None and len(m[name].uses) != 1:
                return f"the constant '{m[name].name}' has other readers (it would be copied)"
        layout = _layout(m)
        if isinstance(layout, str):
            return layout
        return _merges_reason(m, *layout)

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        h, d, sizes = _layout(m)
        order = np.concatenate(_part_columns(h, d, sizes))
        proj = m["proj"]
        trans_b = proj.op_type == "Gemm" and attribute(proj, "transB", 0)
        w = m.array("w")
        w = w[order] if trans_b else w[:, order]
        inputs = [m["x"], edit.constant(np.ascontiguousarray(w), f"{m['w'].name}_by_part")]
        c = m["c"] if "c" in m else None
        if c is not None:
            bias = m.array("c")
            if bias.ndim and bias.shape[-1] == h * d:
                c = edit.constant(np.ascontiguousarray(bias[..., order]), f"{m['c'].name}_by_part")
        if proj.op_type == "Gemm":
            (p,) = edit.node("Gemm", inputs + ([c] if c is not None else []), _attrs(proj), hint=proj.name)
        else:
            (p,) = edit.node("MatMul", inputs, hint=proj.name)
            if c is not None:
                (p,) = edit.node("Add", [p, c], hint=m["biased"].name)
        target = [int(x) for x in m.array("heads_shape")][:-2] + [h * d]
        heads = m["heads"]
        (flat,) = edit.node("Reshape", [p, edit.constant(np.array(target, np.int64), "parts_shape")],
                            {"allowzero": attribute(heads, "allowzero")} if attribute(heads, "allowzero") else None,
                            hint=f"{heads.name}_by_part")
        widths = np.array([h * s for s in sizes], np.int64)
        split = ([flat, edit.constant(widths, "parts_sizes")], {"axis": -1}) if m.opset >= 13 else \
            ([flat], {"axis": -1, "split": widths.tolist()})
        parts = edit.node("Split", *split, outputs=len(sizes), hint=m["split"].name or "parts")
        for value, part in zip(m["split"].outputs, parts):
            ((merge, _),) = value.uses
            edit.replace_value(merge.outputs[0], part)
            edit.graph.remove_node(merge)  # read by nothing now; the matched nodes then go too
        return None


def _attrs(gemm) -> dict:
    return {k: v for k in ("alpha", "beta", "transA", "transB") if (v := attribute(gemm, k)) is not None}


def _part_columns(h: int, d: int, sizes: list) -> list:
    """For each part in turn, the old columns of its heads in head order."""
    offsets = np.cumsum([0] + list(sizes[:-1]))
    return [(np.arange(h)[:, None] * d + off + np.arange(size)[None, :]).ravel() for off, size in zip(offsets, sizes)]


def _layout(m: Match):
    """(H, D, part sizes), or why the match is not a head split's parts."""
    proj, heads, split = m["proj"], m["heads"], m["split"]
    w = m.array("w")
    width = w.shape[0] if proj.op_type == "Gemm" and attribute(proj, "transB", 0) else w.shape[1]
    out = dims(heads.outputs[0])
    if out is None or len(out) < 3 or not all(isinstance(x, int) for x in out[-2:]):
        return f"the head split's last two dims are not known ({out})"
    h, d = out[-2:]
    target = [int(x) for x in m.array("heads_shape")]
    if h * d != width or len(target) != len(out) or target[-2:] not in ([h, d], [h, -1], [-1, d]):
        return f"the head split {target} does not split the projection's {width} columns into [H, D]"
    axis = attribute(split, "axis", 0)
    if axis not in (-1, len(out) - 1):
        return f"the Split is along axis {axis}, not the head's last"
    sizes = attr_or_input(split, "split", 1)
    if not sizes or sum(sizes) != d or len(sizes) != len(split.outputs) or len(sizes) < 2:
        return f"the Split's sizes {sizes} do not cut the head's {d} entries into its {len(split.outputs)} parts"
    if "c" in m and m["c"] is not None:
        c = m.array("c")
        if c.ndim and c.shape[-1] not in (1, width):
            return f"the bias {list(c.shape)} does not run along the projection's columns"
    return h, d, sizes


def _merges_reason(m: Match, h: int, d: int, sizes: list) -> Optional[str]:
    """None when each part is read by one Reshape merging its heads back."""
    lead = dims(m["heads"].outputs[0])[:-2]
    for value, size in zip(m["split"].outputs, sizes):
        uses = value.uses
        if value.is_graph_output or len(uses) != 1 or uses[0][0].op_type != "Reshape" or uses[0][1] != 0:
            return f"the part '{value.name}' is not read by one Reshape alone"
        merged = dims(uses[0][0].outputs[0])
        if not same_dims(merged, lead + [h * size]):
            return f"the part '{value.name}' is reshaped to {merged}, not its heads merged ({lead + [h * size]})"
    return None
