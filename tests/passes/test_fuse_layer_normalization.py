"""fuse_layer_normalization: the decomposed layer norm -> LayerNormalization
(opset 17). Numbers: the fused kernel against the decomposition, rtol 1e-5,
atol 1e-5 (inputs ~ N(0, 1))."""

import numpy as np
import pytest

from transformer_helpers import assert_same_outputs, export, fuse, near, optimized
from helpers import ops, structure

TOL = dict(rtol=1e-5, atol=1e-5)
CONSTS = "float two = {2.0}, float eps = {1e-5}"


def ln(x_type="float[2,5,8]", axes="axes = [-1]", tail="t = Mul(n, scale)  y = Add(t, bias)", square="Pow(d, two)",
       normed="n = Div(d, std)", consts=f"{CONSTS}, float[8] scale = {{1,2,3,4,5,6,7,8}}, float[8] bias = {{1,0,1,0,1,0,1,0}}",
       y_type=None, extra=""):
    return f"""g ({x_type} x) => ({y_type or x_type} y) <{consts}> {{
        mean = ReduceMean <{axes}> (x)  d = Sub(x, mean)  sq = {square}  var = ReduceMean <{axes}> (sq)
        ve = Add(var, eps)  std = Sqrt(ve)  {normed}  {tail}  {extra}
    }}"""


def test_torch_spelling_fuses_with_scale_and_bias():
    m, r, original = fuse("fuse_layer_normalization", ln(), opset=17)
    assert structure(m) == [("LayerNormalization", ["x", "scale", "bias"], ["y"])]
    attrs = m.graph.nodes[0].attributes
    assert attrs["axis"] == -1 and abs(attrs["epsilon"] - 1e-5) < 1e-12
    assert_same_outputs(original, m, **TOL)


def test_opset_18_axes_input_mul_square_reciprocal_scale_only():
    text = f"""g (float[2,5,8] x) => (float[2,5,8] y) <{CONSTS}, int64[1] axes = {{-1}}, float[8] scale = {{1,2,3,4,5,6,7,8}}> {{
        mean = ReduceMean(x, axes)  d = Sub(x, mean)  sq = Mul(d, d)  var = ReduceMean(sq, axes)
        ve = Add(eps, var)  std = Sqrt(ve)  inv = Reciprocal(std)  n = Mul(inv, d)  y = Mul(scale, n)
    }}"""
    m, r, original = fuse("fuse_layer_normalization", text, opset=18)
    assert structure(m) == [("LayerNormalization", ["x", "scale"], ["y"])]
    assert_same_outputs(original, m, **TOL)


def test_no_scale_makes_ones_of_the_normalized_shape():
    m, r, original = fuse("fuse_layer_normalization", ln(tail="y = Identity(n)", consts=CONSTS), opset=17)
    assert ops(m) == ["LayerNormalization", "Identity"]
    scale = m.graph.nodes[0].inputs[1]
    assert scale.initializer.numpy().tolist() == [1.0] * 8
    assert_same_outputs(original, m, **TOL)


def test_two_trailing_axes_and_a_broadcast_scale():
    consts = f"{CONSTS}, float[8] scale = {{1,2,3,4,5,6,7,8}}, float[1,1,8] bias = {{1,0,1,0,1,0,1,0}}"
    m, r, original = fuse("fuse_layer_normalization", ln(x_type="float[2,5,4,8]", axes="axes = [2, 3]", consts=consts),
                          opset=17)
    node = m.graph.nodes[0]
    assert ops(m) == ["LayerNormalization"] and node.attributes["axis"] == -2
    assert [list(v.initializer.dims) for v in node.inputs[1:]] == [[4, 8], [4, 8]]
    assert_same_outputs(original, m, **TOL)


def test_graph_output_keeps_its_name_and_other_readers():
    m, r, original = fuse("fuse_layer_normalization", ln(y_type="float[2,5,8] y, float[2,5,8] z", extra="z = Neg(y)")
                          .replace("=> (float[2,5,8] y, float[2,5,8] z y)", "=> (float[2,5,8] y, float[2,5,8] z)"), opset=17)
    assert structure(m) == [("LayerNormalization", ["x", "scale", "bias"], ["y"]), ("Neg", ["y"], ["z"])]
    assert_same_outputs(original, m, **TOL)


def test_opset_16_refuses_for_both_targets():
    for target in ("onnx", "ort"):
        m, r, _ = fuse("fuse_layer_normalization", ln(), opset=16, target=target)
        assert not r.modified and "Add->y: LayerNormalization needs opset 17; the model imports 16" in r.stats["near_misses"]


