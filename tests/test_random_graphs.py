"""The whole pipeline on random graphs (fuzz/random_graphs.py) and random
torch modules (fuzz/random_torch.py), against onnxruntime: every variant's
result runs and gives the original's outputs. `python
fuzz/fuzz_pipeline.py --seeds A:B [--source torch|torch-dynamo] [--dtype
float16]` runs many more seeds."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fuzz"))

from float16 import to_float16  # noqa: E402
from fuzz_pipeline import VARIANTS, check_seed, close, no_less_accurate  # noqa: E402
from random_graphs import random_model  # noqa: E402

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("seed", range(40))
def test_random_graph(seed):
    status, lines = check_seed(seed, list(VARIANTS))
    assert status == "ok", "\n".join(lines)


@pytest.mark.parametrize("seed", range(1000, 1010))
def test_random_graph_in_float16(seed):
    status, lines = check_seed(seed, list(VARIANTS), dtype="float16")
    if status == "invalid":  # past half's range, or an op onnxruntime has no half kernel for
        pytest.skip(lines[0])
    assert status == "ok", "\n".join(lines)


def test_float16_makes_every_float_half_and_leaves_the_rest():
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    then = helper.make_graph([helper.make_node("Constant", [], ["t"], value_floats=[1.0, 2.0])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    graph = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("ConstantOfShape", ["n"], ["z"], value=numpy_helper.from_array(np.array([0.5], np.float32))),
         helper.make_node("If", ["c"], ["b"], then_branch=then, else_branch=then)], "g",
        [helper.make_tensor_value_info("i", TensorProto.INT32, [2]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "fzb"],
        [numpy_helper.from_array(np.array([2], np.int64), "n"), numpy_helper.from_array(np.ones(2, np.float32), "w")])
    model = helper.make_model(graph)
    half, feeds = to_float16(model, {"i": np.arange(2, dtype=np.int32), "x": np.ones(2, np.float32)})
    assert [o.type.tensor_type.elem_type for o in half.graph.output] == [TensorProto.FLOAT16] * 3
    assert half.graph.node[0].attribute[0].i == TensorProto.FLOAT16
    assert half.graph.node[1].attribute[0].t.data_type == TensorProto.FLOAT16
    body = half.graph.node[2].attribute[0].g
    assert body.node[0].attribute[0].t.data_type == TensorProto.FLOAT16
    assert body.output[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    assert [t.data_type for t in half.graph.initializer] == [TensorProto.INT64, TensorProto.FLOAT16]
    assert feeds["i"].dtype == np.int32 and feeds["x"].dtype == np.float16
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT  # the original stays
    onnx.checker.check_model(half)


@pytest.mark.parametrize("seed", range(4))
def test_random_torch_module(seed):
    pytest.importorskip("torch", reason="torch exports need torch (CI installs the CPU build)")
    status, lines = check_seed(seed, list(VARIANTS), source="torch")
    assert status == "ok", "\n".join(lines)


@pytest.mark.parametrize("seed", [2, 3])
def test_random_torch_module_by_dynamo(seed):
    pytest.importorskip("torch", reason="torch exports need torch (CI installs the CPU build)")
    pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
    status, lines = check_seed(seed, list(VARIANTS), source="torch-dynamo")
    assert status == "ok", "\n".join(lines)


def test_a_seed_gives_the_same_model_every_time():
    import numpy as np

    a, feeds_a = random_model(12345)
    b, feeds_b = random_model(12345)
    assert a.SerializeToString() == b.SerializeToString()
    assert feeds_a.keys() == feeds_b.keys()
    assert all(np.array_equal(feeds_a[k], feeds_b[k], equal_nan=True) for k in feeds_a)


def test_the_comparison_sees_a_changed_value_a_nan_and_a_changed_infinity():
    import numpy as np

    want = np.array([1.0, np.nan, np.inf, -2.0], np.float32)
    assert close(want.copy(), want)
    assert not close(np.array([1.1, np.nan, np.inf, -2.0], np.float32), want)
    assert not close(np.array([1.0, 0.0, np.inf, -2.0], np.float32), want)
    assert not close(np.array([1.0, np.nan, -np.inf, -2.0], np.float32), want)
    assert close(np.array([1.0 + 1e-6, np.nan, np.inf, -2.0], np.float32), want)
    half = want.astype(np.float16)
    assert close(np.array([1.005, np.nan, np.inf, -2.0], np.float16), half)  # half's rounding
    assert not close(np.array([1.05, np.nan, np.inf, -2.0], np.float16), half)


def test_a_float16_result_may_differ_where_it_is_no_farther_from_float32():
    import numpy as np

    exact = np.array([1.0, 2.0, 3.0])
    want = np.array([1.0, 2.0, 3.5], np.float16)  # the float16 original: 0.5 off
    assert not close(np.array([1.0, 2.0, 3.0], np.float16), want)
    assert no_less_accurate(np.array([1.0, 2.0, 3.0], np.float16), want, exact)  # nearer
    assert no_less_accurate(np.array([1.0, 2.0, 2.2], np.float16), want, exact)  # 0.8 off: within twice
    assert not no_less_accurate(np.array([1.0, 2.0, 1.5], np.float16), want, exact)  # 1.5 off
    assert not no_less_accurate(np.array([1.0, np.inf, 3.0], np.float16), want, exact)
    assert not no_less_accurate(np.array([1.0, 2.0, 3.0], np.float32), want.astype(np.float32), exact)
