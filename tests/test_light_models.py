"""The onnx wheel's light model-zoo models (IR 3, opset 9: every
initializer listed among the inputs, weights written as ConstantOfShape)
optimize, pass the check in onnxruntime and lose nodes."""

import glob
import os

import onnx
import pytest

from pyonnxopt.optimize import optimize

LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "*.onnx")))


@pytest.mark.parametrize("path", LIGHT, ids=lambda p: os.path.basename(p)[len("light_"):-len(".onnx")])
def test_a_light_zoo_model_optimizes_and_checks(path, tmp_path):
    model, report = optimize(path, str(tmp_path / "out.onnx"))
    assert report["check"]["first_mismatch"] is None and report["check"]["outputs"] >= 1
    assert report["nodes_after"] < report["nodes_before"] and model.ir_version == 4
    onnx.checker.check_model(str(tmp_path / "out.onnx"), full_check=True)


def test_the_light_models_are_there():
    assert len(LIGHT) >= 5
