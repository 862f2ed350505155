"""The whole pipeline on random graphs (fuzz/random_graphs.py) and random
torch modules (fuzz/random_torch.py), against onnxruntime: every variant's
result runs and gives the original's outputs. `python
fuzz/fuzz_pipeline.py --seeds A:B [--source torch]` runs many more seeds."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fuzz"))

from fuzz_pipeline import VARIANTS, check_seed, close  # noqa: E402
from random_graphs import random_model  # noqa: E402

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("seed", range(40))
def test_random_graph(seed):
    status, lines = check_seed(seed, list(VARIANTS))
    assert status == "ok", "\n".join(lines)


@pytest.mark.parametrize("seed", range(4))
def test_random_torch_module(seed):
    pytest.importorskip("torch", reason="torch exports need torch (CI installs the CPU build)")
    status, lines = check_seed(seed, list(VARIANTS), source="torch")
    assert status == "ok", "\n".join(lines)


def test_a_seed_gives_the_same_model_every_time():
    import numpy as np

    a, feeds_a = random_model(12345)
    b, feeds_b = random_model(12345)
    assert a.SerializeToString() == b.SerializeToString()
    assert feeds_a.keys() == feeds_b.keys()
    assert all(np.array_equal(feeds_a[k], feeds_b[k], equal_nan=True) for k in feeds_a)


def test_the_comparison_sees_a_changed_value_a_nan_and_a_changed_infinity():
    import numpy as np

    want = np.array([1.0, np.nan, np.inf, -2.0], np.float32)
    assert close(want.copy(), want)
    assert not close(np.array([1.1, np.nan, np.inf, -2.0], np.float32), want)
    assert not close(np.array([1.0, 0.0, np.inf, -2.0], np.float32), want)
    assert not close(np.array([1.0, np.nan, -np.inf, -2.0], np.float32), want)
    assert close(np.array([1.0 + 1e-6, np.nan, np.inf, -2.0], np.float32), want)
