"""eliminate_same_shape_slices: a Slice with positive steps to its input's
own symbolic dims, its bounds computed at run time, goes; a reversing or
shortening one stays."""

import numpy as np
import onnx

from fusion_helpers import near_misses
from helpers import ops, outputs, parse
from transformer_helpers import fuse

# `mask[:, :, :, :key_length]`, the key length read from the mask itself.
SAME = """g (float[B,1,S,T] mask) => (float[B,1,S,T] y) <int64[1] zero = {0}, int64[1] three = {3}, int64[1] step = {1}> {
    t = Shape<start = 3, end = 4>(mask)
    s = Slice(mask, zero, t, three, step)
    y = Neg(s)
}"""


def feeds(b=2, s=3, t=5):
    return {"mask": np.random.default_rng(0).standard_normal((b, 1, s, t)).astype(np.float32)}


def test_a_slice_to_its_own_symbolic_dims_goes():
    m, r, before = fuse("eliminate_same_shape_slices", SAME, opset=17)
    assert r.modified and "Slice" not in ops(m)
    assert next(n for n in m.graph.nodes if n.op_type == "Neg").inputs[0].name == "mask"
    for dims in ((2, 3, 5), (1, 4, 1)):
        assert np.array_equal(outputs(before, feeds(*dims))[0], outputs(m, feeds(*dims))[0])


def test_without_steps_too():
    m, r, _ = fuse("eliminate_same_shape_slices", SAME.replace("s = Slice(mask, zero, t, three, step)",
                                                               "s = Slice(mask, zero, t, three)"), opset=17)
    assert r.modified and "Slice" not in ops(m)


def test_a_reversing_slice_keeps_its_length_and_stays():
    # mask[:, :, :, ::-1], its length stated as the input's: the same dims, reversed.
    text = SAME.replace("int64[1] step = {1}", "int64[1] step = {-1}").replace(
        "int64[1] zero = {0}", "int64[1] zero = {-1}").replace(
        "t = Shape<start = 3, end = 4>(mask)", "t = Constant<value = int64[1] {-9223372036854775807}>()")
    proto = parse(text, 17)
    proto.graph.value_info.append(onnx.helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, ["B", 1, "S", "T"]))
    m, r, before = fuse("eliminate_same_shape_slices", proto, opset=17, infer=False)
    assert not r.modified and "Slice" in ops(m)
    assert any("not known positive constants" in x for x in near_misses(r)), near_misses(r)
    assert np.array_equal(outputs(before, feeds())[0], outputs(m, feeds())[0])


def test_a_shortening_slice_stays_unreported():
    text = SAME.replace("float[B,1,S,T] y", "float[B,1,S,U] y").replace(
        "t = Shape<start = 3, end = 4>(mask)", "t = Shape<start = 2, end = 3>(mask)")
    m, r, _ = fuse("eliminate_same_shape_slices", text, opset=17, full_check=False)
    assert not r.modified and near_misses(r) == []
