"""onnxruntime sessions for benchmarking: provider, threads and graph
optimization level as the user asked, and one-line errors when the provider
is not there or the model does not load."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

from pyonnxopt.errors import Error, MissingDependency, first_line

# --provider name -> onnxruntime's providers, most preferred first (onnxruntime
# places the nodes a provider cannot take on the next one).
PROVIDERS = {
    "cpu": ["CPUExecutionProvider"],
    "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
    "tensorrt": ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
}
_INSTALL = {"cuda": "install onnxruntime-gpu",
            "tensorrt": "install onnxruntime-gpu and TensorRT (libnvinfer) for your CUDA version"}
LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "all": "ORT_ENABLE_ALL"}


class LoadError(Error):
    """onnxruntime cannot load a model (the message says which and why)."""


@dataclass(frozen=True)
class Settings:
    """How every session of one benchmark is made (the same for both models)."""
    provider: str = "cpu"
    intra_op_threads: Optional[int] = None  # None: onnxruntime's default (one per physical core)
    inter_op_threads: Optional[int] = None  # set: parallel execution of independent branches
    level: str = "all"

    def to_json(self) -> dict:
        return asdict(self)


def ort():
    try:
        import onnxruntime
    except ImportError as e:
        raise MissingDependency("bench needs onnxruntime: pip install onnxruntime (or onnxruntime-gpu)") from e
    return onnxruntime


def check_settings(settings: Settings) -> None:
    """The errors a user can fix, before anything is loaded."""
    if settings.provider not in PROVIDERS:
        raise Error(f"--provider {settings.provider}: expected one of {', '.join(PROVIDERS)}")
    if settings.level not in LEVELS:
        raise Error(f"--level {settings.level}: expected one of {', '.join(LEVELS)}")
    for flag, value in (("--threads", settings.intra_op_threads), ("--inter-threads", settings.inter_op_threads)):
        if value is not None and value < 1:
            raise Error(f"{flag} {value}: expected a thread count of 1 or more")
    wanted = PROVIDERS[settings.provider][0]
    available = ort().get_available_providers()
    if wanted not in available:
        raise Error(f"--provider {settings.provider}: onnxruntime here has no {wanted} "
                    f"(available: {', '.join(available)}); {_INSTALL[settings.provider]}")


def options_spec(settings: Settings) -> dict:
    """The session's options as plain data: what the cold worker (a process
    without pyonnxopt) receives, and what this process builds from too."""
    return {"providers": PROVIDERS[settings.provider], "level": LEVELS[settings.level],
            "intra_op_threads": settings.intra_op_threads, "inter_op_threads": settings.inter_op_threads}


def session_options(settings: Settings, profile_prefix: Optional[str] = None):
    from pyonnxopt.benchmark.cold_worker import apply_options

    opts = apply_options(ort(), options_spec(settings))
    if profile_prefix is not None:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    return opts


def create_session(path: str, settings: Settings, label: str, profile_prefix: Optional[str] = None):
    """An InferenceSession for the model file at `path`; a model onnxruntime
    rejects becomes "model A (<path>): onnxruntime cannot load it: ..."."""
    rt = ort()
    rt.set_default_logger_severity(4)
    try:
        return rt.InferenceSession(path, session_options(settings, profile_prefix),
                                   providers=PROVIDERS[settings.provider])
    except Exception as e:  # InvalidGraph, Fail, NotImplemented, ...: onnxruntime's own words
        raise LoadError(load_message(label, path, first_line(e))) from None


def load_message(label: str, path: str, reason: str) -> str:
    return f"model {label} ({path}): onnxruntime cannot load it: {reason}"


def warm_up_runtime(settings: Settings) -> None:
    """Creates and drops a one-node session, so the first model measured does
    not also pay for onnxruntime's one-time setup (environment, thread pools,
    kernel registries) in its warm creation time."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "warm_up", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    rt = ort()
    rt.InferenceSession(model.SerializeToString(), session_options(settings), providers=PROVIDERS[settings.provider])
