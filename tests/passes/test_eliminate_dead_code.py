"""eliminate_dead_code: structure, numbers, refusals, idempotence, subgraphs."""

import numpy as np
import onnx
from onnx import TensorProto, helper, parser

from pyonnxopt.passes import get

from helpers import outputs, parse, run_pass, structure


def run(model):
    """ONNX graph text (opset 17, or with its own header) or a ModelProto."""
    if isinstance(model, str) and model.lstrip().startswith("<"):
        model = parser.parse_model(model)
    return run_pass("eliminate_dead_code", model, full_check=False)


def test_removes_a_dead_chain_and_its_initializer():
    m, r = run("""
        g (float[3] x) => (float[3] y)
        <float[3] w = {1.0, 2.0, 3.0}, float[3] unused = {0.0, 0.0, 0.0}> {
            a = Relu(x)
            b = Neg(a)
            c = Add(b, w)
            y = Abs(a)
        }""")
    assert structure(m) == [("Relu", ["x"], ["a"]), ("Abs", ["a"], ["y"])]
    assert [t.name for t in m.initializers()] == []
    assert r.modified and r.stats["nodes_removed"] == 2 and r.stats["initializers_removed"] == 2
    onnx.checker.check_model(m.to_onnx(), full_check=True)


def test_outputs_are_unchanged_in_onnxruntime():
    rng = np.random.default_rng(0)
    text = """
        g (float[2,4] x) => (float[2,4] y, float[2,4] z) {
            a = Relu(x)
            dead1 = Sigmoid(a)
            dead2 = Mul(dead1, dead1)
            y = Tanh(a)
            z = Add(a, x)
        }"""
    before = parse(text)
    m, _ = run(text)
    feeds = {"x": rng.standard_normal((2, 4)).astype(np.float32)}
    want, got = outputs(before, feeds), outputs(m, feeds)
    for a, b in zip(want, got):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert len(m.graph) == 3


def test_keeps_graph_outputs_and_inputs_even_when_unread():
    m, r = run("""
        g (float[3] x, float[3] unused_input) => (float[3] y, float[3] direct) {
            y = Relu(x)
            direct = Identity(x)
        }""")
    assert not r.modified
    assert [v.name for v in m.graph.inputs] == ["x", "unused_input"]


def test_keeps_custom_domain_nodes():
    m, r = run('<ir_version: 8, opset_import: ["" : 17, "custom.ops" : 1]>' + """
        g (float[3] x) => (float[3] y) {
            side = custom.ops.Log(x)
            y = Relu(x)
        }""")
    assert not r.modified and [n.op_type for n in m.graph.nodes] == ["Log", "Relu"]


def test_keeps_an_initializer_that_is_also_a_graph_input():
    w = helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [w])
    m, r = run(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert not r.modified and [t.name for t in m.initializers()] == ["w"]


def test_drops_stale_value_info():
    model = parse("""
        g (float[3] x) => (float[3] y) {
            a = Relu(x)
            b = Neg(a)
            y = Abs(a)
        }""")
    model.graph.value_info.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("a", "b", "gone")])
    m, r = run(model)
    assert [vi.name for vi in m.to_onnx().graph.value_info] == ["a"]
    assert r.stats["value_info_removed"] == 2
    assert m.graph.value("a").type["shape"] == [3]


def test_cleans_subgraphs_and_what_only_a_dead_if_read(if_model):
    # A dead Neg inside the then-branch; then the If itself made dead.
    then_g = if_model.graph.node[1].attribute[1].g if if_model.graph.node[1].attribute[1].name == "then_branch" \
        else if_model.graph.node[1].attribute[0].g
    then_g.node.append(helper.make_node("Neg", ["sq"], ["dead_in_branch"]))
    m, r = run(if_model)
    assert r.stats["nodes_removed"] == 1
    assert all(n.op_type != "Neg" or n.graph != m.graph.nodes[1].attributes["then_branch"]
               for n in m.nodes(recursive=True))
    # Now y comes from sq directly: the If, and through it nothing else, goes.
    g = m.graph
    g.replace_all_uses(g.value("y"), g.value("sq"))
    r = get("eliminate_dead_code").run(m)
    assert [n.op_type for n in g.nodes] == ["Mul"] and r.stats["initializers_removed"] == 1
    assert m.check_invariants() == []


def test_removes_unused_local_functions_only():
    used = helper.make_function("local", "Used", ["a"], ["b"], [helper.make_node("Inner", ["a"], ["b"], domain="local")],
                                [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    inner = helper.make_function("local", "Inner", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                 [helper.make_opsetid("", 17)])
    unused = helper.make_function("local", "Unused", ["a"], ["b"], [helper.make_node("Neg", ["a"], ["b"])],
                                  [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("Used", ["x"], ["y"], domain="local"),
                           helper.make_node("Unused", ["x"], ["dead"], domain="local")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(g, functions=[used, inner, unused],
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    m, r = run(model)
    assert [f.name for f in m.functions] == ["Used", "Inner"]  # Inner is called from Used's body
    assert r.stats["nodes_removed"] == 1 and r.stats["functions_removed"] == 1
    onnx.checker.check_model(m.to_onnx(), full_check=True)


def test_second_run_changes_nothing():
    m, r = run("""
        g (float[3] x) => (float[3] y) {
            a = Relu(x)
            b = Neg(a)
            y = Abs(a)
        }""")
    assert r.modified
    before = m.to_bytes()
    again = get("eliminate_dead_code").run(m)
    assert not again.modified and m.to_bytes() == before

