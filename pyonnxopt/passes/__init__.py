"""Passes: named rewrites of a model, run to a fixed point by `run_passes`.

    from pyonnxopt.passes import run_passes
    model, report = run_passes("model.onnx", passes=["eliminate_dead_code"])
"""

from pyonnxopt.passes.base import NativePass, Pass, PassOptions, PassResult
from pyonnxopt.passes.manager import PassRun, PipelineReport, run_passes
from pyonnxopt.passes.registry import all_passes, get, register, unregister

__all__ = ["NativePass", "Pass", "PassOptions", "PassResult", "PassRun", "PipelineReport", "all_passes", "get", "register", "run_passes", "unregister"]
