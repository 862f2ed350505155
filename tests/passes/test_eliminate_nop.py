"""eliminate_nop: structure, numbers, refusals, idempotence."""

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import pyonnxopt
from pyonnxopt.passes import PassOptions, get

from helpers import ops, outputs, parse, run_pass, structure

INT64_MAX = 2**63 - 1


def run(model, opset=17, **options):
    return run_pass("eliminate_nop", parse(model, opset) if isinstance(model, str) else model, True, **options)


def reasons(result):
    return [x.split(": ", 1)[1] for x in result.stats["refused"]]


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


def test_flatten_of_a_matrix_at_axis_1_goes():
    # skl2onnx's KNN: Flatten of TopK's [N, k] indices
    m, r = run("""g (float[N,3] x) => (float[N,3] y, float[N,2] z, float[N,3] w) {
        a = Flatten <axis = 1> (x)
        b = Flatten <axis = -1> (a)
        y = Relu(b)
        c = Flatten <axis = 0> (x)
        z = Reshape(c, two)
        w = Flatten(x)
    }""".replace("{", "<int64[2] two = {-1, 2}> {", 1))
    assert structure(m) == [("Relu", ["x"], ["y"]), ("Flatten", ["x"], ["c"]), ("Reshape", ["c", "two"], ["z"]),
                            ("Flatten", ["x"], ["w"])]
    assert r.stats["nodes_removed"] == 2


def test_flatten_of_unknown_rank_is_refused():
    m, r = run("""g (float[2,3] x) => (float[2,3] y) {
        a = Relu(x)
        y = Flatten <axis = 1> (a)
    }""")
    assert ops(m) == ["Relu", "Flatten"] and reasons(r) == ["input rank unknown"]


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


# ---- Reduce over axes of size 1 ----

def test_reduce_over_size_one_axes_keeping_them_goes():
    # opset 17: ReduceMean's axes an attribute, ReduceSum's an input
    text = """g (float[N,1,4,1] x) => (float[N,1,4,1] y) <int64[2] ax = {1, -1}> {
        a = ReduceMean <axes = [1, 3]> (x)
        b = ReduceSum(a, ax)
        c = ReduceMax <axes = [-3], keepdims = 1> (b)
        d = ReduceMin <axes = [1]> (c)
        e = ReduceProd <axes = [3]> (d)
        y = Neg(e)
    }"""
    m, r = run(text)
    assert structure(m) == [("Neg", ["x"], ["y"])] and r.stats["nodes_removed"] == 5
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 1, 4, 1)).astype(np.float32)}
    assert np.array_equal(outputs(parse(text), feeds)[0], outputs(m, feeds)[0])


def test_reduce_axes_as_an_input_from_opset_18():
    text = """g (float[1,5] x) => (float[1,5] y, float[1,5] z) <int64[1] ax = {0}> {
        a = ReduceMax(x, ax)
        y = Neg(a)
        b = ReduceMean <noop_with_empty_axes = 1> (x)
        z = Abs(b)
    }"""
    m, r = run(text, opset=18)
    assert structure(m) == [("Neg", ["x"], ["y"]), ("Abs", ["x"], ["z"])]
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 5)).astype(np.float32)}
    for want, got in zip(outputs(parse(text, 18), feeds), outputs(m, feeds)):
        np.testing.assert_array_equal(got, want)


def test_reduce_of_all_axes_of_a_one_element_tensor_goes():
    m, r = run("""g (float[1,1] x) => (float[1,1] y) {
        a = ReduceSum(x)
        y = Neg(a)
    }""")
    assert structure(m) == [("Neg", ["x"], ["y"])]


def test_reduce_that_changes_its_input_stays():
    m, r = run("""g (float[N,1,4] x, float[N,1] u) => (float[N,4] y, float[N,1,1] z, float[1,1,1] w, float[1,1] v) {
        y = ReduceMean <axes = [1], keepdims = 0> (x)
        z = ReduceMean <axes = [1, 2]> (x)
        w = ReduceSum(x)
        v = ReduceSum(u)
    }""")
    assert ops(m) == ["ReduceMean", "ReduceMean", "ReduceSum", "ReduceSum"]
    assert reasons(r) == ["reduced dims unknown"]


def test_reduce_of_unknown_rank_or_computed_axes_is_refused():
    m, r = run("""g (float[2,1] x, int64[1] ax) => (float[2,1] y, float[2,1] z) {
        a = Relu(x)
        y = ReduceMax <axes = [1]> (a)
        z = ReduceSum(x, ax)
    }""")
    assert ops(m) == ["Relu", "ReduceMax", "ReduceSum"]
    assert reasons(r) == ["input rank unknown", "axes 'ax' is not a constant (no initializer)"]


