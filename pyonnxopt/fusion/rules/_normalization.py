"""What the LayerNormalization and RMSNormalization rules share: the
reduced axes (attribute before opset 18, input from 18), the epsilon, and
the scale/bias constants reshaped to the normalized shape."""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from pyonnxopt.fusion import Const, Op
from pyonnxopt.fusion.rule import Edit, Match


def reduce_mean(x, name: str, opset: int) -> Op:
    """ReduceMean(x) keeping dims; its axes are an input from opset 18 (and
    with noop_with_empty_axes, no axes would make it an Identity)."""
    if opset >= 18:
        return Op("ReduceMean", x, Const(f"{name}_axes", optional=True), name=name,
                  attrs={"keepdims": 1, "noop_with_empty_axes": 0})
    return Op("ReduceMean", x, name=name, attrs={"keepdims": 1})


def _axes(m: Match, name: str) -> Optional[list]:
    """The axes a matched ReduceMean reduces; None for "every axis"."""
    if m.opset >= 18:
        axes = m[f"{name}_axes"]
        return None if axes is None else [int(a) for a in m.array(f"{name}_axes").reshape(-1)]
    axes = m[name].attributes.get("axes")
    return None if axes is None else list(axes)


def trailing_axes(m: Match, rank: Optional[int], *names: str) -> Union[int, str]:
    """How many trailing axes every named ReduceMean reduces (the same
    ones), or why that is not so."""
    found = []
    for name in names:
        axes = _axes(m, name)
        if axes is None or axes == []:
            if rank is None:
                return f"'{m[name].name}' reduces every axis and the rank of x is unknown"
            axes = list(range(rank))
        if any(a >= 0 for a in axes):
            if rank is None:
                return f"'{m[name].name}' reduces axes {axes} and the rank of x is unknown"
            axes = [a - rank if a >= 0 else a for a in axes]
        found.append(sorted(axes))
    if any(f != found[0] for f in found):
        return f"the ReduceMeans reduce different axes {found}"
    k = len(found[0])
    if found[0] != list(range(-k, 0)):
        return f"axes {found[0]} are not the trailing ones"
    return k


def epsilon(m: Match, name: str = "eps") -> Union[float, str]:
    eps = m.array(name)
    if eps.size != 1 or eps.dtype.kind != "f":
        return f"epsilon '{m[name].name}' is not a scalar float constant"
    return float(eps.reshape(()))


def normalized_dims(m: Match, k: int) -> Optional[list]:
    """x's last k dims when all are known, else None."""
    shape = m.shape("x")
    if shape is None or len(shape) < k or any(d is None for d in shape[len(shape) - k:]):
        return None
    return shape[len(shape) - k:]


def affine_input(m: Match, edit: Edit, name: str, k: int, fill: Optional[float]):
    """The Scale (or Bias) input of the fused op, once check_affine passed:
    the matched constant when it has the normalized shape, else a copy
    broadcast to it; a constant of `fill` when the pattern had none (None
    when fill is None: the input stays omitted)."""
    dims = normalized_dims(m, k)
    if name not in m:
        if fill is None:
            return None
        return edit.constant(np.full(dims, fill, _np_dtype(m)), f"{m.root.name or 'norm'}_{name}")
    value = m.array(name)
    if list(value.shape) == dims:
        return m[name]
    rest = value.reshape(value.shape[max(0, value.ndim - k):])
    return edit.constant(np.ascontiguousarray(np.broadcast_to(rest, dims)), m[name].name)


def _np_dtype(m: Match):
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(m.dtype("x") or m.dtype("eps"))


def check_affine(m: Match, k: int, *names: str) -> Optional[str]:
    """None when affine_input can make each named input (Scale of ones
    needs the normalized dims), else why not."""
    dims = normalized_dims(m, k)
    x_rank = None if m.shape("x") is None else len(m.shape("x"))
    for name in names:
        if name not in m:
            if name == "scale" and dims is None:
                return "x's normalized dims are unknown (needed for a Scale of ones)"
            continue
        shape = list(m.array(name).shape)
        if dims is not None and shape == dims:
            continue
        if dims is None:
            return f"x's normalized dims are unknown ('{m[name].name}' has shape {shape})"
        if x_rank is None or len(shape) > x_rank:
            return f"'{m[name].name}' has more dims than x: it broadcasts x"
        lead, rest = shape[: max(0, len(shape) - k)], shape[max(0, len(shape) - k):]
        if any(d != 1 for d in lead):
            return f"'{m[name].name}' with shape {shape} varies outside the normalized axes"
        if any(r not in (1, d) for r, d in zip(reversed(rest), reversed(dims))):
            return f"'{m[name].name}' with shape {shape} does not broadcast to {dims}"
    return None
