"""Session creation in a fresh process (cold: nothing of onnxruntime or the
model loaded yet, though the OS may still cache the file), and that
process's peak RSS and device memory after a few runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from pyonnxopt.benchmark import cold_worker
from pyonnxopt.benchmark.session import LoadError, Settings, load_message, options_spec
from pyonnxopt.errors import Error

RUNS = 3  # inferences after creation: enough for the arena and caches to reach their size


def cold_start(path: str, settings: Settings, feeds: dict, label: str, runs: int = RUNS,
               timeout_s: float = 600) -> dict:
    """{"create_s", "peak_rss_mb", "device_peak_mb", "device_note"} measured
    by cold_worker.py in a new Python process."""
    with tempfile.TemporaryDirectory(prefix="pyonnxopt-cold-") as tmp:
        feeds_path = os.path.join(tmp, "feeds.npz")
        np.savez(feeds_path, **feeds)
        request = {"model": os.path.abspath(path), "provider": settings.provider, "options": options_spec(settings),
                   "feeds": feeds_path, "runs": runs}
        try:
            done = subprocess.run([sys.executable, cold_worker.__file__, json.dumps(request)], capture_output=True,
                                  text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise Error(f"model {label} ({path}): the cold-start process took over {timeout_s:.0f} s "
                        f"(skip it with --no-cold)") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise Error(f"model {label} ({path}): the cold-start process failed: {why[:200]}")
    result = json.loads(lines[-1])
    if "error" in result:
        if result["error"].startswith("cannot run it"):
            raise Error(f"model {label} ({path}): onnxruntime {result['error']}")
        raise LoadError(load_message(label, path, result["error"]))
    return result
