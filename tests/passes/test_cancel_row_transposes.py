"""cancel_row_transposes: structure, numbers at several batch sizes, refusals."""

import numpy as np
import pytest

import onnx

from helpers import ops, outputs, parse
from transformer_helpers import fuse

# nn.MultiheadAttention's output projection with a dynamic batch: [S, B, E] rows
# through a Gemm, back to batch-first.
PROJECTION = """g (float[B,5,8] x) => (float[B,5,6] y) <float[6,8] w = {%s}, float[6] c = {1, 2, 3, 4, 5, 6},
        int64[2] flat = {-1, 8}, int64[3] back = {5, -1, 6}> {
    t = Transpose <perm = [1, 0, 2]> (x)
    f = Reshape(t, flat)
    g = Gemm <transB = 1> (f, w, c)
    u = Reshape(g, back)
    y = Transpose <perm = [1, 0, 2]> (u)
}""" % ", ".join(str(0.1 * i) for i in range(48))


def run(text, **options):
    """(original, Model, PassResult): the rule once, after infer_shapes."""
    m, r, before = fuse("cancel_row_transposes", text, opset=17, **options)
    return before, m, r


def same(before, m, shapes):
    rng = np.random.default_rng(0)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        for want, got in zip(outputs(before, {"x": x}), outputs(m, {"x": x})):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_both_transposes_go_and_the_rows_stay_in_a_gemm():
    before, m, r = run(PROJECTION)
    assert ops(m) == ["Reshape", "Gemm", "Reshape"] and m.graph.nodes[0].inputs[0].name == "x"
    assert m.graph.nodes[-1].inputs[1].initializer.numpy().tolist() == [-1, 5, 6]
    assert m.graph.nodes[1].attributes["transB"] == 1 and m.graph.nodes[-1].outputs[0].name == "y"
    same(before, m, [(1, 5, 8), (3, 5, 8)])


def test_matmul_rows():
    before, m, r = run("""g (float[2,B,4] x) => (float[2,B,3] y) <float[4,3] w = {1,2,3,4,5,6,7,8,9,10,11,12},
            int64[2] flat = {-1, 4}, int64[3] back = {-1, 2, 3}> {
        t = Transpose <perm = [1, 0, 2]> (x)
        f = Reshape(t, flat)
        g = MatMul(f, w)
        u = Reshape(g, back)
        y = Transpose <perm = [1, 0, 2]> (u)
    }""")
    assert ops(m) == ["Reshape", "MatMul", "Reshape"]
    assert m.graph.nodes[-1].inputs[1].initializer.numpy().tolist() == [2, -1, 3]
    same(before, m, [(2, 1, 4), (2, 5, 4)])


@pytest.mark.parametrize("change, why", [
    (("perm = [1, 0, 2]> (u)", "perm = [0, 1, 2]> (u)"), "moves nothing"),
    (("perm = [1, 0, 2]> (u)", "perm = [2, 0, 1]> (u)"), "moves the last axis"),
    (("Gemm <transB = 1>", "Gemm <transA = 1, transB = 1>"), "transposes its first input"),
    (("int64[3] back = {5, -1, 6}", "int64[3] back = {-1, 5, 6}"), "does not provably give back the rows' dims"),
    (("float[6] c = {1, 2, 3, 4, 5, 6}", "float[5,6] c = {%s}" % ", ".join(["1"] * 30)), "may differ from row to row"),
])
def test_refusals(change, why):
    text = PROJECTION.replace(*change)
    if "float[5,6] c" in text:  # a per-row C needs a fixed row count
        text = text.replace("float[B,5,8] x) => (float[B,5,6] y)", "float[1,5,8] x) => (float[1,5,6] y)")
    before, m, r = run(text, full_check=False)  # transA makes the example's shapes wrong: only the rule reads it
    assert not r.modified and any(why in x for x in r.stats["near_misses"]), r.stats["near_misses"]


TWO_UNKNOWN = """g (float[B,S,8] x) => (float[B,S,6] y) <float[6,8] w = {%s}, int64[2] flat = {-1, 8},
        int64[2] lead = {1, 0}, int64[1] six = {6}, float[1] c = {0.25}> {
    t = Transpose <perm = [1, 0, 2]> (x)
    f = Reshape(t, flat)
    g = Gemm <transB = 1> (f, w, c)
    st = Shape(x)
    sb = Gather(st, lead)
    back = Concat <axis = 0> (sb, six)
    u = Reshape(g, back)
    y = Transpose <perm = [1, 0, 2]> (u)
}""" % ", ".join(["0.5"] * 48)


