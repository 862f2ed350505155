"""flatten_linear_rows: a row-wise region around 3-D MatMul + bias runs on
[rows, width], each Linear one Gemm; graphs out checked node by node, and
outputs against the original in onnxruntime (float32, 1e-5), at several
sizes where the rows are symbolic."""

import numpy as np
import onnx
import pytest

import pyonnxopt
from pyonnxopt.passes import PassOptions, get

from fusion_helpers import rng_weights, with_weights
from helpers import outputs, structure

PASS = "flatten_linear_rows"


def flattened(proto, modified=True):
    """(Model, PassResult): shapes inferred, the pass run once, the IR and
    onnx's full check passed."""
    m = pyonnxopt.load(proto)
    get("infer_shapes").run(m)
    r = get(PASS).run(m, PassOptions())
    assert r.modified == modified, r.stats["refused"]
    assert m.check_invariants() == []
    onnx.checker.check_model(m.to_onnx(), full_check=True)
    return m, r


def assert_same(proto, m, **shapes):
    """Equal outputs (value and shape) on seeded inputs; `shapes` fix the
    graph inputs' sizes (default: as declared)."""
    rng = np.random.default_rng(0)
    given = {t.name for t in proto.graph.initializer}
    feeds = {}
    for i in proto.graph.input:
        if i.name not in given:
            shape = shapes.get(i.name) or [d.dim_value for d in i.type.tensor_type.shape.dim]
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    for want, have in zip(outputs(proto, feeds), outputs(m, feeds)):
        assert have.shape == want.shape
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)


def test_mlp_block_runs_on_rows_with_one_reshape_in_and_one_out():
    """Linear -> Relu -> Linear -> Relu -> Linear, a residual Add and a
    LayerNormalization: three Gemms for two Reshapes."""
    proto = with_weights("""g (float[2,4,8] x) => (float[2,4,8] y) {
        h = MatMul (x, w1)   hb = Add (h, b1)   r = Relu (hb)
        i = MatMul (r, w2)   ib = Add (i, b2)   q = Relu (ib)
        o = MatMul (q, w3)   ob = Add (b3, o)   s = Add (ob, x)
        y = LayerNormalization <axis = -1> (s, gamma, beta)
    }""", **rng_weights(w1=(8, 16), b1=(16,), w2=(16, 16), b2=(16,), w3=(16, 8), b3=(8,), gamma=(8,), beta=(8,)))
    m, r = flattened(proto)
    shapes = [n.inputs[1].name for n in m.graph.nodes if n.op_type == "Reshape"]
    assert structure(m) == [
        ("Reshape", ["x", shapes[0]], ["x_rows"]),
        ("Gemm", ["x_rows", "w1", "b1"], ["hb"]),
        ("Relu", ["hb"], ["r"]),
        ("Gemm", ["r", "w2", "b2"], ["ib"]),
        ("Relu", ["ib"], ["q"]),
        ("Gemm", ["q", "w3", "b3"], ["ob"]),
        ("Add", ["ob", "x_rows"], ["s"]),
        ("LayerNormalization", ["s", "gamma", "beta"], ["y_rows"]),
        ("Reshape", ["y_rows", shapes[1]], ["y"]),
    ]
    assert [m.graph.value(s).initializer.numpy().tolist() for s in shapes] == [[-1, 8], [2, 4, 8]]
    assert m.graph.value("hb").type["shape"] == [8, 16]
    assert m.graph.outputs[0].name == "y" and m.graph.outputs[0].type["shape"] == [2, 4, 8]
    assert r.stats["nodes_removed"] == 6 and r.stats["nodes_added"] == 5
    assert r.stats["rewrites"][0]["consumed"] == ["h", "i", "o"]
    assert_same(proto, m)


def test_head_split_reads_rows_and_its_zeros_become_the_row_dims():
    """The Reshape after a projection takes the 2-D value as it is; a 0
    (copy that dim) is written out, because the dim is no longer there."""
    proto = with_weights("""g (float[2,4,2,4] heads) => (float[2,4,2,4] q, float[2,4,2,4] k) {
        x = Reshape (heads, merge)
        a = MatMul (x, wq)   qb = Add (a, bq)   q = Reshape (qb, split0)
        c = MatMul (x, wk)   kb = Add (c, bk)   k = Reshape (kb, split)
    }""", merge=np.array([2, 4, 8]), split0=np.array([0, 0, 2, 4]), split=np.array([2, 4, -1, 4]),
        **rng_weights(wq=(8, 8), bq=(8,), wk=(8, 8), bk=(8,)))
    m, _ = flattened(proto)
    assert [n.op_type for n in m.graph.nodes] == ["Reshape", "Gemm", "Reshape", "Gemm", "Reshape"]
    targets = [n.inputs[1].initializer.numpy().tolist() for n in m.graph.nodes if n.op_type == "Reshape"]
    assert targets == [[-1, 8], [2, 4, 2, 4], [2, 4, -1, 4]]  # the merge Reshape retargeted: no node added
    assert_same(proto, m)


