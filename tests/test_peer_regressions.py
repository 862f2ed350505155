"""Regression tests for single-pass bugs that peer optimizers shipped.

Each test builds, as a small ONNX graph, the situation a peer's issue reports
(or, where the issue only names the pass, the cases the peer's own rewrite
leaves unchecked), runs `pyonnxopt.optimize` with the default pipeline and
its onnxruntime check, and then checks for itself that:

- the optimized model passes `onnx.checker.check_model(full_check=True)`;
- graph inputs and outputs keep their names, order and element types;
- every output matches the original's in onnxruntime (its own graph
  optimizations off) on seeded inputs, with symbolic dims fed at sizes other
  than the 1 the built-in check uses;
- the property the peer broke still holds (an output shape, a mask, a sign...).

The assertions are about behaviour, not node counts: the pipeline grows
(folding, shape inference, fusions) and these graphs must keep their outputs
through whatever it becomes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from onnx import numpy_helper, parser

from pyonnxopt.optimize import optimize

ort = pytest.importorskip("onnxruntime")  # both the optimize check and ours run the models in it

FLOAT, BOOL, INT64 = onnx.TensorProto.FLOAT, onnx.TensorProto.BOOL, onnx.TensorProto.INT64
_NUMPY = {FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64, INT64: np.int64,
          onnx.TensorProto.INT32: np.int32, BOOL: np.bool_}


# ----------------------------------------------------------------------------------------------
# Shared machinery


def _model(text: str, opset: int = 17, weights: dict | None = None) -> onnx.ModelProto:
    """ONNX text (onnx.parser) plus numpy weights appended as initializers."""
    model = parser.parse_model(f'<ir_version: 8, opset_import: ["" : {opset}]>' + text)
    for name, array in (weights or {}).items():
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
    return model


def _feeds(model: onnx.ModelProto, seed: int, dims: dict) -> dict:
    """Seeded inputs for the graph inputs: floats ~ N(0, 1), integers in [0, 8),
    booleans at random; a symbolic dim takes its size from `dims`."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in model.graph.input:
        t = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dims[d.dim_param] for d in t.shape.dim]
        dtype = _NUMPY[t.elem_type]
        if np.issubdtype(dtype, np.floating):
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            feeds[i.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            feeds[i.name] = rng.integers(0, 8, shape).astype(dtype)
    return feeds


def _run(model: onnx.ModelProto, feeds: dict) -> dict:
    """Every graph output by name, from onnxruntime with its own optimizations off."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def _difference(name: str, want: np.ndarray, got: np.ndarray, rtol: float, atol: float, of_max: float = 0.0):
    """None when `got` matches `want`, else what differs. Floats may differ by
    atol + rtol * |want| + of_max * max|want| (the last for rewrites that fold
    weights, whose rounding scales with the tensor, not with each element)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{name}: {want.shape}/{want.dtype} became {got.shape}/{got.dtype}"
    if want.dtype.kind == "f":
        # Same NaN positions, same infinities (with their sign), close elsewhere.
        finite = want[np.isfinite(want)]
        atol = atol + of_max * float(np.max(np.abs(finite), initial=0.0))
        same = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        same = got == want
    if not np.all(same):
        return f"{name}: {np.count_nonzero(~same)} of {same.size} values differ"
    return None


def _interface(model: onnx.ModelProto) -> tuple:
    def io(values):
        return [(v.name, v.type.tensor_type.elem_type) for v in values]
    return io(model.graph.input), io(model.graph.output)


DIMS = ({"N": 3}, {"N": 5})  # symbolic dims: not the 1 that pyonnxopt's own check feeds


def _first_difference(original: onnx.ModelProto, other: onnx.ModelProto, dims_list=DIMS,
                      rtol: float = 1e-5, atol: float = 1e-6, of_max: float = 0.0):
    """None when `other` has the same inputs and outputs (names, order, element
    types) and the same output values in onnxruntime on seeded feeds (two seeds
    per entry of `dims_list`); else the first difference found."""
    if _interface(other) != _interface(original):
        return f"interface {_interface(original)} became {_interface(other)}"
    for dims in dims_list:
        for seed in (0, 1):
            feeds = _feeds(original, seed, dims)
            want = _run(original, feeds)
            try:
                got = _run(other, feeds)
            except Exception as e:  # onnxruntime refuses the model or fails running it
                return f"{dims}, seed {seed}: {type(e).__name__}: {str(e).splitlines()[0]}"
            for name in want:
                why = _difference(name, want[name], got[name], rtol, atol, of_max)
                if why:
                    return f"{dims}, seed {seed}: {why}"
    return None


@dataclass
class Kept:
    model: onnx.ModelProto  # the optimized model
    report: dict
    feeds: dict  # the first feeds compared
    outputs: dict  # the optimized model's outputs on them


def _assert_outputs_kept(original: onnx.ModelProto, dims_list=DIMS, rtol: float = 1e-5,
                         atol: float = 1e-6, of_max: float = 0.0) -> Kept:
    """Optimizes `original` with the default pipeline and the onnxruntime check,
    then checks validity, names and outputs independently of that check."""
    onnx.checker.check_model(original, full_check=True)  # the situation itself is a valid model
    model, report = optimize(original, check_outputs=True)
    optimized = model.to_onnx()
    onnx.checker.check_model(optimized, full_check=True)
    check = report["check"]
    assert check is not None and "skipped" not in check, check
    assert check["first_mismatch"] is None and check["outputs"] == len(original.graph.output), check
    difference = _first_difference(original, optimized, dims_list, rtol, atol, of_max)
    assert difference is None, difference
    feeds = _feeds(original, 0, dims_list[0])
    return Kept(optimized, report, feeds, _run(optimized, feeds))


# ----------------------------------------------------------------------------------------------
# The situations, one builder per peer issue (each also feeds the idempotence test at the end)


def conv_batchnorm() -> onnx.ModelProto:
    rng = np.random.default_rng(255)

    def f32(*shape, low=None):
        a = rng.standard_normal(shape) if low is None else rng.uniform(low, low + 1.0, shape)
        return a.astype(np.float32)

    weights = {
        "W": f32(4, 3, 3, 3), "B": f32(4), "W2": f32(4, 3, 1, 1), "W3": f32(4, 3, 3, 3), "B3": f32(4),
        "W5": f32(4, 3, 3, 3),
        "scale": f32(4), "shift": f32(4), "mean": f32(4), "var": f32(4, low=0.5),
        # Near-zero variance under a large scale: the fused weights grow ~1000x.
        "scale5": np.full(4, 3.0, np.float32), "shift5": f32(4), "mean5": f32(4),
        "var5": np.full(4, 1e-7, np.float32),
    }
    return _model("""
        g (float[N,3,8,8] x) => (float[N,4,8,8] bn_bias, float[N,4,8,8] bn_no_bias, float[N,4,8,8] conv_out,
                                 float[N,4,8,8] bn_of_read_conv, float[N,4,8,8] shared_weight_plain,
                                 float[N,4,8,8] tiny_var) {
            c1 = Conv <pads = [1, 1, 1, 1]> (x, W, B)
            bn_bias = BatchNormalization <epsilon = 1e-5> (c1, scale, shift, mean, var)
            c2 = Conv (x, W2)
            bn_no_bias = BatchNormalization <epsilon = 1e-5> (c2, scale, shift, mean, var)
            conv_out = Conv <pads = [1, 1, 1, 1]> (x, W3, B3)
            bn_of_read_conv = BatchNormalization (conv_out, scale, shift, mean, var)
            shared_weight_plain = Conv <pads = [1, 1, 1, 1]> (x, W, B)
            c5 = Conv <pads = [1, 1, 1, 1]> (x, W5)
            tiny_var = BatchNormalization <epsilon = 1e-5> (c5, scale5, shift5, mean5, var5)
        }""", weights=weights)


def test_onnxoptimizer_255_conv_batchnorm_fusion_keeps_outputs():
    """onnxoptimizer#255: running only `fuse_bn_into_conv` (0.3.19) changed the
    outputs of a Conv -> BatchNormalization model (max abs diff 3.8e-6, rel
    2.8e-7 on the reporter's oracle inputs).

    Built here: Conv+BN with and without a Conv bias; a Conv whose output is
    also a graph output (its unnormalized values must survive); a weight shared
    with a Conv that has no BN (it must not be rescaled); and a near-zero
    variance under a large scale, where folding amplifies rounding. All within
    fp32 tolerance of the unfused model."""
    kept = _assert_outputs_kept(conv_batchnorm(), **SETTINGS[conv_batchnorm])
    x = kept.feeds["x"]
    assert kept.outputs["conv_out"].shape == (x.shape[0], 4, 8, 8)
    # The plain Conv that shares W still computes with W and B as given.
    assert not np.allclose(kept.outputs["shared_weight_plain"], kept.outputs["bn_bias"], atol=1e-3)


def consecutive_idempotent_ops() -> onnx.ModelProto:
    return _model("""
        g (float[2,3,4] x) => (float[6,4] copy_dim, float[3,2,4] infer_dim, float[2,3,4] relu_once,
                               float[2,3,4] relu_twice, float[2,3,4] floor_twice, float[2,3,4] round_twice) {
            a = Reshape (x, to_6x4)
            copy_dim = Reshape (a, zero_minus1)
            b = Reshape (x, to_3x8)
            infer_dim = Reshape (b, zero_2_minus1)
            relu_once = Relu (x)
            relu_twice = Relu (relu_once)
            f = Floor (x)
            floor_twice = Floor (f)
            scaled = Mul (x, k)
            r = Round (scaled)
            round_twice = Round (r)
        }""", weights={"to_6x4": np.array([6, 4], np.int64), "zero_minus1": np.array([0, -1], np.int64),
                       "to_3x8": np.array([3, 8], np.int64), "zero_2_minus1": np.array([0, 2, -1], np.int64),
                       "k": np.array(3.7, np.float32)})


def test_onnxoptimizer_259_consecutive_reshapes_keep_their_zero_and_minus_one_dims():
    """onnxoptimizer#259: `eliminate_consecutive_idempotent_ops` (0.4.2) changed
    a real model's outputs. That pass treats Ceil/Floor/Round/Relu/Reshape/Sign
    as idempotent and drops the first of two in a row; for Reshape it applies
    the second shape to the first Reshape's *input*, where a 0 (copy this dim)
    or -1 (infer it) resolves against different dims.

    Built here: Reshape(Reshape(x[2,3,4], [6,4]), [0,-1]) must stay [6,4] (not
    [2,12]) and Reshape(Reshape(x, [3,8]), [0,2,-1]) must stay [3,2,4] (not
    [2,2,6]); double Relu/Floor/Round, with the inner Relu also a graph output."""
    kept = _assert_outputs_kept(consecutive_idempotent_ops())
    x = kept.feeds["x"]
    np.testing.assert_array_equal(kept.outputs["copy_dim"], x.reshape(6, 4))
    np.testing.assert_array_equal(kept.outputs["infer_dim"], x.reshape(3, 2, 4))
    np.testing.assert_array_equal(kept.outputs["relu_once"], np.maximum(x, 0))
    np.testing.assert_array_equal(kept.outputs["round_twice"], np.round(x * np.float32(3.7)))


def shape_start_end() -> onnx.ModelProto:
    return _model("""
        g (float[N,3,4] x) => (int64[3] all, int64[2] tail, int64[1] last, int64[3] clamped, int64[1] middle,
                               float[N,3,4] y, float[N,12] flat) {
            all = Shape (x)
            tail = Shape <start = 1> (x)
            last = Shape <start = -1> (x)
            clamped = Shape <start = -10, end = 100> (x)
            middle = Shape <start = 1, end = -1> (x)
            target = Concat <axis = 0> (minus1, tail)
            y = Reshape (x, target)
            batch = Shape <end = 1> (x)
            flat_shape = Concat <axis = 0> (batch, minus1)
            flat = Reshape (x, flat_shape)
        }""", weights={"minus1": np.array([-1], np.int64)})


def test_onnxoptimizer_262_shape_with_start_and_end_stays_exact():
    """onnxoptimizer#262: `eliminate_shape_op` (0.4.2), which replaces Shape by
    a constant when the input's dims are known, drifted outputs and produced
    NaN mismatches on fuzzed models; the issue names the pass and the outputs,
    not the graph (the models are in an attached archive).

    Built here: Shape with negative, out-of-range (clamped) and interior
    start/end attributes over an input with a symbolic batch dim, feeding
    Reshape targets. Fed at batch 3 and 5, so a dim folded at the wrong index,
    or the symbolic dim folded to a constant, shows."""
    kept = _assert_outputs_kept(shape_start_end())
    n = kept.feeds["x"].shape[0]
    expected = {"all": [n, 3, 4], "tail": [3, 4], "last": [4], "clamped": [n, 3, 4], "middle": [3]}
    for name, value in expected.items():
        np.testing.assert_array_equal(kept.outputs[name], np.array(value, np.int64), err_msg=name)
    assert kept.outputs["flat"].shape == (n, 12)


def slice_after_shape() -> onnx.ModelProto:
    return _model("""
        g (float[2,3,5,7] x, float[N,6] z) => (int64[2] from_offset, int64[4] reversed, int64[2] strided,
                                               int64[1] symbolic, float[6,5,7] y) {
            tail = Shape <start = 1> (x)
            from_offset = Slice (tail, one, three)
            full = Shape (x)
            reversed = Slice (full, minus1, minus100, zero, minus1)
            strided = Slice (full, one, thousand, zero, two)
            zs = Shape (z)
            symbolic = Slice (zs, zero, one)
            target = Concat <axis = 0> (minus1, from_offset)
            y = Reshape (x, target)
        }""", weights={name: np.array([v], np.int64) for name, v in
                       {"zero": 0, "one": 1, "two": 2, "three": 3, "minus1": -1, "minus100": -100,
                        "thousand": 1000}.items()})


def test_onnxoptimizer_263_slice_of_shape_counts_from_the_shape_start():
    """onnxoptimizer#263: `eliminate_slice_after_shape` (0.4.2) changed outputs
    greatly (e.g. v52_0 off by 6.77). That pass folds Slice(Shape(x)) but
    indexes x's dims with the slice positions, ignoring Shape's `start`, and
    reads only the first value of starts/ends/steps.

    Built here: Slice(Shape<start=1>(x[2,3,5,7]), 1, 3) must be [5,7] (not
    [3,5]); a reversed slice with an out-of-range end; a step of 2; and a slice
    over a symbolic dim, fed at 3 and 5."""
    kept = _assert_outputs_kept(slice_after_shape())
    n = kept.feeds["z"].shape[0]
    expected = {"from_offset": [5, 7], "reversed": [7, 5, 3, 2], "strided": [3, 7], "symbolic": [n]}
    for name, value in expected.items():
        np.testing.assert_array_equal(kept.outputs[name], np.array(value, np.int64), err_msg=name)
    assert kept.outputs["y"].shape == (6, 5, 7)


def dropout_masks_opset10() -> onnx.ModelProto:
    return _model("""
        g (float[2,8] x) => (float[2,8] y, bool[2,8] mask, float[2,8] masked, float[2,8] plain) {
            y, mask = Dropout <ratio = 0.0> (x)
            d, m = Dropout <ratio = 0.0> (x)
            mf = Cast <to = 1> (m)
            masked = Mul (d, mf)
            plain = Dropout <ratio = 0.5> (x)
        }""", opset=10)


def dropout_masks_opset13() -> onnx.ModelProto:
    return _model("""
        g (float[2,8] x) => (float[2,8] y, bool[2,8] mask, float[2,8] trained, bool[2,8] trained_mask) {
            y, mask = Dropout (x, zero_ratio, no)
            trained, trained_mask = Dropout (x, zero_ratio, yes)
        }""", opset=13, weights={"zero_ratio": np.array(0.0, np.float32), "no": np.array(False),
                                  "yes": np.array(True)})


@pytest.mark.parametrize("build", [dropout_masks_opset10, dropout_masks_opset13])
def test_onnxoptimizer_274_a_dropout_mask_that_is_read_keeps_its_values(build):
    """onnxoptimizer#274: `eliminate_nop_dropout` (0.4.2) changed outputs. That
    pass drops an opset<12 Dropout with ratio 0 by wiring *every* output to the
    input, the bool mask included (the flaw first reported as onnx#1672 and
    onnx/optimizer#40); the issue's fuzzed model itself is not described.

    Built here: ratio-0 Dropouts whose mask is a graph output or is read by
    another node, a plain inference Dropout, and (opset 13) ratio and
    training_mode as inputs, one with training_mode true. The mask must stay a
    bool output with the original's values and the data output equal the input.
    Opset 13 defines the inference mask (all true); before opset 12 the spec
    leaves it open and onnxruntime yields all false (the ONNX reference
    evaluator all true), so there the mask must stay what the runtime computes,
    which rules out replacing it by the input or by a constant."""
    kept = _assert_outputs_kept(build())
    x = kept.feeds["x"]
    assert dict(_interface(kept.model)[1])["mask"] == BOOL and kept.outputs["mask"].dtype == np.bool_
    np.testing.assert_array_equal(kept.outputs["y"], x)
    if "trained" in kept.outputs:  # opset 13
        assert kept.outputs["mask"].all() and kept.outputs["trained_mask"].all()
        np.testing.assert_array_equal(kept.outputs["trained"], x)
    else:
        np.testing.assert_array_equal(kept.outputs["plain"], x)
        np.testing.assert_array_equal(kept.outputs["masked"], x * kept.outputs["mask"])


def expand_cases() -> onnx.ModelProto:
    return _model("""
        g (float[3,1] x, float[N,4] xn, bool[2,1,3] b, int64[2,1,2,1,2] i)
          => (float[3,1] same, float[2,3,1] higher_rank, float[3,4] widened, float[N,4] symbolic_same,
              float[3,4] symbolic_widened, bool[2,4,3] bools, int64[2,55,2,1,2] ints) {
            same = Expand (x, s_1_1)
            higher_rank = Expand (x, s_2_1_1)
            widened = Expand (x, s_3_4)
            symbolic_same = Expand (xn, s_1_4)
            symbolic_widened = Expand (xn, s_3_4)
            bools = Expand (b, s_2_4_3)
            ints = Expand (i, s_1_55_1_1_1)
        }""", weights={"s_1_1": np.array([1, 1], np.int64), "s_2_1_1": np.array([2, 1, 1], np.int64),
                       "s_3_4": np.array([3, 4], np.int64), "s_1_4": np.array([1, 4], np.int64),
                       "s_2_4_3": np.array([2, 4, 3], np.int64),
                       "s_1_55_1_1_1": np.array([1, 55, 1, 1, 1], np.int64)})


def test_onnxoptimizer_275_expand_is_removed_only_when_it_broadcasts_to_the_input():
    """onnxoptimizer#275: `eliminate_nop_expand` (0.4.2) changed outputs; the
    reporter's output[1] of shape (2,55,2,1,2) was off by up to 6 and output[5]
    by 1. That pass drops an Expand whose constant shape broadcasts onto the
    input's declared dims.

    Built here: Expands that are no-ops (to [1,1], to [1,4] over a symbolic
    batch) next to ones that are not (a higher rank, a widened dim, a widened
    symbolic dim that is 1 at run time), on float, bool and int64 data, one
    yielding the (2,55,2,1,2) shape the issue reports. Fed at batch 1 and 3."""
    kept = _assert_outputs_kept(expand_cases(), **SETTINGS[expand_cases])
    shapes = {name: value.shape for name, value in kept.outputs.items()}
    assert shapes["higher_rank"] == (2, 3, 1) and shapes["widened"] == (3, 4)
    assert shapes["symbolic_widened"] == (3, 4) and shapes["ints"] == (2, 55, 2, 1, 2)
    assert shapes["bools"] == (2, 4, 3)


def pad_cases() -> onnx.ModelProto:
    return _model("""
        g (float[2,3,4] x) => (float[2,3,4] y, float[2,3,4] h, float[2,3,4] reflected, float[2,1,4] cropped,
                               float[2,3,4] one_axis, float[2,5,4] edged) {
            y = Pad (x, zeros6)
            h = Relu (x)
            reflected = Pad <mode = "reflect"> (h, zeros6)
            cropped = Pad (x, crop)
            one_axis = Pad (x, zeros2, fill, axis1)
            edged = Pad <mode = "edge"> (x, grow)
        }""", opset=18, weights={"zeros6": np.zeros(6, np.int64), "crop": np.array([0, -1, 0, 0, -1, 0], np.int64),
                                  "zeros2": np.zeros(2, np.int64), "fill": np.array(7.0, np.float32),
                                  "axis1": np.array([1], np.int64), "grow": np.array([0, 1, 0, 0, 1, 0], np.int64)})


def test_onnxoptimizer_278_a_zero_pad_between_graph_input_and_output_keeps_both_names():
    """onnxoptimizer#278: `eliminate_nop_pad` (0.4.2) changed outputs (same
    fuzzed case_03140 as #274/#279/#282/#283/#285). When that pass drops an
    all-zero Pad whose output is a graph output, it renames the Pad's *input*
    to the output's name, even when that input is a graph input or another
    graph output.

    Built here: y = Pad(x, zeros) straight from graph input to graph output;
    a zero reflect-Pad of a value that is itself a graph output; a zero Pad
    over one axis (opset 18 `axes`); and Pads that are not no-ops (negative
    pads that crop, edge padding). Inputs and outputs keep their names."""
    kept = _assert_outputs_kept(pad_cases())
    x = kept.feeds["x"]
    assert [i.name for i in kept.model.graph.input] == ["x"]
    np.testing.assert_array_equal(kept.outputs["y"], x)
    np.testing.assert_array_equal(kept.outputs["reflected"], np.maximum(x, 0))
    np.testing.assert_array_equal(kept.outputs["cropped"], x[:, 1:2, :])


def shape_folding_with_nan() -> onnx.ModelProto:
    then_branch = "then_shape = Shape (x)"
    else_branch = "inner = Shape <start = 1> (x)\n                   else_shape = Concat <axis = 0> (inner, inner)"
    return _model(f"""
        g (float[N,3,4] x, bool c) => (float[N,3,4] root, float[N,3,4] undefined, float[1] per_batch,
                                       int64[?] branch) {{
            root = Sqrt (x)
            zero = Sub (x, x)
            undefined = Div (zero, zero)
            s = Shape (x)
            n = Gather <axis = 0> (s, zero_index)
            static = Shape <start = 1> (x)
            cells = ReduceProd <keepdims = 1> (static)
            cells_f = Cast <to = 1> (cells)
            n_f = Cast <to = 1> (n)
            per_batch = Div (cells_f, n_f)
            branch = If (c) <then_branch = then_g () => (int64[?] then_shape) {{
                   {then_branch}
               }}, else_branch = else_g () => (int64[?] else_shape) {{
                   {else_branch}
               }}>
        }}""", weights={"zero_index": np.array([0], np.int64)})


def test_onnxoptimizer_279_shape_folding_keeps_symbolic_dims_and_nan_outputs():
    """onnxoptimizer#279: `eliminate_shape_op` (0.4.2) again, now with onnxruntime
    1.23.2, on the fuzzed case_03140 (outputs 14 and 15 off by up to 4e4) that
    #274/#278/#282/#283/#285 also report, under a diff that treats NaN pairs
    as equal.

    Built here: Shape over a symbolic batch next to a Shape<start=1> over
    static dims (only the latter may become a constant), a Shape of an outer
    value read inside an If branch, and outputs that are NaN (sqrt of
    negatives, 0/0): they must compare equal, NaN for NaN, and not be
    reported as a mismatch."""
    kept = _assert_outputs_kept(shape_folding_with_nan())
    n = kept.feeds["x"].shape[0]
    assert np.isnan(kept.outputs["undefined"]).all() and np.isnan(kept.outputs["root"]).any()
    np.testing.assert_allclose(kept.outputs["per_batch"], [12.0 / n])
    expected = [n, 3, 4] if kept.feeds["c"] else [3, 4, 3, 4]
    np.testing.assert_array_equal(kept.outputs["branch"], expected)


def reshape_cases() -> onnx.ModelProto:
    return _model("""
        g (float[N,3,4] x, float[0,5] e) => (float[N,3,4] copy_all, float[N,3,4] infer_middle, float[N,12] merged,
                                             float[N,3,4] infer_batch, float[5,0] zero_literal,
                                             float[0,5] zero_same, float[?,4] rows) {
            copy_all = Reshape (x, s_0_3_4)
            infer_middle = Reshape (x, s_0_m1_4)
            merged = Reshape (x, s_0_12)
            infer_batch = Reshape (x, s_m1_3_4)
            zero_literal = Reshape <allowzero = 1> (e, s_5_0)
            zero_same = Reshape <allowzero = 1> (e, s_0_5)
            rows = Reshape (x, s_m1_4)
        }""", weights={"s_0_3_4": np.array([0, 3, 4], np.int64), "s_0_m1_4": np.array([0, -1, 4], np.int64),
                       "s_0_12": np.array([0, 12], np.int64), "s_m1_3_4": np.array([-1, 3, 4], np.int64),
                       "s_5_0": np.array([5, 0], np.int64), "s_0_5": np.array([0, 5], np.int64),
                       "s_m1_4": np.array([-1, 4], np.int64)})


def test_onnxoptimizer_282_reshape_is_removed_only_when_it_keeps_the_shape():
    """onnxoptimizer#282: `eliminate_nop_reshape` (0.4.2) changed outputs on
    the shared fuzzed case_03140. That pass drops a Reshape whose constant
    shape matches the input's declared dims, reading every 0 as "copy this
    dim" (it ignores `allowzero`) and letting one -1 stand for one unknown dim.

    Built here: no-op Reshapes of a graph input straight to graph outputs
    (0s, -1 over a symbolic or a static dim) next to real ones ([0,12],
    [-1,4]) and `allowzero=1` Reshapes of an empty tensor, where 0 is a
    literal size. Fed at batch 3 and 5."""
    kept = _assert_outputs_kept(reshape_cases())
    x = kept.feeds["x"]
    n = x.shape[0]
    assert kept.outputs["merged"].shape == (n, 12) and kept.outputs["rows"].shape == (3 * n, 4)
    assert kept.outputs["zero_literal"].shape == (5, 0) and kept.outputs["zero_same"].shape == (0, 5)
    for name in ("copy_all", "infer_middle", "infer_batch"):
        np.testing.assert_array_equal(kept.outputs[name], x, err_msg=name)


def split_cases_opset18() -> onnx.ModelProto:
    return _model("""
        g (float[2,6] x) => (float[2,6] whole, float[2,6] sized, float[2,6] negative_axis, float[2,2] first_used,
                             float[1,6] top, float[1,6] bottom) {
            whole = Split <axis = 1, num_outputs = 1> (x)
            sized = Split <axis = 1> (x, six)
            r = Relu (x)
            negative_axis = Split <axis = -1> (r, six)
            p, q = Split <axis = 1> (x, two_four)
            first_used = Neg (p)
            top, bottom = Split <axis = 0, num_outputs = 2> (x)
        }""", opset=18, weights={"six": np.array([6], np.int64), "two_four": np.array([2, 4], np.int64)})


def split_cases_opset11() -> onnx.ModelProto:
    return _model("""
        g (float[2,6] x) => (float[2,6] whole, float[2,6] sized, float[2,2] first_used) {
            whole = Split <axis = 1> (x)
            sized = Split <axis = 1, split = [6]> (x)
            p, q = Split <axis = -1, split = [2, 4]> (x)
            first_used = Neg (p)
        }""", opset=11)


@pytest.mark.parametrize("build", [split_cases_opset18, split_cases_opset11])
def test_onnxoptimizer_283_only_a_whole_split_is_removed(build):
    """onnxoptimizer#283: `eliminate_nop_split` (0.4.2) changed outputs on the
    shared fuzzed case_03140. That pass drops a Split with one output, checking
    the size only when the split sizes are readable as constants.

    Built here: one-output Splits (no sizes, `num_outputs=1`, sizes as
    attribute or input, negative axis) from graph input to graph output, and
    two-output Splits where only one part is read or both are outputs: those
    must keep cutting."""
    kept = _assert_outputs_kept(build())
    x = kept.feeds["x"]
    for name in ("whole", "sized"):
        np.testing.assert_array_equal(kept.outputs[name], x, err_msg=name)
    np.testing.assert_array_equal(kept.outputs["first_used"], -x[:, :2])
    if "top" in kept.outputs:
        np.testing.assert_array_equal(kept.outputs["top"], x[:1])
        np.testing.assert_array_equal(kept.outputs["bottom"], x[1:])


def unit_operand_cases() -> onnx.ModelProto:
    return _model("""
        g (float[2,4] x, int64[2,4] i, float[2,5] w)
          => (float[2,4] times_one, float[2,4] plus_zero, float[3,2,4] rank_raising, float[2,4] zero_minus,
              float[2,4] one_over, float[2,4] to_the_one, int64[2,4] int_div_one, float[2,4] sibling_ones,
              float[2,4] sibling_zeros, float[2,4] own_ones) {
            times_one = Mul (x, one)
            plus_zero = Add (zero1, x)
            rank_raising = Add (x, zeros_3_1_1)
            zero_minus = Sub (zero1, x)
            one_over = Div (one, x)
            to_the_one = Pow (x, one)
            int_div_one = Div (i, int_one)
            p, q = Split <axis = 1> (w, four_one)
            p_shape = Shape (p)
            ones = ConstantOfShape <value = float[1] {1.0}> (p_shape)
            sibling_ones = Mul (q, ones)
            zeros = ConstantOfShape <value = float[1] {0.0}> (p_shape)
            sibling_zeros = Add (q, zeros)
            x_shape = Shape (x)
            own = ConstantOfShape <value = float[1] {1.0}> (x_shape)
            own_ones = Mul (x, own)
        }""", weights={"one": np.array(1.0, np.float32), "zero1": np.zeros(1, np.float32),
                       "zeros_3_1_1": np.zeros((3, 1, 1), np.float32), "int_one": np.array(1, np.int64),
                       "four_one": np.array([4, 1], np.int64)})


def test_onnxoptimizer_285_a_unit_operand_is_dropped_only_where_it_changes_nothing():
    """onnxoptimizer#285: `eliminate_nop_with_unit` (0.4.2) changed outputs on
    the shared fuzzed case_03140. That pass drops x+0, x*1, x-0, x/1, x**1 and
    x op ConstantOfShape(Shape(y)) when it takes y for x; it compares the
    Shape's producer *node* with x's, so two outputs of one Split pass as the
    same value.

    Built here: true no-ops from graph input to graph output; a zero that
    raises the rank; 0-x and 1/x (the unit on the left of a non-commutative
    op); integer x/1; and q*ones(shape of p), q+zeros(shape of p) for Split
    siblings p [2,4] and q [2,1], which broadcast q to [2,4]."""
    kept = _assert_outputs_kept(unit_operand_cases())
    x, w = kept.feeds["x"], kept.feeds["w"]
    for name in ("times_one", "plus_zero", "to_the_one", "own_ones"):
        np.testing.assert_array_equal(kept.outputs[name], x, err_msg=name)
    assert kept.outputs["rank_raising"].shape == (3, 2, 4)
    np.testing.assert_array_equal(kept.outputs["zero_minus"], -x)
    np.testing.assert_allclose(kept.outputs["one_over"], 1 / x, rtol=1e-6)
    for name in ("sibling_ones", "sibling_zeros"):
        np.testing.assert_array_equal(kept.outputs[name], np.broadcast_to(w[:, 4:], (2, 4)), err_msg=name)


def consecutive_slices() -> onnx.ModelProto:
    return _model("""
        g (float[4,10,6] x) => (float[4,4,6] same_axis, float[4,7,2] other_axis, float[4,2,6] negative_axis,
                                float[4,3,6] reversed, float[1,10,6] three_deep) {
            s1 = Slice (x, two, nine, one)
            same_axis = Slice (s1, one, five, one)
            other_axis = Slice (s1, zero, two, two)
            negative_axis = Slice (s1, minus3, minus1, minus2)
            reversed = Slice (s1, five, zero, one, minus2)
            t1 = Slice (x, zero, three, zero)
            t2 = Slice (t1, one, three, zero)
            three_deep = Slice (t2, one, two, zero)
        }""", weights={name: np.array([v], np.int64) for name, v in
                       {"zero": 0, "one": 1, "two": 2, "three": 3, "five": 5, "nine": 9, "minus1": -1,
                        "minus2": -2, "minus3": -3}.items()})


def test_onnxslim_277_consecutive_slices_on_one_axis_compose():
    """onnxslim#277: onnxslim's EliminationSlice pattern merged Slice(Slice(x))
    by concatenating the two slices' starts/ends/axes/steps; when both cut the
    same axis the merged Slice was wrong, and with several Slice readers of one
    Slice the graph was already half rewritten when an overlap was found
    (fixed by refusing overlapping axes up front).

    Built here: one Slice read by four Slices: same axis, another axis, the
    same axis written as -2 (distinct numbers, same axis), and a negative step
    on the same axis; plus a chain of three Slices on one axis. Checked
    against numpy."""
    kept = _assert_outputs_kept(consecutive_slices())
    x = kept.feeds["x"]
    s1 = x[:, 2:9, :]
    expected = {"same_axis": s1[:, 1:5, :], "other_axis": s1[:, :, 0:2], "negative_axis": s1[:, -3:-1, :],
                "reversed": s1[:, 5:0:-2, :], "three_deep": x[0:3][1:3][1:2]}
    for name, value in expected.items():
        np.testing.assert_array_equal(kept.outputs[name], value, err_msg=name)


def distinct_constants() -> onnx.ModelProto:
    return _model("""
        g (float[N,3] x, float[N,3] y, float s, double d)
          => (float[N,3] initializers, float[N,3] constants, float[N,3] plus_inf, float[N,3] minus_inf,
              float scalar_plus, float[1] vector_plus, double double_half) {
            a = Div (x, two)
            b = Mul (y, four)
            initializers = Add (a, b)
            c2 = Constant <value = float {2.0}> ()
            c4 = Constant <value = float {4.0}> ()
            ca = Div (x, c2)
            cb = Mul (y, c4)
            constants = Add (ca, cb)
            ax = Abs (x)
            positive = Add (ax, one_scalar)
            plus_inf = Div (positive, zero_pos)
            minus_inf = Div (positive, zero_neg)
            scalar_plus = Add (s, one_scalar)
            vector_plus = Add (s, one_vector)
            double_half = Div (d, two_double)
        }""", weights={"two": np.array(2.0, np.float32), "four": np.array(4.0, np.float32),
                       "zero_pos": np.array(0.0, np.float32), "zero_neg": np.array(-0.0, np.float32),
                       "one_scalar": np.array(1.0, np.float32), "one_vector": np.array([1.0], np.float32),
                       "two_double": np.array(2.0, np.float64)})


def test_onnxsim_265_distinct_scalar_constants_are_not_merged():
    """onnxsim#265: on x/2 + y*4 exported from PyTorch, onnxsim 0.4.19 changed
    the divisor (one scalar constant took the other's value); a commenter's failures
    went away with `--skip-optimization eliminate_duplicate_initializer`.

    Built here: x/2 + y*4 with scalar initializers and again with Constant
    nodes; near-duplicates a merge must tell apart: 0.0 and -0.0 (equal as
    numbers, they give +inf and -inf), 1.0 as a scalar and as [1] (the rank of
    the result differs), and 2.0 as float and as double. Checked against numpy."""
    kept = _assert_outputs_kept(distinct_constants())
    x, y, s = kept.feeds["x"], kept.feeds["y"], kept.feeds["s"]
    want = x / np.float32(2) + y * np.float32(4)
    for name in ("initializers", "constants"):
        np.testing.assert_allclose(kept.outputs[name], want, rtol=1e-6, err_msg=name)
    assert np.isposinf(kept.outputs["plus_inf"]).all() and np.isneginf(kept.outputs["minus_inf"]).all()
    assert kept.outputs["scalar_plus"].shape == () and kept.outputs["vector_plus"].shape == (1,)
    np.testing.assert_allclose(kept.outputs["vector_plus"], [s + 1])
    assert kept.outputs["double_half"].dtype == np.float64


# ----------------------------------------------------------------------------------------------
# Every situation: a second optimize finds nothing left to change; and each is live: the peer's
# wrong rewrite, applied by hand, is caught by the comparison above

SETTINGS = {
    # Folding BN into weights rounds differently, by up to ~2e-7 of the output's
    # largest magnitude here (4e-3 on the near-zero variance output of ~2e4).
    conv_batchnorm: dict(rtol=1e-5, atol=1e-5, of_max=1e-6),
    # A widened symbolic dim broadcasts only from 1 (or from 3 itself).
    expand_cases: dict(dims_list=({"N": 1}, {"N": 3})),
}
ALL_SITUATIONS = [conv_batchnorm, consecutive_idempotent_ops, shape_start_end, slice_after_shape,
                  dropout_masks_opset10, dropout_masks_opset13, expand_cases, pad_cases, shape_folding_with_nan,
                  reshape_cases, split_cases_opset18, split_cases_opset11, unit_operand_cases,
                  consecutive_slices, distinct_constants]


@pytest.mark.parametrize("build", ALL_SITUATIONS, ids=lambda b: b.__name__)
def test_a_second_optimize_changes_nothing(build):
    """Optimizing the optimized model again reaches the same graph: the
    pipeline's fixed point is a fixed point, on each peer situation."""
    once, first = optimize(build())
    _, report = optimize(once.to_onnx())
    assert report["nodes_before"] == report["nodes_after"] == first["nodes_after"]
    assert report["op_counts_after"] == first["op_counts_after"]
    assert not any(run["modified"] for run in report["passes"])
    assert report["check"]["first_mismatch"] is None


def _edited(model: onnx.ModelProto, edit) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    edit(copy.graph)
    return copy


def _replace(graph: onnx.GraphProto, output: str, op: str, inputs: list, **attrs) -> None:
    """Replaces the node that produces `output` by `op` (same outputs unless given)."""
    outputs = attrs.pop("outputs", None)
    i, node = next((i, n) for i, n in enumerate(graph.node) if output in n.output)
    graph.node.remove(node)
    graph.node.insert(i, onnx.helper.make_node(op, inputs, outputs or list(node.output), **attrs))


def _constant(graph: onnx.GraphProto, output: str, value) -> None:
    _replace(graph, output, "Constant", [], value=numpy_helper.from_array(np.asarray(value)))


def _fold_batchnorms(model: onnx.ModelProto, epsilon: bool = True, in_place: bool = False,
                     ignore_readers: bool = False) -> onnx.ModelProto:
    """Conv -> BatchNormalization folded into the Conv's weights and bias, as a
    fusion pass would: W' = W * k, B' = (B - mean) * k + shift, k = scale /
    sqrt(var + eps). The flags make the mistakes a fusion can make: dropping
    eps, rescaling a weight in place that another Conv shares, and fusing a
    Conv whose output is read elsewhere."""
    def edit(graph):
        weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        outputs = {o.name for o in graph.output}
        for bn in [n for n in graph.node if n.op_type == "BatchNormalization"]:
            conv = next(n for n in graph.node if bn.input[0] in n.output)
            readers = [n for n in graph.node if conv.output[0] in n.input]
            if not ignore_readers and (len(readers) > 1 or conv.output[0] in outputs):
                continue
            scale, shift, mean, var = (weights[name] for name in bn.input[1:])
            eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5) if epsilon else 0.0
            k = scale / np.sqrt(var + np.float32(eps))
            w = weights[conv.input[1]] * k[:, None, None, None]
            b = ((weights[conv.input[2]] if len(conv.input) > 2 else 0) - mean) * k + shift
            w_name = conv.input[1] if in_place else bn.output[0] + "_W"
            # The fused Conv writes the BN's output; fusing regardless of other
            # readers leaves them (here a graph output) reading normalized values.
            fused_out = conv.output[0] if ignore_readers else bn.output[0]
            for t in [t for t in graph.initializer if t.name == w_name]:
                graph.initializer.remove(t)
            graph.initializer.extend([numpy_helper.from_array(w.astype(np.float32), w_name),
                                      numpy_helper.from_array(b.astype(np.float32), bn.output[0] + "_B")])
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in conv.attribute}
            _replace(graph, conv.output[0], "Conv", [conv.input[0], w_name, bn.output[0] + "_B"],
                     outputs=[fused_out], **attrs)
            if fused_out == bn.output[0]:
                graph.node.remove(bn)
            else:
                _replace(graph, bn.output[0], "Identity", [fused_out])
    return _edited(model, edit)


