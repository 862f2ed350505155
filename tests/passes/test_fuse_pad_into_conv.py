"""fuse_pad_into_conv: a constant spatial Pad folded into the pads of the
Conv/AveragePool/MaxPool after it, in every Pad form. Numbers: onnxruntime,
original against fused, rtol = atol = 1e-6 (the same sums, in another
order at most)."""

import pytest

from fusion_helpers import assert_same_outputs, near_misses, rng_weights, run_rule, with_weights
from helpers import ops, structure

RULE = "fuse_pad_into_conv"
IO = "g (float[1,3,8,8] x) => (float[?,?,?,?] y)"
W = rng_weights(w=(4, 3, 3, 3), b=(4,))


def fused(proto, shapes=True):
    m, r = run_rule(RULE, proto, shapes=shapes)
    assert r.modified, r.stats["near_misses"]
    assert_same_outputs(proto, m, rtol=1e-6, atol=1e-6)
    return m, r


def pads_of(m):
    (node,) = m.graph.nodes
    return node.attributes["pads"]


def test_pad_input_form_adds_to_the_conv_pads():
    proto = with_weights(IO + """<int64[8] p = {0, 0, 1, 2, 0, 0, 3, 4}> {
        t = Pad (x, p)
        y = Conv <pads = [1, 1, 1, 1], strides = [2, 1]> (t, w, b)
    }""", **W)
    m, r = fused(proto)
    assert structure(m) == [("Conv", ["x", "w", "b"], ["y"])]
    assert m.graph.nodes[0].attributes == {"pads": [2, 3, 4, 5], "strides": [2, 1]}
    assert r.stats["rewrites"][0]["consumed"] == ["Conv->y", "Pad->t"]
    assert not run_rule(RULE, m.to_onnx())[1].modified


def test_explicit_zero_value_and_axes():
    proto = with_weights("""g (float[1,3,8,8] x) => (float[?,?,?,?] y) <int64[4] p = {1, 2, 3, 0}, float v = {0.0}, int64[2] ax = {-1, 2}> {
        t = Pad (x, p, v, ax)
        y = Conv (t, w)
    }""", 18, w=W["w"])
    m, _ = fused(proto)
    assert pads_of(m) == [2, 1, 0, 3]  # axes [-1, 2]: W begins 1, H begins 2; W ends 3, H ends 0


@pytest.mark.parametrize("opset", [2, 10])
def test_attribute_form(opset):
    proto = with_weights(IO + """{
        t = Pad <pads = [0, 0, 1, 1, 0, 0, 2, 0], value = 0.0> (x)
        y = Conv (t, w)
    }""", opset, w=W["w"])
    m, _ = fused(proto)
    assert pads_of(m) == [1, 1, 2, 0]


def test_opset_1_paddings():
    proto = with_weights(IO + """{
        t = Pad <paddings = [0, 0, 1, 1, 0, 0, 2, 0]> (x)
        y = Conv (t, w)
    }""", 1, w=W["w"])
    m, r = run_rule(RULE, proto, shapes=False)
    assert r.modified and pads_of(m) == [1, 1, 2, 0]


def test_conv1d():
    proto = with_weights("""g (float[1,3,8] x) => (float[?,?,?] y) <int64[6] p = {0, 0, 2, 0, 0, 1}> {
        t = Pad (x, p)
        y = Conv (t, w)
    }""", w=rng_weights(w=(2, 3, 3))["w"])
    m, _ = fused(proto)
    assert pads_of(m) == [2, 1]


def test_average_pool_counting_the_padding():
    proto = with_weights(IO + """<int64[8] p = {0, 0, 1, 1, 0, 0, 1, 1}> {
        t = Pad (x, p)
        y = AveragePool <kernel_shape = [3, 3], count_include_pad = 1, pads = [1, 0, 0, 1]> (t)
    }""")
    m, _ = fused(proto)
    assert pads_of(m) == [2, 1, 1, 2]


@pytest.mark.parametrize("dtype, value", [("float", "float v = {-inf}"), ("int8", "int8 v = {-128}"), ("uint8", "")])
def test_max_pool_padded_with_the_lowest_value(dtype, value):
    proto = with_weights(f"""g ({dtype}[1,3,8,8] x) => ({dtype}[?,?,?,?] y) <int64[8] p = {{0, 0, 1, 1, 0, 0, 1, 1}}{', ' + value if value else ''}> {{
        t = Pad (x, p{', v' if value else ''})
        y = MaxPool <kernel_shape = [3, 3], strides = [2, 2]> (t)
    }}""")
    m, _ = fused(proto)
    assert pads_of(m) == [1, 1, 1, 1]


def refusal(text, opset=17, shapes=True, **weights):
    m, r = run_rule(RULE, with_weights(text, opset, **weights), shapes=shapes)
    assert not r.modified and "Pad" in ops(m)
    return near_misses(r)


