"""eliminate_common_subexpressions: structure, numbers, refusals, idempotence."""

import numpy as np

import pyonnxopt
from pyonnxopt.passes import get

from helpers import outputs, parse, run_pass, structure


def run(text):
    return run_pass("eliminate_common_subexpressions", text)


def test_copies_and_their_chains_fold():
    m, r = run("""g (float[3] x) => (float[3] y) {
        a = Relu(x)
        b = Relu(x)
        c = Sigmoid(a)
        d = Sigmoid(b)
        y = Add(c, d)
    }""")
    assert structure(m) == [("Relu", ["x"], ["a"]), ("Sigmoid", ["a"], ["c"]), ("Add", ["c", "c"], ["y"])]
    assert r.stats["nodes_removed"] == 2


def test_attributes_and_inputs_must_match():
    m, r = run("""g (float[2,3] x) => (float[3,2] y, float[2,3] z) {
        a = Transpose <perm = [1, 0]> (x)
        b = Transpose <perm = [0, 1]> (x)
        c = Softmax <axis = 0> (x)
        d = Softmax <axis = 1> (x)
        y = Identity(a)
        z = Sum(b, c, d)
    }""")
    assert not r.modified and len(m.graph) == 6


def test_random_ops_and_graph_outputs_are_refused():
    m, r = run("""g (float[3] x) => (float[3] y, float[3] z, float[3] w) {
        y = Relu(x)
        z = Relu(x)
        n1 = RandomUniformLike(x)
        n2 = RandomUniformLike(x)
        w = Add(n1, n2)
    }""")
    assert len(m.graph) == 5 and r.stats["refused"] == ["Relu writing 'z': its output is a graph output"]


def test_identical_initializers_merge():
    m, r = run("""g (float[3] x) => (float[3] y)
        <float[3] w1 = {1.0, 2.0, 3.0}, float[3] w2 = {1.0, 2.0, 3.0}, float[3] w3 = {1.0, 2.0, 4.0}> {
        a = Add(x, w1)
        b = Add(x, w2)
        c = Add(x, w3)
        y = Sum(a, b, c)
    }""")
    assert [t.name for t in m.initializers()] == ["w1", "w3"]
    assert structure(m) == [("Add", ["x", "w1"], ["a"]), ("Add", ["x", "w3"], ["c"]), ("Sum", ["a", "a", "c"], ["y"])]
    assert r.stats["initializers_removed"] == 1 and r.stats["nodes_removed"] == 1


def test_numbers_and_idempotence():
    text = """g (float[2,3] x) => (float[2,3] y) <float[3] w1 = {1.0, 2.0, 3.0}, float[3] w2 = {1.0, 2.0, 3.0}> {
        a = Mul(x, w1)
        b = Mul(x, w2)
        c = Tanh(a)
        d = Tanh(b)
        y = Sub(c, d)
    }"""
    before = parse(text)
    m, r = run(text)
    assert r.modified and len(m.graph) == 3
    x = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    want, got = outputs(before, x), outputs(m, x)
    np.testing.assert_allclose(got[0], want[0], atol=1e-6)
    assert not get("eliminate_common_subexpressions").run(m).modified


def test_inside_subgraphs(if_model):
    import onnx.helper as helper

    main = if_model.graph
    for a in main.node[1].attribute:
        if a.name == "then_branch":
            branch = a.g
    branch.node.insert(0, helper.make_node("Neg", ["sq"], ["n1"]))
    branch.node.insert(1, helper.make_node("Neg", ["sq"], ["n2"]))
    branch.node[2].input[:] = ["n1", "n2"]
    m = pyonnxopt.load(if_model)
    r = get("eliminate_common_subexpressions").run(m)
    then_g = m.graph.nodes[1].attributes["then_branch"]
    assert r.stats["nodes_removed"] == 1 and [n.op_type for n in then_g.nodes] == ["Neg", "Add"]
    assert m.check_invariants() == []