def test_a_correct_batchnorm_fold_passes_the_255_tolerance():
    """The tolerance for onnxoptimizer#255 admits a correct fold (its rounding is
    of the size the issue reports) and still catches the wrong ones."""
    original = conv_batchnorm()
    assert _first_difference(original, _fold_batchnorms(original), **SETTINGS[conv_batchnorm]) is None
    for mistake in ("epsilon", "in_place", "ignore_readers"):
        flags = {"epsilon": mistake != "epsilon", "in_place": mistake == "in_place",
                 "ignore_readers": mistake == "ignore_readers"}
        assert _first_difference(original, _fold_batchnorms(original, **flags), **SETTINGS[conv_batchnorm]), mistake


def _drop_first_dropout_wiring_all_outputs_to_its_input(graph):
    dropout = next(n for n in graph.node if n.op_type == "Dropout")
    graph.node.remove(dropout)
    graph.node.extend(onnx.helper.make_node("Identity", [dropout.input[0]], [out]) for out in dropout.output)


def _fold_ratio0_mask_to_true(graph):
    dropout = next(n for n in graph.node if "mask" in n.output)
    graph.node.remove(dropout)
    graph.node.extend([onnx.helper.make_node("Identity", ["x"], ["y"]),
                       onnx.helper.make_node("Constant", [], ["mask"],
                                             value=numpy_helper.from_array(np.ones((2, 8), np.bool_)))])


