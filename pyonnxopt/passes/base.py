"""The pass protocol: a named, described rewrite that says what it changed."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyonnxopt.model import Model


@dataclass(frozen=True)
class PassOptions:
    """What the user chose for the whole pipeline; every pass gets the same."""

    fold_size_limit: int = 1 << 20  # a fold may not grow a result past its inputs and this many bytes
    allow_lossy: bool = False  # remove Cast round trips that lose precision (f32->f16->f32)
    remove_training_residue: bool = False  # drop training-mode Dropout and ai.onnx.preview.training ops
    target: str = "onnx"  # "onnx": standard ops only; "ort": fusions may emit onnxruntime's com.microsoft ops


@dataclass
class PassResult:
    modified: bool
    stats: dict = field(default_factory=dict)
    # Only value types or shapes changed (value_info), not what the graph
    # computes: new to the passes after it, no change for the fixed point.
    retyped: bool = False


class Pass:
    """A rewrite of the model. `run` returns PassResult; "did not apply" is
    `modified=False`, never an exception."""

    name: str = ""
    description: str = ""
    # Runs only in an iteration whose earlier passes changed nothing: a
    # fusion then sees the graph the cleanup passes settled on (no-op
    # Reshapes gone, computed shapes constant, dims inferred), where its
    # larger variants match, rather than a half-cleaned one.
    after_cleanup: bool = False
    # Runs only in an iteration in which no earlier pass, fusions included,
    # changed anything: a rewrite that restates what fusions read (rows,
    # head splits) waits until none of them can still fire.
    after_fusions: bool = False
    # A second run straight after its own changes nothing, so the pipeline
    # skips it while no other pass changed the model since (every pass is
    # skipped while nothing at all changed since its last run).
    idempotent: bool = False

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        raise TypeError(f"{type(self).__name__} must define run()")


class NativePass(Pass):
    """A pass implemented in csrc/passes, run on the native IR without leaving C++."""

    def __init__(self, name: str, description: str):
        self.name = name
        self.description = description

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        stats = model._core.run_pass(self.name, options.fold_size_limit, options.allow_lossy,
                                     options.remove_training_residue)
        return PassResult(stats.pop("modified"), stats)