def test_axes_not_trailing_refuse():
    m, r, _ = fuse("fuse_layer_normalization", ln(axes="axes = [1]", tail="y = Identity(n)", consts=CONSTS), opset=17)
    assert not r.modified and near(r, "axes [-2] are not the trailing ones")


def test_axes_differ_refuse():
    text = ln(tail="y = Identity(n)", consts=CONSTS).replace("var = ReduceMean <axes = [-1]>", "var = ReduceMean <axes = [1]>")
    m, r, _ = fuse("fuse_layer_normalization", text, opset=17)
    assert not r.modified and near(r, "the ReduceMeans reduce different axes [[-1], [-2]]")


def test_eps_not_a_scalar_refuses():
    m, r, _ = fuse("fuse_layer_normalization", ln(consts="float two = {2.0}, float[8] eps = {1,1,1,1,1,1,1,1}",
                                                  tail="y = Identity(n)"), opset=17)
    assert not r.modified and near(r, "epsilon 'eps' is not a scalar float constant")


def test_exponent_other_than_two_refuses():
    m, r, _ = fuse("fuse_layer_normalization", ln(consts="float two = {3.0}, float eps = {1e-5}", tail="y = Identity(n)"),
                   opset=17)
    assert not r.modified and near(r, "the exponent 'two' is 3.0, needs 2")


def test_a_gelu_is_not_a_near_miss_and_a_layer_norm_without_its_root_is():
    # GELU's x * 0.5 * (1 + erf(x / sqrt 2)) matches the scaled division (two ops) and nothing more
    gelu = """g (float[2,8] x) => (float[2,8] y) <float root = {1.4142135}, float one = {1.0}, float half = {0.5}> {
        d = Div(x, root)  e = Erf(d)  e1 = Add(e, one)  h = Mul(x, half)  y = Mul(h, e1)
    }"""
    m, r, _ = fuse("fuse_layer_normalization", gelu, opset=17)
    assert not r.modified and r.stats["near_misses"] == []
    # the variance's root as Pow(v, 0.5): centring, division and scale match, the Sqrt does not
    text = ln(consts=f"{CONSTS}, float[8] scale = {{1,2,3,4,5,6,7,8}}, float[8] bias = {{1,0,1,0,1,0,1,0}}, "
                     "float half = {0.5}").replace("std = Sqrt(ve)", "std = Pow(ve, half)")
    m, r, _ = fuse("fuse_layer_normalization", text, opset=17)
    assert not r.modified and r.stats["near_misses"]


def test_centered_value_read_elsewhere_does_not_fuse():
    text = ln(y_type="float[2,5,8] y, float[2,5,8] z", extra="z = Neg(d)").replace(
        "=> (float[2,5,8] y, float[2,5,8] z y)", "=> (float[2,5,8] y, float[2,5,8] z)")
    m, r, _ = fuse("fuse_layer_normalization", text, opset=17)
    assert not r.modified and near(r, "its output 'd' is also read by 'Neg->z'")


def test_unknown_normalized_dim_without_scale_refuses():
    m, r, _ = fuse("fuse_layer_normalization", ln(x_type="float[2,5,N]", tail="y = Identity(n)", consts=CONSTS), opset=17)
    assert not r.modified and near(r, "x's normalized dims are unknown (needed for a Scale of ones)")


def test_scale_varying_outside_the_normalized_axes_refuses():
    consts = f"{CONSTS}, float[5,1] scale = {{1,2,3,4,5}}"
    m, r, original = fuse("fuse_layer_normalization", ln(tail="y = Mul(n, scale)", consts=consts), opset=17)
    assert near(r, "'scale' with shape [5, 1] varies outside the normalized axes")
    # The bare normalization fuses; the Mul by that scale stays.
    assert structure(m)[1] == ("Mul", ["n", "scale"], ["y"]) and ops(m) == ["LayerNormalization", "Mul"]
    assert_same_outputs(original, m, **TOL)


def _ln_module(dims):
    import torch

    class LNHand(torch.nn.Module):
        def __init__(self):
            super().__init__()
            shape = (8,) if dims == -1 else (8, 1, 1)
            self.w = torch.nn.Parameter(torch.rand(shape) + 0.5)
            self.b = torch.nn.Parameter(torch.rand(shape))

        def forward(self, x):
            u = x.mean(dims, keepdim=True)
            s = (x - u).pow(2).mean(dims, keepdim=True)
            return (x - u) / torch.sqrt(s + 1e-5) * self.w + self.b

    return LNHand()


@pytest.mark.parametrize("opset", [17, 18])
def test_torch_hand_written_layer_norm(opset):
    import torch

    m, report = optimized(export(_ln_module(-1), (torch.randn(2, 5, 8),), opset))
    assert ops(m) == ["LayerNormalization"] and report["check"]["first_mismatch"] is None


