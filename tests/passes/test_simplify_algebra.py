"""simplify_algebra: structure, numbers in onnxruntime, refusals, idempotence."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import pyonnxopt
from pyonnxopt.passes import PassOptions, get

from helpers import ops, outputs, parse, run_pass, same_bits, structure

NAN, INF = float("nan"), float("inf")
# Values that tell exact rewrites from near ones: NaN, both zeros, infinities, ties, a subnormal.
SPECIAL = np.array([[NAN, -0.0, 0.0, INF], [-INF, 1.5, -2.5, 1e-40]], np.float32)


def run(model, opset=17, full_check=True):
    return run_pass("simplify_algebra", parse(model, opset) if isinstance(model, str) else model, full_check)


def reasons(result):
    return [x.split(": ", 1)[1] for x in result.stats["refused"]]


def same_outputs(before, after, feeds, how="bits"):
    """onnxruntime on both; `how`: bits (bit for bit), equal (-0 == +0, NaN == NaN), close (rtol 1e-6)."""
    if isinstance(before, str):
        before = parse(before)
    for want, got in zip(outputs(before, feeds), outputs(after, feeds)):
        if how == "bits":
            assert same_bits(got, want), (got, want)
        elif how == "equal":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6)


def unchanged_on_second_run(m):
    again = get("simplify_algebra").run(m, PassOptions())
    assert not again.modified


# ---- identities ----

IDENTITIES = [  # (node, constant declarations, element type)
    ("Add(x, c)", "float[2,4] c = {-0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0}", "float"),
    ("Add(c, x)", "float c = {-0.0}", "float"),
    ("Sub(x, c)", "float[4] c = {0.0, 0.0, 0.0, 0.0}", "float"),
    ("Mul(x, c)", "float[1,4] c = {1.0, 1.0, 1.0, 1.0}", "float"),
    ("Mul(c, x)", "float[2,1] c = {1.0, 1.0}", "float"),
    ("Div(x, c)", "float c = {1.0}", "float"),
    ("Pow(x, c)", "float c = {1.0}", "float"),
    ("Pow(x, c)", "int64 c = {1}", "float"),
    ("Pow(x, c)", "float c = {1.0}", "int32"),
    ("Add(x, c)", "int64[4] c = {0, 0, 0, 0}", "int64"),
    ("Mul(c, x)", "uint8 c = {1}", "uint8"),
    ("Div(x, c)", "int32 c = {1}", "int32"),
    ("And(x, c)", "bool[4] c = {1, 1, 1, 1}", "bool"),
    ("And(c, x)", "bool c = {1}", "bool"),
    ("Or(x, c)", "bool c = {0}", "bool"),
    ("Xor(c, x)", "bool[1] c = {0}", "bool"),
]


def feed(dtype, shape=(2, 4)):
    if dtype == "float":
        return SPECIAL.reshape(shape)
    if dtype == "bool":
        return np.array([True, False] * 4).reshape(shape)
    info = np.iinfo(np.dtype(dtype))
    return np.array([info.min, info.max, 0, 1, 2, 3, 5, 7][:np.prod(shape)], dtype).reshape(shape)


@pytest.mark.parametrize("node, consts, dtype", IDENTITIES)
def test_identity_goes_bit_for_bit(node, consts, dtype):
    text = f"""g ({dtype}[2,4] x) => ({dtype}[2,4] y) <{consts}> {{
        a = {node}
        y = Identity(a)
    }}"""
    m, r = run(text)
    assert structure(m) == [("Identity", ["x"], ["y"])] and r.stats["refused"] == []
    same_outputs(text, m, {"x": feed(dtype)})
    unchanged_on_second_run(m)


def test_bitwise_identities_from_opset_18():
    text = """g (int32[2,4] x) => (int32[2,4] y) <int32 ones = {-1}, int32 zero = {0}> {
        a = BitwiseAnd(ones, x)
        b = BitwiseOr(a, zero)
        c = BitwiseXor(zero, b)
        y = Identity(c)
    }"""
    m, r = run(text, opset=18)
    assert structure(m) == [("Identity", ["x"], ["y"])]
    same_outputs(parse(text, 18), m, {"x": feed("int32")})


def test_adding_positive_zero_goes_and_changes_only_the_sign_of_zero():
    text = """g (float[2,4] x) => (float[2,4] y) <float zero = {0.0}, float neg = {-0.0}> {
        a = Add(x, zero)
        b = Sub(a, neg)
        y = Identity(b)
    }"""
    m, r = run(text)
    assert structure(m) == [("Identity", ["x"], ["y"])]
    same_outputs(text, m, {"x": SPECIAL}, how="equal")
    assert np.signbit(outputs(m, {"x": SPECIAL})[0][0, 1])  # -0 passes through; the original gave +0


def test_what_is_not_an_identity_stays_unreported():
    m, r = run("""g (float[2,4] x) => (float[2,4] y, float[2,4] z, float[2,4] w, float[2,4] v, float[2,4] u)
              <float[2] mixed = {1.0, 2.0}, float zero = {0.0}, float one = {1.0}, float[4] ones = {1.0, 1.0, 1.0, 2.0}> {
        y = Sub(zero, x)
        z = Div(one, x)
        w = Mul(x, ones)
        v = Pow(one, x)
        u = Add(x, x)
    }""")
    assert ops(m) == ["Sub", "Div", "Mul", "Pow", "Add"] and not r.modified and r.stats["refused"] == []


def test_a_constant_that_would_broadcast_is_refused():
    m, r = run("""g (float[2,4] x, float[N,4] u, float[1,4] s, float[2,M] w)
              => (float[1,2,4] y, float[N,4] z, float[2,4] v, float[2,M] t) <float[1,1,1] one3 = {1.0},
              float[2,1] zeros = {0.0, 0.0}, float[4] ones = {1.0, 1.0, 1.0, 1.0}> {
        y = Mul(x, one3)
        a = Add(u, zeros)
        z = Neg(a)
        v = Add(s, zeros)
        b = Mul(w, ones)
        t = Neg(b)
    }""")
    assert not r.modified
    assert reasons(r) == [
        "the constant has more axes than the input: the result would too",
        "input dims unknown where the constant's are not 1",
        "the constant broadcasts the input to another shape",
        "input dims unknown where the constant's are not 1",
    ]


def test_unknown_rank_allows_only_a_scalar_constant():
    model = parse("""g (float[2,4] x0) => (float[2,4] y, float[2,4] z) <float zero = {0.0}, float[1] one = {1.0}> {
        x = Relu(x0)
        a = Add(x, zero)
        y = Neg(a)
        b = Mul(x, one)
        z = Neg(b)
    }""")
    m, r = run(model)  # x has no declared shape
    assert structure(m)[:2] == [("Relu", ["x0"], ["x"]), ("Neg", ["x"], ["y"])]
    assert ops(m) == ["Relu", "Neg", "Mul", "Neg"]
    assert reasons(r) == ["the constant has rank 1 and the input's rank is unknown"]


def test_types_that_differ_are_refused():
    # Not a valid model (the checker would say so); the pass must not guess.
    model = parse("""g (int32[2,4] x) => (int32[2,4] y) <float zero = {0.0}> {
        a = Add(x, zero)
        y = Neg(a)
    }""")
    m, r = run(model, full_check=False)
    assert ops(m) == ["Add", "Neg"] and reasons(r) == ["input and constant types differ"]


def test_pow_of_64_bit_integers_or_unknown_type_is_refused():
    text = """g (int64[3] x, float[3] u0) => (int64[3] y, float[3] z) <int64 one = {1}, float onef = {1.0}> {
        a = Pow(x, one)
        y = Neg(a)
        u = Relu(u0)
        b = Pow(u, onef)
        z = Neg(b)
    }"""
    m, r = run(text)
    assert ops(m) == ["Pow", "Neg", "Relu", "Pow", "Neg"]
    assert reasons(r) == ["onnxruntime computes 64-bit integer Pow in double: Pow(x, 1) is not x past 2^53",
                          "base type unknown (onnxruntime's int64 Pow(x, 1) is not x)"]
    # Why: onnxruntime's Pow(x, 1) is not x for large int64.
    x = np.array([2**62 + 1, -7, 3], np.int64)
    assert outputs(parse(text), {"x": x, "u0": np.ones(3, np.float32)})[0][0] != -x[0]


def test_graph_output_keeps_its_name():
    m, r = run("""g (float[3] x) => (float[3] y, float[3] z) <float zero = {0.0}, float one = {1.0}> {
        a = Relu(x)
        b = Add(a, zero)
        y = Mul(b, one)
        z = Neg(x)
    }""")
    assert structure(m) == [("Relu", ["x"], ["y"]), ("Neg", ["x"], ["z"])]
    assert [o.name for o in m.to_onnx().graph.output] == ["y", "z"]


def test_values_read_by_several_nodes():
    text = """g (float[3] x) => (float[3] y, float[3] z) <float zero = {0.0}, float one = {1.0}> {
        a = Relu(x)
        b = Add(a, zero)
        z = Neg(b)
        y = Mul(b, one)
    }"""
    m, r = run(text)
    # b's readers read a; then y, a graph output, takes a's place, and Neg reads it as y.
    assert structure(m) == [("Relu", ["x"], ["y"]), ("Neg", ["y"], ["z"])]
    assert reasons(r) == []
    same_outputs(text, m, {"x": np.array([-1, 0, 2], np.float32)})


def test_graph_output_of_a_graph_input_is_refused_by_bypass():
    m, r = run("""g (float[3] x) => (float[3] y) <float one = {1.0}> {
        y = Mul(x, one)
    }""")
    assert ops(m) == ["Mul"]
    assert reasons(r) == ["output is a graph output and the input is a graph input, initializer or outer value"]


def test_identity_in_old_opsets_is_refused():
    m, r = run("""g (float[3] x) => (float[3] y) <float[3] zero = {0.0, 0.0, 0.0}> {
        a = Add(x, zero)
        y = Neg(a)
    }""", opset=6)
    assert ops(m) == ["Add", "Neg"] and reasons(r) == ["before opset 7 the broadcast attribute decides the shape"]


def test_constant_node_operands_count():
    m, r = run("""g (float[3] x) => (float[3] y) {
        c = Constant <value = float[3] {1.0, 1.0, 1.0}> ()
        a = Mul(c, x)
        y = Neg(a)
    }""")
    assert ops(m) == ["Constant", "Neg"] and m.graph.nodes[1].inputs[0].name == "x"


# ---- Where ----

def test_where_with_a_constant_condition_picks_a_branch():
    text = """g (float[2,4] a, float[2,4] b, float[4] s) => (float[2,4] y, float[2,4] z, float[2,4] w)
              <bool[4] yes = {1, 1, 1, 1}, bool no = {0}, bool[2] mixed = {1, 0}, bool[2,1] mixed2 = {1, 0}> {
        p = Where(yes, a, s)
        y = Neg(p)
        q = Where(no, s, b)
        z = Neg(q)
        w = Where(mixed2, a, b)
    }"""
    m, r = run(text)
    assert structure(m) == [("Neg", ["a"], ["y"]), ("Neg", ["b"], ["z"]), ("Where", ["mixed2", "a", "b"], ["w"])]
    assert r.stats["refused"] == []
    rng = np.random.default_rng(0)
    feeds = {"a": SPECIAL, "b": rng.standard_normal((2, 4)).astype(np.float32),
             "s": rng.standard_normal(4).astype(np.float32)}
    same_outputs(text, m, feeds, how="equal")  # onnxruntime's Where turns -0 into +0; a branch read directly does not


def test_where_refusals():
    m, r = run("""g (float[4] a, float[2,4] b, float[3] c0, float[2,4] d) => (float[2,4] y, float[3] z, float[2,4] w)
              <bool yes = {1}, bool[2,1] yes2 = {1, 1}> {
        p = Where(yes, a, b)
        y = Neg(p)
        c = Relu(c0)
        q = Where(yes, c0, c)
        z = Neg(q)
        s = Where(yes2, a, d)
        w = Neg(s)
    }""")
    assert not r.modified
    assert reasons(r) == ["the branch not taken has more axes than the input: the result would too",
                          "shape of the branch not taken unknown",
                          "the condition has more axes than the input: the result would too"]


# ---- unary chains ----

def test_involutions_cancel():
    text = """g (float[2,4] x, bool[3] p, int8[2,4] i) => (float[2,4] y, bool[3] q, int8[2,4] j) {
        a = Neg(x)
        b = Neg(a)
        y = Identity(b)
        c = Not(p)
        d = Not(c)
        q = Identity(d)
        e = BitwiseNot(i)
        f = BitwiseNot(e)
        j = Identity(f)
    }"""
    m, r = run(text, opset=18)
    assert structure(m) == [("Identity", ["x"], ["y"]), ("Identity", ["p"], ["q"]), ("Identity", ["i"], ["j"])]
    assert r.stats["nodes_removed"] == 6
    feeds = {"x": SPECIAL, "p": np.array([True, False, True]), "i": np.array([[-128, 127, 0, 1]] * 2, np.int8)}
    same_outputs(parse(text, 18), m, feeds)


def test_involution_whose_middle_is_read_elsewhere_keeps_the_first():
    m, r = run("""g (float[3] x) => (float[3] y, float[3] z) {
        [n1] a = Neg(x)
        [n2] b = Neg(a)
        y = Relu(b)
        z = Sqrt(a)
    }""")
    assert structure(m) == [("Neg", ["x"], ["a"]), ("Relu", ["x"], ["y"]), ("Sqrt", ["a"], ["z"])]
    assert r.stats["rewrites"] == [{"what": "bypassed", "consumed": ["n2"], "produced": []}]


@pytest.mark.parametrize("outer, inner", [(f, f) for f in ("Relu", "Abs", "Floor", "Ceil", "Round", "Sign")] +
                         [(r, g) for r in ("Floor", "Ceil", "Round") for g in ("Floor", "Ceil", "Round", "Sign")
                          if r != g] + [("Relu", "Abs")])
def test_second_unary_that_adds_nothing_goes(outer, inner):
    text = f"""g (float[2,4] x) => (float[2,4] y) {{
        a = {inner}(x)
        b = {outer}(a)
        y = Identity(b)
    }}"""
    m, r = run(text)
    assert structure(m) == [(inner, ["x"], ["a"]), ("Identity", ["a"], ["y"])]
    x = np.concatenate([SPECIAL, np.array([[0.5, -0.5, 2.5, -3.7]], np.float32)])
    same_outputs(text.replace("[2,4]", "[3,4]"), run(text.replace("[2,4]", "[3,4]"))[0], {"x": x})


def test_integer_idempotent_chains_and_relu_of_abs():
    text = """g (int32[4] x, float[4] u0) => (int32[4] y, int32[4] z, float[4] w) {
        a = Abs(x)
        b = Abs(a)
        y = Identity(b)
        c = Abs(x)
        z = Relu(c)
        u = Sin(u0)
        d = Abs(u)
        w = Relu(d)
    }"""
    m, r = run(text)
    # Relu(Abs(INT_MIN)) is 0, Abs(INT_MIN) is INT_MIN: that chain stays, silently.
    assert structure(m) == [("Abs", ["x"], ["a"]), ("Identity", ["a"], ["y"]), ("Abs", ["x"], ["c"]),
                            ("Relu", ["c"], ["z"]), ("Sin", ["u0"], ["u"]), ("Abs", ["u"], ["d"]),
                            ("Relu", ["d"], ["w"])]
    assert reasons(r) == ["element type unknown (Relu(Abs(x)) is Abs(x) for floating types only)"]
    feeds = {"x": np.array([-2**31, -3, 0, 5], np.int32), "u0": np.zeros(4, np.float32)}
    same_outputs(text, m, feeds)


def test_abs_of_neg_reads_past_the_neg():
    text = """g (float[2,4] x) => (float[2,4] y, float[2,4] z, float[2,4] w) {
        a = Neg(x)
        y = Abs(a)
        b = Neg(x)
        z = Abs(b)
        w = Sqrt(b)
    }"""
    m, r = run(text)
    # b is read by Sqrt too: the Neg stays, and so does the Abs that reads it.
    assert structure(m) == [("Abs", ["x"], ["y"]), ("Neg", ["x"], ["b"]), ("Abs", ["b"], ["z"]), ("Sqrt", ["b"], ["w"])]
    same_outputs(text, m, {"x": SPECIAL})


def test_chains_that_are_not_exact_stay():
    m, r = run("""g (float[3] x) => (float[3] y, float[3] z, float[3] w, float[3] v) {
        a = Reciprocal(x)
        y = Reciprocal(a)
        b = Relu(x)
        z = Abs(b)
        c = Sign(x)
        w = Abs(c)
        d = Round(x)
        v = Sign(d)
    }""")
    assert not r.modified and r.stats["refused"] == []


# ---- Max / Min -> Clip ----

def test_max_and_min_with_a_scalar_become_clip():
    text = """g (float[2,4] x) => (float[2,4] y, float[2,4] z, float[2,4] w)
              <float lo = {0.0}, float[1] hi = {1.0}, float[2,4] a> {
        y = Max(x, lo)
        z = Min(hi, x)
        a = Max(x, lo)
        w = Min(a, hi)
    }"""
    m, r = run(text)
    # A floating Clip's missing bound would be FLT_MAX (inf -> FLT_MAX): the pass writes infinity.
    assert structure(m) == [("Clip", ["x", "lo", "y_max"], ["y"]), ("Clip", ["x", "z_min", "z_max"], ["z"]),
                            ("Clip", ["x", "lo", "w_max"], ["w"])]
    assert r.stats["refused"] == []
    c = {t.name: numpy_helper.to_array(t) for t in m.to_onnx().graph.initializer}
    assert c["z_max"].shape == () and c["z_max"] == 1.0 and c["y_max"] == np.inf and c["z_min"] == -np.inf
    same_outputs(text, m, {"x": SPECIAL}, how="equal")  # NaN stays NaN; only the sign of a zero may differ
    unchanged_on_second_run(m)


def test_bound_chains_become_one_clip():
    text = """g (float[2,4] x) => (float[2,4] y, float[2,4] z) <float l1 = {-1.0}, float h1 = {3.0}, float l2 = {0.5},
              float h2 = {2.0}> {
        a = Clip(x, l1, h1)
        b = Max(a, l2)
        y = Min(b, h2)
        c = Min(x, h1)
        d = Clip(c, l1)
        z = Max(d, l2)
    }"""
    m, r = run(text)
    assert structure(m) == [("Clip", ["x", "l2", "h2"], ["y"]), ("Clip", ["x", "l2", "h1"], ["z"])]
    x = np.concatenate([SPECIAL, np.linspace(-4, 4, 8, dtype=np.float32).reshape(2, 4)])
    t = text.replace("[2,4]", "[4,4]")
    same_outputs(t, run(t)[0], {"x": x}, how="equal")


def test_a_clip_without_a_bound_keeps_its_largest_finite_value():
    text = """g (float[2,4] x) => (float[2,4] y, float[2,4] z) <float lo = {0.0}, float hi = {1.0}> {
        a = Clip(x, lo)
        y = Max(a, lo)
        b = Clip(x, , hi)
        z = Min(b, hi)
    }"""
    m, r = run(text)
    assert ops(m) == ["Clip", "Clip"]
    c = {t.name: numpy_helper.to_array(t) for t in m.to_onnx().graph.initializer}
    assert c["y_max"] == np.finfo(np.float32).max and c["z_min"] == -np.finfo(np.float32).max
    same_outputs(text, m, {"x": SPECIAL}, how="equal")  # inf -> FLT_MAX, as before


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "uint32", "int64", "uint64", "double", "float16"])
def test_clip_for_the_types_onnxruntime_runs(dtype):
    model = parse(f"""g ({dtype}[6] x) => ({dtype}[6] y) {{
        a = Max(x, lo)
        y = Min(a, hi)
    }}""", 13)
    np_type = np.dtype(dtype)
    model.graph.initializer.extend([numpy_helper.from_array(np.array(2, np_type), "lo"),
                                    numpy_helper.from_array(np.array(9, np_type), "hi")])
    m, r = run(model)
    assert structure(m) == [("Clip", ["x", "lo", "hi"], ["y"])]
    x = np.array([NAN, -0.0, 1, 5, 10, -INF] if np_type.kind == "f" else [0, 1, 2, 5, 9, 100], np_type)
    same_outputs(model, m, {"x": x}, how="equal")


def test_clip_refusals():
    text = """g (float[2,2] u, float[2,2] w, float[2,2] v) => (float[2,2] z, float[2,2] t, float[1,2,2] s)
              <float nan = {NaN}, float five = {5.0}, float three = {3.0}, float[1,1,1] big = {0.0}> {
        z = Max(u, nan)
        a = Max(w, five)
        t = Min(a, three)
        s = Max(v, big)
    }"""
    m, r = run(text)
    # a/t: the two bounds do not meet; each still becomes a Clip, but they stay two.
    assert ops(m) == ["Max", "Clip", "Clip", "Max"]
    assert reasons(r) == ["a bound is NaN (Max and Min then give NaN, Clip does not)",
                          "the bounds of the two do not overlap (the result is constant)",
                          "the bound has more axes than the input: the result would too"]
    feeds = {"u": np.ones((2, 2), np.float32), "w": np.array([[1, 4], [6, NAN]], np.float32),
             "v": np.ones((2, 2), np.float32)}
    same_outputs(text, m, feeds)


def test_clip_for_a_type_onnxruntime_lacks_is_refused():
    m, r = run("""g (int16[3] x) => (int16[3] y) <int16 lo = {1}> {
        y = Max(x, lo)
    }""", opset=13)
    assert ops(m) == ["Max"] and reasons(r) == ["onnxruntime has no Clip-12+ kernel for int16"]


def test_clip_needs_opset_11_and_double_needs_12():
    text = """g (double[3] x) => (double[3] y) <double lo = {1.0}> {
        y = Max(x, lo)
    }"""
    m, r = run(text, opset=11)
    assert ops(m) == ["Max"] and reasons(r) == ["onnxruntime has no Clip-11 kernel for float64"]
    m, r = run(text, opset=12)
    assert ops(m) == ["Clip"]
    m, r = run(text.replace("double", "float"), opset=10)
    assert ops(m) == ["Max"] and reasons(r) == ["Clip takes its bounds as inputs from opset 11"]


def test_bound_read_elsewhere_is_not_merged():
    m, r = run("""g (float[3] x) => (float[3] y, float[3] z) <float lo = {0.0}, float hi = {6.0}> {
        a = Max(x, lo)
        y = Min(a, hi)
        z = Neg(a)
    }""")
    assert structure(m) == [("Clip", ["x", "lo", "a_max"], ["a"]), ("Clip", ["a", "y_min", "hi"], ["y"]),
                            ("Neg", ["a"], ["z"])]


# ---- merged constants ----

MERGES = [  # (first, second, expected op and input order)
    ("Add(x, a)", "Add(m, b)", ("Add", ["x", "K"])),
    ("Add(a, x)", "Add(b, m)", ("Add", ["x", "K"])),
    ("Sub(x, a)", "Add(m, b)", ("Add", ["x", "K"])),
    ("Add(x, a)", "Sub(m, b)", ("Add", ["x", "K"])),
    ("Sub(x, a)", "Sub(m, b)", ("Sub", ["x", "K"])),
    ("Sub(a, x)", "Add(m, b)", ("Sub", ["K", "x"])),
    ("Sub(a, x)", "Sub(m, b)", ("Sub", ["K", "x"])),
    ("Add(x, a)", "Sub(b, m)", ("Sub", ["K", "x"])),
    ("Sub(x, a)", "Sub(b, m)", ("Sub", ["K", "x"])),
    ("Sub(a, x)", "Sub(b, m)", ("Add", ["x", "K"])),
    ("Mul(x, a)", "Mul(m, b)", ("Mul", ["x", "K"])),
    ("Mul(a, x)", "Mul(b, m)", ("Mul", ["x", "K"])),
]


@pytest.mark.parametrize("first, second, expected", MERGES)
@pytest.mark.parametrize("dtype", ["float", "int32"])
def test_constant_pairs_merge(first, second, expected, dtype):
    text = f"""g ({dtype}[2,3] x) => ({dtype}[2,3] y) <{dtype}[3] a = {{3, 5, 7}}, {dtype}[1,3] b = {{11, 13, 17}}> {{
        m = {first}
        n = {second}
        y = Identity(n)
    }}"""
    m, r = run(text)
    op, names = expected
    assert structure(m) == [(op, [("n_merged" if v == "K" else v) for v in names], ["n"]), ("Identity", ["n"], ["y"])]
    assert r.stats["rewrites"][0]["what"] == "merged"
    if dtype == "float":
        x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32) * 100
        same_outputs(text, m, {"x": x}, how="close")
    else:  # wrapping arithmetic: exact, overflow included
        x = np.array([[2**31 - 1, -2**31, 0], [1, -1, 2**30]], np.int32)
        same_outputs(text, m, {"x": x})
    unchanged_on_second_run(m)


def test_chains_merge_to_one_node_and_zeros_then_go():
    text = """g (float[4] x) => (float[4] y) <float a = {1.5}, float b = {2.0}, float c = {-3.5}, float two = {2.0},
              float half = {0.5}> {
        p = Add(x, a)
        q = Add(p, b)
        r = Add(q, c)
        s = Mul(r, two)
        t = Mul(s, half)
        y = Neg(t)
    }"""
    m, r = run(text)
    # 1.5 + 2 - 3.5 = 0 and 2 * 0.5 = 1: identities once merged.
    assert structure(m) == [("Neg", ["x"], ["y"])]
    same_outputs(text, m, {"x": np.array([1, -2, 3.25, 1e6], np.float32)}, how="close")


def test_mul_then_add_and_div_stay():
    m, r = run("""g (float[4] x) => (float[4] y, float[4] z) <float a = {1.5}, float b = {2.0}> {
        p = Mul(x, a)
        y = Add(p, b)
        q = Div(x, a)
        z = Div(q, b)
    }""")
    assert not r.modified and r.stats["refused"] == []


def test_integer_divisions_merge():
    # Truncating twice is truncating once by the product, negative numbers too.
    text = """g (int64[8] x, int32[8] i) => (int64[8] y, int32[8] j) <int64 a = {-3}, int64[1] b = {2}, int32 c = {4}> {
        p = Div(x, a)
        y = Div(p, b)
        q = Div(i, c)
        j = Div(q, c)
    }"""
    m, r = run(text)
    assert structure(m) == [("Div", ["x", "y_merged"], ["y"]), ("Div", ["i", "j_merged"], ["j"])]
    assert m.graph.nodes[0].inputs[1].initializer.numpy().tolist() == [-6]
    x = np.array([-2**63, 2**63 - 1, -13, -7, -6, 5, 6, 13], np.int64)
    same_outputs(text, m, {"x": x, "i": np.array([-2**31, 2**31 - 1, -33, -17, -16, 15, 16, 33], np.int32)})
    unchanged_on_second_run(m)


def test_integer_division_refusals():
    m, r = run("""g (int32[2] x, int32[2] u, int64[2] w, int32[2] v) => (int32[2] y, int32[2] z, int64[2] t, int32[2] s)
              <int32 a = {65536}, int32 b = {32768}, int32[2] zero = {0, 2}, int32 two = {2},
               int64 c = {-4294967296}, int32 k = {3}> {
        p = Div(x, a)
        y = Div(p, b)
        q = Div(u, zero)
        z = Div(q, two)
        e = Div(w, c)
        t = Div(e, c)
        d = Div(k, v)
        s = Div(d, two)
    }""")
    assert not r.modified
    assert reasons(r) == ["the divisors' product may overflow", "a divisor is 0", "the divisors' product may overflow"]


def test_merge_refusals():
    # [9] and [8, 1] merge into 72 elements: more than the two and than 64.
    a = "{" + ", ".join(f"{i}.0" for i in range(9)) + "}"
    b = "{" + ", ".join(f"{i}.5" for i in range(8)) + "}"
    m, r = run(f"""g (float[8,9] x, float[4] u, float[4] w)
              => (float[8,9] y, float[4] z, float[4] zz, float[4] v, float[4] t)
              <float[9] a = {a}, float[8,1] b = {b}, float big = {{3e38}}, float tiny = {{1e-30}},
               float one = {{1.5}}> {{
        p = Add(x, a)
        y = Add(p, b)
        q = Add(u, one)
        z = Add(q, one)
        zz = Neg(q)
        s = Add(w, big)
        v = Add(s, big)
        k = Mul(w, tiny)
        t = Mul(k, tiny)
    }}""")
    assert not r.modified
    assert reasons(r) == ["the merged constant would be larger than the two",
                          "'q' is read by another node or is a graph output",
                          "the merged constant overflows",
                          "the merged constant over- or underflows"]


def test_merge_of_small_constants_that_broadcast():
    # Longformer's index arithmetic: Add(Add(i, [4, 1]), [5]) -> Add(i, [4, 5]).
    text = """g (int64[1,1] i) => (int64[4,5] y) <int64[4,1] a = {0, 1, 2, 3}, int64[5] b = {4, 5, 6, 7, 8}> {
        p = Add(i, a)
        y = Add(p, b)
    }"""
    m, r = run(text)
    assert ops(m) == ["Add"] and m.graph.nodes[0].inputs[1].initializer.numpy().shape == (4, 5)
    same_outputs(text, m, {"i": np.array([[5]], np.int64)})


def test_merge_keeps_the_graph_output_name():
    m, r = run("""g (float[3] x) => (float[3] y) <float a = {3.0}, float b = {2.0}> {
        p = Mul(x, a)
        q = Add(x, a)
        y = Add(q, b)
    }""")
    assert structure(m) == [("Mul", ["x", "a"], ["p"]), ("Add", ["x", "y_merged"], ["y"])]
    assert [o.name for o in m.to_onnx().graph.output] == ["y"]


def test_merge_in_an_old_ir_makes_a_constant_node():
    model = parse("""g (float[3] x, int32[3] i) => (float[3] y, int32[3] j) {
        p = Add(x, a)
        y = Add(p, b)
        q = Add(i, c)
        j = Add(q, d)
    }""", 8)
    model.ir_version = 3
    for name, value, dtype in [("a", 1, np.float32), ("b", 2, np.float32), ("c", 1, np.int32), ("d", 2, np.int32)]:
        model.graph.initializer.append(numpy_helper.from_array(np.array(value, dtype), name))
        model.graph.input.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(
            np.dtype(dtype)), []))
    m, r = run(model)
    # IR 3: initializers are inputs, so they can be fed: not constants. As Constant nodes they are.
    assert not r.modified
    nodes = [helper.make_node("Constant", [], [n], value=numpy_helper.from_array(np.array(v, t)))
             for n, v, t in [("a", 1, np.float32), ("b", 2, np.float32), ("c", 1, np.int32), ("d", 2, np.int32)]]
    del model.graph.initializer[:]
    del model.graph.input[2:]
    for i, node in enumerate(nodes):
        model.graph.node.insert(i, node)
    m, r = run(model, full_check=False)
    assert ops(m) == ["Constant", "Constant", "Constant", "Constant", "Constant", "Add", "Add", "Add"]
    assert reasons(r) == ["a Constant before opset 9 cannot hold int32"]
    x = {"x": np.array([1, 2, 3], np.float32), "i": np.array([1, 2, 3], np.int32)}
    same_outputs(model, m, x)


# ---- Concat taken apart ----

def test_slices_of_a_concat_read_its_inputs():
    big = 2**63 - 1
    text = f"""g (float[N,2] a, float[N,3] b, float[N,1] c) => (float[N,2] y, float[N,3] z, float[N,1] w)
              <int64[1] s0 = {{0}}, int64[1] e0 = {{2}}, int64[1] s1 = {{-4}}, int64[1] e1 = {{5}},
               int64[1] s2 = {{5}}, int64[1] e2 = {{{big}}}, int64[1] ax = {{1}}, int64[1] axn = {{-1}}> {{
        k = Concat <axis = 1> (a, b, c)
        p = Slice(k, s0, e0, ax)
        y = Neg(p)
        q = Slice(k, s1, e1, axn)
        z = Neg(q)
        r = Slice(k, s2, e2, ax)
        w = Neg(r)
    }}"""
    m, r = run(text)
    assert structure(m) == [("Neg", ["a"], ["y"]), ("Neg", ["b"], ["z"]), ("Neg", ["c"], ["w"])]
    assert r.stats["nodes_removed"] == 4 and r.stats["refused"] == []
    rng = np.random.default_rng(2)
    feeds = {n: rng.standard_normal((3, k)).astype(np.float32) for n, k in [("a", 2), ("b", 3), ("c", 1)]}
    same_outputs(text, m, feeds)


@pytest.mark.parametrize("opset, split", [(11, "Split <axis = 0, split = [2, 3]> (k)"),
                                          (13, "Split <axis = -2> (k, sizes)"),
                                          (13, "Split <axis = 0> (k, sizes)"),
                                          (18, "Split <axis = 0, num_outputs = 2> (k)")])
def test_split_of_a_concat_reads_its_inputs(opset, split):
    shapes = ("float[2,4] a, float[3,4] b", "[2,4]", "[3,4]") if opset != 18 else ("float[3,4] a, float[2,4] b", "[3,4]", "[2,4]")
    text = f"""g ({shapes[0]}) => (float{shapes[1]} y, float{shapes[2]} z) <int64[2] sizes = {{2, 3}}> {{
        k = Concat <axis = 0> (a, b)
        p, q = {split}
        y = Neg(p)
        z = Neg(q)
    }}"""
    m, r = run(text, opset)
    assert structure(m) == [("Neg", ["a"], ["y"]), ("Neg", ["b"], ["z"])] and r.stats["refused"] == []
    feeds = {"a": np.arange(int(shapes[1][1]) * 4, dtype=np.float32).reshape(-1, 4),
             "b": -np.arange(int(shapes[2][1]) * 4, dtype=np.float32).reshape(-1, 4)}
    same_outputs(parse(text, opset), m, feeds)


def test_equal_split_and_attribute_slices():
    text = """g (float[2,3] a, float[2,3] b) => (float[2,3] y, float[2,3] z, float[2,3] w) {
        k = Concat <axis = 0> (a, b)
        p, q = Split <axis = 0> (k)
        y = Neg(p)
        z = Neg(q)
        r = Slice <starts = [2], ends = [4], axes = [0]> (k)
        w = Neg(r)
    }"""
    m, r = run(text, opset=9)
    assert structure(m) == [("Neg", ["a"], ["y"]), ("Neg", ["b"], ["z"]), ("Neg", ["b"], ["w"])]
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.arange(6, dtype=np.float32).reshape(2, 3)}
    same_outputs(parse(text, 9), m, feeds)


def test_slice_in_a_subgraph_reads_the_concat_input():
    then_g = helper.make_graph(
        [helper.make_node("Slice", ["k", "s", "e"], ["p"]), helper.make_node("Neg", ["p"], ["then_out"])],
        "then", [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array([2], np.int64), "s"), numpy_helper.from_array(np.array([5], np.int64), "e")])
    else_g = helper.make_graph([helper.make_node("Neg", ["b"], ["else_out"])], "else", [],
                               [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [3])])
    g = helper.make_graph([helper.make_node("Concat", ["a", "b"], ["k"], axis=0),
                           helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [3]),
                           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    before = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    m, r = run(before)
    assert ops(m) == ["If"]  # the Concat went with its only reader
    then_nodes = next(a.g for a in m.to_onnx().graph.node[0].attribute if a.name == "then_branch").node
    assert [(n.op_type, list(n.input)) for n in then_nodes] == [("Neg", ["b"])]
    feeds = {"a": np.array([1, 2], np.float32), "b": np.array([3, 4, 5], np.float32), "cond": np.array(True)}
    same_outputs(before, m, feeds)


def test_concat_read_elsewhere_stays_and_other_slices_stay():
    m, r = run("""g (float[2] a, float[3] b) => (float[2] y, float[5] z, float[2] w, float[4] v)
              <int64[1] s0 = {0}, int64[1] e0 = {2}, int64[1] s1 = {1}, int64[1] e1 = {3}, int64[2] uneven = {1, 4}> {
        k = Concat <axis = 0> (a, b)
        p = Slice(k, s0, e0)
        y = Neg(p)
        z = Relu(k)
        w = Slice(k, s1, e1)
        u, v = Split <axis = 0> (k, uneven)
    }""")
    assert structure(m) == [("Concat", ["a", "b"], ["k"]), ("Neg", ["a"], ["y"]), ("Relu", ["k"], ["z"]),
                            ("Slice", ["k", "s1", "e1"], ["w"]), ("Split", ["k", "uneven"], ["u", "v"])]
    assert r.stats["refused"] == []


def test_concat_refusals():
    m, r = run("""g (float[N,2] a, float[N,K] b, float[2] c, float[3] d, float[2] e, float[3] f, int64[1] s)
              => (float[N,2] y, float[2] z, float[2] w, float[3] v, float[1] t)
              <int64[1] s0 = {0}, int64[1] e0 = {2}, int64[1] ax = {1}> {
        k = Concat <axis = 1> (a, b)
        p = Slice(k, s0, e0, ax)
        y = Neg(p)
        k2 = Concat <axis = 0> (c, d)
        z, o = Split <axis = 0, split = [2, 3]> (k2)
        q = Neg(o)
        k3 = Concat <axis = 0> (e, f)
        w, v = Split <axis = 0, split = [2, 3]> (k3)
        t = Slice(k3, s, e0)
    }""", 12)
    assert not r.modified
    assert reasons(r) == ["input sizes along the axis unknown", "output 'z' is a graph output",
                          "output 'w' is a graph output", "starts is not a constant (no initializer)"]


def test_slice_into_a_graph_output_renames_the_input():
    m, r = run("""g (float[2] a0, float[3] b) => (float[2] y, float[5] z)
              <int64[1] s0 = {0}, int64[1] e0 = {2}, float[2] a> {
        a = Relu(a0)
        k = Concat <axis = 0> (a, b)
        y = Slice(k, s0, e0)
        z = Neg(k)
    }""")
    assert structure(m) == [("Relu", ["a0"], ["y"]), ("Concat", ["y", "b"], ["k"]), ("Neg", ["k"], ["z"])]


# ---- across the pass ----

def test_pinned_nodes_are_refused():
    text = """g (float[3] x) => (float[3] y, float[3] z, float[3] w) <float zero = {0.0}, float a = {1.0}, float lo = {0.0}> {
        [add] p = Add(x, zero)
        y = Neg(p)
        [m1] q = Add(x, a)
        [m2] r = Add(q, a)
        z = Neg(r)
        [mx] w = Max(x, lo)
    }"""
    for pinned, judged in [("add", "add"), ("m1", "m2"), ("m2", "m2"), ("mx", "mx")]:
        m = pyonnxopt.load(parse(text))
        next(n for n in m.graph.nodes if n.name == pinned).pinned = True
        r = get("simplify_algebra").run(m, PassOptions())
        assert f"'{judged}' ({'Max' if judged == 'mx' else 'Add'}): excluded from optimization" in r.stats["refused"]
        assert pinned in [n.name for n in m.graph.nodes]


def test_rewrites_inside_a_subgraph():
    then_g = helper.make_graph(
        [helper.make_node("Add", ["x", "zero"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
         helper.make_node("Neg", ["b"], ["c"]), helper.make_node("Relu", ["c"], ["then_out"])],
        "then", [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.zeros((), np.float32), "zero")])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["else_out"])], "else", [],
                               [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2])])
    g = helper.make_graph([helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    before = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    m, r = run(before)
    then_nodes = next(a.g for a in m.to_onnx().graph.node[0].attribute if a.name == "then_branch").node
    assert [(n.op_type, list(n.input)) for n in then_nodes] == [("Relu", ["x"])]
    feeds = {"x": np.array([1.5, -2.0], np.float32), "cond": np.array(True)}
    same_outputs(before, m, feeds)


def test_merge_in_a_function_body_makes_a_constant_node():
    body = [helper.make_node("Constant", [], ["a"], value=numpy_helper.from_array(np.array(1.5, np.float32))),
            helper.make_node("Constant", [], ["b"], value=numpy_helper.from_array(np.array(2.0, np.float32))),
            helper.make_node("Add", ["x", "a"], ["p"]), helper.make_node("Mul", ["p", "b"], ["q"]),
            helper.make_node("Mul", ["q", "b"], ["y"])]
    f = helper.make_function("local", "f", ["x"], ["y"], body, [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("f", ["x"], ["y"], domain="local")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    before = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                               functions=[f], ir_version=8)
    m, r = run(before)
    nodes = m.to_onnx().functions[0].node
    assert [(n.op_type, list(n.input)) for n in nodes] == [
        ("Constant", []), ("Constant", []), ("Add", ["x", "a"]), ("Constant", []), ("Mul", ["p", "y_merged"])]
    same_outputs(before, m, {"x": np.array([1, -2, 3], np.float32)}, how="close")


def test_new_constant_names_do_not_clash():
    m, r = run("""g (float[3] x) => (float[3] y, float[3] y_merged) <float a = {1.0}, float b = {2.0}> {
        p = Add(x, a)
        y = Add(p, b)
        y_merged = Neg(x)
    }""")
    assert structure(m) == [("Add", ["x", "y_merged_2"], ["y"]), ("Neg", ["x"], ["y_merged"])]


# ---- Concat of Concats ----

def test_nested_concats_of_one_axis_become_one():
    # torchvision's Resize sizes: Concat(Slice(Shape(x)), Concat(h, w)); -1 is axis 0 here
    text = """g (int64[2] a, int64[1] h, int64[1] w, int64[3] b) => (int64[7] y) <int64[2] hw> {
        hw = Concat <axis = -1> (h, w)
        y = Concat <axis = 0> (a, hw, b)
    }"""
    m, r = run(text)
    assert structure(m) == [("Concat", ["a", "h", "w", "b"], ["y"])]
    assert r.stats["nodes_removed"] == 2 and r.stats["nodes_added"] == 1
    feeds = {"a": np.array([1, 2]), "h": np.array([3]), "w": np.array([4]), "b": np.array([5, 6, 7])}
    same_outputs(text, m, feeds)


def test_a_concat_that_only_concats_read_goes_into_each():
    # RAFT's update block: Concat(motion, net) read by the GRU's two Concats.
    text = """g (float[1,2,4] a, float[1,3,4] b, float[1,1,4] h, float[1,5,4] q) => (float[1,6,4] y, float[1,10,4] z) {
        m = Concat <axis = 1> (a, b)
        y = Concat <axis = 1> (h, m)
        z = Concat <axis = -2> (q, m)
    }"""
    m, r = run(text)
    assert structure(m) == [("Concat", ["h", "a", "b"], ["y"]), ("Concat", ["q", "a", "b"], ["z"])]
    assert r.stats["nodes_removed"] == 3 and r.stats["nodes_added"] == 2
    assert [w["consumed"] for w in r.stats["rewrites"]] == [["Concat->y"], ["Concat->m", "Concat->z"]]
    rng = np.random.default_rng(0)
    same_outputs(text, m, {k: rng.standard_normal(s, dtype=np.float32)
                           for k, s in (("a", (1, 2, 4)), ("b", (1, 3, 4)), ("h", (1, 1, 4)), ("q", (1, 5, 4)))})


@pytest.mark.parametrize("text", [
    # the inner Concat is read elsewhere too
    """g (float[2,3] a, float[2,3] b) => (float[2,9] y, float[2,6] z) {
        z = Concat <axis = 1> (a, b)
        y = Concat <axis = 1> (z, a)
    }""",
    # another axis
    """g (float[2,3] a, float[2,3] b) => (float[4,6] y) {
        k = Concat <axis = 0> (a, b)
        y = Concat <axis = 1> (k, k)
    }""",
    # one of the inner Concat's readers is no Concat
    """g (float[2,3] a, float[2,3] b) => (float[2,9] y, float[2,6] z) {
        k = Concat <axis = 1> (a, b)
        y = Concat <axis = 1> (k, a)
        z = Relu(k)
    }""",
])
def test_concats_of_another_axis_or_read_elsewhere_stay(text):
    m, r = run(text)
    assert [op for op in ops(m) if op == "Concat"] == ["Concat", "Concat"]


# ---- reductions over axes of size 1 ----

REDUCE_TO_SQUEEZE = [  # (opset, node), x: float[2,1,4,1]
    (17, "ReduceSum <keepdims = 0> (x, axes)"),
    (17, "ReduceMean <keepdims = 0, axes = [1, -1]> (x)"),
    (18, "ReduceMax <keepdims = 0> (x, axes)"),
    (18, "ReduceMin <keepdims = 0> (x, axes)"),
    (12, "ReduceProd <keepdims = 0, axes = [1, 3]> (x)"),
    (11, "ReduceSum <keepdims = 0, axes = [-3, 3]> (x)"),
]


@pytest.mark.parametrize("opset, node", REDUCE_TO_SQUEEZE)
def test_a_reduction_over_axes_of_size_1_is_a_squeeze(opset, node):
    text = f"""g (float[2,1,4,1] x) => (float[2,4] y) <int64[2] axes = {{1, 3}}> {{
        y = {node}
    }}"""
    m, r = run(text, opset=opset)
    assert ops(m) == ["Squeeze"] and r.stats["refused"] == []
    squeeze = m.to_onnx().graph.node[0]
    if opset < 13:
        assert helper.get_attribute_value(squeeze.attribute[0]) == [1, 3]
    else:
        axes = {t.name: numpy_helper.to_array(t) for t in m.to_onnx().graph.initializer}[squeeze.input[1]]
        assert axes.tolist() == [1, 3]
    x = SPECIAL.reshape(2, 1, 4, 1)
    same_outputs(parse(text, opset), m, {"x": x}, how="equal")  # Sum of one -0.0 may be +0.0
    unchanged_on_second_run(m)


def test_a_reduction_of_every_axis_of_a_single_element_is_a_squeeze():
    text = """g (int64[1,1] x) => (int64 y) {
        y = ReduceSum <keepdims = 0> (x)
    }"""
    m, r = run(text)
    assert ops(m) == ["Squeeze"]
    same_outputs(text, m, {"x": np.array([[7]], np.int64)})


def test_a_reduction_of_a_scalar_stays():
    m, r = run("""g (float x) => (float y) {
        y = ReduceSum <keepdims = 0> (x)
    }""")
    assert ops(m) == ["ReduceSum"] and not r.modified


def test_a_reduction_over_a_longer_or_unknown_axis_stays():
    m, r = run("""g (float[2,3] x, float[2,N] z) => (float[2] y, float[2] w) <int64[1] axes = {1}> {
        y = ReduceSum <keepdims = 0> (x, axes)
        w = ReduceMax <keepdims = 0, axes = [1]> (z)
    }""")
    assert ops(m) == ["ReduceSum", "ReduceMax"] and not r.modified
    assert reasons(r) == []  # quietly: a pooling over an unknown length is no near miss


def test_a_tree_ensembles_sum_over_one_tree_goes_with_its_reshape():
    """hummingbird's perf_tree_trav for one tree: Reshape [N, 2] -> [N, 1, 2],
    then ReduceSum over the trees' axis: nothing is left between the two."""
    text = """g (float[N,2] x) => (float[N,2] y) <int64[3] split = {-1, 1, 2}, int64[1] trees = {1}> {
        r = Reshape(x, split)
        y = ReduceSum <keepdims = 0> (r, trees)
    }"""
    optimized, _ = pyonnxopt.optimize(parse(text))
    assert [n.op_type for n in optimized.to_onnx().graph.node] == ["Identity"]


