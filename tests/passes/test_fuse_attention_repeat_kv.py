"""fuse_attention_repeat_kv: an opset-23 Attention on keys/values repeated
for grouped-query heads takes them unrepeated; structure, numbers, refusals."""

import pytest

from helpers import ops, structure
from transformer_helpers import assert_same_outputs, fuse, near

TOL = dict(rtol=1e-5, atol=1e-5)


def block(axes="2", v_copies="2, 2, 2, 6, 8", mask=True, batch="2") -> str:
    """q [B, 4, 5, 8]; k, v [B, 2, 6, 8], each head repeated twice."""
    mask_in, mask_arg = (", float[2,1,5,6] mask", ", mask") if mask else ("", "")
    return f"""g (float[{batch},4,5,8] q, float[{batch},2,6,8] k, float[{batch},2,6,8] v{mask_in}) =>
            (float[{batch},4,5,8] y) <int64[1] axes = {{{axes}}}, int64[5] copies = {{2, 2, 2, 6, 8}},
            int64[5] v_copies = {{{v_copies}}}, int64[4] heads = {{2, 4, 6, 8}}> {{
        ku = Unsqueeze(k, axes)  ke = Expand(ku, copies)  kr = Reshape(ke, heads)
        vu = Unsqueeze(v, axes)  ve = Expand(vu, v_copies)  vr = Reshape(ve, heads)
        y = Attention <scale = 0.3> (q, kr, vr{mask_arg})
    }}"""


def run(text):
    return fuse("fuse_attention_repeat_kv", text, opset=23)


def test_keys_and_values_go_in_unrepeated():
    m, r, original = run(block())
    assert structure(m) == [("Attention", ["q", "k", "v", "mask"], ["y"])]
    assert abs(m.graph.nodes[0].attributes["scale"] - 0.3) < 1e-7
    assert_same_outputs(original, m, **TOL)


def test_without_a_mask():
    m, r, original = run(block(mask=False))
    assert ops(m) == ["Attention"]
    assert_same_outputs(original, m, **TOL)


def test_unsqueezed_elsewhere_refuses():
    # [B, 2, 6, 1, 8] copied along axis 3 repeats rows, not heads (the
    # Reshape then mixes them into heads: no longer a grouped-query repeat).
    text = block(axes="3").replace("{2, 2, 2, 6, 8}", "{2, 2, 6, 2, 8}")
    m, r, _ = fuse("fuse_attention_repeat_kv", text, opset=23, full_check=False)
    assert not r.modified and near(r, "unsqueezes axes [3], not 2")


def test_keys_and_values_repeated_differently_refuse():
    # k: 2 heads each twice, v: 1 head four times; both give 4 heads, but the
    # unrepeated k and v would not share their head count.
    text = block(v_copies="2, 1, 4, 6, 8").replace("float[2,2,6,8] v", "float[2,1,6,8] v")
    m, r, original = run(text)
    assert not r.modified and near(r, "k and v are not repeated alike (2 heads x 2, 1 heads x 4)")


@pytest.mark.parametrize("target, opset, op", [("onnx", 23, "Attention"), ("ort", None, "MultiHeadAttention")])
def test_torch_grouped_query_attention(target, opset, op):
    """transformers' repeat_kv, then scaled_dot_product_attention, exported
    by dynamo at opset 18: upgraded, one Attention on the 2 key/value heads,
    no Expand left; with --target ort, MultiHeadAttention on the 4-d heads
    (it needs them repeated)."""
    import torch

    import pyonnxopt
    from transformer_helpers import export

    class Gqa(torch.nn.Module):
        def forward(self, q, k, v):
            b, h, t, d = k.shape
            k, v = (x[:, :, None].expand(b, h, 2, t, d).reshape(b, h * 2, t, d) for x in (k, v))
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    args = (torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8))
    m, report = pyonnxopt.optimize(export(Gqa(), args, 18, dynamo=True), opset=opset, target=target)
    assert ops(m).count(op) == 1 and ("Expand" not in ops(m)) == (target == "onnx")
    assert report["check"]["first_mismatch"] is None


def test_one_length_spelled_two_ways_is_one_length():
    """torch's dynamo exporter names the present keys' length `past + seq`
    and the values' `seq + past`: one sum, spelled two ways."""
    from transformer_helpers import parse

    text = block(mask=False).replace("float[2,2,6,8] k, float[2,2,6,8] v", "float[2,2,T1,8] k, float[2,2,T2,8] v")
    text = text.replace("int64[5] copies = {2, 2, 2, 6, 8}", "int64[5] copies = {2, 2, 2, 1, 8}").replace(
        "int64[4] heads = {2, 4, 6, 8}", "int64[4] heads = {2, 4, -1, 8}").replace("v_copies = {2, 2, 2, 6, 8}",
                                                                                 "v_copies = {2, 2, 2, 1, 8}")
    proto = parse(text, 23)
    for value, spelled in zip(proto.graph.input[1:3], ("past + seq", "seq + past")):
        value.type.tensor_type.shape.dim[2].dim_param = spelled
    m, r, original = run(proto)
    assert ops(m) == ["Attention"]
    assert_same_outputs(original, m, **TOL)


@pytest.mark.parametrize("name, spelled", [("seq + past", "past + seq"), ("past + seq", "past + seq"),
                                           ("s1 + 2*s0", "2*s0 + s1"), ("1 + seq", "seq + 1"),
                                           ("seq + 1 - 1", "seq"), ("seq", "seq"), ("batch-size", "batch-size"),
                                           ("a - a + 2", "a - a + 2"), ("x +", "x +"), ("2*3", "2*3")])
def test_dim_names_spelling_one_sum_read_alike(name, spelled):
    from pyonnxopt.dim_names import spelled_sum

    assert spelled_sum(name) == spelled
