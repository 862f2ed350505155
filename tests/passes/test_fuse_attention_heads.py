"""fuse_attention_heads: an opset-23 Attention on heads split and merged
around it takes the 3-d tensors; structure, numbers, refusals."""

import pytest

from helpers import ops, structure
from pyonnxopt.passes import get
from transformer_helpers import assert_same_outputs, fuse, near

TOL = dict(rtol=1e-5, atol=1e-5)


def block(kv_heads=4, mask="", merge="2, 5, -1", out="float[2,5,32] y", attrs="scale = 0.3", outputs="a",
          q3="float[2,5,32] q3") -> str:
    """Q with 4 heads of 8, K and V with `kv_heads`; `mask` an input type or ''."""
    e = 8 * kv_heads
    mask_in, mask_arg = (f", {mask} mask", ", mask") if mask else ("", "")
    return f"""g ({q3}, float[2,6,{e}] k3, float[2,6,{e}] v3{mask_in}) => ({out}) <
            int64[4] qs = {{2, 0, 4, 8}}, int64[4] ks = {{2, 6, {kv_heads}, 8}},
            int64[{merge.count(",") + 1}] os = {{{merge}}}> {{
        qr = Reshape(q3, qs)  q = Transpose <perm = [0, 2, 1, 3]> (qr)
        kr = Reshape(k3, ks)  k = Transpose <perm = [0, 2, 1, 3]> (kr)
        vr = Reshape(v3, ks)  v = Transpose <perm = [0, 2, 1, 3]> (vr)
        {outputs} = Attention <{attrs}> (q, k, v{mask_arg})
        at = Transpose <perm = [0, 2, 1, 3]> (a)
        y = Reshape(at, os)
    }}"""


def run(text):
    return fuse("fuse_attention_heads", text, opset=23)


def test_heads_go_into_the_attention():
    m, r, original = run(block(mask="float[2,1,5,6]"))
    assert structure(m) == [("Attention", ["q3", "k3", "v3", "mask"], ["y"])]
    a = m.graph.nodes[0].attributes
    assert a["q_num_heads"] == 4 and a["kv_num_heads"] == 4 and abs(a["scale"] - 0.3) < 1e-7
    assert_same_outputs(original, m, **TOL)


def test_grouped_query_heads_and_causal():
    m, r, original = run(block(kv_heads=2, attrs="scale = 0.3, is_causal = 1"))
    assert ops(m) == ["Attention"]
    a = m.graph.nodes[0].attributes
    assert (a["q_num_heads"], a["kv_num_heads"], a["is_causal"]) == (4, 2, 1)
    assert_same_outputs(original, m, **TOL)


def test_a_merge_that_flattens_further_keeps_its_reshape():
    m, r, original = run(block(merge="-1, 32", out="float[10,32] y"))
    assert ops(m) == ["Attention", "Reshape"]
    assert_same_outputs(original, m, **TOL)


def test_present_keys_returned_refuse():
    m, r, _ = run(block(outputs="a, pk, pv", out="float[2,5,32] y, float[2,4,6,8] pk"))
    assert not r.modified and near(r, "its output 'pk' is a graph output")


def test_past_keys_refuse():
    text = block(mask="float[2,1,5,9]").replace("(q, k, v, mask)", "(q, k, v, mask, pk, pv)").replace(
        "float[2,1,5,9] mask", "float[2,1,5,9] mask, float[2,4,3,8] pk, float[2,4,3,8] pv")
    m, r, _ = run(text)
    assert not r.modified and near(r, "has 6 inputs, needs at most")


def test_k_heads_that_are_not_v_heads_refuse():
    v_heads = "vs = Constant <value_ints = [2, 6, 2, 16]> ()\n        vr = Reshape(v3, vs)"
    text = block(out="float[2,5,64] y").replace("vr = Reshape(v3, ks)", v_heads)
    m, r, _ = run(text)
    assert not r.modified and near(r, "do not provably share batch")