@pytest.mark.parametrize("opset", [17, 13])
def test_symbolic_rows_are_read_back_with_one_shape_node(opset):
    """Seven Linears for a Reshape in, one out, the output's shape read off
    the input, and Shape(start, end) + Concat for the head split's 0s
    (below opset 15, Shape has no start and end: Shape + Slice)."""
    chain = "   ".join(f"a{i} = MatMul (r{i - 1}, w)  b{i} = Add (a{i}, b)  r{i} = Relu (b{i})" for i in range(1, 7))
    proto = with_weights(f"""g (float[N,T,8] r0) => (float[N,T,2,4] q, float[N,T,8] y) {{
        {chain}
        a = MatMul (r6, w)   qb = Add (a, b)   q = Reshape (qb, split)
        y = Identity (r2)
    }}""", opset, split=np.array([0, 0, 2, 4]), **rng_weights(w=(8, 8), b=(8,)))
    m, r = flattened(proto)
    ops = [n.op_type for n in m.graph.nodes]
    assert ops.count("Gemm") == 7 and ops.count("Shape") == 2 and ops.count("Concat") == 1
    assert ops.count("Reshape") == 3 and ops.count("Slice") == (opset < 15)
    assert r.stats["nodes_added"] == 7 + 5 + (opset < 15)
    shapes = [(n.inputs[0].name, n.attributes) for n in m.graph.nodes if n.op_type == "Shape"]
    rows = {} if opset < 15 else {"start": 0, "end": 2}
    assert sorted(shapes, key=lambda s: len(s[1])) == [("r0", {}), ("r0", rows)]
    for n, t in ((1, 1), (3, 5), (2, 7)):
        assert_same(proto, m, r0=[n, t, 8])


def test_positive_axes_become_last_and_broadcast_constants_lose_their_leading_ones():
    """A LayerNorm written out (ReduceMean over axis 2, opset 17 attribute
    and opset 18 input), a [1, 1, 8] scale and a Softmax over axis 2."""
    for opset, reduce in ((17, "ReduceMean <axes = [2]> (x)"), (18, "ReduceMean (x, axes)")):
        proto = with_weights(f"""g (float[2,3,8] x) => (float[2,3,8] y) {{
            mu = {reduce}   d = Sub (x, mu)   s = Mul (d, scale)
            h = MatMul (s, w)   hb = Add (h, b)   u = MatMul (hb, w)   ub = Add (u, b)
            v = MatMul (ub, w)   vb = Add (v, b)   y = Softmax <axis = 2> (vb)
        }}""", opset, axes=np.array([2]), scale=np.full((1, 1, 8), 0.5, np.float32),
            **rng_weights(w=(8, 8), b=(8,)))
        m, _ = flattened(proto)
        nodes = {n.op_type: n for n in m.graph.nodes}
        axes = nodes["ReduceMean"].attributes.get("axes") or nodes["ReduceMean"].inputs[1].initializer.numpy().tolist()
        assert list(axes) == [-1] and nodes["Softmax"].attributes["axis"] == -1
        assert nodes["Mul"].inputs[1].initializer.dims == [8]
        assert_same(proto, m)


def test_a_row_dependent_constant_ends_the_region():
    """[1, 3, 8] added to [2, 3, 8] differs by row: that Add stays 3-D and
    the region starts after it."""
    proto = with_weights("""g (float[2,3,8] x) => (float[2,3,8] y) {
        p = Add (x, pos)
        h = MatMul (p, w1)   hb = Add (h, b1)   r = Relu (hb)
        o = MatMul (r, w2)   ob = Add (o, b2)   t = MatMul (ob, w2)   y = Add (t, b2)
    }""", **rng_weights(pos=(1, 3, 8), w1=(8, 8), b1=(8,), w2=(8, 8), b2=(8,)))
    m, _ = flattened(proto)
    assert [n.op_type for n in m.graph.nodes] == ["Add", "Reshape", "Gemm", "Relu", "Gemm", "Gemm", "Reshape"]
    assert m.graph.nodes[0].inputs[0].name == "x"
    assert_same(proto, m)


