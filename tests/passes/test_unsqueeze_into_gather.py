"""unsqueeze_into_gather: Unsqueeze(Gather(x, scalar i, axis a), [a]) -> one
node; expected graphs, numbers, what is left alone, and the whole pipeline
on the TorchScript exporter's per-dim shape reads."""

import numpy as np
import pytest

import pyonnxopt
from helpers import outputs, parse, structure
from transformer_helpers import fuse


def gather_unsqueeze(x="float[B,5,3] x", index="int64 i = {-2}", axis=1, axes="1", opset=17, extra="",
                     y="float[B,1,3] y") -> str:
    unsqueeze = "y = Unsqueeze(g, axes)" if opset >= 13 else f"y = Unsqueeze <axes = [{axes}]> (g)"
    consts = f"{index}, int64[1] axes = {{{axes}}}" if opset >= 13 else index
    return f"""g ({x}) => ({y}{', float[B,3] z' if extra else ''}) <{consts}> {{
        g = Gather <axis = {axis}> (x, i)
        {unsqueeze}
        {extra}
    }}"""


def shape_dim(i: int) -> str:
    """The TorchScript exporter's read of dim i: Unsqueeze(Gather(Shape(x), i), 0)."""
    return f"""g (float[B,S,8] x) => (int64[1] y) <int64 i = {{{i}}}, int64[1] axes = {{0}}> {{
        s = Shape(x)
        g = Gather(s, i)
        y = Unsqueeze(g, axes)
    }}"""


def feeds(b=2):
    return {"x": np.random.default_rng(0).standard_normal((b, 5, 3)).astype(np.float32)}


@pytest.mark.parametrize("opset, axis, axes", [(17, 1, "1"), (17, -2, "1"), (17, 1, "-2"), (11, 1, "1")])
def test_one_gather_with_a_1d_index(opset, axis, axes):
    m, r, before = fuse("unsqueeze_into_gather", gather_unsqueeze(axis=axis, axes=axes, opset=opset), opset=opset)
    assert r.modified
    assert structure(m) == [("Gather", ["x", "i_1d"], ["y"])]
    gather = m.graph.nodes[0]
    assert gather.inputs[1].initializer.numpy().tolist() == [-2] and gather.attributes["axis"] in (1, -2)
    for b in (1, 2):
        assert np.array_equal(outputs(before, feeds(b))[0], outputs(m, feeds(b))[0])


@pytest.mark.parametrize("i, attrs", [(0, {"start": 0, "end": 1}), (2, {"start": 2, "end": 3}),
                                      (-1, {"start": -1}), (-3, {"start": -3, "end": -2})])
def test_a_dim_of_a_shape_is_a_shape_slice(i, attrs):
    text = shape_dim(i)
    m, r, before = fuse("unsqueeze_into_gather", text, opset=17)
    assert r.modified
    shape = next(n for n in m.graph.nodes if n.outputs[0].name == "y")
    assert shape.op_type == "Shape" and shape.inputs[0].name == "x" and shape.attributes == attrs
    x = np.zeros((2, 7, 8), np.float32)
    assert np.array_equal(outputs(before, {"x": x})[0], outputs(m, {"x": x})[0])


def test_below_opset_15_a_shape_dim_is_a_gather():
    text = shape_dim(1)
    m, r, _ = fuse("unsqueeze_into_gather", text, opset=14)
    assert r.modified and structure(m) == [("Shape", ["x"], ["s"]), ("Gather", ["s", "i_1d"], ["y"])]


def test_an_axis_of_size_1_gives_the_input_back():
    # Mamba's scan stacks its steps' [B, D, 1] outputs as Unsqueeze(Gather(y, 0, axis=2), -1).
    text = """g (float[B,4,3] a, float[B,3,1] b) => (float[B,4,1] y) <int64 i = {0}, int64[1] axes = {-1}> {
        p = MatMul(a, b)
        g = Gather <axis = 2> (p, i)
        y = Unsqueeze(g, axes)
    }"""
    m, r, _ = fuse("unsqueeze_into_gather", text, opset=17)
    assert r.modified and structure(m) == [("MatMul", ["a", "b"], ["y"])]


@pytest.mark.parametrize("text", [
    gather_unsqueeze(axes="2", y="float[B,3,1] y"),  # another axis
    gather_unsqueeze(index="int64[1] i = {1}", axes="1", y="float[B,1,1,3] y"),  # a 1-d index: another case
    gather_unsqueeze(extra="z = Neg(g)"),  # the Gather is read elsewhere: nothing saved
    gather_unsqueeze(x="float[B,5,3] x", axis=-2, axes="1").replace("float[B,5,3] x", "float x"),  # rank unknown
])
def test_left_alone(text):
    m, r, _ = fuse("unsqueeze_into_gather", text, opset=17, full_check=False)
    assert not r.modified and r.stats["refused"] == []


def test_a_shape_dim_past_the_rank_stays_a_gather():
    # Gather fails on index 3 of a 3-d shape; a Shape slice would give [] instead.
    text = shape_dim(3)
    m, r, _ = fuse("unsqueeze_into_gather", text, opset=17, full_check=False)
    assert r.modified and [n.op_type for n in m.graph.nodes] == ["Shape", "Gather"]


