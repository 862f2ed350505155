"""eliminate_nop: structure, numbers, refusals, idempotence."""

import numpy as np
import onnx

import pyonnxopt
from pyonnxopt.passes import get

from helpers import ops, outputs, parse, run_pass


def run(model):
    return run_pass("eliminate_nop", model, full_check=True)


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
    model = parse("""g (float[2,3] x) => (float[2,3] y) {
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
    before = parse(text)
    m, r = run(text)
    assert ops(m) == ["Sigmoid", "Mul"]
    x = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    want, got = outputs(before, x), outputs(m, x)
    np.testing.assert_array_equal(got[0], want[0])
    assert not get("eliminate_nop").run(m).modified