def two_unknown(opset: int):
    """TWO_UNKNOWN at `opset`, u's dims stated (onnx infers them from opset 15 on)."""
    proto = parse(TWO_UNKNOWN, opset)
    proto.graph.value_info.append(onnx.helper.make_tensor_value_info("u", onnx.TensorProto.FLOAT, ["S", "B", 6]))
    return proto


@pytest.mark.parametrize("opset, reads", [(17, ["Shape", "Concat"]), (13, ["Shape", "Slice", "Concat"])])
def test_two_unknown_leading_dims_are_read_at_run_time(opset, reads):
    m, r, before = fuse("cancel_row_transposes", two_unknown(opset), opset=opset)
    kept = [op for op in ops(m) if op not in ("Shape", "Gather", "Concat", "Slice")][-3:]
    assert r.modified and kept == ["Reshape", "Gemm", "Reshape"] and "Transpose" not in ops(m)
    made = [n.op_type for n in m.graph.nodes if n.outputs[0].name.startswith("rows_")]
    assert made == reads
    same(before, m, [(1, 1, 8), (2, 5, 8), (3, 2, 8)])


def test_two_unknown_leading_dims_as_wide_as_the_result_are_its_shape():
    text = TWO_UNKNOWN.replace("float[B,S,6] y", "float[B,S,8] y").replace("float[6,8] w", "float[8,8] w").replace(
        "{6}", "{8}").replace(", ".join(["0.5"] * 48), ", ".join(["0.5"] * 64))
    m, r, before = fuse("cancel_row_transposes", text, opset=17)
    made = [(n.op_type, n.inputs[0].name) for n in m.graph.nodes if n.outputs[0].name.startswith("rows_")]
    assert r.modified and made == [("Shape", "x")]
    same(before, m, [(2, 5, 8)])


def test_two_unknown_leading_dims_below_opset_10_refuse():
    m, r, _ = fuse("cancel_row_transposes", two_unknown(9), opset=9)
    assert not r.modified
    assert any("reading them needs opset 10" in x for x in r.stats["near_misses"]), r.stats["near_misses"]


def test_heads_merged_sequence_first_keep_one_transpose_to_batch_first():
    # nn.MultiheadAttention with a dynamic batch: heads [B, h, S, d] merged
    # as [S, B, h*d], projected, back to [B, S, E]. [B, S, h, d] is one
    # Transpose of the heads; the rows then come out batch-first.
    before, m, r = run("""g (float[B,2,5,4] x) => (float[B,5,6] y) <float[6,8] w = {%s}, float[6] c = {1, 2, 3, 4, 5, 6},
            int64[2] flat = {-1, 8}, int64[3] back = {5, -1, 6}> {
        t = Transpose <perm = [2, 0, 1, 3]> (x)
        f = Reshape(t, flat)
        g = Gemm <transB = 1> (f, w, c)
        u = Reshape(g, back)
        y = Transpose <perm = [1, 0, 2]> (u)
    }""" % ", ".join(str(0.1 * i) for i in range(48)))
    assert ops(m) == ["Transpose", "Reshape", "Gemm", "Reshape"]
    assert m.graph.nodes[0].attributes["perm"] == [0, 2, 1, 3]
    assert m.graph.nodes[-1].inputs[1].initializer.numpy().tolist() == [-1, 5, 6]
    same(before, m, [(1, 2, 5, 4), (3, 2, 5, 4)])


def test_a_first_transpose_moving_the_columns_keeps_them():
    before, m, r = run("""g (float[4,B,5] x) => (float[B,5,3] y) <float[4,3] w = {1,2,3,4,5,6,7,8,9,10,11,12},
            int64[2] flat = {-1, 4}, int64[3] back = {5, -1, 3}> {
        t = Transpose <perm = [2, 1, 0]> (x)
        f = Reshape(t, flat)
        g = MatMul(f, w)
        u = Reshape(g, back)
        y = Transpose <perm = [1, 0, 2]> (u)
    }""")
    assert ops(m) == ["Transpose", "Reshape", "MatMul", "Reshape"]
    assert m.graph.nodes[0].attributes["perm"] == [1, 2, 0]
    same(before, m, [(4, 1, 5), (4, 3, 5)])
