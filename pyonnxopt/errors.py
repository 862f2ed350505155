"""The exceptions pyonnxopt raises. Every user-facing failure is an `Error`."""


class Error(Exception):
    """Base class of every pyonnxopt error."""


class ModelError(Error, ValueError):
    """The input model is malformed or breaks ONNX's rules (names the file, node or tensor)."""


class PassError(Error):
    """A pass failed; the message names the pass and the ones that ran before it."""


class VerificationError(Error):
    """The optimized model's outputs differ from the original's beyond tolerance."""


class MissingDependency(Error, ImportError):
    """An optional dependency is needed for what was asked; the message says what to install."""


class BackendUnavailable(MissingDependency):
    """A fold backend asked for by name cannot run here (its package is not
    installed, or no CUDA device was found); the message says which."""


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters), or
    its type name: how a dependency's multi-line error becomes one line."""
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__
