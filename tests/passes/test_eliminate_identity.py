"""eliminate_identity: structure, numbers, refusals, idempotence, subgraphs."""

import numpy as np
from onnx import TensorProto, helper

from pyonnxopt.passes import get

from helpers import outputs, parse, run_pass, structure


def run(model):
    return run_pass("eliminate_identity", model, full_check=True)


def test_readers_read_the_input():
    m, r = run("""g (float[3] x) => (float[3] y) {
        a = Relu(x)
        b = Identity(a)
        c = Identity(b)
        y = Add(c, b)
    }""")
    assert structure(m) == [("Relu", ["x"], ["a"]), ("Add", ["a", "a"], ["y"])]
    assert r.stats["nodes_removed"] == 2 and r.stats["refused"] == []


def test_graph_output_keeps_its_name():
    m, r = run("""g (float[3] x) => (float[3] y) {
        a = Relu(x)
        y = Identity(a)
    }""")
    assert structure(m) == [("Relu", ["x"], ["y"])]
    assert [v.name for v in m.graph.outputs] == ["y"] and m.graph.outputs[0].type["shape"] == [3]


def test_refusals_leave_the_graph_unchanged():
    text = """g (float[3] x) => (float[3] y, float[3] z, float[3] a) {
        y = Identity(x)
        a = Relu(x)
        z = Identity(a)
    }"""
    m, r = run(text)
    assert not r.modified and structure(m) == [("Identity", ["x"], ["y"]), ("Relu", ["x"], ["a"]),
                                               ("Identity", ["a"], ["z"])]
    assert sorted(x.split(": ", 1)[1] for x in r.stats["refused"]) == [
        "output and input are both graph outputs",
        "output is a graph output and the input is a graph input, initializer or outer value",
    ]


def test_a_graph_output_takes_over_a_value_other_nodes_read():
    text = """g (float[3] x) => (float[3] y, float[3] w) {
        a = Relu(x)
        y = Identity(a)
        w = Neg(a)
    }"""
    m, r = run(text)
    assert structure(m) == [("Relu", ["x"], ["y"]), ("Neg", ["y"], ["w"])]
    x = np.array([-1, 0, 2], np.float32)
    for want, got in zip(outputs(parse(text), {"x": x}), outputs(m, {"x": x})):
        np.testing.assert_array_equal(got, want)


def test_refuses_where_a_reading_subgraph_defines_the_output_name():
    # The branch reads `a` and has its own `y`: renamed, it would read that
    # (onnx's checker rejects such a name; onnxruntime runs it).
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [3])
    branch = helper.make_graph([helper.make_node("Neg", ["a"], ["y"]), helper.make_node("Add", ["y", "a"], ["out"])],
                               "branch", [], [out])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["y"]),
                           helper.make_node("If", ["c"], ["w"], then_branch=branch, else_branch=branch)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                           helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [y, helper.make_tensor_value_info("w", TensorProto.FLOAT, [3])])
    m, r = run_pass("eliminate_identity", helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                    full_check=False)
    assert not r.modified
    assert "a subgraph reading the input defines the output's name itself" in r.stats["refused"][0]


def test_inside_subgraphs_and_outer_reads(if_model):
    # then-branch: out = Identity(sq) where sq is an outer value: refused
    # (a subgraph output); else-branch reads an Identity of the main graph.
    main = if_model.graph
    main.node.insert(1, helper.make_node("Identity", ["sq"], ["sq_copy"], name="copy"))
    for a in main.node[2].attribute:
        if a.name == "else_branch":
            a.g.node[0].input[0] = "sq_copy"
    m, r = run(if_model)
    assert r.stats["nodes_removed"] == 1
    else_g = m.graph.nodes[1].attributes["else_branch"]
    assert else_g.nodes[0].inputs[0] == m.graph.value("sq")


def test_numbers_and_idempotence():
    text = """g (float[2,3] x) => (float[2,3] y) {
        a = Identity(x)
        b = Sigmoid(a)
        c = Identity(b)
        y = Mul(c, a)
    }"""
    before = parse(text)
    m, r = run(text)
    assert r.stats["nodes_removed"] == 2
    x = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    want, got = outputs(before, x), outputs(m, x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    again = get("eliminate_identity").run(m)
    assert not again.modified
