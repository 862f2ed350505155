"""fuse_attention: scaled dot-product attention written out -> Attention (opset 23),
or (--target ort, below opset 23) com.microsoft MultiHeadAttention.

    s = MatMul(q, Transpose(k, [0,1,3,2]))      q, k, v: [B, H, S|T, D]
    s = Mul(s, c) | Div(s, c)                    (or q and K^T each times sqrt(c))
    s = Add(s, mask)                             (optional, additive; or a Where, below)
    p = Softmax(s, axis=-1)
    p = Where(IsNaN(p), 0, p)                    (optional: torch's SDPA export)
    y = MatMul(p, v)
->  y = Attention(q, k, v, mask, scale=c)

Layouts:
 4-D  q, k, v already [B, H, S, D]; K^T may also come as Transpose(k', [0,2,3,1])
      of a [B, T, H, D] k' (HF BERT/GPT-2 merge the two transposes): K is then
      Transpose(k', [0,2,1,3]), a node made here.
 3-D  the heads are split and merged around it, as torch's MultiheadAttention
      and HF models do:  q = Transpose(Reshape(q3, [B,S,H,D]), [0,2,1,3]) (k, v alike,
      K^T through [0,2,3,1]) and  out = Reshape(Transpose(y, [0,2,1,3]), [B,S,H*Dv]):
      the whole becomes Attention(q3, k3, v3, mask, q_num_heads=H, kv_num_heads=H)
      on the [B, S, H*D] tensors (followed by the merge's Reshape when that
      flattens further, as GPT-2's [B*S, H*Dv]).
 seq-first  torch.nn.MultiheadAttention (ViT, DETR, CLIP) keeps [S, B, E] and
      splits heads through the batch: q = Reshape(Transpose(Reshape(qs,
      [S, B*H, D]), [1,0,2]), [B, H, S, D]) (k, v alike; K^T then Transpose(k,
      [0,1,3,2])), out = Reshape(Transpose(y, [2,0,1,3]), ...) from [S, B, H, Dv].
      It becomes Attention(Transpose(qs, [1,0,2]), ...) and the merge's Reshape
      of Transpose(Attention, [1,0,2]): with B = 1 those Transposes move only a
      size-1 axis, and optimize_transposes makes them Reshapes. With B = 1
      optimize_transposes may have pushed the [S, B, E] Transpose into the
      fold already (qs [1, S, E] -> [S, H, D]): such a qs is taken as it is.
 one head  the 3-D form with a head axis of 1, which moves no element: the
      exporter (torch's dynamo) or optimize_transposes wrote its Transposes
      as Reshapes (SegFormer's first stage): q = Reshape(q3, [B,1,S,D]) (v
      alike), K^T = Reshape(Transpose(k3, [0,2,1]), [B,1,D,T]), out =
      Reshape(y, ...); it becomes Attention(q3, k3, v3, q_num_heads=1, ...).
 packed  one projection holds q, k and v (Swin, timm): each is Gather(Transpose(
      Reshape(qkv3, [B, S, 3, H, D]), [2,0,3,1,4]), i), or the three are
      Squeeze(Split(that, axis 0)); it becomes the 3-d form on Split(qkv3)
      along the last axis.

Scaling: s * c, s / c, q and K^T each times sqrt(c), or q alone times c
(Swin), or K^T alone (the q side scaled before a Reshape the match does
not see: that Mul stays). Masks: none, one, or two added one after the other (Swin's position
bias, then in shifted blocks the windows' mask): their sum, one Add.

A boolean mask may select instead of add: Where(keep, s, fill) (Flax,
hand-written JAX) or Where(drop, fill, s) (torch's masked_fill(mask, -1e9),
as custom models write it), with fill a constant of at most -10000. It
becomes the additive mask Where(keep, 0, L) (a constant where keep is one),
L the type's lowest value (or -inf where fill is -inf). A masked score's
weight is 0 either way (e^-10000 is 0 in every float type), and a query
whose keys are all masked spreads evenly over them in both: the original's
scores are all fill, the fused op's s + L all round to L.
Such a Where may also come with an added mask: after it (GPT-Neo's causal
Where, then the padding mask) or before it (MPT's ALiBi bias, then the
mask). Both become one additive mask (see _additive) when fill is -inf or
L, the value the exporters write (torch.finfo(dtype).min).

Which op:
 - the opset-23 Attention for --target onnx, and for --target ort at opset 23
   and later (onnxruntime 1.32 runs it on CPU, 1.1x-1.25x faster than
   MultiHeadAttention: targets.py);
 - --target ort below opset 23, 3-D or seq-first layout: com.microsoft MultiHeadAttention
   (q3, k3, v3, bias="", key_padding_mask="", attention_bias=mask,
   num_heads=H, scale=c), output [B, S, H*Dv]. Its attention_bias must be
   4-d [B|1, H|1, S, T] (onnxruntime neither broadcasts over S nor takes a
   lower rank), so a 2-d/3-d mask or a [.., 1, T] one goes through an Expand.
   In the 4-D layout (rotary embeddings leave q and k 4-d: LLaMA) its keys
   and values stay [B, H, T, D], which it takes as they are; the query goes
   in as Reshape(Transpose(q, [0,2,1,3]), [0, 0, H*D]), and the output back
   to [B, H, S, Dv] the same way (a head merge after it then cancels that).

The NaN guard (torch zeroes the probabilities of a fully masked row, whose
Softmax is NaN) becomes Where(IsNaN(y), 0, y) on the fused output: a row's
probabilities are all NaN or none, and a NaN row gives a NaN output row in
both ops (MultiHeadAttention; onnxruntime's Attention gives 0 there already),
which the guard zeroes as the original's 0 probabilities would. (Only a NaN
or inf in v itself reads differently: the original's 0 * NaN is NaN.)

The mask must be what the kernel accepts (onnxruntime's Attention does not
broadcast over query positions, and a 3-d mask is [H, S, T]): rank 2 to 4,
[..., S, T] with its other dims 1 or equal to H (and B). A mask [B, 1, 1, T]
(a padding mask) is expanded over S first: to a constant shape when S is
known, else to one read from q's shape at run time (S a symbol).

Past keys (GPT-2 with a cache): K = Concat(past_k, heads(k3)) and V =
Concat(past_v, heads(v3)) along the sequence, each also a graph output
(the present keys and values). The 3-d layout then becomes
Attention(q3, k3, v3, mask, past_k, past_v), or (--target ort below opset
23) MultiHeadAttention(q3, k3, v3, "", "", mask, past_k, past_v), whose
second and third outputs are those Concats'. (Its unidirectional=1 is not
used: it is not causal when S < T on CPU; the exporters add the causal mask.)

Refuses when:
 1. the opset is below 23 and the target is onnx; MultiHeadAttention on
    4-d heads whose count or sizes are not known ints, whose keys and
    values differ in head size, or with one key/value head for several
    query heads;
 2. the Softmax is not over the last axis; a scale is not a scalar constant
    (or is 0, which MultiHeadAttention reads as 1/sqrt(D)); the NaN guard's
    value is not a scalar 0;
 3. q, k, v cannot be shown to share batch and heads (MatMul's broadcasting
    is not Attention's; but 4-d keys and values of one head, as Falcon's,
    broadcast over q's heads as Attention's grouped heads do), or a Reshape
    does more than split/merge the last dim;
 4. the mask's shape is unknown or does not fit (see above), or it needs
    expanding over an S that is neither an int nor a symbol of q's dims, or
    expanding at all below opset 8 (Expand; 10 with a symbolic S); a
    Where's condition is not boolean, or its fill is above -10000 (or,
    with a mask added beside it, neither -inf nor the type's lowest value);
 5. onnxruntime's CPU provider has no kernel for the element type
    (MultiHeadAttention: float and float16 only).
"""