def test_refused_when_the_reshapes_cost_what_the_gemms_save():
    proto = with_weights("""g (float[2,3,8] x) => (float[2,3,8] y) { h = MatMul (x, w)  y = Add (h, b) }""",
                         **rng_weights(w=(8, 8), b=(8,)))
    m, r = flattened(proto, modified=False)
    assert [n.op_type for n in m.graph.nodes] == ["MatMul", "Add"]
    assert r.stats["refused"] == ["the region at 'MatMul->h' (2 nodes): 1 Gemm and 0 Reshapes made no-ops would "
                                  "take 2 Reshapes and shape nodes"]


@pytest.mark.parametrize("batch", ["2", "N"])
def test_gpt2_gemm_sandwiches_lose_their_reshapes(batch):
    """GPT-2 writes each Linear as Reshape [-1, K] -> Gemm -> Reshape [B, S,
    N]; the rows' ops between (a norm, an activation, the residual Add) then
    run on [B*S, K] and those Reshapes have nothing left to do."""
    proto = with_weights(f"""g (float[{batch},3,8] x) => (float[{batch},3,8] y) {{
        n = LayerNormalization <axis = -1> (x, gamma, beta)
        f = Reshape (n, flat8)   h = Gemm (f, w1, b1)   s = Shape <start = 0, end = 2> (x)
        t16 = Concat <axis = 0> (s, c16)   h3 = Reshape (h, t16)   g = Relu (h3)
        f2 = Reshape (g, flat16)   o = Gemm (f2, w2, b2)   t8 = Concat <axis = 0> (s, c8)
        o3 = Reshape (o, t8)   y = Add (o3, x)
    }}""", flat8=np.array([-1, 8]), flat16=np.array([-1, 16]), c16=np.array([16]), c8=np.array([8]),
        **rng_weights(gamma=(8,), beta=(8,), w1=(8, 16), b1=(16,), w2=(16, 8), b2=(8,)))
    m, r = flattened(proto)
    for name in ("eliminate_nop", "eliminate_dead_code"):
        get(name).run(m, PassOptions())
    ops = [n.op_type for n in m.graph.nodes]
    assert ops.count("Gemm") == 2 and ops.count("Reshape") == 2, ops  # x in, y out
    for n in (1, 4):
        assert_same(proto, m, x=[n if batch == "N" else 2, 3, 8])


@pytest.mark.parametrize("why, text", [
    ("a residual, not a bias", "h = MatMul (x, w)  a = Add (h, x)  b2 = MatMul (a, w)  y = Add (b2, x)"),
    ("integers", None),
])
def test_no_gemm_without_a_float_bias(why, text):
    if text is None:
        proto = with_weights("""g (int32[2,3,8] x) => (int32[2,3,8] y) {
            h = MatMul (x, w)  a = Add (h, b)  h2 = MatMul (a, w)  y = Add (h2, b) }""",
                             w=np.ones((8, 8), np.int32), b=np.ones(8, np.int32))
    else:
        proto = with_weights(f"g (float[2,3,8] x) => (float[2,3,8] y) {{ {text} }}", **rng_weights(w=(8, 8)))
    _, r = flattened(proto, modified=False)
    assert r.stats["refused"] == [], why  # no Linear with a bias: nothing to say


def test_a_value_read_inside_a_subgraph_stays_as_it_is():
    proto = with_weights("""g (float[2,3,8] x, bool c) => (float[2,3,8] y, float[2,3,8] z) {
        h = MatMul (x, w1)   hb = Add (h, b1)   r = Relu (hb)
        o = MatMul (r, w2)   ob = Add (o, b2)   p = Relu (ob)
        q = MatMul (p, w3)   qb = Add (q, b3)   t = MatMul (qb, w3)   y = Add (t, b3)
        z = If (c) <then_branch = t () => (float[2,3,8] zt) { zt = Identity (hb) },
                    else_branch = e () => (float[2,3,8] ze) { ze = Neg (hb) }>
    }""", **rng_weights(w1=(8, 8), b1=(8,), w2=(8, 8), b2=(8,), w3=(8, 8), b3=(8,)))
    m, _ = flattened(proto)
    ops = [n.op_type for n in m.graph.nodes]
    assert ops.count("Gemm") == 3 and ops.count("MatMul") == 1  # hb stays 3-D: its Linear too
    assert m.graph.value("hb").type["shape"] == [2, 3, 8]
    rng = np.random.default_rng(1)
    for c in (True, False):
        feeds = {"x": rng.standard_normal((2, 3, 8)).astype(np.float32), "c": np.array(c)}
        for want, have in zip(outputs(proto, feeds), outputs(m, feeds)):
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)


