"""fuse_attention with --target ort below opset 23: the 3-d layout (heads
split and merged around it), and 4-d heads with the query made 3-d ->
com.microsoft MultiHeadAttention, the mask as its 4-d attention_bias. Numbers: onnxruntime (ORT_DISABLE_ALL) against
MatMul/Softmax/MatMul, rtol 1e-5, atol 1e-5."""

import numpy as np
import onnx
import pytest
from helpers import ops, parse, structure
from onnx import numpy_helper
from transformer_helpers import (
    as_dtype,
    assert_same_outputs,
    bert_self_attention,
    export,
    fuse,
    near,
    optimized,
)

from pyonnxopt.check import session
from pyonnxopt.passes import PassOptions, get

TOL = dict(rtol=1e-5, atol=1e-5)

# q3 [2,5,32], k3/v3 [2,6,32]: 4 heads of 8; `scores`, `mask` and `guard`
# lines replace the plain scaled scores, the masked ones and the Softmax.
BLOCK = """g (float[2,5,32] q3, float[2,6,32] k3, float[2,6,32] v3{mask_in}) => ({out}) <
        int64[4] qsh = {{2, 5, -1, 8}}, int64[4] ksh = {{2, 6, -1, 8}}, int64[{merge_rank}] osh = {{{merge}}},
        float c = {{{c}}}, float[1] zero = {{{zero}}}> {{
    qr = Reshape(q3, qsh)  qh = Transpose <perm = [0, 2, 1, 3]> (qr)
    kr = Reshape(k3, ksh)  kt = Transpose <perm = [0, 2, 3, 1]> (kr)
    vr = Reshape(v3, ksh)  vh = Transpose <perm = [0, 2, 1, 3]> (vr)
    qk = MatMul(qh, kt)  s = Mul(qk, c)  {mask}  {softmax}  ctx = MatMul(p, vh)
    ct = Transpose <perm = [0, 2, 1, 3]> (ctx)  y = Reshape(ct, osh)
}}"""


def block(mask_type="", out="float[2,5,32] y", merge="2, 5, -1", c="0.35355339", guard=False, zero="0.0"):
    masked = bool(mask_type)
    softmax = ("sm = Softmax <axis = -1> (a)  n = IsNaN(sm)  p = Where(n, zero, sm)" if guard
               else "p = Softmax <axis = -1> (a)")
    return BLOCK.format(mask_in=f", {mask_type} mask" if masked else "", out=out, merge_rank=merge.count(",") + 1,
                        merge=merge, c=c, zero=zero, softmax=softmax,
                        mask="a = Add(s, mask)" if masked else "a = Identity(s)")


def mha_of(m):
    return next(n for n in m.graph.nodes if n.op_type == "MultiHeadAttention")


def fuse_ort(text_or_proto, opset=17, **options):
    return fuse("fuse_attention", text_or_proto, opset=opset, target="ort", **options)


def test_split_and_merge_become_multi_head_attention():
    m, r, original = fuse_ort(block("float[2,1,5,6]"))
    # bias and key_padding_mask empty, the mask is attention_bias (input 5)
    assert structure(m) == [("MultiHeadAttention", ["q3", "k3", "v3", "", "", "mask"], ["y"])]
    node = mha_of(m)
    assert node.domain == "com.microsoft"
    assert node.attributes["num_heads"] == 4 and abs(node.attributes["scale"] - 0.35355339) < 1e-7
    assert m.opset_imports["com.microsoft"] == 1
    assert_same_outputs(original, m, **TOL)


@pytest.mark.parametrize("mask_type, expand_to", [
    ("float[2,1,5,6]", None), ("float[1,4,5,6]", None), ("float[2,4,5,6]", None), ("float[1,1,5,6]", None),
    ("float[5,6]", [1, 1, 1, 1]), ("float[4,5,6]", [1, 1, 1, 1]),
    ("float[2,1,1,6]", [1, 1, 5, 1]), ("float[1,1,1,6]", [1, 1, 5, 1]), ("float[1,6]", [1, 1, 5, 1]),
])
def test_masks_become_a_4d_attention_bias(mask_type, expand_to):
    m, r, original = fuse_ort(block(mask_type))
    kept = m.graph.nodes
    if expand_to is None:
        assert [n.op_type for n in kept] == ["MultiHeadAttention"] and kept[0].inputs[5].name == "mask"
    else:
        assert [n.op_type for n in kept] == ["Expand", "MultiHeadAttention"]
        assert kept[0].inputs[1].initializer.numpy().tolist() == expand_to
        assert kept[1].inputs[5].name == kept[0].outputs[0].name
    assert_same_outputs(original, m, **TOL)


