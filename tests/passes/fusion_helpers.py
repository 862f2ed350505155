"""Shared by the Conv/Gemm/Pad rule tests: ONNX-text models with numpy
weights, one rule run (after shape inference) with the IR and the checker
checked, and the original and rewritten model compared in onnxruntime."""

import numpy as np
import onnx
from onnx import numpy_helper

import pyonnxopt
from pyonnxopt.passes import PassOptions, get

from helpers import outputs, parse


def with_weights(text: str, opset: int = 17, **weights) -> onnx.ModelProto:
    """The model in `text` with `weights` (numpy arrays) as initializers."""
    proto = parse(text, opset)
    for name, array in weights.items():
        proto.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
    return proto


def rng_weights(seed: int = 0, dtype=np.float32, positive: tuple = ("var",), **shapes) -> dict:
    """Seeded normal arrays of the given shapes; names in `positive` are |x| + 0.5."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        a = rng.standard_normal(shape)
        out[name] = (np.abs(a) + 0.5 if name in positive else a).astype(dtype)
    return out


def run_rule(name: str, proto: onnx.ModelProto, shapes: bool = True, valid: bool = True, **options):
    """(Model, PassResult) of rule `name` on `proto` (`options`: PassOptions
    fields), shapes inferred first; the result passes onnx's full check
    unless the model was `valid=False` to start with (a refusal on a model
    the checker rejects)."""
    m = pyonnxopt.load(proto)
    if shapes:
        get("infer_shapes").run(m)
    result = get(name).run(m, PassOptions(**options))
    assert m.check_invariants() == []
    if valid:
        onnx.checker.check_model(m.to_onnx(), full_check=True)
    return m, result


def reference_outputs(model, feeds: dict) -> list:
    """onnx's reference evaluator (for types onnxruntime has no CPU kernel for)."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model.to_onnx() if isinstance(model, pyonnxopt.Model) else model).run(None, feeds)


def assert_same_outputs(before: onnx.ModelProto, after: pyonnxopt.Model, rtol: float = 1e-5, atol: float = 1e-5,
                        seed: int = 0, **fixed_shapes) -> None:
    """Every graph output equal within the tolerance on seeded normal inputs
    (shapes from the graph inputs; `fixed_shapes` for symbolic ones)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in before.graph.input:
        if i.name in {t.name for t in before.graph.initializer}:
            continue
        t = i.type.tensor_type
        shape = fixed_shapes.get(i.name) or [d.dim_value for d in t.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    want, have = outputs(before, feeds), outputs(after, feeds)
    assert len(want) == len(have)
    for w, h in zip(want, have):
        assert h.shape == w.shape and h.dtype == w.dtype
        np.testing.assert_allclose(h, w, rtol=rtol, atol=atol)


def fused_by(rule: str, proto: onnx.ModelProto):
    """run_rule that must fire and keep the outputs (rtol = atol = 1e-5)."""
    m, r = run_rule(rule, proto)
    assert r.modified, r.stats["near_misses"]
    assert_same_outputs(proto, m)
    return m, r


def near_misses(result) -> list:
    """The reasons after each near miss's node id."""
    return [line.split(": ", 1)[1] for line in result.stats["near_misses"]]