from __future__ import annotations

import itertools
from typing import Optional, Union

import numpy as np
from onnx import helper

from pyonnxopt.fusion import Const, Op, Rule, Var
from pyonnxopt.fusion.rule import Edit, Match, reshape_attrs
from pyonnxopt.fusion.targets import MS_DOMAIN, dtype_reason, import_ms_domain, opset_reason
from pyonnxopt.fusion.values import constant_ints, dims, same_dim, scalar_of
from pyonnxopt.symbolic_shapes import broadcast

SPLIT = [0, 2, 1, 3]  # [B, S, H, D] <-> [B, H, S, D]


def _heads(name: str) -> Op:
    """[B, S, H*D] -> Reshape [B, S, H, D] -> Transpose [B, H, S, D]."""
    split = Op("Reshape", Var(f"{name}3"), Var(f"{name}_shape"), name=f"{name}_split")
    return Op("Transpose", split, name=f"{name}_heads", attrs={"perm": SPLIT})


def _heads_seq_first(name: str) -> Op:
    """[S, B, E] -> [S, B*H, D] -> [B*H, S, D] -> [B, H, S, D]."""
    folded = Op("Reshape", Var(f"{name}s"), Var(f"{name}_fold_shape"), name=f"{name}_fold")
    batch_first = Op("Transpose", folded, name=f"{name}_batch_first", attrs={"perm": [1, 0, 2]})
    return Op("Reshape", batch_first, Var(f"{name}_shape"), name=f"{name}_split")


def _packed(unbind: bool) -> tuple:
    """q, k, v out of one packed projection, Transpose(Reshape(qkv3, [B, S,
    3, H, D]), [2, 0, 3, 1, 4]): taken by Gather(., i) (torchvision's Swin,
    qkv[0]) or by one Split along axis 0 and a Squeeze of each part (timm,
    qkv.unbind(0)); the three parts are then the same Split's outputs."""
    split = Op("Reshape", Var("qkv3"), Var("qkv_shape"), name="qkv_split")
    heads = Op("Transpose", split, name="qkv_heads", attrs={"perm": [2, 0, 3, 1, 4]})
    if not unbind:
        return tuple(Op("Gather", heads, Const(f"{n}_index", scalar=True), name=f"{n}_pick", attrs={"axis": 0})
                     for n in ("q", "k", "v"))
    sizes = Var("qkv_sizes", optional=True)
    parts = [Op("Split", heads, sizes, name=f"{n}_part", output=i, attrs={"axis": 0}) for i, n in enumerate("qkv")]
    return tuple(Op("Squeeze", part, Var(f"{n}_axes", optional=True), name=f"{n}_pick")
                 for part, n in zip(parts, "qkv"))


# The masks on the scores, in order: none, one added, two added (Swin: the
# position bias, then the shifted windows' mask), a Where that keeps or
# drops, a Where and then an added mask (GPT-Neo: its causal Where, then the
# padding mask), an added bias and then a Where (MPT: ALiBi, then the mask).
MASKS = ("add+add", "add", "keep", "drop", "keep+add", "drop+add", "add+keep", "add+drop", "")


def _masked(s: Op, mask: str) -> Op:
    """The scores `s` through the masks `mask` names (one of MASKS)."""
    adds = 0
    for i, step in enumerate(mask.split("+") if mask else []):
        name = "masked2" if i else "masked"
        if step == "keep":
            s = Op("Where", Var("keep"), s, Const("fill", scalar=True), name=name)
        elif step == "drop":
            s = Op("Where", Var("drop"), Const("fill", scalar=True), s, name=name)
        else:
            adds += 1
            s = Op("Add", s, Var("mask2" if adds == 2 else "mask"), name=name, commutative=True)
    return s


