"""Shared by the transformer fusion tests: one rule run on a text model
(after shape inference, as in the pipeline), outputs compared with the
original in onnxruntime, and small torch exports."""

import io
import math
import warnings

from typing import Optional

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


def fuse(rule: str, model, opset: int = 20, target: str = "onnx", infer: bool = True, full_check: bool = True,
         **options):
    """Runs `rule` once on `model` (ONNX text or ModelProto); checks the IR
    and (`full_check`) onnx.checker; `options` are other PassOptions fields.
    Returns (Model, PassResult, original ModelProto)."""
    proto = parse(model, opset) if isinstance(model, str) else model
    m = pyonnxopt.load(proto)
    if infer:
        get("infer_shapes").run(m)
    r = get(rule).run(m, PassOptions(target=target, **options))
    assert m.check_invariants() == []
    if full_check:
        onnx.checker.check_model(m.to_onnx(), full_check=True)
    return m, r, proto


def assert_same_outputs(original, fused, given: Optional[dict] = None, *, rtol: float, atol: float,
                        seed: int = 0) -> None:
    """Both models on the same seeded inputs (those `given` as they are) in
    onnxruntime (CPU, its own optimizations off): equal outputs within the
    tolerance."""
    want_s = session(original.SerializeToString() if isinstance(original, onnx.ModelProto) else original)
    feeds = {**random_inputs(want_s, seed), **(given or {})}
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


def bert_self_attention(sdpa: bool = False):
    """HF BERT's self-attention (hidden 32, 4 heads): project, split heads,
    attend, merge heads; `sdpa` as transformers' sdpa attention (torch's
    NaN guard, a [B, T] boolean padding mask), else written out with an
    additive mask."""
    import torch

    class SelfAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (torch.nn.Linear(32, 32) for _ in range(3))

        def forward(self, x, mask):
            b, s, _ = x.shape
            q, k, v = (f(x).view(b, s, 4, 8).transpose(1, 2) for f in (self.q, self.k, self.v))
            if sdpa:
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
            else:
                y = (q @ k.transpose(-1, -2) / math.sqrt(8) + mask).softmax(-1) @ v
            return y.transpose(1, 2).reshape(b, s, 32)

    return SelfAttention()
