"""fuse_rms_normalization: the decomposed RMS norm -> RMSNormalization (opset
23), or with a residual Add com.microsoft SkipSimplifiedLayerNormalization
(--target ort below 23). Numbers: fused kernels against the decomposition,
rtol 1e-5, atol 1e-5."""

import pytest

from transformer_helpers import assert_same_outputs, export, fuse, near, optimized
from helpers import ops, structure

TOL = dict(rtol=1e-5, atol=1e-5)
CONSTS = ("float two = {2.0}, float eps = {1e-6}, float one = {1.0}, float[8] w = {1,2,3,4,5,6,7,8}, "
          "int64[1] axes = {-1}")
TS = "q = Pow(x, two)  ms = ReduceMean(q, axes)  a = Add(ms, eps)  r = Sqrt(a)  i = Div(one, r)  n = Mul(x, i)  y = Mul(n, w)"
DYN = "q = Pow(x, two)  ms = ReduceMean(q, axes)  a = Add(ms, eps)  r = Sqrt(a)  i = Reciprocal(r)  n = Mul(x, i)  y = Mul(w, n)"


def rms(body=TS, consts=CONSTS, x_type="float[2,5,8]", outs="float[2,5,8] y"):
    return f"g ({x_type} x) => ({outs}) <{consts}> {{ {body} }}"


def test_torchscript_spelling_fuses():
    m, r, original = fuse("fuse_rms_normalization", rms(), opset=23)
    assert structure(m) == [("RMSNormalization", ["x", "w"], ["y"])]
    attrs = m.graph.nodes[0].attributes
    assert attrs["axis"] == -1 and abs(attrs["epsilon"] - 1e-6) < 1e-12
    assert_same_outputs(original, m, **TOL)


def test_dynamo_spelling_with_axes_input_fuses():
    m, r, original = fuse("fuse_rms_normalization", rms(DYN), opset=23)
    assert structure(m) == [("RMSNormalization", ["x", "w"], ["y"])]
    assert_same_outputs(original, m, **TOL)


def test_square_by_mul_divide_by_rms_no_scale():
    body = "q = Mul(x, x)  ms = ReduceMean(q, axes)  a = Add(eps, ms)  r = Sqrt(a)  y = Div(x, r)"
    m, r, original = fuse("fuse_rms_normalization", rms(body, CONSTS.replace("{-1}", "{2}")), opset=23)
    assert ops(m) == ["RMSNormalization"] and m.graph.nodes[0].inputs[1].initializer.numpy().tolist() == [1.0] * 8
    assert_same_outputs(original, m, **TOL)


@pytest.mark.parametrize("target", ["onnx", "ort"])
def test_opset_23_is_rms_normalization_for_both_targets(target):
    m, r, original = fuse("fuse_rms_normalization", rms(), opset=23, target=target)
    assert ops(m) == ["RMSNormalization"] and m.graph.nodes[0].domain == ""


def test_opset_below_23_refuses_for_onnx():
    m, r, _ = fuse("fuse_rms_normalization", rms(), opset=20)
    assert not r.modified and "Mul->y: RMSNormalization needs opset 23; the model imports 20" in r.stats["near_misses"]


RESIDUAL = """g (float[2,5,8] h, float[2,5,8] s) => (float[2,5,8] z) <{consts}> {{
    x = Add(h, s)  {body}  z = Add(x, y)
}}"""


def test_target_ort_residual_becomes_skip_simplified_layer_normalization():
    text = RESIDUAL.format(consts=CONSTS, body=TS)
    m, r, original = fuse("fuse_rms_normalization", text, opset=18, target="ort")
    assert structure(m) == [("SkipSimplifiedLayerNormalization", ["h", "s", "w"], ["y", "", "", "x"]),
                            ("Add", ["x", "y"], ["z"])]
    assert m.graph.nodes[0].domain == "com.microsoft" and abs(m.graph.nodes[0].attributes["epsilon"] - 1e-6) < 1e-12
    assert_same_outputs(original, m, **TOL)


def test_target_ort_without_a_residual_refuses_and_says_why():
    m, r, _ = fuse("fuse_rms_normalization", rms(), opset=18, target="ort")
    assert not r.modified and near(r, "onnxruntime's SimplifiedLayerNormalization is in the ONNX domain, which "
                                      "onnx.checker rejects")


def test_target_ort_residual_with_a_broadcast_skip_refuses():
    text = RESIDUAL.format(consts=CONSTS, body=TS).replace("float[2,5,8] s", "float[2,1,8] s")
    m, r, _ = fuse("fuse_rms_normalization", text, opset=18, target="ort")
    assert not r.modified and near(r, "do not provably fit SkipSimplifiedLayerNormalization")


def test_one_over_other_than_one_refuses():
    m, r, _ = fuse("fuse_rms_normalization", rms(consts=CONSTS.replace("one = {1.0}", "one = {2.0}")), opset=23)
    assert not r.modified and near(r, "'one' is 2.0, needs 1")


def test_axes_not_trailing_refuse():
    m, r, _ = fuse("fuse_rms_normalization", rms(consts=CONSTS.replace("{-1}", "{1}")), opset=23)
    assert not r.modified and near(r, "axes [-2] are not the trailing ones")


def test_eps_from_a_graph_input_does_not_match():
    text = rms(consts=CONSTS.replace("float eps = {1e-6}, ", "")).replace("(float[2,5,8] x)", "(float[2,5,8] x, float eps)")
    m, r, _ = fuse("fuse_rms_normalization", text, opset=23)
    assert not r.modified and near(r, "'eps': 'eps' is not a constant")


def test_mean_square_read_elsewhere_does_not_fuse():
    m, r, _ = fuse("fuse_rms_normalization", rms(TS + "  z = Neg(ms)", outs="float[2,5,8] y, float[2,5,1] z"), opset=23)
    assert not r.modified and near(r, "its output 'ms' is also read by 'Neg->z'")


def test_graph_output_keeps_its_name():
    m, r, original = fuse("fuse_rms_normalization", rms(TS + "  z = Neg(y)", outs="float[2,5,8] y, float[2,5,8] z"), opset=23)
    assert structure(m) == [("RMSNormalization", ["x", "w"], ["y"]), ("Neg", ["y"], ["z"])]
    assert_same_outputs(original, m, **TOL)


def _block():
    import torch

    class RMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.rand(16) + 0.5)

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w

    class Block(torch.nn.Module):
        """Pre-norm residual: h = x + f(norm(x)); out = h + norm(h)."""

        def __init__(self):
            super().__init__()
            self.n1, self.n2, self.f = RMSNorm(), RMSNorm(), torch.nn.Linear(16, 16)

        def forward(self, x):
            h = x + self.f(self.n1(x))
            return h + self.n2(h)

    return Block()


@pytest.mark.parametrize("opset, target, want", [
    (23, "onnx", {"RMSNormalization": 2}),
    (17, "ort", {"SkipSimplifiedLayerNormalization": 1, "ReduceMean": 1}),
])
def test_torch_pre_norm_block(opset, target, want):
    import torch

    m, report = optimized(export(_block(), (torch.randn(2, 5, 16),), opset), target)
    assert {op: ops(m).count(op) for op in want} == want and report["check"]["first_mismatch"] is None
