"""eliminate_zero_rnn_states: an all-zero initial state of an LSTM, GRU or
RNN goes (the op starts from zeros); the results stay the same."""

import numpy as np
import pytest

import pyonnxopt
from pyonnxopt.passes import get

from helpers import outputs, parse

W = "float[1,32,3] W = {%s}, float[1,32,8] R = {%s}" % (",".join(["0.1"] * 96), ",".join(["0.05"] * 256))
GW = "float[1,24,3] W = {%s}, float[1,24,8] R = {%s}" % (",".join(["0.1"] * 72), ",".join(["0.05"] * 192))


def run(text, opset=17):
    before = parse(text, opset)
    m = pyonnxopt.load(before)
    get("infer_shapes").run(m)
    r = get("eliminate_zero_rnn_states").run(m)
    get("eliminate_dead_code").run(m)
    assert m.check_invariants() == []
    x = np.random.default_rng(0).standard_normal((5, 2, 3)).astype(np.float32)
    for want, got in zip(outputs(before, {"x": x}), outputs(m, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    return m, r


def test_tf2onnx_zeros_sized_from_the_batch_go():
    m, r = run(f"""g (float[T,N,3] x) => (float[T,1,N,8] y) <{W}, float zero = {{0.0}}, int64[1] h = {{8}},
            int64[1] b0 = {{1}}, int64[1] b1 = {{2}}, int64[1] ax = {{0}}> {{
        s = Shape(x)
        n = Slice(s, b0, b1)
        shape = Concat <axis = 0> (n, h)
        z = Expand(zero, shape)
        h0 = Unsqueeze(z, ax)
        y, yh, yc = LSTM <hidden_size = 8> (x, W, R, , , h0, h0)
    }}""")
    lstm = next(n for n in m.graph.nodes if n.op_type == "LSTM")
    assert r.modified and all(v is None for v in lstm.inputs[5:]) and [n.op_type for n in m.graph.nodes] == ["LSTM"]


def gru(state):
    return run(f"""g (float[T,2,3] x) => (float[T,1,2,8] y) <{GW}, int64[3] sh = {{1, 2, 8}},
            int64[3] big = {{2, 2, 8}}, int64[1] i0 = {{0}}, int64[1] i1 = {{1}}, int64[1] i2 = {{2}}> {{
        {state}
        y, yh = GRU <hidden_size = 8> (x, W, R, , , h0)
    }}""")


@pytest.mark.parametrize("state", [
    "h0 = ConstantOfShape <value = float[1] {0.0}> (sh)",
    "h0 = ConstantOfShape(sh)",
    # paddle2onnx: every layer's state sliced from one zero tensor
    "z = ConstantOfShape(big)  h0 = Slice(z, i1, i2, i0)",
])
def test_constant_of_shape_zeros_go(state):
    m, r = gru(state)
    assert r.modified and [n.op_type for n in m.graph.nodes] == ["GRU"]


@pytest.mark.parametrize("state", ["h0 = ConstantOfShape <value = float[1] {0.5}> (sh)",
                                   "one = Constant <value = float {1.0}> ()  h0 = Expand(one, sh)"])
def test_other_states_stay(state):
    m, r = gru(state)
    assert not r.modified


def test_a_state_fed_in_stays():
    text = f"""g (float[T,2,3] x, float[1,2,8] h0) => (float[T,1,2,8] y) <{GW}> {{
        y, yh = GRU <hidden_size = 8> (x, W, R, , , h0)
    }}"""
    m = pyonnxopt.load(parse(text, 17))
    assert not get("eliminate_zero_rnn_states").run(m).modified
