"""symbolic_shapes: what onnx's inference leaves unknown, worked out from
shape arithmetic (infer_shapes writes it back); refusals where dims only
look alike; the whole pipeline on the exporters' attention pattern keeps
the outputs at several batch sizes and sequence lengths."""

from collections import Counter

import numpy as np
import onnx
from passes.helpers import outputs, parse, run_pass

import pyonnxopt
from pyonnxopt import symbolic_shapes
from pyonnxopt.passes import run_passes


def shape_of(m, name):
    return m.graph.value(name).type["shape"]


def unknown(d):
    return d is None or d == "" or (isinstance(d, str) and d.startswith("unk__"))


# ------------------------------------------------------------ structure


def test_range_to_a_dim_has_that_many_elements():
    m, r = run_pass("infer_shapes", """g (float[B,S,4] x) => (float y) {
        s = Shape(x)
        one = Constant <value = int64 {1}> ()
        zero = Constant <value = int64 {0}> ()
        n = Gather(s, one)
        r = Range(zero, n, one)
        f = Cast <to = 1> (r)
        y = ReduceSum <keepdims = 0> (f)
    }""")
    assert shape_of(m, "r") == ["S"] and shape_of(m, "f") == ["S"]
    assert r.stats["dims_refined"] >= 1


def test_the_walk_goes_into_subgraphs():
    # an If's branches, both naming their values alike (optimum's merged decoders)
    from onnx import TensorProto as T
    from onnx import helper as h

    def branch(name, axis):
        nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i"], ["n"]),
                 h.make_node("Range", ["zero", "n", "one"], ["r"]), h.make_node("Cast", ["r"], ["f"], to=T.FLOAT),
                 h.make_node("ReduceSum", ["f"], [f"y_{name}"], keepdims=0)]
        inits = [h.make_tensor("i", T.INT64, [], [axis]), h.make_tensor("zero", T.INT64, [], [0]),
                 h.make_tensor("one", T.INT64, [], [1])]
        return h.make_graph(nodes, name, [], [h.make_tensor_value_info(f"y_{name}", T.FLOAT, [])], inits)

    main = h.make_graph([h.make_node("If", ["c"], ["y"], then_branch=branch("t", 1), else_branch=branch("e", 0))],
                        "g", [h.make_tensor_value_info("x", T.FLOAT, ["B", "S", 4]),
                              h.make_tensor_value_info("c", T.BOOL, [])], [h.make_tensor_value_info("y", T.FLOAT, [])])
    m, _ = run_pass("infer_shapes", h.make_model(main, opset_imports=[h.make_opsetid("", 17)], ir_version=8))
    branches = m.graph.nodes[0].attributes
    assert branches["then_branch"].value("r").type["shape"] == ["S"]
    assert branches["else_branch"].value("r").type["shape"] == ["B"]


def test_expand_to_a_computed_shape_and_what_follows():
    # the mask expansion exporters write: Where(shape == -1, 1, shape)
    m, _ = run_pass("infer_shapes", """g (bool[B,1,1,S] m, float[B,8,S,S] a) => (float[B,8,S,S] y) {
        s = Shape(a)
        i0 = Constant <value = int64 {0}> ()
        i2 = Constant <value = int64 {2}> ()
        ax = Constant <value = int64[1] {0}> ()
        g0 = Gather(s, i0)
        b = Unsqueeze(g0, ax)
        g2 = Gather(s, i2)
        q = Unsqueeze(g2, ax)
        neg = Constant <value = int64[1] {-1}> ()
        t = Concat <axis = 0> (b, neg, q, q)
        minus = Constant <value = int64[4] {-1, -1, -1, -1}> ()
        ones = Constant <value = int64[4] {1, 1, 1, 1}> ()
        e = Equal(t, minus)
        w = Where(e, ones, t)
        x = Expand(m, w)
        z = Constant <value = float {0}> ()
        big = Constant <value = float {-1e4}> ()
        bias = Where(x, z, big)
        y = Add(a, bias)
    }""")
    assert shape_of(m, "x") == ["B", 1, "S", "S"]
    assert shape_of(m, "bias") == ["B", 1, "S", "S"]


def test_a_reshape_onnx_gives_no_rank_gets_the_computed_target():
    # below opset 15 onnx 1.23 leaves Reshape(a, Shape(b) * 1) without even a rank (BERT and GPT-2 exported
    # at opsets 10 to 12); Reshape(a, k) of a computed k has k's length as its rank
    m, r = run_pass("infer_shapes", parse("""g (float[N] a, float[B,S,64] b, int64[3] k) => (float[B,S,64] y, float z) {
        s = Shape(b)
        one = Constant <value = int64[3] {1, 1, 1}> ()
        t = Mul(s, one)
        x = Reshape(a, t)
        y = Relu(x)
        w = Reshape(a, k)
        z = ReduceSum <keepdims = 0> (w)
    }""", 13))
    assert shape_of(m, "x") == ["B", "S", 64]
    assert len(shape_of(m, "w")) == 3 and all(unknown(d) for d in shape_of(m, "w"))  # only the rank: k's length


