"""Every native folding kernel against the onnx backend node tests.

Each case whose nodes all have a native kernel (`_core.fold_kernel_ops()`,
whatever it lists) is made all-constant: its test inputs become Constant
nodes and the graph has no inputs. fold_constants then either folds an
output, which must equal the reference output (exactly for integers and
bools, within the backend tests' rtol 1e-3 / atol 1e-7 for floats) and,
where onnxruntime runs the original case, onnxruntime's output bit for bit
(a NaN's payload aside), or leaves its node in place (a kernel may refuse a
case). A kernel that refuses every case of its op fails
test_every_kernel_folds_some_cases.
"""

from __future__ import annotations

import collections
import functools
import importlib
import os
import re

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from pyonnxopt import _core

from helpers import outputs as ort_outputs
from helpers import run_pass, same_bits

KERNEL_OPS = frozenset(_core.fold_kernel_ops())
RTOL, ATOL = 1e-3, 1e-7  # what the onnx backend runner uses for node tests


def _case_modules() -> list[str]:
    """The modules of onnx.backend.test.case.node that make a node of a
    kernel op (importing all of them takes half a minute of pooling math)."""
    import onnx.backend.test.case.node as node_cases

    folder = os.path.dirname(node_cases.__file__)
    found = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py") or name.startswith("_"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            ops = set(re.findall(r"make_node\(\s*[\"'](\w+)[\"']", f.read()))
        if ops & KERNEL_OPS:
            found.append(name[:-3])
    return found


def _collect() -> list:
    import onnx.backend.test.case.node as node_cases

    registry = getattr(node_cases, "_NodeTestCases", None)
    if registry is None:  # an onnx without the module-level list: generate every case
        return list(node_cases.collect_testcases(None))
    for name in _case_modules():
        importlib.import_module(f"{node_cases.__name__}.{name}")
    return list(registry)


def _eligible(case) -> bool:
    nodes = case.model.graph.node
    return bool(nodes) and all(
        n.domain in ("", "ai.onnx") and n.op_type in KERNEL_OPS
        and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute)
        for n in nodes)


with np.errstate(all="ignore"):
    CASES = {c.name: c for c in _collect() if _eligible(c)}


def _op(case) -> str | None:
    """The op of a one-node case (the per-op counts are over those)."""
    nodes = case.model.graph.node
    return nodes[0].op_type if len(nodes) == 1 else None


def _non_tensor(case) -> str | None:
    for vi in list(case.model.graph.input) + list(case.model.graph.output):
        if vi.type.WhichOneof("value") != "tensor_type":
            return f"'{vi.name}' is a {vi.type.WhichOneof('value')}, not a tensor"
    return None


def _constant_model(case, inputs) -> onnx.ModelProto:
    """The case with its inputs as Constant nodes and no graph inputs. IR 3
    cases move to IR 4, where results can be initializers: an IR 3 result
    would have to be a Constant, which before opset 9 holds floats only."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    model.ir_version = max(model.ir_version, 4)
    g = model.graph
    consts = []
    for vi, value in zip(g.input, inputs):
        t = value if isinstance(value, onnx.TensorProto) else numpy_helper.from_array(np.asarray(value))
        t = onnx.TensorProto.FromString(t.SerializeToString())
        t.name = ""
        consts.append(helper.make_node("Constant", [], [vi.name], value=t))
    nodes = consts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    del g.input[:]
    return model


def _constants(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            values[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return values


def _feeds(case, inputs) -> dict:
    return {vi.name: (numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v))
            for vi, v in zip(case.model.graph.input, inputs)}


def _close(have: np.ndarray, want: np.ndarray) -> None:
    assert have.dtype == want.dtype, f"dtype {have.dtype}, reference {want.dtype}"
    assert have.shape == want.shape, f"shape {have.shape}, reference {want.shape}"
    if want.dtype.kind == "f":
        np.testing.assert_allclose(have, want, rtol=RTOL, atol=ATOL)
    elif want.dtype.name.startswith(("bfloat16", "float8", "float4")):  # ml_dtypes: compared as float32, NaN == NaN
        np.testing.assert_allclose(have.astype(np.float32), want.astype(np.float32), rtol=RTOL, atol=ATOL)
    else:
        np.testing.assert_array_equal(have, want)


@functools.cache
def fold_case(name: str) -> tuple[int, int]:
    """Runs fold_constants on every data set of the case; checks each folded
    output. Returns (outputs folded, outputs left)."""
    case = CASES[name]
    folded = left = 0
    for inputs, expected in case.data_sets:
        m, result = run_pass("fold_constants", _constant_model(case, inputs), full_check=False)
        onnx.checker.check_model(m.to_onnx())
        values = _constants(m.to_onnx())
        try:
            from_ort = ort_outputs(case.model, _feeds(case, inputs))
        except Exception:  # onnxruntime does not run the original: the reference alone decides
            from_ort = None
        for k, vi in enumerate(case.model.graph.output):
            if vi.name not in values:
                left += 1
                continue
            folded += 1
            have = values[vi.name]
            want = expected[k] if not isinstance(expected[k], onnx.TensorProto) else numpy_helper.to_array(expected[k])
            want = np.asarray(want)
            if from_ort is not None:
                assert same_bits(have, np.asarray(from_ort[k])), (
                    f"{vi.name}: folded {have!r}, onnxruntime {from_ort[k]!r}")
            _close(have, want)
        assert not result.stats["refused"] or left, result.stats["refused"]
    return folded, left


@pytest.mark.parametrize("name", sorted(CASES))
def test_folds_to_the_reference_output(name):
    reason = _non_tensor(CASES[name])
    if reason:
        pytest.skip(f"non-tensor input or output: {reason}")
    fold_case(name)


def _per_op() -> dict[str, list[str]]:
    by_op = collections.defaultdict(list)
    for name, case in CASES.items():
        op = _op(case)
        if op and not _non_tensor(case):
            by_op[op].append(name)
    return by_op


@pytest.mark.parametrize("op", sorted(KERNEL_OPS))
def test_every_kernel_folds_some_cases(op):
    names = _per_op().get(op)
    if not names:
        pytest.skip(f"the onnx backend tests have no one-node {op} case with tensor inputs")
    counts = {n: fold_case(n) for n in names}
    folded = [n for n, (f, _) in counts.items() if f]
    assert folded, f"{op}: no case folds ({len(names)} cases)"
    # Sub-byte and 8-bit float types are outside what the kernels claim.
    names = [n for n in names if n in folded or not re.search(r"FLOAT8|FLOAT4|INT4|INT2|E8M0", n)]
    # A kernel that declines most of its op's cases is not pulling its weight:
    # at least a third of them fold.
    assert 3 * len(folded) >= len(names), f"{op}: only {folded} of {sorted(names)} fold"


def test_cases_were_found():
    assert len(CASES) > 100 and {"Add", "ReduceSum", "Where"} <= {_op(c) for c in CASES.values()}
