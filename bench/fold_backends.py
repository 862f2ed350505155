"""Where each fold backend wins: numpy against numba and cupy (each when
present) on the weight arithmetic of the fusion passes.

    python bench/fold_backends.py                      # 1e8 weight elements (400 MB float32)
    python bench/fold_backends.py --elements 1e9 --ops fold_batchnorm --no-sweep   # 4 GB float32: ~10 GB free memory
    python bench/fold_backends.py --sweep-ops fold_batchnorm,transpose_2d --sweep-max 3e8
    python bench/fold_backends.py --json bench/out/fold_backends.json

Three parts:
1. The one-time cost of numba and of cupy, each in a fresh subprocess:
   importing it (for cupy also asking the driver for a device), and the
   first call, with an empty kernel cache (compilation) and with a warm one
   (what every later process pays). cupy's first call also creates the CUDA
   context.
2. Every op at --elements per dtype: the median of --repeats warm calls for
   each backend, and the peak memory numpy allocated during one call
   (tracemalloc) over the size of the result: 1.00 means no temporaries.
   From them, per op and per accelerated backend, the size from which one
   call saves that backend's one-time cost against numpy (times grow
   linearly with size); their median over the ops is the cold threshold
   (NUMBA_THRESHOLD, CUPY_THRESHOLD in pyonnxopt/fold/select.py).
3. A sweep of sizes for --sweep-ops (BN folding by default): where each
   accelerated backend starts to beat numpy warm (`crossover`;
   NUMBA_WARM_THRESHOLD, used once numba is loaded, sits at or above
   numba's), and where cupy starts to beat numba warm.
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

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _util import environment, error_line, median, table  # noqa: E402

from pyonnxopt import fold  # noqa: E402

MB = 1 << 20
OUT_CHANNELS = 256
# Where each accelerated backend keeps its compiled kernels between processes.
CACHE_DIR_VARS = {"numba": "NUMBA_CACHE_DIR", "cupy": "CUPY_CACHE_DIR"}


def conv_weight(n: int, dtype) -> np.ndarray:
    """A [OUT_CHANNELS, C_in, 3, 3] weight of about n elements, seeded."""
    rng = np.random.default_rng(0)
    return rng.standard_normal((OUT_CHANNELS, _c_in(n), 3, 3), dtype=np.float32).astype(dtype)


def weight_bytes(n: int, dtype) -> int:
    """conv_weight(n, dtype).nbytes, without drawing gigabytes of random numbers."""
    return OUT_CHANNELS * _c_in(n) * 9 * np.dtype(dtype).itemsize


def _c_in(n: int) -> int:
    return max(1, n // (OUT_CHANNELS * 9))


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


def warm_time(fn, backend: str, repeats: int, min_time: float = 0.0):
    """timed() after one untimed call (which loads kernels); None, with the
    error printed, when the backend fails: one broken backend must not lose
    the other numbers of a run."""
    try:
        fn(backend)
        return timed(lambda: fn(backend), repeats, min_time)
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        print(f"  {backend} failed: {type(e).__name__}: {error_line(str(e))}")
        return None


def peak_ratio(fn, result_bytes: int) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / result_bytes
    finally:
        tracemalloc.stop()


# pyonnxopt is imported before the clock starts: every process pays that.
ONE_TIME = r"""
import sys, time, numpy as np
from pyonnxopt import fold
backend = sys.argv[1]
t = time.perf_counter()
assert fold.available(backend)  # imports it; cupy also asks the driver for a device
imported = time.perf_counter() - t
w = np.ones((8, 8, 3, 3), np.float32)
t = time.perf_counter()
fold.fold_batchnorm(w, None, np.ones(8), np.zeros(8), np.zeros(8), np.ones(8), 1e-5, 0, backend=backend)
print(imported, time.perf_counter() - t)
"""


def one_time_cost(backend: str):
    """The backend's import and first call, in fresh processes: kernel cache
    empty, then warm. None, with the error printed, when the process fails."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        # this checkout's pyonnxopt, from whatever directory the script runs in
        path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=path, **{CACHE_DIR_VARS[backend]: cache})
        for label in ("compile", "cached"):
            r = subprocess.run([sys.executable, "-c", ONE_TIME, backend], env=env, capture_output=True, text=True,
                               check=False)
            if r.returncode != 0:
                print(f"{backend}'s one-time cost could not be measured: {error_line(r.stderr)}")
                return None
            imported, first = map(float, r.stdout.split()[-2:])
            out[label] = {"import_s": imported, "first_call_s": first, "total_s": imported + first}
    return out


