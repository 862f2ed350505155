"""What onnxruntime returns for a value that is not a tensor, in a form the
checks compare: its structure (sequence lengths, map keys) exactly and its
numbers as tensors, within their type's tolerance.

A classifier converted by skl2onnx ends in ZipMap: a sequence of maps from
label to probability, which onnxruntime returns as a list of dicts of Python
floats. Compared as objects, a probability one rounding step off (a folded
constant) reads as a different value."""

from __future__ import annotations

from typing import Optional

import numpy as np


def split(value) -> Optional[tuple]:
    """(structure, [arrays]) for a tensor, a sequence of tensors, a map, a
    sequence of maps or an absent optional; None for anything else.
    Map values that are Python floats read as float32: the only op that
    makes maps, ZipMap, makes them from float32 probabilities."""
    if isinstance(value, np.ndarray):
        return ("tensor",), [value]
    if value is None:
        return ("none",), []
    if isinstance(value, dict):
        return ("map", tuple(value)), [_map_values(value)]
    if isinstance(value, list) and all(isinstance(t, np.ndarray) for t in value):
        return ("sequence", len(value)), list(value)
    if isinstance(value, list) and all(isinstance(d, dict) for d in value):
        keys = tuple(tuple(d) for d in value)
        numbers = np.concatenate([_map_values(d) for d in value]) if value else np.zeros(0, np.float32)
        return ("sequence of maps", keys), [numbers]
    return None


def describe(structure: tuple) -> str:
    """A structure from split(), in a few words."""
    kind = structure[0]
    if kind == "sequence":
        return f"a sequence of {structure[1]} tensors"
    if kind == "map":
        return f"a map with keys {list(structure[1])[:8]}"
    if kind == "sequence of maps":
        keys = sorted({k for d in structure[1] for k in d}, key=str)
        return f"a sequence of {len(structure[1])} maps with keys {keys[:8]}"
    return "a tensor" if kind == "tensor" else "no value"


def _map_values(d: dict) -> np.ndarray:
    values = list(d.values())
    if values and all(isinstance(v, float) for v in values):
        return np.asarray(values, np.float32)
    return np.asarray(values)
