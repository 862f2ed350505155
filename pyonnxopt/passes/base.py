"""The pass protocol: a named, described rewrite that says what it changed."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyonnxopt.model import Model


@dataclass
class PassResult:
    modified: bool
    stats: dict = field(default_factory=dict)


class Pass:
    """A rewrite of the model. `run` returns PassResult; "did not apply" is
    `modified=False`, never an exception."""

    name: str = ""
    description: str = ""

    def run(self, model: Model) -> PassResult:
        raise TypeError(f"{type(self).__name__} must define run()")


class NativePass(Pass):
    """A pass implemented in csrc/passes, run on the native IR without leaving C++."""

    def __init__(self, name: str, description: str):
        self.name = name
        self.description = description

    def run(self, model: Model) -> PassResult:
        stats = model._core.run_pass(self.name)
        return PassResult(stats.pop("modified"), stats)
