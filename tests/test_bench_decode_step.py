"""bench/decode_step.py: a cache dim gets --past, the total length one more,
and two exports of one decoder are timed and compared."""


import numpy as np
import onnx
from onnx import TensorProto, helper

import decode_step


def _decoder(path) -> str:
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total_seq"])
    past = helper.make_tensor_value_info("past_key", TensorProto.FLOAT, ["batch", 2, "past_seq", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("ReduceSum", ["past_key"], ["s"], keepdims=0),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["m"], ["n"], keepdims=0),
             helper.make_node("Add", ["s", "n"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "d", [ids, mask, past], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return str(path)


def test_cache_dims_take_the_past_and_both_exports_are_compared(tmp_path):
    a = _decoder(tmp_path / "a.onnx")
    x = decode_step.feeds(a, past=7)
    assert x["past_key"].shape == (1, 2, 7, 4) and x["attention_mask"].shape == (1, 8)
    assert x["input_ids"].shape == (1, 1) and np.all(x["attention_mask"] == 1)
    r = decode_step.compare(a, a, past=7, rounds=2)
    assert set(r) == {"disable", "all"} and all(v["ratio"] > 0 and v["max_abs_diff"] == 0 for v in r.values())
