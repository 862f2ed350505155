"""The Python face of the native model: loading from paths, bytes or
`onnx.ModelProto`, saving (atomically, inline or with external data), and
tensors as read-only numpy arrays without a copy."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Optional, Union

import numpy as np

from pyonnxopt import _core
from pyonnxopt.errors import ModelError

if TYPE_CHECKING:
    import onnx

Graph = _core.Graph
Node = _core.Node
Value = _core.Value
Tensor = _core.Tensor
Function = _core.Function

ModelSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, "onnx.ModelProto", "Model"]


@dataclass
class SaveResult:
    path: str
    model_bytes: int
    data_files: list = field(default_factory=list)
    external_bytes: int = 0
    switched_to_external: bool = False


class Model:
    """An ONNX model held by the native core.

    Create one with `pyonnxopt.load`. Nodes, values and tensors are live
    handles into the model: they stay valid as long as you hold them.
    """

    def __init__(self, core: _core.Model):
        self._core = core
        # A main-graph output's own name for a dim -> the symbol the last
        # shape inference proved it is (symbolic_shapes' rule 8); the output
        # keeps its declared name, the fusion rules read the symbol.
        self.dim_aliases: dict = {}

    # ---- model fields
    @property
    def ir_version(self) -> Optional[int]:
        return self._core.ir_version

    @property
    def opset_imports(self) -> dict:
        """Domain -> version ("" is the default ONNX domain)."""
        return dict(self._core.opset_imports)

    @property
    def producer_name(self) -> Optional[str]:
        return self._core.producer_name

    @property
    def producer_version(self) -> Optional[str]:
        return self._core.producer_version

    @property
    def metadata_props(self) -> dict:
        return self._core.metadata_props

    @property
    def path(self) -> str:
        """The file the model was loaded from ("" when loaded from bytes)."""
        return self._core.path

    @property
    def graph(self) -> Graph:
        return self._core.graph

    @property
    def functions(self) -> list:
        return self._core.functions

    # ---- iteration
    def graphs(self) -> list:
        """Every graph: main, If/Loop/Scan bodies, function bodies, training graphs."""
        return self._core.all_graphs()

    def nodes(self, recursive: bool = False) -> Iterator[Node]:
        """Nodes of the main graph in file order; with `recursive`, of every graph."""
        for g in self.graphs() if recursive else [self.graph]:
            yield from g.nodes

    def values(self) -> list:
        return self.graph.values

    def initializers(self) -> list:
        return self.graph.initializers

    def tensors(self) -> list:
        """Every tensor that holds data: initializers, sparse parts, attribute tensors."""
        return self._core.all_tensors()

    def external_files(self) -> list:
        """Absolute or base-relative paths of the external-data files the model reads."""
        return self._core.external_files()

    def check_invariants(self) -> list:
        """Use-def consistency problems (empty when the IR is consistent)."""
        return self._core.check_invariants()

    # ---- output
    def save(
        self,
        path: Union[str, "os.PathLike[str]"],
        *,
        external_data: Optional[bool] = None,
        location: Optional[str] = None,
        size_threshold: int = 1024,
        align: int = 4096,
        align_threshold: int = 1 << 20,
        max_file_size: Optional[int] = None,
    ) -> SaveResult:
        """Writes the model atomically (temporary file, then rename).

        external_data: None keeps each tensor where it was (switching to
        external data by itself past protobuf's 2 GB limit); True moves every
        raw tensor of at least `size_threshold` bytes to external data; False
        writes everything inline. Data files are named `location` (default
        "<model file>.data"), beside the model, split into `location.1`, ...
        when `max_file_size` is given. Tensors of at least `align_threshold`
        bytes start at multiples of `align` so they can be memory-mapped.
        An external-data file whose tensors are all kept (most of its bytes
        still referenced) is written as one copy at the same offsets, cloned
        where the file system can (btrfs, XFS).
        The input is never modified, also when `path` is the file it came from.
        """
        mode = {None: "keep", True: "all", False: "none"}[external_data]
        target = os.fspath(path)
        if os.path.isdir(target):
            raise ModelError(f"cannot save to {target}: it is a folder; give a file name")
        if external_data is not False:
            location = self._free_location(target, location)
        r = self._core.save(
            target,
            mode=mode,
            location=location or "",
            size_threshold=size_threshold,
            align=align,
            align_threshold=align_threshold,
            max_file_size=max_file_size or 0,
        )
        return SaveResult(path=target, **r)

    def _free_location(self, target: str, location: Optional[str]) -> Optional[str]:
        """`location`, unless the data file it names (default "<target>.data")
        is one this model reads: saving b.onnx from a.onnx whose data is
        b.onnx.data would replace the input's data. Then the default becomes
        a free "<target>.N.data", and a given location is an error. Saving
        over the model's own file replaces its data, as it should."""
        reads = {os.path.realpath(f) for f in self.external_files()}  # the paths as opened
        if not reads or (self.path and os.path.realpath(self.path) == os.path.realpath(target)):
            return location
        target_folder, base = os.path.dirname(os.path.abspath(target)), os.path.basename(target)

        def clashes(name: str) -> bool:  # the file or one of its parts name.1, name.2, ...
            path = os.path.realpath(os.path.join(target_folder, name))
            return any(r == path or (r.startswith(path + ".") and r[len(path) + 1:].isdigit()) for r in reads)

        if not clashes(location or base + ".data"):
            return location
        if location:
            raise ModelError(f"cannot save to {target}: its data file {location} is one the model reads "
                             f"({self.path or 'in memory'}); give another location")
        n = 1
        while clashes(f"{base}.{n}.data"):
            n += 1
        return f"{base}.{n}.data"

    def to_bytes(self) -> bytes:
        """The serialized ModelProto with all data inline (fails past 2 GB)."""
        return self._core.serialize()

    def to_onnx(self) -> "onnx.ModelProto":
        """An `onnx.ModelProto` with all data inline (fails past 2 GB)."""
        import onnx

        return onnx.ModelProto.FromString(self.to_bytes())

    def __repr__(self) -> str:
        g = self.graph
        return f"<pyonnxopt.Model {self.path or '<bytes>'}: {len(g) if g else 0} nodes>"


def load(
    source: ModelSource,
    *,
    base_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    allow_external_outside: bool = False,
) -> Model:
    """Loads a model from a path, serialized bytes or an `onnx.ModelProto`.

    Files are memory-mapped and tensors are views into them, so loading costs
    the graph, not the weights. External data is found relative to the model's
    folder (or `base_dir`); locations that leave that folder are refused
    unless `allow_external_outside`. Raises `ModelError` on bad input.
    """
    if isinstance(source, Model):
        return source
    base = os.fspath(base_dir) if base_dir is not None else ""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if "\0" in path:
            raise ModelError(f"{path!r}: the path contains a NUL byte")
        if os.path.isdir(path):
            raise ModelError(f"{path}: is a folder, not an ONNX file")
        return Model(_core.load_file(path, base_dir=base, allow_external_outside=allow_external_outside))
    if isinstance(source, (bytes, bytearray, memoryview)):
        return Model(_core.load_bytes(bytes(source), base_dir=base, allow_external_outside=allow_external_outside))
    if type(source).__name__ == "ModelProto" and hasattr(source, "SerializeToString"):
        return Model(_core.load_bytes(source.SerializeToString(), base_dir=base, allow_external_outside=allow_external_outside))
    raise TypeError(f"load() takes a path, bytes or onnx.ModelProto, not {type(source).__name__}")


def _tensor_numpy(tensor: Tensor) -> np.ndarray:
    """The tensor's data as a read-only array; a view of the file when the
    bytes allow it, else converted through onnx.numpy_helper."""
    arr = tensor.numpy_view()
    if arr is not None:
        return arr
    import onnx
    from onnx import numpy_helper

    arr = numpy_helper.to_array(onnx.TensorProto.FromString(tensor.serialize()))
    arr.setflags(write=False)
    return arr


def raw_data(array) -> tuple:
    """(ONNX data type, dims, little-endian bytes) of an array, for
    Tensor.set_raw and Graph.set_constant."""
    from onnx import helper

    arr = np.asarray(array, order="C")  # not ascontiguousarray: it makes scalars 1-D
    dtype = int(helper.np_dtype_to_tensor_dtype(arr.dtype))
    return dtype, list(arr.shape), arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()


def _tensor_set_data(tensor: Tensor, array) -> None:
    """Replaces the data with a copy of `array` (dtype and shape follow it)."""
    tensor.set_raw(*raw_data(array))


Tensor.numpy = _tensor_numpy
Tensor.set_data = _tensor_set_data