def _variant(layout: str, scale: str, mask: str, guard: bool, softcap: bool = False) -> Op:
    if layout in ("packed", "packed_unbind"):
        q, k, v = _packed(layout == "packed_unbind")
        k_t = Op("Transpose", k, name="k_t", attrs={"perm": [0, 1, 3, 2]})
    elif layout == "seq_first":
        q, v = _heads_seq_first("q"), _heads_seq_first("v")
        k_t = Op("Transpose", _heads_seq_first("k"), name="k_t", attrs={"perm": [0, 1, 3, 2]})
    elif layout == "3d":
        q, v = _heads("q"), _heads("v")
        k_t = Op("Transpose", Op("Reshape", Var("k3"), Var("k_shape"), name="k_split"), name="k_t",
                 attrs={"perm": [0, 2, 3, 1]})
    elif layout == "3d_one_head":
        # One head: a size-1 head axis moves no element, so the exporter (or
        # optimize_transposes) wrote the split's Transposes as Reshapes.
        q, v = (Op("Reshape", Var(f"{n}3"), Var(f"{n}_shape"), name=f"{n}_split") for n in ("q", "v"))
        k_rows = Op("Transpose", Var("k3"), name="k_rows_t", attrs={"perm": [0, 2, 1]})
        k_t = Op("Reshape", k_rows, Var("k_shape"), name="k_split")
    elif layout == "3d_heads_t":  # K's heads, then K^T: before optimize_transposes merges the two
        q, v = _heads("q"), _heads("v")
        k_t = Op("Transpose", _heads("k"), name="k_t", attrs={"perm": [0, 1, 3, 2]})
    elif layout == "3d_past":
        # The present keys and values are graph outputs too: not exclusive.
        q = _heads("q")
        k = Op("Concat", Var("past_k"), _heads("k"), name="k_present", exclusive=False)
        v = Op("Concat", Var("past_v"), _heads("v"), name="v_present", exclusive=False)
        k_t = Op("Transpose", k, name="k_t", attrs={"perm": [0, 1, 3, 2]})
    else:
        q, v = Var("q"), Var("v")
        k, perm = {"bhsd": ("k", [0, 1, 3, 2]), "bshd_k": ("k_bshd", [0, 2, 3, 1]),
                   "unit_k": ("k_unit", [1, 0, 3, 2])}[layout]
        k_t = Op("Transpose", Var(k), name="k_t", attrs={"perm": perm})
    if scale in ("both", "q"):  # "q": Swin scales the queries alone
        q = Op("Mul", q, Const("scale_q"), name="q_scaled", commutative=True)
    if scale in ("both", "k"):  # "k": q's share applied before a Reshape (diffusers' single-head VAE attention)
        k_t = Op("Mul", k_t, Const("scale_k"), name="k_scaled", commutative=True)
    s = Op("MatMul", q, k_t, name="scores")
    if scale == "mul":
        s = Op("Mul", s, Const("scale"), name="scaled", commutative=True)
    elif scale == "div":
        s = Op("Div", s, Const("scale"), name="scaled")
    if softcap:  # Gemma 2: c * tanh(s / c), before the mask as Attention's softcap
        s = Op("Div", s, Const("cap_in"), name="capped_in")
        s = Op("Mul", Op("Tanh", s, name="capped"), Const("cap_out"), name="softcapped", commutative=True)
    p = Op("Softmax", _masked(s, mask), name="probs")
    if guard:
        p = nan_guard(p)
    y = Op("MatMul", p, v, name="context")
    if layout == "3d_one_head":
        y = Op("Reshape", y, Var("out_shape"), name="merge_heads")
    elif layout in ("3d", "3d_heads_t", "3d_past", "packed", "packed_unbind"):
        y = Op("Reshape", Op("Transpose", y, name="context_t", attrs={"perm": SPLIT}), Var("out_shape"),
               name="merge_heads")
    elif layout == "seq_first":
        y = Op("Reshape", Op("Transpose", y, name="context_t", attrs={"perm": [2, 0, 1, 3]}), Var("out_shape"),
               name="merge_heads")
    return y


