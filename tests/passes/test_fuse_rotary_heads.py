"""fuse_rotary_heads: a RotaryEmbedding on split heads rotates the 3-d
tensor, and the split moves after it for fuse_attention_heads."""

import numpy as np
import pytest

from helpers import ops, structure
from transformer_helpers import assert_same_outputs, fuse, near

TOL = dict(rtol=1e-5, atol=1e-5)

# torch's dynamo export at opset 23, LLaMA-style: q and k rotated between
# their head split and the Attention (4 query heads, 2 key/value heads of 8).
BLOCK = """g (float[B,S,32] q3, float[B,S,16] k3, float[B,S,16] v3, float[B,S,4] cos, float[B,S,4] sin)
        => (float[B,S,32] y) <int64[4] qs = {0, 0, 4, 8}, int64[4] ks = {0, 0, 2, 8}, int64[3] os = {0, 0, 32}> {
    qr = Reshape(q3, qs)  q = Transpose <perm = [0, 2, 1, 3]> (qr)  qrot = RotaryEmbedding <num_heads = 4> (q, cos, sin)
    kr = Reshape(k3, ks)  k = Transpose <perm = [0, 2, 1, 3]> (kr)  krot = RotaryEmbedding <num_heads = 2> (k, cos, sin)
    vr = Reshape(v3, ks)  v = Transpose <perm = [0, 2, 1, 3]> (vr)
    a = Attention <scale = 0.35> (qrot, krot, v)
    at = Transpose <perm = [0, 2, 1, 3]> (a)
    y = Reshape(at, os)
}"""


def feeds(b=2, s=5):
    rng = np.random.default_rng(3)
    angles = rng.uniform(0, 6, (b, s, 4)).astype(np.float32)
    x = {n: rng.standard_normal((b, s, w), dtype=np.float32) for n, w in (("q3", 32), ("k3", 16), ("v3", 16))}
    return {**x, "cos": np.cos(angles), "sin": np.sin(angles)}


def test_the_rotary_takes_the_3d_tensor_and_the_split_follows():
    m, r, original = fuse("fuse_rotary_heads", BLOCK, opset=23)
    rotaries = [n for n in m.graph.nodes if n.op_type == "RotaryEmbedding"]
    assert [n.inputs[0].name for n in rotaries] == ["q3", "k3"]
    assert [n.attributes["num_heads"] for n in rotaries] == [4, 2]
    assert ops(m).count("Transpose") == 4  # the same count: the gain is the next rule's
    assert_same_outputs(original, m, feeds(), **TOL)


def test_with_fuse_attention_heads_no_split_is_left():
    import pyonnxopt
    from transformer_helpers import parse

    original = parse(BLOCK, 23)
    m, report = pyonnxopt.optimize(original, passes=["infer_shapes", "fuse_rotary_heads", "fuse_attention_heads"])
    assert structure(m)[-1][0] == "Attention" and ops(m) == ["RotaryEmbedding", "RotaryEmbedding", "Attention"]
    assert_same_outputs(original, m, feeds(), **TOL)


def test_position_ids_go_along():
    text = BLOCK.replace("float[B,S,4] cos, float[B,S,4] sin", "float[16,4] cos, float[16,4] sin, int64[B,S] pos")
    text = text.replace("(q, cos, sin)", "(q, cos, sin, pos)").replace("(k, cos, sin)", "(k, cos, sin, pos)")
    m, r, original = fuse("fuse_rotary_heads", text, opset=23)
    rotaries = [n for n in m.graph.nodes if n.op_type == "RotaryEmbedding"]
    assert [[i.name for i in n.inputs] for n in rotaries] == [["q3", "cos", "sin", "pos"], ["k3", "cos", "sin", "pos"]]
    rng = np.random.default_rng(4)
    angles = rng.uniform(0, 6, (16, 4)).astype(np.float32)
    given = {**{k: v for k, v in feeds().items() if k.endswith("3")}, "cos": np.cos(angles), "sin": np.sin(angles),
             "pos": rng.integers(0, 16, (2, 5))}
    assert_same_outputs(original, m, given, **TOL)


@pytest.mark.parametrize("reader", ["Relu", "Identity"])
def test_rotated_heads_read_elsewhere_refuse(reader):
    text = BLOCK.replace("=> (float[B,S,32] y)", "=> (float[B,S,32] y, float[B,4,S,8] extra)").replace(
        "a = Attention", f"extra = {reader}(qrot)  a = Attention")
    m, r, _ = fuse("fuse_rotary_heads", text, opset=23)
    rotaries = [n for n in m.graph.nodes if n.op_type == "RotaryEmbedding"]
    assert [n.inputs[0].name for n in rotaries][0] == "q"  # q's stays; k's moves
    assert near(r, f"the rotated heads are also read by {reader}")


def test_a_split_that_does_more_than_split_the_last_dim_refuses():
    text = BLOCK.replace("int64[4] qs = {0, 0, 4, 8}", "int64[4] qs = {0, -1, 4, 8}").replace(
        "float[B,S,32] q3", "float[B,S,32] q3")
    text = text.replace("qr = Reshape(q3, qs)", "qf = Reshape(q3, flat)  qr = Reshape(qf, qs)").replace(
        "int64[3] os", "int64[2] flat = {-1, 32}, int64[3] os")
    m, r, _ = fuse("fuse_rotary_heads", text, opset=23)
    assert near(r, "head split")


def test_below_opset_23_it_does_not_run():
    m, r, _ = fuse("fuse_rotary_heads", BLOCK.replace("Attention <scale = 0.35>", "Identity"), opset=22,
                   full_check=False)
    assert not r.modified


QWEN3 = BLOCK.replace("qr = Reshape(q3, qs)  q = Transpose <perm = [0, 2, 1, 3]> (qr)",
                      "qr = Reshape(q3, qs)  qn = RMSNormalization(qr, w)  q = Transpose <perm = [0, 2, 1, 3]> (qn)")
QWEN3 = QWEN3.replace("int64[4] qs", "float[8] w = {1.0, 0.5, 2.0, 1.5, 1.0, 0.7, 1.2, 0.9}, int64[4] qs")


def test_heads_normalized_before_their_transpose_go_in_reshaped():
    """Qwen3 normalizes each head between its split and the Transpose: the
    rotary takes Reshape(x, [0, 0, H*D]), and fuse_attention_heads the rest."""
    import pyonnxopt
    from transformer_helpers import parse

    original = parse(QWEN3, 23)
    m, _ = pyonnxopt.optimize(original, passes=["infer_shapes", "fuse_rotary_heads", "fuse_attention_heads"])
    assert "Transpose" not in ops(m) and ops(m).count("Attention") == 1
    assert_same_outputs(original, m, feeds(), **TOL)


def test_normalized_heads_beside_an_attention_on_other_inputs_refuse():
    text = QWEN3.replace("a = Attention <scale = 0.35> (qrot, krot, v)",
                         "vx = Relu(v)  a = Attention <scale = 0.35> (qrot, krot, vx)")
    m, r, _ = fuse("fuse_rotary_heads", text, opset=23)
    assert near(r, "does not read heads for q, k and v alike")
