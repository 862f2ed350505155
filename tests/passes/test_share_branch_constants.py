"""share_branch_constants: constants several subgraphs hold alike move up, once."""

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import pyonnxopt
from pyonnxopt.passes import get, run_passes

from helpers import outputs

RNG = np.random.default_rng(0)
W = RNG.standard_normal((16, 32)).astype(np.float32)  # 2 KiB


def branch(name: str, weight: np.ndarray, weight_name: str = "w_t", out_constant: bool = False):
    nodes = [h.make_node("MatMul", ["x", weight_name], [f"y_{name}"])]
    outs = [h.make_tensor_value_info(f"y_{name}", T.FLOAT, [2, 32])]
    if out_constant:
        outs = [h.make_tensor_value_info(weight_name, T.FLOAT, [16, 32])]
        nodes = []
    return h.make_graph(nodes, name, [], outs, [numpy_helper.from_array(weight, weight_name)])


def merged(then_weight, else_weight, outer=(), out_constant=False):
    branches = {"then_branch": branch("t", then_weight, out_constant=out_constant),
                "else_branch": branch("e", else_weight, out_constant=out_constant)}
    main = h.make_graph([h.make_node("If", ["flag"], ["y"], **branches)],
                        "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 16]),
                              h.make_tensor_value_info("flag", T.BOOL, [])],
                        [h.make_tensor_value_info("y", T.FLOAT, [2, 32])],
                        [numpy_helper.from_array(a, n) for n, a in outer])
    return h.make_model(main, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def run(proto):
    m = pyonnxopt.load(proto)
    r = get("share_branch_constants").run(m)
    assert m.check_invariants() == []
    return m, r


def initializers(m):
    branches = m.graph.nodes[0].attributes
    return tuple([t.name for t in g.initializers]
                 for g in (m.graph, branches["then_branch"], branches["else_branch"]))


def same_outputs(before, m):
    for flag in (True, False):
        feeds = {"x": RNG.standard_normal((2, 16)).astype(np.float32), "flag": np.array(flag)}
        np.testing.assert_array_equal(outputs(before, feeds)[0], outputs(m, feeds)[0])


def test_branches_holding_one_constant_alike_read_one_copy_above_them():
    proto = merged(W, W.copy())
    m, r = run(proto)
    assert r.stats["initializers_shared"] == 2 and r.stats["bytes_saved"] == W.nbytes
    m, _ = run_passes(m, passes=["eliminate_dead_code"])
    assert initializers(m) == (["w_t_shared1"], [], [])  # not w_t: the branches still held that name
    onnx.checker.check_model(m.to_onnx(), full_check=True)
    same_outputs(proto, m)
    assert not get("share_branch_constants").run(m).modified


def test_a_branch_constant_the_graph_holds_already_reads_that_one():
    proto = merged(W, RNG.standard_normal((16, 32)).astype(np.float32), outer=[("w_t_outer", W.copy())])
    m, r = run(proto)
    assert r.stats["initializers_shared"] == 1 and r.stats["bytes_saved"] == W.nbytes
    m, _ = run_passes(m, passes=["eliminate_dead_code"])
    assert initializers(m) == (["w_t_outer"], [], ["w_t"])
    same_outputs(proto, m)


def test_a_name_taken_anywhere_below_gets_a_fresh_one():
    proto = merged(W, W.copy())
    proto.graph.node.insert(0, h.make_node("Identity", ["x"], ["w_t_shared1"]))
    m, _ = run(proto)
    assert [t.name for t in m.graph.initializers] == ["w_t_shared2"]
    m, _ = run_passes(m, passes=["eliminate_dead_code"])
    onnx.checker.check_model(m.to_onnx(), full_check=True)


def test_different_small_or_returned_constants_stay():
    other = RNG.standard_normal((16, 32)).astype(np.float32)
    small = RNG.standard_normal((16, 2)).astype(np.float32)  # 128 bytes
    for proto in (merged(W, other), merged(small, small.copy()), merged(W, W.copy(), out_constant=True)):
        m, r = run(proto)
        assert not r.modified


def test_merged_tied_embeddings_are_held_once_after_optimizing(tmp_path):
    # Tied embeddings, as optimum writes them: Gather(E) outside, MatMul(h, Transpose(E)) in each branch.
    e = RNG.standard_normal((300, 64)).astype(np.float32)  # 75 KiB

    def body(name):
        return h.make_graph([h.make_node("Transpose", ["emb"], [f"et_{name}"], perm=[1, 0]),
                             h.make_node("MatMul", ["hid", f"et_{name}"], [f"y_{name}"])], name, [],
                            [h.make_tensor_value_info(f"y_{name}", T.FLOAT, [2, 3, 300])])

    main = h.make_graph([h.make_node("Gather", ["emb", "ids"], ["hid"]),
                         h.make_node("If", ["flag"], ["y"], then_branch=body("t"), else_branch=body("e"))], "g",
                        [h.make_tensor_value_info("ids", T.INT64, [2, 3]),
                         h.make_tensor_value_info("flag", T.BOOL, [])],
                        [h.make_tensor_value_info("y", T.FLOAT, [2, 3, 300])], [numpy_helper.from_array(e, "emb")])
    proto = h.make_model(main, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    path, out = tmp_path / "tied.onnx", tmp_path / "out.onnx"
    onnx.save(proto, path)
    _, report = pyonnxopt.optimize(str(path), str(out))
    assert report["check"]["first_mismatch"] is None
    optimized = onnx.load(out)
    held = list(optimized.graph.initializer) + [t for a in optimized.graph.node[1].attribute for t in a.g.initializer]
    assert sorted(tuple(t.dims) for t in held) == [(64, 300), (300, 64)]  # the embedding, and its transpose once