def test_without_a_rank_the_zero_bias_of_a_reshaped_value_goes():
    proto = parse("""
        g (float[N] a, float[B,S,64] b) => (float[B,S,64] y) {
            s = Shape(b)
            x = Reshape(a, s)
            p = Add(x, zeros)
            q = Mul(p, ones)
            y = Relu(q)
        }""", 13)
    proto.graph.initializer.extend([onnx.numpy_helper.from_array(np.zeros(64, np.float32), "zeros"),
                                    onnx.numpy_helper.from_array(np.ones(64, np.float32), "ones")])
    m, _ = run_passes(pyonnxopt.load(proto))
    assert Counter(n.op_type for n in m.graph.nodes) == Counter({"Shape": 1, "Reshape": 1, "Relu": 1})
    feeds = {"a": np.arange(-200, 2 * 3 * 64 - 200, dtype=np.float32), "b": np.zeros((2, 3, 64), np.float32)}
    np.testing.assert_array_equal(outputs(m, feeds)[0], np.maximum(feeds["a"].reshape(2, 3, 64), 0))


def test_reshape_minus_one_cancels_symbols():
    m, _ = run_pass("infer_shapes", """g (float[B,S,512] x) => (float[B,S,8,64] y) {
        s = Shape(x)
        i0 = Constant <value = int64 {0}> ()
        i1 = Constant <value = int64 {1}> ()
        ax = Constant <value = int64[1] {0}> ()
        g0 = Gather(s, i0)
        u0 = Unsqueeze(g0, ax)
        g1 = Gather(s, i1)
        u1 = Unsqueeze(g1, ax)
        c = Constant <value = int64[2] {-1, 64}> ()
        t = Concat <axis = 0> (u0, u1, c)
        r = Reshape(x, t)
        y = Relu(r)
    }""")
    assert shape_of(m, "r") == ["B", "S", 8, 64]


def test_broadcast_rules():
    b = symbolic_shapes.broadcast
    assert b([["B", 1, "S"], [1, 8, "S"]]) == ["B", 8, "S"]
    assert b([["B"], [5]]) == [5]          # B is 1 or 5: the result is 5
    assert b([["B"], ["C"]]) == [None]     # could be either
    assert b([[None], ["S"]]) == [None]    # the unknown one could be larger
    assert b([[None], [7]]) == [7]
    # onnx's generated unk__ names are symbols within one inference (rule 9)
    assert b([["unk__3"], [1]]) == ["unk__3"]
    assert b([["unk__3"], ["unk__3"]]) == ["unk__3"]
    assert b([["unk__3"], ["unk__4"]]) == [None]


def test_reshape_dims_rules():
    r = symbolic_shapes.reshape_dims
    assert r(["B", 8, "S", 64], [0, -1, 0, 64], False) == ["B", 8, "S", 64]
    assert r(["B", "S", 512], [0, 0, -1, 64], False) == ["B", "S", 8, 64]
    # a product of symbols is kept for a later -1 to cancel (never written)
    assert r(["B", "S", 8, 64], [0, -1], False) == ["B", symbolic_shapes.Product(512, Counter(S=1))]
    assert r(["B", "S", 4], [-1, 2], False) == [symbolic_shapes.Product(2, Counter(B=1, S=1)), 2]
    twelve_b = r([197, "B", 768], [197, -1, 64], False)
    assert twelve_b == [197, symbolic_shapes.Product(12, Counter(B=1)), 64]
    assert r([twelve_b[1], 197, 64], [-1, 12, 197, 64], False) == ["B", 12, 197, 64]
    assert r(["B", 6], [0, -1, 4], False) == ["B", None, 4]        # 6 / 4 does not divide
    assert r(["B", 6], [0, 3], True) == [0, 3]                     # allowzero: 0 is a size


# ------------------------------------------------------------ refusals


def test_dims_that_only_look_alike_stay_unknown():
    # x is [N, 4], z is [M, 4]: Range to N and Expand by M's shape know nothing of each other
    m, _ = run_pass("infer_shapes", """g (float[N,4] x, float[M,4] z, int64 lim) => (float a, float b, float c) {
        sx = Shape(x)
        sz = Shape(z)
        i0 = Constant <value = int64 {0}> ()
        one = Constant <value = int64 {1}> ()
        n = Gather(sx, i0)
        r = Range(one, n, one)
        rf = Cast <to = 1> (r)
        a = ReduceSum <keepdims = 0> (rf)
        e = Expand(x, sz)
        b = ReduceSum <keepdims = 0> (e)
        f = Range(i0, lim, one)
        ff = Cast <to = 1> (f)
        c = ReduceSum <keepdims = 0> (ff)
    }""")
    assert unknown(shape_of(m, "r")[0])   # start 1: N - 1 elements, no dim says so
    assert shape_of(m, "e")[1] == 4 and unknown(shape_of(m, "e")[0])  # N against M
    assert unknown(shape_of(m, "f")[0])   # a graph input's value is not a dim


def test_a_fed_initializer_is_not_a_constant():
    model = parse("""g (float[B,S] x, int64[2] t) => (float y) <int64[2] t = {0, -1}> {
        r = Reshape(x, t)
        y = ReduceSum <keepdims = 0> (r)
    }""")
    m, _ = run_pass("infer_shapes", model)
    assert shape_of(m, "r") is None or all(unknown(d) for d in shape_of(m, "r")) or len(shape_of(m, "r")) == 2
    assert shape_of(m, "r") != ["B", "S"]


def test_equal_of_two_different_symbols_is_unknown():
    m, _ = run_pass("infer_shapes", """g (bool[A,B] m, float[A,C] a) => (bool[A,B] y) {
        s = Shape(m)
        u = Shape(a)
        e = Equal(s, u)
        o = Constant <value = int64[2] {1, 1}> ()
        w = Where(e, o, s)
        x = Expand(m, w)
        y = Identity(m)
    }""")
    x = shape_of(m, "x")
    assert x[0] == "A" and unknown(x[1])  # A == A picks the 1; B against C is not known


