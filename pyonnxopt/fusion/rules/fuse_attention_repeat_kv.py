"""fuse_attention_repeat_kv: an opset-23 Attention whose keys and values
were repeated for grouped-query heads takes them unrepeated.

    k' = Reshape(Expand(Unsqueeze(k, [2]), [B, Hkv, n, T, D]), [B, Hkv*n, T, D])   (v alike)
    y = Attention(q, k', v' [, mask])
->  y = Attention(q, k, v [, mask])

LLaMA, Mistral and Qwen repeat each key/value head for the n query heads
that share it (transformers' repeat_kv); the opset-23 Attention takes
[B, Hkv, T, D] keys with Hq a multiple of Hkv and shares them itself, so
the copy (n times the cache's size) goes. Query head h reads key head
h // n in both.

Refuses when:
 1. the Attention takes 3-d inputs (q_num_heads set: its heads are split
    inside), or more than a mask besides q, k, v;
 2. the Unsqueeze is not of axis 2, the Expand is not to [B, Hkv, n, T, D]
    or the Reshape not back to [B, Hkv*n, T, D] (dims int or symbols,
    provably those of k);
 3. k and v are not repeated alike, or q's heads are not Hkv*n.
"""

from __future__ import annotations

from typing import Optional, Union

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.values import attr_or_input, dims, same_dim


def _repeated(name: str) -> Op:
    added = Op("Unsqueeze", Var(name), Var(f"{name}_axes", optional=True), name=f"{name}_unsqueezed")
    copied = Op("Expand", added, Var(f"{name}_copies"), name=f"{name}_expanded")
    return Op("Reshape", copied, Var(f"{name}_heads"), name=f"{name}_repeated")


class FuseAttentionRepeatKv(Rule):
    name = "fuse_attention_repeat_kv"
    description = "Attention on keys/values repeated for grouped-query heads (opset 23) -> on the keys/values themselves"
    min_opset = 23

    def pattern(self, opset: int) -> list:
        return [Op("Attention", Var("q"), _repeated("k"), _repeated("v"), *mask, name="attention")
                for mask in ([Var("mask")], [])]

    def check(self, m: Match) -> Optional[str]:
        return _reason(m)

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        inputs = [m["q"], m["k"], m["v"]] + ([m["mask"]] if "mask" in m else [])
        edit.replace_root("Attention", inputs, copy_attrs_from=m.root)
        return None


def _reason(m: Match) -> Optional[str]:
    if "q_num_heads" in m.root.attributes or "kv_num_heads" in m.root.attributes:
        return "the Attention takes 3-d inputs (q_num_heads): its heads are split inside"
    parts = [_repeat(m, n) for n in ("k", "v")]
    for p in parts:
        if isinstance(p, str):
            return p
    (kb, hkv, n, t), (vb, vh, vn, vt) = parts
    if not (same_dim(kb, vb) and hkv == vh and n == vn and same_dim(t, vt)):
        return f"k and v are not repeated alike ({hkv} heads x {n}, {vh} heads x {vn})"
    q = dims(m["q"])
    if q is None or len(q) != 4 or q[1] != hkv * n or not same_dim(q[0], kb):
        return f"q {q} does not have the batch and {hkv * n} heads of the repeated keys"
    return None


def _repeat(m: Match, name: str) -> Union[tuple, str]:
    """(B, Hkv, n, T) when name's chain repeats each of its heads n times."""
    label = f"the {name} repeat"
    axes = attr_or_input(m[f"{name}_unsqueezed"], "axes", 1)
    if axes not in ([2], [-3]):
        return f"{label} unsqueezes axes {axes}, not 2"
    k, expanded, out = dims(m[name]), dims(m[f"{name}_expanded"].outputs[0]), dims(m[f"{name}_repeated"].outputs[0])
    if k is None or expanded is None or out is None or (len(k), len(expanded), len(out)) != (4, 5, 4):
        return f"{label} {k} -> {expanded} -> {out} is not [B,H,T,D] -> [B,H,n,T,D] -> [B,H*n,T,D]"
    b, h, t, d = k
    n = expanded[2]
    if not (isinstance(h, int) and isinstance(n, int) and expanded[1] == h and same_dim(expanded[0], b)
            and same_dim(expanded[3], t) and same_dim(expanded[4], d) and same_dim(out[0], b) and out[1] == h * n
            and same_dim(out[2], t) and same_dim(out[3], d)):
        return f"{label} {k} -> {expanded} -> {out} does more than repeat each head"
    return b, h, n, t