def _no_identity(text):
    return text.replace("a = Identity(s)  p = Softmax <axis = -1> (a)", "p = Softmax <axis = -1> (s)")


def test_no_mask_no_scale_as_t5():
    text = _no_identity(block()).replace("s = Mul(qk, c)  ", "").replace("Softmax <axis = -1> (s)",
                                                                         "Softmax <axis = -1> (qk)")
    m, r, original = fuse_ort(text)
    assert structure(m) == [("MultiHeadAttention", ["q3", "k3", "v3"], ["y"])]
    assert mha_of(m).attributes["scale"] == 1.0
    assert_same_outputs(original, m, **TOL)


def test_merge_that_flattens_further_keeps_its_reshape():
    m, r, original = fuse_ort(_no_identity(block(out="float[10,32] y", merge="-1, 32")))
    assert ops(m) == ["MultiHeadAttention", "Reshape"] and structure(m)[1][1][1] == "osh"
    assert_same_outputs(original, m, **TOL)


def _with_fully_masked_row(text: str) -> onnx.ModelProto:
    """The block with its [2,1,5,6] mask an initializer: 0, and -inf over
    every key for batch 1's query 2 (torch's Softmax row of NaN)."""
    proto = parse(text.replace(", float[2,1,5,6] mask", ""), 17)
    mask = np.zeros((2, 1, 5, 6), np.float32)
    mask[1, 0, 2, :] = -np.inf
    mask[0, 0, :, 4] = -np.inf
    proto.graph.initializer.append(numpy_helper.from_array(mask, "mask"))
    return proto


@pytest.mark.parametrize("merge, out, tail", [("2, 5, -1", "float[2,5,32] y", []),
                                              ("-1, 32", "float[10,32] y", ["Reshape"])])
def test_nan_guard_goes_after_the_fused_op(merge, out, tail):
    proto = _with_fully_masked_row(block("float[2,1,5,6]", guard=True, merge=merge, out=out))
    m, r, original = fuse_ort(proto)
    assert ops(m) == ["MultiHeadAttention", "IsNaN", "Where"] + tail
    where = m.graph.nodes[2]
    mha, isnan = m.graph.nodes[0].outputs[0].name, m.graph.nodes[1].outputs[0].name
    assert [v.name for v in m.graph.nodes[1].inputs] == [mha]
    assert where.inputs[0].name == isnan and where.inputs[2].name == mha
    assert where.inputs[1].initializer.numpy().shape == () and where.inputs[1].initializer.numpy() == 0
    feeds = {n: np.random.default_rng(0).standard_normal((2, k, 32)).astype(np.float32)
             for n, k in (("q3", 5), ("k3", 6), ("v3", 6))}
    want = session(original.SerializeToString()).run(None, feeds)[0].reshape(2, 5, 32)
    have = session(m.to_bytes()).run(None, feeds)[0].reshape(2, 5, 32)
    assert not np.isnan(have).any() and (want[1, 2] == 0).all()
    np.testing.assert_allclose(have, want, **TOL)


def test_float16():
    m, r, original = fuse_ort(as_dtype(parse(block("float[2,1,5,6]"), 17), np.float16))
    assert "MultiHeadAttention" in ops(m)
    assert_same_outputs(original, m, rtol=1e-2, atol=2e-3)


def test_a_second_run_changes_nothing():
    m, r, _ = fuse_ort(block("float[2,1,5,6]"))
    assert r.modified
    assert not get("fuse_attention").run(m, PassOptions(target="ort")).modified


def test_opset_23_keeps_the_standard_attention_for_ort_too():
    m, r, original = fuse("fuse_attention", block("float[2,1,5,6]"), opset=23, target="ort")
    assert "Attention" in ops(m) and "MultiHeadAttention" not in ops(m)
    assert "com.microsoft" not in m.opset_imports


