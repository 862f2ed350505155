"""Where each fold backend wins: numpy against numba (and cupy when present)
on the weight arithmetic of the fusion passes.

    python bench/fold_backends.py                      # 1e8 weight elements (400 MB float32)
    python bench/fold_backends.py --elements 1e9 --ops fold_batchnorm --no-sweep   # 4 GB float32: ~10 GB free memory
    python bench/fold_backends.py --json bench/out/fold_backends.json

Three parts:
1. numba's one-time cost, each in a fresh subprocess: importing it, and the
   first call, with an empty cache (compilation) and with a warm one (what
   every later process pays).
2. Every op at --elements per dtype: the median of --repeats warm calls for
   each backend, and the peak memory numpy allocated during one call
   (tracemalloc) over the size of the result: 1.00 means no temporaries.
   From them, per op, the size from which one call saves numba's one-time
   cost (times grow linearly with size); their median is the cold
   NUMBA_THRESHOLD (pyonnxopt/fold/select.py).
3. A sweep of sizes for BN folding: where numba starts to win warm
   (`crossover`); NUMBA_WARM_THRESHOLD, used once numba is loaded, sits at
   or above it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _util import environment, median, table  # noqa: E402

from pyonnxopt import fold  # noqa: E402

MB = 1 << 20


def conv_weight(n: int, dtype, out_channels: int = 256) -> np.ndarray:
    """A [out_channels, C_in, 3, 3] weight of about n elements, seeded."""
    c_in = max(1, n // (out_channels * 9))
    rng = np.random.default_rng(0)
    return rng.standard_normal((out_channels, c_in, 3, 3), dtype=np.float32).astype(dtype)


def cases(n: int, dtype) -> dict:
    """op name -> (function of backend, result bytes)."""
    w = conv_weight(n, dtype)
    c = w.shape[0]
    rng = np.random.default_rng(1)
    scale, beta, mean = (rng.standard_normal(c) for _ in range(3))
    var = rng.random(c) + 0.5
    ct = w.reshape(w.shape[1], w.shape[0], 3, 3)  # a ConvTranspose weight: channels on axis 1
    m2 = w.reshape(w.shape[0] * 9, w.shape[1])  # a MatMul weight
    other = np.float16 if np.dtype(dtype) != np.float16 else np.float32
    return {
        "fold_batchnorm": (lambda b: fold.fold_batchnorm(w, None, scale, beta, mean, var, 1e-5, 0, backend=b), w.nbytes),
        "scale_axis1": (lambda b: fold.scale_channels(ct, scale, 1, backend=b), w.nbytes),
        "transpose_conv": (lambda b: fold.transpose(w, (1, 0, 2, 3), backend=b), w.nbytes),
        "transpose_2d": (lambda b: fold.transpose(m2, (1, 0), backend=b), w.nbytes),
        f"cast_to_{np.dtype(other).name}": (lambda b: fold.cast(w, other, backend=b), w.size * np.dtype(other).itemsize),
    }


def timed(fn, repeats: int, min_time: float = 0.0) -> float:
    """Median seconds of `repeats` calls (more when they are faster than min_time together)."""
    times = []
    start = time.perf_counter()
    while len(times) < repeats or time.perf_counter() - start < min_time:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return median(times)


def peak_ratio(fn, result_bytes: int) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / result_bytes
    finally:
        tracemalloc.stop()


ONE_TIME = r"""
import time, numpy as np
t = time.perf_counter()
from pyonnxopt import fold
from pyonnxopt.fold import numba_backend
imported = time.perf_counter() - t
w = np.ones((8, 8, 3, 3), np.float32)
t = time.perf_counter()
fold.fold_batchnorm(w, None, np.ones(8), np.zeros(8), np.zeros(8), np.ones(8), 1e-5, 0, backend="numba")
print(imported, time.perf_counter() - t)
"""


def one_time_cost() -> dict:
    """numba's import and first call, in fresh processes: cache empty, then warm."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ("compile", "cached"):
            r = subprocess.run([sys.executable, "-c", ONE_TIME], env=env, capture_output=True, text=True, check=True)
            imported, first = map(float, r.stdout.split()[-2:])
            out[label] = {"import_s": imported, "first_call_s": first, "total_s": imported + first}
    return out


def sweep(max_elements: int, dtype, backends, repeats: int) -> list:
    rows = []
    n = 1 << 14
    while n <= max_elements:
        fn, _ = cases(n, dtype)["fold_batchnorm"]
        row = {"elements": n, "dtype": np.dtype(dtype).name, "bytes": conv_weight(n, dtype).nbytes}
        for b in backends:
            fn(b)  # warm
            row[b] = timed(lambda: fn(b), repeats, min_time=0.2)
        rows.append(row)
        n *= 4
    return rows


