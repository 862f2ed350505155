"""Shared by the transformer fusion tests: one rule run on a text model
(after shape inference, as in the pipeline), outputs compared with the
original in onnxruntime, and small torch exports."""

import io
import warnings

import numpy as np
import onnx

import pyonnxopt
from pyonnxopt.check import random_inputs, session
from pyonnxopt.passes import PassOptions, get

from helpers import parse


def model_text(text: str, opset: int, ms: bool = False) -> onnx.ModelProto:
    if not ms:
        return parse(text, opset)
    return onnx.parser.parse_model(
        f'<ir_version: 10, opset_import: ["" : {opset}, "com.microsoft" : 1]>' + text)


def as_dtype(proto: onnx.ModelProto, dtype) -> onnx.ModelProto:
    """The float model with its float initializers and graph inputs/outputs
    in `dtype` (the ONNX text parser has no float16 literals)."""
    from onnx import helper, numpy_helper

    code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for i, t in enumerate(out.graph.initializer):
        a = numpy_helper.to_array(t)
        if a.dtype == np.float32:
            out.graph.initializer[i].CopyFrom(numpy_helper.from_array(a.astype(dtype), t.name))
    for v in list(out.graph.input) + list(out.graph.output):
        if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            v.type.tensor_type.elem_type = code
    return out


def fuse(rule: str, model, opset: int = 20, target: str = "onnx", infer: bool = True):
    """Runs `rule` once on `model` (ONNX text or ModelProto); checks the IR
    and onnx.checker. Returns (Model, PassResult, original ModelProto)."""
    proto = parse(model, opset) if isinstance(model, str) else model
    m = pyonnxopt.load(proto)
    if infer:
        get("infer_shapes").run(m)
    r = get(rule).run(m, PassOptions(target=target))
    assert m.check_invariants() == []
    onnx.checker.check_model(m.to_onnx(), full_check=True)
    return m, r, proto


def assert_same_outputs(original, fused, rtol: float, atol: float, seed: int = 0) -> None:
    """Both models on the same seeded inputs in onnxruntime (CPU, its own
    optimizations off): equal outputs within the tolerance."""
    want_s = session(original.SerializeToString() if isinstance(original, onnx.ModelProto) else original)
    feeds = random_inputs(want_s, seed)
    want = want_s.run(None, feeds)
    have = session(fused.to_bytes()).run(None, feeds)
    assert len(have) == len(want)
    for h, w in zip(have, want):
        assert h.dtype == w.dtype and h.shape == w.shape
        np.testing.assert_allclose(h.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def near(result, text: str) -> bool:
    return any(text in x for x in result.stats["near_misses"])


def export(module, args, opset: int, dynamo: bool = False, **kw) -> onnx.ModelProto:
    """A torch export in memory, the exporter's chatter silenced."""
    import contextlib

    import torch

    f = io.BytesIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(module.eval(), args, opset_version=opset, dynamo=True, **kw)
            return program.model_proto
        torch.onnx.export(module.eval(), args, f, opset_version=opset, dynamo=False, **kw)
    return onnx.load_from_string(f.getvalue())


def optimized(proto: onnx.ModelProto, target: str = "onnx"):
    """The default pipeline, checked against the original; (Model, report)."""
    return pyonnxopt.optimize(proto, target=target)
