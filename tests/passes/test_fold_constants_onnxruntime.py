"""fold_constants_onnxruntime: structure, numbers, batching, growth, refusals."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyonnxopt
from pyonnxopt.passes import fold_constants_onnxruntime as fold_ort

from helpers import outputs, parse, run_pass

pytest.importorskip("onnxruntime")

W = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
V = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)


def model(nodes, inputs, outs, inits, value_info=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outs, inits, value_info=list(value_info))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run(m, **options):
    return run_pass("fold_constants_onnxruntime", m, **options)


def test_constant_subgraph_becomes_one_initializer_with_the_same_numbers():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])
    m = model([helper.make_node("MatMul", ["w", "v"], ["wv"], name="mm"),
               helper.make_node("Sin", ["wv"], ["s"], name="sin"),
               helper.make_node("Add", ["x", "s"], ["y"], name="add")],
              [x], [y], [numpy_helper.from_array(W, "w"), numpy_helper.from_array(V, "v")])
    feeds = {"x": np.ones((3, 2), np.float32)}
    want = outputs(m, feeds)
    got, r = run(m)
    assert [n.op_type for n in got.graph.nodes] == ["Add"]
    s = got.graph.value("s")
    assert s.initializer is not None and s.producer is None
    np.testing.assert_array_equal(s.initializer.numpy(), np.sin(W @ V))
    np.testing.assert_array_equal(outputs(got, feeds)[0], want[0])
    assert r.modified and r.stats["nodes_removed"] == 2
    assert r.stats["rewrites"] == [{"what": "folded (onnxruntime)", "consumed": ["mm", "sin"], "produced": ["s"]}]
    again, r2 = run(got.to_onnx())
    assert not r2.modified


def test_all_candidates_run_in_one_session(monkeypatch):
    sessions = []
    real = fold_ort._session
    monkeypatch.setattr(fold_ort, "_session", lambda ort, data: sessions.append(1) or real(ort, data))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    nodes, outs = [], []
    for i in range(5):  # five independent constant branches
        nodes += [helper.make_node("Cos", ["w"], [f"c{i}"]), helper.make_node("Mul", [f"c{i}", "x"], [f"y{i}"])]
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [3, 4]))
    m = model(nodes, [x], outs, [numpy_helper.from_array(W * 0 + np.float32(0.5), "w")])
    got, r = run(m)
    assert sessions == [1] and r.stats["nodes_removed"] == 5
    assert [n.op_type for n in got.graph.nodes] == ["Mul"] * 5


def test_a_result_past_the_size_limit_and_its_inputs_is_refused_before_or_after_running():
    a = np.ones((256, 1), np.float32)
    b = np.ones((1, 256), np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256])
    nodes = [helper.make_node("MatMul", ["a", "b"], ["ab"], name="outer"), helper.make_node("Add", ["x", "ab"], ["y"])]
    inits = [numpy_helper.from_array(a, "a"), numpy_helper.from_array(b, "b")]
    # Unknown shape: computed, then refused (256 KiB > 1 KiB limit and > 2 KiB of inputs).
    got, r = run(model(nodes, [x], [y], inits), fold_size_limit=1024)
    assert [n.op_type for n in got.graph.nodes] == ["MatMul", "Add"]
    assert any("'outer' (MatMul): not folded: result of 262144 bytes passes the fold size limit" in x
               for x in r.stats["refused"])
    # Known shape: refused without running.
    vi = [helper.make_tensor_value_info("ab", TensorProto.FLOAT, [256, 256])]
    got, r = run(model(nodes, [x], [y], inits, vi), fold_size_limit=1024)
    assert [n.op_type for n in got.graph.nodes] == ["MatMul", "Add"]
    assert any("passes the fold size limit" in x for x in r.stats["refused"])
    # Within the limit it folds.
    got, r = run(model(nodes, [x], [y], inits), fold_size_limit=1 << 20)
    assert [n.op_type for n in got.graph.nodes] == ["Add"]


def test_a_growing_op_of_unknown_output_size_is_not_tried():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [12, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [12, 16])
    m = model([helper.make_node("Resize", ["w", "", "scales"], ["big"], name="up"), helper.make_node("Add", ["x", "big"], ["y"])],
              [x], [y], [numpy_helper.from_array(W, "w"), numpy_helper.from_array(np.array([4, 4], np.float32), "scales")])
    got, r = run(m)
    assert [n.op_type for n in got.graph.nodes] == ["Resize", "Add"]
    assert any("'up' (Resize): not folded: its output size is unknown" in x for x in r.stats["refused"])


def test_random_quantize_and_overridable_inputs_stay():
    m, r = run(parse("""g (float[4] x, float[4] w) => (float[4] y, float[4] z, uint8[4] q) <float[4] w = {1, 2, 3, 4}> {
        r = RandomUniformLike(x)
        n = Neg(w)
        y = Add(r, n)
        one = Constant <value = float {0.5}> ()
        zp = Constant <value = uint8 {0}> ()
        k = Constant <value = float[4] {1, 2, 3, 4}> ()
        q = QuantizeLinear(k, one, zp)
        z = DequantizeLinear(q, one, zp)
    }"""))
    assert sorted(n.op_type for n in m.graph.nodes) == sorted(
        ["RandomUniformLike", "Neg", "Add", "Constant", "Constant", "Constant", "QuantizeLinear", "DequantizeLinear"])
    assert not r.modified


def test_what_onnxruntime_cannot_run_is_refused_and_the_rest_folds():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 5])
    bad = np.ones((5, 5), np.float32)  # MatMul of [3,4] x [5,5]: fails when run
    m = model([helper.make_node("Exp", ["w"], ["e"], name="exp"), helper.make_node("Add", ["x", "e"], ["y"]),
               helper.make_node("MatMul", ["w", "bad"], ["wb"], name="bad_mm"), helper.make_node("Neg", ["wb"], ["nb"], name="after_bad"),
               helper.make_node("Add", ["x", "nb"], ["z"])],
              [x], [y, z], [numpy_helper.from_array(W, "w"), numpy_helper.from_array(bad, "bad")])
    got, r = run(m, full_check=False)
    assert [n.op_type for n in got.graph.nodes] == ["Add", "MatMul", "Neg", "Add"]
    assert got.graph.value("e").initializer is not None
    assert any(x.startswith("'bad_mm' (MatMul): onnxruntime cannot run it:") for x in r.stats["refused"])


def test_folds_inside_a_branch_reading_an_outer_constant(if_model):
    then_g = next(a.g for a in if_model.graph.node[1].attribute if a.name == "then_branch")
    then_g.node.insert(0, helper.make_node("Sqrt", ["w"], ["root"], name="then_sqrt"))
    then_g.node[1].input[1] = "root"
    feeds = {"x": np.array([1, 2], np.float32), "cond": np.array(True)}
    want = outputs(if_model, feeds)
    got, r = run(if_model)
    branch = next(g for g in got.graph.nodes[1].subgraphs if g.name == "then")
    assert [n.op_type for n in branch.nodes] == ["Add"] and branch.value("root").initializer is not None
    np.testing.assert_array_equal(outputs(got, feeds)[0], want[0])


def test_excluded_nodes_and_multi_output_nodes():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])
    k = numpy_helper.from_array(np.array([2], np.int64), "k")
    v = numpy_helper.from_array(np.array([3, 1, 4, 1], np.float32), "v")
    nodes = [helper.make_node("TopK", ["v", "k"], ["vals", "idx"], name="topk"),
             helper.make_node("Cast", ["idx"], ["fidx"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Add", ["vals", "fidx"], ["y"]),
             helper.make_node("Exp", ["v"], ["e"], name="keep_me"), helper.make_node("Add", ["x", "e"], ["z"])]
    m = pyonnxopt.load(model(nodes, [x], [y, z], [k, v]))
    next(n for n in m.graph.nodes if n.name == "keep_me").pinned = True
    want = outputs(m, {"x": np.zeros(4, np.float32)})
    r = fold_ort.FoldConstantsOnnxruntime().run(m)
    assert [n.op_type for n in m.graph.nodes] == ["Exp", "Add"]
    assert m.graph.value("y").initializer is not None  # the whole TopK cone folded into the output
    assert "'keep_me' (Exp): excluded from optimization" in r.stats["refused"]
    assert m.check_invariants() == []
    onnx.checker.check_model(m.to_onnx(), full_check=True)
    np.testing.assert_array_equal(outputs(m, {"x": np.zeros(4, np.float32)})[0], want[0])


def test_a_copy_of_a_constant_that_stays_is_growth():
    """A tied embedding: Sin(E) next to a Gather of E itself. Folding would add
    E's size to the model, so past the limit it is refused; alone it folds."""
    e = numpy_helper.from_array(np.ones((64, 64), np.float32), "e")  # 16 KiB
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [2])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])
    g = helper.make_tensor_value_info("g", TensorProto.FLOAT, [2, 64])
    shared = model([helper.make_node("Gather", ["e", "ids"], ["g"]), helper.make_node("Sin", ["e"], ["s"], name="sin"),
                    helper.make_node("Add", ["x", "s"], ["y"])], [ids, x], [g, y], [e])
    got, r = run(shared, fold_size_limit=1024)
    assert [n.op_type for n in got.graph.nodes] == ["Gather", "Sin", "Add"]
    assert any("'sin' (Sin): not folded: result of 16384 bytes passes the fold size limit (1024 bytes)" in x
               for x in r.stats["refused"])
    alone = model([helper.make_node("Sin", ["e"], ["s"], name="sin"), helper.make_node("Add", ["x", "s"], ["y"])],
                  [x], [y], [e])
    got, r = run(alone, fold_size_limit=1024)
    assert [n.op_type for n in got.graph.nodes] == ["Add"]


