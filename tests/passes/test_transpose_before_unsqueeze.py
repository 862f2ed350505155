"""transpose_before_unsqueeze: Transpose(Unsqueeze(x)) -> Unsqueeze(Transpose(x));
expected graphs, numbers, opsets, and what it leaves."""

import numpy as np
import pytest

from helpers import ops, outputs
from transformer_helpers import fuse


def graph(x="B,32,4,16", axes="3", perm="0, 2, 1, 3, 4", y="B,4,32,1,16", opset=17) -> str:
    unsqueeze = ("u = Unsqueeze(x, axes)" if opset >= 13 else f"u = Unsqueeze<axes = [{axes}]>(x)")
    inits = f"<int64[{len(axes.split(','))}] axes = {{{axes}}}>" if opset >= 13 else ""
    return f"""g (float[{x}] x) => (float[{y}] y) {inits} {{
        {unsqueeze}
        y = Transpose<perm = [{perm}]>(u)
    }}"""


def feeds(shape):
    return {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("opset", [11, 13, 17])
@pytest.mark.parametrize("x, axes, perm, y, want_perm, want_axes", [
    # tf2onnx's query for Keras's einsum: [B, S, H, d] -> [B, S, H, 1, d] -> [B, H, S, 1, d]
    ("B,32,4,16", "3", "0, 2, 1, 3, 4", "B,4,32,1,16", [0, 2, 1, 3], [3]),
    # its key: [B, 1, S, H, d] -> [B, H, 1, S, d]
    ("B,32,4,16", "1", "0, 3, 1, 2, 4", "B,4,1,32,16", [0, 2, 1, 3], [2]),
    # its value: [B, S, 1, H, d] -> [B, H, 1, d, S]
    ("B,32,4,16", "2", "0, 3, 2, 4, 1", "B,4,1,16,32", [0, 2, 3, 1], [2]),
    # two added axes, one negative
    ("2,3", "0, -1", "2, 0, 3, 1", "3,1,1,2", [1, 0], [1, 2]),
])
def test_transpose_moves_before(opset, x, axes, perm, y, want_perm, want_axes):
    m, r, before = fuse("transpose_before_unsqueeze", graph(x, axes, perm, y, opset), opset=opset)
    assert r.modified and ops(m) == ["Transpose", "Unsqueeze"]
    t, u = m.graph.nodes
    assert t.attributes["perm"] == want_perm and t.inputs[0].name == "x"
    got_axes = u.attributes["axes"] if opset < 13 else u.inputs[1].initializer.numpy().tolist()
    assert list(got_axes) == want_axes and u.outputs[0].name == "y"
    shape = [2 if d == "B" else int(d) for d in x.split(",")]
    assert np.array_equal(outputs(before, feeds(shape))[0], outputs(m, feeds(shape))[0])


def test_a_transpose_that_only_moves_the_added_axis_goes():
    m, r, before = fuse("transpose_before_unsqueeze", graph("B,8", "1", "0, 2, 1", "B,8,1"), opset=17)
    assert r.modified and ops(m) == ["Unsqueeze"]
    assert np.array_equal(outputs(before, feeds((3, 8)))[0], outputs(m, feeds((3, 8)))[0])


def test_an_unsqueeze_read_elsewhere_stays():
    text = graph().replace("=> (float[B,4,32,1,16] y)", "=> (float[B,4,32,1,16] y, float[B,32,4,1,16] u)")
    m, r, _ = fuse("transpose_before_unsqueeze", text, opset=17)
    assert not r.modified


def test_axes_computed_at_run_time_stay():
    text = """g (float[B,32,4,16] x, int64[1] axes) => (float[B,4,32,1,16] y) {
        u = Unsqueeze(x, axes)
        y = Transpose<perm = [0, 2, 1, 3, 4]>(u)
    }"""
    m, r, _ = fuse("transpose_before_unsqueeze", text, opset=17)
    assert not r.modified