def crossover(rows: list, one_time_s: float) -> dict:
    """Smallest weight (bytes) from which numba wins at every larger size, and
    the smallest one whose single call saves numba's one-time cost."""
    win = None
    for row in reversed(rows):
        if row["numba"] < row["numpy"]:
            win = row["bytes"]
        else:
            break
    alone = next((r["bytes"] for r in rows if r["numpy"] - r["numba"] >= one_time_s), None)
    return {"crossover_bytes": win, "pays_alone_bytes": alone}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--elements", type=float, default=1e8, help="weight elements per op (default 1e8)")
    p.add_argument("--dtypes", default="float32,float16")
    p.add_argument("--ops", default="", help="only these ops (comma-separated names from the table)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sweep-max", type=float, default=None, help="largest size of the sweep (default: --elements)")
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--json", help="also write every number to this file")
    args = p.parse_args(argv)

    backends = [b for b in fold.BACKENDS if fold.available(b)]
    env = environment()
    env.update(numba_threads=_numba_threads(), load_avg_1min=os.getloadavg()[0])
    print(f"backends: {', '.join(backends)}; {env['cpus']} CPUs; load {env['load_avg_1min']:.2f}")
    result = {"environment": env, "args": vars(args), "backends": backends}

    if "numba" in backends:
        cost = one_time_cost()
        result["numba_one_time"] = cost
        print(f"\nnumba one-time cost: import {cost['cached']['import_s']:.2f} s; first call "
              f"{cost['compile']['first_call_s']:.2f} s compiling, {cost['cached']['first_call_s']:.2f} s from the cache")

    rows = []
    for dtype in args.dtypes.split(","):
        weight_bytes = conv_weight(int(args.elements), dtype).nbytes
        for op, (fn, nbytes) in cases(int(args.elements), dtype).items():
            if args.ops and op not in args.ops.split(","):
                continue
            row = {"op": op, "dtype": dtype, "elements": int(args.elements), "weight_bytes": weight_bytes, "result_mb": nbytes / MB}
            for b in backends:
                fn(b)  # the first call loads kernels; the table is about warm calls
                row[b] = timed(lambda: fn(b), args.repeats)
            row["numpy_peak_x"] = peak_ratio(lambda: fn("numpy"), nbytes)
            rows.append(row)
    result["ops"] = rows
    repays = "numba_one_time" in result
    if repays:  # times grow linearly with size: where one call saves numba's one-time cost
        one_time = result["numba_one_time"]["cached"]["total_s"]
        for r in rows:
            saved = r["numpy"] - r["numba"]
            r["repays_bytes"] = one_time / saved * r["weight_bytes"] if saved > 0 else None
    headers = ["op", "dtype", "result MB"] + [f"{b} s" for b in backends] + [f"numpy/{b}" for b in backends[1:]] \
        + ["numpy peak"] + (["one call repays numba"] if repays else [])
    print(f"\n{int(args.elements):.3g} weight elements, median of {args.repeats} warm calls:")
    print(table(headers, [[r["op"], r["dtype"], f"{r['result_mb']:.0f}"] + [f"{r[b]:.3f}" for b in backends]
                          + [f"{r['numpy'] / r[b]:.2f}x" for b in backends[1:]] + [f"{r['numpy_peak_x']:.2f}x"]
                          + ([_mb(r["repays_bytes"])] if repays else []) for r in rows]))
    if repays:
        sizes = [r["repays_bytes"] if r["repays_bytes"] is not None else float("inf") for r in rows]
        result["repays_median_bytes"] = median(sizes)
        print(f"median over the ops: one call repays numba's one-time cost ({one_time:.2f} s) from "
              f"{_mb(result['repays_median_bytes'])}: the cold NUMBA_THRESHOLD")

    if "numba" in backends and not args.no_sweep:
        one_time = result["numba_one_time"]["cached"]["total_s"]
        result["sweep"] = {}
        for dtype in args.dtypes.split(","):
            srows = sweep(int(args.sweep_max or args.elements), dtype, backends, args.repeats)
            found = crossover(srows, one_time)
            result["sweep"][dtype] = {"rows": srows, **found}
            print(f"\nfold_batchnorm {dtype} by size (warm medians):")
            print(table(["elements", "MB"] + [f"{b} s" for b in backends] + ["numpy/numba"],
                        [[f"{r['elements']:.3g}", f"{r['bytes'] / MB:.2f}"] + [f"{r[b]:.5f}" for b in backends]
                         + [f"{r['numpy'] / r['numba']:.2f}x"] for r in srows]))
            print(f"numba wins warm from {_mb(found['crossover_bytes'])} on (NUMBA_WARM_THRESHOLD sits at or above it); "
                  f"one call saves its one-time cost ({one_time:.2f} s) from {_mb(found['pays_alone_bytes'])}")
    select = fold.select
    print(f"\nthresholds in use: numba {_mb(select.NUMBA_THRESHOLD)} (cold), {_mb(select.NUMBA_WARM_THRESHOLD)} "
          f"(once loaded), cupy {_mb(select.CUPY_THRESHOLD)}; environment overrides: "
          f"{ {k: v for k, v in os.environ.items() if k.startswith('PYONNXOPT_') and k.endswith('_THRESHOLD')} }")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def _mb(nbytes) -> str:
    if nbytes is None or nbytes == float("inf"):
        return "never (in this range)"
    return f"{nbytes / MB:.2f} MB" if nbytes < 1 << 30 else f"{nbytes / (1 << 30):.2f} GB"


def _numba_threads():
    try:
        import numba

        return numba.get_num_threads()
    except ImportError:
        return None


if __name__ == "__main__":
    sys.exit(main())
