"""infer_shapes: onnx's shape inference on a weightless copy, written back as
value_info, so the passes after it (folding Shape, shape-dependent no-ops)
know more dims. Never changes what the model computes."""

from __future__ import annotations

from pyonnxopt import shapes
from pyonnxopt.model import Model
from pyonnxopt.passes.base import Pass, PassOptions, PassResult


class InferShapes(Pass):
    name = "infer_shapes"
    description = "infer types and shapes (onnx's inference on a weightless copy) and record them as value_info"

    # A second run straight after its own finds what the first wrote; at
    # most it joins unknown dims named apart under one name, which the
    # pipeline does not spend a run on.
    idempotent = True

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        aliases = model.dim_aliases
        stats = shapes.infer(model)
        if "failed" in stats:
            stats["refused"] = [f"shape inference failed, passes that need shapes see fewer: {stats['failed']}"]
        retyped = bool(stats.get("values_typed")) or model.dim_aliases != aliases
        # Types alone never count as a change: the fixed point is over the graph.
        return PassResult(False, stats, retyped=retyped)
