"""fuse_conv_input_scale: a constant scale of a Conv's input -> its weight;
a constant shift -> its bias where it pads nothing. Numbers: onnxruntime,
original against fused, rtol = atol = 1e-5 in float32."""

import pytest

from fusion_helpers import assert_same_outputs, fused_by, near_misses, rng_weights, run_rule, with_weights
from helpers import ops, structure

RULE = "fuse_conv_input_scale"


def fused(proto):
    return fused_by(RULE, proto)


@pytest.mark.parametrize("affine, k_shape, group, w_shape", [
    ("Mul(x, k)", (), 1, (6, 4, 3, 3)),             # Paddle's Dropout as Mul(0.5)
    ("Mul(k, x)", (1, 4, 1, 1), 2, (6, 2, 3, 3)),   # per channel, grouped
    ("Div(x, k)", (4, 1, 1), 4, (8, 1, 3, 3)),      # by the std, depthwise
])
def test_a_scale_goes_into_the_weight_even_with_padding(affine, k_shape, group, w_shape):
    weights = rng_weights(w=w_shape, b=(w_shape[0],), k=k_shape, positive=("k",))
    proto = with_weights(f"""g (float[2,4,5,5] x) => (float[2,{w_shape[0]},5,5] y) {{
        s = {affine}
        y = Conv <group = {group}, pads = [1, 1, 1, 1]> (s, w, b)
    }}""", **weights)
    m, _ = fused(proto)
    (name, inputs, outputs), = structure(m)
    assert name == "Conv" and inputs[0] == "x" and inputs[1] != "w" and inputs[2] == "b" and outputs == ["y"]
    assert m.graph.nodes[0].attributes["group"] == group


@pytest.mark.parametrize("shift, bias", [("Add(x, k)", True), ("Sub(x, k)", False)])
def test_a_shift_goes_into_the_bias_without_padding(shift, bias):
    weights = rng_weights(w=(6, 2, 3, 3), k=(1, 4, 1, 1), **({"b": (6,)} if bias else {}))
    proto = with_weights(f"""g (float[2,4,5,5] x) => (float[2,6,3,3] y) {{
        s = {shift}
        y = Conv <group = 2> (s, w{", b" if bias else ""})
    }}""", **weights)
    m, _ = fused(proto)
    conv = m.graph.nodes[0]
    assert ops(m) == ["Conv"] and conv.inputs[0].name == "x" and conv.inputs[1].name == "w"
    assert conv.inputs[2].initializer.dims == [6]


def test_a_shift_before_padding_is_refused():
    proto = with_weights("""g (float[2,4,5,5] x) => (float[2,6,5,5] y) {
        s = Add(x, k)
        y = Conv <auto_pad = "SAME_UPPER"> (s, w)
    }""", **rng_weights(w=(6, 4, 3, 3), k=(4, 1, 1)))
    m, r = run_rule(RULE, proto)
    assert not r.modified
    assert near_misses(r) == ["the Conv pads its input: a shift before it would reach the padded border"]


@pytest.mark.parametrize("k_shape, why", [
    ((5, 5), "varies along spatial axis 2"),
    ((2, 4, 1, 1), "varies along the batch axis 0"),
    ((3, 1, 1), "has 3 elements along the channel axis, the input 4"),
])
def test_a_constant_that_is_not_per_channel_is_refused(k_shape, why):
    proto = with_weights("""g (float[2,4,5,5] x) => (float[?,6,3,3] y) {
        s = Mul(x, k)
        y = Conv (s, w)
    }""", **rng_weights(w=(6, 4, 3, 3), k=k_shape))
    m, r = run_rule(RULE, proto, valid=False)
    assert not r.modified and why in near_misses(r)[0]


def test_a_zero_divisor_is_refused():
    weights = rng_weights(w=(6, 4, 3, 3))
    weights["k"] = weights["w"][0, :, 0, 0].reshape(4, 1, 1) * 0
    proto = with_weights("""g (float[2,4,5,5] x) => (float[2,6,3,3] y) {
        s = Div(x, k)
        y = Conv (s, w)
    }""", **weights)
    m, r = run_rule(RULE, proto)
    assert not r.modified and near_misses(r) == ["'k' has a 0: the Div is not a scale"]


