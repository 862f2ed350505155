"""select_concat_entries: Where(constant condition, constant, 1-d Concat)
picks whole entries -> the Concat holds them; expected graphs, numbers,
refusals."""

import numpy as np
import pytest

from fusion_helpers import near_misses
from helpers import ops, outputs
from transformer_helpers import fuse

# ViT's class token, expand(B, -1, -1): TorchScript's guard picks 1 where
# the target holds -1 (the condition already folded from Equal(s, -1)).
GUARD = """g (float[1,1,8] tok, float[B,5,8] x) => (float[B,1,8] y)
        <bool[3] cond = {0, 1, 1}, int64[3] ones = {1, 1, 1}, int64[1] minus = {-1}> {
    b = Shape<start = 0, end = 1>(x)
    s = Concat<axis = 0>(b, minus, minus)
    t = Where(cond, ones, s)
    y = Expand(tok, t)
}"""


def feeds(b=3):
    rng = np.random.default_rng(0)
    return {"tok": rng.standard_normal((1, 1, 8)).astype(np.float32),
            "x": rng.standard_normal((b, 5, 8)).astype(np.float32)}


def concat_parts(m):
    concat = next(n for n in m.graph.nodes if n.op_type == "Concat" and n.outputs[0].name == "t")
    return [v.name if v.initializer is None else v.initializer.numpy().tolist() for v in concat.inputs]


@pytest.mark.parametrize("text", [GUARD, GUARD.replace("{0, 1, 1}", "{1, 0, 0}").replace("Where(cond, ones, s)",
                                                                                         "Where(cond, s, ones)")])
def test_the_guard_becomes_the_concat_of_the_picked_entries(text):
    m, r, before = fuse("select_concat_entries", text, opset=17)
    assert r.modified and "Where" not in ops(m)
    assert concat_parts(m) == ["b", [1, 1]]
    for b in (1, 3):
        assert np.array_equal(outputs(before, feeds(b))[0], outputs(m, feeds(b))[0])


def test_a_constant_part_half_picked_and_a_computed_part_replaced_whole():
    m, r, before = fuse("select_concat_entries", """g (float[B,5,8] x) => (int64[3] t)
            <bool[3] cond = {1, 0, 1}, int64[3] ones = {1, 1, 1}, int64[2] pair = {-1, 7}> {
        b = Shape<start = 0, end = 1>(x)
        s = Concat<axis = 0>(b, pair)
        t = Where(cond, ones, s)
    }""", opset=17)
    assert r.modified and concat_parts(m) == [[1, -1, 1]]  # b goes whole, pair keeps its -1
    x = {"x": feeds()["x"]}
    assert np.array_equal(outputs(before, x)[0], outputs(m, x)[0])


def test_a_computed_part_only_partly_picked_is_refused():
    m, r, _ = fuse("select_concat_entries", """g (float[B,5,8] x) => (int64[3] t)
            <bool[3] cond = {0, 1, 1}, int64[3] ones = {1, 1, 1}, int64[1] minus = {-1}> {
        bs = Shape<start = 0, end = 2>(x)
        s = Concat<axis = 0>(bs, minus)
        t = Where(cond, ones, s)
    }""", opset=17)
    assert not r.modified and any("only some of its entries are picked" in x for x in near_misses(r))


def test_a_condition_computed_at_run_time_is_not_its_case():
    m, r, _ = fuse("select_concat_entries", """g (float[B,5,8] x) => (int64[3] t)
            <int64[3] ones = {1, 1, 1}, int64[1] minus = {-1}> {
        b = Shape<start = 0, end = 1>(x)
        s = Concat<axis = 0>(b, minus, minus)
        cond = Equal(s, ones)
        t = Where(cond, ones, s)
    }""", opset=17)
    assert not r.modified and near_misses(r) == []