CACHE = """g (float[2,5,32] q3, float[2,5,32] k3, float[2,5,32] v3, float[2,4,3,8] past_k, float[2,4,3,8] past_v,
        float[2,1,5,8] mask) => (float[10,32] y, float[2,4,8,8] present_k, float[2,4,8,8] present_v)
        <int64[4] sh = {0, 0, 4, 8}, int64[2] flat = {-1, 32}> {
    qr = Reshape(q3, sh)  q = Transpose <perm = [0, 2, 1, 3]> (qr)
    kr = Reshape(k3, sh)  k = Transpose <perm = [0, 2, 1, 3]> (kr)
    vr = Reshape(v3, sh)  v = Transpose <perm = [0, 2, 1, 3]> (vr)
    present_k = Concat <axis = -2> (past_k, k)  present_v = Concat <axis = -2> (past_v, v)
    a = Attention <scale = 0.3> (q, present_k, present_v, mask)
    at = Transpose <perm = [0, 2, 1, 3]> (a)
    y = Reshape(at, flat)
}"""


def test_a_cache_concatenated_before_the_attention_becomes_its_past():
    """torch's dynamo exporter at opset 23 with a cache: K and V are
    Concat(past, new heads), the present outputs."""
    m, r, original = run(CACHE)
    assert structure(m)[0] == ("Attention", ["q3", "k3", "v3", "mask", "past_k", "past_v"],
                               [structure(m)[1][1][0], "present_k", "present_v"])
    assert ops(m) == ["Attention", "Reshape"] and m.graph.nodes[1].outputs[0].name == "y"
    assert_same_outputs(original, m, **TOL)


def test_a_cache_beside_moved_heads_becomes_the_past_too():
    """LLaMA's TorchScript export with a cache, at --opset 23: the rotary
    embedding sits between the split and the Attention for q, and between
    the split and the cache's Concat for k (here Relu stands for it)."""
    text = CACHE.replace("qr = Reshape(q3, sh)  q = Transpose", "qr = Reshape(q3, sh)  qx = Relu(qr)  q = Transpose")
    text = text.replace("kr = Reshape(k3, sh)  k = Transpose", "kr = Reshape(k3, sh)  kx = Relu(kr)  k = Transpose")
    text = text.replace("<perm = [0, 2, 1, 3]> (qr)", "<perm = [0, 2, 1, 3]> (qx)").replace(
        "<perm = [0, 2, 1, 3]> (kr)", "<perm = [0, 2, 1, 3]> (kx)")
    m, r, original = run(text)
    assert ops(m) == ["Reshape", "Relu", "Reshape", "Relu", "Reshape", "Reshape", "Attention", "Reshape"]
    assert [i.name for i in m.graph.nodes[6].inputs][3:] == ["mask", "past_k", "past_v"]
    assert_same_outputs(original, m, **TOL)


def test_moved_heads_go_in_reshaped_to_3d():
    """LLaMA's rotary embedding between the split and the Attention: the
    split's Transpose, moved below it, goes; q and k go in as Reshape(x,
    [0, 0, H*D]) (here Relu stands for the rotary ops)."""
    text = block().replace("qr = Reshape(q3, qs)  q = Transpose", "qr = Reshape(q3, qs)  qx = Relu(qr)  q = Transpose")
    text = text.replace("<perm = [0, 2, 1, 3]> (qr)", "<perm = [0, 2, 1, 3]> (qx)")
    m, r, original = run(text)
    assert ops(m) == ["Reshape", "Relu", "Reshape", "Attention"]
    assert m.graph.nodes[2].inputs[0].name == "qx" and list(m.graph.nodes[2].inputs[1].initializer.numpy()) == [0, 0, 32]
    assert_same_outputs(original, m, **TOL)


def test_a_moved_v_goes_in_reshaped_too():
    """GPT-NeoX slices q, k and v out of one packed projection after its
    split: each reaches the Attention as a Transpose of something else than
    a Reshape (here Relu)."""
    text = block().replace("vr = Reshape(v3, ks)  v = Transpose", "vr = Reshape(v3, ks)  vx = Relu(vr)  v = Transpose")
    text = text.replace("<perm = [0, 2, 1, 3]> (vr)", "<perm = [0, 2, 1, 3]> (vx)")
    m, r, original = run(text)
    assert ops(m) == ["Reshape", "Relu", "Reshape", "Attention"] and m.graph.nodes[2].inputs[0].name == "vx"
    assert_same_outputs(original, m, **TOL)


