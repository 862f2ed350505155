"""Sizes a model's weights impose on the dynamic dims of its inputs.

An exporter may leave every dim of an input dynamic (optimum writes a ViT's
`pixel_values` as [batch_size, num_channels, height, width]); random inputs
of size 1 then give one channel and onnxruntime fails in the first Conv. The
weights that read the input say what those dims must be:

    Conv(x, W[M, C/group, ...])               x dim 1 = C
    ConvTranspose(x, W[C, M/group, ...])      x dim 1 = C
    MatMul(x, B[K, N])                        x dim -1 = K
    MatMul(A[M, K], x)                        x dim -2 = K
    Gemm(x, B)                                x dim 1 (0 with transA) = B's K
    BatchNormalization, InstanceNormalization(x, scale[C])   x dim 1 = C
    LayerNormalization(x, scale) at axis -1   x dim -1 = scale's last

Readers count where they read the input itself or through Cast/Identity.
Readers that disagree give no size (the model cannot run either way).
"""

from __future__ import annotations

from typing import Dict, Iterator, Optional, Tuple

from pyonnxopt.model import Model

_PASS_THROUGH = {"Cast", "Identity"}


def _weight_dims(v) -> Optional[list]:
    """A constant's dims: an initializer's (not one a graph input overrides)
    or a Constant node's tensor."""
    if v is None:
        return None
    if v.initializer is not None and not v.is_graph_input:
        return list(v.initializer.dims)
    p = v.producer
    if p is not None and p.op_type == "Constant" and p.domain in ("", "ai.onnx"):
        t = p.attributes.get("value")
        return list(t.dims) if hasattr(t, "dims") else None
    return None


def _readers(v, depth: int = 0) -> Iterator[Tuple[object, int]]:
    """(node, input index) of every reader of v, past Cast and Identity."""
    for node, index in v.uses:
        if node.op_type in _PASS_THROUGH and node.domain in ("", "ai.onnx") and depth < 8 and node.outputs[0]:
            yield from _readers(node.outputs[0], depth + 1)
        else:
            yield node, index


def _implied(node, index: int, rank: int) -> Optional[Tuple[int, int]]:
    """(axis, size) that `node` reading the input at `index` needs, if any."""
    if node.domain not in ("", "ai.onnx"):
        return None
    op, ins, attrs = node.op_type, node.inputs, node.attributes
    other = _weight_dims(ins[1 - index]) if op in ("MatMul", "Gemm") and len(ins) > 1 else None
    if op == "Conv" and index == 0 and len(ins) > 1:
        w = _weight_dims(ins[1])
        return (1, w[1] * int(attrs.get("group", 1))) if w and len(w) >= 3 else None
    if op == "ConvTranspose" and index == 0 and len(ins) > 1:
        w = _weight_dims(ins[1])
        return (1, w[0]) if w and len(w) >= 3 else None
    if op == "MatMul" and other is not None and len(other) == 2 and rank >= 2:
        return (rank - 1, other[0]) if index == 0 else (rank - 2, other[1])
    if op == "Gemm" and index == 0 and other is not None and len(other) == 2 and rank == 2:
        k = other[1] if attrs.get("transB", 0) else other[0]
        return (0 if attrs.get("transA", 0) else 1, k)
    if op in ("BatchNormalization", "InstanceNormalization") and index == 0 and len(ins) > 1 and rank >= 2:
        scale = _weight_dims(ins[1])
        return (1, scale[0]) if scale and len(scale) == 1 else None
    if op == "LayerNormalization" and index == 0 and len(ins) > 1 and attrs.get("axis", -1) in (-1, rank - 1):
        scale = _weight_dims(ins[1])
        return (rank - 1, scale[-1]) if scale and len(scale) == 1 else None
    return None


def weight_implied_dims(model: Model) -> Dict[str, Dict[int, int]]:
    """{input name: {axis: size}} for the main graph's inputs' dynamic dims
    that the weights reading them fix (see the module docstring)."""
    graph = model._core.graph
    found: Dict[str, Dict[int, int]] = {}
    for v in graph.inputs if graph is not None else []:
        shape = v.type.get("shape")
        if v.initializer is not None or shape is None:
            continue
        sizes: Dict[int, set] = {}
        for node, index in _readers(v):
            axis_size = _implied(node, index, len(shape))
            if axis_size and not isinstance(shape[axis_size[0]], int) and axis_size[1] > 0:
                sizes.setdefault(axis_size[0], set()).add(axis_size[1])
        agreed = {axis: s.pop() for axis, s in sizes.items() if len(s) == 1}
        if agreed:
            found[v.name] = agreed
    return found


def with_implied(shapes: Dict[str, Optional[list]], implied: Dict[str, Dict[int, int]]) -> Dict[str, Optional[list]]:
    """Declared input shapes ({name: dims, int | symbol | None}) with the
    dims `implied` fixes written in as ints; a named one wherever any input
    names it."""
    named = {shape[axis]: size for name, shape in shapes.items() if shape
             for axis, size in implied.get(name, {}).items() if axis < len(shape) and isinstance(shape[axis], str)}

    def written(name: str, shape: list) -> list:
        fixed = implied.get(name, {})
        return [fixed.get(axis, named.get(d, d) if isinstance(d, str) else d) for axis, d in enumerate(shape)]

    return {name: None if shape is None else written(name, shape) for name, shape in shapes.items()}
