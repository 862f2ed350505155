"""The pattern language of fusion rules: a small DAG of `Op`s whose inputs
are other `Op`s, `Var`s (any value) and `Const`s (initializers). The native
matcher (csrc/match/pattern.h) runs it; this module only describes it.

    x = Var("x")
    Op("BatchNormalization",
       Op("Conv", x, Const("w"), Const("b", optional=True), name="conv"),
       Const("scale"), Const("beta"), Const("mean"), Const("var"),
       name="bn", attrs={"training_mode": 0})

An object used twice (`x` above, were it read by two ops) binds the same
node or value both times. Every op but the root is `exclusive` by default:
only the pattern reads it, so a rewrite never takes a value from another
reader.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional, Union

import numpy as np

from pyonnxopt import _core


def _dtype_code(dtype) -> int:
    if dtype is None:
        return 0
    if isinstance(dtype, int):
        return dtype
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


class Var:
    """Any value (with optional constraints on element type and rank)."""

    def __init__(self, name: str, *, dtype=None, rank: Optional[int] = None, optional: bool = False):
        self.name, self.dtype, self.rank, self.optional = name, dtype, rank, optional

    def _spec(self) -> dict:
        return {"kind": "value", "name": self.name, "dtype": _dtype_code(self.dtype), "rank": self.rank,
                "optional": self.optional}


class Const(Var):
    """A constant: an initializer that is not a graph input. `value`: every
    element equals it; `scalar`: exactly one element."""

    def __init__(self, name: str, *, value: Optional[float] = None, scalar: bool = False, dtype=None,
                 rank: Optional[int] = None, optional: bool = False):
        super().__init__(name, dtype=dtype, rank=rank, optional=optional)
        self.value, self.scalar = value, scalar

    def _spec(self) -> dict:
        return {**super()._spec(), "constant": True, "scalar": self.scalar, "value": self.value}


Input = Union["Op", Var]


class Op:
    """A node of one of `op_type`'s types ("Add" or "Add|Sub"), reading
    `inputs` in order; trailing inputs marked optional may be absent.

    attrs: required attribute values; a node without the attribute matches
        when ONNX's default for it (at the graph's opset) is that value.
    commutative: inputs 0 and 1 may come in either order.
    exclusive: (not the root) only the pattern reads its outputs.
    output: which of its outputs its reader reads.
    """

    def __init__(self, op_type: str, *inputs: Input, name: Optional[str] = None, domain: str = "",
                 commutative: bool = False, exclusive: bool = True, output: int = 0,
                 attrs: Optional[dict] = None):
        self.op_types = op_type.split("|")
        self.inputs = inputs
        self.name = name or self.op_types[0]
        self.domain, self.commutative, self.exclusive, self.output = domain, commutative, exclusive, output
        self.attrs = attrs or {}


def elements(root: Op) -> list:
    """The pattern's elements, root first, each object once."""
    order, seen, stack = [], set(), [root]
    while stack:
        e = stack.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        order.append(e)
        if isinstance(e, Op):
            stack.extend(e.inputs)
    names = [e.name for e in order]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"pattern: two elements named {sorted(dup)[0]!r}; give each a distinct name")
    return order


@lru_cache(maxsize=None)
def _default(op_type: str, domain: str, opset: int, attr: str):
    import onnx.defs
    from onnx import helper

    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except Exception:
        return None
    a = schema.attributes.get(attr)
    if a is None or not a.default_value.name:
        return None
    return helper.get_attribute_value(a.default_value)


def _same(a, b) -> bool:
    if isinstance(a, bytes):
        a = a.decode()
    if isinstance(b, bytes):
        b = b.decode()
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and list(a) == list(b)
    return a == b


def compile_pattern(root: Op, opset: int) -> tuple:
    """(native Pattern, element names) for a graph whose default-domain opset is `opset`."""
    order = elements(root)
    index = {id(e): i for i, e in enumerate(order)}
    specs = []
    for e in order:
        if isinstance(e, Op):
            attrs = []
            for name, value in e.attrs.items():
                absent_ok = all(_same(_default(t, e.domain, opset, name), value) for t in e.op_types)
                attrs.append({"name": name, "value": value, "absent_ok": absent_ok})
            specs.append({"kind": "op", "name": e.name, "op_types": e.op_types, "domain": e.domain,
                          "inputs": [index[id(i)] for i in e.inputs], "commutative": e.commutative,
                          "exclusive": e.exclusive, "output_index": e.output, "attrs": attrs})
        else:
            specs.append(e._spec())
    return _core.Pattern(specs), [e.name for e in order]
