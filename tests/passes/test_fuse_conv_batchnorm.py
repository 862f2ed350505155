"""fuse_conv_batchnorm: Conv/ConvTranspose + inference BatchNormalization ->
one Conv/ConvTranspose with folded weights. Numbers: onnxruntime, original
against fused, rtol = atol = 1e-5 in float32 (weights folded in float64 and
rounded once differ from Conv-then-BN in the last bits)."""

import numpy as np
import pytest

from fusion_helpers import assert_same_outputs, near_misses, reference_outputs, rng_weights, run_rule, with_weights
from helpers import ops, structure

RULE = "fuse_conv_batchnorm"
BN = "scale, beta, mean, var"


def conv_bn(conv="Conv", attrs="", bias=True, c_in=4, c_out=6, k=(3, 3), hw=(9, 9), group=1, bn_attrs="",
            opset=17, dtype=np.float32, seed=0, y_shape="[?,?,?,?]", extra_outputs=""):
    """x [1, c_in, *hw] -> conv -> t -> BatchNormalization -> y."""
    tname = {np.float32: "float", np.float16: "float16", np.float64: "double"}[dtype]
    w_shape = (c_out, c_in // group, *k) if conv == "Conv" else (c_in, c_out // group, *k)
    shapes = dict(w=w_shape, scale=(c_out,), beta=(c_out,), mean=(c_out,), var=(c_out,))
    if bias:
        shapes["b"] = (c_out,)
    weights = rng_weights(seed, dtype, **shapes)
    conv_attrs = f"<{attrs}>" if attrs else ""
    bn = f"<{bn_attrs}>" if bn_attrs else ""
    text = f"""g ({tname}[1,{c_in},{hw[0]},{hw[1]}] x) => ({tname}{y_shape} y{extra_outputs}) {{
        t = {conv} {conv_attrs} (x, w{', b' if bias else ''})
        y{extra_outputs.replace(' ', '').replace(f'{tname}[{c_out}]', '')} = BatchNormalization {bn} (t, {BN})
    }}"""
    return with_weights(text, opset, **weights)


def fused(proto, rtol=1e-5, atol=1e-5):
    m, r = run_rule(RULE, proto)
    assert r.modified, r.stats["near_misses"]
    assert_same_outputs(proto, m, rtol=rtol, atol=atol)
    return m, r


def test_conv_with_bias_becomes_one_conv_keeping_attributes_and_output_name():
    m, r = fused(conv_bn(attrs="strides = [2, 2], pads = [1, 0, 1, 2], dilations = [1, 2]", bn_attrs="epsilon = 0.01"))
    (conv,) = m.graph.nodes
    assert conv.op_type == "Conv" and conv.outputs[0].name == "y" and conv.inputs[0].name == "x"
    assert conv.attributes == {"strides": [2, 2], "pads": [1, 0, 1, 2], "dilations": [1, 2]}
    assert r.stats["rewrites"][0]["consumed"] == ["BatchNormalization->y", "Conv->t"]
    assert RULE not in str(run_rule(RULE, m.to_onnx())[1].stats["rewrites"])  # a second run finds nothing


def test_conv_without_bias_gets_one():
    m, _ = fused(conv_bn(bias=False))
    (conv,) = m.graph.nodes
    assert len(conv.inputs) == 3 and conv.inputs[2].initializer.dims == [6]


@pytest.mark.parametrize("group", [2, 4])  # 4 = depthwise (group = C)
def test_grouped_and_depthwise_conv(group):
    fused(conv_bn(c_in=4, c_out=8, group=group, attrs=f"group = {group}, dilations = [2, 1], strides = [1, 2]"))


@pytest.mark.parametrize("group", [1, 2, 4])  # 4 = depthwise
def test_conv_transpose_output_channels_follow_the_groups(group):
    # W is [C, M/g, k...]: output channel of W[c, j] is (c // (C/g)) * (M/g) + j.
    m, _ = fused(conv_bn("ConvTranspose", c_in=4, c_out=8, group=group,
                         attrs=f"group = {group}, strides = [2, 2], dilations = [1, 2], output_padding = [1, 0]"))
    assert ops(m) == ["ConvTranspose"] and m.graph.nodes[0].attributes["group"] == group


def test_conv1d_and_conv3d():
    fused(with_weights("""g (float[1,3,10] x) => (float[?,?,?] y) {
        t = Conv (x, w)
        y = BatchNormalization (t, scale, beta, mean, var)
    }""", **rng_weights(1, w=(5, 3, 3), scale=(5,), beta=(5,), mean=(5,), var=(5,))))
    fused(with_weights("""g (float[1,2,4,5,6] x) => (float[?,?,?,?,?] y) {
        t = ConvTranspose (x, w)
        y = BatchNormalization (t, scale, beta, mean, var)
    }""", **rng_weights(2, w=(2, 3, 2, 2, 2), scale=(3,), beta=(3,), mean=(3,), var=(3,))))


def test_float16():
    m, _ = fused(conv_bn(dtype=np.float16), rtol=1e-2, atol=1e-2)
    assert {m.graph.nodes[0].inputs[i].initializer.data_type for i in (1, 2)} == {10}


def test_double_against_the_reference_evaluator():
    # onnxruntime has no double Conv on CPU.
    proto = conv_bn(dtype=np.float64, c_in=2, c_out=3, hw=(5, 5))
    m, r = run_rule(RULE, proto)
    assert r.modified and {m.graph.nodes[0].inputs[i].initializer.data_type for i in (1, 2)} == {11}
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 2, 5, 5))}
    np.testing.assert_allclose(reference_outputs(m, feeds)[0], reference_outputs(proto, feeds)[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("opset, bn_attrs", [(7, "spatial = 1"), (9, ""), (14, "training_mode = 0"), (15, "")])
def test_opsets(opset, bn_attrs):
    fused(conv_bn(opset=opset, bn_attrs=bn_attrs))


def test_opset6_fuses_only_in_test_mode():
    m, r = run_rule(RULE, conv_bn(opset=6, bn_attrs="is_test = 1"), shapes=False)
    assert r.modified and ops(m) == ["Conv"]
    m, r = run_rule(RULE, conv_bn(opset=6), shapes=False)
    assert not r.modified and near_misses(r) == ["BatchNormalization is_test=0: training mode"]


def test_refuses_spatial_0():
    m, r = run_rule(RULE, conv_bn(opset=7, bn_attrs="spatial = 0"), shapes=False)
    assert not r.modified and near_misses(r) == ["BatchNormalization spatial=0: statistics per element, not per channel"]


def test_refuses_training_mode():
    proto = conv_bn(opset=15, bn_attrs="training_mode = 1", extra_outputs=", float[6] rm, float[6] rv")
    m, r = run_rule(RULE, proto)
    assert not r.modified and ops(m) == ["Conv", "BatchNormalization"]
    assert "attribute training_mode is not 0" in r.stats["near_misses"][0]


def test_refuses_outputs_besides_y_before_opset_14():
    proto = conv_bn(opset=9, extra_outputs=", float[6] rm, float[6] rv, float[6] sm, float[6] sv")
    m, r = run_rule(RULE, proto, shapes=False)
    assert not r.modified and near_misses(r) == ["BatchNormalization has outputs besides Y (training mode)"]


def test_refuses_a_conv_output_with_another_reader():
    proto = with_weights("""g (float[1,4,9,9] x) => (float[?,?,?,?] y, float[?,?,?,?] z) {
        t = Conv (x, w)
        y = BatchNormalization (t, scale, beta, mean, var)
        z = Relu (t)
    }""", **rng_weights(w=(6, 4, 3, 3), scale=(6,), beta=(6,), mean=(6,), var=(6,)))
    m, r = run_rule(RULE, proto)
    assert not r.modified and ops(m) == ["Conv", "BatchNormalization", "Relu"]
    assert near_misses(r) == ["'conv': its output 't' is also read by 'Relu->z'"]


def test_refuses_a_conv_output_that_is_a_graph_output():
    proto = with_weights("""g (float[1,4,9,9] x) => (float[?,?,?,?] y, float[?,?,?,?] t) {
        t = Conv (x, w)
        y = BatchNormalization (t, scale, beta, mean, var)
    }""", **rng_weights(w=(6, 4, 3, 3), scale=(6,), beta=(6,), mean=(6,), var=(6,)))
    m, r = run_rule(RULE, proto)
    assert not r.modified and "'t'" in r.stats["near_misses"][0] and "graph output" in r.stats["near_misses"][0]


def test_refuses_non_constant_weight_or_statistics():
    weights = rng_weights(w=(6, 4, 3, 3), beta=(6,), mean=(6,), var=(6,))
    proto = with_weights("""g (float[1,4,9,9] x, float[6] scale) => (float[?,?,?,?] y) {
        t = Conv (x, w)
        y = BatchNormalization (t, scale, beta, mean, var)
    }""", **weights)
    m, r = run_rule(RULE, proto)
    assert not r.modified and "'scale'" in r.stats["near_misses"][0]
    weights = rng_weights(scale=(6,), beta=(6,), mean=(6,), var=(6,))
    proto = with_weights("""g (float[1,4,9,9] x, float[6,4,3,3] w) => (float[?,?,?,?] y) {
        t = Conv (x, w)
        y = BatchNormalization (t, scale, beta, mean, var)
    }""", **weights)
    m, r = run_rule(RULE, proto)
    assert not r.modified and "'w'" in r.stats["near_misses"][0]


def test_refuses_statistics_of_another_channel_count():
    proto = with_weights("""g (float[1,4,9,9] x) => (float[?,?,?,?] y) {
        t = Conv (x, w)
        y = BatchNormalization (t, scale, beta, mean, var)
    }""", **rng_weights(w=(6, 4, 3, 3), scale=(1,), beta=(6,), mean=(6,), var=(6,)))
    m, r = run_rule(RULE, proto, shapes=False, valid=False)
    assert not r.modified and near_misses(r) == ["BatchNormalization scale has shape [1], the producer 6 channels"]


def test_refuses_conv_transpose_group_not_dividing_channels():
    proto = with_weights("""g (float[1,3,5,5] x) => (float[?,?,?,?] y) {
        t = ConvTranspose <group = 2> (x, w)
        y = BatchNormalization (t, scale, beta, mean, var)
    }""", **rng_weights(w=(3, 2, 3, 3), scale=(4,), beta=(4,), mean=(4,), var=(4,)))
    m, r = run_rule(RULE, proto, shapes=False, valid=False)
    assert not r.modified
    assert near_misses(r) == ["ConvTranspose group=2 does not divide the weight's 3 input channels"]


def test_shared_weight_stays_for_its_other_reader():
    weights = rng_weights(w=(6, 4, 3, 3), scale=(6,), beta=(6,), mean=(6,), var=(6,))
    proto = with_weights("""g (float[1,4,9,9] x) => (float[?,?,?,?] y, float[?,?,?,?] z) {
        t = Conv (x, w)
        y = BatchNormalization (t, scale, beta, mean, var)
        z = Conv (x, w)
    }""", **weights)
    m, r = fused(proto)
    assert ops(m) == ["Conv", "Conv"]
    assert structure(m)[1] == ("Conv", ["x", "w"], ["z"]) and structure(m)[0][1][1] != "w"


def test_in_an_if_branch():
    weights = rng_weights(w=(6, 4, 3, 3), scale=(6,), beta=(6,), mean=(6,), var=(6,))
    proto = with_weights("""g (float[1,4,9,9] x, bool c) => (float[1,6,7,7] y) {
        y = If (c) <then_branch = g1 () => (float[1,6,7,7] yt) {
                        t = Conv (x, w)
                        yt = BatchNormalization (t, scale, beta, mean, var)
                    },
                    else_branch = g2 () => (float[1,6,7,7] ye) { ye = Conv (x, w) }>
    }""", **weights)
    m, r = run_rule(RULE, proto)
    assert r.modified
    (branch, _) = m.graph.nodes[0].subgraphs
    assert [n.op_type for n in branch.nodes] == ["Conv"]
    x = np.random.default_rng(0).standard_normal((1, 4, 9, 9)).astype(np.float32)
    from helpers import outputs

    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        np.testing.assert_allclose(outputs(m, feeds)[0], outputs(proto, feeds)[0], rtol=1e-5, atol=1e-5)


def test_torch_conv_bn_export():
    torch = pytest.importorskip("torch")
    import io

    import onnx

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, groups=1), torch.nn.BatchNorm2d(8),
                              torch.nn.ConvTranspose2d(8, 4, 2, stride=2, groups=2), torch.nn.BatchNorm2d(4))
    for bn in (net[1], net[3]):
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.data.uniform_(0.5, 2)
    net.eval()
    buf = io.BytesIO()
    torch.onnx.export(net, torch.randn(1, 3, 8, 8), buf, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.PRESERVE)
    proto = onnx.load_from_string(buf.getvalue())
    assert [n.op_type for n in proto.graph.node].count("BatchNormalization") == 2
    m, r = fused(proto, rtol=1e-4, atol=1e-5)
    assert ops(m) == ["Conv", "ConvTranspose"] and len(r.stats["rewrites"]) == 2


def test_refuses_a_negative_variance():
    weights = rng_weights(w=(6, 4, 3, 3), scale=(6,), beta=(6,), mean=(6,), var=(6,))
    weights["var"][2] = -1.0
    proto = with_weights("""g (float[1,4,9,9] x) => (float[?,?,?,?] y) {
        t = Conv (x, w)
        y = BatchNormalization (t, scale, beta, mean, var)
    }""", **weights)
    m, r = run_rule(RULE, proto)
    assert not r.modified and near_misses(r) == ["BatchNormalization's scale / sqrt(var + epsilon), mean or B is not finite"]


def test_refuses_a_malformed_bias_instead_of_raising():
    proto = with_weights("""g (float[1,4,9,9] x) => (float[?,?,?,?] y) {
        t = Conv (x, w, b)
        y = BatchNormalization (t, scale, beta, mean, var)
    }""", **rng_weights(w=(6, 4, 3, 3), b=(1,), scale=(6,), beta=(6,), mean=(6,), var=(6,)))
    m, r = run_rule(RULE, proto, shapes=False, valid=False)
    assert not r.modified and near_misses(r) == ["Conv B has shape [1], not [6]"]
