"""The tensors both models compute under the same name, and copies of the
models that return them as extra graph outputs.

A copy is the model's serialized bytes followed by a small ModelProto that
holds only the extra outputs: protobuf merges repeated fields of a message
given twice, so onnxruntime reads one graph with more outputs, and the
weights are never parsed or re-serialized in Python. The copy is written
to a scratch folder (the file copied by the kernel, the outputs appended)
and onnxruntime loads it from there: from bytes, onnxruntime would hold
two more copies of the weights while loading. The extra outputs carry no
type (onnxruntime takes untyped graph outputs). External data is found
through onnxruntime's external-initializer folder setting, so the user's
files and folders are never written to.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from pyonnxopt.errors import Error
from pyonnxopt.model import Model


@dataclass
class ModelRef:
    """One of the two models: what the messages call it, where it came from,
    its native graph (for names, types and the structure diff) and how to get
    its bytes again for each session."""

    label: str  # "original" or "optimized"
    path: Optional[str]  # None when given as bytes or an onnx.ModelProto
    model: Model
    _bytes: Callable[[], bytes]

    @property
    def where(self) -> str:
        return f"{self.label} model ({self.path or '<memory>'})"

    def read_bytes(self) -> bytes:
        return self._bytes()

    @property
    def folder(self) -> Optional[str]:
        return os.path.dirname(os.path.abspath(self.path)) if self.path else None


def open_model(source, label: str) -> ModelRef:
    """A path, bytes or onnx.ModelProto as a ModelRef. A path is read again
    for each session (from the page cache), so its bytes are not held in
    between."""

    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise Error(f"{label} model ({path}): no such file")

        def read() -> bytes:
            with open(path, "rb") as f:
                return f.read()

        model = _load(path, label, path)
        return ModelRef(label, path, model, read)
    if type(source).__name__ == "ModelProto" and hasattr(source, "SerializeToString"):
        source = source.SerializeToString()
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return ModelRef(label, None, _load(data, label, "<memory>"), lambda: data)
    raise TypeError(f"verify() takes a path, bytes or onnx.ModelProto for the {label} model, "
                    f"not {type(source).__name__}")


def _load(source, label: str, where: str) -> Model:
    import pyonnxopt

    try:
        return pyonnxopt.load(source)
    except Error as e:
        raise Error(f"{label} model ({where}): {e}") from None


@dataclass
class Intermediate:
    name: str
    op_type: str  # the producer in the original
    order: int  # the producer's index in the original's (topologically sorted) node list


def producers(model: Model) -> dict:
    """Top-level value name -> (producing node, index in node order)."""
    found = {}
    for index, node in enumerate(model.graph.topological_order()):
        for value in node.outputs:
            if value is not None and value.name:
                found[value.name] = (node, index)
    return found


def _is_tensor_or_unknown(value) -> bool:
    kind = value.type.get("kind") if value.type else None
    return kind in (None, "tensor")


def common_intermediates(original: Model, optimized: Model) -> list:
    """Values produced by a top-level node in both models under the same name,
    in the original's node order: not graph inputs, initializers or graph
    outputs of the optimized model (those are compared as outputs), not
    Constant nodes' outputs (weights, not computed), and tensors (a value
    whose type is unknown is kept; a non-tensor result is skipped when it
    comes back)."""
    ours, theirs = producers(original), producers(optimized)
    outputs = {v.name for v in optimized.graph.outputs}
    found = []
    for name, (node, index) in ours.items():
        other = theirs.get(name)
        if other is None or name in outputs or node.op_type == "Constant" or other[0].op_type == "Constant":
            continue
        a, b = original.graph.value(name), optimized.graph.value(name)
        if a.is_graph_input or b.is_graph_input or a.initializer is not None or b.initializer is not None:
            continue
        if _is_tensor_or_unknown(a) and _is_tensor_or_unknown(b):
            found.append(Intermediate(name, node.op_type, index))
    found.sort(key=lambda i: i.order)
    return found


def extra_outputs(names: list) -> bytes:
    """The serialized ModelProto that, appended to a model's bytes, adds
    `names` as (untyped) graph outputs."""
    import onnx

    graph = onnx.GraphProto(output=[onnx.ValueInfoProto(name=n) for n in names])
    return onnx.ModelProto(graph=graph).SerializeToString()


def write_with_outputs(ref: ModelRef, names: list, path: str) -> None:
    """Writes the model with `names` added as graph outputs to `path`."""
    if ref.path:
        shutil.copyfile(ref.path, path)  # sendfile: the bytes never enter Python
    else:
        with open(path, "wb") as f:
            f.write(ref.read_bytes())
    if names:
        with open(path, "ab") as f:
            f.write(extra_outputs(names))


# ---------------------------------------------------------------- sizes

def dim_symbols(model: Model, feeds: dict) -> dict:
    """Symbolic dim name -> its value in these feeds, from the graph inputs."""
    symbols = {}
    for value in model.graph.inputs:
        shape = (value.type or {}).get("shape")
        array = feeds.get(value.name)
        if shape is None or array is None or len(shape) != np.ndim(array):
            continue
        for dim, size in zip(shape, np.shape(array)):
            if isinstance(dim, str) and dim:
                symbols.setdefault(dim, int(size))
    return symbols


def estimated_bytes(model: Model, name: str, symbols: dict) -> Optional[int]:
    """Bytes of a value from its inferred type, symbolic dims resolved from
    the feeds; None when a dim or the dtype is unknown."""
    value = model.graph.value(name)
    t = value.type if value is not None else None
    if not t or t.get("kind") != "tensor" or t.get("shape") is None:
        return None
    try:
        from onnx import helper

        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t["elem_type"])).itemsize
    except Exception:  # an elem_type numpy has no dtype for
        return None
    count = 1
    for dim in t["shape"]:
        if isinstance(dim, str):
            dim = symbols.get(dim)
        if not isinstance(dim, int) or dim < 0:
            return None
        count *= dim
    return count * itemsize


def plan_groups(names: list, sizes: dict, budget: int, group_size: Optional[int], guess: int) -> list:
    """Splits `names` (in order) into groups whose tensors fit in `budget`
    bytes (counting both models' copies), at most `group_size` names each
    when given. A name of unknown size counts as `guess` bytes. A tensor
    larger than the budget goes alone."""
    groups, current, used = [], [], 0
    for name in names:
        size = 2 * (sizes.get(name) if sizes.get(name) is not None else guess)
        full = (group_size is not None and len(current) >= group_size) or (current and used + size > budget)
        if full:
            groups.append(current)
            current, used = [], 0
        current.append(name)
        used += size
    if current:
        groups.append(current)
    return groups


def measured_guess(measured: dict, default: int) -> int:
    """Bytes to assume for a tensor of unknown size: the mean of those seen."""
    if not measured:
        return default
    return int(math.ceil(sum(measured.values()) / len(measured)))