def test_a_nan_guard_after_the_attention_goes_on_the_3d_output():
    text = block().replace("at = Transpose <perm = [0, 2, 1, 3]> (a)",
                           "n = IsNaN(a)  g = Where(n, zero, a)  at = Transpose <perm = [0, 2, 1, 3]> (g)")
    text = text.replace("int64[4] qs", "float[1,1,1,1] zero = {0.0}, int64[4] qs")
    m, r, original = run(text)
    assert ops(m) == ["Attention", "IsNaN", "Where"] and m.graph.nodes[2].outputs[0].name == "y"
    assert m.graph.nodes[2].inputs[1].initializer.numpy().shape == ()  # not [1, 1, 1, 1]: y stays 3-d
    assert_same_outputs(original, m, **TOL)


def multi_query(axis=3, unsqueeze_axes="1", extra_reader=""):
    """GPTBigCode's attention: q (4 heads of 8), k and v (one head) split out
    of Unsqueeze(qkv, 1)."""
    outputs = "float[2,5,32] y" + (", float[2,1,5,8] kk" if extra_reader else "")
    return f"""g (float[2,5,48] qkv, float[2,1,5,5] mask) => ({outputs}) <
            int64[3] sizes = {{32, 8, 8}}, int64[1] ax = {{{unsqueeze_axes}}}, int64[4] qs = {{0, -1, 4, 8}},
            int64[3] os = {{0, 0, -1}}> {{
        u = Unsqueeze(qkv, ax)
        q4, k, v = Split <axis = {axis}> (u, sizes)
        qr = Reshape(q4, qs)  q = Transpose <perm = [0, 2, 1, 3]> (qr)
        a = Attention <scale = 0.3> (q, k, v, mask)
        at = Transpose <perm = [0, 2, 1, 3]> (a)
        y = Reshape(at, os)
        {extra_reader}
    }}"""


def test_multi_query_heads_split_out_of_an_unsqueeze_become_one_split():
    m, r, original = run(multi_query())
    get("eliminate_dead_code").run(m)  # the old Split and Unsqueeze, read by nothing now
    assert ops(m) == ["Split", "Attention"]
    assert [i.name for i in m.graph.nodes[0].inputs][:2] == ["qkv", "sizes"]
    a = m.graph.nodes[1].attributes
    assert (a["q_num_heads"], a["kv_num_heads"], a["axis"] if "axis" in a else -1) == (4, 1, -1)
    assert_same_outputs(original, m, **TOL)


def test_a_multi_query_split_read_elsewhere_stays_for_its_reader():
    m, r, original = run(multi_query(extra_reader="kk = Identity(k)"))
    get("eliminate_dead_code").run(m)
    assert ops(m).count("Split") == 2 and "Squeeze" not in ops(m) and "Transpose" not in ops(m)
    assert_same_outputs(original, m, **TOL)


def test_single_head_keys_of_another_split_go_in_squeezed():
    # The Split along axis 2 (the sequence) is not the projection's: squeezed.
    text = multi_query().replace("int64[3] sizes = {32, 8, 8}", "int64[3] sizes = {5, 0, 0}").replace(
        "float[2,5,48] qkv", "float[2,5,32] qkv")
    text = text.replace("q4, k, v = Split <axis = 3> (u, sizes)",
                        "q4, k0, v0 = Split <axis = 2> (u, sizes)  k = Slice(q4, z, e, la)  v = Slice(q4, e, f, la)")
    text = text.replace("int64[3] os", "int64[1] z = {0}, int64[1] e = {8}, int64[1] f = {16}, int64[1] la = {3}, "
                        "int64[3] os")
    m, r, original = run(text)
    assert ops(m).count("Attention") == 1 and ops(m).count("Squeeze") == 3 and "Transpose" not in ops(m)
    assert_same_outputs(original, m, **TOL)


def test_keys_of_more_than_one_head_first_refuse():
    text = multi_query().replace("float[2,1,5,5] mask", "float[2,1,5,5] mask, float[2,2,5,8] k2").replace(
        "a = Attention <scale = 0.3> (q, k, v, mask)", "a = Attention <scale = 0.3> (q, k2, k2, mask)")
    m, r, _ = run(text)
    assert not r.modified and near(r, "the single-head k [2, 2, 5, 8] is not [B, 1, T, D] with D known")