def test_a_scalar_result_stays_a_scalar():
    """A 0-d result once came back 1-d (numpy's ascontiguousarray), so an
    Unsqueeze after it made rank 2 and a Concat downstream failed."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    ax = helper.make_tensor_value_info("ax", TensorProto.INT64, [1])  # fed: the Unsqueeze is not constant
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    a = numpy_helper.from_array(np.array(0.5, np.float32), "a")
    m = model([helper.make_node("Sin", ["a"], ["s"]),  # no native kernel: onnxruntime folds it
               helper.make_node("Unsqueeze", ["s", "ax"], ["u"]), helper.make_node("Concat", ["u", "x"], ["y"], axis=0)],
              [x, ax], [y], [a])
    got, _ = run(m)
    assert got.graph.value("s").initializer.dims == []
    feeds = {"x": np.array([5], np.float32), "ax": np.array([0], np.int64)}
    np.testing.assert_array_equal(outputs(got, feeds)[0], [np.sin(np.float32(0.5)), 5])


def cpb_mlp(wide_read_elsewhere=False):
    """Swin V2's continuous position bias: a constant table through a wide
    Linear, Relu and a narrow Linear; the wide result ([64, 64] floats, 16
    KiB) is past a 1 KiB limit, the narrow one ([64, 2], 512 bytes) is not."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), name)
             for name, s in (("table", (64, 2)), ("w1", (2, 64)), ("w2", (64, 2)))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 2])
    vi = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [64, 64]) for v in ("wide", "act")]
    nodes = [helper.make_node("MatMul", ["table", "w1"], ["wide"], name="wide"),
             helper.make_node("Relu", ["wide"], ["act"]),
             helper.make_node("MatMul", ["act", "w2"], ["bias"], name="narrow"),
             helper.make_node("Add", ["x", "bias"], ["y"])]
    outs = [y]
    if wide_read_elsewhere:  # by a node of the rest of the graph
        z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [64, 64])
        nodes.append(helper.make_node("Mul", ["wide", "z"], ["wz"]))
        outs.append(helper.make_tensor_value_info("wz", TensorProto.FLOAT, [64, 64]))
        return model(nodes, [x, z], outs, inits, vi)
    return model(nodes, [x], outs, inits, vi)


def test_a_result_past_the_limit_that_only_folded_nodes_read_is_computed_on_the_way():
    before = cpb_mlp()
    got, r = run(before, fold_size_limit=1024)
    assert [n.op_type for n in got.graph.nodes] == ["Add"] and r.stats["refused"] == []
    feeds = {"x": np.ones((64, 2), np.float32)}
    np.testing.assert_allclose(outputs(got, feeds)[0], outputs(before, feeds)[0], rtol=1e-6)


def test_a_result_past_the_limit_read_by_the_rest_of_the_graph_stops_the_chain():
    got, r = run(cpb_mlp(wide_read_elsewhere=True), fold_size_limit=1024)
    assert [n.op_type for n in got.graph.nodes] == ["MatMul", "Relu", "MatMul", "Add", "Mul"]
    assert any("'wide' (MatMul): not folded: result of 16384 bytes passes the fold size limit" in x
               for x in r.stats["refused"])
