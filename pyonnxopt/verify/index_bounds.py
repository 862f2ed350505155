"""Exclusive upper bounds of integer graph inputs that are used as indices.

An input such as `input_ids` that (through value-preserving ops) becomes the
indices of Gather(table, ids) must stay below the table's rows, or
onnxruntime fails ("indices element out of data bounds"). The bound is read
from the graph, so random inputs can cover the whole valid range instead of
only 0 and 1:

    ids --Cast--Unsqueeze--Reshape--> Gather(word_embeddings[30522, 768], ., axis=0)
    => ids < 30522

1. Values flow only through ops that keep every element's value (Cast,
   Identity, Unsqueeze, Squeeze, Reshape/Flatten/Expand/Tile/Transpose/Slice
   on their data input, Concat); arithmetic (ids + offset) stops the search.
2. A use gives a bound only when the indexed dim is known statically: an
   initializer's or Constant's dims, or a static dim in the graph's declared
   shapes (inputs, value_info, outputs).
3. The bound is the minimum over every use; none found -> no bound.
4. Nodes in subgraphs (If/Loop/Scan bodies) count too: they read outer values
   by name.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Dict, Iterator, Optional

import numpy as np
from onnx import GraphProto, ModelProto, TensorProto, helper, numpy_helper

# op_type -> the input slots whose values reach the output unchanged.
_VALUE_PRESERVING = {
    "Cast": (0,), "Identity": (0,), "Unsqueeze": (0,), "Squeeze": (0,), "Reshape": (0,),
    "Flatten": (0,), "Expand": (0,), "Tile": (0,), "Transpose": (0,), "Slice": (0,),
    "Concat": None,  # every input
}
# A Cast to bool or a narrow type can change values; these keep small indices intact.
_CAST_KEEPS_INDICES = {
    TensorProto.INT64, TensorProto.INT32, TensorProto.UINT64, TensorProto.UINT32,
    TensorProto.FLOAT, TensorProto.DOUBLE,
}


def _graphs(graph: GraphProto) -> Iterator[GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == attr.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == attr.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


class _Facts:
    """What the graph says statically about tensors: shapes and small constants."""

    def __init__(self, model: ModelProto):
        self.shapes: Dict[str, list] = {}
        self.constants: Dict[str, TensorProto] = {}
        self.consumers = defaultdict(list)  # value name -> [(node, input slot)]
        for g in _graphs(model.graph):
            for vi in list(g.input) + list(g.value_info) + list(g.output):
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                    dims = vi.type.tensor_type.shape.dim
                    self.shapes.setdefault(vi.name, [d.dim_value if d.HasField("dim_value") else None for d in dims])
            for t in g.initializer:
                self.shapes[t.name] = list(t.dims)
                self.constants[t.name] = t
            for node in g.node:
                for slot, name in enumerate(node.input):
                    if name:
                        self.consumers[name].append((node, slot))
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
                    value = next((a.t for a in node.attribute if a.name == "value"), None)
                    if value is not None:
                        self.shapes[node.output[0]] = list(value.dims)
                        self.constants[node.output[0]] = value

    def dim(self, name: str, axis: int) -> Optional[int]:
        shape = self.shapes.get(name)
        if shape is None or not -len(shape) <= axis < len(shape):
            return None
        d = shape[axis]
        return d if isinstance(d, int) and d > 0 else None

    def scalar(self, name: str) -> Optional[int]:
        t = self.constants.get(name)
        if t is None or int(np.prod(t.dims)) != 1:
            return None
        try:
            return int(numpy_helper.to_array(t).reshape(()))
        except Exception:  # external data not loaded, odd dtypes: no bound, not an error
            return None


def _attr(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _bound_of_use(facts: _Facts, node, slot: int) -> Optional[int]:
    """The exclusive bound a node puts on the values of its input `slot`, when it indexes a known dim."""
    op, ms = node.op_type, node.domain == "com.microsoft"
    if node.domain not in ("", "ai.onnx") and not ms:
        return None
    if op in ("Gather", "GatherElements", "ScatterElements", "Scatter") and slot == 1 and not ms:
        return facts.dim(node.input[0], int(_attr(node, "axis", 0)))
    if op in ("GatherND", "ScatterND") and slot == 1 and not ms:
        data = facts.shapes.get(node.input[0])
        if data is None:
            return None
        batch_dims = int(_attr(node, "batch_dims", 0)) if op == "GatherND" else 0
        indexed = data[batch_dims:]
        # The indices' last dim says how many leading dims each index tuple
        # addresses; unknown, every remaining dim may be addressed.
        k = facts.dim(node.input[1], -1)
        if k is not None:
            indexed = indexed[:k]
        known = [d for d in indexed if isinstance(d, int) and d > 0]
        return min(known) if known and len(known) == len(indexed) else None
    if op == "OneHot" and slot == 0 and not ms and len(node.input) > 1:
        depth = facts.scalar(node.input[1])
        return depth if depth is not None and depth > 0 else None
    if op == "EmbedLayerNormalization" and ms:
        table = {0: 2, 1: 3}.get(slot)  # input_ids -> word_embedding, segment_ids -> segment_embedding
        if table is not None and len(node.input) > table and node.input[table]:
            return facts.dim(node.input[table], 0)
    return None


def _passes_value(node, slot: int) -> bool:
    if node.domain not in ("", "ai.onnx") or node.op_type not in _VALUE_PRESERVING:
        return False
    slots = _VALUE_PRESERVING[node.op_type]
    if slots is not None and slot not in slots:
        return False
    return node.op_type != "Cast" or int(_attr(node, "to", 0)) in _CAST_KEEPS_INDICES


def index_bounds(model: ModelProto, names) -> Dict[str, int]:
    """{input name: exclusive upper bound} for those of `names` that index a known dim."""
    facts = _Facts(model)
    bounds = {}
    for name in names:
        seen, todo, found = {name}, [name], []
        while todo:
            value = todo.pop()
            for node, slot in facts.consumers.get(value, ()):
                bound = _bound_of_use(facts, node, slot)
                if bound is not None:
                    found.append(bound)
                if _passes_value(node, slot):
                    for out in node.output:
                        if out and out not in seen:
                            seen.add(out)
                            todo.append(out)
        if found:
            bounds[name] = min(found)
    return bounds