@pytest.mark.parametrize("cache", [False, True])
def test_torch_rotary_heads_leave_no_transpose(cache):
    """A LLaMA-style block (rotate_half rotary embedding, 2 key/value heads
    for 4 query heads) exported at opset 17, optimized with --opset 23:
    optimize_transposes moves each head split's Transpose below the rotary
    ops (with a cache, into the Concat with the past keys), and this rule
    takes all four."""
    import torch

    import pyonnxopt
    from transformer_helpers import export

    class Rotary(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.q, self.k, self.v, self.o = (torch.nn.Linear(32, n, bias=False) for n in (32, 16, 16, 32))

        def forward(self, x, cos, sin, past_k=None, past_v=None):
            b, s, _ = x.shape

            def heads(t, h):
                return t.view(b, s, h, 8).transpose(1, 2)

            def rotate(t):
                half = t.shape[-1] // 2
                return t * cos[:, None] + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * sin[:, None]

            q, k, v = rotate(heads(self.q(x), 4)), rotate(heads(self.k(x), 2)), heads(self.v(x), 2)
            if past_k is not None:
                k, v = torch.cat((past_k, k), dim=2), torch.cat((past_v, v), dim=2)
            present = (k, v)
            t = k.shape[2]
            k, v = (h[:, :, None].expand(b, 2, 2, t, 8).reshape(b, 4, t, 8) for h in (k, v))
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # is_causal would read Shape(q)
            y = self.o(y.transpose(1, 2).reshape(b, s, 32))
            return (y, *present) if past_k is not None else y

    args = (torch.randn(2, 5, 32), torch.randn(1, 5, 4).repeat(1, 1, 2), torch.randn(1, 5, 4).repeat(1, 1, 2))
    names, axes = ["x", "cos", "sin"], {"x": {0: "batch", 1: "seq"}, "cos": {1: "seq"}, "sin": {1: "seq"}}
    if cache:
        args += (torch.randn(2, 2, 3, 8), torch.randn(2, 2, 3, 8))
        names += ["past_k", "past_v"]
        axes.update(past_k={0: "batch", 2: "past"}, past_v={0: "batch", 2: "past"})
    proto = export(Rotary().eval(), args, 17, input_names=names, dynamic_axes=axes)
    m, report = pyonnxopt.optimize(proto, opset=23)
    assert ops(m).count("Attention") == 1 and "Transpose" not in ops(m)
    assert report["check"]["first_mismatch"] is None and report["check"]["samples"] == 2


def test_a_grouped_query_cache_becomes_the_past_too():
    """LLaMA with 2 key/value heads for 4 query heads and a cache (dynamo,
    opset 23, once fuse_attention_repeat_kv took the repeat): the pasts are
    [B, 2, P, D]."""
    text = CACHE.replace("float[2,4,3,8] past_k, float[2,4,3,8] past_v", "float[2,2,3,8] past_k, float[2,2,3,8] past_v")
    text = text.replace("float[2,4,8,8] present_k, float[2,4,8,8] present_v",
                        "float[2,2,8,8] present_k, float[2,2,8,8] present_v")
    text = text.replace("float[2,5,32] k3, float[2,5,32] v3", "float[2,5,16] k3, float[2,5,16] v3")
    text = text.replace("int64[4] sh = {0, 0, 4, 8}", "int64[4] sh = {0, 0, 4, 8}, int64[4] kvs = {0, 0, 2, 8}")
    text = text.replace("Reshape(k3, sh)", "Reshape(k3, kvs)").replace("Reshape(v3, sh)", "Reshape(v3, kvs)")
    m, r, original = run(text)
    assert ops(m) == ["Attention", "Reshape"]
    a = m.graph.nodes[0].attributes
    assert (a["q_num_heads"], a["kv_num_heads"]) == (4, 2)
    assert_same_outputs(original, m, **TOL)


def test_a_cache_of_other_heads_than_the_new_keys_refuses():
    text = CACHE.replace("float[2,4,3,8] past_k", "float[2,2,3,8] past_k")
    m, r, _ = fuse("fuse_attention_heads", text, opset=23, full_check=False)  # onnx's checker refuses it too
    assert not r.modified and near(r, "the past k [2, 2, 3, 8] is not [B, H, P, D]")
