"""fuse_attention_heads: an opset-23 Attention on heads split and merged
around it takes the 3-d tensors; structure, numbers, refusals."""

from helpers import ops, structure
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
    assert not r.modified and near(r, "has 6 inputs, needs at most 4")


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
