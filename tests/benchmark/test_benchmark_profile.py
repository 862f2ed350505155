"""The profile: a real onnxruntime trace parsed per op type and per node."""

import glob
import os
import tempfile

import numpy as np
import pytest

from pyonnxopt.benchmark.profile import parse_trace, profile_model
from pyonnxopt.benchmark.session import Settings


def test_real_trace_per_op_type_and_node(chain):
    feeds = [{"x": np.ones((64, 256), np.float32)}]
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "pyonnxopt-profile-*")))
    p = profile_model(chain(3), Settings(intra_op_threads=1, level="disable"), feeds, "A", warmup=2, runs=4)
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "pyonnxopt-profile-*"))) == before  # trace deleted
    assert p["runs"] == 4
    ops = {r["op_type"]: r for r in p["by_op_type"]}
    assert set(ops) == {"MatMul", "Relu", "Identity"}
    assert ops["MatMul"]["count"] == 3 and ops["Relu"]["count"] == 3 and ops["Identity"]["count"] == 1
    assert p["by_op_type"][0]["op_type"] == "MatMul"  # the heavy op comes first
    assert sum(r["share"] for r in p["by_op_type"]) == pytest.approx(1.0)
    assert sum(r["ms"] for r in p["by_op_type"]) == pytest.approx(p["total_ms"])
    assert {n["name"] for n in p["top_nodes"][:3]} == {"matmul0", "matmul1", "matmul2"}
    assert [n["ms"] for n in p["top_nodes"]] == sorted((n["ms"] for n in p["top_nodes"]), reverse=True)
    assert all(n["op_type"] == "MatMul" for n in p["top_nodes"][:3])


def _node(name, op, ts, dur):
    return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": op}}


def test_warm_up_runs_are_left_out_and_ms_are_per_run():
    run = lambda ts: {"cat": "Session", "name": "model_run", "ts": ts, "dur": 10}  # noqa: E731
    events = [run(0), _node("a", "Conv", 1, 5000),  # warm-up: left out
              run(100), _node("a", "Conv", 101, 1000), _node("b", "Relu", 102, 1000),
              run(200), _node("a", "Conv", 201, 3000), _node("b", "Relu", 202, 1000),
              {"cat": "Node", "name": "a_fence_before", "ts": 150, "dur": 999999}]
    p = parse_trace(events, skip_runs=1)
    assert p["runs"] == 2
    assert p["by_op_type"] == [{"op_type": "Conv", "ms": 2.0, "share": pytest.approx(4 / 6), "count": 1},
                               {"op_type": "Relu", "ms": 1.0, "share": pytest.approx(2 / 6), "count": 1}]
    assert p["top_nodes"][0] == {"name": "a", "op_type": "Conv", "ms": 2.0, "share": pytest.approx(4 / 6)}
