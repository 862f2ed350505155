"""The inputs a benchmark runs on: the user's samples (--inputs) or seeded
random ones, checked against each model's inputs.

The work is pyonnxopt.verify.inputs'; the adapter below stands in for it
only where that module is not there yet."""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt.errors import Error

try:
    from pyonnxopt.verify.inputs import input_specs, load_samples, random_feeds, validate_feeds
except ImportError:  # ---- ADAPTER until pyonnxopt.verify.inputs is merged (integrator: delete this branch) ----
    from dataclasses import dataclass, field

    import onnx

    @dataclass
    class _Spec:
        name: str
        dtype: object
        shape: list = field(default_factory=list)
        high: Optional[int] = None

    def input_specs(model) -> list:
        proto = onnx.load(model, load_external_data=False) if isinstance(model, str) else model
        inits = {i.name for i in proto.graph.initializer}
        specs = []
        for i in proto.graph.input:
            if i.name in inits:
                continue
            t = i.type.tensor_type
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
            specs.append(_Spec(i.name, np.dtype(dtype), shape))
        return specs

    def random_feeds(specs, seed=0, batch_size=None, vocab_size=None, dims=None) -> dict:
        rng = np.random.default_rng(seed)
        feeds = {}
        for s in specs:
            shape = [d if isinstance(d, int) else (batch_size or 1) if k == 0 else 1 for k, d in enumerate(s.shape)]
            if s.dtype.kind == "f":
                feeds[s.name] = rng.standard_normal(shape).astype(s.dtype)
            else:  # 0 or 1: in range of any index table
                feeds[s.name] = rng.integers(0, 2, shape).astype(s.dtype)
        return feeds

    def load_samples(path) -> list:
        try:
            with np.load(path, allow_pickle=False) as data:
                return [{name: data[name] for name in data.files}]
        except (OSError, ValueError) as e:
            raise Error(f"--inputs {path}: cannot read it as .npz ({e})") from None

    def validate_feeds(specs, feeds, label) -> dict:
        by_name = {s.name: s for s in specs}
        for name, value in feeds.items():
            s = by_name.get(name)
            if s is None:
                raise Error(f"{label}: the model has no input {name!r} (inputs: {', '.join(by_name)})")
            if value.dtype != s.dtype or value.ndim != len(s.shape) or any(
                    isinstance(d, int) and d != v for d, v in zip(s.shape, value.shape)):
                raise Error(f"{label}: input {name!r} has shape {value.shape} ({value.dtype}) but the model expects "
                            f"{s.shape} ({s.dtype})")
        missing = [n for n in by_name if n not in feeds]
        if missing:
            raise Error(f"{label}: input {missing[0]!r} is missing")
        return feeds
    # ---- end of ADAPTER ----


def model_feeds(path: str, label: str, inputs: Optional[str], seed: int, batch_size: Optional[int],
                samples: Optional[list] = None) -> list:
    """The feeds one model runs on, as a list of samples (name -> array):
    the user's samples, each checked against the model's inputs, or one
    seeded random sample (the same for two models with the same inputs)."""
    specs = input_specs(path)
    if inputs is None:
        return [random_feeds(specs, seed=seed, batch_size=batch_size)]
    samples = samples if samples is not None else load_samples(inputs)
    if not samples:
        raise Error(f"--inputs {inputs}: no samples in it")
    return [validate_feeds(specs, feed, f"model {label} ({path}), inputs sample {k + 1}")
            for k, feed in enumerate(samples)]
