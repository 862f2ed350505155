"""fuse_transpose_into_gemm: a Transpose of Gemm's A or B becomes transA or
transB. Numbers: onnxruntime, original against fused."""

import pytest

from fusion_helpers import fused_by, near_misses, rng_weights, run_rule, with_weights
from helpers import structure

RULE = "fuse_transpose_into_gemm"


@pytest.mark.parametrize("attrs, p, want", [
    ("", "5,3", {"transA": 1}),
    ("<transA = 1>", "3,5", {"transA": 0}),
])
def test_a_transposed_a_becomes_trans_a(attrs, p, want):
    proto = with_weights(f"""g (float[{p}] p) => (float[3,4] y) {{
        t = Transpose <perm = [1, 0]> (p)
        y = Gemm {attrs} (t, w, c)
    }}""", **rng_weights(w=(5, 4), c=(4,)))
    m, _ = fused_by(RULE, proto)
    assert structure(m) == [("Gemm", ["p", "w", "c"], ["y"])] and m.graph.nodes[0].attributes == want


@pytest.mark.parametrize("attrs, w, want", [
    ("<transB = 1, alpha = 0.5>", "5,4", {"transB": 0, "alpha": 0.5}),
    ("", "4,5", {"transB": 1}),
])
def test_a_transposed_computed_b_becomes_trans_b(attrs, w, want):
    proto = with_weights(f"""g (float[3,5] p, float[{w}] w) => (float[3,4] y) {{
        t = Transpose (w)
        y = Gemm {attrs} (p, t)
    }}""")
    m, _ = fused_by(RULE, proto)
    assert structure(m) == [("Gemm", ["p", "w"], ["y"])] and m.graph.nodes[0].attributes == want


def test_refuses_a_shared_transpose():
    proto = with_weights("""g (float[5,3] p) => (float[3,4] y, float[3,5] z) {
        t = Transpose <perm = [1, 0]> (p)
        y = Gemm (t, w)
        z = Relu (t)
    }""", **rng_weights(w=(5, 4)))
    m, r = run_rule(RULE, proto)
    assert not r.modified and near_misses(r) == ["'ta': its output 't' is also read by 'Relu->z'"]
