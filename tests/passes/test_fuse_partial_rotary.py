"""fuse_partial_rotary: RotaryEmbedding on a head's first r channels,
concatenated with the rest, becomes one with rotary_embedding_dim=r."""

import numpy as np
import pytest

from helpers import ops
from transformer_helpers import assert_same_outputs, fuse, near

TOL = dict(rtol=1e-5, atol=1e-5)


def simple(start_end=(0, 8), rest=(8, 16), half=4, rotary_attrs="num_heads = 4", out_width=16, steps=1) -> str:
    return f"""g (float[B,4,S,16] x, float[B,S,{half}] cos, float[B,S,{half}] sin) => (float[B,4,S,{out_width}] y)
            <int64[1] a0 = {{{start_end[0]}}}, int64[1] a1 = {{{start_end[1]}}}, int64[1] b0 = {{{rest[0]}}},
             int64[1] b1 = {{{rest[1]}}}, int64[1] last = {{-1}}, int64[1] step = {{{steps}}}> {{
        a = Slice(x, a0, a1, last, step)  b = Slice(x, b0, b1, last)
        ra = RotaryEmbedding <{rotary_attrs}> (a, cos, sin)
        y = Concat <axis = -1> (ra, b)
    }}"""


def feeds(half=4):
    rng = np.random.default_rng(5)
    angles = rng.uniform(0, 6, (2, 5, half)).astype(np.float32)
    return {"x": rng.standard_normal((2, 4, 5, 16), dtype=np.float32), "cos": np.cos(angles), "sin": np.sin(angles)}


@pytest.mark.parametrize("rest_end", [16, 9223372036854775807, 1000])
@pytest.mark.parametrize("interleaved", [0, 1])
def test_one_rotary_with_its_rotated_channels(rest_end, interleaved):
    m, r, original = fuse("fuse_partial_rotary", simple(rest=(8, rest_end), rotary_attrs=f"num_heads = 4, "
                                                        f"interleaved = {interleaved}"), opset=23)
    assert ops(m) == ["RotaryEmbedding"]
    a = m.graph.nodes[0].attributes
    assert (a["rotary_embedding_dim"], a["interleaved"]) == (8, interleaved) and m.graph.nodes[0].inputs[0].name == "x"
    assert_same_outputs(original, m, feeds(), **TOL)


@pytest.mark.parametrize("text, reason", [
    (simple(start_end=(0, 6), half=3, out_width=14), "the slices are not x's first r and last 16 - r channels"),
    (simple(start_end=(2, 8), half=3, out_width=14), "the slices are not x's first r and last 16 - r channels"),
    (simple(steps=2, half=2, out_width=12), "the slices are not x's first r"),
    (simple(half=2, rotary_attrs="num_heads = 4, rotary_embedding_dim = 4"), "already rotates 4 of its 8 channels"),
])
def test_other_slices_refuse(text, reason):
    m, r, _ = fuse("fuse_partial_rotary", text, opset=23)
    assert not r.modified and near(r, reason)


@pytest.mark.parametrize("sizes", ["8, 8", "6, 10"])
def test_the_slices_as_one_split(sizes):
    # slices_to_split writes the two Slices as one Split
    r = int(sizes.split(",")[0])
    text = f"""g (float[B,4,S,16] x, float[B,S,{r // 2}] cos, float[B,S,{r // 2}] sin) => (float[B,4,S,16] y)
            <int64[2] parts = {{{sizes}}}> {{
        a, b = Split <axis = -1> (x, parts)
        ra = RotaryEmbedding <num_heads = 4> (a, cos, sin)
        y = Concat <axis = -1> (ra, b)
    }}"""
    m, result, original = fuse("fuse_partial_rotary", text, opset=23)
    assert ops(m) == ["RotaryEmbedding"] and m.graph.nodes[0].attributes["rotary_embedding_dim"] == r
    assert_same_outputs(original, m, feeds(r // 2), **TOL)


def test_a_split_into_three_refuses():
    text = """g (float[B,4,S,16] x, float[B,S,2] cos, float[B,S,2] sin) => (float[B,4,S,12] y, float[B,4,S,4] c)
            <int64[3] parts = {4, 8, 4}> {
        a, b, c = Split <axis = -1> (x, parts)
        ra = RotaryEmbedding <num_heads = 4> (a, cos, sin)
        y = Concat <axis = -1> (ra, b)
    }"""
    m, result, _ = fuse("fuse_partial_rotary", text, opset=23)
    assert not result.modified and near(result, "'passed': its output 'c' is a graph output")