def _rename_graph_input_to_pad_output(graph):
    pad = next(n for n in graph.node if "y" in n.output)
    graph.node.remove(pad)
    graph.input[0].name = "y"
    for n in graph.node:
        n.input[:] = ["y" if name == "x" else name for name in n.input]


def _merge_slices_by_concatenation(graph):
    graph.initializer.extend(numpy_helper.from_array(np.array(v, np.int64), name) for name, v in
                             {"m_starts": [2, 1], "m_ends": [9, 5], "m_axes": [1, 1]}.items())
    _replace(graph, "same_axis", "Slice", ["x", "m_starts", "m_ends", "m_axes"])


# The wrong rewrite each peer issue describes (or its pass's code makes), applied by hand.
PEER_REWRITES = {
    "onnxoptimizer#255 fold without eps": (conv_batchnorm, lambda m: _fold_batchnorms(m, epsilon=False)),
    "onnxoptimizer#259 Reshape(Reshape(x)) -> Reshape(x)": (
        consecutive_idempotent_ops,
        lambda m: _edited(m, lambda g: _replace(g, "copy_dim", "Reshape", ["x", "zero_minus1"]))),
    "onnxoptimizer#262 Shape folded at batch 1": (
        shape_start_end, lambda m: _edited(m, lambda g: _constant(g, "all", np.array([1, 3, 4], np.int64)))),
    "onnxoptimizer#263 slice of Shape ignoring start": (
        slice_after_shape, lambda m: _edited(m, lambda g: _constant(g, "from_offset", np.array([3, 5], np.int64)))),
    "onnxoptimizer#274 mask wired to the input": (
        dropout_masks_opset13, lambda m: _edited(m, _drop_first_dropout_wiring_all_outputs_to_its_input)),
    "onnxoptimizer#274 opset 10 mask folded to true": (
        dropout_masks_opset10, lambda m: _edited(m, _fold_ratio0_mask_to_true)),
    "onnxoptimizer#275 widening Expand dropped": (
        expand_cases, lambda m: _edited(m, lambda g: _replace(g, "symbolic_widened", "Identity", ["xn"]))),
    "onnxoptimizer#278 graph input renamed": (pad_cases, lambda m: _edited(m, _rename_graph_input_to_pad_output)),
    "onnxoptimizer#279 symbolic dim folded": (
        shape_folding_with_nan, lambda m: _edited(m, lambda g: _constant(g, "n", np.array([1], np.int64)))),
    "onnxoptimizer#282 allowzero ignored": (
        reshape_cases, lambda m: _edited(m, lambda g: _replace(g, "zero_literal", "Identity", ["e"]))),
    "onnxoptimizer#283 two-way Split dropped": (
        split_cases_opset18, lambda m: _edited(m, lambda g: _replace(g, "p", "Identity", ["x"], outputs=["p"]))),
    "onnxoptimizer#285 Split sibling taken for the operand": (
        unit_operand_cases, lambda m: _edited(m, lambda g: _replace(g, "sibling_ones", "Identity", ["q"]))),
    "onnxslim#277 slices on one axis concatenated": (
        consecutive_slices, lambda m: _edited(m, _merge_slices_by_concatenation)),
    "onnxsim#265 distinct scalars merged": (
        distinct_constants, lambda m: _edited(m, lambda g: _replace(g, "a", "Div", ["x", "four"]))),
}


@pytest.mark.parametrize("issue", PEER_REWRITES)
def test_each_situation_catches_the_peer_rewrite(issue):
    """Each situation is live: the peer's wrong rewrite, applied by hand, is
    caught by the same comparison the tests above apply to pyonnxopt."""
    build, rewrite = PEER_REWRITES[issue]
    original = build()
    assert _first_difference(original, rewrite(original), **SETTINGS.get(build, {})) is not None
