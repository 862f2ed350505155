"""fuse_conv_branches: Convs of one input (and its identity or its
BatchNormalization) whose outputs are added become one Conv. Numbers:
onnxruntime, original against fused, rtol = atol = 1e-5 in float32."""

import numpy as np
import onnx
import pytest

import pyonnxopt
from fusion_helpers import assert_same_outputs, fused_by, near_misses, rng_weights, run_rule, with_weights
from helpers import ops, outputs

RULE = "fuse_conv_branches"


def fused(proto):
    return fused_by(RULE, proto)


def conv_of(m) -> tuple:
    """(attributes, weight, bias or None) of the one node left, a Conv."""
    (conv,) = m.graph.nodes
    assert conv.op_type == "Conv"
    bias = conv.inputs[2].initializer.numpy_view() if len(conv.inputs) > 2 else None
    return conv.attributes, conv.inputs[1].initializer.numpy_view(), bias


def test_3x3_and_1x1_become_one_3x3_with_the_1x1_at_its_centre():
    w = rng_weights(wa=(6, 4, 3, 3), ba=(6,), wb=(6, 4, 1, 1), bb=(6,))
    proto = with_weights("""g (float[1,4,8,8] x) => (float[1,6,8,8] y) {
        a = Conv <pads = [1, 1, 1, 1], kernel_shape = [3, 3]> (x, wa, ba)
        b = Conv <kernel_shape = [1, 1]> (x, wb, bb)
        y = Add (a, b)
    }""", **w)
    m, r = fused(proto)
    attrs, weight, bias = conv_of(m)
    assert attrs == {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}
    want = w["wa"].copy()
    want[:, :, 1, 1] += w["wb"][:, :, 0, 0]
    np.testing.assert_array_equal(weight, want)
    np.testing.assert_array_equal(bias, w["ba"] + w["bb"])
    assert r.stats["rewrites"][0]["consumed"] == ["Add->y", "Conv->a", "Conv->b"]
    assert not run_rule(RULE, m.to_onnx())[1].modified


