"""weight_dims: the dynamic input dims a model's weights fix."""

import numpy as np
import onnx
from onnx import numpy_helper, parser

from pyonnxopt.model import load
from pyonnxopt.verify.inputs import input_specs
from pyonnxopt.weight_dims import weight_implied_dims


def implied(text: str, **weights) -> dict:
    model = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + text)
    for name, shape in weights.items():
        model.graph.initializer.append(numpy_helper.from_array(np.ones(shape, np.float32), name))
    return weight_implied_dims(load(model))


def test_conv_and_conv_transpose_fix_the_channels():
    assert implied("""g (float[N,C,H,W] x, float[N,D,H,W] z) => (float[N,8,H,W] y, float[N,4,H,W] t) {
        y = Conv <kernel_shape = [1, 1], group = 2> (x, w)
        t = ConvTranspose <kernel_shape = [1, 1]> (z, v)
    }""", w=(8, 3, 1, 1), v=(5, 4, 1, 1)) == {"x": {1: 6}, "z": {1: 5}}


def test_matmul_and_gemm_fix_the_inner_dim():
    assert implied("""g (float[B,S,K] x, float[K2,S] u, float[M,K3] g) => (float[B,S,4] y, float[7,S] v, float[M,5] h) {
        y = MatMul(x, b)
        v = MatMul(a, u)
        h = Gemm <transB = 1> (g, c)
    }""", b=(16, 4), a=(7, 9), c=(5, 12)) == {"x": {2: 16}, "u": {0: 9}, "g": {1: 12}}


def test_norms_fix_their_axis_through_cast_and_identity():
    assert implied("""g (double[N,C,L] x, float[N,S,E] z) => (float[N,C,L] y, float[N,S,E] t) {
        a = Cast <to = 1> (x)
        b = Identity(a)
        y = BatchNormalization(b, s, s, s, s)
        t = LayerNormalization <axis = -1> (z, e)
    }""", s=(6,), e=(32,)) == {"x": {1: 6}, "z": {2: 32}}


def test_a_constant_node_weight_counts():
    model = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + """
        g (float[N,K] x) => (float[N,2] y) {
            w = Constant <value = float[3, 2] {1, 2, 3, 4, 5, 6}> ()
            y = MatMul(x, w)
        }""")
    assert weight_implied_dims(load(model)) == {"x": {1: 3}}


def test_static_dims_computed_weights_and_disagreements_give_nothing():
    assert implied("""g (float[N,3,H,W] x, float[N,C,H,W] z, float[N,K] u, float[K2,K2] w)
                   => (float[N,8,H,W] y, float[N,8,H,W] t, float[N,4] v, float[N,4] q) {
        y = Conv <kernel_shape = [1, 1]> (x, a)
        t1 = Conv <kernel_shape = [1, 1]> (z, a)
        t = Conv <kernel_shape = [1, 1]> (z, b)
        v = MatMul(u, w)
        q = MatMul(u, c)
    }""", a=(8, 3, 1, 1), b=(8, 5, 1, 1), c=(7, 4)) == {"u": {1: 7}}


def test_verify_generates_the_fixed_size_wherever_the_dim_is_named(tmp_path):
    model = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>' + """
        g (float[batch,channels,H,W] x, float[batch,channels] m) => (float[batch,8,H,W] y, float[batch,channels] n) {
            y = Conv <kernel_shape = [1, 1]> (x, w)
            n = Relu(m)
        }""")
    model.graph.initializer.append(numpy_helper.from_array(np.ones((8, 3, 1, 1), np.float32), "w"))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert [s.shape for s in input_specs(str(path))] == [["batch", 3, "H", "W"], ["batch", 3]]