# ---- Reshape ----

def test_reshape_to_its_own_shape_goes():
    m, r = run("""g (float[2,3,4] x) => (float[2,3,4] y) <int64[3] same = {2, 3, 4}, int64[3] copy = {0, 3, -1},
                                                         float[2,3,4] a> {
        a = Relu(x)
        b = Reshape(a, same)
        c = Reshape(b, copy)
        y = Neg(c)
    }""")
    assert structure(m) == [("Relu", ["x"], ["a"]), ("Neg", ["a"], ["y"])]
    assert r.stats["nodes_removed"] == 2 and r.stats["refused"] == []


def test_reshape_with_symbolic_dims():
    # 0 copies N whatever it is; -1 is N when the other dims are known and nonzero.
    m, r = run("""g (float[N,12] x) => (float[N,12] y) <int64[2] copy = {0, 12}, int64[2] infer = {-1, 12}> {
        a = Reshape(x, copy)
        b = Reshape(a, infer)
        y = Neg(b)
    }""")
    assert structure(m) == [("Neg", ["x"], ["y"])] and r.stats["refused"] == []


def test_reshape_that_reshapes_stays_unreported():
    m, r = run("""g (float[2,12] x) => (float[3,8] y, float[2,12] z)
              <int64[2] s = {3, 8}, int64[2] t = {2, -1}, float[2,12] a, float[3,8] c> {
        y = Reshape(x, s)
        a = Relu(x)
        b = Reshape(a, t)
        c = Reshape(b, s)
        z = Reshape(c, t)
    }""")
    # b is a real no-op; the others change the shape.
    assert ops(m) == ["Reshape", "Relu", "Reshape", "Reshape"] and r.stats["nodes_removed"] == 1
    assert r.stats["refused"] == []


def test_reshape_allowzero_takes_zero_literally():
    text = """g (float[N,12] x) => (float[N,12] y) <int64[2] s = {0, 12}> {
        a = Reshape <allowzero = 1> (x, s)
        y = Neg(a)
    }"""
    m, r = run(text)
    assert ops(m) == ["Reshape", "Neg"]
    assert reasons(r) == ["input dims unknown where the target shape gives a size"]


def test_reshape_refusals():
    m, r = run("""g (float[N,12] x, int64[2] fed) => (float[N,12] y, float[N,12] z, float[K] v, float[N,M] w)
              <int64[2] fed = {0, 12}, int64[2] spread = {-1, 12}, int64[1] flat = {-1}, float[12,N] h> {
        s = Shape(x)
        a = Reshape(x, s)
        y = Neg(a)
        b = Reshape(x, fed)
        z = Neg(b)
        u = Relu(x)
        c = Reshape(u, flat)
        v = Neg(c)
        h = Transpose <perm = [1, 0]> (x)
        d = Reshape(h, spread)
        w = Neg(d)
    }""")
    assert ops(m) == ["Shape", "Reshape", "Neg", "Reshape", "Neg", "Relu", "Reshape", "Neg", "Transpose", "Reshape",
                      "Neg"]
    assert not r.modified
    assert reasons(r) == [
        "target shape 's' is not a constant (no initializer)",
        "target shape 'fed' is a graph input with an initializer, so it can be fed: not a constant",
        "input rank unknown",
        "input dims unknown where the target shape gives a size",
    ]


def test_reshape_minus_one_beside_symbolic_dims_that_zeros_copy():
    # [N,8,S,64] -> [0,-1,0,64]: N and S cancel out of the count, so -1 is 8
    # (where N or S is 0 the Reshape itself fails: -1 beside an empty dim)
    text = """g (float[N,8,S,64] x) => (float[N,8,S,64] y) <int64[4] t = {0, -1, 0, 64}, float[N,8,S,64] a> {
        a = Relu(x)
        b = Reshape(a, t)
        y = Neg(b)
    }"""
    m, r = run(text)
    assert structure(m) == [("Relu", ["x"], ["a"]), ("Neg", ["a"], ["y"])]
    for shape in [(1, 8, 7, 64), (3, 8, 19, 64)]:
        feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        assert np.array_equal(outputs(parse(text), feeds)[0], outputs(m, feeds)[0])


