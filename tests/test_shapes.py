"""--input-shape / --batch: parsing, fixing, errors, and what folds afterwards."""

import numpy as np
import onnx
import pytest

import pyonnxopt
from pyonnxopt import Error
from pyonnxopt.shapes import fix_input_shapes, parse_input_shape

from passes.helpers import outputs, parse

DYNAMIC = """g (float[N, 3, H, W] images, int64[N, T] ids) => (float[N, 3, H, W] y, int64[N, T] z) {
    y = Relu(images)
    z = Identity(ids)
}"""


def test_specs_parse_and_bad_ones_name_the_problem():
    assert parse_input_shape("images:1,3,640,640") == ("images", [1, 3, 640, 640])
    assert parse_input_shape("a:b:N, 3") == ("a:b", ["N", 3])
    assert parse_input_shape("timestep:") == ("timestep", [])  # a scalar
    for bad, why in [("images", "expected NAME:D1,D2"), ("images:1,-3", "dim '-3'"), ("images:1,,3", "dim ''")]:
        with pytest.raises(Error, match=why):
            parse_input_shape(bad)


def test_fixing_shapes_and_batch_updates_outputs():
    m = pyonnxopt.load(parse(DYNAMIC))
    assert fix_input_shapes(m, {"images": [1, 3, 64, 48]}) == ["images", "ids"]
    assert m.graph.value("images").type["shape"] == [1, 3, 64, 48]
    assert m.graph.value("ids").type["shape"] == [1, "T"]  # images fixed N, which ids shares
    assert m.graph.value("y").type["shape"] == [1, 3, 64, 48]
    onnx.checker.check_model(m.to_onnx(), full_check=True)
    m = pyonnxopt.load(parse(DYNAMIC))
    assert fix_input_shapes(m, {"images": ["N", 3, 64, 48]}, batch=2) == ["images", "ids"]
    assert m.graph.value("images").type["shape"] == ["N", 3, 64, 48] and m.graph.value("ids").type["shape"] == [2, "T"]


def test_a_named_dim_fixed_in_one_input_is_fixed_in_all():
    m = pyonnxopt.load(parse("""g (int64[batch, seq] ids, int64[batch, seq] mask, float[batch, 4] extra)
            => (int64[batch, seq] y) {
        y = Add(ids, mask)
    }"""))
    assert fix_input_shapes(m, {"ids": [1, 12]}) == ["ids", "mask", "extra"]
    assert [m.graph.value(n).type["shape"] for n in ("ids", "mask", "extra", "y")] == [[1, 12], [1, 12], [1, 4],
                                                                                        [1, 12]]
    with pytest.raises(Error, match="dim 'seq' is given as 12 and as 8 \\(input 'mask'\\)"):
        fix_input_shapes(pyonnxopt.load(parse("""g (int64[batch, seq] ids, int64[batch, seq] mask)
                => (int64[batch, seq] y) {
            y = Add(ids, mask)
        }""")), {"ids": [1, 12], "mask": [1, 8]})


def test_an_output_size_the_fixed_inputs_contradict_follows_them(caplog):
    # torch's dynamo exporter declares an LSTM's output with the example's
    # sequence length; with another one fixed, onnx would keep the stale 5
    # and the written model would fail onnx.checker.
    m = pyonnxopt.load(parse("""g (float[N, S, 4] x) => (float[N, 5, 4] y) {
        r = Relu(x)
        y = Neg(r)
    }"""))
    fix_input_shapes(m, {"x": [2, 7, 4]})
    assert m.graph.value("y").type["shape"] == [2, 7, 4]
    assert "output 'y' dim 1: declared 5, the fixed input shapes give 7" in caplog.text
    onnx.checker.check_model(m.to_onnx(), full_check=True)


def test_declared_output_dims_stay_where_inference_finds_none():
    # NonZero's count is data-dependent: the declared name is all there is.
    m = pyonnxopt.load(parse("""g (float[N, 3] x) => (int64[2, count] y, float[batch, 3] z) {
        y = NonZero(x)
        z = Relu(x)
    }"""))
    fix_input_shapes(m, {}, batch=2)
    assert m.graph.value("y").type["shape"] == [2, "count"] and m.graph.value("z").type["shape"] == [2, 3]
    onnx.checker.check_model(m.to_onnx(), full_check=True)


@pytest.mark.parametrize("shapes, batch, message", [
    ({"nope": [1]}, None, "no input 'nope' \\(inputs: images, ids\\)"),
    ({"images": [1, 3, 64]}, None, "rank 4, the shape given has 3"),
    ({"images": [1, 4, 64, 64]}, None, "dim 1 is 3 in the model, not 4"),
    ({}, 0, "--batch 0"),
])
def test_bad_requests_are_errors(shapes, batch, message):
    with pytest.raises(Error, match=message):
        fix_input_shapes(pyonnxopt.load(parse(DYNAMIC)), shapes, batch)