PAD = "<int64[8] p = {0, 0, 1, 1, 0, 0, 1, 1}>"


def test_refuses_pads_that_are_not_spatial_or_negative():
    assert refusal(IO + "<int64[8] p = {0, 1, 0, 0, 0, 0, 0, 0}> { t = Pad (x, p)  y = Conv (t, w) }", w=rng_weights(w=(4, 4, 3, 3))["w"]) == [
        "the Pad's pads [0, 1, 0, 0, 0, 0, 0, 0] touch the batch or channel axis"]
    assert refusal(IO + "<int64[8] p = {0, 0, -1, 0, 0, 0, 2, 0}> { t = Pad (x, p)  y = Conv (t, w) }", w=W["w"]) == [
        "the Pad's pads [0, 0, -1, 0, 0, 0, 2, 0] are negative (a crop)"]


def test_refuses_other_modes_and_values():
    assert refusal(IO + PAD + " { t = Pad <mode = \"reflect\"> (x, p)  y = Conv (t, w) }", w=W["w"]) == [
        "Pad mode is 'reflect', not 'constant'"]
    assert refusal(IO + PAD[:-1] + ", float v = {1.0}> { t = Pad (x, p, v)  y = Conv (t, w) }", w=W["w"]) == [
        "the Pad's value is 1.0, not 0"]
    assert refusal(IO + "{ t = Pad <pads = [0, 0, 1, 1, 0, 0, 1, 1], value = 0.5> (x)  y = Conv (t, w) }", 10, w=W["w"]) == [
        "the Pad's value is 0.5, not 0"]


def test_refuses_a_zero_pad_into_max_pool():
    # max(0, x) is not max(x) where a window holds only negative numbers.
    assert refusal(IO + PAD + " { t = Pad (x, p)  y = MaxPool <kernel_shape = [3, 3]> (t) }") == [
        "the Pad's value is 0, not -inf: MaxPool pads with the lowest value"]


def test_refuses_max_pool_indices_and_ceil_mode_and_pads_reaching_the_kernel():
    text = "g (float[1,3,8,8] x) => (float[?,?,?,?] y, int64[?,?,?,?] i) <int64[8] p = {0, 0, 1, 1, 0, 0, 1, 1}, float v = {-inf}>"
    assert refusal(text + " { t = Pad (x, p, v)  y, i = MaxPool <kernel_shape = [3, 3]> (t) }") == [
        "MaxPool's Indices output is read: the indices would address the unpadded input"]
    assert refusal(IO + PAD + " { t = Pad (x, p)  y = AveragePool <kernel_shape = [3, 3], count_include_pad = 1, ceil_mode = 1> (t) }") == [
        "AveragePool ceil_mode=1: windows past the padding count differently"]
    assert refusal(IO + PAD + " { t = Pad (x, p)  y = AveragePool <kernel_shape = [2, 2], count_include_pad = 1, pads = [1, 0, 0, 0]> (t) }") == [
        "AveragePool pads would reach its kernel [2, 2] (onnxruntime refuses such pools)"]


def test_refuses_average_pool_not_counting_the_padding():
    assert refusal(IO + PAD + " { t = Pad (x, p)  y = AveragePool <kernel_shape = [3, 3]> (t) }") == [
        "AveragePool count_include_pad=0: the padding would leave its divisor"]
    assert refusal(IO + "{ t = Pad <pads = [0, 0, 1, 1, 0, 0, 1, 1]> (x)  y = AveragePool <kernel_shape = [3, 3]> (t) }", 6) == [
        "AveragePool count_include_pad=0: the padding would leave its divisor"]


def test_refuses_auto_pad():
    assert refusal(IO + PAD + " { t = Pad (x, p)  y = Conv <auto_pad = \"SAME_UPPER\"> (t, w) }", w=W["w"]) == [
        "Conv auto_pad is 'SAME_UPPER', not NOTSET or VALID"]


@pytest.mark.parametrize("consumer", ['Conv <auto_pad = "VALID", strides = [2, 2]> (t, w, b)',
                                      'MaxPool <auto_pad = "VALID", kernel_shape = [3, 3], strides = [2, 2]> (t)'])
def test_auto_pad_valid_takes_the_pads(consumer):
    # HF EfficientNet: Pad [0, 0, 0, 0, 0, 0, 1, 1] before each strided Conv with auto_pad VALID (no padding).
    value = "-inf" if "MaxPool" in consumer else "0.0"
    proto = with_weights(IO + f"""<int64[8] p = {{0, 0, 0, 0, 0, 0, 1, 1}}, float v = {{{value}}}> {{
        t = Pad (x, p, v)
        y = {consumer}
    }}""", **W)
    m, _ = fused(proto)
    (node,) = m.graph.nodes
    assert node.attributes["pads"] == [0, 0, 1, 1] and "auto_pad" not in node.attributes