def test_reshape_minus_one_beside_a_symbolic_dim_it_does_not_copy_stays():
    # {0, -1} on [N,S,2] is [N, 2S]: not the input's shape
    m, r = run("""g (float[N,S,2] x) => (float[N,K] y) <int64[2] t = {0, -1}, float[N,S,2] a> {
        a = Relu(x)
        b = Reshape(a, t)
        y = Neg(b)
    }""")
    assert ops(m) == ["Relu", "Reshape", "Neg"] and not r.modified


def test_reshape_as_graph_output_of_a_graph_input_is_refused_by_bypass():
    m, r = run("""g (float[2,3] x) => (float[2,3] y) <int64[2] s = {2, 3}> {
        y = Reshape(x, s)
    }""")
    assert ops(m) == ["Reshape"]
    assert reasons(r) == ["output is a graph output and the input is a graph input, initializer or outer value"]


def test_reshape_before_opset_5_reads_its_attribute():
    m, r = run("""g (float[2,3] x) => (float[2,3] y) <float[2,3] a> {
        a = Relu(x)
        b = Reshape <shape = [2, 3]> (a)
        y = Neg(b)
    }""", opset=4)
    assert structure(m) == [("Relu", ["x"], ["a"]), ("Neg", ["a"], ["y"])]


# ---- Expand, Tile, Pad ----

def test_expand_to_a_shape_it_already_has_goes():
    m, r = run("""g (float[N,3] x) => (float[N,3] y, float[2,N,3] z) <int64[2] ones = {1, 3}, int64[1] last = {3},
                                                                       int64[3] grow = {2, 1, 3}> {
        a = Expand(x, ones)
        b = Expand(a, last)
        y = Neg(b)
        z = Expand(x, grow)
    }""")
    assert structure(m) == [("Neg", ["x"], ["y"]), ("Expand", ["x", "grow"], ["z"])]
    assert r.stats["refused"] == []


def test_expand_refusals():
    m, r = run("""g (float[N,3] x, float[N,3] w, int64[2] s) => (float[N,3] y, float[N,3] z) <int64[2] full = {2, 3}> {
        a = Expand(x, full)
        y = Neg(a)
        c = Expand(w, s)
        z = Neg(c)
    }""")
    assert not r.modified
    assert reasons(r) == ["input dims unknown where the shape is not 1", "shape 's' is not a constant (no initializer)"]


def test_tile_by_ones_goes():
    m, r = run("""g (float[2,3] x, int64[2] fed) => (float[2,3] y, float[4,3] z, float[2,3] w)
              <int64[2] ones = {1, 1}, int64[2] twice = {2, 1}, int64[2] fed = {1, 1}> {
        a = Tile(x, ones)
        y = Neg(a)
        z = Tile(x, twice)
        b = Tile(x, fed)
        w = Neg(b)
    }""")
    assert structure(m) == [("Neg", ["x"], ["y"]), ("Tile", ["x", "twice"], ["z"]), ("Tile", ["x", "fed"], ["b"]),
                            ("Neg", ["b"], ["w"])]
    assert reasons(r) == ["repeats 'fed' is a graph input with an initializer, so it can be fed: not a constant"]


def test_resize_to_its_own_size_goes_in_every_mode():
    text = """g (float[1,3,4,5] x, float[N,3,4,5] v) => (float[1,3,4,5] y, float[1,3,4,5] z, float[N,3,4,5] u,
                                                    float[1,3,8,10] w, float[1,3,4,5] c)
              <int64[4] same = {1, 3, 4, 5}, float[4] ones = {1.0, 1.0, 1.0, 1.0}, float[4] twice = {1.0, 1.0, 2.0, 2.0},
               float[8] roi = {0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0}> {
        a = Resize <mode = "linear"> (x, , , same)
        y = Neg(a)
        b = Resize <mode = "cubic", coordinate_transformation_mode = "align_corners"> (x, , ones)
        z = Neg(b)
        e = Resize <mode = "nearest"> (v, , ones)
        u = Neg(e)
        w = Resize <mode = "linear"> (x, , twice)
        c = Resize <mode = "linear", coordinate_transformation_mode = "tf_crop_and_resize"> (x, roi, , same)
    }"""
    m, r = run(text, opset=13)
    assert ops(m) == ["Neg", "Neg", "Neg", "Resize", "Resize"]
    assert [n.outputs[0].name for n in m.graph.nodes if n.op_type == "Resize"] == ["w", "c"]
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 4, 5)).astype(np.float32),
             "v": np.random.default_rng(1).standard_normal((2, 3, 4, 5)).astype(np.float32)}
    for want, got in zip(outputs(parse(text, 13), feeds), outputs(m, feeds)):
        np.testing.assert_array_equal(got, want)


