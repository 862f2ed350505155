"""fuse_quick_gelu (--target ort): x * Sigmoid(a * x) -> com.microsoft
QuickGelu. Numbers: onnxruntime's kernel against Sigmoid + Mul, rtol 1e-5,
atol 1e-6 (float32)."""

import pytest

import pyonnxopt
from transformer_helpers import assert_same_outputs, fuse
from helpers import ops

TOL = dict(rtol=1e-5, atol=1e-6)
RULE = "fuse_quick_gelu"


def model(body: str, dtype: str = "float", consts: str = "<float a = {1.702}>") -> str:
    return f"g ({dtype}[2,3,5] x) => ({dtype}[2,3,5] y) {consts} {{ {body} }}"


@pytest.mark.parametrize("body, alpha", [
    ("s = Sigmoid (x)  y = Mul (x, s)", 1.0),
    ("s = Sigmoid (x)  y = Mul (s, x)", 1.0),
    ("t = Mul (x, a)  s = Sigmoid (t)  y = Mul (x, s)", 1.702),
    ("t = Mul (a, x)  s = Sigmoid (t)  y = Mul (s, x)", 1.702),
])
def test_sigmoid_gates_become_quick_gelu(body, alpha):
    m, r, proto = fuse(RULE, model(body), opset=17, target="ort")
    assert ops(m) == ["QuickGelu"] and m.graph.nodes[0].domain == "com.microsoft"
    assert m.graph.nodes[0].attributes["alpha"] == pytest.approx(alpha)
    assert_same_outputs(proto, m, **TOL)


def test_double_fuses_too():
    m, r, proto = fuse(RULE, model("s = Sigmoid (x)  y = Mul (x, s)", "double"), opset=17, target="ort")
    assert ops(m) == ["QuickGelu"]
    assert_same_outputs(proto, m, **TOL)


def test_refusals_and_target_onnx():
    m, r, _ = fuse(RULE, model("t = Mul (x, a)  s = Sigmoid (t)  y = Mul (x, s)", consts="<float[5] a = {1.0, 2.0, 3.0, 4.0, 5.0}>"),
                   opset=17, target="ort")
    assert ops(m) == ["Mul", "Sigmoid", "Mul"] and any("is not one finite number" in n for n in r.stats["near_misses"])
    m, r, _ = fuse(RULE, model("t = Mul (x, a)  s = Sigmoid (t)  y = Mul (x, s)", consts="<float[1,1,1,1] a = {1.0}>")
                   .replace("=> (float[2,3,5] y)", "=> (float[1,2,3,5] y)"), opset=17, target="ort")
    assert not r.modified and any("has rank 4 and x's is 3: it may broadcast x" in n for n in r.stats["near_misses"])
    # A gate of another value, or a sigmoid read elsewhere, is no QuickGelu.
    other = "g (float[2,3,5] x, float[2,3,5] z) => (float[2,3,5] y) { s = Sigmoid (z)  y = Mul (x, s) }"
    assert not fuse(RULE, other, opset=17, target="ort")[1].modified
    shared = "g (float[2,3,5] x) => (float[2,3,5] y, float[2,3,5] s) { s = Sigmoid (x)  y = Mul (x, s) }"
    assert not fuse(RULE, shared, opset=17, target="ort")[1].modified
    assert not fuse(RULE, model("s = Sigmoid (x)  y = Mul (x, s)"), opset=17)[1].modified


def test_efficientnet_block_through_the_ort_pipeline():
    torch = pytest.importorskip("torch")
    from transformer_helpers import export

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.SiLU(), torch.nn.Conv2d(8, 8, 1),
                              torch.nn.ReLU())
    proto = export(net, (torch.randn(1, 3, 8, 8),), 17)
    model_ort, report = pyonnxopt.optimize(proto, target="ort", check_outputs=True)
    assert [n.op_type for n in model_ort.nodes()] == ["Conv", "QuickGelu", "FusedConv"]
    assert report["check"]["first_mismatch"] is None and report["check"]["max_abs_diff"] < 1e-5
    assert [n.op_type for n in pyonnxopt.optimize(proto)[0].nodes()] == ["Conv", "Sigmoid", "Mul", "Conv", "Relu"]