def test_default_pipeline_on_a_torch_feed_forward_stack():
    """Two post-norm feed-forward blocks (Linear, GELU, Linear, residual,
    LayerNorm) exported by torch with random biases and dynamic batch and
    sequence: every Linear becomes a Gemm, the outputs stay the same."""
    torch = pytest.importorskip("torch")
    from transformer_helpers import export

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down, self.norm = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16), torch.nn.LayerNorm(16)

        def forward(self, x):
            return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))

    torch.manual_seed(0)
    proto = export(torch.nn.Sequential(Block(), Block()), (torch.randn(2, 5, 16),), 17, input_names=["x"],
                   output_names=["y"], dynamic_axes={"x": {0: "batch", 1: "seq"}})
    m, report = pyonnxopt.optimize(proto)
    ops = [n.op_type for n in m.graph.nodes]
    assert ops.count("Gemm") == 4 and "MatMul" not in ops
    assert PASS in [r["name"] for r in report["passes"] if r["modified"]]
    for shape in ((1, 3, 16), (3, 7, 16)):
        assert_same(proto, m, x=list(shape))


def test_an_initializer_holding_the_rows_enters_typed():
    """Batch 1: a position embedding [1, 3, 8] has the rows [1, 3] itself;
    it enters through a Reshape whose output has its element type."""
    proto = with_weights("""g (float[1,3,8] x) => (float[1,3,8] y) {
        p = Add (x, pos)
        h = MatMul (p, w)   hb = Add (h, b)   u = MatMul (hb, w)   ub = Add (u, b)
        v = MatMul (ub, w)   vb = Add (v, b)   t = MatMul (vb, w)   y = Add (t, b)
    }""", **rng_weights(pos=(1, 3, 8), w=(8, 8), b=(8,)))
    m, _ = flattened(proto)
    entry = next(n for n in m.graph.nodes if n.op_type == "Reshape" and n.inputs[0].name == "pos")
    assert entry.outputs[0].type["elem_type"] == onnx.TensorProto.FLOAT
    assert_same(proto, m)


def test_a_graph_output_also_read_by_a_head_split_stays_in_order():
    """y is a graph output (put back after the region) and read by a
    Reshape that takes the rows: that Reshape keeps reading the rows, so
    no node reads y before it is defined."""
    chain = "   ".join(f"a{i} = MatMul (r{i - 1}, w)  b{i} = Add (a{i}, b)  r{i} = Relu (b{i})" for i in range(1, 7))
    proto = with_weights(f"""g (float[N,T,8] r0) => (float[N,T,8] y, float[N,T,2,4] y4) {{
        {chain}
        a = MatMul (r6, w)   y = Add (a, b)   y4 = Reshape (y, split)
    }}""", split=np.array([0, 0, 2, 4]), **rng_weights(w=(8, 8), b=(8,)))
    m, _ = flattened(proto)
    split = next(n for n in m.graph.nodes if n.outputs[0].name == "y4")
    assert split.inputs[0].type["shape"][1] == 8 and len(split.inputs[0].type["shape"]) == 2
    for n, t in ((1, 1), (3, 5)):
        assert_same(proto, m, r0=[n, t, 8])


def test_a_bias_that_widens_the_product_stays_an_add():
    """MatMul by [8, 1] plus a [8] bias broadcasts the product to 8 wide:
    Gemm's C may not widen, so that pair stays MatMul + Add (on rows)."""
    chain = "   ".join(f"a{i} = MatMul (r{i - 1}, w)  b{i} = Add (a{i}, b)  r{i} = Relu (b{i})" for i in range(1, 4))
    proto = with_weights(f"""g (float[2,3,8] r0) => (float[2,3,8] y) {{
        {chain}
        p = MatMul (r3, narrow)   y = Add (p, b)
    }}""", **rng_weights(w=(8, 8), b=(8,), narrow=(8, 1)))
    m, r = flattened(proto)
    assert [n.op_type for n in m.graph.nodes].count("Gemm") == 3 and r.stats["rewrites"][0]["consumed"][-1] == "a3"
    assert_same(proto, m)


