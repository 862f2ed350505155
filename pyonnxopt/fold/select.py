"""Which fold backend runs: by name, or chosen by the size of the tensor.

The thresholds come from bench/fold_backends.py (bench/README.md has the
numbers). numba, measured on 2 cores: warm, its kernels beat numpy's from
about 1 MB on a quiet machine and from 16-64 MB on a busy one, but the first
use in a process costs 1.8 s or more (importing numba, loading the cached
kernels). So numba is chosen for a tensor of NUMBA_THRESHOLD bytes, the
median over the measured ops of the size where one call repays that cost
(1.3-1.4 GB in two runs), and once it is loaded, from NUMBA_WARM_THRESHOLD.

cupy is never chosen by size: CUPY_THRESHOLD is 2**62 bytes, more than any
weight. Measured on one NVIDIA H200 on PCIe 5 x16 with 16 CPU cores
(bench/gpu_check.sh: `fold_backends.py --elements 1e8 --sweep-max 6.8e7
--sweep-ops fold_batchnorm,transpose_2d`, and `--elements 1e9 --dtypes
float32 --ops fold_batchnorm,cast_to_float16`), every op is a round trip
through pageable host memory (6.8 GB/s up, 14 GB/s down), and cupy took
4.5-63x numba's time at every op and size measured, 32 KB to 4 GB (BN
folding of 400 MB float32: 0.35 s, numba 0.018 s, numpy 0.098 s). numba is
a dependency, so whoever has cupy has numba. That host's 16 cores make numba
strong; a GPU host with fewer is rare, and even numba on 2 cores (this
project's CI machine: 0.10-0.42 s per op at 1e8 elements) was faster than
the H200 on 6 of the 10 ops. Without numba, cupy beats numpy on float16
scaling (3-3.5x) and on the float32 -> float16 cast of 4 GB (2.6x), but not
on float32 scaling (0.3-0.55x) or float32 transposes (0.4-0.75x), and one
call repays its one-time cost (0.6 s: import 0.15 s, CUDA context and
cached kernels 0.45 s) in the median op at no size measured. `backend="cupy"`, or
PYONNXOPT_CUPY_THRESHOLD, still uses it.

PYONNXOPT_NUMBA_THRESHOLD (both numba thresholds) and
PYONNXOPT_CUPY_THRESHOLD override them, in bytes (e.g. 1e8).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
from typing import Optional

from pyonnxopt.errors import BackendUnavailable, first_line

log = logging.getLogger(__name__)

BACKENDS = ("numpy", "numba", "cupy")
NUMBA_THRESHOLD = 1 << 30
NUMBA_WARM_THRESHOLD = 16 << 20
CUPY_THRESHOLD = 1 << 62  # never by size: see above

_INSTALL = {"numba": "pip install numba", "cupy": "pip install cupy-cuda12x"}


def _threshold(env: str, default: int) -> int:
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    try:
        return int(float(text))
    except ValueError:
        log.warning("%s=%r is not a number of bytes; using %d", env, text, default)
        return default


def numba_threshold() -> int:
    """The smaller threshold once numba's backend is loaded in this process."""
    loaded = "pyonnxopt.fold.numba_backend" in sys.modules
    return _threshold("PYONNXOPT_NUMBA_THRESHOLD", NUMBA_WARM_THRESHOLD if loaded else NUMBA_THRESHOLD)


def cupy_threshold() -> int:
    return _threshold("PYONNXOPT_CUPY_THRESHOLD", CUPY_THRESHOLD)


@functools.lru_cache(maxsize=None)
def unavailable_reason(name: str) -> Optional[str]:
    """None when backend `name` can run here, else why not (one line). The
    first call for numba or cupy imports it."""
    if name not in BACKENDS:
        raise ValueError(f"unknown fold backend {name!r}; one of {', '.join(BACKENDS)}")
    if name == "numpy":
        return None
    try:
        importlib.import_module(f"pyonnxopt.fold.{name}_backend")
    except Exception as e:  # a broken install must not break automatic choice
        if isinstance(e, ImportError) and e.name == name:
            return f"{name} is not installed ({_INSTALL[name]})"
        return f"{name} does not import ({first_line(e)}); reinstall it ({_INSTALL[name]})"
    if name == "cupy":
        from pyonnxopt.fold import cupy_backend

        return cupy_backend.device_problem()
    return None


def available(name: str) -> bool:
    return unavailable_reason(name) is None


def backend_module(name: str):
    """The backend's module; BackendUnavailable (saying what to install) when it cannot run."""
    reason = unavailable_reason(name)
    if reason is not None:
        raise BackendUnavailable(f"fold backend {name!r} is unavailable: {reason}")
    return importlib.import_module(f"pyonnxopt.fold.{name}_backend")


def choose_backend(nbytes: int) -> str:
    """The backend for a tensor of `nbytes`: cupy, numba or numpy, the first
    that the size calls for and that can run here."""
    if nbytes >= cupy_threshold() and available("cupy"):
        return "cupy"
    if nbytes >= numba_threshold() and available("numba"):
        return "numba"
    return "numpy"