def test_torch_channels_first_norm_is_not_trailing():
    import torch

    # ConvNeXt's channels-first LayerNorm reduces axis 1 of NCHW: no LayerNormalization can say that.
    m, report = optimized(export(_ln_module(1), (torch.randn(2, 8, 3, 3),), 17))
    assert "LayerNormalization" not in ops(m)
    rule = [p for p in report["passes"] if p["name"] == "fuse_layer_normalization"][0]
    assert any("are not the trailing ones" in x for x in rule["near_misses"])


def test_torch_layer_norm_below_opset_17_stays():
    import torch

    m, report = optimized(export(torch.nn.LayerNorm(8), (torch.randn(2, 5, 8),), 16), target="ort")
    assert "LayerNormalization" not in ops(m) and np.isclose(report["check"]["max_abs_diff"], 0, atol=1e-6)


RESIDUAL = """g (float[2,5,8] h, float[2,5,8] s) => (float[2,5,8] y{outs}) <{consts}> {{
    x = Add(h, s)
    mean = ReduceMean <axes = [-1]> (x)  d = Sub(x, mean)  sq = Pow(d, two)  var = ReduceMean <axes = [-1]> (sq)
    ve = Add(var, eps)  std = Sqrt(ve)  n = Div(d, std)  t = Mul(n, scale)  y = Add(t, bias)  {extra}
}}"""
WEIGHTS = f"{CONSTS}, float[8] scale = {{1,2,3,4,5,6,7,8}}, float[8] bias = {{1,0,1,0,1,0,1,0}}"


@pytest.mark.parametrize("extra,outs", [("", ""), ("z = Add(x, y)", ", float[2,5,8] z")])
@pytest.mark.parametrize("target", ["onnx", "ort"])
def test_below_17_a_residual_norm_stays_for_either_target(target, extra, outs):
    # Not com.microsoft SkipLayerNormalization for --target ort: onnxruntime's
    # CPU kernel is slower than this very decomposition (targets.py).
    text = RESIDUAL.format(outs=outs, consts=WEIGHTS, extra=extra)
    m, r, _ = fuse("fuse_layer_normalization", text, opset=14, target=target)
    assert not r.modified and near(r, "LayerNormalization needs opset 17; the model imports 14")


def test_target_ort_at_17_leaves_a_post_norm_residual_add_to_onnxruntime():
    text = RESIDUAL.format(outs="", consts=WEIGHTS, extra="")
    m, r, original = fuse("fuse_layer_normalization", text, opset=17, target="ort")
    assert structure(m) == [("Add", ["h", "s"], ["x"]), ("LayerNormalization", ["x", "scale", "bias"], ["y"])]
    assert "com.microsoft" not in m.opset_imports
    assert_same_outputs(original, m, **TOL)


def test_torch_encoder_layer_at_opset_14_for_ort():
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu", batch_first=True)

        def forward(self, x):
            return self.layer(x)

    m, report = optimized(export(Encoder(), (torch.randn(2, 5, 16),), 14), target="ort")
    assert "SkipLayerNormalization" not in ops(m) and ops(m).count("ReduceMean") == 4
    assert ops(m).count("BiasGelu") == 1 and report["check"]["first_mismatch"] is None  # the Linear's bias inside


def test_reduce_mean_without_axes_that_is_a_no_op_does_not_match():
    # noop_with_empty_axes=1 and no axes: the "mean" is x itself, not a norm.
    text = """g (float[2,5,8] x) => (float[2,5,8] y) <float two = {2.0}, float eps = {1e-5}, int64[1] axes = {-1}> {
        mean = ReduceMean <noop_with_empty_axes = 1> (x)  d = Sub(x, mean)  sq = Pow(d, two)
        var = ReduceMean(sq, axes)  ve = Add(var, eps)  std = Sqrt(ve)  y = Div(d, std)
    }"""
    m, r, _ = fuse("fuse_layer_normalization", text, opset=18)
    assert not r.modified and near(r, "attribute noop_with_empty_axes is not 0")


def keras(mean="GlobalAveragePool", x_type="float[2,5,8]", opset_axes=""):
    """tf2onnx's Keras LayerNormalization: one scale w, one shift."""
    reduce = f"ReduceMean <keepdims = 1{opset_axes}>" if mean == "ReduceMean" else mean
    return f"""g ({x_type} x) => ({x_type} y) <float eps = {{1e-3}}, float[8] gamma = {{1,2,3,4,5,6,7,8}},
            float[8] beta = {{1,0,1,0,1,0,1,0}}> {{
        mean = {reduce} (x)  neg = Neg(mean)  d = Sub(x, mean)  sq = Mul(d, d)  var = {reduce} (sq)
        ve = Add(var, eps)  std = Sqrt(ve)  inv = Reciprocal(std)  w = Mul(inv, gamma)
        xw = Mul(x, w)  mw = Mul(neg, w)  shift = Add(mw, beta)  y = Add(xw, shift)
    }}"""


