import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def matmul_chain(depth: int, width: int = 256, rows: int = 64, seed: int = 0) -> onnx.ModelProto:
    """x[rows, width] through `depth` MatMul+Relu layers: work grows linearly with depth."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for k in range(depth):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{k}"], [f"m{k}"], name=f"matmul{k}"))
        nodes.append(helper.make_node("Relu", [f"m{k}"], [f"h{k}"], name=f"relu{k}"))
        prev = f"h{k}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", width])
    model = helper.make_model(helper.make_graph(nodes, f"chain{depth}", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def chain(tmp_path):
    """chain(depth) -> path of a saved matmul_chain model."""
    def make(depth: int, name: str = None) -> str:
        path = tmp_path / (name or f"chain{depth}.onnx")
        onnx.save(matmul_chain(depth), path)
        return str(path)
    return make
