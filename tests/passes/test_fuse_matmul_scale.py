"""fuse_matmul_scale: a constant scale of a MatMul/Gemm product, also
after Reshapes and Transposes, goes into the weight (bias; Gemm: alpha and
beta). Numbers: onnxruntime, original against fused, rtol = atol = 1e-5 in
float32."""

import numpy as np
import pytest

from fusion_helpers import assert_same_outputs, fused_by, near_misses, rng_weights, run_rule, with_weights
from helpers import ops

RULE = "fuse_matmul_scale"

HEADS = """g (float[2,5,8] x) => (float[2,2,5,4] y) {
    p = MatMul(x, w)
    h = Reshape(p, shape)
    t = Transpose <perm = [0, 2, 1, 3]> (h)
    y = SCALE
}"""


def heads(scale: str, dtype=np.float32):
    text = HEADS.replace("SCALE", scale).replace("float", {np.float32: "float", np.float16: "float16"}[dtype])
    return with_weights(text,
                        **rng_weights(w=(8, 8), dtype=dtype), k=np.array(0.3535534, dtype),
                        shape=np.array([2, 5, 2, 4], np.int64))


@pytest.mark.parametrize("scale", ["Mul(t, k)", "Mul(k, t)", "Div(t, k)"])
def test_a_scale_after_the_head_split_goes_into_the_weight(scale):
    proto = heads(scale)
    m, _ = fused_by(RULE, proto)
    assert ops(m) == ["MatMul", "Reshape", "Transpose"]
    matmul = m.graph.nodes[0]
    assert matmul.inputs[0].name == "x" and matmul.inputs[1].name != "w"
    assert [v.name for v in m.graph.outputs] == ["y"]


def test_the_bias_is_scaled_with_the_weight():
    proto = with_weights("""g (float[2,5,8] x) => (float[2,8,5] y) {
        p = MatMul(x, w)
        q = Add(b, p)
        t = Transpose <perm = [0, 2, 1]> (q)
        y = Mul(t, k)
    }""", **rng_weights(w=(8, 8), b=(8,), k=()))
    m, _ = fused_by(RULE, proto)
    assert ops(m) == ["MatMul", "Add", "Transpose"]
    assert {v.name for n in m.graph.nodes for v in n.inputs} >= {"x"}
    assert not {"w", "b", "k"} & {v.name for n in m.graph.nodes for v in n.inputs}


KERAS_HEADS = """g (float[2,5,8] x) => (float[2,2,5,4] y) {
    p = MatMul(x, w)
    h = Reshape(p, shape)
    q = Add(h, b)
    t = Transpose <perm = [0, 2, 1, 3]> (q)
    y = Mul(t, k)
}"""


def test_a_bias_added_after_the_head_split_is_scaled_with_the_weight():
    """Keras's EinsumDense through tf2onnx adds its [H, d] bias after the
    Reshape into heads."""
    proto = with_weights(KERAS_HEADS, **rng_weights(w=(8, 8), b=(2, 4)), k=np.array(0.25, np.float32),
                         shape=np.array([2, 5, 2, 4], np.int64))
    m, _ = fused_by(RULE, proto)
    assert ops(m) == ["MatMul", "Reshape", "Add", "Transpose"]
    assert not {"w", "b", "k"} & {v.name for n in m.graph.nodes for v in n.inputs}


def test_a_scale_per_column_with_a_bias_after_the_head_split_is_refused():
    proto = with_weights(KERAS_HEADS,
                         **rng_weights(w=(8, 8), b=(2, 4), k=(1, 1, 1, 4)), shape=np.array([2, 5, 2, 4], np.int64))
    m, r = run_rule(RULE, proto)
    assert not r.modified and any("not one number after the Reshape" in x for x in near_misses(r)), near_misses(r)


def test_a_gemm_takes_the_scale_in_alpha_and_beta():
    proto = with_weights("""g (float[6,8] a, float[8,4] bm) => (float[2,3,4] y) {
        p = Gemm <alpha = 2.0, beta = 0.5> (a, bm, c)
        r = Reshape(p, shape)
        y = Div(r, k)
    }""", **rng_weights(c=(4,)), k=np.array(4.0, np.float32), shape=np.array([2, 3, 4], np.int64))
    m, _ = fused_by(RULE, proto)
    gemm = m.graph.nodes[0]
    assert ops(m) == ["Gemm", "Reshape"] and gemm.inputs[1].name == "bm" and gemm.inputs[2].name == "c"
    assert gemm.attributes["alpha"] == pytest.approx(0.5) and gemm.attributes["beta"] == pytest.approx(0.125)


