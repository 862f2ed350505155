"""collapse_reshapes: chains of Reshape/Flatten/Squeeze/Unsqueeze become one
Reshape; refusals; numbers in onnxruntime; graph outputs, subgraphs,
idempotence; the onnx backend models."""

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyonnxopt
from pyonnxopt.passes import PassOptions, get, run_passes

from helpers import ops, outputs, parse, random_feeds, run_pass, structure


def run(model, opset=17):
    return run_pass("collapse_reshapes", parse(model, opset) if isinstance(model, str) else model)


def reasons(result):
    return [x.split(": ", 1)[1] for x in result.stats["refused"]]


def initializer(m, name):
    return numpy_helper.to_array(next(t for t in m.to_onnx().graph.initializer if t.name == name))


def check(text, opset=17, feeds=None):
    """Runs the pass; the numbers are the same, and a second run changes nothing."""
    before = parse(text, opset) if isinstance(text, str) else text
    m, r = run(before)
    feeds = feeds or random_feeds(before)
    for want, got in zip(outputs(before, feeds), outputs(m, feeds)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    again = get("collapse_reshapes").run(m, PassOptions())
    assert not again.modified, again.stats
    return m, r


def test_flatten_then_unsqueeze_with_a_symbolic_batch():
    m, r = check("""g (float[N,3,4] x) => (float[N,1,12] y) <int64[1] one = {1}> {
        a = Flatten <axis = 1> (x)
        y = Unsqueeze(a, one)
    }""")
    assert structure(m) == [("Reshape", ["x", "y_shape"], ["y"])]
    assert initializer(m, "y_shape").tolist() == [-1, 1, 12]
    assert r.stats["nodes_removed"] == 2 and r.stats["nodes_added"] == 1
    assert r.stats["rewrites"] == [{"what": "collapsed reshapes", "consumed": ["Flatten->a", "Unsqueeze->y"],
                                    "produced": ["Reshape->y"]}]


def test_reshape_of_reshape_takes_the_last_shape():
    m, r = check("""g (float[2,3,4] x) => (float[2,2,6] y) <int64[2] s1 = {6, 4}, int64[3] s2 = {2, -1, 6}> {
        [first] a = Reshape(x, s1)
        [last] y = Reshape(a, s2)
    }""")
    assert structure(m) == [("Reshape", ["x", "last_shape"], ["y"])]
    assert initializer(m, "last_shape").tolist() == [2, -1, 6]
    assert r.stats["initializers_removed"] == 2  # s1, s2: nothing reads them now


def test_a_zero_in_the_last_shape_is_worked_out():
    # The 0 copies a dim of the last Reshape's input: the new Reshape has another input. The one
    # unknown is the -1 (which flatten_linear_rows can rewire, where a 0 would copy its rows).
    m, r = check("""g (float[N,3,4] x) => (float[N,2,6] y) <int64[2] s1 = {0, 12}, int64[3] s2 = {0, 2, 6}> {
        a = Reshape(x, s1)
        y = Reshape(a, s2)
    }""")
    [(op, [_, shape], _)] = structure(m)
    assert op == "Reshape" and initializer(m, shape).tolist() == [-1, 2, 6]


@pytest.mark.parametrize("first, last", [("0, 64, -1", "0, 8, -1"), ("0, -1, 1, 64", "0, 1, -1, 64")])
def test_unknown_dims_a_zero_passes_along_stay_zeros(first, last):
    """diffusers' VAE attention: two Reshapes whose 0s copy the batch
    through both; the chain's other unknown is the one -1."""
    a, b = first.count(",") + 1, last.count(",") + 1
    m, r = check(f"""g (float[N,64,H,W] x) => (float y) <int64[{a}] s1 = {{{first}}}, int64[{b}] s2 = {{{last}}}> {{
        f = Reshape(x, s1)
        y = Reshape(f, s2)
    }}""".replace("float y", "float[" + ",".join(["N"] + [f"d{i}" for i in range(1, b)]) + "] y"),
                 feeds={"x": np.random.default_rng(0).standard_normal((3, 64, 2, 5)).astype(np.float32)})
    [(op, [_, shape], _)] = structure(m)
    assert op == "Reshape" and initializer(m, shape).tolist() == [int(e) for e in last.split(",")]


def test_a_copied_dim_that_moved_is_not_a_zero():
    # The Unsqueeze moves N to index 1: a 0 there would copy H.
    m, r = run("""g (float[N,H,4] x) => (float[1,N,H,4] y) <int64[3] s = {0, 0, 4}, int64[1] zero = {0}> {
        a = Reshape(x, s)
        y = Unsqueeze(a, zero)
    }""")
    assert not r.modified and reasons(r) == ["more than one dim of the output is unknown"]


@pytest.mark.parametrize("source", ["nonzero", "u0", "input"])
def test_no_minus_one_beside_a_copy_of_a_count_that_may_be_empty(source):
    # A detector's kept boxes: rows gathered by NonZero's indices (onnx
    # names their count unk__N), or torch.export's data-dependent u0. With
    # none kept the chain runs, and [0, -1, 1] could not work its -1 out
    # beside the empty rows. Rows that are an input's dim take it.
    rows = "u0" if source == "u0" else "M"
    gather = "g = Gather <axis = 0> (x, idx)" if source == "nonzero" else "g = Identity(x)"
    text = f"""g (float[M] keep, float[{rows},1,H] x) => (float[?,?,1] y) <int64[1] zero = {{0}}, int64[1] one = {{1}},
                                                                   int64[1] two = {{2}}> {{
        nz = NonZero(keep)
        idx = Squeeze(nz, zero)
        {gather}
        a = Squeeze(g, one)
        y = Unsqueeze(a, two)
    }}"""
    m = pyonnxopt.load(parse(text))
    get("infer_shapes").run(m)
    r = get("collapse_reshapes").run(m, PassOptions())
    if source == "input":
        assert [n.op_type for n in m.graph.nodes][-1] == "Reshape" and initializer(m, "y_shape").tolist() == [0, -1, 1]
        return
    assert "Squeeze" in [n.op_type for n in m.graph.nodes] and any(
        "a dim it copies may be empty (a data-dependent count)" in x for x in r.stats["refused"]), r.stats
    empty = {"keep": np.zeros(3, np.float32), "x": np.ones((3 if source == "nonzero" else 0, 1, 5), np.float32)}
    assert [o.shape for o in outputs(m, empty)] == [(0, 5, 1)]


def test_the_declared_output_shape_fills_in_what_the_chain_leaves_unknown():
    m, r = check("""g (float[N,M] x) => (float[6,1] y) <int64[1] minus = {-1}, int64[1] one = {1}> {
        a = Reshape(x, minus)
        y = Unsqueeze(a, one)
    }""", feeds={"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    [(op, [_, shape], _)] = structure(m)
    assert initializer(m, shape).tolist() == [6, 1]


def test_allowzero_in_the_last_shape_is_kept():
    m, r = check("""g (float[0,3] x) => (float[0,3,1] y) <int64[2] s1 = {3, 0}, int64[3] s2 = {0, 3, 1}> {
        a = Reshape <allowzero = 1> (x, s1)
        y = Reshape <allowzero = 1> (a, s2)
    }""", opset=14)
    [(op, [_, shape], _)] = structure(m)
    assert initializer(m, shape).tolist() == [0, 3, 1]
    node = m.to_onnx().graph.node[0]
    assert [(a.name, a.i) for a in node.attribute] == [("allowzero", 1)]


def test_an_empty_dim_from_the_chain_gets_allowzero():
    m, r = check("""g (float[0,3] x) => (float[1,0,3] y) <int64[1] zero = {0}> {
        a = Flatten <axis = 1> (x)
        y = Unsqueeze(a, zero)
    }""", opset=14)
    [(op, [_, shape], _)] = structure(m)
    assert initializer(m, shape).tolist() == [1, 0, 3]
    assert [(a.name, a.i) for a in m.to_onnx().graph.node[0].attribute] == [("allowzero", 1)]


def test_squeeze_unsqueeze_flatten_with_attributes_before_opset_13():
    m, r = check("""g (float[1,3,1,4] x) => (float[3,4] y) {
        a = Squeeze <axes = [0, 2]> (x)
        b = Unsqueeze <axes = [0]> (a)
        y = Flatten <axis = 2> (b)
    }""", opset=11)
    [(op, [_, shape], _)] = structure(m)
    assert op == "Reshape" and initializer(m, shape).tolist() == [3, 4]


def test_a_long_mixed_chain():
    m, r = check("""g (float[2,3,4,1] x) => (float[1,24] y) <int64[1] last = {3}, int64[2] s = {4, 6}, int64[1] z = {0}> {
        a = Squeeze(x, last)
        b = Flatten <axis = 0> (a)
        c = Reshape(b, s)
        d = Unsqueeze(c, z)
        y = Flatten <axis = 1> (d)
    }""")
    [(op, [_, shape], _)] = structure(m)
    assert initializer(m, shape).tolist() == [1, 24] and r.stats["nodes_removed"] == 5


def test_reshape_attribute_before_opset_5():
    m, r = run_pass("collapse_reshapes", parse("""g (float[2,3,4] x) => (float[4,6] y) {
        a = Reshape <shape = [6, 4]> (x)
        y = Reshape <shape = [4, 6]> (a)
    }""", 4), full_check=False)
    assert ops(m) == ["Reshape"]
    node = m.to_onnx().graph.node[0]
    assert list(node.input) == ["x"] and [(a.name, list(a.ints)) for a in node.attribute] == [("shape", [4, 6])]


def test_a_value_read_elsewhere_ends_the_chain():
    text = """g (float[2,3,4] x) => (float[2,12,1] y, float[2,12] z) <int64[1] two = {2}> {
        a = Flatten <axis = 1> (x)
        y = Unsqueeze(a, two)
        z = Relu(a)
    }"""
    m, r = check(text)
    assert ops(m) == ["Flatten", "Unsqueeze", "Relu"] and not r.modified and r.stats["refused"] == []


def test_a_value_several_chain_ops_read_goes_into_each():
    # torch's dynamo export: Unsqueeze(arange, [0, 1]) read by two Unsqueezes.
    text = """g (float[N] x) => (float[1,1,N,1] y, float[1,1,1,N] z) <int64[2] front = {0, 1}, int64[1] two = {2},
            int64[1] three = {3}> {
        a = Unsqueeze(x, front)
        y = Unsqueeze(a, three)
        z = Unsqueeze(a, two)
    }"""
    m, r = check(text)
    assert structure(m) == [("Reshape", ["x", "y_shape"], ["y"]), ("Reshape", ["x", "z_shape"], ["z"])]
    assert initializer(m, "y_shape").tolist() == [1, 1, -1, 1] and initializer(m, "z_shape").tolist() == [1, 1, 1, -1]
    assert r.stats["nodes_removed"] == 3 and r.stats["nodes_added"] == 2
    assert [w["consumed"] for w in r.stats["rewrites"]] == [["Unsqueeze->y"], ["Unsqueeze->a", "Unsqueeze->z"]]


def test_a_shared_value_stays_while_one_reader_cannot_take_it():
    # z's chain would leave two unknown dims: z keeps reading a, so a stays.
    text = """g (float[N,M,4] x) => (float[N,M,4,1,1] y, float[N,1,K] z) <int64[1] one = {1}, int64[1] three = {3},
            int64[1] four = {4}> {
        a = Unsqueeze(x, three)
        y = Unsqueeze(a, four)
        f = Flatten <axis = 1> (a)
        z = Unsqueeze(f, one)
    }"""
    m, r = check(text)
    assert ops(m) == ["Unsqueeze", "Reshape", "Flatten", "Unsqueeze"]
    assert [n.inputs[0].name for n in m.graph.nodes] == ["x", "x", "a", "f"]
    assert "Unsqueeze writing 'z': more than one dim of the output is unknown" in r.stats["refused"]


def test_a_value_read_by_a_chain_op_as_its_shape_ends_the_chain():
    m, r = check("""g (int64[2] x) => (int64[2,1] y, float[1,6] z) <int64[1] one = {1}, float[2,3] w = {1,2,3,4,5,6}> {
        a = Unsqueeze(x, one)
        y = Identity(a)
        s = Squeeze(a, one)
        z = Reshape(w, s)
    }""", feeds={"x": np.array([1, 6], np.int64)})
    assert ops(m) == ["Unsqueeze", "Identity", "Squeeze", "Reshape"] and not r.modified


def test_a_graph_output_in_the_middle_ends_the_chain():
    m, r = check("""g (float[2,3,4] x) => (float[2,12] a, float[2,12,1] y) <int64[1] two = {2}> {
        a = Flatten <axis = 1> (x)
        y = Unsqueeze(a, two)
    }""")
    assert ops(m) == ["Flatten", "Unsqueeze"] and not r.modified


def test_two_chains_split_by_a_node_between():
    m, r = check("""g (float[2,3,4] x) => (float[24] y) <int64[1] minus = {-1}> {
        a = Flatten <axis = 1> (x)
        b = Flatten <axis = 0> (a)
        c = Relu(b)
        d = Flatten <axis = 1> (c)
        y = Reshape(d, minus)
    }""")
    assert ops(m) == ["Reshape", "Relu", "Reshape"]


def feeds_for(shape):
    return {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("opset", [11, 13, 17])
def test_unsqueezes_that_move_two_unknown_dims_become_one_unsqueeze(opset):
    # DeBERTa's relative mask [S, T] -> [1, 1, S, T]: no Reshape target says
    # it (both unknown dims move), one Unsqueeze does.
    axes = ("<axes = [0]>", "<axes = [-3]>", "", "") if opset < 13 else ("", "", ", zero", ", minus3")
    m, r = check(f"""g (float[S,T] x) => (float[1,1,S,T] y) <int64[1] zero = {{0}}, int64[1] minus3 = {{-3}}> {{
        a = Unsqueeze {axes[0]} (x{axes[2]})
        y = Unsqueeze {axes[1]} (a{axes[3]})
    }}""", opset, feeds_for((2, 5)))
    assert ops(m) == ["Unsqueeze"] and m.graph.nodes[0].inputs[0].name == "x"
    node = m.to_onnx().graph.node[0]
    axes = helper.get_attribute_value(node.attribute[0]) if opset < 13 else initializer(m, node.input[1]).tolist()
    assert list(axes) == [0, 1]
    assert r.stats["rewrites"][0]["what"] == "collapsed squeezes and unsqueezes"


def test_squeezes_become_one_squeeze():
    m, r = check("""g (float[1,B,1,S] x) => (float[B,S] y) <int64[1] two = {2}, int64[1] zero = {0}> {
        a = Squeeze(x, two)
        y = Squeeze(a, zero)
    }""", 17, feeds_for((1, 3, 1, 4)))
    assert structure(m) == [("Squeeze", ["x", "y_axes"], ["y"])]
    assert initializer(m, "y_axes").tolist() == [0, 2]


def test_a_squeeze_then_two_unsqueezes_become_one_of_each():
    m, r = check("""g (float[1,B,S] x) => (float[B,1,1,S] y) <int64[1] zero = {0}, int64[1] one = {1}> {
        a = Squeeze(x, zero)
        b = Unsqueeze(a, one)
        y = Unsqueeze(b, one)
    }""", 17, feeds_for((1, 3, 4)))
    assert structure(m) == [("Squeeze", ["x", "y_squeeze_axes"], ["y_squeezed"]),
                            ("Unsqueeze", ["y_squeezed", "y_axes"], ["y"])]
    assert initializer(m, "y_squeeze_axes").tolist() == [0] and initializer(m, "y_axes").tolist() == [1, 2]
    assert r.stats["nodes_removed"] == 3 and r.stats["nodes_added"] == 2


def test_squeezes_and_unsqueezes_that_cancel_leave_an_identity():
    # Empty: a Reshape target could not say [0, S] with one -1.
    text = """g (float[0,S] x) => (float[0,S] y) <int64[1] zero = {0}> {
        r = Relu(x)
        a = Unsqueeze(r, zero)
        y = Squeeze(a, zero)
    }"""
    before = parse(text, 17)
    m = pyonnxopt.load(before)
    run_passes(m, ["infer_shapes", "collapse_reshapes"])
    assert structure(m) == [("Relu", ["x"], ["r"]), ("Identity", ["r"], ["y"])]
    optimized, _ = pyonnxopt.optimize(before)  # eliminate_identity then takes it
    assert ops(optimized) == ["Relu"]
    assert outputs(optimized, feeds_for((0, 4)))[0].shape == (0, 4)


def test_a_squeeze_and_an_unsqueeze_that_stay_two_nodes_are_left():
    m, r = check("""g (float[1,B,S] x) => (float[B,S,1] y) <int64[1] zero = {0}, int64[1] two = {2}> {
        a = Squeeze(x, zero)
        y = Unsqueeze(a, two)
    }""", 17, feeds_for((1, 3, 4)))
    assert ops(m) == ["Squeeze", "Unsqueeze"] and reasons(r) == ["more than one dim of the output is unknown"]


def test_a_squeeze_without_axes_of_unknown_dims_is_left():
    m, r = check("""g (float[1,B,S] x) => (float[B,S,1] y) <int64[1] two = {2}> {
        a = Squeeze(x)
        y = Unsqueeze(a, two)
    }""", 17, feeds_for((1, 3, 4)))
    assert ops(m) == ["Squeeze", "Unsqueeze"] and not r.modified


@pytest.mark.parametrize("seed", range(20))
def test_random_squeeze_unsqueeze_chains_with_unknown_dims(seed):
    rng = np.random.default_rng(seed)
    shape, nodes, inits = ["B", 1, "S", 1], [], []
    name = "x"
    for i in range(int(rng.integers(2, 6))):
        ones = [k for k, d in enumerate(shape) if d == 1]
        if ones and rng.random() < 0.5:
            picked = sorted(rng.choice(ones, size=int(rng.integers(1, len(ones) + 1)), replace=False).tolist())
            op, new = "Squeeze", [d for k, d in enumerate(shape) if k not in picked]
        else:
            rank = len(shape) + int(rng.integers(1, 3))
            picked = sorted(rng.choice(rank, size=rank - len(shape), replace=False).tolist())
            rest = iter(shape)
            op, new = "Unsqueeze", [1 if k in picked else next(rest) for k in range(rank)]
        axes = [a - (len(new) if op == "Unsqueeze" else len(shape)) if rng.random() < 0.3 else a for a in picked]
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), f"axes{i}"))
        nodes.append(helper.make_node(op, [name, f"axes{i}"], [f"v{i}"]))
        shape, name = new, f"v{i}"
    g = helper.make_graph(nodes, f"chain{seed}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 1, "S", 1])],
                          [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)], inits)
    before = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    m, r = run_pass("collapse_reshapes", before, full_check=False)
    onnx.checker.check_model(m.to_onnx())
    feeds = feeds_for((3, 1, 5, 1))
    for want, got in zip(outputs(before, feeds), outputs(m, feeds)):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert len(m.graph.nodes) <= min(len(nodes), 2)
    assert not get("collapse_reshapes").run(m, PassOptions()).modified


