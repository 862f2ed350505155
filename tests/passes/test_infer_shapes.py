"""infer_shapes: value_info written back; weightless; failures do not stop the pipeline."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import pyonnxopt
from pyonnxopt import shapes
from pyonnxopt.passes import get, run_passes

from helpers import parse, run_pass


def test_intermediate_types_are_recorded_and_outputs_are_not_touched():
    m, r = run_pass("infer_shapes", parse("""g (float[N, 3, 8] x) => (float y) {
        t = Transpose <perm = [0, 2, 1]> (x)
        y = ReduceSum <keepdims = 0> (t)
    }"""))
    assert m.graph.value("t").type["shape"] == ["N", 8, 3]
    assert m.graph.value("y").type["shape"] == []  # declared rank 0 stays
    assert not r.modified and r.stats["values_typed"] == 1
    assert r.retyped  # new to the passes after it (the pipeline reruns those)
    again = get("infer_shapes").run(m)
    assert again.stats["values_typed"] == 0 and not again.retyped  # idempotent: nothing new the second time


def test_inference_sees_dims_of_weights_it_never_reads():
    big = numpy_helper.from_array(np.zeros((512, 256), np.float32), "w")  # 512 KiB: left out of the copy
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 512])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [big])
    m = pyonnxopt.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    proto = onnx.ModelProto.FromString(m._core.serialize_weightless(shapes.WEIGHTLESS_THRESHOLD))
    assert len(proto.SerializeToString()) < 4096 and proto.graph.initializer[0].data_location == 1
    shapes.infer(m)
    assert m.graph.value("h").type["shape"] == ["B", 256]


def test_subgraph_values_are_typed(if_model):
    m, _ = run_pass("infer_shapes", if_model)
    assert m.graph.value("sq").type["shape"] == [2]


def test_a_failing_inference_is_reported_and_the_passes_go_on(monkeypatch):
    def fail(*args, **kwargs):
        raise onnx.shape_inference.InferenceError("[ShapeInferenceError] broken on purpose")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", fail)
    m, report = run_passes(parse("""g (float[2] x) => (float[2] y) {
        a = Identity(x)
        y = Relu(a)
    }"""))
    first = report.runs[0]
    assert first.name == "infer_shapes" and "broken on purpose" in first.stats["refused"][0]
    assert [n.op_type for n in m.graph.nodes] == ["Relu"]


def test_what_follows_a_group_normalization_keeps_its_type():
    """onnx 1.23's inference types no GroupNormalization output: without a
    stand-in, everything after a UNet's first one lost its type (and the
    fusions that need it) once shapes were inferred again."""
    m, _ = run_pass("infer_shapes", parse("""g (float[N,8,4,4] x, float[8] s, float[8] b) => (float[N,8,4,4] y) {
        g = GroupNormalization <num_groups = 2> (x, s, b)
        r = Relu(g)
        y = Sigmoid(r)
    }""", 21))
    for name in ("g", "r"):
        assert m.graph.value(name).type.get("elem_type") == 1 and m.graph.value(name).type["shape"] == ["N", 8, 4, 4]


def test_an_if_branch_output_takes_the_shape_it_computes():
    # optimum's merged decoders declare both branches' present keys past + seq long; the branch
    # without a cache computes seq (its past is empty), and its mask is cut to that length.
    m, _ = run_pass("infer_shapes", parse("""g (float[B,S,8] x, float[B,P,8] past, bool c) => (float[B,"P + S",8] y) {
        y = If (c) <then_branch = t () => (float[B,"P + S",8] ty) {
            ty = Concat <axis = 1> (past, x)
        }, else_branch = e () => (float[B,"P + S",8] ey) {
            ey = Relu(x)
        }>
    }"""))
    then, other = m.graph.nodes[0].subgraphs
    assert other.outputs[0].type["shape"] == ["B", "S", 8]
    assert then.outputs[0].type["shape"] == ["B", "P + S", 8]  # what it computes has no better name
    assert m.graph.outputs[0].type["shape"] == ["B", "P + S", 8]


def test_a_branch_keeps_the_names_of_its_unknown_dims_when_inferred_again():
    """onnx names unknown dims afresh on each run; where a branch reads an
    outer value with one, the names the branch has stay (they were renamed
    on every run, so inference never settled)."""
    cast = helper.make_node("Cast", ["idx"], ["f"], to=TensorProto.FLOAT)
    branch = helper.make_graph([cast], "b", [], [helper.make_tensor_value_info("f", TensorProto.FLOAT, None)])
    then = helper.make_graph([helper.make_node("Neg", ["idx"], ["g"])], "t", [],
                             [helper.make_tensor_value_info("g", TensorProto.INT64, None)])
    nodes = [helper.make_node("NonZero", ["x"], ["idx"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=branch)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                       helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = pyonnxopt.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    first = get("infer_shapes").run(m)
    body = m.graph.nodes[1].attributes["else_branch"]
    dims = body.value("f").type["shape"]
    assert dims[0] == 1 and str(dims[1]).startswith("unk__") and first.retyped
    get("infer_shapes").run(m)  # the outer value's dim joins the name the branches gave it
    assert body.value("f").type["shape"] == dims == m.graph.value("idx").type["shape"]
    third = get("infer_shapes").run(m)
    assert body.value("f").type["shape"] == dims and third.stats["values_typed"] == 0 and not third.retyped


def test_a_branch_never_takes_a_name_the_main_graph_has_for_another_dim():
    """The copy forgets the main graph's generated names, so onnx may give a
    branch's unknown dim one of them afresh: `idx` (NonZero of y, up to 5)
    read unk__0 like `a2` (NonZero of x, up to 4), a false equality. Fresh
    names in branches are renumbered above the model's, as the main graph's are."""
    branch = helper.make_graph([helper.make_node("NonZero", ["y"], ["idx"]),
                                helper.make_node("Cast", ["idx"], ["f"], to=TensorProto.FLOAT)], "b", [],
                               [helper.make_tensor_value_info("f", TensorProto.FLOAT, None)])
    then = helper.make_graph([helper.make_node("Cast", ["y"], ["g"], to=TensorProto.FLOAT)], "t", [],
                             [helper.make_tensor_value_info("g", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=branch),
             helper.make_node("NonZero", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["a2"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                       helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                                       helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("a2", TensorProto.INT64, None)],
                          value_info=[helper.make_tensor_value_info("a", TensorProto.INT64, [1, "unk__0"])])
    m = pyonnxopt.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    get("infer_shapes").run(m)
    body = m.graph.nodes[0].attributes["else_branch"]
    main_dim = m.graph.value("a").type["shape"][1]
    branch_dim = body.value("idx").type["shape"][1]
    assert main_dim == "unk__0" and str(branch_dim).startswith("unk__") and branch_dim != main_dim
