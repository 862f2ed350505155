"""slices_to_split: tiling Slices -> one Split; a Slice of a split last
axis's leading factor -> a Slice of the axis; refusals; numbers; torch's
dynamo export of timm's packed attention."""

import numpy as np
import pytest

from helpers import ops, outputs, parse, random_feeds, run_pass, structure


def run(text, opset=17):
    model = parse(text, opset)
    m, r = run_pass("slices_to_split", model)
    for want, got in zip(outputs(model, random_feeds(model)), outputs(m, random_feeds(model))):
        np.testing.assert_array_equal(got, want)
    return m, r


# torch's dynamo export of timm's qkv.reshape(B, N, 3, H, D).unbind(2), here H=2, D=4
PACKED = """g (float[B,5,24] x) => (float[B,5,8] q, float[B,5,8] k, float[B,5,8] v)
        <int64[5] heads = {0, 5, 3, 2, 4}, int64[3] merged = {0, 5, 8}, int64[1] zero = {0}, int64[1] one = {1},
         int64[1] two = {2}, int64[1] three = {3}, float[B,5,3,2,4] h> {
    h = Reshape(x, heads)
    pq = Slice(h, zero, one, two)
    pk = Slice(h, one, two, two)
    pv = Slice(h, two, three, two)
    q = Reshape(pq, merged)
    k = Reshape(pk, merged)
    v = Reshape(pv, merged)
}"""


def test_the_packed_heads_of_a_dynamo_export_become_one_split():
    m, r = run(PACKED)
    assert ops(m) == ["Split"] and m.graph.nodes[0].inputs[0].name == "x"
    assert [o.name for o in m.graph.nodes[0].outputs] == ["q", "k", "v"]
    assert m.graph.nodes[0].attributes["axis"] == 2
    assert [w["what"] for w in r.stats["rewrites"]] == ["slice of a split axis"] * 3 + ["slices into a split"]


def test_slices_tiling_an_axis_become_a_split_at_each_opset():
    text = """g (float[4,10] x) => (float[4,3] a, float[4,5] b, float[4,2] c, float[4,10] y)
            <int64[1] s0 = {0}, int64[1] s3 = {3}, int64[1] s8 = {-2}, int64[1] big = {100}, int64[1] ax = {-1}> {
        b = Slice(x, s3, s8, ax)
        a = Slice(x, s0, s3, ax)
        c = Slice(x, s8, big, ax)
        y = Relu(x)
    }"""
    for opset in (11, 13, 18):
        m, r = run(text, opset)
        split = m.graph.nodes[0]
        assert ops(m) == ["Split", "Relu"] and [o.name for o in split.outputs] == ["a", "b", "c"]
        sizes = split.attributes.get("split") if opset < 13 else split.inputs[1].initializer.numpy().tolist()
        assert list(sizes) == [3, 5, 2] and r.stats["nodes_removed"] == 3 and r.stats["nodes_added"] == 1


@pytest.mark.parametrize("body", [
    # a gap: [0, 3) and [4, 10)
    "a = Slice(x, s0, s3, ax)  b = Slice(x, s4, s10, ax)",
    # an overlap
    "a = Slice(x, s0, s4, ax)  b = Slice(x, s3, s10, ax)",
    # a step of 2
    "a = Slice(x, s0, s4, ax, two)  b = Slice(x, s4, s10, ax)",
    # two axes
    "a = Slice(x, s0, s3, zero)  b = Slice(x, s3, s10, ax)",
])
def test_slices_that_do_not_tile_one_axis_stay(body):
    text = f"""g (float[4,10] x) => (float[?,?] a, float[?,?] b) <int64[1] s0 = {{0}}, int64[1] s3 = {{3}},
            int64[1] s4 = {{4}}, int64[1] s10 = {{10}}, int64[1] ax = {{1}}, int64[1] zero = {{0}},
            int64[1] two = {{2}}> {{
        {body}
    }}"""
    m, r = run(text)
    assert ops(m) == ["Slice", "Slice"] and not r.modified


def test_a_reshape_that_moves_leading_dims_is_not_read_as_a_split_axis():
    # [B, 5, 24] -> [B, 15, 2, 4]: the 5 rows are split too, so a part of
    # axis 2 is no run of x's last axis.
    text = """g (float[2,5,24] x) => (float[2,15,4] y) <int64[4] heads = {2, 15, 2, 4}, int64[3] merged = {2, 15, 4},
            int64[1] zero = {0}, int64[1] one = {1}, int64[1] two = {2}, float[2,15,2,4] h> {
        h = Reshape(x, heads)
        p = Slice(h, zero, one, two)
        y = Reshape(p, merged)
    }"""
    m, r = run(text)
    assert ops(m) == ["Reshape", "Slice", "Reshape"] and not r.modified


def test_a_split_axis_read_elsewhere_keeps_its_reshape():
    text = PACKED.replace("float[B,5,8] v)", "float[B,5,8] v, float[B,5,3,2,4] hh)").replace(
        "v = Reshape(pv, merged)", "v = Reshape(pv, merged)  hh = Neg(h)")
    m, r = run(text)
    assert structure(m)[0] == ("Reshape", ["x", "heads"], ["h"])
    assert ops(m) == ["Reshape", "Split", "Neg"]


def test_the_dynamo_export_of_a_timm_vit_loses_seven_nodes_a_layer():
    torch = pytest.importorskip("torch")
    import io

    import onnx

    import pyonnxopt

    class Attention(torch.nn.Module):  # timm's
        def __init__(self, dim=32, heads=4):
            super().__init__()
            self.heads, self.qkv, self.proj = heads, torch.nn.Linear(dim, dim * 3), torch.nn.Linear(dim, dim)

        def forward(self, x):
            b, n, c = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            return self.proj(y.transpose(1, 2).reshape(b, n, c))

    buf = io.BytesIO()
    torch.onnx.export(Attention().eval(), (torch.randn(2, 7, 32),), buf, dynamo=True, opset_version=18,
                      dynamic_shapes=({0: "batch"},), verbose=False)
    model, report = pyonnxopt.optimize(onnx.load_from_string(buf.getvalue()), opset=23)
    assert report["check"]["first_mismatch"] is None
    assert "Slice" not in [n.op_type for n in model.graph.nodes], [n.op_type for n in model.graph.nodes]
