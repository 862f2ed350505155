"""fuse_gelu: erf and tanh GELU spellings -> Gelu (opset 20) or com.microsoft
Gelu/FastGelu (--target ort). Numbers: Gelu's kernel against the decomposed
ops differs in the last bits, rtol 1e-5, atol 1e-6."""

import math

import numpy as np
import pytest

from transformer_helpers import as_dtype, assert_same_outputs, export, fuse, near, optimized
from helpers import ops, parse, structure

TOL = dict(rtol=1e-5, atol=1e-6)

ERF_BODY = {
    # torch.onnx (TorchScript): x / sqrt(2), (x * (1 + erf)) * 0.5
    "ts": """d = Div(x, s2)  e = Erf(d)  a = Add(e, one)  p = Mul(x, a)  y = Mul(p, half)""",
    # x * 1/sqrt(2), constants first, 0.5 * x first
    "mul_first": """d = Mul(r2, x)  e = Erf(d)  a = Add(one, e)  h = Mul(half, x)  y = Mul(h, a)""",
    # x * (0.5 * (1 + erf))
    "half_core": """d = Div(x, s2)  e = Erf(d)  a = Add(e, one)  h = Mul(a, half)  y = Mul(x, h)""",
    # (x * (1 + erf)) / 2
    "div_two": """d = Div(x, s2)  e = Erf(d)  a = Add(e, one)  p = Mul(a, x)  y = Div(p, two)""",
}
TANH_BODY = {
    # GPT-2: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
    "gpt2": """h = Mul(x, half)  c = Pow(x, three)  t = Mul(c, k)  i = Add(x, t)  u = Mul(i, s)  th = Tanh(u)
               a = Add(th, one)  y = Mul(h, a)""",
    # F.gelu(approximate="tanh") through TorchScript: x * x * x, constants first
    "torch_tanh": """q = Mul(x, x)  c = Mul(x, q)  t = Mul(k, c)  i = Add(x, t)  u = Mul(s, i)  th = Tanh(u)
                     a = Add(one, th)  p = Mul(x, a)  y = Mul(half, p)""",
    # Hugging Face's FastGELUActivation: tanh(x * sqrt(2/pi) * (1 + 0.044715 * x * x))
    "factored": """h = Mul(x, half)  u = Mul(x, s)  c = Mul(x, k)  q = Mul(c, x)  i = Add(q, one)  v = Mul(u, i)
                   th = Tanh(v)  a = Add(th, one)  y = Mul(h, a)""",
    # the same with x * x first and the scale last
    "factored_square_first": """q = Mul(x, x)  c = Mul(q, k)  i = Add(one, c)  u = Mul(x, i)  v = Mul(u, s)
                                th = Tanh(v)  a = Add(th, one)  p = Mul(x, a)  y = Div(p, two)""",
}
CONSTS = ("<float s2 = {1.4142135}, float r2 = {0.70710677}, float one = {1.0}, float half = {0.5}, float two = {2.0}, "
          "float three = {3.0}, float k = {0.044715}, float s = {0.7978846}>")


def model(body: str, shape: str = "[2,5,16]", consts: str = CONSTS) -> str:
    return f"g (float{shape} x) => (float{shape} y) {consts} {{ {body} }}"


@pytest.mark.parametrize("form", sorted(ERF_BODY))
def test_erf_spellings_fuse_to_gelu(form):
    m, r, original = fuse("fuse_gelu", model(ERF_BODY[form]), opset=20)
    assert structure(m) == [("Gelu", ["x"], ["y"])]
    assert m.graph.nodes[0].attributes.get("approximate", "none") in ("none", b"none")
    assert_same_outputs(original, m, **TOL)


@pytest.mark.parametrize("form", sorted(TANH_BODY))
def test_tanh_spellings_fuse_to_gelu_tanh(form):
    m, r, original = fuse("fuse_gelu", model(TANH_BODY[form]), opset=20)
    assert structure(m) == [("Gelu", ["x"], ["y"])]
    assert m.graph.nodes[0].attributes["approximate"] in ("tanh", b"tanh")
    assert_same_outputs(original, m, **TOL)


def test_opset_below_20_refuses_for_onnx():
    m, r, _ = fuse("fuse_gelu", model(ERF_BODY["ts"]), opset=17)
    assert not r.modified and ops(m) == ["Div", "Erf", "Add", "Mul", "Mul"]
    assert "Mul->y: Gelu needs opset 20; the model imports 17" in r.stats["near_misses"]


@pytest.mark.parametrize("form, op", [("ts", "Gelu"), ("gpt2", "FastGelu")])
def test_target_ort_emits_com_microsoft_at_any_opset(form, op):
    body = ERF_BODY.get(form) or TANH_BODY[form]
    m, r, original = fuse("fuse_gelu", model(body), opset=17, target="ort")
    assert structure(m) == [(op, ["x"], ["y"])] and m.graph.nodes[0].domain == "com.microsoft"
    assert m.opset_imports["com.microsoft"] == 1
    assert_same_outputs(original, m, **TOL)  # loads and runs on the CPU provider


def test_a_quantized_gelu_stays_for_target_ort_only():
    # Between a DequantizeLinear and a QuantizeLinear: onnxruntime's int8
    # kernels cannot take a com.microsoft op there; a standard Gelu is fine.
    consts = CONSTS[:-1] + ", float sc = {0.05}, uint8 zp = {128}>"
    text = (f"g (float[2,5,16] xin) => (float[2,5,16] out) {consts} {{ xq = QuantizeLinear(xin, sc, zp) "
            f"x = DequantizeLinear(xq, sc, zp) {ERF_BODY['ts']} yq = QuantizeLinear(y, sc, zp) "
            "out = DequantizeLinear(yq, sc, zp) }")
    m, r, _ = fuse("fuse_gelu", text, opset=20, target="ort")
    assert not r.modified and any("reads a DequantizeLinear: onnxruntime runs this quantized (QDQ) group" in n
                                  for n in r.stats["near_misses"])
    m, r, _ = fuse("fuse_gelu", text, opset=20)
    assert r.modified and "Gelu" in ops(m)


