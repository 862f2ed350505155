"""fuse_conv_activation (--target ort): Conv [+ residual] + activation ->
com.microsoft FusedConv. Numbers: onnxruntime, original against fused,
rtol = atol = 1e-5 (float32; the same sums, the activation applied in the
kernel), 1e-2 for float16."""

import numpy as np
import pytest

import pyonnxopt
from fusion_helpers import assert_same_outputs, near_misses, rng_weights, run_rule, with_weights
from helpers import ops, outputs, structure

RULE = "fuse_conv_activation"
IO = "g (float[1,3,8,8] x) => (float[1,4,8,8] y)"
W = rng_weights(w=(4, 3, 3, 3), b=(4,))


def fused(proto, **shapes):
    m, r = run_rule(RULE, proto, target="ort")
    assert r.modified, r.stats["near_misses"]
    assert ops(m) == ["FusedConv"]
    assert m.graph.nodes[0].domain == "com.microsoft" and m.opset_imports["com.microsoft"] == 1
    assert_same_outputs(proto, m, **shapes)
    return m.graph.nodes[0]


def refused(proto, target="ort"):
    m, r = run_rule(RULE, proto, target=target)
    assert not r.modified and ops(m) == [n.op_type for n in proto.graph.node]
    return near_misses(r)


@pytest.mark.parametrize("act, attrs, params", [
    ("Relu", "", None),
    ("Sigmoid", "", None),
    ("Tanh", "", None),
    ("LeakyRelu", "", [0.01]),
    ("LeakyRelu", "<alpha = 0.2>", [0.2]),
    ("HardSigmoid", "", [0.2, 0.5]),
    ("HardSigmoid", "<alpha = 0.25, beta = 0.4>", [0.25, 0.4]),
])
def test_each_activation_with_its_parameters(act, attrs, params):
    node = fused(with_weights(IO + f"""{{
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        y = {act} {attrs} (c)
    }}""", **W))
    assert node.attributes["activation"] == act.encode() or node.attributes["activation"] == act
    assert node.attributes.get("activation_params") == (None if params is None else pytest.approx(params))
    assert node.attributes["pads"] == [1, 1, 1, 1]


def test_clip_bounds_from_constants_or_absent():
    node = fused(with_weights(IO + """<float lo = {0.0}, float hi = {6.0}> {
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        y = Clip (c, lo, hi)
    }""", **W))
    assert node.attributes["activation_params"] == [0.0, 6.0]
    node = fused(with_weights(IO + """<float lo = {-0.5}> {
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        y = Clip (c, lo)
    }""", **W))
    assert node.attributes["activation_params"] == pytest.approx([-0.5, float(np.finfo(np.float32).max)])
    node = fused(with_weights(IO + """<float hi = {1.5}> {
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        y = Clip (c, "", hi)
    }""", **W))
    assert node.attributes["activation_params"] == pytest.approx([-float(np.finfo(np.float32).max), 1.5])


def test_clip_opset_6_attributes():
    node = fused(with_weights(IO + """{
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        y = Clip <min = -1.0, max = 2.0> (c)
    }""", 10, **W))
    assert node.attributes["activation_params"] == [-1.0, 2.0]


def test_clip_refusals():
    assert refused(with_weights(IO + """<float lo = {3.0}, float hi = {1.0}> {
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        y = Clip (c, lo, hi)
    }""", **W)) == ["Clip's min 3.0 is above its max 1.0"]
    assert refused(with_weights(IO + """<float[2] lo = {0.0, 0.0}> {
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        y = Clip (c, lo)
    }""", **W)) == ["Clip's min 'lo' has 2 elements, needs one"]
    assert refused(with_weights("g (float[1,3,8,8] x, float lo) => (float[1,4,8,8] y) {"
                                "c = Conv <pads = [1, 1, 1, 1]> (x, w, b)  y = Clip (c, lo) }", **W)) == [
        "'min': 'lo' is not a constant"]