# ------------------------------------------------------------ pipeline


ATTENTION = """g (float[B,S,32] x, bool[B,1,1,S] mask) => (float[B,S,32] y) {
    s = Shape(x)
    i0 = Constant <value = int64 {0}> ()
    i1 = Constant <value = int64 {1}> ()
    i2 = Constant <value = int64 {2}> ()
    ax = Constant <value = int64[1] {0}> ()
    heads = Constant <value = int64[2] {-1, 8}> ()
    g0 = Gather(s, i0)
    n = Unsqueeze(g0, ax)
    g1 = Gather(s, i1)
    t = Unsqueeze(g1, ax)
    split = Concat <axis = 0> (n, t, heads)
    rq = Reshape(x, split)
    q = Transpose <perm = [0, 2, 1, 3]> (rq)
    rk = Reshape(x, split)
    k = Transpose <perm = [0, 2, 3, 1]> (rk)
    scores = MatMul(q, k)
    qs = Shape(q)
    gl = Gather(qs, i2)
    len = Unsqueeze(gl, ax)
    minus = Constant <value = int64[1] {-1}> ()
    ms = Concat <axis = 0> (n, minus, len, len)
    negs = Constant <value = int64[4] {-1, -1, -1, -1}> ()
    ones = Constant <value = int64[4] {1, 1, 1, 1}> ()
    eq = Equal(ms, negs)
    full = Where(eq, ones, ms)
    m4 = Expand(mask, full)
    zero = Constant <value = float {0}> ()
    big = Constant <value = float {-10000}> ()
    bias = Where(m4, zero, big)
    sb = Add(scores, bias)
    p = Softmax <axis = -1> (sb)
    ctx = MatMul(p, q)
    cs = Shape(ctx)
    eight = Constant <value = int64[1] {8}> ()
    gc = Gather(cs, i0)
    uc = Unsqueeze(gc, ax)
    i3 = Constant <value = int64 {3}> ()
    ks = Shape(k)
    gk = Gather(ks, i3)
    uk = Unsqueeze(gk, ax)
    back = Concat <axis = 0> (uc, minus, uk, eight)
    same = Reshape(ctx, back)
    merge = Concat <axis = 0> (n, t, minus)
    tm = Transpose <perm = [0, 2, 1, 3]> (same)
    y = Reshape(tm, merge)
}"""


def test_attention_shape_arithmetic_goes_and_outputs_stay():
    before = parse(ATTENTION)
    m, _ = run_passes(pyonnxopt.load(before))
    onnx.checker.check_model(m.to_onnx(), full_check=True)
    got = [n.op_type for n in m.graph.nodes]
    # ctx's Reshape is an identity (k's last dim is S, as is ctx's third); the
    # head merge gets a constant target; what computes the mask's shape stays,
    # reading B and S from x's Shape alone (merge_equal_dims: q's dim 2 is S
    # too), each as one Shape slice (unsqueeze_into_gather); the Expand
    # guard's Equal folds (dims are never -1; its second entry is the -1
    # itself), and its Where goes into the Concat (select_concat_entries)
    assert got == ["Shape", "Shape", "Reshape", "Transpose", "Transpose",
                   "MatMul", "Concat", "Expand", "Where", "Add", "Softmax", "MatMul", "Transpose", "Reshape"]
    reshapes = [n for n in m.graph.nodes if n.op_type == "Reshape"]
    assert [r.inputs[1].initializer.numpy().tolist() for r in reshapes] == [[0, 0, -1, 8], [0, 0, -1]]
    rng = np.random.default_rng(0)
    for b in (1, 3):
        for s in (7, 19):
            feeds = {"x": rng.standard_normal((b, s, 32)).astype(np.float32),
                     "mask": rng.random((b, 1, 1, s)) < 0.7}
            for want, have in zip(outputs(before, feeds), outputs(m, feeds)):
                np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)


def test_second_run_changes_nothing():
    m, _ = run_passes(pyonnxopt.load(parse(ATTENTION)))
    first = m.to_bytes()
    m2, _ = run_passes(pyonnxopt.load(first))
    assert [n.op_type for n in m2.graph.nodes] == [n.op_type for n in m.graph.nodes]


def test_normalizations_and_attention_keep_the_symbols():
    # onnx names RMSNormalization's output dims afresh (unk__): a fused T5
    # block would lose its batch and sequence for every block after it.
    m, r = run_pass("infer_shapes", parse("""g (float[B,S,8] x, float[B,T,8] kv) => (float y)
            <float[8] w = {1,1,1,1,1,1,1,1}> {
        n = RMSNormalization <axis = -1> (x, w)
        a = Attention <q_num_heads = 2, kv_num_heads = 2> (n, kv, kv)
        b = Relu(a)
        y = ReduceSum <keepdims = 0> (b)
    }""", 23))
    assert shape_of(m, "n") == ["B", "S", 8]
    assert shape_of(m, "a") == ["B", "S", 8] and shape_of(m, "b") == ["B", "S", 8]


def test_attention_of_4d_heads_gives_the_queries_and_value_size():
    dims = symbolic_shapes._attention_dims(["B", 4, "S", 8], ["B", 4, "T", 16], {})
    assert dims == ["B", 4, "S", 16]