def test_resize_sizes_of_unknown_dims_are_refused_and_old_forms_go():
    m, r = run("""g (float[N,3,4,5] x) => (float[N,3,4,5] y) <int64[4] same = {1, 3, 4, 5}> {
        a = Resize(x, , , same)
        y = Neg(a)
    }""", opset=13)
    assert not r.modified and reasons(r) == ["input dims unknown where the sizes are given"]
    m, r = run("""g (float[1,3,4,5] x) => (float[1,3,4,5] y) <float[4] ones = {1.0, 1.0, 1.0, 1.0}> {
        a = Resize(x, ones)
        y = Neg(a)
    }""", opset=10)
    assert ops(m) == ["Neg"]
    m, r = run("""g (float[1,3,4,5] x) => (float[1,3,4,5] y) {
        a = Upsample <scales = [1.0, 1.0, 1.0, 1.0]> (x)
        y = Neg(a)
    }""", opset=7)
    assert ops(m) == ["Neg"]


def test_zero_pads_go_in_every_mode_and_opset():
    m, r = run("""g (float[2,3] x, int64[4] p) => (float[2,3] y, float[2,3] z, float[4,5] w)
              <int64[4] zeros = {0, 0, 0, 0}, int64[4] ones = {1, 1, 1, 1}, float zero = {0.0}> {
        a = Pad <mode = "reflect"> (x, zeros)
        b = Pad(a, zeros, zero)
        y = Neg(b)
        c = Pad(x, p)
        z = Neg(c)
        w = Pad(x, ones)
    }""")
    assert structure(m) == [("Neg", ["x"], ["y"]), ("Pad", ["x", "p"], ["c"]), ("Neg", ["c"], ["z"]),
                            ("Pad", ["x", "ones"], ["w"])]
    assert reasons(r) == ["pads 'p' is not a constant (no initializer)"]
    m, r = run("""g (float[2,3] x) => (float[2,3] y, float[4,5] z) {
        a = Pad <pads = [0, 0, 0, 0], mode = "edge"> (x)
        y = Neg(a)
        z = Pad <pads = [1, 1, 1, 1]> (x)
    }""", opset=10)
    assert structure(m) == [("Neg", ["x"], ["y"]), ("Pad", ["x"], ["z"])]


# ---- Slice ----

def test_whole_slices_go():
    m, r = run(f"""g (float[2,3] x, float[N,M] u) => (float[2,3] y, float[N,M] z)
              <int64[1] zero = {{0}}, int64[1] three = {{3}}, int64[1] one = {{1}}, int64[1] last = {{-1}},
               int64[1] before = {{-10}}, int64[1] past = {{10}}, int64[1] big = {{{INT64_MAX}}}, int64[2] z2 = {{0, 0}},
               int64[2] big2 = {{{INT64_MAX}, {INT64_MAX}}}> {{
        a = Slice(x, zero, three, one)
        b = Slice(a, before, past, last, one)
        y = Neg(b)
        c = Slice(u, z2, big2)
        z = Neg(c)
    }}""")
    assert structure(m) == [("Neg", ["x"], ["y"]), ("Neg", ["u"], ["z"])]
    assert r.stats["nodes_removed"] == 3 and r.stats["refused"] == []


def test_partial_slices_stay():
    m, r = run("""g (float[2,3] x) => (float[2,2] y, float[2,2] z, float[2,2] w, float[2,1] v)
              <int64[1] zero = {0}, int64[1] one = {1}, int64[1] two = {2}, int64[1] three = {3}, int64[1] back = {-1}> {
        y = Slice(x, one, three, one)
        z = Slice(x, three, zero, one, back)
        w = Slice(x, zero, two, one)
        v = Slice(x, back, three, one)
    }""")
    assert ops(m) == ["Slice", "Slice", "Slice", "Slice"] and not r.modified and r.stats["refused"] == []


def test_slice_refusals():
    m, r = run(f"""g (float[N,3] x, int64[1] s, int64[1] e) => (float[N,3] y, float[N,3] z, float[N,3] w)
              <int64[1] zero = {{0}}, int64[1] n = {{100}}, int64[1] big = {{{INT64_MAX}}}, int64[1] e = {{3}}> {{
        a = Slice(x, zero, n)
        y = Neg(a)
        b = Slice(x, s, big)
        z = Neg(b)
        c = Slice(x, zero, e)
        w = Neg(c)
    }}""")
    assert not r.modified
    assert reasons(r) == [
        "sliced dims unknown and the range is not 0 to an unbounded end",
        "starts 's' is not a constant (no initializer)",
        "ends 'e' is a graph input with an initializer, so it can be fed: not a constant",
    ]


