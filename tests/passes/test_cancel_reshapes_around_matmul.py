"""cancel_reshapes_around_matmul: a MatMul on merged batch axes, split back,
is the MatMul of the unmerged operands; expected graphs, numbers, refusals."""

import numpy as np
import pytest

from fusion_helpers import near_misses
from helpers import ops, outputs
from transformer_helpers import fuse


def graph(a="B,4,5,8", b="B,4,8,6", y="B,4,5,6", a_shape="-1, 5, 8", b_shape="-1, 8, 6", y_shape="-1, 4, 5, 6",
          swap_a=False, swap_b=False) -> str:
    """tf2onnx's lowering of a Keras einsum `bhsd,bhdt->bhst`: both batch
    axes merged, the product split back."""
    am = "ar = Transpose<perm = [0, 2, 1]>(am)" if swap_a else "ar = Identity(am)"
    bm = "br = Transpose<perm = [0, 2, 1]>(bm)" if swap_b else "br = Identity(bm)"
    ranks = len(y_shape.split(","))
    return f"""g (float[{a}] a, float[{b}] b) => (float[{y}] y)
        <int64[3] sa = {{{a_shape}}}, int64[3] sb = {{{b_shape}}}, int64[{ranks}] sy = {{{y_shape}}}> {{
        am = Reshape(a, sa)
        {am}
        bm = Reshape(b, sb)
        {bm}
        p = MatMul(ar, br)
        y = Reshape(p, sy)
    }}"""


def run(text):
    # the Identity stands in for "no Transpose": eliminate it the way the pipeline does first
    m, r, before = fuse("eliminate_identity", text, opset=17)
    proto = m.to_onnx()
    m, r, _ = fuse("cancel_reshapes_around_matmul", proto, opset=17)
    return before, m, r


def feeds(a_shape, b_shape, seed=0):
    rng = np.random.default_rng(seed)
    return {"a": rng.standard_normal(a_shape).astype(np.float32),
            "b": rng.standard_normal(b_shape).astype(np.float32)}


