"""Strings for generated inputs of a model that reads text or categories.

A scikit-learn pipeline converted by skl2onnx may take strings: categories
for a OneHotEncoder or LabelEncoder, sentences for a TfIdfVectorizer. Random
characters would miss every category (an encoder that rejects unknown ones
cannot even run), so the check and verify draw each element from the
strings the model itself knows: the categories, vocabularies and stop words
in its nodes' attributes, and its string constants."""

from __future__ import annotations

import numpy as np

# Attributes that list strings an input may hold: TfIdfVectorizer's n-gram
# pool, OneHotEncoder's and CategoryMapper's categories, LabelEncoder's
# keys, StringNormalizer's stop words, a Constant's strings.
VOCABULARY_ATTRIBUTES = ("pool_strings", "cats_strings", "keys_strings", "stopwords", "value_strings")
# For a model naming none (a regex match, a string split): a few short
# words, two of them together, one upper-case.
FALLBACK = ("a", "b c", "D")
STRING = 8  # onnx.TensorProto.STRING
MAX_TABLE = 1 << 16  # string constants read; a larger one is data, not a list of categories


def vocabulary(model) -> tuple:
    """The strings a pyonnxopt.Model's nodes and constants name, in the
    order first met, or FALLBACK; () at once for a model no string is fed
    to (the walk over every node is not free on 100k of them)."""
    if not any(v.type.get("elem_type") == STRING for v in model.graph.inputs):
        return ()
    words: dict = {}
    for node in model.nodes(recursive=True):
        for name in VOCABULARY_ATTRIBUTES:
            for value in node.attributes.get(name) or ():
                words.setdefault(_text(value))
    for tensor in model.tensors():
        if tensor.data_type == STRING and np.prod(tensor.dims) <= MAX_TABLE:
            for value in tensor.numpy().ravel():
                words.setdefault(_text(value))
    return tuple(words) or FALLBACK


def draw(rng: np.random.Generator, words: tuple, shape) -> np.ndarray:
    """A numpy str array of `shape`, each element one of `words` (str, not
    object: it saves to .npz without pickling, for bench's cold start)."""
    table = np.array(words or FALLBACK, dtype=str)
    return table[rng.integers(0, len(table), size=shape)]


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