# p = pos[:, :S], S the second dim of ids: BERT's position ids.
POSITIONS = """
        s = Shape(ids)
        one = Constant <value = int64 {1}> ()
        n = Gather(s, one)
        axes = Constant <value = int64[1] {0}> ()
        end = Unsqueeze(n, axes)
        zero = Constant <value = int64[1] {0}> ()
        ax1 = Constant <value = int64[1] {1}> ()
        p = Slice(pos, zero, end, ax1, ax1)
"""


def test_position_slice_to_the_sequence_length_broadcasts_as_it():
    # BERT's position ids: table[:, :seq] (at most 512 long) added to the
    # [B, S, 16] token embeddings; any S the Add accepts is at most 512.
    model = parse("""g (int64[B,S] ids, float[B,S,16] tok) => (float[B,S,16] y) {""" + POSITIONS + """
        e = Gather(table, p)
        y = Add(tok, e)
    }""")
    model.graph.initializer.extend([
        onnx.numpy_helper.from_array(np.zeros((512, 16), np.float32), "table"),
        onnx.numpy_helper.from_array(np.arange(512, dtype=np.int64)[None], "pos")])
    m, _ = run_pass("infer_shapes", model)
    assert shape_of(m, "p")[0] == 1 and unknown(shape_of(m, "p")[1])  # min(S, 512): no dim says that
    assert shape_of(m, "y") == ["B", "S", 16]


def test_the_last_s_of_a_buffer_broadcasts_as_s():
    # MPT's ALiBi bias: alibi[:, :, N - S:], [H, 1, N] cut to [H, 1, min(S, N)], added to [B, H, S, S] scores.
    model = parse("""g (float[B,4,S,S] scores) => (float z) {
        s = Shape(scores)
        three = Constant <value = int64 {3}> ()
        n = Gather(s, three)
        last = Sub(size, n)
        axes = Constant <value = int64[1] {0}> ()
        start = Unsqueeze(last, axes)
        end = Constant <value = int64[1] {9223372036854775807}> ()
        ax2 = Constant <value = int64[1] {2}> ()
        b = Slice(alibi, start, end, ax2)
        y = Add(scores, b)
        z = ReduceSum <keepdims = 0> (y)
    }""")
    model.graph.initializer.extend([onnx.numpy_helper.from_array(np.zeros((4, 1, 64), np.float32), "alibi"),
                                    onnx.numpy_helper.from_array(np.array(64, np.int64), "size")])
    m, _ = run_pass("infer_shapes", model)
    assert shape_of(m, "b")[:2] == [4, 1] and unknown(shape_of(m, "b")[2])  # min(S, 64): no dim says that
    assert shape_of(m, "y") == ["B", 4, "S", "S"]


def test_batch_times_heads_merged_and_split_back_by_computed_shapes():
    # Bloom: [B, H, S, D] -> Reshape([B*H, -1, D]) with B*H = Mul(B, H) read
    # from an input; the product [B*H, S, D] -> Reshape([Div(its dim 0, H), H, S, D]).
    m, _ = run_pass("infer_shapes", """g (float[B,4,S,16] x) => (float z) {
        s = Shape(x)
        zero = Constant <value = int64 {0}> ()
        b = Gather(s, zero)
        four = Constant <value = int64 {4}> ()
        bh = Mul(b, four)
        ax = Constant <value = int64[1] {0}> ()
        bh1 = Unsqueeze(bh, ax)
        rest = Constant <value = int64[2] {-1, 16}> ()
        merge = Concat <axis = 0> (bh1, rest)
        m3 = Reshape(x, merge)
        y3 = Relu(m3)
        s3 = Shape(y3)
        bh2 = Gather(s3, zero)
        b2 = Div(bh2, four)
        b21 = Unsqueeze(b2, ax)
        two = Constant <value = int64 {2}> ()
        sq = Gather(s, two)
        sq1 = Unsqueeze(sq, ax)
        h1 = Constant <value = int64[1] {4}> ()
        d1 = Constant <value = int64[1] {16}> ()
        split = Concat <axis = 0> (b21, h1, sq1, d1)
        y = Reshape(y3, split)
        z = ReduceSum <keepdims = 0> (y)
    }""")
    assert shape_of(m, "m3")[1:] == ["S", 16] and unknown(shape_of(m, "m3")[0])  # 4*B: no dim says that
    assert shape_of(m, "y") == ["B", 4, "S", 16]


def test_buffered_token_types_and_a_written_out_layer_norm_keep_the_symbols():
    # HF BERT called without token_type_ids: buffer[:, :seq] gathered by
    # position (GatherElements: the indices' shape), expanded to [B, S];
    # then LayerNorm as ReduceMean over the last axis, Sub, Div.
    model = parse("""g (int64[B,S] ids, float[B,S,16] tok) => (float[B,S,16] y) {""" + POSITIONS + """
        t = GatherElements <axis = 1> (buf, p)
        tt = Expand(t, s)
        e = Gather(table, tt)
        x = Add(tok, e)
        mu = ReduceMean <axes = [-1]> (x)
        d = Sub(x, mu)
        sq = Mul(d, d)
        var = ReduceMean <axes = [2], keepdims = 1> (sq)
        red = Constant <value = int64[2] {1, 2}> ()
        total = ReduceSum <keepdims = 0> (sq, red)
        y = Div(d, var)
    }""")
    model.graph.initializer.extend([
        onnx.numpy_helper.from_array(np.zeros((2, 16), np.float32), "table"),
        onnx.numpy_helper.from_array(np.zeros((1, 512), np.int64), "buf"),
        onnx.numpy_helper.from_array(np.arange(512, dtype=np.int64)[None], "pos")])
    m, _ = run_pass("infer_shapes", model)
    assert shape_of(m, "tt") == ["B", "S"] and shape_of(m, "x") == ["B", "S", 16]
    assert shape_of(m, "mu") == ["B", "S", 1] and shape_of(m, "var") == ["B", "S", 1]
    assert shape_of(m, "total") == ["B"] and shape_of(m, "y") == ["B", "S", 16]


