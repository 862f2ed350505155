"""regroup_transposes: optimize_transposes where a Reshape that regroups
whole runs of axes lets a Transpose through, and a Transpose between two
Reshapes moves below the second (for collapse_reshapes to merge them);
refusals; numbers in onnxruntime; it waits for fuse_attention."""

import numpy as np
import pytest
from helpers import ops, outputs, parse, random_feeds, run_pass, structure

import pyonnxopt
from pyonnxopt.passes import PassOptions, get


def same_numbers(before, after, feeds=None):
    feeds = feeds or random_feeds(before)
    for want, got in zip(outputs(before, feeds), outputs(after, feeds)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def regrouped(text, opset=17, symbolic=2):
    """infer_shapes, regroup_transposes, collapse_reshapes; the numbers
    match, and a second run changes nothing."""
    before = parse(text, opset)
    m, _ = run_pass("infer_shapes", before)
    r = get("regroup_transposes").run(m, PassOptions())
    get("collapse_reshapes").run(m, PassOptions())
    assert m.check_invariants() == []
    same_numbers(before, m, random_feeds(before, symbolic=symbolic))
    assert not get("regroup_transposes").run(m, PassOptions()).modified
    return m, r


def perm(m, index):
    return m.graph.nodes[index].attributes["perm"]


def target(m, index):
    return m.graph.nodes[index].inputs[1].initializer.numpy().tolist()


# ---- a Reshape that regroups runs of axes lets the Transpose through ----

def test_reshape_adding_a_size_1_axis_lets_heads_meet_the_key_transpose():
    # nn.MultiheadAttention with batch 1: k [S, h, d] -> [h, S, d] -> the
    # SDPA view [1, h, S, d] -> Kᵀ. The view adds a size-1 axis only, so
    # the first Transpose moves below it and the two become one.
    m, _ = regrouped("""g (float[5,3,4] x) => (float[1,3,4,5] y) <int64[4] s = {1, 3, 5, 4}> {
        t = Transpose <perm = [1, 0, 2]> (x)
        r = Reshape(t, s)
        y = Transpose <perm = [0, 1, 3, 2]> (r)
    }""")
    assert ops(m) == ["Reshape", "Transpose"]
    assert target(m, 0) == [1, 5, 3, 4] and perm(m, 1) == [0, 2, 3, 1]


@pytest.mark.parametrize("symbolic", [2, 6])
def test_reshape_splitting_an_unknown_size_lets_heads_meet_the_key_transpose(symbolic):
    # With a dynamic batch: [S, B*h, d] -> [B*h, S, d] -> [B, h, S, d]. B*h
    # is unknown, and the target's -1 is the only size that can hold it.
    m, _ = regrouped("""g (float[5,N,4] x) => (float[M,2,4,5] y) <int64[4] s = {-1, 2, 5, 4}> {
        t = Transpose <perm = [1, 0, 2]> (x)
        r = Reshape(t, s)
        y = Transpose <perm = [0, 1, 3, 2]> (r)
    }""", symbolic=symbolic)
    assert ops(m) == ["Reshape", "Transpose"]
    assert target(m, 0) == [5, -1, 2, 4] and perm(m, 1) == [1, 2, 3, 0]


def test_reshape_merging_a_run_of_axes_lets_the_transposes_cancel():
    # The merged axes (4 and 5) are v's axes 2 and 3, in order.
    m, _ = regrouped("""g (float[2,3,4,5] x) => (float[2,3,20] y) <int64[3] s = {2, 20, -1}> {
        t = Transpose <perm = [0, 2, 3, 1]> (x)
        r = Reshape(t, s)
        y = Transpose <perm = [0, 2, 1]> (r)
    }""")
    assert ops(m) == ["Reshape"] and target(m, 0) == [2, 3, 20]


def test_reshape_splitting_and_adding_size_1_axes():
    m, _ = regrouped("""g (float[6,4] x) => (float[3,1,4,2] y) <int64[4] s = {4, 1, 2, 3}> {
        t = Transpose <perm = [1, 0]> (x)
        r = Reshape(t, s)
        y = Transpose <perm = [3, 1, 0, 2]> (r)
    }""")
    assert ops(m).count("Transpose") == 1


@pytest.mark.parametrize("text", [
    # merges v's axes 2 and 1: out of order
    """g (float[2,3,4] x) => (float[12,2] y) <int64[2] s = {2, 12}> {
        t = Transpose <perm = [0, 2, 1]> (x)
        r = Reshape(t, s)
        y = Transpose <perm = [1, 0]> (r)
    }""",
    # two unknown sizes
    """g (float[5,N,K] x) => (float[2,M,K] y) <int64[3] s = {-1, 2, 0}> {
        t = Transpose <perm = [1, 0, 2]> (x)
        r = Reshape(t, s)
        y = Transpose <perm = [1, 0, 2]> (r)
    }""",
])
def test_reshapes_that_do_not_regroup_runs_stop_it(text):
    before = pyonnxopt.load(parse(text))
    m, _ = run_pass("infer_shapes", parse(text))
    r = get("regroup_transposes").run(m, PassOptions())
    assert structure(m) == structure(before) and not r.modified
    assert any("nor moves whole runs of them" in x for x in r.stats["refused"]), r.stats["refused"]


def test_optimize_transposes_itself_does_not_regroup():
    text = """g (float[5,3,4] x) => (float[1,3,4,5] y) <int64[4] s = {1, 3, 5, 4}> {
        t = Transpose <perm = [1, 0, 2]> (x)
        r = Reshape(t, s)
        y = Transpose <perm = [0, 1, 3, 2]> (r)
    }"""
    m, _ = run_pass("infer_shapes", parse(text))
    r = get("optimize_transposes").run(m, PassOptions())
    assert not r.modified and ops(m) == ["Transpose", "Reshape", "Transpose"]


# ---- a Transpose between two Reshapes moves below the second ----

@pytest.mark.parametrize("batch, symbolic", [("1", 1), ("B", 2), ("B", 3)])
def test_transpose_between_reshapes_moves_below_and_they_merge(batch, symbolic):
    # nn.MultiheadAttention's q: [S, B, E] -> [S, B*h, d] -> [B*h, S, d] -> [B, h, S, d].
    bh = "4" if batch == "1" else "-1"
    m, _ = regrouped(f"""g (float[5,{batch},8] x) => (float[{batch},4,5,2] y)
            <int64[3] a = {{5, {bh}, 2}}, int64[4] b = {{{'1' if batch == '1' else '-1'}, 4, 5, 2}}> {{
        f = Reshape(x, a)
        t = Transpose <perm = [1, 0, 2]> (f)
        y = Reshape(t, b)
    }}""", symbolic=symbolic)
    assert ops(m) == ["Reshape", "Transpose"]


def test_channel_shuffle_stays():
    # [N, g, C/g, H, W] -> swap the groups -> [N, C, H, W]: the merge reads
    # the groups out of order, which is the whole point of the shuffle.
    text = """g (float[1,6,2,2] x) => (float[1,6,2,2] y) <int64[5] a = {1, 2, 3, 2, 2}, int64[4] b = {1, 6, 2, 2}> {
        f = Reshape(x, a)
        t = Transpose <perm = [0, 2, 1, 3, 4]> (f)
        y = Reshape(t, b)
    }"""
    m, r = regrouped(text)
    assert ops(m) == ["Reshape", "Transpose", "Reshape"] and not r.modified


def test_transpose_read_twice_stays_between_reshapes():
    text = """g (float[5,4,2] x) => (float[1,4,5,2] y, float[4,5,2] z) <int64[3] a = {5, 4, 2}, int64[4] b = {1, 4, 5, 2}> {
        f = Reshape(x, a)
        z = Transpose <perm = [1, 0, 2]> (f)
        y = Reshape(z, b)
    }"""
    m, r = regrouped(text)
    assert ops(m) == ["Reshape", "Transpose", "Reshape"] and not r.modified


# ---- in the pipeline ----

def _mha(batch: int, opset: int):
    import torch
    from transformer_helpers import export

    class SelfAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, x):
            return self.mha(x, x, x, need_weights=False)[0]

    axes = {"dynamic_axes": {"x": {0: "batch"}}} if batch > 1 else {}
    return export(SelfAttention(), (torch.randn(batch, 7, 32),), opset, input_names=["x"], **axes)


@pytest.mark.parametrize("batch", [1, 2])
def test_multihead_attention_at_opset_17_loses_the_key_transposes(batch):
    original = _mha(batch, 17)
    before, _ = pyonnxopt.optimize(original, skip=["regroup_transposes"], check_outputs=False)
    after, report = pyonnxopt.optimize(original)
    assert report["check"]["first_mismatch"] is None
    assert ops(after).count("Transpose") < ops(before).count("Transpose")
    assert len(ops(after)) < len(ops(before))


def test_multihead_attention_at_opset_23_still_fuses():
    after, report = pyonnxopt.optimize(_mha(2, 23))
    assert ops(after).count("Attention") == 1 and "Softmax" not in ops(after)
    assert report["check"]["first_mismatch"] is None
