"""Interleaved A/B: round order, the ratio and its spread."""

import numpy as np
import pytest

from pyonnxopt.benchmark import ab
from pyonnxopt.benchmark.session import Settings, create_session


def test_split_is_even():
    assert ab.split(10, 4) == [3, 3, 2, 2] and sum(ab.split(101, 20)) == 101


def test_rounds_alternate_abba():
    order = []

    class Named:
        def __init__(self, name):
            self.name = name

        def run(self, names, feed):
            order.append(self.name)

    result = ab.interleaved([Named("A"), Named("B")], [[{}], [{}]], iterations=4, rounds=4)
    assert "".join(order) == "AB" "BA" "AB" "BA"
    assert [len(t) for t in result["times"]] == [4, 4] and len(result["round_ratios"]) == 4


def test_comparison_is_median_round_ratio_with_quartiles():
    result = {"times": [[1.0, 2.0, 3.0], [2.0, 5.0, 60.0]], "round_ratios": [1.0, 2.0, 3.0, 4.0, 50.0]}
    c = ab.comparison(result)
    assert c["ratio"] == 3.0 and (c["ratio_low"], c["ratio_high"]) == (2.0, 4.0)
    assert c["ratio_of_medians"] == pytest.approx(2.5)
    assert c["rounds"] == 5 and c["metric"] == "p50"


def _sessions(chain, *depths):
    settings = Settings(intra_op_threads=1)
    feeds = [{"x": np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)}]
    sessions = [create_session(chain(d, f"m{k}.onnx"), settings, "AB"[k]) for k, d in enumerate(depths)]
    for s in sessions:
        s.run(None, feeds[0])
    return sessions, [feeds, feeds]


def test_a_model_against_itself_is_about_one(chain):
    sessions, feeds = _sessions(chain, 4, 4)
    c = ab.comparison(ab.interleaved(sessions, feeds, iterations=100))
    assert 0.75 < c["ratio"] < 1.33, c
    assert c["ratio_low"] <= c["ratio_high"]


def test_ten_times_the_work_is_clearly_slower(chain):
    sessions, feeds = _sessions(chain, 2, 20)
    c = ab.comparison(ab.interleaved(sessions, feeds, iterations=20))
    assert c["ratio"] > 4 and c["ratio_low"] > 3, c
