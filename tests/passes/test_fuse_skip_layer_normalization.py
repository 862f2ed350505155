"""fuse_skip_layer_normalization (--target ort): residual Add [+ bias] feeding
LayerNormalization -> com.microsoft SkipLayerNormalization. Numbers:
onnxruntime's fused kernel against Add + LayerNormalization, rtol 1e-5,
atol 1e-5."""

import pytest

from transformer_helpers import assert_same_outputs, export, fuse, near, optimized
from helpers import ops, structure

TOL = dict(rtol=1e-5, atol=1e-5)
W = "float[8] g = {1,2,3,4,5,6,7,8}, float[8] be = {1,0,1,0,1,0,1,0}, float[8] bias = {0,1,0,1,0,1,0,1}"


def post_norm(skip_type="float[2,5,8]", extra_out="", extra=""):
    """BERT: Add(Add(h, bias), skip) -> LayerNormalization."""
    return f"""g (float[2,5,8] h, {skip_type} s) => (float[2,5,8] y{extra_out}) <{W}> {{
        hb = Add(bias, h)  r = Add(hb, s)  y = LayerNormalization <axis = -1, epsilon = 1e-6> (r, g, be)  {extra}
    }}"""


def test_post_norm_with_bias_fuses_into_one_node():
    m, r, original = fuse("fuse_skip_layer_normalization", post_norm(), opset=17, target="ort")
    assert structure(m) == [("SkipLayerNormalization", ["h", "s", "g", "be", "bias"], ["y"])]
    node = m.graph.nodes[0]
    assert node.domain == "com.microsoft" and abs(node.attributes["epsilon"] - 1e-6) < 1e-12
    assert m.opset_imports["com.microsoft"] == 1
    assert_same_outputs(original, m, **TOL)


def test_pre_norm_sum_read_elsewhere_stays():
    # GPT-2 / norm_first: the residual sum r also feeds the next residual Add. The
    # op could return it as its fourth output, but onnxruntime's CPU kernel is
    # slower than the Add + LayerNormalization it keeps here.
    text = """g (float[2,5,8] h, float[2,5,8] s) => (float[2,5,8] z) <float[8] g = {1,2,3,4,5,6,7,8}> {
        r = Add(h, s)  y = LayerNormalization <axis = -1> (r, g)  z = Add(r, y)
    }"""
    m, r, _ = fuse("fuse_skip_layer_normalization", text, opset=17, target="ort")
    assert not r.modified and near(r, "the residual sum is read elsewhere")


def test_epsilon_default_is_said_explicitly():
    text = """g (float[2,5,8] h, float[2,5,8] s) => (float[2,5,8] y) <float[8] g = {1,2,3,4,5,6,7,8}> {
        r = Add(h, s)  y = LayerNormalization <axis = -1> (r, g)
    }"""
    m, r, original = fuse("fuse_skip_layer_normalization", text, opset=17, target="ort")
    assert structure(m) == [("SkipLayerNormalization", ["h", "s", "g"], ["y"])]
    assert abs(m.graph.nodes[0].attributes["epsilon"] - 1e-5) < 1e-12  # LayerNormalization's default
    assert_same_outputs(original, m, **TOL)


@pytest.mark.parametrize("skip_type", ["float[1,5,8]", "float[5,8]"])
def test_skip_broadcast_forms_onnxruntime_accepts(skip_type):
    m, r, original = fuse("fuse_skip_layer_normalization", post_norm(skip_type), opset=17, target="ort")
    assert ops(m) == ["SkipLayerNormalization"] and [v.name for v in m.graph.nodes[0].inputs[:2]] == ["h", "s"]
    assert_same_outputs(original, m, **TOL)


def test_skip_broadcast_over_the_sequence_refuses():
    m, r, _ = fuse("fuse_skip_layer_normalization", post_norm("float[2,1,8]"), opset=17, target="ort")
    assert not r.modified and near(r, "do not provably fit [B,S,H] + [B,S,H] | [1,S,H] | [S,H]")


