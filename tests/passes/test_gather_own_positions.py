"""gather_own_positions: a Gather of a flattened tensor at its own
row-major positions -> an Unsqueeze of the tensor; expected graphs,
numbers, refusals."""

import numpy as np
import pytest

from helpers import ops, outputs
from transformer_helpers import fuse, near

import pyonnxopt

# transformers 5's padding mask as its TorchScript export writes it:
# padding_mask[b, kv] through the flattened mask at b * S + kv.
MASK = """g (bool[B,S] mask, float[B,S,8] h) => (bool[B,1,1,S] y)
        <int64 zero = {0}, int64 one = {1}, int64[1] i1 = {1}, int64[4] rows = {-1, 1, 1, 1},
         int64[4] cols = {1, 1, 1, -1}, int64[1] flat = {-1}> {
    sh = Shape(h)
    b = Gather<axis = 0>(sh, zero)
    s = Gather<axis = 0>(sh, one)
    rb = Range(zero, b, one)
    rs = Range(zero, s, one)
    gb = Reshape(rb, rows)
    gs = Reshape(rs, cols)
    sm = Shape(mask)
    stride = Gather<axis = 0>(sm, i1)
    off = Mul(gb, stride)
    idx = Add(gs, off)
    f = Flatten<axis = 2>(mask)
    g = Gather<axis = 0>(f, idx)
    r = Reshape(g, flat)
    si = Shape(idx)
    y = Reshape(r, si)
}"""


def feeds(b=3, s=5):
    rng = np.random.default_rng(0)
    return {"mask": rng.random((b, s)) > 0.4, "h": rng.standard_normal((b, s, 8)).astype(np.float32)}


def unsqueeze_axes(m):
    n = next(n for n in m.graph.nodes if n.op_type == "Unsqueeze" and n.inputs[0].is_graph_input)
    return n.inputs[1].initializer.numpy().tolist()


def same(before, after, make=feeds):
    for b, s in ((1, 1), (3, 5), (2, 7)):
        f = make(b, s)
        assert np.array_equal(outputs(before, f)[0], outputs(after, f)[0])


def test_the_padding_mask_gather_becomes_an_unsqueeze():
    m, r, before = fuse("gather_own_positions", MASK, opset=17)
    assert r.modified and "Flatten" not in ops(m)
    assert unsqueeze_axes(m) == [1, 2, 4]
    same(before, m)


def test_the_whole_pipeline_leaves_one_unsqueeze_of_the_mask():
    before = fuse("gather_own_positions", MASK, opset=17, infer=False)[2]
    m, report = pyonnxopt.optimize(pyonnxopt.load(before))
    assert ops(m) == ["Unsqueeze"] and unsqueeze_axes(m) == [1, 2]  # 16 nodes -> 1
    assert report["check"]["first_mismatch"] is None
    same(before, m)


# Three leading dims flattened whole: the grids' scales are products of
# dims (C, and B * C as a Mul of two), the index has x's own shape.
WHOLE = """g (float[A,B,C] x) => (float[A,B,C] y)
        <int64 zero = {0}, int64 one = {1}, int64 two = {2}, int64[1] i1 = {1}, int64[3] g0 = {-1, 1, 1},
         int64[3] g1 = {1, -1, 1}, int64[3] g2 = {1, 1, -1}, int64[1] flat = {-1}> {
    sh = Shape(x)
    a = Gather<axis = 0>(sh, zero)
    b = Gather<axis = 0>(sh, one)
    c = Gather<axis = 0>(sh, two)
    b1 = Gather<axis = 0>(sh, i1)
    bc = Mul(b1, c)
    r0 = Range(zero, a, one)
    r1 = Range(zero, b, one)
    r2 = Range(zero, c, one)
    q0 = Reshape(r0, g0)
    q1 = Reshape(r1, g1)
    p2 = Reshape(r2, g2)
    p0 = Mul(q0, bc)
    p1 = Mul(c, q1)
    s12 = Add(p1, p2)
    idx = Add(p0, s12)
    f = Reshape(x, flat)
    y = Gather<axis = 0>(f, idx)
}"""


def whole_feeds(b, s):
    return {"x": np.random.default_rng(1).standard_normal((2, b, s)).astype(np.float32)}


def test_three_dims_flattened_whole_give_x_back():
    m, r, before = fuse("gather_own_positions", WHOLE, opset=17)
    assert r.modified and m.graph.outputs[0].producer.op_type == "Identity"
    assert m.graph.outputs[0].producer.inputs[0].name == "x"
    same(before, m, whole_feeds)


# An embedding-like read: rows of 8 stay rows, the index [B, 1, S].
ROWS = """g (float[B,S,8] x) => (float[B,1,S,8] y)
        <int64 zero = {0}, int64 one = {1}, int64[1] i1 = {1}, int64[3] rows = {-1, 1, 1},
         int64[3] cols = {1, 1, -1}> {
    sh = Shape(x)
    b = Gather<axis = 0>(sh, zero)
    s = Gather<axis = 0>(sh, one)
    stride = Gather<axis = 0>(sh, i1)
    rb = Range(zero, b, one)
    rs = Range(zero, s, one)
    gb = Reshape(rb, rows)
    gs = Reshape(rs, cols)
    off = Mul(gb, stride)
    idx = Add(off, gs)
    f = Flatten<axis = 2>(x)
    y = Gather<axis = 0>(f, idx)
}"""


def rows_feeds(b, s):
    return {"x": np.random.default_rng(2).standard_normal((b, s, 8)).astype(np.float32)}