def test_one_scale_per_column_straight_after_the_matmul():
    proto = with_weights("""g (float[2,5,8] x) => (float[2,5,6] y) {
        p = MatMul(x, w)
        y = Mul(p, k)
    }""", **rng_weights(w=(8, 6), k=(1, 1, 6)))
    m, _ = fused_by(RULE, proto)
    assert ops(m) == ["MatMul"]


def test_one_scale_per_column_after_a_transpose_is_refused():
    proto = with_weights("""g (float[2,5,8] x) => (float[2,8,5] y) {
        p = MatMul(x, w)
        t = Transpose <perm = [0, 2, 1]> (p)
        y = Mul(t, k)
    }""", **rng_weights(w=(8, 8), k=(5,)))
    m, r = run_rule(RULE, proto)
    assert not r.modified
    assert near_misses(r) == ["the constant's shape [5] is not one number (or one per output column) "
                              "after a Reshape or Transpose"]


def test_a_product_read_elsewhere_is_left_alone():
    proto = with_weights("""g (float[2,5,8] x) => (float[2,8,5] y, float[2,5,8] p) {
        p = MatMul(x, w)
        t = Transpose <perm = [0, 2, 1]> (p)
        y = Mul(t, k)
    }""", **rng_weights(w=(8, 8), k=()))
    m, r = run_rule(RULE, proto)
    assert not r.modified and ops(m) == ["MatMul", "Transpose", "Mul"]


@pytest.mark.parametrize("op, value, why", [
    ("Div", 0.0, "'k' has a 0: the Div is not a scale"),
    ("Mul", np.inf, "'k' is not finite"),
])
def test_a_constant_that_is_no_scale_is_refused(op, value, why):
    proto = with_weights(f"""g (float[2,5,8] x) => (float[2,5,8] y) {{
        p = MatMul(x, w)
        y = {op}(p, k)
    }}""", **rng_weights(w=(8, 8)), k=np.array(value, np.float32))
    m, r = run_rule(RULE, proto)
    assert not r.modified and near_misses(r) == [why]


def test_a_constant_with_more_axes_than_the_value_is_refused():
    proto = with_weights("""g (float[5,8] x) => (float[1,5,8] y) {
        p = MatMul(x, w)
        y = Mul(p, k)
    }""", **rng_weights(w=(8, 8), k=(1, 1, 1)))
    m, r = run_rule(RULE, proto)
    assert not r.modified and "has more axes than the scaled value's (2)" in near_misses(r)[0]


def test_a_float16_weight_that_would_overflow_is_left_alone():
    weights = rng_weights(w=(8, 8), dtype=np.float16)
    weights["w"][0, 0] = 60000
    proto = with_weights("""g (float16[2,8] x) => (float16[2,8] y) {
        p = MatMul(x, w)
        y = Mul(p, k)
    }""", **weights, k=np.array(4, np.float16))
    m, r = run_rule(RULE, proto)
    assert not r.modified and near_misses(r) == ["'w': scaling overflows its element type"]


def test_float16_numbers():
    proto = heads("Mul(t, k)", np.float16)
    m, r = run_rule(RULE, proto)
    assert r.modified
    assert_same_outputs(proto, m, rtol=2e-3, atol=2e-3)


PACKED = """g (float[6,8] x) => (float[2,2,3,4] y, float[2,3,8] kk, float[2,3,8] vv) {
    p = Gemm <transB = TRANSB> (x, w, c)
    r = Reshape(p, rows)
    q, kk, vv = Split <axis = AXIS> (r, sizes)
    h = Reshape(q, heads)
    t = Transpose <perm = [0, 2, 1, 3]> (h)
    y = Mul(t, k)
}"""


def packed(transb=0, axis=2, rows=(2, 3, 24), sizes=(8, 8, 8)):
    text = PACKED.replace("TRANSB", str(transb)).replace("AXIS", str(axis))
    return with_weights(text, **rng_weights(w=(24, 8) if transb else (8, 24), c=(24,)), k=np.array(0.5, np.float32),
                        rows=np.array(rows, np.int64), sizes=np.array(sizes, np.int64),
                        heads=np.array([2, 3, 2, 4], np.int64))