def test_slice_with_raw_int32_inputs_and_old_attributes():
    model = parse("""g (float[2,3] x) => (float[2,3] y, float[2,2] z) {
        a = Slice(x, starts, ends, axes)
        y = Neg(a)
        z = Slice(x, starts, two, axes)
    }""")
    for name, values in [("starts", [0]), ("ends", [3]), ("axes", [-1]), ("two", [2])]:
        model.graph.initializer.append(numpy_helper.from_array(np.array(values, np.int32), name))
    m, r = run(model)
    assert structure(m) == [("Neg", ["x"], ["y"]), ("Slice", ["x", "starts", "two", "axes"], ["z"])]
    m, r = run("""g (float[2,3] x) => (float[2,3] y, float[2,2] z) {
        a = Slice <starts = [0, 0], ends = [2, 3]> (x)
        y = Neg(a)
        z = Slice <starts = [1], ends = [3], axes = [1]> (x)
    }""", opset=9)
    assert structure(m) == [("Neg", ["x"], ["y"]), ("Slice", ["x"], ["z"])]


# ---- Squeeze / Unsqueeze ----

def test_squeeze_unsqueeze_round_trips_go():
    m, r = run("""g (float[2,1,3] x, float[2,3] u) => (float[2,1,3] y, float[2,3] z)
              <int64[1] one = {1}, int64[1] back = {-1}, int64[1] two = {2}> {
        [sq] a = Squeeze(x, one)
        [unsq] b = Unsqueeze(a, one)
        y = Neg(b)
        [unsq2] c = Unsqueeze(u, back)
        [sq2] d = Squeeze(c, two)
        z = Neg(d)
    }""")
    assert structure(m) == [("Neg", ["x"], ["y"]), ("Neg", ["u"], ["z"])]
    assert r.stats["nodes_removed"] == 4 and r.stats["refused"] == []
    assert r.stats["rewrites"] == [{"what": "bypassed", "consumed": ["sq", "unsq"], "produced": []},
                                   {"what": "bypassed", "consumed": ["unsq2", "sq2"], "produced": []}]


def test_squeeze_pairs_in_attribute_form_and_without_axes():
    m, r = run("""g (float[2,1,3] x, float[N,3] u) => (float[2,1,3] y, float[1,N,3,1] z) {
        a = Squeeze(x)
        b = Unsqueeze <axes = [1]> (a)
        y = Neg(b)
        c = Unsqueeze <axes = [0]> (u)
        z = Unsqueeze <axes = [3]> (c)
    }""", opset=11)
    # c/z: different axes, real work.
    assert structure(m) == [("Neg", ["x"], ["y"]), ("Unsqueeze", ["u"], ["c"]), ("Unsqueeze", ["c"], ["z"])]
    assert r.stats["refused"] == []


def test_squeeze_pair_whose_middle_is_read_elsewhere_keeps_the_first():
    m, r = run("""g (float[2,1,3] x) => (float[2,1,3] y, float[2,3] z) <int64[1] one = {1}> {
        [sq] a = Squeeze(x, one)
        [unsq] b = Unsqueeze(a, one)
        y = Neg(b)
        z = Relu(a)
    }""")
    assert structure(m) == [("Squeeze", ["x", "one"], ["a"]), ("Neg", ["x"], ["y"]), ("Relu", ["a"], ["z"])]
    assert r.stats["rewrites"] == [{"what": "bypassed", "consumed": ["unsq"], "produced": []}]


def test_squeeze_pair_refusals():
    m, r = run("""g (float[2,1] x0, float[N,1] u, int64[1] ax, float[2,1] w) => (float[2,1] y, float[N,1] z, float[2,1] v)
              <int64[1] one = {1}, int64[1] back = {-1}> {
        x = Relu(x0)
        a = Squeeze(x, one)
        b = Unsqueeze(a, back)
        y = Neg(b)
        c = Squeeze(u)
        d = Unsqueeze(c, one)
        z = Neg(d)
        e = Squeeze(w, ax)
        f = Unsqueeze(e, ax)
        v = Neg(f)
    }""")
    assert not r.modified
    assert reasons(r) == [
        "axes compare only with the rank, which is unknown",
        "Squeeze without axes and its input shape not fully known",
        "axes 'ax' is not a constant (no initializer)",
    ]


