"""Small models for the verify tests: a MatMul/Relu chain whose layers have
known names, and variants of it (a changed weight, renamed values, a
reshaped layer)."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)
W1 = (2 * np.eye(4) + 0.1 * RNG.standard_normal((4, 4))).astype(np.float32)  # keeps most of x's sign
W2 = RNG.standard_normal((4, 4)).astype(np.float32)


def chain(w1=W1, w2=W2, names=("h1", "r1", "h2"), batch=1, dtype=np.float32, bias=None) -> onnx.ModelProto:
    """y = Relu(MatMul(Relu(MatMul(x, w1)), w2)) [+ bias]; the intermediates
    are named `names` (h1, r1, h2), the nodes mm1, relu1, mm2, relu2."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    h1, r1, h2 = names
    nodes = [helper.make_node("MatMul", ["x", "w1"], [h1], name="mm1"),
             helper.make_node("Relu", [h1], [r1], name="relu1"),
             helper.make_node("MatMul", [r1, "w2"], [h2], name="mm2")]
    inits = [numpy_helper.from_array(np.asarray(w1, dtype), "w1"), numpy_helper.from_array(np.asarray(w2, dtype), "w2")]
    if bias is None:
        nodes.append(helper.make_node("Relu", [h2], ["y"], name="relu2"))
    else:
        nodes.append(helper.make_node("Relu", [h2], ["r2"], name="relu2"))
        nodes.append(helper.make_node("Add", ["r2", "b"], ["y"], name="add"))
        inits.append(numpy_helper.from_array(np.full([4], bias, dtype), "b"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", elem, [batch, 4])],
                              [helper.make_tensor_value_info("y", elem, [batch, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def reshaped_h1() -> onnx.ModelProto:
    """chain(), but h1 is computed as [4] instead of [1, 4] (and reshaped back after the Relu)."""
    shape4 = numpy_helper.from_array(np.array([4], np.int64), "shape4")
    shape14 = numpy_helper.from_array(np.array([1, 4], np.int64), "shape14")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["t"], name="mm1"),
             helper.make_node("Reshape", ["t", "shape4"], ["h1"], name="flat"),
             helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
             helper.make_node("Reshape", ["r1", "shape14"], ["r1b"], name="unflat"),
             helper.make_node("MatMul", ["r1b", "w2"], ["h2"], name="mm2"),
             helper.make_node("Relu", ["h2"], ["y"], name="relu2")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(W2, "w2"), shape4, shape14])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def with_custom_op() -> onnx.ModelProto:
    """A model onnxruntime cannot load (an op of an unknown domain)."""
    graph = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"], domain="example.custom")], "custom",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)],
                             ir_version=8)


def random_noise() -> onnx.ModelProto:
    """y = x + RandomNormalLike(x): different on every run."""
    graph = helper.make_graph([helper.make_node("RandomNormalLike", ["x"], ["n"], name="noise"),
                               helper.make_node("Add", ["x", "n"], ["y"], name="add")], "noise",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)