@pytest.mark.parametrize("attrs, kernel_b, pads_b, out", [
    ("strides = [2, 2]", 1, [0, 0, 0, 0], 4),  # MobileOne's downsampling block
    ("group = 4", 1, [0, 0, 0, 0], 8),  # depthwise
    ("dilations = [2, 2]", 1, [0, 0, 0, 0], 8),  # the 1x1 at tap (1, 1) of the dilated 3x3
    ("dilations = [2, 2]", 3, [1, 1, 1, 1], 8),  # two dilated 3x3s: the kernels add as they are
])
def test_strides_groups_and_dilations_shared_by_both(attrs, kernel_b, pads_b, out):
    group = 4 if "group" in attrs else 1
    dilation = 2 if "dilations" in attrs else 1
    pads_a = [dilation] * 4
    pads_b = [p * dilation for p in pads_b]
    proto = with_weights(f"""g (float[1,4,8,8] x) => (float[1,4,{out},{out}] y) {{
        a = Conv <pads = {pads_a}, {attrs}> (x, wa, ba)
        b = Conv <pads = {pads_b}, {attrs}> (x, wb)
        y = Add (b, a)
    }}""", **rng_weights(wa=(4, 4 // group, 3, 3), ba=(4,), wb=(4, 4 // group, kernel_b, kernel_b)))
    m, _ = fused(proto)
    attrs_out, weight, _ = conv_of(m)
    assert weight.shape == (4, 4 // group, 3, 3) and attrs_out["pads"] == pads_a


def test_acnet_asymmetric_kernels_nest_in_the_square_one():
    proto = with_weights("""g (float[1,4,9,9] x) => (float[1,5,9,9] y) {
        a = Conv <pads = [1, 1, 1, 1]> (x, wa)
        h = Conv <pads = [0, 1, 0, 1]> (x, wh)
        v = Conv <pads = [1, 0, 1, 0]> (x, wv)
        s = Add (a, h)
        y = Add (s, v)
    }""", **rng_weights(wa=(5, 4, 3, 3), wh=(5, 4, 1, 3), wv=(5, 4, 3, 1)))
    m, r = fused(proto)
    attrs, weight, bias = conv_of(m)
    assert attrs == {"pads": [1, 1, 1, 1]} and weight.shape == (5, 4, 3, 3) and bias is None
    assert len(r.stats["rewrites"]) == 2  # the chain: the inner Add first, then the outer one


@pytest.mark.parametrize("rank", [3, 5])
def test_1d_and_3d_convs(rank):
    spatial = rank - 2
    dims = ",".join(["6"] * spatial)
    proto = with_weights(f"""g (float[1,3,{dims}] x) => (float[1,4,{dims}] y) {{
        a = Conv <pads = {[1] * 2 * spatial}> (x, wa, ba)
        b = Conv (x, wb, bb)
        y = Add (a, b)
    }}""", **rng_weights(wa=(4, 3) + (3,) * spatial, ba=(4,), wb=(4, 3) + (1,) * spatial, bb=(4,)))
    m, _ = fused(proto)
    assert conv_of(m)[1].shape == (4, 3) + (3,) * spatial


def test_the_identity_branch_becomes_a_one_at_each_channels_centre_tap():
    w = rng_weights(wa=(4, 4, 3, 3), ba=(4,))
    proto = with_weights("""g (float[1,4,8,8] x) => (float[1,4,8,8] y) {
        a = Conv <pads = [1, 1, 1, 1]> (x, wa, ba)
        y = Add (x, a)
    }""", **w)
    m, _ = fused(proto)
    _, weight, bias = conv_of(m)
    want = w["wa"].copy()
    want[range(4), range(4), 1, 1] += 1
    np.testing.assert_array_equal(weight, want)
    np.testing.assert_array_equal(bias, w["ba"])


def test_grouped_identity_and_its_batchnormalization():
    # group 2 of 4 channels: channel c reads input channel c % 2 of its group
    proto = with_weights("""g (float[1,4,8,8] x) => (float[1,4,8,8] y) {
        a = Conv <pads = [1, 1, 1, 1], group = 2> (x, wa)
        n = BatchNormalization (x, scale, beta, mean, var)
        y = Add (a, n)
    }""", **rng_weights(wa=(4, 2, 3, 3), scale=(4,), beta=(4,), mean=(4,), var=(4,)))
    m, _ = fused(proto)
    assert conv_of(m)[2] is not None  # the BatchNormalization's shift


def test_mobileone_block_six_branches_and_a_relu():
    """A 1x1, four 3x3s and the identity's BatchNormalization, each Conv with
    its own BatchNormalization, through the whole pipeline: one Conv + Relu."""
    shapes = {"w0": (8, 8, 1, 1)}
    for i in range(1, 5):
        shapes[f"w{i}"] = (8, 8, 3, 3)
    for i in range(6):
        shapes.update({f"s{i}": (8,), f"t{i}": (8,), f"m{i}": (8,), f"v{i}": (8,)})
    body = ["c0 = Conv (x, w0)", "n0 = BatchNormalization (c0, s0, t0, m0, v0)"]
    for i in range(1, 5):
        body += [f"c{i} = Conv <pads = [1, 1, 1, 1]> (x, w{i})",
                 f"n{i} = BatchNormalization (c{i}, s{i}, t{i}, m{i}, v{i})"]
    body += ["n5 = BatchNormalization (x, s5, t5, m5, v5)", "a1 = Add (n0, n1)"]
    body += [f"a{i} = Add (a{i - 1}, n{i})" for i in range(2, 6)]
    body += ["y = Relu (a5)"]
    proto = with_weights("g (float[1,8,10,10] x) => (float[1,8,10,10] y) {" + "\n".join(body) + "}",
                         **rng_weights(positive=tuple(f"v{i}" for i in range(6)), **shapes))
    m, report = pyonnxopt.optimize(proto)
    assert report["check"]["outputs"] == 1
    assert ops(m) == ["Conv", "Relu"]
    assert_same_outputs(proto, m, rtol=1e-4, atol=1e-5)


def test_float16_weights_stay_float16():
    proto = with_weights("""g (float16[1,4,8,8] x) => (float16[1,6,8,8] y) {
        a = Conv <pads = [1, 1, 1, 1]> (x, wa, ba)
        b = Conv (x, wb, bb)
        y = Add (a, b)
    }""", **rng_weights(dtype=np.float16, wa=(6, 4, 3, 3), ba=(6,), wb=(6, 4, 1, 1), bb=(6,)))
    m, r = run_rule(RULE, proto)
    assert r.modified and conv_of(m)[1].dtype == np.float16
    assert_same_outputs(proto, m, rtol=1e-2, atol=1e-2)


def refusal(text, **shapes) -> list:
    m, r = run_rule(RULE, with_weights(text, **rng_weights(**shapes)))
    assert not r.modified
    return near_misses(r)


TWO = ("g (float[1,4,{i}] x) => (float[1,4,{o}] y) {{"
       " a = Conv <{a}> (x, wa)  b = Conv <{b}> (x, wb)  y = Add (a, b) }}")


@pytest.mark.parametrize("a, wa, b, wb, i, o, why", [
    # 2x2 -> 1x1 both ways: the one valid Add of Convs whose strides differ
    ("pads = [1, 1, 1, 1], strides = [2, 2]", (4, 4, 3, 3), "strides = [4, 4]", (4, 4, 1, 1), "2,2", "1,1",
     "the Convs' strides differ ([2, 2] and [4, 4])"),
    ("pads = [1, 1, 1, 1], group = 4", (4, 1, 3, 3), "pads = [0, 0, 0, 0]", (4, 4, 1, 1), "8,8", "8,8",
     "the Convs' groups differ (4 and 1)"),
    ("pads = [2, 2, 2, 2], dilations = [2, 2]", (4, 4, 3, 3), "pads = [1, 1, 1, 1]", (4, 4, 3, 3), "8,8", "8,8",
     "the Convs' dilations differ ([2, 2] and [1, 1])"),
    # a 1x1 reading row -3 and a 3x3 reading rows -1..1 around each output row: row -2 between them
    ("pads = [3, 0, 0, 0]", (4, 4, 1, 1), "pads = [1, 0, 4, 0]", (4, 4, 3, 1), "8,8", "11,8",
     "along spatial axis 0 the taps leave a gap (kernels 1 and 3 read apart)"),
    # a dilated 3x3 reading rows -2, 0, 2 and a dilated 2x2 reading -1, 1
    ("pads = [2, 2, 2, 2], dilations = [2, 2]", (4, 4, 3, 3), "pads = [1, 1, 1, 1], dilations = [2, 2]", (4, 4, 2, 2),
     "8,8", "8,8", "along spatial axis 0 the taps fall between each other's (pads apart by no multiple of 2)"),
    ('auto_pad = "SAME_UPPER"', (4, 4, 3, 3), "pads = [0, 0, 0, 0]", (4, 4, 1, 1), "8,8", "8,8",
     "Conv auto_pad is 'SAME_UPPER', not NOTSET or VALID: its padding depends on the input size"),
])
def test_refusals_between_two_convs(a, wa, b, wb, i, o, why):
    assert refusal(TWO.format(a=a, b=b, i=i, o=o), wa=wa, wb=wb) == [why]


def test_kernels_whose_rows_overlap_in_part_make_one_as_wide_as_both():
    # a 3x3 reading rows -1..1 and one reading 0..2 around each output row: a 4-row kernel
    m, _ = fused(with_weights(TWO.format(a="pads = [1, 1, 1, 1]", b="pads = [0, 1, 2, 1]", i="8,8", o="8,8"),
                              **rng_weights(wa=(4, 4, 3, 3), wb=(4, 4, 3, 3))))
    attrs, weight, _ = conv_of(m)
    assert weight.shape == (4, 4, 4, 3) and attrs["pads"] == [1, 1, 2, 1]


def test_refuses_outputs_that_could_differ_in_size():
    # [1,4,8,8] -> 8x8 and 6x6: the Add would broadcast, so the model is invalid; refused before any math
    text = TWO.format(a="pads = [1, 1, 1, 1]", b="pads = [1, 1, 1, 1]", i="8,8", o="8,8")
    m, r = run_rule(RULE, with_weights(text, **rng_weights(wa=(4, 4, 3, 3), wb=(4, 4, 1, 1))), valid=False)
    assert not r.modified and near_misses(r) == [
        "along spatial axis 0 the outputs could differ in size (pads 1+1 for kernel 3, 1+1 for kernel 1)"]


def test_refuses_an_identity_the_conv_cannot_take():
    # x broadcast over the Conv's channels: an Add, but no identity
    assert refusal("""g (float[1,1,8,8] x) => (float[1,6,8,8] y) {
        a = Conv <pads = [1, 1, 1, 1]> (x, wa)  y = Add (a, x) }""", wa=(6, 1, 3, 3)) == [
        "the Conv has 6 output channels and 1 input channels: no identity to add"]
    assert refusal("""g (float[1,4,1,1] x) => (float[1,4,1,1] y) {
        a = Conv <pads = [1, 1, 1, 1], strides = [2, 2]> (x, wa)  y = Add (a, x) }""", wa=(4, 4, 3, 3)) == [
        "the Convs' strides differ ([2, 2] and [1, 1])"]


def test_an_off_centre_padding_puts_the_identity_where_the_output_reads_its_own_position():
    # pads [2, 0] along rows: output row j reads rows j-2..j, so the identity is the last tap
    m, _ = fused(with_weights("""g (float[1,4,8,8] x) => (float[1,4,8,8] y) {
        a = Conv <pads = [2, 0, 0, 2]> (x, wa)  y = Add (a, x) }""", **rng_weights(wa=(4, 4, 3, 3))))
    assert conv_of(m)[0] == {"pads": [2, 0, 0, 2]}


def test_refuses_nothing_it_does_not_match():
    # a BatchNormalization in training mode, and a branch with another reader: not the pattern, no near miss
    assert refusal("""g (float[1,4,8,8] x) => (float[1,4,8,8] y) {
        a = Conv <pads = [1, 1, 1, 1]> (x, wa)
        n, mu_out, var_out = BatchNormalization <training_mode = 1> (x, s, t, mu, var)
        y = Add (a, n) }""", wa=(4, 4, 3, 3), s=(4,), t=(4,), mu=(4,), var=(4,)) == []
    assert refusal("""g (float[1,4,8,8] x) => (float[1,4,8,8] y, float[1,4,8,8] z) {
        a = Conv <pads = [1, 1, 1, 1]> (x, wa)  b = Conv (x, wb)  y = Add (a, b)  z = Relu (b) }""",
                   wa=(4, 4, 3, 3), wb=(4, 4, 1, 1)) == []


def test_explain_names_the_refusal(tmp_path, capsys):
    from pyonnxopt.cli import main

    path = tmp_path / "m.onnx"
    text = TWO.format(a="pads = [1, 1, 1, 1], strides = [2, 2]", b="strides = [4, 4]", i="2,2", o="1,1")
    onnx.save(with_weights(text, **rng_weights(wa=(4, 4, 3, 3), wb=(4, 4, 1, 1))), path)
    assert main(["optimize", str(path), str(tmp_path / "o.onnx"), "--explain", RULE]) == 0
    assert "the Convs' strides differ ([2, 2] and [4, 4])" in capsys.readouterr().out


def test_torch_repvgg_blocks_exported_as_trained(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)

    def bn(c):
        n = torch.nn.BatchNorm2d(c)
        n.running_mean.normal_(0, 0.1)
        n.running_var.uniform_(0.5, 2.0)
        n.weight.data.uniform_(0.5, 1.5)
        return n

    class RepVggBlock(torch.nn.Module):  # RepVGG's training-time block: 3x3, 1x1 and identity, each normalized
        def __init__(self, c, stride):
            super().__init__()
            self.dense = torch.nn.Sequential(torch.nn.Conv2d(c, c, 3, stride, 1, bias=False), bn(c))
            self.one = torch.nn.Sequential(torch.nn.Conv2d(c, c, 1, stride, 0, bias=False), bn(c))
            self.identity = bn(c) if stride == 1 else None

        def forward(self, x):
            y = self.dense(x) + self.one(x)
            return torch.relu(y + self.identity(x) if self.identity is not None else y)

    model = torch.nn.Sequential(RepVggBlock(8, 2), RepVggBlock(8, 1)).eval()
    path = tmp_path / "repvgg.onnx"
    torch.onnx.export(model, (torch.randn(1, 8, 16, 16),), str(path), opset_version=17, dynamo=False)
    m, report = pyonnxopt.optimize(str(path))
    assert ops(m) == ["Conv", "Relu", "Conv", "Relu"]
    assert_same_outputs(onnx.load(path), m, rtol=1e-4, atol=1e-4)


def test_an_infinite_input_is_nan_only_where_the_original_is():
    """The one change beyond rounding: inf - inf of two branches (NaN) can
    become ±inf in the summed kernel; never NaN where the original is not."""
    w = {"wa": np.array([[[[0.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 0.0]]]], np.float32),
         "wb": np.array([[[[-1.0]]]], np.float32), "wc": np.array([[[[3.0]]]], np.float32)}
    proto = with_weights("""g (float[1,1,3,3] x) => (float[1,1,3,3] y, float[1,1,3,3] z) {
        a = Conv <pads = [1, 1, 1, 1]> (x, wa)  b = Conv (x, wb)  y = Add (a, b)
        c = Conv <pads = [1, 1, 1, 1]> (x, wa)  d = Conv (x, wc)  z = Add (c, d)
    }""", **w)
    m, _ = fused(proto)
    x = np.zeros((1, 1, 3, 3), np.float32)
    x[0, 0, 1, 1] = np.inf
    (y0, z0), (y1, z1) = outputs(proto, {"x": x}), outputs(m, {"x": x})
    assert np.isnan(y0[0, 0, 1, 1]) and y1[0, 0, 1, 1] == np.inf  # 2·inf - 1·inf against (2 - 1)·inf
    np.testing.assert_array_equal(z1, z0)  # weights of one sign: the same infinities
