"""fuse_rotary_heads (opset 23): a RotaryEmbedding on split heads rotates
the 3-d tensor instead, and the head split moves after it, where
fuse_attention_heads takes it into the Attention.

    r = RotaryEmbedding(Transpose(Reshape(x3, [B, S, H, D]), [0, 2, 1, 3]), cos, sin [, pos])
->  r = Transpose(Reshape(RotaryEmbedding(x3, cos, sin [, pos], num_heads=H), [B, S, H, D]), [0, 2, 1, 3])

torch's dynamo exporter writes LLaMA-style rotary embeddings this way at
opset 23, on q and k between their head split and the Attention. Qwen3
normalizes each head between its split and the Transpose: there x = [B, S,
H, D] goes in as Reshape(x, [0, 0, H*D]) (two Reshapes more, which move no
data, taken only where the Attention's other inputs are heads too). The op
reads a 4-d input as [B, H, S, D] and a 3-d one as [B, S, H*D] with
num_heads; its caches are [B, S, D/2] (or indexed by pos) either way, so
the rotation is the same (onnxruntime and the ONNX reference agree to
the bit). Same count of nodes; the gain comes when fuse_attention_heads
then drops the split and the merge (a 2-layer LLaMA: 8 -> 0 Transposes).

Refuses when:
 1. the Reshape does more than split the last dim into heads, or moved
    heads x are not [B, S, H, D] with H and D known;
 2. something other than an Attention reads the rotated heads, directly
    or through a cache's Concat (there the move would only shuffle nodes);
    for moved heads, an Attention whose q, k and v are not all heads (a
    split's Transpose, or a RotaryEmbedding on one) also refuses.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule, reshape_attrs
from pyonnxopt.fusion.rules.fuse_attention import SPLIT, _heads, _split
from pyonnxopt.fusion.values import dims


class FuseRotaryHeads(Rule):
    name = "fuse_rotary_heads"
    description = ("RotaryEmbedding on a head split -> RotaryEmbedding on the 3-d tensor (num_heads), the split "
                   "after it (opset 23), for fuse_attention_heads")
    min_opset = 23

    def pattern(self, opset: int) -> list:
        moved = Op("Transpose", Var("x4"), name="x_heads", attrs={"perm": SPLIT})
        return [Op("RotaryEmbedding", heads, Var("cos"), Var("sin"), Var("pos", optional=True), name="rotary")
                for heads in (_heads("x"), moved)]  # a split's Reshape first

    def check(self, m: Match) -> Optional[str]:
        split = _bshd(m)
        if isinstance(split, str):
            return split
        for reader in _readers(m["rotary"].outputs[0]):
            if reader.op_type != "Attention" or reader.domain not in ("", "ai.onnx"):
                return f"the rotated heads are also read by {reader.op_type} '{reader.name}', not only an Attention"
            if "x4" in m and not all(_is_heads(v) for v in reader.inputs[:3]):
                return f"the Attention '{reader.name}' does not read heads for q, k and v alike"
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        _, _, h, d = _bshd(m)
        rotary = m["rotary"]
        if "x4" in m:
            shape = edit.constant(np.array([0, 0, h * d], np.int64), "rotary_3d_shape")
            (x3,) = edit.node("Reshape", [m["x4"], shape], hint=f"{m['x4'].name}_3d")
            split_shape, allowzero = edit.constant(np.array([0, 0, h, d], np.int64), "rotary_heads_shape"), 0
        else:
            x3, split_shape, allowzero = m["x3"], m["x_shape"], m["x_split"].attributes.get("allowzero", 0)
        (flat,) = edit.node("RotaryEmbedding", [x3, m["cos"], m["sin"], m["pos"]],
                            hint=f"{rotary.name or 'rotary'}_3d")
        edit.added[-1].copy_attributes(rotary)
        edit.added[-1].set_attribute("num_heads", h)
        (heads,) = edit.node("Reshape", [flat, split_shape], reshape_attrs(allowzero), hint=f"{flat.name}_heads")
        edit.replace_root("Transpose", [heads], {"perm": SPLIT})
        return None


def _bshd(m: Match) -> Union[tuple, str]:
    """(B, S, H, D) of the heads: the split's, or the moved x's."""
    if "x4" not in m:
        return _split(m, "x")
    x = dims(m["x4"])
    if x is None or len(x) != 4 or not isinstance(x[2], int) or not isinstance(x[3], int):
        return f"the heads {x} before the Transpose are not [B, S, H, D] with H and D known"
    return tuple(x)


def _is_heads(v) -> bool:
    """A split's Transpose, through a cache's Concat (its new part) or a RotaryEmbedding."""
    p = v.producer if v is not None else None
    if p is not None and p.op_type == "Concat" and len(p.inputs) == 2:
        p = p.inputs[1].producer if p.inputs[1] is not None else None
    if p is not None and p.op_type == "RotaryEmbedding":
        p = p.inputs[0].producer if p.inputs[0] is not None else None
    return p is not None and p.op_type == "Transpose" and list(p.attributes.get("perm", [])) == SPLIT


def _readers(value) -> list:
    """The nodes reading `value`, through a Concat (a cache: Concat(past,
    new) is the present keys, also a graph output) to its readers."""
    out = []
    for node, _ in value.uses:
        if node.op_type == "Concat" and node.domain in ("", "ai.onnx"):
            out += _readers(node.outputs[0])
        else:
            out.append(node)
    return out
