"""fuse_matmul_add_into_gemm: Add(MatMul(a, b), c) -> Gemm(a, b, c) for 2-D
a and b when c broadcasts to the product one way. Numbers: onnxruntime,
original against fused, rtol = atol = 1e-5 in float32."""

import pytest

from fusion_helpers import assert_same_outputs, near_misses, rng_weights, run_rule, with_weights
from helpers import ops, structure

RULE = "fuse_matmul_add_into_gemm"


def fused(proto, **fixed_shapes):
    m, r = run_rule(RULE, proto)
    assert r.modified, r.stats["near_misses"]
    assert_same_outputs(proto, m, **fixed_shapes)
    return m, r


@pytest.mark.parametrize("c_shape", [(6,), (1, 6), (3, 6), (3, 1), ()])
def test_constant_bias_shapes(c_shape):
    proto = with_weights("g (float[3,5] a, float[5,6] b) => (float[3,6] y) { t = MatMul (a, b)  y = Add (t, c) }",
                         **rng_weights(c=c_shape))
    m, r = fused(proto)
    assert structure(m) == [("Gemm", ["a", "b", "c"], ["y"])] and m.graph.nodes[0].attributes == {}
    assert r.stats["rewrites"][0]["consumed"] == ["Add->y", "MatMul->t"]


def test_every_input_a_graph_input_and_bias_first():
    proto = with_weights("g (float[N,5] a, float[5,6] b, float[6] c) => (float[N,6] y) { t = MatMul (a, b)  y = Add (c, t) }")
    m, _ = fused(proto, a=[4, 5])
    assert structure(m) == [("Gemm", ["a", "b", "c"], ["y"])]


def refusal(text, valid=True, **shapes):
    m, r = run_rule(RULE, with_weights(text, **rng_weights(**shapes)), valid=valid)
    assert not r.modified and ops(m) == ["MatMul", "Add"]
    return near_misses(r)


def test_refuses_other_ranks():
    assert refusal("g (float[2,3,5] a, float[5,6] b) => (float[2,3,6] y) { t = MatMul (a, b)  y = Add (t, c) }",
                   c=(6,)) == ["MatMul input a has rank 3, Gemm needs 2"]
    assert refusal("g (float[3,5] a, float[] b) => (float[] y) { t = MatMul (a, b)  y = Add (t, c) }", valid=False,
                   c=(6,)) == ["the rank of MatMul input b is unknown"]


def test_refuses_a_bias_that_widens_the_product():
    assert refusal("g (float[1,5] a, float[5,6] b) => (float[3,6] y) { t = MatMul (a, b)  y = Add (t, c) }",
                   c=(3, 6)) == ["the added value's shape [3, 6] may widen the product's [1, 6]: Gemm broadcasts C one way only"]
    assert refusal("g (float[N,5] a, float[5,6] b, float[M,6] c) => (float[?,6] y) { t = MatMul (a, b)  y = Add (t, c) }") == [
        "the added value's shape [None, 6] may widen the product's [None, 6]: Gemm broadcasts C one way only"]
    assert refusal("g (float[3,5] a, float[5,6] b) => (float[2,3,6] y) { t = MatMul (a, b)  y = Add (t, c) }",
                   c=(2, 3, 6)) == ["the added value has rank 3: the sum is not 2-D"]
    assert refusal("g (float[3,5] a, float[5,6] b, float[] c) => (float[] y) { t = MatMul (a, b)  y = Add (t, c) }",
                   valid=False) == ["the shape of the added value is unknown"]


def test_refuses_integers_and_a_product_with_another_reader():
    assert refusal("g (int32[3,5] a, int32[5,6] b, int32[6] c) => (int32[3,6] y) { t = MatMul (a, b)  y = Add (t, c) }") == [
        "element type int32: only float16, float and double are folded"]
    m, r = run_rule(RULE, with_weights("""g (float[3,5] a, float[5,6] b, float[6] c) => (float[3,6] y, float[3,6] t) {
        t = MatMul (a, b)
        y = Add (t, c)
    }"""))
    assert not r.modified and "'t'" in r.stats["near_misses"][0] and "graph output" in r.stats["near_misses"][0]