# ---- Cast round trips ----

CODES = {"float": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7, "string": 8, "bool": 9,
         "float16": 10, "double": 11, "uint32": 12, "uint64": 13, "bfloat16": 16, "float8e4m3fn": 17,
         "float8e4m3fnuz": 18, "float8e5m2": 19, "float8e5m2fnuz": 20, "uint4": 21, "int4": 22, "float4e2m1": 23}
NAMES = {"float": "float32", "double": "float64"}  # as the pass reports them

EXACT = [("float16", "float"), ("bfloat16", "float"), ("float", "double"), ("float16", "double"), ("int8", "int16"),
         ("int8", "int64"), ("uint8", "int16"), ("uint8", "uint16"), ("uint8", "uint64"), ("int32", "int64"),
         ("uint32", "int64"), ("bool", "int32"), ("bool", "uint8"), ("bool", "float"), ("int8", "float"),
         ("uint8", "float16"), ("int8", "bfloat16"), ("uint8", "bfloat16"), ("int16", "float"), ("uint16", "float"),
         ("int32", "double"), ("uint32", "double"), ("float8e4m3fn", "float16"), ("float8e5m2", "float16"),
         ("float8e4m3fnuz", "bfloat16"), ("float8e5m2fnuz", "float"), ("int4", "int8"), ("uint4", "float16"),
         ("float4e2m1", "float8e4m3fn")]
LOSSY = [("float", "float16"), ("float", "bfloat16"), ("double", "float"), ("int64", "int32"), ("float", "int32"),
         ("int32", "float"), ("int64", "double"), ("int16", "float16"), ("int16", "bfloat16"), ("int8", "uint8"),
         ("uint8", "int8"), ("uint16", "int16"), ("uint64", "int64"), ("float16", "bfloat16"),
         ("bfloat16", "float16"), ("float16", "float8e5m2"), ("float8e4m3fn", "float8e5m2"),
         ("float8e5m2", "float8e4m3fn"), ("float8e4m3fnuz", "float8e4m3fn"), ("double", "int64"), ("int16", "int8"),
         ("uint16", "uint8"), ("int32", "int16"), ("uint8", "uint4"), ("int8", "int4")]
COMPUTES = [("float", "bool"), ("int32", "bool"), ("float", "string"), ("string", "int64")]


def cast_pair(t, via):
    return onnx.parser.parse_model(f"""<ir_version: 11, opset_import: ["" : 23]>
        g ({t}[3] x) => ({t}[3] y) {{
            a = Cast <to = {CODES[via]}> (x)
            b = Cast <to = {CODES[t]}> (a)
            y = Identity(b)
        }}""")


@pytest.mark.parametrize("t, via", EXACT)
def test_exact_cast_round_trip_goes(t, via):
    m, r = run(cast_pair(t, via))
    assert structure(m) == [("Identity", ["x"], ["y"])] and r.stats["refused"] == []


@pytest.mark.parametrize("t, via", LOSSY)
def test_lossy_cast_round_trip_needs_allow_lossy(t, via):
    m, r = run(cast_pair(t, via))
    assert ops(m) == ["Cast", "Cast", "Identity"] and not r.modified
    n, v = NAMES.get(t, t), NAMES.get(via, via)
    assert reasons(r) == [f"lossy Cast round trip {n} -> {v} -> {n}: removed only with --allow-lossy"]
    m, r = run(cast_pair(t, via), allow_lossy=True)
    assert structure(m) == [("Identity", ["x"], ["y"])] and r.stats["refused"] == []


@pytest.mark.parametrize("t, via", COMPUTES)
def test_round_trip_through_bool_or_string_computes(t, via):
    m, r = run(cast_pair(t, via), allow_lossy=True)
    assert ops(m) == ["Cast", "Cast", "Identity"] and not r.modified and r.stats["refused"] == []


def test_cast_chain_goes_in_one_run_and_shared_middle_stays():
    m, r = run("""g (float[3] x) => (float[3] y, double[3] z) {
        [c1] a = Cast <to = 11> (x)
        [c2] b = Cast <to = 1> (a)
        [c3] c = Cast <to = 11> (b)
        [c4] d = Cast <to = 1> (c)
        y = Neg(d)
        [c5] e = Cast <to = 11> (x)
        [c6] f = Cast <to = 1> (e)
        g = Neg(f)
        z = Sqrt(e)
    }""")
    # g is dead (eliminate_dead_code's business); e is still read by Sqrt, so c5 stays.
    assert structure(m) == [("Neg", ["x"], ["y"]), ("Cast", ["x"], ["e"]), ("Neg", ["x"], ["g"]), ("Sqrt", ["e"], ["z"])]
    assert r.stats["rewrites"] == [{"what": "bypassed", "consumed": c, "produced": []}
                                   for c in (["c1", "c2"], ["c3", "c4"], ["c6"])]


