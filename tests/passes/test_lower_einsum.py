"""lower_einsum: a two-operand Einsum that is a batched matrix product ->
MatMul with Transposes only where an order differs. Numbers: onnxruntime,
Einsum against MatMul, rtol = atol = 1e-5."""

import io
import math

import onnx
import pytest

import pyonnxopt
from transformer_helpers import assert_same_outputs, fuse, near
from helpers import ops, structure

TOL = dict(rtol=1e-5, atol=1e-5)
RULE = "lower_einsum"


def einsum(equation: str, a: str, b: str, y: str) -> str:
    return f"""g (float{a} a, float{b} b) => (float{y} y) {{
        y = Einsum <equation = "{equation}"> (a, b)
    }}"""


@pytest.mark.parametrize("equation, a, b, y, want", [
    # attention's scores and context
    ("bhid,bhjd->bhij", "[2,3,4,5]", "[2,3,6,5]", "[2,3,4,6]", [("Transpose", ["b"], ["b_transposed"]),
                                                                ("MatMul", ["a", "b_transposed"], ["y"])]),
    ("bhij,bhjd->bhid", "[2,3,4,6]", "[2,3,6,5]", "[2,3,4,5]", [("MatMul", ["a", "b"], ["y"])]),
    # a Linear: x @ W, and W written first
    ("bij,jk->bik", "[2,4,5]", "[5,7]", "[2,4,7]", [("MatMul", ["a", "b"], ["y"])]),
    ("jk,bij->bik", "[5,7]", "[2,4,5]", "[2,4,7]", [("MatMul", ["b", "a"], ["y"])]),
    # heads split inside the equation: the product's layout differs from the output's
    ("bihd,bjhd->bhij", "[2,4,3,5]", "[2,6,3,5]", "[2,3,4,6]", None),
    ("bij,bjk->bki", "[2,4,5]", "[2,5,7]", "[2,7,4]", None),
])
def test_matrix_products_become_matmuls(equation, a, b, y, want):
    m, r, original = fuse(RULE, einsum(equation, a, b, y), opset=17)
    assert "Einsum" not in ops(m) and ops(m).count("MatMul") == 1
    if want is not None:
        assert structure(m) == want
    assert_same_outputs(original, m, **TOL)


@pytest.mark.parametrize("equation, a, b, y, why", [
    ("bij,bjk->bk", "[2,4,5]", "[2,5,7]", "[2,7]", "an index of one operand is summed out"),
    ("bijk,bjkl->bil", "[2,4,5,3]", "[2,5,3,7]", "[2,4,7]", "it contracts 2 indices, not one"),
    ("bij,bj->bi", "[2,4,5]", "[2,5]", "[2,4]", "one operand has no index of its own"),
    ("ii,ij->ij", "[4,4]", "[4,5]", "[4,5]", "repeats an index within a term"),
    ("...ij,...jk->...ik", "[2,4,5]", "[2,5,7]", "[2,4,7]", "has an ellipsis or no output term"),
    ("bij,cjk->bcik", "[2,4,5]", "[3,5,7]", "[2,3,4,7]", "both operands have several indices of their own"),
])
def test_what_is_no_matrix_product_stays(equation, a, b, y, why):
    m, r, _ = fuse(RULE, einsum(equation, a, b, y), opset=17)
    assert not r.modified and ops(m) == ["Einsum"] and near(r, why)


def test_an_integer_einsum_stays():
    text = einsum("bij,bjk->bik", "[2,4,5]", "[2,5,7]", "[2,4,7]").replace("float", "int8")
    m, r, _ = fuse(RULE, text, opset=17)
    assert not r.modified and near(r, "MatMul on int8: onnxruntime's CPU provider has no kernel")


def test_a_batch_dim_that_may_broadcast_stays():
    m, r, _ = fuse(RULE, einsum("bij,bjk->bik", "[N,4,5]", "[M,5,7]", "[N,4,7]"), opset=17, full_check=False)
    assert not r.modified and near(r, "batch index 'b' has dims N and M, not known to be equal")


def test_torch_einsum_attention_becomes_attention():
    import torch

    class EinsumAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(32, 96) * 0.1)

        def forward(self, x):
            q, k, v = torch.einsum("bsd,de->bse", x, self.w).view(2, 5, 3, 4, 8).unbind(2)
            s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(8)
            return torch.einsum("bhij,bjhd->bihd", s.softmax(-1), v).reshape(2, 5, 32)

    f = io.BytesIO()
    torch.onnx.export(EinsumAttention(), (torch.randn(2, 5, 32),), f, opset_version=23, dynamo=False)
    proto = onnx.load_from_string(f.getvalue())
    m, report = pyonnxopt.optimize(proto)
    assert "Einsum" not in ops(m) and "Attention" in ops(m) and report["check"]["first_mismatch"] is None
    assert_same_outputs(proto, m, **TOL)
