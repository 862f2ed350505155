"""resolve_dynamic_reshapes: computed Reshape targets become constants; the
results equal the original's at several sizes of the symbolic dims."""

import numpy as np

import pyonnxopt
from pyonnxopt.passes import get
from pyonnxopt.passes.resolve_dynamic_reshapes import _UNKNOWN, resolve

from helpers import outputs, parse


def run(text, opset=17):
    before = parse(text, opset)
    m = pyonnxopt.load(before)
    get("fold_constants").run(m)
    get("infer_shapes").run(m)
    r = get("resolve_dynamic_reshapes").run(m)
    get("eliminate_dead_code").run(m)
    assert m.check_invariants() == []
    return before, m, r


def target(m):
    n = next(n for n in m.graph.nodes if n.op_type == "Reshape")
    t = n.inputs[1].initializer
    return None if t is None else t.numpy().tolist()


def same_at_sizes(before, m, shapes):
    for shape in shapes:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        for want, got in zip(outputs(before, {"x": x}), outputs(m, {"x": x})):
            assert np.array_equal(want, got)


def test_batch_from_shape_becomes_zero():
    before, m, r = run("""g (float[N,4,3,2] x) => (float[N,4,6] y) {
        ax = Constant <value = int64[1] {0}> ()
        s = Shape(x)
        i = Constant <value = int64 {0}> ()
        b = Gather(s, i)
        u = Unsqueeze(b, ax)
        c = Constant <value = int64[2] {4, 6}> ()
        t = Concat <axis = 0> (u, c)
        y = Reshape(x, t)
    }""")
    assert target(m) == [0, 4, 6] and [n.op_type for n in m.graph.nodes] == ["Reshape"]
    same_at_sizes(before, m, [(1, 4, 3, 2), (5, 4, 3, 2)])


def test_one_unknown_entry_becomes_minus_one_and_slices_of_shape_resolve():
    before, m, r = run("""g (float[N,T,6] x) => (float[N,T,2,3] y) {
        ax = Constant <value = int64[1] {0}> ()
        s = Shape(x)
        st = Constant <value = int64[1] {0}> ()
        en = Constant <value = int64[1] {2}> ()
        nt = Slice(s, st, en)
        c = Constant <value = int64[2] {2, 3}> ()
        t = Concat <axis = 0> (nt, c)
        y = Reshape(x, t)
    }""")
    assert target(m) == [0, 0, 2, 3]
    same_at_sizes(before, m, [(1, 1, 6), (3, 5, 6)])
    before, m, r = run("""g (float[N,6] x) => (float[3,M] y) {
        ax = Constant <value = int64[1] {0}> ()
        s = Shape(x)
        i = Constant <value = int64 {0}> ()
        t1 = Gather(s, i)
        k = Constant <value = int64 {2}> ()
        p = Mul(t1, k)
        u = Unsqueeze(p, ax)
        c = Constant <value = int64[1] {3}> ()
        t = Concat <axis = 0> (c, u)
        y = Reshape(x, t)
    }""")
    # The computed entry (2*N) is the one unknown: -1; 3 stays.
    assert target(m) == [3, -1]
    same_at_sizes(before, m, [(1, 6), (5, 6)])


def test_a_dim_from_another_position_is_not_copied():
    # The target's first entry is x's dim 1 (T), not dim 0: 0 would copy N.
    before, m, r = run("""g (float[N,T] x) => (float[T,N] y) {
        ax = Constant <value = int64[1] {0}> ()
        s = Shape(x)
        i = Constant <value = int64 {1}> ()
        j = Constant <value = int64 {0}> ()
        a = Gather(s, i)
        b = Gather(s, j)
        ua = Unsqueeze(a, ax)
        ub = Unsqueeze(b, ax)
        t = Concat <axis = 0> (ua, ub)
        y = Reshape(x, t)
    }""")
    assert target(m) is None and r.stats["refused"][0].endswith("2 entries of the target shape are not known")
    same_at_sizes(before, m, [(2, 3)])