def test_unknown_dims_refuse_but_equal_symbols_fuse():
    text = post_norm().replace("float[2,5,8] h", "float[B,S,8] h").replace("float[2,5,8] s", "float[B,S,8] s")
    m, r, original = fuse("fuse_skip_layer_normalization", text, opset=17, target="ort")
    assert ops(m) == ["SkipLayerNormalization"]
    text = post_norm().replace("float[2,5,8] h", "float[B,S,8] h").replace("float[2,5,8] s", "float[C,S,8] s")
    m, r, _ = fuse("fuse_skip_layer_normalization", text, opset=17, target="ort")
    assert not r.modified and near(r, "input and skip shapes")


def test_normalizing_more_than_the_last_axis_refuses():
    text = """g (float[2,5,8] h, float[2,5,8] s) => (float[2,5,8] y) <float[5,8] g = {1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8}> {
        r = Add(h, s)  y = LayerNormalization <axis = -2> (r, g)
    }"""
    m, r, _ = fuse("fuse_skip_layer_normalization", text, opset=17, target="ort")
    assert not r.modified and near(r, "normalizes from axis -2 (rank 3), not the last axis alone")


def test_mean_output_read_refuses():
    text = """g (float[2,5,8] h, float[2,5,8] s) => (float[2,5,8] y, float[2,5,1] mu) <float[8] g = {1,2,3,4,5,6,7,8}> {
        r = Add(h, s)  y, mu = LayerNormalization <axis = -1> (r, g)
    }"""
    m, r, _ = fuse("fuse_skip_layer_normalization", text, opset=17, target="ort")
    assert not r.modified and near(r, "its Mean or InvStdDev output is read")


def test_target_onnx_leaves_it_alone():
    m, r, _ = fuse("fuse_skip_layer_normalization", post_norm(), opset=17, target="onnx")
    assert not r.modified and r.stats["near_misses"] == [] and ops(m) == ["Add", "Add", "LayerNormalization"]


def test_bias_add_read_elsewhere_keeps_the_bias_add():
    m, r, original = fuse("fuse_skip_layer_normalization", post_norm(extra_out=", float[2,5,8] z", extra="z = Neg(hb)"),
                          opset=17, target="ort")
    assert structure(m)[:2] == [("Add", ["bias", "h"], ["hb"]), ("SkipLayerNormalization", ["hb", "s", "g", "be"], ["y"])]
    assert_same_outputs(original, m, **TOL)


def test_consecutive_blocks_each_take_their_bias():
    # The second block's skip is the first block's output, which the first
    # rewrite replaces: the engine matches it again, and the bias still joins.
    text = f"""g (float[2,5,8] h, float[2,5,8] s, float[2,5,8] h2) => (float[2,5,8] y2) <{W}> {{
        hb = Add(h, bias)  r = Add(hb, s)  y = LayerNormalization (r, g, be)
        hb2 = Add(h2, bias)  r2 = Add(hb2, y)  y2 = LayerNormalization (r2, g, be)
    }}"""
    m, r, original = fuse("fuse_skip_layer_normalization", text, opset=17, target="ort")
    assert structure(m) == [("SkipLayerNormalization", ["h", "s", "g", "be", "bias"], ["y"]),
                            ("SkipLayerNormalization", ["h2", "y", "g", "be", "bias"], ["y2"])]
    assert_same_outputs(original, m, **TOL)


@pytest.mark.parametrize("norm_first, opset", [(False, 17), (True, 17), (False, 23)])
def test_torch_transformer_encoder_layer(norm_first, opset):
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu", batch_first=True,
                                                 norm_first=norm_first) for _ in range(2))

        def forward(self, x):
            return self.layers[1](self.layers[0](x))

    m, report = optimized(export(Encoder(), (torch.randn(2, 5, 16),), opset), target="ort")
    # At 23 the second layer's attention, which reads the first layer's
    # SkipLayerNormalization, fuses too.
    assert ops(m).count("Attention") == (2 if opset >= 23 else 0)
    # Pre-norm sums feed the next residual too: those norms stay (see above).
    assert ops(m).count("SkipLayerNormalization") == (0 if norm_first else 4)
    assert ops(m).count("LayerNormalization") == (4 if norm_first else 0)
    assert report["check"]["first_mismatch"] is None