class FuseAttention(Rule):
    name = "fuse_attention"
    description = ("MatMul(Q, K^T) [* scale] [+ mask] -> Softmax -> MatMul(V) -> Attention (opset 23), 4-d, 3-d or "
                   "sequence-first heads; com.microsoft MultiHeadAttention (--target ort, 3-d, below opset 23)")

    def pattern(self, opset: int) -> list:
        # The 3-d and sequence-first layouts first: they take the head split and merge along.
        # A Where beside an added mask only where the decoders that write it split their heads.
        return [_variant(layout, scale, mask, guard) for layout, mask, scale, guard in itertools.product(
            ("3d_past", "3d", "3d_heads_t", "3d_one_head", "packed", "packed_unbind", "seq_first", "bhsd", "bshd_k",
             "unit_k"),
            MASKS,
            ("mul", "div", "both", "q", "k", "none"), (True, False))
            if "+" not in mask or mask == "add+add" or layout in ("3d_past", "3d", "3d_heads_t", "bhsd")] + [
            _variant("bhsd", scale, mask, guard, softcap=True)  # Gemma 2's heads are 4-d (rotary)
            for mask, scale, guard in itertools.product(("add", ""), ("mul", "div", "none"), (True, False))]

    def check(self, m: Match) -> Optional[str]:
        op = _emitted(m)
        if op == "Attention":
            why = opset_reason("Attention", m.opset)
            if why:
                return why
        axis = m["probs"].attributes.get("axis", -1)
        if axis != -1 and axis != len(dims(m["probs"].inputs[0]) or []) - 1:
            return f"the Softmax is over axis {axis}, not the last"
        scale = _scale(m)
        if isinstance(scale, str):
            return scale
        if scale == 0 and op == "MultiHeadAttention":
            return "the scale is 0, which MultiHeadAttention reads as 1/sqrt(head size)"
        cap = _softcap(m)
        if isinstance(cap, str):
            return cap
        if cap and op == "MultiHeadAttention":
            return "MultiHeadAttention has no softcap (c * tanh(scores / c))"
        why = guard_reason(m)
        if why:
            return why
        bhst = _layout(m)
        if isinstance(bhst, str):
            return bhst
        if op == "MultiHeadAttention" and not _three_d(m):
            q, v = dims(m["q"]), dims(m["v"])
            if not (isinstance(bhst[1], int) and isinstance(q[3], int) and isinstance(v[3], int)):
                return f"MultiHeadAttention on 4-d heads needs their count and sizes known (q {q}, v {v})"
            if v[1] != bhst[1]:  # Falcon's one key/value head, which MatMul broadcasts
                return f"MultiHeadAttention takes as many key/value heads as query heads ({v[1]}, not {bhst[1]})"
        if _has_mask(m):
            why = _mask_reason(_mask_dims(m), bhst, _query_count(m, bhst[2]) is not None)
            if why:
                return why
            why = _where_reason(m) if "fill" in m else None
            if why:
                return why
            if any(m.dtype(name) != _dtype(m) for name in ("fill", "mask", "mask2") if name in m):
                return "the mask's element type is not the inputs'"
            to = _mask_target(m, op, bhst[2])
            needs = 8 if to is None or all(isinstance(d, int) for d in to) else 10  # Slice of a Shape
            if to is not None and m.opset < needs:
                return f"the mask needs an Expand (to {to}), which needs opset {needs}"
        return dtype_reason(MS_DOMAIN if op == "MultiHeadAttention" else "", op, _dtype(m))

    def emits_ort_op(self, m: Match) -> bool:
        return _emitted(m) == "MultiHeadAttention"

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        b, h, s, t = _layout(m)
        op = _emitted(m)
        attrs = {"scale": float(_scale(m))}
        cap = _softcap(m)
        if cap:
            attrs["softcap"] = cap
        if "qs" in m:
            inputs = _batch_first(m, edit)
        elif "qkv3" in m:
            inputs = _unpacked(m, edit)
        elif "q3" in m:
            inputs = [m["q3"], m["k3"], m["v3"]]
        elif "k_bshd" in m:
            (k,) = edit.node("Transpose", [m["k_bshd"]], {"perm": SPLIT}, hint=f"{m['k_bshd'].name}_bhsd")
            inputs = [m["q"], k, m["v"]]
        elif "k_unit" in m:
            inputs = [m["q"], _unit_swapped(m, edit), m["v"]]
        else:
            inputs = [m["q"], m["k"], m["v"]]
        four_d = op == "MultiHeadAttention" and not _three_d(m)
        if four_d:  # its query is [B, S, H*D]; keys and values may stay [B, H, T, D]
            # of one shape; LeViT's values are wider than its keys: then all go
            # in 3-d (their Transposes meet the head split's and cancel).
            key_size, value_size = dims(m["q"])[3], dims(m["v"])[3]
            head_sizes = [key_size] if value_size == key_size else [key_size, key_size, value_size]
            for i, d in enumerate(head_sizes):  # q, or q, k and v
                (x,) = edit.node("Transpose", [inputs[i]], {"perm": SPLIT}, hint=f"{inputs[i].name}_bshd")
                width = edit.constant(np.array([0, 0, h * d], np.int64), "heads_width")
                (inputs[i],) = edit.node("Reshape", [x, width], hint=f"{inputs[i].name}_3d")
        if op == "MultiHeadAttention":
            attrs.update(num_heads=h)
        elif _three_d(m):  # 3-d inputs: the heads are the op's to split
            attrs.update(q_num_heads=h, kv_num_heads=h)
        if _has_mask(m):
            to = _mask_target(m, op, s)
            if "fill" in m:
                mask = _additive(m, edit, op)
            else:
                mask = m["mask"]
                if "mask2" in m:
                    (mask,) = edit.node("Add", [mask, m["mask2"]], hint=f"{mask.name}_masks")
                if op == "Attention" and not _sum_above_lowest(m):
                    mask = _without_lowest(m, edit, mask)
            if to is not None:
                (mask,) = edit.node("Expand", [mask, _expand_shape(m, edit, to)], hint=f"{mask.name}_expanded")
            if op == "MultiHeadAttention":
                inputs += [None, None]  # bias, key_padding_mask
            inputs.append(mask)
        domain = MS_DOMAIN if op == "MultiHeadAttention" else ""
        if domain:
            import_ms_domain(m.model)
        # The fused op, then the NaN guard on its output, then the merge's
        # Reshape when it flattens further: the last of these computes the
        # root's output (`last` is a value once made, else the node to make).
        last = (op, inputs, attrs, domain)
        if "past_k" in m:  # it also returns the present keys and values, the Concats' outputs
            slots = 6 if op == "MultiHeadAttention" else 4  # the past after bias, key_padding_mask, attention_bias
            inputs += [None] * (slots - len(inputs)) + [m["past_k"], m["past_v"]]
            last, present_k, present_v = edit.node(op, inputs, attrs, domain=domain, outputs=3)
            _take_over_presents(edit, [(m["k_present"].outputs[0], present_k), (m["v_present"].outputs[0], present_v)],
                                inputs, set(m.nodes))
            if domain == MS_DOMAIN:
                _state_output_type(m, edit, last, b, s, h)

        def made(step):
            if not isinstance(step, tuple):
                return step
            y = edit.node(step[0], step[1], step[2], domain=step[3])[0]
            if step[3] == MS_DOMAIN:  # onnx's inference does not know it: the rules after this one read its type
                _state_output_type(m, edit, y, b, s, h)
            return y

        if "nan_zero" in m:
            last = ("Where", guard_inputs(m, edit, made(last)), None, "")
        if four_d:  # back to [B, H, S, Dv] (the merge after it, if any, cancels this)
            heads = edit.constant(np.array([0, 0, h, dims(m["v"])[3]], np.int64), "output_heads")
            (y,) = edit.node("Reshape", [made(last), heads], hint="output_heads")
            last = ("Transpose", [y], {"perm": SPLIT}, "")
        if ("q3" in m or "qkv3" in m) and _merge(m, _split(m, "q"), _split(m, "v")) == "reshape":
            last = ("Reshape", [made(last), m["out_shape"]], reshape_attrs(m.root.attributes.get("allowzero", 0)), "")
        if "qs" in m:  # back to sequence-first, in the memory order the merge's Reshape read
            y = made(last)
            (y,) = edit.node("Transpose", [y], {"perm": [1, 0, 2]}, hint=f"{y.name}_seq_first")
            last = ("Reshape", [y, m["out_shape"]], reshape_attrs(m.root.attributes.get("allowzero", 0)), "")
        if isinstance(last, tuple):
            edit.replace_root(last[0], last[1], last[2], domain=last[3])
        else:
            edit.replace_value(m.root.outputs[0], last)
        return None


def nan_guard(p: Op) -> Op:
    """torch's NaN guard Where(IsNaN(p), 0, p): on the probabilities here,
    on the Attention made of them in fuse_attention_heads."""
    return Op("Where", Op("IsNaN", p, name="nan"), Const("nan_zero"), p, name="guarded")


def guard_reason(m: Match) -> Optional[str]:
    """Why the matched guard is not one that zeroes NaN, or None."""
    if "nan_zero" in m and not (scalar_of(m.array("nan_zero")) == 0 and m.array("nan_zero").ndim <= 4):
        return f"the NaN guard's '{m['nan_zero'].name}' is not a scalar 0"
    return None


def guard_inputs(m: Match, edit: Edit, y) -> list:
    """The Where that guards `y`: IsNaN(y), a 0-d zero (the guard's own may
    be [1, 1, 1, 1], which would broadcast y to 4-d), y."""
    (nan,) = edit.node("IsNaN", [y], hint=f"{y.name}_isnan")
    return [nan, edit.constant(np.zeros((), m.array("nan_zero").dtype), "nan_zero"), y]


def _state_output_type(m: Match, edit: Edit, y, b, s, h) -> None:
    """MultiHeadAttention's output [B, S, H*Dv], stated."""
    v = _split_seq_first(m, "v") if "qs" in m else _split(m, "v") if _three_d(m) else dims(m["v"])
    if isinstance(v, str) or v is None:
        return
    width = h * v[3] if isinstance(v[3], int) and isinstance(h, int) else None
    dims_ = [d if isinstance(d, (int, str)) else None for d in (b, s, width)]
    edit.graph.set_value_type(y, helper.make_tensor_type_proto(_dtype(m), dims_).SerializeToString())


def _float_dtype(m: Match):
    """The mask's numpy float type, or None (not a float the kernels take)."""
    code = m.dtype("fill" if "fill" in m else "mask")
    return np.dtype(helper.tensor_dtype_to_np_dtype(code)).type if code in (1, 10, 11) else None  # float, half, double