def test_slice_bounds_rules():
    at_most = symbolic_shapes.AtMost("S", 512)
    b = symbolic_shapes.broadcast_dim
    assert b("S", at_most) == "S" and b(at_most, "S") == "S"
    assert b(at_most, at_most) == at_most
    assert b("T", at_most) is None       # T could be 512 while S is 3
    assert b(512, at_most) == 512        # an int other than 1 wins, as always
    assert b(1, at_most) == at_most


def test_slice_lengths():
    m, _ = run_pass("infer_shapes", """g (float[B,10,S] x) => (float a, float b, float c) {
        s = Shape(x)
        two = Constant <value = int64 {2}> ()
        n = Gather(s, two)
        ax0 = Constant <value = int64[1] {0}> ()
        end = Unsqueeze(n, ax0)
        st = Constant <value = int64[1] {2}> ()
        en = Constant <value = int64[1] {-1}> ()
        ax = Constant <value = int64[1] {1}> ()
        x1 = Slice(x, st, en, ax)
        big = Constant <value = int64[1] {1000}> ()
        stp = Constant <value = int64[1] {3}> ()
        x2 = Slice(x, ax0, big, ax, stp)
        ax2 = Constant <value = int64[1] {2}> ()
        x3 = Slice(x, ax0, end, ax2)
        a = ReduceSum <keepdims = 0> (x1)
        b = ReduceSum <keepdims = 0> (x2)
        c = ReduceSum <keepdims = 0> (x3)
    }""")
    assert shape_of(m, "x1")[1] == 7 and shape_of(m, "x2")[1] == 4
    assert shape_of(m, "x3")[2] == "S"



def test_sequence_first_head_split_keeps_a_dynamic_batch():
    # torch's MultiheadAttention: [S, B, E] -> [S, B*H, D] -> [B*H, S, D] -> [B, H, S, D];
    # the batch comes through a Concat (ViT's class token) that onnx left unnamed
    m, _ = run_pass("infer_shapes", """g (float[B,196,32] x, float[B,1,32] cls) => (float y) {
        c = Concat <axis = 1> (cls, x)
        t = Transpose <perm = [1, 0, 2]> (c)
        fold = Constant <value = int64[3] {197, -1, 8}> ()
        f = Reshape(t, fold)
        bf = Transpose <perm = [1, 0, 2]> (f)
        split = Constant <value = int64[4] {-1, 4, 197, 8}> ()
        h = Reshape(bf, split)
        y = ReduceSum <keepdims = 0> (h)
    }""")
    assert shape_of(m, "c") == ["B", 197, 32]
    assert unknown(shape_of(m, "f")[1])      # 4*B: no dim holds it
    assert shape_of(m, "h") == ["B", 4, 197, 8]


def test_concat_dims():
    c = symbolic_shapes._concat_dims
    assert c([["B", 1, 8], [None, "S", 8]], 1) == ["B", symbolic_shapes.Linear(1, {"S": 1}), 8]  # a sum, kept
    assert c([["B", None, 8], ["B", "S", 8]], 1) == ["B", None, 8]
    assert c([[None, 1, 8], ["B", 196, 8]], -2) == ["B", 197, 8]


def test_expand_keeping_dims_through_a_flattened_shape():
    # torch's cls_token.expand(B, -1, -1): Where(shape == ConstantOfShape(1) * -1,
    # 1, shape), the shape reshaped to a vector first; onnx leaves all of it unknown
    m, _ = run_pass("infer_shapes", """g (float[B,196,32] x, float[1,1,32] cls) => (float y) {
        sh = Shape(x)
        i0 = Constant <value = int64 {0}> ()
        n = Gather(sh, i0)
        ax = Constant <value = int64[1] {0}> ()
        b = Unsqueeze(n, ax)
        minus1 = Constant <value = int64[1] {-1}> ()
        t = Concat <axis = 0> (b, minus1, minus1)
        flat = Constant <value = int64[1] {-1}> ()
        r = Reshape(t, flat)
        sr = Shape(r)
        ones = ConstantOfShape <value = int64[1] {1}> (sr)
        neg = Constant <value = int64 {-1}> ()
        minus = Mul(ones, neg)
        keep = Equal(r, minus)
        w = Where(keep, ones, r)
        e = Expand(cls, w)
        y = ReduceSum <keepdims = 0> (e)
    }""")
    assert shape_of(m, "e") == ["B", 1, 32]