REFUSALS = {
    "shape 's' is not a constant (no initializer)": ("""g (float[2,3,4] x, int64[2] s) => (float[6,4,1] y)
            <int64[1] two = {2}> {
        a = Reshape(x, s)
        y = Unsqueeze(a, two)
    }""", 17),
    "more than one dim of the output is unknown": ("""g (float[N,M,4] x) => (float[N,1,K] y) <int64[1] one = {1}> {
        a = Flatten <axis = 1> (x)
        y = Unsqueeze(a, one)
    }""", 17),
    "an empty dim needs allowzero (opset >= 14)": ("""g (float[0,3] x) => (float[1,0,3] y) <int64[1] zero = {0}> {
        a = Flatten <axis = 1> (x)
        y = Unsqueeze(a, zero)
    }""", 13),
    "an empty dim beside the unknown one (-1 would be ill-defined)": (
        """g (float[N,0] x) => (float[N,1,0] y) <int64[1] one = {1}> {
        a = Flatten <axis = 1> (x)
        y = Unsqueeze(a, one)
    }""", 17),
    "the output's rank is unknown": ("""g (float[2,3] x) => (float[6] y) {
        r = Relu(x)
        a = Flatten <axis = 1> (r)
        y = Squeeze(a)
    }""", 17),
}


