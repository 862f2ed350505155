"""eliminate_dropout: structure, numbers, refusals (training residue), opsets."""

import numpy as np
import onnx
from onnx import TensorProto, helper

from pyonnxopt.passes import get

from helpers import ops, outputs, parse, run_pass


def run(model, opset=17):
    return run_pass("eliminate_dropout", parse(model, opset) if isinstance(model, str) else model, full_check=False)


def test_inference_dropout_goes_with_its_unused_mask():
    m, r = run("""g (float[2,3] x) => (float[2,3] y) {
        a = Relu(x)
        b, mask = Dropout(a)
        y = Abs(b)
    }""")
    assert ops(m) == ["Relu", "Abs"] and m.graph.nodes[1].inputs[0].name == "a"
    assert r.stats["nodes_removed"] == 1
    onnx.checker.check_model(m.to_onnx(), full_check=True)


def test_constant_false_training_mode_goes():
    m, r = run("""g (float[3] x) => (float[3] y) <bool no = {0}, float ratio = {0.5}> {
        y = Dropout(x, ratio, no)
    }""")
    # y is a graph output fed by a graph input: the bypass keeps the node.
    assert not r.modified and "graph input" in r.stats["refused"][0]
    m, r = run("""g (float[3] x) => (float[3] y) <bool no = {0}, float ratio = {0.5}> {
        a = Relu(x)
        b = Dropout(a, ratio, no)
        y = Neg(b)
    }""")
    assert ops(m) == ["Relu", "Neg"]


def test_training_mode_is_reported_not_removed():
    text = """g (float[3] x, bool train) => (float[3] y) <bool yes = {1}, float ratio = {0.5}> {
        a = Relu(x)
        b = Dropout(a, ratio, yes)
        c = Dropout(b, ratio, train)
        y = Neg(c)
    }"""
    m, r = run(text)
    assert not r.modified and ops(m) == ["Relu", "Dropout", "Dropout", "Neg"]
    assert all("training_mode is not a constant false (training residue)" in x for x in r.stats["refused"])


def test_old_opsets_follow_is_test():
    def model(is_test):
        attrs = {} if is_test is None else {"is_test": is_test}
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Dropout", ["a"], ["b"], **attrs),
                               helper.make_node("Neg", ["b"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)], ir_version=3)

    assert ops(run(model(1))[0]) == ["Relu", "Neg"]
    for is_test in (0, None):
        m, r = run(model(is_test))
        assert not r.modified and "is_test is not 1" in r.stats["refused"][0]


def test_read_mask_keeps_the_node():
    m, r = run("""g (float[3] x) => (float[3] y, bool[3] mask) {
        a = Relu(x)
        b, mask = Dropout(a)
        y = Neg(b)
    }""")
    assert not r.modified and "mask output is read" in r.stats["refused"][0]


def test_numbers_and_idempotence():
    text = """g (float[2,3] x) => (float[2,3] y) <float ratio = {0.3}> {
        a = Sigmoid(x)
        b = Dropout(a, ratio)
        y = Mul(b, x)
    }"""
    before = parse(text)
    m, r = run(text)
    x = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    want, got = outputs(before, x), outputs(m, x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert not get("eliminate_dropout").run(m).modified
