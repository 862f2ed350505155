"""fuse_attention: scaled dot-product attention written out -> Attention (opset 23).

    s = MatMul(q, Transpose(k, [0,1,3,2]))      q, k, v: [B, H, S|T, D]
    s = Mul(s, c) | Div(s, c)                    (or q and K^T each times sqrt(c))
    s = Add(s, mask)                             (optional, additive)
    y = MatMul(Softmax(s, axis=-1), v)
->  y = Attention(q, k, v, mask, scale=c)

Two layouts:
 4-D  q, k, v already [B, H, S, D]; K^T may also come as Transpose(k', [0,2,3,1])
      of a [B, T, H, D] k' (HF BERT/GPT-2 merge the two transposes): K is then
      Transpose(k', [0,2,1,3]), a node made here.
 3-D  the heads are split and merged around it, as torch's MultiheadAttention
      and HF models do:  q = Transpose(Reshape(q3, [B,S,H,D]), [0,2,1,3]) (k, v alike,
      K^T through [0,2,3,1]) and  out = Reshape(Transpose(y, [0,2,1,3]), [B,S,H*Dv]):
      the whole becomes Attention(q3, k3, v3, mask, q_num_heads=H, kv_num_heads=H)
      on the [B, S, H*D] tensors (followed by the merge's Reshape when that
      flattens further, as GPT-2's [B*S, H*Dv]).

Both targets emit the opset-23 Attention (onnxruntime 1.32 runs it on CPU).
com.microsoft MultiHeadAttention is not emitted: its packed-input and mask
conventions differ from these graphs', and onnxruntime runs Attention-23.

The mask must be what onnxruntime's Attention kernel accepts (it does not
broadcast over query positions, and a 3-d mask is [H, S, T]): rank 2 to 4,
[..., S, T] with its other dims 1 or equal to H (and B). A mask [B, 1, 1, T]
(a padding mask) is expanded over S first, when S is known.

Refuses when:
 1. the opset is below 23 (both targets);
 2. the Softmax is not over the last axis; a scale is not a scalar constant;
 3. q, k, v cannot be shown to share batch and heads (MatMul's broadcasting
    is not Attention's), or a Reshape does more than split/merge the last dim;
 4. the mask's shape is unknown or does not fit (see above), or it needs
    expanding over an unknown S;
 5. onnxruntime's CPU provider has no kernel for the element type.
"""

from __future__ import annotations

import itertools
from typing import Optional, Union

import numpy as np

from pyonnxopt.fusion import Const, Op, Rule, Var
from pyonnxopt.fusion.rule import Edit, Match
from pyonnxopt.fusion.targets import dtype_reason, opset_reason
from pyonnxopt.fusion.values import dims, same_dim, scalar_of

SPLIT = [0, 2, 1, 3]  # [B, S, H, D] <-> [B, H, S, D]


def _heads(name: str) -> Op:
    """[B, S, H*D] -> Reshape [B, S, H, D] -> Transpose [B, H, S, D]."""
    split = Op("Reshape", Var(f"{name}3"), Const(f"{name}_shape"), name=f"{name}_split")
    return Op("Transpose", split, name=f"{name}_heads", attrs={"perm": SPLIT})


def _variant(layout: str, scale: str, mask: bool) -> Op:
    if layout == "3d":
        q, v = _heads("q"), _heads("v")
        k_t = Op("Transpose", Op("Reshape", Var("k3"), Const("k_shape"), name="k_split"), name="k_t",
                 attrs={"perm": [0, 2, 3, 1]})
    else:
        q, v = Var("q"), Var("v")
        k_t = (Op("Transpose", Var("k"), name="k_t", attrs={"perm": [0, 1, 3, 2]}) if layout == "bhsd"
               else Op("Transpose", Var("k_bshd"), name="k_t", attrs={"perm": [0, 2, 3, 1]}))
    if scale == "both":
        q = Op("Mul", q, Const("scale_q"), name="q_scaled", commutative=True)
        k_t = Op("Mul", k_t, Const("scale_k"), name="k_scaled", commutative=True)
    s = Op("MatMul", q, k_t, name="scores")
    if scale == "mul":
        s = Op("Mul", s, Const("scale"), name="scaled", commutative=True)
    elif scale == "div":
        s = Op("Div", s, Const("scale"), name="scaled")
    if mask:
        s = Op("Add", s, Var("mask"), name="masked", commutative=True)
    y = Op("MatMul", Op("Softmax", s, name="probs"), v, name="context")
    if layout == "3d":
        y = Op("Reshape", Op("Transpose", y, name="context_t", attrs={"perm": SPLIT}), Const("out_shape"),
               name="merge_heads")
    return y


