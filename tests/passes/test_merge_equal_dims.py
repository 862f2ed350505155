"""merge_equal_dims: Shape-derived values that are the same dims merge; dims
that only look alike (another symbol, onnx's generated unk__ name) stay."""

import numpy as np
import onnx
from helpers import outputs, parse, structure

import pyonnxopt
from pyonnxopt.passes import get, run_passes


def merge(text):
    m = pyonnxopt.load(parse(text))
    get("fold_constants").run(m)  # Constant nodes become initializers
    get("infer_shapes").run(m)
    r = get("merge_equal_dims").run(m)
    get("eliminate_common_subexpressions").run(m)
    get("eliminate_dead_code").run(m)
    assert m.check_invariants() == []
    onnx.checker.check_model(m.to_onnx(), full_check=True)
    return m, r


# x's and mask's sequence length, each as a Range (ra, rb)
TWO_RANGES = """one = Constant <value = int64 {1}> ()
    zero = Constant <value = int64 {0}> ()
    sx = Shape(x)
    a = Gather(sx, one)
    sm = Shape(mask)
    b = Gather(sm, one)
    ra = Range(zero, a, one)
    rb = Range(zero, b, one)"""

RANGES = f"""g (float[B,S,4] x, int64[B,S] mask) => (float[S] y, int64[S] z) {{
    {TWO_RANGES}
    y = Cast <to = 1> (ra)
    z = Add(rb, rb)
}}"""


def test_same_symbol_from_two_tensors_merges():
    m, r = merge(RANGES)
    assert structure(m) == [("Shape", ["x"], ["sx"]), ("Gather", ["sx", "one"], ["a"]),
                            ("Range", ["zero", "a", "one"], ["ra"]), ("Cast", ["ra"], ["y"]),
                            ("Add", ["ra", "ra"], ["z"])]
    assert r.modified and r.stats["rewrites"][0]["consumed"] == ["b"]
    for s in (7, 19):
        for bsz in (1, 3):
            feeds = {"x": np.zeros((bsz, s, 4), np.float32), "mask": np.ones((bsz, s), np.int64)}
            for want, have in zip(outputs(parse(RANGES), feeds), outputs(m, feeds)):
                assert np.array_equal(want, have)


def test_whole_shapes_of_the_same_symbolic_shape_merge():
    m, _ = merge("""g (float[B,S] x, float[B,S] w) => (float[B,S] y) {
        a = Relu(x)
        b = Neg(w)
        sa = Shape(a)
        sb = Shape(b)
        ea = ConstantOfShape <value = float[1] {1}> (sa)
        eb = ConstantOfShape <value = float[1] {2}> (sb)
        c = Add(ea, eb)
        d = Add(a, b)
        y = Mul(c, d)
    }""")
    assert [n.op_type for n in m.graph.nodes].count("Shape") == 1


def test_dims_that_only_look_alike_stay():
    # [N,4] and [M,4]: N and M are different symbols; a generated unk__ name is nobody's dim
    m, r = merge("""g (float[N,4] x, float[M,4] w, float[N,4] v) => (int64 y, int64 z, int64 u) {
        zero = Constant <value = int64 {0}> ()
        sx = Shape(x)
        sw = Shape(w)
        y = Gather(sx, zero)
        z = Gather(sw, zero)
        t = Transpose <perm = [1, 0]> (v)
        f = Flatten <axis = 1> (t)
        sf = Shape(f)
        one = Constant <value = int64 {1}> ()
        u = Gather(sf, one)
    }""")
    assert not r.modified
    assert [n.op_type for n in m.graph.nodes].count("Gather") == 3


def test_graph_output_is_refused():
    _, r = merge("""g (float[B,S] x, float[S] w) => (int64 y, int64 z) {
        one = Constant <value = int64 {1}> ()
        zero = Constant <value = int64 {0}> ()
        sx = Shape(x)
        sw = Shape(w)
        y = Gather(sx, one)
        z = Gather(sw, zero)
    }""")
    assert not r.modified and r.stats["refused"] == ["'z': a graph output"]


def test_scalar_and_one_element_values_stay_apart():
    m, r = merge("""g (float[B,S] x, float[S] w) => (int64[1] y) {
        one = Constant <value = int64 {1}> ()
        ones = Constant <value = int64[1] {0}> ()
        ax = Constant <value = int64[1] {0}> ()
        sx = Shape(x)
        sw = Shape(w)
        a = Gather(sx, one)
        b = Gather(sw, ones)
        c = Unsqueeze(a, ax)
        y = Add(c, b)
    }""")
    # b (1-D [S]) is Shape(w) itself; a (0-D S) is neither
    assert [x["consumed"] for x in r.stats["rewrites"]] == [["b"]]
    assert sorted(n.op_type for n in m.graph.nodes) == ["Add", "Gather", "Shape", "Shape", "Unsqueeze"]


def test_second_run_changes_nothing_and_pipeline_keeps_outputs():
    m, _ = run_passes(pyonnxopt.load(parse(RANGES)))
    again = get("merge_equal_dims").run(m)
    assert not again.modified
    assert [n.op_type for n in m.graph.nodes].count("Range") == 1


BRANCHES = f"""g (float[B,S,4] x, int64[B,S] mask, bool c) => (int64[S] y) {{
    y = If (c) <then_branch = t () => (int64[S] ty) {{
        {TWO_RANGES}
        ty = Add(ra, rb)
    }}, else_branch = e () => (int64[S] ey) {{
        one = Constant <value = int64 {{1}}> ()
        zero = Constant <value = int64 {{0}}> ()
        sm = Shape(mask)
        b = Gather(sm, one)
        ey = Range(zero, b, one)
    }}>
}}"""


def test_the_same_dims_merge_inside_a_branch_never_across():
    m, r = merge(BRANCHES)
    # optimum's merged decoders: each branch reads the sequence length from input_ids and the mask
    assert r.modified and len(r.stats["rewrites"]) == 1
    then, other = (a.g for a in m.to_onnx().graph.node[0].attribute)
    assert [n.op_type for n in then.node].count("Shape") == 1 and [n.op_type for n in then.node].count("Range") == 1
    assert [n.op_type for n in other.node].count("Shape") == 1  # the else branch keeps its own
    for c in (True, False):
        feeds = {"x": np.zeros((2, 5, 4), np.float32), "mask": np.ones((2, 5), np.int64), "c": np.array(c)}
        assert np.array_equal(outputs(parse(BRANCHES), feeds)[0], outputs(m, feeds)[0])