def test_exact_division_of_dims_only():
    # ViT's patch count: 224 / 16 (ints, exact); 10 / 4 has a rounding rule to follow, so no
    m, _ = run_pass("infer_shapes", """g (float[B,3,224,10] x) => (float a, float b) {
        sh = Shape(x)
        i2 = Constant <value = int64 {2}> ()
        i3 = Constant <value = int64 {3}> ()
        h = Gather(sh, i2)
        w = Gather(sh, i3)
        p = Constant <value = int64 {16}> ()
        four = Constant <value = int64 {4}> ()
        hp = Div(h, p)
        wp = Div(w, four)
        zero = Constant <value = int64 {0}> ()
        one = Constant <value = int64 {1}> ()
        ra = Range(zero, hp, one)
        rb = Range(zero, wp, one)
        fa = Cast <to = 1> (ra)
        fb = Cast <to = 1> (rb)
        a = ReduceSum <keepdims = 0> (fa)
        b = ReduceSum <keepdims = 0> (fb)
    }""")
    assert shape_of(m, "ra") == [14]
    assert unknown(shape_of(m, "rb")[0])


def test_positions_after_a_cache_and_a_total_named_by_an_output():
    # GPT-2: positions Range(past, past + seq) are seq long; the causal mask's
    # keys Range(0, past + seq) are what the present keys' declared dim names,
    # though that Concat comes later in the graph (a second walk)
    m, _ = run_pass("infer_shapes", """g (int64[B,S] ids, float[B,4,P,8] past, float[B,4,S,8] k)
            => (float[B,4,T,8] present, float a, float b) {
        sp = Shape(past)
        i2 = Constant <value = int64 {2}> ()
        p = Gather(sp, i2)
        si = Shape(ids)
        i1 = Constant <value = int64 {1}> ()
        s = Gather(si, i1)
        total = Add(p, s)
        zero = Constant <value = int64 {0}> ()
        one = Constant <value = int64 {1}> ()
        pos = Range(p, total, one)
        keys = Range(zero, total, one)
        fp = Cast <to = 1> (pos)
        fk = Cast <to = 1> (keys)
        a = ReduceSum <keepdims = 0> (fp)
        b = ReduceSum <keepdims = 0> (fk)
        present = Concat <axis = 2> (past, k)
    }""")
    assert shape_of(m, "pos") == ["S"] and shape_of(m, "fp") == ["S"]
    assert shape_of(m, "keys") == ["T"]


def test_sums_of_dims():
    s = symbolic_shapes
    total = s._linear_sum("P", "S")
    assert isinstance(total, s.Linear) and total.nonnegative()
    assert s._linear_sum(total, "P", -1) == "S" and s._linear_sum(3, 4) == 7
    assert not s._linear_sum("S", 1, -1).nonnegative()  # S - 1 could be -1
    assert s._binary("Equal", total, -1) == ("b", False) and s._binary("Equal", total, total) == ("b", True)
    assert s._binary("Mul", 2, "S") == s.Linear(0, {"S": 2}) and s._binary("Mul", "S", "S") is None


def test_split_of_refined_dims():
    m, _ = run_pass("infer_shapes", """g (float[B,S] x) => (float a) {
        sh = Shape(x)
        i1 = Constant <value = int64 {1}> ()
        n = Gather(sh, i1)
        zero = Constant <value = int64 {0}> ()
        one = Constant <value = int64 {1}> ()
        r = Range(zero, n, one)
        f = Cast <to = 1> (r)
        ax = Constant <value = int64[1] {0}> ()
        u = Unsqueeze(f, ax)
        two = Concat <axis = 0> (u, u)
        sizes = Constant <value = int64[2] {1, 1}> ()
        h0, h1 = Split <axis = 0> (two, sizes)
        a = ReduceSum <keepdims = 0> (h1)
    }""")
    assert shape_of(m, "h0") == [1, "S"] and shape_of(m, "h1") == [1, "S"]


# ------------------------------------------------------------ Conv and pool windows (rule 7)

WINDOWS = {
    # name: (op and attributes, weight shape or None)
    "conv7_s2_p3": ("Conv <strides = [2, 2], pads = [3, 3, 3, 3]>", [4, 3, 7, 7]),
    "conv3_s1_p1": ("Conv <pads = [1, 1, 1, 1]>", [4, 3, 3, 3]),
    "conv1_s2": ("Conv <strides = [2, 2]>", [4, 3, 1, 1]),
    "conv3_s3_d2_asym": ("Conv <strides = [3, 1], dilations = [2, 1], pads = [0, 2, 1, 0]>", [4, 3, 3, 3]),
    "conv_same_s2": ("Conv <auto_pad = \"SAME_UPPER\", strides = [2, 2]>", [4, 3, 3, 3]),
    "conv_valid_s2": ("Conv <auto_pad = \"VALID\", strides = [2, 2]>", [4, 3, 3, 3]),
    "maxpool3_s2_p1": ("MaxPool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1]>", None),
    "avgpool2_s2": ("AveragePool <kernel_shape = [2, 2], strides = [2, 2]>", None),
}


def _window_model(op: str, weight) -> onnx.ModelProto:
    w = f", float{weight} w" if weight else ""
    inputs = "(x, w)" if weight else "(x)"
    proto = parse(f"g (float[N,3,H,W] x{w}) => (float[?,?,?,?] y) {{ t = {op} {inputs}  y = Relu (t) }}")
    if weight:  # the weight as an initializer, so that it is a constant
        proto.graph.initializer.append(onnx.numpy_helper.from_array(np.ones(weight, np.float32), "w"))
    return proto


def _evaluate(name, env: dict) -> int:
    """A dim name of rule 7 evaluated for the given input dims."""
    import math

    return name if isinstance(name, int) else eval(name, {"floor": math.floor, "ceil": math.ceil}, env)  # noqa: S307


