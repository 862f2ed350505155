"""eliminate_nop: structure, numbers, refusals, idempotence."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import parser

import pyonnxopt
from pyonnxopt.passes import get

HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


def run(text):
    m = pyonnxopt.load(parser.parse_model(HEADER + text))
    result = get("eliminate_nop").run(m)
    assert m.check_invariants() == []
    onnx.checker.check_model(m.to_onnx(), full_check=True)
    return m, result


def ops(m):
    return [n.op_type for n in m.graph.nodes]


def test_no_op_nodes_go():
    m, r = run("""g (float[2,3] x) => (float[2,3] y) {
        a = Transpose <perm = [0, 1]> (x)
        b = Concat <axis = 0> (a)
        c = Sum(b)
        d = Cast <to = 1> (c)
        e = Max(d)
        f = Split <axis = 0> (e)
        y = Relu(f)
    }""")
    assert ops(m) == ["Relu"] and m.graph.nodes[0].inputs[0].name == "x"
    assert r.stats["nodes_removed"] == 6


def test_real_work_stays():
    m, r = run("""g (float[2,3] x, int64[2,3] i) => (float[3,2] y, int64[2,3] z, float[2,3] w, float[4,3] v) {
        y = Transpose <perm = [1, 0]> (x)
        z = Cast <to = 7> (i)
        a = Cast <to = 11> (x)
        w = Cast <to = 1> (a)
        v = Concat <axis = 0> (x, x)
    }""")
    # z: int64 -> int64 is a no-op, but z is a graph output fed by a graph input.
    assert ops(m) == ["Transpose", "Cast", "Cast", "Cast", "Concat"]
    assert any("graph input" in x for x in r.stats["refused"])


def test_unknown_types_and_implicit_perm_are_refused():
    m, r = run("""g (float[2,3] x) => (float[3,2] y) {
        a = Relu(x)
        b = Cast <to = 1> (a)
        y = Transpose(b)
    }""")
    assert ops(m) == ["Relu", "Cast", "Transpose"]
    reasons = sorted(x.split(": ", 1)[1] for x in r.stats["refused"])
    assert reasons == ["Transpose without perm: a no-op only at rank <= 1", "input or target type unknown"]


def test_type_from_value_info_is_used():
    model = parser.parse_model(HEADER + """g (float[2,3] x) => (float[2,3] y) {
        a = Relu(x)
        b = Cast <to = 1> (a)
        y = Neg(b)
    }""")
    model.graph.value_info.append(onnx.helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [2, 3]))
    m = pyonnxopt.load(model)
    assert get("eliminate_nop").run(m).stats["nodes_removed"] == 1 and ops(m) == ["Relu", "Neg"]


def test_numbers_and_idempotence():
    text = """g (float[2,3] x) => (float[2,3] y) {
        a = Transpose <perm = [0, 1]> (x)
        b = Sigmoid(a)
        c = Mean(b)
        y = Mul(c, x)
    }"""
    before = parser.parse_model(HEADER + text)
    m, r = run(text)
    assert ops(m) == ["Sigmoid", "Mul"]
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    want = ort.InferenceSession(before.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(m.to_bytes(), opts, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    assert not get("eliminate_nop").run(m).modified
