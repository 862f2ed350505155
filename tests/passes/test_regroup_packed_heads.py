"""regroup_packed_heads: a projection interleaved head by head, split into
parts whose heads are merged back -> its columns in part order and one
Split. Numbers: onnxruntime, original against rewritten (bit for bit)."""

import numpy as np
import pytest
from onnx import helper, numpy_helper

from fusion_helpers import fused_by, near_misses, rng_weights, run_rule, with_weights
from helpers import ops, structure

RULE = "regroup_packed_heads"


def levit(projection: str = "p = Gemm(x, w, c)", heads: str = "1, 6, 2, 8", sizes: str = "2, 2, 4",
          merges: str = "a3 = Reshape(a, wa)  b3 = Reshape(b, wb)  v3 = Reshape(v, wv)", w=(5, 16), c=(16,),
          outputs: str = "float[1,6,4] a3, float[1,6,4] b3, float[1,6,8] v3", opset: int = 17):
    """LeViT's packed q, k, v: rows [6, 5] projected to 2 heads of 2 + 2 + 4."""
    text = f"""g (float[6,5] x) => ({outputs}) <int64[4] heads = {{{heads}}}, int64[3] sizes = {{{sizes}}},
            int64[3] wa = {{0, 0, 4}}, int64[3] wb = {{0, 0, 4}}, int64[3] wv = {{0, 0, 8}}> {{
        {projection}
        h = Reshape(p, heads)
        a, b, v = Split <axis = -1> (h, sizes)
        {merges}
    }}"""
    return with_weights(text, opset, **rng_weights(w=w, c=c))


def test_levit_parts_become_one_split_of_the_regrouped_projection():
    proto = levit()
    m, r = fused_by(RULE, proto)
    assert ops(m) == ["Gemm", "Reshape", "Split"]
    assert [v.name for v in m.graph.outputs] == ["a3", "b3", "v3"]
    w = [t for t in m.graph.initializers if t.name == "w_by_part"][0].numpy()
    w0 = numpy_helper.to_array([t for t in proto.graph.initializer if t.name == "w"][0])
    # head 0's q, head 1's q, head 0's k, head 1's k, head 0's v, head 1's v
    order = [0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15]
    np.testing.assert_array_equal(w, w0[:, order])


@pytest.mark.parametrize("projection, w, c", [
    ("p = Gemm <transB = 1, alpha = 0.5> (x, w, c)", (16, 5), (16,)),
    ("p = Gemm(x, w)", (5, 16), (16,)),
    ("m = MatMul(x, w)  p = Add(c, m)", (5, 16), (16,)),
    ("p = MatMul(x, w)", (5, 16), (16,)),
])
def test_projections(projection, w, c):
    proto = levit(projection, w=w, c=c)
    m, _ = fused_by(RULE, proto)
    assert ops(m)[-2:] == ["Reshape", "Split"] and ops(m).count("Reshape") == 1


def test_a_minus_one_for_the_head_size_and_split_before_opset_13():
    fused_by(RULE, levit(heads="1, 6, 2, -1"))
    proto = levit(opset=11)
    split = [n for n in proto.graph.node if n.op_type == "Split"][0]
    del split.input[1:]
    split.attribute.append(helper.make_attribute("split", [2, 2, 4]))
    m, _ = fused_by(RULE, proto)
    assert [n.attributes.get("split") for n in m.graph.nodes if n.op_type == "Split"] == [[4, 4, 8]]


def test_a_part_read_otherwise_refuses():
    proto = levit(merges="a3 = Reshape(a, wa)  b3 = Reshape(b, wb)  v3 = Relu(v)",
                  outputs="float[1,6,4] a3, float[1,6,4] b3, float[1,6,2,4] v3")
    m, r = run_rule(RULE, proto)
    assert not r.modified and near_misses(r) == ["the part 'v' is not read by one Reshape alone"]


def test_a_reshape_that_is_no_merge_refuses():
    proto = levit(merges="a3 = Reshape(a, wa)  b3 = Reshape(b, wb)  v3 = Reshape(v, flat)",
                  outputs="float[1,6,4] a3, float[1,6,4] b3, float[6,8] v3")
    proto.graph.initializer.append(numpy_helper.from_array(np.array([6, 8]), "flat"))
    m, r = run_rule(RULE, proto)
    assert not r.modified and "not its heads merged" in near_misses(r)[0]


def test_a_shared_weight_refuses():
    proto = levit(outputs="float[1,6,4] a3, float[1,6,4] b3, float[1,6,8] v3, float[6,16] q",
                  merges="a3 = Reshape(a, wa)  b3 = Reshape(b, wb)  v3 = Reshape(v, wv)  q = MatMul(x, w)")
    m, r = run_rule(RULE, proto)
    assert not r.modified and near_misses(r) == ["the constant 'w' has other readers (it would be copied)"]


def test_a_split_that_is_not_along_the_heads_refuses():
    proto = levit(heads="1, 6, 8, 2", outputs="float[1,6,2,2] a, float[1,6,2,2] b, float[1,6,4,2] v", merges="")
    for n in proto.graph.node:
        if n.op_type == "Split":
            n.attribute[0].i = 2
    m, r = run_rule(RULE, proto)
    assert not r.modified and near_misses(r) == ["the Split is along axis 2, not the head's last"]


def test_levit_attention_through_the_pipeline():
    """The parts go into an opset-23 Attention in 3-d (values wider than keys)."""
    import pyonnxopt

    text = """g (float[6,5] x) => (float[1,6,8] y) <int64[4] heads = {1, 6, 2, 8}, int64[3] sizes = {2, 2, 4}> {
        p = Gemm(x, w, c)
        h = Reshape(p, heads)
        q, k, v = Split <axis = -1> (h, sizes)
        qt = Transpose <perm = [0, 2, 1, 3]> (q)
        kt = Transpose <perm = [0, 2, 3, 1]> (k)
        vt = Transpose <perm = [0, 2, 1, 3]> (v)
        s = MatMul(qt, kt)
        sc = Mul(s, scale)
        pr = Softmax <axis = -1> (sc)
        o = MatMul(pr, vt)
        ot = Transpose <perm = [0, 2, 1, 3]> (o)
        y = Reshape(ot, merged)
    }"""
    proto = with_weights(text, 17, scale=np.array(0.7, np.float32), merged=np.array([1, 6, 8]),
                         **rng_weights(w=(5, 16), c=(16,)))
    m, report = pyonnxopt.optimize(proto, opset=23)
    assert report["check"]["first_mismatch"] is None
    assert structure(m)[0][0] == "Gemm" and ops(m)[1:] == ["Reshape", "Split", "Attention"]
