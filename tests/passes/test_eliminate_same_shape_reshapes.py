"""eliminate_same_shape_reshapes: a Reshape to the input's own symbolic dims,
its target computed at run time, goes; one that changes a dim stays."""

import numpy as np
import onnx

from helpers import ops, outputs, parse
from transformer_helpers import fuse

# torch dynamo's Reshape of attention's output back to [B, H, S, D], the
# target read from the input ids' shape at run time.
SAME = """g (float[B,4,S,8] x, int64[B,S] ids) => (float[B,4,S,8] y) <int64[1] h = {4}, int64[1] d = {8}> {
    b = Shape<start = 0, end = 1>(ids)
    s = Shape<start = 1, end = 2>(ids)
    target = Concat<axis = 0>(b, h, s, d)
    r = Reshape(x, target)
    y = Relu(r)
}"""


def feeds():
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((2, 4, 5, 8)).astype(np.float32), "ids": np.zeros((2, 5), np.int64)}


def test_reshape_to_its_own_symbolic_dims_goes():
    m, r, before = fuse("eliminate_same_shape_reshapes", SAME, opset=17)
    assert r.modified and "Reshape" not in ops(m)
    relu = next(n for n in m.graph.nodes if n.op_type == "Relu")
    assert relu.inputs[0].name == "x"
    assert np.array_equal(outputs(before, feeds())[0], outputs(m, feeds())[0])


def test_graph_input_to_graph_output_becomes_identity():
    text = SAME.replace("r = Reshape(x, target)\n    y = Relu(r)", "y = Reshape(x, target)")
    m, r, before = fuse("eliminate_same_shape_reshapes", text, opset=17)
    assert r.modified and "Identity" in ops(m) and "Reshape" not in ops(m)
    assert np.array_equal(outputs(before, feeds())[0], outputs(m, feeds())[0])


def test_a_reshape_that_swaps_two_symbols_stays():
    text = SAME.replace("Concat<axis = 0>(b, h, s, d)", "Concat<axis = 0>(s, h, b, d)").replace(
        "float[B,4,S,8] y", "float[S,4,B,8] y")
    m, r, _ = fuse("eliminate_same_shape_reshapes", text, opset=17)
    assert not r.modified and r.stats["near_misses"] == []  # not this rule's case: no near miss


def test_a_reshape_with_an_unknown_dim_where_the_rest_agree_is_a_near_miss():
    proto = parse(SAME, 17)
    proto.graph.value_info.append(onnx.helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, ["B", 4, None, 8]))
    m, r, _ = fuse("eliminate_same_shape_reshapes", proto, opset=17, infer=False)
    assert not r.modified and any("dims unknown where the rest agree" in x for x in r.stats["near_misses"])
