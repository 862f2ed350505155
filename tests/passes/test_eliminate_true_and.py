"""eliminate_true_and: And with an operand true everywhere -> the other,
where the readers broadcast it back; expected graphs, shrunk types,
numbers, refusals."""

import numpy as np
import pytest

from helpers import ops, outputs
from transformer_helpers import fuse, near

# transformers 5's bidirectional padding mask: q_idx >= 0 spreads the
# [B, 1, 1, S] mask over the queries before each layer's Where and Add.
MASK = """g (bool[B,1,1,S] m, float[B,2,S,S] scores) => (float[B,2,S,S] y)
        <int64 zero = {0}, int64 one = {1}, int64[4] rows = {1, 1, -1, 1}, float fill = {-3.4e38},
         float nil = {0}> {
    s = Gather<axis = 0>(Shape(scores), 2)
    q = Reshape(Range(zero, s, one), rows)
    t = GreaterOrEqual(q, zero)
    keep = And(t, m)
    bias = Where(keep, nil, fill)
    y = Add(scores, bias)
}"""


def text(body=MASK):
    """The model as the ONNX text parser takes it (one op a line)."""
    return (body.replace("s = Gather<axis = 0>(Shape(scores), 2)",
                         "sh = Shape(scores)\n    s = Gather<axis = 0>(sh, two)")
                .replace("q = Reshape(Range(zero, s, one), rows)", "r = Range(zero, s, one)\n    q = Reshape(r, rows)")
                .replace("int64 one = {1},", "int64 one = {1}, int64 two = {2},"))


def feeds(b=2, s=5):
    rng = np.random.default_rng(0)
    return {"m": rng.random((b, 1, 1, s)) > 0.3, "scores": rng.standard_normal((b, 2, s, s)).astype(np.float32)}


def same(before, after):
    for b, s in ((1, 1), (2, 5), (3, 7)):
        f = feeds(b, s)
        assert np.array_equal(outputs(before, f)[0], outputs(after, f)[0])


def test_the_always_true_compare_goes_and_the_where_shrinks():
    m, r, before = fuse("eliminate_true_and", text(), opset=17)
    assert r.modified and "And" not in ops(m)
    where = next(n for n in m.graph.nodes if n.op_type == "Where")
    assert where.inputs[0].name == "m" and where.outputs[0].type["shape"] == ["B", 1, 1, "S"]
    same(before, m)


@pytest.mark.parametrize("compare", ["GreaterOrEqual(q, zero)", "LessOrEqual(zero, q)", "Greater(q, minus)",
                                     "Less(minus, q)"])
def test_each_compare_the_range_passes(compare):
    body = text().replace("t = GreaterOrEqual(q, zero)", f"t = {compare}").replace(
        "int64 zero = {0},", "int64 zero = {0}, int64 minus = {-1},")
    m, r, before = fuse("eliminate_true_and", body, opset=17)
    assert r.modified and "And" not in ops(m)
    same(before, m)


def test_constant_trues_of_the_same_shape_go():
    m, r, before = fuse("eliminate_true_and", """g (bool[B,4] m) => (bool[B,4] y) <bool[4] t = {1, 1, 1, 1}> {
        k = And(m, t)
        y = Not(k)
    }""", opset=17)
    assert r.modified and ops(m) == ["Not"]


@pytest.mark.parametrize("change", [
    ("t = GreaterOrEqual(q, zero)", "t = GreaterOrEqual(q, one)"),  # q's 0 fails >= 1
    ("t = GreaterOrEqual(q, zero)", "t = Greater(q, zero)"),        # q's 0 fails > 0
])
def test_a_compare_some_position_fails_is_not_its_case(change):
    m, r, _ = fuse("eliminate_true_and", text().replace(*change), opset=17)
    assert not r.modified and r.stats["near_misses"] == []


@pytest.mark.parametrize("change, why", [
    (("y = Add(scores, bias)", "y = Softmax(bias)"), "Softmax->y reads 'bias' and does not broadcast it back"),
    (("float[B,2,S,S] y", "float[B,1,S,S] y"), "is a graph output"),
])
def test_a_reader_that_keeps_the_spread_shape_is_refused(change, why):
    body = text().replace(*change)
    if "Softmax" in body:
        body = body.replace("float[B,2,S,S] y", "float[B,1,S,S] y")
    else:
        body = body.replace("y = Add(scores, bias)", "y = Where(keep, nil, fill)").replace(
            "    bias = Where(keep, nil, fill)\n", "")
    m, r, _ = fuse("eliminate_true_and", body, opset=17)
    assert not r.modified and near(r, why), r.stats["near_misses"]
