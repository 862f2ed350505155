"""Verify, bench and report dicts shaped like the spec's JSON (kind/version 1),
built from seeded random numbers so pages have something realistic to draw:
a conv net's worth of layers with a few that drift, lognormal latencies."""

from __future__ import annotations

import numpy as np

EDGES = [0.0] + [10.0 ** e for e in range(-12, 1)] + [float("inf")]
OPS = ["Conv", "Relu", "Conv", "Add", "Relu", "MaxPool", "Conv", "BatchNormalization", "Relu", "Gemm"]


def record(name, op_type, order, max_abs, *, dtype="float32", ok=True, shape=(1, 8, 16, 16), mismatch=None):
    """A compare_arrays record with a histogram whose mass sits below max_abs."""
    counts = [0] * (len(EDGES) - 1)
    n = int(np.prod(shape))
    if max_abs == 0:
        counts[0] = n
    else:
        top = next(i for i in range(len(EDGES) - 1) if EDGES[i] <= max_abs < EDGES[i + 1])
        spread = [max(top - 2, 1), max(top - 1, 1), top]
        for i, share in zip(spread, (0.6, 0.35, 0.05)):
            counts[i] += int(n * share)
        counts[0] += n - sum(counts)
    return {"name": name, "op_type": op_type, "order": order, "shape": list(shape), "dtype": dtype,
            "max_abs": max_abs, "max_rel": max_abs * 10, "cosine": 1.0 - max_abs, "snr_db":
            None if max_abs == 0 else float(20 * np.log10(1 / max_abs)), "ok": ok,
            "histogram": {"edges": EDGES, "counts": counts}, "mismatch": mismatch}


def verify_dict(layers=40, ok=True, seed=0):
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(layers):
        err = 0.0 if i % 7 == 0 else float(10 ** rng.uniform(-8, -5))
        recs.append(record(f"/features.{i}/{OPS[i % len(OPS)]}_output_0", OPS[i % len(OPS)], i, err))
    if not ok:
        recs[25] = record(recs[25]["name"], recs[25]["op_type"], 25, 0.3, ok=False)
    out = record("logits", "Gemm", layers, 2e-6, shape=(1, 10))
    if not ok:
        out = record("logits", "Gemm", layers, 0.05, shape=(1, 10), ok=False)
    return {
        "kind": "verify", "version": 1, "original": "models/cnn.onnx", "optimized": "out/cnn.opt.onnx",
        "inputs": {"source": "random", "seed": 0, "samples": 2, "batch_sizes": [None]},
        "tolerances": {"float32": {"atol": 1e-4, "rtol": 1e-3}, "float16": {"atol": 1e-2, "rtol": 1e-2}},
        "ok": ok, "first_mismatch": None if ok else recs[25]["name"],
        "outputs": [out], "layers": recs,
        "structure": {
            "nodes": [16, 9], "op_counts": {"Conv": [2, 2], "BatchNormalization": [1, 0], "Identity": [2, 0],
                                            "Relu": [2, 2], "Gemm": [1, 1]},
            "inputs": [{"name": "image", "before": {"dtype": "float32", "shape": ["N", 3, 32, 32]},
                        "after": {"dtype": "float32", "shape": ["N", 3, 32, 32]}}],
            "outputs": [{"name": "logits", "before": {"dtype": "float32", "shape": ["N", 10]},
                         "after": {"dtype": "float32", "shape": ["N", 10]}}],
            "removed_nodes": [{"name": "bn1", "op_type": "BatchNormalization"}, {"name": "id1", "op_type": "Identity"}],
            "added_nodes": [],
            "initializer_bytes": [25000, 21000], "initializers": [12, 8]},
        "seconds": 0.42,
    }


def bench_dict(seed=0, samples=300):
    rng = np.random.default_rng(seed)

    def model(label, path, center):
        lat = np.sort(rng.lognormal(np.log(center), 0.08, samples))
        return {"label": label, "path": path, "session_create_cold_s": 0.21, "session_create_warm_s": 0.05,
                "latency_ms": {"p50": float(np.percentile(lat, 50)), "p95": float(np.percentile(lat, 95)),
                               "p99": float(np.percentile(lat, 99)), "mean": float(lat.mean()),
                               "min": float(lat.min()), "max": float(lat.max()), "stdev": float(lat.std()),
                               "count": samples, "samples": rng.permutation(lat).tolist()},
                "qps": 1000 / center * 3.5, "peak_rss_mb": 180.5, "device_peak_mb": None,
                "profile": {"by_op_type": [{"op_type": "Conv", "ms": center * 0.7, "share": 0.7, "count": 20},
                                           {"op_type": "Relu", "ms": center * 0.1, "share": 0.1, "count": 20},
                                           {"op_type": "Gemm", "ms": center * 0.05, "share": 0.05, "count": 1}],
                            "top_nodes": [{"name": "/conv1/Conv", "op_type": "Conv", "ms": center * 0.2,
                                           "share": 0.2}]}}

    return {
        "kind": "bench", "version": 1,
        "settings": {"provider": "cpu", "intra_op_threads": 1, "inter_op_threads": None,
                     "optimization_level": "disable", "warmup": 10, "iterations": samples, "seconds": None,
                     "concurrency": 1, "batch_size": None},
        "models": [model("A", "models/cnn.onnx", 2.4), model("B", "out/cnn.opt.onnx", 1.9)],
        "comparison": {"metric": "p50", "ratio": 0.79, "ratio_low": 0.76, "ratio_high": 0.83, "rounds": 20},
        "seconds": 3.1,
    }


def optimize_dict():
    """A real optimize report of the demo CNN (fast)."""
    import pyonnxopt
    from pyonnxopt.examples import tiny_cnn

    _, report = pyonnxopt.optimize(tiny_cnn())
    return report


def report_dict(optimize=True, verify=True, bench=True, ok=True):
    return {"kind": "report", "version": 1, "original": "models/cnn.onnx", "optimized": "out/cnn.opt.onnx",
            "optimize": optimize_dict() if optimize else None, "verify": verify_dict(ok=ok) if verify else None,
            "bench": bench_dict() if bench else None, "created": "2025-01-01T00:00:00+00:00", "pyonnxopt": "0.1.0"}
