"""Small models the project builds itself (demo, tests): no download needed."""

from __future__ import annotations

import numpy as np


def tiny_cnn(seed: int = 0):
    """A 2-block CNN classifier with the redundancy exporters leave behind:
    BatchNorm after Conv, inference Dropout, Identity chains, a Shape->Gather->
    Concat->Reshape flatten. Input `image` [N,3,32,32] -> `probs` [N,10]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def weight(name, *shape, scale=0.1):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        weight("conv1.w", 16, 3, 3, 3), weight("conv1.b", 16),
        weight("bn1.scale", 16, scale=1.0), weight("bn1.bias", 16),
        weight("bn1.mean", 16), numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "bn1.var"),
        weight("conv2.w", 32, 16, 3, 3), weight("conv2.b", 32),
        weight("fc.w", 10, 32), weight("fc.b", 10),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one"),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv1.w", "conv1.b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"], ["b1"], name="bn1"),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node("Dropout", ["r1"], ["d1"], name="dropout1"),
        helper.make_node("Identity", ["d1"], ["i1"], name="identity1"),
        helper.make_node("MaxPool", ["i1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.w", "conv2.b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Shape", ["gap"], ["gap_shape"], name="shape"),
        helper.make_node("Gather", ["gap_shape", "zero"], ["batch"], name="gather_batch", axis=0),
        helper.make_node("Concat", ["batch", "minus_one"], ["flat_shape"], name="concat_shape", axis=0),
        helper.make_node("Reshape", ["gap", "flat_shape"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
        helper.make_node("Identity", ["logits"], ["logits_id"], name="identity2"),
        helper.make_node("Softmax", ["logits_id"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pyonnxopt.examples")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model