def cast_chain(t, via, to):
    return onnx.parser.parse_model(f"""<ir_version: 11, opset_import: ["" : 23]>
        g ({t}[5] x) => ({to}[5] y) {{
            a = Cast <to = {CODES[via]}> (x)
            y = Cast <to = {CODES[to]}> (a)
        }}""")


CHAIN_FEED = np.array([-2.75, -1.0, 0.0, 0.5, 3.25])


@pytest.mark.parametrize("t, via, to", [("bool", "int32", "int64"), ("float16", "float", "int32"),
                                         ("uint8", "int16", "float"), ("int8", "float", "double"),
                                         ("float16", "double", "bool"), ("int32", "int64", "float16")])
def test_a_cast_through_a_type_that_holds_every_value_reads_the_input(t, via, to):
    before = cast_chain(t, via, to)
    m, r = run(before)
    assert structure(m) == [("Cast", ["x"], ["y"])] and r.stats["rewrites"][0]["what"] == "merged exact casts"
    x = {"x": (CHAIN_FEED != 0) if t == "bool" else CHAIN_FEED.astype(np.dtype(t))}
    assert np.array_equal(outputs(before, x)[0], outputs(m, x)[0])


@pytest.mark.parametrize("t, via, to", [("float", "float16", "double"), ("int64", "int32", "float"),
                                         ("float", "int32", "int64"), ("float", "double", "string"),
                                         ("float", "bool", "int64")])
def test_a_cast_chain_that_rounds_or_spells_stays(t, via, to):
    m, r = run(cast_chain(t, via, to), allow_lossy=True)
    assert ops(m) == ["Cast", "Cast"] and not r.modified


def test_a_cast_chain_whose_middle_is_read_elsewhere_stays():
    m, r = run("""g (bool[3] x) => (int64[3] y, int32[3] z) {
        a = Cast <to = 6> (x)
        y = Cast <to = 7> (a)
        z = Neg(a)
    }""")
    assert ops(m) == ["Cast", "Cast", "Neg"] and not r.modified


def test_cast_round_trip_refusals():
    m, r = run("""g (float[3] x, float[3] u) => (float[3] y, float[3] z) {
        v = Relu(u)
        a = Cast <to = 11> (v)
        b = Cast <to = 1> (a)
        y = Neg(b)
        c = Cast <to = 11> (x)
        z = Cast <to = 1> (c)
    }""")
    assert ops(m) == ["Relu", "Cast", "Cast", "Neg", "Cast", "Cast"] and not r.modified
    # The first Cast alone is judged too: its input type decides whether it is a no-op itself.
    assert reasons(r) == ["input or target type unknown", "type of the first Cast's input unknown",
                          "output is a graph output and the input is a graph input, initializer or outer value"]


def test_pinned_nodes_are_refused():
    text = """g (float[3] x, float[3,1] w) => (float[3] y, float[3,1] z)
              <int64[1] one = {1}, int64[2] n = {3, 1}, float[3,1] d> {
        [p] a = Cast <to = 11> (x)
        [q] b = Cast <to = 1> (a)
        y = Neg(b)
        [r] c = Squeeze(w, one)
        [s] d = Unsqueeze(c, one)
        [t] e = Reshape(d, n)
        z = Neg(e)
    }"""
    for pinned in ("pq", "rs", "t"):
        for name in pinned:
            m = pyonnxopt.load(parse(text))
            node = next(n for n in m.graph.nodes if n.name == name)
            node.pinned = True
            r = get("eliminate_nop").run(m, PassOptions())
            refused = [x for x in r.stats["refused"] if "excluded from optimization" in x]
            assert len(refused) == 1 and f"'{name}'" in refused[0], (name, r.stats)
            assert name in [n.name for n in m.graph.nodes]


# ---- numbers, idempotence, subgraphs ----