def test_after_fixing_the_shape_arithmetic_folds_away(tmp_path):
    proto = parse("""g (float[N, 3, 4] x) => (float[N, 12] y) <int64 zero = {0}, int64[1] twelve = {12}> {
        s = Shape(x)
        n = Gather <axis = 0> (s, zero)
        nn = Unsqueeze(n, zero)
        shape = Concat <axis = 0> (nn, twelve)
        y = Reshape(x, shape)
    }""")
    model, report = pyonnxopt.optimize(proto, input_shapes={"x": [5, 3, 4]})
    assert [n.op_type for n in model.graph.nodes] == ["Reshape"]
    assert report["inputs_fixed"] == ["x"] and report["check"]["first_mismatch"] is None
    x = np.arange(60, dtype=np.float32).reshape(5, 3, 4)
    np.testing.assert_array_equal(outputs(model, {"x": x})[0], x.reshape(5, 12))


def test_inference_sees_through_the_onnxruntime_ops_fusions_emit():
    # A com.microsoft op would stop onnx's inference: what follows it stays unknown.
    from onnx import TensorProto, helper

    nodes = [helper.make_node("SkipLayerNormalization", ["h", "s", "g"], ["n", "", "", "r"], domain="com.microsoft"),
             helper.make_node("FastGelu", ["n"], ["a"], domain="com.microsoft"),
             helper.make_node("MatMul", ["a", "w"], ["y"]), helper.make_node("Neg", ["r"], ["t"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 5, 8]),
                     helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 5, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None), helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
        [helper.make_tensor("g", TensorProto.FLOAT, [8], np.ones(8)), helper.make_tensor("w", TensorProto.FLOAT, [8, 4], np.ones(32))])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m = pyonnxopt.load(proto)
    pyonnxopt.shapes.infer(m)
    assert m.graph.value("a").type["shape"] == [2, 5, 8] and m.graph.value("r").type["shape"] == [2, 5, 8]
    assert [n.op_type for n in m.graph.nodes] == ["SkipLayerNormalization", "FastGelu", "MatMul", "Neg"]


