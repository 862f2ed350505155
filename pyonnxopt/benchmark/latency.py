"""Warm latency and throughput of one session.

Latency: `warmup` untimed runs, then runs timed one by one (perf_counter
around sess.run, inputs already in memory; on CUDA that includes copying
them to the device and the outputs back) for a fixed count or until a fixed
time has passed. Throughput: N threads calling run() on the one shared
session at once (onnxruntime sessions are thread-safe), for the same count
in total or the same time."""

from __future__ import annotations

import threading
import time
from typing import Optional

import numpy as np

SAMPLES_KEPT = 1000  # latency samples kept in the JSON (evenly spaced over the run)


def warm_up(sess, feeds: list, warmup: int) -> None:
    for k in range(warmup):
        sess.run(None, feeds[k % len(feeds)])


def time_runs(sess, feeds: list, iterations: Optional[int] = None, seconds: Optional[float] = None) -> list:
    """Seconds per run, in order: `iterations` runs, or as many as fit in
    `seconds` (at least one). Several samples are used in turn."""
    times = []
    deadline = None if seconds is None else time.perf_counter() + seconds
    k = 0
    while (len(times) < iterations) if deadline is None else (not times or time.perf_counter() < deadline):
        feed = feeds[k % len(feeds)]
        start = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - start)
        k += 1
    return times


def summarize(seconds: list) -> dict:
    """The spec's latency_ms record: percentiles (linear interpolation),
    mean, min, max, stdev (sample) and the samples (ms), at most SAMPLES_KEPT."""
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    if ms.size == 0:
        raise ValueError("no latency samples")
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    kept = ms if ms.size <= SAMPLES_KEPT else ms[np.linspace(0, ms.size - 1, SAMPLES_KEPT).astype(int)]
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99), "mean": float(ms.mean()),
            "min": float(ms.min()), "max": float(ms.max()), "stdev": float(ms.std(ddof=1)) if ms.size > 1 else 0.0,
            "count": int(ms.size), "samples": [round(float(x), 4) for x in kept]}


def throughput(sess, feeds: list, concurrency: int, iterations: Optional[int] = None,
               seconds: Optional[float] = None) -> float:
    """Runs per second with `concurrency` threads sharing `sess`: `iterations`
    runs in all (split between the threads), or as many as fit in `seconds`."""
    if concurrency == 1:
        times = time_runs(sess, feeds, iterations, seconds)
        return len(times) / sum(times)
    counts = [0] * concurrency
    errors = []
    lock = threading.Lock()
    remaining = [iterations]
    stop_at = [None]
    ready = threading.Barrier(concurrency + 1)

    def take() -> bool:
        if stop_at[0] is not None:
            return time.perf_counter() < stop_at[0]
        with lock:
            if remaining[0] <= 0:
                return False
            remaining[0] -= 1
            return True

    def worker(t: int) -> None:
        ready.wait()
        k = t
        try:
            while take():
                sess.run(None, feeds[k % len(feeds)])
                counts[t] += 1
                k += 1
        except Exception as e:  # surfaced in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(concurrency)]
    for t in threads:
        t.start()
    start = time.perf_counter()
    if seconds is not None:
        stop_at[0] = start + seconds
    ready.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return sum(counts) / elapsed
