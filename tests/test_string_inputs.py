"""Generated string inputs (the optimize check, verify, bench): drawn from
the strings the model knows, so that an encoder refusing unknown categories
runs, and a text model sees words of its vocabulary."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyonnxopt
from pyonnxopt import string_inputs
from pyonnxopt.verify import verify
from pyonnxopt.verify.inputs import input_specs, random_feeds

pytest.importorskip("onnxruntime")


def _encoder(zeros: int = 0) -> onnx.ModelProto:
    """A OneHotEncoder that rejects unknown categories (zeros=0), then two
    scales that merge into one."""
    nodes = [helper.make_node("OneHotEncoder", ["s"], ["hot"], domain="ai.onnx.ml", cats_strings=["red", "green"],
                              zeros=zeros),
             helper.make_node("Mul", ["hot", "a"], ["ha"]), helper.make_node("Mul", ["ha", "b"], ["y"])]
    graph = helper.make_graph(nodes, "encoder", [helper.make_tensor_value_info("s", TensorProto.STRING, ["N"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
                              [helper.make_tensor("a", TensorProto.FLOAT, [], [0.5]),
                               helper.make_tensor("b", TensorProto.FLOAT, [], [3.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)])


def test_vocabulary_reads_categories_and_string_constants():
    model = _encoder()
    model.graph.node.append(helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
        np.array(["blue", "red"], dtype=object))))
    assert string_inputs.vocabulary(pyonnxopt.load(model)) == ("red", "green", "blue")


def test_a_model_naming_no_string_gets_the_fallback_words():
    graph = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "g",
                              [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
                              [helper.make_tensor_value_info("t", TensorProto.STRING, [2])])
    assert string_inputs.vocabulary(pyonnxopt.load(helper.make_model(graph))) == string_inputs.FALLBACK


def test_a_model_fed_no_string_has_no_vocabulary():
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.array(["unused"], dtype=object), "names")])
    assert string_inputs.vocabulary(pyonnxopt.load(helper.make_model(graph))) == ()


def test_draw_is_seeded_and_keeps_to_the_words():
    words = ("red", "green")
    a = string_inputs.draw(np.random.default_rng(0), words, (3, 4))
    assert a.shape == (3, 4) and a.dtype.kind == "U" and set(a.ravel()) <= set(words)
    assert (a == string_inputs.draw(np.random.default_rng(0), words, (3, 4))).all()


def test_the_check_runs_an_encoder_that_rejects_unknown_categories():
    optimized, report = pyonnxopt.optimize(_encoder())
    assert [n.op_type for n in optimized.to_onnx().graph.node] == ["OneHotEncoder", "Mul"]
    assert "skipped" not in report["check"]
    assert report["check"]["outputs"] == 1 and report["check"]["first_mismatch"] is None


def test_verify_draws_string_inputs_from_the_model():
    specs = input_specs(_encoder())
    assert specs[0].words == ("red", "green")
    feeds = random_feeds(specs, batch_size=6)
    assert feeds["s"].shape == (6,) and set(feeds["s"]) <= {"red", "green"}
    optimized, _ = pyonnxopt.optimize(_encoder())
    assert verify(_encoder(), optimized.to_onnx(), batch_sizes=(6,))["ok"]


def test_bench_runs_a_string_input_model_cold_too(tmp_path, capsys):
    from pyonnxopt.cli import main

    path = tmp_path / "encoder.onnx"
    onnx.save(_encoder(), path)
    assert main(["bench", str(path), "--iterations", "3", "--warmup", "1", "--threads", "1"]) == 0
    assert "peak RSS (cold process)" in capsys.readouterr().out
