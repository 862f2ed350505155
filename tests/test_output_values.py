"""Outputs that are not tensors: ZipMap's sequence of maps (every classifier
skl2onnx converts ends in one), sequences, absent optionals. The optimize
check and verify compare their structure exactly and their numbers within
the tolerance of their type."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pyonnxopt
from pyonnxopt import output_values
from pyonnxopt.check import _compare_outputs
from pyonnxopt.verify import verify
from pyonnxopt.verify.run import _compare_one

pytest.importorskip("onnxruntime")


def _mismatch(want, got):
    return _compare_outputs(["p"], [want], [got], 1e-4, 1e-5, "seed 0").first_mismatch


def _probabilities(*rows):
    return [{0: float(a), 1: float(b)} for a, b in rows]


def test_split_reads_each_kind():
    x = np.ones((2, 3), np.float32)
    assert output_values.split(x)[0] == ("tensor",)
    assert output_values.split(None) == (("none",), [])
    structure, numbers = output_values.split([x, x[:1]])
    assert structure == ("sequence", 2) and [n.shape for n in numbers] == [(2, 3), (1, 3)]
    structure, numbers = output_values.split(_probabilities((0.25, 0.75), (0.5, 0.5)))
    assert structure == ("sequence of maps", ((0, 1), (0, 1)))
    assert numbers[0].dtype == np.float32 and numbers[0].tolist() == [0.25, 0.75, 0.5, 0.5]
    structure, numbers = output_values.split({"a": 1, "b": 2})
    assert structure == ("map", ("a", "b")) and numbers[0].tolist() == [1, 2]
    assert output_values.split("text") is None


def test_zipmap_probabilities_one_rounding_step_apart_match():
    p = np.float32(0.1)
    step = float(np.nextafter(p, np.float32(1)))
    assert _mismatch(_probabilities((p, 1 - p)), _probabilities((step, 1 - p))) is None


def test_zipmap_probabilities_far_apart_do_not():
    assert _mismatch(_probabilities((0.1, 0.9)), _probabilities((0.2, 0.8))) == "p: max abs diff 0.1 (seed 0)"


def test_other_labels_or_rows_are_a_different_structure():
    want = _probabilities((0.1, 0.9))
    assert "became a sequence of 1 maps with keys [0, 2]" in _mismatch(want, [{0: 0.1, 2: 0.9}])
    assert "became a sequence of 2 maps" in _mismatch(want, want * 2)
    assert "a sequence of 1 tensors became a sequence of 2 tensors" in _mismatch([np.ones(2)], [np.ones(2)] * 2)


def test_verify_compares_the_maps_numbers():
    table = {"float32": {"atol": 1e-4, "rtol": 1e-3}}
    record = _compare_one(_probabilities((0.1, 0.9)), _probabilities((0.10001, 0.9)), table)
    assert record["ok"] and record["max_abs"] > 0
    record = _compare_one(_probabilities((0.1, 0.9)), _probabilities((0.2, 0.8)), table)
    assert not record["ok"]
    assert _compare_one(None, None, table) is None


def _classifier() -> onnx.ModelProto:
    """Scores scaled twice (the two Muls merge into one, which rounds
    differently), a Softmax and a ZipMap, as skl2onnx ends a classifier."""
    nodes = [helper.make_node("Mul", ["x", "a"], ["xa"]), helper.make_node("Mul", ["xa", "b"], ["s"]),
             helper.make_node("Softmax", ["s"], ["probabilities"], axis=1),
             helper.make_node("ZipMap", ["probabilities"], ["output_probability"], domain="ai.onnx.ml",
                              classlabels_int64s=[0, 1, 2])]
    graph = helper.make_graph(
        nodes, "classifier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 3]),
         helper.make_value_info("output_probability", helper.make_sequence_type_proto(
             helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))))],
        [helper.make_tensor("a", TensorProto.FLOAT, [], [0.1]), helper.make_tensor("b", TensorProto.FLOAT, [], [3.3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)])


def test_a_classifier_ending_in_zipmap_is_checked_and_written():
    model = _classifier()
    optimized, report = pyonnxopt.optimize(model)
    assert [n.op_type for n in optimized.to_onnx().graph.node] == ["Mul", "Softmax", "ZipMap"]
    assert report["check"]["outputs"] == 2 and report["check"]["first_mismatch"] is None
    result = verify(model, optimized.to_onnx(), batch_sizes=(4,))
    assert [o["name"] for o in result["outputs"]] == ["probabilities", "output_probability"] and result["ok"]
