import math

import numpy as np
import pytest

from pyonnxopt.verify.metrics import DEFAULT_TOLERANCES, HISTOGRAM_EDGES, compare_arrays, merge, tolerance


def test_identical_arrays_are_exact():
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    r = compare_arrays(x, x.copy(), 1e-4, 1e-3)
    assert r["ok"] and r["mismatch"] is None
    assert r["max_abs"] == 0 and r["max_rel"] == 0 and r["cosine"] == 1.0
    assert r["snr_db"] is None  # no error: infinite SNR
    assert r["histogram"]["counts"][0] == 15 and sum(r["histogram"]["counts"]) == 15
    assert r["shape"] == [3, 5] and r["dtype"] == "float32"


def test_metrics_of_a_known_error():
    expected = np.array([1.0, -2.0, 4.0, 0.0])
    actual = np.array([1.1, -2.0, 4.0, 0.01])
    r = compare_arrays(expected, actual, 1e-8, 1e-7)
    assert r["max_abs"] == pytest.approx(0.1)
    assert r["max_rel"] == pytest.approx(0.1)  # 0.1 / 1.0; the zero expected value is left out
    signal, noise = 1 + 4 + 16, 0.1**2 + 0.01**2
    assert r["snr_db"] == pytest.approx(10 * math.log10(signal / noise))
    assert r["cosine"] == pytest.approx(np.dot(expected, actual) / np.linalg.norm(expected) / np.linalg.norm(actual))
    assert not r["ok"] and "max abs error 0.1" in r["mismatch"]
    # 0.1 falls in [1e-1, 1), 0.01 in [1e-2, 1e-1), the exact ones in [0, 1e-12)
    counts = r["histogram"]["counts"]
    assert counts[0] == 2 and counts[HISTOGRAM_EDGES.index(0.1)] == 1 and counts[HISTOGRAM_EDGES.index(0.01)] == 1


def test_tolerance_is_atol_plus_rtol_times_expected():
    expected = np.array([100.0, 0.0], np.float32)
    actual = np.array([100.05, 5e-5], np.float32)
    assert compare_arrays(expected, actual, atol=1e-4, rtol=1e-3)["ok"]  # 0.05 <= 1e-4 + 0.1
    assert not compare_arrays(expected, actual, atol=1e-4, rtol=1e-4)["ok"]  # 0.05 > 1e-4 + 0.01
    assert not compare_arrays(expected, actual, atol=1e-5, rtol=1e-3)["ok"]  # 5e-5 > 1e-5 at zero


def test_same_non_finite_values_in_the_same_place_are_equal():
    x = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    assert compare_arrays(x, x.copy(), 0, 0)["ok"]
    moved = np.array([np.nan, 1.0, np.inf, -np.inf], np.float32)
    r = compare_arrays(x, moved, 1e-4, 1e-3)
    assert not r["ok"] and "non-finite values differ at 2 place(s)" == r["mismatch"]
    assert r["histogram"]["counts"][-1] == 2
    flipped = np.array([1.0, np.nan, -np.inf, -np.inf], np.float32)
    assert not compare_arrays(x, flipped, 1, 1)["ok"]


def test_shape_and_dtype_changes_are_mismatches_without_metrics():
    r = compare_arrays(np.zeros((1, 4), np.float32), np.zeros(4, np.float32), 1, 1)
    assert not r["ok"] and r["mismatch"] == "shape [1, 4] became [4]" and r["max_abs"] is None
    r = compare_arrays(np.zeros(4, np.float32), np.zeros(4, np.float16), 1, 1)
    assert not r["ok"] and r["mismatch"] == "dtype float32 became float16"


def test_integers_and_booleans_must_be_equal():
    assert compare_arrays(np.arange(4), np.arange(4), 0, 0)["ok"]
    r = compare_arrays(np.arange(4), np.array([0, 1, 2, 4]), 0, 0)
    assert not r["ok"] and r["max_abs"] == 1
    assert not compare_arrays(np.array([True, False]), np.array([True, True]), 0, 0)["ok"]
    assert tolerance("int64") == {"atol": 0.0, "rtol": 0.0} and tolerance("bool") == {"atol": 0.0, "rtol": 0.0}


def test_tolerances_per_dtype():
    assert tolerance("float16") == DEFAULT_TOLERANCES["float16"]
    assert DEFAULT_TOLERANCES["float16"]["atol"] > DEFAULT_TOLERANCES["float32"]["atol"]
    custom = {"float32": {"atol": 1.0, "rtol": 0.0}}
    assert tolerance("float32", custom) == {"atol": 1.0, "rtol": 0.0}
    assert tolerance("float16", custom) == {"atol": 1.0, "rtol": 0.0}  # a float without its own entry: float32's


def test_merge_keeps_the_worst_and_adds_histograms():
    x = np.ones(4, np.float32)
    good = compare_arrays(x, x.copy(), 1e-4, 1e-3)
    bad = compare_arrays(x, x + np.float32(0.5), 1e-4, 1e-3)
    m = merge(good, bad)
    assert not m["ok"] and m["mismatch"] == bad["mismatch"]
    assert m["max_abs"] == 0.5 and m["snr_db"] == bad["snr_db"]
    assert sum(m["histogram"]["counts"]) == 8
    assert merge(bad, good)["max_abs"] == 0.5
    shape = compare_arrays(x, np.ones(3, np.float32), 1, 1)
    assert merge(shape, good)["max_abs"] is None and merge(good, shape)["max_abs"] is None
    assert merge(good, shape)["mismatch"] == "shape [4] became [3]"


def test_an_intermediate_on_rows_is_compared_reshaped():
    # flatten_linear_rows keeps a region's names and runs it on [B*S, E]
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    r = compare_arrays(x, x.reshape(6, 4), 1e-4, 1e-3, layouts=True)
    assert r["ok"] and r["reshaped"] == [6, 4] and r["shape"] == [2, 3, 4] and "layout" not in r
    assert not compare_arrays(x, x.reshape(6, 4), 1e-4, 1e-3)["ok"]  # outputs keep their shape
    r = compare_arrays(x, x.reshape(6, 4) + 1, 1e-4, 1e-3, layouts=True)
    assert not r["ok"] and r["mismatch"] == "shape [2, 3, 4] became [6, 4]"


def test_an_intermediate_in_another_layout_is_compared_permuted():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    moved = x.transpose(1, 0, 2).copy()
    r = compare_arrays(x, moved, 1e-4, 1e-3, layouts=True)
    assert r["ok"] and r["layout"] == [1, 0, 2] and r["max_abs"] == 0.0 and r["shape"] == [2, 3, 4]
    assert not compare_arrays(x, moved, 1e-4, 1e-3)["ok"]  # outputs keep their layout
    wrong = moved + 1
    r = compare_arrays(x, wrong, 1e-4, 1e-3, layouts=True)
    assert not r["ok"] and r["mismatch"] == "shape [2, 3, 4] became [3, 2, 4]"
    size1 = np.ones((197, 1, 8), np.float32)
    assert compare_arrays(size1, size1.reshape(1, 197, 8), 0, 0, layouts=True)["ok"]  # a size-1 axis moved
