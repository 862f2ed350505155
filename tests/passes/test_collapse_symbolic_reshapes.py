"""collapse_symbolic_reshapes: reshape-like chains that only add or remove
dims of 1, read from symbolic dims through targets computed at run time ->
Squeeze and/or Unsqueeze; expected graphs, numbers, what it leaves."""

import numpy as np
import pytest

from helpers import ops, outputs
from transformer_helpers import fuse as fuse_only

from pyonnxopt.passes import get


def fuse(rule, text, **kw):
    """The rule, then dead code removal (the targets it leaves unread)."""
    m, r, before = fuse_only(rule, text, **kw)
    get("eliminate_dead_code").run(m)
    return m, r, before

# After gather_own_positions: the mask [B, 1, 1, S, 1] flattened and
# reshaped to the index's shape, read at run time.
MASK = """g (bool[B,S] mask, int64[B,1,1,S] idx) => (bool[B,1,1,S] y)
        <int64[3] axes = {1, 2, 4}, int64[1] flat = {-1}> {
    u = Unsqueeze(mask, axes)
    r = Reshape(u, flat)
    si = Shape(idx)
    y = Reshape(r, si)
}"""

# One dim of 1 moves: [B, 1, S] -> [B, S] -> [B, S, 1], the target computed.
MOVE = """g (float[B,1,S] x) => (float[B,S,1] y) <int64[1] one = {1}> {
    f = Flatten<axis = 1>(x)
    bs = Shape<start = 0, end = 1>(x)
    ss = Shape<start = 2, end = 3>(x)
    t = Concat<axis = 0>(bs, ss, one)
    y = Reshape(f, t)
}"""


def feeds(text, b=3, s=5):
    rng = np.random.default_rng(0)
    if "mask" in text:
        return {"mask": rng.random((b, s)) > 0.4, "idx": np.zeros((b, 1, 1, s), np.int64)}
    return {"x": rng.standard_normal((b, 1, s)).astype(np.float32)}


def axes_of(m, op):
    return [n.inputs[1].initializer.numpy().tolist() for n in m.graph.nodes if n.op_type == op]


def same(text, before, after):
    for b, s in ((1, 1), (3, 5), (2, 7)):
        f = feeds(text, b, s)
        assert np.array_equal(outputs(before, f)[0], outputs(after, f)[0])


def test_three_reshapes_of_the_mask_become_one_unsqueeze():
    m, r, before = fuse("collapse_symbolic_reshapes", MASK, opset=17)
    assert r.modified and ops(m) == ["Unsqueeze"] and axes_of(m, "Unsqueeze") == [[1, 2]]
    same(MASK, before, m)


def test_a_moved_dim_of_1_is_a_squeeze_and_an_unsqueeze_once_the_computed_target_goes():
    m, r, before = fuse("collapse_symbolic_reshapes", MOVE, opset=17)
    assert r.modified and ops(m) == ["Squeeze", "Unsqueeze"]
    assert axes_of(m, "Squeeze") == [[1]] and axes_of(m, "Unsqueeze") == [[2]]
    same(MOVE, before, m)


def test_opset_11_takes_the_axes_as_attributes():
    text = MASK.replace("u = Unsqueeze(mask, axes)", "u = Unsqueeze<axes = [1, 2, 4]>(mask)")
    m, r, before = fuse("collapse_symbolic_reshapes", text, opset=11)
    n = next(n for n in m.graph.nodes if n.op_type == "Unsqueeze")
    assert r.modified and ops(m) == ["Unsqueeze"] and n.attributes["axes"] == [1, 2]
    same(text, before, m)


def test_dims_back_to_the_input_give_it_back():
    text = MASK.replace("bool[B,1,1,S] y", "bool[B,S] y").replace("int64[B,1,1,S] idx", "int64[B,S] idx")
    m, r, before = fuse("collapse_symbolic_reshapes", text, opset=17)
    assert r.modified and ops(m) == ["Identity"]


@pytest.mark.parametrize("text", [
    # the dims swap: not a move of 1s
    MOVE.replace("t = Concat<axis = 0>(bs, ss, one)", "t = Concat<axis = 0>(ss, bs, one)")
        .replace("float[B,S,1] y", "float[S,B,1] y"),
    # constant targets, as many nodes after as before
    """g (float[B,1,S] x) => (float[B,S,1] y) <int64[1] a0 = {1}, int64[1] a2 = {2}> {
        f = Squeeze(x, a0)
        y = Unsqueeze(f, a2)
    }""",
    # a dim the chain's input does not know
    MOVE.replace("float[B,1,S] x", "float[B,1,?] x").replace("float[B,S,1] y", "float[B,?,1] y"),
])
def test_what_it_leaves(text):
    m, r, _ = fuse("collapse_symbolic_reshapes", text, opset=17, full_check=False)
    assert not r.modified and r.stats["near_misses"] == []