@pytest.mark.parametrize("text", [keras(), keras("ReduceMean", opset_axes=", axes = [-1]")])
def test_keras_folded_form_from_tf2onnx(text):
    m, r, original = fuse("fuse_layer_normalization", text, opset=17)
    assert structure(m) == [("LayerNormalization", ["x", "gamma", "beta"], ["y"])]
    attrs = m.graph.nodes[0].attributes
    assert attrs["axis"] == -1 and abs(attrs["epsilon"] - 1e-3) < 1e-9
    assert_same_outputs(original, m, **TOL)


def test_keras_folded_form_on_4d_averages_two_axes():
    # A GlobalAveragePool of [B, C, H, W] averages H and W: gamma [8] is broadcast to [4, 8].
    m, r, original = fuse("fuse_layer_normalization", keras(x_type="float[2,3,4,8]"), opset=17)
    assert ops(m) == ["LayerNormalization"] and m.graph.nodes[0].attributes["axis"] == -2
    assert_same_outputs(original, m, **TOL)


def flax(clamp="c = Max(raw, zero)", square="Mul(x, x)", mean_square="Mul(mean, mean)", opset_axes=", axes = [-1]",
         extra_consts=""):
    """Flax's fast variance, as jax2onnx writes it: E[x^2] - E[x]^2, clamped at 0."""
    return f"""g (float[2,5,8] x) => (float[2,5,8] y) <float two = {{2.0}}, float zero = {{0.0}}, float eps = {{1e-6}},
            float[8] scale = {{1,2,3,4,5,6,7,8}}, float[8] bias = {{1,0,1,0,1,0,1,0}}{extra_consts}> {{
        mean = ReduceMean <keepdims = 1{opset_axes}> (x)  d = Sub(x, mean)  sq = {square}
        m2 = ReduceMean <keepdims = 1{opset_axes}> (sq)  ms = {mean_square}  raw = Sub(m2, ms)  {clamp}
        ve = Add({"c" if clamp else "raw"}, eps)  std = Sqrt(ve)  n = Div(d, std)  t = Mul(n, scale)  y = Add(t, bias)
    }}"""


@pytest.mark.parametrize("text", [
    flax(),
    flax(clamp="c = Max(zero, raw)", square="Pow(x, two)", mean_square="Pow(mean, two)"),
    flax(clamp="c = Clip(raw, zero)"),
    flax(clamp="c = Clip(raw, zero, inf)", extra_consts=", float inf = {inf}"),
    flax(clamp="c = Relu(raw)"),
    flax(clamp=""),
])
def test_flax_second_moment_variance(text):
    m, r, original = fuse("fuse_layer_normalization", text, opset=17)
    assert structure(m) == [("LayerNormalization", ["x", "scale", "bias"], ["y"])]
    assert abs(m.graph.nodes[0].attributes["epsilon"] - 1e-6) < 1e-12
    assert_same_outputs(original, m, **TOL)


def test_flax_second_moment_variance_at_opset_18_with_far_from_zero_inputs():
    text = flax(opset_axes="").replace("(x)", "(x, axes)").replace("(sq)", "(sq, axes)").replace(
        "float eps", "int64[1] axes = {-1}, float eps")
    m, r, original = fuse("fuse_layer_normalization", text, opset=18)
    assert ops(m) == ["LayerNormalization"]
    # E[x^2] - E[x]^2 cancels in float32 when the mean is large against the
    # spread; onnxruntime's kernel computes it the same way.
    x = (50 + np.random.default_rng(1).standard_normal((2, 5, 8))).astype(np.float32)
    assert_same_outputs(original, m, {"x": x}, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("text,why", [
    (flax(clamp="c = Clip(raw, zero, top)", extra_consts=", float top = {100.0}"), "has a finite maximum"),
    (flax(clamp="c = Max(raw, one)", extra_consts=", float one = {1.0}"), ""),
    (flax(square="Pow(x, three)", extra_consts=", float three = {3.0}"), "exponent"),
    (flax(mean_square="Mul(mean, d)"), ""),
])
def test_flax_second_moment_variance_refusals(text, why):
    m, r, _ = fuse("fuse_layer_normalization", text, opset=17)
    assert not r.modified
    assert "LayerNormalization" not in ops(m)
    if why:
        assert near(r, why)
