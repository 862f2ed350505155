"""fuse_hard_swish: x * HardSigmoid(x) and x * relu6(x + 3) / 6 ->
HardSwish (opset 14). Numbers: HardSwish's kernel against the ops it
replaces, rtol 1e-6, atol 1e-6 in float32."""

import pytest

from helpers import ops, structure
from transformer_helpers import assert_same_outputs, export, fuse, near, optimized

TOL = dict(rtol=1e-6, atol=1e-6)
CONSTS = ("<float three = {3.0}, float zero = {0.0}, float six = {6.0}, float sixth = {0.16666667}, "
          "float eight = {8.0}>")
FORMS = {
    # torch and paddle2onnx below opset 14
    "hard_sigmoid": "g = HardSigmoid <alpha = 0.16666667, beta = 0.5> (x)  y = Mul(x, g)",
    # x * relu6(x + 3) / 6
    "relu6_div": "a = Add(x, three)  c = Clip(a, zero, six)  p = Mul(x, c)  y = Div(p, six)",
    # TF's: constants first, times 1/6
    "relu6_mul": "a = Add(three, x)  c = Clip(a, zero, six)  p = Mul(c, x)  y = Mul(sixth, p)",
}


def model(body: str, consts: str = CONSTS) -> str:
    return f"g (float[2,8,5,5] x) => (float[2,8,5,5] y) {consts} {{ {body} }}"


@pytest.mark.parametrize("form", sorted(FORMS))
def test_spellings_fuse(form):
    m, r, original = fuse("fuse_hard_swish", model(FORMS[form]), opset=14)
    assert structure(m) == [("HardSwish", ["x"], ["y"])]
    assert_same_outputs(original, m, **TOL)


def test_below_opset_14_refuses():
    m, r, _ = fuse("fuse_hard_swish", model(FORMS["hard_sigmoid"]), opset=13)
    assert ops(m) == ["HardSigmoid", "Mul"] and near(r, "HardSwish needs opset 14; the model imports 13")


def test_hard_sigmoid_of_other_slope_refuses():
    m, r, _ = fuse("fuse_hard_swish", model("g = HardSigmoid(x)  y = Mul(x, g)"), opset=14)
    assert not r.modified and near(r, "HardSigmoid has alpha 0.2 and beta 0.5, HardSwish's are 1/6 and 0.5")


def test_relu8_refuses_with_its_value():
    m, r, _ = fuse("fuse_hard_swish", model(FORMS["relu6_div"].replace("Clip(a, zero, six)", "Clip(a, zero, eight)")),
                   opset=14)
    assert not r.modified and near(r, "'eight' is 8.0, needs 6")


def test_torch_hardswish_at_opset_13_then_upgraded():
    torch = pytest.importorskip("torch")
    proto = export(torch.nn.Hardswish(), (torch.randn(2, 8, 5, 5),), 13)
    assert [n.op_type for n in proto.graph.node] == ["HardSigmoid", "Mul"]
    import pyonnxopt

    m, report = pyonnxopt.optimize(proto, opset=14)
    assert [n.op_type for n in m.graph.nodes] == ["HardSwish"] and report["check"]["first_mismatch"] is None
    m, report = optimized(proto)
    assert [n.op_type for n in m.graph.nodes] == ["HardSigmoid", "Mul"]