def test_allowzero_copies_become_zeros_without_it():
    # torch's dynamo exporter: Reshape(allowzero=1) to Concat(Shape(x, 0, 1), [2, 2]); the 0 that now copies
    # x's batch needs allowzero=0, and gives the same dims, an empty batch included.
    before, m, r = run("""g (float[N,4] x) => (float[N,2,2] y) {
        b = Shape <start = 0, end = 1> (x)
        c = Constant <value = int64[2] {2, 2}> ()
        t = Concat <axis = 0> (b, c)
        y = Reshape <allowzero = 1> (x, t)
    }""", opset=18)
    assert target(m) == [0, 2, 2]
    assert next(n for n in m.graph.nodes if n.op_type == "Reshape").attributes["allowzero"] == 0
    same_at_sizes(before, m, [(3, 4), (0, 4)])


def test_allowzero_with_an_unknown_entry_is_refused():
    before, m, r = run("""g (float[N,12] x) => (float[3,M] y) {
        b = Shape <start = 0, end = 1> (x)
        k = Constant <value = int64[1] {4}> ()
        p = Mul(b, k)
        c = Constant <value = int64[1] {3}> ()
        t = Concat <axis = 0> (c, p)
        y = Reshape <allowzero = 1> (x, t)
    }""", opset=18)
    assert target(m) is None and r.stats["refused"][0].endswith("its -1 could meet an empty dim")
    same_at_sizes(before, m, [(2, 12)])


def test_the_zoo_form_in_the_default_pipeline():
    text = """g (float[N,8,2,2] x) => (float[N,8,4] y) {
        ax = Constant <value = int64[1] {0}> ()
        s = Shape(x)
        i = Constant <value = int64 {0}> ()
        b = Gather(s, i)
        u = Unsqueeze(b, ax)
        c = Constant <value = int64[2] {8, 4}> ()
        t = Concat <axis = 0> (u, c)
        y = Reshape(x, t)
    }"""
    before = parse(text)
    optimized, report = pyonnxopt.optimize(before)
    assert [n.op_type for n in optimized.graph.nodes] == ["Reshape"]
    same_at_sizes(before, optimized, [(1, 8, 2, 2), (4, 8, 2, 2)])


def test_tf2onnx_shape_arithmetic_in_int32():
    """tf2onnx's Flatten and Dense-on-3-d: Cast(Shape(x), int32), a Gather
    that permutes it, Slices and a Concat with an int32 constant, then
    Cast to int64 for the Reshape."""
    before, m, r = run("""g (float[N,2,2,8] x) => (float[N,32] y) {
        s = Shape(x)
        s32 = Cast <to = 6> (s)
        perm = Constant <value = int64[4] {0, 3, 1, 2}> ()
        p = Gather(s32, perm)
        z = Constant <value = int64[1] {0}> ()
        o = Constant <value = int64[1] {1}> ()
        b = Slice(p, z, o, z)
        c = Constant <value = int32[1] {32}> ()
        t32 = Concat <axis = 0> (b, c)
        t = Cast <to = 7> (t32)
        y = Reshape(x, t)
    }""")
    assert target(m) == [0, 32] and [n.op_type for n in m.graph.nodes] == ["Reshape"]
    same_at_sizes(before, m, [(1, 2, 2, 8), (3, 2, 2, 8)])


def test_tf2onnx_flattened_batch_dims_take_the_minus_one():
    """tf2onnx's einsum lowering: Reshape(x, [ReduceProd(shape[:2]), -1, 16]).
    The product is unknown to the target's arithmetic, but the -1 is 8 for
    every input, so the product becomes the -1; tf2onnx names the batch
    `unk__N` in the graph's input, which the walk takes as a symbol."""
    before, m, r = run("""g (float[unk__7,4,8,16] x) => (float[unk__7,4,8,16] y) {
        s = Shape(x)
        lead = Constant <value = int64[2] {0, 1}> ()
        bh = Gather(s, lead)
        n = ReduceProd(bh)
        rest = Constant <value = int64[2] {-1, 16}> ()
        flat = Concat <axis = 0> (n, rest)
        f = Reshape(x, flat)
        r = Relu(f)
        back = Constant <value = int64[4] {-1, 4, 8, 16}> ()
        y = Reshape(r, back)
    }""")
    assert target(m) == [-1, 8, 16] and "ReduceProd" not in [n.op_type for n in m.graph.nodes]
    same_at_sizes(before, m, [(1, 4, 8, 16), (3, 4, 8, 16)])