def _sum_above_lowest(m: Match) -> bool:
    """Both masks constant and too small to add up to the type's lowest
    value (Swin's position bias and window mask)."""
    dtype = _float_dtype(m)
    parts = [m["mask"], m["mask2"]] if "mask2" in m else []
    if dtype is None or not parts or not all(v.initializer is not None and not v.is_graph_input for v in parts):
        return False
    bound = sum(float(np.max(np.abs(v.initializer.numpy()), initial=0.0)) for v in parts)
    return bool(np.isfinite(bound)) and bound < float(np.finfo(dtype).max) / 2


def _without_lowest(m: Match, edit: Edit, mask):
    """The mask with its type's lowest value (torch's finfo.min) one step
    up. onnxruntime 1.32's Attention reads that value as -inf, and gives 0
    for a query whose keys are all masked so, where the original Softmax
    spreads evenly over them (-inf itself stays: there the original's NaN,
    or 0 behind torch's guard, is what the op gives). Nothing else moves:
    a masked score's weight is 0 either way. A constant mask is rewritten
    as a constant, a Where of constants (torch's Where(keep, 0, finfo.min))
    made again with them; other masks go through Where(Equal(mask,
    lowest), next, mask)."""
    dtype = _float_dtype(m)
    if dtype is None:
        return mask
    lowest = np.finfo(dtype).min
    up = np.nextafter(lowest, dtype(0))
    if mask.initializer is not None and not mask.is_graph_input:
        array = mask.initializer.numpy()
        return mask if not (array == lowest).any() else edit.constant(np.where(array == lowest, up, array),
                                                                       f"{mask.name}_above_lowest")
    p = mask.producer
    if p is not None and p.op_type == "Where" and not p.domain and all(
            v is not None and v.initializer is not None and not v.is_graph_input for v in p.inputs[1:]):
        branches = [v.initializer.numpy() for v in p.inputs[1:]]
        if not any((b == lowest).any() for b in branches):
            return mask
        moved = [edit.constant(np.where(b == lowest, up, b).astype(b.dtype), f"{v.name}_above_lowest")
                 for b, v in zip(branches, p.inputs[1:])]
        return edit.node("Where", [p.inputs[0], *moved], hint=f"{mask.name}_above_lowest")[0]
    (is_lowest,) = edit.node("Equal", [mask, edit.constant(np.array(lowest, dtype), "mask_lowest")],
                             hint=f"{mask.name}_is_lowest")
    (mask,) = edit.node("Where", [is_lowest, edit.constant(np.array(up, dtype), "mask_above_lowest"), mask],
                        hint=f"{mask.name}_above_lowest")
    return mask


def _unpacked(m: Match, edit: Edit) -> list:
    """q, k, v as [B, S, E]: the packed projection split along its last axis
    ([.., 3, H, D] there: each E = H*D block in turn)."""
    _, _, h, d = _split(m, "q")
    sizes = np.array([h * d] * 3, np.int64)
    split = ([m["qkv3"], edit.constant(sizes, "qkv_sizes")], {"axis": 2}) if m.opset >= 13 else \
        ([m["qkv3"]], {"axis": 2, "split": sizes.tolist()})
    parts = edit.node("Split", split[0], split[1], outputs=3, hint=f"{m['qkv3'].name}_split")
    return [parts[_pick(m, name)] for name in ("q", "k", "v")]


def _pick(m: Match, name: str) -> int:
    """Which third of the packed projection `name` is."""
    if f"{name}_index" in m:
        return int(scalar_of(m.array(f"{name}_index"))) % 3
    return "qkv".index(name)  # the unbind's Split outputs, in order


def _unbind_reason(m: Match) -> Optional[str]:
    """None when q, k, v are one Split's three outputs along axis 0, in equal
    parts, each squeezed on axis 0."""
    split = m["q_part"]
    if not (split == m["k_part"] == m["v_part"]) or len(split.outputs) != 3:
        return "q, k and v are not one Split's three parts"
    if "qkv_sizes" in m and m["qkv_sizes"] is not None:
        sizes = m["qkv_sizes"].initializer
        if sizes is None or sizes.numpy().reshape(-1).tolist() != [1, 1, 1]:
            return "the packed projection's Split is not into three equal parts"
    for n in ("q", "k", "v"):
        squeeze = m[f"{n}_pick"]
        axes = squeeze.attributes.get("axes")
        if axes is None and f"{n}_axes" in m and m[f"{n}_axes"] is not None:
            init = m[f"{n}_axes"].initializer
            axes = None if init is None else init.numpy().reshape(-1).tolist()
        if axes not in ([0], [-5]):
            return f"{n}'s Squeeze does not drop exactly the parts' axis"
    return None


def _batch_first(m: Match, edit: Edit) -> list:
    """q, k, v as [B, S, E]: each sequence-first input transposed once
    (self-attention often reads one value three times)."""
    made = {}
    for name in ("qs", "ks", "vs"):
        v = m[name]
        if v not in made:
            made[v] = v if _batch_first_batch_1(m, name[0]) else \
                edit.node("Transpose", [v], {"perm": [1, 0, 2]}, hint=f"{v.name}_batch_first")[0]
    return [made[m[name]] for name in ("qs", "ks", "vs")]


def _batch_first_batch_1(m: Match, name: str) -> bool:
    """name's input is [1, S, E] folded to [S, H, D]: batch-first with batch
    1, where optimize_transposes pushed the [S, 1, E] Transpose into the fold."""
    flat, folded = dims(m[f"{name}s"]), dims(m[f"{name}_fold"].outputs[0])
    return (flat is not None and folded is not None and len(flat) == 3 and flat[0] == 1 and flat[1] != 1
            and same_dim(folded[0], flat[1]))


def _emitted(m: Match) -> str:
    """The op this match becomes: Attention (opset 23), unless --target ort
    finds no Attention in the model's opset: then MultiHeadAttention."""
    if m.options.target == "ort" and opset_reason("Attention", m.opset):
        return "MultiHeadAttention"
    return "Attention"


def _three_d(m: Match) -> bool:
    """The heads are split and merged around the match: the fused op takes [B, S, H*D]."""
    return "q3" in m or "qs" in m or "qkv3" in m


def _mask_target(m: Match, op: str, s) -> Optional[list]:
    """The shape to Expand the mask to (ones but S where the mask has 1
    there, and 4-d for MultiHeadAttention), or None when it fits as it is."""
    mask_dims = _mask_dims(m)
    rank = 4 if op == "MultiHeadAttention" else len(mask_dims)
    over_queries = mask_dims[-2] == 1 and s != 1
    if not over_queries and rank == len(mask_dims):
        return None
    to = [1] * rank
    if over_queries:
        to[-2] = s
    return to


