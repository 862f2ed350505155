"""fuse_pad_into_conv: a constant Pad of the spatial axes before a Conv,
AveragePool or MaxPool becomes the consumer's own padding.

    p = Pad(x, pads=[0, 0, t, l, 0, 0, b, r], value)     (mode "constant")
    y = Conv(p, W, B, pads=[t0, l0, b0, r0])
 -> y = Conv(x, W, B, pads=[t0 + t, l0 + l, b0 + b, r0 + r])   (attributes kept)

All Pad forms: `paddings` (opset 1), `pads` and `value` attributes (2-10),
inputs (11+), `axes` (18+). Conv and AveragePool with count_include_pad=1
pad with zeros, MaxPool with -inf (the type's lowest integer for integer
MaxPool): the Pad's value must be that.

Refuses when:
1. the pads, value or axes are not constants (pattern), or the Pad's output
   is a graph output or has a reader that could not take the padding
   itself: a Pad read by several Convs and pools goes into each of them
   (NASNet's two 7x7 branches), never into some only (onnxslim issue 160
   fused a Pad read by two Convs into one and broke the other);
2. the Pad's mode is not "constant";
3. the pad value is not 0 (Conv, AveragePool), or not -inf (MaxPool: a 0
   pad would win over negative inputs; but 0 where the input is provably
   >= 0, a Relu's, Sigmoid's or Clip(min >= 0)'s: Keras's ZeroPadding2D
   before a ResNet's MaxPool);
4. the pads touch the batch or channel axis, or are negative (a crop);
5. the consumer's auto_pad is SAME_UPPER or SAME_LOWER (its padding
   depends on the input's size); VALID, no padding, becomes NOTSET with
   the Pad's pads (HF EfficientNet pads each strided depthwise Conv so);
6. AveragePool does not count the padding (count_include_pad=0, or opset
   below 7): its divisor would change;
7. a pool with ceil_mode=1 (windows past the padding count differently),
   with combined pads reaching the kernel size (onnxruntime refuses those),
   or whose kernel_shape does not fit its input;
8. MaxPool's Indices output is read (the indices would address the
   unpadded input);
9. the input's rank is unknown.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule, node_id
from pyonnxopt.fusion.rules._channels import attribute
from pyonnxopt.fusion.values import constant_array


class FusePadIntoConv(Rule):
    name = "fuse_pad_into_conv"
    description = "fold a constant spatial Pad into the padding of the Conv/AveragePool/MaxPool after it"

    def pattern(self, opset: int) -> Op:
        # Read by several consumers too: check makes sure each can take the padding.
        if opset < 11:
            pad = Op("Pad", Var("x"), name="pad", exclusive=False)
        elif opset < 18:
            pad = Op("Pad", Var("x"), Const("pads"), Const("value", optional=True), name="pad", exclusive=False)
        else:
            pad = Op("Pad", Var("x"), Const("pads"), Const("value", optional=True), Const("axes", optional=True),
                     name="pad", exclusive=False)
        return Op("Conv|AveragePool|MaxPool", pad, Var("w", optional=True), Var("b", optional=True),
                  name="consumer")

    def check(self, m: Match) -> Optional[str]:
        added = _spatial_pads(m)
        if isinstance(added, str):
            return added
        if attribute(m["pad"], "mode", "constant") != "constant":
            return f"Pad mode is {attribute(m['pad'], 'mode')!r}, not 'constant'"
        why = _consumer_refusal(m, m["consumer"], added)
        if why:
            return why
        padded = m["pad"].outputs[0]
        if padded.is_graph_output:
            return f"the Pad's output '{padded.name}' is a graph output"
        for reader, index in padded.uses:
            if reader.outputs[0] is not None and reader.outputs[0].name == m["consumer"].outputs[0].name:
                continue  # the matched one
            if reader.op_type not in ("Conv", "AveragePool", "MaxPool") or reader.domain or index != 0:
                return (f"the Pad's output has another reader, '{node_id(reader)}' ({reader.op_type}), "
                        "that cannot take it")
            why = _consumer_refusal(m, reader, added)
            if why:
                return f"the Pad's output has another reader, '{node_id(reader)}', that cannot take it: {why}"
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        consumer = m["consumer"]
        pads = _combined(consumer, _spatial_pads(m))
        inputs = [m["x"]] + [v for v in (m["w"], m["b"]) if v is not None]
        fused = edit.replace_root(consumer.op_type, inputs, {"pads": pads}, copy_attrs_from=consumer)
        fused.remove_attribute("auto_pad")  # VALID: no padding of its own, now explicit
        return None


def _consumer_refusal(m: Match, consumer, added: list) -> Optional[str]:
    """Why `consumer` (the matched one, or another reader of the Pad)
    cannot take the padding, or None."""
    op = consumer.op_type
    why = _value_refusal(m, op)
    if why:
        return why
    if attribute(consumer, "auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return f"{op} auto_pad is {attribute(consumer, 'auto_pad')!r}, not NOTSET or VALID"
    own = attribute(consumer, "pads")
    if own and len(own) != len(added):
        return f"{op} pads {list(own)} do not fit its {len(added) // 2} spatial axes"
    if op == "Conv":
        return None
    if op == "AveragePool" and not attribute(consumer, "count_include_pad", 0):
        return "AveragePool count_include_pad=0: the padding would leave its divisor"
    if attribute(consumer, "ceil_mode", 0):
        return f"{op} ceil_mode=1: windows past the padding count differently"
    if op == "MaxPool" and len(consumer.outputs) > 1 and _read(consumer.outputs[1]):
        return "MaxPool's Indices output is read: the indices would address the unpadded input"
    kernel = list(attribute(consumer, "kernel_shape", []))
    if len(kernel) != len(added) // 2:
        return f"{op} kernel_shape {kernel} does not fit its {len(added) // 2} spatial axes"
    if any(p >= kernel[i % len(kernel)] for i, p in enumerate(_combined(consumer, added))):
        return f"{op} pads would reach its kernel {kernel} (onnxruntime refuses such pools)"
    return None


def _read(v) -> bool:
    return v is not None and (bool(v.uses) or v.is_graph_output)


def _rank(m: Match) -> Optional[int]:
    kernel = attribute(m["consumer"], "kernel_shape")
    if kernel:
        return len(kernel) + 2
    for name in ("w", "x"):
        shape = m.shape(name) if m[name] is not None else None
        if shape is not None:
            return len(shape)
    return None


def _pad_list(m: Match) -> tuple:
    """(pads, axes) of the Pad in any opset's form; axes None: all."""
    pad = m["pad"]
    if m.opset < 11:
        pads = attribute(pad, "pads" if m.opset >= 2 else "paddings")
        return (list(pads) if pads is not None else None), None
    axes = [int(a) for a in m.array("axes").reshape(-1)] if m.opset >= 18 and m["axes"] is not None else None
    return [int(p) for p in m.array("pads").reshape(-1)], axes