@pytest.mark.parametrize("reason", list(REFUSALS))
def test_refusals(reason):
    text, opset = REFUSALS[reason]
    model = parse(text, opset)
    if reason == "the output's rank is unknown":
        model.graph.output[0].type.tensor_type.ClearField("shape")
    before = pyonnxopt.load(model)
    m, r = run_pass("collapse_reshapes", model, full_check=False)
    assert structure(m) == structure(before) and not r.modified
    assert reasons(r) == [reason], r.stats["refused"]


def test_pinned_nodes_end_the_chain():
    text = """g (float[2,3,4] x) => (float[24,1,1] y) <int64[1] one = {1}, int64[1] two = {2}> {
        [p] a = Flatten <axis = 0> (x)
        [q] b = Unsqueeze(a, one)
        [s] y = Unsqueeze(b, two)
    }"""
    for name, left in (("p", ["Flatten", "Reshape"]), ("q", ["Flatten", "Unsqueeze", "Unsqueeze"]),
                       ("s", ["Reshape", "Unsqueeze"])):
        m = pyonnxopt.load(parse(text))
        next(n for n in m.graph.nodes if n.name == name).pinned = True
        r = get("collapse_reshapes").run(m, PassOptions())
        assert ops(m) == left, name
        assert any(x.startswith(f"'{name}'") and x.endswith("excluded from optimization") for x in r.stats["refused"])
        assert name in [n.name for n in m.graph.nodes]