def repays_bytes(row: dict, backend: str, one_time_s: float):
    """The weight size from which one call of `backend` saves its one-time
    cost against numpy (times grow linearly with size); None if it never does."""
    if one_time_s is None or row[backend] is None:
        return None
    saved = row["numpy"] - row[backend]
    return one_time_s / saved * row["weight_bytes"] if saved > 0 else None


def sweep(op: str, max_elements: int, dtype, backends, repeats: int) -> list:
    rows = []
    n = 1 << 14
    while n <= max_elements:
        fn, _ = cases(n, dtype)[op]
        row = {"elements": n, "dtype": np.dtype(dtype).name, "bytes": weight_bytes(n, dtype)}
        for b in backends:
            row[b] = warm_time(fn, b, repeats, min_time=0.2)
        rows.append(row)
        n *= 4
    return rows


def crossover(rows: list, fast: str, slow: str, one_time_s=None) -> dict:
    """Smallest weight (bytes) from which `fast` beats `slow` at every larger
    size, and (given `fast`'s one-time cost) the smallest one whose single
    call saves that cost."""
    win = None
    for row in reversed(rows):
        if row[fast] is not None and row[slow] is not None and row[fast] < row[slow]:
            win = row["bytes"]
        else:
            break
    found = {"crossover_bytes": win}
    if one_time_s is not None:
        found["pays_alone_bytes"] = next((r["bytes"] for r in rows if r[fast] is not None
                                          and r[slow] - r[fast] >= one_time_s), None)
    return found


def ratio(row: dict, slow: str, fast: str) -> str:
    """slow's time over fast's: above 1.00x, `fast` wins."""
    return "-" if row[slow] is None or row[fast] is None else f"{row[slow] / row[fast]:.2f}x"


def seconds(t, digits: int = 3) -> str:
    return "error" if t is None else f"{t:.{digits}f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--elements", type=float, default=1e8, help="weight elements per op (default 1e8)")
    p.add_argument("--dtypes", default="float32,float16")
    p.add_argument("--ops", default="", help="only these ops (comma-separated names from the table)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sweep-max", type=float, default=None, help="largest size of the sweep (default: --elements)")
    p.add_argument("--sweep-ops", default="fold_batchnorm", help="ops to sweep (comma-separated; default fold_batchnorm)")
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--no-ops", action="store_true", help="skip part 2 (the ops at --elements)")
    p.add_argument("--json", help="also write every number to this file")
    args = p.parse_args(argv)

    backends = [b for b in fold.BACKENDS if fold.available(b)]
    fast = [b for b in backends if b != "numpy"]  # the accelerated ones
    both = "numba" in fast and "cupy" in fast
    env = environment()
    env.update(numba_threads=_numba_threads(), load_avg_1min=os.getloadavg()[0], gpu=_gpu())
    print(f"backends: {', '.join(backends)}; {env['cpus']} CPUs, numba threads {env['numba_threads']}; "
          f"load {env['load_avg_1min']:.2f}; GPU: {env['gpu'] or 'none usable'}")
    if not fold.available("cupy"):
        print(f"cupy skipped: {fold.select.unavailable_reason('cupy')}")
    result = {"environment": env, "args": vars(args), "backends": backends, "one_time": {}}

    one_time = {}  # backend -> seconds a fresh process pays before its first result (cache warm)
    for b in fast:
        cost = result["one_time"][b] = one_time_cost(b)
        one_time[b] = cost and cost["cached"]["total_s"]
        if cost:
            print(f"\n{b} one-time cost: import {cost['cached']['import_s']:.2f} s; first call "
                  f"{cost['compile']['first_call_s']:.2f} s compiling, {cost['cached']['first_call_s']:.2f} s from the cache")

    rows = [] if args.no_ops else op_rows(args, backends)
    result["ops"] = rows
    for r in rows:
        r["repays_bytes"] = {b: repays_bytes(r, b, one_time[b]) for b in fast}
    if rows:
        headers = ["op", "dtype", "result MB"] + [f"{b} s" for b in backends] + [f"numpy/{b}" for b in fast] \
            + (["numba/cupy"] if both else []) + ["numpy peak"] + [f"one call repays {b}" for b in fast]
        print(f"\n{int(args.elements):.3g} weight elements, median of {args.repeats} warm calls:")
        print(table(headers, [[r["op"], r["dtype"], f"{r['result_mb']:.0f}"] + [seconds(r[b]) for b in backends]
                              + [ratio(r, "numpy", b) for b in fast] + ([ratio(r, "numba", "cupy")] if both else [])
                              + [f"{r['numpy_peak_x']:.2f}x"] + [_mb(r["repays_bytes"][b]) for b in fast] for r in rows]))
        result["repays_median_bytes"] = {}
        for b in fast:
            sizes = [r["repays_bytes"][b] if r["repays_bytes"][b] is not None else float("inf") for r in rows]
            result["repays_median_bytes"][b] = median(sizes)
            print(f"median over the ops: one call repays {b}'s one-time cost ({_s(one_time[b])}) from "
                  f"{_mb(median(sizes))}: the cold {b.upper()}_THRESHOLD")

    if fast and not args.no_sweep:
        result["sweep"] = {}
        for op in args.sweep_ops.split(","):
            for dtype in args.dtypes.split(","):
                result["sweep"][f"{op}/{dtype}"] = sweep_report(op, dtype, args, backends, one_time)
    select = fold.select
    print(f"\nthresholds in use: numba {_mb(select.NUMBA_THRESHOLD)} (cold), {_mb(select.NUMBA_WARM_THRESHOLD)} "
          f"(once loaded), cupy {_mb(select.CUPY_THRESHOLD)}; environment overrides: "
          f"{ {k: v for k, v in os.environ.items() if k.startswith('PYONNXOPT_') and k.endswith('_THRESHOLD')} }")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def op_rows(args, backends) -> list:
    """Part 2: every op at --elements, per dtype."""
    rows = []
    for dtype in args.dtypes.split(","):
        for op, (fn, nbytes) in cases(int(args.elements), dtype).items():
            if args.ops and op not in args.ops.split(","):
                continue
            row = {"op": op, "dtype": dtype, "elements": int(args.elements),
                   "weight_bytes": weight_bytes(int(args.elements), dtype), "result_mb": nbytes / MB}
            for b in backends:
                row[b] = warm_time(fn, b, args.repeats)  # warm calls: the one-time cost is apart
            row["numpy_peak_x"] = peak_ratio(lambda: fn("numpy"), nbytes)
            rows.append(row)
    return rows


