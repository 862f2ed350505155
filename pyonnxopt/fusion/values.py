"""What rules ask of the values a pattern bound: constants close to a
known number (exporters write 1/sqrt(2) as 0.7071067 or 0.70710678...),
shapes with their symbolic dims, whether a broadcast keeps a shape, and
constant integer operands (axes, shapes) given as attribute or input."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Mapping, Optional

import numpy as np

from pyonnxopt.dim_names import spelled_sum
from pyonnxopt.model import Value

# Relative tolerance for a constant written in this element type: a few ulps
# in half types; in float32/64 the 7 digits exporters usually print.
_RTOL = {10: 2e-3, 16: 1.6e-2, 1: 1e-6, 11: 1e-6}  # float16, bfloat16, float, double


def scalar_of(array: np.ndarray) -> Optional[float]:
    """The one element of a constant as a float, or None (several
    elements, or not a number type)."""
    if array.size != 1 or array.dtype.kind not in "fiu":
        return None
    return float(array.reshape(()))


def close_to(array: np.ndarray, want: float, onnx_dtype: int) -> bool:
    """A one-element constant equal to `want` within its dtype's precision."""
    x = scalar_of(array)
    if x is None:
        return False
    if array.dtype.kind in "iu":
        return x == want
    return abs(x - want) <= _RTOL.get(onnx_dtype, 1e-6) * abs(want)


def constant_reason(label: str, array: np.ndarray, want: float, onnx_dtype: int) -> Optional[str]:
    """None when the constant is `want`, else why not (for near misses)."""
    if close_to(array, want, onnx_dtype):
        return None
    if array.size != 1:
        return f"{label} has {array.size} elements, needs one"
    return f"{label} is {scalar_of(array)!r}, needs {want:.7g}"


def constants_refusal(m, wanted: dict, dtype: int) -> Optional[str]:
    """None when each of the match's constants named in `wanted` (those the
    variant has) holds its wanted value and broadcasts no more than x (the
    match's "x") does; else why not, for a near miss."""
    rank = None if m.shape("x") is None else len(m.shape("x"))
    for name, want in wanted.items():
        if name not in m:
            continue
        why = constant_reason(f"'{m[name].name}'", m.array(name), want, dtype)
        if why:
            return why
        const_rank = len(m.shape(name))
        if const_rank and (rank is None or const_rank > rank):
            return f"'{m[name].name}' has rank {const_rank} and x's rank is {rank or 'unknown'}: it may broadcast x"
    return None


_OUTPUT_ALIASES: ContextVar[Mapping] = ContextVar("output_aliases", default=MappingProxyType({}))


@contextmanager
def output_dim_aliases(aliases: Mapping):
    """While rules run on a model: its outputs' own dim names that shape
    inference proved to be other symbols (Model.dim_aliases) read as those."""
    token = _OUTPUT_ALIASES.set(aliases)
    try:
        yield
    finally:
        _OUTPUT_ALIASES.reset(token)


def dims(v: Optional[Value]) -> Optional[list]:
    """The value's dims as the model states them: int, a symbol (str), or
    None when unknown; None when not even the rank is known. A main-graph
    output's own name for a dim reads as the symbol it provably is (a
    TorchScript export names the present values' length `Concatv_dim_2`,
    the keys' `Concatk_dim_2`, both the past's plus the new length)."""
    if v is None:
        return None
    if v.initializer is not None and not v.is_graph_input:
        return list(v.initializer.dims)
    shape = v.type.get("shape")
    if shape is None:
        return None
    aliases = _OUTPUT_ALIASES.get() if v.is_graph_output and v.graph.parent is None else {}
    return [spelled_sum(aliases.get(d, d)) if isinstance(d, str) and d else d if isinstance(d, int) else None
            for d in shape]


def same_dim(a, b) -> bool:
    """Provably equal: the same int, or the same symbol."""
    return a is not None and a == b


def same_dims(a: Optional[list], b: Optional[list]) -> bool:
    """Provably the same shape: as many dims, each the same int or symbol."""
    return a is not None and b is not None and len(a) == len(b) and all(map(same_dim, a, b))


def broadcasts_into(small: Optional[list], big: Optional[list]) -> bool:
    """Provably: `small` broadcast against `big` gives `big`'s shape (each
    of small's dims, right-aligned, is 1 or equal to big's)."""
    if small is None or big is None or len(small) > len(big):
        return False
    return all(s == 1 or same_dim(s, b) for s, b in zip(reversed(small), reversed(big)))


def constant_array(v: Optional[Value]) -> Optional[np.ndarray]:
    """An initializer's (not a graph input's) or a Constant node's value, or None."""
    if v is None:
        return None
    if v.initializer is not None:
        return None if v.is_graph_input else v.initializer.numpy()
    p = v.producer
    value = p.attributes.get("value") if p is not None and p.op_type == "Constant" and not p.domain else None
    return value.numpy() if value is not None and hasattr(value, "numpy") else None


def range_behind(v: Optional[Value]):
    """The Range node v is, or lays along axes through Reshapes and
    Unsqueezes (which keep its order); None for anything else."""
    p = v.producer if v is not None else None
    while p is not None and not p.domain and p.op_type in ("Reshape", "Unsqueeze"):
        p = p.inputs[0].producer
    return p if p is not None and not p.domain and p.op_type == "Range" else None


def constant_ints(v: Optional[Value]) -> Optional[list]:
    """A constant integer initializer's values (not a graph input), or None."""
    if v is None or v.initializer is None or v.is_graph_input or v.initializer.data_type not in (6, 7):
        return None
    return [int(x) for x in np.asarray(v.initializer.numpy()).reshape(-1)]


def clamped_range(start: int, end: int, length: int) -> tuple:
    """A step-1 Slice's [start, end) on an axis of `length`: negative
    indices count from the end, both clamped to [0, length], as ONNX does."""
    def clamp(i: int) -> int:
        return min(max(i + length if i < 0 else i, 0), length)
    return clamp(start), clamp(end)


def one_axis_slice(node) -> Optional[tuple]:
    """(axis, start, end) of a Slice (opset 10 and later) on one axis with
    step 1 and constant parameters, the axis as written (it may be
    negative); None for any other."""
    ins = list(node.inputs) + [None] * (5 - len(node.inputs))
    starts, ends = constant_ints(ins[1]), constant_ints(ins[2])
    axes = constant_ints(ins[3]) if ins[3] is not None else [0]
    steps = constant_ints(ins[4]) if ins[4] is not None else [1]
    if None in (starts, ends, axes, steps) or not len(starts) == len(ends) == len(axes) == len(steps) == 1:
        return None
    return (axes[0], starts[0], ends[0]) if steps[0] == 1 else None


def attr_or_input(node, attr: str, index: int) -> Optional[list]:
    """Integers given as attribute `attr` or, in later opsets, as constant
    input `index` (axes of Unsqueeze or the reductions); None when neither."""
    if attr in node.attributes:
        a = node.attributes[attr]
        return list(a) if isinstance(a, (list, tuple)) else [a]
    if len(node.inputs) > index and node.inputs[index] is not None:
        return constant_ints(node.inputs[index])
    return None