@pytest.mark.parametrize("transb", [0, 1])
def test_a_part_of_a_packed_projection_scales_its_columns_only(transb):
    # GPT-2's c_attn: q, k and v side by side, cut by a Split; only q is scaled
    m, _ = fused_by(RULE, packed(transb))
    assert ops(m) == ["Gemm", "Reshape", "Split", "Reshape", "Transpose"]
    gemm = m.graph.nodes[0]
    assert gemm.inputs[1].name != "w" and gemm.inputs[2].name != "c" and gemm.attributes.get("transB", 0) == transb


def test_the_key_part_of_a_matmul_and_bias_split_in_equal_parts():
    proto = with_weights("""g (float[2,3,8] x) => (float[2,3,8] q, float[2,8,3] y, float[2,3,8] v) {
        p = MatMul(x, w)
        a = Add(p, b)
        q, kp, v = Split <axis = -1> (a)
        y = Transpose <perm = [0, 2, 1]> (kp)
        z = Div(y, k)
    }""".replace("float[2,8,3] y", "float[2,8,3] z"), **rng_weights(w=(8, 24), b=(24,)), k=np.array(8.0, np.float32))
    m, _ = fused_by(RULE, proto)
    assert ops(m) == ["MatMul", "Add", "Split", "Transpose"]


@pytest.mark.parametrize("product, other, out", [("MatMul(q, o)", "float[2,8,5] o", "float[2,3,5] y"),
                                                 ("MatMul(o, q)", "float[2,4,3] o", "float[2,4,8] y")])
def test_a_scaled_product_of_a_split_part_scales_the_parts_columns(product, other, out):
    # The part goes straight into a MatMul whose product is scaled: the
    # check once looked for the part among the scale's inputs (a crash).
    proto = with_weights(f"""g (float[2,3,8] x, {other}) => ({out}, float[2,3,8] kk, float[2,3,8] vv) {{
        p = MatMul(x, w)
        q, kk, vv = Split <axis = 2> (p)
        s = {product}
        y = Mul(s, k)
    }}""", **rng_weights(w=(8, 24)), k=np.array(0.5, np.float32))
    m, _ = fused_by(RULE, proto)
    assert ops(m) == ["MatMul", "Split", "MatMul"]


def test_a_split_along_another_axis_is_refused():
    m, r = run_rule(RULE, packed(axis=1, sizes=(1, 1, 1)), valid=False)
    assert not r.modified and near_misses(r) == ["the Split is along axis 1, not the product's columns"]


def test_a_split_of_regrouped_columns_is_refused():
    # [6, 24] -> [2, 3, 2, 12]: the Split cuts each half of the columns, not q, k and v
    proto = with_weights("""g (float[6,8] x) => (float[2,3,2,4] y, float[2,3,2,4] kk, float[2,3,2,4] vv) {
        p = Gemm(x, w, c)
        r = Reshape(p, rows)
        q, kk, vv = Split <axis = 3> (r, sizes)
        y = Mul(q, k)
    }""", **rng_weights(w=(8, 24), c=(24,)), k=np.array(0.5, np.float32), rows=np.array([2, 3, 2, 12], np.int64),
        sizes=np.array([4, 4, 4], np.int64))
    m, r = run_rule(RULE, proto)
    assert not r.modified
    assert near_misses(r) == ["the Split's input does not hold the product's columns on its last axis"]


@pytest.mark.parametrize("q_elsewhere", ["output", "reader"])
def test_a_part_read_elsewhere_is_left_alone(q_elsewhere):
    extra = ", float[2,3,8] q" if q_elsewhere == "output" else ", float[2,3,8] q2"
    body = "" if q_elsewhere == "output" else "q2 = Neg(q)"
    proto = with_weights(f"""g (float[2,3,8] x) => (float[2,3,8] y, float[2,3,8] kk, float[2,3,8] vv{extra}) {{
        p = MatMul(x, w)
        q, kk, vv = Split <axis = 2> (p)
        y = Mul(q, k)
        {body}
    }}""", **rng_weights(w=(8, 24)), k=np.array(0.5, np.float32))
    m, r = run_rule(RULE, proto)
    assert not r.modified and near_misses(r) == ["the Split's part has another reader or is a graph output"]


GATHERED = """g (float[6,8] x) => (float[2,3,8] y, float[2,3,8] kk, float[2,3,8] vv) {
    p = MatMul(x, w)
    r = Reshape(p, split)
    q = Gather <axis = 2> (r, iq)
    kk = Gather <axis = 2> (r, ik)
    vv = Gather <axis = 2> (r, iv)
    y = Mul(q, k)
}"""