def _query_count(m: Match, s) -> Optional[tuple]:
    """(value, axis) of an input whose dim there is S, the query count, to
    read it at run time; None when none is."""
    for name in ("q3", "qs", "qkv3", "q"):
        if name in m:
            shape = dims(m[name]) or []
            axis = next((i for i, d in enumerate(shape) if same_dim(d, s)), None)
            return None if axis is None else (m[name], axis)
    return None


def _expand_shape(m: Match, edit: Edit, to: list):
    """`to` as an int64 tensor: a constant, or with S read from an input's
    shape at run time when S is a symbol."""
    if all(isinstance(d, int) for d in to):
        return edit.constant(np.array(to, np.int64), "mask_over_queries")
    value, axis = _query_count(m, to[-2])
    count = edit.dims_at_run_time(value, axis, axis + 1, "query_count")
    before = edit.constant(np.ones(len(to) - 2, np.int64), "mask_lead")
    (target,) = edit.node("Concat", [before, count, edit.constant(np.ones(1, np.int64), "mask_keys")], {"axis": 0},
                          hint="mask_over_queries")
    return target


def _dtype(m: Match) -> int:
    for name in ("q3", "qs", "qkv3", "q"):
        if name in m:
            return m.dtype(name)
    return 0


def _has_mask(m: Match) -> bool:
    return "mask" in m or "fill" in m


def _condition(m: Match):
    """A Where mask's boolean input: which scores it keeps, or drops."""
    return m["keep"] if "keep" in m else m["drop"]


def _where_reason(m: Match) -> Optional[str]:
    """None when the Where masks as an additive mask would (see the module
    docstring), else why not."""
    if m.dtype("keep" if "keep" in m else "drop") != helper.TensorProto.BOOL:
        return "the Where's condition is not boolean"
    fill = scalar_of(m.array("fill"))
    if _float_dtype(m) is None or fill is None:
        return "the Where's fill is not a float scalar"
    if fill > -1e4:
        return f"the Where's fill {fill} is not a masking value (at most -10000)"
    if "mask" in m and not (np.isneginf(fill) or fill == np.finfo(_float_dtype(m)).min):
        # Only then does a query whose keys are all masked weigh them as the
        # original does (see _additive).
        return f"the Where's fill {fill} is neither -inf nor the type's lowest value, and a mask is added beside it"
    return None


def _additive(m: Match, edit: Edit, op: str):
    """The Where's mask as one to add: 0 where it keeps, the type's lowest
    value elsewhere, one step up for Attention (see _without_lowest), or
    -inf where fill is -inf.

    With a mask added beside it (the fill then -inf or the lowest value,
    L): a mask added after the Where is added to that one; a bias added
    before it becomes the kept branch, Where(keep, bias, L). Either way a
    score the original keeps gets the same sum, and one it masks lands on L
    or -inf as in the original (s + L rounds to L, L + L to -inf), so even a
    query whose keys are all masked spreads over the same keys."""
    cond, fill = _condition(m), m.array("fill").reshape(())
    zero = np.zeros((), fill.dtype)
    if not np.isneginf(fill):
        lowest = np.finfo(fill.dtype).min
        fill = np.array(np.nextafter(lowest, zero) if op == "Attention" else lowest, fill.dtype)
    other = None
    if "mask" in m:
        other = _without_lowest(m, edit, m["mask"]) if op == "Attention" else m["mask"]
    biased = other is not None and m["masked"].op_type == "Add"  # the Add came first
    kept = other if biased else zero
    branches = (kept, fill) if "keep" in m else (fill, kept)  # Where's "true" and "false" values
    if not biased and cond.initializer is not None and not cond.is_graph_input:
        made = edit.constant(np.where(cond.initializer.numpy(), *branches).astype(fill.dtype), f"{cond.name}_additive")
    else:
        names = ("mask_kept", "mask_fill") if "keep" in m else ("mask_fill", "mask_kept")
        made = [b if b is other else edit.constant(b, name) for b, name in zip(branches, names)]
        (made,) = edit.node("Where", [cond, *made], hint=f"{cond.name}_additive")
    if other is None or biased:
        return made
    return edit.node("Add", [made, other], hint=f"{cond.name}_masks")[0]


def _mask_dims(m: Match) -> Optional[list]:
    """The mask's dims, or the two masks' broadcast."""
    if "fill" in m:
        return _where_mask_dims(m)
    if "mask2" not in m:
        return dims(m["mask"])
    a, b = dims(m["mask"]), dims(m["mask2"])
    return None if a is None or b is None else broadcast([a, b])


def _where_mask_dims(m: Match) -> Optional[list]:
    """The dims of a Where's condition, broadcast against the mask added
    beside it if any. A dim left unknown in either (GPT-Neo's causal window
    and MPT's ALiBi bias, cut from buffers to the length) is 1 or the dim
    of the scores it masks, where the node provably keeps the scores' dim
    (see _settled)."""
    cond = dims(_condition(m))
    if "mask" not in m or cond is None:
        return cond
    where, add = (m["masked2"], m["masked"]) if m["masked"].op_type == "Add" else (m["masked"], m["masked2"])
    masks = [_masking_dims(where, cond, where.inputs[1 if "keep" in m else 2]),
             _masking_dims(add, dims(m["mask"]), add.inputs[1 if add.inputs[0].name == m["mask"].name else 0])]
    if None in masks or len(masks[0]) != len(masks[1]):
        return None
    (a, a_bound), (b, b_bound) = masks
    a, b = [_settled(*dims_) for dims_ in zip(a, a_bound, b, b_bound)], \
        [_settled(*dims_) for dims_ in zip(b, b_bound, a, a_bound)]
    return broadcast([a, b])


def _settled(d, bound, other, other_bound):
    """A mask's dim d beside the other mask's: where d is unknown but 1 or
    `bound` (the scores' dim), the other's dim if that is `bound`, and 1 if
    the other is 1, or unknown but also 1 or `bound`: the sum is then 1 or
    the scores' dim, which reads as 1 here. That fits either way: over the query
    positions the mask is expanded (to S from 1 or S), over heads and batch
    Attention takes 1 or theirs, and a key dim of 1 refuses."""
    if d is not None or bound is None:
        return d
    if same_dim(other, bound):
        return other
    return 1 if other == 1 or (other is None and same_dim(other_bound, bound)) else None


def _masking_dims(node, mask: Optional[list], scores) -> Optional[tuple]:
    """(mask's dims at the scores' rank, and for each unknown one the
    scores' dim it is 1 or equal to where that is provable), or None."""
    x, y = dims(scores), dims(node.outputs[0])
    if mask is None or x is None or y is None or len(x) != len(y) or len(mask) > len(x):
        return None
    mask = [1] * (len(x) - len(mask)) + list(mask)
    return mask, [xd if d is None and same_dim(xd, yd) else None for d, xd, yd in zip(mask, x, y)]


