"""fuse_consecutive_slices: structure, numbers, the inner Slice's other readers, refusals."""

import numpy as np

import pyonnxopt
from pyonnxopt.passes import get

from helpers import ops, outputs, parse

PATCH_MERGE = """g (float[2,6,6,3] x) => (float[2,3,3,3] y0, float[2,3,3,3] y1) <int64[1] z = {0}, int64[1] o = {1},
        int64[1] big = {9223372036854775807}, int64[1] a1 = {1}, int64[1] a2 = {2}, int64[1] two = {2}> {
    r0 = Slice(x, z, big, a1, two)
    y0 = Slice(r0, z, big, a2, two)
    y1 = Slice(r0, o, big, a2, two)
}"""


def run(text):
    before = parse(text)
    m = pyonnxopt.load(before)
    get("infer_shapes").run(m)
    r = get("fuse_consecutive_slices").run(m)
    assert m.check_invariants() == []
    return before, m, r


def same(before, m, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for want, got in zip(outputs(before, {"x": x}), outputs(m, {"x": x})):
        assert np.array_equal(want, got)


def test_both_readers_merge_and_the_inner_slice_goes():
    before, m, r = run(PATCH_MERGE)
    assert ops(m) == ["Slice", "Slice"] and all(n.inputs[0].name == "x" for n in m.graph.nodes)
    assert [n.outputs[0].name for n in m.graph.nodes] == ["y0", "y1"]
    assert m.graph.nodes[0].inputs[3].initializer.numpy().tolist() == [1, 2]
    same(before, m, (2, 6, 6, 3))


def test_an_inner_slice_read_elsewhere_stays_for_that_reader():
    before, m, r = run("""g (float[4,4] x) => (float[2,2] y, float[2,4] w) <int64[1] z = {0}, int64[1] e = {2},
            int64[1] a0 = {0}, int64[1] a1 = {1}> {
        w = Slice(x, z, e, a0)
        y = Slice(w, z, e, a1)
    }""")
    assert ops(m) == ["Slice", "Slice"] and m.graph.nodes[-1].inputs[0].name == "x"
    same(before, m, (4, 4))


def test_same_axis_and_negative_axis_of_unknown_rank_are_refused():
    before, m, r = run("""g (float[8] x) => (float[2] y) <int64[1] z = {0}, int64[1] e = {4}, int64[1] e2 = {2}> {
        a = Slice(x, z, e)
        y = Slice(a, z, e2)
    }""")
    assert not r.modified and "Slice->y: the two Slices share an axis" in r.stats["near_misses"]
    before, m, r = run("""g (float[N,M] x) => (float[N,M] y) <int64[1] z = {0}, int64[1] e = {2}, int64[1] n1 = {-1}, int64[1] a0 = {0}> {
        a = Slice(x, z, e, a0)
        y = Slice(a, z, e, n1)
    }""")
    assert r.modified  # the rank (2) is known from the declared type
    same(before, m, (3, 5))