def test_inside_a_subgraph():
    body = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["a"], axis=0), helper.make_node("Squeeze", ["a", "zero"], ["then_out"])],
        "then", [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [6])],
        [numpy_helper.from_array(np.array([0], np.int64), "zero")])
    other = helper.make_graph([helper.make_node("Reshape", ["x", "six"], ["r"]), helper.make_node("Neg", ["r"], ["else_out"])],
                              "else", [], [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [6])],
                              [numpy_helper.from_array(np.array([6], np.int64), "six")])
    g = helper.make_graph([helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=other)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])])
    before = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    m, r = run(before)
    then = next(a.g for a in m.to_onnx().graph.node[0].attribute if a.name == "then_branch")
    assert [n.op_type for n in then.node] == ["Reshape"]
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "cond": np.array(True)}
    np.testing.assert_array_equal(outputs(m, feeds)[0], outputs(before, feeds)[0])


# ---- the onnx backend models: both layout passes keep the reference outputs ----

ROOT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
LAYOUT_OPS = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze"}


def _layout_models():
    for path in sorted(glob.glob(os.path.join(ROOT, "*", "*", "model.onnx"))):
        m = onnx.load(path)
        if m.ir_version >= 3 and any(n.op_type in LAYOUT_OPS for n in m.graph.node):
            yield path