def test_window_dims_match_onnxruntime_for_every_size():
    for key, (op, weight) in WINDOWS.items():
        proto = _window_model(op, weight)
        m, _ = run_pass("infer_shapes", proto)
        dims = shape_of(m, "t")
        assert dims[:2] == ["N", 4 if weight else 3], key
        assert not any(unknown(d) for d in dims), (key, dims)
        for h, w in ((7, 8), (9, 11), (16, 16), (23, 10)):
            x = np.zeros((2, 3, h, w), np.float32)
            (y,) = outputs(proto, {"x": x})
            env = {"N": 2, "H": h, "W": w}
            assert [_evaluate(d, env) for d in dims] == list(y.shape), (key, dims, h, w)


def test_window_names_say_the_arithmetic_and_stride_1_keeps_the_dim():
    m, _ = run_pass("infer_shapes", _window_model(*WINDOWS["conv7_s2_p3"]))
    assert shape_of(m, "t")[2:] == ["floor((H-1)/2)+1", "floor((W-1)/2)+1"]
    m, _ = run_pass("infer_shapes", _window_model(*WINDOWS["conv3_s1_p1"]))
    assert shape_of(m, "t")[2:] == ["H", "W"]
    m, _ = run_pass("infer_shapes", _window_model(*WINDOWS["conv_same_s2"]))
    assert shape_of(m, "t")[2:] == ["ceil(H/2)", "ceil(W/2)"]


def test_a_resnet_shortcut_has_its_main_paths_dims():
    proto = parse("""g (float[N,4,H,W] x) => (float[?,?,?,?] y) {
        a = Conv <strides = [2, 2], pads = [1, 1, 1, 1]> (x, w3)
        b = Conv (a, w1)
        c = Conv <strides = [2, 2]> (x, w1)
        s = Add (b, c)
        p = MaxPool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1]> (s)
        y = Relu (p)
    }""")
    proto.graph.initializer.extend([onnx.numpy_helper.from_array(np.ones([4, 4, 3, 3], np.float32), "w3"),
                                    onnx.numpy_helper.from_array(np.ones([4, 4, 1, 1], np.float32), "w1")])
    m, _ = run_pass("infer_shapes", proto)
    assert shape_of(m, "b") == shape_of(m, "c") == shape_of(m, "s") == ["N", 4, "floor((H-1)/2)+1", "floor((W-1)/2)+1"]
    assert shape_of(m, "p")[2:] == ["floor(floor((H-1)/2)/2)+1", "floor(floor((W-1)/2)/2)+1"]


def test_ceil_mode_and_unknown_kernels_stay_unknown():
    m, _ = run_pass("infer_shapes", _window_model("MaxPool <kernel_shape = [3, 3], strides = [2, 2], ceil_mode = 1>",
                                                  None))
    assert all(unknown(d) for d in shape_of(m, "t")[2:])
    m, _ = run_pass("infer_shapes", "g (float[N,3,H,W] x, float[4,3,K,K] w) => (float[?,?,?,?] y) {"
                                    "t = Conv <strides = [2, 2]> (x, w)  y = Relu (t) }")
    shape = shape_of(m, "t")  # a weight of unknown size: no kernel, no spatial dims
    assert shape is None or all(unknown(d) for d in shape[2:])


SEQ2SEQ = """g (float[batch,src,8] x, float[batch,tgt,8] t) => (float[enc_dim_0,enc_dim_1,8] enc, float[batch,tgt,src] y)
        <float[8,8] w = {""" + ", ".join(["0.1"] * 64) + """}> {
    enc = Relu(x)
    k = MatMul(enc, w)
    kt = Transpose <perm = [0, 2, 1]> (k)
    y = MatMul(t, kt)
}"""


def test_an_outputs_own_name_for_a_dim_is_the_symbol_it_is_computed_as():
    """A full seq2seq export returns the encoder's states under names of
    their own (torch: LayerNormalizationout1_dim_0): the cross-attention's
    keys read them as batch and src again (rule 8); the output keeps its
    declared names, and inferring again changes nothing."""
    m, r = run_pass("infer_shapes", SEQ2SEQ)
    assert shape_of(m, "k") == ["batch", "src", 8] and shape_of(m, "kt") == ["batch", 8, "src"]
    assert shape_of(m, "enc") == ["enc_dim_0", "enc_dim_1", 8]
    assert pyonnxopt.shapes.infer(m) == {"values_typed": 0}


def test_an_output_name_computed_two_ways_or_an_inputs_symbol_is_no_alias():
    # d0 is batch in enc and src in u: neither.
    text = SEQ2SEQ.replace("float[batch,tgt,src] y)", "float[batch,tgt,src] y, float[d0,batch,8] u)").replace(
        "y = MatMul(t, kt)", "y = MatMul(t, kt)  u = Transpose <perm = [1, 0, 2]> (enc)").replace(
        "float[enc_dim_0,enc_dim_1,8] enc", "float[d0,enc_dim_1,8] enc")
    m, r = run_pass("infer_shapes", text)
    assert shape_of(m, "k") == ["d0", "src", 8]
    # tgt names an input's dim: a declaration that contradicts the graph is left as it is.
    m, r = run_pass("infer_shapes", SEQ2SEQ.replace("float[enc_dim_0,enc_dim_1,8] enc", "float[batch,tgt,8] enc"))
    assert shape_of(m, "k")[1] == "tgt"


