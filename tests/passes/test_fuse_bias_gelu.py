"""fuse_bias_gelu (--target ort): Add(x, bias) -> Gelu => com.microsoft
BiasGelu / FastGelu(x, bias). Numbers: the bias added inside the kernel,
rtol 1e-5, atol 1e-6 (float32)."""

import numpy as np
import onnx
import pytest
from onnx import parser

import pyonnxopt
from transformer_helpers import assert_same_outputs, fuse
from helpers import ops, structure

TOL = dict(rtol=1e-5, atol=1e-6)
RULE = "fuse_bias_gelu"
BIAS = "<float[16] b = {" + ", ".join(f"{v:.3f}" for v in np.linspace(-1, 1, 16)) + "}>"


def model(body: str, opset: int = 20, x: str = "float[2,5,16]", bias: str = BIAS) -> onnx.ModelProto:
    return parser.parse_model(f'<ir_version: 10, opset_import: ["" : {opset}, "com.microsoft" : 1]>'
                              f"g ({x} x) => (float[2,5,16] y) {bias} {{ {body} }}")


def fused(proto, want: str):
    m, r, _ = fuse(RULE, proto, target="ort")
    assert r.modified, r.stats["near_misses"]
    assert structure(m) == [(want, ["x", "b"], ["y"])] and m.graph.nodes[0].domain == "com.microsoft"
    assert_same_outputs(proto, m, **TOL)


@pytest.mark.parametrize("gelu, want", [
    ("Gelu (s)", "BiasGelu"),
    ("Gelu <approximate = \"tanh\"> (s)", "FastGelu"),
    ("com.microsoft.Gelu (s)", "BiasGelu"),
    ("com.microsoft.FastGelu (s)", "FastGelu"),
])
def test_bias_goes_into_the_gelu(gelu, want):
    fused(model(f"s = Add (x, b)  y = {gelu}"), want)
    fused(model(f"s = Add (b, x)  y = {gelu}"), want)


def test_after_fuse_gelu_in_the_ort_pipeline():
    proto = parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[2,5,8] a) => (float[2,5,16] y) <float[8,16] w = {""" + ", ".join(["0.05"] * 128) + "}, " + BIAS[1:-1] + """,
            float s2 = {1.4142135}, float one = {1.0}, float half = {0.5}> {
            m = MatMul (a, w)  x = Add (m, b)
            d = Div (x, s2)  e = Erf (d)  p1 = Add (e, one)  p = Mul (x, p1)  y = Mul (p, half)
        }""")
    model_ort, report = pyonnxopt.optimize(proto, target="ort", check_outputs=True)
    assert [n.op_type for n in model_ort.nodes()] == ["MatMul", "BiasGelu"]
    assert report["check"]["first_mismatch"] is None
    assert "BiasGelu" not in [n.op_type for n in pyonnxopt.optimize(proto)[0].nodes()]


@pytest.mark.parametrize("x, bias, reason", [
    ("float[2,5,16]", "<float[1,16] b = {" + ", ".join(["0.5"] * 16) + "}>", "the bias [1, 16] is not 1-d"),
    ("float[2,5,1]", BIAS, "the bias [16] is not 1-d of x's last dim (x: [2, 5, 1])"),
    ("float[2,5,N]", BIAS, "the bias [16] is not 1-d of x's last dim (x: [2, 5, 'N'])"),
])
def test_bias_not_of_the_last_dim_is_refused(x, bias, reason):
    m, r, _ = fuse(RULE, model("s = Add (x, b)  y = Gelu (s)", x=x, bias=bias), target="ort")
    assert not r.modified and ops(m) == ["Add", "Gelu"]
    assert any(reason in n for n in r.stats["near_misses"]), r.stats["near_misses"]


def test_other_refusals():
    m, r, _ = fuse(RULE, model("s = Add (x, b)  y = com.microsoft.FastGelu (s, b)"), target="ort")
    # A FastGelu that already takes its bias is not a near miss: only the root's type fits.
    assert not r.modified and r.stats["near_misses"] == []
    shared = parser.parse_model('<ir_version: 10, opset_import: ["" : 20]> g (float[2,5,16] x) => '
                                f"(float[2,5,16] y, float[2,5,16] s) {BIAS} {{ s = Add (x, b)  y = Gelu (s) }}")
    assert not fuse(RULE, shared, target="ort")[1].modified
    assert not fuse(RULE, model("s = Add (x, b)  y = Gelu (s)"), target="onnx")[1].modified
    double = parser.parse_model('<ir_version: 10, opset_import: ["" : 20]> g (double[2,5,16] x) => (double[2,5,16] y) '
                                "<double[16] b = {" + ", ".join(["0.5"] * 16) + "}> { s = Add (x, b)  y = Gelu (s) }")
    m, r, _ = fuse(RULE, double, target="ort")
    assert not r.modified and any("BiasGelu on double" in n for n in r.stats["near_misses"])