def test_a_pad_read_by_two_convs_goes_into_both():
    # NASNet's two 7x7 branches. onnxslim issue 160 fused such a Pad into one Conv and the other lost it.
    proto = with_weights("g (float[1,3,8,8] x) => (float[?,?,?,?] y, float[?,?,?,?] z)" + PAD + """{
        t = Pad (x, p)
        y = Conv (t, w)
        z = Conv <strides = [2, 2]> (t, w)
    }""", w=W["w"])
    m, r = fused(proto)
    assert ops(m) == ["Conv", "Conv"] and all(n.inputs[0].name == "x" for n in m.graph.nodes)
    assert [n.attributes["pads"] for n in m.graph.nodes] == [[1, 1, 1, 1]] * 2


@pytest.mark.parametrize("other, why", [
    ("z = Relu (t)", "another reader, 'Relu->z' (Relu), that cannot take it"),
    ('z = Conv <auto_pad = "SAME_UPPER"> (t, w)', "another reader, 'Conv->z', that cannot take it: Conv auto_pad"),
    ("z = AveragePool <kernel_shape = [3, 3]> (t)", "count_include_pad=0"),
])
def test_refuses_a_pad_read_by_a_node_that_cannot_take_it(other, why):
    proto = with_weights("g (float[1,3,8,8] x) => (float[?,?,?,?] y, float[?,?,?,?] z)" + PAD + """{
        t = Pad (x, p)
        y = Conv (t, w)
        OTHER
    }""".replace("OTHER", other), w=W["w"])
    m, r = run_rule(RULE, proto)
    assert not r.modified and "Pad" in ops(m)
    assert any(why in x for x in near_misses(r)), near_misses(r)


def test_refuses_a_pad_that_is_a_graph_output_or_not_constant():
    misses = refusal("g (float[1,3,8,8] x) => (float[?,?,?,?] y, float[?,?,?,?] t)" + PAD + " { t = Pad (x, p)  y = Conv (t, w) }", w=W["w"])
    assert len(misses) == 1 and "'t'" in misses[0] and "graph output" in misses[0]
    misses = refusal("g (float[1,3,8,8] x, int64[8] p) => (float[?,?,?,?] y) { t = Pad (x, p)  y = Conv (t, w) }", w=W["w"])
    assert len(misses) == 1 and "'p'" in misses[0]


def test_torch_zero_pad_conv():
    torch = pytest.importorskip("torch")
    import io

    import onnx

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.ZeroPad2d((1, 2, 0, 3)), torch.nn.Conv2d(3, 4, 3, padding=1))
    buf = io.BytesIO()
    torch.onnx.export(net.eval(), torch.randn(1, 3, 8, 8), buf, dynamo=False, opset_version=17)
    proto = onnx.load_from_string(buf.getvalue())
    assert "Pad" in [n.op_type for n in proto.graph.node]
    from pyonnxopt.passes import run_passes

    m, _ = run_passes(proto, ["infer_shapes", "fold_constants", RULE, "eliminate_dead_code"])
    assert ops(m) == ["Conv"] and m.graph.nodes[0].attributes["pads"] == [1, 2, 4, 3]
    assert_same_outputs(proto, m, rtol=1e-6, atol=1e-6)


def test_refuses_a_pool_without_its_kernel_shape():
    # Not valid ONNX (kernel_shape is required): a refusal, not an exception.
    text = IO + "<int64[8] p = {0, 0, 1, 1, 0, 0, 1, 1}, float v = {-inf}> { t = Pad (x, p, v)  y = MaxPool (t) }"
    m, r = run_rule(RULE, with_weights(text), shapes=False, valid=False)
    assert not r.modified and near_misses(r) == ["MaxPool kernel_shape [] does not fit its 2 spatial axes"]


@pytest.mark.parametrize("producer", ["r = Relu(x)", "r = Sigmoid(x)",
                                      "lo = Constant <value = float {0.0}> ()  r = Clip(x, lo)"])
def test_a_zero_pad_into_max_pool_where_the_input_is_never_negative(producer):
    """Keras's ZeroPadding2D before a ResNet's MaxPool, after a Relu: a 0
    pad and a -inf pad give the same maxima (every window keeps an input
    element)."""
    text = IO + PAD + " { " + producer + "  t = Pad (r, p)  y = MaxPool <kernel_shape = [3, 3], strides = [2, 2]> (t) }"
    m, r = fused(with_weights(text, 17))
    assert [n.op_type for n in m.graph.nodes][-1] == "MaxPool"
    assert list(m.graph.nodes[-1].attributes["pads"]) == [1, 1, 1, 1]


def test_a_zero_pad_into_max_pool_after_a_clip_that_may_go_negative_refuses():
    text = IO + PAD + " { lo = Constant <value = float {-1.0}> ()  r = Clip(x, lo)  t = Pad (r, p)  " \
        "y = MaxPool <kernel_shape = [3, 3]> (t) }"
    assert refusal(text) == ["the Pad's value is 0, not -inf: MaxPool pads with the lowest value"]
