import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from verify_models import W1, W2, chain, save

import pyonnxopt
from pyonnxopt import shapes
from pyonnxopt.verify import intermediates as im


def names(items):
    return [i.name for i in items]


def test_common_intermediates_are_the_shared_computed_names_in_node_order():
    a = pyonnxopt.load(chain())
    b = pyonnxopt.load(chain(names=("h1", "fused_r1", "h2")))
    found = im.common_intermediates(a, b)
    # r1 is gone under that name; y is a graph output (compared as one); x, w1, w2 are inputs/initializers
    assert names(found) == ["h1", "h2"]
    assert [(i.op_type, i.order) for i in found] == [("MatMul", 0), ("MatMul", 2)]


def test_constant_outputs_are_weights_not_layers():
    m = chain()
    m.graph.node.insert(0, helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones(4, np.float32))))
    m.graph.node[-1].CopyFrom(helper.make_node("Relu", ["h2"], ["r2"], name="relu2"))
    m.graph.node.append(helper.make_node("Add", ["r2", "c"], ["y"], name="add"))
    model = pyonnxopt.load(m)
    assert names(im.common_intermediates(model, model)) == ["h1", "r1", "h2", "r2"]


def test_with_outputs_adds_untyped_outputs_to_a_copy(tmp_path):
    path = save(chain(), tmp_path / "m.onnx")
    before = open(path, "rb").read()
    ref = im.open_model(path, "original")
    copy = str(tmp_path / "copy.onnx")
    im.write_with_outputs(ref, ["h1", "r1"], copy)
    sess = ort.InferenceSession(copy, providers=["CPUExecutionProvider"])
    assert [o.name for o in sess.get_outputs()] == ["y", "h1", "r1"]
    x = np.ones((1, 4), np.float32)
    y, h1, r1 = sess.run(None, {"x": x})
    np.testing.assert_allclose(h1, x @ W1, rtol=1e-6)
    np.testing.assert_allclose(r1, np.maximum(x @ W1, 0), rtol=1e-6)
    assert open(path, "rb").read() == before  # the user's file is untouched
    assert onnx.load(path).graph.output[0].name == "y" and len(onnx.load(path).graph.output) == 1


def test_open_model_takes_bytes_and_protos(tmp_path):
    proto = chain()
    for source in (proto, proto.SerializeToString()):
        ref = im.open_model(source, "optimized")
        assert ref.path is None and ref.where == "optimized model (<memory>)"
        assert ref.read_bytes() == proto.SerializeToString()
        im.write_with_outputs(ref, ["r1"], str(tmp_path / "copy.onnx"))
        assert [o.name for o in onnx.load(str(tmp_path / "copy.onnx")).graph.output] == ["y", "r1"]


def test_estimated_bytes_resolves_symbolic_dims_from_the_feeds():
    model = pyonnxopt.load(chain(batch="N"))
    shapes.infer(model)
    symbols = im.dim_symbols(model, {"x": np.zeros((3, 4), np.float32)})
    assert symbols == {"N": 3}
    assert im.estimated_bytes(model, "h1", symbols) == 3 * 4 * 4
    assert im.estimated_bytes(model, "h1", {}) is None  # N unknown
    assert im.estimated_bytes(model, "nothing", symbols) is None


def test_plan_groups_by_budget_and_count():
    sizes = {"a": 10, "b": 10, "c": 10, "d": None}
    # both models hold a copy: 20 bytes per 10-byte tensor
    assert im.plan_groups(list("abcd"), sizes, budget=40, group_size=None, guess=10) == [["a", "b"], ["c", "d"]]
    assert im.plan_groups(list("abcd"), sizes, budget=10**9, group_size=None, guess=10) == [list("abcd")]
    assert im.plan_groups(list("abcd"), sizes, budget=10**9, group_size=3, guess=10) == [["a", "b", "c"], ["d"]]
    # a tensor larger than the budget goes alone
    one_big = {"a": 1, "b": 100, "c": 1}
    assert im.plan_groups(list("abc"), one_big, budget=50, group_size=None, guess=1) == [["a"], ["b"], ["c"]]
    assert im.measured_guess({}, 7) == 7 and im.measured_guess({"a": 2, "b": 5}, 7) == 4


def test_external_data_is_found_beside_the_file(tmp_path):
    path = tmp_path / "ext.onnx"
    onnx.save(chain(), str(path), save_as_external_data=True, location="ext.data", size_threshold=0)
    ref = im.open_model(str(path), "original")
    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.model_external_initializers_file_folder_path", ref.folder)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    im.write_with_outputs(ref, ["h2"], str(scratch / "copy.onnx"))
    sess = ort.InferenceSession(str(scratch / "copy.onnx"), opts, providers=["CPUExecutionProvider"])
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(sess.run(["h2"], {"x": x})[0], np.maximum(x @ W1, 0) @ W2, rtol=1e-5)


def test_non_tensor_values_are_not_layers():
    seq = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("SequenceConstruct", ["r", "r"], ["s"], name="seq"),
         helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, name="cat")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    model = pyonnxopt.load(helper.make_model(seq, opset_imports=[helper.make_opsetid("", 17)]))
    shapes.infer(model)
    assert names(im.common_intermediates(model, model)) == ["r"]
