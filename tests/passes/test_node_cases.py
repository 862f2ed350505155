"""The default pipeline on every onnx node conformance case (the wheel ships
their generators, not their data: ~1,900 cases, built in memory), and
`--opset 23` on those below it. Where onnxruntime runs the original, the
optimized model gives the same outputs on the case's inputs; the IR stays
consistent and the checker passes."""

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from pyonnxopt.errors import Error
from pyonnxopt.opset import default_opset
from pyonnxopt.optimize import optimize
from pyonnxopt.passes import run_passes


def _cases() -> list:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():  # the generators overflow casts on purpose
        warnings.simplefilter("ignore")
        return [c for c in node.collect_testcases() if c.data_sets]


CASES = _cases()


def default_opset_of(case) -> int:
    return next((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _session(model: bytes):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def _run(session, inputs: list) -> list:
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))


def _same(want, have) -> None:
    if isinstance(want, list):  # a sequence output
        assert isinstance(have, list) and len(have) == len(want)
        for w, h in zip(want, have):
            _same(w, h)
        return
    want, have = np.asarray(want), np.asarray(have)
    assert want.shape == have.shape and want.dtype == have.dtype
    if want.dtype.kind in "fc":
        narrow = want.dtype.itemsize <= 2
        np.testing.assert_allclose(have.astype(np.float64), want.astype(np.float64), equal_nan=True,
                                   rtol=1e-2 if narrow else 1e-4, atol=1e-3 if narrow else 1e-6)
    else:
        np.testing.assert_array_equal(have, want)


def test_the_cases_are_there():
    assert len(CASES) > 1500


def _original_outputs(case, original: bytes) -> tuple:
    try:
        inputs = list(case.data_sets[0][0])
        return inputs, _run(_session(original), inputs)
    except Exception as e:  # types or ops onnxruntime lacks: nothing to compare with
        pytest.skip(f"onnxruntime cannot run the original: {str(e).splitlines()[0][:80]}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_outputs_survive_the_passes(case):
    original = case.model.SerializeToString()
    m, report = run_passes(original)
    assert report.converged and m.check_invariants() == []
    onnx.checker.check_model(m.to_onnx())
    inputs, want = _original_outputs(case, original)
    for w, h in zip(want, _run(_session(m.to_bytes()), inputs)):
        _same(w, h)


@pytest.mark.parametrize("case", [c for c in CASES if 0 < default_opset_of(c) < 23], ids=lambda c: c.name)
def test_outputs_survive_opset_23(case):
    original = case.model.SerializeToString()
    inputs, want = _original_outputs(case, original)
    try:
        m, _ = optimize(original, opset=23, check_outputs=False)
    except Error as e:  # refused, in one line: nothing written
        pytest.skip(str(e)[:120])
    assert default_opset(m) == 23 and m.check_invariants() == []
    for w, h in zip(want, _run(_session(m.to_bytes()), inputs)):
        _same(w, h)