def test_new_rewrites_keep_the_numbers_and_are_idempotent():
    text = f"""g (float[2,1,3] x, int8[2,3] i) => (float[2,1,3] y, int8[2,3] k)
              <int64[3] s = {{0, 1, -1}}, int64[3] ones = {{1, 1, 1}}, int64[6] zeros = {{0, 0, 0, 0, 0, 0}},
               int64[1] one = {{1}}, int64[1] z0 = {{0}}, int64[1] big = {{{INT64_MAX}}}, float[2,1,3] a> {{
        a = Sigmoid(x)
        b = Reshape(a, s)
        c = Expand(b, ones)
        d = Tile(c, ones)
        e = Pad <mode = "edge"> (d, zeros)
        f = Slice(e, z0, big, one)
        g = Squeeze(f, one)
        h = Unsqueeze(g, one)
        p = Cast <to = 11> (h)
        q = Cast <to = 1> (p)
        y = Mul(q, x)
        j = Cast <to = 6> (i)
        jj = Cast <to = 3> (j)
        k = Neg(jj)
    }}"""
    before = parse(text)
    m, r = run(text)
    assert structure(m) == [("Sigmoid", ["x"], ["a"]), ("Mul", ["a", "x"], ["y"]), ("Neg", ["i"], ["k"])]
    assert r.stats["nodes_removed"] == 11 and r.stats["refused"] == []
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 1, 3)).astype(np.float32),
             "i": rng.integers(-128, 128, (2, 3)).astype(np.int8)}
    for want, got in zip(outputs(before, feeds), outputs(m, feeds)):
        np.testing.assert_array_equal(got, want)
    again = get("eliminate_nop").run(m, PassOptions(allow_lossy=True))
    assert not again.modified and again.stats["refused"] == []


def test_allow_lossy_changes_the_numbers_as_it_says():
    text = """g (float[3] x) => (float[3] y) {
        a = Cast <to = 10> (x)
        b = Cast <to = 1> (a)
        y = Neg(b)
    }"""
    before = parse(text)
    m, r = run(text, allow_lossy=True)
    assert structure(m) == [("Neg", ["x"], ["y"])]
    feeds = {"x": np.array([1 / 3, 1e-8, 70000.0], np.float32)}
    want, got = outputs(before, feeds)[0], outputs(m, feeds)[0]
    np.testing.assert_array_equal(got, -feeds["x"])
    assert not np.array_equal(got, want)  # float16 rounds 1/3, flushes 1e-8, overflows 70000


def test_round_trip_inside_a_subgraph():
    from onnx import TensorProto, helper

    then_g = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["a"], to=TensorProto.DOUBLE, name="c1"),
         helper.make_node("Cast", ["a"], ["b"], to=TensorProto.FLOAT, name="c2"),
         helper.make_node("Neg", ["b"], ["then_out"])],
        "then", [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["else_out"])], "else", [],
                               [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2])])
    g = helper.make_graph([helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    before = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    m, r = run(before)
    assert r.stats["rewrites"] == [{"what": "bypassed", "consumed": ["c1", "c2"], "produced": []}]
    out = m.to_onnx().graph.node[0].attribute
    then_nodes = next(a.g for a in out if a.name == "then_branch").node
    assert [(n.op_type, list(n.input)) for n in then_nodes] == [("Neg", ["x"])]
    feeds = {"x": np.array([1.5, -2.0], np.float32), "cond": np.array(True)}
    np.testing.assert_array_equal(outputs(m, feeds)[0], outputs(before, feeds)[0])


def test_round_trip_into_a_graph_output_keeps_its_name():
    m, r = run("""g (float[3] x) => (float[3] y) <float[3] a> {
        a = Relu(x)
        b = Cast <to = 11> (a)
        y = Cast <to = 1> (b)
    }""")
    assert structure(m) == [("Relu", ["x"], ["y"])] and [o.name for o in m.to_onnx().graph.output] == ["y"]


def test_empty_squeeze_axes_count_only_where_the_input_has_no_1():
    m, r = run("""g (float[2,3] x, float[2,1] w) => (float[2,3] y, float[2,1] z) <int64[0] none = {}> {
        a = Squeeze(x, none)
        b = Unsqueeze(a, none)
        y = Neg(b)
        c = Squeeze(w, none)
        d = Unsqueeze(c, none)
        z = Neg(d)
    }""")
    # Squeeze(w, []) may drop w's 1 (onnxruntime does): that pair is real work.
    assert structure(m) == [("Neg", ["x"], ["y"]), ("Squeeze", ["w", "none"], ["c"]),
                            ("Unsqueeze", ["c", "none"], ["d"]), ("Neg", ["d"], ["z"])]
