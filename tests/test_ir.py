"""The graph IR: use-def lists, scopes, topological order and mutations."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pyonnxopt


def chain_model(order=("a", "b", "c")):
    """x -> a:Relu -> b:Neg -> c:Abs -> y, with nodes listed in `order`."""
    defs = {
        "a": helper.make_node("Relu", ["x"], ["t1"], name="a"),
        "b": helper.make_node("Neg", ["t1"], ["t2"], name="b"),
        "c": helper.make_node("Abs", ["t2"], ["y"], name="c"),
    }
    g = helper.make_graph(
        [defs[k] for k in order], "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_use_def_after_load(if_model):
    m = pyonnxopt.load(if_model)
    assert m.check_invariants() == []
    g = m.graph
    sq = g.value("sq")
    assert sq.producer.name == "square"
    readers = sorted(n.name for n, _ in sq.uses)
    assert readers == ["else_neg", "then_add"]  # outer-scope reads are uses too
    x = g.value("x")
    assert x.is_graph_input and x.producer is None
    assert [i for _, i in x.uses] == [0, 1]
    assert g.value("y").is_graph_output
    assert g.value("w").initializer.name == "w"


def test_subgraph_scopes(if_model):
    m = pyonnxopt.load(if_model)
    branch = m.graph.nodes[1]
    then_g = branch.attributes["then_branch"]
    assert len(branch.subgraphs) == 2
    assert then_g.parent == m.graph and then_g.owner_node == branch
    assert {v.name for v in then_g.outer_references()} == {"sq", "w"}
    assert then_g.value("sq") == m.graph.value("sq")  # lookup walks out to the parent
    assert m.graph.value("then_out") is None  # but not in
    assert len(m.graphs()) == 3


def test_topological_order_of_unsorted_graph():
    m = pyonnxopt.load(chain_model(order=("c", "a", "b")))
    assert [n.name for n in m.graph.nodes] == ["c", "a", "b"]  # file order is kept
    assert [n.name for n in m.graph.topological_order()] == ["a", "b", "c"]
    assert m.check_invariants() == []
    assert onnx.load_from_string(m.to_bytes()) == chain_model(order=("c", "a", "b"))


def test_topological_order_counts_subgraph_reads(if_model):
    # Put the If first: it depends on `square` through its branches only.
    if_model.graph.node.insert(0, if_model.graph.node.pop(1))
    m = pyonnxopt.load(if_model)
    assert [n.name for n in m.graph.topological_order()] == ["square", "branch"]


def test_replace_all_uses_and_remove_node():
    m = pyonnxopt.load(chain_model())
    g = m.graph
    b = g.nodes[1]
    g.replace_all_uses(g.value("t2"), g.value("t1"))  # bypass Neg
    assert g.value("t2").uses == []
    g.remove_node(b)
    assert b.removed and [n.name for n in g.nodes] == ["a", "c"]
    assert g.value("t2") is None
    assert m.check_invariants() == []
    out = m.to_onnx()
    assert [n.op_type for n in out.graph.node] == ["Relu", "Abs"]
    assert out.graph.node[1].input == ["t1"]
    onnx.checker.check_model(out, full_check=True)


def test_replace_all_uses_updates_graph_outputs():
    m = pyonnxopt.load(chain_model())
    g = m.graph
    g.replace_all_uses(g.value("y"), g.value("t2"))
    assert [v.name for v in g.outputs] == ["t2"]
    assert g.value("t2").is_graph_output and not g.value("y").is_graph_output
    g.remove_node(g.nodes[2])
    assert m.check_invariants() == []
    assert [o.name for o in m.to_onnx().graph.output] == ["t2"]


def test_a_replaced_graph_output_keeps_its_own_type():
    """The old value lives on (renamed, read by a new node): setting the new
    output's type must not change the old value's, which the output entry
    described until then."""
    m = pyonnxopt.load(chain_model())
    g = m.graph
    y = g.value("y")
    y.name = "y_inner"
    back = g.add_node("Reshape", [y, g.add_initializer("s", TensorProto.INT64, [2], np.array([1, 3]).tobytes())],
                      ["y_back"])
    g.replace_all_uses(y, back.outputs[0])
    g.set_input(back, 0, y)
    g.set_value_type(back.outputs[0], helper.make_tensor_type_proto(TensorProto.FLOAT, [1, 3]).SerializeToString())
    assert y.type["shape"] == [3] and back.outputs[0].type["shape"] == [1, 3]
    assert m.check_invariants() == []


def test_remove_node_refuses_while_read():
    m = pyonnxopt.load(chain_model())
    with pytest.raises(pyonnxopt.ModelError, match="still read"):
        m.graph.remove_node(m.graph.nodes[0])
    assert m.check_invariants() == []


def test_add_node_and_set_input():
    m = pyonnxopt.load(chain_model())
    g = m.graph
    c = g.nodes[2]
    sig = g.add_node("Sigmoid", [g.value("t2")], ["t2_sig"], name="sig", before=c)
    g.set_input(c, 0, sig.outputs[0])
    assert [n.name for n in g.nodes] == ["a", "b", "sig", "c"]
    assert m.check_invariants() == []
    with pytest.raises(pyonnxopt.ModelError, match="defined twice"):
        g.add_node("Relu", [g.value("x")], ["t1"])
    import onnxruntime as ort

    sess = ort.InferenceSession(m.to_bytes(), providers=["CPUExecutionProvider"])
    x = np.array([-1.0, 0.5, 2.0], dtype=np.float32)
    expected = np.abs(1 / (1 + np.exp(np.maximum(x, 0))))
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected, rtol=1e-6)


def test_rename_value_renames_everywhere(if_model):
    m = pyonnxopt.load(if_model)
    m.graph.value("sq").name = "squared"
    assert m.check_invariants() == []
    out = m.to_onnx()
    assert out.graph.node[0].output == ["squared"]
    assert out.graph.node[1].attribute[0].g.node[0].input[0] == "squared"
    m.graph.value("w").name = "weight"
    out = m.to_onnx()
    assert out.graph.initializer[0].name == "weight"
    onnx.checker.check_model(out, full_check=True)


def test_handles_outlive_removal_and_model_reference():
    m = pyonnxopt.load(chain_model())
    g = m.graph
    node = g.nodes[2]
    g.replace_all_uses(g.value("y"), g.value("t2"))
    g.remove_node(node)
    del m, g
    assert node.removed and node.name == "c"  # handle still valid


def test_function_bodies_are_graphs():
    f = helper.make_function(
        "local", "Twice", ["a"], ["b"],
        [helper.make_node("Add", ["a", "a"], ["b"])], [helper.make_opsetid("", 17)],
    )
    g = helper.make_graph(
        [helper.make_node("Twice", ["x"], ["y"], domain="local")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(g, functions=[f], opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    m = pyonnxopt.load(model)
    (fn,) = m.functions
    assert fn.name == "Twice" and fn.body.is_function_body
    assert fn.body.value("a").uses[0][0].op_type == "Add"
    assert m.check_invariants() == []
    assert onnx.load_from_string(m.to_bytes()) == model


def test_replace_node_keeps_output_names_and_readers():
    m = pyonnxopt.load(chain_model())
    g = m.graph
    b = g.nodes[1]
    new = g.replace_node(b, "Sigmoid", [g.value("t1")], name="b_sig")
    assert b.removed and [n.name for n in g.nodes] == ["a", "b_sig", "c"]
    assert g.value("t2").producer == new and g.value("t2").uses[0][0].name == "c"
    assert m.check_invariants() == []
    out = m.to_onnx()
    assert [n.op_type for n in out.graph.node] == ["Relu", "Sigmoid", "Abs"]
    assert out.graph.node[1].output == ["t2"]
    # Replacing the node that produces a graph output keeps the output's name.
    g.replace_node(g.nodes[2], "Neg", [g.value("t2")])
    assert [v.name for v in g.outputs] == ["y"] and m.check_invariants() == []
    onnx.checker.check_model(m.to_onnx(), full_check=True)


def test_removing_a_node_drops_the_reads_of_its_subgraphs(if_model):
    m = pyonnxopt.load(if_model)
    g = m.graph
    branch = g.nodes[1]
    # Make the If dead: the graph output now comes straight from `square`.
    g.replace_all_uses(g.value("y"), g.value("sq"))
    g.remove_node(branch)
    assert g.value("sq").uses == [] and g.value("w").uses == []
    assert m.check_invariants() == []
    assert [n.op_type for n in m.to_onnx().graph.node] == ["Mul"]


def test_rename_refuses_a_name_a_reading_subgraph_shadows(if_model):
    m = pyonnxopt.load(if_model)
    with pytest.raises(pyonnxopt.ModelError, match="subgraph 'then', which reads it, defines that name"):
        m.graph.value("sq").name = "then_out"
    assert m.graph.value("sq") is not None and m.check_invariants() == []