def test_unread_extra_outputs_are_restated_on_rows():
    """LayerNormalization's Mean and InvStdDev, named but unread, with
    stated [2, 3, 1] shapes: they become [6, 1] with the node."""
    chain = "   ".join(f"a{i} = MatMul (r{i - 1}, w)  b{i} = Add (a{i}, b)  r{i} = Relu (b{i})" for i in range(1, 4))
    proto = with_weights(f"""g (float[2,3,8] r0) => (float[2,3,8] y) <float[2,3,1] mu, float[2,3,1] isd> {{
        {chain}
        y, mu, isd = LayerNormalization <axis = -1> (r3, s, t)
    }}""", **rng_weights(w=(8, 8), b=(8,), s=(8,), t=(8,)))
    m, _ = flattened(proto)
    assert m.graph.value("mu").type["shape"] == [6, 1] and m.graph.value("isd").type["shape"] == [6, 1]
    assert_same(proto, m)


def test_a_reshape_between_two_regions_takes_the_first_ones_rows():
    """w [2, 3, 8] (one region) -> Reshape [3, 2, 8] -> a second region:
    the Reshape reads the first region's rows with its own target, and the
    second region puts its own Reshape after it (retargeting it to
    [-1, 8] too would depend on which region goes first)."""
    linears = "   ".join(f"a{i} = MatMul (r{i - 1}, w)  b{i} = Add (a{i}, b)  r{i} = Relu (b{i})" for i in range(1, 3))
    after = "   ".join(f"c{i} = MatMul (s{i - 1}, w)  d{i} = Add (c{i}, b)  s{i} = Relu (d{i})" for i in range(1, 5))
    proto = with_weights(f"""g (float[2,3,8] r0) => (float[3,2,8] s4) {{
        {linears}
        s0 = Reshape (r2, swap)
        {after}
    }}""", swap=np.array([3, 2, 8]), **rng_weights(w=(8, 8), b=(8,)))
    m, r = flattened(proto)
    assert [n.op_type for n in m.graph.nodes].count("Gemm") == 6 and len(r.stats["rewrites"]) == 2
    swap = next(n for n in m.graph.nodes if n.outputs[0].name == "s0")
    assert swap.inputs[1].initializer.numpy().tolist() == [3, 2, 8]
    assert_same(proto, m)


def test_onnxruntime_row_wise_ops_join_the_region():
    """--target ort writes BiasGelu (a 1-D bias) and keeps the region going;
    SimplifiedLayerNormalization (RMS norm) normalizes each row alone. onnx
    infers neither: the fusions that write them give their outputs' types."""
    proto = with_weights("""g (float[2,4,8] x) => (float[2,4,8] y) <float[2,4,16] g, float[2,4,8] n> {
        h = MatMul (x, w1)   g = com.microsoft.BiasGelu (h, b1)
        o = MatMul (g, w2)   ob = Add (o, b2)   s = Add (ob, x)
        n = SimplifiedLayerNormalization <axis = -1, epsilon = 0.00001> (s, gamma)
        p = MatMul (n, w3)   pb = Add (p, b3)   t = Tanh (pb)
        q = MatMul (t, w4)   y = Add (q, b4)
    }""", **rng_weights(w1=(8, 16), b1=(16,), w2=(16, 8), b2=(8,), w3=(8, 8), b3=(8,), w4=(8, 8), b4=(8,),
                        gamma=(8,)))
    proto.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    m = pyonnxopt.load(proto)
    get("infer_shapes").run(m)
    r = get(PASS).run(m, PassOptions(target="ort"))
    assert r.modified, r.stats["refused"]
    assert [n.op_type for n in m.graph.nodes] == [
        "Reshape", "MatMul", "BiasGelu", "Gemm", "Add", "SimplifiedLayerNormalization", "Gemm", "Tanh", "Gemm",
        "Reshape"]
    assert m.check_invariants() == []
    assert_same(proto, m)


def test_rms_normalization_over_the_last_axis_is_row_wise():
    proto = with_weights("""g (float[2,4,8] x) => (float[2,4,8] y) {
        h = MatMul (x, w1)   hb = Add (h, b1)   n = RMSNormalization <axis = -1> (hb, gamma)
        o = MatMul (n, w2)   ob = Add (o, b2)   r = Relu (ob)
        p = MatMul (r, w3)   y = Add (p, b3)
    }""", opset=23, **rng_weights(w1=(8, 8), b1=(8,), gamma=(8,), w2=(8, 8), b2=(8,), w3=(8, 8), b3=(8,)))
    m, r = flattened(proto)
    assert [n.op_type for n in m.graph.nodes] == ["Reshape", "Gemm", "RMSNormalization", "Gemm", "Relu", "Gemm",
                                                  "Reshape"]
    assert_same(proto, m)