def test_target_onnx_below_23_refuses():
    m, r, _ = fuse("fuse_attention", block("float[2,1,5,6]"), opset=17, target="onnx")
    assert not r.modified and near(r, "Attention needs opset 23; the model imports 17")


# Refusals, one per documented reason.

FOUR_D = """g (float[2,4,5,8] q, float[2,4,6,8] k, float[2,4,6,8] v{mask_in}) => (float[2,4,5,8] y) <float c = {{0.35}}> {{
    kt = Transpose <perm = [0, 1, 3, 2]> (k)  qk = MatMul(q, kt)  s = Mul(qk, c)  {softmax}  y = MatMul(p, v)
}}"""
MASKED = "a = Add(s, mask)  p = Softmax <axis = -1> (a)"
PLAIN = "p = Softmax <axis = -1> (s)"


@pytest.mark.parametrize("masked", [False, True])
def test_4d_heads_go_to_multi_head_attention_with_the_query_made_3d(masked):
    """LLaMA's rotary embeddings leave q and k 4-d: MultiHeadAttention takes
    keys and values [B, H, T, D] as they are, the query as [B, S, H*D]."""
    text = FOUR_D.format(mask_in=", float[1,1,5,6] mask" if masked else "", softmax=MASKED if masked else PLAIN)
    m, r, original = fuse_ort(text)
    assert ops(m) == ["Transpose", "Reshape", "MultiHeadAttention", "Reshape", "Transpose"]
    mha = mha_of(m)
    assert [v.name if v is not None else "" for v in mha.inputs][1:3] == ["k", "v"]
    assert (len(mha.inputs) == 6 and mha.inputs[5].name == "mask") == masked
    assert mha.outputs[0].type["shape"] == [2, 5, 32]
    assert m.graph.nodes[-1].outputs[0].name == "y"
    assert_same_outputs(original, m, **TOL)


def test_4d_heads_of_unknown_size_refuse():
    text = FOUR_D.format(mask_in="", softmax=PLAIN).replace("float[2,4,5,8] q", "float[2,4,5,D] q").replace(
        "float[2,4,6,8] k", "float[2,4,6,D] k")
    m, r, _ = fuse_ort(text, full_check=False)
    assert not r.modified and near(r, "MultiHeadAttention on 4-d heads needs their count and sizes known")


def test_4d_values_wider_than_keys_go_in_3d():
    """onnxruntime's kernel wants 4-d keys and values of one shape; LeViT's
    values are wider, so q, k and v all go in as [B, S, H*D]."""
    text = FOUR_D.format(mask_in="", softmax=PLAIN).replace("float[2,4,6,8] v", "float[2,4,6,16] v").replace(
        "float[2,4,5,8] y", "float[2,4,5,16] y")
    m, r, original = fuse_ort(text)
    assert ops(m) == ["Transpose", "Reshape"] * 3 + ["MultiHeadAttention", "Reshape", "Transpose"]
    widths = [n.inputs[1].initializer.numpy().tolist() for n in m.graph.nodes[:6] if n.op_type == "Reshape"]
    assert widths == [[0, 0, 32], [0, 0, 32], [0, 0, 64]]
    assert_same_outputs(original, m, **TOL)


def test_4d_one_key_value_head_refuses():
    """MatMul broadcasts Falcon's one key/value head; MultiHeadAttention
    would not."""
    text = FOUR_D.format(mask_in="", softmax=PLAIN).replace("float[2,4,6,8] k", "float[2,1,6,8] k").replace(
        "float[2,4,6,8] v", "float[2,1,6,8] v")
    m, r, _ = fuse_ort(text)
    assert not r.modified and near(r, "MultiHeadAttention takes as many key/value heads as query heads (1, not 4)")


def test_double_refuses():
    m, r, _ = fuse_ort(as_dtype(parse(block("float[2,1,5,6]"), 17), np.float64))
    assert not r.modified and near(r, "com.microsoft.MultiHeadAttention on double: onnxruntime's CPU provider has no "
                                      "kernel")