@pytest.mark.parametrize("path", list(_layout_models()), ids=lambda p: p.split(os.sep)[-2])
def test_backend_models_keep_their_outputs(path):
    import onnxruntime as ort

    m, report = run_passes(path, passes=["infer_shapes", "optimize_transposes", "collapse_reshapes"])
    assert report.converged and m.check_invariants() == []
    onnx.checker.check_model(m.to_onnx())
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    except Exception as e:
        pytest.skip(f"onnxruntime cannot run the original: {str(e)[:80]}")
    data = os.path.join(os.path.dirname(path), "test_data_set_0")
    inputs = [numpy_helper.to_array(onnx.load_tensor(p)) for p in sorted(glob.glob(os.path.join(data, "input_*.pb")))]
    want = [numpy_helper.to_array(onnx.load_tensor(p)) for p in sorted(glob.glob(os.path.join(data, "output_*.pb")))]
    sess = ort.InferenceSession(m.to_bytes(), opts, providers=["CPUExecutionProvider"])
    got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], inputs)))
    for w, h in zip(want, got):
        np.testing.assert_allclose(h, w, rtol=1e-3, atol=1e-5)


# ---- random chains ----

def _random_chain(seed):
    """A seeded chain of Reshape (with 0 and -1 entries), Flatten, Squeeze
    and Unsqueeze from float[N,6,4] (N symbolic or 2), some values read
    elsewhere or graph outputs."""
    rng = np.random.default_rng(seed)
    shape, name, nodes, inits, outs = [2, 6, 4], "x", [], [], []
    for k in range(int(rng.integers(2, 7))):
        out, op = f"v{k}", str(rng.choice(["Reshape", "Flatten", "Squeeze", "Unsqueeze"]))
        if op == "Squeeze" and 1 not in shape:
            op = "Unsqueeze"
        if op == "Reshape":
            total = int(np.prod(shape))
            dims = [d for d in (1, 2, 3, 4, 6, 8, 12) if total % d == 0]
            first = int(dims[rng.integers(len(dims))])
            new = [first, total // first] if rng.random() < 0.6 else [first, 1, total // first]
            target = list(new)
            if rng.random() < 0.4:
                target[int(rng.integers(len(target)))] = -1
            for i in range(min(len(target), len(shape))):
                if target[i] == shape[i] and rng.random() < 0.5:
                    target[i] = 0
            t = numpy_helper.from_array(np.array(target, np.int64), f"t{k}")
            inits.append(t)
            nodes.append(helper.make_node("Reshape", [name, t.name], [out]))
        elif op == "Flatten":
            axis = int(rng.integers(0, len(shape) + 1))
            new = [int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))]
            nodes.append(helper.make_node("Flatten", [name], [out], axis=axis))
        elif op == "Squeeze":
            ones = [i for i, d in enumerate(shape) if d == 1]
            axes = numpy_helper.from_array(np.array([ones[0]], np.int64), f"a{k}")
            inits.append(axes)
            new = [d for i, d in enumerate(shape) if i != ones[0]]
            nodes.append(helper.make_node("Squeeze", [name, axes.name], [out]))
        else:
            axis = int(rng.integers(0, len(shape) + 1))
            axes = numpy_helper.from_array(np.array([axis], np.int64), f"a{k}")
            inits.append(axes)
            new = shape[:axis] + [1] + shape[axis:]
            nodes.append(helper.make_node("Unsqueeze", [name, axes.name], [out]))
        if rng.random() < 0.15:
            outs.append((name, shape))  # read elsewhere: ends a chain
        shape, name = new, out
    outs.append((name, shape))
    dims = ["N" if rng.random() < 0.5 else 2, 6, 4]
    g = helper.make_graph(nodes, f"chain{seed}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                          [helper.make_tensor_value_info(v, TensorProto.FLOAT, s if rng.random() < 0.3 else
                                                         [f"{v}_{i}" for i in range(len(s))])
                           for v, s in outs if v != "x"], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("seed", range(30))
def test_random_chains_keep_their_numbers(seed):
    before = _random_chain(seed)
    m, r = run_pass("collapse_reshapes", before, full_check=False)
    onnx.checker.check_model(m.to_onnx())
    feeds = {"x": np.random.default_rng(seed).standard_normal((2, 6, 4)).astype(np.float32)}
    for want, got in zip(outputs(before, feeds), outputs(m, feeds)):
        np.testing.assert_array_equal(got, want)
    assert len(m.graph.nodes) <= len(before.graph.node)
    assert not get("collapse_reshapes").run(m, PassOptions()).modified
