"""fuse_attention_heads: an opset-23 Attention on 4-d heads split and merged
around it takes the 3-d tensors and splits the heads itself.

    q = Transpose(Reshape(q3, [B, S, Hq, D]), [0, 2, 1, 3])     (k, v alike, Hkv heads)
    y = Attention(q, k, v [, mask])
    out = Reshape(Transpose(y, [0, 2, 1, 3]), [B, S, Hq*Dv])
->  out = Attention(q3, k3, v3 [, mask], q_num_heads=Hq, kv_num_heads=Hkv)

torch's dynamo exporter writes scaled_dot_product_attention this way at
opset 23; fuse_attention's 4-d match (q, k, v already [B, H, S, D]) leaves
the same. The four Transposes and four Reshapes go; the mask, the scale and
the other attributes stay as they are (the mask broadcasts to [B, Hq, S, T]
in both layouts), and a NaN guard Where(IsNaN(y), 0, y) on the op's output
goes on the 3-d output. A merge that flattens further (GPT-2's [B*S, E]) keeps
its Reshape, on the 3-d output. Where the keys and values are
Concat(past, new heads) along the sequence (a cache, the Concats also the
present outputs), the past goes in as the op's past_key and past_value and
its present outputs replace the Concats, as fuse_attention does.

q, k and v may also come as Transpose(x, [0, 2, 1, 3]) of any 4-d x = [B,
S, H, D] (H and D known): LLaMA's rotary embedding sits between the head
split and the Attention (GPT-NeoX's, and its Slices of one packed
projection, too), and optimize_transposes moves the split's Transpose
below it for this rule. x then goes in as Reshape(x, [0, 0, H*D]), which
moves no data.

Multi-query keys and values may be any [B, 1, T, D] value, one head
already first, and q's head split may read [B, 1, S, E]: GPTBigCode
(StarCoder) writes Split(Unsqueeze(qkv, 1), [E, D, D], axis=3). Such a
value goes in without its axis 1 (a Squeeze, which moves no data); where
q, k and v are that Split's three outputs, one Split of qkv along its last
axis gives the 3-d parts instead.

Refuses when:
 1. the Attention returns more than its output (present keys and values,
    the scores) or takes past keys (the matcher's near miss says which);
 2. a Reshape does more than split the last dim into heads (a moved q or
    k: its heads or head size unknown), q, k and v do not provably share
    the batch, or k and v their heads and length;
 3. the merge's result is not [B, S, Hq*Dv] and its shape may copy a dim
    (a 0) that the 3-d form moves.
"""

from __future__ import annotations

import itertools
from typing import Optional, Union

import numpy as np

from pyonnxopt.fusion.pattern import Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule, reshape_attrs
from pyonnxopt.fusion.rules.fuse_attention import (SPLIT, _heads, _merge, _split, guard_inputs, guard_reason, nan_guard,
                                                    past_reason)
from pyonnxopt.fusion.values import attr_or_input, dims, same_dim


class FuseAttentionHeads(Rule):
    name = "fuse_attention_heads"
    description = "Attention on heads split and merged around it (opset 23, 4-d) -> Attention on the 3-d tensors"
    min_opset = 23

    def pattern(self, opset: int) -> list:
        forms = {"split": _heads, "moved": _moved, "single": _single}

        def variant(masked: bool, past: bool, q_moved: bool, k_form: str, v_form: str, guarded: bool) -> Op:
            k, v = forms[k_form]("k"), forms[v_form]("v")
            if past:  # the present keys and values are graph outputs too: not exclusive
                k = Op("Concat", Var("past_k"), k, name="k_present", exclusive=False)
                v = Op("Concat", Var("past_v"), v, name="v_present", exclusive=False)
            inputs = [_moved("q") if q_moved else _heads("q"), k, v] + ([Var("mask")] if masked else [])
            y = Op("Attention", *inputs, name="attention")
            if guarded:  # the NaN guard fuse_attention keeps after the op it made
                y = nan_guard(y)
            return Op("Reshape", Op("Transpose", y, name="context_t", attrs={"perm": SPLIT}), Var("out_shape"),
                      name="merge_heads")

        # A head split's Reshape first: a moved q or k takes any 4-d value,
        # and a single head (last) any value at all.
        kv_forms = list(itertools.product(("split", "moved"), repeat=2))
        return [variant(masked, past, q_moved, k_form, v_form, guarded)
                for (k_form, v_form), q_moved, past, masked, guarded
                in itertools.product(kv_forms, *[(False, True)] * 4)] + \
               [variant(masked, False, q_moved, "single", "single", guarded)
                for q_moved, masked, guarded in itertools.product((False, True), repeat=3)]

    def check(self, m: Match) -> Optional[str]:
        why = guard_reason(m)
        if why:
            return why
        heads = _heads_of(m)
        return heads if isinstance(heads, str) else None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        hq, hkv = _heads_of(m)
        attention = m["attention"]
        inputs = _unsqueezed_split(m, edit) or [_flat(m, edit, n) for n in ("q", "k", "v")]
        inputs += [m["mask"]] if "mask" in m else []
        heads = {"q_num_heads": hq, "kv_num_heads": hkv}
        exact = _merge(m, _part(m, "q"), _part(m, "v")) == "exact"
        if "past_k" not in m and exact and "guarded" not in m:
            edit.replace_root("Attention", inputs, heads, copy_attrs_from=attention)
            return None
        if "past_k" in m:  # the cache goes in, and the present keys and values come out of the op
            inputs += [None] * (4 - len(inputs)) + [m["past_k"], m["past_v"]]
        made_outputs = edit.node("Attention", inputs, hint=f"{attention.name}_3d", outputs=3 if "past_k" in m else 1)
        made = edit.added[-1]
        made.copy_attributes(attention)
        for name, value in heads.items():
            made.set_attribute(name, value)
        if "past_k" in m:
            edit.replace_value(m["k_present"].outputs[0], made_outputs[1])
            edit.replace_value(m["v_present"].outputs[0], made_outputs[2])
        y = made_outputs[0]
        if "guarded" in m:  # elementwise: the same on the 3-d output
            (y,) = edit.node("Where", guard_inputs(m, edit, y), hint=f"{y.name}_guarded")
        if exact:
            edit.replace_value(m.root.outputs[0], y)
        else:
            edit.replace_root("Reshape", [y, m["out_shape"]], reshape_attrs(m.root.attributes.get("allowzero", 0)))
        return None


