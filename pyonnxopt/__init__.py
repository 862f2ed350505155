"""pyonnxopt: an ONNX model optimizer with a native core.

    import pyonnxopt
    model = pyonnxopt.load("model.onnx")      # path, bytes or onnx.ModelProto
    for node in model.graph.nodes: ...
    model.save("out.onnx", external_data=True)
    model, report = pyonnxopt.optimize("model.onnx", "out.onnx")
"""

from pyonnxopt.errors import BackendUnavailable, Error, MissingDependency, ModelError, PassError, VerificationError
from pyonnxopt.model import Function, Graph, Model, Node, SaveResult, Tensor, Value, load

# Imported here, not on first call: importing the submodule later would bind
# `pyonnxopt.optimize` to the module instead of the function.
from pyonnxopt.optimize import optimize  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable",
    "Error",
    "Function",
    "Graph",
    "MissingDependency",
    "Model",
    "ModelError",
    "Node",
    "PassError",
    "SaveResult",
    "Tensor",
    "Value",
    "VerificationError",
    "__version__",
    "load",
    "optimize",
]