def test_the_pipeline_reads_a_whole_shape_at_once():
    # BERT's token types: Expand(buffer[:, :S], Concat(Unsqueeze(Gather(Shape(ids), 0)),
    #                                                  Unsqueeze(Gather(Shape(ids), 1)))).
    text = """g (int64[B,S] ids) => (int64[B,S] y) <int64 zero = {0}, int64 one = {1}, int64[1] axes = {0},
              int64[1] zero1 = {0}, int64[1] one1 = {1}, int64[1,4] buffer = {0, 1, 2, 3}> {
        s = Shape(ids)
        b = Gather(s, zero)
        n = Gather(s, one)
        bb = Unsqueeze(b, axes)
        nn = Unsqueeze(n, axes)
        t = Concat <axis = 0> (bb, nn)
        cut = Slice(buffer, zero1, nn, one1)
        e = Expand(cut, t)
        y = Add(e, ids)
    }"""
    proto = parse(text, 17)
    model, report = pyonnxopt.optimize(proto)
    assert [n.op_type for n in model.graph.nodes] == ["Shape", "Shape", "Slice", "Expand", "Add"]
    whole = next(n for n in model.graph.nodes if n.op_type == "Shape" and not n.attributes)
    assert [r.op_type for r, _ in whole.outputs[0].uses] == ["Expand"]
    ids = np.arange(6, dtype=np.int64).reshape(2, 3)
    assert np.array_equal(outputs(proto, {"ids": ids})[0], outputs(model, {"ids": ids})[0])


def siblings(axis: int, axes: str, out: str, steps=(0, 1, 2), extra="") -> str:
    """Mamba's scan: C[:, i] of each step, unsqueezed on another axis."""
    lines = "\n".join(f"g{i} = Gather <axis = {axis}> (c, i{i})  y{i} = Unsqueeze(g{i}, axes)" for i in steps)
    consts = ", ".join(f"int64 i{i} = {{{i - 1}}}" for i in steps)  # -1 too
    outs = ", ".join(f"float{out} y{i}" for i in steps)
    return f"""g (float[B,4,3] c) => ({outs}) <{consts}, int64[{len(axes.split(','))}] axes = {{{axes}}}> {{
        {lines}
        {extra}
    }}"""


@pytest.mark.parametrize("axis, axes, out, hoisted, moved", [
    (1, "-1", "[B,3,1]", [3], 1),  # Mamba: [B, 4, 3] -> [B, 4, 3, 1], steps along axis 1
    (2, "0", "[1,B,4]", [0], 3),  # the last axis: it goes last
    (0, "1,3", "[4,1,3,1]", [2, 4], 0),  # several axes
    (-2, "2", "[B,3,1]", [3], 1),  # a negative Gather axis
])
def test_sibling_gathers_share_one_unsqueeze(axis, axes, out, hoisted, moved):
    m, r, before = fuse("unsqueeze_into_gather", siblings(axis, axes, out), opset=17)
    assert r.modified
    m = pyonnxopt.optimize(m, passes=["eliminate_common_subexpressions"], check_outputs=False)[0]
    (unsqueeze,) = [n for n in m.graph.nodes if n.op_type == "Unsqueeze"]
    assert unsqueeze.inputs[1].initializer.numpy().tolist() == hoisted
    gathers = [n for n in m.graph.nodes if n.op_type == "Gather"]
    assert len(gathers) == 3 and all(g.inputs[0] == unsqueeze.outputs[0] and g.attributes["axis"] == moved
                                     for g in gathers)
    c = {"c": np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)}
    for want, got in zip(outputs(before, c), outputs(m, c)):
        assert want.shape == got.shape and np.array_equal(want, got)


@pytest.mark.parametrize("text", [
    siblings(1, "-1", "[B,3,1]", steps=(0,)),  # alone: nothing to share
    siblings(1, "-1", "[B,3,1]", steps=(0,)).replace("y0 = Unsqueeze(g0, axes)", "y0 = Unsqueeze(g0, axes)  "
                                                     "g9 = Gather <axis = 0> (c, i0)  y9 = Unsqueeze(g9, axes)")
    .replace("float[B,3,1] y0", "float[B,3,1] y0, float[4,3,1] y9"),  # another Gather axis
])
def test_a_gather_unsqueeze_with_no_sibling_of_its_form_stays(text):
    m, r, _ = fuse("unsqueeze_into_gather", text, opset=17, full_check=False)
    assert not r.modified


def test_the_last_sibling_joins_an_unsqueeze_already_hoisted():
    text = """g (float[B,4,3] c) => (float[B,3,1] y0, float[B,3,1] y1) <int64 i0 = {0}, int64 i1 = {1},
                                                                  int64[1] axes = {-1}, int64[1] wide = {3}> {
        u = Unsqueeze(c, wide)  y0 = Gather <axis = 1> (u, i0)
        g1 = Gather <axis = 1> (c, i1)  y1 = Unsqueeze(g1, axes)
    }"""
    m, r, before = fuse("unsqueeze_into_gather", text, opset=17)
    assert r.modified and [n.op_type for n in m.graph.nodes] == ["Unsqueeze", "Gather", "Unsqueeze", "Gather"]