def gathered(text=GATHERED, split=(2, 3, 3, 8), iq=0, ik=1, iv=2, **more):
    return with_weights(text, **rng_weights(w=(8, 24)), k=np.array(0.125, np.float32),
                        split=np.array(split, np.int64), iq=np.array(iq, np.int64), ik=np.array(ik, np.int64),
                        iv=np.array(iv, np.int64), **more)


def test_a_gathered_part_of_regrouped_columns_scales_its_columns_only():
    # torchvision's nn.MultiheadAttention: [rows, 3E] -> [B, S, 3, E], q, k and v picked by Gather
    m, _ = fused_by(RULE, gathered())
    assert ops(m) == ["MatMul", "Reshape", "Gather", "Gather", "Gather"]


def test_a_gathered_part_after_a_transpose():
    # torchvision's Swin: [B, N, 3E] -> [B, N, 3, h, d] -> Transpose [2, 0, 3, 1, 4] -> q = [0]
    proto = with_weights("""g (float[2,5,12] x) => (float[2,2,5,3] y, float[2,2,5,3] kk, float[2,2,5,3] vv) {
        p = MatMul(x, w)
        r = Reshape(p, split)
        t = Transpose <perm = [2, 0, 3, 1, 4]> (r)
        q = Gather <axis = 0> (t, iq)
        kk = Gather <axis = 0> (t, ik)
        vv = Gather <axis = 0> (t, iv)
        y = Mul(q, k)
    }""", **rng_weights(w=(12, 18)), k=np.array(0.5, np.float32), split=np.array([2, 5, 3, 2, 3], np.int64),
        iq=np.array(0, np.int64), ik=np.array(1, np.int64), iv=np.array(2, np.int64))
    m, _ = fused_by(RULE, proto)
    assert ops(m) == ["MatMul", "Reshape", "Transpose", "Gather", "Gather", "Gather"]


@pytest.mark.parametrize("change, why", [
    (dict(ik=0), "what the Gather reads has a reader that is not a Gather of other entries"),
    (dict(text=GATHERED.replace("kk = Gather <axis = 2> (r, ik)", "kk = Gather <axis = 2> (r, ik)\n    n = Neg(r)")
          .replace("float[2,3,8] vv)", "float[2,3,8] vv, float[2,3,3,8] n)")),
     "what the Gather reads has a reader that is not a Gather of other entries"),
    (dict(text=GATHERED.replace("<axis = 2>", "<axis = 1>").replace("float[2,3,8]", "float[2,3,8]"),
          split=(2, 3, 3, 8)), "the Gather does not pick along the columns' axes"),
])
def test_a_gather_whose_entries_reach_other_readers_is_refused(change, why):
    proto = gathered(**change)
    m, r = run_rule(RULE, proto, valid=False)
    assert not r.modified and near_misses(r) == [why]


@pytest.mark.parametrize("scale", ["Mul(kt, k)", "Div(kt, k)"])
def test_the_keys_scale_moves_into_the_query_projection(scale):
    # GPT-2 with a cache: the keys are scaled after the Concat with the past (a pass over the whole cache)
    proto = with_weights(f"""g (float[2,3,8] x, float[2,2,5,4] past) => (float[2,2,3,8] y) {{
        p = MatMul(x, w)
        h = Reshape(p, heads)
        q = Transpose <perm = [0, 2, 1, 3]> (h)
        pk = MatMul(x, wk)
        hk = Reshape(pk, heads)
        nk = Transpose <perm = [0, 2, 1, 3]> (hk)
        c = Concat <axis = 2> (past, nk)
        kt = Transpose <perm = [0, 1, 3, 2]> (c)
        ks = {scale}
        y = MatMul(q, ks)
    }}""", **rng_weights(w=(8, 8), wk=(8, 8)), k=np.array(0.125, np.float32), heads=np.array([2, 3, 2, 4], np.int64))
    m, _ = fused_by(RULE, proto)
    assert "Mul" not in ops(m) and "Div" not in ops(m)