def _heads_of(m: Match) -> Union[tuple, str]:
    """(Hq, Hkv) once the splits, the Attention and the merge fit, else why not."""
    parts = [_part(m, n) for n in ("q", "k", "v")]
    for p in parts:
        if isinstance(p, str):
            return p
    q, k, v = parts
    if not (same_dim(q[0], k[0]) and same_dim(q[0], v[0]) and k[2] == v[2] and same_dim(k[1], v[1])):
        return f"q {list(q)}, k {list(k)}, v {list(v)} do not provably share batch (and k, v heads and length)"
    if q[2] % k[2]:
        return f"{q[2]} query heads are not a multiple of {k[2]} key/value heads"
    if "past_k" in m:
        why = past_reason(m, k, v)
        if why:
            return why
    if _merge(m, q, v) is None:
        return ("the head merge's result is not [B, S, H*Dv] and its shape may have a 0 (copy a dim) past its "
                "second entry")
    return q[2], k[2]


def _single(name: str) -> Var:
    """A [B, 1, T, D] key or value: one head, already first."""
    return Var(f"{name}1")


def _moved(name: str) -> Op:
    """Transpose(x, [0, 2, 1, 3]) of a 4-d x other than a head split's Reshape."""
    return Op("Transpose", Var(f"{name}4"), name=f"{name}_heads", attrs={"perm": SPLIT})


def _part(m: Match, name: str) -> Union[tuple, str]:
    """(B, S, H, D) of q, k or v: its head split's, a moved one's x, or a
    single head's."""
    if f"{name}1" in m:
        x = dims(m[f"{name}1"])
        if x is None or len(x) != 4 or x[1] != 1 or not isinstance(x[3], int):
            return f"the single-head {name} {x} is not [B, 1, T, D] with D known"
        return x[0], x[2], 1, x[3]
    if f"{name}4" not in m:
        return _split_leading_one(m, name) or _split(m, name)
    x = dims(m[f"{name}4"])
    if x is None or len(x) != 4 or not isinstance(x[2], int) or not isinstance(x[3], int):
        return f"the {name} heads {x} moved before the Attention are not [B, S, H, D] with H and D known"
    return tuple(x)


def _split_leading_one(m: Match, name: str) -> Optional[tuple]:
    """(B, S, H, D) when the head split reads [B, 1, S, H*D]."""
    if f"{name}3" not in m or "qkv3" in m:
        return None
    flat, split = dims(m[f"{name}3"]), dims(m[f"{name}_split"].outputs[0])
    if flat is None or split is None or len(flat) != 4 or flat[1] != 1 or len(split) != 4:
        return None
    if not (same_dim(flat[0], split[0]) and same_dim(flat[2], split[1]) and isinstance(flat[3], int)
            and isinstance(split[2], int) and isinstance(split[3], int) and split[2] * split[3] == flat[3]):
        return None
    return tuple(split)


def _unsqueezed_split(m: Match, edit: Edit) -> Optional[list]:
    """q, k and v as one Split of x along its last axis, where they are the
    three outputs of Split(Unsqueeze(x, [1]), axis=3) (GPTBigCode)."""
    values = [m[n] if n in m else None for n in ("q3", "k1", "v1")]
    split = values[0].producer if values[0] is not None else None
    if split is None or any(v is None or v.producer != split for v in values) or split.op_type != "Split" \
            or split.domain:
        return None
    unsqueeze = split.inputs[0].producer
    if unsqueeze is None or unsqueeze.op_type != "Unsqueeze" or unsqueeze.domain \
            or attr_or_input(unsqueeze, "axes", 1) != [1] or split.attributes.get("axis", 0) not in (3, -1):
        return None
    attrs = {k: v for k, v in split.attributes.items() if k == "num_outputs"}
    outputs = edit.node("Split", [unsqueeze.inputs[0], *split.inputs[1:]], {"axis": -1, **attrs},
                        outputs=len(split.outputs), hint=f"{split.name}_3d")
    return [outputs[list(split.outputs).index(v)] for v in values]


def _flat(m: Match, edit: Edit, name: str):
    """The 3-d tensor the Attention takes for q, k or v."""
    if f"{name}1" in m or (f"{name}3" in m and len(dims(m[f"{name}3"]) or []) == 4):
        return edit.squeeze("Squeeze", m[f"{name}1" if f"{name}1" in m else f"{name}3"], [1], hint=f"{name}_3d")
    if f"{name}4" not in m:
        return m[f"{name}3"]
    _, _, h, d = _part(m, name)
    shape = edit.constant(np.array([0, 0, h * d], np.int64), f"{name}_3d_shape")
    (flat,) = edit.node("Reshape", [m[f"{name}4"], shape], hint=f"{m[f'{name}4'].name}_3d")
    return flat