def test_scale_zero_refuses():
    m, r, _ = fuse_ort(block("float[2,1,5,6]", c="0.0"))
    assert not r.modified and near(r, "the scale is 0, which MultiHeadAttention reads as 1/sqrt(head size)")


def test_nan_guard_that_is_not_zero_refuses():
    m, r, _ = fuse_ort(block("float[2,1,5,6]", guard=True, zero="1.0"))
    assert not r.modified and near(r, "the NaN guard's 'zero' is not a scalar 0")


@pytest.mark.parametrize("opset, count", [(13, ["Shape", "Slice"]), (17, ["Shape"])])
def test_padding_mask_over_symbolic_query_positions_reads_their_count(opset, count):
    text = block("float[2,1,1,6]").replace("float[2,5,32] q3", "float[2,S,32] q3").replace(
        "{2, 5, -1, 8}", "{2, 0, -1, 8}").replace("float[2,5,32] y", "float[2,S,32] y").replace(
        "{2, 5, -1}", "{2, 0, -1}")
    m, r, original = fuse_ort(text, opset=opset)
    assert ops(m) == count + ["Concat", "Expand", "MultiHeadAttention"]
    assert m.graph.nodes[0].inputs[0].name == "q3"
    assert_same_outputs(original, m, **TOL)


def test_mask_with_unknown_heads_refuses():
    m, r, _ = fuse_ort(block("float[N,5,6]"))
    assert not r.modified and near(r, "the mask ['N', 5, 6] does not fit the heads (4)")


def test_mask_to_expand_below_opset_8_refuses():
    m, r, _ = fuse_ort(block("float[5,6]"), opset=7)
    assert not r.modified and near(r, "the mask needs an Expand (to [1, 1, 1, 1]), which needs opset 8")


# torch exports (TorchScript exporter, opset 17)

def test_torch_written_out_block_at_opset_17():
    import torch

    torch.manual_seed(0)
    proto = export(bert_self_attention(), (torch.randn(2, 5, 32), torch.randn(2, 1, 5, 5)), 17)
    m, report = optimized(proto, target="ort")
    assert ops(m).count("MultiHeadAttention") == 1 and "Transpose" not in ops(m) and "Softmax" not in ops(m)
    assert report["check"]["first_mismatch"] is None


def test_torch_sdpa_block_with_a_fully_padded_sequence():
    import torch

    torch.manual_seed(0)
    keep = torch.ones(2, 5, dtype=torch.bool)
    proto = export(bert_self_attention(sdpa=True), (torch.randn(2, 5, 32), keep), 17)
    m, report = optimized(proto, target="ort")
    assert ops(m).count("MultiHeadAttention") == 1 and "Transpose" not in ops(m) and "Softmax" not in ops(m)
    assert report["check"]["first_mismatch"] is None
    keep[1] = False  # every key of batch 1 masked: torch's output there is 0, not NaN
    x, mask = (i.name for i in proto.graph.input)
    feeds = {x: np.random.default_rng(1).standard_normal((2, 5, 32)).astype(np.float32), mask: keep.numpy()}
    want = session(proto.SerializeToString()).run(None, feeds)[0]
    have = session(m.to_bytes()).run(None, feeds)[0]
    assert (want[1] == 0).all()
    np.testing.assert_allclose(have, want, **TOL)


def test_nan_guard_with_the_standard_attention_at_opset_23():
    proto = _with_fully_masked_row(block("float[2,1,5,6]", guard=True))
    proto.opset_import[0].version = 23
    m, r, original = fuse("fuse_attention", proto, opset=23)
    assert ops(m) == ["Attention", "IsNaN", "Where"]
    assert_same_outputs(original, m, **TOL)


def test_sequence_first_heads_become_multi_head_attention():
    from test_fuse_attention import seq_first

    m, r, original = fuse_ort(seq_first(2))
    assert ops(m) == ["Transpose"] * 3 + ["MultiHeadAttention", "Transpose", "Reshape"]
    assert mha_of(m).attributes["num_heads"] == 4
    # onnx's inference does not know the op: its type is stated, for the rules after it
    assert mha_of(m).outputs[0].type["shape"] == [2, 5, 32]
    assert_same_outputs(original, m, **TOL)
