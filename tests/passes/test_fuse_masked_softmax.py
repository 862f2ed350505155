"""fuse_masked_softmax: jax2onnx's masked attention weights, a Softmax
masked after the fact and renormalized, -> a Softmax of the masked scores
(guarded against queries that keep no key). Numbers: onnxruntime, rtol =
atol = 1e-6, with queries that keep no key among the inputs."""

import numpy as np
import pytest

import pyonnxopt
from transformer_helpers import assert_same_outputs, fuse, near
from helpers import ops, structure

TOL = dict(rtol=1e-6, atol=1e-6)
RULE = "fuse_masked_softmax"


def renormalized(mask_in=", bool[2,1,5,6] keep", mask="mf = Cast <to = 1> (keep)", consts="", axes="{-1}",
                 zero="0.0"):
    return f"""g (float[2,4,5,6] s{mask_in}) => (float[2,4,5,6] y) <int64[1] axes = {axes}, float zero = {{{zero}}},
            float one = {{1.0}}, float zero_out = {{0.0}}{consts}> {{
        p = Softmax <axis = -1> (s)  {mask}  w = Mul(p, mf)  total = ReduceSum(w, axes)  kept = Greater(total, zero)
        den = Where(kept, total, one)  n = Div(w, den)  y = Where(kept, n, zero_out)
    }}"""


def keep_with_an_empty_row():
    keep = np.random.default_rng(3).random((2, 1, 5, 6)) > 0.4
    keep[1, 0, 2] = False  # a query that keeps no key: 0 in both
    keep[0, 0, 0] = True
    return keep


def test_a_cast_boolean_mask_becomes_an_additive_one_with_the_nan_guard():
    m, r, original = fuse(RULE, renormalized(), opset=18)
    assert structure(m) == [
        ("Where", ["keep", "mask_zero", "mask_minus_inf"], ["keep_additive"]),
        ("Add", ["s", "keep_additive"], ["s_masked"]),
        ("Softmax", ["s_masked"], ["masked_softmax"]),
        ("IsNaN", ["masked_softmax"], ["masked_softmax_isnan"]),
        ("Where", ["masked_softmax_isnan", "nan_zero", "masked_softmax"], ["y"])]
    assert_same_outputs(original, m, {"keep": keep_with_an_empty_row()}, **TOL)


@pytest.mark.parametrize("empty_row", [False, True])
def test_a_constant_mask_becomes_a_constant_and_needs_the_guard_only_for_an_empty_row(empty_row):
    mask = np.tril(np.ones((5, 6), np.float32))
    if empty_row:
        mask[3] = 0
    consts = f", float[5,6] mf = {{{', '.join(map(str, mask.ravel()))}}}"
    m, r, original = fuse(RULE, renormalized("", "", consts), opset=18)
    assert ops(m) == ["Add", "Softmax"] + (["IsNaN", "Where"] if empty_row else [])
    additive = m.graph.nodes[0].inputs[1].initializer.numpy()
    assert np.array_equal(additive == 0, mask == 1) and np.all(np.isneginf(additive[mask == 0]))
    assert_same_outputs(original, m, **TOL)


def test_a_cast_read_elsewhere_stays_for_its_other_reader():
    text = renormalized().replace("(float[2,4,5,6] y)", "(float[2,4,5,6] y, float[2,1,5,6] mf)")
    m, r, original = fuse(RULE, text, opset=18)
    assert ops(m).count("Cast") == 1 and "ReduceSum" not in ops(m)
    assert_same_outputs(original, m, {"keep": keep_with_an_empty_row()}, **TOL)


@pytest.mark.parametrize("change, why", [
    (dict(consts=", float[5,6] mf = {" + ", ".join(["0.5"] * 30) + "}", mask_in="", mask=""), "is not all 0s and 1s"),
    (dict(axes="{2}"), "the ReduceSum is over axes [2], not the last"),
    (dict(mask="mf = Cast <to = 1> (keep)", mask_in=", int64[2,1,5,6] keep"), "not a Cast of a boolean"),
    (dict(zero="0.001"), "'zero' is 0.001"),
])
def test_what_is_not_a_renormalized_mask_is_refused(change, why):
    m, r, _ = fuse(RULE, renormalized(**change), opset=18)
    assert not r.modified and "Softmax" in ops(m) and near(r, why)


def test_below_opset_13_the_rule_does_not_run():
    text = renormalized().replace("total = ReduceSum(w, axes)", "total = ReduceSum <axes = [-1]> (w)")
    m, r, _ = fuse(RULE, text, opset=12)
    assert not r.modified


def test_jax2onnx_masked_attention_becomes_attention_at_opset_23():
    # What jax2onnx writes for flax.nnx.MultiHeadAttention with a padding mask, in 4-d heads.
    text = """g (float[2,4,5,8] q, float[2,4,5,8] k, float[2,4,5,8] v, bool[2,1,5,5] keep) => (float[2,4,5,8] y)
            <float c = {0.35355339}, int64[1] axes = {-1}, float zero = {0.0}, float one = {1.0}> {
        kt = Transpose <perm = [0, 1, 3, 2]> (k)  qk = MatMul(q, kt)  s = Mul(qk, c)  p = Softmax <axis = -1> (s)
        mf = Cast <to = 1> (keep)  w = Mul(p, mf)  total = ReduceSum(w, axes)  kept = Greater(total, zero)
        den = Where(kept, total, one)  n = Div(w, den)  z = Where(kept, n, zero)  y = MatMul(z, v)
    }"""
    from helpers import parse

    proto = parse(text, 23)
    keep = np.random.default_rng(1).random((2, 1, 5, 5)) > 0.3
    keep[0, 0, 4] = False
    optimized, report = pyonnxopt.optimize(proto)
    assert "Attention" in ops(optimized) and "Softmax" not in ops(optimized) and "ReduceSum" not in ops(optimized)
    assert_same_outputs(proto, optimized, {"keep": keep}, **TOL)
