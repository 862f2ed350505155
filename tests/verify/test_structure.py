import numpy as np
from onnx import helper, numpy_helper
from verify_models import chain

import pyonnxopt
from pyonnxopt.verify.structure import node_id, structure_diff


def test_identical_models_differ_in_nothing():
    s = structure_diff(pyonnxopt.load(chain()), pyonnxopt.load(chain()))
    assert s["nodes"] == [4, 4] and s["op_counts"] == {"MatMul": [2, 2], "Relu": [2, 2]}
    assert s["removed_nodes"] == [] and s["added_nodes"] == []
    assert s["initializers"] == [2, 2] and s["initializer_bytes"] == [128, 128]
    assert s["inputs"] == [{"name": "x", "before": {"dtype": "float32", "shape": [1, 4]},
                            "after": {"dtype": "float32", "shape": [1, 4]}}]


def test_removed_and_added_nodes_op_counts_and_weights():
    original = chain(bias=0.5)  # ... relu2 -> add(r2, b)
    optimized = chain()
    optimized.graph.node.append(helper.make_node("Identity", ["y"], ["y2"]))  # unnamed
    optimized.graph.output.append(helper.make_tensor_value_info("y2", 1, [1, "N"]))
    s = structure_diff(pyonnxopt.load(original), pyonnxopt.load(optimized))
    assert s["nodes"] == [5, 5]
    assert s["op_counts"] == {"MatMul": [2, 2], "Relu": [2, 2], "Add": [1, 0], "Identity": [0, 1]}
    assert s["removed_nodes"] == [{"name": "add", "op_type": "Add"}]
    assert s["added_nodes"] == [{"name": "Identity->y2", "op_type": "Identity"}]
    assert s["initializers"] == [3, 2] and s["initializer_bytes"] == [144, 128]
    assert s["outputs"][1] == {"name": "y2", "before": None, "after": {"dtype": "float32", "shape": [1, "N"]}}


def test_input_shape_and_dtype_changes_are_listed():
    s = structure_diff(pyonnxopt.load(chain(batch="N")), pyonnxopt.load(chain(batch=1, dtype=np.float16)))
    assert s["inputs"] == [{"name": "x", "before": {"dtype": "float32", "shape": ["N", 4]},
                            "after": {"dtype": "float16", "shape": [1, 4]}}]
    assert s["initializer_bytes"] == [128, 64]


def test_node_ids_follow_the_native_naming():
    m = chain()
    m.graph.node[1].name = ""
    model = pyonnxopt.load(m)
    assert [node_id(n) for n in model.graph.nodes] == ["mm1", "Relu->r1", "mm2", "relu2"]


def test_initializer_bytes_count_subgraph_weights(if_model):
    s = structure_diff(pyonnxopt.load(if_model), pyonnxopt.load(if_model))
    assert s["nodes"] == [4, 4]  # Mul, If and each branch's node
    assert s["initializer_bytes"] == [8, 8]
    w = numpy_helper.from_array(np.zeros(10, np.float32), "big")
    if_model.graph.node[1].attribute[0].g.initializer.append(w)
    assert structure_diff(pyonnxopt.load(if_model), pyonnxopt.load(if_model))["initializer_bytes"] == [48, 48]