def _scale(m: Match) -> Union[float, str]:
    """The factor on Q K^T, or why it is not a scalar constant."""
    if "scale_q" in m or "scale_k" in m:
        parts = [scalar_of(m.array(n)) for n in ("scale_q", "scale_k") if n in m]
        if None in parts:
            return "the scale on Q or K^T is not a scalar constant"
        return float(np.prod(parts))
    if "scale" not in m:
        return 1.0
    c = scalar_of(m.array("scale"))
    if c is None or (m["scaled"].op_type == "Div" and c == 0):
        return f"the scale '{m['scale'].name}' is not a nonzero scalar constant"
    return 1.0 / c if m["scaled"].op_type == "Div" else c


def _softcap(m: Match) -> Union[float, str]:
    """c of c * tanh(scores / c) (0: none), or why it is not one positive
    scalar constant."""
    if "capped" not in m:
        return 0.0
    c_in, c_out = scalar_of(m.array("cap_in")), scalar_of(m.array("cap_out"))
    if c_in is None or c_out is None or not c_in == c_out > 0 or not np.isfinite(c_in):
        return f"the softcap's constants ({m['cap_in'].name}, {m['cap_out'].name}) are not one positive scalar"
    return float(c_in)


def _ancestors(values: list) -> set:
    """The nodes computing any of `values`, however indirectly."""
    seen: set = set()
    stack = [v.producer for v in values if v is not None and v.producer is not None]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(x.producer for x in n.inputs if x is not None and x.producer is not None)
    return seen


def _owners(n) -> list:
    """n and the nodes whose subgraphs hold it, innermost first."""
    chain = [n]
    while chain[-1].graph.owner_node is not None:
        chain.append(chain[-1].graph.owner_node)
    return chain


def _take_over_presents(edit: Edit, presents: list, inputs: list, matched: set) -> None:
    """The op's present keys and values (new) stand in for the cache
    Concats' (old), except for readers the op itself depends on: GPT-2's
    causal mask is cut to `Shape(present)`, and that reader keeps the Concat
    (else a cycle). Only readers outside the match can be such; the op's
    ancestors are walked only when there are some."""
    outside = [(old, n, i) for old, _ in presents for n, i in old.uses if n not in matched]
    upstream = _ancestors(inputs) if outside else set()
    keep = [(old, n, i) for old, n, i in outside if any(o in upstream for o in _owners(n))]
    for old, new in presents:
        edit.replace_value(old, new)
    for old, n, i in keep:
        n.graph.set_input(n, i, old)


def _layout(m: Match) -> Union[tuple, str]:
    """(B, H, S, T) as ints or symbols, once q, k and v provably share batch
    and heads; else why not."""
    if "past_k" in m:
        return _layout_past(m)
    if "q3" in m or "qkv3" in m:
        return _layout_3d(m)
    if "qs" in m:
        return _layout_seq_first(m)
    q, v = dims(m["q"]), dims(m["v"])
    if "k_bshd" in m:
        kb = dims(m["k_bshd"])
        k = None if kb is None or len(kb) != 4 else [kb[0], kb[2], kb[1], kb[3]]
    elif "k_unit" in m:
        ku = dims(m["k_unit"])
        if ku is None or len(ku) != 4 or 1 not in ku[:2]:
            return f"K^T swaps the first two axes of k {ku}, neither of them known to be 1"
        k = [ku[1], ku[0], ku[2], ku[3]]
    else:
        k = dims(m["k"])
    if any(d is None or len(d) != 4 for d in (q, k, v)):
        return f"q, k, v are not all 4-d with known rank ({q}, {k}, {v})"
    shared = same_dim(q[1], k[1]) and same_dim(q[1], v[1])
    one_kv_head = k[1] == 1 and v[1] == 1  # MatMul broadcasts it over q's heads: one group of Attention's GQA
    if not (same_dim(q[0], k[0]) and same_dim(q[0], v[0]) and (shared or one_kv_head)):
        return f"q {q}, k {k}, v {v} do not provably share batch and heads"
    return q[0], q[1], q[2], k[2]


def _unit_swapped(m: Match, edit: Edit):
    """k_unit [1, B, T, D] (or [B, 1, T, D]) with its first two axes
    swapped, a Reshape: one of them is 1, so no element moves."""
    ku = dims(m["k_unit"])
    first = [1 if d == 1 else d if isinstance(d, int) else -1 for d in (ku[1], ku[0])]
    shape = edit.constant(np.array(first + [0, 0], np.int64), "key_heads")  # 0: T and D as they are
    return edit.node("Reshape", [m["k_unit"], shape], hint=f"{m['k_unit'].name}_bhsd")[0]


def _split(m: Match, name: str) -> Union[tuple, str]:
    """(B, S, H, D) when the Reshape of name3 only splits its last dim (for
    a packed projection: when it splits [B, S, 3*H*D] into [B, S, 3, H, D])."""
    if "qkv3" in m:
        return _split_packed(m)
    if "k_rows_t" in m:
        return _split_one_head(m, name)
    flat, split = dims(m[f"{name}3"]), dims(m[f"{name}_split"].outputs[0])
    if flat is None or split is None or len(flat) != 3 or len(split) != 4:
        return f"the {name} head split {flat} -> {split} is not [B,S,E] -> [B,S,H,D]"
    if not (same_dim(flat[0], split[0]) and same_dim(flat[1], split[1]) and isinstance(flat[2], int)
            and isinstance(split[2], int) and isinstance(split[3], int) and split[2] * split[3] == flat[2]):
        return f"the {name} head split {flat} -> {split} does more than split the last dim"
    return tuple(split)


def _split_one_head(m: Match, name: str) -> Union[tuple, str]:
    """(B, S, 1, D) when the Reshape of name3 [B, S, D] inserts a head axis
    of 1: [B, 1, S, D] (for k, of its [B, D, T] rows: [B, 1, D, T])."""
    flat, split = dims(m[f"{name}3"]), dims(m[f"{name}_split"].outputs[0])
    if flat is None or split is None or len(flat) != 3 or len(split) != 4:
        return f"the {name} head split {flat} -> {split} is not [B,S,D] -> [B,1,S,D]"
    b, s, d = flat
    want = [b, 1, d, s] if name == "k" else [b, 1, s, d]
    if not (isinstance(d, int) and split[1] == 1 and all(same_dim(x, y) for x, y in zip(split, want))):
        return f"the {name} head split {flat} -> {split} does more than add a head axis of 1"
    return b, s, 1, d


