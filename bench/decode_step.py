"""One decoding step of two exports of a decoder with a cache (A then B),
timed in onnxruntime's CPU provider on one thread, taking turns, at
ORT_DISABLE_ALL and at its default level: what a rewrite of the work done
per generated token is worth once the cache is long (pyonnxopt bench uses
the smallest cache, where that work hardly shows).

Dims named like a past or total length get --past (total: --past + 1),
every other dynamic dim 1; ids are random, masks ones, floats normal.

    python bench/decode_step.py OLD.onnx NEW.onnx --past 512
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnxruntime as ort

LEVELS = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


def _session(path: str, level) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = level
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _dim(d, past: int) -> int:
    if isinstance(d, int):
        return d
    name = (d or "").lower()
    return past + 1 if "total" in name else past if "past" in name else 1


def feeds(session: ort.InferenceSession, past: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for i in session.get_inputs():
        shape = [_dim(d, past) for d in i.shape]
        if "int" in i.type:
            out[i.name] = np.ones(shape, np.int64) if "mask" in i.name else rng.integers(0, 100, shape).astype(np.int64)
        else:
            out[i.name] = rng.standard_normal(shape).astype(np.float16 if "float16" in i.type else np.float32)
    return out


def compare(a_path: str, b_path: str, past: int, rounds: int) -> dict:
    """Per level: A's and B's median ms and the median of the per-round ratios B / A."""
    results = {}
    for name, level in LEVELS.items():
        a, b = _session(a_path, level), _session(b_path, level)
        x = feeds(a, past)
        ya, yb = a.run(None, x), b.run(None, x)
        diff = max(float(np.abs(p.astype(np.float64) - q).max()) for p, q in zip(ya, yb))
        times = {"a": [], "b": []}
        for _ in range(rounds):
            for key, s in (("a", a), ("b", b)):
                t0 = time.perf_counter()
                s.run(None, x)
                times[key].append(time.perf_counter() - t0)
        ratio = float(np.median(np.array(times["b"]) / np.array(times["a"])))
        results[name] = {"a_ms": 1e3 * float(np.median(times["a"])), "b_ms": 1e3 * float(np.median(times["b"])),
                         "ratio": ratio, "max_abs_diff": diff}
    return results


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", help="the first export (A)")
    p.add_argument("b", help="the second export (B)")
    p.add_argument("--past", type=int, default=512, help="cache length (default 512)")
    p.add_argument("--rounds", type=int, default=60, help="interleaved runs of each per level (default 60)")
    args = p.parse_args(argv)
    for level, r in compare(args.a, args.b, args.past, args.rounds).items():
        print(f"{level:8s} A {r['a_ms']:8.2f} ms  B {r['b_ms']:8.2f} ms  B/A {r['ratio']:.3f}  "
              f"(max abs diff {r['max_abs_diff']:.2e})")


if __name__ == "__main__":
    main()