@pytest.mark.parametrize("order", ["c, z", "z, c"])
def test_residual_add_goes_in_as_the_sum_input(order):
    proto = with_weights(f"""g (float[1,3,8,8] x, float[1,4,8,8] z) => (float[1,4,8,8] y) {{
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        s = Add ({order})
        y = Relu (s)
    }}""", **W)
    fused(proto)
    m, _ = run_rule(RULE, proto, target="ort")
    assert structure(m) == [("FusedConv", ["x", "w", "b", "z"], ["y"])]


def test_residual_without_bias_leaves_the_bias_slot_empty():
    proto = with_weights("""g (float[1,3,8,8] x) => (float[1,4,8,8] y) {
        c = Conv <pads = [1, 1, 1, 1]> (x, w)
        d = Conv <pads = [1, 1, 1, 1]> (x, w)
        s = Add (c, d)
        y = Relu (s)
    }""", w=W["w"])
    m, r = run_rule(RULE, proto, target="ort")
    assert r.modified and ops(m) == ["Conv", "FusedConv"]
    assert [v.name if v else "" for v in m.graph.nodes[1].inputs][2] == ""
    assert_same_outputs(proto, m)


def test_no_bias_and_no_residual_write_no_empty_input():
    # onnxruntime's NCHWc transform skips a FusedConv with an empty bias
    # input: the model ran 1.4x slower than with the plain Conv + Relu.
    proto = with_weights("""g (float[1,3,8,8] x) => (float[1,4,8,8] y) {
        c = Conv <pads = [1, 1, 1, 1]> (x, w)
        y = Relu (c)
    }""", w=W["w"])
    m, r = run_rule(RULE, proto, target="ort")
    assert structure(m) == [("FusedConv", ["x", "w"], ["y"])]
    assert_same_outputs(proto, m)


def test_symbolic_residual_of_the_same_dims_fuses():
    proto = with_weights("""g (float[N,3,8,8] x, float[N,4,8,8] z) => (float[N,4,8,8] y) {
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        s = Add (c, z)
        y = Relu (s)
    }""", **W)
    fused(proto, x=[2, 3, 8, 8], z=[2, 4, 8, 8])


@pytest.mark.parametrize("z", ["float[1,4,1,1]", "float[M,4,8,8]", "float[4,8,8]"])
def test_broadcast_or_unproven_residual_is_refused(z):
    reasons = refused(with_weights(f"""g (float[N,3,8,8] x, {z} z) => (float[N,4,8,8] y) {{
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        s = Add (c, z)
        y = Relu (s)
    }}""", **W))
    assert len(reasons) == 1 and "is not provably the Conv output's" in reasons[0]


def test_grouped_dilated_strided_1d_conv_keeps_its_attributes():
    w = rng_weights(w=(6, 2, 3))["w"]
    node = fused(with_weights("""g (float[2,4,20] x) => (float[2,6,8] y) {
        c = Conv <group = 2, dilations = [2], strides = [2], pads = [0, 1]> (x, w)
        y = LeakyRelu <alpha = 0.1> (c)
    }""", w=w))
    assert node.attributes["group"] == 2 and node.attributes["dilations"] == [2] and node.attributes["strides"] == [2]


def test_float16_fuses_and_double_is_refused():
    w16 = {k: v.astype(np.float16) for k, v in W.items()}
    proto = with_weights("""g (float16[1,3,8,8] x) => (float16[1,4,8,8] y) {
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        y = Relu (c)
    }""", **w16)
    m, r = run_rule(RULE, proto, target="ort")
    assert ops(m) == ["FusedConv"]
    assert_same_outputs(proto, m, rtol=1e-2, atol=1e-2)
    w64 = {k: v.astype(np.float64) for k, v in W.items()}
    assert refused(with_weights("""g (double[1,3,8,8] x) => (double[1,4,8,8] y) {
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        y = Relu (c)
    }""", **w64)) == ["com.microsoft.FusedConv on double: onnxruntime's CPU provider has no kernel"]


