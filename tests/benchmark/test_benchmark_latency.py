"""Latency percentiles, fixed count / fixed time, and concurrent throughput."""

import numpy as np
import pytest

from pyonnxopt.benchmark import latency
from pyonnxopt.benchmark.session import Settings, create_session


def test_summarize_percentiles_and_cap():
    seconds = [k / 1000 for k in range(1, 101)]  # 1..100 ms
    s = latency.summarize(seconds)
    assert s["count"] == 100 and s["min"] == pytest.approx(1) and s["max"] == pytest.approx(100)
    assert s["p50"] == pytest.approx(50.5) and s["p95"] == pytest.approx(95.05) and s["p99"] == pytest.approx(99.01)
    assert s["mean"] == pytest.approx(50.5) and s["stdev"] == pytest.approx(np.std(np.arange(1, 101), ddof=1))
    assert s["samples"][:3] == [1.0, 2.0, 3.0]
    many = latency.summarize([0.001] * (latency.SAMPLES_KEPT * 3))
    assert many["count"] == latency.SAMPLES_KEPT * 3 and len(many["samples"]) == latency.SAMPLES_KEPT


class Recorder:
    """A session stand-in: records which feed each run got."""
    def __init__(self):
        self.seen = []

    def run(self, names, feed):
        self.seen.append(feed["k"])


def test_fixed_count_cycles_through_samples():
    sess = Recorder()
    times = latency.time_runs(sess, [{"k": 0}, {"k": 1}, {"k": 2}], iterations=7)
    assert len(times) == 7 and all(t >= 0 for t in times)
    assert sess.seen == [0, 1, 2, 0, 1, 2, 0]


def test_fixed_time_runs_until_the_deadline(chain):
    sess = create_session(chain(2), Settings(intra_op_threads=1), "A")
    feeds = [{"x": np.ones((64, 256), np.float32)}]
    times = latency.time_runs(sess, feeds, seconds=0.2)
    assert len(times) > 5 and 0.2 <= sum(times) + 0.05 and sum(times) < 0.5


def test_concurrent_throughput_counts_every_run(chain):
    sess = create_session(chain(2), Settings(intra_op_threads=1), "A")
    calls = []

    class Counting:
        def run(self, names, feed):
            calls.append(1)
            return sess.run(names, feed)

    qps = latency.throughput(Counting(), [{"x": np.ones((64, 256), np.float32)}], concurrency=3, iterations=30)
    assert len(calls) == 30 and qps > 0
    assert latency.throughput(sess, [{"x": np.ones((64, 256), np.float32)}], concurrency=2, seconds=0.1) > 0


def test_errors_in_threads_reach_the_caller():
    class Failing:
        def run(self, names, feed):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        latency.throughput(Failing(), [{}], concurrency=2, iterations=4)