def sweep_report(op: str, dtype: str, args, backends, one_time: dict) -> dict:
    """Part 3 for one op and dtype: the table and where each backend starts to win."""
    fast = [b for b in backends if b != "numpy"]
    both = "numba" in fast and "cupy" in fast
    rows = sweep(op, int(args.sweep_max or args.elements), dtype, backends, args.repeats)
    found = {b: crossover(rows, b, "numpy", one_time[b]) for b in fast}
    if both:
        found["cupy_vs_numba"] = crossover(rows, "cupy", "numba")
    print(f"\n{op} {dtype} by size (warm medians):")
    print(table(["elements", "MB"] + [f"{b} s" for b in backends] + [f"numpy/{b}" for b in fast]
                + (["numba/cupy"] if both else []),
                [[f"{r['elements']:.3g}", f"{r['bytes'] / MB:.2f}"] + [seconds(r[b], 5) for b in backends]
                 + [ratio(r, "numpy", b) for b in fast] + ([ratio(r, "numba", "cupy")] if both else []) for r in rows]))
    for b in fast:
        note = " (NUMBA_WARM_THRESHOLD sits at or above it)" if b == "numba" else ""
        print(f"{b} beats numpy warm from {_mb(found[b]['crossover_bytes'])} on{note}; one call saves its "
              f"one-time cost ({_s(one_time[b])}) from {_mb(found[b].get('pays_alone_bytes'))}")
    if both:
        print(f"cupy beats numba warm from {_mb(found['cupy_vs_numba']['crossover_bytes'])} on")
    return {"rows": rows, **found}


def _mb(nbytes) -> str:
    if nbytes is None or nbytes == float("inf"):
        return "never (in this range)"
    if nbytes >= 1 << 62:  # a threshold no weight reaches (CUPY_THRESHOLD)
        return "never by size"
    return f"{nbytes / MB:.2f} MB" if nbytes < 1 << 30 else f"{nbytes / (1 << 30):.2f} GB"


def _s(seconds) -> str:
    return "not measured" if seconds is None else f"{seconds:.2f} s"


def _numba_threads():
    try:
        import numba

        return numba.get_num_threads()
    except ImportError:
        return None


def _gpu():
    """cupy's version and the device's name, when cupy runs here."""
    if not fold.available("cupy"):
        return None
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    return f"{props['name'].decode()} (cupy {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()})"


if __name__ == "__main__":
    sys.exit(main())
