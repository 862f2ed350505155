"""fuse_rotary_heads (opset 23): a RotaryEmbedding on split heads rotates
the 3-d tensor instead, and the head split moves after it, where
fuse_attention_heads takes it into the Attention.

    r = RotaryEmbedding(Transpose(Reshape(x3, [B, S, H, D]), [0, 2, 1, 3]), cos, sin [, pos])
->  r = Transpose(Reshape(RotaryEmbedding(x3, cos, sin [, pos], num_heads=H), [B, S, H, D]), [0, 2, 1, 3])

torch's dynamo exporter writes LLaMA-style rotary embeddings this way at
opset 23, on q and k between their head split and the Attention. The op
reads a 4-d input as [B, H, S, D] and a 3-d one as [B, S, H*D] with
num_heads; its caches are [B, S, D/2] (or indexed by pos) either way, so
the rotation is the same (onnxruntime and the ONNX reference agree to
the bit). Same count of nodes; the gain comes when fuse_attention_heads
then drops the split and the merge (a 2-layer LLaMA: 8 -> 0 Transposes).

Refuses when:
 1. the Reshape does more than split the last dim into heads;
 2. something other than an Attention reads the rotated heads, directly
    or through a cache's Concat (there the move would only shuffle nodes).
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules.fuse_attention import SPLIT, _heads, _split


class FuseRotaryHeads(Rule):
    name = "fuse_rotary_heads"
    description = ("RotaryEmbedding on a head split -> RotaryEmbedding on the 3-d tensor (num_heads), the split "
                   "after it (opset 23), for fuse_attention_heads")
    min_opset = 23

    def pattern(self, opset: int) -> list:
        return [Op("RotaryEmbedding", _heads("x"), Var("cos"), Var("sin"), Var("pos", optional=True),
                   name="rotary")]

    def check(self, m: Match) -> Optional[str]:
        split = _split(m, "x")
        if isinstance(split, str):
            return split
        for reader in _readers(m["rotary"].outputs[0]):
            if reader.op_type != "Attention" or reader.domain not in ("", "ai.onnx"):
                return f"the rotated heads are also read by {reader.op_type} '{reader.name}', not only an Attention"
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        _, _, h, _ = _split(m, "x")
        rotary = m["rotary"]
        inputs = [m["x3"], m["cos"], m["sin"], m["pos"]]
        (flat,) = edit.node("RotaryEmbedding", inputs, hint=f"{rotary.name or 'rotary'}_3d")
        edit.added[-1].copy_attributes(rotary)
        edit.added[-1].set_attribute("num_heads", h)
        split = m["x_split"]
        (heads,) = edit.node("Reshape", [flat, m["x_shape"]], {"allowzero": split.attributes.get("allowzero", 0)},
                             hint=f"{flat.name}_heads")
        edit.replace_root("Transpose", [heads], {"perm": SPLIT})
        return None


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
