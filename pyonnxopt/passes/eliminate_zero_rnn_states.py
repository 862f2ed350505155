"""eliminate_zero_rnn_states: an LSTM's, GRU's or RNN's initial state that
is all zeros goes: the op starts from zeros when the input is absent.

    z = Expand(0.0, Concat(Slice(Shape(x), 0, 1), [32]))     # tf2onnx: [batch, hidden]
    h0 = Concat(Unsqueeze(z, 0), Unsqueeze(z, 0))            # both directions
    y = LSTM(x, W, R, B, "", h0, h0)          ->   y = LSTM(x, W, R, B, "", "", "")

All zeros: a constant initializer (not a graph input) of zeros; a
ConstantOfShape of 0 (or of no value); Expand, Unsqueeze, Squeeze,
Reshape, Flatten, Identity, Cast, Tile, Slice, Gather or Transpose of an
all-zero tensor (paddle2onnx slices each layer's state from one); a Concat
of all-zero tensors. The shape arithmetic that sized the zeros is then dead
code. Refused: anything else (a state fed in, or computed).
"""

from __future__ import annotations

import numpy as np

from pyonnxopt.fusion.rule import node_id
from pyonnxopt.fusion.values import constant_array
from pyonnxopt.model import Model
from pyonnxopt.passes.base import Pass, PassOptions, PassResult

# op -> the indices of its initial-state inputs
_STATES = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}
# Their output's elements are some of their first input's (zeros stay zeros).
_SAME_VALUES = {"Expand", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Cast", "Tile", "Slice", "Gather",
                "Transpose"}


def all_zero(v, depth: int = 0) -> bool:
    """Whether every element of v is provably 0."""
    if v is None or v.is_graph_input or depth > 16:
        return False
    value = constant_array(v)
    if value is not None:
        return not np.any(value)
    p = v.producer
    if p is None or p.domain not in ("", "ai.onnx"):
        return False
    if p.op_type == "ConstantOfShape":
        value = p.attributes.get("value")
        return value is None or not np.any(value.numpy())
    if p.op_type in _SAME_VALUES:
        return all_zero(p.inputs[0], depth + 1)
    if p.op_type == "Concat":
        return all(all_zero(x, depth + 1) for x in p.inputs)
    return False


class EliminateZeroRnnStates(Pass):
    name = "eliminate_zero_rnn_states"
    description = "an LSTM/GRU/RNN initial state of zeros is dropped (the op starts from zeros without it)"

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        stats = {"nodes_removed": 0, "rewrites": [], "refused": []}
        for g in model._core.all_graphs():
            for n in list(g.nodes):
                if n.removed or n.pinned or n.domain not in ("", "ai.onnx") or n.op_type not in _STATES:
                    continue
                for i in _STATES[n.op_type]:
                    state = n.inputs[i] if i < len(n.inputs) else None
                    if state is not None and all_zero(state):
                        g.set_input(n, i, None)
                        stats["rewrites"].append({"what": f"zero initial state of '{node_id(n)}'",
                                                  "consumed": [state.name], "produced": []})
        return PassResult(bool(stats["rewrites"]), stats)
