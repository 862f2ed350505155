"""cancel_reshapes_around_add: structure, the constant's new view, numbers, refusals."""

import numpy as np
import pytest

import pyonnxopt
from pyonnxopt.passes import PassOptions, get

from helpers import ops, outputs, parse

# Swin's shifted windows: scores [B*nW, H, N, N] -> [B, nW, H, N, N] + mask [1, nW, 1, N, N] -> back.
SWIN = """g (float[4,3,5,5] s) => (float[4,3,5,5] y) <float[1,4,1,5,5] mask = {%s},
        int64[5] split = {1, 4, 3, 5, 5}, int64[4] merge = {-1, 3, 5, 5}> {
    v = Reshape(s, split)
    a = Add(v, mask)
    y = Reshape(a, merge)
}""" % ", ".join(str(float(i % 7)) for i in range(100))


def run(text):
    before = parse(text)
    m = pyonnxopt.load(before)
    get("infer_shapes").run(m)
    r = get("cancel_reshapes_around_add").run(m)
    assert m.check_invariants() == []
    return before, m, r


def test_the_mask_is_reshaped_to_the_scores_view():
    before, m, r = run(SWIN)
    assert ops(m) == ["Add"] and m.graph.nodes[0].inputs[0].name == "s"
    assert list(m.graph.nodes[0].inputs[1].initializer.numpy().shape) == [4, 1, 5, 5]
    s = np.random.default_rng(0).standard_normal((4, 3, 5, 5)).astype(np.float32)
    assert np.array_equal(outputs(before, {"s": s})[0], outputs(m, {"s": s})[0])


def test_groups():
    g = pyonnxopt.fusion.rules.cancel_reshapes_around_add._groups
    assert g([1, 4, 3, 5, 5], [4, 3, 5, 5]) == [[0, 1], [2], [3], [4]]
    assert g([2, 2, 3, 1], [4, 3]) == [[0, 1], [2, 3]]
    assert g([2, 3], [3, 2]) is None


@pytest.mark.parametrize("change, why", [
    (("float[1,4,1,5,5] mask", "float[1,4,3,5,5] mask"), None),  # full over the heads too: fine
    (("int64[5] split = {1, 4, 3, 5, 5}", "int64[5] split = {2, 2, 3, 5, 5}"), None),  # copied over the batch
    (("int64[4] merge = {-1, 3, 5, 5}", "int64[4] merge = {-1, 3, 25, 1}"), "are not x's"),
])
def test_variants_and_refusals(change, why):
    text = SWIN.replace(*change)
    if "25, 1" in change[1]:
        text = text.replace("=> (float[4,3,5,5] y)", "=> (float[4,3,25,1] y)")
    if "float[1,4,3,5,5]" in change[1]:
        text = text.replace(", ".join(str(float(i % 7)) for i in range(100)),
                            ", ".join(str(float(i % 7)) for i in range(300)))
    if "{2, 2, 3, 5, 5}" in change[1]:
        text = text.replace("float[1,4,1,5,5] mask", "float[1,2,1,5,5] mask").replace(
            ", ".join(str(float(i % 7)) for i in range(100)), ", ".join(str(float(i % 7)) for i in range(50)))
    before, m, r = run(text)
    if why is None:
        assert ops(m) == ["Add"] and list(m.graph.nodes[0].inputs[1].initializer.numpy().shape)[:2] in ([4, 1], [4, 3])
        s = np.random.default_rng(1).standard_normal((4, 3, 5, 5)).astype(np.float32)
        assert np.array_equal(outputs(before, {"s": s})[0], outputs(m, {"s": s})[0])
    else:
        assert not r.modified and any(why in x for x in r.stats["near_misses"]), r.stats["near_misses"]


def test_a_copy_past_the_fold_size_limit_refuses():
    text = SWIN.replace("int64[5] split = {1, 4, 3, 5, 5}", "int64[5] split = {2, 2, 3, 5, 5}")
    text = text.replace("float[1,4,1,5,5] mask", "float[1,2,1,5,5] mask").replace(
        ", ".join(str(float(i % 7)) for i in range(100)), ", ".join(str(float(i % 7)) for i in range(50)))
    before = parse(text)
    m = pyonnxopt.load(before)
    get("infer_shapes").run(m)
    r = get("cancel_reshapes_around_add").run(m, PassOptions(fold_size_limit=64))
    assert not r.modified and any("--fold-size-limit 64" in x for x in r.stats["near_misses"])