class FuseAttention(Rule):
    name = "fuse_attention"
    description = "MatMul(Q, K^T) [* scale] [+ mask] -> Softmax -> MatMul(V) -> Attention (opset 23), 4-d or 3-d heads"

    def pattern(self, opset: int) -> list:
        # The 3-d layout first: it takes the head split and merge along.
        return [_variant(layout, scale, mask) for layout, mask, scale in itertools.product(
            ("3d", "bhsd", "bshd_k"), (True, False), ("mul", "div", "both", "none"))]

    def check(self, m: Match) -> Optional[str]:
        why = opset_reason("Attention", m.opset)
        if why:
            return why
        axis = m["probs"].attributes.get("axis", -1)
        if axis != -1 and axis != len(dims(m["probs"].inputs[0]) or []) - 1:
            return f"the Softmax is over axis {axis}, not the last"
        scale = _scale(m)
        if isinstance(scale, str):
            return scale
        bhst = _layout(m)
        if isinstance(bhst, str):
            return bhst
        if "mask" in m:
            why = _mask_reason(dims(m["mask"]), bhst)
            if why:
                return why
            if m.dtype("mask") != _dtype(m):
                return "the mask's element type is not the inputs'"
        return dtype_reason("", "Attention", _dtype(m))

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        b, h, s, t = _layout(m)
        attrs = {"scale": float(_scale(m))}
        if "q3" in m:
            inputs = [m["q3"], m["k3"], m["v3"]]
            attrs.update(q_num_heads=h, kv_num_heads=h)
        elif "k_bshd" in m:
            (k,) = edit.node("Transpose", [m["k_bshd"]], {"perm": SPLIT}, hint=f"{m['k_bshd'].name}_bhsd")
            inputs = [m["q"], k, m["v"]]
        else:
            inputs = [m["q"], m["k"], m["v"]]
        if "mask" in m:
            mask, mask_dims = m["mask"], dims(m["mask"])
            if mask_dims[-2] == 1 and s != 1:
                to = np.ones(len(mask_dims), np.int64)
                to[-2] = s
                (mask,) = edit.node("Expand", [mask, edit.constant(to, "mask_over_queries")],
                                    hint=f"{mask.name}_expanded")
            inputs.append(mask)
        if "q3" in m and _merge(m, _split(m, "q"), _split(m, "v")) == "reshape":
            allowzero = m.root.attributes.get("allowzero", 0)
            (y,) = edit.node("Attention", inputs, attrs)
            edit.replace_root("Reshape", [y, m["out_shape"]], {"allowzero": allowzero})
        else:
            edit.replace_root("Attention", inputs, attrs)
        return None


def _dtype(m: Match) -> int:
    return m.dtype("q3") if "q3" in m else m.dtype("q")


def _scale(m: Match) -> Union[float, str]:
    """The factor on Q K^T, or why it is not a scalar constant."""
    if "scale_q" in m:
        parts = [scalar_of(m.array("scale_q")), scalar_of(m.array("scale_k"))]
        if None in parts:
            return "the scale on Q or K^T is not a scalar constant"
        return parts[0] * parts[1]
    if "scale" not in m:
        return 1.0
    c = scalar_of(m.array("scale"))
    if c is None or (m["scaled"].op_type == "Div" and c == 0):
        return f"the scale '{m['scale'].name}' is not a nonzero scalar constant"
    return 1.0 / c if m["scaled"].op_type == "Div" else c


