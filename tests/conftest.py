import os

import onnx
import pytest
from onnx import TensorProto, helper

ONNX_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


@pytest.fixture
def cnn_path(tmp_path):
    """The demo CNN (pyonnxopt.examples.tiny_cnn) saved as tmp_path/cnn.onnx."""
    from pyonnxopt.examples import tiny_cnn

    path = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(), path)
    return path


@pytest.fixture
def if_model():
    """Main graph with an If whose branches read outer-scope values."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    then_out = helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2])
    else_out = helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2])
    then_g = helper.make_graph([helper.make_node("Add", ["sq", "w"], ["then_out"], name="then_add")], "then", [], [then_out])
    else_g = helper.make_graph([helper.make_node("Neg", ["sq"], ["else_out"], name="else_neg")], "else", [], [else_out])
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
        helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g),
    ]
    w = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    g = helper.make_graph(nodes, "main", [x, cond], [y], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