def test_a_keys_scale_with_a_query_read_elsewhere_stays():
    proto = with_weights("""g (float[2,3,8] x, float[2,8,3] kt) => (float[2,3,3] y, float[2,3,8] p) {
        p = MatMul(x, w)
        ks = Mul(kt, k)
        y = MatMul(p, ks)
    }""", **rng_weights(w=(8, 8)), k=np.array(0.125, np.float32))
    m, r = run_rule(RULE, proto)
    assert not r.modified and ops(m) == ["MatMul", "Mul", "MatMul"]


SCORES = """g (float[2,5,8] x, float[2,2,OTHER] other) => (float[2,2,5,5] y) {
    pq = MatMul(x, wq)
    hq = Reshape(pq, heads)
    q = Transpose <perm = [0, 2, 1, 3]> (hq)
    pk = MatMul(x, wk)
    hk = Reshape(pk, heads)
    kt = Transpose <perm = [0, 2, 3, 1]> (hk)
    s = MatMul(LEFT, RIGHT)
    y = SCALE
}"""


def scores(scale="Div(s, k)", left="q", right="kt", k=np.array(2.0, np.float32), outputs=""):
    text = SCORES.replace("SCALE", scale).replace("LEFT", left).replace("RIGHT", right)
    text = text.replace("OTHER", "5,4" if left == "other" else "4,5")
    text = text.replace("float[2,2,5,5] y)", f"float[2,2,5,5] y{outputs})")
    return with_weights(text, **rng_weights(wq=(8, 8), wk=(8, 8)), k=k, heads=np.array([2, 5, 2, 4], np.int64))


@pytest.mark.parametrize("scale", ["Div(s, k)", "Mul(s, k)", "Mul(k, s)"])
def test_the_scores_scale_goes_into_a_projection(scale):
    # Hand-written attention (and jax2onnx's): softmax(q @ k^T / sqrt(d)), a pass over b * h * s^2 elements.
    m, _ = fused_by(RULE, scores(scale))
    assert ops(m) == ["MatMul", "Reshape", "Transpose", "MatMul", "Reshape", "Transpose", "MatMul"]


@pytest.mark.parametrize("left, right", [("other", "kt"), ("q", "other")])
def test_the_scores_scale_goes_into_either_operand(left, right):
    proto = scores(left=left, right=right)
    m, _ = fused_by(RULE, proto)
    assert "Div" not in ops(m) and len(m.graph.nodes) == len(proto.graph.node) - 1


def test_a_scores_scale_per_column_is_refused():
    m, r = run_rule(RULE, scores("Mul(s, k)", k=np.linspace(0.5, 1.0, 5).astype(np.float32)))
    assert not r.modified and "Mul" in ops(m)
    assert near_misses(r) == ["the constant's shape [5] is not one number: it cannot move to the other operand"]


def test_a_scores_product_read_elsewhere_stays():
    m, r = run_rule(RULE, scores(outputs=", float[2,2,5,5] s"))
    assert not r.modified and "Div" in ops(m)


def test_a_bias_that_broadcasts_along_the_columns_is_scaled_to_them():
    # b [2, 1] is one number per row: times one number per column it becomes
    # [2, 4] (the check of the scaled bias once indexed it with b's shape: a crash).
    proto = with_weights("""g (float[2,3] x) => (float[2,4] y) {
        p = MatMul(x, w)
        q = Add(p, b)
        y = Mul(q, k)
    }""", **rng_weights(w=(3, 4), b=(2, 1)), k=np.array([0.5, 2.0, 3.0, 0.25], np.float32))
    m, _ = fused_by(RULE, proto)
    assert ops(m) == ["MatMul", "Add"]


@pytest.mark.parametrize("product, out", [("MatMul(p, t)", "5,5"), ("MatMul(t, p)", "8,8")])
def test_a_product_of_a_projection_with_itself_keeps_its_scale(product, out):
    # Fuzz seed 95262: s = P @ P^T * 0.5 with P = x @ W + b. The pattern took the MatMul's
    # other operand for a value apart from P, so P's weights took 0.5 and s became 0.25x.
    proto = with_weights(f"""g (float[2,5,8] x) => (float[2,{out}] y) {{
        xw = MatMul(x, w)
        p = Add(xw, b)
        t = Transpose <perm = [0, 2, 1]> (p)
        s = {product}
        y = Mul(s, k)
    }}""", **rng_weights(w=(8, 8), b=(8,)), k=np.array(0.5, np.float32))
    m, r = run_rule(RULE, proto)
    assert not r.modified and ops(m) == ["MatMul", "Add", "Transpose", "MatMul", "Mul"]
