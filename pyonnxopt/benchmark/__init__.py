"""Honest speed numbers in onnxruntime: cold and warm session creation,
latency percentiles, throughput, peak memory, an interleaved A/B ratio and a
per-op-type profile. `bench(models, ...)` returns the bench JSON."""

from pyonnxopt.benchmark.run import bench
from pyonnxopt.benchmark.session import PROVIDERS, LEVELS, LoadError, Settings

__all__ = ["LEVELS", "PROVIDERS", "LoadError", "Settings", "bench"]
