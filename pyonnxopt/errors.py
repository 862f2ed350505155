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


FIRST_LINE_LIMIT = 320


def first_line(e: BaseException) -> str:
    """The first line of an exception's message, or its type name: how a
    dependency's multi-line error becomes one line. A line longer than
    FIRST_LINE_LIMIT keeps its start and its end, where onnxruntime puts
    the reason ("... Status Message: ...")."""
    text = str(e).strip()
    if not text:
        return type(e).__name__
    line = text.splitlines()[0]
    if len(line) <= FIRST_LINE_LIMIT:
        return line
    half = (FIRST_LINE_LIMIT - 5) // 2
    return f"{line[:half]} ... {line[-half:]}"
