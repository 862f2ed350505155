"""Proof that an optimized model computes what its original does: both run
in onnxruntime on the same inputs, every graph output and every intermediate
they share by name compared, with a structural diff.

    from pyonnxopt.verify import verify
    result = verify("model.onnx", "model.opt.onnx", samples=2)
    result["ok"], result["first_mismatch"]
"""

from pyonnxopt.verify.metrics import DEFAULT_TOLERANCES, compare_arrays, merge
from pyonnxopt.verify.run import OnnxRuntimeFailure, verify
from pyonnxopt.verify.structure import structure_diff

__all__ = ["DEFAULT_TOLERANCES", "OnnxRuntimeFailure", "compare_arrays", "merge", "structure_diff", "verify"]