def test_scores_of_merged_heads_become_one_4d_matmul():
    before, m, r = run(graph())
    assert r.modified and ops(m) == ["MatMul"]
    (mm,) = m.graph.nodes
    assert [v.name for v in mm.inputs] == ["a", "b"] and mm.outputs[0].name == "y"
    for batch in (1, 3):
        f = feeds((batch, 4, 5, 8), (batch, 4, 8, 6))
        np.testing.assert_allclose(outputs(before, f)[0], outputs(m, f)[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("swap_a, swap_b", [(False, True), (True, False), (True, True)])
def test_a_swap_of_the_last_two_axes_moves_to_the_operand(swap_a, swap_b):
    a = "B,4,8,5" if swap_a else "B,4,5,8"
    b = "B,4,6,8" if swap_b else "B,4,8,6"
    text = graph(a=a, b=b, a_shape="-1, 8, 5" if swap_a else "-1, 5, 8", b_shape="-1, 6, 8" if swap_b else "-1, 8, 6",
                 swap_a=swap_a, swap_b=swap_b)
    before, m, r = run(text)
    assert r.modified and ops(m).count("Transpose") == swap_a + swap_b and "Reshape" not in ops(m)
    for t in (n for n in m.graph.nodes if n.op_type == "Transpose"):
        assert t.attributes["perm"] == [0, 1, 3, 2]
    f = feeds([2] + [int(d) for d in a.split(",")[1:]], [2] + [int(d) for d in b.split(",")[1:]])
    np.testing.assert_allclose(outputs(before, f)[0], outputs(m, f)[0], rtol=1e-6, atol=1e-6)


def test_a_merged_batch_computed_at_run_time_may_stay_unknown():
    """tf2onnx's merge target, in int32: Concat(ReduceProd(shape[:2]), -1, d).
    The walk works the -1 out (S) but writes no name for the product 4*B."""
    text = """g (float[B,4,S,8] a, float[B,4,8,S] b) => (float[B,4,S,S] y)
              <int32[2] rows = {-1, 8}, int32[2] cols = {8, -1}, int64[2] lead = {0, 1}, int64[1] two = {2},
               int64[1] three = {3}> {
        sha = Shape(a)
        s32 = Cast <to = 6> (sha)
        g32 = Gather(s32, lead)
        n = ReduceProd <keepdims = 1> (g32)
        c32 = Concat <axis = 0> (n, rows)
        sa = Cast <to = 7> (c32)
        am = Reshape(a, sa)
        shb = Shape(b)
        t32 = Cast <to = 6> (shb)
        h32 = Gather(t32, lead)
        nb = ReduceProd <keepdims = 1> (h32)
        d32 = Concat <axis = 0> (nb, cols)
        sb = Cast <to = 7> (d32)
        bm = Reshape(b, sb)
        p = MatMul(am, bm)
        bh = Gather(sha, lead)
        s = Gather(sha, two)
        t = Gather(shb, three)
        back = Concat <axis = 0> (bh, s, t)
        y = Reshape(p, back)
    }"""
    m, r, before = fuse("cancel_reshapes_around_matmul", text, opset=13)
    assert r.modified
    mm = next(n for n in m.graph.nodes if n.op_type == "MatMul")
    assert [v.name for v in mm.inputs] == ["a", "b"] and mm.outputs[0].name == "y"
    for batch, length in ((1, 5), (3, 7)):
        f = feeds((batch, 4, length, 8), (batch, 4, 8, length))
        np.testing.assert_allclose(outputs(before, f)[0], outputs(m, f)[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("opset", [11, 17])
def test_axes_of_size_1_dropped_and_added_are_kept_by_squeeze_and_unsqueeze(opset):
    """tf2onnx with a dynamic length: [B, 4, S, 1, d] merged to [B*4, S, d],
    the product split to [B, 4, S, T, 1]."""
    text = graph(a="B,4,5,1,8", b="B,4,1,8,6", y="B,4,5,6,1", y_shape="-1, 4, 5, 6, 1")
    m, r, before = fuse("eliminate_identity", text, opset=opset)
    m, r, _ = fuse("cancel_reshapes_around_matmul", m.to_onnx(), opset=opset)
    assert r.modified and ops(m) == ["Squeeze", "Squeeze", "MatMul", "Unsqueeze"]
    axes = [list(n.attributes["axes"]) if opset < 13 else n.inputs[1].initializer.numpy().tolist()
            for n in m.graph.nodes if n.op_type != "MatMul"]
    assert axes == [[3], [2], [4]] and m.graph.nodes[-1].outputs[0].name == "y"
    f = feeds((3, 4, 5, 1, 8), (3, 4, 1, 8, 6))
    np.testing.assert_allclose(outputs(before, f)[0], outputs(m, f)[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("text, why", [
    # b's batch axes are [B, 2, 2]: merged, they pair with a's [B, 4] one to one, unmerged they would not
    (graph(b="B,2,2,8,6", y_shape="-1, 4, 5, 6"), "not provably the same dims"),
    # the merge takes a row axis too: [B, 4, 5, 8] -> [B*4*5, 1, 8]
    (graph(a_shape="-1, 1, 8").replace("float[B,4,8,6] b", "float[B,4,5,8,6] b"), "does more than merge"),
    # the result is split into other axes: [B*4, 5, 6] -> [B, 2, 2, 5, 6]
    (graph(y="B,2,2,5,6", y_shape="-1, 2, 2, 5, 6"), "is not the batch axes"),
    # a single row: an axis of size 1 in the product is not told apart from one the merge dropped
    (graph(a="B,4,1,8", a_shape="-1, 1, 8", y="B,4,1,6", y_shape="-1, 4, 1, 6"), "does more than merge"),
    # a's batch dim is unknown
    (graph(a="B,?,5,8"), "not all known"),
])
def test_refusals(text, why):
    before, m, r = run(text)
    assert not r.modified and any(why in x for x in near_misses(r)), near_misses(r)


def biased(bias: str) -> str:
    """Bloom's scores: the ALiBi bias, on the merged batch, added before the split."""
    return graph(a="3,4,5,8", b="3,4,8,6", y="3,4,5,6").replace(
        "float[3,4,8,6] b)", f"float[3,4,8,6] b, float[{bias}] bias)").replace(
        "y = Reshape(p, sy)", "q = Add(p, bias)  y = Reshape(q, sy)")


@pytest.mark.parametrize("bias", [(12, 1, 6), (1, 5, 1), (12, 5, 6)])
def test_a_bias_on_the_merged_batch_is_split_as_the_product(bias):
    before, m, r = run(biased(",".join(map(str, bias))))
    assert r.modified and ops(m) == ["MatMul", "Reshape", "Add"]
    product = m.graph.nodes[0]
    assert [v.name for v in product.inputs] == ["a", "b"]
    f = feeds((3, 4, 5, 8), (3, 4, 8, 6))
    f["bias"] = np.random.default_rng(1).standard_normal(bias).astype(np.float32)
    np.testing.assert_allclose(outputs(before, f)[0], outputs(m, f)[0], rtol=1e-6, atol=1e-6)


def test_a_bias_with_a_symbolic_last_dim_reads_it_at_run_time():
    text = """g (float[3,4,S,8] a, float[3,4,8,S] b, float[12,1,S] bias) => (float[3,4,S,S] y)
        <int64[3] sa = {12, -1, 8}, int64[3] sb = {12, 8, -1}, int64[2] lead = {3, 4}> {
        am = Reshape(a, sa)
        bm = Reshape(b, sb)
        p = MatMul(am, bm)
        q = Add(p, bias)
        ra = Shape <start = 2, end = 3> (a)
        rb = Shape <start = 3, end = 4> (b)
        sy = Concat <axis = 0> (lead, ra, rb)
        y = Reshape(q, sy)
    }"""
    before, m, r = run(text)
    assert r.modified and ops(m)[-1] == "Add" and "Gather" in ops(m)  # the bias's own length, read
    f = feeds((3, 4, 7, 8), (3, 4, 8, 7))
    f["bias"] = np.random.default_rng(1).standard_normal((12, 1, 7)).astype(np.float32)
    np.testing.assert_allclose(outputs(before, f)[0], outputs(m, f)[0], rtol=1e-6, atol=1e-6)


def test_a_bias_that_widens_the_product_or_may_be_one_refuses():
    before, m, r = run(biased("2,12,5,6").replace("float[3,4,5,6] y", "float[6,4,5,6] y"))
    assert not r.modified  # the sum is wider than the product: y is no split of it
    before, m, r = run(biased("N,1,6"))  # N could be 1: a split of it by the batch would fail
    assert not r.modified and "does not broadcast into the merged product" in near_misses(r)[0]