def _spatial_pads(m: Match) -> Union[list, str]:
    """The pads the Pad adds to the spatial axes, in the consumer's layout
    [x1_begin, x2_begin, ..., x1_end, ...], or why they cannot move there."""
    rank = _rank(m)
    if rank is None:
        return "the rank of the padded input is unknown"
    pads, axes = _pad_list(m)
    if pads is None:
        return "the Pad has no pads attribute"
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    if len(pads) != 2 * len(axes) or any(not 0 <= a < rank for a in axes):
        return f"the Pad's pads {pads} (axes {axes}) do not fit an input of rank {rank}"
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + len(axes)]
    if any(p < 0 for p in begin + end):
        return f"the Pad's pads {pads} are negative (a crop)"
    if any(begin[:2] + end[:2]):
        return f"the Pad's pads {pads} touch the batch or channel axis"
    return begin[2:] + end[2:]


def _value_refusal(m: Match, op: str) -> Optional[str]:
    if m.opset < 11:
        value = float(attribute(m["pad"], "value", 0.0))
    elif m["value"] is None:
        value = 0
    else:
        array = m.array("value")
        if array.size != 1:
            return f"the Pad's constant_value has {array.size} elements"
        value = array.reshape(-1)[0]
    if op != "MaxPool":
        return None if value == 0 else f"the Pad's value is {value}, not 0"
    from onnx import helper

    code = m.dtype("x") or m.dtype("pad")
    integer = bool(code) and np.dtype(helper.tensor_dtype_to_np_dtype(code)).kind in "iu"
    lowest = np.iinfo(helper.tensor_dtype_to_np_dtype(code)).min if integer else -np.inf
    if value != lowest and not (value == 0 and _nonnegative(m["x"])):
        return f"the Pad's value is {value}, not {lowest}: MaxPool pads with the lowest value"
    return None


def _nonnegative(v) -> bool:
    """v is provably >= 0 (a Relu's output, Keras's ZeroPadding2D before a
    MaxPool): padding it with 0 or with -inf gives the same maxima, as
    every window keeps an element of v (refusal 7)."""
    p = v.producer if v is not None else None
    if p is None:
        return False
    if p.domain in ("", "ai.onnx") and p.op_type in ("Relu", "Sigmoid", "Softplus", "Abs", "Exp"):
        return True
    if p.domain == "com.microsoft" and p.op_type == "FusedConv":
        return p.attributes.get("activation") in ("Relu", b"Relu", "Sigmoid", b"Sigmoid")
    if p.domain in ("", "ai.onnx") and p.op_type == "Clip":
        low = p.inputs[1] if len(p.inputs) > 1 else None
        if low is None:
            return float(p.attributes.get("min", -np.inf)) >= 0  # before opset 11
        value = constant_array(low)
        return value is not None and value.size == 1 and float(value.reshape(-1)[0]) >= 0
    return False


def _combined(consumer, added: list) -> list:
    """The consumer's pads plus `added` (an own pads list of another length
    is caught by check)."""
    own = attribute(consumer, "pads") if attribute(consumer, "auto_pad", "NOTSET") == "NOTSET" else None
    own = list(own) if own else [0] * len(added)
    return [int(a) + int(b) for a, b in zip(own, added)]
