"""cancel_reshapes_around_add: structure, the constant's new view, numbers, refusals."""

import numpy as np
import pytest

import pyonnxopt

from helpers import ops, outputs
from transformer_helpers import fuse


def swin(mask=(1, 4, 1, 5, 5), split=(1, 4, 3, 5, 5), merge=(-1, 3, 5, 5), out=(4, 3, 5, 5)) -> str:
    """Swin's shifted windows: scores [B*nW, H, N, N] -> [B, nW, H, N, N] + mask [1, nW, 1, N, N] -> back."""
    dims = lambda d: ",".join(map(str, d))  # noqa: E731
    values = ", ".join(str(float(i % 7)) for i in range(int(np.prod(mask))))
    return f"""g (float[4,3,5,5] s) => (float[{dims(out)}] y) <float[{dims(mask)}] mask = {{{values}}},
            int64[5] split = {{{", ".join(map(str, split))}}}, int64[4] merge = {{{", ".join(map(str, merge))}}}> {{
        v = Reshape(s, split)
        a = Add(v, mask)
        y = Reshape(a, merge)
    }}"""


SWIN = swin()


def run(text, **options):
    """(original, Model, PassResult): the rule once, after infer_shapes."""
    m, r, before = fuse("cancel_reshapes_around_add", text, opset=17, **options)
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


@pytest.mark.parametrize("text, why", [
    (swin(mask=(1, 4, 3, 5, 5)), None),  # full over the heads too: fine
    (swin(mask=(1, 2, 1, 5, 5), split=(2, 2, 3, 5, 5)), None),  # copied over the batch
    (swin(merge=(-1, 3, 25, 1), out=(4, 3, 25, 1)), "are not x's"),
])
def test_variants_and_refusals(text, why):
    before, m, r = run(text)
    if why is None:
        assert ops(m) == ["Add"] and list(m.graph.nodes[0].inputs[1].initializer.numpy().shape)[:2] in ([4, 1], [4, 3])
        s = np.random.default_rng(1).standard_normal((4, 3, 5, 5)).astype(np.float32)
        assert np.array_equal(outputs(before, {"s": s})[0], outputs(m, {"s": s})[0])
    else:
        assert not r.modified and any(why in x for x in r.stats["near_misses"]), r.stats["near_misses"]


def test_a_copy_past_the_fold_size_limit_refuses():
    before, m, r = run(swin(mask=(1, 2, 1, 5, 5), split=(2, 2, 3, 5, 5)), fold_size_limit=64)
    assert not r.modified and any("--fold-size-limit 64" in x for x in r.stats["near_misses"])
