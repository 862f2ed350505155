"""The inputs verify runs both models on: what the model declares
(`input_specs`), seeded random feeds that respect it (`random_feeds`), the
user's own samples (`load_samples`, in samples.py) and the check that a
sample fits the model (`validate_feeds`), which never casts silently."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from pyonnxopt import string_inputs
from pyonnxopt.errors import Error, ModelError, first_line
from pyonnxopt.model import Model, load
from pyonnxopt.verify.index_bounds import index_bounds
from pyonnxopt.verify.samples import Sample, load_samples
from pyonnxopt.weight_dims import weight_implied_dims, with_implied

__all__ = ["InputSpec", "input_specs", "random_feeds", "load_samples", "validate_feeds", "Sample", "describe"]


@dataclass
class InputSpec:
    """One real graph input (not an initializer).

    dtype: the numpy dtype (object for strings), None for non-tensor inputs
    (sequences, maps, optionals). shape: ints for static dims, the symbol (str)
    or None for dynamic ones; None when the model declares no rank. high: the
    exclusive upper bound found for an index-like integer input. onnx_type:
    the ONNX type as onnxruntime spells it ("tensor(float)",
    "seq(tensor(float))"). position: the index in graph.input (initializers
    listed as inputs count), which names unnamed input_<i>.pb files.
    words: what a generated string input holds (string_inputs.vocabulary)."""

    name: str
    dtype: Optional[np.dtype]
    shape: Optional[list]
    high: Optional[int] = None
    onnx_type: str = ""
    position: int = 0
    words: tuple = ()

    def __post_init__(self):
        if self.dtype is not None:
            self.dtype = np.dtype(self.dtype)
            if not self.onnx_type:  # built by hand from a dtype: a tensor of it
                self.onnx_type = _tensor_type_text(self.dtype)

    @property
    def is_tensor(self) -> bool:
        return self.onnx_type.startswith("tensor(")


def _tensor_type_text(dtype: np.dtype) -> str:
    from onnx import TensorProto, helper

    try:
        return f"tensor({TensorProto.DataType.Name(helper.np_dtype_to_tensor_dtype(dtype)).lower()})"
    except (KeyError, ValueError, TypeError):
        return f"tensor({dtype})"


def _type_text(tp) -> str:
    from onnx import TensorProto

    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(tp, kind).elem_type
        name = TensorProto.DataType.Name(elem).lower() if elem else "undefined"
        return f"{'tensor' if kind == 'tensor_type' else 'sparse_tensor'}({name})"
    if kind == "sequence_type":
        return f"seq({_type_text(tp.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({_type_text(tp.optional_type.elem_type)})"
    if kind == "map_type":
        key = TensorProto.DataType.Name(tp.map_type.key_type).lower()
        return f"map({key},{_type_text(tp.map_type.value_type)})"
    return "unknown"


def _model_proto(source):
    import onnx

    if isinstance(source, onnx.ModelProto):
        return source
    try:
        if isinstance(source, (bytes, bytearray, memoryview)):
            return onnx.load_from_string(bytes(source))
        if hasattr(source, "to_onnx"):  # pyonnxopt.Model
            return source.to_onnx()
        # Only shapes and small constants are read: big external weights stay on disk.
        return onnx.load(os.fspath(source), load_external_data=False)
    except (OSError, ValueError) as e:
        raise ModelError(f"{source if isinstance(source, (str, os.PathLike)) else '<model bytes>'}: "
                         f"cannot read the model: {first_line(e)}") from e
    except Exception as e:  # protobuf's DecodeError
        raise ModelError(f"{source if isinstance(source, (str, os.PathLike)) else '<model bytes>'}: "
                         f"not an ONNX model: {first_line(e)}") from e


def input_specs(model, loaded: Optional[Model] = None) -> List[InputSpec]:
    """The graph's real inputs (path, bytes, onnx.ModelProto or pyonnxopt.Model),
    in graph order, with index bounds found by analysis (index_bounds.py)
    and the dynamic dims the weights fix as ints (weight_dims.py; read from
    `loaded`, the same model loaded, where the caller has it)."""
    from onnx import helper

    proto = _model_proto(model)
    initializers = {t.name for t in proto.graph.initializer}
    specs = []
    for position, vi in enumerate(proto.graph.input):
        if vi.name in initializers:
            continue
        text = _type_text(vi.type)
        dtype, shape = None, None
        if vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
            try:
                dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
            except (KeyError, ValueError, TypeError):
                dtype = None
            if tt.HasField("shape"):
                shape = []
                for d in tt.shape.dim:
                    which = d.WhichOneof("value")
                    if which == "dim_value" and d.dim_value >= 0:
                        shape.append(int(d.dim_value))
                    elif which == "dim_param" and d.dim_param:
                        shape.append(d.dim_param)
                    else:
                        shape.append(None)
        specs.append(InputSpec(vi.name, dtype, shape, onnx_type=text, position=position))
    integer = [s.name for s in specs if s.dtype is not None and s.dtype.kind in "iu"]
    bounds = index_bounds(proto, integer) if integer else {}
    for s in specs:
        s.high = bounds.get(s.name)
    source = loaded if loaded is not None else model
    try:
        loaded = source if isinstance(source, Model) else load(source)
    except ModelError:  # the proto reads, our loader refuses it: dims stay as declared, strings the fallback ones
        return specs
    _fix_weight_implied_dims(specs, loaded)
    words = string_inputs.vocabulary(loaded)  # () at once where no input is a string
    for s in specs:
        s.words = words
    return specs


def _fix_weight_implied_dims(specs: List[InputSpec], model: Model) -> None:
    """Writes the dynamic dims the weights fix (an image's channels before a
    Conv, see pyonnxopt.weight_dims) into the specs as ints."""
    shapes = with_implied({s.name: s.shape for s in specs}, weight_implied_dims(model))
    for s in specs:
        s.shape = shapes[s.name]


def describe(spec: InputSpec) -> str:
    """How a spec reads in messages: "[N, 3, 224, 224] (float32)"."""
    if not spec.is_tensor:
        return spec.onnx_type
    dtype = "string" if spec.dtype is not None and spec.dtype.kind == "O" else (
        str(spec.dtype) if spec.dtype is not None else spec.onnx_type)
    if spec.shape is None:
        return f"any shape ({dtype})"
    dims = ", ".join("?" if d is None else str(d) for d in spec.shape)
    return f"[{dims}] ({dtype})"


# -- random feeds -----------------------------------------------------------

_NOT_TOKEN_IDS = ("type", "segment", "position", "pos_")  # ids with their own, smaller range


def _looks_like_token_ids(name: str) -> bool:
    lower = name.lower()
    return any(w in lower for w in ("ids", "token", "input")) and not any(w in lower for w in _NOT_TOKEN_IDS)


def _cannot_generate(spec: InputSpec, why: str = "") -> Error:
    return Error(f"input '{spec.name}' has {why or 'type ' + spec.onnx_type}, which random inputs cannot be "
                 f"made of; give it with --inputs")


def _positive_int(value, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise Error(f"{what} must be a positive integer, not {value!r}")
    return int(value)


def _dim_values(specs: Sequence[InputSpec], batch_size, dims) -> Dict[str, int]:
    symbols = {d for s in specs for d in (s.shape or []) if isinstance(d, str)}
    values = {}
    for symbol, value in (dims or {}).items():
        if symbol not in symbols:
            known = ", ".join(sorted(symbols)) or "none"
            raise Error(f"--dim {symbol}: the model has no dynamic dim named {symbol!r} (its named dims: {known})")
        values[symbol] = _positive_int(value, f"--dim {symbol}")
    if batch_size is None:
        return values
    batch_size = _positive_int(batch_size, "--batch-size")
    dynamic_first = [s for s in specs if s.is_tensor and s.shape and not isinstance(s.shape[0], int)]
    if not dynamic_first and any(s.is_tensor for s in specs):
        shapes = "; ".join(f"{s.name} {describe(s)}" for s in specs)
        raise Error(f"--batch-size {batch_size}: the model's inputs have no dynamic first dim ({shapes})")
    for s in dynamic_first:
        symbol = s.shape[0]
        if isinstance(symbol, str):
            if values.get(symbol, batch_size) != batch_size:
                raise Error(f"--batch-size {batch_size} and --dim {symbol}={values[symbol]} disagree "
                            f"(input '{s.name}' has {symbol} first)")
            values[symbol] = batch_size
    return values


def _shape(spec: InputSpec, values: Mapping[str, int], batch_size: Optional[int]) -> tuple:
    shape = []
    for axis, d in enumerate(spec.shape):
        if isinstance(d, int):
            shape.append(d)
        elif isinstance(d, str):
            shape.append(values.get(d, 1))
        else:  # unnamed dynamic dim
            shape.append(batch_size if axis == 0 and batch_size is not None else 1)
    return tuple(shape)


def _integers(rng, spec: InputSpec, shape, vocab_size) -> np.ndarray:
    info = np.iinfo(spec.dtype)
    high = spec.high
    if "mask" in spec.name.lower():
        # Attention masks: everything attended. A mask that also indexes a
        # one-row table stays in range with zeros.
        return np.full(shape, 1 if high is None or high > 1 else 0, dtype=spec.dtype)
    if vocab_size is not None and _looks_like_token_ids(spec.name):
        high = vocab_size if high is None else min(high, vocab_size)
    if high is None:
        high = 2  # 0 and 1 are in range of any table, index and count
    high = min(high, int(info.max) + 1)
    return rng.integers(0, high, size=shape, dtype=np.int64).astype(spec.dtype)


def random_feeds(specs: Sequence[InputSpec], seed: int = 0, batch_size: Optional[int] = None,
                 vocab_size: Optional[int] = None, dims: Optional[Mapping[str, int]] = None) -> Dict[str, np.ndarray]:
    """Seeded inputs that respect the specs: floats ~ N(0, 1); integers in
    [0, high) when the graph bounds them, else in [0, vocab_size) for
    token-id-like names (containing "ids", "token" or "input", but not
    "type", "segment" or "position") when vocab_size is given, else 0 or 1;
    integer or bool inputs named "*mask*" all ones; other bools at random;
    strings drawn from the spec's words.
    batch_size fills every dynamic first dim; other dynamic dims come from
    `dims` {symbol: size} or are 1, and one symbol has one size across inputs."""
    if vocab_size is not None:
        vocab_size = _positive_int(vocab_size, "--vocab-size")
    values = _dim_values(specs, batch_size, dims)
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in specs:
        if not spec.is_tensor or spec.dtype is None:
            raise _cannot_generate(spec)
        if spec.shape is None:
            raise _cannot_generate(spec, "no declared shape")
        shape = _shape(spec, values, batch_size)
        kind = spec.dtype.kind
        if kind == "f":
            feeds[spec.name] = np.asarray(rng.standard_normal(shape)).astype(spec.dtype)
        elif kind == "b":
            if "mask" in spec.name.lower():
                feeds[spec.name] = np.ones(shape, dtype=np.bool_)
            else:
                feeds[spec.name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif kind in "iu":
            feeds[spec.name] = _integers(rng, spec, shape, vocab_size)
        elif kind == "O" and spec.onnx_type == "tensor(string)":
            feeds[spec.name] = string_inputs.draw(rng, spec.words, shape)
        else:  # complex, bfloat16/float8 (numpy has no native type for onnxruntime)
            raise _cannot_generate(spec)
    return feeds


# -- validation -------------------------------------------------------------

def _unknown_input(label, model, name, specs) -> Error:
    names = [s.name for s in specs]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return Error(f"{label}: {model} has no input '{name}' (its inputs: {', '.join(names) or 'none'}){hint}")


def _dtype_matches(spec: InputSpec, dtype: np.dtype) -> bool:
    if spec.dtype is None:
        return True
    if spec.dtype.kind == "O":  # strings: numpy's str, bytes or object arrays all reach onnxruntime as strings
        return dtype.kind in "OUS"
    return dtype == spec.dtype


def _check_tensor(spec, value, label, model, symbols) -> None:
    expects = f"{model} expects {describe(spec)}"
    if not isinstance(value, (np.ndarray, np.generic)):
        raise Error(f"{label}: input '{spec.name}' is a {type(value).__name__}, but {expects}; "
                    f"give a numpy array of that dtype")
    if not _dtype_matches(spec, value.dtype):
        raise Error(f"{label}: input '{spec.name}' has dtype {value.dtype} but {expects}")
    if spec.shape is None:
        return
    shape = tuple(value.shape)
    if len(shape) != len(spec.shape) or any(isinstance(d, int) and d != n for d, n in zip(spec.shape, shape)):
        raise Error(f"{label}: input '{spec.name}' has shape {shape} but {expects}")
    for d, n in zip(spec.shape, shape):
        if isinstance(d, str):
            seen = symbols.setdefault(d, (n, spec.name))
            if seen[0] != n:
                raise Error(f"{label}: input '{spec.name}' has shape {shape} but {expects}, "
                            f"with {d} = {seen[0]} as in input '{seen[1]}'")


def _check_other(spec, value, label, model) -> None:
    expects = f"{model} expects {spec.onnx_type}"
    if spec.onnx_type.startswith("seq("):
        if not isinstance(value, (list, tuple)):
            raise Error(f"{label}: input '{spec.name}' is a {type(value).__name__}, but {expects} (a list of arrays)")
    elif spec.onnx_type.startswith("map("):
        if not isinstance(value, dict):
            raise Error(f"{label}: input '{spec.name}' is a {type(value).__name__}, but {expects} (a dict)")


def validate_feeds(specs: Sequence[InputSpec], feeds: Mapping, label: str, model: str = "the model") -> dict:
    """Checks one sample against the specs and returns it as a dict, unchanged.
    Raises Error, in one line naming `label` (e.g. "inputs sample 2"), the
    input and what `model` (e.g. "the original model") expects, when a name
    is unknown, an input is missing, or a dtype, rank, static dim or shared
    symbolic dim differs. Values are never cast: a float64 array for a float32
    input is an error, not a silent conversion."""
    by_name = {s.name: s for s in specs}
    for name in feeds:
        if name not in by_name:
            raise _unknown_input(label, model, name, specs)
    symbols: Dict[str, tuple] = {}
    for spec in specs:
        if spec.name not in feeds:
            raise Error(f"{label}: input '{spec.name}' is missing; {model} expects {describe(spec)}")
        value = feeds[spec.name]
        if spec.onnx_type.startswith("optional(") and value is None:
            continue
        if spec.is_tensor:
            _check_tensor(spec, value, label, model, symbols)
        else:
            _check_other(spec, value, label, model)
    return dict(feeds)
