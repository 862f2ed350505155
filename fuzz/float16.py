"""A float32 model turned into the same model in float16, for
fuzz/fuzz_pipeline.py (`--dtype float16`): big models ship in half
precision, and the rules' constants, weight math and type checks meet
float16 there (a GELU constant rounded to half, an epsilon that underflows,
a weight folded in half).

Every float32 type, tensor and Cast target of the graph and its subgraphs
becomes float16: inputs, outputs, value_info, initializers, Constant and
ConstantOfShape values, `value_float(s)`. Inputs that the ONNX standard
wants in float32 whatever the data's type (Resize's and Upsample's scales)
would make the result invalid; onnxruntime refuses it, and the seed counts
as invalid, as every model onnxruntime refuses does.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pyonnxopt.proto_graphs import graphs


def to_float16(model: onnx.ModelProto, feeds: dict) -> tuple:
    """(model, feeds) in float16; the arguments are left as they were."""
    half = onnx.ModelProto()
    half.CopyFrom(model)
    for graph in graphs(half.graph):
        _graph(graph)
    return half, {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}


def _graph(graph: onnx.GraphProto) -> None:
    """One graph's types, tensors and casts (its subgraphs are graphs of their own)."""
    for info in [*graph.input, *graph.output, *graph.value_info]:
        _type(info.type)
    for tensor in graph.initializer:
        _halve(tensor)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                _halve(attr.t)
            elif node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT:
                attr.i = TensorProto.FLOAT16
        if node.op_type == "Constant" and node.attribute[0].name in ("value_float", "value_floats"):
            attr = node.attribute[0]
            value = np.array(attr.f if attr.name == "value_float" else list(attr.floats), np.float16)
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(value)))


def _type(t: onnx.TypeProto) -> None:
    kind = t.WhichOneof("value")
    if kind == "tensor_type" and t.tensor_type.elem_type == TensorProto.FLOAT:
        t.tensor_type.elem_type = TensorProto.FLOAT16
    elif kind in ("sequence_type", "optional_type"):
        _type(getattr(t, kind).elem_type)


def _halve(tensor: onnx.TensorProto) -> None:
    if tensor.data_type == TensorProto.FLOAT:
        with np.errstate(over="ignore"):  # beyond half's range: infinite, as a plain cast makes it
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float16), tensor.name))