def test_an_unknown_entry_beside_a_minus_one_the_walk_cannot_work_out_stays():
    before, m, r = run("""g (float[B,S,16] x, float[C,S,16] z) => (float y) {
        s = Shape(z)
        lead = Constant <value = int64[2] {0, 1}> ()
        bh = Gather(s, lead)
        n = ReduceProd(bh)
        rest = Constant <value = int64[1] {-1}> ()
        flat = Concat <axis = 0> (n, rest)
        f = Reshape(x, flat)
        y = ReduceSum <keepdims = 0> (f)
    }""")
    assert target(m) is None and any("already -1" in x for x in r.stats["refused"])


def test_no_minus_one_beside_a_count_that_may_be_empty():
    # retinanet's boxes: Reshape(t, [Gather(Shape(t), 0), computed]) where
    # t's rows are a data-dependent count (NonZero here). [0, -1] fails in
    # onnxruntime once no box is kept (-1 beside an empty dim); the original
    # target ran. Beside a named dim the -1 is still made.
    text = """g (float[{rows},3] x) => (int64[?,?] y) {{
        nz = NonZero(x)
        t = Transpose <perm = [1, 0]> (nz)
        s = Shape(t)
        i = Constant <value = int64 {{0}}> ()
        j = Constant <value = int64 {{1}}> ()
        ax = Constant <value = int64[1] {{0}}> ()
        rows = Gather(s, i)
        cols = Gather(s, j)
        one = Constant <value = int64 {{1}}> ()
        width = Mul(cols, one)
        t0 = Unsqueeze(rows, ax)
        t1 = Unsqueeze(width, ax)
        target = Concat <axis = 0> (t0, t1)
        y = Reshape(t, target)
    }}"""
    before, m, r = run(text.format(rows="N"))
    assert target(m) is None
    refused = r.stats["refused"]
    assert any("copies dim 'unk__" in x and "a count that may be empty" in x for x in refused), refused
    same_at_sizes(before, m, [(2, 3), (0, 3)])
    zeros = {"x": np.zeros((2, 3), np.float32)}  # nothing kept: the empty case itself
    assert [a.shape for a in outputs(m, zeros)] == [(0, 2)]
    counts = frozenset(m.graph.count_symbols())
    assert len(counts) == 1 and next(iter(counts)).startswith("unk__")  # NonZero's count; N is an input's
    assert resolve(["N", 6], ["N", _UNKNOWN], counts) == ([0, -1], None)
    assert resolve(["u0", 6], ["u0", _UNKNOWN], frozenset({"u0"}))[0] is None  # torch.export's data-dependent size


BATCH_TIMES_HEADS = """g (float[B,S,8] x) => (float[B,2,S,4] y)
        <int64[4] fold = {0, 0, 2, 4}, int64[2] rest = {-1, 4},
         float[4,4] w = {0.5, 0.1, 0, 0, 0, 1, 0.2, 0, 0, 0, -1, 0, 0.3, 0, 0, 2}> {
        h4 = Reshape(x, fold)
        ht = Transpose <perm = [0, 2, 1, 3]> (h4)
        zero = Constant <value = int64 {0}> ()
        one = Constant <value = int64 {1}> ()
        two = Constant <value = int64 {2}> ()
        ax = Constant <value = int64[1] {0}> ()
        xs = Shape(x)
        xb = Gather(xs, zero)
        xbh = Mul(xb, two)
        xbh1 = Unsqueeze(xbh, ax)
        merged = Concat <axis = 0> (xbh1, rest)
        h = Reshape(ht, merged)
        p = MatMul(h, w)
        s = Shape(p)
        bh = Gather(s, zero)
        b = Div(bh, two)
        b1 = Unsqueeze(b, ax)
        n = Gather(xs, one)
        n1 = Unsqueeze(n, ax)
        two1 = Constant <value = int64[1] {2}> ()
        four = Constant <value = int64[1] {4}> ()
        t = Concat <axis = 0> (b1, two1, n1, four)
        y = Reshape(p, t)
    }"""


