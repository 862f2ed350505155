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

    def run(self, model: Model, options: PassOptions = PassOptions()) -> PassResult:
        stats = shapes.infer(model)
        if "failed" in stats:
            stats["refused"] = [f"shape inference failed, passes that need shapes see fewer: {stats['failed']}"]
        # Types alone never count as a change: the fixed point is over the graph.
        return PassResult(False, stats)