@pytest.mark.parametrize("pads, fuses", [("[0, 0, 0, 0]", True), ("[1, 1, 1, 1]", False)])
def test_a_batchnorm_before_an_unpadded_conv(pads, fuses):
    # CoAtNet's pre-norm block: BatchNorm2d, then a 1x1 Conv
    weights = rng_weights(w=(6, 4, 1, 1), b=(6,), scale=(4,), beta=(4,), mean=(4,), var=(4,))
    proto = with_weights(f"""g (float[2,4,5,5] x) => (float[2,6,?,?] y) {{
        n = BatchNormalization <epsilon = 0.001> (x, scale, beta, mean, var)
        y = Conv <pads = {pads}> (n, w, b)
    }}""", **weights)
    m, r = run_rule(RULE, proto)
    if fuses:
        assert structure(m)[0][0] == "Conv" and ops(m) == ["Conv"] and m.graph.nodes[0].inputs[0].name == "x"
        assert_same_outputs(proto, m)
    else:
        assert not r.modified
        assert near_misses(r) == ["the Conv pads its input: a shift before it would reach the padded border"]


@pytest.mark.parametrize("opset, left", [(20, ["Conv", "Gelu", "Conv"]),
                                         (17, ["Conv", "Div", "Erf", "Add", "Mul", "Mul", "Conv"])])
def test_a_gelus_half_before_a_conv_stays(opset, left):
    # FastViT-style: Conv -> x * (1 + erf(x / sqrt 2)) * 0.5 -> Conv. Where
    # no Gelu can take it (opset 17), the 0.5 still stays: onnxruntime fuses
    # the five ops into one kernel at its default level, with the 0.5 in place.
    import pyonnxopt

    weights = rng_weights(w1=(4, 4, 1, 1), w2=(6, 4, 1, 1))
    proto = with_weights("""g (float[2,4,5,5] x) => (float[2,6,5,5] y)
            <float s2 = {1.4142135}, float one = {1.0}, float half = {0.5}> {
        c = Conv (x, w1)
        d = Div(c, s2)  e = Erf(d)  a = Add(e, one)  p = Mul(c, a)  h = Mul(p, half)
        y = Conv (h, w2)
    }""", opset, **weights)
    m, report = pyonnxopt.optimize(proto)
    assert [n.op_type for n in m.graph.nodes] == left and report["check"]["first_mismatch"] is None


def test_a_tanh_gelus_half_is_refused_and_says_why():
    weights = rng_weights(w=(6, 4, 1, 1))
    proto = with_weights("""g (float[2,4,5,5] x) => (float[2,6,5,5] y)
            <float c = {0.7978846}, float one = {1.0}, float half = {0.5}> {
        u = Mul(x, c)  t = Tanh(u)  a = Add(one, t)  p = Mul(a, x)  h = Mul(half, p)
        y = Conv (h, w)
    }""", **weights)
    m, r = run_rule(RULE, proto)
    assert not r.modified and "ends a GELU" in near_misses(r)[0]


def test_target_ort_folds_into_the_fused_conv():
    # With --target ort the Conv is a com.microsoft FusedConv (Conv + Relu)
    # by the time the scale's turn comes (Paddle SqueezeNet's last block).
    import pyonnxopt

    weights = rng_weights(w1=(4, 4, 3, 3), b1=(4,), w2=(6, 4, 1, 1), b2=(6,))
    proto = with_weights("""g (float[2,4,5,5] x) => (float[2,6,5,5] y) <float half = {0.5}> {
        c = Conv <pads = [1, 1, 1, 1]> (x, w1, b1)  r = Relu(c)  h = Mul(r, half)
        d = Conv (h, w2, b2)  y = Relu(d)
    }""", **weights)
    m, report = pyonnxopt.optimize(proto, target="ort")
    assert [(n.op_type, n.domain) for n in m.graph.nodes] == [("FusedConv", "com.microsoft")] * 2
    assert report["check"]["first_mismatch"] is None