def _layout(m: Match) -> Union[tuple, str]:
    """(B, H, S, T) as ints or symbols, once q, k and v provably share batch
    and heads; else why not."""
    if "q3" in m:
        return _layout_3d(m)
    q, v = dims(m["q"]), dims(m["v"])
    if "k_bshd" in m:
        kb = dims(m["k_bshd"])
        k = None if kb is None or len(kb) != 4 else [kb[0], kb[2], kb[1], kb[3]]
    else:
        k = dims(m["k"])
    if any(d is None or len(d) != 4 for d in (q, k, v)):
        return f"q, k, v are not all 4-d with known rank ({q}, {k}, {v})"
    if not (same_dim(q[0], k[0]) and same_dim(q[0], v[0]) and same_dim(q[1], k[1]) and same_dim(q[1], v[1])):
        return f"q {q}, k {k}, v {v} do not provably share batch and heads"
    return q[0], q[1], q[2], k[2]


def _split(m: Match, name: str) -> Union[tuple, str]:
    """(B, S, H, D) when the Reshape of name3 only splits its last dim."""
    flat, split = dims(m[f"{name}3"]), dims(m[f"{name}_split"].outputs[0])
    if flat is None or split is None or len(flat) != 3 or len(split) != 4:
        return f"the {name} head split {flat} -> {split} is not [B,S,E] -> [B,S,H,D]"
    if not (same_dim(flat[0], split[0]) and same_dim(flat[1], split[1]) and isinstance(flat[2], int)
            and isinstance(split[2], int) and isinstance(split[3], int) and split[2] * split[3] == flat[2]):
        return f"the {name} head split {flat} -> {split} does more than split the last dim"
    return tuple(split)


def _layout_3d(m: Match) -> Union[tuple, str]:
    parts = [_split(m, n) for n in ("q", "k", "v")]
    for p in parts:
        if isinstance(p, str):
            return p
    q, k, v = parts
    if not (same_dim(q[0], k[0]) and same_dim(q[0], v[0]) and q[2] == k[2] == v[2] and same_dim(k[1], v[1])):
        return f"q {list(q)}, k {list(k)}, v {list(v)} do not provably share batch and heads"
    if _merge(m, q, v) is None:
        return "the head merge's shape has a 0 (copy a dim) past its second entry"
    return q[0], q[2], q[1], k[1]


def _merge(m: Match, q: tuple, v: tuple) -> Optional[str]:
    """"exact" when the head merge gives [B, S, H*Dv], Attention's own 3-d
    output; "reshape" when it flattens further (GPT-2: [B*S, E]) and the same
    Reshape of that output computes it; None when neither is provable."""
    out = dims(m.root.outputs[0])
    if out is not None and len(out) == 3 and same_dim(out[0], q[0]) and same_dim(out[1], q[1]) \
            and out[2] == q[2] * v[3]:
        return "exact"
    # Transpose(y) is [B, S, H, Dv] in memory order, as Attention's [B, S, H*Dv]:
    # the Reshape reads the same elements unless a 0 copies a dim that moved.
    copies = m.root.attributes.get("allowzero", 0) == 0
    shape = [int(d) for d in m.array("out_shape").reshape(-1)]
    return None if copies and 0 in shape[2:] else "reshape"


def _mask_reason(mask: Optional[list], bhst: tuple) -> Optional[str]:
    """None when onnxruntime's Attention takes the mask (after expanding a
    1 over the query positions), else why not."""
    b, h, s, t = bhst
    if mask is None or not 2 <= len(mask) <= 4:
        return f"the mask's shape {mask} is not 2-d to 4-d"
    if not same_dim(mask[-1], t):
        return f"the mask {mask} does not have the key positions ({t}) last"
    if not (same_dim(mask[-2], s) or (mask[-2] == 1 and isinstance(s, int))):
        return f"the mask {mask} broadcasts over the query positions ({s}), and their count is unknown"
    if len(mask) >= 3 and not (mask[-3] == 1 or same_dim(mask[-3], h)):
        return f"the mask {mask} does not fit the heads ({h})"
    if len(mask) == 4 and not (mask[0] == 1 or same_dim(mask[0], b)):
        return f"the mask {mask} does not fit the batch ({b})"
    return None
