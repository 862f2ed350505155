"""squeeze_into_reshape: Squeeze(Reshape(x, computed target)) whose squeezed
entries are constant 1s -> one Reshape; expected graphs, numbers, refusals."""

import numpy as np
import pytest

from fusion_helpers import near_misses
from helpers import outputs
from transformer_helpers import fuse


def graph(tail="int64[3] tail = {4, 16, 1}", squeeze="4", y="B,S,4,16", opset=17) -> str:
    """tf2onnx's EinsumDense with a dynamic length: [B*S, 64] -> [B, S, 4, 16, 1] -> Squeeze."""
    squeezed = "y = Squeeze(r, axes)" if opset >= 13 else f"y = Squeeze <axes = [{squeeze}]> (r)"
    axes = f", int64[{squeeze.count(',') + 1}] axes = {{{squeeze}}}" if opset >= 13 else ""
    return f"""g (float[N,64] x, float[B,S,64] h) => (float[{y}] y) <int64[2] lead = {{0, 1}}, {tail}{axes}> {{
        s = Shape(h)
        bs = Gather(s, lead)
        t = Concat <axis = 0> (bs, tail)
        r = Reshape(x, t)
        {squeezed}
    }}"""


def feeds(b=2, s=3):
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((b * s, 64)).astype(np.float32),
            "h": rng.standard_normal((b, s, 64)).astype(np.float32)}


@pytest.mark.parametrize("opset", [11, 17])
def test_the_squeezed_1_leaves_the_computed_target(opset):
    m, r, before = fuse("squeeze_into_reshape", graph(opset=opset), opset=opset)
    assert r.modified
    reshape = next(n for n in m.graph.nodes if n.op_type == "Reshape")
    assert "Squeeze" not in [n.op_type for n in m.graph.nodes] and reshape.outputs[0].name == "y"
    concat = reshape.inputs[1].producer
    assert concat.op_type == "Concat" and concat.inputs[0].name == "bs"
    assert concat.inputs[1].initializer.numpy().tolist() == [4, 16]
    for b, s in ((2, 3), (1, 5)):
        assert np.array_equal(outputs(before, feeds(b, s))[0], outputs(m, feeds(b, s))[0])


def test_two_trailing_ones_and_a_part_that_goes_whole():
    text = graph(tail="int64[1] tail = {64}, int64[2] ones = {1, 1}", squeeze="3, 4", y="B,S,64")
    text = text.replace("Concat <axis = 0> (bs, tail)", "Concat <axis = 0> (bs, tail, ones)")
    m, r, before = fuse("squeeze_into_reshape", text, opset=17)
    assert r.modified
    concat = next(n for n in m.graph.nodes if n.op_type == "Reshape").inputs[1].producer
    assert [v.name for v in concat.inputs] == ["bs", "tail"]
    assert np.array_equal(outputs(before, feeds())[0], outputs(m, feeds())[0])


@pytest.mark.parametrize("text, why", [
    # the squeezed entry is computed
    (graph(squeeze="1", y="B,4,16,1"), "not constant 1s"),
    # a 0 after the squeezed axis copies the input's dim at its position, which would move
    (graph(tail="int64[4] tail = {1, 4, 16, 0}", squeeze="2", y="B,S,4,16,0"), "may be 0"),
])
def test_refusals(text, why):
    m, r, _ = fuse("squeeze_into_reshape", text, opset=17, full_check=False)
    assert not r.modified and any(why in x for x in near_misses(r)), near_misses(r)
