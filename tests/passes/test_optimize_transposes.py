"""optimize_transposes: merges, cancels, moves through each op family;
refusals; numbers in onnxruntime; graph outputs, subgraphs, idempotence."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyonnxopt
from pyonnxopt.passes import PassOptions, get

from helpers import ops, outputs, parse, random_feeds, run_pass, structure


def run(model, opset=17):
    return run_pass("optimize_transposes", parse(model, opset) if isinstance(model, str) else model)


def reasons(result):
    return [x.split(": ", 1)[1] for x in result.stats["refused"]]


def attribute(m, index, name):
    node = m.to_onnx().graph.node[index]
    return next(helper.get_attribute_value(a) for a in node.attribute if a.name == name)


def initializer(m, name):
    return numpy_helper.to_array(next(t for t in m.to_onnx().graph.initializer if t.name == name))


def same_numbers(before, after, feeds=None):
    feeds = feeds or random_feeds(before)
    for want, got in zip(outputs(before, feeds), outputs(after, feeds)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


def check(text, opset=17, shaped=False, name="optimize_transposes"):
    """Runs the pass (after infer_shapes when `shaped`: rules that need the
    dims); the numbers match, and a second run changes nothing. `name`
    "regroup_transposes", the pass that also turns the Transposes of
    size-1 axes into Reshapes (optimize_transposes leaves them for the
    fusions, whose own Transposes may cancel them)."""
    before = parse(text, opset) if isinstance(text, str) else text
    if shaped:
        m, _ = run_pass("infer_shapes", before)
        r = get(name).run(m, PassOptions())
    else:
        m, r = run_pass(name, before)
    same_numbers(before, m)
    again = get(name).run(m, PassOptions())
    assert not again.modified, again.stats
    return m, r


# ---- Transpose meets Transpose ----

def test_inverse_pair_cancels():
    m, r = check("""g (float[2,3,4] x) => (float[2,3,4] y) {
        a = Relu(x)
        b = Transpose <perm = [0, 2, 1]> (a)
        y = Transpose <perm = [0, 2, 1]> (b)
    }""")
    assert structure(m) == [("Relu", ["x"], ["y"])]
    assert r.stats["nodes_removed"] == 2 and r.stats["rewrites"][0]["what"] == "cancelled transposes"


def test_pair_merges_into_one():
    m, r = check("""g (float[2,3,4] x) => (float[4,2,3] y) {
        a = Transpose <perm = [1, 2, 0]> (x)
        y = Transpose <perm = [1, 2, 0]> (a)
    }""")
    assert structure(m) == [("Transpose", ["x"], ["y"])] and attribute(m, 0, "perm") == [2, 0, 1]
    assert r.stats["rewrites"][0]["what"] == "merged transposes"


def test_first_read_elsewhere_stays_and_the_inverse_goes():
    m, r = check("""g (float[2,3] x) => (float[3,2] b, float[2,3] y) {
        a = Transpose <perm = [1, 0]> (x)
        b = Relu(a)
        c = Transpose <perm = [1, 0]> (a)
        y = Sigmoid(c)
    }""")
    assert structure(m) == [("Transpose", ["x"], ["a"]), ("Relu", ["a"], ["b"]), ("Sigmoid", ["x"], ["y"])]


def test_first_read_elsewhere_stays_and_the_second_reads_its_input():
    m, r = check("""g (float[2,3,4] x) => (float[3,4,2] b, float[4,2,3] c) {
        a = Transpose <perm = [1, 2, 0]> (x)
        b = Relu(a)
        c = Transpose <perm = [1, 2, 0]> (a)
    }""")
    assert structure(m) == [("Transpose", ["x"], ["a"]), ("Relu", ["a"], ["b"]), ("Transpose", ["x"], ["c"])]
    assert attribute(m, 2, "perm") == [2, 0, 1]
    assert r.stats["nodes_removed"] == r.stats["nodes_added"] == 1  # replaced: the count stays


def test_transpose_without_perm_reverses():
    m, r = check("""g (float[2,3,4] x) => (float[2,3,4] y) {
        b = Transpose(x)
        c = Neg(b)
        y = Transpose(c)
    }""")
    assert structure(m) == [("Neg", ["x"], ["y"])]


@pytest.mark.parametrize("shape, perm, target", [
    ("1,197,8", [1, 0, 2], [197, 1, 8]),
    ("N,1,5", [0, 2, 1], [0, 5, 1]),  # the unknown dim stays where it is: 0 copies it
    ("1,N", [1, 0], [-1, 1]),  # it moves: -1
    ("N,1,M", [1, 0, 2], [1, -1, 0]),
])
def test_a_transpose_of_size_1_axes_is_a_reshape(shape, perm, target):
    out = ",".join(shape.split(",")[i] for i in perm)
    text = f"""g (float[{shape}] x) => (float[{out}] y) {{
        y = Transpose <perm = {perm}> (x)
    }}"""
    m, r = run(text)
    assert ops(m) == ["Transpose"] and not r.modified  # left for the fusions
    m, r = check(text, name="regroup_transposes")
    [(op, [_, s], outs)] = structure(m)
    assert op == "Reshape" and outs == ["y"] and initializer(m, s).tolist() == target
    assert r.stats["rewrites"][0]["what"] == "transpose of size-1 axes to reshape"


@pytest.mark.parametrize("shape, perm", [("2,3", [1, 0]), ("N,M,1", [2, 0, 1]), ("1,0,3", [1, 0, 2])])
def test_transposes_that_move_data_stay(shape, perm):
    out = ",".join(shape.split(",")[i] for i in perm)
    m, r = run(f"""g (float[{shape}] x) => (float[{out}] y) {{
        y = Transpose <perm = {perm}> (x)
    }}""")
    assert ops(m) == ["Transpose"] and not r.modified


def test_a_size_1_transpose_that_cancels_cancels():
    m, r = check("""g (float[1,3,4] x) => (float[1,3,4] y) {
        a = Relu(x)
        b = Transpose <perm = [1, 0, 2]> (a)
        c = Neg(b)
        y = Transpose <perm = [1, 0, 2]> (c)
    }""")
    assert structure(m) == [("Relu", ["x"], ["a"]), ("Neg", ["a"], ["y"])]


# ---- through unary ops ----

UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Erf", "Softplus", "Softsign", "Floor",
         "Ceil", "Round", "Sign", "Sin", "Reciprocal", "Identity", "Elu", "Selu", "Celu", "HardSwish", "Mish",
         "Shrink", "ThresholdedRelu", "Gelu", "LeakyRelu <alpha = 0.2>", "HardSigmoid <alpha = 0.3, beta = 0.4>"]


@pytest.mark.parametrize("op", UNARY + ["Cast <to = 11>", "IsNaN", "Clip", "CastLike", "Not", "BitwiseNot"])
def test_unary_ops_let_it_through(op):
    x_type, y_type, extra, consts = "float", "float", "", ""
    if op == "Cast <to = 11>":
        y_type = "double"
    elif op == "IsNaN":
        y_type = "bool"
    elif op == "Clip":
        extra, consts = ", lo, hi", "<float lo = {-0.5}, float hi = {0.5}>"
    elif op == "CastLike":
        extra, consts, y_type = ", like", "<double[1] like = {1.0}>", "double"
    elif op == "Not":
        x_type = y_type = "bool"
    elif op == "BitwiseNot":
        x_type = y_type = "int32"
    m, r = check(f"""g ({x_type}[2,3,4] x) => ({y_type}[2,3,4] y) {consts} {{
        a = Transpose <perm = [1, 2, 0]> (x)
        b = {op}(a{extra})
        y = Transpose <perm = [2, 0, 1]> (b)
    }}""", opset=20)
    assert structure(m) == [(op.split(" ")[0], ["x"] + [v.strip() for v in extra.split(",")[1:]], ["y"])]


def test_a_chain_of_ops_carries_it_to_its_inverse():
    m, r = check("""g (float[1,3,4,5] x) => (float[1,3,4,5] y) {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = Relu(a)
        c = Sigmoid(b)
        d = Neg(c)
        y = Transpose <perm = [0, 3, 1, 2]> (d)
    }""")
    assert structure(m) == [("Relu", ["x"], ["b"]), ("Sigmoid", ["b"], ["c"]), ("Neg", ["c"], ["y"])]


def test_no_inverse_ahead_leaves_it_where_it_is():
    text = """g (float[1,3,4,5] x) => (float[1,4,5,3] y) {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = Relu(a)
        y = Sigmoid(b)
    }"""
    m, r = run(text)
    assert not r.modified and structure(m) == structure(pyonnxopt.load(parse(text)))


# ---- through broadcasting ops ----

def test_constants_of_every_rank_are_transposed_by_the_inverse():
    bias = ", ".join(str(v) for v in range(3))
    w = ", ".join(str(v / 10) for v in range(60))
    m, r = check(f"""g (float[2,3,4,5] x) => (float[2,3,4,5] y)
              <float[3] bias = {{{bias}}}, float[4,5,3] w = {{{w}}}, float s = {{2.0}}, float[1,1,1,1] one = {{3.0}}> {{
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = Add(a, bias)
        c = Mul(w, b)
        d = Sub(c, s)
        e = Div(d, one)
        y = Transpose <perm = [0, 3, 1, 2]> (e)
    }}""")
    assert structure(m) == [("Add", ["x", "bias_transposed"], ["b"]), ("Mul", ["w_transposed", "b"], ["c"]),
                            ("Sub", ["c", "s"], ["d"]), ("Div", ["d", "one"], ["y"])]
    assert initializer(m, "bias_transposed").shape == (1, 3, 1, 1)
    assert initializer(m, "w_transposed").shape == (1, 3, 4, 5)
    assert r.stats["initializers_removed"] == 2  # the originals, read by nothing else


def test_operands_transposed_the_same_way_are_read_untransposed():
    m, r = check("""g (float[2,3,4] x, float[2,3,4] z, bool[2,3,4] c) => (float[2,3,4] y) {
        a = Transpose <perm = [2, 0, 1]> (x)
        b = Transpose <perm = [2, 0, 1]> (z)
        k = Transpose <perm = [2, 0, 1]> (c)
        s = Where(k, a, b)
        p = Pow(s, b)
        y = Transpose <perm = [1, 2, 0]> (p)
    }""")
    assert structure(m) == [("Where", ["c", "x", "z"], ["s"]), ("Pow", ["s", "z"], ["y"])]


def test_two_transposed_inputs_pull_the_transpose_below_the_node():
    m, r = check("""g (float[2,3,4] x, float[2,3,4] z) => (float[4,2,3] y) {
        a = Transpose <perm = [2, 0, 1]> (x)
        b = Transpose <perm = [2, 0, 1]> (z)
        s = Add(a, b)
        y = Relu(s)
    }""")
    # One Transpose, after the Add: moving it past the Relu would gain nothing.
    assert structure(m) == [("Add", ["x", "z"], ["s_untransposed"]), ("Transpose", ["s_untransposed"], ["s"]),
                            ("Relu", ["s"], ["y"])]
    assert attribute(m, 1, "perm") == [2, 0, 1]
    assert r.stats["nodes_removed"] == 2 and r.stats["nodes_added"] == 1


def test_prelu_sum_max_and_comparisons():
    m, r = check("""g (float[1,4,3,3] x, float[1,4,3,3] z) => (bool[1,4,3,3] y)
              <float[4] slope = {0.1, 0.2, 0.3, 0.4}> {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = Transpose <perm = [0, 2, 3, 1]> (z)
        p = PRelu(a, slope)
        s = Sum(p, b, a)
        n = Max(s, b)
        e = Greater(n, a)
        y = Transpose <perm = [0, 3, 1, 2]> (e)
    }""")
    assert ops(m) == ["PRelu", "Sum", "Max", "Greater"]


def test_a_small_shared_constant_is_copied():
    m, r = check("""g (float[2,2] x) => (float[2,2] y, float[2,2] z) <float[2] c = {1.0, 2.0}> {
        a = Transpose <perm = [1, 0]> (x)
        b = Add(a, c)
        y = Transpose <perm = [1, 0]> (b)
        z = Mul(x, c)
    }""")
    assert structure(m) == [("Add", ["x", "c_transposed"], ["y"]), ("Mul", ["x", "c"], ["z"])]


# ---- Concat, Split ----

def test_concat_of_three_transposed_heads():
    m, r = check("""g (float[1,2,4,4] a, float[1,3,4,4] b, float[1,5,4,4] c) => (float[1,10,4,4] y) {
        ta = Transpose <perm = [0, 2, 3, 1]> (a)
        tb = Transpose <perm = [0, 2, 3, 1]> (b)
        tc = Transpose <perm = [0, 2, 3, 1]> (c)
        cat = Concat <axis = -1> (ta, tb, tc)
        y = Transpose <perm = [0, 3, 1, 2]> (cat)
    }""")
    assert structure(m) == [("Concat", ["a", "b", "c"], ["y"])] and attribute(m, 0, "axis") == 1
    assert r.stats["nodes_removed"] == 4


def test_concat_with_a_constant_input():
    m, r = check("""g (float[1,2,4] a) => (float[1,3,4] y) <float[1,4,1] k = {0.0, 1.0, 2.0, 3.0}> {
        ta = Transpose <perm = [0, 2, 1]> (a)
        cat = Concat <axis = 2> (ta, k)
        y = Transpose <perm = [0, 2, 1]> (cat)
    }""")
    assert structure(m) == [("Concat", ["a", "k_transposed"], ["y"])] and attribute(m, 0, "axis") == 1
    assert initializer(m, "k_transposed").shape == (1, 1, 4)


def test_split_sends_one_transpose_down_each_output():
    m, r = check("""g (float[1,4,3,6] x) => (float[1,4,3,3] y1, float[1,4,3,3] y2) {
        t = Transpose <perm = [0, 2, 3, 1]> (x)
        s1, s2 = Split <axis = 2> (t)
        u1 = Transpose <perm = [0, 3, 1, 2]> (s1)
        u2 = Transpose <perm = [0, 3, 1, 2]> (s2)
        y1 = Relu(u1)
        y2 = Relu(u2)
    }""")
    assert structure(m) == [("Split", ["x"], ["s1", "s2"]), ("Relu", ["s1"], ["y1"]), ("Relu", ["s2"], ["y2"])]
    assert attribute(m, 0, "axis") == 3 and r.stats["nodes_removed"] == 3


def test_split_output_read_elsewhere_gets_its_own_transpose():
    m, r = check("""g (float[1,4,3,6] x) => (float[1,4,3,3] y1, float[1,3,3,4] y2) {
        t = Transpose <perm = [0, 2, 3, 1]> (x)
        s1, s2 = Split <axis = 2> (t)
        y1 = Transpose <perm = [0, 3, 1, 2]> (s1)
        y2 = Relu(s2)
    }""")
    assert structure(m) == [("Split", ["x"], ["y1", "s2_untransposed"]),
                            ("Transpose", ["s2_untransposed"], ["s2"]), ("Relu", ["s2"], ["y2"])]


# ---- reductions ----

def test_reduce_keepdims_remaps_axes():
    m, r = check("""g (float[2,3,4,5] x) => (float[2,1,4,5] y) {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = ReduceMax <axes = [3], keepdims = 1> (a)
        y = Transpose <perm = [0, 3, 1, 2]> (b)
    }""")
    assert structure(m) == [("ReduceMax", ["x"], ["y"])] and attribute(m, 0, "axes") == [1]


def test_reduce_without_keepdims_computes_the_output_perm():
    m, r = check("""g (float[2,3,4,5] x) => (float[2,3,5] y) {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = ReduceMean <axes = [1], keepdims = 0> (a)
        y = Transpose <perm = [0, 2, 1]> (b)
    }""")
    assert structure(m) == [("ReduceMean", ["x"], ["y"])] and attribute(m, 0, "axes") == [2]


def test_reduce_axes_as_input_from_opset_18():
    m, r = check("""g (float[2,3,4,5] x) => (float[2,4,5] y) <int64[1] ax = {3}> {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = ReduceSum <keepdims = 0> (a, ax)
        c = Relu(b)
        y = Neg(c)
    }""", opset=18)
    # The kept axes (N, H, W) keep their order: nothing to transpose after.
    assert structure(m) == [("ReduceSum", ["x", "ax_permuted"], ["b"]), ("Relu", ["b"], ["c"]), ("Neg", ["c"], ["y"])]
    assert initializer(m, "ax_permuted").tolist() == [1]


def test_reducing_everything_needs_no_transpose():
    m, r = check("""g (float[2,3,4] x) => (float y, float[1,1,1] z) {
        a = Transpose <perm = [2, 0, 1]> (x)
        y = ReduceSum <keepdims = 0> (a)
        b = Transpose <perm = [2, 0, 1]> (x)
        z = ReduceL2 (b)
    }""")
    assert structure(m) == [("ReduceSum", ["x"], ["y"]), ("ReduceL2", ["x"], ["z"])]


def test_argmax_without_keepdims():
    m, r = check("""g (float[2,3,4,5] x) => (int64[2,4,5] y) {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        y = ArgMax <axis = 3, keepdims = 0> (a)
    }""")
    assert structure(m) == [("ArgMax", ["x"], ["y"])] and attribute(m, 0, "axis") == 1


def test_squeeze_drops_the_mapped_axes():
    m, r = check("""g (float[2,1,4,5] x) => (float[2,4,5] y) <int64[1] ax = {3}> {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = Squeeze(a, ax)
        y = Relu(b)
    }""")
    # The kept axes (N, H, W) keep their order: nothing to transpose after.
    assert structure(m) == [("Squeeze", ["x", "ax_permuted"], ["b"]), ("Relu", ["b"], ["y"])]
    assert initializer(m, "ax_permuted").tolist() == [1]


def test_squeeze_axes_attribute_before_opset_13():
    m, r = check("""g (float[2,1,4,5] x) => (float[2,4,5] y) {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        y = Squeeze <axes = [3]> (a)
    }""", opset=11)
    assert structure(m) == [("Squeeze", ["x"], ["y"])] and attribute(m, 0, "axes") == [1]


def test_unbinding_a_packed_projection_leaves_no_transpose():
    # torch's nn.MultiheadAttention: [S, B, 3E] -> [1, S, B, 3, E] -> [3, S, B, 1, E]
    # -> Squeeze -> q, k, v by Gather. With B = 1 what is left to move
    # after the Gathers is a size-1 axis: Reshapes, no data movement.
    m, r = check("""g (float[5,1,3,4] x) => (float[5,1,4] q, float[5,1,4] k, float[5,1,4] v)
            <int64[1] ax = {3}, int64 i0 = {0}, int64 i1 = {1}, int64 i2 = {2}> {
        u = Unsqueeze(x, i0)
        t = Transpose <perm = [3, 1, 2, 0, 4]> (u)
        s = Squeeze(t, ax)
        q = Gather <axis = 0> (s, i0)
        k = Gather <axis = 0> (s, i1)
        v = Gather <axis = 0> (s, i2)
    }""")
    assert "Transpose" not in ops(m) and ops(m).count("Gather") == 3
    gathers = [n for n in m.graph.nodes if n.op_type == "Gather"]
    assert all(n.inputs[0].producer.op_type == "Squeeze" for n in gathers)


def test_matmul_by_a_matrix_and_a_row_keeping_reshape_let_it_through():
    # nn.MultiheadAttention's packed projection, batch dynamic: [S, B, E]
    # comes from [B, S, E]; the projection, its bias, the unflatten to
    # [S, B, 3, E] and the unbind all work on rows, so the Transpose meets
    # the ones back to batch-first and all cancel.
    m, r = check("""g (float[B,5,4] x) => (float[B,5,4] q, float[B,5,4] k)
            <float[4,8] w = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5,
                             0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6},
             float[8] bias = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0}, int64[4] shape = {5, -1, 2, 4},
             int64 i0 = {0}, int64 i1 = {1}> {
        t = Transpose <perm = [1, 0, 2]> (x)
        p = MatMul(t, w)
        a = Add(p, bias)
        u = Reshape(a, shape)
        qs = Gather <axis = 2> (u, i0)
        ks = Gather <axis = 2> (u, i1)
        q = Transpose <perm = [1, 0, 2]> (qs)
        k = Transpose <perm = [1, 0, 2]> (ks)
    }""", shaped=True)
    assert "Transpose" not in ops(m)
    reshape = next(n for n in m.graph.nodes if n.op_type == "Reshape")
    assert reshape.inputs[1].initializer.numpy().tolist() == [0, 0, 2, 4]
    assert [n.attributes["axis"] for n in m.graph.nodes if n.op_type == "Gather"] == [2, 2]


@pytest.mark.parametrize("text, why", [
    ("""g (float[3,5,4] x) => (float[5,4,2] y) <float[3,2] w = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}> {
        t = Transpose <perm = [1, 2, 0]> (x)
        p = MatMul(t, w)
        y = Relu(p)
    }""", "the Transpose moves the reduced (last) axis (other than swapping it with the one before)"),
    ("""g (float[3,5,4] x) => (float[15,4] y) <int64[2] s = {-1, 4}> {
        t = Transpose <perm = [1, 0, 2]> (x)
        r = Reshape(t, s)
        y = Relu(r)
    }""", "the Reshape does not keep the axes the Transpose moves"),
    ("""g (float[3,N,4] x) => (float[N,2,2,3] y) <int64[4] s = {-1, 2, 2, 3}> {
        t = Transpose <perm = [1, 0, 2]> (x)
        r = Reshape(t, s)
        y = Relu(r)
    }""", "the Reshape does not keep the axes the Transpose moves"),
])
def test_matmul_and_reshape_refusals(text, why):
    before = pyonnxopt.load(parse(text))
    m, _ = run_pass("infer_shapes", parse(text))
    r = get("optimize_transposes").run(m, PassOptions())
    assert structure(m) == structure(before) and why in reasons(r), r.stats["refused"]


MIXER_WEIGHTS = {name: np.random.default_rng(i).standard_normal(shape).astype(np.float32)
                 for i, (name, shape) in enumerate((("w1", (3, 6)), ("w2", (6, 3)), ("b1", (6,)), ("b2", (3,))))}


def mixer(w2="w2", inputs=""):
    """MLP-Mixer's token mixing: [B, 3 tokens, 4 channels] -> [B, 4, 3] ->
    two Linears over the tokens -> back, added to x."""
    proto = parse(f"""g (float[B,3,4] x{inputs}) => (float[B,3,4] y) {{
        t = Transpose <perm = [0, 2, 1]> (x)
        h = MatMul(t, w1)
        hb = Add(h, b1)
        a = Relu(hb)
        o = MatMul(a, {w2})
        ob = Add(o, b2)
        u = Transpose <perm = [0, 2, 1]> (ob)
        y = Add(x, u)
    }}""")
    for name, array in MIXER_WEIGHTS.items():
        if name != "w2" or w2 == "w2":
            proto.graph.initializer.append(numpy_helper.from_array(array, name))
    return proto


def test_a_transpose_swapping_the_last_two_axes_moves_through_a_matmul_by_a_constant():
    # T(v) @ W = T(Wᵀ @ v): both Linears compute on the untransposed [B, tokens, C], and the Transposes cancel
    m, _ = check(mixer(), shaped=True, name="regroup_transposes")
    assert "Transpose" not in ops(m)
    first, second = (n for n in m.graph.nodes if n.op_type == "MatMul")
    assert (first.inputs[1].name, second.inputs[1].name) == ("x", "a")
    np.testing.assert_array_equal(first.inputs[0].initializer.numpy(), MIXER_WEIGHTS["w1"].T)
    np.testing.assert_array_equal(second.inputs[0].initializer.numpy(), MIXER_WEIGHTS["w2"].T)
    assert initializer(m, next(n for n in m.graph.nodes if n.op_type == "Add").inputs[1].name).shape == (1, 6, 1)


def test_a_2d_transpose_moves_through_a_matmul_by_a_constant():
    m, _ = check("""g (float[3,4] x) => (float[3,4] y) <float[3,3] w = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0}> {
        t = Transpose <perm = [1, 0]> (x)
        p = MatMul(t, w)
        y = Transpose <perm = [1, 0]> (p)
    }""", shaped=True, name="regroup_transposes")
    assert structure(m)[0][0] == "MatMul" and "Transpose" not in ops(m)


@pytest.mark.parametrize("model, why", [
    # an attention's key projection: K = T(x) @ Wk, scores = q @ T(K)
    (parse("""g (float[B,4,3] x, float[B,3,4] q) => (float[B,3,3] s)
            <float[4,4] wk = {1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0}> {
        t = Transpose <perm = [0, 2, 1]> (x)
        k = MatMul(t, wk)
        kt = Transpose <perm = [0, 2, 1]> (k)
        s = MatMul(q, kt)
    }"""), "the Transpose swaps the last two axes and the product feeds an attention (a projection)"),
    (mixer(w2="w", inputs=", float[6,3] w"),
     "the Transpose swaps the last two axes and the second input 'w' is not a constant to transpose instead"),
    # one row (the channels' mean): MatMul(Wᵀ, v) would be a matrix-vector product per batch
    (parse("""g (float[B,3,4] x) => (float[B,2,1] y) <float[3,2] w = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}> {
        t = Transpose <perm = [0, 2, 1]> (x)
        m = ReduceMean <axes = [1]> (t)
        p = MatMul(m, w)
        y = Transpose <perm = [0, 2, 1]> (p)
    }"""), "the Transpose swaps the last two axes of a single row"),
])
def test_matmul_swap_refusals(model, why):
    m, _ = run_pass("infer_shapes", model)
    r = get("regroup_transposes").run(m, PassOptions())
    assert "Transpose" in ops(m) and why in reasons(r), r.stats["refused"]


def test_optimize_transposes_leaves_the_swap_to_regroup_transposes():
    m, _ = run_pass("infer_shapes", mixer())
    r = get("optimize_transposes").run(m, PassOptions())
    assert "the Transpose swaps the last two axes: moved after the fusions (regroup_transposes)" in reasons(r)


def test_a_large_weight_read_elsewhere_is_not_copied_transposed():
    proto = parse("""g (float[2,9,4] x, float[2,4,9] z) => (float[2,9,4] y, float[2,4,9] v) {
        t = Transpose <perm = [0, 2, 1]> (x)
        p = MatMul(t, w)
        y = Transpose <perm = [0, 2, 1]> (p)
        v = MatMul(z, w)
    }""")
    proto.graph.initializer.append(numpy_helper.from_array(np.ones((9, 9), np.float32), "w"))
    m, _ = run_pass("infer_shapes", proto)
    r = get("regroup_transposes").run(m, PassOptions())
    assert ops(m).count("Transpose") == 2
    assert "constant 'w' is read elsewhere: a transposed copy would grow the model" in reasons(r)


def test_reshape_splitting_the_last_axis_behind_a_4d_transpose():
    m, r = check("""g (float[2,3,4,6] x) => (float[2,3,4,2,3] y) <int64[5] s = {0, 0, 0, 2, 3}> {
        t = Transpose <perm = [0, 2, 1, 3]> (x)
        r = Reshape(t, s)
        y = Transpose <perm = [0, 2, 1, 3, 4]> (r)
    }""", shaped=True)
    assert ops(m) == ["Reshape"]


def test_gather_of_several_indices_stops_it():
    m, r = check("""g (float[2,3,4] x) => (float[2,2,4] y) <int64[2] i = {0, 2}> {
        a = Transpose <perm = [0, 2, 1]> (x)
        b = Gather <axis = 2> (a, i)
        y = Transpose <perm = [0, 2, 1]> (b)
    }""")
    assert ops(m).count("Transpose") == 2
    assert any("they would add axes" in x for x in reasons(r))


# ---- Softmax, Slice, Pad, Resize, quantization ----

def test_softmax_from_opset_13_remaps_its_axis():
    m, r = check("""g (float[2,3,4] x) => (float[2,3,4] y) {
        a = Transpose <perm = [0, 2, 1]> (x)
        b = Softmax <axis = -1> (a)
        y = Transpose <perm = [0, 2, 1]> (b)
    }""", opset=13)
    assert structure(m) == [("Softmax", ["x"], ["y"])] and attribute(m, 0, "axis") == 1


@pytest.mark.parametrize("op, opset", [("LayerNormalization", 17), ("RMSNormalization", 23)])
def test_a_norm_of_the_last_axes_lets_the_transpose_through(op, opset):
    # Gemma 3 normalizes each head after the head split's Transpose: the
    # Transpose goes below the norm, to meet the attention's.
    m, r = check(f"""g (float[2,5,3,4] x) => (float[2,5,3,4] y, float[2,3,5,1] mean)
                     <float[4] s = {{1.0, 2.0, 0.5, -1.0}}> {{
        a = Transpose <perm = [0, 2, 1, 3]> (x)
        b, mean = {op} <axis = -1> (a, s)
        y = Transpose <perm = [0, 2, 1, 3]> (b)
    }}""" if op == "LayerNormalization" else f"""g (float[2,5,3,4] x) => (float[2,5,3,4] y)
                     <float[4] s = {{1.0, 2.0, 0.5, -1.0}}> {{
        a = Transpose <perm = [0, 2, 1, 3]> (x)
        b = {op} <axis = -1> (a, s)
        y = Transpose <perm = [0, 2, 1, 3]> (b)
    }}""", opset=opset)
    assert ops(m).count("Transpose") == (1 if op == "LayerNormalization" else 0)
    assert ops(m)[0] == op and m.to_onnx().graph.node[0].input[0] == "x"


def test_a_norm_over_a_moved_axis_keeps_the_transpose():
    m, r = check("""g (float[2,5,3,4] x) => (float[2,5,3,4] y) <float[5,4] s = {
                    1.0, 2.0, 0.5, -1.0, 1.0, 2.0, 0.5, -1.0, 1.0, 2.0,
                    0.5, -1.0, 1.0, 2.0, 0.5, -1.0, 1.0, 2.0, 0.5, -1.0}> {
        a = Transpose <perm = [0, 2, 1, 3]> (x)
        b = LayerNormalization <axis = 2> (a, s)
        y = Transpose <perm = [0, 2, 1, 3]> (b)
    }""")
    assert ops(m) == ["Transpose", "LayerNormalization", "Transpose"]
    assert "the Transpose moves a normalized axis" in reasons(r)


def test_a_norm_keeps_a_transpose_of_size_1_axes():
    # torch's batch-1 [S, 1, E] <-> [1, S, E]: a Reshape in the end, which
    # stays beside the Reshapes of the block (vit_b_16's Linears).
    m, r = check("""g (float[1,5,4] x) => (float[1,5,4] y) <float[4] s = {1.0, 2.0, 0.5, -1.0}> {
        a = Transpose <perm = [1, 0, 2]> (x)
        b = LayerNormalization <axis = -1> (a, s)
        y = Transpose <perm = [1, 0, 2]> (b)
    }""", shaped=True)
    assert ops(m) == ["Transpose", "LayerNormalization", "Transpose"]
    assert "the Transpose moves only axes of size 1" in reasons(r)


def test_slice_axes_are_remapped():
    m, r = check("""g (float[2,3,4] x) => (float[2,3,2] y) <int64[1] s = {1}, int64[1] e = {3}, int64[1] ax = {1}> {
        a = Transpose <perm = [1, 2, 0]> (x)
        b = Slice(a, s, e, ax)
        y = Transpose <perm = [2, 0, 1]> (b)
    }""")
    assert structure(m) == [("Slice", ["x", "s", "e", "ax_permuted"], ["y"])]
    assert initializer(m, "ax_permuted").tolist() == [2]


def test_slice_without_axes_gets_them():
    m, r = check("""g (float[2,3,4] x) => (float[2,2,2] y) <int32[2] s = {0, 1}, int32[2] e = {2, 3}> {
        a = Transpose <perm = [1, 2, 0]> (x)
        b = Slice(a, s, e)
        y = Transpose <perm = [2, 0, 1]> (b)
    }""")
    [(op, inputs, outs)] = structure(m)
    assert op == "Slice" and inputs[:3] == ["x", "s", "e"]
    added = initializer(m, inputs[3])
    assert added.tolist() == [1, 2] and added.dtype == np.int32


def test_slice_attributes_before_opset_10():
    m, r = check("""g (float[2,3,4] x) => (float[2,2,2] y) {
        a = Transpose <perm = [1, 2, 0]> (x)
        b = Slice <starts = [0, 1], ends = [2, 3]> (a)
        y = Transpose <perm = [2, 0, 1]> (b)
    }""", opset=9)
    assert ops(m) == ["Slice"] and attribute(m, 0, "axes") == [1, 2]


def test_pad_pads_are_reordered():
    m, r = check("""g (float[1,2,3,4] x) => (float[1,2,7,10] y) <int64[8] p = {0, 1, 2, 0, 0, 3, 4, 0}> {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = Pad <mode = "edge"> (a, p)
        y = Transpose <perm = [0, 3, 1, 2]> (b)
    }""")
    assert structure(m) == [("Pad", ["x", "p_permuted"], ["y"])]
    assert initializer(m, "p_permuted").tolist() == [0, 0, 1, 2, 0, 0, 3, 4]


def test_pad_attribute_before_opset_11():
    m, r = check("""g (float[1,2,3,4] x) => (float[1,2,7,10] y) {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = Pad <pads = [0, 1, 2, 0, 0, 3, 4, 0], value = 1.5> (a)
        y = Transpose <perm = [0, 3, 1, 2]> (b)
    }""", opset=10)
    assert ops(m) == ["Pad"] and attribute(m, 0, "pads") == [0, 0, 1, 2, 0, 0, 3, 4]


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_nhwc_resize_becomes_nchw(mode):
    m, r = check(f"""g (float[1,3,4,4] x) => (float[1,3,8,8] y) <float[0] roi = {{}}, float[4] sc = {{1.0, 2.0, 2.0, 1.0}}> {{
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = Resize <mode = "{mode}"> (a, roi, sc)
        y = Transpose <perm = [0, 3, 1, 2]> (b)
    }}""")
    assert structure(m) == [("Resize", ["x", "roi", "sc_permuted"], ["y"])]
    assert initializer(m, "sc_permuted").tolist() == [1.0, 1.0, 2.0, 2.0]


def test_nhwc_resize_with_infinite_inputs():
    # onnxruntime weighs a neighbour by 0 along the interpolated axes of
    # scale 1: an infinite input makes it NaN. NCHW's H and W are NHWC's
    # middle axes, which its NHWC kernel interpolates: the same NaNs.
    text = """g (float[1,3,4,4] x) => (float[1,3,8,8] y) <float[0] roi = {}, float[4] sc = {1.0, 2.0, 2.0, 1.0}> {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = Resize <mode = "linear"> (a, roi, sc)
        y = Transpose <perm = [0, 3, 1, 2]> (b)
    }"""
    before = parse(text)
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)
    x[0, 1, 2, 3], x[0, 2, 0, 1] = np.inf, -np.inf
    m, r = check(before)
    assert ops(m) == ["Resize"]
    same_numbers(before, m, {"x": x})


def test_resize_sizes_are_reordered():
    m, r = check("""g (float[1,3,4,4] x) => (float[1,3,6,8] y) <int64[4] sz = {1, 6, 8, 3}> {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = Resize <mode = "nearest"> (a, , , sz)
        y = Transpose <perm = [0, 3, 1, 2]> (b)
    }""")
    assert ops(m) == ["Resize"] and initializer(m, "sz_permuted").tolist() == [1, 3, 6, 8]


def test_per_tensor_dequantize_and_quantize():
    m, r = check("""g (uint8[1,2,3,4] x) => (uint8[1,2,3,4] y) <float s = {0.5}, uint8 z = {3}> {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = DequantizeLinear(a, s, z)
        c = Relu(b)
        d = QuantizeLinear(c, s, z)
        y = Transpose <perm = [0, 3, 1, 2]> (d)
    }""", opset=19)
    assert ops(m) == ["DequantizeLinear", "Relu", "QuantizeLinear"]


def ms_model(body: str):
    return onnx.parser.parse_model('<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>' + body)


@pytest.mark.parametrize("activation", ["com.microsoft.QuickGelu <alpha = 1.702>", "com.microsoft.FastGelu",
                                        "com.microsoft.Gelu"])
def test_onnxruntime_activations_are_unary(activation):
    # --target ort writes them before the layout settles (jax2onnx's NHWC
    # convs: Transpose -> Conv -> Transpose -> SiLU -> Transpose -> ConvTranspose).
    m, r = check(ms_model(f"""g (float[1,2,3,4] x) => (float[1,2,3,4] y) {{
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = {activation} (a)
        y = Transpose <perm = [0, 3, 1, 2]> (b)
    }}"""))
    assert ops(m) == [activation.split()[0].split(".")[-1]]


def test_fast_gelu_with_a_bias_stays():
    m, r = run(ms_model("""g (float[1,2,3,4] x) => (float[1,2,3,4] y) <float[2] bias = {1.0, -1.0}> {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = com.microsoft.FastGelu (a, bias)
        y = Transpose <perm = [0, 3, 1, 2]> (b)
    }"""))
    assert ops(m) == ["Transpose", "FastGelu", "Transpose"]
    assert "the activation adds a bias along its input's last axis" in reasons(r)


# ---- graph outputs, readers, subgraphs ----

def test_a_graph_output_on_the_way_keeps_its_name_and_layout():
    m, r = check("""g (float[2,3,4] x) => (float[3,4,2] b, float[2,3,4] y) {
        a = Transpose <perm = [1, 2, 0]> (x)
        b = Relu(a)
        c = Transpose <perm = [2, 0, 1]> (b)
        y = Sigmoid(c)
    }""")
    assert structure(m) == [("Relu", ["x"], ["b_untransposed"]), ("Transpose", ["b_untransposed"], ["b"]),
                            ("Sigmoid", ["b_untransposed"], ["y"])]
    assert [o.name for o in m.to_onnx().graph.output] == ["b", "y"]


def test_cancelling_into_a_graph_output_renames_the_value_before():
    m, r = check("""g (float[2,3,4] x) => (float[2,3,4] y) {
        a = Transpose <perm = [1, 2, 0]> (x)
        b = Exp(a)
        y = Transpose <perm = [2, 0, 1]> (b)
    }""")
    assert structure(m) == [("Exp", ["x"], ["y"])]


def test_a_node_with_two_readers_is_not_moved_through():
    text = """g (float[2,3] x) => (float[2,3] y, float[3,2] z) {
        a = Transpose <perm = [1, 0]> (x)
        b = Relu(a)
        y = Transpose <perm = [1, 0]> (b)
        z = Neg(b)
    }"""
    m, r = check(text)
    # Moving it through the Relu still needs one for Neg: two Transposes either way.
    assert ops(m) == ["Transpose", "Relu", "Transpose", "Neg"]


def test_inside_a_subgraph():
    body = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]), helper.make_node("Relu", ["a"], ["b"]),
         helper.make_node("Transpose", ["b"], ["then_out"], perm=[1, 0])],
        "then", [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, 3])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["else_out"])], "else", [],
                              [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, 3])])
    g = helper.make_graph([helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=other)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    before = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    m, r = run(before)
    then = next(a.g for a in m.to_onnx().graph.node[0].attribute if a.name == "then_branch")
    assert [(n.op_type, list(n.input), list(n.output)) for n in then.node] == [("Relu", ["x"], ["then_out"])]
    for cond in (True, False):
        same_numbers(before, m, {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 3, "cond": np.array(cond)})


def test_a_value_a_subgraph_reads_keeps_its_transpose():
    body = helper.make_graph([helper.make_node("Relu", ["a"], ["then_out"])], "then", [],
                             [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [3, 2])])
    other = helper.make_graph([helper.make_node("Neg", ["a"], ["else_out"])], "else", [],
                              [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [3, 2])])
    g = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]),
         helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=other),
         helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0]), helper.make_node("Sigmoid", ["b"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
              helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])])
    before = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    m, r = run(before)
    assert structure(m) == [("Transpose", ["x"], ["a"]), ("If", ["cond"], ["y"]), ("Sigmoid", ["x"], ["z"])]
    same_numbers(before, m, {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 3, "cond": np.array(True)})


def test_inside_a_model_function():
    body = [helper.make_node("Transpose", ["a"], ["t"], perm=[1, 0]), helper.make_node("Constant", [], ["k"],
            value=numpy_helper.from_array(np.array([1.0, 2.0], np.float32))),
            helper.make_node("Add", ["t", "k"], ["s"]), helper.make_node("Transpose", ["s"], ["b"], perm=[1, 0])]
    f = helper.make_function("local", "F", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("F", ["x"], ["y"], domain="local")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    before = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                               functions=[f], ir_version=8)
    m, r = run(before)
    # The Constant is no initializer: the Add cannot take the Transpose; nothing is lost either.
    assert [n.op_type for n in m.to_onnx().functions[0].node] == ["Transpose", "Constant", "Add", "Transpose"]
    same_numbers(before, m)
    f2 = helper.make_function("local", "F", ["a"], ["b"], [body[0], helper.make_node("Relu", ["t"], ["s"]), body[3]],
                              [helper.make_opsetid("", 17)])
    before.functions[0].CopyFrom(f2)
    m, r = run(before)
    assert [n.op_type for n in m.to_onnx().functions[0].node] == ["Relu"]
    same_numbers(before, m)


# ---- refusals: graph unchanged, reason reported ----

REFUSALS = {
    "operand 'z' is neither transposed the same way nor a constant": ("""g (float[2,3] x, float[3,2] z) => (float[2,3] y) {
        a = Transpose <perm = [1, 0]> (x)
        b = Add(a, z)
        y = Transpose <perm = [1, 0]> (b)
    }""", 17),
    "operand 'z' has an unknown rank": ("""g (float[2,3] x, float[3,2] w) => (float[2,3] y) {
        z = Relu(w)
        a = Transpose <perm = [1, 0]> (x)
        b = Add(a, z)
        y = Transpose <perm = [1, 0]> (b)
    }""", 17),
    "operand 'c' has rank 3, the transposed value 2": ("""g (float[2,3] x) => (float[1,2,3] y)
              <float[1,3,2] c = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}> {
        a = Transpose <perm = [1, 0]> (x)
        b = Add(a, c)
        y = Transpose <perm = [0, 2, 1]> (b)
    }""", 17),
    "constant 'c' is read elsewhere: a transposed copy would grow the model": (
        """g (float[10,10] x) => (float[10,10] y, float[10,10] z) <float[10,10] c = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0}> {
        a = Transpose <perm = [1, 0]> (x)
        b = Add(a, c)
        y = Transpose <perm = [1, 0]> (b)
        z = Mul(x, c)
    }""", 17),
    "before opset 13 the Softmax family flattens at axis: the layout matters": ("""g (float[2,3] x) => (float[2,3] y) {
        a = Transpose <perm = [1, 0]> (x)
        b = Softmax <axis = 1> (a)
        y = Transpose <perm = [1, 0]> (b)
    }""", 11),
    "per-axis quantization (its axis would move)": ("""g (uint8[2,3] x) => (float[2,3] y) <float[2] s = {1.0, 2.0}> {
        a = Transpose <perm = [1, 0]> (x)
        b = DequantizeLinear <axis = 1> (a, s)
        y = Transpose <perm = [1, 0]> (b)
    }""", 17),
    "axes 'ax' is not a constant (no initializer)": ("""g (float[2,3] x, int64[1] ax) => (float[1,2] y) {
        a = Transpose <perm = [1, 0]> (x)
        b = ReduceSum(a, ax)
        y = Transpose <perm = [1, 0]> (b)
    }""", 13),
    "the transposed value is also read as a parameter": ("""g (float[2,3] x, double[2,3] d) => (float[2,3] y) {
        a = Transpose <perm = [1, 0]> (x)
        y = CastLike(d, a)
    }""", 17),
    "cubic Resize would resize other axes than it did (its NCHW and NHWC kernels filter in another order)": (
        # NHWC's kernel filters H and W in another order than NCHW's: other
        # NaNs where +inf and -inf meet.
        """g (float[1,3,4,4] x) => (float[1,3,8,8] y) <float[0] roi = {}, float[4] sc = {1.0, 2.0, 2.0, 1.0}> {
        a = Transpose <perm = [0, 2, 3, 1]> (x)
        b = Resize <mode = "cubic"> (a, roi, sc)
        y = Transpose <perm = [0, 3, 1, 2]> (b)
    }""", 17),
    "linear Resize would resize other axes than the innermost or the ones it did": (
        """g (float[1,2,3,4] x) => (float[1,4,3,8] y) <float[0] roi = {}, float[4] sc = {1.0, 1.0, 2.0, 2.0}> {
        a = Transpose <perm = [2, 0, 1, 3]> (x)
        b = Resize <mode = "linear"> (a, roi, sc)
        y = Transpose <perm = [1, 2, 0, 3]> (b)
    }""", 17),
    "linear or cubic Resize would interpolate other axes at scale 1 (where an infinite input gives NaN)": (
        # Only axis 2 is resized, but onnxruntime interpolates axes 2 and 3,
        # here x's 2 and 0; pushed, x's 2 and 3.
        """g (float[2,3,4,5] x) => (float[2,3,8,5] y) <float[0] roi = {}, float[4] sc = {1.0, 1.0, 2.0, 1.0}> {
        a = Transpose <perm = [3, 1, 2, 0]> (x)
        b = Resize <mode = "linear"> (a, roi, sc)
        y = Transpose <perm = [3, 1, 2, 0]> (b)
    }""", 17),
    "output is a graph output and the input is a graph input, initializer or outer value": (
        """g (float[2,3] x) => (float[2,3] y) {
        a = Transpose <perm = [1, 0]> (x)
        y = Transpose <perm = [1, 0]> (a)
    }""", 17),
    "Transpose without perm and its input's rank unknown": ("""g (float[2,3] x) => (float[2,3] y) {
        a = Relu(x)
        b = Transpose(a)
        y = Transpose(b)
    }""", 17),
    "legacy broadcasting (broadcast attribute)": ("""g (float[2,3] x) => (float[2,3] y) <float[2] c = {1.0, 2.0}> {
        a = Transpose <perm = [1, 0]> (x)
        b = Add <broadcast = 1> (a, c)
        y = Transpose <perm = [1, 0]> (b)
    }""", 6),
}


@pytest.mark.parametrize("reason", list(REFUSALS))
def test_refusals(reason):
    text, opset = REFUSALS[reason]
    before = pyonnxopt.load(parse(text, opset))
    m, r = run_pass("optimize_transposes", parse(text, opset), full_check=opset >= 7)
    assert structure(m) == structure(before) and not r.modified
    assert reason in reasons(r), r.stats["refused"]


def test_pinned_nodes_are_not_moved_through_or_removed():
    text = """g (float[2,3] x) => (float[2,3] y) {
        [t] a = Transpose <perm = [1, 0]> (x)
        [r] b = Relu(a)
        [u] y = Transpose <perm = [1, 0]> (b)
    }"""
    for name, reason in (("r", "excluded from optimization"), ("t", "excluded from optimization"),
                         ("u", None)):
        m = pyonnxopt.load(parse(text))
        next(n for n in m.graph.nodes if n.name == name).pinned = True
        r = get("optimize_transposes").run(m, PassOptions())
        assert ops(m) == ["Transpose", "Relu", "Transpose"] and not r.modified, name
        if reason:
            assert any(x.startswith(f"'{name}'") and x.endswith(reason) for x in r.stats["refused"]), r.stats


def test_other_domains_are_left_alone():
    text = """<ir_version: 8, opset_import: ["" : 17, "custom" : 1]>
    g (float[2,3] x) => (float[2,3] y) {
        a = Transpose <perm = [1, 0]> (x)
        b = custom.Op(a)
        y = Transpose <perm = [1, 0]> (b)
    }"""
    m = pyonnxopt.load(onnx.parser.parse_model(text))
    r = get("optimize_transposes").run(m, PassOptions())
    assert ops(m) == ["Transpose", "Op", "Transpose"] and not r.modified and r.stats["refused"] == []


# ---- exported shapes of real models ----

def _conv(name, x, cin, cout, rng):
    w = numpy_helper.from_array(rng.standard_normal((cout, cin, 1, 1)).astype(np.float32) * 0.1, name + "_w")
    return helper.make_node("Conv", [x, name + "_w"], [name], name=name), w


def test_detection_head_storm():
    """Three scales: NCHW convs; two branches per scale go to NHWC to be
    concatenated and come back (the churn: it cancels), then each head goes
    NHWC -> Reshape -> Concat across scales (irreducible through Reshape)."""
    rng = np.random.default_rng(0)
    nodes, inits, heads = [], [], []
    for s, size in enumerate((8, 4, 2)):
        x = f"x{s}"
        for b in ("p", "q"):
            n, w = _conv(f"{b}{s}", x, 4, 3, rng)
            nodes += [n, helper.make_node("Transpose", [n.output[0]], [f"{b}{s}_nhwc"], perm=[0, 2, 3, 1])]
            inits.append(w)
        nodes += [helper.make_node("Concat", [f"p{s}_nhwc", f"q{s}_nhwc"], [f"cat{s}"], axis=3),
                  helper.make_node("Sigmoid", [f"cat{s}"], [f"sig{s}"]),
                  helper.make_node("Transpose", [f"sig{s}"], [f"back{s}"], perm=[0, 3, 1, 2])]
        n, w = _conv(f"head{s}", f"back{s}", 6, 6, rng)
        inits.append(w)
        shape = numpy_helper.from_array(np.array([1, -1, 3], np.int64), f"shape{s}")
        inits.append(shape)
        nodes += [n, helper.make_node("Transpose", [f"head{s}"], [f"head{s}_nhwc"], perm=[0, 2, 3, 1]),
                  helper.make_node("Reshape", [f"head{s}_nhwc", f"shape{s}"], [f"flat{s}"])]
        heads.append(f"flat{s}")
    nodes.append(helper.make_node("Concat", heads, ["y"], axis=1))
    g = helper.make_graph(nodes, "heads",
                          [helper.make_tensor_value_info(f"x{s}", TensorProto.FLOAT, [1, 4, size, size])
                           for s, size in enumerate((8, 4, 2))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * (64 + 16 + 4), 3])], inits)
    before = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    m, r = run(before)
    assert [n.op_type for n in before.graph.node].count("Transpose") == 12
    assert ops(m).count("Transpose") == 3  # one per head, before its Reshape
    same_numbers(before, m)


def test_attention_block_stays_correct():
    w = "{" + ", ".join(["0.0"] * 64) + "}"
    text = f"""g (float[2,5,8] x) => (float[2,5,8] y)
              <float[8,8] wq = {w}, float[8,8] wk = {w}, float[8,8] wv = {w}, int64[4] heads = {{2, 5, 2, 4}},
               int64[3] back = {{2, 5, 8}}, float scale = {{0.5}}> {{
        q0 = MatMul(x, wq)
        k0 = MatMul(x, wk)
        v0 = MatMul(x, wv)
        q1 = Reshape(q0, heads)
        k1 = Reshape(k0, heads)
        v1 = Reshape(v0, heads)
        q = Transpose <perm = [0, 2, 1, 3]> (q1)
        k = Transpose <perm = [0, 2, 3, 1]> (k1)
        v = Transpose <perm = [0, 2, 1, 3]> (v1)
        s0 = MatMul(q, k)
        s = Mul(s0, scale)
        p = Softmax <axis = -1> (s)
        o = MatMul(p, v)
        o1 = Transpose <perm = [0, 2, 1, 3]> (o)
        y = Reshape(o1, back)
    }}"""
    rng = np.random.default_rng(1)
    model = parse(text)
    for t in model.graph.initializer:
        if t.name.startswith("w"):
            t.CopyFrom(numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), t.name))
    m, r = check(model)
    assert ops(m).count("Transpose") == 4


@pytest.mark.filterwarnings("ignore")
def test_torch_exports_keep_their_numbers():
    torch = pytest.importorskip("torch")
    import io

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 1)
            self.attn = torch.nn.MultiheadAttention(8, 2)

        def forward(self, x):
            f = self.conv(x).permute(0, 2, 3, 1)  # NHWC
            f = torch.relu(f).permute(0, 3, 1, 2)  # and back
            seq = f.flatten(2).permute(2, 0, 1)  # (L, N, E)
            out, _ = self.attn(seq, seq, seq, need_weights=False)
            return out.permute(1, 0, 2).sigmoid()

    torch.manual_seed(0)
    buffer = io.BytesIO()
    torch.onnx.export(Model().eval(), torch.randn(1, 3, 4, 4), buffer, opset_version=17, dynamo=False)
    before = onnx.load_from_string(buffer.getvalue())
    m, r = check(before)
    assert ops(m).count("Transpose") < [n.op_type for n in before.graph.node].count("Transpose")


@pytest.mark.filterwarnings("ignore")
def test_a_transpose_moved_round_and_round_keeps_a_short_name():
    # torchvision MaxViT's grid attention on a map that is one partition (its
    # last stage at 224x224): the grid swap [0, 2, 1, 3] moves an axis of 1,
    # and optimize_transposes moves it up through the residual Adds and back
    # (a Transpose of size-1 axes costs nothing added and gains when it goes).
    torch = pytest.importorskip("torch")
    import io

    class GridAttention(torch.nn.Module):
        def __init__(self, c=8, heads=2, size=4):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = torch.nn.LayerNorm(c), torch.nn.LayerNorm(c)
            self.qkv, self.merge = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(c, 2 * c), torch.nn.GELU(), torch.nn.Linear(2 * c, c))
            self.bias = torch.nn.Parameter(torch.randn(heads, size * size, size * size))

        def attn(self, x):
            b, g, p, c = x.shape
            h, d = self.heads, c // self.heads
            q, k, v = (t.reshape(b, g, p, h, d).permute(0, 1, 3, 2, 4) for t in torch.chunk(self.qkv(x), 3, -1))
            s = torch.einsum("bghid,bghjd->bghij", q, k * d ** -0.5)
            o = torch.einsum("bghij,bghjd->bghid", torch.softmax(s + self.bias, -1), v)
            return self.merge(o.permute(0, 1, 3, 2, 4).reshape(b, g, p, c))

        def forward(self, x):
            b, c, hh, ww = x.shape
            x = x.reshape(b, c, hh, 1, ww, 1).permute(0, 2, 4, 3, 5, 1).reshape(b, hh * ww, 1, c).transpose(-2, -3)
            x = x + self.attn(self.ln1(x))
            x = x + self.mlp(self.ln2(x))
            return x.transpose(-2, -3).reshape(b, hh, ww, 1, 1, c).permute(0, 5, 1, 3, 2, 4).reshape(b, c, hh, ww)

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), GridAttention(), GridAttention()).eval()
    buffer = io.BytesIO()
    torch.onnx.export(net, torch.randn(1, 3, 4, 4), buffer, opset_version=17, dynamo=False)
    optimized, report = pyonnxopt.optimize(pyonnxopt.load(buffer.getvalue()))
    assert report["check"]["first_mismatch"] is None
    # each move names its values after the moved one without the suffixes
    # moves add: 992 characters here before, past 10,000 on MaxViT itself
    assert max(len(v.name) for n in optimized.graph.nodes for v in n.outputs) < 100


# ---- random graphs: Transposes among every op family, shared readers, DAGs ----

def _random_graph(seed):
    """A seeded graph over float[2,3,4]-like values: Transposes with random
    perms between unary, broadcasting, Concat, Split, Reduce, Softmax and
    Slice nodes that read earlier values at random (so values have several
    readers), some of them graph outputs."""
    rng = np.random.default_rng(seed)
    values = [("x", (2, 3, 4)), ("z", (4, 2, 3))]
    nodes, inits, count = [], [], [0]

    def fresh(prefix):
        count[0] += 1
        return f"{prefix}{count[0]}"

    def constant(shape):
        name = fresh("c")
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
        return name

    for _ in range(14):
        name, shape = values[rng.integers(len(values))]
        rank = len(shape)
        kind = rng.choice(["transpose", "transpose", "transpose", "unary", "binary", "concat", "split", "reduce",
                           "softmax", "slice"])
        out = fresh("v")
        if kind == "transpose":
            perm = [int(p) for p in rng.permutation(rank)]
            nodes.append(helper.make_node("Transpose", [name], [out], perm=perm))
            values.append((out, tuple(shape[p] for p in perm)))
        elif kind == "unary":
            nodes.append(helper.make_node(str(rng.choice(["Relu", "Neg", "Sigmoid", "Abs"])), [name], [out]))
            values.append((out, shape))
        elif kind == "binary":
            same = [v for v, s in values if s == shape and v != name]
            if same and rng.random() < 0.6:
                other = same[rng.integers(len(same))]
            else:  # a broadcast constant: a suffix of the shape, some dims 1
                k = int(rng.integers(0, rank + 1))
                other = constant([d if rng.random() < 0.6 else 1 for d in shape[rank - k:]])
            op = str(rng.choice(["Add", "Mul", "Sub", "Max"]))
            nodes.append(helper.make_node(op, [name, other] if rng.random() < 0.5 else [other, name], [out]))
            values.append((out, shape))
        elif kind == "concat":
            same = [v for v, s in values if s == shape]
            other = same[rng.integers(len(same))]
            axis = int(rng.integers(-rank, rank))
            nodes.append(helper.make_node("Concat", [name, other], [out], axis=axis))
            values.append((out, tuple(d * 2 if i == axis % rank else d for i, d in enumerate(shape))))
        elif kind == "split":
            even = [i for i, d in enumerate(shape) if d % 2 == 0]
            if not even:
                continue
            axis, second = int(even[rng.integers(len(even))]), fresh("v")
            nodes.append(helper.make_node("Split", [name], [out, second], axis=axis))
            half = tuple(d // 2 if i == axis else d for i, d in enumerate(shape))
            values += [(out, half), (second, half)]
        elif kind == "reduce":
            if rank < 3:
                continue
            axis, keep = int(rng.integers(rank)), int(rng.integers(2))
            axes = numpy_helper.from_array(np.array([axis], np.int64), fresh("axes"))
            inits.append(axes)
            op = str(rng.choice(["ReduceSum", "ReduceMax"]))
            nodes.append(helper.make_node(op, [name, axes.name] if op == "ReduceSum" else [name], [out],
                                          keepdims=keep, **({} if op == "ReduceSum" else {"axes": [axis]})))
            values.append((out, tuple(1 if i == axis else d for i, d in enumerate(shape) if keep or i != axis)))
        elif kind == "softmax":
            nodes.append(helper.make_node("Softmax", [name], [out], axis=int(rng.integers(-rank, rank))))
            values.append((out, shape))
        else:
            wide = [i for i, d in enumerate(shape) if d > 1]
            if not wide:
                continue
            axis = int(wide[rng.integers(len(wide))])
            params = [numpy_helper.from_array(np.array([v], np.int64), fresh("s")) for v in (1, 9, axis)]
            inits += params
            nodes.append(helper.make_node("Slice", [name] + [p.name for p in params], [out]))
            values.append((out, tuple(d - 1 if i == axis else d for i, d in enumerate(shape))))
    read = {i for n in nodes for i in n.input}
    produced = [(v, s) for v, s in values[2:]]
    outs = [(v, s) for v, s in produced if v not in read or rng.random() < 0.2] or produced[-1:]
    g = helper.make_graph(nodes, f"random{seed}",
                          [helper.make_tensor_value_info(v, TensorProto.FLOAT, s) for v, s in values[:2]],
                          [helper.make_tensor_value_info(v, TensorProto.FLOAT, s) for v, s in outs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_keep_their_numbers(seed):
    before = _random_graph(seed)
    onnx.checker.check_model(before, full_check=True)
    m, r = run(before)
    feeds = random_feeds(before, seed)
    for want, got in zip(outputs(before, feeds), outputs(m, feeds)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    count = lambda model: ops(pyonnxopt.load(model) if isinstance(model, onnx.ModelProto) else model).count("Transpose")
    assert count(m) <= count(before)
    assert not get("optimize_transposes").run(m, PassOptions()).modified


# ---- LLaMA's rotary embedding between a head split and an opset-23 Attention ----

ROTARY = """g (float[B,S,4,8] x, float[1,S,8] cos) => ({out}) {{
    t = Transpose <perm = [0, 2, 1, 3]> (x)
    c = Unsqueeze(cos, one)
    r = Mul(t, c)
    {tail}
}}"""


def test_a_computed_operand_that_moves_only_size_1_axes_goes_along():
    """cos [1, 1, S, D] beside heads [B, H, S, D]: in the untransposed
    layout it is [1, S, 1, D], the same data (a Reshape, no Transpose)."""
    text = ROTARY.format(out="float[B,S,4,8] y", tail="y = Transpose <perm = [0, 2, 1, 3]> (r)")
    text = text.replace("{\n", "<int64[1] one = {1}> {\n", 1)
    m, r = check(text, shaped=True, name="regroup_transposes")
    assert "Transpose" not in ops(m) and ops(m).count("Reshape") == 1


def test_a_transpose_into_an_opset_23_attention_costs_nothing():
    """fuse_attention_heads takes a head split's Transpose into an Attention:
    it moves below the rotary ops for it (here one Mul), where before the
    count would only have stayed the same."""
    tail = """k = Transpose <perm = [0, 2, 1, 3]> (x)
    y = Attention(r, k, k)"""
    text = ROTARY.format(out="float[B,4,S,8] y", tail=tail).replace("{\n", "<int64[1] one = {1}> {\n", 1)
    before = parse(text, 23)
    m, _ = run_pass("infer_shapes", before)
    r = get("optimize_transposes").run(m, PassOptions())
    assert r.modified and ("Mul", ["x", "c_untransposed"], ["r_untransposed"]) in structure(m)
    # cos's Transpose moves size-1 axes only: regroup_transposes makes it a Reshape
    assert ("Transpose", ["r_untransposed"], ["r"]) in structure(m) and ops(m).count("Transpose") == 3
    get("regroup_transposes").run(m, PassOptions())
    assert ops(m).count("Transpose") == 2 and ops(m).count("Reshape") == 1
    same_numbers(before, m)


def test_into_a_cache_an_attention_reads_as_its_keys():
    """TorchScript LLaMA with a cache: the rotated keys go through
    Concat(past, k) along the sequence into the Attention, which
    fuse_attention_heads takes with the past as past_key: the Transpose
    moves below the rotary into that Concat."""
    tail = """kc = Concat <axis = 2> (past, r)
    v = Transpose <perm = [0, 2, 1, 3]> (x)
    vc = Concat <axis = 2> (past, v)
    y = Attention(r, kc, vc)"""
    text = ROTARY.format(out="float[B,4,S,8] y", tail=tail).replace("{\n", "<int64[1] one = {1}> {\n", 1)
    before = parse(text.replace("float[1,S,8] cos)", "float[1,S,8] cos, float[B,4,P,8] past)"), 23)
    m, _ = run_pass("infer_shapes", before)
    assert get("optimize_transposes").run(m, PassOptions()).modified
    assert ("Mul", ["x", "c_untransposed"], ["r_untransposed"]) in structure(m)
    same_numbers(before, m)


def test_not_into_an_attention_whose_keys_that_rule_cannot_take():
    """Keys concatenated along the sequence with more than a past, or
    repeated by a Reshape: fuse_attention_heads would not take the heads, so
    the move would only add the cos Reshape."""
    tail = """k = Transpose <perm = [0, 2, 1, 3]> (x)
    kc = Concat <axis = 2> (past, k, past)
    y = Attention(r, kc, kc)"""
    text = ROTARY.format(out="float[B,4,S,8] y", tail=tail).replace("{\n", "<int64[1] one = {1}> {\n", 1)
    text = text.replace("float[1,S,8] cos)", "float[1,S,8] cos, float[B,4,P,8] past)")
    m, _ = run_pass("infer_shapes", parse(text, 23))
    r = get("optimize_transposes").run(m, PassOptions())
    assert not r.modified
    # A Concat along the head size (GPT-NeoX's partial rotary) is no cache: the move goes on.
    text = text.replace("kc = Concat <axis = 2> (past, k, past)",
                        "ka, kb = Split <axis = 3, num_outputs = 2> (k)  kc = Concat <axis = -1> (kb, ka)")
    before = parse(text.replace(", float[B,4,P,8] past)", ")"), 23)
    m, _ = run_pass("infer_shapes", before)
    assert get("optimize_transposes").run(m, PassOptions()).modified
    same_numbers(before, m)


def test_a_transpose_of_size_1_axes_is_not_moved_back_and_forth():
    # torch's batch_first MultiheadAttention at batch 1: its [S, 1, E] ->
    # [1, S, E] Transpose before the residual Add. Moved down, it would need
    # two of its kind (for the other operand and the output); pulled back up,
    # one: while those counted nothing added but one removed, the pass moved
    # it to and fro until its sweep bound, and the pipeline for 20 rounds.
    text = """g (float[8,1,4] a, float[1,8,4] res) => (float[1,8,4] y) {
        t = Transpose <perm = [1, 0, 2]> (a)
        s = Add(res, t)
        y = Relu(s)
    }"""
    m, r = check(text, shaped=True)
    assert ops(m) == ["Transpose", "Add", "Relu"] and not r.modified
    m, r = check(text, shaped=True, name="regroup_transposes")
    assert ops(m) == ["Reshape", "Add", "Relu"]


def test_a_new_node_never_takes_an_existing_nodes_name():
    # The Transpose added for `r`'s outside reader is named r_transpose; a
    # node of that name already exists (its output is named otherwise), and
    # onnxruntime refuses two nodes of one name.
    before = parse("""g (float[2,3] a) => (float[2,3] z, float[3,2] o, float[2,3] q) {
        t = Transpose <perm = [1, 0]> (a)
        r = Relu(t)
        y = Transpose <perm = [1, 0]> (r)
        z = Abs(y)
        o = Neg(r)
        q = Sigmoid(a)
    }""")
    before.graph.node[-1].name = "r_transpose"
    m, r = run(before)
    assert r.modified and ops(m).count("Transpose") == 1
    names = [n.name for n in m.to_onnx().graph.node if n.name]
    assert len(names) == len(set(names)) and "r_transpose" in names
    same_numbers(before, m)
