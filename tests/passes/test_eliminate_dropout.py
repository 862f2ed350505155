"""eliminate_dropout: structure, numbers, refusals (training residue), opsets, and the
training residue removed with PassOptions.remove_training_residue."""

import numpy as np
import onnx
from onnx import TensorProto, helper

import pyonnxopt
from pyonnxopt.passes import PassOptions, get

from helpers import ops, outputs, parse, run_pass, structure


def run(model, opset=17, **options):
    return run_pass("eliminate_dropout", parse(model, opset) if isinstance(model, str) else model, full_check=False,
                    **options)


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
    assert [x.split(": ", 1)[1] for x in r.stats["refused"]] == [
        "training_mode is not a constant false (training residue: removed with --remove-training-residue)"] * 2


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


# ---- training residue (PassOptions.remove_training_residue) ----

TRAINING = """g (float[2,3] x, bool train) => (float[2,3] y) <bool yes = {1}, float ratio = {0.5}> {
    [d1] a = Dropout(x, ratio, yes)
    [d2] b = Dropout(a, ratio, train)
    y = Relu(b)
}"""


def test_training_mode_dropout_goes_when_asked():
    m, r = run(TRAINING, remove_training_residue=True)
    assert structure(m) == [("Relu", ["x"], ["y"])]
    assert r.stats["refused"] == [] and r.stats["nodes_removed"] == 2
    assert r.stats["rewrites"] == [{"what": "bypassed", "consumed": [n], "produced": []} for n in ("d1", "d2")]
    onnx.checker.check_model(m.to_onnx(), full_check=True)
    # What is left is the inference model: the original with train=False and no dropout.
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(outputs(m, {"x": x, "train": np.array(True)})[0], np.maximum(x, 0))
    assert not get("eliminate_dropout").run(m, PassOptions(remove_training_residue=True)).modified


def test_training_mode_dropout_with_a_read_mask_stays():
    m, r = run("""g (float[3] x) => (float[3] y, bool[3] mask) <bool yes = {1}, float ratio = {0.5}> {
        a = Relu(x)
        b, mask = Dropout(a, ratio, yes)
        y = Neg(b)
    }""", remove_training_residue=True)
    assert not r.modified and [x.split(": ", 1)[1] for x in r.stats["refused"]] == ["its mask output is read"]


def test_old_opset_training_dropout_goes_when_asked():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Dropout", ["a"], ["b"], is_test=0),
                           helper.make_node("Neg", ["b"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)], ir_version=3)
    m, r = run(model)
    assert not r.modified and "is_test is not 1 (training residue: removed with --remove-training-residue)" in \
        r.stats["refused"][0]
    m, r = run(model, remove_training_residue=True)
    assert structure(m) == [("Relu", ["x"], ["a"]), ("Neg", ["a"], ["y"])]


def training_ops_model(read_adam: bool):
    """Relu(x) plus an optimizer step of each ai.onnx.preview.training op; Adam's new weight read when asked."""
    t = TensorProto.FLOAT
    nodes = [
        helper.make_node("Relu", ["x"], ["y"]),
        helper.make_node("Gradient", ["x"], ["dy_dx"], domain=TRAINING_DOMAIN, xs=["x"], y="y", name="grad"),
        helper.make_node("Momentum", ["r", "step", "w", "dy_dx", "v"], ["w_m", "v_m"], domain=TRAINING_DOMAIN,
                         alpha=0.9, beta=0.1, epsilon=0.0, mode="standard", norm_coefficient=0.0, name="momentum"),
        helper.make_node("Adagrad", ["r", "step", "w", "dy_dx", "h"], ["w_g", "h_g"], domain=TRAINING_DOMAIN,
                         name="adagrad"),
        helper.make_node("Adam", ["r", "step", "w", "dy_dx", "v", "h"], ["w_a", "v_a", "h_a"], domain=TRAINING_DOMAIN,
                         name="adam"),
    ]
    inputs = [helper.make_tensor_value_info("x", t, [3])]
    inits = [helper.make_tensor("r", t, [], [0.1]), helper.make_tensor("step", TensorProto.INT64, [], [1]),
             helper.make_tensor("w", t, [3], [1, 2, 3]), helper.make_tensor("v", t, [3], [0, 0, 0]),
             helper.make_tensor("h", t, [3], [0, 0, 0])]
    outs = [helper.make_tensor_value_info("y", t, [3])]
    if read_adam:
        outs.append(helper.make_tensor_value_info("w_a", t, [3]))
    g = helper.make_graph(nodes, "g", inputs, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(TRAINING_DOMAIN, 1)],
                             ir_version=8)


TRAINING_DOMAIN = "ai.onnx.preview.training"


def test_training_ops_are_reported_then_removed_when_asked():
    m, r = run(training_ops_model(read_adam=False))
    assert not r.modified and ops(m) == ["Relu", "Gradient", "Momentum", "Adagrad", "Adam"]
    assert r.stats["refused"] == [f"'{n}' ({TRAINING_DOMAIN}::{op}): training residue: removed with --remove-training-residue"
                                  for n, op in [("grad", "Gradient"), ("momentum", "Momentum"), ("adagrad", "Adagrad"),
                                                ("adam", "Adam")]]
    m, r = run(training_ops_model(read_adam=False), remove_training_residue=True)
    assert structure(m) == [("Relu", ["x"], ["y"])] and r.stats["refused"] == []
    assert r.stats["rewrites"] == [{"what": "removed", "consumed": [n], "produced": []}
                                   for n in ("adam", "adagrad", "momentum", "grad")]
    onnx.checker.check_model(m.to_onnx(), full_check=True)
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    np.testing.assert_array_equal(outputs(m, {"x": x})[0], np.maximum(x, 0))
    assert not get("eliminate_dropout").run(m, PassOptions(remove_training_residue=True)).modified


def test_read_or_pinned_training_ops_stay():
    m, r = run(training_ops_model(read_adam=True), remove_training_residue=True)
    # Adam's output is a graph output, so Adam and the Gradient it reads stay.
    assert ops(m) == ["Relu", "Gradient", "Adam"]
    assert [x.split(": ", 1)[1] for x in r.stats["refused"]] == ["training residue whose outputs are read"] * 2
    m = pyonnxopt.load(training_ops_model(read_adam=False))
    next(n for n in m.graph.nodes if n.name == "adagrad").pinned = True
    r = get("eliminate_dropout").run(m, PassOptions(remove_training_residue=True))
    assert ops(m) == ["Relu", "Gradient", "Adagrad"]
    assert r.stats["refused"] == [f"'grad' ({TRAINING_DOMAIN}::Gradient): training residue whose outputs are read",
                                  f"'adagrad' ({TRAINING_DOMAIN}::Adagrad): excluded from optimization"]
