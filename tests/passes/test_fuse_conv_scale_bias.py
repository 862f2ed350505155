"""fuse_conv_scale_bias: a constant per-channel Mul/Add after Conv,
ConvTranspose or Gemm folded into the weight and bias. Numbers:
onnxruntime, original against fused, rtol = atol = 1e-5 in float32."""

import numpy as np
import pytest

from fusion_helpers import assert_same_outputs, fused_by, near_misses, rng_weights, run_rule, with_weights
from helpers import ops, structure

RULE = "fuse_conv_scale_bias"
CONV = "g (float[1,4,8,8] x) => (float[1,6,6,6] y)"


def fused(proto):
    return fused_by(RULE, proto)


def test_conv_mul_scales_weight_and_bias():
    proto = with_weights(CONV + " { t = Conv <strides = [1, 1]> (x, w, b)  y = Mul (t, k) }",
                         **rng_weights(w=(6, 4, 3, 3), b=(6,), k=(6, 1, 1)))
    m, r = fused(proto)
    ((op, (x, w, b), out),) = structure(m)
    assert (op, x, out) == ("Conv", "x", ["y"]) and w != "w" and b != "b"
    assert m.graph.nodes[0].attributes == {"strides": [1, 1]}
    assert r.stats["rewrites"][0]["consumed"] == ["Mul->y", "Conv->t"]
    assert not run_rule(RULE, m.to_onnx())[1].modified


def test_conv_add_without_bias_creates_one_and_keeps_the_weight():
    proto = with_weights(CONV + " { t = Conv (x, w)  y = Add (k, t) }", **rng_weights(w=(6, 4, 3, 3), k=(1, 6, 1, 1)))
    m, _ = fused(proto)
    ((op, (x, w, b), out),) = structure(m)
    assert (op, x, w, out) == ("Conv", "x", "w", ["y"]) and m.graph.nodes[0].inputs[2].initializer.dims == [6]


@pytest.mark.parametrize("op", ["Mul", "Add"])
@pytest.mark.parametrize("k_shape", [(), (1,), (1, 1, 1)])
def test_scalar_constants(op, k_shape):
    fused(with_weights(CONV + f" {{ t = Conv (x, w, b)  y = {op} (t, k) }}", **rng_weights(w=(6, 4, 3, 3), b=(6,), k=k_shape)))


@pytest.mark.parametrize("op", ["Mul", "Add"])
def test_grouped_conv_transpose(op):
    proto = with_weights(f"""g (float[1,4,5,5] x) => (float[1,6,11,11] y) {{
        t = ConvTranspose <group = 2, strides = [2, 2]> (x, w, b)
        y = {op} (t, k)
    }}""", **rng_weights(w=(4, 3, 3, 3), b=(6,), k=(6, 1, 1)))
    m, _ = fused(proto)
    assert ops(m) == ["ConvTranspose"]


def test_gemm_mul_scales_the_columns_and_a_per_row_c():
    proto = with_weights("""g (float[3,5] a) => (float[3,6] y) {
        t = Gemm <transB = 1, beta = 0.5> (a, w, c)
        y = Mul (t, k)
    }""", **rng_weights(w=(6, 5), c=(3, 6), k=(6,)))
    m, _ = fused(proto)
    (gemm,) = m.graph.nodes
    assert gemm.attributes == {"transB": 1, "beta": 0.5} and gemm.inputs[2].initializer.dims == [3, 6]


@pytest.mark.parametrize("c", [True, False])
def test_gemm_add_moves_beta_into_c(c):
    proto = with_weights(f"""g (float[3,5] a) => (float[3,6] y) {{
        t = Gemm <beta = 0.5> (a, w{', c' if c else ''})
        y = Add (t, k)
    }}""", **rng_weights(w=(5, 6), k=(1, 6), **({"c": (6,)} if c else {})))
    m, _ = fused(proto)
    (gemm,) = m.graph.nodes
    assert gemm.attributes == {"beta": 1.0} and gemm.inputs[1].name == "w"


def refusal(text, seed_inf=False, **shapes):
    weights = rng_weights(**shapes)
    if seed_inf:
        weights["k"].flat[0] = np.inf
    m, r = run_rule(RULE, with_weights(text, **weights))
    assert not r.modified
    return near_misses(r)


def test_refuses_a_vector_that_varies_along_the_last_spatial_axis():
    assert refusal(CONV + " { t = Conv (x, w)  y = Mul (t, k) }", w=(6, 4, 3, 3), k=(6,)) == [
        "the constant's shape [6] varies along spatial axis 3"]