# ---- adjacent shape slices ----

def test_adjacent_shape_slices_join():
    text = """g (float[B,S,H,D] x) => (int64[4] y, int64[2] z) <int64[1] c = {-1}> {
        a = Shape <start = 0, end = 1> (x)
        b = Shape <start = 1, end = -2> (x)
        y = Concat <axis = 0> (a, b, c, b)
        p = Shape <start = -2, end = -1> (x)
        q = Shape <start = 3> (x)
        z = Concat <axis = 0> (p, q)
    }"""
    m, r = run(text)
    assert structure(m) == [("Shape", ["x"], ["b"]), ("Shape", ["x"], ["y_dims"]), ("Concat", ["y_dims", "c", "b"], ["y"]),
                            ("Shape", ["x"], ["z"])]
    assert [n.attributes for n in m.graph.nodes if n.op_type == "Shape"] == [{"start": 1, "end": -2}, {"end": 2},
                                                                             {"start": 2}]
    same_outputs(text, m, {"x": np.zeros((2, 3, 4, 5), np.float32)})
    unchanged_on_second_run(m)


def test_a_concat_of_the_whole_shape_is_the_shape():
    text = """g (float[B,S] x) => (int64[2] y) {
        a = Shape <end = 1> (x)
        b = Shape <start = -1> (x)
        y = Concat <axis = 0> (a, b)
    }"""
    m, r = run(text)
    assert structure(m) == [("Shape", ["x"], ["y"])] and m.graph.nodes[0].attributes == {}
    same_outputs(text, m, {"x": np.zeros((2, 3), np.float32)})


SLICES_THAT_STAY = [  # (the two slices, opset)
    ("a = Shape <end = 1> (x)\n b = Shape <start = 2> (x)", 17),  # a gap
    ("a = Shape <end = 1> (x)\n b = Shape <start = 1, end = 2> (w)", 17),  # another tensor
    ("a = Shape <start = 1, end = 2> (x)\n b = Shape <end = 1> (x)", 17),  # the wrong order
    ("u = Reshape(x, t)\n a = Shape <end = 1> (u)\n b = Shape <start = 1, end = 2> (u)", 17),  # rank unknown
    ("a = Shape(x)\n b = Shape(x)", 14),  # before opset 15 Shape takes no bounds
]


@pytest.mark.parametrize("slices, opset", SLICES_THAT_STAY)
def test_shape_slices_that_stay(slices, opset):
    m, r = run(f"""g (float[B,S,H] x, float[B,S,H] w, int64[N] t) => (int64[M] y) {{
        {slices}
        y = Concat <axis = 0> (a, b)
    }}""", opset, full_check=False)
    assert not r.modified