def _split_packed(m: Match) -> Union[tuple, str]:
    flat, split = dims(m["qkv3"]), dims(m["qkv_split"].outputs[0])
    label = f"the packed q/k/v split {flat} -> {split}"
    if flat is None or split is None or len(flat) != 3 or len(split) != 5:
        return f"{label} is not [B,S,3E] -> [B,S,3,H,D]"
    b, s, three, h, d = split
    if not (same_dim(flat[0], b) and same_dim(flat[1], s) and three == 3 and isinstance(h, int)
            and isinstance(d, int) and flat[2] == 3 * h * d):
        return f"{label} does more than split the last dim"
    if "q_part" in m:
        why = _unbind_reason(m)
        if why:
            return why
    elif sorted(_pick(m, n) for n in ("q", "k", "v")) != [0, 1, 2]:
        return "q, k and v are not the packed projection's three parts"
    return b, s, h, d


def _layout_3d(m: Match) -> Union[tuple, str]:
    return _shared_heads([_split(m, n) for n in ("q", "k", "v")], lambda q, v: _merge(m, q, v) is not None)


def _layout_past(m: Match) -> Union[tuple, str]:
    """The 3-d layout with K = Concat(past_k, heads(k3)) and V alike along
    the sequence: past_k and past_v are [B, H, P, D] (4-d, as Attention's
    past inputs), and T is the present keys' length."""
    bhst = _layout_3d(m)
    if isinstance(bhst, str):
        return bhst
    b, h, s, _ = bhst
    why = past_reason(m, _split(m, "k"), _split(m, "v"))
    if why:
        return why
    present = dims(m["k_present"].outputs[0])
    if present is None or len(present) != 4:
        return "the past keys and values do not provably share their length"
    return b, h, s, present[2]


def past_reason(m: Match, k: tuple, v: tuple) -> Optional[str]:
    """Why the cache is not Attention's past_key/past_value, given the new
    k and v heads [B, T, Hkv, D]: each Concat along the sequence of a past
    [B, Hkv, P, D] and the new heads, the two pasts of one length; else None."""
    for name, new in (("k", k), ("v", v)):
        concat, past = m[f"{name}_present"], dims(m[f"past_{name}"])
        if concat.attributes.get("axis") not in (2, -2):
            return f"the present {name} is not concatenated along the sequence"
        if past is None or len(past) != 4 or not (same_dim(past[0], new[0]) and past[1] == new[2]
                                                  and past[3] == new[3]):
            return f"the past {name} {past} is not [B, H, P, D] of the new one's {list(new)}"
    if not same_dim(dims(m["past_k"])[2], dims(m["past_v"])[2]):
        return "the past keys and values do not provably share their length"
    return None


def _layout_seq_first(m: Match) -> Union[tuple, str]:
    # The merge's Reshape reads Transpose(Attention) as [S, B, H*Dv] where it read [S, B, H, Dv].
    return _shared_heads([_split_seq_first(m, n) for n in ("q", "k", "v")], lambda q, v: not _copies_a_moved_dim(m))


def _shared_heads(parts: list, merge_ok) -> Union[tuple, str]:
    """(B, H, S, T) from q, k, v split as (B, S|T, H, D), once they provably
    share batch and heads and `merge_ok(q, v)`; else why not."""
    for p in parts:
        if isinstance(p, str):
            return p
    q, k, v = parts
    if not (same_dim(q[0], k[0]) and same_dim(q[0], v[0]) and q[2] == k[2] == v[2] and same_dim(k[1], v[1])):
        return f"q {list(q)}, k {list(k)}, v {list(v)} do not provably share batch and heads"
    if not merge_ok(q, v):
        return ("the head merge's result is not [B, S, H*Dv] and its shape may have a 0 (copy a dim) past its "
                "second entry")
    return q[0], q[2], q[1], k[1]


def _split_seq_first(m: Match, name: str) -> Union[tuple, str]:
    """(B, S, H, D) when name's chain is [S, B, E] -> [S, B*H, D] -> [B*H, S, D]
    -> [B, H, S, D] (the middle dim is then B*H: the element count holds)."""
    flat, folded, split = (dims(m[f"{name}s"]), dims(m[f"{name}_fold"].outputs[0]),
                           dims(m[f"{name}_split"].outputs[0]))
    label = f"the {name} head split {flat} -> {folded} -> {split}"
    if flat is None or folded is None or split is None or (len(flat), len(folded), len(split)) != (3, 3, 4):
        return f"{label} is not [S,B,E] -> [S,B*H,D] -> [B,H,S,D]"
    s, b, e = flat
    if _batch_first_batch_1(m, name):
        s, b = b, s
    _, h, _, d = split
    if not (same_dim(folded[0], s) and same_dim(split[0], b) and same_dim(split[2], s) and isinstance(e, int)
            and isinstance(h, int) and isinstance(d, int) and folded[2] == d and h * d == e):
        return f"{label} does more than split the heads"
    return b, s, h, d


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
    return None if _copies_a_moved_dim(m) else "reshape"


def _copies_a_moved_dim(m: Match) -> bool:
    """The head merge's Reshape may have a 0 past its second entry (and no
    allowzero): it would copy a dim of its input that the fused form
    changes (one head: past its first, as the head axis of 1 goes). A shape
    computed at run time may."""
    if m.root.attributes.get("allowzero", 0):
        return False
    shape = constant_ints(m["out_shape"])
    return shape is None or 0 in shape[1 if "k_rows_t" in m else 2:]


def _mask_reason(mask: Optional[list], bhst: tuple, counted: bool) -> Optional[str]:
    """None when onnxruntime's Attention takes the mask (after expanding a
    1 over the query positions, whose count is known or `counted` at run
    time from an input's shape), else why not."""
    b, h, s, t = bhst
    if mask is None or not 2 <= len(mask) <= 4:
        return f"the mask's shape {mask} is not 2-d to 4-d"
    if not same_dim(mask[-1], t):
        return f"the mask {mask} does not have the key positions ({t}) last"
    if not (same_dim(mask[-2], s) or (mask[-2] == 1 and (isinstance(s, int) or counted))):
        return f"the mask {mask} broadcasts over the query positions ({s}), and their count is unknown"
    if len(mask) >= 3 and not (mask[-3] == 1 or same_dim(mask[-3], h)):
        return f"the mask {mask} does not fit the heads ({h})"
    if len(mask) == 4 and not (mask[0] == 1 or same_dim(mask[0], b)):
        return f"the mask {mask} does not fit the batch ({b})"
    return None