def _quantized_block() -> onnx.ModelProto:
    """onnxruntime's QOperator format: a QLinearAdd (the bias), a head-split
    Reshape written as a no-op, a QLinearSoftmax and a QLinearConcat with the
    input, all com.microsoft ops onnx's inference does not know."""
    from onnx import TensorProto, helper

    scale, zero = "s", "z"
    nodes = [helper.make_node("QLinearAdd", ["x", scale, zero, "b", scale, zero, scale, zero], ["a"], domain="com.microsoft"),
             helper.make_node("Reshape", ["a", "same"], ["r"]),
             helper.make_node("QLinearSoftmax", ["r", scale, zero, scale, zero], ["p"], domain="com.microsoft", axis=-1,
                              opset=13),
             helper.make_node("QLinearConcat", [scale, zero, "p", scale, zero, "x", scale, zero], ["c"],
                              domain="com.microsoft", axis=1),
             helper.make_node("DequantizeLinear", ["c", scale, zero], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor(scale, TensorProto.FLOAT, [], [0.05]), helper.make_tensor(zero, TensorProto.UINT8, [], [128]),
         helper.make_tensor("b", TensorProto.UINT8, [4], [120, 130, 140, 150]),
         helper.make_tensor("same", TensorProto.INT64, [2], [2, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def test_inference_sees_through_onnxruntimes_quantized_ops():
    m = pyonnxopt.load(_quantized_block())
    pyonnxopt.shapes.infer(m)
    shapes = {v: m.graph.value(v).type for v in ("a", "r", "p", "c")}
    assert {v: t["shape"] for v, t in shapes.items()} == {"a": [2, 4], "r": [2, 4], "p": [2, 4], "c": [2, 8]}
    assert {t["elem_type"] for t in shapes.values()} == {onnx.TensorProto.UINT8}
    assert [n.op_type for n in m.graph.nodes] == ["QLinearAdd", "Reshape", "QLinearSoftmax", "QLinearConcat",
                                                  "DequantizeLinear"]


def test_a_no_op_reshape_between_quantized_ops_goes():
    proto = _quantized_block()
    optimized, report = pyonnxopt.optimize(proto)
    assert "Reshape" not in [n.op_type for n in optimized.to_onnx().graph.node]
    assert report["check"]["first_mismatch"] is None and report["check"]["outputs"] == 1


def _branches_naming_values_alike():
    """If whose branches both define `s` and `c`, of different shapes (as
    optimum's merged decoders do); an If nested in the else branch reads its
    `s`."""
    from onnx import TensorProto as T
    from onnx import helper as h

    def graph(name, nodes, out, inits=()):
        return h.make_graph(nodes, name, [], [h.make_tensor_value_info(out, T.FLOAT, None)], initializer=list(inits))

    ones = h.make_tensor("v", T.FLOAT, [1], [1.0])
    then = graph("t", [h.make_node("Shape", ["x"], ["s"]), h.make_node("ConstantOfShape", ["s"], ["c"], value=ones),
                       h.make_node("ReduceSum", ["c"], ["yt"], keepdims=0)], "yt")
    inner = graph("i", [h.make_node("ConstantOfShape", ["s"], ["k"], value=ones),
                        h.make_node("ReduceMax", ["k"], ["yk"], keepdims=0)], "yk")
    other = graph("e", [h.make_node("Shape", ["x"], ["sx"]), h.make_node("Concat", ["sx", "one"], ["cat"], axis=0),
                        h.make_node("Shape", ["cat"], ["s"]),
                        h.make_node("ConstantOfShape", ["s"], ["c"], value=ones),
                        h.make_node("If", ["flag"], ["yi"], then_branch=inner, else_branch=inner),
                        h.make_node("ReduceSum", ["c"], ["r"], keepdims=0), h.make_node("Add", ["r", "yi"], ["ye"])],
                  "ye", [h.make_tensor("one", T.INT64, [1], [1])])
    main = h.make_graph([h.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other)], "g",
                        [h.make_tensor_value_info("x", T.FLOAT, ["B", "S", 8]),
                         h.make_tensor_value_info("flag", T.BOOL, [])],
                        [h.make_tensor_value_info("y", T.FLOAT, [])])
    return h.make_model(main, opset_imports=[h.make_opsetid("", 18)], ir_version=9)


def test_branches_that_name_values_alike_get_their_own_shapes():
    # onnx's data propagation alone gives the else branch's c the then branch's [B, S, 8]
    m = pyonnxopt.load(_branches_naming_values_alike())
    pyonnxopt.shapes.infer(m)
    branches = m.graph.nodes[0].attributes
    assert branches["then_branch"].value("c").type["shape"] == ["B", "S", 8]
    assert branches["else_branch"].value("s").type["shape"] == [1]
    assert branches["else_branch"].value("c").type["shape"] == [4]
    nested = branches["else_branch"].nodes[4].attributes["then_branch"]
    assert nested.value("k").type["shape"] == [4]
    proto = m.to_onnx()
    onnx.checker.check_model(proto, full_check=True)
    assert b"pyonnxopt_body" not in proto.SerializeToString()  # the copy's names stay in the copy


def test_branches_that_name_values_alike_optimize_to_a_valid_model(tmp_path):
    path = tmp_path / "if.onnx"
    onnx.save(_branches_naming_values_alike(), path)
    _, report = pyonnxopt.optimize(str(path), str(tmp_path / "out.onnx"))
    assert report["check"]["first_mismatch"] is None
    onnx.checker.check_model(onnx.load(tmp_path / "out.onnx"), full_check=True)


def test_a_dim_onnx_once_named_unk_is_worked_out_later():
    # The Reshape's target once came through nodes onnx could not follow (its
    # value_info says unk__1); now it is Concat(-1, Shape(ids)[1], 8), and
    # inference says S.
    text = """g (float[B,4,S,8] x, int64[B,S] ids) => (float[unk__1,S,8] y, int64 k) <
            int64[1] m1 = {-1}, int64[1] d = {8}> {
        s = Shape<start = 1, end = 2>(ids)
        t = Concat<axis = 0>(m1, s, d)
        r = Reshape(x, t)
        y = Relu(r)
        nz = NonZero(x)
        n = NonZero(ids)
        a = ReduceSum<keepdims = 0>(nz)
        b = ReduceSum<keepdims = 0>(n)
        k = Add(a, b)
    }"""
    proto = parse(text, 17)
    vi = onnx.helper.make_tensor_value_info
    proto.graph.value_info.extend([vi("r", onnx.TensorProto.FLOAT, ["unk__1", "unk__2", 8]),
                                   vi("n", onnx.TensorProto.INT64, [2, "unk__0"])])
    m = pyonnxopt.load(proto)
    pyonnxopt.shapes.infer(m)
    assert m.graph.value("r").type["shape"] == ["unk__1", "S", 8]  # onnx has no better name for B*4
    # onnx names NonZero's count afresh: never as the model names another dim
    # (n's unk__0, which onnx would give the first NonZero here).
    assert m.graph.value("n").type["shape"] == [2, "unk__0"]
    made = m.graph.value("nz").type["shape"]
    assert made[0] == 4 and made[1] not in ("unk__0", "unk__1", "unk__2", "S", "B")


def test_dims_a_later_inference_links_take_one_generated_name():
    # An earlier inference could not see that the Reshape's 0 copies q's
    # batch (its value_info names them apart); inferring again links them,
    # keeps one of the model's names, and a third run renames nothing.
    text = """g (float[N,9,64] x, float[64,64] w) => (float[unk__9,9,2,32] y) <int64[4] split = {0, 0, -1, 32}> {
        b = Relu(x)
        q = MatMul(b, w)
        k = MatMul(b, w)
        qh = Reshape(q, split)
        kh = Reshape(k, split)
        y = Add(qh, kh)
    }"""
    proto = parse(text, 17)
    proto.graph.input[0].type.tensor_type.shape.dim[0].ClearField("dim_param")  # a batch of no name
    vi = onnx.helper.make_tensor_value_info
    proto.graph.value_info.extend([vi("q", onnx.TensorProto.FLOAT, ["unk__3", 9, 64]),
                                   vi("qh", onnx.TensorProto.FLOAT, ["unk__5", 9, 2, 32]),
                                   vi("kh", onnx.TensorProto.FLOAT, ["unk__7", 9, 2, 32])])
    m = pyonnxopt.load(proto)
    pyonnxopt.shapes.infer(m)
    dims = {m.graph.value(v).type["shape"][0] for v in ("b", "q", "k", "qh", "kh")}
    assert dims == {"unk__3"}  # the smallest of the model's names
    assert pyonnxopt.shapes.infer(m) == {"values_typed": 0}


def test_a_scalar_input_given_as_name_colon():
    """A diffusion UNet's timestep is 0-d: `--input-shape timestep:` fixes
    it so; a 1-d one refuses with its rank."""
    m = pyonnxopt.load(parse("""g (float[N,4] x, float t) => (float[N,4] y) { y = Mul(x, t) }"""))
    assert fix_input_shapes(m, {"t": [], "x": [2, 4]}) == ["x", "t"]
    assert m.graph.value("t").type["shape"] == []
    m = pyonnxopt.load(parse("""g (float[N,4] x, float[1] t) => (float[N,4] y) { y = Mul(x, t) }"""))
    with pytest.raises(Error, match="input 't' has rank 1, the shape given has 0 dims"):
        fix_input_shapes(m, {"t": []})


# onnx 1.23 infers Slice-10 (opset 10 only) as keeping a sliced axis's
# symbol: x[:, 4:6] of [5, N, 5] would be [5, N, 5], and a rule trusting it
# drops the Slice.
SLICE_10 = """g (float[5, N, 5] x, float[K, 5] v, float[B, T] u) => (float[5, M, 5] y, float[L, 5] z, float[B, P] w)
    <int64[1] s = {4}, int64[1] e = {6}, int64[1] a = {1}> {
    c = Concat <axis = 1> (x, x)
    part = Slice (c, s, e, a)
    y = Sigmoid(part)
    z = Slice (v, s, e)
    cs = Constant <value = int64[1] {1}> ()
    ce = Constant <value = int64[1] {3}> ()
    ca = Constant <value = int64[1] {-1}> ()
    w = Slice (u, cs, ce, ca)
}"""


def test_a_slice_10_of_a_symbolic_axis_does_not_keep_its_symbol(tmp_path):
    from pyonnxopt.shapes import infer

    model = pyonnxopt.load(parse(SLICE_10, opset=10))
    infer(model)
    concat, part = model.graph.value("c").type["shape"], model.graph.value("part").type["shape"]
    assert concat[0] == 5 and part[0] == 5 and part[2] == 5 and part[1] != concat[1]
    assert model.graph.value("z").type["shape"][0] != "K"  # no axes: axis 0
    assert model.graph.value("w").type["shape"][0] == "B" and model.graph.value("w").type["shape"][1] != "T"
    for opset in (None, 13):
        optimized, report = pyonnxopt.optimize(parse(SLICE_10, opset=10), opset=opset)
        assert report["check"]["first_mismatch"] is None
        ops = [n.op_type for n in optimized.graph.nodes]
        assert ops.count("Slice") >= 2, ops
        x, v, u = (np.random.default_rng(0).standard_normal(shape).astype(np.float32)
                   for shape in ((5, 3, 5), (7, 5), (2, 6)))
        assert [y.shape for y in outputs(optimized.to_onnx(), {"x": x, "v": v, "u": u})] == [(5, 2, 5), (2, 5), (2, 2)]