def test_generated_names_take_part_in_the_arithmetic():
    """Rule 9: a UNet's [B, C, H, W] flattened to positions has a length
    onnx cannot name (H*W): its unk__ name splits into heads and comes back
    the same, and a fresh name onnx gave the split's output links to it."""
    m, r = run_pass("infer_shapes", """g (float[B,32,H,W] x) => (float[B,4,P,8] y) <int64[3] flat = {0, 32, -1},
            int64[4] heads = {0, -1, 4, 8}> {
        f = Reshape(x, flat)
        t = Transpose <perm = [0, 2, 1]> (f)
        h = Reshape(t, heads)
        y = Transpose <perm = [0, 2, 1, 3]> (h)
    }""")
    positions = shape_of(m, "t")[1]
    assert unknown(positions) and positions  # a generated name, not empty
    assert shape_of(m, "h") == ["B", positions, 4, 8]



def test_a_generated_dim_read_from_a_shape_compares_with_ints():
    """The mask expansion's Where(Equal(shape, -1), 1, shape) on a shape
    with a generated name in it: a dim is never -1 (it once raised here,
    and the whole inference was dropped)."""
    m, r = run_pass("infer_shapes", """g (float[N,M,4] x) => (float y) <int64[2] flat = {0, -1},
            int64[2] minus = {-1, -1}, int64[2] ones = {1, 1}> {
        f = Reshape(x, flat)
        s = Shape(f)
        e = Equal(s, minus)
        w = Where(e, ones, s)
        z = ConstantOfShape(w)
        y = ReduceSum <keepdims = 0> (z)
    }""")
    assert "failed" not in r.stats
    assert shape_of(m, "z") == shape_of(m, "f") and shape_of(m, "z")[0] == "N"


def test_windows_of_generated_names_a_graph_input_declares():
    """tf2onnx declares unknown input dims as unk__N: they are the model's
    own names, so a strided Conv's output dim is named from them (and a
    ResNet block's 1x1 shortcut gets the same name as its 3x3 path)."""
    m, _ = run_pass("infer_shapes", """g (float[unk__1,8,unk__2,unk__3] x) => (float y) <float[8,8,3,3] w3 = {...},
            float[8,8,1,1] w1 = {...}> {
        a = Conv <strides = [2, 2], pads = [1, 1, 1, 1]> (x, w3)
        b = Conv <strides = [2, 2]> (x, w1)
        c = Add(a, b)
        y = ReduceSum <keepdims = 0> (c)
    }""".replace("{...}", "{" + ",".join(["0.1"] * 576) + "}", 1).replace("{...}", "{" + ",".join(["0.1"] * 64) + "}"))
    a, b = shape_of(m, "a"), shape_of(m, "b")
    assert a == b == ["unk__1", 8, "floor((unk__2-1)/2)+1", "floor((unk__3-1)/2)+1"]


def test_generated_names_linked_both_ways_make_no_cycle():
    # An If branch's outputs, inferred afresh, can name a value's two dims the
    # other way round (optimum's merged GPT-2): linking unk__1 -> unk__2 and then
    # unk__2 -> unk__1 looped forever.
    walk = symbolic_shapes._Walk(onnx.helper.make_graph([], "g", [], []))
    walk.dims["v"] = ["unk__1", "unk__2"]
    walk._merge("v", ["unk__2", "unk__1"], {})
    assert walk.linked("unk__1") == walk.linked("unk__2")


# x's and z's first two dims (bx, bz) and the product of x's (n)
LEADING_DIMS = """sx = Shape(x)  sz = Shape(z)  lead = Constant <value = int64[2] {0, 1}> ()
        bx = Gather(sx, lead)  bz = Gather(sz, lead)  n = ReduceProd(bx)"""


def test_tf2onnx_flattened_batch_dims_reduce_prod_and_max():
    # tf2onnx's einsum lowering: Reshape(x, [ReduceProd(shape[:2]), -1, 16]) with the
    # batch dims broadcast as Max(shape_a[:2], shape_b[:2])
    m, _ = run_pass("infer_shapes", f"""g (float[B,4,8,16] x, float[B,4,8,16] z) => (float[B,4,8,16] y) {{
        {LEADING_DIMS}
        rest = Constant <value = int64[2] {{-1, 16}}> ()
        flat = Concat <axis = 0> (n, rest)
        f = Reshape(x, flat)
        b = Max(bx, bz)
        tail = Constant <value = int64[2] {{8, 16}}> ()
        back = Concat <axis = 0> (b, tail)
        y = Reshape(f, back)
    }}""")
    assert shape_of(m, "f")[1:] == [8, 16]  # 4*B first: no name for it, but -1 is worked out
    assert shape_of(m, "y") == ["B", 4, 8, 16]


def test_a_product_of_two_symbols_or_a_max_of_different_ones_stays_unknown():
    m, _ = run_pass("infer_shapes", f"""g (float[B,S,16] x, float[C,S,16] z) => (float y, float w) {{
        {LEADING_DIMS}
        rest = Constant <value = int64[1] {{-1}}> ()
        flat = Concat <axis = 0> (n, rest)
        f = Reshape(x, flat)
        y = ReduceSum <keepdims = 0> (f)
        b = Max(bx, bz)
        e = ConstantOfShape(b)
        w = ReduceSum <keepdims = 0> (e)
    }}""", full_check=False)
    assert unknown(shape_of(m, "f")[0]) and unknown(shape_of(m, "e")[0]) and shape_of(m, "e")[1] == "S"
