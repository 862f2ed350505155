"""cancel_reshapes_around_transpose: run-time Reshape targets around a
Transpose, proven from symbolic dims; structure, numbers, refusals."""

import numpy as np
import pytest

import pyonnxopt

from helpers import ops, outputs
from transformer_helpers import fuse


def sandwich(x="B,4,T,8", merge="m1, t, d", perm="0, 2, 1", split="bh, d, t", y="B,4,8,T") -> str:
    """torch dynamo's K^T: [B, H, T, D] -> [B*H, T, D] -> [B*H, D, T] ->
    [B, H, D, T], both targets computed from x's shape at run time."""
    return f"""g (float[{x}] x) => (float[{y}] y) <int64[1] m1 = {{-1}}, int64[1] d = {{8}}> {{
        t = Shape<start = 2, end = 3>(x)
        bh = Shape<start = 0, end = 2>(x)
        merge_shape = Concat<axis = 0>({merge})
        r = Reshape(x, merge_shape)
        moved = Transpose<perm = [{perm}]>(r)
        split_shape = Concat<axis = 0>({split})
        y = Reshape(moved, split_shape)
    }}"""


def run(text):
    m, r, before = fuse("cancel_reshapes_around_transpose", text, opset=17)
    return before, m, r


def feeds(shape=(2, 4, 5, 8)):
    return {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def test_dynamo_k_transposed_becomes_one_transpose():
    before, m, r = run(sandwich())
    assert r.modified
    live = [n for n in m.graph.nodes if n.op_type != "Shape" and n.op_type != "Concat"]
    assert [n.op_type for n in live] == ["Transpose"] and live[0].attributes["perm"] == [0, 1, 3, 2]
    assert live[0].inputs[0].name == "x" and live[0].outputs[0].name == "y"
    for shape in ((2, 4, 5, 8), (1, 4, 1, 8), (3, 4, 7, 8)):
        assert np.array_equal(outputs(before, feeds(shape))[0], outputs(m, feeds(shape))[0])


@pytest.mark.parametrize("y, split, perm", [("B,1,8,T", "b, one, d, t", [0, 1, 3, 2]),
                                            ("B,8,T,1", "b, d, t, one", [0, 3, 2, 1])])
def test_axes_of_size_1_may_come_and_go(y, split, perm):
    """Falcon's one key/value head, from torch's dynamo exporter: [B, 1, T, 8]
    -> [B, T, 8] -> [B, 8, T] -> [B, 1, 8, T]."""
    text = sandwich(x="B,1,T,8", merge="b, t, d", split=split, y=y).replace(
        "bh = Shape<start = 0, end = 2>(x)",
        "b = Shape<start = 0, end = 1>(x)\n        one = Shape<start = 1, end = 2>(x)")
    before, m, r = run(text)
    transposes = [n for n in m.graph.nodes if n.op_type == "Transpose"]
    assert r.modified and "Reshape" not in ops(m) and [t.attributes["perm"] for t in transposes] == [perm]
    for shape in ((2, 1, 5, 8), (1, 1, 1, 8)):
        assert np.array_equal(outputs(before, feeds(shape))[0], outputs(m, feeds(shape))[0])


def test_heads_moved_between_the_reshapes():
    # [B, 4, T, 8] -> [B*4, T, 8] -> [T, B*4, 8] -> [T, B, 4, 8]: perm [2, 0, 1, 3]
    text = sandwich(perm="1, 0, 2", split="t, bh, d", y="T,B,4,8")
    before, m, r = run(text)
    transposes = [n for n in m.graph.nodes if n.op_type == "Transpose"]
    assert r.modified and len(transposes) == 1 and transposes[0].attributes["perm"] == [2, 0, 1, 3]
    assert "Reshape" not in ops(m)
    assert np.array_equal(outputs(before, feeds())[0], outputs(m, feeds())[0])


def test_a_sandwich_that_moves_nothing_goes():
    text = sandwich(perm="0, 1, 2", split="bh, t, d", y="B,4,T,8")
    before, m, r = run(text)
    assert r.modified and "Reshape" not in ops(m) and "Transpose" not in ops(m)
    assert np.array_equal(outputs(before, feeds())[0], outputs(m, feeds())[0])


@pytest.mark.parametrize("text, why", [
    # split back in another order: [B*4] -> [4, B] is not the merge undone
    (sandwich(split="hb, d, t", y="4,B,8,T").replace("bh = Shape<start = 0, end = 2>(x)",
                                                    "bh0 = Shape<start = 0, end = 1>(x)\n"
                                                    "h1 = Shape<start = 1, end = 2>(x)\n"
                                                    "hb = Concat<axis = 0>(h1, bh0)"),
     "not back into"),
    # an axis of size 1 dropped for good: [B, 1, T, 8] -> [B*T, 8] -> [8, B*T] -> [8, B, T]
    (sandwich(x="B,1,T,8", merge="m1, d", perm="1, 0", split="d, b, t", y="8,B,T").replace(
        "bh = Shape<start = 0, end = 2>(x)", "b = Shape<start = 0, end = 1>(x)"), "differ in rank"),
    # two runs merged, [B*4, T*8]: the middle is not one run
    (sandwich(merge="m1, td", split="bh, t, d", y="B,4,T,8", perm="0, 1").replace(
        "merge_shape", "td = Mul(t, d)\n        merge_shape", 1), "does more than merge one run"),
])
def test_refusals(text, why):
    before, m, r = run(text)
    assert not r.modified and any(why in x for x in r.stats["near_misses"]), r.stats["near_misses"]


def test_runs():
    runs = pyonnxopt.fusion.rules.cancel_reshapes_around_transpose._runs
    assert runs(["B", 4, "T", 8], ["n", "T", 8]) == [[0, 1], [2], [3]]
    assert runs(["B", 4, "T", 8], ["B", 4, "T", 8]) == [[0], [1], [2], [3]]
    assert runs([2, 3, 4], [2, 12]) == [[0], [1, 2]]
    assert runs([2, 1, 3], [2, 3]) is None  # an axis dropped, not merged
    assert runs(["B", "T", 8], ["T", "B", 8]) is None  # two axes in the middle: not one run
