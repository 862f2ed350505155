"""eliminate_same_shape_expands: an Expand to the input's own symbolic dims,
its shape computed at run time, goes; one that broadcasts stays."""

import numpy as np
import onnx

from helpers import ops, outputs, parse
from transformer_helpers import fuse

# The TorchScript exports' attention mask: [B, 1, S, S] expanded to
# Concat(B, 1, S, S), B and S read from the input ids' shape at run time.
SAME = """g (bool[B,1,S,S] mask, int64[B,S] ids) => (bool[B,1,S,S] y) <int64[1] one = {1}> {
    b = Shape<start = 0, end = 1>(ids)
    s = Shape<start = 1, end = 2>(ids)
    target = Concat<axis = 0>(b, one, s, s)
    e = Expand(mask, target)
    y = Not(e)
}"""


def feeds():
    rng = np.random.default_rng(0)
    return {"mask": rng.random((2, 1, 5, 5)) < 0.5, "ids": np.zeros((2, 5), np.int64)}


def test_expand_to_its_own_symbolic_dims_goes_with_its_shape():
    import pyonnxopt

    m, r, before = fuse("eliminate_same_shape_expands", SAME, opset=17)
    assert r.modified and "Expand" not in ops(m)
    assert next(n for n in m.graph.nodes if n.op_type == "Not").inputs[0].name == "mask"
    assert np.array_equal(outputs(before, feeds())[0], outputs(m, feeds())[0])
    optimized, report = pyonnxopt.optimize(before)  # the shape arithmetic is dead code then
    assert ops(optimized) == ["Not"] and report["check"]["first_mismatch"] is None


def test_graph_input_to_graph_output_becomes_identity():
    text = SAME.replace("e = Expand(mask, target)\n    y = Not(e)", "y = Expand(mask, target)")
    m, r, before = fuse("eliminate_same_shape_expands", text, opset=17)
    assert r.modified and "Expand" not in ops(m) and "Identity" in ops(m)
    assert np.array_equal(outputs(before, feeds())[0], outputs(m, feeds())[0])


def test_an_expand_that_broadcasts_stays():
    text = SAME.replace("bool[B,1,S,S] mask", "bool[B,1,1,S] mask")
    m, r, before = fuse("eliminate_same_shape_expands", text, opset=17)
    assert not r.modified and "Expand" in ops(m) and r.stats["near_misses"] == []  # not this rule's case
    f = dict(feeds(), mask=np.random.default_rng(1).random((2, 1, 1, 5)) < 0.5)
    assert outputs(m, f)[0].shape == (2, 1, 5, 5)


def test_an_unknown_dim_where_the_rest_agree_is_a_near_miss():
    proto = parse(SAME, 17)
    proto.graph.value_info.append(onnx.helper.make_tensor_value_info("e", onnx.TensorProto.BOOL, ["B", 1, None, "S"]))
    m, r, _ = fuse("eliminate_same_shape_expands", proto, opset=17, infer=False)
    assert not r.modified and any("dims unknown where the rest agree" in x for x in r.stats["near_misses"])
