"""Shared by the pass tests: models from ONNX text, one pass run with the IR
checked, the graph as (op, inputs, outputs), and onnxruntime outputs."""

import onnx
from onnx import parser

import pyonnxopt
from pyonnxopt.check import session
from pyonnxopt.passes import PassOptions, get


def parse(text: str, opset: int = 17) -> onnx.ModelProto:
    return parser.parse_model(f'<ir_version: 8, opset_import: ["" : {opset}]>' + text)


def run_pass(name: str, model, full_check: bool = True, **options):
    """`model` as ONNX graph text (opset 17) or a ModelProto; `options` are
    PassOptions fields. Returns (Model, PassResult)."""
    proto = parse(model) if isinstance(model, str) else model
    m = pyonnxopt.load(proto)
    result = get(name).run(m, PassOptions(**options))
    assert m.check_invariants() == []
    if full_check:
        onnx.checker.check_model(m.to_onnx(), full_check=True)
    return m, result


def structure(m: pyonnxopt.Model) -> list:
    return [(n.op_type, [v.name if v else "" for v in n.inputs], [v.name if v else "" for v in n.outputs])
            for n in m.graph.nodes]


def ops(m: pyonnxopt.Model) -> list:
    return [n.op_type for n in m.graph.nodes]


def outputs(model, feeds: dict) -> list:
    """onnxruntime outputs, its own graph optimizations off (a ModelProto, Model or bytes)."""
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    elif isinstance(model, pyonnxopt.Model):
        model = model.to_bytes()
    return session(model).run(None, feeds)


def same_bits(have, want) -> bool:
    """Equal dtype, shape and bits (floats: NaN where the other has NaN, any payload)."""
    import numpy as np

    if have.dtype != want.dtype or have.shape != want.shape:
        return False
    if have.dtype.kind != "f":
        return np.array_equal(have, want)
    nan = np.isnan(have)
    bits = np.dtype(f"u{have.dtype.itemsize}")
    return np.array_equal(nan, np.isnan(want)) and np.array_equal(have[~nan].view(bits), want[~nan].view(bits))


def random_feeds(model, seed: int = 0, symbolic: int = 2) -> dict:
    """Seeded inputs for every graph input without an initializer; a
    symbolic dim is `symbolic`."""
    import numpy as np
    from onnx import helper

    proto = model if isinstance(model, onnx.ModelProto) else model.to_onnx()
    rng = np.random.default_rng(seed)
    given = {t.name for t in proto.graph.initializer}
    feeds = {}
    for i in proto.graph.input:
        if i.name in given:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else symbolic for d in t.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        if dtype == np.bool_:
            feeds[i.name] = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            feeds[i.name] = rng.integers(0, 5, shape).astype(dtype)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    return feeds