def test_refuses_a_constant_that_widens_the_output():
    assert refusal("g (float[1,4,8,8] x) => (float[1,1,6,6,6] y) { t = Conv (x, w)  y = Add (t, k) }",
                   w=(6, 4, 3, 3), k=(1, 1, 1, 1, 1)) == [
        "the constant's shape [1, 1, 1, 1, 1] has more axes than the output's 4: the broadcast would change the output shape"]
    assert refusal("g (float[1,4,8,8] x) => (float[1,3,6,6] y) { t = Conv (x, w)  y = Add (t, k) }",
                   w=(1, 4, 3, 3), k=(3, 1, 1)) == [
        "the constant's shape [3, 1, 1] has 3 elements along the channel axis, the output 1"]


def test_refuses_a_gemm_constant_per_row():
    assert refusal("g (float[3,5] a) => (float[3,6] y) { t = Gemm (a, w)  y = Add (t, k) }", w=(5, 6), k=(3, 1)) == [
        "the constant's shape [3, 1] varies along the batch axis 0"]


def test_refuses_an_infinite_scale():
    assert refusal(CONV + " { t = Conv (x, w)  y = Mul (t, k) }", w=(6, 4, 3, 3), k=(6, 1, 1), seed_inf=True) == [
        "the scale is not finite"]


def test_refuses_another_reader_and_a_non_constant():
    assert refusal(CONV.replace("y)", "y, float[1,6,6,6] z)") + " { t = Conv (x, w)  y = Mul (t, k)  z = Relu (t) }",
                   w=(6, 4, 3, 3), k=(6, 1, 1)) == ["'producer': its output 't' is also read by 'Relu->z'"]
    proto = with_weights("g (float[1,4,8,8] x, float[6,1,1] k) => (float[1,6,6,6] y) { t = Conv (x, w)  y = Mul (t, k) }",
                         **rng_weights(w=(6, 4, 3, 3)))
    m, r = run_rule(RULE, proto)
    assert not r.modified and "'k'" in r.stats["near_misses"][0]


def test_float16_and_opset_6():
    proto = with_weights("g (float16[1,4,8,8] x) => (float16[1,6,6,6] y) { t = Conv (x, w)  y = Mul (t, k) }",
                         **rng_weights(dtype=np.float16, w=(6, 4, 3, 3), k=(6, 1, 1)))
    m, r = run_rule(RULE, proto)
    assert r.modified and ops(m) == ["Conv"]
    assert_same_outputs(proto, m, rtol=1e-2, atol=1e-2)
    m, r = run_rule(RULE, with_weights(CONV + " { t = Conv (x, w)  y = Mul (t, k) }", 6,
                                       **rng_weights(w=(6, 4, 3, 3), k=(6, 1, 1))), shapes=False, valid=False)
    assert not r.modified and r.stats["near_misses"] == []


def test_torch_frozen_batchnorm_style_scale_and_shift():
    torch = pytest.importorskip("torch")
    import io

    import onnx

    class ConvAffine(torch.nn.Module):  # torchvision's FrozenBatchNorm2d computes x * scale + shift
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, bias=False)
            self.register_buffer("scale", torch.rand(1, 8, 1, 1) + 0.5)
            self.register_buffer("shift", torch.randn(1, 8, 1, 1))

        def forward(self, x):
            return self.conv(x) * self.scale + self.shift

    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.onnx.export(ConvAffine().eval(), torch.randn(1, 3, 8, 8), buf, dynamo=False, opset_version=17)
    proto = onnx.load_from_string(buf.getvalue())
    assert [n.op_type for n in proto.graph.node] == ["Conv", "Mul", "Add"]
    m, r = run_rule(RULE, proto)
    assert ops(m) == ["Conv", "Add"]  # the Add's reader was the Mul: it folds on the next run
    m, r = run_rule(RULE, m.to_onnx())
    assert ops(m) == ["Conv"] and m.graph.outputs[0].name == proto.graph.output[0].name
    assert_same_outputs(proto, m)


def test_refuses_a_malformed_bias_instead_of_raising():
    m, r = run_rule(RULE, with_weights(CONV + " { t = Conv (x, w, b)  y = Add (t, k) }",
                                       **rng_weights(w=(6, 4, 3, 3), b=(5,), k=(6, 1, 1))), shapes=False, valid=False)
    assert not r.modified and near_misses(r) == ["Conv B has shape [5], not [6]"]
    m, r = run_rule(RULE, with_weights("g (float[3,5] a) => (float[3,6] y) { t = Gemm (a, w, c)  y = Mul (t, k) }",
                                       **rng_weights(w=(5, 6), c=(3, 4), k=(6,))), shapes=False, valid=False)
    assert not r.modified and near_misses(r) == ["Gemm C has shape [3, 4], which does not broadcast to [rows, 6]"]