def test_opset_6_does_not_run():
    proto = with_weights("g (float[3,5] a, float[5,6] b, float[6] c) => (float[3,6] y) { t = MatMul (a, b)  y = Add (t, c) }", 6)
    m, r = run_rule(RULE, proto, valid=False)
    assert not r.modified and r.stats["near_misses"] == []


def test_after_fuse_gemm_batchnorm():
    from pyonnxopt.passes import run_passes

    proto = with_weights("""g (float[4,5] a) => (float[4,6] y) {
        t = MatMul (a, w)
        y = BatchNormalization (t, scale, beta, mean, var)
    }""", **rng_weights(w=(5, 6), scale=(6,), beta=(6,), mean=(6,), var=(6,)))
    m, _ = run_passes(proto, ["infer_shapes", "fuse_gemm_batchnorm", RULE, "eliminate_dead_code"])
    assert ops(m) == ["Gemm"] and m.graph.nodes[0].outputs[0].name == "y"
    assert_same_outputs(proto, m)


def test_torch_matmul_plus_bias():
    torch = pytest.importorskip("torch")
    import io

    import onnx

    class Affine(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(5, 6))
            self.b = torch.nn.Parameter(torch.randn(6))

        def forward(self, x):
            return torch.matmul(x, self.w) + self.b

    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.onnx.export(Affine().eval(), torch.randn(4, 5), buf, dynamo=False, opset_version=17)
    proto = onnx.load_from_string(buf.getvalue())
    assert [n.op_type for n in proto.graph.node] == ["MatMul", "Add"]
    m, _ = fused(proto)
    assert ops(m) == ["Gemm"]


SPLIT = """g (float[N,8] a) => (float[Y] y) <int64[4] shape = {-1, 2, 2, 4}> {
    t = MatMul (a, w)
    s = Reshape (t, shape)
    y = Add (s, c)
}"""


@pytest.mark.parametrize("c_shape", [(2, 4), (1, 2, 4), (1, 1, 2, 4), (4,)])
def test_a_bias_added_after_the_columns_are_split_goes_into_the_gemm(c_shape):
    """Keras's EinsumDense through tf2onnx: [B*S, 8] -> [B, S, 2, 4] (here
    [N/2, 2, 2, 4]) + b[2, 4]; a bias over the last axis only is taken too
    when that axis holds all the columns."""
    shape = "{-1, 2, 2, 4}" if c_shape != (4,) else "{-1, 2, 4}"
    out = "?,2,2,4" if c_shape != (4,) else "?,2,4"
    w_cols = 8 if c_shape != (4,) else 4
    text = SPLIT.replace("{-1, 2, 2, 4}", shape).replace("float[Y] y", f"float[{out}] y")
    text = text.replace("int64[4] shape", f"int64[{shape.count(',') + 1}] shape")
    m, r = fused(with_weights(text, **rng_weights(w=(8, w_cols), c=c_shape)), a=[4, 8])
    assert ops(m) == ["Gemm", "Reshape"] and m.graph.nodes[1].outputs[0].name == "y"
    assert list(m.graph.nodes[0].inputs[2].initializer.dims) == [w_cols]


@pytest.mark.parametrize("c_shape, why", [
    ((2, 2, 4), "is not the trailing axes"),  # varies along an axis of rows
    ((4,), "is not the trailing axes"),  # the last axis holds 4 of the 8 columns
])
def test_refuses_a_bias_after_a_split_that_is_not_per_column(c_shape, why):
    text = SPLIT.replace("float[Y] y", "float[?,2,2,4] y")
    m, r = run_rule(RULE, with_weights(text, **rng_weights(w=(8, 8), c=c_shape)))
    assert not r.modified and any(why in x for x in near_misses(r)), near_misses(r)


def test_refuses_a_bias_after_a_split_that_is_not_constant():
    text = SPLIT.replace("(float[N,8] a)", "(float[N,8] a, float[2,4] c)").replace("float[Y] y", "float[?,2,2,4] y")
    m, r = run_rule(RULE, with_weights(text, **rng_weights(w=(8, 8))))
    assert not r.modified and any("not a constant" in x for x in near_misses(r)), near_misses(r)