def test_a_target_computed_from_a_computed_shape_reads_the_inputs_dims():
    # Bloom: the heads folded into the batch ([B*2, S, 4]) and the product p
    # split back with Div(Shape(p)[0], 2): the batch and the length are both
    # symbols, and the length moves, so no constant target says them; read
    # from x at run time, p has no reader for its shape any more.
    before, m, r = run(BATCH_TIMES_HEADS)
    reshape = [n for n in m.graph.nodes if n.op_type == "Reshape"][-1]
    assert r.stats["rewrites"][-1]["what"] == "target read from the graph inputs' dims"
    assert reshape.inputs[1].producer.op_type == "Concat"
    assert not any(n.op_type == "Shape" and n.inputs[0].name == "p" for n in m.graph.nodes)
    same_at_sizes(before, m, [(2, 3, 8), (1, 5, 8)])


def test_a_target_computed_from_the_inputs_own_shape_or_no_product_stays():
    before, m, r = run(BATCH_TIMES_HEADS.replace("s = Shape(p)", "s = Shape(x)").replace(
        "bh = Gather(s, zero)", "bh0 = Gather(s, zero)  bh = Mul(bh0, two)"))
    same_at_sizes(before, m, [(2, 3, 8)])
    assert not any(w["what"] == "target read from the graph inputs' dims" for w in r.stats["rewrites"])
    # the Shape of a value no fusion takes (GPT-2's Linears read their input's): the reads only move nodes
    before, m, r = run(BATCH_TIMES_HEADS.replace("p = MatMul(h, w)", "p = Relu(h)"))
    assert not any(w["what"] == "target read from the graph inputs' dims" for w in r.stats["rewrites"])


def test_read_plan():
    from pyonnxopt.passes.resolve_dynamic_reshapes import read_plan

    readable = {"B": ("x", 0), "S": ("x", 1)}
    # p [P, S, 4] -> [B, 2, S, 4]: -1 for one symbol, a read of x for the other
    assert read_plan(["P", "S", 4], ["B", 2, "S", 4], None, readable) == [-1, 2, ("x", 1), 4]
    # an unknown entry is the walk's output dim there
    assert read_plan(["P", "S", 4], [_UNKNOWN, 2, "S", 4], ["B", 2, "S", 4], readable) == [-1, 2, ("x", 1), 4]
    # a symbol no input names can only be the -1
    assert read_plan(["P", "S", 4], ["Q", 2, "S", 4], None, readable) == [-1, 2, ("x", 1), 4]
    assert read_plan(["P", "S", 4], ["Q", 2, "T", 4], None, readable) is None
    assert read_plan(["P", "S", 4], [_UNKNOWN, 2, "S", 4], None, readable) is None  # nothing names the first
    # a 0 copy of a count that may be empty: no -1 beside it, every symbol read
    assert read_plan(["N", "S", 4], ["N", "B", "S", 4], None, readable, frozenset({"N"})) == [0, ("x", 0), ("x", 1), 4]


def test_a_read_that_would_add_nodes_is_not_made():
    # Reshape(x, Shape(p)): one node of arithmetic, where reads would take a Concat and a Gather
    before, m, r = run("""g (float[B,S,8] x) => (float[B,S,8] y) <float[8,8] w = {...}> {
        p = MatMul(x, w)
        q = Reshape(x, fold)
        s = Shape(p)
        y = Reshape(q, s)
    }""".replace("q = Reshape(x, fold)", "t = Transpose <perm = [1, 0, 2]> (x)  q = Identity(t)").replace(
        "{...}", "{" + ", ".join(["0.125"] * 64) + "}"))
    assert not any(w["what"] == "target read from the graph inputs' dims" for w in r.stats["rewrites"])
    same_at_sizes(before, m, [(2, 3, 8)])
