"""The default pipeline (every pass, to a fixed point) on the onnx wheel's
suites (simple, pytorch-operator, pytorch-converted, real): onnxruntime still
gives the stored reference outputs, the IR stays consistent and the checker
passes."""

import glob
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from pyonnxopt.passes import run_passes

ROOT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def _session(model, opts):
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "*", "*", "model.onnx"))),
                         ids=lambda p: p.split(os.sep)[-2])
def test_reference_outputs_survive_the_passes(path):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    m, report = run_passes(path)  # also when onnxruntime cannot run it: folding then skips and says so
    assert report.converged and m.check_invariants() == []
    if onnx.load(path).ir_version >= 3:
        onnx.checker.check_model(m.to_onnx())
    try:
        _session(path, opts)
    except Exception as e:  # the original does not run either: no outputs to compare
        pytest.skip(f"onnxruntime cannot run the original: {str(e)[:80]}")
    data = os.path.join(os.path.dirname(path), "test_data_set_0")
    inputs = [numpy_helper.to_array(onnx.load_tensor(p)) for p in sorted(glob.glob(os.path.join(data, "input_*.pb")))]
    outputs = [numpy_helper.to_array(onnx.load_tensor(p)) for p in sorted(glob.glob(os.path.join(data, "output_*.pb")))]
    sess = _session(m.to_bytes(), opts)
    got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], inputs)))
    for want, have in zip(outputs, got):
        if want.dtype.kind in "fc":
            np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-5)
        else:
            np.testing.assert_array_equal(have, want)