def test_conv_output_read_elsewhere_or_target_onnx_is_left():
    shared = with_weights("""g (float[1,3,8,8] x) => (float[1,4,8,8] y, float[1,4,8,8] c) {
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
        y = Relu (c)
    }""", **W)
    assert refused(shared) == ["'conv': its output 'c' is a graph output"]
    plain = with_weights(IO + "{ c = Conv <pads = [1, 1, 1, 1]> (x, w, b)  y = Relu (c) }", **W)
    m, r = run_rule(RULE, plain)
    assert not r.modified and ops(m) == ["Conv", "Relu"]


QDQ = {"wq": np.random.default_rng(1).integers(-100, 100, (4, 3, 3, 3)).astype(np.int8),
       "ws": np.full(4, 0.01, np.float32), "wz": np.zeros(4, np.int8),
       "s": np.array(0.05, np.float32), "zp": np.array(0, np.uint8)}


def test_a_quantized_conv_stays_for_onnxruntime_to_make_qlinearconv():
    # DequantizeLinear -> Conv -> Relu -> QuantizeLinear is what onnxruntime
    # runs as QLinearConv; a FusedConv there would run in float.
    qdq = with_weights(IO + """{
        xq = QuantizeLinear (x, s, zp)  xd = DequantizeLinear (xq, s, zp)  wd = DequantizeLinear <axis = 0> (wq, ws, wz)
        c = Conv <pads = [1, 1, 1, 1]> (xd, wd)  r = Relu (c)  rq = QuantizeLinear (r, s, zp)  y = DequantizeLinear (rq, s, zp)
    }""", **QDQ)
    assert [why.split("' ", 1)[1] for why in refused(qdq)] == [
        "reads a DequantizeLinear: onnxruntime runs this quantized (QDQ) group as one int8 kernel"]
    float_conv = with_weights(IO + """{
        c = Conv <pads = [1, 1, 1, 1]> (x, w, b)  r = Relu (c)  rq = QuantizeLinear (r, s, zp)  y = DequantizeLinear (rq, s, zp)
    }""", **W, **QDQ)
    assert [why.split("' ", 1)[1] for why in refused(float_conv)] == [
        "feeds a QuantizeLinear: onnxruntime runs this quantized (QDQ) group as one int8 kernel"]


@pytest.mark.parametrize("stride", [1, 2])
def test_resnet_block_of_any_image_size_through_the_pipeline_with_the_check(stride):
    # With a dynamic height and width the residual's dims are those of
    # infer_shapes' window names (floor((H-1)/2)+1 on both paths).
    torch = pytest.importorskip("torch")
    import io

    import onnx

    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Conv2d(8, 8, 3, stride, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
            self.b = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8))
            self.shortcut = nn.Conv2d(8, 8, 1, stride) if stride > 1 else nn.Identity()

        def forward(self, x):
            return torch.relu(self.b(self.a(x)) + self.shortcut(x))

    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.onnx.export(Block().eval(), torch.randn(2, 8, 7, 9), buf, dynamo=False, opset_version=17,
                      input_names=["x"], dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}})
    proto = onnx.load_from_string(buf.getvalue())
    model, report = pyonnxopt.optimize(proto, target="ort", check_outputs=True)
    want = ["FusedConv", "FusedConv"] if stride == 1 else ["FusedConv", "Conv", "FusedConv"]
    assert [n.op_type for n in model.nodes()] == want
    assert report["check"]["first_mismatch"] is None and report["check"]["max_abs_diff"] < 1e-5
    default, _ = pyonnxopt.optimize(proto)
    assert [n.op_type for n in default.nodes()].count("Relu") == 2
    for h, w in ((7, 9), (12, 5)):  # other sizes than the export's
        x = np.random.default_rng(h).standard_normal((1, 8, h, w)).astype(np.float32)
        np.testing.assert_allclose(outputs(model, {"x": x})[0], outputs(proto, {"x": x})[0], rtol=1e-4, atol=1e-4)
