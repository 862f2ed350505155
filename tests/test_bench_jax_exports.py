"""bench/jax_exports.py: counts a jax2onnx export optimized three ways; a
missing jax stack is a one-line error, not a traceback."""

import importlib.util
import sys

import onnx
import pytest
from onnx import TensorProto, helper

import _export_counts
import jax_exports

HAVE_JAX = all(importlib.util.find_spec(m) is not None for m in ("jax", "flax", "jax2onnx"))


def test_without_jax_it_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "jax", None)  # import jax raises ImportError
    assert jax_exports.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: jax is not installed: pip install jax flax jax2onnx"


def test_nodes_counts_into_subgraphs(tmp_path):
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["t"])], "then",
                             [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
                          [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "if.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert _export_counts.nodes(str(path)) == 4
    assert _export_counts.nodes(str(tmp_path / "absent.onnx")) is None


@pytest.mark.skipif(not HAVE_JAX, reason="needs jax, flax and jax2onnx (pip install jax flax jax2onnx)")
def test_a_decoder_with_a_where_mask_fuses_its_attention(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(jax_exports, "OUT", str(tmp_path))
    assert jax_exports.main(["--models", "decoder", "--opsets", "23"]) == 0
    row = dict(kv.split("=") for kv in capsys.readouterr().out.split())
    assert int(row["opset23"]) < int(row["onnxsim"]) < int(row["export"])