def test_wrong_constant_refuses_with_its_value():
    consts = CONSTS.replace("s2 = {1.4142135}", "s2 = {1.5}")
    m, r, _ = fuse("fuse_gelu", model(ERF_BODY["ts"], consts=consts))
    assert not r.modified and "Mul->y: 's2' is 1.5, needs 1.414214" in r.stats["near_misses"]


def test_constant_tolerance_follows_the_dtype():
    # 0.7071 is 1/sqrt(2) in float16, not in float32.
    body = ERF_BODY["mul_first"]
    f16 = as_dtype(parse(model(body, consts=CONSTS.replace("0.70710677", "0.7071")), 20), np.float16)
    m, r, original = fuse("fuse_gelu", f16)
    assert ops(m) == ["Gelu"]
    assert_same_outputs(original, m, rtol=1e-3, atol=1e-3)
    m, r, _ = fuse("fuse_gelu", model(body, consts=CONSTS.replace("0.70710677", "0.7071")))
    assert not r.modified and near(r, "'r2' is 0.707099974155426, needs 0.7071068")


def test_intermediate_read_elsewhere_does_not_fuse():
    text = f"""g (float[2,5,16] x) => (float[2,5,16] y, float[2,5,16] e2) {CONSTS} {{
        d = Div(x, s2)  e = Erf(d)  a = Add(e, one)  p = Mul(x, a)  y = Mul(p, half)  e2 = Neg(e)
    }}"""
    m, r, _ = fuse("fuse_gelu", text)
    assert not r.modified and near(r, "its output 'e' is also read by 'Neg->e2'")


def test_graph_output_keeps_its_name_and_other_readers_still_read_it():
    text = f"""g (float[2,5,16] x) => (float[2,5,16] y, float[2,5,16] z) {CONSTS} {{
        d = Div(x, s2)  e = Erf(d)  a = Add(e, one)  p = Mul(x, a)  y = Mul(p, half)  z = Neg(y)
    }}"""
    m, r, original = fuse("fuse_gelu", text)
    assert structure(m) == [("Gelu", ["x"], ["y"]), ("Neg", ["y"], ["z"])]
    assert_same_outputs(original, m, **TOL)


def test_constant_that_would_broadcast_x_refuses():
    text = """g (float[16] x) => (float[1,16] y) <float s2 = {1.4142135}, float one = {1.0}, float[1,1] half = {0.5}> {
        d = Div(x, s2)  e = Erf(d)  a = Add(e, one)  p = Mul(x, a)  y = Mul(p, half)
    }"""
    m, r, _ = fuse("fuse_gelu", text)
    assert not r.modified and near(r, "'half' has rank 2 and x's rank is 1: it may broadcast x")


def test_double_refuses_where_onnxruntime_has_no_kernel():
    m, r, _ = fuse("fuse_gelu", as_dtype(parse(model(ERF_BODY["ts"]), 20), np.float64))
    assert not r.modified and near(r, "Gelu on double: onnxruntime's CPU provider has no kernel")


def test_inside_an_if_branch():
    text = f"""g (float[4] x, bool c) => (float[4] y) {CONSTS} {{
        y = If(c) <then_branch = t () => (float[4] ty) {{
                      d = Div(x, s2)  e = Erf(d)  a = Add(e, one)  p = Mul(x, a)  ty = Mul(p, half) }},
                   else_branch = f () => (float[4] fy) {{ fy = Neg(x) }}>
    }}"""
    m, r, original = fuse("fuse_gelu", text)
    then = m.graph.nodes[0].subgraphs[0]
    assert [n.op_type for n in then.nodes] == ["Gelu"] and then.nodes[0].outputs[0].name == "ty"
    assert_same_outputs(original, m, **TOL)


def test_second_run_changes_nothing():
    m, r, _ = fuse("fuse_gelu", model(TANH_BODY["gpt2"]))
    from pyonnxopt.passes import get

    assert r.modified and not get("fuse_gelu").run(m).modified


class _GeluTanh:
    """GPT-2's hand-written GELU."""

    @staticmethod
    def module():
        import torch

        class M(torch.nn.Module):
            def forward(self, x):
                return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

        return M()


class _FastGeluFactored:
    """Hugging Face's FastGELUActivation."""

    @staticmethod
    def module():
        import torch

        class M(torch.nn.Module):
            def forward(self, x):
                return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))

        return M()


@pytest.mark.parametrize("opset, dynamo, target, op", [
    (20, False, "onnx", "Gelu"), (17, False, "ort", "FastGelu"),
    pytest.param(18, True, "ort", "FastGelu", marks=pytest.mark.slow),
    pytest.param(20, True, "onnx", "Gelu", marks=pytest.mark.slow)])
def test_torch_exports(opset, dynamo, target, op):
    import torch

    for module in (_GeluTanh.module(), _FastGeluFactored.module()):
        proto = export(module, (torch.randn(2, 5, 16),), opset, dynamo=dynamo)
        m, report = optimized(proto, target)
        assert ops(m) == [op] and report["check"]["first_mismatch"] is None


def test_torch_erf_at_opset_17_for_ort():
    import torch

    proto = export(torch.nn.GELU(), (torch.randn(2, 5, 16),), 17)
    m, report = optimized(proto, "ort")
    assert ops(m) == ["Gelu"] and m.graph.nodes[0].domain == "com.microsoft"
