"""The user's own inputs for verify (`--inputs PATH`), one dict per sample.

Layouts:
- `x.npz`: one sample, a key per input name. Several samples in one file:
  every key is "<sample>/<input name>" ("0/input_ids", "0/attention_mask",
  "1/input_ids", ...); samples come in natural order of <sample> (2 before
  10). An input whose own name has a "/" stays one sample when `specs` are
  given and every key is an input name; otherwise prefix it ("0//model/x").
- `x.pb`: one TensorProto, one input (named by TensorProto.name).
- a folder of .npz files: each file gives its sample(s), files in natural order.
- a folder of .pb files (onnx test-data layout): one sample. input_<i>.pb is
  the graph's i-th input (graph.input order, as onnx's backend runner reads
  it) unless the tensor carries a name; other files are named by
  TensorProto.name or by their stem. output_*.pb files are skipped.
- a folder of test_data_set_*/ folders: one sample each (each holding .pb
  files or one .npz).
Sequence and optional inputs in .pb layouts are read as SequenceProto /
OptionalProto when `specs` say the input has that type.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from pyonnxopt.errors import Error, first_line


class Sample(dict):
    """One sample: input name -> array, plus `source`, where it came from
    ("data.npz", "data.npz sample '3'", "dir/test_data_set_1"), for messages."""

    def __init__(self, arrays, source: str):
        super().__init__(arrays)
        self.source = source


def _natural(text: str):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _read_npz(path: Path) -> dict:
    try:
        with np.load(path, allow_pickle=False) as z:
            if not hasattr(z, "files"):
                raise Error(f"inputs {path}: holds a single array, not named arrays; save it with "
                            f"np.savez(path, name=array)")
            arrays = {}
            for key in z.files:
                try:
                    arrays[key] = z[key]
                except ValueError as e:
                    raise Error(f"inputs {path}: array '{key}' holds Python objects, which are not loaded "
                                f"(pickle); save strings as numpy str arrays") from e
            return arrays
    except Error:
        raise
    except Exception as e:  # BadZipFile, OSError, ...
        raise Error(f"inputs {path}: cannot read it as .npz: {first_line(e)}") from e


def _split_samples(path: Path, arrays: dict, specs) -> List[Sample]:
    names = {s.name for s in specs or ()}
    keys = list(arrays)
    if names and all(k in names for k in keys):
        return [Sample(arrays, str(path))]
    prefixed = [k for k in keys if "/" in k and k.split("/", 1)[0]]
    if not keys or len(prefixed) < len(keys):
        if prefixed and names:
            raise Error(f"inputs {path}: keys mix '<sample>/<input>' ('{prefixed[0]}') and plain names "
                        f"('{next(k for k in keys if k not in prefixed)}'); use one convention")
        return [Sample(arrays, str(path))]
    grouped: dict = {}
    for key in keys:
        sample, name = key.split("/", 1)
        grouped.setdefault(sample, {})[name] = arrays[key]
    return [Sample(grouped[s], f"{path} sample '{s}'") for s in sorted(grouped, key=_natural)]


def _proto_kind(spec) -> str:
    text = getattr(spec, "onnx_type", "") if spec is not None else ""
    for prefix in ("seq", "optional", "map"):
        if text.startswith(prefix + "("):
            return prefix
    return "tensor"


def _read_pb(path: Path, kind: str):
    """(name, value) of one protobuf file of the given kind."""
    import onnx
    import onnx.external_data_helper
    from onnx import numpy_helper

    proto = {"tensor": onnx.TensorProto, "seq": onnx.SequenceProto, "optional": onnx.OptionalProto,
             "map": onnx.MapProto}[kind]()
    try:
        proto.ParseFromString(path.read_bytes())
        if kind == "tensor":
            if proto.data_location == onnx.TensorProto.EXTERNAL:
                onnx.external_data_helper.load_external_data_for_tensor(proto, str(path.parent))
            value = numpy_helper.to_array(proto)
        elif kind == "seq":
            value = numpy_helper.to_list(proto)
        elif kind == "optional":
            value = numpy_helper.to_optional(proto)
        else:
            value = numpy_helper.to_dict(proto)
    except OSError as e:
        raise Error(f"inputs {path}: cannot read it: {first_line(e)}") from e
    except Exception as e:  # DecodeError, bad dims/data
        article = "an" if kind == "optional" else "a"
        raise Error(f"inputs {path}: not {article} readable ONNX {type(proto).__name__}: {first_line(e)}") from e
    return proto.name, value


_INPUT_FILE = re.compile(r"input_(\d+)\.pb$")


def _pb_sample(folder: Path, files: Sequence[Path], specs) -> Sample:
    specs = list(specs or ())
    by_position = {getattr(s, "position", i): s for i, s in enumerate(specs)}
    by_name = {s.name: s for s in specs}
    sample = {}
    for path in sorted(files, key=lambda p: _natural(p.name)):
        m = _INPUT_FILE.match(path.name)
        spec = by_position.get(int(m.group(1))) if m else by_name.get(path.stem)
        name, value = _read_pb(path, _proto_kind(spec))
        if not name:
            if spec is not None:
                name = spec.name
            elif m and specs:
                names = ", ".join(s.name for s in specs)
                raise Error(f"inputs {path}: holds an unnamed tensor and the model's input {m.group(1)} is an "
                            f"initializer or absent (inputs: {names}); set TensorProto.name")
            elif m:
                raise Error(f"inputs {path}: holds an unnamed tensor; set TensorProto.name or give the model "
                            f"so that input_<i>.pb follows its input order")
            else:
                name = path.stem
        if name in sample:
            raise Error(f"inputs {folder}: input '{name}' is given twice (again in {path.name})")
        sample[name] = value
    return Sample(sample, str(folder))


def _folder_samples(folder: Path, specs) -> List[Sample]:
    entries = sorted(folder.iterdir(), key=lambda p: _natural(p.name))
    npz = [p for p in entries if p.is_file() and p.suffix == ".npz"]
    pb = [p for p in entries if p.is_file() and p.suffix == ".pb" and not p.name.startswith("output_")]
    if npz and pb:
        raise Error(f"inputs {folder}: holds both .npz and .pb files; keep one kind per folder")
    if npz:
        return [s for p in npz for s in _split_samples(p, _read_npz(p), specs)]
    if pb:
        return [_pb_sample(folder, pb, specs)]
    return []


def load_samples(path, specs: Optional[Sequence] = None) -> List[Sample]:
    """The samples at `path` (see the module docstring for the layouts), each a
    dict input name -> array (a list for sequences). `specs` (input_specs of
    the model) name unnamed input_<i>.pb tensors, say which .pb files hold
    sequences or optionals, and settle npz keys that contain "/". Values are
    returned as stored; validate_feeds checks them against the model."""
    p = Path(os.fspath(path))
    if not p.exists():
        raise Error(f"inputs {p}: no such file or folder")
    if p.is_file():
        if p.suffix == ".npz":
            samples = _split_samples(p, _read_npz(p), specs)
        elif p.suffix == ".pb":
            samples = [_pb_sample(p.parent, [p], specs)]
            samples[0].source = str(p)
        else:
            raise Error(f"inputs {p}: expected a .npz file, a .pb file or a folder of them")
    else:
        sets = [d for d in sorted(p.iterdir(), key=lambda d: _natural(d.name))
                if d.is_dir() and d.name.startswith("test_data_set")]
        if sets:
            samples = []
            for d in sets:
                found = _folder_samples(d, specs)
                if len(found) != 1:
                    raise Error(f"inputs {d}: expected one sample (input_<i>.pb files or one .npz), found {len(found)}")
                samples += found
        else:
            samples = _folder_samples(p, specs)
    if not samples or not any(samples):
        raise Error(f"inputs {p}: holds no inputs (expected .npz files, input_<i>.pb files or test_data_set_*/ folders)")
    return samples