def test_rows_of_the_flattened_tensor_stay_its_trailing_dims():
    m, r, before = fuse("gather_own_positions", ROWS, opset=17)
    assert r.modified and unsqueeze_axes(m) == [1]
    same(before, m, rows_feeds)


def test_opset_11_takes_the_axes_as_an_attribute():
    m, r, before = fuse("gather_own_positions", MASK, opset=11)
    n = next(n for n in m.graph.nodes if n.op_type == "Unsqueeze")
    assert r.modified and n.attributes["axes"] == [1, 2, 4]
    same(before, m)


@pytest.mark.parametrize("change, why", [
    # the grids swapped: positions along S first, then B
    (("gb = Reshape(rb, rows)", "gb = Reshape(rb, cols)", "gs = Reshape(rs, cols)", "gs = Reshape(rs, rows)"),
     "a position grid's length is S, not x's dim 0 (B)"),
    # the batch's positions scaled by the batch, not the length
    (("stride = Gather<axis = 0>(sh, i1)", "stride = Gather<axis = 0>(sh, zero1)"),
     "not scaled by the dims after it"),
    # rows of S * 8 elements, two of x's dims flattened into one
    (("f = Flatten<axis = 2>(x)", "f = Flatten<axis = 1>(x)"), "are not x's trailing dims [8]"),
])
def test_positions_that_are_not_x_own_are_refused_with_the_reason(change, why):
    text = ROWS.replace("int64[1] i1 = {1},", "int64[1] i1 = {1}, int64[1] zero1 = {0},")
    for old, new in zip(change[::2], change[1::2]):
        text = text.replace(old, new)
    m, r, before = fuse("gather_own_positions", text, opset=17, full_check=False)
    assert not r.modified and near(r, why), r.stats["near_misses"]


def test_a_range_from_1_is_not_its_case():
    m, r, _ = fuse("gather_own_positions", MASK.replace("rs = Range(zero, s, one)", "rs = Range(one, s, one)"),
                   opset=17, full_check=False)
    assert not r.modified and r.stats["near_misses"] == []


# torch's dynamo exporter: mask[b, kv] as a GatherND of both grids spread
# to their broadcast shape and stacked along a new last axis.
ND = """g (bool[B,S] mask, float[B,S,8] h) => (bool[B,1,1,S] y)
        <int64 zero = {0}, int64 one = {1}, int64[4] rows = {-1, 1, 1, 1}, int64[4] cols = {1, 1, 1, -1},
         int64[1] last = {-1}> {
    sh = Shape(h)
    b = Gather<axis = 0>(sh, zero)
    s = Gather<axis = 0>(sh, one)
    rb = Range(zero, b, one)
    rs = Range(zero, s, one)
    gb = Reshape(rb, rows)
    gs = Reshape(rs, cols)
    both = Max(gb, gs)
    spread = Shape(both)
    eb = Expand(gb, spread)
    es = Expand(gs, spread)
    ub = Unsqueeze(eb, last)
    us = Unsqueeze(es, last)
    idx = Concat<axis = -1>(ub, us)
    y = GatherND(mask, idx)
}"""


def test_the_dynamo_exporters_gather_nd_of_the_mask_becomes_an_unsqueeze():
    m, r, before = fuse("gather_own_positions", ND, opset=18)
    assert r.modified and "GatherND" not in ops(m) and unsqueeze_axes(m) == [1, 2]
    same(before, m)


def test_the_whole_pipeline_leaves_one_unsqueeze_of_the_dynamo_mask():
    before = fuse("gather_own_positions", ND, opset=18, infer=False)[2]
    m, _ = pyonnxopt.optimize(pyonnxopt.load(before))
    assert ops(m) == ["Unsqueeze"]
    same(before, m)


@pytest.mark.parametrize("change, why", [
    (("idx = Concat<axis = -1>(ub, us)", "idx = Concat<axis = -1>(us, ub)"),
     "a position grid's length is S, not x's dim 0 (B)"),
    (("gs = Reshape(rs, cols)", "gs = Reshape(rb, cols)"), "a position grid's length is B, not x's dim 1 (S)"),
])
def test_gather_nd_positions_that_are_not_x_own_are_refused(change, why):
    text = ND.replace(*change)
    if "Reshape(rb, cols)" in text:
        text = text.replace("bool[B,1,1,S] y", "bool[B,1,1,B] y")
    m, r, _ = fuse("gather_own_positions", text, opset=18, full_check=False)
    assert not r.modified and near(r, why), r.stats["near_misses"]


def test_grids_spread_to_a_higher_rank_count_their_axes_from_the_right():
    text = ND.replace("spread = Shape(both)", "sb = Shape(both)\n    spread = Concat<axis = 0>(lead, sb)").replace(
        "int64[1] last = {-1}>", "int64[1] last = {-1}, int64[1] lead = {1}>").replace(
        "bool[B,1,1,S] y", "bool[1,B,1,1,S] y")
    m, r, before = fuse("gather_own_positions", text, opset=18)
    assert r.modified and unsqueeze_axes(m) == [0, 2, 3]
    same(before, m)


def test_a_scale_of_higher_rank_than_the_grids_is_refused():
    text = MASK.replace("off = Mul(gb, stride)", "s5 = Reshape(stride, five)\n    off = Mul(gb, s5)").replace(
        "int64[1] flat = {-1}>", "int64[1] flat = {-1}, int64[5] five = {1, 1, 1, 1, 1}>").replace(
        "bool[B,1,1,S] y", "bool[1,B,1,1,S] y")
    m, r, _ = fuse("gather_own_positions", text, opset=17)
    assert not r.modified and near(r, "are not the grids' 4-d layout"), r.stats["near_misses"]
